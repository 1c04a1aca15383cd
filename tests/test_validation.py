"""The shared argument checks (hf_seq/validation.py) and teacher-forcing helpers (hf_seq/seq2seq_utils.py)."""

from types import SimpleNamespace

import pytest
import torch

from hf_seq.seq2seq_utils import decoder_input_ids_for_labels, shift_tokens_right
from hf_seq.validation import (
    check_batch_shape,
    check_bool,
    check_choice,
    check_integer_labels,
    check_label_range,
    check_positive_float,
    check_positive_int,
    check_probability,
    check_token_id,
    check_token_id_fields,
    check_token_ids,
)


@pytest.mark.parametrize(
    "check, value, message",
    [
        (check_positive_int, 0, "`f` must be a positive integer, got 0"),
        (check_positive_int, True, "`f` must be a positive integer, got True"),
        (check_positive_int, None, "`f` must be a positive integer, got None"),
        (check_probability, 1.0, r"`f` must be a float in \[0, 1\), got 1.0"),
        (check_probability, False, r"`f` must be a float in \[0, 1\), got False"),
        (check_positive_float, 0.0, "`f` must be a positive float, got 0.0"),
        (check_positive_float, "1", "`f` must be a positive float, got '1'"),
        (check_bool, 1, r"`f` must be a bool \(true/false\), got 1"),
    ],
)
def test_field_checks_name_the_field_and_the_allowed_values(check, value, message):
    with pytest.raises(ValueError, match=message):
        check("f", value)


def test_field_checks_accept_valid_values():
    check_positive_int("f", 3)
    check_positive_int("f", None, allow_none=True)
    check_probability("f", 0)
    check_probability("f", 0.5)
    check_positive_float("f", 1e-12)
    check_bool("f", False)
    check_choice("f", None, (None, "a"))
    check_token_id("f", None, 5)
    check_token_id("f", 4, 5)
    check_token_id("f", [1, None, 4], 5, allow_list=True)


def test_choice_and_token_id_messages():
    with pytest.raises(ValueError, match=r"`cell` must be one of \['rnn', 'lstm'\], got 'gru'"):
        check_choice("cell", "gru", ("rnn", "lstm"))
    with pytest.raises(ValueError, match=r"`cell` must be one of"):
        check_choice("cell", ["unhashable"], ("rnn",))
    with pytest.raises(ValueError, match=r"`pad_token_id` must be None or an id in \[0, vocab_size=5\), got 5"):
        check_token_id("pad_token_id", 5, 5)
    with pytest.raises(ValueError, match="`pad_token_id` must be None or an id"):
        check_token_id("pad_token_id", [1], 5)  # a list only where allow_list
    with pytest.raises(ValueError, match=r"`eos_token_id` must be None, an id or a list of ids .*got \[1, 9\]"):
        check_token_id("eos_token_id", [1, 9], 5, allow_list=True)


def test_token_ids_check():
    check_token_ids("input_ids", torch.tensor([[0, 4]]), 5)
    check_token_ids("input_ids", torch.tensor([[0, 4]]), 5, batched=True)
    for empty in ((2, 0), (0, 3)):  # no sequence, or sequences without a token: a clear error, not NaN or IndexError
        with pytest.raises(
            ValueError, match=rf"`input_ids` must hold at least one sequence.*\({empty[0]}, {empty[1]}\)"
        ):
            check_token_ids("input_ids", torch.zeros(empty, dtype=torch.long), 5, batched=True)
    with pytest.raises(
        ValueError, match=r"`input_ids` must contain ids in \[0, vocab_size=5\), got values in \[0, 5\]"
    ):
        check_token_ids("input_ids", torch.tensor([[0, 5]]), 5)
    with pytest.raises(ValueError, match=r"`token_type_ids` must contain ids in \[0, type_vocab_size=2\).*\[-1, 1\]"):
        check_token_ids("token_type_ids", torch.tensor([-1, 1]), 2, "type_vocab_size")
    with pytest.raises(ValueError, match=r"`ids` must have shape \(batch, length\), got \(3,\)"):
        check_token_ids("ids", torch.tensor([1, 2, 3]), 5, batched=True)
    with pytest.raises(ValueError, match="`ids` must hold integer token ids, got dtype torch.float32"):
        check_token_ids("ids", torch.tensor([[1.0]]), 5)


def test_batch_shape_check():
    check_batch_shape("inputs_embeds", (1, 1))
    with pytest.raises(ValueError, match=r"`inputs_embeds` must have shape \(batch, length\), got \(3,\)"):
        check_batch_shape("inputs_embeds", (3,))
    with pytest.raises(ValueError, match=r"at least one sequence of at least one token, got shape \(0, 4\)"):
        check_batch_shape("inputs_embeds", (0, 4))


def test_integer_labels_check_runs_everywhere():
    check_integer_labels("labels", torch.tensor([0, -100]))
    for bad in (torch.tensor([1.7, 0.0]), torch.tensor([True, False]), torch.tensor([1.0], dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match=rf"`labels` must be integer class ids .*got dtype {bad.dtype}"):
            check_integer_labels("labels", bad)
    with pytest.raises(ValueError, match="`next_sentence_label` must be integer class ids"):
        check_label_range("next_sentence_label", torch.tensor([1.7]), 2, "2 classes")  # not cast to 1


def test_token_id_fields_check_every_special_token():
    from hf_seq import HfSeqBertConfig

    config = HfSeqBertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2, intermediate_size=8)
    config.sep_token_id, config.eos_token_id = 3, [4, 9]
    check_token_id_fields(config, 10)
    config.cls_token_id = 10
    with pytest.raises(ValueError, match=r"`cls_token_id` must be None or an id in \[0, vocab_size=10\), got 10"):
        check_token_id_fields(config, 10)


def test_label_range_check():
    check_label_range("labels", torch.tensor([-100, 0, 2]), 3, "num_labels")
    check_label_range("labels", torch.full((2, 3), -100), 3, "num_labels")  # nothing to check
    with pytest.raises(ValueError, match=r"`labels` must be -100 \(ignored\) or in \[0, num_labels=3\).*\[0, 3\]"):
        check_label_range("labels", torch.tensor([-100, 0, 3]), 3, "num_labels")
    with pytest.raises(ValueError, match=r"`labels` must be in \[0, num_labels=3\), got values in \[-100, 1\]"):
        check_label_range("labels", torch.tensor([-100, 1]), 3, "num_labels", ignore_index=None)


def test_shift_tokens_right():
    labels = torch.tensor([[4, 5, 3], [6, 3, -100]])
    assert shift_tokens_right(labels, 0, 2).tolist() == [[2, 4, 5], [2, 6, 3]]
    assert shift_tokens_right(torch.tensor([[7, -100, -100]]), 0, 2).tolist() == [[2, 7, 0]]
    assert shift_tokens_right(torch.tensor([[7, 8]]), None, 2).tolist() == [[2, 7]]  # no -100: no pad needed
    assert labels.tolist() == [[4, 5, 3], [6, 3, -100]]  # not modified in place
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        shift_tokens_right(labels, 0, None)
    with pytest.raises(ValueError, match="pad_token_id"):
        shift_tokens_right(torch.tensor([[7, -100, -100]]), None, 2)


def test_decoder_input_ids_for_labels():
    config = SimpleNamespace(vocab_size=10, pad_token_id=0, decoder_start_token_id=2)
    labels = torch.tensor([[4, 5, -100]])
    assert decoder_input_ids_for_labels(config, labels, None, None).tolist() == [[2, 4, 5]]
    given = torch.tensor([[2, 9, 9]])
    assert decoder_input_ids_for_labels(config, labels, given, None) is given
    assert decoder_input_ids_for_labels(config, labels, None, torch.zeros(1, 3, 4)) is None
    with pytest.raises(ValueError, match=r"`labels` must have shape \(batch, target_len\)"):
        decoder_input_ids_for_labels(config, labels[0], None, None)
    with pytest.raises(ValueError, match=r"`labels` must be -100 \(ignored\) or in \[0, vocab_size=10\)"):
        decoder_input_ids_for_labels(config, torch.tensor([[4, 10]]), None, None)
    with pytest.raises(ValueError, match=r"`labels` shape \(1, 3\) does not match decoder_input_ids shape \(1, 2\)"):
        decoder_input_ids_for_labels(config, labels, torch.tensor([[2, 4]]), None)
