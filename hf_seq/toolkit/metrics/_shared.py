"""What the local metric modules share: the metric info of each from class keywords, and the reference handling of
the corpus-level text metrics (``sacrebleu.py``, ``chrf.py``).

Each metric module imports this file relatively (``from ._shared import ...``); ``evaluate.load`` copies such
"internal" imports next to the metric script, so the metrics still load from their path alone.
"""

import datasets
import evaluate

# one prediction with a list of references, or with a single reference string
TEXT_FEATURES = [
    datasets.Features(
        {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
    ),
    datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
]
# one class id per prediction and per reference
LABEL_FEATURES = datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")})


def local_metric(description: str, inputs_description: str, features, citation: str = ""):
    """Class decorator of a local metric: its ``_info`` and its docstring.

    ``_info`` returns the ``evaluate.MetricInfo`` of these fields; the docstring becomes ``description +
    inputs_description`` followed by the class's own (what ``evaluate.utils.file_utils.add_start_docstrings``
    writes).
    """

    def _info(self):
        return evaluate.MetricInfo(
            description=description, citation=citation, inputs_description=inputs_description, features=features
        )

    def decorate(cls):
        cls._info = _info
        cls.__doc__ = description + inputs_description + "\n\n" + (cls.__doc__ or "")
        return cls

    return decorate


def reference_streams(references: list, metric_name: str) -> list[list[str]]:
    """Per-prediction references (``[[r1, r2], ...]`` or ``[r, ...]``) → sacrebleu's reference streams
    ``[[r1 of every prediction], [r2 of every prediction], ...]``; every prediction needs the same number."""
    if references and isinstance(references[0], str):
        references = [[ref] for ref in references]
    n_refs = len(references[0]) if references else 1
    if any(len(refs) != n_refs for refs in references):
        raise ValueError(f"{metric_name} requires the same number of references for every prediction")
    return [[refs[i] for refs in references] for i in range(n_refs)]
