"""Configuration of the RNN encoder-decoder family (``model_type="hf_seq_rnn_seq2seq"``), with or without attention."""

from __future__ import annotations

from transformers import PretrainedConfig

from .attention import SCORE_FUNCTIONS, SCORE_TYPES
from .compat import check_transformers_version  # noqa: F401  (importing .compat refuses an unsupported release)
from .fast_paths import reads_values  # noqa: F401  (validation.py imports it; 5.0–5.6 copy only these siblings)
from .pipeline_tasks import DeclaredPipelinesMixin
from .recurrent import CELL_TYPES, IMPLEMENTATIONS
from .recurrent_cells import lstm_step  # noqa: F401  (recurrent.py imports the cells and the kernels:
from .recurrent_kernels import choose_kernel  # noqa: F401  5.0–5.6 copy only the siblings imported here)
from .validation import (
    check_choice,
    check_config_keywords,
    check_fields,
    check_positive_int,
    check_token_id,
)

# the built-in values of `attention`; any score registered with hf_seq.register_attention_score is allowed too
ATTENTION_TYPES = ("none", *SCORE_FUNCTIONS)


def attention_choices() -> list[str]:
    """The values ``attention`` may take now: ``"none"`` and every registered score type."""
    return ["none", *SCORE_TYPES]


def cell_choices() -> list[str]:
    """The values ``cell`` may take now: every registered cell whose state is a fixed-size tuple of
    ``(layers, batch, hidden)`` tensors (the bridge maps each encoder state to the decoder's). A cell whose state
    grows with every token read (the self-attention LSTM's tape) cannot start a decoder."""
    return [name for name, cell_type in CELL_TYPES.items() if cell_type.has_fixed_size_state]


class HfSeqRNNSeq2SeqConfig(DeclaredPipelinesMixin, PretrainedConfig):
    r"""Configuration of ``RNNSeq2SeqModel`` / ``RNNSeq2SeqForConditionalGeneration``.

    The notes' two translators are values of this config:

    * ``attention="none"`` — plain seq2seq: the encoder's final state (``(h, c)`` for an LSTM) initialises the
      decoder and is the only link between the two RNNs;
    * ``attention="dot" | "scaled_dot" | "general" | "additive" | "cosine"`` — at every decoder step the state
      ``s_j`` scores all encoder states (padding masked), the weights give the context ``c_j``, the next state is
      computed from ``[x'_j; s_{j-1}; c_{j-1}]`` and the output from ``tanh(W_c [s_j; c_j])``.

    Args:
        vocab_size: size of the vocabulary shared by source and target (one tokenizer for both languages).
        embedding_size: word vector size (also the size of the output layer's input, so the output projection can
            share the embedding matrix).
        hidden_size: recurrent state size of encoder and decoder (per direction for the encoder).
        encoder_layers / decoder_layers: stacked recurrent layers. Decoder layer ``k`` (counted from the top) is
            initialised from encoder layer ``k`` from the top; extra lower decoder layers get the lowest used one.
            ``num_hidden_layers`` is an alias of ``decoder_layers``: the layers whose state a generation cache holds
            (as ``HfSeqTransformerConfig.num_hidden_layers``; reading and setting it reads and sets ``decoder_layers``).
        cell: "rnn" (SimpleRNN), "lstm", "gru" (encoder and decoder), or a cell added with
            ``hf_seq.register_cell`` whose state is a fixed number of ``(layers, batch, hidden)`` tensors (not the
            self-attention LSTM, whose state is a tape of every token read).
        bidirectional: the encoder reads the source in both directions (the decoder generates left to right); the
            two final states of each layer are concatenated and mapped to ``hidden_size`` by a learned bridge
            (``tanh`` for ``h``, linear for ``c``). The same field as ``HfSeqRNNConfig.bidirectional`` (former name:
            ``bidirectional_encoder``).
        attention: "none" or a registered score function of :class:`hf_seq.attention.AttentionScore` (the built-in
            ones: ``ATTENTION_TYPES``; another is added with ``hf_seq.register_attention_score``).
        attention_hidden_size: hidden size ``A`` of the additive (Bahdanau) score; default ``hidden_size``.
        input_feeding: Luong-style input feeding: feed the previous attentional vector ``h̃_{j-1} = tanh(W_c
            [s_{j-1}; c_{j-1}])`` to the next step instead of the raw context ``c_{j-1}`` (needs attention).
        dropout: dropout on embeddings, between stacked layers and on the decoder outputs.
        recurrent_implementation: "fused" (``torch.nn`` kernels) or "cell" (the notes' step equations).
        uniform_init_range: every weight is initialised uniformly in ``[-uniform_init_range,
            uniform_init_range]`` (Sutskever et al. / Luong et al.). A bound of a uniform distribution, not the
            standard deviation that ``initializer_range`` is in the other families and in transformers, hence its own
            name (former name: ``init_range``).
        tie_word_embeddings: share the embedding matrix with the output projection.
        max_target_length: default ``max_length`` of ``generate()`` (written into the generation config).
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids (the decoder starts
            from ``decoder_start_token_id``; labels are shifted right with it).
    """

    model_type = "hf_seq_rnn_seq2seq"
    # former field names -> current ones: accepted by the constructor and in config.json, never saved
    renamed_fields = {"bidirectional_encoder": "bidirectional", "init_range": "uniform_init_range"}
    # num_hidden_layers: the decoder's layer count, as in HfSeqTransformerConfig (the layers a generation cache holds)
    attribute_map = {"num_hidden_layers": "decoder_layers", **renamed_fields}
    keys_to_ignore_at_inference = ["cache"]

    def __init__(
        self,
        vocab_size: int = 8000,
        embedding_size: int = 256,
        hidden_size: int = 256,
        encoder_layers: int = 1,
        decoder_layers: int = 1,
        cell: str = "lstm",
        bidirectional: bool = False,
        attention: str = "additive",
        attention_hidden_size: int | None = None,
        input_feeding: bool = False,
        dropout: float = 0.1,
        recurrent_implementation: str = "fused",
        uniform_init_range: float = 0.1,
        tie_word_embeddings: bool = True,
        max_target_length: int = 128,
        use_cache: bool = True,
        pad_token_id: int | None = 0,
        bos_token_id: int | None = 2,
        eos_token_id: int | None = 3,
        decoder_start_token_id: int | None = 2,
        is_encoder_decoder: bool = True,
        **kwargs,
    ) -> None:
        check_positive_int("vocab_size", vocab_size)  # before transformers compares the special token ids with it
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.cell = cell
        self.bidirectional = bidirectional
        self.attention = attention
        self.attention_hidden_size = attention_hidden_size
        self.input_feeding = input_feeding
        self.dropout = dropout
        self.recurrent_implementation = recurrent_implementation
        self.uniform_init_range = uniform_init_range
        self.max_target_length = max_target_length
        self.use_cache = use_cache
        self.decoder_start_token_id = decoder_start_token_id
        check_config_keywords(self, kwargs)  # former names taken; misspelt field: error, unknown keyword: warning
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            is_encoder_decoder=is_encoder_decoder,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self.validate_seq2seq_config()

    def validate_seq2seq_config(self) -> None:
        """Raise ``ValueError`` naming the field and the allowed values for any invalid setting."""
        check_fields(self, positive_int="vocab_size embedding_size hidden_size encoder_layers decoder_layers")
        check_positive_int("max_target_length", self.max_target_length, allow_none=True)
        check_positive_int("attention_hidden_size", self.attention_hidden_size, allow_none=True)
        check_choice("cell", self.cell, cell_choices())
        check_choice("attention", self.attention, attention_choices())
        check_choice("recurrent_implementation", self.recurrent_implementation, IMPLEMENTATIONS)
        check_fields(self, bool="bidirectional input_feeding tie_word_embeddings use_cache is_encoder_decoder")
        if not self.is_encoder_decoder:
            raise ValueError("`is_encoder_decoder` must be True for the RNN encoder-decoder")
        if self.input_feeding and self.attention == "none":
            raise ValueError(
                '`input_feeding=True` needs an `attention` other than "none" (it feeds the attentional vector)'
            )
        check_fields(self, probability="dropout", positive_float="uniform_init_range")
        for name in ("pad_token_id", "bos_token_id", "decoder_start_token_id"):
            check_token_id(name, getattr(self, name), self.vocab_size)
        check_token_id("eos_token_id", self.eos_token_id, self.vocab_size, allow_list=True)

    @property
    def word_embed_proj_dim(self) -> int:
        """The width of ``RNNSeq2SeqModel``'s ``last_hidden_state`` (the decoder outputs, projected to
        ``embedding_size`` for the output layer) under the name embedding clients read before ``hidden_size`` (as
        OPT declares it; sentence-transformers' ``get_embedding_dimension()`` takes it first). ``hidden_size`` keeps
        its meaning. Computed, never saved."""
        return self.embedding_size

    @word_embed_proj_dim.setter
    def word_embed_proj_dim(self, value) -> None:
        if value != self.embedding_size:
            raise ValueError(
                f"`word_embed_proj_dim` is the width of last_hidden_state (`embedding_size` = {self.embedding_size}) "
                f"and cannot be set to {value!r}"
            )


# the former name, for folders saved before the rename: their auto_map says "configuration_rnn_seq2seq.RNNSeq2SeqConfig"
RNNSeq2SeqConfig = HfSeqRNNSeq2SeqConfig
