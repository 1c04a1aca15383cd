"""Generic Transformer blocks shared by the Transformer encoder-decoder and BERT.

Each block is "sub-layer + residual + LayerNorm" around the one attention core (:mod:`.attention`):

* :class:`TransformerEncoderBlock` = self-attention → position-wise feed-forward,
* :class:`TransformerDecoderBlock` = masked self-attention → cross-attention → position-wise feed-forward.

``norm_position="post"`` is the original paper's (and BERT's) ``x = LayerNorm(x + Sublayer(x))``;
``norm_position="pre"`` is ``x = x + Sublayer(LayerNorm(x))`` (the annotated Transformer's code), which then needs a
final LayerNorm after the last block — the owning stack adds it.

The two blocks are ``transformers``' ``GradientCheckpointingLayer``: ``model.gradient_checkpointing_enable()`` (and
Trainer's ``gradient_checkpointing=True``) recompute each block in the backward pass instead of keeping its
activations. Their CPU speed tricks (:class:`Dropout`'s cheaper mask, the padding-free feed-forward) run only in eager
mode on CPU (``hf_seq.fast_paths``); compiled, exported or on an accelerator the blocks are plain static-shape code.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import MultiHeadAttention
from .fast_paths import cheap_dropout, int32_dropout, on_token_rows

NORM_POSITIONS = ("post", "pre")


def sinusoidal_position_table(num_positions: int, dim: int) -> torch.Tensor:
    """The paper's fixed position table ``(num_positions, dim)``.

    ``PE[pos, 2i] = sin(pos / 10000^(2i/dim))`` and ``PE[pos, 2i+1] = cos(pos / 10000^(2i/dim))``.
    """
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (ceil(dim/2),)
    table = torch.zeros(num_positions, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class Dropout(nn.Dropout):
    """``nn.Dropout``; eager on CPU its mask comes from the fast path :func:`~.fast_paths.int32_dropout` (same ``p``,
    same scaling, a cheaper random mask). Other devices, compiled or exported code (whose own dropout kernels are
    fused), ``inplace=True`` and ``p`` outside (0, 1) use ``nn.Dropout`` itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and 0.0 < self.p < 1.0 and not self.inplace and cheap_dropout(x):
            return int32_dropout(x, self.p)  # the fast path (fast_paths.py)
        return super().forward(x)


class FeedForward(nn.Module):
    """Position-wise feed-forward network ``fc2(dropout(act(fc1(x))))``."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str = "relu", activation_dropout: float = 0.0) -> None:
        super().__init__()
        if activation not in ACT2FN:
            raise ValueError(f"activation_function must be one of {sorted(ACT2FN)}, got {activation!r}.")
        self.fc1 = nn.Linear(d_model, ffn_dim)
        self.act = ACT2FN[activation]
        self.dropout = Dropout(activation_dropout)
        self.fc2 = nn.Linear(ffn_dim, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(self.act(self.fc1(x))))  # (B, T, d_model)


class ResidualNorm(nn.Module):
    """Residual connection + LayerNorm around one sub-layer, post-LN or pre-LN."""

    def __init__(self, d_model: int, dropout: float, norm_position: str, eps: float) -> None:
        super().__init__()
        if norm_position not in NORM_POSITIONS:
            raise ValueError(f"norm_position must be one of {NORM_POSITIONS}, got {norm_position!r}.")
        self.pre = norm_position == "pre"
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = Dropout(dropout)

    def normed_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer reads: ``LayerNorm(x)`` for pre-LN, ``x`` for post-LN."""
        return self.norm(x) if self.pre else x

    def add(self, x: torch.Tensor, sublayer_out: torch.Tensor) -> torch.Tensor:
        """Add the sub-layer output to the residual stream (and normalise for post-LN)."""
        out = x + self.dropout(sublayer_out)
        return out if self.pre else self.norm(out)


def feed_forward_sublayer(
    residual: ResidualNorm,
    ffn: FeedForward,
    x: torch.Tensor,
    token_rows: torch.Tensor | None = None,
    token_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The position-wise sub-layer ``x → residual.add(x, ffn(residual.normed_input(x)))`` on ``(B, T, d)``.

    In a padded batch the padding rows pass through unchanged (no real token reads them: their keys are masked), on
    every path, so eager, compiled and exported models give the same values everywhere:

    * ``token_rows`` (flat indices into ``B * T`` of the real tokens; eager CPU only, its length is data-dependent):
      the network runs on those rows only — it is most of a block's matrix products;
    * ``token_mask`` (``(B, T)`` bool, True = real token; compiled, exported, accelerators): every row goes through
      the network and the padding rows are put back with one ``where`` (static shapes, no host read).
    """

    def sublayer(h: torch.Tensor) -> torch.Tensor:
        return residual.add(h, ffn(residual.normed_input(h)))

    if token_rows is not None:
        return on_token_rows(sublayer, x, token_rows)  # the fast path (fast_paths.py): real tokens' rows only
    out = sublayer(x)  # (B, T, d)
    return out if token_mask is None else torch.where(token_mask.unsqueeze(-1), out, x)


class _TransformerBlock(GradientCheckpointingLayer):
    """The sub-layers of a Transformer block, each with residual + LayerNorm: self-attention, cross-attention when
    ``has_cross_attention`` (the decoder's), feed-forward; built in this order (the order of the state dict).

    ``config`` (the model's) is handed to the attention modules, whose attention function
    ``config._attn_implementation`` names (no config: ``"sdpa"``)."""

    has_cross_attention = False

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        ffn_dim: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_position: str = "post",
        layer_norm_eps: float = 1e-5,
        layer_idx: int | None = None,
        config=None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention_dropout, layer_idx=layer_idx, config=config)
        self.self_attn_residual = ResidualNorm(d_model, dropout, norm_position, layer_norm_eps)
        if self.has_cross_attention:
            self.cross_attn = MultiHeadAttention(
                d_model, num_heads, attention_dropout, is_cross_attention=True, layer_idx=layer_idx, config=config
            )
            self.cross_attn_residual = ResidualNorm(d_model, dropout, norm_position, layer_norm_eps)
        self.ffn = FeedForward(d_model, ffn_dim, activation, activation_dropout)
        self.ffn_residual = ResidualNorm(d_model, dropout, norm_position, layer_norm_eps)


class TransformerEncoderBlock(_TransformerBlock):
    """Encoder block: self-attention + feed-forward, each with residual + LayerNorm (see :class:`_TransformerBlock`)."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_rows: torch.Tensor | None = None,
        token_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """``hidden_states`` ``(B, T, d)``, boolean ``attention_mask`` ``(B, 1, 1|T, T)`` → ``(B, T, d)``.

        ``token_rows`` (eager CPU) or ``token_mask``: the real tokens; the feed-forward sub-layer leaves the padding
        rows unchanged (see :func:`feed_forward_sublayer`). ``kwargs`` (transformers' keyword arguments) go to the
        attention function; the attention weights are the ``self_attn`` module's second output.
        """
        x = hidden_states
        attn_out, _ = self.self_attn(self.self_attn_residual.normed_input(x), attention_mask=attention_mask, **kwargs)
        x = self.self_attn_residual.add(x, attn_out)
        return feed_forward_sublayer(self.ffn_residual, self.ffn, x, token_rows, token_mask)


class TransformerDecoderBlock(_TransformerBlock):
    """Decoder block: masked self-attention + cross-attention + feed-forward, each with residual + LayerNorm.

    ``config`` (the model's) is handed to both attention modules (see :class:`_TransformerBlock`)."""

    has_cross_attention = True

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor | None,
        self_attention_mask: torch.Tensor | None = None,
        cross_attention_mask: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> torch.Tensor:
        """Decoder states ``(B, T, d)`` → ``(B, T, d)``.

        ``self_attention_mask`` None means plain causal masking (SDPA's causal kernel); pass a boolean mask from
        :func:`~.attention.make_attention_mask` (``causal=True``) when the decoder input has padding. Pass
        ``encoder_hidden_states`` positionally: under gradient checkpointing with ``use_reentrant=True`` only
        positional tensors carry their gradient. ``kwargs`` (transformers' keyword arguments) go to the attention
        functions; the weights are the second outputs of the ``self_attn`` and ``cross_attn`` modules.
        """
        x = hidden_states
        attn_out, _ = self.self_attn(
            self.self_attn_residual.normed_input(x),
            attention_mask=self_attention_mask,
            cache=cache,
            is_causal=self_attention_mask is None,
            **kwargs,
        )
        x = self.self_attn_residual.add(x, attn_out)
        cross_out, _ = self.cross_attn(
            self.cross_attn_residual.normed_input(x),
            key_value_states=encoder_hidden_states,
            attention_mask=cross_attention_mask,
            cache=cache,
            **kwargs,
        )
        x = self.cross_attn_residual.add(x, cross_out)
        return feed_forward_sublayer(self.ffn_residual, self.ffn, x)
