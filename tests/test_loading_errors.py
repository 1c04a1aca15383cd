"""Folders that cannot be loaded give clear errors naming the file / the mismatch, never a silent random model.

transformers alone: a truncated or garbage ``model.safetensors`` raises a ``SafetensorError`` that names no file; a
missing ``config.json`` with a concrete class builds a DEFAULT config and fails with "size mismatch"; another family's
folder loaded with a concrete class, or weights under another model's ``config.json``, initialise the model RANDOMLY
with only a load report. hf_seq's
``CheckedLoadingMixin`` (hf_seq/modeling_utils.py), a base of every family's ``*PreTrainedModel``, turns these into
clear errors.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import transformers
from conftest import assert_same_outputs
from tiny_models import FIRST_HEADS, build_tokenizer, model_inputs, tiny_model
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

import hf_seq
from hf_seq.modeling_utils import CheckedLoadingMixin, check_safetensors_file

BASES = {
    "rnn": hf_seq.RNNPreTrainedModel,
    "rnn_seq2seq": hf_seq.RNNSeq2SeqPreTrainedModel,
    "transformer": hf_seq.TransformerPreTrainedModel,
    "bert": hf_seq.BertPreTrainedModel,
}
HEAD_IDS = [h.__name__ for _, h in FIRST_HEADS]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One saved folder per family (its first head) and the logits of the in-process model."""
    root = tmp_path_factory.mktemp("saved")
    tokenizer = build_tokenizer()
    folders = {}
    for family, head in FIRST_HEADS:
        model = tiny_model(head, len(tokenizer))
        model.save_pretrained(root / family)
        batch = model_inputs(model, tokenizer)
        with torch.no_grad():
            folders[family] = (root / family, batch, model(**batch).logits)
    return folders


def copy_of(saved, family, tmp_path):
    folder = tmp_path / family
    shutil.copytree(saved[family][0], folder)
    return folder


def test_every_family_base_class_uses_the_checked_loading_mixin():
    missing = [name for name, base in BASES.items() if not issubclass(base, CheckedLoadingMixin)]
    assert not missing, f"families {missing} must derive from CheckedLoadingMixin before PreTrainedModel"


@pytest.mark.parametrize("family,head", FIRST_HEADS, ids=HEAD_IDS)
def test_valid_folders_still_load_to_the_same_model(saved, family, head):
    folder, batch, expected = saved[family]
    model = head.from_pretrained(folder).eval()
    with torch.no_grad():
        assert_same_outputs(model(**batch).logits, expected)  # reloaded object: equal to float rounding


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "short header"])
@pytest.mark.parametrize("family,head", FIRST_HEADS, ids=HEAD_IDS)
def test_corrupt_weights_file_raises_naming_the_file(saved, family, head, damage, tmp_path):
    folder = copy_of(saved, family, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(
        {
            "truncated": data[: len(data) - 100],
            "garbage": bytes(range(256)) * (len(data) // 256),
            "empty": b"",
            "short header": data[:12],
        }[damage]
    )
    with pytest.raises(OSError, match=r"model\.safetensors is not a valid safetensors weights file") as err:
        head.from_pretrained(folder)
    assert str(weights) in str(err.value)


def test_a_truncated_shard_of_a_sharded_checkpoint_is_named(tmp_path):
    model = tiny_model(hf_seq.BertForMaskedLM, 26)
    model.save_pretrained(tmp_path, max_shard_size="4KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    shards[-1].write_bytes(shards[-1].read_bytes()[:-8])
    with pytest.raises(OSError, match=shards[-1].name):
        hf_seq.BertForMaskedLM.from_pretrained(tmp_path)


def test_check_safetensors_file_accepts_what_save_pretrained_writes(saved):
    for folder, _, _ in saved.values():
        check_safetensors_file(folder / "model.safetensors")


@pytest.mark.parametrize("family,head", FIRST_HEADS, ids=HEAD_IDS)
def test_missing_config_json_raises_naming_the_file(saved, family, head, tmp_path):
    folder = copy_of(saved, family, tmp_path)
    (folder / "config.json").unlink()
    with pytest.raises(OSError, match=r"has no config\.json"):
        head.from_pretrained(folder)
    # the Auto classes already name the file (they read the config first)
    auto = getattr(__import__("transformers"), head._auto_class)
    with pytest.raises((OSError, ValueError), match=r"config\.json"):
        auto.from_pretrained(folder)


def test_missing_weights_file_is_named_by_transformers(saved, tmp_path):
    folder = copy_of(saved, "rnn", tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(OSError, match="model.safetensors"):
        hf_seq.RNNForSequenceClassification.from_pretrained(folder)


@pytest.mark.parametrize(
    "family,wrong_cls",
    [
        ("rnn", hf_seq.BertForMaskedLM),
        ("bert", hf_seq.RNNForSequenceClassification),
        ("transformer", hf_seq.RNNSeq2SeqForConditionalGeneration),
        ("rnn_seq2seq", hf_seq.TransformerForConditionalGeneration),
    ],
    ids=["rnn->bert", "bert->rnn", "transformer->rnn_seq2seq", "rnn_seq2seq->transformer"],
)
def test_another_familys_folder_with_the_wrong_class_raises(saved, family, wrong_cls):
    folder = saved[family][0]
    with pytest.raises(ValueError, match=rf"describes a 'hf_seq_{family}' model .* but {wrong_cls.__name__} loads"):
        wrong_cls.from_pretrained(folder)


def test_wrong_family_through_the_auto_classes_is_refused_by_transformers(saved):
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForMaskedLM.from_pretrained(saved["rnn"][0])
    with pytest.raises(ValueError, match="Unrecognized configuration class"):
        AutoModelForSequenceClassification.from_pretrained(saved["transformer"][0])
    assert type(AutoModel.from_pretrained(saved["bert"][0])).__name__ == "BertModel"  # the base model is fine


def test_another_head_of_the_same_family_still_loads(saved):
    """Fine-tuning starts from a pretrained folder of another head (new head initialised): that must keep working."""
    model = hf_seq.BertForSequenceClassification.from_pretrained(saved["bert"][0])
    reference = hf_seq.BertForMaskedLM.from_pretrained(saved["bert"][0])
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, reference.bert.embeddings.word_embeddings.weight)


def load_file_names(path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


@pytest.mark.parametrize(
    "weights_of,config_of",
    [("rnn", "bert"), ("bert", "rnn"), ("transformer", "rnn_seq2seq"), ("rnn_seq2seq", "transformer")],
    ids=["rnn-weights+bert-config", "bert-weights+rnn-config", "transformer+rnn_seq2seq", "rnn_seq2seq+transformer"],
)
def test_weights_matching_none_of_the_parameters_raise_naming_model_type_and_tensors(
    saved, weights_of, config_of, tmp_path
):
    """Another family's config.json copied over a folder: the config's model is built, but none of the checkpoint's
    tensors fits it; transformers would return a fully random model with a load report."""
    folder = copy_of(saved, weights_of, tmp_path)
    shutil.copy(saved[config_of][0] / "config.json", folder / "config.json")
    head = dict(FIRST_HEADS)[config_of]
    tensor_names = sorted(load_file_names(folder / "model.safetensors"))
    auto = getattr(transformers, head._auto_class)
    for load in (head.from_pretrained, auto.from_pretrained):
        with pytest.raises(ValueError, match="None of the weights in") as err:
            load(folder)
        message = str(err.value)
        assert str(folder / "model.safetensors") in message and str(folder / "config.json") in message
        assert f"model_type 'hf_seq_{config_of}'" in message
        assert tensor_names[0] in message and f"({len(tensor_names)} in all)" in message, message


def test_a_sharded_checkpoint_of_another_model_is_named_by_its_index(tmp_path):
    tiny_model(hf_seq.BertForMaskedLM, 26).save_pretrained(tmp_path, max_shard_size="4KB")
    config = json.loads((tmp_path / "config.json").read_text())
    rnn_config = hf_seq.HfSeqRNNConfig(vocab_size=26, embedding_size=6, hidden_size=5).to_dict()
    rnn_config["auto_map"] = config["auto_map"]
    (tmp_path / "config.json").write_text(json.dumps(rnn_config))
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json fit RNNForSequenceClassification") as err:
        hf_seq.RNNForSequenceClassification.from_pretrained(tmp_path)
    assert "bert.embeddings.word_embeddings.weight" in str(err.value) and "model_type 'hf_seq_rnn'" in str(err.value)


def test_partial_loads_and_loading_info_are_unchanged(saved):
    """A model that gets SOME weights (pretrained body, new head) loads as before, with transformers' report."""
    model, info = hf_seq.BertForSequenceClassification.from_pretrained(saved["bert"][0], output_loading_info=True)
    assert isinstance(model, hf_seq.BertForSequenceClassification)
    assert "classifier.weight" in info["missing_keys"] and not any(
        k.startswith("bert.embeddings") for k in info["missing_keys"]
    )
    assert isinstance(hf_seq.BertForMaskedLM.from_pretrained(saved["bert"][0]), hf_seq.BertForMaskedLM)


# ---------------------------------------------------------------------------------------------------------------
# a config.json that disagrees with the weights beside it; a local folder that does not exist
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family,head", FIRST_HEADS, ids=HEAD_IDS)
def test_a_config_whose_sizes_disagree_with_the_weights_names_the_field(saved, family, head, tmp_path):
    """transformers gives a load report and advises ignore_mismatched_sizes=True, which would re-initialise the
    weights; hf_seq names config.json, the field, the size of the weights and a tensor's two shapes."""
    folder = copy_of(saved, family, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    trained = config["hidden_size"]
    config["hidden_size"] = 2 * trained + 2
    (folder / "config.json").write_text(json.dumps(config))
    auto = getattr(transformers, head._auto_class)
    for load in (head.from_pretrained, auto.from_pretrained):
        with pytest.raises(ValueError, match="does not match the weights saved beside it") as err:
            load(folder)
        message = str(err.value)
        assert str(folder / "config.json") in message
        assert f"`hidden_size` {2 * trained + 2} (the weights have {trained})" in message
        assert "in the checkpoint but" in message and "do not pass ignore_mismatched_sizes=True" in message


def test_a_size_given_to_from_pretrained_points_to_ignore_mismatched_sizes(saved, tmp_path):
    """A neighbour: the size comes from the call (a classifier with more labels), not from config.json; starting
    that head anew is what ignore_mismatched_sizes is for, and it still works."""
    folder = saved["rnn"][0]
    for given in ({}, {"ignore_mismatched_sizes": False}):
        with pytest.raises(
            ValueError, match="with num_labels=5 given to from_pretrained.*ignore_mismatched_sizes=True"
        ):
            hf_seq.RNNForSequenceClassification.from_pretrained(folder, num_labels=5, **given)
    same = hf_seq.RNNForSequenceClassification.from_pretrained(folder, ignore_mismatched_sizes=False)
    assert torch.equal(
        same.classifier.weight, hf_seq.RNNForSequenceClassification.from_pretrained(folder).classifier.weight
    )
    model = hf_seq.RNNForSequenceClassification.from_pretrained(folder, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.out_features == 5


@pytest.mark.parametrize("path", ["{tmp}/no_such_run", "./no_such_run/model", "runs_of_{name}/a/b", "{tmp}/x/"])
def test_a_local_folder_that_does_not_exist_is_named(path, tmp_path):
    """transformers takes a missing folder for a Hub id ("Repo id must be in the form ...")."""
    name = path.format(tmp=tmp_path, name=tmp_path.name)
    for load in (hf_seq.RNNForSequenceClassification.from_pretrained, hf_seq.BertForMaskedLM.from_pretrained):
        with pytest.raises(FileNotFoundError, match="no such folder") as err:
            load(name)
        assert name in str(err.value)
