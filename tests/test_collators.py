"""Tests of hf_seq/toolkit/collators.py: BERT pretraining pairs (next-sentence prediction) and masked-LM masking."""

from __future__ import annotations

import random

import pytest
import torch

from hf_seq.toolkit.collators import DataCollatorForBertPretraining, bert_pretraining_anchors, tokenize_documents
from hf_seq.toolkit.tokenization import build_wordpiece_tokenizer

MAX_LENGTH = 64


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    words = [f"{a}{v}{c}" for a in "bcdfghjklmnp" for v in "aeiou" for c in "bdgkmnst"]
    texts = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)] * 2
    texts += [" ".join(rng.choice(words) for _ in range(12)) for _ in range(200)]
    return build_wordpiece_tokenizer(texts, vocab_size=1000, min_frequency=1)


@pytest.fixture(scope="module")
def documents(tokenizer):
    """30 documents of token ids; each document draws from its own id range, so its tokens identify it."""
    rng = random.Random(1)
    n_special = len(tokenizer.all_special_ids)
    usable = list(range(max(tokenizer.all_special_ids) + 1, len(tokenizer)))
    per_doc = len(usable) // 30
    assert per_doc >= 5 and n_special == 5
    docs = []
    for d in range(30):
        ids = usable[d * per_doc : (d + 1) * per_doc]
        docs.append([[rng.choice(ids) for _ in range(rng.randint(4, 15))] for _ in range(rng.randint(6, 25))])
    return docs


def _doc_of(token: int, documents) -> int:
    return next(d for d, doc in enumerate(documents) if any(token in s for s in doc))


def _occurrences(stream: list[int], run: list[int]) -> list[int]:
    return [k for k in range(len(stream) - len(run) + 1) if stream[k : k + len(run)] == run]


def _batches(collator, documents, n_batches: int, batch_size: int = 32):
    anchors = bert_pretraining_anchors(documents, MAX_LENGTH)
    feats = [{"doc_index": d, "sentence_index": s} for d, s in zip(anchors["doc_index"], anchors["sentence_index"])]
    rng = random.Random(2)
    for _ in range(n_batches):
        yield collator([rng.choice(feats) for _ in range(batch_size)])


def test_anchors_leave_a_next_sentence(documents):
    anchors = bert_pretraining_anchors(documents, MAX_LENGTH)
    assert len(anchors["doc_index"]) > 30
    for d, s in zip(anchors["doc_index"], anchors["sentence_index"]):
        assert s < len(documents[d]) - 1
    with pytest.raises(ValueError, match="max_length"):
        bert_pretraining_anchors(documents, 4)


def test_layout_segments_and_truncation(tokenizer, documents):
    collator = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=0)
    batch = next(_batches(collator, documents, 1))
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    assert batch["input_ids"].shape[1] <= MAX_LENGTH
    for i in range(batch["input_ids"].shape[0]):
        n = int(batch["attention_mask"][i].sum())
        ids = batch["input_ids"][i, :n].tolist()
        types = batch["token_type_ids"][i, :n].tolist()
        assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
        seps = [j for j, t in enumerate(ids) if t == tokenizer.sep_token_id]
        assert len(seps) == 2  # [CLS] A [SEP] B [SEP]
        assert types == [0] * (seps[0] + 1) + [1] * (n - seps[0] - 1)
        assert batch["input_ids"][i, n:].eq(tokenizer.pad_token_id).all()
        assert batch["token_type_ids"][i, n:].eq(0).all()


def test_next_sentence_pairs_true_or_from_another_document(tokenizer, documents):
    """Label 0: A and B are runs of the anchor's document, B after A; label 1: B comes from a different document."""
    collator = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=3)
    streams = [[t for s in doc for t in s] for doc in documents]
    checked = {0: 0, 1: 0}
    for batch in _batches(collator, documents, 4):
        original = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        for i in range(original.shape[0]):
            n = int(batch["attention_mask"][i].sum())
            ids = original[i, :n].tolist()
            sep = ids.index(tokenizer.sep_token_id)
            a, b = ids[1:sep], ids[sep + 1 : n - 1]
            doc_a = _doc_of(a[0], documents)
            assert all(_doc_of(t, documents) == doc_a for t in a)
            label = int(batch["next_sentence_label"][i])
            if label == 0:  # truncation may cut A's end / B's start, so B follows A in the document, maybe with a gap
                stream = streams[doc_a]
                starts_a = _occurrences(stream, a)
                starts_b = _occurrences(stream, b)
                assert starts_a and starts_b and any(q >= p + len(a) for p in starts_a for q in starts_b)
            else:
                assert all(_doc_of(t, documents) != doc_a for t in b)
            checked[label] += 1
    assert checked[0] > 20 and checked[1] > 20


def test_masking_rates_and_nsp_balance(tokenizer, documents):
    collator = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=4)
    special = torch.tensor(tokenizer.all_special_ids)
    n_candidates = n_selected = n_mask = n_random = n_same = 0
    nsp = []
    for batch in _batches(collator, documents, 60):
        original = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        candidates = ~torch.isin(original, special)  # real, non-special tokens
        selected = batch["labels"] != -100
        assert not (selected & ~candidates).any()  # special tokens and padding are never selected
        ids = batch["input_ids"]
        n_candidates += int(candidates.sum())
        n_selected += int(selected.sum())
        n_mask += int((selected & (ids == tokenizer.mask_token_id)).sum())
        n_same += int((selected & (ids == original)).sum())
        changed = selected & (ids != original) & (ids != tokenizer.mask_token_id)
        n_random += int(changed.sum())
        assert not torch.isin(ids[changed], special).any()  # random replacements are ordinary tokens
        nsp.extend(batch["next_sentence_label"].tolist())
    assert n_candidates > 40_000
    assert abs(n_selected / n_candidates - 0.15) < 0.01
    # a random replacement equal to the original (probability 1/|vocab|) counts as unchanged here
    assert abs(n_mask / n_selected - 0.8) < 0.02
    assert abs(n_random / n_selected - 0.1) < 0.02
    assert abs(n_same / n_selected - 0.1) < 0.02
    assert abs(sum(nsp) / len(nsp) - 0.5) < 0.03


def test_special_tokens_never_masked_even_at_high_rate(tokenizer, documents):
    collator = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, mlm_probability=1.0, seed=5)
    batch = next(_batches(collator, documents, 1))
    specials = torch.isin(batch["input_ids"], torch.tensor([tokenizer.cls_token_id, tokenizer.sep_token_id]))
    assert specials.sum() == 3 * batch["input_ids"].shape[0]
    assert (batch["labels"][specials] == -100).all()
    assert (batch["labels"][batch["attention_mask"] == 0] == -100).all()
    real = (batch["attention_mask"] == 1) & ~specials
    assert (batch["labels"][real] != -100).all()  # with probability 1 every ordinary token is selected


def test_reproducible_with_seed_and_example_seed(tokenizer, documents):
    feats = [{"doc_index": d, "sentence_index": 0} for d in range(8)]
    one = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=7)(feats)
    two = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=7)(feats)
    assert all(torch.equal(one[k], two[k]) for k in one)
    collator = DataCollatorForBertPretraining(tokenizer, documents, max_length=MAX_LENGTH, seed=7)
    assert torch.equal(collator(feats)["input_ids"], one["input_ids"])
    second_call = collator(feats)  # fresh pairs/masks: the stream advanced
    assert not torch.equal(one["input_ids"], second_call["input_ids"]) or not torch.equal(
        one["next_sentence_label"], second_call["next_sentence_label"]
    )
    seeded = [dict(f, example_seed=100 + i) for i, f in enumerate(feats)]
    first, again = collator(seeded), collator(seeded)  # per-example seeds: identical every evaluation
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_tokenize_documents_and_bad_arguments(tokenizer, documents):
    docs = tokenize_documents([[["bab cec", "did"], ["fof"]], ["gab hec"]], tokenizer)
    assert len(docs) == 2 and len(docs[0]) == 3 and len(docs[1]) == 1
    assert all(tokenizer.cls_token_id not in s for d in docs for s in d)
    with pytest.raises(ValueError, match="mlm_probability"):
        DataCollatorForBertPretraining(tokenizer, documents, mlm_probability=1.5)
    with pytest.raises(ValueError, match="documents"):
        DataCollatorForBertPretraining(tokenizer, documents[:1])
    with pytest.raises(ValueError, match="mask_replace_prob"):
        DataCollatorForBertPretraining(tokenizer, documents, mask_replace_prob=0.9, random_replace_prob=0.2)
