"""`make demo`: the English -> Spanish translator.

Trains the small Transformer of ``configs/translation_transformer.json`` on the real verse pairs for a fixed
``DEMO_STEPS`` (5,000) steps on ``DEMO_THREADS`` (one) thread — 12 to 20 minutes in all on a quiet machine, by CPU;
the recipe itself trains 9,000 steps, and its learning rate decays to zero at ``max_steps``, so the demo runs the same
schedule compressed into 5,000 steps — prints its test BLEU / chrF and the wall time, reloads it with
``AutoModelForSeq2SeqLM.from_pretrained`` and ``pipeline("translation")``, translates held-out verses with beam
search and saves one cross-attention heat map; then (with ``pip install 'hf_seq[ctranslate2]'``) exports it to
CTranslate2 int8, translates the same verses with ``ctranslate2.Translator`` and times both engines. A fixed number of steps (not a time budget)
makes the result the same on a busy machine as on a quiet one: same seed, same batches, same updates (on one
CPU: another instruction set rounds differently, see docs/results/translation.md).

Reuses the run in ``runs/translation_transformer_demo`` when it is complete (delete the folder to retrain). Extra
arguments are passed to the train script and force a new run, e.g.
``python scripts/demo.py --output_dir runs/demo_quick --max_steps 300`` (``make demo DEMO_ARGS="..."``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "runs" / "translation_transformer_demo"
DEMO_STEPS = 5000
DEMO_THREADS = 1  # one thread: the same float operations in the same order on every run, and no slowdown when
# other jobs share the cores (two threads on two busy cores wait for each other)
RECIPE = ROOT / "configs" / "translation_transformer.json"
HEAT_MAP_NAME = "demo_cross_attention.png"
TIMING_NAME = "demo_timing.json"
NUM_EXAMPLES = 4
NUM_BEAMS = 5
CT2_SUFFIX = "_ctranslate2_int8"  # the CTranslate2 export the demo writes beside the run folder (never inside it)
SPEED_VERSES = 96


def threads_text(count: int) -> str:
    return "one thread" if count == 1 else f"{count} threads"


def run_folder(extra_args: list[str]) -> Path:
    """``--output_dir`` among the extra arguments, else ``RUN_DIR``."""
    if "--output_dir" in extra_args:
        return (ROOT / extra_args[extra_args.index("--output_dir") + 1]).resolve()
    return RUN_DIR


def train_if_needed(run_dir: Path, extra_args: list[str]) -> dict:
    """Run the recipe unless ``run_dir`` already holds a finished run (and no extra arguments were given); returns
    its results.json."""
    results_file = run_dir / "results.json"
    finished = results_file.is_file() and "test_beam5" in json.loads(results_file.read_text())
    if finished and not extra_args:
        print(f"Using the finished run in {run_dir} (delete it to retrain).")
    else:
        steps = int(extra_args[extra_args.index("--max_steps") + 1]) if "--max_steps" in extra_args else DEMO_STEPS
        print(
            f"Training {RECIPE.relative_to(ROOT)} -> {run_dir} ({steps:,} steps, {threads_text(DEMO_THREADS)}) ...",
            flush=True,
        )
        cmd = [
            sys.executable,
            str(ROOT / "train_scripts" / "train_translation.py"),
            str(RECIPE),
            "--output_dir",
            str(run_dir),
            "--max_steps",
            str(DEMO_STEPS),
            "--disable_tqdm",
            "true",
            *extra_args,
        ]
        threads = str(DEMO_THREADS)
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        start = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=env)
        # the whole train script: data, tokenizer, training and the test decodes
        (run_dir / TIMING_NAME).write_text(json.dumps({"wall_seconds": time.perf_counter() - start}))
    results = json.loads(results_file.read_text())
    timing = run_dir / TIMING_NAME
    results["demo_wall_seconds"] = json.loads(timing.read_text())["wall_seconds"] if timing.is_file() else None
    return results


def held_out_verses(results: dict, count: int) -> list[dict]:
    """The first ``count`` test verses of the run's split (never seen in training), with their references."""
    from hf_seq.toolkit.data import load_translation

    test = load_translation(max_words=results["data"]["max_words"])["test"]
    return [test[i]["translation"] for i in range(count)]


def main(argv: list[str]) -> None:
    run_dir = run_folder(argv)
    results = train_if_needed(run_dir, argv)
    train = results.get("train", {})
    wall = results.get("demo_wall_seconds")
    print(
        f"\nTrained {train.get('global_steps', '?')} steps ({train.get('train_minutes', 0):.1f} min of training, "
        f"{threads_text(results['torch_threads'])}, {results['parameters'] / 1e6:.2f}M parameters) on "
        f"{results['data']['train_pairs']:,} verse pairs"
        + (f"; {wall / 60:.1f} min in all with the test decodes." if wall else ".")
    )
    print(f"Test ({results['data']['test_pairs']} held-out verses):")
    for key, name in (("test_greedy", "greedy"), ("test_beam5", f"beam {NUM_BEAMS}")):
        print(f"  {name:>7}: BLEU {results[key]['test_bleu']:5.2f}   chrF {results[key]['test_chrf']:5.2f}")

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    import hf_seq  # noqa: F401  (registers the hf_seq model types with the Auto classes)
    from hf_seq.toolkit.visualization import plot_translation_attention

    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    translate = pipeline("translation", model=str(run_dir))  # hf_seq/seq2seq_pipelines.py, registered by import hf_seq
    print(f"\nReloaded {type(model).__name__} with AutoModelForSeq2SeqLM; pipeline('translation'), beam {NUM_BEAMS}:")
    verses = held_out_verses(results, NUM_EXAMPLES)
    outputs = translate([v["en"] for v in verses], num_beams=NUM_BEAMS)
    for verse, out in zip(verses, outputs):
        print(f"  en:        {verse['en']}\n  hf_seq:    {out['translation_text']}\n  reference: {verse['es']}\n")

    source = verses[0]["en"]
    enc = tokenizer([source], return_tensors="pt")
    with torch.no_grad():
        beams = model.generate(
            **enc, num_beams=NUM_BEAMS, num_return_sequences=3, output_scores=True, return_dict_in_generate=True
        )
    print(f"model.generate(num_beams={NUM_BEAMS}, num_return_sequences=3) on the first verse:")
    for ids, score in zip(beams.sequences, beams.sequences_scores):
        print(f"  {score.item():7.3f}  {tokenizer.decode(ids, skip_special_tokens=True)}")

    path = plot_translation_attention(model, tokenizer, source, run_dir / HEAT_MAP_NAME)
    print(f"\nCross-attention of the last decoder layer (heads averaged) for the first verse: {path}")
    ctranslate2_section(run_dir, model, tokenizer, results, verses, [out["translation_text"] for out in outputs])


def ctranslate2_section(run_dir: Path, model, tokenizer, results: dict, verses: list[dict], pipeline_texts) -> None:
    """The same verses translated by the model exported to CTranslate2 (int8), and the decoding speed of both on
    the first ``SPEED_VERSES`` test verses (batch 32, beam 5; the two engines alternate, median of 3)."""
    try:
        import ctranslate2
    except ImportError:
        print("\n(pip install 'hf_seq[ctranslate2]' to see the CTranslate2 export here.)")
        return
    import statistics

    import torch

    from hf_seq.toolkit.data import load_translation
    from hf_seq.toolkit.export import ctranslate2_translate, to_ctranslate2

    folder = run_dir.with_name(run_dir.name + CT2_SUFFIX)
    if not (folder / "model.bin").is_file():
        to_ctranslate2(run_dir, folder, quantization="int8", force=True)
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=DEMO_THREADS)
    max_new = 80
    ids = ctranslate2_translate(
        translator,
        tokenizer,
        [v["en"] for v in verses],
        num_beams=NUM_BEAMS,
        max_new_tokens=max_new,
        generation_config=model.generation_config,
    )
    print(
        f"\nExported with hf_seq.toolkit.export.to_ctranslate2 (int8) to {folder}; ctranslate2.Translator, beam {NUM_BEAMS}:"
    )
    for verse, row, theirs in zip(verses, ids, pipeline_texts):
        text = tokenizer.decode(row, skip_special_tokens=True)
        same = "  (= pipeline)" if text.strip() == theirs.strip() else ""
        print(f"  en:          {verse['en']}\n  ctranslate2: {text}{same}")

    test = load_translation(max_words=results["data"]["max_words"])["test"]
    sources = [test[i]["translation"]["en"] for i in range(SPEED_VERSES)]
    torch.set_num_threads(DEMO_THREADS)
    times: dict[str, list[float]] = {"generate": [], "ctranslate2": []}
    for _ in range(3):
        start = time.perf_counter()
        for i in range(0, len(sources), 32):
            enc = tokenizer(sources[i : i + 32], padding=True, return_tensors="pt")
            with torch.no_grad():
                model.generate(**enc, num_beams=NUM_BEAMS, max_new_tokens=max_new)
        times["generate"].append(time.perf_counter() - start)
        start = time.perf_counter()
        ctranslate2_translate(
            translator,
            tokenizer,
            sources,
            num_beams=NUM_BEAMS,
            max_new_tokens=max_new,
            generation_config=model.generation_config,
        )
        times["ctranslate2"].append(time.perf_counter() - start)
    ours, theirs = statistics.median(times["generate"]), statistics.median(times["ctranslate2"])
    load = os.getloadavg()[0]
    print(
        f"\nSpeed, {SPEED_VERSES} test verses, batch 32, beam {NUM_BEAMS}, {threads_text(DEMO_THREADS)} (median of 3, "
        f"load average {load:.1f}): generate() {ours:.1f} s, CTranslate2 int8 {theirs:.1f} s = {ours / theirs:.1f}x "
        "faster (benchmarks/bench_ctranslate2.py measures more settings)."
    )


if __name__ == "__main__":
    main(sys.argv[1:])
