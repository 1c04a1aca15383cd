"""The one argument parser of every train script: ``[recipe.json] [--field value ...]`` into dataclasses.

A recipe is a JSON object whose keys are the fields of four dataclasses, the same for every script:

* :class:`ModelArguments` — ``model_type`` + ``model_config`` (a new model), or ``model_name_or_path`` (a saved
  folder to continue from); the tokenizer (``tokenizer_name``, or the kind of tokenizer built on the training split);
* :class:`DataArguments` — where the data comes from (``dataset_name`` or ``train_file`` / ``validation_file`` /
  ``test_file``), its columns and lengths, with the names of ``transformers``' example scripts;
* the script's own dataclass (time budgets, sampling settings of the language model, ...);
* ``TrainingArguments`` (``Seq2SeqTrainingArguments`` for translation).

The recipe gives the defaults and command-line flags override them. Everything is checked before any data is read:
invalid JSON (file, line and column), a recipe that is not a JSON object, unknown keys (with the closest known key,
or the script they belong to), values of the wrong type (key, expected type, value), unknown data files or types,
an unregistered ``model_type`` or a ``model_config`` its config class rejects; every field's range or set of values,
checked beside the fields in each dataclass's ``__post_init__`` as transformers' example scripts do (the fields of
transformers' ``TrainingArguments`` that it leaves unchecked in :class:`HfSeqTrainingArguments`); and, in
:mod:`hf_seq.train_scripts.checks`, a run that trains something, ``output_dir`` (writable),
``resume_from_checkpoint``, the tokenizer and model folders (family, saved head) and a preset's corpus. Errors are
:class:`RecipeError` (a ``ValueError``) naming the recipe file or the command line; the command line prints them as
one line (:func:`hf_seq.train_scripts.cli.report_user_errors`).
"""

from __future__ import annotations

import argparse
import difflib
import enum
import json
import math
import re
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union

from hf_seq.train_scripts import tasks
from hf_seq.train_scripts.checks import HEADS, check_run, config_fields, model_config_dict, override_values
from hf_seq.train_scripts.errors import RecipeError
from hf_seq.train_scripts.recipes import default_recipe, read_recipe, resolve_recipe, shipped_recipes
from hf_seq.train_scripts.trainer import start_deepspeed_comm_on_cpu
from huggingface_hub.dataclasses import type_validator
from transformers import HfArgumentParser, Seq2SeqTrainingArguments, TrainingArguments

from hf_seq.toolkit.data import DATASET_PRESETS, DataError, check_data_file
from hf_seq.toolkit.data_install import resolve_data_path

TOKENIZER_KINDS = ("word", "char", "wordpiece", "bpe")
SIDES = ("left", "right")


@dataclass
class ModelArguments:
    """Which model to build or load, and its tokenizer."""

    model_type: str | None = field(
        default=None,
        metadata={
            "help": "Registered model_type of a new model: hf_seq_rnn, hf_seq_rnn_seq2seq, hf_seq_transformer, "
            "hf_seq_bert."
        },
    )
    model_config: dict | str | None = field(
        default=None,
        metadata={
            "help": "Fields of the new model's config: a JSON object in the recipe, a JSON string on the command "
            "line (it replaces the recipe's). Vocabulary size, special token ids and labels come from the tokenizer and the "
            "data."
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={
            "help": "Comma-separated field=value pairs applied on top of model_config (or of the config loaded "
            "from model_name_or_path), e.g. 'hidden_size=128,dropout=0.1'."
        },
    )
    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A saved model folder to continue from or fine-tune (an hf_seq folder; for the BERT scripts "
            "also a transformers BERT checkpoint, converted on load). Its model_type and config replace model_type and "
            "model_config."
        },
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "A saved tokenizer folder. Default: the tokenizer of model_name_or_path; with neither, a "
            "tokenizer is built on the training split."
        },
    )
    tokenizer_kind: str | None = field(
        default=None,
        metadata={"help": f"Kind of tokenizer built on the training split: one of {list(TOKENIZER_KINDS)}."},
    )
    tokenizer_vocab_size: int | None = field(
        default=None,
        metadata={"help": "Vocabulary size of a built tokenizer (word level: the top V words; None: all)."},
    )
    tokenizer_min_frequency: int | None = field(
        default=None,
        metadata={"help": "Drop words / merges seen fewer times in training (None: the builder's default)."},
    )
    lowercase: bool | None = field(
        default=None, metadata={"help": "Lowercase before building / applying the tokenizer (None: its default)."}
    )
    padding_side: str = field(default="right", metadata={"help": '"right" | "left" (the notes pad in front).'})
    truncation_side: str = field(default="right", metadata={"help": '"right" keeps the first tokens, "left" the last.'})
    allow_other_head: bool = field(
        default=False,
        metadata={
            "help": "Start from a model_name_or_path saved with another head (e.g. a classifier's embedding and "
            "encoder for a language model): its shared weights and tokenizer are reused, the new head starts random. "
            "Without it such a folder is an error."
        },
    )
    ignore_mismatched_sizes: bool = field(
        default=False,
        metadata={
            "help": "Re-initialise weights of model_name_or_path whose shapes differ (e.g. a head with another "
            "number of labels)."
        },
    )

    def __post_init__(self):
        if self.tokenizer_vocab_size is not None and self.tokenizer_vocab_size < 1:
            raise ValueError(
                f"`tokenizer_vocab_size` must be a positive integer or null, got {self.tokenizer_vocab_size!r}"
            )
        for name in ("padding_side", "truncation_side"):
            if getattr(self, name) not in SIDES:
                raise ValueError(f"`{name}` must be one of {list(SIDES)}, got {getattr(self, name)!r}")


@dataclass
class DataArguments:
    """Where the data comes from and how it is read (the names of transformers' example scripts)."""

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": f"A preset ({', '.join(sorted(DATASET_PRESETS))}), a save_to_disk folder, a local folder of "
            "data files named by split, or any datasets.load_dataset name (the Hub when online)."
        },
    )
    dataset_config_name: str | None = field(
        default=None, metadata={"help": "The configuration of dataset_name (datasets.load_dataset's second argument)."}
    )
    train_file: str | None = field(
        default=None,
        metadata={
            "help": "Training data: csv, tsv, json, jsonl, parquet "
            "(txt for the language-model and pretraining scripts)."
        },
    )
    validation_file: str | None = field(default=None, metadata={"help": "Validation data (same formats)."})
    test_file: str | None = field(default=None, metadata={"help": "Test data (same formats); evaluated at the end."})
    validation_split_percentage: float | None = field(
        default=5,
        metadata={
            "help": "Without a validation split: hold out this percentage of the training rows (seeded by split_seed).",
        },
    )
    split_seed: int = field(
        default=42, metadata={"help": "Seed of a preset's fixed split and of validation_split_percentage."}
    )
    text_column_name: str | None = field(default=None, metadata={"help": "Column with the text (default: text)."})
    label_column_name: str | None = field(default=None, metadata={"help": "Column with the label (default: label)."})
    tokens_column_name: str | None = field(
        default=None,
        metadata={
            "help": "Tagger: column with the list of words (default: tokens; text_column_name "
            "is taken as in run_ner.py)."
        },
    )
    tags_column_name: str | None = field(
        default=None,
        metadata={
            "help": "Tagger: column with one tag per word (default: tags; label_column_name is taken as in run_ner.py)."
        },
    )
    normalize_labels: bool = field(
        default=False,
        metadata={
            "help": "Strip the spaces around each label (or tag) and fold its case, so that `pos`, ` Pos` and `POS ` "
            "are one class `pos`; without it, labels that differ only so are named in a warning and train as "
            "classes of their own."
        },
    )
    source_lang: str | None = field(default=None, metadata={"help": "Translation: source key of `translation`."})
    target_lang: str | None = field(default=None, metadata={"help": "Translation: target key of `translation`."})
    max_seq_length: int | None = field(default=None, metadata={"help": "Truncate inputs to this many tokens."})
    max_source_length: int | None = field(default=None, metadata={"help": "Truncate sources to this many tokens."})
    max_target_length: int | None = field(default=None, metadata={"help": "Truncate targets to this many tokens."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N validation rows."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Use only the first N test rows."})

    def __post_init__(self):
        if self.validation_split_percentage is not None and not 0 <= self.validation_split_percentage < 100:
            raise ValueError(
                f"`validation_split_percentage` must be in [0, 100) or null, got {self.validation_split_percentage!r}"
            )
        lengths = ("max_seq_length", "max_source_length", "max_target_length")
        for name in (*lengths, "max_train_samples", "max_eval_samples", "max_predict_samples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer or null, got {getattr(self, name)!r}")


@dataclass
class BudgetArguments:
    """Time budgets of the training steps (evaluation and saving excluded), for every script."""

    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Stop training after this many minutes of training steps (wall clock)."},
    )
    max_train_cpu_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop training after this many CPU-minutes of training steps (one thread: core-minutes; "
            "fair budgets on a shared machine).",
        },
    )

    def __post_init__(self):
        for name in ("max_train_minutes", "max_train_cpu_minutes"):
            if getattr(self, name) is not None and not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"`{name}` must be > 0 or null, got {getattr(self, name)!r}")


@dataclass
class PreprocessingArguments(BudgetArguments):
    """Tokenize once, on disk (:mod:`hf_seq.toolkit.preprocessing`), or stream: the fields of transformers' ``run_clm.py``.
    A task's argument class inherits them, and with them the time budgets (:class:`BudgetArguments`)."""

    preprocessing_num_workers: int | None = field(
        default=None,
        metadata={"help": "Processes that tokenize the data into the cache (None: 1)."},
    )
    cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "Folder of the preprocessing cache (default: $HF_SEQ_CACHE, else ~/.cache/hf_seq/preprocessed). "
            "A cache is keyed by the data files (path, size, mtime, first/last MiB), the tokenizer and the settings."
        },
    )
    overwrite_cache: bool = field(
        default=False, metadata={"help": "Rebuild the preprocessing cache even if a complete one exists."}
    )
    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read the training data as a datasets IterableDataset (load_dataset(..., streaming=True)): no "
            "preprocessing pass, constant memory; needs max_steps. The file is read again and again until max_steps, "
            "each pass with its own seeded shuffle; the passes are joined (the batch that crosses the end "
            "of a pass holds its last examples and the first of the next: no short batch), so a resumed run has the "
            "batches of an uninterrupted one in any pass."
        },
    )
    streaming_split_by_node: bool = field(
        default=False,
        metadata={
            "help": "--streaming under torchrun / accelerate launch: each process reads and tokenizes its own part of "
            "the stream (datasets.distributed.split_dataset_by_node; accelerate's dispatch_batches off) instead of "
            "the first process reading every batch; another batch composition than one process (train_lm, "
            "train_translation)."
        },
    )
    tokenizer_max_train_lines: int | None = field(
        default=None,
        metadata={"help": "Build the tokenizer on the first N training rows only (None: all rows)."},
    )
    shuffle_buffer_size: int = field(
        default=10_000,
        metadata={"help": "--streaming: size of the seeded shuffle buffer of the training windows (0: no shuffling)."},
    )

    def __post_init__(self):
        super().__post_init__()  # the time budgets
        for name in ("preprocessing_num_workers", "tokenizer_max_train_lines"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer or null, got {getattr(self, name)!r}")
        if self.shuffle_buffer_size < 0:
            raise ValueError(f"`shuffle_buffer_size` must be >= 0, got {self.shuffle_buffer_size!r}")
        if self.streaming_split_by_node and not self.streaming:
            raise ValueError("`streaming_split_by_node` true needs `streaming` true (it splits the training stream)")


_OVERWRITE_HELP = (
    "Train from scratch into an output_dir that holds a run already: its checkpoint-N folders are removed first, and "
    "--resume_from_checkpoint is ignored (without it, re-running a finished run with --resume_from_checkpoint last "
    "does nothing)."
)


SAMPLING_STRATEGIES = ("random", "sequential", "group_by_length", "batch_rebalance", "length_buckets")
_SAMPLING_HELP = (
    "Sampler for training: transformers' 'random' (default), 'sequential', 'group_by_length', 'batch_rebalance', or "
    "'length_buckets' (hf_seq.toolkit.samplers.LengthBucketSampler: each epoch, batches of examples of similar length in "
    "random order, as fairseq and OpenNMT-py batch)."
)


@dataclass
class _HfSeqTrainingFields:
    """The fields both argument classes add to transformers': ``overwrite_output_dir`` (the field of transformers 4's
    ``TrainingArguments``) and ``train_sampling_strategy="length_buckets"`` (read by
    :class:`hf_seq.train_scripts.trainer.HfSeqTrainer`). A recipe value reaches the dataclass as a parser default,
    which argparse does not check against the choices: it is checked here, with the values of transformers'
    fields that ``TrainingArguments`` leaves unchecked until a step fails (or never checks), before its own
    ``__post_init__``. A field the class (or the installed transformers release) does not have is skipped."""

    overwrite_output_dir: bool = field(default=False, metadata={"help": _OVERWRITE_HELP})
    train_sampling_strategy: str = field(
        default="random", metadata={"help": _SAMPLING_HELP, "choices": list(SAMPLING_STRATEGIES)}
    )

    def __post_init__(self):
        if self.train_sampling_strategy not in SAMPLING_STRATEGIES:
            raise ValueError(
                f"`train_sampling_strategy` must be one of {list(SAMPLING_STRATEGIES)}, got "
                f"{self.train_sampling_strategy!r}"
            )
        for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)!r}")
        for name in ("learning_rate", "weight_decay", "warmup_steps", "dataloader_num_workers"):
            if not 0 <= getattr(self, name) < math.inf:  # learning_rate 0 keeps the weights (a model evaluated)
                raise ValueError(f"`{name}` must be >= 0, got {getattr(self, name)!r}")
        for name in ("adam_beta1", "adam_beta2", "label_smoothing_factor"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {getattr(self, name)!r}")
        for name in ("adam_epsilon", "logging_steps", "save_steps"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"`{name}` must be > 0, got {getattr(self, name)!r}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"`seed` must be in [0, 4294967296), got {self.seed!r}")
        if self.data_seed is not None and not 0 <= self.data_seed < 2**32:
            raise ValueError(f"`data_seed` must be in [0, 4294967296) or null, got {self.data_seed!r}")
        if self.max_grad_norm is not None and not 0 <= self.max_grad_norm < math.inf:
            raise ValueError(f"`max_grad_norm` must be >= 0 or null, got {self.max_grad_norm!r}")
        if getattr(self, "warmup_ratio", None) is not None and not 0 <= self.warmup_ratio <= 1:
            raise ValueError(f"`warmup_ratio` must be in [0, 1] or null, got {self.warmup_ratio!r}")
        for name in ("eval_steps", "neftune_noise_alpha"):
            if getattr(self, name, None) is not None and not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"`{name}` must be > 0 or null, got {getattr(self, name)!r}")
        counts = ("eval_accumulation_steps", "torch_empty_cache_steps", "save_total_limit")
        for name in (*counts, "dataloader_prefetch_factor", "generation_num_beams", "generation_max_length"):
            if getattr(self, name, None) is not None and getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1 or null, got {getattr(self, name)!r}")
        if self.train_sampling_strategy == "group_by_length" and hasattr(self, "group_by_length"):
            self.group_by_length = True  # transformers 5.0 reads its own `group_by_length` flag instead
        super().__post_init__()  # TrainingArguments' own


@dataclass
class HfSeqTrainingArguments(_HfSeqTrainingFields, TrainingArguments):
    """``TrainingArguments`` plus ``overwrite_output_dir`` and ``train_sampling_strategy``."""


@dataclass
class HfSeqSeq2SeqTrainingArguments(_HfSeqTrainingFields, Seq2SeqTrainingArguments):
    """``Seq2SeqTrainingArguments`` plus ``overwrite_output_dir`` and ``train_sampling_strategy``."""


@dataclass(frozen=True)
class Task:
    """What one train script reads: its own dataclass, its ``TrainingArguments`` class, defaults of the shared fields
    and the shared fields it does not use (giving one is an error, not silently ignored)."""

    name: str
    arguments: type
    training_arguments: type = HfSeqTrainingArguments
    defaults: dict = field(default_factory=dict)
    unused: frozenset = frozenset()
    text_files: bool = False  # .txt data files allowed (language models, pretraining)
    tokenizer_kinds: tuple = TOKENIZER_KINDS  # kinds of tokenizer it can build
    # config fields a new model takes from its other fields, the vocabulary size and the data arguments
    # (e.g. a one-hot LM: embedding_size = vocab_size; a flattening classifier: max_seq_length)
    derived_config: Callable[[dict, int, DataArguments], dict] | None = None
    model_head: str | None = None  # the Auto class the model is built with, e.g. "AutoModelForSequenceClassification"
    convert_transformers_bert: bool = True  # a transformers BERT checkpoint becomes hf_seq's BERT (False: kept as is)
    model_head_of: Callable[[Any], str] | None = None  # the head chosen by the script's own arguments (finetune_bert)
    model_types: tuple | None = None  # the model types a model_name_or_path may hold (None: any with model_head)
    required: tuple = ()  # fields of DataArguments / the script's arguments it cannot run without


# groups of shared fields for a Task's ``unused``: the label and tag columns, and the translation pairs' fields
LABEL_FIELDS = frozenset({"label_column_name", "tokens_column_name", "tags_column_name", "normalize_labels"})
TRANSLATION_FIELDS = frozenset({"source_lang", "target_lang", "max_source_length", "max_target_length"})
# the defaults of the BERT scripts (pretrain_bert, finetune_bert): hf_seq's BERT with a WordPiece tokenizer
BERT_DEFAULTS = {
    "model_type": "hf_seq_bert",
    "tokenizer_kind": "wordpiece",
    "tokenizer_vocab_size": 8000,
    "max_seq_length": 128,
}


# ---------------------------------------------------------------------------------------------------------------
# type checks of recipe values
# ---------------------------------------------------------------------------------------------------------------
def recipe_type(annotation):
    """The type a recipe's JSON value of a field annotated ``annotation`` is checked against (huggingface_hub's
    ``type_validator``): a float field takes a JSON integer too; an enum, also transformers' ``Enum | str``, its
    values; a class JSON cannot hold (``GenerationConfig``, a path) is checked by the field's own class."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (Union, types.UnionType):
        if str in args and any(isinstance(a, type) and issubclass(a, enum.Enum) for a in args):
            args = tuple(a for a in args if a is not str)
        return Union[tuple(recipe_type(a) for a in args)]
    if origin in (list, dict) and args:
        return origin[tuple(recipe_type(a) for a in args)]
    if annotation is float:
        return int | float
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return Literal[tuple(member.value for member in annotation)]
    if annotation in (bool, int, str, dict, list, type(None)) or origin in (Literal, list, dict):
        return annotation
    return Any


# fields whose annotation is narrower than what TrainingArguments accepts (`fsdp: str | None`, but `--fsdp` / `true`
# turns FSDP on)
_ACCEPTED_TYPES = {"fsdp": bool | str | None}


def _field_types(dataclass_types) -> dict[str, Any]:
    hints = {}
    for dtype in dataclass_types:
        resolved = typing.get_type_hints(dtype)
        for f in fields(dtype):
            if f.init:
                hints[f.name] = _ACCEPTED_TYPES.get(f.name, resolved[f.name])
    return hints


def _owner_hint(key: str, task: Task) -> str:
    """Which other script reads ``key``: a hint for an unknown key."""
    for name in tasks.TASKS:
        try:
            other = tasks.script(name).TASK
        except Exception:  # noqa: BLE001 - a hint only
            continue
        if key in _field_types((other.arguments,)) and key not in task.unused:
            return f" (`{key}` is an option of {other.name})"
    return ""


def _config_field_hint(key: str, model_type: Any, task: Task) -> str:
    model_type = model_type or task.defaults.get("model_type")
    if not isinstance(model_type, str):
        return ""
    try:
        from transformers import AutoConfig

        import hf_seq  # noqa: F401 - registers the model types

        config = AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001 - a hint only
        return ""
    if key in config.to_dict() or key in getattr(type(config), "renamed_fields", {}):
        return f" (`{key}` is a field of the {model_type} config: put it under `model_config`, or pass --config_overrides {key}=VALUE)"
    return ""


def _unknown_key(key: str, task: Task, known: list[str], model_type: Any) -> str:
    """Why ``key`` is unknown: a field of the model config, an option of another script, or a near miss."""
    close = difflib.get_close_matches(key, known, n=1)
    return (
        _config_field_hint(key, model_type, task)
        or _owner_hint(key, task)
        or (f" (did you mean `{close[0]}`?)" if close else "")
    )


def check_recipe(recipe: dict, task: Task, dataclass_types: tuple, where: str) -> None:
    """Unknown keys and values of the wrong type, each error naming ``where`` (the recipe file), the key and the
    expected type."""
    types_by_key = _field_types(dataclass_types)
    known = sorted(k for k in types_by_key if k not in task.unused)
    for key, value in recipe.items():
        if key not in known:
            hint = _unknown_key(key, task, known, recipe.get("model_type"))
            raise RecipeError(f"{where}: unknown key `{key}` for {task.name}{hint}")
        if key == "model_config" and isinstance(value, str):  # a JSON string is for the command line only
            raise RecipeError(f"{where}: `model_config` must be a JSON object, got {json.dumps(value)}")
        try:
            type_validator(key, value, recipe_type(types_by_key[key]))
        except TypeError as error:
            raise RecipeError(f"{where}: `{key}` {json.dumps(value)} has the wrong type: {error}") from None


def _flags_given(argv: list[str]) -> list[str]:
    return [arg[2:].split("=", 1)[0] for arg in argv if arg.startswith("--")]


DATA_FILES = ("train_file", "validation_file", "test_file")
COLUMN_NAMES = ("text_column_name", "label_column_name", "tokens_column_name", "tags_column_name")


def _data_source_from_command_line(recipe: dict, flags: set[str]) -> dict:
    """The command line's data source replaces the recipe's as a whole: data files given as flags drop the recipe's
    ``dataset_name`` (and its config), a ``--dataset_name`` drops the recipe's data files, and either drops the
    recipe's column names (they name the recipe's data; the script's defaults or the given flags apply)."""
    recipe = dict(recipe)
    files, name = bool(flags & set(DATA_FILES)), "dataset_name" in flags
    if files:
        recipe.pop("dataset_name", None)
        recipe.pop("dataset_config_name", None)
    if name:
        for key in DATA_FILES:
            recipe.pop(key, None)
    if files or name:
        for key in COLUMN_NAMES:
            recipe.pop(key, None)
    return recipe


class ArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` whose usage errors (a value of the wrong type, a choice not offered, a missing value) are
    one line, ``<prog>: error: <message>``, exit status 2 — without argparse's usage block, which lists every field
    (``--help`` prints it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`--help` lists the options)\n")


def parse_args(task: Task, argv: list[str] | None = None) -> tuple:
    """``[recipe.json] [--field value ...]`` -> ``(model_args, data_args, task_args, training_args)``, checked.

    The recipe (an optional first argument) sets defaults, flags override them — the data source as a whole: data
    files on the command line replace the recipe's ``dataset_name`` and the other way round. Every key and value is
    checked (:func:`check_recipe`, :func:`check_arguments`) before the caller reads any data."""
    argv = list(sys.argv[1:] if argv is None else argv)
    dataclass_types = (ModelArguments, DataArguments, task.arguments, task.training_arguments)
    parser = ArgumentParser(dataclass_types)
    parser.set_defaults(**task.defaults)
    for action in parser._actions:
        if action.dest in task.unused:
            action.help = argparse.SUPPRESS  # --help lists only what this script reads
    recipe: dict = {}
    recipe_where = None  # where the recipe's values come from, for the errors
    shipped = False  # a recipe shipped with hf_seq (named, or the default): its label count is its corpus'
    if argv and not argv[0].startswith("-"):  # a recipe file, or a shipped recipe's name
        recipe_path = resolve_recipe(argv.pop(0), task.name)
        recipe = read_recipe(recipe_path)
        recipe_where = f"recipe {recipe_path}"
        shipped = any(recipe_path.resolve() == path.resolve() for path in shipped_recipes().values())
    elif (default := default_recipe(task.name)) is not None:  # no recipe: the task's default recipe
        recipe_where = f"the default recipe {default[0]}"
        shipped = True
        recipe = default[1]
        parser.epilog = (
            f"Without a recipe, the defaults are those of the shipped recipe {default[0]} (docs/training.md)."
        )
    if recipe_where is not None:
        check_recipe(recipe, task, dataclass_types, recipe_where)
        recipe = _data_source_from_command_line(recipe, set(_flags_given(argv)))
        given = set(_flags_given(argv))
        if shipped and (recipe_where.startswith("the default recipe") or given & {*DATA_FILES, "dataset_name"}):
            recipe = _labels_from_the_data(recipe, given)  # the user's data, not the recipe's corpus
        parser.set_defaults(**recipe)
        for action in parser._actions:
            if action.dest in recipe:
                action.required = False
    flags = set(_flags_given(argv))
    known = sorted(k for k in _field_types(dataclass_types) if k not in task.unused)
    for flag in sorted(flags - set(known) - {"help"}):
        hint = _unknown_key(flag, task, known, recipe.get("model_type"))
        raise RecipeError(f"command line: --{flag} is not an option of {task.name}{hint}")
    where = f"{recipe_where} with the command line" if recipe_where else "command line"
    sources = {key: recipe_where for key in recipe} | {key: "command line" for key in flags}

    def origin(key: str) -> str:
        return sources.get(key, f"{task.name}'s default")

    try:  # each dataclass checks its fields as it is built (``__post_init__``)
        model_args, data_args, task_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    except (ValueError, TypeError) as error:  # our checks name their field first: say where it was set
        named = re.match(r"`(\w+)`", str(error))
        raise RecipeError(f"{origin(named[1]) if named and named[1] in sources else where}: {error}") from error
    # data/pretrained/<name> (the MiniLM recipes) is the data folder's (HF_SEQ_DATA, a clone's data/, the user's)
    model_args.model_name_or_path = resolve_data_path(model_args.model_name_or_path)
    model_args.tokenizer_name = resolve_data_path(model_args.tokenizer_name)
    check_run(task, model_args, data_args, task_args, training_args, sources=sources)
    check_arguments(task, model_args, data_args, training_args, sources=sources)
    start_deepspeed_comm_on_cpu(training_args)  # before the model: ZeRO-3 builds it partitioned
    return model_args, data_args, task_args, training_args


def _labels_from_the_data(recipe: dict, flags: set[str]) -> dict:
    """A shipped recipe's ``model_config`` without its ``num_labels`` (the label count of the recipe's corpus), for a
    run on other data (the default recipe's data is always the user's; a named one's when the command line gives the
    data), unless it is 1 (a single sigmoid output: a choice of model) or the command line gives ``model_config``: the
    user's data then decides the number of labels, as it does without a recipe. A count the user sets
    (``--model_config``, ``--config_overrides num_labels=N``, a recipe of their own) that contradicts the data
    stays an error."""
    config = recipe.get("model_config")
    if "model_config" in flags or not isinstance(config, dict) or config.get("num_labels") in (None, 1):
        return recipe
    return {**recipe, "model_config": {k: v for k, v in config.items() if k != "num_labels"}}


# ---------------------------------------------------------------------------------------------------------------
# checks across fields (still before any data is read)
# ---------------------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------------------
# lengths against the position table
# ---------------------------------------------------------------------------------------------------------------
def _position_rows(model_args, origin) -> tuple[int | None, str]:
    """(``max_position_embeddings`` of the model the run trains, where it was set); None for a family without a
    position table, or one that cannot be read yet (the later checks name that)."""
    if model_args.model_name_or_path:
        try:
            config = json.loads((Path(model_args.model_name_or_path) / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, ""
        rows = config.get("max_position_embeddings") if isinstance(config, dict) else None
        where = f"the config of `model_name_or_path` {model_args.model_name_or_path}"
        return (rows if isinstance(rows, int) else None), where
    from transformers import AutoConfig

    import hf_seq  # noqa: F401 - registers the hf_seq model types

    try:
        defaults = AutoConfig.for_model(model_args.model_type)
        values = {**model_config_dict(model_args), **override_values(model_args.config_overrides, defaults)}
    except (ValueError, TypeError, KeyError):
        return None, ""
    if "max_position_embeddings" in override_values(model_args.config_overrides, defaults):
        where = "`config_overrides`"
    elif "max_position_embeddings" in values:
        where = f"`model_config` ({origin('model_config')})"
    else:
        where = f"the {model_args.model_type} default"
    rows = values.get("max_position_embeddings", getattr(defaults, "max_position_embeddings", None))
    return (rows if isinstance(rows, int) and not isinstance(rows, bool) else None), where


def check_position_lengths(model_args, data_args, training_args, origin) -> None:
    """A sequence-to-sequence run's lengths fit the model's position table: ``max_source_length``,
    ``max_target_length`` and ``generation_max_length`` (which the saved ``generation_config.max_length`` keeps, so
    the pipeline would fail on any input the model does not end in time) at most ``max_position_embeddings``."""
    if (
        not hasattr(training_args, "generation_max_length")
        or model_args.model_type is None
        and not (model_args.model_name_or_path)
    ):
        return
    rows, where = _position_rows(model_args, origin)
    if rows is None:
        return
    lengths = (
        ("generation_max_length", training_args.generation_max_length),
        ("max_source_length", getattr(data_args, "max_source_length", None)),
        ("max_target_length", getattr(data_args, "max_target_length", None)),
    )
    for name, length in lengths:
        if isinstance(length, int) and length > rows:
            raise RecipeError(
                f"{origin(name)}: `{name}` {length} exceeds the model's position table: `max_position_embeddings` "
                f"{rows} ({where}) is the longest sequence it takes; pass `--{name} {rows}` or less, or a larger "
                "`max_position_embeddings`"
            )


def check_arguments(
    task: Task, model_args: ModelArguments, data_args: DataArguments, training_args, sources: dict[str, str]
) -> None:
    """Data files exist and have a supported type; the data source is unambiguous; the model type is registered
    with the script's head and ``model_config`` / ``config_overrides`` build a valid config; a ``model_name_or_path``
    holds a config. ``sources`` says where each key was set (for the errors). The ranges and sets of values of single
    fields are the dataclasses' own (``__post_init__``), checked when they are built."""

    def origin(key: str) -> str:
        return sources.get(key, f"{task.name}'s default")

    # ---- data
    files = {name: getattr(data_args, name) for name in ("train_file", "validation_file", "test_file")}
    if data_args.dataset_name and any(files.values()):
        raise RecipeError(
            f"{origin('dataset_name')}: pass either `dataset_name` ({data_args.dataset_name!r}) or data files "
            f"({sorted(k for k, v in files.items() if v)}), not both"
        )
    if not data_args.dataset_name and not files["train_file"]:
        raise RecipeError(
            f"{task.name} needs data: `dataset_name` (a preset: {', '.join(sorted(DATASET_PRESETS))}; a local folder; "
            "a datasets name) or `train_file`"
        )
    name = data_args.dataset_name
    if name and name.startswith("hf_seq/") and name not in DATASET_PRESETS:
        raise RecipeError(
            f"{origin('dataset_name')}: unknown dataset preset {name!r}; the presets are {sorted(DATASET_PRESETS)}"
        )
    if name and name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise RecipeError(
            f"{origin('dataset_name')}: `dataset_name` {name} does not exist; pass a folder written by "
            "`save_to_disk` or a folder of data files named by split, a preset "
            f"({', '.join(sorted(DATASET_PRESETS))}), or your files with `--train_file`"
        )
    for name, path in files.items():
        if path:
            try:
                check_data_file(path, name, allow_text=task.text_files)
            except DataError as error:
                raise RecipeError(f"{origin(name)}: {error}") from None
    check_position_lengths(model_args, data_args, training_args, origin)

    # ---- model
    if task.model_head is None:
        return
    if model_args.model_name_or_path:
        from transformers import AutoConfig

        import hf_seq  # noqa: F401

        try:
            AutoConfig.from_pretrained(model_args.model_name_or_path)
        except Exception as error:  # noqa: BLE001 - re-raised naming the flag
            raise RecipeError(
                f"{origin('model_name_or_path')}: `model_name_or_path` {model_args.model_name_or_path!r} is not a "
                f"model folder with a config.json ({type(error).__name__}: {str(error)[:200]})"
            ) from None
        return
    where = sources.get("model_config") or sources.get("model_type") or f"{task.name}'s defaults"
    if sources.get("model_type") == "command line":
        where = "command line"  # --model_type names the family its errors are about
    build_config(task, model_args, data_args, where=where, vocab_size=TRIAL_VOCAB_SIZE)


TRIAL_VOCAB_SIZE = 1000  # the vocabulary size of the up-front check (the real one comes from the tokenizer)


def build_config(
    task: Task, model_args: ModelArguments, data_args: DataArguments, where: str = "model_config", **fixed
):
    """The config of a new model: ``model_type`` + ``model_config`` + ``config_overrides`` + ``fixed`` (values from
    the tokenizer and the data, e.g. ``vocab_size``; ``None`` values are left out) + the task's derived fields.
    ``RecipeError`` naming ``where`` and the field for an unknown model type or field, a value its config class
    rejects, or a model type without a head of the script's Auto class."""
    from transformers import AutoConfig

    import hf_seq  # registers the hf_seq model types

    model_type = model_args.model_type
    if not model_type:
        raise RecipeError(f"{where}: `model_type` is needed to build a new model (or pass `model_name_or_path`)")
    heads = hf_seq.auto_heads()  # hf_seq's own families; another registered model_type is left to transformers
    serving = sorted(t for t, family in heads.items() if task.model_head in family and t in (task.model_types or heads))
    head_words = HEADS.get(task.model_head, (task.model_head,))[0]
    if task.model_head and model_type in heads and model_type not in serving:
        # before the fields: a recipe's fields of another family would otherwise hide the cause
        raise RecipeError(
            f"{where}: model_type {model_type!r} has no {head_words} head ({task.model_head}); {task.name} builds "
            f"one of {serving}"
        )
    try:
        defaults = AutoConfig.for_model(model_type)
    except ValueError:
        close = difflib.get_close_matches(model_type, serving, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        listed = f"{task.name} builds one of {serving}" if task.model_head else f"hf_seq's are {sorted(heads)}"
        raise RecipeError(f"{where}: unknown `model_type` {model_type!r}{hint}; {listed}") from None
    values = model_config_dict(model_args)
    known = config_fields(defaults)
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            raise RecipeError(f"{where}: `model_config` has a field `{key}` that {model_type} does not know{hint}")
    values.update(override_values(model_args.config_overrides, defaults))
    values.update({key: value for key, value in fixed.items() if value is not None})
    if task.derived_config is not None:
        values.update(task.derived_config(values, values.get("vocab_size", TRIAL_VOCAB_SIZE), data_args))
    try:
        config = AutoConfig.for_model(model_type, **values)
    except (ValueError, TypeError) as error:
        raise RecipeError(
            f"{where}: not a valid {model_type} config (model_config / config_overrides): {error}"
        ) from None
    if task.model_head and model_type in heads and task.model_head not in heads[model_type]:
        supported = sorted(t for t, family in heads.items() if task.model_head in family)
        raise RecipeError(
            f"{where}: model_type {model_type!r} has no {task.model_head} head; {task.name} builds one of {supported}"
        )
    return config
