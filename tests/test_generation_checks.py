"""``generate()`` arguments that transformers accepts silently or fails on deep inside decoding get a ValueError
naming the argument (``hf_seq.validation.check_generation_arguments``, run by ``generate()``
in every generative head), as call arguments and as fields of a ``GenerationConfig``; valid calls decode as before.
Also the one config field a family did not check (``is_encoder_decoder`` of the RNN seq2seq config)."""

from __future__ import annotations

from unittest import mock

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


# ---------------------------------------------------------------------------------------------------------------
# inputs that decode silently into a wrong answer (every generative family)
# ---------------------------------------------------------------------------------------------------------------
FAMILIES = ["lm", "rnn_seq2seq", "transformer"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows", ["one row", "one of two rows"])
def test_a_mask_with_nothing_to_attend_to_is_refused(models, family, rows):
    """Neighbours: the prompt of a decoder-only model and the source of both encoder-decoder families; a batch of
    one and one row of a batch. (Without the check: pads, or a translation of nothing.)"""
    ids = torch.tensor([[3, 4, 5]]) if rows == "one row" else torch.tensor([[3, 4, 5], [6, 7, 8]])
    mask = torch.zeros_like(ids) if rows == "one row" else torch.tensor([[1, 1, 1], [0, 0, 0]])
    row = 0 if rows == "one row" else 1
    with pytest.raises(ValueError, match=rf"^`attention_mask` leaves row {row} of the batch nothing to attend to"):
        models[family].generate(ids, attention_mask=mask, max_new_tokens=3)


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_input_checks_hold_where_forward_value_checks_are_skipped(models, family):
    """The generate() checks run once per call, before the loop: on an accelerator (where the forward's value checks
    skip reading tensors; emulated by host_reads_free answering False) and with the fast paths off, a mask with nothing
    to attend to is refused all the same."""
    ids, mask = torch.tensor([[3, 4, 5]]), torch.zeros(1, 3, dtype=torch.long)
    refused = pytest.raises(ValueError, match=r"^`attention_mask` leaves row 0 of the batch nothing to attend to")
    with mock.patch.object(hf_seq.validation, "host_reads_free", lambda tensor: False), refused:
        models[family].generate(ids, attention_mask=mask, max_new_tokens=3)
    with hf_seq.fast_paths.disabled(), refused:
        models[family].generate(ids, attention_mask=mask, max_new_tokens=3)


def test_a_prompt_of_pads_only_is_refused_without_a_mask(models):
    """The mask transformers infers from ``pad_token_id`` is checked like a given one."""
    with pytest.raises(ValueError, match=r"^`input_ids` \(without an `attention_mask`, its `pad_token_id` 0 "):
        models["lm"].generate(torch.tensor([[0, 0, 0]]), max_new_tokens=3)


@pytest.mark.parametrize(
    ("ids", "mask"),
    [
        ([[3, 4, 0, 0]], [[1, 1, 0, 0]]),  # one prompt (transformers warns only for batches)
        ([[3, 4, 5, 6], [3, 4, 0, 0]], [[1, 1, 1, 1], [1, 1, 0, 0]]),  # a batch
        ([[3, 4, 0, 0]], None),  # the mask inferred from pad_token_id
    ],
    ids=["one prompt", "batch", "no mask"],
)
def test_a_right_padded_decoder_only_prompt_is_refused(models, ids, mask):
    kwargs = {} if mask is None else {"attention_mask": torch.tensor(mask)}
    with pytest.raises(
        ValueError, match=r"marks the last position of the prompt in row \d as padding.*pad prompts on the left"
    ):
        models["lm"].generate(torch.tensor(ids), max_new_tokens=3, **kwargs)


def test_left_padding_still_decodes_as_the_unpadded_prompt(models):
    """The allowed side: a left-padded prompt continues as the prompt alone does (greedy, same model)."""
    alone = models["lm"].generate(torch.tensor([[3, 4]]), max_new_tokens=4)
    padded = models["lm"].generate(
        torch.tensor([[0, 0, 3, 4]]), attention_mask=torch.tensor([[0, 0, 1, 1]]), max_new_tokens=4
    )
    assert torch.equal(padded[:, 2:], alone)


@pytest.mark.parametrize("family", ["rnn_seq2seq", "transformer"])
def test_right_padded_sources_of_encoder_decoder_models_decode(models, family):
    """The neighbour that is fine: an encoder-decoder model's source may be right-padded."""
    ids, mask = torch.tensor([[3, 4, 0], [3, 4, 5]]), torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert models[family].generate(ids, attention_mask=mask, max_new_tokens=3).shape[0] == 2


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("length", ["max_new_tokens", "max_length"])
def test_more_return_sequences_than_distinct_ones_are_refused(models, family, length):
    """One new token over a 20-word vocabulary makes 20 distinct sequences: 21 would be padded with duplicates
    scored -1e9 (as transformers does without the check); 20 are fine."""
    model = models[family]
    if length == "max_new_tokens":
        limit = {"max_new_tokens": 1}
    else:  # one new token: after the prompt (decoder-only) or after the decoder's start token
        limit = {"max_length": 1 + (PROMPT.shape[1] if not model.config.is_encoder_decoder else 1)}
    with pytest.raises(ValueError, match=r"^`num_return_sequences` 21 is more than the 20 distinct sequences"):
        generate(model, num_beams=21, num_return_sequences=21, **limit)
    out = generate(model, num_beams=20, num_return_sequences=20, max_new_tokens=1, output_scores=True,
                   return_dict_in_generate=True)  # fmt: skip
    assert out.sequences.shape[0] == 20


# ---------------------------------------------------------------------------------------------------------------
# config keywords that no field reads
# ---------------------------------------------------------------------------------------------------------------
CONFIGS = {
    "rnn": lambda **kw: hf_seq.HfSeqRNNConfig(vocab_size=12, **kw),
    "rnn_seq2seq": lambda **kw: hf_seq.HfSeqRNNSeq2SeqConfig(vocab_size=12, **kw),
    "transformer": lambda **kw: hf_seq.HfSeqTransformerConfig(vocab_size=12, **kw),
    "bert": lambda **kw: hf_seq.HfSeqBertConfig(vocab_size=12, **kw),
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_a_misspelt_field_is_an_error_naming_the_field(family):
    with pytest.raises(
        ValueError, match=r"^`hiden_size` is not a field of HfSeq\w+Config: did you mean `hidden_size`\?"
    ):
        CONFIGS[family](hiden_size=64)


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_an_unknown_keyword_is_a_warning_naming_the_nearest_field(family):
    with pytest.warns(
        UserWarning, match=r"got the keyword `hidden`, which no field reads.*nearest field is `hidden_\w+`"
    ):
        config = CONFIGS[family](hidden=3)
    assert config.hidden == 3  # kept, as transformers' configs keep it


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_generic_keywords_pass_without_a_word(family, recwarn):
    CONFIGS[family](num_labels=3, problem_type="single_label_classification", output_attentions=True, sep_token_id=1)
    assert not [w for w in recwarn if "no field reads" in str(w.message)]


def test_saved_folders_load_without_warnings_and_old_extra_keys_still_load(tmp_path):
    """Every family's saved config.json loads without a warning; a config.json with a key no field reads (as an
    older or newer release may write) still loads, with the warning, even where the key looks misspelt."""
    import json
    import warnings

    from transformers import AutoConfig

    for family, make in CONFIGS.items():
        folder = tmp_path / family
        make().save_pretrained(folder)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            AutoConfig.from_pretrained(folder)
        assert not [w for w in seen if "no field reads" in str(w.message)], family
        saved = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**saved, "hiden_size": 5}))
        with pytest.warns(UserWarning, match=r"`hiden_size`, which no field reads.*nearest field is `hidden_size`"):
            config = AutoConfig.from_pretrained(folder)
        assert config.hidden_size == make().hidden_size
