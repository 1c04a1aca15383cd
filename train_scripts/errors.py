"""The user's mistakes that the train scripts report as one line (:func:`hf_seq.train_scripts.cli.report_user_errors`).

Every train_scripts module may import this one: it imports none of them.
"""

from __future__ import annotations

from typing import Any

# the run in progress, for the line an interrupt (Ctrl-C) ends with (hf_seq.train_scripts.run_folder.interrupted_line): ``command`` (the recorded command line) and
# ``output_dir``, set as the run starts (common.training_command, run_folder.start_run)
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
