"""One run per output folder, launches that would train one process where several were asked for, processes that
stop answering, and workers whose launcher dies.

* Two runs started into one ``output_dir``: the second exits 2 with one line naming the holder (process, host, start
  time) before it writes anything; the first run's folder is whole. A lock a dead process left is taken over with a
  notice; the processes of one multi-process run share the lock (the tests under torchrun / accelerate launch in
  test_distributed.py, test_fsdp.py and test_deepspeed.py run into locked folders).
* ``accelerate launch --cpu --num_processes 2`` is refused with one line saying how to launch 2 processes.
* A process that stops answering (tests/run_driver.py's ``HF_SEQ_TEST_STALL``) ends the run with an error naming the
  step within ``ddp_timeout``; a launcher killed with SIGKILL leaves no worker behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hf_seq.train_scripts import run_folder
from launchers import free_port, torchrun

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
DRIVER = ROOT / "tests" / "run_driver.py"
TEXT = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate:\n" * 8


def lm_args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    """A tiny character LM run on text files of its own (no corpus needed)."""
    for name, part in (("train", TEXT), ("valid", TEXT[:200]), ("test", TEXT[200:400])):
        (tmp_path / f"{name}.txt").write_text(part)
    return [
        *("--level", "char", "--output_dir", str(out), "--segment_length", "16"),
        *("--train_file", str(tmp_path / "train.txt"), "--validation_file", str(tmp_path / "valid.txt")),
        *("--test_file", str(tmp_path / "test.txt")),
        *("--model_config", '{"hidden_size": 8, "embedding_size": 8}'),
        *("--per_device_train_batch_size", "4", "--eval_strategy", "no", "--report_to", "none"),
        *("--sample_length", "5", "--sample_temperatures", "1.0", "--eval_streams", "2", "--disable_tqdm", "true"),
        *extra,
    ]


def hf_seq_train(*args: str) -> list[str]:
    return [sys.executable, "-m", "hf_seq.train_scripts", *args]


# ---------------------------------------------------------------------------------------------------------------
# the lock
# ---------------------------------------------------------------------------------------------------------------
HOLD = """
import sys, time
from hf_seq.train_scripts import run_folder
run_folder.lock_output_dir(sys.argv[1])
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_live_holder_is_named_and_a_dead_one_is_taken_over_with_a_notice(tmp_path, capsys):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "60"], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(run_folder.OutputDirInUse) as refused:
            run_folder.lock_output_dir(out)
        message = str(refused.value)
        assert f"process {holder.pid} on host " in message and " started 20" in message and " UTC" in message
        assert "\n" not in message and str(out) in message
    finally:
        holder.kill()  # dies holding the lock: the file still names it
        holder.wait()
    assert json.loads(run_folder.lock_path(out).read_text())["pid"] == holder.pid
    capsys.readouterr()
    lock = run_folder.lock_output_dir(out)
    notice = capsys.readouterr().err
    assert f"taking over the lock of {out.resolve()}" in notice and f"process {holder.pid}" in notice
    assert json.loads(run_folder.lock_path(out).read_text())["pid"] == os.getpid()
    assert run_folder.lock_output_dir(out) is lock  # the same process starting its next run keeps it
    run_folder.unlock_output_dirs()
    assert not run_folder.lock_path(out).exists()
    # a lock released at the end of a run is no lock: the next holder gets it without a notice
    run_folder.lock_output_dir(out)
    assert capsys.readouterr().err == ""
    run_folder.unlock_output_dirs()


def test_a_run_into_a_held_folder_exits_2_with_one_line_before_it_writes_anything(tmp_path):
    out = tmp_path / "lm"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out), "120"], env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        run = subprocess.run(
            hf_seq_train("lm", *lm_args(tmp_path, out, "--max_steps", "2")),
            env=ENV,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == [
        f"hf-seq-train: error: `output_dir` {out.resolve()} is in use by another run: process {holder.pid} on host "
        + run.stderr.split(" on host ", 1)[1].strip()
    ]
    assert " started 20" in run.stderr and "pass another --output_dir" in run.stderr
    assert not out.exists()


@pytest.mark.slow(reason="a run that trains for 1 minute while a second one is started, ~90 s")
def test_two_runs_into_one_folder_the_second_exits_2_with_one_line_and_the_first_is_whole(tmp_path):
    out = tmp_path / "lm"
    # the first run trains for a 1-minute budget: the second starts while it holds the folder
    first = subprocess.Popen(
        hf_seq_train("lm", *lm_args(tmp_path, out, "--max_steps", "100000", "--max_train_minutes", "1")),
        env=ENV,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = run_folder.lock_path(out)
    deadline = time.monotonic() + 120
    while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lock.exists(), first.communicate()[1][-3000:]
    second = subprocess.run(
        hf_seq_train("lm", *lm_args(tmp_path, out, "--max_steps", "3")),
        env=ENV,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 2, second.stderr[-3000:]
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hf-seq-train: error: `output_dir`"), second.stderr[-3000:]
    assert f"in use by another run: process {first.pid} on host " in lines[0]
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["stopped_by_time_budget"] is True and "--max_steps 100000" in results["command"]
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == results["train_steps"] > 3
    assert (out / "model.safetensors").is_file() and (out / "README.md").is_file()
    assert not lock.exists()  # released when the run ended


# ---------------------------------------------------------------------------------------------------------------
# accelerate launch --cpu with several processes
# ---------------------------------------------------------------------------------------------------------------
def test_accelerate_launch_cpu_with_two_processes_is_refused_with_one_line(tmp_path):
    out = tmp_path / "lm"
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        *("--cpu", "--num_processes", "2", "--main_process_port", str(free_port()), "--quiet"),
        *("-m", "hf_seq.train_scripts", "lm", *lm_args(tmp_path, out, "--max_steps", "2")),
    ]
    run = subprocess.run(command, env=ENV, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.startswith("hf-seq-train")]
    assert len(lines) == 1, run.stderr[-3000:]
    assert "starts one process, not N" in lines[0] and "--multi_gpu --num_processes N" in lines[0]
    assert "torchrun --nproc_per_node N" in lines[0]
    assert not out.exists()  # nothing trained


def test_a_cpu_launch_of_one_process_is_not_refused(monkeypatch):
    from hf_seq.train_scripts import processes

    monkeypatch.setenv("ACCELERATE_USE_CPU", "True")
    monkeypatch.setenv("KMP_BLOCKTIME", "1")
    for name in ("MASTER_ADDR", "MASTER_PORT", *processes.WORLD_SIZE_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    processes.check_cpu_launch()  # `accelerate launch --cpu script` (one process): nothing to say
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(ValueError, match="starts one process, not N"):
        processes.check_cpu_launch()
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher of several processes (mpirun, torchrun): fine
    processes.check_cpu_launch()


# ---------------------------------------------------------------------------------------------------------------
# a process that stops answering; a launcher that dies
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow(reason="a 2-process torchrun that waits out a 20 s collective timeout, ~50 s")
def test_a_process_that_stops_answering_ends_the_run_with_an_error_naming_the_step(tmp_path):
    out = tmp_path / "lm"
    env = {**ENV, "HF_SEQ_TEST_STALL": "1:3"}
    command = torchrun(str(DRIVER), "lm", *lm_args(tmp_path, out, "--max_steps", "6", "--ddp_timeout", "20"))
    started = time.monotonic()
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    log = run.stdout + run.stderr
    assert run.returncode != 0
    assert "process 1 stops answering before step 3" in log
    errors = [line for line in log.splitlines() if "CollectiveTimeoutError: " in line]
    assert errors, log[-5000:]
    assert (
        "CollectiveTimeoutError: process 0 of 2: a collective operation during training did not complete "
        in (errors[-1])
    ), errors
    assert "after step 2 (ddp_timeout=20 s)" in errors[-1] and "another process stopped answering" in errors[-1]
    assert time.monotonic() - started < 300  # bounded: torch's default would have waited 30 minutes


@pytest.mark.slow(reason="a 2-process torchrun killed with SIGKILL, ~30 s")
def test_no_worker_outlives_a_launcher_killed_with_sigkill(tmp_path):
    import psutil

    out = tmp_path / "lm"
    env = {**ENV, "HF_SEQ_TEST_STALL": "1:2"}
    launcher = subprocess.Popen(
        torchrun(str(DRIVER), "lm", *lm_args(tmp_path, out, "--max_steps", "6")),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        for line in launcher.stdout:
            if "stops answering before step 2" in line:
                break
        workers = psutil.Process(launcher.pid).children(recursive=True)
        assert len(workers) == 2, workers
    finally:
        os.kill(launcher.pid, signal.SIGKILL)  # no chance to end its workers itself
        launcher.wait()
    gone, alive = psutil.wait_procs(workers, timeout=30)
    for worker in alive:
        worker.kill()
    assert not alive, f"workers outlived their launcher: {[w.pid for w in alive]}"
