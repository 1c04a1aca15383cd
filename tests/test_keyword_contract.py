"""One keyword contract for every family (hf_seq/modeling_utils.py ``refuse_unknown_keywords``): every head of the
recurrent family (the logistic regression of ``cell="none"`` included), the RNN seq2seq, the Transformer and BERT
refuses a keyword nobody takes with a ``TypeError`` naming it and the head, eager and under ``torch.compile``, and
takes every keyword transformers passes (the output flags, ``return_dict``, ``use_cache``, ``num_items_in_batch``,
the ``TransformersKwargs`` fields) without a change in its outputs. tests/test_keyword_arguments.py checks the
message and what ``generate()``, Trainer and the pipelines pass."""

from __future__ import annotations

import pytest
import torch
from tiny_models import ALL_HEADS, FAMILIES, build_tokenizer, main_output, model_inputs, registered_heads, tiny_model

import hf_seq
from hf_seq.modeling_utils import TRANSFORMERS_KEYWORDS

# every registered head, and the recurrent family's logistic regression (no recurrent layer: another forward path)
CASES = [(family, head, {}) for family, head in ALL_HEADS] + [
    ("rnn", hf_seq.RNNForSequenceClassification, {"cell": "none", "pooling": "mean", "bidirectional": False}),
    ("rnn", hf_seq.RNNForTokenClassification, {"cell": "none", "pooling": "mean", "bidirectional": False}),
]
CASE_IDS = [f"{head.__name__}{'-' + overrides['cell'] if overrides else ''}" for _, head, overrides in CASES]
TYPOS = ["output_hiden_states", "atention_mask", "labelz"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_every_registered_head_is_in_the_contract():
    """A newly registered head is checked here without editing the list: its family's tiny config builds it."""
    assert {head for _, head in registered_heads()} <= {head for _, head, _ in CASES}


@pytest.mark.parametrize("typo", TYPOS)
@pytest.mark.parametrize(("family", "head", "overrides"), CASES, ids=CASE_IDS)
def test_a_misspelled_keyword_is_a_type_error_naming_it_and_the_head(family, head, overrides, typo, tokenizer):
    model = tiny_model(head, len(tokenizer), **overrides)
    batch = model_inputs(model, tokenizer)
    with pytest.raises(TypeError, match=rf"^{head.__name__}\.forward\(\) got an unexpected keyword argument '{typo}'"):
        model(**batch, **{typo: True})
    with pytest.raises(TypeError, match="did you mean 'output_hidden_states'"):
        model(**batch, output_hiden_states=True)


@pytest.mark.parametrize(
    "head", [hf_seq.RNNSeq2SeqForConditionalGeneration, hf_seq.TransformerForConditionalGeneration]
)
def test_the_encoders_refuse_a_misspelled_keyword_too(head, tokenizer):
    """The encoder of an encoder-decoder (what ``generate()`` runs once per source) is under the same contract: a
    misspelled keyword is a TypeError naming it and the encoder, the keywords transformers passes are taken."""
    model = tiny_model(head, len(tokenizer))
    encoder = model.get_encoder()
    batch = tokenizer(["a cat sat"], return_tensors="pt")
    name = type(encoder).__name__
    with pytest.raises(
        TypeError, match=rf"^{name}\.forward\(\) got an unexpected keyword argument 'output_hiden_states'"
    ):
        encoder(**batch, output_hiden_states=True)
    with torch.no_grad():
        expected = encoder(**batch).last_hidden_state
        got = encoder(**batch, output_attentions=False, return_dict=True, output_hidden_states=True)
    torch.testing.assert_close(got.last_hidden_state, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("family", "head", "overrides"), CASES, ids=CASE_IDS)
def test_every_keyword_transformers_passes_is_taken_and_changes_nothing(family, head, overrides, tokenizer):
    model = tiny_model(head, len(tokenizer), **overrides)
    batch = model_inputs(model, tokenizer)
    extras = dict(num_items_in_batch=torch.tensor(5), cu_seq_lens_q=None, max_length_q=None, seq_idx=None)
    extras |= dict(output_router_logits=False, output_attentions=False, return_dict=True, cache_position=None)
    assert set(extras) <= TRANSFORMERS_KEYWORDS
    with torch.no_grad():
        expected = main_output(model(**batch))
        got = main_output(model(**batch, **extras))
        hidden = model(**batch, output_hidden_states=True)
        as_tuple = model(**batch, return_dict=False)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    states = hidden.get("hidden_states", hidden.get("decoder_hidden_states"))
    assert states is not None and len(states) >= 1
    assert isinstance(as_tuple, tuple)


def test_the_causal_lm_takes_shift_labels_from_kwargs_and_nothing_else(tokenizer):
    """``shift_labels`` (what Trainer passes a causal LM under context parallelism) is the one keyword the recurrent
    LM reads from ``**kwargs``: taken, and its loss is the loss of the labels it replaces; a typo of it is refused."""
    model = tiny_model(hf_seq.RNNForCausalLM, len(tokenizer))
    batch = model_inputs(model, tokenizer, labels=True)
    labels = batch.pop("labels")
    shifted = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    with torch.no_grad():
        expected = model(**batch, labels=labels).loss
        got = model(**batch, shift_labels=shifted).loss
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(TypeError, match="'shift_label'.*did you mean 'shift_labels'"):
        model(**batch, shift_label=shifted)
    bert = tiny_model(hf_seq.BertForMaskedLM, len(tokenizer))
    with pytest.raises(TypeError, match="unexpected keyword argument 'shift_labels'"):
        bert(**model_inputs(bert, tokenizer), shift_labels=shifted)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_compiled_model_takes_its_keywords_and_refuses_a_misspelled_one(family, tokenizer):
    """Under torch.compile (backend "eager": dynamo traces the keyword check, nothing is code-generated) each
    family's first head gives its eager outputs, with and without the output flags, and a misspelled keyword is the
    TypeError naming it (the check's message is built outside the graph)."""
    torch._dynamo.reset()
    head = FAMILIES[family][2][0]
    model = tiny_model(head, len(tokenizer))
    batch = model_inputs(model, tokenizer)
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(main_output(compiled(**batch)), main_output(model(**batch)), rtol=0, atol=0)
        flagged = compiled(**batch, output_hidden_states=True, return_dict=True)
        assert flagged.get("hidden_states", flagged.get("decoder_hidden_states")) is not None
        with pytest.raises(TypeError, match=rf"{head.__name__}\.forward\(\) got an unexpected keyword argument"):
            compiled(**batch, output_hiden_states=True)
        with pytest.raises(TypeError, match="'labelz'"):
            compiled(**batch, labelz=None)
