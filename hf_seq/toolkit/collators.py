"""Data collators that ``transformers`` does not ship.

* :class:`DataCollatorForBertPretraining` — BERT's pretraining batches: next-sentence pairs built from documents
  (``[CLS] A [SEP] B [SEP]`` with ``token_type_ids``; B is the true continuation of A half of the time and a segment
  of another document otherwise) and masked-LM masking (15% of the non-special tokens: 80% ``[MASK]``, 10% a random
  token, 10% unchanged). Use :func:`tokenize_documents` and :func:`bert_pretraining_anchors` to build its inputs.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "DataCollatorForBertPretraining",
    "LMWindowDataset",
    "StoredDocuments",
    "bert_pretraining_anchors",
    "bert_pretraining_anchors_from_lengths",
    "stream_slice",
    "tokenize_documents",
    "tokenize_documents_to_store",
]

IGNORE_INDEX = -100


# ---------------------------------------------------------------------------------------------------------------
# BERT pretraining: next-sentence pairs + masked-LM masking
# ---------------------------------------------------------------------------------------------------------------


def _flatten_sentences(document: Any) -> list[str]:
    """Sentences of a document given as a list of sentences or a list of paragraphs (lists of sentences)."""
    sentences: list[str] = []
    for item in document:
        if isinstance(item, str):
            sentences.append(item)
        else:
            sentences.extend(item)
    return [s for s in sentences if s.strip()]


def tokenize_documents(documents: Iterable[Any], tokenizer) -> list[list[list[int]]]:
    """Token ids (no special tokens) of every sentence of every document: ``docs → sentences → ids``.

    A document is a list of sentence strings or a list of paragraphs (lists of sentence strings), e.g. the
    ``paragraphs`` column of :func:`hf_seq.toolkit.data.load_brown_documents`. Empty sentences are dropped.
    """
    out = []
    for document in documents:
        sentences = _flatten_sentences(document)
        ids = tokenizer(sentences, add_special_tokens=False)["input_ids"] if sentences else []
        out.append([s for s in ids if s])
    return out


def bert_pretraining_anchors(documents: Sequence[Sequence[Sequence[int]]], max_length: int) -> dict[str, list[int]]:
    """Start positions of non-overlapping segments of about ``max_length - 3`` tokens, at least two sentences each.

    Returns columns ``doc_index`` and ``sentence_index`` (one row per future training pair), ready for
    ``datasets.Dataset.from_dict``. Each anchor has at least one following sentence in its document, so a true
    "next segment" always exists. For :class:`StoredDocuments` they are computed from the store's offsets
    (:func:`bert_pretraining_anchors_from_lengths`, numpy arrays).
    """
    if not isinstance(max_length, int) or max_length < 8:
        raise ValueError(f"`max_length` must be an integer >= 8, got {max_length!r}")
    if isinstance(documents, StoredDocuments):
        return bert_pretraining_anchors_from_lengths(documents.sentence_lengths(), documents.doc_offsets, max_length)
    budget = max_length - 3  # [CLS] A [SEP] B [SEP]
    docs, starts = [], []
    for d, doc in enumerate(documents):
        s = 0
        while s < len(doc) - 1:
            docs.append(d)
            starts.append(s)
            total, j = 0, s
            while j < len(doc) and (total < budget or j - s < 2):
                total += len(doc[j])
                j += 1
            s = j
    return {"doc_index": docs, "sentence_index": starts}


def bert_pretraining_anchors_from_lengths(
    sentence_lengths: np.ndarray, doc_offsets: np.ndarray, max_length: int
) -> dict[str, np.ndarray]:
    """:func:`bert_pretraining_anchors` from the sentences' token counts and each document's first sentence
    (``doc_offsets``, documents + 1 entries): the same anchors, as int64 numpy arrays."""
    if not isinstance(max_length, int) or max_length < 8:
        raise ValueError(f"`max_length` must be an integer >= 8, got {max_length!r}")
    budget = max_length - 3
    lengths = np.asarray(sentence_lengths, dtype=np.int64)
    offsets = np.asarray(doc_offsets, dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(lengths)])  # tokens before sentence i
    # the segment from sentence s ends at the first j >= s + 2 (two sentences at least) whose sentences s..j-1 hold
    # >= budget tokens, or at its document's end: the next anchor; computed for every sentence at once
    doc_of = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    ends = offsets[1:][doc_of]
    following = np.searchsorted(cumulative, cumulative[:-1] + budget, side="left")
    following = np.minimum(ends, np.maximum(following, np.arange(len(lengths)) + 2))
    # follow every document's chain of anchors from its first sentence, all documents in step
    docs, starts = [], []
    current, last = offsets[:-1].copy(), offsets[1:] - 1
    active = np.flatnonzero(current < last)
    while len(active):
        docs.append(active)
        starts.append(current[active] - offsets[active])
        current[active] = following[current[active]]
        active = active[current[active] < last[active]]
    docs_array = np.concatenate(docs) if docs else np.zeros(0, np.int64)
    starts_array = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    order = np.lexsort((starts_array, docs_array))  # by document, then sentence: the order of the list version
    return {
        "doc_index": docs_array[order].astype(np.int64),
        "sentence_index": starts_array[order].astype(np.int64),
    }


class StoredDocument(Sequence):
    """One document of :class:`StoredDocuments`: its sentences' token ids (lists of ints), read from the store."""

    def __init__(self, store, start: int, stop: int) -> None:
        self.store, self.start, self.stop = store, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, j):
        if isinstance(j, slice):
            return [self[i] for i in range(*j.indices(len(self)))]
        if not -len(self) <= j < len(self):
            raise IndexError(f"sentence {j} out of range for a document of {len(self)} sentences")
        return self.store[self.start + j % len(self)].tolist()


class StoredDocuments(Sequence):
    """Documents whose sentences are the rows of a :class:`hf_seq.toolkit.preprocessing.TokenStore`: document ``d`` is rows
    ``doc_offsets[d]:doc_offsets[d + 1]``. Reads like the ``docs → sentences → ids`` lists of
    :func:`tokenize_documents` (``len``, ``docs[d][j]``), nothing held in memory but the offsets."""

    def __init__(self, store, doc_offsets) -> None:
        self.store = store
        self.doc_offsets = np.asarray(doc_offsets, dtype=np.int64)
        if self.doc_offsets[0] != 0 or self.doc_offsets[-1] != len(store) or np.any(np.diff(self.doc_offsets) < 0):
            raise ValueError("doc_offsets must rise from 0 to the number of sentences in the store")

    def __len__(self) -> int:
        return len(self.doc_offsets) - 1

    def __getitem__(self, d: int) -> StoredDocument:
        if not -len(self) <= d < len(self):
            raise IndexError(f"document {d} out of range for {len(self)} documents")
        d %= len(self)
        return StoredDocument(self.store, int(self.doc_offsets[d]), int(self.doc_offsets[d + 1]))

    def sentence_lengths(self) -> np.ndarray:
        return self.store.lengths()


def tokenize_documents_to_store(documents: Iterable[Any], tokenizer, folder, batch_documents: int = 1000):
    """:func:`tokenize_documents` into a :class:`hf_seq.toolkit.preprocessing.TokenStore` in ``folder`` (sentences as rows,
    empty sentences dropped as there), written in chunks: a :class:`StoredDocuments`."""
    from .preprocessing import TokenStoreWriter, make_encoder

    encoder = make_encoder(tokenizer)
    writer = TokenStoreWriter(folder, max(len(tokenizer), tokenizer.backend_tokenizer.get_vocab_size()))
    doc_sizes: list[np.ndarray] = []
    batch: list[list[str]] = []

    def flush() -> None:
        sentences = [s for doc in batch for s in doc]
        flat, lengths = encoder.encode(sentences) if sentences else (np.zeros(0, np.int64), np.zeros(0, np.int64))
        keep = lengths > 0  # a sentence that encodes to nothing is dropped
        owner = np.repeat(np.arange(len(batch)), [len(doc) for doc in batch])
        writer.add_flat(flat, lengths[keep])
        doc_sizes.append(np.bincount(owner[keep], minlength=len(batch)))
        batch.clear()

    for document in documents:
        batch.append(_flatten_sentences(document))
        if len(batch) >= batch_documents:
            flush()
    if batch:
        flush()
    store = writer.close()
    sizes = np.concatenate(doc_sizes) if doc_sizes else np.zeros(0, np.int64)
    return StoredDocuments(store, np.concatenate([[0], np.cumsum(sizes)]))


class DataCollatorForBertPretraining:
    """Build BERT pretraining batches (next-sentence pairs + masked-LM masking) from document anchors.

    Each feature is ``{"doc_index": d, "sentence_index": s}`` (see :func:`bert_pretraining_anchors`), optionally with
    ``"example_seed"``: then that example's pair and masks come from its own seed, so an evaluation set is identical
    at every evaluation; without it they come from the collator's own seeded random streams (a fresh pair and
    masking every epoch — "dynamic" masking — reproducible for a given ``seed`` with ``dataloader_num_workers=0``).

    For the anchor the collator takes consecutive sentences from ``s`` until about ``max_length - 3`` tokens (a
    shorter random target with probability ``short_seq_probability``), splits them at a random sentence boundary
    into A and B, and with probability ``nsp_probability`` replaces B by consecutive sentences starting at a random
    sentence of another document (``next_sentence_label`` 1; 0 = B is the true continuation, the ``transformers``
    convention). The pair is truncated to ``max_length`` (the longer segment loses a token at a random end, as in
    the original BERT data pipeline) and laid out as ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0…0 1…1.

    Masked LM: every non-special token is selected with probability ``mlm_probability``; a selected token becomes
    ``[MASK]`` with probability ``mask_replace_prob``, a random non-special token with ``random_replace_prob``, and
    stays unchanged otherwise. ``labels`` holds the original id at selected positions and -100 elsewhere; special
    tokens and padding are never selected.

    Returns ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` ``(B, L)`` (padded to the longest
    pair, or a multiple of ``pad_to_multiple_of``) and ``next_sentence_label`` ``(B,)``. Use with
    ``TrainingArguments(remove_unused_columns=False)`` so that ``Trainer`` keeps the anchor columns.
    """

    def __init__(
        self,
        tokenizer,
        documents: Sequence[Sequence[Sequence[int]]],
        max_length: int = 128,
        mlm_probability: float = 0.15,
        mask_replace_prob: float = 0.8,
        random_replace_prob: float = 0.1,
        nsp_probability: float = 0.5,
        short_seq_probability: float = 0.1,
        pad_to_multiple_of: int | None = None,
        seed: int = 0,
    ) -> None:
        if not isinstance(max_length, int) or max_length < 8:
            raise ValueError(f"`max_length` must be an integer >= 8, got {max_length!r}")
        for name, value in (
            ("mlm_probability", mlm_probability),
            ("mask_replace_prob", mask_replace_prob),
            ("random_replace_prob", random_replace_prob),
            ("nsp_probability", nsp_probability),
            ("short_seq_probability", short_seq_probability),
        ):
            if not 0.0 <= float(value) <= 1.0:
                raise ValueError(f"`{name}` must be in [0, 1], got {value!r}")
        if mask_replace_prob + random_replace_prob > 1.0:
            raise ValueError(
                f"`mask_replace_prob` + `random_replace_prob` must be <= 1, got {mask_replace_prob} + "
                f"{random_replace_prob}"
            )
        if len(documents) < 2:
            raise ValueError("`documents` must hold at least two documents (random next segments need another one)")
        for name in ("cls_token_id", "sep_token_id", "mask_token_id", "pad_token_id"):
            if getattr(tokenizer, name, None) is None:
                raise ValueError(f"the tokenizer must define `{name}` for BERT pretraining")
        self.tokenizer = tokenizer
        self.documents = documents
        self.max_length = max_length
        self.mlm_probability = float(mlm_probability)
        self.mask_replace_prob = float(mask_replace_prob)
        self.random_replace_prob = float(random_replace_prob)
        self.nsp_probability = float(nsp_probability)
        self.short_seq_probability = float(short_seq_probability)
        self.pad_to_multiple_of = pad_to_multiple_of
        self.seed = seed
        self.special_ids = sorted(set(tokenizer.all_special_ids))
        vocab_size = len(tokenizer)
        allowed = torch.ones(vocab_size, dtype=torch.bool)
        allowed[self.special_ids] = False
        self.random_token_ids = torch.nonzero(allowed).squeeze(1)  # (V - n_special,) ids a random replacement may take
        self._rng = random.Random(seed)
        self._generator = torch.Generator().manual_seed(seed)

    # --- next-sentence pairs -----------------------------------------------------------------------------------
    def _segment(self, doc: Sequence[Sequence[int]], start: int, target: int, min_sentences: int) -> list[list[int]]:
        """Consecutive sentences from ``start`` until ``target`` tokens (and ``min_sentences``) or the document end."""
        chunk, total, j = [], 0, start
        while j < len(doc) and (total < target or len(chunk) < min_sentences):
            chunk.append(list(doc[j]))
            total += len(doc[j])
            j += 1
        return chunk

    def build_pair(
        self, doc_index: int, sentence_index: int, rng: random.Random, documents: Sequence | None = None
    ) -> tuple[list[int], list[int], int]:
        """Token ids of segments A and B (no special tokens) and the next-sentence label (0 next, 1 random).

        ``documents`` replaces the collator's documents for this pair (a stream's buffer of recent documents)."""
        documents = self.documents if documents is None else documents
        doc = documents[doc_index]
        max_tokens = self.max_length - 3
        target = max_tokens
        if rng.random() < self.short_seq_probability:
            target = rng.randint(2, max_tokens)
        is_random = rng.random() < self.nsp_probability
        chunk = self._segment(doc, sentence_index, target, min_sentences=2)
        if not chunk:
            raise ValueError(
                f"anchor (doc_index={doc_index}, sentence_index={sentence_index}) is past the document end"
            )
        split = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
        a = [t for s in chunk[:split] for t in s]
        if is_random or len(chunk) < 2:
            other = rng.randrange(len(documents) - 1)
            other = other + 1 if other >= doc_index else other  # any document but this one
            other_doc = documents[other]
            start = rng.randrange(len(other_doc)) if len(other_doc) else 0
            b = [t for s in self._segment(other_doc, start, max(1, target - len(a)), 1) for t in s]
            label = 1
        else:
            b = [t for s in chunk[split:] for t in s]
            label = 0
        while len(a) + len(b) > max_tokens:  # truncate the longer segment at a random end
            longer = a if len(a) > len(b) else b
            del longer[0 if rng.random() < 0.5 else -1]
        return a, b, label

    # --- masked LM ---------------------------------------------------------------------------------------------
    def mask_tokens(self, input_ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked-LM corruption of ``input_ids`` (any shape); returns ``(corrupted ids, labels)``."""
        input_ids = input_ids.clone()
        special = torch.isin(input_ids, torch.tensor(self.special_ids))
        probs = torch.full(input_ids.shape, self.mlm_probability)
        probs.masked_fill_(special, 0.0)
        selected = torch.bernoulli(probs, generator=generator).bool()
        labels = torch.where(selected, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
        draw = torch.rand(input_ids.shape, generator=generator)  # one draw decides mask / random / keep
        to_mask = selected & (draw < self.mask_replace_prob)
        to_random = (
            selected & (draw >= self.mask_replace_prob) & (draw < self.mask_replace_prob + self.random_replace_prob)
        )
        input_ids[to_mask] = self.tokenizer.mask_token_id
        picks = torch.randint(len(self.random_token_ids), input_ids.shape, generator=generator)
        input_ids[to_random] = self.random_token_ids[picks][to_random]
        return input_ids, labels

    # --- batch -------------------------------------------------------------------------------------------------
    def encode_pair(self, a: list[int], b: list[int], generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """``[CLS] A [SEP] B [SEP]`` masked: ``(input_ids, token_type_ids, labels)``, each ``(L,)``."""
        cls_id, sep_id = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        ids = torch.tensor([cls_id, *a, sep_id, *b, sep_id])  # (L_i,)
        types = torch.tensor([0] * (len(a) + 2) + [1] * (len(b) + 1))
        masked, labels = self.mask_tokens(ids, generator)
        return masked, types, labels

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows = []
        for feature in features:
            seed = feature.get("example_seed")
            rng = self._rng if seed is None else random.Random(int(seed))
            generator = self._generator if seed is None else torch.Generator().manual_seed(int(seed))
            a, b, label = self.build_pair(int(feature["doc_index"]), int(feature["sentence_index"]), rng)
            rows.append((*self.encode_pair(a, b, generator), label))
        return self.pad_rows(rows)

    def pad_rows(self, rows: Sequence[tuple]) -> dict[str, torch.Tensor]:
        """The batch of ``(input_ids, token_type_ids, labels, next_sentence_label)`` rows, padded."""
        pad_id = self.tokenizer.pad_token_id
        length = max(len(r[0]) for r in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {
            "input_ids": torch.full((len(rows), length), pad_id, dtype=torch.long),
            "token_type_ids": torch.zeros((len(rows), length), dtype=torch.long),
            "attention_mask": torch.zeros((len(rows), length), dtype=torch.long),
            "labels": torch.full((len(rows), length), IGNORE_INDEX, dtype=torch.long),
        }
        for i, (ids, types, labels, _) in enumerate(rows):
            n = len(ids)
            batch["input_ids"][i, :n] = ids
            batch["token_type_ids"][i, :n] = types
            batch["attention_mask"][i, :n] = 1
            batch["labels"][i, :n] = labels
        batch["next_sentence_label"] = torch.tensor([int(r[3]) for r in rows], dtype=torch.long)
        return batch


# ---------------------------------------------------------------------------------------------------------------
# Language-model windows (issue 3, RNNForCausalLM): the notes' segment / stride cut of a long token stream
# ---------------------------------------------------------------------------------------------------------------


class LMWindowDataset(torch.utils.data.Dataset):
    """The notes' char-generator examples: a long token stream cut into segments of ``segment_length`` tokens every
    ``stride`` tokens, each with the token that follows it.

    Example ``i`` is ``stream[i*stride : i*stride + segment_length + 1]`` as both ``input_ids`` and ``labels`` (the
    model shifts the labels, so the loss trains every position of the segment to predict its next token, not only
    the notes' single (segment, next char) pair). ``stride == segment_length`` covers every transition exactly once;
    a smaller stride (the notes use 3 with 60-char segments) gives overlapping windows. The stream may be a tensor,
    a list or any 1-D numpy array — a memory-mapped :class:`hf_seq.toolkit.preprocessing.TokenStore` ``flat`` stream is kept
    as it is (not copied): each window is read when it is asked for and returned as int64.
    """

    def __init__(self, token_ids: Sequence[int] | torch.Tensor, segment_length: int, stride: int | None = None) -> None:
        stride = segment_length if stride is None else stride
        for name, value in (("segment_length", segment_length), ("stride", stride)):
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
        if isinstance(token_ids, np.ndarray):  # np.memmap too: windows are sliced out on demand
            if token_ids.ndim != 1:
                raise ValueError(f"the token stream must be 1-D, got shape {token_ids.shape}")
            self.tokens = token_ids
        else:
            self.tokens = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)  # (N,)
        if len(self.tokens) < segment_length + 1:
            raise ValueError(
                f"the token stream has {len(self.tokens)} tokens, fewer than segment_length + 1 = {segment_length + 1}"
            )
        self.segment_length = segment_length
        self.stride = stride

    def __len__(self) -> int:
        return (len(self.tokens) - self.segment_length - 1) // self.stride + 1

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"window {index} out of range for {len(self)} windows")
        start = (index % len(self)) * self.stride
        window = stream_slice(self.tokens, start, start + self.segment_length + 1)  # (L+1,)
        return {"input_ids": window, "labels": window}


def stream_slice(tokens, start: int, stop: int) -> torch.Tensor:
    """``tokens[start:stop]`` as an int64 tensor: a view of a tensor stream, a copy of that slice of a numpy one."""
    if isinstance(tokens, torch.Tensor):
        return tokens[start:stop]
    return torch.from_numpy(np.asarray(tokens[start:stop], dtype=np.int64))
