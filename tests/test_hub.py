"""The Hub path: saved folders (and Trainer checkpoints) carry their code + ``auto_map`` and load with
``AutoX.from_pretrained(folder, trust_remote_code=True)`` in a separate virtual environment WITHOUT hf_seq
(``clean_python`` in conftest.py), giving the same logits as the in-process model; without ``trust_remote_code``
loading refuses with transformers' message and runs none of the folder's code."""

from __future__ import annotations

import builtins
import json
import shutil
import textwrap

import datasets
import pytest
import torch
import transformers
from conftest import run_clean
from safetensors.torch import load_file
from tiny_models import ALL_HEADS, FIRST_HEADS, TEXTS, build_tokenizer, main_output, model_inputs, tiny_model
from transformers import AutoConfig, AutoTokenizer, Trainer, TrainingArguments
from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

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
    import builtins
    prompts = []
    builtins.input = lambda *args: prompts.append(args) or "n"  # transformers' "run the custom code? [y/N]"
    specs = json.load(open(sys.argv[1]))
    for spec in specs:
        tok = transformers.AutoTokenizer.from_pretrained(spec["folder"], trust_remote_code=True)
        assert not prompts, prompts
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


# Runs in the clean venv: load each (folder, Auto class) with remote code; report the class, and for every tensor of
# the saved base model (names starting with the prefix) whether the loaded model has it with the same values.
CROSS_HEAD_LOAD = textwrap.dedent(
    """
    import json, sys, torch, transformers
    from safetensors.torch import load_file
    try:
        import hf_seq
        raise SystemExit("hf_seq must not be importable here")
    except ImportError:
        pass
    report = []
    for folder, auto, prefix, resave in json.load(open(SPECS)):
        model = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True)
        saved, state = load_file(folder + "/model.safetensors"), model.state_dict()
        base = sorted(k for k in saved if k.startswith(prefix))
        report.append({
            "auto": auto, "class": type(model).__name__, "module": type(model).__module__,
            "config_class": type(model.config).__name__, "base": base,
            "equal": [k for k in base if k in state and torch.equal(state[k], saved[k])],
            "new": sorted(k for k in state if k not in saved),
        })
        if resave:  # a model loaded through remote code saves a folder that lists every head again
            model.save_pretrained(resave)
            report[-1]["resaved_auto_map"] = json.load(open(resave + "/config.json"))["auto_map"]
    print("REPORT" + json.dumps(report))
    """
)


def family_auto_map(base_cls, config_cls) -> dict:
    """The auto_map a folder of this family must carry: the config class and every registered head."""
    module = base_cls.__module__.rsplit(".", 1)[-1]
    config_module = config_cls.__module__.rsplit(".", 1)[-1]
    return {"AutoConfig": f"{config_module}.{config_cls.__name__}"} | {
        auto: f"{module}.{name}" for auto, name in base_cls._auto_heads.items()
    }


def test_a_folder_saved_by_one_head_loads_with_the_other_heads_through_remote_code(clean_python, tmp_path):
    """Pretrain with one head, fine-tune with another, where only transformers is installed: auto_map lists every
    head of the family, the code of all of them is in the folder, and the shared (base model) weights are equal."""
    tokenizer = build_tokenizer()
    bert, lm = tmp_path / "bert_mlm", tmp_path / "rnn_lm"
    tiny_model(hf_seq.BertForMaskedLM, len(tokenizer)).save_pretrained(bert)
    tiny_model(hf_seq.RNNForCausalLM, len(tokenizer)).save_pretrained(lm)
    for folder, base, config_cls in (
        (bert, hf_seq.BertPreTrainedModel, hf_seq.HfSeqBertConfig),
        (lm, hf_seq.RNNPreTrainedModel, hf_seq.HfSeqRNNConfig),
    ):
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        assert auto_map == family_auto_map(base, config_cls)
        assert len(base._auto_heads) >= 4
        for value in auto_map.values():
            assert (folder / (value.split(".")[0] + ".py")).is_file(), value
    specs = [
        (str(bert), "AutoModelForSequenceClassification", "bert.", str(tmp_path / "resaved_bert")),
        (str(bert), "AutoModelForTokenClassification", "bert.", ""),
        (str(lm), "AutoModelForSequenceClassification", "rnn.", str(tmp_path / "resaved_rnn")),
    ]
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    code = CROSS_HEAD_LOAD.replace("SPECS", repr(str(tmp_path / "specs.json")))
    result = run_clean(clean_python, code, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    report = json.loads(result.stdout.split("REPORT", 1)[1])
    expected_class = {
        0: "BertForSequenceClassification",
        1: "BertForTokenClassification",
        2: "RNNForSequenceClassification",
    }
    for i, entry in enumerate(report):
        assert entry["class"] == expected_class[i] and entry["module"].startswith("transformers_modules."), entry
        assert entry["config_class"] in ("HfSeqBertConfig", "HfSeqRNNConfig"), entry
        assert entry["base"] and entry["equal"] == entry["base"], entry  # every pretrained base weight, bit-equal
        assert any(k.startswith("classifier.") for k in entry["new"]), entry  # the new head is initialised fresh
    assert report[0]["resaved_auto_map"] == family_auto_map(hf_seq.BertPreTrainedModel, hf_seq.HfSeqBertConfig)
    assert report[2]["resaved_auto_map"] == family_auto_map(hf_seq.RNNPreTrainedModel, hf_seq.HfSeqRNNConfig)


CONFIG_CLASSES = {
    "BertConfig": hf_seq.HfSeqBertConfig,
    "RNNConfig": hf_seq.HfSeqRNNConfig,
    "RNNSeq2SeqConfig": hf_seq.HfSeqRNNSeq2SeqConfig,
    "TransformerConfig": hf_seq.HfSeqTransformerConfig,
}


def test_config_class_names_cannot_be_taken_for_transformers_own():
    """transformers resolves config classes by __name__ (auto_factory's reverse mapping, AutoTokenizer)."""
    exported = set(dir(transformers)) | set(CONFIG_MAPPING_NAMES.values())
    assert "BertConfig" in exported  # the check sees transformers' names
    for config_cls in CONFIG_CLASSES.values():
        assert config_cls.__name__ not in exported, config_cls
        assert config_cls.model_type not in CONFIG_MAPPING_NAMES and config_cls.model_type.startswith("hf_seq_")
    # the collision's symptom: a BERT folder without tokenizer files gave an empty 5-token BertTokenizer
    tokenizer_mapping = transformers.models.auto.tokenization_auto.TOKENIZER_MAPPING
    assert hf_seq.HfSeqBertConfig not in tokenizer_mapping and transformers.BertConfig in tokenizer_mapping


def test_old_config_class_names_stay_in_the_configuration_files_only():
    """A folder saved before the rename names ``configuration_bert.BertConfig`` in its auto_map: the configuration
    files keep the former names as aliases for it; the package exports only the new ones."""
    from hf_seq.configuration_bert import BertConfig
    from hf_seq.configuration_rnn import RNNConfig
    from hf_seq.configuration_rnn_seq2seq import RNNSeq2SeqConfig
    from hf_seq.configuration_transformer import TransformerConfig

    for old, new in zip((BertConfig, RNNConfig, RNNSeq2SeqConfig, TransformerConfig), CONFIG_CLASSES.values()):
        assert old is new and AutoConfig.for_model(new.model_type).__class__ is new
    for old_name, new in CONFIG_CLASSES.items():
        assert not hasattr(hf_seq, old_name) and old_name not in hf_seq.__all__ and new.__name__ in hf_seq.__all__


def old_style_folder(folder, old_auto_map: dict) -> None:
    """Give a saved folder the config.json auto_map that versions before the rename wrote (old class names, only
    the head that saved)."""
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = old_auto_map
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def test_folders_saved_before_the_rename_still_load(clean_python, tmp_path):
    tokenizer = build_tokenizer()
    model = tiny_model(hf_seq.BertForMaskedLM, len(tokenizer))
    old = tmp_path / "old_bert"
    model.save_pretrained(old)
    old_style_folder(
        old, {"AutoConfig": "configuration_bert.BertConfig", "AutoModelForMaskedLM": "modeling_bert.BertForMaskedLM"}
    )
    saved = load_file(old / "model.safetensors")

    # with hf_seq: by model_type, with any head; saving again writes the new names and every head
    for auto in (transformers.AutoModelForMaskedLM, transformers.AutoModelForSequenceClassification):
        loaded = auto.from_pretrained(old)
        assert type(loaded.config) is hf_seq.HfSeqBertConfig
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in saved.items() if k.startswith("bert."))
    resaved = tmp_path / "resaved"
    loaded.save_pretrained(resaved)
    assert json.loads((resaved / "config.json").read_text())["auto_map"] == family_auto_map(
        hf_seq.BertPreTrainedModel, hf_seq.HfSeqBertConfig
    )

    # without hf_seq: the old auto_map names resolve through the aliases in the folder's code
    code = textwrap.dedent(
        f"""
        import torch, transformers
        from safetensors.torch import load_file
        model = transformers.AutoModelForMaskedLM.from_pretrained({str(old)!r}, trust_remote_code=True)
        saved = load_file({str(old)!r} + "/model.safetensors")
        assert all(torch.equal(model.state_dict()[k], v) for k, v in saved.items()), "weights differ"
        print("loaded", type(model).__name__, type(model.config).__name__)
        """
    )
    result = run_clean(clean_python, code, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "loaded BertForMaskedLM HfSeqBertConfig" in result.stdout


def test_auto_tokenizer_loads_every_family_without_trust_remote_code_or_a_prompt(tmp_path, monkeypatch):
    prompts = []
    monkeypatch.setattr(builtins, "input", lambda *args: prompts.append(args) or "n")
    tokenizer = build_tokenizer()
    expected = tokenizer(TEXTS, padding=True)["input_ids"]
    for family, head in FIRST_HEADS:
        folder = tmp_path / family
        tiny_model(head, len(tokenizer)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        loaded = AutoTokenizer.from_pretrained(folder)
        assert isinstance(loaded, transformers.PreTrainedTokenizerFast), type(loaded)
        assert loaded(TEXTS, padding=True)["input_ids"] == expected, family
    assert not prompts, prompts
    # a folder without tokenizer files is an error, not transformers' BertTokenizer with an empty vocabulary
    no_tokenizer = tmp_path / "bert_without_tokenizer"
    shutil.copytree(tmp_path / "bert", no_tokenizer)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    with pytest.raises((ValueError, OSError)):
        AutoTokenizer.from_pretrained(no_tokenizer)


def test_model_card_has_metadata_architecture_data_metrics_command_and_use():
    from hf_seq.toolkit.model_card import render_model_card

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
    assert 'AutoTokenizer.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)' in body
    assert "| hidden_size | 16 |" in body and "| bleu | 12.3456 |" in body and "| epochs | 2 |" in body
    assert "KJV / RV1909 verse pairs" in body and "English to Spanish verse translation." in body
    assert "python train_scripts/train_translation.py configs/translation_transformer.json" in body
    config_json = body.split("```json\n")[1].split("```")[0]
    assert json.loads(config_json)["hidden_size"] == 16


@pytest.mark.data
def test_train_scripts_write_a_model_card_beside_the_model(tmp_path):
    from pathlib import Path

    from hf_seq.train_scripts import train_classifier, train_tagger

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
        assert not (out.parent / f".{out.name}.saving").exists() and (out / "model.safetensors").is_file()
