"""train_scripts/train_translation.py: recipe parsing (no data) and a tiny end-to-end run on the real corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hf_seq.train_scripts import train_translation
from hf_seq.train_scripts.arguments import DataArguments, ModelArguments, RecipeError, build_config, parse_args
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

REPO = Path(__file__).resolve().parent.parent


def load_script():
    return train_translation


@pytest.mark.parametrize("attention", ["none", "dot", "scaled_dot", "general", "additive", "cosine"])
def test_recipes_parse_and_command_line_overrides(attention, tmp_path):
    script = load_script()
    recipe = REPO / "configs" / f"translation_rnn_{attention}.json"
    model_args, data_args, args, training_args = parse_args(
        script.TASK,
        [str(recipe), "--output_dir", str(tmp_path), "--max_train_minutes", "0.5", "--learning_rate", "0.01"],
    )
    assert model_args.model_config["attention"] == attention and data_args.dataset_name == "hf_seq/translation"
    assert args.max_train_minutes == 0.5 and training_args.learning_rate == 0.01
    assert training_args.output_dir == str(tmp_path) and training_args.predict_with_generate


def test_recipe_with_unknown_key_is_rejected(tmp_path):
    script = load_script()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "hf_seq_rnn_seq2seq", "no_such_option": 1}))
    with pytest.raises(RecipeError, match="no_such_option"):
        parse_args(script.TASK, [str(bad)])


def test_build_config_uses_tokenizer_ids_and_overrides():
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    script = load_script()
    tok = build_translation_tokenizer([{"en": "let there be light", "es": "sea la luz"}], kind="word")
    args = ModelArguments(
        model_type="hf_seq_rnn_seq2seq",
        model_config={"attention": "general", "hidden_size": 16, "embedding_size": 8},
        config_overrides="attention=dot,hidden_size=12",
    )
    ids = {
        "vocab_size": len(tok),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "decoder_start_token_id": tok.bos_token_id,
    }
    config = build_config(script.TASK, args, DataArguments(), **ids)
    assert config.model_type == "hf_seq_rnn_seq2seq" and config.attention == "dot" and config.hidden_size == 12
    assert config.vocab_size == len(tok) and config.decoder_start_token_id == tok.bos_token_id
    assert config.eos_token_id == tok.eos_token_id and config.pad_token_id == tok.pad_token_id
    with pytest.raises(ValueError, match="attention"):
        build_config(
            script.TASK,
            ModelArguments(model_type="hf_seq_rnn_seq2seq", config_overrides="attention=luong"),
            DataArguments(),
            **ids,
        )


@pytest.mark.data
def test_tiny_end_to_end_run(tmp_path):
    script = load_script()
    out = tmp_path / "run"
    results = script.main(
        [
            str(REPO / "configs" / "translation_rnn_additive.json"),
            "--output_dir",
            str(out),
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "8",
            "--max_predict_samples",
            "6",
            "--max_steps",
            "3",
            "--eval_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--tokenizer_vocab_size",
            "400",
            "--config_overrides",
            "hidden_size=16,embedding_size=16,max_target_length=12",
            "--max_source_length",
            "24",
            "--max_target_length",
            "12",
            "--test_num_beams",
            "1,2",
            "--logging_steps",
            "1",
        ]
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["train"]["global_steps"] == 3 and saved["data"]["test_pairs"] == 6
    for key in ("test_greedy", "test_beam2"):
        assert 0.0 <= saved[key]["test_bleu"] <= 100.0 and 0.0 <= saved[key]["test_chrf"] <= 100.0
    assert saved["validation_history"] and "eval_bleu" in saved["validation_history"][0]
    assert results["attention_plot"]["path"] and (out / "attention_heatmap.png").read_bytes()[:4] == b"\x89PNG"
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tok) and model.config.attention == "additive"
    recipe = json.loads((REPO / "configs" / "translation_rnn_additive.json").read_text())
    assert model.generation_config.max_length == recipe["generation_max_length"]  # decodes as evaluated
    # results.json and the model card record the same command; the card names the architecture, data and figures
    assert saved["command"].startswith("python ") and "train_translation.py" in saved["command"]
    assert "--max_steps 3" in saved["command"]
    card = (out / "README.md").read_text()
    assert "RNNSeq2Seq" in card and "additive" in card
    assert "load_translation" in card and "64 training / 8 validation / 6 test pairs" in card
    assert saved["command"] in card
    assert "test_bleu_greedy" in card and "test_chrf_beam2" in card
    assert not (out.parent / f".{out.name}.saving").exists()


@pytest.mark.data
def test_time_budget_stops_training(tmp_path):
    script = load_script()
    results = script.main(
        [
            str(REPO / "configs" / "translation_rnn_none.json"),
            "--output_dir",
            str(tmp_path),
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "4",
            "--max_train_minutes",
            "0.0001",
            "--per_device_train_batch_size",
            "8",
            "--tokenizer_vocab_size",
            "400",
            "--config_overrides",
            "hidden_size=8,embedding_size=8",
            "--do_predict",
            "false",
            "--plot_attention",
            "false",
            "--max_target_length",
            "8",
            "--generation_max_length",
            "10",
        ]
    )
    assert results["train"]["stopped_by_time_budget"] and results["train"]["global_steps"] == 1
