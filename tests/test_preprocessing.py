"""hf_seq.toolkit.preprocessing: the memory-mapped token store, text files read as datasets reads them, tokenization with
worker processes equal to the tokenizer, the keyed cache (reuse, invalidation, truncated files rebuilt) and the
tokenizer builders on iterators."""

from __future__ import annotations

import os
import random

import datasets
import numpy as np
import pytest

from hf_seq.toolkit import preprocessing as pp
from hf_seq.toolkit.tokenization import build_char_tokenizer, build_word_level_tokenizer

WORDS = ["the", "cat", "<unk>", "dog", "N", "a", "b", "sat", "on", "mat", "é", "日本"]


def write_text(path, lines: int = 400, seed: int = 0, newline: str = "\n", last_newline: bool = False) -> str:
    rng = random.Random(seed)
    rows = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 9))) for _ in range(lines)]
    path.write_bytes((newline.join(rows) + (newline if last_newline else "")).encode())
    return str(path)


def word_tokenizer(texts):
    return build_word_level_tokenizer(
        texts,
        lowercase=False,
        special_tokens=("<pad>", "<unk>", "<eos>"),
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<eos>",
        pre_tokenizer="whitespace",
    )


def rows(store) -> list[list[int]]:
    return [store[i].tolist() for i in range(len(store))]


def test_token_store_rows_lengths_and_dtype(tmp_path):
    writer = pp.TokenStoreWriter(tmp_path / "s", vocab_size=100)
    writer.add([[1, 2, 3], [], [99]])
    writer.add_flat(np.array([4, 5]), np.array([1, 1]))
    store = writer.close()
    assert store.dtype == np.uint16 and len(store) == 5 and store.num_tokens == 6
    assert rows(store) == [[1, 2, 3], [], [99], [4], [5]]
    assert store.lengths().tolist() == [3, 0, 1, 1, 1]
    assert store.flat.tolist() == [1, 2, 3, 99, 4, 5]
    assert store[-1].tolist() == [5]
    with pytest.raises(IndexError):
        store[5]
    big = pp.TokenStoreWriter(tmp_path / "big", vocab_size=70_000)
    big.add([[69_999, 0]])
    assert big.close().dtype == np.uint32
    bad = pp.TokenStoreWriter(tmp_path / "bad", vocab_size=10)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        bad.add([[10]])
    joined = pp.concatenate_stores([store, pp.TokenStore(tmp_path / "big")], tmp_path / "joined")
    assert rows(joined) == rows(store) + [[69_999, 0]] and joined.dtype == np.uint32
    picked = pp.select_rows(store, np.array([True, False, True, True, False]), tmp_path / "picked")
    assert rows(picked) == [[1, 2, 3], [99], [4]]


@pytest.mark.parametrize("newline,last", [("\n", True), ("\n", False), ("\r\n", True)])
def test_text_file_lines_as_datasets_reads_them(tmp_path, newline, last):
    path = write_text(tmp_path / "a.txt", newline=newline, last_newline=last)
    expected = datasets.load_dataset(
        "text", data_files={"train": path}, split="train", keep_linebreaks=True, cache_dir=str(tmp_path / "hf")
    )["text"]
    lines = [line for batch in pp.iter_text_file_lines(path) for line in batch]
    assert lines == expected
    assert pp.count_text_file_lines(path) == len(expected)
    ranges = pp.text_file_ranges(path, 3)
    assert ranges[0][0] == 0 and ranges[-1][1] == os.path.getsize(path)
    pieces = [line for start, end in ranges for batch in pp.iter_text_file_lines(path, start, end) for line in batch]
    assert pieces == expected  # ranges split at line starts


def test_tokenize_text_file_and_dataset_equal_the_tokenizer(tmp_path):
    path = write_text(tmp_path / "a.txt", lines=300)
    lines = [line for batch in pp.iter_text_file_lines(path) for line in batch]
    words = word_tokenizer(lines)
    eos = words.eos_token_id
    expected = [ids + [eos] for ids in words(lines, add_special_tokens=False)["input_ids"]]
    one = pp.tokenize_text_file(path, words, tmp_path / "w1", num_workers=1, append_id=eos)
    two = pp.tokenize_text_file(path, words, tmp_path / "w2", num_workers=2, append_id=eos)
    assert rows(one) == expected and rows(two) == expected
    dataset = datasets.Dataset.from_dict({"text": lines})
    from_dataset = pp.tokenize_dataset(dataset, "text", words, tmp_path / "d2", num_workers=2, append_id=eos)
    assert rows(from_dataset) == expected
    chars = build_char_tokenizer(lines[:50])  # characters unseen there are [UNK]
    char_store = pp.tokenize_text_file(path, chars, tmp_path / "c", chars=True)
    assert rows(char_store) == chars(lines, add_special_tokens=False)["input_ids"]
    assert isinstance(pp.make_encoder(chars, chars=True), pp.CharLookup)


def test_fingerprints_change_with_the_file_and_the_tokenizer(tmp_path):
    path = write_text(tmp_path / "a.txt")
    first = pp.fingerprint_files([path])
    assert pp.fingerprint_files([path]) == first
    with open(path, "ab") as f:
        f.write(b"more\n")
    assert pp.fingerprint_files([path]) != first
    lines = open(path).read().splitlines()
    assert pp.tokenizer_fingerprint(word_tokenizer(lines)) == pp.tokenizer_fingerprint(word_tokenizer(lines))
    assert pp.tokenizer_fingerprint(word_tokenizer(lines)) != pp.tokenizer_fingerprint(word_tokenizer(lines[:3]))
    assert pp.preprocessing_cache_dir({"a": 1}, tmp_path) != pp.preprocessing_cache_dir({"a": 2}, tmp_path)


def test_cached_build_reuses_rebuilds_truncated_and_overwrites(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_SEQ_CACHE", str(tmp_path / "env_cache"))
    path = write_text(tmp_path / "a.txt")
    tokenizer = word_tokenizer(open(path).read().splitlines())
    builds = []

    def build(folder):
        builds.append(folder)
        pp.tokenize_text_file(path, tokenizer, folder / "train", append_id=tokenizer.eos_token_id)
        return {"note": "x"}

    key = {"task": "test", "data": pp.fingerprint_files([path])}
    folder, reused = pp.cached_build(key, build)
    assert not reused and folder.parent == tmp_path / "env_cache" and pp.cache_is_complete(folder)
    meta = pp.read_meta(folder)
    assert meta["note"] == "x" and meta["files"]["train/tokens.bin"] == (folder / "train/tokens.bin").stat().st_size
    again, reused = pp.cached_build(key, build)
    assert again == folder and reused and len(builds) == 1
    assert "reusing" in capsys.readouterr().out
    tokens = folder / "train" / "tokens.bin"
    with open(tokens, "r+b") as f:
        f.truncate(tokens.stat().st_size - 2)
    assert not pp.cache_is_complete(folder)
    _, reused = pp.cached_build(key, build)
    assert not reused and len(builds) == 2 and pp.cache_is_complete(folder)
    assert "incomplete or corrupt" in capsys.readouterr().out
    (folder / "meta.json").unlink()  # a build interrupted before its last step
    _, reused = pp.cached_build(key, build)
    assert not reused and len(builds) == 3
    _, reused = pp.cached_build(key, build, overwrite=True)
    assert not reused and len(builds) == 4
    assert "overwrite_cache" in capsys.readouterr().out

    def failing(folder):
        (folder / "half").write_text("x")
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        pp.cached_build({"task": "test", "other": 1}, failing)
    assert not pp.preprocessing_cache_dir({"task": "test", "other": 1}).exists()
    assert not [p for p in (tmp_path / "env_cache").iterdir() if p.name.endswith(".tmp")]


def test_builders_take_iterators_with_the_same_vocabulary():
    rng = random.Random(3)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(200)]
    listed = build_word_level_tokenizer(texts, max_vocab_size=9)  # frequency ties broken alphabetically
    streamed = build_word_level_tokenizer(iter(texts), max_vocab_size=9)
    assert listed.get_vocab() == streamed.get_vocab()
    assert build_char_tokenizer(texts).get_vocab() == build_char_tokenizer(t for t in texts).get_vocab()


def test_holdout_mask_is_the_in_memory_hold_out():
    from hf_seq.toolkit.data import hold_out_validation

    dataset = datasets.Dataset.from_dict({"text": [str(i) for i in range(101)]})
    splits = hold_out_validation(datasets.DatasetDict({"train": dataset}), 5, seed=7)
    mask = pp.holdout_mask(101, 5, seed=7)
    assert [str(i) for i in np.flatnonzero(mask)] == splits["validation"]["text"]


@pytest.mark.parametrize("rows,percentage,seed", [(2, 5, 0), (101, 5, 7), (1000, 10, 42), (12_345, 2.5, 3)])
def test_holdout_mask_chooses_the_rows_of_a_shuffled_list(rows, percentage, seed):
    order = list(range(rows))  # the in-memory hold-out's shuffle, on a list of every row index
    random.Random(seed).shuffle(order)
    expected = np.zeros(rows, dtype=bool)
    expected[order[: max(1, int(round(rows * percentage / 100)))]] = True
    mask = pp.holdout_mask(rows, percentage, seed)
    assert mask.dtype == bool and mask.tolist() == expected.tolist()


@pytest.mark.parametrize("block_rows,block_tokens", [(3, 5), (4, 1000), (1 << 18, 1 << 22)])
def test_store_copies_in_blocks_equal_the_rows(tmp_path, monkeypatch, block_rows, block_tokens):
    monkeypatch.setattr(pp, "_COPY_ROWS", block_rows)
    monkeypatch.setattr(pp, "_COPY_TOKENS", block_tokens)
    rng = np.random.default_rng(0)
    data = [rng.integers(0, 300, rng.choice([0, 1, 3, 12])).tolist() for _ in range(57)]
    writer = pp.TokenStoreWriter(tmp_path / "s", vocab_size=300)
    for k in range(0, len(data), 10):
        writer.add(data[k : k + 10])
    store = writer.close()
    assert rows(store) == data and store.offsets.tolist() == np.cumsum([0] + [len(r) for r in data]).tolist()
    keep = rng.random(len(data)) < 0.4
    picked = pp.select_rows(store, keep, tmp_path / "picked")
    assert rows(picked) == [r for r, k in zip(data, keep, strict=True) if k]
    assert rows(pp.select_rows(store, np.zeros(len(data), bool), tmp_path / "none")) == []
    wide = pp.TokenStoreWriter(tmp_path / "wide", vocab_size=70_000)
    wide.add([[69_999], [], [5, 6]])
    joined = pp.concatenate_stores([store, wide.close(), picked], tmp_path / "joined")
    assert rows(joined) == data + [[69_999], [], [5, 6]] + rows(picked) and joined.dtype == np.uint32
    with pytest.raises(ValueError, match="mask of 3 rows"):
        pp.select_rows(store, np.ones(3, bool), tmp_path / "bad")


def test_word_shortcut_gives_the_backend_ids_on_awkward_text():
    rng = random.Random(1)
    words = word_tokenizer(["a the <unk> é x"])
    encoder = pp.make_encoder(words)
    assert encoder._words is not None  # the whitespace word-level shortcut applies
    pieces = ["a", "the", "<unk>", "<eos>", "<pad>", " ", "\t", "\n", "\x1c", "\u00a0", "\u2003", "x<eos>", "<unk>y"]
    pieces += ["\u3000", "é", "\x85", "\u200b", "\x0b", "<unk><unk>"]
    for _ in range(300):
        texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) for _ in range(4)]
        fast, reference = encoder.encode(texts, 2), pp.encode_texts(words.backend_tokenizer, texts, 2)
        assert fast[0].tolist() == reference[0].tolist() and fast[1].tolist() == reference[1].tolist(), texts


def test_bert_documents_in_a_store_give_the_same_anchors_and_pairs(tmp_path):
    import torch

    from hf_seq.toolkit.collators import (
        DataCollatorForBertPretraining,
        bert_pretraining_anchors,
        tokenize_documents,
        tokenize_documents_to_store,
    )
    from hf_seq.toolkit.tokenization import build_wordpiece_tokenizer

    rng = random.Random(5)
    sentence = lambda: " ".join(rng.choice(WORDS[:10]) for _ in range(rng.randint(0, 12)))  # noqa: E731
    documents = [[sentence() for _ in range(rng.randint(1, 9))] for _ in range(40)]
    documents[3] = [[sentence(), "  "], [sentence()]]  # paragraphs, a blank sentence
    tokenizer = build_wordpiece_tokenizer([s for d in documents for s in d if isinstance(s, str)], vocab_size=60)
    lists = tokenize_documents(documents, tokenizer)
    stored = tokenize_documents_to_store(documents, tokenizer, tmp_path / "docs", batch_documents=7)
    assert len(stored) == len(lists)
    assert [[stored[d][j] for j in range(len(stored[d]))] for d in range(len(stored))] == lists
    for max_length in (8, 16, 40):
        expected = bert_pretraining_anchors(lists, max_length)
        got = bert_pretraining_anchors(stored, max_length)
        assert got["doc_index"].tolist() == expected["doc_index"]
        assert got["sentence_index"].tolist() == expected["sentence_index"]
    anchors = bert_pretraining_anchors(lists, 16)
    features = [{"doc_index": d, "sentence_index": s} for d, s in zip(anchors["doc_index"], anchors["sentence_index"])]
    a = DataCollatorForBertPretraining(tokenizer, lists, max_length=16, seed=3)
    b = DataCollatorForBertPretraining(tokenizer, stored, max_length=16, seed=3)
    for start in range(0, len(features), 8):
        x, y = a(features[start : start + 8]), b(features[start : start + 8])
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
