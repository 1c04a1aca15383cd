"""The two registries the RNN seq2seq reads: a score function and a cell, each added in one place.

A score type registered with ``hf_seq.register_attention_score`` and a cell type registered with
``hf_seq.register_cell`` are config values of the RNN seq2seq at once: the model builds, trains a step (the loss is
finite and the new parameters get gradients) and generates; the config refuses names nobody registered, naming the
field and the registered names. The built-in scores keep their parameter names (saved folders load unchanged).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hf_seq
from hf_seq.attention import SCORE_TYPES, AttentionScore, ScoreType
from hf_seq.recurrent import CELL_TYPES, CellType, RecurrentStack, lstm_step

VOCAB = 24
PAD, BOS, EOS = 0, 2, 3


# ---------------------------------------------------------------------------------------------------------------
# A new score function, in one place: Luong's "concat" score vᵀ tanh(W [q; k])
# ---------------------------------------------------------------------------------------------------------------


def concat_score(module: AttentionScore, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(..., T_q, D_q) and (..., T_k, D_k) -> (..., T_q, T_k): every query concatenated with every key."""
    t_q, t_k = query.shape[-2], keys.shape[-2]
    q = query.unsqueeze(-2).expand(*query.shape[:-1], t_k, query.shape[-1])  # (..., T_q, T_k, D_q)
    k = keys.unsqueeze(-3).expand(*keys.shape[:-2], t_q, t_k, keys.shape[-1])  # (..., T_q, T_k, D_k)
    return module.energy(torch.tanh(module.concat(torch.cat([q, k], dim=-1)))).squeeze(-1)


CONCAT = ScoreType(
    "test_concat",
    score=concat_score,
    build=lambda q_size, k_size, h_size: {
        "concat": nn.Linear(q_size + k_size, h_size),  # W
        "energy": nn.Linear(h_size, 1, bias=False),  # v
    },
)


# ---------------------------------------------------------------------------------------------------------------
# New cells, in one place: a minimal gated unit (one state, two gates) and an LSTM with a third, leaky state
# ---------------------------------------------------------------------------------------------------------------


def mgu_step(gates_x, state, weight_hh, bias_hh):
    """Minimal gated unit: f = σ(W_f x + U_f h), h̃ = tanh(W_h x + U_h (f ⊙ h)), h' = (1 - f) ⊙ h + f ⊙ h̃."""
    (h,) = state
    x_f, x_h = gates_x.chunk(2, dim=-1)
    u_f, u_h = weight_hh.chunk(2, dim=0)
    b_f, b_h = bias_hh.chunk(2) if bias_hh is not None else (None, None)
    forget = torch.sigmoid(x_f + F.linear(h, u_f, b_f))
    candidate = torch.tanh(x_h + F.linear(forget * h, u_h, b_h))
    return ((1 - forget) * h + forget * candidate,)


class MGULayer(nn.Module):
    """The MGU's parameters under PyTorch's names (two gate blocks per direction)."""

    def __init__(self, input_size: int, hidden_size: int, bidirectional: bool) -> None:
        super().__init__()
        bound = 1 / math.sqrt(hidden_size)
        for suffix in ("", "_reverse")[: 2 if bidirectional else 1]:
            for name, shape in (
                ("weight_ih", (2 * hidden_size, input_size)),
                ("weight_hh", (2 * hidden_size, hidden_size)),
                ("bias_ih", (2 * hidden_size,)),
                ("bias_hh", (2 * hidden_size,)),
            ):
                setattr(self, f"{name}_l0{suffix}", nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))


def leaky_lstm_step(gates_x, state, weight_hh, bias_hh):
    """An LSTM step with a third, leaky state read back into the output: a cell with three state tensors.

    (h'_t, c_t) = lstm_step(x_t, (h_{t-1}, c_{t-1})),  h_t = h'_t + ½ tanh(m_{t-1}),  m_t = ½ m_{t-1} + tanh(c_t)."""
    h, c, m = state
    h, c = lstm_step(gates_x, (h, c), weight_hh, bias_hh)
    return (h + 0.5 * torch.tanh(m), c, 0.5 * m + torch.tanh(c))


MGU = CellType("test_mgu", num_gates=2, num_states=1, step=mgu_step, build_layer=MGULayer)
LEAKY = CellType(
    "test_leaky_lstm",
    num_gates=4,
    num_states=3,
    step=leaky_lstm_step,
    build_layer=lambda i, h, bidirectional: nn.LSTM(i, h, batch_first=True, bidirectional=bidirectional),
)


@pytest.fixture
def registered():
    """The test's score and cells registered for one test, removed afterwards."""
    hf_seq.register_attention_score(CONCAT)
    for cell in (MGU, LEAKY):
        hf_seq.register_cell(cell)
    try:
        yield
    finally:
        SCORE_TYPES.pop(CONCAT.name, None)
        for cell in (MGU, LEAKY):
            CELL_TYPES.pop(cell.name, None)


def tiny(**overrides) -> hf_seq.HfSeqRNNSeq2SeqConfig:
    settings = dict(
        vocab_size=VOCAB,
        embedding_size=8,
        hidden_size=6,
        dropout=0.0,
        max_target_length=8,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    return hf_seq.HfSeqRNNSeq2SeqConfig(**{**settings, **overrides})


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    input_ids = torch.randint(4, VOCAB, (3, 5), generator=g)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD)
    labels = torch.randint(4, VOCAB, (3, 4), generator=g)
    labels[1, 3] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# ---------------------------------------------------------------------------------------------------------------
# Registered names are config values
# ---------------------------------------------------------------------------------------------------------------

SETTINGS = [
    dict(cell="test_mgu", attention="test_concat"),
    dict(cell="test_mgu", attention="test_concat", bidirectional=True, input_feeding=True),
    dict(cell="test_leaky_lstm", attention="test_concat", bidirectional=True, encoder_layers=2, decoder_layers=2),
    dict(cell="test_leaky_lstm", attention="none", bidirectional=True),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_registered_score_and_cell_train_a_step(registered, settings):
    torch.manual_seed(0)
    model = hf_seq.RNNSeq2SeqForConditionalGeneration(tiny(**settings)).train()
    new_parameters = {
        name: p
        for name, p in model.named_parameters()
        if ".score." in name or ".layers." in name or ("bridge.extra_proj" in name)
    }
    if settings["attention"] != "none":
        assert {"model.decoder.score.concat.weight", "model.decoder.score.energy.weight"} <= set(new_parameters)
    if settings["cell"] == "test_leaky_lstm" and settings.get("bidirectional"):
        assert "model.bridge.extra_proj.0.weight" in new_parameters  # the third state's map
    loss = model(**batch()).loss
    assert torch.isfinite(loss)
    loss.backward()
    for name, parameter in new_parameters.items():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    before = {name: p.detach().clone() for name, p in new_parameters.items()}
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert any(not torch.equal(before[name], p) for name, p in new_parameters.items())


@pytest.mark.parametrize("settings", SETTINGS[1:3], ids=["mgu", "leaky_lstm"])
def test_registered_score_and_cell_generate_with_the_cache(registered, settings):
    """Greedy and beam search with the new cell's state in the cache equal decoding without a cache."""
    torch.manual_seed(0)
    model = hf_seq.RNNSeq2SeqForConditionalGeneration(tiny(**settings)).eval()
    source = {k: v for k, v in batch().items() if k != "labels"}
    for beams in (1, 3):
        cached = model.generate(**source, num_beams=beams, max_new_tokens=6, do_sample=False)
        uncached = model.generate(**source, num_beams=beams, max_new_tokens=6, do_sample=False, use_cache=False)
        assert torch.equal(cached, uncached)


def test_bridge_maps_every_state_of_the_cell(registered):
    """A three-state cell: the decoder starts from the bridged encoder states, one per state tensor."""
    torch.manual_seed(0)
    model = hf_seq.RNNSeq2SeqModel(tiny(cell="test_leaky_lstm", bidirectional=True, encoder_layers=2)).eval()
    source = {k: v for k, v in batch().items() if k != "labels"}
    encoded = model.encoder(**source)
    assert encoded.final_extra_states.shape == (3, 4, 1, 6)  # (B, L*D, N-2, H)
    state = model.bridge(encoded.final_hidden_state, encoded.final_cell_state, encoded.final_extra_states)
    assert len(state) == 3 and all(s.shape == (1, 3, 6) for s in state)
    stack_final = model.encoder.rnn(model.encoder.embed_tokens(source["input_ids"]), source["attention_mask"])[1]
    top = stack_final[2][2:].permute(1, 0, 2).reshape(3, 12)  # top layer's third state, both directions
    torch.testing.assert_close(state[2][0], model.bridge.extra_proj[0](top), atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="final_extra_states"):
        model.bridge(encoded.final_hidden_state, encoded.final_cell_state)


# ---------------------------------------------------------------------------------------------------------------
# Names nobody registered
# ---------------------------------------------------------------------------------------------------------------


def test_config_refuses_an_unregistered_score_naming_the_field():
    with pytest.raises(ValueError, match=r"^`attention` must be one of \['none', 'dot', .*'cosine'.*got 'luong'"):
        tiny(attention="luong")


def test_config_refuses_an_unregistered_cell_naming_the_field():
    with pytest.raises(ValueError, match=r"^`cell` must be one of \['rnn', 'lstm', 'gru'.*\], got 'test_mgu'"):
        tiny(cell="test_mgu")


def test_config_refuses_a_cell_whose_state_grows():
    """The self-attention LSTM is registered, but its state is a tape of every token read: no decoder start."""
    with pytest.raises(ValueError, match=r"^`cell` must be one of \[.*\], got 'self_attention_lstm'"):
        tiny(cell="self_attention_lstm")


def test_registered_names_are_accepted_until_removed(registered):
    assert tiny(cell="test_mgu", attention="test_concat").attention == "test_concat"
    SCORE_TYPES.pop(CONCAT.name)
    with pytest.raises(ValueError, match=r"^`attention` must be one of"):
        tiny(attention="test_concat")


def test_register_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match='"none"'):
        hf_seq.register_attention_score(ScoreType("none", score=concat_score))
    with pytest.raises(TypeError, match="ScoreType"):
        hf_seq.register_attention_score("test_concat")
    with pytest.raises(ValueError, match=r"`kind` must be one of"):
        AttentionScore("test_unknown", 4, 4)


# ---------------------------------------------------------------------------------------------------------------
# The built-in scores after the move into the registry
# ---------------------------------------------------------------------------------------------------------------

# the parameter names a saved folder holds for each built-in score (unchanged: old folders load as they are)
BUILT_IN_SCORE_PARAMETERS = {
    "dot": [],
    "scaled_dot": [],
    "cosine": [],
    "general": ["bilinear.weight"],
    "additive": ["key_proj.weight", "query_proj.weight", "query_proj.bias", "energy.weight"],
}


@pytest.mark.parametrize("kind", sorted(BUILT_IN_SCORE_PARAMETERS))
def test_built_in_scores_keep_their_parameters_and_equations(kind):
    torch.manual_seed(0)
    scorer = AttentionScore(kind, 4, 4, 3)
    assert [name for name, _ in scorer.named_parameters()] == BUILT_IN_SCORE_PARAMETERS[kind]
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    reference = {
        "dot": lambda: q @ k.transpose(1, 2),
        "scaled_dot": lambda: q @ k.transpose(1, 2) / 2.0,
        "cosine": lambda: F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(1, 2),
        "general": lambda: (q @ scorer.bilinear.weight.T) @ k.transpose(1, 2),
        "additive": lambda: (
            torch.tanh(
                (q @ scorer.query_proj.weight.T + scorer.query_proj.bias)[:, :, None]
                + (k @ scorer.key_proj.weight.T)[:, None]
            )
            @ scorer.energy.weight[0]
        ),
    }[kind]()
    torch.testing.assert_close(scorer(q, k), reference, atol=1e-6, rtol=1e-6)


def test_the_self_attention_lstm_still_uses_the_additive_score():
    stack = RecurrentStack("self_attention_lstm", 3, 4)
    assert stack.layers[0].attention_l0.kind == "additive"
