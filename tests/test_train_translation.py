"""train_scripts/train_translation.py: recipe parsing (no data) and a tiny end-to-end run on the real corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hf_seq.train_scripts import train_translation
from hf_seq.train_scripts.arguments import DataArguments, ModelArguments, RecipeError, build_config, parse_args
from hf_seq.train_scripts.checks import missing_modules
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

REPO = Path(__file__).resolve().parent.parent
HAS_MATPLOTLIB = not missing_modules(["matplotlib"])  # the `plot` extra, not the `test` one


def load_script():
    return train_translation


@pytest.mark.parametrize("attention", ["none", "dot", "scaled_dot", "general", "additive", "cosine"])
def test_recipes_parse_and_command_line_overrides(attention, tmp_path):
    script = load_script()
    recipe = REPO / "configs" / f"translation_rnn_{attention}.json"
    model_args, data_args, args, training_args = parse_args(
        script.TASK,
        [str(recipe), "--output_dir", str(tmp_path), "--max_train_minutes", "0.5", "--learning_rate", "0.01"],
    )
    assert model_args.model_config["attention"] == attention and data_args.dataset_name == "hf_seq/translation"
    assert args.max_train_minutes == 0.5 and training_args.learning_rate == 0.01
    assert training_args.output_dir == str(tmp_path) and training_args.predict_with_generate


def test_recipe_with_unknown_key_is_rejected(tmp_path):
    script = load_script()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model_type": "hf_seq_rnn_seq2seq", "no_such_option": 1}))
    with pytest.raises(RecipeError, match="no_such_option"):
        parse_args(script.TASK, [str(bad)])


def test_build_config_uses_tokenizer_ids_and_overrides():
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    script = load_script()
    tok = build_translation_tokenizer([{"en": "let there be light", "es": "sea la luz"}], kind="word")
    args = ModelArguments(
        model_type="hf_seq_rnn_seq2seq",
        model_config={"attention": "general", "hidden_size": 16, "embedding_size": 8},
        config_overrides="attention=dot,hidden_size=12",
    )
    ids = {
        "vocab_size": len(tok),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "decoder_start_token_id": tok.bos_token_id,
    }
    config = build_config(script.TASK, args, DataArguments(), **ids)
    assert config.model_type == "hf_seq_rnn_seq2seq" and config.attention == "dot" and config.hidden_size == 12
    assert config.vocab_size == len(tok) and config.decoder_start_token_id == tok.bos_token_id
    assert config.eos_token_id == tok.eos_token_id and config.pad_token_id == tok.pad_token_id
    with pytest.raises(ValueError, match="attention"):
        build_config(
            script.TASK,
            ModelArguments(model_type="hf_seq_rnn_seq2seq", config_overrides="attention=luong"),
            DataArguments(),
            **ids,
        )


@pytest.mark.data
def test_tiny_end_to_end_run(tmp_path):
    script = load_script()
    out = tmp_path / "run"
    results = script.main(
        [
            str(REPO / "configs" / "translation_rnn_additive.json"),
            "--output_dir",
            str(out),
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "8",
            "--max_predict_samples",
            "6",
            "--max_steps",
            "3",
            "--eval_steps",
            "2",
            "--per_device_train_batch_size",
            "16",
            "--tokenizer_vocab_size",
            "400",
            "--config_overrides",
            "hidden_size=16,embedding_size=16,max_target_length=12",
            "--max_source_length",
            "24",
            "--max_target_length",
            "12",
            "--test_num_beams",
            "1,2",
            "--logging_steps",
            "1",
        ]
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["train"]["global_steps"] == 3 and saved["data"]["test_pairs"] == 6
    for key in ("test_greedy", "test_beam2"):
        assert 0.0 <= saved[key]["test_bleu"] <= 100.0 and 0.0 <= saved[key]["test_chrf"] <= 100.0
    assert saved["validation_history"] and "eval_bleu" in saved["validation_history"][0]
    if HAS_MATPLOTLIB:  # the plot extra: the heat map; without it the run skips the plot (tested below)
        assert results["attention_plot"]["path"] and (out / "attention_heatmap.png").read_bytes()[:4] == b"\x89PNG"
    else:
        assert "attention_plot" not in results and not (out / "attention_heatmap.png").exists()
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tok) and model.config.attention == "additive"
    recipe = json.loads((REPO / "configs" / "translation_rnn_additive.json").read_text())
    assert model.generation_config.max_length == recipe["generation_max_length"]  # decodes as evaluated
    # results.json and the model card record the same command; the card names the architecture, data and figures
    assert saved["command"].startswith("python ") and "train_translation.py" in saved["command"]
    assert "--max_steps 3" in saved["command"]
    card = (out / "README.md").read_text()
    assert "RNNSeq2Seq" in card and "additive" in card
    assert "load_translation" in card and "64 training / 8 validation / 6 test pairs" in card
    assert saved["command"] in card
    assert "test_bleu_greedy" in card and "test_chrf_beam2" in card
    assert not (out.parent / f".{out.name}.saving").exists()


@pytest.mark.data
def test_time_budget_stops_training(tmp_path):
    script = load_script()
    results = script.main(
        [
            str(REPO / "configs" / "translation_rnn_none.json"),
            "--output_dir",
            str(tmp_path),
            "--max_train_samples",
            "64",
            "--max_eval_samples",
            "4",
            "--max_train_minutes",
            "0.0001",
            "--per_device_train_batch_size",
            "8",
            "--tokenizer_vocab_size",
            "400",
            "--config_overrides",
            "hidden_size=8,embedding_size=8",
            "--do_predict",
            "false",
            "--plot_attention",
            "false",
            "--max_target_length",
            "8",
            "--generation_max_length",
            "10",
        ]
    )
    assert results["train"]["stopped_by_time_budget"] and results["train"]["global_steps"] == 1


# ---------------------------------------------------------------------------------------------------------------
# what runs after training never costs the trained model; the packages it needs are checked before the first step
# ---------------------------------------------------------------------------------------------------------------
BLOCK_MATPLOTLIB = """
import importlib.abc, sys


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, Block())
"""
WORDS = [("one", "uno"), ("two", "dos"), ("three", "tres"), ("four", "cuatro"), ("five", "cinco"), ("six", "seis")]


def write_pairs(folder: Path) -> list[str]:
    """Train / validation / test jsonl files of short en-es pairs; the flags that name them."""
    rows = [
        json.dumps({"translation": {"en": f"{a} {b}", "es": f"{x} {y}"}}) + "\n" for a, x in WORDS for b, y in WORDS
    ]
    flags = []
    for split, part in (("train", rows), ("validation", rows[:4]), ("test", rows[4:8])):
        (folder / f"{split}.jsonl").write_text("".join(part))
        flags += [f"--{split}_file", str(folder / f"{split}.jsonl")]
    return flags


TINY_RUN = [
    "--max_steps", "2", "--eval_strategy", "no", "--per_device_train_batch_size", "8", "--tokenizer_kind", "word",
    "--config_overrides", "hidden_size=8,embedding_size=8", "--test_num_beams", "1",
    "--warmup_steps", "0",
]  # fmt: skip


@pytest.mark.slow(reason="a fresh hf-seq-train process, ~15 s")
def test_an_attention_recipe_without_matplotlib_saves_the_model_and_skips_the_plot(tmp_path):
    """The attention recipes plot by default: where matplotlib cannot be imported (its import blocked in the
    process), the run warns before the first step in one line naming the install command, trains, and saves the
    model and its results without the heat map."""
    import os
    import subprocess
    import sys

    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_MATPLOTLIB)
    out = tmp_path / "run"
    command = [str(Path(sys.executable).parent / "hf-seq-train"), "translation", "translation_rnn_additive"]
    command += [*write_pairs(tmp_path), "--source_lang", "en", "--target_lang", "es", *TINY_RUN, "--output_dir", out]
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [str(c) for c in command], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "Traceback" not in done.stdout
    warning = (
        "warning: `plot_attention` true needs matplotlib, which is not installed: the run trains and saves the model "
        "without it (`pip install 'hf-seq[plot]'` to have it, or `--plot_attention false` to silence this)"
    )
    lines = done.stdout.splitlines()
    said = [line for line in lines if "matplotlib" in line]
    # the plot's warning, once; the only other line on matplotlib is training_curves.png's own, said once
    assert said.count(warning) == 1, done.stdout[-3000:]
    assert [line for line in said if line != warning and "training_curves.png not drawn" not in line] == []
    assert sum("training_curves.png not drawn" in line for line in said) <= 1, done.stdout[-3000:]
    assert lines.index(warning) < done.stdout[: done.stdout.index("[hf_seq] first training step")].count("\n")
    saved = json.loads((out / "results.json").read_text())
    assert saved["train"]["global_steps"] == 2 and "test_greedy" in saved and "attention_plot" not in saved
    assert not (out / "attention_heatmap.png").exists()
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert model.config.attention == "additive" and (out / "README.md").is_file()


def test_without_matplotlib_the_plot_is_skipped_in_one_line_before_the_first_step(tmp_path, monkeypatch, capsys):
    """The same in-process (matplotlib made unimportable): one warning line, the model and results saved."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    results = _tiny_main(tmp_path, "--plot_attention", "true")
    out = capsys.readouterr()
    warned = [line for line in out.err.splitlines() if "matplotlib" in line]
    assert len(warned) == 1 and "pip install 'hf-seq[plot]'" in warned[0], out.err
    # the warning is the up-front check's (parse_args: before any data or model), which turns the plot off
    recipe = str(REPO / "configs" / "translation_rnn_dot.json")
    args = parse_args(train_translation.TASK, [recipe, "--plot_attention", "true"])[2]
    assert args.plot_attention is False and "pip install 'hf-seq[plot]'" in capsys.readouterr().err
    assert "attention_plot" not in results and "failed_after_training" not in results
    assert (tmp_path / "run" / "model.safetensors").is_file() and not (
        tmp_path / "run" / "attention_heatmap.png"
    ).exists()


def _tiny_main(tmp_path, *extra):
    return train_translation.main(
        [
            str(REPO / "configs" / "translation_rnn_dot.json"),
            *write_pairs(tmp_path),
            *("--source_lang", "en", "--target_lang", "es", *TINY_RUN, "--plot_attention", "false"),
            *("--output_dir", str(tmp_path / "run"), "--disable_tqdm", "true", *extra),
        ]
    )


def test_a_step_that_fails_after_training_is_one_line_and_the_model_stays(tmp_path, monkeypatch, caplog):
    """Test decoding that raises after training (here: a broken exported engine) is logged in one line and recorded
    in results.json; the trained model, its tokenizer and the results gathered before are in output_dir."""

    def broken(*args, **kwargs):
        raise RuntimeError("the engine crashed\nwith a second line")

    monkeypatch.setattr(train_translation, "test_decodes", broken)
    results = _tiny_main(tmp_path)
    out = tmp_path / "run"
    failed = [r for r in caplog.records if "failed after training" in r.getMessage()]
    assert len(failed) == 1 and failed[0].getMessage().startswith(
        "test decoding failed after training (RuntimeError: the engine crashed with a second line)"
    )
    saved = json.loads((out / "results.json").read_text())
    assert saved["failed_after_training"] == [
        {"step": "test decoding", "error": "RuntimeError: the engine crashed with a second line"}
    ]
    assert saved["train"]["global_steps"] == 2 and results["failed_after_training"] == saved["failed_after_training"]
    assert AutoModelForSeq2SeqLM.from_pretrained(out).config.attention == "dot"
    assert AutoTokenizer.from_pretrained(out).pad_token_id is not None and (out / "README.md").is_file()


def test_a_model_card_that_fails_keeps_model_and_results(tmp_path, monkeypatch):
    """The neighbour: the card (written inside the final save) raises; model, results and the tested figures stay."""
    from hf_seq.toolkit import model_card

    def broken(*args, **kwargs):
        raise KeyError("no such metric")

    monkeypatch.setattr(model_card, "write_model_card", broken)
    _tiny_main(tmp_path)
    out = tmp_path / "run"
    assert "test_greedy" in json.loads((out / "results.json").read_text())
    assert not (out / "README.md").exists() and (out / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("engine", "module", "install"),
    [
        ("ctranslate2", "ctranslate2", "pip install 'hf-seq[ctranslate2]'"),
        ("onnxruntime", "onnxscript", "pip install onnx onnxscript onnxruntime"),
    ],
)
def test_a_test_engine_that_is_not_installed_is_refused_before_the_data(tmp_path, monkeypatch, engine, module, install):
    import sys

    from hf_seq.train_scripts import common

    def refuse(*args, **kwargs):
        raise AssertionError("the data was read before the error")

    monkeypatch.setattr(common, "load_data", refuse)
    monkeypatch.setitem(sys.modules, module, None)  # not importable here
    with pytest.raises(
        RecipeError, match=rf"`test_engine` {engine} needs {module}, which is not installed: .*{re.escape(install)}"
    ):
        _tiny_main(tmp_path, "--test_engine", engine)
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------------------------------------------
# gen_len: a hypothesis is counted up to its end token
# ---------------------------------------------------------------------------------------------------------------
def test_gen_len_counts_each_hypothesis_to_its_first_end_token():
    """Beam search fills a hypothesis that finished early with end tokens (transformers reads a pad id of 0 as
    false and fills with eos): those are not counted; greedy's pad filling, a row without an end token (cut at the
    length limit) and a start token that is the pad token (a decoder starting from pad) are counted as before."""
    from types import SimpleNamespace

    import numpy as np

    tok = SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    beam = np.array([1, 7, 8, 2, 2, 2, 2])  # the case: <s> a b </s> then end tokens
    greedy = np.array([1, 7, 8, 2, 0, 0, 0])
    assert train_translation.hypothesis_length(beam, tok) == train_translation.hypothesis_length(greedy, tok) == 4
    assert train_translation.hypothesis_length(np.array([1, 7, 8, 9]), tok) == 4  # no end token: the whole row
    assert train_translation.hypothesis_length(np.array([7, 2, 2, 2]), tok) == 2  # no start token (an engine's)
    pad_start = SimpleNamespace(bos_token_id=None, eos_token_id=2, pad_token_id=0)
    assert train_translation.hypothesis_length(np.array([0, 7, 2, 2]), pad_start) == 2
    same = SimpleNamespace(bos_token_id=1, eos_token_id=0, pad_token_id=0)  # end token = pad token
    assert train_translation.hypothesis_length(np.array([1, 7, 0, 0]), same) == 3


def test_gen_len_of_beam_and_greedy_rows_that_decode_alike_is_the_same():
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    tok = build_translation_tokenizer([{"en": "one two three", "es": "uno dos tres"}], kind="word")
    ids = tok("uno dos")["input_ids"]  # ends with </s>
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    import numpy as np

    width = len(ids) + 5
    greedy = np.array([[bos, *ids] + [pad] * (width - len(ids) - 1)])
    beam = np.array([[bos, *ids] + [eos] * (width - len(ids) - 1)])
    labels = np.array([ids])
    metrics = train_translation.translation_metrics(tok)
    assert metrics((beam, labels))["gen_len"] == metrics((greedy, labels))["gen_len"] == len(ids) + 1
