"""``Trainer`` / ``Seq2SeqTrainer`` of the train scripts: transformers' own, with checkpoints that appear whole, a clear
error on a full disk, and no step past the end when resumed from the final checkpoint.

* Each checkpoint is written into ``output_dir/.checkpoint-staging/checkpoint-N`` and renamed to ``checkpoint-N``
  once complete (``Trainer`` itself writes in place: a kill leaves a half-written ``checkpoint-N``, and one that
  overwrites an older run's ``checkpoint-N`` mixes the two). ``best_model_checkpoint`` and the rotation by
  ``save_total_limit`` refer to the final names.
* A write that fails for lack of space is an ``OSError`` naming the folder and its free space
  (:func:`train_scripts.outputs.disk_space_errors`), not ``RuntimeError: [enforce fail at inline_container.cc]``.
* Resumed from a checkpoint at ``max_steps``, ``Trainer`` (5.24) trains one more step before it checks the end (when
  the checkpoint is mid-epoch); here such a resume trains nothing and goes straight to the end of training.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from transformers import Seq2SeqTrainer, Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from train_scripts.outputs import CHECKPOINT_STAGING, disk_space_errors, replace_folder


class HfSeqTrainerMixin:
    """The additions above, for any ``Trainer`` subclass (``class MyTrainer(HfSeqTrainerMixin, Trainer)``)."""

    _checkpoint_staging: str | None = None

    def _get_output_dir(self, trial) -> str:
        # while a checkpoint is written (only then), Trainer's run directory is the staging folder
        return self._checkpoint_staging or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / CHECKPOINT_STAGING
        main = self.args.should_save
        if main:
            if staging.exists():
                shutil.rmtree(staging)  # a checkpoint cut off by a kill
            staging.mkdir(parents=True)
        self.accelerator.wait_for_everyone()
        self._checkpoint_staging = str(staging)
        try:
            with disk_space_errors(run_dir, f"checkpoint {name}"):
                super()._save_checkpoint(model, trial)
        finally:
            self._checkpoint_staging = None
        self.accelerator.wait_for_everyone()
        if main:
            with disk_space_errors(run_dir, f"checkpoint {name}"):
                best = self.state.best_model_checkpoint
                if best is not None and Path(best).parent == staging:  # the best is the checkpoint just written
                    self.state.best_model_checkpoint = str(run_dir / Path(best).name)
                    self.state.save_to_json(os.path.join(staging, name, "trainer_state.json"))
                replace_folder(staging / name, run_dir / name)
                shutil.rmtree(staging)
                rotate_checkpoints(
                    output_dir=str(run_dir),
                    save_total_limit=self.args.save_total_limit,
                    best_model_checkpoint=self.state.best_model_checkpoint,
                    use_mtime=True,
                )
        self.accelerator.wait_for_everyone()

    def _run_epoch(self, *args, **kwargs):
        if self.state.global_step >= self.state.max_steps > 0:  # resumed from the last checkpoint: nothing to train
            self.control.should_training_stop = True
            return None
        return super()._run_epoch(*args, **kwargs)


class HfSeqTrainer(HfSeqTrainerMixin, Trainer):
    """``transformers.Trainer`` with :class:`HfSeqTrainerMixin`."""


class HfSeqSeq2SeqTrainer(HfSeqTrainerMixin, Seq2SeqTrainer):
    """``transformers.Seq2SeqTrainer`` with :class:`HfSeqTrainerMixin`."""
