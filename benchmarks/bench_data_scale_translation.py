"""Data-scale benchmark of train_translation.py: memory, preprocessing throughput, time to the first step and steps
per second on generated parallel corpora of 1 M and 10 M pairs (about 200 MB and 2 GB of jsonl).

    OMP_NUM_THREADS=1 python benchmarks/bench_data_scale_translation.py --pairs 1000000 [--pairs 10000000]

For each size: ``train_translation.py configs/translation_transformer.json --train_file <pairs.jsonl>
--validation_file <valid.jsonl> --max_steps 3`` three times — a first run on an empty preprocessing cache (and an
empty ``datasets`` cache: the jsonl is converted to Arrow too), a second run on the same files (reads the cache),
and ``--streaming true`` (no preprocessing pass; ``--train_sampling_strategy random``: length buckets need the
lengths in advance). Every 0.1 s the script reads ``VmRSS``, ``RssAnon`` and ``RssFile`` of ``/proc/<pid>/status`` of
the run and of its child processes (``--preprocessing_num_workers``); the table gives the peaks of the main process and
of the process tree, and ``<log>.memory.tsv`` beside each run's log the tree's figures every 2 s (the phase a peak
belongs to: the log's lines carry the same seconds). Time to the first step: from the start of the process to its first logged loss (``--logging_steps 1``);
preprocessing: from the start to the line that says the tokenized cache is written, and the MB/s of the training file
over it; a second run's time splits into the script's imports (``python -c "import
hf_seq.train_scripts.train_translation"``, timed once per size), the data (to the line that says the features are
read) and the Trainer's set-up (to the first step's begin); steps/s: Trainer's ``train_steps_per_second`` over the 3 steps (tiny: dominated by the first step's warm-up).

The corpora are deterministic (``--seed``): pseudo-words of a Zipf vocabulary, 4-24 words a side. Results are written
to ``benchmarks/results/data_scale_translation.json`` and ``.md`` with the command and the load average.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
RECIPE = ROOT / "configs" / "translation_transformer.json"
SCRIPT = ROOT / "train_scripts" / "train_translation.py"
MODES = {
    "first run": [],
    "second run": [],
    "streaming": ["--streaming", "true", "--train_sampling_strategy", "random"],
}
PHASES = {  # log lines that mark where the first run's time goes (seconds from the start)
    "tokenizer_cached": "cached tokenizer in",
    "tokenizing_starts": "train_translation: tokenizing train",
    "features_cached": "cached tokenizing output",
    "features_read": "tokenized splits read from",  # a run that finds its features
    "first_step_begins": "[hf_seq] first training step begins",  # the Trainer is set up, the data loader starts
}
IMPORTS = "import hf_seq.train_scripts.train_translation"  # every module the script imports before main()


def import_seconds(env: dict) -> float:
    """Seconds of ``python -c "<IMPORTS>"`` (a fresh interpreter, the script's imports and nothing else): the part
    of the time to the first step that no data path changes."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORTS], env=env, check=True)
    return round(time.perf_counter() - start, 2)


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))))
    return sorted(words)


def generate_pairs(path: Path, n: int, seed: int = 0) -> Path:
    """``n`` jsonl rows ``{"translation": {"en": ..., "es": ...}}``, the same file for the same ``(n, seed)``."""
    if path.is_file() and path.with_suffix(".done").is_file():
        return path
    rng = random.Random(seed)
    en, es = _vocabulary(rng, 20_000), _vocabulary(rng, 20_000)
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(en))))  # Zipf
    chunk = 10_000
    with open(path, "w") as f:
        for start in range(0, n, chunk):
            rows = []
            for _ in range(min(chunk, n - start)):
                k = rng.randint(4, 24)
                src = rng.choices(en, cum_weights=cumulative, k=k)
                tgt = rng.choices(es, cum_weights=cumulative, k=max(1, k + rng.randint(-2, 3)))
                rows.append(json.dumps({"translation": {"en": " ".join(src) + " .", "es": " ".join(tgt) + " ."}}))
            f.write("\n".join(rows) + "\n")
    path.with_suffix(".done").write_text("")
    return path


def _status(pid: int) -> tuple[int, int, int]:
    """(VmRSS, RssAnon, RssFile) of a process in bytes; zeros once it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0, 0
    values = dict(re.findall(r"^(VmRSS|RssAnon|RssFile):\s+(\d+) kB", text, re.M))
    return tuple(int(values.get(key, 0)) * 1024 for key in ("VmRSS", "RssAnon", "RssFile"))


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            out.extend(int(c) for c in text)
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack.extend(_children(p))
    return pids


TIMELINE_EVERY = 2.0  # seconds between two rows of a run's memory timeline


def run_once(argv: list[str], env: dict, log_path: Path) -> dict:
    """One run of the script: peaks of RSS / anonymous RSS (main process and tree), the time of the first loss line
    and of the cache line, and Trainer's steps per second. Beside the log (its lines prefixed with the seconds since
    the start), ``<log>.memory.tsv``: the process tree's RSS, RssAnon and RssFile every :data:`TIMELINE_EVERY`
    seconds on the same clock, the phase a peak belongs to."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    peaks = {"rss": 0, "anon": 0, "tree_rss": 0, "tree_anon": 0, "tree_file": 0}
    stop = threading.Event()
    timeline_path = log_path.with_suffix(".memory.tsv")

    def sample():
        written = -TIMELINE_EVERY
        with open(timeline_path, "w") as timeline:
            timeline.write("seconds\ttree_rss_mb\ttree_anon_mb\ttree_file_mb\n")
            while not stop.is_set():
                rss, anon, _ = _status(proc.pid)
                tree = [_status(p) for p in _tree(proc.pid)]
                totals = [sum(t[i] for t in tree) for i in range(3)]
                peaks["rss"], peaks["anon"] = max(peaks["rss"], rss), max(peaks["anon"], anon)
                for key, value in zip(("tree_rss", "tree_anon", "tree_file"), totals):
                    peaks[key] = max(peaks[key], value)
                now = time.perf_counter() - start
                if now - written >= TIMELINE_EVERY and totals[0]:
                    timeline.write(f"{now:.1f}\t" + "\t".join(f"{v / 2**20:.0f}" for v in totals) + "\n")
                    timeline.flush()
                    written = now
                time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    first_step = cached_at = None
    steps_per_second = None
    phases: dict[str, float] = {}  # first time each phase's log line appears
    with open(log_path, "w") as log:
        for line in proc.stdout:
            now = time.perf_counter() - start
            log.write(f"{now:9.2f} {line}")
            if first_step is None and "'loss'" in line:
                first_step = now
            if cached_at is None and "cached tokenizing output" in line:
                cached_at = now
            for phase, marker in PHASES.items():
                if phase not in phases and marker in line:
                    phases[phase] = round(now, 2)
            match = re.search(r"'train_steps_per_second': '([0-9.]+)'", line)
            if match:
                steps_per_second = float(match.group(1))
    rc = proc.wait()
    stop.set()
    sampler.join()
    return {
        "returncode": rc,
        "wall_seconds": round(time.perf_counter() - start, 2),
        "seconds_to_first_step": None if first_step is None else round(first_step, 2),
        "seconds_to_cache_written": None if cached_at is None else round(cached_at, 2),
        "train_steps_per_second": steps_per_second,
        "phase_seconds": phases,
        "peak_rss_gb": round(peaks["rss"] / 2**30, 3),
        "peak_rss_anon_gb": round(peaks["anon"] / 2**30, 3),
        "peak_tree_rss_gb": round(peaks["tree_rss"] / 2**30, 3),
        "peak_tree_rss_anon_gb": round(peaks["tree_anon"] / 2**30, 3),
        "peak_tree_rss_file_gb": round(peaks["tree_file"] / 2**30, 3),
        "log": str(log_path),
        "memory_timeline": str(timeline_path),
    }


def bench_size(
    n: int, work: Path, seed: int, workers: int | None, tokenizer_lines: int | None, modes, on_run, cache_dir=None
) -> dict:
    """The runs of ``modes`` on ``n`` generated pairs (one preprocessing cache for them: a new folder under ``work``,
    or ``cache_dir``, the folder of an earlier invocation's first run); ``on_run(size)`` after each run (the results
    so far are written)."""
    data = work / f"pairs_{n}"
    data.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    train = generate_pairs(data / "train.jsonl", n, seed)
    valid = generate_pairs(data / "valid.jsonl", 2_000, seed + 1)
    generated = time.perf_counter() - t0
    megabytes = train.stat().st_size / 1e6
    cache = Path(cache_dir) if cache_dir else Path(tempfile.mkdtemp(prefix="cache_", dir=work))
    load = os.getloadavg()
    env = os.environ | {
        "OMP_NUM_THREADS": "1",
        "HF_SEQ_CACHE": str(cache / "hf_seq"),
        "HF_DATASETS_CACHE": str(cache / "datasets"),
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    base = [sys.executable, str(SCRIPT), str(RECIPE), "--train_file", str(train), "--validation_file", str(valid)]
    base += ["--max_steps", "3", "--logging_steps", "1", "--plot_attention", "false", "--do_predict", "false"]
    base += ["--save_strategy", "no", "--report_to", "none"]
    if workers:
        base += ["--preprocessing_num_workers", str(workers)]
    if tokenizer_lines:  # the BPE is trained on the first N training pairs (the streaming run's too)
        base += ["--tokenizer_max_train_lines", str(tokenizer_lines)]
    runs = {}
    size = {"pairs": n, "train_file_mb": round(megabytes, 1), "generation_seconds": round(generated, 1), "runs": runs}
    size["import_seconds"], size["import_load_average"] = import_seconds(env), os.getloadavg()
    for name in modes:
        out = work / f"run_{n}_{name.replace(' ', '_')}"
        argv = base + MODES[name] + ["--output_dir", str(out)]
        runs[name] = run_once(argv, env, work / f"log_{n}_{name.split()[0]}.txt")
        runs[name]["load_average_before"] = load
        load = runs[name]["load_average_after"] = os.getloadavg()
        if name == "first run" and runs[name]["seconds_to_cache_written"]:
            runs[name]["preprocessing_mb_per_second"] = round(megabytes / runs[name]["seconds_to_cache_written"], 2)
        print(n, name, runs[name], flush=True)
        on_run(size)
    return size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", action="extend", help="corpus sizes (default 1000000)")
    parser.add_argument("--work_dir", default=None, help="folder of the corpora, caches and runs (default: a tmp dir)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preprocessing_num_workers", type=int, default=None)
    parser.add_argument(
        "--tokenizer_max_train_lines",
        type=int,
        default=200_000,
        help="train the BPE on the first N training pairs at every size (0: on all of them)",
    )
    parser.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=list(MODES), help="which of the three runs to make"
    )
    parser.add_argument(
        "--cache_dir",
        default=None,
        help="reuse this preprocessing cache folder (an earlier run's `cache_*` under --work_dir, one size only): "
        "a second run without making the first again",
    )
    parser.add_argument("--output", default=str(RESULTS / "data_scale_translation"))
    args = parser.parse_args(argv)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_data_scale_translation_"))
    work.mkdir(parents=True, exist_ok=True)
    sizes = args.pairs or [1_000_000]
    command = "OMP_NUM_THREADS=1 python benchmarks/bench_data_scale_translation.py --pairs " + " ".join(map(str, sizes))
    if args.modes != list(MODES):
        command += " --modes " + " ".join(f"'{m}'" for m in args.modes)
    if args.tokenizer_max_train_lines != 200_000:
        command += f" --tokenizer_max_train_lines {args.tokenizer_max_train_lines}"
    if args.cache_dir:
        if len(sizes) != 1:
            parser.error("--cache_dir holds one size's cache: give one --pairs value")
        command += " --cache_dir <an earlier run's cache folder>"
    results = {
        "command": command,
        "load_average_before": os.getloadavg(),
        "cpus": os.cpu_count(),
        "tokenizer_max_train_lines": args.tokenizer_max_train_lines or None,
        "sizes": [],
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)

    def write(size: dict | None = None) -> None:
        if size is not None and size not in results["sizes"]:
            results["sizes"].append(size)
        results["load_average_after"] = os.getloadavg()
        out.with_suffix(".json").write_text(json.dumps(results, indent=1))
        out.with_suffix(".md").write_text(table(results))

    for n in sizes:
        bench_size(
            n,
            work,
            args.seed,
            args.preprocessing_num_workers,
            args.tokenizer_max_train_lines,
            args.modes,
            write,
            args.cache_dir,
        )
    write()
    print(table(results))


def table(results: dict) -> str:
    """The results as a markdown table (load averages per run: 1, 5, 15 minutes before it)."""
    lines = [
        f"`{results['command']}` (load average before {results['load_average_before'][0]:.2f}, after "
        f"{results['load_average_after'][0]:.2f}, {results['cpus']} CPUs; BPE trained on the first "
        f"{results['tokenizer_max_train_lines'] or 'all'} training pairs)",
        "",
        "| pairs (MB) | run | peak RSS GB (anon) | tree peak RSS GB (anon) | preprocessing MB/s | s to first step | "
        "s data ready | steps/s | load before |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in results["sizes"]:
        for name, run in size["runs"].items():
            phases = run.get("phase_seconds", {})
            ready = phases.get("features_read", phases.get("features_cached", ""))
            lines.append(
                f"| {size['pairs']:,} ({size['train_file_mb']:.0f}) | {name} | {run['peak_rss_gb']:.2f} "
                f"({run['peak_rss_anon_gb']:.2f}) | {run['peak_tree_rss_gb']:.2f} ({run['peak_tree_rss_anon_gb']:.2f}) "
                f"| {run.get('preprocessing_mb_per_second', '')} | {run['seconds_to_first_step']} | {ready} | "
                f"{run['train_steps_per_second']} | {run['load_average_before'][0]:.1f} |"
            )
    imports = [
        f"{size['pairs']:,}: {size['import_seconds']} s (load {size['import_load_average'][0]:.1f})"
        for size in results["sizes"]
        if "import_seconds" in size
    ]
    if imports:
        lines += ["", f'`python -c "{IMPORTS}"` before the runs of ' + "; ".join(imports)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
