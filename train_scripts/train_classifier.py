"""Train a text classifier (``AutoModelForSequenceClassification``) with ``Trainer``: the recurrent classifier of the
notes by default, any registered ``model_type`` (e.g. ``hf_seq_bert``) or a saved folder (``model_name_or_path``).

    python train_scripts/train_classifier.py configs/sentiment_bilstm.json [--num_train_epochs 3 ...]
    python train_scripts/train_classifier.py configs/sentiment_bilstm.json \
        --train_file reviews.csv --validation_file dev.csv --test_file test.csv \
        --text_column_name review --label_column_name stars --output_dir runs/reviews
    hf-seq-train classifier configs/sentiment_bilstm.json                      # the same, after `pip install`
    torchrun --nproc_per_node 2 train_scripts/train_classifier.py configs/sentiment_bilstm.json  # CPU: gloo
    python train_scripts/train_classifier.py configs/sentiment_bilstm.json --resume_from_checkpoint last  # after a crash

Data (:mod:`hf_seq.train_scripts.arguments`): ``--dataset_name`` (the preset ``hf_seq/sentiment``, a folder, a
``datasets`` name) or ``--train_file`` / ``--validation_file`` / ``--test_file`` (csv, tsv, json, jsonl, parquet);
``--text_column_name`` (default ``text``) and ``--label_column_name`` (default ``label``: strings or numbers, or a
``ClassLabel``). The label set is the training split's (a ``ClassLabel``'s names); a label seen only in another split
is an error. Without a validation split ``--validation_split_percentage`` % of the training rows are held out.

The tokenizer is ``--tokenizer_name``'s or ``--model_name_or_path``'s; with neither one is built on the training split
(``tokenizer_kind`` ``"word"``: the notes' "keep the top V words"; ``"wordpiece"`` for BERT). The model is
``model_type`` + ``model_config`` (``"num_labels": 1`` with two labels is the notes' single sigmoid output). Training
evaluates on the validation split (``eval_strategy``), keeps the best checkpoint if asked, evaluates it on the test
split when there is one and writes the model + tokenizer, ``results.json`` and a model card to ``output_dir``; the
saved ``id2label`` makes ``pipeline("text-classification", model=output_dir)`` print the label names.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch
from datasets import Dataset
from hf_seq.train_scripts.arguments import (
    BudgetArguments,
    PreprocessingArguments,
    RecipeError,
    Task,
    model_config_dict,
    override_values,
    parse_args,
)
from hf_seq.train_scripts.common import (
    TimeBudgetCallback,
    cap_splits,
    describe_data,
    label_lookup,
    label_names,
    load_or_build_model,
    load_task_data,
    require_columns,
    require_text,
    run_training,
    save_run,
    start_run,
    tokenizer_for,
    training_command,
    use_cpu_processes_without_gpu,
)
from hf_seq.train_scripts.features import (
    ColumnTexts,
    cache_root,
    cached_tokenizer,
    data_key,
    label_features,
    streamed_label_names,
    streamed_lookup,
    streamed_task_splits,
    streamed_train_features,
    token_counts,
    tokenized_splits,
    tokenizer_settings,
)
from hf_seq.train_scripts.trainer import HfSeqTrainer
from transformers import AutoConfig, DataCollatorWithPadding, TrainerCallback, set_seed

from hf_seq.data import DataError
from hf_seq.metrics import load_metric
from hf_seq.preprocessing import tokenizer_fingerprint
from hf_seq.word_vectors import MISSING_INITS, TEXT_SUFFIXES, init_embeddings_from_vectors, load_word_vectors

logger = logging.getLogger(__name__)


PRETRAINED_VOCABULARIES = ("tokenizer", "add_vector_words", "add_all_vector_words")
WORD_PRE_TOKENIZERS = ("whitespace_punct", "glove", "whitespace")
_VECTORS_HELP = (
    "word vectors for the embedding of a recurrent model: a folder (`make pretrained` installs GloVe 6B 50-d in "
    "data/pretrained/glove-6b-50d: a .npy + its word list), a GloVe/word2vec text file (.txt/.vec, .gz too), a .npy with "
    "`pretrained_embeddings_words` (each aligned to the tokenizer's words, hf_seq.init_embeddings_from_vectors), or a "
    "saved (vocab_size, embedding_size) matrix (.pt/.bin/.safetensors, or a .npy without a word list). Frozen with the "
    "model config's `freeze_embeddings`"
)


@dataclass
class WordVectorArguments:
    """Pretrained word vectors in a recurrent model's embedding (:mod:`hf_seq.word_vectors`)."""

    pretrained_embeddings: str | None = field(default=None, metadata={"help": _VECTORS_HELP})
    pretrained_embeddings_words: str | None = field(
        default=None,
        metadata={
            "help": "the word list (in row order) of a .npy `pretrained_embeddings`: .parquet or one word a line"
        },
    )
    pretrained_missing_init: str = field(
        default="normal",
        metadata={
            "help": "rows of words without a pretrained vector: 'normal' (the per-dimension mean and std of the "
            "file's vectors), 'zeros', 'mean' (the mean vector) or 'model' (the model's own initialisation)",
            "choices": list(MISSING_INITS),
        },
    )
    pretrained_vocabulary: str = field(
        default="tokenizer",
        metadata={
            "help": "'tokenizer': the vocabulary the tokenizer options give (e.g. the top tokenizer_vocab_size "
            "words); 'add_vector_words': also every training word the vector file has, however rare (its vector "
            "needs no training); 'add_all_vector_words': also every other word of the file (a frozen table then "
            "covers words never seen in training; the table has the file's size); without `pretrained_embeddings` it does nothing",
            "choices": list(PRETRAINED_VOCABULARIES),
        },
    )
    pretrained_vocabulary_limit: int | None = field(
        default=None,
        metadata={
            "help": "with `pretrained_vocabulary` 'add_all_vector_words': add only the file's first N words (GloVe's "
            "rows are in frequency order: its N most frequent words); None: all of them"
        },
    )


def check_word_vector_arguments(args) -> None:
    """``ValueError`` naming the field for a missing vectors path or a value outside the choices."""
    path = args.pretrained_embeddings
    if path and not os.path.exists(path):
        raise ValueError(
            f"`pretrained_embeddings` {path} does not exist (GloVe 6B: `make pretrained`, then "
            "data/pretrained/glove-6b-50d; skip-gram vectors: run train_scripts/train_word_vectors.py first)"
        )
    if args.pretrained_embeddings_words and not os.path.isfile(args.pretrained_embeddings_words):
        raise ValueError(f"`pretrained_embeddings_words` {args.pretrained_embeddings_words} does not exist")
    if args.pretrained_missing_init not in MISSING_INITS:
        raise ValueError(
            f"`pretrained_missing_init` must be one of {MISSING_INITS}, got {args.pretrained_missing_init!r}"
        )
    if args.pretrained_vocabulary not in PRETRAINED_VOCABULARIES:
        raise ValueError(
            f"`pretrained_vocabulary` must be one of {PRETRAINED_VOCABULARIES}, got {args.pretrained_vocabulary!r}"
        )
    limit = getattr(args, "pretrained_vocabulary_limit", None)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"`pretrained_vocabulary_limit` must be a positive number of words, got {limit!r}")
        if args.pretrained_vocabulary != "add_all_vector_words":
            raise ValueError(
                f"`pretrained_vocabulary_limit` {limit} only applies to `pretrained_vocabulary` "
                f"'add_all_vector_words', not {args.pretrained_vocabulary!r}"
            )


def _aligned(args) -> bool:
    """True when ``pretrained_embeddings`` holds words to align (not a matrix already in the tokenizer's order)."""
    path = args.pretrained_embeddings
    return (
        os.path.isdir(path)
        or path.endswith(TEXT_SUFFIXES)
        or (path.endswith(".npy") and bool(args.pretrained_embeddings_words))
    )


def vocabulary_words(args, model_args, tokenizer_kind: str):
    """``(also_keep, extra_words, vectors)`` for :func:`~hf_seq.train_scripts.common.tokenizer_for`: the vector
    file's words that the tokenizer keeps when the training texts have them (``pretrained_vocabulary``
    ``"add_vector_words"``), those it adds anyway (``"add_all_vector_words"``), and the vectors read once, for
    :func:`apply_word_vectors`."""
    if not args.pretrained_embeddings or args.pretrained_vocabulary == "tokenizer":
        return None, (), None
    if model_args.tokenizer_name or model_args.model_name_or_path or tokenizer_kind != "word":
        raise RecipeError(
            f"`pretrained_vocabulary` {args.pretrained_vocabulary!r} shapes a new word-level tokenizer: it cannot change a loaded "
            "one (`tokenizer_name` / `model_name_or_path`) or a sub-word one"
        )
    if not _aligned(args):
        raise RecipeError(
            f"`pretrained_vocabulary` {args.pretrained_vocabulary!r} needs word vectors with their words, not a matrix"
        )
    vectors = load_word_vectors(args.pretrained_embeddings, words=args.pretrained_embeddings_words)
    if args.pretrained_vocabulary == "add_all_vector_words":
        limit = getattr(args, "pretrained_vocabulary_limit", None)
        return None, vectors.words if limit is None else vectors.words[:limit], vectors
    return vectors.index, (), vectors


def apply_word_vectors(args, model, tokenizer, vectors=None, seed: int = 0):
    """Load ``pretrained_embeddings`` into ``model``'s embedding (frozen when its config says
    ``freeze_embeddings``); returns the :class:`~hf_seq.word_vectors.EmbeddingCoverage` (``None`` for a matrix)."""
    if not args.pretrained_embeddings:
        return None
    if not hasattr(model, "load_pretrained_embeddings"):
        raise RecipeError(f"`pretrained_embeddings` needs a recurrent model, not {type(model).__name__}")
    freeze = bool(getattr(model.config, "freeze_embeddings", False))
    if not _aligned(args):
        model.load_pretrained_embeddings(args.pretrained_embeddings, freeze=freeze)
        return None
    coverage = init_embeddings_from_vectors(
        model,
        tokenizer,
        vectors if vectors is not None else args.pretrained_embeddings,
        freeze=freeze,
        missing=args.pretrained_missing_init,
        seed=seed,
        words=args.pretrained_embeddings_words,
    )
    logger.info("pretrained embeddings (%s): %s", "frozen" if freeze else "trainable", coverage)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"pretrained embeddings ({'frozen' if freeze else 'trainable'}): {coverage}")
    return coverage


def coverage_results(coverage, encoded: dict, pad_id) -> dict | None:
    """The coverage report for ``results.json``, with the share of each split's running tokens that have a vector."""
    if coverage is None:
        return None
    ignore = [] if pad_id is None else [pad_id]
    return coverage.to_dict() | {
        f"{split}_token_coverage": round(coverage.token_coverage(dataset["input_ids"], ignore), 6)
        for split, dataset in encoded.items()
    }


@dataclass
class StreamLabelArguments:
    """The label set of ``--streaming true`` (classifier, tagger), which a stream cannot count before training."""

    streaming_label_names: list[str] | None = field(
        default=None,
        metadata={
            "help": "--streaming: labels (tagger: tags) the training stream may have besides those of the validation "
            "file and of its first tokenizer_max_train_lines rows; the label set is known before training, a "
            "training row with another label is an error"
        },
    )


@dataclass
class ClassifierArguments(StreamLabelArguments, WordVectorArguments, PreprocessingArguments, BudgetArguments):
    """Word dropout, pretrained word vectors (recurrent models) and the preprocessing (cache, workers)."""

    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "alpha of frequency-based word dropout in training (a word seen f times becomes the "
            "unknown token with probability alpha / (alpha + f)); 0 = off"
        },
    )

    word_pre_tokenizer: str = field(
        default="whitespace_punct",
        metadata={
            "help": "how a built word-level tokenizer splits text: 'whitespace_punct' (words and punctuation runs, "
            "\\w+|[^\\w\\s]+), 'glove' (as GloVe 6B's text: clitics apart, don't -> do n't, each punctuation mark "
            "alone) or 'whitespace'",
            "choices": list(WORD_PRE_TOKENIZERS),
        },
    )

    def __post_init__(self):
        super().__post_init__()  # PreprocessingArguments' checks
        if not 0.0 <= self.word_dropout:
            raise ValueError(f"`word_dropout` must be >= 0, got {self.word_dropout}")
        if self.word_pre_tokenizer not in WORD_PRE_TOKENIZERS:
            raise ValueError(
                f"`word_pre_tokenizer` must be one of {WORD_PRE_TOKENIZERS}, got {self.word_pre_tokenizer!r}"
            )
        check_word_vector_arguments(self)


SHARED_UNUSED = frozenset({"tokens_column_name", "tags_column_name", "source_lang", "target_lang"})
TASK = Task(
    name="train_classifier",
    arguments=ClassifierArguments,
    defaults={
        "model_type": "hf_seq_rnn",
        "tokenizer_kind": "word",
        "tokenizer_vocab_size": 10000,
        "max_seq_length": 64,
        "text_column_name": "text",
        "label_column_name": "label",
    },
    unused=SHARED_UNUSED | {"max_source_length", "max_target_length"},
    tokenizer_kinds=("word", "wordpiece"),
    model_head="AutoModelForSequenceClassification",
    # the notes' flatten classifier reads exactly max_seq_length positions; other poolings take any length
    derived_config=lambda values, vocab_size, data: (
        {"max_seq_length": data.max_seq_length} if values.get("pooling") == "flatten" else {}
    ),
)


class WordDropoutCollator(TrainerCallback):
    """Wraps a collator; replaces training tokens by ``unk_id`` with probability ``drop_prob[token]``.

    The random draws do not use (or advance) the global RNG: each batch gets its own generator seeded from
    ``(seed, epoch, the batch's token ids)``. Trainer collates batches ahead of the step that uses them and, on
    ``resume_from_checkpoint``, restores the RNG state only after the first batches are collated — with global-RNG
    draws a resumed run would see different masks than the uninterrupted one. As a ``TrainerCallback`` it learns the
    epoch from ``on_epoch_begin`` (``TrainCollatorTrainer`` registers it).
    """

    def __init__(self, base, drop_prob: torch.Tensor, unk_id: int, seed: int = 0) -> None:
        self.base = base
        self.drop_prob = drop_prob  # (vocab_size,) probability per token id; 0 for special tokens
        self.unk_id = unk_id
        self.seed = seed
        self.epoch = 0

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epoch = int(state.epoch + 1e-6)  # a run resumed mid-epoch starts at a fractional epoch

    def batch_generator(self, ids: torch.Tensor) -> torch.Generator:
        digest = hashlib.blake2b(ids.numpy().tobytes(), digest_size=8, key=f"{self.seed}:{self.epoch}".encode())
        return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") & (2**63 - 1))

    def __call__(self, features):
        batch = self.base(features)
        ids = batch["input_ids"]  # (B, T)
        drop = torch.rand(ids.shape, generator=self.batch_generator(ids)) < self.drop_prob[ids]
        batch["input_ids"] = torch.where(drop, torch.full_like(ids, self.unk_id), ids)
        return batch


def word_dropout_collator(base, tokenizer, train_dataset, alpha: float, seed: int = 0):
    """Frequency-based word dropout (Kiperwasser & Goldberg 2016): a word seen ``f`` times in training becomes the
    unknown token with probability ``alpha / (alpha + f)``, so the unknown-word vector gets trained. ``None`` if
    ``alpha`` is 0."""
    if alpha <= 0:
        return None
    if isinstance(train_dataset, Dataset):  # counted from the Arrow values: no Python lists of a large corpus
        counts = torch.from_numpy(token_counts(train_dataset, "input_ids", len(tokenizer))).double()
    else:
        ids = torch.tensor([i for row in train_dataset["input_ids"] for i in row])
        counts = torch.bincount(ids, minlength=len(tokenizer)).double()
    drop_prob = alpha / (alpha + counts)
    drop_prob[torch.tensor(tokenizer.all_special_ids)] = 0.0
    drop_prob[counts == 0] = 0.0
    return WordDropoutCollator(base, drop_prob.float(), tokenizer.unk_token_id, seed=seed)


class TrainCollatorTrainer(HfSeqTrainer):
    """``Trainer`` (:class:`~hf_seq.train_scripts.trainer.HfSeqTrainer`) whose training batches (only) go through ``train_collator`` (evaluation uses ``data_collator``)."""

    def __init__(self, *args, train_collator=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.train_collator = train_collator
        if isinstance(train_collator, TrainerCallback):
            self.add_callback(train_collator)

    def get_train_dataloader(self):
        if self.train_collator is None:
            return super().get_train_dataloader()
        original, self.data_collator = self.data_collator, self.train_collator
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = original


def count_parameters(model: torch.nn.Module) -> dict:
    """Total / trainable parameters and a per-top-module breakdown."""
    per_module = {}
    for name, param in model.named_parameters():
        key = ".".join(name.split(".")[:4]) if name.startswith("rnn.") else name.split(".")[0]
        per_module[key] = per_module.get(key, 0) + param.numel()
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad and not _frozen(model, p)),
        "per_module": per_module,
    }


def _frozen(model, param) -> bool:
    return getattr(model.config, "freeze_embeddings", False) and param is model.get_input_embeddings().weight


def _sigmoid_head(model_args, names: list[str]) -> bool:
    """True for the notes' single sigmoid output: ``num_labels`` 1 with two labels (new model: ``model_config``;
    a saved folder: its config)."""
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path)
        requested = config.num_labels if config.problem_type == "multi_label_classification" else None
    else:
        requested = model_config_dict(model_args).get("num_labels")
        if model_args.config_overrides and "num_labels" in model_args.config_overrides:
            requested = override_values(model_args.config_overrides, AutoConfig.for_model(model_args.model_type)).get(
                "num_labels", requested
            )
    if requested not in (None, 1, len(names)):
        raise RecipeError(
            f"`num_labels` {requested} does not fit the data's {len(names)} labels {names[:10]}: leave it out, or 1 "
            "(a single sigmoid output) for two labels"
        )
    if requested == 1 and len(names) != 2:
        raise RecipeError(f"`num_labels` 1 (a sigmoid output) needs two labels, the data has {len(names)}")
    return requested == 1


def streamed_data_line(data_args, args, raw) -> str:
    """The model card's words about a streamed training file."""
    sizes = " / ".join(f"{len(raw[s])} {s}" for s in ("validation", "test") if s in raw)
    return (
        f"own data files, training file `{data_args.train_file}` streamed (shuffle buffer {args.shuffle_buffer_size}), "
        + ", ".join(f"{s} `{raw[s].info.description}`" for s in ("validation", "test") if s in raw)
        + f"; used: {sizes} rows"
    )


def in_memory(encoded: dict) -> dict:
    """The splits held as ``Dataset`` (a streamed training split left out)."""
    return {split: dataset for split, dataset in encoded.items() if isinstance(dataset, Dataset)}


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, args, training_args = parse_args(TASK, argv)
    return run(model_args, data_args, args, training_args, command=training_command(__file__, argv))


def run(model_args, data_args, args, training_args, command: str, task: Task = TASK) -> dict:
    """Load the data, tokenizer and model, train, evaluate, save; returns the results (also ``results.json``)."""
    previous = start_run(training_args)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    set_seed(training_args.seed)
    text, label = data_args.text_column_name, data_args.label_column_name

    # ---- data: columns and labels checked on every split before anything is built
    if args.streaming:  # `train`: the stream's first rows (the tokenizer's sample); the label set fixed up front
        stream, raw = streamed_task_splits(args, training_args, data_args)
    else:
        stream, raw = None, load_task_data(task, data_args)
    require_columns(raw, {"text_column_name": text, "label_column_name": label})
    require_text(raw, text, "text_column_name")
    if stream is not None:
        names = streamed_label_names(raw, label, "label_column_name", args.streaming_label_names)
    else:
        names = label_names(raw, label, "label_column_name")
    if len(names) < 2:
        raise DataError(f"column {label!r} (`label_column_name`) has a single label {names}: nothing to classify")
    raw = cap_splits(raw, data_args)
    max_length = data_args.max_seq_length
    built_word_tokenizer = not (model_args.tokenizer_name or model_args.model_name_or_path)
    if args.word_pre_tokenizer != "whitespace_punct" and not (
        built_word_tokenizer and model_args.tokenizer_kind == "word"
    ):
        raise RecipeError(
            f"`word_pre_tokenizer` {args.word_pre_tokenizer!r} shapes a new word-level tokenizer: it cannot change a "
            "loaded one (`tokenizer_name` / `model_name_or_path`) or a sub-word one"
        )
    also_keep, extra_words, vectors = vocabulary_words(args, model_args, model_args.tokenizer_kind)
    root = None if stream is not None else cache_root(args, data_args)  # streamed: the first rows, in memory
    base = data_key(data_args, raw, text=text, label=label, names=names, labels=label_features(raw, label))

    def build_tokenizer():  # trained from batches of the Arrow column, never one list of all the texts
        texts = ColumnTexts(raw["train"], [text], max_rows=args.tokenizer_max_train_lines)
        return tokenizer_for(
            model_args,
            lambda: texts,
            max_length,
            pre_tokenizer=args.word_pre_tokenizer,
            also_keep=also_keep,
            extra_words=extra_words,
        )

    if model_args.tokenizer_name or model_args.model_name_or_path or also_keep is not None or extra_words:
        tokenizer = build_tokenizer()  # loaded, or shaped by a vector file: not cached
    else:
        settings = tokenizer_settings(model_args, max_length, args.tokenizer_max_train_lines, args.word_pre_tokenizer)
        tokenizer = cached_tokenizer(root, task.name, base | settings, args.overwrite_cache, build_tokenizer)

    # ---- model
    if _sigmoid_head(model_args, names):  # one sigmoid output = P(second label): the notes' logistic regression
        head = {"num_labels": 1, "problem_type": "multi_label_classification", "id2label": {0: names[1]}}
    else:
        head = {"problem_type": "single_label_classification", "id2label": dict(enumerate(names))}
    head["label2id"] = {v: k for k, v in head["id2label"].items()}
    model = load_or_build_model(
        task,
        model_args,
        data_args,
        tokenizer,
        {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id},
        **head,
    )
    flatten = getattr(model.config, "pooling", None) == "flatten"
    if flatten and model.config.max_seq_length != max_length:
        raise RecipeError(
            f"the model flattens exactly {model.config.max_seq_length} positions: set `max_seq_length` to it, not "
            f"{max_length}"
        )
    coverage = apply_word_vectors(args, model, tokenizer, vectors, seed=training_args.seed)

    # ---- features
    def encode(batch, lookup):
        encoded = tokenizer(batch[text], truncation=True, max_length=max_length)
        encoded["labels"] = [lookup(value) for value in batch[label]]
        return encoded

    def encode_stream(batch, lookup):
        bad = next((t for t in batch[text] if not isinstance(t, str)), "")
        if bad != "":
            raise DataError(
                f"`train_file` {data_args.train_file}: a row has no text in column {text!r} (`text_column_name`): "
                f"got {bad!r}"
            )
        return encode(batch, lookup)

    with training_args.main_process_first(desc="tokenizing"):  # one process builds the cache, the others read it
        encoded = tokenized_splits(
            root,
            task.name,
            base | {"tokenizer": tokenizer_fingerprint(tokenizer), "max_length": max_length, "truncation": True},
            raw,
            {split: partial(encode, lookup=label_lookup(dataset, label, names)) for split, dataset in raw.items()},
            args.preprocessing_num_workers,
            args.overwrite_cache,
        )
    dropout_counts = encoded["train"]  # streamed: the counts of the first rows
    if stream is not None:
        lookup = streamed_lookup(label_lookup(raw["train"], label, names), data_args.train_file, label, names)
        encoded["train"] = streamed_train_features(
            stream, partial(encode_stream, lookup=lookup), encoded["train"].column_names, data_args, args,
            training_args.seed,
        )  # fmt: skip
    collator = DataCollatorWithPadding(tokenizer, padding="max_length" if flatten else "longest", max_length=max_length)
    accuracy = load_metric("accuracy")

    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        logits = logits[0] if isinstance(logits, tuple) else logits
        preds = (logits[:, 0] > 0).astype(np.int64) if logits.shape[-1] == 1 else logits.argmax(-1)
        return accuracy.compute(predictions=preds, references=np.asarray(labels).reshape(-1).astype(np.int64))

    budget = TimeBudgetCallback(args.max_train_minutes, args.max_train_cpu_minutes)
    trainer = TrainCollatorTrainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        train_collator=word_dropout_collator(
            collator, tokenizer, dropout_counts, args.word_dropout, seed=training_args.seed
        ),
        compute_metrics=compute_metrics,
        callbacks=[budget],
    )
    start = time.monotonic()
    train_output = run_training(trainer, training_args)
    train_minutes = (time.monotonic() - start) / 60.0
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test") if "test" in encoded else {}

    data_line = describe_data(data_args, raw)
    if stream is not None:
        data_line = streamed_data_line(data_args, args, raw)
    results = {
        "task": f"text classification, {len(names)} labels",
        "data": data_line,
        "labels": names,
        "validation_accuracy": val["validation_accuracy"],
        "test_accuracy": test.get("test_accuracy"),
        "validation_loss": val["validation_loss"],
        "test_loss": test.get("test_loss"),
        "train_minutes": round(train_minutes, 3),
        "train_loss": train_output.training_loss if math.isfinite(train_output.training_loss) else None,
        "train_steps": trainer.state.global_step,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "epochs_run": trainer.state.epoch,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "torch_threads": torch.get_num_threads(),
        "parameters": count_parameters(model),
        "splits": {k: None if k == "train" and stream is not None else len(v) for k, v in raw.items()},
        "vocab_size": len(tokenizer),
        "model_name_or_path": model_args.model_name_or_path,
        "pretrained_embeddings": args.pretrained_embeddings,
        "pretrained_vocab_coverage": None if coverage is None else coverage.coverage,
        "pretrained_coverage": coverage_results(coverage, in_memory(encoded), tokenizer.pad_token_id),
        "model_type": model.config.model_type,
        "model_config": model.config.to_diff_dict(),
    }
    source = (
        f"from `{model_args.tokenizer_name or model_args.model_name_or_path}`"
        if (model_args.tokenizer_name or model_args.model_name_or_path)
        else f"built on the training split ({model_args.tokenizer_kind})"
    )
    origin = (
        f" Fine-tuned from `{model_args.model_name_or_path}`."
        if model_args.model_name_or_path
        else " Trained from a random initialisation."
    )
    card_metrics = {
        k: results[k]
        for k in ("validation_accuracy", "test_accuracy", "test_loss", "train_minutes")
        if results[k] is not None
    }
    save_run(
        trainer,
        training_args.output_dir,
        results,
        command,
        card={
            "dataset": f"{data_line}; tokenizer of {len(tokenizer)} tokens {source}; inputs truncated to "
            f"{max_length} tokens.",
            "metrics": card_metrics | {"epochs": results["epochs_run"], "processes": training_args.world_size},
            "intended_use": f"Classification of short texts into {len(names)} labels ({', '.join(names[:10])}"
            f"{', ...' if len(names) > 10 else ''}) like those of its training data; a small teaching model, not a "
            f"production classifier.{origin}",
            "limitations": "Trained on one data set with the tokenizer above: words outside its vocabulary map to the "
            "unknown token, and texts unlike the training data (another domain, negation, sarcasm) are often "
            "misjudged.",
        },
    )
    if trainer.is_world_process_zero():
        test_text = f"  test accuracy {results['test_accuracy']:.4f}" if test else "  (no test split)"
        print(
            f"validation accuracy {results['validation_accuracy']:.4f}{test_text}  ({train_minutes:.2f} train minutes)"
        )
    return results


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
