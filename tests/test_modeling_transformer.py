"""Tests of the Transformer encoder-decoder (hf_seq/configuration_transformer.py, hf_seq/modeling_transformer.py)."""

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from conftest import BLOCK_HF_SEQ, assert_same_outputs
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    GenerationConfig,
    pipeline,
)
from transformers.modeling_outputs import Seq2SeqLMOutput

import hf_seq  # noqa: F401  (registers the Auto classes)
from hf_seq.configuration_transformer import HfSeqTransformerConfig
from hf_seq.modeling_transformer import (
    AppendBufferLayer,
    TransformerForConditionalGeneration,
    TransformerModel,
    shift_tokens_right,
)

PAD, BOS, EOS = 0, 2, 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread avoids waiting on a second (busy) core at every op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(**overrides) -> HfSeqTransformerConfig:
    fields = dict(
        vocab_size=40,
        hidden_size=16,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    fields.update(overrides)
    return HfSeqTransformerConfig(**fields)


def random_model(seed: int = 0, **overrides) -> TransformerForConditionalGeneration:
    """A tiny model with large random weights (so greedy/beam outputs vary with the input)."""
    torch.manual_seed(seed)
    model = TransformerForConditionalGeneration(tiny(tie_word_embeddings=False, **overrides)).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.2)
    return model


def source_batch():
    """Two sources, the second one right-padded."""
    ids = torch.tensor([[5, 9, 12, 7, 30, 21, EOS], [8, 17, 25, EOS, PAD, PAD, PAD]])
    return ids, (ids != PAD).long()


# ---------------------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(hidden_size=10, num_attention_heads=3), "hidden_size"),
        (dict(norm_position="middle"), "norm_position"),
        (dict(position_embedding="rotary"), "position_embedding"),
        (dict(intermediate_size=0), "intermediate_size"),
        (dict(encoder_layers=-1), "encoder_layers"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(dropout=1.5), "dropout"),
        (dict(activation_function="swishy"), "activation_function"),
        (dict(pad_token_id=40), "pad_token_id"),
        (dict(eos_token_id=[3, 99]), "eos_token_id"),
        (dict(scale_embedding="yes"), "scale_embedding"),
    ],
)
def test_config_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny(**overrides)


def test_config_round_trip_and_auto(tmp_path):
    config = tiny(norm_position="pre", position_embedding="learned")
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is HfSeqTransformerConfig and loaded.model_type == "hf_seq_transformer"
    assert loaded.to_diff_dict() == config.to_diff_dict()
    assert loaded.hidden_size == 16 and loaded.num_attention_heads == 4 and loaded.is_encoder_decoder


# ---------------------------------------------------------------------------------------------------------------
# embeddings and the reference forward
# ---------------------------------------------------------------------------------------------------------------


def test_model_uses_the_sinusoidal_table_formula():
    model = TransformerForConditionalGeneration(tiny()).eval()
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    for embeddings in (model.model.encoder.embeddings, model.model.decoder.embeddings):
        out = embeddings(ids)  # (1, 5, 16)
        table = out - embeddings.embed_tokens(ids) * math.sqrt(16)
        for pos in range(5):
            for i in range(8):
                angle = pos / 10000 ** (2 * i / 16)
                assert table[0, pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
                assert table[0, pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    # the decoder continues the table after the cached positions
    dec = model.model.decoder.embeddings
    step = dec(ids[:, :1], past_length=3) - dec.embed_tokens(ids[:, :1]) * math.sqrt(16)
    assert torch.allclose(step[0, 0], dec.embed_positions.weight[3])
    assert not any("embed_positions" in k for k in model.state_dict())  # fixed table: not a weight


def test_tied_embeddings_share_one_matrix_and_init_scale():
    model = TransformerForConditionalGeneration(tiny(vocab_size=400, hidden_size=64))
    enc = model.model.encoder.embeddings.embed_tokens.weight
    assert enc is model.model.decoder.embeddings.embed_tokens.weight and enc is model.lm_head.weight
    assert enc.std().item() == pytest.approx(64**-0.5, rel=0.1)  # scaled embeddings start at unit variance
    untied = TransformerForConditionalGeneration(tiny(tie_word_embeddings=False))
    assert untied.lm_head.weight.data_ptr() != untied.model.encoder.embeddings.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_one_block_model_equals_torch_transformer_layers(norm_position):
    """Embeddings by hand + torch.nn.TransformerEncoderLayer/DecoderLayer with copied weights + output projection."""
    torch.manual_seed(0)
    config = tiny(encoder_layers=1, decoder_layers=1, norm_position=norm_position, tie_word_embeddings=False)
    model = TransformerForConditionalGeneration(config).eval()
    first = norm_position == "pre"
    enc_ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=first).eval()
    dec_ref = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=first).eval()
    enc_blk, dec_blk = model.model.encoder.layers[0], model.model.decoder.layers[0]
    with torch.no_grad():
        for mod in model.modules():  # non-trivial LayerNorm parameters
            if isinstance(mod, nn.LayerNorm):
                mod.weight.normal_(1.0, 0.2)
                mod.bias.normal_(0.0, 0.2)
        for ref_attn, attn in ((enc_ref.self_attn, enc_blk.self_attn), (dec_ref.self_attn, dec_blk.self_attn)):
            ref_attn.in_proj_weight.copy_(attn.qkv_proj.weight)
            ref_attn.in_proj_bias.copy_(attn.qkv_proj.bias)
            ref_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
        cross = dec_blk.cross_attn
        dec_ref.multihead_attn.in_proj_weight.copy_(torch.cat([cross.q_proj.weight, cross.kv_proj.weight]))
        dec_ref.multihead_attn.in_proj_bias.copy_(torch.cat([cross.q_proj.bias, cross.kv_proj.bias]))
        dec_ref.multihead_attn.out_proj.load_state_dict(cross.out_proj.state_dict())
        for ref, blk in ((enc_ref, enc_blk), (dec_ref, dec_blk)):
            ref.linear1.load_state_dict(blk.ffn.fc1.state_dict())
            ref.linear2.load_state_dict(blk.ffn.fc2.state_dict())
            ref.norm1.load_state_dict(blk.self_attn_residual.norm.state_dict())
        enc_ref.norm2.load_state_dict(enc_blk.ffn_residual.norm.state_dict())
        dec_ref.norm2.load_state_dict(dec_blk.cross_attn_residual.norm.state_dict())
        dec_ref.norm3.load_state_dict(dec_blk.ffn_residual.norm.state_dict())

    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11, 6, 19], [BOS, 13, 22, 5, 5]])
    scale = math.sqrt(16)
    table = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (i / 16)) if i % 2 == 0 else math.cos(p / 10000 ** ((i - 1) / 16))
                for i in range(16)
            ]
            for p in range(7)
        ]
    )
    with torch.no_grad():
        x = model.model.encoder.embeddings.embed_tokens(src) * scale + table[:7]
        memory = enc_ref(x, src_key_padding_mask=~src_mask.bool())
        if first:
            memory = model.model.encoder.layer_norm(memory)
        y = model.model.decoder.embeddings.embed_tokens(tgt) * scale + table[:5]
        causal = nn.Transformer.generate_square_subsequent_mask(5)
        h = dec_ref(y, memory, tgt_mask=causal, memory_key_padding_mask=~src_mask.bool())
        if first:
            h = model.model.decoder.layer_norm(h)
        expected = model.lm_head(h)
        for impl in ("sdpa", "eager"):
            model.set_attn_implementation(impl)
            out = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt)
            torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(out.encoder_last_hidden_state[0], memory[0], atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(out.encoder_last_hidden_state[1, :4], memory[1, :4], atol=1e-5, rtol=1e-4)
    assert (model.model.encoder.layer_norm is not None) == first


# ---------------------------------------------------------------------------------------------------------------
# attention implementations and masks
# ---------------------------------------------------------------------------------------------------------------


def test_sdpa_equals_eager_and_eager_weights_are_masked():
    model = random_model()
    assert model.config._attn_implementation == "sdpa"
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11, 6], [BOS, 13, 22, 5]])
    with torch.no_grad():
        fast = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt)
        model.set_attn_implementation("eager")
        assert model.config._attn_implementation == "eager"
        slow = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, output_attentions=True)
    torch.testing.assert_close(fast.logits, slow.logits, atol=1e-5, rtol=1e-5)
    assert len(slow.encoder_attentions) == 2 and len(slow.decoder_attentions) == 2 and len(slow.cross_attentions) == 2
    for enc_w in slow.encoder_attentions:  # (B, nh, S, S)
        assert enc_w.shape == (2, 4, 7, 7)
        assert torch.all(enc_w[1, :, :, 4:] == 0)  # padded source keys get no weight
        torch.testing.assert_close(enc_w.sum(-1), torch.ones(2, 4, 7))
    for dec_w in slow.decoder_attentions:  # (B, nh, T, T): causal
        assert torch.all(dec_w.triu(1) == 0)
        torch.testing.assert_close(dec_w.sum(-1), torch.ones(2, 4, 4))
    for cross_w in slow.cross_attentions:  # (B, nh, T, S)
        assert cross_w.shape == (2, 4, 4, 7)
        assert torch.all(cross_w[1, :, :, 4:] == 0)
        torch.testing.assert_close(cross_w.sum(-1), torch.ones(2, 4, 4))
    # sdpa + output_attentions also returns the (eager) weights
    model.set_attn_implementation("sdpa")
    out = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, output_attentions=True)
    torch.testing.assert_close(out.cross_attentions[-1], slow.cross_attentions[-1])
    loaded = TransformerForConditionalGeneration._from_config(tiny(), attn_implementation="eager")
    assert loaded.config._attn_implementation == "eager"


def test_future_target_tokens_never_change_earlier_logits():
    model = random_model()
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11, 6, 19, 30], [BOS, 13, 22, 5, 5, 8]])
    changed = tgt.clone()
    changed[:, 3:] = torch.tensor([[7, 7, 7], [31, 32, 33]])
    with torch.no_grad():
        for impl in ("sdpa", "eager"):
            model.set_attn_implementation(impl)
            a = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt).logits
            b = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=changed).logits
            torch.testing.assert_close(a[:, :3], b[:, :3], atol=1e-6, rtol=0)
            assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_source_padding_never_changes_a_translation():
    model = random_model()
    src, src_mask = source_batch()
    with torch.no_grad():
        alone = model.generate(input_ids=src[1:, :4], max_new_tokens=12, do_sample=False)
        batched = model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=12, do_sample=False)
        beams_alone = model.generate(input_ids=src[1:, :4], max_new_tokens=12, num_beams=3)
        beams_batched = model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=12, num_beams=3)
        tgt = torch.tensor([[BOS, 4, 11, 6]])
        logits_alone = model(input_ids=src[1:, :4], decoder_input_ids=tgt).logits
        logits_padded = model(input_ids=src[1:], attention_mask=src_mask[1:], decoder_input_ids=tgt).logits
    n = alone.shape[1]
    assert torch.equal(batched[1, :n], alone[0]) and torch.all(batched[1, n:] == PAD)
    n = beams_alone.shape[1]
    assert torch.equal(beams_batched[1, :n], beams_alone[0])
    torch.testing.assert_close(logits_padded, logits_alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_encoder_feed_forward_skips_padding_with_the_dense_loss_and_gradients(norm_position, monkeypatch):
    """With source padding the eager CPU encoder runs its feed-forward on the real tokens only (``token_rows``); the
    static path of compiled / exported / accelerator runs computes every row and puts the padded ones back
    (``token_mask``). Both give the same loss, gradients and states, padded positions included; a dense run without
    either differs only at the padded states."""
    import hf_seq.blocks as blocks

    model = random_model(norm_position=norm_position).train()  # dropout 0: deterministic
    src, src_mask = source_batch()
    labels = torch.tensor([[4, 11, 6, 19, EOS], [13, 22, EOS, -100, -100]])
    rows_seen = []
    sublayer = blocks.feed_forward_sublayer

    def record(residual, ffn, x, token_rows=None, token_mask=None):
        rows_seen.append(x.shape[0] * x.shape[1] if token_rows is None else token_rows.numel())
        return sublayer(residual, ffn, x, token_rows, token_mask)

    def static(residual, ffn, x, token_rows=None, token_mask=None):
        mask = None if token_rows is None else src_mask.bool()  # the encoder's blocks only get token_rows
        return sublayer(residual, ffn, x, None, mask)

    def dense(residual, ffn, x, token_rows=None, token_mask=None):
        return sublayer(residual, ffn, x)

    def run(fn):
        monkeypatch.setattr(blocks, "feed_forward_sublayer", fn)
        model.zero_grad()
        out = model(input_ids=src, attention_mask=src_mask, labels=labels)
        out.loss.backward()
        return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    sparse_out, sparse_grads = run(record)
    assert rows_seen[:2] == [int(src_mask.sum())] * 2  # the two encoder blocks saw only the 11 real tokens
    for other_out, other_grads in (run(static), run(dense)):
        torch.testing.assert_close(sparse_out.loss, other_out.loss)
        torch.testing.assert_close(sparse_out.logits, other_out.logits)
        assert sparse_grads.keys() == other_grads.keys()
        for name in other_grads:
            torch.testing.assert_close(sparse_grads[name], other_grads[name], msg=name)
    real = src_mask.bool()
    sparse_states = sparse_out.encoder_last_hidden_state
    static_states = run(static)[0].encoder_last_hidden_state
    dense_states = run(dense)[0].encoder_last_hidden_state
    torch.testing.assert_close(sparse_states, static_states)  # padded positions included
    torch.testing.assert_close(sparse_states[real], dense_states[real])
    assert not torch.allclose(sparse_states[~real], dense_states[~real])


def test_decoder_attention_mask_hides_padded_target_positions():
    model = random_model()
    src, src_mask = source_batch()
    tgt = torch.tensor([[PAD, PAD, BOS, 4, 11], [BOS, 13, 22, 5, 5]])
    dec_mask = (torch.arange(5)[None] >= torch.tensor([[2], [0]])).long()
    with torch.no_grad():
        out = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, decoder_attention_mask=dec_mask)
        changed = tgt.clone()
        changed[0, :2] = torch.tensor([17, 18])
        out2 = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=changed, decoder_attention_mask=dec_mask)
    torch.testing.assert_close(out.logits[0, 2:], out2.logits[0, 2:], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# cache and generate()
# ---------------------------------------------------------------------------------------------------------------


def test_cached_steps_equal_full_forward_and_cross_kv_computed_once():
    model = random_model()
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11, 6, 19], [BOS, 13, 22, 5, 5]])
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, use_cache=False)
        assert full.cache is None
        enc = model.get_encoder()(input_ids=src, attention_mask=src_mask)
        out = model(encoder_outputs=enc, attention_mask=src_mask, decoder_input_ids=tgt[:, :2], use_cache=True)
        cache, steps = out.cache, [out.logits]
        cross_keys = cache.cross_attention_cache.layers[0].keys
        for t in range(2, 5):
            out = model(encoder_outputs=enc, attention_mask=src_mask, decoder_input_ids=tgt[:, t : t + 1], cache=cache)
            assert out.cache is cache
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full.logits, atol=1e-5, rtol=1e-5)
    assert cache.get_seq_length() == 5 and all(cache.is_updated.values())
    assert cache.cross_attention_cache.layers[0].keys is cross_keys  # encoder K/V projected once
    assert isinstance(cache.self_attention_cache.layers[0], AppendBufferLayer)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(do_sample=False),
        dict(num_beams=4),
        dict(num_beams=4, num_return_sequences=2, length_penalty=0.6, early_stopping=True),
    ],
)
def test_cached_generate_equals_uncached(kwargs):
    model = random_model()
    src, src_mask = source_batch()
    with torch.no_grad():
        cached = model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=24, min_new_tokens=24, **kwargs)
        plain = model.generate(
            input_ids=src, attention_mask=src_mask, max_new_tokens=24, min_new_tokens=24, use_cache=False, **kwargs
        )
    assert torch.equal(cached, plain)
    assert cached.shape[1] == 25 and torch.all(cached[:, 0] == BOS)
    assert len(set(cached[0, 1:].tolist())) > 3  # a non-degenerate output, so the comparison means something


def test_sampling_is_reproducible_and_respects_top_k():
    model = random_model()
    src, src_mask = source_batch()
    kwargs = dict(input_ids=src, attention_mask=src_mask, max_new_tokens=15, do_sample=True, top_k=1)
    assert torch.equal(
        model.generate(**kwargs), model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=15)
    )  # top_k=1 sampling == greedy
    torch.manual_seed(1)
    a = model.generate(**{**kwargs, "top_k": 0, "top_p": 0.9, "temperature": 1.5})
    torch.manual_seed(1)
    b = model.generate(**{**kwargs, "top_k": 0, "top_p": 0.9, "temperature": 1.5}, use_cache=False)
    assert torch.equal(a, b)


def test_append_buffer_layer_survives_reorder_and_crop():
    layer = AppendBufferLayer()
    k = torch.randn(3, 2, 4, 5)
    keys, values = layer.update(k, k + 1)
    layer.reorder_cache(torch.tensor([2, 0, 1]))  # replaces self.keys by a new tensor
    k2 = torch.randn(3, 2, 1, 5)
    keys, values = layer.update(k2, k2 + 1)
    torch.testing.assert_close(keys, torch.cat([k[[2, 0, 1]], k2], 2))
    torch.testing.assert_close(values, torch.cat([k[[2, 0, 1]], k2], 2) + 1)
    layer.crop(-2)
    keys, _ = layer.update(k2, k2)
    torch.testing.assert_close(keys, torch.cat([k[[2, 0, 1]][:, :, :3], k2], 2))
    assert layer.get_seq_length() == 4


# ---------------------------------------------------------------------------------------------------------------
# labels, loss, bad input
# ---------------------------------------------------------------------------------------------------------------


def test_labels_are_shifted_into_decoder_inputs_and_loss_ignores_minus_100():
    model = random_model()
    src, src_mask = source_batch()
    labels = torch.tensor([[4, 11, 6, EOS], [13, EOS, -100, -100]])
    out = model(input_ids=src, attention_mask=src_mask, labels=labels)
    decoder_input_ids = torch.tensor([[BOS, 4, 11, 6], [BOS, 13, EOS, PAD]])
    assert torch.equal(model.prepare_decoder_input_ids_from_labels(labels), decoder_input_ids)
    ref = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=decoder_input_ids).logits
    expected = F.cross_entropy(ref.view(-1, 40), labels.view(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert model.lm_head.weight.grad is not None
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        shift_tokens_right(labels, PAD, None)
    no_start = TransformerForConditionalGeneration(tiny(decoder_start_token_id=None))
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        no_start(input_ids=src, labels=labels)
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    tok = build_translation_tokenizer(["a b c"], kind="word", vocab_size=40)
    collated = DataCollatorForSeq2Seq(tok, model=model, label_pad_token_id=-100)(
        [{"input_ids": [5, 6, EOS], "labels": [7, EOS]}, {"input_ids": [5, EOS], "labels": [7, 8, EOS]}]
    )  # Trainer's collator builds the teacher-forcing inputs with the model's method
    assert collated["decoder_input_ids"].tolist() == [[BOS, 7, EOS], [BOS, 7, 8]]


def test_bad_input_raises_naming_the_problem():
    model = TransformerForConditionalGeneration(tiny(max_position_embeddings=8, position_embedding="learned"))
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4], [BOS, 5]])
    with pytest.raises(ValueError, match="input_ids.*vocab_size=40"):
        model(input_ids=torch.tensor([[5, 40]]), decoder_input_ids=tgt[:1])
    with pytest.raises(ValueError, match="decoder_input_ids.*vocab_size"):
        model(input_ids=src, decoder_input_ids=torch.tensor([[BOS, -3], [BOS, 4]]))
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(input_ids=torch.full((1, 9), 5), decoder_input_ids=tgt[:1])
    with pytest.raises(ValueError, match="length 9.*max_position_embeddings=8"):
        model(input_ids=src, decoder_input_ids=torch.full((2, 9), 5))
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=src, labels=torch.tensor([[4, 40], [5, 6]]))
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=src, attention_mask=src_mask[:, :5], decoder_input_ids=tgt)
    with pytest.raises(ValueError, match="decoder_input_ids"):
        model(input_ids=src, attention_mask=src_mask)
    with pytest.raises(ValueError, match="labels"):
        model(input_ids=src, decoder_input_ids=tgt, labels=torch.tensor([[4, 5, 6], [4, 5, 6]]))
    sinusoidal = TransformerForConditionalGeneration(tiny(max_position_embeddings=8))
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        sinusoidal.generate(input_ids=src[:, :4], max_new_tokens=20, min_new_tokens=20)


# ---------------------------------------------------------------------------------------------------------------
# save / load, Auto, pipeline, remote code
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "auto, cls", [(AutoModel, TransformerModel), (AutoModelForSeq2SeqLM, TransformerForConditionalGeneration)]
)
def test_save_load_bit_exact_through_auto(tmp_path, auto, cls):
    torch.manual_seed(0)
    model = cls(tiny(position_embedding="learned", norm_position="pre")).eval()
    model.save_pretrained(tmp_path)
    loaded = auto.from_pretrained(tmp_path).eval()
    assert type(loaded) is cls
    sd, sd2 = model.state_dict(), loaded.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11], [BOS, 13, 22]])
    a = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt)
    b = loaded(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt)
    assert_same_outputs(b[0], a[0])  # reloaded object: equal to float rounding
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]
    if cls is TransformerForConditionalGeneration:  # ties survive loading
        assert loaded.lm_head.weight is loaded.model.encoder.embeddings.embed_tokens.weight


def test_generation_length_defaults_to_the_position_table(tmp_path):
    model = TransformerForConditionalGeneration(tiny(max_position_embeddings=48))
    assert model.generation_config.max_length == 48  # not GenerationConfig's 20, which cuts translations
    model.generation_config.max_length = 30
    model.save_pretrained(tmp_path)
    assert AutoModelForSeq2SeqLM.from_pretrained(tmp_path).generation_config.max_length == 30


def test_sinusoidal_model_round_trip_keeps_table(tmp_path):
    model = random_model()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    for a, b in ((model.model.encoder, loaded.model.encoder), (model.model.decoder, loaded.model.decoder)):
        assert torch.equal(a.embeddings.embed_positions.weight, b.embeddings.embed_positions.weight)
    src, src_mask = source_batch()
    assert torch.equal(
        model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=10),
        loaded.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=10),
    )


def test_translation_pipeline_on_saved_model(tmp_path):
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    pairs = [{"en": "in the beginning", "es": "en el principio"}, {"en": "and god said", "es": "y dijo dios"}] * 5
    tok = build_translation_tokenizer(pairs, kind="word", vocab_size=50)
    config = tiny(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.bos_token_id,
    )
    torch.manual_seed(0)
    TransformerForConditionalGeneration(config).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    translator = pipeline(
        "translation", model=str(tmp_path / "m"), trust_remote_code=True
    )  # hf_seq/seq2seq_pipelines.py
    out = translator(["in the beginning", "and god said"], max_new_tokens=5, num_beams=2)
    assert len(out) == 2 and all(isinstance(o["translation_text"], str) for o in out)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "m")
    enc = tok(["in the beginning"], return_tensors="pt")
    ids = model.generate(**enc, max_new_tokens=5, num_beams=2)
    assert out[0]["translation_text"] == tok.decode(ids[0], skip_special_tokens=True)


REMOTE = BLOCK_HF_SEQ + textwrap.dedent(
    """
    import sys
    import torch
    from transformers import AutoModelForSeq2SeqLM
    model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert "hf_seq" not in sys.modules
    ids = torch.tensor([[5, 9, 12, 3], [8, 17, 3, 0]])
    out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=8, num_beams=2)
    from transformers import pipeline
    translated = pipeline("translation", model=sys.argv[1], trust_remote_code=True)("let there be light")
    assert "hf_seq" not in sys.modules and isinstance(translated[0]["translation_text"], str)
    print(type(model).__module__, out.tolist())
    """
)


def test_remote_code_load_without_hf_seq(tmp_path):
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    model = random_model()
    model.save_pretrained(tmp_path / "m")
    build_translation_tokenizer(["let there be light"] * 3, kind="word", vocab_size=40).save_pretrained(tmp_path / "m")
    for name in (
        "modeling_transformer.py",
        "configuration_transformer.py",
        "attention.py",
        "blocks.py",
        "seq2seq_pipelines.py",
    ):
        assert (tmp_path / "m" / name).exists()
    (tmp_path / "check.py").write_text(REMOTE)
    proc = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "check.py"), str(tmp_path / "m")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    module, generated = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules")
    ids = torch.tensor([[5, 9, 12, 3], [8, 17, 3, 0]])
    expected = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=8, num_beams=2)
    assert json.loads(generated) == expected.tolist()


def test_generation_config_takes_the_special_tokens():
    model = TransformerForConditionalGeneration(tiny(eos_token_id=5, decoder_start_token_id=7))
    assert isinstance(model.generation_config, GenerationConfig)
    assert model.generation_config.decoder_start_token_id == 7 and model.generation_config.eos_token_id == 5
    assert model.accepts_loss_kwargs is False and model.get_encoder().main_input_name == "input_ids"


@pytest.mark.parametrize("tied", [True, False])
def test_resize_token_embeddings_keeps_every_table_in_step(tied):
    model = TransformerForConditionalGeneration(tiny(tie_word_embeddings=tied))
    model.resize_token_embeddings(48, mean_resizing=False)
    shapes = {
        model.lm_head.weight.shape,
        model.model.encoder.embeddings.embed_tokens.weight.shape,
        model.model.decoder.embeddings.embed_tokens.weight.shape,
    }
    assert shapes == {(48, 16)} and model.config.vocab_size == 48
    src, src_mask = source_batch()
    out = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=torch.tensor([[BOS, 45], [BOS, 47]]))
    assert out.logits.shape == (2, 2, 48)
    with pytest.raises(ValueError, match="vocab_size=48"):
        model(input_ids=src, decoder_input_ids=torch.tensor([[BOS, 48], [BOS, 4]]))


def test_cheap_cpu_dropout_keeps_p_and_scaling():
    from hf_seq.blocks import Dropout

    torch.manual_seed(0)
    drop = Dropout(0.1)
    x = torch.ones(200_001, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005  # both halves of each random word are used
    assert abs(kept[:100_000].float().mean().item() - kept[100_001:].float().mean().item()) < 0.01
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept)
    assert drop.eval()(x) is x and Dropout(0.0)(x) is x


# ---------------------------------------------------------------------------------------------------------------
# compiler stack, quantization, the accelerator path
# ---------------------------------------------------------------------------------------------------------------

HEADS = [TransformerForConditionalGeneration, TransformerModel]


def _tiny_inputs(head, labels: bool):
    """A tiny model of ``head`` and a padded batch from the shared test tokenizer (decoder inputs or labels)."""
    from tiny_models import build_tokenizer, model_inputs, tiny_model

    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer))
    batch = model_inputs(model, tokenizer, labels=labels)
    assert (batch["attention_mask"] == 0).any()  # padded
    return model, batch


@pytest.mark.parametrize(
    "head, backend",
    [(TransformerForConditionalGeneration, "inductor"), (TransformerModel, "aot_eager")],
    ids=["ForConditionalGeneration-inductor", "Model-aot_eager"],
)
def test_fullgraph_compiled_training_step_equals_eager(head, backend):
    """No graph break in a training forward with labels (fullgraph=True), and the compiled loss and gradients equal
    the eager ones (eager CPU runs the fused loss and the padding-free encoder feed-forward, compiled the static
    path)."""
    from compile_checks import assert_compiled_training_step_equals_eager

    model, batch = _tiny_inputs(head, labels=True)
    assert_compiled_training_step_equals_eager(model, batch, backend=backend)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_inference_forward_compiles_exports_and_runs_in_onnxruntime(head, tmp_path):
    from compile_checks import assert_export_and_onnx_match, assert_inference_compiles_without_graph_breaks

    model, batch = _tiny_inputs(head, labels=False)
    masks = {"encoder_last_hidden_state": batch["attention_mask"]}  # padded encoder states: read by nothing
    assert_inference_compiles_without_graph_breaks(model, batch, masks)  # use_cache from the config: with a cache
    batch = {**batch, "use_cache": False}  # exported graphs return tensors only
    assert_export_and_onnx_match(model, batch, tmp_path, masks=masks)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_quantize_dynamic_quantizes_every_projection(head):
    from compile_checks import assert_quantize_dynamic_covers_every_linear

    model, batch = _tiny_inputs(head, labels=False)
    assert_quantize_dynamic_covers_every_linear(model, {**batch, "use_cache": False})


def test_accelerator_path_reads_no_value_on_the_host_and_equals_the_cpu_path():
    """The code an accelerator runs (every CPU fast path off) has no host read in a training step (forward and
    backward) nor in a cached decoding step, and computes what the CPU fast paths compute."""
    from compile_checks import HostReads, accelerator_path, gradients

    model = random_model().train()
    src, src_mask = source_batch()
    labels = torch.tensor([[4, 11, 6, 19, EOS], [13, 22, EOS, -100, -100]])

    def training_step():
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=src, attention_mask=src_mask, labels=labels).loss
        loss.backward()
        return loss.detach(), gradients(model)

    with HostReads() as cpu_reads:
        cpu_loss, cpu_grads = training_step()
    assert any("nonzero" in op for op in cpu_reads.host_reads)  # the CPU fast paths are there (and detected)
    with accelerator_path(), HostReads() as reads:
        loss, grads = training_step()
    assert not reads.host_reads, reads.host_reads
    assert "native_layer_norm_backward" in reads.ops  # the backward ran under the recorder too
    torch.testing.assert_close(loss, cpu_loss)
    for name in cpu_grads:
        torch.testing.assert_close(grads[name], cpu_grads[name], msg=name)

    model.eval()
    tgt = torch.tensor([[BOS, 4, 11], [BOS, 13, 22]])
    with torch.no_grad():
        full = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt, use_cache=False).logits
        with accelerator_path():
            prefix = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt[:, :2], use_cache=True)
            with HostReads() as reads:
                step = model(
                    encoder_outputs=(prefix.encoder_last_hidden_state,),
                    attention_mask=src_mask,
                    decoder_input_ids=tgt[:, 2:],
                    cache=prefix.cache,
                )
    assert not reads.host_reads, reads.host_reads
    torch.testing.assert_close(step.logits[:, 0], full[:, 2], atol=1e-5, rtol=1e-5)


def test_decoding_cache_is_written_in_place_not_reallocated_per_step(monkeypatch):
    """The self-attention cache writes each decoding step into its buffer: 40 steps fit in the first buffer (capacity
    64), so each layer allocates once, not once per step as ``torch.cat`` would."""
    model = random_model()
    src, src_mask = source_batch()
    buffers, steps = set(), []
    update = AppendBufferLayer.update

    def record(self, *args, **kwargs):
        out = update(self, *args, **kwargs)
        buffers.add(self._key_buffer.data_ptr())
        steps.append(1)
        return out

    monkeypatch.setattr(AppendBufferLayer, "update", record)
    with torch.no_grad():
        model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=40, min_new_tokens=40)
    assert len(steps) == 40 * model.config.decoder_layers
    assert len(buffers) == model.config.decoder_layers


# ---------------------------------------------------------------------------------------------------------------
# gradient checkpointing, output plumbing, deprecated names, adapters
# ---------------------------------------------------------------------------------------------------------------


def _saved_tensor_bytes(model, batch) -> tuple[torch.Tensor, int]:
    """Loss of a training step and the bytes of the activations autograd saved for its backward (parameters
    excluded), counted once per storage with ``torch.autograd.graph.saved_tensors_hooks``."""
    storages = {}

    def pack(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**batch).loss
    loss.backward()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return loss.detach(), sum(n for ptr, n in storages.items() if ptr not in params)


def test_gradient_checkpointing_same_gradients_less_activation_memory():
    model = random_model(encoder_layers=3, decoder_layers=3, dropout=0.1).train()  # dropout: the RNG is replayed
    src, src_mask = source_batch()
    batch = dict(input_ids=src, attention_mask=src_mask, labels=torch.tensor([[4, 11, 6, EOS], [13, 22, EOS, -100]]))
    assert model.supports_gradient_checkpointing
    torch.manual_seed(3)
    loss, saved = _saved_tensor_bytes(model, batch)
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model.gradient_checkpointing_enable()
    blocks = [m for m in model.modules() if type(m).__name__.startswith("TransformerDecoderBlock")]
    assert blocks and all(m.gradient_checkpointing for m in blocks)
    torch.manual_seed(3)
    loss_gc, saved_gc = _saved_tensor_bytes(model, batch)
    torch.testing.assert_close(loss_gc, loss)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], msg=name)
    assert saved_gc < 0.3 * saved, (saved_gc, saved)  # measured 12 %: only the embeddings and the head keep theirs


def test_trainer_gradient_checkpointing_flag_trains(tmp_path):
    from transformers import Trainer, TrainingArguments

    model = random_model().train()
    src, src_mask = source_batch()
    rows = [
        {"input_ids": src[i], "attention_mask": src_mask[i], "labels": torch.tensor([4, 11, EOS, -100])}
        for i in range(2)
    ]
    args = TrainingArguments(
        output_dir=str(tmp_path), gradient_checkpointing=True, max_steps=2, per_device_train_batch_size=2,
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=1, learning_rate=1e-3,
    )  # fmt: skip
    before = model.lm_head.weight.detach().clone()
    Trainer(model=model, args=args, train_dataset=rows).train()
    assert all(m.gradient_checkpointing for m in model.model.encoder.layers)
    assert not torch.equal(before, model.lm_head.weight)


def test_config_level_output_flags_equal_call_level_ones():
    model = random_model()
    model.set_attn_implementation("eager")  # transformers refuses config.output_attentions with sdpa
    src, src_mask = source_batch()
    inputs = dict(input_ids=src, attention_mask=src_mask, decoder_input_ids=torch.tensor([[BOS, 4], [BOS, 13]]))
    with torch.no_grad():
        called = model(**inputs, output_hidden_states=True, output_attentions=True)
        model.config.output_hidden_states = True
        model.config.output_attentions = True
        configured = model(**inputs)
        assert configured.decoder_hidden_states is not None and len(configured.decoder_hidden_states) == 3
        for name in ("encoder_hidden_states", "decoder_hidden_states", "encoder_attentions", "cross_attentions"):
            assert len(configured[name]) == len(called[name])
            for a, b in zip(configured[name], called[name]):
                torch.testing.assert_close(a, b)
        overridden = model(**inputs, output_hidden_states=False, output_attentions=False)
        assert overridden.decoder_hidden_states is None and overridden.cross_attentions is None
        model.config.return_dict = False
        as_tuple = model(**inputs, output_hidden_states=False, output_attentions=False)
        assert isinstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[0], configured.logits)
        assert isinstance(model(**inputs, return_dict=True), Seq2SeqLMOutput)
        encoder_tuple = model.get_encoder()(input_ids=src, attention_mask=src_mask)
        assert isinstance(encoder_tuple, tuple)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_dummy_inputs_run_a_forward(head):
    model = head(tiny()).eval()
    assert "decoder_input_ids" in model.dummy_inputs
    with torch.no_grad():
        out = model(**model.dummy_inputs)
    assert out[0].shape[:2] == model.dummy_inputs["decoder_input_ids"].shape


def test_past_key_values_is_the_deprecated_name_of_cache():
    model = random_model()
    src, src_mask = source_batch()
    tgt = torch.tensor([[BOS, 4, 11], [BOS, 13, 22]])
    with torch.no_grad():
        prefix = dict(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt[:, :2], use_cache=True)
        step = dict(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt[:, 2:])
        expected = model(**step, cache=model(**prefix).cache).logits
        with pytest.warns(FutureWarning, match="past_key_values"):
            got = model(**step, past_key_values=model(**prefix).cache).logits
        full = model(input_ids=src, attention_mask=src_mask, decoder_input_ids=tgt).logits
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got[:, 0], full[:, 2], atol=1e-5, rtol=1e-5)


def test_every_projection_is_a_plain_linear_and_lora_adapters_train():
    """Adapters (PEFT LoRA on the attention, feed-forward and output projections) and forward hooks act on the
    plain ``nn.Linear`` layers; the model still generates."""
    from peft import LoraConfig, get_peft_model

    model = random_model().train()
    assert all(type(m) is nn.Linear for name, m in model.named_modules() if name.endswith(("_proj", "fc1", "fc2")))
    src, src_mask = source_batch()
    labels = torch.tensor([[4, 11, 6, EOS], [13, 22, EOS, -100]])
    base_loss = model(input_ids=src, attention_mask=src_mask, labels=labels).loss.detach()
    targets = ["qkv_proj", "q_proj", "kv_proj", "out_proj", "fc1", "fc2", "lm_head"]
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=targets, lora_dropout=0.0))
    calls = []
    peft_model.base_model.model.lm_head.register_forward_hook(lambda m, a, out: calls.append(out.shape))
    loss = peft_model(input_ids=src, attention_mask=src_mask, labels=labels).loss
    torch.testing.assert_close(loss.detach(), base_loss)  # LoRA starts as the identity (B = 0)
    loss.backward()
    trained = {n for n, p in peft_model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert any("lm_head.lora_A" in n for n in trained) and any("qkv_proj.lora_B" in n for n in trained)
    assert calls == [(2, 4, model.config.vocab_size)]
    with torch.no_grad():
        out = peft_model.generate(input_ids=src, attention_mask=src_mask, max_new_tokens=4, num_beams=2)
    assert out.shape == (2, 5)


def test_weight_edited_during_another_threads_generate_is_seen_by_later_calls():
    """``param.data.copy_`` (which does not bump the version counter) while another thread is inside generate():
    every later generate() decodes with the new weight."""
    import threading

    from transformers import LogitsProcessor, LogitsProcessorList

    model = random_model()
    edited = random_model(seed=5)
    src, src_mask = source_batch()
    kwargs = dict(input_ids=src, attention_mask=src_mask, max_new_tokens=12, min_new_tokens=12)
    started, release = threading.Event(), threading.Event()

    class Pause(LogitsProcessor):
        def __call__(self, input_ids, scores):
            started.set()
            release.wait(30)
            return scores

    worker = threading.Thread(target=lambda: model.generate(**kwargs, logits_processor=LogitsProcessorList([Pause()])))
    worker.start()
    assert started.wait(30)
    with torch.no_grad():
        for param, new in zip(model.parameters(), edited.parameters()):
            param.data.copy_(new.data)
    release.set()
    worker.join(30)
    assert torch.equal(model.generate(**kwargs), edited.generate(**kwargs))


# ---------------------------------------------------------------------------------------------------------------
# empty batches, float labels, special token ids
# ---------------------------------------------------------------------------------------------------------------


def test_empty_batches_and_float_labels_are_clear_errors():
    model = random_model()
    src, src_mask = source_batch()
    empty_rows, empty_positions = src[:0], torch.zeros(3, 0, dtype=torch.long)
    with pytest.raises(ValueError, match=r"`input_ids` must hold at least one sequence.*\(0, 7\)"):
        model(input_ids=empty_rows, decoder_input_ids=torch.zeros(0, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`input_ids` must hold at least one sequence.*\(3, 0\)"):
        model(input_ids=empty_positions, decoder_input_ids=torch.full((3, 2), BOS))
    with pytest.raises(ValueError, match=r"`decoder_input_ids` must hold at least one sequence.*\(2, 0\)"):
        model(input_ids=src, attention_mask=src_mask, decoder_input_ids=torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`labels` must be integer class ids.*float32"):
        model(input_ids=src, attention_mask=src_mask, labels=torch.tensor([[4.0, 1.7], [5.0, 6.0]]))
    with pytest.raises(ValueError, match=r"`inputs_embeds` must hold at least one sequence"):
        model(inputs_embeds=torch.zeros(2, 0, 16), decoder_input_ids=torch.full((2, 1), BOS))
    with pytest.raises(ValueError, match=r"`decoder_inputs_embeds` must have shape \(batch, length, hidden_size=16\)"):
        model(input_ids=src, decoder_inputs_embeds=torch.zeros(2, 3, 8))


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(vocab_size="20"), "vocab_size"),
        (dict(hidden_size="16"), "hidden_size"),
        (dict(bos_token_id=40), "bos_token_id"),
        (dict(decoder_start_token_id=-1), "decoder_start_token_id"),
        (dict(sep_token_id=45), "sep_token_id"),
        (dict(cls_token_id=99), "cls_token_id"),
    ],
)
def test_bad_sizes_and_special_token_ids_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=f"`{field}` must be"):
        tiny(**overrides)
