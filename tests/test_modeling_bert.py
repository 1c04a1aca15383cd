"""Tests of the BERT family (hf_seq/configuration_bert.py, hf_seq/modeling_bert.py).

The reference is ``transformers``' own BERT: a randomly initialised tiny ``transformers`` model is saved to a temp
folder, loaded with ``from_transformers_bert`` and must give the same numbers (float32, eval mode, padded batch).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import transformers
from conftest import assert_same_outputs, run_clean
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    pipeline,
)

from hf_seq import (
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
    HfSeqBertConfig,
)
from hf_seq.toolkit.bert_conversion import from_transformers_bert
from hf_seq.toolkit.tokenization import build_wordpiece_tokenizer

VOCAB = 99
PAIRS = [
    (transformers.BertModel, BertModel),
    (transformers.BertForPreTraining, BertForPreTraining),
    (transformers.BertForMaskedLM, BertForMaskedLM),
    (transformers.BertForSequenceClassification, BertForSequenceClassification),
    (transformers.BertForTokenClassification, BertForTokenClassification),
]
HEADS = [BertModel, BertForPreTraining, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification]


def hf_config(**kw) -> transformers.BertConfig:
    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=24,
        type_vocab_size=2,
        num_labels=3,
    )
    base.update(kw)
    return transformers.BertConfig(**base)


def tiny_config(**kw) -> HfSeqBertConfig:
    base = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=24,
        num_labels=3,
    )
    base.update(kw)
    return HfSeqBertConfig(**base)


def padded_batch():
    """Three pairs of different lengths with right padding and segment ids."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, VOCAB, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 9:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[0, 6:] = 1
    types[1, 4:9] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("hf_cls,our_cls", PAIRS, ids=[p[1].__name__ for p in PAIRS])
def test_equal_to_transformers_bert_with_identical_weights(tmp_path, hf_cls, our_cls):
    torch.manual_seed(0)
    ref = hf_cls(hf_config()).eval()
    ref.save_pretrained(tmp_path)
    ours, info = from_transformers_bert(our_cls, str(tmp_path), output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == []
    assert not ours.training
    batch = padded_batch()
    with torch.no_grad():
        expected, got = ref(**batch), ours(**batch)
    # transformers computes padded query positions too (they attend to the real keys only); so do we, so every
    # position is compared, padding included.
    names = [k for k in expected.keys() if expected[k] is not None]
    assert names
    for name in names:
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=0, msg=name)


def test_pretraining_loss_is_mlm_plus_nsp_and_matches_transformers(tmp_path):
    torch.manual_seed(0)
    ref = transformers.BertForPreTraining(hf_config()).eval()
    ours = from_transformers_bert(BertForPreTraining, ref)  # from a model object
    batch = padded_batch()
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 2] = batch["input_ids"][:, 2]
    labels[0, 7] = 11
    nsp = torch.tensor([0, 1, 0])
    with torch.no_grad():
        expected = ref(**batch, labels=labels, next_sentence_label=nsp)
        got = ours(**batch, labels=labels, next_sentence_label=nsp)
        mlm_only = ours(**batch, labels=labels).loss
        nsp_only = ours(**batch, next_sentence_label=nsp).loss
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.loss, mlm_only + nsp_only, atol=1e-6, rtol=0)
    mlm = torch.nn.functional.cross_entropy(got.prediction_logits.reshape(-1, VOCAB), labels.reshape(-1))
    nsp_ce = torch.nn.functional.cross_entropy(got.seq_relationship_logits, nsp)
    torch.testing.assert_close(got.loss, mlm + nsp_ce, atol=1e-6, rtol=0)


@pytest.mark.parametrize("sparse", [False, True])
def test_pretraining_gradients_match_transformers(sparse):
    """The fused masked-LM head's backward (only the labelled rows) gives transformers' BERT gradients."""
    from hf_seq.toolkit.bert_conversion import convert_transformers_bert_state_dict

    torch.manual_seed(0)
    ref = transformers.BertForPreTraining(hf_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    ours = from_transformers_bert(BertForPreTraining, ref, sparse_prediction=sparse)
    ref.train(), ours.train()
    batch = padded_batch()
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 2] = batch["input_ids"][:, 2]
    labels[0, 7] = 11
    nsp = torch.tensor([0, 1, 0])
    ref(**batch, labels=labels, next_sentence_label=nsp).loss.backward()
    ours(**batch, labels=labels, next_sentence_label=nsp).loss.backward()
    expected = convert_transformers_bert_state_dict(
        {name: p.grad for name, p in ref.named_parameters() if p.grad is not None}, ref.config.num_hidden_layers
    )
    got = {name: p.grad for name, p in ours.named_parameters() if p.grad is not None}
    assert "bert.embeddings.word_embeddings.weight" in got  # tied with the decoder: both gradients summed
    assert "cls.predictions.decoder.bias" in got and "bert.encoder.layers.1.self_attn.qkv_proj.weight" in got
    for name, grad in got.items():
        torch.testing.assert_close(grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_sparse_prediction_same_loss_and_logits_at_masked_positions():
    torch.manual_seed(0)
    dense = BertForMaskedLM(tiny_config()).eval()
    sparse = BertForMaskedLM(tiny_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    batch = padded_batch()
    labels = torch.full_like(batch["input_ids"], -100)
    labels[:, 1] = 7
    labels[0, 4] = 9
    with torch.no_grad():
        d, s = dense(**batch, labels=labels), sparse(**batch, labels=labels)
    assert s.logits.shape == (4, VOCAB)
    torch.testing.assert_close(s.logits, d.logits[labels != -100], atol=1e-6, rtol=0)
    torch.testing.assert_close(s.loss, d.loss, atol=1e-6, rtol=0)
    with torch.no_grad():
        assert sparse(**batch).logits.shape == (3, 12, VOCAB)  # without labels: the dense output


def test_from_transformers_bert_reports_new_and_unused_heads(tmp_path, caplog):
    torch.manual_seed(0)
    transformers.BertForPreTraining(hf_config()).save_pretrained(tmp_path)
    model, info = from_transformers_bert(
        BertForSequenceClassification, tmp_path, output_loading_info=True, num_labels=5
    )
    assert info["missing_keys"] == ["classifier.bias", "classifier.weight"]
    assert any(k.startswith("cls.") for k in info["unexpected_keys"])
    assert model.config.num_labels == 5 and model.classifier.out_features == 5
    base, info = from_transformers_bert(BertModel, tmp_path, output_loading_info=True)
    assert info["missing_keys"] == [] and any(k.startswith("cls.") for k in info["unexpected_keys"])
    # a masked-LM checkpoint has no pooler: the pooler and NSP head are new and reported
    mlm_ref = transformers.BertForMaskedLM(hf_config())
    with caplog.at_level("WARNING"):
        _, info = from_transformers_bert(BertForPreTraining, mlm_ref, output_loading_info=True)
    assert set(info["missing_keys"]) == {
        "bert.pooler.dense.weight",
        "bert.pooler.dense.bias",
        "cls.seq_relationship.weight",
        "cls.seq_relationship.bias",
    }
    assert "newly initialized" in caplog.text and "cls.seq_relationship.weight" in caplog.text
    with pytest.raises(ValueError, match="model_or_path"):
        from_transformers_bert(BertModel, torch.nn.Linear(2, 2))


def test_the_converter_refuses_a_class_that_is_not_an_hf_seq_bert():
    ref = transformers.BertModel(hf_config()).eval()
    with pytest.raises(TypeError, match="`cls` must be an hf_seq BERT class"):
        from_transformers_bert(transformers.BertModel, ref)


def test_fused_qkv_is_query_key_value_stacked(tmp_path):
    ref = transformers.BertModel(hf_config())
    ours = from_transformers_bert(BertModel, ref)
    attn = ref.encoder.layer[1].attention.self
    qkv = ours.encoder.layers[1].self_attn.qkv_proj
    assert torch.equal(qkv.weight, torch.cat([attn.query.weight, attn.key.weight, attn.value.weight]))
    assert torch.equal(qkv.bias, torch.cat([attn.query.bias, attn.key.bias, attn.value.bias]))


def test_sdpa_equals_eager_and_outputs_attentions_hidden_states():
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config()).eval()
    batch = padded_batch()
    assert model.config._attn_implementation == "sdpa"
    with torch.no_grad():
        fast = model(**batch)
        model.set_attn_implementation("eager")
        slow = model(**batch, output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(fast.prediction_logits, slow.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast.seq_relationship_logits, slow.seq_relationship_logits, atol=1e-5, rtol=0)
    assert len(slow.hidden_states) == 3 and len(slow.attentions) == 2
    weights = slow.attentions[0]
    assert weights.shape == (3, 4, 12, 12)
    assert torch.all(weights[2, :, :, 5:] == 0)  # padded keys get no attention
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 12))


def test_decoder_tied_to_word_embeddings_and_save_load_bit_exact(tmp_path):
    torch.manual_seed(0)
    for cls in HEADS:
        model = cls(tiny_config()).eval()
        if cls in (BertForPreTraining, BertForMaskedLM):
            assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
            assert model.get_output_embeddings() is model.cls.predictions.decoder
        model.save_pretrained(tmp_path / cls.__name__)
        loaded = cls.from_pretrained(tmp_path / cls.__name__).eval()
        sd, sd2 = model.state_dict(), loaded.state_dict()
        assert sd.keys() == sd2.keys()
        assert all(torch.equal(sd[k], sd2[k]) for k in sd)
        if cls in (BertForPreTraining, BertForMaskedLM):
            assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
        with torch.no_grad():
            a, b = model(**padded_batch()), loaded(**padded_batch())
        assert_same_outputs(b[0], a[0])  # reloaded object: equal to float rounding


@pytest.mark.parametrize("cls", [BertModel, BertForPreTraining])
def test_resize_position_embeddings_keeps_short_outputs_and_repeats_the_table(tmp_path, cls):
    torch.manual_seed(0)
    model = cls(tiny_config(max_position_embeddings=12)).eval()
    old_table = model.get_position_embeddings().weight.detach().clone()  # (12, H)
    with torch.no_grad():
        before = model(**padded_batch())[0]
    model.resize_position_embeddings(30)
    table = model.get_position_embeddings().weight
    assert model.config.max_position_embeddings == 30 and table.shape == (30, 32) and table.requires_grad
    assert torch.equal(table[:12], old_table) and torch.equal(table[12:24], old_table)
    assert torch.equal(table[24:], old_table[:6])
    with torch.no_grad():
        assert torch.equal(model(**padded_batch())[0], before)  # inputs within the old table: unchanged
        longer = model(input_ids=torch.randint(5, VOCAB, (2, 30)))[0]  # accepted now, would raise before
    assert torch.isfinite(longer).all()
    model.save_pretrained(tmp_path)
    loaded = cls.from_pretrained(tmp_path)
    assert loaded.config.max_position_embeddings == 30
    assert torch.equal(loaded.get_position_embeddings().weight, table)

    model.resize_position_embeddings(8)  # shrinking keeps the first rows
    assert torch.equal(model.get_position_embeddings().weight, old_table[:8])
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        model(**padded_batch())
    with pytest.raises(ValueError, match="new_num_position_embeddings"):
        model.resize_position_embeddings(0)


def test_auto_classes_resolve_to_hf_seq_bert(tmp_path):
    config = tiny_config()
    for auto, cls in [
        (AutoModel, BertModel),
        (AutoModelForPreTraining, BertForPreTraining),
        (AutoModelForMaskedLM, BertForMaskedLM),
        (AutoModelForSequenceClassification, BertForSequenceClassification),
        (AutoModelForTokenClassification, BertForTokenClassification),
    ]:
        assert type(auto.from_config(config)) is cls
    BertForMaskedLM(config).save_pretrained(tmp_path)
    assert type(AutoModelForMaskedLM.from_pretrained(tmp_path)) is BertForMaskedLM
    assert transformers.AutoConfig.from_pretrained(tmp_path).model_type == "hf_seq_bert"


@pytest.fixture(scope="module")
def wordpiece():
    texts = ["the cat sat on the mat", "a dog ran in the park", "the cat ran", "a dog sat on a mat"] * 5
    return build_wordpiece_tokenizer(texts, vocab_size=60, min_frequency=1)


def test_fill_mask_pipeline(tmp_path, wordpiece):
    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_config(vocab_size=len(wordpiece), pad_token_id=wordpiece.pad_token_id))
    model.save_pretrained(tmp_path)
    wordpiece.save_pretrained(tmp_path)
    fill = pipeline("fill-mask", model=str(tmp_path), tokenizer=str(tmp_path))
    out = fill("the cat [MASK] on the mat", top_k=3)
    assert len(out) == 3 and all(o["token_str"] for o in out)
    scores = [o["score"] for o in out]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1.0 + 1e-6
    # same answer as the model's own argmax at the mask position
    enc = wordpiece("the cat [MASK] on the mat", return_tensors="pt")
    with torch.no_grad():
        logits = model.eval()(**enc).logits
    pos = int((enc["input_ids"][0] == wordpiece.mask_token_id).nonzero())
    assert out[0]["token"] == int(logits[0, pos].argmax())


def test_remote_code_loading_every_head_without_hf_seq(tmp_path, clean_python):
    torch.manual_seed(0)
    batch = padded_batch()
    expected = {}
    for cls in HEADS:
        model = cls(tiny_config()).eval()
        model.save_pretrained(tmp_path / cls.__name__)
        with torch.no_grad():
            expected[cls.__name__] = model(**batch)[0]
        torch.save(expected[cls.__name__], tmp_path / f"{cls.__name__}.pt")
    torch.save(batch, tmp_path / "batch.pt")
    code = textwrap.dedent(
        f"""
        import torch, transformers
        try:
            import hf_seq
            raise SystemExit("hf_seq must not be importable here")
        except ImportError:
            pass
        root = {str(tmp_path)!r}
        batch = torch.load(root + "/batch.pt")
        autos = {{
            "BertModel": transformers.AutoModel,
            "BertForPreTraining": transformers.AutoModelForPreTraining,
            "BertForMaskedLM": transformers.AutoModelForMaskedLM,
            "BertForSequenceClassification": transformers.AutoModelForSequenceClassification,
            "BertForTokenClassification": transformers.AutoModelForTokenClassification,
        }}
        for name, auto in autos.items():
            model = auto.from_pretrained(root + "/" + name, trust_remote_code=True).eval()
            assert type(model).__name__ == name, type(model)
            assert not type(model).__module__.startswith("hf_seq"), type(model).__module__
            with torch.no_grad():
                out = model(**batch)[0]
            # another process and object: equal to float rounding
            torch.testing.assert_close(out, torch.load(root + "/" + name + ".pt"), rtol=1e-5, atol=1e-6, msg=name)
            print("ok", name)
        """
    )
    result = run_clean(clean_python, code, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == len(HEADS)


def test_bad_inputs_raise_value_errors_naming_the_argument():
    model = BertForPreTraining(tiny_config()).eval()
    batch = padded_batch()
    bad_types = batch["token_type_ids"].clone()
    bad_types[0, 0] = 2
    with pytest.raises(ValueError, match="token_type_ids.*type_vocab_size"):
        model(**{**batch, "token_type_ids": bad_types})
    too_long = torch.ones(1, 25, dtype=torch.long)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model(input_ids=too_long)
    bad_ids = batch["input_ids"].clone()
    bad_ids[1, 1] = VOCAB
    with pytest.raises(ValueError, match="input_ids.*vocab_size"):
        model(**{**batch, "input_ids": bad_ids})
    with pytest.raises(ValueError, match="attention_mask"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"][:, :5])
    with pytest.raises(ValueError, match="next_sentence_label"):
        model(**batch, next_sentence_label=torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match="labels"):
        model(**batch, labels=torch.full_like(batch["input_ids"], VOCAB))
    clf = BertForSequenceClassification(tiny_config())
    with pytest.raises(ValueError, match="labels.*num_labels"):
        clf(**batch, labels=torch.tensor([0, 1, 3]))
    tagger = BertForTokenClassification(tiny_config())
    with pytest.raises(ValueError, match="labels"):
        tagger(**batch, labels=torch.zeros(3, 11, dtype=torch.long))


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_attention_heads", 5),  # does not divide hidden_size 32
        ("hidden_size", 0),
        ("hidden_act", "swishy"),
        ("hidden_dropout_prob", 1.5),
        ("type_vocab_size", 0),
        ("pad_token_id", 500),
        ("layer_norm_eps", -1.0),
        ("sparse_prediction", "yes"),
        ("classifier_pooling", "max"),
        ("classifier_pooling", None),
    ],
)
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field if field != "num_attention_heads" else "num_attention_heads"):
        tiny_config(**{field: value})


def test_trains_one_step_and_loss_decreases():
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    batch = padded_batch()
    labels = torch.where(batch["attention_mask"].bool(), batch["input_ids"], torch.full_like(batch["input_ids"], -100))
    nsp = torch.tensor([0, 1, 0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(**batch, labels=labels, next_sentence_label=nsp).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight


def test_classifier_pooling_names_the_allowed_values():
    with pytest.raises(ValueError, match=r"`classifier_pooling` must be one of \['cls', 'mean'\], got 'CLS'"):
        tiny_config(classifier_pooling="CLS")
    config = tiny_config()
    config.classifier_pooling = "first"  # set after construction: caught by the check the model runs on load
    with pytest.raises(ValueError, match="classifier_pooling"):
        config.validate_bert_config()


def test_mean_pooling_classifier_equals_the_mean_computed_by_hand_on_transformers_bert(tmp_path):
    """classifier_pooling="mean": the logits are classifier(tanh(pooler.dense(mean of the last hidden states over the
    real tokens))), computed here row by row from transformers' own BertModel with the same weights."""
    torch.manual_seed(0)
    ref = transformers.BertForSequenceClassification(hf_config()).eval()
    ref.save_pretrained(tmp_path)
    ours = from_transformers_bert(BertForSequenceClassification, str(tmp_path), classifier_pooling="mean")
    assert ours.config.classifier_pooling == "mean"
    batch = padded_batch()
    with torch.no_grad():
        states = ref.bert(**batch).last_hidden_state  # (B, T, H)
        lengths = batch["attention_mask"].sum(-1).tolist()
        assert len(set(lengths)) == 3  # three different lengths
        means = torch.stack([states[row, :n].sum(0) / n for row, n in enumerate(lengths)])  # right padding
        expected = ref.classifier(torch.tanh(ref.bert.pooler.dense(means)))
        got = ours(**batch).logits
        cls_logits = ref(**batch).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert (got - cls_logits).abs().max() > 1e-2  # the [CLS] head computes something else on this batch


def test_mean_pooling_without_a_mask_averages_every_position_and_rejects_rows_without_tokens():
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(classifier_pooling="mean")).eval()
    ids = padded_batch()["input_ids"]
    with torch.no_grad():
        unmasked = model(input_ids=ids).logits
        all_ones = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.testing.assert_close(unmasked, all_ones)
    mask = torch.ones_like(ids)
    mask[1] = 0
    with pytest.raises(ValueError, match="`attention_mask` has a row without any token.*classifier_pooling"):
        model(input_ids=ids, attention_mask=mask)


def test_classifier_pooling_keeps_the_weights_and_survives_save_and_reload(tmp_path):
    """The two modes have the same parameters (a checkpoint loads into either); the saved config keeps the mode."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config(classifier_pooling="mean")).eval()
    assert model.state_dict().keys() == BertForSequenceClassification(tiny_config()).state_dict().keys()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert reloaded.config.classifier_pooling == "mean"
    batch = padded_batch()
    with torch.no_grad():
        assert_same_outputs(reloaded(**batch).logits, model(**batch).logits)


# ---------------------------------------------------------------------------------------------------------------
# compiler stack, quantization, the accelerator path
# ---------------------------------------------------------------------------------------------------------------


def with_labels(head: type, batch: dict) -> dict:
    """``batch`` plus the labels ``head`` trains on (masked-LM labels on a third of the real tokens)."""
    ids, real = batch["input_ids"], batch["attention_mask"].bool()
    mlm = torch.where(real & (torch.arange(ids.shape[1]) % 3 == 1), ids, torch.full_like(ids, -100))
    extra = {
        BertModel: {},
        BertForPreTraining: {"labels": mlm, "next_sentence_label": torch.tensor([0, 1, 1])},
        BertForMaskedLM: {"labels": mlm},
        BertForSequenceClassification: {"labels": torch.tensor([2, 0, 1])},
        BertForTokenClassification: {"labels": torch.where(real, ids % 3, torch.full_like(ids, -100))},
    }[head]
    return {**batch, **extra}


# every head, and the sequence classifier with classifier_pooling="mean" too
COMPILED = [pytest.param(head, {}, id=head.__name__) for head in HEADS] + [
    pytest.param(BertForSequenceClassification, {"classifier_pooling": "mean"}, id="BertForSequenceClassification-mean")
]


@pytest.mark.parametrize("head,extra", COMPILED)
def test_fullgraph_compiled_training_step_equals_eager(head, extra):
    """No graph break in a training forward with labels (fullgraph=True); the compiled loss and gradients equal the
    eager ones. The masked-LM head runs through inductor, the others through aot_eager (inductor is slow to build)."""
    from compile_checks import assert_compiled_training_step_equals_eager

    torch.manual_seed(0)
    model = head(tiny_config(num_hidden_layers=1, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **extra))
    backend = "inductor" if head is BertForMaskedLM else "aot_eager"
    assert_compiled_training_step_equals_eager(model, with_labels(head, padded_batch()), backend=backend)


@pytest.mark.parametrize("head,extra", COMPILED)
def test_inference_forward_compiles_exports_and_runs_in_onnxruntime(head, extra, tmp_path):
    from compile_checks import assert_export_and_onnx_match, assert_inference_compiles_without_graph_breaks

    torch.manual_seed(0)
    model = head(tiny_config(num_hidden_layers=1, **extra))
    assert_inference_compiles_without_graph_breaks(model, padded_batch())
    assert_export_and_onnx_match(model, padded_batch(), tmp_path)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_quantize_dynamic_quantizes_every_projection(head):
    from compile_checks import assert_quantize_dynamic_covers_every_linear

    torch.manual_seed(0)
    assert_quantize_dynamic_covers_every_linear(head(tiny_config(num_hidden_layers=1)), padded_batch())


def test_accelerator_path_reads_no_value_on_the_host_and_equals_the_cpu_path():
    """The code an accelerator runs (every CPU fast path off) has no host read in a pretraining step (forward and
    backward) or an inference forward, and computes what the CPU fast paths compute."""
    from compile_checks import HostReads, accelerator_path, gradients

    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).train()
    batch = with_labels(BertForPreTraining, padded_batch())

    def training_step():
        model.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        return loss.detach(), gradients(model)

    with HostReads() as cpu_reads:
        cpu_loss, cpu_grads = training_step()
    assert cpu_reads.host_reads  # the CPU fast paths and value checks are there (and detected)
    inference_batch = padded_batch()
    with accelerator_path(), HostReads() as reads:
        loss, grads = training_step()
        model.eval()
        with torch.no_grad():
            model(**inference_batch)
    assert not reads.host_reads, reads.host_reads
    assert "native_layer_norm_backward" in reads.ops
    torch.testing.assert_close(loss, cpu_loss)
    for name in cpu_grads:
        torch.testing.assert_close(grads[name], cpu_grads[name], msg=name)


def test_mean_pooling_reads_no_value_on_the_host_on_the_accelerator_path():
    """The row check of classifier_pooling="mean" runs on eager CPU only; the accelerator path computes the same
    loss without reading a value on the host."""
    from compile_checks import HostReads, accelerator_path

    torch.manual_seed(0)
    model = BertForSequenceClassification(
        tiny_config(classifier_pooling="mean", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ).train()
    batch = with_labels(BertForSequenceClassification, padded_batch())
    cpu_loss = model(**batch).loss
    with accelerator_path(), HostReads() as reads:
        loss = model(**batch).loss
        loss.backward()
    assert not reads.host_reads, reads.host_reads
    torch.testing.assert_close(loss, cpu_loss)


# ---------------------------------------------------------------------------------------------------------------
# gradient checkpointing, output plumbing, device maps, adapters
# ---------------------------------------------------------------------------------------------------------------


def test_gradient_checkpointing_same_gradients_less_activation_memory():
    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_config(num_hidden_layers=4)).train()  # dropout 0.1: the RNG is replayed
    batch = with_labels(BertForMaskedLM, padded_batch())
    storages = {}

    def step():
        storages.clear()

        def pack(tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        torch.manual_seed(7)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(**batch).loss
        loss.backward()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        return loss.detach(), grads, sum(n for ptr, n in storages.items() if ptr not in params)

    loss, grads, saved = step()
    model.gradient_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.bert.encoder.layers)
    loss_gc, grads_gc, saved_gc = step()
    torch.testing.assert_close(loss_gc, loss)
    for name in grads:
        torch.testing.assert_close(grads_gc[name], grads[name], msg=name)
    assert saved_gc < 0.4 * saved, (saved_gc, saved)  # measured 20 %: the embeddings and the head keep theirs


def test_trainer_gradient_checkpointing_flag_trains(tmp_path):
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny_config())
    batch = with_labels(BertForSequenceClassification, padded_batch())
    rows = [{k: v[i] for k, v in batch.items()} for i in range(3)]
    args = TrainingArguments(
        output_dir=str(tmp_path), gradient_checkpointing=True, max_steps=2, per_device_train_batch_size=3,
        use_cpu=True, report_to=[], save_strategy="no", logging_steps=1, learning_rate=1e-3,
    )  # fmt: skip
    before = model.classifier.weight.detach().clone()
    Trainer(model=model, args=args, train_dataset=rows).train()
    assert all(layer.gradient_checkpointing for layer in model.bert.encoder.layers)
    assert not torch.equal(before, model.classifier.weight)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_config_level_output_flags_equal_call_level_ones(head):
    torch.manual_seed(0)
    model = head(tiny_config(attn_implementation="eager")).eval()  # transformers: output_attentions needs eager
    batch = padded_batch()
    with torch.no_grad():
        called = model(**batch, output_hidden_states=True, output_attentions=True)
        model.config.output_hidden_states = True
        model.config.output_attentions = True
        configured = model(**batch)
        assert len(configured.hidden_states) == 3 and len(configured.attentions) == 2
        for name in ("hidden_states", "attentions"):
            for a, b in zip(configured[name], called[name]):
                torch.testing.assert_close(a, b)
        assert model(**batch, output_hidden_states=False).hidden_states is None
        model.config.return_dict = False
        as_tuple = model(**batch)
        assert isinstance(as_tuple, tuple)
        torch.testing.assert_close(as_tuple[0], configured.to_tuple()[0])
        assert not isinstance(model(**batch, return_dict=True), tuple)


def test_no_split_unit_holds_no_weight_tied_outside_it_and_device_map_auto_loads(tmp_path):
    """Each module class in ``_no_split_modules`` is a unit FSDP / ``device_map`` may place on its own: none may share
    a parameter with the rest of the model. A ``BertEmbeddings`` unit would (the masked-LM decoder is tied to the
    word embedding), so only the encoder block is named."""
    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config())

    def units_sharing_weights(class_names) -> list[str]:
        shared = []
        for name, module in model.named_modules():
            if type(module).__name__ in class_names:
                inside = {id(p) for p in module.parameters()}
                outside = {id(p) for n, p in model.named_parameters(remove_duplicate=False) if not n.startswith(name)}
                if inside & outside:
                    shared.append(name)
        return shared

    assert set(model._no_split_modules) == {"TransformerEncoderBlock"}
    assert not units_sharing_weights(model._no_split_modules)
    assert units_sharing_weights(["BertEmbeddings"]) == ["bert.embeddings"]  # why it is not named
    model.save_pretrained(tmp_path)
    loaded = BertForPreTraining.from_pretrained(tmp_path, device_map="auto").eval()
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    with torch.no_grad():
        assert_same_outputs(
            loaded(**padded_batch()).prediction_logits, model.eval()(**padded_batch()).prediction_logits
        )


def test_lora_adapters_on_the_projections_train():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = BertForMaskedLM(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).train()
    batch = with_labels(BertForMaskedLM, padded_batch())
    base_loss = model(**batch).loss.detach()
    config = LoraConfig(r=4, target_modules=["qkv_proj", "out_proj", "fc1", "fc2", "decoder"], lora_dropout=0.0)
    peft_model = get_peft_model(model, config)
    loss = peft_model(**batch).loss
    torch.testing.assert_close(loss.detach(), base_loss)  # LoRA starts as the identity (B = 0)
    loss.backward()
    trained = {n for n, p in peft_model.named_parameters() if p.grad is not None}
    assert trained and all("lora_" in n for n in trained)
    assert any("predictions.decoder.lora_A" in n for n in trained)


# ---------------------------------------------------------------------------------------------------------------
# empty batches, float labels, special token ids
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
@pytest.mark.parametrize("shape", [(0, 12), (3, 0)])
def test_empty_batches_are_clear_errors(head, shape):
    model = head(tiny_config()).eval()
    ids = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match=rf"`input_ids` must hold at least one sequence.*\({shape[0]}, {shape[1]}\)"):
        model(input_ids=ids, **{k: v for k, v in with_labels(head, padded_batch()).items() if "label" in k})
    with pytest.raises(ValueError, match=r"`inputs_embeds` must hold at least one sequence"):
        model(inputs_embeds=torch.zeros(*shape, 32))


@pytest.mark.parametrize(
    "head, labels",
    [
        (BertForTokenClassification, {"labels": torch.full((3, 12), 1.7)}),
        (BertForSequenceClassification, {"labels": torch.tensor([1.7, 0.0, 2.0])}),
        (BertForMaskedLM, {"labels": torch.full((3, 12), 1.7)}),
        (BertForPreTraining, {"next_sentence_label": torch.tensor([1.7, 0.0, 1.0])}),
        (BertForPreTraining, {"labels": torch.full((3, 12), 1.7)}),
    ],
    ids=["token", "sequence", "masked-lm", "next-sentence", "pretraining-mlm"],
)
def test_float_class_labels_are_clear_errors_not_truncated(head, labels):
    model = head(tiny_config(problem_type="single_label_classification")).eval()
    name = next(iter(labels))
    with pytest.raises(ValueError, match=rf"`{name}` must be integer"):
        model(**padded_batch(), **labels)


@pytest.mark.parametrize(
    "field, value",
    [
        ("vocab_size", "20"),
        ("hidden_size", "32"),
        ("bos_token_id", VOCAB),
        ("eos_token_id", [1, VOCAB + 5]),
        ("sep_token_id", VOCAB),
        ("cls_token_id", -1),
        ("mask_token_id", 1000),
    ],
)
def test_bad_sizes_and_special_token_ids_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}` must be"):
        tiny_config(**{field: value})
