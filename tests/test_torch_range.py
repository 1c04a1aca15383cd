"""torch as a range: installing the wheel keeps the user's torch, and the package runs there.

In the cached environment of a torch release (tests/compat_envs.py: that release's default Linux build from the
registry, with this environment's transformers and the rest), ``pip install <wheel>`` — dependencies resolved, not
``--no-deps`` — first as a dry run whose report must plan hf-seq alone, then for real: torch is the same release
afterwards (``pip list`` and ``import torch``), and the model contract (tests/test_contract.py's ``make test`` part)
and a Trainer run with every family (tests/compat_checks.py ``trainer``) pass with the installed package. Done for the
newest torch installable here and for the oldest of the range (both the registry's CUDA builds, which import and run
on a CPU machine).

Slow (a torch download of about 3 GB per environment the first time, then a few minutes each): ``pytest -m slow
tests/test_torch_range.py``, or ``make test-compat``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from compat_envs import (
    TORCH_RELEASES,
    build_wheel,
    clean_env,
    compat_python,
    imported_versions,
    run_contract,
    uninstall_hf_seq,
)

CHECKS = Path(__file__).with_name("compat_checks.py")
# the newest torch installable here and the oldest of the range
RANGE_ENDS = [TORCH_RELEASES[-1], TORCH_RELEASES[0]]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("torch_range_wheel"))


def pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    """This environment's pip installing into ``python``'s environment, dependencies resolved as a user's would be."""
    command = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def installed_torch(python: Path) -> str:
    """The torch version ``pip list`` reports for ``python``'s environment."""
    listed = json.loads(pip(python, "list", "--format", "json").stdout)
    return next(row["version"] for row in listed if row["name"] == "torch")


@pytest.mark.parametrize("torch_release", RANGE_ENDS)
def test_installing_the_wheel_keeps_the_user_s_torch_and_runs_there(torch_release, wheel, tmp_path):
    python = compat_python(f"torch-{torch_release}")
    uninstall_hf_seq(python)
    before = installed_torch(python)
    assert before.split("+")[0] == torch_release, before

    # the plan: hf-seq alone (the former `torch==2.13.0` planned torch-2.13.0+cpu here, replacing the user's build)
    report = tmp_path / "plan.json"
    pip(python, "install", "--dry-run", "--quiet", "--report", str(report), str(wheel))
    planned = {
        item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]
    }
    assert planned == {"hf-seq": "0.1.0"}, planned

    # the install itself, then the same torch
    pip(python, "install", "--quiet", str(wheel))
    assert installed_torch(python) == before
    found_torch, _ = imported_versions(python)  # the build's local label (+cu130) is in torch.__version__ only
    assert found_torch.split("+")[0] == before.split("+")[0] == torch_release, (found_torch, before)

    # the model contract and a Trainer run with the installed package
    print(torch_release, run_contract(python, tmp_path / "contract"))  # shown by `pytest -rA`
    trainer = subprocess.run(
        [str(python), str(CHECKS), "trainer", str(tmp_path / "runs")],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert trainer.returncode == 0, trainer.stdout[-3000:] + trainer.stderr[-3000:]
    assert trainer.stdout.count("ok trainer") == 5, trainer.stdout
