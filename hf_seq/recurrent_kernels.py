"""The kernels of the recurrent core: how one layer of fused ``torch.nn`` kernels (or the cell equations) runs a
padded batch, and the one function that chooses among them (:func:`choose_kernel`, whose docstring is the rule).

* :func:`make_padding_plan` / :class:`PaddingPlan`: where each row's real tokens are and the layout the layers get
  ("packed", "aligned", "padded");
* :class:`RecurrentLayer`: one level, both directions, PyTorch's parameters; its kernels are the packed call, the full
  call, the one-step call, the aligned call with the LSTM carry column, and the unrolled LSTM loop for compiled
  training on CPU; :meth:`RecurrentLayer.to_torch_module` is the swap to ``torch.nn`` for quantization;
* :func:`cell_forward`: the cell path (the equations of ``recurrent_cells.py``) with a padding plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import _VF, nn
from transformers.modeling_layers import GradientCheckpointingLayer

from .fast_paths import drop_all_ones_mask, packs_padding
from .recurrent_cells import KERNEL_MODES, CellType, State, get_cell_type, lstm_step, step_scan
from .validation import check_mask_shape, checks_values

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
assert set(_KERNELS) == set(KERNEL_MODES)


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

    Eager on CPU with the value checks on (:func:`~.validation.checks_values`) a mask with holes raises
    ``ValueError``. Eager on CPU with the fast paths on (:func:`~.fast_paths.packs_padding`) the mask's values are
    read: a mask without padding gives ``None``, and a "packed" layout becomes "aligned" when at least
    ``aligned_fill`` of the ``B*T`` positions are real tokens (running the kernel over the padding is then faster than
    packing). Anywhere else nothing is read on the host: a fused-kernel layout becomes "aligned", the mask is trusted
    to be one contiguous block per row (left or right padding, as tokenizers produce), and a mask of ones is still a
    plan.
    """
    if attention_mask is None:
        return None
    check_mask_shape("attention_mask", attention_mask, (batch_size, seq_len), of="the input (batch, seq_len)")
    mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0  # (B, T)
    if drop_all_ones_mask(mask) is None:
        return None  # nothing padded, nothing to pack
    eager = packs_padding(mask)
    lengths = mask.sum(dim=1)  # (B,)
    starts = mask.to(torch.uint8).argmax(dim=1)  # (B,) first real token (0 for empty rows)
    if checks_values(mask):
        pos = torch.arange(seq_len, device=mask.device).unsqueeze(0)  # (1, T)
        block = (pos >= starts.unsqueeze(1)) & (pos < (starts + lengths).unsqueeze(1))  # (B, T)
        if not torch.equal(block, mask):
            raise ValueError(
                "`attention_mask` must mark one contiguous block of real tokens per row (left or right padding); "
                "got a row with holes"
            )
    if not eager:  # static path: no host reads, no data-dependent shapes
        return PaddingPlan(ALIGNED if layout == PACKED else layout, mask, lengths, starts, empty=lengths == 0)
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


# ----------------------------------------------------------------------------------------------------------------
# The gates as nn.Linear modules, for adapters (PEFT's LoRA with target_modules="all-linear")
# ----------------------------------------------------------------------------------------------------------------

# how a layer runs adapters on its gates (RecurrentLayer.adapter_path): folded into the weights of the fused kernels,
# or through the adapter modules' own forward on the cell path
FOLD, MODULES = "fold", "modules"


class GateProjection(nn.modules.linear.NonDynamicallyQuantizableLinear):
    """One gate projection of a :class:`RecurrentLayer` seen as an ``nn.Linear``: ``ih_l0`` is ``x -> W_ih·x + b_ih``,
    ``hh_l0`` is ``h -> W_hh·h + b_hh`` (and ``ih_l0_reverse``, ``hh_l0_reverse``). Its ``weight`` and ``bias`` ARE the
    layer's ``weight_ih_l0`` / ``bias_ih_l0`` (...) parameters: it holds no tensor of its own, so parameter names, the
    state dict and the fused kernels do not change, and folders saved before load as they did.

    It exists for the libraries that look for ``nn.Linear`` modules: PEFT's ``target_modules="all-linear"`` (or
    ``["ih_l0", "hh_l0"]``) wraps it with a LoRA layer, and the recurrent layer then runs its fused kernel with
    ``W + ΔW`` (:meth:`RecurrentLayer.adapter_path`). Int8 quantizers leave it alone (the recurrent layer is quantized
    as a whole, after ``prepare_for_quantization_()``): ``quantize_dynamic`` matches classes exactly, and torchao's
    ``quantize_`` skips ``NonDynamicallyQuantizableLinear``, torch's marker for such a layer (as in
    ``nn.MultiheadAttention``). Assigning its ``weight`` or ``bias`` assigns the layer's parameter."""

    def __init__(self, owner: nn.Module, weight_name: str, bias_name: str) -> None:
        nn.Module.__init__(self)
        self.__dict__["_owner"] = owner  # a plain reference, not a submodule: the owner holds (and moves) the tensors
        self.weight_name, self.bias_name = weight_name, bias_name
        self.out_features, self.in_features = getattr(owner, weight_name).shape

    def __setattr__(self, name: str, value) -> None:
        if name in ("weight", "bias") and "_owner" in self.__dict__:
            setattr(self.__dict__["_owner"], self.weight_name if name == "weight" else self.bias_name, value)
        else:
            super().__setattr__(name, value)

    @property
    def weight(self) -> torch.Tensor:  # type: ignore[override]
        return getattr(self.__dict__["_owner"], self.weight_name)

    @property
    def bias(self) -> torch.Tensor | None:  # type: ignore[override]
        return getattr(self.__dict__["_owner"], self.bias_name, None)


def _adapter_kind(module: nn.Module, training: bool) -> str | None:
    """How a gate wrapped by an adapter layer runs: ``None`` (adapters disabled, merged or none active: the layer's own
    tensors), :data:`FOLD` (LoRA whose output is ``x·ΔWᵀ``: no dropout while training, no DoRA, no LoRA bias, no
    variant) or :data:`MODULES` (anything else: the adapter module's own forward, on the cell path)."""
    if getattr(module, "disable_adapters", False):
        if getattr(module, "merged", False):
            module.unmerge()  # what PEFT's forward does with a disabled adapter that was merged
        return None
    if getattr(module, "merged", False):
        return None  # the base weights already hold ΔW; PEFT's forward then runs the base layer alone
    lora_a = getattr(module, "lora_A", None)
    if lora_a is None or not hasattr(module, "get_delta_weight"):
        return MODULES  # another kind of adapter: its own forward is the projection
    active = [name for name in module.active_adapters if name in lora_a]
    if not active:
        return None
    for name in active:
        dropout = module.lora_dropout[name]
        if (
            module.use_dora.get(name)
            or getattr(module, "lora_bias", {}).get(name)
            or name in getattr(module, "lora_variant", {})
            or (training and isinstance(dropout, nn.Dropout) and dropout.p > 0)
        ):
            return MODULES
    return FOLD


def _adapted_weight(module: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """``W + Σ ΔW`` over the active LoRA adapters of a gate (``module`` a LoRA layer, :data:`FOLD`)."""
    for name in module.active_adapters:
        if name in module.lora_A:
            weight = weight + module.get_delta_weight(name).to(weight.dtype)
    return weight


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
        # the gate projections as nn.Linear views of the parameters above (for adapters; they hold no tensor)
        self._gate_names = []
        for suffix in ("", "_reverse")[: self.num_directions]:
            for kind in ("ih", "hh"):
                name = f"{kind}_l0{suffix}"
                setattr(self, name, GateProjection(self, f"weight_{name}", f"bias_{name}"))
                self._gate_names.append(name)

    @property
    def uses_kernel(self) -> bool:
        """True when this layer runs the fused ``torch.nn`` kernel (implementation "fused", the cell has one, and no
        adapter on its gates needs its own forward)."""
        return self.implementation == "fused" and self.cell_type.has_kernel and self.adapter_path() != MODULES

    def adapter_path(self) -> str | None:
        """How the adapters on this layer's gates run (PEFT wraps the :class:`GateProjection` modules ``ih_l0``,
        ``hh_l0``...): ``None`` — no gate is wrapped, or every adapter is disabled, merged or inactive: the fused
        kernels over the layer's own parameters, exactly as without PEFT; ``"fold"`` — LoRA adapters whose output
        is ``x·ΔWᵀ`` (no dropout while training, no DoRA, no LoRA bias): the same fused kernels over ``W + ΔW``;
        ``"modules"`` — any other adapter (LoRA dropout while training, DoRA, ...): the cell path, each step
        calling the adapter modules themselves (slower; exact PEFT semantics)."""
        path = None
        for name in self._gate_names:
            module = getattr(self, name)
            if type(module) is GateProjection:
                continue
            kind = _adapter_kind(module, self.training)
            if kind == MODULES:
                return MODULES
            path = kind or path
        return path

    def gate_modules(self, direction: int) -> tuple[nn.Module, nn.Module] | None:
        """``(ih, hh)`` modules of one direction when the adapters on them run through their own forward
        (:meth:`adapter_path` is ``"modules"``), else ``None``."""
        if self.adapter_path() != MODULES:
            return None
        ih, hh = self._gate_names[2 * direction : 2 * direction + 2]
        return getattr(self, ih), getattr(self, hh)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, {super().extra_repr()}, implementation={self.implementation!r}"

    def direction_weights(self, direction: int) -> list[torch.Tensor]:
        """``[weight_ih, weight_hh, bias_ih, bias_hh]`` of one direction (read by name, so replaced parameters count),
        with the active LoRA adapters on the gates folded in (``W + ΔW``, see :meth:`adapter_path`)."""
        weights = [getattr(self, name) for name in self._flat_weights_names[4 * direction : 4 * direction + 4]]
        if self.adapter_path() == FOLD:
            for i, name in enumerate(self._gate_names[2 * direction : 2 * direction + 2]):
                module = getattr(self, name)
                if type(module) is not GateProjection and _adapter_kind(module, self.training) == FOLD:
                    weights[i] = _adapted_weight(module, weights[i])
        return weights

    def to_torch_module(self) -> nn.RNNBase:
        """The ``torch.nn.RNN/LSTM/GRU`` (one layer, batch-first) that computes what this layer computes, holding the
        SAME parameter tensors under the same names (no copy); see :func:`to_torch_rnn_modules_`."""
        if not self.cell_type.has_kernel:
            raise ValueError(f"cell {self.cell!r} has no torch.nn module (only rnn, lstm and gru have one)")
        adapted = [name for name in self._gate_names if type(getattr(self, name)) is not GateProjection]
        if adapted:
            raise ValueError(
                f"the gates {adapted} of this recurrent layer carry adapters, which a torch.nn module cannot run: "
                "merge them first (`model = peft_model.merge_and_unload()`)"
            )
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
        kernel = choose_kernel(self, inputs, padding)
        if kernel == CELL:
            return cell_forward(
                self, self.cell_type, self.hidden_size, self.num_directions, inputs, layer_state, padding
            )
        if kernel == FULL:
            return self._forward_full(inputs, layer_state)
        return getattr(self, f"_forward_{kernel}")(inputs, layer_state, padding)  # packed, one_step, aligned

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
        """Both directions in torch.nn's order (adapters folded in, see :meth:`direction_weights`)."""
        if self.num_directions == 1:
            return self.direction_weights(0)
        return [*self.direction_weights(0), *self.direction_weights(1)]

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
# The choice of kernel
# ----------------------------------------------------------------------------------------------------------------

FULL, ONE_STEP, CELL = "full", "one_step", "cell"  # (with PACKED and ALIGNED) what choose_kernel answers


def choose_kernel(layer: RecurrentLayer, inputs: torch.Tensor, padding: PaddingPlan | None) -> str:
    """How ``layer`` runs ``inputs`` with the padding plan ``padding``: the one rule of the recurrent core.

    The stack first makes the plan (:func:`make_padding_plan`): no mask, or a mask of ones eager on CPU, is no plan;
    eager on CPU with the fast paths on (:func:`~.fast_paths.packs_padding`) a fused-kernel layer gets a "packed"
    plan, "aligned" when at least :data:`ALIGNED_FILL` of the positions are real (the LSTM: oneDNN's unpacked kernel
    is faster); traced, exported, on an accelerator or with the fast paths off every fused-kernel plan is "aligned";
    a cell-path layer gets a "padded" plan. After :func:`~.recurrent.to_torch_rnn_modules_` (the quantization swap)
    the stack hands every layer to ``torch.nn`` instead and none of this runs. Then, in this order:

    1. ``"packed"`` — a packed plan: the packed kernel call of ``torch.nn.LSTM(PackedSequence)``;
    2. ``"cell"`` — the layer has no fused kernel (``implementation="cell"``, or a cell type with its own layer or
       scan) or the plan is "padded": the cell equations step by step (:func:`cell_forward`);
    3. ``"full"`` — no plan: one fused call for both directions;
    4. ``"one_step"`` — one time step (a decoding step): the fused call, then padded rows keep their state;
    5. ``"aligned"`` — otherwise: rows shifted to start at 0, one fused call per direction, the final ``h`` gathered
       at each row's last real token, an LSTM's ``c`` carried through padding by one extra input column (the carry
       column: forget gate 1, input gate 0).

    Every fused call of an LSTM compiled for training on CPU runs as an unrolled loop of ``lstm_step`` instead
    (:func:`_lstm_needs_unrolled_kernel`: AOTAutograd cannot differentiate oneDNN's LSTM op).

    PEFT adapters on the gates (:meth:`RecurrentLayer.adapter_path`) change the weights, not the kernel: a LoRA
    adapter without active dropout runs in the same fused calls over ``W + ΔW``; only an adapter that cannot be
    folded (dropout while training, DoRA, ...) makes the layer a cell-path layer (rule 2, with a "padded" plan)."""
    if padding is not None and padding.layout == PACKED:
        return PACKED
    if not layer.uses_kernel or (padding is not None and padding.layout == PADDED):
        return CELL
    if padding is None:
        return FULL
    if inputs.shape[1] == 1:
        return ONE_STEP
    return ALIGNED


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
            out, final = step_scan(cell_type, hidden_size, layer, suffix, x_dir, mask, init)
        outs.append(_reverse_time(out, plan) if reverse else out)
        dir_finals.append(final)
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)  # (B, T, D*H)
    return (out, *(torch.stack([f[i] for f in dir_finals], dim=0) for i in range(len(dir_finals[0]))))


def _reverse_time(x: torch.Tensor, plan: PaddingPlan | None) -> torch.Tensor:
    """Reverse each row's real tokens in place (padding stays where it is). x: (B, T, F)."""
    if plan is None:
        return x.flip(1)
    return _gather_time(x, plan.reverse_index)


def make_layer(
    cell_type: CellType, input_size: int, hidden_size: int, bidirectional: bool, implementation: str
) -> nn.Module:
    """The parameter holder of one layer of ``cell_type`` (both directions): the cell's own ``build_layer`` or a
    :class:`RecurrentLayer` of its kernel mode."""
    if cell_type.build_layer is not None:
        return cell_type.build_layer(input_size, hidden_size, bidirectional)
    if cell_type.mode is None:
        raise ValueError(f"cell type {cell_type.name!r} needs either `mode` or `build_layer`")
    return RecurrentLayer(cell_type.name, input_size, hidden_size, bidirectional, implementation)


__all__ = [
    "ALIGNED",
    "ALIGNED_FILL",
    "CELL",
    "FOLD",
    "FULL",
    "MODULES",
    "ONE_STEP",
    "PACKED",
    "PADDED",
    "GateProjection",
    "PaddingPlan",
    "RecurrentLayer",
    "cell_forward",
    "choose_kernel",
    "make_layer",
    "make_padding_plan",
    "roll_rows",
]
