"""Entity-level precision / recall / F1 for tagged sequences (``seqeval``) as a local ``evaluate`` metric.

The same inputs, options and outputs as the Hub's ``evaluate.load("seqeval")`` (which needs the network and the
``seqeval`` package); written here without either. Entities are read from IOB-style tags:

* default mode (``mode=None``): conlleval's lenient chunk rules over all sentences joined by ``O``; any mix of
  ``B-``/``I-``/``E-``/``S-`` prefixes is read (IOB1, IOB2, IOE1, IOE2, IOBES tags);
* ``mode="strict"``: an entity counts only when it is well formed in ``scheme`` (``"IOB1"``, ``"IOB2"``, ``"IOE1"``,
  ``"IOE2"``, ``"IOBES"``, ``"BILOU"``); without ``scheme`` it is detected from the references (IOB2, IOE2, IOBES or
  BILOU).
"""

import warnings

import datasets
import evaluate

from ._shared import local_metric

SCHEMES = ("IOB1", "IOB2", "IOE1", "IOE2", "IOBES", "BILOU")

_DESCRIPTION = """\
Entity-level evaluation of sequence labelling (named entities, chunks): a predicted entity is correct when its type,
start and end equal those of a reference entity. Per entity type and overall (micro average): precision, recall, F1;
plus the token accuracy.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list[list[str]]): predicted tags per sentence, e.g. [["B-PER", "I-PER", "O"]].
    references (list[list[str]]): reference tags, sentence by sentence of the same lengths.
    suffix (bool): the prefix comes after the type ("PER-B") instead of before it. Default False.
    scheme (str): "IOB1", "IOB2", "IOE1", "IOE2", "IOBES" or "BILOU"; used by mode="strict". Default None.
    mode (str): None (conlleval-compatible) or "strict" (only entities well formed in `scheme`). Default None.
    sample_weight: accepted for compatibility; like the Hub module, it changes no score.
    zero_division ("warn", 0 or 1): the value of a precision/recall whose denominator is 0 ("warn": 0 and a warning).
Returns:
    {TYPE: {"precision", "recall", "f1", "number" (reference entities of the type)}, ... for each entity type,
     "overall_precision", "overall_recall", "overall_f1", "overall_accuracy"}
Example:
    >>> seqeval = load_metric("seqeval")
    >>> seqeval.compute(predictions=[["B-PER", "I-PER", "O"]], references=[["B-PER", "I-PER", "O"]])["overall_f1"]
    1.0
"""

# Strict-mode chunk rules, one table per scheme: (previous prefixes, current prefixes, type condition) triples for
# "an entity starts here", "the current token continues the entity" and "the entity ended before the current token".
# "*" is any prefix; the type condition compares the entity types of the two tokens.
_ANY = "IOBESUL"


def _rules(*rules: str) -> list[tuple[str, ...]]:
    """The rules written ``"previous current condition"``: ``_rules("I B any")`` → ``[("I", "B", "any")]``."""
    return [tuple(rule.split()) for rule in rules]


_STRICT_RULES = {
    "IOB1": {
        "allowed": "IOB",
        "start": _rules("O I any", "I I diff", "B I any", "I B same", "B B same"),
        "inside": _rules("B I same", "I I same"),
        "end": _rules("I I diff", "I O any", "I B any", "B O any", "B I diff", "B B same"),
    },
    "IOE1": {
        "allowed": "IOE",
        "start": _rules("O I any", "I I diff", "E I any", "E E same"),
        "inside": _rules("I I same", "I E same"),
        "end": _rules("I I diff", "I O any", "I E diff", "E I same", "E E same"),
    },
    "IOB2": {
        "allowed": "IOB",
        "start": _rules("* B any"),
        "inside": _rules("B I same", "I I same"),
        "end": _rules("I O any", "I I diff", "I B any", "B O any", "B I diff", "B B any"),
    },
    "IOE2": {
        "allowed": "IOE",
        "start": _rules("O I any", "O E any", "E I any", "E E any", "I I diff", "I E diff"),
        "inside": _rules("I E same", "I I same"),
        "end": _rules("E * any"),
    },
    "IOBES": {
        "allowed": "IOBES",
        "start": _rules("* B any", "* S any"),
        "inside": _rules("B I same", "B E same", "I I same", "I E same"),
        "end": _rules("S * any", "E * any"),
    },
    "BILOU": {
        "allowed": "BILOU",
        "start": _rules("* B any", "* U any"),
        "inside": _rules("B I same", "B L same", "I I same", "I L same"),
        "end": _rules("U * any", "L * any"),
    },
}

# Prefix sets of the references that select a scheme when mode="strict" has none (checked in this order).
_DETECTABLE = {
    "IOB2": ["IOB", "IB", "BO", "B"],
    "IOE2": ["IOE", "IE", "EO", "E"],
    "IOBES": ["IOBES", "IBES", "IOBE", "OBES", "IBE", "BES", "OBE", "BE", "S"],
    "BILOU": ["IOBLU", "IBLU", "IOBL", "OBLU", "IBL", "BLU", "OBL", "BL", "U"],
}


def _lenient_parts(tag: str, suffix: bool) -> tuple[str, str]:
    """(prefix letter, entity type) of a tag as conlleval reads it: "B-PER" -> ("B", "PER"), "O" -> ("O", "_")."""
    if suffix:
        return tag[-1:], tag[:-1].rsplit("-", maxsplit=1)[0] or "_"
    return tag[:1], tag[1:].split("-", maxsplit=1)[-1] or "_"


def lenient_entities(sentences: list[list[str]], suffix: bool = False) -> set[tuple[str, int, int]]:
    """conlleval's chunks ``(type, first, last)`` over the sentences joined with an "O" after each one."""
    tags = [tag for sentence in sentences for tag in [*sentence, "O"]] + ["O"]
    entities = set()
    prev_prefix, prev_type, begin = "O", "", 0
    for i, tag in enumerate(tags):
        prefix, type_ = _lenient_parts(tag, suffix)
        ends = (
            prev_prefix in ("E", "S")
            or (prev_prefix in ("B", "I") and prefix in ("B", "S", "O"))
            or (prev_prefix not in ("O", ".") and prev_type != type_)
        )
        if ends:
            entities.add((prev_type, begin, i - 1))
        starts = (
            prefix in ("B", "S")
            or (prev_prefix in ("E", "S", "O") and prefix in ("E", "I"))
            or (prefix not in ("O", ".") and prev_type != type_)
        )
        if starts:
            begin = i
        prev_prefix, prev_type = prefix, type_
    return entities


def _strict_parts(tag: str, suffix: bool) -> tuple[str, str]:
    prefix = tag[-1:] if suffix else tag[:1]
    if not prefix or prefix not in _ANY:
        raise ValueError(f"seqeval: tag {tag!r} does not carry a prefix out of {', '.join(_ANY)}")
    return prefix, (tag[:-1] if suffix else tag[1:]).strip("-") or "_"


def _matches(rules: list, prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    for prev_prefixes, cur_prefixes, condition in rules:
        if prev[0] in (_ANY if prev_prefixes == "*" else prev_prefixes) and cur[0] in (
            _ANY if cur_prefixes == "*" else cur_prefixes
        ):
            if condition == "any" or (condition == "same") == (prev[1] == cur[1]):
                return True
    return False


def strict_entities(sentences: list[list[str]], scheme: str, suffix: bool = False) -> set[tuple[str, int, int, int]]:
    """Entities ``(type, sentence, start, end_exclusive)`` that are well formed in ``scheme``."""
    rules = _STRICT_RULES[scheme]
    outside = ("O", "_")
    entities = set()
    for sent_id, sentence in enumerate(sentences):
        tokens = [_strict_parts(tag, suffix) for tag in sentence]
        for tag, (prefix, _) in zip(sentence, tokens):
            if prefix not in rules["allowed"]:
                raise ValueError(
                    f"seqeval: tag {tag!r} is not allowed in scheme {scheme} (prefixes {', '.join(rules['allowed'])})"
                )
        tokens.append(outside)
        i, prev = 0, outside
        while i < len(tokens):
            if _matches(rules["start"], prev, tokens[i]):
                end, last = i + 1, tokens[i]
                while end < len(tokens) and _matches(rules["inside"], last, tokens[end]):
                    last, end = tokens[end], end + 1
                if _matches(rules["end"], tokens[end - 1], tokens[end]):
                    entities.add((tokens[i][1], sent_id, i, end))
                i = end
            else:
                i += 1
            prev = tokens[i - 1]
    return entities


def detect_scheme(references: list[list[str]], suffix: bool = False) -> str:
    """The scheme (IOB2, IOE2, IOBES or BILOU) whose prefixes the references use."""
    prefixes = {_strict_parts(tag, suffix)[0] for sentence in references for tag in sentence}
    for scheme, sets in _DETECTABLE.items():
        if any(prefixes == set(allowed) for allowed in sets):
            return scheme
    raise ValueError(
        f"seqeval: cannot detect the tagging scheme of the references (prefixes {sorted(prefixes)}); pass "
        f"scheme= one of {', '.join(SCHEMES)}"
    )


_TAGS = datasets.Sequence(datasets.Value("string", id="label"), id="sequence")
_FEATURES = datasets.Features({"predictions": _TAGS, "references": _TAGS})


@local_metric(_DESCRIPTION, _KWARGS_DESCRIPTION, _FEATURES)
class Seqeval(evaluate.Metric):
    """Entity-level precision, recall and F1 per type and overall, plus token accuracy."""

    def _compute(
        self, predictions, references, suffix=False, scheme=None, mode=None, sample_weight=None, zero_division="warn"
    ):
        if scheme is not None and scheme not in SCHEMES:
            raise ValueError(f"Scheme should be one of [{', '.join(SCHEMES)}], got {scheme}")
        if mode not in (None, "strict"):
            raise ValueError(f"mode must be None or 'strict', got {mode!r}")
        if zero_division not in ("warn", 0, 1):
            raise ValueError(f"zero_division must be 'warn', 0 or 1, got {zero_division!r}")
        for i, (pred, ref) in enumerate(zip(predictions, references)):
            if len(pred) != len(ref):
                raise ValueError(f"sentence {i}: {len(pred)} predicted tags but {len(ref)} reference tags")

        if mode == "strict":
            scheme = scheme or detect_scheme(references, suffix)
            true, pred = strict_entities(references, scheme, suffix), strict_entities(predictions, scheme, suffix)
        else:
            unusual = sorted(
                {tag for sentence in references + predictions for tag in sentence if not _looks_like_a_tag(tag, suffix)}
            )
            if unusual:
                warnings.warn(f"seqeval: {unusual} do not look like IOB-style tags", UserWarning, stacklevel=2)
            true, pred = lenient_entities(references, suffix), lenient_entities(predictions, suffix)

        undefined = 0.0 if zero_division in ("warn", 0) else 1.0
        ill_defined = []

        def scores(name, n_correct, n_pred, n_true):
            if zero_division == "warn" and (n_pred == 0 or n_true == 0):
                ill_defined.append(name)
            precision = n_correct / n_pred if n_pred else undefined
            recall = n_correct / n_true if n_true else undefined
            f1 = 2.0 * precision * recall / (precision + recall) if precision + recall else 0.0
            return precision, recall, f1

        results = {}
        for name in sorted({e[0] for e in true} | {e[0] for e in pred}):  # entities are (type, position...)
            true_of = {e for e in true if e[0] == name}
            pred_of = {e for e in pred if e[0] == name}
            precision, recall, f1 = scores(name, len(true_of & pred_of), len(pred_of), len(true_of))
            results[name] = {"precision": precision, "recall": recall, "f1": f1, "number": len(true_of)}
        precision, recall, f1 = scores("overall", len(true & pred), len(pred), len(true))
        if ill_defined:
            warnings.warn(
                f"seqeval: precision or recall of {ill_defined} has a zero denominator and is set to 0.0; "
                "pass zero_division=0 or 1 to choose the value without this warning",
                UserWarning,
                stacklevel=2,
            )
        n_tags = sum(len(ref) for ref in references)
        if n_tags == 0:
            raise ValueError("seqeval: the references hold no tags")
        correct = sum(
            p == r for pred_tags, ref_tags in zip(predictions, references) for p, r in zip(pred_tags, ref_tags)
        )
        results.update(
            overall_precision=precision, overall_recall=recall, overall_f1=f1, overall_accuracy=correct / n_tags
        )
        return results


def _looks_like_a_tag(tag: str, suffix: bool) -> bool:
    if tag in ("O", "B", "I", "E", "S"):
        return True
    return tag.endswith(("-B", "-I", "-E", "-S")) if suffix else tag.startswith(("B-", "I-", "E-", "S-"))
