"""Configuration of the recurrent family (``model_type="hf_seq_rnn"``): embedding → recurrent stack → pooling → head."""

from __future__ import annotations

from transformers import PretrainedConfig

# attention.py: recurrent.py imports it, and 5.0–5.6's remote-code loader copies only the siblings imported here
from .attention import SCORE_FUNCTIONS  # noqa: F401
from .compat import check_transformers_version  # noqa: F401  (importing .compat refuses an unsupported release)
from .fast_paths import reads_values  # noqa: F401  (validation.py imports it; 5.0–5.6 copy only these siblings)
from .recurrent import CELL_TYPES, IMPLEMENTATIONS
from .recurrent_cells import lstm_step  # noqa: F401  (recurrent.py imports the cells and the kernels:
from .recurrent_kernels import choose_kernel  # noqa: F401  5.0–5.6 copy only the siblings imported here)
from .validation import (
    PROBLEM_TYPES,
    check_choice,
    check_config_keywords,
    check_fields,
    check_positive_int,
    check_token_id,
)

POOLINGS = ("last", "mean", "max", "flatten")
INPUT_ENCODINGS = ("embedding", "one_hot")
PROJECTION_ACTIVATIONS = ("linear", "tanh", "relu", "gelu")


class HfSeqRNNConfig(PretrainedConfig):
    r"""Configuration of the hf_seq recurrent models (``RNNModel``, ``RNNForSequenceClassification``,
    ``RNNForTokenClassification``, ``RNNForCausalLM``).

    The notes' whole arc is a value of this config, not a subclass:

    * ``cell="none", pooling="flatten", max_seq_length=20, embedding_size=8`` — Embedding → Flatten → logistic regression;
    * ``cell="rnn"`` — SimpleRNN ``h_t = tanh(A·[h_{t-1}; x_t] + b)``, last state → classifier;
    * ``cell="lstm"`` / ``"gru"``; ``num_hidden_layers > 1`` — stacked ("return sequences"); ``bidirectional=True`` —
      both directions, the two final states concatenated.

    Args:
        vocab_size: rows of the embedding table.
        embedding_size: word vector size ``x``.
        hidden_size: recurrent state size ``h`` (per direction).
        num_hidden_layers: stacked recurrent layers (transformers' name for the layer count; the former name
            ``num_layers`` is accepted by the constructor and in config.json, and reads and sets this field).
        cell: "none" (no recurrence: the embeddings are the features), "rnn", "lstm", "gru",
            "self_attention_lstm" (the notes' self-attention RNN, LSTMN of Cheng et al. 2016: each step's recurrent
            input is an attention-weighted summary of all previous states; cell path only), or a cell type added
            with ``hf_seq.recurrent.register_cell``.
        bidirectional: add a right-to-left layer per level and concatenate the directions.
        pooling: how a sequence becomes one vector for sequence classification — "last" (final state: the last real
            token's state; bidirectional: forward final state ⊕ backward state after the first token), "mean" /
            "max" over real tokens, "flatten" (concatenate all ``max_seq_length`` positions, the notes' logistic
            regression; inputs must be padded/truncated to exactly ``max_seq_length``). ``cell="none"`` has no state,
            so it does not allow "last".
        max_seq_length: sequence length the model expects (Keras' ``input_length``); required by
            ``pooling="flatten"``, otherwise an optional upper bound checked on input. (Not called ``max_length``:
            ``transformers`` treats ``config.max_length`` as a generation parameter and refuses to save it; a
            ``max_length=`` keyword is accepted as an alias.)
        dropout: dropout between stacked layers and on the features fed to the classifier head.
        embedding_dropout: dropout on the word vectors.
        freeze_embeddings: keep the embedding table fixed during training (pretrained word vectors, see
            ``load_pretrained_embeddings``).
        trainable_embedding_size: None (default) or the width of a second embedding table (``vocab_size`` rows,
            always trainable, the models' own initialisation) whose vectors are concatenated after the word vectors:
            the "two-channel" input of Kim (2014), a frozen pretrained channel beside one learned from the task
            data. The embedding layer's output (and ``inputs_embeds``) is then ``embedding_size +
            trainable_embedding_size`` wide (``config.embedding_output_size``). ``resize_token_embeddings`` resizes
            both tables.
        embedding_projection_size: None (default: the word vectors go straight into the recurrent stack) or the
            width of a trainable ``Linear(embedding_output_size → embedding_projection_size)`` between the embedding
            (after its dropout) and the recurrent stack, e.g. to train a mapping of frozen pretrained vectors; the
            recurrent stack (and ``cell="none"``'s features) then see vectors of this width. ``inputs_embeds``
            go through it too.
        embedding_projection_activation: the nonlinearity after that projection: "linear" (none), "tanh", "relu",
            "gelu". Only read with ``embedding_projection_size``.
        recurrent_implementation: "fused" (``torch.nn`` kernels) or "cell" (the notes' explicit per-step equations);
            the same field as ``HfSeqRNNSeq2SeqConfig.recurrent_implementation`` (former name: ``implementation``).
        initializer_range: standard deviation of the normal initialisation ``N(0, initializer_range²)`` of embeddings
            and linear heads (transformers' name and meaning; the RNN seq2seq family's uniform bound is a different
            field, ``uniform_init_range``).
        pad_token_id: id of the padding token (its embedding row is zero and untrained).
        input_encoding: "embedding" (learned table, ``embedding_size`` wide) or "one_hot" (the notes' char
            generator: each token is its one-hot vector, a fixed identity embedding without parameters; needs
            ``embedding_size == vocab_size``).
        tie_word_embeddings: ``RNNForCausalLM`` shares its output matrix with the embedding table (a projection
            ``hidden_size → embedding_size`` is added when the sizes differ); not with ``one_hot``.
        use_cache: ``RNNForCausalLM`` returns its recurrent state as ``output.cache`` (outside training).
        bos_token_id / eos_token_id: start / stop tokens for ``generate()`` (None: no such token).
        num_labels / id2label / label2id / problem_type: as in every ``transformers`` classifier. Binary tasks default
            to ``num_labels=2`` with softmax cross-entropy (what pipelines and ``Trainer`` users expect). The notes'
            single sigmoid output (161 parameters for 20×8 inputs) is ``num_labels=1`` with
            ``problem_type="multi_label_classification"`` (sigmoid + binary cross-entropy; 0/1 labels of shape (B,)
            are accepted). Note that ``num_labels=1`` alone means regression in ``transformers``.
    """

    model_type = "hf_seq_rnn"
    # former field names -> current ones: accepted by the constructor and in config.json, never saved
    renamed_fields = {"num_layers": "num_hidden_layers", "implementation": "recurrent_implementation"}
    attribute_map = dict(renamed_fields)  # config.num_layers reads and sets num_hidden_layers

    def __init__(
        self,
        vocab_size: int = 10000,
        embedding_size: int = 32,
        hidden_size: int = 32,
        num_hidden_layers: int = 1,
        cell: str = "lstm",
        bidirectional: bool = False,
        pooling: str = "last",
        max_seq_length: int | None = None,
        dropout: float = 0.0,
        embedding_dropout: float = 0.0,
        freeze_embeddings: bool = False,
        embedding_projection_size: int | None = None,
        trainable_embedding_size: int | None = None,
        embedding_projection_activation: str = "linear",
        recurrent_implementation: str = "fused",
        initializer_range: float = 0.1,
        pad_token_id: int | None = 0,
        input_encoding: str = "embedding",
        tie_word_embeddings: bool = False,
        use_cache: bool = True,
        bos_token_id: int | None = None,
        eos_token_id: int | None = None,
        **kwargs,
    ) -> None:
        check_positive_int("vocab_size", vocab_size)  # before transformers compares the special token ids with it
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.cell = cell
        self.bidirectional = bidirectional
        self.pooling = pooling
        alias = kwargs.pop("max_length", None)  # config.max_length is reserved for generation in transformers
        if max_seq_length is None:
            max_seq_length = alias
        self.max_seq_length = max_seq_length
        self.dropout = dropout
        self.embedding_dropout = embedding_dropout
        self.freeze_embeddings = freeze_embeddings
        self.embedding_projection_size = embedding_projection_size
        self.trainable_embedding_size = trainable_embedding_size
        self.embedding_projection_activation = embedding_projection_activation
        self.recurrent_implementation = recurrent_implementation
        self.initializer_range = initializer_range
        self.input_encoding = input_encoding
        self.use_cache = use_cache
        check_config_keywords(self, kwargs)  # former names taken; misspelt field: error, unknown keyword: warning
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
        self.validate_rnn_config()
        self.validate_lm_config()

    def validate_rnn_config(self) -> None:
        """Raise ``ValueError`` naming the field and the allowed values for any invalid setting."""
        check_fields(self, positive_int="vocab_size embedding_size hidden_size num_hidden_layers")
        check_positive_int("max_seq_length", self.max_seq_length, allow_none=True)
        check_choice("cell", self.cell, ["none", *sorted(CELL_TYPES)])
        check_choice("pooling", self.pooling, POOLINGS)
        if self.pooling == "flatten" and self.max_seq_length is None:
            raise ValueError('`pooling="flatten"` needs `max_seq_length` (the fixed number of tokens to flatten)')
        if self.cell == "none" and self.pooling == "last":
            raise ValueError(
                '`pooling="last"` needs a recurrent `cell`; with `cell="none"` use one of ["mean", "max", "flatten"]'
            )
        check_choice("recurrent_implementation", self.recurrent_implementation, IMPLEMENTATIONS)
        check_positive_int("embedding_projection_size", self.embedding_projection_size, allow_none=True)
        check_positive_int("trainable_embedding_size", self.trainable_embedding_size, allow_none=True)
        check_choice("embedding_projection_activation", self.embedding_projection_activation, PROJECTION_ACTIVATIONS)
        check_fields(
            self,
            bool="bidirectional freeze_embeddings",
            probability="dropout embedding_dropout",
            positive_float="initializer_range",
        )
        check_token_id("pad_token_id", self.pad_token_id, self.vocab_size)
        check_fields(self, positive_int="num_labels")
        check_choice("problem_type", self.problem_type, PROBLEM_TYPES)

    def validate_lm_config(self) -> None:
        """Validate the language-model fields (``input_encoding``, tying, special tokens, ``use_cache``)."""
        check_choice("input_encoding", self.input_encoding, INPUT_ENCODINGS)
        if self.input_encoding == "one_hot" and self.embedding_size != self.vocab_size:
            raise ValueError(
                f'`input_encoding="one_hot"` feeds vocab_size-wide one-hot vectors, so `embedding_size` must equal '
                f"vocab_size={self.vocab_size}, got embedding_size={self.embedding_size}"
            )
        check_fields(self, bool="tie_word_embeddings use_cache")
        if self.tie_word_embeddings and self.input_encoding == "one_hot":
            raise ValueError(
                '`tie_word_embeddings=True` needs a learned embedding table; `input_encoding="one_hot"` has none'
            )
        for name in ("bos_token_id", "eos_token_id"):
            check_token_id(name, getattr(self, name), self.vocab_size, allow_list=True)

    @property
    def num_directions(self) -> int:
        """2 for bidirectional recurrent layers, else 1."""
        return 2 if self.bidirectional and self.cell != "none" else 1

    @property
    def num_recurrent_layers(self) -> int:
        """Recurrent layers the model runs: ``num_hidden_layers``, 0 for cell "none" (its hidden states are the
        embeddings alone)."""
        return 0 if self.cell == "none" else self.num_hidden_layers

    @property
    def embedding_output_size(self) -> int:
        """Width of the embedding layer's output: ``embedding_size`` (+ ``trainable_embedding_size``)."""
        return self.embedding_size + (getattr(self, "trainable_embedding_size", None) or 0)

    @property
    def encoder_input_size(self) -> int:
        """Width of the vectors the recurrent stack reads: ``embedding_projection_size`` if set, else
        ``embedding_output_size``."""
        projection = getattr(self, "embedding_projection_size", None)  # absent from configs saved before the field
        return self.embedding_output_size if projection is None else projection

    @property
    def feature_size(self) -> int:
        """Width of ``last_hidden_state``: ``encoder_input_size`` for cell "none", else
        ``num_directions*hidden_size``."""
        return self.encoder_input_size if self.cell == "none" else self.num_directions * self.hidden_size

    @property
    def word_embed_proj_dim(self) -> int:
        """The width of ``last_hidden_state`` (:attr:`feature_size`) under the name embedding clients read before
        ``hidden_size``: transformers' models whose outputs are not ``hidden_size`` wide declare it there (OPT), and
        sentence-transformers' ``get_embedding_dimension()`` (so its pooling layer and model card) takes it first.
        ``hidden_size`` keeps its meaning (the recurrent state per direction). Computed, never saved: folders load
        unchanged."""
        return self.feature_size

    @word_embed_proj_dim.setter
    def word_embed_proj_dim(self, value) -> None:
        if value != self.feature_size:
            raise ValueError(
                f"`word_embed_proj_dim` is the width of last_hidden_state ({self.feature_size}: `cell`, "
                f"`hidden_size`, `bidirectional` and the embedding sizes set it) and cannot be set to {value!r}"
            )


# the former name, for folders saved before the rename: their auto_map says "configuration_rnn.RNNConfig"
RNNConfig = HfSeqRNNConfig

__all__ = ["HfSeqRNNConfig", "RNNConfig", "POOLINGS", "INPUT_ENCODINGS", "PROJECTION_ACTIVATIONS"]
