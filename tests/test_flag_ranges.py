"""Every training flag whose range or set of values the scripts check is refused, for every script that takes it: a
value outside it, given to the scripts' parser in a recipe (a JSON value argparse never sees) and as a flag, is a
:class:`RecipeError` (the command line prints it as one line) naming where it was set, the flag, what it allows
and the value. The checks sit beside the fields, in the argument dataclasses' ``__post_init__`` (the
fields of transformers' ``TrainingArguments`` in hf_seq's subclass), so a dataclass built in Python refuses the value
too."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hf_seq.train_scripts import tasks
from hf_seq.train_scripts.arguments import SAMPLING_STRATEGIES, DataArguments, ModelArguments, parse_args
from hf_seq.train_scripts.errors import RecipeError

from hf_seq.toolkit.word_vectors import MISSING_INITS

POSITIVE = "a positive integer"
# flag: (a value outside what it allows, what the message says it allows)
BAD = {
    # transformers' TrainingArguments / Seq2SeqTrainingArguments fields it leaves unchecked
    "per_device_train_batch_size": (0, ">= 1"),
    "per_device_eval_batch_size": (-2, ">= 1"),
    "gradient_accumulation_steps": (0, ">= 1"),
    "eval_accumulation_steps": (0, ">= 1 or null"),
    "learning_rate": (-1.0, ">= 0"),
    "weight_decay": (-0.5, ">= 0"),
    "adam_beta1": (1.0, "in [0, 1)"),
    "adam_beta2": (-0.1, "in [0, 1)"),
    "adam_epsilon": (0.0, "> 0"),
    "max_grad_norm": (-1.0, ">= 0 or null"),
    "warmup_steps": (-1, ">= 0"),
    "warmup_ratio": (1.5, "in [0, 1] or null"),  # transformers releases that still have it
    "label_smoothing_factor": (1.0, "in [0, 1)"),
    "logging_steps": (0, "> 0"),
    "save_steps": (-1, "> 0"),
    "eval_steps": (0, "> 0 or null"),
    "save_total_limit": (0, ">= 1 or null"),
    "dataloader_num_workers": (-1, ">= 0"),
    "dataloader_prefetch_factor": (0, ">= 1 or null"),
    "seed": (2**32, "in [0, 4294967296)"),
    "data_seed": (-1, "in [0, 4294967296) or null"),
    "torch_empty_cache_steps": (0, ">= 1 or null"),
    "neftune_noise_alpha": (0.0, "> 0 or null"),
    "generation_num_beams": (0, ">= 1 or null"),
    "generation_max_length": (0, ">= 1 or null"),
    "train_sampling_strategy": ("buckets", f"one of {list(SAMPLING_STRATEGIES)}"),
    # the shared dataclasses
    "tokenizer_kind": ("byte", None),  # the kinds the script builds
    "tokenizer_vocab_size": (0, f"{POSITIVE} or null"),
    "padding_side": ("top", "one of ['left', 'right']"),
    "truncation_side": ("middle", "one of ['left', 'right']"),
    "validation_split_percentage": (100, "in [0, 100) or null"),
    "max_seq_length": (0, f"{POSITIVE} or null"),
    "max_source_length": (-1, f"{POSITIVE} or null"),
    "max_target_length": (0, f"{POSITIVE} or null"),
    "max_train_samples": (-3, f"{POSITIVE} or null"),
    "max_eval_samples": (0, f"{POSITIVE} or null"),
    "max_predict_samples": (0, f"{POSITIVE} or null"),
    "max_train_minutes": (0.0, "> 0 or null"),
    "max_train_cpu_minutes": (-1.0, "> 0 or null"),
    "preprocessing_num_workers": (0, f"{POSITIVE} or null"),
    "tokenizer_max_train_lines": (0, f"{POSITIVE} or null"),
    "shuffle_buffer_size": (-1, ">= 0"),
    # the scripts' own
    "word_dropout": (-0.5, ">= 0"),
    "pretrained_missing_init": ("random", f"one of {list(MISSING_INITS)}"),
    "pretrained_vocabulary": ("all", "one of ['tokenizer', 'add_vector_words', 'add_all_vector_words']"),
    "pretrained_vocabulary_limit": (0, "a positive number of words or null"),
    "word_pre_tokenizer": ("spaces", "one of ['whitespace_punct', 'glove', 'whitespace']"),
    "level": ("byte", "one of ['char', 'word']"),
    "segment_length": (0, POSITIVE),
    "eval_streams": (0, POSITIVE),
    "sample_length": (-1, POSITIVE),
    "sample_temperatures": ([0.5, -1.0], "positive numbers"),
    "test_engine": ("tensorrt", None),  # the engines the script runs
    "test_onnxruntime_quantization": ("int4", "one of ['int8'] or null"),
    "max_words": (0, f"{POSITIVE} or null"),
    "average_last_checkpoints": (0, f"{POSITIVE} or null"),
    "mlm_probability": (1.5, "in [0, 1]"),
    "nsp_probability": (-0.1, "in [0, 1]"),
    "short_seq_probability": (2.0, "in [0, 1]"),
    "eval_pairs_per_anchor": (0, ">= 1"),
    "num_threads": (0, f"{POSITIVE} or null"),
    "stream_buffer_documents": (1, ">= 2"),
    "task": ("sentiment", "one of ['text-classification', 'token-classification']"),
    "dim": (0, POSITIVE),
    "window": (0, POSITIVE),
    "negatives": (-1, POSITIVE),
    "min_count": (0, POSITIVE),
}


def _classes(task) -> tuple:
    return (ModelArguments, DataArguments, task.arguments, task.training_arguments)


def _checked(task_name: str) -> list[tuple[type, str, object, str, bool]]:
    """(its dataclass, flag, bad value, what the message says it allows, whether argparse offers choices) of every
    checked flag the script takes."""
    module = tasks.script(task_name)
    task = module.TASK
    found = []
    for cls in _classes(task):
        for item in dataclasses.fields(cls):
            if item.name not in BAD or item.name in task.unused or any(item.name == f[1] for f in found):
                continue
            value, allowed = BAD[item.name]
            if item.name == "tokenizer_kind":
                allowed = f"one of {list(task.tokenizer_kinds)} or null"
            elif item.name == "test_engine":
                allowed = f"one of {list(module.TEST_ENGINES)}"
            found.append((cls, item.name, value, allowed, "choices" in item.metadata))
    return found


def test_every_script_takes_its_defaults_and_checks_the_shared_fields(tmp_path):
    """No check refuses a default, and every script checks the shared fields (time budget, training fields)."""
    for task_name in tasks.TASKS:
        task = tasks.script(task_name).TASK
        checked = {name for _, name, *_ in _checked(task_name)}
        shared = {"max_train_minutes", "learning_rate", "seed", "per_device_train_batch_size", "max_train_samples"}
        assert shared <= checked and len(checked) >= 29, (task_name, shared - checked)
        for cls in (ModelArguments, DataArguments, task.arguments):
            cls()
        task.training_arguments(output_dir=str(tmp_path))
    assert set(BAD) - {"warmup_ratio"} <= {name for t in tasks.TASKS for _, name, *_ in _checked(t)}


@pytest.mark.parametrize("task_name", list(tasks.TASKS))
def test_a_value_outside_every_checked_range_is_refused_naming_the_flag(tmp_path, capsys, task_name):
    task = tasks.script(task_name).TASK
    base = {"dataset_name": "hf_seq/sentiment", "output_dir": str(tmp_path / "out")}
    base.update({name: "x" for name in task.required})  # e.g. source_lang / target_lang
    flags = [arg for key, value in base.items() for arg in (f"--{key}", value)]
    for cls, name, value, allowed, choices in _checked(task_name):
        recipe = tmp_path / f"{name}.json"
        recipe.write_text(json.dumps({**base, name: value}))
        with pytest.raises(RecipeError) as raised:
            parse_args(task, [str(recipe)])
        assert str(raised.value) == f"recipe {recipe}: `{name}` must be {allowed}, got {value!r}"
        argv = [*flags, f"--{name}", *([str(v) for v in value] if isinstance(value, list) else [str(value)])]
        if choices:  # the command line's value is argparse's to refuse: a line naming the flag and the choices
            with pytest.raises(SystemExit, match="2"):
                parse_args(task, argv)
            error = capsys.readouterr().err
            assert f"error: argument --{name}" in error and f"invalid choice: '{value}'" in error, error
        else:
            with pytest.raises(RecipeError, match=rf"^command line: `{name}` must be {re.escape(allowed)}, got "):
                parse_args(task, argv)
        if name != "tokenizer_kind":  # the same check, on a dataclass built in Python
            kwargs = {"output_dir": str(tmp_path)} if "output_dir" in cls.__dataclass_fields__ else {}
            with pytest.raises(ValueError, match=rf"^`{name}` must be "):
                cls(**kwargs, **{name: value})


def test_a_script_narrows_the_tokenizer_kinds():
    """``tokenizer_kind`` takes only the kinds the script builds."""
    with pytest.raises(RecipeError, match=r"command line: `tokenizer_kind` must be one of \['word', 'wordpiece'\]"):
        parse_args(tasks.script("classifier").TASK, ["--dataset_name", "hf_seq/sentiment", "--tokenizer_kind", "char"])
