"""The supported transformers and torch ranges (hf_seq/compat.py, docs/compat.md).

* Statically: every modelling and configuration file imports directly every sibling its siblings import (5.0–5.6's
  remote-code loader copies only those into its module cache).
* The matrix: in one cached environment per release (tests/compat_envs.py), folders saved here (this environment's
  transformers) load through ``trust_remote_code=True`` for every head of every family — outputs close to the saving
  process, greedy / uncached greedy / beam ``generate()`` token-identical, every other head of the folder's
  ``auto_map`` loading the pretrained base weights unchanged — and a short Trainer run + ``evaluate()`` works with the
  installed package. ``make test`` runs the oldest release of the range (tests/compat_envs.CI_RELEASES; the
  installed one is the rest of the suite's); ``make test-compat`` runs every release (``HF_SEQ_COMPAT_RELEASES=all``).
* Output capturing on the release, with the installed package: BERT's and the Transformer's hidden states and
  attentions (the shim over the release's decorator and recorder registry), a registered attention function, and
  the refusal of a mistyped keyword.
* Below the range (4.57.6, ``make test-compat`` only): ``import hf_seq`` and loading a folder raise the one clear
  error.
* The torch axis (``HF_SEQ_COMPAT_TORCH``, ``make test-compat`` only): in one cached environment per torch release of
  tests/compat_envs.TORCH_RELEASES (with this environment's transformers) and for the oldest torch with the oldest
  transformers, the same round trip, Trainer, capturing and ``hf-seq-train`` checks as above and one head per family
  compiled with the default backend, plus, for the torch releases alone, the model contract (tests/test_contract.py
  run there against the installed wheel: no graph breaks, ``torch.compile(fullgraph=True)`` training steps equal to
  eager, ``torch.export`` and ONNX export, ...). Below the torch range, ``import hf_seq`` and loading a folder raise one clear line (a version
  string standing in for an old torch, in ``make test``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from compat_envs import (
    BELOW_RANGE,
    BELOW_TORCH_RANGE,
    COMPILE_KNOWN_FAILURES,
    DEVELOPMENT_TORCH,
    RELEASES,
    TORCH_RELEASES,
    VENDORED_RELEASE,
    build_wheel,
    compat_python,
    imported_versions,
    install_hf_seq,
    parse_environment,
    run_contract,
    selected_releases,
    selected_torch_environments,
    uninstall_hf_seq,
)
from tiny_models import ALL_HEADS, EOS, build_tokenizer, main_output, model_inputs, tiny_model
from transformers.dynamic_module_utils import get_relative_imports

import hf_seq
from hf_seq import compat

PACKAGE = Path(hf_seq.__file__).parent
# transformers releases (HF_SEQ_COMPAT_RELEASES) and torch environments (HF_SEQ_COMPAT_TORCH): tests/compat_envs.py
ENVIRONMENTS = selected_releases() + selected_torch_environments()
CHECKS = Path(__file__).with_name("compat_checks.py")
GENERATE = {
    "greedy": dict(max_new_tokens=5, do_sample=False),
    "greedy_uncached": dict(max_new_tokens=5, do_sample=False, use_cache=False),
    "beam": dict(max_new_tokens=5, num_beams=3, do_sample=False),
}


def test_remote_code_files_import_every_sibling_they_need_directly():
    """The loaded file must name every sibling of its import closure: a file that only a sibling imports is missing
    from the module cache of transformers 5.0–5.6 (FileNotFoundError when a folder loads there)."""
    direct = {path.stem: set(get_relative_imports(path)) for path in PACKAGE.glob("*.py")}

    def closure(name: str, seen: set) -> set:
        for sibling in direct.get(name, ()):
            if sibling not in seen:
                seen.add(sibling)
                closure(sibling, seen)
        return seen

    loaded = sorted(n for n in direct if n.startswith(("modeling_", "configuration_")) and n != "modeling_utils")
    assert len(loaded) >= 8, loaded
    for name in loaded:
        missing = closure(name, set()) - direct[name]
        assert not missing, f"{name}.py must import {sorted(missing)} directly (its siblings import them)"
        assert "compat" in direct[name], f"{name}.py must import .compat (the release check)"


def test_version_check_names_the_installed_release_and_the_range():
    compat.check_transformers_version("5.0.0")
    compat.check_transformers_version("5.30.0.dev0")
    with pytest.raises(compat.UnsupportedTransformersError, match=r"transformers 4\.57\.6 is installed.*>=5\.0,<6"):
        compat.check_transformers_version("4.57.6")
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert f'"transformers{compat.SUPPORTED_RANGE}"' in pyproject


def test_torch_version_check_names_the_installed_release_and_the_range():
    for supported in ("2.11.0", "2.11.0+cu130", "2.13.0+cpu", "2.11.0a0+git1234", "3.0.0.dev20270101"):
        compat.check_torch_version(supported)
    for old in ("2.10.0", "2.10.0+cu128", "2.6.0", "1.13.1"):
        with pytest.raises(
            compat.UnsupportedTorchError, match=rf"^hf_seq needs torch>=2\.11, but torch {re.escape(old)} is"
        ):
            compat.check_torch_version(old)
    assert issubclass(compat.UnsupportedTorchError, ImportError)
    assert compat.TORCH_SUPPORTED_RANGE == f">={'.'.join(compat.TORCH_MINIMUM_VERSION.split('.')[:2])}"


def test_torch_is_a_range_with_a_lower_bound_only_and_make_installs_the_development_release():
    """pyproject.toml declares ``torch>=<the oldest release of the matrix>`` and no cap; the Makefile installs the
    development release (the local CPU build) before the package, and that release lies inside the range, as does
    the torch installed here (whichever release an install from pyproject got)."""
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    with open(PACKAGE.parent / "pyproject.toml", "rb") as file:
        dependencies = [Requirement(line) for line in tomllib.load(file)["project"]["dependencies"]]
    (requirement,) = [r for r in dependencies if r.name == "torch"]
    assert str(requirement.specifier) == compat.TORCH_SUPPORTED_RANGE
    assert all(spec.operator == ">=" for spec in requirement.specifier), requirement
    assert TORCH_RELEASES[0] == compat.TORCH_MINIMUM_VERSION
    assert all(requirement.specifier.contains(release) for release in TORCH_RELEASES)
    assert not requirement.specifier.contains(BELOW_TORCH_RANGE)
    makefile = (PACKAGE.parent / "Makefile").read_text()
    assert re.search(r"^TORCH_RELEASE := (\S+)$", makefile, re.M).group(1) == DEVELOPMENT_TORCH
    assert requirement.specifier.contains(DEVELOPMENT_TORCH)
    install = [line for line in makefile.splitlines() if "pip install" in line]
    torch_line = next(i for i, line in enumerate(install) if "'torch==$(TORCH_RELEASE)'" in line)
    package_line = next(i for i, line in enumerate(install) if "-e '.[" in line)
    assert torch_line < package_line, install
    # the torch installed here lies in the range (`make` installs the development release; `pip install -e
    # '.[test]'` whatever release the range lets the registry give)
    assert requirement.specifier.contains(torch.__version__.split("+")[0]), torch.__version__


def test_below_the_torch_range_import_and_loading_raise_one_clear_line(tmp_path):
    """``import hf_seq`` and loading a saved folder under a torch whose version string is below the range (the
    version string is what hf_seq reads), in a new process: one line naming the installed release and the range, and
    that line is all a user sees after the traceback."""
    folder = tmp_path / "classifier"
    tiny_model(hf_seq.RNNForSequenceClassification, 20).save_pretrained(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / ".hf_home"))
    argv = [str(CHECKS), "below_torch_range", str(folder), "2.10.0+cu128"]
    # the checks (caught and printed), then the import once more, uncaught: the traceback as a user sees it
    script = (
        f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path(sys.argv[0], run_name='__main__')\nimport hf_seq\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    supported = compat.TORCH_SUPPORTED_RANGE
    expected = (
        f"hf_seq needs torch{supported}, but torch 2.10.0+cu128 is installed: upgrade it (pip install "
        f"'torch{supported}') to use hf_seq or to load a model folder saved by hf_seq."
    )
    lines = result.stdout.splitlines()
    assert lines == [f"ok import refused: {expected}", f"ok load refused: {expected}"], result.stdout + result.stderr
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == f"hf_seq.compat.UnsupportedTorchError: {expected}", result.stderr


def test_make_installs_the_release_the_common_tests_come_from():
    """The Makefile's pinned release, the vendored common tests' release (tests/transformers_common/PROVENANCE.md)
    and the newest release of the matrix are one release."""
    makefile = (PACKAGE.parent / "Makefile").read_text()
    assert re.search(r"^TRANSFORMERS_RELEASE := (\S+)$", makefile, re.M).group(1) == VENDORED_RELEASE
    provenance = (PACKAGE.parent / "tests" / "transformers_common" / "PROVENANCE.md").read_text()
    assert f"transformers **{VENDORED_RELEASE}** source distribution" in provenance
    assert RELEASES[-1] == VENDORED_RELEASE


def test_cache_helpers_follow_the_installed_release():
    from transformers.modeling_outputs import CausalLMOutputWithPast

    output = CausalLMOutputWithPast(logits=torch.zeros(1), **compat.cache_output("state"))
    assert compat.output_cache(output) == "state" and getattr(output, compat.CACHE_NAME) == "state"


def save_folders(root: Path) -> list[dict]:
    """Every head of every family saved into its own folder with its inputs and the outputs of this process."""
    tokenizer = build_tokenizer()
    specs = []
    for family, head in ALL_HEADS:
        # unidirectional: the folder of every recurrent head must also load as the causal LM
        overrides = {"bidirectional": False} if family == "rnn" else {}
        model = tiny_model(head, len(tokenizer), seed=1, **overrides)
        folder = root / f"{family}-{head.__name__}"
        model.save_pretrained(folder)
        batch = model_inputs(model, tokenizer)
        with torch.no_grad():
            expected = {"output": main_output(model(**batch))}
        inputs = {"forward": batch}
        generate = {}
        if hasattr(model, "generate") and model.can_generate():
            if model.config.is_encoder_decoder:
                inputs["generate"] = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
            else:  # unpadded prompts (a recurrent LM reads a left-padded prompt as well, but keep it plain)
                inputs["generate"] = {"input_ids": torch.tensor([[2, 7, 8], [2, 9, 10]])}
            for name, kwargs in GENERATE.items():
                expected[name] = model.generate(**inputs["generate"], **kwargs, eos_token_id=EOS, pad_token_id=0)
                generate[name] = {**kwargs, "eos_token_id": EOS, "pad_token_id": 0}
            assert torch.equal(expected["greedy"], expected["greedy_uncached"]), head.__name__
        torch.save(inputs, folder / "inputs.pt")
        torch.save(expected, folder / "expected.pt")
        specs.append({"name": head.__name__, "auto": head._auto_class, "folder": str(folder), "generate": generate})
    return specs


def run_in(python: Path, *args: str, cwd: Path, timeout: int = 600) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(cwd / ".hf_home"), OMP_NUM_THREADS="1")
    result = subprocess.run(
        [str(python), str(CHECKS), *args],
        cwd=str(cwd),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result.stdout


@pytest.fixture(scope="module")
def saved_folders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compat_folders")
    (root / "specs.json").write_text(json.dumps(save_folders(root)))
    return root, root / "specs.json"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("compat_wheel"))


@pytest.mark.parametrize("release", ENVIRONMENTS)
def test_folders_saved_here_load_with_remote_code_on_the_release(release, saved_folders, tmp_path):
    python = compat_python(release)
    uninstall_hf_seq(python)  # only transformers: the folders' own code must do everything
    root, specs = saved_folders
    out = run_in(python, "remote", str(specs), cwd=tmp_path)
    heads = json.loads(specs.read_text())
    assert out.count(" outputs") == len(heads) == len(ALL_HEADS), out
    others = sum(len(json.loads(Path(h["folder"], "config.json").read_text())["auto_map"]) - 2 for h in heads)
    assert out.count(" loads as ") == others > 0, out  # every other head of each folder


@pytest.mark.parametrize("release", ENVIRONMENTS)
def test_trainer_runs_and_evaluates_with_the_installed_package_on_the_release(release, wheel, tmp_path):
    python = compat_python(release)
    install_hf_seq(python, wheel)
    out = run_in(python, "trainer", str(tmp_path / "runs"), cwd=tmp_path)
    assert out.count("ok trainer") == 5, out


@pytest.mark.parametrize("release", ENVIRONMENTS)
def test_hidden_states_and_attentions_through_the_release_s_capturing(release, wheel, tmp_path):
    """hf_seq/compat.py's shim over the release's decorator (``capture_outputs`` / ``check_model_inputs``) and its
    recorder registry: BERT's and the Transformer's ``output_hidden_states`` / ``output_attentions`` (call, config,
    tuple; sdpa, eager and a function registered with ``AttentionInterface``) equal what forward hooks record, BERT's
    equal transformers' own BertModel, ``generate()`` returns them per step, and a mistyped keyword is refused."""
    python = compat_python(release)
    install_hf_seq(python, wheel)
    out = run_in(python, "outputs", cwd=tmp_path)
    # per family: sdpa and the registered function (call, tuple), eager (call, config, tuple)
    assert out.count("ok outputs bert ") == 7 + 1 and out.count("ok outputs transformer ") == 7, out
    assert out.count("ok typo refused") == 2 and out.count("ok outputs generate") == 1, out


@pytest.mark.parametrize("release", ENVIRONMENTS)
def test_hf_seq_train_with_checkpoints_and_resume_on_the_release(release, wheel, tmp_path):
    """The installed console code on the release: a shipped recipe by name, atomic checkpoints rotated to
    ``save_total_limit``, the final save with the modelling code, and a resume of the finished run's last checkpoint
    that trains nothing more."""
    python = compat_python(release)
    install_hf_seq(python, wheel)
    rows = [f"{'good fine' if i % 2 else 'bad dull'} film {i % 5},{'pos' if i % 2 else 'neg'}" for i in range(40)]
    (tmp_path / "train.csv").write_text("review,stars\n" + "\n".join(rows[:32]) + "\n")
    (tmp_path / "dev.csv").write_text("review,stars\n" + "\n".join(rows[32:]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / ".hf_home"), OMP_NUM_THREADS="1")
    command = [str(python), "-m", "hf_seq.train_scripts", "classifier", "sentiment_bilstm", "--train_file", "train.csv"]
    command += ["--validation_file", "dev.csv", "--text_column_name", "review", "--label_column_name", "stars"]
    command += ["--max_steps", "6", "--per_device_train_batch_size", "8", "--save_strategy", "steps"]
    command += ["--save_steps", "2", "--save_total_limit", "1", "--eval_strategy", "no", "--output_dir", "out"]
    command += ["--load_best_model_at_end", "false", "--disable_tqdm", "true"]
    for extra in ([], ["--resume_from_checkpoint", "last"]):
        run = subprocess.run(
            [*command, *extra],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert run.returncode == 0, run.stderr[-4000:]
        results = json.loads((tmp_path / "out" / "results.json").read_text())
        assert results["train_steps"] == 6
        assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-6"]
        assert (tmp_path / "out" / "modeling_rnn.py").is_file() and (tmp_path / "out" / "compat.py").is_file()


@pytest.mark.skipif(
    os.environ.get("HF_SEQ_COMPAT_RELEASES") != "all",
    reason="make test-compat only (a venv of its own); the message itself: test_version_check_...",
)
def test_below_the_range_import_and_loading_raise_one_clear_error(wheel, tmp_path):
    python = compat_python(BELOW_RANGE)
    install_hf_seq(python, wheel)
    folder = tmp_path / "classifier"
    tiny_model(hf_seq.RNNForSequenceClassification, 20).save_pretrained(folder)
    out = run_in(python, "below_range", str(folder), cwd=tmp_path)
    assert out.count("refused:") == 2, out


TORCH_ENVIRONMENTS = selected_torch_environments()
# the contract's tests are written against the installed transformers (as the rest of the suite): torch releases alone
TORCH_ONLY = [name for name in TORCH_ENVIRONMENTS if parse_environment(name)[1] is None]


@pytest.mark.parametrize("release", TORCH_ONLY)
def test_model_contract_on_the_torch_release(release, wheel, tmp_path):
    """tests/test_contract.py (its ``make test`` part: no graph breaks, ``torch.compile(fullgraph=True)`` training
    steps equal to eager, ``torch.export`` and ONNX export through onnxruntime, gradient checkpointing, output flags,
    caches, Trainer label smoothing, bad input) run by the environment's interpreter against the installed wheel, with
    this environment's transformers."""
    python = compat_python(release)
    install_hf_seq(python, wheel)
    torch_release, transformers_release = parse_environment(release)
    found_torch, found_transformers = imported_versions(python)
    assert found_torch.split("+")[0] == torch_release, found_torch
    assert found_transformers == (transformers_release or VENDORED_RELEASE), found_transformers
    print(release, run_contract(python, tmp_path))  # shown by `pytest -rA`


@pytest.mark.parametrize("release", TORCH_ENVIRONMENTS)
def test_every_family_compiles_fullgraph_with_the_default_backend_on_the_torch_release(release, wheel, tmp_path):
    """One head per family of the installed wheel through ``torch.compile(model, fullgraph=True)`` with inductor (C++
    code generation): training loss and gradients, and the inference logits of a padded batch, equal to eager; the
    heads that fail are exactly the release's ``COMPILE_KNOWN_FAILURES``."""
    python = compat_python(release)
    install_hf_seq(python, wheel)
    out = run_in(python, "compile", cwd=tmp_path, timeout=3600)
    failed = set(re.findall(r"^failed compile inductor (\S+)", out, re.M))
    assert failed == COMPILE_KNOWN_FAILURES.get(parse_environment(release)[0], set()), out
    assert out.count("ok compile inductor ") == 5 - len(failed), out


@pytest.mark.skipif(
    os.environ.get("HF_SEQ_COMPAT_TORCH") != "all",
    reason="make test-compat only (a torch download of its own); the message itself: test_below_the_torch_range_...",
)
def test_below_the_torch_range_on_the_last_release_below_it(wheel, tmp_path):
    """The real release below the range (its registry build): ``import hf_seq`` and loading a folder raise the one
    clear line."""
    python = compat_python(f"torch-{BELOW_TORCH_RANGE}")
    install_hf_seq(python, wheel)
    folder = tmp_path / "classifier"
    tiny_model(hf_seq.RNNForSequenceClassification, 20).save_pretrained(folder)
    out = run_in(python, "below_torch_range", str(folder), cwd=tmp_path)
    assert out.count("refused:") == 2 and f"torch {BELOW_TORCH_RANGE}" in out, out
