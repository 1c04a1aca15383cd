"""Kill-and-resume: train_scripts/train_classifier.py killed with SIGKILL mid-epoch (after a checkpoint exists, and
while it writes the next one) resumes with ``--resume_from_checkpoint last`` and ends with weights EQUAL to an
uninterrupted run with the same seed (dropout and word dropout on, so the RNG states must be restored too)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from train_scripts import common, train_classifier

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
    elif moment == "final":  # after the final model was written to the staging folder, before it is moved in place
        original_save_model = transformers.Trainer.save_model
        def save_model(self, output_dir=None, _internal_call=False):
            original_save_model(self, output_dir, _internal_call)
            if str(output_dir).endswith(".save-tmp"):
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


def test_sigkill_mid_epoch_then_resume_equals_uninterrupted_run(uninterrupted, tmp_path):
    out = tmp_path / "killed"
    run_killed("step", 13, [*COMMON, "--output_dir", str(out)])  # dies in step 14 (epoch 2), checkpoint-8 exists
    assert common.checkpoint_is_complete(out / "checkpoint-8")
    assert not (out / "checkpoint-16").exists() and not (out / "model.safetensors").exists()

    train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert_same_weights(final_weights(out), final_weights(uninterrupted))
    resumed_log = json.loads((out / "trainer_state.json").read_text())["log_history"]
    full_log = json.loads((uninterrupted / "trainer_state.json").read_text())["log_history"]
    assert [r["loss"] for r in resumed_log if "loss" in r and r["step"] > 8] == [
        r["loss"] for r in full_log if "loss" in r and r["step"] > 8
    ]


def test_kill_while_writing_a_checkpoint_resumes_from_the_last_complete_one(uninterrupted, tmp_path):
    out = tmp_path / "killed_in_save"
    run_killed("checkpoint", 16, [*COMMON, "--output_dir", str(out)])
    partial = out / "checkpoint-16"
    assert (partial / "model.safetensors").is_file() and not (partial / "trainer_state.json").exists()
    assert not common.checkpoint_is_complete(partial)
    with pytest.raises(ValueError, match="checkpoint-16.*not a complete Trainer checkpoint"):
        train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", str(partial)])

    # `last` skips the half-written checkpoint-16 (Trainer's own `True` would pick it and fail) and resumes from 8
    train_classifier.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert_same_weights(final_weights(out), final_weights(uninterrupted))


def test_kill_during_the_final_save_keeps_the_previous_model_intact(uninterrupted, tmp_path):
    """The final save goes through a staging folder: killed before the move, the folder still holds the previous
    complete model (no truncated file); the next run cleans the staging folder up."""
    import shutil

    out = tmp_path / "final"
    shutil.copytree(uninterrupted, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    run_killed("final", 0, [*COMMON, "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "no"])
    assert (out / ".save-tmp" / "model.safetensors").is_file()  # the new model was written, but only there
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert after == before
    train_classifier.main([*COMMON, "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "no"])
    assert not (out / ".save-tmp").exists()
    assert not torch.equal(final_weights(out)["classifier.weight"], final_weights(uninterrupted)["classifier.weight"])
