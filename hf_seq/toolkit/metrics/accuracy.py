"""Accuracy as a local ``evaluate`` metric: ``evaluate.load("<path>/hf_seq/toolkit/metrics/accuracy.py")``.

Works for sequence classification (one label per example) and token classification: pass the flattened
predictions/references of the real tokens (positions whose label is -100 are ignored if ``ignore_index`` is given).
"""

import evaluate

from ._shared import LABEL_FEATURES, local_metric

_DESCRIPTION = "Accuracy: the fraction of predictions equal to the reference label."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list[int]): predicted labels.
    references (list[int]): reference labels.
    normalize (bool): if False return the number of correct predictions instead of the fraction. Default True.
    sample_weight (list[float]): optional weight per example.
    ignore_index (int): optional label value whose positions are skipped (e.g. -100 for padding/sub-word tokens).
Returns:
    accuracy (float): correct / total (or the weighted version); 0.0 when nothing is left to score.
Example:
    >>> acc = evaluate.load("hf_seq/toolkit/metrics/accuracy.py")
    >>> acc.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0])
    {'accuracy': 0.75}
"""


@local_metric(_DESCRIPTION, _KWARGS_DESCRIPTION, LABEL_FEATURES)
class Accuracy(evaluate.Metric):
    """Fraction of correct predictions (classification or flattened token classification)."""

    def _compute(self, predictions, references, normalize=True, sample_weight=None, ignore_index=None):
        if len(predictions) != len(references):
            raise ValueError(f"predictions ({len(predictions)}) and references ({len(references)}) differ in length")
        weights = [1.0] * len(predictions) if sample_weight is None else [float(w) for w in sample_weight]
        if len(weights) != len(predictions):
            raise ValueError("sample_weight must have one weight per prediction")
        correct = 0.0
        total = 0.0
        for pred, ref, weight in zip(predictions, references, weights):
            if ignore_index is not None and ref == ignore_index:
                continue
            total += weight
            if pred == ref:
                correct += weight
        if not normalize:
            return {"accuracy": float(correct)}
        return {"accuracy": float(correct / total) if total > 0 else 0.0}
