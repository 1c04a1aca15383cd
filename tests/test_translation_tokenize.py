"""train_translation's tokenizing map: the backend encoder (``hf_seq.toolkit.tokenization.PairEncoder``, with its
byte-level BPE shortcut) gives the ids of the tokenizer's own ``tokenizer(sources, text_target=targets,
max_length=..., truncation=True)`` call — special tokens, truncation on either side, the target cut, texts with
control characters, added-token spellings and non-ASCII characters included — and ``--preprocessing_num_workers 2``
caches the same features as one process."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hf_seq.train_scripts import train_translation
from hf_seq.train_scripts.arguments import parse_args

from hf_seq.toolkit.tokenization import PairEncoder, build_translation_tokenizer

REPO = Path(__file__).resolve().parent.parent
EN = "the light god said let there be and was good earth water day night it's we'll , . !".split()
ES = "la luz dios dijo sea haya y fue buena tierra agua día noche ¿ ? , .".split()
POOL = [chr(i) for i in range(128)] + [" "] * 40 + list("abXY09") * 6 + ["'s", "'ll", "'re", "  ", "\n", "\x1c", "</s>"]


def sentences(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for k in range(n):
        if k % 3 == 2:  # any ASCII character, the regex's corner cases, an added token spelled in the text
            en, es = ("".join(rng.choice(POOL) for _ in range(rng.randint(0, 30))) for _ in range(2))
        else:
            en = " ".join(rng.choice(EN) for _ in range(rng.randint(1, 16)))
            es = " ".join(rng.choice(ES) for _ in range(rng.randint(1, 16)))
        rows.append({"en": en, "es": es})
    return rows + [{"en": "", "es": ""}, {"en": "<pad>a<unk>", "es": "año </s>"}, {"en": " lead", "es": "\ttab"}]


def reference(tokenizer, sources, targets, max_source_length, max_target_length) -> dict:
    encoded = tokenizer(sources, text_target=targets, max_length=max_source_length, truncation=True)
    return {
        "input_ids": encoded["input_ids"],
        "attention_mask": encoded["attention_mask"],
        "labels": [labels[:max_target_length] for labels in encoded["labels"]],
    }


@pytest.mark.parametrize(
    "kind,lowercase,side", [("bpe", False, "right"), ("bpe", True, "left"), ("word", False, "right")]
)
def test_backend_encoder_gives_the_ids_of_the_tokenizer_call(kind, lowercase, side):
    rng = random.Random(0)
    rows = sentences(rng, 600)
    tokenizer = build_translation_tokenizer(
        rows[:400], kind=kind, vocab_size=300, lowercase=lowercase, truncation_side=side
    )
    assert PairEncoder.usable(tokenizer)
    batch = {"translation": rows}
    sources, targets = [r["en"] for r in rows], [r["es"] for r in rows]
    for max_source_length, max_target_length in ((64, 64), (9, 7), (3, 30), (2, 1), (1, 1)):
        tokenize = train_translation.make_tokenize(
            tokenizer, "en", "es", max_source_length, max_target_length, keep_text=True, arrow=True
        )
        table = tokenize(batch)
        expected = reference(tokenizer, sources, targets, max_source_length, max_target_length)
        for column, ids in expected.items():
            assert table.column(column).to_pylist() == ids, (column, max_source_length, max_target_length)
        assert table.column("source_text").to_pylist() == sources
        # the same as Python lists (a stream's map)
        lists = train_translation.make_tokenize(tokenizer, "en", "es", max_source_length, max_target_length, False)(
            batch
        )
        assert list(lists) == ["input_ids", "attention_mask", "labels"] and lists == expected
    encoder = PairEncoder(tokenizer, 64, 64)
    covered = encoder._words.encode(sources) if encoder._words is not None else [None]
    if kind == "bpe":  # the shortcut took the ASCII rows, the backend the others
        assert sum(row is not None for row in covered) > len(rows) // 2 and None in covered
    else:
        assert encoder._words is None


def test_two_workers_cache_the_features_of_one_process(tmp_path):
    rng = random.Random(1)
    train = tmp_path / "pairs.jsonl"
    rows = sentences(rng, 300)
    train.write_text("".join(json.dumps({"translation": r}) + "\n" for r in rows if r["en"] and r["es"]))
    results = {}
    for workers in (1, 2):
        argv = [str(REPO / "configs" / "translation_transformer.json"), "--train_file", str(train), "--output_dir",
                str(tmp_path / "out"), "--tokenizer_vocab_size", "300", "--max_words", "12", "--max_source_length",
                "9", "--max_target_length", "7", "--max_eval_samples", "6", "--preprocessing_num_workers",
                str(workers), "--cache_dir", str(tmp_path / f"cache{workers}")]  # fmt: skip
        model_args, data_args, args, training_args = parse_args(train_translation.TASK, argv)
        results[workers] = train_translation.cached_features(model_args, data_args, args, training_args, "en", "es")
    (tokenizer, one, pairs, _), (_, two, _, _) = results[1], results[2]
    for split in ("train", "validation"):
        for column in ("input_ids", "attention_mask", "labels"):
            assert list(two[split][column]) == list(one[split][column]), (split, column)
    expected = reference(tokenizer, *pairs["validation"], 9, 7)
    assert list(one["validation"]["input_ids"]) == expected["input_ids"]
    assert list(one["validation"]["labels"]) == expected["labels"]
    assert len(one["train"]) + len(one["validation"]) < len(rows)  # the max_words filter ran
