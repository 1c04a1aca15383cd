"""Generation lengths of saved models: a saved ``generation_config.max_length`` is the model's default, which a
``max_new_tokens`` (or ``max_length``) given to ``generate()`` replaces without transformers' warning "Both
`max_new_tokens` and `max_length` seem to have been set"; the decoded lengths are those of the equivalent explicit
call."""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

import pytest
import torch
from tiny_models import EOS, TEXTS, build_tokenizer, tiny_model
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, GenerationConfig, pipeline

import hf_seq

GENERATIVE = [
    (hf_seq.TransformerForConditionalGeneration, AutoModelForSeq2SeqLM),
    (hf_seq.RNNSeq2SeqForConditionalGeneration, AutoModelForSeq2SeqLM),
    (hf_seq.RNNForCausalLM, AutoModelForCausalLM),
]


@contextmanager
def length_warnings():
    """Collect every transformers log record and Python warning that mentions a generation length."""
    messages: list[str] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield messages
    finally:
        logger.removeHandler(handler)
    messages.extend(str(w.message) for w in caught)
    messages[:] = [m for m in messages if "max_length" in m or "max_new_tokens" in m]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def saved_model(head, auto, tokenizer, folder):
    """A tiny model whose saved generation config has a default max_length (the seq2seq families set one from their
    config; for the language model a train script would), reloaded through its Auto class."""
    model = tiny_model(head, len(tokenizer))
    if model.generation_config.max_length is None:
        model.generation_config.max_length = 12
    model.generation_config.suppress_tokens = [EOS]  # decode to the length limit, so lengths show
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return auto.from_pretrained(folder).eval()


@pytest.mark.parametrize("head,auto", GENERATIVE, ids=[h.__name__ for h, _ in GENERATIVE])
def test_max_new_tokens_on_a_saved_model_does_not_warn_and_keeps_lengths(head, auto, tokenizer, tmp_path):
    model = saved_model(head, auto, tokenizer, tmp_path / head.__name__)
    default_length = model.generation_config.max_length
    assert default_length is not None
    side = "right" if model.config.is_encoder_decoder else "left"  # a decoder-only prompt is padded on the left
    inputs = tokenizer(TEXTS[:2], padding=True, padding_side=side, return_tensors="pt")
    start = 1 if model.config.is_encoder_decoder else inputs["input_ids"].shape[1]  # decoder / prompt length

    with length_warnings() as messages:
        new_tokens = model.generate(**inputs, max_new_tokens=4)
        as_config = model.generate(**inputs, generation_config=GenerationConfig(max_new_tokens=4))
        explicit = model.generate(**inputs, max_length=start + 4)
        default = model.generate(**inputs)
    assert messages == []
    assert new_tokens.shape[1] == start + 4
    assert torch.equal(new_tokens, as_config) and torch.equal(new_tokens, explicit)
    assert default.shape[1] == default_length  # the saved default still applies when the call sets no length
    assert torch.equal(default, model.generate(**inputs, max_length=default_length))

    # the capture works: a call that sets both lengths gets transformers' warning, max_new_tokens wins
    with length_warnings() as messages:
        both = model.generate(**inputs, max_new_tokens=3, max_length=start + 6)
    assert any("Both `max_new_tokens`" in m for m in messages) and both.shape[1] == start + 3


def test_text_generation_pipeline_with_max_new_tokens_does_not_warn(tokenizer, tmp_path):
    model = saved_model(hf_seq.RNNForCausalLM, AutoModelForCausalLM, tokenizer, tmp_path / "lm")
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    with length_warnings() as messages:
        out = generator("the cat", max_new_tokens=3, do_sample=False, return_tensors=True)
    assert messages == []
    prompt = tokenizer("the cat", return_tensors="pt")
    direct = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert out[0]["generated_token_ids"] == direct[0].tolist() and direct.shape[1] == prompt["input_ids"].shape[1] + 3
