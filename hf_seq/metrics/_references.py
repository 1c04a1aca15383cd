"""Reference handling shared by the corpus-level text metrics (``sacrebleu.py``, ``chrf.py``).

Each metric module imports this file relatively (``from ._references import ...``); ``evaluate.load`` copies such
"internal" imports next to the metric script, so the metrics still load from their path alone.
"""

import datasets

# one prediction with a list of references, or with a single reference string
TEXT_FEATURES = [
    datasets.Features(
        {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
    ),
    datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
]


def reference_streams(references: list, metric_name: str) -> list[list[str]]:
    """Per-prediction references (``[[r1, r2], ...]`` or ``[r, ...]``) → sacrebleu's reference streams
    ``[[r1 of every prediction], [r2 of every prediction], ...]``; every prediction needs the same number."""
    if references and isinstance(references[0], str):
        references = [[ref] for ref in references]
    n_refs = len(references[0]) if references else 1
    if any(len(refs) != n_refs for refs in references):
        raise ValueError(f"{metric_name} requires the same number of references for every prediction")
    return [[refs[i] for refs in references] for i in range(n_refs)]
