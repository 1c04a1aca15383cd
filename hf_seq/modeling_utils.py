"""Behaviour shared by every hf_seq ``PreTrainedModel``.

Loading: clear errors when ``from_pretrained`` gets a folder it cannot load, instead of transformers' defaults (a
default config + "size mismatch" when ``config.json`` is missing, a bare ``SafetensorError`` that names no file for a
corrupt weights file, and a SILENT random initialisation with only a load report when the folder holds another
family's model or weights that belong to another config).

Saving: ``save_pretrained`` lists EVERY head of the family in ``config.json``'s ``auto_map`` (transformers writes only
the class that saved), so a folder pretrained with one head loads with any other through ``trust_remote_code=True``.

Generation: ``generation_config.max_length`` is a model's default length; a ``max_new_tokens`` given to ``generate()``
replaces it without transformers' "Both `max_new_tokens` and `max_length` seem to have been set" warning. A recurrent
model continuing from a returned cache reads only the tokens its state has not read, and assisted decoding, which
rolls the cache back, is refused (:class:`RecurrentStatePrefillMixin`, :class:`GenerativeHeadMixin`). A decoding step
re-reads nothing on the host that its ``generate()`` call already knows (:class:`GenerativeHeadMixin`): the ids of the caller's prompt are
checked in the first forward, the tokens ``generate()`` chose itself are not checked again at every step.

Keyword arguments: every forward of every head is decorated with :func:`refuse_unknown_keywords`, so that a keyword
that neither the forward nor transformers takes (``output_hiden_states=True``) is a ``TypeError`` naming it, eager and
under ``torch.compile``, instead of being taken silently by ``**kwargs``.

Wiring (one line per family): ``class RNNPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):`` with
``from .modeling_utils import CheckedLoadingMixin`` and the family's heads in ``_auto_heads``; generative heads add
:class:`GenerativeHeadMixin` (the one ``generate()`` override of a head), or, those whose cache is a recurrent state,
:class:`RecurrentGenerativeHeadMixin` (the same and :class:`RecurrentStatePrefillMixin`). The file is a flat sibling imported relatively, so ``save_pretrained`` copies it next
to the modelling file and ``trust_remote_code`` loading keeps all of this.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import functools
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any, ClassVar

import torch
from transformers import GenerationMixin
from transformers.generation import GenerationMode
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs
from transformers.utils import TransformersKwargs, can_return_tuple

from .compat import CACHE_NAME, PREFILL_CUTS_EVERY_CACHE, capture_outputs, registered_for_auto_class
from .fast_paths import GenerationSteps, current_generation_steps, generation_steps
from .validation import check_generate_call

CONFIG_NAME = "config.json"
SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"


def check_safetensors_file(path: str | os.PathLike) -> None:
    """Raise ``OSError`` naming ``path`` if it is not a complete, readable safetensors file (truncated, garbage,
    empty). Reads only the header; the tensor bytes themselves carry no checksum, so a flipped byte inside a tensor
    cannot be detected here."""
    path = Path(path)
    size = path.stat().st_size
    problem = None
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            problem = f"it has only {size} bytes (a safetensors file starts with an 8-byte header length)"
        else:
            header_len = int.from_bytes(prefix, "little")
            if header_len > size - 8:
                problem = f"its header claims {header_len} bytes but the file has only {size}"
            else:
                try:
                    header = json.loads(f.read(header_len))
                    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
                    problem = f"its header is not valid safetensors JSON ({err})"
                else:
                    expected = 8 + header_len + max(ends, default=0)
                    if size != expected:
                        problem = f"it has {size} bytes but its header describes {expected}"
    if problem is None:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt"):
                pass
        except SafetensorError as err:
            problem = str(err)
    if problem is not None:
        raise OSError(
            f"{path} is not a valid safetensors weights file: {problem}. The file is truncated or corrupted; save the "
            "model again (save_pretrained) or download it again."
        )


def check_pretrained_folder(model_cls: type, folder: str | os.PathLike, config_given: bool = False) -> None:
    """Checks for a LOCAL model folder before ``from_pretrained`` reads it (Hub ids are left to transformers).

    * no ``config.json`` (unless ``config=`` is passed) → ``OSError`` naming the file;
    * ``config.json`` of another ``model_type`` → ``ValueError`` naming both types and the class to use;
    * ``model.safetensors`` (or a shard listed in its index) truncated / garbage → ``OSError`` naming the file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    config_file = folder / CONFIG_NAME
    if not config_given:
        if not config_file.is_file():
            raise OSError(
                f"{folder} has no {CONFIG_NAME}: {model_cls.__name__}.from_pretrained needs the model configuration "
                f"that save_pretrained writes beside the weights (without it a default "
                f"{model_cls.config_class.__name__} would be built and the weights would not fit)."
            )
        try:
            config = json.loads(config_file.read_text())
        except ValueError as err:
            raise OSError(f"{config_file} is not valid JSON ({err}); the file is corrupted.") from err
        expected = model_cls.config_class.model_type
        found = config.get("model_type")
        if found != expected:
            saved_as = ", ".join(config.get("architectures") or []) or "unknown class"
            raise ValueError(
                f"{config_file} describes a {found!r} model ({saved_as}), but {model_cls.__name__} loads "
                f"{expected!r} models. Load this folder with the class it was saved from or an AutoModel class "
                f"(e.g. AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True))."
            )
    index_file = folder / SAFE_WEIGHTS_INDEX_NAME
    if index_file.is_file():
        try:
            shards = sorted(set(json.loads(index_file.read_text())["weight_map"].values()))
        except (ValueError, KeyError, AttributeError) as err:
            raise OSError(f"{index_file} is not a valid weights index ({err}); the file is corrupted.") from err
        for shard in shards:
            if not (folder / shard).is_file():
                raise OSError(f"{folder / shard} is missing (listed in {index_file}).")
            check_safetensors_file(folder / shard)
    elif (folder / SAFE_WEIGHTS_NAME).is_file():
        check_safetensors_file(folder / SAFE_WEIGHTS_NAME)


def checkpoint_tensor_names(folder: str | os.PathLike) -> list[str] | None:
    """Names of the tensors in a local folder's ``model.safetensors`` (or the shards of its index), from the headers
    only; ``None`` when the folder has neither."""
    folder = Path(folder)
    index_file = folder / SAFE_WEIGHTS_INDEX_NAME
    if index_file.is_file():
        return sorted(json.loads(index_file.read_text())["weight_map"])
    weights = folder / SAFE_WEIGHTS_NAME
    if not weights.is_file():
        return None
    with open(weights, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sorted(k for k in header if k != "__metadata__")


def check_weights_were_loaded(model: Any, loading_info: dict, source: str | os.PathLike) -> None:
    """Raise ``ValueError`` when ``from_pretrained`` loaded NONE of ``model``'s weights from ``source`` (transformers
    would return a fully random model with only a load report): the config and the weights come from different
    models, e.g. another family's ``config.json`` copied over a folder. The message names the config's
    ``model_type`` and the tensors the checkpoint holds."""
    not_loaded = set(loading_info.get("missing_keys") or ())
    not_loaded |= {entry[0] if isinstance(entry, (tuple, list)) else entry for entry in loading_info["mismatched_keys"]}
    expected = sorted(model.state_dict())
    if not expected or any(key not in not_loaded for key in expected):
        return
    folder = Path(source)
    found = checkpoint_tensor_names(folder) if folder.is_dir() else None
    if found is None:
        found = sorted(loading_info.get("unexpected_keys") or ())
    where = source
    if folder.is_dir():
        where = folder / (
            SAFE_WEIGHTS_INDEX_NAME if (folder / SAFE_WEIGHTS_INDEX_NAME).is_file() else SAFE_WEIGHTS_NAME
        )
    described_by = "the config passed as `config=`"
    config_file = folder / CONFIG_NAME
    if config_file.is_file() and json.loads(config_file.read_text()).get("model_type") == model.config.model_type:
        described_by = str(config_file)  # also when an Auto class read it and passed it on as `config=`

    def some(names: list[str]) -> str:
        shown = ", ".join(names[:6])
        return shown + (f", ... ({len(names)} in all)" if len(names) > 6 else "") if names else "no tensors at all"

    raise ValueError(
        f"None of the weights in {where} fit {type(model).__name__}: {described_by} says model_type "
        f"{model.config.model_type!r}, whose model expects tensors like {some(expected)}, but the checkpoint holds "
        f"{some(found)}. The config and the weights come from different models (e.g. another model's config.json "
        "copied into the folder); put the config.json that was saved with these weights back, or load the folder "
        "with the class that saved it."
    )


def check_local_path(name: str | os.PathLike, loader: str) -> None:
    """``FileNotFoundError`` naming ``name`` when it looks like a local path (absolute, starting with ``.`` or ``~``,
    more than one ``/``, or under a folder that exists here) but no such file or folder exists: transformers would
    take it for a Hub id and answer "Repo id must be in the form ..."."""
    text = os.fspath(name)
    if os.path.exists(text):
        return
    parent = os.path.dirname(text.rstrip("/\\"))
    looks_local = (
        isinstance(name, os.PathLike)
        or os.path.isabs(text)
        or text.startswith((".", "~"))
        or "\\" in text
        or text.count("/") > 1
        or (parent != "" and os.path.isdir(parent))
    )
    if looks_local:
        raise FileNotFoundError(
            f"{text}: no such folder ({loader}.from_pretrained loads a local folder written by save_pretrained, or a "
            "Hub id of the form 'name' or 'namespace/name')"
        )


class _HeldRecords(logging.Filter):
    """Log records held back while a model loads (transformers' load report), passed on by :meth:`release`."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def release(self) -> None:
        self.logger.removeFilter(self)
        for record in self.records:
            self.logger.handle(record)
        self.records = []


@contextlib.contextmanager
def _held_back_records(logger: logging.Logger):
    held = _HeldRecords(logger)
    logger.addFilter(held)
    try:
        yield held
    finally:
        logger.removeFilter(held)


def _is_size_field(name: str, value: Any) -> bool:
    sized = name.endswith(("_size", "_dim")) or name in ("num_labels", "max_position_embeddings", "max_seq_length")
    return sized and isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fields_behind_shapes(model: Any, mismatched: list, stored: list[str] | None) -> dict[str, int]:
    """The size fields of ``model``'s config (``hidden_size``, ``vocab_size``, ...) that, set to the value the
    checkpoint's shapes imply, give some of the ``mismatched`` tensors (``(name, saved shape, model shape)``) their
    saved shape without changing any other of the checkpoint's tensors (``stored``: their names, None for all):
    ``{field: value of the weights}``. A candidate is tried on a model built on the meta device (no memory)."""
    config = model.config.to_dict()
    candidates: dict[str, int] = {}
    for _, saved, expected in mismatched:
        for saved_dim, expected_dim in zip(saved, expected):
            for field, value in config.items():
                if saved_dim != expected_dim and _is_size_field(field, value) and expected_dim % value == 0:
                    factor = expected_dim // value
                    if saved_dim % factor == 0:
                        candidates.setdefault(field, saved_dim // factor)
    saved_shapes = {name: tuple(saved) for name, saved, _ in mismatched}
    reference = {name: tuple(t.shape) for name, t in model.state_dict().items() if stored is None or name in stored}
    found = {}
    for field, value in sorted(candidates.items()):
        trial = copy.deepcopy(model.config)
        setattr(trial, field, value)
        try:
            with torch.device("meta"):
                shapes = {name: tuple(t.shape) for name, t in type(model)(trial).state_dict().items()}
        except Exception:  # noqa: BLE001 - a value the model refuses explains nothing
            continue
        fixed = [name for name, shape in saved_shapes.items() if shapes.get(name) == shape]
        broken = [n for n, shape in reference.items() if n not in saved_shapes and shapes.get(n) != shape]
        if fixed and not broken:
            found[field] = value
    return found


class ConfigWeightsMismatchError(ValueError, RuntimeError):
    """A config whose sizes disagree with the weights it is loaded with (a ``RuntimeError`` too, as transformers'
    own refusal of a size mismatch)."""


def check_config_fits_weights(model: Any, loading_info: dict, source: str | os.PathLike, overrides: dict) -> None:
    """:class:`ConfigWeightsMismatchError` when tensors of the checkpoint in ``source`` have other shapes than ``model``'s config gives
    them (``loading_info["mismatched_keys"]`` of a load with ``ignore_mismatched_sizes=True``): it names the config
    fields whose values differ, the value the weights were saved with, and one tensor's two shapes. When the fields
    came from ``from_pretrained``'s keyword arguments (a new head of another size), the advice is
    ``ignore_mismatched_sizes=True``; when ``config.json`` itself disagrees, the advice is to put back the one saved
    with the weights, never ``ignore_mismatched_sizes`` (which would initialise those weights anew)."""
    entries = loading_info.get("mismatched_keys") or ()
    mismatched = sorted((entry for entry in entries if isinstance(entry, (tuple, list))), key=lambda e: e[0])
    names = sorted(entry[0] if isinstance(entry, (tuple, list)) else entry for entry in entries)
    if not names:
        return
    folder = Path(source)
    named = _fields_behind_shapes(model, mismatched, checkpoint_tensor_names(folder) if folder.is_dir() else None)
    config = model.config.to_dict()
    key, saved, expected = mismatched[0] if mismatched else (names[0], "?", "?")
    shapes = f"`{key}` is {tuple(saved)} in the checkpoint but {tuple(expected)} for this config"
    if named:
        said = ", ".join(
            f"`{field}` {config[field]} (the weights have {value})" for field, value in sorted(named.items())
        )
    else:
        said = "fields that give these shapes"
    count = f"{len(names)} tensor{'s' if len(names) > 1 else ''} differ"
    config_file = folder / CONFIG_NAME
    saved_config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    in_file = [field for field in named if saved_config.get(field) == config[field]]
    given = sorted(k for k in overrides if hasattr(model.config, k) and (k in named or not named))
    if given or (overrides.get("config") is not None and not in_file):
        values = ", ".join(f"{field}={overrides[field]!r}" for field in given) or "the config passed as `config=`"
        raise ConfigWeightsMismatchError(
            f"the weights in {folder} do not fit {type(model).__name__} with {values} given to from_pretrained: "
            f"{shapes} ({count}). To start those weights anew at the new size (a new head), pass "
            "ignore_mismatched_sizes=True as well"
        )
    raise ConfigWeightsMismatchError(
        f"{config_file} does not match the weights saved beside it: it says {said}; {shapes} ({count}). Put back the "
        "config.json saved with these weights (or fix those fields); do not pass ignore_mismatched_sizes=True, which "
        "would initialise these weights randomly"
    )


# ---------------------------------------------------------------------------------------------------------------
# The keyword contract: a keyword nobody takes is a TypeError naming it, in every family, eager and compiled
# ---------------------------------------------------------------------------------------------------------------


def _typed_dict_keys(typed_dict) -> frozenset[str]:
    return frozenset(typed_dict.__required_keys__ | typed_dict.__optional_keys__)


# The keyword arguments transformers passes to any model's forward: the fields of its TypedDicts (read from the
# installed release) and what generate() and Trainer pass on top of those on some release of the range
# (generate(): the cache under either name, cache_position up to 5.23, use_cache, return_dict; the output flags).
TRANSFORMERS_KEYWORDS = (
    _typed_dict_keys(TransformersKwargs)
    | _typed_dict_keys(FlashAttentionKwargs)
    | {"output_attentions", "output_hidden_states", "return_dict", "use_cache", "cache_position"}
    | {"cache", "past_key_values", "num_items_in_batch"}
)
_ATTENTION_FUNCTION_INPUTS = 5  # (module, query, key, value, attention_mask): what every attention function takes
# hf_seq's own attention functions (hf_seq/attention.py, the local entries of its AttentionInterface) take no keyword
# of their own; every other implementation is the function registered in transformers' AttentionInterface
_OWN_ATTENTION = (None, "eager", "sdpa")


def _named_parameters(function) -> frozenset[str]:
    """The parameters of ``function`` (undecorated: ``inspect.signature`` follows ``__wrapped__``) that a call can
    name (not ``self``, ``*args`` or ``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = inspect.signature(function).parameters.values()
    return frozenset(p.name for p in parameters if p.kind in kinds and p.name != "self")


def _attention_function_keywords(config) -> tuple[str | None, frozenset[str]]:
    """The attention implementation ``config`` selects and the keyword parameters of its function past the five
    inputs every one takes: a forward's keyword arguments reach the attention function (transformers' convention,
    which hf_seq's attention layers follow), so a function registered with ``AttentionInterface.register`` may take
    keywords of its own (``model(ids, my_option=...)``)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    implementation = getattr(config, "_attn_implementation", None)
    function = None if implementation in _OWN_ATTENTION else ALL_ATTENTION_FUNCTIONS.get(implementation)
    if function is None:
        return implementation, frozenset()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = list(inspect.signature(function).parameters.values())[_ATTENTION_FUNCTION_INPUTS:]
    return implementation, frozenset(p.name for p in parameters if p.kind in kinds)


@torch.compiler.disable  # runs eagerly under torch.compile (a graph break, only when a keyword is unknown): the
# set arithmetic and the message are plain Python, which torch 2.11's dynamo cannot trace
def check_keyword_arguments(module, forward, named: frozenset[str], given) -> None:
    """Raise ``TypeError`` naming a keyword in ``given`` that ``module``'s ``forward`` does not take (``named``: its
    parameters and the keywords it declares) and transformers does not pass: ``**kwargs`` alone would take a
    mistyped name (``output_hiden_states=True``) silently.

    Accepted besides ``named``: :data:`TRANSFORMERS_KEYWORDS` and the keyword parameters of the config's attention
    function. (Not ``output_cross_attentions``: the capturing decorator records cross-attentions with
    ``output_attentions`` and reads no other flag for them.)"""
    unknown = set(given) - named - TRANSFORMERS_KEYWORDS
    if not unknown:
        return
    implementation, attention_keywords = _attention_function_keywords(getattr(module, "config", None))
    unknown = sorted(unknown - attention_keywords)
    if not unknown:
        return
    transformers_keywords = sorted(TRANSFORMERS_KEYWORDS - named)
    close = difflib.get_close_matches(unknown[0], [*named, *transformers_keywords, *attention_keywords], 1, 0.9)
    owner = f"{type(module).__name__}.{forward.__name__}()"
    message = f"{owner} got an unexpected keyword argument {unknown[0]!r}"
    message += f" (did you mean {close[0]!r}?)" if close else ""
    message += f" (and {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else ""
    message += f". {owner} takes {sorted(named)} and transformers' keyword arguments {transformers_keywords}"
    if attention_keywords:
        message += f" and the attention function {implementation!r}'s {sorted(attention_keywords)}"
    raise TypeError(message + "; a model's forward passes the keyword arguments it does not take on to it.")


def refuse_unknown_keywords(forward=None, *, also: tuple[str, ...] = ()):
    """Decorate a model's ``forward`` (outermost, above ``can_return_tuple`` / ``capture_outputs``): a keyword that
    neither ``forward`` (its parameters, and the names in ``also`` that it reads from ``**kwargs``) nor transformers
    takes is a ``TypeError`` naming it (:func:`check_keyword_arguments`). ``@refuse_unknown_keywords`` or
    ``@refuse_unknown_keywords(also=("shift_labels",))``.

    Under ``torch.compile`` the check is a loop over the call's keyword names (dynamo guards on them), and only an
    unknown one leaves the graph to raise."""

    def decorate(function):
        named = _named_parameters(function) | frozenset(also)
        accepted = named | TRANSFORMERS_KEYWORDS

        @functools.wraps(function)
        def wrapper(self, *args, **kwargs):
            # a loop, not `kwargs.keys() - accepted`: torch.compile of torch 2.11 cannot trace a set difference of
            # dict keys (InternalTorchDynamoError), and a compiled model runs this on every call
            for key in kwargs:
                if key not in accepted:
                    check_keyword_arguments(self, function, named, kwargs.keys())
                    break
            return function(self, *args, **kwargs)

        return wrapper

    return decorate(forward) if forward is not None else decorate


def capture_outputs_when_asked(forward=None, *, tie_last_hidden_states: bool = True):
    """The recurrent families' ``capture_outputs``: asked for an output (the call's ``output_hidden_states`` /
    ``output_attentions``, or the config's when the call gives none or ``None``), the forward runs under
    ``capture_outputs``; otherwise as ``can_return_tuple`` runs it. Why not always: the recorder's per-call setup
    costs ~25 µs, 1–2 % of a small recurrent model's generation step (a BERT or Transformer block dwarfs it)."""

    def decorate(function):
        captured = capture_outputs(tie_last_hidden_states=tie_last_hidden_states)(function)
        plain = can_return_tuple(function)

        @functools.wraps(function)
        def wrapper(self, *args, **kwargs):
            asked = False
            for flag in ("output_hidden_states", "output_attentions"):
                if kwargs.get(flag) is None:  # capture_outputs reads the config only when the keyword is absent
                    kwargs.pop(flag, None)
                asked = asked or bool(kwargs.get(flag, getattr(self.config, flag, False)))
            return (captured if asked else plain)(self, *args, **kwargs)

        return wrapper

    return decorate(forward) if forward is not None else decorate


class CheckedLoadingMixin:
    """Put before ``PreTrainedModel`` in a family's base class: ``from_pretrained`` runs
    :func:`check_pretrained_folder` on local folders, loads as usual, then :func:`check_weights_were_loaded`;
    ``save_pretrained`` lists every head of ``_auto_heads`` in ``auto_map``."""

    # Auto class name -> name of the class, defined in the same modelling file, for every head of the family. Set by
    # each family's base class; ``import hf_seq`` registers them with the Auto classes and ``save_pretrained`` writes
    # them all into ``config.auto_map``.
    _auto_heads: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | None, *model_args: Any, **kwargs: Any):
        if pretrained_model_name_or_path is None:
            return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        check_local_path(pretrained_model_name_or_path, cls.__name__)
        folder = Path(pretrained_model_name_or_path) / (kwargs.get("subfolder") or "")
        check_pretrained_folder(cls, folder, config_given=kwargs.get("config") is not None)
        want_info = kwargs.pop("output_loading_info", False)
        # the caller's ignore_mismatched_sizes: new weights for the tensors that differ. Otherwise transformers
        # reports a size mismatch with advice to set it, which would initialise the weights anew: load with it, hold
        # the report back, and raise one error naming the config fields instead
        caller_ignores = kwargs.pop("ignore_mismatched_sizes", False)
        report = logging.getLogger("transformers.modeling_utils")
        with contextlib.nullcontext() if caller_ignores else _held_back_records(report) as held:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path,
                *model_args,
                output_loading_info=True,
                ignore_mismatched_sizes=True,
                **kwargs,
            )
            check_weights_were_loaded(model, info, folder)
            if held is not None:
                check_config_fits_weights(model, info, folder, kwargs)
                held.release()
        return (model, info) if want_info else model

    @classmethod
    def family_auto_map(cls) -> dict[str, str]:
        """``auto_map`` entries (``"AutoModelForX": "modeling_family.ClassName"``) for every head of ``cls``'s family,
        or ``{}`` when ``cls`` is not defined in the family's modelling file (a subclass elsewhere: that file would not
        be copied beside the weights)."""
        owner = next(c for c in cls.__mro__ if "_auto_heads" in vars(c))
        if owner.__module__ != cls.__module__:
            return {}
        module = cls.__module__.rsplit(".", 1)[-1]
        return {auto_class: f"{module}.{name}" for auto_class, name in owner._auto_heads.items()}

    def save_pretrained(self, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> None:
        """``PreTrainedModel.save_pretrained``; when the modelling code is saved too (``register_for_auto_class``),
        ``auto_map`` lists every head of the family, not only this one, so that e.g. a folder pretrained with
        ``BertForMaskedLM`` loads with ``AutoModelForSequenceClassification(..., trust_remote_code=True)``."""
        if registered_for_auto_class(self):
            heads = type(self).family_auto_map()
            if heads:
                self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **heads}
        return super().save_pretrained(save_directory, *args, **kwargs)


class GenerationLengthMixin:
    """For generative heads: ``generation_config.max_length`` (or ``max_new_tokens``) saved with a model is its
    DEFAULT length, which a length given to ``generate()`` replaces. transformers cannot tell a saved default from a
    length the caller set, so it warns "Both `max_new_tokens` and `max_length` seem to have been set" on every
    ``generate(max_new_tokens=...)`` of a model whose generation config has a ``max_length``; here the caller's length
    simply wins. A call that sets both still gets transformers' warning (``max_new_tokens`` takes precedence)."""

    def _prepare_generation_config(self, generation_config: Any, **kwargs: Any) -> tuple[Any, dict]:
        def set_by_call(name: str) -> bool:
            if kwargs.get(name) is not None:
                return True
            value = getattr(generation_config, name, None) if generation_config is not None else None
            # a copy of the model's own generation config carries its defaults, not a choice of the caller
            return value is not None and value != getattr(self.generation_config, name, None)

        new_tokens, length = set_by_call("max_new_tokens"), set_by_call("max_length")
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        if new_tokens and not length:
            generation_config.max_length = None  # generate() derives it: prompt length + max_new_tokens
        elif length and not new_tokens:
            generation_config.max_new_tokens = None
        return generation_config, model_kwargs


ASSISTANT_SETTINGS = ("prompt_lookup_num_tokens", "assistant_early_exit")  # with assistant_model: assisted decoding


def refuse_assisted_generation(model: Any, args: tuple, kwargs: dict) -> None:
    """``ValueError`` when ``model.generate(*args, **kwargs)`` would run assisted decoding (an ``assistant_model``,
    ``prompt_lookup_num_tokens`` or ``assistant_early_exit``, with greedy search or sampling): its draft tokens are
    checked by rolling the cache back to a shorter prefix, which a recurrent state cannot do. The message is
    transformers' own for stateful models (up to 5.24 it refuses them itself)."""
    call = inspect.signature(GenerationMixin.generate).bind_partial(model, *args, **kwargs).arguments
    settings = {**call.pop("kwargs", {}), **call}
    config = settings.pop("generation_config", None) or model.generation_config
    assistant = settings.get("assistant_model")
    if assistant is None and all(settings.get(n, getattr(config, n, None)) is None for n in ASSISTANT_SETTINGS):
        return
    config = copy.deepcopy(config)
    config.update(**{name: value for name, value in settings.items() if hasattr(config, name)})
    if config.get_generation_mode(assistant) == GenerationMode.ASSISTED_GENERATION:
        raise ValueError(
            f"assisted generation is not supported with stateful models, such as {type(model).__name__}: its cache "
            "is a recurrent state, which cannot be rolled back to check draft tokens (drop `assistant_model`, "
            "`prompt_lookup_num_tokens` and `assistant_early_exit`)"
        )


def columns_read_now(mask: Any, num_tokens: int) -> Any:
    """The one reading of the padding mask that a recurrent model gets with the ``num_tokens`` tokens it reads now
    (``T``): a mask ``(B, T)`` is theirs; a wider one ``(B, past + T)`` is the mask of the whole sequence, as
    ``generate()`` passes it at every step (and as :class:`RecurrentStatePrefillMixin` leaves it when it cuts a
    prompt to what the state has not read), whose first ``past`` columns the state has read: its last ``T`` columns
    are returned. Anything else is returned as it is, for the model's shape check."""
    if mask is not None and mask.dim() == 2 and mask.shape[1] > num_tokens:
        return mask[:, -num_tokens:]  # (B, T): the columns of the tokens read now
    return mask


class RecurrentStatePrefillMixin:
    """For generative heads whose cache is a recurrent state (``cache.is_linear`` all True, ``get_seq_length()`` = the
    tokens read so far): ``generate(..., cache=<a cache returned by an earlier call>)`` reads only the tokens the
    state has not read.

    ``generate()`` gets the whole sequence (for an encoder-decoder: the whole decoder sequence, which it starts with
    the decoder start token), or, decoder-only, only the new tokens with the attention mask of the whole sequence.
    transformers cuts the part a cache has read only for key/value caches (and, for an encoder-decoder, only when a
    decoder attention mask is given); for a recurrent state it passes everything, and the model would read the
    prefix a second time from the state that has already read it. The rule here is transformers' own (its
    ``_prefill``): an input as long as its attention mask is the whole sequence and loses its first
    ``cache.get_seq_length()`` tokens; an input shorter than its mask by exactly that count is the new tokens;
    anything else is a ``ValueError`` that says what to pass.
    """

    def _prefill(self, input_ids: Any, generation_config: Any, model_kwargs: dict, *args: Any, **kwargs: Any):
        cache = model_kwargs.get(CACHE_NAME)
        seen = cache.get_seq_length() if cache is not None and all(getattr(cache, "is_linear", [False])) else 0
        if seen > 0:
            input_ids, model_kwargs = self._unread_inputs(input_ids, generation_config, model_kwargs, seen)
        return super()._prefill(input_ids, generation_config, model_kwargs, *args, **kwargs)

    def _unread_inputs(self, input_ids: Any, generation_config: Any, model_kwargs: dict, seen: int) -> tuple:
        """``(input_ids, model_kwargs)`` reduced to what a state that has read ``seen`` tokens has not read."""
        encoder_decoder = self.config.is_encoder_decoder
        embeds = None if encoder_decoder else model_kwargs.get("inputs_embeds")
        if embeds is not None:  # an embedded prompt is always the whole sequence (as in transformers)
            if embeds.shape[1] <= seen:
                raise ValueError(
                    f"`inputs_embeds` has {embeds.shape[1]} positions but `cache` has read {seen}: to continue from "
                    f"the cache pass the embeddings of the whole sequence (the {seen} positions it has read, then the "
                    "new ones)"
                )
            if PREFILL_CUTS_EVERY_CACHE:  # the release cuts them itself (5.25 on)
                return input_ids, model_kwargs
            return input_ids, {**model_kwargs, "inputs_embeds": embeds[:, seen:]}
        name = "decoder_input_ids" if encoder_decoder else "input_ids"
        mask = model_kwargs.get("decoder_attention_mask" if encoder_decoder else "attention_mask")
        length = input_ids.shape[1]
        # generate() drops an all-ones attention mask of a decoder-only model and records its length
        mask_length = mask.shape[1] if mask is not None else getattr(generation_config, "_mask_length", None)
        mask_length = length if mask_length is None or mask_length < 0 else mask_length
        if mask_length == length and length > seen:  # the whole sequence: read only its end
            return input_ids[:, seen:], model_kwargs
        if mask_length == seen + length and not encoder_decoder:  # the new tokens, with the whole mask
            return input_ids, model_kwargs
        if encoder_decoder:
            expected = (
                f"the whole decoder sequence (starting with the decoder start token: the {seen} tokens the cache has "
                "read, then at least one more)"
            )
        else:
            expected = (
                f"the whole sequence (the {seen} tokens the cache has read, then at least one more; an attention mask "
                f"as long), or only the new tokens with the attention mask of the whole sequence ({seen} + new columns)"
            )
        raise ValueError(
            f"`{name}` has {length} tokens (attention mask: {mask_length} columns) but `cache` has read {seen}: to "
            f"continue from the cache pass {expected}"
        )


# ---------------------------------------------------------------------------------------------------------------
# What one generate() call knows across its decoding steps
# ---------------------------------------------------------------------------------------------------------------

# generate() arguments under which a forward inside the loop may get ids that generate() did not choose from the
# model's output vocabulary: draft tokens of an assistant or of prompt look-up, a decoding loop from the Hub, the
# negative prompt of classifier-free guidance (run through the model by a logits processor), user-written logits
# processors and stopping criteria (which may call the model themselves)
UNCHOSEN_TOKEN_SOURCES = (
    "assistant_model",
    "prompt_lookup_num_tokens",
    "assistant_early_exit",
    "custom_generate",
    "negative_prompt_ids",
    "logits_processor",
    "stopping_criteria",
)


# ---------------------------------------------------------------------------------------------------------------
# What a generative head adds to GenerationMixin: one generate() override
# ---------------------------------------------------------------------------------------------------------------


class GenerativeHeadMixin(GenerationLengthMixin):
    """What every generative head adds to ``GenerationMixin`` (``class XForConditionalGeneration(GenerativeHeadMixin,
    XPreTrainedModel, GenerationMixin)``), in its one ``generate()`` override, in this order:

    * an empty prompt of a decoder-only model starts from ``bos_token_id`` (or is an error naming it);
    * ``labels`` are dropped (``Seq2SeqTrainer(predict_with_generate=True)`` passes them with each batch; they are not
      a generation input, and the encoder's forward refuses keywords it does not take);
    * the arguments and inputs are checked (:func:`~.validation.check_generate_call`);
    * a head whose cache is a running state (``_is_stateful``) refuses assisted decoding
      (:func:`refuse_assisted_generation`);
    * a head with a ``_generation_cache`` factory gets a fresh cache of it unless the call passes a cache, a
      ``cache_implementation`` or ``use_cache=False``;
    * a decoding step reads on the host only what ``GenerationMixin``'s own loop reads (:class:`GenerationSteps`):
      ``_decoding_module()`` names the module whose forward checks the ids of a step and the bound it checks them
      against (``(module, upper)``). The end of the prompt is marked by transformers' private
      ``_update_model_kwargs_for_generation`` (called after each step on every release of the range; a release that
      did not call it would keep every step's checks, as before: safe, only slower).

    A saved length is the default a caller's length replaces (:class:`GenerationLengthMixin`)."""

    _generation_cache: ClassVar[Any] = None  # a factory of the cache generate() starts with (None: transformers')

    def _decoding_module(self) -> tuple[Any, int]:
        raise NotImplementedError

    def generate(self, inputs: Any = None, generation_config: Any = None, **kwargs: Any):
        config = generation_config if generation_config is not None else self.generation_config
        if self.config.is_encoder_decoder:
            kwargs.pop("labels", None)
        else:
            inputs = self._prompt_or_bos(inputs, config, kwargs)
        check_generate_call(self, inputs, generation_config, kwargs)
        if getattr(self, "_is_stateful", False):
            refuse_assisted_generation(self, (inputs, generation_config), kwargs)
        use_cache = kwargs.get("use_cache", getattr(config, "use_cache", True))
        implementation = kwargs.get("cache_implementation", getattr(config, "cache_implementation", None))
        cache_given = any(kwargs.get(name) is not None for name in ("cache", "past_key_values"))
        if self._generation_cache is not None and use_cache is not False and not (implementation or cache_given):
            kwargs[CACHE_NAME] = self._generation_cache()

        decoder, upper = self._decoding_module()
        vocab = getattr(self.get_output_embeddings(), "out_features", None)
        call = inspect.signature(GenerationMixin.generate).bind_partial(self, inputs, generation_config, **kwargs)
        settings = {**call.arguments.pop("kwargs", {}), **call.arguments}
        config = settings.get("generation_config") or self.generation_config

        def given(name: str) -> bool:
            value = settings.get(name, getattr(config, name, None))
            return value is not None and not (isinstance(value, (list, tuple)) and len(value) == 0)

        chosen_only = not any(given(name) for name in UNCHOSEN_TOKEN_SOURCES)
        with generation_steps(GenerationSteps(self, decoder, chosen_only and vocab is not None and vocab <= upper)):
            return super().generate(inputs, generation_config, **kwargs)

    @staticmethod
    def _prompt_or_bos(inputs: Any, config: Any, kwargs: dict) -> Any:
        """The prompt of a decoder-only model: an empty one ``(B, 0)`` becomes ``bos_token_id`` (``input_ids`` and
        ``attention_mask`` dropped from ``kwargs``), or a ``ValueError`` when none is set."""
        prompt = inputs if inputs is not None else kwargs.get("input_ids")
        if not (isinstance(prompt, torch.Tensor) and prompt.dim() == 2 and prompt.shape[1] == 0):
            return inputs
        bos = kwargs.get("bos_token_id", getattr(config, "bos_token_id", None))
        if bos is None:
            raise ValueError(
                "The prompt (`input_ids`) is empty and no `bos_token_id` is set: give at least one token of "
                "seed text, or set `bos_token_id` (config or generate argument) to start from it"
            )
        kwargs.pop("input_ids", None)
        kwargs.pop("attention_mask", None)
        return torch.full((prompt.shape[0], 1), int(bos), dtype=prompt.dtype, device=prompt.device)

    def _update_model_kwargs_for_generation(self, *args: Any, **kwargs: Any) -> dict:
        steps = current_generation_steps()
        if steps is not None and steps.model is self:
            steps.tokens_appended = True  # the prompt has been read; generate() appends its own tokens from now on
        return super()._update_model_kwargs_for_generation(*args, **kwargs)


class RecurrentGenerativeHeadMixin(RecurrentStatePrefillMixin, GenerativeHeadMixin):
    """:class:`GenerativeHeadMixin` for a head whose cache is a recurrent state (``_is_stateful = True``): also
    continues from a returned state (:class:`RecurrentStatePrefillMixin`)."""
