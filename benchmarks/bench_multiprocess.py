"""Training throughput (samples/s) of one recipe with 1 process vs 2 data-parallel processes on this CPU.

    python benchmarks/bench_multiprocess.py [--recipe configs/sentiment_bilstm.json] [--minutes 1]

Runs train_scripts/train_classifier.py three ways for ``--minutes`` of training each (same global batch of 32):
1 process with 2 threads; ``torchrun --nproc_per_node 2`` (gloo) with 1 thread per process and 16 samples per process;
``accelerate launch --multi_gpu --num_processes 2`` the same way. samples/s = optimizer steps x global batch / training
seconds, read from the ``trainer_state.json`` each run saves. Writes benchmarks/results/bench_multiprocess.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "train_scripts/train_classifier.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name: str, launcher: list[str], threads: int, per_device: int, processes: int, args) -> dict:
    out = ROOT / "runs" / "bench_multiprocess" / name
    command = [
        *launcher,
        SCRIPT,
        args.recipe,
        "--output_dir",
        str(out),
        "--per_device_train_batch_size",
        str(per_device),
        "--max_train_minutes",
        str(args.minutes),
        "--num_train_epochs",
        "3",
        "--eval_strategy",
        "no",
        "--save_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--max_eval_samples",
        "64",
        "--max_predict_samples",
        "64",
        "--logging_steps",
        "50",
        "--disable_tqdm",
        "true",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{result.stderr[-3000:]}")
    state = json.loads((out / "trainer_state.json").read_text())
    runtime = next(r["train_runtime"] for r in reversed(state["log_history"]) if "train_runtime" in r)
    samples = state["global_step"] * per_device * processes
    return {
        "name": name,
        "processes": processes,
        "threads_per_process": threads,
        "per_device_batch": per_device,
        "global_batch": per_device * processes,
        "steps": state["global_step"],
        "train_seconds": runtime,
        "samples_per_second": samples / runtime,
        "wall_seconds_incl_startup": time.monotonic() - start,
        "command": f"OMP_NUM_THREADS={threads} " + " ".join(command),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default=str(ROOT / "configs/sentiment_bilstm.json"))
    parser.add_argument("--minutes", type=float, default=1.0)
    args = parser.parse_args()
    py = [sys.executable]
    rows = [
        run("1proc_2threads", py, 2, 32, 1, args),
        run(
            "torchrun_2proc_1thread",
            [*py, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())],
            1,
            16,
            2,
            args,
        ),
        run(
            "accelerate_2proc_1thread",
            [
                str(Path(sys.executable).parent / "accelerate"),
                "launch",
                "--multi_gpu",
                "--num_processes",
                "2",
                "--main_process_port",
                str(free_port()),
            ],
            1,
            16,
            2,
            args,
        ),
    ]
    base = rows[0]["samples_per_second"]
    for row in rows:
        row["speedup_vs_1proc"] = row["samples_per_second"] / base
    load = os.getloadavg()
    report = {
        "recipe": args.recipe,
        "minutes_per_run": args.minutes,
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15_at_end": load,
        "runs": rows,
    }
    path = ROOT / "benchmarks/results/bench_multiprocess.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print("| run | processes x threads | global batch | steps | samples/s | vs 1 process |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['processes']} x {r['threads_per_process']} | {r['global_batch']} | {r['steps']} | "
            f"{r['samples_per_second']:.0f} | {r['speedup_vs_1proc']:.2f}x |"
        )
    print(f"load average at the end: {load}")


if __name__ == "__main__":
    main()
