"""The one linear layer of the hf_seq models, and faster CPU decoding with it.

On CPU, a matrix product with only a few rows (one decoding step of a small batch) runs 1.4-2.5× faster when the
weight is laid out input-major, ``W^T`` contiguous ``(in, out)``, than from ``nn.Linear``'s ``(out, in)`` layout
(e.g. 8 rows × 256 → 8,000 logits: 0.99 ms → 0.38 ms on one thread). During ``generate()``
(:class:`InputMajorDecodingMixin`) every :class:`Linear` of the model multiplies by an input-major copy of its
weight, made on first use and freed when ``generate()`` returns. Everything else is plain ``nn.Linear``: the
parameter keeps its ``(out, in)`` layout (checkpoints, initialisation, weight tying, ``isinstance(m, nn.Linear)``
and adapters are unchanged), and training, autocast, non-CPU devices and inputs of more than
:data:`INPUT_MAJOR_MAX_ROWS` rows (where both layouts run at the same speed) always use ``F.linear``.

The copy lives only inside one ``generate()`` call, so a weight edited between calls (an optimizer step, a merged
adapter, ``param.data.copy_(...)``) is always read fresh; within a call the copy is also rebuilt if the weight
tensor is replaced or updated in place.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

INPUT_MAJOR_MAX_ROWS = 128
"""Inputs with at most this many rows (product of the leading dimensions) use the input-major copy."""

_DEPTH_LOCK = threading.Lock()  # generate() may run in several threads on one model


class Linear(nn.Linear):
    """``nn.Linear`` that, inside :func:`input_major_weights`, multiplies small CPU inputs by a cached ``W^T``.

    Numerically a matrix product like ``F.linear`` (float32 results agree to rounding); see the module docstring.
    """

    _input_major_depth = 0  # > 0 inside input_major_weights()
    _weight_t: torch.Tensor | None = None
    _weight_t_key: tuple | None = None

    def _use_input_major(self, x: torch.Tensor) -> bool:
        weight = self.weight
        return (
            x.device.type == "cpu"
            and x.dim() >= 1
            and x.shape[-1] == self.in_features
            and x.numel() <= INPUT_MAJOR_MAX_ROWS * self.in_features
            and x.dtype == weight.dtype
            and not (torch.is_grad_enabled() and weight.requires_grad)
            and not torch.is_autocast_enabled("cpu")
            and not weight.is_inference()
            and not torch.compiler.is_compiling()
        )

    def input_major_weight(self) -> torch.Tensor:
        """``weight.T`` as a contiguous ``(in_features, out_features)`` tensor, rebuilt when the weight changed."""
        weight = self.weight
        key = (weight.data_ptr(), weight._version, weight.dtype, weight.shape)
        if self._weight_t_key != key:
            self._weight_t = weight.detach().t().contiguous()  # (in, out)
            self._weight_t_key = key
        return self._weight_t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self._input_major_depth and self._use_input_major(x)):
            return F.linear(x, self.weight, self.bias)
        weight_t = self.input_major_weight()  # (in, out)
        flat = x.reshape(-1, self.in_features)  # (N, in)
        out = flat @ weight_t if self.bias is None else torch.addmm(self.bias, flat, weight_t)  # (N, out)
        return out.view(*x.shape[:-1], self.out_features)


@contextmanager
def input_major_weights(model: nn.Module) -> Iterator[None]:
    """Within the block, every :class:`Linear` of ``model`` multiplies small CPU inputs by an input-major weight copy;
    the copies are freed on exit. Re-entrant (a ``generate()`` inside another one keeps the copies)."""
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    with _DEPTH_LOCK:
        for layer in layers:
            layer._input_major_depth += 1
    try:
        yield
    finally:
        with _DEPTH_LOCK:
            for layer in layers:
                layer._input_major_depth -= 1
                if layer._input_major_depth == 0:
                    for name in ("_input_major_depth", "_weight_t", "_weight_t_key"):
                        layer.__dict__.pop(name, None)


class InputMajorDecodingMixin:
    """Put before ``GenerationMixin``: ``generate()`` runs inside :func:`input_major_weights` (faster CPU decoding)."""

    def generate(self, *args, **kwargs):
        with input_major_weights(self):
            return super().generate(*args, **kwargs)


__all__ = ["INPUT_MAJOR_MAX_ROWS", "InputMajorDecodingMixin", "Linear", "input_major_weights"]
