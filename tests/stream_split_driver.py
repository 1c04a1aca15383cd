"""``torchrun --nproc_per_node 2 tests/stream_split_driver.py <lm|translation> <record_dir> <script argv...>``: runs
the train script's ``main`` and saves the inputs of every training step of this process (its share of the global
batch) to ``<record_dir>/rank<R>.pt``, for tests/test_streaming_split.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from hf_seq.train_scripts import train_lm, train_translation

KEYS = ("input_ids", "attention_mask", "labels")


def main() -> None:
    task, record = sys.argv[1], Path(sys.argv[2])
    module, name = (train_lm, "HfSeqTrainer") if task == "lm" else (train_translation, "HfSeqSeq2SeqTrainer")
    base = getattr(module, name)
    batches: list[dict] = []

    class RecordingTrainer(base):
        def training_step(self, model, inputs, num_items_in_batch=None):
            batches.append({k: v.detach().cpu().clone() for k, v in inputs.items() if k in KEYS})
            return super().training_step(model, inputs, num_items_in_batch)

    setattr(module, name, RecordingTrainer)
    module.main(sys.argv[3:])
    record.mkdir(parents=True, exist_ok=True)
    torch.save(batches, record / f"rank{os.environ.get('RANK', '0')}.pt")


if __name__ == "__main__":
    main()
