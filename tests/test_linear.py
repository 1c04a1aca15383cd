"""hf_seq.linear: the input-major weight copy used while decoding equals ``F.linear`` and never goes stale."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hf_seq
from hf_seq import linear as linear_module
from hf_seq.linear import INPUT_MAJOR_MAX_ROWS, Linear, input_major_weights


def reference(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer.weight, layer.bias)


@pytest.mark.parametrize("bias", [True, False])
def test_inside_the_context_small_inputs_use_the_copy_and_equal_f_linear(bias):
    torch.manual_seed(0)
    layer = Linear(24, 40, bias=bias)
    x = torch.randn(3, 2, 24)  # 6 rows
    with torch.no_grad():
        outside = layer(x)
        assert layer._weight_t is None  # no copy outside the context
        with input_major_weights(layer):
            inside = layer(x)
            copy = layer._weight_t
            assert copy is not None and copy.shape == (24, 40) and copy.is_contiguous()
            assert torch.equal(copy, layer.weight.t())
            layer(x)
            assert layer._weight_t is copy  # reused while the weight is unchanged
    assert inside.shape == (3, 2, 40)
    torch.testing.assert_close(inside, reference(layer, x), rtol=1e-6, atol=1e-6)
    assert torch.equal(outside, reference(layer, x))
    assert layer._weight_t is None and layer._input_major_depth == 0  # freed on exit


def test_copy_is_rebuilt_when_the_weight_changes_and_never_outlives_the_context():
    torch.manual_seed(0)
    layer = Linear(8, 5)
    x = torch.randn(4, 8)
    with torch.no_grad(), input_major_weights(layer):
        layer(x)
        layer.weight.mul_(2.0)  # in place: the version counter changes
        torch.testing.assert_close(layer(x), reference(layer, x))
        layer.weight = nn.Parameter(torch.randn(5, 8))  # another tensor
        torch.testing.assert_close(layer(x), reference(layer, x))
    layer.weight.data.add_(1.0)  # invisible to the version counter, but outside any context
    with torch.no_grad(), input_major_weights(layer):
        torch.testing.assert_close(layer(x), reference(layer, x))


def test_large_inputs_training_and_autocast_use_f_linear():
    torch.manual_seed(0)
    layer = Linear(8, 5)
    with input_major_weights(layer):
        with torch.no_grad():
            layer(torch.randn(INPUT_MAJOR_MAX_ROWS + 1, 8))
            assert layer._weight_t is None  # too many rows
        x = torch.randn(4, 8, requires_grad=True)
        out = layer(x)  # gradient needed for the weight
        assert layer._weight_t is None
        out.sum().backward()
        torch.testing.assert_close(layer.weight.grad, x.detach().sum(0).expand(5, 8))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(torch.randn(4, 8)).dtype == torch.bfloat16
        assert layer._weight_t is None
        with torch.no_grad():
            with pytest.raises(RuntimeError):
                layer(torch.randn(4, 9))  # a wrong width still gets F.linear's error, never a silent reshape


def test_nested_contexts_keep_the_copy_until_the_outer_one_ends():
    layer = Linear(8, 5)
    with torch.no_grad(), input_major_weights(layer):
        with input_major_weights(layer):
            layer(torch.randn(2, 8))
            assert layer._input_major_depth == 2
        assert layer._input_major_depth == 1 and layer._weight_t is not None
    assert layer._input_major_depth == 0 and layer._weight_t is None


def _tiny_transformer() -> hf_seq.TransformerForConditionalGeneration:
    torch.manual_seed(0)
    config = hf_seq.HfSeqTransformerConfig(
        vocab_size=40,
        d_model=16,
        encoder_layers=1,
        decoder_layers=2,
        attention_heads=2,
        ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=3,
        decoder_start_token_id=2,
    )
    model = hf_seq.TransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.3)
    return model


@pytest.mark.parametrize("kwargs", [dict(do_sample=False), dict(num_beams=3)])
def test_generate_uses_the_copies_and_gives_the_plain_result(monkeypatch, kwargs):
    model = _tiny_transformer()
    src = torch.tensor([[5, 9, 12, 7, 3], [8, 17, 3, 0, 0]])
    mask = (src != 0).long()
    generate = dict(input_ids=src, attention_mask=mask, max_new_tokens=12, min_new_tokens=12, **kwargs)
    built = []
    original = Linear.input_major_weight
    monkeypatch.setattr(Linear, "input_major_weight", lambda self: built.append(self) or original(self))
    fast = model.generate(**generate, output_scores=True, return_dict_in_generate=True)
    assert {id(m) for m in built} >= {id(model.lm_head), id(model.model.decoder.layers[1].ffn.fc2)}
    assert all(m._weight_t is None for m in model.modules() if isinstance(m, Linear))  # freed after generate
    monkeypatch.setattr(linear_module, "INPUT_MAJOR_MAX_ROWS", 0)  # never take the input-major path
    built.clear()
    plain = model.generate(**generate, output_scores=True, return_dict_in_generate=True)
    assert not built
    assert torch.equal(fast.sequences, plain.sequences)
    for a, b in zip(fast.scores, plain.scores):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_concurrent_generate_calls_leave_no_copy_behind():
    from concurrent.futures import ThreadPoolExecutor

    model = _tiny_transformer()
    src = torch.tensor([[5, 9, 12, 7, 3]])
    expected = model.generate(input_ids=src, max_new_tokens=8, min_new_tokens=8)
    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(lambda _: model.generate(input_ids=src, max_new_tokens=8, min_new_tokens=8), range(8)))
    assert all(torch.equal(out, expected) for out in outputs)
    layers = [m for m in model.modules() if isinstance(m, Linear)]
    assert all(m._input_major_depth == 0 and m._weight_t is None for m in layers)
