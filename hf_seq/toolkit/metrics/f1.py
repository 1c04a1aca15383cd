"""F1 as a local ``evaluate`` metric (binary, macro, micro or weighted averaging), no scikit-learn needed."""

import evaluate

from ._shared import LABEL_FEATURES, local_metric

_DESCRIPTION = "F1 = 2 * precision * recall / (precision + recall), per class then averaged."
_KWARGS_DESCRIPTION = """
Args:
    predictions (list[int]), references (list[int]).
    average (str): "binary" (default; F1 of pos_label), "macro", "micro" or "weighted".
    pos_label (int): the positive class for average="binary", default 1.
    labels (list[int]): classes to average over (default: those in predictions and references).
Returns:
    f1 (float in [0, 1]); a class with no predicted and no reference example counts as F1 = 0.
"""


@local_metric(_DESCRIPTION, _KWARGS_DESCRIPTION, LABEL_FEATURES)
class F1(evaluate.Metric):
    """F1 score for classification."""

    def _compute(self, predictions, references, average="binary", pos_label=1, labels=None):
        if average not in ("binary", "macro", "micro", "weighted"):
            raise ValueError(f"average must be 'binary', 'macro', 'micro' or 'weighted', got {average!r}")
        if labels is None:
            labels = sorted(set(predictions) | set(references))
        tp = {c: 0 for c in labels}
        fp = {c: 0 for c in labels}
        fn = {c: 0 for c in labels}
        support = {c: 0 for c in labels}
        for pred, ref in zip(predictions, references):
            if ref in support:
                support[ref] += 1
            if pred == ref and pred in tp:
                tp[pred] += 1
            else:
                if pred in fp:
                    fp[pred] += 1
                if ref in fn:
                    fn[ref] += 1

        def f1_of(t, p, n):
            return 2 * t / (2 * t + p + n) if (2 * t + p + n) > 0 else 0.0

        if average == "binary":
            return {"f1": float(f1_of(tp.get(pos_label, 0), fp.get(pos_label, 0), fn.get(pos_label, 0)))}
        if average == "micro":
            return {"f1": float(f1_of(sum(tp.values()), sum(fp.values()), sum(fn.values())))}
        scores = {c: f1_of(tp[c], fp[c], fn[c]) for c in labels}
        if average == "macro":
            return {"f1": float(sum(scores.values()) / len(scores)) if scores else 0.0}
        total = sum(support.values())
        return {"f1": float(sum(scores[c] * support[c] for c in labels) / total) if total else 0.0}
