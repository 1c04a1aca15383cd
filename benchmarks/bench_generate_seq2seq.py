"""Generation speed of the RNN seq2seq translator: greedy vs beam-5 tokens/s (and the uncached decoder as reference).

    OMP_NUM_THREADS=1 python benchmarks/bench_generate_seq2seq.py [--attention additive] [--batch 32] [--repeats 3]

Fixed-size model with RANDOM weights (speed does not depend on training): vocab 8000, embedding/hidden 256,
1-layer bidirectional LSTM encoder, 1-layer LSTM decoder; a fixed batch of source sentences of 30 tokens; every
sequence generates exactly ``--new_tokens`` tokens (``min_new_tokens = max_new_tokens``), so all settings do the
same number of decoder steps. "tokens/s" counts returned tokens (batch × new tokens); for beam search the decoder
also scores ``num_beams`` hypotheses per sentence (``hypothesis_tokens_per_s``). The uncached run
(``use_cache=False``: the whole prefix is decoded again at every step) shows what the recurrent cache saves.
Writes ``benchmarks/results/bench_generate_seq2seq.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hf_seq.configuration_rnn_seq2seq import HfSeqRNNSeq2SeqConfig  # noqa: E402
from hf_seq.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration  # noqa: E402


def time_generate(model, inputs: dict, repeats: int, **kwargs) -> tuple[float, torch.Tensor]:
    """Best wall time of ``repeats`` calls (after one warm-up call) and the last output."""
    with torch.no_grad():
        out = model.generate(**inputs, **kwargs)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            out = model.generate(**inputs, **kwargs)
            best = min(best, time.perf_counter() - start)
    return best, out


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", default="additive")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--source_len", type=int, default=30)
    parser.add_argument("--new_tokens", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "bench_generate_seq2seq.json"))
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    torch.manual_seed(0)
    config = HfSeqRNNSeq2SeqConfig(
        vocab_size=8000,
        embedding_size=256,
        hidden_size=256,
        bidirectional=True,
        attention=args.attention,
        dropout=0.0,
        max_target_length=args.new_tokens + 1,
    )
    model = RNNSeq2SeqForConditionalGeneration(config).eval()
    ids = torch.randint(4, config.vocab_size, (args.batch, args.source_len))
    ids[:, -1] = config.eos_token_id
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    fixed = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    returned_tokens = args.batch * args.new_tokens

    rows = {}
    for name, kwargs, hypotheses in (
        ("greedy", dict(num_beams=1, do_sample=False), 1),
        ("beam5", dict(num_beams=5, early_stopping=False), 5),
        ("greedy_uncached", dict(num_beams=1, do_sample=False, use_cache=False), 1),
    ):
        seconds, out = time_generate(model, inputs, args.repeats, **fixed, **kwargs)
        assert out.shape == (args.batch, args.new_tokens + 1), out.shape
        rows[name] = {
            "seconds": round(seconds, 4),
            "tokens_per_s": round(returned_tokens / seconds, 1),
            "hypothesis_tokens_per_s": round(hypotheses * returned_tokens / seconds, 1),
        }
        print(f"{name:16s} {seconds:7.3f} s  {returned_tokens / seconds:9.1f} tokens/s", flush=True)

    result = {
        "benchmark": "bench_generate_seq2seq",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "weights": "random (speed only)",
        "model": {
            k: getattr(config, k)
            for k in (
                "vocab_size",
                "embedding_size",
                "hidden_size",
                "cell",
                "bidirectional",
                "attention",
                "encoder_layers",
                "decoder_layers",
            )
        },
        "batch": args.batch,
        "source_len": args.source_len,
        "new_tokens": args.new_tokens,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "results": rows,
        "ratios": {
            "beam5_over_greedy_tokens_per_s": round(rows["beam5"]["tokens_per_s"] / rows["greedy"]["tokens_per_s"], 3),
            "cached_over_uncached_greedy": round(
                rows["greedy"]["tokens_per_s"] / rows["greedy_uncached"]["tokens_per_s"], 3
            ),
        },
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2))
    print(json.dumps(result["ratios"]))
    return result


if __name__ == "__main__":
    main()
