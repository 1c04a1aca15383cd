"""The Hub path: saved folders (and Trainer checkpoints) carry their code + ``auto_map`` and load with
``AutoX.from_pretrained(folder, trust_remote_code=True)`` in a separate virtual environment WITHOUT hf_seq
(``clean_python`` in conftest.py), giving the same logits as the in-process model; without ``trust_remote_code``
loading refuses with transformers' message and runs none of the folder's code."""

from __future__ import annotations

import json
import textwrap

import datasets
import pytest
import torch
from conftest import run_clean
from tiny_models import ALL_HEADS, FIRST_HEADS, TEXTS, build_tokenizer, main_output, model_inputs, tiny_model
from transformers import Trainer, TrainingArguments

import hf_seq

# Runs in the clean venv: for every spec, load tokenizer + model through the Auto classes with remote code, check the
# tokenizer's ids and the model's outputs against the files the in-process side wrote.
CLEAN_LOAD = textwrap.dedent(
    """
    import json, sys, torch, transformers
    try:
        import hf_seq
        raise SystemExit("hf_seq must not be importable here")
    except ImportError:
        pass
    specs = json.load(open(sys.argv[1]))
    for spec in specs:
        tok = transformers.AutoTokenizer.from_pretrained(spec["folder"])
        saved = torch.load(spec["folder"] + "/inputs.pt")
        enc = tok(spec["texts"], padding=True, return_tensors="pt")
        assert torch.equal(enc["input_ids"], saved["input_ids"]), spec["name"] + ": tokenizer ids differ"
        auto = getattr(transformers, spec["auto"])
        model = auto.from_pretrained(spec["folder"], trust_remote_code=True).eval()
        assert type(model).__name__ == spec["name"], type(model)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            out = model(**saved)
        for key in ("logits", "prediction_logits", "last_hidden_state"):
            if out.get(key) is not None:
                got = out[key]
                break
        expected = torch.load(spec["folder"] + "/expected.pt")
        diff = (got - expected).abs().max().item()
        assert got.shape == expected.shape and diff <= 1e-6, (spec["name"], got.shape, expected.shape, diff)
        print("ok", spec["name"], diff)
    """
)


def save_for_remote(model, tokenizer, folder) -> dict:
    """Save ``model`` + tokenizer + its inputs and expected main output into ``folder``; return the spec."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    batch = model_inputs(model, tokenizer)
    with torch.no_grad():
        expected = main_output(model(**batch))
    torch.save(batch, folder / "inputs.pt")
    torch.save(expected, folder / "expected.pt")
    return {"name": type(model).__name__, "auto": type(model)._auto_class, "folder": str(folder), "texts": TEXTS}


def check_code_files(folder, model) -> None:
    """The folder holds config.json with an auto_map naming the head, and the modelling file(s) it needs."""
    config = json.loads((folder / "config.json").read_text())
    auto_map = config["auto_map"]
    assert auto_map["AutoConfig"].endswith(type(model.config).__name__)
    assert auto_map[type(model)._auto_class].endswith(type(model).__name__)
    module_file = type(model).__module__.rsplit(".", 1)[-1] + ".py"
    assert (folder / module_file).is_file(), sorted(p.name for p in folder.iterdir())
    for value in auto_map.values():
        assert (folder / (value.split(".")[0] + ".py")).is_file(), value


def run_remote(clean_python, specs, tmp_path, extra_code: str = ""):
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    code = CLEAN_LOAD.replace("sys.argv[1]", repr(str(tmp_path / "specs.json"))) + extra_code
    result = run_clean(clean_python, code, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def tiny_trainer_checkpoint(tmp_path, tokenizer):
    """Train a tiny RNN classifier for 2 steps with Trainer, saving checkpoint-1 and checkpoint-2."""
    model = tiny_model(hf_seq.RNNForSequenceClassification, len(tokenizer)).train()
    enc = tokenizer(TEXTS * 4, truncation=True)
    train = datasets.Dataset.from_dict({**enc, "labels": [i % 3 for i in range(len(TEXTS) * 4)]})
    args = TrainingArguments(
        output_dir=str(tmp_path / "trainer"),
        max_steps=2,
        per_device_train_batch_size=4,
        save_strategy="steps",
        save_steps=1,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        learning_rate=0.05,
        disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=train, processing_class=tokenizer).train()
    return tmp_path / "trainer" / "checkpoint-2"


def test_one_head_per_family_and_trainer_checkpoint_load_with_remote_code(clean_python, tmp_path):
    tokenizer = build_tokenizer()
    specs = []
    for family, head in FIRST_HEADS:
        model = tiny_model(head, len(tokenizer))
        folder = tmp_path / family
        specs.append(save_for_remote(model, tokenizer, folder))
        check_code_files(folder, model)

    # a Trainer checkpoint is written by save_pretrained, so it carries the code + auto_map too
    checkpoint = tiny_trainer_checkpoint(tmp_path, tokenizer)
    assert (checkpoint / "trainer_state.json").is_file() and (checkpoint / "optimizer.pt").is_file()
    trained = hf_seq.RNNForSequenceClassification.from_pretrained(checkpoint).eval()
    check_code_files(checkpoint, trained)
    assert (checkpoint / "tokenizer.json").is_file()
    specs.append(save_for_remote(trained, build_tokenizer(), checkpoint))  # same weights, rewritten in place

    # without trust_remote_code: transformers refuses, and no file of the folder is executed
    sentinel = tmp_path / "code_ran"
    unsafe = tmp_path / "rnn_untrusted"
    model = tiny_model(hf_seq.RNNForSequenceClassification, len(tokenizer))
    model.save_pretrained(unsafe)
    for py in unsafe.glob("*.py"):
        py.write_text(py.read_text() + f"\nimport pathlib\npathlib.Path({str(sentinel)!r}).write_text({py.name!r})\n")
    refuse = textwrap.dedent(
        f"""
        import os, pathlib
        sys.stdin = open(os.devnull)  # no interactive prompt: answer it like a script would
        sentinel = pathlib.Path({str(sentinel)!r})
        for auto in (transformers.AutoModelForSequenceClassification, transformers.AutoConfig):
            try:
                auto.from_pretrained({str(unsafe)!r})
                raise SystemExit("loaded custom code without trust_remote_code")
            except ValueError as err:
                assert "trust_remote_code=True" in str(err) and "custom code" in str(err), str(err)
                print("refused", auto.__name__)
            assert not sentinel.exists(), "custom code ran without trust_remote_code"
        transformers.AutoModelForSequenceClassification.from_pretrained({str(unsafe)!r}, trust_remote_code=True)
        assert sentinel.exists(), "the sentinel only proves something if trusted loading runs it"
        print("trusted load ran the code")
        """
    )
    result = run_remote(clean_python, specs, tmp_path, extra_code=refuse)
    assert result.stdout.count("ok ") == len(specs), result.stdout
    assert result.stdout.count("refused") == 2 and "trusted load ran the code" in result.stdout


@pytest.mark.slow
def test_every_head_of_every_family_loads_with_remote_code(clean_python, tmp_path):
    tokenizer = build_tokenizer()
    specs = []
    for family, head in ALL_HEADS:
        model = tiny_model(head, len(tokenizer))
        folder = tmp_path / f"{family}-{head.__name__}"
        specs.append(save_for_remote(model, tokenizer, folder))
        check_code_files(folder, model)
    result = run_remote(clean_python, specs, tmp_path)
    assert result.stdout.count("ok ") == len(ALL_HEADS), result.stdout


def test_model_card_has_metadata_architecture_data_metrics_command_and_use():
    from hf_seq.model_card import render_model_card

    model = tiny_model(hf_seq.TransformerForConditionalGeneration, 26)
    card = render_model_card(
        model,
        dataset="KJV / RV1909 verse pairs",
        metrics={"bleu": 12.3456, "epochs": 2},
        command="python train_scripts/train_translation.py configs/translation_transformer.json",
        intended_use="English to Spanish verse translation.",
        limitations="Archaic language.",
    )
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "library_name: transformers" in front and "pipeline_tag: translation" in front
    assert "- hf_seq_transformer" in front or f"- {model.config.model_type}" in front
    for section in (
        "## Use",
        "## Architecture",
        "## Intended use",
        "## Training data",
        "## Results",
        "## Training command",
        "## Configuration",
        "## Limitations",
    ):
        assert section in body, section
    assert 'AutoModelForSeq2SeqLM.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)' in body
    assert "| d_model | 16 |" in body and "| bleu | 12.3456 |" in body and "| epochs | 2 |" in body
    assert "KJV / RV1909 verse pairs" in body and "English to Spanish verse translation." in body
    assert "python train_scripts/train_translation.py configs/translation_transformer.json" in body
    config_json = body.split("```json\n")[1].split("```")[0]
    assert json.loads(config_json)["d_model"] == 16


@pytest.mark.data
def test_train_scripts_write_a_model_card_beside_the_model(tmp_path):
    from pathlib import Path

    from train_scripts import train_classifier, train_tagger

    root = Path(__file__).resolve().parents[1]

    tiny = [
        "--max_train_samples",
        "32",
        "--max_eval_samples",
        "16",
        "--max_predict_samples",
        "16",
        "--max_steps",
        "2",
        "--save_strategy",
        "no",
        "--eval_strategy",
        "no",
        "--load_best_model_at_end",
        "false",
        "--config_overrides",
        "hidden_size=8,embedding_size=8",
        "--report_to",
        "none",
    ]
    for module, recipe, pipeline_tag, data_words, metric in (
        (train_classifier, "configs/sentiment_bilstm.json", "text-classification", "Rotten Tomatoes", "test_accuracy"),
        (train_tagger, "configs/pos_bilstm.json", "token-classification", "Brown corpus", "test_oov_rate"),
    ):
        out = tmp_path / module.__name__.rsplit(".", 1)[1]
        argv = [str(root / recipe), "--output_dir", str(out), *tiny]
        results = module.main(argv)
        card = (out / "README.md").read_text()
        assert f"pipeline_tag: {pipeline_tag}" in card and "## Architecture" in card and "| cell | lstm |" in card
        assert data_words in card and "## Intended use" in card and "## Limitations" in card
        assert f"| {metric} | {results[metric]:.4f} |" in card and "| processes | 1 |" in card
        assert f"{Path(module.__file__).name} {root / recipe} --output_dir {out}" in card  # the command
        assert not (out / ".save-tmp").exists() and (out / "model.safetensors").is_file()
