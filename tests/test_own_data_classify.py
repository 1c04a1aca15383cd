"""train_classifier / train_tagger / finetune_bert on users' data: a few steps on tiny csv, tsv, jsonl, parquet files
and on local ``datasets`` folders; continuing from a saved folder; a transformers BERT checkpoint converted on load;
errors that name the file and its columns; the ``hf-seq-train`` entry point."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from datasets import Sequence as SequenceFeature
from hf_seq.train_scripts import cli, finetune_bert, train_classifier, train_tagger
from own_data import FAST, flags, reviews, tagged, write_splits, write_table
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

from hf_seq.toolkit.data import DataError

ROOT = Path(__file__).resolve().parents[1]
TINY_RNN = ["--model_config", '{"hidden_size": 8, "embedding_size": 8}', "--per_device_train_batch_size", "8"]
REVIEW_COLUMNS = ["--text_column_name", "review", "--label_column_name", "stars"]


def review_files(folder: Path, suffix: str) -> dict[str, str]:
    test = reviews(8, start=32)
    test[0]["review"] += " zebra"  # a word only the test file has
    return write_splits(folder, suffix, {"train": reviews(24), "validation": reviews(8, start=24), "test": test})


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet"])
def test_classifier_trains_on_each_file_type(tmp_path, suffix):
    files = review_files(tmp_path / "data", suffix)
    out = tmp_path / "run"
    results = train_classifier.main([*flags(files), *REVIEW_COLUMNS, *TINY_RNN, *FAST, "--output_dir", str(out)])
    assert results["labels"] == ["neg", "pos"] and results["splits"] == {"train": 24, "validation": 8, "test": 8}
    assert results["train_steps"] == 2 and 0.0 <= results["test_accuracy"] <= 1.0
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.id2label == {0: "neg", 1: "pos"} and model.config.hidden_size == 8
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    assert "boring" in vocab and "zebra" not in vocab  # built on the training split only
    card = (out / "README.md").read_text()
    assert files["--train_file"] in card and "own data files" in card


def test_classifier_on_datasets_folders_and_a_held_out_validation_split(tmp_path):
    features = Features({"review": Value("string"), "stars": ClassLabel(names=["bad", "good"])})

    def as_class_labels(rows):
        return Dataset.from_list([{**r, "stars": int(r["stars"] == "pos")} for r in rows], features=features)

    saved = tmp_path / "saved"  # save_to_disk, no validation split: 25% of the training rows held out
    DatasetDict({"train": as_class_labels(reviews(24)), "test": as_class_labels(reviews(8, 24))}).save_to_disk(saved)
    out = tmp_path / "from_saved"
    results = train_classifier.main(
        ["--dataset_name", str(saved), "--validation_split_percentage", "25", *REVIEW_COLUMNS, *TINY_RNN, *FAST]
        + ["--output_dir", str(out)]
    )
    assert results["splits"] == {"train": 18, "validation": 6, "test": 8} and results["labels"] == ["bad", "good"]
    assert "25% of the training rows held out (seed 42)" in results["data"]
    folder = tmp_path / "files"  # a folder of files named by split, read by datasets.load_dataset
    write_splits(folder, ".jsonl", {"train": reviews(20), "validation": reviews(6, 20)})
    results = train_classifier.main(
        ["--dataset_name", str(folder), *REVIEW_COLUMNS, *TINY_RNN, *FAST, "--output_dir", str(tmp_path / "dir")]
    )
    assert results["splits"] == {"train": 20, "validation": 6} and results["test_accuracy"] is None


def test_classifier_continues_from_a_saved_folder_with_its_tokenizer(tmp_path):
    files = review_files(tmp_path / "data", ".csv")
    first, second = tmp_path / "first", tmp_path / "second"
    train_classifier.main([*flags(files), *REVIEW_COLUMNS, *TINY_RNN, *FAST, "--output_dir", str(first)])
    train_classifier.main(
        [*flags(files), *REVIEW_COLUMNS, *FAST, "--model_name_or_path", str(first), "--learning_rate", "0"]
        + ["--max_steps", "1", "--output_dir", str(second)]
    )
    before, after = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()
    assert json.loads((second / "results.json").read_text())["model_name_or_path"] == str(first)


def test_classifier_data_errors_name_the_file_and_its_columns(tmp_path):
    files = review_files(tmp_path / "data", ".csv")
    base = [*flags(files), *TINY_RNN, *FAST, "--output_dir", str(tmp_path / "run")]
    with pytest.raises(DataError, match=r"train\.csv has no column 'text' \(`text_column_name`\); its columns are "):
        train_classifier.main([*base, "--label_column_name", "stars"])
    with pytest.raises(DataError, match=r"\['review', 'stars'\]"):
        train_classifier.main([*base, "--text_column_name", "review", "--label_column_name", "score"])
    with pytest.raises(DataError, match=r"column 'stars' \(`text_column_name`\) must hold text \(strings\)"):
        numbers = write_table(tmp_path / "numbers.csv", [{"stars": i % 2, "review": "x"} for i in range(8)])
        train_classifier.main(
            ["--train_file", str(numbers), "--text_column_name", "stars", "--label_column_name", "review", *FAST]
        )
    unseen = reviews(8, start=32)
    unseen[3]["stars"] = "meh"
    test = write_table(tmp_path / "unseen.jsonl", unseen)
    with pytest.raises(
        DataError, match=r"unseen\.jsonl: column 'stars' .* label\(s\) \['meh'\] that the training data"
    ):
        train_classifier.main([*base, *REVIEW_COLUMNS, "--test_file", str(test)])
    holes = tmp_path / "holes.csv"
    holes.write_text("review,stars\ngood film,pos\nbad film,\nfine,pos\n")
    with pytest.raises(
        DataError, match=r"holes\.csv line 3: column 'stars' \(`label_column_name`\) is empty \(it is empty in 1 row"
    ):
        train_classifier.main(["--train_file", str(holes), *REVIEW_COLUMNS, *FAST])
    single = write_table(tmp_path / "single.csv", [{"review": "x", "stars": "pos"}] * 6)
    with pytest.raises(DataError, match="a single label"):
        train_classifier.main(["--train_file", str(single), *REVIEW_COLUMNS, *FAST])


TINY_TAGGER = ["--model_config", '{"hidden_size": 8, "embedding_size": 8, "bidirectional": true}']


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_tagger_trains_on_each_file_type(tmp_path, suffix):
    test = tagged(6, start=40)
    test[0]["tokens"][1] = "zebra"  # a word only the test file has: out of vocabulary
    files = write_splits(tmp_path / "data", suffix, {"train": tagged(30), "validation": tagged(6, 30), "test": test})
    out = tmp_path / "run"
    results = train_tagger.main([*flags(files), *TINY_TAGGER, *FAST, "--output_dir", str(out)])
    assert results["tags"] == [".", "ADJ", "DET", "NOUN", "VERB"] and results["test_tokens"] == sum(
        len(r["tokens"]) for r in test
    )
    assert 0.0 < results["test_oov_rate"] < 0.1
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert model.config.label2id["NOUN"] == 3 and model.config.bidirectional


def test_tagger_on_a_saved_dataset_with_class_label_tags_and_run_ner_flags(tmp_path):
    names = ["NOUN", "VERB", "DET", "ADJ", "."]  # the data set's order, not sorted
    features = Features({"words": SequenceFeature(Value("string")), "pos": SequenceFeature(ClassLabel(names=names))})

    def encode(rows):
        return Dataset.from_list(
            [{"words": r["words"], "pos": [names.index(t) for t in r["pos"]]} for r in rows], features=features
        )

    saved = tmp_path / "saved"
    DatasetDict(
        {"train": encode(tagged(20, words="words", tags="pos")), "valid": encode(tagged(5, 20, "words", "pos"))}
    ).save_to_disk(saved)
    # run_ner.py's flags: --text_column_name (the words) and --label_column_name (the tags)
    results = train_tagger.main(
        ["--dataset_name", str(saved), "--text_column_name", "words", "--label_column_name", "pos", *TINY_TAGGER]
        + [*FAST, "--output_dir", str(tmp_path / "run")]
    )
    assert results["tags"] == names and results["splits"] == {"train": 20, "validation": 5}
    assert AutoModelForTokenClassification.from_pretrained(tmp_path / "run").config.id2label[0] == "NOUN"


def test_tagger_data_errors_name_the_file(tmp_path):
    files = write_splits(tmp_path / "ok", ".jsonl", {"train": tagged(12), "validation": tagged(4, 12)})
    base = [*TINY_TAGGER, *FAST, "--output_dir", str(tmp_path / "run")]
    flat = write_table(tmp_path / "flat.csv", [{"tokens": "the cat sees a dog", "tags": "DET NOUN"}] * 4)
    with pytest.raises(DataError, match=r"flat\.csv: column 'tokens' \(`tokens_column_name`\) must hold one list"):
        train_tagger.main(["--train_file", str(flat), *base])
    short = tagged(4, 12)
    short[2]["tags"] = short[2]["tags"][:-1]
    short_file = write_table(tmp_path / "short.jsonl", short)
    with pytest.raises(DataError, match=r"short\.jsonl line 3: 6 words \('tokens'\) but 5 tags"):
        train_tagger.main(["--train_file", files["--train_file"], "--validation_file", str(short_file), *base])
    odd = tagged(4, 12)
    odd[1]["tags"][0] = "INTJ"
    odd_file = write_table(tmp_path / "odd.jsonl", odd)
    with pytest.raises(DataError, match=r"odd\.jsonl: column 'tags' .* label\(s\) \['INTJ'\]"):
        train_tagger.main([*flags(files), "--test_file", str(odd_file), *base])
    with pytest.raises(
        DataError, match=r"has no column 'pos' \(`tags_column_name`\); its columns are \['tokens', 'tags'\]"
    ):
        train_tagger.main([*flags(files), "--tags_column_name", "pos", *base])


@pytest.fixture(scope="module")
def transformers_bert(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    """A tiny randomly initialised ``transformers`` BertForMaskedLM saved with a WordPiece tokenizer."""
    import transformers

    from hf_seq.toolkit.tokenization import build_wordpiece_tokenizer

    folder = tmp_path_factory.mktemp("transformers_bert")
    texts = [r["review"] for r in reviews(40)] + [" ".join(r["tokens"]) for r in tagged(20)]
    tokenizer = build_wordpiece_tokenizer(texts, vocab_size=120, min_frequency=1)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def test_finetune_bert_converts_a_transformers_checkpoint_for_both_tasks(tmp_path, transformers_bert):
    from hf_seq.toolkit.bert_conversion import convert_transformers_bert_state_dict

    folder, source = transformers_bert
    expected = convert_transformers_bert_state_dict(source.state_dict(), source.config.num_hidden_layers)
    no_update = ["--model_name_or_path", str(folder), "--learning_rate", "0", "--max_seq_length", "32", *FAST]
    files = review_files(tmp_path / "reviews", ".csv")
    out = tmp_path / "sentiment"
    results = finetune_bert.main([*flags(files), *REVIEW_COLUMNS, *no_update, "--output_dir", str(out)])
    saved = load_file(out / "model.safetensors")
    shared = [k for k in expected if k in saved]
    assert len(shared) > 10 and all(torch.equal(saved[k], expected[k]) for k in shared)  # the converted encoder
    assert results["model_type"] == "hf_seq_bert" and results["labels"] == ["neg", "pos"]
    assert f"Fine-tuned from `{folder}`" in (out / "README.md").read_text()
    files = write_splits(tmp_path / "tags", ".jsonl", {"train": tagged(16), "validation": tagged(4, 16)})
    out = tmp_path / "pos"
    results = finetune_bert.main(
        [*flags(files), "--task", "token-classification", *no_update, "--output_dir", str(out)]
    )
    model = AutoModelForTokenClassification.from_pretrained(out)
    assert type(model).__name__ == "BertForTokenClassification" and model.config.num_labels == 5
    assert torch.equal(model.get_input_embeddings().weight, source.get_input_embeddings().weight)


def test_hf_seq_train_entry_point(tmp_path, capsys):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # the console script runs hf_seq_cli (text-only commands without torch), which hands every run to this cli.main
    assert pyproject["project"]["scripts"]["hf-seq-train"] == "hf_seq_cli:train"
    # installed by `pip install .` under the hf_seq namespace, from the clone's train_scripts/ folder
    assert pyproject["tool"]["setuptools"]["package-dir"]["hf_seq.train_scripts"] == "train_scripts"
    assert "train_scripts" not in pyproject["tool"]["setuptools"]["packages"]
    assert cli.main(["--help"]) == 0 and "classifier, tagger, lm, translation" in capsys.readouterr().out
    assert cli.main(["no_such_task"]) == 2 and "unknown task 'no_such_task'" in capsys.readouterr().err
    files = review_files(tmp_path / "data", ".jsonl")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "hf_seq.train_scripts",
        "classifier",
        *flags(files),
        *REVIEW_COLUMNS,
        *TINY_RNN,
        *FAST,
    ]
    run = subprocess.run([*command, "--output_dir", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["command"].startswith("hf-seq-train classifier --train_file ")
    assert results["command"] in (out / "README.md").read_text()


def test_pretrain_bert_continues_a_transformers_checkpoint(tmp_path, transformers_bert):
    from hf_seq.train_scripts import pretrain_bert
    from own_data import documents

    from hf_seq.toolkit.bert_conversion import convert_transformers_bert_state_dict

    folder, source = transformers_bert
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join("\n".join(doc) for doc in documents(8, sentences=6)) + "\n")
    out = tmp_path / "continued"
    results = pretrain_bert.main(
        ["--train_file", str(corpus), "--model_name_or_path", str(folder), "--learning_rate", "0"]
        + ["--max_seq_length", "32", "--validation_split_percentage", "25", *FAST, "--output_dir", str(out)]
    )
    saved = load_file(out / "model.safetensors")
    expected = convert_transformers_bert_state_dict(source.state_dict(), source.config.num_hidden_layers)
    shared = [k for k in expected if k in saved]
    assert len(shared) > 10 and all(torch.equal(saved[k], expected[k]) for k in shared)
    assert results["model_name_or_path"] == str(folder) and results["pairs"]["validation"] > 0


# ---------------------------------------------------------------------------------------------------------------
# labels that differ only in case or surrounding spaces: named in one warning; folded by --normalize_labels
# ---------------------------------------------------------------------------------------------------------------
VARIANTS = {"pos": ["pos", "Pos", " pos"], "neg": ["neg", "neg ", "NEG"]}


def _variant_reviews(n: int, start: int = 0) -> list[dict]:
    rows = reviews(n, start=start)
    for i, row in enumerate(rows):
        row["stars"] = VARIANTS[row["stars"]][i // 2 % 3]
    return rows


def test_labels_that_differ_in_case_or_spaces_are_named_and_folded_by_a_flag(tmp_path, capsys):
    """The issue's case: `pos`, `Pos`, `" pos"`, `neg`, `"neg "`, `NEG` made a six-class model without a word. Now one
    warning names the colliding values and the flag; with `--normalize_labels true` the model has two classes."""
    splits = {"train": _variant_reviews(24), "validation": _variant_reviews(12, start=24)}
    files = flags(write_splits(tmp_path / "data", ".jsonl", splits))
    common = [*files, *REVIEW_COLUMNS, *TINY_RNN, *FAST, "--cache_dir", "none"]
    results = train_classifier.main([*common, "--output_dir", str(tmp_path / "as_is")])
    warned = [line for line in capsys.readouterr().err.splitlines() if "differ only in case" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "train.jsonl" in warned[0], warned
    assert "(' pos' / 'Pos' / 'pos'; 'NEG' / 'neg' / 'neg ')" in warned[0], warned[0]
    assert "`--normalize_labels true`" in warned[0] and len(results["labels"]) == 6
    folded = train_classifier.main([*common, "--normalize_labels", "true", "--output_dir", str(tmp_path / "folded")])
    assert folded["labels"] == ["neg", "pos"] and "differ only in case" not in capsys.readouterr().err
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path / "folded")
    assert model.config.id2label == {0: "neg", 1: "pos"}


def test_tags_that_differ_in_case_are_named_and_folded_too(tmp_path):
    """The neighbour: a tagger's tags (`NOUN` / `noun`), checked by the same label reader; and the lookup of a
    validation split whose tags are written another way."""
    from datasets import DatasetDict
    from hf_seq.train_scripts.common import label_lookup, label_names

    train = Dataset.from_list([{"tags": ["DET", "NOUN"]}, {"tags": ["DET", "noun "]}])
    validation = Dataset.from_list([{"tags": ["det", "Noun"]}])
    splits = DatasetDict(train=train, validation=validation)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(DataError, match=r"\['Noun', 'det'\] that the training"):
        label_names(splits, "tags", "tags_column_name", nested=True)
    assert "('NOUN' / 'noun ')" in err.getvalue() and "`tags_column_name`" in err.getvalue()
    names = label_names(splits, "tags", "tags_column_name", nested=True, normalize=True)
    assert names == ["det", "noun"]
    lookup = label_lookup(validation, "tags", names, nested=True, normalize=True)
    assert lookup(validation[0]["tags"]) == [0, 1]
