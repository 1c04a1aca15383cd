"""A train script under a launcher, reporting what each process ends with: ``torchrun ... tests/run_driver.py TASK
ARGS...`` (or ``accelerate launch ... tests/run_driver.py TASK ARGS...``) runs ``hf-seq-train TASK ARGS...`` in every
process, unchanged but for two test hooks set by variables:

* ``HF_SEQ_TEST_REPORT=DIR`` — after the final save, every process writes ``DIR/rank<R>.pt``: its model's full
  weights (FSDP2's shards gathered, ZeRO-3's partitions gathered), its ``best_model_checkpoint`` and last step.
* ``HF_SEQ_TEST_STALL=RANK:STEP`` — process RANK stops answering (sleeps) before training step STEP.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_seq.train_scripts import skeleton, trainer  # noqa: E402
from hf_seq.train_scripts.cli import report_user_errors  # noqa: E402
from hf_seq.train_scripts.tasks import ALIASES, script  # noqa: E402


def full_weights(model) -> dict[str, torch.Tensor]:
    """Every process's view of the whole model (collective under FSDP2 / ZeRO-3: call on every process)."""
    params = list(model.parameters())
    if any(hasattr(p, "ds_id") for p in params):  # DeepSpeed ZeRO-3: gather the partitions
        import deepspeed

        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            return {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {}
    for name, tensor in model.state_dict().items():
        full = getattr(tensor, "full_tensor", None)  # FSDP2's DTensor shards
        out[name] = (full() if full is not None else tensor).detach().clone()
    return out


def report(report_dir: Path):
    save_run = skeleton.save_run

    def save_and_report(trainer_, output_dir, *args, **kwargs):
        save_run(trainer_, output_dir, *args, **kwargs)
        weights = full_weights(trainer_.model)
        report_dir.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "weights": weights,
                "best_model_checkpoint": trainer_.state.best_model_checkpoint,
                "global_step": trainer_.state.global_step,
            },
            report_dir / f"rank{trainer_.args.process_index}.pt",
        )

    skeleton.save_run = save_and_report


def stall(rank: int, step: int):
    def stalling_step(self, *args, **kwargs):
        if self.args.process_index == rank and self.state.global_step + 1 == step:
            print(f"process {rank} stops answering before step {step}", flush=True)
            time.sleep(3600)
        return super(trainer.HfSeqTrainerMixin, self).training_step(*args, **kwargs)

    trainer.HfSeqTrainerMixin.training_step = stalling_step


def main() -> int:
    task, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get("HF_SEQ_TEST_REPORT"):
        report(Path(os.environ["HF_SEQ_TEST_REPORT"]))
    if os.environ.get("HF_SEQ_TEST_STALL"):
        rank, step = (int(v) for v in os.environ["HF_SEQ_TEST_STALL"].split(":"))
        stall(rank, step)
    sys.argv = [f"hf-seq-train {task}", *argv]
    status = report_user_errors("hf-seq-train")(script(ALIASES.get(task, task)).main)(argv)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
