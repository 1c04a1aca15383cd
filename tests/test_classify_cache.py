"""The classifier's and the tagger's cache (hf_seq.train_scripts.classification.LabelledData): a second run with the
same files and settings reads no data file (the features, the tokenizer and a record of the files: label set, split
sizes, descriptions) and trains as the first; a file that changed is never read from the stale cache; a damaged
cache is rebuilt; the ids are cached as uint16 (tags as int16) and collate into the same int64 batches as the
int64 lists of before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from hf_seq.train_scripts import classification, train_classifier, train_tagger
from hf_seq.train_scripts import common as common_module
from hf_seq.train_scripts.trainer import HfSeqTrainer
from own_data import count_builds, flags, reviews, tagged, write_splits
from transformers import AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding

TINY = [
    "--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none", "--disable_tqdm", "true",
    "--save_strategy", "no", "--eval_strategy", "no", "--learning_rate", "0.01", "--max_steps", "3",
    "--model_config", '{"hidden_size": 8, "embedding_size": 8}',
]  # fmt: skip


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SEQ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def classifier_data(folder: Path, labels=("neg", "pos")) -> list[str]:
    rows = reviews(24)
    for i, row in enumerate(rows):
        row["review"] += f" w{i}"
        row["stars"] = labels[row["stars"] == "pos"]
    valid = reviews(8, start=24)
    for row in valid:
        row["stars"] = labels[row["stars"] == "pos"]
    files = flags(write_splits(folder, ".csv", {"train": rows, "validation": valid}))
    return [*files, "--text_column_name", "review", "--label_column_name", "stars"]


def tagger_data(folder: Path) -> list[str]:
    return flags(write_splits(folder, ".jsonl", {"train": tagged(30), "validation": tagged(6, 30)}))


SCRIPTS = {
    "classifier": (train_classifier, classifier_data, "labels", []),
    "tagger": (train_tagger, tagger_data, "tags", ["--word_dropout", "0.25"]),
}


def step_losses(folder: Path) -> list[float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return [row["loss"] for row in state["log_history"] if "loss" in row]


@pytest.fixture
def seen(monkeypatch) -> list:
    """The training features each run gives Trainer."""
    seen = []
    original = HfSeqTrainer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(kwargs["train_dataset"])

    monkeypatch.setattr(HfSeqTrainer, "__init__", init)
    return seen


@pytest.fixture
def loads(monkeypatch) -> list:
    """The data files each run loads (``load_data`` behind the scripts' loader)."""
    calls = []
    original = common_module.load_data

    def counting(*args, **kwargs):
        calls.append(kwargs.get("train_file"))
        return original(*args, **kwargs)

    monkeypatch.setattr(common_module, "load_data", counting)
    return calls


def rows_of(dataset) -> list:
    return [{k: list(v) if isinstance(v, list) else v for k, v in row.items()} for row in dataset]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_second_run_reads_no_data_file_and_trains_the_same(tmp_path, monkeypatch, seen, name):
    script, write, labels_key, extra = SCRIPTS[name]
    argv = [*write(tmp_path / "data"), *TINY, *extra]
    first = script.main([*argv, "--output_dir", str(tmp_path / "first")])

    def no_data(*args, **kwargs):
        raise AssertionError("a run that finds its features must not load the data files")

    with monkeypatch.context() as patched:
        patched.setattr(classification, "load_task_data", no_data)
        patched.setattr(common_module, "load_data", no_data)
        second = script.main([*argv, "--output_dir", str(tmp_path / "second")])
    assert rows_of(seen[1]) == rows_of(seen[0]) and len(seen[0]) == 30 - 6 * (name == "classifier")
    assert second[labels_key] == first[labels_key] and len(first[labels_key]) >= 2
    for key in ("splits", "data", "vocab_size", "validation_accuracy"):
        assert second[key] == first[key], key
    losses = step_losses(tmp_path / "first")
    assert len(losses) == 3 and len(set(losses)) > 1
    torch.testing.assert_close(step_losses(tmp_path / "second"), losses, rtol=1e-6, atol=1e-7)
    ids = seen[1].features["input_ids"].feature.dtype
    tags = seen[1].features["labels"]
    assert ids == "uint16" and (tags.feature.dtype if name == "tagger" else tags.dtype) == "int16"


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_cached_ids_collate_into_the_int64_batches_of_before(tmp_path, seen, name):
    """The uint16 / int16 cache, through the script's collator, gives the batches of the int64 lists that the
    tokenizer's Python ints made before (``Dataset.map`` with datasets' own types)."""
    script, write, labels_key, extra = SCRIPTS[name]
    argv = [*write(tmp_path / "data"), *TINY, *extra]
    results = script.main([*argv, "--output_dir", str(tmp_path / "run")])
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "run")
    train = Dataset.from_csv(argv[1]) if name == "classifier" else Dataset.from_json(argv[1])
    names = results[labels_key]
    if name == "classifier":
        encode = train_classifier.text_encoder(tokenizer, "review", "stars", 64)
        lookup, collator = names.index, DataCollatorWithPadding(tokenizer)
    else:
        encode = train_tagger.word_encoder(tokenizer, "tokens", "tags", 256)
        lookup, collator = (lambda row: [names.index(t) for t in row]), DataCollatorForTokenClassification(tokenizer)
    before = train.map(encode, batched=True, remove_columns=train.column_names, fn_kwargs={"lookup": lookup})
    assert before.features["input_ids"].feature.dtype in ("int32", "int64")
    cached = seen[0]
    assert cached.features["input_ids"].feature.dtype == "uint16" and len(cached) == len(before)
    for start in range(0, len(before), 8):
        old = collator([before[i] for i in range(start, min(start + 8, len(before)))])
        new = collator([cached[i] for i in range(start, min(start + 8, len(before)))])
        assert sorted(old) == sorted(new)
        for key in old:
            assert new[key].dtype == old[key].dtype == torch.int64 and torch.equal(new[key], old[key]), key


def test_a_changed_file_is_read_again_not_the_stale_record(tmp_path, monkeypatch, loads):
    builds = count_builds(monkeypatch)
    argv = [*classifier_data(tmp_path / "data"), *TINY]
    first = train_classifier.main([*argv, "--output_dir", str(tmp_path / "first")])
    classifier_data(tmp_path / "data", labels=("bad", "good"))  # the same files, rows and sizes: other labels
    second = train_classifier.main([*argv, "--output_dir", str(tmp_path / "second")])
    assert first["labels"] == ["neg", "pos"] and second["labels"] == ["bad", "good"]
    assert len(loads) == 2 and len(builds) == 2


@pytest.mark.parametrize("damage", ["truncate", "garble", "record"])
def test_a_damaged_cache_is_rebuilt(tmp_path, monkeypatch, cache_env, seen, loads, damage):
    builds = count_builds(monkeypatch)
    argv = [*tagger_data(tmp_path / "data"), *TINY]
    first = train_tagger.main([*argv, "--output_dir", str(tmp_path / "first")])
    expected = rows_of(seen[0])
    del seen[:]
    if damage == "record":
        folder = next(p for p in cache_env.iterdir() if p.name.startswith("train_tagger_data-"))
        (folder / "meta.json").write_text("{")
    else:
        folder = next(p for p in cache_env.iterdir() if p.name.startswith("train_tagger-"))
        arrow = folder / "train.arrow"
        data = arrow.read_bytes()
        arrow.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\0" * len(data))
    second = train_tagger.main([*argv, "--output_dir", str(tmp_path / "second")])
    assert rows_of(seen[0]) == expected and second["tags"] == first["tags"]
    assert len(loads) == 2  # the files are read again
    assert len(builds) == (1 if damage == "record" else 2)  # a lost record alone: the features are still read
    torch.testing.assert_close(step_losses(tmp_path / "second"), step_losses(tmp_path / "first"), rtol=1e-6, atol=1e-7)
    third = train_tagger.main([*argv, "--output_dir", str(tmp_path / "third")])  # the rebuilt cache: no file read
    assert len(loads) == 2 and third["tags"] == first["tags"]
