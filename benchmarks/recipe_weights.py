"""The weights six recipes train to, as sha256 of each ``model.safetensors``: the check a restructuring of the
training wing must pass (the same seed, the same weights, bit for bit).

Each recipe trains 3-4 steps on its real data with tiny overrides, one thread, on the CPU: the translation
Transformer (with a checkpoint and an evaluation on its path), the attention RNN (additive), the char LM, the BiLSTM
classifier, the BiLSTM tagger and BERT pretraining. Run it on two commits and compare the lists::

    python benchmarks/recipe_weights.py OUT_DIR [RECIPE ...] > before.txt
    git checkout OTHER && python benchmarks/recipe_weights.py OUT_DIR2 > after.txt && diff before.txt after.txt

Needs the corpora (``make data``). A few minutes on one idle core.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path

COMMON = ["--logging_steps", "1", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true"]
TRANSLATION = [
    *("--max_train_samples", "64", "--max_eval_samples", "8", "--max_predict_samples", "4", "--max_steps", "3"),
    *("--eval_steps", "2", "--per_device_train_batch_size", "16", "--tokenizer_vocab_size", "400"),
    *("--max_source_length", "24", "--max_target_length", "12", "--plot_attention", "false"),
]
CLASSIFICATION = [
    *("--max_train_samples", "64", "--max_eval_samples", "32", "--max_predict_samples", "32", "--max_steps", "3"),
    *("--save_strategy", "no", "--eval_strategy", "no", "--load_best_model_at_end", "false"),
]
RECIPES = {
    "translation_transformer": [
        *("translation", "translation_transformer", *TRANSLATION, "--eval_strategy", "steps", "--test_num_beams", "1"),
        "--config_overrides",
        "hidden_size=16,intermediate_size=32,num_attention_heads=2,encoder_layers=1,decoder_layers=1",
        *("--save_strategy", "steps", "--save_steps", "2"),
    ],
    "translation_rnn_additive": [
        *("translation", "translation_rnn_additive", *TRANSLATION, "--test_num_beams", "1,2"),
        *("--config_overrides", "hidden_size=16,embedding_size=16,max_target_length=12"),
    ],
    "lm_char_shakespeare": [
        *("lm", "lm_char_shakespeare", "--max_steps", "4", "--segment_length", "24", "--stride", "24"),
        *("--model_config", '{"cell": "lstm", "hidden_size": 16, "embedding_size": 8}', "--max_eval_tokens", "2000"),
        *("--eval_strategy", "no", "--sample_length", "10", "--per_device_train_batch_size", "8"),
    ],
    "sentiment_bilstm": ["classifier", "sentiment_bilstm", "--config_overrides", "hidden_size=8", *CLASSIFICATION],
    "pos_bilstm": [
        *("tagger", "pos_bilstm", "--config_overrides", "hidden_size=8,embedding_size=8,num_hidden_layers=1"),
        *CLASSIFICATION,
    ],
    "bert_pretrain_brown": [
        *("pretrain_bert", "bert_pretrain_brown", "--config_overrides"),
        "hidden_size=16,num_hidden_layers=1,num_attention_heads=2,intermediate_size=32",
        *("--tokenizer_vocab_size", "400", "--max_seq_length", "32", "--max_steps", "3"),
        *("--per_device_train_batch_size", "4", "--warmup_steps", "0", "--eval_strategy", "no"),
        *("--max_eval_samples", "8", "--per_device_eval_batch_size", "256"),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", type=Path, help="where the runs are written (one folder per recipe)")
    parser.add_argument("recipes", nargs="*", help=f"a subset of {', '.join(RECIPES)} (default: all six)")
    cli = parser.parse_args()
    unknown = sorted(set(cli.recipes) - set(RECIPES))
    if unknown:
        parser.error(f"unknown recipe(s) {', '.join(unknown)}; choose from {', '.join(RECIPES)}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1"}
    failed = False
    for name, args in RECIPES.items():
        if cli.recipes and name not in cli.recipes:
            continue
        run = cli.output_dir / name
        command = [sys.executable, "-m", "hf_seq.train_scripts", *args, "--output_dir", str(run)]
        done = subprocess.run([*command, "--overwrite_output_dir", "true", *COMMON], env=env, capture_output=True)
        if done.returncode:
            print(name, "FAILED", done.returncode, done.stderr.decode(errors="replace")[-3000:], flush=True)
            failed = True
            continue
        print(name, hashlib.sha256((run / "model.safetensors").read_bytes()).hexdigest(), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
