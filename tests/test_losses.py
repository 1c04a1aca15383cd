"""The shared language-model head loss (``hf_seq.losses.linear_cross_entropy``) against ``F.linear`` +
``F.cross_entropy`` with the same weights: values, every gradient, padded rows, logits used by a second loss, bf16
autocast, and bad labels."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hf_seq.losses import linear_cross_entropy, lm_head_and_loss, masked_cross_entropy

N, D, V = 12, 8, 30


def _inputs(bias: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, D, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, D, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True) if bias else None
    labels = torch.randint(0, V, (N,), generator=g)
    labels[[1, 4, 5, 11]] = -100  # padded rows
    return hidden, weight, b, labels


def _reference(hidden, weight, bias, labels):
    logits = F.linear(hidden, weight, bias)
    return logits, F.cross_entropy(logits, labels, ignore_index=-100)


def _grads(loss, tensors):
    return torch.autograd.grad(loss, [t for t in tensors if t is not None])


@pytest.mark.parametrize("bias", [False, True])
def test_equals_linear_then_cross_entropy_values_and_gradients(bias):
    hidden, weight, b, labels = _inputs(bias)
    logits, loss = linear_cross_entropy(hidden, weight, labels, b)
    ref_logits, ref_loss = _reference(hidden, weight, b, labels)
    torch.testing.assert_close(logits, ref_logits)
    torch.testing.assert_close(loss, ref_loss)
    for got, want in zip(_grads(loss, (hidden, weight, b)), _grads(ref_loss, (hidden, weight, b))):
        torch.testing.assert_close(got, want)
    # the fused backward really skips the padded rows: their hidden gradient is exactly zero
    (grad_hidden,) = torch.autograd.grad(linear_cross_entropy(hidden, weight, labels, b)[1], hidden)
    assert torch.all(grad_hidden[labels == -100] == 0)
    assert torch.all(grad_hidden[labels != -100].abs().sum(-1) > 0)


def test_gradient_through_the_logits_is_added():
    """A second loss on the returned logits must reach the inputs as with the unfused pair."""
    hidden, weight, b, labels = _inputs(True, seed=1)
    probe = torch.randn(N, V, dtype=torch.float64)
    logits, loss = linear_cross_entropy(hidden, weight, labels, b)
    ref_logits, ref_loss = _reference(hidden, weight, b, labels)
    got = _grads(loss + (logits * probe).sum(), (hidden, weight, b))
    want = _grads(ref_loss + (ref_logits * probe).sum(), (hidden, weight, b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # logits alone (loss unused)
    got = _grads((linear_cross_entropy(hidden, weight, labels, b)[0] * probe).sum(), (hidden, weight, b))
    want = _grads((F.linear(hidden, weight, b) * probe).sum(), (hidden, weight, b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_batched_shapes_and_all_padding():
    hidden, weight, _, labels = _inputs(False, seed=2)
    logits, loss = linear_cross_entropy(hidden.view(3, 4, D), weight, labels.view(3, 4))
    assert logits.shape == (3, 4, V)
    torch.testing.assert_close(loss, _reference(hidden, weight, None, labels)[1])
    empty = torch.full((N,), -100)
    _, zero = linear_cross_entropy(hidden, weight, empty)
    assert zero.item() == 0.0 and not torch.isnan(zero)
    (grad,) = torch.autograd.grad(zero, hidden)
    assert torch.all(grad == 0)
    with torch.no_grad():  # the graph-free path gives the same numbers
        _, plain = linear_cross_entropy(hidden, weight, labels)
    torch.testing.assert_close(plain, _reference(hidden, weight, None, labels)[1])


def test_bf16_autocast_stays_close_to_float32():
    hidden, weight, _, labels = _inputs(False, seed=3)
    hidden32, weight32 = hidden.detach().float().requires_grad_(), weight.detach().float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = linear_cross_entropy(hidden32, weight32, labels)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    grads = torch.autograd.grad(loss, (hidden32, weight32))
    assert [g.dtype for g in grads] == [torch.float32, torch.float32]
    ref_loss = _reference(hidden32, weight32, None, labels)[1]
    torch.testing.assert_close(loss, ref_loss, rtol=0.05, atol=0.05)
    for g, w in zip(grads, _grads(ref_loss, (hidden32, weight32))):
        torch.testing.assert_close(g, w, rtol=0.1, atol=0.02)


def test_bad_labels_are_named():
    hidden, weight, _, labels = _inputs(False)
    with pytest.raises(ValueError, match=r"`labels` must be -100 \(ignored\) or in \[0, vocab_size=30\)"):
        linear_cross_entropy(hidden, weight, torch.cat([labels[:-1], torch.tensor([V])]))
    with pytest.raises(ValueError, match="`labels` must have shape"):
        linear_cross_entropy(hidden, weight, labels[:-1])
    with pytest.raises(ValueError, match="integer token ids"):
        linear_cross_entropy(hidden, weight, labels.float())


def test_wrapped_head_uses_the_module():
    """A head with a forward hook (an adapter, a wrapper) is called as a module, not bypassed."""
    hidden, weight, b, labels = _inputs(True, seed=4)
    head = nn.Linear(D, V).double()
    calls = []
    head.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    logits, loss = lm_head_and_loss(head, hidden, labels)
    assert calls == [(N, V)]
    torch.testing.assert_close(loss, F.cross_entropy(head(hidden), labels, ignore_index=-100))


def test_losses_and_value_checks_compile_without_graph_breaks_and_equal_eager():
    """The shared loss and label checks read no tensor values when traced (no graph break, no host sync on an
    accelerator): fullgraph compilation works and gives the eager values; eager CPU still checks the values."""
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    weight = torch.randn(11, 8, requires_grad=True)
    labels = torch.randint(0, 11, (3, 5))
    labels[0, :3] = -100

    def step(h, w, y):
        logits, loss = linear_cross_entropy(h, w, y)
        return loss + masked_cross_entropy(logits, y)

    explained = torch._dynamo.explain(step)(hidden, weight, labels)
    assert explained.graph_break_count == 0, explained.break_reasons
    eager = step(hidden, weight, labels)
    eager_grads = torch.autograd.grad(eager, (hidden, weight))
    compiled = torch.compile(step, fullgraph=True, backend="eager")(hidden, weight, labels)
    compiled_grads = torch.autograd.grad(compiled, (hidden, weight))
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    for got, want in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    all_ignored = torch.full((3, 5), -100)
    assert torch.compile(step, fullgraph=True, backend="eager")(hidden, weight, all_ignored).item() == 0.0
    with pytest.raises(ValueError, match="vocab_size=11"):
        step(hidden, weight, labels + 20)  # eager CPU: out-of-range labels are still a clear error


def test_float_labels_are_refused_not_truncated():
    logits = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"`labels` must be integer class ids .*torch.float32"):
        masked_cross_entropy(logits, torch.tensor([0.0, 1.7, 2.0, -100.0]))  # 1.7 would become class 1


def test_only_a_plain_linear_head_takes_the_fused_loss(monkeypatch):
    """The fused backward runs only for an exact ``nn.Linear`` (a subclass may change forward) in eager CPU training;
    either way the loss and gradients are those of the module + cross-entropy."""
    import hf_seq.losses as losses

    class Scaled(nn.Linear):
        def forward(self, x):
            return 2.0 * super().forward(x)

    hidden, _, _, labels = _inputs(False, seed=5)
    fused = []
    original = losses._LinearCrossEntropy.apply
    monkeypatch.setattr(losses._LinearCrossEntropy, "apply", lambda *a: fused.append(1) or original(*a))
    for head, expect_fused in ((nn.Linear(D, V).double(), True), (Scaled(D, V).double(), False)):
        fused.clear()
        logits, loss = lm_head_and_loss(head, hidden, labels)
        assert bool(fused) is expect_fused
        torch.testing.assert_close(loss, F.cross_entropy(head(hidden), labels, ignore_index=-100))
        torch.testing.assert_close(logits, head(hidden))
