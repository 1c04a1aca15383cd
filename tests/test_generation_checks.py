"""``generate()`` arguments that transformers accepts silently or fails on deep inside decoding get a ValueError
naming the argument (``hf_seq.validation.check_generation_arguments``, run by ``GenerationArgumentsMixin.generate``
in every generative head), as call arguments and as fields of a ``GenerationConfig``; valid calls decode as before.
Also the one config field a family did not check (``is_encoder_decoder`` of the RNN seq2seq config)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, GenerationConfig

import hf_seq

V = 20


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    special = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    lm = AutoModelForCausalLM.from_config(
        hf_seq.HfSeqRNNConfig(vocab_size=V, hidden_size=8, embedding_size=8, **special)
    )
    rnn = AutoModelForSeq2SeqLM.from_config(
        hf_seq.HfSeqRNNSeq2SeqConfig(vocab_size=V, hidden_size=8, embedding_size=8, decoder_start_token_id=1, **special)
    )
    transformer = AutoModelForSeq2SeqLM.from_config(
        hf_seq.HfSeqTransformerConfig(
            vocab_size=V,
            hidden_size=8,
            encoder_layers=1,
            decoder_layers=1,
            num_attention_heads=2,
            intermediate_size=8,
            decoder_start_token_id=1,
            **special,
        )
    )
    return {"lm": lm.eval(), "rnn_seq2seq": rnn.eval(), "transformer": transformer.eval()}


PROMPT = torch.tensor([[3, 4, 5]])

# (arguments, the start of the error message); each of these decodes silently or crashes inside transformers
BAD = {
    "num_beams 0": ({"num_beams": 0}, "`num_beams` must be a positive integer, got 0"),  # ZeroDivisionError
    "num_beams float": ({"num_beams": 2.5}, "`num_beams` must be a positive integer, got 2.5"),  # TypeError in torch
    "num_return_sequences 0": ({"num_return_sequences": 0}, "`num_return_sequences` must be a positive integer"),
    "max_new_tokens float": ({"max_new_tokens": 2.5}, "`max_new_tokens` must be a positive integer, got 2.5"),
    "max_length 0": ({"max_length": 0}, "`max_length` must be a positive integer, got 0"),
    "min_new_tokens negative": ({"min_new_tokens": -1}, "`min_new_tokens` must be a non-negative integer"),
    "min above max": ({"min_new_tokens": 10, "max_new_tokens": 3}, "`min_new_tokens` (10) must not exceed"),
    "no_repeat_ngram_size negative": ({"no_repeat_ngram_size": -1}, "`no_repeat_ngram_size` must be a non-negative"),
    "top_p above 1": ({"do_sample": True, "top_p": 1.5}, "`top_p` must be a float in (0, 1] (1: off), got 1.5"),
    "top_p 0": ({"do_sample": True, "top_p": 0.0}, "`top_p` must be a float in (0, 1] (1: off), got 0.0"),
    "epsilon_cutoff": ({"do_sample": True, "epsilon_cutoff": 2.0}, "`epsilon_cutoff` must be a float in [0, 1)"),
    "eta_cutoff": ({"do_sample": True, "eta_cutoff": -1.0}, "`eta_cutoff` must be a float in [0, 1)"),
    "length_penalty string": ({"num_beams": 2, "length_penalty": "x"}, "`length_penalty` must be a number"),
    "eos outside": (
        {"eos_token_id": V + 5},
        f"`eos_token_id` must be None or an id or a list of ids in [0, vocab_size={V})",
    ),
    "eos list outside": ({"eos_token_id": [2, -1]}, "`eos_token_id` must be None or an id or a list of ids"),
    "pad outside": ({"pad_token_id": V}, f"`pad_token_id` must be None or an id in [0, vocab_size={V}), got {V}"),
    "bos outside": ({"bos_token_id": -3}, "`bos_token_id` must be None or an id in [0, vocab_size="),
    "forced_eos outside": ({"forced_eos_token_id": V + 3}, "`forced_eos_token_id` must be None or an id"),  # IndexError
    "forced_bos outside": ({"forced_bos_token_id": V + 3}, "`forced_bos_token_id` must be None or an id"),
    "suppress_tokens outside": ({"suppress_tokens": [V + 3]}, "`suppress_tokens` must be a list of ids in [0, vocab"),
}
SEQ2SEQ_BAD = {
    "decoder_start outside": ({"decoder_start_token_id": V + 5}, "`decoder_start_token_id` must be None or an id"),
}


def generate(model, **kwargs):
    if model.config.is_encoder_decoder:
        return model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), **kwargs)
    return model.generate(PROMPT, **kwargs)


@pytest.mark.parametrize("family", ["lm", "rnn_seq2seq", "transformer"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_generate_arguments_name_the_argument(models, family, case):
    kwargs, message = BAD[case]
    with pytest.raises(ValueError) as caught:
        generate(models[family], **{"max_new_tokens": 4, **kwargs})
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize("family", ["rnn_seq2seq", "transformer"])
def test_bad_decoder_start_is_named(models, family):
    kwargs, message = SEQ2SEQ_BAD["decoder_start outside"]
    with pytest.raises(ValueError, match=r"^" + message.replace("`", ".")):
        generate(models[family], max_new_tokens=3, **kwargs)


def test_a_generation_config_is_checked_like_call_arguments(models):
    config = GenerationConfig(max_new_tokens=4, eos_token_id=V + 1, pad_token_id=0)
    with pytest.raises(
        ValueError, match=r"`eos_token_id` must be None or an id or a list of ids in \[0, vocab_size=20\)"
    ):
        models["lm"].generate(PROMPT, generation_config=config)
    # a call argument replaces the config's value, as in generate()
    out = models["lm"].generate(PROMPT, generation_config=config, eos_token_id=2)
    assert out.shape[0] == 1


@pytest.mark.parametrize("family", ["lm", "rnn_seq2seq", "transformer"])
def test_valid_arguments_decode_as_without_the_check(models, family):
    """The check only reads arguments: greedy and beam search give the tokens GenerationMixin.generate gives."""
    from transformers import GenerationMixin

    model = models[family]
    for kwargs in ({"max_new_tokens": 5}, {"max_new_tokens": 5, "num_beams": 3, "num_return_sequences": 2}):
        kwargs = {**kwargs, "eos_token_id": [2, 3], "length_penalty": 0.5, "top_p": 1.0}
        checked = generate(model, **kwargs)
        if model.config.is_encoder_decoder:
            plain = GenerationMixin.generate(model, PROMPT, attention_mask=torch.ones_like(PROMPT), **kwargs)
        else:
            plain = GenerationMixin.generate(model, PROMPT, **kwargs)
        assert torch.equal(checked, plain)


@pytest.mark.parametrize("value", ["yes", False])
def test_the_rnn_seq2seq_config_names_a_bad_is_encoder_decoder(value):
    with pytest.raises(ValueError, match=r"^`is_encoder_decoder` must be"):
        hf_seq.HfSeqRNNSeq2SeqConfig(is_encoder_decoder=value)
