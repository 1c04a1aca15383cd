"""Kill-and-resume: train_scripts/train_classifier.py killed with SIGKILL mid-epoch (after a checkpoint exists, and
while it writes the next one) resumes with ``--resume_from_checkpoint last`` and ends with weights EQUAL to an
uninterrupted run with the same seed (dropout and word dropout on, so the RNG states must be restored too), and with
the same whole-run training loss in ``results.json``. A finished run re-run with ``--resume_from_checkpoint last``
does nothing; ``--overwrite_output_dir`` trains it again. A full disk is an ``OSError`` naming the folder and its free
space. (Every kill point of the final save: tests/test_atomic_outputs.py.)"""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hf_seq.train_scripts import run_folder, train_classifier
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.data

# 48 samples / batch 4 = 12 steps per epoch; 20 steps = 1 epoch + 8 steps; checkpoints at 8 and 16 (both mid-epoch)
COMMON = [
    str(ROOT / "configs/sentiment_bilstm.json"),
    "--max_train_samples",
    "48",
    "--max_eval_samples",
    "8",
    "--max_predict_samples",
    "8",
    "--per_device_train_batch_size",
    "4",
    "--max_steps",
    "20",
    "--save_strategy",
    "steps",
    "--save_steps",
    "8",
    "--save_total_limit",
    "3",
    "--eval_strategy",
    "no",
    "--load_best_model_at_end",
    "false",
    "--logging_steps",
    "4",
    "--config_overrides",
    "hidden_size=8,embedding_size=8,dropout=0.3",
    "--word_dropout",
    "0.5",
    "--disable_tqdm",
    "true",
]

# Runs train_classifier.py as a script and SIGKILLs the process at a chosen moment (no cleanup code can run).
KILLER = textwrap.dedent(
    """
    import os, runpy, signal, sys
    import transformers
    from transformers.trainer_callback import TrainerState
    moment, value = sys.argv[1], int(sys.argv[2])
    if moment == "step":  # in the middle of a training step, after the forward pass
        original_step = transformers.Trainer.training_step
        def training_step(self, *args, **kwargs):
            if self.state.global_step == value:
                os.kill(os.getpid(), signal.SIGKILL)
            return original_step(self, *args, **kwargs)
        transformers.Trainer.training_step = training_step
    elif moment == "checkpoint":  # while checkpoint-<value> is written: weights + optimizer there, trainer_state not
        original_save = TrainerState.save_to_json
        def save_to_json(self, path):
            if f"checkpoint-{value}" in str(path):
                os.kill(os.getpid(), signal.SIGKILL)
            return original_save(self, path)
        TrainerState.save_to_json = save_to_json
    elif moment == "final":  # after the final model was written to the staging folder, before it is swapped in
        original_save_model = transformers.Trainer.save_model
        def save_model(self, output_dir=None, _internal_call=False):
            original_save_model(self, output_dir, _internal_call)
            if str(output_dir).endswith(".saving"):
                os.kill(os.getpid(), signal.SIGKILL)
        transformers.Trainer.save_model = save_model
    sys.argv = sys.argv[3:]
    sys.path.insert(0, os.path.dirname(sys.argv[0]))  # as `python train_scripts/x.py` would (PYTHONPATH: the root)
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


def run_killed(moment: str, value: int, args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-c", KILLER, moment, str(value), str(ROOT / "train_scripts/train_classifier.py"), *args]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr[-4000:])
    return result


def final_weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), (name, (a[name] - b[name]).abs().max())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("resume") / "uninterrupted"
    train_classifier.main([*COMMON, "--output_dir", str(out)])
    return out


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted_run(uninterrupted, tmp_path):
    out = tmp_path / "killed"
    run_killed("step", 13, [*COMMON, "--output_dir", str(out)])  # dies in step 14 (epoch 2), checkpoint-8 exists
    assert run_folder.checkpoint_is_complete(out / "checkpoint-8")
    assert not (out / "checkpoint-16").exists() and not (out / "model.safetensors").exists()

    train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert_same_weights(final_weights(out), final_weights(uninterrupted))
    resumed_log = json.loads((out / "trainer_state.json").read_text())["log_history"]
    full_log = json.loads((uninterrupted / "trainer_state.json").read_text())["log_history"]
    assert [r["loss"] for r in resumed_log if "loss" in r and r["step"] > 8] == [
        r["loss"] for r in full_log if "loss" in r and r["step"] > 8
    ]
    # the loss over the whole run (8 steps before the kill + 12 after), not over the 12 resumed steps only
    assert results(out)["train_loss"] == pytest.approx(results(uninterrupted)["train_loss"], rel=1e-6)
    every_step = [r["loss"] for r in full_log if "loss" in r]  # 5 records, 4 steps each
    assert results(out)["train_loss"] == pytest.approx(sum(every_step) / len(every_step), rel=1e-6)
    resumed_only = [r["loss"] for r in resumed_log if "loss" in r and r["step"] > 8]
    assert abs(results(out)["train_loss"] - sum(resumed_only) / len(resumed_only)) > 1e-4  # what Trainer reports
    assert [r["train_loss"] for r in resumed_log if "train_loss" in r] == [results(out)["train_loss"]]  # agrees


def test_kill_while_writing_a_checkpoint_resumes_from_the_last_complete_one(uninterrupted, tmp_path):
    """A checkpoint is written in a staging folder and renamed when complete: a kill while writing checkpoint-16
    leaves no ``checkpoint-16`` at all (Trainer alone would leave a half-written one for ``last`` to pick)."""
    out = tmp_path / "killed_in_save"
    run_killed("checkpoint", 16, [*COMMON, "--output_dir", str(out)])
    partial = out / ".checkpoint-staging" / "checkpoint-16"
    assert (partial / "model.safetensors").is_file() and not (partial / "trainer_state.json").exists()
    assert not (out / "checkpoint-16").exists() and run_folder.checkpoint_is_complete(out / "checkpoint-8")

    train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])  # from 8
    assert_same_weights(final_weights(out), final_weights(uninterrupted))
    assert not (out / ".checkpoint-staging").exists()
    # the final checkpoint is the same as the uninterrupted run's, and points at its final folder name
    state = json.loads((out / "checkpoint-20" / "trainer_state.json").read_text())
    assert state["global_step"] == 20 and ".checkpoint-staging" not in json.dumps(state)
    assert_same_weights(load_file(out / "checkpoint-20" / "model.safetensors"), final_weights(uninterrupted))


def test_a_checkpoint_replacing_an_older_runs_one_is_never_a_mix(uninterrupted, tmp_path):
    """A run writing checkpoint-16 into a folder holding another run's checkpoint-16, killed while it writes: the old
    one stays whole (Trainer alone overwrites it file by file: new weights beside the old trainer_state.json)."""
    out = tmp_path / "reused"
    shutil.copytree(uninterrupted / "checkpoint-16", out / "checkpoint-16")
    before = {p.name: p.read_bytes() for p in (out / "checkpoint-16").iterdir()}
    other_run = ["--learning_rate", "0.05", "--seed", "7"]
    run_killed("checkpoint", 16, [*COMMON, *other_run, "--output_dir", str(out)])
    assert {p.name: p.read_bytes() for p in (out / "checkpoint-16").iterdir()} == before


def test_kill_during_the_final_save_keeps_the_previous_model_intact(uninterrupted, tmp_path):
    """Killed after the new model is staged, before the swap: the folder still holds the previous run's complete
    final folder and its checkpoints; the next run (any script start) cleans the staging folder up."""
    out = tmp_path / "final"
    shutil.copytree(uninterrupted, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    short = [*COMMON, "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "no"]
    run_killed("final", 0, short)
    staging = tmp_path / ".final.saving"
    assert (staging / "model.safetensors").is_file()  # the new model was written, but only there
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    train_classifier.main(short)
    assert not staging.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert not torch.equal(final_weights(out)["classifier.weight"], final_weights(uninterrupted)["classifier.weight"])
    assert {c.name for c in out.glob("checkpoint-*")} == {"checkpoint-8", "checkpoint-16", "checkpoint-20"}  # kept


def test_resume_of_a_finished_run_does_nothing(uninterrupted, tmp_path, capsys):
    """Trainer resumed from the final checkpoint trains one step past max_steps and overwrites the model; here the
    run is recognised as finished: nothing runs, nothing is written, the recorded results are returned."""
    out = tmp_path / "finished"
    shutil.copytree(uninterrupted, out)
    files = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}
    returned = train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert "finished at step 20: nothing to resume" in capsys.readouterr().out
    assert returned == results(uninterrupted)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()} == files


def test_overwrite_output_dir_trains_a_finished_run_again(uninterrupted, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(uninterrupted, out)
    (out / "checkpoint-8" / "marker").write_text("from the first run")
    flags = ["--output_dir", str(out), "--resume_from_checkpoint", "last", "--overwrite_output_dir", "true"]
    train_classifier.main([*COMMON, *flags])
    assert not (out / "checkpoint-8" / "marker").exists()  # the old checkpoints were removed first
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 20
    assert_same_weights(final_weights(out), final_weights(uninterrupted))  # same seed, from scratch


def test_resume_from_the_final_checkpoint_trains_no_step(uninterrupted, tmp_path):
    """Killed during the final save after the last checkpoint (step 20 = max_steps, mid-epoch): the resume evaluates
    and saves without training a 21st step."""
    out = tmp_path / "no_final"
    out.mkdir()
    for checkpoint in uninterrupted.glob("checkpoint-*"):
        shutil.copytree(checkpoint, out / checkpoint.name)
    returned = train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert returned["train_steps"] == 20
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 20
    assert_same_weights(final_weights(out), final_weights(uninterrupted))
    assert returned["train_loss"] == pytest.approx(results(uninterrupted)["train_loss"], rel=1e-6)


@pytest.fixture
def file_size_limit(monkeypatch):
    """``limit(n)``: from now on no file of this process may grow past n bytes (a write beyond fails like one on a
    full disk: the real writers' real errors); undone after the test."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of a signal

    def limit(n: int) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))

    yield limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, handler)


def test_a_full_disk_while_writing_a_checkpoint_names_the_folder_and_free_space(tmp_path, monkeypatch, file_size_limit):
    """torch.save fails with ``RuntimeError: [enforce fail at inline_container.cc:...]`` (no word about space)."""
    import transformers

    original = transformers.Trainer._save_optimizer_and_scheduler

    def save_optimizer(self, output_dir):
        file_size_limit(1000)  # the optimizer state is larger
        original(self, output_dir)

    monkeypatch.setattr(transformers.Trainer, "_save_optimizer_and_scheduler", save_optimizer)
    out = tmp_path / "full"
    with pytest.raises(
        OSError,
        match=r"checkpoint checkpoint-8 to \S*/full failed: [0-9.]+ [KMGT]?i?B\S* free on its file system \(a full disk",
    ) as error:
        train_classifier.main([*COMMON, "--output_dir", str(out)])
    assert error.value.errno == errno.ENOSPC and "inline_container" in str(error.value.__cause__)
    assert not (out / "checkpoint-8").exists()


def test_a_full_disk_during_the_final_save_keeps_the_folder(uninterrupted, tmp_path, monkeypatch, file_size_limit):
    import transformers

    out = tmp_path / "full_final"
    shutil.copytree(uninterrupted, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    original = transformers.Trainer.save_model

    def save_model(self, output_dir=None, _internal_call=False):
        if str(output_dir).endswith(".saving"):
            file_size_limit(1000)  # the weights and the modelling code are larger
        original(self, output_dir, _internal_call)

    monkeypatch.setattr(transformers.Trainer, "save_model", save_model)
    short = [*COMMON, "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "no"]
    with pytest.raises(OSError, match=r"the final model to \S*/full_final failed: [0-9.]+ \S+ free") as error:
        train_classifier.main(short)
    cause = error.value.__cause__  # the first file over the limit: a code file copied, or the weights
    assert error.value.errno == errno.ENOSPC and "File too large" in str(cause) and str(cause)[:60] in str(error.value)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # the previous run, whole
    assert not (tmp_path / ".full_final.saving").exists()
