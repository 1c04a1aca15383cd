"""training_curves.png in every run folder and checkpoint (hf_seq.train_scripts.curves), and --report_to tensorboard /
trackio leaving their local files, on a tiny classifier run over own csv files."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys

import pytest
from hf_seq.train_scripts import train_classifier
from hf_seq.train_scripts.curves import CURVES_FILE, curve_data, training_curves_figure, write_training_curves
from own_data import flags, reviews, write_splits

pytest.importorskip("matplotlib")

TINY_RUN = [
    *("--text_column_name", "review", "--label_column_name", "stars"),
    *("--model_config", '{"hidden_size": 8, "embedding_size": 8}', "--per_device_train_batch_size", "8"),
    *("--max_steps", "4", "--logging_steps", "1", "--disable_tqdm", "true"),
    *("--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "steps", "--save_steps", "2"),
]

STATE = {
    "log_history": [
        {"loss": 2.0, "learning_rate": 1e-3, "epoch": 0.5, "step": 1},
        {"loss": 1.5, "learning_rate": 5e-4, "epoch": 1.0, "step": 2},
        {"eval_loss": 1.7, "eval_accuracy": 0.4, "eval_runtime": 0.1, "eval_samples_per_second": 9.0, "step": 2},
        {"train_runtime": 3.0, "train_loss": 1.75, "step": 2},
    ]
}


def run_classifier(tmp_path, *extra: str):
    files = write_splits(
        tmp_path / "data", ".csv", {"train": reviews(24), "validation": reviews(8, start=24), "test": reviews(8, 32)}
    )
    out = tmp_path / "run"
    train_classifier.main([*flags(files), *TINY_RUN, *extra, "--output_dir", str(out)])
    return out


def test_curve_data_reads_the_log_history():
    curves = curve_data(STATE)
    assert curves == {
        "train_loss": [(1, 2.0), (2, 1.5)],
        "eval_loss": [(2, 1.7)],
        "learning_rate": [(1, 1e-3), (2, 5e-4)],
        "eval_accuracy": [(2, 0.4)],
    }
    assert "eval_f1" in curve_data(STATE, metric="f1")  # metric_for_best_model names the panel, logged or not
    assert list(curve_data({"log_history": [{"loss": 1.0, "step": 1}]})) == ["train_loss", "eval_loss", "learning_rate"]


def test_a_short_run_draws_its_curves_from_trainer_state(tmp_path):
    out = run_classifier(tmp_path, "--report_to", "none")
    for folder in (out, *sorted(out.glob("checkpoint-*"))):
        assert (folder / CURVES_FILE).read_bytes()[:4] == b"\x89PNG", folder
    state = json.loads((out / "trainer_state.json").read_text())
    curves = curve_data(out / "trainer_state.json")
    assert [step for step, _ in curves["train_loss"]] == [1, 2, 3, 4]
    assert [step for step, _ in curves["eval_loss"]][:2] == [2, 4]
    assert curves["eval_loss"][0][1] == next(e["eval_loss"] for e in state["log_history"] if "eval_loss" in e)
    figure = training_curves_figure(state)
    loss, metric, rate = figure.axes[:3]
    assert (loss.get_title(), metric.get_title(), rate.get_title()) == ("loss", "accuracy", "learning rate")
    assert [tuple(map(tuple, line.get_xydata())) for line in loss.lines] == [
        tuple(curves["train_loss"]),
        tuple(curves["eval_loss"]),
    ]
    assert tuple(map(tuple, metric.lines[0].get_xydata())) == tuple(curves["eval_accuracy"])
    assert tuple(map(tuple, rate.lines[0].get_xydata())) == tuple(curves["learning_rate"])


def test_without_matplotlib_one_line_and_the_run_is_kept(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    monkeypatch.setattr("hf_seq.train_scripts.curves._said_no_matplotlib", False)
    with caplog.at_level(logging.WARNING, logger="hf_seq.train_scripts.curves"):
        out = run_classifier(tmp_path, "--report_to", "none")
    said = [r.getMessage() for r in caplog.records if r.name == "hf_seq.train_scripts.curves"]
    assert said == [f"{CURVES_FILE} not drawn: matplotlib is not installed (pip install matplotlib)"]
    assert (out / "model.safetensors").is_file() and (out / "results.json").is_file()
    assert not list(out.rglob(CURVES_FILE))


def test_a_failure_to_draw_is_one_line(tmp_path, caplog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no room")

    monkeypatch.setattr("hf_seq.train_scripts.curves.plot_training_curves", broken)
    with caplog.at_level(logging.WARNING, logger="hf_seq.train_scripts.curves"):
        assert write_training_curves(STATE, tmp_path) is None
    assert [r.getMessage() for r in caplog.records] == [f"{CURVES_FILE} not drawn: RuntimeError: no room"]


def test_report_to_tensorboard_writes_event_files(tmp_path):
    pytest.importorskip("tensorboard", reason="the tracking extra is not installed")
    out = run_classifier(tmp_path, "--report_to", "tensorboard")
    events = list((out / "runs").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)


@pytest.mark.slow  # a process of its own: ~20 s
def test_report_to_trackio_keeps_a_local_project(tmp_path):
    pytest.importorskip("trackio", reason="the tracking extra is not installed")
    files = write_splits(tmp_path / "data", ".csv", {"train": reviews(24), "validation": reviews(8, start=24)})
    # trackio reads TRACKIO_DIR when it is imported: a process of its own
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "hf_seq.train_scripts", "classifier", *flags(files), *TINY_RUN]
    command += ["--report_to", "trackio", "--project", "hf-seq-tiny", "--output_dir", str(tmp_path / "run")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(tmp_path / "trackio" / "hf-seq-tiny.db") as connection:
        logged = [json.loads(row[0]) for row in connection.execute("select metrics from metrics")]
    assert any("train/loss" in entry for entry in logged) and any("eval/accuracy" in entry for entry in logged)
