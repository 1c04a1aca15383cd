"""Helpers shared by the training scripts: the data / tokenizer / model front door, a time budget, the recorded
command (the run folder's life: :mod:`hf_seq.train_scripts.run_folder`).

Every script is ``python train_scripts/<task>.py [recipe.json] [--field value ...]`` (or ``hf-seq-train <task> ...``)
and runs unchanged under ``accelerate launch`` / ``torchrun``; :mod:`hf_seq.train_scripts.arguments` parses and checks the
arguments, the functions here turn them into data, a tokenizer and a model the same way for every script.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import torch
from accelerate.utils import reduce
from datasets import ClassLabel, Dataset, DatasetDict
from hf_seq.train_scripts.arguments import (
    DataArguments,
    ModelArguments,
    RecipeError,
    Task,
    build_config,
    override_values,
)
from hf_seq.train_scripts.checks import TOKENIZER_FILES
from hf_seq.train_scripts.errors import RUN
from transformers import TrainerCallback

from hf_seq.toolkit.bert_conversion import from_transformers_bert
from hf_seq.toolkit.data import (
    DATASET_PRESETS,
    DataError,
    blank_text,
    first_bad_row,
    load_data,
    row_location,
    split_source,
)
from hf_seq.toolkit.preprocessing import arrow_maps_released


class TimeBudgetCallback(TrainerCallback):
    """Stop training once a time budget is spent, then evaluate as usual.

    ``max_minutes`` counts the wall-clock time spent inside training steps (evaluation and saving excluded);
    ``max_cpu_minutes`` counts the CPU time of this process over the same steps (all its threads together, so with one
    thread it is core-minutes: on a shared machine it says what compute a run got, the wall clock does not). Either
    may be ``None``. ``train_seconds`` / ``train_cpu_seconds`` / ``stopped_by_budget`` are read by the scripts."""

    def __init__(self, max_minutes: float | None = None, max_cpu_minutes: float | None = None) -> None:
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.max_cpu_seconds = None if max_cpu_minutes is None else 60.0 * max_cpu_minutes
        self.train_seconds = 0.0
        self.train_cpu_seconds = 0.0
        self.stopped_by_budget = False
        self._t0: tuple[float, float] | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is not None:
            self.train_seconds += time.perf_counter() - self._t0[0]
            self.train_cpu_seconds += time.process_time() - self._t0[1]
            self._t0 = None
        over_wall = self.max_seconds is not None and self.train_seconds >= self.max_seconds
        over_cpu = self.max_cpu_seconds is not None and self.train_cpu_seconds >= self.max_cpu_seconds
        if self.max_seconds is not None or self.max_cpu_seconds is not None:
            # each process measures its own clock: they stop at the same step, when the first of them is over
            over = reduce(torch.tensor([over_wall, over_cpu], dtype=torch.float32, device=args.device), "max")
            over_wall, over_cpu = (bool(v) for v in over.tolist())
        if over_wall or over_cpu:
            self.stopped_by_budget = True
            control.should_training_stop = True
            control.should_evaluate = True
            control.should_save = args.save_strategy != "no"  # a checkpoint only for runs that keep them
        return control


class StepTimesCallback(TrainerCallback):
    """One line per marker on stdout, wall-clock epoch seconds, for benchmarks that read a child's output:
    ``[hf_seq] first training step begins at <t>`` (the data is ready) and ``[hf_seq] training ends at <t> after
    <n> steps`` (steps per second = steps after the first / time between). Printed by the world's first process."""

    PREFIX = "[hf_seq]"

    def __init__(self) -> None:
        self.first: tuple[float, int] | None = None
        self.after_first: tuple[float, int] | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        if self.first is None:
            self.first = (time.time(), state.global_step)
            if state.is_world_process_zero:
                print(f"{self.PREFIX} first training step begins at {self.first[0]:.3f}", flush=True)

    def on_step_end(self, args, state, control, **kwargs):
        if self.after_first is None:
            self.after_first = (time.time(), state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self.after_first is not None and state.is_world_process_zero:
            t, step = self.after_first
            print(
                f"{self.PREFIX} training ends at {time.time():.3f} after {state.global_step} steps; "
                f"first step ended at {t:.3f} (step {step})",
                flush=True,
            )


# ---------------------------------------------------------------------------------------------------------------
# multi-process on CPU, the recorded command (every train script)
# ---------------------------------------------------------------------------------------------------------------


def use_cpu_processes_without_gpu() -> None:
    """Make ``torchrun --nproc_per_node N`` / ``accelerate launch --multi_gpu --num_processes N`` train data-parallel
    on a machine without a GPU (gloo).

    Without this, transformers' ``TrainingArguments`` (5.x) asks accelerate for a GPU backend, finds none and falls back
    to NO distribution with only a warning: every process then trains alone on the whole data set and they all write
    the same output folder. Setting ``ACCELERATE_USE_CPU`` before the arguments are parsed selects MULTI_CPU (gloo).
    Call it first in ``main()``; it changes nothing for single-process runs or when a GPU is present.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def training_command(script_file: str, argv: list[str] | None, command_prefix: list[str] | None = None) -> str:
    """The command line to record in the model card: the real one, ``hf-seq-train <task> <argv>`` when started by the
    entry point (which passes ``command_prefix``, ``["hf-seq-train", task]``), or ``python <script> <argv>`` when
    ``main(argv)`` was called from Python (tests, notebooks); under ``accelerate launch`` its command comes first."""
    if command_prefix is not None and argv is not None:
        command = shlex.join([*command_prefix, *argv])
    elif argv is None:
        launcher = os.environ.get("ACCELERATE_LAUNCH_COMMAND") or ""
        command = f"{launcher} {shlex.join([Path(sys.executable).name, *sys.argv])}".strip()
    else:
        script = Path(script_file).resolve()
        try:
            script = script.relative_to(Path.cwd())
        except ValueError:
            pass
        command = shlex.join(["python", str(script), *argv])
    RUN["command"] = command  # for the line an interrupt (Ctrl-C) ends with
    return command


# ---------------------------------------------------------------------------------------------------------------
# the data front door: load, check columns and labels, cap, describe
# ---------------------------------------------------------------------------------------------------------------
# the DataArguments fields that are load_data's arguments of the same names
_LOAD_DATA_FIELDS = (
    "dataset_name",
    "dataset_config_name",
    "train_file",
    "validation_file",
    "test_file",
    "validation_split_percentage",
    "split_seed",
)


def load_task_data(task: Task, data_args: DataArguments, require_validation: bool = True) -> DatasetDict:
    """The splits named by ``data_args`` (:func:`hf_seq.toolkit.data.load_data`: a preset, a folder or ``datasets`` name, or
    data files; a seeded validation hold-out when there is no validation split). The ``datasets`` Arrow files of the
    splits are opened without staying resident (:func:`hf_seq.toolkit.preprocessing.arrow_maps_released`: a 10 M-pair
    jsonl's Arrow file would otherwise be about half resident once loaded)."""
    passed = {name: getattr(data_args, name) for name in _LOAD_DATA_FIELDS}  # under load_data's names
    with arrow_maps_released():
        return load_data(**passed, allow_text_files=task.text_files, require_validation=require_validation)


def load_text_splits(task: Task, data_args: DataArguments, require_validation: bool = True) -> DatasetDict:
    """The splits of :func:`load_task_data` whose ``text_column_name`` column holds text in every row
    (:func:`require_columns`, :func:`require_text`), capped (:func:`cap_splits`): the data of the scripts that read
    one text column."""
    column = data_args.text_column_name
    splits = load_task_data(task, data_args, require_validation=require_validation)
    require_columns(splits, {"text_column_name": column})
    require_text(splits, column, "text_column_name")
    return cap_splits(splits, data_args)


def require_columns(splits: DatasetDict, columns: dict[str, str]) -> None:
    """``DataError`` naming the file (or data set split), the flag and the columns it has if a column is missing or
    holds empty (null) values. ``columns`` maps a flag (``text_column_name``) to the column it names."""
    for dataset in splits.values():
        for flag, column in columns.items():
            if column not in dataset.column_names:
                raise DataError(
                    f"{split_source(dataset)} has no column {column!r} (`{flag}`); its columns are "
                    f"{dataset.column_names}"
                )
            nulls = dataset.data.column(column).null_count
            if nulls:
                first = dataset.data.column(column).is_null().to_pylist().index(True)
                raise DataError(
                    f"{row_location(dataset, first)}: column {column!r} (`{flag}`) is empty (it is empty in {nulls} "
                    "row(s)); every row needs a value"
                )


def require_text(splits: DatasetDict, column: str, flag: str, words: bool = False) -> None:
    """``DataError`` naming the file and the column's type unless it holds strings (``words``: lists of strings)."""
    for dataset in splits.values():
        kind = dataset.data.column(column).type
        if words:
            ok = (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and (
                pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type)
            )
            expected = "one list of words per row"
        else:
            ok = pa.types.is_string(kind) or pa.types.is_large_string(kind)
            expected = "text (strings)"
        if not ok:
            raise DataError(
                f"{split_source(dataset)}: column {column!r} (`{flag}`) must hold {expected}, got {kind}; its "
                f"columns are {dataset.column_names}"
            )


def require_nonempty(splits: DatasetDict, column: str, flag: str, words: bool = False) -> None:
    """``DataError`` naming the file and line (:func:`hf_seq.toolkit.data.row_location`) of the first row whose text is
    empty (``words``: whose word list is empty), with the number of such rows: a row that trains on
    nothing is a mistake in the data (a null value is :func:`require_columns`' error)."""
    for dataset in splits.values():
        values = dataset.data.column(column)
        empty = pc.fill_null(pc.equal(pc.list_value_length(values), 0), False) if words else blank_text(values)
        if pc.any(empty).as_py():
            row = pc.index(empty, True).as_py()
            what = "has no words" if words else "is empty"
            raise DataError(
                f"{row_location(dataset, row)}: column {column!r} (`{flag}`) {what} ({pc.sum(empty).as_py()} row(s) "
                f"in all); every row needs {'words' if words else 'text'}"
            )


def stream_row_error(path: str, flag: str, problem: Callable[[dict], str | None], fallback: str) -> DataError:
    """The ``DataError`` of a bad row met in a stream: ``"`flag` <path> line N: <problem>"``, the first such row of
    the file (read again only to say where), or ``fallback`` when the file cannot tell (parquet)."""
    located = first_bad_row(path, problem)
    return DataError(f"`{flag}` {path} {located}" if located else f"`{flag}` {path}: {fallback}")


def cap_splits(splits: DatasetDict, data_args: DataArguments) -> DatasetDict:
    """The first ``max_train_samples`` / ``max_eval_samples`` / ``max_predict_samples`` rows of each split."""
    caps = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    out = DatasetDict(splits)
    for split, cap in caps.items():
        if split in out and cap is not None and cap < len(out[split]):
            out[split] = out[split].select(range(cap))
    return out


def _label_strings(dataset: Dataset, column: str, nested: bool) -> list[str]:
    """The distinct labels of a column as strings (ClassLabel ids as their names); flattened for lists."""
    feature = dataset.features[column]
    inner = getattr(feature, "feature", None) if nested else feature
    values = dataset.data.column(column).combine_chunks()
    if nested:
        if not pa.types.is_list(values.type) and not pa.types.is_large_list(values.type):
            raise DataError(
                f"{split_source(dataset)}: column {column!r} must hold one list of tags per row, got {values.type}"
            )
        values = pc.list_flatten(values)
    elif pa.types.is_list(values.type) or pa.types.is_large_list(values.type) or pa.types.is_struct(values.type):
        raise DataError(
            f"{split_source(dataset)}: column {column!r} must hold one label per row (a string or a number), got "
            f"{values.type}"
        )
    unique = pc.unique(values).to_pylist()
    if isinstance(inner, ClassLabel):
        return [inner.names[i] for i in unique if i is not None]
    return [_label_text(v) for v in unique if v is not None]


def _label_text(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def fold_label(value: str) -> str:
    """A label as ``--normalize_labels`` reads it: the spaces around it stripped, its case folded (``" Pos"`` ->
    ``"pos"``)."""
    return value.strip().casefold()


def warn_colliding_labels(names, source: str, column: str, flag: str) -> None:
    """One warning line on stderr naming the labels that differ only in case or surrounding spaces (each would
    train as a class of its own) and the flag that folds them; nothing when there are none."""
    folded: dict[str, list[str]] = {}
    for name in sorted(names):
        folded.setdefault(fold_label(name), []).append(name)
    groups = [sorted(group) for group in folded.values() if len(group) > 1]
    if groups:
        shown = "; ".join(" / ".join(repr(name) for name in group) for group in groups)
        print(
            f"warning: {source}: column {column!r} (`{flag}`) has labels that differ only in case or surrounding "
            f"spaces ({shown}): each trains as a class of its own; pass `--normalize_labels true` to strip and "
            "lower-case them into one label each",
            file=sys.stderr,
        )


def label_names(
    splits: DatasetDict, column: str, flag: str, nested: bool = False, normalize: bool = False
) -> list[str]:
    """The label set: a ``ClassLabel`` feature's names, else the training split's distinct values (numbers in
    numeric order, strings sorted); ``normalize``: each folded by :func:`fold_label` (``--normalize_labels``), else
    labels that differ only by it are named in one warning (:func:`warn_colliding_labels`). ``DataError`` naming the
    file and the unseen labels if another split has labels the training split does not."""
    train = splits["train"]
    feature = train.features[column]
    inner = getattr(feature, "feature", None) if nested else feature
    fold = fold_label if normalize else str
    if isinstance(inner, ClassLabel):
        names = list(dict.fromkeys(fold(name) for name in inner.names))
    else:
        seen = _label_strings(train, column, nested)
        if normalize:
            seen = list(dict.fromkeys(fold_label(name) for name in seen))
        else:
            warn_colliding_labels(seen, split_source(train), column, flag)
        try:
            names = sorted(seen, key=float)  # numbers in numeric order
        except ValueError:
            names = sorted(seen)
    known = set(names)
    for name, dataset in splits.items():
        if name == "train":
            continue
        unseen = sorted({fold(label) for label in _label_strings(dataset, column, nested)} - known)
        if unseen:
            raise DataError(
                f"{split_source(dataset)}: column {column!r} (`{flag}`) has label(s) {unseen[:10]} that the training "
                f"data does not have (training labels: {names[:30]}{' ...' if len(names) > 30 else ''})"
            )
    return names


def label_lookup(dataset: Dataset, column: str, names: list[str], nested: bool = False, normalize: bool = False):
    """A function mapping one row's label (or list of tags) to ids of ``names`` (``normalize``: each label folded by
    :func:`fold_label` first, as :func:`label_names` folded ``names``)."""
    feature = dataset.features[column]
    inner = getattr(feature, "feature", None) if nested else feature
    index = {name: i for i, name in enumerate(names)}
    fold = fold_label if normalize else str
    if isinstance(inner, ClassLabel):
        to_id = [index[fold(name)] for name in inner.names]

        def convert(value):
            return to_id[value]
    else:

        def convert(value):
            return index[fold(_label_text(value))]

    if nested:
        return lambda row: [convert(v) for v in row]
    return convert


def describe_data(data_args: DataArguments, splits: DatasetDict, unit: str = "rows") -> str:
    """The model card's words about the data: the preset, data set or files, the validation hold-out, the sizes."""
    name = data_args.dataset_name
    if name in DATASET_PRESETS:
        text = DATASET_PRESETS[name].description.format(seed=data_args.split_seed)
    elif name:
        text = f"`{name}`" + (f" ({data_args.dataset_config_name})" if data_args.dataset_config_name else "")
    else:
        files = [
            f"{split} `{getattr(data_args, f'{split}_file')}`"
            for split in ("train", "validation", "test")
            if getattr(data_args, f"{split}_file")
        ]
        text = "own data files: " + ", ".join(files)
    if "validation" in splits and "held out" in split_source(splits["validation"]):
        text += (
            f"; validation: {data_args.validation_split_percentage:g}% of the training {unit} held out "
            f"(seed {data_args.split_seed})"
        )
    sizes = " / ".join(str(len(splits[s])) for s in ("train", "validation", "test") if s in splits)
    names = " / ".join(s for s in ("train", "validation", "test") if s in splits)
    return f"{text}; used: {sizes} {names} {unit}"


# ---------------------------------------------------------------------------------------------------------------
# tokenizer and model: loaded (tokenizer_name / model_name_or_path) or built
# ---------------------------------------------------------------------------------------------------------------
def load_tokenizer(model_args: ModelArguments):
    """The tokenizer of ``tokenizer_name`` or of ``model_name_or_path``; ``None`` when neither is given (the script
    then builds one on the training split). A model folder without tokenizer files is an error, not a new tokenizer:
    its embedding rows belong to the tokenizer it was trained with."""
    from transformers import AutoTokenizer

    name = model_args.tokenizer_name or model_args.model_name_or_path
    if not name:
        return None
    if not model_args.tokenizer_name and Path(name).is_dir():
        if not any((Path(name) / f).is_file() for f in TOKENIZER_FILES):
            raise RecipeError(
                f"`model_name_or_path` {name} holds no tokenizer files ({', '.join(TOKENIZER_FILES)}): pass the "
                "tokenizer it was trained with as `tokenizer_name`"
            )
    return AutoTokenizer.from_pretrained(name)


def load_or_build_model(
    task: Task,
    model_args: ModelArguments,
    data_args: DataArguments,
    tokenizer,
    new_config: dict | None = None,
    **head_config,
):
    """The model of ``task.model_head``: from ``model_name_or_path`` (an hf_seq folder, or a ``transformers`` BERT
    checkpoint converted with ``from_transformers_bert``; ``config_overrides`` — fields of the hf_seq config when
    converting — and ``head_config`` — labels — applied)
    or new from ``model_type`` + ``model_config`` + the tokenizer's ``vocab_size`` and ``pad_token_id`` +
    ``new_config`` (other values from the tokenizer and data) + ``head_config``. Checks that the tokenizer's ids fit
    the embedding."""
    import transformers
    from transformers import AutoConfig

    import hf_seq

    auto = getattr(transformers, task.model_head)
    path = model_args.model_name_or_path
    if path:
        config = AutoConfig.from_pretrained(path)
        converting = config.model_type == "bert" and task.convert_transformers_bert
        # converted, the overrides are fields of the hf_seq config the checkpoint becomes (e.g. classifier_pooling)
        typed_by = hf_seq.HfSeqBertConfig() if converting else config
        overrides = override_values(model_args.config_overrides, typed_by) | head_config
        if converting:  # transformers' BERT: into hf_seq's
            # hf_seq's BERT class of the Auto class: AutoModelForMaskedLM -> BertForMaskedLM
            cls = getattr(hf_seq, "Bert" + task.model_head.removeprefix("AutoModel"), None)
            if cls is None:
                raise RecipeError(f"`model_name_or_path` {path} is a transformers BERT; {task.name} cannot use it")
            model = from_transformers_bert(cls, path, **overrides)
        else:
            for key, value in overrides.items():
                setattr(config, key, value)
            model = auto.from_pretrained(
                path, config=config, ignore_mismatched_sizes=model_args.ignore_mismatched_sizes
            )
    else:
        sized = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id} | (new_config or {})
        config = build_config(task, model_args, data_args, **sized, **head_config)
        model = auto.from_config(config)
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise RecipeError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embedding has {rows} rows"
            + (f" (`model_name_or_path` {path}: use the tokenizer it was trained with)" if path else "")
        )
    return model


def tokenizer_source(model_args: ModelArguments, built: str, loaded: str = "from") -> str:
    """The model card's words on where the tokenizer comes from: ``<loaded> `<tokenizer_name or model_name_or_path>```
    for a loaded one, else ``built``."""
    name = model_args.tokenizer_name or model_args.model_name_or_path
    return f"{loaded} `{name}`" if name else built


def tokenizer_options(model_args: ModelArguments) -> dict:
    """``lowercase`` and ``min_frequency`` of a tokenizer to build, those given (the builders' defaults otherwise)."""
    given = (("lowercase", model_args.lowercase), ("min_frequency", model_args.tokenizer_min_frequency))
    return {name: value for name, value in given if value is not None}


def tokenizer_for(
    model_args: ModelArguments,
    train_texts,
    max_length: int | None,
    pre_tokenizer: str = "whitespace_punct",
    also_keep=None,
    extra_words=(),
):
    """The loaded tokenizer (:func:`load_tokenizer`, ``model_max_length`` set to ``max_length``), or a new one of
    ``tokenizer_kind`` built on ``train_texts()`` (a function: the texts are only read when a tokenizer is built):
    ``"word"`` (the notes' top-V words, ``tokenizer_vocab_size``, plus the training words ``also_keep`` has, e.g. those
    of a pretrained vector file, and then ``extra_words``) or ``"wordpiece"`` (BERT)."""
    from hf_seq.toolkit.tokenization import (
        DEFAULT_MODEL_MAX_LENGTH,
        build_word_level_tokenizer,
        build_wordpiece_tokenizer,
    )

    tokenizer = load_tokenizer(model_args)
    if tokenizer is not None:
        if max_length:
            tokenizer.model_max_length = max_length
        return tokenizer
    shared = {
        "padding_side": model_args.padding_side,
        "truncation_side": model_args.truncation_side,
        "model_max_length": max_length or DEFAULT_MODEL_MAX_LENGTH,
    } | tokenizer_options(model_args)
    if model_args.tokenizer_kind == "word":
        return build_word_level_tokenizer(
            train_texts(),
            max_vocab_size=model_args.tokenizer_vocab_size,
            pre_tokenizer=pre_tokenizer,
            also_keep=also_keep,
            extra_words=extra_words,
            **shared,
        )
    if model_args.tokenizer_kind == "wordpiece":
        return build_wordpiece_tokenizer(train_texts(), vocab_size=model_args.tokenizer_vocab_size or 8000, **shared)
    raise RecipeError(f"`tokenizer_kind` {model_args.tokenizer_kind!r} cannot be built here (word or wordpiece)")
