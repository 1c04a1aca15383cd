"""The one attention core of hf_seq.

Attention is three steps, exactly as the notes teach it:

1. **score** every key against every query (``dot``, ``scaled_dot``, ``general``/bilinear, ``additive``/Bahdanau,
   ``cosine``, or one added in one place with :func:`register_attention_score`),
2. **masked softmax** over the keys (padding mask, causal mask; a row whose keys are all masked gets zero weights,
   never NaN),
3. **weighted sum** of the values.

:func:`attend` is that function; attention and self-attention are the same call with different inputs
(``attend(q, K, V)`` with keys/values from the encoder, or from the sequence itself).
:class:`MultiHeadAttention` builds the Transformer's multi-head layer on the same core, with a fused projection,
an SDPA fast path and an eager path (:func:`attend`) that returns the weights and gives the same numbers.
The attention-RNN decoder, the Transformer and BERT all use this file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface

from .fast_paths import current_generation_steps, every_row_sees_a_key, reads_values, recalled

# ---------------------------------------------------------------------------------------------------------------
# 1. Scores
# ---------------------------------------------------------------------------------------------------------------

# build(query_size, key_size, hidden_size) -> the score's parameters, {attribute name: module}
ScoreBuildFn = Callable[[int, int, int], dict[str, nn.Module]]
# score(module, query (..., T_q, D_q), prepared keys (..., T_k, K)) -> scores (..., T_q, T_k)
ScoreTypeFn = Callable[["AttentionScore", torch.Tensor, torch.Tensor], torch.Tensor]
# prepare_keys(module, keys (..., T_k, D_k)) -> prepared keys (..., T_k, K)
PrepareKeysFn = Callable[["AttentionScore", torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ScoreType:
    """One kind of attention score function ``s(q, k)``, as :class:`AttentionScore` builds and runs it.

    Attributes:
        name: the value of ``kind=`` (and of an RNN seq2seq config's ``attention``).
        score: ``score(module, query, prepared_keys) -> (..., T_q, T_k)``; ``module`` is the
            :class:`AttentionScore`, holding the parameters ``build`` made and ``query_size`` / ``key_size``.
        prepare_keys: ``prepare_keys(module, keys) -> prepared_keys``, the part that depends on the keys only (run
            once per source batch by a decoder that scores the same encoder states at every step); default: the keys
            as they are.
        build: ``build(query_size, key_size, hidden_size) -> {name: module}``, the score's parameters (registered on
            the :class:`AttentionScore` under those names, in that order); default: none.
        same_size: the score compares ``q`` and ``k`` directly, so it needs ``query_size == key_size`` (a model with
            keys of another width maps them to the query's first, as the RNN seq2seq decoder does).
    """

    name: str
    score: ScoreTypeFn
    prepare_keys: PrepareKeysFn | None = None
    build: ScoreBuildFn | None = None
    same_size: bool = False


SCORE_TYPES: dict[str, ScoreType] = {}


def register_attention_score(score_type: ScoreType) -> ScoreType:
    """Make ``score_type`` available as ``AttentionScore(score_type.name, ...)`` and thus as an RNN seq2seq config's
    ``attention`` value (as :func:`~.recurrent_cells.register_cell` does for cells)."""
    if not isinstance(score_type, ScoreType):
        raise TypeError(f"register_attention_score takes a ScoreType, got {type(score_type).__name__}")
    if not isinstance(score_type.name, str) or not score_type.name or score_type.name == "none":
        raise ValueError(f'a score type needs a name other than "" and "none", got {score_type.name!r}')
    SCORE_TYPES[score_type.name] = score_type
    return score_type


def get_score_type(name: str) -> ScoreType:
    """Look up a registered score type; ``ValueError`` naming the allowed values otherwise."""
    if name not in SCORE_TYPES:
        raise ValueError(f"`kind` must be one of {sorted(SCORE_TYPES)}, got {name!r}.")
    return SCORE_TYPES[name]


def _transposed(keys: torch.Tensor) -> torch.Tensor:
    return keys.transpose(-1, -2)  # (..., K, T_k)


# dot: qᵀk
register_attention_score(ScoreType("dot", score=lambda m, q, k: q @ _transposed(k), same_size=True))
# scaled_dot: qᵀk / sqrt(D_k), the Transformer's score
register_attention_score(
    ScoreType("scaled_dot", score=lambda m, q, k: (q @ _transposed(k)) / math.sqrt(m.key_size), same_size=True)
)
# general: kᵀ W q, a bilinear form with a learned W (Luong's "general"); W maps q into key space
register_attention_score(
    ScoreType(
        "general",
        score=lambda m, q, k: m.bilinear(q) @ _transposed(k),
        build=lambda q_size, k_size, h_size: {"bilinear": nn.Linear(q_size, k_size, bias=False)},
    )
)


def _additive_score(module: AttentionScore, query: torch.Tensor, prepared_key: torch.Tensor) -> torch.Tensor:
    """``vᵀ tanh(W₁k + W₂q)``: (..., T_q, 1, A) + (..., 1, T_k, A) → tanh → v → (..., T_q, T_k)."""
    hidden = torch.tanh(module.query_proj(query).unsqueeze(-2) + prepared_key.unsqueeze(-3))
    return module.energy(hidden).squeeze(-1)


# additive: vᵀ tanh(W₁k + W₂q), Bahdanau's MLP score; W₁k prepared once
register_attention_score(
    ScoreType(
        "additive",
        score=_additive_score,
        prepare_keys=lambda m, k: m.key_proj(k),  # (..., T_k, A)
        build=lambda q_size, k_size, h_size: {
            "key_proj": nn.Linear(k_size, h_size, bias=False),  # W₁
            "query_proj": nn.Linear(q_size, h_size, bias=True),  # W₂ (+ bias)
            "energy": nn.Linear(h_size, 1, bias=False),  # v
        },
    )
)
# cosine: qᵀk / (|q| |k|); the keys normalised once
register_attention_score(
    ScoreType(
        "cosine",
        score=lambda m, q, k: F.normalize(q, dim=-1) @ _transposed(k),
        prepare_keys=lambda m, k: F.normalize(k, dim=-1),
        same_size=True,
    )
)

# the built-in score functions (every registered one: SCORE_TYPES)
SCORE_FUNCTIONS = ("dot", "scaled_dot", "general", "additive", "cosine")


class AttentionScore(nn.Module):
    """Score function ``s(q, k)`` giving ``(..., T_q, T_k)`` scores for queries ``(..., T_q, D_q)`` and keys ``(..., T_k, D_k)``.

    ``kind`` is a registered :class:`ScoreType` (:func:`register_attention_score`); the built-in ones:

    * ``dot``:        ``qᵀk`` (needs ``D_q == D_k``)
    * ``scaled_dot``: ``qᵀk / sqrt(D_k)`` (the Transformer's score)
    * ``general``:    ``kᵀ W q``, a bilinear form with a learned ``W`` (Luong's "general"), any ``D_q``, ``D_k``
    * ``additive``:   ``vᵀ tanh(W₁k + W₂q)`` (Bahdanau's MLP score), any ``D_q``, ``D_k``
    * ``cosine``:     ``qᵀk / (|q| |k|)``

    Keys are transformed once by :meth:`prepare_keys` (e.g. ``W₁k`` for ``additive``), so a decoder that scores the
    same encoder states at every step pays that cost once.
    """

    def __init__(self, kind: str, query_size: int, key_size: int, hidden_size: int | None = None) -> None:
        super().__init__()
        score_type = get_score_type(kind)
        if score_type.same_size and query_size != key_size:
            raise ValueError(
                f"The {kind!r} score needs query_size == key_size, got query_size={query_size} and "
                f"key_size={key_size}; use 'general' or 'additive' for different sizes."
            )
        self.kind = kind
        self.score_type = score_type
        self.query_size = query_size
        self.key_size = key_size
        if score_type.build is not None:
            for name, module in score_type.build(query_size, key_size, hidden_size or key_size).items():
                self.add_module(name, module)

    def prepare_keys(self, key: torch.Tensor) -> torch.Tensor:
        """Transform the keys once: ``(..., T_k, D_k)`` → what :meth:`score` expects."""
        prepare = self.score_type.prepare_keys
        return key if prepare is None else prepare(self, key)

    def score(self, query: torch.Tensor, prepared_key: torch.Tensor) -> torch.Tensor:
        """Scores ``(..., T_q, T_k)`` of queries ``(..., T_q, D_q)`` against keys from :meth:`prepare_keys`."""
        return self.score_type.score(self, query, prepared_key)

    def forward(self, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        return self.score(query, self.prepare_keys(key))

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, query_size={self.query_size}, key_size={self.key_size}"


def scaled_dot_score(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``qᵀk / sqrt(d)`` for ``(..., T_q, d)`` and ``(..., T_k, d)`` → ``(..., T_q, T_k)`` (parameter-free)."""
    return (query @ key.transpose(-1, -2)) / math.sqrt(query.size(-1))


# ---------------------------------------------------------------------------------------------------------------
# 2. Masks and the masked softmax
# ---------------------------------------------------------------------------------------------------------------


def causal_mask(query_length: int, key_length: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``(T_q, T_k)`` mask, True where query ``i`` may see key ``j``.

    The queries are the last ``T_q`` positions of the ``T_k`` keys (so a cached decoder step with ``T_k - T_q``
    earlier positions sees all of them plus itself).
    """
    past = key_length - query_length
    rows = torch.arange(query_length, device=device).unsqueeze(1) + past  # (T_q, 1) absolute query positions
    cols = torch.arange(key_length, device=device).unsqueeze(0)  # (1, T_k)
    return cols <= rows


def make_attention_mask(
    key_padding_mask: torch.Tensor | None,
    query_length: int,
    key_length: int | None = None,
    causal: bool = False,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Combine a padding mask and/or a causal mask into one boolean ``(B or 1, 1, T_q, T_k)`` mask (True = attend).

    ``key_padding_mask`` is the usual ``attention_mask`` ``(B, T_k)`` with 1 for tokens and 0 for padding. Returns
    ``None`` when nothing is masked, which lets the SDPA fast path skip the mask entirely.
    """
    mask = None
    if key_padding_mask is not None:
        if key_length is not None and key_padding_mask.shape[-1] != key_length:
            raise ValueError(f"attention_mask has length {key_padding_mask.shape[-1]} but there are {key_length} keys.")
        key_length = key_padding_mask.shape[-1]
        device = key_padding_mask.device
        mask = key_padding_mask.bool()[:, None, None, :]  # (B, 1, 1, T_k)
    if causal:
        if key_length is None:
            key_length = query_length
        tri = causal_mask(query_length, key_length, device)[None, None]  # (1, 1, T_q, T_k)
        mask = tri if mask is None else mask & tri
    return mask


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax of ``scores`` over ``dim`` where ``mask`` (broadcastable, True = keep) is False gets weight exactly 0.

    A row with no unmasked entry gets all-zero weights (not NaN), so padded query positions stay finite.
    """
    if mask is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=dim).masked_fill(~mask, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# 3. The one attention function
# ---------------------------------------------------------------------------------------------------------------

ScoreFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    score: ScoreFn | AttentionScore | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Attn(Q, K, V)``: score → masked softmax → weighted sum of the values.

    Args:
        query: ``(..., T_q, D_q)``; key: ``(..., T_k, D_k)``; value: ``(..., T_k, D_v)``.
        mask: boolean, broadcastable to ``(..., T_q, T_k)``, True where a query may attend to a key.
        score: a score function or :class:`AttentionScore`; default scaled dot product.
        dropout_p: dropout on the attention weights (only when ``training``).

    Returns:
        ``(context (..., T_q, D_v), weights (..., T_q, T_k))``. Each weight row sums to 1 over the unmasked keys and
        is exactly 0 on masked keys (all 0 when every key is masked).
    """
    scores = (score or scaled_dot_score)(query, key)  # (..., T_q, T_k)
    weights = masked_softmax(scores, mask)
    attn = F.dropout(weights, p=dropout_p, training=True) if (training and dropout_p > 0) else weights
    return attn @ value, weights  # (..., T_q, D_v), (..., T_q, T_k)


# ---------------------------------------------------------------------------------------------------------------
# Multi-head attention (Transformer, BERT)
# ---------------------------------------------------------------------------------------------------------------


ROWS_SEE_A_KEY = "every_row_sees_a_key"


def remember_rows_see_a_key(mask: torch.Tensor) -> torch.Tensor:
    """``mask``, after noting (eager CPU, inside ``generate()``: ``fast_paths.remembered``) whether every query row
    of it sees a key, so that :func:`sdpa_attend` does not read it again for each layer and step that gets this
    same mask object. Elsewhere nothing is read or noted here."""
    steps = current_generation_steps() if reads_values(mask) else None
    if steps is not None:
        steps.remember(mask, ROWS_SEE_A_KEY, lambda: every_row_sees_a_key(mask.any(dim=-1, keepdim=True)))
    return mask


def sdpa_attend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Fast path of :func:`attend` with the scaled dot score: ``torch.nn.functional.scaled_dot_product_attention``.

    Gives the same numbers as ``attend(query, key, value, mask)`` (also for rows whose keys are all masked, which
    come out as zeros instead of SDPA's NaN). ``is_causal`` is used only when there is no other mask; ``scale``
    (default ``1 / sqrt(d)``) is SDPA's.

    One static-shape path everywhere: the mask goes to SDPA as a mask, and rows without a visible key are repaired
    with two elementwise passes, without reading a value on the host. Only in eager mode on CPU (:func:`~.fast_paths.every_row_sees_a_key`,
    where reading a value costs no device synchronisation) is the repair skipped when every row sees a key.
    """
    if mask is None:
        return F.scaled_dot_product_attention(query, key, value, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if recalled(mask, ROWS_SEE_A_KEY):  # known for this mask (the cross-attention mask of a generate() call)
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): rows with at least one visible key
    if every_row_sees_a_key(has_key):
        # Every row sees a key (the usual padding mask): nothing to repair (saves two elementwise passes).
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    safe_mask = mask | ~has_key  # let empty rows see everything (finite), then zero them below
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=safe_mask, dropout_p=dropout_p, scale=scale)
    return out.masked_fill(~has_key, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# Attention functions behind ``attn_implementation`` (transformers' AttentionInterface)
# ---------------------------------------------------------------------------------------------------------------


def _non_default_scale(scaling: float | None, query: torch.Tensor) -> float | None:
    """``scaling`` when it differs from ``1 / sqrt(head_dim)``, else None (the functions' own default formula)."""
    return None if scaling is None or scaling == query.size(-1) ** -0.5 else scaling


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """hf_seq's ``"eager"`` attention function (transformers' attention-function signature): :func:`attend`.

    ``query`` / ``key`` / ``value`` ``(B, nh, T, hs)``, ``attention_mask`` boolean ``(B or 1, 1, T_q, T_k)`` (True =
    attend) or None; ``is_causal`` masks future keys when there is no mask. Returns ``((B, T_q, nh, hs), weights
    (B, nh, T_q, T_k))``; a query row whose keys are all masked gets zero weights and a zero output, never NaN.
    """
    mask = attention_mask
    if is_causal and mask is None:
        mask = make_attention_mask(None, query.shape[-2], key.shape[-2], causal=True, device=query.device)
    scale = _non_default_scale(scaling, query)
    score = None if scale is None else (lambda q, k: (q @ k.transpose(-1, -2)) * scale)
    context, weights = attend(query, key, value, mask, score=score, dropout_p=dropout, training=module.training)
    return context.transpose(1, 2), weights  # (B, T_q, nh, hs), (B, nh, T_q, T_k)


def sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hf_seq's ``"sdpa"`` attention function: :func:`sdpa_attend` (same inputs and numbers as
    :func:`eager_attention_forward`, fully-masked rows give zeros). SDPA computes no weights: a call with
    ``output_attentions=True`` runs :func:`eager_attention_forward` and returns its weights."""
    if kwargs.get("output_attentions"):
        return eager_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal)
    scale = _non_default_scale(scaling, query)
    context = sdpa_attend(query, key, value, attention_mask, dropout_p=dropout, is_causal=is_causal, scale=scale)
    return context.transpose(1, 2), None  # (B, T_q, nh, hs)


class HfSeqAttentionInterface(AttentionInterface):
    """transformers' ``AttentionInterface`` with hf_seq's own ``"eager"`` and ``"sdpa"`` in its LOCAL mapping.

    Those two keys run :func:`eager_attention_forward` / :func:`sdpa_attention_forward` for hf_seq's models only
    (transformers' global entries, which its own models use, stay as they are); every other key comes from the
    global registry: ``"flex_attention"`` and any function registered with ``AttentionInterface.register(name, fn)``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._local_mapping = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}

    def attention_function(self, attn_implementation: str | None) -> Callable:
        """The function for ``attn_implementation`` (None: ``"sdpa"``); a ValueError naming the registered ones if
        there is none (plain dict look-ups, which ``torch.compile(fullgraph=True)`` traces)."""
        name = attn_implementation or "sdpa"
        function = self._local_mapping.get(name) or self._global_mapping.get(name)
        if function is None:
            raise ValueError(
                f"attn_implementation must be one of {sorted(self.keys())} (register another with "
                f"transformers.AttentionInterface.register(name, function)), got {name!r}."
            )
        return function


ALL_ATTENTION_FUNCTIONS = HfSeqAttentionInterface()


def flex_block_mask(
    mask: torch.Tensor | None, is_causal: bool, query: torch.Tensor, key: torch.Tensor
):  # -> torch.nn.attention.flex_attention.BlockMask | None
    """The ``BlockMask`` that flex attention needs for hf_seq's boolean mask ``(B or 1, 1, T_q, T_k)`` (True =
    attend) or for plain causal masking (``mask`` None, ``is_causal``); None when nothing is masked."""
    if mask is None and not is_causal:
        return None
    from torch.nn.attention.flex_attention import create_block_mask

    batch, _, query_length, _ = query.shape
    key_length = key.shape[-2]
    if mask is None:
        past = key_length - query_length

        def mask_mod(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + past

    else:
        dense = mask.expand(batch, 1, query_length, key_length)

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[b, 0, q_idx, kv_idx]

    return create_block_mask(mask_mod, batch, None, query_length, key_length, device=query.device)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``l`` heads of scaled-dot attention concatenated, then ``W_O``.

    Self-attention uses one fused ``W_QKV`` projection; cross-attention (``is_cross_attention=True``) projects the
    queries with ``W_Q`` and the encoder states with a fused ``W_KV``. The attention function is the one
    ``config._attn_implementation`` names in :data:`ALL_ATTENTION_FUNCTIONS` (read at every call, so
    ``model.set_attn_implementation(...)`` applies at once; no config: ``"sdpa"``): ``"sdpa"`` runs
    :func:`sdpa_attention_forward`, ``"eager"`` :func:`eager_attention_forward` (which returns the attention
    weights), ``"flex_attention"`` transformers' flex attention (given a ``BlockMask``), any other registered name its
    function, given the boolean mask (True = attend, or None with ``is_causal=True`` for plain causal masking). With a
    ``cache`` (``DynamicCache`` or ``EncoderDecoderCache``) self-attention appends this step's keys/values, and
    cross-attention computes the encoder keys/values once and reuses them (beam search reorders the cache).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        is_cross_attention: bool = False,
        kv_dim: int | None = None,
        layer_idx: int | None = None,
        config=None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ValueError(
                f"The hidden size ({embed_dim}) must be divisible by the number of attention heads ({num_heads})."
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.dropout = dropout
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.config = config  # the model's config: its `_attn_implementation` picks the attention function
        if is_cross_attention:
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W_Q
            self.kv_proj = nn.Linear(kv_dim or embed_dim, 2 * embed_dim, bias=bias)  # [W_K; W_V]
        else:
            self.qkv_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)  # W_O

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)

    def _cross_key_values(self, key_value_states: torch.Tensor | None, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder keys/values ``(B, nh, S, hs)``: from the cache when already computed, else projected (and cached)."""
        if cache is not None and cache.is_updated.get(self.layer_idx, False):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        if key_value_states is None:
            raise ValueError("Cross-attention needs `encoder_hidden_states` (key_value_states) or a filled cache.")
        key, value = self.kv_proj(key_value_states).chunk(2, dim=-1)  # 2 × (B, S, E)
        key, value = self._split_heads(key), self._split_heads(value)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache=None,
        is_causal: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``hidden_states`` ``(B, T, E)``.

        Args:
            key_value_states: encoder states ``(B, S, D_kv)`` for cross-attention.
            attention_mask: boolean ``(B or 1, 1, T, T_k)`` from :func:`make_attention_mask` (True = attend), or None.
            cache: ``DynamicCache`` / ``EncoderDecoderCache`` for incremental decoding.
            is_causal: causal self-attention without an explicit mask (lets SDPA use its causal kernel).
            kwargs: transformers' keyword arguments (``output_attentions=True``: ``"sdpa"`` returns the weights too),
                passed on to the attention function.

        Returns:
            ``(output (B, T, E), weights (B, nh, T, T_k) or None)`` (the weights the attention function gives).
        """
        batch, length, _ = hidden_states.shape
        if self.is_cross_attention:
            query = self._split_heads(self.q_proj(hidden_states))  # (B, nh, T, hs)
            key, value = self._cross_key_values(key_value_states, cache)  # (B, nh, S, hs)
        else:
            query, key, value = (self._split_heads(t) for t in self.qkv_proj(hidden_states).chunk(3, dim=-1))
            if cache is not None:
                self_cache = getattr(cache, "self_attention_cache", cache)
                key, value = self_cache.update(key, value, self.layer_idx)  # (B, nh, T_past + T, hs)

        if is_causal and attention_mask is None and key.shape[-2] != length:
            # A cached step: the new queries see every earlier position, so no mask is needed for one query.
            is_causal = False
            if length > 1:
                attention_mask = make_attention_mask(None, length, key.shape[-2], causal=True, device=key.device)

        implementation = getattr(self.config, "_attn_implementation", None)
        attention_function = ALL_ATTENTION_FUNCTIONS.attention_function(implementation)
        if implementation == "flex_attention":
            attention_mask, is_causal = flex_block_mask(attention_mask, is_causal, query, key), False
        context, weights = attention_function(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=is_causal,
            **kwargs,
        )
        context = context.reshape(batch, length, self.embed_dim)  # (B, T, E)
        return self.out_proj(context), weights

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, cross={self.is_cross_attention}"
