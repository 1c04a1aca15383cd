"""Data-parallel training on CPU: ``torchrun --nproc_per_node 2`` (gloo) of train_scripts/train_classifier.py logs the
same per-step losses, and ends with the same weights, as one process on the same global batch (4 x 2 = 8 x 1).

Equal logged losses show the loss is neither multiplied by the number of processes (``accepts_loss_kwargs``) nor
computed on duplicated data (each process really gets its half of every global batch)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from launchers import (
    BEST_MODEL_RECIPE,
    assert_every_process_ends_on_the_best_checkpoint,
    launch_failure,
    losses,
    torchrun,
)
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "run_driver.py"
ENV_RUN = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}

STEPS = 4
COMMON = [
    str(ROOT / "configs/sentiment_bilstm.json"),
    "--max_train_samples",
    "64",
    "--max_eval_samples",
    "16",
    "--max_predict_samples",
    "16",
    "--max_steps",
    str(STEPS),
    "--logging_steps",
    "1",
    "--save_strategy",
    "steps",
    "--save_steps",
    str(STEPS),
    "--eval_strategy",
    "no",
    "--load_best_model_at_end",
    "false",
    "--train_sampling_strategy",
    "random",
    "--config_overrides",
    "hidden_size=8,embedding_size=8",
    "--learning_rate",
    "0.01",
    "--disable_tqdm",
    "true",
]


@pytest.mark.data
def test_two_processes_log_the_same_losses_as_one_process_on_the_same_global_batch(tmp_path):
    ddp_dir, single_dir = tmp_path / "ddp", tmp_path / "single"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    command = torchrun(
        str(ROOT / "train_scripts/train_classifier.py"),
        *COMMON,
        "--output_dir",
        str(ddp_dir),
        "--per_device_train_batch_size",
        "4",
    )
    ddp = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    from hf_seq.train_scripts import train_classifier  # the single-process reference runs here meanwhile

    train_classifier.main([*COMMON, "--output_dir", str(single_dir), "--per_device_train_batch_size", "8"])
    log, _ = ddp.communicate(timeout=600)
    assert ddp.returncode == 0, launch_failure(log)

    single, parallel = losses(single_dir), losses(ddp_dir)
    assert [s for s, _ in single] == [s for s, _ in parallel] == list(range(1, STEPS + 1))
    for (step, a), (_, b) in zip(single, parallel):
        assert abs(a - b) <= 1e-5, (step, a, b)
    assert len({round(loss, 6) for _, loss in single}) > 1  # the batches differ from step to step

    # the final weights agree too, and nothing saved carries DDP's `module.` prefix
    reference = load_file(single_dir / "model.safetensors")
    for folder in (ddp_dir, ddp_dir / f"checkpoint-{STEPS}"):
        weights = load_file(folder / "model.safetensors")
        assert not [k for k in weights if k.startswith("module.")]
        assert weights.keys() == reference.keys()
        for name, tensor in weights.items():
            torch.testing.assert_close(tensor, reference[name], atol=1e-5, rtol=0, msg=name)
    # every process wrote its own RNG state into the checkpoint (needed for an exact resume under torchrun)
    assert {p.name for p in (ddp_dir / f"checkpoint-{STEPS}").glob("rng_state_*.pth")} == {
        "rng_state_0.pth",
        "rng_state_1.pth",
    }
    card = (ddp_dir / "README.md").read_text()
    assert "| processes | 2 |" in card and "| processes | 1 |" in (single_dir / "README.md").read_text()


def test_trainer_does_not_pass_loss_kwargs_to_any_head(tmp_path):
    """No hf_seq head normalises its loss by ``num_items_in_batch``, so Trainer must not hand it one (with it, DDP
    would scale the loss by the number of processes): every head's forward-with-**kwargs sets
    ``accepts_loss_kwargs = False``."""
    from tiny_models import ALL_HEADS, tiny_model
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    for _, head in ALL_HEADS:
        trainer = Trainer(model=tiny_model(head, 30), args=args)
        assert trainer.model_accepts_loss_kwargs is False, head.__name__


def test_torchrun_two_processes_of_train_lm_share_the_work_and_write_one_card(tmp_path):
    """Smoke test of the wiring in another script (no corpus needed: own text files): under ``torchrun`` on CPU the run
    is really data-parallel (``world_size`` 2, so the tokens seen per step double), rank 0 alone writes results.json
    and the model card, and the final model has no ``module.`` prefix."""
    text = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n" * 8
    files = []
    for name, part in (("train", text), ("valid", text[:200]), ("test", text[200:400])):
        (tmp_path / f"{name}.txt").write_text(part)
        files.append(str(tmp_path / f"{name}.txt"))
    out = tmp_path / "lm"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    command = torchrun(
        str(ROOT / "train_scripts/train_lm.py"),
        "--level",
        "char",
        "--train_file",
        files[0],
        "--validation_file",
        files[1],
        "--test_file",
        files[2],
        "--output_dir",
        str(out),
        "--model_config",
        '{"hidden_size": 8, "embedding_size": 8}',
        "--segment_length",
        "16",
        "--per_device_train_batch_size",
        "4",
        "--max_steps",
        "2",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--sample_length",
        "5",
        "--sample_temperatures",
        "1.0",
        "--eval_streams",
        "2",
        "--disable_tqdm",
        "true",
    )
    run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    results = json.loads((out / "results.json").read_text())
    assert results["train_steps"] == 2
    assert results["train_tokens_seen"] == 2 * 4 * 2 * 16  # steps x per-device batch x 2 processes x segment
    assert "train_lm.py" in results["command"]
    card = (out / "README.md").read_text()
    assert "| processes | 2 |" in card and "RNNForCausalLM" in card and "train_lm.py" in card
    assert not [k for k in load_file(out / "model.safetensors") if k.startswith("module.")]
    assert not (out.parent / f".{out.name}.saving").exists()


@pytest.mark.data
def test_torchrun_load_best_model_at_end_every_process_ends_on_the_best_checkpoint(tmp_path):
    """``load_best_model_at_end`` under torchrun DDP: every process holds the same ``best_model_checkpoint`` (a final
    ``checkpoint-N``, not the staging folder it was written in) and loads it, so all end with the saved best weights
    (the run's last evaluation, on every process, is of the best model)."""
    out, report = tmp_path / "out", tmp_path / "report"
    env = {**ENV_RUN, "HF_SEQ_TEST_REPORT": str(report)}
    command = torchrun(str(DRIVER), "classifier", *BEST_MODEL_RECIPE, "--output_dir", str(out))
    run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    best = assert_every_process_ends_on_the_best_checkpoint(report, out)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"] == str(out / best)
    assert not (out / ".checkpoint-staging").exists()
