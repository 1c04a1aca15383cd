"""Tests of the recurrent core (hf_seq/recurrent.py): cell path == torch.nn, padding invariance, state layout."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch
from torch import nn

from hf_seq.recurrent import CELL_TYPES, CellType, RecurrentStack, get_cell_type, register_cell, rnn_step

CELLS = ["rnn", "lstm", "gru"]
TORCH = {"rnn": nn.RNN, "lstm": nn.LSTM, "gru": nn.GRU}
IN, H = 5, 4


def make_pair(cell, bidirectional, num_layers, seed=0):
    """A fused and a cell stack holding the same weights (cell path loads the fused path's state_dict)."""
    torch.manual_seed(seed)
    fused = RecurrentStack(cell, IN, H, num_layers=num_layers, bidirectional=bidirectional, implementation="fused")
    explicit = RecurrentStack(cell, IN, H, num_layers=num_layers, bidirectional=bidirectional, implementation="cell")
    explicit.load_state_dict(fused.state_dict())  # same names and shapes on both paths
    return fused.eval(), explicit.eval()


def as_tuple(state):
    return state if isinstance(state, tuple) else (state,)


@pytest.mark.parametrize("cell,bidirectional,num_layers", list(itertools.product(CELLS, [False, True], [1, 2])))
def test_matches_torch_nn_with_copied_weights(cell, bidirectional, num_layers):
    """Both implementations equal a stand-alone torch.nn module (multi-layer) with the weights copied in."""
    fused, explicit = make_pair(cell, bidirectional, num_layers)
    reference = TORCH[cell](IN, H, num_layers=num_layers, bidirectional=bidirectional, batch_first=True)
    with torch.no_grad():
        for k in range(num_layers):
            for suffix in ["", "_reverse"] if bidirectional else [""]:
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(reference, f"{name}_l{k}{suffix}").copy_(getattr(fused.layers[k], f"{name}_l0{suffix}"))
    x = torch.randn(3, 7, IN)
    ref_out, ref_state = reference(x)
    for stack in (fused, explicit):
        out, state = stack(x)
        torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=0)
        for a, b in zip(state, as_tuple(ref_state)):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def padded_batch(lengths, seq_len, side):
    torch.manual_seed(1)
    seqs = [torch.randn(n, IN) for n in lengths]
    x = torch.zeros(len(seqs), seq_len, IN)
    mask = torch.zeros(len(seqs), seq_len, dtype=torch.long)
    for b, s in enumerate(seqs):
        n = len(s)
        sl = slice(0, n) if side == "right" else slice(seq_len - n, seq_len)
        x[b, sl] = s
        x[b, (slice(n, seq_len) if side == "right" else slice(0, seq_len - n))] = 9.0  # garbage in the padding
        mask[b, sl] = 1
    return seqs, x, mask


@pytest.mark.parametrize("cell,bidirectional,side", list(itertools.product(CELLS, [False, True], ["left", "right"])))
def test_padding_invariance_and_cell_equals_fused(cell, bidirectional, side):
    """Every padded row gives exactly the unpadded sequence's outputs and final state, on both paths."""
    fused, explicit = make_pair(cell, bidirectional, num_layers=2)
    lengths, seq_len = [6, 3, 1, 6], 6
    seqs, x, mask = padded_batch(lengths, seq_len, side)
    results = {}
    for name, stack in (("fused", fused), ("cell", explicit)):
        out, state = stack(x, attention_mask=mask)
        results[name] = (out, state)
        for b, seq in enumerate(seqs):
            alone_out, alone_state = stack(seq.unsqueeze(0))
            n = len(seq)
            real = out[b, :n] if side == "right" else out[b, seq_len - n :]
            pad = out[b, n:] if side == "right" else out[b, : seq_len - n]
            torch.testing.assert_close(real, alone_out[0], atol=1e-5, rtol=0)
            assert torch.equal(pad, torch.zeros_like(pad)), "padded outputs must be zero"
            for s_batch, s_alone in zip(state, alone_state):
                torch.testing.assert_close(s_batch[:, b], s_alone[:, 0], atol=1e-5, rtol=0)
    for a, b in zip(results["fused"][1], results["cell"][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(results["fused"][0], results["cell"][0], atol=1e-5, rtol=0)


def test_bidirectional_final_state_semantics():
    """Forward final h = output at the last real token; backward final h = backward output at the first token."""
    fused, _ = make_pair("lstm", True, 1)
    _, x, mask = padded_batch([5, 2], 5, "left")
    out, (h, c) = fused(x, attention_mask=mask)
    torch.testing.assert_close(h[0], out[:, -1, :H])  # left padding: last real token is at T-1
    torch.testing.assert_close(h[1, 0], out[0, 0, H:])
    torch.testing.assert_close(h[1, 1], out[1, 3, H:])  # row 1's first real token is at position 3


@pytest.mark.parametrize("implementation", ["fused", "cell"])
def test_step_by_step_with_state_equals_full_run(implementation):
    """T=1 steps carrying the state reproduce the full run (how decoders and generation use the stack)."""
    torch.manual_seed(0)
    stack = RecurrentStack("lstm", IN, H, num_layers=2, implementation=implementation).eval()
    x = torch.randn(2, 5, IN)
    full, full_state = stack(x)
    state, outs = None, []
    for t in range(5):
        out, state = stack(x[:, t : t + 1], state=state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, 1), full, atol=1e-6, rtol=0)
    for a, b in zip(state, full_state):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_given_state_with_padding_and_empty_row():
    """An initial state is used with packing; a row with no real token keeps its initial state, outputs zero."""
    fused, explicit = make_pair("gru", False, 2)
    torch.manual_seed(3)
    x = torch.randn(3, 4, IN)
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]])
    init = (torch.randn(2, 3, H),)
    out_f, st_f = fused(x, attention_mask=mask, state=init)
    out_c, st_c = explicit(x, attention_mask=mask, state=init)
    torch.testing.assert_close(out_f, out_c, atol=1e-5, rtol=0)
    torch.testing.assert_close(st_f[0], st_c[0], atol=1e-5, rtol=0)
    assert torch.equal(st_f[0][:, 1], init[0][:, 1])
    assert torch.equal(out_f[1], torch.zeros_like(out_f[1]))
    alone, alone_state = fused(x[2:, 1:], state=(init[0][:, 2:],))
    torch.testing.assert_close(out_f[2, 1:], alone[0], atol=1e-5, rtol=0)


def test_hidden_states_per_layer():
    fused, explicit = make_pair("lstm", True, 3)
    _, x, mask = padded_batch([4, 2], 4, "right")
    out_f, _, layers_f = fused(x, attention_mask=mask, output_hidden_states=True)
    out_c, _, layers_c = explicit(x, attention_mask=mask, output_hidden_states=True)
    assert len(layers_f) == len(layers_c) == 3 and layers_f[0].shape == (2, 4, 2 * H)
    assert torch.equal(layers_f[-1], out_f)
    for a, b in zip(layers_f, layers_c):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_gradients_flow_on_both_paths():
    fused, explicit = make_pair("lstm", True, 2)
    _, x, mask = padded_batch([4, 2], 4, "left")
    grads = []
    for stack in (fused, explicit):
        out, _ = stack(x, attention_mask=mask)
        out.sum().backward()
        grads.append(stack.layers[1].weight_hh_l0_reverse.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="cell"):
        RecurrentStack("transformer", IN, H)
    with pytest.raises(ValueError, match="hidden_size"):
        RecurrentStack("lstm", IN, 0)
    with pytest.raises(ValueError, match="implementation"):
        RecurrentStack("lstm", IN, H, implementation="cudnn")
    stack = RecurrentStack("lstm", IN, H)
    with pytest.raises(ValueError, match="inputs"):
        stack(torch.randn(2, 3, IN + 1))
    with pytest.raises(ValueError, match="attention_mask"):
        stack(torch.randn(2, 3, IN), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="attention_mask"):
        stack(torch.randn(2, 3, IN), attention_mask=torch.tensor([[1, 0, 1], [1, 1, 1]]))
    with pytest.raises(ValueError, match="state"):
        stack(torch.randn(2, 3, IN), state=(torch.zeros(1, 2, H),))


def test_register_a_new_cell_type():
    """Plug-in point: a cell registered with only a step function runs on the cell path (even if "fused")."""

    def build(input_size, hidden_size, bidirectional):
        return nn.RNN(input_size, hidden_size, batch_first=True, bidirectional=bidirectional, bias=False)

    register_cell(CellType("test_plain_rnn", num_gates=1, num_states=1, step=rnn_step, build_layer=build))
    try:
        stack = RecurrentStack("test_plain_rnn", IN, H, bidirectional=True)
        assert not stack.uses_fused_path
        reference = stack.layers[0]
        x = torch.randn(2, 3, IN)
        torch.testing.assert_close(stack(x)[0], reference(x)[0], atol=1e-5, rtol=0)
        assert get_cell_type("test_plain_rnn").num_states == 1
    finally:
        CELL_TYPES.pop("test_plain_rnn")


# ---------------------------------------------------------------------------------------------------------------
# The static path (what torch.compile / torch.export / an accelerator run) and the layer as a unit
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cell,bidirectional", list(itertools.product(CELLS, [False, True])))
def test_static_path_equals_packed_path(cell, bidirectional):
    """Without host reads (no packing, no shortcuts) the outputs, final state and every gradient equal the eager CPU
    path's: left and right padding, an empty row, a given initial state, several steps and a single step."""
    from recurrent_toolchain import on_accelerator_paths

    torch.manual_seed(0)
    stack = RecurrentStack(cell, IN, H, num_layers=2, bidirectional=bidirectional).train()
    num_states = 2 if cell == "lstm" else 1
    for seq_len, side, with_state in itertools.product([1, 5], ["left", "right"], [False, True]):
        lengths = [seq_len, max(seq_len - 2, 1), 0, 1]
        x = torch.randn(4, seq_len, IN, requires_grad=True)
        mask = torch.zeros(4, seq_len, dtype=torch.long)
        for b, n in enumerate(lengths):
            mask[b, :n] = 1
            if side == "left":
                mask[b] = mask[b].flip(0)
        state = None
        if with_state:
            shape = (2 * stack.num_directions, 4, H)
            state = tuple(torch.randn(shape, requires_grad=True) for _ in range(num_states))
        results = []
        for accelerator in (False, True):
            with on_accelerator_paths() if accelerator else contextlib.nullcontext():
                out, final = stack(x, attention_mask=mask, state=state)
            loss = out.pow(2).sum() + sum(s.pow(2).sum() for s in final)
            inputs = [x, *stack.parameters(), *(state or ())]
            results.append((out, final, torch.autograd.grad(loss, inputs)))
        (out, final, grads), (s_out, s_final, s_grads) = results
        torch.testing.assert_close(s_out, out, atol=1e-5, rtol=0)
        for a, b in zip(s_final, final):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        for a, b in zip(s_grads, grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
        assert torch.equal(s_out[2], torch.zeros_like(s_out[2]))  # the empty row outputs zeros


def test_static_path_carries_the_lstm_cell_state_exactly_through_padding():
    """The extra input column saturates the gates at padded steps: after four padded steps with large garbage
    inputs the kernel's c_n is still the state after the last real token (to float rounding; an unsaturated forget
    gate would shrink it every step), and the padding gets exactly no gradient."""
    from recurrent_toolchain import on_accelerator_paths

    torch.manual_seed(0)
    stack = RecurrentStack("lstm", IN, H)
    x = torch.randn(2, 6, IN)
    x[1, 2:] = 1e3  # large garbage in the padding of row 1
    x.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    with on_accelerator_paths():
        out, (h, c) = stack(x, attention_mask=mask)
        _, (h_short, c_short) = stack(x[1:, :2].detach())
    torch.testing.assert_close(c[:, 1], c_short[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(h[:, 1], h_short[:, 0], atol=1e-6, rtol=0)
    (grad,) = torch.autograd.grad(c[:, 1].sum() + out[1].sum(), x)
    assert torch.equal(grad[1, 2:], torch.zeros_like(grad[1, 2:])) and grad[1, :2].abs().sum() > 0


def test_layers_are_units_with_torch_nn_parameters():
    """Each level is one RecurrentLayer: a GradientCheckpointingLayer (the unit of checkpointing and FSDP wrapping)
    whose parameters have torch.nn.LSTM's names and shapes, and not an nn.LSTM (TorchDynamo refuses those)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from hf_seq.recurrent import RecurrentLayer

    stack = RecurrentStack("lstm", IN, H, num_layers=2, bidirectional=True)
    for k, layer in enumerate(stack.layers):
        assert isinstance(layer, RecurrentLayer) and isinstance(layer, GradientCheckpointingLayer)
        assert not isinstance(layer, (nn.RNN, nn.LSTM, nn.GRU))
        reference = nn.LSTM(IN if k == 0 else 2 * H, H, batch_first=True, bidirectional=True)
        assert {n: t.shape for n, t in layer.state_dict().items()} == {
            n: t.shape for n, t in reference.state_dict().items()
        }


def test_eager_cpu_padding_plan_packs_sparse_batches_and_aligns_dense_lstm_batches():
    """Eager on CPU a padded LSTM batch with at least half real tokens runs the kernel over the padding (oneDNN's LSTM
    needs unpacked input; measured faster), a sparser one is packed; GRU/SimpleRNN batches are always packed. The
    results are the same either way (test_padding_invariance_and_cell_equals_fused covers both layouts)."""
    from hf_seq.recurrent import ALIGNED, ALIGNED_FILL, PACKED, make_padding_plan

    dense = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])  # 6 of 8 real
    sparse = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]])  # 6 of 16 real
    assert make_padding_plan(dense, 2, 4, PACKED, ALIGNED_FILL["LSTM"]).layout == ALIGNED
    assert make_padding_plan(sparse, 4, 4, PACKED, ALIGNED_FILL["LSTM"]).layout == PACKED
    assert make_padding_plan(dense, 2, 4, PACKED, ALIGNED_FILL.get("GRU")).layout == PACKED
    assert make_padding_plan(torch.ones(2, 4, dtype=torch.long), 2, 4, PACKED, 0.5) is None


def test_choose_kernel_is_the_one_rule_for_a_layer():
    from hf_seq import fast_paths
    from hf_seq.recurrent import ALIGNED_FILL, RecurrentLayer, choose_kernel, make_padding_plan

    fused, cell = RecurrentLayer("lstm", 3, 4), RecurrentLayer("lstm", 3, 4, implementation="cell")
    x = torch.zeros(2, 4, 3)
    sparse = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]])  # fill 3/8: packed
    dense = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])  # fill 7/8: aligned (the LSTM)
    assert choose_kernel(fused, x, None) == "full"
    assert choose_kernel(fused, x, make_padding_plan(sparse, 2, 4, "packed", ALIGNED_FILL["LSTM"])) == "packed"
    assert choose_kernel(fused, x, make_padding_plan(dense, 2, 4, "packed", ALIGNED_FILL["LSTM"])) == "aligned"
    step = make_padding_plan(torch.tensor([[1], [0]]), 2, 1, "packed", ALIGNED_FILL["LSTM"])
    assert step.layout == "aligned" and choose_kernel(fused, x[:, :1], step) == "one_step"
    assert choose_kernel(cell, x, make_padding_plan(sparse, 2, 4, "padded")) == "cell"
    assert choose_kernel(cell, x, None) == "cell"
    with fast_paths.disabled():  # the static path: never packed
        assert choose_kernel(fused, x, make_padding_plan(sparse, 2, 4, "packed", ALIGNED_FILL["LSTM"])) == "aligned"
