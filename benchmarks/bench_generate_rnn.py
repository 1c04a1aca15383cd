"""Generation speed of RNNForCausalLM: cached (the recurrent state as the cache) vs uncached decoding.

    OMP_NUM_THREADS=1 python benchmarks/bench_generate_rnn.py [--repeats 3] [--hidden_size 256]

Greedy ``generate()`` of exactly 128 and 512 new tokens (``min_new_tokens = max_new_tokens``, no EOS) from a
16-token prompt, batch 1, with ``use_cache=True`` (the prompt is read once, then one token per step: linear cost)
and ``use_cache=False`` (every step re-reads the whole sequence: quadratic cost). Peer: a bare
``nn.Embedding + nn.LSTM + nn.Linear`` argmax loop carrying ``(h, c)`` by hand, with the same weights. Also the
self-attention LSTM (its cached step attends over the whole history, so its cost per token grows with length).
Reports tokens/s, the cost ratio time(512)/time(128) of cached decoding (linear growth = 4.0; goal <= 4.4) and
writes ``benchmarks/results/bench_generate_rnn.json``. Timings are the minimum over ``--repeats`` runs of the
process's CPU time by default (``--clock cpu``; this machine is shared, and with one thread CPU time is the compute a
run really used — wall time under load measures the other jobs), or of wall time (``--clock wall``).
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
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from hf_seq.configuration_rnn import HfSeqRNNConfig  # noqa: E402
from hf_seq.modeling_rnn import RNNForCausalLM  # noqa: E402

LENGTHS = (128, 512)
PROMPT_LENGTH = 16


class BareLSTMLM(nn.Module):
    """The peer: the same LM written directly with torch.nn, decoded by a hand-written argmax loop."""

    def __init__(self, model: RNNForCausalLM) -> None:
        super().__init__()
        config = model.config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.lstm = nn.LSTM(
            config.embedding_size, config.hidden_size, num_layers=config.num_hidden_layers, batch_first=True
        )
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.embedding.weight.data.copy_(model.rnn.embeddings.word_embeddings.weight.data)
        for k, layer in enumerate(model.rnn.encoder.layers):
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self.lstm, f"{name}_l{k}").data.copy_(getattr(layer, f"{name}_l0").data)
        self.head.load_state_dict(model.lm_head.state_dict())

    @torch.no_grad()
    def greedy(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        out, state = self.lstm(self.embedding(prompt))  # (B, T, H)
        token = self.head(out[:, -1]).argmax(-1, keepdim=True)  # (B, 1)
        tokens = [token]
        for _ in range(new_tokens - 1):
            out, state = self.lstm(self.embedding(token), state)
            token = self.head(out[:, -1]).argmax(-1, keepdim=True)
            tokens.append(token)
        return torch.cat([prompt, *tokens], dim=1)


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def timed(fn, repeats: int, clock: str) -> tuple[float, torch.Tensor]:
    """Minimum over ``repeats`` runs of ``fn`` on the chosen clock ("cpu": this process's CPU time; "wall")."""
    now = CLOCKS[clock]
    best, result = float("inf"), None
    for _ in range(repeats):
        start = now()
        result = fn()
        best = min(best, now() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab_size", type=int, default=68)
    parser.add_argument("--embedding_size", type=int, default=64)
    parser.add_argument("--hidden_size", type=int, default=256)
    parser.add_argument("--num_layers", type=int, default=1)
    parser.add_argument("--skip_self_attention", action="store_true")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="cpu",
        help="cpu: process CPU time (robust on a machine shared with other jobs; use with "
        "OMP_NUM_THREADS=1), wall: elapsed time",
    )
    parser.add_argument("--output", default=str(REPO_ROOT / "benchmarks" / "results" / "bench_generate_rnn.json"))
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    torch.manual_seed(0)
    prompt = torch.randint(2, args.vocab_size, (1, PROMPT_LENGTH))
    results: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "torch_threads": torch.get_num_threads(),
        "clock": args.clock,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "prompt_length": PROMPT_LENGTH,
        "batch_size": 1,
        "decoding": "greedy, min_new_tokens = max_new_tokens, no eos",
        "load_average_start": os.getloadavg(),  # the machine may be shared: compare ratios, not absolute figures
        "models": {},
    }
    cells = ["lstm"] + ([] if args.skip_self_attention else ["self_attention_lstm"])
    for cell in cells:
        config = HfSeqRNNConfig(
            vocab_size=args.vocab_size,
            embedding_size=args.embedding_size,
            hidden_size=args.hidden_size,
            num_hidden_layers=args.num_layers,
            cell=cell,
            pad_token_id=0,
        )
        model = RNNForCausalLM(config).eval()
        row: dict = {
            "config": {
                "cell": cell,
                "vocab_size": args.vocab_size,
                "embedding_size": args.embedding_size,
                "hidden_size": args.hidden_size,
                "num_layers": args.num_layers,
            }
        }
        reference = {}
        for n in LENGTHS:

            def run(use_cache: bool, n=n, model=model):
                return model.generate(
                    prompt,
                    do_sample=False,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    pad_token_id=0,
                    eos_token_id=None,
                    use_cache=use_cache,
                )

            seconds, cached = timed(lambda: run(True), args.repeats, args.clock)
            assert cached.shape[1] == PROMPT_LENGTH + n
            reference[n] = cached
            row[f"cached_{n}_seconds"] = round(seconds, 4)
            row[f"cached_{n}_tokens_per_s"] = round(n / seconds, 1)
            if cell == "lstm" or n == LENGTHS[0]:  # uncached self-attention LSTM at 512 is very slow (cubic)
                seconds, uncached = timed(lambda: run(False), max(1, args.repeats - 2), args.clock)
                assert torch.equal(uncached, cached), "cached and uncached decoding disagree"
                row[f"uncached_{n}_seconds"] = round(seconds, 4)
                row[f"uncached_{n}_tokens_per_s"] = round(n / seconds, 1)
                row[f"speedup_cached_vs_uncached_{n}"] = round(
                    row[f"uncached_{n}_seconds"] / row[f"cached_{n}_seconds"], 2
                )
            if cell == "lstm":
                bare = BareLSTMLM(model).eval()
                seconds, bare_out = timed(lambda bare=bare, n=n: bare.greedy(prompt, n), args.repeats, args.clock)
                assert torch.equal(bare_out, cached), "the bare torch.nn loop disagrees with generate()"
                row[f"bare_torch_loop_{n}_tokens_per_s"] = round(n / seconds, 1)
                row[f"generate_vs_bare_loop_{n}"] = round(row[f"cached_{n}_tokens_per_s"] / (n / seconds), 3)
        row["cached_cost_ratio_512_over_128"] = round(row["cached_512_seconds"] / row["cached_128_seconds"], 3)
        if "uncached_512_seconds" in row:
            row["uncached_cost_ratio_512_over_128"] = round(
                row["uncached_512_seconds"] / row["uncached_128_seconds"], 3
            )
        results["models"][cell] = row
        print(json.dumps({cell: row}, indent=2), flush=True)
    results["load_average_end"] = os.getloadavg()
    print(f"load average: start {results['load_average_start']}, end {results['load_average_end']}")
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"-> {output}")


if __name__ == "__main__":
    main()
