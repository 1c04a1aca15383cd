"""Fine-tuning speed from a real pretrained checkpoint: hf_seq's converted BERT against transformers' own, one process.

    make pretrained
    OMP_NUM_THREADS=1 python benchmarks/bench_finetune_pretrained.py [--threads 1] [--repeats 7] [--steps 4]

Both models are ``BertForSequenceClassification`` built from the same folder (default: all-MiniLM-L6-v2 from
``make pretrained``): ``transformers``' own (``attn_implementation="sdpa"``) and hf_seq's
(``from_transformers_bert``), the new classifier copied so that the weights are identical (checked: equal logits in
eval mode). The batches are the first ``--steps`` training batches of ``hf_seq/sentiment`` as ``finetune_bert.py``
feeds them: the checkpoint's tokenizer, inputs truncated to ``--length`` tokens, batches of ``--batch`` padded to
their longest row. A training step is forward (dropout on) + backward + AdamW; inference is an eval-mode forward.

The models are timed interleaved (each repeat runs both in turn, on the same batches); per repeat the ratio
transformers time / hf_seq time is taken (same moment, same machine load) and the median over repeats is reported,
for process CPU time (the figure of record on a shared machine) and for wall time.
Writes ``benchmarks/results/bench_finetune_pretrained.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, DataCollatorWithPadding

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_seq import BertForSequenceClassification  # noqa: E402
from hf_seq.toolkit.bert_conversion import from_transformers_bert  # noqa: E402
from hf_seq.toolkit.data import load_sentiment  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bench_finetune_pretrained.json"
DEFAULT_MODEL = Path(os.environ.get("HF_SEQ_DATA", "data")) / "pretrained" / "all-MiniLM-L6-v2"


def sentiment_batches(tokenizer, steps: int, batch: int, length: int) -> list[dict[str, torch.Tensor]]:
    """The first ``steps`` training batches of the sentiment split, encoded and padded as the script does."""
    train = load_sentiment()["train"].select(range(steps * batch))
    collate = DataCollatorWithPadding(tokenizer)
    out = []
    for i in range(steps):
        rows = train[i * batch : (i + 1) * batch]
        features = tokenizer(rows["text"], truncation=True, max_length=length)
        out.append(
            collate([{**{k: v[j] for k, v in features.items()}, "labels": rows["label"][j]} for j in range(batch)])
        )
    return out


def time_train(model, optimizer, batches) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one training step per batch."""
    model.train()
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, time.process_time() - cpu


@torch.inference_mode()
def time_infer(model, batches) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one eval-mode forward per batch."""
    model.eval()
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        model(**{k: v for k, v in batch.items() if k != "labels"})
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="a transformers BERT checkpoint folder")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=4, help="training batches per timed repeat")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"--model {args.model} is not a checkpoint folder (run `make pretrained` first)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    reference = transformers.BertForSequenceClassification.from_pretrained(
        args.model, num_labels=2, attn_implementation="sdpa", dtype=torch.float32
    )
    ours = from_transformers_bert(BertForSequenceClassification, args.model, num_labels=2)
    ours.classifier.load_state_dict(reference.classifier.state_dict())
    models = {"transformers": reference, "hf_seq": ours}
    batches = sentiment_batches(tokenizer, args.steps, args.batch, args.length)
    with torch.no_grad():  # same weights, same numbers
        diff = (ours.eval()(**batches[0]).logits - reference.eval()(**batches[0]).logits).abs().max().item()
    assert diff < 1e-4, f"hf_seq's logits differ from transformers' by {diff}"
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=5e-5) for name, m in models.items()}
    for name, model in models.items():  # warm-up
        time_train(model, optimizers[name], batches[:1])
        time_infer(model, batches[:1])

    runs = {kind: {clock: {name: [] for name in models} for clock in ("wall", "cpu")} for kind in ("train", "infer")}
    for _ in range(args.repeats):
        for name, model in models.items():
            for kind, (wall, cpu) in (
                ("train", time_train(model, optimizers[name], batches)),
                ("infer", time_infer(model, batches)),
            ):
                runs[kind]["wall"][name].append(wall)
                runs[kind]["cpu"][name].append(cpu)

    def summary(kind: str, clock: str) -> dict:
        seconds = runs[kind][clock]
        return {
            "seconds_per_step_median": {n: statistics.median(v) / args.steps for n, v in seconds.items()},
            "hf_seq_speedup_median": statistics.median(
                t / h for t, h in zip(seconds["transformers"], seconds["hf_seq"])
            ),
            "seconds_all": seconds,
        }

    tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].numel() for b in batches)
    result = {
        "command": " ".join(["python", *sys.argv]),
        "model": str(args.model),
        "batches": {"steps": args.steps, "batch": args.batch, "max_length": args.length},
        "tokens": {"real": tokens, "padded": padded},
        "threads": args.threads,
        "repeats": args.repeats,
        "load_average": os.getloadavg(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "note": "speedup = transformers seconds / hf_seq seconds, paired per repeat, median; cpu = process CPU time",
        "train": {clock: summary("train", clock) for clock in ("cpu", "wall")},
        "inference": {clock: summary("infer", clock) for clock in ("cpu", "wall")},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    for clock in ("cpu", "wall"):
        train, infer = result["train"][clock], result["inference"][clock]
        print(
            f"[{clock}] s/step train: transformers {train['seconds_per_step_median']['transformers']:.3f}, hf_seq "
            f"{train['seconds_per_step_median']['hf_seq']:.3f} (x{train['hf_seq_speedup_median']:.2f}); inference: "
            f"transformers {infer['seconds_per_step_median']['transformers']:.3f}, hf_seq "
            f"{infer['seconds_per_step_median']['hf_seq']:.3f} (x{infer['hf_seq_speedup_median']:.2f})"
        )
    print(f"load average {result['load_average']}; wrote {args.output}")


if __name__ == "__main__":
    main()
