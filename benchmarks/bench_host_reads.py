"""Host reads and time per decoding step of ``generate()``: hf_seq's generative families and ``MarianMTModel``.

A host read (``.item()``, ``bool(t)``, ``int(t)``: ``aten::_local_scalar_dense``; ``nonzero`` and other operators
whose output shape depends on values) costs nothing on CPU but makes an accelerator wait until its queue is empty,
so a decoding step should read no more than ``transformers``' own loop does. Counted with ``torch.profiler`` on CPU,
per generated token: (reads of a ``--new-tokens`` generate - reads of a ``--short-tokens`` one) / the difference,
so the encoder and the prompt's forward cancel out; "per token, all" is the issue-style figure (every read of the
longer call divided by its new tokens). Operators per step are counted the same way. Time per step: the median of
``--repeats`` interleaved ``--new-tokens`` generates (process CPU time with one thread), divided by the tokens.

Models (same sizes as ``bench_transformer.py``'s ``build_models``, random weights): the hf_seq Transformer and
``MarianMTModel`` (post-LN, ReLU, sinusoidal positions, tied embeddings, SDPA), the hf_seq LSTM LM and LSTM
seq2seq with additive attention (hidden size = ``--d-model``), and a model that reads nothing itself (embedding →
linear: what is left is the loop's own reads).

    python benchmarks/bench_host_reads.py --threads 1
    python benchmarks/bench_host_reads.py --threads 1 --batch 8   # a padded batch (rows of 1/2..1 of the length)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import torch  # noqa: E402
from bench_transformer import BOS, EOS, PAD, build_models  # noqa: E402
from torch import nn  # noqa: E402
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

import hf_seq  # noqa: E402

READ_EVENTS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::masked_select", "aten::_unique2")


class LoopOnlyConfig(PretrainedConfig):
    model_type = "hf_seq_bench_loop_only"

    def __init__(self, vocab_size: int = 8000, hidden_size: int = 32, **kwargs) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = 1  # generate() sizes its (unused) cache with it
        super().__init__(**kwargs)


class LoopOnlyLM(PreTrainedModel, GenerationMixin):
    """Embedding → linear, no cache, no mask: its forward reads nothing, so its reads are the loop's."""

    config_class = LoopOnlyConfig

    def __init__(self, config: LoopOnlyConfig) -> None:
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, **kwargs) -> CausalLMOutputWithPast:
        return CausalLMOutputWithPast(logits=self.head(self.embed(input_ids[:, -1:])))  # (B, 1, V)


def build_all(args: argparse.Namespace) -> dict[str, torch.nn.Module]:
    models = build_models(args)  # hf_seq Transformer and Marian, same sizes
    special = dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)
    models["hf_seq rnn lm"] = hf_seq.RNNForCausalLM(
        hf_seq.HfSeqRNNConfig(
            vocab_size=args.vocab,
            embedding_size=args.d_model,
            hidden_size=args.d_model,
            num_hidden_layers=args.layers,
            cell="lstm",
            **special,
        )
    )
    models["hf_seq rnn seq2seq"] = hf_seq.RNNSeq2SeqForConditionalGeneration(
        hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=args.vocab,
            embedding_size=args.d_model,
            hidden_size=args.d_model,
            encoder_layers=args.layers,
            decoder_layers=args.layers,
            attention="additive",
            max_target_length=4 * args.new_tokens,
            decoder_start_token_id=BOS,
            **special,
        )
    )
    models["loop only"] = LoopOnlyLM(LoopOnlyConfig(args.vocab, args.d_model, **special))
    for model in models.values():
        model.eval()
    return models


def make_inputs(args: argparse.Namespace, left: bool = False) -> dict[str, torch.Tensor]:
    """``--batch`` rows of ``--src-len`` ids; rows after the first are padded to 1/2..1 of the length (on the right
    for a source, on the ``left`` for a decoder-only prompt)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=generator)
    lengths = torch.randint(args.src_len // 2, args.src_len + 1, (args.batch,), generator=generator)
    lengths[0] = args.src_len
    mask = (torch.arange(args.src_len)[None] < lengths[:, None]).long()
    if left:
        mask = mask.flip(1)
    return {"input_ids": ids.masked_fill(mask == 0, PAD), "attention_mask": mask}


def generate(model: torch.nn.Module, inputs: dict, new_tokens: int, num_beams: int) -> None:
    model.generate(**inputs, num_beams=num_beams, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens)


def profile_counts(model: torch.nn.Module, inputs: dict, new_tokens: int, num_beams: int) -> tuple[int, int]:
    """(host reads, operator calls) of one generate, as ``torch.profiler`` records them."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate(model, inputs, new_tokens, num_beams)
    events = collections.Counter({e.key: e.count for e in prof.key_averages()})
    reads = sum(events[name] for name in READ_EVENTS)
    operators = sum(count for name, count in events.items() if name.startswith("aten::"))
    return reads, operators


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--ffn", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--src-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--short-tokens", type=int, default=8)
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(REPO_ROOT / "benchmarks" / "results" / "bench_host_reads.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.threads == 1 else time.perf_counter

    torch.manual_seed(0)
    models = build_all(args)
    sources, prompts = make_inputs(args), make_inputs(args, left=True)
    inputs_of = {name: sources if model.config.is_encoder_decoder else prompts for name, model in models.items()}
    steps = args.new_tokens - args.short_tokens
    results = {}
    for beams in args.beams:
        for name, model in models.items():  # warm-up: lazy initialisations stay out of the counts and times
            generate(model, inputs_of[name], args.short_tokens, beams)
        rows = {}
        for name, model in models.items():
            short_reads, short_ops = profile_counts(model, inputs_of[name], args.short_tokens, beams)
            long_reads, long_ops = profile_counts(model, inputs_of[name], args.new_tokens, beams)
            rows[name] = {
                "reads_per_step": (long_reads - short_reads) / steps,
                "reads_per_token_all": long_reads / args.new_tokens,
                "operators_per_step": (long_ops - short_ops) / steps,
            }
        seconds = {name: [] for name in models}
        for _ in range(args.repeats):
            for name, model in models.items():  # interleaved: A, B, C, ..., A, B, C, ...
                start = clock()
                generate(model, inputs_of[name], args.new_tokens, beams)
                seconds[name].append(clock() - start)
        for name in models:
            rows[name]["ms_per_step"] = 1e3 * statistics.median(seconds[name]) / args.new_tokens
            rows[name]["raw_s"] = seconds[name]
        results[f"beams_{beams}"] = rows

    results["settings"] = {
        **{k: v for k, v in vars(args).items() if k != "out"},
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "machine": platform.processor() or platform.machine(),
        "loadavg_at_end": os.getloadavg(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))

    print(
        f"threads={args.threads}, d_model={args.d_model}, layers={args.layers}, vocab={args.vocab}, "
        f"batch={args.batch}×{args.src_len}, {args.new_tokens} new tokens (steps counted: {steps}), "
        f"median of {args.repeats} interleaved repeats; load average {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| search | model | host reads / step | reads / token, all | operators / step | ms / step |")
    print("|---|---|---:|---:|---:|---:|")
    for beams in args.beams:
        rows = results[f"beams_{beams}"]
        for name, row in rows.items():
            print(
                f"| {'greedy' if beams == 1 else f'beam {beams}'} | {name} | {row['reads_per_step']:.2f} | "
                f"{row['reads_per_token_all']:.2f} | {row['operators_per_step']:.0f} | {row['ms_per_step']:.3f} |"
            )
        ratio = rows["marian"]["ms_per_step"] / rows["hf_seq"]["ms_per_step"]
        print(f"| {'greedy' if beams == 1 else f'beam {beams}'} | **hf_seq / marian speed** | | | | **{ratio:.2f}×** |")


if __name__ == "__main__":
    main()
