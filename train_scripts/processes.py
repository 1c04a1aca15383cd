"""The processes of a run: one launch that asked for several CPU processes and got one, workers that outlive their
launcher, and a process that stops answering.

* :func:`check_cpu_launch` — ``accelerate launch --cpu --num_processes N`` starts ONE process (accelerate 1.x's
  ``--cpu`` runs the script once, or through ``mpirun`` with ``--mpirun_hostfile``); the script would train alone,
  as a single run, without a word. It is refused with one line naming the launches that start N processes.
* :func:`end_with_launcher` — a worker started by ``torchrun`` / ``accelerate launch`` is killed when its launcher
  dies (Linux ``PR_SET_PDEATHSIG``): a launcher killed with SIGKILL (or by the system's out-of-memory killer) leaves
  no worker behind waiting in a collective. A launcher that is stopped with SIGTERM / Ctrl-C ends its workers itself.
* :func:`set_collective_timeout` / :func:`collective_timeouts` — ``ddp_timeout`` bounds every collective of a
  multi-process CPU run too (transformers passes it to the process group on GPUs only; CPU processes kept torch's 30
  minutes), and a collective that timed out is re-raised naming the process, the step and the timeout.
* :func:`set_collective_timeout` also has the process group destroyed when the process exits (torch's documented end
  of a distributed program): left to the interpreter's teardown, a gloo group's threads could still be joinable when
  their objects are destroyed, and a worker that had written everything ended in ``terminate called without an active
  exception`` (SIGABRT), which the launcher reports as a failed run.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from datetime import timedelta

from hf_seq.train_scripts.errors import RecipeError

# variables a launcher of several processes sets for each of them (torchrun / accelerate's multi-process launches,
# mpirun, MPICH/Intel MPI, MVAPICH)
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
PR_SET_PDEATHSIG = 1


def _true(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes")


def started_by_accelerate_cpu_launch() -> bool:
    """``accelerate launch --cpu`` (or a config with ``use_cpu: true``) asked for several processes and started this
    one alone: its simple launcher sets ``ACCELERATE_USE_CPU`` and its CPU variables (``KMP_BLOCKTIME``), and
    ``MASTER_ADDR`` / ``MASTER_PORT`` only when more than one process (or machine) was asked for; no launcher of
    several processes set a world size."""
    env = os.environ
    return (
        _true(env.get("ACCELERATE_USE_CPU"))
        and "KMP_BLOCKTIME" in env
        and "MASTER_ADDR" in env
        and "MASTER_PORT" in env
        and not any(name in env for name in WORLD_SIZE_VARIABLES)
    )


CPU_LAUNCH_MESSAGE = (
    "`accelerate launch --cpu --num_processes N` starts one process, not N (accelerate's --cpu runs the script once, "
    "or under mpirun with --mpirun_hostfile); for N data-parallel CPU processes launch `accelerate launch --multi_gpu "
    "--num_processes N ...` (on a machine without a GPU the processes train on CPU with gloo), `accelerate launch "
    "--config_file configs/accelerate/multi_cpu_ddp.yaml ...` or `torchrun --nproc_per_node N ...`; for one process "
    "leave out --num_processes"
)


def check_cpu_launch() -> None:
    """Refuse (:class:`~hf_seq.train_scripts.errors.RecipeError`: one line, exit status 2) a run that
    ``accelerate launch --cpu --num_processes N`` (N > 1) started as a single process."""
    if started_by_accelerate_cpu_launch():
        raise RecipeError(CPU_LAUNCH_MESSAGE)


def launched() -> bool:
    """This process is a worker of a launcher of several processes (torchrun / accelerate launch / mpirun)."""
    return any(name in os.environ for name in WORLD_SIZE_VARIABLES) and "LOCAL_RANK" in os.environ


def end_with_launcher(sig: int = signal.SIGKILL) -> bool:
    """Have the system send ``sig`` to this process when its parent (the launcher that started it) exits; True where
    it was set (Linux, a process started by a launcher). A parent that died before the call ends the process at
    once."""
    if not sys.platform.startswith("linux") or not launched():
        return False
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the launcher is already gone
        os.kill(os.getpid(), sig)
    return True


def set_collective_timeout(seconds: float) -> bool:
    """Bound every later collective of the default process group by ``seconds`` (``ddp_timeout``); True where it
    was set. transformers 5.x passes ``ddp_timeout`` to the process group of GPU runs only; the CPU processes of
    ``torchrun`` / ``accelerate launch`` (gloo) got torch's default (30 minutes)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return False
    atexit.unregister(destroy_process_group)  # registered once, however many trainers the process makes
    atexit.register(destroy_process_group)
    set_timeout = getattr(dist.distributed_c10d, "_set_pg_timeout", None)  # torch >= 2.2
    if set_timeout is None:
        return False
    set_timeout(timedelta(seconds=seconds))
    return True


def destroy_process_group() -> None:
    """Destroy the default process group if it is still there (registered to run at exit by
    :func:`set_collective_timeout`; local to this process: it waits for no other)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


_TIMEOUT_MARKERS = ("timed out", "timeout", "Connection closed by peer", "Connection reset by peer")


def is_collective_failure(error: BaseException) -> bool:
    """A collective that timed out or whose peer went away (gloo / NCCL / torch's distributed errors)."""
    import torch.distributed as dist

    kinds = tuple(
        k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None)) if k is not None
    )
    text = str(error)
    return (isinstance(error, kinds) or isinstance(error, RuntimeError)) and any(
        marker.lower() in text.lower() for marker in _TIMEOUT_MARKERS
    )


class CollectiveTimeoutError(RuntimeError):
    """A collective of a multi-process run did not complete within ``ddp_timeout``: another process stopped
    answering (it crashed, hangs, or was stopped)."""


@contextlib.contextmanager
def collective_timeouts(trainer, what: str = "training") -> Iterator[None]:
    """Re-raise a collective that timed out or lost its peer during ``what`` as :class:`CollectiveTimeoutError`
    naming this process, the step and ``ddp_timeout`` (the original error chained)."""
    try:
        yield
    except Exception as error:
        args = trainer.args
        if isinstance(error, CollectiveTimeoutError) or args.world_size <= 1 or not is_collective_failure(error):
            raise
        first_line = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
        raise CollectiveTimeoutError(
            f"process {args.process_index} of {args.world_size}: a collective operation during {what} did not "
            f"complete after step {trainer.state.global_step} (ddp_timeout={args.ddp_timeout} s): another process "
            f"stopped answering (it crashed, hangs or was stopped); its own log says why. {type(error).__name__}: "
            f"{first_line}"
        ) from error
