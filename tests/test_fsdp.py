"""FSDP2 on CPU: two ``torchrun`` processes (gloo) train BERT masked LM, the Transformer, the recurrent causal LM and
the RNN seq2seq translator with Trainer's own FSDP arguments (tests/fsdp_driver.py: ``fsdp_config`` version 2, the units of
``_no_split_modules``, sharded checkpoints), and ``accelerate launch --config_file configs/accelerate/fsdp.yaml`` runs
a train script sharded.

Each family: per-step losses equal one process on the same global batch (|diff| <= 1e-5), each process holds half of
the parameters, the checkpoints are the processes' shards, the final folder is one ordinary ``save_pretrained`` folder
that ``AutoModel*.from_pretrained`` loads in one process and that gives the logits the sharded model gave; a run
killed with SIGKILL after a checkpoint and resumed ends with weights equal to the uninterrupted run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import assert_same_outputs
from launchers import (
    BEST_MODEL_RECIPE,
    assert_every_process_ends_on_the_best_checkpoint,
    free_port,
    launch_failure,
    losses,
    torchrun,
)
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "fsdp_driver.py"
FAMILIES = ("bert_mlm", "transformer", "rnn_lm", "rnn_seq2seq")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The sharded run of every family (2 processes) and, meanwhile, the one-process reference."""
    root = tmp_path_factory.mktemp("fsdp")
    families = ",".join(FAMILIES)
    sharded = subprocess.Popen(
        torchrun(str(DRIVER), str(root / "report"), str(root / "fsdp"), families),
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    single = subprocess.run(
        [sys.executable, str(DRIVER), str(root / "report_single"), str(root / "single"), families],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log, _ = sharded.communicate(timeout=600)
    assert single.returncode == 0, single.stderr[-5000:]
    assert sharded.returncode == 0, launch_failure(log)
    return root


@pytest.mark.parametrize("family", FAMILIES)
def test_fsdp2_losses_equal_one_process_and_each_process_holds_half(runs, family):
    single, sharded = losses(runs / "single" / family), losses(runs / "fsdp" / family)
    assert [s for s, _ in single] == [s for s, _ in sharded] == [1, 2, 3, 4]
    for (step, a), (_, b) in zip(single, sharded):
        assert abs(a - b) <= 1e-5, (family, step, a, b)
    assert len({round(loss, 5) for _, loss in single}) > 1  # the steps differ

    processes = json.loads((runs / "report" / f"{family}.json").read_text())
    assert len(processes) == 2 and processes[0]["total"] == processes[1]["total"]
    total = processes[0]["total"]
    for process in processes:  # dim-0 shards: half, up to the rounding of odd first dimensions
        assert abs(process["local"] - total / 2) <= 0.02 * total, (family, process)
    assert sum(p["local"] for p in processes) >= total
    assert json.loads((runs / "report_single" / f"{family}.json").read_text())[0]["local"] == total


def test_every_process_destroys_its_process_group_before_its_teardown(runs):
    """HfSeqTrainer has the process group destroyed at exit, whoever made the trainer (here a driver that never calls
    it): gloo's threads left to the interpreter's teardown can end a finished worker with SIGABRT."""
    for rank in (0, 1):
        assert json.loads((runs / "report" / f"exit_rank{rank}.json").read_text()) == {"process_group_destroyed": True}


@pytest.mark.parametrize("family", FAMILIES)
def test_fsdp2_checkpoints_are_shards_and_the_final_folder_is_plain(runs, family):
    from fsdp_driver import probe_batch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    import hf_seq  # noqa: F401

    out = runs / "fsdp" / family
    for step in (2, 4):
        shards = out / f"checkpoint-{step}" / "pytorch_model_fsdp_0"
        assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
        assert not (out / f"checkpoint-{step}" / "model.safetensors").exists()  # no gathered copy per checkpoint
    # one ordinary folder: the modelling code (not torch's FSDP sources) and plain weights, loaded in this process
    assert not list(out.glob("_fsdp*.py")) and list(out.glob("modeling_*.py"))
    auto = {
        "bert_mlm": AutoModelForMaskedLM,
        "transformer": AutoModelForSeq2SeqLM,
        "rnn_lm": AutoModelForCausalLM,
        "rnn_seq2seq": AutoModelForSeq2SeqLM,
    }
    model = auto[family].from_pretrained(out).eval()
    assert not type(model).__name__.startswith("FSDP")
    with torch.no_grad():
        logits = model(**probe_batch(family)).logits
    assert_same_outputs(logits, torch.load(runs / "report" / f"{family}_logits.pt"))  # the sharded model's logits


@pytest.mark.parametrize(
    "family",
    [
        "bert_mlm",
        pytest.param("transformer", marks=pytest.mark.slow(reason="two more 2-process launches, ~25 s")),
        pytest.param("rnn_lm", marks=pytest.mark.slow(reason="two more 2-process launches, ~25 s")),
        pytest.param("rnn_seq2seq", marks=pytest.mark.slow(reason="two more 2-process launches, ~25 s")),
    ],
)
def test_fsdp2_sigkill_after_a_checkpoint_then_resume_equals_the_uninterrupted_run(runs, family, tmp_path):
    report, out = tmp_path / "report", tmp_path / "out"
    killed = subprocess.run(
        torchrun(str(DRIVER), str(report), str(out), family, "--kill_at", "3"),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode != 0 and "SIGKILL" in killed.stdout + killed.stderr
    assert (out / family / "checkpoint-2").is_dir() and not (out / family / "checkpoint-4").exists()
    resumed = subprocess.run(
        torchrun(str(DRIVER), str(report), str(out), family, "--resume"),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, launch_failure(resumed.stdout + resumed.stderr)
    ours, uninterrupted = (
        load_file(out / family / "model.safetensors"),
        load_file(runs / "fsdp" / family / "model.safetensors"),
    )
    assert ours.keys() == uninterrupted.keys()
    for name in ours:
        assert torch.equal(ours[name], uninterrupted[name]), name
    assert losses(out / family) == losses(runs / "fsdp" / family)  # steps 1-2 from the checkpoint, 3-4 retrained


def test_accelerate_launch_with_the_fsdp_config_shards_a_train_script(tmp_path):
    """The repository's config, as documented, on this CPU machine: sharded checkpoints, not DDP's full copies."""
    text = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n" * 8
    for name, part in (("train", text), ("valid", text[:200]), ("test", text[200:400])):
        (tmp_path / f"{name}.txt").write_text(part)
    out = tmp_path / "lm"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs/accelerate/fsdp.yaml"),
        "--main_process_port",
        str(free_port()),
        str(ROOT / "train_scripts/train_lm.py"),
        *("--level", "char", "--output_dir", str(out), "--segment_length", "16"),
        *("--train_file", str(tmp_path / "train.txt"), "--validation_file", str(tmp_path / "valid.txt")),
        *("--test_file", str(tmp_path / "test.txt")),
        *("--model_config", '{"hidden_size": 8, "embedding_size": 8, "num_hidden_layers": 2}'),
        *("--per_device_train_batch_size", "4", "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"),
        *("--eval_strategy", "no", "--report_to", "none", "--sample_length", "5", "--sample_temperatures", "1.0"),
        *("--eval_streams", "2", "--disable_tqdm", "true"),
    ]
    run = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    shards = out / "checkpoint-2" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in shards.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert "Reducer" not in run.stdout + run.stderr  # no DDP
    results = json.loads((out / "results.json").read_text())
    assert results["train_steps"] == 4 and results["train_tokens_seen"] == 4 * 4 * 2 * 16  # 2 processes
    from transformers import AutoModelForCausalLM

    import hf_seq  # noqa: F401

    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "RNNForCausalLM"


@pytest.mark.data
def test_accelerate_launch_fsdp_load_best_model_at_end_every_process_ends_on_the_best_checkpoint(tmp_path):
    """``accelerate launch --config_file configs/accelerate/fsdp.yaml`` of a ``load_best_model_at_end`` recipe runs
    to its end (it used to wait forever: the processes disagreed about the best checkpoint, one sat in
    ``load_fsdp_model``'s barrier, the other in ``evaluate()``'s all-gather); every process loads the same sharded
    best checkpoint and ends with its weights, which the final folder holds."""
    out, report = tmp_path / "out", tmp_path / "report"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *("--config_file", str(ROOT / "configs/accelerate/fsdp.yaml"), "--mixed_precision", "no"),
        *("--main_process_port", str(free_port())),
        str(ROOT / "tests" / "run_driver.py"),
        *("classifier", *BEST_MODEL_RECIPE, "--output_dir", str(out)),
    ]
    env = {**ENV, "HF_SEQ_TEST_REPORT": str(report)}
    run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    best = assert_every_process_ends_on_the_best_checkpoint(report, out)
    assert (out / best / "pytorch_model_fsdp_0").is_dir()  # FSDP's own sharded checkpoint
    assert "Reducer" not in run.stdout + run.stderr  # no DDP


REFUSE = """
import os, sys
from transformers import TrainingArguments
sys.path.insert(0, {tests!r})
import fsdp_driver as D
args = TrainingArguments(output_dir={out!r}, report_to="none", use_cpu=True, fsdp=True, fsdp_config={{"version": 2}})
try:
    D.HfSeqTrainer(model=D.build_model("rnn_lm"), args=args, train_dataset=D.Rows(D.rows("rnn_lm")))
except ValueError as error:
    print("REFUSED:", error)
"""


def test_fsdp_in_one_process_is_refused_not_ignored(tmp_path):
    code = REFUSE.format(tests=str(ROOT / "tests"), out=str(tmp_path))
    run = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert "REFUSED: FSDP was requested" in run.stdout and "single process" in run.stdout, run.stdout + run.stderr


def test_a_recipe_turns_fsdp_on_with_true(tmp_path):
    """``fsdp`` is annotated ``str | None`` in TrainingArguments but takes ``true`` (as the bare ``--fsdp`` flag)."""
    from hf_seq.train_scripts import train_lm
    from hf_seq.train_scripts.arguments import parse_args

    recipe = tmp_path / "fsdp.json"
    config = {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "SHARDED_STATE_DICT"}
    (tmp_path / "train.txt").write_text("some text\n")
    recipe.write_text(json.dumps({"fsdp": True, "fsdp_config": config, "train_file": str(tmp_path / "train.txt")}))
    training_args = parse_args(train_lm.TASK, [str(recipe), "--output_dir", str(tmp_path / "out")])[3]
    assert training_args.fsdp_plugin_args["fsdp_version"] == 2
    assert training_args.fsdp_plugin_args["state_dict_type"] == "SHARDED_STATE_DICT"
