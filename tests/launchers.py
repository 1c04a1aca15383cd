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


ERROR_MARKERS = ("Traceback", "Error", "terminate called", "Fatal Python error", "Aborted", "what():")


def launch_failure(log: str, tail: int = 3000) -> str:
    """What a failed multi-process launch printed, for an assertion message: the lines that name an error (a
    worker's traceback or abort comes long before the launcher's summary at the end), then the last ``tail``
    characters."""
    lines = log.splitlines()
    first = next((i for i, line in enumerate(lines) if any(m in line for m in ERROR_MARKERS)), None)
    head = "" if first is None else "\n".join(lines[max(first - 5, 0) : first + 40])
    return f"{head}\n[...]\n{log[-tail:]}"


def losses(folder: Path) -> list[tuple[int, float]]:
    """``(step, loss)`` of every logged training step in ``folder/trainer_state.json``."""
    history = json.loads((Path(folder) / "trainer_state.json").read_text())["log_history"]
    return [(row["step"], row["loss"]) for row in history if "loss" in row]


# a recipe that sets load_best_model_at_end (the classifier's LSTM), cut to seconds: 64 rows, 3 epochs of 2 steps on
# 2 processes (a checkpoint and an evaluation each), a tiny model; the best checkpoint by the HIGHEST evaluation loss
# (the loss falls as it trains) is an early one, so that loading it at the end changes the weights
BEST_MODEL_RECIPE = [
    "configs/sentiment_lstm.json",
    *("--max_train_samples", "64", "--max_eval_samples", "16", "--max_predict_samples", "16"),
    *("--config_overrides", "hidden_size=8,embedding_size=8", "--num_train_epochs", "3"),
    *("--per_device_train_batch_size", "16", "--learning_rate", "0.02"),
    *("--metric_for_best_model", "loss", "--greater_is_better", "true", "--disable_tqdm", "true"),
]


def checkpoint_weights(checkpoint: Path) -> dict:
    """The model weights of a Trainer checkpoint: ``model.safetensors``, or FSDP's sharded ``pytorch_model_fsdp_0``
    (torch.distributed.checkpoint, read in this one process)."""
    import torch
    from safetensors.torch import load_file

    if (checkpoint / "model.safetensors").is_file():
        return load_file(checkpoint / "model.safetensors")
    import tempfile

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(checkpoint / "pytorch_model_fsdp_0", Path(tmp) / "model.pt")
        state = torch.load(Path(tmp) / "model.pt", weights_only=True)
    return state.get("model", state)


def assert_every_process_ends_on_the_best_checkpoint(report: Path, out: Path, processes: int = 2) -> str:
    """Every process (tests/run_driver.py's ``rank<R>.pt``) holds the same ``best_model_checkpoint``, a checkpoint
    of ``out`` that exists and is not the last step's, and ends with weights equal to the final folder's, which equal
    that checkpoint's; returns the checkpoint's name."""
    import torch
    from safetensors.torch import load_file

    ranks = [torch.load(report / f"rank{r}.pt", weights_only=False) for r in range(processes)]
    best = {r["best_model_checkpoint"] for r in ranks}
    assert len(best) == 1, best
    best_path = Path(best.pop())
    assert best_path.parent == out and best_path.is_dir(), best_path
    last = ranks[0]["global_step"]
    assert best_path.name != f"checkpoint-{last}", "the best checkpoint is the last one: the test shows nothing"
    final = load_file(out / "model.safetensors")
    saved_best = checkpoint_weights(best_path)
    assert final.keys() <= saved_best.keys()
    for name, tensor in final.items():
        assert torch.equal(tensor, saved_best[name]), name
        for rank, state in enumerate(ranks):
            assert torch.equal(state["weights"][name], tensor), (rank, name)
    return best_path.name
