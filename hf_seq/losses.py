"""Losses shared by every head (imported relatively, so ``save_pretrained`` copies this file).

* :func:`masked_cross_entropy` — mean cross-entropy over the labels that are not -100 (0, not NaN, when none is).
* :func:`linear_cross_entropy` — the language-model heads' output projection and cross-entropy in one autograd
  function: full logits for the caller, and a backward that skips the rows whose label is -100 (padding).
* :func:`lm_head_and_loss` — what the models call: :func:`linear_cross_entropy` for a plain ``nn.Linear`` head, the
  module itself (and :func:`masked_cross_entropy`) for a wrapped or adapted one; without labels, the head module.
* :func:`sequence_classification_loss` — ``transformers``' sequence-classifier losses with input checks.

The fused backward (:class:`_LinearCrossEntropy`) selects the labelled rows with ``nonzero``, a data-dependent shape:
it runs only for eager training on CPU, where it is measurably faster. Compiled, exported or on an accelerator the
loss is one ``F.cross_entropy`` over every row (``ignore_index=-100``) with no host synchronisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .fast_paths import fuses_lm_loss
from .validation import IGNORE_INDEX, check_integer_labels, check_label_range, checks_values


def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits ``(..., C)`` against labels ``(...)`` over the labels that are not -100; 0 (still
    attached to the graph) when every label is -100, instead of the NaN of an empty mean.

    The sum over the labelled rows is divided by their count clamped to 1: no branch on tensor values, so the same
    code runs eagerly, compiled, exported and on an accelerator without a host synchronisation. Float labels raise
    ``ValueError`` (a cast would silently truncate 1.7 to class 1)."""
    check_integer_labels("labels", labels)
    labels = labels.reshape(-1).long()  # (N,)
    total = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).to(_loss_dtype(logits)), labels, ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return total / (labels != IGNORE_INDEX).sum().clamp(min=1)


def _loss_dtype(logits: torch.Tensor) -> torch.dtype:
    """Losses are reduced in float32 at least (bf16/fp16 logits under autocast), float64 stays float64."""
    return torch.promote_types(logits.dtype, torch.float32)


def _logsumexp_rows(logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``logsumexp(logits[rows], -1)`` ``(len(rows),)`` in at least float32, gathered and reduced in chunks of about 4 MB:
    a full-size temporary would cost more in first-touch page faults on CPU than the arithmetic."""
    chunk = max(1, (1 << 20) // max(1, logits.shape[-1]))
    dtype = _loss_dtype(logits)
    parts = [torch.logsumexp(logits.index_select(0, r).to(dtype), dim=-1) for r in rows.split(chunk)]
    return torch.cat(parts) if parts else logits.new_zeros(0, dtype=dtype)


class _LinearCrossEntropy(torch.autograd.Function):
    """``logits = hidden @ weight.T + bias`` and the mean cross-entropy of the rows whose label is not -100.

    Same values and gradients as ``F.linear`` followed by ``F.cross_entropy(ignore_index=-100)``. The saving is in
    the backward: the loss's gradient ``softmax - onehot`` is written only for the labelled rows ``(N_l, V)`` (one
    buffer, no log-softmax ``(N, V)`` kept from the forward), and the two backward products of the projection,
    ``grad_hidden = G @ W`` and ``grad_weight = G^T @ H``, run over those rows only. In a padded batch of target
    sequences a quarter or more of the rows are padding, and the vocabulary projection is the largest matrix product
    of a small translation model. A gradient that reaches the returned logits from elsewhere (another loss on them)
    is added in full.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels):  # (N, D), (V, D), (V,) or None, (N,)
        logits = F.linear(hidden, weight, bias)  # (N, V)
        rows = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # (N_l,) labelled rows
        target = labels.index_select(0, rows)  # (N_l,)
        count = max(rows.numel(), 1)
        lse = _logsumexp_rows(logits, rows)  # (N_l,) float32 or float64
        picked = logits[rows, target].to(lse.dtype)  # (N_l,)
        loss = (lse - picked).sum() / count
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(hidden, weight, logits, rows, target, lse)
        ctx.count = count
        return logits, loss

    @staticmethod
    def backward(ctx, grad_logits, grad_loss):
        hidden, weight, logits, rows, target, lse = ctx.saved_tensors
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        dtype = logits.dtype  # the dtype the forward product ran in (bf16 under autocast)
        labelled = None  # (N_l, V): d loss / d logits on the labelled rows
        if grad_loss is not None:
            labelled = logits.index_select(0, rows).to(lse.dtype).sub_(lse[:, None]).exp_()  # softmax
            labelled[torch.arange(rows.numel(), device=rows.device), target] -= 1.0  # - onehot
            labelled = labelled.mul_(grad_loss / ctx.count).to(dtype)
        if grad_logits is None and labelled is None:
            return None, None, None, None
        grad_hidden = grad_weight = grad_bias = None
        if grad_logits is not None:  # the logits were used elsewhere as well: one dense gradient over every row
            full = grad_logits.to(dtype).clone()  # (N, V)
            if labelled is not None:
                full.index_add_(0, rows, labelled)
            if needs_hidden:
                grad_hidden = full @ weight.to(dtype)  # (N, D)
            if needs_weight:
                grad_weight = full.t() @ hidden.to(dtype)  # (V, D)
            if needs_bias:
                grad_bias = full.sum(0)
        else:  # only the loss: products over the labelled rows
            if needs_hidden:
                grad_hidden = hidden.new_zeros(hidden.shape, dtype=dtype)
                grad_hidden.index_copy_(0, rows, labelled @ weight.to(dtype))  # (N, D), zero on unlabelled rows
            if needs_weight:
                grad_weight = labelled.t() @ hidden.index_select(0, rows).to(dtype)  # (V, D)
            if needs_bias:
                grad_bias = labelled.sum(0)
        grad_hidden = None if grad_hidden is None else grad_hidden.to(hidden.dtype)
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None else grad_bias.to(weight.dtype)
        return grad_hidden, grad_weight, grad_bias, None


def check_lm_labels(labels: torch.Tensor, positions: tuple[int, ...], vocab_size: int, name: str = "labels") -> None:
    """ValueError unless ``labels`` (named ``name``) are integer ids of shape ``positions`` in ``[0, vocab_size)`` or
    -100: the one check of a language model's labels, by the head that takes them or else by the loss."""
    if tuple(labels.shape) != tuple(positions):
        raise ValueError(f"`{name}` must have shape {tuple(positions)}, got {tuple(labels.shape)}")
    if labels.is_floating_point() or labels.dtype == torch.bool:
        raise ValueError(f"`{name}` must be integer token ids (or -100), got dtype {labels.dtype}")
    check_label_range(name, labels, vocab_size, "vocab_size")


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor | None,
    bias: torch.Tensor | None = None,
    checked: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A language-model head: ``(logits (..., V), loss)`` for ``hidden`` ``(..., D)`` and ``weight`` ``(V, D)``.

    ``loss`` is the mean cross-entropy over the ``labels`` ``(...)`` that are not -100 (None without labels; 0, still
    attached to the graph, when every label is -100). Labels must already be aligned with the positions (shifted
    for a causal LM). Labels out of ``[0, V)`` raise ``ValueError`` (``checked``: the caller checked them). When a gradient is needed in eager
    mode on CPU this runs :class:`_LinearCrossEntropy`, whose backward skips the unlabelled rows (its row selection has
    a data-dependent shape); compiled, exported or on an accelerator it is ``F.linear`` + :func:`masked_cross_entropy`,
    the same values.
    """
    if labels is None:
        return F.linear(hidden, weight, bias), None
    if not checked:
        check_lm_labels(labels, hidden.shape[:-1], weight.shape[0])
    logits_shape = (*hidden.shape[:-1], weight.shape[0])
    flat_hidden, flat_labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1).long()  # (N, D), (N,)
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    if needs_grad and fuses_lm_loss(hidden):
        logits, loss = _LinearCrossEntropy.apply(flat_hidden, weight, bias, flat_labels)
        return logits.view(logits_shape), loss
    logits = F.linear(flat_hidden, weight, bias).view(logits_shape)  # plain path: no graph needed, traced, accelerator
    return logits, masked_cross_entropy(logits, flat_labels)  # the loss of the returned tensor (autograd sees it)


def lm_head_and_loss(
    head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor | None, checked: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(head(hidden), loss)`` for a language-model head: without ``labels`` the module itself; with them the fused
    :func:`linear_cross_entropy` when ``head`` is a plain linear layer without hooks, else the module (a wrapped or
    adapted head) and :func:`masked_cross_entropy`. The labels are checked (:func:`check_lm_labels`) unless
    ``checked`` (the head checked them under their own name)."""
    if labels is None:
        return head(hidden), None  # (..., V)
    plain = type(head) is nn.Linear and not (head._forward_hooks or head._forward_pre_hooks)
    if plain:
        return linear_cross_entropy(hidden, head.weight, labels, head.bias, checked)
    logits = head(hidden)  # (..., V)
    if not checked:
        check_lm_labels(labels, logits.shape[:-1], logits.shape[-1])
    return logits, masked_cross_entropy(logits, labels)


def infer_problem_type(problem_type: str | None, num_labels: int, labels: torch.Tensor) -> str:
    """``transformers``' rule: the configured ``problem_type``, else regression for one label, single-label
    classification for integer labels, multi-label classification for float labels."""
    if problem_type is not None:
        return problem_type
    if num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int, torch.int16, torch.int8, torch.uint8):
        return "single_label_classification"
    return "multi_label_classification"


def sequence_classification_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_labels: int, problem_type: str | None
) -> torch.Tensor:
    """Loss of ``logits`` ``(B, num_labels)`` against ``labels`` as ``transformers``' sequence classifiers compute it
    (cross-entropy, MSE or sigmoid + BCE by :func:`infer_problem_type`), after validating shape and range.

    With ``num_labels=1`` and ``problem_type="multi_label_classification"`` this is logistic regression (one sigmoid
    output; 0/1 labels of shape ``(B,)`` are accepted).
    """
    batch_size = logits.shape[0]
    problem = infer_problem_type(problem_type, num_labels, labels)
    if labels.shape[0] != batch_size:
        raise ValueError(f"`labels` must have batch size {batch_size}, got shape {tuple(labels.shape)}")
    if problem == "single_label_classification":
        if labels.is_floating_point() or labels.numel() != batch_size:
            raise ValueError(
                f"`labels` must be integer class ids of shape ({batch_size},) for single-label classification, "
                f"got {labels.dtype} {tuple(labels.shape)}"
            )
        labels = labels.reshape(-1)
        check_label_range("labels", labels, num_labels, "num_labels", ignore_index=None)
        return F.cross_entropy(logits, labels.long())
    if problem == "regression":
        if labels.numel() != logits.numel():
            raise ValueError(
                f"`labels` for regression must have {num_labels} value(s) per example, got {tuple(labels.shape)}"
            )
        return F.mse_loss(logits.reshape(-1), labels.reshape(-1).to(logits.dtype))
    # multi-label: independent sigmoids
    if num_labels == 1 and labels.dim() == 1:
        labels = labels.unsqueeze(-1)
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(
            f"`labels` for multi-label classification must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}"
        )
    labels = labels.to(logits.dtype)
    if checks_values(labels):
        low, high = (float(v) for v in torch.aminmax(labels))
        if low < 0.0 or high > 1.0:
            raise ValueError(
                f"`labels` for multi-label classification must be in [0, 1], got values in [{low}, {high}]"
            )
    return F.binary_cross_entropy_with_logits(logits, labels)


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor, num_labels: int) -> torch.Tensor:
    """Cross-entropy of per-token ``logits`` ``(B, T, num_labels)`` against ``labels`` ``(B, T)`` (``-100`` =
    ignored; all ignored: zero, not the NaN of an empty mean), after validating their shape, dtype and range."""
    if tuple(labels.shape) != tuple(logits.shape[:2]):
        raise ValueError(f"`labels` must have shape {tuple(logits.shape[:2])}, got {tuple(labels.shape)}.")
    check_label_range("labels", labels, num_labels, "num_labels")
    return masked_cross_entropy(logits, labels)


__all__ = [
    "infer_problem_type",
    "linear_cross_entropy",
    "lm_head_and_loss",
    "masked_cross_entropy",
    "sequence_classification_loss",
    "token_classification_loss",
]
