"""Keyword arguments of BERT's and the Transformer's forwards (``**kwargs: Unpack[TransformersKwargs]``): a mistyped
name is a ``TypeError`` naming it and the accepted ones (hf_seq/modeling_utils.py ``check_keyword_arguments``, run by
the ``refuse_unknown_keywords`` decorator of every forward), while every keyword transformers passes — ``generate()``,
``Trainer``, the pipelines, gradient checkpointing, an attention function's own keywords — still works. Every family:
tests/test_keyword_contract.py."""

from __future__ import annotations

import pytest
import torch
from tiny_models import EOS, FAMILIES, PAD, build_tokenizer, main_output, model_inputs, tiny_model
from transformers import (
    AttentionInterface,
    DataCollatorForSeq2Seq,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    Trainer,
    TrainingArguments,
    pipeline,
)
from transformers.modeling_flash_attention_utils import FlashAttentionKwargs
from transformers.utils import TransformersKwargs

from hf_seq import attention, modeling_utils
from hf_seq.seq2seq_pipelines import TranslationPipeline

HEADS = [head for family in ("bert", "transformer") for head in FAMILIES[family][2]]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def batch_for(model, tokenizer, labels: bool = False) -> dict:
    return model_inputs(model, tokenizer, labels=labels)


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
@pytest.mark.parametrize("typo", ["output_hiden_states", "atention_mask", "decoder_atention_mask", "labelz"])
def test_a_mistyped_keyword_is_a_type_error_naming_it_and_the_accepted_ones(head, typo, tokenizer):
    model = tiny_model(head, len(tokenizer))
    batch = batch_for(model, tokenizer)
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{typo}'") as raised:
        model(**batch, **{typo: batch["attention_mask"]})
    message = str(raised.value)
    assert "'attention_mask'" in message and "'output_hidden_states'" in message and "'return_dict'" in message
    if typo == "output_hiden_states":
        assert "did you mean 'output_hidden_states'?" in message


def test_two_mistyped_keywords_are_both_named(tokenizer):
    model = tiny_model(FAMILIES["bert"][2][0], len(tokenizer))
    with pytest.raises(TypeError, match=r"'output_attentionss'.*\(and 'zzz'\)"):
        model(**batch_for(model, tokenizer), output_attentionss=True, zzz=1)


@pytest.mark.parametrize("family", ["bert", "transformer"])
def test_a_compiled_model_takes_its_keywords_and_refuses_a_mistyped_one(family, tokenizer):
    """Under torch.compile (dynamo traces the keyword check on every call; backend "eager" keeps it cheap) the
    outputs equal the model's own, and a mistyped keyword is still the TypeError naming it: the check runs outside
    the graph (``torch.compiler.disable``). This torch traced the check's former set arithmetic on ``kwargs.keys()``
    as well; torch 2.11's dynamo could not (InternalTorchDynamoError), which only a machine with torch 2.11 shows
    (docs/compile.md)."""
    model = tiny_model(FAMILIES[family][2][0], len(tokenizer))
    batch = batch_for(model, tokenizer)
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(main_output(compiled(**batch)), main_output(model(**batch)), rtol=0, atol=0)
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'output_hiden_states'"):
            compiled(**batch, output_hiden_states=True)


def test_the_accepted_keywords_are_transformers_typed_dicts_read_from_the_release():
    fields = TransformersKwargs.__optional_keys__ | FlashAttentionKwargs.__optional_keys__
    assert fields and fields <= modeling_utils.TRANSFORMERS_KEYWORDS
    assert {"num_items_in_batch", "output_hidden_states", "output_attentions"} <= modeling_utils.TRANSFORMERS_KEYWORDS


@pytest.mark.parametrize("head", HEADS, ids=lambda h: h.__name__)
def test_every_keyword_transformers_passes_is_taken_and_changes_nothing(head, tokenizer):
    """TransformersKwargs' own fields and generate()'s extras (None or their defaults) give the same outputs; the
    output flags give the outputs they ask for."""
    model = tiny_model(head, len(tokenizer))
    batch = batch_for(model, tokenizer)
    extras = dict(num_items_in_batch=torch.tensor(5), cu_seq_lens_q=None, max_length_q=None, seq_idx=None)
    extras |= dict(output_router_logits=False, return_dict=True, cache_position=None)
    with torch.no_grad():
        expected = main_output(model(**batch))
        got = model(**batch, **extras)
        flagged = model(**batch, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(main_output(got), expected, rtol=0, atol=0)
    hidden = flagged.get("hidden_states", flagged.get("decoder_hidden_states"))
    assert hidden is not None and len(hidden) >= 2
    attentions = flagged.get("attentions", flagged.get("cross_attentions"))
    assert attentions is not None and len(attentions) >= 1


def test_an_attention_function_s_own_keyword_reaches_it_and_its_typo_is_refused(tokenizer):
    """transformers passes a forward's keyword arguments on to the attention function: a registered function's
    own keyword is accepted (and arrives), a misspelling of it is refused with the function's keywords listed."""
    seen = []

    def scaled(module, query, key, value, attention_mask, temperature=1.0, **kwargs):
        seen.append(temperature)
        return attention.eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("scaled_for_test", scaled)
    try:
        for family in ("bert", "transformer"):
            head = FAMILIES[family][2][0]
            model = tiny_model(head, len(tokenizer), attn_implementation="scaled_for_test")
            reference = tiny_model(head, len(tokenizer), attn_implementation="eager")
            batch = batch_for(model, tokenizer)
            seen.clear()
            with torch.no_grad():
                got = main_output(model(**batch, temperature=0.5))
                expected = main_output(reference(**batch))
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
            assert seen and set(seen) == {0.5}, seen
            with pytest.raises(
                TypeError, match=r"'temprature'.*attention function 'scaled_for_test''s \['temperature'"
            ):
                model(**batch, temprature=0.5)
    finally:
        AttentionInterface._global_mapping.pop("scaled_for_test", None)


# --- what transformers itself passes ----------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [dict(do_sample=False), dict(num_beams=3, do_sample=False)], ids=["greedy", "beam"])
def test_generate_greedy_and_beam_with_output_flags(kwargs, tokenizer):
    model = tiny_model(FAMILIES["transformer"][2][0], len(tokenizer), seed=3)
    batch = batch_for(model, tokenizer)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    common = dict(max_new_tokens=4, eos_token_id=EOS, pad_token_id=PAD, **kwargs)
    plain = model.generate(**inputs, **common)
    uncached = model.generate(**inputs, **common, use_cache=False)
    flagged = model.generate(
        **inputs, **common, output_hidden_states=True, output_attentions=True, return_dict_in_generate=True
    )
    assert torch.equal(plain, uncached) and torch.equal(flagged.sequences, plain)
    steps = plain.shape[1] - 1
    assert len(flagged.decoder_hidden_states) == len(flagged.cross_attentions) == steps
    assert len(flagged.encoder_hidden_states) == model.config.encoder_layers + 1
    with pytest.raises((TypeError, ValueError), match="output_hiden_states"):
        model.generate(**inputs, **common, output_hiden_states=True)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_generate_and_seq2seq_trainer_predict_take_labels(num_beams, tokenizer, tmp_path):
    """``Seq2SeqTrainer(predict_with_generate=True)`` passes each batch's ``labels`` to ``generate()`` (the translation
    script's test decodes): they change nothing (the encoder never sees them, so its keyword check cannot refuse
    them), and predict() gives generate()'s tokens, then padding."""
    model = tiny_model(FAMILIES["transformer"][2][0], len(tokenizer), seed=3).eval()
    batch = batch_for(model, tokenizer, labels=True)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    common = dict(max_new_tokens=4, num_beams=num_beams, eos_token_id=EOS, pad_token_id=PAD, do_sample=False)
    plain = model.generate(**inputs, **common)
    assert torch.equal(model.generate(**inputs, labels=batch["labels"], **common), plain)

    rows = [{k: v[i].tolist() for k, v in batch.items()} for i in range(batch["input_ids"].shape[0])]
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=len(rows), predict_with_generate=True, report_to="none",
        use_cpu=True, disable_tqdm=True,
    )  # fmt: skip
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    trainer = Seq2SeqTrainer(model=model, args=args, data_collator=collator, processing_class=tokenizer)
    predicted = trainer.predict(rows, **common).predictions  # padded to the generation config's max_length
    assert predicted[:, : plain.shape[1]].tolist() == plain.tolist() and (predicted[:, plain.shape[1] :] == PAD).all()


@pytest.mark.parametrize("family", ["bert", "transformer"])
def test_trainer_one_step_and_gradient_checkpointing(family, tokenizer, tmp_path):
    """One Trainer step changes the weights; with gradient checkpointing the loss and the gradients equal a run
    without it (the blocks are called with the forwards' keyword arguments in both)."""
    head = FAMILIES[family][2][0]
    model = tiny_model(head, len(tokenizer), seed=1)
    batch = batch_for(model, tokenizer, labels=True)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(batch["input_ids"].shape[0])]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=3, learning_rate=0.1, report_to="none",
        use_cpu=True, save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    result = Trainer(model=model, args=args, train_dataset=rows).train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())

    plain = tiny_model(head, len(tokenizer), seed=1).train()
    checkpointed = tiny_model(head, len(tokenizer), seed=1).train()
    checkpointed.gradient_checkpointing_enable()
    losses = []
    for model in (plain, checkpointed):
        loss = model(**batch, output_hidden_states=True).loss
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-7)
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_pipelines_of_both_families():
    tokenizer = build_tokenizer()
    tokenizer.mask_token = "[MASK]"
    bert = FAMILIES["bert"][2]
    masked = tiny_model(bert[0], len(tokenizer))
    fill = pipeline("fill-mask", model=masked, tokenizer=tokenizer)
    out = fill("the cat [MASK] on the mat", top_k=2)
    encoded = tokenizer("the cat [MASK] on the mat", return_tensors="pt")
    with torch.no_grad():
        logits = masked(**encoded).logits
    position = int((encoded["input_ids"][0] == tokenizer.mask_token_id).nonzero())
    assert out[0]["token"] == int(logits[0, position].argmax())
    classify = pipeline("text-classification", model=tiny_model(bert[3], len(tokenizer)), tokenizer=tokenizer)
    assert classify("a cat sat")[0]["label"].startswith("LABEL_")
    tag = pipeline("token-classification", model=tiny_model(bert[4], len(tokenizer)), tokenizer=tokenizer)
    assert tag("a cat sat") is not None
    translator = tiny_model(FAMILIES["transformer"][2][0], len(tokenizer), seed=3)
    translated = TranslationPipeline(model=translator, tokenizer=tokenizer)("a cat sat", max_new_tokens=4, num_beams=2)
    ids = translator.generate(**tokenizer(["a cat sat"], return_tensors="pt"), max_new_tokens=4, num_beams=2)
    assert translated[0]["translation_text"] == tokenizer.decode(ids[0], skip_special_tokens=True)
