"""hf_seq: classic sequence models as native Hugging Face models.

Importing the package registers every configuration and model class with the ``Auto*`` classes of
``transformers`` and marks each class for ``register_for_auto_class`` so that ``save_pretrained`` writes the
modelling code and an ``auto_map`` beside the weights (``trust_remote_code=True`` loading without hf_seq). It also
registers the encoder-decoders' ``translation`` and ``text2text-generation`` pipelines with transformers' pipeline
registry (:func:`hf_seq.seq2seq_pipelines.register_pipelines`): ``pipeline(task, model=folder)`` without
``trust_remote_code``.

The package's top holds what a saved model folder carries (the modelling and configuration files and the siblings
they import); the toolkit that trains, feeds, measures and exports them lives in :mod:`hf_seq.toolkit`.
"""

from __future__ import annotations

import sys

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
from .configuration_bert import HfSeqBertConfig
from .configuration_rnn import HfSeqRNNConfig
from .configuration_rnn_seq2seq import HfSeqRNNSeq2SeqConfig
from .configuration_transformer import HfSeqTransformerConfig
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

__all__ = [
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
    "RNNDecoderCache",
    "RNNForCausalLM",
    "RNNForSequenceClassification",
    "RNNForTokenClassification",
    "RNNModel",
    "RNNPreTrainedModel",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
    "RecurrentStack",
    "SUPPORTED_RANGE",
    "ScoreType",
    "TORCH_SUPPORTED_RANGE",
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
