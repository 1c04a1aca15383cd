"""Train a text classifier (``AutoModelForSequenceClassification``) with ``Trainer``: the recurrent classifier of the
notes by default, any registered ``model_type`` (e.g. ``hf_seq_bert``) or a saved folder (``model_name_or_path``).

    python train_scripts/train_classifier.py configs/sentiment_bilstm.json [--num_train_epochs 3 ...]
    python train_scripts/train_classifier.py configs/sentiment_bilstm.json \
        --train_file reviews.csv --validation_file dev.csv --test_file test.csv \
        --text_column_name review --label_column_name stars --output_dir runs/reviews
    hf-seq-train classifier configs/sentiment_bilstm.json                      # the same, after `pip install`
    torchrun --nproc_per_node 2 train_scripts/train_classifier.py configs/sentiment_bilstm.json  # CPU: gloo
    python train_scripts/train_classifier.py configs/sentiment_bilstm.json --resume_from_checkpoint last  # after a crash

Data (:mod:`hf_seq.train_scripts.arguments`): ``--dataset_name`` (the preset ``hf_seq/sentiment``, a folder, a
``datasets`` name) or ``--train_file`` / ``--validation_file`` / ``--test_file`` (csv, tsv, json, jsonl, parquet);
``--text_column_name`` (default ``text``) and ``--label_column_name`` (default ``label``: strings or numbers, or a
``ClassLabel``). The label set is the training split's (a ``ClassLabel``'s names); a label seen only in another split
is an error. Without a validation split ``--validation_split_percentage`` % of the training rows are held out.

The tokenizer is ``--tokenizer_name``'s or ``--model_name_or_path``'s; with neither one is built on the training split
(``tokenizer_kind`` ``"word"``: the notes' "keep the top V words"; ``"wordpiece"`` for BERT). The model is
``model_type`` + ``model_config`` (``"num_labels": 1`` with two labels is the notes' single sigmoid output). Training
evaluates on the validation split (``eval_strategy``), keeps the best checkpoint if asked, evaluates it on the test
split when there is one and writes the model + tokenizer, ``results.json`` and a model card to ``output_dir``; the
saved ``id2label`` makes ``pipeline("text-classification", model=output_dir)`` print the label names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from hf_seq.train_scripts.arguments import RecipeError, Task, model_config_dict, override_values
from hf_seq.train_scripts.classification import (
    WORD_PRE_TOKENIZERS,
    LabelColumns,
    LabelledData,
    LabelledTextArguments,
    card_origins,
    train_and_validate,
)
from hf_seq.train_scripts.common import load_or_build_model, stream_row_error
from hf_seq.train_scripts.features import ColumnTexts
from hf_seq.train_scripts.skeleton import finish_script_run, parse_script_args, start_script_run
from transformers import AutoConfig, DataCollatorWithPadding

from hf_seq.toolkit.data import DataError, is_blank
from hf_seq.toolkit.metrics import load_metric

logger = logging.getLogger(__name__)


@dataclass
class ClassifierArguments(LabelledTextArguments):
    """Word dropout, pretrained word vectors (recurrent models), the preprocessing (cache, workers) and how a built
    word-level tokenizer splits text."""

    word_pre_tokenizer: str = field(
        default="whitespace_punct",
        metadata={
            "help": "how a built word-level tokenizer splits text: 'whitespace_punct' (words and punctuation runs, "
            "\\w+|[^\\w\\s]+), 'glove' (as GloVe 6B's text: clitics apart, don't -> do n't, each punctuation mark "
            "alone) or 'whitespace'",
            "choices": list(WORD_PRE_TOKENIZERS),
        },
    )

    def __post_init__(self):
        super().__post_init__()  # the labelled-text fields
        if self.word_pre_tokenizer not in WORD_PRE_TOKENIZERS:
            raise ValueError(
                f"`word_pre_tokenizer` must be one of {list(WORD_PRE_TOKENIZERS)}, got {self.word_pre_tokenizer!r}"
            )


SHARED_UNUSED = frozenset({"tokens_column_name", "tags_column_name", "source_lang", "target_lang"})
TASK = Task(
    name="train_classifier",
    arguments=ClassifierArguments,
    defaults={
        "model_type": "hf_seq_rnn",
        "tokenizer_kind": "word",
        "tokenizer_vocab_size": 10000,
        "max_seq_length": 64,
        "text_column_name": "text",
        "label_column_name": "label",
    },
    unused=SHARED_UNUSED | {"max_source_length", "max_target_length"},
    tokenizer_kinds=("word", "wordpiece"),
    model_head="AutoModelForSequenceClassification",
    # the notes' flatten classifier reads exactly max_seq_length positions; other poolings take any length
    derived_config=lambda values, vocab_size, data: (
        {"max_seq_length": data.max_seq_length} if values.get("pooling") == "flatten" else {}
    ),
)


def _sigmoid_head(model_args, names: list[str]) -> bool:
    """True for the notes' single sigmoid output: ``num_labels`` 1 with two labels (new model: ``model_config``;
    a saved folder: its config)."""
    if model_args.model_name_or_path:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path)
        requested = config.num_labels if config.problem_type == "multi_label_classification" else None
    else:
        requested = model_config_dict(model_args).get("num_labels")
        if model_args.config_overrides and "num_labels" in model_args.config_overrides:
            requested = override_values(model_args.config_overrides, AutoConfig.for_model(model_args.model_type)).get(
                "num_labels", requested
            )
    if requested not in (None, 1, len(names)):
        raise RecipeError(
            f"`num_labels` {requested} does not fit the data's {len(names)} labels {names[:10]}: leave it out, or 1 "
            "(a single sigmoid output) for two labels"
        )
    if requested == 1 and len(names) != 2:
        raise RecipeError(f"`num_labels` 1 (a sigmoid output) needs two labels, the data has {len(names)}")
    return requested == 1


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    return run(model_args, data_args, args, training_args, command=command)


def build_classifier_model(task, model_args, data_args, tokenizer, names: list[str]):
    """(model, whether it flattens ``max_seq_length`` positions): a new model with the head the labels need
    (one sigmoid output for the notes' logistic regression, else one output per label) or the saved one."""
    if _sigmoid_head(model_args, names):  # one sigmoid output = P(second label): the notes' logistic regression
        head = {"num_labels": 1, "problem_type": "multi_label_classification", "id2label": {0: names[1]}}
    else:
        head = {"problem_type": "single_label_classification", "id2label": dict(enumerate(names))}
    head["label2id"] = {v: k for k, v in head["id2label"].items()}
    model = load_or_build_model(task, model_args, data_args, tokenizer, **head)
    flatten = getattr(model.config, "pooling", None) == "flatten"
    max_length = data_args.max_seq_length
    if flatten and model.config.max_seq_length != max_length:
        raise RecipeError(
            f"the model flattens exactly {model.config.max_seq_length} positions: set `max_seq_length` to it, not "
            f"{max_length}"
        )
    return model, flatten


def accuracy_metrics():
    """``compute_metrics``: accuracy of the argmax (of the sign, for one sigmoid output)."""
    accuracy = load_metric("accuracy")

    def compute_metrics(eval_pred):
        logits, labels = eval_pred
        logits = logits[0] if isinstance(logits, tuple) else logits
        preds = (logits[:, 0] > 0).astype(np.int64) if logits.shape[-1] == 1 else logits.argmax(-1)
        return accuracy.compute(predictions=preds, references=np.asarray(labels).reshape(-1).astype(np.int64))

    return compute_metrics


def classifier_card(model_args, training_args, tokenizer, names: list[str], results: dict, max_length: int) -> dict:
    """The model card's data set, metrics, intended use and limitations."""
    source, origin = card_origins(model_args)
    card_metrics = {
        k: results[k]
        for k in ("validation_accuracy", "test_accuracy", "test_loss", "train_minutes")
        if results[k] is not None
    }
    return {
        "dataset": f"{results['data']}; tokenizer of {len(tokenizer)} tokens {source}; inputs truncated to "
        f"{max_length} tokens.",
        "metrics": card_metrics | {"epochs": results["epochs_run"], "processes": training_args.world_size},
        "intended_use": f"Classification of short texts into {len(names)} labels ({', '.join(names[:10])}"
        f"{', ...' if len(names) > 10 else ''}) like those of its training data; a small teaching model, not a "
        f"production classifier.{origin}",
        "limitations": "Trained on one data set with the tokenizer above: words outside its vocabulary map to the "
        "unknown token, and texts unlike the training data (another domain, negation, sarcasm) are often "
        "misjudged.",
    }


def stream_text_check(data_args, text: str):
    """A streamed batch's check: ``DataError`` naming the file and the flag for a row without text."""

    def problem(row: dict) -> str | None:
        value = row.get(text)
        return f"no text in column {text!r} (`text_column_name`): got {value!r}" if is_blank(value) else None

    def check(batch):
        bad = [t for t in batch[text] if is_blank(t)]
        if bad:
            raise stream_row_error(
                data_args.train_file, "train_file", problem,
                f"a row has no text in column {text!r} (`text_column_name`): got {bad[0]!r}",
            )  # fmt: skip

    return check


def classifier_columns(task: Task, data_args) -> LabelColumns:
    """The text and label columns (``text_column_name`` / ``label_column_name``); at least two labels."""
    text, label = data_args.text_column_name, data_args.label_column_name

    def check_labels(raw, names):
        if len(names) < 2:
            raise DataError(f"column {label!r} (`label_column_name`) has a single label {names}: nothing to classify")

    return LabelColumns(
        task, text, label, ("text_column_name", "label_column_name"), ("text", "label"), check_labels=check_labels,
        check_stream=stream_text_check(data_args, text),
    )  # fmt: skip


def text_encoder(tokenizer, text: str, label: str, max_length: int):
    """``encode(batch, lookup)``: the texts tokenized (truncated to ``max_length``), ``labels`` the label ids."""

    def encode(batch, lookup):
        encoded = tokenizer(batch[text], truncation=True, max_length=max_length)
        encoded["labels"] = [lookup(value) for value in batch[label]]
        return encoded

    return encode


def run(model_args, data_args, args, training_args, command: str, task: Task = TASK) -> dict:
    """Load the data, tokenizer and model, train, evaluate, save; returns the results (also ``results.json``)."""
    previous = start_script_run(training_args)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    text, label = data_args.text_column_name, data_args.label_column_name

    # ---- data: columns and labels checked on every split before anything is built (or read from the record)
    data = LabelledData(classifier_columns(task, data_args), model_args, data_args, args, training_args)
    names = data.names
    max_length = data_args.max_seq_length
    built_word_tokenizer = not (model_args.tokenizer_name or model_args.model_name_or_path)
    if args.word_pre_tokenizer != "whitespace_punct" and not (
        built_word_tokenizer and model_args.tokenizer_kind == "word"
    ):
        raise RecipeError(
            f"`word_pre_tokenizer` {args.word_pre_tokenizer!r} shapes a new word-level tokenizer: it cannot change a "
            "loaded one (`tokenizer_name` / `model_name_or_path`) or a sub-word one"
        )
    tokenizer = data.tokenizer(
        lambda train: ColumnTexts(train, [text], max_rows=args.tokenizer_max_train_lines),
        args.word_pre_tokenizer,
        key_pre_tokenizer=args.word_pre_tokenizer,
    )

    # ---- model
    model, flatten = build_classifier_model(task, model_args, data_args, tokenizer, names)
    coverage = data.word_vectors(model, tokenizer)

    # ---- features
    # streamed: dropout_counts are the first rows (word dropout counts its words there)
    encoded, dropout_counts = data.features(tokenizer, text_encoder(tokenizer, text, label, max_length))
    collator = DataCollatorWithPadding(tokenizer, padding="max_length" if flatten else "longest", max_length=max_length)
    trainer, train_minutes, val, training = train_and_validate(
        model, training_args, args, tokenizer, encoded, collator, dropout_counts, accuracy_metrics()
    )
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test") if "test" in encoded else {}

    data_line = data.data_line(encoded)
    results = {
        "task": f"text classification, {len(names)} labels",
        "data": data_line,
        "labels": names,
        "validation_accuracy": val["validation_accuracy"],
        "test_accuracy": test.get("test_accuracy"),
        "validation_loss": val["validation_loss"],
        "test_loss": test.get("test_loss"),
        **training,
        **data.model_results(model, tokenizer, coverage, encoded, vocab_coverage=True),
        "model_config": model.config.to_diff_dict(),
    }
    card = classifier_card(model_args, training_args, tokenizer, names, results, max_length)

    def report(results: dict) -> None:
        test_text = f"  test accuracy {results['test_accuracy']:.4f}" if test else "  (no test split)"
        print(
            f"validation accuracy {results['validation_accuracy']:.4f}{test_text}  ({train_minutes:.2f} train minutes)"
        )

    return finish_script_run(trainer, training_args, results, command, card=card, report=report)


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
