"""One cached virtual environment per transformers release, for the compatibility matrix (tests/test_compat.py).

Each environment (``.compat/transformers-<release>/``, git-ignored) is a ``venv --without-pip`` whose interpreter
sees this environment's site-packages through a ``.pth`` line — torch, numpy, datasets, accelerate are shared, not
installed again — and holds in its own site-packages, which come first on ``sys.path``, only what the release needs
that this environment does not have: transformers itself and the versions it pins of ``huggingface_hub``,
``tokenizers`` and ``kernels`` (e.g. 5.0–5.12 want ``huggingface_hub<2`` and ``tokenizers<=0.23.0``). pip resolves that from the
registry, run from this environment against the new interpreter (``pip --python``). A release this environment
already has (5.25.0 here) installs nothing. A ``.ready`` stamp makes the next run reuse the environment.

``install_hf_seq(python, wheel)`` puts the package itself (a wheel built once per test session) into an environment;
the editable install of this environment is invisible there (``.pth`` files of a directory named by a ``.pth`` line
are not processed).

The torch axis works the same way: ``.compat/torch-<release>/`` holds that torch release (the registry's default
Linux build, with the CUDA libraries it depends on; it imports and runs on a CPU machine) and whatever of torch's own
dependencies that release pins differently (``sympy``, ``triton``); transformers and everything else are this
environment's. ``.compat/torch-<torch>-transformers-<release>/`` holds both, for the corners of the table (the oldest
torch with the oldest transformers). A torch release this environment already has (2.13.0 here, the CPU build
``make`` installs) installs nothing.

Run directly to build environments ahead of the tests: ``python tests/compat_envs.py 5.0.0 5.25.0 torch-2.11.0
torch-2.11.0+5.0.0`` (a bare release is a transformers release).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("HF_SEQ_COMPAT_CACHE", ROOT / ".compat"))

# The supported range's releases that the matrix covers (the latest patch of these minors), oldest first. The range
# itself is declared in pyproject.toml and checked at import by hf_seq/compat.py.
RELEASES = ["5.0.0", "5.6.2", "5.12.1", "5.18.0", "5.21.1", "5.23.0", "5.24.0", "5.25.0"]
# The release `make` installs (the Makefile's TRANSFORMERS_RELEASE): the one tests/transformers_common was vendored from
VENDORED_RELEASE = RELEASES[-1]
# The last release below the range: importing hf_seq or loading a folder there must fail with one clear error.
BELOW_RANGE = "4.57.6"
# What `make test` (CI) runs: the oldest release of the range. The release installed in this environment (the newest
# the range admits when the venv was made) is what the rest of the suite runs on, the wheel included (test_wheel.py).
CI_RELEASES = [RELEASES[0]]


# The torch releases of the torch axis, oldest first: the oldest of the range pyproject.toml declares
# (``torch>=2.11``, hf_seq/compat.py TORCH_MINIMUM_VERSION; also the accelerator machine's), the one `make` installs
# (the local CPU wheel), the newest installable here. Each runs with this environment's transformers (the newest).
TORCH_RELEASES = ["2.11.0", "2.13.0", "2.14.1"]
# The torch release `make` installs (the Makefile's TORCH_RELEASE, a CPU build): its environment installs nothing
DEVELOPMENT_TORCH = "2.13.0"
# Both axes at once: the oldest torch with the oldest transformers of the range
TORCH_TRANSFORMERS_PAIRS = [(TORCH_RELEASES[0], RELEASES[0])]
# The last torch release below the range (docs/compat.md: where the model contract stops passing): importing hf_seq
# or loading a folder there must fail with one clear error
BELOW_TORCH_RANGE = "2.10.0"


def selected_releases() -> list[str]:
    """Releases named by ``HF_SEQ_COMPAT_RELEASES`` (comma-separated, ``all`` or ``none``: the torch axis alone),
    else :data:`CI_RELEASES`."""
    chosen = os.environ.get("HF_SEQ_COMPAT_RELEASES", "").strip()
    if chosen == "all":
        return RELEASES
    if chosen == "none":
        return []
    return [r.strip() for r in chosen.split(",") if r.strip()] or CI_RELEASES


def selected_torch_environments() -> list[str]:
    """The torch axis: environment names (``torch-2.11.0``, ``torch-2.11.0+5.0.0``) chosen by ``HF_SEQ_COMPAT_TORCH``
    (comma-separated torch releases or ``torch+transformers`` pairs, or ``all``: :data:`TORCH_RELEASES` and
    :data:`TORCH_TRANSFORMERS_PAIRS`); none by default, so `make test` runs no torch environment."""
    chosen = os.environ.get("HF_SEQ_COMPAT_TORCH", "").strip()
    if chosen == "all":
        names = [*TORCH_RELEASES, *(f"{t}+{r}" for t, r in TORCH_TRANSFORMERS_PAIRS)]
    else:
        names = [name.strip() for name in chosen.split(",") if name.strip()]
    return [f"torch-{name}" for name in names]


def parse_environment(name: str) -> tuple[str | None, str | None]:
    """``(torch release, transformers release)`` of an environment name; None: this environment's.
    ``5.0.0`` -> (None, "5.0.0"), ``torch-2.11.0`` -> ("2.11.0", None), ``torch-2.11.0+5.0.0`` -> ("2.11.0",
    "5.0.0")."""
    if not name.startswith("torch-"):
        return None, name
    torch_release, _, release = name[len("torch-") :].partition("+")
    return torch_release, release or None


def environment_dir(name: str) -> Path:
    torch_release, release = parse_environment(name)
    parts = ([f"torch-{torch_release}"] if torch_release else []) + ([f"transformers-{release}"] if release else [])
    return CACHE / "-".join(parts)


def env_python(release: str) -> Path:
    return environment_dir(release) / "bin" / "python"


def site_packages(python: Path) -> Path:
    """The ``purelib`` folder of ``python``'s environment."""
    found = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(found.stdout.strip())


def venv_sharing_deps(env_dir: Path, clear: bool = False) -> Path:
    """A ``venv --without-pip`` at ``env_dir`` whose path ends with this environment's site-packages (one ``.pth``
    line): what it installs itself comes first, the rest (torch, datasets, ...) is shared. ``.pth`` files inside the
    shared folder (the editable install of hf_seq) are not processed there. Returns its interpreter."""
    subprocess.run(
        [sys.executable, "-m", "venv", *(["--clear"] if clear else []), "--without-pip", str(env_dir)], check=True
    )
    python = env_dir / "bin" / "python"
    Path(site_packages(python), "shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def release_requirement(release: str) -> str:
    """What an environment installs: the release with its extra for the ``kernels`` package (``hub-kernels`` up to
    5.0, ``kernels`` from 5.6 on; pip skips the one a release lacks), so that the ``kernels`` it imports at start-up
    (when installed) is a version it supports. This environment's ``kernels`` (a dependency of transformers from 5.25
    on) is shared with every environment, and an older release fails to import beside a newer one (5.0.0 with
    kernels 0.19, 5.6.2 and 5.12.1 too: "Either a revision or a version must be specified")."""
    return f"transformers[hub-kernels,kernels]=={release}"


def imported_versions(python: Path) -> tuple[str, str]:
    """``(torch.__version__, transformers.__version__)`` as ``python`` imports them."""
    found = subprocess.run(
        [str(python), "-c", "import torch, transformers; print(torch.__version__, transformers.__version__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return found[0], found[1]


def compat_python(release: str) -> Path:
    """The interpreter of the environment ``release`` names (a transformers release, ``torch-<release>`` or
    ``torch-<release>+<transformers release>``: :func:`parse_environment`), created on first use."""
    torch_release, transformers_release = parse_environment(release)
    env = environment_dir(release)
    python = env / "bin" / "python"
    stamp = env / ".ready"
    shared = sysconfig.get_paths()["purelib"]
    requirements = [f"torch=={torch_release}"] if torch_release else []
    requirements += [release_requirement(transformers_release)] if transformers_release else []
    key = "".join(f"{line}\n" for line in (*requirements, shared))
    if stamp.is_file() and stamp.read_text() == key and python.exists():
        return python
    venv_sharing_deps(env, clear=True)
    pip(python, "install", *requirements)
    found_torch, found_transformers = imported_versions(python)
    if torch_release and found_torch.split("+")[0] != torch_release:
        raise RuntimeError(f"{env}: torch {found_torch} imports instead of {torch_release}")
    if transformers_release and found_transformers != transformers_release:
        raise RuntimeError(f"{env}: transformers {found_transformers} imports instead of {transformers_release}")
    stamp.write_text(key)
    return python


def pip(python: Path, *args: str) -> None:
    """This environment's pip, installing into ``python``'s environment."""
    command = [sys.executable, "-m", "pip", "--python", str(python), "-q", "--disable-pip-version-check", *args]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")


def clean_env(home: Path) -> dict:
    """The environment of a check run in another interpreter: no PYTHON* variables, offline, one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(home / ".hf_home"), OMP_NUM_THREADS="1")
    return env


# The model contract's known failures on a torch release of the range (docs/compat.md): exactly these fail there,
# every other test passes. torch 2.11's dynamo gives the RNN seq2seq bridge's final LSTM cell state a 4-d fake shape
# (``(1, 1, B, H)``; eager: ``(L * D, B, H)``), so its forward neither compiles with fullgraph nor exports; and
# transformers' own MarianMTModel breaks the graph of its inference forward there.
CONTRACT_KNOWN_FAILURES = {
    "2.11.0": {
        *(
            f"test_no_graph_breaks[{h}-{m}]"
            for h in ("RNNSeq2SeqModel", "RNNSeq2SeqForConditionalGeneration")
            for m in ("train", "inference")
        ),
        "test_no_graph_breaks[peer-MarianMTModel-inference]",
        "test_compiled_training_step_matches_eager[RNNSeq2SeqModel-aot_eager]",
        "test_compiled_training_step_matches_eager[RNNSeq2SeqForConditionalGeneration-aot_eager]",
        "test_export_and_onnx_match_eager[RNNSeq2SeqModel]",
        "test_export_and_onnx_match_eager[RNNSeq2SeqForConditionalGeneration]",
    },
}


# The families whose inductor compile (tests/compat_checks.py ``compile``) fails on a torch release of the range, for
# the reason above: exactly these fail there
COMPILE_KNOWN_FAILURES = {"2.11.0": {"RNNSeq2SeqForConditionalGeneration"}}


def run_contract(python: Path, cwd: Path, timeout: int = 3600) -> str:
    """tests/test_contract.py (its ``make test`` part) run by ``python`` from the empty folder ``cwd``, where the clone's
    root is not on the path: ``import hf_seq`` is the package installed in that environment (asserted). Returns the
    summary line. The tests that fail must be exactly the release's :data:`CONTRACT_KNOWN_FAILURES` (none for most),
    and at least 100 must pass; otherwise an ``AssertionError`` with pytest's report."""
    cwd.mkdir(parents=True, exist_ok=True)
    env = clean_env(cwd)
    where = subprocess.run(
        [str(python), "-c", "import hf_seq, torch; print(hf_seq.__file__, torch.__version__)"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "site-packages" in where.stdout, where.stdout + where.stderr[-3000:]
    known = CONTRACT_KNOWN_FAILURES.get(where.stdout.split()[-1].split("+")[0], set())
    command = [str(python), "-m", "pytest", str(ROOT / "tests" / "test_contract.py"), "-q", "-m", "not slow"]
    command += ["-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp", str(cwd / "pytest"), "-o", "addopts="]
    command += ["-rf"]
    result = subprocess.run(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    failed = set(re.findall(r"^FAILED \S*test_contract\.py::(\S+)", result.stdout, re.M))
    report = result.stdout[-6000:] + result.stderr[-3000:]
    assert failed == known, f"failed: {sorted(failed - known)}, known but passed: {sorted(known - failed)}\n{report}"
    assert result.returncode == (1 if known else 0), report
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 100, summary
    return summary


WHEEL_SOURCES = ("pyproject.toml", "README.md", "hf_seq", "hf_seq_cli.py", "train_scripts", "configs")


def build_wheel(out_dir: Path) -> Path:
    """``pip wheel --no-deps`` of the package as it is in the working tree, built from a copy of its sources (an
    in-tree build would write ``build/`` and ``*.egg-info`` into the clone), with this environment's setuptools (no
    build isolation: no download)."""
    source = out_dir / "src"
    source.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in WHEEL_SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out_dir)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, text=True)
    (built,) = out_dir.glob("hf_seq-*.whl")
    return built


def install_hf_seq(python: Path, wheel: Path) -> None:
    """Install the package (not its dependencies) into ``python``'s environment, replacing an earlier install."""
    pip(python, "install", "--no-deps", "--force-reinstall", "--no-warn-conflicts", str(wheel))


def uninstall_hf_seq(python: Path) -> None:
    if any(site_packages(python).glob("hf_seq-*.dist-info")):
        pip(python, "uninstall", "-y", "hf-seq")


if __name__ == "__main__":
    for name in sys.argv[1:] or RELEASES:
        print(name, compat_python(name))
