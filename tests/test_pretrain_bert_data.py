"""pretrain_bert.py's data: the preprocessing cache (reuse, invalidation, a truncated folder rebuilt), the same
token ids and per-step losses as the in-memory path it replaced, and ``--streaming true`` (the cached documents'
tokens, exact mid-stream resume, the errors)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from hf_seq.train_scripts import pretrain_bert
from hf_seq.train_scripts.arguments import RecipeError, parse_args
from hf_seq.train_scripts.common import load_tokenizer

from hf_seq.toolkit import tokenization
from hf_seq.toolkit.collators import tokenize_documents, tokenize_documents_to_store
from hf_seq.toolkit.data import hold_out_validation, load_data, split_source
from hf_seq.toolkit.preprocessing import tokenizer_fingerprint

REPO = Path(__file__).resolve().parent.parent
CONFIG = str(REPO / "configs" / "bert_pretrain_brown.json")
WORDS = [f"w{i}" for i in range(150)] + ["the", "a", "of", "cat", "dog", "runs", "sat", "on", "mat"]


def write_documents(path: Path, documents: int, seed: int = 0) -> Path:
    """BERT's txt format: one sentence per line, a blank line between documents."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(documents):
            for _ in range(rng.randint(1, 8)):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))) + " .\n")
            f.write("\n")
    return path


def write_paragraph_documents(path: Path, documents: int, seed: int = 1) -> Path:
    """jsonl: each row a document given as paragraphs (lists of sentences)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(documents):
            paragraphs = [
                [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(rng.randint(1, 4))]
                for _ in range(rng.randint(1, 3))
            ]
            f.write(json.dumps({"text": paragraphs}) + "\n")
    return path


def bert_args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        CONFIG,
        "--config_overrides",
        "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32",
        "--tokenizer_vocab_size",
        "120",
        "--max_seq_length",
        "24",
        "--per_device_train_batch_size",
        "4",
        "--per_device_eval_batch_size",
        "16",
        "--max_steps",
        "4",
        "--warmup_steps",
        "0",
        "--eval_strategy",
        "no",
        "--logging_steps",
        "1",
        "--save_strategy",
        "no",
        "--disable_tqdm",
        "true",
        "--validation_split_percentage",
        "20",
        "--cache_dir",
        str(tmp_path / "cache"),
        "--output_dir",
        str(tmp_path / "run"),
        "--overwrite_output_dir",
        "true",
        *extra,
    ]


def prepare(argv: list[str]) -> pretrain_bert.BertData:
    model_args, data_args, args, training_args = parse_args(pretrain_bert.TASK, argv)
    return pretrain_bert.prepare_bert_data(args, model_args, data_args, training_args)


def as_lists(documents) -> list[list[list[int]]]:
    return [[list(map(int, sentence)) for sentence in document] for document in documents]


def step_losses(folder: Path) -> list[float]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return [r["loss"] for r in state["log_history"] if "loss" in r]


# ---------------------------------------------------------------------------------------------------------------
# the in-memory path the cache replaced (pretrain_bert.py before the cache), as the reference
# ---------------------------------------------------------------------------------------------------------------


def in_memory_documents(dataset: Dataset, column: str) -> list[list]:
    rows = dataset[column]
    if not isinstance(rows[0], str):
        return list(rows)
    if any("\n" in row.rstrip("\n") for row in rows):
        return [[line for line in row.splitlines() if line.strip()] for row in rows]
    documents, current = [], []
    for row in rows:
        if row.strip():
            current.append(row.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def in_memory_splits(data_args) -> DatasetDict:
    raw = load_data(
        train_file=data_args.train_file,
        validation_file=data_args.validation_file,
        test_file=data_args.test_file,
        allow_text_files=True,
        require_validation=False,
    )
    splits = DatasetDict()
    for name, dataset in raw.items():
        splits[name] = Dataset.from_dict({"document": in_memory_documents(dataset, data_args.text_column_name)})
        splits[name].info.description = split_source(dataset)
    if "validation" not in splits:
        splits = hold_out_validation(splits, data_args.validation_split_percentage, data_args.split_seed)
    return splits


# ---------------------------------------------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------------------------------------------


def test_cached_tokens_equal_the_in_memory_path_and_a_second_run_reuses_them(tmp_path, monkeypatch):
    train = write_documents(tmp_path / "docs.txt", 40)
    argv = bert_args(tmp_path, "--train_file", str(train))
    seen = []  # the texts the WordPiece trainer reads (an iterator, not a list)
    original = tokenization.build_wordpiece_tokenizer

    def recording(texts, **kwargs):
        assert not isinstance(texts, list)
        texts = list(texts)
        seen.extend(texts)
        return original(texts, **kwargs)

    monkeypatch.setattr(tokenization, "build_wordpiece_tokenizer", recording)
    first = prepare(argv)
    assert not first.reused and (first.folder / "tokenizer" / "tokenizer.json").is_file()
    _, data_args, _, _ = parse_args(pretrain_bert.TASK, argv)
    reference = in_memory_splits(data_args)
    assert sorted(first.documents) == ["train", "validation"]
    for split, documents in first.documents.items():
        assert len(documents) == len(reference[split])
        assert as_lists(documents) == tokenize_documents(reference[split]["document"], first.tokenizer)
    # the tokenizer is trained on the training documents' sentences of before, in order (WordPiece numbers and cuts
    # tied tokens in no fixed order, so two builds may differ: the cache keeps the one it built)
    assert seen == [s for document in reference["train"]["document"] for s in document]

    # the second run neither trains a tokenizer nor tokenizes
    def refuse(*args, **kwargs):
        raise AssertionError("the second run must reuse the cache")

    monkeypatch.setattr(pretrain_bert, "tokenizer_for", refuse)
    monkeypatch.setattr(pretrain_bert, "tokenize_documents_to_store", refuse)
    second = prepare(argv)
    assert second.reused and second.folder == first.folder
    assert tokenizer_fingerprint(second.tokenizer) == tokenizer_fingerprint(first.tokenizer)
    for split in first.documents:
        assert as_lists(second.documents[split]) == as_lists(first.documents[split])
    # the anchors are numpy arrays computed from the store's offsets
    anchors = pretrain_bert.bert_pretraining_anchors(second.documents["train"], 24)
    assert isinstance(anchors["doc_index"], np.ndarray) and len(anchors["doc_index"]) > 10


def test_cache_is_rebuilt_when_the_file_or_the_tokenizer_changes_or_a_file_is_truncated(tmp_path, capsys):
    train = write_documents(tmp_path / "docs.txt", 30)
    base = bert_args(tmp_path, "--train_file", str(train))
    first = prepare(base)
    assert prepare(base).reused
    assert not prepare([*base, "--tokenizer_vocab_size", "100"]).reused  # another tokenizer setting
    capped = prepare([*base, "--tokenizer_max_train_lines", "20"])
    assert not capped.reused and capped.folder != first.folder
    given = prepare([*base, "--tokenizer_name", str(first.folder / "tokenizer")])
    assert not given.reused and not (given.folder / "tokenizer").exists()  # a given tokenizer is not copied
    expected = as_lists(given.documents["train"])
    assert expected == as_lists(first.documents["train"])
    # a truncated token file: detected, logged, rebuilt (with the given tokenizer: the same ids)
    tokens = given.folder / "train" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:-2])
    capsys.readouterr()
    rebuilt = prepare([*base, "--tokenizer_name", str(first.folder / "tokenizer")])
    assert not rebuilt.reused and "incomplete or corrupt" in capsys.readouterr().out
    assert rebuilt.folder == given.folder and as_lists(rebuilt.documents["train"]) == expected
    (first.folder / "meta.json").unlink()  # a build that stopped before its meta.json
    assert not prepare(base).reused
    assert not prepare([*base, "--overwrite_cache", "true"]).reused
    # the file changes (a document appended): another key, the stale folder is not read
    with open(train, "a") as f:
        f.write("a new document .\nwith two sentences .\n")
    changed = prepare(base)
    assert not changed.reused and changed.folder != first.folder
    assert len(changed.documents["train"]) + len(changed.documents["validation"]) == 31


def test_cached_run_has_the_per_step_losses_of_the_in_memory_path(tmp_path, monkeypatch):
    """Both runs with the same tokenizer: the documents, anchors, pairs, masks and losses of the recipe unchanged."""
    train = write_paragraph_documents(tmp_path / "train.jsonl", 30)
    valid = write_documents(tmp_path / "valid.txt", 8, seed=3)
    test = write_documents(tmp_path / "test.txt", 6, seed=4)
    files = ["--train_file", str(train), "--validation_file", str(valid), "--test_file", str(test)]
    built = prepare(bert_args(tmp_path, *files))
    argv = bert_args(tmp_path, *files, "--tokenizer_name", str(built.folder / "tokenizer"))
    cached = pretrain_bert.main(argv)
    cached_losses = step_losses(tmp_path / "run")

    def in_memory(args, model_args, data_args, training_args=None, tokenizer=None, splits=()):
        documents = in_memory_splits(data_args)
        tokenizer = load_tokenizer(model_args)
        folder = tmp_path / "in_memory"
        stores = {
            name: tokenize_documents_to_store(split["document"], tokenizer, folder / name)
            for name, split in documents.items()
        }
        return pretrain_bert.BertData(tokenizer, stores, "in memory", folder, False)

    monkeypatch.setattr(pretrain_bert, "prepare_bert_data", in_memory)
    reference = pretrain_bert.main(argv)
    assert step_losses(tmp_path / "run") == cached_losses and len(cached_losses) == 4
    assert reference["validation"]["eval_loss"] == cached["validation"]["eval_loss"]
    assert reference["test"]["test_loss"] == cached["test"]["test_loss"]
    assert reference["pairs"] == cached["pairs"]


# ---------------------------------------------------------------------------------------------------------------
# --streaming true
# ---------------------------------------------------------------------------------------------------------------


def streaming_args(tmp_path: Path, *extra: str) -> list[str]:
    train = write_documents(tmp_path / "train.txt", 12, seed=5)
    valid = write_documents(tmp_path / "valid.txt", 6, seed=6)
    argv = bert_args(tmp_path, "--train_file", str(train), "--validation_file", str(valid), "--streaming", "true")
    return [*argv, "--max_steps", "10", *extra]


def test_streamed_documents_are_the_cached_documents_and_the_pairs_repeat_per_seed(tmp_path):
    model_args, data_args, args, training_args = parse_args(pretrain_bert.TASK, streaming_args(tmp_path))
    data, documents = pretrain_bert.prepare_bert_stream(args, model_args, data_args, training_args)
    assert "(streamed)" in data.data_line and sorted(data.documents) == ["validation"]
    args.streaming = False
    cached = pretrain_bert.prepare_bert_data(args, model_args, data_args, training_args, data.tokenizer)
    pairs = pretrain_bert.DataCollatorForBertPretraining(data.tokenizer, cached.documents["train"], max_length=24)
    stream = pretrain_bert.BertStreamPairs(
        documents, pretrain_bert.make_encoder(data.tokenizer), pairs, batch_documents=5
    )
    assert list(stream.tokenized()) == as_lists(cached.documents["train"])  # batches of 5 documents, the same ids
    got = [(e["input_ids"].tolist(), e["next_sentence_label"]) for e in stream]
    anchors = pretrain_bert.bert_pretraining_anchors(cached.documents["train"], 24)
    assert len(got) == len(anchors["doc_index"]) and {label for _, label in got} == {0, 1}
    assert got == [(e["input_ids"].tolist(), e["next_sentence_label"]) for e in stream]  # seeded: repeatable
    stream.set_epoch(1)
    assert [(e["input_ids"].tolist(), e["next_sentence_label"]) for e in stream] != got


def test_streaming_run_resumes_exactly_from_a_mid_stream_checkpoint(tmp_path):
    # 12 documents give 26 pairs, 7 steps of 4 a pass: checkpoint 4 lies in the first pass (its resumed run crosses
    # into the second), checkpoint 8 in the second (the stream repeats within Trainer's one epoch of max_steps)
    argv = streaming_args(tmp_path, "--shuffle_buffer_size", "8", "--save_strategy", "steps", "--save_steps", "4")
    pretrain_bert.main(argv)
    full = step_losses(tmp_path / "run")
    assert len(full) == 10 and len(set(full)) > 1
    for step in (4, 8):
        resumed_dir = tmp_path / f"resumed{step}"
        resumed_dir.mkdir()
        shutil.copytree(tmp_path / "run" / f"checkpoint-{step}", resumed_dir / f"checkpoint-{step}")
        resumed_argv = [*argv, "--resume_from_checkpoint", "last"]
        resumed_argv[resumed_argv.index("--output_dir") + 1] = str(resumed_dir)
        i = resumed_argv.index("--overwrite_output_dir")
        pretrain_bert.main(resumed_argv[:i] + resumed_argv[i + 2 :])
        state = json.loads((resumed_dir / "trainer_state.json").read_text())
        assert [r["loss"] for r in state["log_history"] if "loss" in r and r["step"] > step] == full[step:]


def test_streaming_needs_a_validation_file_max_steps_and_a_train_file(tmp_path):
    def stream(argv):
        model_args, data_args, args, training_args = parse_args(pretrain_bert.TASK, argv)
        return pretrain_bert.prepare_bert_stream(args, model_args, data_args, training_args)

    argv = streaming_args(tmp_path)
    i = argv.index("--validation_file")
    with pytest.raises(RecipeError, match="validation_file"):
        stream(argv[:i] + argv[i + 2 :])
    with pytest.raises(RecipeError, match="max_steps"):
        stream([*argv, "--max_steps", "-1"])
    with pytest.raises(RecipeError, match="max_train_samples"):
        stream([*argv, "--max_train_samples", "5"])
    with pytest.raises(ValueError, match="stream_buffer_documents"):
        stream([*argv, "--stream_buffer_documents", "1"])
    with pytest.raises(RecipeError, match="preprocessing_num_workers"):
        stream([*argv, "--preprocessing_num_workers", "2"])


def _documents_file(path: Path, documents: int, sentences: int) -> Path:
    """A txt file in BERT's format: ``documents`` documents of ``sentences`` lines each, blank lines between."""
    rng = random.Random(documents)
    text = "\n\n".join(
        "\n".join(" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(sentences)) for _ in range(documents)
    )
    path.write_text(text + "\n")
    return path


@pytest.mark.parametrize(
    ("documents", "sentences", "percentage", "expected"),
    [
        # the case: six documents, 5% held out = one validation document
        (
            6,
            3,
            "5",
            r"six\.txt holds 6 documents: the 5% held out for validation is 1 and 5 are left for training, but "
            r"next-sentence pairs need at least two documents in each split: pass `--validation_split_percentage 34` "
            r"or more, a `--validation_file`, or more documents$",
        ),
        # too few for any percentage
        (3, 3, "20", r"six\.txt holds 3 documents: .* pass a `--validation_file` of two or more documents"),
        # enough documents, but none of two sentences: no pair at all (a KeyError after 0 steps before)
        (
            6,
            1,
            "34",
            r"^the train split \(.*six\.txt\) gives no sentence pair: no document of it has two or more sentences",
        ),
    ],
    ids=["six documents", "three documents", "one-sentence documents"],
)
def test_too_few_documents_or_pairs_name_the_file_the_counts_and_the_fix(
    tmp_path, monkeypatch, documents, sentences, percentage, expected
):
    from hf_seq.toolkit.data import DataError

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the error")

    monkeypatch.setattr(pretrain_bert, "build_bert_model", no_model)
    path = _documents_file(tmp_path / "six.txt", documents, sentences)
    argv = bert_args(tmp_path, "--train_file", str(path), "--validation_split_percentage", percentage)
    with pytest.raises(DataError, match=expected):
        pretrain_bert.main(argv)
