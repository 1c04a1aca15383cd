"""Local evaluate metric modules against hand computations and sacrebleu / scikit-learn called directly."""

from __future__ import annotations

import math

import pytest
import sacrebleu

from hf_seq.metrics import available_metrics, load_metric, metric_path, perplexity

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
    assert {"accuracy", "f1", "sacrebleu", "chrf"} <= set(available_metrics())
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
