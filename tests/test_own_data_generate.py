"""train_lm / train_translation / pretrain_bert / train_word_vectors on users' data: a few steps on tiny txt, csv,
jsonl, parquet files and on local ``datasets`` folders, and errors that name the file and its columns."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset, DatasetDict, Features, Translation, Value
from hf_seq.train_scripts import pretrain_bert, train_lm, train_translation, train_word_vectors
from hf_seq.train_scripts.errors import RecipeError
from own_data import FAST, POEM, documents, flags, number_pairs, write_splits, write_table
from transformers import AutoModelForPreTraining, AutoModelForSeq2SeqLM, AutoTokenizer

from hf_seq.toolkit.data import DataError, load_data

TINY_LM = [
    "--model_config",
    '{"hidden_size": 8, "embedding_size": 8}',
    "--segment_length",
    "16",
    "--per_device_train_batch_size",
    "4",
    "--sample_length",
    "5",
    "--sample_temperatures",
    "1.0",
    "--eval_streams",
    "2",
]
LINES = POEM.splitlines(keepends=True) * 3


@pytest.mark.parametrize("suffix", [".txt", ".csv", ".jsonl", ".parquet"])
def test_lm_trains_on_each_file_type(tmp_path, suffix):
    """Char level: the split is the texts concatenated as they are; a txt file is read exactly as written."""
    folder = tmp_path / "data"
    if suffix == ".txt":
        folder.mkdir()
        files = {}
        for split, part in (("train", LINES[:8]), ("validation", LINES[8:10]), ("test", LINES[10:])):
            (folder / f"{split}.txt").write_text("".join(part))
            files[f"--{split}_file"] = str(folder / f"{split}.txt")
    else:
        rows = [{"line": line} for line in LINES]
        files = write_splits(folder, suffix, {"train": rows[:8], "validation": rows[8:10], "test": rows[10:]})
    column = [] if suffix == ".txt" else ["--text_column_name", "line"]
    out = tmp_path / "run"
    results = train_lm.main([*flags(files), *column, *TINY_LM, *FAST, "--output_dir", str(out)])
    assert results["train_tokens_available"] == len("".join(LINES[:8]))  # every character, newlines included
    n_test = len("".join(LINES[10:]))
    assert results["test_carried_tokens"] == 2 * ((n_test - 1) // 2)  # 2 streams of (n - 1) // 2 predicted chars
    assert results["train_steps"] == 2 and (out / "samples.txt").is_file() and (out / "model.safetensors").is_file()


def test_lm_word_level_on_a_folder_of_txt_files_with_a_held_out_validation_split(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "train.txt").write_text("".join(LINES))
    out = tmp_path / "run"
    results = train_lm.main(
        ["--dataset_name", str(folder), "--level", "word", "--validation_split_percentage", "25", *TINY_LM, *FAST]
        + ["--output_dir", str(out)]
    )
    assert "25% of the training texts held out (seed 42)" in results["data"]
    train_lines = load_data(str(folder), validation_split_percentage=25)["train"]["text"]
    assert len(train_lines) == len(LINES) - round(len(LINES) / 4)
    # word level: every line is its words and one <eos>
    assert results["train_tokens_available"] == sum(len(line.split()) + 1 for line in train_lines)
    assert "<eos>" in AutoTokenizer.from_pretrained(out).get_vocab()


def test_lm_errors_name_the_file(tmp_path):
    rows = write_table(tmp_path / "rows.csv", [{"body": line} for line in LINES])
    with pytest.raises(
        DataError, match=r"rows\.csv has no column 'text' \(`text_column_name`\); its columns are \['body'\]"
    ):
        train_lm.main(["--train_file", str(rows), *TINY_LM, *FAST, "--output_dir", str(tmp_path / "run")])


TINY_SEQ2SEQ = [
    "--model_type",  # the default recipe of translation is a Transformer's
    "hf_seq_rnn_seq2seq",
    "--model_config",
    '{"embedding_size": 8, "hidden_size": 8, "attention": "dot"}',
    "--tokenizer_kind",
    "word",
    "--source_lang",
    "en",
    "--target_lang",
    "fr",
    "--per_device_train_batch_size",
    "8",
    "--max_predict_samples",
    "4",
    "--max_eval_samples",
    "4",
    "--test_num_beams",
    "1",
    "--predict_with_generate",
    "true",
    "--generation_max_length",
    "8",
    "--do_train",
    "true",
    "--do_predict",
    "true",
]


@pytest.mark.parametrize("layout", ["jsonl", "parquet", "csv_columns", "save_to_disk"])
def test_translation_trains_on_each_layout(tmp_path, layout):
    rows = {"train": number_pairs(40), "validation": number_pairs(8, 40), "test": number_pairs(8, 48)}
    if layout == "csv_columns":  # flat columns named by --source_lang / --target_lang
        flat = {
            s: [{"en": r["translation"]["en"], "fr": r["translation"]["fr"]} for r in part] for s, part in rows.items()
        }
        data = flags(write_splits(tmp_path / "data", ".csv", flat))
    elif layout == "save_to_disk":
        features = Features({"translation": Translation(languages=["en", "fr"]), "id": Value("int64")})
        folder = tmp_path / "saved"
        DatasetDict({s: Dataset.from_list(part, features=features) for s, part in rows.items()}).save_to_disk(folder)
        data = ["--dataset_name", str(folder)]
    else:
        data = flags(write_splits(tmp_path / "data", f".{layout}", rows))
    out = tmp_path / "run"
    results = train_translation.main([*data, *TINY_SEQ2SEQ, *FAST, "--output_dir", str(out)])
    assert results["data"]["train_pairs"] == 40 and results["data"]["test_pairs"] == 4
    assert 0.0 <= results["test_greedy"]["test_bleu"] <= 100.0 and results["train"]["global_steps"] == 2
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(out), AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer) and "quatre" in tokenizer.get_vocab()
    assert "(en -> fr)" in (out / "README.md").read_text()


def test_translation_errors_name_the_file_and_its_keys(tmp_path):
    files = flags(write_splits(tmp_path / "data", ".jsonl", {"train": number_pairs(10)}))
    base = [*TINY_SEQ2SEQ, *FAST, "--output_dir", str(tmp_path / "run")]
    with pytest.raises(
        DataError, match=r"train\.jsonl: the `translation` dicts have no key\(s\) \['de'\].*keys are \['en', 'fr'\]"
    ):
        train_translation.main([*files, *base, "--target_lang", "de"])
    flat = write_table(tmp_path / "flat.csv", [{"english": "one", "french": "un"}] * 6)
    with pytest.raises(
        DataError,
        match=r"flat\.csv has neither a 'translation' column nor columns 'en' and 'fr'.*\['english', 'french'\]",
    ):
        train_translation.main(["--train_file", str(flat), *base])


TINY_BERT = [
    "--config_overrides",
    "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32",
    "--tokenizer_vocab_size",
    "120",
    "--max_seq_length",
    "32",
    "--per_device_train_batch_size",
    "4",
    "--per_device_eval_batch_size",
    "64",
]


@pytest.mark.parametrize("layout", ["txt", "jsonl_sentences", "parquet_text", "folder"])
def test_pretrain_bert_on_each_layout(tmp_path, layout):
    docs = documents(9, sentences=6)
    splits = {"train": docs[:5], "validation": docs[5:7], "test": docs[7:]}
    folder = tmp_path / "data"
    folder.mkdir()
    if layout in ("txt", "folder"):  # BERT's format: a sentence per line, a blank line between documents
        for split, part in splits.items():
            (folder / f"{split}.txt").write_text("\n\n".join("\n".join(doc) for doc in part) + "\n")
        if layout == "folder":
            data = ["--dataset_name", str(folder)]
        else:
            data = flags({f"--{split}_file": str(folder / f"{split}.txt") for split in splits})
    elif layout == "jsonl_sentences":  # one document per row: a list of sentences
        data = flags(write_splits(folder, ".jsonl", {s: [{"text": d} for d in part] for s, part in splits.items()}))
    else:  # one document per row: a string with a sentence per line
        rows = {s: [{"text": "\n".join(d)} for d in part] for s, part in splits.items()}
        data = flags(write_splits(folder, ".parquet", rows))
    out = tmp_path / "run"
    results = pretrain_bert.main([*data, *TINY_BERT, *FAST, "--output_dir", str(out)])
    assert "5 / 2 / 2 train / validation / test documents" in results["data"]
    assert results["pairs"]["validation"] > 0 and 0.0 <= results["test"]["test_nsp_accuracy"] <= 1.0
    assert type(AutoModelForPreTraining.from_pretrained(out)).__name__ == "BertForPreTraining"


def test_pretrain_bert_holds_out_whole_documents_and_needs_two(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in documents(8, sentences=6)) + "\n")
    results = pretrain_bert.main(
        ["--train_file", str(path), "--validation_split_percentage", "25", *TINY_BERT, *FAST]
        + ["--output_dir", str(tmp_path / "run")]
    )
    assert "6 / 2 train / validation documents" in results["data"] and results["test"] == {}
    one = tmp_path / "one.txt"
    one.write_text("\n".join(documents(1, sentences=6)[0]) + "\n")
    with pytest.raises(DataError, match=r"one\.txt holds 1 document\(s\): next-sentence pairs need at least two"):
        pretrain_bert.main(["--train_file", str(one), *TINY_BERT, *FAST, "--output_dir", str(tmp_path / "one")])


@pytest.mark.parametrize("suffix", [".txt", ".csv"])
def test_word_vectors_on_own_text(tmp_path, suffix):
    sentences = [" ".join(doc) for doc in documents(20, sentences=3)]
    if suffix == ".txt":
        path = tmp_path / "corpus.txt"
        path.write_text("\n".join(sentences) + "\n")
    else:
        path = write_table(tmp_path / "corpus.csv", [{"text": s} for s in sentences])
    out = tmp_path / "vectors"
    info = train_word_vectors.main(
        [
            "--train_file",
            str(path),
            "--dim",
            "4",
            "--min_count",
            "2",
            "--num_train_epochs",
            "1",
            "--output_dir",
            str(out),
        ]
    )
    header, *rows = (out / "vectors.txt").read_text().splitlines()
    assert header == f"{info['vocab']} 4" and len(rows) == info["vocab"] and rows[0].split()[0] in ("the", "a", ".")
    assert json.loads((out / "vectors.json").read_text())["command"].startswith("python ")


def test_word_vectors_refuse_a_tracker_they_cannot_feed(tmp_path):
    """The skip-gram loop has no Trainer: `--report_to tensorboard` is refused, naming the flag, before any data is read."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\n")
    out = tmp_path / "vectors"
    with pytest.raises(RecipeError, match="`report_to`.*drop --report_to"):
        train_word_vectors.main(["--train_file", str(corpus), "--report_to", "tensorboard", "--output_dir", str(out)])
    assert not out.exists()
