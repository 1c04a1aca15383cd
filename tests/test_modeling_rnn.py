"""Tests of the RNN family (configuration_rnn.py, modeling_rnn.py): HF contract, pooling, losses, bad input."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.utils._pytree as pytree
from conftest import BLOCK_HF_SEQ, assert_same_outputs
from recurrent_toolchain import (
    assert_checkpointing_saves_memory,
    assert_compiled_training_step_matches,
    assert_export_and_onnx_match,
    assert_quantizes,
    graph_breaks,
    on_accelerator_paths,
    to_meta,
)
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    pipeline,
)

import hf_seq  # noqa: F401  (registers the Auto classes)
from hf_seq.compat import OutputRecorder
from hf_seq.configuration_rnn import HfSeqRNNConfig
from hf_seq.modeling_rnn import RNNForCausalLM, RNNForSequenceClassification, RNNForTokenClassification, RNNModel

V = 30


def tiny(**overrides) -> HfSeqRNNConfig:
    kwargs = dict(vocab_size=V, embedding_size=6, hidden_size=5, num_hidden_layers=1, cell="lstm")
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
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"max_seq_length": 0}, "max_seq_length"),
        ({"dropout": 1.0}, "dropout"),
        ({"embedding_dropout": -0.1}, "embedding_dropout"),
        ({"recurrent_implementation": "cudnn"}, "recurrent_implementation"),
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
    model = RNNForSequenceClassification(
        tiny(cell=cell, bidirectional=True, num_hidden_layers=2, pooling=pooling)
    ).eval()
    ids_r, mask_r = pad(ROWS, "right")
    ids_l, mask_l = pad(ROWS, "left")
    logits_r = model(input_ids=ids_r, attention_mask=mask_r).logits
    logits_l = model(input_ids=ids_l, attention_mask=mask_l).logits
    alone = torch.cat([model(input_ids=torch.tensor([r])).logits for r in ROWS])
    torch.testing.assert_close(logits_r, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits_l, alone, atol=1e-5, rtol=0)


def test_last_pooling_concatenates_both_final_states():
    torch.manual_seed(0)
    model = RNNModel(tiny(bidirectional=True, num_hidden_layers=2)).eval()
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
    fused = RNNForSequenceClassification(tiny(cell="lstm", bidirectional=True, num_hidden_layers=2)).eval()
    fused.save_pretrained(tmp_path)
    explicit = AutoModelForSequenceClassification.from_pretrained(tmp_path, recurrent_implementation="cell").eval()
    assert explicit.config.recurrent_implementation == "cell" and not explicit.rnn.encoder.uses_fused_path
    ids, mask = pad(ROWS, "left")
    torch.testing.assert_close(explicit(ids, mask).logits, fused(ids, mask).logits, atol=1e-5, rtol=0)


def test_hidden_states_and_shapes():
    torch.manual_seed(0)
    model = RNNForSequenceClassification(tiny(num_hidden_layers=3, bidirectional=True, num_labels=4)).eval()
    ids, mask = pad(ROWS, "right")
    out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    assert out.logits.shape == (3, 4)
    assert len(out.hidden_states) == 4  # embeddings + 3 layers
    assert out.hidden_states[0].shape == (3, 5, 6) and out.hidden_states[-1].shape == (3, 5, 10)
    tagger = RNNForTokenClassification(tiny(num_labels=7)).eval()
    assert tagger(input_ids=ids, attention_mask=mask).logits.shape == (3, 5, 7)


SELECTS_LAYERS = "num_hidden_layers_key" in {f.name for f in dataclasses.fields(OutputRecorder)}


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("layout", ["fused", "cell", "torch_modules"])
def test_hidden_states_recorded_from_every_layer(layout, side):
    """``capture_outputs`` records the embeddings and every layer's outputs in batch layout (RecurrentLayerOutput, run
    by the stack only when asked): the same tensors as the stack computes, zero at padding, on every path."""
    torch.manual_seed(0)
    config = tiny(
        num_hidden_layers=3, bidirectional=True, recurrent_implementation="fused" if layout != "cell" else "cell"
    )
    model = RNNModel(config).eval()
    if layout == "torch_modules":
        model.encoder.to_torch_modules_()
    calls = []
    model.encoder.layer_output.register_forward_hook(lambda module, args, output: calls.append(output[0]))
    ids, mask = pad(ROWS, side)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask)
        assert plain.hidden_states is None and calls == []  # the fast path never runs the recorder's module
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        embedded = model.embeddings(ids)
        features, _, layers = model.encoder(embedded, mask.bool(), output_hidden_states=True)
    assert len(out.hidden_states) == 4 and len(calls) == 3 + 3  # the model's forward, then the direct stack call
    torch.testing.assert_close(out.hidden_states[0], embedded, atol=0, rtol=0)
    for recorded, direct in zip(out.hidden_states[1:], layers):
        assert recorded.shape == (3, 5, 10)
        torch.testing.assert_close(recorded, direct, atol=0, rtol=0)
        assert recorded[mask == 0].abs().max() == 0
    torch.testing.assert_close(out.hidden_states[-1], plain.last_hidden_state, atol=0, rtol=0)


@pytest.mark.skipif(not SELECTS_LAYERS, reason="this transformers release records every layer")
@pytest.mark.parametrize("cell,layers", [("gru", 2), ("none", 1)])
def test_hidden_states_selected_by_index(cell, layers):
    """``output_hidden_states`` as indices keeps those only; negative ones count the recurrent layers
    (``config.num_recurrent_layers``: 0 for cell "none", whose only hidden state is the embeddings)."""
    torch.manual_seed(0)
    model = RNNForSequenceClassification(tiny(cell=cell, num_hidden_layers=layers, pooling="mean")).eval()
    ids, mask = pad(ROWS, "right")
    every = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(every) == model.config.num_recurrent_layers + 1
    torch.testing.assert_close(every[0], model.rnn.embeddings(ids), atol=0, rtol=0)
    last = model(input_ids=ids, attention_mask=mask, output_hidden_states=[-1]).hidden_states
    assert len(last) == len(every) and all(h is None for h in last[:-1])
    torch.testing.assert_close(last[-1], every[-1], atol=0, rtol=0)


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
    model = cls(tiny(cell="gru", bidirectional=True, num_hidden_layers=2, num_labels=3)).eval()
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
    for name in (
        "modeling_rnn.py",
        "configuration_rnn.py",
        "recurrent.py",
        "recurrent_cells.py",
        "recurrent_kernels.py",
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
    module, logits = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules")
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    expected = model(input_ids=ids, attention_mask=(ids != 0).long()).logits
    torch.testing.assert_close(torch.tensor(json.loads(logits)), expected, atol=1e-6, rtol=0)


def test_pipelines_show_real_labels(tmp_path):
    from hf_seq.toolkit.tokenization import build_word_level_tokenizer

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


# ------------------------------------------------------------------ compiler, export, quantization, checkpointing


def toolchain_case(head, cell, bidirectional, layers, slow=False):
    marks = [pytest.mark.slow] if slow else []  # slow: the same checks for the remaining heads (make test-all)
    name = f"{head.__name__}-{cell}-{'bi' if bidirectional else 'uni'}-{layers}"
    return pytest.param(head, cell, bidirectional, layers, id=name, marks=marks)


# (head, cell, bidirectional, layers): every head, every cell and both directions at least once, on a batch that
# mixes a full row, a right-padded row and a left-padded row. Compiling and exporting cost seconds per model, so the
# fast suite runs three of them and `make test-all` the rest.
TOOLCHAIN_CASES = [
    toolchain_case(RNNForCausalLM, "lstm", False, 1),
    toolchain_case(RNNForSequenceClassification, "gru", True, 2),
    toolchain_case(RNNForTokenClassification, "rnn", True, 1),
    toolchain_case(RNNModel, "lstm", True, 2, slow=True),
    toolchain_case(RNNForSequenceClassification, "self_attention_lstm", False, 1, slow=True),
]
EXPORT_CASES = [
    toolchain_case(RNNForCausalLM, "lstm", False, 2),
    toolchain_case(RNNForSequenceClassification, "gru", True, 1),
    toolchain_case(RNNForTokenClassification, "rnn", True, 1, slow=True),
    toolchain_case(RNNModel, "lstm", True, 2, slow=True),
    toolchain_case(RNNForSequenceClassification, "self_attention_lstm", False, 1, slow=True),
]
MIXED_IDS = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 0, 0, 0], [0, 0, 10, 11, 12]])
MIXED_MASK = (MIXED_IDS != 0).long()


def toolchain_model(head, cell, bidirectional, **overrides):
    torch.manual_seed(0)
    config = tiny(
        **{"cell": cell, "bidirectional": bidirectional, "num_hidden_layers": 2, "num_labels": 3, **overrides}
    )
    return head(config)


def toolchain_inputs(head, labels: bool) -> dict:
    inputs = {"input_ids": MIXED_IDS, "attention_mask": MIXED_MASK}
    if labels and head is RNNForSequenceClassification:
        inputs["labels"] = torch.tensor([0, 2, 1])
    elif labels and head is RNNForTokenClassification:
        inputs["labels"] = torch.where(MIXED_MASK.bool(), MIXED_IDS % 3, -100)
    elif labels and head is RNNForCausalLM:
        inputs["labels"] = torch.where(MIXED_MASK.bool(), MIXED_IDS, -100)
    return inputs


@pytest.mark.parametrize("head,cell,bidirectional,layers", TOOLCHAIN_CASES)
def test_compiled_training_step_equals_eager_and_inference_has_no_graph_break(head, cell, bidirectional, layers):
    """fullgraph=True compiles the training forward (labels, padded batch): no graph break, same loss and gradients;
    TorchDynamo finds no graph break in the inference forward either."""
    model = toolchain_model(head, cell, bidirectional, num_hidden_layers=layers)
    assert_compiled_training_step_matches(model, toolchain_inputs(head, labels=True), backend="aot_eager")
    assert graph_breaks(model.eval(), toolchain_inputs(head, labels=False)) == 0


@pytest.mark.slow  # the first Inductor compile of a process builds C++ kernels (~10 s warm, ~60 s cold here)
def test_inductor_compiled_lm_training_step_equals_eager():
    """The default backend once for the family: an LSTM language model on a padded batch."""
    model = toolchain_model(RNNForCausalLM, "lstm", False, num_hidden_layers=1)
    assert_compiled_training_step_matches(model, toolchain_inputs(RNNForCausalLM, labels=True), backend="inductor")


@pytest.mark.parametrize("head,cell,bidirectional,layers", EXPORT_CASES)
def test_export_and_onnx_match_eager(head, cell, bidirectional, layers, tmp_path):
    """torch.export and ONNX (onnxruntime) of the inference forward give every output of eager (≤ 1e-4): the
    causal LM's cache comes out as its state tensors."""
    model = toolchain_model(head, cell, bidirectional, num_hidden_layers=layers)
    names = assert_export_and_onnx_match(model, toolchain_inputs(head, labels=False), tmp_path)
    if head is RNNForCausalLM:
        assert len(names) == 3  # logits, h, c


PREPARE_CASES = [
    (RNNForSequenceClassification, "lstm", True, {}),
    (RNNForTokenClassification, "gru", True, {"recurrent_implementation": "cell"}),
    (RNNForCausalLM, "rnn", False, {}),
    (RNNModel, "lstm", True, {"num_hidden_layers": 3, "dropout": 0.3}),
]


@pytest.mark.parametrize("head,cell,bidirectional,overrides", PREPARE_CASES)
def test_prepare_for_quantization_swaps_in_torch_modules_with_the_same_tensors(
    head, cell, bidirectional, overrides, tmp_path
):
    """The recurrent layers become torch.nn.RNN/LSTM/GRU holding the very same parameter tensors: parameter names and
    state dict unchanged (a saved prepared model loads as a plain one), and every output of a batch with left-,
    right-padded and empty rows (hidden states, final state / cache) equal to the unprepared model's."""
    model = toolchain_model(head, cell, bidirectional, **overrides).eval()
    ids = torch.cat([MIXED_IDS, torch.zeros_like(MIXED_IDS[:1])])  # + a row without tokens
    inputs = {"input_ids": ids, "attention_mask": (ids != 0).long(), "output_hidden_states": True}
    before = model.state_dict()
    with torch.no_grad():
        expected = pytree.tree_leaves(model(**inputs))
    assert model.prepare_for_quantization_() is model
    layers = model.base_model.encoder.layers
    assert [type(layer) for layer in layers] == [{"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[cell]] * len(layers)
    after = model.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)  # the same tensors, not copies
    with torch.no_grad():
        got = pytree.tree_leaves(model(**inputs))
        with on_accelerator_paths():  # the mask unread on the host (an accelerator's eager run): the same packing
            unread = pytree.tree_leaves(model(**inputs))
    assert len(got) == len(unread) == len(expected)
    for actual, on_accelerator, reference in zip(got, unread, expected):
        assert_same_outputs(actual, reference)
        assert_same_outputs(on_accelerator, reference)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        reloaded = pytree.tree_leaves(head.from_pretrained(tmp_path).eval()(**inputs))
    for actual, reference in zip(reloaded, expected):
        assert_same_outputs(actual, reference)


def test_prepare_for_quantization_refuses_a_cell_without_a_torch_module():
    model = toolchain_model(RNNForSequenceClassification, "self_attention_lstm", False)
    with pytest.raises(ValueError, match="'self_attention_lstm' has no torch.nn module"):
        model.prepare_for_quantization_()


@pytest.mark.parametrize(
    "head,cell", [(RNNForSequenceClassification, "lstm"), (RNNForTokenClassification, "gru"), (RNNForCausalLM, "lstm")]
)
def test_quantize_dynamic_quantizes_every_linear_and_recurrent_layer(head, cell):
    """After prepare_for_quantization_(), quantize_dynamic({Linear, LSTM, GRU}) replaces every such module (the
    recurrent layers by torch's dynamic int8 LSTM/GRU, which read the packed padded batch) with logits close to the
    float model's; the quantized causal LM generates (greedy and beam search) from a left-padded batch."""
    overrides = {"tie_word_embeddings": True, "embedding_size": 6, "hidden_size": 4} if head is RNNForCausalLM else {}
    model = toolchain_model(head, cell, head is not RNNForCausalLM, **overrides).prepare_for_quantization_()
    quantized = assert_quantizes(model, toolchain_inputs(head, labels=False))
    dynamic = torch.ao.nn.quantized.dynamic
    layers = quantized.base_model.encoder.layers
    assert [type(layer) for layer in layers] == [{"lstm": dynamic.LSTM, "gru": dynamic.GRU}[cell]] * 2
    if head is RNNForCausalLM:
        assert quantized.lm_proj is not None and "quantized" in type(quantized.lm_proj).__module__
        prompts, mask = MIXED_IDS[[0, 2]], MIXED_MASK[[0, 2]]
        for num_beams in (1, 3):
            out = quantized.generate(
                prompts, attention_mask=mask, max_new_tokens=3, num_beams=num_beams, do_sample=False
            )
            assert out.shape == (2, 8) and torch.equal(out[:, :5], prompts)


@pytest.mark.parametrize(
    "head,cell,bidirectional,max_ratio",
    [(RNNForSequenceClassification, "lstm", True, 0.6), (RNNForCausalLM, "gru", False, 0.6)],
)
def test_gradient_checkpointing_same_gradients_less_memory(head, cell, bidirectional, max_ratio):
    """Per-layer activation checkpointing: the same gradients, and well under the saved activation bytes (the
    recurrent layers' saved tensors are dropped; their inputs are kept)."""
    model = toolchain_model(head, cell, bidirectional, num_hidden_layers=3, hidden_size=16, embedding_size=8)
    layers = model.rnn.encoder.layers
    plain, checkpointed = assert_checkpointing_saves_memory(model, toolchain_inputs(head, labels=True), max_ratio)
    assert plain > 0 and not any(layer.gradient_checkpointing for layer in layers)  # disabled again


def test_gradient_checkpointing_through_trainer(tmp_path):
    """TrainingArguments(gradient_checkpointing=True) trains to the same weights as without it."""
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    rows = [{"input_ids": [3 + (i * 7 + j) % 20 for j in range(6)], "labels": i % 3} for i in range(8)]
    data = Dataset.from_list(rows)
    weights = []
    for flag in (False, True):
        model = toolchain_model(RNNForSequenceClassification, "lstm", True)
        args = TrainingArguments(
            output_dir=str(tmp_path / str(flag)),
            per_device_train_batch_size=4,
            max_steps=2,
            learning_rate=0.1,
            gradient_checkpointing=flag,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            seed=0,
        )
        Trainer(model=model, args=args, train_dataset=data).train()
        assert all(layer.gradient_checkpointing == flag for layer in model.rnn.encoder.layers)
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    for key, value in weights[0].items():
        torch.testing.assert_close(weights[1][key], value, rtol=1e-5, atol=1e-6, msg=key)


def test_training_and_decode_steps_read_no_tensor_values_on_the_host():
    """Off CPU (here: the meta device, where reading a value raises) a training step and a cached decoding step run
    the static path: no .item()/bool()/nonzero/packing, i.e. no host-device synchronisation on an accelerator."""
    for cell in ("lstm", "gru", "rnn", "self_attention_lstm"):
        lm = toolchain_model(RNNForCausalLM, cell, False).to("meta").train()
        inputs = to_meta(toolchain_inputs(RNNForCausalLM, labels=True))
        lm(**inputs).loss.backward()
        lm.eval()
        out = lm(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        mask = torch.ones(3, 6, dtype=torch.long, device="meta")
        step = lm(input_ids=inputs["input_ids"][:, -1:], attention_mask=mask, cache=out.cache)
        assert step.logits.shape == (3, 1, V) and step.cache.seen_tokens == 6
        classifier = toolchain_model(RNNForSequenceClassification, cell, cell != "self_attention_lstm").to("meta")
        inputs = to_meta(toolchain_inputs(RNNForSequenceClassification, labels=True))
        classifier.train()(**inputs).loss.backward()
    with pytest.raises(RuntimeError, match="meta"):
        bool(torch.ones(2, device="meta").all())  # the check above would catch a host read


def test_lm_batch_without_mask_runs_one_fused_kernel_call_per_layer():
    """An LM batch without attention_mask calls torch.nn's fused LSTM kernel once per layer (cuDNN on CUDA), on the
    eager and on the static path; with padding the static path calls it once per layer and direction."""
    from torch.profiler import ProfilerActivity, profile

    def lstm_calls(model, **inputs):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            model(**inputs)
        return sum(e.count for e in prof.key_averages() if e.key == "aten::lstm")

    lm = toolchain_model(RNNForCausalLM, "lstm", False, num_hidden_layers=3).train()
    assert lstm_calls(lm, input_ids=MIXED_IDS) == 3
    with on_accelerator_paths():
        assert lstm_calls(lm, input_ids=MIXED_IDS) == 3
        assert lstm_calls(lm, input_ids=MIXED_IDS, attention_mask=MIXED_MASK) == 3
        bi = toolchain_model(RNNModel, "lstm", True, num_hidden_layers=2)
        assert lstm_calls(bi, input_ids=MIXED_IDS, attention_mask=MIXED_MASK) == 4


def test_no_split_modules_name_each_recurrent_layer():
    """FSDP auto-wrap / device_map units: every recurrent layer, found by accelerate by class name."""
    from accelerate.utils.dataclasses import get_module_class_from_name
    from transformers.modeling_layers import GradientCheckpointingLayer

    from hf_seq.recurrent import RecurrentLayer

    for cell, expected in (("lstm", {"RecurrentLayer"}), ("self_attention_lstm", {"SelfAttentionLSTMLayer"})):
        model = toolchain_model(RNNForCausalLM, cell, False, num_hidden_layers=3)
        assert set(model._no_split_modules) == expected
        classes = {get_module_class_from_name(model, name) for name in model._no_split_modules}
        units = [m for m in model.modules() if isinstance(m, tuple(classes))]
        assert len(units) == 3 and all(isinstance(u, (RecurrentLayer, GradientCheckpointingLayer)) for u in units)
    assert toolchain_model(RNNForSequenceClassification, "none", False, pooling="mean")._no_split_modules == set()


def test_checkpoints_of_torch_nn_layers_still_load(tmp_path):
    """Parameter names are torch.nn's, as before: a folder whose recurrent weights were written from torch.nn.LSTM
    modules (one per layer) loads with every tensor in place."""
    from safetensors.torch import save_file

    config = tiny(bidirectional=True, num_hidden_layers=2, num_labels=3)
    torch.manual_seed(1)
    lstms = [nn.LSTM(6 if k == 0 else 10, 5, batch_first=True, bidirectional=True) for k in range(2)]
    weights = {f"rnn.encoder.layers.{k}.{n}": t for k, m in enumerate(lstms) for n, t in m.state_dict().items()}
    weights["rnn.embeddings.word_embeddings.weight"] = torch.randn(V, 6)
    weights["classifier.weight"], weights["classifier.bias"] = torch.randn(3, 10), torch.randn(3)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp_path / "model.safetensors"))
    config.save_pretrained(tmp_path)
    model = RNNForSequenceClassification.from_pretrained(tmp_path)
    state = model.state_dict()
    assert state.keys() == weights.keys()
    assert all(torch.equal(state[k], v) for k, v in weights.items())
    ids, mask = pad(ROWS, "right")
    reference_h = lstms[1](lstms[0](model.get_input_embeddings()(ids[:1, :5]))[0])[1][0]  # (2, 1, 5)
    pooled = model.rnn(input_ids=ids[:1], attention_mask=mask[:1]).pooler_output
    torch.testing.assert_close(pooled, reference_h.transpose(0, 1).reshape(1, -1), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ transformers 5 plumbing


@pytest.mark.parametrize("head", [RNNModel, RNNForSequenceClassification, RNNForTokenClassification, RNNForCausalLM])
def test_config_level_and_call_level_output_flags_agree(head):
    """output_hidden_states and return_dict set in the config act as when passed to the call."""
    model = toolchain_model(head, "lstm", head is not RNNForCausalLM).eval()
    inputs = toolchain_inputs(head, labels=True)
    called = model(**inputs, output_hidden_states=True)
    as_tuple = model(**inputs, output_hidden_states=True, return_dict=False)
    assert called.hidden_states is not None and len(called.hidden_states) == 3  # embeddings + 2 layers
    model.config.output_hidden_states = True
    configured = model(**inputs)
    model.config.return_dict = False
    configured_tuple = model(**inputs)
    assert isinstance(as_tuple, tuple) and isinstance(configured_tuple, tuple)
    assert len(configured_tuple) == len(as_tuple) == len(called.to_tuple())
    for a, b, c, d in zip(called.to_tuple(), configured.to_tuple(), as_tuple, configured_tuple):
        for x, y in zip(pytree.tree_leaves((a, b)), pytree.tree_leaves((c, d))):
            assert torch.equal(x, y)
    model.config.output_hidden_states = False
    model.config.return_dict = True
    assert model(**inputs, return_dict=True).hidden_states is None


def test_num_hidden_layers_is_the_layer_count(tmp_path):
    config = tiny(num_hidden_layers=2)
    assert config.num_layers == 2  # the former name reads the field
    config.num_layers = 3  # ... and sets it
    assert config.num_hidden_layers == 3
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["num_hidden_layers"] == 3 and "num_layers" not in saved
    assert HfSeqRNNConfig.from_pretrained(tmp_path).num_hidden_layers == 3
    assert HfSeqRNNConfig(num_layers=4).num_hidden_layers == 4
    assert len(RNNModel(tiny(num_layers=2)).encoder.layers) == 2
