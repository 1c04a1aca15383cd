"""Dynamic int8 quantization of eager hf_seq models, every family: :func:`quantize_dynamic_int8`.

Int8 weights, activations quantized per batch at run time, for CPU inference: every ``nn.Linear`` becomes
``torch.ao.nn.quantized.dynamic.Linear`` and, in the recurrent families, every LSTM/GRU layer
``torch.ao.nn.quantized.dynamic.LSTM/GRU`` (after the swap of :func:`~.recurrent.to_torch_rnn_modules_`; a SimpleRNN
layer stays float: torch has no dynamic int8 ``nn.RNN``).

It runs on torch's eager dynamic quantization (``torch.ao.quantization.quantize_dynamic``), which torch has deprecated
in favour of torchao: one call here does not leak its DeprecationWarning (nor the "quantized tensor creation is
deprecated" warning of the int8 weights), and a torch without it gets one clear ``RuntimeError`` saying what to use
instead, not an ImportError from deep inside. torchao's eager replacement (``quantize_(model,
Int8DynamicActivationInt8WeightConfig())``) does not serve these models yet: it has no recurrent layers, and on CPU its
int8 ``nn.Linear`` ran 2.1x slower than torch's dynamic one (docs/compile.md, "Quantization"). The exported models have
their own int8 paths (CTranslate2 ``--quantization int8``; ONNX Runtime's dynamic quantization).
"""

from __future__ import annotations

import contextlib
import copy
import warnings

import torch
from torch import nn

from ..recurrent import RecurrentStack

# torch's messages for the deprecation of eager quantization, silenced inside quantize_dynamic_int8 only
_DEPRECATION_MESSAGES = (
    (DeprecationWarning, r"torch\.ao\.quantization is deprecated"),
    (UserWarning, r"torch\.quantize_per_tensor, torch\.quantize_per_channel and other quantized tensor creation"),
)
QUANTIZED_TYPES = (nn.Linear, nn.LSTM, nn.GRU)


@contextlib.contextmanager
def _quiet():
    """Hide torch's deprecation messages of eager quantization (and nothing else) inside the block."""
    with warnings.catch_warnings():
        for category, message in _DEPRECATION_MESSAGES:
            warnings.filterwarnings("ignore", message=message, category=category)
        yield


def torch_quantize_dynamic():
    """``torch.ao.quantization.quantize_dynamic``, or ``RuntimeError`` saying what to use where torch removed it."""
    try:
        with _quiet():
            from torch.ao.quantization import quantize_dynamic
    except ImportError as error:
        raise RuntimeError(
            f"dynamic int8 quantization of an eager model needs torch.ao.quantization.quantize_dynamic, which torch "
            f"{torch.__version__} does not provide (torch deprecated it for torchao). Use a torch release that has it, "
            "or quantize an export instead: `hf-seq-export ctranslate2 RUN_DIR OUT --quantization int8` (Transformer, "
            "BERT) or ONNX Runtime's dynamic int8 quantization of the ONNX export; for the nn.Linear layers alone, "
            "torchao's `quantize_(model, Int8DynamicActivationInt8WeightConfig())`"
        ) from error
    return quantize_dynamic


def quantize_dynamic_int8(model: nn.Module, inplace: bool = False) -> nn.Module:
    """The model with dynamic int8 weights: every ``nn.Linear`` and (recurrent families) every LSTM/GRU layer.

    Args:
        model: any hf_seq model (or module holding one). The recurrent layers are first swapped for the
            ``torch.nn`` modules holding the same tensors (``prepare_for_quantization_()``; a stack of a cell without
            one, e.g. the self-attention LSTM, keeps its layers and only its ``nn.Linear`` layers are quantized).
        inplace: quantize ``model`` itself instead of a copy.

    Returns:
        The quantized model: eager mode only (compile and export the float model), on CPU. An output layer tied to
        the input embeddings is quantized as its own int8 copy.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: a recurrent layer carries unmerged PEFT adapters (merge them first: ``merge_and_unload()``).
        RuntimeError: this torch has no eager dynamic quantization any more (the message says what to use).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    quantize_dynamic = torch_quantize_dynamic()
    if not inplace:
        model = copy.deepcopy(model)
    stacks = [m for m in model.modules() if isinstance(m, RecurrentStack)]
    if stacks and all(stack.cell_type.has_kernel for stack in stacks) and hasattr(model, "prepare_for_quantization_"):
        model.prepare_for_quantization_()
    else:
        for stack in stacks:
            if stack.cell_type.has_kernel and not stack.torch_modules:
                stack.to_torch_modules_()
    with _quiet():
        return quantize_dynamic(model, set(QUANTIZED_TYPES), dtype=torch.qint8, inplace=True)


__all__ = ["QUANTIZED_TYPES", "quantize_dynamic_int8", "torch_quantize_dynamic"]
