"""The one recurrent core of hf_seq: SimpleRNN / LSTM / GRU layers, stacked, uni- or bidirectional, over padded batches.

``RecurrentStack`` runs ``num_layers`` recurrent layers over a batch-first input and guarantees that **padding never
changes a sequence's result**: left- or right-padded rows give exactly the outputs and final state of the same
sequence run alone, padded output positions are zero, and the final state is the state at each sequence's last real
token (for the backward direction: after reading the first real token).

Two implementations share the SAME parameters (one ``torch.nn.RNN/LSTM/GRU`` module per layer, so every parameter
has PyTorch's name and shape, e.g. ``layers.0.weight_ih_l0``, ``layers.0.bias_hh_l0_reverse``):

* ``implementation="fused"`` calls the ``torch.nn`` module (cuDNN / oneDNN kernels) with ``pack_padded_sequence``;
* ``implementation="cell"`` runs the lecture notes' equations step by step (``rnn_step``, ``lstm_step``,
  ``gru_step``) on the very same tensors; it is tested equal to the fused path.

A new cell type plugs in through :func:`register_cell` (see :class:`CellType`); a cell without a ``torch.nn``
counterpart provides ``build_layer`` (its parameter holder) and either a ``step`` function or a whole ``scan`` over
time, and always runs on the cell path. The self-attention LSTM (``"self_attention_lstm"``, LSTMN; end of this file)
is such a cell: its scan attends over all previous states through the shared attention core.

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
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .attention import AttentionScore, attend

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


@dataclass(frozen=True)
class CellType:
    """How one kind of recurrent cell is built and run.

    Attributes:
        name: the value of ``cell=`` in configs.
        num_gates: rows of ``weight_ih`` per hidden unit (1 rnn, 4 lstm, 3 gru); used for parameter shapes.
        num_states: tensors in the state tuple (1 = ``(h,)``, 2 = ``(h, c)``).
        step: per-step equations for the cell path (``step(gates_x_t, state, weight_hh, bias_hh) -> state``).
        torch_module: ``torch.nn`` class of the fused path (``None``: the cell path is always used).
        build_layer: ``build_layer(input_size, hidden_size, bidirectional) -> nn.Module`` holding one layer's
            parameters under PyTorch's names (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0`` and
            ``*_reverse``) plus anything extra. Defaults to a one-layer ``torch_module``.
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
    torch_module: type[nn.RNNBase] | None = None
    build_layer: Callable[[int, int, bool], nn.Module] | None = None
    scan: ScanFn | None = None

    def make_layer(self, input_size: int, hidden_size: int, bidirectional: bool) -> nn.Module:
        """Create the parameter holder of one layer (both directions)."""
        if self.build_layer is not None:
            return self.build_layer(input_size, hidden_size, bidirectional)
        if self.torch_module is None:
            raise ValueError(f"cell type {self.name!r} needs either `torch_module` or `build_layer`")
        return self.torch_module(input_size, hidden_size, num_layers=1, batch_first=True, bidirectional=bidirectional)


CELL_TYPES: dict[str, CellType] = {}


def register_cell(cell_type: CellType) -> CellType:
    """Make ``cell_type`` available as ``RecurrentStack(cell=cell_type.name, ...)`` (and thus as a config value)."""
    if cell_type.step is None and cell_type.scan is None:
        raise ValueError(f"cell type {cell_type.name!r} needs a `step` or a `scan` function")
    CELL_TYPES[cell_type.name] = cell_type
    return cell_type


register_cell(CellType("rnn", num_gates=1, num_states=1, step=rnn_step, torch_module=nn.RNN))
register_cell(CellType("lstm", num_gates=4, num_states=2, step=lstm_step, torch_module=nn.LSTM))
register_cell(CellType("gru", num_gates=3, num_states=1, step=gru_step, torch_module=nn.GRU))


def get_cell_type(name: str) -> CellType:
    """Look up a registered cell type; ``ValueError`` naming the allowed values otherwise."""
    if name not in CELL_TYPES:
        raise ValueError(f"`cell` must be one of {sorted(CELL_TYPES)}, got {name!r}")
    return CELL_TYPES[name]


# ----------------------------------------------------------------------------------------------------------------
# Padding
# ----------------------------------------------------------------------------------------------------------------


@dataclass
class PaddingPlan:
    """Where the real tokens of a padded batch are: one contiguous block ``[starts, starts + lengths)`` per row."""

    mask: torch.Tensor  # (B, T) bool, True = real token
    lengths: torch.Tensor  # (B,) int64 on CPU (what pack_padded_sequence wants)
    starts: torch.Tensor  # (B,) int64 on the input's device
    left_aligned: bool  # every row starts at 0 (right padding only)
    empty: torch.Tensor | None  # (B,) bool rows without any real token, or None if there are none
    _reverse_index: torch.Tensor | None = None

    @property
    def reverse_index(self) -> torch.Tensor:
        """(B, T) gather index that reverses each row's real block in place and leaves padding where it is."""
        if self._reverse_index is None:
            pos = torch.arange(self.mask.shape[1], device=self.mask.device).unsqueeze(0)  # (1, T)
            mirrored = 2 * self.starts.unsqueeze(1) + self.lengths.to(self.mask.device).unsqueeze(1) - 1 - pos
            self._reverse_index = torch.where(self.mask, mirrored, pos)  # (B, T)
        return self._reverse_index


def make_padding_plan(attention_mask: torch.Tensor | None, batch_size: int, seq_len: int) -> PaddingPlan | None:
    """Validate ``attention_mask`` and describe its padding; ``None`` when there is no padding at all."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch_size, seq_len):
        raise ValueError(
            f"`attention_mask` must have shape (batch, seq_len) = {(batch_size, seq_len)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0  # (B, T)
    if bool(mask.all()):
        return None  # fast path: nothing padded, nothing to pack
    lengths = mask.sum(dim=1)  # (B,)
    starts = mask.to(torch.int8).argmax(dim=1)  # (B,) first real token (0 for empty rows)
    pos = torch.arange(seq_len, device=mask.device).unsqueeze(0)  # (1, T)
    block = (pos >= starts.unsqueeze(1)) & (pos < (starts + lengths).unsqueeze(1))  # (B, T)
    if not torch.equal(block, mask):
        raise ValueError(
            "`attention_mask` must mark one contiguous block of real tokens per row (left or right padding); "
            "got a row with holes"
        )
    empty = lengths == 0
    return PaddingPlan(
        mask=mask,
        lengths=lengths.cpu(),
        starts=starts,
        left_aligned=not bool(starts.any()),
        empty=empty if bool(empty.any()) else None,
    )


def roll_rows(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Per-row circular shift along time: ``out[b, t] = x[b, (t + shift[b]) % T]``. x: (B, T, F), shift: (B,)."""
    seq_len = x.shape[1]
    pos = torch.arange(seq_len, device=x.device).unsqueeze(0)  # (1, T)
    index = (pos + shift.unsqueeze(1)) % seq_len  # (B, T)
    return x.gather(1, index.unsqueeze(-1).expand_as(x))


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
        implementation: "fused" (``torch.nn`` kernels + packing) or "cell" (explicit per-step equations).

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
        self.layers = nn.ModuleList(
            self.cell_type.make_layer(
                input_size if k == 0 else hidden_size * self.num_directions, hidden_size, self.bidirectional
            )
            for k in range(num_layers)
        )

    @property
    def output_size(self) -> int:
        """Width of the outputs: ``num_directions * hidden_size``."""
        return self.num_directions * self.hidden_size

    @property
    def uses_fused_path(self) -> bool:
        """True when forward calls the ``torch.nn`` kernels (implementation "fused" and the cell has them)."""
        return self.implementation == "fused" and self.cell_type.torch_module is not None

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
        plan = make_padding_plan(attention_mask, batch_size, seq_len)
        if self.uses_fused_path:
            outputs, final, layer_outputs = self._forward_fused(inputs, plan, state, output_hidden_states)
        else:
            outputs, final, layer_outputs = self._forward_cell(inputs, plan, state, output_hidden_states)
        if plan is not None and plan.empty is not None:
            final = self._restore_empty_rows(final, state, plan.empty)
        if output_hidden_states:
            return outputs, final, layer_outputs
        return outputs, final

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

    # -- helpers -------------------------------------------------------------------------------------------------

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

    def _layer_state(self, state: State | None, layer: int) -> State | None:
        if state is None:
            return None
        if not isinstance(state, (tuple, list)):
            state = (state,)
        d = self.num_directions
        return tuple(s[layer * d : (layer + 1) * d] for s in state)  # each (D, B, ...)

    def _dropout_between_layers(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p=self.dropout, training=self.training) if self.dropout > 0 else x

    @staticmethod
    def _restore_empty_rows(final: State, state: State | None, empty: torch.Tensor) -> State:
        """Rows without a single real token keep their initial state (nothing was read)."""
        restored = []
        for i, tensor in enumerate(final):
            initial = torch.zeros_like(tensor) if state is None else state[i]
            if initial.shape != tensor.shape:  # a growing tape (self_attention_lstm): its scan already masked the row
                restored.append(tensor)
                continue
            keep = empty.view(1, -1, *([1] * (tensor.dim() - 2)))  # (1, B, 1...)
            restored.append(torch.where(keep, initial, tensor))
        return tuple(restored)

    # -- fused path: torch.nn kernels, packed ------------------------------------------------------------------

    def _forward_fused(self, inputs, plan, state, collect):
        seq_len = inputs.shape[1]
        data: torch.Tensor | PackedSequence = inputs
        if plan is not None:
            aligned = inputs if plan.left_aligned else roll_rows(inputs, plan.starts)  # real tokens first
            data = pack_padded_sequence(aligned, plan.lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
        finals: list[State] = []
        layer_outputs = []
        for k, layer in enumerate(self.layers):
            if k > 0 and self.dropout > 0:
                if isinstance(data, PackedSequence):
                    data = data._replace(data=self._dropout_between_layers(data.data))
                else:
                    data = self._dropout_between_layers(data)
            layer_state = self._layer_state(state, k)
            if layer_state is not None and self.cell_type.num_states == 1:
                layer_state = layer_state[0]
            data, final = layer(data, layer_state)
            finals.append(final if isinstance(final, tuple) else (final,))
            if collect:
                layer_outputs.append(self._unpack(data, plan, seq_len))
        outputs = layer_outputs[-1] if collect else self._unpack(data, plan, seq_len)
        final_state = tuple(torch.cat([f[i] for f in finals], dim=0) for i in range(len(finals[0])))
        return outputs, final_state, tuple(layer_outputs)

    @staticmethod
    def _unpack(data, plan: PaddingPlan | None, seq_len: int) -> torch.Tensor:
        if plan is None:
            return data
        outputs, _ = pad_packed_sequence(data, batch_first=True, total_length=seq_len)  # (B, T, D*H), left-aligned
        if not plan.left_aligned:
            outputs = roll_rows(outputs, -plan.starts)  # back to where the real tokens were
        if plan.empty is not None:
            outputs = outputs * plan.mask.unsqueeze(-1).to(outputs.dtype)
        return outputs

    # -- cell path: explicit per-step equations ---------------------------------------------------------------

    def _forward_cell(self, inputs, plan, state, collect):
        mask = plan.mask if plan is not None else None
        x = inputs
        finals: list[State] = []
        layer_outputs = []
        for k, layer in enumerate(self.layers):
            if k > 0:
                x = self._dropout_between_layers(x)
            layer_state = self._layer_state(state, k)
            outs, dir_finals = [], []
            for d in range(self.num_directions):
                reverse = d == 1
                suffix = "_reverse" if reverse else ""
                x_dir = self._reverse_time(x, plan) if reverse else x
                init = None if layer_state is None else tuple(s[d] for s in layer_state)  # each (B, ...)
                out, final = self._scan(layer, suffix, x_dir, mask, init)
                outs.append(self._reverse_time(out, plan) if reverse else out)
                dir_finals.append(final)
            x = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # (B, T, D*H)
            finals.append(tuple(torch.stack([f[i] for f in dir_finals], dim=0) for i in range(len(dir_finals[0]))))
            if collect:
                layer_outputs.append(x)
        final_state = tuple(torch.cat([f[i] for f in finals], dim=0) for i in range(len(finals[0])))
        return x, final_state, tuple(layer_outputs)

    @staticmethod
    def _reverse_time(x: torch.Tensor, plan: PaddingPlan | None) -> torch.Tensor:
        """Reverse each row's real tokens in place (padding stays where it is). x: (B, T, F)."""
        if plan is None:
            return x.flip(1)
        return x.gather(1, plan.reverse_index.unsqueeze(-1).expand_as(x))

    def _scan(self, layer: nn.Module, suffix: str, x: torch.Tensor, mask: torch.Tensor | None, init: State | None):
        """Run one direction of one layer over time; padded steps keep the state and output zeros."""
        if self.cell_type.scan is not None:
            return self.cell_type.scan(layer, suffix, x, mask, init)
        step = self.cell_type.step
        weight_ih = getattr(layer, f"weight_ih_l0{suffix}")
        weight_hh = getattr(layer, f"weight_hh_l0{suffix}")
        bias_ih = getattr(layer, f"bias_ih_l0{suffix}", None)
        bias_hh = getattr(layer, f"bias_hh_l0{suffix}", None)
        batch_size, seq_len, _ = x.shape
        if init is None:
            zeros = x.new_zeros(batch_size, self.hidden_size)
            init = tuple(zeros for _ in range(self.cell_type.num_states))
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


class SelfAttentionLSTMLayer(nn.LSTM):
    """Parameter holder of one self-attention LSTM layer: the LSTM gates under ``torch.nn.LSTM``'s names (so the
    weights initialise and load like an LSTM's) plus one additive :class:`AttentionScore` per direction
    (``attention_l0``, ``attention_l0_reverse``). Run it with :func:`self_attention_lstm_scan` (``RecurrentStack`` does);
    calling it directly is an error."""

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool = False) -> None:
        super().__init__(input_size, hidden_size, num_layers=1, batch_first=True, bidirectional=bidirectional)
        # query = [x_t; h̃_{t-1}] (W_x, W_h̃ and a bias in query_proj), keys = previous h_i (W_h in key_proj), v = energy
        self.attention_l0 = AttentionScore("additive", input_size + hidden_size, hidden_size, hidden_size)
        if bidirectional:
            self.attention_l0_reverse = AttentionScore("additive", input_size + hidden_size, hidden_size, hidden_size)

    def forward(self, *args, **kwargs):  # noqa: D102 - not a torch.nn.LSTM at run time
        raise RuntimeError("SelfAttentionLSTMLayer holds parameters only; run it through RecurrentStack")


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
        build_layer=SelfAttentionLSTMLayer,
        scan=self_attention_lstm_scan,
    )
)
