"""The user's mistakes that the train scripts report as one line (:func:`hf_seq.train_scripts.cli.report_user_errors`).

Every train_scripts module may import this one: it imports none of them (one function, at an interrupt only).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

# the run in progress, for the line an interrupt (Ctrl-C) ends with: ``command`` (the recorded command line) and
# ``output_dir``, set by hf_seq.train_scripts.common as the run starts
RUN: dict[str, str] = {}


class RecipeError(ValueError):
    """A recipe or command line that cannot run; the message names the file or flag, the key and what is allowed."""


def json_kind(value: Any) -> str:
    """The JSON kind of ``value`` as an error message names it (``a string``, ``a list``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "a JSON object"


def _without_resume(command: str) -> list[str]:
    words = shlex.split(command)
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--resume_from_checkpoint":
            skip = True
        elif not word.startswith("--resume_from_checkpoint="):
            kept.append(word)
    return kept


def interrupted_line() -> str:
    """What an interrupted run says (one line): where its newest complete checkpoint is (step) and the command that
    resumes from it, or that none was written yet and the same command starts again."""
    output_dir, command = RUN.get("output_dir"), RUN.get("command")
    if not output_dir:
        return "interrupted before the run started; nothing was written"
    from hf_seq.train_scripts.outputs import checkpoints  # imports this module: not at the top

    found = checkpoints(output_dir)[:1]  # the one `last` resumes
    newest = (found[0], json.loads((found[0] / "trainer_state.json").read_text())["global_step"]) if found else None
    resume = shlex.join([*_without_resume(command), "--resume_from_checkpoint", "last"]) if command else None
    if newest is None:
        again = f"; run `{shlex.join(_without_resume(command))}` to start again" if command else ""
        return f"interrupted: no checkpoint of this run in {output_dir} yet{again}"
    how = f"; resume with `{resume}`" if resume else "; resume with --resume_from_checkpoint last"
    return f"interrupted: the last checkpoint is {newest[0]} (step {newest[1]}){how}"
