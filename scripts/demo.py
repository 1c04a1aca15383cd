"""`make demo`: the English -> Spanish translator.

Trains the small Transformer of ``configs/translation_transformer.json`` on the real verse pairs (about 15 minutes
on 2 cores), prints its test BLEU / chrF, reloads it with ``AutoModelForSeq2SeqLM.from_pretrained`` and
``pipeline("translation")``, translates held-out verses with beam search and saves one cross-attention heat map.

Reuses the run in ``runs/translation_transformer`` when it is complete (delete the folder to retrain). Extra
arguments are passed to the train script, e.g. ``python scripts/demo.py --max_train_minutes 3``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / "runs" / "translation_transformer"
RECIPE = ROOT / "configs" / "translation_transformer.json"
HEAT_MAP = RUN_DIR / "demo_cross_attention.png"
NUM_EXAMPLES = 4
NUM_BEAMS = 5


def train_if_needed(extra_args: list[str]) -> dict:
    """Run the recipe unless ``RUN_DIR`` already holds a finished run; returns its results.json."""
    results_file = RUN_DIR / "results.json"
    finished = results_file.is_file() and "test_beam5" in json.loads(results_file.read_text())
    if finished and not extra_args:
        print(f"Using the finished run in {RUN_DIR.relative_to(ROOT)} (delete it to retrain).")
    else:
        print(f"Training {RECIPE.relative_to(ROOT)} -> {RUN_DIR.relative_to(ROOT)} (about 15 minutes on 2 cores) ...",
              flush=True)
        cmd = [sys.executable, str(ROOT / "train_scripts" / "train_translation.py"), str(RECIPE),
               "--output_dir", str(RUN_DIR), "--disable_tqdm", "true", *extra_args]
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    return json.loads(results_file.read_text())


def held_out_verses(results: dict, count: int) -> list[dict]:
    """The first ``count`` test verses of the run's split (never seen in training), with their references."""
    from hf_seq.data import load_translation

    test = load_translation(max_words=results["data"]["max_words"])["test"]
    return [test[i]["translation"] for i in range(count)]


def main(argv: list[str]) -> None:
    results = train_if_needed(argv)
    train = results.get("train", {})
    print(f"\nTrained {train.get('global_steps', '?')} steps ({train.get('train_minutes', 0):.1f} min, "
          f"{results['parameters'] / 1e6:.2f}M parameters) on {results['data']['train_pairs']:,} verse pairs.")
    print(f"Test ({results['data']['test_pairs']} held-out verses):")
    for key, name in (("test_greedy", "greedy"), ("test_beam5", f"beam {NUM_BEAMS}")):
        print(f"  {name:>7}: BLEU {results[key]['test_bleu']:5.2f}   chrF {results[key]['test_chrf']:5.2f}")

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    import hf_seq  # noqa: F401  (registers the hf_seq model types with the Auto classes)
    from hf_seq.visualization import plot_translation_attention

    model = AutoModelForSeq2SeqLM.from_pretrained(RUN_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(RUN_DIR)
    translate = pipeline("translation", model=str(RUN_DIR), trust_remote_code=True)  # hf_seq/seq2seq_pipelines.py
    print(f"\nReloaded {type(model).__name__} with AutoModelForSeq2SeqLM; pipeline('translation'), beam {NUM_BEAMS}:")
    verses = held_out_verses(results, NUM_EXAMPLES)
    outputs = translate([v["en"] for v in verses], num_beams=NUM_BEAMS)
    for verse, out in zip(verses, outputs):
        print(f"  en:        {verse['en']}\n  hf_seq:    {out['translation_text']}\n  reference: {verse['es']}\n")

    source = verses[0]["en"]
    enc = tokenizer([source], return_tensors="pt")
    with torch.no_grad():
        beams = model.generate(**enc, num_beams=NUM_BEAMS, num_return_sequences=3, output_scores=True,
                               return_dict_in_generate=True)
    print(f"model.generate(num_beams={NUM_BEAMS}, num_return_sequences=3) on the first verse:")
    for ids, score in zip(beams.sequences, beams.sequences_scores):
        print(f"  {score.item():7.3f}  {tokenizer.decode(ids, skip_special_tokens=True)}")

    path = plot_translation_attention(model, tokenizer, source, HEAT_MAP)
    print(f"\nCross-attention of the last decoder layer (heads averaged) for the first verse: "
          f"{Path(path).relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
