"""Shared pytest fixtures."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the Hub is unreachable here; fail fast instead of retrying
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the train scripts' preprocessing cache (hf_seq.toolkit.preprocessing): one fresh folder per test session, not ~/.cache;
# xdist workers and the scripts the tests start inherit it, and the process that made it removes it at exit
if "HF_SEQ_CACHE" not in os.environ:
    os.environ["HF_SEQ_CACHE"] = tempfile.mkdtemp(prefix="hf_seq_cache_")
    atexit.register(shutil.rmtree, os.environ["HF_SEQ_CACHE"], ignore_errors=True)

torch.set_num_threads(1)  # tiny models: a second thread only adds synchronisation; xdist runs 2 workers

REPO_ROOT = Path(__file__).resolve().parent.parent

# transformers' vendored common-test mixins (imported by tests/test_common_*.py); their files hold no tests to collect
collect_ignore = ["transformers_common"]

# transformers' eager-vs-SDPA grid runs 24 dtype/padding variants per family (~70 s here); the fp16/bf16 two thirds
# run in `make test-all`, the fp32 third stays in the fast suite
HALF_PRECISION_SDPA_GRID = re.compile(r"test_eager_matches_sdpa_inference_\d+_(fp16|bf16)_")


# The files that keep one worker longest (multi-process launches, fresh environments, killed and resumed runs) run
# first: `make test` hands whole files to its 2 workers in collection order (`--no-loadscope-reorder`), and one of
# these left for the end would run alone while the other worker idles.
LONGEST_FILES_FIRST = (
    "test_fsdp.py",
    "test_compat.py",
    "test_resume.py",
    "test_distributed.py",
    "test_run_processes.py",
    "test_export_safety.py",
    "test_onnx_generate.py",
    "test_trainer_heap.py",
    "test_wheel.py",
    "test_atomic_outputs.py",
    "test_train_bert_scripts.py",
    "test_readme.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HALF_PRECISION_SDPA_GRID.search(item.name):
            item.add_marker(pytest.mark.slow)
    first = {name: rank for rank, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: every file keeps its own order


# Tolerance for the outputs of two DIFFERENT model objects with bit-equal weights (reloaded from safetensors, resumed,
# compiled, in another process): MKL's float kernels round differently for the unaligned memory safetensors maps on
# some CPUs (2e-10 seen on AMD EPYC). Weights and token sequences are still compared exactly, and so is one object
# computing twice.
SAME_OUTPUTS = {"rtol": 1e-5, "atol": 1e-6}


def assert_same_outputs(actual: torch.Tensor, expected: torch.Tensor, msg: str | None = None) -> None:
    """Outputs of two model objects with equal weights agree to float rounding (see :data:`SAME_OUTPUTS`)."""
    torch.testing.assert_close(actual, expected, **SAME_OUTPUTS, msg=msg)


# Preamble for remote-code test scripts run with this interpreter: makes `import hf_seq` fail (and asserts it does).
BLOCK_HF_SEQ = """\
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hf_seq" or name.startswith("hf_seq."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
try:
    import hf_seq  # noqa
    raise SystemExit("hf_seq must not be importable here")
except ModuleNotFoundError:
    pass
"""


@pytest.fixture(scope="session")
def clean_python(tmp_path_factory) -> Path:
    """A separate virtual environment WITHOUT hf_seq: its own interpreter, sharing only the dependencies' files.

    The new venv gets a ``.pth`` line with this environment's site-packages directory, so torch/transformers import
    from there, but ``.pth`` files inside that directory (the editable install of hf_seq) are not processed, and
    the repository is not on the path — ``import hf_seq`` fails there (asserted here). Models saved with
    ``save_pretrained`` must load in it through ``trust_remote_code=True`` alone.
    """
    from compat_envs import venv_sharing_deps

    python = venv_sharing_deps(tmp_path_factory.mktemp("clean_venv"))
    probe = run_clean(
        python, "import transformers, torch\ntry:\n    import hf_seq\nexcept ImportError:\n    print('no hf_seq')\n"
    )
    assert probe.stdout.strip().endswith("no hf_seq"), probe.stdout + probe.stderr
    return python


def run_clean(python: Path, code: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` with the clean interpreter, from a directory outside the repository, offline."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(Path(cwd or "/tmp") / ".hf_home"))
    return subprocess.run(
        [str(python), "-c", code],
        cwd=str(cwd or "/tmp"),
        env=env,
        stdin=subprocess.DEVNULL,  # never wait at a prompt (transformers asks "run the custom code? [y/N]" on stdin)
        capture_output=True,
        text=True,
        timeout=timeout,
    )
