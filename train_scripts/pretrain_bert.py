"""Pretrain a (small) BERT on the Brown corpus: masked-LM + next-sentence prediction, evaluated on held-out documents.

    python train_scripts/pretrain_bert.py configs/bert_pretrain_brown.json [--field value ...]

Steps: a WordPiece tokenizer is trained on the Brown TRAIN documents (``hf_seq.tokenization.build_wordpiece_tokenizer``);
training pairs come from :class:`hf_seq.collators.DataCollatorForBertPretraining` (fresh next-sentence pairs and
masks every epoch); validation / test pairs are fixed (one seed per example) and drawn from held-out documents
(``hf_seq.data.load_brown_documents``). ``compute_metrics`` reports masked-LM accuracy (over the selected 15%) and
next-sentence accuracy; ``preprocess_logits_for_metrics`` reduces logits to argmaxes so evaluation memory stays small.
The model (``BertForPreTraining``) and tokenizer are saved to ``output_dir``; ``results.json`` holds the test metrics.
``--init_from <folder>`` continues pretraining from a folder this script saved (same tokenizer); a ``--max_length``
longer than that model's position table grows the table first (``resize_position_embeddings``: BERT's final phase at
longer sequences). ``--eval_only true --init_from <folder>`` only evaluates that folder (``results.json``);
``--eval_pairs_per_anchor k`` draws k validation / test pairs per held-out anchor.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import AutoTokenizer, Trainer, TrainingArguments, set_seed

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_seq import BertConfig, BertForPreTraining  # noqa: E402
from hf_seq.collators import DataCollatorForBertPretraining, bert_pretraining_anchors, tokenize_documents  # noqa: E402
from hf_seq.data import load_brown_documents  # noqa: E402
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

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """BERT size (``BertConfig`` fields) and tokenizer vocabulary."""

    init_from: str | None = field(
        default=None,
        metadata={
            "help": "Continue from a folder saved by this script (its model and tokenizer; size fields ignored)."
        },
    )
    vocab_size: int = field(default=8000, metadata={"help": "WordPiece vocabulary size trained on Brown train."})
    hidden_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 512
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    sparse_prediction: bool = field(
        default=True, metadata={"help": "Compute vocabulary logits only at the masked positions (faster)."}
    )


@dataclass
class DataArguments:
    """Pair construction and masking."""

    max_length: int = field(
        default=128, metadata={"help": "Length of [CLS] A [SEP] B [SEP] (also the position table)."}
    )
    mlm_probability: float = 0.15
    nsp_probability: float = 0.5
    short_seq_probability: float = 0.1
    data_seed_split: int = field(default=42, metadata={"help": "Seed of the Brown document split."})
    max_eval_examples: int | None = field(default=None, metadata={"help": "Cap on validation pairs (None: all)."})
    eval_pairs_per_anchor: int = field(
        default=1,
        metadata={
            "help": "Validation/test pairs drawn per held-out anchor (each with its own seed: another split point and "
            "random segment). Long pairs leave few anchors; more pairs per anchor make the accuracies less noisy."
        },
    )
    eval_only: bool = field(
        default=False,
        metadata={"help": "Only evaluate the --init_from model (no training, nothing saved but results.json)."},
    )
    max_minutes: float | None = field(default=None, metadata={"help": "Stop training after this many minutes."})
    max_cpu_minutes: float | None = field(
        default=None, metadata={"help": "Stop training after this many CPU-minutes of training steps (all threads)."}
    )
    num_threads: int | None = field(default=None, metadata={"help": "torch threads (default: OMP_NUM_THREADS)."})


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
    model_args, data_args, training_args = parse_recipe_args((ModelArguments, DataArguments, TrainingArguments), argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    threads = data_args.num_threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads:
        torch.set_num_threads(threads)
    training_args.remove_unused_columns = False  # the collator needs the anchor columns
    if data_args.eval_only and not model_args.init_from:
        raise ValueError("`eval_only` needs `init_from` (the pretrained folder to evaluate)")
    set_seed(training_args.seed)

    brown = load_brown_documents(seed=data_args.data_seed_split)
    if model_args.init_from:
        tokenizer = AutoTokenizer.from_pretrained(model_args.init_from)
    else:
        train_sentences = (s for doc in brown["train"]["paragraphs"] for p in doc for s in p)
        tokenizer = build_wordpiece_tokenizer(train_sentences, vocab_size=model_args.vocab_size)
    tokenizer.model_max_length = data_args.max_length
    docs = {name: tokenize_documents(brown[name]["paragraphs"], tokenizer) for name in ("train", "validation", "test")}
    train_ds = _anchor_dataset(docs["train"], data_args.max_length, None)
    repeats = data_args.eval_pairs_per_anchor
    eval_ds = _anchor_dataset(docs["validation"], data_args.max_length, 1_000_000, data_args.max_eval_examples, repeats)
    test_ds = _anchor_dataset(docs["test"], data_args.max_length, 2_000_000, pairs_per_anchor=repeats)
    logger.info("pairs per epoch: train %d, validation %d, test %d", len(train_ds), len(eval_ds), len(test_ds))

    def collator_for(split: str) -> DataCollatorForBertPretraining:
        return DataCollatorForBertPretraining(
            tokenizer,
            docs[split],
            max_length=data_args.max_length,
            mlm_probability=data_args.mlm_probability,
            nsp_probability=data_args.nsp_probability,
            short_seq_probability=data_args.short_seq_probability,
            seed=training_args.seed,
        )

    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        num_attention_heads=model_args.num_attention_heads,
        intermediate_size=model_args.intermediate_size,
        hidden_act=model_args.hidden_act,
        hidden_dropout_prob=model_args.hidden_dropout_prob,
        attention_probs_dropout_prob=model_args.attention_probs_dropout_prob,
        max_position_embeddings=data_args.max_length,
        pad_token_id=tokenizer.pad_token_id,
        sparse_prediction=model_args.sparse_prediction,
    )
    if model_args.init_from:
        model = BertForPreTraining.from_pretrained(model_args.init_from, sparse_prediction=model_args.sparse_prediction)
        if data_args.max_length > model.config.max_position_embeddings:
            logger.info(
                "growing the position table from %d to %d rows",
                model.config.max_position_embeddings,
                data_args.max_length,
            )
            model.resize_position_embeddings(data_args.max_length)
    else:
        model = BertForPreTraining(config)
    logger.info("BertForPreTraining with %.2fM parameters", model.num_parameters() / 1e6)

    # Random "next" segments must come from held-out documents of the same split: each split gets its own collator.
    class _SplitCollator:
        def __init__(self) -> None:
            self.train, self.validation, self.test = (
                collator_for("train"),
                collator_for("validation"),
                collator_for("test"),
            )
            self.active = self.train

        def __call__(self, features):
            return self.active(features)

    collator = _SplitCollator()

    class _EvalSplitTrainer(Trainer):
        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"):
            collator.active = collator.test if metric_key_prefix == "test" else collator.validation
            try:
                return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
            finally:
                collator.active = collator.train

    trainer = _EvalSplitTrainer(
        model=model,
        args=training_args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=preprocess_logits_for_metrics,
        callbacks=[TimeBudgetCallback(data_args.max_minutes, data_args.max_cpu_minutes)],
    )
    if data_args.eval_only:
        train_metrics = {}
    else:
        train_result = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
        save_final_model(trainer, training_args.output_dir)  # model + tokenizer + code for trust_remote_code, atomic
        train_metrics = train_result.metrics
    validation = trainer.evaluate()
    test = trainer.evaluate(test_ds, metric_key_prefix="test")
    results = {
        "train": train_metrics,
        "validation": validation,
        "test": test,
        "num_parameters": model.num_parameters(),
        "process_cpu_minutes": round(resource.getrusage(resource.RUSAGE_SELF).ru_utime / 60.0, 2),
        "pairs": {"train_per_epoch": len(train_ds), "validation": len(eval_ds), "test": len(test_ds)},
    }
    command = training_command(__file__, argv)
    is_main = trainer.is_world_process_zero()
    if is_main:
        write_results(training_args.output_dir, results, command=command)
    if is_main and not data_args.eval_only:  # a model card only for a folder that holds a model
        splits = {name: len(brown[name]) for name in ("train", "validation", "test")}
        write_model_card(
            training_args.output_dir,
            trainer.model,
            dataset=f"Brown corpus documents (`hf_seq.data.load_brown_documents(seed={data_args.data_seed_split})`, "
            f"the same document split as the POS tagger; {splits['train']} / {splits['validation']} / "
            f"{splits['test']} train / validation / test documents). Masked-LM + next-sentence pairs of at most "
            f"{data_args.max_length} tokens: {len(train_ds)} anchors per training epoch (fresh pairs and masks each "
            f"epoch), {len(eval_ds)} validation and {len(test_ds)} test pairs fixed by a per-example seed, each drawn "
            f"from held-out documents of its split; mask probability {data_args.mlm_probability}, random-next "
            f"probability {data_args.nsp_probability}. WordPiece tokenizer of {len(tokenizer)} tokens"
            + (f" (from {model_args.init_from})." if model_args.init_from else " trained on the training documents."),
            metrics={
                "validation_mlm_accuracy": round(validation["eval_mlm_accuracy"], 4),
                "validation_nsp_accuracy": round(validation["eval_nsp_accuracy"], 4),
                "test_mlm_accuracy": round(test["test_mlm_accuracy"], 4),
                "test_nsp_accuracy": round(test["test_nsp_accuracy"], 4),
                "test_loss": round(test["test_loss"], 4),
                "train_steps": trainer.state.global_step,
                "epochs": round(trainer.state.epoch or 0.0, 3),
                "processes": training_args.world_size,
            },
            command=command,
            intended_use="A small English BERT encoder pre-trained (masked LM + next-sentence prediction) as the "
            "starting point for fine-tuning on Brown-sized tasks (`train_scripts/finetune_bert.py`) and for "
            "teaching; also fill-mask on 1960s American English text.",
            limitations="Pre-trained on about one million words of 1961 American English (the Brown corpus), "
            "orders of magnitude less than BERT-base: its masked-word predictions favour frequent words, its "
            "vocabulary and knowledge are those of that corpus, and it reflects that era's biases; not a "
            "replacement for a full-size pre-trained BERT.",
        )
    logger.info("validation %s", validation)
    logger.info("test %s", test)
    return results


if __name__ == "__main__":
    main()
