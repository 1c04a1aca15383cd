"""chrF / chrF++ through ``sacrebleu`` as a local ``evaluate`` metric.

``evaluate.load("<path>/hf_seq/toolkit/metrics/chrf.py").compute(predictions=[...], references=[[...], ...])`` equals
``sacrebleu.corpus_chrf(predictions, list(zip(*references)))``; ``word_order=2`` gives chrF++.
"""

import evaluate
import sacrebleu as scb

from ._shared import TEXT_FEATURES, local_metric, reference_streams

_DESCRIPTION = "Character n-gram F-score (Popovic, 2015) computed by sacrebleu; word_order=2 gives chrF++."
_CITATION = """@inproceedings{popovic-2015-chrf, author = "Popovi{\\'c}, Maja",
  title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
  booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation", year = "2015"}"""
_KWARGS_DESCRIPTION = """
Args:
    predictions (list[str]): system outputs.
    references (list[str] or list[list[str]]): reference(s) per prediction, the same number for each.
    char_order (int): character n-gram order, default 6.
    word_order (int): word n-gram order, default 0 (2 = chrF++).
    beta (int): recall weight, default 2.
    lowercase (bool): default False.
    whitespace (bool): include whitespace in character n-grams, default False.
    eps_smoothing (bool): default False.
Returns:
    score (float, 0-100), char_order, word_order, beta.
"""


@local_metric(_DESCRIPTION, _KWARGS_DESCRIPTION, TEXT_FEATURES, citation=_CITATION)
class ChrF(evaluate.Metric):
    """Corpus chrF computed by sacrebleu."""

    def _compute(
        self,
        predictions,
        references,
        char_order: int = 6,
        word_order: int = 0,
        beta: int = 2,
        lowercase: bool = False,
        whitespace: bool = False,
        eps_smoothing: bool = False,
    ):
        transposed = reference_streams(references, "chrF")
        # CHRF's parameters in their order: (char_order, word_order, beta, lowercase, whitespace, eps_smoothing)
        metric = scb.CHRF(char_order, word_order, beta, lowercase, whitespace, eps_smoothing)
        result = metric.corpus_score(predictions, transposed)
        return {"score": result.score, "char_order": char_order, "word_order": word_order, "beta": beta}
