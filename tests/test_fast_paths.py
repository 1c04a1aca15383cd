"""Tests of hf_seq.fast_paths: every CPU fast path gives the static path's outputs, the switch really turns them off,
and compiled / exported code takes the static path."""

from __future__ import annotations

import os
import subprocess
import sys
from unittest import mock

import pytest
import torch
from conftest import assert_same_outputs
from tiny_models import TEXTS, build_tokenizer, main_output, model_inputs, tiny_model

import hf_seq
import hf_seq.losses
import hf_seq.modeling_bert
import hf_seq.modeling_transformer
from hf_seq import fast_paths, validation
from hf_seq.recurrent import ALIGNED, ALIGNED_FILL, PACKED, make_padding_plan
from hf_seq.validation import check_token_ids

ONES = torch.ones(2, 3, dtype=torch.long)
PADDED = torch.tensor([[1, 1, 0], [1, 1, 1]])


# ---------------------------------------------------------------------------------------------------------------
# The predicates and the switch
# ---------------------------------------------------------------------------------------------------------------


def test_each_predicate_answers_the_fast_path_on_eager_cpu_and_the_static_path_when_disabled():
    x = torch.zeros(2, 3)
    assert fast_paths.enabled() and fast_paths.reads_values(x)
    assert fast_paths.drop_all_ones_mask(ONES) is None
    assert fast_paths.drop_all_ones_mask(PADDED) is PADDED  # something is padded: the mask is kept
    assert fast_paths.drop_all_ones_mask(None) is None
    assert fast_paths.every_row_sees_a_key(torch.tensor([[True], [True]]))
    assert not fast_paths.every_row_sees_a_key(torch.tensor([[True], [False]]))
    assert fast_paths.padding_free_rows(PADDED).tolist() == [0, 1, 3, 4, 5]
    assert fast_paths.packs_padding(PADDED) and fast_paths.fuses_lm_loss(x) and fast_paths.cheap_dropout(x)
    assert fast_paths.appends_in_place()
    with fast_paths.disabled():
        assert not fast_paths.enabled() and not fast_paths.reads_values(x)
        assert fast_paths.drop_all_ones_mask(ONES) is ONES  # a mask of ones is kept
        assert not fast_paths.every_row_sees_a_key(torch.tensor([[True], [True]]))
        assert fast_paths.padding_free_rows(PADDED) is None
        assert not (fast_paths.packs_padding(PADDED) or fast_paths.fuses_lm_loss(x) or fast_paths.cheap_dropout(x))
        assert fast_paths.appends_in_place()  # reads no value: the eager accelerator path keeps the buffer
        with fast_paths.disabled():
            pass
        assert not fast_paths.enabled()  # a nested block restores what it found
    assert fast_paths.enabled()


def test_the_switch_is_restored_after_an_exception():
    with pytest.raises(RuntimeError, match="boom"), fast_paths.disabled():
        raise RuntimeError("boom")
    assert fast_paths.enabled()


def test_meta_tensors_are_not_read():
    assert not fast_paths.reads_values(torch.zeros(2, device="meta"))  # not CPU: no host read
    assert not hf_seq.validation.checks_values(torch.zeros(2, device="meta"))


def test_environment_variable_turns_the_fast_paths_off():
    code = "import hf_seq.fast_paths as f, torch; print(f.enabled(), f.drop_all_ones_mask(torch.ones(1, 2)) is None)"
    env = {**os.environ, "HF_SEQ_FAST_PATHS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_value_checks_have_their_own_switch():
    ids = torch.tensor([[1, 9]])
    out_of_range = pytest.raises(ValueError, match=r"`input_ids` must contain ids in \[0, vocab_size=5\)")
    with out_of_range:
        check_token_ids("input_ids", ids, 5)
    with fast_paths.disabled(), out_of_range:  # the speed switch leaves the checks on
        check_token_ids("input_ids", ids, 5)
    with validation.value_checks_disabled():
        assert not validation.value_checks_enabled() and fast_paths.enabled()  # and the checks' leaves the speed on
        check_token_ids("input_ids", ids, 5)  # no value read: range unchecked
        with pytest.raises(ValueError, match="integer token ids"):
            check_token_ids("input_ids", ids.float(), 5)  # dtype checks still run
    assert validation.value_checks_enabled()
    validation.disable_value_checks()
    try:
        check_token_ids("input_ids", ids, 5)
    finally:
        validation.enable_value_checks()
    with out_of_range:
        check_token_ids("input_ids", ids, 5)


def test_the_value_check_switch_is_restored_after_an_exception():
    with pytest.raises(RuntimeError, match="boom"), validation.value_checks_disabled():
        raise RuntimeError("boom")
    assert validation.value_checks_enabled()


def test_environment_variable_turns_the_value_checks_off_and_leaves_the_fast_paths_on():
    code = (
        "import torch, hf_seq.validation as v, hf_seq.fast_paths as f; "
        "v.check_token_ids('input_ids', torch.tensor([[9]]), 5); "
        "print(v.value_checks_enabled(), f.enabled(), f.drop_all_ones_mask(torch.ones(1, 2)) is None)"
    )
    env = {**os.environ, "HF_SEQ_VALUE_CHECKS": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "True", "True"]


def test_recurrent_padding_plan_on_the_switch():
    assert make_padding_plan(ONES, 2, 3) is None
    assert make_padding_plan(PADDED, 2, 3).layout == PACKED
    holes = torch.tensor([[1, 0, 1], [1, 1, 1]])
    with pytest.raises(ValueError, match="one contiguous block"):
        make_padding_plan(holes, 2, 3)
    with fast_paths.disabled():
        plan = make_padding_plan(ONES, 2, 3)
        assert plan is not None and plan.layout == ALIGNED  # a mask of ones is still a plan
        assert make_padding_plan(PADDED, 2, 3).layout == ALIGNED  # never packed
        with pytest.raises(ValueError, match="one contiguous block"):
            make_padding_plan(holes, 2, 3)  # the value check still runs
        with validation.value_checks_disabled():
            assert make_padding_plan(holes, 2, 3).layout == ALIGNED  # trusted, not read
    with validation.value_checks_disabled():
        assert make_padding_plan(holes, 2, 3).layout == PACKED  # packed as it is: nothing refused


# ---------------------------------------------------------------------------------------------------------------
# Every model: fast path == static path
# ---------------------------------------------------------------------------------------------------------------

SPARSE_TEXTS = [*TEXTS, "a", "cat", "the"]  # under half the positions real: the eager LSTM packs

CASES = [
    pytest.param(hf_seq.RNNForSequenceClassification, {}, TEXTS, id="rnn-classifier-lstm-aligned"),
    pytest.param(hf_seq.RNNForSequenceClassification, {}, SPARSE_TEXTS, id="rnn-classifier-lstm-packed"),
    pytest.param(hf_seq.RNNForSequenceClassification, {"cell": "gru", "num_layers": 2}, TEXTS, id="rnn-gru-packed"),
    pytest.param(hf_seq.RNNForCausalLM, {}, TEXTS, id="lm-lstm"),
    pytest.param(hf_seq.RNNForCausalLM, {"cell": "rnn"}, SPARSE_TEXTS, id="lm-rnn"),
    pytest.param(hf_seq.RNNSeq2SeqForConditionalGeneration, {}, TEXTS, id="rnn-seq2seq"),
    pytest.param(hf_seq.TransformerForConditionalGeneration, {}, TEXTS, id="transformer"),
    pytest.param(hf_seq.BertForMaskedLM, {}, TEXTS, id="bert-mlm"),
    pytest.param(hf_seq.BertForSequenceClassification, {"classifier_pooling": "mean"}, TEXTS, id="bert-mean"),
]


def _step(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach(), main_output(out).detach(), grads


def _batches(model, texts) -> dict[str, dict]:
    padded = model_inputs(model, build_tokenizer(), texts, labels=True)
    assert not bool(padded["attention_mask"].all())
    unpadded = {**padded, "attention_mask": torch.ones_like(padded["attention_mask"])}
    if model.config.is_encoder_decoder:
        target = padded["labels"]
        padded["decoder_attention_mask"] = (target != -100).long()
        unpadded["decoder_attention_mask"] = torch.ones_like(target)
    return {"padded": padded, "unpadded": unpadded}


@pytest.mark.parametrize("head, overrides, texts", CASES)
def test_fast_paths_give_the_static_paths_outputs_and_gradients(head, overrides, texts):
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer), **overrides).train()  # the tiny configs have no dropout
    for name, batch in _batches(model, texts).items():
        if head is hf_seq.RNNForSequenceClassification and name == "padded" and overrides.get("cell") != "gru":
            mask = batch["attention_mask"]
            layout = make_padding_plan(mask, *mask.shape, PACKED, ALIGNED_FILL["LSTM"]).layout
            assert layout == (PACKED if texts is SPARSE_TEXTS else ALIGNED), (name, layout)
        fast = _step(model, batch)
        with fast_paths.disabled():
            static = _step(model, batch)
        assert_same_outputs(fast[0], static[0], msg=f"{name}: loss")
        assert_same_outputs(fast[1], static[1], msg=f"{name}: output")
        assert fast[2].keys() == static[2].keys()
        for param in fast[2]:
            assert_same_outputs(fast[2][param], static[2][param], msg=f"{name}: grad {param}")


@pytest.mark.parametrize(
    "head",
    [hf_seq.RNNForCausalLM, hf_seq.TransformerForConditionalGeneration, hf_seq.RNNSeq2SeqForConditionalGeneration],
)
def test_generation_is_the_same_on_both_paths(head):
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer))
    if not model.config.is_encoder_decoder:
        tokenizer.padding_side = "left"  # a decoder-only prompt continues after its last position: pad on the left
    batch = model_inputs(model, tokenizer)
    batch.pop("decoder_input_ids", None)
    kwargs = dict(max_new_tokens=5, num_beams=2, do_sample=False)
    fast = model.generate(**batch, **kwargs)
    with fast_paths.disabled():
        static = model.generate(**batch, **kwargs)
    assert torch.equal(fast, static)


@pytest.mark.parametrize("head, overrides, texts", CASES)
def test_value_checks_raise_with_the_fast_paths_off_and_change_no_output_when_off(head, overrides, texts):
    """Debugging with the fast paths off keeps the errors; the value checks off read nothing and change nothing."""
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer), **overrides).eval()
    batch = model_inputs(model, tokenizer, texts, labels=True)
    bad = {**batch, "input_ids": batch["input_ids"].clone()}
    bad["input_ids"][0, 0] = model.config.vocab_size  # one id past the vocabulary
    ours = r"`input_ids` must contain ids in \[0, vocab_size="
    with torch.no_grad():
        with pytest.raises(ValueError, match=ours):
            model(**bad)
        with fast_paths.disabled(), pytest.raises(ValueError, match=ours):
            model(**bad)
        checked = main_output(model(**batch))
        with validation.value_checks_disabled():
            unchecked = main_output(model(**batch))
            with pytest.raises(Exception) as raised:  # torch's own failure, deep in the embedding: no check ran
                model(**bad)
    assert not isinstance(raised.value, ValueError) or "must contain ids" not in str(raised.value)
    assert torch.equal(checked, unchecked)


# ---------------------------------------------------------------------------------------------------------------
# The switch really disables: spies on what each fast path skips
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head, module",
    [(hf_seq.BertModel, hf_seq.modeling_bert), (hf_seq.TransformerModel, hf_seq.modeling_transformer)],
)
def test_a_mask_of_ones_is_dropped_on_the_fast_path_and_kept_when_disabled(head, module):
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer))
    batch = model_inputs(model, tokenizer)
    batch["attention_mask"] = torch.ones_like(batch["attention_mask"])
    spy = mock.patch.object(module, "make_attention_mask", wraps=module.make_attention_mask)
    with spy as built:
        fast = main_output(model(**batch))
    assert built.call_count == 0  # no mask: attention runs without one
    with spy as built, fast_paths.disabled():
        static = main_output(model(**batch))
    assert built.call_count >= 1
    assert_same_outputs(fast, static)


def test_rnn_pooler_gets_no_mask_on_the_fast_path_and_the_mask_when_disabled():
    tokenizer = build_tokenizer()
    model = tiny_model(hf_seq.RNNForSequenceClassification, len(tokenizer))
    batch = model_inputs(model, tokenizer)
    batch["attention_mask"] = torch.ones_like(batch["attention_mask"])
    pooler = model.rnn.pooler if hasattr(model, "rnn") else model.base_model.pooler
    with mock.patch.object(pooler, "forward", wraps=pooler.forward) as spy:
        model(**batch)
        assert spy.call_args.args[1] is None
        with fast_paths.disabled():
            model(**batch)
        assert isinstance(spy.call_args.args[1], torch.Tensor) and bool(spy.call_args.args[1].all())


def test_fused_lm_loss_runs_on_the_fast_path_only():
    hidden = torch.randn(2, 3, 4, requires_grad=True)
    weight = torch.randn(7, 4, requires_grad=True)
    labels = torch.tensor([[1, -100, 3], [6, 0, -100]])
    fused = hf_seq.losses._LinearCrossEntropy
    with mock.patch.object(fused, "apply", wraps=fused.apply) as spy:
        logits, loss = hf_seq.losses.linear_cross_entropy(hidden, weight, labels)
        assert spy.call_count == 1
        with fast_paths.disabled():
            static_logits, static_loss = hf_seq.losses.linear_cross_entropy(hidden, weight, labels)
        assert spy.call_count == 1
    assert_same_outputs(logits, static_logits)
    assert_same_outputs(loss, static_loss)
    grads = torch.autograd.grad(loss, (hidden, weight))
    static_grads = torch.autograd.grad(static_loss, (hidden, weight))
    for grad, static_grad in zip(grads, static_grads):
        assert_same_outputs(grad, static_grad)


def test_cheap_dropout_on_the_fast_path_and_nn_dropout_when_disabled():
    dropout = hf_seq.blocks.Dropout(0.25).train()
    x = torch.ones(400, 500)
    with mock.patch.object(torch.nn.Dropout, "forward", autospec=True, side_effect=torch.nn.Dropout.forward) as spy:
        fast = dropout(x)
        assert spy.call_count == 0
        with fast_paths.disabled():
            static = dropout(x)
        assert spy.call_count == 1
    for out in (fast, static):  # both: keep with probability 0.75, kept values scaled by 1 / 0.75
        kept = out != 0
        assert abs(kept.float().mean().item() - 0.75) < 0.01
        torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / 0.75))


def test_padding_free_feed_forward_rows_on_the_fast_path_only():
    tokenizer = build_tokenizer()
    model = tiny_model(hf_seq.TransformerModel, len(tokenizer))
    batch = model_inputs(model, tokenizer)
    layer = model.get_encoder().layers[0]
    with mock.patch.object(layer, "forward", wraps=layer.forward) as spy:
        fast = model(**batch).last_hidden_state
        rows = spy.call_args.kwargs["token_rows"]
        assert rows is not None and rows.numel() == int(batch["attention_mask"].sum())
        assert spy.call_args.kwargs["token_mask"] is None
        with fast_paths.disabled():
            static = model(**batch).last_hidden_state
        assert spy.call_args.kwargs["token_rows"] is None
        assert torch.equal(spy.call_args.kwargs["token_mask"], batch["attention_mask"].bool())
    assert_same_outputs(fast, static)


def test_the_fast_paths_code_is_in_fast_paths_and_the_models_call_it_by_name():
    """The models read as plain math: the CPU tricks (the in-place KV cache, the int32 dropout mask, the feed-forward
    on the real rows) are functions and classes of ``fast_paths``, which the model files name where they use them."""
    assert hf_seq.modeling_transformer.AppendBufferLayer is fast_paths.AppendBufferLayer
    assert fast_paths.AppendBufferLayer.__module__ == "hf_seq.fast_paths"
    assert hf_seq.blocks.int32_dropout is fast_paths.int32_dropout
    assert hf_seq.blocks.on_token_rows is fast_paths.on_token_rows
    dropout = hf_seq.blocks.Dropout(0.5).train()
    with mock.patch.object(hf_seq.blocks, "int32_dropout", wraps=fast_paths.int32_dropout) as spy:
        dropout(torch.ones(3, 5))
        assert spy.call_count == 1
        with fast_paths.disabled():
            dropout(torch.ones(3, 5))
        dropout.eval()(torch.ones(3, 5))
        assert spy.call_count == 1


def test_on_token_rows_runs_the_sublayer_on_the_real_rows_and_passes_the_padding_through():
    torch.manual_seed(0)
    x, linear, sizes = torch.randn(2, 3, 4), torch.nn.Linear(4, 4), []

    def sublayer(h: torch.Tensor) -> torch.Tensor:
        sizes.append(h.shape[0])
        return linear(h)

    out = fast_paths.on_token_rows(sublayer, x, fast_paths.padding_free_rows(PADDED))
    assert sizes == [5] and out.shape == x.shape
    assert torch.equal(out[0, 2], x[0, 2])  # the padding row, unchanged
    real = PADDED.bool()
    assert_same_outputs(out[real], linear(x)[real])


def test_int32_dropout_keeps_the_shape_of_an_odd_sized_tensor_and_scales_what_it_keeps():
    x = torch.ones(7, 3, dtype=torch.bfloat16)
    out = fast_paths.int32_dropout(x, 0.5)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert set(out.unique().tolist()) <= {0.0, 2.0}


# ---------------------------------------------------------------------------------------------------------------
# Traced code takes the static path
# ---------------------------------------------------------------------------------------------------------------


class _Probe(torch.nn.Module):
    """Adds 1 for each fast path NOT taken, so the output says which paths ran."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = x
        if fast_paths.drop_all_ones_mask(mask) is not None:
            out = out + 1
        if not fast_paths.every_row_sees_a_key(mask.bool().unsqueeze(-1)):
            out = out + 1
        if fast_paths.padding_free_rows(mask) is None:
            out = out + 1
        if not (fast_paths.reads_values(x) or fast_paths.packs_padding(mask) or fast_paths.fuses_lm_loss(x)):
            out = out + 1
        if not fast_paths.cheap_dropout(x):
            out = out + 1
        if not fast_paths.appends_in_place():
            out = out + 1
        return out


def test_compiled_and_exported_code_take_the_static_path():
    x, mask = torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.long)
    probe = _Probe()
    assert probe(x, mask).eq(0).all()  # eager CPU: every fast path
    compiled = torch.compile(probe, backend="eager", fullgraph=True)  # fullgraph: no host read, no graph break
    assert compiled(x, mask).eq(6).all()
    exported = torch.export.export(probe, (x, mask))
    assert exported.module()(x, mask).eq(6).all()
