"""Local ``evaluate`` metric modules (the Hub is unreachable offline) and a loader for them.

>>> from hf_seq.toolkit.metrics import load_metric
>>> load_metric("accuracy").compute(predictions=[1, 0], references=[1, 1])
{'accuracy': 0.5}

Available: ``accuracy``, ``f1``, ``sacrebleu`` (also ``bleu``), ``chrf``, ``seqeval`` (entity-level scores of tagged
sequences, as the Hub's ``seqeval``). Perplexity needs no module:
``perplexity(mean_cross_entropy_loss) = exp(loss)``.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["METRICS_DIR", "available_metrics", "load_metric", "metric_path", "perplexity"]

METRICS_DIR = Path(__file__).resolve().parent
_ALIASES = {"bleu": "sacrebleu", "chrf++": "chrf"}


def available_metrics() -> list[str]:
    """Names of the metric modules shipped in this directory."""
    return sorted(p.stem for p in METRICS_DIR.glob("*.py") if not p.name.startswith("_"))


def metric_path(name: str) -> str:
    """Absolute path of the metric module ``name`` (``"accuracy"``, ``"sacrebleu"``...), for ``evaluate.load``."""
    key = _ALIASES.get(name.lower(), name.lower())
    path = METRICS_DIR / f"{key}.py"
    if not path.is_file():
        raise ValueError(f"unknown metric {name!r}; available: {available_metrics()}")
    return str(path)


def load_metric(name: str, **kwargs):
    """``evaluate.load`` of the local module ``name``; keyword arguments go to ``evaluate.load``."""
    import evaluate

    return evaluate.load(metric_path(name), **kwargs)


def perplexity(mean_loss: float) -> float:
    """Perplexity from a mean per-token cross-entropy in nats: ``exp(loss)`` (``inf`` on overflow)."""
    try:
        return math.exp(mean_loss)
    except OverflowError:
        return float("inf")
