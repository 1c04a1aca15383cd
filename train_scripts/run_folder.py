"""The life of a run's ``output_dir``, in the order a run lives it: checked, locked, recovered, resumed or started,
checkpointed, saved, and finished.

1. **Checked** at parse time (:func:`check_output_dir`, :func:`check_resume`): a folder that can be created and
   written, and a resume that names ``last`` or a complete checkpoint (:func:`checkpoint_is_complete`).
2. **Locked** (:func:`start_run` takes :func:`lock_output_dir`): the run's first process holds an ``flock`` on the
   sibling ``.<name>.lock`` until the run ends; a second run into the folder is :class:`OutputDirInUse`.
3. **Recovered** (:func:`recover_output_dir`): a final-folder swap that a kill interrupted is finished or rolled back
   (entries already moved into the staging folder go back, a half-written staging folder is deleted), and a
   half-written checkpoint is dropped.
4. **Resumed or started** (:func:`start_run`, :func:`run_training`): ``--resume_from_checkpoint last`` continues the
   newest complete ``checkpoint-N`` (:func:`checkpoints`), and on a finished run (:func:`finished_run`) does nothing.
5. **Checkpointed** (:func:`staged_checkpoint`, wrapped around ``Trainer._save_checkpoint`` by
   :class:`hf_seq.train_scripts.trainer.HfSeqTrainerMixin`): ``Trainer`` writes each checkpoint into
   ``output_dir/.checkpoint-staging/checkpoint-N``, which is renamed to ``checkpoint-N`` when complete; the best
   checkpoint and the rotation by ``save_total_limit`` refer to the final names.
6. **Saved** (:func:`save_run`, :func:`staged_output`): the model, tokenizer, ``trainer_state.json``, ``results.json``,
   the model card and any extra file are written into a sibling folder ``.<name>.saving`` (same file system), listed
   in ``.run_files.json``; every OTHER entry of ``output_dir`` — checkpoints, logs, files the user put there — is
   moved into it and the two folders are swapped with one ``renameat2(RENAME_EXCHANGE)`` (two renames where the
   system has no exchange). The previous run's own files (its ``.run_files.json``; in a folder written before this
   list existed: the files of the same names) are dropped with the old folder; everything else is kept. A reader of
   ``output_dir`` sees the previous run's folder or the new one, never a mix, whatever moment the process is killed at.
7. **Finished** (:func:`finished_run`): the final ``trainer_state.json`` newer than the newest checkpoint; the lock
   is released (:func:`unlock_output_dirs`). An interrupted run ends with one line naming its last checkpoint and the
   command that resumes it (:func:`interrupted_line`).

:func:`disk_space_errors` turns a failed write on a full disk — ``torch.save``'s ``RuntimeError: [enforce fail at
inline_container.cc]`` or an ``OSError`` ENOSPC — into an ``OSError`` naming the folder and its free space.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import math
import os
import shlex
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from accelerate.utils import broadcast_object_list
from accelerate.utils.constants import FSDP_MODEL_NAME

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not locked there
    fcntl = None
from hf_seq.train_scripts.errors import RUN, RecipeError
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput

from hf_seq.toolkit.checkpoints import rotate_checkpoints

RUN_FILES = ".run_files.json"  # the entries of the final folder written by the run (the rest is carried over)
CHECKPOINT_STAGING = ".checkpoint-staging"


def _sibling(path: Path, kind: str) -> Path:
    """``.<name>.<kind>`` beside ``path``: its lock, its staging folder (``saving``), the folder it replaced."""
    return path.with_name(f".{path.name}.{kind}")


def resolve(output_dir: str | os.PathLike) -> Path:
    """The real path of ``output_dir`` (symlinks resolved: the swap renames the folder itself, not a link to it);
    ``ValueError`` if it is the current directory or holds it (a process inside a swapped folder would keep working in
    the old one)."""
    path = Path(output_dir).expanduser().resolve()
    cwd = Path.cwd().resolve()
    if cwd == path or path in cwd.parents:
        raise ValueError(
            f"`output_dir` {output_dir} is the current directory or one of its parents: the final folder is swapped in "
            "with a directory rename; pass a folder below the current directory (e.g. runs/NAME)"
        )
    return path


# ---------------------------------------------------------------------------------------------------------------
# 1. checked at parse time, with what a resume continues (the checkpoints, a finished run)
# ---------------------------------------------------------------------------------------------------------------
def _probe(folder: Path, where: str, value: str) -> None:
    """Create and remove a file in ``folder``; ``RecipeError`` saying why the run could not write there."""
    try:
        handle, name = tempfile.mkstemp(prefix=".hf_seq-write-probe-", dir=folder)
        os.close(handle)
        os.unlink(name)
    except OSError as error:
        raise RecipeError(
            f"{where}: `output_dir` {value} cannot be written: creating a file in {folder} failed "
            f"({error.strerror or error}); choose a folder on a writable file system you may write to"
        ) from None


def check_output_dir(output_dir: str | None, where: str) -> None:
    """``output_dir`` is not a file, can be created (its nearest existing ancestor is a folder) and a file can be
    created in it (if it exists) and in the folder that holds it (where the final save stages the new folder).
    Nothing is created: the probe files are removed and a missing ``output_dir`` stays missing."""
    if not output_dir:
        raise RecipeError(f"{where}: `output_dir` is needed (the folder the model and results are written to)")
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise RecipeError(
            f"{where}: `output_dir` {output_dir} is a file, not a folder; pass a folder (new or existing)"
        )
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise RecipeError(f"{where}: `output_dir` {output_dir} cannot be created: {ancestor} is a file, not a folder")
    try:
        resolve(output_dir)  # not the working directory or one of its parents
    except ValueError as error:
        raise RecipeError(f"{where}: {error}") from None
    if path.is_dir():
        _probe(path, where, output_dir)
    _probe(ancestor, where, output_dir)


def resume_request(value) -> str | None:
    """What ``resume_from_checkpoint`` asks for: None (unset, ``false``, ``none``), ``"last"`` (``last`` / ``true``:
    the newest complete checkpoint of ``output_dir``) or the checkpoint folder it names."""
    text = "" if value is None else str(value)
    if text.lower() in ("", "false", "none"):
        return None
    return "last" if text.lower() in ("last", "true") else text


def check_resume(training_args, where: str) -> None:
    """``resume_from_checkpoint`` is off, ``last`` / ``true``, or a complete checkpoint folder."""
    value = resume_request(training_args.resume_from_checkpoint)
    if value in (None, "last"):
        return
    if not Path(value).is_dir():
        raise RecipeError(
            f"{where}: `resume_from_checkpoint` {value} is not a folder; pass `last` (the newest complete checkpoint "
            "of output_dir) or a checkpoint-N folder"
        )
    if not checkpoint_is_complete(value):
        raise RecipeError(
            f"{where}: `resume_from_checkpoint` {value} is not a complete Trainer checkpoint (it needs config.json, "
            "model.safetensors and a readable trainer_state.json); pass `last` to take the newest complete one"
        )


def checkpoints(output_dir: str | os.PathLike, complete: bool = True, up_to_step: int | None = None) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir``, newest step first: the complete ones
    (:func:`checkpoint_is_complete`; ``complete`` false: all), of steps up to ``up_to_step`` when given. Unlike
    transformers' ``get_last_checkpoint``, a checkpoint whose writing a kill cut off is skipped, not returned."""
    root = Path(output_dir)
    steps = {int(p.name.split("-")[-1]): p for p in root.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()}
    found = [steps[step] for step in sorted(steps, reverse=True) if up_to_step is None or step <= up_to_step]
    return [p for p in found if p.is_dir() and (not complete or checkpoint_is_complete(p))]


def checkpoint_is_complete(path: str | os.PathLike) -> bool:
    """True if ``path`` is a Trainer checkpoint whose writing finished: weights (with their config; or FSDP's /
    DeepSpeed's own files) and a readable ``trainer_state.json`` (Trainer writes that file last, after model,
    optimizer, scheduler and RNG states).
    Checkpoints of the train scripts appear complete or not at all (:func:`staged_checkpoint`); this also
    recognises one cut off by a kill in a script that writes checkpoints in place."""
    path = Path(path)
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    if any((path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        return (path / "config.json").is_file()
    # FSDP: the model's shards (SHARDED_STATE_DICT) or its gathered weights (FULL_STATE_DICT); DeepSpeed's own folders
    return (
        (path / f"{FSDP_MODEL_NAME}_0").is_dir()
        or (path / f"{FSDP_MODEL_NAME}.bin").is_file()
        or (path / "latest").is_file()
    )


def _global_step(folder: str | os.PathLike) -> int:
    """The step a checkpoint (or a final folder) was saved at: its ``trainer_state.json``'s ``global_step``."""
    return int(json.loads((Path(folder) / "trainer_state.json").read_text())["global_step"])


def finished_run(output_dir: str | os.PathLike) -> int | None:
    """The last step of the finished run whose final folder ``output_dir`` is, or None.

    A run is finished when its final save completed (``output_dir/trainer_state.json``, written only by
    :func:`save_run`, swapped in with the model) and no complete checkpoint was written after it (a newer one belongs
    to a run started later in the same folder, and is resumed)."""
    root = Path(output_dir)
    try:
        step, written = _global_step(root), (root / "trainer_state.json").stat().st_mtime_ns
    except (OSError, ValueError, KeyError, TypeError):
        return None
    newest = next(iter(checkpoints(root)), None)
    if newest is not None and (newest / "trainer_state.json").stat().st_mtime_ns > written:
        return None
    return step


def resumed_folders(training_args) -> list[Path]:
    """The saved folders a ``resume_from_checkpoint`` run continues from or stops at: the checkpoint it names, or
    with ``last`` the newest complete checkpoint of ``output_dir`` and the final model of a finished run there."""
    request = resume_request(training_args.resume_from_checkpoint)
    if request is None or getattr(training_args, "overwrite_output_dir", False):
        return []  # --overwrite_output_dir true starts from scratch (start_run drops the resume)
    if request != "last":
        return [Path(request)]
    root = Path(training_args.output_dir or ".").expanduser()
    found = checkpoints(root)[:1]  # the one `last` continues
    if (root / "config.json").is_file() and (root / "trainer_state.json").is_file():
        found.append(root)  # a finished run's final model (`last` then has nothing to resume)
    return found


# ---------------------------------------------------------------------------------------------------------------
# 2. locked
# ---------------------------------------------------------------------------------------------------------------
def lock_path(output_dir: str | os.PathLike) -> Path:
    """The lock file of ``output_dir``: a sibling ``.<name>.lock`` (the folder itself is swapped by the final save)."""
    return _sibling(resolve(output_dir), "lock")


class OutputDirInUse(RecipeError):
    """Another running process holds the lock of ``output_dir`` (one line, exit status 2)."""


def _holder_text(holder: dict) -> str:
    return f"process {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {holder.get('started', '?')}"


class RunLock:
    """The lock of one run on its ``output_dir``: an exclusive ``flock`` on :func:`lock_path`, held until
    :meth:`release` or the end of the process (the system drops it with the process, whatever ends it); the file
    names the holder (process id, host, start time, command)."""

    def __init__(self, output_dir: str | os.PathLike):
        self.output_dir = resolve(output_dir)
        self.path = lock_path(self.output_dir)
        self.fd: int | None = None

    def acquire(self) -> dict | None:
        """Take the lock; returns the holder a dead process left in the file (taken over), or None. Raises
        :class:`OutputDirInUse` naming the live holder. Without ``flock`` (Windows) nothing is locked."""
        if fcntl is None:
            return None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                os.close(fd)
                if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    raise
                raise OutputDirInUse(
                    f"`output_dir` {self.output_dir} is in use by another run: {_holder_text(self._read_holder())} "
                    f"(lock {self.path}); wait for it to end or pass another --output_dir"
                ) from None
            try:  # the file may have been released and removed between our open and our lock: lock the new one
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        left = _parse_holder(os.read(fd, 1 << 16))
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "command": " ".join(sys.argv),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        os.fsync(fd)
        self.fd = fd
        return left if left and left.get("pid") else None

    def _read_holder(self) -> dict:
        """The holder named in the file; a holder that has just taken the lock writes it a moment later."""
        for _ in range(20):
            try:
                holder = _parse_holder(self.path.read_bytes())
            except OSError:
                holder = None
            if holder:
                return holder
            time.sleep(0.05)
        return {}

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # before unlocking: a waiting run then locks a new file, not this one
        os.close(self.fd)
        self.fd = None


def _parse_holder(data: bytes) -> dict | None:
    try:
        holder = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


_held: dict[Path, RunLock] = {}


def lock_output_dir(output_dir: str | os.PathLike) -> RunLock:
    """Hold the lock of ``output_dir`` for the run this process starts (:class:`RunLock`); a run that ends by
    :func:`unlock_output_dirs` or with its process lets the next one in. A process runs one run at a time: locks
    it held for earlier runs are released, one it holds on ``output_dir`` is kept. A lock a dead process left is
    taken over with a notice on stderr; a live holder is :class:`OutputDirInUse`."""
    path = resolve(output_dir)
    for other in [p for p in _held if p != path]:
        _held.pop(other).release()
    if path in _held:
        return _held[path]
    lock = RunLock(path)
    left = lock.acquire()
    _held[path] = lock
    if left is not None and left.get("pid") != os.getpid():
        print(
            f"notice: taking over the lock of {path} that {_holder_text(left)} left behind (that process is gone)",
            file=sys.stderr,
        )
    return lock


def unlock_output_dirs() -> None:
    """Release the output-folder locks this process holds (the run ended)."""
    while _held:
        _held.popitem()[1].release()


# ---------------------------------------------------------------------------------------------------------------
# 3. recovered
# ---------------------------------------------------------------------------------------------------------------
def _listing(folder: Path) -> dict | None:
    """``folder/.run_files.json``: ``files`` (the run's entries of the folder), ``written`` (those its last save
    wrote; the rest was carried over), ``save`` (an id of that save) and ``replaces`` (the id of the folder it
    replaced); None without a readable list."""
    try:
        listing = json.loads((folder / RUN_FILES).read_text(encoding="utf-8"))
        return listing if isinstance(listing, dict) and isinstance(listing.get("files"), list) else None
    except (OSError, ValueError):
        return None


def _roll_back(leftover: Path, output_dir: Path) -> None:
    """Clean up a folder an interrupted swap left beside ``output_dir``.

    A staging folder that was not swapped in yet (its ``save`` id is not what ``output_dir`` replaced) gives back the
    entries carried over into it (checkpoints, logs, the user's files: those its save did not write); the old folder
    after a swap, and a staging folder without a list (still being written, nothing carried yet), are deleted."""
    listing = _listing(leftover)
    current = _listing(output_dir) or {}
    if listing is not None and listing.get("save") != current.get("replaces", "-"):
        written = set(listing.get("written", listing["files"]))
        for entry in leftover.iterdir():
            if entry.name not in written and entry.name != RUN_FILES and not (output_dir / entry.name).exists():
                os.rename(entry, output_dir / entry.name)
    shutil.rmtree(leftover)


def recover_output_dir(output_dir: str | os.PathLike) -> None:
    """Finish or roll back a final-folder swap that a kill interrupted, and drop a half-written checkpoint (main
    process only; idempotent, nothing to do after a clean run)."""
    output_dir = Path(output_dir).expanduser().resolve()
    staging, replaced = _sibling(output_dir, "saving"), _sibling(output_dir, "replaced")
    if not output_dir.exists():  # killed between the two renames of a swap without exchange: finish it
        if staging.is_dir() and _listing(staging) is not None:
            os.rename(staging, output_dir)
        elif replaced.is_dir():
            os.rename(replaced, output_dir)
    for leftover in (staging, replaced):
        if leftover.is_dir():
            output_dir.mkdir(parents=True, exist_ok=True)
            _roll_back(leftover, output_dir)
    shutil.rmtree(output_dir / CHECKPOINT_STAGING, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------
# 4. resumed or started
# ---------------------------------------------------------------------------------------------------------------
def start_run(training_args, results_name: str = "results.json") -> dict | None:
    """Take ``output_dir`` for this run before anything is loaded; call it first in a script (every process).

    First the folder's lock (:func:`lock_output_dir`): the world's first process takes it (the others are of the same
    run); a folder another run holds stops every process of this one before anything is read or written (the first
    process raises :class:`OutputDirInUse`, one line, exit status 2; the others exit 2 silently). Then a final save
    that a kill interrupted is finished or rolled back (:func:`recover_output_dir`). ``--overwrite_output_dir true``:
    removes the folder's ``checkpoint-N`` folders and ignores ``--resume_from_checkpoint``.
    ``--resume_from_checkpoint last`` on a finished run (:func:`finished_run`): nothing to do — prints why, releases
    the lock and returns the recorded results (``results_name``; ``{}`` if there are none), which the script returns
    unchanged; otherwise None."""
    main = training_args.process_index == 0
    refused = None
    if main:
        try:
            lock_output_dir(training_args.output_dir)
        except OutputDirInUse as error:
            refused = error
    if broadcast_object_list([refused is not None])[0]:
        if refused is not None:
            raise refused
        raise SystemExit(2)
    output_dir = resolve(training_args.output_dir)
    RUN["output_dir"] = str(training_args.output_dir)  # for the line an interrupt (Ctrl-C) ends with
    overwrite = getattr(training_args, "overwrite_output_dir", False)
    with training_args.main_process_first(local=False, desc="preparing output_dir"):
        if main:
            recover_output_dir(output_dir)
            if overwrite:
                for checkpoint in checkpoints(output_dir, complete=False):
                    shutil.rmtree(checkpoint)
    if overwrite:
        training_args.resume_from_checkpoint = None
        return None
    if resume_request(training_args.resume_from_checkpoint) == "last":
        step = finished_run(output_dir)
        if step is None:
            return None
        if main:
            print(
                f"{output_dir} holds the final model of a run that finished at step {step}: nothing to resume, "
                "nothing written. Pass --overwrite_output_dir true to train again from scratch, or "
                "--resume_from_checkpoint <output_dir>/checkpoint-N with a larger max_steps / num_train_epochs to "
                "train on."
            )
        unlock_output_dirs()
        try:
            return json.loads((output_dir / results_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
    stale = [c.name for c in checkpoints(output_dir, complete=False)]
    if stale and training_args.resume_from_checkpoint is None and main:
        print(
            f"warning: {output_dir} holds checkpoints of an earlier run ({', '.join(stale[:5])}); this run starts from "
            "scratch and writes its own beside them (one of the same step replaces the old one), and "
            "--resume_from_checkpoint last resumes the newest. Pass --overwrite_output_dir true to remove them first."
        )
    return None


def whole_run_loss(log_history: list[dict], start_step: int, end_step: int, call_loss: float) -> tuple[float, int]:
    """(mean training loss, steps it covers) over the whole run after a resume from ``start_step``.

    ``Trainer``'s ``train_loss`` averages only the steps of the current ``train()`` call (``start_step`` to
    ``end_step``); the steps before come from the ``loss`` records of the checkpoint's ``log_history`` (each the mean
    over the steps since the previous record). Steps after the checkpoint's last record and before ``start_step``
    were never logged and are not counted (none when ``logging_steps`` divides ``save_steps``)."""
    steps = end_step - start_step
    total = call_loss * steps if steps else 0.0
    previous = 0
    for record in log_history:
        if "loss" in record and record.get("step", 0) <= start_step:
            total += record["loss"] * (record["step"] - previous)
            steps += record["step"] - previous
            previous = record["step"]
    return (total / steps if steps else math.nan), steps


def run_training(trainer, training_args) -> TrainOutput:
    """``trainer.train()`` from the checkpoint ``--resume_from_checkpoint`` asks for: with ``last`` / ``true`` the
    newest COMPLETE ``checkpoint-N`` of ``output_dir`` (one whose writing a kill cut off is skipped, unlike
    ``Trainer``'s own ``True``), or a fresh start while there is none, so that the same command can be re-run after a
    crash; a path must be a complete checkpoint (:func:`check_resume`). The returned ``training_loss`` (and
    ``metrics["train_loss"]``, and the final ``log_history`` record) is the mean over the WHOLE run
    (:func:`whole_run_loss`), with ``metrics["train_loss_steps"]`` the steps it covers."""
    value = training_args.resume_from_checkpoint
    checkpoint = resume_request(value)
    if checkpoint == "last":
        newest = checkpoints(training_args.output_dir)[:1]
        checkpoint = str(newest[0]) if newest else None
        if not newest:
            root = Path(training_args.output_dir)
            print(f"resume_from_checkpoint={value}: no complete checkpoint in {root}, starting from scratch")
    elif checkpoint is not None:
        check_resume(training_args, "the run")  # parse_args checked it already, naming where it was set
    # the first process's choice on every process: each reading the folder on its own could pick different ones
    checkpoint = broadcast_object_list([checkpoint])[0]
    start = 0
    if checkpoint is not None:
        start = _global_step(checkpoint)
        if training_args.process_index == 0:
            print(f"resuming from {checkpoint} (step {start}, --resume_from_checkpoint {value})")
    output = trainer.train(resume_from_checkpoint=checkpoint)
    if start == 0:
        loss, steps = output.training_loss, output.global_step
    else:
        loss, steps = whole_run_loss(trainer.state.log_history, start, output.global_step, output.training_loss)
    metrics = {**output.metrics, "train_loss": loss, "train_loss_steps": steps}
    final = trainer.state.log_history[-1] if trainer.state.log_history else {}
    if "train_loss" in final:
        final["train_loss"] = loss
    return TrainOutput(output.global_step, loss, metrics)


# ---------------------------------------------------------------------------------------------------------------
# 5. checkpointed
# ---------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def staged_checkpoint(trainer, trial) -> Iterator[None]:
    """``with staged_checkpoint(trainer, trial): <Trainer._save_checkpoint>`` (every process): ``Trainer`` writes the
    checkpoint into ``<run dir>/.checkpoint-staging/checkpoint-N`` (the trainer's ``_get_output_dir`` answers
    ``trainer._checkpoint_staging`` meanwhile), which the main process then renames to ``checkpoint-N``
    (:func:`replace_folder`) before it rotates the checkpoints (``save_total_limit``). ``best_model_checkpoint`` is
    decided on the final names (:func:`_best_checkpoint`) by the main process and broadcast. (``Trainer`` itself
    writes in place: a kill would leave a half-written ``checkpoint-N``, or one mixed with an older run's.)"""
    run_dir = Path(trainer._get_output_dir(trial))
    name = f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
    staging = run_dir / CHECKPOINT_STAGING
    main = trainer.args.should_save
    previous_best = trainer.state.best_model_checkpoint
    if main:
        if staging.exists():
            shutil.rmtree(staging)  # a checkpoint cut off by a kill
        staging.mkdir(parents=True)
    trainer.accelerator.wait_for_everyone()
    trainer._checkpoint_staging = str(staging)
    try:
        with disk_space_errors(run_dir, f"checkpoint {name}"):
            yield
    finally:
        trainer._checkpoint_staging = None
    trainer.accelerator.wait_for_everyone()
    best = None
    if main:
        with disk_space_errors(run_dir, f"checkpoint {name}"):
            best = _best_checkpoint(trainer, run_dir, previous_best)
            if best != trainer.state.best_model_checkpoint:
                trainer.state.best_model_checkpoint = best
                trainer.state.save_to_json(os.path.join(staging, name, "trainer_state.json"))
            replace_folder(staging / name, run_dir / name)
            shutil.rmtree(staging)
            rotate_checkpoints(trainer, str(run_dir))
    # every process holds the main process's answer: Trainer's own check (is the best step's folder there?) runs
    # on each process against the staging folder, and under FSDP's sharded checkpoints (written after the check)
    # its answer depends on which process got there first
    trainer.state.best_model_checkpoint = broadcast_object_list([best])[0]
    trainer.accelerator.wait_for_everyone()


def _best_checkpoint(trainer, run_dir: Path, previous: str | None) -> str | None:
    """``best_model_checkpoint`` after the checkpoint of this step is renamed into ``run_dir``: Trainer's rule
    (``checkpoint-<best_global_step>`` once that folder exists, else what it was), with final names."""
    step = trainer.state.best_global_step
    strategy = str(getattr(trainer.args.save_strategy, "value", trainer.args.save_strategy))
    if step and strategy in ("steps", "epoch", "best"):
        candidate = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{step}"
        if step == trainer.state.global_step or candidate.is_dir():
            return str(candidate)
    return previous


_libc = None


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap the folders ``a`` and ``b`` (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system or
    the file system cannot (the caller then renames twice)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.renameat2  # noqa: B018 - glibc >= 2.28
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    at_fdcwd, rename_exchange = -100, 2
    if _libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, f"cannot swap {a} and {b}: {os.strerror(code)}")


def replace_folder(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target`` (a checkpoint, the final folder), replacing an existing
    ``target`` by an exchange (two renames through ``.<name>.replaced`` where the system has none), so that ``target``
    always holds one complete version; the version it replaced is deleted."""
    if target.exists():
        if not exchange(new, target):
            old = _sibling(target, "replaced")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(target, old)
            os.rename(new, target)
            new = old
        shutil.rmtree(new)
    else:
        os.rename(new, target)
    _fsync(target.parent)


def _fsync(path: Path) -> None:
    flags = os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a directory
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------------
# 6. saved
# ---------------------------------------------------------------------------------------------------------------
def publish(staging: Path, output_dir: Path, replace_run: bool = True) -> None:
    """Swap the complete folder ``staging`` in as ``output_dir``, carrying over every entry of the old folder that is
    not one of the old run's files (``replace_run=False``: not even those — an evaluation that adds its results
    beside a model) and not replaced by the new run."""
    own = {p.name for p in staging.iterdir()}
    old_listing = (_listing(output_dir) or {}) if output_dir.exists() else {}
    previous = set(old_listing.get("files", []))
    listed = own if replace_run else own | previous
    for path in staging.rglob("*"):
        if path.is_file():
            _fsync(path)
    listing = {"files": sorted(listed), "written": sorted(own), "save": uuid.uuid4().hex}
    listing["replaces"] = old_listing.get("save")  # None: a folder without a list, or no folder
    (staging / RUN_FILES).write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    _fsync(staging / RUN_FILES)
    _fsync(staging)
    if output_dir.exists():
        dropped = previous if replace_run else set()
        for entry in output_dir.iterdir():  # checkpoints, logs, the user's files: into the new folder
            if entry.name not in own and entry.name not in dropped and entry.name != RUN_FILES:
                os.rename(entry, staging / entry.name)
    else:
        output_dir.parent.mkdir(parents=True, exist_ok=True)
    replace_folder(staging, output_dir)  # the old folder goes: only the previous run's own files are left in it


@contextlib.contextmanager
def staged_output(
    output_dir: str | os.PathLike, replace_run: bool = True, what: str = "the final files", main: bool = True
) -> Iterator[Path]:
    """``with staged_output(output_dir) as folder:`` write the run's final files into ``folder``; on success it is
    swapped in as ``output_dir`` (:func:`publish`), on an exception ``output_dir`` stays as it was. ``main`` false:
    a process that only takes part in a collective save (FSDP / DeepSpeed gather the weights; the main process
    writes) gets the same folder and neither prepares nor swaps it. ``what`` names the files in a full disk's error."""
    target = resolve(output_dir)
    staging = _sibling(target, "saving")
    if main:
        recover_output_dir(target)
        staging.mkdir(parents=True)
    try:
        with disk_space_errors(target, what):
            yield staging
            if main:
                publish(staging, target, replace_run=replace_run)
    except BaseException:
        if main:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def write_results(folder: str | os.PathLike, results: dict[str, Any], command: str, name: str = "results.json") -> Path:
    """Write ``results`` (after the command line that ran them) as JSON to ``folder/name``; returns the path. The
    folder is a staging folder (:func:`staged_output`): the file appears with the rest of the run's files."""
    path = Path(folder) / name
    payload = {"command": command, **results}
    path.write_text(
        json.dumps(payload, indent=2, sort_keys=True, default=str, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return path


@contextlib.contextmanager
def full_state_dict(trainer):
    """Under FSDP with sharded state dicts (what checkpoints use: each process writes its shard), make
    ``trainer.save_model`` gather the full weights and write one ordinary ``save_pretrained`` folder (accelerate's
    documented "train sharded, save the final model full"); the checkpoint setting is restored afterwards."""
    plugin = getattr(trainer.accelerator.state, "fsdp_plugin", None) if trainer.is_fsdp_enabled else None
    previous = getattr(plugin, "state_dict_type", None)
    if plugin is None or "FULL_STATE_DICT" in str(previous):
        yield
        return
    plugin.set_state_dict_type("FULL_STATE_DICT")
    try:
        yield
    finally:
        plugin.set_state_dict_type(previous)


def save_run(
    trainer,
    output_dir: str | os.PathLike,
    results: dict[str, Any] | None,
    command: str,
    card: dict[str, Any] | None = None,
    files: dict[str, str | bytes | os.PathLike] | None = None,
    results_name: str = "results.json",
    save_model: bool = True,
) -> None:
    """The one place that writes a run's final folder, whole: the model + tokenizer + modelling code +
    ``trainer_state.json``, ``results.json`` (``results``; None: none), the model card ``README.md`` (``card``: the
    keyword arguments of :func:`hf_seq.toolkit.model_card.write_model_card` but the model and command) and extra ``files``
    (name -> text, bytes, or a path to move in), swapped in whole (:func:`staged_output`; the module's step 6).
    ``save_model=False`` (an evaluation) adds its results and files beside the folder's model instead of replacing
    it. Call it on every process (FSDP / DeepSpeed gather the weights collectively); only the main process writes the
    other files and swaps."""
    from hf_seq.toolkit.model_card import write_model_card

    main = trainer.is_world_process_zero()
    with staged_output(output_dir, replace_run=save_model, what="the final model", main=main) as staging:
        trainer.accelerator.wait_for_everyone()
        if save_model:
            with full_state_dict(trainer):  # FSDP: gathered into one ordinary save_pretrained folder
                trainer.save_model(str(staging))
            trainer.accelerator.wait_for_everyone()
        if main:
            if save_model:
                trainer.state.save_to_json(str(staging / "trainer_state.json"))  # the loss history
            if results is not None:
                write_results(staging, results, command, name=results_name)
            for name, content in (files or {}).items():
                if isinstance(content, str):
                    (staging / name).write_text(content, encoding="utf-8")
                elif isinstance(content, bytes):
                    (staging / name).write_bytes(content)
                else:
                    shutil.move(os.fspath(content), staging / name)
            if card is not None:
                try:  # the card describes the model: writing it never costs the model
                    write_model_card(staging, trainer.model, command=command, **card)
                except Exception as error:
                    (staging / "README.md").unlink(missing_ok=True)
                    print(
                        f"warning: the model card README.md was not written ({type(error).__name__}: "
                        f"{' '.join(str(error).split())[:300]}); the model and results are saved",
                        file=sys.stderr,
                    )
    trainer.accelerator.wait_for_everyone()


# ---------------------------------------------------------------------------------------------------------------
# 7. finished, or interrupted
# ---------------------------------------------------------------------------------------------------------------
def _without_resume(command: str) -> list[str]:
    words = shlex.split(command)
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--resume_from_checkpoint":
            skip = True
        elif not word.startswith("--resume_from_checkpoint="):
            kept.append(word)
    return kept


def interrupted_line() -> str:
    """What an interrupted run says (one line): where its newest complete checkpoint is (step) and the command that
    resumes from it, or that none was written yet and the same command starts again."""
    output_dir, command = RUN.get("output_dir"), RUN.get("command")
    if not output_dir:
        return "interrupted before the run started; nothing was written"
    found = checkpoints(output_dir)[:1]  # the one `last` resumes
    if not found:
        again = f"; run `{shlex.join(_without_resume(command))}` to start again" if command else ""
        return f"interrupted: no checkpoint of this run in {output_dir} yet{again}"
    resume = shlex.join([*_without_resume(command), "--resume_from_checkpoint", "last"]) if command else None
    how = f"; resume with `{resume}`" if resume else "; resume with --resume_from_checkpoint last"
    return f"interrupted: the last checkpoint is {found[0]} (step {_global_step(found[0])}){how}"


# ---------------------------------------------------------------------------------------------------------------
# a full disk
# ---------------------------------------------------------------------------------------------------------------
def _free_space(folder: Path) -> str:
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "unknown free space"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if free < 1024 or unit == "TiB":
            return f"{free:.0f} {unit} free" if unit == "bytes" else f"{free:.1f} {unit} free"
        free /= 1024
    raise AssertionError("unreachable")


_WRITE_FAILURES = (
    "inline_container",  # torch.save: RuntimeError: [enforce fail at inline_container.cc:...] . unexpected pos ...
    "file write failed",
    "No space left",
    "Disk quota exceeded",
    "File too large",
    "(os error 28)",  # safetensors: SafetensorError: Error while serializing: I/O error: ... (os error 28)
)


def _is_write_failure(error: BaseException) -> bool:
    if isinstance(error, OSError) and error.errno is not None:
        return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    return any(marker in str(error) for marker in _WRITE_FAILURES)


@contextlib.contextmanager
def disk_space_errors(folder: str | os.PathLike, what: str) -> Iterator[None]:
    """Re-raise a write that failed for lack of space — ``OSError`` ENOSPC / EDQUOT / EFBIG, ``torch.save``'s
    ``RuntimeError: [enforce fail at inline_container.cc:...]`` (which says nothing about space), safetensors'
    ``SafetensorError: ... I/O error`` — as an ``OSError`` (ENOSPC) naming ``what``, the folder and the free space
    left on its file system; the original error is chained."""
    try:
        yield
    except Exception as error:
        if not _is_write_failure(error):
            raise
        folder = Path(folder)
        first_line = str(error).splitlines()[0][:200] if str(error) else ""
        raise OSError(
            errno.ENOSPC,
            f"writing {what} to {folder} failed: {_free_space(folder)} on its file system (a full disk gives this "
            f"error; {type(error).__name__}: {first_line}). Free some space (fewer checkpoints: `save_total_limit`) or "
            "choose another `output_dir`, then run again with `--resume_from_checkpoint last`",
        ) from error
