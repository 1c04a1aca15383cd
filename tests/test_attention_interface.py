"""BERT and the Transformer on transformers' own plumbing: attention functions through ``AttentionInterface``
(hf_seq/attention.py) and hidden states / attentions through ``_can_record_outputs`` + ``capture_outputs``
(hf_seq/modeling_bert.py, hf_seq/modeling_transformer.py, hf_seq/compat.py)."""

from collections import Counter

import pytest
import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward as transformers_sdpa
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS as TRANSFORMERS_FUNCTIONS

import hf_seq  # noqa: F401  (registers the Auto classes)
from hf_seq import attention
from hf_seq.attention import ALL_ATTENTION_FUNCTIONS, make_attention_mask
from hf_seq.configuration_bert import HfSeqBertConfig
from hf_seq.configuration_transformer import HfSeqTransformerConfig
from hf_seq.modeling_bert import BertForMaskedLM, BertModel
from hf_seq.modeling_transformer import TransformerForConditionalGeneration
from hf_seq.toolkit.bert_conversion import from_transformers_bert

PAD, BOS, EOS = 0, 2, 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def bert_config(**kw) -> HfSeqBertConfig:
    base = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=24,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    base.update(kw)
    return HfSeqBertConfig(**base)


def transformer_config(**kw) -> HfSeqTransformerConfig:
    base = dict(
        vocab_size=40,
        d_model=16,
        encoder_layers=2,
        decoder_layers=3,
        attention_heads=4,
        ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    base.update(kw)
    return HfSeqTransformerConfig(**base)


def bert_batch() -> dict:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 99, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def seq2seq_batch(target_padding: bool = True) -> dict:
    src = torch.tensor([[5, 9, 12, 7, 30, 21, EOS], [8, 17, 25, EOS, PAD, PAD, PAD]])
    tgt = torch.tensor([[BOS, 4, 11, 6, 19], [BOS, 13, 22, PAD, PAD]])
    batch = {"input_ids": src, "attention_mask": (src != PAD).long(), "decoder_input_ids": tgt}
    if target_padding:
        batch["decoder_attention_mask"] = (tgt != PAD).long()
        batch["decoder_attention_mask"][:, 0] = 1
    return batch


def seeded(model):
    """Large random weights, so that every layer changes the states visibly."""
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.2)
    return model.eval()


@pytest.fixture
def counting_function():
    """A function registered globally as "counting": hf_seq's eager attention, counting the calls per module."""
    calls = Counter()

    def counting(module, query, key, value, attention_mask, **kwargs):
        calls[module] += 1
        return attention.eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("counting", counting)
    yield calls
    AttentionInterface._global_mapping.pop("counting", None)


# ---------------------------------------------------------------------------------------------------------------
# dispatch
# ---------------------------------------------------------------------------------------------------------------


def test_local_eager_and_sdpa_leave_transformers_global_entries_alone():
    assert ALL_ATTENTION_FUNCTIONS.attention_function("eager") is attention.eager_attention_forward
    assert ALL_ATTENTION_FUNCTIONS.attention_function("sdpa") is attention.sdpa_attention_forward
    assert ALL_ATTENTION_FUNCTIONS.attention_function(None) is attention.sdpa_attention_forward
    assert TRANSFORMERS_FUNCTIONS["sdpa"] is transformers_sdpa  # transformers' own models keep theirs
    assert "eager" not in AttentionInterface._global_mapping
    assert isinstance(ALL_ATTENTION_FUNCTIONS, AttentionInterface)


def test_registered_function_runs_every_bert_self_attention(counting_function):
    model = seeded(BertForMaskedLM(bert_config(attn_implementation="counting")))
    reference = seeded(BertForMaskedLM(bert_config(attn_implementation="eager")))
    batch = bert_batch()
    with torch.no_grad():
        got, expected = model(**batch).logits, reference(**batch).logits
    layers = model.bert.encoder.layers
    assert counting_function == Counter({layer.self_attn: 1 for layer in layers})  # one call per layer and forward
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    with torch.no_grad():
        model(**batch)
    assert set(counting_function.values()) == {2}


def test_registered_function_from_pretrained_runs_every_transformer_attention(counting_function, tmp_path):
    seeded(TransformerForConditionalGeneration(transformer_config())).save_pretrained(tmp_path)
    model = TransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="counting").eval()
    reference = TransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert model.config._attn_implementation == "counting"
    batch = seq2seq_batch()
    with torch.no_grad():
        got, expected = model(**batch).logits, reference(**batch).logits
    encoder, decoder = model.model.encoder, model.model.decoder
    expected_calls = {layer.self_attn: 1 for layer in encoder.layers}
    expected_calls |= {layer.self_attn: 1 for layer in decoder.layers}
    expected_calls |= {layer.cross_attn: 1 for layer in decoder.layers}
    assert counting_function == Counter(expected_calls)  # 2 encoder + 3 decoder self + 3 cross attentions
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    counting_function.clear()
    with torch.no_grad():  # generate: one decoder step per token, every cross-attention reads the cache
        model.generate(batch["input_ids"], attention_mask=batch["attention_mask"], max_new_tokens=3, do_sample=False)
    assert all(counting_function[layer.self_attn] == 1 for layer in encoder.layers)
    assert all(counting_function[layer.cross_attn] >= 2 for layer in decoder.layers)


def test_unknown_attn_implementation_is_a_clear_error():
    with pytest.raises(ValueError, match="attn_implementation"):
        BertModel(bert_config(attn_implementation="no_such_attention"))  # transformers' own check at init
    model = BertModel(bert_config())
    model.config._attn_implementation = "no_such_attention"  # set behind transformers' check
    with pytest.raises(ValueError, match=r"attn_implementation must be one of .*'eager'.*'no_such_attention'"):
        model(**bert_batch())
    with pytest.raises(ValueError, match="'sdpa'"):
        ALL_ATTENTION_FUNCTIONS.attention_function("no_such_attention")


# ---------------------------------------------------------------------------------------------------------------
# eager / sdpa: the same numbers as before, the same output tuples
# ---------------------------------------------------------------------------------------------------------------


def test_sdpa_rows_without_a_visible_key_are_zero_and_equal_eager():
    torch.manual_seed(0)
    module = torch.nn.Module().eval()
    q, k, v = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8)
    mask = make_attention_mask(torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]), 4).expand(2, 1, 4, 4).clone()
    mask[1, 0, 3] = False  # query 3 of row 1 sees no key
    eager, weights = attention.eager_attention_forward(module, q, k, v, mask, scaling=8**-0.5)
    fast, none = attention.sdpa_attention_forward(module, q, k, v, mask, scaling=8**-0.5)
    assert none is None and eager.shape == (2, 4, 2, 8)  # (B, T, nh, hs) as transformers' functions return
    torch.testing.assert_close(fast, eager, atol=1e-6, rtol=0)
    assert torch.all(fast[1, 3] == 0) and torch.all(weights[1, :, 3] == 0) and not torch.isnan(fast).any()
    with_weights, w = attention.sdpa_attention_forward(module, q, k, v, mask, output_attentions=True)
    assert torch.equal(w, weights) and torch.equal(with_weights, eager)


@pytest.mark.parametrize("where", ["call", "config"])
def test_bert_hidden_states_and_attentions_equal_transformers_bert(where):
    """Every hidden state (embeddings first) and every attention map equals transformers' own BertModel with the
    same weights, asked for in the call or on the config, as a ModelOutput and as a tuple."""
    torch.manual_seed(0)
    kw = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37)
    ref = transformers.BertModel(transformers.BertConfig(**kw, attn_implementation="eager")).eval()
    ours = from_transformers_bert(BertModel, ref).eval()
    ours.set_attn_implementation("eager")
    batch = bert_batch()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected = ref(**batch, **flags)
        if where == "config":
            for name, value in flags.items():
                setattr(ours.config, name, value)
            got = ours(**batch)
        else:
            got = ours(**batch, **flags)
        as_tuple = ours(**batch, **({} if where == "config" else flags), return_dict=False)
    assert len(got.hidden_states) == 4 and len(got.attentions) == 3
    torch.testing.assert_close(got.hidden_states[0], ours.embeddings(batch["input_ids"]))  # embeddings first
    for name in ("hidden_states", "attentions"):
        assert len(got[name]) == len(expected[name])
        for a, b in zip(got[name], expected[name]):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0, msg=name)
    assert got.hidden_states[-1] is got.last_hidden_state
    assert len(as_tuple) == 4  # (last_hidden_state, pooler_output, hidden_states, attentions)
    for a, b in zip(as_tuple[2] + as_tuple[3], got.hidden_states + got.attentions):
        assert torch.equal(a, b)


def test_bert_sdpa_call_with_output_attentions_returns_the_eager_weights():
    model = seeded(BertModel(bert_config()))
    assert model.config._attn_implementation == "sdpa"
    batch = bert_batch()
    with torch.no_grad():
        fast = model(**batch, output_attentions=True)
        model.set_attn_implementation("eager")
        slow = model(**batch, output_attentions=True)
        assert model(**batch).attentions is None
    assert len(fast.attentions) == 2
    for a, b in zip(fast.attentions, slow.attentions):
        assert torch.equal(a, b)


def _manual_transformer_outputs(model, batch):
    """Hidden states and attention weights of every layer, computed by running the stacks' modules one by one."""
    encoder, decoder = model.model.encoder, model.model.decoder
    src_mask = make_attention_mask(batch["attention_mask"], batch["input_ids"].shape[1])
    token_rows = batch["attention_mask"].reshape(-1).nonzero().squeeze(1)  # the FFNs skip the padding rows
    h = encoder.embeddings(batch["input_ids"])
    enc_states, enc_attn = [h], []
    for layer in encoder.layers:
        enc_attn.append(layer.self_attn(layer.self_attn_residual.normed_input(h), attention_mask=src_mask)[1])
        h = layer(h, src_mask, token_rows=token_rows)
        enc_states.append(h)
    if encoder.layer_norm is not None:
        enc_states[-1] = h = encoder.layer_norm(h)
    memory, tgt = h, batch["decoder_input_ids"]
    self_mask = make_attention_mask(batch["decoder_attention_mask"], tgt.shape[1], causal=True)
    cross_mask = make_attention_mask(batch["attention_mask"], tgt.shape[1])
    h = decoder.embeddings(tgt)
    dec_states, dec_attn, cross_attn = [h], [], []
    for layer in decoder.layers:
        x = h
        out, w = layer.self_attn(layer.self_attn_residual.normed_input(x), attention_mask=self_mask)
        dec_attn.append(w)
        x = layer.self_attn_residual.add(x, out)
        cross_attn.append(
            layer.cross_attn(layer.cross_attn_residual.normed_input(x), memory, attention_mask=cross_mask)[1]
        )
        h = layer(h, memory, self_attention_mask=self_mask, cross_attention_mask=cross_mask)
        dec_states.append(h)
    if decoder.layer_norm is not None:
        dec_states[-1] = decoder.layer_norm(h)
    return {
        "encoder_hidden_states": enc_states,
        "encoder_attentions": enc_attn,
        "decoder_hidden_states": dec_states,
        "decoder_attentions": dec_attn,
        "cross_attentions": cross_attn,
    }


@pytest.mark.parametrize("norm_position", ["post", "pre"])
@pytest.mark.parametrize("where", ["call", "config"])
def test_transformer_hidden_states_and_attentions_equal_a_layer_by_layer_run(norm_position, where):
    """Encoder and decoder states (embeddings first; after the final LayerNorm last, pre-LN), self- and
    cross-attention weights, asked for in the call or on the config, equal a run of the modules one by one."""
    model = seeded(TransformerForConditionalGeneration(transformer_config(norm_position=norm_position)))
    model.set_attn_implementation("eager")
    batch = seq2seq_batch()
    flags = dict(output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        expected = _manual_transformer_outputs(model, batch)
        if where == "config":
            for name, value in flags.items():
                setattr(model.config, name, value)
            got = model(**batch)
        else:
            got = model(**batch, **flags)
        as_tuple = model(**batch, **({} if where == "config" else flags), use_cache=False, return_dict=False)
    lengths = {name: len(got[name]) for name in expected}
    assert lengths == {
        "encoder_hidden_states": 3,
        "encoder_attentions": 2,
        "decoder_hidden_states": 4,
        "decoder_attentions": 3,
        "cross_attentions": 3,
    }
    for name, values in expected.items():
        for a, b in zip(got[name], values):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)
    assert got.encoder_hidden_states[-1] is got.encoder_last_hidden_state
    assert torch.all(got.decoder_attentions[0].triu(1) == 0)  # causal
    assert torch.all(got.cross_attentions[0][1, :, :, 4:] == 0)  # padded source keys
    # the tuple: logits, decoder states, decoder attentions, cross attentions, encoder last / states / attentions
    assert len(as_tuple) == 7
    order = ("decoder_hidden_states", "decoder_attentions", "cross_attentions")
    for item, name in zip(as_tuple[1:4], order):
        assert all(torch.equal(a, b) for a, b in zip(item, got[name]))
    for item, name in zip(as_tuple[5:7], ("encoder_hidden_states", "encoder_attentions")):
        assert all(torch.equal(a, b) for a, b in zip(item, got[name]))


# ---------------------------------------------------------------------------------------------------------------
# flex attention (transformers compiles it; on CPU that needs a C++ compiler)
# ---------------------------------------------------------------------------------------------------------------


def _flex_usable() -> str | None:
    """Why flex attention cannot run here, or None."""
    try:
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
    except ImportError as error:
        return f"torch has no flex attention: {error}"
    import shutil

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C++ compiler: transformers compiles flex attention, which inductor needs one for on CPU"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_flex_usable() is not None, reason=str(_flex_usable()))
def test_flex_attention_equals_sdpa_for_bert():
    bert = seeded(BertModel(bert_config()))
    batch = bert_batch()
    with torch.no_grad():
        expected = bert(**batch).last_hidden_state
        bert.set_attn_implementation("flex_attention")
        assert bert.config._attn_implementation == "flex_attention"
        got = bert(**batch).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.slow
@pytest.mark.skipif(_flex_usable() is not None, reason=str(_flex_usable()))
def test_flex_attention_equals_sdpa_for_the_transformer():
    # head size 8: torch 2.13's CPU flex-attention kernel fails to compile (a C++ codegen error) for head size 4
    model = seeded(TransformerForConditionalGeneration(transformer_config(d_model=32)))
    for target_padding in (True, False):  # a padding + causal mask, and plain causal masking
        batch = seq2seq_batch(target_padding)
        with torch.no_grad():
            model.set_attn_implementation("sdpa")
            expected = model(**batch).logits
            model.set_attn_implementation("flex_attention")
            got = model(**batch).logits
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
