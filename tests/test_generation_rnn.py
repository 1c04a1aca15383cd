"""RNNForCausalLM and generate(): the recurrent state as the cache, beam search reordering, sampling, left padding,
the self-attention LSTM (LSTMN) against a direct loop of its equations, tying / one-hot, pipelines, remote code."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_same_outputs, run_clean
from transformers import AutoModelForCausalLM, pipeline

from hf_seq import HfSeqRNNConfig
from hf_seq.modeling_rnn import RNNCache, RNNForCausalLM, RNNForSequenceClassification
from hf_seq.recurrent import RecurrentStack
from hf_seq.toolkit.tokenization import build_char_tokenizer

V = 13
CELLS = ["lstm", "gru", "self_attention_lstm"]


def tiny_lm(cell="lstm", seed=0, num_hidden_layers=2, **overrides) -> RNNForCausalLM:
    """A random tiny LM with sharp-ish logits (larger init) so that decoding paths actually diverge."""
    torch.manual_seed(seed)
    kwargs = dict(
        vocab_size=V,
        embedding_size=8,
        hidden_size=12,
        num_hidden_layers=num_hidden_layers,
        cell=cell,
        pad_token_id=0,
        initializer_range=0.6,
    )
    kwargs.update(overrides)
    return RNNForCausalLM(HfSeqRNNConfig(**kwargs)).eval()


def prompts(batch=2, length=4, seed=1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (batch, length), generator=g)


def greedy(model, ids, **kw):
    return model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=0, **kw)


def beam(model, ids, **kw):
    kw.setdefault("max_new_tokens", 7)
    return model.generate(
        ids, do_sample=False, num_beams=4, pad_token_id=0, output_scores=True, return_dict_in_generate=True, **kw
    )


# ----------------------------------------------------------------------------------------------------------
# cache == no cache; greedy == manual argmax loop; num_beams=1 == greedy
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", CELLS)
def test_cached_equals_uncached_greedy(cell):
    model, ids = tiny_lm(cell), prompts()
    cached = greedy(model, ids)
    uncached = greedy(model, ids, use_cache=False)
    assert cached.shape == (2, 12)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("cell", CELLS)
def test_cached_equals_uncached_beam(cell):
    model, ids = tiny_lm(cell), prompts()
    cached = beam(model, ids, num_return_sequences=2, length_penalty=0.7)
    uncached = beam(model, ids, num_return_sequences=2, length_penalty=0.7, use_cache=False)
    assert cached.sequences.shape[0] == 4
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=1e-5)


def test_forward_returns_cache_and_one_token_steps_reproduce_full_forward():
    model, ids = tiny_lm("self_attention_lstm"), prompts(length=6)
    full = model(ids).logits
    out = model(ids[:, :3])
    cache = out.cache
    assert isinstance(cache, RNNCache) and cache.get_seq_length() == 3
    steps = [out.logits]
    for t in range(3, 6):
        out = model(ids[:, t : t + 1], cache=cache)
        assert out.cache is cache  # updated in place, like transformers' caches
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=0)
    assert cache.get_seq_length() == 6
    assert model(ids, use_cache=False).cache is None


@pytest.mark.parametrize("cell", ["lstm", "self_attention_lstm"])
def test_generate_continues_from_a_returned_cache_as_one_uninterrupted_generate(cell):
    """``generate(cache=<returned cache>)`` reads only the tokens the state has not read, whether it gets the whole
    sequence (transformers' convention for every cache), only the new tokens with the whole attention mask (Mamba's)
    or the embeddings of the whole sequence; it continues exactly as one uninterrupted generate. An input that cannot
    be placed against the cache is a clear error."""
    model, ids = tiny_lm(cell), prompts(length=5)
    ids[0, :2], mask = 0, torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded prompt
    kw = dict(do_sample=False, pad_token_id=0)
    whole = model.generate(ids, attention_mask=mask, max_new_tokens=5, **kw)
    first = model.generate(ids, attention_mask=mask, max_new_tokens=2, return_dict_in_generate=True, **kw)
    seen = first.cache.get_seq_length()
    assert seen == 6 and torch.equal(first.sequences, whole[:, :7])  # the last token is not read yet
    full_mask = torch.cat([mask, torch.ones_like(mask[:, :2])], dim=1)
    for tokens in (first.sequences, first.sequences[:, seen:]):
        rest = model.generate(
            tokens, attention_mask=full_mask, cache=copy.deepcopy(first.cache), max_new_tokens=3, **kw
        )
        assert torch.equal(rest[:, -3:], whole[:, -3:])
    embeds = model.get_input_embeddings()(first.sequences)
    rest = model.generate(
        inputs_embeds=embeds, attention_mask=full_mask, cache=copy.deepcopy(first.cache), max_new_tokens=3, **kw
    )
    assert torch.equal(rest[:, -3:], whole[:, -3:])
    # without padding: the whole sequence needs no mask (generate() makes an all-ones one)
    unpadded = model.generate(ids[1:], max_new_tokens=2, return_dict_in_generate=True, **kw)
    rest = model.generate(unpadded.sequences, cache=unpadded.cache, max_new_tokens=3, **kw)
    assert torch.equal(rest, model.generate(ids[1:], max_new_tokens=5, **kw))
    for tokens, tokens_mask in ((first.sequences[:, -1:], None), (first.sequences[:, -2:], full_mask)):
        with pytest.raises(ValueError, match="`cache` has read 6"):
            model.generate(tokens, attention_mask=tokens_mask, cache=copy.deepcopy(first.cache), max_new_tokens=1, **kw)


@pytest.mark.parametrize("cell", ["lstm", "self_attention_lstm"])
def test_greedy_equals_manual_argmax_loop(cell):
    model, ids = tiny_lm(cell), prompts()
    expected = ids.clone()
    with torch.no_grad():
        for _ in range(8):  # full forward pass over the whole sequence each step, no cache
            next_token = model(expected, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            expected = torch.cat([expected, next_token], dim=1)
    assert torch.equal(greedy(model, ids), expected)


def test_num_beams_1_equals_greedy():
    model, ids = tiny_lm("lstm"), prompts()
    assert torch.equal(greedy(model, ids, num_beams=1), greedy(model, ids))


# ----------------------------------------------------------------------------------------------------------
# beam search: better than greedy on a constructed case; the state reordering is exercised
# ----------------------------------------------------------------------------------------------------------

PAD, A, B, C, D = range(5)


def bigram_lm(table: dict[int, list[float]]) -> RNNForCausalLM:
    """An exact bigram model built from weights: one-hot input, SimpleRNN with W_hh = 0 so h_t = tanh(5·e_{x_t}),
    and an output layer holding each previous token's log-probabilities."""
    config = HfSeqRNNConfig(
        vocab_size=5,
        embedding_size=5,
        hidden_size=5,
        num_hidden_layers=1,
        cell="rnn",
        input_encoding="one_hot",
        pad_token_id=PAD,
    )
    model = RNNForCausalLM(config).eval()
    layer = model.rnn.encoder.layers[0]
    with torch.no_grad():
        layer.weight_ih_l0.copy_(5.0 * torch.eye(5))
        layer.weight_hh_l0.zero_()
        layer.bias_ih_l0.zero_()
        layer.bias_hh_l0.zero_()
        weight = torch.full((5, 5), -30.0)
        for prev, probs in table.items():
            weight[:, prev] = torch.tensor(probs).clamp_min(1e-12).log() / math.tanh(5.0)
        model.lm_head.weight.copy_(weight)
        model.lm_head.bias.zero_()
    return model


def sequence_logprob(model, sequence: torch.Tensor, prompt_length: int) -> float:
    with torch.no_grad():
        logprobs = model(sequence[None], use_cache=False).logits.log_softmax(-1)[0]  # (T, V)
    return sum(float(logprobs[t - 1, sequence[t]]) for t in range(prompt_length, len(sequence)))


def test_beam_search_beats_myopic_greedy_on_constructed_case():
    # after C: A 0.6, B 0.4; after A: spread out (best 0.3); after B: D 0.99. Greedy takes A (0.6·0.3 = 0.18),
    # beam search finds B D (0.4·0.99 = 0.396).
    model = bigram_lm(
        {
            C: [0, 0.6, 0.4, 0, 0],
            A: [0, 0.3, 0.25, 0.25, 0.2],
            B: [0, 0, 0.005, 0.005, 0.99],
            D: [0, 0.25, 0.25, 0.25, 0.25],
        }
    )
    prompt = torch.tensor([[C]])
    greedy_out = model.generate(prompt, do_sample=False, max_new_tokens=2, pad_token_id=PAD)
    beam_out = model.generate(
        prompt,
        do_sample=False,
        num_beams=3,
        max_new_tokens=2,
        pad_token_id=PAD,
        length_penalty=0.0,
        output_scores=True,
        return_dict_in_generate=True,
    )
    assert greedy_out[0].tolist() == [C, A, A]
    assert beam_out.sequences[0].tolist() == [C, B, D]
    greedy_score = sequence_logprob(model, greedy_out[0], 1)
    beam_score = sequence_logprob(model, beam_out.sequences[0], 1)
    assert beam_score > greedy_score
    assert math.isclose(beam_score, math.log(0.4 * 0.99), rel_tol=1e-4)
    assert math.isclose(float(beam_out.sequences_scores[0]), beam_score, rel_tol=1e-4)  # length_penalty=0: raw sum


@pytest.mark.parametrize("cell", ["lstm", "self_attention_lstm"])
def test_disabling_state_reordering_breaks_beam_search(cell, monkeypatch):
    """Proof that beam search really goes through RNNCache.reorder_cache: without it cached != uncached."""
    model, ids = tiny_lm(cell), prompts()
    reference = beam(model, ids, use_cache=False, num_return_sequences=4, max_new_tokens=10)
    calls = []
    monkeypatch.setattr(RNNCache, "reorder_cache", lambda self, beam_idx: calls.append(beam_idx.clone()))
    broken = beam(model, ids, num_return_sequences=4, max_new_tokens=10)
    assert calls, "beam search never asked the cache to reorder"
    assert any(not torch.equal(c, torch.arange(len(c))) for c in calls)  # beams really were shuffled
    same = torch.equal(broken.sequences, reference.sequences) and torch.allclose(
        broken.sequences_scores, reference.sequences_scores, atol=1e-5
    )
    assert not same


# ----------------------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------------------


def test_same_seed_same_samples_and_top_k_1_is_greedy():
    model, ids = tiny_lm("lstm"), prompts()
    kw = dict(do_sample=True, max_new_tokens=12, pad_token_id=0, temperature=1.2, top_p=0.95)
    torch.manual_seed(123)
    first = model.generate(ids, **kw)
    torch.manual_seed(123)
    second = model.generate(ids, **kw)
    assert torch.equal(first, second)
    draws = set()
    for seed in range(3):
        torch.manual_seed(seed)
        draws.add(tuple(model.generate(ids, **kw)[0].tolist()))
    assert len(draws) > 1  # it really samples
    torch.manual_seed(0)
    assert torch.equal(
        model.generate(ids, do_sample=True, top_k=1, max_new_tokens=8, pad_token_id=0), greedy(model, ids)
    )


# ----------------------------------------------------------------------------------------------------------
# left padding; eos; max_new_tokens
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", CELLS)
def test_left_padded_batch_equals_each_prompt_alone(cell):
    model = tiny_lm(cell)
    rows = [[3, 5, 7, 2, 9], [4, 8], [6, 1, 11]]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    batch_greedy = greedy(model, ids, attention_mask=mask)
    batch_beam = beam(model, ids, attention_mask=mask)
    for i, row in enumerate(rows):
        alone = torch.tensor([row])
        assert batch_greedy[i, width:].tolist() == greedy(model, alone)[0, len(row) :].tolist()
        alone_beam = beam(model, alone)
        assert batch_beam.sequences[i, width:].tolist() == alone_beam.sequences[0, len(row) :].tolist()
        torch.testing.assert_close(batch_beam.sequences_scores[i], alone_beam.sequences_scores[0], atol=1e-5, rtol=0)


def test_eos_stops_and_max_new_tokens():
    model, ids = tiny_lm("lstm"), prompts(batch=1)
    free = greedy(model, ids)[0, 4:].tolist()
    eos = free[2]
    stopped = model.generate(ids, do_sample=False, max_new_tokens=8, eos_token_id=eos, pad_token_id=0)[0, 4:].tolist()
    assert stopped == free[: free.index(eos) + 1]
    long = model.generate(ids, do_sample=False, max_new_tokens=30, min_new_tokens=30, eos_token_id=eos, pad_token_id=0)
    assert long.shape[1] == 4 + 30


# ----------------------------------------------------------------------------------------------------------
# self-attention LSTM (LSTMN) against a direct loop of its equations
# ----------------------------------------------------------------------------------------------------------


def lstmn_reference(layer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cheng et al. (2016), written out for one unpadded sequence x (T, I), without the shared attention core:

    a_i = vᵀ tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t-1} + b)   for every previous step i < t
    s = softmax(a);  h̃_t = Σ s_i h_i;  c̃_t = Σ s_i c_i   (h̃_t = c̃_t = 0 at t = 1)
    i, f, g, o = split(W_ih x_t + b_ih + W_hh h̃_t + b_hh)
    c_t = σ(f) c̃_t + σ(i) tanh(g);  h_t = σ(o) tanh(c_t)
    """
    att = layer.attention_l0
    W_h, W_q, b_q, v = att.key_proj.weight, att.query_proj.weight, att.query_proj.bias, att.energy.weight[0]
    hidden = layer.hidden_size
    hs, cs, outputs = [], [], []
    h_tilde = torch.zeros(hidden)
    for t in range(x.shape[0]):
        if hs:
            query = torch.cat([x[t], h_tilde])
            scores = torch.stack([v @ torch.tanh(W_h @ h_i + W_q @ query + b_q) for h_i in hs])
            weights = torch.softmax(scores, dim=0)
            h_tilde = sum(w * h_i for w, h_i in zip(weights, hs))
            c_tilde = sum(w * c_i for w, c_i in zip(weights, cs))
        else:
            h_tilde, c_tilde = torch.zeros(hidden), torch.zeros(hidden)
        gates = layer.weight_ih_l0 @ x[t] + layer.bias_ih_l0 + layer.weight_hh_l0 @ h_tilde + layer.bias_hh_l0
        i, f, g, o = gates.split(hidden)
        c = torch.sigmoid(f) * c_tilde + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        hs.append(h)
        cs.append(c)
        outputs.append(h)
    return torch.stack(outputs), h, c


def test_self_attention_lstm_matches_direct_loop_with_padding():
    torch.manual_seed(0)
    stack = RecurrentStack("self_attention_lstm", 5, 4).eval()
    for p in stack.parameters():  # larger weights: non-trivial attention distributions
        torch.nn.init.uniform_(p, -1.0, 1.0)
    x = torch.randn(3, 6, 5)
    lengths, sides = [6, 4, 3], ["right", "left", "right"]
    mask = torch.zeros(3, 6, dtype=torch.bool)
    for b, (n, side) in enumerate(zip(lengths, sides)):
        mask[b, :n] = side == "right"
        mask[b, 6 - n :] |= side == "left"
    out, state = stack(x, attention_mask=mask)
    layer = stack.layers[0]
    for b in range(3):
        real = x[b][mask[b]]
        ref_out, ref_h, ref_c = lstmn_reference(layer, real)
        torch.testing.assert_close(out[b][mask[b]], ref_out, atol=1e-5, rtol=0)
        assert torch.all(out[b][~mask[b]] == 0)
        torch.testing.assert_close(state[0][0, b], ref_h, atol=1e-5, rtol=0)
        torch.testing.assert_close(state[1][0, b], ref_c, atol=1e-5, rtol=0)
    assert state[3].shape == (1, 3, 6, 4) and torch.equal(state[5][0], mask)  # the tape and its padding mask


def test_self_attention_lstm_attention_really_matters():
    """Changing the attention scorer changes the outputs (the cell is not a plain LSTM in disguise)."""
    torch.manual_seed(0)
    stack = RecurrentStack("self_attention_lstm", 5, 4).eval()
    x = torch.randn(2, 5, 5)
    before = stack(x)[0]
    with torch.no_grad():
        stack.layers[0].attention_l0.energy.weight.mul_(25.0)
    after = stack(x)[0]
    assert not torch.allclose(before[:, 2:], after[:, 2:], atol=1e-4)
    torch.testing.assert_close(before[:, :2], after[:, :2])  # steps 1-2 attend over <= 1 state: weights are 1


def test_self_attention_lstm_classifier_bidirectional_padding_invariant():
    torch.manual_seed(0)
    config = HfSeqRNNConfig(
        vocab_size=V,
        embedding_size=6,
        hidden_size=5,
        num_hidden_layers=2,
        cell="self_attention_lstm",
        bidirectional=True,
        num_labels=3,
        pad_token_id=0,
    )
    model = RNNForSequenceClassification(config).eval()
    ids = torch.tensor([[0, 0, 4, 5, 6], [7, 8, 9, 10, 11]])
    mask = (ids != 0).long()
    logits = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(logits[0], model(ids[:1, 2:]).logits[0], atol=1e-5, rtol=0)
    loss = model(ids, attention_mask=mask, labels=torch.tensor([0, 2])).loss
    loss.backward()
    assert model.rnn.encoder.layers[1].attention_l0_reverse.energy.weight.grad.abs().sum() > 0


# ----------------------------------------------------------------------------------------------------------
# loss, tying, one-hot, save/load
# ----------------------------------------------------------------------------------------------------------


def test_loss_is_shifted_next_token_cross_entropy_ignoring_minus_100():
    model, ids = tiny_lm("lstm"), prompts(length=6)
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    logits = out.logits[:, :-1].reshape(-1, V)
    targets = labels[:, 1:].reshape(-1)
    keep = targets != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(logits[keep], targets[keep]))


def test_shift_labels_are_the_targets_as_transformers_causal_lm_loss_takes_them():
    """``shift_labels`` (already aligned, as transformers' ``ForCausalLMLoss`` and sequence parallelism pass them)
    replace the inside shift of ``labels``; the loss equals transformers' own ``ForCausalLMLoss`` on the logits."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    model, ids = tiny_lm("lstm"), prompts(length=6)
    shifted = F.pad(ids[:, 1:], (0, 1), value=-100)
    shifted[1, 2] = -100
    other = prompts(length=6, seed=5)
    with torch.no_grad():
        logits = model(ids).logits
        by_labels = model(ids, labels=ids).loss
        by_shift = model(ids, labels=other, shift_labels=shifted).loss  # labels not used
        alone = model(ids, shift_labels=shifted).loss
    expected = ForCausalLMLoss(logits, None, V, shift_labels=shifted)
    torch.testing.assert_close(by_shift, expected)
    assert torch.equal(alone, by_shift)
    torch.testing.assert_close(by_labels, ForCausalLMLoss(logits, ids, V))
    with torch.no_grad():  # the last position has a target of its own (the next shard's first token)
        last = model(ids, shift_labels=torch.cat([shifted[:, :-1], ids[:, :1]], dim=1)).loss
    assert not torch.equal(last, by_shift)
    with pytest.raises(ValueError, match="shift_labels"):
        model(ids, shift_labels=shifted[:, :-1])
    with pytest.raises(ValueError, match="shift_labels"):
        model(ids, shift_labels=torch.full_like(ids, V))


def test_tied_embeddings_share_storage_and_survive_save_load(tmp_path):
    for hidden in (8, 12):  # equal sizes: direct tie; different sizes: projection H -> E then the tied matrix
        model = tiny_lm("lstm", hidden_size=hidden, tie_word_embeddings=True)
        assert model.lm_head.weight is model.rnn.embeddings.word_embeddings.weight
        assert (model.lm_proj is None) == (hidden == 8)
        model.save_pretrained(tmp_path / str(hidden))
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path / str(hidden)).eval()
        assert loaded.lm_head.weight is loaded.rnn.embeddings.word_embeddings.weight
        ids = prompts()
        assert_same_outputs(loaded(ids).logits, model(ids).logits)  # reloaded object: equal to float rounding
    untied = tiny_lm("lstm")
    assert untied.lm_head.weight is not untied.rnn.embeddings.word_embeddings.weight


def test_one_hot_input_is_a_fixed_identity_embedding():
    one_hot = tiny_lm("lstm", input_encoding="one_hot", embedding_size=V)
    assert not any("word_embeddings" in name for name, _ in one_hot.named_parameters())
    learned = tiny_lm("lstm", embedding_size=V, seed=5)
    state = {k: v for k, v in one_hot.state_dict().items()}
    state["rnn.embeddings.word_embeddings.weight"] = torch.eye(V)
    learned.load_state_dict(state)
    ids = prompts()
    torch.testing.assert_close(one_hot(ids).logits, learned(ids).logits, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------------


def test_bad_input_errors():
    model, ids = tiny_lm("lstm"), prompts()
    for temperature in (0.0, -1.0):
        with pytest.raises(ValueError, match="temperature"):
            model.generate(ids, do_sample=True, temperature=temperature, max_new_tokens=3, pad_token_id=0)
    with pytest.raises(ValueError, match="bos_token_id"):
        model.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3, pad_token_id=0)
    with_bos = tiny_lm("lstm", bos_token_id=1)
    started = with_bos.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3, pad_token_id=0)
    assert started.shape == (1, 4) and started[0, 0] == 1
    with pytest.raises(ValueError, match="cell"):
        HfSeqRNNConfig(vocab_size=V, cell="transformer_xl")
    with pytest.raises(ValueError, match="bidirectional"):
        tiny_lm("lstm", bidirectional=True)
    with pytest.raises(ValueError, match="input_encoding"):
        HfSeqRNNConfig(vocab_size=V, input_encoding="bag_of_words")
    with pytest.raises(ValueError, match="embedding_size"):
        HfSeqRNNConfig(vocab_size=V, input_encoding="one_hot", embedding_size=4)
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        HfSeqRNNConfig(vocab_size=V, embedding_size=V, input_encoding="one_hot", tie_word_embeddings=True)
    with pytest.raises(ValueError, match="eos_token_id"):
        HfSeqRNNConfig(vocab_size=V, eos_token_id=V)
    with pytest.raises(ValueError, match="labels"):
        model(ids, labels=torch.full_like(ids, V))
    with pytest.raises(ValueError, match="input_ids"):
        model(torch.full((1, 3), V))
    with pytest.raises(ValueError, match="cache"):
        model(ids[:1], cache=model(ids).cache)  # a state for 2 rows given to 1 row


# ----------------------------------------------------------------------------------------------------------
# pipeline and remote code
# ----------------------------------------------------------------------------------------------------------

TEXT = "to be, or not to be: that is the question.\n"


def save_char_lm(path, cell="self_attention_lstm"):
    tokenizer = build_char_tokenizer([TEXT], padding_side="left")
    torch.manual_seed(0)
    config = HfSeqRNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=8,
        hidden_size=10,
        num_hidden_layers=1,
        cell=cell,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.5,
    )
    model = RNNForCausalLM(config).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model, tokenizer


def test_text_generation_pipeline(tmp_path):
    model, tokenizer = save_char_lm(tmp_path)
    generator = pipeline("text-generation", model=str(tmp_path), tokenizer=str(tmp_path))
    out = generator("to be", max_new_tokens=10, do_sample=False)[0]["generated_text"]
    ids = tokenizer("to be", return_tensors="pt").input_ids
    expected = tokenizer.decode(
        model.generate(ids, max_new_tokens=10, do_sample=False, pad_token_id=0)[0], skip_special_tokens=True
    )
    assert out == expected and out.startswith("to be") and len(out) > len("to be")
    batch = generator(["to", "not to be"], max_new_tokens=5, do_sample=False)
    assert batch[0][0]["generated_text"] == generator("to", max_new_tokens=5, do_sample=False)[0]["generated_text"]


def test_remote_code_load_without_hf_seq(tmp_path, clean_python):
    model, tokenizer = save_char_lm(tmp_path)
    ids = tokenizer("to be", return_tensors="pt").input_ids
    expected = model.generate(ids, max_new_tokens=8, num_beams=3, do_sample=False, pad_token_id=0)[0].tolist()
    code = f"""
try:
    import hf_seq
    print("HF_SEQ_IMPORTABLE")
except ImportError:
    pass
import torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
print(type(m).__module__.startswith("transformers_modules"))
ids = torch.tensor([{ids[0].tolist()}])
print(m.generate(ids, max_new_tokens=8, num_beams=3, do_sample=False, pad_token_id=0)[0].tolist())
"""
    result = run_clean(clean_python, code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert "HF_SEQ_IMPORTABLE" not in result.stdout
    assert lines[-2] == "True" and lines[-1] == str(expected)


def test_self_attention_lstm_continues_from_a_state_with_an_empty_row():
    """A given state (the cache) + a row without real tokens: that row's h, c, h̃ stay as they were; others go on."""
    torch.manual_seed(0)
    stack = RecurrentStack("self_attention_lstm", 5, 4, num_layers=2).eval()
    first = torch.randn(2, 3, 5)
    _, state = stack(first)
    second = torch.randn(2, 2, 5)
    mask = torch.tensor([[1, 1], [0, 0]])
    out, new_state = stack(second, attention_mask=mask, state=state)
    for i in range(3):  # h, c, h̃ of the empty row unchanged
        assert torch.equal(new_state[i][:, 1], state[i][:, 1])
    assert new_state[3].shape == (2, 2, 5, 4) and not bool(new_state[5][:, 1, 3:].any())
    full, _ = stack(torch.cat([first[:1], second[:1]], dim=1))
    torch.testing.assert_close(out[0], full[0, 3:], atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------------------
# transformers 5: the old cache name, stateful models
# ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", ["lstm", "self_attention_lstm"])
def test_past_key_values_is_the_deprecated_name_of_cache(cell):
    """Continuing from a cache passed as past_key_values= warns as transformers' models do and gives the logits of
    cache= (never silently ignored)."""
    model = tiny_lm(cell)
    ids = prompts(length=6)
    expected = model(ids[:, 3:], cache=model(ids[:, :3]).cache).logits
    first = model(ids[:, :3]).cache
    with pytest.warns(FutureWarning, match="`past_key_values` is deprecated .* Use `cache` instead"):
        old = model(ids[:, 3:], past_key_values=first).logits
    assert torch.equal(old, expected)
    assert_same_outputs(old, model(ids).logits[:, 3:])


@pytest.mark.parametrize("kwargs", [dict(prompt_lookup_num_tokens=2), dict(assistant_model="self")])
def test_assisted_decoding_is_refused_for_the_stateful_model(kwargs):
    """A recurrent state cannot be rolled back to a shorter prefix: transformers' clear error, not a crash."""
    model = tiny_lm()
    assert model._is_stateful
    kwargs = {k: (model if v == "self" else v) for k, v in kwargs.items()}
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        model.generate(prompts(), max_new_tokens=3, pad_token_id=0, **kwargs)
