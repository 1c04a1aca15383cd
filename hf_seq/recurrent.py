"""The one recurrent core of hf_seq: SimpleRNN / LSTM / GRU layers, stacked, uni- or bidirectional, over padded batches.

``RecurrentStack`` runs ``num_layers`` recurrent layers over a batch-first input and guarantees that **padding never
changes a sequence's result**: left- or right-padded rows give the outputs and final state of the same sequence run
alone, padded output positions are zero, and the final state is the state at each sequence's last real token (for
the backward direction: after reading the first real token).

Each layer is a :class:`RecurrentLayer` (both directions of one level): the unit that activation checkpointing
recomputes and that FSDP / ``device_map`` can place on its own. It holds PyTorch's parameters under PyTorch's names
and shapes (``layers.0.weight_ih_l0``, ``layers.0.bias_hh_l0_reverse``, as a one-layer ``torch.nn.LSTM``) and has two
implementations over the SAME tensors:

* ``implementation="fused"`` calls the fused kernels of ``torch.nn.RNN/LSTM/GRU`` (``torch._VF.rnn_tanh/lstm/gru``:
  oneDNN on CPU, cuDNN on CUDA);
* ``implementation="cell"`` runs the lecture notes' equations step by step (``rnn_step``, ``lstm_step``,
  ``gru_step``); it is tested equal to the fused path.

The code is in three files: ``recurrent_cells.py`` holds the cells (the notes' equations, the LSTMN scan, the
registry of cell types), ``recurrent_kernels.py`` the kernels of one layer and the one function that chooses among
them (:func:`~.recurrent_kernels.choose_kernel`, whose docstring is the rule), and this file the stack, the
quantization swap and the LSTMN layer; every public name of the three is importable from here.

How padding reaches the fused kernel depends on where the code runs (see :func:`make_padding_plan`):

* **eager on CPU** (reading tensor values is free): the mask is validated (a row with holes is an error), a batch
  without padding skips all mask handling, and a padded batch takes the faster of two paths, by its fraction of
  real tokens (:data:`ALIGNED_FILL`): packing (``pack_padded_sequence``: no work on padding, but lengths on the host
  and data-dependent shapes), or the static path below (oneDNN runs the LSTM only on unpacked input).
* **everywhere else** (``torch.compile``, ``torch.export`` / ONNX, CUDA or any accelerator): one static-shape path
  without host reads. Rows are shifted so that every sequence starts at position 0 (a gather), each direction runs
  the fused kernel over the whole padded length, the final ``h`` is gathered at each row's last real token, and an
  LSTM's cell state is carried unchanged through the trailing padding by one extra input column that saturates the
  forget gate to 1 and the input gate to 0 at padded steps (``c_t = 1·c_{t-1} + 0·g``, exactly, in value and
  gradient). A batch passed without ``attention_mask`` is one kernel call per layer (cuDNN on CUDA).

Dynamic int8 quantization (``hf_seq.toolkit.quantization.quantize_dynamic_int8``, over torch's ``quantize_dynamic``) replaces
modules by their exact class (``nn.LSTM``, ``nn.GRU``), and TorchDynamo refuses to trace any ``nn.RNN/LSTM/GRU``
instance, so a :class:`RecurrentLayer` is neither. :func:`to_torch_rnn_modules_` (``model.prepare_for_quantization_()``)
swaps each for the ``torch.nn`` module holding the same parameter tensors, an explicit eager-only step before
quantizing.

Adapters: each :class:`RecurrentLayer` also shows its gate projections as ``nn.Linear`` modules (``ih_l0``, ``hh_l0``,
``*_reverse``: :class:`GateProjection`, views holding no tensor of their own), so PEFT's LoRA with
``target_modules="all-linear"`` reaches the recurrent weights; the layer then runs its fused kernel over
``W + ΔW`` (:meth:`RecurrentLayer.adapter_path`).

A new cell type plugs in through :func:`register_cell` (see :class:`CellType`); a cell without a fused kernel
provides ``build_layer`` (its parameter holder) and either a ``step`` function or a whole ``scan`` over time, and
always runs on the cell path. The self-attention LSTM (``"self_attention_lstm"``, LSTMN) is such a
cell: its scan attends over all previous states through the shared attention core.

Generation: :class:`RecurrentCache` is the one cache protocol of a recurrent state in ``generate()`` (beam
reordering, row selection and repetition, export flattening); the language model's ``RNNCache`` and the seq2seq
decoder's ``RNNDecoderCache`` are it with their own constructors and fields.

State layout (like ``torch.nn``): a tuple of tensors shaped ``(num_layers * num_directions, B, H)``, ordered layer 0
forward, layer 0 backward, layer 1 forward, ... — ``(h,)`` for rnn/gru, ``(h, c)`` for lstm, ``(h, c, h̃, tape_h,
tape_c, tape_mask)`` for self_attention_lstm (the tape of previous states, (L*D, B, S, H)). ``state[0]`` is always
the hidden state ``h`` (poolers rely on that).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .attention import AttentionScore
from .recurrent_cells import (
    CELL_TYPES,
    IMPLEMENTATIONS,
    SELF_ATTENTION_LSTM_STATES,
    CellType,
    ScanFn,
    State,
    StepFn,
    get_cell_type,
    gru_step,
    lstm_step,
    register_cell,
    rnn_step,
    self_attention_lstm_scan,
)
from .recurrent_kernels import (
    ALIGNED,
    ALIGNED_FILL,
    FOLD,
    MODULES,
    PACKED,
    PADDED,
    GateProjection,
    PaddingPlan,
    RecurrentLayer,
    cell_forward,
    choose_kernel,
    make_layer,
    make_padding_plan,
    roll_rows,
)

# ----------------------------------------------------------------------------------------------------------------
# The stack
# ----------------------------------------------------------------------------------------------------------------


class RecurrentLayerOutput(nn.Module):
    """What ``output_hidden_states`` returns for one recurrent layer, as a module that ``capture_outputs`` records
    (``_can_record_outputs``): its output ``(hidden_states,)`` is the layer's outputs in the caller's layout
    ``(B, T, D*H)``, zero at padding. It holds no parameter; :class:`RecurrentStack` calls it after every layer, only
    when hidden states are asked for (its layers run in packed or aligned layouts, which a hook on a layer would see).

    ``inputs`` is the stack's input ``(B, T, I)``: the recorder takes it from the first call as the hidden state
    before the first layer (the embeddings). A model without a recurrent layer calls it once with
    ``hidden_states=None``: the embeddings are then its only hidden state."""

    def forward(self, inputs: torch.Tensor, hidden_states: torch.Tensor | None) -> tuple[torch.Tensor | None]:
        return (hidden_states,)


class RecurrentStack(nn.Module):
    """``num_layers`` recurrent layers (optionally bidirectional) over a batch-first padded input.

    Args:
        cell: a registered cell type name ("rnn", "lstm", "gru", or one added with :func:`register_cell`).
        input_size: features per input step ``I``.
        hidden_size: state size ``H`` per direction.
        num_layers: stacked layers; layer ``k+1`` reads the (concatenated) outputs of layer ``k`` ("return sequences").
        bidirectional: run a second, independent layer right-to-left and concatenate (outputs ``2H`` wide).
        dropout: dropout on the outputs of every layer except the last (as ``torch.nn.LSTM``).
        implementation: "fused" (``torch.nn`` kernels) or "cell" (explicit per-step equations).

    ``forward(inputs (B, T, I), attention_mask (B, T) or None, state=None) -> (outputs (B, T, D*H), state)``.
    """

    def __init__(
        self,
        cell: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        implementation: str = "fused",
    ) -> None:
        super().__init__()
        self.cell_type = get_cell_type(cell)
        for name, value in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout!r}")
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"`implementation` must be one of {list(IMPLEMENTATIONS)}, got {implementation!r}")
        self.cell = cell
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        self.dropout = float(dropout)
        self.implementation = implementation
        self.torch_modules = False  # the layers are torch.nn modules (to_torch_rnn_modules_), run by torch.nn's rules
        self.layers = nn.ModuleList(
            make_layer(
                self.cell_type,
                input_size if k == 0 else hidden_size * self.num_directions,
                hidden_size,
                self.bidirectional,
                implementation,
            )
            for k in range(num_layers)
        )
        self.layer_output = RecurrentLayerOutput()  # hidden states in batch layout, run only when asked for

    @classmethod
    def from_config(
        cls, config, input_size: int, num_layers: int, bidirectional: bool = False, hidden_size: int | None = None
    ) -> RecurrentStack:
        """The stack of a model ``config``: its ``cell``, ``hidden_size`` (unless ``hidden_size`` is given),
        ``dropout`` and ``recurrent_implementation``, over ``input_size`` features."""
        return cls(
            config.cell,
            input_size,
            config.hidden_size if hidden_size is None else hidden_size,
            num_layers=num_layers,
            bidirectional=bidirectional,
            dropout=config.dropout,
            implementation=config.recurrent_implementation,
        )

    @property
    def output_size(self) -> int:
        """Width of the outputs: ``num_directions * hidden_size``."""
        return self.num_directions * self.hidden_size

    @property
    def uses_fused_path(self) -> bool:
        """True when forward calls the fused ``torch.nn`` kernels (implementation "fused", the cell has them, and no
        adapter on a gate needs its own forward: :meth:`RecurrentLayer.adapter_path`)."""
        return (
            self.implementation == "fused"
            and self.cell_type.has_kernel
            and all(layer.uses_kernel for layer in self.layers if isinstance(layer, RecurrentLayer))
        )

    def extra_repr(self) -> str:
        return (
            f"cell={self.cell!r}, input_size={self.input_size}, hidden_size={self.hidden_size}, "
            f"num_layers={self.num_layers}, bidirectional={self.bidirectional}, dropout={self.dropout}, "
            f"implementation={self.implementation!r}"
        )

    # -- public API ----------------------------------------------------------------------------------------------

    def forward(
        self,
        inputs: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        state: State | None = None,
        output_hidden_states: bool = False,
    ) -> tuple[torch.Tensor, State] | tuple[torch.Tensor, State, tuple[torch.Tensor, ...]]:
        """Run the stack.

        Args:
            inputs: (B, T, input_size).
            attention_mask: (B, T), 1/True for real tokens, 0 for padding (left or right); ``None`` = no padding.
            state: initial state, tuple of ``(num_layers * num_directions, B, H)`` tensors; ``None`` = zeros.
            output_hidden_states: also return the outputs of every layer (tuple of ``(B, T, D*H)``).

        Returns:
            ``(outputs, final_state)`` or, with ``output_hidden_states``, ``(outputs, final_state, layer_outputs)``.
        """
        if inputs.dim() != 3 or inputs.shape[-1] != self.input_size:
            raise ValueError(f"`inputs` must have shape (batch, seq_len, {self.input_size}), got {tuple(inputs.shape)}")
        batch_size, seq_len, _ = inputs.shape
        if seq_len == 0:
            raise ValueError("`inputs` must have at least one time step (seq_len >= 1)")
        self._check_state(state, batch_size)
        if self.torch_modules:
            return self._forward_torch_modules(inputs, attention_mask, state, output_hidden_states)
        plan = make_padding_plan(
            attention_mask,
            batch_size,
            seq_len,
            PACKED if self.uses_fused_path else PADDED,
            ALIGNED_FILL.get(self.cell_type.mode) if self.uses_fused_path else None,
        )
        x = self._to_layout(inputs, plan)
        finals: list[State] = []
        layer_outputs = []
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = self._dropout_between_layers(x)
            layer_state = self._layer_state(state, k)
            if isinstance(layer, RecurrentLayer):
                x, *final = layer(x, *layer_state, padding=plan)
            else:  # a registered cell's own parameter holder: the cell path
                x, *final = cell_forward(
                    layer, self.cell_type, self.hidden_size, self.num_directions, x, layer_state or None, plan
                )
            finals.append(final)
            if output_hidden_states:
                layer_outputs.append(self.layer_output(inputs, self._from_layout(x, plan, seq_len))[0])
        outputs = layer_outputs[-1] if output_hidden_states else self._from_layout(x, plan, seq_len)
        final_state = tuple(finals[0]) if len(finals) == 1 else tuple(map(torch.cat, zip(*finals)))  # (L*D, B, H)
        if plan is not None and plan.layout == PACKED and plan.empty is not None:
            final_state = self._restore_empty_rows(final_state, state, plan.empty)
        if output_hidden_states:
            return outputs, final_state, tuple(layer_outputs)
        return outputs, final_state

    def to_torch_modules_(self) -> RecurrentStack:
        """In place: every layer becomes the ``torch.nn.RNN/LSTM/GRU`` holding its parameter tensors (same names, same
        state dict), run as ``torch.nn`` runs it (a padded batch as a ``PackedSequence``). Eager only: TorchDynamo does
        not trace ``torch.nn`` recurrent modules. ``ValueError`` for a cell without a ``torch.nn`` module."""
        if not self.cell_type.has_kernel:
            raise ValueError(
                f"cell {self.cell!r} has no torch.nn module to swap in (only rnn, lstm and gru have one); its "
                "nn.Linear layers can still be quantized as they are"
            )
        for k, layer in enumerate(self.layers):
            if isinstance(layer, RecurrentLayer):
                self.layers[k] = layer.to_torch_module()
        self.torch_modules = True
        return self

    def _forward_torch_modules(
        self, inputs: torch.Tensor, attention_mask: torch.Tensor | None, state: State | None, output_hidden_states: bool
    ):
        """Forward over ``torch.nn`` modules (after :meth:`to_torch_modules_`; also their int8 versions that
        ``quantize_dynamic`` puts in their place): each layer gets a batch-first tensor, or a ``PackedSequence`` of
        the real tokens of a padded batch, and its initial state as ``hx``. Same results as the other paths."""
        batch_size, seq_len, _ = inputs.shape
        plan = make_padding_plan(attention_mask, batch_size, seq_len, PACKED)  # eager CPU: validated, None if unpadded
        x = inputs
        if plan is not None:
            aligned = inputs if plan.left_aligned else roll_rows(inputs, plan.starts)  # real tokens first
            lengths = plan.lengths.cpu().clamp(min=1)
            x = pack_padded_sequence(aligned, lengths, batch_first=True, enforce_sorted=False)
        finals, layer_outputs = [], []
        for k, layer in enumerate(self.layers):
            if k > 0 and self.dropout > 0:
                x = (
                    self._dropout_between_layers(x)
                    if plan is None
                    else x._replace(data=self._dropout_between_layers(x.data))
                )
            layer_state = self._layer_state(state, k)  # each (D, B, H); rows in the caller's order, as torch.nn takes
            hx = (layer_state if self.cell_type.num_states == 2 else layer_state[0]) if layer_state else None
            x, final = layer(x, hx)
            finals.append(final if isinstance(final, tuple) else (final,))
            if output_hidden_states:
                layer_outputs.append(self.layer_output(inputs, self._unpack(x, plan, seq_len))[0])
        outputs = layer_outputs[-1] if output_hidden_states else self._unpack(x, plan, seq_len)
        final_state = tuple(map(torch.cat, zip(*finals)))  # (L*D, B, H)
        if plan is not None and plan.empty is not None:
            final_state = self._restore_empty_rows(final_state, state, plan.empty)
        if output_hidden_states:
            return outputs, final_state, tuple(layer_outputs)
        return outputs, final_state

    @staticmethod
    def _unpack(x, plan: PaddingPlan | None, seq_len: int) -> torch.Tensor:
        """A torch.nn layer's output -> (B, T, F) at the caller's positions, zero at padding."""
        if plan is None:
            return x
        outputs, _ = pad_packed_sequence(x, batch_first=True, total_length=seq_len)  # (B, T, F), left-aligned
        if not plan.left_aligned:
            outputs = roll_rows(outputs, -plan.starts)
        return outputs * plan.mask.unsqueeze(-1).to(outputs.dtype)  # rows without tokens read one step: zeroed

    # -- helpers -------------------------------------------------------------------------------------------------

    def _to_layout(self, inputs: torch.Tensor, plan: PaddingPlan | None) -> torch.Tensor:
        """The first layer's input in the plan's layout (packing records its metadata in ``plan``)."""
        if plan is None or plan.layout == PADDED:
            return inputs
        if plan.layout == ALIGNED:  # every row starts at 0; zeros after its real tokens (no garbage in the kernel)
            aligned = inputs if plan.left_aligned else roll_rows(inputs, plan.starts)
            return torch.where(plan.aligned_mask.unsqueeze(-1), aligned, torch.zeros_like(aligned))
        aligned = inputs if plan.left_aligned else roll_rows(inputs, plan.starts)  # real tokens first
        packed = pack_padded_sequence(aligned, plan.lengths.cpu().clamp(min=1), batch_first=True, enforce_sorted=False)
        plan.batch_sizes, plan.sorted_indices = packed.batch_sizes, packed.sorted_indices
        plan.unsorted_indices = packed.unsorted_indices
        return packed.data  # (N, I)

    @staticmethod
    def _from_layout(x: torch.Tensor, plan: PaddingPlan | None, seq_len: int) -> torch.Tensor:
        """Layer outputs in the layout of ``plan`` -> (B, T, F) at the caller's positions, zero at padding."""
        if plan is None or plan.layout == PADDED:
            return x
        if plan.layout == ALIGNED:
            return x if plan.left_aligned else roll_rows(x, -plan.starts)  # back to where the real tokens were
        packed = PackedSequence(x, plan.batch_sizes, plan.sorted_indices, plan.unsorted_indices)
        outputs, _ = pad_packed_sequence(packed, batch_first=True, total_length=seq_len)  # (B, T, F), left-aligned
        if not plan.left_aligned:
            outputs = roll_rows(outputs, -plan.starts)
        if plan.empty is not None:
            outputs = outputs * plan.mask.unsqueeze(-1).to(outputs.dtype)
        return outputs

    def _check_state(self, state: State | None, batch_size: int) -> None:
        if state is None:
            return
        if not isinstance(state, (tuple, list)):
            state = (state,)
        if self.cell_type.has_fixed_size_state and len(state) != self.cell_type.num_states:
            raise ValueError(
                f"`state` for cell {self.cell!r} must be a tuple of {self.cell_type.num_states} tensors, got {len(state)}"
            )
        expected = (self.num_layers * self.num_directions, batch_size, self.hidden_size)
        for tensor in state:
            if tensor.shape[:2] != expected[:2] or (
                self.cell_type.has_fixed_size_state and tuple(tensor.shape) != expected
            ):
                raise ValueError(
                    f"`state` tensors must have shape (num_layers * num_directions, batch, hidden) = {expected}, "
                    f"got {tuple(tensor.shape)}"
                )

    def _layer_state(self, state: State | None, layer: int) -> State:
        """The state tensors of one layer, each (D, B, ...); empty when there is no initial state."""
        if state is None:
            return ()
        if not isinstance(state, (tuple, list)):
            state = (state,)
        d = self.num_directions
        return tuple(s[layer * d : (layer + 1) * d] for s in state)

    def _dropout_between_layers(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p=self.dropout, training=self.training) if self.dropout > 0 else x

    @staticmethod
    def _restore_empty_rows(final: State, state: State | None, empty: torch.Tensor) -> State:
        """Packed path: rows without a single real token keep their initial state (nothing was read)."""
        restored = []
        for i, tensor in enumerate(final):
            initial = torch.zeros_like(tensor) if state is None else state[i]
            keep = empty.view(1, -1, *([1] * (tensor.dim() - 2)))  # (1, B, 1...)
            restored.append(torch.where(keep, initial, tensor))
        return tuple(restored)


# ----------------------------------------------------------------------------------------------------------------
# The recurrent state as generate()'s cache (the language model's and the seq2seq decoder's)
# ----------------------------------------------------------------------------------------------------------------


class RecurrentCache:
    """A recurrent state as ``generate()``'s cache: passed as ``cache=``, returned as ``output.cache``.

    It holds the stack's ``state`` (tuple of tensors with the batch on dim 1, ``(num_layers * D, B, ...)``: ``(h,)``,
    ``(h, c)``, or a registered cell's tuple), the number of tokens read into it (``seen_tokens``) and, as data,
    any batch-first tensors a model keeps beside the state (:attr:`batch_first_fields`: the seq2seq decoder's
    input-feeding vector and its prepared encoder keys). Beam search calls :meth:`reorder_cache`, so each beam
    continues from the state of the beam it was chosen from (fairseq's ``reorder_incremental_state``); contrastive
    search and a cache expanded for more beams call :meth:`batch_repeat_interleave` / :meth:`batch_select_indices`.
    Every tensor of the cache is the state or one of those fields; no other method touches a tensor.

    The language model's :class:`~.modeling_rnn.RNNCache` and the seq2seq decoder's
    :class:`~.modeling_rnn_seq2seq.RNNDecoderCache` are this class with their own constructor and fields. Each
    subclass is registered with ``torch.utils._pytree`` (its tensors are the state, then the fields), so that
    ``torch.export`` / ONNX export return it as its tensors.
    """

    is_compileable = False  # generate() never tries to compile around it
    is_croppable = False  # a running state cannot be rolled back to a shorter prefix
    # names of the batch-first (B, ...) tensors kept beside the state (None when absent); data, set by subclasses
    batch_first_fields: tuple[str, ...] = ()

    def __init__(self, num_layers: int | None, state: State | None = None, seen_tokens: int = 0, **fields) -> None:
        unknown = sorted(set(fields) - set(self.batch_first_fields))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unexpected fields {unknown}; it keeps {self.batch_first_fields}"
            )
        self.num_layers = num_layers if num_layers is not None else state[0].shape[0]
        self.state = None if state is None else tuple(state)
        self.seen_tokens = seen_tokens
        for name in self.batch_first_fields:
            setattr(self, name, fields.get(name))

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        _register_cache_pytree(cls)

    def __len__(self) -> int:
        return self.num_layers

    def __repr__(self) -> str:
        shapes = None if self.state is None else [tuple(s.shape) for s in self.state]
        return f"{type(self).__name__}(seen_tokens={self.seen_tokens}, state={shapes})"

    @property
    def is_linear(self) -> list[bool]:
        """Every layer is recurrent ("linear attention" in transformers' terms): no per-token keys to slice. One entry
        per layer (what ``generate`` checks)."""
        return [True] * self.num_layers

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens read into the state so far."""
        return self.seen_tokens

    def batch_size(self) -> int | None:
        """Rows of the state (None before the first forward)."""
        return None if self.state is None else self.state[0].shape[1]

    def update(self, state: State, num_new_tokens: int, **fields) -> None:
        """Store the state after ``num_new_tokens`` more tokens (and the new values of ``fields``)."""
        self.state = tuple(state)
        self.seen_tokens += num_new_tokens
        for name, value in fields.items():
            if name not in self.batch_first_fields:
                raise TypeError(f"{type(self).__name__} keeps no field {name!r} (it keeps {self.batch_first_fields})")
            setattr(self, name, value)

    def _map_rows(self, on_state, on_field) -> None:
        """Apply a row operation to every tensor: ``on_state(t)`` on the state (batch on dim 1), ``on_field(t)`` on
        the batch-first fields (batch on dim 0)."""
        if self.state is not None:
            self.state = tuple(on_state(s) for s in self.state)
        for name in self.batch_first_fields:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, on_field(value))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search, in place: row ``i`` continues from the state of row ``beam_idx[i]``."""
        self._map_rows(
            lambda s: s.index_select(1, beam_idx.to(s.device)),  # (L, B, ...)
            lambda f: f.index_select(0, beam_idx.to(f.device)),  # (B, ...)
        )

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows ``indices``."""
        self.reorder_cache(indices)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row ``repeats`` times (rows i*repeats ... (i+1)*repeats-1 copy row i)."""
        self._map_rows(lambda s: s.repeat_interleave(repeats, dim=1), lambda f: f.repeat_interleave(repeats, dim=0))


def _flatten_cache(cache: RecurrentCache) -> tuple[list, tuple]:
    state = [] if cache.state is None else list(cache.state)
    fields = [getattr(cache, name) for name in cache.batch_first_fields]
    return [*state, *fields], (cache.num_layers, cache.seen_tokens, None if cache.state is None else len(state))


def _flatten_cache_with_keys(cache: RecurrentCache) -> tuple[list, tuple]:
    children, context = _flatten_cache(cache)
    return [(pytree.SequenceKey(i), child) for i, child in enumerate(children)], context


def _register_cache_pytree(cls: type[RecurrentCache]) -> None:
    """torch.export / ONNX: a cache in a model's output is its tensors (the state, then the fields)."""

    def unflatten(children: list, context: tuple) -> RecurrentCache:
        num_layers, seen_tokens, num_states = context
        cache = cls.__new__(cls)
        state = None if num_states is None else tuple(children[:num_states])
        fields = dict(zip(cls.batch_first_fields, children[num_states or 0 :]))
        RecurrentCache.__init__(cache, num_layers, state, seen_tokens, **fields)
        return cache

    pytree.register_pytree_node(
        cls,
        _flatten_cache,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=_flatten_cache_with_keys,
    )


def to_torch_rnn_modules_(module: nn.Module) -> nn.Module:
    """Prepare ``module`` for torch's ``quantize_dynamic`` (:func:`hf_seq.toolkit.quantization.quantize_dynamic_int8`), in place (fairseq-style explicit step):
    every :class:`RecurrentLayer` of every :class:`RecurrentStack` in it becomes the ``torch.nn.RNN/LSTM/GRU`` holding
    the same parameter tensors, so that ``quantize_dynamic(module, {nn.Linear, nn.LSTM, nn.GRU})`` replaces the LSTM
    and GRU layers with ``torch.ao.nn.quantized.dynamic.LSTM/GRU`` (a SimpleRNN layer stays float: torch has no
    dynamic int8 ``nn.RNN``). Parameter names, the state dict and the outputs do not change.

    A prepared model runs in eager mode only: TorchDynamo does not trace ``torch.nn`` recurrent modules, so compiling
    or exporting it is not supported (compile and export the model as loaded). Returns ``module``.
    """
    for stack in [m for m in module.modules() if isinstance(m, RecurrentStack)]:
        stack.to_torch_modules_()
    return module


# ----------------------------------------------------------------------------------------------------------------
# Self-attention LSTM (LSTMN): its equations are self_attention_lstm_scan in recurrent_cells.py; here its layer.
# ----------------------------------------------------------------------------------------------------------------


class SelfAttentionLSTMLayer(RecurrentLayer):
    """One self-attention LSTM layer: the LSTM gates under ``torch.nn.LSTM``'s names (so the weights initialise and
    load like an LSTM's) plus one additive :class:`AttentionScore` per direction (``attention_l0``,
    ``attention_l0_reverse``). It always runs :func:`self_attention_lstm_scan` (the cell path)."""

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool = False) -> None:
        super().__init__("self_attention_lstm", input_size, hidden_size, bidirectional, implementation="cell")
        # query = [x_t; h̃_{t-1}] (W_x, W_h̃ and a bias in query_proj), keys = previous h_i (W_h in key_proj), v = energy
        self.attention_l0 = AttentionScore("additive", input_size + hidden_size, hidden_size, hidden_size)
        if bidirectional:
            self.attention_l0_reverse = AttentionScore("additive", input_size + hidden_size, hidden_size, hidden_size)


register_cell(
    CellType(
        "self_attention_lstm",
        num_gates=4,
        num_states=len(SELF_ATTENTION_LSTM_STATES),
        mode="LSTM",
        build_layer=SelfAttentionLSTMLayer,
        scan=self_attention_lstm_scan,
    )
)


__all__ = [
    "ALIGNED",
    "ALIGNED_FILL",
    "CELL_TYPES",
    "FOLD",
    "IMPLEMENTATIONS",
    "MODULES",
    "PACKED",
    "PADDED",
    "SELF_ATTENTION_LSTM_STATES",
    "CellType",
    "GateProjection",
    "PaddingPlan",
    "RecurrentCache",
    "RecurrentLayer",
    "RecurrentLayerOutput",
    "RecurrentStack",
    "ScanFn",
    "SelfAttentionLSTMLayer",
    "State",
    "StepFn",
    "cell_forward",
    "choose_kernel",
    "get_cell_type",
    "gru_step",
    "lstm_step",
    "make_padding_plan",
    "register_cell",
    "rnn_step",
    "roll_rows",
    "self_attention_lstm_scan",
    "to_torch_rnn_modules_",
]
