"""While the train scripts' Trainer trains, glibc keeps the memory freed at the top of its heap mapped
(``hf_seq.train_scripts.trainer.keep_heap_resident``): a step's activations, gradients and logits are freed at the end
of every step, and a heap that hands them back to the system faults them in again at the next step, page by page.

Each probe runs in a fresh interpreter (the allocator's settings are per process and cannot be undone): after one step
of ``HfSeqTrainer.train()``, six 20 MB blocks (each below the 32 MiB mmap threshold, together above the 64 MiB that
glibc's dynamic trim rule reaches) are allocated with ``malloc``, written and freed three times, as a step's tensors
are; ``malloc`` itself, so that nothing else allocates between them. The control runs the same step with
``keep_heap_resident`` switched off. Printed: how far the program break fell after the frees (the memory handed back)
and the fewest minor page faults of a later round."""

from __future__ import annotations

import mmap
import os
import platform
import subprocess
import sys

import pytest
from hf_seq.train_scripts.trainer import GLIBC_MALLOC_VARIABLES

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's heap only"
)

PROBE = """
import ctypes, resource

{setup}
libc = ctypes.CDLL(None)
libc.sbrk.argtypes, libc.sbrk.restype = [ctypes.c_ssize_t], ctypes.c_void_p
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
libc.free.argtypes, libc.free.restype = [ctypes.c_void_p], None
size = 20 << 20
falls, faults = [], []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(6)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    top = libc.sbrk(0)
    for block in reversed(blocks):
        libc.free(block)
    falls.append(top - libc.sbrk(0))
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(max(falls), min(faults[1:]))
"""

# one step of HfSeqTrainer.train() on a one-parameter model: what every train script runs
TRAIN_ONE_STEP = """
import torch
from datasets import Dataset
from hf_seq.train_scripts.arguments import HfSeqTrainingArguments
from hf_seq.train_scripts.trainer import HfSeqTrainer


class Scalar(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, input_ids, labels=None, **kwargs):
        return {{"loss": (self.weight * input_ids.float().mean()).square().sum()}}


args = HfSeqTrainingArguments(
    output_dir={output_dir!r}, max_steps=1, per_device_train_batch_size=2, use_cpu=True, report_to="none",
    save_strategy="no", disable_tqdm=True,
)
HfSeqTrainer(model=Scalar(), args=args, train_dataset=Dataset.from_dict({{"input_ids": [[1, 2], [3, 4]]}})).train()
"""

BUFFER_PAGES = 6 * (20 << 20) // mmap.PAGESIZE  # the pages of one round's blocks


def _probe(setup: str) -> tuple[int, int]:
    env = {k: v for k, v in os.environ.items() if k not in GLIBC_MALLOC_VARIABLES and k != "GLIBC_TUNABLES"}
    env["OMP_NUM_THREADS"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    fall, faults = result.stdout.split()[-2:]
    return int(fall), int(faults)


@pytest.mark.slow(reason="two fresh interpreters each training a step; the setting itself: the test below")
def test_a_trainer_run_keeps_the_freed_heap_mapped(tmp_path):
    step = TRAIN_ONE_STEP.format(output_dir=str(tmp_path / "out"))
    switched_off = "import hf_seq.train_scripts.trainer as trainer\ntrainer.keep_heap_resident = lambda: False\n"
    plain_fall, plain_faults = _probe(switched_off + step)
    # without the setting glibc hands the blocks back after every round and faults them in again at the next
    assert plain_fall >= 20 << 20 and plain_faults * 2 > BUFFER_PAGES, (plain_fall, plain_faults)
    kept_fall, kept_faults = _probe(step)
    assert kept_fall == 0, kept_fall  # after a train() the program break stays where the blocks were
    assert kept_faults * 10 < BUFFER_PAGES, (kept_faults, BUFFER_PAGES)


@pytest.mark.parametrize(
    "variable, value",
    [("MALLOC_TRIM_THRESHOLD_", "1000000"), ("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536")],
)
def test_a_users_own_malloc_setting_is_left_alone(monkeypatch, variable, value):
    from hf_seq.train_scripts.trainer import keep_heap_resident

    monkeypatch.setenv(variable, value)
    assert keep_heap_resident() is False  # returns before mallopt: this process's allocator is untouched
