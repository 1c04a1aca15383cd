"""Local evaluate metric modules against hand computations and sacrebleu / scikit-learn / seqeval called directly."""

from __future__ import annotations

import importlib
import math
import random
import warnings

import pytest
import sacrebleu

from hf_seq.toolkit.metrics import available_metrics, load_metric, metric_path, perplexity

PREDICTIONS = [
    "the cat sat on the mat",
    "a dog runs in the park today",
    "there is nothing here",
    "In the beginning God created the heaven and the earth.",
]
REFERENCES = [
    ["the cat sat on a mat", "a cat was sitting on the mat"],
    ["the dog runs in the park", "a dog is running in the park"],
    ["nothing is here", "there is nothing"],
    ["In the beginning God created the heaven and the earth.", "At first God made heaven and earth."],
]


@pytest.fixture(scope="module")
def accuracy():
    return load_metric("accuracy")


def test_metric_files_are_listed_and_resolved():
    assert {"accuracy", "f1", "sacrebleu", "chrf", "seqeval"} <= set(available_metrics())
    assert metric_path("bleu") == metric_path("sacrebleu")
    with pytest.raises(ValueError, match="unknown metric"):
        metric_path("rouge")


def test_accuracy_hand_example(accuracy):
    assert accuracy.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0]) == {"accuracy": 0.75}
    assert accuracy.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0], normalize=False) == {"accuracy": 3.0}
    weighted = accuracy.compute(predictions=[1, 0], references=[1, 1], sample_weight=[3, 1])
    assert weighted["accuracy"] == pytest.approx(0.75)


def test_accuracy_token_classification_flattened(accuracy):
    # two sentences, -100 marks padding / continuation sub-tokens that must not count
    predictions = [[1, 2, 2, 0], [3, 3, 0, 0]]
    labels = [[1, 2, 1, -100], [3, 1, -100, -100]]
    flat = [(p, y) for ps, ys in zip(predictions, labels) for p, y in zip(ps, ys) if y != -100]
    result = accuracy.compute(predictions=[p for p, _ in flat], references=[y for _, y in flat])
    assert result["accuracy"] == pytest.approx(3 / 5)
    same = accuracy.compute(
        predictions=[p for ps in predictions for p in ps],
        references=[y for ys in labels for y in ys],
        ignore_index=-100,
    )
    assert same["accuracy"] == pytest.approx(3 / 5)


def test_accuracy_batches_with_add_batch(accuracy):
    accuracy.add_batch(predictions=[1, 1], references=[1, 0])
    accuracy.add_batch(predictions=[0], references=[0])
    assert accuracy.compute()["accuracy"] == pytest.approx(2 / 3)


def test_sacrebleu_matches_sacrebleu_directly():
    bleu = load_metric("sacrebleu")
    ours = bleu.compute(predictions=PREDICTIONS, references=REFERENCES)
    direct = sacrebleu.corpus_bleu(PREDICTIONS, [list(r) for r in zip(*REFERENCES)])
    assert ours["score"] == pytest.approx(direct.score, abs=1e-9)
    assert ours["bp"] == pytest.approx(direct.bp)
    assert 0 < ours["score"] < 100
    single = bleu.compute(predictions=PREDICTIONS, references=[r[0] for r in REFERENCES])
    assert single["score"] == pytest.approx(sacrebleu.corpus_bleu(PREDICTIONS, [[r[0] for r in REFERENCES]]).score)
    perfect = bleu.compute(predictions=["the cat sat on the mat"], references=[["the cat sat on the mat"]])
    assert perfect["score"] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="same number of references"):
        bleu.compute(predictions=["a", "b"], references=[["a"], ["b", "c"]])


def test_chrf_matches_sacrebleu_directly():
    chrf = load_metric("chrf")
    refs = [list(r) for r in zip(*REFERENCES)]
    assert chrf.compute(predictions=PREDICTIONS, references=REFERENCES)["score"] == pytest.approx(
        sacrebleu.corpus_chrf(PREDICTIONS, refs).score
    )
    chrf_pp = chrf.compute(predictions=PREDICTIONS, references=REFERENCES, word_order=2)["score"]
    assert chrf_pp == pytest.approx(sacrebleu.CHRF(word_order=2).corpus_score(PREDICTIONS, refs).score)


def test_f1_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    f1 = load_metric("f1")
    preds = [0, 1, 2, 2, 1, 0, 1, 2, 0, 0]
    refs = [0, 2, 2, 1, 1, 0, 1, 0, 0, 2]
    for average in ("macro", "micro", "weighted"):
        assert f1.compute(predictions=preds, references=refs, average=average)["f1"] == pytest.approx(
            metrics.f1_score(refs, preds, average=average)
        )
    binary = f1.compute(predictions=[1, 0, 1, 1], references=[1, 0, 0, 1])["f1"]
    assert binary == pytest.approx(metrics.f1_score([1, 0, 0, 1], [1, 0, 1, 1]))


def test_perplexity_is_exp_loss():
    assert perplexity(0.0) == 1.0
    assert perplexity(math.log(120.0)) == pytest.approx(120.0)
    assert perplexity(1e6) == float("inf")


def hub_seqeval(predictions, references, suffix=False, scheme=None, mode=None, zero_division="warn"):
    """What the Hub's ``evaluate.load("seqeval")`` returns, computed with the ``seqeval`` package as that module
    does (classification_report without the macro/weighted rows, plus token accuracy), as plain Python numbers."""
    from seqeval.metrics import accuracy_score, classification_report

    if scheme is not None:
        scheme = getattr(importlib.import_module("seqeval.scheme"), scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero-division and "not a NE tag" warnings
        report = classification_report(
            y_true=references,
            y_pred=predictions,
            suffix=suffix,
            output_dict=True,
            scheme=scheme,
            mode=mode,
            zero_division=zero_division,
        )
    report.pop("macro avg")
    report.pop("weighted avg")
    overall = report.pop("micro avg")
    scores = {
        name: {"precision": float(s["precision"]), "recall": float(s["recall"]), "f1": float(s["f1-score"])}
        | {"number": int(s["support"])}
        for name, s in report.items()
    }
    scores["overall_precision"] = float(overall["precision"])
    scores["overall_recall"] = float(overall["recall"])
    scores["overall_f1"] = float(overall["f1-score"])
    scores["overall_accuracy"] = float(accuracy_score(y_true=references, y_pred=predictions))
    return scores


def random_tags(rng: random.Random, prefixes: str, length: int, suffix: bool) -> list[str]:
    tags = []
    for _ in range(length):
        prefix = rng.choice(prefixes)
        kind = rng.choice(["PER", "LOC", "MISC"])
        tags.append("O" if prefix == "O" else f"{kind}-{prefix}" if suffix else f"{prefix}-{kind}")
    return tags


@pytest.mark.parametrize(
    "scheme,prefixes",
    [("IOB1", "IOB"), ("IOB2", "IOB"), ("IOE1", "IOE"), ("IOE2", "IOE"), ("IOBES", "IOBES"), ("BILOU", "BILOU")],
)
def test_seqeval_equals_the_seqeval_package_on_random_tag_sequences(scheme, prefixes):
    seqeval = load_metric("seqeval")
    rng = random.Random(scheme)
    for _ in range(25):
        suffix = rng.random() < 0.3
        lengths = [rng.randint(0, 9) for _ in range(rng.randint(1, 4))]
        lengths[0] = max(lengths[0], 1)
        references = [random_tags(rng, prefixes, n, suffix) for n in lengths]
        predictions = [random_tags(rng, prefixes, n, suffix) for n in lengths]
        # lenient (conlleval) mode ignores the scheme; strict mode reads entities by it
        for mode, scheme_arg, zero_division in [(None, None, 0), (None, scheme, 1), ("strict", scheme, "warn")]:
            expected = hub_seqeval(predictions, references, suffix, scheme_arg, mode, zero_division)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = seqeval.compute(
                    predictions=predictions,
                    references=references,
                    suffix=suffix,
                    scheme=scheme_arg,
                    mode=mode,
                    zero_division=zero_division,
                )
            assert got == expected and list(got) == list(expected), (mode, scheme_arg, references, predictions)


def test_seqeval_hand_example_detection_and_errors():
    seqeval = load_metric("seqeval")
    predictions = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    references = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    result = seqeval.compute(predictions=predictions, references=references)
    assert list(result) == ["MISC", "PER", "overall_precision", "overall_recall", "overall_f1", "overall_accuracy"]
    assert result["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "number": 1}
    assert result["MISC"]["f1"] == 0.0 and result["overall_f1"] == 0.5 and result["overall_accuracy"] == 0.8
    # strict mode without a scheme detects it from the references: an I- run without B- is no IOB2 entity
    predictions_io = [["I-PER", "I-PER", "O", "B-LOC"]]
    assert seqeval.compute(predictions=predictions_io, references=[["B-PER", "I-PER", "O", "B-LOC"]])["overall_f1"] == 1
    strict = seqeval.compute(
        predictions=predictions_io, references=[["B-PER", "I-PER", "O", "B-LOC"]], mode="strict", zero_division=0
    )
    assert strict == hub_seqeval(predictions_io, [["B-PER", "I-PER", "O", "B-LOC"]], mode="strict", zero_division=0)
    assert strict["PER"]["precision"] == 0.0 and strict["LOC"]["f1"] == 1.0
    with pytest.raises(ValueError, match="Scheme should be one of"):
        seqeval.compute(predictions=predictions, references=references, scheme="IO")
    with pytest.raises(ValueError, match="sentence 1: 2 predicted tags but 3 reference tags"):
        seqeval.compute(predictions=[["O"], ["B-PER", "O"]], references=[["O"], ["B-PER", "I-PER", "O"]])
    with pytest.raises(ValueError, match="not allowed in scheme IOB2"):
        seqeval.compute(predictions=[["S-PER"]], references=[["B-PER"]], mode="strict", scheme="IOB2")
    with pytest.raises(ValueError, match="cannot detect the tagging scheme"):
        seqeval.compute(predictions=[["O"]], references=[["O"]], mode="strict")
