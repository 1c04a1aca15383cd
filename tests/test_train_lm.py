"""train_scripts/train_lm.py and the LM windows: segment/stride cut, token streams, a tiny end-to-end run on own
text files (results, samples, saved folder usable through Auto classes and pipeline), the time budget."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from hf_seq.train_scripts import train_lm
from hf_seq.train_scripts.arguments import ModelArguments, parse_args
from launchers import launch_failure
from transformers import AutoModelForCausalLM, pipeline

from hf_seq.toolkit.collators import LMWindowDataset

REPO_ROOT = Path(__file__).resolve().parent.parent

TEXT = (
    "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
    "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date;\n"
) * 6


def token_stream(texts: list[str], tokenizer, level: str) -> torch.Tensor:
    """The in-memory tokenization the cached token stores must equal: one long (N,) stream, the characters of the
    texts in order, or their words with ``<eos>`` closing every text.

    Characters are looked up in the char tokenizer's vocabulary directly (the same ids as ``tokenizer(text)`` for a
    tokenizer without normaliser, and ~50x faster on megabytes of text).
    """
    if level == "char" and tokenizer.backend_tokenizer.normalizer is None:
        vocab, unk = tokenizer.get_vocab(), tokenizer.unk_token_id
        return torch.tensor([vocab.get(ch, unk) for text in texts for ch in text], dtype=torch.long)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    if level == "word":
        eos = tokenizer.eos_token_id
        encoded = [ids + [eos] for ids in encoded]
    return torch.tensor([i for ids in encoded for i in ids], dtype=torch.long)


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
    stream = token_stream([TEXT[:50], "Zebra"], tokenizer, "char")
    expected = tokenizer(TEXT[:50] + "Zebra", add_special_tokens=False)["input_ids"]
    assert stream.tolist() == expected  # fast path == the tokenizer itself ('Z' is unknown: [UNK])
    assert tokenizer.decode(stream[:50]) == TEXT[:50]
    word_args = train_lm.LMArguments(level="word")
    words = train_lm.build_tokenizer(word_args, ["a b c a <unk> a b", "d e f"], ModelArguments(tokenizer_vocab_size=10))
    stream = token_stream(["a <unk> zzz", "b"], words, "word")
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
    from hf_seq.toolkit.data import load_ptb

    lines = list(load_ptb()["train"]["text"])
    tokenizer = train_lm.build_tokenizer(train_lm.LMArguments(level="word"), lines)
    assert len(tokenizer) == 10001  # Mikolov's 10k vocabulary (9,999 words with <unk>, + <eos>) + <pad>
    stream = token_stream(lines[:200], tokenizer, "word")
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


# ---------------------------------------------------------------------------------------------------------------
# the preprocessing cache (hf_seq.toolkit.preprocessing): the same tokens and losses as the in-memory path, reuse, rebuilds
# ---------------------------------------------------------------------------------------------------------------


def in_memory_lm_data(args, model_args, data_args, training_args=None):
    """The in-memory path the cache replaced: every split in Python lists, one int64 tensor per split."""
    from types import SimpleNamespace

    from hf_seq.train_scripts.common import cap_splits, describe_data, load_task_data

    raw = cap_splits(load_task_data(train_lm.TASK, data_args), data_args)
    texts = {name: list(split[data_args.text_column_name]) for name, split in raw.items()}
    tokenizer = train_lm.build_tokenizer(args, texts["train"], model_args)
    streams = {name: token_stream(split, tokenizer, args.level) for name, split in texts.items()}
    return SimpleNamespace(tokenizer=tokenizer, streams=streams, data_line=describe_data(data_args, raw, unit="texts"))


WORD_TEXT = "".join(
    " ".join(("the", "cat", "sat", "on", "a", "mat", "<unk>", "dog", "ran")[(i * 7 + j * 3) % 9] for j in range(i % 11))
    + "\n"
    for i in range(400)
)


def word_args(tmp_path: Path, *extra: str) -> list[str]:
    path = tmp_path / "words.txt"
    if not path.exists():
        path.write_text(WORD_TEXT)
    return [
        "--level",
        "word",
        "--train_file",
        str(path),  # validation: 5% of the lines held out
        "--output_dir",
        str(tmp_path / "run"),
        "--segment_length",
        "16",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "6",
        "--logging_steps",
        "1",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--use_cpu",
        "true",
        "--sample_length",
        "3",
        "--sample_temperatures",
        "1.0",
        "--sample_prompt",
        "the",
        "--eval_streams",
        "2",
        "--model_config",
        '{"cell": "lstm", "hidden_size": 8, "embedding_size": 8}',
        "--overwrite_output_dir",
        "true",
        *extra,
    ]


def step_losses(output_dir: Path) -> list[float]:
    state = json.loads((output_dir / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


@pytest.mark.parametrize("level", ["word", "char"])
def test_cached_tokens_equal_the_in_memory_path(tmp_path, level):
    argv = word_args(tmp_path, "--level", level, "--max_train_samples", "300", "--tokenizer_vocab_size", "8")
    model_args, data_args, args, training_args = parse_args(train_lm.TASK, argv)
    cached = train_lm.prepare_lm_data(args, model_args, data_args)
    reference = in_memory_lm_data(args, model_args, data_args)
    assert cached.tokenizer.get_vocab() == reference.tokenizer.get_vocab()
    assert set(cached.streams) == set(reference.streams) == {"train", "validation"}
    for name, stream in cached.streams.items():
        assert stream.dtype == np.uint16
        assert stream.tolist() == reference.streams[name].tolist(), name
    assert cached.data_line == reference.data_line
    # a data set (Arrow) instead of a txt file: the same tokens through datasets
    csv = tmp_path / "words.csv"
    datasets.Dataset.from_dict({"text": WORD_TEXT.splitlines(keepends=True)}).to_csv(csv)
    model_args, data_args, args, _ = parse_args(
        train_lm.TASK, word_args(tmp_path, "--level", level, "--train_file", str(csv))
    )
    cached, reference = (
        train_lm.prepare_lm_data(args, model_args, data_args),
        in_memory_lm_data(args, model_args, data_args),
    )
    for name, stream in cached.streams.items():
        assert stream.tolist() == reference.streams[name].tolist(), name


def test_cached_run_has_the_in_memory_losses_and_reuses_its_cache(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    first = train_lm.main(word_args(tmp_path, "--cache_dir", str(cache)))
    out = capsys.readouterr().out
    assert "cached word tokens" in out and "reusing" not in out
    cached_losses = step_losses(tmp_path / "run")
    assert len(cached_losses) == 6
    calls = []
    monkeypatch.setattr(train_lm, "tokenize_text_file", lambda *a, **k: calls.append(a))
    second = train_lm.main(word_args(tmp_path, "--cache_dir", str(cache)))
    assert "reusing the cached word tokens" in capsys.readouterr().out and not calls  # not tokenized again
    assert step_losses(tmp_path / "run") == cached_losses  # the same windows, the same batches
    assert second["validation_carried_loss_nats"] == first["validation_carried_loss_nats"]
    monkeypatch.undo()
    monkeypatch.setattr(train_lm, "prepare_lm_data", in_memory_lm_data)
    reference = train_lm.main(word_args(tmp_path, "--cache_dir", str(cache)))
    torch.testing.assert_close(step_losses(tmp_path / "run"), cached_losses, rtol=1e-6, atol=1e-7)
    assert reference["validation_carried_loss_nats"] == first["validation_carried_loss_nats"]


def test_changed_file_or_tokenizer_is_never_reused_and_truncation_rebuilds(tmp_path, capsys):
    cache = tmp_path / "cache"
    argv = word_args(tmp_path, "--cache_dir", str(cache))
    model_args, data_args, args, _ = parse_args(train_lm.TASK, argv)
    first = train_lm.prepare_lm_data(args, model_args, data_args)
    assert not first.reused and train_lm.prepare_lm_data(args, model_args, data_args).reused
    with open(data_args.train_file, "a") as f:  # the file changed: another key, a new build
        f.write("the new cat\n")
    changed = train_lm.prepare_lm_data(args, model_args, data_args)
    assert not changed.reused and changed.folder != first.folder
    assert len(changed.stores["train"]) + len(changed.stores["validation"]) == 401
    model_args.tokenizer_vocab_size = 6  # another tokenizer: another folder
    other = train_lm.prepare_lm_data(args, model_args, data_args)
    assert not other.reused and other.folder != changed.folder and len(other.tokenizer) == 6
    expected, folder = other.streams["train"].tolist(), other.folder
    del other  # (reading a memory map whose file is truncated under it is a bus error)
    tokens = folder / "train" / "tokens.bin"
    with open(tokens, "r+b") as f:
        f.truncate(tokens.stat().st_size // 2)
    capsys.readouterr()
    rebuilt = train_lm.prepare_lm_data(args, model_args, data_args)
    assert not rebuilt.reused and "incomplete or corrupt" in capsys.readouterr().out
    assert rebuilt.streams["train"].tolist() == expected
    args.overwrite_cache = True
    assert not train_lm.prepare_lm_data(args, model_args, data_args).reused


def test_bad_text_file_names_the_file(tmp_path):
    from hf_seq.toolkit.data import DataError

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine line\n\xff\xfe broken\n")
    model_args, data_args, args, _ = parse_args(train_lm.TASK, word_args(tmp_path, "--train_file", str(bad)))
    with pytest.raises(DataError, match=r"`train_file` .*bad\.txt could not be read as text"):
        train_lm.prepare_lm_data(args, model_args, data_args)


def test_windows_over_a_memory_map_equal_the_tensor_windows(tmp_path):
    tokens = np.lib.format.open_memmap(tmp_path / "t.npy", mode="w+", dtype=np.uint16, shape=(50,))
    tokens[:] = np.arange(50) * 7 % 31
    mapped, tensor = LMWindowDataset(tokens, 8, 5), LMWindowDataset(torch.tensor(tokens.tolist()), 8, 5)
    assert mapped.tokens is tokens and len(mapped) == len(tensor)
    for i in range(len(mapped)):
        assert mapped[i]["input_ids"].dtype == torch.long
        assert torch.equal(mapped[i]["input_ids"], tensor[i]["input_ids"])


# ---------------------------------------------------------------------------------------------------------------
# --streaming true: the windows of the cached stream, in order, pass after pass; exact mid-stream resume
# ---------------------------------------------------------------------------------------------------------------


def streaming_args(tmp_path: Path, *extra: str) -> list[str]:
    valid = tmp_path / "valid.txt"
    valid.write_text(WORD_TEXT[:2000])
    return word_args(tmp_path, "--validation_file", str(valid), "--max_steps", "8", *extra)


def test_streamed_windows_equal_the_cached_windows(tmp_path):
    model_args, data_args, args, training_args = parse_args(
        train_lm.TASK, streaming_args(tmp_path, "--streaming", "true", "--shuffle_buffer_size", "0", "--stride", "5")
    )
    data, streamed = train_lm.prepare_lm_stream(args, model_args, data_args, training_args)
    streamed.batch_rows = 7  # windows cross many batch boundaries
    args.streaming = False
    cached = train_lm.prepare_lm_data(args, model_args, data_args)
    assert cached.tokenizer.get_vocab() == data.tokenizer.get_vocab()
    windows = LMWindowDataset(cached.streams["train"], args.segment_length, 5)
    n = len(windows)
    expected = [windows[i]["input_ids"].tolist() for i in range(n)]

    def read(count: int) -> list[list[int]]:
        return [w["input_ids"].tolist() for w in itertools.islice(streamed, count)]

    # the file is read again from its start after its last whole window (the remainder dropped, as each cached
    # epoch): every pass has the cached windows
    assert read(2 * n + 3) == expected * 2 + expected[:3]
    assert data.streams["validation"].tolist() == cached.streams["validation"].tolist()
    streamed.shuffle_buffer_size = 10  # a seeded shuffle buffer: the same windows in another, repeatable order
    shuffled = read(2 * n)
    assert shuffled[:n] != expected and sorted(shuffled[:n]) == sorted(expected) == sorted(shuffled[n:])
    assert shuffled[n:] != shuffled[:n]  # each pass reshuffled
    assert shuffled == read(2 * n)
    streamed.repeat = False  # one pass: the first pass of the repeated stream ...
    assert [w["input_ids"].tolist() for w in streamed] == shuffled[:n]
    streamed.set_epoch(1)  # ... whose second pass is drawn with the seed of epoch 1
    assert [w["input_ids"].tolist() for w in streamed] == shuffled[n:]


def test_streaming_run_equals_the_cached_run_and_resumes_exactly(tmp_path):
    # 4 steps: the whole batches of the first pass (its last batch joins the next pass: the cached epoch's is short)
    first = ("--max_steps", "4")
    cached = train_lm.main(streaming_args(tmp_path, *first, "--train_sampling_strategy", "sequential"))
    cached_losses = step_losses(tmp_path / "run")
    streamed = train_lm.main(streaming_args(tmp_path, *first, "--streaming", "true", "--shuffle_buffer_size", "0"))
    assert len(cached_losses) == 4 and step_losses(tmp_path / "run") == cached_losses  # the same windows, in order
    assert streamed["validation_carried_loss_nats"] == cached["validation_carried_loss_nats"]
    # a shuffled stream of a short file, read 2.3 times in 12 steps; resumed from the checkpoint at step 8 (in the
    # second pass), the run has the uninterrupted run's steps 9-12 (into the third pass)
    small = tmp_path / "small"
    small.mkdir()
    (small / "words.txt").write_text("".join(WORD_TEXT.splitlines(keepends=True)[:60]))
    shuffled = ("--streaming", "true", "--shuffle_buffer_size", "16", "--max_steps", "12", "--stride", "16",
                "--save_strategy", "steps", "--save_steps", "8")  # fmt: skip
    model_args, data_args, args, training_args = parse_args(train_lm.TASK, streaming_args(small, *shuffled))
    _, one_pass = train_lm.prepare_lm_stream(args, model_args, data_args, training_args)
    one_pass.repeat = False
    per_pass = sum(1 for _ in one_pass)  # windows; 4 a step
    assert per_pass < 8 * 4 <= 2 * per_pass < 12 * 4
    train_lm.main(streaming_args(small, *shuffled))
    full = step_losses(small / "run")
    assert len(full) == 12
    resumed_dir = small / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(small / "run" / "checkpoint-8", resumed_dir / "checkpoint-8")
    argv = streaming_args(small, *shuffled, "--resume_from_checkpoint", "last")
    argv[argv.index("--output_dir") + 1] = str(resumed_dir)
    i = argv.index("--overwrite_output_dir")
    train_lm.main(argv[:i] + argv[i + 2 :])
    state = json.loads((resumed_dir / "trainer_state.json").read_text())
    resumed = [r["loss"] for r in state["log_history"] if "loss" in r and r["step"] > 8]
    assert len(resumed) == 4
    torch.testing.assert_close(resumed, full[8:], rtol=1e-6, atol=1e-7)


def test_a_stream_without_a_window_is_an_error(tmp_path):
    """Read until ``max_steps``, a stream that gives no window would loop for ever: a ``DataError`` naming the file."""
    from hf_seq.toolkit.data import DataError

    (tmp_path / "words.txt").write_text("the cat sat\n")  # 4 tokens: no window of 17
    argv = streaming_args(tmp_path, "--streaming", "true")
    model_args, data_args, args, training_args = parse_args(train_lm.TASK, argv)
    _, streamed = train_lm.prepare_lm_stream(args, model_args, data_args, training_args)
    with pytest.raises(DataError, match=r"words\.txt.*no training example"):
        next(iter(streamed))


def test_streaming_needs_a_validation_file_and_max_steps(tmp_path):
    from hf_seq.train_scripts.arguments import RecipeError

    model_args, data_args, args, training_args = parse_args(train_lm.TASK, word_args(tmp_path, "--streaming", "true"))
    with pytest.raises(RecipeError, match="validation_file"):
        train_lm.prepare_lm_stream(args, model_args, data_args, training_args)
    argv = streaming_args(tmp_path, "--streaming", "true", "--max_train_tokens", "100")
    model_args, data_args, args, training_args = parse_args(train_lm.TASK, argv)
    with pytest.raises(RecipeError, match="max_train_tokens"):
        train_lm.prepare_lm_stream(args, model_args, data_args, training_args)


@pytest.mark.slow
def test_torchrun_two_processes_streaming_log_the_losses_of_one_process(tmp_path):
    """``--streaming`` under ``torchrun --nproc_per_node 2`` (gloo): the first process reads the stream and each
    process gets its half of every global batch (``accelerate``'s ``dispatch_batches``, the default for an
    IterableDataset, so the stream is never sharded twice); the per-step losses equal one process on the same
    global batch (2 x 2 = 4 x 1)."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = streaming_args(tmp_path, "--streaming", "true", "--shuffle_buffer_size", "8", "--disable_tqdm", "true")
    out = argv.index("--output_dir") + 1
    batch = argv.index("--per_device_train_batch_size") + 1
    ddp_argv, single_argv = list(argv), list(argv)
    ddp_argv[out], ddp_argv[batch] = str(tmp_path / "ddp"), "2"
    single_argv[out] = str(tmp_path / "single")  # per-device batch 4
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO_ROOT), "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    command += ["--master_port", str(port), str(REPO_ROOT / "train_scripts/train_lm.py"), *ddp_argv]
    ddp = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    train_lm.main(single_argv)
    log, _ = ddp.communicate(timeout=600)
    assert ddp.returncode == 0, launch_failure(log)
    single, parallel = step_losses(tmp_path / "single"), step_losses(tmp_path / "ddp")
    assert len(single) == len(parallel) == 8 and len(set(single)) > 1
    torch.testing.assert_close(parallel, single, rtol=1e-5, atol=1e-5)


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["lm_word_ptb", "lm_char_shakespeare"])
def test_shipped_recipes_get_the_same_tokens_from_the_cache(recipe, tmp_path):
    """The presets through the cache: the in-memory path's vocabulary, token streams and data line, so the recipes'
    windows, batches and results are unchanged."""
    model_args, data_args, args, _ = parse_args(
        train_lm.TASK, [str(REPO_ROOT / "configs" / f"{recipe}.json"), "--cache_dir", str(tmp_path)]
    )
    cached, reference = (
        train_lm.prepare_lm_data(args, model_args, data_args),
        in_memory_lm_data(args, model_args, data_args),
    )
    assert cached.tokenizer.get_vocab() == reference.tokenizer.get_vocab()
    assert cached.data_line == reference.data_line
    for name, stream in reference.streams.items():
        assert np.array_equal(np.asarray(cached.streams[name], dtype=np.int64), stream.numpy()), name


@pytest.mark.parametrize(
    ("level", "extra", "expected"),
    [
        # the case: 60 lines, 5% held out: a 21-word validation stream under 128+1-token windows
        (
            "word",
            (),
            r"^the validation split \(5% of `train_file` .*sixty\.txt held out\) has 21 word tokens, fewer than one "
            r"window of `segment_length` 128 \+ 1 = 129: pass `--segment_length 20` or less, a larger "
            r"`--validation_split_percentage` or more text$",
        ),
        # the neighbour: the training text itself is shorter than one window
        (
            "char",
            ("--validation_file", "sixty.txt", "--max_train_tokens", "50"),
            r"^the train split \(.*sixty\.txt\) has 50 char tokens, fewer than one window of `segment_length` 128 "
            r"\+ 1 = 129: pass `--segment_length 49` or less or more text$",
        ),
    ],
    ids=["validation", "train"],
)
def test_a_split_shorter_than_one_window_names_it_and_the_flag(tmp_path, monkeypatch, level, extra, expected):
    from hf_seq.toolkit.data import DataError

    (tmp_path / "sixty.txt").write_text("".join(f"line {i} of some words here\n" for i in range(60)))
    monkeypatch.chdir(tmp_path)

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the error")

    monkeypatch.setattr(train_lm, "load_or_build_model", no_model)
    argv = ["--level", level, "--train_file", str(tmp_path / "sixty.txt"), *extra, "--output_dir", "out"]
    with pytest.raises(DataError, match=expected):
        train_lm.main(argv + ["--cache_dir", "none"])
