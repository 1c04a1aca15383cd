"""hf_seq against transformers' own models and bare cuDNN on a GPU: training, decoding, MFU, host synchronisations.

Every workload runs hf_seq and its peer with the same sizes in this process, bf16 autocast, fused AdamW, timed with
CUDA events, repeats interleaved (hf_seq, peer, hf_seq, peer, ...) and the median of each side reported:

* Transformer-base (d 512, 6+6 layers, 8 heads, FFN 2048, vocabulary 32k) against ``MarianMTModel``: training step on
  a full batch (64 x 64+64 tokens) and on padded batches (lengths 10-64 and 20-128), greedy decoding (batch 64, 128 and
  256 new tokens) and beam search (5 beams, batch 16, 64 new tokens);
* a small Transformer (d 256, 3+3, vocabulary 8k, batch 128 x 48+48) against Marian;
* BERT-base masked-LM training (batch 32 x 512, and padded 64-512) against ``BertForMaskedLM`` with the SAME weights
  (``from_transformers_bert``), with the model-FLOPs utilisation of both against the bf16 matmul rate measured here;
* an LSTM language model (2 x 650, vocabulary 10k, batch 64 x 35) against a bare ``nn.Embedding + nn.LSTM + nn.Linear``
  with the same weights (cuDNN on both sides);
* an attention RNN seq2seq (BiLSTM 256 encoder, LSTM 256 decoder, additive attention) training step (no peer);
* host-device synchronisations in one training step (``torch.cuda.set_sync_debug_mode``) of each model and peer;
* with ``--compile``, the training steps again with both models under ``torch.compile``.

``--device cpu --tiny`` runs every workload with tiny sizes on the CPU (wall-clock timing, float32, no sync count):
that is how the script is tested without a GPU; its figures mean nothing for speed.

    python benchmarks/bench_gpu.py                       # writes benchmarks/results/gpu_<device>.json and .md
    python benchmarks/bench_gpu.py --compile --repeats 7
    python benchmarks/bench_gpu.py --device cpu --tiny --repeats 1 --out /tmp/gpu_dry.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import transformers  # noqa: E402
from transformers import BertConfig as TransformersBertConfig  # noqa: E402
from transformers import BertForMaskedLM as TransformersBertForMaskedLM  # noqa: E402
from transformers import MarianConfig, MarianMTModel  # noqa: E402

import hf_seq  # noqa: E402
from hf_seq.toolkit.bert_conversion import from_transformers_bert  # noqa: E402

PAD, BOS, EOS = 0, 1, 2

# Sizes of every workload: the full ones (a GPU) and the tiny ones (--tiny, a CPU dry run of the same code).
SIZES = {
    "transformer_base": {
        "full": dict(B=64, S=64, T=64, V=32000, d=512, L=6, H=8, F=2048),
        "tiny": dict(B=4, S=8, T=8, V=300, d=32, L=1, H=4, F=64),
    },
    "transformer_small": {
        "full": dict(B=128, S=48, T=48, V=8000, d=256, L=3, H=4, F=1024),
        "tiny": dict(B=4, S=6, T=6, V=200, d=32, L=1, H=4, F=64),
    },
    "padded_lengths": {"full": [(10, 64), (20, 128)], "tiny": [(3, 8), (4, 12)]},
    "decode": {
        "full": dict(batch=64, new=(128, 256), beam_batch=16, beam_new=64, prompt=32),
        "tiny": dict(batch=2, new=(4, 8), beam_batch=2, beam_new=4, prompt=5),
    },
    "bert_base": {
        "full": dict(B=32, S=512, V=30522, H=768, L=12, heads=12, padded=(64, 512)),
        "tiny": dict(B=2, S=16, V=300, H=32, L=1, heads=4, padded=(4, 16)),
    },
    "lstm_lm": {"full": dict(B=64, T=35, V=10000, H=650, L=2), "tiny": dict(B=4, T=8, V=200, H=16, L=2)},
    "rnn_seq2seq": {"full": dict(B=64, S=40, T=40, V=8000, H=256), "tiny": dict(B=4, S=6, T=6, V=200, H=16)},
}


# ---------------------------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------------------------


class Timer:
    """Seconds per call of ``fn``: CUDA events on a GPU, the wall clock on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def __call__(self, fn: Callable[[], object], calls: int) -> float:
        if self.device.type != "cuda":
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - start) / calls
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.sync()
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        self.sync()
        return begin.elapsed_time(end) / 1000.0 / calls


def interleaved(timer: Timer, fns: dict[str, Callable[[], object]], repeats: int, calls: int, warmup: int) -> dict:
    """Median seconds per call of each function, the repeats interleaved so that drift hits every side alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(timer(fn, calls))
    return {name: statistics.median(values) for name, values in samples.items()}


def autocast(device: torch.device):
    """bf16 autocast on a GPU; float32 on CPU (the dry run checks the code, not the numbers)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train_step(model: nn.Module, batch: dict, device: torch.device) -> Callable[[], None]:
    """One optimisation step: forward with labels, backward, AdamW (fused on a GPU)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def step() -> None:
        with autocast(device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def host_syncs(step: Callable[[], None], device: torch.device) -> int | None:
    """Host-device synchronisations in one call of ``step`` (after a warm-up call); None off CUDA."""
    if device.type != "cuda":
        return None
    step()
    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return sum("synchronizing" in str(w.message).lower() for w in caught)


def step_flops(model: nn.Module, batch: dict, device: torch.device) -> int:
    """Model FLOPs of one dense training step (forward + backward), counted by ``torch.utils.flop_counter``."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        with autocast(device):
            loss = model(**batch).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_rate(timer: Timer, device: torch.device, tiny: bool) -> float:
    """Measured dense matmul FLOP/s: bf16 8192^2 on a GPU, float32 on CPU."""
    n = 256 if tiny else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = interleaved(timer, {"mm": lambda: a @ b}, repeats=3, calls=2 if tiny else 10, warmup=1)["mm"]
    return 2 * n**3 / seconds


# ---------------------------------------------------------------------------------------------------------------
# Models and batches
# ---------------------------------------------------------------------------------------------------------------


def transformer_pair(size: dict, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """hf_seq Transformer and Marian with identical sizes (post-LN, ReLU, sinusoidal positions, tied embeddings)."""
    ours = hf_seq.HfSeqTransformerConfig(
        vocab_size=size["V"],
        hidden_size=size["d"],
        encoder_layers=size["L"],
        decoder_layers=size["L"],
        num_attention_heads=size["H"],
        intermediate_size=size["F"],
        dropout=0.1,
        max_position_embeddings=512,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    peer = MarianConfig(
        vocab_size=size["V"],
        decoder_vocab_size=size["V"],
        d_model=size["d"],
        encoder_layers=size["L"],
        decoder_layers=size["L"],
        encoder_attention_heads=size["H"],
        decoder_attention_heads=size["H"],
        encoder_ffn_dim=size["F"],
        decoder_ffn_dim=size["F"],
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_function="relu",
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
    a = hf_seq.TransformerForConditionalGeneration._from_config(ours, attn_implementation="sdpa").to(device)
    torch.manual_seed(0)
    b = MarianMTModel._from_config(peer, attn_implementation="sdpa").to(device)
    for model in (a, b):
        model.generation_config.forced_eos_token_id = None
    return a, b


def seq2seq_batch(size: dict, lengths: tuple[int, int] | None, device: torch.device, seed: int = 1) -> dict:
    """Source and target ids; with ``lengths=(low, high)`` each row's source and target lengths are uniform in that
    range (right padding, -100 labels beyond the target), else every row is full (S and T tokens)."""
    g = torch.Generator().manual_seed(seed)
    batch, vocab = size["B"], size["V"]
    s, t = (lengths[1], lengths[1]) if lengths else (size["S"], size["T"])
    src = torch.randint(3, vocab, (batch, s), generator=g)
    tgt = torch.randint(3, vocab, (batch, t), generator=g)
    mask = torch.ones(batch, s, dtype=torch.long)
    if lengths:
        src_len = torch.randint(lengths[0], lengths[1] + 1, (batch,), generator=g)
        tgt_len = torch.randint(lengths[0], lengths[1] + 1, (batch,), generator=g)
        src_len[0] = tgt_len[0] = lengths[1]
        mask = (torch.arange(s)[None] < src_len[:, None]).long()
        src = src.masked_fill(mask == 0, PAD)
        tgt = tgt.masked_fill(torch.arange(t)[None] >= tgt_len[:, None], -100)
    return {"input_ids": src.to(device), "attention_mask": mask.to(device), "labels": tgt.to(device)}


def tokens(batch: dict, seq2seq: bool) -> int:
    """Real tokens of a batch: source + labelled target tokens of a seq2seq batch, else the unpadded input tokens."""
    count = int(batch["attention_mask"].sum()) if "attention_mask" in batch else batch["input_ids"].numel()
    return count + int((batch["labels"] != -100).sum()) if seq2seq else count


def bert_pair(size: dict, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """transformers' BertForMaskedLM and hf_seq's, the latter converted from the former (the same weights)."""
    dims = dict(
        vocab_size=size["V"],
        hidden_size=size["H"],
        num_hidden_layers=size["L"],
        num_attention_heads=size["heads"],
        intermediate_size=4 * size["H"],
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    peer = TransformersBertForMaskedLM(TransformersBertConfig(**dims, attn_implementation="sdpa"))
    ours = from_transformers_bert(hf_seq.BertForMaskedLM, peer)
    return ours.to(device), peer.to(device)


def mlm_batch(size: dict, lengths: tuple[int, int] | None, device: torch.device, seed: int = 1) -> dict:
    """Token ids with 15 % of the real positions labelled; optional per-row lengths (right padding)."""
    g = torch.Generator().manual_seed(seed)
    batch, length, vocab = size["B"], size["S"], size["V"]
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    if lengths:
        lens = torch.randint(lengths[0], lengths[1] + 1, (batch,), generator=g)
        lens[0] = lengths[1]
        mask = (torch.arange(length)[None] < lens[:, None]).long()
        ids = ids.masked_fill(mask == 0, PAD)
    labels = ids.masked_fill((torch.rand(ids.shape, generator=g) > 0.15) | (mask == 0), -100)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "labels": labels.to(device)}


class BareLSTMLM(nn.Module):
    """``nn.Embedding -> nn.LSTM -> nn.Linear``, next-token cross-entropy: the cuDNN baseline."""

    def __init__(self, vocab: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden, layers, batch_first=True, dropout=0.5)
        self.drop = nn.Dropout(0.5)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, **_: object):
        states, _ = self.rnn(self.drop(self.emb(input_ids)))  # (B, T, H)
        logits = self.out(self.drop(states))  # (B, T, V)
        loss = nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return transformers.modeling_outputs.CausalLMOutput(loss=loss, logits=logits)


def lstm_pair(size: dict, device: torch.device) -> tuple[nn.Module, nn.Module]:
    """hf_seq's RNNForCausalLM and the bare model with the same weights."""
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=size["V"],
        embedding_size=size["H"],
        hidden_size=size["H"],
        num_hidden_layers=size["L"],
        cell="lstm",
        dropout=0.5,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    ours = hf_seq.RNNForCausalLM(config)
    bare = BareLSTMLM(size["V"], size["H"], size["L"])
    own = dict(ours.named_parameters())
    with torch.no_grad():
        bare.emb.weight.copy_(ours.get_input_embeddings().weight)
        bare.out.weight.copy_(ours.lm_head.weight)
        bare.out.bias.copy_(ours.lm_head.bias)
        for name, param in bare.rnn.named_parameters():  # weight_ih_l{k} <- the stack's layer k (PyTorch names)
            kind, layer = re.fullmatch(r"(\w+)_l(\d+)", name).groups()
            source = [v for k, v in own.items() if re.search(rf"layers\.{layer}\.{kind}_l0$", k)]
            param.copy_(source[0])
    return ours.to(device), bare.to(device)


def rnn_seq2seq_model(size: dict, device: torch.device) -> nn.Module:
    config = hf_seq.HfSeqRNNSeq2SeqConfig(
        vocab_size=size["V"],
        embedding_size=size["H"],
        hidden_size=size["H"],
        attention="additive",
        bidirectional=True,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    torch.manual_seed(0)
    return hf_seq.RNNSeq2SeqForConditionalGeneration(config).to(device)


# ---------------------------------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.timer = Timer(self.device)
        self.scale = "tiny" if args.tiny else "full"
        self.results: dict[str, object] = {}
        self.peak = None

    def size(self, name: str):
        return SIZES[name][self.scale]

    def record(self, key: str, value: object) -> None:
        self.results[key] = value
        print(f"{key} = {value}", flush=True)

    def compare_training(
        self, tag: str, ours: nn.Module, peer: nn.Module, batch: dict, peer_name: str, seq2seq: bool
    ) -> dict[str, float]:
        """Training-step time of both models on ``batch``, tokens/s, ratio (peer time / ours: > 1 = hf_seq faster),
        host synchronisations per step and, with ``--compile``, the compiled steps. Returns the eager seconds."""
        steps = {name: train_step(m.train(), batch, self.device) for name, m in (("hf_seq", ours), (peer_name, peer))}
        seconds = interleaved(self.timer, steps, self.args.repeats, self.args.calls, warmup=self.args.warmup)
        count = tokens(batch, seq2seq)
        self.record(f"{tag}_ms_per_step", {k: round(1000 * v, 3) for k, v in seconds.items()})
        self.record(f"{tag}_tokens_per_s", {k: round(count / v) for k, v in seconds.items()})
        self.record(f"{tag}_ratio_vs_{peer_name}", round(seconds[peer_name] / seconds["hf_seq"], 3))
        self.record(f"{tag}_host_syncs", {k: host_syncs(step, self.device) for k, step in steps.items()})
        if self.args.compile:
            compiled = {
                name: train_step(torch.compile(m), batch, self.device)
                for name, m in (("hf_seq", ours), (peer_name, peer))
            }
            timed = interleaved(self.timer, compiled, self.args.repeats, self.args.calls, warmup=self.args.warmup)
            self.record(f"{tag}_compiled_ms_per_step", {k: round(1000 * v, 3) for k, v in timed.items()})
            self.record(f"{tag}_compiled_ratio_vs_{peer_name}", round(timed[peer_name] / timed["hf_seq"], 3))
        return seconds

    def mfu(self, tag: str, peer: nn.Module, batch: dict, seconds: dict) -> None:
        """Model-FLOPs utilisation of each side: the peer's dense step FLOPs over the measured matmul rate."""
        flops = step_flops(peer, batch, self.device)
        self.record(f"{tag}_mfu", {k: round(flops / v / self.peak, 3) for k, v in seconds.items()})

    def transformer(self, tag: str) -> None:
        size = self.size(tag)
        ours, peer = transformer_pair(size, self.device)
        full = seq2seq_batch(size, None, self.device)
        seconds = self.compare_training(f"{tag}_train", ours, peer, full, "marian", seq2seq=True)
        self.mfu(f"{tag}_train", peer, full, seconds)
        if tag == "transformer_base":
            for low, high in self.size("padded_lengths"):
                padded = seq2seq_batch({**size, "S": high, "T": high}, (low, high), self.device, seed=2)
                self.compare_training(f"{tag}_train_padded_{low}_{high}", ours, peer, padded, "marian", seq2seq=True)
            self.decode(tag, ours, peer, full)
        del ours, peer

    def decode(self, tag: str, ours: nn.Module, peer: nn.Module, batch: dict) -> None:
        """Greedy decoding of forced lengths and beam search, tokens/s and ratios against Marian."""
        plan = self.size("decode")
        prompt = batch["input_ids"][: plan["batch"], : plan["prompt"]]
        ours.eval(), peer.eval()

        def generate(model: nn.Module, source: torch.Tensor, new: int, beams: int) -> Callable[[], None]:
            def run() -> None:
                with torch.no_grad(), autocast(self.device):
                    model.generate(
                        input_ids=source,
                        attention_mask=torch.ones_like(source),
                        max_new_tokens=new,
                        min_new_tokens=new,
                        do_sample=False,
                        num_beams=beams,
                        eos_token_id=None,
                    )

            return run

        for new in plan["new"]:
            fns = {"hf_seq": generate(ours, prompt, new, 1), "marian": generate(peer, prompt, new, 1)}
            seconds = interleaved(self.timer, fns, self.args.repeats, calls=1, warmup=1)
            self.record(
                f"{tag}_greedy{new}_tokens_per_s", {k: round(prompt.shape[0] * new / v) for k, v in seconds.items()}
            )
            self.record(f"{tag}_greedy{new}_ratio_vs_marian", round(seconds["marian"] / seconds["hf_seq"], 3))
        source = prompt[: plan["beam_batch"]]
        fns = {
            "hf_seq": generate(ours, source, plan["beam_new"], 5),
            "marian": generate(peer, source, plan["beam_new"], 5),
        }
        seconds = interleaved(self.timer, fns, self.args.repeats, calls=1, warmup=1)
        self.record(f"{tag}_beam5_ms", {k: round(1000 * v, 2) for k, v in seconds.items()})
        self.record(f"{tag}_beam5_ratio_vs_marian", round(seconds["marian"] / seconds["hf_seq"], 3))

    def bert(self) -> None:
        size = self.size("bert_base")
        ours, peer = bert_pair(size, self.device)
        full = mlm_batch(size, None, self.device)
        seconds = self.compare_training("bert_base_mlm_train", ours, peer, full, "transformers", seq2seq=False)
        self.mfu("bert_base_mlm_train", peer, full, seconds)
        padded = mlm_batch(size, size["padded"], self.device, seed=2)
        low, high = size["padded"]
        self.compare_training(f"bert_base_mlm_train_padded_{low}_{high}", ours, peer, padded, "transformers", False)
        del ours, peer

    def lstm_lm(self) -> None:
        size = self.size("lstm_lm")
        ours, bare = lstm_pair(size, self.device)
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(3, size["V"], (size["B"], size["T"] + 1), generator=g).to(self.device)
        batch = {"input_ids": ids, "labels": ids}
        self.compare_training("lstm_lm_train", ours, bare, batch, "bare_cudnn", seq2seq=False)
        del ours, bare

    def rnn_seq2seq(self) -> None:
        size = self.size("rnn_seq2seq")
        model = rnn_seq2seq_model(size, self.device).train()
        batch = seq2seq_batch(size, None, self.device)
        step = train_step(model, batch, self.device)
        seconds = interleaved(self.timer, {"hf_seq": step}, self.args.repeats, self.args.calls, self.args.warmup)
        self.record("rnn_seq2seq_attention_train_tokens_per_s", round(tokens(batch, True) / seconds["hf_seq"]))
        self.record("rnn_seq2seq_attention_train_host_syncs", host_syncs(step, self.device))


WORKLOADS = ("transformer_base", "transformer_small", "bert_base", "lstm_lm", "rnn_seq2seq")


def write_markdown(results: dict, path: Path) -> None:
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| `{key}` | {json.dumps(value)} |" for key, value in results.items() if key != "command"]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a dry run of the code, not a measurement")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats per side (median reported)")
    parser.add_argument("--calls", type=int, default=10, help="calls timed per repeat")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    parser.add_argument("--compile", action="store_true", help="also time the training steps under torch.compile")
    parser.add_argument("--only", default=",".join(WORKLOADS), help=f"comma-separated subset of {WORKLOADS}")
    parser.add_argument("--out", default=None, help="JSON path (default benchmarks/results/gpu_<device>.json)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA GPU; use --device cpu --tiny for a dry run of the code")
    unknown = sorted(set(args.only.split(",")) - set(WORKLOADS))
    if unknown:
        parser.error(f"--only: unknown workloads {unknown}; choose from {list(WORKLOADS)}")
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    bench = Bench(args)
    name = torch.cuda.get_device_name(bench.device) if bench.device.type == "cuda" else platform.processor() or "cpu"
    bench.record("device", name)
    bench.record("versions", {"torch": torch.__version__, "transformers": transformers.__version__})
    bench.record(
        "command", " ".join(["python", "benchmarks/bench_gpu.py", *(argv if argv is not None else sys.argv[1:])])
    )
    bench.peak = matmul_rate(bench.timer, bench.device, args.tiny)
    bench.record("matmul_tflops", round(bench.peak / 1e12, 3))
    for workload in args.only.split(","):
        if workload.startswith("transformer"):
            bench.transformer(workload)
        elif workload == "bert_base":
            bench.bert()
        else:
            getattr(bench, workload)()
    slug = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_") or bench.device.type
    out = Path(args.out) if args.out else REPO_ROOT / "benchmarks" / "results" / f"gpu_{slug}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(bench.results, indent=1) + "\n")
    write_markdown(bench.results, out.with_suffix(".md"))
    print(f"wrote {out}")
    return bench.results


if __name__ == "__main__":
    main()
