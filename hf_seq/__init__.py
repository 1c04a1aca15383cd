"""hf_seq: classic sequence models as native Hugging Face models.

Importing the package registers every configuration and model class with the ``Auto*`` classes of
``transformers`` and marks each class for ``register_for_auto_class`` so that ``save_pretrained`` writes the
modelling code and an ``auto_map`` beside the weights (``trust_remote_code=True`` loading without hf_seq). It also
registers the encoder-decoders' ``translation`` and ``text2text-generation`` pipelines with transformers' pipeline
registry (:func:`hf_seq.seq2seq_pipelines.register_pipelines`): ``pipeline(task, model=folder)`` without
``trust_remote_code``.

The package's top holds what a saved model folder carries (the modelling and configuration files and the siblings
they import); the toolkit that trains, feeds, measures and exports them lives in :mod:`hf_seq.toolkit`. The toolkit's
former paths (``hf_seq.data``, ``hf_seq.tokenization``, ``hf_seq.export``, ``hf_seq.metrics``, ...) still import, as
the same module objects, with a ``FutureWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

import transformers
from transformers import AutoConfig

from .compat import (  # first: refuses an unsupported torch or transformers release
    SUPPORTED_RANGE,
    TORCH_SUPPORTED_RANGE,
    UnsupportedTorchError,
    UnsupportedTransformersError,
)

# isort: split
from .attention import ScoreType, register_attention_score
from .configuration_bert import BertConfig, HfSeqBertConfig
from .configuration_rnn import HfSeqRNNConfig, RNNConfig
from .configuration_rnn_seq2seq import HfSeqRNNSeq2SeqConfig, RNNSeq2SeqConfig
from .configuration_transformer import HfSeqTransformerConfig, TransformerConfig
from .modeling_bert import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertPreTrainedModel,
)
from .modeling_rnn import (
    RNNCache,
    RNNForCausalLM,
    RNNForSequenceClassification,
    RNNForTokenClassification,
    RNNModel,
    RNNPreTrainedModel,
)
from .modeling_rnn_seq2seq import (
    RNNDecoderCache,
    RNNSeq2SeqForConditionalGeneration,
    RNNSeq2SeqModel,
    RNNSeq2SeqPreTrainedModel,
)
from .modeling_transformer import (
    TransformerForConditionalGeneration,
    TransformerModel,
    TransformerPreTrainedModel,
)
from .recurrent import CellType, RecurrentStack, register_cell
from .seq2seq_pipelines import register_pipelines
from .toolkit.word_vectors import (
    EmbeddingCoverage,
    WordVectorError,
    WordVectors,
    embedding_matrix,
    init_embeddings_from_vectors,
    load_word_vectors,
)

__version__ = "0.1.0"

# the config classes' former names (BertConfig, RNNConfig, ...) stay importable as aliases
__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForPreTraining",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertPreTrainedModel",
    "CellType",
    "EmbeddingCoverage",
    "HfSeqBertConfig",
    "HfSeqRNNConfig",
    "HfSeqRNNSeq2SeqConfig",
    "HfSeqTransformerConfig",
    "RNNCache",
    "RNNConfig",
    "RNNDecoderCache",
    "RNNForCausalLM",
    "RNNForSequenceClassification",
    "RNNForTokenClassification",
    "RNNModel",
    "RNNPreTrainedModel",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
    "RecurrentStack",
    "SUPPORTED_RANGE",
    "ScoreType",
    "TORCH_SUPPORTED_RANGE",
    "TransformerConfig",
    "TransformerForConditionalGeneration",
    "TransformerModel",
    "TransformerPreTrainedModel",
    "UnsupportedTorchError",
    "UnsupportedTransformersError",
    "WordVectorError",
    "WordVectors",
    "auto_heads",
    "embedding_matrix",
    "init_embeddings_from_vectors",
    "load_word_vectors",
    "register_attention_score",
    "register_cell",
]


_AUTO_HEADS: dict[str, dict[str, type]] = {}


def auto_heads() -> dict[str, dict[str, type]]:
    """``{model_type: {Auto class name: model class}}`` for every head ``import hf_seq`` registered (a copy): e.g.
    ``"AutoModelForCausalLM" in hf_seq.auto_heads()["hf_seq_rnn"]``. transformers has no public query for the models
    registered with an Auto class."""
    return {model_type: dict(heads) for model_type, heads in _AUTO_HEADS.items()}


def _register(config_cls: type, base_cls: type) -> None:
    """Register ``config_cls`` with AutoConfig and every head in ``base_cls._auto_heads`` with its Auto class; mark
    them all for ``register_for_auto_class`` (``save_pretrained`` then writes the code and an ``auto_map``)."""
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    module = sys.modules[base_cls.__module__]
    for auto_name, class_name in base_cls._auto_heads.items():
        model_cls = getattr(module, class_name)
        getattr(transformers, auto_name).register(config_cls, model_cls, exist_ok=True)
        _AUTO_HEADS.setdefault(config_cls.model_type, {})[auto_name] = model_cls
        model_cls.register_for_auto_class(auto_name)


_register(HfSeqRNNConfig, RNNPreTrainedModel)
_register(HfSeqRNNSeq2SeqConfig, RNNSeq2SeqPreTrainedModel)
_register(HfSeqTransformerConfig, TransformerPreTrainedModel)
_register(HfSeqBertConfig, BertPreTrainedModel)
register_pipelines()  # pipeline("translation" | "text2text-generation", model=folder) without trust_remote_code


# the toolkit's modules that sat at the package's top before hf_seq.toolkit: their former names still import
MOVED_TO_TOOLKIT = (
    "checksums",
    "collators",
    "data",
    "data_install",
    "export",
    "metrics",
    "model_card",
    "onnx_runtime",
    "preprocessing",
    "quantization",
    "samplers",
    "tokenization",
    "visualization",
    "word_vectors",
)


def _toolkit_name(fullname: str) -> str | None:
    """``hf_seq.toolkit.<rest>`` for a former name ``hf_seq.<moved>[.<rest>]``, else None."""
    package, _, rest = fullname.partition(".")
    if package != __name__ or rest.partition(".")[0] not in MOVED_TO_TOOLKIT:
        return None
    return f"{__name__}.toolkit.{rest}"


def _warn_moved(old: str, new: str) -> None:
    """The ``FutureWarning`` for a former name, attributed to the line that imported it. ``warnings`` itself skips
    the frames of ``importlib._bootstrap``; this skips the loader's own and ``importlib.import_module``'s."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        if not frame.f_code.co_filename.startswith("<frozen importlib"):
            level += 1
            if frame.f_code.co_filename not in (__file__, importlib.__file__):
                break
        frame = frame.f_back
    warnings.warn(f"{old} moved to {new}: import {new} instead", FutureWarning, stacklevel=level)


class _MovedToToolkit(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a former name (``hf_seq.data``, ``hf_seq.metrics.accuracy``, ...) as the toolkit's module object itself
    (one module, one set of globals, whichever name imported it first), with a ``FutureWarning`` naming the new path."""

    def find_spec(self, fullname, path=None, target=None):
        new = _toolkit_name(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = _toolkit_name(spec.name)
        _warn_moved(spec.name, new)
        return importlib.import_module(new)

    def exec_module(self, module) -> None:
        """The module ran under its new name already."""


if not any(isinstance(finder, _MovedToToolkit) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedToToolkit())


def _from_transformers_bert(cls, model_or_path, output_loading_info: bool = False, **kwargs):
    """Former ``BertPreTrainedModel.from_transformers_bert``: the converter lives in the toolkit now (a saved folder
    does not carry it); this forwards to :func:`hf_seq.toolkit.bert_conversion.from_transformers_bert` with a
    ``FutureWarning``."""
    from .toolkit.bert_conversion import from_transformers_bert

    warnings.warn(
        f"{cls.__name__}.from_transformers_bert moved to hf_seq.toolkit.bert_conversion: use "
        f"from_transformers_bert({cls.__name__}, model_or_path, ...) instead",
        FutureWarning,
        stacklevel=2,
    )
    return from_transformers_bert(cls, model_or_path, output_loading_info=output_loading_info, **kwargs)


BertPreTrainedModel.from_transformers_bert = classmethod(_from_transformers_bert)


def __getattr__(name: str):
    """``hf_seq.data`` (and the other former names) as attributes: the toolkit module, through the warning above."""
    if name in MOVED_TO_TOOLKIT:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
