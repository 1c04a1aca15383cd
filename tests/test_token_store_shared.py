"""What train_lm and pretrain_bert share from train_scripts/features.py: the validation hold-out of a training file
(the rows hf_seq.toolkit.data's hold-out moves), the data line of their splits, the checks of a streamed text file and the
seeded shuffle buffer of their streams."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from hf_seq.train_scripts import features
from hf_seq.train_scripts.arguments import RecipeError

from hf_seq.toolkit.data import DataError, hold_out_validation


def _data_args(**values):
    fields = dict(
        dataset_name=None,
        dataset_config_name=None,
        train_file="corpus.txt",
        validation_file=None,
        test_file=None,
        validation_split_percentage=20,
        split_seed=3,
        max_train_samples=None,
    )
    return SimpleNamespace(**(fields | values))


def test_held_out_rows_are_the_rows_hold_out_validation_moves():
    rows = Dataset.from_dict({"text": [f"row {i}" for i in range(23)]})
    moved = hold_out_validation(DatasetDict({"train": rows}), 20, seed=3)["validation"]["text"]
    mask = features.held_out_rows("corpus.txt", 23, 20, 3)
    assert [f"row {i}" for i in np.flatnonzero(mask)] == moved


def test_the_hold_out_errors_name_the_source_and_the_flag():
    with pytest.raises(DataError, match=r"corpus.txt comes without a validation split: pass `validation_file`"):
        features.check_holdout_percentage("corpus.txt", None)
    with pytest.raises(DataError, match=r"`validation_split_percentage` must be in \(0, 100\), got 100"):
        features.check_holdout_percentage("corpus.txt", 100)
    with pytest.raises(DataError, match=r"corpus.txt: 2 training documents are too few to hold out 80% for validation"):
        features.held_out_rows("corpus.txt", 2, 80, 0, unit="documents")


def test_describe_sizes_describes_a_held_out_validation_split():
    line = features.describe_sizes(
        _data_args(), {"train": 8, "validation": 2}, {"train": "corpus.txt"}, np.ones(10, bool), unit="texts"
    )
    assert "own data files: train `corpus.txt`" in line
    assert "validation: 20% of the training texts held out (seed 3)" in line
    assert line.endswith("used: 8 / 2 train / validation texts")


@pytest.mark.parametrize(
    ("values", "max_steps", "flag"),
    [
        ({"dataset_name": "hf_seq/ptb"}, 10, "`streaming` reads `train_file`"),
        ({}, 10, "`streaming` needs a `validation_file`"),
        ({"validation_file": "v.txt", "max_train_samples": 5}, 10, "`max_train_samples` does not apply"),
        ({"validation_file": "v.txt"}, -1, "`streaming` needs `max_steps`"),
    ],
)
def test_check_text_stream_names_the_flag(values, max_steps, flag):
    data_args = _data_args(**values)
    with pytest.raises(RecipeError, match=flag):
        features.check_text_stream(
            data_args, SimpleNamespace(max_steps=max_steps), {"max_train_samples": data_args.max_train_samples}
        )


def test_check_text_stream_accepts_a_stream_of_files():
    features.check_text_stream(_data_args(validation_file="v.txt"), SimpleNamespace(max_steps=10), {"cap": None})
    features.check_text_stream(_data_args(validation_file="v.txt"), None, {})  # no training arguments: no max_steps


def test_shuffle_buffered_is_a_seeded_permutation_and_size_0_keeps_the_order():
    items = list(range(50))
    once = list(features.shuffle_buffered(iter(items), 8, np.random.default_rng([1, 0])))
    again = list(features.shuffle_buffered(iter(items), 8, np.random.default_rng([1, 0])))
    other = list(features.shuffle_buffered(iter(items), 8, np.random.default_rng([1, 1])))
    assert sorted(once) == items and once == again and once != items and other != once
    assert list(features.shuffle_buffered(iter(items), 0, np.random.default_rng(0))) == items
    # an item leaves the buffer no earlier than `size` items after the buffer began to fill: the first 8 outputs
    # are drawn after the buffer is full, so each is at most 8 places late
    assert all(value <= position + 8 for position, value in enumerate(once[: len(items) - 8]))
