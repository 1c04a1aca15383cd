"""The README's examples run as written (a separate process, from an empty directory, offline)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

from conftest import REPO_ROOT

RUNNER = textwrap.dedent(
    """
    import json, sys
    for i, code in enumerate(json.load(open(sys.argv[1]))):
        exec(compile(code, f"README example {i + 1}", "exec"), {"__name__": "__readme__"})
        print(f"example {i + 1} ran", flush=True)
    """
)


def readme_examples() -> list[str]:
    """The ```python blocks of the README's "## Examples" section."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n## Examples\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_readme_examples_run(tmp_path):
    examples = readme_examples()
    assert len(examples) >= 5, "one example per family"
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
