"""The wheel as a user gets it: built with ``pip wheel``, installed non-editable into a fresh virtual environment, and
run from an empty folder outside the clone — the recipes travel with it, ``hf-seq-train`` lists them from the
installed copy, and nothing is installed under a generic top-level name."""

from __future__ import annotations

import os
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
    assert top_level == {"hf_seq"}
    recipes = {name.removeprefix("hf_seq/recipes/") for name in names if name.startswith("hf_seq/recipes/")}
    assert recipes == {p.name for p in (ROOT / "configs").glob("*.json")} | {
        f"accelerate/{p.name}" for p in (ROOT / "configs/accelerate").iterdir() if p.suffix in (".yaml", ".json")
    }
    scripts = {name for name in names if name.startswith("hf_seq/train_scripts/")}
    assert scripts == {f"hf_seq/train_scripts/{p.name}" for p in (ROOT / "train_scripts").glob("*.py")}
    entry_points = next(name for name in names if name.endswith(".dist-info/entry_points.txt"))
    assert "hf-seq-train = hf_seq.train_scripts.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed non-editable; the dependencies come from this environment through a
    ``.pth`` line (as ``clean_python`` in conftest.py), whose own ``.pth`` files — the editable install — are not
    processed there."""
    env_dir = tmp_path_factory.mktemp("wheel_venv")
    install_hf_seq(venv_sharing_deps(env_dir), wheel)
    return env_dir


def run_installed(env_dir: Path, args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", HF_HOME=str(cwd / ".hf_home"))
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
