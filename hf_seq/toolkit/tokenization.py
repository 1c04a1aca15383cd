"""Tokenizer builders on the ``tokenizers`` library, each returning a ``transformers.PreTrainedTokenizerFast``.

The returned tokenizers are ordinary Hugging Face tokenizers: ``save_pretrained`` writes ``tokenizer.json`` +
``tokenizer_config.json`` and ``AutoTokenizer.from_pretrained(folder)`` gives back the same tokenizer (vocabulary,
special tokens, ``model_max_length``, ``padding_side``, ``truncation_side``). Truncation and padding are the standard
call options: ``tok(texts, truncation=True, max_length=M, padding="max_length")``; set
``tok.truncation_side = "left"`` to keep the LAST ``M`` tokens and ``tok.padding_side = "left"`` to pre-pad.

=============================  ====================================================================================
builder                        use
=============================  ====================================================================================
build_word_level_tokenizer     the notes' word tokenizer: lowercase, keep the top V words, the rest → unk
build_char_tokenizer           one token per character (space and newline included); decode gives the text back
build_wordpiece_tokenizer      BERT: [PAD] [UNK] [CLS] [SEP] [MASK], "[CLS] A [SEP] B [SEP]", token_type_ids
build_bpe_tokenizer            byte-level BPE (no unknown characters), ByteLevel decoder
build_translation_tokenizer    one vocabulary for English + Spanish, <pad> <unk> <s> </s>, "$A </s>" (recommended:
                               kind="bpe")
=============================  ====================================================================================
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from .preprocessing import id_type

__all__ = [
    "build_bpe_tokenizer",
    "build_char_tokenizer",
    "build_translation_tokenizer",
    "build_word_level_tokenizer",
    "build_wordpiece_tokenizer",
    "iter_texts",
]

DEFAULT_MODEL_MAX_LENGTH = 512
_SIDES = ("left", "right")
_PRE_TOKENIZERS = ("whitespace_punct", "whitespace", "glove")
# GloVe 6B's (Stanford PTB) word splits: clitics as their own words ("do n't", "ca n't", "it 's"), every
# punctuation mark alone except "..." and "--" (GloVe has vectors for those, not for clusters such as ".'" or "),")
GLOVE_SPLIT = r"(?i)\w+(?=n't)|n't|'(?:s|re|ve|ll|d|m)\b|\.\.\.|--|\w+|[^\w\s]"


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
def iter_texts(texts: Any) -> Iterator[str]:
    """Strings from ``texts``: a string, an iterable of strings, of ``{"en": .., "es": ..}`` dicts or of
    ``(src, tgt)`` pairs, a ``datasets.Dataset`` (its ``text`` or ``translation`` column) or a ``DatasetDict``
    (its ``train`` split)."""
    if isinstance(texts, str):
        yield texts
        return
    # datasets objects, without importing datasets here
    if hasattr(texts, "column_names") and isinstance(getattr(texts, "column_names", None), dict):  # DatasetDict
        if "train" not in texts:
            raise ValueError("texts: a DatasetDict must have a 'train' split to build a vocabulary from")
        yield from iter_texts(texts["train"])
        return
    if hasattr(texts, "column_names") and isinstance(texts.column_names, list):  # Dataset
        for column in ("text", "translation", "tokens"):
            if column in texts.column_names:
                yield from iter_texts(texts[column])
                return
        raise ValueError(f"texts: a Dataset needs a 'text' or 'translation' column, got {texts.column_names}")
    for item in texts:
        if isinstance(item, str):
            yield item
        elif isinstance(item, Mapping):
            for value in item.values():
                if isinstance(value, str):
                    yield value
        elif isinstance(item, Sequence):
            for value in item:
                if isinstance(value, str):
                    yield value
                else:
                    raise ValueError(f"texts: expected strings inside a pair/list, got {type(value).__name__}")
        else:
            raise ValueError(f"texts: expected str, dict or pair items, got {type(item).__name__}")


def _check_common(padding_side: str, truncation_side: str, model_max_length: int) -> None:
    if padding_side not in _SIDES:
        raise ValueError(f"padding_side must be one of {_SIDES}, got {padding_side!r}")
    if truncation_side not in _SIDES:
        raise ValueError(f"truncation_side must be one of {_SIDES}, got {truncation_side!r}")
    if not isinstance(model_max_length, int) or model_max_length < 1:
        raise ValueError(f"model_max_length must be a positive int, got {model_max_length!r}")


def _dedupe(tokens: Iterable[str | None]) -> list[str]:
    out: list[str] = []
    for token in tokens:
        if token is not None and token not in out:
            out.append(token)
    return out


def _special_tokens(
    special_tokens: Sequence[str],
    unk_token: str | None,
    pad_token: str | None,
    bos_token: str | None,
    eos_token: str | None,
    add_bos: bool,
    add_eos: bool,
    unk_is_second: bool,
) -> tuple[list[str], str, str | None]:
    """``(every special token in id order: pad, unk, special_tokens, bos, eos; unk_token; pad_token)`` of the word and
    char builders. ``unk_token`` / ``pad_token`` default to the ``special_tokens`` entry spelled ``[UNK]``/``<unk>``,
    ``[PAD]``/``<pad>`` (``unk_is_second``: else the unknown token is the second entry); ``ValueError`` without an
    unknown token, or for ``add_bos`` / ``add_eos`` without ``bos_token`` / ``eos_token``."""
    specials = list(special_tokens)
    unk_token = unk_token or next((t for t in specials if t.lower() in ("[unk]", "<unk>")), None)
    pad_token = pad_token or next((t for t in specials if t.lower() in ("[pad]", "<pad>")), None)
    if unk_token is None:
        if not unk_is_second or len(specials) < 2:
            raise ValueError("special_tokens must contain an unknown token (e.g. '[UNK]') or pass unk_token=")
        unk_token = specials[1]
    if add_bos and not bos_token:
        raise ValueError("add_bos=True needs bos_token (e.g. '<s>')")
    if add_eos and not eos_token:
        raise ValueError("add_eos=True needs eos_token (e.g. '</s>')")
    return _dedupe([pad_token, unk_token, *specials, bos_token, eos_token]), unk_token, pad_token


def _template(tokenizer: Tokenizer, bos: str | None, eos: str | None) -> processors.TemplateProcessing | None:
    """ "<bos> $A <eos>" (either may be None) and the pair form "<bos> $A <eos> $B:1 <eos>:1"."""
    if bos is None and eos is None:
        return None
    single = ([bos] if bos else []) + ["$A"] + ([eos] if eos else [])
    pair = single + ["$B:1"] + ([f"{eos}:1"] if eos else [])
    specials = [(t, tokenizer.token_to_id(t)) for t in _dedupe([bos, eos])]
    return processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair), special_tokens=specials)


def _wrap(
    tokenizer: Tokenizer,
    *,
    model_max_length: int,
    padding_side: str,
    truncation_side: str,
    model_input_names: list[str] | None = None,
    **special_tokens: str | None,
) -> PreTrainedTokenizerFast:
    """A ``PreTrainedTokenizerFast`` around ``tokenizer`` with the named special tokens set."""
    kwargs = {k: v for k, v in special_tokens.items() if v is not None}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side=truncation_side,
        clean_up_tokenization_spaces=False,
        model_input_names=model_input_names or ["input_ids", "attention_mask"],
        **kwargs,
    )
    return fast


def _ranked_words(tokenizer: Tokenizer, texts: Any, min_frequency: int, limit: int | None) -> list[str]:
    """Words as ``tokenizer``'s normalizer + pre-tokenizer produce them, most frequent first, ties alphabetical.

    Counted in Rust by ``WordLevelTrainer`` (no special tokens, so ids are exactly the ranks); at most ``limit``.
    """
    trainer = trainers.WordLevelTrainer(
        vocab_size=limit if limit is not None else 2**31 - 1,
        min_frequency=min_frequency,
        special_tokens=[],
        show_progress=False,
    )
    tokenizer.train_from_iterator(iter_texts(texts), trainer=trainer)
    return [word for word, _ in sorted(tokenizer.get_vocab(with_added_tokens=False).items(), key=lambda x: x[1])]


# ----------------------------------------------------------------------------------------------------------
# word level
# ----------------------------------------------------------------------------------------------------------
def _word_pre_tokenizer(name: str):
    """The ``tokenizers`` pre-tokenizer of a word-level tokenizer's ``pre_tokenizer`` choice."""
    if name == "whitespace_punct":
        return pre_tokenizers.Whitespace()
    if name == "glove":
        split = pre_tokenizers.Split(Regex(GLOVE_SPLIT), behavior="isolated")
        return pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), split])
    return pre_tokenizers.WhitespaceSplit()


def build_word_level_tokenizer(
    texts: Any,
    max_vocab_size: int | None = None,
    min_frequency: int = 1,
    lowercase: bool = True,
    special_tokens: Sequence[str] = ("[PAD]", "[UNK]"),
    unk_token: str | None = None,
    pad_token: str | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    add_bos: bool = False,
    add_eos: bool = False,
    pre_tokenizer: str = "whitespace_punct",
    padding_side: str = "right",
    truncation_side: str = "right",
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    also_keep: Container[str] | None = None,
    extra_words: Iterable[str] = (),
) -> PreTrainedTokenizerFast:
    """Word-level tokenizer: keep the ``max_vocab_size`` most frequent words, every other word → unk.

    ``max_vocab_size`` counts the special tokens too (it is the embedding size); ``None`` keeps every word seen
    ``min_frequency`` times. Ties in frequency are broken alphabetically, so the vocabulary is deterministic.
    ``pre_tokenizer="whitespace_punct"`` splits words from punctuation (``\\w+|[^\\w\\s]+``), ``"whitespace"``
    splits on whitespace only (PTB: its ``<unk>`` stays one token), ``"glove"`` splits as the text GloVe 6B was trained
    on: clitics apart (``don't`` → ``do n't``, ``it's`` → ``it 's``) and each punctuation mark alone but ``...`` and
    ``--`` (:data:`GLOVE_SPLIT`), so that fewer words miss a GloVe vector. ``unk_token`` / ``pad_token`` default to the
    ``special_tokens`` entries spelled ``[UNK]``/``<unk>`` and ``[PAD]``/``<pad>`` (else the second and first entry).
    With ``unk_token="<unk>"`` the corpus' own ``<unk>`` maps to the unknown id. ``add_bos``/``add_eos`` wrap every
    encoding in ``bos_token``/``eos_token`` (a ``TemplateProcessing`` post-processor). ``also_keep``: words of the
    texts (as normalised, e.g. lower-cased) that join the vocabulary after the top ones however rare they are — the
    words of a pretrained vector file, whose vectors need no training (``max_vocab_size`` does not limit them).
    ``extra_words`` join last, in their order, whether the texts have them or not (all the words of a vector file, so
    that a frozen pretrained table also covers words never seen in training).
    """
    _check_common(padding_side, truncation_side, model_max_length)
    if pre_tokenizer not in _PRE_TOKENIZERS:
        raise ValueError(f"pre_tokenizer must be one of {_PRE_TOKENIZERS}, got {pre_tokenizer!r}")
    if max_vocab_size is not None and (not isinstance(max_vocab_size, int) or max_vocab_size < 1):
        raise ValueError(f"max_vocab_size must be a positive int or None, got {max_vocab_size!r}")
    if not isinstance(min_frequency, int) or min_frequency < 1:
        raise ValueError(f"min_frequency must be an int >= 1, got {min_frequency!r}")
    specials, unk_token, pad_token = _special_tokens(
        special_tokens, unk_token, pad_token, bos_token, eos_token, add_bos, add_eos, unk_is_second=True
    )
    if also_keep is not None:
        texts = list(iter_texts(texts))  # read twice

    tokenizer = Tokenizer(models.WordLevel(vocab={unk_token: 0}, unk_token=unk_token))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = _word_pre_tokenizer(pre_tokenizer)
    ranked = _ranked_words(
        tokenizer, texts, min_frequency, None if max_vocab_size is None else max_vocab_size + len(specials)
    )
    vocab = {tok: i for i, tok in enumerate(specials)}
    limit = None if max_vocab_size is None else max(0, max_vocab_size - len(vocab))
    for word in [w for w in ranked if w not in vocab][:limit]:
        vocab[word] = len(vocab)
    if also_keep is not None:  # every word of the texts, most frequent first, that also_keep has
        for word in _ranked_words(tokenizer, texts, 1, None):
            if word not in vocab and word in also_keep:
                vocab[word] = len(vocab)
    for word in extra_words:
        if word not in vocab:
            vocab[word] = len(vocab)
    tokenizer.model = models.WordLevel(vocab=vocab, unk_token=unk_token)
    # the special tokens are never split or lowercased; the corpus' own unk spelling (PTB "<unk>") is kept as is
    tokenizer.add_special_tokens(specials)
    post = _template(tokenizer, bos_token if add_bos else None, eos_token if add_eos else None)
    if post is not None:
        tokenizer.post_processor = post
    # no decoder: tokenizers joins the words with single spaces
    return _wrap(
        tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side=truncation_side,
        unk_token=unk_token,
        pad_token=pad_token,
        bos_token=bos_token,
        eos_token=eos_token,
    )


# ----------------------------------------------------------------------------------------------------------
# character level
# ----------------------------------------------------------------------------------------------------------
def build_char_tokenizer(
    texts: Any,
    lowercase: bool = False,
    special_tokens: Sequence[str] = ("[PAD]", "[UNK]"),
    unk_token: str | None = None,
    pad_token: str | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    add_bos: bool = False,
    add_eos: bool = False,
    min_frequency: int = 1,
    padding_side: str = "right",
    truncation_side: str = "right",
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
) -> PreTrainedTokenizerFast:
    """Character tokenizer: one token per character, including space, tab and newline.

    Vocabulary: the special tokens, then every character seen at least ``min_frequency`` times (by decreasing
    frequency, ties by code point). ``decode(ids, skip_special_tokens=True)`` returns the text exactly (for
    characters in the vocabulary; others come back as the unk token).
    """
    _check_common(padding_side, truncation_side, model_max_length)
    specials, unk_token, pad_token = _special_tokens(
        special_tokens, unk_token, pad_token, bos_token, eos_token, add_bos, add_eos, unk_is_second=False
    )
    counts: Counter = Counter()
    for text in iter_texts(texts):
        counts.update(text.lower() if lowercase else text)
    vocab = {tok: i for i, tok in enumerate(specials)}
    for char, count in sorted(counts.items(), key=lambda x: (-x[1], x[0])):
        if count >= min_frequency and char not in vocab:
            vocab[char] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk_token))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    # every character (newline included: [\s\S]) is its own pre-token
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.add_special_tokens(specials)
    post = _template(tokenizer, bos_token if add_bos else None, eos_token if add_eos else None)
    if post is not None:
        tokenizer.post_processor = post
    tokenizer.decoder = decoders.Fuse()  # concatenate the characters without separators
    return _wrap(
        tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side=truncation_side,
        unk_token=unk_token,
        pad_token=pad_token,
        bos_token=bos_token,
        eos_token=eos_token,
    )


# ----------------------------------------------------------------------------------------------------------
# WordPiece (BERT)
# ----------------------------------------------------------------------------------------------------------
BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def build_wordpiece_tokenizer(
    texts: Any,
    vocab_size: int = 8000,
    lowercase: bool = True,
    min_frequency: int = 2,
    padding_side: str = "right",
    truncation_side: str = "right",
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
) -> PreTrainedTokenizerFast:
    """BERT-style WordPiece tokenizer: ids 0–4 are ``[PAD] [UNK] [CLS] [SEP] [MASK]``.

    Encodes one text as ``[CLS] A [SEP]`` and a pair as ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0 for
    the first segment and 1 for the second; ``mask_token`` is set (``pipeline("fill-mask")``).
    """
    _check_common(padding_side, truncation_side, model_max_length)
    if not isinstance(vocab_size, int) or vocab_size <= len(BERT_SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be an int > {len(BERT_SPECIAL_TOKENS)}, got {vocab_size!r}")
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(BERT_SPECIAL_TOKENS),
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(iter_texts(texts), trainer=trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return _wrap(
        tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side=truncation_side,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


# ----------------------------------------------------------------------------------------------------------
# byte-level BPE
# ----------------------------------------------------------------------------------------------------------
def build_bpe_tokenizer(
    texts: Any,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    lowercase: bool = False,
    pad_token: str | None = "<pad>",
    unk_token: str | None = "<unk>",
    bos_token: str | None = "<s>",
    eos_token: str | None = "</s>",
    add_bos: bool = False,
    add_eos: bool = False,
    add_prefix_space: bool = True,
    padding_side: str = "right",
    truncation_side: str = "right",
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
) -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2 style): every string is representable, ``ByteLevel`` decoder gives clean text.

    Special tokens get the first ids in the order pad, unk, bos, eos (those not None). ``add_prefix_space`` makes a
    sentence-initial word tokenize like the same word inside a sentence (decode strips that leading space).
    ``vocab_size`` includes the 256 byte symbols and the special tokens.
    """
    _check_common(padding_side, truncation_side, model_max_length)
    specials = _dedupe([pad_token, unk_token, bos_token, eos_token])
    if not isinstance(vocab_size, int) or vocab_size <= 256 + len(specials):
        raise ValueError(
            f"vocab_size must be an int > {256 + len(specials)} (256 bytes + special tokens), got {vocab_size!r}"
        )
    if add_bos and not bos_token:
        raise ValueError("add_bos=True needs bos_token")
    if add_eos and not eos_token:
        raise ValueError("add_eos=True needs eos_token")
    tokenizer = Tokenizer(models.BPE(unk_token=unk_token))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(iter_texts(texts), trainer=trainer)
    post = _template(tokenizer, bos_token if add_bos else None, eos_token if add_eos else None)
    byte_post = processors.ByteLevel(trim_offsets=True)
    tokenizer.post_processor = byte_post if post is None else processors.Sequence([byte_post, post])
    # ByteLevel turns the byte symbols back into text; with add_prefix_space the added leading space is removed
    tokenizer.decoder = (
        decoders.Sequence([decoders.ByteLevel(), decoders.Strip(content=" ", left=1, right=0)])
        if add_prefix_space
        else decoders.ByteLevel()
    )
    return _wrap(
        tokenizer,
        model_max_length=model_max_length,
        padding_side=padding_side,
        truncation_side=truncation_side,
        pad_token=pad_token,
        unk_token=unk_token,
        bos_token=bos_token,
        eos_token=eos_token,
    )


# ----------------------------------------------------------------------------------------------------------
# translation (shared source/target vocabulary)
# ----------------------------------------------------------------------------------------------------------
def build_translation_tokenizer(
    pairs_or_texts: Any,
    kind: str = "bpe",
    vocab_size: int = 8000,
    lowercase: bool = False,
    min_frequency: int = 2,
    model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
    padding_side: str = "right",
    truncation_side: str = "right",
) -> PreTrainedTokenizerFast:
    """One tokenizer for both languages of a translation pair: ``<pad>``=0, ``<unk>``=1, ``<s>``=2, ``</s>``=3.

    Every encoding ends with ``</s>`` (``"$A </s>"``), so ``tok(src, text_target=tgt)`` gives ``input_ids`` and
    ``labels`` that both end with EOS; decoder start = ``<s>`` (``bos_token_id``). ``pairs_or_texts`` may be a
    ``DatasetDict``/``Dataset`` from :func:`hf_seq.toolkit.data.load_translation` (train split, both languages), an
    iterable of ``{"en": .., "es": ..}`` dicts, of pairs or of strings.

    ``kind="bpe"`` (recommended): byte-level BPE — shared subwords cover rare names, inflections and every
    character. ``kind="word"``: word level, top ``vocab_size`` words, others → ``<unk>``.
    """
    if kind not in ("bpe", "word"):
        raise ValueError(f"kind must be 'bpe' or 'word', got {kind!r}")
    texts = pairs_or_texts  # read by the trainer as it goes (an iterable over a dataset: never one list in memory)
    if kind == "bpe":
        return build_bpe_tokenizer(
            texts,
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            lowercase=lowercase,
            pad_token="<pad>",
            unk_token="<unk>",
            bos_token="<s>",
            eos_token="</s>",
            add_bos=False,
            add_eos=True,
            padding_side=padding_side,
            truncation_side=truncation_side,
            model_max_length=model_max_length,
        )
    return build_word_level_tokenizer(
        texts,
        max_vocab_size=vocab_size,
        min_frequency=1,
        lowercase=lowercase,
        special_tokens=("<pad>", "<unk>", "<s>", "</s>"),
        unk_token="<unk>",
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        add_eos=True,
        pre_tokenizer="whitespace_punct",
        padding_side=padding_side,
        truncation_side=truncation_side,
        model_max_length=model_max_length,
    )


# --- encoding translation pairs fast: the backend itself, and a shortcut for byte-level BPE ------------------------


_SPACE = "\t\n\x0b\x0c\r "  # the ASCII characters of the byte-level regex's \\s
# GPT-2's pre-tokenizing regex (tokenizers' ByteLevel, use_regex) restricted to ASCII text: \p{L} is [A-Za-z],
# \p{N} is [0-9], \s is _SPACE (not Python's \s, which also matches U+001C-U+001F)
_ASCII_PIECES = re.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_SPACE}A-Za-z0-9]+|[{_SPACE}]+(?![^{_SPACE}])|[{_SPACE}]+"
)
_CACHE_PIECES = 500_000  # pieces remembered by a ByteLevelWords (then it starts again)


def _byte_symbols() -> dict[int, str]:
    """GPT-2's byte -> symbol table of the byte-level pre-tokenizer (printable bytes stay, the others move up)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class ByteLevelWords:
    """The ids (no special tokens) of ASCII texts under a byte-level BPE tokenizer (``ByteLevel`` pre-tokenizer with
    its regex, no normaliser or ``Lowercase``, a ``BPE`` model without dropout), ~5x faster than ``encode_batch``:
    the text is split by the same regex in Python and each piece's ids come from a dictionary, filled by the BPE
    model itself (``model.tokenize``) on the first sight of a piece. A BPE model encodes each piece on its own, so
    the ids are the tokenizer's. :meth:`of` gives ``None`` for any other tokenizer; :meth:`encode` gives ``None``
    for a batch it does not cover (non-ASCII text, text holding an added token), which the caller encodes with the
    backend."""

    def __init__(self, backend, spec: dict) -> None:
        self.model = backend.model
        pre = spec["pre_tokenizer"]
        self.prefix_space = bool(pre.get("add_prefix_space"))
        self.lowercase = spec.get("normalizer") is not None
        self.added = [t["content"] for t in spec.get("added_tokens") or []]
        self.symbols = {chr(b): c for b, c in _byte_symbols().items() if b < 128}
        self.pieces: dict[str, list[int]] = {}

    @classmethod
    def of(cls, backend) -> ByteLevelWords | None:
        spec = json.loads(backend.to_str())
        model, pre, norm = spec.get("model") or {}, spec.get("pre_tokenizer") or {}, spec.get("normalizer")
        if (
            model.get("type") != "BPE"
            or model.get("dropout") is not None
            or model.get("continuing_subword_prefix")
            or model.get("end_of_word_suffix")
            or pre.get("type") != "ByteLevel"
            or not pre.get("use_regex", True)
            or not (norm is None or norm == {"type": "Lowercase"})
        ):
            return None
        return cls(backend, spec)

    def _piece(self, piece: str) -> list[int]:
        ids = self.pieces.get(piece)
        if ids is None:
            if len(self.pieces) >= _CACHE_PIECES:
                self.pieces.clear()
            mapped = "".join(self.symbols[c] for c in piece)
            ids = self.pieces[piece] = [token.id for token in self.model.tokenize(mapped)]
        return ids

    def encode(self, texts: list[str]) -> list[list[int] | None]:
        """Each text's ids, or ``None`` for a text this shortcut does not cover (not ASCII, or holding an added token
        after the normaliser: the tokenizer splits those out first)."""
        if self.lowercase:
            texts = [t.lower() for t in texts]
        joined = "\n".join(texts)
        plain, added = joined.isascii(), any(token in joined for token in self.added)
        rows, get, findall, chain = [], self.pieces.get, _ASCII_PIECES.findall, itertools.chain.from_iterable
        for text in texts:
            if not (plain or text.isascii()) or (added and any(token in text for token in self.added)):
                rows.append(None)
                continue
            if self.prefix_space and text and not text.startswith(" "):  # (an empty text stays empty)
                text = " " + text
            parts = findall(text)
            found = list(map(get, parts))
            if None in found:  # a piece seen for the first time
                found = [self._piece(part) for part in parts]
            rows.append(list(chain(found)))
        return rows


class PairEncoder:
    """The ids of ``tokenizer(sources, text_target=targets, max_length=max_source_length, truncation=True)`` with the
    labels cut to ``max_target_length``, computed by the fast tokenizer's backend (``encode_batch`` of a copy with the
    same truncation) instead of the Python ``__call__``, and returned as Arrow list arrays (ids of
    :func:`id_type`, ``int8`` mask) without Python lists of ids: the same tokens, special tokens and truncation included (tested).

    :meth:`usable` says when the shortcut gives ``__call__``'s output: a tokenizer whose class keeps the
    ``TokenizersBackend`` encoding path (no own ``__call__``, ``_encode_plus`` or source/target modes) and whose
    model inputs are ``input_ids`` and ``attention_mask``. Picklable (``num_proc`` workers): the backend is kept as
    its JSON."""

    def __init__(self, tokenizer, max_source_length: int, max_target_length: int) -> None:
        self.json = tokenizer.backend_tokenizer.to_str()
        self.max_source_length, self.max_target_length = int(max_source_length), int(max_target_length)
        self.truncation_side = tokenizer.truncation_side
        self.split_special_tokens = bool(getattr(tokenizer, "split_special_tokens", False))
        self.attention_mask = "attention_mask" in tokenizer.model_input_names
        self.id_type = str(id_type(tokenizer))
        self._setup()

    @staticmethod
    def usable(tokenizer) -> bool:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        cls = type(tokenizer)
        same = (
            isinstance(tokenizer, TokenizersBackend)
            and cls.__call__ is PreTrainedTokenizerBase.__call__
            and cls._encode_plus is TokenizersBackend._encode_plus
            and cls._convert_encoding is TokenizersBackend._convert_encoding
            and cls.set_truncation_and_padding is TokenizersBackend.set_truncation_and_padding
        )
        for mode in ("_switch_to_target_mode", "_switch_to_input_mode"):
            same = same and getattr(cls, mode, None) is getattr(TokenizersBackend, mode, None)
        return same and set(tokenizer.model_input_names) <= {"input_ids", "attention_mask"}

    def _setup(self) -> None:
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(self.json)
        backend.no_padding()
        backend.enable_truncation(
            max_length=self.max_source_length, stride=0, strategy="longest_first", direction=self.truncation_side
        )
        backend.encode_special_tokens = self.split_special_tokens
        self._backend = backend
        # the shortcut for byte-level BPE: the ids without special tokens, truncated and wrapped as the backend does
        self._words = self._prefix = self._suffix = None
        words = None if self.split_special_tokens else ByteLevelWords.of(backend)
        plain = Tokenizer.from_str(self.json)
        plain.no_truncation()
        plain.no_padding()
        layouts = set()
        for probe in ("a", "b c ."):
            core, full = plain.encode(probe, add_special_tokens=False).ids, plain.encode(probe).ids
            start = next((i for i in range(len(full) - len(core) + 1) if full[i : i + len(core)] == core), None)
            layouts.add(None if start is None else (tuple(full[:start]), tuple(full[start + len(core) :])))
        if words is not None and len(layouts) == 1 and None not in layouts:
            prefix, suffix = next(iter(layouts))
            if self.max_source_length > len(prefix) + len(suffix):
                self._words, self._prefix, self._suffix = words, list(prefix), list(suffix)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_backend"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def rows(self, texts: list[str], cut: int | None = None) -> list[list[int]]:
        """The ids of each of ``texts``, each row cut to its first ``cut`` ids when given."""
        rows = [None] * len(texts) if self._words is None else self._words.encode(texts)
        keep, prefix, suffix = self.max_source_length - len(self._prefix or ()), self._prefix, self._suffix
        keep -= len(suffix or ())
        for i, row in enumerate(rows):  # the backend's truncation (room kept for the special tokens), post-processor
            if row is not None:
                if len(row) > keep:
                    row = row[len(row) - keep :] if self.truncation_side == "left" else row[:keep]
                rows[i] = prefix + row + suffix
        rest = [i for i, row in enumerate(rows) if row is None]
        if rest:  # the texts the shortcut does not cover (all of them without it): the backend itself
            encoded = self._backend.encode_batch([texts[i] for i in rest], add_special_tokens=True)
            for i, encoding in zip(rest, encoded, strict=True):
                rows[i] = encoding.ids
        if cut is not None:
            rows = [r[:cut] if len(r) > cut else r for r in rows]
        return rows

    def encode(self, sources: list[str], targets: list[str], arrow: bool = True) -> dict:
        """``input_ids``, ``attention_mask`` (when a model input) and ``labels``: Arrow list arrays (:func:`id_type` ids,
        ``int8`` mask), or with ``arrow`` false Python lists (a stream's ``map``)."""
        sources, labels = self.rows(sources), self.rows(targets, self.max_target_length)
        if not arrow:
            out = {"input_ids": sources}
            if self.attention_mask:  # no padding: every position is a token
                out["attention_mask"] = [[1] * len(row) for row in sources]
            return out | {"labels": labels}

        def lists(rows: list[list[int]], values=None) -> pa.ListArray:
            offsets = np.zeros(len(rows) + 1, dtype=np.int32)
            np.cumsum(np.fromiter(map(len, rows), dtype=np.int64, count=len(rows)), out=offsets[1:])
            if values is None:
                values = pa.array(list(itertools.chain.from_iterable(rows)), type=pa.type_for_alias(self.id_type))
            return pa.ListArray.from_arrays(pa.array(offsets), values)

        out = {"input_ids": lists(sources)}
        if self.attention_mask:
            out["attention_mask"] = lists(sources, pa.array(np.ones(sum(map(len, sources)), dtype=np.int8)))
        out["labels"] = lists(labels)
        return out
