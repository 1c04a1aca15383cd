"""Training checkpoints: the rotation Trainer does after a save, on every supported transformers release.

``transformers.trainer_utils.rotate_checkpoints`` exists from 5.6 on; 5.0 has only the method
``Trainer._rotate_checkpoints``, with the same rule (docs/compat.md). The train scripts' atomic checkpoints
(``hf_seq.train_scripts.run_folder``) call :func:`rotate_checkpoints` after moving a finished checkpoint into place.
"""

from __future__ import annotations


def rotate_checkpoints(trainer, output_dir: str) -> None:
    """Delete ``trainer``'s oldest checkpoints in ``output_dir`` beyond ``save_total_limit`` (never the best one), as
    Trainer does after a save: ``transformers.trainer_utils.rotate_checkpoints`` from 5.6 on; 5.0 has only the
    method ``Trainer._rotate_checkpoints``, with the same rule."""
    from transformers import trainer_utils

    if not hasattr(trainer_utils, "rotate_checkpoints"):
        trainer._rotate_checkpoints(use_mtime=True, output_dir=output_dir)
        return
    trainer_utils.rotate_checkpoints(
        output_dir=output_dir,
        save_total_limit=trainer.args.save_total_limit,
        best_model_checkpoint=trainer.state.best_model_checkpoint,
        use_mtime=True,
    )


__all__ = ["rotate_checkpoints"]
