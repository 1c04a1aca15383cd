"""Sanity check that attention learns alignments: reverse a random token sequence, plain vs attention seq2seq.

    OMP_NUM_THREADS=1 python benchmarks/attention_sanity_reverse.py [--steps 800] [--attention none additive]

Synthetic task (no corpus): source = 4..8 random tokens from a 20-token alphabet + ``</s>``; target = the tokens
reversed + ``</s>``. Identical tiny models (embedding 32, hidden 64, bidirectional LSTM encoder, LSTM decoder),
identical data stream, optimizer (Adam 3e-3, batch 64) and number of steps; only ``attention`` differs. Reports
the training loss, greedy exact-match accuracy on 500 held-out sequences and seconds, writes
``benchmarks/results/attention_sanity_reverse.json`` and, for the first attention model, a heat map of one held-out
example (``--plot``; the learned alignment is the anti-diagonal).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hf_seq.configuration_rnn_seq2seq import HfSeqRNNSeq2SeqConfig  # noqa: E402
from hf_seq.modeling_rnn_seq2seq import RNNSeq2SeqForConditionalGeneration  # noqa: E402

VOCAB, PAD, BOS, EOS = 24, 0, 2, 3


def make_batch(generator: torch.Generator, batch: int, low: int, high: int):
    """Right-padded sources ``(B, high+1)``, their mask and the reversed labels (-100 padded)."""
    lengths = torch.randint(low, high + 1, (batch,), generator=generator)
    src = torch.full((batch, high + 1), PAD)
    labels = torch.full((batch, high + 1), -100)
    for row, length in enumerate(lengths.tolist()):
        tokens = torch.randint(4, VOCAB, (length,), generator=generator)
        src[row, :length], src[row, length] = tokens, EOS
        labels[row, :length], labels[row, length] = tokens.flip(0), EOS
    return src, (src != PAD).long(), labels


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", nargs="+", default=["none", "additive"])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--min_len", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=8)
    parser.add_argument("--plot", default=str(REPO / "docs" / "attention_heatmap_reverse.png"))
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "attention_sanity_reverse.json"))
    args = parser.parse_args()
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    test_src, test_mask, test_labels = make_batch(torch.Generator().manual_seed(123), 500, args.min_len, args.max_len)
    results, plotted = {}, False
    for attention in args.attention:
        torch.manual_seed(0)
        stream = torch.Generator().manual_seed(0)
        config = HfSeqRNNSeq2SeqConfig(
            vocab_size=VOCAB,
            embedding_size=32,
            hidden_size=64,
            attention=attention,
            bidirectional=True,
            dropout=0.0,
            max_target_length=args.max_len + 2,
        )
        model = RNNSeq2SeqForConditionalGeneration(config)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        start, losses = time.perf_counter(), []
        for _ in range(args.steps):
            src, mask, labels = make_batch(stream, 64, args.min_len, args.max_len)
            loss = model(input_ids=src, attention_mask=mask, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
        seconds = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            generated = model.generate(
                input_ids=test_src, attention_mask=test_mask, num_beams=1, max_new_tokens=args.max_len + 1
            )
        exact = 0
        for row in range(test_src.shape[0]):
            reference = [t for t in test_labels[row].tolist() if t != -100]
            exact += generated[row, 1 : 1 + len(reference)].tolist() == reference
        results[attention] = {
            "final_train_loss_mean_last_50": round(sum(losses[-50:]) / 50, 4),
            "exact_match": exact / test_src.shape[0],
            "train_seconds": round(seconds, 1),
        }
        print(attention, results[attention], flush=True)
        if attention != "none" and args.plot and not plotted:
            from hf_seq.toolkit.visualization import plot_attention

            row = 0
            length = int(test_mask[row].sum())
            src_ids = test_src[row : row + 1, :length]
            with torch.no_grad():
                out = model.generate(input_ids=src_ids, max_new_tokens=args.max_len + 1)
                weights = model(input_ids=src_ids, decoder_input_ids=out[:, :-1], output_attentions=True)
            names = [f"t{t}" if t != EOS else "</s>" for t in src_ids[0].tolist()]
            targets = [f"t{t}" if t != EOS else "</s>" for t in out[0, 1:].tolist()]
            plot_attention(
                weights.cross_attentions[0][0],
                names,
                targets,
                args.plot,
                title=f"reverse task, attention={attention}, {args.steps} steps",
            )
            plotted = True

    summary = {
        "benchmark": "attention_sanity_reverse",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "task": f"reverse {args.min_len}-{args.max_len} random tokens (20-symbol alphabet)",
        "steps": args.steps,
        "batch": 64,
        "torch_threads": torch.get_num_threads(),
        "results": results,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
