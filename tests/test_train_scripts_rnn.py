"""Tiny end-to-end runs of train_scripts/train_classifier.py and train_tagger.py on the real corpora (a few steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_seq.train_scripts import train_classifier, train_tagger
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, pipeline

import hf_seq  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.data

TINY = [
    "--max_train_samples",
    "64",
    "--max_eval_samples",
    "32",
    "--max_predict_samples",
    "32",
    "--max_steps",
    "2",
    "--logging_steps",
    "1",
    "--save_strategy",
    "no",
    "--eval_strategy",
    "no",
    "--load_best_model_at_end",
    "false",
]


def test_train_classifier_end_to_end(tmp_path):
    out = tmp_path / "clf"
    results = train_classifier.main(
        [
            str(ROOT / "configs/sentiment_bilstm.json"),
            "--output_dir",
            str(out),
            "--config_overrides",
            "hidden_size=8",
            *TINY,
        ]
    )
    saved = json.loads((out / "results.json").read_text())
    assert 0.0 <= saved["test_accuracy"] <= 1.0 and saved["test_accuracy"] == results["test_accuracy"]
    assert saved["splits"]["train"] == 64 and saved["parameters"]["total"] > 0
    config = json.loads((out / "config.json").read_text())
    assert config["hidden_size"] == 8 and config["bidirectional"] is True  # CLI overrides the recipe
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.id2label == {0: "negative", 1: "positive"}
    preds = pipeline("text-classification", model=str(out))(["a wonderful, moving film", "dull and far too long"])
    assert {p["label"] for p in preds} <= {"negative", "positive"}


def test_train_classifier_notes_logistic_regression(tmp_path):
    """The notes' 20x8 -> sigmoid recipe: 161 head parameters, inputs padded to exactly 20 tokens."""
    out = tmp_path / "logreg"
    results = train_classifier.main(
        [str(ROOT / "configs/sentiment_logreg_sigmoid.json"), "--output_dir", str(out), *TINY]
    )
    assert results["parameters"]["per_module"]["classifier"] == 161
    clf = pipeline("text-classification", model=str(out))
    pred = clf("a wonderful film", padding="max_length", truncation=True, max_length=20)
    assert pred[0]["label"] == "positive" and 0.0 <= pred[0]["score"] <= 1.0


def test_train_tagger_end_to_end(tmp_path):
    out = tmp_path / "tagger"
    results = train_tagger.main(
        [
            str(ROOT / "configs/pos_bilstm.json"),
            "--output_dir",
            str(out),
            "--config_overrides",
            "hidden_size=8,embedding_size=8,num_hidden_layers=1",
            *TINY,
        ]
    )
    assert 0.0 <= results["test_accuracy"] <= 1.0 and results["test_tokens"] > 0
    assert 0.0 < results["test_oov_rate"] < 1.0  # 64 training sentences: many test words are unknown
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.num_labels == 12 and "NOUN" in model.config.label2id
    tags = pipeline("token-classification", model=str(out))("The jury said it did not like the plan .")
    assert len(tags) == 10 and {t["entity"] for t in tags} <= set(model.config.label2id)
