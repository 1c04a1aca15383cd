"""Corpus BLEU through ``sacrebleu`` as a local ``evaluate`` metric (the Hub's "sacrebleu" needs the network).

``evaluate.load("<path>/hf_seq/toolkit/metrics/sacrebleu.py").compute(predictions=[...], references=[[...], ...])`` returns
the same numbers as ``sacrebleu.corpus_bleu(predictions, list(zip(*references)))``.
"""

import evaluate
import sacrebleu as scb

from ._shared import TEXT_FEATURES, local_metric, reference_streams

_DESCRIPTION = "Corpus-level BLEU (Papineni et al., 2002) computed by sacrebleu (Post, 2018), on detokenized text."
_CITATION = """@inproceedings{post-2018-call, author = "Post, Matt",
  title = "A Call for Clarity in Reporting {BLEU} Scores",
  booktitle = "Proceedings of the Third Conference on Machine Translation", year = "2018"}"""
_KWARGS_DESCRIPTION = """
Args:
    predictions (list[str]): system outputs (detokenized).
    references (list[str] or list[list[str]]): one reference or a list of references per prediction
        (every prediction must have the same number of references).
    smooth_method (str): "exp" (default), "floor", "add-k" or "none".
    smooth_value (float): for "floor"/"add-k".
    tokenize (str): sacrebleu tokenizer, default "13a".
    lowercase (bool): default False.
    force (bool): allow already tokenized input without a warning.
    use_effective_order (bool): for sentence-level scoring. Default False.
Returns:
    score (float, 0-100), counts, totals, precisions, bp, sys_len, ref_len.
Example:
    >>> bleu = evaluate.load("hf_seq/toolkit/metrics/sacrebleu.py")
    >>> bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])["score"]
    100.00000000000004
"""


@local_metric(_DESCRIPTION, _KWARGS_DESCRIPTION, TEXT_FEATURES, citation=_CITATION)
class Sacrebleu(evaluate.Metric):
    """Corpus BLEU computed by sacrebleu."""

    def _compute(
        self,
        predictions,
        references,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        force: bool = False,
        lowercase: bool = False,
        tokenize: str | None = None,
        use_effective_order: bool = False,
    ):
        transposed = reference_streams(references, "sacrebleu")
        result = scb.corpus_bleu(
            predictions,
            transposed,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            force=force,
            lowercase=lowercase,
            use_effective_order=use_effective_order,
            **({} if tokenize is None else {"tokenize": tokenize}),
        )
        return {
            "score": result.score,
            "counts": result.counts,
            "totals": result.totals,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
        }
