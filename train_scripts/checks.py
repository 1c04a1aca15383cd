"""The up-front check of a whole run, after parsing and before any data, tokenizer or model is loaded.

:func:`hf_seq.train_scripts.arguments.parse_args` calls :func:`check_run` last, so that a mistake in a recipe or a
flag costs the seconds of the parse, not a training run:

* a run that trains something (``max_steps`` -1 or positive, ``num_train_epochs`` > 0, no ``do_train false`` where
  the script always trains; translation without ``do_train`` needs a model to evaluate), and ``tokenizer_kind`` one
  the script builds (every other field's range or set of values is checked beside it, as its dataclass is built);
* ``output_dir`` a folder that can be created and written: a probe file is created and removed in it (if it exists)
  and in the folder that will hold it (the final save writes a sibling staging folder there);
* ``resume_from_checkpoint``: ``last`` or a complete checkpoint folder; the folder it continues (``last``: the
  newest complete checkpoint of ``output_dir``, or a finished run's final model there) holds a model of the
  family and head the run trains, with an intact safetensors header;
* ``tokenizer_name`` and ``model_name_or_path`` local folders that hold a tokenizer / a model of a family and a head
  the script can train (``allow_other_head`` to start from a folder saved with another head, e.g. a classifier's
  encoder under a language model); the language model's ``level`` matches a loaded tokenizer;
* a preset ``dataset_name`` whose corpus is installed.

Every error is a :class:`~hf_seq.train_scripts.arguments.RecipeError` naming the flag (or recipe key), the value and
what is allowed; :mod:`hf_seq.train_scripts.cli` prints it as one line.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hf_seq.train_scripts import run_folder
from hf_seq.train_scripts.errors import RecipeError
from hf_seq.train_scripts.errors import json_kind as _json_kind

from hf_seq.toolkit.export_folders import TOKENIZER_FILES  # the files of a saved tokenizer, one list

if TYPE_CHECKING:  # annotations only
    from hf_seq.train_scripts.arguments import ModelArguments, Task


def check_training_steps(args: Any, origin) -> None:
    """``RecipeError`` for a ``max_steps`` other than -1 or a positive count, or epochs that train nothing (the
    other fields' ranges are checked as the dataclasses are built)."""
    if not hasattr(args, "max_steps"):
        return
    if args.max_steps == 0 or args.max_steps < -1:
        raise RecipeError(
            f"{origin('max_steps')}: `max_steps` must be a positive number of steps, or -1 (train `num_train_epochs` "
            f"epochs), got {args.max_steps}"
        )
    epochs = args.num_train_epochs
    if not (isinstance(epochs, (int, float)) and math.isfinite(epochs) and epochs > 0) and args.max_steps == -1:
        raise RecipeError(
            f"{origin('num_train_epochs')}: `num_train_epochs` must be > 0 (with `max_steps` -1 it sets the length "
            f"of training), got {epochs!r}: the run would train nothing"
        )
    if args.max_steps > 0 and origin("num_train_epochs") == "command line" and origin("max_steps") != "command line":
        # a recipe's (or the task's default recipe's) fixed step count would silently override the user's epochs
        raise RecipeError(
            f"command line: --num_train_epochs {epochs} has no effect: `max_steps` {args.max_steps} "
            f"({origin('max_steps')}) sets the length of training; add --max_steps -1 to train by epochs"
        )


def check_trains_something(task: Task, model_args, task_args, training_args, origin, given) -> None:
    """The script trains (or, translation with ``do_train false``, evaluates a saved model): ``do_train false``
    where the script always trains, or translation that would neither train nor predict, is an error."""
    if getattr(task_args, "eval_only", False) and not model_args.model_name_or_path:
        raise RecipeError(
            f"{origin('eval_only')}: `eval_only` evaluates a saved model, but no `model_name_or_path` is given: pass "
            "the pretrained folder to evaluate"
        )
    if task.name != "train_translation":
        if "do_train" in given and not training_args.do_train:
            raise RecipeError(
                f"{origin('do_train')}: `do_train` false: {task.name} always trains (only train_translation can "
                "skip training to evaluate a saved model); leave `do_train` out"
            )
        return
    if training_args.do_train:
        return
    if not model_args.model_name_or_path:
        raise RecipeError(
            f"{origin('do_train')}: `do_train` false evaluates a saved model, but no `model_name_or_path` is given: "
            "pass the model folder to evaluate, or leave `do_train` out (it defaults to true) to train"
        )
    if not training_args.do_predict:
        raise RecipeError(
            f"{origin('do_train')}: `do_train` false and `do_predict` false: the run would neither train nor "
            "evaluate; pass `--do_predict true` to evaluate `model_name_or_path` on the test split, or leave "
            "`do_train` out to train"
        )


# ---------------------------------------------------------------------------------------------------------------
# the folder a resumed run continues (output_dir and resume_from_checkpoint: run_folder.py)
# ---------------------------------------------------------------------------------------------------------------
def _expected_model_type(task: Task, model_args) -> str | None:
    """The family a run of ``task`` trains: that of ``model_name_or_path`` (a transformers BERT becomes hf_seq's),
    else ``model_type``; None when it cannot tell (a folder without a readable config)."""
    if model_args.model_name_or_path:
        try:
            config = json.loads((Path(model_args.model_name_or_path) / "config.json").read_text(encoding="utf-8"))
            model_type = config["model_type"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return "hf_seq_bert" if model_type == "bert" and task.convert_transformers_bert else model_type
    return model_args.model_type


def check_resumed_folder(task: Task, model_args, task_args, training_args, where: str) -> None:
    """The folder a resumed run continues (:func:`~hf_seq.train_scripts.run_folder.resumed_folders`) was written by
    a run of this task: a model of the family it trains (``model_type`` / ``model_name_or_path``) with its head, and
    weights whose safetensors header is intact. Read before any data, so that resuming into another task's folder,
    or from a truncated checkpoint, costs the seconds of the parse."""
    import transformers
    from transformers import CONFIG_MAPPING

    import hf_seq  # noqa: F401 - registers the hf_seq model types
    from hf_seq.modeling_utils import check_safetensors_file

    if not task.model_head:
        return
    head = task.model_head_of(task_args) if task.model_head_of is not None else task.model_head
    auto = getattr(transformers, head)
    family = _expected_model_type(task, model_args)
    last = run_folder.resume_request(training_args.resume_from_checkpoint) == "last"
    for folder in run_folder.resumed_folders(training_args):
        named = f"{folder} (`last` in output_dir)" if last else folder
        if not (folder / "config.json").is_file():
            continue  # an FSDP / DeepSpeed checkpoint of sharded states only: nothing to compare without loading
        config = _read_config(folder, "resume_from_checkpoint", where)
        model_type = config["model_type"]
        saved = (config.get("architectures") or [None])[0]
        config_class = CONFIG_MAPPING[model_type] if model_type in CONFIG_MAPPING else None
        trained = auto._model_mapping.get(config_class, None) if config_class is not None else None
        if family is not None and model_type != family:
            raise RecipeError(
                f"{where}: `resume_from_checkpoint` {named} holds a {model_type!r} model, but this {task.name} run "
                f"trains a {family!r} model: resume from a checkpoint of the same run, or pass another `output_dir` "
                "to start a new one"
            )
        if trained is None or (saved and saved != trained.__name__):
            holds = _head_words(saved) if saved else f"a {model_type!r} model without a {head} head"
            raise RecipeError(
                f"{where}: `resume_from_checkpoint` {named} holds {holds}, but {task.name} trains "
                f"{_head_words(trained.__name__) if trained is not None else head}: resume from a checkpoint of the "
                "same run, or pass another `output_dir` to start a new one"
            )
        weights = folder / "model.safetensors"
        if weights.is_file():
            try:
                check_safetensors_file(weights)
            except OSError as error:
                raise RecipeError(
                    f"{where}: `resume_from_checkpoint` {named}: {' '.join(str(error).split())}".replace(
                        "save the model again (save_pretrained) or download it again",
                        "resume from an earlier checkpoint-N of the run",
                    )
                ) from None
        check_resumed_shapes(auto, folder, named, model_args, config, where)


def _set_by_the_run(model_args, saved: dict) -> dict[str, tuple[Any, str]]:
    """The config fields this run sets itself: ``config_overrides`` (typed as the checkpoint's fields), and for a new
    model ``model_config``: ``{field: (value, flag)}``."""
    from transformers import CONFIG_MAPPING

    values: dict[str, tuple[Any, str]] = {}
    if not getattr(model_args, "model_name_or_path", None) and getattr(model_args, "model_config", None):
        values |= {k: (v, "model_config") for k, v in model_config_dict(model_args).items()}
    overrides = getattr(model_args, "config_overrides", None)
    if overrides:
        typed_by = CONFIG_MAPPING[saved["model_type"]].from_dict(saved)
        values |= {k: (v, "config_overrides") for k, v in override_values(overrides, typed_by).items()}
    return values


def check_resumed_shapes(auto, folder: Path, named: str, model_args, saved: dict, where: str) -> None:
    """The model this run builds takes the checkpoint's weights: the fields the run sets itself
    (:func:`_set_by_the_run`) that differ from the checkpoint's config.json are applied to it, the model is built
    on the meta device and its parameter shapes compared with the safetensors header's. A weight that does not fit
    is a :class:`RecipeError` naming the checkpoint, the field, both values, the flag and the fix (before any data
    is read: the resume would otherwise fail with a size-mismatch traceback once data and model are built)."""
    import torch
    from safetensors import safe_open
    from transformers import CONFIG_MAPPING

    weights = folder / "model.safetensors"
    if not weights.is_file():
        return
    try:
        changed = {
            key: (value, flag)
            for key, (value, flag) in _set_by_the_run(model_args, saved).items()
            if key in saved and _json_value(saved[key]) != _json_value(value)
        }
    except (RecipeError, ValueError, TypeError):
        return  # the run's own checks name a malformed model_config / override
    if not changed:
        return
    with safe_open(str(weights), framework="pt") as stored:
        saved_shapes = {name: tuple(stored.get_slice(name).get_shape()) for name in stored.keys()}

    def misfits(fields: dict) -> list | None:
        """(weight, saved shape, shape here) of the model built with ``fields`` changed; None if it cannot be built."""
        try:
            config = CONFIG_MAPPING[saved["model_type"]].from_dict(saved | {k: v for k, (v, _) in fields.items()})
            with torch.device("meta"):
                shapes = {name: tuple(t.shape) for name, t in auto.from_config(config).state_dict().items()}
        except Exception:  # noqa: BLE001 - a config the run cannot build: its own error comes later
            return None
        return [(n, had, shapes[n]) for n, had in saved_shapes.items() if n in shapes and had != shapes[n]]

    misfit = misfits(changed)
    if not misfit:
        return
    # the fields that change a shape on their own (dropout and the like do not), else all that differ
    culprits = {key: item for key, item in changed.items() if misfits({key: item})} or changed
    fields = ", ".join(
        f"{key}={_json_value(saved[key])!r} where `{flag}` sets {key}={_json_value(value)!r}"
        for key, (value, flag) in culprits.items()
    )
    name, had, wants = misfit[0]
    flags = sorted({flag for _, flag in culprits.values()})
    raise RecipeError(
        f"{where}: `resume_from_checkpoint` {named} was trained with {fields}: its weights do not fit the model this "
        f"run builds ({name}: {list(had)} saved, {list(wants)} here"
        + (f", and {len(misfit) - 1} more" if len(misfit) > 1 else "")
        + f"); resume with the checkpoint's values (drop them from {' and '.join(f'`{f}`' for f in flags)}), or "
        "start a new run in another `output_dir`"
    )


def _json_value(value):
    return json.loads(json.dumps(value, default=str))


# ---------------------------------------------------------------------------------------------------------------
# tokenizer and model folders
# ---------------------------------------------------------------------------------------------------------------

# each head a train script builds (its Auto class): its name in errors ("has no <name> head", "trains <phrase>") and
# the saved heads (architecture name endings) it starts from without `allow_other_head`: its own first, then an
# encoder pretrained for it (BERT's pretraining heads, a bare encoder)
HEADS = {
    "AutoModelForSequenceClassification": (
        "text classifier",
        "a text classifier",
        ("ForSequenceClassification", "ForPreTraining", "ForMaskedLM", "Model"),
    ),
    "AutoModelForTokenClassification": (
        "tagger",
        "a tagger",
        ("ForTokenClassification", "ForPreTraining", "ForMaskedLM", "Model"),
    ),
    "AutoModelForPreTraining": (
        "BERT pretraining",
        "a pretrained BERT (MLM + NSP)",
        ("ForPreTraining", "ForMaskedLM", "Model"),
    ),
    "AutoModelForMaskedLM": (
        "masked language model",
        "a masked language model",
        ("ForMaskedLM", "ForPreTraining", "Model"),
    ),
    "AutoModelForCausalLM": ("language model", "a language model", ("ForCausalLM", "LMHeadModel")),
    "AutoModelForSeq2SeqLM": ("sequence-to-sequence", "a sequence-to-sequence model", ("ForConditionalGeneration",)),
}


def _local_folder(value: str, flag: str, where: str, what: str) -> Path:
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise RecipeError(f"{where}: `{flag}` {value} is a file; pass the folder that holds {what}")
    raise RecipeError(
        f"{where}: `{flag}` {value} does not exist; pass a local folder that holds {what} (the train scripts do "
        "not download: fetch a Hub model into a folder first, e.g. `hf download <id> --local-dir <folder>`)"
    )


def check_tokenizer_folder(value: str, flag: str, where: str) -> Path:
    """``value`` is a local folder with tokenizer files (:data:`TOKENIZER_FILES`)."""
    path = _local_folder(value, flag, where, "a saved tokenizer (tokenizer.json or tokenizer_config.json)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        if flag == "model_name_or_path":
            hint = "pass the tokenizer it was trained with as `tokenizer_name`"
        else:
            hint = "pass a folder written by a train script or `tokenizer.save_pretrained`, or leave `tokenizer_name` out to build a tokenizer on the training data"
        raise RecipeError(
            f"{where}: `{flag}` {value} holds no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); {hint}"
        )
    return path


def tokenizer_level(folder: Path) -> str | None:
    """The level of a word-level tokenizer.json: "char" for hf_seq's char tokenizer (one pre-token per character,
    decoded by concatenating: the ``Fuse`` decoder), "word" for another word-level one; None when it cannot tell
    (a sub-word model, or no tokenizer.json)."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        if data["model"].get("type") != "WordLevel":
            return None
        decoder = data.get("decoder") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return "char" if decoder.get("type") == "Fuse" else "word"


def _read_config(path: Path, flag: str, where: str) -> dict:
    config_file = path / "config.json"
    if not config_file.is_file():
        raise RecipeError(
            f"{where}: `{flag}` {path} holds no config.json: pass a model folder written by a train script or "
            "`save_pretrained`"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise RecipeError(f"{where}: `{flag}` {config_file} is not valid JSON ({error})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise RecipeError(f"{where}: `{flag}` {config_file} has no `model_type`")
    return config


def _head_words(architecture: str) -> str:
    for _, words, (own, *_) in HEADS.values():
        if architecture.endswith(own) or own == "ForCausalLM" and architecture.endswith("LMHeadModel"):
            return f"{words} ({architecture})"
    return architecture


def check_model_folder(task: Task, head: str, model_args, where: str, allow_other_head: bool) -> dict:
    """``model_name_or_path`` is a local model folder of a family with ``head`` (``AutoModelFor...``) that the task
    may start from; its saved head (``architectures``) is one the task's head continues (:data:`HEADS`)
    unless ``allow_other_head``. Returns its config.json."""
    import transformers
    from transformers import CONFIG_MAPPING

    import hf_seq  # noqa: F401 - registers the hf_seq model types

    value = model_args.model_name_or_path
    path = _local_folder(value, "model_name_or_path", where, "a saved model (config.json and its weights)")
    config = _read_config(path, "model_name_or_path", where)
    model_type = config["model_type"]
    auto = getattr(transformers, head)
    families = sorted(
        c.model_type for c in auto._model_mapping.keys() if getattr(c, "model_type", "").startswith("hf_seq")
    )
    if task.model_types is not None:
        families = [t for t in families if t in task.model_types]
    if model_type not in CONFIG_MAPPING:
        raise RecipeError(
            f"{where}: `model_name_or_path` {value} holds a model of type {model_type!r}, which neither transformers "
            f"nor hf_seq knows; {task.name} trains {families}"
        )
    converted = model_type == "bert" and task.convert_transformers_bert
    has_head = converted or CONFIG_MAPPING[model_type] in auto._model_mapping
    if task.model_types is not None and model_type not in task.model_types:
        has_head = False
    if not has_head:
        raise RecipeError(
            f"{where}: `model_name_or_path` {value} is a {model_type!r} model, which {task.name} cannot train "
            f"({head}): it takes a folder of {families}"
            + (
                " or a transformers BERT"
                if task.convert_transformers_bert and head != "AutoModelForCausalLM" and head != "AutoModelForSeq2SeqLM"
                else ""
            )
        )
    saved = (config.get("architectures") or [None])[0]
    wanted, allowed = HEADS.get(head, (None, head, ()))[1:]
    if saved and allowed and not saved.endswith(allowed) and not allow_other_head:
        raise RecipeError(
            f"{where}: `model_name_or_path` {value} holds {_head_words(saved)}, but {task.name} trains {wanted}: "
            "pass a folder saved by the same kind of run, or `--allow_other_head true` to reuse its weights under a "
            "new head (with its tokenizer)"
        )
    return config


def check_model_paths(task: Task, model_args, task_args, origin) -> None:
    """``tokenizer_name`` and ``model_name_or_path`` (see :func:`check_model_folder`); the language model's
    ``level`` matches the tokenizer it loads. ``origin(flag)``: where the flag was set."""
    tokenizer_folder = None
    if model_args.tokenizer_name:
        tokenizer_folder = check_tokenizer_folder(model_args.tokenizer_name, "tokenizer_name", origin("tokenizer_name"))
    if model_args.model_name_or_path and task.model_head:
        head = task.model_head_of(task_args) if task.model_head_of is not None else task.model_head
        config = check_model_folder(task, head, model_args, origin("model_name_or_path"), model_args.allow_other_head)
        if tokenizer_folder is None:
            tokenizer_folder = check_tokenizer_folder(
                model_args.model_name_or_path, "model_name_or_path", origin("model_name_or_path")
            )
    level = getattr(task_args, "level", None)
    if tokenizer_folder is not None and level in ("char", "word"):
        found = tokenizer_level(tokenizer_folder)
        if found is not None and found != level:
            flag = "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path"
            raise RecipeError(
                f"{origin('level')}: `level` is {level!r} but the tokenizer of `{flag}` {tokenizer_folder} is "
                f"{found}-level; pass `--level {found}` (or a {level}-level tokenizer)"
            )
        if level == "word" and _tokenizer_config(tokenizer_folder).get("eos_token") is None:
            flag = "tokenizer_name" if model_args.tokenizer_name else "model_name_or_path"
            raise RecipeError(
                f"{origin('level')}: `level` word closes every text with the tokenizer's eos token, but the tokenizer "
                f"of `{flag}` {tokenizer_folder} has none; pass a tokenizer with an eos token, or leave `{flag}` out "
                "to build one"
            )
    if model_args.tokenizer_name and model_args.model_name_or_path and task.model_head:
        model_folder = Path(model_args.model_name_or_path)
        check_tokenizer_fits_model(tokenizer_folder, model_folder, config, origin("tokenizer_name"))


def _tokenizer_config(folder: Path) -> dict:
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"eos_token": "unknown"}  # cannot tell: the script's own check applies
    return config if isinstance(config, dict) else {"eos_token": "unknown"}


# ---------------------------------------------------------------------------------------------------------------
# the whole run
# ---------------------------------------------------------------------------------------------------------------
def check_run(task: Task, model_args, data_args, task_args, training_args, sources: dict[str, str]) -> None:
    """Everything of a run that can be checked without reading data (see the module's docstring)."""
    from hf_seq.toolkit.data import DATASET_PRESETS, DataError, check_preset_installed

    def origin(key: str) -> str:
        return sources.get(key, f"{task.name}'s default")

    given = set(sources)
    if model_args.tokenizer_kind not in (None, *task.tokenizer_kinds):
        raise RecipeError(
            f"{origin('tokenizer_kind')}: `tokenizer_kind` must be one of {list(task.tokenizer_kinds)} or null, got "
            f"{model_args.tokenizer_kind!r}"
        )
    missing = [name for name in task.required if not getattr(data_args, name, None)]
    if missing:
        raise RecipeError(
            f"{task.name} needs {' and '.join(f'`{n}`' for n in task.required)}; "
            f"{', '.join(f'--{n}' for n in missing)} not given"
        )
    check_utf8_values((model_args, data_args, task_args, training_args), origin)
    check_training_steps(training_args, origin)  # the other fields' ranges: as the dataclasses are built
    check_trains_something(task, model_args, task_args, training_args, origin, given)
    run_folder.check_resume(training_args, origin("resume_from_checkpoint"))
    check_model_paths(task, model_args, task_args, origin)
    check_resumed_folder(task, model_args, task_args, training_args, origin("resume_from_checkpoint"))
    if data_args.dataset_name in DATASET_PRESETS:
        try:
            check_preset_installed(data_args.dataset_name)
        except DataError as error:
            raise RecipeError(f"{origin('dataset_name')}: {error}") from None
    run_folder.check_output_dir(training_args.output_dir, origin("output_dir"))
    check_optional_packages(task_args, origin)


# ---------------------------------------------------------------------------------------------------------------
# optional packages the end of a run needs
# ---------------------------------------------------------------------------------------------------------------
# (flag, value) -> (the modules that value needs, the command that installs them, whether a run without them is
# refused): a test engine the user asked for is refused before the first step; the attention plot, on by default in
# the attention recipes, is skipped with one warning line (the model trains and is saved without it)
OPTIONAL_PACKAGES = {
    ("test_engine", "ctranslate2"): (("ctranslate2",), "pip install 'hf-seq[ctranslate2]'", True),
    ("test_engine", "onnxruntime"): (
        ("onnx", "onnxscript", "onnxruntime"),
        "pip install onnx onnxscript onnxruntime",
        True,
    ),
    ("plot_attention", True): (("matplotlib",), "pip install 'hf-seq[plot]'", False),
}


def check_test_engine(args, engines: tuple) -> None:
    """``ValueError`` unless ``test_engine`` is one of the script's ``engines`` and ``test_onnxruntime_quantization``
    None, or int8 with the onnxruntime engine (the language model's and translation's ``__post_init__``)."""
    if args.test_engine not in engines:
        raise ValueError(f"`test_engine` must be one of {list(engines)}, got {args.test_engine!r}")
    quantization = args.test_onnxruntime_quantization
    if quantization not in (None, "int8"):
        raise ValueError(f"`test_onnxruntime_quantization` must be one of ['int8'] or null, got {quantization!r}")
    if quantization is not None and args.test_engine != "onnxruntime":
        raise ValueError('`test_onnxruntime_quantization` needs `test_engine` "onnxruntime"')


def missing_modules(modules) -> list[str]:
    """Those of ``modules`` that cannot be imported here (found by the import system without importing them)."""
    import importlib.util

    missing = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def check_optional_packages(task_args, origin) -> None:
    """The packages the flags of :data:`OPTIONAL_PACKAGES` need, before the first step: a missing one is a
    :class:`RecipeError` naming the flag, the value, the modules and the install command, or for the plot one
    warning line on stderr, the flag turned off."""
    for (flag, value), (modules, install, refuse) in OPTIONAL_PACKAGES.items():
        if getattr(task_args, flag, None) != value:
            continue
        missing = missing_modules(modules)
        if not missing:
            continue
        shown = "true" if value is True else value
        if refuse:
            raise RecipeError(
                f"{origin(flag)}: `{flag}` {shown} needs {', '.join(missing)}, which is not installed: install it "
                f"(`{install}`) or pass another `{flag}`"
            )
        print(
            f"warning: `{flag}` {shown} needs {', '.join(missing)}, which is not installed: the run trains and saves "
            f"the model without it (`{install}` to have it, or `--{flag} false` to silence this)",
            file=sys.stderr,
        )
        setattr(task_args, flag, False)


# ---------------------------------------------------------------------------------------------------------------
# values that are not UTF-8 (file names from the command line)
# ---------------------------------------------------------------------------------------------------------------
def check_utf8_values(objects, origin) -> None:
    """Every string field of ``objects`` (the parsed arguments) is UTF-8 text. A file name that is not (``caf\\xe9.csv``
    written in Latin-1: the shell passes its bytes, Python keeps them as surrogates) cannot be recorded in the data
    cache's keys, results.json or the model card: a :class:`RecipeError` names the flag, the name with its bytes
    shown, and the fix (rename it)."""
    for args in objects:
        if args is None or not dataclasses.is_dataclass(args):
            continue
        for item in dataclasses.fields(args):
            value = getattr(args, item.name, None)
            if not isinstance(value, str):
                continue
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                shown = os.fsencode(value).decode("utf-8", "backslashreplace")
                bad = os.fsencode(value[error.start])[0]
                fix = (
                    f"rename it to a UTF-8 name and pass that (in bash: mv $'{shown}' <new name>)"
                    if os.path.lexists(value)
                    else "pass a UTF-8 name"
                )
                raise RecipeError(
                    f"{origin(item.name)}: `{item.name}` {shown} is not UTF-8 (byte 0x{bad:02x}): {fix}"
                ) from None


# ---------------------------------------------------------------------------------------------------------------
# the config values the flags set (`model_config`, `config_overrides`)
# ---------------------------------------------------------------------------------------------------------------
def model_config_dict(model_args: ModelArguments) -> dict:
    """``model_config`` as a dict (a JSON string from the command line is parsed)."""
    value = model_args.model_config
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise RecipeError(f"--model_config is not valid JSON: {error.msg} at column {error.colno}") from None
    if not isinstance(value, dict):
        raise RecipeError(f"`model_config` must be a JSON object, got {_json_kind(value)}")
    return dict(value)


def config_fields(config) -> set[str]:
    """The fields a config class takes: its attributes, its (and ``PretrainedConfig``'s) ``__init__`` arguments and the
    former names of renamed fields (hf_seq configs' ``renamed_fields``, which the config class maps to the current
    ones)."""
    import inspect

    from transformers import PretrainedConfig

    names = set(config.to_dict()) | {"num_labels"} | set(getattr(type(config), "renamed_fields", {}))
    for cls in (type(config), PretrainedConfig):
        names |= set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    return names


def override_values(config_overrides: str | None, config) -> dict:
    """``config_overrides`` (``"hidden_size=128,dropout=0.1"``) as typed values: ``PretrainedConfig.update_from_string``
    on a copy of ``config`` converts each to the type of its field (booleans from true/false). A field that is None
    now, or a list or object (which update_from_string refuses), takes JSON or a string."""
    if not config_overrides:
        return {}
    pairs = {}
    known = config_fields(config)
    for item in filter(str.strip, config_overrides.split(",")):
        if "=" not in item:
            raise RecipeError(f"`config_overrides` {config_overrides!r}: {item!r} is not field=value")
        key, text = (part.strip() for part in item.split("=", 1))
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            raise RecipeError(f"`config_overrides`: {config.model_type} has no field `{key}`{hint}")
        pairs[key] = text
    typed = {key for key in pairs if isinstance(getattr(config, key, None), (bool, int, float, str))}
    trial = copy.deepcopy(config)
    for key in typed:
        try:
            trial.update_from_string(f"{key}={pairs[key]}")
        except ValueError as error:
            raise RecipeError(f"`config_overrides`: `{key}={pairs[key]}` ({error})") from None
    values = {}
    for key, text in pairs.items():
        if key in typed:
            values[key] = getattr(trial, key)
        else:
            try:
                values[key] = json.loads(text)
            except json.JSONDecodeError:
                values[key] = text
    return values


# ---------------------------------------------------------------------------------------------------------------
# a tokenizer and the model it feeds
# ---------------------------------------------------------------------------------------------------------------
SPECIAL_TOKENS = ("pad", "bos", "eos", "unk", "mask")


def check_tokenizer_fits_model(tokenizer_folder: Path, model_folder: Path, config: dict, where: str) -> None:
    """``tokenizer_name`` given beside ``model_name_or_path``: the tokenizer has as many tokens as the model's
    embedding has rows (``vocab_size`` of its config.json; fewer only where the model's own saved tokenizer has
    that many too: an embedding padded beyond its tokenizer), and its special tokens (pad / bos / eos / unk / mask)
    have the ids the config names. Otherwise every id points at another token's vector and the run trains without
    a word: a :class:`RecipeError` naming both flags, both folders and both numbers."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    except Exception:  # noqa: BLE001 - a tokenizer that cannot be loaded gets its own error when the run loads it
        return
    size, rows = len(tokenizer), config.get("vocab_size")
    own = any((model_folder / name).is_file() for name in TOKENIZER_FILES)
    fix = (
        "pass the tokenizer the model was trained with (leave `tokenizer_name` out to use the one saved with it)"
        if own
        else "pass the tokenizer the model was trained with"
    )
    named = f"`tokenizer_name` {tokenizer_folder}"
    model = f"`model_name_or_path` {model_folder}"
    if isinstance(rows, int) and size != rows:
        padded = False
        if own and size < rows:
            try:
                padded = len(AutoTokenizer.from_pretrained(str(model_folder))) == size
            except Exception:  # noqa: BLE001
                padded = False
        if not padded:
            raise RecipeError(
                f"{where}: {named} has {size} tokens but the embedding of {model} has {rows} rows (vocab_size of its "
                f"config.json): its ids would point at other tokens' vectors; {fix}"
            )
    for special in SPECIAL_TOKENS:
        have, want = getattr(tokenizer, f"{special}_token_id", None), config.get(f"{special}_token_id")
        if isinstance(have, int) and isinstance(want, int) and have != want:
            raise RecipeError(
                f"{where}: {named} has its {special} token {getattr(tokenizer, f'{special}_token')!r} at id {have} "
                f"but the config of {model} has {special}_token_id {want}: {fix}"
            )
