"""What the encoder-decoder families (RNN seq2seq and Transformer) share: teacher forcing and the LM head.

Both ``...ForConditionalGeneration`` heads build their decoder inputs from ``labels`` the same way: the labels are
validated, shifted one step right behind ``decoder_start_token_id`` (``-100`` becomes ``pad_token_id``) and must
line up with the decoder input. Both put the same head on their ``...Model`` (:class:`Seq2SeqLMHeadMixin`): the
vocabulary projection, the loss and the ``Seq2SeqLMOutput``. The modelling files import this module relatively, so
``save_pretrained`` copies it next to the weights for ``trust_remote_code`` loading.
"""

import copy
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.modeling_outputs import ModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple

from .compat import cache_argument, cache_output
from .losses import lm_head_and_loss
from .modeling_utils import refuse_unknown_keywords
from .seq2seq_pipelines import SEQ2SEQ_CUSTOM_PIPELINES
from .validation import IGNORE_INDEX, check_label_range, checks_values


def shift_tokens_right(
    labels: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int | None
) -> torch.Tensor:
    """Teacher forcing inputs: ``[start, y_1, ..., y_{T-1}]`` from labels ``(B, T)`` (-100 becomes ``pad_token_id``)."""
    if decoder_start_token_id is None:
        raise ValueError(
            "`decoder_start_token_id` is None in the config, so `labels` cannot be shifted into `decoder_input_ids`; "
            "set config.decoder_start_token_id or pass decoder_input_ids."
        )
    shifted = labels.new_zeros(labels.shape)  # (B, T)
    shifted[:, 1:] = labels[:, :-1].clone()
    shifted[:, 0] = decoder_start_token_id
    if pad_token_id is None:
        if checks_values(shifted) and bool((shifted == IGNORE_INDEX).any()):
            raise ValueError("`pad_token_id` is None in the config but labels contain -100; set config.pad_token_id.")
        return shifted
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def decoder_input_ids_for_labels(
    config: PretrainedConfig,
    labels: torch.Tensor,
    decoder_input_ids: torch.Tensor | None,
    decoder_inputs_embeds: torch.Tensor | None,
) -> torch.Tensor | None:
    """Validate seq2seq ``labels`` ``(B, T)`` (2-D, ``-100`` or ids in ``[0, vocab_size)``) and return the decoder
    input: ``decoder_input_ids`` as given, or ``shift_tokens_right(labels)`` when neither ``decoder_input_ids`` nor
    ``decoder_inputs_embeds`` was passed. Raises ``ValueError`` when the labels do not match the decoder input's
    ``(B, T)``."""
    if labels.dim() != 2:
        raise ValueError(f"`labels` must have shape (batch, target_len), got {tuple(labels.shape)}")
    check_label_range("labels", labels, config.vocab_size, "vocab_size")
    if decoder_input_ids is None and decoder_inputs_embeds is None:
        decoder_input_ids = shift_tokens_right(labels, config.pad_token_id, config.decoder_start_token_id)
    target_shape = (decoder_input_ids if decoder_input_ids is not None else decoder_inputs_embeds).shape[:2]
    if tuple(labels.shape) != tuple(target_shape):
        raise ValueError(
            f"`labels` shape {tuple(labels.shape)} does not match decoder_input_ids shape {tuple(target_shape)}"
        )
    return decoder_input_ids


def seq2seq_model_output(decoder_outputs: ModelOutput, encoder_outputs: ModelOutput, cache) -> Seq2SeqModelOutput:
    """Both ``...Model``s' output: the decoder's states and attention maps, the encoder's, and ``cache`` (what a
    family does not record stays None: the RNN decoder has no self-attention, nor cross-attention without one)."""
    return Seq2SeqModelOutput(
        last_hidden_state=decoder_outputs.last_hidden_state,
        **cache_output(cache),
        decoder_hidden_states=decoder_outputs.hidden_states,
        decoder_attentions=getattr(decoder_outputs, "attentions", None),
        cross_attentions=decoder_outputs.cross_attentions or None,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states,
        encoder_attentions=encoder_outputs.attentions,
    )


class Seq2SeqLMHeadMixin:
    """The ``...ForConditionalGeneration`` part of an encoder-decoder: ``self.model`` (its ``...Model``, with an
    ``encoder``) under ``self.lm_head`` (hidden size → vocabulary).

    Its ``forward`` is both heads' forward: it runs the model with teacher forcing from ``labels`` and returns the
    logits, the loss and the model's outputs as ``Seq2SeqLMOutput`` (fields the model does not return stay
    ``None``); the model checks the other arguments.
    """

    def _add_translation_pipelines(self) -> None:
        """``pipeline("translation")`` / ``pipeline("text2text-generation")`` in the config unless it names its own
        (see seq2seq_pipelines.py)."""
        if not getattr(self.config, "custom_pipelines", None):
            self.config.custom_pipelines = copy.deepcopy(SEQ2SEQ_CUSTOM_PIPELINES)

    def get_encoder(self, modality: str | None = None) -> nn.Module:
        return self.model.encoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Teacher-forcing decoder inputs from labels, shifted right behind ``decoder_start_token_id`` (used by
        ``DataCollatorForSeq2Seq``)."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @refuse_unknown_keywords
    @can_return_tuple
    @cache_argument
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: Any = None,
        cache: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput | tuple:
        """Logits ``(B, T, vocab_size)`` for every target position (teacher forcing) from ``self.model``'s outputs.

        ``labels`` ``(B, T)`` (``-100`` = ignored) give the cross-entropy ``loss`` and, when neither
        ``decoder_input_ids`` nor ``decoder_inputs_embeds`` is passed, the decoder inputs
        ``[decoder_start_token_id, y_1, ..., y_{T-1}]`` (and turn the cache off). ``kwargs``: the output switches
        (``output_attentions``, ``output_hidden_states``). ``return_dict=False`` (call or config) returns the tuple;
        ``past_key_values=`` is the deprecated name of ``cache=`` (accepted with transformers' warning)."""
        if labels is not None:
            decoder_input_ids = decoder_input_ids_for_labels(
                self.config, labels, decoder_input_ids, decoder_inputs_embeds
            )
            use_cache = False
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        # labels were checked by decoder_input_ids_for_labels: (B, T) like the decoder input, ids in the vocabulary
        logits, loss = lm_head_and_loss(self.lm_head, outputs.last_hidden_state, labels, checked=True)  # (B, T, V)
        # the model's fields under the same names (cache, decoder and encoder states, attention maps), None ones left out
        fields = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **fields)


__all__ = ["Seq2SeqLMHeadMixin", "decoder_input_ids_for_labels", "seq2seq_model_output", "shift_tokens_right"]
