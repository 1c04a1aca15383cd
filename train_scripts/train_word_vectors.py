"""Pretrain word vectors (skip-gram with negative sampling, word2vec) on unlabelled text.

    python train_scripts/train_word_vectors.py configs/word_vectors_skipgram.json [--dim 64 ...]
    python train_scripts/train_word_vectors.py configs/word_vectors_skipgram.json \
        --train_file my_corpus.txt --output_dir runs/my_vectors
    hf-seq-train word_vectors configs/word_vectors_skipgram.json

The notes' "pretrain the embedding on more data, then keep it (frozen) for the small task". Data: one text per row
of ``--text_column_name`` (default ``text``) from ``--dataset_name`` (the preset ``hf_seq/unlabelled_text``: every
Brown sentence, the PTB training text and the sentiment TRAINING snippets — labels unused, validation and test texts
never read; a folder; a ``datasets`` name) or ``--train_file`` (txt: one row per line; csv, json, jsonl, parquet).
Only the training split is read. Words are normalised exactly like ``build_word_level_tokenizer`` (lowercase unless
``--lowercase false``, ``\\w+|[^\\w\\s]+`` pieces). Output in ``output_dir``: ``vectors.txt`` in word2vec text format
(``"<count> <dim>"`` header, then ``word v1 ... vd`` per line), which ``train_classifier.py --pretrained_embeddings``
aligns to its tokenizer's vocabulary (GloVe files work too), and ``vectors.json`` (corpus size, loss, nearest
neighbours of a few probe words, the command). ``learning_rate``, ``num_train_epochs``,
``per_device_train_batch_size``, ``seed`` and ``max_train_minutes`` are the usual ``TrainingArguments`` /
budget fields (SparseAdam, no ``Trainer``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from hf_seq.train_scripts.arguments import (
    LABEL_FIELDS,
    TRANSLATION_FIELDS,
    BudgetArguments,
    RecipeError,
    Task,
    parse_args,
)
from hf_seq.train_scripts.common import describe_data, load_text_splits, training_command
from hf_seq.train_scripts.run_folder import staged_output, write_results
from tokenizers import normalizers, pre_tokenizers
from torch import nn

from hf_seq.toolkit.data import DataError, split_source


@dataclass
class SkipGramArguments(BudgetArguments):
    """Skip-gram sizes and sampling."""

    dim: int = field(default=64, metadata={"help": "vector size"})
    window: int = field(default=5, metadata={"help": "largest distance of a context word (shrunk at random)"})
    negatives: int = field(default=5, metadata={"help": "negative samples per (word, context) pair"})
    min_count: int = field(default=3, metadata={"help": "drop words seen fewer times"})
    subsample: float = field(default=1e-4, metadata={"help": "frequent-word subsampling threshold"})

    def __post_init__(self):
        super().__post_init__()  # the time budget
        for name in ("dim", "window", "negatives", "min_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)!r}")


TASK = Task(
    name="train_word_vectors",
    arguments=SkipGramArguments,
    defaults={
        "text_column_name": "text",
        "output_dir": "runs/word_vectors",
        "learning_rate": 0.003,
        "num_train_epochs": 3,
        "per_device_train_batch_size": 4096,
        "seed": 0,
        "max_train_minutes": 10.0,
    },
    unused=LABEL_FIELDS
    | TRANSLATION_FIELDS
    | frozenset(
        {
            "model_type",
            "model_config",
            "config_overrides",
            "model_name_or_path",
            "tokenizer_name",
            "tokenizer_kind",
            "tokenizer_vocab_size",
            "tokenizer_min_frequency",
            "padding_side",
            "truncation_side",
            "ignore_mismatched_sizes",
            "max_seq_length",
            "validation_file",
            "test_file",
            "validation_split_percentage",
            "max_eval_samples",
            "max_predict_samples",
            "max_train_cpu_minutes",
        }
    ),
    text_files=True,
)


def corpus_sentences(texts, lowercase: bool = True) -> list[list[str]]:
    """Sentences (rows with at least two words), normalised like the word-level tokenizer."""
    lower, split = normalizers.Lowercase(), pre_tokenizers.Whitespace()

    def words(text: str) -> list[str]:
        return [w for w, _ in split.pre_tokenize_str(lower.normalize_str(text) if lowercase else text)]

    sentences = [words(text) for text in texts]
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


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args = parse_args(TASK, argv)
    if training_args.report_to:  # "none" parses to []: a tracker asked for would otherwise see nothing
        raise RecipeError(
            f"`report_to` {training_args.report_to}: train_word_vectors.py trains without a Trainer and reports to no "
            "tracker (its losses go to vectors.json); drop --report_to"
        )
    torch.manual_seed(training_args.seed)
    rng = np.random.default_rng(training_args.seed)
    start = time.monotonic()

    raw = load_text_splits(TASK, data_args, require_validation=False)
    column = data_args.text_column_name
    sentences = corpus_sentences(raw["train"][column], lowercase=model_args.lowercase is not False)
    counts = Counter(w for s in sentences for w in s)
    vocab = [w for w, c in counts.most_common() if c >= args.min_count]
    if len(vocab) < 2:
        common = ", ".join(f"{w!r} {c}" for w, c in counts.most_common(2)) or "no words"
        raise DataError(
            f"{split_source(raw['train'])}: only {len(vocab)} word(s) occur at least `min_count` {args.min_count} "
            f"times (the most frequent: {common}); lower `min_count` or give more text"
        )
    index = {w: i for i, w in enumerate(vocab)}
    freq = np.array([counts[w] for w in vocab], dtype=np.float64)
    ids = [np.array([index[w] for w in s if w in index], dtype=np.int64) for s in sentences]
    total = freq.sum()
    ratio = args.subsample * total / freq
    keep_prob = np.minimum(1.0, np.sqrt(ratio) + ratio)
    noise = torch.tensor(freq**0.75 / (freq**0.75).sum(), dtype=torch.float)
    print(f"{len(sentences)} sentences, {int(total)} tokens, vocabulary {len(vocab)}", flush=True)

    model = SkipGram(len(vocab), args.dim)
    optimizer = torch.optim.SparseAdam(model.parameters(), lr=training_args.learning_rate)
    batch_size = training_args.per_device_train_batch_size
    budget = None if args.max_train_minutes is None else 60 * args.max_train_minutes
    steps, losses = 0, []
    for epoch in range(int(training_args.num_train_epochs)):
        pairs = torch.from_numpy(make_pairs(ids, keep_prob, args.window, rng))
        pairs = pairs[torch.randperm(len(pairs))]
        for batch in pairs.split(batch_size):
            negatives = torch.multinomial(noise, batch.shape[0] * args.negatives, replacement=True)
            loss = model(batch[:, 0], batch[:, 1], negatives.view(batch.shape[0], args.negatives))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            losses.append(loss.item())
            if steps % 500 == 0:
                print(f"epoch {epoch} step {steps} loss {np.mean(losses[-500:]):.4f}", flush=True)
            if budget is not None and time.monotonic() - start > budget:
                break
        if budget is not None and time.monotonic() - start > budget:
            print("time budget reached", flush=True)
            break

    vectors = model.inp.weight.detach().numpy()
    out = Path(training_args.output_dir) / "vectors.txt"
    probe = {}
    normed = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-8)
    for word in ("good", "bad", "funny", "boring", "film"):
        if word in index:
            sims = normed @ normed[index[word]]
            probe[word] = [vocab[i] for i in np.argsort(-sims)[1:6]]
    info = {
        "data": describe_data(data_args, raw, unit="rows"),
        "sentences": len(sentences),
        "tokens": int(total),
        "vocab": len(vocab),
        "steps": steps,
        "final_loss": float(np.mean(losses[-200:])) if losses else None,
        "minutes": (time.monotonic() - start) / 60,
        "nearest": probe,
        "vectors": str(out),
    }
    with staged_output(training_args.output_dir) as folder:  # vectors.txt + vectors.json appear together
        with (folder / "vectors.txt").open("w") as f:
            f.write(f"{len(vocab)} {args.dim}\n")
            for word, vec in zip(vocab, vectors):
                f.write(word + " " + " ".join(f"{v:.5f}" for v in vec) + "\n")
        write_results(folder, info, name="vectors.json", command=training_command(__file__, argv, command_prefix))
    print(info)
    return info


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
