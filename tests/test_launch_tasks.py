"""Every task's shipped recipe under every launcher on 2 CPU processes (gloo), cut to seconds: trained to its end
(a checkpoint and an evaluation every 2 steps, the final save; ``load_best_model_at_end`` where the recipe sets it)
and then resumed from its first checkpoint to a later end. Every process holds the same ``best_model_checkpoint`` and
ends with the weights of the final folder (tests/run_driver.py reports them).

Long (two 2-process launches per task and launcher, about a minute each on 2 shared cores): ``make test-all``."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from launchers import free_port, launch_failure, torchrun
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "run_driver.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
# checkpoints at steps 2 and 4, both kept (a recipe's save_total_limit=1 would keep only the best one) for the resume
STEPS = ("--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2", "--save_total_limit", "3")
STEPS += ("--logging_steps", "1", "--ddp_timeout", "300")  # a hang is an error within 5 minutes
EVAL = ("--eval_strategy", "steps", "--eval_steps", "2")
SAMPLES = ("--max_train_samples", "64", "--max_eval_samples", "16", "--max_predict_samples", "16")
BERT = ("--config_overrides", "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32")

TASKS = {
    "classifier": [
        "configs/sentiment_lstm.json",
        *SAMPLES,
        *EVAL,
        "--config_overrides",
        "hidden_size=8,embedding_size=8",
    ],
    "tagger": [
        "configs/pos_bilstm.json",
        *SAMPLES,
        *EVAL,
        *("--config_overrides", "hidden_size=8,embedding_size=8", "--warmup_steps", "0"),
    ],
    "lm": [
        "configs/lm_char_shakespeare.json",
        *EVAL,
        *("--config_overrides", "hidden_size=8,embedding_size=8", "--segment_length", "16", "--stride", "16"),
        *(
            "--max_eval_tokens",
            "400",
            "--final_eval_max_tokens",
            "400",
            "--eval_streams",
            "2",
            "--sample_length",
            "5",
            "--sample_temperatures",
            "1.0",
        ),
        *("--warmup_steps", "0"),
    ],
    "translation": [
        "configs/translation_rnn_additive.json",
        *SAMPLES,
        *EVAL,
        *(
            "--config_overrides",
            "hidden_size=16,embedding_size=16,max_target_length=12",
            "--tokenizer_vocab_size",
            "400",
        ),
        *(
            "--max_source_length",
            "24",
            "--max_target_length",
            "12",
            "--test_num_beams",
            "1",
            "--plot_attention",
            "false",
        ),
        *("--generation_max_length", "12", "--warmup_steps", "0"),
    ],
    "pretrain_bert": [
        "configs/bert_pretrain_brown.json",
        *BERT,
        *EVAL,
        *("--tokenizer_vocab_size", "400", "--max_seq_length", "32", "--max_eval_samples", "8", "--warmup_steps", "0"),
    ],
    "finetune_bert": [
        "configs/bert_finetune_sentiment.json",
        *SAMPLES,
        *EVAL,
        *("--max_seq_length", "32", "--warmup_steps", "0"),
    ],
}
LAUNCHERS = ["torchrun", "fsdp", "zero3"]


def launch(launcher: str, args: list[str], report: Path) -> subprocess.CompletedProcess:
    if launcher == "fsdp":
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            *("--config_file", str(ROOT / "configs/accelerate/fsdp.yaml"), "--mixed_precision", "no"),
            *("--main_process_port", str(free_port()), str(DRIVER), *args),
        ]
    elif launcher == "zero3":
        command = torchrun(str(DRIVER), *args, "--deepspeed", str(ROOT / "configs/accelerate/deepspeed_zero3.json"))
    else:
        command = torchrun(str(DRIVER), *args)
    env = {**ENV, "HF_SEQ_TEST_REPORT": str(report)}
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1200)


def assert_processes_agree(report: Path, out: Path, step: int) -> None:
    ranks = [torch.load(report / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert [r["global_step"] for r in ranks] == [step, step]
    best = {r["best_model_checkpoint"] for r in ranks}
    assert len(best) == 1, best
    best = best.pop()
    if best is not None:
        assert Path(best).parent == out and Path(best).is_dir(), best
    final = load_file(out / "model.safetensors")
    for name, tensor in final.items():
        for rank, state in enumerate(ranks):
            assert torch.equal(state["weights"][name], tensor), (rank, name)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A tiny pretrained BERT for finetune_bert (one process)."""
    from hf_seq.train_scripts import pretrain_bert

    out = tmp_path_factory.mktemp("pretrained") / "bert"
    pretrain_bert.main(
        [
            str(ROOT / "configs/bert_pretrain_brown.json"),
            *BERT,
            *("--tokenizer_vocab_size", "400", "--max_seq_length", "32", "--output_dir", str(out)),
            *("--max_steps", "2", "--per_device_train_batch_size", "4", "--warmup_steps", "0", "--eval_strategy", "no"),
            *("--max_eval_samples", "8", "--disable_tqdm", "true"),
        ]
    )
    return out


@pytest.mark.slow(reason="two 2-process launches per task and launcher, about a minute each")
@pytest.mark.data
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("task", list(TASKS))
def test_task_recipe_runs_to_the_end_and_resumes_under_the_launcher(task, launcher, tmp_path, request):
    if launcher == "zero3" and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed (pip install -e '.[deepspeed]')")
    out = tmp_path / "out"
    args = [task, *TASKS[task], "--per_device_train_batch_size", "4", "--disable_tqdm", "true"]
    if task == "finetune_bert":
        args += ["--model_name_or_path", str(request.getfixturevalue("pretrained"))]
    first = launch(launcher, [*args, *STEPS, "--output_dir", str(out)], tmp_path / "report1")
    assert first.returncode == 0, launch_failure(first.stdout + first.stderr)
    assert_processes_agree(tmp_path / "report1", out, 4)
    recipe = json.loads((ROOT / TASKS[task][0]).read_text())
    if recipe.get("load_best_model_at_end"):
        state = json.loads((out / "trainer_state.json").read_text())
        assert state["best_model_checkpoint"] is not None
    resumed = launch(
        launcher,
        [
            *args,
            *STEPS,
            "--max_steps",
            "6",
            "--resume_from_checkpoint",
            str(out / "checkpoint-2"),
            "--output_dir",
            str(out),
        ],
        tmp_path / "report2",
    )
    assert resumed.returncode == 0, launch_failure(resumed.stdout + resumed.stderr)
    assert_processes_agree(tmp_path / "report2", out, 6)
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and [r["step"] for r in state["log_history"] if "loss" in r][:2] == [1, 2]
