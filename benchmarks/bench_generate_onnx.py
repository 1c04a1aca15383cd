"""Decoding speed: the generating graph (``model_generate.onnx``, the search inside ONNX Runtime) vs the step graphs
(``load_onnxruntime(...).generate()``, transformers' loop over one-token ONNX graphs) vs eager PyTorch ``generate()``.

    OMP_NUM_THREADS=1 python benchmarks/bench_generate_onnx.py [--families rnn_seq2seq transformer rnn_lm]
        [--threads 1 2] [--batches 1 32] [--beams 1 5] [--new_tokens 30] [--int8] [--ctranslate2] [--sample]
        [--profile]

Random-weight models of a small translation size (vocabulary 8,000; RNN: embedding 256, hidden 256, 2 layers, general
attention with input feeding; Transformer: d 256, 3+3 layers, 4 heads; LM: 2-layer LSTM 256), exported once into a
temporary folder. Untrained models rarely emit the end token, so every engine runs ``--new_tokens`` steps: the work
is the same in each row. Every figure is the median of ``--repeats`` timed calls after one warm-up call, in one
process, threads set per engine (``torch.set_num_threads``, ONNX Runtime's intra-op threads). The machine's load
average (``uptime``) is recorded before and after, and after every row: a loaded machine gives slower and noisier
figures.

``--without_step_rewrites``: a translator's generating graph also as it was before the step rewrites of
``hf_seq.toolkit.onnx_rewrites`` (``build_generating_graph(..., step_rewrites=False)``; ``graph_plain_*`` in the
rows), timed in the same process. ``--ctranslate2``: the Transformer also through CTranslate2 (``to_ctranslate2``
with a word-level tokenizer over the same ids; float32, and int8 with ``--int8``), same process and threads.
``--sample``: the language model also samples (eager, step graphs, ``model_sample.onnx``). ``--profile``: ONNX
Runtime's profiler over every generating graph timed (``profile_float32``, ``profile_int8``, ...) at every
setting, with the vocabulary projection's share of the operator's time. ``--no_spinning``: the generating graphs'
sessions with ``session.intra_op.allow_spinning`` "0" (idle threads wait instead of spinning).

The step graphs and the generating graph are timed on the same call (``generate(**inputs, num_beams=...)``); the
generating graph's row is its own session run (``GeneratingGraph.run``), i.e. what a process without Python ML
libraries pays. ``agree`` is the fraction of output rows token-identical to eager ``generate()`` (beam search with a
length penalty: rows cut at max_length may differ, see docs/compile.md). Writes
``benchmarks/results/bench_generate_onnx.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import hf_seq  # noqa: E402
from hf_seq.toolkit.export import load_onnxruntime, to_onnx  # noqa: E402
from hf_seq.toolkit.onnx_generate import GENERATE_FILE, GeneratingGraph, build_generating_graph  # noqa: E402

VOCAB, PAD, BOS, EOS = 8000, 0, 2, 3
TOKENS = dict(pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS)


def build(family: str):
    """A random-weight model whose output layer is scaled up (8×): an untrained model's next-token distribution is
    nearly flat, and near-ties would let the engines' rounding pick different tokens."""
    model = _build(family)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model


def _build(family: str):
    torch.manual_seed(0)
    if family == "rnn_seq2seq":
        config = hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=VOCAB,
            embedding_size=256,
            hidden_size=256,
            encoder_layers=2,
            decoder_layers=2,
            cell="lstm",
            bidirectional=True,
            attention="general",
            input_feeding=True,
            dropout=0.0,
            decoder_start_token_id=BOS,
            **TOKENS,
        )
        return hf_seq.RNNSeq2SeqForConditionalGeneration(config).eval()
    if family == "transformer":
        config = hf_seq.HfSeqTransformerConfig(
            vocab_size=VOCAB,
            hidden_size=256,
            encoder_layers=3,
            decoder_layers=3,
            num_attention_heads=4,
            intermediate_size=1024,
            dropout=0.0,
            max_position_embeddings=256,
            tie_word_embeddings=False,
            decoder_start_token_id=BOS,
            **TOKENS,
        )
        return hf_seq.TransformerForConditionalGeneration(config).eval()
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=VOCAB, embedding_size=256, hidden_size=256, num_hidden_layers=2, cell="lstm", dropout=0.0, **TOKENS
    )
    return hf_seq.RNNForCausalLM(config).eval()


def inputs_for(batch: int, generator: torch.Generator) -> dict:
    """Right-padded rows of 12 to 24 tokens (a language model's prompts: left-padded, 4 to 8)."""
    lengths = torch.randint(12, 25, (batch,), generator=generator)
    ids = torch.full((batch, int(lengths.max())), PAD)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths.tolist()):
        ids[row, :length] = torch.randint(4, VOCAB, (length,), generator=generator)
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask}


def prompts_for(batch: int, generator: torch.Generator) -> dict:
    lengths = torch.randint(4, 9, (batch,), generator=generator)
    width = int(lengths.max())
    ids = torch.full((batch, width), PAD)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths.tolist()):
        ids[row, width - length :] = torch.randint(4, VOCAB, (length,), generator=generator)
        mask[row, width - length :] = 1
    return {"input_ids": ids, "attention_mask": mask}


def word_tokenizer():
    """A word-level tokenizer over the benchmark's vocabulary (``w4`` ... ``w7999``): CTranslate2 reads tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD, "<unk>": 1, "<s>": BOS, "</s>": EOS, **{f"w{i}": i for i in range(4, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


def ct2_translate(translator, tokenizer, inputs: dict, beams: int, new_tokens: int, generation_config) -> list:
    """CTranslate2's ``new_tokens`` target ids per row (its search options from ``generate()``'s config)."""
    from hf_seq.toolkit.export import generate_options

    sources = [
        tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())
        for ids, mask in zip(inputs["input_ids"], inputs["attention_mask"])
    ]
    options = {**generate_options(generation_config, beams), "min_decoding_length": new_tokens}
    results = translator.translate_batch(
        sources, beam_size=beams, max_batch_size=len(sources), max_decoding_length=new_tokens, **options
    )
    return [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


def generating_graph(folder: Path, threads: int, no_spinning: bool) -> GeneratingGraph:
    """The folder's generating graph on ``threads`` intra-op threads; ``no_spinning``: idle threads wait without
    spinning (ONNX Runtime's ``session.intra_op.allow_spinning`` "0")."""
    if not no_spinning:
        return GeneratingGraph(folder, threads=threads)
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(folder / GENERATE_FILE), options, providers=["CPUExecutionProvider"])
    return GeneratingGraph(folder, threads=threads, session=session)


def median_seconds(repeats: int, fn, *fn_args, **fn_kwargs) -> tuple[float, object]:
    """The median seconds of ``repeats`` calls ``fn(*fn_args, **fn_kwargs)`` after a warm-up call, and its output."""
    out = fn(*fn_args, **fn_kwargs)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*fn_args, **fn_kwargs)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def profile(folder: Path, threads: int, feeds_of: dict) -> dict:
    """ONNX Runtime's profiler over two calls of the generating graph: the share of the search operator's time spent
    in the subgraphs' nodes, by op type (the rest is the operator's own search work: scores, top-k, bookkeeping)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "profile")
    session = onnxruntime.InferenceSession(str(folder / "model_generate.onnx"), options)
    for _ in range(2):  # the first call's allocations are in the profile too: two calls, shares of both
        session.run(None, feeds_of)
    events = json.loads(Path(session.end_profiling()).read_text())
    by_op: dict[str, float] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event["args"].get("op_name")
            by_op[op] = by_op.get(op, 0.0) + event["dur"]
    operator = by_op.pop("BeamSearch", 0.0) or 1.0
    shares = {op: round(100 * d / operator, 1) for op, d in sorted(by_op.items(), key=lambda kv: -kv[1])[:6]}
    return {
        "subgraph_nodes_pct": round(100 * sum(by_op.values()) / operator, 1),
        "top_ops_pct": shares,
        "vocabulary_projection_pct": round(100 * projection_time(events) / operator, 1),
    }


PRODUCTS = ("MatMul", "Gemm", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul")


def projection_time(events: list) -> float:
    """Microseconds in the vocabulary projection: the matrix products whose output's last axis is the vocabulary."""
    total = 0.0
    for event in events:
        args = event.get("args", {})
        if event.get("cat") != "Node" or args.get("op_name") not in PRODUCTS:
            continue
        if not event["name"].endswith("_kernel_time"):
            continue
        shapes = [list(shape.values())[0] for shape in args.get("output_type_shape", [])]
        if any(shape and shape[-1] == VOCAB for shape in shapes):
            total += event["dur"]
    return total


def agreement(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The fraction of rows of ``got`` token-identical to ``expected`` (0 where the shapes differ)."""
    if got.shape != expected.shape:
        return 0.0
    return round((got == expected).all(-1).float().mean().item(), 3)


def sampling_row(args, model, steps, graphs: dict, inputs: dict, threads: int, batch: int) -> dict:
    """Sampling (temperature 1, no top-k or top-p) of ``--new_tokens`` tokens: eager, the step graphs (PyTorch's
    draws) and the sampling graph (``model_sample.onnx``, ONNX Runtime's draws)."""
    search = dict(do_sample=True, top_k=0, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens)
    with torch.no_grad():
        eager_s, _ = median_seconds(args.repeats, model.generate, **inputs, **search)
    steps_s, _ = median_seconds(args.repeats, steps.generate, **inputs, **search)
    row = {"family": "rnn_lm", "threads": threads, "batch": batch, "beams": "sample", "eager_s": round(eager_s, 4)}
    row.update(step_graphs_s=round(steps_s, 4), step_graphs_vs_eager=round(eager_s / steps_s, 2))
    start = inputs["input_ids"].shape[1]
    for name, graph in graphs.items():
        graph_s, _ = median_seconds(
            args.repeats,
            graph.sample,
            inputs["input_ids"].numpy(),
            inputs["attention_mask"].numpy(),
            max_length=start + args.new_tokens,
            min_length=start + args.new_tokens,
            seed=0,
        )
        row[f"graph_{name}_s"] = round(graph_s, 4)
        row[f"graph_{name}_vs_eager"] = round(eager_s / graph_s, 2)
    row["load"] = load()
    return row


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["rnn_seq2seq", "transformer", "rnn_lm"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--new_tokens", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--int8", action="store_true", help="also time the int8 generating graph")
    parser.add_argument("--profile", action="store_true", help="profile every generating graph timed")
    parser.add_argument("--ctranslate2", action="store_true", help="also time CTranslate2 for the Transformer")
    parser.add_argument("--sample", action="store_true", help="also time sampling for the language model")
    parser.add_argument(
        "--no_spinning", action="store_true", help="the generating graphs' idle threads wait without spinning"
    )
    parser.add_argument(
        "--without_step_rewrites",
        action="store_true",
        help="also time a translator's generating graph without hf_seq.toolkit.onnx_rewrites",
    )
    parser.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "bench_generate_onnx.json"))
    args = parser.parse_args(argv)
    logging.disable(logging.INFO)
    results = {"load_before": load(), "rows": [], "args": vars(args)}
    root = Path(tempfile.mkdtemp(prefix="bench-generate-onnx-"))
    for family in args.families:
        model = build(family)
        folders = {"float32": to_onnx(model, root / family)}
        if args.int8:
            folders["int8"] = to_onnx(model, root / f"{family}-int8", quantization="int8")
        if args.without_step_rewrites and family != "rnn_lm":
            for name in list(folders):  # copies whose generating graph inlines the step graph as exported
                plain = shutil.copytree(folders[name], root / f"{family}-plain-{name}")
                build_generating_graph(plain, step_rewrites=False)
                folders[f"plain_{name}"] = plain
        decoder_only = family == "rnn_lm"
        ct2_folders = {}
        if args.ctranslate2 and family == "transformer":
            from hf_seq.toolkit.export import to_ctranslate2

            tokenizer = word_tokenizer()
            for quantization in ("float32", "int8") if args.int8 else ("float32",):
                # a copy: the int8 conversion quantizes the weights of the model object it is given in place
                ct2_folders[quantization] = to_ctranslate2(
                    copy.deepcopy(model),
                    root / f"{family}-ct2-{quantization}",
                    quantization=quantization,
                    tokenizer=tokenizer,
                )
        for threads in args.threads:
            torch.set_num_threads(threads)
            graphs = {name: generating_graph(folder, threads, args.no_spinning) for name, folder in folders.items()}
            steps = load_onnxruntime(folders["float32"], threads=threads)
            steps.generating_graph = None  # the step graphs only
            for batch in args.batches:
                generator = torch.Generator().manual_seed(batch)
                inputs = (prompts_for if decoder_only else inputs_for)(batch, generator)
                start = inputs["input_ids"].shape[1] if decoder_only else 1
                for beams in args.beams:
                    # a language model's beams keep length_penalty 0 (the generating graph's search)
                    search = dict(
                        num_beams=beams, do_sample=False, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens
                    )
                    if decoder_only and beams > 1:
                        search["length_penalty"] = 0.0
                    with torch.no_grad():
                        eager_s, eager = median_seconds(args.repeats, model.generate, **inputs, **search)
                    steps_s, by_steps = median_seconds(args.repeats, steps.generate, **inputs, **search)
                    row = {
                        "family": family,
                        "threads": threads,
                        "batch": batch,
                        "beams": beams,
                        "eager_s": round(eager_s, 4),
                        "step_graphs_s": round(steps_s, 4),
                        "step_graphs_agree": agreement(by_steps, eager),
                    }
                    for name, graph in graphs.items():
                        run = dict(
                            max_length=start + args.new_tokens,
                            min_length=start + args.new_tokens,
                            num_beams=beams,
                            length_penalty=search.get("length_penalty", 1.0),
                        )
                        graph_s, (sequences, _, _) = median_seconds(
                            args.repeats,
                            graph.run,
                            inputs["input_ids"].numpy(),
                            inputs["attention_mask"].numpy(),
                            **run,
                        )
                        got = torch.from_numpy(sequences.reshape(-1, sequences.shape[-1]))
                        row[f"graph_{name}_s"] = round(graph_s, 4)
                        row[f"graph_{name}_vs_eager"] = round(eager_s / graph_s, 2)
                        row[f"graph_{name}_agree"] = agreement(got, eager)
                    row["step_graphs_vs_eager"] = round(eager_s / steps_s, 2)
                    for name, folder in ct2_folders.items():
                        import ctranslate2

                        translator = ctranslate2.Translator(
                            str(folder), device="cpu", intra_threads=threads, inter_threads=1
                        )
                        ct2_s, ids = median_seconds(
                            args.repeats,
                            ct2_translate,
                            translator,
                            tokenizer,
                            inputs,
                            beams,
                            args.new_tokens,
                            model.generation_config,
                        )
                        row[f"ctranslate2_{name}_s"] = round(ct2_s, 4)
                        row[f"ctranslate2_{name}_vs_eager"] = round(eager_s / ct2_s, 2)
                        row[f"ctranslate2_{name}_agree"] = round(
                            sum(a == b for a, b in zip(ids, eager[:, 1:].tolist())) / len(ids), 3
                        )
                        for graph_name in (name, f"plain_{name}"):
                            if f"graph_{graph_name}_s" in row:
                                row[f"graph_{graph_name}_vs_ctranslate2"] = round(
                                    ct2_s / row[f"graph_{graph_name}_s"], 2
                                )
                    if args.profile:
                        feeds = {
                            "input_ids": inputs["input_ids"].numpy().astype("int32"),
                            "attention_mask": inputs["attention_mask"].numpy().astype("int32"),
                        }
                        scalars = dict(max_length=start + args.new_tokens, min_length=start + args.new_tokens)
                        scalars.update(num_beams=beams, num_return_sequences=1)
                        feeds.update({k: torch.tensor([v], dtype=torch.int32).numpy() for k, v in scalars.items()})
                        penalty = 1.0 if beams > 1 and not decoder_only else 0.0
                        feeds["length_penalty"] = torch.tensor([penalty]).numpy()
                        feeds["repetition_penalty"] = torch.tensor([1.0]).numpy()
                        for name, folder in folders.items():
                            row[f"profile_{name}"] = profile(folder, threads, feeds)
                    row["load"] = load()
                    results["rows"].append(row)
                    print(json.dumps(row), flush=True)
                if decoder_only and args.sample:
                    results["rows"].append(sampling_row(args, model, steps, graphs, inputs, threads, batch))
                    print(json.dumps(results["rows"][-1]), flush=True)
    results["load_after"] = load()
    print(results["load_before"], "|", results["load_after"])
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
