"""Speed of hf_seq BERT against ``transformers.BertForMaskedLM`` (sdpa), same dimensions, one process.

    OMP_NUM_THREADS=1 python benchmarks/bench_bert.py [--threads 1] [--repeats 5] [--steps 3]

Measures masked-LM training-step throughput (forward with 15% labelled positions + backward + AdamW step) and
inference throughput (eval-mode forward, full ``(B, T, V)`` logits) in tokens/s for:

* ``transformers``  — ``transformers.BertForMaskedLM``, ``attn_implementation="sdpa"``,
* ``hf_seq``        — ``hf_seq.BertForMaskedLM`` loaded from the same weights (``from_transformers_bert``), dense
  logits (the standard output),
* ``hf_seq_sparse`` — the same weights with ``sparse_prediction=True`` (training computes vocabulary logits only at
  the labelled positions; inference is identical to ``hf_seq``),
* ``transformers_compiled`` / ``hf_seq_compiled`` — ``torch.compile`` (inductor) of ``transformers`` and of ``hf_seq``
  (``fullgraph=True``: no graph break), same parameters (``--no-compile`` skips them). Compiled, hf_seq runs its
  static-shape path (one cross-entropy over all positions instead of the fused labelled-rows backward).

Models are timed interleaved (each repeat runs every model in turn); per repeat the ratio to ``transformers`` is
taken (same moment, same machine load) and the median over repeats is reported, for process CPU time (robust on a
shared machine, the figure of record here) and for wall-clock time.
Writes ``benchmarks/results/bench_bert.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_seq import BertForMaskedLM  # noqa: E402
from hf_seq.toolkit.bert_conversion import from_transformers_bert  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bench_bert.json"


def make_batch(vocab: int, batch: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    labels = torch.full_like(ids, -100)
    selected = torch.rand(batch, length, generator=g) < 0.15
    labels[selected] = ids[selected]
    types = torch.zeros_like(ids)
    types[:, length // 2 :] = 1
    return {
        "input_ids": ids,
        "token_type_ids": types,
        "attention_mask": torch.ones_like(ids),
        "labels": labels,
    }


def time_train(model, optimizer, batch, steps: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of ``steps`` training steps."""
    model.train()
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, time.process_time() - cpu


@torch.inference_mode()
def time_infer(model, batch, steps: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of ``steps`` eval-mode forwards."""
    model.eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        model(**inputs)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed repeat")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="add compiled rows")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    hf_config = transformers.BertConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.ffn,
        max_position_embeddings=max(512, args.length),
        attn_implementation="sdpa",
    )
    reference = transformers.BertForMaskedLM(hf_config)
    models = {
        "transformers": reference,
        "hf_seq": from_transformers_bert(BertForMaskedLM, reference),
        "hf_seq_sparse": from_transformers_bert(BertForMaskedLM, reference, sparse_prediction=True),
    }
    batch = make_batch(args.vocab, args.batch, args.length)
    with torch.no_grad():  # same weights, same numbers (eval mode)
        ref_loss = reference.eval()(**batch).loss
        for name in ("hf_seq", "hf_seq_sparse"):
            diff = abs(models[name].eval()(**batch).loss.item() - ref_loss.item())
            assert diff < 1e-4, f"{name} loss differs from transformers by {diff}"
    if args.compile:
        models["transformers_compiled"] = torch.compile(reference)
        models["hf_seq_compiled"] = torch.compile(models["hf_seq"], fullgraph=True)
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    for name, model in models.items():  # warm-up
        time_train(model, optimizers[name], batch, 1)
        time_infer(model, batch, 1)

    tokens = args.batch * args.length * args.steps
    runs = {kind: {clock: {name: [] for name in models} for clock in ("wall", "cpu")} for kind in ("train", "infer")}
    for _ in range(args.repeats):
        for name, model in models.items():
            for kind, (wall, cpu) in (
                ("train", time_train(model, optimizers[name], batch, args.steps)),
                ("infer", time_infer(model, batch, args.steps)),
            ):
                runs[kind]["wall"][name].append(tokens / wall)
                runs[kind]["cpu"][name].append(tokens / cpu)

    def summary(kind: str, clock: str) -> dict:
        per_model = runs[kind][clock]
        ratios = {  # paired per repeat (same moment, same machine load), then the median
            name: statistics.median(a / b for a, b in zip(values, per_model["transformers"]))
            for name, values in per_model.items()
        }
        out = {
            "tokens_per_s_median": {name: statistics.median(v) for name, v in per_model.items()},
            "speedup_vs_transformers_median": ratios,
            "tokens_per_s_all": per_model,
        }
        if "hf_seq_compiled" in per_model:
            out["compiled_hf_seq_over_compiled_transformers_median"] = statistics.median(
                a / b for a, b in zip(per_model["hf_seq_compiled"], per_model["transformers_compiled"])
            )
        return out

    result = {
        "command": " ".join(["python", *sys.argv]),
        "dims": {
            "batch": args.batch,
            "length": args.length,
            "vocab_size": args.vocab,
            "hidden_size": args.hidden,
            "num_hidden_layers": args.layers,
            "num_attention_heads": args.heads,
            "intermediate_size": args.ffn,
            "masked_fraction": float((batch["labels"] != -100).float().mean()),
        },
        "threads": args.threads,
        "repeats": args.repeats,
        "steps_per_repeat": args.steps,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "note": "cpu = tokens per second of process CPU time (robust on a shared machine); wall = wall clock",
        "train": {clock: summary("train", clock) for clock in ("cpu", "wall")},
        "inference": {clock: summary("infer", clock) for clock in ("cpu", "wall")},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for clock in ("cpu", "wall"):
        train, infer = result["train"][clock], result["inference"][clock]
        print(f"[{clock}] {'model':<22}{'train tok/s':>14}{'x':>7}{'infer tok/s':>14}{'x':>7}")
        for name in models:
            print(
                f"[{clock}] {name:<22}{train['tokens_per_s_median'][name]:>14.0f}"
                f"{train['speedup_vs_transformers_median'][name]:>7.2f}"
                f"{infer['tokens_per_s_median'][name]:>14.0f}{infer['speedup_vs_transformers_median'][name]:>7.2f}"
            )
        if args.compile:
            print(
                f"[{clock}] compiled hf_seq / compiled transformers: train "
                f"{train['compiled_hf_seq_over_compiled_transformers_median']:.2f}, inference "
                f"{infer['compiled_hf_seq_over_compiled_transformers_median']:.2f}"
            )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
