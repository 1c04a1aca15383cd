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

Dynamic int8 quantization: ``torch.ao.quantization.quantize_dynamic`` replaces modules by their exact class
(``nn.LSTM``, ``nn.GRU``), and TorchDynamo refuses to trace any ``nn.RNN/LSTM/GRU`` instance, so a
:class:`RecurrentLayer` is neither. :func:`to_torch_rnn_modules_` (``model.prepare_for_quantization_()``) swaps each
for the ``torch.nn`` module holding the same parameter tensors, an explicit eager-only step before quantizing.

A new cell type plugs in through :func:`register_cell` (see :class:`CellType`); a cell without a fused kernel
provides ``build_layer`` (its parameter holder) and either a ``step`` function or a whole ``scan`` over time, and
always runs on the cell path. The self-attention LSTM (``"self_attention_lstm"``, LSTMN; end of this file) is such a
cell: its scan attends over all previous states through the shared attention core.

State layout (like ``torch.nn``): a tuple of tensors shaped ``(num_layers * num_directions, B, H)``, ordered layer 0
forward, layer 0 backward, layer 1 forward, ... — ``(h,)`` for rnn/gru, ``(h, c)`` for lstm, ``(h, c, h̃, tape_h,
tape_c, tape_mask)`` for self_attention_lstm (the tape of previous states, (L*D, B, S, H)). ``state[0]`` is always
the hidden state ``h`` (poolers rely on that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import _VF, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import AttentionScore, attend
from .fast_paths import drop_all_ones_mask, packs_padding

State = tuple[torch.Tensor, ...]

IMPLEMENTATIONS = ("fused", "cell")


# ----------------------------------------------------------------------------------------------------------------
# Cell equations (the cell path). Notation of the notes: the state update multiplies a parameter matrix A with the
# concatenation [h_{t-1}; x_t]. PyTorch stores A as two blocks, A = [W_hh | W_ih], and two biases b_ih + b_hh, so
# A·[h_{t-1}; x_t] + b = W_ih·x_t + b_ih + W_hh·h_{t-1} + b_hh. The input half ``W_ih·x_t + b_ih`` of every step is
# computed for all time steps at once (``gates_x``); the step functions add the recurrent half.
# ----------------------------------------------------------------------------------------------------------------


def rnn_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """SimpleRNN step: ``h_t = tanh(A·[h_{t-1}; x_t] + b)``."""
    (h,) = state  # (B, H)
    return (torch.tanh(gates_x + F.linear(h, weight_hh, bias_hh)),)


def lstm_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """LSTM step with the notes' four gates and the cell "conveyor belt" ``c``.

    Gate rows are in PyTorch's order (input, forget, new value, output)::

        f_t = σ(W_f·[h_{t-1}; x_t] + b_f)          forget gate
        i_t = σ(W_i·[h_{t-1}; x_t] + b_i)          input gate
        c̃_t = tanh(W_c·[h_{t-1}; x_t] + b_c)       new value
        o_t = σ(W_o·[h_{t-1}; x_t] + b_o)          output gate
        c_t = f_t ⊙ c_{t-1} + i_t ⊙ c̃_t            conveyor belt
        h_t = o_t ⊙ tanh(c_t)
    """
    h, c = state  # (B, H), (B, H)
    gates = gates_x + F.linear(h, weight_hh, bias_hh)  # (B, 4H)
    i, f, g, o = gates.chunk(4, dim=-1)  # each (B, H)
    input_gate, forget_gate = torch.sigmoid(i), torch.sigmoid(f)
    new_value, output_gate = torch.tanh(g), torch.sigmoid(o)
    c = forget_gate * c + input_gate * new_value
    h = output_gate * torch.tanh(c)
    return (h, c)


def gru_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """GRU step (PyTorch's formulation: reset gate r, update gate z, candidate n; ``h_t = (1-z)⊙n + z⊙h_{t-1}``)."""
    (h,) = state  # (B, H)
    gates_h = F.linear(h, weight_hh, bias_hh)  # (B, 3H)
    x_r, x_z, x_n = gates_x.chunk(3, dim=-1)
    h_r, h_z, h_n = gates_h.chunk(3, dim=-1)
    reset = torch.sigmoid(x_r + h_r)
    update = torch.sigmoid(x_z + h_z)
    candidate = torch.tanh(x_n + reset * h_n)
    return ((1.0 - update) * candidate + update * h,)


StepFn = Callable[[torch.Tensor, State, torch.Tensor, "torch.Tensor | None"], State]
# scan(layer, suffix, inputs (B,T,I), mask (B,T) bool | None, state tuple of (B, ...) | None) -> (outputs (B,T,H), state)
ScanFn = Callable[[nn.Module, str, torch.Tensor, "torch.Tensor | None", "State | None"], "tuple[torch.Tensor, State]"]

# whether this CPU's oneDNN has a bfloat16 LSTM (AVX-512 BF16 / AMX); read once, on the first bfloat16 LSTM call
_CPU_BF16_LSTM: list[bool] = []


def _to_float32(value):
    if isinstance(value, torch.Tensor):
        return value.float() if value.dtype == torch.bfloat16 else value
    if isinstance(value, (list, tuple)):
        return type(value)(_to_float32(v) for v in value)
    return value


def _lstm_kernel(x: torch.Tensor, *args) -> tuple:
    """``torch._VF.lstm(x, *args)``; on a CPU whose oneDNN has no bfloat16 LSTM, a bfloat16 call (CPU autocast to
    bfloat16, or a bfloat16 model) runs in float32 and returns bfloat16 — there ``torch.nn.LSTM`` itself raises "could
    not create a primitive descriptor for the LSTM forward propagation primitive"."""
    bf16 = x.dtype == torch.bfloat16 or (
        torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )
    if x.device.type != "cpu" or not bf16:
        return tuple(_VF.lstm(x, *args))
    if not _CPU_BF16_LSTM:
        _CPU_BF16_LSTM.append(bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))
    if _CPU_BF16_LSTM[0]:
        return tuple(_VF.lstm(x, *args))
    with torch.autocast("cpu", enabled=False):
        out = _VF.lstm(x.float(), *_to_float32(args))
    return tuple(t.to(torch.bfloat16) for t in out)


# torch.nn.RNNBase mode -> the fused kernel torch.nn.RNN/LSTM/GRU call, and that torch.nn module
_KERNELS = {"RNN_TANH": _VF.rnn_tanh, "LSTM": _lstm_kernel, "GRU": _VF.gru}
_TORCH_MODULES = {"RNN_TANH": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}


@dataclass(frozen=True)
class CellType:
    """How one kind of recurrent cell is built and run.

    Attributes:
        name: the value of ``cell=`` in configs.
        num_gates: rows of ``weight_ih`` per hidden unit (1 rnn, 4 lstm, 3 gru); used for parameter shapes.
        num_states: tensors in the state tuple (1 = ``(h,)``, 2 = ``(h, c)``).
        step: per-step equations for the cell path (``step(gates_x_t, state, weight_hh, bias_hh) -> state``).
        mode: ``torch.nn.RNNBase`` mode of the fused kernel ("RNN_TANH", "LSTM", "GRU"); ``None``: the cell path is
            always used. Without ``build_layer`` the layer is a :class:`RecurrentLayer` of this mode.
        build_layer: ``build_layer(input_size, hidden_size, bidirectional) -> nn.Module`` holding one layer's
            parameters under PyTorch's names (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0`` and
            ``*_reverse``) plus anything extra. Defaults to a :class:`RecurrentLayer`.
        scan: optional replacement of the step loop for one direction of one layer (cells whose step needs more
            than the previous state, e.g. attention over all previous states). It receives the direction's input
            already reversed for the backward direction, a bool mask (``True`` = real token, one contiguous block
            per row; ``None`` = no padding) and the direction's initial state (tuple of ``(B, ...)`` or ``None``),
            and must return outputs ``(B, T, H)`` (zero at padding) and the state after each row's last real token.
    """

    name: str
    num_gates: int
    num_states: int
    step: StepFn | None = None
    mode: str | None = None
    build_layer: Callable[[int, int, bool], nn.Module] | None = None
    scan: ScanFn | None = None

    @property
    def has_kernel(self) -> bool:
        """True when a fused ``torch.nn`` kernel runs this cell (no custom layer, no custom scan)."""
        return self.mode is not None and self.build_layer is None and self.scan is None

    def make_layer(self, input_size: int, hidden_size: int, bidirectional: bool, implementation: str) -> nn.Module:
        """Create the parameter holder of one layer (both directions)."""
        if self.build_layer is not None:
            return self.build_layer(input_size, hidden_size, bidirectional)
        if self.mode is None:
            raise ValueError(f"cell type {self.name!r} needs either `mode` or `build_layer`")
        return RecurrentLayer(self.name, input_size, hidden_size, bidirectional, implementation)


CELL_TYPES: dict[str, CellType] = {}


def register_cell(cell_type: CellType) -> CellType:
    """Make ``cell_type`` available as ``RecurrentStack(cell=cell_type.name, ...)`` (and thus as a config value)."""
    if cell_type.step is None and cell_type.scan is None:
        raise ValueError(f"cell type {cell_type.name!r} needs a `step` or a `scan` function")
    if cell_type.mode is not None and cell_type.mode not in _KERNELS:
        raise ValueError(f"`mode` of cell type {cell_type.name!r} must be one of {sorted(_KERNELS)} or None")
    CELL_TYPES[cell_type.name] = cell_type
    return cell_type


register_cell(CellType("rnn", num_gates=1, num_states=1, step=rnn_step, mode="RNN_TANH"))
register_cell(CellType("lstm", num_gates=4, num_states=2, step=lstm_step, mode="LSTM"))
register_cell(CellType("gru", num_gates=3, num_states=1, step=gru_step, mode="GRU"))


def get_cell_type(name: str) -> CellType:
    """Look up a registered cell type; ``ValueError`` naming the allowed values otherwise."""
    if name not in CELL_TYPES:
        raise ValueError(f"`cell` must be one of {sorted(CELL_TYPES)}, got {name!r}")
    return CELL_TYPES[name]


# ----------------------------------------------------------------------------------------------------------------
# Padding
# ----------------------------------------------------------------------------------------------------------------

PACKED, ALIGNED, PADDED = "packed", "aligned", "padded"

# Eager CPU: the fraction of real tokens from which a padded batch runs the kernel over the padding ("aligned")
# instead of packing it. oneDNN runs the LSTM only on unpacked input, and packed input falls back to a slower
# kernel: measured with one thread, the aligned LSTM step is 1.1-2.4x faster from half the positions real (fill 0.5
# to 0.75; below 0.3 packing can win by up to 1.5x). The GRU and SimpleRNN kernels are the same either way, so
# skipping the padding (packing) wins or ties there.
ALIGNED_FILL = {"LSTM": 0.5}


@dataclass
class PaddingPlan:
    """Where the real tokens of a padded batch are (one contiguous block ``[starts, starts + lengths)`` per row) and
    how the layers receive the batch (``layout``):

    * ``"packed"`` (eager CPU, fused kernel): a ``PackedSequence``'s data ``(N, F)``; ``batch_sizes``,
      ``sorted_indices``, ``unsorted_indices`` are set by the stack when it packs.
    * ``"aligned"`` (static path, fused kernel): ``(B, T, F)`` with every row shifted to start at 0 and zeros after
      its ``lengths`` real tokens (``aligned_mask``).
    * ``"padded"`` (cell path): ``(B, T, F)`` at the caller's positions (``mask``).
    """

    layout: str
    mask: torch.Tensor  # (B, T) bool, True = real token, at the caller's positions
    lengths: torch.Tensor  # (B,) int64 on the input's device
    starts: torch.Tensor  # (B,) int64 first real position (0 for empty rows)
    empty: torch.Tensor | None  # (B,) bool rows without real tokens; None when known to be none (eager only)
    left_aligned: bool | None = None  # every row starts at 0 (eager only; None = unknown)
    batch_sizes: torch.Tensor | None = None
    sorted_indices: torch.Tensor | None = None
    unsorted_indices: torch.Tensor | None = None
    _aligned_mask: torch.Tensor | None = None
    _reverse_index: torch.Tensor | None = None

    @property
    def aligned_mask(self) -> torch.Tensor:
        """(B, T) bool: position ``t < lengths`` (the real tokens after shifting every row to start at 0)."""
        if self._aligned_mask is None:
            pos = torch.arange(self.mask.shape[1], device=self.mask.device).unsqueeze(0)  # (1, T)
            self._aligned_mask = pos < self.lengths.unsqueeze(1)
        return self._aligned_mask

    @property
    def reverse_index(self) -> torch.Tensor:
        """(B, T) gather index that reverses each row's real block in place and leaves padding where it is (for the
        layout's positions: aligned rows start at 0)."""
        if self._reverse_index is None:
            pos = torch.arange(self.mask.shape[1], device=self.mask.device).unsqueeze(0)  # (1, T)
            if self.layout == ALIGNED:
                self._reverse_index = torch.where(self.aligned_mask, self.lengths.unsqueeze(1) - 1 - pos, pos)
            else:
                mirrored = 2 * self.starts.unsqueeze(1) + self.lengths.unsqueeze(1) - 1 - pos
                self._reverse_index = torch.where(self.mask, mirrored, pos)  # (B, T)
        return self._reverse_index


def make_padding_plan(
    attention_mask: torch.Tensor | None,
    batch_size: int,
    seq_len: int,
    layout: str = PACKED,
    aligned_fill: float | None = None,
) -> PaddingPlan | None:
    """Describe the padding of ``attention_mask`` ``(B, T)`` for the layers; ``None`` when there is none.

    Eager on CPU (:func:`~.fast_paths.packs_padding`) the mask's values are read: a mask with holes raises
    ``ValueError``, a mask without padding gives ``None``, and a "packed" layout becomes "aligned" when at least
    ``aligned_fill`` of the ``B*T`` positions are real tokens (running the kernel over the padding is then faster than
    packing). Anywhere else nothing is read on the host: a fused-kernel layout becomes "aligned", the mask is trusted
    to be one contiguous block per row (left or right padding, as tokenizers produce), and a mask of ones is still a
    plan.
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch_size, seq_len):
        raise ValueError(
            f"`attention_mask` must have shape (batch, seq_len) = {(batch_size, seq_len)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0  # (B, T)
    if drop_all_ones_mask(mask) is None:
        return None  # nothing padded, nothing to pack
    eager = packs_padding(mask)
    lengths = mask.sum(dim=1)  # (B,)
    starts = mask.to(torch.uint8).argmax(dim=1)  # (B,) first real token (0 for empty rows)
    if not eager:  # static path: no host reads, no data-dependent shapes
        return PaddingPlan(ALIGNED if layout == PACKED else layout, mask, lengths, starts, empty=lengths == 0)
    pos = torch.arange(seq_len, device=mask.device).unsqueeze(0)  # (1, T)
    block = (pos >= starts.unsqueeze(1)) & (pos < (starts + lengths).unsqueeze(1))  # (B, T)
    if not torch.equal(block, mask):
        raise ValueError(
            "`attention_mask` must mark one contiguous block of real tokens per row (left or right padding); "
            "got a row with holes"
        )
    empty = lengths == 0
    left_aligned = not bool(starts.any())
    if layout == PACKED and aligned_fill is not None and int(lengths.sum()) >= aligned_fill * mask.numel():
        return PaddingPlan(ALIGNED, mask, lengths, starts, empty=empty, left_aligned=left_aligned)
    return PaddingPlan(
        layout, mask, lengths, starts, empty=empty if bool(empty.any()) else None, left_aligned=left_aligned
    )


def roll_rows(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Per-row circular shift along time: ``out[b, t] = x[b, (t + shift[b]) % T]``. x: (B, T, F), shift: (B,)."""
    seq_len = x.shape[1]
    pos = torch.arange(seq_len, device=x.device).unsqueeze(0)  # (1, T)
    index = (pos + shift.unsqueeze(1)) % seq_len  # (B, T)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


def _gather_time(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = x[b, index[b, t]]`` for x (B, T, F) and index (B, T)."""
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


# ----------------------------------------------------------------------------------------------------------------
# One layer
# ----------------------------------------------------------------------------------------------------------------

# Pre-activation added to the input / forget gate rows at padded steps of the static path: sigmoid(-1e4) == 0 and
# sigmoid(1e4) == 1 exactly in float32/16 and bfloat16 (and their derivatives are exactly 0), so c passes unchanged.
_CARRY = 1.0e4


def _lstm_needs_unrolled_kernel(x: torch.Tensor) -> bool:
    """The fused LSTM kernel cannot be compiled for training on CPU: AOTAutograd fails on the oneDNN ``mkldnn_rnn_layer``
    op it dispatches to ("expected all tensors_saved_with_vc_check to be Tensors", torch 2.13). There the same
    computation runs as an explicit loop of :func:`lstm_step` (Inductor fuses it). Export and inference are unaffected."""
    return x.device.type == "cpu" and torch.compiler.is_dynamo_compiling() and torch.is_grad_enabled()


def _lstm_unrolled(x: torch.Tensor, hx: State, weights: list[torch.Tensor], bidirectional: bool) -> State:
    """``torch._VF.lstm(x, hx, weights, ..., batch_first=True)`` as a loop of :func:`lstm_step`: (out, h_n, c_n)."""
    outs, hs, cs = [], [], []
    for d in range(2 if bidirectional else 1):
        weight_ih, weight_hh, bias_ih, bias_hh = weights[4 * d : 4 * d + 4]
        x_dir = x.flip(1) if d == 1 else x
        gates_x = F.linear(x_dir, weight_ih, bias_ih)  # (B, T, 4H)
        h, c = hx[0][d], hx[1][d]  # (B, H)
        steps = []
        for t in range(x.shape[1]):
            h, c = lstm_step(gates_x[:, t], (h, c), weight_hh, bias_hh)
            steps.append(h)
        out = torch.stack(steps, dim=1)  # (B, T, H)
        outs.append(out.flip(1) if d == 1 else out)
        hs.append(h)
        cs.append(c)
    return torch.cat(outs, dim=-1), torch.stack(hs), torch.stack(cs)


class RecurrentLayer(GradientCheckpointingLayer, nn.RNNBase):
    """One level of the recurrent stack, both directions: the unit of activation checkpointing and of FSDP wrapping.

    Parameters are exactly a one-layer ``torch.nn.RNN/LSTM/GRU``'s (``weight_ih_l0`` ``(G*H, I)``, ``weight_hh_l0``,
    ``bias_ih_l0``, ``bias_hh_l0`` and ``*_reverse``; flattened for cuDNN like theirs). It is an ``nn.RNNBase`` but
    not an ``nn.LSTM``: TorchDynamo refuses to trace any ``nn.RNN/GRU/LSTM`` instance (even reading its weights)
    unless ``torch._dynamo.config.allow_rnn`` is set, so this layer calls the same fused kernels itself.

    ``forward(inputs, *state, padding=None) -> (outputs, *final_state)``: ``inputs`` in the layout of ``padding``
    (see :class:`PaddingPlan`; ``None`` = no padding, ``(B, T, I)``), ``state`` the layer's initial state tensors
    ``(D, B, H)`` (none = zeros); ``outputs`` in the same layout, zero at padding.
    """

    def __init__(
        self, cell: str, input_size: int, hidden_size: int, bidirectional: bool = False, implementation: str = "fused"
    ) -> None:
        cell_type = get_cell_type(cell)
        super().__init__(
            cell_type.mode or "LSTM",
            input_size,
            hidden_size,
            num_layers=1,
            batch_first=True,
            bidirectional=bidirectional,
        )
        self.cell = cell
        self.cell_type = cell_type
        self.implementation = implementation
        self.num_directions = 2 if bidirectional else 1

    @property
    def uses_kernel(self) -> bool:
        """True when this layer runs the fused ``torch.nn`` kernel (implementation "fused" and the cell has one)."""
        return self.implementation == "fused" and self.cell_type.has_kernel

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, {super().extra_repr()}, implementation={self.implementation!r}"

    def direction_weights(self, direction: int) -> list[torch.Tensor]:
        """``[weight_ih, weight_hh, bias_ih, bias_hh]`` of one direction (read by name, so replaced parameters count)."""
        return [getattr(self, name) for name in self._flat_weights_names[4 * direction : 4 * direction + 4]]

    def to_torch_module(self) -> nn.RNNBase:
        """The ``torch.nn.RNN/LSTM/GRU`` (one layer, batch-first) that computes what this layer computes, holding the
        SAME parameter tensors under the same names (no copy); see :func:`to_torch_rnn_modules_`."""
        if not self.cell_type.has_kernel:
            raise ValueError(f"cell {self.cell!r} has no torch.nn module (only rnn, lstm and gru have one)")
        module = _TORCH_MODULES[self.mode](
            self.input_size,
            self.hidden_size,
            num_layers=1,
            bias=self.bias,
            batch_first=True,
            bidirectional=self.bidirectional,
            device="meta",  # placeholders, replaced by this layer's parameters below
        )
        for name in self._flat_weights_names:
            setattr(module, name, getattr(self, name))  # nn.RNNBase keeps its flat weight list in step
        return module.train(self.training)

    def forward(self, inputs: torch.Tensor, *state: torch.Tensor, padding: PaddingPlan | None = None) -> State:
        layer_state = state if state else None
        if padding is not None and padding.layout == PACKED:
            return self._forward_packed(inputs, layer_state, padding)
        if not self.uses_kernel or (padding is not None and padding.layout == PADDED):
            return cell_forward(
                self, self.cell_type, self.hidden_size, self.num_directions, inputs, layer_state, padding
            )
        if padding is None:
            return self._forward_full(inputs, layer_state)
        if inputs.shape[1] == 1:  # one step (a decoding step): run it, keep the old state where it was padding
            return self._forward_one_step(inputs, layer_state, padding)
        return self._forward_aligned(inputs, layer_state, padding)

    # -- fused kernel calls --------------------------------------------------------------------------------------

    def _zero_state(self, batch_size: int, x: torch.Tensor, num_directions: int) -> State:
        zeros = x.new_zeros(num_directions, batch_size, self.hidden_size)
        return (zeros, zeros) if self.mode == "LSTM" else (zeros,)

    def _kernel(self, x: torch.Tensor, hx: State, weights: list[torch.Tensor], bidirectional: bool) -> State:
        """One fused-kernel call over ``x`` (B, T, I): ``(outputs, h_n[, c_n])``."""
        if self.mode == "LSTM":
            if _lstm_needs_unrolled_kernel(x):
                return _lstm_unrolled(x, hx, weights, bidirectional)
            return _lstm_kernel(x, hx, weights, True, 1, 0.0, self.training, bidirectional, True)
        return tuple(_KERNELS[self.mode](x, hx[0], weights, True, 1, 0.0, self.training, bidirectional, True))

    def _kernel_weights(self) -> list[torch.Tensor]:
        return [getattr(self, name) for name in self._flat_weights_names]  # both directions, torch.nn's order

    def _forward_full(self, x: torch.Tensor, state: State | None) -> State:
        """No padding: one kernel call for both directions (what ``torch.nn.LSTM`` does on a plain tensor)."""
        hx = state if state is not None else self._zero_state(x.shape[0], x, self.num_directions)
        return self._kernel(x, hx, self._kernel_weights(), self.bidirectional)

    def _forward_packed(self, data: torch.Tensor, state: State | None, plan: PaddingPlan) -> State:
        """Eager CPU: the packed kernel call of ``torch.nn.LSTM(PackedSequence)`` (same kernel, same speed)."""
        batch_size = plan.mask.shape[0]
        if state is None:
            hx = self._zero_state(batch_size, data, self.num_directions)
        else:
            hx = tuple(s.index_select(1, plan.sorted_indices) for s in state)  # rows in packing order
        weights = self._kernel_weights()
        if self.mode == "LSTM":
            result = _lstm_kernel(data, plan.batch_sizes, hx, weights, True, 1, 0.0, self.training, self.bidirectional)
        else:
            kernel = _KERNELS[self.mode]
            result = kernel(data, plan.batch_sizes, hx[0], weights, True, 1, 0.0, self.training, self.bidirectional)
        out, *final = result
        return (out, *(s.index_select(1, plan.unsorted_indices) for s in final))

    def _forward_one_step(self, x: torch.Tensor, state: State | None, plan: PaddingPlan) -> State:
        """T == 1: the plain kernel step, then padded rows keep their previous state and output zero."""
        hx = state if state is not None else self._zero_state(x.shape[0], x, self.num_directions)
        out, *final = self._kernel(x, hx, self._kernel_weights(), self.bidirectional)
        real = plan.mask  # (B, 1)
        final = [torch.where(real.view(1, -1, 1), new, old) for new, old in zip(final, hx)]
        return (torch.where(real.unsqueeze(-1), out, torch.zeros_like(out)), *final)

    def _forward_aligned(self, x: torch.Tensor, state: State | None, plan: PaddingPlan) -> State:
        """Static path over left-aligned rows (zero after each row's real tokens), one kernel call per direction."""
        batch_size = x.shape[0]
        hx = state if state is not None else self._zero_state(batch_size, x, self.num_directions)
        real = plan.aligned_mask  # (B, T)
        last = (plan.lengths - 1).clamp(min=0).view(batch_size, 1, 1)  # (B, 1, 1) each row's last real step
        empty = plan.empty.view(batch_size, 1)  # (B, 1)
        outs, finals = [], []
        for d in range(self.num_directions):
            x_dir = _gather_time(x, plan.reverse_index) if d == 1 else x  # backward: each real block reversed
            weights = self.direction_weights(d)
            hx_dir = tuple(s[d : d + 1] for s in hx)  # (1, B, H)
            if self.mode == "LSTM":  # one more input column: at padded steps forget gate 1, input gate 0 -> c kept
                x_dir = torch.cat([x_dir, (~real).unsqueeze(-1).to(x_dir.dtype)], dim=-1)  # (B, T, I+1)
                weights = [torch.cat([weights[0], self._carry_column(weights[0])], dim=1), *weights[1:]]
            out, *final = self._kernel(x_dir, hx_dir, weights, False)  # (B, T, H), (1, B, H)...
            h_last = out.gather(1, last.expand(-1, -1, out.shape[-1])).squeeze(1)  # (B, H) after the last real token
            h_last = torch.where(empty, hx_dir[0][0], h_last)  # a row without tokens keeps its initial state
            final = [h_last.unsqueeze(0), *final[1:]]  # an LSTM's c_n is already the state at the last real token
            out = torch.where(real.unsqueeze(-1), out, torch.zeros_like(out))
            outs.append(_gather_time(out, plan.reverse_index) if d == 1 else out)
            finals.append(final)
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # (B, T, D*H)
        return (out, *(torch.cat([f[i] for f in finals], dim=0) for i in range(len(finals[0]))))

    def _carry_column(self, weight_ih: torch.Tensor) -> torch.Tensor:
        """(4H, 1) input weights of the padding indicator: -C on the input gate rows, +C on the forget gate rows."""
        hidden = self.hidden_size
        column = weight_ih.new_zeros(4 * hidden, 1)
        column[:hidden] = -_CARRY
        column[hidden : 2 * hidden] = _CARRY
        return column


# ----------------------------------------------------------------------------------------------------------------
# The cell path (explicit equations, any layout with a mask at the caller's positions)
# ----------------------------------------------------------------------------------------------------------------


def cell_forward(
    layer: nn.Module,
    cell_type: CellType,
    hidden_size: int,
    num_directions: int,
    x: torch.Tensor,
    state: State | None,
    plan: PaddingPlan | None,
) -> State:
    """One layer (both directions) on the cell path: ``(outputs (B, T, D*H), *final_state (D, B, ...))``."""
    mask = plan.mask if plan is not None else None
    outs, dir_finals = [], []
    for d in range(num_directions):
        reverse = d == 1
        suffix = "_reverse" if reverse else ""
        x_dir = _reverse_time(x, plan) if reverse else x
        init = None if state is None else tuple(s[d] for s in state)  # each (B, ...)
        if cell_type.scan is not None:
            out, final = cell_type.scan(layer, suffix, x_dir, mask, init)
        else:
            out, final = _step_scan(cell_type, hidden_size, layer, suffix, x_dir, mask, init)
        outs.append(_reverse_time(out, plan) if reverse else out)
        dir_finals.append(final)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # (B, T, D*H)
    return (out, *(torch.stack([f[i] for f in dir_finals], dim=0) for i in range(len(dir_finals[0]))))


def _reverse_time(x: torch.Tensor, plan: PaddingPlan | None) -> torch.Tensor:
    """Reverse each row's real tokens in place (padding stays where it is). x: (B, T, F)."""
    if plan is None:
        return x.flip(1)
    return _gather_time(x, plan.reverse_index)


def _step_scan(cell_type: CellType, hidden_size: int, layer, suffix, x, mask, init):
    """Run one direction of one layer over time; padded steps keep the state and output zeros."""
    step = cell_type.step
    weight_ih = getattr(layer, f"weight_ih_l0{suffix}")
    weight_hh = getattr(layer, f"weight_hh_l0{suffix}")
    bias_ih = getattr(layer, f"bias_ih_l0{suffix}", None)
    bias_hh = getattr(layer, f"bias_hh_l0{suffix}", None)
    batch_size, seq_len, _ = x.shape
    if init is None:
        zeros = x.new_zeros(batch_size, hidden_size)
        init = tuple(zeros for _ in range(cell_type.num_states))
    state = init
    gates_x = F.linear(x, weight_ih, bias_ih)  # (B, T, G*H): the W_ih·x_t half of A·[h_{t-1}; x_t] for all t
    outputs = []
    for t in range(seq_len):
        new_state = step(gates_x[:, t], state, weight_hh, bias_hh)
        if mask is not None:
            real = mask[:, t].unsqueeze(-1)  # (B, 1)
            new_state = tuple(torch.where(real, new, old) for new, old in zip(new_state, state))
            outputs.append(torch.where(real, new_state[0], torch.zeros_like(new_state[0])))
        else:
            outputs.append(new_state[0])
        state = new_state
    return torch.stack(outputs, dim=1), state  # (B, T, H)


# ----------------------------------------------------------------------------------------------------------------
# The stack
# ----------------------------------------------------------------------------------------------------------------


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
            self.cell_type.make_layer(
                input_size if k == 0 else hidden_size * self.num_directions,
                hidden_size,
                self.bidirectional,
                implementation,
            )
            for k in range(num_layers)
        )

    @property
    def output_size(self) -> int:
        """Width of the outputs: ``num_directions * hidden_size``."""
        return self.num_directions * self.hidden_size

    @property
    def uses_fused_path(self) -> bool:
        """True when forward calls the fused ``torch.nn`` kernels (implementation "fused" and the cell has them)."""
        return self.implementation == "fused" and self.cell_type.has_kernel

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
                layer_outputs.append(self._from_layout(x, plan, seq_len))
        outputs = layer_outputs[-1] if output_hidden_states else self._from_layout(x, plan, seq_len)
        final_state = tuple(finals[0]) if len(finals) == 1 else tuple(map(torch.cat, zip(*finals)))  # (L*D, B, H)
        if plan is not None and plan.layout == PACKED and plan.empty is not None:
            final_state = self._restore_empty_rows(final_state, state, plan.empty)
        if output_hidden_states:
            return outputs, final_state, tuple(layer_outputs)
        return outputs, final_state

    def zero_state(self, batch_size: int, device=None, dtype=None) -> State:
        """The all-zero initial state, tuple of ``(num_layers * num_directions, B, H)``."""
        shape = (self.num_layers * self.num_directions, batch_size, self.hidden_size)
        return tuple(torch.zeros(shape, device=device, dtype=dtype) for _ in range(self.cell_type.num_states))

    def layer_parameters(self, layer: int, reverse: bool = False) -> tuple[torch.Tensor, ...]:
        """``(weight_ih, weight_hh, bias_ih, bias_hh)`` of one layer and direction (PyTorch's tensors)."""
        suffix = "_reverse" if reverse else ""
        module = self.layers[layer]
        return tuple(
            getattr(module, f"{name}_l0{suffix}", None) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        )

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
                layer_outputs.append(self._unpack(x, plan, seq_len))
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
        if self.cell_type.scan is None and len(state) != self.cell_type.num_states:
            raise ValueError(
                f"`state` for cell {self.cell!r} must be a tuple of {self.cell_type.num_states} tensors, got {len(state)}"
            )
        expected = (self.num_layers * self.num_directions, batch_size, self.hidden_size)
        for tensor in state:
            if tensor.shape[:2] != expected[:2] or (self.cell_type.scan is None and tuple(tensor.shape) != expected):
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


def to_torch_rnn_modules_(module: nn.Module) -> nn.Module:
    """Prepare ``module`` for ``torch.ao.quantization.quantize_dynamic``, in place (fairseq-style explicit step):
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
# Self-attention LSTM (LSTMN, Cheng, Dong & Lapata 2016, "Long Short-Term Memory-Networks for Machine Reading").
# The notes' self-attention RNN: the recurrence does not read only h_{t-1} but an attention-weighted summary of ALL
# previous states. With the memory tape of previous hidden states h_1..h_{t-1} and memory cells c_1..c_{t-1}:
#
#     a_i^t = vᵀ tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t-1})      additive score (query [x_t; h̃_{t-1}], keys h_i)
#     s^t   = softmax(a^t)                                    over the previous, non-padded steps only
#     h̃_t   = Σ_i s_i^t h_i,   c̃_t = Σ_i s_i^t c_i           one weighted sum of the values [h_i; c_i]
#     (h_t, c_t) = lstm_step(W_ih x_t + b_ih, (h̃_t, c̃_t))    the LSTM gates with (h̃_t, c̃_t) in place of (h_{t-1}, c_{t-1})
#
# The scores, masked softmax and weighted sum are the shared attention core (``attend`` + ``AttentionScore``). At the
# first step the tape is empty and h̃ = c̃ = 0, i.e. the plain LSTM's zero initial state.
#
# State of one direction (tuple of (B, ...) tensors; the stack adds the leading num_layers*num_directions dim):
#     (h_t (B,H), c_t (B,H), h̃_t (B,H), tape_h (B,S,H), tape_c (B,S,H), tape_mask (B,S) bool)
# so ``state[0]`` is still the last hidden state, and a generation cache holds the whole tape (S = tokens read so far).
# ----------------------------------------------------------------------------------------------------------------

SELF_ATTENTION_LSTM_STATES = ("h", "c", "h_tilde", "tape_h", "tape_c", "tape_mask")


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


def self_attention_lstm_scan(
    layer: SelfAttentionLSTMLayer, suffix: str, x: torch.Tensor, mask: torch.Tensor | None, init: State | None
) -> tuple[torch.Tensor, State]:
    """One direction of one self-attention LSTM layer over time (see the section comment for the equations).

    x: (B, T, I); mask: (B, T) bool (True = real token) or None; init: the direction's state from a previous call
    (the tape continues) or None. Returns outputs (B, T, H) (zero at padding) and the new state.
    """
    weight_ih = getattr(layer, f"weight_ih_l0{suffix}")  # (4H, I)
    weight_hh = getattr(layer, f"weight_hh_l0{suffix}")  # (4H, H)
    bias_ih = getattr(layer, f"bias_ih_l0{suffix}", None)
    bias_hh = getattr(layer, f"bias_hh_l0{suffix}", None)
    scorer: AttentionScore = getattr(layer, f"attention_l0{suffix}")
    batch_size, seq_len, _ = x.shape
    hidden_size = weight_hh.shape[1]
    if init is None:
        h = c = h_tilde = x.new_zeros(batch_size, hidden_size)  # (B, H)
        tape_h = tape_c = x.new_zeros(batch_size, 0, hidden_size)  # (B, 0, H)
        tape_mask = torch.zeros(batch_size, 0, dtype=torch.bool, device=x.device)  # (B, 0)
    else:
        h, c, h_tilde, tape_h, tape_c, tape_mask = init
        tape_mask = tape_mask.bool()
    tape_keys = scorer.prepare_keys(tape_h)  # (B, S, A): W_h h_i, computed once per tape entry
    gates_x = F.linear(x, weight_ih, bias_ih)  # (B, T, 4H)
    outputs = []
    for t in range(seq_len):
        if tape_h.shape[1] > 0:
            query = torch.cat([x[:, t], h_tilde], dim=-1).unsqueeze(1)  # (B, 1, I+H)
            values = torch.cat([tape_h, tape_c], dim=-1)  # (B, S, 2H): one weighted sum gives h̃ and c̃
            context, _ = attend(query, tape_keys, values, tape_mask.unsqueeze(1), score=scorer.score)  # (B, 1, 2H)
            new_h_tilde, c_tilde = context.squeeze(1).split(hidden_size, dim=-1)  # (B, H) each
        else:  # empty tape: the summary of nothing is the zero state
            new_h_tilde, c_tilde = h_tilde.new_zeros(batch_size, hidden_size), c.new_zeros(batch_size, hidden_size)
        new_h, new_c = lstm_step(gates_x[:, t], (new_h_tilde, c_tilde), weight_hh, bias_hh)  # (B, H) each
        if mask is not None:
            real = mask[:, t].unsqueeze(-1)  # (B, 1)
            new_h, new_c = torch.where(real, new_h, h), torch.where(real, new_c, c)
            new_h_tilde = torch.where(real, new_h_tilde, h_tilde)
            outputs.append(torch.where(real, new_h, torch.zeros_like(new_h)))
            entry_mask = mask[:, t : t + 1]  # (B, 1) padded steps enter the tape masked out
        else:
            outputs.append(new_h)
            entry_mask = torch.ones(batch_size, 1, dtype=torch.bool, device=x.device)
        h, c, h_tilde = new_h, new_c, new_h_tilde
        tape_h = torch.cat([tape_h, h.unsqueeze(1)], dim=1)  # (B, S+1, H)
        tape_c = torch.cat([tape_c, c.unsqueeze(1)], dim=1)
        tape_keys = torch.cat([tape_keys, scorer.prepare_keys(h.unsqueeze(1))], dim=1)  # (B, S+1, A)
        tape_mask = torch.cat([tape_mask, entry_mask], dim=1)  # (B, S+1)
    return torch.stack(outputs, dim=1), (h, c, h_tilde, tape_h, tape_c, tape_mask)  # (B, T, H), state


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
