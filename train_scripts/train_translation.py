"""Train a translation model (any registered seq2seq ``model_type``) with ``Seq2SeqTrainer``.

    python train_scripts/train_translation.py configs/translation_rnn_additive.json [--flag value ...]
    python train_scripts/train_translation.py configs/translation_transformer.json \
        --train_file pairs.jsonl --source_lang en --target_lang fr --output_dir runs/en-fr
    hf-seq-train translation configs/translation_transformer.json
    accelerate launch train_scripts/train_translation.py configs/translation_rnn_additive.json

Data (as ``run_translation.py``): rows with a ``translation`` column of ``{source_lang: ..., target_lang: ...}``
dicts, or two columns named by ``--source_lang`` and ``--target_lang``, from ``--dataset_name`` (the preset
``hf_seq/translation``: English-Spanish Bible verses; a folder; a ``datasets`` name) or json/jsonl/parquet/csv files.
``max_words`` drops pairs whose longer side has more words (every split, before the ``max_*_samples`` caps).

The model is built from ``model_type`` + ``model_config`` with ``AutoConfig.for_model`` and
``AutoModelForSeq2SeqLM.from_config`` (every seq2seq family registered by ``import hf_seq``: ``hf_seq_rnn_seq2seq``,
``hf_seq_transformer``), or loaded from ``--model_name_or_path``; the vocabulary size and the special token ids
(``<pad>``/``<s>``/``</s>``) of the shared tokenizer are filled in. The tokenizer (one for both languages) is
``--tokenizer_name``'s or the model folder's, or built on the training pairs (``tokenizer_kind`` bpe or word).
Evaluation: sacreBLEU and chrF (local ``evaluate`` modules) on generated translations — on the validation split
(capped by ``max_eval_samples``) during training, on the test split (greedy and beam search, ``test_num_beams``) at
the end. Writes ``<output_dir>/results.json``, the model + tokenizer, a model card, and with ``--plot_attention`` a
heat map of one test sentence.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from datasets import Dataset, DatasetDict, Features, List, Value
from hf_seq.train_scripts import run_folder
from hf_seq.train_scripts.arguments import (
    BudgetArguments,
    HfSeqSeq2SeqTrainingArguments,
    PreprocessingArguments,
    RecipeError,
    Task,
)
from hf_seq.train_scripts.checks import check_test_engine
from hf_seq.train_scripts.common import (
    StepTimesCallback,
    cap_splits,
    describe_data,
    load_or_build_model,
    load_task_data,
    load_tokenizer,
    stream_row_error,
    tokenizer_options,
    tokenizer_source,
)
from hf_seq.train_scripts.features import (
    STREAMING_TOKENIZER_SAMPLES,
    ColumnTexts,
    FeatureCache,
    cache_root,
    cached_tokenizer,
    check_streaming,
    data_key,
    data_record,
    head_dataset,
    release_mapped_pages,
    releasing_pages,
    split_by_node_setup,
    stream_file,
    streamed_train_features,
)
from hf_seq.train_scripts.run_folder import run_training, save_run
from hf_seq.train_scripts.skeleton import (
    after_training,
    budgeted_trainer,
    env_threads,
    finish_script_run,
    parse_script_args,
    start_script_run,
)
from hf_seq.train_scripts.trainer import HfSeqSeq2SeqTrainer
from transformers import DataCollatorForSeq2Seq

import hf_seq  # noqa: F401  (registers the hf_seq configs/models with the Auto classes)
from hf_seq.toolkit.data import DataError, batch_pairs, check_pairs, is_blank, pair_problem, split_source
from hf_seq.toolkit.metrics import load_metric
from hf_seq.toolkit.preprocessing import id_type, release_arrow_memory, tokenizer_fingerprint
from hf_seq.toolkit.samplers import total_list_length
from hf_seq.toolkit.tokenization import PairEncoder, build_translation_tokenizer
from hf_seq.toolkit.visualization import plot_translation_attention

logger = logging.getLogger("train_translation")
TEST_ENGINES = ("pytorch", "ctranslate2", "onnxruntime")


@dataclass
class TranslationArguments(PreprocessingArguments, BudgetArguments):
    """Length filter, test decoding, the attention plot and the preprocessing (cache, workers, streaming)."""

    max_words: int | None = field(
        default=None,
        metadata={"help": "Drop pairs whose longer side has more words."},
    )
    test_num_beams: str = field(default="1,5", metadata={"help": "Comma-separated beam sizes for the final test."})
    plot_attention: bool = field(
        default=False,
        metadata={
            "help": "Write a heat map PNG of one test translation (needs matplotlib: `pip install 'hf-seq[plot]'`; "
            "without it the run warns before the first step and trains and saves the model without the plot)."
        },
    )
    plot_attention_index: int = field(default=0, metadata={"help": "Index (in the capped test set) of that sentence."})
    plot_attention_path: str | None = field(default=None, metadata={"help": "PNG path (default <output_dir>/...)."})
    results_file: str = field(default="results.json", metadata={"help": "Results JSON (relative to output_dir)."})
    average_last_checkpoints: int | None = field(
        default=None,
        metadata={
            "help": "After training, replace the model by the mean of the weights of the last N saved checkpoints "
            "(the final model's test scores are kept under `before_averaging`); needs `save_strategy` steps/epoch.",
        },
    )
    test_engine: str = field(
        default="pytorch",
        metadata={
            "help": '"pytorch" (generate()), "ctranslate2" or "onnxruntime": decode the test split with the model '
            "exported to CTranslate2 (a Transformer; written into <output_dir>/ctranslate2; needs `pip install "
            "hf-seq[ctranslate2]`) or to ONNX Runtime (any translation model, generate() over the exported graphs; "
            "written into <output_dir>/onnxruntime; needs onnx, onnxscript and onnxruntime). A run whose engine is "
            "not installed is refused before the first step.",
        },
    )
    test_onnxruntime_quantization: str | None = field(
        default=None,
        metadata={"help": 'int8: ONNX Runtime dynamic quantization of the "onnxruntime" export (default float32).'},
    )
    test_ctranslate2_quantization: str | None = field(
        default=None,
        metadata={"help": "Weight type of that export (int8, int16, float16, ...; default float32)."},
    )

    def __post_init__(self):
        super().__post_init__()  # the preprocessing fields and the time budgets
        for name in ("max_words", "average_last_checkpoints"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer or null, got {getattr(self, name)!r}")
        check_test_engine(self, TEST_ENGINES)
        try:
            beams = [int(b) for b in self.test_num_beams.split(",") if b.strip()]
        except ValueError:
            beams = [0]
        if any(b < 1 for b in beams):
            raise ValueError(f"`test_num_beams` must be comma-separated positive integers, got {self.test_num_beams!r}")
        if self.test_ctranslate2_quantization is not None:
            from hf_seq.toolkit.export import QUANTIZATIONS

            if self.test_ctranslate2_quantization not in QUANTIZATIONS:
                raise ValueError(
                    f"`test_ctranslate2_quantization` must be one of {list(QUANTIZATIONS)} or null, got "
                    f"{self.test_ctranslate2_quantization!r}"
                )
            if self.test_engine != "ctranslate2":
                raise ValueError('`test_ctranslate2_quantization` needs `test_engine` "ctranslate2"')


TASK = Task(
    name="train_translation",
    arguments=TranslationArguments,
    training_arguments=HfSeqSeq2SeqTrainingArguments,
    defaults={
        "model_type": "hf_seq_rnn_seq2seq",
        "tokenizer_kind": "bpe",
        "tokenizer_vocab_size": 8000,
        "max_source_length": 64,
        "max_target_length": 64,
        "max_eval_samples": 200,
        "max_predict_samples": 500,
        "do_train": True,  # as every other script; `--do_train false` evaluates a saved model
    },
    unused=frozenset(
        {"text_column_name", "label_column_name", "tokens_column_name", "tags_column_name", "normalize_labels"}
        | {"max_seq_length"}
    ),
    tokenizer_kinds=("bpe", "word"),
    model_head="AutoModelForSeq2SeqLM",
    required=("source_lang", "target_lang"),
)


def make_tokenize(
    tokenizer,
    src: str,
    tgt: str,
    max_source_length: int,
    max_target_length: int,
    keep_text: bool,
    arrow: bool = False,
):
    """The batched ``map`` function: the ids of ``tokenizer(sources, text_target=targets)`` (sources truncated to
    ``max_source_length``, targets to ``max_target_length``), and with ``keep_text`` the texts as ``source_text`` /
    ``target_text``. The ids come from :class:`PairEncoder` (the backend) when it gives the same ids for this
    tokenizer, else from ``tokenizer(...)``; ``arrow``: returned as an Arrow table (``Dataset.map``), else as Python
    lists (a stream's ``map``)."""
    encoder = PairEncoder(tokenizer, max_source_length, max_target_length) if PairEncoder.usable(tokenizer) else None

    def tokenize(batch):
        sources, targets = batch_pairs(batch, src, tgt)
        if encoder is not None and arrow:  # an Arrow table: `map` writes it as it is
            out = encoder.encode(sources, targets)
            if keep_text:
                out["source_text"], out["target_text"] = pa.array(sources, pa.string()), pa.array(targets, pa.string())
            return pa.table(out)
        if encoder is not None:
            out = encoder.encode(sources, targets, arrow=False)
        else:
            encoded = tokenizer(sources, text_target=targets, max_length=max_source_length, truncation=True)
            out = dict(encoded)
            # labels were truncated with the source limit; apply the target limit
            out["labels"] = [labels[:max_target_length] for labels in encoded["labels"]]
        if keep_text:
            out["source_text"], out["target_text"] = sources, targets
        return out

    return tokenize


TEXT_COLUMNS = ["source_text", "target_text"]


def pair_features(keep_text: bool, ids: pa.DataType | str = "uint32") -> Features:
    """The cached columns: ``ids`` token ids (:func:`id_type`), ``int8`` mask, and the texts of the evaluation
    splits."""
    columns = {
        "input_ids": List(Value(str(ids))),
        "attention_mask": List(Value("int8")),
        "labels": List(Value(str(ids))),
    }
    if keep_text:
        columns |= {name: Value("string") for name in TEXT_COLUMNS}
    return Features(columns)


def translation_card_metrics(results: dict) -> dict:
    """Test BLEU / chrF per decoding mode, the last validation BLEU, steps and training time for the model card."""
    metrics: dict = {}
    for key, value in results.items():
        if key.startswith("test_") and isinstance(value, dict):
            mode = key[len("test_") :]
            for name in ("bleu", "chrf"):
                if f"test_{name}" in value:
                    metrics[f"test_{name}_{mode}"] = round(value[f"test_{name}"], 2)
    if results.get("validation_history"):
        metrics["validation_bleu_last"] = round(results["validation_history"][-1]["eval_bleu"], 2)
    if "train" in results:
        metrics["train_steps"] = results["train"]["global_steps"]
        metrics["epochs"] = round(results["train"]["epochs"], 3)
        metrics["train_minutes"] = round(results["train"]["train_minutes"], 3)
    return metrics


def check_averaging(args: TranslationArguments, training_args) -> None:
    """``average_last_checkpoints`` needs a training run that keeps at least that many checkpoints."""
    n = args.average_last_checkpoints
    if n is None:
        return
    if not training_args.do_train or training_args.save_strategy == "no":
        raise RecipeError(
            f"`average_last_checkpoints` {n} averages the checkpoints this run saves: it needs `do_train` true and "
            f'`save_strategy` "steps" or "epoch" (got do_train={training_args.do_train}, '
            f"save_strategy={training_args.save_strategy!r})"
        )
    limit = training_args.save_total_limit
    if limit is not None and limit < n:
        raise RecipeError(
            f"`average_last_checkpoints` {n} needs `save_total_limit` null or at least {n} (got {limit}): the older "
            "checkpoints would be deleted before the end"
        )


def load_averaged_weights(model, folders: list[Path]) -> None:
    """Replace the weights of ``model`` by the mean of those saved in ``folders``
    (:func:`hf_seq.toolkit.export.average_state_dicts`); tied weights, stored once, stay tied."""
    from hf_seq.toolkit.export import average_state_dicts

    averaged = average_state_dicts(folders)
    missing, unexpected = model.load_state_dict(averaged, strict=False)
    tied = {name for name, _ in model.named_parameters(remove_duplicate=False)} - {
        name for name, _ in model.named_parameters()
    }
    buffers = {name for name, _ in model.named_buffers()}
    untouched = [k for k in missing if k not in tied and k not in buffers]
    if untouched or unexpected:
        raise RecipeError(
            f"the checkpoints in {folders[0].parent} do not match the model: weights missing {untouched[:3]}, "
            f"unexpected {list(unexpected)[:3]}"
        )


def padded(rows, pad: int) -> np.ndarray:
    """Rows of token ids right-padded with ``pad`` into one ``(N, T)`` int64 array, as ``trainer.predict`` gives its
    predictions and labels."""
    width = max([len(row) for row in rows] + [1])
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def ctranslate2_predictions(
    model, tokenizer, sources: list[str], export_dir: Path, quantization, beams, max_new, max_source_length
) -> np.ndarray:
    """Test translations of ``sources`` by the model exported to CTranslate2 in ``export_dir`` (exported on the
    first call), as a right-padded ``(N, T)`` array of token ids like ``trainer.predict``'s."""
    import ctranslate2

    from hf_seq.toolkit.export import ctranslate2_translate, to_ctranslate2

    if not (export_dir / "model.bin").is_file():
        to_ctranslate2(model, export_dir, quantization=quantization, tokenizer=tokenizer, force=True)
    threads = int(os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads())
    translator = ctranslate2.Translator(str(export_dir), device="cpu", intra_threads=threads)
    ids = ctranslate2_translate(  # the search options of generate() with the model's generation config
        translator,
        tokenizer,
        sources,
        num_beams=beams,
        max_new_tokens=max_new,
        max_source_length=max_source_length,
        generation_config=model.generation_config,
    )
    return padded(ids, tokenizer.pad_token_id)


def onnxruntime_predictions(
    model,
    tokenizer,
    sources: list[str],
    export_dir: Path,
    quantization,
    beams,
    max_new,
    max_source_length,
    batch_size,
    report: dict | None = None,
) -> np.ndarray:
    """Test translations of ``sources`` by ``generate()`` over the model exported to ONNX Runtime in ``export_dir``
    (exported on the first call), with the model's generation config, as a right-padded ``(N, T)`` array of token
    ids without the decoder start token. ``report`` gets ``test_onnxruntime_graph``: which graphs decoded (the
    generating graph ``model_generate.onnx``, whose search runs in ONNX Runtime, or the step graphs)."""
    from hf_seq.toolkit.export import load_onnxruntime, to_onnx

    if not (export_dir / "hf_seq_onnx.json").is_file():
        to_onnx(model, export_dir, quantization=quantization, tokenizer=tokenizer, force=True)
    threads = int(os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads())
    ort_model = load_onnxruntime(export_dir, threads=threads)
    rows: list[list[int]] = []
    for start in range(0, len(sources), batch_size):
        enc = tokenizer(
            sources[start : start + batch_size],
            padding=True,
            truncation=max_source_length is not None,
            max_length=max_source_length,
            return_tensors="pt",
        )
        out = ort_model.generate(**enc, num_beams=beams, max_new_tokens=max_new)
        rows.extend(out[:, 1:].tolist())
    if report is not None:
        graph = getattr(ort_model, "generating_graph", None)
        report["test_onnxruntime_graph"] = graph.report() if graph is not None else "step graphs (no generating graph)"
    return padded(rows, tokenizer.pad_token_id)


def _recorded_features(model_args, data_args, args, root, src: str, tgt: str):
    """``(features, record cache, overwrite)``: :func:`cached_features`' answer read without the data files
    (``features`` None when the record, the tokenizer or the features are not in the cache: ``overwrite`` says
    whether what is found unreadable is rebuilt)."""
    record_cache, record = data_record(
        root, "translation_data", data_args, args.overwrite_cache, src=src, tgt=tgt, max_words=args.max_words
    )
    if record is None:
        return None, record_cache, args.overwrite_cache
    cache = feature_cache(model_args, data_args, args, root, record["base"], tokenizer=None)
    if cache is None:
        return None, record_cache, args.overwrite_cache
    tokenizer, cache = cache
    features = cache.load(list(record["descriptions"]))
    if features is None:
        return None, record_cache, cache.overwrite  # an unreadable folder: rebuilt
    logger.info("tokenized splits read from %s (data files not read)", cache.folder)
    return finish_features(data_args, tokenizer, features, record["descriptions"]), record_cache, cache.overwrite


def _short_capped_splits(raw: dict, columns: dict, data_args, args, src: str, tgt: str, mapped_files) -> DatasetDict:
    """The splits after the ``max_words`` filter (the same on every split, before the caps) and the caps."""
    out = dict(raw)
    workers = args.preprocessing_num_workers
    if args.max_words is not None:

        def short(*cols, names):
            sources, targets = batch_pairs(dict(zip(names, cols)), src, tgt)
            return [max(len(s.split()), len(t.split())) <= args.max_words for s, t in zip(sources, targets)]

        for split, dataset in raw.items():
            kept = dataset.filter(
                releasing_pages(short, mapped_files),
                batched=True,
                input_columns=columns[split],
                fn_kwargs={"names": columns[split]},
                keep_in_memory=True,
                num_proc=workers if workers and workers > 1 else None,
                new_fingerprint=f"{dataset._fingerprint}-max_words{args.max_words}",
            )
            if len(kept) == 0:
                raise DataError(f"{split_source(dataset)}: no pair has at most `max_words` {args.max_words} words")
            out[split] = kept
        release_mapped_pages(mapped_files)
    return cap_splits(DatasetDict(out), data_args)


def _tokenized_pairs(cache, splits: dict, tokenizer, data_args, args, src: str, tgt: str, mapped_files) -> dict:
    """The splits tokenized by :func:`make_tokenize` into ``cache`` (``datasets.map``, ``preprocessing_num_workers``
    processes), the raw Arrow files' pages released as they are read."""
    functions = {
        split: releasing_pages(
            make_tokenize(
                tokenizer,
                src,
                tgt,
                data_args.max_source_length,
                data_args.max_target_length,
                split != "train",
                arrow=True,
            ),
            mapped_files,
        )
        for split in splits
    }
    features = cache.build(
        splits,
        functions,
        num_proc=args.preprocessing_num_workers,
        # uint16 / uint32 ids when the tokenizer gives just these columns (one with token_type_ids: datasets' own
        # types)
        features={split: pair_features(split != "train", id_type(tokenizer)) for split in splits}
        if set(tokenizer.model_input_names) <= {"input_ids", "attention_mask"}
        else None,
        desc="tokenizing",
    )
    release_mapped_pages(mapped_files)
    return features


def cached_features(model_args, data_args, args, training_args, src: str, tgt: str):
    """``(tokenizer, tokenized splits, {split: (sources, targets)} of validation/test, data line)``: the
    ``datasets.map`` tokenization of the splits, read from the preprocessing cache when this data, tokenizer and
    these settings were tokenized before (:mod:`hf_seq.train_scripts.features`); a tokenizer built on the training
    split is cached with them. A run that finds its features reads neither the data files nor their ``datasets``
    Arrow files: what a key needs from them (the split sizes and columns) and the splits' descriptions come from a
    record keyed by the files' fingerprints and the data settings, written by the run that read them."""
    root = cache_root(args, data_args)
    found, record_cache, overwrite = _recorded_features(model_args, data_args, args, root, src, tgt)
    if found is not None:
        return found
    built = _features_from_files(model_args, data_args, args, root, src, tgt, (record_cache, overwrite))
    # the raw and filtered splits are gone with that call; pyarrow's allocator keeps what they held (the
    # max_words filter's row indices: 8 bytes a kept pair, in a buffer grown by doubling, 0.14 GB at 10 M pairs)
    # for the rest of the run unless it is handed back
    release_arrow_memory()
    return built


def _features_from_files(model_args, data_args, args, root, src: str, tgt: str, recorded: tuple):
    """:func:`cached_features` of a run that reads the data files (``recorded``: the record cache and overwrite flag
    :func:`_recorded_features` returned): the features read from the cache or built (filtered, tokenizer built,
    tokenized), the record saved."""
    record_cache, overwrite = recorded
    loaded = load_task_data(TASK, data_args)
    raw = {split: dataset for split, dataset in loaded.items() if split in ("train", "validation", "test")}
    columns = {split: check_pairs(dataset, src, tgt) for split, dataset in raw.items()}
    base = data_key(data_args, raw, src=src, tgt=tgt, max_words=args.max_words, columns=columns)
    # the datasets Arrow files of the raw splits: their mapped pages are released while the filter and the
    # tokenizing map read them (a 10 M-pair file would otherwise stay resident, ~1.7 GB)
    mapped_files = sorted({f["filename"] for dataset in raw.values() for f in dataset.cache_files})
    selected: dict = {}

    def select() -> dict:
        """The filtered, capped splits, computed once and only when something is built."""
        if not selected:
            selected.update(_short_capped_splits(raw, columns, data_args, args, src, tgt, mapped_files))
        return selected

    def build_tokenizer():
        train = select()["train"]
        return build_translation_tokenizer(
            ColumnTexts(train, columns["train"], fields=[src, tgt], max_rows=args.tokenizer_max_train_lines),
            kind=model_args.tokenizer_kind,
            vocab_size=model_args.tokenizer_vocab_size,
            **tokenizer_options(model_args),
        )

    tokenizer, cache = feature_cache(model_args, data_args, args, root, base, tokenizer=build_tokenizer)
    cache.overwrite = cache.overwrite or overwrite
    features = cache.load(list(raw))
    if features is None:
        logger.info("tokenizing %s (cache: %s)", ", ".join(raw), cache.folder or "in memory")
        features = _tokenized_pairs(cache, select(), tokenizer, data_args, args, src, tgt, mapped_files)
    else:
        logger.info("tokenized splits read from %s", cache.folder)
    descriptions = {split: raw[split].info.description for split in raw}
    record_cache.save_record({"base": base, "descriptions": descriptions})
    return finish_features(data_args, tokenizer, features, descriptions)


def feature_cache(model_args, data_args, args, root, base: dict, tokenizer):
    """``(tokenizer, FeatureCache of the features)`` for the data key ``base``: the tokenizer given
    (``tokenizer_name`` / the model's), else the one cached for this data and these tokenizer settings, else
    ``tokenizer()`` (built, then cached); with ``tokenizer`` ``None`` a tokenizer not cached yet gives ``None``."""
    loaded = load_tokenizer(model_args)
    if loaded is None:  # one tokenizer for both languages, trained on the training split only
        settings = {
            "kind": model_args.tokenizer_kind,
            "vocab_size": model_args.tokenizer_vocab_size,
            "options": tokenizer_options(model_args),
            "samples": args.tokenizer_max_train_lines,
        }
        loaded = cached_tokenizer(root, "translation", base | settings, args.overwrite_cache, tokenizer)
        if loaded is None:
            return None
    key = base | {
        "tokenizer": tokenizer_fingerprint(loaded),
        "max_source_length": data_args.max_source_length,
        "max_target_length": data_args.max_target_length,
        "truncation": True,
    }
    return loaded, FeatureCache(root, "translation", key, overwrite=args.overwrite_cache)


def finish_features(data_args, tokenizer, features: dict, descriptions: dict):
    """The four things :func:`cached_features` returns, from the tokenized splits and their descriptions."""
    tokenized, pairs = {}, {}
    for split, dataset in features.items():
        text = [c for c in TEXT_COLUMNS if c in dataset.column_names]
        tokenized[split] = dataset.remove_columns(text) if text else dataset
        tokenized[split].info.description = descriptions[split]
        if text:
            pairs[split] = (list(dataset["source_text"]), list(dataset["target_text"]))
    return tokenizer, tokenized, pairs, describe_data(data_args, DatasetDict(tokenized), unit="pairs")


def streamed_features(model_args, data_args, args, training_args, src: str, tgt: str, world_size: int | None = None):
    """The same four things for ``--streaming true``: the training file as a seeded, shuffled, tokenized
    ``IterableDataset`` (tokenized on the fly by ``IterableDataset.map``), read again and again until ``max_steps``
    (:func:`hf_seq.train_scripts.features.repeated_stream`: pass ``k`` shuffled as epoch ``k``, in every process's
    part under ``--streaming_split_by_node``); the (capped) validation / test files in
    memory; a tokenizer given, or built on the first ``tokenizer_train_samples`` (default 100000) training rows.
    ``--streaming_split_by_node``: the training rows split into ``world_size`` parts (default: the run's processes),
    one per process (:func:`hf_seq.train_scripts.features.split_stream_by_node`), each tokenized by its process."""
    check_streaming(args, training_args, data_args, splits_by_node=True)
    train_stream = stream_file(data_args.train_file, "train")
    first = next(iter(train_stream.take(1)), None)
    if first is None:
        raise DataError(f"`train_file` {data_args.train_file} has no data rows")
    probe = Dataset.from_list([first])
    probe.info.description = str(data_args.train_file)
    columns = check_pairs(probe, src, tgt)

    def short(batch):
        sources, targets = batch_pairs(batch, src, tgt)
        return [max(len(s.split()), len(t.split())) <= args.max_words for s, t in zip(sources, targets)]

    def checked(stream, path, flag):
        problem = partial(pair_problem, src=src, tgt=tgt)

        def has_text(batch):
            sources, targets = batch_pairs(batch, src, tgt)
            for side, texts in ((src, sources), (tgt, targets)):
                bad = [t for t in texts if is_blank(t)]
                if bad:
                    raise stream_row_error(
                        path, flag, problem, f"a row has no {side!r} text (got {bad[0]!r}); every pair needs both sides"
                    )
            return [True] * len(sources)

        stream = stream.filter(has_text, batched=True)
        return stream.filter(short, batched=True) if args.max_words is not None else stream

    evaluation = {}
    for split, path, cap in (
        ("validation", data_args.validation_file, data_args.max_eval_samples),
        ("test", data_args.test_file, data_args.max_predict_samples),
    ):
        if path:
            dataset = head_dataset(checked(stream_file(path, split), path, f"{split}_file"), cap)
            if len(dataset) == 0:
                raise DataError(
                    f"`{split}_file` {path} has no pairs" + (" within `max_words`" if args.max_words else "")
                )
            dataset.info.description = str(path)
            check_pairs(dataset, src, tgt)
            evaluation[split] = dataset
    train_stream = checked(train_stream, data_args.train_file, "train_file")
    tokenizer = load_tokenizer(model_args)
    if tokenizer is None:
        samples = args.tokenizer_max_train_lines or STREAMING_TOKENIZER_SAMPLES
        head = head_dataset(train_stream, samples)
        tokenizer = build_translation_tokenizer(
            ColumnTexts(head, columns, fields=[src, tgt]),
            kind=model_args.tokenizer_kind,
            vocab_size=model_args.tokenizer_vocab_size,
            **tokenizer_options(model_args),
        )
        del head
    parts = None
    if args.streaming_split_by_node:  # the first max_train_samples rows of the file, split between the processes
        world = split_by_node_setup(args, training_args)  # dispatch_batches off; the number of processes
        parts = world_size or world
    tokenize = make_tokenize(tokenizer, src, tgt, data_args.max_source_length, data_args.max_target_length, False)
    keys = ["input_ids", "attention_mask", "labels"]
    # read until max_steps (pass k shuffled as epoch k): Trainer's epochs of an IterableDataset are max_steps long
    tokenized = {
        "train": streamed_train_features(train_stream, tokenize, keys, data_args, args, training_args.seed, parts)
    }
    pairs = {}
    for split, dataset in evaluation.items():
        mapped = dataset.map(
            make_tokenize(tokenizer, src, tgt, data_args.max_source_length, data_args.max_target_length, True),
            batched=True,
            remove_columns=dataset.column_names,
            keep_in_memory=True,
        )
        pairs[split] = (list(mapped["source_text"]), list(mapped["target_text"]))
        tokenized[split] = mapped.remove_columns(TEXT_COLUMNS)
    sizes = " / ".join(str(len(tokenized[s])) for s in ("validation", "test") if s in tokenized)
    split = ", split by process" if args.streaming_split_by_node else ""
    data_line = (
        f"own data files, training file streamed (shuffle buffer {args.shuffle_buffer_size}{split}): train "
        f"`{data_args.train_file}`, validation `{data_args.validation_file}`"
        + (f", test `{data_args.test_file}`" if data_args.test_file else "")
        + f"; used: {sizes} {' / '.join(s for s in ('validation', 'test') if s in tokenized)} pairs"
    )
    return tokenizer, tokenized, pairs, data_line


def hypothesis_length(row: np.ndarray, tokenizer) -> int:
    """The tokens of one generated row up to and including its first end token (after a leading start token),
    padding not counted: beam search writes end tokens after a hypothesis that finished early (transformers fills
    with ``pad_token_id or eos_token_id``, and a pad id of 0 reads as false), which are not part of it."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    start = 1 if len(row) and row[0] in (tokenizer.bos_token_id, pad) else 0
    ends = np.flatnonzero(row[start:] == eos) if eos is not None else []
    kept = row[: start + int(ends[0]) + 1] if len(ends) else row
    length = int(np.count_nonzero(kept != pad))
    return length + int(len(ends) > 0 and eos == pad)  # an end token that is also the pad token still counts


def translation_metrics(tokenizer):
    """``compute_metrics``: sacreBLEU, chrF and the mean generated length of decoded predictions."""
    bleu = load_metric("sacrebleu")
    chrf = load_metric("chrf")

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds < 0, tokenizer.pad_token_id, preds)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hyps = [t.strip() for t in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        refs = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        lengths = [hypothesis_length(p, tokenizer) for p in preds]
        return {
            "bleu": bleu.compute(predictions=hyps, references=[[r] for r in refs])["score"],
            "chrf": chrf.compute(predictions=hyps, references=[[r] for r in refs])["score"],
            "gen_len": float(np.mean(lengths)),
        }

    return compute_metrics


def build_translation_model(model_args, data_args, training_args, tokenizer):
    """A new model sized to the tokenizer (or the saved one), decoding as the evaluation does."""
    model = load_or_build_model(
        TASK,
        model_args,
        data_args,
        tokenizer,
        {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "decoder_start_token_id": tokenizer.bos_token_id,
        },
    )
    if training_args.generation_max_length:  # the saved model decodes as the evaluation did
        model.generation_config.max_length = training_args.generation_max_length
    return model


def train_results(trainer, training_args, args, budget, tokenized) -> dict:
    """Train; ``results.json``'s ``train``: Trainer's metrics, the budget's minutes, steps, epochs and throughput."""
    train_result = run_training(trainer, training_args)
    epochs = trainer.state.epoch or 0.0
    target_tokens = None if args.streaming else total_list_length(tokenized["train"], "labels")
    return {
        **train_result.metrics,
        "train_minutes": budget.train_seconds / 60.0,
        "train_cpu_minutes": budget.train_cpu_seconds / 60.0,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "global_steps": trainer.state.global_step,
        "epochs": epochs,
        "target_tokens_per_second": None
        if target_tokens is None
        else (target_tokens * epochs) / max(budget.train_seconds, 1e-9),
    }


def test_examples(tokenizer, tokenized, pairs, preds, label_ids) -> list[dict]:
    """A few greedy test translations; the eval sampler may reorder rows, so each row's source is found."""
    row_of = {tuple(labels): i for i, labels in enumerate(tokenized["test"]["labels"])}
    examples = []
    for k in range(min(5, len(preds))):
        i = row_of.get(tuple(int(x) for x in label_ids[k] if x != -100))
        if i is not None:
            examples.append(
                {
                    "test_index": i,
                    "source": pairs["test"][0][i],
                    "reference": pairs["test"][1][i],
                    "greedy": tokenizer.decode(preds[k], skip_special_tokens=True).strip(),
                }
            )
    return examples


def test_decodes(run, store: dict, export_dir: Path | None = None) -> None:
    """Greedy / beam test decodes of ``run.trainer.model`` into ``store`` (``test_engine``: generate() or the model
    exported to CTranslate2 or ONNX Runtime in ``export_dir``)."""
    trainer, tokenizer, tokenized, pairs, args = run.trainer, run.tokenizer, run.tokenized, run.pairs, run.args
    max_new = run.data_args.max_target_length + 16
    for beams in (int(b) for b in args.test_num_beams.split(",") if b.strip()):
        t0 = time.perf_counter()
        engine_report: dict = {}
        if args.test_engine in ("ctranslate2", "onnxruntime"):
            quantization = getattr(args, f"test_{args.test_engine}_quantization")
            batch_size = run.training_args.per_device_eval_batch_size
            engine = {
                "ctranslate2": ctranslate2_predictions,
                "onnxruntime": partial(onnxruntime_predictions, batch_size=batch_size, report=engine_report),
            }[args.test_engine]
            sources, max_source = pairs["test"][0], run.data_args.max_source_length
            preds = engine(trainer.model, tokenizer, sources, export_dir, quantization, beams, max_new, max_source)
            labels = padded(tokenized["test"]["labels"], -100)
            metrics = {f"test_{k}": v for k, v in run.compute_metrics((preds, labels)).items()}
            metrics["test_engine"] = args.test_engine
            metrics["test_quantization"] = quantization or "float32"
            metrics.update(engine_report)
            label_ids = labels
        else:
            pred = trainer.predict(tokenized["test"], metric_key_prefix="test", num_beams=beams, max_new_tokens=max_new)
            metrics = dict(pred.metrics)
            preds = np.where(pred.predictions < 0, tokenizer.pad_token_id, pred.predictions)
            label_ids = pred.label_ids
        metrics["generation_seconds"] = time.perf_counter() - t0
        store[f"test_beam{beams}" if beams > 1 else "test_greedy"] = metrics
        logger.info("test num_beams=%d: %s", beams, metrics)
        if beams == 1:
            store["examples"] = test_examples(tokenizer, tokenized, pairs, preds, label_ids)


def average_and_test(run, results: dict, extra_files: dict) -> None:
    """``average_last_checkpoints`` (the final model's test scores first, for comparison), then the test decodes;
    a tested CTranslate2 export goes into the run folder."""
    args, training_args, trainer = run.args, run.training_args, run.trainer
    testing = training_args.do_predict and "test" in run.tokenized
    if training_args.do_predict and "test" not in run.tokenized:
        logger.warning("no test split: nothing to predict")
    export_root = Path(tempfile.mkdtemp()) if args.test_engine != "pytorch" else None
    if args.average_last_checkpoints:
        # the newest complete ones, oldest first; a later, longer run's checkpoints left in the folder are not this model's
        found = run_folder.checkpoints(training_args.output_dir, up_to_step=trainer.state.global_step)
        folders = found[: args.average_last_checkpoints][::-1]
        if len(folders) < args.average_last_checkpoints:
            logger.warning(
                "average_last_checkpoints=%d: only %d complete checkpoints saved; averaging those",
                args.average_last_checkpoints,
                len(folders),
            )
        if testing:  # the final model's scores, for comparison
            results["before_averaging"] = {}
            test_decodes(run, results["before_averaging"], export_root / "final" if export_root else None)
        load_averaged_weights(trainer.model, folders)
        results["averaged_checkpoints"] = [p.name for p in folders]
        logger.info("averaged the weights of %s", ", ".join(p.name for p in folders))
    if testing:
        test_decodes(run, results, export_root / args.test_engine if export_root else None)
        if export_root is not None and trainer.is_world_process_zero():
            extra_files[args.test_engine] = export_root / args.test_engine  # the tested export, into the run folder


def plot_attention(run, results: dict, extra_files: dict) -> None:
    """``plot_attention``: the cross-attention heat map of one test (or validation) sentence; every process (a
    sharded model runs its forward collectively)."""
    args = run.args
    split = "test" if "test" in run.pairs else "validation"
    # the default goes into the final folder with the model (save_run moves it in)
    path = args.plot_attention_path or os.path.join(tempfile.mkdtemp(), "attention_heatmap.png")
    index = args.plot_attention_index
    sentence = run.pairs[split][0][index]
    written = plot_translation_attention(run.trainer.model, run.tokenizer, sentence, path)
    if written is None:
        logger.warning("The model returns no cross-attention maps (attention='none'?); no heat map written.")
    elif args.plot_attention_path is None:
        extra_files["attention_heatmap.png"] = Path(written)
        written = os.path.join(run.training_args.output_dir, "attention_heatmap.png")
    results["attention_plot"] = {"path": written, "split": split, "index": index, "source": sentence}


def translation_card(run, results: dict, data_line: str) -> dict:
    """The model card's data set, metrics, intended use and limitations."""
    model_args, data_args, args, tokenizer = run.model_args, run.data_args, run.args, run.tokenizer
    src, tgt = data_args.source_lang, data_args.target_lang
    sizes = results["data"]
    source = tokenizer_source(model_args, f"{model_args.tokenizer_kind}, built on the training pairs", "loaded from")
    filtered = f"pairs of at most {args.max_words} words per side; " if args.max_words else ""
    return {
        "dataset": f"{data_line}; {filtered}{sizes['train_pairs']} training / {sizes['validation_pairs']} validation / "
        f"{sizes['test_pairs']} test pairs ({src} -> {tgt}); one tokenizer for both languages, {len(tokenizer)} tokens, "
        f"{source}; sources truncated to {data_args.max_source_length}, targets to {data_args.max_target_length} "
        "tokens.",
        "metrics": translation_card_metrics(results) | {"processes": run.training_args.world_size},
        "intended_use": f"Translation {src} -> {tgt} of short sentences like those of its training data; a small "
        "teaching model for comparing seq2seq architectures / attention variants on one CPU, not a general-purpose "
        "translator.",
        "limitations": "Trained on one narrow data set"
        + (f" (pairs of at most {args.max_words} words)" if args.max_words else "")
        + ": out-of-domain text, names and long sentences are translated poorly; the vocabulary of the training "
        "split limits rare words; BLEU/chrF are measured on the (capped) test split.",
    }


def log_test_scores(results: dict) -> None:
    """The greedy and beam-5 test BLEU / chrF, logged at the end of a run."""
    for key in ("test_greedy", "test_beam5"):
        if key in results:
            logger.info(
                "%s: BLEU %.2f chrF %.2f",
                key,
                results[key].get("test_bleu", math.nan),
                results[key].get("test_chrf", math.nan),
            )


@dataclass
class TranslationRun:
    """What the steps after training read: the arguments, tokenizer, features, raw pairs, trainer and metrics."""

    model_args: object
    data_args: object
    args: TranslationArguments
    training_args: object
    tokenizer: object
    tokenized: dict
    pairs: dict
    trainer: HfSeqSeq2SeqTrainer
    compute_metrics: Callable


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    previous = start_script_run(
        training_args, results_name=args.results_file, configure_logging=True, threads=env_threads()
    )
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    check_averaging(args, training_args)
    src, tgt = data_args.source_lang, data_args.target_lang
    if not src or not tgt:
        raise RecipeError("train_translation needs `source_lang` and `target_lang` (keys of the `translation` dicts)")

    if args.streaming:
        tokenizer, tokenized, pairs, data_line = streamed_features(model_args, data_args, args, training_args, src, tgt)
    else:
        with training_args.main_process_first(desc="tokenizing"):  # one process builds the cache, the others read it
            tokenizer, tokenized, pairs, data_line = cached_features(
                model_args, data_args, args, training_args, src, tgt
            )
    model = build_translation_model(model_args, data_args, training_args, tokenizer)
    n_params = model.num_parameters()
    logger.info("model %s: %.2fM parameters", model.config.model_type, n_params / 1e6)

    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    compute_metrics = translation_metrics(tokenizer)
    trainer, budget = budgeted_trainer(
        HfSeqSeq2SeqTrainer,
        model,
        training_args,
        args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=[StepTimesCallback()],  # `[hf_seq] first training step begins at ...` for benchmarks
    )
    run = TranslationRun(
        model_args, data_args, args, training_args, tokenizer, tokenized, pairs, trainer, compute_metrics
    )

    results: dict = {
        "command": command,
        "model_type": model.config.model_type,
        "model_config": model.config.to_diff_dict(),
        "model_name_or_path": model_args.model_name_or_path,
        "parameters": n_params,
        "data": {
            "source": data_line,
            "max_words": args.max_words,
            "train_pairs": None if args.streaming else len(tokenized["train"]),
            "validation_pairs": len(tokenized["validation"]),
            "test_pairs": len(tokenized["test"]) if "test" in tokenized else 0,
        },
        "torch_threads": torch.get_num_threads(),
    }
    if training_args.do_train:
        results["train"] = train_results(trainer, training_args, args, budget, tokenized)
        results["validation_history"] = [h for h in trainer.state.log_history if "eval_bleu" in h]
        # the trained model first: nothing that runs after training (decoding, exports, the plot) can cost it
        save_run(trainer, training_args.output_dir, results, command, results_name=args.results_file)

    extra_files = {}
    guarded = {"results": results, "output_dir": training_args.output_dir}
    after_training("test decoding", average_and_test, run, results, extra_files, **guarded)
    averaged = "averaged_checkpoints" in results  # new weights: saved again with the rest
    if args.plot_attention:
        after_training("the attention plot", plot_attention, run, results, extra_files, **guarded)

    card = None
    if training_args.do_train:  # trained models only
        card = after_training("the model card", translation_card, run, results, data_line, **guarded)
    return finish_script_run(
        trainer,
        training_args,
        results,
        command,
        card=card,
        files=extra_files,
        results_name=args.results_file,
        save_model=training_args.do_train and averaged,
        report=log_test_scores,
    )


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
