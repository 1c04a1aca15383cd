"""Data loaders on the installed corpora (``make data``): fixed splits, no leakage, known corpus facts."""

from __future__ import annotations

import re

import pyarrow.compute as pc
import pytest

from hf_seq.toolkit import data as D


def _unique(dataset, column: str) -> set:
    """Distinct values of a column, computed in Arrow (fast on the 57k-row Brown splits)."""
    return set(pc.unique(dataset.data.column(column)).to_pylist())


# --------------------------------------------------------------------------------------------- without corpora
@pytest.mark.parametrize(
    "loader",
    [D.load_sentiment, D.load_translation, D.load_brown, D.load_brown_documents, D.load_shakespeare, D.load_ptb],
)
def test_missing_corpus_names_make_data(loader, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SEQ_DATA", str(tmp_path))
    assert D.data_dir() == tmp_path.resolve()
    with pytest.raises(FileNotFoundError, match="make data"):
        loader()


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="max_words"):
        D.load_translation(max_words=0)
    with pytest.raises(ValueError, match="seed"):
        D.load_sentiment(seed="42")


@pytest.mark.parametrize(
    ("tag", "coarse"),
    [
        ("nn", "NOUN"),
        ("np-tl", "NOUN"),
        ("np$", "NOUN"),
        ("nns-hl", "NOUN"),
        ("vbz", "VERB"),
        ("bez*", "VERB"),
        ("md*", "VERB"),
        ("hvd", "VERB"),
        ("jj-tl", "ADJ"),
        ("od", "ADJ"),
        ("rb", "ADV"),
        ("*", "ADV"),
        ("ql", "ADV"),
        ("pps+bez", "PRON"),
        ("pp$", "PRON"),
        ("pp$$", "PRON"),
        ("at", "DET"),
        ("ex", "DET"),
        ("wdt+bez-hl", "DET"),
        ("in", "ADP"),
        ("cs", "ADP"),
        ("cd", "NUM"),
        ("cc", "CONJ"),
        ("to", "PRT"),
        ("rp", "PRT"),
        ("fw-nn", "X"),
        ("fw-in+at-t", "X"),
        ("uh", "X"),
        (",", "."),
        (",-hl", "."),
        ("``", "."),
        ("--", "."),
    ],
)
def test_brown_coarse_tag_examples(tag, coarse):
    assert coarse in D.BROWN_COARSE_TAGS
    assert D.brown_coarse_tag(tag) == coarse


def test_brown_coarse_tag_rejects_unknown():
    with pytest.raises(KeyError, match="zzz"):
        D.brown_coarse_tag("zzz")


def test_clean_sword_markup_per_tag():
    # a word split by a closing tag stays one word (KJV "give</w>n")
    assert D.clean_sword_markup('was <w lemma="x">give</w>n him') == "was given him"
    # closing + opening tag between two words becomes a space (RV1909)
    assert (
        D.clean_sword_markup('<w lemma="x">allí</w><transChange type="added">también</transChange>') == "allí también"
    )
    # notes vanish with their content, no space is left before punctuation
    assert D.clean_sword_markup('light<note placement="foot">Heb. between</note>, and') == "light, and"
    # psalm titles keep their words, other titles go
    assert D.clean_sword_markup('<title type="psalm">A Psalm.</title> <l level="1"/>LORD') == "A Psalm. LORD"
    assert D.clean_sword_markup("<title>Heading</title> Blessed") == "Blessed"
    assert D.clean_sword_markup("<title><foreign>ב BETH.</foreign></title> <l/>Wherewithal") == "BETH. Wherewithal"
    # paragraph sign and USFM markers
    assert D.clean_sword_markup('<div type="x-p"/>¶ And the \\nd LORD\\+nd* said') == "And the LORD said"


# --------------------------------------------------------------------------------------------- on the corpora
@pytest.fixture(scope="module")
def sentiment():
    return D.load_sentiment()


@pytest.fixture(scope="module")
def translation():
    return D.load_translation()


@pytest.fixture(scope="module")
def brown():
    return D.load_brown()


@pytest.mark.data
def test_sentiment_splits_dedup_and_labels(sentiment):
    assert {k: len(v) for k, v in sentiment.items()} == {"train": 10201, "validation": 1275, "test": 1275}
    assert sentiment["train"].features["label"].names == ["negative", "positive"]
    keys = {k: [t.casefold() for t in v["text"]] for k, v in sentiment.items()}
    for name, texts in keys.items():
        assert len(texts) == len(set(texts)), f"duplicates inside {name}"
    assert not set(keys["train"]) & set(keys["test"])
    assert not set(keys["train"]) & set(keys["validation"])
    assert not set(keys["validation"]) & set(keys["test"])
    labels = sentiment["train"]["label"]
    assert set(labels) == {0, 1}
    assert 0.5 < sum(labels) / len(labels) < 0.65  # 7,403 fresh vs 5,405 rotten reviews


@pytest.mark.data
def test_sentiment_split_depends_only_on_seed(sentiment):
    again = D.load_sentiment(seed=42)
    assert again["test"]["text"] == sentiment["test"]["text"]
    other = D.load_sentiment(seed=7)
    assert other["test"]["text"] != sentiment["test"]["text"]
    assert sorted(t for s in other.values() for t in s["text"]) == sorted(
        t for s in sentiment.values() for t in s["text"]
    )


@pytest.mark.data
def test_translation_pairs_and_alignment(translation):
    sizes = {k: len(v) for k, v in translation.items()}
    assert sizes == {"train": 27976, "validation": 1554, "test": 1554}
    assert sum(sizes.values()) == 31084
    by_ref = {}
    for split in translation.values():
        for ref, pair in zip(split["ref"], split["translation"]):
            assert ref not in by_ref, f"{ref} in two splits"
            by_ref[ref] = pair
    assert by_ref["Gen 1:1"] == {
        "en": "In the beginning God created the heaven and the earth.",
        "es": "EN el principio crió Dios los cielos y la tierra.",
    }
    assert by_ref["John 11:35"] == {"en": "Jesus wept.", "es": "Y lloró Jesús."}
    assert by_ref["Rev 22:21"]["es"].startswith("La gracia de nuestro Señor Jesucristo")
    # KJV psalm titles are kept because RV1909 has them in the verse text
    assert by_ref["Ps 3:1"]["en"].startswith("A Psalm of David, when he fled from Absalom")
    assert by_ref["Ps 3:1"]["es"].startswith("Salmo de David, cuando huía")
    markup = re.compile(r"[<>¶\\]|\s[,.;:?!]|\s\s")
    for pair in by_ref.values():
        for text in pair.values():
            assert not markup.search(text), text


@pytest.mark.data
def test_translation_max_words_filters_after_split(translation):
    short = D.load_translation(max_words=20)
    assert 0 < len(short["test"]) < len(translation["test"])
    assert set(short["test"]["ref"]) <= set(translation["test"]["ref"])
    for pair in short["train"]["translation"]:
        assert max(len(pair["en"].split()), len(pair["es"].split())) <= 20


@pytest.mark.data
def test_brown_document_split(brown):
    docs = {k: _unique(v, "doc_id") for k, v in brown.items()}
    assert sum(len(d) for d in docs.values()) == 500
    assert not docs["train"] & docs["test"]
    assert not docs["train"] & docs["validation"]
    assert not docs["validation"] & docs["test"]
    assert {k: len(v) for k, v in docs.items()} == {"train": 396, "validation": 52, "test": 52}
    genres = _unique(brown["train"], "genre")
    assert len(genres) == 15
    for split in ("validation", "test"):
        assert _unique(brown[split], "genre") == genres  # stratified: every genre held out
    assert sum(len(s) for s in brown.values()) == 57340
    assert sum(pc.sum(pc.list_value_length(s.data.column("tokens"))).as_py() for s in brown.values()) == 1161192
    first = brown["train"][0]
    assert first["doc_id"] == "ca01" and first["tokens"][:3] == ["The", "Fulton", "County"]
    assert first["tags"][:3] == ["at", "np-tl", "nn-tl"]
    assert first["coarse_tags"][:3] == ["DET", "NOUN", "NOUN"]


@pytest.mark.data
def test_brown_coarse_tags_cover_every_tag(brown):
    allowed = set(D.BROWN_COARSE_TAGS)
    seen: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    for split in brown.values():
        table = split.data
        lengths = [pc.list_value_length(table.column(c)) for c in ("tokens", "tags", "coarse_tags")]
        assert lengths[0].equals(lengths[1]) and lengths[0].equals(lengths[2])
        tags = pc.list_flatten(table.column("tags"))
        coarse = pc.list_flatten(table.column("coarse_tags"))
        seen |= set(pc.unique(coarse).to_pylist())
        pairs |= set(zip(tags.to_pylist()[::97], coarse.to_pylist()[::97]))
    assert seen == allowed  # every coarse tag is used, and nothing outside the set
    for tag, c in pairs:  # the stored column agrees with the mapping function
        assert D.brown_coarse_tag(tag) == c


@pytest.mark.data
def test_brown_documents_match_sentence_split(brown):
    docs = D.load_brown_documents()
    for name in ("train", "validation", "test"):
        assert set(docs[name]["doc_id"]) == _unique(brown[name], "doc_id")
        n_sentences = sum(len(p) for paragraphs in docs[name]["paragraphs"] for p in paragraphs)
        assert n_sentences == len(brown[name])
    paragraphs = docs["train"][0]["paragraphs"]
    assert paragraphs[0][0].startswith("The Fulton County Grand Jury said Friday")
    assert all(len(d) > 1 for d in docs["train"]["paragraphs"])  # NSP needs several paragraphs per document


@pytest.mark.data
def test_ptb_counts():
    ptb = D.load_ptb()
    assert {k: len(v) for k, v in ptb.items()} == {"train": 42068, "validation": 3370, "test": 3761}
    words = pc.list_flatten(pc.utf8_split_whitespace(ptb["train"].data.column("text")))
    assert len(words) == 887521
    vocab = set(pc.unique(words).to_pylist())
    assert len(vocab) == 9999  # + <eos> = the 10k vocabulary of Mikolov's setup
    assert "<unk>" in vocab and "N" in vocab
    assert ptb["validation"][0]["text"].startswith("consumers may want to move their telephones")


@pytest.mark.data
def test_shakespeare_works_split():
    sh = D.load_shakespeare()
    works = {k: set(v["work"]) for k, v in sh.items()}
    assert {k: len(v) for k, v in works.items()} == {"train": 34, "validation": 4, "test": 4}
    assert len(set().union(*works.values())) == 42
    assert not works["train"] & (works["validation"] | works["test"])
    texts = [t for split in sh.values() for t in split["text"]]
    assert 4_900_000 < sum(len(t) for t in texts) < 5_200_000
    assert not any("Project Gutenberg" in t for t in texts)
    assert "hamlet" in set().union(*works.values())
