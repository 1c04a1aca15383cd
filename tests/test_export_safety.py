"""Exports never delete what they did not write, and a folder they cannot export is one line before any work.

``hf-seq-export onnx RUN RUN --force`` (and ``ctranslate2``) used to delete the trained run; ``--force`` now replaces
only an earlier export (its manifest), and an output folder that is the source, lies inside or around it, or holds a
trained model or run is refused whatever ``--force`` says (hf_seq/toolkit/export_folders.py). The trained files are
compared byte for byte after each refusal. The refusals come before any export work, so no graph is built here
except where a test says so."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_models import build_tokenizer, tiny_model

import hf_seq
from hf_seq.toolkit.export import ExportError, average_checkpoints, main, to_ctranslate2, to_onnx
from hf_seq.toolkit.export_folders import check_output_dir
from hf_seq.toolkit.onnx_runtime import OnnxExportError

EXPORTER = str(Path(sys.executable).parent / "hf-seq-export")
REFUSED = (ExportError, OnnxExportError)


def tiny_transformer(vocab_size: int) -> hf_seq.TransformerForConditionalGeneration:
    return tiny_model(hf_seq.TransformerForConditionalGeneration, vocab_size)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def make_run(folder: Path, tokenizer) -> Path:
    """A trained run as hf-seq-train leaves it: model, tokenizer, trainer state, results, card, two checkpoints."""
    model = tiny_transformer(len(tokenizer))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for name in ("checkpoint-2", "checkpoint-4"):
        model.save_pretrained(folder / name)
        (folder / name / "trainer_state.json").write_text(json.dumps({"global_step": int(name[-1])}))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    (folder / "results.json").write_text(json.dumps({"eval_loss": 1.0}))
    (folder / "README.md").write_text("# a trained model\n")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def run(tmp_path, tokenizer) -> Path:
    return make_run(tmp_path / "runs" / "translation", tokenizer)


EXPORTS = {
    "onnx": lambda source, out, force: to_onnx(source, out, force=force),
    "ctranslate2": lambda source, out, force: to_ctranslate2(source, out, force=force),
}


def output_places(run: Path) -> dict[str, Path]:
    return {
        "the run itself": run,
        "inside the run": run / "onnx",
        "a checkpoint of the run": run / "checkpoint-4",
        "the parent of the run": run.parent,
    }


@pytest.mark.parametrize("exporter", sorted(EXPORTS))
def test_an_export_never_replaces_its_source_or_a_trained_run_whatever_force_says(exporter, run, tmp_path):
    pytest.importorskip(exporter if exporter == "ctranslate2" else "onnxruntime")
    before = snapshot(run.parent)
    for place, out in output_places(run).items():
        for force in (False, True):
            with pytest.raises(REFUSED, match="never") as err:
                EXPORTS[exporter](run, out, force)
            assert str(out) in str(err.value), place
    # another trained run (not the source) is never replaced either
    other = make_run(tmp_path / "other", build_tokenizer())
    other_before = snapshot(other)
    with pytest.raises(REFUSED, match=r"holds a trained model or run \(trainer_state.json\)"):
        EXPORTS[exporter](run, other, True)
    assert snapshot(run.parent) == before and snapshot(other) == other_before


def test_average_never_writes_into_a_checkpoint_or_its_run(run):
    before = snapshot(run)
    checkpoints = [run / "checkpoint-2", run / "checkpoint-4"]
    for out, message in (
        (checkpoints[0], "is one of the checkpoints being averaged"),
        (run, "contains one of the checkpoints being averaged"),  # averaging into the checkpoints' run
        (checkpoints[1] / "avg", "lies inside one of the checkpoints"),
    ):
        with pytest.raises(ExportError, match=message):
            average_checkpoints(checkpoints, out, force=True)
    assert snapshot(run) == before
    average_checkpoints(checkpoints, run / "averaged")  # beside the checkpoints, inside the run: a new folder
    assert (run / "averaged" / "averaged_from.json").is_file()
    again = average_checkpoints(checkpoints, run / "averaged", force=True)  # its own earlier export: replaced
    assert again == run / "averaged" and not list(run.glob(".averaged*"))  # no staging or old folder left


def test_force_replaces_only_an_earlier_export(run, tmp_path, tokenizer):
    pytest.importorskip("ctranslate2")
    out = to_ctranslate2(run, tmp_path / "ct2")
    with pytest.raises(ExportError, match=r"exists and is not empty: it holds an earlier export \(hf_seq_export"):
        to_ctranslate2(run, out)
    first = (out / "model.bin").read_bytes()
    assert to_ctranslate2(run, out, force=True, quantization="int8") == out
    assert (out / "model.bin").read_bytes() != first and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    # a folder of the user's that no export wrote: refused with or without --force, and no advice to force it
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    for force in (False, True):
        with pytest.raises(ExportError, match="holds no earlier export") as err:
            to_ctranslate2(run, mine, force=force)
        assert "--force" not in str(err.value)
    assert (mine / "todo.txt").read_text() == "keep me"
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ExportError, match="is a file"):
        check_output_dir(tmp_path / "a_file", [], True, ExportError)
    # a model object: no source folder, the trained-run check still holds
    model = tiny_transformer(len(tokenizer))
    with pytest.raises(ExportError, match="holds a trained model or run"):
        to_ctranslate2(model, run, tokenizer=tokenizer, force=True)
    assert (run / "model.safetensors").is_file()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXPORTER, *args], capture_output=True, text=True, timeout=300)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("hf-seq-export: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    ["onnx", pytest.param("ctranslate2", marks=pytest.mark.slow(reason="a second console command, ~10 s"))],
)
def test_console_command_refuses_to_export_a_run_into_itself(command, run):
    pytest.importorskip("onnxruntime" if command == "onnx" else "ctranslate2")
    before = snapshot(run)
    line = one_line_error(cli(command, str(run), str(run), "--force"))
    assert f"`output_dir` {run} is the model folder being exported" in line and "never" in line
    assert snapshot(run) == before


# ---------------------------------------------------------------------------------------------------------------
# a source folder that cannot be exported: one line, before any work
# ---------------------------------------------------------------------------------------------------------------


def test_console_command_names_what_the_folder_lacks(run, tmp_path):
    pytest.importorskip("onnxruntime")
    config_only = tmp_path / "config_only"
    config_only.mkdir()
    shutil.copy(run / "config.json", config_only / "config.json")
    line = one_line_error(cli("onnx", str(config_only), str(tmp_path / "out")))
    assert f"{config_only} has a config.json but no weights" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["onnx", "ctranslate2"])
def test_source_folder_checks_come_before_any_work(command, run, tmp_path, capsys):
    pytest.importorskip("onnxruntime" if command == "onnx" else "ctranslate2")
    no_tokenizer = tmp_path / "no_tokenizer"
    shutil.copytree(run, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens_map.json"))
    broken_tokenizer = tmp_path / "broken_tokenizer"
    shutil.copytree(run, broken_tokenizer, ignore=shutil.ignore_patterns("tokenizer.json"))
    no_config = tmp_path / "no_config"
    shutil.copytree(run, no_config, ignore=shutil.ignore_patterns("config.json"))
    a_file = tmp_path / "model.safetensors"
    shutil.copy(run / "model.safetensors", a_file)
    cases = {
        no_tokenizer: r"has no tokenizer \(none of tokenizer.json, tokenizer_config.json\)",
        broken_tokenizer: "the tokenizer in .* does not load",
        no_config: "has no config.json",
        a_file: "is a file; pass the folder of a saved model",
    }
    for folder, message in cases.items():
        with pytest.raises(REFUSED, match=message):
            EXPORTS[command](folder, tmp_path / "out", False)
    with pytest.raises(FileNotFoundError, match="nowhere: no such model folder"):
        EXPORTS[command](tmp_path / "nowhere", tmp_path / "out", False)
    with pytest.raises(SystemExit) as exit_info:
        main([command, str(no_tokenizer), str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "has no tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_tokenizer_that_does_not_fit_the_model_is_refused(run, tmp_path, tokenizer):
    pytest.importorskip("ctranslate2")
    small = tiny_transformer(len(tokenizer) - 4)  # ids from vocab_size - 4 on have no row
    with pytest.raises(ExportError, match=rf"has {len(tokenizer)} tokens but the model's `vocab_size` is"):
        to_ctranslate2(small, tmp_path / "a", tokenizer=tokenizer)
    config = json.loads((run / "config.json").read_text())
    config["eos_token_id"] = 5  # a config edited by hand, or another tokenizer copied in
    (run / "config.json").write_text(json.dumps(config))
    for export in EXPORTS.values():
        with pytest.raises(REFUSED, match=r"eos_token_id is 3 but the model's config says `eos_token_id` 5"):
            export(run, tmp_path / "b", False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
