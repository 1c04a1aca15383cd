"""``hf-seq-train <task> [recipe] [--field value ...]``: every train script behind one command.

Installed by ``pip install hf-seq`` (``[project.scripts]``, through ``hf_seq_cli.train``, which answers ``--help`` and
``--list-recipes`` without importing torch), so the scripts run without a clone; ``python -m
hf_seq.train_scripts <task> ...`` is the same (and works under ``torchrun -m`` / ``accelerate launch -m``). The task name is
the script's (``classifier`` = ``train_scripts/train_classifier.py``); the rest of the command line is the script's.
A recipe is a JSON file or the name of a shipped recipe (:mod:`hf_seq.train_scripts.recipes`);
``hf-seq-train <task> --list-recipes`` lists the task's shipped recipes.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path

from hf_seq.train_scripts.errors import RUN, RecipeError
from hf_seq.train_scripts.tasks import ALIASES, DEFAULT_RECIPES, TASKS, script

USAGE = f"""usage: hf-seq-train <task> [recipe] [--field value ...]

tasks: {", ".join(TASKS)}
recipe: a JSON file, or the name of a shipped recipe (`hf-seq-train <task> --list-recipes` lists them). Without one,
the defaults are those of the task's default recipe (its model and training settings; the data is yours:
--train_file ... or --dataset_name):
{chr(10).join(f"  {task:<14}{recipe}" for task, recipe in DEFAULT_RECIPES.items())}
`hf-seq-train <task> --help` lists every field of that task (docs/training.md describes them); `hf-seq-data fetch`
installs the corpora of the dataset presets (--dataset_name hf_seq/sentiment, ...).
A mistake in the recipe, a flag or the data is one line `hf-seq-train: error: ...` (exit status 2); `--debug` (or
HF_SEQ_DEBUG=1) shows its traceback."""


# ---------------------------------------------------------------------------------------------------------------
# the one place where a user's mistake becomes one line (hf-seq-train, python -m, python train_scripts/<script>.py)
# ---------------------------------------------------------------------------------------------------------------
def _is_user_error(error: BaseException) -> bool:
    """A mistake in the recipe, the flags, the paths or the data (``RecipeError``, ``DataError``), not a bug."""
    data = sys.modules.get("hf_seq.toolkit.data")
    kinds = tuple(k for k in (RecipeError, getattr(data, "DataError", None)) if k)
    return isinstance(error, kinds)


def _release_run_folder() -> None:
    """Release the output-folder lock a refused run took (:mod:`hf_seq.train_scripts.run_folder`, if it was imported)."""
    run_folder = sys.modules.get("hf_seq.train_scripts.run_folder")
    if run_folder is not None:
        run_folder.unlock_output_dirs()


def _debug_wanted(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("HF_SEQ_DEBUG", "").lower() not in ("", "0", "false", "no")


def report_user_errors(prog: str) -> Callable:
    """Decorate a ``main(argv=None)``: a :class:`~hf_seq.train_scripts.arguments.RecipeError` or
    :class:`~hf_seq.toolkit.data.DataError` it raises is printed as ``<prog>: error: <message>`` on one line to stderr and
    the call returns 2 (argparse's status for a usage error), without a traceback; ``--debug`` (removed from the
    arguments) or ``HF_SEQ_DEBUG=1`` re-raises it with its traceback. Other exceptions (bugs) keep their traceback.
    An interrupt (Ctrl-C) ends with one line: where the last checkpoint is and the command that resumes (status 130)."""

    def decorate(main: Callable) -> Callable:
        @functools.wraps(main)
        def wrapper(argv: list[str] | None = None):
            args = list(sys.argv[1:] if argv is None else argv)
            debug = _debug_wanted(args)
            if "--debug" in args:
                args = [arg for arg in args if arg != "--debug"]
                if argv is None:  # main() reads sys.argv itself (and records it as the command)
                    sys.argv[1:] = args
            RUN.clear()  # the run this call starts (an interrupt names its checkpoint), not an earlier one
            try:
                return main(None if argv is None else args)
            except KeyboardInterrupt:
                if debug:
                    raise
                from hf_seq.train_scripts.run_folder import interrupted_line  # torch-free until a run has started

                print(f"{prog}: {interrupted_line()}", file=sys.stderr)
                return 130  # a shell's status for a command ended by SIGINT
            except ValueError as error:
                if debug or not _is_user_error(error):
                    raise
                _release_run_folder()  # a refused run leaves no lock behind
                print(f"{prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
                return 2

        return wrapper

    return decorate


def run_script(main: Callable) -> int:
    """``python train_scripts/<script>.py ...``: the script's ``main()`` under :func:`report_user_errors`, named as
    argparse names it (the script's file name); the exit status."""
    status = report_user_errors(Path(sys.argv[0]).name)(main)()
    return status if isinstance(status, int) else 0


@report_user_errors("hf-seq-train")
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name = ALIASES.get(argv[0], argv[0])
    if name not in TASKS:
        print(f"hf-seq-train: error: unknown task {argv[0]!r}; the tasks are {', '.join(TASKS)}", file=sys.stderr)
        return 2
    if "--list-recipes" in argv[1:]:
        from hf_seq.train_scripts.recipes import list_recipes

        print(list_recipes(name))
        return 0
    sys.argv = [f"hf-seq-train {name}", *argv[1:]]  # argparse's usage line
    # the command that results.json and the model card record
    script(name).main(argv[1:], command_prefix=["hf-seq-train", name])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
