"""Teacher-forcing helpers shared by the encoder-decoder families (RNN seq2seq and Transformer).

Both ``...ForConditionalGeneration`` heads build their decoder inputs from ``labels`` the same way: the labels are
validated, shifted one step right behind ``decoder_start_token_id`` (``-100`` becomes ``pad_token_id``) and must
line up with the decoder input. The modelling files import this module relatively, so ``save_pretrained`` copies it
next to the weights for ``trust_remote_code`` loading.
"""

from __future__ import annotations

import torch
from transformers import PretrainedConfig

from .fast_paths import reads_values
from .validation import IGNORE_INDEX, check_label_range


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
        if reads_values(shifted) and bool((shifted == IGNORE_INDEX).any()):
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


__all__ = ["decoder_input_ids_for_labels", "shift_tokens_right"]
