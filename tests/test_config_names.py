"""Config field names: one scheme across the families, the former names accepted on input (docs/compat.md, "Config
field names"): by the constructor, in a folder's config.json, in recipes and ``--config_overrides``; saved folders hold
the current names only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import assert_same_outputs
from hf_seq.train_scripts import train_classifier, train_translation
from hf_seq.train_scripts.arguments import DataArguments, ModelArguments, RecipeError, build_config
from tiny_models import FAMILIES, build_tokenizer, main_output, model_inputs, tiny_model
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

import hf_seq

REPO = Path(__file__).resolve().parent.parent

# family -> (head, its Auto class, {former name: (current name, a value other than the default)})
RENAMED = {
    "rnn": (
        hf_seq.RNNForSequenceClassification,
        AutoModelForSequenceClassification,
        {"num_layers": ("num_hidden_layers", 2), "implementation": ("recurrent_implementation", "cell")},
    ),
    "rnn_seq2seq": (
        hf_seq.RNNSeq2SeqForConditionalGeneration,
        AutoModelForSeq2SeqLM,
        {"bidirectional_encoder": ("bidirectional", True), "init_range": ("uniform_init_range", 0.3)},
    ),
    "transformer": (
        hf_seq.TransformerForConditionalGeneration,
        AutoModelForSeq2SeqLM,
        {
            "d_model": ("hidden_size", 24),
            "attention_heads": ("num_attention_heads", 3),
            "ffn_dim": ("intermediate_size", 20),
            "init_std": ("initializer_range", 0.2),
        },
    ),
}


def _config_class(family: str):
    return FAMILIES[family][0]


def _current_values(family: str) -> dict:
    return {current: value for current, value in RENAMED[family][2].values()}


def _base_kwargs(family: str) -> dict:
    """The family's tiny config without any of the renamed fields (the values under test replace them)."""
    renamed = {current for current, _ in RENAMED[family][2].values()}
    return {k: v for k, v in FAMILIES[family][1].items() if k not in renamed} | {"vocab_size": 40}


def _fields(config) -> dict:
    """The config's settings (without where it was loaded from)."""
    return {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}


@pytest.mark.parametrize("family", sorted(RENAMED))
def test_renamed_fields_are_the_documented_ones_and_map_attributes(family):
    config_cls = _config_class(family)
    expected = {former: current for former, (current, _) in RENAMED[family][2].items()}
    assert config_cls.renamed_fields == expected
    for former, current in expected.items():
        assert config_cls.attribute_map[former] == current
        assert current in config_cls().to_dict() and former not in config_cls().to_dict()
    table = (REPO / "docs" / "compat.md").read_text(encoding="utf-8")
    for former, current in expected.items():
        assert f"| `{config_cls.model_type}` | `{former}` | `{current}` |" in table


def test_bert_keeps_transformers_names():
    assert getattr(hf_seq.HfSeqBertConfig, "renamed_fields", {}) == {}
    fields = set(hf_seq.HfSeqBertConfig().to_dict())
    assert {
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "initializer_range",
    } <= fields


@pytest.mark.parametrize("family", sorted(RENAMED))
def test_former_names_build_the_same_config(family):
    config_cls, renamed = _config_class(family), RENAMED[family][2]
    current = config_cls(**_base_kwargs(family), **_current_values(family))
    former = config_cls(**_base_kwargs(family), **{old: value for old, (_, value) in renamed.items()})
    assert former.to_dict() == current.to_dict()
    for old, (new, value) in renamed.items():
        assert getattr(former, new) == value != getattr(config_cls(), new)  # the given value, not the default
        assert getattr(former, old) == value  # the former name reads the field
    # ... and sets it
    old, (new, value) = next(iter(renamed.items()))
    other = not value if isinstance(value, bool) else value if isinstance(value, str) else value * 2
    setattr(former, old, other)
    assert getattr(former, new) == other and old not in former.to_dict()


@pytest.mark.parametrize("family", sorted(RENAMED))
def test_former_and_current_name_with_different_values_is_an_error(family):
    config_cls, renamed = _config_class(family), RENAMED[family][2]
    for old, (new, value) in renamed.items():
        default = getattr(config_cls(), new)
        with pytest.raises(ValueError, match=f"`{old}` is the former name of `{new}`: pass one of them"):
            config_cls(**_base_kwargs(family), **_current_values(family), **{old: default})
        # the same value under both names is one setting
        assert getattr(config_cls(**_base_kwargs(family), **_current_values(family), **{old: value}), new) == value


@pytest.mark.parametrize("family", sorted(RENAMED))
def test_former_names_are_validated_under_the_current_name(family):
    config_cls = _config_class(family)
    old, (new, value) = next((o, nv) for o, nv in RENAMED[family][2].items() if not isinstance(nv[1], bool))
    with pytest.raises(ValueError, match=f"`{new}`"):
        config_cls(**_base_kwargs(family), **{old: "bad"})


@pytest.mark.parametrize("family", sorted(RENAMED))
def test_folder_with_former_names_loads_to_identical_weights_and_outputs(family, tmp_path):
    head, auto_class, renamed = RENAMED[family]
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer), seed=3, **_current_values(family))
    folder = tmp_path / "former"
    model.save_pretrained(folder)
    # the folder as a config with the former names writes it (every renamed field under its former name)
    saved = json.loads((folder / "config.json").read_text())
    for old, (new, value) in renamed.items():
        assert saved[new] == value and old not in saved
        saved[old] = saved.pop(new)
    (folder / "config.json").write_text(json.dumps(saved, indent=2))

    config = AutoConfig.from_pretrained(folder)
    assert type(config) is _config_class(family) and _fields(config) == _fields(model.config)
    inputs = model_inputs(model, tokenizer)
    with torch.no_grad():
        expected = main_output(model(**inputs))
    for loader in (head, auto_class):
        loaded, info = loader.from_pretrained(folder, output_loading_info=True)
        assert type(loaded) is head
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
        reference = model.state_dict()
        assert loaded.state_dict().keys() == reference.keys()
        for key, tensor in loaded.state_dict().items():
            assert torch.equal(tensor, reference[key]), key
        with torch.no_grad():
            assert_same_outputs(main_output(loaded.eval()(**inputs)), expected)

    loaded.save_pretrained(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    for old, (new, value) in renamed.items():
        assert again[new] == value and old not in again


def test_recipes_use_the_current_names():
    checked = 0
    for recipe_path in sorted((REPO / "configs").glob("*.json")):
        recipe = json.loads(recipe_path.read_text())
        if "model_config" not in recipe:
            continue
        config_cls = type(AutoConfig.for_model(recipe["model_type"]))
        former = set(getattr(config_cls, "renamed_fields", {})) & set(recipe["model_config"])
        assert not former, f"{recipe_path.name} uses the former names {sorted(former)}"
        checked += 1
    assert checked >= 20


def test_recipe_fields_accept_former_names_and_stay_strict():
    ids = dict(vocab_size=40, pad_token_id=0, bos_token_id=2, eos_token_id=3, decoder_start_token_id=2)
    args = ModelArguments(
        model_type="hf_seq_transformer",
        model_config={"d_model": 24, "attention_heads": 3, "encoder_layers": 1, "decoder_layers": 1},
        config_overrides="ffn_dim=20,init_std=0.2",
    )
    config = build_config(train_translation.TASK, args, DataArguments(), **ids)
    assert (config.hidden_size, config.num_attention_heads, config.intermediate_size) == (24, 3, 20)
    assert config.initializer_range == 0.2
    rnn = build_config(
        train_classifier.TASK,
        ModelArguments(model_type="hf_seq_rnn", model_config={"num_layers": 2}, config_overrides="implementation=cell"),
        DataArguments(),
        vocab_size=40,
    )
    assert rnn.num_hidden_layers == 2 and rnn.recurrent_implementation == "cell"
    with pytest.raises(RecipeError, match=r"`model_config` has a field `d_modl` that hf_seq_transformer does not know"):
        build_config(
            train_translation.TASK,
            ModelArguments(model_type="hf_seq_transformer", model_config={"d_modl": 24}),
            DataArguments(),
            **ids,
        )
    with pytest.raises(RecipeError, match=r"`config_overrides`: hf_seq_rnn has no field `num_layer`"):
        build_config(
            train_classifier.TASK,
            ModelArguments(model_type="hf_seq_rnn", config_overrides="num_layer=2"),
            DataArguments(),
            vocab_size=40,
        )
