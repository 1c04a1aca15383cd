"""Whole-folder atomic outputs: a run's final folder and each checkpoint appear complete or not at all.

A reader of ``output_dir`` sees the previous run's folder or the new one, never a mix (run A's weights with run B's
``tokenizer.json``, new weights with the old ``results.json``), whatever moment the process is killed at:

* The final save (:func:`staged_output`) writes the model, tokenizer, ``trainer_state.json``, ``results.json``, the
  model card and any extra file into a sibling folder ``.<name>.saving`` (same file system), lists them in
  ``.run_files.json``, moves every OTHER entry of ``output_dir`` into it — checkpoints, logs, files the user put
  there — and swaps the two folders with one ``renameat2(RENAME_EXCHANGE)`` (two renames where the system has no
  exchange). The previous run's own files (its ``.run_files.json``; in a folder written before this list existed:
  the files of the same names) are dropped with the old folder; everything else is kept.
* A checkpoint is written by ``Trainer`` into ``output_dir/.checkpoint-staging/checkpoint-N`` and renamed to
  ``checkpoint-N`` when complete (:class:`hf_seq.train_scripts.trainer.HfSeqTrainerMixin`).
* :func:`recover_output_dir` (run at the start of every script and before a resume) finishes or rolls back a swap
  that a kill interrupted: entries already moved into the staging folder go back, a half-written staging folder is
  deleted.

:func:`disk_space_errors` turns a failed write on a full disk — ``torch.save``'s ``RuntimeError: [enforce fail at
inline_container.cc]`` or an ``OSError`` ENOSPC — into an ``OSError`` naming the folder and its free space.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import shlex
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from accelerate.utils.constants import FSDP_MODEL_NAME

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are not locked there
    fcntl = None
from hf_seq.train_scripts.errors import RUN, RecipeError

RUN_FILES = ".run_files.json"  # the entries of the final folder written by the run (the rest is carried over)
CHECKPOINT_STAGING = ".checkpoint-staging"


def lock_path(output_dir: str | os.PathLike) -> Path:
    """The lock file of ``output_dir``: a sibling ``.<name>.lock`` (the folder itself is swapped by the final save)."""
    path = resolve(output_dir)
    return path.with_name(f".{path.name}.lock")


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


def _siblings(output_dir: Path) -> tuple[Path, Path]:
    """(staging, replaced): the sibling folders of a swap in progress."""
    return output_dir.with_name(f".{output_dir.name}.saving"), output_dir.with_name(f".{output_dir.name}.replaced")


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


def _listing(folder: Path) -> dict | None:
    """``folder/.run_files.json``: ``files`` (the run's entries of the folder), ``written`` (those its last save
    wrote; the rest was carried over), ``save`` (an id of that save) and ``replaces`` (the id of the folder it
    replaced); None without a readable list."""
    try:
        listing = json.loads((folder / RUN_FILES).read_text(encoding="utf-8"))
        return listing if isinstance(listing, dict) and isinstance(listing.get("files"), list) else None
    except (OSError, ValueError):
        return None


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
    staging, replaced = _siblings(output_dir)
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
    if not output_dir.exists():
        output_dir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staging, output_dir)
        _fsync(output_dir.parent)
        return
    dropped = previous if replace_run else set()
    for entry in output_dir.iterdir():  # checkpoints, logs, the user's files: into the new folder
        if entry.name not in own and entry.name not in dropped and entry.name != RUN_FILES:
            os.rename(entry, staging / entry.name)
    _, replaced = _siblings(output_dir)
    if not exchange(staging, output_dir):
        shutil.rmtree(replaced, ignore_errors=True)
        os.rename(output_dir, replaced)
        os.rename(staging, output_dir)
        staging = replaced
    _fsync(output_dir.parent)
    shutil.rmtree(staging)  # the old folder: only the previous run's own files are left in it


def prepare_staging(output_dir: str | os.PathLike) -> Path:
    """An empty staging folder for the final files of ``output_dir`` (main process), after recovering from an
    interrupted swap."""
    target = resolve(output_dir)
    recover_output_dir(target)
    staging, _ = _siblings(target)
    staging.mkdir(parents=True)
    return staging


def staging_path(output_dir: str | os.PathLike) -> Path:
    """Where :func:`prepare_staging` puts the staging folder (the same path on every process)."""
    return _siblings(resolve(output_dir))[0]


@contextlib.contextmanager
def staged_output(output_dir: str | os.PathLike, replace_run: bool = True) -> Iterator[Path]:
    """``with staged_output(output_dir) as folder:`` write the run's final files into ``folder`` (one process); on
    success it is swapped in as ``output_dir`` (:func:`publish`), on an exception ``output_dir`` stays as it was."""
    staging = prepare_staging(output_dir)
    try:
        with disk_space_errors(resolve(output_dir), "the final files"):
            yield staging
            publish(staging, resolve(output_dir), replace_run=replace_run)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def replace_folder(new: Path, target: Path) -> None:
    """Rename the complete folder ``new`` to ``target`` (a checkpoint), replacing an existing ``target`` (left by an
    earlier run) by an exchange, so that ``target`` always holds one complete version."""
    if target.exists():
        if not exchange(new, target):
            old = target.with_name(f".{target.name}.replaced")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(target, old)
            os.rename(new, target)
            new = old
        shutil.rmtree(new)
    else:
        os.rename(new, target)
    _fsync(target.parent)


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
    Checkpoints of the train scripts appear complete or not at all (:mod:`hf_seq.train_scripts.trainer`); this also
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
    newest = (found[0], json.loads((found[0] / "trainer_state.json").read_text())["global_step"]) if found else None
    resume = shlex.join([*_without_resume(command), "--resume_from_checkpoint", "last"]) if command else None
    if newest is None:
        again = f"; run `{shlex.join(_without_resume(command))}` to start again" if command else ""
        return f"interrupted: no checkpoint of this run in {output_dir} yet{again}"
    how = f"; resume with `{resume}`" if resume else "; resume with --resume_from_checkpoint last"
    return f"interrupted: the last checkpoint is {newest[0]} (step {newest[1]}){how}"
