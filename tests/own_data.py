"""Tiny synthetic data in users' file formats for the front-door tests (csv, tsv, jsonl, parquet, txt, folders)."""

from __future__ import annotations

import itertools
from pathlib import Path

from datasets import Dataset

POSITIVE = ["a wonderful moving film", "great acting and a fine story", "funny warm and clever", "moving and wise"]
NEGATIVE = ["dull and far too long", "a boring mess", "flat acting and a weak plot", "tedious and silly"]

# options shared by every tiny run: a few steps, no checkpoints, quiet
FAST = ["--max_steps", "2", "--report_to", "none", "--disable_tqdm", "true", "--save_strategy", "no"]


def write_table(path: Path, rows: list[dict]) -> Path:
    """``rows`` as a csv / tsv / jsonl / json (JSON lines) / parquet file, by suffix."""
    dataset = Dataset.from_list(rows)
    if path.suffix == ".csv":
        dataset.to_csv(path, index=False)
    elif path.suffix == ".tsv":
        dataset.to_csv(path, index=False, sep="\t")
    elif path.suffix in (".jsonl", ".json"):
        dataset.to_json(path, lines=True)
    elif path.suffix == ".parquet":
        dataset.to_parquet(path)
    else:
        raise ValueError(path)
    return path


def write_splits(folder: Path, suffix: str, splits: dict[str, list[dict]]) -> dict[str, str]:
    """One file per split (``train<suffix>``, ...) and the ``--<split>_file`` flags pointing at them."""
    folder.mkdir(parents=True, exist_ok=True)
    return {f"--{split}_file": str(write_table(folder / f"{split}{suffix}", rows)) for split, rows in splits.items()}


def flags(mapping: dict[str, str]) -> list[str]:
    return [item for pair in mapping.items() for item in pair]


def reviews(n: int, start: int = 0, text: str = "review", label: str = "stars") -> list[dict]:
    """Alternating negative / positive snippets with labels "neg" / "pos"."""
    rows = []
    for i in range(start, start + n):
        positive = i % 2 == 1
        pool = POSITIVE if positive else NEGATIVE
        rows.append({text: f"{pool[i // 2 % len(pool)]} {i % 5}", label: "pos" if positive else "neg"})
    return rows


DET, ADJ, NOUN, VERB = ["the", "a"], ["big", "red", "old"], ["cat", "dog", "film", "plan"], ["sees", "likes"]


def tagged(n: int, start: int = 0, words: str = "tokens", tags: str = "tags") -> list[dict]:
    """Sentences of a toy grammar (DET [ADJ] NOUN VERB DET NOUN .) with one tag per word."""
    rows = []
    for i in range(start, start + n):
        pattern = [(DET, "DET"), (NOUN, "NOUN"), (VERB, "VERB"), (DET, "DET"), (NOUN, "NOUN")]
        if i % 2:
            pattern.insert(1, (ADJ, "ADJ"))
        sentence = [(pool[(i + k) % len(pool)], tag) for k, (pool, tag) in enumerate(pattern)] + [(".", ".")]
        rows.append({words: [w for w, _ in sentence], tags: [t for _, t in sentence]})
    return rows


POEM = (
    "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n"
    "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date;\n"
)

NUMBERS = {"one": "un", "two": "deux", "three": "trois", "four": "quatre", "five": "cinq"}


def number_pairs(n: int, start: int = 0) -> list[dict]:
    """English -> French number sequences as ``translation`` dicts."""
    words = list(NUMBERS)
    rows = []
    for i, combo in enumerate(itertools.islice(itertools.product(words, repeat=3), start, start + n)):
        rows.append({"translation": {"en": " ".join(combo), "fr": " ".join(NUMBERS[w] for w in combo)}, "id": i})
    return rows


def documents(n: int, sentences: int = 4, start: int = 0) -> list[list[str]]:
    """``n`` documents of ``sentences`` toy sentences each."""
    return [[" ".join(row["tokens"]) for row in tagged(sentences, start=start + d * sentences)] for d in range(n)]


def count_builds(monkeypatch) -> list:
    """The folders of every feature cache built while the test runs (``FeatureCache.build`` wrapped)."""
    from hf_seq.train_scripts import features as features_module

    calls = []
    original = features_module.FeatureCache.build

    def counting(self, *a, **k):
        calls.append(self.folder)
        return original(self, *a, **k)

    monkeypatch.setattr(features_module.FeatureCache, "build", counting)
    return calls
