"""Fine-tune hf_seq BERT: sentiment classification (Rotten Tomatoes) or part-of-speech tagging (Brown coarse tags).

    python train_scripts/finetune_bert.py configs/bert_finetune_sentiment.json --init_from runs/bert-pretrain-brown
    python train_scripts/finetune_bert.py configs/bert_finetune_sentiment.json --init_from "" \\
        --tokenizer_name runs/bert-pretrain-brown --output_dir runs/bert-sentiment-scratch   # no pretraining
    python train_scripts/finetune_bert.py configs/bert_finetune_pos.json --init_from runs/bert-pretrain-brown

``--init_from`` is a folder saved by ``pretrain_bert.py`` (any hf_seq BERT head; the encoder is loaded, the task
head is new and reported) or empty for a randomly initialised model of the given size. The tokenizer comes from
``--tokenizer_name`` (default: ``init_from``); with neither, a WordPiece tokenizer is trained on the task's training
split. Splits are the project's fixed ones (``load_sentiment()`` 80/10/10, ``load_brown()`` by document), the same
as the recurrent recipes. The best-validation checkpoint is evaluated on the test split; ``results.json`` holds it.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    set_seed,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_seq import BertConfig, BertForSequenceClassification, BertForTokenClassification  # noqa: E402
from hf_seq.data import BROWN_COARSE_TAGS, load_brown, load_sentiment  # noqa: E402
from hf_seq.metrics import load_metric  # noqa: E402
from hf_seq.model_card import write_model_card  # noqa: E402
from hf_seq.tokenization import build_wordpiece_tokenizer  # noqa: E402
from train_scripts.common import (  # noqa: E402
    TimeBudgetCallback,
    parse_recipe_args,
    resolve_resume_checkpoint,
    save_final_model,
    training_command,
    use_cpu_processes_without_gpu,
    write_results,
)

TASKS = ("sentiment", "pos")


@dataclass
class FinetuneArguments:
    """Task, initialisation and (for a model without pretraining) its size."""

    task: str = field(default="sentiment", metadata={"help": '"sentiment" | "pos"'})
    init_from: str | None = field(default=None, metadata={"help": "pretrained hf_seq BERT folder ('' = none)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: init_from)"})
    vocab_size: int = 8000
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 512
    hidden_dropout_prob: float = 0.1
    max_length: int = 128
    split_seed: int = 42
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    max_train_minutes: float | None = None


def _tokenizer(args: FinetuneArguments, train_texts):
    name = args.tokenizer_name or args.init_from
    if name:
        tokenizer = AutoTokenizer.from_pretrained(name)
    else:
        tokenizer = build_wordpiece_tokenizer(train_texts, vocab_size=args.vocab_size)
    tokenizer.model_max_length = args.max_length
    return tokenizer


def _model(args: FinetuneArguments, cls, tokenizer, id2label: dict[int, str]):
    label2id = {v: k for k, v in id2label.items()}
    if args.init_from:
        return cls.from_pretrained(args.init_from, num_labels=len(id2label), id2label=id2label, label2id=label2id)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.num_hidden_layers,
        num_attention_heads=args.num_attention_heads,
        intermediate_size=args.intermediate_size,
        hidden_dropout_prob=args.hidden_dropout_prob,
        max_position_embeddings=args.max_length,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=len(id2label),
        id2label=id2label,
        label2id=label2id,
    )
    return cls(config)


def _limit(raw, args: FinetuneArguments):
    """The first ``max_train_samples`` / ``max_eval_samples`` rows of the fixed splits (tokenizer is built before)."""
    limits = {"train": args.max_train_samples, "validation": args.max_eval_samples, "test": args.max_eval_samples}
    for split, limit in limits.items():
        if limit is not None and len(raw[split]) > limit:
            raw[split] = raw[split].select(range(limit))
    return raw


TASK_USE = {
    "sentiment": "Binary sentiment (negative / positive) of short English movie-review sentences with a small BERT "
    'encoder (`pipeline("text-classification")`); a teaching comparison against the recurrent classifiers, not a '
    "production sentiment model.",
    "pos": "Coarse part-of-speech tagging (12 universal tags) of English words with a small BERT encoder (the first "
    'word piece of each word is tagged; `pipeline("token-classification")` tags word pieces); a teaching '
    "comparison against the recurrent taggers.",
}
TASK_LIMITS = {
    "sentiment": "Trained on one domain (Rotten Tomatoes critic snippets) with a small model and WordPiece vocabulary: "
    "negation, sarcasm and text far from film reviews are often misjudged.",
    "pos": "Trained on the Brown corpus (1961 American English, universal coarse tags): modern, informal or "
    "domain-specific text is tagged less accurately; only the first word piece of each word carries the tag.",
}


def _dataset_description(args: FinetuneArguments, splits: dict[str, int], tokenizer) -> str:
    """The model card's training-data line: corpus, fixed split, rows used and tokenizer."""
    if args.task == "sentiment":
        corpus = (
            f"Rotten Tomatoes critic snippets (fresh/rotten), `hf_seq.data.load_sentiment(seed={args.split_seed})`"
            " (fixed 80/10/10 split)"
        )
    else:
        corpus = (
            f"Brown corpus with universal coarse tags, `hf_seq.data.load_brown(seed={args.split_seed})` "
            "(fixed split by document)"
        )
    source = (
        f"from `{args.tokenizer_name or args.init_from}`"
        if (args.tokenizer_name or args.init_from)
        else "trained on the training split"
    )
    return (
        f"{corpus}; used: {splits['train']} / {splits['validation']} / {splits['test']} train / validation / "
        f"test sentences; WordPiece tokenizer of {len(tokenizer)} tokens {source}; inputs truncated to "
        f"{args.max_length} tokens."
    )


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    args, training_args = parse_recipe_args((FinetuneArguments, TrainingArguments), argv)
    if args.task not in TASKS:
        raise ValueError(f"`task` must be one of {list(TASKS)}, got {args.task!r}")
    set_seed(training_args.seed)
    accuracy = load_metric("accuracy")

    if args.task == "sentiment":
        raw = _limit(load_sentiment(seed=args.split_seed), args)
        tokenizer = _tokenizer(args, raw["train"]["text"])
        id2label = dict(enumerate(raw["train"].features["label"].names))
        encoded = raw.map(
            lambda b: tokenizer(b["text"], truncation=True, max_length=args.max_length),
            batched=True,
            remove_columns=["text"],
        ).rename_column("label", "labels")
        collator = DataCollatorWithPadding(tokenizer)
        model_cls = BertForSequenceClassification

        def compute_metrics(eval_pred):
            logits, labels = eval_pred
            return accuracy.compute(predictions=logits.argmax(-1), references=labels)

    else:
        raw = _limit(load_brown(seed=args.split_seed).select_columns(["tokens", "coarse_tags"]), args)
        tokenizer = _tokenizer(args, (" ".join(t) for t in raw["train"]["tokens"]))
        id2label = dict(enumerate(BROWN_COARSE_TAGS))
        tag_id = {t: i for i, t in enumerate(BROWN_COARSE_TAGS)}

        def encode(batch):
            enc = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True, max_length=args.max_length)
            labels = []
            for i, tags in enumerate(batch["coarse_tags"]):
                previous, row = None, []
                for word in enc.word_ids(i):  # label the first word piece of each word, -100 elsewhere
                    row.append(-100 if word is None or word == previous else tag_id[tags[word]])
                    previous = word
                labels.append(row)
            enc["labels"] = labels
            return enc

        encoded = raw.map(encode, batched=True, remove_columns=["tokens", "coarse_tags"])
        collator = DataCollatorForTokenClassification(tokenizer)
        model_cls = BertForTokenClassification

        def compute_metrics(eval_pred):
            logits, labels = eval_pred
            keep = labels != -100
            return accuracy.compute(predictions=logits.argmax(-1)[keep], references=labels[keep])

    model = _model(args, model_cls, tokenizer, id2label)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        compute_metrics=compute_metrics,
        callbacks=[TimeBudgetCallback(args.max_train_minutes)],
    )
    start = time.monotonic()
    train_output = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
    train_minutes = (time.monotonic() - start) / 60.0
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
    save_final_model(trainer, training_args.output_dir)  # model + tokenizer + code for trust_remote_code, atomic
    results = {
        "task": args.task,
        "init_from": args.init_from or None,
        "validation_accuracy": val["validation_accuracy"],
        "test_accuracy": test["test_accuracy"],
        "train_minutes": round(train_minutes, 3),
        "train_loss": train_output.training_loss if math.isfinite(train_output.training_loss) else None,
        "epochs_run": trainer.state.epoch,
        "torch_threads": torch.get_num_threads(),
        "num_parameters": model.num_parameters(),
        "process_cpu_minutes": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime / 60.0, 2),
        "splits": {k: len(v) for k, v in encoded.items()},
    }
    if trainer.is_world_process_zero():
        command = training_command(__file__, argv)
        write_results(training_args.output_dir, results, command=command)
        write_model_card(
            training_args.output_dir,
            trainer.model,
            dataset=_dataset_description(args, results["splits"], tokenizer),
            metrics={
                "validation_accuracy": round(results["validation_accuracy"], 4),
                "test_accuracy": round(results["test_accuracy"], 4),
                "test_loss": round(test["test_loss"], 4),
                "epochs": round(trainer.state.epoch or 0.0, 3),
                "train_minutes": results["train_minutes"],
                "processes": training_args.world_size,
            },
            command=command,
            intended_use=TASK_USE[args.task]
            + (
                f" Fine-tuned from the pre-trained encoder in `{args.init_from}`."
                if args.init_from
                else " Trained from a random initialisation (no pre-training): a baseline for the pre-trained model."
            ),
            limitations=TASK_LIMITS[args.task],
        )
        print(
            f"{args.task}: validation accuracy {results['validation_accuracy']:.4f}  test accuracy "
            f"{results['test_accuracy']:.4f}  ({train_minutes:.2f} train minutes)"
        )
    return results


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
