"""Tiny DeepSpeed ZeRO training runs for tests/test_deepspeed.py: ``torchrun --nproc_per_node 2
tests/deepspeed_driver.py ...`` (CPU, gloo, DeepSpeed's CPU accelerator) or one plain process (the reference on the
same global batch).

The families, models and rows of tests/fsdp_driver.py (fixed lengths, the same number of loss tokens in every
process's share of a global batch, dropout off, sequential sampler). Each run: ``HfSeqTrainer`` with Trainer's own
``deepspeed`` argument (``configs/accelerate/deepspeed_zero{2,3}.json``, its ``auto`` values filled by Trainer, no
``optimizer`` block: Trainer's AdamW) when there are several processes, 4 steps of 4 rows, a checkpoint at step 2,
the final folder written by ``save_run``. ``report_dir/<family>.json`` gets each process's share of the parameters
and of the optimizer state (elements of AdamW's ``exp_avg``), and ``<family>_logits.pt`` the trained model's logits on
a probe batch (computed by the DeepSpeed engine on every process).

    python tests/deepspeed_driver.py REPORT_DIR OUT_ROOT FAMILY[,FAMILY...] STAGE
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fsdp_driver import Rows, build_model, probe_batch, rows, write_report  # noqa: E402
from hf_seq.train_scripts.run_folder import run_training, save_run  # noqa: E402
from hf_seq.train_scripts.trainer import HfSeqTrainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEPS, GLOBAL_BATCH = 4, 4


def innermost_optimizer(optimizer):
    """The torch optimizer under accelerate's and DeepSpeed's wrappers (ZeRO keeps its fp32 partition there)."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


class Report(TrainerCallback):
    """After the last step: this process's parameter elements (ZeRO-3: its partition) and optimizer-state elements."""

    def __init__(self):
        self.info = {}

    def on_train_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        params = list(model.parameters())
        self.info = {
            "params_local": sum((p.ds_tensor if hasattr(p, "ds_tensor") else p).numel() for p in params),
            "params_total": sum(getattr(p, "ds_numel", p.numel()) for p in params),
            "optimizer_state_local": sum(
                s["exp_avg"].numel() for s in innermost_optimizer(optimizer).state.values() if "exp_avg" in s
            ),
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report_dir")
    parser.add_argument("out_root")
    parser.add_argument("families")
    parser.add_argument("stage", type=int, choices=(2, 3))
    cli = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")  # as the train scripts do without CUDA
    torch.set_num_threads(1)
    report_dir = Path(cli.report_dir)
    config = ROOT / "configs" / "accelerate" / f"deepspeed_zero{cli.stage}.json"
    for family in cli.families.split(","):
        args = TrainingArguments(
            output_dir=str(Path(cli.out_root) / family),
            per_device_train_batch_size=GLOBAL_BATCH // world,
            max_steps=STEPS,
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            logging_steps=1,
            save_strategy="steps",
            save_steps=2,
            save_total_limit=1,
            train_sampling_strategy="sequential",
            report_to="none",
            disable_tqdm=True,
            seed=0,
            deepspeed=str(config) if world > 1 else None,
            use_cpu=world == 1,
        )
        report = Report()
        trainer = HfSeqTrainer(
            model=build_model(family), args=args, train_dataset=Rows(rows(family)), callbacks=[report]
        )
        run_training(trainer, args)
        trainer.model_wrapped.eval()
        with torch.no_grad():
            logits = trainer.model_wrapped(**probe_batch(family)).logits  # the engine, on every process
        save_run(trainer, args.output_dir, {"family": family}, command="tests/deepspeed_driver.py")
        info = {**report.info, "engine": type(trainer.model_wrapped).__name__}
        write_report(trainer, report_dir, family, info, logits, world)


if __name__ == "__main__":
    main()
