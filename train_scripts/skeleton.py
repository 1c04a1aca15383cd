"""The run skeleton every train script follows, so that a script's ``main`` reads data -> tokenizer -> model ->
metrics -> card:

* :func:`parse_script_args` — processes (gloo on a machine without a GPU), the recipe and flags, the command to record;
* :func:`start_script_run` — the run folder (:func:`~hf_seq.train_scripts.common.start_run`: a finished run asked to
  resume returns its results), logging, torch's threads, the seed;

and each script ends with :func:`~hf_seq.train_scripts.common.save_run` (results, card, model; every process).
"""

from __future__ import annotations

import logging
import os
from typing import NamedTuple

import torch
from hf_seq.train_scripts.arguments import Task, parse_args
from hf_seq.train_scripts.common import start_run, training_command, use_cpu_processes_without_gpu
from transformers import set_seed

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ScriptArguments(NamedTuple):
    model_args: object
    data_args: object
    args: object
    training_args: object
    command: str  # what results.json and the model card record


def parse_script_args(
    task: Task, argv: list[str] | None, script_file: str, command_prefix: list[str] | None
) -> ScriptArguments:
    """The prologue's first half, before anything is read: processes, the checked arguments, the command."""
    use_cpu_processes_without_gpu()
    model_args, data_args, args, training_args = parse_args(task, argv)
    return ScriptArguments(
        model_args, data_args, args, training_args, training_command(script_file, argv, command_prefix)
    )


def start_script_run(
    training_args,
    *,
    results_name: str = "results.json",
    configure_logging: bool = False,
    threads: int | None = None,
) -> dict | None:
    """The prologue's second half: the run folder, then (unless the run is already finished: its results are
    returned, the script returns them unchanged) INFO logging if ``configure_logging``, ``threads`` torch threads if
    given, and the seed. None for a run that goes on."""
    previous = start_run(training_args, results_name=results_name)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    if configure_logging:
        logging.basicConfig(format=LOG_FORMAT, level=logging.INFO)
    if threads:
        torch.set_num_threads(threads)
    set_seed(training_args.seed)
    return None


def env_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a number of threads (None if unset or empty)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    return int(threads) if threads else None
