"""Folders saved by an earlier version (tests/fixtures/saved_8a6f232: ``save_pretrained`` of tiny models at commit
8a6f232, code files left out, with that version's outputs) load with today's classes and compute the same.

Together with the seed check below this pins the model wing's refactorings: same parameter names, same weights from
the same seed, same outputs and the same generated ids as the version that saved the folders.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tiny_models import build_tokenizer, main_output, model_inputs, tiny_model
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

import hf_seq

FIXTURES = Path(__file__).parent / "fixtures" / "saved_8a6f232"
HEADS = {
    "RNNForSequenceClassification": (hf_seq.RNNForSequenceClassification, AutoModelForSequenceClassification),
    "RNNForCausalLM": (hf_seq.RNNForCausalLM, AutoModelForCausalLM),
    "RNNSeq2SeqForConditionalGeneration": (hf_seq.RNNSeq2SeqForConditionalGeneration, AutoModelForSeq2SeqLM),
    "TransformerForConditionalGeneration": (hf_seq.TransformerForConditionalGeneration, AutoModelForSeq2SeqLM),
    "BertForMaskedLM": (hf_seq.BertForMaskedLM, AutoModelForMaskedLM),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_folder_saved_by_an_earlier_version_loads_and_computes_the_same(name):
    head, auto_cls = HEADS[name]
    folder = FIXTURES / name
    model = auto_cls.from_pretrained(folder).eval()
    assert type(model) is head
    saved = load_file(folder / "model.safetensors")
    assert set(saved) <= set(model.state_dict())
    expected = load_file(folder / "expected_output.safetensors")

    tokenizer = build_tokenizer()
    with torch.no_grad():
        output = main_output(model(**model_inputs(model, tokenizer)))
    torch.testing.assert_close(output, expected["expected"])
    if model.can_generate():
        tokenizer.padding_side = "right" if model.config.is_encoder_decoder else "left"
        batch = tokenizer(["a cat sat", "let there be light"], padding=True, return_tensors="pt")
        for beams in (1, 2):
            ids = model.generate(**batch, max_new_tokens=5, num_beams=beams, do_sample=False, pad_token_id=0)
            assert torch.equal(ids, expected[f"generated_{beams}"]), (beams, ids)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_the_same_seed_builds_the_same_weights_as_the_earlier_version(name):
    """The folders hold what ``tiny_model(head, vocab_size=26, seed=1234)`` built then: a refactoring that changes
    the order or shape of parameter creation changes these tensors."""
    head, _ = HEADS[name]
    model = tiny_model(head, vocab_size=len(build_tokenizer()), seed=1234)
    saved = load_file(FIXTURES / name / "model.safetensors")
    state = model.state_dict()
    for key, tensor in saved.items():
        assert torch.equal(state[key], tensor), key
