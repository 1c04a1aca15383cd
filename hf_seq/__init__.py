"""hf_seq: classic sequence models as native Hugging Face models.

Importing the package registers every configuration and model class with the ``Auto*`` classes of
``transformers`` and marks each class for ``register_for_auto_class`` so that ``save_pretrained`` writes the
modelling code and an ``auto_map`` beside the weights (``trust_remote_code=True`` loading).
"""

from __future__ import annotations

import transformers
from transformers import AutoConfig

__version__ = "0.1.0"


def _register(config_cls: type, heads: dict[str, type]) -> None:
    """Register ``config_cls`` with AutoConfig and each model class with the named ``transformers`` Auto class."""
    AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
    config_cls.register_for_auto_class()
    for auto_name, model_cls in heads.items():
        getattr(transformers, auto_name).register(config_cls, model_cls, exist_ok=True)
        model_cls.register_for_auto_class(auto_name)


# --- family: rnn (classifier, tagger, causal LM) ---
from .configuration_rnn import RNNConfig  # noqa: E402
from .modeling_rnn import (  # noqa: E402, F401
    RNNCache,
    RNNForCausalLM,
    RNNForSequenceClassification,
    RNNForTokenClassification,
    RNNModel,
    RNNPreTrainedModel,
)
from .recurrent import CellType, RecurrentStack, register_cell  # noqa: E402, F401

_register(
    RNNConfig,
    {
        "AutoModel": RNNModel,
        "AutoModelForSequenceClassification": RNNForSequenceClassification,
        "AutoModelForTokenClassification": RNNForTokenClassification,
        "AutoModelForCausalLM": RNNForCausalLM,
    },
)

# --- family: rnn_seq2seq ---
from .configuration_rnn_seq2seq import RNNSeq2SeqConfig  # noqa: E402
from .modeling_rnn_seq2seq import (  # noqa: E402, F401
    RNNDecoderCache,
    RNNSeq2SeqForConditionalGeneration,
    RNNSeq2SeqModel,
    RNNSeq2SeqPreTrainedModel,
)

_register(
    RNNSeq2SeqConfig,
    {"AutoModel": RNNSeq2SeqModel, "AutoModelForSeq2SeqLM": RNNSeq2SeqForConditionalGeneration},
)

# --- family: transformer ---
from .configuration_transformer import TransformerConfig  # noqa: E402
from .modeling_transformer import (  # noqa: E402
    TransformerForConditionalGeneration,
    TransformerModel,
    TransformerPreTrainedModel,
)

_register(
    TransformerConfig,
    {"AutoModel": TransformerModel, "AutoModelForSeq2SeqLM": TransformerForConditionalGeneration},
)

# --- family: bert ---
from .configuration_bert import BertConfig  # noqa: E402
from .modeling_bert import (  # noqa: E402, F401
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    BertPreTrainedModel,
)

_register(
    BertConfig,
    {
        "AutoModel": BertModel,
        "AutoModelForPreTraining": BertForPreTraining,
        "AutoModelForMaskedLM": BertForMaskedLM,
        "AutoModelForSequenceClassification": BertForSequenceClassification,
        "AutoModelForTokenClassification": BertForTokenClassification,
    },
)
