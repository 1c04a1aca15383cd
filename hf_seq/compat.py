"""Everything that differs between the transformers releases hf_seq supports, in one place.

Supported: ``transformers>=5.0,<6`` (:data:`SUPPORTED_RANGE`, as in pyproject.toml); docs/compat.md lists the releases
the test suite runs on. A modelling or configuration file imports what it needs from here relatively
(``from .compat import ...``), so this file is copied beside the weights by ``save_pretrained`` and a folder loaded with
``trust_remote_code=True`` adapts to the release of whoever loads it.

What differs, and what this module gives instead:

* **torch below 2.11** (:data:`TORCH_SUPPORTED_RANGE`, as in pyproject.toml; 2.11 is the oldest release the
  compatibility matrix runs in full, docs/compat.md): importing this module raises :class:`UnsupportedTorchError`,
  naming the installed torch and the supported range.
* **Below 5.0** (4.57.6, the last 4.x, has no ``transformers.initialization`` and none of 5.0's cache and output
  classes): importing this module — first thing ``import hf_seq`` and every folder's configuration file do — raises
  :class:`UnsupportedTransformersError`, naming the installed release and the supported range.
* **The cache's name**: 5.24 passes the generation cache to ``forward`` as ``cache=`` and its output classes have a
  ``cache`` field; up to 5.23 both are ``past_key_values`` (a 5.23 output class given ``cache=`` is a ``TypeError``, and
  a 5.24 ``generate()`` never passes ``past_key_values``). Models here take ``cache`` (decorate ``forward`` with
  :func:`cache_argument`, which accepts the release's other name too), build outputs with ``**cache_output(cache)``
  and read an output's cache with :func:`output_cache`. :data:`CACHE_NAME` is the release's name.
* **Saving the code**: 5.0 has no ``PreTrainedModel.is_remote_code()`` (:func:`registered_for_auto_class`).
* **Output capturing** (``hidden_states`` / ``attentions`` / ``cross_attentions`` recorded from the layers that
  ``_can_record_outputs`` names): the decorator is ``transformers.utils.output_capturing.capture_outputs`` (forward
  hooks) in 5.24, ``transformers.utils.generic.check_model_inputs`` (forward wrappers) in 5.0; :func:`capture_outputs`
  is the release's. Both look the recorders up by class in a registry that ``PreTrainedModel.__init__`` fills, so
  every module whose forward it decorates is a ``PreTrainedModel`` with its ``_can_record_outputs`` (the
  Transformer's encoder and decoder too, as transformers' Marian builds them).
* **Continuing from a recurrent state**: up to 5.24 ``generate()``'s ``_prefill`` cuts the part of the input a cache
  has read only for key/value caches (``not all(cache.is_linear)``); from 5.25 on it cuts it for every cache, the
  ``inputs_embeds`` of a decoder-only prompt included (:data:`PREFILL_CUTS_EVERY_CACHE`, read by
  ``modeling_utils.RecurrentStatePrefillMixin``, which cuts what the release leaves uncut).
* **Assisted and prompt-lookup decoding of a recurrent model**: up to 5.24 ``generate()`` refuses them for a model
  with ``_is_stateful = True`` ("assisted generation is not supported with stateful models"); 5.25 has no
  ``_is_stateful`` and fails with "Assisted decoding requires a cache" (a ``RuntimeError``) for a model whose cache
  its first forward creates. The recurrent heads refuse them in ``generate()`` itself, on every release, with the
  first message (``modeling_utils.refuse_assisted_generation``).
* **Trainer's label smoother** shifts labels only for class names in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``, which no
  public API extends (:func:`shift_labels_when_smoothing`).

Two helpers some releases lack are not used at all (the models stay on what every supported release has):
``merge_with_config_defaults`` (absent in 5.0; ``use_cache`` defaults are read from the config in ``forward``), and
the remote-code loader of 5.0–5.6 copies into its module cache only the sibling files that the loaded file imports
DIRECTLY, so every modelling and configuration file imports directly every sibling its siblings import
(tests/test_compat.py checks this).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import transformers
from packaging.version import Version

SUPPORTED_RANGE = ">=5.0,<6"
MINIMUM_VERSION = "5.0.0"
TRANSFORMERS_VERSION = transformers.__version__
# torch: a lower bound only (any newer release, CPU or CUDA build); docs/compat.md has the torch x transformers table
TORCH_SUPPORTED_RANGE = ">=2.11"
TORCH_MINIMUM_VERSION = "2.11.0"
TORCH_VERSION = torch.__version__


class UnsupportedTorchError(ImportError):
    """The installed torch release is below :data:`TORCH_SUPPORTED_RANGE`."""


def check_torch_version(version: str = TORCH_VERSION) -> None:
    """Raise :class:`UnsupportedTorchError` when ``version`` is below :data:`TORCH_MINIMUM_VERSION` (a local build
    label such as ``+cpu`` or a pre-release of a supported release counts as that release)."""
    if Version(version).release < Version(TORCH_MINIMUM_VERSION).release:
        raise UnsupportedTorchError(
            f"hf_seq needs torch{TORCH_SUPPORTED_RANGE}, but torch {version} is installed: upgrade it "
            f"(pip install 'torch{TORCH_SUPPORTED_RANGE}') to use hf_seq or to load a model folder saved by hf_seq."
        )


class UnsupportedTransformersError(ImportError):
    """The installed transformers release is outside :data:`SUPPORTED_RANGE`."""


def check_transformers_version(version: str = TRANSFORMERS_VERSION) -> None:
    """Raise :class:`UnsupportedTransformersError` when ``version`` is below :data:`MINIMUM_VERSION`."""
    if Version(version).release < Version(MINIMUM_VERSION).release:
        raise UnsupportedTransformersError(
            f"hf_seq needs transformers{SUPPORTED_RANGE}, but transformers {version} is installed: upgrade it "
            f"(pip install 'transformers{SUPPORTED_RANGE}') to use hf_seq or to load a model folder saved by hf_seq."
        )


check_torch_version()
check_transformers_version()

from transformers import initialization as init  # noqa: E402  (5.0+; the version check must come first)
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402
from transformers.utils.deprecation import deprecate_kwarg  # noqa: E402

try:  # 5.24: hooks
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # 5.0: forward wrappers, same recorder specification and options
    from transformers.utils.generic import OutputRecorder  # noqa: E402
    from transformers.utils.generic import check_model_inputs as capture_outputs  # noqa: E402

# where `output_hidden_states` may select layers by index, the recorder names the config field that counts them (for
# negative indices); a release without the field records every layer
_RECORDER_FIELDS = {f.name for f in dataclasses.fields(OutputRecorder)}


def hidden_states_recorder(target_class: type, num_hidden_layers_key: str, **options) -> OutputRecorder:
    """The ``_can_record_outputs["hidden_states"]`` recorder of ``target_class``'s outputs (``options``: the other
    fields, e.g. ``layer_name``), its layer count read from ``config.<num_hidden_layers_key>`` on the releases whose
    recorder has that field."""
    if "num_hidden_layers_key" in _RECORDER_FIELDS:
        options["num_hidden_layers_key"] = num_hidden_layers_key
    return OutputRecorder(target_class, **options)


# 5.25 on: generate()'s prefill cuts what a cache has read from the input for every cache, recurrent states included
PREFILL_CUTS_EVERY_CACHE = Version(TRANSFORMERS_VERSION).release >= (5, 25)

# "cache" from 5.24 on, "past_key_values" before: the name of generate()'s cache argument and output field
CACHE_NAME = "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithPast)} else "past_key_values"


def cache_output(cache) -> dict:
    """``{field: cache}`` for a transformers output class: ``Seq2SeqLMOutput(logits=..., **cache_output(cache))``."""
    return {CACHE_NAME: cache}


def output_cache(output):
    """The cache of a transformers output object, whatever the release calls the field."""
    return getattr(output, CACHE_NAME)


def cache_argument(forward):
    """Decorate a ``forward(..., cache=None, ...)``: it also takes the cache as ``past_key_values=`` — the name generate()
    uses up to 5.23 (taken silently there), deprecated from 5.24 on (taken with transformers' deprecation warning)."""
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")(forward)

    @functools.wraps(forward)
    def wrapper(*args, **kwargs):
        if "past_key_values" in kwargs:
            past = kwargs.pop("past_key_values")
            if kwargs.get("cache") is not None and past is not None:
                raise ValueError("Pass the cache once: as `cache=` or as `past_key_values=`, not both")
            kwargs["cache"] = past if past is not None else kwargs.get("cache")
        return forward(*args, **kwargs)

    return wrapper


def shift_labels_when_smoothing(model_type: str, class_name: str) -> None:
    """Make ``Trainer(label_smoothing_factor=...)`` shift the labels of the causal LM ``class_name`` (position t
    predicts token t+1), as it does for transformers' own causal LMs.

    ``Trainer.compute_loss`` (every release of the range) shifts only for models whose class name is a value of
    ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``; ``AutoModelForCausalLM.register`` does not add a custom model there, and no
    other public API does. Without the entry, smoothing would train the LM to copy its input. The entry is keyed by
    hf_seq's own ``model_type``, which no transformers config uses, so no Auto class ever resolves it.
    """
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.setdefault(model_type, class_name)


def registered_for_auto_class(model) -> bool:
    """Whether ``model``'s class saves its modelling code (``register_for_auto_class``, or loaded as remote code):
    ``PreTrainedModel.is_remote_code()`` from 5.x releases after 5.0; 5.0 has no such method, only the ``_auto_class``
    that ``register_for_auto_class`` sets (and ``is_remote_code`` reads) in every release."""
    return getattr(type(model), "_auto_class", None) is not None


__all__ = [
    "CACHE_NAME",
    "MINIMUM_VERSION",
    "PREFILL_CUTS_EVERY_CACHE",
    "SUPPORTED_RANGE",
    "TRANSFORMERS_VERSION",
    "UnsupportedTransformersError",
    "cache_argument",
    "OutputRecorder",
    "cache_output",
    "capture_outputs",
    "check_transformers_version",
    "hidden_states_recorder",
    "init",
    "output_cache",
    "registered_for_auto_class",
    "shift_labels_when_smoothing",
]
