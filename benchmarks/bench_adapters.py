"""LoRA on the recurrent gates and eager int8: what each path costs, as ratios measured in one process.

1. ``RNNForCausalLM`` (LSTM) with PEFT LoRA (``target_modules="all-linear"``): inference forward and training step
   (forward + backward + SGD) of the base model, of the adapted model with the adapter folded into the fused kernel's
   weights (no dropout), with the adapter disabled, and training with ``lora_dropout`` (the cell path through the
   adapter modules). Ratios are base time / path time (1.0 = as fast as the model without adapters).
2. Eager int8 of the same LM's ``nn.Linear``/LSTM layers: ``hf_seq.toolkit.quantization.quantize_dynamic_int8`` (torch's
   dynamic int8) and, when torchao is installed, torchao's ``quantize_(Int8DynamicActivationInt8WeightConfig())`` on
   the ``nn.Linear`` layers of a Transformer, each against the float model (inference, ratio float time / int8 time).

Repeats are interleaved in one process, time is process CPU time (run with one thread), the figure is the median
of the paired ratios.

    OMP_NUM_THREADS=1 python benchmarks/bench_adapters.py
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import hf_seq  # noqa: E402
from hf_seq.toolkit.quantization import quantize_dynamic_int8  # noqa: E402


def timed(fn, warmup: int = 1, inner: int = 3) -> float:
    for _ in range(warmup):
        fn()
    start = time.process_time()
    for _ in range(inner):
        fn()
    return (time.process_time() - start) / inner


def paired_ratios(reference, others: dict, repeats: int) -> dict[str, float]:
    """Median over repeats of reference time / other time, interleaved."""
    ratios: dict[str, list[float]] = {name: [] for name in others}
    for _ in range(repeats):
        for name, fn in others.items():
            base = timed(reference)
            ratios[name].append(base / timed(fn))
    return {name: statistics.median(values) for name, values in ratios.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_len", type=int, default=64)
    parser.add_argument("--hidden_size", type=int, default=256)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=2000, embedding_size=args.hidden_size, hidden_size=args.hidden_size, num_hidden_layers=2
    )
    base = hf_seq.RNNForCausalLM(config).eval()
    ids = torch.randint(4, config.vocab_size, (args.batch_size, args.seq_len))
    batch = {"input_ids": ids, "labels": ids}
    folded = get_peft_model(copy.deepcopy(base), LoraConfig(target_modules="all-linear", r=args.rank)).eval()
    dropout = get_peft_model(
        copy.deepcopy(base), LoraConfig(target_modules="all-linear", r=args.rank, lora_dropout=0.1)
    )

    def infer(model):
        def run():
            with torch.no_grad():
                model(input_ids=ids)

        return run

    def train(model):
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)

        def run():
            model.train()
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        return run

    def disabled():
        with folded.disable_adapter():
            infer(folded)()

    print(f"RNNForCausalLM LSTM 2x{args.hidden_size}, batch {args.batch_size}x{args.seq_len}, LoRA r={args.rank}")
    print(f"{'path':<52} ratio (base time / path time)")
    for name, ratio in paired_ratios(
        infer(base),
        {"inference, LoRA folded into the fused kernel": infer(folded), "inference, disabled": disabled},
        args.repeats,
    ).items():
        print(f"{name:<52} {ratio:.3f}")
    trainable_base = copy.deepcopy(base)
    for name, ratio in paired_ratios(
        train(trainable_base),
        {"training step, LoRA folded": train(folded), "training step, lora_dropout=0.1 (cell path)": train(dropout)},
        max(1, args.repeats // 2),
    ).items():
        print(f"{name:<52} {ratio:.3f}")
    folded.eval()

    int8 = quantize_dynamic_int8(base)
    print(
        f"{'int8 (torch dynamic, quantize_dynamic_int8), LM':<52} {paired_ratios(infer(base), {'': infer(int8)}, args.repeats)['']:.3f}"
    )  # noqa: E501
    try:
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        print("torchao not installed: its row is skipped")
        return
    transformer_config = hf_seq.HfSeqTransformerConfig(
        vocab_size=2000, hidden_size=256, encoder_layers=3, decoder_layers=3, num_attention_heads=4
    )
    transformer = hf_seq.TransformerForConditionalGeneration(transformer_config).eval()
    t_inputs = {"input_ids": ids[:, :32], "decoder_input_ids": ids[:, :32], "use_cache": False}

    def t_infer(model):
        def run():
            with torch.no_grad():
                model(**t_inputs)

        return run

    torch_int8 = quantize_dynamic_int8(transformer)
    torchao_int8 = copy.deepcopy(transformer)
    quantize_(torchao_int8, Int8DynamicActivationInt8WeightConfig())
    for name, ratio in paired_ratios(
        t_infer(transformer),
        {
            "int8 (torch dynamic), Transformer": t_infer(torch_int8),
            "int8 (torchao), Transformer": t_infer(torchao_int8),
        },
        args.repeats,
    ).items():
        print(f"{name:<52} {ratio:.3f}")


if __name__ == "__main__":
    main()
