"""``--streaming true`` in train_classifier and train_tagger: the training file read as a ``datasets`` stream gives
the cached path's tokens and, with the shuffle buffer off, its per-step losses; the file is read again until
``max_steps``, and a run killed in its second pass resumes with the same losses; the label set is fixed before training (the validation file, the first training rows,
``--streaming_label_names``) and a label outside it is an error naming the flag."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from hf_seq.train_scripts import train_classifier, train_tagger
from hf_seq.train_scripts.arguments import RecipeError
from hf_seq.train_scripts.trainer import HfSeqTrainer
from own_data import flags, reviews, tagged, write_splits

from hf_seq.toolkit.data import DataError

REVIEW_COLUMNS = ["--text_column_name", "review", "--label_column_name", "stars"]
COMMON = [
    "--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none", "--disable_tqdm", "true",
    "--save_strategy", "no", "--eval_strategy", "no", "--learning_rate", "0.01", "--max_steps", "5",
]  # fmt: skip
TINY_RNN = ["--model_config", '{"hidden_size": 8, "embedding_size": 8}']
TINY_TAGGER = ["--model_config", '{"hidden_size": 8, "embedding_size": 8, "bidirectional": true}']
STREAM = ["--streaming", "true", "--shuffle_buffer_size", "0", "--train_sampling_strategy", "random"]


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SEQ_CACHE", str(tmp_path / "cache"))


def step_losses(folder: Path) -> list[float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return [row["loss"] for row in state["log_history"] if "loss" in row]


def classifier_files(tmp_path: Path, suffix: str = ".csv") -> list[str]:
    rows = reviews(24)
    for i, row in enumerate(rows):
        row["review"] += f" w{i}"  # every row distinct
    return flags(write_splits(tmp_path / "data", suffix, {"train": rows, "validation": reviews(8, start=24)}))


def recorded_train_rows(monkeypatch, n: int) -> list:
    """The first ``n`` training rows each run gives Trainer (``train_dataset``; a stream is read again and again
    until ``max_steps``: it never ends), in order."""
    seen = []
    original = HfSeqTrainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        rows = itertools.islice(kwargs["train_dataset"], n)
        seen.append([(tuple(r["input_ids"]), int(r["labels"])) for r in rows])

    monkeypatch.setattr(HfSeqTrainer, "__init__", init)
    return seen


def test_streamed_classifier_has_the_cached_tokens_and_losses(tmp_path, monkeypatch):
    files = classifier_files(tmp_path)
    base = [*files, *REVIEW_COLUMNS, *TINY_RNN, *COMMON]
    seen = recorded_train_rows(monkeypatch, 48)
    cached = train_classifier.main(
        [*base, "--train_sampling_strategy", "sequential", "--output_dir", str(tmp_path / "c")]
    )
    streamed = train_classifier.main([*base, *STREAM, "--output_dir", str(tmp_path / "s")])
    assert len(seen[0]) == 24 and seen[1] == seen[0] * 2  # same ids, labels, order; then the second pass
    assert streamed["labels"] == cached["labels"] == ["neg", "pos"] and streamed["vocab_size"] == cached["vocab_size"]
    assert streamed["splits"]["train"] is None and "streamed" in streamed["data"]
    losses = step_losses(tmp_path / "c")
    assert len(losses) == 5 and len(set(losses)) > 1
    torch.testing.assert_close(step_losses(tmp_path / "s"), losses, rtol=1e-6, atol=1e-7)
    assert streamed["validation_accuracy"] == cached["validation_accuracy"]


def test_streamed_tagger_has_the_cached_tokens_and_losses(tmp_path):
    """With the tagger's word dropout (0.25): counted on the first rows of the stream, here all of them."""
    files = flags(write_splits(tmp_path / "data", ".jsonl", {"train": tagged(30), "validation": tagged(6, 30)}))
    base = [*files, *TINY_TAGGER, *COMMON]
    cached = train_tagger.main([*base, "--train_sampling_strategy", "sequential", "--output_dir", str(tmp_path / "c")])
    streamed = train_tagger.main([*base, *STREAM, "--output_dir", str(tmp_path / "s")])
    assert streamed["tags"] == cached["tags"] == [".", "ADJ", "DET", "NOUN", "VERB"]
    losses = step_losses(tmp_path / "c")
    assert len(losses) == 5 and len(set(losses)) > 1
    torch.testing.assert_close(step_losses(tmp_path / "s"), losses, rtol=1e-6, atol=1e-7)


def killed_and_resumed(main, argv: list[str], tmp_path: Path, monkeypatch, kill_at: int) -> tuple[list, list]:
    """The per-step losses of an uninterrupted run of ``argv`` and of one killed when step ``kill_at`` begins (after
    its last checkpoint), then resumed with ``--resume_from_checkpoint last``."""
    main([*argv, "--output_dir", str(tmp_path / "whole")])
    original = HfSeqTrainer.training_step

    def killed(self, *args, **kwargs):
        if self.state.global_step == kill_at - 1:
            raise KeyboardInterrupt("killed mid-stream")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HfSeqTrainer, "training_step", killed)
    with pytest.raises(KeyboardInterrupt):
        main([*argv, "--output_dir", str(tmp_path / "resumed")])
    monkeypatch.setattr(HfSeqTrainer, "training_step", original)
    main([*argv, "--output_dir", str(tmp_path / "resumed"), "--resume_from_checkpoint", "last"])
    return step_losses(tmp_path / "whole"), step_losses(tmp_path / "resumed")


def test_streamed_classifier_resumes_in_the_second_pass_with_the_same_losses(tmp_path, monkeypatch):
    """The first 10 rows (``max_train_samples``), 4 a step: 3.2 passes in 8 steps, the passes joined (step 3 holds
    the last 2 rows of the first pass and the first 2 of the second); killed after the checkpoint at step 4 (in the
    second pass), the resumed run has the uninterrupted run's losses."""
    files = classifier_files(tmp_path)
    argv = [*files, *REVIEW_COLUMNS, *TINY_RNN, *COMMON, *STREAM, "--shuffle_buffer_size", "8",
            "--max_train_samples", "10", "--max_steps", "8", "--save_strategy", "steps", "--save_steps", "4"]  # fmt: skip
    expected, resumed = killed_and_resumed(train_classifier.main, argv, tmp_path, monkeypatch, kill_at=6)
    assert (tmp_path / "resumed" / "checkpoint-4").is_dir()
    assert len(expected) == len(resumed) == 8 and len(set(expected)) > 1
    torch.testing.assert_close(resumed, expected, rtol=1e-6, atol=1e-7)


def test_streamed_tagger_resumes_in_the_second_pass_with_the_same_losses(tmp_path, monkeypatch):
    """10 sentences, 4 a step: killed after the checkpoint at step 4 (the second pass), resumed into the third."""
    files = flags(write_splits(tmp_path / "data", ".jsonl", {"train": tagged(10), "validation": tagged(6, 30)}))
    argv = [*files, *TINY_TAGGER, *COMMON, *STREAM, "--shuffle_buffer_size", "4", "--max_steps", "7",
            "--save_strategy", "steps", "--save_steps", "4"]  # fmt: skip
    expected, resumed = killed_and_resumed(train_tagger.main, argv, tmp_path, monkeypatch, kill_at=5)
    assert len(expected) == len(resumed) == 7 and len(set(expected)) > 1
    torch.testing.assert_close(resumed, expected, rtol=1e-6, atol=1e-7)


def test_the_label_set_of_a_stream_is_fixed_before_training(tmp_path):
    rows = reviews(24)
    rows[20]["stars"] = "mixed"  # a label only a late training row has
    positive = [r for r in reviews(8, start=24) if r["stars"] == "pos"]
    files = write_splits(tmp_path / "data", ".csv", {"train": rows, "validation": positive})
    argv = [*flags(files), *REVIEW_COLUMNS, *TINY_RNN, *COMMON, *STREAM,
            "--tokenizer_max_train_lines", "2", "--max_steps", "8", "--output_dir", str(tmp_path / "run")]  # fmt: skip
    with pytest.raises(DataError, match=r"train\.csv.*'mixed'.*streaming_label_names"):
        train_classifier.main(argv)  # row 20, at step 6
    results = train_classifier.main([*argv, "--streaming_label_names", "mixed"])
    assert results["labels"] == ["mixed", "neg", "pos"] and results["train_steps"] == 8
    single = write_splits(tmp_path / "single", ".csv", {"train": positive * 3, "validation": positive})
    with pytest.raises(RecipeError, match="streaming_label_names"):
        train_classifier.main([*flags(single), *argv[4:]])
    with pytest.raises(RecipeError, match="validation_file"):
        train_classifier.main(["--train_file", files["--train_file"], *argv[4:]])
    with pytest.raises(RecipeError, match="streaming_split_by_node"):  # the first process reads the stream here
        train_classifier.main([*argv, "--streaming_split_by_node", "true"])


def test_a_class_label_stream_and_a_given_tokenizer(tmp_path):
    """A parquet ``ClassLabel`` column keeps its names (and their order) in the stream; a given tokenizer is used as
    it is."""
    from datasets import ClassLabel, Dataset, Features, Value

    features = Features({"review": Value("string"), "stars": ClassLabel(names=["pos", "neg"])})
    folder = tmp_path / "data"
    folder.mkdir()
    for split, rows in (("train", reviews(24)), ("validation", reviews(8, start=24))):
        Dataset.from_list(rows, features=features).to_parquet(folder / f"{split}.parquet")
    files = ["--train_file", str(folder / "train.parquet"), "--validation_file", str(folder / "validation.parquet")]
    base = [*files, *REVIEW_COLUMNS, *TINY_RNN, *COMMON, *STREAM]
    first = train_classifier.main([*base, "--output_dir", str(tmp_path / "first")])
    assert first["labels"] == ["pos", "neg"]
    again = train_classifier.main(
        [*base, "--tokenizer_name", str(tmp_path / "first"), "--output_dir", str(tmp_path / "b")]
    )
    assert again["vocab_size"] == first["vocab_size"]
    torch.testing.assert_close(step_losses(tmp_path / "b"), step_losses(tmp_path / "first"), rtol=1e-6, atol=1e-7)
    with pytest.raises(RecipeError, match="ClassLabel"):
        train_classifier.main([*base, "--streaming_label_names", "neg", "pos", "--output_dir", str(tmp_path / "c")])
