"""What the classifier, the tagger and the BERT fine-tuning share: the classifier's and the tagger's argument class
(:class:`LabelledTextArguments`), their data (:class:`LabelledData`: the checked splits, the label set, the cached
tokenizer and features, the word vectors; a run that finds its features reads no data file), pretrained word vectors
for a recurrent model's embedding, the labels of a streamed training file, frequency-based word dropout in training
batches (a collator and the ``Trainer`` that uses it only for training, :func:`train_and_validate`), parameter counts,
and the model card's words about streamed data.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
from datasets import Dataset, DatasetDict
from hf_seq.train_scripts.arguments import BudgetArguments, PreprocessingArguments
from hf_seq.train_scripts.common import (
    cap_splits,
    describe_data,
    fold_label,
    label_lookup,
    label_names,
    load_task_data,
    require_columns,
    require_nonempty,
    require_text,
    tokenizer_for,
    tokenizer_source,
)
from hf_seq.train_scripts.errors import RecipeError
from hf_seq.train_scripts.features import (
    FeatureCache,
    cache_root,
    cached_tokenizer,
    data_key,
    data_record,
    encoded_features,
    label_features,
    label_id_type,
    streamed_label_names,
    streamed_lookup,
    streamed_task_splits,
    streamed_train_features,
    token_counts,
    tokenizer_settings,
)
from hf_seq.train_scripts.run_folder import run_training
from hf_seq.train_scripts.skeleton import budgeted_trainer
from hf_seq.train_scripts.trainer import HfSeqTrainer
from transformers import TrainerCallback

from hf_seq.toolkit.data_install import resolve_data_path
from hf_seq.toolkit.preprocessing import id_type, tokenizer_fingerprint
from hf_seq.toolkit.word_vectors import MISSING_INITS, TEXT_SUFFIXES, init_embeddings_from_vectors, load_word_vectors

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
    """Pretrained word vectors in a recurrent model's embedding (:mod:`hf_seq.toolkit.word_vectors`)."""

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
            "rows are in frequency order: its N most frequent words); None: all of them",
        },
    )


def check_word_vector_arguments(args) -> None:
    """``ValueError`` naming the field for a value outside its choices or range, a missing vectors path, or a limit
    without the vocabulary it limits."""
    sets = {"pretrained_missing_init": MISSING_INITS, "pretrained_vocabulary": PRETRAINED_VOCABULARIES}
    for name, choices in sets.items():
        if getattr(args, name) not in choices:
            raise ValueError(f"`{name}` must be one of {list(choices)}, got {getattr(args, name)!r}")
    # data/pretrained/<name> (the GloVe recipes) is the data folder's (HF_SEQ_DATA, a clone's data/, the user's)
    path = args.pretrained_embeddings = resolve_data_path(args.pretrained_embeddings)
    if path and not os.path.exists(path):
        raise ValueError(
            f"`pretrained_embeddings` {path} does not exist (GloVe 6B: `hf-seq-data fetch glove-6b-50d` (`make "
            "pretrained` in a clone), then data/pretrained/glove-6b-50d; skip-gram vectors: run `hf-seq-train "
            "word_vectors` first)"
        )
    if args.pretrained_embeddings_words and not os.path.isfile(args.pretrained_embeddings_words):
        raise ValueError(f"`pretrained_embeddings_words` {args.pretrained_embeddings_words} does not exist")
    limit = getattr(args, "pretrained_vocabulary_limit", None)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"`pretrained_vocabulary_limit` must be a positive number of words or null, got {limit!r}")
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
    ``freeze_embeddings``); returns the :class:`~hf_seq.toolkit.word_vectors.EmbeddingCoverage` (``None`` for a matrix)."""
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
    """The coverage report for ``results.json``, with the share of each split's running tokens that have a vector
    (of the splits held as ``Dataset``: a streamed training split left out)."""
    if coverage is None:
        return None
    ignore = [] if pad_id is None else [pad_id]
    return coverage.to_dict() | {
        f"{split}_token_coverage": round(coverage.token_coverage(dataset["input_ids"], ignore), 6)
        for split, dataset in encoded.items()
        if isinstance(dataset, Dataset)
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
class LabelledTextArguments(StreamLabelArguments, WordVectorArguments, PreprocessingArguments, BudgetArguments):
    """The classifier's and the tagger's own arguments: word dropout, pretrained word vectors (recurrent models), the
    labels of a stream and the preprocessing (cache, workers); checked on creation."""

    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "alpha of frequency-based word dropout in training (a word seen f times becomes the "
            "unknown token with probability alpha / (alpha + f)); 0 = off",
        },
    )

    def __post_init__(self):
        super().__post_init__()  # the preprocessing fields and the time budgets
        if not 0 <= self.word_dropout < math.inf:
            raise ValueError(f"`word_dropout` must be >= 0, got {self.word_dropout!r}")
        check_word_vector_arguments(self)


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


def train_and_validate(model, training_args, args, tokenizer, encoded: dict, collator, train_rows, metrics):
    """Train ``model`` on ``encoded["train"]`` (:class:`TrainCollatorTrainer`: training batches through
    :func:`word_dropout_collator`, its counts from ``train_rows``; the time budget of ``max_train_minutes`` /
    ``max_train_cpu_minutes``), then evaluate it on the validation split: ``(trainer, train_minutes, validation
    metrics, results.json's training keys)`` (:func:`training_results`)."""
    train_collator = word_dropout_collator(collator, tokenizer, train_rows, args.word_dropout, seed=training_args.seed)
    trainer, budget = budgeted_trainer(
        TrainCollatorTrainer,
        model,
        training_args,
        args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        train_collator=train_collator,
        compute_metrics=metrics,
    )
    start = time.monotonic()
    train_output = run_training(trainer, training_args)
    train_minutes = (time.monotonic() - start) / 60.0
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    return trainer, train_minutes, val, training_results(trainer, train_output, train_minutes, budget)


def count_parameters(model: torch.nn.Module) -> dict:
    """Total / trainable parameters and a per-top-module breakdown."""
    per_module = {}
    for name, param in model.named_parameters():
        key = ".".join(name.split(".")[:4]) if name.startswith("rnn.") else name.split(".")[0]
        per_module[key] = per_module.get(key, 0) + param.numel()
    return {
        "total": model.num_parameters(),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad and not _frozen(model, p)),
        "per_module": per_module,
    }


def _frozen(model, param) -> bool:
    return getattr(model.config, "freeze_embeddings", False) and param is model.get_input_embeddings().weight


def training_results(trainer, train_output, train_minutes: float, budget) -> dict:
    """``results.json``'s training keys: minutes, loss (None if not finite), steps, whether the time budget stopped
    the run, epochs, the best checkpoint and torch's threads."""
    return {
        "train_minutes": round(train_minutes, 3),
        "train_loss": train_output.training_loss if math.isfinite(train_output.training_loss) else None,
        "train_steps": trainer.state.global_step,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "epochs_run": trainer.state.epoch,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "torch_threads": torch.get_num_threads(),
    }


def card_origins(model_args) -> tuple[str, str]:
    """The model card's words on where the tokenizer and the weights come from."""
    source = tokenizer_source(model_args, f"built on the training split ({model_args.tokenizer_kind})")
    origin = (
        f" Fine-tuned from `{model_args.model_name_or_path}`."
        if model_args.model_name_or_path
        else " Trained from a random initialisation."
    )
    return source, origin


# ---------------------------------------------------------------------------------------------------------------
# the data of the classifier and the tagger
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class LabelColumns:
    """What the classifier and the tagger tell :class:`LabelledData`: the task, the input and label columns, the
    flags that name them and the names they have in the cache keys; ``nested``: one label per word (the tagger);
    ``check_labels(splits, names)``: the script's own checks once the label set is known; ``check_stream(batch)``:
    its check of each batch of a streamed training file, before the batch is encoded; ``unit``: the rows' name in
    the data line."""

    task: object
    inputs: str
    labels: str
    flags: tuple[str, str]
    key_names: tuple[str, str]
    check_labels: Callable[[dict, list[str]], None]
    check_stream: Callable[[dict], None]
    nested: bool = False
    unit: str = "rows"


class LabelledData:
    """The splits of the classifier and the tagger, checked (the columns, their types, the label set) and capped;
    ``names`` (the label set), ``base`` (the cache key of the data) and ``descriptions`` (where each split came from).

    A run with data files (not ``--streaming``) first looks for the record of its files (:func:`data_record`: keyed
    by their fingerprints, the columns, how the splits are drawn and capped); when there is one, and the cached
    tokenizer and features of this key are complete and sound, the run reads no data file. Otherwise (no record, a
    file changed, a cache incomplete, truncated or corrupt) the files are loaded (:attr:`raw`) and checked, and
    what is missing is rebuilt; the record is written once the features are."""

    def __init__(self, columns: LabelColumns, model_args, data_args, args, training_args) -> None:
        self.columns, self.model_args, self.data_args = columns, model_args, data_args
        self.args, self.training_args = args, training_args
        self.stream, self._raw, record = None, None, None
        self.record_cache, self.vectors = None, None
        if args.streaming:  # `train`: the stream's first rows (the tokenizer's sample); the label set fixed up front
            self.stream, raw = streamed_task_splits(args, training_args, data_args)
            self.root = None  # streamed: the first rows, in memory
            self._check(raw)
            return
        self.root = cache_root(args, data_args)
        self.record_cache, record = data_record(
            self.root, f"{columns.task.name}_data", data_args, args.overwrite_cache, columns=self._column_key()
        )
        if record is None:
            self._check(load_task_data(columns.task, data_args))
        else:
            self.names, self.base, self.descriptions = record["names"], record["base"], record["descriptions"]

    def _column_key(self) -> dict:
        key = dict(zip(self.columns.key_names, (self.columns.inputs, self.columns.labels)))
        return key | ({"normalize_labels": True} if self.data_args.normalize_labels else {})

    def _check(self, raw) -> None:
        """The columns and their types, the label set and the script's checks of the loaded splits; then the caps."""
        c = self.columns
        require_columns(raw, dict(zip(c.flags, (c.inputs, c.labels))))
        require_text(raw, c.inputs, c.flags[0], words=c.nested)
        require_nonempty(raw, c.inputs, c.flags[0], words=c.nested)
        normalize = self.data_args.normalize_labels
        if self.stream is not None:
            names = streamed_label_names(raw, c.labels, c.flags[1], self.args.streaming_label_names, nested=c.nested)
            names = list(dict.fromkeys(fold_label(n) for n in names)) if normalize else names
        else:
            names = label_names(raw, c.labels, c.flags[1], nested=c.nested, normalize=normalize)
        c.check_labels(raw, names)
        self._raw, self.names = cap_splits(raw, self.data_args), names
        labels = label_features(self._raw, c.labels)
        self.base = data_key(self.data_args, self._raw, **self._column_key(), names=names, labels=labels)
        self.descriptions = {split: dataset.info.description for split, dataset in self._raw.items()}

    @property
    def raw(self) -> DatasetDict:
        """The loaded, checked and capped splits (loaded now when the record made it unnecessary until now)."""
        if self._raw is None:
            self._check(load_task_data(self.columns.task, self.data_args))
        return self._raw

    def tokenizer(self, texts: Callable, pre_tokenizer: str, key_pre_tokenizer: str):
        """The tokenizer given (``tokenizer_name`` / ``model_name_or_path``) or shaped by a vector file
        (:func:`vocabulary_words`' ``also_keep, extra_words``; the vectors it reads are kept for
        :meth:`word_vectors`), else the one cached for this data and these settings, else built on ``texts(training
        split)`` and cached."""
        model_args, args, max_length = self.model_args, self.args, self.data_args.max_seq_length
        also_keep, extra_words, self.vectors = vocabulary_words(args, model_args, model_args.tokenizer_kind)

        def build():  # trained from batches of the Arrow column, never one list of all the texts
            return tokenizer_for(
                model_args,
                lambda: texts(self.raw["train"]),
                max_length,
                pre_tokenizer=pre_tokenizer,
                also_keep=also_keep,
                extra_words=extra_words,
            )

        if model_args.tokenizer_name or model_args.model_name_or_path or also_keep is not None or extra_words:
            return build()  # loaded, or shaped by a vector file: not cached
        settings = tokenizer_settings(model_args, max_length, args.tokenizer_max_train_lines, key_pre_tokenizer)
        return cached_tokenizer(self.root, self.columns.task.name, self.base | settings, args.overwrite_cache, build)

    def word_vectors(self, model, tokenizer):
        """``pretrained_embeddings`` into ``model``'s embedding (:func:`apply_word_vectors`, with the vectors
        :meth:`tokenizer` read); the coverage, or None."""
        return apply_word_vectors(self.args, model, tokenizer, self.vectors, seed=self.training_args.seed)

    def features(self, tokenizer, encode: Callable):
        """``(features, the in-memory training features)``: the splits tokenized by ``encode(batch, lookup)`` (a
        label -> id), read from the cache when complete and sound, else built into it (:class:`FeatureCache`;
        :func:`encoded_features`' narrow ids); with ``--streaming`` the training split is the stream, each batch
        checked by the columns' ``check_stream(batch)`` first, and the second value its first rows (the word-dropout
        counts)."""
        c, args, max_length = self.columns, self.args, self.data_args.max_seq_length
        types = encoded_features(tokenizer, label_id_type(len(self.names)), nested=c.nested)
        key = self.base | {"tokenizer": tokenizer_fingerprint(tokenizer), "max_length": max_length, "truncation": True}
        key |= {"ids": None if types is None else id_type(tokenizer)}
        with self.training_args.main_process_first(desc="tokenizing"):  # one process builds, the others read
            cache = FeatureCache(self.root, c.task.name, key, overwrite=args.overwrite_cache)
            encoded = cache.load(list(self.descriptions))
            if encoded is None:
                logger.info("tokenizing %s (cache: %s)", ", ".join(self.descriptions), cache.folder or "in memory")
                functions = {
                    split: partial(
                        encode,
                        lookup=label_lookup(
                            dataset, c.labels, self.names, nested=c.nested, normalize=self.data_args.normalize_labels
                        ),
                    )
                    for split, dataset in self.raw.items()
                }
                features = None if types is None else dict.fromkeys(self.raw, types)
                encoded = cache.build(self.raw, functions, num_proc=args.preprocessing_num_workers, features=features)
            else:
                logger.info("tokenized splits read from %s", cache.folder)
            if self.record_cache is not None:  # (streamed: no record)
                self.record_cache.save_record(
                    {"names": self.names, "base": self.base, "descriptions": self.descriptions}
                )
        for split, dataset in encoded.items():
            dataset.info.description = self.descriptions[split]
        first = encoded["train"]
        if self.stream is not None:
            lookup = label_lookup(
                self._raw["train"], c.labels, self.names, nested=c.nested, normalize=self.data_args.normalize_labels
            )
            lookup = streamed_lookup(lookup, self.data_args.train_file, c.labels, self.names)
            encoded["train"] = streamed_train_features(
                self.stream, partial(_checked_encode, check=c.check_stream, encode=encode, lookup=lookup),
                first.column_names, self.data_args, args, self.training_args.seed,
            )  # fmt: skip
        return encoded, first

    def model_results(self, model, tokenizer, coverage, encoded: dict, vocab_coverage: bool = False) -> dict:
        """``results.json``'s keys on the model: parameters, split sizes (``None`` rows for a streamed training
        file), vocabulary, where it started from, the pretrained vectors' coverage (of the vocabulary too when
        ``vocab_coverage``: the classifier's), its type."""
        splits = {k: None if k == "train" and self.stream is not None else n for k, n in self.base["splits"].items()}
        out = {
            "parameters": count_parameters(model),
            "splits": splits,
            "vocab_size": len(tokenizer),
            "model_name_or_path": self.model_args.model_name_or_path,
            "pretrained_embeddings": self.args.pretrained_embeddings,
        }
        if vocab_coverage:
            out["pretrained_vocab_coverage"] = None if coverage is None else coverage.coverage
        out["pretrained_coverage"] = coverage_results(coverage, encoded, tokenizer.pad_token_id)
        out["model_type"] = model.config.model_type
        return out

    def data_line(self, encoded: dict) -> str:
        """The model card's words about the data (a streamed training file's too)."""
        if self.stream is not None:
            raw, shown = self._raw, [s for s in ("validation", "test") if s in self._raw]
            return (
                f"own data files, training file `{self.data_args.train_file}` streamed (shuffle buffer "
                f"{self.args.shuffle_buffer_size}), "
                + ", ".join(f"{s} `{raw[s].info.description}`" for s in shown)
                + f"; used: {' / '.join(f'{len(raw[s])} {s}' for s in shown)} rows"
            )
        return describe_data(self.data_args, DatasetDict(encoded), unit=self.columns.unit)


def _checked_encode(batch, check: Callable, encode: Callable, lookup: Callable) -> dict:
    check(batch)
    return encode(batch, lookup)
