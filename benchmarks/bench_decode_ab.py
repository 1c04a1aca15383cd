"""Transformer decoding of two versions of hf_seq in ONE process: an earlier checkout against the current code.

Timing two versions in two processes on a shared machine compares the machine's load more than the code. Here the
earlier checkout's ``hf_seq`` package (``--base``: the folder holding it, e.g. ``git worktree add /tmp/old <commit>``
or ``git archive <commit> | tar -x -C /tmp/old``) is copied under another name (``hf_seq_base``: every sibling import
in the package is relative), both Transformers get the same weights, and their ``generate()`` calls alternate
(``--repeats`` pairs after one warm-up pair, the order flipped every pair), one thread, process CPU time. Printed:
the median of the paired ratios base time / current time (> 1: the current code is faster), their range, ms per
step; the tokens of both must be equal.

    python benchmarks/bench_decode_ab.py --base /tmp/old --threads 1
    python benchmarks/bench_decode_ab.py --base /tmp/old --d-model 256 --layers 3 --batch 8 --new-tokens 64
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

import hf_seq  # noqa: E402, F401  (the current code)
from hf_seq.configuration_transformer import HfSeqTransformerConfig  # noqa: E402
from hf_seq.modeling_transformer import TransformerForConditionalGeneration  # noqa: E402


def import_base(folder: Path, workdir: Path):
    """``hf_seq_base.modeling_transformer`` and ``hf_seq_base.configuration_transformer`` of ``folder/hf_seq``."""
    shutil.copytree(folder / "hf_seq", workdir / "hf_seq_base")
    sys.path.insert(0, str(workdir))
    return (
        importlib.import_module("hf_seq_base.modeling_transformer"),
        importlib.import_module("hf_seq_base.configuration_transformer"),
    )


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="folder of an earlier checkout (holding its hf_seq/)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1, help="rows after the first are padded to 10 of 16 tokens")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = Path(args.base).resolve()
    if not (base / "hf_seq" / "modeling_transformer.py").is_file():
        parser.error(f"--base {base} holds no hf_seq/modeling_transformer.py")

    with tempfile.TemporaryDirectory() as workdir:
        base_modeling, base_configuration = import_base(base, Path(workdir))
        sizes = dict(
            vocab_size=args.vocab,
            hidden_size=args.d_model,
            encoder_layers=args.layers,
            decoder_layers=args.layers,
            num_attention_heads=max(2, args.d_model // 64),
            intermediate_size=4 * args.d_model,
            dropout=0.1,
            max_position_embeddings=512,
            pad_token_id=0,
            bos_token_id=2,
            eos_token_id=3,
            decoder_start_token_id=2,
        )
        torch.manual_seed(0)
        models = {
            "current": TransformerForConditionalGeneration._from_config(
                HfSeqTransformerConfig(**sizes), attn_implementation="sdpa"
            ).eval(),
            "base": base_modeling.TransformerForConditionalGeneration._from_config(
                base_configuration.HfSeqTransformerConfig(**sizes), attn_implementation="sdpa"
            ).eval(),
        }
        models["base"].load_state_dict(models["current"].state_dict())
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(4, args.vocab, (args.batch, 16), generator=generator)
        mask = torch.ones_like(ids)
        mask[1:, 10:] = 0
        ids = ids.masked_fill(mask == 0, 0)
        print(
            f"d_model={args.d_model}, layers={args.layers}+{args.layers}, vocab={args.vocab}, batch={args.batch}×16, "
            f"{args.new_tokens} new tokens, {args.repeats} pairs, threads={args.threads}, base={base}"
        )
        for beams in (1, 5):
            seconds = {name: [] for name in models}
            tokens = {}
            for pair in range(args.repeats + 1):  # pair 0: warm-up
                order = ("current", "base") if pair % 2 == 0 else ("base", "current")
                for name in order:
                    start = time.process_time()
                    tokens[name] = models[name].generate(
                        input_ids=ids,
                        attention_mask=mask,
                        num_beams=beams,
                        do_sample=False,
                        max_new_tokens=args.new_tokens,
                        min_new_tokens=args.new_tokens,
                    )
                    if pair:
                        seconds[name].append(time.process_time() - start)
                if not torch.equal(tokens["base"], tokens["current"]):
                    raise SystemExit(f"beams={beams}: the two versions decoded different tokens")
            ratios = [b / c for b, c in zip(seconds["base"], seconds["current"])]
            per_step = {name: 1e3 * statistics.median(s) / args.new_tokens for name, s in seconds.items()}
            print(
                f"{'greedy' if beams == 1 else f'beam {beams}'}: base / current time {statistics.median(ratios):.3f} "
                f"(pairs {min(ratios):.3f}–{max(ratios):.3f}); ms/step current {per_step['current']:.3f}, base "
                f"{per_step['base']:.3f}; same tokens; load average {os.getloadavg()[0]:.1f}"
            )


if __name__ == "__main__":
    main()
