"""What the multi-process tests share: a free port, a two-process ``torchrun`` command and the losses a run logged."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(*args: str) -> list[str]:
    """``python -m torch.distributed.run`` with 2 processes on a free local port, then ``args``."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        *args,
    ]


def losses(folder: Path) -> list[tuple[int, float]]:
    """``(step, loss)`` of every logged training step in ``folder/trainer_state.json``."""
    history = json.loads((Path(folder) / "trainer_state.json").read_text())["log_history"]
    return [(row["step"], row["loss"]) for row in history if "loss" in row]
