"""A ``transformers`` BERT checkpoint as an hf_seq BERT: its config mapped field by field, its weights renamed
(``query``/``key``/``value`` fused into ``qkv_proj``).

>>> from hf_seq import BertForSequenceClassification
>>> from hf_seq.toolkit.bert_conversion import from_transformers_bert
>>> model = from_transformers_bert(BertForSequenceClassification, "path/to/transformers-bert", num_labels=2)

The converted model saves with ``save_pretrained`` like any hf_seq model; this module stays home (a saved folder
never carries it).
"""

from __future__ import annotations

import os

import torch
from transformers import PreTrainedModel
from transformers.utils import logging

from ..configuration_bert import HfSeqBertConfig
from ..modeling_bert import BertModel, BertPreTrainedModel

logger = logging.get_logger(__name__)

_LAYER_RENAMES = {
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "self_attn_residual.norm",
    "intermediate.dense": "ffn.fc1",
    "output.dense": "ffn.fc2",
    "output.LayerNorm": "ffn_residual.norm",
}
_OTHER_RENAMES = {
    "bert.embeddings.LayerNorm.": "bert.embeddings.norm.",
    "cls.predictions.transform.LayerNorm.": "cls.predictions.transform.norm.",
    "cls.predictions.bias": "cls.predictions.decoder.bias",
}
_HF_CONFIG_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "initializer_range",
    "pad_token_id",
    "classifier_dropout",
    "tie_word_embeddings",
    "id2label",
    "label2id",
    "problem_type",
)


def _load_transformers_bert(model_or_path) -> PreTrainedModel:
    """A ``transformers`` BERT model object from an object or a saved folder (class from ``config.architectures``)."""
    import transformers

    if isinstance(model_or_path, (str, os.PathLike)):
        hf_config = transformers.AutoConfig.from_pretrained(model_or_path)
        if hf_config.model_type != "bert":
            raise ValueError(
                f"`model_or_path` must be a transformers BERT checkpoint (model_type 'bert'), got model_type "
                f"{hf_config.model_type!r} in {model_or_path}."
            )
        arch = (hf_config.architectures or ["BertModel"])[0]
        model_cls = getattr(transformers, arch, None)
        if model_cls is None or not arch.startswith("Bert"):
            model_cls = transformers.BertModel
        return model_cls.from_pretrained(model_or_path, dtype=torch.float32)
    if isinstance(model_or_path, PreTrainedModel) and getattr(model_or_path.config, "model_type", None) == "bert":
        return model_or_path
    raise ValueError(
        "`model_or_path` must be a transformers BERT model (BertModel, BertForPreTraining, BertForMaskedLM, "
        f"BertForSequenceClassification, ...) or the folder of one, got {type(model_or_path).__name__}."
    )


def convert_transformers_bert_state_dict(state_dict: dict[str, torch.Tensor], num_layers: int) -> dict:
    """Rename a ``transformers`` BERT state dict (keys with the ``bert.`` prefix) into hf_seq names.

    ``query``/``key``/``value`` of each layer are fused row-wise into ``qkv_proj`` (``[W_Q; W_K; W_V]``).
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key.endswith(("position_ids", "token_type_ids")) and "embeddings." in key and "weight" not in key:
            continue  # buffers
        if key == "cls.predictions.decoder.bias" and "cls.predictions.bias" in state_dict:
            continue  # the same tensor as cls.predictions.bias
        new = key
        for old, repl in _OTHER_RENAMES.items():
            if new.startswith(old) or new == old.rstrip("."):
                new = repl + new[len(old) :]
                break
        if new.startswith("bert.encoder.layer."):
            rest = new[len("bert.encoder.layer.") :]
            idx, sub = rest.split(".", 1)
            if sub.startswith("attention.self."):
                continue  # fused below
            for old, repl in _LAYER_RENAMES.items():
                if sub.startswith(old + "."):
                    sub = repl + sub[len(old) :]
                    break
            new = f"bert.encoder.layers.{idx}.{sub}"
        out[new] = value
    for i in range(num_layers):
        prefix = f"bert.encoder.layer.{i}.attention.self."
        for kind in ("weight", "bias"):
            parts = [state_dict.get(f"{prefix}{name}.{kind}") for name in ("query", "key", "value")]
            if all(p is not None for p in parts):
                out[f"bert.encoder.layers.{i}.self_attn.qkv_proj.{kind}"] = torch.cat(parts, dim=0)  # (3H, ...)
    return out


def from_transformers_bert(cls: type[BertPreTrainedModel], model_or_path, output_loading_info: bool = False, **kwargs):
    """Load a ``transformers`` BERT (model object or saved folder) into the hf_seq BERT class ``cls``
    (:class:`~hf_seq.BertModel`, :class:`~hf_seq.BertForPreTraining`, :class:`~hf_seq.BertForMaskedLM`,
    :class:`~hf_seq.BertForSequenceClassification` or :class:`~hf_seq.BertForTokenClassification`).

    The config fields map one-to-one; ``kwargs`` override config values (e.g. ``num_labels=3``). Weights are
    renamed (``query``/``key``/``value`` fused into ``qkv_proj``). Parameters that the source does not have
    (e.g. the classifier when loading a ``BertForPreTraining`` into :class:`BertForSequenceClassification`) keep
    their fresh initialisation and are reported with ``logger.warning``; source weights this class has no place
    for are reported too. With ``output_loading_info=True`` returns ``(model, {"missing_keys": [...],
    "unexpected_keys": [...], "mismatched_keys": [], "error_msgs": []})`` like ``from_pretrained``.
    """
    if not (isinstance(cls, type) and issubclass(cls, BertPreTrainedModel)):
        raise TypeError(f"`cls` must be an hf_seq BERT class (BertModel, BertForMaskedLM, ...), got {cls!r}.")
    source = _load_transformers_bert(model_or_path)
    hf_config = source.config
    if getattr(hf_config, "is_decoder", False):
        raise ValueError("`model_or_path` is a decoder BERT (is_decoder=True); hf_seq BERT is an encoder only.")
    position_type = getattr(hf_config, "position_embedding_type", "absolute")
    if position_type not in (None, "absolute"):
        raise ValueError(f"`position_embedding_type` must be 'absolute', got {position_type!r}.")
    config_kwargs = {name: getattr(hf_config, name) for name in _HF_CONFIG_FIELDS if hasattr(hf_config, name)}
    if config_kwargs.get("id2label") is None:
        config_kwargs.pop("id2label", None)
        config_kwargs.pop("label2id", None)
        config_kwargs["num_labels"] = hf_config.num_labels
    config_kwargs.update(kwargs)
    config = HfSeqBertConfig(**config_kwargs)
    model = cls(config)

    state = source.state_dict()
    if source.base_model_prefix and not any(k.startswith("bert.") for k in state):
        state = {f"bert.{k}": v for k, v in state.items()}  # a bare transformers BertModel
    converted = convert_transformers_bert_state_dict(state, hf_config.num_hidden_layers)
    if isinstance(model, BertModel):
        converted = {k[len("bert.") :]: v for k, v in converted.items() if k.startswith("bert.")}
        unexpected_from_heads = [k for k in state if not k.startswith("bert.")]
    else:
        unexpected_from_heads = []
    target = model.state_dict()
    tied = set(model.all_tied_weights_keys) if config.tie_word_embeddings else set()
    missing = sorted(k for k in target if k not in converted and k not in tied)
    unexpected = sorted(set(unexpected_from_heads) | {k for k in converted if k not in target})
    mismatched = [
        (k, tuple(v.shape), tuple(target[k].shape))
        for k, v in converted.items()
        if k in target and v.shape != target[k].shape
    ]
    if mismatched:
        raise ValueError(f"`model_or_path` has weights whose shapes do not match the config: {mismatched}")
    to_load = {k: v for k, v in converted.items() if k in target and k not in tied}
    model.load_state_dict(to_load, strict=False)
    model.tie_weights()
    if missing:
        logger.warning(
            f"Some weights of {cls.__name__} were not in the transformers checkpoint "
            f"({type(source).__name__}) and are newly initialized: {missing}. Train this model on a down-stream "
            "task to use it for predictions."
        )
    if unexpected:
        logger.warning(
            f"Some weights of the transformers checkpoint ({type(source).__name__}) were not used when "
            f"initializing {cls.__name__}: {unexpected}."
        )
    model.eval()
    if output_loading_info:
        info = {"missing_keys": missing, "unexpected_keys": unexpected, "mismatched_keys": [], "error_msgs": []}
        return model, info
    return model


__all__ = ["convert_transformers_bert_state_dict", "from_transformers_bert"]
