"""The Transformer encoder-decoder ("Attention Is All You Need") as native Hugging Face models.

Built exactly the way the notes build it: the one attention core (:mod:`.attention`) → multi-head attention →
encoder block (self-attention + FFN, each with residual + LayerNorm) → decoder block (masked self-attention +
cross-attention + FFN) → stacks of blocks → linear + softmax. The blocks live in :mod:`.blocks` (shared with BERT);
this file adds the embeddings (token × sqrt(d) + sinusoidal or learned positions), the two stacks, the masks and the
Hugging Face plumbing (outputs, ``EncoderDecoderCache``, ``generate()``).

* ``TransformerModel`` — encoder + decoder, returns the decoder's last hidden states (``Seq2SeqModelOutput``).
* ``TransformerForConditionalGeneration`` — adds the output projection (tied to the embeddings by default), the
  cross-entropy loss on ``labels`` and ``generate()`` (greedy, sampling, beam search) with a KV cache.

The forward passes compile with ``torch.compile(fullgraph=True)`` and export with ``torch.export`` / ONNX: value checks
and the data-dependent CPU fast paths (no mask when nothing is padded, the padding-free encoder feed-forward) run only
in eager mode on CPU (``hf_seq.fast_paths``); everywhere else one static-shape path runs with no host reads.
"""

import math

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqModelOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple

from .attention import MultiHeadAttention, make_attention_mask, remember_rows_see_a_key
from .blocks import Dropout, TransformerDecoderBlock, TransformerEncoderBlock, sinusoidal_position_table
from .compat import OutputRecorder, cache_argument, cache_output, capture_outputs, init, output_cache
from .configuration_transformer import HfSeqTransformerConfig
from .fast_paths import AppendBufferLayer, decodes_generated_ids, drop_all_ones_mask, padding_free_rows, remembered
from .losses import lm_head_and_loss  # noqa: F401  (seq2seq_utils.py imports it; 5.0–5.6 copy only these siblings)
from .modeling_utils import CheckedLoadingMixin, GenerativeHeadMixin, refuse_unknown_keywords
from .pipeline_tasks import DeclaredPipelinesMixin  # noqa: F401  (the config imports it; 5.0–5.6 copy only these siblings)
from .seq2seq_pipelines import SEQ2SEQ_CUSTOM_PIPELINES  # noqa: F401  (seq2seq_utils.py imports it, as above)
from .seq2seq_utils import Seq2SeqLMHeadMixin, seq2seq_model_output, shift_tokens_right
from .validation import check_batch_shape, check_mask_shape, check_one_input, check_token_ids


def _padding_only(mask: torch.Tensor | None, name: str, shape: tuple[int, int]) -> torch.Tensor | None:
    """Validate a ``(B, T)`` 0/1 ``attention_mask`` and return it; None when there is none, and (eager CPU only,
    where the check reads no device value) None when nothing is masked, so attention runs without a mask."""
    if mask is None:
        return None
    check_mask_shape(name, mask, shape)
    return drop_all_ones_mask(mask)


def _cross_attention_mask(mask: torch.Tensor | None, shape: tuple[int, int]) -> torch.Tensor | None:
    """The cross-attention mask ``(B, 1, 1, S)`` of the source ``attention_mask`` ``(B, S)`` (None: nothing padded,
    eager CPU). Inside ``generate()`` (eager CPU) the source mask is the same tensor at every step, so what is read
    on the host to build this mask (is anything padded, does every row see a key) is read once per call."""
    if mask is None:
        return None
    check_mask_shape("attention_mask", mask, shape)

    def build() -> torch.Tensor | None:
        pad = drop_all_ones_mask(mask)
        return remember_rows_see_a_key(make_attention_mask(pad, 1)) if pad is not None else None  # one query row

    return remembered(mask, "transformer_cross_attention_mask", build)


def new_decoder_cache() -> EncoderDecoderCache:
    """An empty ``EncoderDecoderCache``; its self-attention part appends in place (a fast path:
    :class:`~.fast_paths.AppendBufferLayer`, ``torch.cat`` under tracing)."""
    self_attention = DynamicCache()
    self_attention.layer_class_to_replicate = AppendBufferLayer  # the in-place KV cache (fast_paths.py)
    return EncoderDecoderCache(self_attention, DynamicCache())


class SinusoidalPositionEmbedding(nn.Module):
    """The paper's fixed position table ``(max_positions, d)``: sin on even, cos on odd dimensions, base 10000."""

    def __init__(self, num_positions: int, dim: int) -> None:
        super().__init__()
        self.num_positions = num_positions
        self.dim = dim
        self.register_buffer("weight", sinusoidal_position_table(num_positions, dim), persistent=False)

    def forward(self, past_length: int, length: int) -> torch.Tensor:
        """Rows ``past_length .. past_length + length - 1`` of the table: ``(T, d)``."""
        return self.weight[past_length : past_length + length]


class LearnedPositionEmbedding(nn.Embedding):
    """A trained position table ``(max_positions, d)`` (the paper's alternative, BERT's choice)."""

    def forward(self, past_length: int, length: int) -> torch.Tensor:  # type: ignore[override]
        """Rows ``past_length .. past_length + length - 1`` of the table: ``(T, d)``."""
        return self.weight[past_length : past_length + length]


class TransformerEmbeddings(nn.Module):
    """Token embedding × ``sqrt(d_model)`` (when ``scale_embedding``) + position embedding, then dropout."""

    def __init__(self, config: HfSeqTransformerConfig, embed_tokens: nn.Embedding) -> None:
        super().__init__()
        self.embed_tokens = embed_tokens
        if config.position_embedding == "sinusoidal":
            self.embed_positions = SinusoidalPositionEmbedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.embed_positions = LearnedPositionEmbedding(config.max_position_embeddings, config.hidden_size)
        self.scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.max_positions = config.max_position_embeddings
        self.dropout = Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None = None,
        past_length: int = 0,
        name: str = "input_ids",
        check_ids: bool = True,
    ) -> torch.Tensor:
        """``input_ids`` ``(B, T)`` (or ``inputs_embeds`` ``(B, T, d)``) at positions ``past_length..`` → ``(B, T, d)``.

        ``check_ids=False``: the ids are tokens ``generate()`` chose itself (their range is not checked again)."""
        check_one_input(input_ids, inputs_embeds, name)
        if inputs_embeds is None:
            if check_ids:
                check_token_ids(name, input_ids, self.embed_tokens.num_embeddings, batched=True)
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, d)
        else:
            embeds_name = name.replace("input_ids", "inputs_embeds")  # inputs_embeds / decoder_inputs_embeds
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.embed_tokens.embedding_dim:
                raise ValueError(
                    f"`{embeds_name}` must have shape (batch, length, hidden_size={self.embed_tokens.embedding_dim}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            check_batch_shape(embeds_name, tuple(inputs_embeds.shape[:2]))
        length = inputs_embeds.shape[1]
        if past_length + length > self.max_positions:
            raise ValueError(
                f"`{name}` reaches position {past_length + length} (length {length} after {past_length} cached "
                f"positions) but the position table has max_position_embeddings={self.max_positions} rows; "
                "truncate the input or use a config with a larger max_position_embeddings."
            )
        positions = self.embed_positions(past_length, length)  # (T, d)
        return self.dropout(torch.add(positions, inputs_embeds, alpha=self.scale))  # (B, T, d): emb * scale + pos


def _block_stack(block_cls: type[nn.Module], config: HfSeqTransformerConfig, num_layers: int) -> nn.ModuleList:
    """``num_layers`` encoder or decoder blocks (``block_cls``) sized by ``config``, ``layer_idx`` = position."""
    return nn.ModuleList(
        block_cls(
            config.hidden_size,
            config.num_attention_heads,
            config.intermediate_size,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            activation_dropout=config.activation_dropout,
            activation=config.activation_function,
            norm_position=config.norm_position,
            layer_norm_eps=config.layer_norm_eps,
            layer_idx=i,
            config=config,
        )
        for i in range(num_layers)
    )


def _final_layer_norm(config: HfSeqTransformerConfig) -> nn.LayerNorm | None:
    """The LayerNorm after a pre-LN stack (post-LN blocks already end normalised: None)."""
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps) if config.norm_position == "pre" else None


class TransformerPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):
    """Base class: config class, weight initialisation, SDPA/eager attention switch (``attn_implementation``),
    gradient checkpointing of the encoder and decoder blocks."""

    config_class = HfSeqTransformerConfig
    # every head of the family with its Auto class (registered by `import hf_seq`, all listed in a saved auto_map)
    _auto_heads = {
        "AutoModel": "TransformerModel",
        "AutoModelForSeq2SeqLM": "TransformerForConditionalGeneration",
    }
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _no_split_modules = ["TransformerEncoderBlock", "TransformerDecoderBlock"]
    accepts_loss_kwargs = False

    def tie_weights(self, *args, **kwargs) -> None:
        """transformers' tying (the target embedding and the output projection share the source embedding's matrix);
        then the decoder uses the encoder's embedding MODULE itself, so that FSDP, which shards by module, keeps the
        shared matrix in one unit (``fully_shard`` refuses a parameter held by modules of two units). Not on the meta
        device: ``from_pretrained``'s loading report must still see two modules there."""
        super().tie_weights(*args, **kwargs)
        base = getattr(self, self.base_model_prefix, self)
        if not isinstance(base, TransformerModel):
            return  # an encoder or decoder stack on its own: nothing to share
        source, target = base.encoder.embeddings, base.decoder.embeddings
        weight = source.embed_tokens.weight
        if (
            target.embed_tokens is not source.embed_tokens
            and target.embed_tokens.weight is weight
            and not weight.is_meta
        ):
            target.embed_tokens = source.embed_tokens

    def _init_weights(self, module: nn.Module) -> None:
        """Linear layers ~ N(0, initializer_range); token embeddings ~ N(0, d^-0.5) when scaled by sqrt(d), else N(0, initializer_range)."""
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, LearnedPositionEmbedding):
            init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.Embedding):
            emb_std = self.config.hidden_size**-0.5 if self.config.scale_embedding else std
            init.normal_(module.weight, mean=0.0, std=emb_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionEmbedding):
            init.copy_(module.weight, sinusoidal_position_table(module.num_positions, module.dim))

    @property
    def dummy_inputs(self) -> dict[str, torch.Tensor]:
        """A small padded batch with source and decoder inputs (``model(**model.dummy_inputs)`` runs a forward)."""
        pad = self.config.pad_token_id if self.config.pad_token_id is not None else 0
        ids = torch.tensor([[7, 6, 5, 4, 3], [8, 12, 3, pad, pad]], device=self.device) % self.config.vocab_size
        attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], device=self.device)
        return {"input_ids": ids, "attention_mask": attention_mask, "decoder_input_ids": ids}


class _TransformerStack(TransformerPreTrainedModel):
    """What the encoder and the decoder stack share: embeddings → ``num_layers`` blocks (``block_cls``) [→ final
    LayerNorm, pre-LN]. Each stack is a ``PreTrainedModel``, as transformers' Marian builds its encoder and decoder,
    so that ``capture_outputs`` records what the subclass's ``_can_record_outputs`` names.

    ``initialize=False``: the model that holds the stack initialises its weights, in its own ``post_init``
    (:class:`TransformerModel`: one pass over both stacks, in the order of the modules, so that a seed gives the
    weights it gives a model whose stacks do not initialise themselves between their constructions)."""

    def __init__(
        self,
        config: HfSeqTransformerConfig,
        embed_tokens: nn.Embedding,
        block_cls: type[nn.Module],
        num_layers: int,
        initialize: bool = True,
    ) -> None:
        super().__init__(config)
        self.embeddings = TransformerEmbeddings(config, embed_tokens)
        self.layers = _block_stack(block_cls, config, num_layers)
        self.layer_norm = _final_layer_norm(config)
        self._initialized_by_holder = not initialize
        self.post_init()

    def init_weights(self) -> None:
        """``PreTrainedModel.init_weights`` (from ``post_init``), unless the model holding the stack does it."""
        if not self._initialized_by_holder:
            super().init_weights()

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embeddings.embed_tokens


class TransformerEncoder(_TransformerStack):
    """Encoder stack: embeddings → ``encoder_layers`` × (self-attention + FFN) [→ final LayerNorm for pre-LN].

    With padding in ``attention_mask`` the feed-forward sub-layers leave the padded positions unchanged (no real token
    and no decoder position ever reads them): in eager mode on CPU they skip those rows, compiled, exported or on an
    accelerator they compute every row and put the padded ones back, so both give the same states everywhere.
    """

    main_input_name = "input_ids"
    # what `capture_outputs` records: the embeddings and every block's output (the last one after the final
    # LayerNorm of a pre-LN stack: the last hidden state), every self-attention's weights
    _can_record_outputs = {
        "hidden_states": TransformerEncoderBlock,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
    }

    def __init__(self, config: HfSeqTransformerConfig, embed_tokens: nn.Embedding, initialize: bool = True) -> None:
        super().__init__(config, embed_tokens, TransformerEncoderBlock, config.encoder_layers, initialize)

    @refuse_unknown_keywords
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput | tuple:
        """Source ``input_ids`` ``(B, S)`` with ``attention_mask`` ``(B, S)`` (1 = token) → states ``(B, S, d)``.

        ``output_attentions`` / ``output_hidden_states`` / ``return_dict`` default to the config's values."""
        hidden = self.embeddings(input_ids, inputs_embeds)  # (B, S, d)
        pad = _padding_only(attention_mask, "attention_mask", hidden.shape[:2])
        mask = make_attention_mask(pad, hidden.shape[1]) if pad is not None else None  # (B, 1, 1, S) or None
        token_rows = token_mask = None  # the real tokens, for the feed-forward sub-layers (padding rows pass through)
        if pad is not None:
            token_rows = padding_free_rows(pad)  # (N_tok,) flat indices (eager CPU): padding rows skipped
            token_mask = pad.bool() if token_rows is None else None  # (B, S): static shapes elsewhere
        for layer in self.layers:
            hidden = layer(hidden, mask, token_rows=token_rows, token_mask=token_mask, **kwargs)
        if self.layer_norm is not None:
            hidden = self.layer_norm(hidden)
        return BaseModelOutput(last_hidden_state=hidden)


class TransformerDecoder(_TransformerStack):
    """Decoder stack: embeddings → ``decoder_layers`` × (masked self-attn + cross-attn + FFN) [→ LayerNorm, pre-LN]."""

    # what `capture_outputs` records: the embeddings and every block's output (the last one after the final
    # LayerNorm of a pre-LN stack), every masked self-attention's and every cross-attention's weights
    _can_record_outputs = {
        "hidden_states": TransformerDecoderBlock,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: HfSeqTransformerConfig, embed_tokens: nn.Embedding, initialize: bool = True) -> None:
        super().__init__(config, embed_tokens, TransformerDecoderBlock, config.decoder_layers, initialize)

    @refuse_unknown_keywords
    @capture_outputs
    @cache_argument
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions | tuple:
        """Target ``input_ids`` ``(B, T)`` attending to ``encoder_hidden_states`` ``(B, S, d)`` → ``(B, T, d)``.

        ``attention_mask`` ``(B, past + T)`` masks padded target positions (on top of the causal mask);
        ``encoder_attention_mask`` ``(B, S)`` masks source padding in every cross-attention.
        """
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs `encoder_hidden_states` (run the encoder or pass `encoder_outputs`).")
        past_length = cache.get_seq_length() if cache is not None else 0
        check_ids = not decodes_generated_ids(self, input_ids)  # a generate() step past the prompt: checked already
        hidden = self.embeddings(input_ids, inputs_embeds, past_length, "decoder_input_ids", check_ids)  # (B, T, d)
        batch, length = hidden.shape[:2]
        if encoder_hidden_states.shape[0] != batch:
            raise ValueError(
                f"`encoder_hidden_states` has batch size {encoder_hidden_states.shape[0]} but the decoder input has {batch}"
            )
        cross_mask = _cross_attention_mask(encoder_attention_mask, encoder_hidden_states.shape[:2])  # (B, 1, 1, S)
        target_pad = _padding_only(attention_mask, "decoder_attention_mask", (batch, past_length + length))
        self_mask = (
            make_attention_mask(target_pad, length, past_length + length, causal=True)  # (B, 1, T, past + T)
            if target_pad is not None
            else None  # plain causal masking (SDPA's causal kernel)
        )
        for layer in self.layers:
            hidden = layer(
                hidden,
                encoder_hidden_states,  # positional: gradient checkpointing passes its gradient
                self_attention_mask=self_mask,
                cross_attention_mask=cross_mask,
                cache=cache,
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden = self.layer_norm(hidden)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden, **cache_output(cache))


class TransformerModel(TransformerPreTrainedModel):
    """The bare encoder-decoder: source ids → encoder states; target ids → decoder states ``(B, T, d_model)``."""

    _tied_weights_keys = {"decoder.embeddings.embed_tokens.weight": "encoder.embeddings.embed_tokens.weight"}

    def __init__(self, config: HfSeqTransformerConfig) -> None:
        super().__init__(config)
        pad = config.pad_token_id
        source_embed = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=pad)
        target_embed = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=pad)
        # both stacks are initialised below, by this model's post_init (see _TransformerStack)
        self.encoder = TransformerEncoder(config, source_embed, initialize=False)
        self.decoder = TransformerDecoder(config, target_embed, initialize=False)
        self.gradient_checkpointing = False  # set by gradient_checkpointing_enable(); turns use_cache off in training
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embeddings.embed_tokens = value
        if self.config.tie_word_embeddings:
            self.decoder.embeddings.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> TransformerEncoder:
        return self.encoder

    def get_decoder(self) -> TransformerDecoder:
        return self.decoder

    @refuse_unknown_keywords
    @can_return_tuple
    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput | tuple:
        """Encode ``input_ids`` ``(B, S)`` (unless ``encoder_outputs`` are given), decode ``decoder_input_ids`` ``(B, T)``.

        With ``use_cache`` an ``EncoderDecoderCache`` is created (or the given ``cache`` extended) and returned in
        ``output.cache``; then only the new decoder tokens need to be passed at the next step. The former name
        ``past_key_values=`` is accepted with ``transformers``' deprecation warning. ``use_cache``,
        ``output_attentions``, ``output_hidden_states`` and ``return_dict`` default to the config's values
        (``use_cache`` is off while gradient checkpointing trains, as in ``transformers``' models).
        """
        if use_cache is None:
            use_cache = self.config.use_cache
        if use_cache and getattr(self, "gradient_checkpointing", False) and self.training and torch.is_grad_enabled():
            use_cache = False  # as transformers' models: checkpointed layers recompute, a cache would not
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **kwargs,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass `decoder_input_ids` (or `labels` to TransformerForConditionalGeneration, which shifts them)."
            )
        if use_cache and cache is None:
            cache = new_decoder_cache()
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache if use_cache else None,
            inputs_embeds=decoder_inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        return seq2seq_model_output(decoder_outputs, encoder_outputs, output_cache(decoder_outputs))


class TransformerForConditionalGeneration(
    Seq2SeqLMHeadMixin, GenerativeHeadMixin, TransformerPreTrainedModel, GenerationMixin
):
    """Encoder-decoder + output projection (linear + softmax over the vocabulary): translation, ``generate()``.

    ``labels`` ``(B, T)`` (``-100`` = ignored) give the cross-entropy ``loss`` and, when ``decoder_input_ids`` are not
    passed, the teacher-forcing inputs ``[decoder_start_token_id, y_1, ..., y_{T-1}]``.
    """

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embeddings.embed_tokens.weight",
        "model.decoder.embeddings.embed_tokens.weight": "model.encoder.embeddings.embed_tokens.weight",
    }
    # generate() starts with a decoder cache whose self-attention layers append in place, given to it as the caller's
    # cache would be (a call that passes its own cache, a cache_implementation or use_cache=False is left as it is)
    _generation_cache = staticmethod(new_decoder_cache)

    def __init__(self, config: HfSeqTransformerConfig) -> None:
        super().__init__(config)
        self.model = TransformerModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()
        self._add_translation_pipelines()
        if self.generation_config is not None:
            # GenerationConfig's default max_length (20 tokens) would cut translations; the position table is the
            # model's real limit (a saved generation_config.json, e.g. the train script's, overrides this)
            self.generation_config.max_length = config.max_position_embeddings

    def get_decoder(self) -> TransformerDecoder:
        return self.model.decoder

    def _decoding_module(self) -> tuple[TransformerDecoder, int]:
        """The decoder, which checks each step's ids against its embedding's rows (``GenerativeHeadMixin``)."""
        decoder = self.model.decoder
        return decoder, decoder.embed_tokens.num_embeddings

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the vocabulary; with untied embeddings the target embedding is resized too."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        decoder = self.model.decoder.embeddings
        if decoder.embed_tokens.num_embeddings != embeddings.num_embeddings:
            decoder.embed_tokens = self.model._get_resized_embeddings(
                decoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings


__all__ = [
    "TransformerPreTrainedModel",
    "TransformerModel",
    "TransformerForConditionalGeneration",
    "TransformerEncoder",
    "TransformerDecoder",
    "shift_tokens_right",
]
