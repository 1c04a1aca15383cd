"""Pretrain word vectors (skip-gram with negative sampling, word2vec) on the installed unlabelled text.

    python train_scripts/train_word_vectors.py --output runs/word_vectors/vectors.txt --dim 64

The notes' "pretrain the embedding on more data, then keep it (frozen) for the small task": the vectors are learnt
from Brown (all documents), the PTB training text and the sentiment TRAINING texts (labels unused; validation and test
texts are never read). Words are normalised exactly like ``build_word_level_tokenizer`` (lowercase, ``\\w+|[^\\w\\s]+``
pieces). Output: word2vec text format (``"<count> <dim>"`` header, then ``word v1 ... vd`` per line), which
``train_classifier.py --pretrained_embeddings`` aligns to its tokenizer's vocabulary (GloVe files work too).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tokenizers import normalizers, pre_tokenizers  # noqa: E402

from hf_seq.data import load_brown, load_ptb, load_sentiment  # noqa: E402


def corpus_sentences() -> list[list[str]]:
    """Unlabelled sentences, normalised like the word-level tokenizer."""
    lower, split = normalizers.Lowercase(), pre_tokenizers.Whitespace()

    def words(text: str) -> list[str]:
        return [w for w, _ in split.pre_tokenize_str(lower.normalize_str(text))]

    sentences = []
    brown = load_brown()
    for name in brown:
        sentences += [words(" ".join(tokens)) for tokens in brown[name]["tokens"]]
    sentences += [words(t) for t in load_ptb()["train"]["text"]]
    sentences += [words(t) for t in load_sentiment()["train"]["text"]]
    return [s for s in sentences if len(s) > 1]


class SkipGram(nn.Module):
    """Input and output word vectors; score(w, c) = u_w · v_c."""

    def __init__(self, vocab_size: int, dim: int) -> None:
        super().__init__()
        self.inp = nn.Embedding(vocab_size, dim, sparse=True)
        self.out = nn.Embedding(vocab_size, dim, sparse=True)
        nn.init.uniform_(self.inp.weight, -0.5 / dim, 0.5 / dim)
        nn.init.zeros_(self.out.weight)

    def forward(self, center: torch.Tensor, context: torch.Tensor, negatives: torch.Tensor) -> torch.Tensor:
        u = self.inp(center)  # (B, d)
        pos = (u * self.out(context)).sum(-1)  # (B,)
        neg = torch.bmm(self.out(negatives), u.unsqueeze(-1)).squeeze(-1)  # (B, K)
        return -(F.logsigmoid(pos) + F.logsigmoid(-neg).sum(-1)).mean()


def make_pairs(ids: list[np.ndarray], keep_prob: np.ndarray, window: int, rng: np.random.Generator) -> np.ndarray:
    """(center, context) pairs after frequent-word subsampling, with word2vec's random window shrinking."""
    centers, contexts = [], []
    for sent in ids:
        sent = sent[rng.random(len(sent)) < keep_prob[sent]]
        n = len(sent)
        if n < 2:
            continue
        reach = rng.integers(1, window + 1, size=n)  # per-center window size
        for d in range(1, window + 1):
            if d >= n:
                break
            left, right = sent[:-d], sent[d:]
            fwd = reach[:-d] >= d  # center left, context right
            bwd = reach[d:] >= d  # center right, context left
            centers += [left[fwd], right[bwd]]
            contexts += [right[fwd], left[bwd]]
    return np.stack([np.concatenate(centers), np.concatenate(contexts)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="runs/word_vectors/vectors.txt")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--negatives", type=int, default=5)
    parser.add_argument("--min_count", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=4096)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--subsample", type=float, default=1e-4)
    parser.add_argument("--max_minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    start = time.monotonic()

    sentences = corpus_sentences()
    counts = Counter(w for s in sentences for w in s)
    vocab = [w for w, c in counts.most_common() if c >= args.min_count]
    index = {w: i for i, w in enumerate(vocab)}
    freq = np.array([counts[w] for w in vocab], dtype=np.float64)
    ids = [np.array([index[w] for w in s if w in index], dtype=np.int64) for s in sentences]
    total = freq.sum()
    ratio = args.subsample * total / freq
    keep_prob = np.minimum(1.0, np.sqrt(ratio) + ratio)
    noise = torch.tensor(freq**0.75 / (freq**0.75).sum(), dtype=torch.float)
    print(f"{len(sentences)} sentences, {int(total)} tokens, vocabulary {len(vocab)}", flush=True)

    model = SkipGram(len(vocab), args.dim)
    optimizer = torch.optim.SparseAdam(model.parameters(), lr=args.lr)
    steps, losses = 0, []
    for epoch in range(args.epochs):
        pairs = torch.from_numpy(make_pairs(ids, keep_prob, args.window, rng))
        pairs = pairs[torch.randperm(len(pairs))]
        for batch in pairs.split(args.batch_size):
            negatives = torch.multinomial(noise, batch.shape[0] * args.negatives, replacement=True)
            loss = model(batch[:, 0], batch[:, 1], negatives.view(batch.shape[0], args.negatives))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            losses.append(loss.item())
            if steps % 500 == 0:
                print(f"epoch {epoch} step {steps} loss {np.mean(losses[-500:]):.4f}", flush=True)
            if time.monotonic() - start > 60 * args.max_minutes:
                break
        if time.monotonic() - start > 60 * args.max_minutes:
            print("time budget reached", flush=True)
            break

    vectors = model.inp.weight.detach().numpy()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(f"{len(vocab)} {args.dim}\n")
        for word, vec in zip(vocab, vectors):
            f.write(word + " " + " ".join(f"{v:.5f}" for v in vec) + "\n")
    probe = {}
    normed = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-8)
    for word in ("good", "bad", "funny", "boring", "film"):
        if word in index:
            sims = normed @ normed[index[word]]
            probe[word] = [vocab[i] for i in np.argsort(-sims)[1:6]]
    info = {
        "sentences": len(sentences),
        "tokens": int(total),
        "vocab": len(vocab),
        "steps": steps,
        "final_loss": float(np.mean(losses[-200:])),
        "minutes": (time.monotonic() - start) / 60,
        "nearest": probe,
        "args": vars(args),
    }
    out.with_suffix(".json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
