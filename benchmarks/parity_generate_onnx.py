"""Parity of the generating graphs (``model_generate.onnx``: the whole search inside ONNX Runtime) with PyTorch
``generate()`` on trained models, float32 and int8, from run folders given by flag:

* translation runs (``--seq2seq`` attention RNN, ``--transformer``): the first ``--verses`` test verses (sources
  truncated to 64 tokens, 80 new tokens at most, batches of 50), greedy and beam 5 with the run's generation config.
  ``graph``: the graph's own session run (:meth:`GeneratingGraph.run`, what a process without Python ML libraries
  gets); ``front_door``: ``load_onnxruntime(...).generate()``, which searches again with the step graphs the source
  rows whose beam-5 sequence was cut at max_length (the operator's length penalty counts one position more there).
  Reported: the share of verses token-identical to ``generate()``, sacreBLEU of each, the rows cut at max_length, and
  int8's BLEU minus float32's (goal: within 0.5); and beam 5 with ``early_stopping=True`` in both engines (the
  front door's beam search: a folder copy exported so);
* the char LM (``--lm``): greedy continuations (``--continuations`` prompts of 64 test characters, 100 new characters)
  of the graph identical to ``generate()``'s; the test perplexity (windows of 64 characters, state reset per window,
  the first ``--ppl_chars`` test characters) of PyTorch and of the exported step graphs, float32 and int8 (goal: int8
  within 2 % relative of float32); the sampling graph (``model_sample.onnx``) drawing the same continuations twice
  from one seed.

    OMP_NUM_THREADS=1 python benchmarks/parity_generate_onnx.py --seq2seq RUN --transformer RUN --lm RUN \\
        --output benchmarks/results/parity_generate_onnx.json

The 1-minute load average is recorded before and after each part.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_onnxruntime import (  # noqa: E402
    BATCH,
    MAX_NEW_TOKENS,
    MAX_SOURCE_LENGTH,
    REPO_ROOT,
    bleu_of,
    exports,
    lm_reference,
    load,
    share,
    test_split,
    translate_ids,
    windows_perplexity,
)
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from hf_seq.toolkit.export import load_onnxruntime  # noqa: E402
from hf_seq.toolkit.onnx_generate import GeneratingGraph, with_defaults  # noqa: E402


def strip(rows, eos: int, pad: int) -> list[list[int]]:
    """Target ids after the start token, up to the end token, without padding (as ``translate_ids`` writes them)."""
    out = []
    for row in rows:
        row = [t for t in row[1:] if t != pad]
        out.append(row[: row.index(eos)] if eos in row else row)
    return out


def graph_translate(folder: Path, tokenizer, sources, num_beams: int, model) -> tuple[list, int]:
    """The generating graph's target ids for ``sources`` (batches as ``translate_ids``) and how many were cut at
    max_length."""
    graph = GeneratingGraph(folder, threads=1)
    config = with_defaults(model.generation_config)
    out, cut_rows = [], 0
    for i in range(0, len(sources), BATCH):
        enc = tokenizer(
            sources[i : i + BATCH], padding=True, truncation=True, max_length=MAX_SOURCE_LENGTH, return_tensors="np"
        )
        sequences, _, cut = graph.run(
            enc["input_ids"],
            enc["attention_mask"],
            max_length=1 + MAX_NEW_TOKENS,
            min_length=config.min_length or 0,
            num_beams=num_beams,
            length_penalty=config.length_penalty,
            repetition_penalty=config.repetition_penalty,
        )
        cut_rows += int(cut[:, 0].sum())
        out += strip(sequences[:, 0].tolist(), model.config.eos_token_id, model.config.pad_token_id)
    return out, cut_rows


def translation_parity(run_dir: Path, folders: dict, verses: int) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    sources, references = test_split(run_dir, verses)
    out = {"run": str(run_dir), "verses": len(sources), "load_before": load()}
    for beams, name in ((1, "greedy"), (5, "beam5")):
        started = time.time()
        expected = translate_ids(model, tokenizer, sources, beams)
        row = {"generate_bleu": bleu_of(tokenizer, expected, references), "generate_s": round(time.time() - started)}
        for kind, folder in folders.items():
            got, cut = graph_translate(folder, tokenizer, sources, beams, model)
            row[f"graph_{kind}_identical"] = share(got, expected)
            row[f"graph_{kind}_bleu"] = bleu_of(tokenizer, got, references)
            row[f"graph_{kind}_cut_at_max_length"] = cut
            if beams > 1:  # the front door searches the cut rows again with the step graphs
                exported = load_onnxruntime(folder, threads=1)
                front = translate_ids(exported, tokenizer, sources, beams)
                row[f"front_door_{kind}_identical"] = share(front, expected)
                row[f"front_door_{kind}_bleu"] = bleu_of(tokenizer, front, references)
                row[f"front_door_{kind}_calls"] = exported.generating_graph.report()
        row["int8_minus_float32_bleu"] = round(row["graph_int8_bleu"] - row["graph_float32_bleu"], 2)
        out[name] = row
        print(run_dir.name, name, row, flush=True)
    out["beam5_early_stopping"] = early_stopping_parity(model, tokenizer, folders["float32"], sources, references)
    print(run_dir.name, "beam5_early_stopping", out["beam5_early_stopping"], flush=True)
    out["load_after"] = load()
    return out


def early_stopping_parity(model, tokenizer, folder: Path, sources, references) -> dict:
    """Beam 5 with ``early_stopping=True`` in both engines: a copy of the float32 folder whose generation_config says
    so, its graph written again, against ``generate(early_stopping=True)`` (the front door's beam search)."""
    import shutil

    from hf_seq.toolkit.onnx_generate import write_generating_graph

    copy = folder.with_name(folder.name + "_early_stopping")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**config, "early_stopping": True}))
    write_generating_graph(copy)
    saved, model.generation_config.early_stopping = model.generation_config.early_stopping, True
    try:
        expected = translate_ids(model, tokenizer, sources, 5)
        got, cut = graph_translate(copy, tokenizer, sources, 5, model)
        exported = load_onnxruntime(copy, threads=1)
        front = translate_ids(exported, tokenizer, sources, 5)
    finally:
        model.generation_config.early_stopping = saved
    return {
        "generate_bleu": bleu_of(tokenizer, expected, references),
        "graph_float32_identical": share(got, expected),
        "graph_float32_cut_at_max_length": cut,
        "front_door_float32_identical": share(front, expected),
        "front_door_float32_calls": exported.generating_graph.report(),
    }


def lm_parity(run_dir: Path, folders: dict, prompts: int, ppl_chars: int) -> dict:
    tokenizer, model, batch, expected, stream = lm_reference(run_dir, prompts)
    out = {"run": str(run_dir), "prompts": prompts, "new_tokens": 100, "load_before": load()}
    ppl_stream = stream[:ppl_chars]
    out["perplexity_pytorch"] = round(windows_perplexity(model, ppl_stream), 4)
    for kind, folder in folders.items():
        graph = GeneratingGraph(folder, threads=1)
        sequences, _, _ = graph.run(batch.numpy(), max_length=64 + 100)
        out[f"graph_{kind}_identical_continuations"] = share(sequences[:, 0].tolist(), expected.tolist())
        exported = load_onnxruntime(folder, threads=1)
        out[f"perplexity_step_graphs_{kind}"] = round(windows_perplexity(exported, ppl_stream), 4)
        first, _ = graph.sample(batch.numpy(), max_length=64 + 100, seed=1234)
        again, _ = graph.sample(batch.numpy(), max_length=64 + 100, seed=1234)
        out[f"sample_{kind}_same_seed_identical"] = bool(np.array_equal(first, again))
        out[f"sample_{kind}_first"] = tokenizer.decode(first[0, 64:].tolist())
    out["perplexity_int8_relative_to_float32"] = round(
        out["perplexity_step_graphs_int8"] / out["perplexity_step_graphs_float32"] - 1.0, 5
    )
    out["perplexity_chars"] = len(ppl_stream)
    out["load_after"] = load()
    print("lm", out, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq2seq", type=Path, help="An attention-RNN translation run folder.")
    parser.add_argument("--transformer", type=Path, help="A Transformer translation run folder.")
    parser.add_argument("--lm", type=Path, help="A char LM run folder.")
    parser.add_argument("--verses", type=int, default=500)
    parser.add_argument("--continuations", type=int, default=50)
    parser.add_argument("--ppl_chars", type=int, default=100_000)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hf_seq_parity_generate_onnx")
    parser.add_argument("--reuse", action="store_true", help="Keep exports an earlier run of this script wrote.")
    parser.add_argument(
        "--output", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "parity_generate_onnx.json"
    )
    args = parser.parse_args()
    if not (args.seq2seq or args.transformer or args.lm):
        parser.error("give at least one of --seq2seq, --transformer, --lm (a trained run folder)")
    for flag in ("seq2seq", "transformer", "lm"):
        folder = getattr(args, flag)
        if folder is not None and not (folder / "config.json").is_file():
            parser.error(f"--{flag} {folder}: not a trained run folder (no config.json)")
    torch.set_num_threads(1)
    results = {
        "machine": platform.processor() or platform.machine(),
        "threads": 1,
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    for flag in ("seq2seq", "transformer"):
        run_dir = getattr(args, flag)
        if run_dir is not None:
            folders = exports(run_dir, args.workdir, reuse=args.reuse)
            results[flag] = translation_parity(run_dir, folders, args.verses)
    if args.lm is not None:
        folders = exports(args.lm, args.workdir, reuse=args.reuse)
        results["lm"] = lm_parity(args.lm, folders, args.continuations, args.ppl_chars)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
