"""Tokenized features of the translation, classifier and tagger scripts: built once with ``datasets.Dataset.map``
(``batched=True``, ``num_proc=--preprocessing_num_workers``) into Arrow files on disk, reused by the next run.

* **Where.** One folder per key under the preprocessing cache (``--cache_dir``, default ``$HF_SEQ_CACHE`` or
  ``~/.cache/hf_seq/preprocessed``: :mod:`hf_seq.toolkit.preprocessing`): ``<task>-<hash>/`` holding one Arrow file (or one
  per worker) per split and ``meta.json``, written last. The key is the data files' fingerprints
  (:func:`hf_seq.toolkit.preprocessing.fingerprint_files`: path, size, modification time, first and last MiB), the
  tokenizer's fingerprint (its serialised pipeline and special tokens), and every setting that changes a token: the
  task, the columns, label names, maximum lengths, truncation, caps and filters. A file that changed is a new key;
  the stale folder is never read.
* **What is trusted.** A folder is read only when its ``meta.json`` exists, every file it lists has the recorded
  size (:func:`hf_seq.toolkit.preprocessing.cache_is_complete`) and every Arrow file opens with the recorded number of rows; anything else (a run killed while
  writing, a truncated or corrupt file) is logged and rebuilt. ``--overwrite_cache true`` rebuilds it anyway.
* **Data without files** (the presets ``hf_seq/translation``, ``hf_seq/sentiment``, ``hf_seq/brown``; a
  ``datasets`` name) is tokenized in memory by the same ``map`` function, as before: the presets are small.
* **A tokenizer built on the training split** is cached too (``tokenizer/`` in a folder keyed by the data and the
  tokenizer settings), so a second run neither retrains it nor re-tokenizes: it starts training within seconds.

Tokenizers are trained from :class:`ColumnTexts`, an iterator over batches of the Arrow columns, never from one list
of all the texts; it yields the texts in the same order as the lists of before, so the vocabulary is the same.

The scripts that tokenize into :class:`hf_seq.toolkit.preprocessing.TokenStore` s (``train_lm``, ``pretrain_bert``) share
their cache folder and its tokenizer (:func:`cached_token_stores`), their cache keys (:func:`text_file_keys`,
:func:`dataset_cache_key`), the validation hold-out of a training file
(:func:`check_holdout_percentage`, :func:`held_out_rows`), the data line of their splits (:func:`describe_sizes`),
the checks of a streamed text file (:func:`check_text_stream`) and the seeded shuffle buffer of their streams
(:func:`shuffle_buffered`) from here too.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from datasets import Dataset, concatenate_datasets

from hf_seq.toolkit.preprocessing import (
    arrow_maps_released,
    cache_is_complete,
    cached_build,
    default_cache_root,
    fingerprint_files,
    holdout_mask,
    id_type,
    iter_column_batches,
    preprocessing_cache_dir,
    read_meta,
    release_mapped_pages,
    released_arrow_table,
)

logger = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when the layout or the meaning of a key changes
# part of a data record's key: bump when the checks of the data files change (a record written before would let a
# run skip them: it reads no data file)
DATA_CHECKS = 2
READ_BATCH = 10_000  # rows per Arrow batch read by ColumnTexts


def file_fingerprints(paths) -> str:
    """:func:`hf_seq.toolkit.preprocessing.fingerprint_files` of the files (of every file under a folder)."""
    files: list[Path] = []
    for path in paths:
        path = Path(path)
        files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    return fingerprint_files(files)


def data_files_of(data_args) -> list[str] | None:
    """The local files the splits are read from (``train_file`` / ``validation_file`` / ``test_file``, or a local
    ``dataset_name`` folder), ``None`` for a preset or a ``datasets`` name (no files to fingerprint: no disk cache)."""
    files = [f for f in (data_args.train_file, data_args.validation_file, data_args.test_file) if f]
    if files:
        return files
    name = data_args.dataset_name
    if name and not name.startswith("hf_seq/") and Path(name).expanduser().is_dir():
        return [str(Path(name).expanduser())]
    return None


class ColumnTexts:
    """The texts of ``columns`` of a ``datasets.Dataset``, read in Arrow batches of ``batch_size`` rows; iterable
    again and again (a word-level tokenizer with ``also_keep`` reads them twice). Each row yields its columns' texts
    in order; a ``translation`` struct column is read as its ``fields``; a list-of-words column is joined with
    spaces when ``join_words`` (sub-word tokenizers see sentences), else each word is yielded. ``max_rows`` caps the
    rows read (the first N)."""

    def __init__(
        self,
        dataset: Dataset,
        columns: list[str],
        fields: list[str] | None = None,
        join_words: bool = False,
        max_rows: int | None = None,
        batch_size: int = READ_BATCH,
    ) -> None:
        self.dataset, self.columns, self.fields = dataset, list(columns), fields
        self.join_words, self.max_rows, self.batch_size = join_words, max_rows, batch_size

    def __iter__(self) -> Iterator[str]:
        dataset = self.dataset.select_columns(self.columns)
        n = len(dataset) if self.max_rows is None else min(self.max_rows, len(dataset))
        for start in range(0, n, self.batch_size):
            batch = dataset[start : min(start + self.batch_size, n)]
            columns = [batch[c] for c in self.columns]
            for row in zip(*columns):
                for value in row:
                    if isinstance(value, dict):  # a translation pair: its languages in `fields` order
                        yield from (value[f] for f in self.fields)
                    elif isinstance(value, list):
                        if self.join_words:
                            yield " ".join(value)
                        else:
                            yield from value
                    else:
                        yield value


RELEASE_EVERY = 50  # batches between two releases of the mapped pages of the files read (50,000 rows)


def releasing_pages(function: Callable, paths, every: int = RELEASE_EVERY) -> Callable:
    """``function`` (a batched ``map`` / ``filter`` function) that calls :func:`release_mapped_pages` of ``paths``
    every ``every`` calls (in the process that runs it: each ``num_proc`` worker releases its own)."""
    paths = [str(p) for p in paths]
    calls = [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if calls[0] % every == 0:
            release_mapped_pages(paths)
        return function(*args, **kwargs)

    return wrapped


def _mapped_dataset(path: str) -> Dataset:
    """``Dataset.from_file(path)`` (the same memory-mapped table, the same features and fingerprint) through
    :func:`released_arrow_table`: the file does not stay resident."""
    from datasets.table import MemoryMappedTable

    return Dataset(MemoryMappedTable(released_arrow_table(path), path))


def _open_split(folder: Path, entry: dict) -> Dataset:
    """A cached split: every Arrow file must open (pyarrow reads its whole stream of record batches:
    :func:`_mapped_dataset`, its pages released as it goes) and the rows must be those written."""
    parts = [_mapped_dataset(str(folder / name)) for name in entry["files"]]
    dataset = parts[0] if len(parts) == 1 else concatenate_datasets(parts)
    if len(dataset) != entry["num_rows"]:
        raise ValueError(f"{folder}: {len(dataset)} rows, {entry['num_rows']} were written")
    return dataset


class FeatureCache:
    """The cache folder of one key (:func:`hf_seq.toolkit.preprocessing.preprocessing_cache_dir` of ``task`` +
    ``key_parts``) under ``root``; ``root=None``: nothing on disk (``map`` in memory).

    The splits are ``Dataset.map``'s own Arrow files; what this adds to ``datasets``' fingerprinted cache is a key
    made of the data files and the tokenizer, not of a loaded ``Dataset``: a run that finds its features reads no
    data file."""

    def __init__(self, root: str | os.PathLike | None, task: str, key_parts: dict, overwrite: bool = False) -> None:
        self.root = root
        self.key_parts = {"task": task, "features_version": CACHE_VERSION, **key_parts}
        self.folder = None if root is None else preprocessing_cache_dir(self.key_parts, root)
        self.overwrite = overwrite

    @property
    def on_disk(self) -> bool:
        return self.folder is not None

    def _meta(self) -> dict | None:
        if self.folder is None or self.overwrite or not cache_is_complete(self.folder):
            return None
        try:
            return read_meta(self.folder)
        except (OSError, ValueError):
            return None

    def load(self, splits: list[str]) -> dict[str, Dataset] | None:
        """The cached splits, or ``None``: not built, incomplete (no ``meta.json``, a file of the wrong size) or
        unreadable (a pyarrow error, the wrong number of rows; logged, and the next :meth:`build` replaces it)."""
        meta = self._meta()
        if meta is None or any(s not in meta.get("splits", {}) for s in splits):
            return None
        try:
            return {s: _open_split(self.folder, meta["splits"][s]) for s in splits}
        except Exception as error:  # noqa: BLE001 - pyarrow / OS / row-count error: rebuilt, never read
            logger.warning(
                "preprocessing cache %s is unreadable (%s: %s); rebuilding it", self.folder, type(error).__name__, error
            )
            self.overwrite = True
            return None

    def load_extra(self, name: str) -> Path | None:
        """A sub-folder (e.g. ``tokenizer``) of a complete cache folder."""
        meta = self._meta()
        if meta is None or name not in meta.get("extras", []):
            return None
        return self.folder / name

    def build(
        self,
        datasets_in: dict[str, Dataset],
        function: Callable | dict[str, Callable],
        *,
        num_proc: int | None = None,
        batch_size: int = 1000,
        extras: dict[str, Callable[[Path], None]] | None = None,
        features: dict | None = None,
        desc: str = "tokenizing",
    ) -> dict[str, Dataset]:
        """``dataset.map(function, batched=True, remove_columns=<all>)`` of each split (``function`` may be one per
        split), into this cache folder (:func:`hf_seq.toolkit.preprocessing.cached_build`: a temporary folder renamed into
        place, ``meta.json`` written last) when it is on disk, in memory otherwise. ``extras``: ``name ->
        writer(path)`` (a tokenizer's ``save_pretrained``) stored beside the splits; ``features``: the ``Features`` of each
        split's output (e.g. ``int32`` ids: half the bytes of the ``int64`` that Python ints become)."""
        num_proc = num_proc if num_proc and num_proc > 1 else None

        def mapped(split: str, dataset: Dataset, **kwargs) -> Dataset:
            return dataset.map(
                function[split] if isinstance(function, dict) else function,
                batched=True,
                batch_size=batch_size,
                remove_columns=dataset.column_names,
                num_proc=num_proc if len(dataset) > 1 else None,
                desc=f"{desc} {split}",
                # the key's hash (datasets allows 64 characters, `_00000_of_00002` added per worker included)
                new_fingerprint=f"{self.folder.name.rsplit('-', 1)[-1] if self.folder else 'memory'}-{split}",
                features=(features or {}).get(split),
                **kwargs,
            )

        if self.folder is None:
            return {split: mapped(split, dataset, keep_in_memory=True) for split, dataset in datasets_in.items()}

        def build_into(tmp: Path) -> dict:
            splits = {}
            for split, dataset in datasets_in.items():
                # map opens the file it wrote (Dataset.from_file): released as it is read, or a 10 M-pair split's
                # file would be half resident at once
                with arrow_maps_released():
                    out = mapped(
                        split, dataset, cache_file_name=str(tmp / f"{split}.arrow"), load_from_cache_file=False
                    )
                files = [Path(f["filename"]) for f in out.cache_files]
                if not files or any(f.parent.resolve() != tmp.resolve() for f in files):
                    raise RuntimeError(f"datasets.map did not write the {split} split into {tmp}: {files}")
                splits[split] = {"files": [f.name for f in files], "num_rows": len(out)}
                del out
            for name, writer in (extras or {}).items():
                writer(tmp / name)
            return {"splits": splits, "extras": list(extras or {})}

        folder, _ = cached_build(self.key_parts, build_into, self.root, overwrite=True, description=f"{desc} output")
        self.overwrite = False
        meta = read_meta(folder)
        return {split: _open_split(folder, meta["splits"][split]) for split in datasets_in}

    def load_record(self) -> dict | None:
        """The JSON record of a complete folder written by :meth:`save_record`, or ``None``."""
        meta = self._meta()
        record = None if meta is None else meta.get("record")
        return record if isinstance(record, dict) else None

    def save_record(self, record: dict) -> None:
        """A folder that holds only a JSON record in its ``meta.json`` (what a run read from the raw files: the
        split sizes and columns of a feature key, the splits' descriptions), so that the next run finds its
        features without loading those files; written only when the folder does not hold this record already."""
        if self.folder is None or self.load_record() == record:
            return
        cached_build(
            self.key_parts, lambda tmp: {"record": record}, self.root, overwrite=True, description="data record"
        )
        self.overwrite = False

    def save_extras_only(self, extras: dict[str, Callable[[Path], None]]) -> None:
        """A folder that holds only extras (a tokenizer), ``meta.json`` last."""
        if self.folder is None:
            return

        def build_into(tmp: Path) -> dict:
            for name, writer in extras.items():
                writer(tmp / name)
            return {"splits": {}, "extras": list(extras)}

        cached_build(self.key_parts, build_into, self.root, overwrite=True, description="tokenizer")
        self.overwrite = False


# ---------------------------------------------------------------------------------------------------------------
# the flags
# ---------------------------------------------------------------------------------------------------------------
STREAMING_TOKENIZER_SAMPLES = 100_000


def cache_root(args, data_args) -> Path | None:
    """Where the features of this data go: ``None`` (in memory) for a preset / a ``datasets`` name or
    ``--cache_dir none``."""
    if data_files_of(data_args) is None or (args.cache_dir or "").lower() == "none":
        return None
    return default_cache_root(args.cache_dir)


def data_record(root, name: str, data_args, overwrite: bool, **extra) -> tuple[FeatureCache, dict | None]:
    """``(the FeatureCache of the data record, the record or None)``: the record (:meth:`FeatureCache.save_record`)
    of what a run read from the data files (split sizes, columns, label names, descriptions), keyed by the files'
    fingerprints, how the splits are drawn and capped and ``extra`` (the columns) under ``<root>/<name>-<hash>``.
    A run that finds it (and its features) reads no data file; a file that changed is another key. A file that
    cannot be read gives no record (the loader then says which)."""
    try:
        key = data_key(data_args, {}, data_checks=DATA_CHECKS, **extra)
    except OSError:
        key = None
    cache = FeatureCache(None if key is None else root, name, key or {}, overwrite=overwrite)
    return cache, cache.load_record()


def label_id_type(num_labels: int) -> str:
    """The type of cached label ids (``-100`` for a position without a label included): ``int16``, or ``int32``
    for more than 32,767 labels."""
    return "int16" if num_labels < 1 << 15 else "int32"


def encoded_features(tokenizer, label_type: str, nested: bool = False):
    """The ``Features`` of a tokenizer's output plus ``labels`` (one per row, or one per token when ``nested``):
    :func:`id_type` ids, ``int8`` masks and token types; ``None`` (``datasets``' own types) for a tokenizer with other
    model inputs."""
    from datasets import Features, List, Value

    names = list(tokenizer.model_input_names)
    if "input_ids" not in names or not set(names) <= {"input_ids", "token_type_ids", "attention_mask"}:
        return None
    columns = {name: List(Value(id_type(tokenizer) if name == "input_ids" else "int8")) for name in names}
    return Features(columns | {"labels": List(Value(label_type)) if nested else Value(label_type)})


def data_key(data_args, splits: dict, **extra) -> dict:
    """The key parts every task shares: the data files' fingerprints and how the splits are drawn and capped."""
    files = data_files_of(data_args)
    return {
        "files": file_fingerprints(files) if files else None,
        "dataset_name": data_args.dataset_name,
        "dataset_config_name": data_args.dataset_config_name,
        "validation_split_percentage": data_args.validation_split_percentage,
        "split_seed": data_args.split_seed,
        "caps": [data_args.max_train_samples, data_args.max_eval_samples, data_args.max_predict_samples],
        "splits": {name: len(dataset) for name, dataset in splits.items()},
        **extra,
    }


def check_streaming(args, training_args, data_args, splits_by_node: bool = False) -> None:
    """``RecipeError`` naming the flag for what a stream cannot do (``streaming_split_by_node`` unless the script
    ``splits_by_node``)."""
    from hf_seq.train_scripts.arguments import RecipeError

    if not args.streaming:
        return
    if getattr(args, "streaming_split_by_node", False) and not splits_by_node:
        raise RecipeError(
            "`streaming_split_by_node` true is for train_lm and train_translation; here the first process reads the "
            "stream and dispatches the batches: leave it false"
        )
    if training_args.max_steps is None or training_args.max_steps <= 0:
        raise RecipeError("`streaming` true needs `max_steps` > 0: a stream has no length to count epochs by")
    if getattr(training_args, "train_sampling_strategy", None) in ("length_buckets", "group_by_length"):
        raise RecipeError(
            f"`streaming` true cannot use `train_sampling_strategy` {training_args.train_sampling_strategy!r}: the "
            "lengths of a stream are not known in advance; use 'random' (the seeded shuffle buffer)"
        )
    if not data_args.train_file:
        raise RecipeError("`streaming` true reads data files: pass `train_file` (csv, tsv, json, jsonl, parquet)")
    if not data_args.validation_file:
        raise RecipeError(
            "`streaming` true needs `validation_file`: a `validation_split_percentage` hold-out cannot be drawn "
            "from a stream"
        )


@contextlib.contextmanager
def text_read_errors(path: str, flag: str) -> Iterator[None]:
    """A ``UnicodeDecodeError`` while the text file ``path`` is read as a ``DataError`` naming the file and ``flag``."""
    from hf_seq.toolkit.data import DataError

    try:
        yield
    except UnicodeDecodeError as error:
        raise DataError(f"`{flag}` {path} could not be read as text (UnicodeDecodeError: {error})") from error


def check_text_stream(data_args, training_args, caps: dict) -> None:
    """``--streaming`` of the token-store scripts (train_lm, pretrain_bert): ``RecipeError`` naming the flag unless
    the stream is a ``train_file`` with a ``validation_file``, none of ``caps`` (``{flag: value}``, e.g.
    ``max_train_samples``) is set and ``max_steps`` is (``training_args`` None: not checked)."""
    from hf_seq.train_scripts.arguments import RecipeError

    if data_args.dataset_name or not data_args.train_file:
        raise RecipeError(
            "`streaming` reads `train_file` (txt, csv, json, jsonl, parquet); give it instead of `dataset_name`"
        )
    if not data_args.validation_file:
        raise RecipeError("`streaming` needs a `validation_file` (a held-out share of a stream is not defined)")
    for name, value in caps.items():
        if value is not None:
            raise RecipeError(f"`{name}` does not apply to `streaming` (a stream is read until `max_steps`)")
    if training_args is not None and (training_args.max_steps is None or training_args.max_steps <= 0):
        raise RecipeError("`streaming` needs `max_steps` (a stream has no length to count epochs by)")


def stream_file(path: str, split: str, allow_text: bool = False, column: str | None = None):
    """``datasets.load_dataset(<builder>, data_files=path, streaming=True)`` (an IterableDataset) of a data file, read
    as :func:`hf_seq.toolkit.data.load_data` reads it: a .tsv split at tabs, a .txt file (``allow_text``: the
    language-model and pretraining scripts) one row per line with its line break kept. ``column``: only that column
    of a table file (a .txt file has one, ``text``)."""
    import datasets

    from hf_seq.toolkit.data import check_data_file

    builder = check_data_file(path, f"{split}_file", allow_text=allow_text)
    kwargs = {"sep": "\t"} if Path(path).suffix.lower() == ".tsv" else {}
    if builder == "text":
        kwargs["keep_linebreaks"] = True
    stream = datasets.load_dataset(builder, data_files={split: str(path)}, split=split, streaming=True, **kwargs)
    return stream.select_columns([column]) if column is not None and builder != "text" else stream


def head_dataset(stream, n: int | None) -> Dataset:
    """The first ``n`` rows of a stream (all when ``None``) as an in-memory ``Dataset`` (the capped evaluation
    splits and the tokenizer's sample)."""
    rows = stream if n is None else stream.take(n)
    return Dataset.from_list(list(rows))


def split_by_node_setup(args, training_args) -> int:
    """``--streaming_split_by_node``: the number of parts to split the training stream into (the world size; 1
    without it) and accelerate's ``dispatch_batches`` turned off through ``training_args.accelerator_config``, so
    that each process iterates its own part. ``RecipeError`` for the ``accelerator_config`` settings that would
    read or split the stream another way (``dispatch_batches`` / ``split_batches`` true)."""
    from hf_seq.train_scripts.arguments import RecipeError

    if not getattr(args, "streaming_split_by_node", False):
        return 1
    config = training_args.accelerator_config
    for name in ("dispatch_batches", "split_batches"):
        if getattr(config, name, None):
            raise RecipeError(
                f"`streaming_split_by_node` true cannot use `accelerator_config` {name}=true: each process reads its "
                f"own part of the stream; leave {name} unset (or false), or leave `streaming_split_by_node` false"
            )
    config.dispatch_batches = False
    return max(1, int(training_args.world_size))


def split_stream_by_node(stream, world_size: int, rows: Callable | None = None, features=None):
    """The training stream as a ``datasets`` IterableDataset of ``world_size`` shards, shard ``k`` holding
    ``datasets.distributed.split_dataset_by_node(stream, rank=k, world_size)`` (every ``world_size``-th row from
    row ``k`` for one file) passed through ``rows`` (``part -> examples``; default: its rows). With ``n_shards`` equal
    to the number of processes, accelerate's ``prepare_data_loader`` (``dispatch_batches`` off) gives process ``i``
    the shard ``.shard(num_shards, index=i)``: the stream is split exactly once (an ``IterableDataset`` with fewer
    shards would be cut a second time by ``IterableDatasetShard``), and only that process tokenizes its rows. A seeded
    ``.shuffle`` on top may also permute which part each process reads (by its seed, the same permutation on every
    process: the parts stay disjoint; ``.shard`` picks the part before an epoch reshuffles, so a process reads the
    same part in every pass of :func:`repeated_stream`)."""
    import datasets
    from datasets.distributed import split_dataset_by_node

    def parts(part, source, world, make_rows):
        for k in part:
            own = split_dataset_by_node(source, rank=k, world_size=world) if world > 1 else source
            yield from (own if make_rows is None else make_rows(own))

    return datasets.IterableDataset.from_generator(
        parts,
        features=stream.features if features is None else features,
        gen_kwargs={"part": list(range(world_size)), "source": stream, "world": world_size, "make_rows": rows},
    )


def repeated_passes(one_pass: Callable[[int], Iterable], source: str) -> Iterator:
    """The items of ``one_pass(0)``, ``one_pass(1)``, ... one after the other, never ending: a training stream read
    again and again until ``max_steps``. ``one_pass(k)`` is pass ``k`` over the data, drawn with the seeds of epoch
    ``k`` (so pass 0 is the order of one pass without repetition). ``Trainer`` counts one epoch of an
    ``IterableDataset`` as ``max_steps`` updates: over a stream that ended after each pass, it would start an epoch of
    its own, and a run resumed from a checkpoint past the first pass would skip the wrong batches. Over this stream it
    sees one epoch and skips the batches trained on, wherever the checkpoint lies. The passes are joined: the batch
    that crosses the end of a pass holds its last examples and the first of the next (no short batch). ``DataError``
    naming ``source`` when a pass has no example (an endless loop otherwise)."""
    from hf_seq.toolkit.data import DataError

    for index in itertools.count():
        empty = True
        for item in one_pass(index):
            empty = False
            yield item
        if empty:
            raise DataError(
                f"{source} gives no training example (pass {index + 1} over it is empty), so it cannot be read until "
                "`max_steps`: check the file, the filters and `max_train_samples`"
            )


def _stream_passes(part: list[int], stream, parts: int, source: str):
    """The examples of ``repeated_stream``'s shard ``part[0]``."""
    for k in part:

        def one_pass(index: int, k=k):
            own = stream.shard(num_shards=parts, index=k)  # a new IterableDataset: ``stream`` keeps its epoch
            own.set_epoch(index)
            return own

        name = source if parts == 1 else f"{source} (part {k + 1} of {parts})"
        yield from repeated_passes(one_pass, name)


def repeated_stream(stream, source: str, parts: int = 1):
    """A ``datasets`` IterableDataset of the training ``stream`` repeated until ``max_steps``
    (:func:`repeated_passes`): pass ``k`` is ``stream`` at epoch ``k`` (``set_epoch(k)``: its seeded shuffle buffer
    reshuffled as for epoch ``k``; pass 0 is the order of the stream read once). ``parts`` > 1 (``--streaming_split_by_node``, ``stream``
    of :func:`split_stream_by_node`): a stream of ``parts`` shards, shard ``i`` repeating ``stream.shard(parts,
    index=i)``, so that accelerate's ``prepare_data_loader`` still gives process ``i`` its own part, every pass.
    The examples pass unchanged (the ``features`` of ``stream``)."""
    import datasets

    return datasets.IterableDataset.from_generator(
        _stream_passes,
        features=stream.features,
        gen_kwargs={"part": list(range(parts)), "stream": stream, "parts": parts, "source": source},
    )


def cached_tokenizer(root, task: str, key_parts: dict, overwrite: bool, build: Callable[[], Any] | None):
    """A tokenizer built by ``build()`` on the training split, cached in ``<root>/<task>-tokenizer-<hash>`` (keyed
    by the data and the tokenizer settings in ``key_parts``): the next run loads it instead of training it again.
    Every run (the first too) uses the saved copy, so that the features' key (its fingerprint) is the same.
    ``build`` None: the cached tokenizer, or None when there is none."""
    from transformers import AutoTokenizer

    cache = FeatureCache(root, f"{task}_tokenizer", key_parts, overwrite=overwrite)
    saved = cache.load_extra("tokenizer")
    if saved is None:
        if build is None:
            return None
        tokenizer = build()
        if not cache.on_disk:
            return tokenizer
        cache.save_extras_only({"tokenizer": tokenizer.save_pretrained})
        saved = cache.load_extra("tokenizer")
    return AutoTokenizer.from_pretrained(saved)


def label_features(splits: dict, column: str) -> dict:
    """The type of a label column per split (a ``ClassLabel``'s names, or the Arrow type): part of a key."""
    return {name: str(dataset.features[column]) for name, dataset in splits.items()}


def token_counts(dataset: Dataset, column: str, minlength: int):
    """``bincount`` of the ids of a list column, read from the Arrow values (no Python lists)."""
    import numpy as np
    import pyarrow.compute as pc

    from hf_seq.toolkit.samplers import _arrow_column

    column = _arrow_column(dataset, column)
    counts = np.zeros(minlength, dtype=np.int64)
    for chunk in getattr(column, "chunks", [column]):  # chunk by chunk: no copy of all the ids at once
        values = pc.list_flatten(chunk).to_numpy(zero_copy_only=False).astype(np.int64)
        found = np.bincount(values, minlength=minlength)
        if len(found) > len(counts):
            counts = np.pad(counts, (0, len(found) - len(counts)))
        counts[: len(found)] += found
    return counts


def tokenizer_settings(model_args, max_length, samples, pre_tokenizer: str = "whitespace_punct") -> dict:
    """The settings that shape a tokenizer built by ``tokenizer_for``: part of its cache key."""
    return {
        "tokenizer": {
            "kind": model_args.tokenizer_kind,
            "vocab_size": model_args.tokenizer_vocab_size,
            "lowercase": model_args.lowercase,
            "min_frequency": model_args.tokenizer_min_frequency,
            "padding_side": model_args.padding_side,
            "truncation_side": model_args.truncation_side,
            "model_max_length": max_length,
            "samples": samples,
            "pre_tokenizer": pre_tokenizer,
        }
    }


def streamed_task_splits(args, training_args, data_args):
    """``--streaming`` for the classifier and the tagger: ``(train_stream, splits)``. ``train_stream`` is the
    training file as a ``datasets`` IterableDataset (:func:`stream_file`); ``splits`` a ``DatasetDict`` whose
    ``train`` is the first ``tokenizer_max_train_lines`` (default 100,000) rows of it in memory — the rows a built
    tokenizer is trained on, the column checks and the word-dropout counts read — and whose ``validation`` (and
    ``test``) are those files, read whole (``max_*_samples`` caps them later). ``RecipeError`` naming the flag for what
    a stream cannot do (:func:`check_streaming`), ``DataError`` for an empty file."""
    from datasets import DatasetDict

    from hf_seq.toolkit.data import DataError

    check_streaming(args, training_args, data_args)
    stream = stream_file(data_args.train_file, "train")
    splits = DatasetDict()
    for split, path, source in (
        ("train", data_args.train_file, stream),
        ("validation", data_args.validation_file, None),
        ("test", data_args.test_file, None),
    ):
        if not path:
            continue
        source = source if source is not None else stream_file(path, split)
        cap = (args.tokenizer_max_train_lines or STREAMING_TOKENIZER_SAMPLES) if split == "train" else None
        rows = list(source if cap is None else source.take(cap))
        if not rows:
            raise DataError(f"`{split}_file` {path} has no data rows")
        features = source.features
        splits[split] = Dataset.from_list(rows, features=features) if features is not None else Dataset.from_list(rows)
        splits[split].info.description = str(path)
    return stream, splits


def streamed_label_names(splits, column: str, flag: str, given, nested: bool = False) -> list[str]:
    """The label set of a stream, known before training: a ``ClassLabel`` column's names, else the labels of the
    validation (and test) file, of the first training rows (``splits['train']``) and ``--streaming_label_names``,
    ordered as the cached path orders them (numbers numerically, strings sorted). ``RecipeError`` naming
    ``streaming_label_names`` when fewer than two labels are known."""
    from datasets import ClassLabel
    from hf_seq.train_scripts.arguments import RecipeError
    from hf_seq.train_scripts.common import _label_strings

    feature = splits["train"].features[column]
    inner = getattr(feature, "feature", None) if nested else feature
    if isinstance(inner, ClassLabel):
        names = list(inner.names)
        if given and list(given) != names:
            raise RecipeError(
                f"`streaming_label_names` {list(given)} differs from the names of the ClassLabel column {column!r} "
                f"({names}): leave it out"
            )
        return names
    seen = set(given or ())
    for dataset in splits.values():
        seen |= set(_label_strings(dataset, column, nested))
    try:
        names = sorted(seen, key=float)
    except ValueError:
        names = sorted(seen)
    if len(names) < 2:
        raise RecipeError(
            f"`streaming` true needs the label set before training: the validation file and the first training rows "
            f"have {names} in column {column!r} (`{flag}`); pass every label with `streaming_label_names`"
        )
    return names


def streamed_lookup(lookup: Callable, path: str, column: str, names: list[str]) -> Callable:
    """``lookup`` (a label -> id) of a training stream's rows, with a ``DataError`` naming the file and the flag for a
    label outside the set fixed before training."""
    from hf_seq.toolkit.data import DataError

    def convert(value):
        try:
            return lookup(value)
        except (KeyError, IndexError):
            raise DataError(
                f"`train_file` {path}: a row has label {value!r} in column {column!r} that the label set fixed before "
                f"training does not have ({names[:30]}: the validation file's labels, the first training rows' and "
                "`streaming_label_names`); add it to `streaming_label_names`"
            ) from None

    return convert


def streamed_train_features(stream, encode: Callable, keys, data_args, args, seed: int, parts: int | None = None):
    """The training stream's features: its first ``max_train_samples`` rows (split into ``parts``, one per process:
    :func:`split_stream_by_node`), through the seeded shuffle buffer (``shuffle_buffer_size``; seed + epoch),
    tokenized batch by batch by ``encode`` (``IterableDataset.map``), keeping ``keys``; read again and again until
    ``max_steps`` (:func:`repeated_stream`: pass ``k`` shuffled as epoch ``k``)."""
    if data_args.max_train_samples is not None:
        stream = stream.take(data_args.max_train_samples)
    if parts is not None:
        stream = split_stream_by_node(stream, parts)
    if args.shuffle_buffer_size > 0:
        stream = stream.shuffle(seed=seed, buffer_size=args.shuffle_buffer_size)
    stream = stream.map(encode, batched=True).select_columns(list(keys))
    return repeated_stream(stream, f"`train_file` {data_args.train_file}", parts=parts or 1)


# ---------------------------------------------------------------------------------------------------------------
# the token-store scripts (train_lm, pretrain_bert): cache keys, the validation hold-out, the shuffle buffer
# ---------------------------------------------------------------------------------------------------------------
def text_file_keys(files: dict[str, str]) -> dict[str, str]:
    """``{split: fingerprint}`` of the data files ``{split: path}``, each checked first: ``DataError`` naming the flag
    (``<split>_file``) for a file that is missing, of a format not read, or empty."""
    from hf_seq.toolkit.data import DataError, check_data_file

    for split, path in files.items():
        check_data_file(path, f"{split}_file", allow_text=True)
        if os.path.getsize(path) == 0:
            raise DataError(f"`{split}_file` {path} is empty")
    return {split: fingerprint_files([path]) for split, path in files.items()}


def cached_token_stores(key: dict, build: Callable, given, args, training_args, description: str):
    """``(folder, reused, tokenizer)``: the preprocessing cache folder of ``key``
    (:func:`hf_seq.toolkit.preprocessing.cached_build`; ``cache_dir``, ``overwrite_cache``), built by one process
    while the others wait (``main_process_first``), and the tokenizer of the run. ``build(tmp)`` writes the token
    stores and returns ``(tokenizer, meta entries)``; a tokenizer it built (``given`` None) is saved beside the
    stores, and every run (the first too) uses that saved copy."""

    def build_with_tokenizer(tmp: Path) -> dict | None:
        tokenizer, meta = build(tmp)
        if given is None:
            tokenizer.save_pretrained(tmp / "tokenizer")
        return meta

    first = training_args.main_process_first(desc="preprocessing") if training_args is not None else nullcontext()
    with first:
        folder, reused = cached_build(
            key, build_with_tokenizer, args.cache_dir, args.overwrite_cache, description=description
        )
    if given is None:
        from transformers import AutoTokenizer

        given = AutoTokenizer.from_pretrained(folder / "tokenizer")
    return folder, reused, given


def dataset_cache_key(dataset: Dataset) -> str:
    """A split's part of the cache key: ``datasets``' own fingerprint for a split on disk (plus its files'
    fingerprints), a hash of the column contents for an in-memory one (a preset)."""
    import hashlib

    if dataset.cache_files:
        return f"{dataset._fingerprint}:{fingerprint_files([f['filename'] for f in dataset.cache_files])}"
    digest = hashlib.blake2b(digest_size=16)
    for column in dataset.column_names:
        for values in iter_column_batches(dataset, column):
            digest.update("\0".join(map(str, values)).encode())
        digest.update(b"\1")
    return digest.hexdigest()


def check_holdout_percentage(source: str, percentage) -> None:
    """``DataError`` unless ``validation_split_percentage`` can hold out a validation split of the training data
    ``source`` (which comes without one): given, and in (0, 100)."""
    from hf_seq.toolkit.data import DataError

    if not percentage:
        raise DataError(
            f"{source} comes without a validation split: pass `validation_file` or a "
            "`validation_split_percentage` to hold out"
        )
    if not 0 < percentage < 100:
        raise DataError(f"`validation_split_percentage` must be in (0, 100), got {percentage}")


def held_out_rows(source: str, n: int, percentage: float, seed: int, unit: str = "rows") -> np.ndarray:
    """``(n,)`` bool, True for the ``percentage`` % of the ``n`` training ``unit`` of ``source`` that
    :func:`hf_seq.toolkit.data.hold_out_validation` moves into the validation split (:func:`hf_seq.toolkit.preprocessing.holdout_mask`);
    ``DataError`` when ``n`` is too few to keep training rows."""
    from hf_seq.toolkit.data import DataError

    if max(1, int(round(n * percentage / 100))) >= n:
        raise DataError(f"{source}: {n} training {unit} are too few to hold out {percentage:g}% for validation")
    return holdout_mask(n, percentage, seed)


def describe_sizes(data_args, sizes: dict[str, int], sources: dict[str, str], held_out, unit: str) -> str:
    """:func:`hf_seq.train_scripts.common.describe_data`'s line for splits known by their sizes (``{split: rows}``)
    and where they come from (``sources``; with a ``held_out`` mask the validation split is the training data's
    hold-out, described as :func:`hf_seq.toolkit.data.hold_out_validation` does)."""
    from hf_seq.train_scripts.common import describe_data

    descriptions = dict(sources)
    if held_out is not None:
        pct, seed = data_args.validation_split_percentage, data_args.split_seed
        descriptions["validation"] = f"{sources['train']} ({pct:g}% held out for validation, seed {seed})"
    splits = {s: SplitSize(sizes[s], descriptions[s]) for s in ("train", "validation", "test") if s in sizes}
    return describe_data(data_args, splits, unit=unit)


class SplitSize:
    """What :func:`hf_seq.train_scripts.common.describe_data` reads of a split (its length and where it came from),
    without loading it."""

    def __init__(self, rows: int, description: str) -> None:
        self.rows, self.info = rows, SimpleNamespace(description=description)

    def __len__(self) -> int:
        return self.rows


def shuffle_buffered(items: Iterable, size: int, rng: np.random.Generator) -> Iterator:
    """``items`` through a seeded shuffle buffer of ``size`` (0: in order): the buffer fills, then each new item takes
    a random place in it and the item there comes out; at the end the buffer comes out in a random order."""
    if not size:
        yield from items
        return
    buffer: list = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = int(rng.integers(len(buffer)))
        item, buffer[i] = buffer[i], item
        yield item
    for i in rng.permutation(len(buffer)):
        yield buffer[i]
