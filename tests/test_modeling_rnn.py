"""Tests of the RNN family (configuration_rnn.py, modeling_rnn.py): HF contract, pooling, losses, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import BLOCK_HF_SEQ, assert_same_outputs
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    pipeline,
)

import hf_seq  # noqa: F401  (registers the Auto classes)
from hf_seq.configuration_rnn import HfSeqRNNConfig
from hf_seq.modeling_rnn import RNNForSequenceClassification, RNNForTokenClassification, RNNModel

V = 30


def tiny(**overrides) -> HfSeqRNNConfig:
    kwargs = dict(vocab_size=V, embedding_size=6, hidden_size=5, num_layers=1, cell="lstm")
    kwargs.update(overrides)
    return HfSeqRNNConfig(**kwargs)


def pad(rows, side, seq_len=None):
    seq_len = seq_len or max(len(r) for r in rows)
    ids = torch.zeros(len(rows), seq_len, dtype=torch.long)
    mask = torch.zeros(len(rows), seq_len, dtype=torch.long)
    for b, r in enumerate(rows):
        sl = slice(0, len(r)) if side == "right" else slice(seq_len - len(r), seq_len)
        ids[b, sl] = torch.tensor(r)
        mask[b, sl] = 1
    return ids, mask


ROWS = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12]]


# ------------------------------------------------------------------ config


@pytest.mark.parametrize(
    "overrides,field",
    [
        ({"cell": "transformer"}, "cell"),
        ({"pooling": "attention"}, "pooling"),
        ({"pooling": "flatten"}, "max_seq_length"),
        ({"cell": "none", "pooling": "last"}, "pooling"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"embedding_size": -3}, "embedding_size"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"num_layers": 0}, "num_layers"),
        ({"max_seq_length": 0}, "max_seq_length"),
        ({"dropout": 1.0}, "dropout"),
        ({"embedding_dropout": -0.1}, "embedding_dropout"),
        ({"implementation": "cudnn"}, "implementation"),
        ({"bidirectional": "yes"}, "bidirectional"),
        ({"pad_token_id": V}, "pad_token_id"),
        ({"initializer_range": 0}, "initializer_range"),
    ],
)
def test_config_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        tiny(**overrides)


def test_config_round_trip(tmp_path):
    config = tiny(cell="gru", bidirectional=True, pooling="max", num_labels=3)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    a, b = loaded.to_dict(), config.to_dict()
    a.pop("_name_or_path"), b.pop("_name_or_path")
    assert isinstance(loaded, HfSeqRNNConfig) and a == b


# ------------------------------------------------------------------ model behaviour


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("pooling", ["last", "mean", "max"])
def test_left_and_right_padding_give_the_unpadded_logits(cell, pooling):
    torch.manual_seed(0)
    model = RNNForSequenceClassification(tiny(cell=cell, bidirectional=True, num_layers=2, pooling=pooling)).eval()
    ids_r, mask_r = pad(ROWS, "right")
    ids_l, mask_l = pad(ROWS, "left")
    logits_r = model(input_ids=ids_r, attention_mask=mask_r).logits
    logits_l = model(input_ids=ids_l, attention_mask=mask_l).logits
    alone = torch.cat([model(input_ids=torch.tensor([r])).logits for r in ROWS])
    torch.testing.assert_close(logits_r, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits_l, alone, atol=1e-5, rtol=0)


def test_last_pooling_concatenates_both_final_states():
    torch.manual_seed(0)
    model = RNNModel(tiny(bidirectional=True, num_layers=2)).eval()
    ids, mask = pad(ROWS, "right")
    out = model(input_ids=ids, attention_mask=mask)
    h = 5
    for b, r in enumerate(ROWS):
        n = len(r)
        torch.testing.assert_close(out.pooler_output[b, :h], out.last_hidden_state[b, n - 1, :h])  # forward: last
        torch.testing.assert_close(out.pooler_output[b, h:], out.last_hidden_state[b, 0, h:])  # backward: first
    assert out.final_state[0].shape == (4, 3, h) and len(out.final_state) == 2


def test_cell_implementation_gives_the_fused_logits(tmp_path):
    torch.manual_seed(0)
    fused = RNNForSequenceClassification(tiny(cell="lstm", bidirectional=True, num_layers=2)).eval()
    fused.save_pretrained(tmp_path)
    explicit = AutoModelForSequenceClassification.from_pretrained(tmp_path, implementation="cell").eval()
    assert explicit.config.implementation == "cell" and not explicit.rnn.encoder.uses_fused_path
    ids, mask = pad(ROWS, "left")
    torch.testing.assert_close(explicit(ids, mask).logits, fused(ids, mask).logits, atol=1e-5, rtol=0)


def test_hidden_states_and_shapes():
    torch.manual_seed(0)
    model = RNNForSequenceClassification(tiny(num_layers=3, bidirectional=True, num_labels=4)).eval()
    ids, mask = pad(ROWS, "right")
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert out.logits.shape == (3, 4)
    assert len(out.hidden_states) == 4  # embeddings + 3 layers
    assert out.hidden_states[0].shape == (3, 5, 6) and out.hidden_states[-1].shape == (3, 5, 10)
    tagger = RNNForTokenClassification(tiny(num_labels=7)).eval()
    assert tagger(input_ids=ids, attention_mask=mask).logits.shape == (3, 5, 7)


def test_logistic_regression_recipe_and_parameter_counts():
    """The notes' Embedding(·, 8) -> Flatten(20x8) -> Dense(1, sigmoid): 161 head parameters."""
    config = tiny(
        cell="none",
        pooling="flatten",
        max_seq_length=20,
        embedding_size=8,
        num_labels=1,
        problem_type="multi_label_classification",
    )
    model = RNNForSequenceClassification(config)
    assert sum(p.numel() for p in model.classifier.parameters()) == 161
    two_way = RNNForSequenceClassification(tiny(cell="none", pooling="flatten", max_seq_length=20, embedding_size=8))
    assert sum(p.numel() for p in two_way.classifier.parameters()) == 322
    ids = torch.randint(1, V, (4, 20))
    labels = torch.tensor([0, 1, 1, 0])
    out = model(input_ids=ids, labels=labels)
    expected = nn.functional.binary_cross_entropy(torch.sigmoid(out.logits[:, 0]), labels.float())
    torch.testing.assert_close(out.loss, expected)
    with pytest.raises(ValueError, match="max_seq_length=20"):
        model(input_ids=torch.randint(1, V, (4, 19)))


def test_flatten_model_saves_and_max_length_alias(tmp_path):
    """max_seq_length survives save/load (config.max_length would be refused by transformers as a generation field)."""
    model = RNNForSequenceClassification(tiny(cell="none", pooling="flatten", max_length=7)).eval()
    assert model.config.max_seq_length == 7 and getattr(model.config, "max_length", None) is None
    model.save_pretrained(tmp_path)
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    ids = torch.randint(1, V, (2, 7))
    assert loaded.config.max_seq_length == 7
    assert_same_outputs(loaded(ids).logits, model(ids).logits)  # reloaded object: equal to float rounding


@pytest.mark.parametrize("cell,gates", [("rnn", 1), ("lstm", 4), ("gru", 3)])
def test_recurrent_parameter_count_matches_formula(cell, gates):
    """Per layer: gates * h * (h + x) weights + 2 * gates * h biases (PyTorch keeps b_ih and b_hh)."""
    x, h = 32, 32
    model = RNNModel(tiny(cell=cell, embedding_size=x, hidden_size=h))
    count = sum(p.numel() for p in model.encoder.parameters())
    assert count == gates * h * (h + x) + 2 * gates * h


def test_losses_follow_problem_type():
    torch.manual_seed(0)
    ids, mask = pad(ROWS, "right")
    reg = RNNForSequenceClassification(tiny(num_labels=1)).eval()
    out = reg(ids, mask, labels=torch.tensor([0.5, 1.0, -1.0]))
    torch.testing.assert_close(out.loss, nn.functional.mse_loss(out.logits[:, 0], torch.tensor([0.5, 1.0, -1.0])))
    multi = RNNForSequenceClassification(tiny(num_labels=3, problem_type="multi_label_classification")).eval()
    y = torch.tensor([[1.0, 0, 1], [0, 0, 0], [1, 1, 1]])
    out = multi(ids, mask, labels=y)
    torch.testing.assert_close(out.loss, nn.functional.binary_cross_entropy_with_logits(out.logits, y))
    single = RNNForSequenceClassification(tiny(num_labels=3)).eval()
    out = single(ids, mask, labels=torch.tensor([2, 0, 1]))
    torch.testing.assert_close(out.loss, nn.functional.cross_entropy(out.logits, torch.tensor([2, 0, 1])))


def test_token_classification_ignores_minus_100():
    torch.manual_seed(0)
    model = RNNForTokenClassification(tiny(num_labels=4, bidirectional=True)).eval()
    ids, mask = pad(ROWS, "right")
    labels = torch.where(mask.bool(), torch.randint(0, 4, ids.shape), torch.full_like(ids, -100))
    out = model(ids, mask, labels=labels)
    keep = labels != -100
    torch.testing.assert_close(out.loss, nn.functional.cross_entropy(out.logits[keep], labels[keep]))
    empty = model(ids, mask, labels=torch.full_like(ids, -100)).loss
    assert torch.isfinite(empty) and empty.item() == 0.0


@pytest.mark.parametrize("pooling", ["mean", "max", "flatten"])
def test_embedding_only_model(pooling):
    model = RNNForSequenceClassification(tiny(cell="none", pooling=pooling, max_seq_length=5)).eval()
    ids, mask = pad(ROWS, "right")
    assert model(ids, mask).logits.shape == (3, 2)
    assert model.rnn.encoder is None


# ------------------------------------------------------------------ bad input


def test_bad_input_raises_naming_the_argument():
    model = RNNForSequenceClassification(tiny(num_labels=3, max_seq_length=8)).eval()
    ids, mask = pad(ROWS, "right")
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=torch.tensor([[1, V]]))
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=torch.ones(1, 9, dtype=torch.long))  # longer than max_length
    with pytest.raises(ValueError, match="input_ids"):
        model(input_ids=torch.ones(2, 3))  # float ids
    with pytest.raises(ValueError, match="labels"):
        model(ids, mask, labels=torch.tensor([0, 3, 1]))
    with pytest.raises(ValueError, match="labels"):
        model(ids, mask, labels=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, mask[:, :3])
    tagger = RNNForTokenClassification(tiny(num_labels=3))
    with pytest.raises(ValueError, match="labels"):
        tagger(ids, mask, labels=torch.full_like(ids, 5))
    with pytest.raises(ValueError, match="labels"):
        tagger(ids, mask, labels=torch.zeros(3, 2, dtype=torch.long))


# ------------------------------------------------------------------ pretrained embeddings


def test_load_pretrained_embeddings_and_freeze(tmp_path):
    model = RNNForSequenceClassification(tiny())
    vectors = torch.randn(V, 6)
    torch.save(vectors, tmp_path / "vectors.pt")
    model.load_pretrained_embeddings(tmp_path / "vectors.pt", freeze=True)
    assert torch.equal(model.get_input_embeddings().weight, vectors)
    assert not model.get_input_embeddings().weight.requires_grad and model.config.freeze_embeddings
    model.save_pretrained(tmp_path / "m")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    assert again.config.freeze_embeddings
    again(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([1])).loss.backward()
    assert again.get_input_embeddings().weight.grad is None  # frozen: no gradient, optimizers skip it
    assert again.classifier.weight.grad is not None
    with pytest.raises(ValueError, match="vectors"):
        model.load_pretrained_embeddings(torch.randn(V, 7))


# ------------------------------------------------------------------ HF plumbing


@pytest.mark.parametrize(
    "auto,cls",
    [
        (AutoModel, RNNModel),
        (AutoModelForSequenceClassification, RNNForSequenceClassification),
        (AutoModelForTokenClassification, RNNForTokenClassification),
    ],
)
def test_save_load_bit_exact_through_auto(tmp_path, auto, cls):
    torch.manual_seed(0)
    model = cls(tiny(cell="gru", bidirectional=True, num_layers=2, num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    loaded = auto.from_pretrained(tmp_path).eval()
    assert type(loaded) is cls
    sd, sd2 = model.state_dict(), loaded.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    ids, mask = pad(ROWS, "left")
    a, b = model(ids, mask), loaded(ids, mask)
    assert_same_outputs(b[0], a[0])  # reloaded object: equal to float rounding
    assert json.loads((tmp_path / "config.json").read_text())["auto_map"]


REMOTE = BLOCK_HF_SEQ + textwrap.dedent(
    """
    import sys
    import torch
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    assert "hf_seq" not in sys.modules
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    logits = model(input_ids=ids, attention_mask=(ids != 0).long()).logits
    print(type(model).__module__, logits.tolist())
    """
)


def test_remote_code_load_without_hf_seq(tmp_path):
    torch.manual_seed(0)
    model = RNNForSequenceClassification(tiny(bidirectional=True)).eval()
    model.save_pretrained(tmp_path / "m")
    for name in ("modeling_rnn.py", "configuration_rnn.py", "recurrent.py"):
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
    module, logits = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules")
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    expected = model(input_ids=ids, attention_mask=(ids != 0).long()).logits
    torch.testing.assert_close(torch.tensor(json.loads(logits)), expected, atol=1e-6, rtol=0)


def test_pipelines_show_real_labels(tmp_path):
    from hf_seq.tokenization import build_word_level_tokenizer

    texts = ["a good film", "a bad film", "good acting and a good plot", "bad plot"]
    tok = build_word_level_tokenizer(texts)
    labels = {0: "negative", 1: "positive"}
    torch.manual_seed(0)
    config = tiny(
        vocab_size=len(tok), pad_token_id=tok.pad_token_id, id2label=labels, label2id={v: k for k, v in labels.items()}
    )
    RNNForSequenceClassification(config).save_pretrained(tmp_path / "cls")
    tok.save_pretrained(tmp_path / "cls")
    clf = pipeline("text-classification", model=str(tmp_path / "cls"))
    preds = clf(["a good film", "bad"])
    assert {p["label"] for p in preds} <= {"negative", "positive"} and len(preds) == 2

    tags = {0: "DET", 1: "ADJ", 2: "NOUN"}
    config = tiny(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        num_labels=3,
        id2label=tags,
        label2id={v: k for k, v in tags.items()},
    )
    RNNForTokenClassification(config).save_pretrained(tmp_path / "tag")
    tok.save_pretrained(tmp_path / "tag")
    tagger = pipeline("token-classification", model=str(tmp_path / "tag"))
    entities = tagger("a good film")
    assert [e["word"] for e in entities] == ["a", "good", "film"]
    assert {e["entity"] for e in entities} <= set(tags.values())
