"""The recurrent cells of hf_seq: the lecture notes' equations, one step at a time, and the registry of cell types.

* SimpleRNN :func:`rnn_step`, LSTM :func:`lstm_step` (the four gates and the cell "conveyor belt"), GRU
  :func:`gru_step`: ``step(W_ih·x_t + b_ih, state, W_hh, b_hh) -> state``, the notes' ``A·[h_{t-1}; x_t] + b`` with
  PyTorch's parameter blocks;
* the self-attention LSTM (LSTMN): :func:`self_attention_lstm_scan`, attention over all previous states;
* :func:`step_scan`: a step function over time with padding (the cell path of ``implementation="cell"``);
* :class:`CellType` / :func:`register_cell` / :data:`CELL_TYPES`: how a cell is built and run.

How the fused kernels run these cells over padded batches is in ``recurrent_kernels.py``; the stack that users call is
``recurrent.py`` (which re-exports every public name of both).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import AttentionScore, attend

State = tuple[torch.Tensor, ...]

IMPLEMENTATIONS = ("fused", "cell")
# torch.nn.RNNBase modes that have a fused kernel (torch._VF.rnn_tanh / lstm / gru; see recurrent_kernels.py)
KERNEL_MODES = ("RNN_TANH", "LSTM", "GRU")


# ----------------------------------------------------------------------------------------------------------------
# Cell equations (the cell path). Notation of the notes: the state update multiplies a parameter matrix A with the
# concatenation [h_{t-1}; x_t]. PyTorch stores A as two blocks, A = [W_hh | W_ih], and two biases b_ih + b_hh, so
# A·[h_{t-1}; x_t] + b = W_ih·x_t + b_ih + W_hh·h_{t-1} + b_hh. The input half ``W_ih·x_t + b_ih`` of every step is
# computed for all time steps at once (``gates_x``); the step functions add the recurrent half.
# ----------------------------------------------------------------------------------------------------------------


def rnn_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """SimpleRNN step: the previous state and the input, concatenated, times one parameter matrix, squashed::

        h_t = tanh(A·[h_{t-1}; x_t] + b)          A: (H, H + I), i.e. H·(H + I) weights (+ biases)

    ``tanh`` keeps every entry of ``h_t`` in (-1, 1): without it ``h_t`` would be ``A^t h_0`` for zero inputs, and the
    powers of ``A`` vanish or explode with its eigenvalues.
    """
    (h,) = state  # (B, H)
    return (torch.tanh(gates_x + F.linear(h, weight_hh, bias_hh)),)  # gates_x = W_ih·x_t + b_ih, (B, H)


def lstm_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """LSTM step: four gates, each its own parameter matrix over ``[h_{t-1}; x_t]``, and the cell state ``c`` (the
    "conveyor belt") that carries the past to the next step almost unchanged::

        a_t = W·[h_{t-1}; x_t] + b = (a_i, a_f, a_g, a_o)     one product, split in four (B, H) blocks
        f_t = σ(a_f)                 forget gate: how much of each entry of c_{t-1} to keep, in (0, 1)
        i_t = σ(a_i)                 input gate: how much of the new value to add, in (0, 1)
        c̃_t = tanh(a_g)              new value, in (-1, 1)
        o_t = σ(a_o)                 output gate
        c_t = f_t ⊙ c_{t-1} + i_t ⊙ c̃_t      the belt: forget selectively, then add
        h_t = o_t ⊙ tanh(c_t)                 the new state, also the step's output

    ``W`` is the four matrices ``W_i, W_f, W_c, W_o`` stacked (PyTorch's row order input, forget, new value, output):
    ``4·H·(H + I)`` weights. ``⊙`` is the elementwise product.
    """
    h, c = state  # (B, H), (B, H)
    gates = gates_x + F.linear(h, weight_hh, bias_hh)  # a_t: (B, 4H)
    a_i, a_f, a_g, a_o = gates.chunk(4, dim=-1)  # each (B, H)
    input_gate, forget_gate = torch.sigmoid(a_i), torch.sigmoid(a_f)  # i_t, f_t
    new_value, output_gate = torch.tanh(a_g), torch.sigmoid(a_o)  # c̃_t, o_t
    c = forget_gate * c + input_gate * new_value  # c_t = f_t ⊙ c_{t-1} + i_t ⊙ c̃_t
    h = output_gate * torch.tanh(c)  # h_t = o_t ⊙ tanh(c_t)
    return (h, c)


def gru_step(gates_x: torch.Tensor, state: State, weight_hh: torch.Tensor, bias_hh: torch.Tensor | None) -> State:
    """GRU step (PyTorch's formulation): two gates and a candidate, no separate cell state::

        r_t = σ(W_ir·x_t + b_ir + W_hr·h_{t-1} + b_hr)           reset gate
        z_t = σ(W_iz·x_t + b_iz + W_hz·h_{t-1} + b_hz)           update gate
        n_t = tanh(W_in·x_t + b_in + r_t ⊙ (W_hn·h_{t-1} + b_hn))  candidate: the reset gate scales the past
        h_t = (1 - z_t) ⊙ n_t + z_t ⊙ h_{t-1}                    keep z_t of the old state, take the rest new

    ``3·H·(H + I)`` weights (row order reset, update, candidate).
    """
    (h,) = state  # (B, H)
    gates_h = F.linear(h, weight_hh, bias_hh)  # (B, 3H): W_h·h_{t-1} + b_h
    x_r, x_z, x_n = gates_x.chunk(3, dim=-1)  # W_i·x_t + b_i, each (B, H)
    h_r, h_z, h_n = gates_h.chunk(3, dim=-1)
    reset = torch.sigmoid(x_r + h_r)  # r_t
    update = torch.sigmoid(x_z + h_z)  # z_t
    candidate = torch.tanh(x_n + reset * h_n)  # n_t
    return ((1.0 - update) * candidate + update * h,)  # h_t


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
    def has_fixed_size_state(self) -> bool:
        """True when the state is ``num_states`` tensors of ``(num_layers * num_directions, B, H)`` (a ``step``
        cell); a cell with its own ``scan`` may keep more (the self-attention LSTM's tape grows with every token)."""
        return self.scan is None

    @property
    def has_kernel(self) -> bool:
        """True when a fused ``torch.nn`` kernel runs this cell (no custom layer, no custom scan)."""
        return self.mode is not None and self.build_layer is None and self.scan is None


CELL_TYPES: dict[str, CellType] = {}


def register_cell(cell_type: CellType) -> CellType:
    """Make ``cell_type`` available as ``RecurrentStack(cell=cell_type.name, ...)`` (and thus as a config value)."""
    if cell_type.step is None and cell_type.scan is None:
        raise ValueError(f"cell type {cell_type.name!r} needs a `step` or a `scan` function")
    if cell_type.mode is not None and cell_type.mode not in KERNEL_MODES:
        raise ValueError(f"`mode` of cell type {cell_type.name!r} must be one of {sorted(KERNEL_MODES)} or None")
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


def layer_weights(layer: nn.Module, suffix: str) -> list[torch.Tensor | None]:
    """``[weight_ih, weight_hh, bias_ih, bias_hh]`` of one direction of a layer (``suffix`` "" or "_reverse"): a
    recurrent layer's own answer (adapters on its gates folded in), else its parameters read by name."""
    direction_weights = getattr(layer, "direction_weights", None)
    if direction_weights is not None:
        return direction_weights(1 if suffix else 0)
    names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    return [getattr(layer, f"{name}_l0{suffix}", None) for name in names]


def step_scan(cell_type: CellType, hidden_size: int, layer, suffix, x, mask, init):
    """The cell path of one direction of one layer: ``cell_type.step`` at every time step of ``x`` (B, T, I);
    padded steps (``mask`` False) keep the state and output zeros. Returns ``(outputs (B, T, H), state)``.

    When adapters on the layer's gates need their own forward (``layer.gate_modules``, e.g. LoRA dropout while
    training), the input half is the ``ih`` module's output and each step's recurrent half the ``hh`` module's
    output (passed to the step function as its bias, with a zero ``W_hh``)."""
    step = cell_type.step
    gate_modules = getattr(layer, "gate_modules", None)
    modules = gate_modules(1 if suffix else 0) if gate_modules is not None else None
    weight_ih, weight_hh, bias_ih, bias_hh = layer_weights(layer, suffix)
    batch_size, seq_len, _ = x.shape
    if init is None:
        zeros = x.new_zeros(batch_size, hidden_size)
        init = tuple(zeros for _ in range(cell_type.num_states))
    state = init
    if modules is None:
        gates_x = F.linear(x, weight_ih, bias_ih)  # (B, T, G*H): the W_ih·x_t half of A·[h_{t-1}; x_t] for all t
    else:
        ih, hh = modules
        gates_x = ih(x)  # (B, T, G*H), the adapters' forward included
        weight_hh = torch.zeros_like(weight_hh)  # F.linear(h, 0, hh(h)) = hh(h): the step adds the adapted half
    outputs = []
    for t in range(seq_len):
        new_state = step(gates_x[:, t], state, weight_hh, hh(state[0]) if modules is not None else bias_hh)
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
# Its parameter holder (``SelfAttentionLSTMLayer``: the LSTM gates + one AttentionScore per direction) and its
# registration are in recurrent.py.
# ----------------------------------------------------------------------------------------------------------------

SELF_ATTENTION_LSTM_STATES = ("h", "c", "h_tilde", "tape_h", "tape_c", "tape_mask")


def self_attention_lstm_scan(
    layer: nn.Module, suffix: str, x: torch.Tensor, mask: torch.Tensor | None, init: State | None
) -> tuple[torch.Tensor, State]:
    """One direction of one self-attention LSTM layer over time (see the section comment for the equations).

    x: (B, T, I); mask: (B, T) bool (True = real token) or None; init: the direction's state from a previous call
    (the tape continues) or None. Returns outputs (B, T, H) (zero at padding) and the new state.
    """
    gate_modules = getattr(layer, "gate_modules", None)
    if gate_modules is not None and gate_modules(1 if suffix else 0) is not None:
        raise ValueError(
            "the self-attention LSTM runs adapters on its gates only as LoRA folded into the weights: set "
            "`lora_dropout=0` (or evaluate with model.eval()), and no `use_dora` / `lora_bias`"
        )
    weight_ih, weight_hh, bias_ih, bias_hh = layer_weights(layer, suffix)  # (4H, I), (4H, H), (4H,), (4H,)
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


__all__ = [
    "CELL_TYPES",
    "IMPLEMENTATIONS",
    "KERNEL_MODES",
    "SELF_ATTENTION_LSTM_STATES",
    "CellType",
    "ScanFn",
    "State",
    "StepFn",
    "get_cell_type",
    "gru_step",
    "layer_weights",
    "lstm_step",
    "register_cell",
    "rnn_step",
    "self_attention_lstm_scan",
    "step_scan",
]
