"""``training_curves.png`` in every run folder: the training and evaluation loss, the task's metric and the learning rate
against the optimizer step, drawn from the trainer state (``trainer_state.json``'s ``log_history``).

The train scripts' ``Trainer`` (:class:`hf_seq.train_scripts.trainer.HfSeqTrainerMixin`) draws it wherever it saves a
model: into each checkpoint while that is still being written, and into the final run folder before it is swapped in
(so the image is part of the checkpoint or run it describes, never written into a finished one). Drawing comes after
the model is saved and never costs it: without matplotlib the run says so in one line (once) and goes on; any other
failure to draw is one line too.
"""

from __future__ import annotations

import json
import logging
import os

logger = logging.getLogger(__name__)

CURVES_FILE = "training_curves.png"
# evaluation entries that are bookkeeping, not a figure of the model
_NOT_METRICS = ("loss", "runtime", "samples_per_second", "steps_per_second", "epoch", "step")


def curve_data(state: dict | str | os.PathLike, metric: str | None = None) -> dict[str, list[tuple[int, float]]]:
    """The curves of a ``trainer_state.json`` (its path or its dict): ``{"train_loss", "eval_loss", "learning_rate",
    <metric>: [(step, value), ...]}``.

    ``metric``: the evaluation figure to draw (with or without its ``eval_`` prefix, e.g. ``metric_for_best_model``);
    None takes the first evaluation figure logged that is not the loss or a speed. A run without evaluation has no
    ``eval_loss`` / metric entries (empty lists)."""
    if not isinstance(state, dict):
        with open(state, encoding="utf-8") as handle:
            state = json.load(handle)
    history = state.get("log_history", [])
    if metric is None:
        metric = next(
            (key for entry in history for key in entry if key.startswith("eval_") and key[5:] not in _NOT_METRICS),
            None,
        )
    elif not metric.startswith("eval_"):
        metric = f"eval_{metric}"
    curves: dict[str, list[tuple[int, float]]] = {"train_loss": [], "eval_loss": [], "learning_rate": []}
    if metric is not None:
        curves[metric] = []
    for entry in history:
        step = entry.get("step")
        if step is None:
            continue
        if "loss" in entry:
            curves["train_loss"].append((step, float(entry["loss"])))
        if "learning_rate" in entry:
            curves["learning_rate"].append((step, float(entry["learning_rate"])))
        if "eval_loss" in entry:
            curves["eval_loss"].append((step, float(entry["eval_loss"])))
        if metric is not None and isinstance(entry.get(metric), (int, float)):
            curves[metric].append((step, float(entry[metric])))
    return curves


def plot_training_curves(state: dict | str | os.PathLike, path: str | os.PathLike, metric: str | None = None) -> str:
    """Save :func:`training_curves_figure` as a PNG; returns the path. ``ImportError`` without matplotlib."""
    training_curves_figure(state, metric).savefig(str(path), dpi=100)
    return str(path)


def training_curves_figure(state: dict | str | os.PathLike, metric: str | None = None):
    """The curves of :func:`curve_data` as a matplotlib figure of three panels: loss (training and evaluation), the
    metric, the learning rate, against the step. ``ImportError`` without matplotlib."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    curves = curve_data(state, metric)
    metric_name = next((key for key in curves if key.startswith("eval_") and key != "eval_loss"), None)
    fig = Figure(figsize=(13, 3.8))
    loss_ax, metric_ax, lr_ax = fig.subplots(1, 3)
    for key, label in (("train_loss", "training"), ("eval_loss", "evaluation")):
        if curves[key]:
            steps, values = zip(*curves[key])
            loss_ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=label)
    loss_ax.set_title("loss")
    if curves["train_loss"] or curves["eval_loss"]:  # a run saved before its first logged loss has no line to name
        loss_ax.legend(loc="upper right", fontsize=8)
    metric_ax.set_title(metric_name[5:] if metric_name else "metric (none logged)")
    if metric_name and curves[metric_name]:
        steps, values = zip(*curves[metric_name])
        metric_ax.plot(steps, values, marker="o", markersize=3, color="tab:green")
    if curves["learning_rate"]:
        steps, values = zip(*curves["learning_rate"])
        lr_ax.plot(steps, values, color="tab:red")
    lr_ax.set_title("learning rate")
    for ax in (loss_ax, metric_ax, lr_ax):
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


_said_no_matplotlib = False  # the one line of a process without matplotlib is said once


def write_training_curves(state, folder: str | os.PathLike, metric: str | None = None) -> str | None:
    """Draw ``training_curves.png`` of ``state`` (a ``TrainerState``, the dict of a ``trainer_state.json`` or its path)
    into ``folder``; returns its path, or None where it was not drawn. Never raises: without matplotlib the process
    says so once in one line, any other failure to draw is one line each time."""
    global _said_no_matplotlib
    if hasattr(state, "log_history"):
        state = {"log_history": state.log_history}
    try:
        return plot_training_curves(state, os.path.join(folder, CURVES_FILE), metric)
    except ImportError:
        if not _said_no_matplotlib:
            logger.warning("%s not drawn: matplotlib is not installed (pip install matplotlib)", CURVES_FILE)
            _said_no_matplotlib = True
    except Exception as error:  # drawing must never cost the run what it saved
        logger.warning("%s not drawn: %s: %s", CURVES_FILE, type(error).__name__, error)
    return None
