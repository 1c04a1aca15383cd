"""Fine-tuning from a ``transformers`` BERT checkpoint folder (``finetune_bert.py --model_name_or_path <folder>``).

The folders here are laid out like the MiniLM checkpoint that ``make pretrained`` installs: a bare
``transformers.BertModel`` (``architectures: ["BertModel"]``, pooler included) saved with transformers' own
``BertTokenizer`` (``tokenizer.json`` + ``tokenizer_config.json``), whose vocabulary splits some words into several
word pieces. Tiny, random, built in the test: nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import transformers
from conftest import assert_same_outputs
from hf_seq.train_scripts import finetune_bert
from hf_seq.train_scripts.arguments import RecipeError, parse_args
from hf_seq.train_scripts.common import load_or_build_model, tokenizer_for
from own_data import FAST, flags, write_splits
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

import hf_seq

WORDS = ["the", "a", "film", "plot", "actor", "was", "is", "and", "very", "too", "good", "bad", "dull", "fun", "."]
PIECES = ["un", "##believ", "##able", "##watch", "##funny", "over", "##long", "##rated", "##ly"]
# words of several pieces: un ##believ ##able, un ##watch ##able, un ##funny, over ##long, over ##rated ##ly
LONG_WORDS = ["unbelievable", "unwatchable", "unfunny", "overlong", "overratedly"]
POSITIVE = ["the film was very good", "a good and fun plot", "the actor is unbelievable", "fun fun and good"]
NEGATIVE = ["the plot was unwatchable and overlong", "a dull film", "the actor is too unfunny", "overratedly bad"]


def build_checkpoint(folder: Path, head: type = transformers.BertModel, **config) -> Path:
    """A tiny ``transformers`` BERT of class ``head`` with a ``BertTokenizer`` over WORDS + PIECES, saved in
    ``folder``."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokenizer = transformers.BertTokenizer(vocab={t: i for i, t in enumerate(specials + WORDS + PIECES)})
    bert_config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        **config,
    )
    torch.manual_seed(0)
    head(bert_config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return build_checkpoint(tmp_path_factory.mktemp("minilm_like"))


def reviews(n: int, start: int = 0) -> list[dict]:
    return [
        {"text": (POSITIVE if i % 2 else NEGATIVE)[i // 2 % 4], "label": "pos" if i % 2 else "neg"}
        for i in range(start, start + n)
    ]


def sentences(n: int, start: int = 0) -> list[dict]:
    """Tagged sentences in which every third word or so is one of LONG_WORDS (several word pieces)."""
    rows = []
    for i in range(start, start + n):
        words = ["the", "actor", "was", LONG_WORDS[i % 5], "and", LONG_WORDS[(i + 2) % 5], "."]
        tags = ["DET", "NOUN", "VERB", "ADJ", "CONJ", "ADJ", "."]
        if i % 2:
            words, tags = words[3:], tags[3:]
        rows.append({"tokens": words, "tags": tags})
    return rows


def test_checkpoint_splits_words_into_pieces(checkpoint):
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert tokenizer.tokenize("unwatchable overratedly") == ["un", "##watch", "##able", "over", "##rated", "##ly"]
    assert "[UNK]" not in tokenizer.tokenize(" ".join(WORDS + LONG_WORDS))


@pytest.mark.parametrize(
    ("task", "ours", "theirs"),
    [
        ("text-classification", hf_seq.BertForSequenceClassification, transformers.BertForSequenceClassification),
        ("token-classification", hf_seq.BertForTokenClassification, transformers.BertForTokenClassification),
    ],
)
def test_the_scripts_conversion_starts_from_the_checkpoint(checkpoint, task, ours, theirs):
    """The model ``finetune_bert.py`` builds from the folder (its own loading path, before any training step)
    computes what transformers computes from the same folder: encoder, pooler and, with the new head's weights
    copied, the logits."""
    model_args, data_args, args, _ = parse_args(
        finetune_bert.TASK,
        ["--model_name_or_path", str(checkpoint), "--task", task, "--dataset_name", "hf_seq/sentiment"]
        + ["--output_dir", "unused"],
    )
    script_task = dataclasses.replace(finetune_bert.TASK, model_head=finetune_bert.HEADS[task])
    tokenizer = tokenizer_for(model_args, lambda: pytest.fail("the checkpoint's tokenizer must be used"), 32)
    id2label = {0: "neg", 1: "pos", 2: "mixed"}
    model = load_or_build_model(
        script_task,
        model_args,
        data_args,
        tokenizer,
        {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id},
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    ).eval()
    assert type(model) is ours and model.config.num_labels == 3

    reference_encoder = transformers.BertModel.from_pretrained(checkpoint).eval()
    reference = theirs.from_pretrained(checkpoint, num_labels=3).eval()
    reference.classifier.load_state_dict(model.classifier.state_dict())  # the one new (random) part
    texts = ["the film was unbelievable", "a dull overlong plot and a very unfunny actor ."]
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # padded
    keep = batch["attention_mask"].bool()
    with torch.no_grad():
        encoder, expected = model.bert(**batch), reference_encoder(**batch)
        assert_same_outputs(encoder.last_hidden_state[keep], expected.last_hidden_state[keep])
        if encoder.pooler_output is not None:
            assert_same_outputs(encoder.pooler_output, expected.pooler_output)
        logits, expected_logits = model(**batch).logits, reference(**batch).logits
    if task == "token-classification":
        logits, expected_logits = logits[keep], expected_logits[keep]
    assert_same_outputs(logits, expected_logits)


def test_config_overrides_set_mean_pooling_on_the_converted_model(checkpoint):
    """``--config_overrides classifier_pooling=mean`` reaches the converted model (a field of hf_seq's config, not of
    the checkpoint's), whose logits are the classifier on tanh(pooler.dense(mean of transformers' last hidden states
    over the real tokens)); transformers' own model has no such field, so the reference switch refuses it."""
    argv = ["--model_name_or_path", str(checkpoint), "--dataset_name", "hf_seq/sentiment", "--output_dir", "unused"]
    model_args, data_args, _, _ = parse_args(
        finetune_bert.TASK, [*argv, "--config_overrides", "classifier_pooling=mean"]
    )
    tokenizer = tokenizer_for(model_args, lambda: pytest.fail("the checkpoint's tokenizer must be used"), 32)
    model = load_or_build_model(finetune_bert.TASK, model_args, data_args, tokenizer, {}, num_labels=2).eval()
    assert type(model) is hf_seq.BertForSequenceClassification and model.config.classifier_pooling == "mean"

    encoder = transformers.BertModel.from_pretrained(checkpoint).eval()
    batch = tokenizer(["the film was unbelievable", "a dull overlong plot and a very unfunny actor ."], padding=True)
    batch = {k: torch.tensor(v) for k, v in batch.items()}
    assert (batch["attention_mask"] == 0).any()  # padded
    with torch.no_grad():
        states = encoder(**batch).last_hidden_state  # (B, T, H)
        means = torch.stack([row[mask.bool()].mean(0) for row, mask in zip(states, batch["attention_mask"])])
        expected = model.classifier(torch.tanh(encoder.pooler.dense(means)))
        assert_same_outputs(model(**batch).logits, expected)

    task = dataclasses.replace(finetune_bert.TASK, convert_transformers_bert=False)
    with pytest.raises(RecipeError, match="`config_overrides`: bert has no field `classifier_pooling`"):
        load_or_build_model(task, model_args, data_args, tokenizer, {}, num_labels=2)


def test_finetune_from_a_checkpoint_folder_sentiment(tmp_path, checkpoint):
    """End to end: a few training steps from the folder, then the saved model reproduces the reported test
    accuracy."""
    splits = {"train": reviews(32), "validation": reviews(8, 32), "test": reviews(8, 40)}
    files = write_splits(tmp_path / "data", ".jsonl", splits)
    out = tmp_path / "run"
    results = finetune_bert.main(
        [*flags(files), "--model_name_or_path", str(checkpoint), "--learning_rate", "1e-3", "--max_seq_length", "32"]
        + ["--per_device_train_batch_size", "8", *FAST, "--max_steps", "4", "--output_dir", str(out)]
    )
    assert results["train_steps"] == 4 and results["labels"] == ["neg", "pos"]
    assert results["model_type"] == "hf_seq_bert" and results["model_name_or_path"] == str(checkpoint)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert type(model) is hf_seq.BertForSequenceClassification
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.get_vocab() == AutoTokenizer.from_pretrained(checkpoint).get_vocab()  # the checkpoint's own
    source = transformers.BertModel.from_pretrained(checkpoint)
    moved = model.bert.embeddings.word_embeddings.weight - source.embeddings.word_embeddings.weight
    assert 0 < moved.abs().max() < 0.05  # trained 4 small steps away from the checkpoint
    test = reviews(8, 40)
    with torch.no_grad():
        logits = model(**tokenizer([r["text"] for r in test], padding=True, return_tensors="pt")).logits
    truth = torch.tensor([r["label"] == "pos" for r in test]).long()
    assert results["test_accuracy"] == pytest.approx((logits.argmax(-1) == truth).float().mean().item())


@pytest.mark.parametrize("convert", ["true", "false"])
def test_finetune_from_a_checkpoint_folder_tagging_labels_first_pieces(tmp_path, checkpoint, convert):
    """Token classification from the folder (hf_seq's converted model, and transformers' own as the reference):
    exactly one label per word, on its first word piece — the reported test accuracy is the saved model's accuracy
    at the first pieces, which differs from the accuracy at the last pieces here."""
    test = sentences(6, 30)
    splits = {"train": sentences(24), "validation": sentences(6, 24), "test": test}
    files = write_splits(tmp_path / "data", ".jsonl", splits)
    out = tmp_path / "run"
    results = finetune_bert.main(
        [*flags(files), "--task", "token-classification", "--model_name_or_path", str(checkpoint)]
        + ["--convert_transformers_bert", convert, "--learning_rate", "1e-3", "--per_device_train_batch_size", "8"]
        + [*FAST, "--max_steps", "3", "--output_dir", str(out)]
    )
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    expected_class = hf_seq.BertForTokenClassification if convert == "true" else transformers.BertForTokenClassification
    assert type(model) is expected_class and results["train_steps"] == 3
    tokenizer = AutoTokenizer.from_pretrained(out)
    encoded = tokenizer([r["tokens"] for r in test], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1)
    first = last = 0
    for row, sentence in enumerate(test):
        word_ids = encoded.word_ids(row)
        positions = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                positions.setdefault(word, []).append(position)
        assert max(len(p) for p in positions.values()) >= 2  # some words have several pieces
        for word, tag in enumerate(sentence["tags"]):
            label = model.config.label2id[tag]
            first += int(predicted[row, positions[word][0]] == label)
            last += int(predicted[row, positions[word][-1]] == label)
    words = sum(len(r["tokens"]) for r in test)
    assert results["test_tokens"] == words  # one label per word, none on specials or continuation pieces
    assert first != last  # the test can tell first pieces from last ones
    assert results["test_accuracy"] == pytest.approx(first / words)


def test_the_reference_switch_measures_the_same_model(tmp_path):
    """With the same weights (a checkpoint that has the classifier too) and no update, transformers' own model
    (``--convert_transformers_bert false``) and hf_seq's converted one report the same losses on the same data."""
    checkpoint = build_checkpoint(
        tmp_path / "classifier", transformers.BertForSequenceClassification, id2label={0: "neg", 1: "pos"}
    )
    splits = {"train": reviews(16), "validation": reviews(8, 16), "test": reviews(8, 24)}
    files = write_splits(tmp_path / "data", ".csv", splits)
    runs = {}
    for convert in ("true", "false"):
        runs[convert] = finetune_bert.main(
            [*flags(files), "--model_name_or_path", str(checkpoint), "--convert_transformers_bert", convert]
            + ["--learning_rate", "0", *FAST, "--output_dir", str(tmp_path / convert)]
        )
    assert runs["true"]["model_type"] == "hf_seq_bert" and runs["false"]["model_type"] == "bert"
    for key in ("validation_loss", "test_loss"):
        assert_same_outputs(torch.tensor(runs["true"][key]), torch.tensor(runs["false"][key]))
    assert runs["true"]["validation_accuracy"] == runs["false"]["validation_accuracy"]
