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
  is the release's. Both look the recorders up by class in a registry that ``PreTrainedModel.__init__`` fills; a
  plain ``nn.Module`` stack with its own recorders (the Transformer's encoder and decoder) adds itself with
  :func:`register_output_recorders`. The decorator here also refuses a mistyped keyword argument
  (:func:`check_keyword_arguments`), which ``**kwargs: Unpack[TransformersKwargs]`` alone would take silently.
* **Continuing from a recurrent state**: up to 5.24 ``generate()``'s ``_prefill`` cuts the part of the input a cache
  has read only for key/value caches (``not all(cache.is_linear)``); from 5.25 on it cuts it for every cache, the
  ``inputs_embeds`` of a decoder-only prompt included (:data:`PREFILL_CUTS_EVERY_CACHE`, read by
  ``modeling_utils.RecurrentStateGenerationMixin``, which cuts what the release leaves uncut).
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
import difflib
import functools
import inspect

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
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402
from transformers.utils import TransformersKwargs  # noqa: E402
from transformers.utils.deprecation import deprecate_kwarg  # noqa: E402

try:  # 5.24: hooks
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY, OutputRecorder
    from transformers.utils.output_capturing import capture_outputs as _release_capture_outputs
except ImportError:  # 5.0: forward wrappers, same recorder specification
    from transformers.utils.generic import _CAN_RECORD_REGISTRY, OutputRecorder  # noqa: E402
    from transformers.utils.generic import check_model_inputs as _release_capture_outputs  # noqa: E402

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
    """The parameters of ``function`` that a call can name (not ``self``, ``*args`` or ``**kwargs``)."""
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
    """Raise ``TypeError`` naming a keyword in ``given`` that ``module``'s ``forward`` (undecorated; ``named`` are its
    parameters) does not take and transformers does not pass: ``**kwargs: Unpack[TransformersKwargs]`` alone would
    take a mistyped name (``output_hiden_states=True``) silently.

    Accepted besides ``named``: :data:`TRANSFORMERS_KEYWORDS` and the keyword parameters of the config's attention
    function. (Not ``output_cross_attentions``: the capturing decorator records cross-attentions with
    ``output_attentions`` and reads no other flag for them.)"""
    unknown = given - named - TRANSFORMERS_KEYWORDS
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


def capture_outputs(func=None, **options):
    """The release's output-capturing decorator (``capture_outputs`` / ``check_model_inputs``, same options), which
    also refuses a keyword argument that neither ``func`` nor transformers takes (:func:`check_keyword_arguments`):
    ``@capture_outputs`` or ``@capture_outputs(tie_last_hidden_states=False)``."""

    def decorate(forward):
        captured = _release_capture_outputs(**options)(forward) if options else _release_capture_outputs(forward)
        named = _named_parameters(forward)
        accepted = named | TRANSFORMERS_KEYWORDS

        @functools.wraps(captured)
        def wrapper(self, *args, **kwargs):
            # a loop, not `kwargs.keys() - accepted`: torch.compile of torch 2.11 cannot trace a set difference of
            # dict keys (InternalTorchDynamoError), and a compiled model runs this on every call
            for key in kwargs:
                if key not in accepted:
                    check_keyword_arguments(self, forward, named, kwargs.keys())
                    break
            return captured(self, *args, **kwargs)

        return wrapper

    return decorate(func) if func is not None else decorate


def register_output_recorders(module) -> None:
    """Let :func:`capture_outputs` decorate ``module.forward`` for an ``nn.Module`` that is not a ``PreTrainedModel``
    (which registers itself): adds ``type(module)._can_record_outputs`` to transformers' recorder registry, keyed by
    the class's name as ``PreTrainedModel.__init__`` keys it in every release of the range. ``module`` needs a
    ``config`` attribute (the decorator reads the output flags' defaults there)."""
    dict.__setitem__(_CAN_RECORD_REGISTRY, str(type(module)), type(module)._can_record_outputs)


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
    "check_keyword_arguments",
    "check_transformers_version",
    "init",
    "output_cache",
    "register_output_recorders",
    "registered_for_auto_class",
    "shift_labels_when_smoothing",
    "TRANSFORMERS_KEYWORDS",
]
