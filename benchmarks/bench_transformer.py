"""hf_seq Transformer vs ``transformers.MarianMTModel`` with the same sizes, in one process.

Measures, with interleaved repeats (median of each):

* training-step tokens/s (forward + backward + AdamW step, source + target tokens, dropout on) on one padded batch,
* greedy-decode tokens/s (``generate``, KV cache, length forced with ``min_new_tokens``) for 128 and 256 new tokens,
  and the 256/128 decode-time ratio,
* achieved training FLOP/s as a fraction of this machine's float32 matmul rate, measured here. The FLOPs are the
  model FLOPs of one dense step (counted by ``torch.utils.flop_counter`` on the Marian model, the same sizes) for
  both models, the usual "model FLOPs utilisation" convention: hf_seq's language-model head skips the padded target
  rows in its backward, so it executes fewer FLOPs (also reported, as ``train_flops_executed_per_step``),
* "compiled" rows: the training step of ``torch.compile(model)`` (inductor; ``fullgraph=True`` for hf_seq, whose
  forward has no graph break) for both models, interleaved with the eager runs (``--no-compile`` skips them).
  Compiled, hf_seq runs its static-shape path (no padded-row skipping, one cross-entropy over all rows).

Writes ``benchmarks/results/bench_transformer.json`` and ``benchmarks/results/bench_transformer.md``.

    OMP_NUM_THREADS=2 python benchmarks/bench_transformer.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from transformers import MarianConfig, MarianMTModel  # noqa: E402

from hf_seq.configuration_transformer import HfSeqTransformerConfig  # noqa: E402
from hf_seq.modeling_transformer import TransformerForConditionalGeneration  # noqa: E402

PAD, BOS, EOS = 0, 2, 3
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter  # set in main(): process CPU time is robust to other jobs on a shared machine (1 thread)


def build_models(args: argparse.Namespace) -> dict[str, torch.nn.Module]:
    """Both models with identical sizes (post-LN, ReLU, sinusoidal positions, scaled + tied embeddings, sdpa)."""
    ours = HfSeqTransformerConfig(
        vocab_size=args.vocab,
        hidden_size=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=args.ffn,
        dropout=0.1,
        max_position_embeddings=512,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    marian = MarianConfig(
        vocab_size=args.vocab,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn,
        activation_function="relu",
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=512,
        scale_embedding=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
        forced_eos_token_id=None,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    models = {
        "hf_seq": TransformerForConditionalGeneration._from_config(ours, attn_implementation="sdpa"),
        "marian": MarianMTModel._from_config(marian, attn_implementation="sdpa"),
    }
    for model in models.values():
        model.generation_config.forced_eos_token_id = None
    return models


def make_batch(args: argparse.Namespace, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A padded batch like the verse pairs: lengths uniform in [len/2, len], source and target."""
    b, s, t = args.batch, args.src_len, args.tgt_len
    src = torch.randint(4, args.vocab, (b, s), generator=generator)
    tgt = torch.randint(4, args.vocab, (b, t), generator=generator)
    src_len = torch.randint(s // 2, s + 1, (b,), generator=generator)
    tgt_len = torch.randint(t // 2, t + 1, (b,), generator=generator)
    src_len[0], tgt_len[0] = s, t
    attention_mask = (torch.arange(s)[None] < src_len[:, None]).long()
    src = src.masked_fill(attention_mask == 0, PAD)
    labels = tgt.masked_fill(torch.arange(t)[None] >= tgt_len[:, None], -100)
    decoder_input_ids = torch.cat([torch.full((b, 1), BOS), labels[:, :-1].clamp_min(0)], 1)
    decoder_input_ids = decoder_input_ids.masked_fill(decoder_input_ids == -100, PAD)
    return {
        "input_ids": src,
        "attention_mask": attention_mask,
        "decoder_input_ids": decoder_input_ids,
        "labels": labels,
    }


def real_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())


def time_train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, steps: int) -> float:
    """Seconds per training step (forward + backward + optimizer step)."""
    model.train()
    start = clock()
    for _ in range(steps):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return (clock() - start) / steps


@torch.no_grad()
def time_decode(model: torch.nn.Module, batch: dict, new_tokens: int) -> float:
    """Seconds for greedy ``generate`` of exactly ``new_tokens`` tokens per sequence."""
    model.eval()
    start = clock()
    out = model.generate(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        use_cache=True,
    )
    elapsed = clock() - start
    assert out.shape[1] == new_tokens + 1, out.shape
    return elapsed


def count_train_flops(model: torch.nn.Module, batch: dict) -> int:
    """FLOPs of one forward + backward (matmuls and attention, as counted by torch's FlopCounterMode)."""
    from torch.utils.flop_counter import FlopCounterMode

    model.train()
    counter = FlopCounterMode(display=False)
    with counter:
        model(**batch).loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_rate(n: int = 1024, repeats: int = 20) -> float:
    """Measured float32 matmul FLOP/s (best of ``repeats`` n×n×n products)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        a @ b
        best = min(best, clock() - start)
    return 2 * n**3 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--src-len", type=int, default=48)
    parser.add_argument("--tgt-len", type=int, default=48)
    parser.add_argument("--train-steps", type=int, default=5, help="steps per timed repeat")
    parser.add_argument("--decode-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="add compiled rows")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCK),
        default=None,
        help="'cpu' (process CPU time; default with 1 thread, robust on a shared machine) or 'wall' (default otherwise)",
    )
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results" / "bench_transformer.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global clock
    args.clock = args.clock or ("cpu" if args.threads == 1 else "wall")
    clock = CLOCK[args.clock]

    models = build_models(args)
    params = {name: sum(p.numel() for p in m.parameters() if p.requires_grad) for name, m in models.items()}
    assert params["hf_seq"] == params["marian"], params  # same sizes
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    gen = torch.Generator().manual_seed(0)
    batch = make_batch(args, gen)
    decode_batch = {k: v[: args.decode_batch] for k, v in batch.items()}
    tokens = real_tokens(batch)
    padded_tokens = batch["input_ids"].numel() + batch["labels"].numel()

    # warm-up (allocator, oneDNN primitives)
    for name, model in models.items():
        time_train(model, optimizers[name], batch, 2)
        time_decode(model, decode_batch, 8)
    # compiled training steps (same parameters and optimizer as the eager model); compiling happens in the warm-up
    compiled = {}
    if args.compile:
        for name, model in models.items():
            compiled[name] = torch.compile(model, fullgraph=name == "hf_seq")
            time_train(compiled[name], optimizers[name], batch, 2)

    train_s = {name: [] for name in models}
    compiled_s = {name: [] for name in compiled}
    decode_s = {name: {128: [], 256: []} for name in models}
    for _ in range(args.repeats):
        for name, model in models.items():  # interleaved: A, B, A, B, ...
            train_s[name].append(time_train(model, optimizers[name], batch, args.train_steps))
        for name, model in compiled.items():
            compiled_s[name].append(time_train(model, optimizers[name], batch, args.train_steps))
        for new_tokens in (128, 256):
            for name, model in models.items():
                decode_s[name][new_tokens].append(time_decode(model, decode_batch, new_tokens))

    flops = {name: count_train_flops(model, batch) for name, model in models.items()}  # executed
    model_flops = flops["marian"]  # the dense step of these sizes
    rate = matmul_rate()
    results = {"models": {}}
    for name in models:
        step = statistics.median(train_s[name])
        d128, d256 = statistics.median(decode_s[name][128]), statistics.median(decode_s[name][256])
        results["models"][name] = {
            "params": params[name],
            "train_step_s": step,
            "train_tokens_per_s": tokens / step,
            "train_flops_per_step": model_flops,
            "train_flops_executed_per_step": flops[name],
            "train_flop_per_s": model_flops / step,
            "train_fraction_of_matmul_peak": model_flops / step / rate,
            "decode_128_s": d128,
            "decode_256_s": d256,
            "decode_tokens_per_s_128": args.decode_batch * 128 / d128,
            "decode_tokens_per_s_256": args.decode_batch * 256 / d256,
            "decode_256_over_128": d256 / d128,
            "best_of_repeats": {  # noise on a shared machine only adds time: the minimum is the least disturbed run
                "train_tokens_per_s": tokens / min(train_s[name]),
                "decode_tokens_per_s_128": args.decode_batch * 128 / min(decode_s[name][128]),
                "decode_tokens_per_s_256": args.decode_batch * 256 / min(decode_s[name][256]),
                "decode_256_over_128": min(decode_s[name][256]) / min(decode_s[name][128]),
            },
            "raw_train_step_s": train_s[name],
            "raw_decode_s": {str(k): v for k, v in decode_s[name].items()},
        }
    ours, ref = results["models"]["hf_seq"], results["models"]["marian"]
    results["ratios_hf_seq_over_marian"] = {
        "train_tokens_per_s": ours["train_tokens_per_s"] / ref["train_tokens_per_s"],
        "decode_tokens_per_s_128": ours["decode_tokens_per_s_128"] / ref["decode_tokens_per_s_128"],
        "decode_tokens_per_s_256": ours["decode_tokens_per_s_256"] / ref["decode_tokens_per_s_256"],
    }
    results["ratios_best_of_repeats"] = {
        key: ours["best_of_repeats"][key] / ref["best_of_repeats"][key]
        for key in ("train_tokens_per_s", "decode_tokens_per_s_128", "decode_tokens_per_s_256")
    }
    if compiled:
        results["compiled"] = {
            name: {
                "train_tokens_per_s": tokens / statistics.median(compiled_s[name]),
                "compiled_over_eager": statistics.median(train_s[name]) / statistics.median(compiled_s[name]),
                "raw_train_step_s": compiled_s[name],
            }
            for name in compiled
        }
        results["ratios_hf_seq_over_marian"]["compiled_train_tokens_per_s"] = (
            results["compiled"]["hf_seq"]["train_tokens_per_s"] / results["compiled"]["marian"]["train_tokens_per_s"]
        )
    results["matmul_flop_per_s"] = rate
    results["settings"] = {
        **{k: v for k, v in vars(args).items() if k != "out"},
        "real_tokens_per_batch": tokens,
        "padded_tokens_per_batch": padded_tokens,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "machine": platform.processor() or platform.machine(),
        "loadavg_at_end": os.getloadavg(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))

    r = results["ratios_hf_seq_over_marian"]
    lines = [
        f"threads={args.threads}, d_model={args.d_model}, layers={args.layers}+{args.layers}, heads={args.heads}, "
        f"ffn={args.ffn}, vocab={args.vocab}, batch={args.batch}×({args.src_len}+{args.tgt_len}) padded, "
        f"decode batch={args.decode_batch}; median of {args.repeats} interleaved repeats ({args.clock} clock); "
        f"matmul peak {rate / 1e9:.0f} GFLOP/s",
        "",
        "| model | train tokens/s | train GFLOP/s (of peak) | decode tok/s (128) | decode tok/s (256) | 256/128 time |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        lines.append(
            f"| {name} | {m['train_tokens_per_s']:.0f} | {m['train_flop_per_s'] / 1e9:.1f} "
            f"({100 * m['train_fraction_of_matmul_peak']:.0f}%) | {m['decode_tokens_per_s_128']:.0f} | "
            f"{m['decode_tokens_per_s_256']:.0f} | {m['decode_256_over_128']:.2f} |"
        )
    lines.append(
        f"| **hf_seq / marian** | **{r['train_tokens_per_s']:.2f}×** | | **{r['decode_tokens_per_s_128']:.2f}×** | "
        f"**{r['decode_tokens_per_s_256']:.2f}×** | |"
    )
    for name, c in results.get("compiled", {}).items():
        lines.append(
            f"| {name}, compiled | {c['train_tokens_per_s']:.0f} ({c['compiled_over_eager']:.2f}× eager) | | | | |"
        )
    if compiled:
        lines.append(f"| **compiled hf_seq / marian** | **{r['compiled_train_tokens_per_s']:.2f}×** | | | | |")
    b = results["ratios_best_of_repeats"]
    lines += [
        "",
        f"Best of the repeats: train {b['train_tokens_per_s']:.2f}×, decode {b['decode_tokens_per_s_128']:.2f}× (128) / "
        f"{b['decode_tokens_per_s_256']:.2f}× (256); 256/128 decode time hf_seq "
        f"{ours['best_of_repeats']['decode_256_over_128']:.2f}, marian {ref['best_of_repeats']['decode_256_over_128']:.2f}.",
    ]
    table = "\n".join(lines)
    out.with_suffix(".md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
