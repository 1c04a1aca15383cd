"""Pretrain a (small) BERT with masked-LM + next-sentence prediction, evaluated on held-out documents.

    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json [--field value ...]
    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json \
        --train_file corpus.txt --output_dir runs/my-bert        # 5% of the documents held out for validation
    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json \
        --model_name_or_path runs/bert-pretrain-brown --max_seq_length 256   # continue, longer pairs
    hf-seq-train pretrain_bert configs/bert_pretrain_brown.json

Data: documents, from ``--dataset_name`` (the preset ``hf_seq/brown_documents`` with ``--text_column_name
paragraphs``; a folder; a ``datasets`` name) or ``--train_file`` / ``--validation_file`` / ``--test_file``. A txt file
is BERT's pretraining format: one sentence per line, a blank line between documents. In csv / json / jsonl / parquet
each row of ``--text_column_name`` is a document: a list of sentences, a list of paragraphs (lists of sentences), or
a string with one sentence per line (rows that are single lines are read like a txt file). Without a validation
split ``validation_split_percentage`` % of the DOCUMENTS are held out.

Steps: a WordPiece tokenizer is trained on the training documents (unless ``--tokenizer_name`` /
``--model_name_or_path`` gives one); training pairs come from :class:`hf_seq.collators.DataCollatorForBertPretraining`
(fresh next-sentence pairs and masks every epoch); validation / test pairs are fixed (one seed per example) and drawn
from held-out documents. ``compute_metrics`` reports masked-LM accuracy (over the selected 15%) and next-sentence
accuracy; ``preprocess_logits_for_metrics`` reduces logits to argmaxes so evaluation memory stays small. The model
(``BertForPreTraining``) and tokenizer are saved to ``output_dir``; ``results.json`` holds the test metrics.
``--model_name_or_path <folder>`` continues from a folder this script saved (or a transformers BERT checkpoint,
converted); a ``--max_seq_length`` longer than that model's position table grows the table first
(``resize_position_embeddings``: BERT's final phase at longer sequences). ``--eval_only true --model_name_or_path
<folder>`` only evaluates that folder (``results.json``); ``--eval_pairs_per_anchor k`` draws k validation / test
pairs per held-out anchor.
"""

from __future__ import annotations

import logging
import os
import resource
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset, DatasetDict
from hf_seq.train_scripts.arguments import BudgetArguments, RecipeError, Task, parse_args
from hf_seq.train_scripts.common import (
    TimeBudgetCallback,
    describe_data,
    load_or_build_model,
    load_task_data,
    require_columns,
    run_training,
    save_run,
    start_run,
    tokenizer_for,
    training_command,
    use_cpu_processes_without_gpu,
)
from hf_seq.train_scripts.trainer import HfSeqTrainer
from transformers import set_seed

from hf_seq.collators import DataCollatorForBertPretraining, bert_pretraining_anchors, tokenize_documents_to_store
from hf_seq.data import DataError, hold_out_validation, split_source

logger = logging.getLogger(__name__)


@dataclass
class PretrainArguments(BudgetArguments):
    """Pair construction, masking and evaluation."""

    mlm_probability: float = 0.15
    nsp_probability: float = 0.5
    short_seq_probability: float = 0.1
    eval_pairs_per_anchor: int = field(
        default=1,
        metadata={
            "help": "Validation/test pairs drawn per held-out anchor (each with its own seed: another split point and "
            "random segment). Long pairs leave few anchors; more pairs per anchor make the accuracies less noisy."
        },
    )
    eval_only: bool = field(
        default=False,
        metadata={"help": "Only evaluate the model_name_or_path model (no training, nothing saved but results.json)."},
    )
    num_threads: int | None = field(default=None, metadata={"help": "torch threads (default: OMP_NUM_THREADS)."})

    def __post_init__(self):
        for name in ("mlm_probability", "nsp_probability", "short_seq_probability"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"`{name}` must be in [0, 1], got {getattr(self, name)}")
        if self.eval_pairs_per_anchor < 1:
            raise ValueError(f"`eval_pairs_per_anchor` must be at least 1, got {self.eval_pairs_per_anchor}")


TASK = Task(
    name="pretrain_bert",
    arguments=PretrainArguments,
    defaults={
        "model_type": "hf_seq_bert",
        "tokenizer_kind": "wordpiece",
        "tokenizer_vocab_size": 8000,
        "max_seq_length": 128,
        "text_column_name": "text",
    },
    unused=frozenset(
        {
            "label_column_name",
            "tokens_column_name",
            "tags_column_name",
            "source_lang",
            "target_lang",
            "max_source_length",
            "max_target_length",
        }
    ),
    text_files=True,
    tokenizer_kinds=("wordpiece",),
    model_head="AutoModelForPreTraining",
)


def documents_of(dataset: Dataset, column: str) -> list[list]:
    """The documents of a split: lists of sentences (or of paragraphs, lists of sentences).

    A list column holds one document per row. A string column holds one document per row with one sentence per line,
    unless every row is a single line (a txt file: one sentence per line): then blank rows separate documents."""
    kind = dataset.data.column(column).type
    where = split_source(dataset)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return list(dataset[column])
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise DataError(
            f"{where}: column {column!r} (`text_column_name`) must hold documents (text, or lists of sentences), got "
            f"{kind}; its columns are {dataset.column_names}"
        )
    rows = dataset[column]
    if any("\n" in row.rstrip("\n") for row in rows):  # one document per row
        return [[line for line in row.splitlines() if line.strip()] for row in rows]
    documents, current = [], []
    for row in rows:  # one sentence per row, blank rows between documents
        if row.strip():
            current.append(row.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


def load_documents(data_args) -> DatasetDict:
    """Splits of documents; without a validation split, whole documents are held out."""
    raw = load_task_data(TASK, data_args, require_validation=False)
    column = data_args.text_column_name
    require_columns(raw, {"text_column_name": column})
    splits = DatasetDict()
    for name, dataset in raw.items():
        splits[name] = Dataset.from_dict({"document": documents_of(dataset, column)})
        splits[name].info.description = split_source(dataset)
        if len(splits[name]) < 2:
            raise DataError(
                f"{split_source(dataset)} holds {len(splits[name])} document(s): next-sentence pairs need at least two "
                "(separate documents with a blank line)"
            )
    if "validation" not in splits:
        if not data_args.validation_split_percentage:
            raise DataError(
                f"{split_source(splits['train'])} has no validation split: pass `validation_file` or a "
                "`validation_split_percentage`"
            )
        splits = hold_out_validation(splits, data_args.validation_split_percentage, data_args.split_seed)
    return splits


def _anchor_dataset(
    documents, max_length: int, seed_offset: int | None, limit: int | None = None, pairs_per_anchor: int = 1
) -> Dataset:
    """Anchors as a Dataset; ``seed_offset`` adds a fixed per-example seed (deterministic evaluation pairs), and
    ``pairs_per_anchor`` repeats every anchor with distinct seeds (evaluation only)."""
    if pairs_per_anchor < 1:
        raise ValueError(f"`eval_pairs_per_anchor` must be at least 1, got {pairs_per_anchor}")
    anchors = bert_pretraining_anchors(documents, max_length)
    if pairs_per_anchor > 1:
        anchors = {key: [v for v in values for _ in range(pairs_per_anchor)] for key, values in anchors.items()}
    if seed_offset is not None:
        anchors["example_seed"] = [seed_offset + i for i in range(len(anchors["doc_index"]))]
    ds = Dataset.from_dict(anchors)
    if limit is not None and len(ds) > limit:
        ds = ds.select(range(limit))
    return ds


def preprocess_logits_for_metrics(logits, labels):
    """Argmax of both heads, aligned with the labels: ``(mlm predictions (B, T), nsp predictions (B,))``.

    With ``sparse_prediction`` the masked-LM logits are ``(N, V)`` for the N labelled positions; they are scattered
    back into a ``(B, T)`` tensor (-100 elsewhere).
    """
    mlm_logits, nsp_logits = logits[0], logits[1]
    mlm_labels = labels[0]
    if mlm_logits.dim() == 2:  # sparse: (N, V)
        preds = torch.full_like(mlm_labels, -100)
        preds[mlm_labels != -100] = mlm_logits.argmax(-1)
    else:
        preds = mlm_logits.argmax(-1)
    return preds, nsp_logits.argmax(-1)


def compute_metrics(eval_pred) -> dict[str, float]:
    """Masked-LM accuracy over the selected tokens and next-sentence accuracy."""
    (mlm_preds, nsp_preds), (mlm_labels, nsp_labels) = eval_pred.predictions, eval_pred.label_ids
    selected = mlm_labels != -100
    return {
        "mlm_accuracy": float(np.mean(mlm_preds[selected] == mlm_labels[selected])),
        "nsp_accuracy": float(np.mean(nsp_preds == nsp_labels)),
        "nsp_random_fraction": float(np.mean(nsp_labels == 1)),
    }


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, args, training_args = parse_args(TASK, argv)
    previous = start_run(training_args)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    threads = args.num_threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    training_args.remove_unused_columns = False  # the collator needs the anchor columns
    if args.eval_only and not model_args.model_name_or_path:
        raise RecipeError("`eval_only` needs `model_name_or_path` (the pretrained folder to evaluate)")
    set_seed(training_args.seed)
    max_length = data_args.max_seq_length
    command = training_command(__file__, argv)

    documents = load_documents(data_args)
    tokenizer = tokenizer_for(
        model_args,
        lambda: [
            s
            for doc in documents["train"]["document"]
            for item in doc
            for s in ([item] if isinstance(item, str) else item)
        ],
        max_length,
    )
    tokenizer.model_max_length = max_length
    # sentences tokenized into memory-mapped token stores (documents = row ranges), not lists of lists of ids
    store_dir = tempfile.TemporaryDirectory(prefix="hf_seq_bert_tokens_")
    docs = {
        name: tokenize_documents_to_store(split["document"], tokenizer, Path(store_dir.name) / name)
        for name, split in documents.items()
    }
    train_ds = _anchor_dataset(docs["train"], max_length, None, data_args.max_train_samples)
    repeats = args.eval_pairs_per_anchor
    eval_ds = _anchor_dataset(docs["validation"], max_length, 1_000_000, data_args.max_eval_samples, repeats)
    test_ds = (
        _anchor_dataset(docs["test"], max_length, 2_000_000, data_args.max_predict_samples, repeats)
        if "test" in docs
        else None
    )
    logger.info(
        "pairs per epoch: train %d, validation %d, test %s", len(train_ds), len(eval_ds), len(test_ds) if test_ds else 0
    )

    def collator_for(split: str) -> DataCollatorForBertPretraining:
        return DataCollatorForBertPretraining(
            tokenizer,
            docs[split],
            max_length=max_length,
            mlm_probability=args.mlm_probability,
            nsp_probability=args.nsp_probability,
            short_seq_probability=args.short_seq_probability,
            seed=training_args.seed,
        )

    model = load_or_build_model(
        TASK,
        model_args,
        data_args,
        tokenizer,
        {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id, "max_position_embeddings": max_length},
    )
    if model_args.model_name_or_path and max_length > model.config.max_position_embeddings:
        logger.info("growing the position table from %d to %d rows", model.config.max_position_embeddings, max_length)
        model.resize_position_embeddings(max_length)
    logger.info("%s with %.2fM parameters", type(model).__name__, model.num_parameters() / 1e6)

    # Random "next" segments must come from held-out documents of the same split: each split gets its own collator.
    class _SplitCollator:
        def __init__(self) -> None:
            self.by_split = {split: collator_for(split) for split in docs}
            self.active = self.by_split["train"]

        def __call__(self, features):
            return self.active(features)

    collator = _SplitCollator()

    class _EvalSplitTrainer(HfSeqTrainer):
        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
            collator.active = collator.by_split["test" if metric_key_prefix == "test" else "validation"]
            try:
                return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
            finally:
                collator.active = collator.by_split["train"]

    budget = TimeBudgetCallback(args.max_train_minutes, args.max_train_cpu_minutes)
    trainer = _EvalSplitTrainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        callbacks=[budget],
    )
    if args.eval_only:
        train_metrics = {}
    else:
        train_result = run_training(trainer, training_args)
        train_metrics = train_result.metrics
    validation = trainer.evaluate()
    test = trainer.evaluate(test_ds, metric_key_prefix="test") if test_ds is not None else {}
    data_line = describe_data(data_args, documents, unit="documents")
    results = {
        "data": data_line,
        "train": train_metrics,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "validation": validation,
        "test": test,
        "model_name_or_path": model_args.model_name_or_path,
        "num_parameters": model.num_parameters(),
        "process_cpu_minutes": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime / 60.0, 2),
        "pairs": {"train_per_epoch": len(train_ds), "validation": len(eval_ds), "test": len(test_ds) if test_ds else 0},
    }
    metrics = {
        "validation_mlm_accuracy": round(validation["eval_mlm_accuracy"], 4),
        "validation_nsp_accuracy": round(validation["eval_nsp_accuracy"], 4),
        "train_steps": trainer.state.global_step,
        "epochs": round(trainer.state.epoch or 0.0, 3),
        "processes": training_args.world_size,
    }
    if test:
        metrics |= {
            "test_mlm_accuracy": round(test["test_mlm_accuracy"], 4),
            "test_nsp_accuracy": round(test["test_nsp_accuracy"], 4),
            "test_loss": round(test["test_loss"], 4),
        }
    source = (
        f"from `{model_args.tokenizer_name or model_args.model_name_or_path}`"
        if (model_args.tokenizer_name or model_args.model_name_or_path)
        else "trained on the training documents"
    )
    card = {
        "dataset": f"{data_line}. Masked-LM + next-sentence pairs of at most {max_length} tokens: {len(train_ds)} "
        f"anchors per training epoch (fresh pairs and masks each epoch), {len(eval_ds)} validation and "
        f"{results['pairs']['test']} test pairs fixed by a per-example seed, each drawn from held-out documents of its "
        f"split; mask probability {args.mlm_probability}, random-next probability {args.nsp_probability}. WordPiece "
        f"tokenizer of {len(tokenizer)} tokens {source}.",
        "metrics": metrics,
        "intended_use": "A small English BERT encoder pre-trained (masked LM + next-sentence prediction) as the "
        "starting point for fine-tuning on small tasks (`train_scripts/finetune_bert.py`) and for teaching; also "
        "fill-mask on text like its training documents.",
        "limitations": "Pre-trained on a small corpus, orders of magnitude less text than BERT-base: its masked-word "
        "predictions favour frequent words, its vocabulary and knowledge are those of that corpus, and it reflects "
        "that corpus' era and biases; not a replacement for a full-size pre-trained BERT.",
    }
    # a model card only for a folder that holds a model
    save_run(
        trainer,
        training_args.output_dir,
        results,
        command,
        card=None if args.eval_only else card,
        save_model=not args.eval_only,
    )
    logger.info("validation %s", validation)
    logger.info("test %s", test)
    return results


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
