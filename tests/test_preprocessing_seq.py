"""The tokenized-data cache of the translation, classifier and tagger scripts (hf_seq.train_scripts.features) and the
length-bucket sampler on cached datasets: the cache holds the same tokens as the in-memory lists of before, is reused
by the next run, never reused once a file changed, rebuilt when corrupt; streamed pairs tokenize to the same ids;
lengths come from the Arrow offsets with the same batches as from Python lists."""

from __future__ import annotations

import itertools
import json
import random
import re
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from datasets import Dataset
from hf_seq.train_scripts import features as features_module
from hf_seq.train_scripts import train_classifier, train_tagger, train_translation
from hf_seq.train_scripts.arguments import parse_args
from hf_seq.train_scripts.common import cap_splits, load_task_data
from own_data import count_builds

from hf_seq.toolkit.data import pairs_of
from hf_seq.toolkit.preprocessing import release_arrow_memory
from hf_seq.toolkit.samplers import LengthBucketSampler, example_lengths, total_list_length
from hf_seq.toolkit.tokenization import build_translation_tokenizer

EN = "the light god said let there be and was good earth water day night , .".split()
ES = "la luz dios dijo sea haya y fue buena tierra agua dia noche , .".split()
REPO = Path(__file__).resolve().parent.parent


def write_pairs(path: Path, n: int, seed: int = 0, nested: bool = True) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            k = rng.randint(1, 14)
            en = " ".join(rng.choice(EN) for _ in range(k))
            es = " ".join(rng.choice(ES) for _ in range(k + rng.randint(0, 3)))
            f.write(json.dumps({"translation": {"en": en, "es": es}} if nested else {"en": en, "es": es}) + "\n")
    return path


@pytest.fixture(autouse=True)
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SEQ_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def translation_args(tmp_path, train: Path, *extra: str):
    return parse_args(
        train_translation.TASK,
        [
            str(REPO / "configs" / "translation_transformer.json"),
            "--train_file",
            str(train),
            "--output_dir",
            str(tmp_path / "out"),
            "--tokenizer_vocab_size",
            "300",
            "--max_words",
            "10",
            "--max_source_length",
            "9",
            "--max_target_length",
            "7",
            *extra,
        ],
    )


def old_translation_features(model_args, data_args, args):
    """The script's data path before the cache (lists of strings, a tokenizer built from one list, ``Dataset.from_dict``
    of the tokenized lists): the reference the cached features must equal."""
    src, tgt = data_args.source_lang, data_args.target_lang
    raw = load_task_data(train_translation.TASK, data_args)
    pairs = {s: pairs_of(d, src, tgt) for s, d in raw.items()}
    for split, (sources, targets) in pairs.items():
        keep = [
            i for i, (a, b) in enumerate(zip(sources, targets)) if max(len(a.split()), len(b.split())) <= args.max_words
        ]
        raw[split] = raw[split].select(keep)
        pairs[split] = ([sources[i] for i in keep], [targets[i] for i in keep])
    raw = cap_splits(raw, data_args)
    pairs = {s: (pairs[s][0][: len(raw[s])], pairs[s][1][: len(raw[s])]) for s in pairs}
    tokenizer = build_translation_tokenizer(
        [{src: a, tgt: b} for a, b in zip(*pairs["train"])], kind="bpe", vocab_size=model_args.tokenizer_vocab_size
    )

    def tokenize(sources, targets):
        enc = tokenizer(sources, text_target=targets, max_length=data_args.max_source_length, truncation=True)
        enc["labels"] = [labels[: data_args.max_target_length] for labels in enc["labels"]]
        return enc

    return tokenizer, {s: Dataset.from_dict(dict(tokenize(*pairs[s]))) for s in pairs}


def features(tmp_path, train, *extra):
    model_args, data_args, args, training_args = translation_args(tmp_path, train, *extra)
    return train_translation.cached_features(model_args, data_args, args, training_args, "en", "es")


def test_cached_translation_features_equal_the_in_memory_lists_and_are_reused(tmp_path, monkeypatch, cache_env):
    train = write_pairs(tmp_path / "pairs.jsonl", 240)
    calls = count_builds(monkeypatch)
    tokenizer, tokenized, pairs, line = features(tmp_path, train, "--max_eval_samples", "5")
    old_tokenizer, old = old_translation_features(*translation_args(tmp_path, train, "--max_eval_samples", "5")[:3])
    assert tokenizer.get_vocab() == old_tokenizer.get_vocab()  # the iterator over Arrow batches: the same vocabulary
    assert sorted(tokenized) == sorted(old) == ["train", "validation"] and len(calls) == 1
    for split in old:
        assert tokenized[split].column_names == old[split].column_names == ["input_ids", "attention_mask", "labels"]
        for column in old[split].column_names:
            assert list(tokenized[split][column]) == list(old[split][column]), (split, column)
    assert len(pairs["validation"][0]) == 5 and all(isinstance(t, str) for t in pairs["validation"][1])
    assert tokenized["train"].features["input_ids"].feature.dtype == "uint16"  # 300 tokens
    assert tokenized["train"].features["labels"].feature.dtype == "uint16"
    # the next run: read from the cache, not tokenized again, same ids; the data files are not loaded at all

    def no_data(*args, **kwargs):
        raise AssertionError("a run that finds its features must not load the data files")

    with monkeypatch.context() as patched:
        patched.setattr(train_translation, "load_task_data", no_data)
        again_tokenizer, again, again_pairs, again_line = features(tmp_path, train, "--max_eval_samples", "5")
    assert again_line == line and again_pairs == pairs and "held out" in line
    assert again["validation"].info.description == tokenized["validation"].info.description
    assert len(calls) == 1 and again_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert list(again["train"]["input_ids"]) == list(tokenized["train"]["input_ids"])
    assert all(Path(f["filename"]).is_relative_to(cache_env) for f in again["train"].cache_files)
    # another setting is another key
    features(tmp_path, train, "--max_eval_samples", "5", "--max_target_length", "5")
    assert len(calls) == 2


def test_released_pages_of_a_mapped_arrow_file_read_back_the_same(tmp_path):
    def file_rss() -> int:
        status = Path("/proc/self/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("RssFile:"))) * 1024

    rng = np.random.default_rng(0)
    Dataset.from_dict({"ids": rng.integers(0, 1000, size=(40_000, 100)).tolist()}).save_to_disk(tmp_path / "d")
    path = next((tmp_path / "d").glob("*.arrow"))
    dataset = Dataset.from_file(str(path))
    before = file_rss()
    first = dataset.data.column("ids").combine_chunks().flatten().to_numpy().sum()  # every page read
    read = file_rss()
    assert read - before > 10e6
    assert features_module.release_mapped_pages([path]) >= path.stat().st_size
    assert file_rss() < read - 10e6
    assert dataset.data.column("ids").combine_chunks().flatten().to_numpy().sum() == first  # mapped again


def _resident_bytes(path: Path) -> int:
    """This process's resident bytes of its memory maps of ``path`` (``/proc/self/smaps``)."""
    name, total, mapping = str(path.resolve()), 0, None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            mapping = fields[5] if len(fields) == 6 else None
        elif fields[0] == "Rss:" and mapping == name:
            total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_cached_split_is_opened_and_counted_without_staying_resident(tmp_path):
    """Opening a features file reads the header of each of its record batches through the memory map, and the
    kernel maps the pages around them: a plain ``Dataset.from_file`` of a file of many small batches leaves most
    of it resident, the cache's ``_open_split`` releases them (so does counting the tokens, group by group); the
    rows and the counts are those written."""
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 60, size=(40_000, 2))
    rows = {"input_ids": [[7] * a for a, _ in sizes], "labels": [[5] * b for _, b in sizes]}
    path = tmp_path / "train.arrow"
    Dataset.from_dict(rows).map(batched=True, writer_batch_size=100, cache_file_name=str(path))
    size = path.stat().st_size
    opened = features_module._open_split(tmp_path, {"files": [path.name], "num_rows": len(sizes)})
    assert _resident_bytes(path) < size * 0.1
    assert opened.data.column("labels").num_chunks >= 400
    assert opened[123]["labels"] == [5] * int(sizes[123, 1])
    assert total_list_length(opened, "labels") == int(sizes[:, 1].sum())
    assert _resident_bytes(path) < size * 0.1
    opened_plainly = Dataset.from_file(str(path))  # the pages opening and counting leave without a release
    assert _resident_bytes(path) > size * 0.5
    features_module.release_mapped_pages([path])
    assert pc.sum(pc.list_value_length(opened_plainly.data.column("labels"))).as_py() == int(sizes[:, 1].sum())
    assert _resident_bytes(path) > size * 0.5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_the_features_a_build_writes_are_not_left_resident_by_map(tmp_path, monkeypatch):
    """``datasets.map`` ends by opening the file it wrote (``Dataset.from_file``): plainly, most of a file of many
    record batches becomes resident at that moment (a first run at 10 M pairs: ~0.6 GB more peak RSS than a second
    run). ``FeatureCache.build`` has it opened through ``released_arrow_table``: the same rows, the pages released;
    ``datasets`` opens files its own way again afterwards."""
    import datasets.arrow_dataset
    import datasets.table

    resident_after_open = []
    plain_from_file = datasets.arrow_dataset.Dataset.from_file

    def spied_from_file(filename, *args, **kwargs):
        opened = plain_from_file(filename, *args, **kwargs)
        resident_after_open.append((_resident_bytes(Path(filename)), Path(filename).stat().st_size))
        return opened

    monkeypatch.setattr(datasets.arrow_dataset.Dataset, "from_file", spied_from_file)
    rng = np.random.default_rng(0)
    source = Dataset.from_dict({"a": rng.integers(1, 60, 40_000), "b": rng.integers(1, 60, 40_000)})

    def tokenize(batch):
        return {"input_ids": [[7] * a for a in batch["a"]], "labels": [[5] * b for b in batch["b"]]}

    original = datasets.table._memory_mapped_arrow_table_from_file
    cache = features_module.FeatureCache(tmp_path / "cache", "test", {"rows": 40_000})
    built = cache.build({"train": source}, tokenize, batch_size=100)["train"]  # 400 record batches
    [(resident, size)] = resident_after_open
    assert resident < size * 0.1
    assert datasets.table._memory_mapped_arrow_table_from_file is original
    in_memory = source.map(tokenize, batched=True, batch_size=100, remove_columns=["a", "b"])
    assert built.data.table.equals(in_memory.data.table)
    # the same map without the context: what it leaves resident
    source.map(tokenize, batched=True, batch_size=100, cache_file_name=str(tmp_path / "plain.arrow"))
    resident, size = resident_after_open[-1]
    assert resident > size * 0.5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_loaded_data_files_are_not_left_resident(tmp_path):
    """``datasets`` opens the Arrow file it converts a jsonl into (one record batch per 1,000 rows) through the
    memory map; ``load_task_data`` has it opened through ``released_arrow_table``: the same rows, without the file's
    pages resident (a plain ``load_dataset`` of the same file leaves most of them)."""
    import datasets

    train = write_pairs(tmp_path / "pairs.jsonl", 60_000)
    _, data_args, _, _ = translation_args(tmp_path, train)
    raw = load_task_data(train_translation.TASK, data_args)
    [path] = {Path(f["filename"]) for f in raw["train"].cache_files}
    assert _resident_bytes(path) < path.stat().st_size * 0.1
    plain = datasets.load_dataset("json", data_files={"train": str(train)}, split="train")
    assert [Path(f["filename"]) for f in plain.cache_files] == [path]
    assert _resident_bytes(path) > path.stat().st_size * 0.5
    assert raw["train"].num_rows + raw["validation"].num_rows == plain.num_rows == 60_000
    assert raw["train"].data.table.equals(plain.data.table)  # the rows the hold-out's indices select from


def _anonymous_bytes() -> int:
    return int(re.search(r"^RssAnon:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_release_arrow_memory_hands_freed_arrow_buffers_back():
    """pyarrow's allocator keeps a freed buffer's memory resident (a 64 MB stream written in 1 MB pieces, grown by
    doubling as a ``datasets`` filter's indices are); ``release_arrow_memory`` hands it back."""
    import pyarrow as pa

    release_arrow_memory()  # what earlier tests left in the pool
    before, allocated = _anonymous_bytes(), pa.total_allocated_bytes()
    stream = pa.BufferOutputStream()
    piece = np.ones(1 << 20, dtype=np.uint8).tobytes()
    for _ in range(64):
        stream.write(piece)
    buffer = stream.getvalue()
    del stream, buffer
    held = _anonymous_bytes()
    assert pa.total_allocated_bytes() <= allocated and held > before + (48 << 20)  # freed, yet resident
    release_arrow_memory()
    assert _anonymous_bytes() < held - (48 << 20)


def test_a_first_run_hands_back_its_filtered_splits_memory(tmp_path, monkeypatch, cache_env):
    """The max_words filter's row indices (8 bytes a kept pair) are gone once the features are built, and their
    memory is handed back (``release_arrow_memory``, after the filtered splits are freed) before training."""
    import weakref

    train = write_pairs(tmp_path / "pairs.jsonl", 300)
    filtered, releases = [], []
    plain_filter = train_translation._short_capped_splits

    def spied_filter(*args, **kwargs):
        splits = plain_filter(*args, **kwargs)
        filtered.extend(weakref.ref(dataset) for dataset in splits.values())
        return splits

    def spied_release():
        releases.append([ref() is None for ref in filtered])

    monkeypatch.setattr(train_translation, "_short_capped_splits", spied_filter)
    monkeypatch.setattr(train_translation, "release_arrow_memory", spied_release)
    features(tmp_path, train)
    assert len(filtered) == 2 and releases == [[True, True]]
    features(tmp_path, train)  # a run that finds its features has nothing to hand back
    assert len(releases) == 1


def test_changed_file_is_never_read_from_the_stale_cache(tmp_path, monkeypatch):
    train = write_pairs(tmp_path / "pairs.jsonl", 120)
    calls = count_builds(monkeypatch)
    _, first, _, _ = features(tmp_path, train)
    write_pairs(train, 120, seed=1)  # same name and row count, other pairs
    _, second, _, _ = features(tmp_path, train)
    assert len(calls) == 2 and list(second["train"]["input_ids"]) != list(first["train"]["input_ids"])
    _, old = old_translation_features(*translation_args(tmp_path, train)[:3])
    assert list(second["train"]["labels"]) == list(old["train"]["labels"])


@pytest.mark.parametrize("damage", ["truncate", "garble", "meta"])
def test_corrupt_cache_is_rebuilt_not_read(tmp_path, monkeypatch, cache_env, damage):
    train = write_pairs(tmp_path / "pairs.jsonl", 120)
    calls = count_builds(monkeypatch)
    _, first, _, _ = features(tmp_path, train)
    expected = list(first["train"]["input_ids"])  # read now: the file is damaged below
    folder = next(p for p in cache_env.iterdir() if p.name.startswith("translation-"))
    arrow = folder / "train.arrow"
    del first
    data = arrow.read_bytes()
    if damage == "truncate":
        arrow.write_bytes(data[: len(data) // 2])
    elif damage == "garble":  # same size, the stream's framing destroyed: pyarrow refuses it
        arrow.write_bytes(b"\0" * len(data))
    else:
        (folder / "meta.json").write_text("{")
    _, rebuilt, _, _ = features(tmp_path, train)
    assert len(calls) == 2 and list(rebuilt["train"]["input_ids"]) == expected


def test_streamed_pairs_tokenize_like_the_cache(tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 150, nested=False)
    valid = write_pairs(tmp_path / "valid.jsonl", 12, seed=5, nested=False)
    common = ("--validation_file", str(valid), "--max_eval_samples", "6")
    tokenizer, cached, _, _ = features(tmp_path, train, *common)
    model_args, data_args, args, training_args = translation_args(
        tmp_path, train, *common, "--streaming", "true", "--max_steps", "5", "--shuffle_buffer_size", "0",
        "--train_sampling_strategy", "random",
    )  # fmt: skip
    streamed_tok, streamed, pairs, line = train_translation.streamed_features(
        model_args, data_args, args, training_args, "en", "es"
    )
    assert streamed_tok.get_vocab() == tokenizer.get_vocab()  # built on the first rows: here all of them
    rows = list(itertools.islice(streamed["train"], 2 * len(cached["train"])))  # read until max_steps: never ends
    assert rows[len(cached["train"]) :] == rows[: len(cached["train"])]  # the second pass: no shuffle buffer
    rows = rows[: len(cached["train"])]
    assert [r["input_ids"] for r in rows] == list(cached["train"]["input_ids"])
    assert [r["labels"] for r in rows] == list(cached["train"]["labels"])
    assert list(streamed["validation"]["input_ids"]) == list(cached["validation"]["input_ids"])
    assert len(pairs["validation"][0]) == 6
    assert "streamed" in line


def test_streaming_needs_max_steps_and_no_length_buckets(tmp_path):
    train = write_pairs(tmp_path / "pairs.jsonl", 20)
    with pytest.raises(ValueError, match="max_steps"):
        train_translation.main(
            [str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train), "--validation_file",
             str(train), "--streaming", "true", "--max_steps", "-1", "--output_dir", str(tmp_path / "o")]
        )  # fmt: skip
    with pytest.raises(ValueError, match="train_sampling_strategy"):
        train_translation.main(
            [str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train), "--validation_file",
             str(train), "--streaming", "true", "--max_steps", "3", "--output_dir", str(tmp_path / "o")]
        )  # fmt: skip


def test_sampler_lengths_from_the_arrow_offsets_give_the_same_batches():
    rng = random.Random(3)
    rows = [
        {"input_ids": [1] * rng.randint(1, 30), "labels": [2] * rng.randint(1, 30), "attention_mask": [1]}
        for _ in range(97)
    ]
    dataset = Dataset.from_list(rows).shuffle(seed=1).select(range(90))  # an indices mapping on top
    expected = [max(len(r["input_ids"]), len(r["labels"])) for r in (dataset[i] for i in range(len(dataset)))]
    lengths = example_lengths(dataset)
    assert isinstance(lengths, np.ndarray) and lengths.dtype == np.int64 and lengths.tolist() == expected
    from_list = LengthBucketSampler(expected, batch_size=8, seed=5)
    from_numpy = LengthBucketSampler.from_dataset(dataset, batch_size=8, seed=5)
    for epoch in (0, 3):
        from_list.set_epoch(epoch)
        from_numpy.set_epoch(epoch)
        assert [b.tolist() for b in from_list.batches()] == [b.tolist() for b in from_numpy.batches()]
    with_column = Dataset.from_dict({"length": expected, "input_ids": [[0]] * len(expected)})
    assert example_lengths(with_column).tolist() == expected
    classes = Dataset.from_dict({"input_ids": [[1, 2], [3]], "labels": [0, 1]})  # a class label is not a length
    assert example_lengths(classes).tolist() == [2, 1]
    from_tensor = LengthBucketSampler(torch.tensor(expected), 8, seed=5)
    from_tensor.set_epoch(3)
    assert [b.tolist() for b in from_tensor.batches()] == [b.tolist() for b in from_list.batches()]
    with pytest.raises(ValueError, match="non-negative ints"):
        LengthBucketSampler(np.array([1.5, 2.0]), 2)


def test_classifier_and_tagger_features_are_cached(tmp_path, monkeypatch, cache_env):
    calls = count_builds(monkeypatch)
    rng = random.Random(0)
    reviews = tmp_path / "reviews.jsonl"
    with open(reviews, "w") as f:
        for _ in range(60):
            words = [rng.choice(EN) for _ in range(rng.randint(1, 9))]
            f.write(json.dumps({"text": " ".join(words), "label": rng.choice(["pos", "neg"])}) + "\n")
    tagged = tmp_path / "tagged.jsonl"
    with open(tagged, "w") as f:
        for _ in range(60):
            words = [rng.choice(EN) for _ in range(rng.randint(1, 9))]
            f.write(json.dumps({"tokens": words, "tags": ["X" if w in ("the", ",") else "Y" for w in words]}) + "\n")
    tiny = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--eval_strategy", "no", "--save_strategy", "no",
            "--report_to", "none", "--use_cpu", "true", "--model_config", '{"embedding_size": 8, "hidden_size": 8}']  # fmt: skip
    runs = [
        (train_classifier, ["--train_file", str(reviews)]),
        (train_tagger, ["--train_file", str(tagged), "--word_dropout", "0.25"]),
    ]
    for script, data in runs:
        first, second = (
            script.main([*data, *tiny, "--output_dir", str(tmp_path / f"{script.__name__}{attempt}")])
            for attempt in range(2)
        )
        assert first["train_steps"] == second["train_steps"] == 1 and first["vocab_size"] == second["vocab_size"]
        # the same tokens, batches and seed from the cache: the same loss (two model objects)
        torch.testing.assert_close(second["train_loss"], first["train_loss"], rtol=1e-6, atol=1e-7)
        assert second["validation_accuracy"] == first["validation_accuracy"]
    assert len(calls) == 2  # each script tokenized once; its second run read the cache
    assert sorted(p.name.split("-")[0] for p in cache_env.iterdir()) == [
        "train_classifier", "train_classifier_data", "train_classifier_tokenizer",
        "train_tagger", "train_tagger_data", "train_tagger_tokenizer",
    ]  # fmt: skip


@pytest.mark.slow  # ~20 s of CPU: two BPE trainings on the verse corpus
@pytest.mark.data
def test_demo_recipe_on_the_preset_keeps_its_tokens_and_batches(tmp_path):
    """configs/translation_transformer.json on hf_seq/translation (the demo's data): the new path (filter, iterator
    tokenizer, datasets.map) gives the old vocabulary, ids and length-bucket batches, so the demo's run is unchanged."""
    argv = [str(REPO / "configs" / "translation_transformer.json"), "--output_dir", str(tmp_path / "out")]
    model_args, data_args, args, training_args = parse_args(train_translation.TASK, argv)
    tokenizer, tokenized, pairs, _ = train_translation.cached_features(
        model_args, data_args, args, training_args, "en", "es"
    )
    old_tokenizer, old = old_translation_features(model_args, data_args, args)
    assert tokenizer.get_vocab() == old_tokenizer.get_vocab() and len(tokenizer) == 4000
    assert sorted(tokenized) == sorted(old) == ["test", "train", "validation"]
    for split in old:
        for column in ("input_ids", "attention_mask", "labels"):
            assert list(tokenized[split][column]) == list(old[split][column]), (split, column)
    batch = training_args.per_device_train_batch_size
    new_sampler = LengthBucketSampler.from_dataset(tokenized["train"], batch, seed=training_args.seed)
    old_lengths = [max(len(a), len(b)) for a, b in zip(old["train"]["input_ids"], old["train"]["labels"])]
    old_sampler = LengthBucketSampler(old_lengths, batch, seed=training_args.seed)
    for epoch in (0, 1):
        new_sampler.set_epoch(epoch)
        old_sampler.set_epoch(epoch)
        assert list(new_sampler) == list(old_sampler)
    assert len(pairs["test"][0]) == 500


TINY_RUN = [
    "--config_overrides", "hidden_size=16,intermediate_size=32,encoder_layers=1,decoder_layers=1,num_attention_heads=2",
    "--per_device_train_batch_size", "8", "--logging_steps", "1", "--eval_strategy", "no", "--do_predict", "false",
    "--plot_attention", "false", "--save_strategy", "steps", "--warmup_steps", "0", "--learning_rate", "0.01",
]  # fmt: skip


def logged_losses(folder: Path) -> list[float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def test_cached_run_trains_like_the_old_in_memory_lists(tmp_path, monkeypatch):
    """The same per-step losses (length buckets, seed 42) from the cache as from the lists of before."""
    train = write_pairs(tmp_path / "pairs.jsonl", 160)
    argv = [str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train), "--tokenizer_vocab_size",
            "300", "--max_steps", "3", "--save_steps", "3", *TINY_RUN]  # fmt: skip
    train_translation.main([*argv, "--output_dir", str(tmp_path / "cached")])

    def old_path(model_args, data_args, args, training_args, src, tgt):
        tokenizer, tokenized = old_translation_features(model_args, data_args, args)
        return tokenizer, tokenized, {}, "old"

    monkeypatch.setattr(train_translation, "cached_features", old_path)
    train_translation.main([*argv, "--output_dir", str(tmp_path / "old")])
    cached, old = logged_losses(tmp_path / "cached" / "checkpoint-3"), logged_losses(tmp_path / "old" / "checkpoint-3")
    assert len(cached) == 3
    torch.testing.assert_close(torch.tensor(cached), torch.tensor(old), rtol=1e-6, atol=1e-7)


def test_streaming_run_resumed_mid_stream_has_the_same_losses(tmp_path, monkeypatch):
    """20 pairs, 8 a step: the file is read 3.2 times in 8 steps, the passes joined; killed after the checkpoint at
    step 4 (in the second pass), the resumed run has the uninterrupted run's losses, into the fourth pass."""
    from hf_seq.train_scripts.trainer import HfSeqSeq2SeqTrainer

    train = write_pairs(tmp_path / "pairs.jsonl", 20)
    valid = write_pairs(tmp_path / "valid.jsonl", 8, seed=3)
    argv = [str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train), "--validation_file",
            str(valid), "--streaming", "true", "--train_sampling_strategy", "random", "--shuffle_buffer_size", "8",
            "--tokenizer_vocab_size", "300", "--max_steps", "8", "--save_steps", "4", *TINY_RUN]  # fmt: skip
    train_translation.main([*argv, "--output_dir", str(tmp_path / "whole")])
    expected = logged_losses(tmp_path / "whole" / "checkpoint-8")

    original = HfSeqSeq2SeqTrainer.training_step

    def killed_after_the_checkpoint(self, *args, **kwargs):
        if self.state.global_step == 5:
            raise KeyboardInterrupt("killed mid-stream")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(HfSeqSeq2SeqTrainer, "training_step", killed_after_the_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        train_translation.main([*argv, "--output_dir", str(tmp_path / "resumed")])
    monkeypatch.setattr(HfSeqSeq2SeqTrainer, "training_step", original)
    assert (tmp_path / "resumed" / "checkpoint-4").is_dir() and not (tmp_path / "resumed" / "checkpoint-8").exists()
    train_translation.main([*argv, "--output_dir", str(tmp_path / "resumed"), "--resume_from_checkpoint", "last"])
    resumed = logged_losses(tmp_path / "resumed" / "checkpoint-8")
    assert len(expected) == len(resumed) == 8
    torch.testing.assert_close(torch.tensor(resumed), torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_a_pair_without_a_side_is_named_by_its_line(tmp_path):
    from hf_seq.toolkit.data import DataError

    rows = [{"en": "a b", "es": "c d"}, {"en": "e", "es": "f"}, {"en": "g", "es": None}, {"en": "h", "es": "i"}]
    flat = tmp_path / "flat.jsonl"
    flat.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"flat\.jsonl line 3: no 'es' text \(got None\)"):
        features(tmp_path, flat, "--validation_file", str(flat))
    nested = tmp_path / "nested.jsonl"
    nested.write_text("".join(json.dumps({"translation": r}) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"nested\.jsonl line 3: no 'es' text"):
        features(tmp_path, nested, "--validation_file", str(nested))
