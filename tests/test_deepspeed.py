"""DeepSpeed ZeRO on CPU: two ``torchrun`` processes (gloo, DeepSpeed's CPU accelerator) train BERT masked LM, the
Transformer and the recurrent causal LM with Trainer's own ``deepspeed`` argument
(``configs/accelerate/deepspeed_zero{2,3}.json``, tests/deepspeed_driver.py), and ``accelerate launch --config_file
configs/accelerate/deepspeed_zero2.yaml`` runs a train script under ZeRO-2.

Each family and stage: per-step losses equal one process on the same global batch (|diff| <= 1e-5); each process
holds half of the optimizer state (ZeRO-3: also half of the parameters); checkpoints are DeepSpeed's, one optimizer
partition per process; the final folder is one ordinary ``save_pretrained`` folder that ``AutoModel*.from_pretrained``
loads in one process, gives the logits the DeepSpeed engine gave and holds the weights of the one-process run.

Skipped without DeepSpeed (``pip install -e '.[deepspeed]'``)."""

from __future__ import annotations

import importlib.util
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

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is not installed (pip install -e '.[deepspeed]': deepspeed==0.19.8, a source archive, no compiler)",
)

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "deepspeed_driver.py"
FAMILIES = ("bert_mlm", "transformer", "rnn_lm")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
STAGES = [3, pytest.param(2, marks=pytest.mark.slow(reason="one more 2-process DeepSpeed launch, ~40 s"))]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("deepspeed")


_LAUNCHES: dict[int, subprocess.Popen] = {}
_RUNS: dict[int, Path] = {}


def launch(root: Path, stage: int) -> None:
    """Start the 2-process ZeRO run of every family (one launch per stage) unless it was started."""
    if stage not in _LAUNCHES:
        out = root / f"zero{stage}"
        _LAUNCHES[stage] = subprocess.Popen(
            torchrun(str(DRIVER), str(out / "report"), str(out), ",".join(FAMILIES), str(stage)),
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.fixture(scope="module")
def single(root, request) -> Path:
    """The one-process reference of every family (no DeepSpeed), run while the ZeRO-3 launch runs."""
    request.addfinalizer(_LAUNCHES.clear)
    request.addfinalizer(_RUNS.clear)
    launch(root, 3)
    out = root / "single"
    run = subprocess.run(
        [sys.executable, str(DRIVER), str(root / "report_single"), str(out), ",".join(FAMILIES), "2"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    return out


@pytest.fixture(scope="module")
def zero(root, single):
    """``zero(stage)``: the folder of the 2-process ZeRO run of every family."""

    def run(stage: int) -> Path:
        if stage not in _RUNS:
            launch(root, stage)
            log, _ = _LAUNCHES[stage].communicate(timeout=600)
            assert _LAUNCHES[stage].returncode == 0, launch_failure(log)
            _RUNS[stage] = root / f"zero{stage}"
        return _RUNS[stage]

    return run


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("family", FAMILIES)
def test_zero_losses_equal_one_process_and_each_process_holds_half(zero, single, stage, family):
    out = zero(stage)
    ours, reference = losses(out / family), losses(single / family)
    assert [s for s, _ in ours] == [s for s, _ in reference] == [1, 2, 3, 4]
    for (step, a), (_, b) in zip(reference, ours):
        assert abs(a - b) <= 1e-5, (family, stage, step, a, b)
    assert len({round(loss, 5) for _, loss in reference}) > 1  # the steps differ

    processes = json.loads((out / "report" / f"{family}.json").read_text())
    assert len(processes) == 2 and all(p["engine"] == "DeepSpeedEngine" and p["world"] == 2 for p in processes)
    total = processes[0]["params_total"]
    alone = json.loads((single.parent / "report_single" / f"{family}.json").read_text())[0]
    assert alone["params_total"] == alone["params_local"] == alone["optimizer_state_local"] == total
    for process in processes:  # ZeRO partitions: half each, up to the padding of a partition
        assert abs(process["optimizer_state_local"] - total / 2) <= 0.02 * total, (family, process)
        if stage == 3:
            assert abs(process["params_local"] - total / 2) <= 0.02 * total, (family, process)
        else:  # ZeRO-2 keeps every parameter on every process
            assert process["params_local"] == total, (family, process)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("family", FAMILIES)
def test_zero_checkpoints_are_partitions_and_the_final_folder_is_plain(zero, single, stage, family):
    from fsdp_driver import probe_batch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM

    import hf_seq  # noqa: F401

    out = zero(stage) / family
    assert not (out / "checkpoint-2").exists()  # save_total_limit=1 rotated it away
    partitions = sorted(p.name for p in (out / "checkpoint-4" / "global_step4").glob("*optim_states.pt"))
    assert partitions == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert (out / "checkpoint-4" / "latest").read_text().strip() == "global_step4"
    assert list(out.glob("modeling_*.py")) and (out / "model.safetensors").is_file()
    auto = {"bert_mlm": AutoModelForMaskedLM, "transformer": AutoModelForSeq2SeqLM, "rnn_lm": AutoModelForCausalLM}
    model = auto[family].from_pretrained(out).eval()
    with torch.no_grad():
        logits = model(**probe_batch(family)).logits
    assert_same_outputs(logits, torch.load(zero(stage) / "report" / f"{family}_logits.pt"))  # the engine's logits
    ours, alone = load_file(out / "model.safetensors"), load_file(single / family / "model.safetensors")
    assert ours.keys() == alone.keys()
    for name in ours:  # four AdamW steps at lr 1e-2 from gradients equal up to float rounding
        assert ours[name].dtype == torch.float32 and ours[name].shape == alone[name].shape, name
        torch.testing.assert_close(ours[name], alone[name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.slow(reason="a 2-process accelerate launch of a train script, ~45 s")
def test_accelerate_launch_with_the_zero2_config_trains_a_script(tmp_path):
    """The repository's config, as documented for CPUs (fp32: ``--mixed_precision no``): ZeRO-2 partitions."""
    text = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n" * 8
    for name, part in (("train", text), ("valid", text[:200]), ("test", text[200:400])):
        (tmp_path / f"{name}.txt").write_text(part)
    out = tmp_path / "lm"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "configs/accelerate/deepspeed_zero2.yaml"),
        "--mixed_precision",
        "no",
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
    partitions = sorted(p.name for p in (out / "checkpoint-2" / "global_step2").glob("*optim_states.pt"))
    assert partitions == ["zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt"]
    assert "Reducer" not in run.stdout + run.stderr  # no DDP
    results = json.loads((out / "results.json").read_text())
    assert results["train_steps"] == 4 and results["train_tokens_seen"] == 4 * 4 * 2 * 16  # 2 processes
    from transformers import AutoModelForCausalLM

    import hf_seq  # noqa: F401

    assert type(AutoModelForCausalLM.from_pretrained(out)).__name__ == "RNNForCausalLM"


def train_lm(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    text = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n" * 8
    for name, part in (("train", text), ("valid", text[:200]), ("test", text[200:400])):
        if not (tmp_path / f"{name}.txt").exists():
            (tmp_path / f"{name}.txt").write_text(part)
    command = torchrun(
        str(ROOT / "train_scripts/train_lm.py"),
        *("--level", "char", "--output_dir", str(out), "--segment_length", "16"),
        *("--train_file", str(tmp_path / "train.txt"), "--validation_file", str(tmp_path / "valid.txt")),
        *("--test_file", str(tmp_path / "test.txt")),
        *("--model_config", '{"hidden_size": 8, "embedding_size": 8, "num_hidden_layers": 2}'),
        *("--per_device_train_batch_size", "4", "--max_steps", "4", "--logging_steps", "1"),
        *("--train_sampling_strategy", "sequential", "--save_strategy", "steps", "--save_steps", "4"),
        *("--eval_strategy", "no", "--report_to", "none", "--sample_length", "5", "--sample_temperatures", "1.0"),
        *("--eval_streams", "2", "--disable_tqdm", "true"),
        *extra,
    )
    run = subprocess.run(command, env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    return run


@pytest.mark.slow(reason="three 2-process launches of a train script, ~2 min")
def test_torchrun_train_script_with_deepspeed_json(tmp_path):
    """``--deepspeed configs/accelerate/deepspeed_zero{2,3}.json`` on a train script: ZeRO-2 logs DDP's losses
    (the same script, processes and batches); ZeRO-3 builds the model partitioned (``deepspeed.zero.Init``, which
    counts the processes only once ``deepspeed.comm`` runs on the gloo group) and trains."""
    train_lm(tmp_path, tmp_path / "ddp")
    train_lm(tmp_path, tmp_path / "zero2", "--deepspeed", str(ROOT / "configs/accelerate/deepspeed_zero2.json"))
    train_lm(tmp_path, tmp_path / "zero3", "--deepspeed", str(ROOT / "configs/accelerate/deepspeed_zero3.json"))
    ddp, zero2 = losses(tmp_path / "ddp"), losses(tmp_path / "zero2")
    assert [s for s, _ in ddp] == [s for s, _ in zero2] == [1, 2, 3, 4]
    for (step, a), (_, b) in zip(ddp, zero2):
        assert abs(a - b) <= 1e-5, (step, a, b)
    for stage in (2, 3):
        global_step = tmp_path / f"zero{stage}" / "checkpoint-4" / "global_step4"
        assert len(list(global_step.glob("*zero_pp_rank_[01]_mp_rank_00_optim_states.pt"))) == 2, stage
    assert len(losses(tmp_path / "zero3")) == 4
    assert len(list((tmp_path / "zero3" / "checkpoint-4" / "global_step4").glob("zero_pp_rank_*_model_states.pt"))) == 2
    from transformers import AutoModelForCausalLM

    import hf_seq  # noqa: F401

    for stage in (2, 3):
        model = AutoModelForCausalLM.from_pretrained(tmp_path / f"zero{stage}")
        assert type(model).__name__ == "RNNForCausalLM"


@pytest.mark.data
def test_torchrun_zero3_load_best_model_at_end_every_process_ends_on_the_best_checkpoint(tmp_path):
    """``--deepspeed configs/accelerate/deepspeed_zero3.json`` under torchrun, a ``load_best_model_at_end`` recipe:
    every process loads the same best checkpoint (DeepSpeed's ``load_checkpoint``, a collective) and ends with its
    weights (ZeRO-3's partitions gathered), which the final folder holds."""
    out, report = tmp_path / "out", tmp_path / "report"
    config = str(ROOT / "configs/accelerate/deepspeed_zero3.json")
    command = torchrun(
        str(ROOT / "tests" / "run_driver.py"),
        *("classifier", *BEST_MODEL_RECIPE, "--output_dir", str(out), "--deepspeed", config),
    )
    env = {**ENV, "HF_SEQ_TEST_REPORT": str(report)}
    run = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, launch_failure(run.stdout + run.stderr)
    best = assert_every_process_ends_on_the_best_checkpoint(report, out)
    assert len(list((out / best).glob("global_step*/zero_pp_rank_*_model_states.pt"))) == 2  # ZeRO-3 partitions


REFUSE = """
import sys
from transformers import TrainingArguments
sys.path.insert(0, {tests!r})
import fsdp_driver as D
from hf_seq.train_scripts.trainer import HfSeqTrainer
args = TrainingArguments(output_dir={out!r}, report_to="none", use_cpu=True, deepspeed={config!r})
try:
    HfSeqTrainer(model=D.build_model("rnn_lm"), args=args, train_dataset=D.Rows(D.rows("rnn_lm")))
except ValueError as error:
    print("REFUSED:", error)
"""


def test_deepspeed_in_one_cpu_process_is_refused_not_ignored(tmp_path):
    config = str(ROOT / "configs/accelerate/deepspeed_zero2.json")
    code = REFUSE.format(tests=str(ROOT / "tests"), out=str(tmp_path), config=config)
    run = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=300)
    assert "REFUSED: DeepSpeed was requested" in run.stdout and "single CPU process" in run.stdout, (
        run.stdout + run.stderr
    )
