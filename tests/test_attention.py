"""Tests of the one attention core (hf_seq/attention.py) and the shared Transformer blocks (hf_seq/blocks.py)."""

import math

import pytest
import torch
from torch import nn
from transformers import PreTrainedConfig

from hf_seq.attention import (
    AttentionScore,
    MultiHeadAttention,
    attend,
    causal_mask,
    make_attention_mask,
    masked_softmax,
    sdpa_attend,
)
from hf_seq.blocks import TransformerDecoderBlock, TransformerEncoderBlock, sinusoidal_position_table


def test_score_functions_hand_computed():
    q = torch.tensor([[[1.0, 2.0]]])  # (1, 1, 2)
    k = torch.tensor([[[3.0, 0.0], [1.0, 1.0]]])  # (1, 2, 2)
    dot = AttentionScore("dot", 2, 2)
    assert torch.allclose(dot(q, k), torch.tensor([[[3.0, 3.0]]]))
    sdot = AttentionScore("scaled_dot", 2, 2)
    assert torch.allclose(sdot(q, k), torch.tensor([[[3.0, 3.0]]]) / math.sqrt(2))
    cos = AttentionScore("cosine", 2, 2)
    expected = torch.tensor([[[3.0 / (math.sqrt(5) * 3.0), 3.0 / (math.sqrt(5) * math.sqrt(2))]]])
    assert torch.allclose(cos(q, k), expected)
    gen = AttentionScore("general", 2, 2)
    with torch.no_grad():
        gen.bilinear.weight.copy_(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))  # W q = [2, 2]
    assert torch.allclose(gen(q, k), torch.tensor([[[6.0, 4.0]]]))
    add = AttentionScore("additive", 2, 2, hidden_size=1)
    with torch.no_grad():
        add.key_proj.weight.copy_(torch.tensor([[1.0, 0.0]]))  # W1 k = k_0
        add.query_proj.weight.copy_(torch.tensor([[0.0, 1.0]]))  # W2 q = q_1
        add.query_proj.bias.zero_()
        add.energy.weight.copy_(torch.tensor([[2.0]]))  # v
    expected = 2.0 * torch.tanh(torch.tensor([[[3.0 + 2.0, 1.0 + 2.0]]]))
    assert torch.allclose(add(q, k), expected)


def test_score_rejects_bad_kind_and_sizes():
    with pytest.raises(ValueError, match="kind"):
        AttentionScore("bilinearish", 2, 2)
    with pytest.raises(ValueError, match="query_size"):
        AttentionScore("dot", 3, 2)


def test_masked_softmax_zero_on_padding_and_no_nan():
    scores = torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]]).bool()[:, None, :]
    w = masked_softmax(scores, mask)
    assert torch.all(w[0, :, 2:] == 0)
    assert torch.allclose(w[0].sum(-1), torch.ones(3))
    assert torch.all(w[1] == 0)  # fully masked rows: zeros, not NaN
    assert not torch.isnan(w).any()


def test_causal_mask_with_past():
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_eager_attend_with_padding(causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8), torch.randn(3, 2, 5, 8)
    pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [0, 0, 1, 1, 1]])
    mask = make_attention_mask(pad, 5, causal=causal)
    eager, _ = attend(q, k, v, mask)
    fast = sdpa_attend(q, k, v, mask)
    assert torch.allclose(eager, fast, atol=1e-6)
    assert not torch.isnan(fast).any()


def test_multihead_matches_torch_multihead_attention():
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(16, 4, batch_first=True)
    mha = MultiHeadAttention(16, 4)
    with torch.no_grad():
        mha.qkv_proj.weight.copy_(ref.in_proj_weight)
        mha.qkv_proj.bias.copy_(ref.in_proj_bias)
        mha.out_proj.weight.copy_(ref.out_proj.weight)
        mha.out_proj.bias.copy_(ref.out_proj.bias)
    x = torch.randn(2, 6, 16)
    pad = torch.tensor([[1] * 6, [1, 1, 1, 1, 0, 0]])
    expected, expected_w = ref(x, x, x, key_padding_mask=~pad.bool(), average_attn_weights=False)
    for impl in ("eager", "sdpa"):
        mha.config = PreTrainedConfig(attn_implementation=impl)  # the model's config picks the attention function
        out, w = mha(x, attention_mask=make_attention_mask(pad, 6), output_attentions=True)
        assert torch.allclose(out, expected, atol=1e-5)
        assert torch.allclose(w, expected_w, atol=1e-6)
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_encoder_block_post_ln_matches_torch_layer():
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    blk = TransformerEncoderBlock(16, 4, 32, dropout=0.0).eval()
    with torch.no_grad():
        blk.self_attn.qkv_proj.weight.copy_(ref.self_attn.in_proj_weight)
        blk.self_attn.qkv_proj.bias.copy_(ref.self_attn.in_proj_bias)
        blk.self_attn.out_proj.load_state_dict(ref.self_attn.out_proj.state_dict())
        blk.ffn.fc1.load_state_dict(ref.linear1.state_dict())
        blk.ffn.fc2.load_state_dict(ref.linear2.state_dict())
        blk.self_attn_residual.norm.load_state_dict(ref.norm1.state_dict())
        blk.ffn_residual.norm.load_state_dict(ref.norm2.state_dict())
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]])
    expected = ref(x, src_key_padding_mask=~pad.bool())
    out = blk(x, make_attention_mask(pad, 5))
    assert torch.allclose(out[0], expected[0], atol=1e-5)
    assert torch.allclose(out[1, :3], expected[1, :3], atol=1e-5)


def test_decoder_block_cached_steps_equal_full_pass():
    from transformers import DynamicCache, EncoderDecoderCache

    torch.manual_seed(0)
    blk = TransformerDecoderBlock(16, 4, 32, dropout=0.0, layer_idx=0).eval()
    x, enc = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    enc_mask = make_attention_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), 1)
    full = blk(x, enc, cross_attention_mask=enc_mask)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    steps = [blk(x[:, t : t + 1], enc, cross_attention_mask=enc_mask, cache=cache) for t in range(5)]
    assert torch.allclose(torch.cat(steps, 1), full, atol=1e-5)
    assert cache.is_updated[0]


def test_sinusoidal_table_formula():
    table = sinusoidal_position_table(50, 16)
    pos, i = 7, 3
    assert torch.isclose(table[pos, 2 * i], torch.tensor(math.sin(pos / 10000 ** (2 * i / 16))))
    assert torch.isclose(table[pos, 2 * i + 1], torch.tensor(math.cos(pos / 10000 ** (2 * i / 16))))
