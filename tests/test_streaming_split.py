"""``--streaming_split_by_node true`` (train_lm, train_translation): each process reads and tokenizes its own part of
the training stream. Through accelerate's own ``prepare_data_loader`` (``dispatch_batches`` off, 2 processes) the
parts are disjoint and their union is the stream: the stream is split exactly once (a plain
``split_dataset_by_node`` stream would be cut a second time by ``IterableDatasetShard``). Under ``torchrun`` (2 CPU
processes, gloo) each process trains on its own part and the per-step losses equal one process trained on the same
global batches. The stream is read again and again until ``max_steps``: every process reads its own part, every
pass, pass ``k`` shuffled as epoch ``k``."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.data_loader import prepare_data_loader
from datasets.distributed import split_dataset_by_node
from hf_seq.train_scripts import train_lm, train_translation
from hf_seq.train_scripts.arguments import RecipeError, parse_args
from hf_seq.train_scripts.features import split_by_node_setup
from launchers import losses, torchrun
from torch.utils.data import DataLoader

from hf_seq.toolkit.preprocessing import make_encoder

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "tests" / "stream_split_driver.py"
WORDS = "the cat sat on a mat dog ran far up hill sun set low red sky over sea".split()
EN = "the light god said let there be and was good earth water day night".split()
ES = "la luz dios dijo sea haya y fue buena tierra agua dia noche".split()
SEGMENT = 16


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SEQ_CACHE", str(tmp_path / "cache"))


def write_lines(path: Path, n: int, seed: int) -> Path:
    rng = random.Random(seed)
    path.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + "\n" for _ in range(n)))
    return path


def lm_args(tmp_path: Path, *extra: str, lines: int = 240) -> list[str]:
    train, valid = write_lines(tmp_path / "train.txt", lines, 0), write_lines(tmp_path / "valid.txt", 30, 1)
    return [
        "--level", "word", "--train_file", str(train), "--validation_file", str(valid),
        "--output_dir", str(tmp_path / "run"), "--segment_length", str(SEGMENT), "--stride", str(SEGMENT),
        "--per_device_train_batch_size", "2", "--max_steps", "6", "--logging_steps", "1", "--learning_rate", "0.01",
        "--eval_strategy", "no", "--save_strategy", "no", "--report_to", "none", "--use_cpu", "true",
        "--disable_tqdm", "true", "--sample_length", "3", "--sample_temperatures", "1.0", "--sample_prompt", "the",
        "--eval_streams", "2", "--model_config", '{"cell": "lstm", "hidden_size": 8, "embedding_size": 8}',
        "--overwrite_output_dir", "true", "--streaming", "true", "--streaming_split_by_node", "true", *extra,
    ]  # fmt: skip


def write_pairs(path: Path, n: int, seed: int) -> Path:
    import json

    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            k = rng.randint(1, 8)
            en = " ".join([EN[i % len(EN)]] + [rng.choice(EN) for _ in range(k)])
            es = " ".join(rng.choice(ES) for _ in range(k + rng.randint(0, 3)))
            f.write(json.dumps({"translation": {"en": en, "es": es}}) + "\n")
    return path


def translation_args(tmp_path: Path, *extra: str, pairs: int = 120) -> list[str]:
    train, valid = write_pairs(tmp_path / "pairs.jsonl", pairs, 0), write_pairs(tmp_path / "valid.jsonl", 8, 1)
    return [
        str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train),
        "--validation_file", str(valid), "--output_dir", str(tmp_path / "run"), "--tokenizer_vocab_size", "300",
        "--config_overrides", "hidden_size=16,intermediate_size=32,encoder_layers=1,decoder_layers=1,num_attention_heads=2,dropout=0.0,"
        "attention_dropout=0.0,activation_dropout=0.0",
        "--per_device_train_batch_size", "3", "--max_steps", "5", "--logging_steps", "1", "--eval_strategy", "no",
        "--do_predict", "false", "--plot_attention", "false", "--save_strategy", "no", "--warmup_steps", "0",
        "--learning_rate", "0.01", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
        "--streaming", "true", "--train_sampling_strategy", "random", "--streaming_split_by_node", "true",
        "--overwrite_output_dir", "true", *extra,
    ]  # fmt: skip


def without(argv: list[str], flag: str) -> list[str]:
    """``argv`` without ``flag`` and its value."""
    i = argv.index(flag)
    return argv[:i] + argv[i + 2 :]


def process_loader(dataset, rank: int, batch_size: int, collate=None):
    """What accelerate gives process ``rank`` of 2 (``dispatch_batches`` off, as the scripts set it)."""
    loader = DataLoader(dataset, batch_size=batch_size, collate_fn=collate)
    return prepare_data_loader(loader, num_processes=2, process_index=rank, dispatch_batches=False)


def lm_stream(argv: list[str], world_size: int = 2):
    model_args, data_args, args, training_args = parse_args(train_lm.TASK, argv)
    return train_lm.prepare_lm_stream(args, model_args, data_args, training_args, world_size=world_size)


def rank_windows(dataset, rank: int, n: int) -> list[torch.Tensor]:
    """The first ``n`` windows process ``rank`` of 2 reads (the stream repeats until ``max_steps``: it never ends)."""
    windows = (w for batch in process_loader(dataset, rank, 4) for w in batch["input_ids"])
    return list(itertools.islice(windows, n))


def windows_of(tokens) -> int:
    """The windows (stride = segment) of a token stream: the last partial one dropped, as the cached path."""
    return (len(tokens) - SEGMENT - 1) // SEGMENT + 1


def test_lm_parts_are_split_once_disjoint_and_cover_the_stream(tmp_path):
    model_args, data_args, args, training_args = parse_args(
        train_lm.TASK, lm_args(tmp_path, "--shuffle_buffer_size", "0")
    )
    data, dataset = train_lm.prepare_lm_stream(args, model_args, data_args, training_args, world_size=2)
    assert training_args.accelerator_config.dispatch_batches is False and dataset.n_shards == 2
    lines = Path(data_args.train_file).read_text().splitlines(keepends=True)
    encoder, eos = make_encoder(data.tokenizer), data.tokenizer.eos_token_id
    parts, sizes = [], []
    for rank in range(2):
        expected, _ = encoder.encode(lines[rank::2], eos)  # rows rank, rank + 2, ... : each row in one process
        n = windows_of(expected)
        read = rank_windows(dataset, rank, 2 * n)
        windows = read[:n]
        # consecutive windows (stride = segment) overlap by one token: they spell the process's token stream
        got = np.concatenate([w[:SEGMENT].numpy() for w in windows] + [windows[-1][SEGMENT:].numpy()])
        assert np.array_equal(got, expected[: len(got)])
        assert len(expected) - len(got) <= SEGMENT  # all of it, but the last partial window (as the cached path)
        # then the second pass over its own part, from its first row (the remainder dropped), the same windows
        assert [w.tolist() for w in read[n:]] == [w.tolist() for w in windows]
        parts.append(sorted(w.tolist() for w in windows))
        sizes.append(n)
    # through the seeded shuffle buffer: the windows of the parts (the seed may swap which process reads which),
    # another order, reshuffled each pass: each process reads the same part again
    _, shuffled = lm_stream(lm_args(tmp_path, "--shuffle_buffer_size", "8"))
    got = [[w.tolist() for w in rank_windows(shuffled, rank, 2 * max(sizes))] for rank in range(2)]
    read = []
    for windows in got:
        (part,) = [p for p in range(2) if sorted(windows[: sizes[p]]) == parts[p]]
        first, second = windows[: sizes[part]], windows[sizes[part] : 2 * sizes[part]]
        assert sorted(second) == parts[part] and second != first
        read.append(part)
    assert sorted(read) == [0, 1]
    assert got[0][: sizes[0]] != [w.tolist() for w in rank_windows(dataset, 0, sizes[0])]
    assert got[0] == [w.tolist() for w in rank_windows(shuffled, 0, 2 * max(sizes))]  # seeded: repeatable


def pair_rows(dataset, rank: int | None, n: int) -> list[tuple]:
    """The first ``n`` pairs of the stream (``rank`` None) or of what process ``rank`` of 2 reads."""
    rows = dataset if rank is None else (r for batch in process_loader(dataset, rank, 4, list) for r in batch)
    return [(tuple(r["input_ids"]), tuple(r["labels"])) for r in itertools.islice(rows, n)]


def test_translation_parts_are_split_once_disjoint_and_cover_the_stream(tmp_path):
    parsed = parse_args(train_translation.TASK, translation_args(tmp_path, "--shuffle_buffer_size", "16"))
    _, tokenized, _, line = train_translation.streamed_features(*parsed, "en", "es", world_size=2)
    assert "split by process" in line and parsed[3].accelerator_config.dispatch_batches is False
    # 120 rows: 60 a part; each process reads its part twice in 120 rows (the second pass reshuffled)
    parts = [pair_rows(tokenized["train"], rank, 120) for rank in range(2)]
    whole_args = parse_args(
        train_translation.TASK,
        without(translation_args(tmp_path, "--shuffle_buffer_size", "0"), "--streaming_split_by_node"),
    )
    _, whole, _, _ = train_translation.streamed_features(*whole_args, "en", "es")
    every = pair_rows(whole["train"], None, 240)
    assert every[120:] == every[:120]  # without a shuffle buffer the second pass is the first
    every = every[:120]
    assert len(set(every)) == len(every) == 120  # every row distinct: a doubled or lost row shows
    assert Counter(parts[0][:60]) + Counter(parts[1][:60]) == Counter(every)
    assert set(parts[0][:60]) in ({*every[0::2]}, {*every[1::2]})  # every other row
    for part in parts:
        assert sorted(part[60:]) == sorted(part[:60]) and part[60:] != part[:60]
    # the trap avoided: a split_dataset_by_node stream (one shard) given to accelerate is cut a second time
    # (process 0 reads every other batch of every other row: 30 of its 60 rows of the first pass, the rest lost)
    once = split_dataset_by_node(whole["train"], rank=0, world_size=2)
    cut = set(pair_rows(once, 0, 30))
    assert len(cut) == 30 and cut < set(every[0::2])


def test_split_by_node_refuses_what_would_read_the_stream_otherwise(tmp_path):
    with pytest.raises(ValueError, match="streaming_split_by_node.*streaming"):
        parse_args(train_lm.TASK, without(lm_args(tmp_path), "--streaming"))
    _, _, args, training_args = parse_args(train_lm.TASK, lm_args(tmp_path))
    training_args.accelerator_config.dispatch_batches = True
    with pytest.raises(RecipeError, match="dispatch_batches"):
        split_by_node_setup(args, training_args)
    training_args.accelerator_config.dispatch_batches, training_args.accelerator_config.split_batches = None, True
    with pytest.raises(RecipeError, match="split_batches"):
        split_by_node_setup(args, training_args)
    training_args.accelerator_config.split_batches = False
    assert split_by_node_setup(args, training_args) == 1  # one process here: one part
    assert training_args.accelerator_config.dispatch_batches is False


class Recorded(torch.utils.data.IterableDataset):
    """The examples of the recorded batches, in order (the one-process reference's training data)."""

    def __init__(self, examples: list[dict]) -> None:
        self.examples = examples

    def __iter__(self):
        return iter(self.examples)


def launch(tmp_path: Path, task: str, argv: list[str], record: str = "record") -> list[list[dict]]:
    """The 2-process run of ``argv`` under torchrun; every process's recorded training batches."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    command = torchrun(str(DRIVER), task, str(tmp_path / record), *argv)
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    return [torch.load(tmp_path / record / f"rank{r}.pt") for r in range(2)]


@pytest.mark.slow(reason="two 2-process torchruns of train_lm, ~60 s")
def test_torchrun_lm_processes_read_their_own_part_and_log_one_process_losses(tmp_path, monkeypatch):
    """... and resumed from the step-5 checkpoint, in each process's second pass over its part, every process trains
    on the same batches with the same losses."""
    steps = ("--max_steps", "8", "--save_strategy", "steps", "--save_steps", "5")
    argv = lm_args(tmp_path, "--shuffle_buffer_size", "8", *steps, lines=40)
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "ddp")
    recorded = launch(tmp_path, "lm", argv)
    # each process trained on the start of its own part, the part accelerate's shard gives it here
    data, dataset = lm_stream(argv)
    lines = Path(argv[argv.index("--train_file") + 1]).read_text().splitlines(keepends=True)
    for rank in range(2):  # 2 windows a step: checkpoint 5 lies in the second pass of both parts
        pass_windows = windows_of(make_encoder(data.tokenizer).encode(lines[rank::2], data.tokenizer.eos_token_id)[0])
        assert pass_windows < 5 * 2 <= 2 * pass_windows
    for rank, batches in enumerate(recorded):
        assert len(batches) == 8
        trained = [w.tolist() for batch in batches for w in batch["input_ids"]]
        assert trained == [w.tolist() for w in rank_windows(dataset, rank, len(trained))]
    assert recorded[0][0]["input_ids"].tolist() != recorded[1][0]["input_ids"].tolist()
    # one process, batch 4: the per-step concatenation of the two processes' batches
    windows = [w for step in zip(*recorded) for batch in step for w in batch["input_ids"]]
    real = train_lm.prepare_lm_stream

    def recorded_stream(*args, **kwargs):
        data, _ = real(*args, **kwargs)
        return data, Recorded([{"input_ids": w, "labels": w} for w in windows])

    monkeypatch.setattr(train_lm, "prepare_lm_stream", recorded_stream)
    single = lm_args(tmp_path, "--per_device_train_batch_size", "4", "--max_steps", "8", lines=40)
    single = without(single, "--streaming_split_by_node")
    single[single.index("--output_dir") + 1] = str(tmp_path / "single")
    train_lm.main(single)
    one, two = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert [s for s, _ in one] == [s for s, _ in two] == list(range(1, 9)) and len({v for _, v in one}) > 1
    torch.testing.assert_close([v for _, v in two], [v for _, v in one], rtol=1e-5, atol=1e-6)
    # exact resume per process from its second pass: each skips its own first 5 batches
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tmp_path / "ddp" / "checkpoint-5", resumed / "checkpoint-5")
    argv = without(argv, "--overwrite_output_dir") + ["--resume_from_checkpoint", "last"]
    argv[argv.index("--output_dir") + 1] = str(resumed)
    again = launch(tmp_path, "lm", argv, record="record_resumed")
    for rank in range(2):
        assert len(again[rank]) == 3
        for before, after in zip(recorded[rank][5:], again[rank]):
            assert torch.equal(before["input_ids"], after["input_ids"])
    torch.testing.assert_close(losses(resumed)[-3:], two[5:], rtol=1e-6, atol=1e-7)


def unpadded(batch: dict) -> list[dict]:
    """The examples of a collated translation batch (padding removed: attention mask, labels -100)."""
    return [
        {"input_ids": ids[mask.bool()].tolist(), "labels": labels[labels != -100].tolist()}
        for ids, mask, labels in zip(batch["input_ids"], batch["attention_mask"], batch["labels"])
    ]


@pytest.mark.slow(reason="two 2-process torchruns of train_translation, ~80 s")
def test_torchrun_translation_processes_read_their_own_part_and_log_one_process_losses(tmp_path, monkeypatch):
    """The loss of a batch is the mean over its target tokens, per process: one process with 2 accumulated
    micro-batches (process 0's batch, then process 1's) makes the same update and logs the same loss. 16 pairs: 8 a
    part, 3 a batch; resumed from the step-3 checkpoint (in each part's second pass), every process trains on the
    same batches with the same losses."""
    steps = ("--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3")
    argv = translation_args(tmp_path, "--shuffle_buffer_size", "16", *steps, pairs=16)
    argv[argv.index("--output_dir") + 1] = str(tmp_path / "ddp")
    recorded = launch(tmp_path, "translation", argv)
    parsed = parse_args(train_translation.TASK, argv)
    _, tokenized, _, _ = train_translation.streamed_features(*parsed, "en", "es", world_size=2)
    for rank, batches in enumerate(recorded):
        assert len(batches) == 6
        trained = [(tuple(r["input_ids"]), tuple(r["labels"])) for batch in batches for r in unpadded(batch)]
        assert trained == pair_rows(tokenized["train"], rank, len(trained))
    examples = [r for step in zip(*recorded) for batch in step for r in unpadded(batch)]
    real = train_translation.streamed_features

    def recorded_stream(*args, **kwargs):
        tokenizer, tokenized, pairs, line = real(*args, **kwargs)
        return tokenizer, {**tokenized, "train": Recorded(examples)}, pairs, line

    monkeypatch.setattr(train_translation, "streamed_features", recorded_stream)
    single = translation_args(tmp_path, "--gradient_accumulation_steps", "2", "--max_steps", "6", pairs=16)
    single = without(single, "--streaming_split_by_node")
    single[single.index("--output_dir") + 1] = str(tmp_path / "single")
    train_translation.main(single)
    one, two = losses(tmp_path / "single"), losses(tmp_path / "ddp")
    assert [s for s, _ in one] == [s for s, _ in two] == list(range(1, 7)) and len({v for _, v in one}) > 1
    torch.testing.assert_close([v for _, v in two], [v for _, v in one], rtol=1e-5, atol=1e-6)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(tmp_path / "ddp" / "checkpoint-3", resumed / "checkpoint-3")
    argv = without(argv, "--overwrite_output_dir") + ["--resume_from_checkpoint", "last"]
    argv[argv.index("--output_dir") + 1] = str(resumed)
    again = launch(tmp_path, "translation", argv, record="record_resumed")
    for rank in range(2):
        assert len(again[rank]) == 3
        for before, after in zip(recorded[rank][3:], again[rank]):
            assert unpadded(before) == unpadded(after)
    torch.testing.assert_close(losses(resumed)[-3:], two[3:], rtol=1e-6, atol=1e-7)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
