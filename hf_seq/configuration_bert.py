"""Configuration of the BERT family (``model_type="hf_seq_bert"``), with ``transformers``' BERT field names."""

from __future__ import annotations

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from .compat import check_transformers_version  # noqa: F401  (importing .compat refuses an unsupported release)
from .fast_paths import reads_values  # noqa: F401  (validation.py imports it; 5.0–5.6 copy only these siblings)
from .validation import (
    PROBLEM_TYPES,
    check_choice,
    check_config_keywords,
    check_divisible,
    check_fields,
    check_token_id,
    check_token_id_fields,
)

CLASSIFIER_POOLINGS = ("cls", "mean")


class HfSeqBertConfig(PretrainedConfig):
    r"""Configuration of the hf_seq BERT models (``BertModel``, ``BertForPreTraining``, ``BertForMaskedLM``,
    ``BertForSequenceClassification``, ``BertForTokenClassification``).

    The field names are those of ``transformers.BertConfig``, so a real BERT config maps one-to-one
    (see ``hf_seq.toolkit.bert_conversion``). The encoder is the project's post-LN :class:`~.blocks.TransformerEncoderBlock`.

    Args:
        vocab_size: rows of the word-piece embedding table (and columns of the masked-LM decoder).
        hidden_size: model width ``d``.
        num_hidden_layers: number of encoder blocks.
        num_attention_heads: heads per self-attention layer; must divide ``hidden_size``.
        intermediate_size: inner width of the position-wise feed-forward network.
        hidden_act: activation of the feed-forward network and of the masked-LM transform (a key of
            ``transformers.activations.ACT2FN``, e.g. "gelu").
        hidden_dropout_prob: dropout on embeddings and on every sub-layer output.
        attention_probs_dropout_prob: dropout on the attention weights.
        max_position_embeddings: rows of the learned position table (the longest accepted sequence).
        type_vocab_size: number of segment ids (2: sentence A / sentence B).
        layer_norm_eps: LayerNorm epsilon.
        initializer_range: std of the normal initialisation of all weight matrices.
        pad_token_id: id of [PAD] (its word embedding row starts at zero).
        classifier_dropout: dropout before the classification heads (None: ``hidden_dropout_prob``).
        classifier_pooling: the vector :class:`~.modeling_bert.BertForSequenceClassification` classifies, as in
            ``transformers``' ModernBERT: "cls" (default, BERT's own: the ``[CLS]`` state) or "mean" (the mean of the
            last hidden states over the real tokens of ``attention_mask``). Either goes through the pooler
            (dense + tanh), dropout and the classifier. "mean" suits checkpoints trained as sentence encoders with
            mean pooling (sentence-transformers models such as all-MiniLM-L6-v2), whose ``[CLS]`` state was not
            trained to summarise the sentence.
        sparse_prediction: when masked-LM ``labels`` are given, compute the vocabulary logits only at the labelled
            positions (as ``transformers``' ModernBERT does): ``logits`` is then ``(num_labelled, vocab_size)``
            instead of ``(B, T, vocab_size)``. Saves most of the decoder's compute during pretraining; default False
            (the standard dense output).
        tie_word_embeddings: tie the masked-LM decoder to the word embeddings (BERT does).
        num_labels / id2label / label2id / problem_type: as in every ``transformers`` classifier.
    """

    model_type = "hf_seq_bert"

    def __init__(
        self,
        vocab_size: int = 30522,
        hidden_size: int = 768,
        num_hidden_layers: int = 12,
        num_attention_heads: int = 12,
        intermediate_size: int = 3072,
        hidden_act: str = "gelu",
        hidden_dropout_prob: float = 0.1,
        attention_probs_dropout_prob: float = 0.1,
        max_position_embeddings: int = 512,
        type_vocab_size: int = 2,
        layer_norm_eps: float = 1e-12,
        initializer_range: float = 0.02,
        pad_token_id: int | None = 0,
        classifier_dropout: float | None = None,
        classifier_pooling: str = "cls",
        sparse_prediction: bool = False,
        tie_word_embeddings: bool = True,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.pad_token_id = pad_token_id
        self.classifier_dropout = classifier_dropout
        self.classifier_pooling = classifier_pooling
        self.sparse_prediction = sparse_prediction
        self.tie_word_embeddings = tie_word_embeddings
        self._validate_bert_fields()  # before transformers' own checks, which would trip over e.g. vocab_size="20"
        check_config_keywords(self, kwargs)  # a misspelt field is an error, an unknown keyword a warning
        super().__init__(**kwargs)
        self.validate_bert_config()

    def validate_bert_config(self) -> None:
        """Raise ``ValueError`` naming the field and the allowed values for any invalid setting."""
        self._validate_bert_fields()
        check_token_id_fields(self, self.vocab_size)  # pad, bos, eos, sep, cls, mask, ... within the vocabulary
        check_fields(self, positive_int="num_labels")
        check_choice("problem_type", self.problem_type, PROBLEM_TYPES)

    def _validate_bert_fields(self) -> None:
        """The fields this class defines (everything but the special token ids and the classifier fields)."""
        check_fields(
            self,
            positive_int="vocab_size hidden_size num_hidden_layers num_attention_heads intermediate_size "
            "max_position_embeddings type_vocab_size",
        )
        check_divisible(self, "hidden_size", "num_attention_heads")
        check_choice("hidden_act", self.hidden_act, sorted(ACT2FN))
        check_fields(self, probability="hidden_dropout_prob attention_probs_dropout_prob")
        if self.classifier_dropout is not None:
            check_fields(self, probability="classifier_dropout")
        check_choice("classifier_pooling", self.classifier_pooling, CLASSIFIER_POOLINGS)
        check_fields(self, positive_float="layer_norm_eps initializer_range")
        check_token_id("pad_token_id", self.pad_token_id, self.vocab_size)
        check_fields(self, bool="sparse_prediction tie_word_embeddings")


# the former name, for folders saved before the rename: their auto_map says "configuration_bert.BertConfig"
BertConfig = HfSeqBertConfig

__all__ = ["HfSeqBertConfig", "BertConfig"]
