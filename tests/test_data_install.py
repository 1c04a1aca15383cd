"""The data folder and ``hf-seq-data``: where the data lives (``HF_SEQ_DATA``, a clone's ``data/``, the user data
folder under ``HF_HOME``), ``data/pretrained/<name>`` in recipes, and the installer's staging, skipping, reinstalling
and one-line errors (with stand-in sources: the real downloads run in tests/test_wheel.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hf_seq.toolkit import checksums
from hf_seq.toolkit import data_install as I

REPO = Path(__file__).resolve().parents[1]


def test_the_data_folder_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_SEQ_DATA", str(tmp_path / "mine"))
    assert I.data_dir() == tmp_path / "mine"
    monkeypatch.delenv("HF_SEQ_DATA")
    assert I.clone_root() == REPO and I.data_dir() == REPO / "data"  # this checkout is a clone: its data/, as before
    monkeypatch.setattr(I, "clone_root", lambda: None)  # a pip install
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert I.data_dir() == tmp_path / "hf" / "hf_seq" / "data"
    monkeypatch.delenv("HF_HOME")
    assert I.data_dir() == tmp_path / "xdg" / "huggingface" / "hf_seq" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert I.data_dir() == tmp_path / "home" / ".cache" / "huggingface" / "hf_seq" / "data"
    site_packages = Path(I.__file__).resolve().parents[2]
    assert site_packages not in I.data_dir().parents


def test_recipe_paths_under_data_pretrained_name_the_data_folder(monkeypatch, tmp_path):
    data = tmp_path / "data_folder"
    (data / "pretrained" / "glove-6b-50d").mkdir(parents=True)
    monkeypatch.setenv("HF_SEQ_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    assert I.resolve_data_path("data/pretrained/glove-6b-50d") == str(data / "pretrained" / "glove-6b-50d")
    # missing in both places: the data folder's path (what the error names)
    assert I.resolve_data_path("data/pretrained/other") == str(data / "pretrained" / "other")
    # a data/ folder of the user's own in the working directory, which the data folder lacks: as written
    (tmp_path / "data" / "pretrained" / "own").mkdir(parents=True)
    assert I.resolve_data_path("data/pretrained/own") == "data/pretrained/own"
    for value in (None, "", "runs/vectors", str(tmp_path / "x"), "data/other/glove"):
        assert I.resolve_data_path(value) == value


def test_the_glove_recipe_reads_the_vectors_of_the_data_folder(monkeypatch, tmp_path):
    """``sentiment_bilstm_glove`` names data/pretrained/glove-6b-50d; with HF_SEQ_DATA set, from another folder, the
    run's pretrained_embeddings is the data folder's (checked before any data or vectors are read)."""
    from hf_seq.train_scripts import train_classifier
    from hf_seq.train_scripts.arguments import parse_args

    data = tmp_path / "data_folder"
    (data / "pretrained" / "glove-6b-50d").mkdir(parents=True)
    (data / "sentiment").mkdir()  # the preset's folder exists (its files are checked when it is loaded)
    monkeypatch.setenv("HF_SEQ_DATA", str(data))
    monkeypatch.chdir(tmp_path)
    *_, task_args, _ = parse_args(train_classifier.TASK, ["sentiment_bilstm_glove", "--output_dir", "out"])
    assert task_args.pretrained_embeddings == str(data / "pretrained" / "glove-6b-50d")


@pytest.fixture
def fake_source(monkeypatch):
    """The sentiment source replaced by a stand-in writing ``calls[-1]`` into the corpus (or raising it)."""
    calls = []

    def install(tmp: Path, dest: Path) -> None:
        content = calls[-1]
        if isinstance(content, Exception):
            (dest / "partial.csv").write_text("half")
            raise content
        (dest / "rows.csv").write_text(content)

    monkeypatch.setitem(I.CORPUS_SOURCES, "sentiment", install)
    return calls


def test_fetch_installs_skips_and_reinstalls_through_a_staging_folder(fake_source, tmp_path):
    fake_source.append("text,label\n")
    assert I.fetch(["hf_seq/sentiment"], tmp_path, log=lambda line: None) == ["sentiment"]
    assert checksums.verify(tmp_path / "sentiment") == [] and (tmp_path / "sentiment" / "rows.csv").is_file()
    inode = (tmp_path / "sentiment" / checksums.MANIFEST).stat().st_ino
    assert I.fetch(["sentiment"], tmp_path, log=lambda line: None) == []  # intact: skipped
    assert (tmp_path / "sentiment" / checksums.MANIFEST).stat().st_ino == inode
    (tmp_path / "sentiment" / "rows.csv").write_text("damaged")
    lines = []
    fake_source.append("text,label\nfine,1\n")
    assert I.fetch(["sentiment"], tmp_path, log=lines.append) == ["sentiment"]
    assert "reinstalling sentiment" in lines[0] and "rows.csv is damaged" in lines[0]
    assert (tmp_path / "sentiment" / "rows.csv").read_text() == "text,label\nfine,1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentiment"]  # no staging or old folder left


def test_a_failed_install_keeps_the_installed_corpus(fake_source, tmp_path):
    fake_source.append("text,label\n")
    I.fetch(["sentiment"], tmp_path, log=lambda line: None)
    (tmp_path / "sentiment" / "rows.csv").write_text("damaged")
    fake_source.append(I.InstallError("sentiment: the registry did not answer"))
    with pytest.raises(I.InstallError, match="did not answer"):
        I.fetch(["sentiment"], tmp_path, log=lambda line: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sentiment"]
    assert sorted(p.name for p in (tmp_path / "sentiment").iterdir()) == [checksums.MANIFEST, "rows.csv"]


def run_data_command(*args: str, path: str) -> subprocess.CompletedProcess:
    code = "import sys, hf_seq_cli; sys.exit(hf_seq_cli.data(sys.argv[1:]))"
    env = {"PATH": path, "PYTHONPATH": str(REPO), "HOME": "/nonexistent"}
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=120)


def test_without_apt_the_translation_corpus_says_so_in_one_line(tmp_path):
    result = run_data_command("fetch", "translation", "--data_dir", str(tmp_path / "d"), path=str(tmp_path))
    assert result.returncode == 1 and result.stdout == ""
    line, *rest = result.stderr.splitlines()
    assert not rest and line.startswith("hf-seq-data: error: sword (the translation corpus) comes from the Debian")
    assert "`apt-get` and `dpkg-deb` is not on PATH" in line and "Debian or Ubuntu machine" in line
    assert not (tmp_path / "d" / "sword").exists() and not list((tmp_path / "d").glob(".staging-*"))


def test_unknown_names_and_the_folder_commands(tmp_path):
    result = run_data_command("fetch", "sentiments", path="/usr/bin:/bin")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "unknown data 'sentiments'; choose from" in result.stderr and "sentiment," in result.stderr
    listing = run_data_command("list", "--data_dir", str(tmp_path), path="/usr/bin:/bin")
    assert listing.returncode == 0 and f"data folder: {tmp_path}" in listing.stdout
    assert [line.split() for line in listing.stdout.splitlines()[1:]] == [[name, "missing"] for name in I.GROUPS["all"]]


def test_a_data_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    """``HF_SEQ_DATA`` naming a file: `hf-seq-data fetch` raised FileExistsError; now one line naming the variable,
    the path and the fix (exit 2), through the real command; `list --data_dir <a file>` likewise; and a run reading
    a preset names the variable before any data (in-process)."""
    import os

    afile = tmp_path / "afile"
    afile.write_text("x\n")
    code = "import sys, hf_seq_cli; sys.exit(hf_seq_cli.data(sys.argv[1:]))"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": "/nonexistent", "HF_SEQ_DATA": str(afile)}
    done = subprocess.run([sys.executable, "-c", code, "fetch", "sentiment"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.splitlines() == [
        f"hf-seq-data: error: the data folder {afile} (HF_SEQ_DATA) is a file, not a folder: point HF_SEQ_DATA at a "
        "folder (created if missing), or unset it to use the default"
    ]
    listing = run_data_command("list", "--data_dir", str(afile), path="/usr/bin:/bin")
    assert listing.returncode == 2 and listing.stderr.splitlines() == [
        f"hf-seq-data: error: the data folder {afile} (--data_dir) is a file, not a folder: pass a folder as --data_dir"
    ]
    from hf_seq.toolkit.data import DataError, check_preset_installed

    monkeypatch.setitem(os.environ, "HF_SEQ_DATA", str(afile))
    with pytest.raises(DataError, match=r"^`dataset_name` hf_seq/ptb: the data folder .* \(HF_SEQ_DATA\) is a file"):
        check_preset_installed("hf_seq/ptb")


def test_a_pretrained_folder_is_checked_against_the_pinned_manifest(tmp_path):
    """The pretrained files' SHA-256 ship with the package (hf_seq/toolkit/pretrained.sha256); a folder without its
    ``.complete`` mark or with a file that differs is reinstalled, and ``list`` calls it damaged."""
    assert sorted(I.pretrained_sha256("glove-6b-50d")) == ["glove_6B_50d_emb.npy", "glove_6B_index.parquet"]
    assert len(I.pretrained_sha256("all-MiniLM-L6-v2")) == 5
    folder = tmp_path / "pretrained" / "glove-6b-50d"
    assert I.problems("glove-6b-50d", tmp_path) == [f"{folder} does not exist"]
    folder.mkdir(parents=True)
    for name in I.pretrained_sha256("glove-6b-50d"):
        (folder / name).write_bytes(b"not the vectors")
    found = I.problems("glove-6b-50d", tmp_path)
    assert found[0] == f"{folder} is incomplete (no .complete marker)"
    assert found[1:] == [f"{folder / name} is damaged" for name in I.pretrained_sha256("glove-6b-50d")]
    listing = run_data_command("list", "--data_dir", str(tmp_path), path="/usr/bin:/bin")
    assert f"glove-6b-50d      damaged: {folder} is incomplete" in listing.stdout
