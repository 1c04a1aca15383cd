"""Training-step throughput of ``RNNForSequenceClassification`` vs a bare ``nn.Embedding + nn.LSTM + nn.Linear``.

Both models have the same dimensions and the same weights; each timed step is forward + cross-entropy backward +
AdamW step on the same batch. Repeats are interleaved (A B, B A, A B, ...) in one process so that machine noise hits
both alike; the reported ratio is hf_seq samples/s divided by bare samples/s (median over repeats). By default time
is the process CPU time (``time.process_time``; run with one thread), which other jobs on a shared machine disturb far
less than wall-clock time; ``--clock wall`` measures elapsed time instead.

``--padded_shapes`` adds padded batches (right padding, lengths uniform in [T/2, T]): hf_seq against the bare model
that packs them by hand (``pack_padded_sequence``), and against itself on the path other devices take: the static
path an accelerator (or a traced forward) runs, measured on this CPU by answering "no" to hf_seq's eager-CPU test, and
with ``--compiled`` the ``torch.compile`` (Inductor) training step (compilation excluded from the timing).

    OMP_NUM_THREADS=1 python benchmarks/bench_rnn.py            # writes benchmarks/results/bench_rnn.json + .md
    OMP_NUM_THREADS=1 python benchmarks/bench_rnn.py --shapes '' --padded_shapes 64x40x1x0,64x40x2x1 --compiled
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hf_seq.configuration_rnn import HfSeqRNNConfig  # noqa: E402
from hf_seq.modeling_rnn import RNNForSequenceClassification  # noqa: E402


class BareLSTMClassifier(nn.Module):
    """The peer: what one writes by hand in plain PyTorch (last state of the top layer -> linear)."""

    def __init__(
        self,
        vocab_size: int,
        embedding_size: int,
        hidden_size: int,
        num_layers: int,
        bidirectional: bool,
        num_labels: int,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_size, padding_idx=0)
        self.lstm = nn.LSTM(
            embedding_size, hidden_size, num_layers=num_layers, batch_first=True, bidirectional=bidirectional
        )
        self.num_directions = 2 if bidirectional else 1
        self.classifier = nn.Linear(self.num_directions * hidden_size, num_labels)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(self.embedding(input_ids))  # h: (L*D, B, H)
        last = h[-self.num_directions :].transpose(0, 1).reshape(input_ids.shape[0], -1)  # (B, D*H)
        return self.classifier(last)


def copy_weights(ours: RNNForSequenceClassification, bare: BareLSTMClassifier) -> None:
    with torch.no_grad():
        bare.embedding.weight.copy_(ours.get_input_embeddings().weight)
        for k, layer in enumerate(ours.rnn.encoder.layers):
            for suffix in ["", "_reverse"] if bare.num_directions == 2 else [""]:
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(bare.lstm, f"{name}_l{k}{suffix}").copy_(getattr(layer, f"{name}_l0{suffix}"))
        bare.classifier.load_state_dict(ours.classifier.state_dict())


class BarePackedLSTMClassifier(BareLSTMClassifier):
    """The peer for padded batches: the same model packing its input by hand (last real state of each row)."""

    def forward(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        embedded = self.embedding(input_ids)  # (B, T, E)
        packed = nn.utils.rnn.pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)  # h: (L*D, B, H), rows in the input's order
        last = h[-self.num_directions :].transpose(0, 1).reshape(input_ids.shape[0], -1)  # (B, D*H)
        return self.classifier(last)


@contextlib.contextmanager
def accelerator_paths():
    """hf_seq's CPU fast paths off (``hf_seq.fast_paths.disabled()``): CPU tensors take the static path of an
    accelerator / a traced forward."""
    from hf_seq import fast_paths

    with fast_paths.disabled():
        yield


def bench_padded_shape(batch: int, seq_len: int, layers: int, bidirectional: bool, args) -> dict:
    """A padded batch: hf_seq (its eager CPU path) vs the bare model packing by hand, and hf_seq on the static path
    (what an accelerator runs) and compiled. Ratios are medians over interleaved repeats of samples/s ratios."""
    torch.manual_seed(0)
    config = HfSeqRNNConfig(
        vocab_size=args.vocab_size,
        embedding_size=args.embedding_size,
        hidden_size=args.hidden_size,
        num_hidden_layers=layers,
        bidirectional=bidirectional,
        cell="lstm",
        num_labels=2,
    )
    ours = RNNForSequenceClassification(config).train()
    bare = BarePackedLSTMClassifier(
        args.vocab_size, args.embedding_size, args.hidden_size, layers, bidirectional, 2
    ).train()
    copy_weights(ours, bare)
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch,))
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).long()  # right padding, as tokenizers pad
    ids = torch.randint(1, args.vocab_size, (batch, seq_len)) * mask
    labels = torch.randint(0, 2, (batch,))
    with torch.no_grad():
        diff = (ours(input_ids=ids, attention_mask=mask).logits - bare(ids, lengths)).abs().max().item()
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    opt_bare = torch.optim.AdamW(bare.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step_with(model):
        def step():
            opt_ours.zero_grad(set_to_none=True)
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            opt_ours.step()

        return step

    def step_bare():
        opt_bare.zero_grad(set_to_none=True)
        loss_fn(bare(ids, lengths), labels).backward()
        opt_bare.step()

    def step_static():
        with accelerator_paths():
            step_with(ours)()

    steps = {"hf_seq": step_with(ours), "bare_packed": step_bare, "hf_seq_static_path": step_static}
    compile_seconds = None
    if args.compiled:
        compiled = torch.compile(ours, fullgraph=True)
        start = time.perf_counter()
        step_with(compiled)()
        compile_seconds = round(time.perf_counter() - start, 1)
        steps["hf_seq_compiled"] = step_with(compiled)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for fn in steps.values():  # warm-up
        time_steps(fn, 2, clock)
    times: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for repeat in range(args.repeats):  # interleaved, the order reversed every other repeat
        for name in names if repeat % 2 == 0 else names[::-1]:
            times[name].append(time_steps(steps[name], args.steps, clock))
    row = {
        "batch": batch,
        "seq_len": seq_len,
        "num_layers": layers,
        "bidirectional": bidirectional,
        "real_token_fraction": round(mask.float().mean().item(), 3),
        "max_abs_logit_diff_vs_bare": diff,
        "compile_seconds": compile_seconds,
    }
    for name, values in times.items():
        row[f"{name}_samples_per_s"] = statistics.median(batch * args.steps / t for t in values)
        if name != "hf_seq":  # > 1: faster than hf_seq's eager CPU path
            row[f"{name}_vs_hf_seq"] = statistics.median(a / b for a, b in zip(times["hf_seq"], values))
    return row


def time_steps(step, n_steps: int, clock) -> float:
    start = clock()
    for _ in range(n_steps):
        step()
    return clock() - start


def bench_shape(batch: int, seq_len: int, layers: int, bidirectional: bool, args) -> dict:
    torch.manual_seed(0)
    config = HfSeqRNNConfig(
        vocab_size=args.vocab_size,
        embedding_size=args.embedding_size,
        hidden_size=args.hidden_size,
        num_hidden_layers=layers,
        bidirectional=bidirectional,
        cell="lstm",
        num_labels=2,
    )
    ours = RNNForSequenceClassification(config).train()
    bare = BareLSTMClassifier(args.vocab_size, args.embedding_size, args.hidden_size, layers, bidirectional, 2).train()
    copy_weights(ours, bare)
    ids = torch.randint(1, args.vocab_size, (batch, seq_len))
    mask = torch.ones_like(ids)  # what a tokenizer hands over for an unpadded batch
    labels = torch.randint(0, 2, (batch,))
    with torch.no_grad():  # same weights, same numbers
        diff = (ours(input_ids=ids, attention_mask=mask).logits - bare(ids)).abs().max().item()
    opt_ours = torch.optim.AdamW(ours.parameters(), lr=1e-3)
    opt_bare = torch.optim.AdamW(bare.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def step_ours():
        opt_ours.zero_grad(set_to_none=True)
        ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt_ours.step()

    def step_bare():
        opt_bare.zero_grad(set_to_none=True)
        loss_fn(bare(ids), labels).backward()
        opt_bare.step()

    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    for fn in (step_ours, step_bare):  # warm-up
        time_steps(fn, 2, clock)
    t_ours, t_bare = [], []
    for repeat in range(args.repeats):  # A B, B A, A B, ... so that drifting machine load hits both alike
        if repeat % 2 == 0:
            t_ours.append(time_steps(step_ours, args.steps, clock))
            t_bare.append(time_steps(step_bare, args.steps, clock))
        else:
            t_bare.append(time_steps(step_bare, args.steps, clock))
            t_ours.append(time_steps(step_ours, args.steps, clock))
    sps_ours = [batch * args.steps / t for t in t_ours]
    sps_bare = [batch * args.steps / t for t in t_bare]
    ratios = [a / b for a, b in zip(sps_ours, sps_bare)]
    return {
        "batch": batch,
        "seq_len": seq_len,
        "num_layers": layers,
        "bidirectional": bidirectional,
        "hf_seq_samples_per_s": statistics.median(sps_ours),
        "bare_samples_per_s": statistics.median(sps_bare),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_of_medians": statistics.median(sps_ours) / statistics.median(sps_bare),
        # interference from other jobs only ever adds time, so the fastest repeat is the least disturbed estimate
        "ratio_best": min(t_bare) / min(t_ours),
        "max_abs_logit_diff": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab_size", type=int, default=10000)
    parser.add_argument("--embedding_size", type=int, default=32)
    parser.add_argument("--hidden_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument(
        "--shapes",
        default="32x20x1x0,64x40x1x0,64x40x2x1,128x80x1x1",
        help="comma-separated batch x seq_len x layers x bidirectional(0/1)",
    )
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: process CPU time (robust on a shared machine; use with 1 thread), wall: elapsed",
    )
    parser.add_argument(
        "--padded_shapes",
        default="",
        help="padded batches (lengths uniform in [T/2, T]), same format; e.g. 64x40x1x0,64x40x2x1",
    )
    parser.add_argument("--compiled", action="store_true", help="padded shapes: also a torch.compile'd step")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "bench_rnn.json"))
    args = parser.parse_args()
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    load_start = os.getloadavg()  # the machine may be shared: compare ratios, not absolute figures
    rows = []
    for shape in filter(None, args.shapes.split(",")):
        b, t, layers, bi = (int(v) for v in shape.split("x"))
        row = bench_shape(b, t, layers, bool(bi), args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    lines = [
        f"| batch | seq_len | layers | bidirectional | hf_seq samples/{args.clock}-s | bare nn samples/{args.clock}-s "
        "| ratio (median, min–max) | ratio of fastest repeats |",
        "|---:|---:|---:|:---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} | {r['seq_len']} | {r['num_layers']} | {r['bidirectional']} | "
            f"{r['hf_seq_samples_per_s']:.0f} | {r['bare_samples_per_s']:.0f} | "
            f"{r['ratio_median']:.3f} ({r['ratio_min']:.2f}–{r['ratio_max']:.2f}) | {r['ratio_best']:.3f} |"
        )
    padded_rows = []
    for shape in filter(None, args.padded_shapes.split(",")):
        b, t, layers, bi = (int(v) for v in shape.split("x"))
        row = bench_padded_shape(b, t, layers, bool(bi), args)
        padded_rows.append(row)
        print(json.dumps(row), flush=True)
    if padded_rows:
        lines += [
            "",
            f"Padded batches (lengths uniform in [T/2, T]), samples/{args.clock}-s and ratio to hf_seq eager:",
            "",
            "| batch | seq_len | layers | bidirectional | real tokens | hf_seq eager | bare nn, packed | "
            "hf_seq static path (accelerator, traced) | hf_seq compiled |",
            "|---:|---:|---:|:---:|---:|---:|---:|---:|---:|",
        ]
        for r in padded_rows:
            compiled = (
                f"{r['hf_seq_compiled_samples_per_s']:.0f} ({r['hf_seq_compiled_vs_hf_seq']:.2f}×)"
                if "hf_seq_compiled_samples_per_s" in r
                else "—"
            )
            lines.append(
                f"| {r['batch']} | {r['seq_len']} | {r['num_layers']} | {r['bidirectional']} | "
                f"{r['real_token_fraction']:.2f} | {r['hf_seq_samples_per_s']:.0f} | "
                f"{r['bare_packed_samples_per_s']:.0f} ({r['bare_packed_vs_hf_seq']:.2f}×) | "
                f"{r['hf_seq_static_path_samples_per_s']:.0f} ({r['hf_seq_static_path_vs_hf_seq']:.2f}×) | {compiled} |"
            )
    table = "\n".join(lines)
    print(table)
    load_end = os.getloadavg()
    print(f"load average: start {load_start}, end {load_end}")
    result = {
        "benchmark": "RNNForSequenceClassification vs nn.Embedding+nn.LSTM+nn.Linear, train step (fwd+bwd+AdamW)",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average_start": load_start,
        "load_average_end": load_end,
        "dims": {"vocab_size": args.vocab_size, "embedding_size": args.embedding_size, "hidden_size": args.hidden_size},
        "steps_per_repeat": args.steps,
        "repeats": args.repeats,
        "clock": args.clock,
        "rows": rows,
        "padded_rows": padded_rows,
    }
    if rows:
        result["min_ratio_median"] = min(r["ratio_median"] for r in rows)
        result["geomean_ratio"] = statistics.geometric_mean([r["ratio_median"] for r in rows])
        result["geomean_ratio_best"] = statistics.geometric_mean([r["ratio_best"] for r in rows])
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
