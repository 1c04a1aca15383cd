"""Activation memory of one training step of the recurrent models with and without activation checkpointing.

Counts the bytes of the distinct tensors autograd saves for the backward (``torch.autograd.graph.saved_tensors_hooks``;
parameters excluded) in one forward with labels, then the same with ``model.activation_checkpointing_enable()``
(transformers 5's name of ``gradient_checkpointing_enable``). Checkpointed layers keep only their inputs and recompute
the rest in the backward; the gradients are the same (tests/test_modeling_rnn*.py assert it).

    OMP_NUM_THREADS=1 python benchmarks/checkpointing_memory_rnn.py   # writes benchmarks/results/checkpointing_memory_rnn.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from hf_seq import (  # noqa: E402
    RNNConfig,
    RNNForCausalLM,
    RNNForSequenceClassification,
    RNNSeq2SeqConfig,
    RNNSeq2SeqForConditionalGeneration,
)


def saved_bytes(model: torch.nn.Module, inputs: dict) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of one training step (no parameters)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(tensor):
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in params:
            storages[ptr] = max(storages.get(ptr, 0), tensor.untyped_storage().nbytes())
        return tensor

    model.train()
    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(**inputs).loss
    loss.backward()
    return sum(storages.values())


def main() -> None:
    torch.manual_seed(0)
    cases = []
    lm = RNNForCausalLM(RNNConfig(vocab_size=10000, embedding_size=650, hidden_size=650, num_hidden_layers=2))
    ids = torch.randint(1, 10000, (64, 35))
    cases.append(("LSTM LM 2x650, vocab 10k, batch 64 x 35", lm, {"input_ids": ids, "labels": ids}))
    classifier = RNNForSequenceClassification(
        RNNConfig(vocab_size=10000, embedding_size=64, hidden_size=64, num_hidden_layers=2, bidirectional=True)
    )
    ids = torch.randint(1, 10000, (64, 40))
    cases.append(("BiLSTM classifier 2x64, batch 64 x 40", classifier, {"input_ids": ids, "labels": ids[:, 0] % 2}))
    for attention in ("additive", "none"):
        config = RNNSeq2SeqConfig(
            vocab_size=8000,
            embedding_size=256,
            hidden_size=256,
            attention=attention,
            dropout=0.0,
            bidirectional=True,
            encoder_layers=2,
            decoder_layers=2,
        )
        seq2seq = RNNSeq2SeqForConditionalGeneration(config)
        inputs = {"input_ids": torch.randint(4, 8000, (32, 30)), "labels": torch.randint(4, 8000, (32, 30))}
        cases.append((f"LSTM seq2seq 2+2 x 256, attention={attention}, batch 32 x 30 + 30", seq2seq, inputs))
    rows = []
    for name, model, inputs in cases:
        plain = saved_bytes(model, inputs)
        model.activation_checkpointing_enable()
        checkpointed = saved_bytes(model, inputs)
        model.activation_checkpointing_disable()
        row = {
            "model": name,
            "saved_mib": round(plain / 2**20, 2),
            "checkpointed_saved_mib": round(checkpointed / 2**20, 2),
        }
        row["ratio"] = round(checkpointed / plain, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = REPO_ROOT / "benchmarks" / "results" / "checkpointing_memory_rnn.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
