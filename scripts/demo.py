"""`make demo`: train the BiLSTM sentiment classifier on the real Rotten Tomatoes snippets, then use it through Auto*.

Reuses the run in runs/sentiment_bilstm_tuned when it is already there (delete the folder to retrain).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "runs" / "sentiment_bilstm_tuned"
RECIPE = ROOT / "configs" / "sentiment_bilstm_tuned.json"
EXAMPLES = [
    "A warm, funny and beautifully acted film that earns every one of its tears.",
    "Tedious, predictable and far too long; I checked my watch three times.",
    "The plot is thin, but the performances make it worth seeing.",
]


def main() -> None:
    results_file = RUN_DIR / "results.json"
    if not results_file.is_file():
        print(f"Training {RECIPE.name} -> {RUN_DIR} ...", flush=True)
        cmd = [sys.executable, str(ROOT / "train_scripts" / "train_classifier.py"), str(RECIPE),
               "--output_dir", str(RUN_DIR)]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    else:
        print(f"Using the finished run in {RUN_DIR} (delete it to retrain).")
    results = json.loads(results_file.read_text())
    print(f"\nTest accuracy: {results['test_accuracy']:.4f}  (validation: {results['validation_accuracy']:.4f})")

    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    import hf_seq  # noqa: F401  (registers the hf_seq model types with the Auto classes)

    model = AutoModelForSequenceClassification.from_pretrained(RUN_DIR)
    tokenizer = AutoTokenizer.from_pretrained(RUN_DIR)
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    print(f"\nReloaded {type(model).__name__} with AutoModelForSequenceClassification; pipeline says:")
    for text, pred in zip(EXAMPLES, classify(EXAMPLES)):
        print(f"  {pred['label']:>8} ({pred['score']:.3f})  {text}")


if __name__ == "__main__":
    main()
