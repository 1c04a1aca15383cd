"""Losses shared by the BERT and recurrent heads (imported relatively, so ``save_pretrained`` copies this file)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .validation import IGNORE_INDEX, check_label_range


def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits ``(..., C)`` against labels ``(...)`` over the labels that are not -100; 0 (still
    attached to the graph) when every label is -100, instead of the NaN of an empty mean."""
    labels = labels.reshape(-1).long()  # (N,)
    if not bool((labels != IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=IGNORE_INDEX)


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
    low, high = (float(v) for v in torch.aminmax(labels))
    if low < 0.0 or high > 1.0:
        raise ValueError(f"`labels` for multi-label classification must be in [0, 1], got values in [{low}, {high}]")
    return F.binary_cross_entropy_with_logits(logits, labels)


__all__ = ["infer_problem_type", "masked_cross_entropy", "sequence_classification_loss"]
