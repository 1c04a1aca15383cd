"""sentence-transformers over hf_seq's recurrent models: the width it reads is the width of ``last_hidden_state``.

A bidirectional LSTM's outputs are ``2 * hidden_size`` wide and ``cell="none"``'s are the embedding width; the config
declares that width where sentence-transformers looks first (``config.word_embed_proj_dim``), so
``get_embedding_dimension()``, the saved pooling config and the heads built from it agree with the tensors. Offline:
tiny models built from a local folder."""

from __future__ import annotations

import pytest
import torch
from tiny_models import TEXTS, build_tokenizer

import hf_seq

pytest.importorskip("sentence_transformers.base.modules")  # sentence-transformers >= 6 (the test extra)
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.base.modules import Dense, Transformer  # noqa: E402
from sentence_transformers.sentence_transformer.losses import SoftmaxLoss  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Pooling  # noqa: E402


def save_rnn(folder, **overrides) -> hf_seq.RNNModel:
    """A tiny RNNModel with its tokenizer, saved to ``folder`` (what a user's trained run leaves)."""
    tokenizer = build_tokenizer()
    kwargs = dict(vocab_size=len(tokenizer), embedding_size=6, hidden_size=5, cell="lstm", pad_token_id=0)
    torch.manual_seed(0)
    model = hf_seq.RNNModel(hf_seq.HfSeqRNNConfig(**{**kwargs, **overrides})).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def embedding_model(folder, **modules) -> SentenceTransformer:
    transformer = Transformer(str(folder))
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
    return SentenceTransformer(modules=[transformer, pooling, *modules.values()], device="cpu")


@pytest.mark.parametrize(
    "overrides, width",
    [
        (dict(bidirectional=True), 10),
        (dict(bidirectional=False), 5),
        (dict(cell="none", pooling="mean"), 6),
        (dict(cell="gru", bidirectional=True, num_hidden_layers=2), 10),
    ],
    ids=["bilstm", "lstm", "none", "bigru-2"],
)
def test_declared_width_is_the_output_width(tmp_path, overrides, width):
    model = save_rnn(tmp_path / "rnn", **overrides)
    assert model.config.hidden_size == 5  # the recurrent state keeps its meaning
    st = embedding_model(tmp_path / "rnn")
    assert st[0].get_embedding_dimension() == st.get_embedding_dimension() == width
    embeddings = st.encode(TEXTS, convert_to_tensor=True)
    assert embeddings.shape == (len(TEXTS), width)
    # mean pooling of the RNN's own last_hidden_state over the real tokens, by hand
    batch = build_tokenizer()(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    torch.testing.assert_close(embeddings, (states * mask).sum(1) / mask.sum(1), rtol=1e-5, atol=1e-6)


def test_bidirectional_lstm_trains_saves_and_reloads(tmp_path):
    """``Dense(in_features=get_embedding_dimension())`` and ``SoftmaxLoss(embedding_dimension=...)`` train a step on a
    bidirectional LSTM; the saved model (pooling config, card) declares the output width and reloads equal."""
    save_rnn(tmp_path / "rnn", bidirectional=True)
    st = embedding_model(tmp_path / "rnn")
    width = st.get_embedding_dimension()
    assert width == 10
    st = embedding_model(
        tmp_path / "rnn", dense=Dense(in_features=width, out_features=4, activation_function=torch.nn.Tanh())
    )
    assert st.get_embedding_dimension() == 4
    loss = SoftmaxLoss(st, embedding_dimension=st.get_embedding_dimension(), num_labels=2)
    optimizer = torch.optim.SGD(loss.parameters(), lr=0.5)
    before = {name: p.detach().clone() for name, p in loss.named_parameters()}
    st.train()
    features = [st.preprocess(TEXTS[:2]), st.preprocess(TEXTS[1:])]
    value = loss(features, torch.tensor([0, 1]))
    value.backward()
    optimizer.step()
    changed = {name for name, p in loss.named_parameters() if not torch.equal(before[name], p)}
    assert any("weight_hh_l0_reverse" in name for name in changed)  # the backward direction trained too
    assert any("classifier" in name for name in changed) and any("linear" in name for name in changed)

    st.eval()
    expected = st.encode(TEXTS, convert_to_tensor=True)
    st.save(str(tmp_path / "st"))
    pooling_config = (tmp_path / "st" / "1_Pooling" / "config.json").read_text()
    assert '"embedding_dimension": 10' in pooling_config or '"word_embedding_dimension": 10' in pooling_config
    reloaded = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert reloaded[1].get_embedding_dimension() == 10 and reloaded.get_embedding_dimension() == 4
    torch.testing.assert_close(reloaded.encode(TEXTS, convert_to_tensor=True), expected, rtol=1e-5, atol=1e-6)
