"""train_scripts/pretrain_bert.py and finetune_bert.py end to end on tiny settings (a couple of steps on the real
corpora): results.json, the saved folder, and the model card (architecture, data, metrics, command)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hf_seq.train_scripts import finetune_bert, pretrain_bert
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import hf_seq  # noqa: F401  (registers the hf_seq classes with the Auto classes)

REPO = Path(__file__).resolve().parent.parent

TINY = ["--config_overrides", "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("bert") / "pretrain"
    results = pretrain_bert.main(
        [
            str(REPO / "configs" / "bert_pretrain_brown.json"),
            *TINY,
            "--tokenizer_vocab_size",
            "400",
            "--max_seq_length",
            "32",
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "4",
            "--warmup_steps",
            "0",
            "--eval_strategy",
            "no",
            "--max_eval_samples",
            "8",
            "--per_device_eval_batch_size",
            "256",
            "--logging_steps",
            "1",
            "--disable_tqdm",
            "true",
        ]
    )
    return out, results


@pytest.mark.data
def test_pretrain_bert_writes_results_model_and_card(pretrained):
    out, results = pretrained
    saved = json.loads((out / "results.json").read_text())
    assert saved["train"]["train_loss"] > 0
    assert 0.0 <= saved["test"]["test_mlm_accuracy"] <= 1.0 and 0.0 <= saved["test"]["test_nsp_accuracy"] <= 1.0
    assert saved["pairs"]["validation"] == 8
    assert saved["command"].startswith("python ") and "pretrain_bert.py" in saved["command"]
    assert "--max_steps 2" in saved["command"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["hidden_size"] == 16
    assert (out / "tokenizer.json").is_file() and not (out.parent / f".{out.name}.saving").exists()
    card = (out / "README.md").read_text()
    assert "BertForPreTraining" in card
    assert "Brown" in card and "load_brown_documents" in card
    assert saved["command"] in card
    assert str(round(results["test"]["test_mlm_accuracy"], 4)) in card


@pytest.mark.data
def test_pretrain_bert_continues_at_a_longer_length_by_growing_the_position_table(pretrained, tmp_path):
    pretrain_dir, _ = pretrained
    out = tmp_path / "longer"
    results = pretrain_bert.main(
        [
            str(REPO / "configs" / "bert_pretrain_brown.json"),
            "--model_name_or_path",
            str(pretrain_dir),
            "--max_seq_length",
            "48",
            "--output_dir",
            str(out),
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "4",
            "--warmup_steps",
            "0",
            "--eval_strategy",
            "no",
            "--max_eval_samples",
            "8",
            "--per_device_eval_batch_size",
            "256",
            "--disable_tqdm",
            "true",
        ]
    )
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 48 and config["hidden_size"] == 16
    assert 0.0 <= results["test"]["test_nsp_accuracy"] <= 1.0


@pytest.mark.data
def test_pretrain_bert_eval_only_evaluates_the_folder_with_several_pairs_per_anchor(pretrained, tmp_path):
    pretrain_dir, first = pretrained
    out = tmp_path / "eval"
    args = [
        str(REPO / "configs" / "bert_pretrain_brown.json"),
        "--model_name_or_path",
        str(pretrain_dir),
        "--max_seq_length",
        "32",
        "--output_dir",
        str(out),
        "--per_device_eval_batch_size",
        "256",
        "--disable_tqdm",
        "true",
    ]
    once = pretrain_bert.main([*args, "--eval_only", "true"])
    twice = pretrain_bert.main([*args, "--eval_only", "true", "--eval_pairs_per_anchor", "2"])
    assert once["train"] == {} and not (out / "model.safetensors").exists()
    assert json.loads((out / "results.json").read_text())["pairs"]["test"] == twice["pairs"]["test"]
    assert twice["pairs"]["test"] == 2 * once["pairs"]["test"] == 2 * first["pairs"]["test"]
    assert once["test"]["test_nsp_accuracy"] == pytest.approx(first["test"]["test_nsp_accuracy"])  # same pairs
    with pytest.raises(ValueError, match="eval_only"):
        pretrain_bert.main(
            [str(REPO / "configs" / "bert_pretrain_brown.json"), "--eval_only", "true", "--output_dir", str(out)]
        )


@pytest.mark.data
def test_finetune_bert_from_the_pretrained_folder_writes_results_and_card(pretrained, tmp_path):
    pretrain_dir, _ = pretrained
    out = tmp_path / "sentiment"
    results = finetune_bert.main(
        [
            str(REPO / "configs" / "bert_finetune_sentiment.json"),
            "--model_name_or_path",
            str(pretrain_dir),
            "--output_dir",
            str(out),
            "--max_train_samples",
            "16",
            "--max_eval_samples",
            "8",
            "--max_predict_samples",
            "8",
            "--max_seq_length",
            "32",
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "8",
            "--eval_strategy",
            "no",
            "--save_strategy",
            "no",
            "--load_best_model_at_end",
            "false",
            "--warmup_steps",
            "0",
            "--disable_tqdm",
            "true",
        ]
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["splits"] == {"train": 16, "validation": 8, "test": 8}
    assert saved["test_accuracy"] == results["test_accuracy"] and 0.0 <= saved["test_accuracy"] <= 1.0
    assert saved["command"].startswith("python ") and "finetune_bert.py" in saved["command"]
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.id2label == {0: "negative", 1: "positive"} and model.config.vocab_size == len(tokenizer)
    card = (out / "README.md").read_text()
    assert "BertForSequenceClassification" in card
    assert "Rotten Tomatoes" in card and "load_sentiment" in card and "16 / 8 / 8" in card
    assert f"Fine-tuned from `{pretrain_dir}`" in card
    assert saved["command"] in card
    assert str(round(saved["test_accuracy"], 4)) in card


def test_context_probe_splits_accuracy_by_corruption_kind(pretrained):
    """scripts/bert_context_probe.py on the tiny pretrained folder, and ``probe`` against a model that copies its
    input: it must score 1.0 on unchanged tokens, 0.0 on [MASK] and random replacements, in either context."""
    import torch

    sys.path.insert(0, str(REPO / "scripts"))
    import bert_context_probe

    folder, _ = pretrained
    results = bert_context_probe.main([str(folder), "--pairs", "16"])
    shares = results["share of selected tokens"]
    assert shares["all"] == 1.0 and shares["mask"] > shares["kept"]
    assert abs(shares["mask"] + shares["kept"] + shares["random"] - 1.0) < 1e-3

    batch, tokenizer = bert_context_probe.test_batch(str(folder), 16, 32, 42)

    class CopyInput(torch.nn.Module):
        def forward(self, input_ids, attention_mask, token_type_ids):
            logits = torch.nn.functional.one_hot(input_ids, len(tokenizer)).float()  # (B, T, V)
            return type("Out", (), {"prediction_logits": logits})()

    copied = bert_context_probe.probe(CopyInput(), batch, tokenizer)
    for context in ("real context", "random context"):
        assert copied[context]["kept"] == 1.0
        assert copied[context]["mask"] == 0.0 and copied[context]["random"] == 0.0
