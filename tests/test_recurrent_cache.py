"""The one recurrent cache protocol: the language model's RNNCache and the seq2seq decoder's RNNDecoderCache.

Both are ``hf_seq.recurrent.RecurrentCache``; the decoder's input-feeding vector and prepared keys are fields (data)
that every row operation and the export flattening treat like the state. Token-level equality of generation
(greedy, beam, sampling, cached == uncached) is in test_generation_rnn.py and test_modeling_rnn_seq2seq.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.utils._pytree as pytree

from hf_seq.modeling_rnn import RNNCache
from hf_seq.modeling_rnn_seq2seq import RNNDecoderCache
from hf_seq.recurrent import RecurrentCache


def decoder_cache(batch: int = 3) -> RNNDecoderCache:
    g = torch.Generator().manual_seed(0)
    state = (torch.randn(2, batch, 4, generator=g), torch.randn(2, batch, 4, generator=g))  # (L, B, H)
    feed = torch.randn(batch, 5, generator=g)  # (B, F)
    keys = torch.randn(batch, 6, 4, generator=g)  # (B, S, K)
    return RNNDecoderCache(state, feed, keys, seen_tokens=3)


def lm_cache(batch: int = 3) -> RNNCache:
    g = torch.Generator().manual_seed(1)
    return RNNCache(2, (torch.randn(2, batch, 4, generator=g), torch.randn(2, batch, 4, generator=g)), seen_tokens=5)


def test_both_caches_are_the_one_protocol():
    for cache in (lm_cache(), decoder_cache()):
        assert isinstance(cache, RecurrentCache)
        assert cache.is_linear == [True, True] and len(cache) == 2 and cache.batch_size() == 3
    assert RNNCache.batch_first_fields == () and RNNDecoderCache.batch_first_fields == ("feed", "keys")
    assert RNNCache(4).batch_size() is None and RNNCache(4).is_linear == [True] * 4  # before the first forward


@pytest.mark.parametrize("operation", ["reorder", "select", "repeat"])
def test_row_operations_move_the_state_and_the_fields_together(operation):
    cache, reference = decoder_cache(), decoder_cache()
    index = torch.tensor([2, 2, 0])
    if operation == "reorder":
        cache.reorder_cache(index)
    elif operation == "select":
        index = torch.tensor([0, 2])
        cache.batch_select_indices(index)
    else:
        index = torch.tensor([0, 0, 1, 1, 2, 2])
        cache.batch_repeat_interleave(2)
    for new, old in zip(cache.state, reference.state):
        assert torch.equal(new, old[:, index])  # batch on dim 1
    assert torch.equal(cache.feed, reference.feed[index]) and torch.equal(cache.keys, reference.keys[index])
    assert cache.seen_tokens == reference.seen_tokens


def test_fields_left_empty_stay_empty_and_unknown_fields_are_refused():
    cache = RNNDecoderCache(decoder_cache().state)  # a decoder without attention: no feed, no keys
    cache.reorder_cache(torch.tensor([1, 0, 2]))
    assert cache.feed is None and cache.keys is None
    with pytest.raises(TypeError, match="feeds"):
        cache.update(cache.state, 1, feeds=torch.zeros(3, 5))
    with pytest.raises(TypeError, match="unexpected fields"):
        RecurrentCache(1, None, 0, feed=None)  # the base class keeps no fields


@pytest.mark.parametrize("make", [lm_cache, decoder_cache, lambda: RNNCache(3)], ids=["lm", "decoder", "empty"])
def test_export_flattening_round_trips(make):
    """torch.export / ONNX see a cache as its tensors; unflattening gives back the same cache."""
    cache = make()
    leaves, spec = pytree.tree_flatten(cache)
    assert all(isinstance(leaf, torch.Tensor) for leaf in leaves)
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert type(rebuilt) is type(cache)
    assert (rebuilt.num_layers, rebuilt.seen_tokens) == (cache.num_layers, cache.seen_tokens)
    assert (rebuilt.state is None) == (cache.state is None)
    for name in ("state", *cache.batch_first_fields):
        new, old = getattr(rebuilt, name), getattr(cache, name)
        assert pytree.tree_structure(new) == pytree.tree_structure(old)
        for a, b in zip(pytree.tree_leaves(new), pytree.tree_leaves(old)):
            assert a is b
    keyed, _ = pytree.tree_flatten_with_path(cache)
    assert len(keyed) == len(leaves)
