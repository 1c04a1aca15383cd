"""hf_seq models on ONNX Runtime (``hf-seq-export onnx``, ``load_onnxruntime``): parity with ``generate()`` on real
data and decoding speed against eager ``generate()`` (and CTranslate2 for the Transformer).

Parity (``--parity``):

* translation runs (``--seq2seq`` attention RNN, ``--transformer``): the first ``--verses`` test verses of the run's
  split (sources truncated to 64 tokens, 80 new tokens at most, batches of 50), greedy and beam 5 with the model's
  generation config: the share of verses whose ONNX Runtime translation (float32, int8) equals ``generate()``'s
  token for token, and sacreBLEU of each;
* the char LM (``--lm``): greedy continuations (``--continuations`` prompts of 64 test characters, 100 new
  characters) identical to ``generate()``'s, and the test perplexity (windows of 64 characters, state reset per
  window, the first ``--ppl_chars`` test characters) of PyTorch, ONNX Runtime float32 and int8.

Speed (``--speed``; one process, one thread for torch and ONNX Runtime, every setting runs the engines one after the
other ``--repeats`` times, median wall seconds of each): greedy and beam 5 at batch 1 and 32 — eager ``generate()``,
ONNX Runtime float32 and int8, and for the Transformer CTranslate2 float32 and int8; for the LM (greedy) also the
model alone (``forward_only``: the prompt, then 200 single-token forwards with the cache,
greedy, without ``generate()``'s own per-step work); with ``--profile`` a cProfile of ONNX Runtime float32 at batch 32
(the share of the time inside the session runs, and the functions with the most own time). The 1-minute load average is recorded before and after each setting; on a shared machine read the ratios.

    OMP_NUM_THREADS=1 python benchmarks/bench_onnxruntime.py --lm runs/lm --seq2seq runs/rnn --transformer runs/tf \
        --parity --speed
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

import hf_seq  # noqa: E402, F401
from hf_seq.toolkit.data import load_shakespeare, load_translation  # noqa: E402
from hf_seq.toolkit.export import load_onnxruntime, to_onnx  # noqa: E402
from hf_seq.toolkit.metrics import load_metric  # noqa: E402

SETTINGS = ((1, 1), (32, 1), (1, 5), (32, 5))  # (batch size, beams) of the speed part
MAX_SOURCE_LENGTH = 64
MAX_NEW_TOKENS = 80  # the translation script's test decoding: max_target_length 64 + 16
BATCH = 50


def load() -> float:
    return round(os.getloadavg()[0], 2)


def test_split(run_dir: Path, count: int) -> tuple[list[str], list[str]]:
    results_file = run_dir / "results.json"
    max_words = json.loads(results_file.read_text())["data"]["max_words"] if results_file.is_file() else 25
    test = load_translation(max_words=max_words)["test"]
    rows = [test[i]["translation"] for i in range(min(count, len(test)))]
    return [r["en"] for r in rows], [r["es"] for r in rows]


def translate_ids(model, tokenizer, sources, num_beams, batch_size=BATCH, max_new=MAX_NEW_TOKENS) -> list[list[int]]:
    """generate()'s target ids (start token, end token and padding removed), in order."""
    out = []
    eos = model.config.eos_token_id
    for i in range(0, len(sources), batch_size):
        enc = tokenizer(
            sources[i : i + batch_size],
            padding=True,
            truncation=True,
            max_length=MAX_SOURCE_LENGTH,
            return_tensors="pt",
        )
        with torch.no_grad():
            seqs = model.generate(**enc, num_beams=num_beams, max_new_tokens=max_new, do_sample=False)
        for row in seqs[:, 1:].tolist():
            row = [t for t in row if t != model.config.pad_token_id]
            out.append(row[: row.index(eos)] if eos in row else row)
    return out


def bleu_of(tokenizer, ids, references) -> float:
    bleu = load_metric("sacrebleu")
    hyps = [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    return round(bleu.compute(predictions=hyps, references=[[r] for r in references])["score"], 2)


def share(a, b) -> float:
    return round(sum(x == y for x, y in zip(a, b)) / len(a), 4)


def exports(run_dir: Path, workdir: Path, reuse: bool = False) -> dict:
    """float32 and int8 ONNX Runtime folders of ``run_dir``, exported into ``workdir`` (kept from an earlier run of
    this script only with ``reuse``: an export written by another version of hf_seq may hold other graphs)."""
    folders = {}
    for quantization in (None, "int8"):
        folder = workdir / f"{run_dir.name}_{quantization or 'float32'}"
        if not (reuse and (folder / "hf_seq_onnx.json").is_file()):
            to_onnx(run_dir, folder, quantization=quantization, force=True)
        folders[quantization or "float32"] = folder
    return folders


def translation_parity(run_dir: Path, folders: dict, verses: int) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    sources, references = test_split(run_dir, verses)
    out = {"verses": len(sources), "load_before": load()}
    for beams, name in ((1, "greedy"), (5, "beam5")):
        expected = translate_ids(model, tokenizer, sources, beams)
        out[name] = {"generate_bleu": bleu_of(tokenizer, expected, references)}
        for kind, folder in folders.items():
            got = translate_ids(load_onnxruntime(folder, threads=1), tokenizer, sources, beams)
            out[name][f"onnxruntime_{kind}_identical"] = share(got, expected)
            out[name][f"onnxruntime_{kind}_bleu"] = bleu_of(tokenizer, got, references)
        print(name, out[name], flush=True)
    out["load_after"] = load()
    return out


def char_test_stream(tokenizer) -> torch.Tensor:
    """The Shakespeare test split as one (N,) stream of character ids, the texts in order (each character looked up in
    the char tokenizer's vocabulary: the ids ``tokenizer(text)`` gives without a normaliser, much faster)."""
    texts = load_shakespeare(seed=42)["test"]["text"]
    if tokenizer.backend_tokenizer.normalizer is not None:
        return torch.tensor([i for text in texts for i in tokenizer(text, add_special_tokens=False)["input_ids"]])
    vocab, unk = tokenizer.get_vocab(), tokenizer.unk_token_id
    return torch.tensor([vocab.get(ch, unk) for text in texts for ch in text], dtype=torch.long)


def windows_perplexity(model, stream: torch.Tensor, length: int = 64, batch: int = 64) -> float:
    """Perplexity over non-overlapping windows of ``length + 1`` tokens, the state reset per window."""
    count = (len(stream) - 1) // (length + 1)
    windows = stream[: count * (length + 1)].view(count, length + 1)
    total, n = 0.0, 0
    for i in range(0, count, batch):
        rows = windows[i : i + batch]
        with torch.no_grad():
            logits = model(rows[:, :-1], use_cache=False).logits
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="sum"))
        n += rows[:, 1:].numel()
    return float(torch.tensor(total / n).exp())


def lm_reference(run_dir: Path, prompts: int) -> tuple:
    """A char LM run folder's tokenizer and model, ``prompts`` test prompts of 64 characters spread over the test
    stream, PyTorch's greedy continuations of 100 characters, and the test stream."""
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    stream = char_test_stream(tokenizer)
    starts = torch.linspace(0, len(stream) - 200, prompts).long().tolist()
    batch = torch.stack([stream[s : s + 64] for s in starts])
    with torch.no_grad():
        expected = model.generate(input_ids=batch, max_new_tokens=100, do_sample=False)
    return tokenizer, model, batch, expected, stream


def lm_parity(run_dir: Path, folders: dict, prompts: int, ppl_chars: int) -> dict:
    _, model, batch, expected, stream = lm_reference(run_dir, prompts)
    out = {"prompts": prompts, "new_tokens": 100, "load_before": load()}
    ppl_stream = stream[:ppl_chars]
    out["perplexity_pytorch"] = round(windows_perplexity(model, ppl_stream), 4)
    for kind, folder in folders.items():
        exported = load_onnxruntime(folder, threads=1)
        got = exported.generate(input_ids=batch, max_new_tokens=100, do_sample=False)
        out[f"onnxruntime_{kind}_identical_continuations"] = share(got.tolist(), expected.tolist())
        ppl = windows_perplexity(exported, ppl_stream)
        out[f"perplexity_onnxruntime_{kind}"] = round(ppl, 4)
        out[f"perplexity_onnxruntime_{kind}_relative"] = round(ppl / out["perplexity_pytorch"] - 1.0, 5)
    out["perplexity_chars"] = len(ppl_stream)
    out["load_after"] = load()
    print("lm", out, flush=True)
    return out


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(engines: dict, repeats: int) -> dict:
    times = {name: [] for name in engines}
    for _ in range(repeats):
        for name, fn in engines.items():
            times[name].append(timed(fn))
    medians = {name: round(statistics.median(t), 4) for name, t in times.items()}
    eager = medians["eager"]
    return {"seconds": medians, "speedup_vs_eager": {n: round(eager / s, 3) for n, s in medians.items()}}


def profile(fn, top: int = 12) -> dict:
    """cProfile of one call of ``fn``: the wall seconds, the share inside ONNX Runtime's session runs, and the
    functions with the most own time (what bounds the decode besides the graphs)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    fn()
    profiler.disable()
    stats = pstats.Stats(
        profiler
    ).stats  # (file, line, name) -> (calls, primitive calls, own time, cumulative, callers)
    total = sum(entry[2] for entry in stats.values())
    session = sum(
        entry[2] for key, entry in stats.items() if "onnxruntime_pybind11_state" in key[2] and "run" in key[2]
    )
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    return {
        "profiled_seconds": round(total, 4),
        "onnxruntime_session_share": round(session / total, 3),
        "top_own_time": [[f"{Path(k[0]).name}:{k[2]}", entry[0], round(entry[2], 4)] for k, entry in rows],
    }


def translation_speed(run_dir: Path, folders: dict, repeats: int, ct2: bool, profiled: bool = False) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    sources, _ = test_split(run_dir, 32)
    ort = {kind: load_onnxruntime(folder, threads=1) for kind, folder in folders.items()}
    translators = {}
    if ct2:
        import ctranslate2

        from hf_seq.toolkit.export import ctranslate2_translate, to_ctranslate2

        for quantization in ("float32", "int8"):
            path = Path(tempfile.mkdtemp()) / "ct2"
            to_ctranslate2(run_dir, path, quantization=quantization)
            translators[quantization] = ctranslate2.Translator(str(path), intra_threads=1)
    rows = []
    for batch, beams in SETTINGS:
        texts = sources[:batch] if batch > 1 else sources[:4]  # batch 1: four verses one at a time
        size = batch

        def run(m, beams=beams, texts=texts, size=size):
            return lambda: translate_ids(m, tokenizer, texts, beams, batch_size=size)

        engines = {"eager": run(model)}
        engines.update({f"onnxruntime_{k}": run(m) for k, m in ort.items()})
        for quantization, translator in translators.items():
            engines[f"ctranslate2_{quantization}"] = lambda t=translator, texts=texts, size=size, beams=beams: (
                ctranslate2_translate(
                    t,
                    tokenizer,
                    texts,
                    num_beams=beams,
                    max_new_tokens=MAX_NEW_TOKENS,
                    batch_size=size,
                    max_source_length=MAX_SOURCE_LENGTH,
                    generation_config=model.generation_config,
                )
            )
        before = load()
        row = {"model": str(run_dir), "batch": batch, "num_beams": beams, "sentences": len(texts)}
        row.update(measure(engines, repeats))
        if profiled and batch > 1:
            row["profile_onnxruntime_float32"] = profile(engines["onnxruntime_float32"])
        row["load"] = [before, load()]
        print(row, flush=True)
        rows.append(row)
    return rows


def lm_speed(run_dir: Path, folders: dict, repeats: int, profiled: bool = False) -> list[dict]:
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    model = AutoModelForCausalLM.from_pretrained(run_dir).eval()
    ort = {kind: load_onnxruntime(folder, threads=1) for kind, folder in folders.items()}
    prompt = tokenizer("ROMEO:\n", add_special_tokens=False, return_tensors="pt")["input_ids"]
    rows = []
    for batch, beams in SETTINGS:
        ids = prompt.expand(batch, -1).contiguous()

        def run(m, ids=ids, beams=beams):
            def go():
                with torch.no_grad():
                    m.generate(input_ids=ids, max_new_tokens=200, min_new_tokens=200, num_beams=beams, do_sample=False)

            return go

        def steps(m, ids=ids):
            def go():  # the model alone: the prompt, then 200 single-token forwards carrying the cache
                with torch.no_grad():
                    out = m(input_ids=ids, use_cache=True)
                    token = out.logits[:, -1:].argmax(-1)
                    for _ in range(200):
                        out = m(input_ids=token, cache=out.cache, use_cache=True)
                        token = out.logits[:, -1:].argmax(-1)

            return go

        engines = {"eager": run(model), **{f"onnxruntime_{k}": run(m) for k, m in ort.items()}}
        before = load()
        row = {"model": str(run_dir), "batch": batch, "num_beams": beams, "new_tokens": 200}
        row.update(measure(engines, repeats))
        if beams == 1:
            forward = {"eager": steps(model), **{f"onnxruntime_{k}": steps(m) for k, m in ort.items()}}
            row["forward_only"] = measure(forward, repeats)
        if profiled and batch > 1:
            row["profile_onnxruntime_float32"] = profile(engines["onnxruntime_float32"])
        row["load"] = [before, load()]
        print(row, flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", type=Path, help="A char LM run folder.")
    parser.add_argument("--seq2seq", type=Path, help="An attention-RNN translation run folder.")
    parser.add_argument("--transformer", type=Path, help="A Transformer translation run folder.")
    parser.add_argument("--parity", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--verses", type=int, default=500)
    parser.add_argument("--continuations", type=int, default=50)
    parser.add_argument("--ppl_chars", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--profile", action="store_true", help="Also cProfile ONNX Runtime float32 at batch 32 (greedy and beam 5)."
    )
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "hf_seq_bench_onnxruntime")
    parser.add_argument(
        "--reuse_exports", action="store_true", help="Keep the exports already in --workdir instead of exporting again."
    )
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "bench_onnxruntime.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {
        "command": " ".join(sys.argv),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "torch": torch.__version__,
        "threads": 1,
        "load_start": load(),
    }
    import onnxruntime

    results["onnxruntime"] = onnxruntime.__version__
    runs = {"lm": args.lm, "seq2seq": args.seq2seq, "transformer": args.transformer}
    for name, run_dir in runs.items():
        if run_dir is None:
            continue
        folders = exports(run_dir, args.workdir, args.reuse_exports)
        entry = results.setdefault(name, {"run": str(run_dir)})
        if args.parity:
            if name == "lm":
                entry["parity"] = lm_parity(run_dir, folders, args.continuations, args.ppl_chars)
            else:
                entry["parity"] = translation_parity(run_dir, folders, args.verses)
        if args.speed:
            if name == "lm":
                entry["speed"] = lm_speed(run_dir, folders, args.repeats, args.profile)
            else:
                entry["speed"] = translation_speed(
                    run_dir, folders, args.repeats, ct2=name == "transformer", profiled=args.profile
                )
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    results["load_end"] = load()
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
