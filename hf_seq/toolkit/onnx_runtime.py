"""ONNX Runtime deployment of hf_seq models: exported graphs decoded by ``transformers``' own ``generate()``.

:func:`to_onnx` exports a model as ONNX graphs with dynamic batch and length (``torch.onnx.export(dynamo=True)``),
:func:`load_onnxruntime` loads such a folder as a model class in ``optimum.onnxruntime``'s conventions
(:class:`ORTModelForCausalLM`, :class:`ORTModelForSeq2SeqLM`, :class:`ORTModelForSequenceClassification`,
:class:`ORTModelForTokenClassification`, :class:`ORTModelForFeatureExtraction`): a ``PreTrainedModel`` whose
``forward`` runs ONNX Runtime sessions and which inherits ``GenerationMixin``, so ``generate()`` (greedy, sampling,
beam search, every logits processor and stopping rule) and ``generation_config`` mean what they mean in PyTorch, and
``pipeline()`` takes the model. ``optimum`` is not used: its ONNX configs describe Transformer key/value caches
only, and the recurrent decoders carry a state of another shape (below).

What is exported, per family (the graphs of one folder; names of the inputs and outputs in ``hf_seq_onnx.json``):

=======================================  ================================================================================
family / head                            graphs
=======================================  ================================================================================
``RNNForCausalLM`` (char and word LM)    ``decoder_model.onnx``: ``(input_ids (B, T), attention_mask (B, T), h, c)`` →
                                         ``(logits (B, T, V), h, c)``: the prompt in one call (left padding as in
                                         PyTorch); ``step_model.onnx``: ``(input_ids (B, 1), h, c)`` → the same for
                                         one new token (every decoding step whose token is real in every row); the
                                         state ``(L, B, H)`` is the cache
``RNNSeq2SeqForConditionalGeneration``   ``encoder_model.onnx``: source → encoder states, the attention keys prepared
                                         once, the bridged initial decoder state and the first input-feeding vector;
                                         ``decoder_model.onnx``: one target token with the state (``h``, ``c``) and
                                         the fed vector (context or attentional vector ``h̃``) → logits and the next
                                         state and vector (every attention type, input feeding, bidirectional encoder)
``TransformerForConditionalGeneration``  ``encoder_model.onnx``: source → encoder states and every decoder layer's
                                         cross-attention keys/values (computed once per source);
                                         ``decoder_model.onnx``: one target token with the self-attention key/value
                                         cache of every layer → logits and the cache one position longer
classifier, tagger, ``RNNModel``, BERT   ``model.onnx``: the inference forward (logits, or the last hidden state)
=======================================  ================================================================================

Over a source or a prompt the recurrent layers are ONNX's ``LSTM`` / ``GRU`` / ``RNN`` operators (dynamic length);
the one-token graphs (the RNN decoder, the LM's step graph) are traced on the layers' cell path, the step equations
without a recurrent operator run over a length of one.

Beam search reorders the runtime state as in PyTorch: the recurrent models keep :class:`~.modeling_rnn.RNNCache` /
:class:`~.modeling_rnn_seq2seq.RNNDecoderCache` (their ``reorder_cache``), the Transformer an
:class:`ORTKeyValueCache` of per-layer key/value tensors. ``quantization="int8"`` applies ONNX Runtime's dynamic
quantization (``onnxruntime.quantization.quantize_dynamic``, int8 weights) to every graph.

``onnx``, ``onnxscript`` and ``onnxruntime`` are optional packages, imported only inside the functions that need
them. The modelling files never import this module (a saved model folder does not carry it).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import AutoConfig, GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutput,
    CausalLMOutputWithPast,
    ModelOutput,
    Seq2SeqLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)

from ..compat import cache_argument, cache_output
from ..losses import masked_cross_entropy, sequence_classification_loss, token_classification_loss
from ..modeling_rnn import RNNCache
from ..modeling_rnn_seq2seq import RNNDecoderCache
from ..modeling_utils import GenerationLengthMixin, RecurrentStatePrefillMixin, refuse_assisted_generation
from ..seq2seq_utils import Seq2SeqLMHeadMixin, decoder_input_ids_for_labels
from ..validation import IGNORE_INDEX, check_generate_call, check_label_range
from .export_folders import (
    TOKENIZER_FILES,
    check_output_dir,
    check_source_folder,
    check_tokenizer_fits,
    folder_tokenizer,
    install,
)

logger = logging.getLogger(__name__)

ONNX_INFO = "hf_seq_onnx.json"  # what the folder holds: the kind, the graphs and their input/output names
ONNX_QUANTIZATIONS = ("int8",)
RNN_TYPE, RNN_SEQ2SEQ_TYPE, TRANSFORMER_TYPE, BERT_TYPE = (
    "hf_seq_rnn",
    "hf_seq_rnn_seq2seq",
    "hf_seq_transformer",
    "hf_seq_bert",
)
# kind of folder -> graph files
GRAPHS = {
    "causal_lm": ("decoder_model.onnx", "step_model.onnx"),
    "seq2seq_lm": ("encoder_model.onnx", "decoder_model.onnx"),
    "sequence_classification": ("model.onnx",),
    "token_classification": ("model.onnx",),
    "feature_extraction": ("model.onnx",),
}
# the cells exported with a dynamic length: ONNX's LSTM / GRU operators (onnxscript's translations of aten.lstm /
# aten.gru) and RNN (ours of the SimpleRNN kernel aten.rnn_tanh: _rnn_tanh)
EXPORTABLE_CELLS = ("gru", "lstm", "rnn")


class OnnxExportError(ValueError):
    """A model or config that cannot be exported to ONNX Runtime generation; the message names the field."""


# ---------------------------------------------------------------------------------------------------------------
# Export: small wrappers that give each graph plain tensors in and out
# ---------------------------------------------------------------------------------------------------------------


def _state_names(cell: str) -> tuple[str, ...]:
    return ("h", "c") if cell == "lstm" else ("h",)


class _CausalLMGraph(nn.Module):
    """``RNNForCausalLM`` from a given state: ``(input_ids, attention_mask, *state)`` → ``(logits, *state)``."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, *state):
        cache = RNNCache(self.model.config.num_hidden_layers, tuple(state), 0)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        return (out.logits, *cache.state)


class _CausalLMStepGraph(nn.Module):
    """One new token of ``RNNForCausalLM`` (every row real): ``(input_ids (B, 1), *state)`` → ``(logits (B, 1, V),
    *state)``, exported with the cell equations written out (no loop over time)."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, *state):
        cache = RNNCache(self.model.config.num_hidden_layers, tuple(state), 0)
        out = self.model(input_ids=input_ids, cache=cache, use_cache=True)
        return (out.logits, *cache.state)


@contextlib.contextmanager
def _cell_equations(module: nn.Module):
    """Run every recurrent layer of ``module`` on its cell path (the per-step equations, ``implementation="cell"``,
    tested equal to the fused kernels) while a one-token graph is traced: a step is then a few matrix products and
    pointwise ops instead of ONNX's recurrent operator (``LSTM``, ``GRU``, ``RNN``) run over a length of one."""
    from ..recurrent import RecurrentLayer, RecurrentStack

    changed = [m for m in module.modules() if isinstance(m, (RecurrentLayer, RecurrentStack))]
    saved = [m.implementation for m in changed]
    for m in changed:
        m.implementation = "cell"
    try:
        yield
    finally:
        for m, implementation in zip(changed, saved):
            m.implementation = implementation


class _RNNEncoderGraph(nn.Module):
    """Source → ``(encoder_states, [keys, feed,] *initial_state)``; the state batch-first ``(B, L, H)`` so that
    ``generate()`` expands it per beam with the other encoder outputs."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model.model

    def forward(self, input_ids, attention_mask):
        base = self.model
        enc = base.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        state = base.bridge(enc.final_hidden_state, enc.final_cell_state)  # (L, B, H) each
        batch_first = tuple(s.transpose(0, 1) for s in state)
        if not base.decoder.use_attention:
            return (enc.last_hidden_state, *batch_first)
        keys = base.decoder.prepare_keys(enc.last_hidden_state)  # (B, S, K)
        feed = base.decoder.initial_feed(state, keys, enc.last_hidden_state, attention_mask.bool()[:, None, :])
        return (enc.last_hidden_state, keys, feed, *batch_first)


class _RNNDecoderGraph(nn.Module):
    """One target token: ``(decoder_input_ids (B, 1), [encoder_states, encoder_mask, keys, feed,] *state)`` →
    ``(logits (B, V), [feed,] *state)``."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, decoder_input_ids, *inputs):
        base = self.model.model
        embeds = base.encoder.embed_tokens(decoder_input_ids)  # (B, 1, E)
        if base.decoder.use_attention:
            encoder_states, encoder_mask, keys, feed, *state = inputs
            out = base.decoder(
                embeds,
                tuple(state),
                encoder_states=encoder_states,
                encoder_mask=encoder_mask,
                keys=keys,
                feed=feed,
                return_dict=True,
            )
            return (self.model.lm_head(out.last_hidden_state[:, -1]), out.feed, *out.state)
        out = base.decoder(embeds, tuple(inputs), return_dict=True)
        return (self.model.lm_head(out.last_hidden_state[:, -1]), *out.state)


class _TransformerEncoderGraph(nn.Module):
    """Source → ``(encoder_states, cross_key_values (B, L, 2, nh, S, hs))``: every decoder layer's cross-attention
    keys and values, projected once per source."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model.model

    def forward(self, input_ids, attention_mask):
        states = self.model.encoder(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
        states = states.last_hidden_state  # (B, S, d)
        per_layer = []
        for layer in self.model.decoder.layers:
            key, value = layer.cross_attn._cross_key_values(states, None)  # (B, nh, S, hs) each
            per_layer.append(torch.stack([key, value], dim=1))  # (B, 2, nh, S, hs)
        return states, torch.stack(per_layer, dim=1)  # (B, L, 2, nh, S, hs)


class _ExportSelfCache:
    """The self-attention cache of one traced decoder step: appends this step's keys/values to the given ones."""

    def __init__(self, past: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.past = past
        self.new: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key, value, layer_idx, *args, **kwargs):
        past_key, past_value = self.past[layer_idx]
        key, value = torch.cat([past_key, key], dim=-2), torch.cat([past_value, value], dim=-2)
        self.new[layer_idx] = (key, value)
        return key, value

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.past[0][0].shape[-2]


@dataclass
class _ExportCrossLayer:
    keys: torch.Tensor
    values: torch.Tensor


class _ExportCrossCache:
    def __init__(self, layers: list[_ExportCrossLayer]) -> None:
        self.layers = layers


class _ExportStepCache:
    """What hf_seq's Transformer decoder reads of an ``EncoderDecoderCache``, over plain tensors (traced)."""

    def __init__(self, past, cross) -> None:
        self.self_attention_cache = _ExportSelfCache(past)
        self.cross_attention_cache = _ExportCrossCache([_ExportCrossLayer(k, v) for k, v in cross])
        self.is_updated = dict.fromkeys(range(len(cross)), True)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.self_attention_cache.get_seq_length(layer_idx)


class _TransformerDecoderGraph(nn.Module):
    """One target token: ``(decoder_input_ids (B, 1), encoder_attention_mask (B, S), past_key_0, past_value_0, ...,
    cross_key_0, cross_value_0, ...)`` → ``(logits (B, V), present_key_0, present_value_0, ...)``."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model
        self.num_layers = model.config.decoder_layers

    def forward(self, decoder_input_ids, encoder_attention_mask, *key_values):
        n = self.num_layers
        past = [(key_values[2 * i], key_values[2 * i + 1]) for i in range(n)]
        cross = [(key_values[2 * n + 2 * i], key_values[2 * n + 2 * i + 1]) for i in range(n)]
        cache = _ExportStepCache(past, cross)
        # the decoder reads only the shape (B, S) of the encoder states when the cross keys/values are cached
        encoder_states = encoder_attention_mask[:, :, None].to(cross[0][0].dtype)  # (B, S, 1)
        hidden = self.model.model.decoder(
            input_ids=decoder_input_ids,
            encoder_hidden_states=encoder_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            return_dict=True,
        ).last_hidden_state
        logits = self.model.lm_head(hidden[:, -1])  # (B, V)
        present = [t for i in range(n) for t in cache.self_attention_cache.new[i]]
        return (logits, *present)


class _ForwardGraph(nn.Module):
    """The inference forward of a classifier, tagger or encoder: ``(input_ids, attention_mask[, token_type_ids])`` →
    the main output (logits, or the last hidden state)."""

    def __init__(self, model, output: str, token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.output = output
        self.token_types = token_types

    def forward(self, input_ids, attention_mask, *token_type_ids):
        kwargs = {"token_type_ids": token_type_ids[0]} if self.token_types else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **kwargs)
        return getattr(out, self.output)


def _remainder_scalar(self, other):
    """``aten::remainder.Scalar`` with a symbolic divisor (the row shift of the recurrent core's padding path), which
    onnxscript's own translation does not take: ONNX ``Mod`` (integer, Python's sign rule)."""
    from onnxscript import opset18 as op

    return op.Mod(self, op.CastLike(other, self))


def _simple_rnn_layer(inp, hidden, weights, nonlinearity, reverse: bool):
    """One direction of one SimpleRNN layer as a ``while_loop`` over time: ``inp`` (T, B, I), ``hidden`` (B, H) →
    ``(out (T, B, H), last (B, H))``; ``h_t = f(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)``, the input projection
    of every step computed once before the loop (as torch's while_loop forms of LSTM and GRU do)."""
    from torch._higher_order_ops.while_loop import while_loop

    w_ih, w_hh, b_ih, b_hh = weights
    projected = nn.functional.linear(inp, w_ih, b_ih)
    projected = projected.flip(0) if reverse else projected
    w_hh = w_hh.clone()  # while_loop refuses closure tensors that share storage (flattened weights)
    b_hh = b_hh.clone() if b_hh is not None else None
    steps = torch.empty(projected.shape[0], *hidden.shape, dtype=hidden.dtype, device=hidden.device)

    def cond_fn(index, out, h):
        return index < projected.size(0)

    def body_fn(index, out, h):
        i = index.item()
        torch._check_is_size(i)
        torch._check_is_size(i, max=projected.size(0) - 1)
        h = nonlinearity(nn.functional.linear(h, w_hh, b_hh) + projected[i])
        out = out.clone()
        out[i] = h
        return index + 1, out, h

    start = torch.zeros((), dtype=torch.int64, device=hidden.device)  # a factory op, not a lifted constant
    _, out, last = while_loop(cond_fn, body_fn, [start, steps, hidden])
    return (out.flip(0) if reverse else out), last


def _simple_rnn_while_loop(nonlinearity):
    """``aten.rnn_tanh.input`` (the SimpleRNN kernel; ``nonlinearity`` torch.tanh) with a dynamic length: every layer
    and direction a ``while_loop`` (:func:`_simple_rnn_layer`), the layers stacked as the fused kernel stacks them."""

    def impl(inp, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        per_direction = 4 if has_biases else 2
        directions = 2 if bidirectional else 1
        x = inp.transpose(0, 1) if batch_first else inp
        finals = []
        for layer in range(num_layers):
            outs = []
            for direction in range(directions):
                index = layer * directions + direction
                chunk = list(params[index * per_direction : (index + 1) * per_direction])
                weights = (*chunk, None, None) if not has_biases else tuple(chunk)
                out, last = _simple_rnn_layer(x, hx[index], weights, nonlinearity, reverse=direction == 1)
                outs.append(out)
                finals.append(last)
            x = torch.cat(outs, dim=-1) if directions == 2 else outs[0]
            if dropout and train and layer < num_layers - 1:
                x = torch.dropout(x, dropout, train=True)
        x = x.transpose(0, 1) if batch_first else x
        return x, torch.stack(finals, 0)

    return impl


@contextlib.contextmanager
def _simple_rnn_while_loop_decompositions():
    """Register :func:`_simple_rnn_while_loop` as the decomposition of ``aten.rnn_tanh.input`` while exporting, as
    ``torch.onnx.export`` registers its ``while_loop`` forms of ``aten.lstm`` / ``aten.gru``. The graph still holds
    ONNX's ``RNN`` operator (:func:`_rnn_tanh` translates the op), but the capture goes through the registered
    decomposition, and torch's own (a Python loop over time) fixes the length to the example's (measured: the saved
    graph's ``input_ids`` then has a fixed length). The previous registrations are put back afterwards."""
    from torch._C import DispatchKey
    from torch._decomp import global_decomposition_table

    table = global_decomposition_table["post_autograd"]
    saved = []
    for op, nonlinearity in ((torch.ops.aten.rnn_tanh.input, torch.tanh),):
        impl = _simple_rnn_while_loop(nonlinearity)
        saved.append((op, table.get(op), op.py_kernels.get(DispatchKey.CompositeImplicitAutograd)))
        table[op] = impl
        op.py_kernels[DispatchKey.CompositeImplicitAutograd] = impl
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, decomposition, kernel in saved:
            if decomposition is None:
                table.pop(op, None)
            else:
                table[op] = decomposition
            if kernel is None:
                op.py_kernels.pop(DispatchKey.CompositeImplicitAutograd, None)
            else:
                op.py_kernels[DispatchKey.CompositeImplicitAutograd] = kernel
            op._dispatch_cache.clear()


def _rnn_tanh(
    input,
    hx,
    params: Sequence,
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
):
    """``aten::rnn_tanh.input`` (the SimpleRNN kernel) as ONNX's ``RNN`` operator, one per layer (both directions in
    one), as onnxscript translates ``aten::lstm`` / ``aten::gru`` to ``LSTM`` / ``GRU``: without a translation the
    exporter decomposes the op into a Python loop and fixes the length to the example's. Inference only (no
    dropout between layers). PyTorch's ``weight_ih (H, I)``, ``weight_hh (H, H)`` and the two biases are ONNX's ``W``,
    ``R`` and ``B = [Wb; Rb]`` per direction, unchanged."""
    from onnxscript import opset18 as op

    directions = 2 if bidirectional else 1
    per_direction = 4 if has_biases else 2
    x = op.Transpose(input, perm=[1, 0, 2]) if batch_first else input  # (T, B, I)
    finals = []
    for layer in range(num_layers):
        w, r, b = [], [], []
        for direction in range(directions):
            first = (layer * directions + direction) * per_direction
            w.append(op.Unsqueeze(params[first], [0]))
            r.append(op.Unsqueeze(params[first + 1], [0]))
            if has_biases:
                b.append(op.Unsqueeze(op.Concat(params[first + 2], params[first + 3], axis=0), [0]))
        y, y_h = op.RNN(
            x,
            op.Concat(*w, axis=0),
            op.Concat(*r, axis=0),
            op.Concat(*b, axis=0) if has_biases else None,
            None,
            op.Slice(hx, [layer * directions], [(layer + 1) * directions], axes=[0]),
            activations=["Tanh"] * directions,
            direction="bidirectional" if bidirectional else "forward",
            hidden_size=hx.shape[2],
        )
        # y (T, D, B, H) -> (T, B, D*H): the next layer's input
        x = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))
        finals.append(y_h)  # (D, B, H)
    out = op.Transpose(x, perm=[1, 0, 2]) if batch_first else x
    return out, (op.Concat(*finals, axis=0) if num_layers > 1 else finals[0])


_FUSED_RECURRENT_OPS = (
    "lstm.input",
    "lstm.data",
    "gru.input",
    "gru.data",
    "rnn_tanh.input",
    "rnn_tanh.data",
    "rnn_relu.input",
    "rnn_relu.data",
)


@contextlib.contextmanager
def _recurrent_autograd_decompositions_off():
    """Take the Python ``Autograd`` kernels of ``aten.lstm`` / ``gru`` / ``rnn_*`` off while exporting.

    ``torch.onnx.export`` traces these ops with a ``while_loop`` decomposition (dynamic in length), which it registers
    under ``CompositeImplicitAutograd``; once ``torch._decomp.decompositions`` has been imported (the first ONNX export
    of a process imports it), the same ops also carry a Python ``Autograd`` kernel, an unrolled loop that is dispatched
    first, and the export comes out fixed to the example's length (the exporter then retries with static shapes).
    Those kernels are put back after the export."""
    from torch._C import DispatchKey

    removed = []
    for name in _FUSED_RECURRENT_OPS:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        if DispatchKey.Autograd in op.py_kernels:
            removed.append((op, op.py_kernels.pop(DispatchKey.Autograd)))
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, kernel in removed:
            op.py_kernels[DispatchKey.Autograd] = kernel
            op._dispatch_cache.clear()


def _export_graph(module: nn.Module, args: tuple, path: Path, input_names, output_names, dynamic: dict) -> None:
    """``torch.onnx.export(dynamo=True)`` of ``module`` with the named dynamic dimensions ``dynamic``
    (input name → {dim: name})."""
    dims: dict[str, torch.export.Dim] = {}

    def dim(name: str):
        if name not in dims:
            dims[name] = torch.export.Dim(name, min=1) if name != "past" else torch.export.Dim(name, min=0)
        return dims[name]

    flat = [{axis: dim(label) for axis, label in dynamic.get(name, {}).items()} or None for name in input_names]
    # the structure of the forward's signature: named parameters, then one tuple for ``*inputs``
    named = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    shapes = (*flat[: len(named)], tuple(flat[len(named) :])) if len(flat) > len(named) else tuple(flat)
    module.eval()
    with torch.no_grad(), _recurrent_autograd_decompositions_off(), _simple_rnn_while_loop_decompositions():
        program = torch.onnx.export(
            module,
            args,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_shapes=shapes,
            dynamo=True,
            custom_translation_table={
                torch.ops.aten.remainder.Scalar: _remainder_scalar,
                torch.ops.aten.rnn_tanh.input: _rnn_tanh,
            },
            verbose=False,
        )
    program.save(str(path))
    _check_dynamic(path, input_names, dynamic)


def _check_dynamic(path: Path, input_names, dynamic: dict) -> None:
    """Every axis meant to be dynamic is symbolic in the saved graph: the exporter falls back to a specialised
    program when its first strategy fails, which would run only at the example's sizes."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    shapes = {value.name: value.type.tensor_type.shape.dim for value in graph.input}
    for name in input_names:
        for axis in dynamic.get(name, {}):
            if name in shapes and shapes[name][axis].dim_value:
                raise OnnxExportError(
                    f"the export of {path.name} fixed axis {axis} of `{name}` to {shapes[name][axis].dim_value}; the "
                    "graph would run at that size only"
                )


def check_onnx_exportable(model) -> str:
    """The kind of folder ``model`` exports to (a key of :data:`GRAPHS`), or :class:`OnnxExportError` naming the field
    that cannot be exported."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    name = type(model).__name__
    if model_type in (RNN_TYPE, RNN_SEQ2SEQ_TYPE):
        cell = getattr(config, "cell", None)
        if cell not in EXPORTABLE_CELLS and not (cell == "none" and model_type == RNN_TYPE and "CausalLM" not in name):
            raise OnnxExportError(
                f"`cell` {cell!r}: the ONNX export carries a recurrent state of fixed size per layer; exportable cells "
                f"are {list(EXPORTABLE_CELLS)} (the self-attention LSTM's state is a tape that grows with every token)"
            )
        if getattr(config, "implementation", "fused") not in ("fused", None):
            logger.info("`implementation` %r: the export runs the fused kernel's equations", config.implementation)
    kinds = {
        "RNNForCausalLM": "causal_lm",
        "RNNSeq2SeqForConditionalGeneration": "seq2seq_lm",
        "TransformerForConditionalGeneration": "seq2seq_lm",
        "RNNForSequenceClassification": "sequence_classification",
        "BertForSequenceClassification": "sequence_classification",
        "RNNForTokenClassification": "token_classification",
        "BertForTokenClassification": "token_classification",
        "RNNModel": "feature_extraction",
        "BertModel": "feature_extraction",
    }
    if name not in kinds:
        raise OnnxExportError(
            f"{name} (`architectures`) has no ONNX Runtime export; exportable heads are {sorted(kinds)}"
        )
    if model_type == TRANSFORMER_TYPE and not config.is_encoder_decoder:
        raise OnnxExportError("`is_encoder_decoder` must be True for the Transformer's encoder/decoder export")
    if kinds[name] == "seq2seq_lm" and getattr(config, "decoder_start_token_id", None) is None:
        raise OnnxExportError("`decoder_start_token_id` is None: generate() needs it to start the decoder")
    return kinds[name]


def _example_inputs(config, length: int, batch: int = 2):
    vocab = config.vocab_size
    ids = (torch.arange(batch * length).reshape(batch, length) * 7 + 4) % vocab
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, :2] = 0  # one left-padded row: the export keeps the padding path
    return ids, mask


def _export_causal_lm(model, folder: Path) -> dict:
    config = model.config
    names = _state_names(config.cell)
    ids, mask = _example_inputs(config, 6)
    layers, hidden = config.num_hidden_layers, config.hidden_size
    state = tuple(torch.zeros(layers, ids.shape[0], hidden) for _ in names)
    inputs = ("input_ids", "attention_mask", *names)
    outputs = ("logits", *(f"{n}_out" for n in names))
    dynamic = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"}}
    dynamic.update({n: {1: "batch"} for n in names})
    _export_graph(_CausalLMGraph(model), (ids, mask, *state), folder / "decoder_model.onnx", inputs, outputs, dynamic)
    step_inputs = ("input_ids", *names)
    step_dynamic = {"input_ids": {0: "batch"}, **{n: {1: "batch"} for n in names}}
    with _cell_equations(model):
        _export_graph(
            _CausalLMStepGraph(model),
            (ids[:, -1:], *state),
            folder / "step_model.onnx",
            step_inputs,
            outputs,
            step_dynamic,
        )
    return {
        "decoder": {"file": "decoder_model.onnx", "inputs": list(inputs), "outputs": list(outputs)},
        "step": {"file": "step_model.onnx", "inputs": list(step_inputs), "outputs": list(outputs)},
        "state": names,
    }


def _export_rnn_seq2seq(model, folder: Path) -> dict:
    config = model.config
    base = model.model
    names = _state_names(config.cell)
    attention = base.decoder.use_attention
    ids, mask = _example_inputs(config, 7)
    enc_outputs = ("encoder_hidden_states", *(("keys", "feed") if attention else ()), *(f"init_{n}" for n in names))
    _export_graph(
        _RNNEncoderGraph(model),
        (ids, mask),
        folder / "encoder_model.onnx",
        ("input_ids", "attention_mask"),
        enc_outputs,
        {"input_ids": {0: "batch", 1: "source"}, "attention_mask": {0: "batch", 1: "source"}},
    )
    with torch.no_grad():
        example = _RNNEncoderGraph(model)(ids, mask)
    start = torch.full((ids.shape[0], 1), config.decoder_start_token_id, dtype=torch.long)
    state = tuple(s.transpose(0, 1).contiguous() for s in example[-len(names) :])  # (L, B, H)
    if attention:
        dec_inputs = ("decoder_input_ids", "encoder_hidden_states", "encoder_attention_mask", "keys", "feed", *names)
        args = (start, example[0], mask, example[1], example[2], *state)
        dec_outputs = ("logits", "feed_out", *(f"{n}_out" for n in names))
    else:
        dec_inputs = ("decoder_input_ids", *names)
        args = (start, *state)
        dec_outputs = ("logits", *(f"{n}_out" for n in names))
    dynamic = {
        "decoder_input_ids": {0: "batch"},
        "encoder_hidden_states": {0: "batch", 1: "source"},
        "encoder_attention_mask": {0: "batch", 1: "source"},
        "keys": {0: "batch", 1: "source"},
        "feed": {0: "batch"},
    }
    dynamic.update({n: {1: "batch"} for n in names})
    with _cell_equations(base.decoder):  # one token a call: no loop over time in the graph
        _export_graph(_RNNDecoderGraph(model), args, folder / "decoder_model.onnx", dec_inputs, dec_outputs, dynamic)
    return {
        "encoder": {
            "file": "encoder_model.onnx",
            "inputs": ["input_ids", "attention_mask"],
            "outputs": list(enc_outputs),
        },
        "decoder": {"file": "decoder_model.onnx", "inputs": list(dec_inputs), "outputs": list(dec_outputs)},
        "state": names,
        "attention": attention,
    }


def _export_transformer(model, folder: Path) -> dict:
    config = model.config
    ids, mask = _example_inputs(config, 9)
    _export_graph(
        _TransformerEncoderGraph(model),
        (ids, mask),
        folder / "encoder_model.onnx",
        ("input_ids", "attention_mask"),
        ("encoder_hidden_states", "cross_key_values"),
        {"input_ids": {0: "batch", 1: "source"}, "attention_mask": {0: "batch", 1: "source"}},
    )
    with torch.no_grad():
        _, cross = _TransformerEncoderGraph(model)(ids, mask)  # (B, L, 2, nh, S, hs)
    n = config.decoder_layers
    batch, heads, head_dim = ids.shape[0], cross.shape[3], cross.shape[5]
    past = [torch.randn(batch, heads, 3, head_dim) for _ in range(2 * n)]
    cross_list = [cross[:, i, j].contiguous() for i in range(n) for j in range(2)]
    start = torch.full((batch, 1), config.decoder_start_token_id, dtype=torch.long)
    past_names = [f"past_{kind}_{i}" for i in range(n) for kind in ("key", "value")]
    cross_names = [f"cross_{kind}_{i}" for i in range(n) for kind in ("key", "value")]
    dec_inputs = ("decoder_input_ids", "encoder_attention_mask", *past_names, *cross_names)
    dec_outputs = ("logits", *(f"present_{kind}_{i}" for i in range(n) for kind in ("key", "value")))
    dynamic = {"decoder_input_ids": {0: "batch"}, "encoder_attention_mask": {0: "batch", 1: "source"}}
    dynamic.update({name: {0: "batch", 2: "past"} for name in past_names})
    dynamic.update({name: {0: "batch", 2: "source"} for name in cross_names})
    _export_graph(
        _TransformerDecoderGraph(model),
        (start, mask, *past, *cross_list),
        folder / "decoder_model.onnx",
        dec_inputs,
        dec_outputs,
        dynamic,
    )
    return {
        "encoder": {
            "file": "encoder_model.onnx",
            "inputs": ["input_ids", "attention_mask"],
            "outputs": ["encoder_hidden_states", "cross_key_values"],
        },
        "decoder": {"file": "decoder_model.onnx", "inputs": list(dec_inputs), "outputs": list(dec_outputs)},
        "decoder_layers": n,
    }


def _export_forward(model, folder: Path, kind: str) -> dict:
    config = model.config
    ids, mask = _example_inputs(config, 11)
    token_types = config.model_type == BERT_TYPE
    output = "last_hidden_state" if kind == "feature_extraction" else "logits"
    inputs = ("input_ids", "attention_mask", *(("token_type_ids",) if token_types else ()))
    args = (ids, mask, *((torch.zeros_like(ids),) if token_types else ()))
    dynamic = {name: {0: "batch", 1: "length"} for name in inputs}
    _export_graph(_ForwardGraph(model, output, token_types), args, folder / "model.onnx", inputs, (output,), dynamic)
    return {"model": {"file": "model.onnx", "inputs": list(inputs), "outputs": [output]}}


def quantize_graphs(folder: str | os.PathLike, files: list[str]) -> None:
    """ONNX Runtime's dynamic int8 quantization (int8 weights, activations quantized per call) of ``files`` in
    ``folder``, in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = Path(folder)
    for name in files:
        source = folder / name
        target = folder / f".{name}.int8"
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
        os.replace(target, source)
    info_path = folder / ONNX_INFO
    if info_path.is_file():  # an export's folder: its manifest records the new graphs
        info = json.loads(info_path.read_text(encoding="utf-8"))
        info["quantization"] = "int8"
        _record_graph_digests(folder, info)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_graph_digests(folder: Path, info: dict) -> None:
    """Write ``info`` as the folder's manifest with the sha256 of every graph file it names: at load the graphs are
    checked against it (:func:`check_graphs_match_manifest`)."""
    for graph in info["graphs"].values():
        if isinstance(graph, dict) and "file" in graph:
            graph["sha256"] = _sha256(folder / graph["file"])
    (folder / ONNX_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def check_graphs_match_manifest(folder: Path, info: dict, sessions: dict) -> None:
    """``OnnxExportError`` naming the graph file when a graph of ``folder`` is not the one its manifest describes: a
    sha256 other than the recorded one, or (an export without the record) other input or output names. Caught here,
    at load, instead of at the first decoding step with ONNX Runtime's shape error. A value that two graphs share
    by name (the LM's state ``h``, the seq2seq's encoder states) must have the same fixed sizes in both."""
    seen: dict[str, list] = {}
    for name, graph in info["graphs"].items():
        if not (isinstance(graph, dict) and "file" in graph):
            continue
        path = folder / graph["file"]
        recorded = graph.get("sha256")
        if recorded is not None and _sha256(path) != recorded:
            raise OnnxExportError(
                f"{path} is not the graph {ONNX_INFO} describes (its sha256 differs from the one recorded at export): "
                "the file was replaced or comes from another export; export the model again (hf-seq-export onnx)"
            )
        session = sessions[name]
        found = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
        for kind, names, expected in (
            ("inputs", found[0], graph.get("inputs")),
            ("outputs", found[1], graph.get("outputs")),
        ):
            if expected is not None and list(names) != list(expected):
                raise OnnxExportError(
                    f"{path} has {kind} {names} but {ONNX_INFO} describes {expected}: the file comes from another "
                    "export; export the model again (hf-seq-export onnx)"
                )
        for value in (*session.get_inputs(), *session.get_outputs()):  # one size per named value across graphs
            seen.setdefault(value.name, []).append((graph["file"], value.shape))
    for value_name, places in seen.items():
        (first, first_shape), *others = places
        for other, shape in others:
            differ = len(shape) != len(first_shape) or any(
                isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(shape, first_shape)
            )
            if differ:
                raise OnnxExportError(
                    f"{folder / other} and {first} disagree on the shape of `{value_name}` ({shape} vs "
                    f"{first_shape}): the graphs come from different exports; export the model again "
                    "(hf-seq-export onnx)"
                )


def _load_model(model_or_folder, tokenizer):
    """(model, tokenizer, source) from a saved folder (its ``architectures`` class) or a model object."""
    import hf_seq

    if isinstance(model_or_folder, (str, os.PathLike)):
        folder = Path(model_or_folder)
        check_source_folder(folder, OnnxExportError)  # before any work: one line naming the missing file
        tokenizer = folder_tokenizer(folder, OnnxExportError) if tokenizer is None else tokenizer
        config = AutoConfig.from_pretrained(folder)
        architectures = getattr(config, "architectures", None) or []
        cls = getattr(hf_seq, architectures[0], None) if architectures else None
        if cls is None:
            raise OnnxExportError(f"{folder}: `architectures` {architectures} names no hf_seq model class")
        check_tokenizer_fits(tokenizer, config, OnnxExportError, f"the tokenizer of {folder}")
        model = cls.from_pretrained(folder)
        return model.eval(), tokenizer, str(folder)
    return model_or_folder.eval(), tokenizer, type(model_or_folder).__name__


def to_onnx(
    model_or_folder,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    tokenizer=None,
    force: bool = False,
) -> Path:
    """Export an hf_seq model for ONNX Runtime: the graphs of its family (see the module docstring), its config,
    generation config and tokenizer, and ``hf_seq_onnx.json``; :func:`load_onnxruntime` loads the folder.

    Args:
        model_or_folder: a saved model folder or a model object (its tokenizer then given as ``tokenizer``).
        output_dir: the folder to write, staged beside it and renamed into place when complete; an earlier export
            there is replaced only with ``force=True``, and a trained model, the source folder or a folder inside
            or around it never (:func:`~.export_folders.check_output_dir`).
        quantization: None (float32 as trained) or ``"int8"`` (ONNX Runtime dynamic quantization of every graph).
        tokenizer: the tokenizer to save beside the graphs (default: the folder's, which must have one).

    :class:`OnnxExportError` names the field of a model that cannot be exported; an ``ImportError`` says how to
    install the optional packages."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as error:
        raise ImportError(
            "to_onnx needs onnx, onnxscript and onnxruntime: pip install onnx onnxscript onnxruntime"
        ) from error
    if quantization not in (None, *ONNX_QUANTIZATIONS):
        raise OnnxExportError(f"`quantization` must be one of {list(ONNX_QUANTIZATIONS)} or None, got {quantization!r}")
    sources = [model_or_folder] if isinstance(model_or_folder, (str, os.PathLike)) else []
    output_dir = check_output_dir(output_dir, sources, force, OnnxExportError)
    model, tokenizer, source = _load_model(model_or_folder, tokenizer)
    kind = check_onnx_exportable(model)
    if not sources:
        check_tokenizer_fits(tokenizer, model.config, OnnxExportError, "`tokenizer`")
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        if kind == "causal_lm":
            graphs = _export_causal_lm(model, staging)
        elif kind == "seq2seq_lm" and model.config.model_type == TRANSFORMER_TYPE:
            graphs = _export_transformer(model, staging)
        elif kind == "seq2seq_lm":
            graphs = _export_rnn_seq2seq(model, staging)
        else:
            graphs = _export_forward(model, staging, kind)
        for leftover in staging.glob("*.onnx.data"):  # small models: weights inside the graph file
            leftover.unlink()
        if quantization == "int8":
            quantize_graphs(staging, list(GRAPHS[kind]))
        model.config.save_pretrained(staging)
        generation_config = getattr(model, "generation_config", None)
        if kind in ("causal_lm", "seq2seq_lm") and generation_config is not None:
            generation_config.save_pretrained(staging)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        info = {
            "exported_from": source,
            "model_type": model.config.model_type,
            "architecture": type(model).__name__,
            "kind": kind,
            "quantization": quantization or "float32",
            "graphs": graphs,
            "torch_version": torch.__version__,
        }
        _record_graph_digests(staging, info)
        install(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir


# ---------------------------------------------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------------------------------------------


def _session(path: Path, threads: int | None, providers):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), options, providers=providers or ["CPUExecutionProvider"])


def _run(session, names: list[str], values: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``session`` on tensors (CPU, contiguous, as numpy views) and return its outputs as tensors."""
    feeds = {name: value.detach().cpu().contiguous().numpy() for name, value in zip(names, values)}
    return [torch.from_numpy(out) for out in session.run(None, feeds)]


def _long(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    if tensor is None:
        return torch.ones(like.shape[:2], dtype=torch.long)
    return tensor.to(torch.long)


class ORTModel(PreTrainedModel):
    """A model folder of :func:`to_onnx` run by ONNX Runtime: a ``PreTrainedModel`` without parameters whose
    ``forward`` feeds the sessions. ``device`` is the CPU (ONNX Runtime's CPU provider); ``dtype`` float32."""

    main_input_name = "input_ids"
    base_model_prefix = "onnx"
    _supports_sdpa = True
    accepts_loss_kwargs = False  # a loss is the mean over the batch's labels, as the PyTorch heads compute it

    def __init__(self, config, sessions: dict | None = None, info: dict | None = None, folder: Path | None = None):
        super().__init__(config)
        self.sessions = sessions or {}
        self.info = info or {}
        self.folder = folder
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def get_output_embeddings(self):
        return None

    def _graph(self, name: str):
        graph = self.info["graphs"][name]
        return self.sessions[name], graph["inputs"]

    def save_pretrained(self, *args, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__} runs exported graphs: copy its folder ({self.folder}) or export the PyTorch model"
        )

    def refuse_arguments(self, given: dict) -> None:
        """``ValueError`` naming an argument of the PyTorch model that the exported graphs cannot honour (given, not
        None or False): what the graphs do not return (attention weights, hidden states), embeddings instead of
        ids, or any other keyword. transformers' plumbing (:data:`IGNORED_KEYWORDS`) passes."""
        for name, value in given.items():
            if value is None or value is False or name in IGNORED_KEYWORDS:
                continue
            reason = UNSUPPORTED_ARGUMENTS.get(name, "the exported graphs have no such input")
            raise ValueError(
                f"`{name}` cannot be given to {type(self).__name__} (an ONNX Runtime export): {reason}; run the PyTorch "
                "model for it"
            )

    @staticmethod
    def _outputs(output: ModelOutput, return_dict: bool | None):
        return output if return_dict is not False else output.to_tuple()


class ORTGenerationMixin:
    """For the generative ``ORTModelFor...`` classes (before :class:`ORTModel`): their one ``generate()`` override."""

    # the folder's model_generate.onnx (:class:`~.onnx_generate.GeneratingGraph`), set by load_onnxruntime
    generating_graph = None

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """``GenerationMixin.generate`` over the step graphs, or the folder's generating graph (:mod:`.onnx_generate`)
        when it does what the call asks (one log line says which ran). Before decoding starts: the arguments and
        inputs are checked as the PyTorch heads check them (:func:`~hf_seq.validation.check_generate_call`), assisted
        decoding is refused (:func:`~hf_seq.modeling_utils.refuse_assisted_generation`), and an argument the exported
        graphs cannot honour (``output_attentions``, ``output_hidden_states``, ``inputs_embeds``, ...) is a
        ``ValueError`` naming it."""
        check_generate_call(self, inputs, generation_config, kwargs)
        args = (inputs, generation_config)
        refuse_assisted_generation(self, args, kwargs)
        call = inspect.signature(GenerationMixin.generate).bind_partial(self, *args, **kwargs).arguments
        settings = {**call.pop("kwargs", {}), **call}
        config = settings.get("generation_config") or self.generation_config
        for name in ("output_attentions", "output_hidden_states"):
            if settings.get(name, getattr(config, name, None)):
                self.refuse_arguments({name: True})
        self.refuse_arguments({name: settings.get(name) for name in UNSUPPORTED_ARGUMENTS if name in settings})
        if self.generating_graph is not None:
            sequences = self.generating_graph.generate(self, args, kwargs)
            if sequences is not None:
                return sequences
        return super().generate(*args, **kwargs)


# transformers' keyword arguments that change nothing an exported model computes
IGNORED_KEYWORDS = frozenset({"cache_position", "num_items_in_batch", "use_cache", "return_dict"})
UNSUPPORTED_ARGUMENTS = {
    "output_attentions": "the exported graphs return no attention weights",
    "output_hidden_states": "the exported graphs return no hidden states of the layers",
    "inputs_embeds": "the exported graph embeds the tokens itself: pass `input_ids`",
    "decoder_inputs_embeds": "the exported decoder embeds the tokens itself: pass `decoder_input_ids`",
    "head_mask": "the exported graphs take no head mask",
    "position_ids": "the exported graph numbers the positions itself (0, 1, ...)",
}


class _ORTGenerativeModel(
    RecurrentStatePrefillMixin, GenerationLengthMixin, ORTGenerationMixin, ORTModel, GenerationMixin
):
    """The generative ``ORTModelFor...`` classes' common stack: the recurrent-state cache handling, the length
    defaults, the one ``generate()`` override (:class:`ORTGenerationMixin`), the sessions (:class:`ORTModel`) and
    ``GenerationMixin``."""


class ORTModelForCausalLM(_ORTGenerativeModel):
    """``RNNForCausalLM`` on ONNX Runtime: the recurrent state (:class:`~.modeling_rnn.RNNCache`) is the cache;
    ``generate()`` reads the prompt in one call and then one token a step."""

    _is_stateful = True

    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: RNNCache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """``input_ids`` ``(B, T)`` (the new tokens when ``cache`` is given); ``attention_mask`` ``(B, T)`` or the whole
        sequence's ``(B, past + T)`` (its last T columns are read). Returns logits ``(B, T, V)`` (the last
        ``logits_to_keep`` positions when it is set) and the cache; with ``labels`` ``(B, T)`` (shifted inside, -100
        ignored) or ``shift_labels`` (already aligned) the next-token cross-entropy, as ``RNNForCausalLM`` computes
        it."""
        if input_ids is None:
            raise ValueError(f"{type(self).__name__} takes `input_ids` (the exported graph embeds the tokens itself)")
        shift_labels = kwargs.pop("shift_labels", None)
        self.refuse_arguments(kwargs)
        batch, length = input_ids.shape
        if attention_mask is not None and attention_mask.shape[1] > length:
            attention_mask = attention_mask[:, -length:]
        config = self.config
        if cache is None or cache.state is None:
            names = self.info["graphs"]["state"]
            state = tuple(torch.zeros(config.num_hidden_layers, batch, config.hidden_size) for _ in names)
            cache = cache if cache is not None else RNNCache(config.num_hidden_layers)
        else:
            if cache.state[0].shape[1] != batch:
                raise ValueError(
                    f"`cache` holds a state for batch size {cache.state[0].shape[1]}, but the input has {batch} rows"
                )
            state = cache.state
        ids = input_ids.to(torch.long)
        if length == 1 and "step" in self.sessions and (attention_mask is None or bool(attention_mask.all())):
            # a decoding step (every row real): the one-step graph, the cell equations without a loop
            session, names = self._graph("step")
            logits, *new_state = _run(session, names, [ids, *state])
        else:
            session, names = self._graph("decoder")
            logits, *new_state = _run(session, names, [ids, _long(attention_mask, input_ids), *state])
        cache.update(tuple(new_state), length)
        loss = (
            self._loss(logits, labels, shift_labels, logits_to_keep) if (labels, shift_labels) != (None, None) else None
        )
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        output = CausalLMOutputWithPast(
            loss=loss, logits=logits, **cache_output(cache if use_cache is not False else None)
        )
        return self._outputs(output, return_dict)

    def _loss(self, logits, labels, shift_labels, logits_to_keep) -> torch.Tensor:
        """Next-token cross-entropy over the labels that are not -100 (``RNNForCausalLM``'s)."""
        if logits_to_keep:
            raise ValueError("`labels` cannot be combined with `logits_to_keep` (the loss needs every position)")
        name, targets = ("shift_labels", shift_labels) if shift_labels is not None else ("labels", labels)
        if tuple(targets.shape) != tuple(logits.shape[:2]):
            raise ValueError(
                f"`{name}` must have the input's shape {tuple(logits.shape[:2])}, got {tuple(targets.shape)}"
            )
        check_label_range(name, targets, self.config.vocab_size, "vocab_size")
        if shift_labels is None:  # position t predicts token t+1; the last position has nothing to predict
            targets = nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
        return masked_cross_entropy(logits, targets)


@dataclass
class ORTEncoderOutput(ModelOutput):
    """The outputs of an exported encoder, batch-first (``generate()`` expands them per beam along dim 0).

    ``last_hidden_state`` (B, S, D); ``keys`` (B, S, K) and ``feed`` (B, F) of an attention RNN decoder; ``state``
    the initial decoder state (B, L, H) (and ``cell_state`` for an LSTM); ``cross_key_values`` (B, L, 2, nh, S, hs)
    of the Transformer decoder's cross-attention."""

    last_hidden_state: torch.Tensor | None = None
    keys: torch.Tensor | None = None
    feed: torch.Tensor | None = None
    state: torch.Tensor | None = None
    cell_state: torch.Tensor | None = None
    cross_key_values: torch.Tensor | None = None


class ORTEncoder(nn.Module):
    """The encoder graph as the module ``generate()`` calls (``model.get_encoder()``)."""

    main_input_name = "input_ids"

    def __init__(self, parent: ORTModel) -> None:
        super().__init__()
        self._parent = [parent]  # not a submodule

    def forward(self, input_ids=None, attention_mask=None, return_dict=True, **kwargs) -> ORTEncoderOutput:
        if input_ids is None:
            raise ValueError("The exported encoder takes `input_ids` (it embeds the tokens itself)")
        parent = self._parent[0]
        session, names = parent._graph("encoder")
        outputs = _run(session, names, [input_ids.to(torch.long), _long(attention_mask, input_ids)])
        if parent.config.model_type == TRANSFORMER_TYPE:
            return ORTEncoderOutput(last_hidden_state=outputs[0], cross_key_values=outputs[1])
        graphs = parent.info["graphs"]
        fields = {"last_hidden_state": outputs[0]}
        rest = outputs[1:]
        if graphs["attention"]:
            fields["keys"], fields["feed"], rest = rest[0], rest[1], rest[2:]
        fields["state"] = rest[0]
        if len(rest) > 1:
            fields["cell_state"] = rest[1]
        return ORTEncoderOutput(**fields)


class ORTKeyValueCache:
    """The Transformer decoder's self-attention keys and values on ONNX Runtime: per layer ``(B, nh, T, hs)``;
    :meth:`reorder_cache` for beam search, as ``EncoderDecoderCache`` does."""

    is_compileable = False
    is_croppable = False

    def __init__(self, num_layers: int) -> None:
        self.num_layers = num_layers
        self.key_values: list[torch.Tensor] | None = None  # key_0, value_0, key_1, ...

    def __len__(self) -> int:
        return self.num_layers

    @property
    def is_linear(self) -> list[bool]:
        return [False] * self.num_layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0 if self.key_values is None else self.key_values[0].shape[-2]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.key_values is not None:
            self.key_values = [t.index_select(0, beam_idx) for t in self.key_values]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.reorder_cache(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.key_values is not None:
            self.key_values = [t.repeat_interleave(repeats, dim=0) for t in self.key_values]

    def __repr__(self) -> str:
        return f"ORTKeyValueCache(layers={self.num_layers}, seen={self.get_seq_length()})"


class ORTModelForSeq2SeqLM(Seq2SeqLMHeadMixin, _ORTGenerativeModel):
    """``RNNSeq2SeqForConditionalGeneration`` and ``TransformerForConditionalGeneration`` on ONNX Runtime: the
    encoder graph once per source, the decoder graph once per target token (a longer ``decoder_input_ids`` is read
    token by token). The recurrent decoder's cache is :class:`~.modeling_rnn_seq2seq.RNNDecoderCache`, the
    Transformer's :class:`ORTKeyValueCache`."""

    def __init__(self, config, sessions=None, info=None, folder=None) -> None:
        super().__init__(config, sessions, info, folder)
        self.encoder = ORTEncoder(self)
        self._is_stateful = config.model_type != TRANSFORMER_TYPE
        self._add_translation_pipelines()

    def get_encoder(self, modality: str | None = None) -> ORTEncoder:
        return self.encoder

    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: ORTEncoderOutput | None = None,
        cache=None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Encode ``input_ids`` (unless ``encoder_outputs`` are given) and read ``decoder_input_ids`` ``(B, T)`` from
        ``cache`` (the new tokens only when one is given). Returns the logits of every decoder position ``(B, T, V)``;
        with ``labels`` ``(B, T)`` (the decoder inputs shifted from them when none are given, -100 ignored) the
        cross-entropy, as the PyTorch heads compute it (the cache is then off)."""
        labels = kwargs.pop("labels", None)
        decoder_mask = kwargs.pop("decoder_attention_mask", None)
        self.refuse_arguments(kwargs)
        if decoder_mask is not None and not bool(decoder_mask.bool().all()):
            raise ValueError(
                "`decoder_attention_mask` with padding cannot be given to the exported decoder, which reads every "
                "target token: pass right-padded `decoder_input_ids` without it (the real positions' logits do not "
                "depend on right padding) or run the PyTorch model"
            )
        if labels is not None:
            decoder_input_ids = decoder_input_ids_for_labels(self.config, labels, decoder_input_ids, None)
            use_cache = False
        if decoder_input_ids is None:
            raise ValueError("Pass `decoder_input_ids` or `labels` (the exported decoder reads target tokens)")
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask)
        elif not isinstance(encoder_outputs, ORTEncoderOutput):
            raise ValueError("`encoder_outputs` must be the exported encoder's output (ORTEncoderOutput)")
        batch = encoder_outputs.last_hidden_state.shape[0]
        if decoder_input_ids.shape[0] != batch:
            raise ValueError(
                f"`decoder_input_ids` has batch size {decoder_input_ids.shape[0]} but the source has {batch}"
            )
        if attention_mask is None:
            attention_mask = torch.ones(encoder_outputs.last_hidden_state.shape[:2], dtype=torch.long)
        attention_mask = attention_mask.to(torch.long)
        if self.config.model_type == TRANSFORMER_TYPE:
            logits, cache = self._transformer_steps(decoder_input_ids, attention_mask, encoder_outputs, cache)
        else:
            logits, cache = self._rnn_steps(decoder_input_ids, attention_mask, encoder_outputs, cache)
        loss = masked_cross_entropy(logits, labels) if labels is not None else None
        output = Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            **cache_output(cache if use_cache is not False else None),
        )
        return self._outputs(output, return_dict)

    def _rnn_steps(self, decoder_input_ids, attention_mask, encoder_outputs, cache):
        graphs = self.info["graphs"]
        if cache is None:
            state = tuple(
                s.transpose(0, 1) for s in (encoder_outputs.state, encoder_outputs.cell_state) if s is not None
            )
            cache = RNNDecoderCache(state, encoder_outputs.feed, None, 0)
        elif not isinstance(cache, RNNDecoderCache):
            raise ValueError(f"`cache` must be an RNNDecoderCache (the decoder's recurrent state), got {type(cache)}")
        session, names = self._graph("decoder")
        steps = []
        for t in range(decoder_input_ids.shape[1]):
            token = decoder_input_ids[:, t : t + 1].to(torch.long)
            if graphs["attention"]:
                inputs = [token, encoder_outputs.last_hidden_state, attention_mask, encoder_outputs.keys, cache.feed]
                logits, feed, *state = _run(session, names, [*inputs, *cache.state])
                cache.feed = feed
            else:
                logits, *state = _run(session, names, [token, *cache.state])
            cache.state = tuple(state)
            cache.seen_tokens += 1
            steps.append(logits)
        return torch.stack(steps, dim=1), cache  # (B, T, V)

    def _transformer_steps(self, decoder_input_ids, attention_mask, encoder_outputs, cache):
        layers = self.info["graphs"]["decoder_layers"]
        if cache is None:
            cache = ORTKeyValueCache(layers)
        elif not isinstance(cache, ORTKeyValueCache):
            raise ValueError(
                f"`cache` must be an ORTKeyValueCache (the exported decoder's keys/values), got {type(cache)}"
            )
        cross = encoder_outputs.cross_key_values  # (B, L, 2, nh, S, hs)
        cross_list = [cross[:, i, j] for i in range(layers) for j in range(2)]
        session, names = self._graph("decoder")
        steps = []
        for t in range(decoder_input_ids.shape[1]):
            if cache.key_values is None:
                batch, _, _, heads, _, head_dim = cross.shape
                cache.key_values = [torch.zeros(batch, heads, 0, head_dim) for _ in range(2 * layers)]
            token = decoder_input_ids[:, t : t + 1].to(torch.long)
            logits, *present = _run(session, names, [token, attention_mask, *cache.key_values, *cross_list])
            cache.key_values = present
            steps.append(logits)
        return torch.stack(steps, dim=1), cache  # (B, T, V)


class _ORTForward(ORTModel):
    output_class = SequenceClassifierOutput
    output_field = "logits"

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, return_dict=None, **kwargs):
        """The exported forward; ``labels`` give the loss of the PyTorch head (cross-entropy, MSE or BCE by the
        config's ``problem_type`` for a classifier, per-token cross-entropy with -100 ignored for a tagger)."""
        if input_ids is None:
            raise ValueError(f"{type(self).__name__} takes `input_ids`")
        labels = kwargs.pop("labels", None) if self.loss_function_of_labels is not None else None
        self.refuse_arguments(kwargs)
        session, names = self._graph("model")
        values = [input_ids.to(torch.long), _long(attention_mask, input_ids)]
        if "token_type_ids" in names:
            values.append(
                torch.zeros_like(input_ids, dtype=torch.long) if token_type_ids is None else token_type_ids.long()
            )
        elif token_type_ids is not None:
            self.refuse_arguments({"token_type_ids": token_type_ids})
        (output,) = _run(session, names, values)
        fields = {self.output_field: output}
        if labels is not None:
            fields["loss"] = self.loss_function_of_labels(output, labels)
        return self._outputs(self.output_class(**fields), return_dict)

    loss_function_of_labels = None


class ORTModelForSequenceClassification(_ORTForward):
    """A sentence classifier (RNN or BERT) on ONNX Runtime: ``logits`` (B, num_labels)."""

    def loss_function_of_labels(self, logits, labels):
        return sequence_classification_loss(logits, labels, self.config.num_labels, self.config.problem_type)


class ORTModelForTokenClassification(_ORTForward):
    """A tagger (RNN or BERT) on ONNX Runtime: ``logits`` (B, T, num_labels)."""

    output_class = TokenClassifierOutput

    def loss_function_of_labels(self, logits, labels):
        return token_classification_loss(logits, labels, self.config.num_labels)


class ORTModelForFeatureExtraction(_ORTForward):
    """An encoder (``RNNModel``, ``BertModel``) on ONNX Runtime: ``last_hidden_state`` (B, T, D)."""

    output_class = BaseModelOutput
    output_field = "last_hidden_state"


ORT_CLASSES = {
    "causal_lm": ORTModelForCausalLM,
    "seq2seq_lm": ORTModelForSeq2SeqLM,
    "sequence_classification": ORTModelForSequenceClassification,
    "token_classification": ORTModelForTokenClassification,
    "feature_extraction": ORTModelForFeatureExtraction,
}


def load_onnxruntime(folder: str | os.PathLike, threads: int | None = None, providers: list | None = None) -> ORTModel:
    """Load a folder written by :func:`to_onnx` (``hf-seq-export onnx``) as its ``ORTModelFor...`` class.

    ``threads``: ONNX Runtime's intra-op threads (None: its default, every core); ``providers``: execution
    providers (default ``["CPUExecutionProvider"]``). ``generate()`` takes the PyTorch model's arguments."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as error:
        raise ImportError("load_onnxruntime needs onnxruntime: pip install onnxruntime") from error
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder (an ONNX export written by to_onnx / hf-seq-export onnx)")
    info_path = folder / ONNX_INFO
    if not info_path.is_file():
        raise OnnxExportError(f"{folder} is not an ONNX export of hf_seq (no {ONNX_INFO}; write one with to_onnx)")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    config = AutoConfig.from_pretrained(folder)
    graph_files = [g["file"] for g in info["graphs"].values() if isinstance(g, dict) and "file" in g]
    missing = [name for name in graph_files if not (folder / name).is_file()]
    if missing:
        raise OnnxExportError(f"{folder} lacks {missing[0]}, which {ONNX_INFO} lists; export the model again")
    sessions = {
        name: _session(folder / graph["file"], threads, providers)
        for name, graph in info["graphs"].items()
        if isinstance(graph, dict) and "file" in graph
    }
    check_graphs_match_manifest(folder, info, sessions)
    if any((folder / name).is_file() for name in TOKENIZER_FILES):  # the tokenizer saved beside the graphs
        check_tokenizer_fits(
            folder_tokenizer(folder, OnnxExportError), config, OnnxExportError, f"the tokenizer of {folder}"
        )
    model = ORT_CLASSES[info["kind"]](config, sessions, info, folder)
    if "generate" in sessions:
        from .onnx_generate import GeneratingGraph

        model.generating_graph = GeneratingGraph(
            folder, session=sessions["generate"], sample_session=sessions.get("sample")
        )
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder)
    model.name_or_path = str(folder)
    return model.eval()


__all__ = [
    "ONNX_QUANTIZATIONS",
    "ORTEncoderOutput",
    "ORTKeyValueCache",
    "ORTGenerationMixin",
    "ORTModel",
    "ORTModelForCausalLM",
    "ORTModelForFeatureExtraction",
    "ORTModelForSeq2SeqLM",
    "ORTModelForSequenceClassification",
    "ORTModelForTokenClassification",
    "OnnxExportError",
    "check_graphs_match_manifest",
    "check_onnx_exportable",
    "load_onnxruntime",
    "quantize_graphs",
    "to_onnx",
]
