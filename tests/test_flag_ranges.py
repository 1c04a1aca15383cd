"""Every training flag's range or set of values is declared beside its field and enforced by one checker
(``hf_seq.train_scripts.checks.check_allowed``) for every script: this walks each declared range of each script's
parser and gives a value outside it, in a recipe (a value argparse never sees) and to the dataclass itself."""

from __future__ import annotations

import dataclasses
import json
import math
import typing

import pytest
from hf_seq.train_scripts import tasks
from hf_seq.train_scripts.arguments import DataArguments, ModelArguments, parse_args
from hf_seq.train_scripts.checks import ALLOWED, OneOf, Range, check_allowed, declared_allowed
from hf_seq.train_scripts.errors import RecipeError


def _outside(allowed: Range | OneOf, annotation):
    """A value of the field's own type (``annotation``) outside ``allowed``."""
    if isinstance(allowed, OneOf):
        return "not_an_allowed_value"
    if allowed.high != math.inf:
        outside = allowed.high if not allowed.high_in else allowed.high + 1
    else:
        outside = allowed.low - 1 if allowed.low_in else allowed.low
    text = str(annotation)
    if "float" in text:
        outside = float(outside)
    return [outside] if "list" in text else outside


def _declared(task_name: str) -> list[tuple[type, str, Range | OneOf]]:
    task = tasks.script(task_name).TASK
    found = []
    for cls in (ModelArguments, DataArguments, task.arguments, task.training_arguments):
        for name, allowed in declared_allowed(cls).items():
            if name not in task.unused:
                found.append((cls, name, allowed))
    return found


def test_the_ranges_are_declared_beside_the_fields_and_hold_the_defaults(tmp_path):
    """Every script has the shared declarations (the time budgets, the training fields) and its defaults pass."""
    for task_name in tasks.TASKS:
        task = tasks.script(task_name).TASK
        declared = {name for _, name, _ in _declared(task_name)}
        shared = {"max_train_minutes", "max_train_cpu_minutes", "learning_rate", "seed"} - task.unused
        assert "max_train_minutes" in shared and shared <= declared, task_name
        for cls in (ModelArguments, DataArguments, task.arguments):
            check_allowed(cls())
        check_allowed(task.training_arguments(output_dir=str(tmp_path)))
    length = next(f for f in dataclasses.fields(DataArguments) if f.name == "max_seq_length")
    assert isinstance(length.metadata[ALLOWED], Range)  # in the field's metadata, beside it


@pytest.mark.parametrize("task_name", list(tasks.TASKS))
def test_the_one_checker_refuses_a_value_outside_every_declared_range(tmp_path, task_name):
    task = tasks.script(task_name).TASK
    base = {"output_dir": str(tmp_path / "out"), "dataset_name": "hf_seq/sentiment"}
    base.update({name: "x" for name in task.required})  # e.g. source_lang / target_lang
    checked = 0
    for cls, name, allowed in _declared(task_name):
        value = _outside(allowed, typing.get_type_hints(cls)[name])
        assert not allowed.holds(value), (name, value)
        recipe = tmp_path / f"{name}.json"
        recipe.write_text(json.dumps({**base, name: value}))
        with pytest.raises(RecipeError) as raised:
            parse_args(task, [str(recipe)])
        message = str(raised.value)
        assert message.startswith(f"recipe {recipe}: `{name}` must be "), (name, message)
        if name == "tokenizer_kind":  # narrowed to the kinds the script builds
            allowed = OneOf(tuple(task.tokenizer_kinds), null=True)
        assert str(allowed) in message and repr(value) in message, (name, message)
        # the dataclass itself, built in Python, runs the same checker
        kwargs = {"output_dir": str(tmp_path)} if "output_dir" in cls.__dataclass_fields__ else {}
        with pytest.raises(ValueError, match=rf"^`{name}` must be "):
            cls(**kwargs, **{name: value})
        checked += 1
    assert checked >= 25, checked  # the training fields and the script's own


def test_a_script_narrows_a_declared_set():
    """``tokenizer_kind`` is declared with every kind; a script that builds fewer refuses the others."""
    with pytest.raises(RecipeError, match=r"command line: `tokenizer_kind` must be one of \['word', 'wordpiece'\]"):
        parse_args(tasks.script("classifier").TASK, ["--dataset_name", "hf_seq/sentiment", "--tokenizer_kind", "char"])
