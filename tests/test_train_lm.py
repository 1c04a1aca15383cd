"""train_scripts/train_lm.py and the LM windows: segment/stride cut, token streams, a tiny end-to-end run on own
text files (results, samples, saved folder usable through Auto classes and pipeline), the time budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hf_seq.train_scripts import train_lm
from hf_seq.train_scripts.arguments import ModelArguments, parse_args
from transformers import AutoModelForCausalLM, pipeline

from hf_seq.collators import LMWindowDataset

REPO_ROOT = Path(__file__).resolve().parent.parent

TEXT = (
    "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
    "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date;\n"
) * 6


def test_windows_follow_segment_and_stride():
    stream = torch.arange(20)
    windows = LMWindowDataset(stream, segment_length=6, stride=3)  # the notes: segments every `stride` tokens
    assert len(windows) == 5  # starts 0, 3, 6, 9, 12 (12 + 6 + 1 = 19 <= 20)
    assert windows[1]["input_ids"].tolist() == list(range(3, 10))  # segment + the next token
    assert windows[-1]["input_ids"].tolist() == list(range(12, 19))
    assert windows[0]["labels"] is windows[0]["input_ids"] or torch.equal(windows[0]["labels"], windows[0]["input_ids"])
    exact = LMWindowDataset(stream, segment_length=4)  # stride = segment: every transition exactly once
    transitions = {(int(w["input_ids"][i]), int(w["input_ids"][i + 1])) for w in exact for i in range(4)}
    assert len(exact) * 4 == len(transitions)
    with pytest.raises(ValueError, match="stride"):
        LMWindowDataset(stream, 4, 0)
    with pytest.raises(ValueError, match="segment_length"):
        LMWindowDataset(stream, 20)
    with pytest.raises(IndexError):
        windows[5]


def test_token_streams_char_and_word():
    char_args = train_lm.LMArguments(level="char")
    tokenizer = train_lm.build_tokenizer(char_args, [TEXT])
    stream = train_lm.token_stream([TEXT[:50], "Zebra"], tokenizer, "char")
    expected = tokenizer(TEXT[:50] + "Zebra", add_special_tokens=False)["input_ids"]
    assert stream.tolist() == expected  # fast path == the tokenizer itself ('Z' is unknown: [UNK])
    assert tokenizer.decode(stream[:50]) == TEXT[:50]
    word_args = train_lm.LMArguments(level="word")
    words = train_lm.build_tokenizer(word_args, ["a b c a <unk> a b", "d e f"], ModelArguments(tokenizer_vocab_size=10))
    stream = train_lm.token_stream(["a <unk> zzz", "b"], words, "word")
    eos, unk = words.eos_token_id, words.unk_token_id
    assert stream.tolist() == [words.convert_tokens_to_ids("a"), unk, unk, eos, words.convert_tokens_to_ids("b"), eos]
    with pytest.raises(ValueError, match="level"):
        train_lm.LMArguments(level="byte")


def write_corpus(tmp_path: Path) -> list[str]:
    paths = []
    for name, text in (("train", TEXT), ("valid", TEXT[:300]), ("test", TEXT[300:600])):
        path = tmp_path / f"{name}.txt"
        path.write_text(text)
        paths.append(str(path))
    return paths


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    train, valid, test = write_corpus(tmp_path)
    return [
        "--level",
        "char",
        "--train_file",
        train,
        "--validation_file",
        valid,
        "--test_file",
        test,
        "--output_dir",
        str(tmp_path / "run"),
        "--segment_length",
        "24",
        "--stride",
        "12",
        "--per_device_train_batch_size",
        "8",
        "--learning_rate",
        "0.01",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--use_cpu",
        "true",
        "--sample_length",
        "20",
        "--sample_prompt",
        "Thou ",
        "--eval_streams",
        "2",
        *extra,
    ]


def test_end_to_end_tiny_run(tmp_path):
    results = train_lm.main(
        run_args(
            tmp_path,
            "--max_steps",
            "30",
            "--model_config",
            '{"cell": "lstm", "hidden_size": 16, "embedding_size": 8}',
            "--eval_windows",
            "true",  # the default recipe (lm_char_shakespeare) reports the carried protocol only
        )
    )
    out = tmp_path / "run"
    saved = json.loads((out / "results.json").read_text())
    assert saved["train_steps"] == 30
    for split in ("validation", "test"):
        for protocol in ("carried", "windows"):
            assert saved[f"{split}_{protocol}_loss_nats"] > 0
            assert saved[f"{split}_{protocol}_bits_per_char"] == pytest.approx(
                saved[f"{split}_{protocol}_loss_nats"] / 0.6931472, abs=2e-3
            )
    assert saved["train_loss"] < 4.0  # it learned something from ln(vocab) ~ 3.4+ at the start
    samples = (out / "samples.txt").read_text()
    assert all(f"temperature {t}" in samples for t in (0.2, 0.5, 1.0, 1.2))
    assert set(results["samples"]) == {"0.2", "0.5", "1.0", "1.2"}
    assert all(text.startswith("Thou ") for text in results["samples"].values())
    model = AutoModelForCausalLM.from_pretrained(out)
    generator = pipeline("text-generation", model=str(out))
    text = generator("Shall", max_new_tokens=8, do_sample=False)[0]["generated_text"]
    assert text.startswith("Shall") and len(text) > len("Shall")
    assert model.config.cell == "lstm"
    # results and model card record the same command; the card names the architecture, the data and the figures
    assert saved["command"].startswith("python ") and "train_lm.py" in saved["command"]
    assert "--max_steps 30" in saved["command"]
    card = (out / "README.md").read_text()
    assert "RNNForCausalLM" in card and "lstm" in card
    assert str(tmp_path / "train.txt") in card and "char tokens" in card
    assert saved["command"] in card
    assert f"{saved['test_carried_bits_per_char']}" in card
    assert not (out.parent / f".{out.name}.saving").exists()


def test_cpu_time_budget_stops_training_and_one_hot_recipe(tmp_path):
    results = train_lm.main(
        run_args(
            tmp_path,
            "--max_steps",
            "100000",
            "--max_train_cpu_minutes",
            "0.0001",
            "--model_config",
            '{"input_encoding": "one_hot", "hidden_size": 16}',
            "--eval_windows",
            "false",
        )
    )
    assert results["train_steps"] < 5  # stopped by the CPU-time budget, not by max_steps
    assert "validation_windows_loss_nats" not in results
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "run")
    assert model.config.input_encoding == "one_hot" and model.config.embedding_size == model.config.vocab_size


@pytest.mark.data
def test_ptb_vocabulary_keeps_unk():
    from hf_seq.data import load_ptb

    lines = list(load_ptb()["train"]["text"])
    tokenizer = train_lm.build_tokenizer(train_lm.LMArguments(level="word"), lines)
    assert len(tokenizer) == 10001  # Mikolov's 10k vocabulary (9,999 words with <unk>, + <eos>) + <pad>
    stream = train_lm.token_stream(lines[:200], tokenizer, "word")
    assert int((stream == tokenizer.unk_token_id).sum()) == sum(line.split().count("<unk>") for line in lines[:200])


@pytest.mark.parametrize("recipe", sorted((REPO_ROOT / "configs").glob("lm_*.json")), ids=lambda p: p.stem)
def test_recipes_parse_and_build_their_model(recipe):
    from hf_seq.train_scripts.arguments import build_config

    model_args, data, args, training = parse_args(train_lm.TASK, [str(recipe)])
    assert data.dataset_name in ("hf_seq/shakespeare", "hf_seq/ptb") and args.level in train_lm.LEVELS
    assert args.sample_temperatures == [0.2, 0.5, 1.0, 1.2]
    assert training.output_dir.startswith("runs/")
    config = build_config(train_lm.TASK, model_args, data, vocab_size=50, pad_token_id=0)  # a valid model config
    if config.input_encoding == "one_hot":
        assert config.embedding_size == config.vocab_size == 50


def test_trainer_label_smoothing_trains_on_the_next_token(tmp_path):
    """Trainer(label_smoothing_factor=0.1).compute_loss shifts the labels for RNNForCausalLM (as for GPT-2): the
    smoothed loss equals the hand-computed smoothed NEXT-token loss, not the unshifted (copy-the-input) one."""
    import torch.nn.functional as F
    from transformers import Trainer, TrainingArguments
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from hf_seq import HfSeqRNNConfig
    from hf_seq.modeling_rnn import RNNForCausalLM

    assert MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[HfSeqRNNConfig.model_type] == RNNForCausalLM.__name__
    torch.manual_seed(0)
    model = RNNForCausalLM(HfSeqRNNConfig(vocab_size=11, embedding_size=6, hidden_size=8, initializer_range=0.5))
    args = TrainingArguments(output_dir=str(tmp_path), label_smoothing_factor=0.1, use_cpu=True, report_to=[])
    trainer = Trainer(model=model, args=args)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 0, 0]])
    mask = (ids != 0).long()
    labels = torch.where(mask.bool(), ids, -100)
    loss = trainer.compute_loss(model, {"input_ids": ids, "attention_mask": mask, "labels": labels})
    logits = model(input_ids=ids, attention_mask=mask).logits  # (B, T, V)

    def smoothed(logits, targets):
        return F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=-100, label_smoothing=0.1)

    next_token = smoothed(logits[:, :-1], labels[:, 1:])
    torch.testing.assert_close(loss, next_token, rtol=1e-5, atol=1e-6)
    assert (loss - smoothed(logits, labels)).abs() > 1e-2  # the unshifted loss is a different number
