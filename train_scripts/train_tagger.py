"""Train a sequence tagger (``AutoModelForTokenClassification``, e.g. part-of-speech tags) with ``Trainer``: the
recurrent tagger of the notes by default, any registered ``model_type`` or a saved folder (``model_name_or_path``).

    python train_scripts/train_tagger.py configs/pos_bilstm.json [--num_train_epochs 2 ...]
    python train_scripts/train_tagger.py configs/pos_bilstm.json --train_file train.jsonl \\
        --validation_file dev.jsonl --test_file test.jsonl --tags_column_name pos --output_dir runs/my_tagger
    hf-seq-train tagger configs/pos_bilstm.json
    torchrun --nproc_per_node 2 train_scripts/train_tagger.py configs/pos_bilstm.json

Data: rows of pre-split words and one tag per word — ``--tokens_column_name`` (default ``tokens``) and
``--tags_column_name`` (default ``tags``; ``run_ner.py``'s ``--text_column_name`` / ``--label_column_name`` are taken
too) from ``--dataset_name`` (the preset ``hf_seq/brown``) or json/jsonl/parquet files (lists do not fit in csv). The
tag set is the training split's (a ``ClassLabel``'s names); a tag seen only in another split is an error. Words are
encoded with ``is_split_into_words=True`` and only the first token of a word is labelled (the others get -100, which
only happens with a sub-word tokenizer). The best validation checkpoint is evaluated on the test split;
``results.json`` (token accuracy, accuracy on out-of-vocabulary words, training minutes, parameters) is written beside
the model + tokenizer, whose ``id2label`` makes ``pipeline("token-classification", model=output_dir)`` print the tags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc
from hf_seq.train_scripts.arguments import RecipeError, Task
from hf_seq.train_scripts.classification import (
    LabelColumns,
    LabelledData,
    LabelledTextArguments,
    card_origins,
    train_and_validate,
)
from hf_seq.train_scripts.common import load_or_build_model, stream_row_error
from hf_seq.train_scripts.features import ColumnTexts
from hf_seq.train_scripts.skeleton import finish_script_run, parse_script_args, start_script_run
from transformers import DataCollatorForTokenClassification

from hf_seq.toolkit.data import DataError, row_location
from hf_seq.toolkit.metrics import load_metric


@dataclass
class TaggerArguments(LabelledTextArguments):
    """Word dropout (on by default: the unknown-word vector is learnt), pretrained word vectors (recurrent models)
    and the preprocessing (cache, workers)."""

    word_dropout: float = field(
        default=0.25,
        metadata={
            "help": "alpha of frequency-based word dropout in training: a word seen f times is replaced by "
            "the unknown token with probability alpha / (alpha + f), so the unknown-word vector is learnt"
        },
    )


TASK = Task(
    name="train_tagger",
    arguments=TaggerArguments,
    defaults={"model_type": "hf_seq_rnn", "tokenizer_kind": "word", "max_seq_length": 256},
    unused=frozenset({"source_lang", "target_lang", "max_source_length", "max_target_length"}),
    tokenizer_kinds=("word", "wordpiece"),
    model_head="AutoModelForTokenClassification",
)


def tagger_columns(data_args) -> tuple[str, str]:
    """(words column, tags column): ``tokens_column_name`` / ``tags_column_name``, or run_ner.py's
    ``text_column_name`` / ``label_column_name``, or ``tokens`` / ``tags``."""
    columns = []
    for own, alias, default in (
        ("tokens_column_name", "text_column_name", "tokens"),
        ("tags_column_name", "label_column_name", "tags"),
    ):
        first, second = getattr(data_args, own), getattr(data_args, alias)
        if first and second and first != second:
            raise RecipeError(f"`{own}` ({first!r}) and `{alias}` ({second!r}) name different columns: give one")
        columns.append(first or second or default)
    return columns[0], columns[1]


def require_one_tag_per_word(splits, words: str, tags: str) -> None:
    """``DataError`` naming the file and line (:func:`hf_seq.toolkit.data.row_location`) of the first row whose tag list is
    not as long as its word list, with both counts. The check reads the Arrow table (the file's rows in order; a
    held-out validation split shares it), so row numbers and counts are those of the file."""
    for dataset in splits.values():
        n_words = pc.list_value_length(dataset.data.column(words))
        n_tags = pc.list_value_length(dataset.data.column(tags))
        differ = pc.not_equal(n_words, n_tags)
        if pc.any(differ).as_py():
            row = differ.to_pylist().index(True)
            raise DataError(
                f"{row_location(dataset, row)}: {n_words[row].as_py()} words ({words!r}) but {n_tags[row].as_py()} "
                f"tags ({tags!r}); every word needs one tag"
            )


def tagging_metrics(unk_id: int):
    """``compute_metrics``: accuracy over the words (their first tokens), the share of words the vocabulary does not
    know (mapped to ``unk_id``) and the accuracy on those."""
    accuracy = load_metric("accuracy")

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

    return compute_metrics


def tagger_card(model_args, training_args, tokenizer, names: list[str], results: dict) -> dict:
    """The model card's data set, metrics, intended use and limitations."""
    source, origin = card_origins(model_args)
    data_line = results["data"]
    card_keys = ("validation_accuracy", "test_accuracy", "test_oov_rate", "test_oov_accuracy", "train_minutes")
    return {
        "dataset": f"{data_line}; {len(names)} tags ({', '.join(names[:12])}{', ...' if len(names) > 12 else ''});"
        f" tokenizer of {len(tokenizer)} tokens {source}.",
        "metrics": {k: results[k] for k in card_keys if results[k] is not None}
        | {"epochs": results["epochs_run"], "processes": training_args.world_size},
        "intended_use": "Tagging of tokenized sentences (one tag per word, the first token of each word carries "
        f"it) with the tag set of its training data; a small teaching model of sequence labelling.{origin}",
        "limitations": "Trained on one data set: words outside the tokenizer's vocabulary map to the unknown "
        "token and are tagged from context alone (see the OOV accuracy); text unlike the training data is "
        "tagged less accurately.",
    }


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    return run(model_args, data_args, args, training_args, command=command)


def build_tagger_model(task, model_args, data_args, tokenizer, names: list[str]):
    """A new model with one output per tag (``id2label``: the tag names), or the saved one."""
    id2label = dict(enumerate(names))
    return load_or_build_model(
        task, model_args, data_args, tokenizer, id2label=id2label, label2id={v: k for k, v in id2label.items()}
    )


def word_encoder(tokenizer, words: str, tags: str, max_length: int):
    """``encode(batch, lookup)``: the words tokenized with ``is_split_into_words`` (truncated to ``max_length``);
    the first token of each word carries the word's tag id, specials and continuation tokens -100."""

    def encode(batch, lookup):
        enc = tokenizer(batch[words], is_split_into_words=True, truncation=True, max_length=max_length)
        labels = []
        for i, row_tags in enumerate(batch[tags]):
            ids = lookup(row_tags)
            previous, row = None, []
            for word in enc.word_ids(batch_index=i):
                row.append(-100 if word is None or word == previous else ids[word])
                previous = word
            labels.append(row)
        enc["labels"] = labels
        return enc

    return encode


def stream_words_check(data_args, words: str, tags: str):
    """A streamed batch's check: ``DataError`` naming the file and the flags for a row without one tag per word."""

    def problem(row: dict) -> str | None:
        row_words, row_tags = row.get(words), row.get(tags)
        if not isinstance(row_words, list) or not row_words:
            return f"no words in column {words!r} (`tokens_column_name`): got {row_words!r}"
        if not isinstance(row_tags, list) or len(row_words) != len(row_tags):
            return f"{len(row_words)} words ({words!r}) but tags {row_tags!r} ({tags!r}); every word needs one tag"
        return None

    def check(batch):
        for row_words, row_tags in zip(batch[words], batch[tags]):
            bad = not isinstance(row_words, list) or not isinstance(row_tags, list) or len(row_words) != len(row_tags)
            if bad or not row_words:
                raise stream_row_error(
                    data_args.train_file, "train_file", problem,
                    f"a row has {row_words!r} words and {row_tags!r} tags; every word ({words!r}, "
                    f"`tokens_column_name`) needs one tag ({tags!r}, `tags_column_name`)",
                )  # fmt: skip

    return check


def run(model_args, data_args, args, training_args, command: str, task: Task = TASK) -> dict:
    """Load the data, tokenizer and model, train, evaluate, save; returns the results (also ``results.json``)."""
    previous = start_script_run(training_args)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    words, tags = tagger_columns(data_args)
    columns = LabelColumns(
        task, words, tags, ("tokens_column_name", "tags_column_name"), ("words", "tags"),
        check_labels=lambda raw, names: require_one_tag_per_word(raw, words, tags),
        check_stream=stream_words_check(data_args, words, tags), nested=True, unit="sentences",
    )  # fmt: skip
    data = LabelledData(columns, model_args, data_args, args, training_args)  # or the record of a cached run
    names, max_length = data.names, data_args.max_seq_length

    # word level: one word = one token; sub-word tokenizers see sentences. Read in batches of the Arrow column.
    tokenizer = data.tokenizer(
        lambda train: ColumnTexts(
            train, [words], join_words=model_args.tokenizer_kind != "word", max_rows=args.tokenizer_max_train_lines
        ),
        "whitespace",
        key_pre_tokenizer="whitespace_punct",
    )
    model = build_tagger_model(task, model_args, data_args, tokenizer, names)
    coverage = data.word_vectors(model, tokenizer)

    # streamed: first_rows are the stream's first rows (word dropout counts its words there)
    encoded, first_rows = data.features(tokenizer, word_encoder(tokenizer, words, tags, max_length))
    collator = DataCollatorForTokenClassification(tokenizer)
    compute_metrics = tagging_metrics(tokenizer.unk_token_id)
    if "inputs" not in training_args.include_for_metrics:  # aligned with the predictions whatever the sampler
        training_args.include_for_metrics = [*training_args.include_for_metrics, "inputs"]

    trainer, train_minutes, val, training = train_and_validate(
        model, training_args, args, tokenizer, encoded, collator, first_rows, compute_metrics
    )
    test = {}
    if "test" in encoded:
        prediction = trainer.predict(encoded["test"], metric_key_prefix="test")
        test = dict(prediction.metrics, test_tokens=int((prediction.label_ids != -100).sum()))

    data_line = data.data_line(encoded)
    results = {
        "task": f"token classification, {len(names)} tags (column {tags!r})",
        "data": data_line,
        "validation_accuracy": val["validation_accuracy"],
        "validation_oov_rate": val.get("validation_oov_rate"),
        "test_accuracy": test.get("test_accuracy"),
        "test_loss": test.get("test_loss"),
        "test_tokens": test.get("test_tokens"),
        "test_oov_rate": test.get("test_oov_rate"),
        "test_oov_accuracy": test.get("test_oov_accuracy"),
        **training,
        **data.model_results(model, tokenizer, coverage, encoded),
        "tags": names,
    }
    card = tagger_card(model_args, training_args, tokenizer, names, results)

    def report(results: dict) -> None:
        tail = (
            f"  test accuracy {results['test_accuracy']:.4f}  OOV rate {results['test_oov_rate']} accuracy "
            f"{results['test_oov_accuracy']}"
            if test
            else "  (no test split)"
        )
        print(f"validation accuracy {results['validation_accuracy']:.4f}{tail}  ({train_minutes:.2f} min)")

    return finish_script_run(trainer, training_args, results, command, card=card, report=report)


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
