"""The file list and SHA-256 of each installed corpus, written by ``make data`` and checked by the loaders.

A corpus folder (``data/brown``, ...) holds ``SHA256SUMS``: one ``<sha256>  <relative path>`` line per file, in
``sha256sum`` format (``cd data/brown && sha256sum -c SHA256SUMS`` checks it by hand). :func:`verify` finds what is
wrong with a folder — a listed file missing, a file whose bytes changed (truncated, overwritten, a flipped byte), a
file the list does not have — and remembers a folder it found intact in ``.verified`` (size, modification and change
time of every file): a later check hashes only files whose ``stat`` changed, so checking the 500 Brown files costs a
few milliseconds. A file rewritten with its size kept still gets a new change time (``ctime``; no program can set it
back), so the cache never hides a modified file.

Standard library only: ``scripts/fetch_data.sh`` runs this file as a script
(``python hf_seq/toolkit/checksums.py write|check FOLDER``) before hf_seq is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

MANIFEST = "SHA256SUMS"
CACHE = ".verified"
_NOT_LISTED = {MANIFEST, CACHE, ".complete"}  # the manifest, the cache, the marker of older installs


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(root: Path) -> list[str]:
    """Relative paths (``/``-separated, sorted) of the regular files under ``root`` that a manifest lists: everything
    but the manifest, the cache and hidden files."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith(".") or name in _NOT_LISTED:
                continue
            found.append((Path(folder) / name).relative_to(root).as_posix())
    return sorted(found)


def write_manifest(root: str | os.PathLike) -> Path:
    """Write ``root/SHA256SUMS`` for every file under ``root`` (what ``make data`` does after installing a corpus)."""
    root = Path(root)
    lines = [f"{file_sha256(root / rel)}  {rel}\n" for rel in _files(root)]
    path = root / MANIFEST
    tmp = path.with_name(MANIFEST + ".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_manifest(root: str | os.PathLike) -> dict[str, str]:
    """``{relative path: sha256}`` of ``root/SHA256SUMS``; ``FileNotFoundError`` if there is none, ``ValueError``
    naming the line if it is malformed."""
    path = Path(root) / MANIFEST
    entries = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not rel:
            raise ValueError(f"{path}, line {number}: not a `<sha256>  <file>` line: {line[:120]!r}")
        entries[rel] = digest
    return entries


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def verify(root: str | os.PathLike) -> list[str]:
    """What is wrong with the corpus folder ``root``, one line per problem (empty: intact).

    Problems: no ``SHA256SUMS``; a malformed one; a listed file missing; a listed file whose SHA-256 differs; a file
    the manifest does not list. Files whose ``stat`` matches the cache of the last successful check are not hashed
    again; the cache is rewritten after a successful check (silently skipped on a read-only folder)."""
    root = Path(root)
    try:
        expected = read_manifest(root)
    except FileNotFoundError:
        return [f"{root / MANIFEST} does not exist"]
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return [f"{root / MANIFEST} cannot be read: {error}"]
    manifest_signature = _signature((root / MANIFEST).stat())
    try:
        cache = json.loads((root / CACHE).read_text(encoding="utf-8"))
        if cache.get("manifest") != manifest_signature:
            cache = {}
    except (OSError, ValueError):
        cache = {}
    known = cache.get("files", {})
    problems, signatures = [], {}
    for rel, digest in expected.items():
        path = root / rel
        try:
            signature = _signature(path.stat())
        except FileNotFoundError:
            problems.append(f"{path} is missing")
            continue
        if known.get(rel) != signature and file_sha256(path) != digest:
            problems.append(f"{path} is damaged (size {signature[0]} bytes; its SHA-256 is not the recorded one)")
            continue
        signatures[rel] = signature
    problems += [f"{root / rel} is not a file of the corpus" for rel in _files(root) if rel not in expected]
    if not problems and signatures != known:
        try:
            tmp = root / f"{CACHE}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"manifest": manifest_signature, "files": signatures}), encoding="utf-8")
            os.replace(tmp, root / CACHE)
        except OSError:
            pass  # a read-only install: every check hashes again
    return problems


def main(argv: list[str]) -> int:
    """``write FOLDER`` writes the manifest; ``check FOLDER`` prints the problems and exits 1 if there are any."""
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print("usage: python hf_seq/toolkit/checksums.py write|check FOLDER", file=sys.stderr)
        return 2
    if argv[0] == "write":
        write_manifest(argv[1])
        return 0
    problems = verify(argv[1])
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
