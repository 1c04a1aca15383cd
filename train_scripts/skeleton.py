"""The run skeleton every train script follows, so that a script's ``main`` reads data -> tokenizer -> model ->
metrics -> card:

* :func:`parse_script_args` — processes (gloo on a machine without a GPU; ``accelerate launch --cpu --num_processes N``
  refused; each worker ends with its launcher; ``ddp_timeout`` bounding every collective), the recipe and flags, the
  command to record;
* :func:`start_script_run` — the run folder (:func:`~hf_seq.train_scripts.run_folder.start_run`: its lock, held by
  the first process until the run ends, recovery, resume; a finished run asked to resume returns its results),
  logging, torch's threads, the seed;
* :func:`budgeted_trainer` — the script's ``Trainer`` with the time budget (``max_train_minutes`` /
  ``max_train_cpu_minutes``) as its first callback;
* :func:`after_training` — what can fail after training (test decoding with an exported engine, plots, a model
  card) runs after the trained model is saved (:func:`~hf_seq.train_scripts.run_folder.save_run`), and a failure there is
  one logged line that leaves the model and the results gathered so far in ``output_dir``;
* :func:`finish_script_run` — the epilogue: the final folder written whole (model, results, card, files:
  :func:`~hf_seq.train_scripts.run_folder.save_run`, on every process), then the script's summary on the first process;
  the folder's lock is released.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import NamedTuple

import torch
from hf_seq.train_scripts.arguments import Task, parse_args
from hf_seq.train_scripts.common import TimeBudgetCallback, training_command, use_cpu_processes_without_gpu
from hf_seq.train_scripts.processes import (
    check_cpu_launch,
    end_with_launcher,
    set_collective_timeout,
)
from hf_seq.train_scripts.run_folder import save_run, start_run, unlock_output_dirs
from transformers import set_seed

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
logger = logging.getLogger("hf_seq.train_scripts")


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
    check_cpu_launch()
    end_with_launcher()
    use_cpu_processes_without_gpu()
    model_args, data_args, args, training_args = parse_args(task, argv)
    set_collective_timeout(training_args.ddp_timeout)
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


def budgeted_trainer(trainer_class, model, training_args, args, *, callbacks=(), **kwargs):
    """``(trainer, budget)``: ``trainer_class(model=model, args=training_args, callbacks=[budget, *callbacks],
    **kwargs)`` with ``budget`` the :class:`~hf_seq.train_scripts.common.TimeBudgetCallback` of the script's
    ``max_train_minutes`` / ``max_train_cpu_minutes`` (``args``; its ``stopped_by_budget`` and training seconds go into
    the results)."""
    budget = TimeBudgetCallback(args.max_train_minutes, args.max_train_cpu_minutes)
    return trainer_class(model=model, args=training_args, callbacks=[budget, *callbacks], **kwargs), budget


def after_training(what: str, step: Callable, *args, results: dict, output_dir, **kwargs):
    """``step(*args, **kwargs)``, a step that runs after the model is saved (test decoding, a plot, a model card):
    an exception it raises becomes one logged line naming ``what`` and the error, and is recorded in ``results``
    under ``failed_after_training``; the run goes on to write the rest. Returns what ``step`` returned, or None."""
    try:
        return step(*args, **kwargs)
    except Exception as error:
        text = " ".join(str(error).split())[:300] or type(error).__name__
        logger.warning(
            "%s failed after training (%s: %s); the model and the other results are kept in %s",
            what,
            type(error).__name__,
            text,
            output_dir,
        )
        results.setdefault("failed_after_training", []).append(
            {"step": what, "error": f"{type(error).__name__}: {text}"}
        )
        return None


def finish_script_run(
    trainer,
    training_args,
    results: dict,
    command: str,
    *,
    card: dict | None = None,
    files: dict | None = None,
    results_name: str = "results.json",
    save_model: bool = True,
    report: Callable[[dict], None] | None = None,
) -> dict:
    """The epilogue every ``Trainer`` script ends with; returns ``results`` (what ``main`` returns).

    :func:`~hf_seq.train_scripts.run_folder.save_run` writes ``output_dir`` whole — the model, tokenizer and code (unless
    ``save_model`` is false: an evaluation adds its results beside the folder's model), ``trainer_state.json``,
    ``results_name`` (``results``), the model card (``card``: None for none) and ``files`` — called on every process
    (FSDP / DeepSpeed gather the weights together; only the first process writes). Then ``report(results)`` (the
    script's summary on stdout or the log) on the world's first process only."""
    save_run(
        trainer,
        training_args.output_dir,
        results,
        command,
        card=card,
        files=files,
        results_name=results_name,
        save_model=save_model,
    )
    if report is not None and trainer.is_world_process_zero():
        report(results)
    unlock_output_dirs()
    return results


def env_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a number of threads (None if unset or empty)."""
    threads = os.environ.get("OMP_NUM_THREADS")
    return int(threads) if threads else None
