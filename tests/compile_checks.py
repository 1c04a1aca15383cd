"""Checks that an hf_seq model goes through PyTorch's tool chain as ``transformers``' own models do.

Used by the Transformer and BERT test files, one call per head:

* :func:`assert_compiled_training_step_equals_eager` — ``torch.compile(model, fullgraph=True)`` (so no graph break)
  of a training forward with labels; loss and every gradient equal the eager step's (``rtol=1e-4``);
* :func:`assert_inference_compiles_without_graph_breaks` — the same for the inference forward (padded batch);
* :func:`assert_export_and_onnx_match` — ``torch.export.export`` and ``torch.onnx.export(..., dynamo=True)`` of the
  inference forward, run by onnxruntime, against the eager outputs (``atol=1e-4``);
* :func:`assert_quantize_dynamic_covers_every_linear` — ``quantize_dynamic(model, {nn.Linear})`` leaves no float
  ``nn.Linear`` and gives finite outputs;
* :func:`accelerator_path` + :class:`HostReads` — run the eager model on the code path an accelerator takes (every
  CPU fast path and value check off: ``hf_seq.fast_paths.disabled()``, ``hf_seq.validation.value_checks_disabled()``)
  and record every operator that reads a tensor value on the host (a device synchronisation on an accelerator).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from conftest import assert_same_outputs
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from hf_seq import fast_paths, validation


def gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient; None counts as zeros (a compiled graph returns zeros for unused outputs)."""
    return {n: torch.zeros_like(p) if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def scalar_objective(output, seed: int = 0) -> torch.Tensor:
    """The loss when the output has one, else a fixed random projection of the first output tensor."""
    if output.get("loss") is not None:
        return output.loss
    first = output.to_tuple()[0]
    weights = torch.randn(first.shape, generator=torch.Generator().manual_seed(seed))
    return (first * weights).sum()


def _step(model: nn.Module, batch: dict, run=None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and gradients of ``model`` after a forward (through ``run``, e.g. its compiled wrapper) and backward."""
    model.zero_grad(set_to_none=True)
    loss = scalar_objective((model if run is None else run)(**batch))
    loss.backward()
    grads = gradients(model)
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def assert_compiled_training_step_equals_eager(model: nn.Module, batch: dict, backend: str = "aot_eager") -> None:
    """Fullgraph-compiled training forward + backward equals eager: loss and every gradient (``rtol=1e-4``).

    The eager step on CPU takes the CPU fast paths (fused loss, padding-free feed-forward); the compiled one the
    static path an accelerator takes, so this also shows that the two paths compute the same loss and gradients."""
    model.train()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    loss_c, grads_c = _step(model, batch, run=compiled)
    loss_e, grads_e = _step(model, batch)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-4, atol=1e-6)
    assert grads_c.keys() == grads_e.keys()
    assert any(g.abs().sum() > 0 for g in grads_e.values())
    for name in grads_e:
        torch.testing.assert_close(grads_c[name], grads_e[name], rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


def _masked(masks: dict | None, name: str, value: torch.Tensor) -> torch.Tensor:
    """``value`` with the positions outside ``masks[name]`` (a ``(B, T)`` mask) zeroed, if ``name`` has a mask."""
    mask = (masks or {}).get(name)
    return value if mask is None else value * mask[..., None].to(value.dtype)


def assert_inference_compiles_without_graph_breaks(model: nn.Module, batch: dict, masks: dict | None = None) -> None:
    """The eval-mode forward compiles with ``fullgraph=True`` (dynamo only: any graph break is an error) and gives
    the eager outputs (``masks``: see :func:`assert_export_and_onnx_match`)."""
    model.eval()
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(**batch)
        got = torch.compile(model, fullgraph=True, backend="eager")(**batch)
    for name, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert_same_outputs(_masked(masks, name, got[name]), _masked(masks, name, value), msg=name)
    torch._dynamo.reset()


def assert_export_and_onnx_match(model: nn.Module, batch: dict, tmp_path, masks: dict | None = None) -> None:
    """``torch.export.export`` and ``torch.onnx.export(dynamo=True)`` of the inference forward; the exported program
    and onnxruntime give the eager outputs (onnxruntime to ``atol=1e-4``).

    ``masks`` maps an output name to a ``(B, T)`` mask of the positions to compare (the Transformer encoder's padded
    positions are computed differently, and read by nothing, in the eager CPU path)."""
    import onnxruntime

    model.eval()
    with torch.no_grad():
        expected = {k: v for k, v in model(**batch).items() if isinstance(v, torch.Tensor)}

    def comparable(name: str, value: torch.Tensor) -> torch.Tensor:
        return _masked(masks, name, value)

    program = torch.export.export(model, (), kwargs=batch)
    with torch.no_grad():
        exported = program.module()(**batch)
    for name, value in expected.items():
        assert_same_outputs(comparable(name, exported[name]), comparable(name, value), msg=name)

    onnx_program = torch.onnx.export(model, (), kwargs=batch, dynamo=True, verbose=False)
    path = tmp_path / f"{type(model).__name__}.onnx"
    onnx_program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: batch[i.name].numpy() for i in session.get_inputs()}
    got = session.run(None, feeds)
    assert len(got) == len(expected), (len(got), list(expected))
    for (name, value), result in zip(expected.items(), got):  # ModelOutput flattens in field order
        actual = torch.from_numpy(result)
        torch.testing.assert_close(comparable(name, actual), comparable(name, value), rtol=0, atol=1e-4, msg=name)


def assert_quantize_dynamic_covers_every_linear(model: nn.Module, batch: dict) -> None:
    """``hf_seq.toolkit.quantization.quantize_dynamic_int8(model)`` (torch's dynamic int8 quantization) replaces every
    ``nn.Linear`` (exact-type match, so no projection may be a subclass) and the int8 model gives finite outputs close
    to the float ones."""
    from hf_seq.toolkit.quantization import quantize_dynamic_int8

    model.eval()
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(model.get_submodule(n)) is nn.Linear for n in linears)
    quantized = quantize_dynamic_int8(model)
    left = [n for n, m in quantized.named_modules() if type(m) is nn.Linear]
    assert not left, f"not quantized: {left}"
    replaced = [n for n in linears if type(quantized.get_submodule(n)).__module__.startswith("torch.ao.nn.quantized")]
    assert replaced == linears
    with torch.no_grad():
        want = model(**batch).to_tuple()[0]
        got = quantized(**batch).to_tuple()[0]
    assert torch.isfinite(got).all()
    assert (got - want).abs().max() < 0.1 * want.abs().max() + 1e-3  # int8 rounding, not garbage


# ---------------------------------------------------------------------------------------------------------------
# The accelerator path, on CPU
# ---------------------------------------------------------------------------------------------------------------

# operators that read a tensor's value on the host (on an accelerator: a device synchronisation) or whose output
# shape depends on values
HOST_READ_OPS = {
    "_local_scalar_dense",
    "is_nonzero",
    "item",
    "equal",
    "nonzero",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_consecutive",
    "unique_dim",
    "repeat_interleave",
}


class HostReads(TorchDispatchMode):
    """Records every operator run under it (``ops``) and those that read a value on the host (``host_reads``):
    :data:`HOST_READ_OPS` and indexing with a boolean mask."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.host_reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.ops.append(name)
        indices = args[1] if name in ("index", "index_put", "index_put_") and len(args) > 1 else ()
        if name in HOST_READ_OPS or any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in indices):
            self.host_reads.append(str(func))
        return func(*args, **(kwargs or {}))


@contextmanager
def accelerator_path() -> Iterator[None]:
    """Within the block every CPU fast path of hf_seq is off (``hf_seq.fast_paths.disabled()``) and so are the value
    checks (``hf_seq.validation.value_checks_disabled()``), which read values on CPU only: eager CPU tensors take the
    code path of an accelerator (and of compiled or exported code)."""
    with fast_paths.disabled(), validation.value_checks_disabled():
        assert not fast_paths.reads_values(torch.zeros(1)) and not validation.checks_values(torch.zeros(1))
        yield
