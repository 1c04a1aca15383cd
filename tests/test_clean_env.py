"""The clean environment used by the remote-code tests really lacks hf_seq."""

from conftest import run_clean


def test_clean_python_cannot_import_hf_seq(clean_python, tmp_path):
    result = run_clean(clean_python, "import hf_seq", cwd=tmp_path)
    assert result.returncode != 0
    assert "No module named 'hf_seq'" in result.stderr
    ok = run_clean(clean_python, "import transformers; print(transformers.__version__)", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
