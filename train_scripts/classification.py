"""What the classifier, the tagger and the BERT fine-tuning share: pretrained word vectors for a recurrent model's
embedding, the labels of a streamed training file, frequency-based word dropout in training batches (a collator and
the ``Trainer`` that uses it only for training), parameter counts, and the model card's words about streamed data.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from dataclasses import dataclass, field

import torch
from datasets import Dataset
from hf_seq.train_scripts.errors import RecipeError
from hf_seq.train_scripts.features import token_counts
from hf_seq.train_scripts.trainer import HfSeqTrainer
from transformers import TrainerCallback

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
    return source, origin
