"""Token-level loss shared by the BERT and recurrent heads (imported relatively, so ``save_pretrained`` copies it)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .validation import IGNORE_INDEX


def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits ``(..., C)`` against labels ``(...)`` over the labels that are not -100; 0 (still
    attached to the graph) when every label is -100, instead of the NaN of an empty mean."""
    labels = labels.reshape(-1).long()  # (N,)
    if not bool((labels != IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, ignore_index=IGNORE_INDEX)


__all__ = ["masked_cross_entropy"]
