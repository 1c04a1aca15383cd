"""Pretrained word vectors (GloVe, word2vec, fastText) in a model's input embedding, aligned to a tokenizer.

The notes' recipe for a small labelled set: take an embedding trained on a much larger corpus, keep it (frozen) and
train only the layers above. :func:`load_word_vectors` reads the vectors; :func:`init_embeddings_from_vectors` writes
them into the rows of ``model.get_input_embeddings()`` that belong to the tokenizer's words and reports the coverage::

    import hf_seq
    vectors = hf_seq.load_word_vectors("data/pretrained/glove-6b-50d")   # `make pretrained`: GloVe 6B, 50-d
    coverage = hf_seq.init_embeddings_from_vectors(model, tokenizer, vectors, freeze=True)
    print(coverage)   # glove_6B_50d_emb.npy: 19,402 of 19,998 words (97.0 %) have a vector ...

Formats (:func:`load_word_vectors`):

* text, one ``word v1 ... vd`` line per word, space-separated (GloVe's ``glove.6B.50d.txt``; word2vec/fastText ``.vec``
  files, whose first line ``"<count> <dim>"`` is skipped); ``.gz`` compressed too;
* a ``.npy`` matrix (``(N, d)`` floats) with a word list in row order: a ``.parquet`` file (one string column, or
  one named ``word``/``token``/``text``) or a text file with one word a line;
* a folder holding one ``.npy`` and one word list (``.parquet``, ``.txt``), or one text vectors file. A folder with a
  ``SHA256SUMS`` (what ``make pretrained`` writes) is checked first, so a damaged file is named.

Alignment (:func:`embedding_matrix`): each vocabulary word takes the vector of the same spelling, else (with
``lowercase_fallback``) of its lower-cased spelling (GloVe 6B is lower-cased). Special tokens are not looked up. The
padding row is zero. Rows without a vector are initialised by ``missing``:

* ``"normal"`` (default): drawn from a normal distribution with the per-dimension mean and standard deviation of the
  file's vectors, so they have the scale of the others (the models' own initialisation, std 0.02, is ~20 times smaller
  than GloVe's); seeded by ``seed``, so a frozen table is reproducible;
* ``"zeros"``; ``"mean"``: the mean vector of the file; ``"model"``: keep the model's own initialisation.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

MISSING_INITS = ("normal", "zeros", "mean", "model")
TEXT_SUFFIXES = (".txt", ".vec", ".txt.gz", ".vec.gz")
_WORD_LIST_SUFFIXES = (".parquet", ".txt", ".vocab", ".words")


class WordVectorError(ValueError):
    """A word-vector file that cannot be read, or vectors that do not fit the model."""


@dataclass
class WordVectors:
    """``words[i]`` has the vector ``vectors[i]`` (float32, ``(len(words), dim)``); ``source`` names the file."""

    words: list[str]
    vectors: np.ndarray
    source: str
    index: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.words) != self.vectors.shape[0]:
            raise WordVectorError(
                f"{self.source}: {len(self.words)} words for a vectors array of shape {tuple(self.vectors.shape)}"
            )
        self.index = {}
        for row, word in enumerate(self.words):
            self.index.setdefault(word, row)  # a repeated word keeps its first vector

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self.index[word]]


# ----------------------------------------------------------------------------------------------------------
# reading
# ----------------------------------------------------------------------------------------------------------
def load_word_vectors(
    path: str | os.PathLike, words: str | os.PathLike | Iterable[str] | None = None, keep: Iterable[str] | None = None
) -> WordVectors:
    """Read word vectors from a text file, a ``.npy`` + word list, or a folder holding either (see the module doc).

    Args:
        path: the vectors file or folder.
        words: the word list of a ``.npy`` file (a path or the words themselves); found in the folder otherwise.
        keep: read only these words (a text file of millions of vectors then needs little memory); ``None``: all.

    Raises:
        WordVectorError: naming the file and what is wrong with it (missing, damaged, lines of different lengths,
        values that are not numbers or not finite, a word list of another length than the matrix).
    """
    path = Path(path)
    if not path.exists():
        raise WordVectorError(
            f"word vectors {path} do not exist (GloVe 6B: `hf-seq-data fetch glove-6b-50d`; `make pretrained` in a "
            "clone)"
        )
    if path.is_dir():
        _check_manifest(path)
        path, words = _find_in_folder(path, words)
    elif (path.parent / "SHA256SUMS").is_file():
        _check_manifest(path.parent)
    keep = None if keep is None else set(keep)
    if path.suffix == ".npy":
        if words is None:
            raise WordVectorError(
                f"{path} holds only the vectors: pass its word list (words=, `pretrained_embeddings_words`: a .parquet "
                "with one string column or a text file with one word a line)"
            )
        vocab = _read_word_list(words) if isinstance(words, (str, os.PathLike)) else [str(w) for w in words]
        vectors = _read_npy(path)
        source = str(path)
        if len(vocab) != vectors.shape[0]:
            raise WordVectorError(
                f"{path} has {vectors.shape[0]} vectors but its word list {words if isinstance(words, (str, os.PathLike)) else '(words=)'} "
                f"has {len(vocab)} words"
            )
        if keep is not None:
            rows = [i for i, w in enumerate(vocab) if w in keep]
            vocab, vectors = [vocab[i] for i in rows], vectors[rows]
        vectors = np.array(vectors, dtype=np.float32)  # read into memory (the file is mapped), writable
        _check_finite(vectors, source)
        return WordVectors(vocab, vectors, source)
    if path.name.endswith(TEXT_SUFFIXES):
        return _read_text(path, keep)
    raise WordVectorError(
        f"{path}: not a word-vector file this reads (text {', '.join(TEXT_SUFFIXES)}; .npy with a word list; a folder)"
    )


def _check_manifest(folder: Path) -> None:
    from .checksums import MANIFEST, verify

    if not (folder / MANIFEST).is_file():
        return
    problems = verify(folder)
    if problems:
        raise WordVectorError(
            f"word vectors in {folder} do not match their {MANIFEST}: {'; '.join(problems)} (reinstall: "
            "`hf-seq-data fetch glove-6b-50d`; `make pretrained` in a clone)"
        )


def _find_in_folder(folder: Path, words):
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    arrays = [p for p in files if p.suffix == ".npy"]
    if len(arrays) == 1:
        if words is None:
            lists = [p for p in files if p.suffix in _WORD_LIST_SUFFIXES]
            if len(lists) != 1:
                raise WordVectorError(
                    f"{folder} holds {arrays[0].name} but {len(lists)} word lists ({[p.name for p in lists]}); "
                    "pass the one in row order (words=, `pretrained_embeddings_words`)"
                )
            words = lists[0]
        return arrays[0], words
    texts = [p for p in files if p.name.endswith(TEXT_SUFFIXES)]
    if not arrays and len(texts) == 1:
        return texts[0], words
    raise WordVectorError(
        f"{folder} must hold one .npy matrix (with its word list) or one text vectors file; it has "
        f"{[p.name for p in arrays + texts] or 'neither'}: name the file"
    )


def _read_npy(path: Path) -> np.ndarray:
    try:
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise WordVectorError(f"{path} is not a readable .npy file (damaged or truncated?): {error}") from error
    if vectors.ndim != 2 or not np.issubdtype(vectors.dtype, np.floating):
        raise WordVectorError(f"{path} must hold a 2-D float matrix (words × dim), got {vectors.dtype} {vectors.shape}")
    return vectors


def _read_word_list(path: str | os.PathLike) -> list[str]:
    path = Path(path)
    if not path.is_file():
        raise WordVectorError(f"word list {path} does not exist")
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as error:
            raise WordVectorError(f"{path} is not a readable parquet file (damaged?): {error}") from error
        strings = [name for name, kind in zip(table.column_names, table.schema.types) if pa.types.is_string(kind)]
        named = [name for name in strings if name.lower() in ("word", "words", "token", "tokens", "text")]
        if len(named) == 1 or len(strings) == 1:
            column = (named or strings)[0]
        else:
            raise WordVectorError(f"{path}: cannot tell the word column among {table.column_names}")
        return [str(w) for w in table.column(column).to_pylist()]
    try:
        with open(path, encoding="utf-8") as f:
            return [line.rstrip("\n").rstrip("\r") for line in f]
    except UnicodeDecodeError as error:
        raise WordVectorError(f"{path} is not a UTF-8 word list (one word a line): {error}") from error


def _read_text(path: Path, keep: set[str] | None) -> WordVectors:
    opener = gzip.open if path.suffix == ".gz" else open
    words, rows, dim = [], [], None
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.rstrip("\n").rstrip("\r").rstrip(" ")
                if not line:
                    continue
                if number == 1 and dim is None:
                    header = line.split(" ")
                    if len(header) == 2 and all(part.isdigit() for part in header):  # word2vec "<count> <dim>"
                        dim = int(header[1])
                        continue
                if dim is None:
                    dim = len(line.split(" ")) - 1
                    if dim < 1:
                        raise WordVectorError(f"{path}, line {number}: no vector after the word {line[:40]!r}")
                parts = line.rsplit(" ", dim)  # the word may itself hold spaces (GloVe 840B has some)
                if len(parts) != dim + 1 or not parts[0]:
                    raise WordVectorError(
                        f"{path}, line {number}: {len(parts) - 1} values where the file's vectors have {dim} "
                        "(damaged or truncated?)"
                    )
                if keep is not None and parts[0] not in keep:
                    continue
                try:
                    rows.append(np.array(parts[1:], dtype=np.float32))
                except ValueError as error:
                    raise WordVectorError(f"{path}, line {number}: not a vector of numbers: {error}") from error
                words.append(parts[0])
    except (UnicodeDecodeError, OSError, EOFError) as error:
        raise WordVectorError(f"{path} is not a readable UTF-8 word-vector text file (damaged?): {error}") from error
    if dim is None:
        raise WordVectorError(f"{path} holds no vectors")
    vectors = np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
    _check_finite(vectors, str(path))
    return WordVectors(words, vectors, str(path))


def _check_finite(vectors: np.ndarray, source: str) -> None:
    finite = np.isfinite(vectors).all(axis=1)
    if not finite.all():
        raise WordVectorError(f"{source}: vector {int(np.argmin(finite))} holds NaN or infinite values (damaged?)")


# ----------------------------------------------------------------------------------------------------------
# alignment to a vocabulary
# ----------------------------------------------------------------------------------------------------------
@dataclass
class EmbeddingCoverage:
    """Which rows of an embedding table got a pretrained vector.

    ``coverage`` is over the vocabulary's words (special tokens excluded); ``has_vector[i]`` says it for token id
    ``i`` (use :meth:`token_coverage` for the share of running tokens of a corpus)."""

    source: str
    vocab_size: int
    special_tokens: int
    found: int
    found_lowercased: int
    missing_words: list[str]
    missing_init: str
    has_vector: torch.Tensor = field(repr=False)

    @property
    def words(self) -> int:
        return self.vocab_size - self.special_tokens

    @property
    def coverage(self) -> float:
        return self.found / self.words if self.words else 0.0

    def token_coverage(self, input_ids: Iterable[Iterable[int]], ignore_ids: Iterable[int] = ()) -> float:
        """Share of the tokens of ``input_ids`` (lists of ids; ``ignore_ids``, e.g. padding, not counted) whose row
        holds a pretrained vector (the unknown token has none)."""
        ids = torch.tensor([i for row in input_ids for i in row], dtype=torch.long)
        if len(ignore_ids := list(ignore_ids)):
            ids = ids[~torch.isin(ids, torch.tensor(ignore_ids))]
        return float(self.has_vector[ids].float().mean()) if len(ids) else 0.0

    def to_dict(self, max_missing: int = 20) -> dict:
        return {
            "source": self.source,
            "vocab_size": self.vocab_size,
            "special_tokens": self.special_tokens,
            "found": self.found,
            "found_lowercased": self.found_lowercased,
            "coverage": round(self.coverage, 6),
            "missing": len(self.missing_words),
            "missing_examples": self.missing_words[:max_missing],
            "missing_init": self.missing_init,
        }

    def __str__(self) -> str:
        examples = ", ".join(self.missing_words[:8])
        return (
            f"{Path(self.source).name}: {self.found:,} of {self.words:,} words ({100 * self.coverage:.1f} %) have a "
            f"vector ({self.found_lowercased:,} through lower-casing); {len(self.missing_words):,} missing, "
            f"initialised {self.missing_init!r}" + (f" (most frequent: {examples})" if examples else "")
        )


def _vocab_of(tokenizer) -> tuple[dict[str, int], set[int], int | None]:
    """(token → id, ids of special tokens, padding id) of a tokenizer or a plain ``{token: id}`` mapping."""
    if isinstance(tokenizer, Mapping):
        return dict(tokenizer), set(), None
    vocab = tokenizer.get_vocab()
    return vocab, set(tokenizer.all_special_ids), tokenizer.pad_token_id


def embedding_matrix(
    vectors: WordVectors,
    tokenizer,
    initial: torch.Tensor | None = None,
    missing: str = "normal",
    lowercase_fallback: bool = True,
    seed: int = 0,
) -> tuple[torch.Tensor, EmbeddingCoverage]:
    """The ``(rows, dim)`` table for ``tokenizer``'s ids (a tokenizer or a ``{token: id}`` mapping): known words get
    their vector, the others ``missing`` (module doc), the padding row zero. ``rows`` is ``initial``'s when given (the
    model's table, needed for ``missing="model"``), else the largest id + 1."""
    if missing not in MISSING_INITS:
        raise ValueError(f"`missing` must be one of {MISSING_INITS}, got {missing!r}")
    vocab, special, pad_id = _vocab_of(tokenizer)
    rows = initial.shape[0] if initial is not None else max(vocab.values()) + 1
    if max(vocab.values()) >= rows:
        raise WordVectorError(f"the tokenizer has ids up to {max(vocab.values())} but the embedding has {rows} rows")
    if initial is not None and initial.shape[1] != vectors.dim:
        raise WordVectorError(
            f"{vectors.source} has {vectors.dim}-dimensional vectors but the model's embedding_size is "
            f"{initial.shape[1]}: set embedding_size to {vectors.dim}"
        )
    table = torch.from_numpy(np.asarray(vectors.vectors, dtype=np.float32))
    if missing == "model":
        if initial is None:
            raise ValueError('`missing="model"` keeps the model\'s rows: pass `initial`')
        matrix = initial.detach().to(torch.float32).clone()
    elif missing == "normal":
        mean, std = (table.mean(0), table.std(0)) if len(table) > 1 else (torch.zeros(vectors.dim), torch.ones(1))
        generator = torch.Generator().manual_seed(seed)
        matrix = mean + std * torch.randn(rows, vectors.dim, generator=generator)
    elif missing == "mean":
        matrix = (table.mean(0) if len(table) else torch.zeros(vectors.dim)).expand(rows, -1).clone()
    else:
        matrix = torch.zeros(rows, vectors.dim)
    has_vector = torch.zeros(rows, dtype=torch.bool)
    found = lowered = 0
    missing_words = []
    for token, i in sorted(vocab.items(), key=lambda item: item[1]):
        if i in special:
            continue
        row = vectors.index.get(token)
        if row is None and lowercase_fallback:
            row = vectors.index.get(token.lower())
            lowered += row is not None
        if row is None:
            missing_words.append(token)
            continue
        matrix[i] = table[row]
        has_vector[i] = True
        found += 1
    if pad_id is not None:
        matrix[pad_id] = 0.0
    coverage = EmbeddingCoverage(
        source=vectors.source,
        vocab_size=len(vocab),
        special_tokens=len(special & set(vocab.values())),
        found=found,
        found_lowercased=lowered,
        missing_words=missing_words,
        missing_init=missing,
        has_vector=has_vector,
    )
    return matrix, coverage


def init_embeddings_from_vectors(
    model: nn.Module,
    tokenizer,
    vectors: WordVectors | str | os.PathLike,
    freeze: bool = True,
    missing: str = "normal",
    lowercase_fallback: bool = True,
    seed: int = 0,
    words: str | os.PathLike | Iterable[str] | None = None,
) -> EmbeddingCoverage:
    """Fill ``model.get_input_embeddings()`` from word vectors for ``tokenizer``'s vocabulary; returns the coverage.

    ``vectors`` is a :class:`WordVectors` or a path for :func:`load_word_vectors` (``words``: a ``.npy``'s word list).
    ``freeze=True`` keeps the table fixed in training: hf_seq's recurrent models record it in
    ``config.freeze_embeddings`` (saved with the model); other models get ``requires_grad=False`` on the table.
    Rows of words without a vector follow ``missing`` (module doc), the padding row is zero.

    Raises:
        WordVectorError: the vectors' dimension differs from the embedding's (both named), the tokenizer has more ids
        than the table has rows, or the file cannot be read (named).
    """
    embedding = model.get_input_embeddings()
    if not isinstance(embedding, nn.Embedding):
        raise WordVectorError(f"the model's input embedding is a {type(embedding).__name__}, not a table of vectors")
    if not isinstance(vectors, WordVectors):
        vocab, _, _ = _vocab_of(tokenizer)
        keep = set(vocab) | ({w.lower() for w in vocab} if lowercase_fallback else set())
        vectors = load_word_vectors(vectors, words=words, keep=keep)
    matrix, coverage = embedding_matrix(
        vectors, tokenizer, embedding.weight.detach(), missing=missing, lowercase_fallback=lowercase_fallback, seed=seed
    )
    if hasattr(model, "load_pretrained_embeddings"):  # hf_seq's recurrent models: the freeze goes into the config
        model.load_pretrained_embeddings(matrix, freeze=freeze)
    else:
        with torch.no_grad():
            embedding.weight.copy_(matrix.to(embedding.weight.dtype))
        embedding.weight.requires_grad_(not freeze)
    return coverage
