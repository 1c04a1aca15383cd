"""The one implementation of the argument checks shared by every family's config and model files.

Configs validate each field with the ``check_*`` helpers below and model ``forward`` methods validate token ids and
labels with :func:`check_token_ids` / :func:`check_label_range`. Every helper raises ``ValueError`` naming the field
or argument and the allowed values. Config and modelling files import this module relatively
(``from .validation import ...``), so ``save_pretrained`` copies it next to the weights for ``trust_remote_code``.

Checks of tensor *values* (ids in range, labels in range, a mask with holes or an empty row) read the tensor on the
host, which is a graph break under ``torch.compile`` / ``torch.export`` and a device synchronisation on an
accelerator. They run only where that costs nothing: in eager mode, on CPU tensors (:func:`checks_values`); the few
of ``generate()`` run once per call on every device. Shape and dtype checks run everywhere.

The value checks have a switch of their own, apart from the fast paths' (``hf_seq.fast_paths.disabled()``, which is
for speed only): ``with hf_seq.validation.value_checks_disabled():``, :func:`disable_value_checks` /
:func:`enable_value_checks` for the whole process, or the environment variable ``HF_SEQ_VALUE_CHECKS=0`` set when
hf_seq is imported. With the checks off no tensor value is read for a check and the outputs are the same (bad input
then fails the way torch fails, or silently). Config checks read no tensor and always run.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch

from .fast_paths import Switch, host_reads_free, is_tracing

IGNORE_INDEX = -100  # label value skipped by the losses (``F.cross_entropy(..., ignore_index=-100)``)
PROBLEM_TYPES = (None, "regression", "single_label_classification", "multi_label_classification")  # classifier losses


# ---------------------------------------------------------------------------------------------------------------
# Config fields
# ---------------------------------------------------------------------------------------------------------------


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> None:
    """ValueError unless ``value`` is an int > 0 (bools are refused); ``None`` passes when ``allow_none``."""
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")


def check_probability(name: str, value: Any) -> None:
    """ValueError unless ``value`` is a number in ``[0, 1)`` (a dropout probability)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1), got {value!r}")


def check_positive_float(name: str, value: Any) -> None:
    """ValueError unless ``value`` is a number > 0 (an epsilon, a std, an init range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value) > 0.0:
        raise ValueError(f"`{name}` must be a positive float, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    """ValueError unless ``value`` is a real ``bool`` (JSON true/false)."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool (true/false), got {value!r}")


def check_choice(name: str, value: Any, allowed: Iterable[Any]) -> None:
    """ValueError unless ``value`` is one of ``allowed`` (the message lists them)."""
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"`{name}` must be one of {allowed}, got {value!r}")


_FIELD_CHECKS = {
    "positive_int": check_positive_int,
    "probability": check_probability,
    "positive_float": check_positive_float,
    "bool": check_bool,
}


def check_fields(config: Any, **kinds: str) -> None:
    """Check the fields of ``config`` by kind, kinds and fields in the order given (ValueError naming the first bad
    field): ``check_fields(config, positive_int="vocab_size hidden_size", bool="use_cache")``. Each kind
    (``positive_int``, ``probability``, ``positive_float``, ``bool``: the ``check_*`` above) takes its field names
    space-separated, as ``collections.namedtuple`` takes its field names."""
    for kind, names in kinds.items():
        check = _FIELD_CHECKS[kind]
        for name in names.split():
            check(name, getattr(config, name))


def check_divisible(config: Any, name: str, divisor_name: str) -> None:
    """ValueError unless the field ``name`` is a multiple of the field ``divisor_name`` (e.g. the hidden size of the
    attention heads); both are positive ints already."""
    value, divisor = getattr(config, name), getattr(config, divisor_name)
    if value % divisor != 0:
        raise ValueError(f"`{name}` ({value}) must be divisible by `{divisor_name}` ({divisor})")


def take_renamed_fields(config: Any, kwargs: dict) -> None:
    """Move the values that ``kwargs`` gives under a field's former name onto the field itself.

    ``type(config).renamed_fields`` maps each former name to the current one (the same pairs are in the class's
    ``attribute_map``, so ``config.<former name>`` reads and writes the field). A config constructor calls this (through
    :func:`check_config_keywords`) after setting its fields from its own arguments and before validating them:
    ``HfSeqTransformerConfig(d_model=64)`` and a config.json written with the former names build the same config,
    which is saved under the current names only.
    ValueError when a former and a current name are both given with different values."""
    import inspect

    renamed = getattr(type(config), "renamed_fields", {})
    parameters = inspect.signature(type(config).__init__).parameters
    for old, new in renamed.items():
        if old not in kwargs:
            continue
        value = kwargs.pop(old)
        current = getattr(config, new)
        default = parameters[new].default if new in parameters else inspect.Parameter.empty
        if current != default and current != value:
            raise ValueError(
                f"`{old}` is the former name of `{new}`: pass one of them, got {old}={value!r} and {new}={current!r}"
            )
        setattr(config, new, value)


# keywords ``PretrainedConfig`` (transformers 5.0 - 5.25) reads or keeps besides its own fields: the generic part of
# every config.json (and the generation settings older releases kept in the model config)
GENERIC_CONFIG_KEYWORDS = frozenset(
    """architectures auto_map custom_pipelines dtype torch_dtype transformers_version model_type name_or_path id2label label2id
    num_labels problem_type return_dict output_hidden_states output_attentions is_encoder_decoder is_decoder
    add_cross_attention cross_attention_hidden_size tie_encoder_decoder tie_word_embeddings chunk_size_feed_forward
    pruned_heads torchscript use_bfloat16 tokenizer_class prefix task_specific_params finetuning_task use_cache
    attn_implementation experts_implementation per_layer_config quantization_config base_model_tp_plan
    base_model_pp_plan base_model_ep_plan max_length min_length do_sample early_stopping num_beams num_beam_groups
    diversity_penalty temperature top_k top_p typical_p repetition_penalty length_penalty no_repeat_ngram_size
    encoder_no_repeat_ngram_size bad_words_ids num_return_sequences output_scores return_dict_in_generate
    remove_invalid_values exponential_decay_length_penalty suppress_tokens begin_suppress_tokens""".split()
)


def _config_fields(config: Any) -> set[str]:
    """The keywords a config class reads itself: its ``__init__`` arguments, former names and attribute aliases."""
    import inspect

    cls = type(config)
    names = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs"}
    return names | set(getattr(cls, "renamed_fields", {})) | set(getattr(cls, "attribute_map", {}))


def check_config_keywords(config: Any, kwargs: dict) -> None:
    """Keywords of a config constructor that no field reads (``kwargs``, the rest of its arguments, before
    ``PretrainedConfig.__init__`` stores them as attributes, which it does without a word). The values given under a
    field's former name are moved onto the field first (:func:`take_renamed_fields`).

    transformers' strict configs (``@strict(accept_kwargs=True)``) accept any keyword, so that a config.json of
    another release loads: so does this check, for a keyword it does not know, with a warning naming it and the
    nearest field. A keyword that can only be a misspelt field (close to one of the class's own fields, and not a
    generic keyword of :data:`GENERIC_CONFIG_KEYWORDS`, a ``*_token_id`` or a private ``_*`` key) is a ValueError
    naming both, unless the keywords come from a saved config.json (they carry ``transformers_version``): a saved
    folder always loads, with the warning."""
    import difflib
    import warnings

    take_renamed_fields(config, kwargs)
    own = _config_fields(config)
    loading = "transformers_version" in kwargs
    for key in kwargs:
        if key in own or key in GENERIC_CONFIG_KEYWORDS or key.startswith("_") or key.endswith("_token_id"):
            continue
        fields = sorted(own)
        typo = difflib.get_close_matches(key, fields, n=1, cutoff=0.8)
        name = type(config).__name__
        if typo and not loading:
            raise ValueError(f"`{key}` is not a field of {name}: did you mean `{typo[0]}`? (it would be ignored)")
        nearest = typo or difflib.get_close_matches(key, fields, n=1, cutoff=0.5)
        hint = f"; the nearest field is `{nearest[0]}`" if nearest else ""
        warnings.warn(
            f"{name} got the keyword `{key}`, which no field reads: it is kept in the config and ignored{hint}",
            UserWarning,
            stacklevel=3,
        )


def _is_token_id(value: Any, vocab_size: int) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and 0 <= value < vocab_size)


def check_token_id(name: str, value: Any, vocab_size: int, allow_list: bool = False) -> None:
    """ValueError unless ``value`` is None or an id in ``[0, vocab_size)``; with ``allow_list`` a list/tuple of such
    ids is accepted too (``eos_token_id`` may list several stop tokens)."""
    if allow_list and isinstance(value, (list, tuple)):
        if not all(_is_token_id(v, vocab_size) for v in value):
            raise ValueError(
                f"`{name}` must be None, an id or a list of ids in [0, vocab_size={vocab_size}), got {value!r}"
            )
        return
    if not _is_token_id(value, vocab_size):
        allowed = "None, an id or a list of ids" if allow_list else "None or an id"
        raise ValueError(f"`{name}` must be {allowed} in [0, vocab_size={vocab_size}), got {value!r}")


def check_token_id_fields(config: Any, vocab_size: int) -> None:
    """ValueError naming the field unless every special token id of ``config`` (each attribute ending in ``_token_id``:
    pad, bos, eos, sep, cls, mask, decoder_start, ...) is None or an id in ``[0, vocab_size)``; ``eos_token_id`` may be a
    list of ids. (``transformers`` only logs a warning for these.)"""
    for name in config:  # a PretrainedConfig iterates over its attribute names
        if name.endswith("_token_id"):
            check_token_id(name, getattr(config, name), vocab_size, allow_list=name == "eos_token_id")


# ---------------------------------------------------------------------------------------------------------------
# Model inputs
# ---------------------------------------------------------------------------------------------------------------


# read at each check (the fast paths' switch is another: fast_paths._FAST_PATHS)
_VALUE_CHECKS = Switch("HF_SEQ_VALUE_CHECKS")


def value_checks_enabled() -> bool:
    """Whether the value checks are switched on (they still run only where :func:`checks_values` allows)."""
    return _VALUE_CHECKS.on


def enable_value_checks() -> None:
    """Switch the value checks on for the whole process (the default)."""
    _VALUE_CHECKS.on = True


def disable_value_checks() -> None:
    """Switch the value checks off for the whole process (as ``HF_SEQ_VALUE_CHECKS=0``)."""
    _VALUE_CHECKS.on = False


def value_checks_disabled() -> AbstractContextManager[None]:
    """Within the block no check reads a tensor value: ids and labels out of range, masks with holes or empty rows
    are not refused (shape, dtype and config checks still run). The outputs of valid inputs are the same."""
    return _VALUE_CHECKS.off()


def checks_values(tensor: torch.Tensor) -> bool:
    """True where a check may read ``tensor``'s values: value checks on, and a CPU tensor outside tracing
    (:func:`~.fast_paths.host_reads_free`), whether or not the fast paths are on."""
    return _VALUE_CHECKS.on and host_reads_free(tensor)


def check_batch_shape(name: str, shape: tuple[int, ...]) -> None:
    """ValueError naming ``name`` unless ``shape`` is a non-empty ``(batch, length)``: at least one sequence of at
    least one position. A shape check, so it runs everywhere (compiled and exported too)."""
    if len(shape) != 2:
        raise ValueError(f"`{name}` must have shape (batch, length), got {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(
            f"`{name}` must hold at least one sequence of at least one token, got shape {shape} (an empty batch)"
        )


def check_one_input(ids: torch.Tensor | None, embeds: torch.Tensor | None, name: str = "input_ids") -> None:
    """ValueError unless exactly one of ``name`` (token ids) and its embeddings (``inputs_embeds``, or
    ``decoder_inputs_embeds`` for ``decoder_input_ids``) is given: every family's inputs check."""
    if (ids is None) == (embeds is None):
        embeds_name = name.replace("input_ids", "inputs_embeds")
        raise ValueError(f"Pass exactly one of `{name}` and `{embeds_name}`.")


def check_mask_shape(name: str, mask: torch.Tensor | None, shape: tuple[int, ...], of: str = "the input") -> None:
    """ValueError unless ``mask`` (a padding mask or segment ids, named ``name``) is None or has ``shape``, the
    ``(batch, length)`` of what it belongs to (``of``): every family's mask check."""
    if mask is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"`{name}` must have the shape of {of} {tuple(shape)}, got {tuple(mask.shape)}")


def check_token_ids(
    name: str, ids: torch.Tensor, upper: int, upper_name: str = "vocab_size", batched: bool = False
) -> None:
    """ValueError naming ``name`` unless ``ids`` holds integer ids in ``[0, upper)`` (``upper_name`` names the
    config field that sets ``upper``); with ``batched`` the tensor must also be 2-D ``(batch, length)`` with at least
    one sequence and one position (an empty batch has no loss and no output to speak of). The range is checked only
    where :func:`checks_values` (value checks on; eager, CPU); shape and dtype always."""
    if batched:
        check_batch_shape(name, tuple(ids.shape))
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ValueError(f"`{name}` must hold integer token ids, got dtype {ids.dtype}")
    if ids.numel() == 0 or not checks_values(ids):
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= upper:
        raise ValueError(f"`{name}` must contain ids in [0, {upper_name}={upper}), got values in [{low}, {high}]")


def check_integer_labels(name: str, labels: torch.Tensor) -> None:
    """ValueError unless ``labels`` has an integer dtype: class ids, not floats (``1.7`` would silently become class 1)
    nor booleans. A dtype check, so it runs everywhere."""
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"`{name}` must be integer class ids (or -100 to ignore a position), got dtype {labels.dtype}")


def check_label_range(
    name: str, labels: torch.Tensor, num_classes: int, what: str, ignore_index: int | None = IGNORE_INDEX
) -> None:
    """ValueError unless every label is ``ignore_index`` (skipped by the loss; None: no label is skipped) or a class id
    in ``[0, num_classes)``; ``what`` names the config field that sets ``num_classes`` ("num_labels", "vocab_size").
    The dtype (integer class ids, never floats that a cast would truncate) is checked everywhere, the range only where
    :func:`checks_values` (value checks on; eager, CPU)."""
    check_integer_labels(name, labels)
    if not checks_values(labels):
        return
    valid = labels if ignore_index is None else labels[labels != ignore_index]
    if valid.numel() == 0:
        return
    low, high = int(valid.min()), int(valid.max())
    if low < 0 or high >= num_classes:
        skipped = "" if ignore_index is None else f"{ignore_index} (ignored) or "
        raise ValueError(f"`{name}` must be {skipped}in [0, {what}={num_classes}), got values in [{low}, {high}]")


# ---------------------------------------------------------------------------------------------------------------
# generate() arguments
# ---------------------------------------------------------------------------------------------------------------
# token-id arguments of generate() / GenerationConfig: transformers accepts ids outside the vocabulary silently (an
# eos or pad that never matches, a forced token that crashes inside a logits processor with an IndexError)
GENERATION_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
GENERATION_FORCED_IDS = ("forced_bos_token_id", "forced_eos_token_id")
GENERATION_ID_LISTS = ("suppress_tokens", "begin_suppress_tokens")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _token_ids(value: Any) -> list | None:
    """The ids of an id argument (an int, a list of ints, a 0-/1-D tensor), or None if it is no such thing."""
    if isinstance(value, torch.Tensor):
        return value.flatten().tolist() if value.dim() <= 1 and not value.is_floating_point() else None
    if _is_int(value):
        return [value]
    if isinstance(value, (list, tuple)) and all(_is_int(v) for v in value):
        return list(value)
    return None


def check_generation_arguments(generation_config: Any, kwargs: dict, vocab_size: int) -> None:
    """ValueError naming the ``generate()`` argument (or generation-config field) and what is allowed for the values
    transformers accepts silently or fails on deep inside decoding (a ``ZeroDivisionError``, a ``TypeError`` from
    ``**``, an ``IndexError`` in a logits processor): beam and sequence counts, lengths, ``top_p``, the cut-offs,
    ``length_penalty``, n-gram sizes, and every token id (``bos`` / ``eos`` / ``pad`` / ``decoder_start`` /
    ``forced_*`` / suppressed tokens) against ``vocab_size``. What ``GenerationConfig.validate`` and the logits
    processors already refuse with a clear message (``temperature``, ``top_k``, ``repetition_penalty``,
    ``typical_p``, ``min_p``, ``max_new_tokens`` <= 0, ``early_stopping``, ``num_return_sequences`` > ``num_beams``)
    is left to them. ``kwargs`` (the call's arguments) take precedence over ``generation_config``, as in
    ``generate()``; no tensor is read (only the ids given as arguments)."""

    def value(name: str) -> Any:
        if name in kwargs:
            return kwargs[name]
        return getattr(generation_config, name, None)

    for name in ("num_beams", "num_return_sequences", "max_new_tokens", "max_length"):
        v = value(name)
        if v is not None and (not _is_int(v) or v < 1):
            raise ValueError(f"`{name}` must be a positive integer, got {v!r}")
    for name in ("min_new_tokens", "min_length", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size"):
        v = value(name)
        if v is not None and (not _is_int(v) or v < 0):
            raise ValueError(f"`{name}` must be a non-negative integer (0: off), got {v!r}")
    low, high = value("min_new_tokens"), value("max_new_tokens")
    if _is_int(low) and _is_int(high) and low > high:
        raise ValueError(f"`min_new_tokens` ({low}) must not exceed `max_new_tokens` ({high})")
    top_p = value("top_p")
    if top_p is not None and (not _is_number(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"`top_p` must be a float in (0, 1] (1: off), got {top_p!r}")
    for name in ("epsilon_cutoff", "eta_cutoff"):
        v = value(name)
        if v is not None and (not _is_number(v) or not 0.0 <= v < 1.0):
            raise ValueError(f"`{name}` must be a float in [0, 1) (0: off), got {v!r}")
    penalty = value("length_penalty")
    if penalty is not None and not _is_number(penalty):
        raise ValueError(
            f"`length_penalty` must be a number (the exponent of the length a beam's score is divided by), got "
            f"{penalty!r}"
        )
    for name in (*GENERATION_TOKEN_IDS, *GENERATION_FORCED_IDS):
        v = value(name)
        if v is None:
            continue
        ids = _token_ids(v)
        several = name == "eos_token_id"  # several stop tokens are allowed
        if ids is None or (len(ids) != 1 and not several) or not all(0 <= i < vocab_size for i in ids):
            allowed = "an id or a list of ids" if several else "an id"
            raise ValueError(f"`{name}` must be None or {allowed} in [0, vocab_size={vocab_size}), got {v!r}")
    for name in GENERATION_ID_LISTS:
        v = value(name)
        if v is None:
            continue
        ids = _token_ids(v)
        if ids is None or not all(0 <= i < vocab_size for i in ids):
            raise ValueError(f"`{name}` must be a list of ids in [0, vocab_size={vocab_size}), got {v!r}")


def check_generation_inputs(
    generation_config: Any, kwargs: dict, inputs: Any, vocab_size: int, decoder_only: bool
) -> None:
    """ValueError naming the ``generate()`` argument for inputs that decode silently into a wrong answer:

    * an ``attention_mask`` (given, or the one transformers infers from ``pad_token_id``) with a row of zeros: that
      sequence has nothing to attend to (a decoder-only model returns pads, an encoder-decoder model translates
      nothing);
    * a right-padded prompt to a decoder-only model (its last position is padding; one prompt too, where
      transformers warns only for batches): the model would continue after the pads;
    * beam search asked for more ``num_return_sequences`` than distinct sequences exist (``vocab_size`` **
      new tokens): transformers fills the rest with duplicates scored -1e9.

    These run once per ``generate()`` call, before its loop, on every device and with the fast paths on or off (a
    few host reads per call, none per decoding step); a traced call, or one with the value checks off
    (:func:`value_checks_disabled`), skips the mask values."""

    def value(name: str) -> Any:
        return kwargs[name] if name in kwargs else getattr(generation_config, name, None)

    ids = inputs if isinstance(inputs, torch.Tensor) else kwargs.get("input_ids")
    ids = ids if isinstance(ids, torch.Tensor) and ids.dim() == 2 and not ids.is_floating_point() else None
    mask, flag, note = kwargs.get("attention_mask"), "attention_mask", ""
    pad = value("pad_token_id")
    reads = _VALUE_CHECKS.on and not is_tracing()
    if mask is None and ids is not None and _is_int(pad) and ids.numel() and reads:
        if pad not in (_token_ids(value("eos_token_id")) or []) and bool((ids == pad).any()):
            mask, flag = ids != pad, "input_ids"
            note = f" (without an `attention_mask`, its `pad_token_id` {pad} positions are padding)"
    if isinstance(mask, torch.Tensor) and mask.dim() == 2 and mask.numel() and reads:
        attends = mask != 0
        empty = ~attends.any(dim=-1)
        if bool(empty.any()):
            row = int(empty.nonzero()[0, 0])
            raise ValueError(
                f"`{flag}`{note} leaves row {row} of the batch nothing to attend to (all its positions are padding); every "
                "sequence needs at least one position marked 1"
            )
        if decoder_only and not bool(attends[:, -1].all()):
            row = int((~attends[:, -1]).nonzero()[0, 0])
            raise ValueError(
                f"`{flag}`{note} marks the last position of the prompt in row {row} as padding: a decoder-only model would "
                "continue after the pads; pad prompts on the left (tokenizer.padding_side = 'left')"
            )
    wanted, beams = value("num_return_sequences"), value("num_beams")
    if _is_int(wanted) and wanted > 1 and _is_int(beams) and beams > 1 and not value("do_sample"):
        new = value("max_new_tokens")
        if new is None and _is_int(value("max_length")):
            new = value("max_length") - (ids.shape[-1] if decoder_only and ids is not None else 1)
        if _is_int(new) and 0 < new < 64 and vocab_size**new < wanted:
            raise ValueError(
                f"`num_return_sequences` {wanted} is more than the {vocab_size**new} distinct sequences a search of "
                f"{new} new token(s) over vocab_size={vocab_size} can make (the rest would be duplicates scored "
                "-1e9); ask for fewer, or allow more new tokens (`max_new_tokens`)"
            )


def check_generate_call(model: Any, inputs: Any, generation_config: Any, kwargs: dict) -> None:
    """The checks of one ``model.generate(inputs, generation_config, **kwargs)`` call: its arguments
    (:func:`check_generation_arguments`) against the size of the model's output vocabulary and its inputs
    (:func:`check_generation_inputs`: masks, padding, the number of distinct sequences)."""
    head = model.get_output_embeddings()
    vocab_size = getattr(head, "out_features", None) or model.config.vocab_size
    config = generation_config if generation_config is not None else model.generation_config
    check_generation_arguments(config, kwargs, vocab_size)
    decoder_only = not getattr(model.config, "is_encoder_decoder", False)
    check_generation_inputs(config, kwargs, inputs, vocab_size, decoder_only)


__all__ = [
    "IGNORE_INDEX",
    "PROBLEM_TYPES",
    "check_batch_shape",
    "check_bool",
    "check_choice",
    "check_config_keywords",
    "check_divisible",
    "check_fields",
    "check_generate_call",
    "check_generation_arguments",
    "check_generation_inputs",
    "check_integer_labels",
    "check_label_range",
    "check_mask_shape",
    "check_one_input",
    "check_positive_float",
    "check_positive_int",
    "check_probability",
    "check_token_id",
    "check_token_ids",
    "check_token_id_fields",
    "checks_values",
    "disable_value_checks",
    "enable_value_checks",
    "is_tracing",
    "value_checks_disabled",
    "value_checks_enabled",
]
