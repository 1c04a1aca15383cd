"""Recurrent family as native ``transformers`` models: embedding → ``RecurrentStack`` → pooling → head.

Classes: ``RNNPreTrainedModel`` (plumbing), ``RNNEmbeddings`` (learned table or the notes' fixed one-hot
``OneHotEmbedding``), ``RNNEmbeddingProjection`` (optional), ``RNNPooler``, ``RNNModel`` (base), ``RNNForSequenceClassification``,
``RNNForTokenClassification``, and the language model ``RNNForCausalLM`` whose recurrent state is the generation cache
(``RNNCache``). Every variant of the notes (logistic regression on flattened embeddings, SimpleRNN, LSTM, GRU, stacked,
bidirectional, the self-attention LSTM, the char-level text generator) is an ``HfSeqRNNConfig`` value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (
    CausalLMOutputWithPast,
    ModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple

# attention.py: recurrent.py imports it, and 5.0–5.6's remote-code loader copies only the siblings imported here
from .attention import attend  # noqa: F401
from .compat import (
    cache_argument,
    cache_output,
    hidden_states_recorder,
    init,
    shift_labels_when_smoothing,
)
from .configuration_rnn import HfSeqRNNConfig
from .fast_paths import decodes_generated_ids, drop_all_ones_mask
from .losses import check_lm_labels, lm_head_and_loss, sequence_classification_loss, token_classification_loss
from .modeling_utils import (
    CheckedLoadingMixin,
    RecurrentGenerativeHeadMixin,
    capture_outputs_when_asked,
    columns_read_now,
    refuse_unknown_keywords,
)
from .recurrent import (
    GateProjection,
    RecurrentCache,
    RecurrentLayer,
    RecurrentLayerOutput,
    RecurrentStack,
    State,
    to_torch_rnn_modules_,
)
from .recurrent_cells import lstm_step  # noqa: F401  (recurrent.py imports the cells and the kernels:
from .recurrent_kernels import choose_kernel  # noqa: F401  5.0–5.6 copy only the siblings imported here)
from .validation import IGNORE_INDEX, check_mask_shape, check_one_input, check_token_ids


@dataclass
class RNNModelOutput(ModelOutput):
    """Output of :class:`RNNModel`.

    Args:
        last_hidden_state: (B, T, F) features of the top layer (F = num_directions * hidden_size, or
            ``config.encoder_input_size`` for ``cell="none"``); zero at padded positions.
        pooler_output: (B, P) the sequence vector chosen by ``config.pooling`` (None without a pooler).
        hidden_states: embedding output (after ``embedding_projection``, if any) followed by every recurrent layer's
            outputs (when asked).
        final_state: the recurrent state after each sequence's last real token, tuple of
            (num_layers * num_directions, B, H) tensors — ``(h,)`` or ``(h, c)``; None for ``cell="none"``.
    """

    last_hidden_state: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    final_state: tuple[torch.Tensor, ...] | None = None


def _load_vectors(vectors) -> torch.Tensor:
    """Accept a tensor / array / path (.pt, .bin, .npy, .safetensors) holding a (vocab_size, embedding_size) matrix."""
    if isinstance(vectors, (str, os.PathLike)):
        path = os.fspath(vectors)
        if not os.path.isfile(path):
            raise ValueError(f"`vectors` path {path!r} does not exist")
        if path.endswith(".npy"):
            import numpy as np

            vectors = np.load(path)
        elif path.endswith(".safetensors"):
            from safetensors.torch import load_file

            tensors = load_file(path)
            if len(tensors) != 1 and "weight" not in tensors:
                raise ValueError(f"`vectors` file {path!r} must hold one tensor or one named 'weight'")
            vectors = tensors.get("weight", next(iter(tensors.values())))
        else:
            vectors = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(vectors, dict):
                vectors = vectors.get("weight", next(iter(vectors.values())))
    return torch.as_tensor(vectors)


class RNNPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):
    """Weight initialisation, config class and the pretrained-word-vector helper shared by every RNN head."""

    config_class = HfSeqRNNConfig
    # every head of the family with its Auto class (registered by `import hf_seq`, all listed in a saved auto_map)
    _auto_heads = {
        "AutoModel": "RNNModel",
        "AutoModelForSequenceClassification": "RNNForSequenceClassification",
        "AutoModelForTokenClassification": "RNNForTokenClassification",
        "AutoModelForCausalLM": "RNNForCausalLM",
    }
    config: HfSeqRNNConfig
    base_model_prefix = "rnn"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True  # per recurrent layer: every RecurrentLayer is a GradientCheckpointingLayer
    accepts_loss_kwargs = False
    # what `capture_outputs` records: the embeddings, then every recurrent layer's outputs in batch layout
    # (RecurrentLayerOutput, run by the stack only when hidden states are asked for); negative indices of
    # `output_hidden_states` count config.num_recurrent_layers (0 for cell "none")
    _can_record_outputs = {"hidden_states": hidden_states_recorder(RecurrentLayerOutput, "num_recurrent_layers")}

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Normal(0, initializer_range) for embeddings and heads; Keras-style recurrent init (Glorot input weights,
        orthogonal recurrent weights, zero biases, LSTM forget-gate bias 1)."""
        std = self.config.initializer_range
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, GateProjection):
            return  # a view of a recurrent layer's gate parameters, initialised with the layer below
        elif isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters(recurse=False):
                if name.startswith("weight_ih"):
                    init.xavier_uniform_(param)
                elif name.startswith("weight_hh"):
                    init.orthogonal_(param)
                elif name.startswith("bias_ih") and module.mode == "LSTM":
                    bias = torch.zeros_like(param)
                    bias[module.hidden_size : 2 * module.hidden_size] = 1.0  # forget gate (order i, f, g, o)
                    init.copy_(param, bias)
                elif name.startswith("bias"):
                    init.zeros_(param)

    def prepare_for_quantization_(self) -> RNNPreTrainedModel:
        """Swap every recurrent layer for the ``torch.nn.RNN/LSTM/GRU`` holding the same parameter tensors, in place,
        so that dynamic int8 quantization (:func:`hf_seq.toolkit.quantization.quantize_dynamic_int8`, which calls this
        itself; torch's ``quantize_dynamic(model, {nn.Linear, nn.LSTM, nn.GRU})``) quantizes the LSTM/GRU layers too: it matches module classes exactly, and hf_seq's recurrent layers are not
        ``nn.LSTM``/``nn.GRU`` (TorchDynamo refuses to trace those). Parameter names, state dict and outputs do not
        change. Afterwards the model runs in eager mode only: compiling or exporting a prepared (or quantized) model
        is not supported (see :func:`~.recurrent.to_torch_rnn_modules_`). Returns the model."""
        to_torch_rnn_modules_(self)
        for module in self.modules():
            if isinstance(module, RNNModel) and module.encoder is not None:  # device_map / FSDP units: the new layers
                module._no_split_modules = sorted({type(layer).__name__ for layer in module.encoder.layers})
        return self

    def _encode(self, input_ids, attention_mask, inputs_embeds, output_hidden_states, state=None) -> RNNModelOutput:
        """A head's pass through its :class:`RNNModel` (``self.rnn``), from ``state`` (None: zeros)."""
        return self.rnn(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            state=state,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )

    def get_input_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.base_model.embeddings.word_embeddings = value

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the vocabulary; the second, trainable table (``config.trainable_embedding_size``) is resized too."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        layer = self.base_model.embeddings
        channel = layer.trainable_embeddings
        if channel is not None and channel.num_embeddings != embeddings.num_embeddings:
            layer.trainable_embeddings = self._get_resized_embeddings(
                channel, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings

    def load_pretrained_embeddings(self, vectors, freeze: bool = True) -> None:
        """Copy pretrained word vectors into the embedding table and optionally freeze it (the notes' "pretrain,
        keep the embedding, freeze it").

        Args:
            vectors: a (vocab_size, embedding_size) tensor / numpy array, or a path to a ``.pt``/``.bin``
                (``torch.save``), ``.npy`` or ``.safetensors`` file holding one.
            freeze: keep the table fixed in training (sets ``config.freeze_embeddings``, saved with the model).
        """
        weights = _load_vectors(vectors)
        embedding = self.get_input_embeddings()
        if not isinstance(embedding, nn.Embedding):
            raise ValueError('`input_encoding="one_hot"` has no embedding table to load vectors into')
        if weights.dim() != 2 or tuple(weights.shape) != tuple(embedding.weight.shape):
            raise ValueError(
                f"`vectors` must have shape (vocab_size, embedding_size) = {tuple(embedding.weight.shape)}, "
                f"got {tuple(weights.shape)}"
            )
        with torch.no_grad():
            embedding.weight.copy_(weights.to(embedding.weight.dtype))
        self.config.freeze_embeddings = bool(freeze)
        self.base_model.embeddings.freeze = bool(freeze)
        embedding.weight.requires_grad_(not freeze)


class OneHotEmbedding(nn.Module):
    """The notes' one-hot encoding as a fixed identity embedding: token ``i`` → ``e_i`` (no parameters).

    The vectors come out in the model's dtype (an empty buffer follows ``.to(dtype)``); ``token == arange(V)`` needs
    no value check inside (``F.one_hot`` reads the ids on the host), the ids are validated by the model."""

    def __init__(self, num_embeddings: int) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = num_embeddings
        self.register_buffer("dtype_anchor", torch.empty(0), persistent=False)  # holds no values, only a dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        vocabulary = torch.arange(self.num_embeddings, device=input_ids.device)  # (V,)
        return (input_ids.unsqueeze(-1) == vocabulary).to(self.dtype_anchor.dtype)  # (B, T, V)

    def extra_repr(self) -> str:
        return f"num_embeddings={self.num_embeddings}"


class RNNEmbeddings(nn.Module):
    """Word embeddings (the notes' ``x_i = Pᵀ e_i``) followed by dropout."""

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__()
        if getattr(config, "input_encoding", "embedding") == "one_hot":  # the notes' one-hot chars, no parameters
            self.word_embeddings = OneHotEmbedding(config.vocab_size)
        else:
            self.word_embeddings = nn.Embedding(
                config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id
            )
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.freeze = bool(config.freeze_embeddings) and isinstance(self.word_embeddings, nn.Embedding)
        if self.freeze:
            self.word_embeddings.weight.requires_grad_(False)
        extra = getattr(config, "trainable_embedding_size", None)
        self.trainable_embeddings = (
            None if extra is None else nn.Embedding(config.vocab_size, extra, padding_idx=config.pad_token_id)
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.freeze:  # detached: no gradient even if a loader re-created the parameter with requires_grad=True
            table = self.word_embeddings
            vectors = F.embedding(input_ids, table.weight.detach(), table.padding_idx)  # (B, T, E)
        else:
            vectors = self.word_embeddings(input_ids)  # (B, T, E)
        if self.trainable_embeddings is not None:
            vectors = torch.cat([vectors, self.trainable_embeddings(input_ids)], dim=-1)  # (B, T, E + K)
        return self.dropout(vectors)


class RNNEmbeddingProjection(nn.Module):
    """``config.embedding_projection_size``: a trainable ``Linear(E → P)`` + optional nonlinearity between the word
    vectors and the recurrent stack (a learned mapping of frozen pretrained vectors, for instance)."""

    _activations = {"linear": nn.Identity, "tanh": nn.Tanh, "relu": nn.ReLU, "gelu": nn.GELU}

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.embedding_output_size, config.embedding_projection_size)
        self.activation = self._activations[config.embedding_projection_activation]()

    def forward(self, embedded: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(embedded))  # (B, T, E) -> (B, T, P)


class RNNPooler(nn.Module):
    """Turns the per-token features into one vector per sequence, as ``config.pooling`` says."""

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__()
        self.pooling = config.pooling
        self.max_seq_length = config.max_seq_length
        self.num_directions = config.num_directions

    @staticmethod
    def output_size(config: HfSeqRNNConfig) -> int:
        """Width of the pooled vector."""
        if config.pooling == "flatten":
            return config.max_seq_length * config.feature_size
        return config.feature_size

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None, final_state: State | None) -> torch.Tensor:
        """features: (B, T, F) zero at padding; mask: (B, T) bool or None; final_state[0]: (L*D, B, H)."""
        batch_size = features.shape[0]
        if self.pooling == "last":
            h = final_state[0][-self.num_directions :]  # (D, B, H): top layer, forward [and backward]
            return h.transpose(0, 1).reshape(batch_size, -1)  # (B, D*H)
        if self.pooling == "flatten":
            return features.reshape(batch_size, -1)  # (B, T*F), T == max_seq_length checked by the model
        if self.pooling == "mean":
            if mask is None:
                return features.mean(dim=1)
            counts = mask.sum(dim=1, keepdim=True).clamp(min=1).to(features.dtype)  # (B, 1)
            return features.sum(dim=1) / counts  # padding is zero, so the sum only sees real tokens
        # max
        if mask is None:
            return features.max(dim=1).values
        pooled = features.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values  # (B, F)
        return torch.where(torch.isinf(pooled), torch.zeros_like(pooled), pooled)  # rows without tokens -> 0


class RNNModel(RNNPreTrainedModel):
    """Embeddings + recurrent stack (+ pooler): the base of every RNN head. Returns :class:`RNNModelOutput`."""

    def __init__(self, config: HfSeqRNNConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = RNNEmbeddings(config)
        # absent (None) unless the config asks for it, so folders saved without the field load unchanged
        self.embedding_projection = (
            RNNEmbeddingProjection(config) if getattr(config, "embedding_projection_size", None) is not None else None
        )
        self.encoder = (
            None
            if config.cell == "none"
            else RecurrentStack.from_config(
                config, config.encoder_input_size, config.num_hidden_layers, bidirectional=config.bidirectional
            )
        )
        # cell "none": no recurrent layer, the embeddings are the only hidden state (recorded here)
        self.embeddings_output = RecurrentLayerOutput() if self.encoder is None else None
        self.pooler = RNNPooler(config) if add_pooling_layer else None
        # FSDP auto-wrap / device_map units: the recurrent layers (accelerate refuses names absent from the model)
        layers = [] if self.encoder is None else self.encoder.layers
        self._no_split_modules = sorted({type(layer).__name__ for layer in layers if isinstance(layer, RecurrentLayer)})
        self.post_init()

    def _check_inputs(self, input_ids, attention_mask, inputs_embeds) -> tuple[int, int]:
        check_one_input(input_ids, inputs_embeds)
        if input_ids is not None:
            if not decodes_generated_ids(self, input_ids):  # a generate() step past the prompt: checked already
                check_token_ids("input_ids", input_ids, self.config.vocab_size, batched=True)
            if input_ids.numel() == 0:
                raise ValueError(f"`input_ids` must not be empty, got shape {tuple(input_ids.shape)}")
            batch_size, seq_len = input_ids.shape
        else:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.embedding_output_size:
                raise ValueError(
                    f"`inputs_embeds` must have shape (batch, seq_len, {self.config.embedding_output_size}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            batch_size, seq_len = inputs_embeds.shape[:2]
        check_mask_shape("attention_mask", attention_mask, (batch_size, seq_len))
        max_len = self.config.max_seq_length
        if self.config.pooling == "flatten" and self.pooler is not None and seq_len != max_len:
            raise ValueError(
                f'`input_ids` has {seq_len} tokens but pooling="flatten" needs exactly max_seq_length={max_len}; '
                f'tokenize with padding="max_length", truncation=True, max_length={max_len}'
            )
        if max_len is not None and seq_len > max_len:
            raise ValueError(
                f"`input_ids` has {seq_len} tokens, more than the model's max_seq_length={max_len}; "
                f"truncate (truncation=True, max_length={max_len})"
            )
        return batch_size, seq_len

    @refuse_unknown_keywords
    @capture_outputs_when_asked(tie_last_hidden_states=False)
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        state: State | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> RNNModelOutput | tuple:
        """input_ids: (B, T); attention_mask: (B, T) 1 = real token (left or right padding); state: initial
        recurrent state (tuple of (L*D, B, H)); returns :class:`RNNModelOutput` (a tuple with ``return_dict=False``,
        in the call or the config). ``hidden_states`` (``output_hidden_states``, from the call or the config) are
        recorded by ``capture_outputs`` from :class:`~.recurrent.RecurrentLayerOutput`."""
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        self._check_inputs(input_ids, attention_mask, inputs_embeds)
        embedded = self.embeddings(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, E)
        if self.embedding_projection is not None:
            embedded = self.embedding_projection(embedded)  # (B, T, P)
        mask = None
        if attention_mask is not None:
            mask = attention_mask if attention_mask.dtype == torch.bool else attention_mask != 0  # (B, T)
        final_state = None
        if self.encoder is None:
            features = embedded if mask is None else embedded * mask.unsqueeze(-1).to(embedded.dtype)  # (B, T, E)
            if output_hidden_states:
                self.embeddings_output(embedded, None)  # records the embeddings, the only hidden state
        else:
            result = self.encoder(embedded, attention_mask=mask, state=state, output_hidden_states=output_hidden_states)
            features, final_state = result[0], result[1]  # (B, T, D*H)
        pooled = None
        if self.pooler is not None:
            mask = drop_all_ones_mask(mask)  # eager CPU shortcut; traced or on an accelerator the pooler takes it
            pooled = self.pooler(features, mask, final_state)
        return RNNModelOutput(last_hidden_state=features, pooler_output=pooled, final_state=final_state)


class RNNForSequenceClassification(RNNPreTrainedModel):
    """RNN + pooled sequence vector + linear head (the notes' "last state → classifier"); ``SequenceClassifierOutput``.

    Loss follows ``transformers``' ``problem_type`` logic: cross-entropy for integer labels with ``num_labels > 1``,
    MSE for ``num_labels == 1`` (regression), sigmoid + BCE for ``multi_label_classification`` (with
    ``num_labels=1`` this is the notes' logistic regression; 0/1 labels of shape (B,) are accepted).
    """

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.rnn = RNNModel(config, add_pooling_layer=True)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(RNNPooler.output_size(config), config.num_labels)
        self.post_init()

    def compute_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Loss of ``logits`` (B, num_labels) against ``labels`` after validating their shape and range."""
        return sequence_classification_loss(logits, labels, self.num_labels, self.config.problem_type)

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        """input_ids: (B, T); labels: (B,) class ids (or floats, see class doc); returns logits (B, num_labels)."""
        outputs = self._encode(input_ids, attention_mask, inputs_embeds, output_hidden_states)
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        loss = self.compute_loss(logits, labels) if labels is not None else None
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class RNNForTokenClassification(RNNPreTrainedModel):
    """RNN + per-token linear head (sequence labelling, e.g. POS tagging); ``TokenClassifierOutput``.

    ``labels`` (B, T) class ids; -100 (and padded positions labelled -100) are ignored by the loss.
    """

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.rnn = RNNModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.feature_size, config.num_labels)
        self.post_init()

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        """input_ids: (B, T); labels: (B, T) with -100 = ignore; returns logits (B, T, num_labels)."""
        outputs = self._encode(input_ids, attention_mask, inputs_embeds, output_hidden_states)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = token_classification_loss(logits, labels, self.num_labels) if labels is not None else None
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


# ----------------------------------------------------------------------------------------------------------------
# Causal language model: the notes' char-level text generator as a native generative model
# ----------------------------------------------------------------------------------------------------------------


class RNNCache(RecurrentCache):
    """The language model's recurrent state as ``generate()``'s cache (:class:`~.recurrent.RecurrentCache`, no fields
    beside the state): the stack's state after every token read so far (``(h, c)`` of shape (L, B, H) for an LSTM;
    for ``cell="self_attention_lstm"`` also h̃ and the whole tape of previous states (L, B, S, H) with its mask
    (L, B, S)). A prompt is consumed once, then one token per step; forward updates the object in place and returns
    it."""

    def __init__(self, num_layers: int, state: State | None = None, seen_tokens: int = 0) -> None:
        super().__init__(num_layers, state, seen_tokens)


class RNNForCausalLM(RecurrentGenerativeHeadMixin, RNNPreTrainedModel, GenerationMixin):
    """Recurrent language model: embedding (learned, or the notes' fixed one-hot) → unidirectional recurrent stack →
    dropout → linear → softmax over the vocabulary (``CausalLMOutputWithPast``).

    * ``labels`` are the ``input_ids`` themselves (shifted inside, as in every ``transformers`` causal LM): the loss
      is next-token cross-entropy at every position, ``-100`` ignored. Targets already shifted (``shift_labels``,
      as transformers' ``ForCausalLMLoss`` takes them) replace the inside shift.
    * ``config.tie_word_embeddings=True`` shares the output matrix with the embedding table
      (``_tied_weights_keys``); when ``hidden_size != embedding_size`` a projection ``H → E`` (``lm_proj``) is added.
    * ``generate()``: the recurrent state is the cache (:class:`RNNCache`) — greedy, sampling (temperature, top-k,
      top-p), beam search; left-padded prompts are handled by the recurrent core.
    """

    _tied_weights_keys = {"lm_head.weight": "rnn.embeddings.word_embeddings.weight"}
    _is_stateful = True  # the cache is a running state: it cannot be rolled back to a shorter prefix

    def __init__(self, config: HfSeqRNNConfig) -> None:
        super().__init__(config)
        if config.cell == "none":
            raise ValueError('`cell` must be a recurrent cell for RNNForCausalLM (the state is the model), got "none"')
        if config.bidirectional:
            raise ValueError("`bidirectional` must be False for RNNForCausalLM: a language model cannot read ahead")
        self.rnn = RNNModel(config, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.dropout)
        head_size = config.hidden_size
        self.lm_proj = None
        if config.tie_word_embeddings and config.hidden_size != config.embedding_size:
            self.lm_proj = nn.Linear(config.hidden_size, config.embedding_size, bias=False)  # H -> E, then E -> V
            head_size = config.embedding_size
        self.lm_head = nn.Linear(head_size, config.vocab_size)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """generate() must not create a DynamicCache: the first forward creates the :class:`RNNCache`."""
        return False

    def _decoding_module(self) -> tuple[RNNModel, int]:
        """The recurrent model, which checks each step's ids against ``vocab_size`` (``GenerativeHeadMixin``)."""
        return self.rnn, self.config.vocab_size

    def _cache_state(self, cache, batch_size: int) -> RNNCache:
        """The :class:`RNNCache` to continue from (a fresh one for None or an empty transformers ``Cache``)."""
        if isinstance(cache, RNNCache):
            if cache.batch_size() not in (None, batch_size):
                raise ValueError(
                    f"`cache` holds a state for batch size {cache.batch_size()}, but the input has {batch_size} rows"
                )
            return cache
        if cache is None or (hasattr(cache, "get_seq_length") and cache.get_seq_length() == 0):
            return RNNCache(self.config.num_hidden_layers)
        raise ValueError(
            f"`cache` must be an RNNCache (the recurrent state returned as output.cache), got {type(cache).__name__}"
        )

    @refuse_unknown_keywords(also=("shift_labels",))  # read from kwargs (see the docstring)
    @cache_argument
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: RNNCache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        logits_to_keep: int = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """input_ids: (B, T) — the new tokens only when a ``cache`` is given; attention_mask: (B, T) or (B, past + T)
        (generate() passes the whole mask; only its last T columns matter: left padding of the prompt);
        labels: (B, T), usually ``input_ids`` (-100 = ignore), shifted inside; ``shift_labels=`` (a keyword, in
        ``kwargs``): (B, T) targets already aligned with the logits (position t's target), as transformers' causal LMs
        take them (``ForCausalLMLoss``: Trainer and accelerate pass them under sequence/context parallelism) — when
        given, the loss is taken against them and ``labels`` is not used. It is not a named parameter: Trainer's
        ``label_names`` default is every forward parameter named like a label, and a second one would make its
        ``prediction_step`` find no labels (no ``eval_loss``, no metrics). Returns logits (B, T, V) and ``cache`` (when ``use_cache``, the default
        outside training). The old name ``past_key_values=`` of ``cache`` is accepted with transformers' deprecation
        warning."""
        shift_labels = kwargs.get("shift_labels")
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        check_one_input(input_ids, inputs_embeds)
        reference = input_ids if input_ids is not None else inputs_embeds
        batch_size, seq_len = reference.shape[:2]
        mask_now = columns_read_now(attention_mask, seq_len)  # (B, T): the one reading of a generate() mask
        if mask_now is not attention_mask and cache is not None and seq_len == 1:
            if decodes_generated_ids(self.rnn, input_ids):
                mask_now = None  # the column generate() appended for its own token: all ones, nothing to read
        attention_mask = mask_now
        state_cache = self._cache_state(cache, batch_size) if (use_cache or cache is not None) else None
        state = None if state_cache is None else state_cache.state
        outputs = self._encode(input_ids, attention_mask, inputs_embeds, output_hidden_states, state)
        features = outputs.last_hidden_state  # (B, T, H)
        if logits_to_keep:
            features = features[:, -logits_to_keep:]  # generate() needs only the last position's logits
        features = self.dropout(features)
        if self.lm_proj is not None:
            features = self.lm_proj(features)  # (B, T, E)
        next_labels = None
        if labels is not None or shift_labels is not None:
            if logits_to_keep:
                raise ValueError("`labels` cannot be combined with `logits_to_keep` (the loss needs every position)")
            if labels is not None:
                check_lm_labels(labels, (batch_size, seq_len), self.config.vocab_size)
            if shift_labels is not None:  # already aligned: the target of position t is shift_labels[:, t]
                check_lm_labels(shift_labels, (batch_size, seq_len), self.config.vocab_size, name="shift_labels")
                next_labels = shift_labels
            else:  # position t predicts token t+1; the last position has nothing to predict (-100)
                next_labels = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)  # (B, T)
        logits, loss = lm_head_and_loss(self.lm_head, features, next_labels, checked=True)  # (B, T, V), loss or None
        if state_cache is not None:
            state_cache.update(outputs.final_state, seq_len)
        if not use_cache:
            state_cache = None
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, **cache_output(state_cache)
        )


# Trainer(label_smoothing_factor=...) shifts this LM's labels as a causal LM's (in this file, so that remote-code
# loading without hf_seq installed does it too)
shift_labels_when_smoothing(HfSeqRNNConfig.model_type, RNNForCausalLM.__name__)


__all__ = [
    "RNNModelOutput",
    "RNNPreTrainedModel",
    "RNNEmbeddings",
    "RNNPooler",
    "RNNModel",
    "RNNForSequenceClassification",
    "RNNForTokenClassification",
    "OneHotEmbedding",
    "RNNCache",
    "RNNForCausalLM",
]
