"""Training samplers that ``transformers`` does not ship.

* :class:`LengthBucketSampler` — batches of examples of similar length, in random order: each epoch the whole
  training set is shuffled, sorted by length (ties stay in random order), cut into batches, and the batches are
  shuffled (the batching of fairseq and OpenNMT-py). Little padding, as with ``Trainer``'s
  ``train_sampling_strategy="group_by_length"``, but no order within an epoch: ``LengthGroupedSampler`` sorts
  mega-batches of 50 batches by decreasing length and yields each in that order, so that every 50 steps the batches
  sweep from the longest sentences to the shortest. The train scripts select it with
  ``--train_sampling_strategy length_buckets``; with a plain ``Trainer``, return it from ``_get_train_sampler``::

      class BucketTrainer(Seq2SeqTrainer):
          def _get_train_sampler(self, train_dataset=None):
              dataset = train_dataset if train_dataset is not None else self.train_dataset
              return LengthBucketSampler.from_dataset(dataset, self._train_batch_size, seed=self.args.seed)

* :class:`PermutationSampler` — ``Trainer``'s default shuffle (``accelerate``'s seeded ``randperm``, epoch by epoch)
  without its Python list of every index: the train scripts' ``Trainer`` uses it for the language model's windows
  (millions of them for a corpus of a few GB).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler

__all__ = ["LengthBucketSampler", "PermutationSampler", "example_lengths"]

_NO_ATTRIBUTE = object()


def _arrow_column(dataset, name: str):
    """Column ``name`` of a ``datasets.Dataset`` as a pyarrow (chunked) array in row order (an indices mapping — a
    ``select`` / ``shuffle`` / held-out split — applied), without converting it to Python objects. Without an indices
    mapping the column is the (memory-mapped) table's own: nothing is copied, and reading its list offsets touches
    only their pages (the formatted ``dataset[:]`` of a 10 M-row cache costs ~0.3 GB of anonymous memory and maps most
    of the file). ``_indices`` is where ``datasets`` keeps the mapping; where that attribute is absent the formatted
    path runs."""
    import pyarrow as pa

    if getattr(dataset, "_indices", _NO_ATTRIBUTE) is None and dataset.data.num_rows == len(dataset):
        return dataset.data.column(name)
    table = dataset.with_format("arrow", columns=[name])[:]
    return table.column(name) if isinstance(table, pa.Table) else table


def _to_numpy(array) -> np.ndarray:
    """A (chunked) pyarrow array of numbers as one numpy array."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        parts = [chunk.to_numpy(zero_copy_only=False) for chunk in array.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return array.to_numpy(zero_copy_only=False)


def _chunk_groups(array, mapped_files, release_every: int = 256):
    """The chunks of a (chunked) pyarrow array, ``release_every`` at a time (as one chunked array each), this
    process's pages of ``mapped_files`` released (:func:`hf_seq.toolkit.preprocessing.release_mapped_pages`) after each
    group. Reading a list column's offsets from a memory-mapped Arrow file faults in the pages around them (the
    kernel maps neighbouring pages too): a pass over a 10 M-row, 1.4 GB cache in groups keeps its resident pages
    bounded instead of mapping most of the file."""
    import pyarrow as pa

    from .preprocessing import release_mapped_pages

    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    for start in range(0, len(chunks), release_every):
        yield pa.chunked_array(chunks[start : start + release_every], type=array.type)
        if mapped_files:
            release_mapped_pages(mapped_files)


def _list_lengths(array, mapped_files, release_every: int = 256, at_least: np.ndarray | None = None) -> np.ndarray:
    """The list lengths of a (chunked) pyarrow list array as one numpy array (``int32``; ``int64`` for large
    lists), read :func:`_chunk_groups` at a time (the pages of ``mapped_files`` released after each group) into
    one array; ``at_least``: lengths of the same rows, raised in place to these where they are shorter (the longer
    of two columns without a second array of all the rows)."""
    import pyarrow.compute as pc

    out = at_least
    start = 0
    for group in _chunk_groups(array, mapped_files, release_every):
        part = _to_numpy(pc.fill_null(pc.list_value_length(group), 0))
        if out is None:
            out = np.empty(len(array), dtype=part.dtype)
        if at_least is None:
            out[start : start + len(part)] = part
        else:
            np.maximum(out[start : start + len(part)], part, out=out[start : start + len(part)])
        start += len(part)
    return out if out is not None else np.zeros(0, dtype=np.int32)


def total_list_length(dataset, column: str) -> int:
    """The number of items in list column ``column`` of a ``datasets.Dataset``, summed from the Arrow offsets (no
    Python lists), :func:`_chunk_groups` at a time: the pages of the dataset's cache files it maps are released as
    it goes."""
    import pyarrow.compute as pc

    files = [entry["filename"] for entry in getattr(dataset, "cache_files", None) or []]
    return sum(
        int(pc.sum(pc.list_value_length(group)).as_py() or 0)
        for group in _chunk_groups(_arrow_column(dataset, column), files)
    )


def _is_list_type(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def example_lengths(dataset, length_column_name: str = "length", model_input_name: str = "input_ids") -> np.ndarray:
    """One length per example, as a 1-D ``int64`` numpy array: the ``length_column_name`` column when the dataset has
    one, else the longer of ``len(example[model_input_name])`` and ``len(example["labels"])`` (labels count only when
    they are a sequence: the target of a seq2seq pair, the tags of a tagger; a class label does not).

    ``dataset`` is a ``datasets.Dataset`` — its columns are read as Arrow arrays (the list lengths come from the
    Arrow offsets: a memory-mapped, cached dataset of millions of rows is measured without building Python lists) —
    or any map-style dataset of dicts (read example by example)."""
    return _example_lengths(dataset, length_column_name, model_input_name).astype(np.int64, copy=False)


def _example_lengths(dataset, length_column_name: str, model_input_name: str) -> np.ndarray:
    """:func:`example_lengths` in the integer type they are read in (``int32`` list lengths of an Arrow column: half
    the bytes of ``int64``, 40 MB for 10 M examples)."""
    columns = getattr(dataset, "column_names", None)
    if columns is not None and hasattr(dataset, "with_format"):
        if length_column_name in columns:
            lengths = _arrow_column(dataset, length_column_name)
            if lengths.null_count:
                raise ValueError(f"the {length_column_name!r} column has {lengths.null_count} empty value(s)")
            return _to_numpy(lengths)
        if model_input_name not in columns:
            raise ValueError(
                f"length buckets need a {length_column_name!r} column or a {model_input_name!r} column to measure "
                f"the examples; the dataset's columns are {columns}"
            )
        files = [entry["filename"] for entry in getattr(dataset, "cache_files", None) or []]
        lengths = _list_lengths(_arrow_column(dataset, model_input_name), files)  # int32 (int64 for large lists)
        if "labels" in columns:
            labels = _arrow_column(dataset, "labels")
            if _is_list_type(labels.type):
                lengths = _list_lengths(labels, files, at_least=lengths)  # the longer of the two, in place
        return lengths
    lengths = []
    for i in range(len(dataset)):
        example = dataset[i]
        if not isinstance(example, dict) or (length_column_name not in example and model_input_name not in example):
            raise ValueError(
                f"length buckets need examples that are dicts with a {length_column_name!r} or {model_input_name!r} "
                f"key; example {i} is {type(example).__name__}"
                + (f" with keys {sorted(example)}" if isinstance(example, dict) else "")
            )
        if length_column_name in example:
            lengths.append(int(example[length_column_name]))
            continue
        n = len(example[model_input_name])
        labels = example.get("labels")
        if labels is not None and not isinstance(labels, (int, float)) and getattr(labels, "ndim", 1) > 0:
            n = max(n, len(labels))
        lengths.append(n)
    return np.asarray(lengths, dtype=np.int64)


def _stable_sort_by(items: np.ndarray, keys: np.ndarray, block: int = 1 << 20, max_distinct: int = 1 << 16):
    """``items[np.argsort(keys, kind="stable")]`` without an index array of all the items: ``argsort`` gives
    ``int64`` indices and its radix sort another buffer of them, 160 MB for 10 M examples beside the ``int32``
    items. Keys within ``max_distinct`` consecutive values (sentence lengths) are counted, then each ``block`` of
    items is sorted on its own (stable) and put in its place after the same keys of the blocks before it: the same
    stable order, with index arrays of one block at a time."""
    n = len(keys)
    if n <= block:
        return items[np.argsort(keys, kind="stable")]
    low, high = int(keys.min()), int(keys.max())
    span = high - low + 1
    if span > max_distinct:
        return items[np.argsort(keys, kind="stable")]
    counts = np.zeros(span, dtype=np.int64)
    for start in range(0, n, block):
        counts += np.bincount(keys[start : start + block].astype(np.int64) - low, minlength=span)
    next_place = np.cumsum(counts) - counts  # where the next item of each key goes
    out = np.empty_like(items)
    for start in range(0, n, block):
        part = keys[start : start + block]
        order = np.argsort(part, kind="stable")
        sorted_keys = part[order].astype(np.int64) - low
        in_block = np.bincount(sorted_keys, minlength=span)
        rank = np.arange(len(order)) - (np.cumsum(in_block) - in_block)[sorted_keys]  # among this block's equal keys
        out[next_place[sorted_keys] + rank] = items[start : start + block][order]
        next_place += in_block
    return out


class LengthBucketSampler(Sampler[int]):
    """Indices whose consecutive slices of ``batch_size`` are batches of similar lengths, the batches in random order.

    For epoch ``e`` (:meth:`set_epoch`, which ``Trainer`` calls) the order depends only on ``(seed, e)``: every process
    of a data-parallel run yields the same stream (the data loader hands out its batches in turn), and a resumed run
    sees the same batches as an uninterrupted one. The incomplete batch, if any, comes last, so that every other slice
    is a whole bucket; ``drop_last=True`` leaves it out.

    Args:
        lengths: one length per example (e.g. ``max(source tokens, target tokens)``; :func:`example_lengths`): a
            1-D integer numpy array, a tensor or a sequence of ints (kept as ``int16`` when under 32,768).
        batch_size: examples per batch — the batch size of the data loader that reads the sampler.
        seed: seed of the per-epoch shuffles.
        drop_last: leave out the incomplete batch.
    """

    def __init__(
        self, lengths: Sequence[int] | np.ndarray, batch_size: int, seed: int = 0, drop_last: bool = False
    ) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ValueError(f"`seed` must be an int, got {seed!r}")
        if len(lengths) == 0:
            raise ValueError("`lengths` must not be empty")
        if isinstance(lengths, torch.Tensor):
            lengths = lengths.numpy(force=True)
        array = np.asarray(lengths) if isinstance(lengths, np.ndarray) else np.asarray(list(lengths))
        if array.ndim != 1 or array.dtype.kind not in "iub" or bool((array < 0).any()):
            raise ValueError("`lengths` must be a flat sequence of non-negative ints (one per example)")
        # the smallest integer type that holds them: 2 bytes an example for sentence lengths (10 M pairs: 20 MB)
        self.lengths = torch.from_numpy(np.array(array, dtype=np.int16 if array.max() < 2**15 else np.int64))
        self.batch_size = batch_size
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.epoch = 0

    @classmethod
    def from_dataset(
        cls,
        dataset,
        batch_size: int,
        seed: int = 0,
        drop_last: bool = False,
        length_column_name: str = "length",
        model_input_name: str = "input_ids",
    ) -> LengthBucketSampler:
        """A sampler over ``dataset`` with the lengths of :func:`example_lengths`."""
        return cls(_example_lengths(dataset, length_column_name, model_input_name), batch_size, seed, drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n = len(self.lengths)
        return n - n % self.batch_size if self.drop_last else n

    def _order(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """(the indices sorted by length, ties in random order; the order of the full batches; whether an
        incomplete batch follows them) of this epoch. One numpy array per epoch, no tensor per batch: 10 M examples
        take 40 MB, not the 0.5 GB of 300,000 tensors."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        n = len(self.lengths)
        # int32 when it holds them (half the bytes, no int64 copy first): ``randperm`` draws the same permutation
        # whatever its dtype, and leaves the generator in the same state
        shuffled = torch.randperm(n, generator=generator, dtype=torch.int32 if n < 2**31 else torch.int64).numpy()
        # a stable sort of the lengths: ties keep their shuffled, random order
        by_length = _stable_sort_by(shuffled, self.lengths.numpy()[shuffled])
        del shuffled
        full, rest = divmod(len(by_length), self.batch_size)
        order = torch.randperm(full, generator=generator)  # the full batches; an incomplete one comes last
        return by_length, order.numpy(), rest > 0

    def batches(self) -> list[torch.Tensor]:
        """This epoch's batches (tensors of indices), in the order they are yielded."""
        by_length, order, incomplete = self._order()
        size = self.batch_size
        batches = [torch.from_numpy(by_length[i * size : (i + 1) * size].astype(np.int64)) for i in order]
        if incomplete and not self.drop_last:
            batches.append(torch.from_numpy(by_length[len(order) * size :].astype(np.int64)))
        return batches

    def __iter__(self) -> Iterator[int]:
        by_length, order, incomplete = self._order()
        size = self.batch_size
        for i in order:
            yield from by_length[i * size : (i + 1) * size].tolist()
        if incomplete and not self.drop_last:
            yield from by_length[len(order) * size :].tolist()


class PermutationSampler(Sampler[int]):
    """The order of ``Trainer``'s default shuffle, without a Python list of every index.

    ``Trainer`` gives a ``RandomSampler``, which ``accelerate`` replaces by its ``SeedableRandomSampler``: epoch
    ``e`` is ``torch.randperm(n)`` from a generator seeded ``seed + e`` (``seed``: ``data_seed``, else
    ``torch.random.initial_seed()``), handed out as ``.tolist()`` — ~40 bytes an index (8 M language-model windows of
    a 2 GB corpus: 0.3 GB). This sampler yields the same permutation from its int32 tensor, a block at a time
    (4 bytes an index), and counts epochs the same way (``set_epoch``, and one more after each full pass)."""

    def __init__(self, data_source: Sequence, seed: int, block: int = 1 << 16) -> None:
        self.data_source, self.initial_seed, self.block = data_source, int(seed), int(block)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.data_source)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator()
        generator.manual_seed(self.initial_seed + self.epoch)
        n = len(self.data_source)  # int32 when it holds them: the same permutation in half the bytes
        order = torch.randperm(n, generator=generator, dtype=torch.int32 if n < 2**31 else torch.int64)
        for start in range(0, len(order), self.block):
            yield from order[start : start + self.block].tolist()
        self.set_epoch(self.epoch + 1)
