"""RNN encoder-decoder translators (plain seq2seq and attention seq2seq) as native Hugging Face models.

The notes' two models, as values of :class:`HfSeqRNNSeq2SeqConfig`:

* **plain seq2seq** (``attention="none"``): an RNN encoder reads the source; its final state (``(h, c)`` for an LSTM)
  initialises the decoder RNN, which is then a conditional text generator — the final state is the only link.
* **attention seq2seq**: at every decoder step ``j`` the state ``s_j`` scores every encoder state ``h_i`` (padding
  masked), ``α_j = softmax(score(s_j, h_i))``, the context is ``c_j = Σ_i α_ij h_i`` (one call of the shared
  :func:`hf_seq.attention.attend`), the next state is computed from ``[x'_{j+1}; s_j; c_j]`` and the word
  distribution from the attentional vector ``h̃_j = tanh(W_c [s_j; c_j])``. ``input_feeding=True`` feeds ``h̃_j``
  instead of ``c_j`` into the next step (Luong et al., 2015). The first context ``c_0`` is computed from the
  decoder's initial state ``s_0`` (the bridged encoder final state), as in the notes.

The decoder's recurrent state is the generation cache (:class:`RNNDecoderCache`): passed as ``cache=`` and returned
in ``output.cache``; beam search reorders it through :meth:`RNNDecoderCache.reorder_cache` (fairseq's
``reorder_incremental_state``). Encoder outputs are batch-first so ``generate()`` can expand them per beam.
"""

import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import ModelOutput, Seq2SeqModelOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple

from .attention import AttentionScore, attend, get_score_type, make_attention_mask
from .compat import OutputRecorder, cache_argument, hidden_states_recorder, init
from .configuration_rnn_seq2seq import HfSeqRNNSeq2SeqConfig
from .fast_paths import decodes_generated_ids, drop_all_ones_mask
from .losses import lm_head_and_loss  # noqa: F401  (seq2seq_utils.py imports it; 5.0–5.6 copy only these siblings)
from .modeling_utils import (
    CheckedLoadingMixin,
    RecurrentGenerativeHeadMixin,
    capture_outputs_when_asked,
    columns_read_now,
    refuse_unknown_keywords,
)
from .pipeline_tasks import DeclaredPipelinesMixin  # noqa: F401  (the config imports it; 5.0–5.6 copy only these siblings)
from .recurrent import RecurrentCache, RecurrentLayerOutput, RecurrentStack, get_cell_type, to_torch_rnn_modules_
from .recurrent_cells import lstm_step  # noqa: F401  (recurrent.py imports the cells and the kernels:
from .recurrent_kernels import choose_kernel  # noqa: F401  5.0–5.6 copy only the siblings imported here)
from .seq2seq_pipelines import SEQ2SEQ_CUSTOM_PIPELINES  # noqa: F401  (seq2seq_utils.py imports it, as above)
from .seq2seq_utils import Seq2SeqLMHeadMixin, seq2seq_model_output, shift_tokens_right
from .validation import check_mask_shape, check_one_input, check_token_ids

State = tuple[torch.Tensor, ...]


# ---------------------------------------------------------------------------------------------------------------
# Outputs, cache, helpers
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class RNNSeq2SeqEncoderOutput(ModelOutput):
    """Encoder output; every tensor is batch-first so ``generate()`` can expand it per beam along dim 0.

    Attributes:
        last_hidden_state: top-layer states of every source position ``(B, S, num_directions * H)`` (zero at padding).
        final_hidden_state: final ``h`` of every layer and direction ``(B, encoder_layers * num_directions, H)``
            (torch.nn's layer-major order: layer 0 forward, layer 0 backward, layer 1 forward, ...).
        final_cell_state: the same for the second state tensor of the cell (the LSTM's ``c``; ``None`` for rnn/gru).
        hidden_states: embeddings and every layer's outputs when ``output_hidden_states=True``.
        final_extra_states: the same for the states after the second of a registered cell with more than two,
            stacked on dim 2: ``(B, encoder_layers * num_directions, num_states - 2, H)`` (``None`` otherwise).
    """

    last_hidden_state: torch.Tensor | None = None
    final_hidden_state: torch.Tensor | None = None
    final_cell_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    final_extra_states: torch.Tensor | None = None


@dataclass
class RNNSeq2SeqDecoderOutput(ModelOutput):
    """Decoder output: ``last_hidden_state`` ``(B, T, E)`` for the output projection; ``state`` (tuple of
    ``(decoder_layers, B, H)``), ``feed`` ``(B, F)`` and ``source_keys`` ``(B, S, K)`` to continue from (the last
    two None without attention, see :class:`RNNDecoderCache`); ``hidden_states`` and ``cross_attentions`` when
    asked for."""

    last_hidden_state: torch.Tensor | None = None
    state: State | None = None
    feed: torch.Tensor | None = None
    source_keys: torch.Tensor | None = None  # not `keys`: a ModelOutput is a dict
    hidden_states: tuple[torch.Tensor, ...] | None = None
    cross_attentions: tuple[torch.Tensor, ...] | None = None


class RNNDecoderCache(RecurrentCache):
    """The decoder's recurrent state between ``generate()`` steps (:class:`~.recurrent.RecurrentCache`).

    Beside the recurrent state (tuple of ``(decoder_layers, B, H)``) and the number of target tokens read so far, its
    fields are the vector fed to the next step (``feed``: the previous context ``c_{j-1}`` or, with input feeding,
    the attentional vector ``h̃_{j-1}``; ``(B, F)``) and the encoder keys already transformed by the score function
    (``keys``: ``(B, S, K)``, computed once per source batch); both None without attention.
    """

    batch_first_fields = ("feed", "keys")

    def __init__(
        self, state: State, feed: torch.Tensor | None = None, keys: torch.Tensor | None = None, seen_tokens: int = 0
    ) -> None:
        super().__init__(None, state, seen_tokens, feed=feed, keys=keys)


def cross_attention_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The decoder's mask over the source, built once per forward by the one mask builder: ``(B, 1, S)``, True = a
    real source token (one query per decoder step), or None when nothing is masked."""
    mask = make_attention_mask(attention_mask, query_length=1)  # (B, 1, 1, S) or None
    return None if mask is None else mask[:, 0]  # (B, 1, S)


def split_final_states(state: State) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """A stack's final state (tuple of ``(L*D, B, H)``) → the encoder output's three fields (before batch-first):
    the first state, the second (or None) and the others stacked on dim 2 ``(L*D, B, N-2, H)`` (or None)."""
    second = state[1] if len(state) > 1 else None
    extra = torch.stack(state[2:], dim=2) if len(state) > 2 else None
    return state[0], second, extra


# ---------------------------------------------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------------------------------------------


class RNNSeq2SeqPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):
    """Weight initialisation (uniform in ``[-uniform_init_range, uniform_init_range]``) and HF plumbing for the RNN seq2seq family."""

    config_class = HfSeqRNNSeq2SeqConfig
    # every head of the family with its Auto class (registered by `import hf_seq`, all listed in a saved auto_map)
    _auto_heads = {
        "AutoModel": "RNNSeq2SeqModel",
        "AutoModelForSeq2SeqLM": "RNNSeq2SeqForConditionalGeneration",
    }
    config: HfSeqRNNSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True  # per recurrent layer, and per decoder step with attention
    # FSDP / device_map units: the encoder's recurrent stack and the decoder. Not the whole encoder: it holds the word
    # embedding, shared with the decoder's inputs and the tied output layer, which accelerate's FSDP2 puts in a unit
    # of its own with the output layer (as for the Transformer's one embedding module). Finer units (each
    # RecurrentLayer) would be gathered and released once per target step, since the attention decoder runs its
    # layers once per step.
    _no_split_modules = ["RNNSeq2SeqEncoderStack", "RNNSeq2SeqDecoder"]
    accepts_loss_kwargs = False

    def _init_weights(self, module: nn.Module) -> None:
        bound = self.config.uniform_init_range
        if isinstance(module, nn.Embedding):
            init.uniform_(module.weight, -bound, bound)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, (nn.Linear, nn.RNNBase)):
            for name, param in module.named_parameters(recurse=False):
                if "bias" in name:
                    init.zeros_(param)
                else:
                    init.uniform_(param, -bound, bound)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """The decoder keeps its own recurrent cache (:class:`RNNDecoderCache`), not a key/value cache."""
        return False

    def prepare_for_quantization_(self) -> "RNNSeq2SeqPreTrainedModel":
        """Swap every recurrent layer (encoder and decoder) for the ``torch.nn.RNN/LSTM/GRU`` holding the same
        parameter tensors, in place, so that dynamic int8 quantization (:func:`hf_seq.toolkit.quantization.quantize_dynamic_int8`,
        which calls this itself; torch's ``quantize_dynamic(model, {nn.Linear, nn.LSTM, nn.GRU})``) quantizes the
        LSTM/GRU layers too: it matches module classes exactly, and
        hf_seq's recurrent layers are not ``nn.LSTM``/``nn.GRU`` (TorchDynamo refuses to trace those). Parameter
        names, state dict and outputs do not change. Afterwards the model runs in eager mode only: compiling or
        exporting a prepared (or quantized) model is not supported (see :func:`~.recurrent.to_torch_rnn_modules_`).
        Returns the model."""
        return to_torch_rnn_modules_(self)

    def _set_gradient_checkpointing(self, enable: bool = True, gradient_checkpointing_func=checkpoint, **kwargs):
        """transformers' mechanism: every module with a ``gradient_checkpointing`` attribute reports ``enable``. The
        recurrent layers of an attention decoder run only inside its checkpointed steps, which already recompute
        them; they get :func:`_recomputed_by_enclosing_step` as their checkpoint function, so the backward pass
        recomputes them once (with their step), not a second time inside it."""
        super()._set_gradient_checkpointing(enable, gradient_checkpointing_func, **kwargs)
        for module in self.modules():
            if isinstance(module, RNNSeq2SeqDecoder) and module.use_attention:
                for layer in module.rnn.layers:
                    if isinstance(layer, GradientCheckpointingLayer):
                        layer._gradient_checkpointing_func = _recomputed_by_enclosing_step

    @property
    def dummy_inputs(self) -> dict[str, torch.Tensor]:
        """A tiny right-padded batch with everything a forward needs: ``model(**model.dummy_inputs)``."""
        vocab_size, pad = self.config.vocab_size, self.config.pad_token_id or 0
        attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
        input_ids = torch.tensor([[7, 6, 5, 4, 3], [1, 2, 3, 4, 5]]) % vocab_size
        input_ids = input_ids.masked_fill(attention_mask == 0, pad)
        start = self.config.decoder_start_token_id
        decoder_input_ids = input_ids.clone() if start is None else shift_tokens_right(input_ids, pad, start)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}


# ---------------------------------------------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------------------------------------------


class RNNSeq2SeqEncoderStack(RecurrentStack):
    """The encoder's recurrent stack, a class of its own so that it (and not :class:`RNNSeq2SeqEncoder`) is the
    encoder's FSDP / ``device_map`` unit: the encoder also holds the word embedding, which the decoder and the tied
    output layer share, and a unit may hold no parameter used outside it (``fully_shard`` refuses one). Nothing else
    differs from :class:`~.recurrent.RecurrentStack`."""


class _RNNSeq2SeqPart(RNNSeq2SeqPreTrainedModel):
    """The encoder and the decoder: each a ``PreTrainedModel``, as transformers' Marian builds them, so that
    ``capture_outputs`` records what its ``_can_record_outputs`` names. The model holding them initialises their
    weights, in its own ``post_init`` (one pass in module order: a seed gives the weights it gave before)."""

    def init_weights(self) -> None:
        """Nothing: the holding :class:`RNNSeq2SeqModel`'s ``post_init`` initialises the part."""


class RNNSeq2SeqEncoder(_RNNSeq2SeqPart):
    """Embedding → (bi)directional recurrent stack over the source; owns the embedding shared with the decoder."""

    main_input_name = "input_ids"
    # what `capture_outputs` records: the stack's input, then every recurrent layer's outputs (B, S, D*H)
    _can_record_outputs = {"hidden_states": hidden_states_recorder(RecurrentLayerOutput, "encoder_layers")}

    def __init__(self, config: HfSeqRNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size, padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(config.dropout)
        self.rnn = RNNSeq2SeqEncoderStack.from_config(
            config, config.embedding_size, config.encoder_layers, bidirectional=config.bidirectional
        )
        self.post_init()

    @property
    def output_size(self) -> int:
        """Width of the encoder states: ``num_directions * hidden_size``."""
        return self.rnn.output_size

    @refuse_unknown_keywords
    @capture_outputs_when_asked
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> RNNSeq2SeqEncoderOutput | tuple:
        """Encode ``input_ids`` ``(B, S)`` (or ``inputs_embeds`` ``(B, S, E)``); padding never changes a result."""
        check_one_input(input_ids, inputs_embeds)
        if inputs_embeds is None:
            check_token_ids("input_ids", input_ids, self.config.vocab_size, batched=True)
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, E)
        check_mask_shape("attention_mask", attention_mask, inputs_embeds.shape[:2], of="the source (batch, src_len)")
        recorded = kwargs.get("output_hidden_states", self.config.output_hidden_states)  # as capture_outputs reads it
        outputs, state, *_ = self.rnn(self.dropout(inputs_embeds), attention_mask, output_hidden_states=recorded)
        final_h, final_c, final_extra = (
            None if states is None else states.transpose(0, 1) for states in split_final_states(state)
        )  # (B, L*D, H), (B, L*D, H) or None, (B, L*D, N-2, H) or None
        return RNNSeq2SeqEncoderOutput(
            last_hidden_state=outputs,
            final_hidden_state=final_h,
            final_cell_state=final_c,
            final_extra_states=final_extra,
        )


# ---------------------------------------------------------------------------------------------------------------
# Bridge and decoder
# ---------------------------------------------------------------------------------------------------------------


class RNNSeq2SeqBridge(nn.Module):
    """Encoder final states → the decoder's initial state, one ``(decoder_layers, B, H)`` tensor per state of the
    cell (its ``num_states`` in the cell registry: ``(h,)`` rnn/gru, ``(h, c)`` lstm, any count for a registered
    cell).

    Unidirectional: the encoder states are used as they are (the notes' seq2seq). Bidirectional: each layer's forward
    and backward final states are concatenated and mapped to ``H``: ``tanh(W [h→; h←])`` for ``h`` (``hidden_proj``),
    linear for every other state (``cell_proj`` for the second, ``extra_proj[k]`` for the ones after it). Decoder
    layer ``k`` from the top gets encoder layer ``k`` from the top.
    """

    def __init__(self, config: HfSeqRNNSeq2SeqConfig) -> None:
        super().__init__()
        self.num_directions = 2 if config.bidirectional else 1
        self.encoder_layers = config.encoder_layers
        self.decoder_layers = config.decoder_layers
        self.num_states = get_cell_type(config.cell).num_states
        if self.num_directions == 2:
            width, hidden = 2 * config.hidden_size, config.hidden_size
            self.hidden_proj = nn.Linear(width, hidden)
            self.cell_proj = nn.Linear(width, hidden) if self.num_states > 1 else None
            if self.num_states > 2:
                self.extra_proj = nn.ModuleList(nn.Linear(width, hidden) for _ in range(self.num_states - 2))

    def _layers(self, final: torch.Tensor) -> torch.Tensor:
        """(B, L_enc * D, H) → (L_dec, B, D * H): per decoder layer, its encoder layer's directions concatenated."""
        batch, _, hidden = final.shape
        per_layer = final.reshape(batch, self.encoder_layers, self.num_directions * hidden)  # (B, L_enc, D*H)
        index = [max(0, self.encoder_layers - self.decoder_layers + k) for k in range(self.decoder_layers)]
        return per_layer[:, index].transpose(0, 1).contiguous()  # (L_dec, B, D*H)

    def _projections(self) -> list[nn.Module | None]:
        """The map of each state (None: unidirectional, the state as it is)."""
        if self.num_directions == 1:
            return [None] * self.num_states
        extra = list(self.extra_proj) if self.num_states > 2 else []
        return [self.hidden_proj, self.cell_proj, *extra][: self.num_states]

    def forward(
        self,
        final_hidden: torch.Tensor,
        final_cell: torch.Tensor | None = None,
        final_extra: torch.Tensor | None = None,
    ) -> State:
        """``final_hidden`` / ``final_cell`` ``(B, L_enc * D, H)``, ``final_extra`` ``(B, L_enc * D, N - 2, H)``
        (the encoder output's ``final_*`` fields) → the decoder's initial state, tuple of ``num_states`` tensors
        ``(L_dec, B, H)``."""
        finals = [final_hidden, final_cell]
        if self.num_states > 2:
            if final_extra is None or final_extra.dim() != 4 or final_extra.shape[2] != self.num_states - 2:
                raise ValueError(
                    f"The decoder's cell keeps {self.num_states} state tensors: `encoder_outputs` needs "
                    f"`final_extra_states` of shape (batch, layers, {self.num_states - 2}, hidden)"
                )
            finals.extend(final_extra.unbind(2))
        state = []
        for k, (final, projection) in enumerate(zip(finals[: self.num_states], self._projections())):
            if final is None:
                raise ValueError(
                    f"The decoder's cell keeps {self.num_states} state tensors: `encoder_outputs` needs "
                    "`final_cell_state` (the encoder's second final state)"
                )
            layers = self._layers(final)  # (L_dec, B, D*H)
            if projection is not None:
                layers = projection(layers)  # (L_dec, B, H)
                layers = torch.tanh(layers) if k == 0 else layers
            state.append(layers)
        return tuple(state)


def _recomputed_by_enclosing_step(function, *args):
    """The checkpoint function of a layer that runs only inside a checkpointed block (a step of the attention
    decoder): the block keeps its inputs and recomputes all of it, this layer included, in the backward pass, so the
    layer runs as is (checkpointing it again would recompute it a second time)."""
    return function(*args)


class RNNSeq2SeqDecoder(_RNNSeq2SeqPart):
    """Decoder RNN; with attention, one step = RNN on ``[x'_j; feed_{j-1}]`` → attend over the source → ``h̃_j``.

    Activation checkpointing (``gradient_checkpointing_enable()``): without attention the recurrent layers checkpoint
    themselves (each is a ``GradientCheckpointingLayer``); with attention each decoder step (:meth:`step`: recurrent
    layers + attention + ``h̃``) is recomputed as one block, which drops the per-step attention activations
    (``(B, S, A)`` scores of the additive score at every step), the largest activations of this model. Its layers
    report ``gradient_checkpointing=True`` too (transformers' contract) and are recomputed once, with their step
    (see ``RNNSeq2SeqPreTrainedModel._set_gradient_checkpointing``).

    Hidden states are one ``(B, T, H)`` tensor per layer, after the target embeddings ``(B, T, E)``: the attention
    decoder runs its layers once per step, so it gathers each layer's steps and records them once, after the last.
    """

    gradient_checkpointing = False  # set by PreTrainedModel.gradient_checkpointing_enable()
    # what `capture_outputs` records: the calls of two parameterless modules, made once per forward when asked
    _can_record_outputs = {
        "hidden_states": hidden_states_recorder(RecurrentLayerOutput, "decoder_layers", layer_name="layer_states"),
        "cross_attentions": OutputRecorder(RecurrentLayerOutput, index=0, layer_name="attention_weights"),
    }

    def __init__(self, config: HfSeqRNNSeq2SeqConfig, encoder_size: int) -> None:
        super().__init__(config)
        self.attention_type = config.attention
        self.use_attention = config.attention != "none"
        self.input_feeding = config.input_feeding
        hidden, emb = config.hidden_size, config.embedding_size
        self.encoder_size = encoder_size
        if self.use_attention:
            self.feed_size = emb if config.input_feeding else encoder_size
        else:
            self.feed_size = 0
        self.rnn = RecurrentStack.from_config(config, emb + self.feed_size, config.decoder_layers, hidden_size=hidden)
        self.dropout = nn.Dropout(config.dropout)
        if self.use_attention:
            key_size = encoder_size
            self.key_proj = None
            if get_score_type(config.attention).same_size and encoder_size != hidden:
                self.key_proj = nn.Linear(encoder_size, hidden, bias=False)  # W_K: bidirectional states → query space
                key_size = hidden
            self.score = AttentionScore(config.attention, hidden, key_size, config.attention_hidden_size or hidden)
            self.attention_proj = nn.Linear(hidden + encoder_size, emb, bias=False)  # W_c: h̃ = tanh(W_c [s; c])
            self.output_proj = None
        else:
            self.output_proj = nn.Linear(hidden, emb, bias=False) if hidden != emb else None
        self.layer_states, self.attention_weights = RecurrentLayerOutput(), RecurrentLayerOutput()
        self.post_init()

    def prepare_keys(self, encoder_states: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, S, D)`` → keys the score function compares against (``W_K h``, ``W₁ h``, ...)."""
        keys = self.key_proj(encoder_states) if self.key_proj is not None else encoder_states
        return self.score.prepare_keys(keys)  # (B, S, K)

    def _attend(self, query, keys, values, mask) -> tuple[torch.Tensor, torch.Tensor]:
        """``query`` (B, 1, H) → context (B, 1, D), weights (B, 1, S) by the shared attention core."""
        return attend(query, keys, values, mask, score=self.score.score)

    def step(self, x_t, feed, keys, values, mask, real, layers: bool, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One attention-decoder step: ``s_j`` from ``[x'_j; feed_{j-1}]`` and ``s_{j-1}``, the context ``c_j`` over the
        source, ``h̃_j = tanh(W_c [s_j; c_j])``. Rows where ``real`` (B,) is False (target padding) keep their state
        and feed. Returns ``(h̃_j (B, 1, E), α_j (B, 1, S), feed_j (B, F), *state_j)``, then with ``layers`` every
        layer's output ``(B, 1, H)`` (the top one is ``s_j``)."""
        step_in = torch.cat([x_t, feed], dim=-1).unsqueeze(1)  # (B, 1, E+F): [x'_j; c_{j-1}]
        step_out, new_state, *per_layer = self.rnn(step_in, None, state, output_hidden_states=layers)  # s_j (B, 1, H)
        context, alpha = self._attend(step_out, keys, values, mask)  # (B, 1, D), (B, 1, S)
        h_tilde = torch.tanh(self.attention_proj(torch.cat([step_out, context], dim=-1)))  # (B, 1, E)
        new_feed = h_tilde.squeeze(1) if self.input_feeding else context.squeeze(1)
        if real is not None:  # padded target positions keep the previous state and feed
            new_state = tuple(torch.where(real[None, :, None], n, o) for n, o in zip(new_state, state))
            new_feed = torch.where(real[:, None], new_feed, feed)
        return (h_tilde, alpha, new_feed, *new_state, *(per_layer[0] if layers else ()))

    def initial_feed(self, state: State, keys, values, mask) -> torch.Tensor:
        """The vector fed with the first target word: ``c_0`` (or ``h̃_0``) computed from the initial state ``s_0``."""
        query = state[0][-1].unsqueeze(1)  # (B, 1, H): top layer of s_0
        context, _ = self._attend(query, keys, values, mask)  # (B, 1, D)
        if self.input_feeding:
            return torch.tanh(self.attention_proj(torch.cat([query, context], dim=-1))).squeeze(1)  # (B, E)
        return context.squeeze(1)  # (B, D)

    @refuse_unknown_keywords
    @capture_outputs_when_asked(tie_last_hidden_states=False)
    def forward(
        self,
        inputs_embeds: torch.Tensor,
        state: State,
        encoder_states: torch.Tensor | None = None,
        encoder_mask: torch.Tensor | None = None,
        keys: torch.Tensor | None = None,
        feed: torch.Tensor | None = None,
        decoder_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> RNNSeq2SeqDecoderOutput | tuple:
        """Run the decoder over ``inputs_embeds`` ``(B, T, E)`` from ``state``; with attention, ``keys`` not given are
        prepared here from ``encoder_states`` (:meth:`prepare_keys`), so that every use of the decoder's parameters
        happens inside its ``forward`` (the decoder is an FSDP unit, gathered around ``forward`` only).

        Returns :class:`RNNSeq2SeqDecoderOutput`: ``last_hidden_state`` (B, T, E) goes to the output projection
        (``h̃_j`` with attention, else the projected ``s_j``); the state, feed and keys to continue from; and the
        recorded ``hidden_states`` / ``cross_attentions`` (B, T, S) (``output_hidden_states`` / ``output_attentions``).
        """
        # as capture_outputs reads the switches: the call's keyword, else the config's value
        hidden = kwargs.get("output_hidden_states", self.config.output_hidden_states)
        x = self.dropout(inputs_embeds)
        if not self.use_attention:
            rnn_out, state, *per_layer = self.rnn(x, decoder_mask, state, output_hidden_states=hidden)  # (B, T, H)
            out = self.output_proj(rnn_out) if self.output_proj is not None else rnn_out
            layers = per_layer[0] if hidden else ()
        else:
            if keys is None:
                keys = self.prepare_keys(encoder_states)  # (B, S, K)
            mask = cross_attention_mask(encoder_mask)  # (B, 1, S): True = real source token
            if feed is None:
                feed = self.initial_feed(state, keys, encoder_states, mask)
            checkpointed = self.gradient_checkpointing and self.training and torch.is_grad_enabled()
            step = functools.partial(self._gradient_checkpointing_func, self.step) if checkpointed else self.step
            attentions = kwargs.get("output_attentions", self.config.output_attentions)
            num_states, outputs, weights, layer_steps = len(state), [], [], []
            for t in range(x.shape[1]):
                real = None if decoder_mask is None else decoder_mask[:, t].bool()  # (B,)
                h_tilde, alpha, feed, *rest = step(
                    x[:, t], feed, keys, encoder_states, mask, real, bool(hidden), *state
                )
                state = tuple(rest[:num_states])
                outputs.append(h_tilde)
                layer_steps.append(rest[num_states:])  # every layer's (B, 1, H), with `hidden` only
                if attentions:
                    weights.append(alpha)
            out = torch.cat(outputs, dim=1)  # (B, T, E)
            layers = [torch.cat(steps, dim=1) for steps in zip(*layer_steps)]  # per layer (B, T, H)
            if attentions:
                self.attention_weights(x, torch.cat(weights, dim=1))  # recorded: (B, T, S)
        for layer in layers:
            self.layer_states(x, layer)  # recorded: the embeddings (first call), then each layer's (B, T, H)
        return RNNSeq2SeqDecoderOutput(last_hidden_state=self.dropout(out), state=state, feed=feed, source_keys=keys)


class RNNSeq2SeqModel(RNNSeq2SeqPreTrainedModel):
    """Encoder + bridge + decoder; returns the decoder outputs (``h̃_j`` with attention) in ``last_hidden_state``."""

    def __init__(self, config: HfSeqRNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = RNNSeq2SeqEncoder(config)
        self.bridge = RNNSeq2SeqBridge(config)
        self.decoder = RNNSeq2SeqDecoder(config, self.encoder.output_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> RNNSeq2SeqEncoder:
        return self.encoder

    def _coerce_encoder_outputs(self, encoder_outputs) -> RNNSeq2SeqEncoderOutput:
        if isinstance(encoder_outputs, RNNSeq2SeqEncoderOutput):
            out = encoder_outputs
        elif isinstance(encoder_outputs, (tuple, list)):
            out = RNNSeq2SeqEncoderOutput(*encoder_outputs)
        elif isinstance(encoder_outputs, (dict, ModelOutput)):
            out = RNNSeq2SeqEncoderOutput(**{k: v for k, v in encoder_outputs.items()})
        else:
            raise ValueError(
                f"`encoder_outputs` must be an RNNSeq2SeqEncoderOutput or tuple, got {type(encoder_outputs)}"
            )
        states = out.last_hidden_state
        if states is None or states.dim() != 3 or states.shape[-1] != self.encoder.output_size:
            raise ValueError(
                "`encoder_outputs.last_hidden_state` must have shape (batch, src_len, "
                f"{self.encoder.output_size}), got {None if states is None else tuple(states.shape)}"
            )
        if out.final_hidden_state is None:
            raise ValueError("`encoder_outputs` must contain `final_hidden_state` (batch-first encoder final states).")
        return out

    def _decoder_inputs(
        self,
        decoder_input_ids: torch.Tensor | None,
        decoder_inputs_embeds: torch.Tensor | None,
        decoder_attention_mask: torch.Tensor | None,
        batch_size: int,
        continues: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The checked target embeddings ``(B, T, E)`` and padding mask ``(B, T)`` (None: nothing padded).

        ``continues``: the decoder continues from a cache, so a mask wider than ``T`` (as ``generate()`` passes it,
        covering the tokens read before too) is cut to its last ``T`` columns."""
        if decoder_inputs_embeds is None:
            if decoder_input_ids is None:
                raise ValueError("Pass `decoder_input_ids` (or `labels` to the ForConditionalGeneration head).")
            if not decodes_generated_ids(self, decoder_input_ids):  # a generate() step past the prompt: checked
                check_token_ids("decoder_input_ids", decoder_input_ids, self.config.vocab_size, batched=True)
            decoder_inputs_embeds = self.encoder.embed_tokens(decoder_input_ids)  # (B, T, E)
        if decoder_inputs_embeds.shape[0] != batch_size:
            raise ValueError(
                f"`decoder_input_ids` has batch size {decoder_inputs_embeds.shape[0]} but the source has {batch_size}"
            )
        if decoder_attention_mask is not None:
            target_len = decoder_inputs_embeds.shape[1]
            if continues:  # generate() passes the mask of the whole decoder sequence: the new tokens' columns
                decoder_attention_mask = columns_read_now(decoder_attention_mask, target_len)
            target_shape = decoder_inputs_embeds.shape[:2]
            check_mask_shape("decoder_attention_mask", decoder_attention_mask, target_shape, of="the target")
            decoder_attention_mask = drop_all_ones_mask(decoder_attention_mask)  # eager CPU: None if nothing padded
        return decoder_inputs_embeds, decoder_attention_mask

    def _decoder_start(self, cache: RNNDecoderCache | None, encoder_outputs: RNNSeq2SeqEncoderOutput, batch_size: int):
        """``(state, feed, keys, seen)`` the decoder starts from: the cache's, or the bridged encoder final states
        with no input feed, no keys (the decoder prepares them) and no tokens seen."""
        if cache is not None:
            if cache.batch_size() != batch_size:
                raise ValueError(
                    f"`cache` holds a decoder state for batch size {cache.batch_size()}, but the input has "
                    f"{batch_size} rows (to continue with num_beams=k from a cache of other rows, expand it first: "
                    "cache.batch_repeat_interleave(k))"
                )
            state, feed, keys = cache.state, cache.feed, cache.keys
            seen = cache.seen_tokens
        else:
            state = self.bridge(  # tuple of (L, B, H)
                encoder_outputs.final_hidden_state, encoder_outputs.final_cell_state, encoder_outputs.final_extra_states
            )
            feed, keys, seen = None, None, 0
        return state, feed, keys, seen

    @refuse_unknown_keywords
    @cache_argument
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: RNNSeq2SeqEncoderOutput | tuple | None = None,
        cache: RNNDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput | tuple:
        """Encode the source (unless ``encoder_outputs`` are given) and decode ``decoder_input_ids`` ``(B, T)``.

        With a ``cache`` the decoder continues from the cached state (only the new target tokens are passed; a
        ``decoder_attention_mask`` may cover the tokens read before too, as ``generate()`` passes it: its last
        ``T`` columns are used). ``kwargs``: the output switches, for the encoder and the decoder
        (``output_attentions=True``: the cross-attention maps ``(B, T, S)`` in ``cross_attentions``; both default to
        the config's). The old name ``past_key_values=`` of ``cache`` is accepted with transformers' deprecation
        warning.
        """
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if cache is not None and not isinstance(cache, RNNDecoderCache):
            raise ValueError(f"`cache` must be an RNNDecoderCache (the decoder's recurrent state), got {type(cache)}")

        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **kwargs,
            )
        else:  # encoded before (generate() encodes once): the source mask is checked here, else by the encoder
            encoder_outputs = self._coerce_encoder_outputs(encoder_outputs)
            source_shape = encoder_outputs.last_hidden_state.shape[:2]
            check_mask_shape("attention_mask", attention_mask, source_shape, of="the source (batch, src_len)")
        encoder_states = encoder_outputs.last_hidden_state  # (B, S, D)
        batch_size = encoder_states.shape[0]

        decoder_inputs_embeds, decoder_attention_mask = self._decoder_inputs(
            decoder_input_ids, decoder_inputs_embeds, decoder_attention_mask, batch_size, continues=cache is not None
        )
        state, feed, keys, seen = self._decoder_start(cache, encoder_outputs, batch_size)
        decoded = self.decoder(
            decoder_inputs_embeds,
            state,
            encoder_states=encoder_states,
            encoder_mask=attention_mask,
            keys=keys,
            feed=feed,
            decoder_mask=decoder_attention_mask,
            return_dict=True,
            **kwargs,
        )
        new_cache = None
        if use_cache:
            new_cache = RNNDecoderCache(
                decoded.state, decoded.feed, decoded.source_keys, seen + decoder_inputs_embeds.shape[1]
            )
        return seq2seq_model_output(decoded, encoder_outputs, new_cache)


class RNNSeq2SeqForConditionalGeneration(
    Seq2SeqLMHeadMixin, RecurrentGenerativeHeadMixin, RNNSeq2SeqPreTrainedModel, GenerationMixin
):
    """RNN seq2seq translator: :class:`RNNSeq2SeqModel` + output projection to the vocabulary; ``generate()`` ready."""

    _tied_weights_keys = {"lm_head.weight": "model.encoder.embed_tokens.weight"}
    _is_stateful = True  # the decoder cache is a running state: it cannot be rolled back to a shorter prefix

    def __init__(self, config: HfSeqRNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.model = RNNSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.embedding_size, config.vocab_size, bias=True)
        self.post_init()
        self._add_translation_pipelines()
        if self.generation_config is not None and config.max_target_length is not None:
            self.generation_config.max_length = config.max_target_length

    def _decoding_module(self) -> tuple[RNNSeq2SeqModel, int]:
        """The encoder-decoder, which checks each step's ids against ``vocab_size`` (``GenerativeHeadMixin``)."""
        return self.model, self.config.vocab_size


__all__ = [
    "RNNDecoderCache",
    "RNNSeq2SeqDecoderOutput",
    "RNNSeq2SeqEncoderOutput",
    "RNNSeq2SeqPreTrainedModel",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqForConditionalGeneration",
    "shift_tokens_right",
]
