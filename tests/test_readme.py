"""The README's examples run as written (a separate process, from an empty directory, offline), as does the example of
docs/extending.md; the README's shell commands are ones this clone can run as written (as far as can be checked
offline: make targets dry-run, the data items and recipes exist, the wheel is built with the README's command)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO_ROOT

RUNNER = textwrap.dedent(
    """
    import json, sys
    for i, code in enumerate(json.load(open(sys.argv[1]))):
        exec(compile(code, f"README example {i + 1}", "exec"), {"__name__": "__readme__"})
        print(f"example {i + 1} ran", flush=True)
    """
)


README = REPO_ROOT / "README.md"


def readme_examples() -> list[str]:
    """The ```python blocks of the README's "## Examples" section, then those of docs/extending.md."""
    section = README.read_text().split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    extending = (REPO_ROOT / "docs" / "extending.md").read_text()
    return re.findall(r"```python\n(.*?)```", section, flags=re.S) + re.findall(r"```python\n(.*?)```", extending, re.S)


def test_readme_examples_run(tmp_path):
    examples = readme_examples()
    assert len(examples) >= 6, "one example per family and the extension point's"
    (tmp_path / "examples.json").write_text(json.dumps(examples))
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "examples.json")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.count(" ran") == len(examples), result.stdout
    for folder in ("bilstm", "transformer", "bert"):  # the examples that save a folder did
        assert (tmp_path / folder / "config.json").is_file() and (tmp_path / folder / "tokenizer.json").is_file()


def readme_commands() -> list[list[str]]:
    """Every command of the README's ```bash blocks (continuation lines joined, comments dropped, ``&&`` split)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words:
                command, words = (
                    (words[: words.index("&&")], words[words.index("&&") + 1 :]) if "&&" in words else (words, [])
                )
                commands.append(command)
    return commands


def test_the_readme_is_a_front_door_that_fits_on_a_screen():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    pictures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert pictures and all((REPO_ROOT / p).is_file() for p in pictures), pictures  # the demo page's screenshot
    assert "`hf-seq-demo RUN_DIR`" in text  # and the one command that opens it
    assert not [c for c in readme_commands() if c[:2] == ["pip", "install"] and "-e" not in c], "no index serves hf-seq"


@pytest.mark.parametrize("command", readme_commands(), ids=" ".join)
def test_each_readme_shell_command_runs_in_a_clone(command):
    """What can be checked offline without installing or training: a clone's make targets dry-run, the data items
    and recipes named exist, the install and wheel commands are the ones the package builds with."""
    from hf_seq.toolkit.data_install import expand

    program, args = command[0], command[1:]
    if program == "git":
        assert args[:1] == ["clone"] and args[-1] == "hf_seq"
    elif program == "cd":
        assert args == ["hf_seq"] and (REPO_ROOT / "Makefile").is_file()
    elif program == "make":
        ran = subprocess.run(["make", "-n", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert ran.returncode == 0, ran.stderr
    elif program == "pip":  # the wheel's build and install from it: tests/test_wheel.py
        assert args in (["install", "-e", "."], ["wheel", "--no-deps", "-w", "dist", "."]), args
        assert 'name = "hf-seq"' in (REPO_ROOT / "pyproject.toml").read_text()
    elif program == "hf-seq-data":
        assert args[0] == "fetch" and expand(args[1:])
    elif program == "hf-seq-train":
        task, recipe = args[:2]
        listed = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, hf_seq_cli; sys.exit(hf_seq_cli.train(sys.argv[1:]))",
                task,
                "--list-recipes",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert listed.returncode == 0 and re.search(rf"^\s+{recipe}\s", listed.stdout, flags=re.M), listed.stdout
    else:
        raise AssertionError(f"a README command this test does not know how to check: {command}")
