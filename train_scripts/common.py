"""Helpers shared by the training scripts: JSON recipes with command-line overrides, a wall-clock budget, results.

Every script is ``python train_scripts/<task>.py configs/<recipe>.json [--field value ...]`` and runs unchanged under
``accelerate launch`` / ``torchrun``: the recipe gives the defaults of the script's dataclasses
(``HfArgumentParser``), the command line overrides any of them.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser, TrainerCallback

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(REPO_ROOT))


def parse_recipe_args(dataclass_types: tuple, argv: list[str] | None = None) -> tuple:
    """Parse ``[recipe.json] [--field value ...]`` into the given dataclasses.

    The JSON recipe (first argument, optional) sets defaults; command-line flags override them. Unknown recipe keys
    raise ``ValueError`` naming them.
    """
    parser = HfArgumentParser(dataclass_types)
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].endswith(".json"):
        recipe_path = Path(argv.pop(0))
        if not recipe_path.is_file():
            raise FileNotFoundError(f"Recipe file {recipe_path} does not exist.")
        recipe = json.loads(recipe_path.read_text())
        recipe.pop("_comment", None)
        known = {action.dest for action in parser._actions}
        unknown = sorted(set(recipe) - known)
        if unknown:
            raise ValueError(f"Recipe {recipe_path} has unknown fields {unknown}.")
        parser.set_defaults(**recipe)
        for action in parser._actions:
            if action.dest in recipe:
                action.required = False
    return parser.parse_args_into_dataclasses(args=argv)


def command_line() -> str:
    """The command that started this process, for results files and model cards."""
    launcher = os.environ.get("ACCELERATE_LAUNCH_COMMAND") or ""
    cmd = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, *sys.argv])
    return f"{launcher} {cmd}".strip()


class TimeBudgetCallback(TrainerCallback):
    """Stop training once ``max_minutes`` of wall-clock training time have passed (then evaluate and save as usual)."""

    def __init__(self, max_minutes: float | None) -> None:
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.start = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.max_seconds is not None and time.monotonic() - self.start >= self.max_seconds:
            control.should_training_stop = True
            control.should_evaluate = True
            control.should_save = True
        return control


def write_results(output_dir: str | os.PathLike, results: dict[str, Any], name: str = "results.json") -> Path:
    """Write ``results`` (plus the command line) as JSON into ``output_dir`` atomically; returns the path."""
    path = Path(output_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": command_line(), **results}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path
