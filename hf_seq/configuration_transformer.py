"""Configuration of the Transformer encoder-decoder family (``model_type="hf_seq_transformer"``)."""

from __future__ import annotations

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from .compat import check_transformers_version  # noqa: F401  (importing .compat refuses an unsupported release)
from .fast_paths import reads_values  # noqa: F401  (validation.py imports it; 5.0–5.6 copy only these siblings)
from .pipeline_tasks import DeclaredPipelinesMixin
from .validation import (
    check_bool,
    check_choice,
    check_config_keywords,
    check_divisible,
    check_fields,
    check_token_id_fields,
)

NORM_POSITIONS = ("post", "pre")
POSITION_EMBEDDINGS = ("sinusoidal", "learned")


class HfSeqTransformerConfig(DeclaredPipelinesMixin, PretrainedConfig):
    r"""Configuration of the hf_seq Transformer (``TransformerModel``, ``TransformerForConditionalGeneration``).

    The encoder-decoder of "Attention Is All You Need": ``encoder_layers`` blocks of self-attention + feed-forward,
    ``decoder_layers`` blocks of masked self-attention + cross-attention + feed-forward, each sub-layer wrapped in
    residual + LayerNorm, then a linear layer + softmax over one (joint source/target) vocabulary.

    Args:
        vocab_size: rows of the token embedding tables and columns of the output projection.
        hidden_size: model width (the paper's ``d_model``).
        encoder_layers / decoder_layers: number of encoder / decoder blocks (``num_hidden_layers`` reads and sets
            ``decoder_layers``: the layers a generation cache holds).
        num_attention_heads: heads per attention layer; must divide ``hidden_size``.
        intermediate_size: inner width of the position-wise feed-forward network (the paper's ``d_ff``).
        dropout: dropout on the (token + position) embeddings and on every sub-layer output.
        attention_dropout: dropout on the attention weights.
        activation_dropout: dropout after the feed-forward activation.
        activation_function: feed-forward activation (a key of ``transformers.activations.ACT2FN``: "relu", "gelu", ...).
        norm_position: "post" (the paper's ``LayerNorm(x + Sublayer(x))``, default) or "pre"
            (``x + Sublayer(LayerNorm(x))`` with a final LayerNorm after each stack).
        position_embedding: "sinusoidal" (the paper's fixed table) or "learned" (a trained table).
        max_position_embeddings: rows of the position table = the longest accepted source or target sequence (for
            both kinds; longer inputs raise ``ValueError``).
        scale_embedding: multiply token embeddings by ``sqrt(hidden_size)`` (the paper does).
        tie_word_embeddings: share one matrix between the source embedding, the target embedding and the output
            projection (the paper does; needs a joint vocabulary).
        layer_norm_eps: LayerNorm epsilon.
        initializer_range: standard deviation of the normal initialisation ``N(0, initializer_range²)`` of the linear
            layers, as in transformers (token embeddings use ``hidden_size ** -0.5`` when ``scale_embedding`` is set,
            so that scaled embeddings have unit variance).

    Field names follow transformers' BERT names where the concept is the same as in ``HfSeqBertConfig``. The former
    names ``d_model``, ``attention_heads``, ``ffn_dim`` and ``init_std`` are accepted by the constructor and in a
    config.json, and read and set the current fields (``renamed_fields``); a saved config has the current names only.
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids (the decoder starts
            from ``decoder_start_token_id``; labels are shifted right behind it).
        use_cache: return an ``EncoderDecoderCache`` for incremental decoding.
    """

    model_type = "hf_seq_transformer"
    # former field names -> current ones: accepted by the constructor and in config.json, never saved
    renamed_fields = {
        "d_model": "hidden_size",
        "attention_heads": "num_attention_heads",
        "ffn_dim": "intermediate_size",
        "init_std": "initializer_range",
    }
    attribute_map = {"num_hidden_layers": "decoder_layers", **renamed_fields}

    def __init__(
        self,
        vocab_size: int = 8000,
        hidden_size: int = 512,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        num_attention_heads: int = 8,
        intermediate_size: int = 2048,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation_function: str = "relu",
        norm_position: str = "post",
        position_embedding: str = "sinusoidal",
        max_position_embeddings: int = 512,
        scale_embedding: bool = True,
        tie_word_embeddings: bool = True,
        layer_norm_eps: float = 1e-5,
        initializer_range: float = 0.02,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 2,
        eos_token_id: int | None = 3,
        decoder_start_token_id: int | None = 2,
        use_cache: bool = True,
        is_encoder_decoder: bool = True,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.activation_function = activation_function
        self.norm_position = norm_position
        self.position_embedding = position_embedding
        self.max_position_embeddings = max_position_embeddings
        self.scale_embedding = scale_embedding
        self.layer_norm_eps = layer_norm_eps
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.decoder_start_token_id = decoder_start_token_id
        self.tie_word_embeddings = tie_word_embeddings
        check_config_keywords(self, kwargs)  # former names taken; misspelt field: error, unknown keyword: warning
        self._validate_transformer_fields()  # before transformers' own checks, which would trip over vocab_size="20"
        super().__init__(is_encoder_decoder=is_encoder_decoder, **kwargs)
        self.validate_transformer_config()

    def validate_transformer_config(self) -> None:
        """Raise ``ValueError`` naming the field and the allowed values for any invalid setting."""
        self._validate_transformer_fields()
        check_bool("is_encoder_decoder", self.is_encoder_decoder)
        if not self.is_encoder_decoder:
            raise ValueError("`is_encoder_decoder` must be True for the Transformer encoder-decoder")
        check_token_id_fields(self, self.vocab_size)  # pad, bos, eos, decoder_start, sep, ... within the vocabulary

    def _validate_transformer_fields(self) -> None:
        """The fields this class defines (everything but ``is_encoder_decoder`` and the special token ids)."""
        check_fields(
            self,
            positive_int="vocab_size hidden_size encoder_layers decoder_layers num_attention_heads intermediate_size "
            "max_position_embeddings",
        )
        check_divisible(self, "hidden_size", "num_attention_heads")
        check_fields(self, probability="dropout attention_dropout activation_dropout")
        check_choice("activation_function", self.activation_function, sorted(ACT2FN))
        check_choice("norm_position", self.norm_position, NORM_POSITIONS)
        check_choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        check_fields(
            self,
            positive_float="layer_norm_eps initializer_range",
            bool="scale_embedding tie_word_embeddings use_cache",
        )


# the former name, for folders saved before the rename: their auto_map says "configuration_transformer.TransformerConfig"
TransformerConfig = HfSeqTransformerConfig

__all__ = ["HfSeqTransformerConfig", "TransformerConfig"]
