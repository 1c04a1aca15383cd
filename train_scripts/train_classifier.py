"""Train a recurrent sentiment classifier (``RNNForSequenceClassification``) with ``Trainer``.

    python train_scripts/train_classifier.py configs/sentiment_bilstm.json [--num_train_epochs 3 ...]
    accelerate launch --multi_gpu --num_processes 2 train_scripts/train_classifier.py configs/sentiment_bilstm.json  # CPU: gloo
    torchrun --nproc_per_node 2 train_scripts/train_classifier.py configs/sentiment_bilstm.json
    python train_scripts/train_classifier.py configs/sentiment_bilstm.json --resume_from_checkpoint last  # after a crash

The JSON recipe holds model-config fields (:class:`ModelArguments`), data/tokenizer fields (:class:`DataArguments`)
and ``TrainingArguments`` fields; command-line flags override it. The script builds a word-level tokenizer on the
training split (the notes' "keep the top V words"), trains with per-epoch evaluation, keeps the checkpoint with the
best validation accuracy, evaluates it on the held-out test split and writes ``results.json`` (validation and test
accuracy, training minutes, parameter counts) beside the saved model + tokenizer in ``output_dir``. The saved folder
carries ``id2label``, so ``pipeline("text-classification", model=output_dir)`` shows "negative" / "positive".
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from common import (
    TimeBudgetCallback,
    parse_recipe_args,
    resolve_resume_checkpoint,
    save_final_model,
    training_command,
    use_cpu_processes_without_gpu,
    write_results,
)
from transformers import DataCollatorWithPadding, Trainer, TrainerCallback, TrainingArguments, set_seed

from hf_seq.configuration_rnn import RNNConfig
from hf_seq.data import load_sentiment
from hf_seq.metrics import load_metric
from hf_seq.model_card import write_model_card
from hf_seq.modeling_rnn import RNNForSequenceClassification
from hf_seq.tokenization import build_word_level_tokenizer


@dataclass
class ModelArguments:
    """Fields of :class:`hf_seq.RNNConfig` (see its docstring)."""

    cell: str = field(default="lstm", metadata={"help": '"none" | "rnn" | "lstm" | "gru"'})
    embedding_size: int = field(default=32, metadata={"help": "word vector size"})
    hidden_size: int = field(default=32, metadata={"help": "recurrent state size per direction"})
    num_layers: int = field(default=1, metadata={"help": "stacked recurrent layers"})
    bidirectional: bool = field(default=False, metadata={"help": "add a right-to-left layer per level"})
    pooling: str = field(default="last", metadata={"help": '"last" | "mean" | "max" | "flatten"'})
    dropout: float = field(default=0.0, metadata={"help": "dropout between layers and before the head"})
    embedding_dropout: float = field(default=0.0, metadata={"help": "dropout on the word vectors"})
    freeze_embeddings: bool = field(default=False, metadata={"help": "keep the embedding table fixed"})
    implementation: str = field(default="fused", metadata={"help": '"fused" (torch.nn) | "cell" (explicit steps)'})
    initializer_range: float = field(default=0.1, metadata={"help": "std of embedding / head initialisation"})
    num_labels: int = field(
        default=2,
        metadata={
            "help": "2 = softmax over negative/positive; 1 = the notes' single sigmoid output (sets "
            'problem_type="multi_label_classification", i.e. logistic regression with BCE)'
        },
    )
    pretrained_embeddings: str | None = field(
        default=None, metadata={"help": "file with a (vocab_size, embedding_size) matrix for this tokenizer's vocab"}
    )


@dataclass
class DataArguments:
    """Data and tokenizer options."""

    max_vocab_size: int = field(default=10000, metadata={"help": "keep the top V words (specials included)"})
    min_frequency: int = field(default=1, metadata={"help": "drop words seen fewer times"})
    lowercase: bool = field(default=True, metadata={"help": "lowercase before counting words"})
    max_length: int = field(default=64, metadata={"help": "truncate to this many tokens (flatten: pad to it too)"})
    padding_side: str = field(default="right", metadata={"help": '"right" | "left" (the notes pad in front)'})
    truncation_side: str = field(default="right", metadata={"help": '"right" keeps the first tokens, "left" the last'})
    split_seed: int = field(default=42, metadata={"help": "seed of load_sentiment's fixed split"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training rows"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N validation/test rows"})
    max_train_minutes: float | None = field(default=None, metadata={"help": "stop training after this wall time"})
    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "alpha of frequency-based word dropout in training (a word seen f times becomes the "
            "unknown token with probability alpha / (alpha + f)); 0 = off"
        },
    )


class WordDropoutCollator(TrainerCallback):
    """Wraps a collator; replaces training tokens by ``unk_id`` with probability ``drop_prob[token]``.

    The random draws do not use (or advance) the global RNG: each batch gets its own generator seeded from
    ``(seed, epoch, the batch's token ids)``. Trainer collates batches ahead of the step that uses them and, on
    ``resume_from_checkpoint``, restores the RNG state only after the first batches are collated — with global-RNG
    draws a resumed run would see different masks than the uninterrupted one. As a ``TrainerCallback`` it learns the
    epoch from ``on_epoch_begin`` (``TrainCollatorTrainer`` registers it).
    """

    def __init__(self, base, drop_prob: torch.Tensor, unk_id: int, seed: int = 0) -> None:
        self.base = base
        self.drop_prob = drop_prob  # (vocab_size,) probability per token id; 0 for special tokens
        self.unk_id = unk_id
        self.seed = seed
        self.epoch = 0

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.epoch = int(state.epoch + 1e-6)  # a run resumed mid-epoch starts at a fractional epoch

    def batch_generator(self, ids: torch.Tensor) -> torch.Generator:
        digest = hashlib.blake2b(ids.numpy().tobytes(), digest_size=8, key=f"{self.seed}:{self.epoch}".encode())
        return torch.Generator().manual_seed(int.from_bytes(digest.digest(), "little") & (2**63 - 1))

    def __call__(self, features):
        batch = self.base(features)
        ids = batch["input_ids"]  # (B, T)
        drop = torch.rand(ids.shape, generator=self.batch_generator(ids)) < self.drop_prob[ids]
        batch["input_ids"] = torch.where(drop, torch.full_like(ids, self.unk_id), ids)
        return batch


def word_dropout_collator(base, tokenizer, train_dataset, alpha: float, seed: int = 0):
    """Frequency-based word dropout (Kiperwasser & Goldberg 2016): a word seen ``f`` times in training becomes the
    unknown token with probability ``alpha / (alpha + f)``, so the unknown-word vector gets trained. ``None`` if
    ``alpha`` is 0."""
    if alpha <= 0:
        return None
    ids = torch.tensor([i for row in train_dataset["input_ids"] for i in row])
    counts = torch.bincount(ids, minlength=len(tokenizer)).double()
    drop_prob = alpha / (alpha + counts)
    drop_prob[torch.tensor(tokenizer.all_special_ids)] = 0.0
    drop_prob[counts == 0] = 0.0
    return WordDropoutCollator(base, drop_prob.float(), tokenizer.unk_token_id, seed=seed)


class TrainCollatorTrainer(Trainer):
    """``Trainer`` whose training batches (only) go through ``train_collator`` (evaluation uses ``data_collator``)."""

    def __init__(self, *args, train_collator=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.train_collator = train_collator
        if isinstance(train_collator, TrainerCallback):
            self.add_callback(train_collator)

    def get_train_dataloader(self):
        if self.train_collator is None:
            return super().get_train_dataloader()
        original, self.data_collator = self.data_collator, self.train_collator
        try:
            return super().get_train_dataloader()
        finally:
            self.data_collator = original


def align_word_vectors(path: str, tokenizer, initial: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Matrix for ``tokenizer``'s vocabulary from a word2vec/GloVe text file; words missing from the file keep their
    row of ``initial`` (the model's random initialisation), the padding row is zero. Returns (matrix, coverage)."""
    matrix = initial.clone()
    vocab = tokenizer.get_vocab()
    found = 0
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f):
            parts = line.rstrip("\n").split(" ")
            if line_no == 0 and len(parts) == 2:  # word2vec header "<count> <dim>"
                continue
            word, values = parts[0], parts[1:]
            if word in vocab:
                if len(values) != matrix.shape[1]:
                    raise ValueError(
                        f"`pretrained_embeddings` has {len(values)}-dim vectors, the model's embedding_size is "
                        f"{matrix.shape[1]}"
                    )
                matrix[vocab[word]] = torch.tensor([float(v) for v in values])
                found += 1
    if tokenizer.pad_token_id is not None:
        matrix[tokenizer.pad_token_id] = 0.0
    return matrix, found / len(vocab)


def count_parameters(model: torch.nn.Module) -> dict:
    """Total / trainable parameters and a per-top-module breakdown."""
    per_module = {}
    for name, param in model.named_parameters():
        key = ".".join(name.split(".")[:4]) if name.startswith("rnn.") else name.split(".")[0]
        per_module[key] = per_module.get(key, 0) + param.numel()
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad and not _frozen(model, p)),
        "per_module": per_module,
    }


def _frozen(model, param) -> bool:
    return model.config.freeze_embeddings and param is model.get_input_embeddings().weight


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, training_args = parse_recipe_args((ModelArguments, DataArguments, TrainingArguments), argv)
    set_seed(training_args.seed)

    # ---- data + tokenizer (built on the training split only)
    raw = load_sentiment(seed=data_args.split_seed)
    if data_args.max_train_samples is not None:
        raw["train"] = raw["train"].select(range(min(data_args.max_train_samples, len(raw["train"]))))
    if data_args.max_eval_samples is not None:
        for split in ("validation", "test"):
            raw[split] = raw[split].select(range(min(data_args.max_eval_samples, len(raw[split]))))
    label_names = raw["train"].features["label"].names
    tokenizer = build_word_level_tokenizer(
        raw["train"]["text"],
        max_vocab_size=data_args.max_vocab_size,
        min_frequency=data_args.min_frequency,
        lowercase=data_args.lowercase,
        padding_side=data_args.padding_side,
        truncation_side=data_args.truncation_side,
        model_max_length=data_args.max_length,
    )
    flatten = model_args.pooling == "flatten"

    def tokenize(batch):
        return tokenizer(batch["text"], truncation=True, max_length=data_args.max_length)

    encoded = raw.map(tokenize, batched=True, remove_columns=["text"])
    encoded = encoded.rename_column("label", "labels")
    collator = DataCollatorWithPadding(
        tokenizer, padding="max_length" if flatten else "longest", max_length=data_args.max_length
    )

    # ---- model
    if model_args.num_labels not in (1, len(label_names)):
        raise ValueError(
            f"`num_labels` must be 1 (sigmoid) or {len(label_names)} (softmax), got {model_args.num_labels}"
        )
    if model_args.num_labels == 1:  # one sigmoid output = P(positive): the notes' logistic regression
        problem_type, id2label = "multi_label_classification", {0: label_names[1]}
    else:
        problem_type, id2label = "single_label_classification", dict(enumerate(label_names))
    config = RNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=model_args.embedding_size,
        hidden_size=model_args.hidden_size,
        num_layers=model_args.num_layers,
        cell=model_args.cell,
        bidirectional=model_args.bidirectional,
        pooling=model_args.pooling,
        max_seq_length=data_args.max_length if flatten else None,  # other poolings take any length
        dropout=model_args.dropout,
        embedding_dropout=model_args.embedding_dropout,
        freeze_embeddings=model_args.freeze_embeddings,
        implementation=model_args.implementation,
        initializer_range=model_args.initializer_range,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=model_args.num_labels,
        problem_type=problem_type,
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    model = RNNForSequenceClassification(config)
    coverage = None
    if model_args.pretrained_embeddings:
        vectors = model_args.pretrained_embeddings
        if vectors.endswith((".txt", ".vec")):  # word2vec / GloVe text: align the words to this vocabulary
            vectors, coverage = align_word_vectors(vectors, tokenizer, model.get_input_embeddings().weight.detach())
        model.load_pretrained_embeddings(vectors, freeze=model_args.freeze_embeddings)

    accuracy = load_metric("accuracy")

    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        logits = logits[0] if isinstance(logits, tuple) else logits
        preds = (logits[:, 0] > 0).astype(np.int64) if logits.shape[-1] == 1 else logits.argmax(-1)
        return accuracy.compute(predictions=preds, references=np.asarray(labels).reshape(-1).astype(np.int64))

    trainer = TrainCollatorTrainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        train_collator=word_dropout_collator(
            collator, tokenizer, encoded["train"], data_args.word_dropout, seed=training_args.seed
        ),
        compute_metrics=compute_metrics,
        callbacks=[TimeBudgetCallback(data_args.max_train_minutes)],
    )
    start = time.monotonic()
    train_output = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
    train_minutes = (time.monotonic() - start) / 60.0
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
    save_final_model(trainer, training_args.output_dir)  # model + tokenizer + code for trust_remote_code, atomic

    results = {
        "task": "sentiment (Rotten Tomatoes critic snippets)",
        "validation_accuracy": val["validation_accuracy"],
        "test_accuracy": test["test_accuracy"],
        "validation_loss": val["validation_loss"],
        "test_loss": test["test_loss"],
        "train_minutes": round(train_minutes, 3),
        "train_loss": train_output.training_loss if math.isfinite(train_output.training_loss) else None,
        "epochs_run": trainer.state.epoch,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "torch_threads": torch.get_num_threads(),
        "parameters": count_parameters(model),
        "splits": {k: len(v) for k, v in raw.items()},
        "vocab_size": len(tokenizer),
        "pretrained_embeddings": model_args.pretrained_embeddings,
        "pretrained_vocab_coverage": coverage,
        "model_config": {
            k: getattr(config, k)
            for k in (
                "cell",
                "embedding_size",
                "hidden_size",
                "num_layers",
                "bidirectional",
                "pooling",
                "max_seq_length",
                "dropout",
                "embedding_dropout",
                "num_labels",
                "problem_type",
            )
        },
    }
    if trainer.is_world_process_zero():
        write_results(training_args.output_dir, results, command=training_command(__file__, argv))
        write_model_card(
            training_args.output_dir,
            model,
            dataset=f"Rotten Tomatoes critic snippets (fresh/rotten), `hf_seq.data.load_sentiment(seed="
            f"{data_args.split_seed})`; splits (rows): {results['splits']}; word-level tokenizer built on the "
            f"training split, {len(tokenizer)} tokens, sequences truncated to {data_args.max_length} tokens.",
            metrics={k: results[k] for k in ("validation_accuracy", "test_accuracy", "test_loss", "train_minutes")}
            | {"epochs": results["epochs_run"], "processes": training_args.world_size},
            command=training_command(__file__, argv),
            intended_use="Binary sentiment (negative / positive) of short English movie-review sentences; a small "
            "teaching baseline for recurrent classifiers, not a production sentiment model.",
            limitations="Trained on one domain (critic snippets) with a closed word-level vocabulary: unknown words "
            "map to [UNK]; negation and sarcasm are often missed.",
        )
        print(
            f"validation accuracy {results['validation_accuracy']:.4f}  test accuracy {results['test_accuracy']:.4f}"
            f"  ({train_minutes:.2f} train minutes)"
        )
    return results


if __name__ == "__main__":
    main()
