"""The CPU fast paths of hf_seq: every shortcut that depends on tensor *values*, behind one predicate each.

Some of hf_seq's CPU speed comes from code whose shapes or branches depend on what a tensor holds: skipping padded
rows, leaving out a mask when nothing is padded. Reading a value on the host is a graph break under ``torch.compile``
(an error with ``fullgraph=True`` and in ``torch.export`` / ONNX export) and a device synchronisation on an
accelerator, so each fast path runs only **eager, on CPU, outside tracing** (:func:`reads_values`); everywhere else
the code takes one static-shape path without host reads, with the same values. The models ask the functions below
and never branch on the device or the tracing state themselves.

======================================  ===========================================  ===========  ====================
fast path (predicate; code)             what it saves on CPU                         runs         where used
======================================  ===========================================  ===========  ====================
no mask when nothing is padded          attention / pooling / recurrence without a   eager CPU    modeling_bert,
(:func:`drop_all_ones_mask`)            mask (static path: the mask is kept)                      modeling_transformer,
                                                                                                  modeling_rnn,
                                                                                                  modeling_rnn_seq2seq,
                                                                                                  recurrent_kernels
skip the repair of rows without a       two elementwise passes of ``sdpa_attend``    eager CPU    attention
visible key (:func:`every_row_sees_a_   (static path: ``mask | ~has_key``, then
key`)                                   those rows zeroed)
padding-free feed-forward               the encoder FFN of padded rows (static path: eager CPU    modeling_transformer,
(:func:`padding_free_rows`;             every row, padding put back with ``where``)               blocks
:func:`on_token_rows`)
packed / aligned recurrence             no recurrent work on padding, or oneDNN's    eager CPU    recurrent_kernels
(:func:`packs_padding`)                 faster unpacked LSTM by fill (static path:
                                        rows aligned, carry column, no host read)
fused LM-head loss                      backward over the labelled rows only         eager CPU    losses
(:func:`fuses_lm_loss`)                 (static path: ``F.linear`` + one masked
                                        cross-entropy)
cheaper CPU dropout mask                two keep decisions per random int32          eager CPU    blocks
(:func:`cheap_dropout`;                 (static path: ``nn.Dropout``)
:func:`int32_dropout`)
self-attention KV cache appended in     a ``torch.cat`` copy of the cache per        eager, any   modeling_transformer
place (:func:`appends_in_place`;        decoding step (static path: ``torch.cat``)   device
:class:`AppendBufferLayer`)
what a ``generate()`` call knows        the host reads of a decoding step: the ids   eager CPU    modeling_transformer,
across its steps (:class:`Generation    ``generate()`` chose itself are not checked               modeling_rnn,
Steps`, :func:`decodes_generated_ids`,  again, the source mask's checks are made                  modeling_rnn_seq2seq,
:func:`remembered`)                     once per call (static path: no such reads)                attention
======================================  ===========================================  ===========  ====================

One switch turns every eager-CPU fast path off: inside ``with hf_seq.fast_paths.disabled():`` (or with the
environment variable ``HF_SEQ_FAST_PATHS=0`` set when hf_seq is imported) eager CPU code runs the code that an
accelerator runs eagerly, which is the static path of compiled and exported code except for the in-place KV cache
(no host read, so it stays on), with the same values. That is how the tests check each fast path against the static
path. The switch is for speed only: the value checks (ids and labels in range, a mask with holes or with an empty
row; :mod:`.validation`) have their own switch, ``hf_seq.validation.value_checks_disabled()`` /
``HF_SEQ_VALUE_CHECKS=0``, so a run with the fast paths off still gets their errors; with both off, eager CPU code
reads no tensor value on the host, as on an accelerator (how the tests prove that path free of host reads).

The code of each fast path lives here too (:func:`int32_dropout`, :func:`on_token_rows`, :class:`AppendBufferLayer`),
so the model files read top-down as the plain math of the static path, each fast path named on the one line that
switches it on. Config and modelling files import this module relatively (``from .fast_paths import ...``), so
``save_pretrained`` copies it next to the weights for ``trust_remote_code``.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer


class Switch:
    """A process-wide on/off switch read at each call (``.on``): on unless the environment variable ``env_var`` says
    0 / false / off / no when hf_seq is imported. The fast paths have one, the value checks another."""

    def __init__(self, env_var: str) -> None:
        self.on = os.environ.get(env_var, "1").strip().lower() not in ("0", "false", "off", "no")

    @contextmanager
    def off(self) -> Iterator[None]:
        """Within the block the switch is off; it goes back to its previous position after."""
        previous, self.on = self.on, False
        try:
            yield
        finally:
            self.on = previous


_FAST_PATHS = Switch("HF_SEQ_FAST_PATHS")


def is_tracing() -> bool:
    """True while ``torch.compile``, ``torch.export`` (and so ``torch.onnx.export(dynamo=True)``) or ``torch.jit``
    trace the code: branches that read tensor values or produce data-dependent shapes must not run then."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def host_reads_free(tensor: torch.Tensor) -> bool:
    """True where reading ``tensor``'s values on the host costs no synchronisation and breaks no graph: a CPU
    tensor, eager (not traced). The rule under both switches: the fast paths (:func:`reads_values`) and the value
    checks (``validation.checks_values``)."""
    return tensor.device.type == "cpu" and not is_tracing()


def enabled() -> bool:
    """Whether the fast paths are switched on (see :func:`disabled`); they still run only where their rule allows."""
    return _FAST_PATHS.on


def disabled() -> AbstractContextManager[None]:
    """Within the block every fast path is off: eager CPU tensors take the static path of compiled, exported and
    accelerator code (masks kept, no packing, ``nn.Dropout``, every row through the feed-forward, the unfused LM-head
    loss). The value checks still run (their own switch: ``validation.value_checks_disabled()``)."""
    return _FAST_PATHS.off()


def reads_values(tensor: torch.Tensor) -> bool:
    """True where the fast paths are on and reading ``tensor``'s values on the host is free
    (:func:`host_reads_free`): every data-dependent CPU fast path runs only then."""
    return _FAST_PATHS.on and host_reads_free(tensor)


def drop_all_ones_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """``None`` for a mask with nothing masked out (all ones / True) where :func:`reads_values`, so the caller runs
    without a mask; the mask itself otherwise (also on the static path, where a mask of ones is kept)."""
    if mask is not None and reads_values(mask) and bool(mask.all()):
        return None
    return mask


def every_row_sees_a_key(has_key: torch.Tensor) -> bool:
    """True where :func:`reads_values` and every query row of ``has_key`` ``(..., T_q, 1)`` sees at least one key:
    ``sdpa_attend`` then skips the repair of fully masked rows. False on the static path (the repair always runs)."""
    return reads_values(has_key) and bool(has_key.all())


def padding_free_rows(token_mask: torch.Tensor) -> torch.Tensor | None:
    """The flat indices ``(N_tok,)`` of the real tokens of ``token_mask`` ``(B, T)`` where :func:`reads_values` (a
    data-dependent length), for a feed-forward that skips padded rows; ``None`` on the static path."""
    if not reads_values(token_mask):
        return None
    return token_mask.reshape(-1).nonzero().squeeze(1)


def packs_padding(mask: torch.Tensor) -> bool:
    """True where :func:`reads_values`: the recurrent core validates the mask (one block of tokens per row), packs
    a padded batch or runs it aligned by its fill. False: the static aligned path, the mask trusted as it is."""
    return reads_values(mask)


def fuses_lm_loss(hidden: torch.Tensor) -> bool:
    """True where :func:`reads_values` on the LM head's input: its loss runs the fused projection + cross-entropy
    whose backward selects the labelled rows (``nonzero``). False: ``F.linear`` + a masked cross-entropy."""
    return reads_values(hidden)


def cheap_dropout(x: torch.Tensor) -> bool:
    """True where :func:`reads_values`: ``blocks.Dropout`` draws its mask from random int32s (two decisions each)
    instead of ``nn.Dropout``'s one random number per element (whose compiled and device kernels are fused)."""
    return reads_values(x)


def appends_in_place() -> bool:
    """True outside tracing, on any device: the self-attention KV cache writes each step into a doubling buffer (its
    storage-pointer bookkeeping cannot be traced, but reads no tensor value, so an eager accelerator keeps it and
    :func:`disabled` leaves it on). False under tracing: it appends with ``torch.cat``."""
    return not is_tracing()


# ---------------------------------------------------------------------------------------------------------------
# The fast paths' code: what the models call where the predicates above say yes
# ---------------------------------------------------------------------------------------------------------------
def int32_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Dropout of ``x`` with probability ``p`` in (0, 1), scaled by ``1 / (1 - p)`` as ``nn.Dropout``, from a cheaper
    random mask (:func:`cheap_dropout`).

    ``torch``'s CPU dropout draws one random number per element (``bernoulli_``), which costs more than the matmuls of
    a small model's layer. Here one 31-bit random integer gives two independent keep decisions (its low 16 bits and its
    high 15 bits, compared with ``p`` scaled to 2^16 and 2^15, so ``p`` is honoured to within 2^-15)."""
    n = x.numel()
    bits = torch.empty((n + 1) // 2, dtype=torch.int32).random_()  # uniform in [0, 2^31)
    keep = torch.cat([bits.bitwise_and(0xFFFF) >= round(p * 65536), bits.bitwise_right_shift(16) >= round(p * 32768)])[
        :n
    ]
    return x * keep.view_as(x).to(x.dtype).mul_(1.0 / (1.0 - p))


def on_token_rows(
    sublayer: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, token_rows: torch.Tensor
) -> torch.Tensor:
    """``sublayer`` (a position-wise function of ``(N, d)`` rows) on the rows ``token_rows`` of ``x`` ``(B, T, d)``
    only (:func:`padding_free_rows`); the other rows (padding) pass through unchanged."""
    flat = x.reshape(-1, x.shape[-1])  # (B*T, d)
    rows = sublayer(flat.index_select(0, token_rows))  # (N_tok, d)
    return flat.index_copy(0, token_rows, rows).view_as(x)  # (B, T, d)


class AppendBufferLayer(DynamicLayer):
    """A ``DynamicLayer`` (self-attention KV cache of one decoder block) that appends into over-allocated buffers.

    ``DynamicLayer`` grows with ``torch.cat`` and so copies the whole cache at every decoding step (quadratic in the
    generated length); this layer doubles its capacity when full and writes each new step in place, so a step costs
    O(new tokens). ``self.keys`` / ``self.values`` stay views ``(B, nh, T, hs)`` of the valid prefix, so every inherited
    operation (beam-search ``reorder_cache``, ``crop``, ``batch_select_indices``...) keeps working: when one of them
    replaces ``self.keys`` by a new tensor, the next ``update`` adopts it as the new buffer. While traced
    (``torch.compile`` / export) it appends with ``torch.cat`` like ``DynamicLayer``: buffer bookkeeping compares
    storage pointers, which a tracer cannot guard on.
    """

    _key_buffer: torch.Tensor | None = None
    _value_buffer: torch.Tensor | None = None

    def _in_sync(self, key_states: torch.Tensor) -> bool:
        kb, vb = self._key_buffer, self._value_buffer
        return (
            kb is not None
            and self.keys.dim() == 4
            and self.keys.data_ptr() == kb.data_ptr()
            and self.values.data_ptr() == vb.data_ptr()
            and self.keys.shape[:2] == key_states.shape[:2]
            and self.keys.stride() == kb.stride()
        )

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not appends_in_place():
            return super().update(key_states, value_states, *args, **kwargs)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        past = self.get_seq_length()
        new = key_states.shape[-2]
        if not self._in_sync(key_states) or past + new > self._key_buffer.shape[-2]:
            batch, heads, _, head_dim = key_states.shape
            capacity = max(64, 2 * (past + new))
            key_buffer = key_states.new_empty(batch, heads, capacity, head_dim)  # (B, nh, capacity, hs)
            value_buffer = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
            if past:
                key_buffer[:, :, :past] = self.keys
                value_buffer[:, :, :past] = self.values
            self._key_buffer, self._value_buffer = key_buffer, value_buffer
        self._key_buffer[:, :, past : past + new] = key_states
        self._value_buffer[:, :, past : past + new] = value_states
        self.keys = self._key_buffer[:, :, : past + new]  # (B, nh, T, hs) views of the valid prefix
        self.values = self._value_buffer[:, :, : past + new]
        return self.keys, self.values

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()


class GenerationSteps:
    """What one ``generate()`` call of one model knows across its decoding steps, so that a step reads on the host
    only what transformers' own decoding loop reads (its stopping check). Set by ``modeling_utils.
    GenerativeHeadMixin.generate`` (:func:`generation_steps`); consulted only where :func:`reads_values`.

    * ``decoder``: the module whose forward checks the ids of each step (ids in ``[0, vocab)``: two values read on
      the host). Once ``generate()`` has appended its first token (``tokens_appended``, set when transformers calls
      ``_update_model_kwargs_for_generation``) every id that module gets is either the caller's prompt, checked by
      the prompt's forward, or a token ``generate()`` chose itself: an index into the output vocabulary, which is no
      larger than the embedding the ids index (``trusts_ids``), or its pad / eos id, checked against that vocabulary
      before decoding starts (``validation.check_generate_call``). :func:`decodes_generated_ids`.
    * :meth:`remember`: a value derived from a tensor that stays the same object through the loop (the source
      ``attention_mask`` of an encoder-decoder, the cross-attention mask built from it) is computed once per call,
      keyed on the tensor object and its version counter (an in-place edit computes it again).
    """

    def __init__(self, model: Any, decoder: Any, trusts_ids: bool) -> None:
        self.model = model
        self.decoder = decoder
        self.trusts_ids = trusts_ids
        self.tokens_appended = False
        self._memo: dict[tuple[int, str], tuple[torch.Tensor, int, Any]] = {}

    def remember(self, tensor: torch.Tensor, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per (``tensor`` object, ``name``) while ``tensor`` is not modified in place
        (a computed None is remembered too)."""
        hit = self._entry(tensor, name)
        if hit is not None:
            return hit[2]
        value = compute()
        self._memo[(id(tensor), name)] = (tensor, tensor._version, value)  # holds tensor: its id stays unique
        return value

    def recall(self, tensor: torch.Tensor, name: str) -> Any:
        """What :meth:`remember` stored for (``tensor``, ``name``), None if nothing (or ``tensor`` changed since)."""
        hit = self._entry(tensor, name)
        return None if hit is None else hit[2]

    def _entry(self, tensor: torch.Tensor, name: str) -> tuple[torch.Tensor, int, Any] | None:
        """The stored (tensor, version, value) for (``tensor``, ``name``) if ``tensor`` is unchanged since."""
        hit = self._memo.get((id(tensor), name))
        return hit if hit is not None and hit[0] is tensor and hit[1] == tensor._version else None


_GENERATION_STEPS: contextvars.ContextVar[GenerationSteps | None] = contextvars.ContextVar(
    "hf_seq_generation_steps", default=None
)


@contextmanager
def generation_steps(steps: GenerationSteps) -> Iterator[GenerationSteps]:
    """Within the block (one ``generate()`` call, in this thread or task) :func:`current_generation_steps` is
    ``steps``."""
    token = _GENERATION_STEPS.set(steps)
    try:
        yield steps
    finally:
        _GENERATION_STEPS.reset(token)


def current_generation_steps() -> GenerationSteps | None:
    """The :class:`GenerationSteps` of the ``generate()`` call running here, None outside one."""
    return _GENERATION_STEPS.get()


def decodes_generated_ids(module: Any, ids: torch.Tensor | None) -> bool:
    """True where :func:`reads_values` and ``module`` runs a decoding step of its model's own ``generate()`` past
    the prompt: the ``ids`` it gets are tokens ``generate()`` chose (see :class:`GenerationSteps`), so their range
    check is skipped. False everywhere else: a forward called directly, the prompt's forward, assisted decoding."""
    if ids is None or not reads_values(ids):
        return False
    steps = _GENERATION_STEPS.get()
    return steps is not None and steps.decoder is module and steps.trusts_ids and steps.tokens_appended


def remembered(tensor: torch.Tensor, name: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` — once per ``generate()`` call for the same ``tensor`` object (:meth:`GenerationSteps.remember`)
    where :func:`reads_values`; every time elsewhere. ``compute`` must depend on nothing but ``tensor``."""
    steps = _GENERATION_STEPS.get() if reads_values(tensor) else None
    return compute() if steps is None else steps.remember(tensor, name, compute)


def recalled(tensor: torch.Tensor, name: str) -> Any:
    """What :func:`remembered` stored for ``tensor`` in the running ``generate()`` call (where
    :func:`reads_values`), else None."""
    steps = _GENERATION_STEPS.get() if reads_values(tensor) else None
    return None if steps is None else steps.recall(tensor, name)


__all__ = [
    "AppendBufferLayer",
    "GenerationSteps",
    "current_generation_steps",
    "decodes_generated_ids",
    "generation_steps",
    "recalled",
    "remembered",
    "appends_in_place",
    "cheap_dropout",
    "disabled",
    "drop_all_ones_mask",
    "enabled",
    "every_row_sees_a_key",
    "fuses_lm_loss",
    "host_reads_free",
    "int32_dropout",
    "is_tracing",
    "on_token_rows",
    "packs_padding",
    "padding_free_rows",
    "reads_values",
]
