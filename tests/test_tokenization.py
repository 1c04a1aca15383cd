"""Tokenizer builders: vocabulary rules, special tokens, templates, truncation/padding sides, save/load round trips."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_seq.toolkit.tokenization import (
    build_bpe_tokenizer,
    build_char_tokenizer,
    build_translation_tokenizer,
    build_word_level_tokenizer,
    build_wordpiece_tokenizer,
    iter_texts,
)

CORPUS = [
    "The cat sat on the mat.",
    "The dog sat on the log!",
    "A cat and a dog.",
    "the the the cat",
    "Él dijo: ¿qué pasa?\tNada.",
    "line one\nline two",
]
PAIRS = [
    {
        "en": "In the beginning God created the heaven and the earth.",
        "es": "EN el principio crió Dios los cielos y la tierra.",
    },
    {"en": "And God saw the light, that it was good.", "es": "Y vió Dios que la luz era buena."},
    {"en": "Jesus wept.", "es": "Y lloró Jesús."},
] * 10
PROBES = ["The cat sat on the mat.", "an unseen zebra!", "Él dijo: ¿qué?", "line one\nline two", ""]


def _builders():
    return {
        "word": lambda: build_word_level_tokenizer(CORPUS, max_vocab_size=12),
        "word_eos": lambda: build_word_level_tokenizer(
            CORPUS, special_tokens=("<pad>", "<unk>"), eos_token="<eos>", add_eos=True, pre_tokenizer="whitespace"
        ),
        "char": lambda: build_char_tokenizer(CORPUS, bos_token="<s>", eos_token="</s>", add_bos=True),
        "wordpiece": lambda: build_wordpiece_tokenizer(CORPUS * 5, vocab_size=120, min_frequency=1),
        "bpe": lambda: build_bpe_tokenizer(CORPUS * 5, vocab_size=320, min_frequency=1, add_eos=True),
        "translation_bpe": lambda: build_translation_tokenizer(PAIRS, vocab_size=320, min_frequency=1),
        "translation_word": lambda: build_translation_tokenizer(PAIRS, kind="word", vocab_size=40),
    }


@pytest.fixture(scope="module", params=list(_builders()))
def any_tokenizer(request):
    return request.param, _builders()[request.param]()


def test_every_builder_returns_a_fast_tokenizer_with_pad(any_tokenizer):
    name, tok = any_tokenizer
    assert isinstance(tok, PreTrainedTokenizerFast), name
    assert tok.pad_token is not None and tok.pad_token_id is not None
    assert tok.unk_token is not None or name.endswith("bpe")
    assert tok.convert_ids_to_tokens(tok.pad_token_id) == tok.pad_token


def test_save_pretrained_autotokenizer_round_trip(any_tokenizer, tmp_path):
    name, tok = any_tokenizer
    tok.padding_side = "left"
    tok.truncation_side = "left"
    tok.model_max_length = 77
    try:
        tok.save_pretrained(tmp_path)
        loaded = AutoTokenizer.from_pretrained(tmp_path)
    finally:
        tok.padding_side = "right"
        tok.truncation_side = "right"
        tok.model_max_length = 512
    assert isinstance(loaded, PreTrainedTokenizerFast)
    assert loaded.get_vocab() == tok.get_vocab()
    assert loaded.all_special_tokens == tok.all_special_tokens
    assert loaded.special_tokens_map == tok.special_tokens_map
    assert (loaded.model_max_length, loaded.padding_side, loaded.truncation_side) == (77, "left", "left")
    assert loaded.model_input_names == tok.model_input_names
    for text in PROBES:
        assert loaded(text)["input_ids"] == tok(text)["input_ids"], (name, text)
        ids = tok(text)["input_ids"]
        assert loaded.decode(ids) == tok.decode(ids)


def test_truncation_and_padding_sides(any_tokenizer):
    name, tok = any_tokenizer
    text = "the cat sat on the mat and the dog sat on the log"
    full = tok(text, add_special_tokens=False)["input_ids"]
    assert len(full) > 4, name
    tok.truncation_side = "right"
    assert tok(text, add_special_tokens=False, truncation=True, max_length=3)["input_ids"] == full[:3]
    tok.truncation_side = "left"  # keep the LAST M tokens
    try:
        assert tok(text, add_special_tokens=False, truncation=True, max_length=3)["input_ids"] == full[-3:]
    finally:
        tok.truncation_side = "right"
    short = tok("cat", add_special_tokens=False)["input_ids"]
    pad = tok.pad_token_id
    batch = tok(["cat", text], add_special_tokens=False, padding=True)
    n_pad = len(full) - len(short)
    assert batch["input_ids"][0] == short + [pad] * n_pad
    assert batch["attention_mask"][0] == [1] * len(short) + [0] * n_pad
    tok.padding_side = "left"  # pre-padding
    try:
        batch = tok(["cat", text], add_special_tokens=False, padding="max_length", max_length=len(full) + 2)
        assert batch["input_ids"][0] == [pad] * (n_pad + 2) + short
        assert batch["attention_mask"][0] == [0] * (n_pad + 2) + [1] * len(short)
    finally:
        tok.padding_side = "right"


def test_word_level_keeps_top_words_rest_unk():
    texts = ["b b b a a c", "b a d"]  # counts: b 4, a 3, c 1, d 1
    tok = build_word_level_tokenizer(texts, max_vocab_size=4)  # [PAD] [UNK] + the top 2 words
    assert tok.get_vocab() == {"[PAD]": 0, "[UNK]": 1, "b": 2, "a": 3}
    assert tok("B a c d")["input_ids"] == [2, 3, 1, 1]  # lowercased; c, d → [UNK]
    assert tok.unk_token_id == 1 and tok.pad_token_id == 0
    assert tok.decode(tok("a b")["input_ids"]) == "a b"
    # ties are alphabetical, so the cut is deterministic
    tok = build_word_level_tokenizer(texts, max_vocab_size=5)
    assert tok.convert_ids_to_tokens(4) == "c"
    # min_frequency drops rare words without a size cap
    tok = build_word_level_tokenizer(texts, min_frequency=2)
    assert set(tok.get_vocab()) == {"[PAD]", "[UNK]", "a", "b"}


def test_word_level_punctuation_and_case_options():
    tok = build_word_level_tokenizer(["Hello, world!"], lowercase=False)
    assert tok.convert_ids_to_tokens(tok("Hello, world!")["input_ids"]) == ["Hello", ",", "world", "!"]
    assert tok("hello")["input_ids"] == [tok.unk_token_id]
    tok = build_word_level_tokenizer(["Hello, world!"], pre_tokenizer="whitespace")
    assert tok.convert_ids_to_tokens(tok("hello, world!")["input_ids"]) == ["hello,", "world!"]


def test_word_level_glove_pre_tokenizer_splits_as_glove_text():
    text = "I don't like it... It's \"great\" -- can't (really), won't.'"
    tok = build_word_level_tokenizer([text], pre_tokenizer="glove")
    tokens = tok.convert_ids_to_tokens(tok(text)["input_ids"])
    assert tokens == [
        *("i", "do", "n't", "like", "it", "...", "it", "'s", '"', "great", '"', "--", "ca", "n't"),
        *("(", "really", ")", ",", "wo", "n't", ".", "'"),
    ]
    assert tok.unk_token_id not in tok(text)["input_ids"]
    # the clitics split whatever the case when the tokenizer keeps it
    cased = build_word_level_tokenizer(["I DON'T KNOW'S"], pre_tokenizer="glove", lowercase=False)
    assert cased.tokenize("I DON'T KNOW'S") == ["I", "DO", "N'T", "KNOW", "'S"]
    # the default keeps punctuation runs together and cuts clitics at the apostrophe
    default = build_word_level_tokenizer([text])
    assert default.tokenize("don't.'") == ["don", "'", "t", ".'"]


def test_ptb_style_unk_maps_to_the_unk_token():
    lines = ["the <unk> rose N points", "the market fell"]
    tok = build_word_level_tokenizer(
        lines, special_tokens=("<pad>", "<unk>"), unk_token="<unk>", pre_tokenizer="whitespace", lowercase=False
    )
    ids = tok("the <unk> rose N points")["input_ids"]
    assert ids[1] == tok.unk_token_id == tok.convert_tokens_to_ids("<unk>")
    assert tok.convert_ids_to_tokens(ids) == ["the", "<unk>", "rose", "N", "points"]
    assert tok("the zebra")["input_ids"][1] == tok.unk_token_id


def test_word_level_bos_eos_template():
    tok = build_word_level_tokenizer(
        ["a b"], special_tokens=("<pad>", "<unk>"), bos_token="<s>", eos_token="</s>", add_bos=True, add_eos=True
    )
    tokens = tok.convert_ids_to_tokens(tok("a b")["input_ids"])
    assert tokens == ["<s>", "a", "b", "</s>"]
    assert tok.decode(tok("a b")["input_ids"], skip_special_tokens=True) == "a b"
    with pytest.raises(ValueError, match="eos_token"):
        build_word_level_tokenizer(["a"], add_eos=True)
    with pytest.raises(ValueError, match="pre_tokenizer"):
        build_word_level_tokenizer(["a"], pre_tokenizer="spaces")
    with pytest.raises(ValueError, match="max_vocab_size"):
        build_word_level_tokenizer(["a"], max_vocab_size=0)
    with pytest.raises(ValueError, match="padding_side"):
        build_word_level_tokenizer(["a"], padding_side="middle")


@pytest.mark.parametrize("text", ["a b\nc", "line one\nline two\n\n\tend ", "Él dijo: ¿qué pasa?", " x  y "])
def test_char_tokenizer_decodes_exactly(text):
    tok = build_char_tokenizer(CORPUS + [" x  y ", "b"])
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)  # one token per character, whitespace included
    assert tok.decode(ids) == text
    assert tok.decode(ids, skip_special_tokens=True) == text


def test_char_tokenizer_specials_and_unknown_characters():
    tok = build_char_tokenizer(["ab\nc"], bos_token="<s>", eos_token="</s>", add_bos=True, add_eos=True)
    tokens = tok.convert_ids_to_tokens(tok("a\nb")["input_ids"])
    assert tokens == ["<s>", "a", "\n", "b", "</s>"]
    assert tok.decode(tok("a\nb")["input_ids"], skip_special_tokens=True) == "a\nb"
    assert tok("az")["input_ids"][2] == tok.unk_token_id  # z was never seen
    lower = build_char_tokenizer(["AB"], lowercase=True)
    assert set(lower.get_vocab()) == {"[PAD]", "[UNK]", "a", "b"}


def test_wordpiece_bert_layout_and_pair_template():
    tok = build_wordpiece_tokenizer(CORPUS * 5, vocab_size=120, min_frequency=1)
    assert [tok.convert_tokens_to_ids(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert tok.mask_token == "[MASK]" and tok.cls_token == "[CLS]" and tok.sep_token == "[SEP]"
    assert tok.model_input_names == ["input_ids", "token_type_ids", "attention_mask"]
    enc = tok("the cat", "a dog")
    tokens = tok.convert_ids_to_tokens(enc["input_ids"])
    assert tokens == ["[CLS]", "the", "cat", "[SEP]", "a", "dog", "[SEP]"]
    assert enc["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    single = tok("The Cat sat.")
    assert tok.convert_ids_to_tokens(single["input_ids"]) == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"]
    assert tok.decode(single["input_ids"], skip_special_tokens=True) == "the cat sat."
    # a word outside the training text is split into ## pieces and decodes back
    pieces = tok.tokenize("cats")
    assert len(pieces) >= 1 and all(p == pieces[0] or p.startswith("##") for p in pieces)
    assert tok.decode(tok("cats", add_special_tokens=False)["input_ids"]) == "cats"


def test_byte_level_bpe_decodes_cleanly_and_has_no_unknowns():
    tok = build_bpe_tokenizer(CORPUS * 5, vocab_size=320, min_frequency=1, add_eos=True)
    for text in ["The cat sat on the mat.", "Él dijo: ¿qué?  x\n\ny", "zebra ✓ 漢字"]:
        ids = tok(text)["input_ids"]
        assert ids[-1] == tok.eos_token_id
        assert tok.unk_token_id not in ids
        assert tok.decode(ids, skip_special_tokens=True) == text
    assert [tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="vocab_size"):
        build_bpe_tokenizer(CORPUS, vocab_size=100)


@pytest.mark.parametrize("kind", ["bpe", "word"])
def test_translation_tokenizer_shared_vocab_and_text_target(kind):
    tok = build_translation_tokenizer(PAIRS, kind=kind, vocab_size=320 if kind == "bpe" else 60, min_frequency=1)
    assert (tok.pad_token, tok.unk_token, tok.bos_token, tok.eos_token) == ("<pad>", "<unk>", "<s>", "</s>")
    assert [tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id] == [0, 1, 2, 3]
    batch = tok(["Jesus wept."], text_target=["Y lloró Jesús."])
    assert batch["input_ids"][0][-1] == tok.eos_token_id
    assert batch["labels"][0][-1] == tok.eos_token_id
    assert tok.bos_token_id not in batch["input_ids"][0]
    assert tok.decode(batch["labels"][0], skip_special_tokens=True) == "Y lloró Jesús" + (
        "." if kind == "bpe" else " ."
    )
    # both languages share one vocabulary: an English and a Spanish word are both known
    vocab = tok.get_vocab()
    assert any("God" in t for t in vocab) and any("Dios" in t for t in vocab)
    if kind == "bpe":  # subwords: a rare name is spelled out, never <unk>
        assert tok.unk_token_id not in tok("Nabucodonosor")["input_ids"]
    with pytest.raises(ValueError, match="kind"):
        build_translation_tokenizer(PAIRS, kind="char")


def test_iter_texts_accepts_common_shapes():
    from datasets import Dataset, DatasetDict

    assert list(iter_texts("a")) == ["a"]
    assert list(iter_texts([{"en": "a", "es": "b"}, ("c", "d")])) == ["a", "b", "c", "d"]
    ds = Dataset.from_dict({"translation": [{"en": "x", "es": "y"}]})
    assert list(iter_texts(DatasetDict({"train": ds}))) == ["x", "y"]
    assert list(iter_texts(Dataset.from_dict({"text": ["t"], "label": [0]}))) == ["t"]
    with pytest.raises(ValueError, match="texts"):
        list(iter_texts([1, 2]))


@pytest.mark.slow
def test_saved_tokenizer_is_plain_json_loadable_without_hf_seq(clean_python, tmp_path):
    from conftest import run_clean

    tok = build_wordpiece_tokenizer(CORPUS * 5, vocab_size=120, min_frequency=1)
    tok.save_pretrained(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert "hf_seq" not in json.dumps(config)
    code = (
        "from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(tmp_path / 'tok')!r})\n"
        "e = t('the cat', 'a dog')\n"
        "print(e['input_ids'], e['token_type_ids'], t.mask_token)\n"
    )
    result = run_clean(clean_python, code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    enc = tok("the cat", "a dog")
    assert result.stdout.strip() == f"{enc['input_ids']} {enc['token_type_ids']} [MASK]"
