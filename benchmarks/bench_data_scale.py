"""Memory and start-up time of the train scripts as the corpus grows: the preprocessing cache and ``--streaming``.

    python benchmarks/bench_data_scale.py [--sizes_mb 200 2000] [--task lm] [--work_dir /big/disk/tmp]
        [--modes first second streaming] [--keep]
    python benchmarks/bench_data_scale.py --task classifier --sizes_mb 90 --modes first second

For each task and corpus size a deterministic corpus is generated into ``--work_dir`` (or reused from there) (PTB-style word lines for the
language model: ~10k word types with Zipf frequencies, ``<unk>`` and ``N`` tokens, 5-40 words a line; for the
classifier jsonl rows of 3-15 such words and one of 4 labels, 90 MB: ~1 M rows; for the tagger rows of 3-15 words
with one of 12 tags each). Each mode runs
the task's script as a subprocess with ``OMP_NUM_THREADS=1`` and ``--max_steps 3``:

* ``first``: a fresh cache folder (``--cache_dir``): tokenize into the cache, then train;
* ``second``: the same command again: the cache is reused;
* ``streaming``: ``--streaming true`` (no preprocessing pass), when the task has streaming flags: the LM and BERT
  pretraining get a validation file of 1% of the size (another seed) and a tokenizer built on the first 200,000
  lines (BERT: sentences).

While a child runs, ``/proc/<pid>/status`` of it and of its descendants (preprocessing workers) is sampled every
0.1 s: peak ``VmRSS`` (memory-mapped file pages count there), peak ``RssAnon`` (the process's own memory) and
``RssFile``, summed over the process tree. The child runs under ``/usr/bin/time -v`` when there is one: its
"Maximum resident set size" (the largest process's peak RSS) is ``max_resident_gb_time_v``. Start-up = seconds from
the spawn to the script's line ``[hf_seq] first training step begins at <t>``, or, for a script that prints no such
line (the classifier, the tagger), to the first logged loss (``--logging_steps 1``: the first step's end; the
child's output is read line by line as it comes, ``seconds_to_first_loss`` for every task) (also without the seconds a fresh interpreter takes to import the
script's module, measured right before: ``seconds_to_first_step_after_imports``); preprocessing MB/s = corpus MB / the seconds of the
``[hf_seq.toolkit.preprocessing] cached ... (<s> s)`` line; steps/s from the first step's end to the end of training.
Writes ``benchmarks/results/bench_data_scale.json`` (rows keyed ``<task>/<size>MB/<mode>``, merged with the rows
already there). A task is a row of :data:`TASKS`: its script, recipe, corpus writer and flags.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bench_data_scale.json"


# ---------------------------------------------------------------------------------------------------------------
# corpora
# ---------------------------------------------------------------------------------------------------------------


def _vocabulary(size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = {"<unk>", "N"}
    while len(words) < size:
        words.add("".join(rng.choice(letters, rng.integers(2, 10))))
    return np.array(sorted(words))


def write_ptb_corpus(path: Path, megabytes: float, seed: int = 0) -> dict:
    """PTB-style text of about ``megabytes`` MB: lines of 5-40 words drawn with Zipf frequencies from ~10k types."""
    vocabulary = _vocabulary(10_000, seed)
    rng = np.random.default_rng(seed + 1)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    target = int(megabytes * 1e6)
    written, lines = 0, 0
    with open(path, "w") as f:
        while written < target:
            lengths = rng.integers(5, 41, 20_000)
            ids = rng.choice(len(vocabulary), int(lengths.sum()), p=weights)
            words = vocabulary[ids].tolist()
            chunk, pos = [], 0
            for n in lengths.tolist():
                chunk.append(" " + " ".join(words[pos : pos + n]) + " \n")  # PTB's spacing
                pos += n
            text = "".join(chunk)
            f.write(text)
            written += len(text)
            lines += len(lengths)
    return {"path": str(path), "bytes": os.path.getsize(path), "lines": lines}


def write_pairs_corpus(path: Path, megabytes: float, seed: int = 0) -> dict:
    """Parallel jsonl of about ``megabytes`` MB (200 MB: ~1 M pairs), ``{"translation": {"en": ..., "es": ...}}``:
    4-24 Zipf-drawn pseudo-words a side (the target 2 shorter to 3 longer), and a 2,000-pair validation file
    beside it (``<name>.valid.jsonl``)."""
    source_words, target_words = _vocabulary(20_000, seed), _vocabulary(20_000, seed + 7)
    rng = np.random.default_rng(seed + 1)
    weights = 1.0 / np.arange(1, len(source_words) + 1)
    weights /= weights.sum()

    def write(out: Path, target_bytes: int | None, rows: int | None) -> tuple[int, int]:
        written, lines = 0, 0
        with open(out, "w") as f:
            while (target_bytes is not None and written < target_bytes) or (rows is not None and lines < rows):
                n = 20_000 if rows is None else min(20_000, rows - lines)
                src_len = rng.integers(4, 25, n)
                tgt_len = np.maximum(1, src_len + rng.integers(-2, 4, n))
                src = source_words[rng.choice(len(source_words), int(src_len.sum()), p=weights)].tolist()
                tgt = target_words[rng.choice(len(target_words), int(tgt_len.sum()), p=weights)].tolist()
                chunk, i, j = [], 0, 0
                for a, b in zip(src_len.tolist(), tgt_len.tolist()):
                    pair = {"en": " ".join(src[i : i + a]) + " .", "es": " ".join(tgt[j : j + b]) + " ."}
                    chunk.append(json.dumps({"translation": pair}) + "\n")
                    i, j = i + a, j + b
                text = "".join(chunk)
                f.write(text)
                written += len(text)
                lines += n
        return written, lines

    _, lines = write(path, int(megabytes * 1e6), None)
    valid = path.with_name(path.stem + ".valid.jsonl")
    write(valid, None, 2_000)
    return {"path": str(path), "bytes": os.path.getsize(path), "lines": lines, "validation": str(valid)}


def _labelled_rows(megabytes: float, seed: int, row) -> tuple[list[str], int]:
    """jsonl lines of about ``megabytes`` MB, ``row(words, rng)`` each: 3-15 Zipf-drawn words from ~10k types."""
    vocabulary = _vocabulary(10_000, seed)
    rng = np.random.default_rng(seed + 1)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    target, written = int(megabytes * 1e6), 0
    while written < target:
        lengths = rng.integers(3, 16, 20_000)
        words = vocabulary[rng.choice(len(vocabulary), int(lengths.sum()), p=weights)].tolist()
        chunk, pos = [], 0
        for n in lengths.tolist():
            chunk.append(json.dumps(row(words[pos : pos + n], rng)) + "\n")
            pos += n
        text = "".join(chunk)
        written += len(text)
        yield text, len(chunk)


def _write_rows(path: Path, megabytes: float, seed: int, row) -> dict:
    """The training jsonl of about ``megabytes`` MB and a validation file of 2,000 rows (another seed) beside it."""
    lines = 0
    with open(path, "w") as f:
        for text, n in _labelled_rows(megabytes, seed, row):
            f.write(text)
            lines += n
    valid = path.with_name(path.stem + ".valid.jsonl")
    with open(valid, "w") as f:
        f.write("".join(next(_labelled_rows(0.01, seed + 7, row))[0].splitlines(keepends=True)[:2_000]))
    return {"path": str(path), "bytes": os.path.getsize(path), "lines": lines, "validation": str(valid)}


LABELS = ["negative", "neutral", "positive", "mixed"]
TAGS = ["DET", "NOUN", "VERB", "ADJ", "ADV", "ADP", "PRON", "CONJ", "NUM", "PRT", ".", "X"]


def write_classifier_corpus(path: Path, megabytes: float, seed: int = 0) -> dict:
    """``{"text": ..., "label": ...}`` rows (90 MB: ~1 M) and a 2,000-row validation file."""
    return _write_rows(
        path, megabytes, seed, lambda words, rng: {"text": " ".join(words), "label": LABELS[int(rng.integers(4))]}
    )


def write_tagger_corpus(path: Path, megabytes: float, seed: int = 0) -> dict:
    """``{"tokens": [...], "tags": [...]}`` rows, one tag per word, and a 2,000-row validation file."""
    return _write_rows(
        path,
        megabytes,
        seed,
        lambda words, rng: {"tokens": words, "tags": [TAGS[i] for i in rng.integers(len(TAGS), size=len(words))]},
    )


def write_documents_corpus(path: Path, megabytes: float, seed: int = 0) -> dict:
    """BERT's pretraining format of about ``megabytes`` MB: one sentence per line (5-30 Zipf-drawn words from ~10k
    types and a full stop), a blank line after each document of 2-30 sentences."""
    vocabulary = _vocabulary(10_000, seed)
    rng = np.random.default_rng(seed + 1)
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    weights /= weights.sum()
    target = int(megabytes * 1e6)
    written, lines, documents = 0, 0, 0
    with open(path, "w") as f:
        while written < target:
            lengths = rng.integers(5, 31, 20_000)
            words = vocabulary[rng.choice(len(vocabulary), int(lengths.sum()), p=weights)].tolist()
            chunk, pos, left = [], 0, int(rng.integers(2, 31))
            for n in lengths.tolist():
                chunk.append(" ".join(words[pos : pos + n]) + " .\n")
                pos, left = pos + n, left - 1
                if left == 0:
                    chunk.append("\n")
                    documents += 1
                    left = int(rng.integers(2, 31))
            chunk.append("\n")
            documents += 1
            text = "".join(chunk)
            f.write(text)
            written += len(text)
            lines += len(chunk)
    return {"path": str(path), "bytes": os.path.getsize(path), "lines": lines, "documents": documents}


# one row per task: script, recipe, corpus writer, the flags that name the corpus and keep a 3-step run short
SHORT_LABELLED_RUN = [
    "--max_steps",
    "3",
    "--eval_strategy",
    "no",
    "--save_strategy",
    "no",
    "--load_best_model_at_end",
    "false",
    "--logging_steps",
    "1",
]
TASKS = {
    "lm": {
        "script": "train_scripts/train_lm.py",
        "recipe": "configs/lm_word_ptb.json",
        "corpus": write_ptb_corpus,
        "corpus_name": "ptb_words_{mb}MB.txt",
        "data_flags": lambda corpus: ["--train_file", corpus["path"]],
        "flags": [
            "--max_steps",
            "3",
            "--eval_strategy",
            "no",
            "--final_eval_max_tokens",
            "20000",
            "--sample_length",
            "5",
            "--sample_temperatures",
            "1.0",
            "--logging_steps",
            "1",
        ],
        # --streaming reads train_file as a stream; it needs a validation file and a tokenizer from the first rows
        "streaming": lambda corpus: [
            "--validation_file",
            corpus["validation"],
            "--tokenizer_max_train_lines",
            "200000",
        ],
    },
    "translation": {
        "script": "train_scripts/train_translation.py",
        "recipe": "configs/translation_transformer.json",
        "corpus": write_pairs_corpus,
        "corpus_name": "pairs_{mb}MB.jsonl",
        "data_flags": lambda corpus: ["--train_file", corpus["path"], "--validation_file", corpus["validation"]],
        "flags": [
            "--max_steps",
            "3",
            "--logging_steps",
            "1",
            "--plot_attention",
            "false",
            "--do_predict",
            "false",
            "--save_strategy",
            "no",
        ],
        # the recipe's length buckets need every length in advance: a stream samples through its shuffle buffer
        "streaming": lambda corpus: ["--train_sampling_strategy", "random"],
    },
    "classifier": {
        "script": "train_scripts/train_classifier.py",
        "recipe": "configs/sentiment_bilstm.json",
        "corpus": write_classifier_corpus,
        "corpus_name": "labelled_{mb}MB.jsonl",
        "data_flags": lambda corpus: ["--train_file", corpus["path"], "--validation_file", corpus["validation"]],
        "flags": [*SHORT_LABELLED_RUN, "--model_config", '{"num_labels": 4}'],
    },
    "tagger": {
        "script": "train_scripts/train_tagger.py",
        "recipe": "configs/pos_bilstm.json",
        "corpus": write_tagger_corpus,
        "corpus_name": "tagged_{mb}MB.jsonl",
        "data_flags": lambda corpus: ["--train_file", corpus["path"], "--validation_file", corpus["validation"]],
        "flags": [*SHORT_LABELLED_RUN, "--tags_column_name", "tags"],
    },
    "pretrain_bert": {
        "script": "train_scripts/pretrain_bert.py",
        "recipe": "configs/bert_pretrain_brown.json",
        "corpus": write_documents_corpus,
        "corpus_name": "bert_documents_{mb}MB.txt",
        "data_flags": lambda corpus: ["--train_file", corpus["path"]],  # 5% of the documents held out
        "flags": ["--max_steps", "3", "--eval_strategy", "no", "--max_eval_samples", "256", "--logging_steps", "1"],
        "streaming": lambda corpus: [
            "--validation_file",
            corpus["validation"],
            "--tokenizer_max_train_lines",
            "200000",
        ],
    },
}


def corpus_of(writer, path: Path, megabytes: float, **kwargs) -> dict:
    """The corpus ``writer`` writes at ``path``, reused when a previous run left it there: its description is kept in
    ``<path>.json`` beside it and trusted only while the file still has the recorded size (the corpora are
    deterministic, so a file of that name and size is the same text)."""
    info_path = path.with_name(path.name + ".json")
    if info_path.exists() and path.exists():
        info = json.loads(info_path.read_text())
        if (
            info.get("bytes") == os.path.getsize(path)
            and info.get("megabytes") == megabytes
            and info.get("kwargs") == kwargs
        ):
            if "validation" not in info or Path(info["validation"]).exists():
                return info
    info = {**writer(path, megabytes, **kwargs), "megabytes": megabytes, "kwargs": kwargs}
    info_path.write_text(json.dumps(info))
    return info


# ---------------------------------------------------------------------------------------------------------------
# measurement
# ---------------------------------------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo.extend(int(c) for c in (task / "children").read_text().split())
            except OSError:
                pass
    return found


class MemorySampler(threading.Thread):
    """Peak VmRSS / RssAnon / RssFile of a process tree, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.1, main_index: int = 0) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.main_index = pid, interval, main_index  # main: the script's process
        self.peak = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
        self.peak_main = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = {"VmRSS": 0, "RssAnon": 0, "RssFile": 0}
            for i, pid in enumerate(_descendants(self.pid)):
                status = _status(pid)
                for key in total:
                    total[key] += status.get(key, 0)
                    if i == self.main_index:
                        self.peak_main[key] = max(self.peak_main[key], status.get(key, 0))
            for key in total:
                self.peak[key] = max(self.peak[key], total[key])
            self.stop.wait(self.interval)


def run_child(command: list[str], log_path: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONUNBUFFERED"] = "1"  # each line as it is printed: the first loss's time
    timed = os.path.exists("/usr/bin/time")
    first_loss: list[float] = []
    start = time.time()
    with open(log_path, "w") as log:
        child = subprocess.Popen(
            (["/usr/bin/time", "-v"] if timed else []) + command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        sampler = MemorySampler(child.pid, main_index=1 if timed else 0)  # under time: its child
        sampler.start()
        for line in child.stdout:
            if not first_loss and re.search(r"\{'loss': ", line):
                first_loss.append(time.time())
            log.write(line)
        rc = child.wait()
        sampler.stop.set()
        sampler.join()
    wall = time.time() - start
    text = log_path.read_text()
    if rc != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {rc}); its log: {log_path}\n{text[-3000:]}")
    first = re.search(r"\[hf_seq\] first training step begins at ([0-9.]+)", text)
    end = re.search(
        r"\[hf_seq\] training ends at ([0-9.]+) after (\d+) steps; first step ended at ([0-9.]+) \(step (\d+)\)", text
    )
    # the tokenizing of the translation, classifier and tagger scripts (their tokenizer and data record have cache
    # lines of their own), else the one cache line of the token-store scripts
    built = re.search(r"\[hf_seq\.preprocessing\] cached tokenizing output .* \(([0-9.]+) s\)", text) or re.search(
        r"\[hf_seq\.preprocessing\] cached .* \(([0-9.]+) s\)", text
    )
    row = {
        "peak_rss_gb": round(sampler.peak["VmRSS"] / 2**30, 3),
        "peak_anon_gb": round(sampler.peak["RssAnon"] / 2**30, 3),
        "peak_file_gb": round(sampler.peak["RssFile"] / 2**30, 3),
        "peak_rss_main_process_gb": round(sampler.peak_main["VmRSS"] / 2**30, 3),
        "wall_seconds": round(wall, 1),
        "seconds_to_first_step": round(float(first.group(1)) - start, 2) if first else None,
        "seconds_to_first_loss": round(first_loss[0] - start, 2) if first_loss else None,
        "reused_cache": "reusing the cached" in text or built is None,
        "preprocessing_seconds": float(built.group(1)) if built else None,
    }
    resident = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if resident:
        row["max_resident_gb_time_v"] = round(int(resident.group(1)) * 1024 / 2**30, 3)
    if end:
        steps = int(end.group(2)) - int(end.group(4))
        seconds = float(end.group(1)) - float(end.group(3))
        row["steps_per_second"] = round(steps / seconds, 3) if steps > 0 and seconds > 0 else None
    return row


def import_seconds(script: str) -> float:
    """Seconds a fresh interpreter takes to import the script's module (torch, transformers, datasets): the part of
    the start-up that does not depend on the data, measured right before each run."""
    module = "hf_seq.train_scripts." + Path(script).stem
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.time()
    subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=env, check=True)
    return round(time.time() - start, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", nargs="+", default=["lm"], choices=sorted(TASKS))
    parser.add_argument("--sizes_mb", nargs="+", type=float, default=[200.0])
    parser.add_argument("--modes", nargs="+", default=["first", "second", "streaming"])
    parser.add_argument("--work_dir", default=None, help="corpora, caches and runs (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--preprocessing_num_workers", type=int, default=1)
    args = parser.parse_args()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_data_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("rows", {})
    for task_name in args.task:
        task = TASKS[task_name]
        for mb in args.sizes_mb:
            label = f"{mb:g}"
            corpus_path = work / task["corpus_name"].format(mb=label)
            t0 = time.time()
            corpus = corpus_of(task["corpus"], corpus_path, mb)
            print(f"{task_name} {label} MB corpus: {corpus} ({time.time() - t0:.0f} s)", flush=True)
            cache = work / f"cache_{task_name}_{label}"
            shutil.rmtree(cache, ignore_errors=True)
            for mode in args.modes:
                if mode == "streaming" and not task.get("streaming"):
                    continue
                command = [
                    sys.executable,
                    task["script"],
                    task["recipe"],
                    *task["data_flags"](corpus),
                    *task["flags"],
                    "--output_dir",
                    str(work / f"run_{task_name}_{label}_{mode}"),
                    "--cache_dir",
                    str(cache),
                    "--preprocessing_num_workers",
                    str(args.preprocessing_num_workers),
                    "--overwrite_output_dir",
                    "true",
                ]
                if mode == "streaming":
                    if "validation" not in corpus:
                        validation = corpus_path.with_name(corpus_path.stem + "_validation.txt")
                        corpus["validation"] = corpus_of(task["corpus"], validation, max(1.0, mb / 100), seed=7)["path"]
                    command += ["--streaming", "true", *task["streaming"](corpus)]
                load = os.getloadavg()
                imports = import_seconds(task["script"])
                row = run_child(command, work / f"log_{task_name}_{label}_{mode}.txt")
                row["import_seconds"] = imports
                if row["seconds_to_first_step"] is None:  # no marker line: the first step's end
                    row["seconds_to_first_step"] = row["seconds_to_first_loss"]
                if row["seconds_to_first_step"] is not None:
                    row["seconds_to_first_step_after_imports"] = round(row["seconds_to_first_step"] - imports, 2)
                row.update(
                    {
                        "corpus_mb": round(corpus["bytes"] / 1e6, 1),
                        "corpus_lines": corpus["lines"],
                        "command": "OMP_NUM_THREADS=1 python " + " ".join(command[1:]),
                        "load_average_before": [round(x, 2) for x in load],
                        "load_average_after": [round(x, 2) for x in os.getloadavg()],
                    }
                )
                if row["preprocessing_seconds"]:
                    row["preprocessing_mb_per_second"] = round(corpus["bytes"] / 1e6 / row["preprocessing_seconds"], 2)
                key = f"{task_name}/{label}MB/{mode}"
                results["rows"][key] = row
                print(key, json.dumps(row), flush=True)
                RESULTS.parent.mkdir(parents=True, exist_ok=True)
                RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    results["notes"] = (
        "peak_rss_gb counts the memory-mapped token files' pages (RssFile, reclaimable page cache) with the "
        "process's own memory (peak_anon_gb); both summed over the process tree. One thread (OMP_NUM_THREADS=1)."
    )
    RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
