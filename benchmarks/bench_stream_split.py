"""What ``--streaming_split_by_node`` saves each process: the seconds to read and tokenize the training examples of
one process's part of the stream against the whole stream (what the first process does with ``dispatch_batches``),
measured in one process, one after the other, on the same generated files.

    OMP_NUM_THREADS=1 python benchmarks/bench_stream_split.py [--pairs 20000 --lines 40000 --parts 2]

Translation: ``train_translation.streamed_features`` of a jsonl of ``--pairs`` pairs (a tokenizer built on the first
10,000), iterated whole (world 1) and as shard 0 of ``--parts`` (``.shard(parts, 0)``, what accelerate gives process
0). Language model: ``train_lm.prepare_lm_stream`` of a word-level text file of ``--lines`` lines, likewise. Each
timing is the best of ``--repeats``. Prints one JSON line with the seconds, their ratio and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def best(dataset, repeats: int) -> float:
    """The fewest seconds of ``repeats`` full passes over ``dataset``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sum(1 for _ in dataset)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--lines", type=int, default=40000)
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    from hf_seq.train_scripts import train_lm, train_translation
    from hf_seq.train_scripts.arguments import parse_args

    rng = random.Random(0)
    words = [f"w{i}" for i in range(2000)]
    folder = Path(tempfile.mkdtemp(prefix="bench_stream_split_"))
    os.environ.setdefault("HF_SEQ_CACHE", str(folder / "cache"))
    with open(folder / "pairs.jsonl", "w") as f:
        for _ in range(options.pairs):
            en = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
            es = " ".join(rng.choice(words) for _ in range(rng.randint(4, 24)))
            f.write(json.dumps({"translation": {"en": en, "es": es}}) + "\n")
    (folder / "valid.jsonl").write_text((folder / "pairs.jsonl").read_text().split("\n", 20)[0] + "\n")
    with open(folder / "words.txt", "w") as f:
        for _ in range(options.lines):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(5, 40))) + "\n")
    (folder / "valid.txt").write_text("w1 w2 w3\n" * 50)
    common = ["--output_dir", str(folder / "out"), "--max_steps", "10", "--report_to", "none", "--use_cpu", "true"]
    split = ["--streaming", "true", "--streaming_split_by_node", "true", "--shuffle_buffer_size", "0"]
    translation = parse_args(
        train_translation.TASK,
        [str(ROOT / "configs" / "translation_transformer.json"), "--train_file", str(folder / "pairs.jsonl"),
         "--validation_file", str(folder / "valid.jsonl"), "--train_sampling_strategy", "random",
         "--tokenizer_max_train_lines", "10000", *common, *split],
    )  # fmt: skip
    lm = parse_args(
        train_lm.TASK,
        ["--level", "word", "--train_file", str(folder / "words.txt"), "--validation_file", str(folder / "valid.txt"),
         "--segment_length", "35", "--tokenizer_max_train_lines", "10000", *common, *split],
    )  # fmt: skip
    report = {"command": " ".join(["python", *sys.argv]), "load_average_before": os.getloadavg()}
    for name, build in (
        ("translation", lambda world: train_translation.streamed_features(*translation, "en", "es", world)[1]["train"]),
        ("lm", lambda world: train_lm.prepare_lm_stream(lm[2], lm[0], lm[1], lm[3], world_size=world)[1]),
    ):
        whole = build(1)
        part = build(options.parts).shard(num_shards=options.parts, index=0)
        seconds_whole = best(whole, options.repeats)
        seconds_part = best(part, options.repeats)
        report[name] = {
            "examples_whole": sum(1 for _ in whole),
            "examples_part": sum(1 for _ in part),
            "seconds_whole": round(seconds_whole, 3),
            "seconds_part": round(seconds_part, 3),
            "part_over_whole": round(seconds_part / seconds_whole, 3),
        }
    report["load_average_after"] = os.getloadavg()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
