"""Checks of the PyTorch tool chain shared by the recurrent families' tests (test_modeling_rnn.py,
test_modeling_rnn_seq2seq.py): graph breaks, compiled training step vs eager, torch.export and ONNX (onnxruntime)
parity, dynamic int8 quantization, activation checkpointing (gradients and saved activation bytes), and runs on the
meta device (any host read of a tensor value raises there, which is what a CUDA step must not do).
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.utils._pytree as pytree
from conftest import assert_same_outputs
from torch import nn

QUANTIZABLE = (nn.Linear, nn.LSTM, nn.GRU)


def training_loss(output) -> torch.Tensor:
    """The loss of a head with labels, else a loss over every floating output (the base models have no labels)."""
    if getattr(output, "loss", None) is not None:
        return output.loss
    leaves = [t for t in pytree.tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum(t.float().pow(2).mean() for t in leaves)


def graph_breaks(model: nn.Module, inputs: dict) -> int:
    """Graph breaks TorchDynamo reports for ``model(**inputs)``."""
    torch._dynamo.reset()
    return torch._dynamo.explain(model)(**inputs).graph_break_count


def loss_and_gradients(model: nn.Module, call, inputs: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = training_loss(call(**inputs))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_compiled_training_step_matches(model: nn.Module, inputs: dict, backend: str = "aot_eager") -> None:
    """``torch.compile(model, fullgraph=True)``: the training step's loss and every gradient equal eager (rtol 1e-4)."""
    model.train()
    eager_loss, eager_grads = loss_and_gradients(model, model, inputs)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    loss, grads = loss_and_gradients(model, compiled, inputs)
    torch.testing.assert_close(loss, eager_loss, rtol=1e-4, atol=1e-6)
    assert grads.keys() == eager_grads.keys() and len(grads) > 0
    for name, grad in grads.items():
        torch.testing.assert_close(grad, eager_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    torch._dynamo.reset()


def assert_export_and_onnx_match(model: nn.Module, inputs: dict, tmp_path) -> list[str]:
    """``torch.export.export`` and ``torch.onnx.export(dynamo=True)`` of the inference forward; every output of the
    exported program and of onnxruntime equals eager (ONNX: ≤ 1e-4). Returns the ONNX output names."""
    import onnxruntime

    model.eval()
    with torch.no_grad():
        expected = [t for t in pytree.tree_leaves(model(**inputs)) if isinstance(t, torch.Tensor)]
        exported = torch.export.export(model, (), kwargs=inputs)
        got = [t for t in pytree.tree_leaves(exported.module()(**inputs)) if isinstance(t, torch.Tensor)]
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert_same_outputs(a, b)
    with contextlib.redirect_stdout(None):
        program = torch.onnx.export(model, (), kwargs=inputs, dynamo=True, verbose=False)
    path = tmp_path / "model.onnx"
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
    outputs = session.run(None, feeds)
    assert len(outputs) == len(expected), (len(outputs), len(expected))
    for a, b in zip(outputs, expected):
        torch.testing.assert_close(torch.from_numpy(a), b.to(torch.from_numpy(a).dtype), rtol=0, atol=1e-4)
    return [o.name for o in session.get_outputs()]


def assert_quantizes(model: nn.Module, inputs: dict, tied: tuple[str, ...] = ()) -> nn.Module:
    """``hf_seq.toolkit.quantization.quantize_dynamic_int8`` replaces every ``nn.Linear``/``nn.LSTM``/``nn.GRU`` (a tied output
    layer may stay), leaks no deprecation warning, and the quantized model gives finite outputs close to the float
    model's."""
    from hf_seq.toolkit.quantization import quantize_dynamic_int8

    model.eval()
    with torch.no_grad():
        reference = model(**inputs)
    before = [n for n, m in model.named_modules() if isinstance(m, QUANTIZABLE)]
    assert before, "nothing to quantize"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = quantize_dynamic_int8(model)
    assert not [str(w.message) for w in caught if "deprecated" in str(w.message)]
    left = [n for n, m in quantized.named_modules() if isinstance(m, QUANTIZABLE) and n not in tied]
    assert left == [], f"not quantized: {left}"
    with torch.no_grad():
        output = quantized(**inputs)
    logits = output.logits if getattr(output, "logits", None) is not None else output[0]
    ref_logits = reference.logits if getattr(reference, "logits", None) is not None else reference[0]
    assert torch.isfinite(logits).all()
    assert (logits - ref_logits).abs().max() < 0.05 * ref_logits.abs().max() + 1e-3
    return quantized


def saved_activation_bytes(model: nn.Module, inputs: dict) -> tuple[int, dict[str, torch.Tensor]]:
    """Bytes of the distinct tensors autograd keeps for the backward of one training step (parameters excluded),
    and the gradients of that step."""
    params = {p.data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in params and tensor.device.type != "meta":
            storages[ptr] = max(storages.get(ptr, 0), tensor.untyped_storage().nbytes())
        return tensor

    model.train()
    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = training_loss(model(**inputs))
    loss.backward()
    return sum(storages.values()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_checkpointing_saves_memory(model: nn.Module, inputs: dict, max_ratio: float) -> tuple[int, int]:
    """``activation_checkpointing_enable()`` (transformers 5's name of ``gradient_checkpointing_enable``): the same
    gradients, and at most ``max_ratio`` of the saved activation bytes. Returns (bytes without, bytes with)."""
    plain, plain_grads = saved_activation_bytes(model, inputs)
    model.activation_checkpointing_enable()
    try:
        checkpointed, grads = saved_activation_bytes(model, inputs)
    finally:
        model.activation_checkpointing_disable()
    assert grads.keys() == plain_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, plain_grads[name], rtol=1e-5, atol=1e-7, msg=name)
    assert checkpointed <= max_ratio * plain, (checkpointed, plain)
    return plain, checkpointed


def to_meta(inputs: dict) -> dict:
    return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@contextlib.contextmanager
def on_accelerator_paths():
    """Run CPU tensors through the code an accelerator (or a traced forward) runs: every CPU fast path of hf_seq is
    off (``hf_seq.fast_paths.disabled()``) and so are the value checks (``hf_seq.validation.value_checks_disabled()``),
    so packing and the other eager-CPU shortcuts and the checks' host reads are skipped while the values stay readable
    for comparisons."""
    from hf_seq import fast_paths, validation

    with fast_paths.disabled(), validation.value_checks_disabled():
        yield
