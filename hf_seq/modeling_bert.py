"""BERT as a native Hugging Face model, built on the project's Transformer encoder block.

``[CLS] A [SEP] B [SEP]`` → token + position + segment embeddings → LayerNorm → N post-LN
:class:`~.blocks.TransformerEncoderBlock` (the one attention core of :mod:`.attention`) → per-token states and a
``tanh`` pooler on ``[CLS]`` (sequence classification can pool the mean of the tokens instead,
``classifier_pooling="mean"``). Heads: masked-LM (decoder tied to the word embeddings) + next-sentence prediction
(pretraining, loss = sum of both cross-entropies), masked-LM only, sequence classification, token classification.

A ``transformers`` BERT checkpoint (folder or model object) loads into any of these classes with
``hf_seq.toolkit.bert_conversion.from_transformers_bert`` (config and weights mapped; not part of a saved folder).

The forward passes compile with ``torch.compile(fullgraph=True)`` and export with ``torch.export`` / ONNX: value checks
and the data-dependent CPU fast paths (no mask when nothing is padded, the fused masked-LM loss) run only in eager mode
on CPU (``hf_seq.fast_paths``). ``sparse_prediction=True`` selects the labelled positions (a data-dependent shape),
so that opt-in breaks the graph there when compiled.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.processing_utils import Unpack
from transformers.utils import ModelOutput, TransformersKwargs, logging
from transformers.utils.generic import can_return_tuple

from .attention import MultiHeadAttention, make_attention_mask
from .blocks import TransformerEncoderBlock
from .compat import OutputRecorder, capture_outputs
from .configuration_bert import HfSeqBertConfig
from .fast_paths import drop_all_ones_mask
from .losses import lm_head_and_loss, masked_cross_entropy, sequence_classification_loss, token_classification_loss
from .modeling_utils import CheckedLoadingMixin, refuse_unknown_keywords
from .validation import (
    IGNORE_INDEX,
    check_batch_shape,
    check_label_range,
    check_mask_shape,
    check_one_input,
    check_token_ids,
    checks_values,
)

logger = logging.get_logger(__name__)


@dataclass
class BertForPreTrainingOutput(ModelOutput):
    """Output of :class:`BertForPreTraining` (same fields as ``transformers``' ``BertForPreTrainingOutput``).

    Args:
        loss: masked-LM cross-entropy + next-sentence cross-entropy (the terms whose labels were given).
        prediction_logits: ``(B, T, vocab_size)`` masked-LM scores (``(num_labelled, vocab_size)`` with
            ``config.sparse_prediction`` and ``labels``).
        seq_relationship_logits: ``(B, 2)`` next-sentence scores (0 = B follows A, 1 = B is random).
        hidden_states / attentions: per-layer states and attention weights when asked.
    """

    loss: torch.Tensor | None = None
    prediction_logits: torch.Tensor | None = None
    seq_relationship_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


# ---------------------------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    """Word-piece + learned position + segment embeddings, then LayerNorm and dropout."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: torch.Tensor | None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, H)
        batch, length = inputs_embeds.shape[:2]
        if position_ids is None:
            position_ids = torch.arange(length, device=inputs_embeds.device).unsqueeze(0)  # (1, T)
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch, length, dtype=torch.long, device=inputs_embeds.device)
        x = inputs_embeds + self.token_type_embeddings(token_type_ids) + self.position_embeddings(position_ids)
        return self.dropout(self.norm(x))  # (B, T, H)


class BertEncoder(nn.Module):
    """A stack of post-LN Transformer encoder blocks (the shared :class:`~.blocks.TransformerEncoderBlock`)."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            TransformerEncoderBlock(
                d_model=config.hidden_size,
                num_heads=config.num_attention_heads,
                ffn_dim=config.intermediate_size,
                dropout=config.hidden_dropout_prob,
                attention_dropout=config.attention_probs_dropout_prob,
                activation_dropout=0.0,
                activation=config.hidden_act,
                norm_position="post",
                layer_norm_eps=config.layer_norm_eps,
                layer_idx=i,
                config=config,
            )
            for i in range(config.num_hidden_layers)
        )

    def forward(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: Unpack[TransformersKwargs]
    ) -> torch.Tensor:
        """``(B, T, H)`` → last states ``(B, T, H)`` (each block's output is recorded by ``BertModel``'s
        ``capture_outputs`` when asked)."""
        for layer in self.layers:  # hidden states positional: gradient checkpointing passes their gradient
            hidden_states = layer(hidden_states, attention_mask, **kwargs)
        return hidden_states


class BertPooler(nn.Module):
    """``tanh(W h_[CLS] + b)``: the sentence vector the next-sentence and classification heads read."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.transform(hidden_states[:, 0])  # (B, H)

    def transform(self, vectors: torch.Tensor) -> torch.Tensor:
        """``tanh(W v + b)`` of one vector per sequence ``(B, H)``: the pooler applied to any summary vector."""
        return torch.tanh(self.dense(vectors))  # (B, H)


def masked_mean(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``hidden_states`` ``(B, T, H)`` over the positions where ``attention_mask`` ``(B, T)`` is 1 → ``(B, H)``.

    The mean pooling of sentence-transformers and of ``transformers``' ModernBERT ``classifier_pooling="mean"``.
    No mask: the mean over all ``T`` positions. (A row without any token gives zeros; the model rejects it first.)
    """
    if attention_mask is None:
        return hidden_states.mean(dim=1)
    weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, T, 1)
    return (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, H)


class BertPredictionHeadTransform(nn.Module):
    """Dense → activation → LayerNorm applied to each token state before the vocabulary decoder."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.hidden_act]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act(self.dense(hidden_states)))  # (..., H)


class BertLMPredictionHead(nn.Module):
    """Masked-LM head: transform, then a decoder to the vocabulary (weight tied to the word embeddings, own bias)."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(hidden_states))  # (..., V)


class BertPreTrainingHeads(nn.Module):
    """Masked-LM head on every token + next-sentence head (2 classes) on the pooled ``[CLS]`` vector."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class BertOnlyMLMHead(nn.Module):
    """Masked-LM head alone (``BertForMaskedLM``)."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


# ---------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------


class BertPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):
    """Base class: config class, weight initialisation, input checks, gradient checkpointing of the encoder blocks.

    ``_no_split_modules`` names the encoder block only: a ``BertEmbeddings`` unit would put the word embedding, which
    the masked-LM decoder shares, in a different FSDP group (or device) than the decoder that reads it.
    """

    config_class = HfSeqBertConfig
    # every head of the family with its Auto class (registered by `import hf_seq`, all listed in a saved auto_map)
    _auto_heads = {
        "AutoModel": "BertModel",
        "AutoModelForPreTraining": "BertForPreTraining",
        "AutoModelForMaskedLM": "BertForMaskedLM",
        "AutoModelForSequenceClassification": "BertForSequenceClassification",
        "AutoModelForTokenClassification": "BertForTokenClassification",
    }
    base_model_prefix = "bert"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _no_split_modules = ["TransformerEncoderBlock"]
    accepts_loss_kwargs = False  # the losses are means over the batch: Trainer scales them for accumulation
    # what `capture_outputs` records: the embeddings and every block's output, every self-attention's weights
    _can_record_outputs = {
        "hidden_states": TransformerEncoderBlock,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
    }

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)  # normal(0, initializer_range) linears/embeddings, zero biases, unit LayerNorms

    # --- input validation ------------------------------------------------------------------------------------
    def _check_inputs(
        self,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
        token_type_ids: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        inputs_embeds: torch.Tensor | None,
    ) -> tuple[int, int]:
        """Raise ValueError naming the argument for bad ids, shapes or lengths; return ``(B, T)``."""
        config = self.config
        check_one_input(input_ids, inputs_embeds)
        if input_ids is not None:
            check_token_ids("input_ids", input_ids, config.vocab_size, "vocab_size", batched=True)
            shape = tuple(input_ids.shape)
        else:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size:
                raise ValueError(
                    f"`inputs_embeds` must have shape (batch, length, hidden_size={config.hidden_size}), got "
                    f"{tuple(inputs_embeds.shape)}."
                )
            shape = tuple(inputs_embeds.shape[:2])
            check_batch_shape("inputs_embeds", shape)
        if shape[1] > config.max_position_embeddings and position_ids is None:
            raise ValueError(
                f"`input_ids` has length {shape[1]}, longer than max_position_embeddings="
                f"{config.max_position_embeddings}; truncate the input (tokenizer(..., truncation=True, "
                f"max_length={config.max_position_embeddings}))."
            )
        check_mask_shape("attention_mask", attention_mask, shape, of="`input_ids`")
        check_mask_shape("token_type_ids", token_type_ids, shape, of="`input_ids`")
        if token_type_ids is not None:
            check_token_ids("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")
        if position_ids is not None:
            if position_ids.shape[-1] != shape[1]:
                raise ValueError(f"`position_ids` must have length {shape[1]}, got shape {tuple(position_ids.shape)}.")
            check_token_ids("position_ids", position_ids, config.max_position_embeddings, "max_position_embeddings")
        return shape

    def _encode(
        self, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs
    ) -> BaseModelOutputWithPooling:
        """A head's encoder pass: ``self.bert`` on the head's inputs (``kwargs``: the output switches), as a
        ``BaseModelOutputWithPooling``."""
        return self.bert(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )

    # --- the masked-LM decoder of the heads that have one (``self.cls``), tied to the word embeddings -------------
    def get_output_embeddings(self) -> nn.Linear | None:
        head = getattr(self, "cls", None)
        return None if head is None else head.predictions.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.cls.predictions.decoder = new_embeddings

    # --- position table -------------------------------------------------------------------------------------
    def get_position_embeddings(self) -> nn.Embedding:
        """The learned position table ``(max_position_embeddings, hidden_size)``."""
        return self.base_model.embeddings.position_embeddings

    def resize_position_embeddings(self, new_num_position_embeddings: int) -> None:
        """Grow or shrink the learned position table to ``new_num_position_embeddings`` rows, in place.

        Shrinking keeps the first rows. Growing keeps every trained row and fills the new ones by repeating the
        trained table (row ``p`` gets row ``p % old``), the copy initialisation Longformer uses to extend BERT's
        512 positions: far better than random rows for continued pretraining at the longer length (BERT's own
        recipe ends with a phase at longer sequences). ``config.max_position_embeddings`` is updated, so the model
        saves and reloads at the new size. Outputs for inputs no longer than the old table are unchanged.
        """
        if not isinstance(new_num_position_embeddings, int) or new_num_position_embeddings < 1:
            raise ValueError(
                f"`new_num_position_embeddings` must be a positive int, got {new_num_position_embeddings!r}."
            )
        old = self.get_position_embeddings()
        old_num = old.num_embeddings
        rows = torch.arange(new_num_position_embeddings, device=old.weight.device) % old_num  # (P_new,)
        new = nn.Embedding(
            new_num_position_embeddings, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype
        )
        with torch.no_grad():
            new.weight.copy_(old.weight[rows])  # (P_new, H)
        new.weight.requires_grad_(old.weight.requires_grad)
        self.base_model.embeddings.position_embeddings = new
        self.config.max_position_embeddings = new_num_position_embeddings


class BertModel(BertPreTrainedModel):
    """The bare BERT encoder: embeddings → encoder blocks → last hidden states and (optionally) the tanh pooler."""

    def __init__(self, config: HfSeqBertConfig, add_pooling_layer: bool = True) -> None:
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.word_embeddings = value

    @refuse_unknown_keywords
    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling | tuple:
        """Encode ``input_ids`` ``(B, T)`` (1 = token, 0 = padding in ``attention_mask``; segment ids 0/1).

        Returns ``BaseModelOutputWithPooling`` with ``last_hidden_state`` ``(B, T, H)``, ``pooler_output`` ``(B, H)``
        and, when asked (``output_hidden_states`` / ``output_attentions``, from the call or the config),
        ``hidden_states`` (embeddings + each layer) and ``attentions`` ``(B, nh, T, T)`` per layer.
        """
        self._check_inputs(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds)
        embeddings = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, T, H)
        mask = None  # no mask: attention without one (eager CPU checks whether anything is padded)
        if drop_all_ones_mask(attention_mask) is not None:
            mask = make_attention_mask(attention_mask, embeddings.shape[1])  # (B, 1, 1, T) True = attend
        last = self.encoder(embeddings, mask, **kwargs)  # (B, T, H)
        pooled = self.pooler(last) if self.pooler is not None else None  # (B, H)
        return BaseModelOutputWithPooling(last_hidden_state=last, pooler_output=pooled)


MASKED_LM_TIED_WEIGHTS = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight"}


def _head_output(output_cls: type[ModelOutput], outputs: BaseModelOutputWithPooling, **head_fields) -> ModelOutput:
    """A head's output: its own fields (loss, logits...) and the encoder's ``hidden_states`` / ``attentions``."""
    return output_cls(**head_fields, hidden_states=outputs.hidden_states, attentions=outputs.attentions)


def _classifier_layers(config: HfSeqBertConfig) -> tuple[nn.Dropout, nn.Linear]:
    """A classifier head's dropout (``classifier_dropout``, else ``hidden_dropout_prob``) and its linear layer
    ``hidden_size`` → ``num_labels``."""
    dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return nn.Dropout(dropout), nn.Linear(config.hidden_size, config.num_labels)


def _masked_lm_logits(
    head: BertLMPredictionHead, sequence_output: torch.Tensor, labels: torch.Tensor | None, sparse: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Vocabulary logits and (if labels) the masked-LM loss; sparse: only at labelled positions.

    Dense logits ``(B, T, V)`` come with the fused :func:`~.losses.lm_head_and_loss`, whose backward runs the
    vocabulary projection over the ~15 % labelled positions only; sparse logits are ``(N, V)`` for those positions.
    """
    if labels is not None and sparse:
        selected = labels != IGNORE_INDEX  # (B, T)
        sequence_output, labels = sequence_output[selected], labels[selected]  # (N, H), (N,)
    if head._forward_hooks or head._forward_pre_hooks:  # a wrapped head: call it as a module
        return lm_head_and_loss(head, sequence_output, labels)
    return lm_head_and_loss(head.decoder, head.transform(sequence_output), labels)


class BertForPreTraining(BertPreTrainedModel):
    """BERT with the two pretraining heads: masked-LM on every token and next-sentence prediction on ``[CLS]``."""

    _tied_weights_keys = MASKED_LM_TIED_WEIGHTS

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.post_init()

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BertForPreTrainingOutput | tuple:
        """``labels`` ``(B, T)``: original ids at masked positions, -100 elsewhere; ``next_sentence_label`` ``(B,)``:
        0 = B is the true continuation of A, 1 = B is random. ``loss`` = masked-LM CE + next-sentence CE."""
        if next_sentence_label is not None:
            check_label_range("next_sentence_label", next_sentence_label, 2, "number of next-sentence classes")
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        prediction_logits, mlm_loss = _masked_lm_logits(
            self.cls.predictions, outputs.last_hidden_state, labels, self.config.sparse_prediction
        )
        nsp_logits = self.cls.seq_relationship(outputs.pooler_output)  # (B, 2)
        loss = mlm_loss
        if next_sentence_label is not None:
            nsp_loss = masked_cross_entropy(nsp_logits, next_sentence_label)
            loss = nsp_loss if loss is None else loss + nsp_loss
        return _head_output(
            BertForPreTrainingOutput,
            outputs,
            loss=loss,
            prediction_logits=prediction_logits,
            seq_relationship_logits=nsp_logits,
        )


class BertForMaskedLM(BertPreTrainedModel):
    """BERT with the masked-LM head only (what ``pipeline("fill-mask")`` uses)."""

    _tied_weights_keys = MASKED_LM_TIED_WEIGHTS

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.post_init()

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput | tuple:
        """``labels`` ``(B, T)``: original ids at masked positions, -100 elsewhere → masked-LM cross-entropy (labels
        checked by the loss)."""
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits, loss = _masked_lm_logits(
            self.cls.predictions, outputs.last_hidden_state, labels, self.config.sparse_prediction
        )
        return _head_output(MaskedLMOutput, outputs, loss=loss, logits=logits)


class BertForSequenceClassification(BertPreTrainedModel):
    """BERT with dropout + a linear classifier on the pooled sentence vector.

    ``config.classifier_pooling`` chooses the vector the pooler (dense + tanh) reads, as ModernBERT's does before its
    head: "cls" (BERT's own, the ``[CLS]`` state) or "mean" (:func:`masked_mean` of the last hidden states over the
    real tokens). The weights are the same in both modes, so a checkpoint loads into either.
    """

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config)
        self.dropout, self.classifier = _classifier_layers(config)
        self.post_init()

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput | tuple:
        """``labels`` ``(B,)`` class ids (or floats for regression / multi-label) → ``loss``; ``logits`` ``(B, C)``."""
        mean_pooling = self.config.classifier_pooling == "mean"
        if mean_pooling and attention_mask is not None and checks_values(attention_mask):
            if not bool(attention_mask.any(dim=-1).all()):
                raise ValueError(
                    "`attention_mask` has a row without any token; classifier_pooling='mean' averages over the "
                    "tokens of each row, so every row needs at least one."
                )
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        if mean_pooling:
            pooled = self.bert.pooler.transform(masked_mean(outputs.last_hidden_state, attention_mask))  # (B, H)
        else:
            pooled = outputs.pooler_output  # (B, H) the [CLS] state through the pooler
        logits = self.classifier(self.dropout(pooled))  # (B, C)
        loss = (
            sequence_classification_loss(logits, labels, self.num_labels, self.config.problem_type)
            if labels is not None
            else None
        )
        return _head_output(SequenceClassifierOutput, outputs, loss=loss, logits=logits)


class BertForTokenClassification(BertPreTrainedModel):
    """BERT with dropout + a linear classifier on every token state (tagging, e.g. part of speech)."""

    def __init__(self, config: HfSeqBertConfig) -> None:
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout, self.classifier = _classifier_layers(config)
        self.post_init()

    @refuse_unknown_keywords
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput | tuple:
        """``labels`` ``(B, T)`` tag ids, -100 on positions to ignore (special tokens, word-piece continuations)."""
        outputs = self._encode(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, C)
        loss = token_classification_loss(logits, labels, self.num_labels) if labels is not None else None
        return _head_output(TokenClassifierOutput, outputs, loss=loss, logits=logits)


__all__ = [
    "BertForMaskedLM",
    "BertForPreTraining",
    "BertForPreTrainingOutput",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertPreTrainedModel",
]
