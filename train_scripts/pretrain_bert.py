"""Pretrain a (small) BERT with masked-LM + next-sentence prediction, evaluated on held-out documents.

    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json [--field value ...]
    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json \
        --train_file corpus.txt --output_dir runs/my-bert        # 5% of the documents held out for validation
    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json \
        --model_name_or_path runs/bert-pretrain-brown --max_seq_length 256   # continue, longer pairs
    hf-seq-train pretrain_bert configs/bert_pretrain_brown.json

Data: documents, from ``--dataset_name`` (the preset ``hf_seq/brown_documents`` with ``--text_column_name
paragraphs``; a folder; a ``datasets`` name) or ``--train_file`` / ``--validation_file`` / ``--test_file``. A txt file
is BERT's pretraining format: one sentence per line, a blank line between documents. In csv / json / jsonl / parquet
each row of ``--text_column_name`` is a document: a list of sentences, a list of paragraphs (lists of sentences), or
a string with one sentence per line (rows that are single lines are read like a txt file). Without a validation
split ``validation_split_percentage`` % of the DOCUMENTS are held out.

Steps: a WordPiece tokenizer is trained on the training documents (unless ``--tokenizer_name`` /
``--model_name_or_path`` gives one), from an iterator over their sentences (``--tokenizer_max_train_lines N``: the
first N). Every split's sentences are tokenized once into a memory-mapped token store in the preprocessing cache
(:func:`prepare_bert_data`; ``--cache_dir``, ``--overwrite_cache``; keyed by the data files, the split settings and
the tokenizer), with the tokenizer built beside them: a second run on the same files starts training within
seconds. ``--streaming true`` reads the training file as a ``datasets`` IterableDataset instead and draws the pairs
on the fly (:class:`BertStreamPairs`: random next segments from the last ``--stream_buffer_documents`` documents;
needs ``--max_steps`` and ``--validation_file``). Training pairs come from :class:`hf_seq.toolkit.collators.DataCollatorForBertPretraining`
(fresh next-sentence pairs and masks every epoch); validation / test pairs are fixed (one seed per example) and drawn
from held-out documents. ``compute_metrics`` reports masked-LM accuracy (over the selected 15%) and next-sentence
accuracy; ``preprocess_logits_for_metrics`` reduces logits to argmaxes so evaluation memory stays small. The model
(``BertForPreTraining``) and tokenizer are saved to ``output_dir``; ``results.json`` holds the test metrics.
``--model_name_or_path <folder>`` continues from a folder this script saved (or a transformers BERT checkpoint,
converted); a ``--max_seq_length`` longer than that model's position table grows the table first
(``resize_position_embeddings``: BERT's final phase at longer sequences). ``--eval_only true --model_name_or_path
<folder>`` only evaluates that folder (``results.json``); ``--eval_pairs_per_anchor k`` draws k validation / test
pairs per held-out anchor.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
import random
import resource
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset
from hf_seq.train_scripts.arguments import (
    BERT_DEFAULTS,
    LABEL_FIELDS,
    TRANSLATION_FIELDS,
    BudgetArguments,
    PreprocessingArguments,
    RecipeError,
    Task,
)
from hf_seq.train_scripts.common import (
    StepTimesCallback,
    load_or_build_model,
    load_task_data,
    load_tokenizer,
    require_columns,
    tokenizer_for,
    tokenizer_source,
)
from hf_seq.train_scripts.features import (
    cached_token_stores,
    check_holdout_percentage,
    check_text_stream,
    dataset_cache_key,
    describe_sizes,
    held_out_rows,
    shuffle_buffered,
    stream_file,
    text_file_keys,
    text_read_errors,
)
from hf_seq.train_scripts.run_folder import run_training
from hf_seq.train_scripts.skeleton import (
    budgeted_trainer,
    env_threads,
    finish_script_run,
    parse_script_args,
    start_script_run,
)
from hf_seq.train_scripts.trainer import HfSeqTrainer

from hf_seq.toolkit.collators import (
    DataCollatorForBertPretraining,
    StoredDocuments,
    _flatten_sentences,
    bert_pretraining_anchors,
    tokenize_documents_to_store,
)
from hf_seq.toolkit.data import DataError, load_data, split_source
from hf_seq.toolkit.preprocessing import (
    TokenStore,
    fingerprint_files,
    iter_column_batches,
    iter_text_file_lines,
    make_encoder,
    read_meta,
    select_rows,
    tokenizer_fingerprint,
)

logger = logging.getLogger(__name__)
DOCUMENTS_FILE = "documents.npy"  # beside a split's token store: the first sentence of each document (+ the end)


@dataclass
class PretrainArguments(PreprocessingArguments, BudgetArguments):
    """Pair construction, masking and evaluation; the preprocessing cache and ``--streaming``."""

    mlm_probability: float = 0.15
    nsp_probability: float = 0.5
    short_seq_probability: float = 0.1
    eval_pairs_per_anchor: int = field(
        default=1,
        metadata={
            "help": "Validation/test pairs drawn per held-out anchor (each with its own seed: another split point and "
            "random segment). Long pairs leave few anchors; more pairs per anchor make the accuracies less noisy.",
        },
    )
    eval_only: bool = field(
        default=False,
        metadata={"help": "Only evaluate the model_name_or_path model (no training, nothing saved but results.json)."},
    )
    num_threads: int | None = field(default=None, metadata={"help": "torch threads (default: OMP_NUM_THREADS)."})
    stream_buffer_documents: int = field(
        default=1000,
        metadata={
            "help": "--streaming: random next segments come from a seeded choice among the last N documents read.",
        },
    )

    def __post_init__(self):
        super().__post_init__()  # the preprocessing fields and the time budgets
        for name in ("mlm_probability", "nsp_probability", "short_seq_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"`{name}` must be in [0, 1], got {getattr(self, name)!r}")
        if self.eval_pairs_per_anchor < 1:
            raise ValueError(f"`eval_pairs_per_anchor` must be >= 1, got {self.eval_pairs_per_anchor!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"`num_threads` must be a positive integer or null, got {self.num_threads!r}")
        if self.stream_buffer_documents < 2:
            raise ValueError(f"`stream_buffer_documents` must be >= 2, got {self.stream_buffer_documents!r}")


TASK = Task(
    name="pretrain_bert",
    arguments=PretrainArguments,
    defaults=BERT_DEFAULTS | {"text_column_name": "text"},
    unused=LABEL_FIELDS | TRANSLATION_FIELDS,
    text_files=True,
    tokenizer_kinds=("wordpiece",),
    model_head="AutoModelForPreTraining",
)


# ------------------------------------------------------------------------------------------------------------
# documents, read in batches: never the whole corpus as Python lists
# ------------------------------------------------------------------------------------------------------------


def _grouped_by_blank_rows(batches: Iterable[list[str]]) -> Iterator[list[str]]:
    """Documents of one-sentence rows (BERT's txt format): blank rows separate documents; sentences stripped."""
    current: list[str] = []
    for rows in batches:
        for row in rows:
            if row.strip():
                current.append(row.strip())
            elif current:
                yield current
                current = []
    if current:
        yield current


def iter_documents(dataset: Dataset, column: str) -> Iterator[list]:
    """The documents of a split, read in Arrow batches: lists of sentences (or of paragraphs, lists of sentences).

    A list column holds one document per row. A string column holds one document per row with one sentence per line,
    unless every row is a single line (a txt file: one sentence per line): then blank rows separate documents."""
    kind = dataset.data.column(column).type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        for batch in iter_column_batches(dataset, column):
            yield from batch
        return
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(
            f"{split_source(dataset)}: column {column!r} (`text_column_name`) must hold documents (text, or lists of "
            f"sentences), got {kind}; its columns are {dataset.column_names}"
        )
    if any("\n" in row.rstrip("\n") for batch in iter_column_batches(dataset, column) for row in batch):
        for batch in iter_column_batches(dataset, column):  # one document per row
            for row in batch:
                yield [line for line in row.splitlines() if line.strip()]
        return
    yield from _grouped_by_blank_rows(iter_column_batches(dataset, column))


def _file_documents(path: str, flag: str, column: str) -> Iterator[list]:
    """The documents of a data file: a ``.txt`` file read in buffered chunks (the rows of ``datasets``' text loader),
    any other format through ``datasets`` (memory-mapped Arrow)."""
    if Path(path).suffix.lower() == ".txt":
        with text_read_errors(path, flag):
            yield from _grouped_by_blank_rows(iter_text_file_lines(path))
        return
    split = load_data(train_file=path, allow_text_files=True, require_validation=False)
    require_columns(split, {"text_column_name": column})
    yield from iter_documents(split["train"], column)


def _training_sentences(documents: Iterable[list], held_out: np.ndarray | None, cap: int | None) -> Iterator[str]:
    """The sentences of the training documents (those not ``held_out``) in order, the first ``cap`` of them."""
    given = 0
    for d, document in enumerate(documents):
        if held_out is not None and held_out[d]:
            continue
        for item in document:
            for sentence in [item] if isinstance(item, str) else item:
                if cap is not None and given >= cap:
                    return
                yield sentence
                given += 1


def _select_documents(documents: StoredDocuments, keep: np.ndarray, folder: Path) -> StoredDocuments:
    """The documents where ``keep`` is true, in order, copied into a new store in ``folder``."""
    sizes = np.diff(documents.doc_offsets)
    store = select_rows(documents.store, np.repeat(keep, sizes), folder)
    offsets = np.concatenate([[0], np.cumsum(sizes[keep])]).astype(np.int64)
    np.save(folder / DOCUMENTS_FILE, offsets)
    return StoredDocuments(store, offsets)


def _too_few(source: str, n: int) -> DataError:
    return DataError(
        f"{source} holds {n} document(s): next-sentence pairs need at least two (separate documents with a blank line)"
    )


@dataclass
class BertData:
    """The tokenizer and each split's documents (sentences in a memory-mapped token store), from the cache."""

    tokenizer: object
    documents: dict
    data_line: str
    folder: Path
    reused: bool


def built_tokenizer_key(args, model_args) -> dict:
    """The settings of a WordPiece tokenizer this script builds: the cache key of the cached and streamed runs."""
    return {
        "built": "wordpiece v1",
        "vocab_size": model_args.tokenizer_vocab_size,
        "min_frequency": model_args.tokenizer_min_frequency,
        "lowercase": model_args.lowercase,
        "max_train_lines": args.tokenizer_max_train_lines,
        "sides": [model_args.padding_side, model_args.truncation_side],
    }


def _document_readers(data_args, splits: tuple[str, ...]) -> tuple[dict, dict, dict]:
    """``(data key, {split: a function giving its documents}, {split: where it comes from})`` of the splits of
    ``dataset_name`` or of the data files (checked: ``DataError`` naming the flag)."""
    column = data_args.text_column_name
    if data_args.dataset_name:
        raw = load_task_data(TASK, data_args, require_validation=False)
        require_columns(raw, {"text_column_name": column})
        raw = {name: split for name, split in raw.items() if name in splits}
        data_key: dict = {name: dataset_cache_key(split) for name, split in raw.items()}
        data_key["source"] = [data_args.dataset_name, data_args.dataset_config_name]
        readers = {name: (lambda split=split: iter_documents(split, column)) for name, split in raw.items()}
        sources = {name: split_source(split) for name, split in raw.items()}
    else:
        files = {s: getattr(data_args, f"{s}_file") for s in splits if getattr(data_args, f"{s}_file")}
        if "train" in splits and "train" not in files:
            raise DataError("no training data: pass `dataset_name` or `train_file` (txt, csv, json, jsonl, parquet)")
        data_key = text_file_keys(files)
        readers = {
            split: (lambda path=path, split=split: _file_documents(path, f"{split}_file", column))
            for split, path in files.items()
        }
        sources = dict(files)
    data_key["column"] = column
    return data_key, readers, sources


def _held_out_documents(readers: dict, sources: dict, data_args) -> np.ndarray | None:
    """Without a validation split: the seeded ``validation_split_percentage`` % of the training documents that
    become the validation split (``DataError`` when there are too few); None with one."""
    if "train" not in readers or "validation" in readers:
        return None
    pct = data_args.validation_split_percentage
    check_holdout_percentage(sources["train"], pct)
    n = sum(1 for _ in readers["train"]())
    if n < 2:
        raise _too_few(sources["train"], n)
    # the documents hold_out_validation moves
    held_out = held_out_rows(sources["train"], n, pct, data_args.split_seed, unit="documents")
    _check_held_out(sources["train"], n, int(held_out.sum()), pct)  # before a tokenizer is built
    return held_out


def _check_held_out(source: str, n: int, held: int, percentage: float) -> None:
    """``DataError`` unless the validation hold-out (``held`` of the ``n`` training documents of ``source``) and the
    documents left to train on are two or more each (random next segments come from another document of the same
    split): it names the file, the counts and what makes both splits large enough."""
    if held >= 2 and n - held >= 2:
        return
    if n >= 4:
        enough = math.ceil(200 / n)  # round(n * p / 100) >= 2
        fix = f"`--validation_split_percentage {enough}` or more, a `--validation_file`, or more documents"
    else:
        fix = "a `--validation_file` of two or more documents, or more documents (a blank line separates them)"
    raise DataError(
        f"{source} holds {n} documents: the {percentage:g}% held out for validation is {held} and {n - held} are left "
        f"for training, but next-sentence pairs need at least two documents in each split: pass {fix}"
    )


def _tokenize_documents(tmp: Path, readers: dict, sources: dict, held_out, tokenizer) -> dict:
    """Each split's documents into a token store in ``tmp / <split>`` (``documents.npy`` beside it), the held-out
    training documents moved into ``validation``: ``{split: documents}``."""
    counts = {}
    for source, read in readers.items():
        whole = held_out is not None and source == "train"
        folder = tmp / ("_train_all" if whole else source)
        documents = tokenize_documents_to_store(read(), tokenizer, folder)
        if len(documents) < 2:
            raise _too_few(sources[source], len(documents))
        np.save(folder / DOCUMENTS_FILE, documents.doc_offsets)
        if whole:
            for split, keep in (("train", ~held_out), ("validation", held_out)):
                counts[split] = len(_select_documents(documents, keep, tmp / split))
            shutil.rmtree(folder)
        else:
            counts[source] = len(documents)
    return counts


def prepare_bert_data(
    args: PretrainArguments,
    model_args,
    data_args,
    training_args=None,
    tokenizer=None,
    splits: tuple[str, ...] = ("train", "validation", "test"),
) -> BertData:
    """Tokenize every split's sentences once into a :class:`hf_seq.toolkit.preprocessing.TokenStore` (one row per sentence,
    ``documents.npy`` the first sentence of each document) in the preprocessing cache, or reuse it; a WordPiece
    tokenizer built on the training documents (unless given) is cached beside them. Without a validation split the
    seeded ``validation_split_percentage`` % of the documents of before is held out. Keyed by the data files (or the
    data set's fingerprint), the split settings and the tokenizer; the token ids equal the in-memory path's."""
    if (args.preprocessing_num_workers or 1) > 1:
        raise RecipeError(
            f"`preprocessing_num_workers` {args.preprocessing_num_workers}: pretrain_bert tokenizes its documents in "
            "one process (pass 1 or leave it unset)"
        )
    given = tokenizer if tokenizer is not None else load_tokenizer(model_args)
    data_key, readers, sources = _document_readers(data_args, splits)
    if given is not None:
        tokenizer_key = {"fingerprint": tokenizer_fingerprint(given)}
    else:
        tokenizer_key = built_tokenizer_key(args, model_args)
    pct = data_args.validation_split_percentage
    key = {
        "task": "pretrain_bert",
        "data": data_key,
        "split": {"validation_split_percentage": pct, "split_seed": data_args.split_seed},
        "tokenizer": tokenizer_key,
    }

    def build(tmp: Path) -> tuple:
        held_out = _held_out_documents(readers, sources, data_args)
        built = given
        if built is None:
            cap = args.tokenizer_max_train_lines
            built = tokenizer_for(
                model_args, lambda: _training_sentences(readers["train"](), held_out, cap), data_args.max_seq_length
            )
        counts = _tokenize_documents(tmp, readers, sources, held_out, built)
        data_line = describe_sizes(data_args, counts, sources, held_out, unit="documents")
        return built, {"data_line": data_line, "documents": counts}

    folder, reused, tokenizer = cached_token_stores(key, build, given, args, training_args, "BERT documents")
    documents = {
        split: StoredDocuments(TokenStore(folder / split), np.load(folder / split / DOCUMENTS_FILE))
        for split in ("train", "validation", "test")
        if (folder / split).is_dir()
    }
    return BertData(tokenizer, documents, read_meta(folder)["data_line"], folder, reused)


# ------------------------------------------------------------------------------------------------------------
# --streaming: pairs drawn on the fly from a stream of documents
# ------------------------------------------------------------------------------------------------------------


def stream_documents(path: str, column: str) -> Callable[[], Iterator[list]]:
    """A function giving the documents of ``path`` read as a ``datasets`` IterableDataset
    (``load_dataset(..., streaming=True)``): a txt file's blank-line separated documents, or a row per document of
    csv / json / jsonl / parquet (a list of sentences or paragraphs, or a string with one sentence per line)."""
    source = stream_file(path, "train", allow_text=True, column=column)
    if Path(path).suffix.lower() == ".txt":
        return lambda: _grouped_by_blank_rows(batch["text"] for batch in source.iter(batch_size=1000))

    def documents() -> Iterator[list]:
        for batch in source.iter(batch_size=1000):
            for value in batch[column]:
                if isinstance(value, str):
                    yield [line for line in value.splitlines() if line.strip()]
                elif isinstance(value, list):
                    yield value
                else:
                    raise DataError(
                        f"`train_file` {path}: column {column!r} (`text_column_name`) must hold documents (text, or "
                        f"lists of sentences), got {type(value).__name__}"
                    )

    return documents


class BertStreamPairs(torch.utils.data.IterableDataset):
    """``--streaming``: masked next-sentence pairs drawn on the fly from a stream of documents.

    Documents are tokenized ``batch_documents`` at a time; each document's anchors are
    :func:`hf_seq.toolkit.collators.bert_pretraining_anchors`' and its pairs :class:`DataCollatorForBertPretraining`'s
    (``pairs``: ``build_pair`` and ``encode_pair``), except that a random next segment comes from a seeded choice among
    the last ``buffer_documents`` documents of the stream (the first document waits for the second). The examples
    then pass a seeded shuffle buffer of ``shuffle_buffer_size`` pairs (0: stream order). Every random draw comes from
    generators seeded by ``seed`` and the epoch (``set_epoch``, called by ``Trainer``), so the stream's batches are
    the same on every run; with ``repeat`` the stream is read again and again (each pass with its own seeded draws)
    and never ends, so ``Trainer`` sees one epoch of ``max_steps`` steps and a resumed run that skips the batches
    already trained on gets the batches of an uninterrupted one, wherever in a pass its checkpoint lies. Memory stays
    constant: the buffers, never the corpus."""

    def __init__(
        self,
        documents: Callable[[], Iterable[list]],
        encoder,
        pairs: DataCollatorForBertPretraining,
        buffer_documents: int = 1000,
        shuffle_buffer_size: int = 0,
        seed: int = 0,
        batch_documents: int = 100,
        source: str = "the stream",
        repeat: bool = False,
    ) -> None:
        if buffer_documents < 2:
            raise ValueError(f"`stream_buffer_documents` must be at least 2, got {buffer_documents}")
        self.documents, self.encoder, self.pairs = documents, encoder, pairs
        self.buffer_documents, self.shuffle_buffer_size = buffer_documents, shuffle_buffer_size
        self.seed, self.batch_documents, self.source, self.repeat = seed, batch_documents, source, repeat
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def tokenized(self) -> Iterator[list[list[int]]]:
        """The stream's documents as lists of sentences' token ids (empty sentences dropped, as the cache does)."""
        batch: list[list[str]] = []

        def encode() -> list[list[list[int]]]:
            sentences = [s for doc in batch for s in doc]
            flat, lengths = self.encoder.encode(sentences) if sentences else (np.zeros(0, np.int64), np.zeros(0))
            rows = np.split(flat, np.cumsum(lengths)[:-1].astype(np.int64)) if sentences else []
            out, k = [], 0
            for doc in batch:
                out.append([row.tolist() for row in rows[k : k + len(doc)] if len(row)])
                k += len(doc)
            batch.clear()
            return out

        for document in self.documents():
            batch.append(_flatten_sentences(document))
            if len(batch) >= self.batch_documents:
                yield from encode()
        if batch:
            yield from encode()

    def examples(self, pass_index: int = 0) -> Iterator[dict]:
        """The pairs of one pass over the stream, in stream order: ``input_ids``, ``token_type_ids``, ``labels``
        ``(L,)`` and the label; every pass draws its own (seeded) pairs and masks."""
        seed = (self.seed * 1_000_003 + self.epoch) * 1_000_003 + pass_index
        rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
        buffer: collections.deque = collections.deque(maxlen=self.buffer_documents)
        max_length = self.pairs.max_length

        def pairs_of(index: int) -> Iterator[dict]:
            for start in bert_pretraining_anchors([buffer[index]], max_length)["sentence_index"]:
                a, b, label = self.pairs.build_pair(index, start, rng, documents=buffer)
                ids, types, labels = self.pairs.encode_pair(a, b, generator)
                yield {"input_ids": ids, "token_type_ids": types, "labels": labels, "next_sentence_label": label}

        read = pairs = 0
        for document in self.tokenized():
            if not document:
                continue
            buffer.append(document)
            read += 1
            if read == 1:
                continue  # its random next segments need another document
            for index in (0, 1) if read == 2 else (len(buffer) - 1,):
                for pair in pairs_of(index):
                    pairs += 1
                    yield pair
        if read < 2:
            raise _too_few(self.source, read)
        if not pairs:
            raise DataError(f"{self.source}: no document has two sentences, so no next-sentence pair can be drawn")

    def __iter__(self) -> Iterator[dict]:
        passes = itertools.count() if self.repeat else range(1)
        examples = itertools.chain.from_iterable(self.examples(p) for p in passes)
        yield from shuffle_buffered(examples, self.shuffle_buffer_size, np.random.default_rng([self.seed, self.epoch]))


class _StreamCollator:
    """Pads the stream's ready pairs (:meth:`DataCollatorForBertPretraining.pad_rows`)."""

    def __init__(self, pairs: DataCollatorForBertPretraining) -> None:
        self.pairs = pairs

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        keys = ("input_ids", "token_type_ids", "labels", "next_sentence_label")
        return self.pairs.pad_rows([tuple(f[k] for k in keys) for f in features])


def prepare_bert_stream(args: PretrainArguments, model_args, data_args, training_args) -> tuple[BertData, Callable]:
    """``--streaming``: the training file's documents as a ``datasets`` IterableDataset (no preprocessing pass), the
    tokenizer given or built on the first ``tokenizer_max_train_lines`` sentences of the stream (cached, keyed by the
    file and the settings), the validation and test files through the cache as usual."""
    check_text_stream(data_args, training_args, {"max_train_samples": data_args.max_train_samples})
    column = data_args.text_column_name
    documents = stream_documents(data_args.train_file, column)
    tokenizer = load_tokenizer(model_args)
    if tokenizer is None:
        key = {
            "task": "pretrain_bert_stream_tokenizer",
            "data": fingerprint_files([data_args.train_file]),
            "column": column,
            "tokenizer": built_tokenizer_key(args, model_args),
        }

        def build(tmp: Path) -> tuple:
            texts = lambda: _training_sentences(documents(), None, args.tokenizer_max_train_lines)  # noqa: E731
            return tokenizer_for(model_args, texts, data_args.max_seq_length), None

        _, _, tokenizer = cached_token_stores(key, build, None, args, training_args, "stream tokenizer")
    data = prepare_bert_data(args, model_args, data_args, training_args, tokenizer, splits=("validation", "test"))
    train = f"train `{data_args.train_file}`"
    data.data_line = data.data_line.replace(train, f"{train} (streamed)", 1)
    return data, documents


def _anchor_dataset(
    documents, max_length: int, seed_offset: int | None, limit: int | None = None, pairs_per_anchor: int = 1
) -> Dataset:
    """Anchors as a Dataset (numpy columns, computed from the store's offsets); ``seed_offset`` adds a fixed
    per-example seed (deterministic evaluation pairs), and ``pairs_per_anchor`` repeats every anchor with distinct
    seeds (evaluation only)."""
    anchors = {k: np.asarray(v, dtype=np.int64) for k, v in bert_pretraining_anchors(documents, max_length).items()}
    if pairs_per_anchor > 1:
        anchors = {key: np.repeat(values, pairs_per_anchor) for key, values in anchors.items()}
    if seed_offset is not None:
        anchors["example_seed"] = seed_offset + np.arange(len(anchors["doc_index"]), dtype=np.int64)
    if limit is not None:
        anchors = {key: values[:limit] for key, values in anchors.items()}
    return Dataset.from_dict(anchors)


def preprocess_logits_for_metrics(logits, labels):
    """Argmax of both heads, aligned with the labels: ``(mlm predictions (B, T), nsp predictions (B,))``.

    With ``sparse_prediction`` the masked-LM logits are ``(N, V)`` for the N labelled positions; they are scattered
    back into a ``(B, T)`` tensor (-100 elsewhere).
    """
    mlm_logits, nsp_logits = logits[0], logits[1]
    mlm_labels = labels[0]
    if mlm_logits.dim() == 2:  # sparse: (N, V)
        preds = torch.full_like(mlm_labels, -100)
        preds[mlm_labels != -100] = mlm_logits.argmax(-1)
    else:
        preds = mlm_logits.argmax(-1)
    return preds, nsp_logits.argmax(-1)


def compute_metrics(eval_pred) -> dict[str, float]:
    """Masked-LM accuracy over the selected tokens and next-sentence accuracy."""
    (mlm_preds, nsp_preds), (mlm_labels, nsp_labels) = eval_pred.predictions, eval_pred.label_ids
    selected = mlm_labels != -100
    return {
        "mlm_accuracy": float(np.mean(mlm_preds[selected] == mlm_labels[selected])),
        "nsp_accuracy": float(np.mean(nsp_preds == nsp_labels)),
        "nsp_random_fraction": float(np.mean(nsp_labels == 1)),
    }


class SplitCollator:
    """Random "next" segments must come from held-out documents of the same split: one collator per split, the
    training one active outside :meth:`EvalSplitTrainer.evaluate`."""

    def __init__(self, by_split: dict) -> None:
        self.by_split = by_split
        self.active = self.by_split["train"]

    def __call__(self, features):
        return self.active(features)


class EvalSplitTrainer(HfSeqTrainer):
    """Evaluates the validation split with its collator and the test split (``metric_key_prefix="test"``) with its."""

    def __init__(self, *args, split_collator: SplitCollator, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.split_collator = split_collator

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
        collator = self.split_collator
        collator.active = collator.by_split["test" if metric_key_prefix == "test" else "validation"]
        try:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        finally:
            collator.active = collator.by_split["train"]


def build_bert_model(model_args, data_args, tokenizer, max_length: int):
    """A new BERT sized to the tokenizer and ``max_seq_length``, or the saved one (its position table grown to
    ``max_seq_length`` if shorter)."""
    model = load_or_build_model(TASK, model_args, data_args, tokenizer, {"max_position_embeddings": max_length})
    if model_args.model_name_or_path and max_length > model.config.max_position_embeddings:
        logger.info("growing the position table from %d to %d rows", model.config.max_position_embeddings, max_length)
        model.resize_position_embeddings(max_length)
    logger.info("%s with %.2fM parameters", type(model).__name__, model.num_parameters() / 1e6)
    return model


def train_and_evaluate(trainer, training_args, args, budget, test_ds, data_line: str) -> dict:
    """Train (unless ``eval_only``), then evaluate the validation and test splits: the first keys of ``results.json``
    (data, train, stopped_by_time_budget, validation, test)."""
    if args.eval_only:
        train_metrics = {}
    else:
        train_result = run_training(trainer, training_args)
        train_metrics = train_result.metrics
    validation = trainer.evaluate()
    test = trainer.evaluate(test_ds, metric_key_prefix="test") if test_ds is not None else {}
    return {
        "data": data_line,
        "train": train_metrics,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "validation": validation,
        "test": test,
    }


def pretrain_card(args, model_args, training_args, trainer, tokenizer, results: dict, max_length: int) -> dict:
    """The model card's data set, metrics, intended use and limitations."""
    validation, test, pairs = results["validation"], results["test"], results["pairs"]
    metrics = {
        "validation_mlm_accuracy": round(validation["eval_mlm_accuracy"], 4),
        "validation_nsp_accuracy": round(validation["eval_nsp_accuracy"], 4),
        "train_steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0.0, 3),
        "processes": training_args.world_size,
    }
    if test:
        metrics |= {
            "test_mlm_accuracy": round(test["test_mlm_accuracy"], 4),
            "test_nsp_accuracy": round(test["test_nsp_accuracy"], 4),
            "test_loss": round(test["test_loss"], 4),
        }
    source = tokenizer_source(model_args, "trained on the training documents")
    return {
        "dataset": f"{results['data']}. Masked-LM + next-sentence pairs of at most {max_length} tokens: "
        + (
            f"drawn from the streamed training documents (random next segments from the last "
            f"{args.stream_buffer_documents} documents), "
            if args.streaming
            else f"{pairs['train_per_epoch']} anchors per training epoch (fresh pairs and masks each epoch), "
        )
        + f"{pairs['validation']} validation and "
        f"{pairs['test']} test pairs fixed by a per-example seed, each drawn from held-out documents of its "
        f"split; mask probability {args.mlm_probability}, random-next probability {args.nsp_probability}. WordPiece "
        f"tokenizer of {len(tokenizer)} tokens {source}.",
        "metrics": metrics,
        "intended_use": "A small English BERT encoder pre-trained (masked LM + next-sentence prediction) as the "
        "starting point for fine-tuning on small tasks (`train_scripts/finetune_bert.py`) and for teaching; also "
        "fill-mask on text like its training documents.",
        "limitations": "Pre-trained on a small corpus, orders of magnitude less text than BERT-base: its masked-word "
        "predictions favour frequent words, its vocabulary and knowledge are those of that corpus, and it reflects "
        "that corpus' era and biases; not a replacement for a full-size pre-trained BERT.",
    }


def _check_pairs(data_args, splits: dict) -> None:
    """A split that gives no sentence pair is a :class:`DataError` naming it and its source, before the model is built
    (it would train no step, then fail on an empty evaluation)."""
    for split, pairs_of in splits.items():
        if pairs_of is not None and len(pairs_of) == 0:
            source = getattr(data_args, f"{split}_file", None) or data_args.train_file or data_args.dataset_name
            raise DataError(
                f"the {split} split ({source}) gives no sentence pair: no document of it has two or more sentences "
                "(BERT's format: one sentence per line, a blank line between documents)"
            )


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    previous = start_script_run(training_args, configure_logging=True, threads=args.num_threads or env_threads())
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    training_args.remove_unused_columns = False  # the collator needs the anchor columns
    if args.eval_only and not model_args.model_name_or_path:
        raise RecipeError("`eval_only` needs `model_name_or_path` (the pretrained folder to evaluate)")
    max_length = data_args.max_seq_length

    if args.streaming:
        data, stream = prepare_bert_stream(args, model_args, data_args, training_args)
    else:
        data = prepare_bert_data(args, model_args, data_args, training_args)
    tokenizer, docs = data.tokenizer, data.documents  # sentences in memory-mapped token stores, documents row ranges
    tokenizer.model_max_length = max_length

    def collator_for(split: str) -> DataCollatorForBertPretraining:
        return DataCollatorForBertPretraining(
            tokenizer,
            docs[split],
            max_length=max_length,
            mlm_probability=args.mlm_probability,
            nsp_probability=args.nsp_probability,
            short_seq_probability=args.short_seq_probability,
            seed=training_args.seed,
        )

    if args.streaming:
        pairs = collator_for("validation")  # its pair and mask code; the documents are the stream's buffer
        train_ds = BertStreamPairs(
            stream,
            make_encoder(tokenizer),
            pairs,
            args.stream_buffer_documents,
            args.shuffle_buffer_size,
            training_args.seed,
            source=f"`train_file` {data_args.train_file}",
            repeat=True,  # read until max_steps: Trainer's epochs of an IterableDataset are max_steps long
        )
        train_collator = _StreamCollator(pairs)
    else:
        train_ds = _anchor_dataset(docs["train"], max_length, None, data_args.max_train_samples)
        train_collator = collator_for("train")
    train_pairs = None if args.streaming else len(train_ds)
    repeats = args.eval_pairs_per_anchor
    eval_ds = _anchor_dataset(docs["validation"], max_length, 1_000_000, data_args.max_eval_samples, repeats)
    test_ds = (
        _anchor_dataset(docs["test"], max_length, 2_000_000, data_args.max_predict_samples, repeats)
        if "test" in docs
        else None
    )
    _check_pairs(data_args, {"train": None if args.streaming else train_ds, "validation": eval_ds, "test": test_ds})
    logger.info(
        "pairs per epoch: train %s, validation %d, test %s",
        train_pairs if train_pairs is not None else "streamed",
        len(eval_ds),
        len(test_ds) if test_ds else 0,
    )

    model = build_bert_model(model_args, data_args, tokenizer, max_length)
    # random "next" segments come from held-out documents of the same split: each split gets its own collator
    by_split = {split: collator_for(split) for split in docs if split != "train"}
    by_split["train"] = train_collator
    collator = SplitCollator(by_split)

    trainer, budget = budgeted_trainer(
        EvalSplitTrainer,
        model,
        training_args,
        args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        callbacks=[StepTimesCallback()],  # `[hf_seq] first training step begins at ...` for benchmarks
        split_collator=collator,
    )
    results = train_and_evaluate(trainer, training_args, args, budget, test_ds, data.data_line)
    results |= {
        "model_name_or_path": model_args.model_name_or_path,
        "num_parameters": model.num_parameters(),
        "process_cpu_minutes": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime / 60.0, 2),
        "pairs": {"train_per_epoch": train_pairs, "validation": len(eval_ds), "test": len(test_ds) if test_ds else 0},
    }
    # a model card only for a folder that holds a model
    card = (
        None
        if args.eval_only
        else pretrain_card(args, model_args, training_args, trainer, tokenizer, results, max_length)
    )
    finish_script_run(trainer, training_args, results, command, card=card, save_model=not args.eval_only)
    logger.info("validation %s", results["validation"])  # logged by every process
    logger.info("test %s", results["test"])
    return results


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
