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

# --- family: rnn_seq2seq ---

# --- family: transformer ---

# --- family: bert ---
