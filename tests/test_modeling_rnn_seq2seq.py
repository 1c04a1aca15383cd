"""RNN seq2seq (plain + attention) translator: config, attention maps, generate() with the recurrent cache, HF plumbing."""

from __future__ import annotations

import copy
import json
import math
import warnings
from unittest import mock

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from conftest import assert_same_outputs, run_clean
from recurrent_toolchain import (
    assert_checkpointing_saves_memory,
    assert_compiled_training_step_matches,
    assert_export_and_onnx_match,
    assert_quantizes,
    graph_breaks,
    on_accelerator_paths,
    to_meta,
)
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, pipeline

import hf_seq  # noqa: F401  (registers the Auto classes)
from hf_seq.configuration_rnn_seq2seq import ATTENTION_TYPES, HfSeqRNNSeq2SeqConfig
from hf_seq.modeling_rnn_seq2seq import (
    RNNDecoderCache,
    RNNSeq2SeqDecoder,
    RNNSeq2SeqDecoderOutput,
    RNNSeq2SeqForConditionalGeneration,
    RNNSeq2SeqModel,
    shift_tokens_right,
)

VOCAB = 24
PAD, BOS, EOS = 0, 2, 3


def tiny(**overrides) -> HfSeqRNNSeq2SeqConfig:
    """A tiny config with large initial weights so greedy and beam search make non-trivial choices."""
    values = dict(
        vocab_size=VOCAB,
        embedding_size=8,
        hidden_size=10,
        attention="additive",
        dropout=0.0,
        uniform_init_range=0.8,
        max_target_length=10,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    values.update(overrides)
    return HfSeqRNNSeq2SeqConfig(**values)


def model_for(seed: int = 0, **overrides) -> RNNSeq2SeqForConditionalGeneration:
    torch.manual_seed(seed)
    return RNNSeq2SeqForConditionalGeneration(tiny(**overrides)).eval()


def source_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Three right-padded source sentences (lengths 6, 4, 5) ending with EOS."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (3, 6), generator=g)
    mask = torch.ones_like(ids)
    for row, length in enumerate((6, 4, 5)):
        ids[row, length - 1] = EOS
        ids[row, length:] = PAD
        mask[row, length:] = 0
    return ids, mask


# one entry per attention type, plus variants of cell / direction / input feeding / depth
VARIANTS = [dict(attention=a) for a in ATTENTION_TYPES] + [
    dict(attention="additive", bidirectional=True, encoder_layers=2, decoder_layers=2),
    dict(attention="dot", bidirectional=True, cell="gru", input_feeding=True),
    dict(attention="general", cell="rnn", input_feeding=True, encoder_layers=2, decoder_layers=3),
]


def variant_id(v: dict) -> str:
    return "-".join(f"{k}={val}" for k, val in v.items())


# ---------------------------------------------------------------------------------------------------------------
# config
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(attention="luong"), "attention"),
        (dict(cell="transformer"), "cell"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(encoder_layers=1.5), "encoder_layers"),
        (dict(dropout=1.0), "dropout"),
        (dict(attention="none", input_feeding=True), "input_feeding"),
        (dict(decoder_start_token_id=VOCAB), "decoder_start_token_id"),
        (dict(bidirectional="yes"), "bidirectional"),
        (dict(recurrent_implementation="cudnn"), "recurrent_implementation"),
        (dict(use_cache="yes"), "use_cache"),
        (dict(vocab_size="20"), "vocab_size"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(bad, field):
    with pytest.raises(ValueError, match=field):
        tiny(**bad)


def test_config_error_lists_allowed_attention_types():
    with pytest.raises(ValueError) as err:
        tiny(attention="luong")
    for name in ATTENTION_TYPES:
        assert repr(name) in str(err.value)


def test_auto_classes_and_save_load_bit_exact(tmp_path):
    model = model_for(bidirectional=True)
    model.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), HfSeqRNNSeq2SeqConfig)
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is RNNSeq2SeqForConditionalGeneration
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert loaded.lm_head.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()  # tied
    assert loaded.generation_config.max_length == 10
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 9]])
    # reloaded object: equal to float rounding (unaligned safetensors memory), not bit-equal
    assert_same_outputs(
        loaded(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits,
        model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits,
    )
    base = AutoModel.from_pretrained(tmp_path)
    assert type(base) is RNNSeq2SeqModel


# The names a folder of this model has always stored (bidirectional LSTM, "general" attention, tied embeddings): the
# output layer's weight is not stored (it is the embedding's); the FSDP units may change, these names may not.
SAVED_NAMES = [
    "lm_head.bias",
    "model.bridge.cell_proj.bias",
    "model.bridge.cell_proj.weight",
    "model.bridge.hidden_proj.bias",
    "model.bridge.hidden_proj.weight",
    "model.decoder.attention_proj.weight",
    "model.decoder.rnn.layers.0.bias_hh_l0",
    "model.decoder.rnn.layers.0.bias_ih_l0",
    "model.decoder.rnn.layers.0.weight_hh_l0",
    "model.decoder.rnn.layers.0.weight_ih_l0",
    "model.decoder.score.bilinear.weight",
    "model.encoder.embed_tokens.weight",
    "model.encoder.rnn.layers.0.bias_hh_l0",
    "model.encoder.rnn.layers.0.bias_hh_l0_reverse",
    "model.encoder.rnn.layers.0.bias_ih_l0",
    "model.encoder.rnn.layers.0.bias_ih_l0_reverse",
    "model.encoder.rnn.layers.0.weight_hh_l0",
    "model.encoder.rnn.layers.0.weight_hh_l0_reverse",
    "model.encoder.rnn.layers.0.weight_ih_l0",
    "model.encoder.rnn.layers.0.weight_ih_l0_reverse",
]


def test_no_split_units_hold_no_weight_used_outside_them():
    """Each ``_no_split_modules`` class is a unit FSDP2 shards on its own (``fully_shard``) and ``device_map`` places
    on its own: none may hold a parameter used outside it. The whole encoder would (its word embedding is the
    decoder's input embedding and, tied, the output layer), so the unit is the encoder's recurrent stack; accelerate
    puts the embedding in one unit with the output layer."""
    model = model_for(bidirectional=True, cell="lstm", attention="general")
    assert model.lm_head.weight is model.model.encoder.embed_tokens.weight

    def units_sharing_weights(class_names) -> list[str]:
        shared = []
        for name, module in model.named_modules():
            if type(module).__name__ in class_names:
                inside = {id(p) for p in module.parameters()}
                outside = {
                    id(p) for n, p in model.named_parameters(remove_duplicate=False) if not n.startswith(name + ".")
                }
                if inside & outside:
                    shared.append(name)
        return shared

    units = [name for name, m in model.named_modules() if type(m).__name__ in model._no_split_modules]
    assert units == ["model.encoder.rnn", "model.decoder"]
    assert not units_sharing_weights(model._no_split_modules)
    assert units_sharing_weights(["RNNSeq2SeqEncoder"]) == ["model.encoder"]  # why it is not named


def test_a_folder_with_the_stored_names_loads_its_weights(tmp_path):
    """A folder written by earlier releases (the same names, the output layer tied and not stored) loads every tensor
    as stored, the output layer tied to the embedding, and writes the same names back."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = tiny(bidirectional=True, cell="lstm", attention="general")
    shapes = RNNSeq2SeqForConditionalGeneration(config).state_dict()
    g = torch.Generator().manual_seed(3)
    stored = {name: torch.randn(shapes[name].shape, generator=g) for name in SAVED_NAMES}
    config.save_pretrained(tmp_path)
    save_file(stored, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    params = dict(loaded.named_parameters())
    for name, tensor in stored.items():
        assert torch.equal(params[name], tensor), name
    assert loaded.lm_head.weight is loaded.model.encoder.embed_tokens.weight
    loaded.save_pretrained(tmp_path / "again")
    with safe_open(str(tmp_path / "again" / "model.safetensors"), "pt") as f:
        assert sorted(f.keys()) == SAVED_NAMES


def test_untied_embeddings_are_separate():
    model = model_for(tie_word_embeddings=False)
    assert model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()


# ---------------------------------------------------------------------------------------------------------------
# forward: loss, attention maps, score functions, the plain seq2seq link
# ---------------------------------------------------------------------------------------------------------------


def test_loss_is_cross_entropy_ignoring_minus_100():
    model = model_for()
    ids, mask = source_batch()
    labels = torch.tensor([[5, 6, 7, EOS], [8, EOS, -100, -100], [9, 10, EOS, -100]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    dec = shift_tokens_right(labels, PAD, BOS)
    assert dec[:, 0].eq(BOS).all() and dec[1, 3:].eq(PAD).all() and dec[1, 2] == EOS
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits
    keep = labels != -100
    expected = F.cross_entropy(logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected)
    assert out.logits.shape == (3, 4, VOCAB)
    # a batch with nothing to predict gives a zero loss (still in the graph), not the NaN of an empty mean
    empty = model(
        input_ids=ids, attention_mask=mask, labels=labels.masked_fill(labels > -100, -100), decoder_input_ids=dec
    )
    assert empty.loss.item() == 0.0 and empty.loss.requires_grad


@pytest.mark.parametrize("attention", [a for a in ATTENTION_TYPES if a != "none"])
def test_cross_attention_maps_sum_to_one_and_are_zero_on_padding(attention):
    model = model_for(attention=attention, bidirectional=True)
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6, 7], [BOS, 7, 8, 9], [BOS, 9, 9, 4]])
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True)
    (weights,) = out.cross_attentions
    assert weights.shape == (3, 4, 6)  # (batch, target_len, source_len)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4))
    padded = (mask == 0)[:, None, :].expand_as(weights)
    assert torch.all(weights[padded] == 0.0)
    assert torch.all(weights[~padded] > 0.0)


def test_no_attention_returns_no_cross_attentions():
    model = model_for(attention="none")
    ids, mask = source_batch()
    out = model(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 2), BOS), output_attentions=True)
    assert out.cross_attentions is None


def _hand_scores(kind: str, decoder, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Scores (B, T, S) of decoder states s (B, T, H) against encoder states h (B, S, H), written out by hand."""
    score = decoder.score
    if kind == "dot":
        return torch.einsum("bth,bsh->bts", s, h)
    if kind == "scaled_dot":
        return torch.einsum("bth,bsh->bts", s, h) / math.sqrt(h.shape[-1])
    if kind == "general":
        return torch.einsum("bth,hk,bsk->bts", s, score.bilinear.weight.T, h)
    if kind == "cosine":
        return torch.einsum("bth,bsh->bts", s / s.norm(dim=-1, keepdim=True), h / h.norm(dim=-1, keepdim=True))
    # additive: v · tanh(W1 h + W2 s + b)
    w1h = h @ score.key_proj.weight.T  # (B, S, A)
    w2s = s @ score.query_proj.weight.T + score.query_proj.bias  # (B, T, A)
    return torch.tanh(w1h[:, None] + w2s[:, :, None]) @ score.energy.weight[0]


@pytest.mark.parametrize("attention", [a for a in ATTENTION_TYPES if a != "none"])
def test_each_score_function_matches_hand_computation(attention):
    """Decoder step j scores its state s_j against every encoder state h_i with the configured score function."""
    model = model_for(attention=attention, hidden_size=10)
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 9]])
    out = model(
        input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True, output_hidden_states=True
    )
    s = out.decoder_hidden_states[1]  # (B, T, H) decoder RNN states s_j
    h = out.encoder_last_hidden_state  # (B, S, H)
    scores = _hand_scores(attention, model.model.decoder, s, h).masked_fill(mask[:, None, :] == 0, float("-inf"))
    torch.testing.assert_close(out.cross_attentions[0], torch.softmax(scores, dim=-1), atol=1e-5, rtol=1e-5)


def test_context_and_next_state_follow_the_notes():
    """s_j = RNN([x'_j; c_{j-1}], s_{j-1}), c_j = Σ α_ij h_i, output from tanh(W_c [s_j; c_j])."""
    model = model_for(attention="dot")
    dec_mod = model.model.decoder
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5], [BOS, 7], [BOS, 9]])
    out = model(
        input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True, output_hidden_states=True
    )
    h = out.encoder_last_hidden_state
    alpha = out.cross_attentions[0]  # (B, T, S)
    context = alpha @ h  # (B, T, H)
    s = out.decoder_hidden_states[1]
    h_tilde = torch.tanh(torch.cat([s, context], -1) @ dec_mod.attention_proj.weight.T)
    torch.testing.assert_close(out.logits, model.lm_head(h_tilde), atol=1e-5, rtol=1e-5)
    # step 2 by hand with a torch.nn.LSTM holding the layer's weights (same names): input [x'_2; c_1], state s_1
    layer = dec_mod.rnn.layers[0]
    lstm = torch.nn.LSTM(layer.input_size, layer.hidden_size, batch_first=True)
    lstm.load_state_dict(layer.state_dict())
    enc = model.model.encoder(input_ids=ids, attention_mask=mask)
    s0 = model.model.bridge(enc.final_hidden_state, enc.final_cell_state)
    _, (h1, c1) = lstm(
        torch.cat([model.get_input_embeddings()(dec[:, :1]), _initial_context(model, s0, h, mask)], -1), (s0[0], s0[1])
    )
    torch.testing.assert_close(h1[0], s[:, 0], atol=1e-5, rtol=1e-5)
    x2 = torch.cat([model.get_input_embeddings()(dec[:, 1:2]), context[:, :1]], -1)
    out2, _ = lstm(x2, (h1, c1))
    torch.testing.assert_close(out2[:, 0], s[:, 1], atol=1e-5, rtol=1e-5)


def _initial_context(model, s0, h, mask) -> torch.Tensor:
    """c_0: attention of the initial decoder state s_0 (the encoder's final state) over the source."""
    scores = (s0[0][-1][:, None, :] @ h.transpose(1, 2)).masked_fill(mask[:, None, :] == 0, float("-inf"))
    return torch.softmax(scores, -1) @ h  # (B, 1, H)


@pytest.mark.parametrize("attention", ["dot", "none"])
def test_decoder_hidden_states_are_one_per_layer_as_a_step_by_step_run_gives_them(attention):
    """``decoder_hidden_states``: the target embeddings, then every decoder layer's states ``(B, T, H)``; each equals
    a run of ``torch.nn.LSTM``s holding the layers' weights, one target step at a time through the whole stack."""
    model = model_for(attention=attention, decoder_layers=2)
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 9]])
    out = model(
        input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_attentions=True, output_hidden_states=True
    )
    embeds = model.get_input_embeddings()(dec)  # (B, T, E)
    assert len(out.decoder_hidden_states) == 3 and out.decoder_hidden_states[0].shape == embeds.shape
    torch.testing.assert_close(out.decoder_hidden_states[0], embeds)
    enc = model.model.encoder(input_ids=ids, attention_mask=mask)
    s0 = model.model.bridge(enc.final_hidden_state, enc.final_cell_state)
    lstms = []
    for layer in model.model.decoder.rnn.layers:
        lstms.append(torch.nn.LSTM(layer.input_size, layer.hidden_size, batch_first=True))
        lstms[-1].load_state_dict(layer.state_dict())
    states = [(s0[0][k : k + 1], s0[1][k : k + 1]) for k in range(2)]
    if attention != "none":  # the fed context: c_0 from s_0, then c_j = Σ α_ij h_i
        h = out.encoder_last_hidden_state
        contexts = torch.cat([_initial_context(model, s0, h, mask), out.cross_attentions[0] @ h], dim=1)
    per_layer = [[], []]
    for j in range(dec.shape[1]):
        x = (
            embeds[:, j : j + 1]
            if attention == "none"
            else torch.cat([embeds[:, j : j + 1], contexts[:, j : j + 1]], -1)
        )
        for k, lstm in enumerate(lstms):
            x, states[k] = lstm(x, states[k])  # (B, 1, H)
            per_layer[k].append(x)
    for k in range(2):
        assert out.decoder_hidden_states[k + 1].shape == (3, 3, 10)
        torch.testing.assert_close(out.decoder_hidden_states[k + 1], torch.cat(per_layer[k], 1), atol=1e-5, rtol=1e-5)


def test_the_decoder_returns_an_output_object_and_hidden_states_select_by_index():
    """The decoder returns :class:`RNNSeq2SeqDecoderOutput` (a tuple with ``return_dict=False``); an index list in
    ``output_hidden_states`` keeps those states of the encoder and the decoder, counting from the end too."""
    model = model_for(encoder_layers=2, decoder_layers=3)
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 9]])
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_hidden_states=True)
    chosen = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, output_hidden_states=[0, -1])
    for name, count in (("encoder_hidden_states", 3), ("decoder_hidden_states", 4)):
        every, kept = getattr(full, name), getattr(chosen, name)
        assert len(every) == len(kept) == count and all(state is None for state in kept[1:-1])
        assert torch.equal(kept[0], every[0]) and torch.equal(kept[-1], every[-1])
    enc = model.model.encoder(input_ids=ids, attention_mask=mask)
    state = model.model.bridge(enc.final_hidden_state, enc.final_cell_state)
    decoder, embeds, source = model.model.decoder, model.get_input_embeddings()(dec), enc.last_hidden_state
    output = decoder(embeds, state, encoder_states=source, encoder_mask=mask)
    assert isinstance(output, RNNSeq2SeqDecoderOutput) and len(output.state) == 2
    torch.testing.assert_close(model.lm_head(output.last_hidden_state), full.logits)
    as_tuple = decoder(embeds, state, encoder_states=source, encoder_mask=mask, return_dict=False)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], output.last_hidden_state)


def test_plain_seq2seq_final_state_is_the_only_link():
    model = model_for(attention="none")
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6], [BOS, 7, 8], [BOS, 9, 9]])
    enc = model.get_encoder()(input_ids=ids, attention_mask=mask)
    ref = model(encoder_outputs=enc, attention_mask=mask, decoder_input_ids=dec).logits
    scrambled = type(enc)(
        last_hidden_state=torch.randn_like(enc.last_hidden_state),
        final_hidden_state=enc.final_hidden_state,
        final_cell_state=enc.final_cell_state,
    )
    torch.testing.assert_close(model(encoder_outputs=scrambled, attention_mask=mask, decoder_input_ids=dec).logits, ref)
    changed = type(enc)(
        last_hidden_state=enc.last_hidden_state,
        final_hidden_state=enc.final_hidden_state + 1.0,
        final_cell_state=enc.final_cell_state,
    )
    assert not torch.allclose(model(encoder_outputs=changed, attention_mask=mask, decoder_input_ids=dec).logits, ref)


def test_bidirectional_bridge_gives_decoder_sized_state():
    model = model_for(bidirectional=True, encoder_layers=2, decoder_layers=3, hidden_size=6)
    ids, mask = source_batch()
    enc = model.get_encoder()(input_ids=ids, attention_mask=mask)
    assert enc.last_hidden_state.shape == (3, 6, 12) and enc.final_hidden_state.shape == (3, 4, 6)
    h, c = model.model.bridge(enc.final_hidden_state, enc.final_cell_state)
    assert h.shape == c.shape == (3, 3, 6)


# ---------------------------------------------------------------------------------------------------------------
# generation
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=variant_id)
def test_cached_equals_uncached_greedy_and_beam(variant):
    model = model_for(**variant)
    ids, mask = source_batch()
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=7, output_scores=True, return_dict_in_generate=True)
    greedy = model.generate(**kw, do_sample=False)
    greedy_nc = model.generate(**kw, do_sample=False, use_cache=False)
    assert torch.equal(greedy.sequences, greedy_nc.sequences)
    for a, b in zip(greedy.scores, greedy_nc.scores):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    beam = model.generate(**kw, num_beams=4)
    beam_nc = model.generate(**kw, num_beams=4, use_cache=False)
    assert torch.equal(beam.sequences, beam_nc.sequences)
    torch.testing.assert_close(beam.sequences_scores, beam_nc.sequences_scores, atol=1e-5, rtol=1e-5)


def test_generate_returns_recurrent_cache_and_continues_from_it():
    model = model_for(bidirectional=True, input_feeding=True)
    ids, mask = source_batch()
    dec = torch.tensor([[BOS, 5, 6, 7], [BOS, 7, 8, 9], [BOS, 9, 9, 4]])
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, use_cache=True)
    assert isinstance(full.cache, RNNDecoderCache) and full.cache.get_seq_length() == 4
    first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec[:, :2], use_cache=True)
    second = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec[:, 2:], cache=first.cache, use_cache=True)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), full.logits, atol=1e-5, rtol=1e-5)


def test_num_beams_1_equals_greedy_and_a_manual_argmax_loop():
    model = model_for(attention="general", bidirectional=True)
    ids, mask = source_batch()
    greedy = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    one_beam = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=6, num_beams=1)
    assert torch.equal(greedy, one_beam)
    dec = torch.full((3, 1), BOS)
    done = torch.zeros(3, dtype=torch.bool)
    for _ in range(6):
        nxt = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
        dec = torch.cat([dec, nxt[:, None]], 1)
        done |= nxt == EOS
        if done.all():
            break
    assert torch.equal(greedy, dec)


def test_disabling_cache_reordering_breaks_beam_search(monkeypatch):
    """Beam search must reorder the recurrent state: with a no-op reorder, cached beams stop matching uncached ones."""
    model = model_for(attention="additive", bidirectional=True, uniform_init_range=1.5)
    kw = dict(max_new_tokens=8, num_beams=4, output_scores=True, return_dict_in_generate=True)
    sources = [source_batch(seed) for seed in range(1, 3)]
    reference = [model.generate(input_ids=i, attention_mask=m, use_cache=False, **kw) for i, m in sources]
    cached = [model.generate(input_ids=i, attention_mask=m, **kw) for i, m in sources]
    for ref, out in zip(reference, cached):  # with reordering everything matches
        assert torch.equal(ref.sequences, out.sequences)
    monkeypatch.setattr(RNNDecoderCache, "reorder_cache", lambda self, beam_idx: None)
    broken = [model.generate(input_ids=i, attention_mask=m, **kw) for i, m in sources]
    assert any(
        not torch.equal(ref.sequences, out.sequences)
        or not torch.allclose(ref.sequences_scores, out.sequences_scores, atol=1e-5)
        for ref, out in zip(reference, broken)
    )


def test_source_padding_does_not_change_the_translation():
    model = model_for(attention="scaled_dot", bidirectional=True)
    ids, mask = source_batch()
    kw = dict(max_new_tokens=7, num_beams=3, output_scores=True, return_dict_in_generate=True)
    batch = model.generate(input_ids=ids, attention_mask=mask, **kw)
    left_ids, left_mask = torch.full_like(ids, PAD), torch.zeros_like(mask)
    for row in range(3):
        length = int(mask[row].sum())
        alone = model.generate(input_ids=ids[row : row + 1, :length], **kw)
        got = batch.sequences[row][: alone.sequences.shape[1]]
        assert torch.equal(got, alone.sequences[0]), row
        assert batch.sequences[row][alone.sequences.shape[1] :].eq(PAD).all()
        torch.testing.assert_close(batch.sequences_scores[row], alone.sequences_scores[0], atol=1e-5, rtol=1e-5)
        left_ids[row, 6 - length :] = ids[row, :length]
        left_mask[row, 6 - length :] = 1
    left = model.generate(input_ids=left_ids, attention_mask=left_mask, **kw)
    assert torch.equal(left.sequences, batch.sequences)


def test_sampling_beam_options_and_return_sequences():
    model = model_for(attention="cosine")
    ids, mask = source_batch()
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6)
    torch.manual_seed(3)
    a = model.generate(**kw, do_sample=True, temperature=0.7, top_k=5, top_p=0.9)
    torch.manual_seed(3)
    b = model.generate(**kw, do_sample=True, temperature=0.7, top_k=5, top_p=0.9, use_cache=False)
    assert torch.equal(a, b)  # same random draws, same logits cached or not
    assert a[:, 1:].lt(VOCAB).all()
    out = model.generate(
        **kw,
        num_beams=4,
        num_return_sequences=3,
        length_penalty=0.6,
        early_stopping=True,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert out.sequences.shape[0] == 9
    scores = out.sequences_scores.view(3, 3)
    assert torch.all(scores[:, :-1] >= scores[:, 1:] - 1e-6)  # returned best first
    eos_stop = model.generate(**kw, eos_token_id=[EOS, 5], num_beams=2)
    assert eos_stop.shape[0] == 3
    default_len = model.generate(input_ids=ids, attention_mask=mask)
    assert default_len.shape[1] <= 10  # generation_config.max_length = config.max_target_length


def test_output_attentions_through_generate():
    model = model_for(attention="additive")
    ids, mask = source_batch()
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=4,
        min_new_tokens=4,
        output_attentions=True,
        return_dict_in_generate=True,
    )
    assert len(out.cross_attentions) == 4
    assert out.cross_attentions[0][0].shape == (3, 1, 6)


# ---------------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------------


def test_labels_without_decoder_start_token_id_raise():
    model = model_for(decoder_start_token_id=None)
    ids, mask = source_batch()
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([[5, EOS]] * 3))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(attention_mask=torch.ones(3, 5, dtype=torch.long)), "attention_mask"),
        (dict(input_ids=torch.full((3, 6), VOCAB)), "input_ids"),
        (dict(decoder_input_ids=torch.tensor([[BOS, -1]] * 3)), "decoder_input_ids"),
        (dict(decoder_input_ids=torch.full((2, 2), BOS)), "decoder_input_ids"),
        (dict(labels=torch.tensor([[5, 6, 7]] * 3), decoder_input_ids=torch.full((3, 2), BOS)), "labels"),
        (dict(labels=torch.tensor([[5, VOCAB]] * 3)), "labels"),
        (dict(decoder_attention_mask=torch.ones(3, 5)), "decoder_attention_mask"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_argument(kwargs, name):
    model = model_for()
    ids, mask = source_batch()
    inputs = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=torch.full((3, 2), BOS))
    inputs.update(kwargs)
    with pytest.raises(ValueError, match=name):
        model(**inputs)


def test_encoder_outputs_of_wrong_size_raise():
    model = model_for(bidirectional=True)
    ids, mask = source_batch()
    enc = model.get_encoder()(input_ids=ids, attention_mask=mask)
    bad = type(enc)(
        last_hidden_state=enc.last_hidden_state[..., :10],
        final_hidden_state=enc.final_hidden_state,
        final_cell_state=enc.final_cell_state,
    )
    with pytest.raises(ValueError, match="encoder_outputs"):
        model(encoder_outputs=bad, attention_mask=mask, decoder_input_ids=torch.full((3, 2), BOS))


# ---------------------------------------------------------------------------------------------------------------
# pipelines and remote code
# ---------------------------------------------------------------------------------------------------------------

PAIRS = [
    {"en": "in the beginning god created the heaven", "es": "en el principio crió dios los cielos"},
    {"en": "and the earth was without form", "es": "y la tierra estaba desordenada"},
    {"en": "let there be light", "es": "sea la luz"},
]


@pytest.fixture(scope="module")
def saved_translator(tmp_path_factory):
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    tok = build_translation_tokenizer(PAIRS, kind="word", vocab_size=100)
    path = tmp_path_factory.mktemp("translator")
    torch.manual_seed(0)
    config = tiny(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.bos_token_id,
        bidirectional=True,
    )
    model = RNNSeq2SeqForConditionalGeneration(config).eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model, tok


@pytest.mark.parametrize("task, key", [("translation", "translation_text"), ("text2text-generation", "generated_text")])
def test_pipelines_on_saved_model(saved_translator, task, key):
    path, model, tok = saved_translator
    with pytest.raises(KeyError, match="removed"):  # transformers 5 dropped the built-in task
        pipeline(task)
    pipe = pipeline(task, model=str(path), trust_remote_code=True)
    result = pipe(["let there be light", "and the earth"], max_new_tokens=5, num_beams=2)
    assert len(result) == 2 and all(isinstance(r[0][key] if isinstance(r, list) else r[key], str) for r in result)
    enc = tok(["let there be light"], return_tensors="pt")
    expected = tok.decode(model.generate(**enc, max_new_tokens=5, num_beams=2)[0], skip_special_tokens=True)
    first = result[0][0] if isinstance(result[0], list) else result[0]
    assert first[key].strip() == expected.strip()


REMOTE = """
import json, sys
try:
    import hf_seq  # noqa: F401
    print("hf_seq importable"); sys.exit(1)
except ImportError:
    pass
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
model = AutoModelForSeq2SeqLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert "hf_seq" not in sys.modules
tok = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)
enc = tok(["let there be light"], return_tensors="pt")
out = model.generate(**enc, max_new_tokens=5, num_beams=3)
from transformers import pipeline
translated = pipeline("translation", model=sys.argv[1], trust_remote_code=True)("let there be light", max_new_tokens=5)
assert "hf_seq" not in sys.modules and isinstance(translated[0]["translation_text"], str)
print(type(model).__module__, json.dumps(out.tolist()))
"""


def test_pipeline_with_model_object(saved_translator):
    from hf_seq.seq2seq_pipelines import TranslationPipeline

    _, model, tok = saved_translator
    pipe = TranslationPipeline(model=model, tokenizer=tok)
    out = pipe("let there be light", max_new_tokens=4, num_return_sequences=2, num_beams=2)
    assert len(out) == 2 and all("translation_text" in o for o in out)


def test_remote_code_load_without_hf_seq(saved_translator, clean_python, tmp_path):
    path, model, tok = saved_translator
    for name in (
        "modeling_rnn_seq2seq.py",
        "configuration_rnn_seq2seq.py",
        "attention.py",
        "recurrent.py",
        "recurrent_cells.py",
        "recurrent_kernels.py",
        "fast_paths.py",
        "seq2seq_pipelines.py",
    ):
        assert (path / name).exists(), name
    config = json.loads((path / "config.json").read_text())
    assert "AutoModelForSeq2SeqLM" in config["auto_map"]
    proc = run_clean(clean_python, REMOTE.replace("sys.argv[1]", repr(str(path))), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    module, generated = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules"), proc.stdout[-2000:]
    enc = tok(["let there be light"], return_tensors="pt")
    assert json.loads(generated) == model.generate(**enc, max_new_tokens=5, num_beams=3).tolist()


# ---------------------------------------------------------------------------------------------------------------
# compiler, export, quantization, checkpointing, transformers 5 plumbing
# ---------------------------------------------------------------------------------------------------------------


def toolchain_case(head, overrides, slow=False):
    marks = [pytest.mark.slow] if slow else []  # slow: the same checks for the remaining variants (make test-all)
    return pytest.param(head, overrides, id=f"{head.__name__}-" + variant_id(overrides), marks=marks)


# (head, config overrides): both heads, attention and plain, uni- and bidirectional encoders, all three cells
TOOLCHAIN_CASES = [
    toolchain_case(RNNSeq2SeqForConditionalGeneration, dict(attention="additive", bidirectional=True)),
    toolchain_case(RNNSeq2SeqForConditionalGeneration, dict(attention="none", cell="gru", decoder_layers=2)),
    toolchain_case(RNNSeq2SeqModel, dict(attention="dot", cell="rnn", input_feeding=True), slow=True),
]
EXPORT_CASES = [
    toolchain_case(RNNSeq2SeqForConditionalGeneration, dict(attention="additive", bidirectional=True)),
    toolchain_case(RNNSeq2SeqForConditionalGeneration, dict(attention="none", cell="gru", decoder_layers=2), True),
    toolchain_case(RNNSeq2SeqModel, dict(attention="dot", cell="rnn", input_feeding=True), slow=True),
]
TARGET = torch.tensor([[BOS, 5, 6], [BOS, 8, PAD], [BOS, PAD, PAD]])
SOURCE = torch.tensor([[4, 5, 6, EOS], [7, 8, EOS, PAD], [PAD, 9, 10, EOS]])  # full, right- and left-padded rows


def toolchain_inputs(head, labels: bool) -> dict:
    ids, mask = SOURCE, (SOURCE != PAD).long()
    inputs = {"input_ids": ids, "attention_mask": mask}
    if labels and head is RNNSeq2SeqForConditionalGeneration:
        inputs["labels"] = torch.where(TARGET == PAD, -100, TARGET)
    else:
        inputs["decoder_input_ids"] = TARGET
    inputs["decoder_attention_mask"] = (TARGET != PAD).long()
    return inputs


def toolchain_model(head, **overrides):
    torch.manual_seed(0)
    return head(tiny(uniform_init_range=0.3, **overrides))


@pytest.mark.parametrize("head,overrides", TOOLCHAIN_CASES)
def test_compiled_training_step_equals_eager_and_inference_has_no_graph_break(head, overrides):
    model = toolchain_model(head, **overrides)
    assert_compiled_training_step_matches(model, toolchain_inputs(head, labels=True), backend="aot_eager")
    assert graph_breaks(model.eval(), toolchain_inputs(head, labels=False)) == 0


@pytest.mark.slow  # the first Inductor compile of a process builds C++ kernels (~10 s warm, ~60 s cold here)
def test_inductor_compiled_training_step_equals_eager():
    """The default backend once for the family: LSTM encoder-decoder with additive attention, padded batch."""
    head = RNNSeq2SeqForConditionalGeneration
    model = toolchain_model(head)
    assert_compiled_training_step_matches(model, toolchain_inputs(head, labels=True), backend="inductor")


@pytest.mark.parametrize("head,overrides", EXPORT_CASES)
def test_export_and_onnx_match_eager(head, overrides, tmp_path):
    """Inference forward through torch.export and ONNX (onnxruntime, ≤ 1e-4); the decoder cache comes out as its
    tensors (state, fed vector, prepared keys)."""
    model = toolchain_model(head, **overrides)
    assert_export_and_onnx_match(model, toolchain_inputs(head, labels=False), tmp_path)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(attention="dot", bidirectional=True, encoder_layers=2, decoder_layers=2),
        dict(attention="none", cell="gru", decoder_layers=2),
    ],
)
def test_quantize_dynamic_quantizes_every_linear_and_recurrent_layer(overrides):
    """After prepare_for_quantization_() (outputs unchanged): the bridge, key projection, W_c, the output layer (tied to
    the embedding) and every encoder and decoder LSTM/GRU layer are quantized, the logits stay close to the float
    model's, and generate() runs (greedy and beam search)."""
    head = RNNSeq2SeqForConditionalGeneration
    model = toolchain_model(head, **overrides).eval()
    inputs = toolchain_inputs(head, labels=False)
    with torch.no_grad():
        expected = model(**inputs).logits
        assert_same_outputs(model.prepare_for_quantization_()(**inputs).logits, expected)
    quantized = assert_quantizes(model, inputs)
    names = {n for n, m in quantized.named_modules() if "quantized" in type(m).__module__ and "." in n}
    layers = {f"model.{part}.rnn.layers.{k}" for part in ("encoder", "decoder") for k in range(2)}
    layers &= {n for n, _ in model.named_modules()}
    assert len(layers) == model.config.encoder_layers + model.config.decoder_layers and layers <= names
    if overrides["attention"] != "none":
        assert {"model.bridge.hidden_proj", "model.decoder.key_proj", "model.decoder.attention_proj"} <= names
    ids, mask = source_batch()
    for num_beams in (1, 3):
        out = quantized.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, num_beams=num_beams)
        assert out.shape[0] == 3 and bool((out[:, 0] == BOS).all())


@pytest.mark.parametrize("attention,max_ratio", [("additive", 0.5), ("none", 0.6)])
def test_gradient_checkpointing_same_gradients_less_memory(attention, max_ratio):
    """With attention each decoder step is one checkpointed block and its layers are recomputed once, with the step
    (not checkpointed a second time inside it); without, the recurrent layers checkpoint themselves. Every module
    with the flag reports it (transformers' contract). Same gradients, far fewer saved activation bytes."""
    import transformers.modeling_utils

    head = RNNSeq2SeqForConditionalGeneration
    model = toolchain_model(head, attention=attention, hidden_size=16, embedding_size=16, decoder_layers=2)
    inputs = toolchain_inputs(head, labels=True)
    checkpointed = []

    def counting_checkpoint(function, *args, **kwargs):
        checkpointed.append(function)
        return torch.utils.checkpoint.checkpoint(function, *args, **kwargs)

    with mock.patch.object(transformers.modeling_utils, "checkpoint", counting_checkpoint):
        model.activation_checkpointing_enable()
    flags = {n: m.gradient_checkpointing for n, m in model.named_modules() if hasattr(m, "gradient_checkpointing")}
    assert "model.decoder" in flags and "model.decoder.rnn.layers.1" in flags and all(flags.values()), flags
    steps, original_step = [], RNNSeq2SeqDecoder.step

    def counting_step(decoder, *args):
        steps.append(decoder)
        return original_step(decoder, *args)

    with mock.patch.object(RNNSeq2SeqDecoder, "step", counting_step):
        model.train()
        model(**inputs).loss.backward()
    encoder_layers, target_len = model.config.encoder_layers, TARGET.shape[1]
    if attention == "none":  # each recurrent layer is one checkpoint
        assert len(checkpointed) == encoder_layers + model.config.decoder_layers and not steps
    else:  # one checkpoint per encoder layer and per decoder step, none inside a step; each step run twice
        assert len(checkpointed) == encoder_layers + target_len
        assert len(steps) == 2 * target_len
    model.activation_checkpointing_disable()
    assert not any(m.gradient_checkpointing for m in model.modules() if hasattr(m, "gradient_checkpointing"))
    assert_checkpointing_saves_memory(model, inputs, max_ratio)


def test_training_and_decode_steps_read_no_tensor_values_on_the_host():
    """On the meta device (a value read raises) training and cached decoding take the static path: no host reads."""
    head = RNNSeq2SeqForConditionalGeneration
    for overrides in (dict(bidirectional=True), dict(attention="none", cell="gru")):
        model = toolchain_model(head, **overrides).to("meta").train()
        inputs = to_meta(toolchain_inputs(head, labels=True))
        model(**inputs).loss.backward()
        model.eval()
        encoded = model.get_encoder()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        source = dict(encoder_outputs=encoded, attention_mask=inputs["attention_mask"])
        first = model(**source, decoder_input_ids=TARGET[:, :2].to("meta"))
        step = model(
            **source,
            decoder_input_ids=TARGET[:, 2:3].to("meta"),
            decoder_attention_mask=torch.ones(3, 3, dtype=torch.long, device="meta"),
            cache=first.cache,
        )
        assert step.logits.shape == (3, 1, VOCAB) and step.cache.seen_tokens == 3


def test_static_path_gives_the_eager_outputs():
    """What an accelerator runs (no packing, no shortcuts) gives the eager CPU outputs and gradients."""
    head = RNNSeq2SeqForConditionalGeneration
    model = toolchain_model(head, bidirectional=True, encoder_layers=2).train()
    inputs = toolchain_inputs(head, labels=True)
    results = []
    for accelerator in (False, True):
        with on_accelerator_paths() if accelerator else warnings.catch_warnings():
            model.zero_grad()
            out = model(**inputs)
            out.loss.backward()
            results.append((out.logits, {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-5, atol=1e-6)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, rtol=1e-5, atol=1e-6, msg=name)


def test_dummy_inputs_run_the_model():
    for head in (RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel):
        model = toolchain_model(head)
        assert "decoder_input_ids" in model.dummy_inputs
        out = model(**model.dummy_inputs)
        assert out[0].shape[:2] == model.dummy_inputs["decoder_input_ids"].shape


def test_generate_with_a_decoder_prompt_and_its_mask():
    """generate(decoder_input_ids=p, decoder_attention_mask=m): a left-padded decoder prompt continues exactly like the
    same prompt without padding."""
    model = model_for()
    ids, mask = source_batch()
    prompt = torch.tensor([[BOS, 5, 6], [PAD, BOS, 7], [PAD, PAD, BOS]])
    prompt_mask = (prompt != PAD).long()
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        decoder_input_ids=prompt,
        decoder_attention_mask=prompt_mask,
        max_new_tokens=4,
        do_sample=False,
        eos_token_id=None,
    )
    assert out.shape == (3, 7)
    for row in range(3):
        start = int((prompt[row] == PAD).sum())
        alone = model.generate(
            input_ids=ids[row : row + 1],
            attention_mask=mask[row : row + 1],
            decoder_input_ids=prompt[row : row + 1, start:],
            max_new_tokens=4,
            do_sample=False,
            eos_token_id=None,
        )
        assert torch.equal(out[row, start:], alone[0])


def test_past_key_values_is_the_deprecated_name_of_cache():
    model = model_for()
    ids, mask = source_batch()
    first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=TARGET[:, :2])
    expected = model(input_ids=ids, attention_mask=mask, decoder_input_ids=TARGET[:, 2:3], cache=first.cache).logits
    first = model(input_ids=ids, attention_mask=mask, decoder_input_ids=TARGET[:, :2])
    with pytest.warns(FutureWarning, match="past_key_values"):
        old = model(input_ids=ids, attention_mask=mask, decoder_input_ids=TARGET[:, 2:3], past_key_values=first.cache)
    assert torch.equal(old.logits, expected)
    full = model(input_ids=ids, attention_mask=mask, decoder_input_ids=TARGET[:, :3]).logits
    assert_same_outputs(old.logits[:, 0], full[:, 2])


@pytest.mark.parametrize("kwargs", [dict(prompt_lookup_num_tokens=2), dict(assistant_model="self")])
def test_assisted_decoding_is_refused_for_the_stateful_model(kwargs):
    model = model_for()
    assert model._is_stateful
    kwargs = {k: (model if v == "self" else v) for k, v in kwargs.items()}
    ids, mask = source_batch()
    with pytest.raises(ValueError, match="not supported with stateful models"):
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=3, **kwargs)


@pytest.mark.parametrize("head", [RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel])
def test_config_level_and_call_level_output_flags_agree(head):
    model = toolchain_model(head).eval()
    inputs = toolchain_inputs(head, labels=False)
    called = model(**inputs, output_hidden_states=True, output_attentions=True)
    as_tuple = model(**inputs, output_hidden_states=True, output_attentions=True, return_dict=False)
    assert called.decoder_hidden_states is not None and called.cross_attentions is not None
    model.config.output_hidden_states = model.config.output_attentions = True
    configured = model(**inputs)
    model.config.return_dict = False
    configured_tuple = model(**inputs)
    assert isinstance(as_tuple, tuple) and isinstance(configured_tuple, tuple)
    assert len(as_tuple) == len(configured_tuple) == len(called.to_tuple())
    leaves = [pytree.tree_leaves(x) for x in (called.to_tuple(), configured.to_tuple(), as_tuple, configured_tuple)]
    assert all(len(leaf) == len(leaves[0]) for leaf in leaves)
    for group in zip(*leaves):
        if isinstance(group[0], torch.Tensor):
            assert all(torch.equal(group[0], other) for other in group[1:])


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_continues_from_a_returned_cache_as_one_uninterrupted_generate(num_beams):
    """``generate(decoder_input_ids=<whole decoder sequence>, cache=<returned cache>)`` reads only the decoder tokens
    the cache has not read (generate() does not cut them for a recurrent cache): the same tokens as one uninterrupted
    generate. A decoder prefix the cache has read entirely (nothing to continue from) is a clear error."""
    model = model_for(bidirectional=True)
    ids, mask = source_batch()
    kw = dict(input_ids=ids, attention_mask=mask, do_sample=False)
    whole = model.generate(**kw, max_new_tokens=5, min_new_tokens=5)
    first = model.generate(**kw, max_new_tokens=2, min_new_tokens=2, return_dict_in_generate=True)
    assert first.cache.get_seq_length() == 2 and torch.equal(first.sequences, whole[:, :3])
    rest = model.generate(
        **kw, decoder_input_ids=first.sequences, cache=copy.deepcopy(first.cache), max_new_tokens=3, min_new_tokens=3
    )
    assert torch.equal(rest, whole)
    if num_beams > 1:  # beam search over the continued state, expanded per beam: as from the prefix without a cache
        beams = dict(num_beams=num_beams, max_new_tokens=3, min_new_tokens=3, decoder_input_ids=first.sequences)
        with pytest.raises(ValueError, match="batch_repeat_interleave"):  # generate() does not expand a given cache
            model.generate(**kw, cache=copy.deepcopy(first.cache), **beams)
        expanded = copy.deepcopy(first.cache)
        expanded.batch_repeat_interleave(num_beams)
        continued = model.generate(**kw, cache=expanded, **beams)
        assert torch.equal(continued, model.generate(**kw, use_cache=False, **beams))
    with pytest.raises(ValueError, match="`decoder_input_ids` has 2 tokens .* `cache` has read 2"):
        model.generate(
            **kw, decoder_input_ids=first.sequences[:, :2], cache=copy.deepcopy(first.cache), max_new_tokens=1
        )


def test_num_hidden_layers_is_the_decoder_layer_count(tmp_path):
    """``num_hidden_layers`` is the decoder's layer count (the layers of the generation cache), as in the Transformer
    config; setting it sets ``decoder_layers``, and a save/load round trip keeps both counts."""
    config = tiny(encoder_layers=2, decoder_layers=3)
    assert config.num_hidden_layers == 3
    model = RNNSeq2SeqForConditionalGeneration(config)
    assert len(model.model.decoder.rnn.layers) == config.num_hidden_layers
    config.num_hidden_layers = 4
    assert (config.encoder_layers, config.decoder_layers) == (2, 4)
    config.save_pretrained(tmp_path)
    assert "num_hidden_layers" not in (tmp_path / "config.json").read_text()  # saved under its own name only
    loaded = HfSeqRNNSeq2SeqConfig.from_pretrained(tmp_path)
    assert (loaded.num_hidden_layers, loaded.encoder_layers, loaded.decoder_layers) == (4, 2, 4)
    assert (tiny(num_hidden_layers=3).encoder_layers, tiny(num_hidden_layers=3).decoder_layers) == (1, 3)
