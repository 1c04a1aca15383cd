"""Helpers shared by the training scripts: JSON recipes with command-line overrides, a wall-clock budget, results.

Every script is ``python train_scripts/<task>.py configs/<recipe>.json [--field value ...]`` and runs unchanged under
``accelerate launch`` / ``torchrun``: the recipe gives the defaults of the script's dataclasses
(``HfArgumentParser``), the command line overrides any of them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

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
    """Stop training once a time budget is spent, then evaluate as usual.

    ``max_minutes`` counts the wall-clock time spent inside training steps (evaluation and saving excluded);
    ``max_cpu_minutes`` counts the CPU time of this process over the same steps (all its threads together, so with one
    thread it is core-minutes: on a shared machine it says what compute a run got, the wall clock does not). Either
    may be ``None``. ``train_seconds`` / ``train_cpu_seconds`` / ``stopped_by_budget`` are read by the scripts."""

    def __init__(self, max_minutes: float | None = None, max_cpu_minutes: float | None = None) -> None:
        self.max_seconds = None if max_minutes is None else 60.0 * max_minutes
        self.max_cpu_seconds = None if max_cpu_minutes is None else 60.0 * max_cpu_minutes
        self.train_seconds = 0.0
        self.train_cpu_seconds = 0.0
        self.stopped_by_budget = False
        self._t0: tuple[float, float] | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        if self._t0 is not None:
            self.train_seconds += time.perf_counter() - self._t0[0]
            self.train_cpu_seconds += time.process_time() - self._t0[1]
            self._t0 = None
        over_wall = self.max_seconds is not None and self.train_seconds >= self.max_seconds
        over_cpu = self.max_cpu_seconds is not None and self.train_cpu_seconds >= self.max_cpu_seconds
        if over_wall or over_cpu:
            self.stopped_by_budget = True
            control.should_training_stop = True
            control.should_evaluate = True
            control.should_save = args.save_strategy != "no"  # a checkpoint only for runs that keep them
        return control


def write_results(
    output_dir: str | os.PathLike, results: dict[str, Any], name: str = "results.json", command: str | None = None
) -> Path:
    """Write ``results`` (plus the command line) as JSON into ``output_dir`` atomically; returns the path.

    ``command`` defaults to :func:`command_line`; scripts pass ``training_command(__file__, argv)`` so that the results
    file and the model card record the same command (also when ``main(argv)`` is called from Python)."""
    path = Path(output_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": command or command_line(), **results}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(
        json.dumps(payload, indent=2, sort_keys=True, default=str, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------------------------------------------
# multi-process on CPU, resume + atomic final save, model-card command (every train script)
# ---------------------------------------------------------------------------------------------------------------


def use_cpu_processes_without_gpu() -> None:
    """Make ``torchrun --nproc_per_node N`` / ``accelerate launch --multi_gpu --num_processes N`` train data-parallel
    on a machine without a GPU (gloo).

    Without this, transformers' ``TrainingArguments`` (5.x) asks accelerate for a GPU backend, finds none and falls back
    to NO distribution with only a warning: every process then trains alone on the whole data set and they all write
    the same output folder. Setting ``ACCELERATE_USE_CPU`` before the arguments are parsed selects MULTI_CPU (gloo).
    Call it first in ``main()``; it changes nothing for single-process runs or when a GPU is present.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def training_command(script_file: str, argv: list[str] | None) -> str:
    """The command line to record in the model card: the real one, or ``python <script> <argv>`` when ``main(argv)``
    was called from Python (tests, notebooks)."""
    if argv is None:
        return command_line()
    script = Path(script_file).resolve()
    try:
        script = script.relative_to(Path.cwd())
    except ValueError:
        pass
    return shlex.join(["python", str(script), *argv])


def checkpoint_is_complete(path: str | os.PathLike) -> bool:
    """True if ``path`` is a Trainer checkpoint whose writing finished: weights, config and a readable
    ``trainer_state.json`` (Trainer writes that file last, after model, optimizer, scheduler and RNG states)."""
    path = Path(path)
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    has_weights = any((path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json"))
    return has_weights and (path / "config.json").is_file()


def resolve_resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """The checkpoint ``--resume_from_checkpoint`` asks for.

    ``last`` / ``true`` = the newest COMPLETE ``checkpoint-N`` in ``output_dir`` (a checkpoint whose writing was cut
    off by a kill is skipped, unlike ``Trainer``'s own ``True``), or a fresh start if there is none yet — so the same
    command can be re-run after a crash. A path must be a complete checkpoint (``ValueError`` naming what is missing).
    """
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false", "none"):
        return None
    if str(value).lower() in ("last", "true"):
        root = Path(training_args.output_dir)
        candidates = sorted(
            (p for p in root.glob(f"{PREFIX_CHECKPOINT_DIR}-*") if p.name.split("-")[-1].isdigit()),
            key=lambda p: int(p.name.split("-")[-1]),
            reverse=True,
        )
        for candidate in candidates:
            if checkpoint_is_complete(candidate):
                return str(candidate)
        print(f"resume_from_checkpoint={value}: no complete checkpoint in {root}, starting from scratch")
        return None
    if not Path(value).is_dir():
        raise ValueError(f"`resume_from_checkpoint` {value!r} is not a directory")
    if not checkpoint_is_complete(value):
        raise ValueError(
            f"`resume_from_checkpoint` {value!r} is not a complete Trainer checkpoint (needs config.json, "
            "model.safetensors and a readable trainer_state.json; its writing was probably interrupted)"
        )
    return str(value)


def save_final_model(trainer: Trainer, output_dir: str | os.PathLike) -> None:
    """Save model + tokenizer (+ modelling code, ``auto_map``) + ``trainer_state.json`` into ``output_dir`` so that
    a kill at any moment never leaves a half-written file there.

    Everything is written into ``output_dir/.save-tmp`` first (``Trainer.save_model`` writes in place), then each file
    is moved over with ``os.replace`` (atomic on one file system), ``config.json`` last: a file in ``output_dir`` is
    always either the complete old or the complete new version, and checkpoints are never touched. Call it on every
    process (FSDP / DeepSpeed gather the weights collectively); only the main process writes.
    """
    output_dir = Path(output_dir)
    staging = output_dir / ".save-tmp"
    main = trainer.is_world_process_zero()
    if main and staging.exists():
        shutil.rmtree(staging)  # left over from a run killed while saving
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(staging))
    if main:
        trainer.state.save_to_json(str(staging / "trainer_state.json"))  # the loss history (log_history)
        files = sorted((p for p in staging.iterdir() if p.is_file()), key=lambda p: p.name == "config.json")
        for path in files:
            with open(path, "rb") as f:
                os.fsync(f.fileno())
            os.replace(path, output_dir / path.name)
        shutil.rmtree(staging)
    trainer.accelerator.wait_for_everyone()
