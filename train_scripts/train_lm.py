"""Train a recurrent language model (``RNNForCausalLM``) with ``Trainer``: the notes' char-level text generator on
Shakespeare, or a word-level LSTM on the Penn Treebank.

    python train_scripts/train_lm.py configs/lm_char_shakespeare.json [--max_train_minutes 10 ...]
    python train_scripts/train_lm.py configs/lm_word_ptb.json
    accelerate launch train_scripts/train_lm.py configs/lm_char_shakespeare.json

Data: the corpus is tokenized (char tokenizer built on the training works / word-level tokenizer built on the PTB
training text with its own ``<unk>`` kept and ``<eos>`` closing every line) into one long token stream per split, and
the training stream is cut into the notes' (segment, next token) windows with ``segment_length`` and ``stride``
(:class:`hf_seq.collators.LMWindowDataset`); the model is trained on the next token at every position of a window.

Evaluation (validation during training on at most ``max_eval_tokens`` tokens; at the end the full validation and test
splits): mean next-token cross-entropy in nats per token, reported as nats/char (and bits/char) for characters and as
perplexity ``exp(loss)`` for words. Two protocols are written to ``results.json``: ``*_carried`` reads the split as
``eval_streams`` contiguous streams in windows of ``segment_length`` tokens and carries the recurrent state (the
generation cache) from window to window (the usual PTB protocol, Zaremba et al. 2014); ``*_windows`` resets the
state at every window (every token sees at most ``segment_length`` tokens of context). The headline numbers are the
carried ones (the self-attention LSTM is evaluated per window: its tape would span the whole split). Samples at ``sample_temperatures`` from ``sample_prompt`` are written to ``samples.txt``.
The model and tokenizer are saved to ``output_dir`` (``pipeline("text-generation", model=output_dir)`` works).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from common import (
    TimeBudgetCallback,
    parse_recipe_args,
    resolve_resume_checkpoint,
    save_final_model,
    training_command,
    use_cpu_processes_without_gpu,
    write_results,
)
from torch.utils.data import Subset
from transformers import Trainer, TrainingArguments, set_seed

from hf_seq.collators import LMWindowDataset
from hf_seq.configuration_rnn import RNNConfig
from hf_seq.model_card import write_model_card
from hf_seq.modeling_rnn import RNNForCausalLM
from hf_seq.tokenization import build_char_tokenizer, build_word_level_tokenizer

CORPORA = ("shakespeare", "ptb", "text")
LEVELS = ("char", "word")


@dataclass
class ModelArguments:
    """Fields of :class:`hf_seq.RNNConfig` used by the language model (see its docstring)."""

    cell: str = field(default="lstm", metadata={"help": '"rnn" | "lstm" | "gru" | "self_attention_lstm"'})
    input_encoding: str = field(default="embedding", metadata={"help": '"embedding" | "one_hot" (the notes)'})
    embedding_size: int = field(default=64, metadata={"help": "embedding size (one_hot: set to the vocabulary)"})
    hidden_size: int = field(default=256, metadata={"help": "recurrent state size"})
    num_layers: int = field(default=1, metadata={"help": "stacked recurrent layers"})
    dropout: float = field(default=0.0, metadata={"help": "dropout between layers and before the output layer"})
    embedding_dropout: float = field(default=0.0, metadata={"help": "dropout on the input vectors"})
    tie_word_embeddings: bool = field(default=False, metadata={"help": "share the output matrix with the embedding"})
    implementation: str = field(default="fused", metadata={"help": '"fused" (torch.nn) | "cell" (explicit steps)'})
    initializer_range: float = field(default=0.1, metadata={"help": "std of embedding / output layer init"})


@dataclass
class DataArguments:
    """Corpus, tokenization, windows, evaluation, samples and the time budget."""

    corpus: str = field(default="shakespeare", metadata={"help": '"shakespeare" | "ptb" | "text" (own files)'})
    level: str = field(default="char", metadata={"help": '"char" | "word"'})
    train_file: str | None = field(default=None, metadata={"help": 'corpus "text": training text file'})
    validation_file: str | None = field(default=None, metadata={"help": 'corpus "text": validation text file'})
    test_file: str | None = field(default=None, metadata={"help": 'corpus "text": test text file'})
    max_vocab_size: int | None = field(default=None, metadata={"help": "word level: keep the most frequent words"})
    segment_length: int = field(default=128, metadata={"help": "tokens per training window (the notes' segment)"})
    stride: int | None = field(default=None, metadata={"help": "tokens between window starts (default segment)"})
    max_train_tokens: int | None = field(default=None, metadata={"help": "use only the first N training tokens"})
    max_eval_tokens: int | None = field(default=100_000, metadata={"help": "validation tokens for periodic eval"})
    final_eval_max_tokens: int | None = field(default=None, metadata={"help": "cap the final evaluations (None: all)"})
    eval_streams: int = field(default=10, metadata={"help": "parallel streams of the carried-state evaluation"})
    eval_carried: bool = field(default=True, metadata={"help": "evaluate carrying the state across windows"})
    eval_windows: bool = field(default=True, metadata={"help": "evaluate with the state reset per window"})
    max_train_minutes: float | None = field(default=None, metadata={"help": "stop training after this many minutes"})
    max_train_cpu_minutes: float | None = field(
        default=None,
        metadata={
            "help": "stop after this much CPU time of this process (= core-minutes; robust to a "
            "machine shared with other jobs)"
        },
    )
    sample_prompt: str = field(default="ROMEO:\n", metadata={"help": "seed text of the samples"})
    sample_temperatures: list[float] = field(
        default_factory=lambda: [0.2, 0.5, 1.0, 1.2], metadata={"help": "sampling temperatures"}
    )
    sample_length: int = field(default=300, metadata={"help": "new tokens per sample"})
    sample_seed: int = field(default=0, metadata={"help": "torch seed of each sample"})


# ------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------


def load_texts(data: DataArguments) -> dict[str, list[str]]:
    """Split name -> list of texts (Shakespeare: one per work; PTB: one per line; own files: one per line)."""
    if data.corpus not in CORPORA:
        raise ValueError(f"`corpus` must be one of {list(CORPORA)}, got {data.corpus!r}")
    if data.corpus == "shakespeare":
        from hf_seq.data import load_shakespeare

        splits = load_shakespeare()
        return {name: list(splits[name]["text"]) for name in ("train", "validation", "test")}
    if data.corpus == "ptb":
        from hf_seq.data import load_ptb

        splits = load_ptb()
        return {name: list(splits[name]["text"]) for name in ("train", "validation", "test")}
    files = {"train": data.train_file, "validation": data.validation_file, "test": data.test_file}
    missing = [f"{name}_file" for name, path in files.items() if not path]
    if missing:
        raise ValueError(f'corpus "text" needs {missing}')
    return {
        name: Path(path).read_text(encoding="utf-8").splitlines(keepends=data.level == "char")
        for name, path in files.items()
    }


def build_tokenizer(data: DataArguments, train_texts: list[str]):
    """Char tokenizer ([PAD], [UNK] + every character) or word tokenizer (<pad>, <unk>, <eos> + the words)."""
    if data.level not in LEVELS:
        raise ValueError(f"`level` must be one of {list(LEVELS)}, got {data.level!r}")
    if data.level == "char":
        return build_char_tokenizer(train_texts, padding_side="left")
    return build_word_level_tokenizer(
        train_texts,
        max_vocab_size=data.max_vocab_size,
        lowercase=False,
        special_tokens=("<pad>", "<unk>", "<eos>"),
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<eos>",
        pre_tokenizer="whitespace",
        padding_side="left",
    )


def token_stream(texts: list[str], tokenizer, level: str) -> torch.Tensor:
    """One long (N,) stream: characters of the texts in order, or words with ``<eos>`` closing every line.

    Characters are looked up in the char tokenizer's vocabulary directly (the same ids as ``tokenizer(text)`` for a
    tokenizer without normaliser, and ~50x faster on megabytes of text).
    """
    if level == "char" and tokenizer.backend_tokenizer.normalizer is None:
        vocab, unk = tokenizer.get_vocab(), tokenizer.unk_token_id
        return torch.tensor([vocab.get(ch, unk) for text in texts for ch in text], dtype=torch.long)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    if level == "word":
        eos = tokenizer.eos_token_id
        encoded = [ids + [eos] for ids in encoded]
    return torch.tensor([i for ids in encoded for i in ids], dtype=torch.long)


# ------------------------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_stream(
    model: RNNForCausalLM,
    tokens: torch.Tensor,
    segment_length: int,
    streams: int,
    carry_state: bool,
    batch_size: int = 32,
) -> tuple[float, int]:
    """Mean next-token loss (nats/token) over ``tokens`` and the number of predicted tokens.

    ``carry_state``: the stream is cut into ``streams`` contiguous parts read side by side in windows of
    ``segment_length``, the recurrent state (``output.cache``) carried from each window to the next. Otherwise
    non-overlapping windows of ``segment_length + 1`` tokens are scored independently (state reset per window).
    """
    model.eval()
    device = model.device
    total, count = 0.0, 0
    if carry_state:
        length = (tokens.numel() - 1) // streams
        inputs = tokens[: streams * length].view(streams, length).to(device)  # (S, N/S)
        targets = tokens[1 : streams * length + 1].view(streams, length).to(device)
        cache = None
        for start in range(0, length, segment_length):
            out = model(inputs[:, start : start + segment_length], cache=cache, use_cache=True)
            cache = out.cache
            logits = out.logits  # (S, L, V)
            total += float(
                F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    targets[:, start : start + segment_length].reshape(-1),
                    reduction="sum",
                )
            )
            count += targets[:, start : start + segment_length].numel()
        return total / count, count
    windows = LMWindowDataset(tokens, segment_length, segment_length)
    for start in range(0, len(windows), batch_size):
        batch = torch.stack([windows[i]["input_ids"] for i in range(start, min(start + batch_size, len(windows)))])
        batch = batch.to(device)
        logits = model(batch, use_cache=False).logits[:, :-1]  # (B, L, V)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"))
        count += batch[:, 1:].numel()
    return total / count, count


CORPUS_NAMES = {
    "shakespeare": "the works of Shakespeare (`hf_seq.data.load_shakespeare()`, one text per work)",
    "ptb": "the Penn Treebank language-modelling text (`hf_seq.data.load_ptb()`, Mikolov's preprocessed version)",
}


def dataset_description(data: DataArguments, streams: dict[str, torch.Tensor], vocab_size: int) -> str:
    """The model card's training-data line: corpus, splits (tokens used) and tokenizer."""
    corpus = CORPUS_NAMES.get(
        data.corpus, f"own text files ({data.train_file}, {data.validation_file}, {data.test_file})"
    )
    tokens = {name: int(stream.numel()) for name, stream in streams.items()}
    evaluated = (
        ""
        if data.final_eval_max_tokens is None
        else f" (final evaluation on the first {data.final_eval_max_tokens:,} tokens)"
    )
    return (
        f"{corpus}; train / validation / test splits of {tokens['train']:,} / {tokens['validation']:,} / "
        f"{tokens['test']:,} {data.level} tokens{evaluated}; {data.level}-level tokenizer built on the training split, "
        f"{vocab_size} tokens; training windows of {data.segment_length}+1 tokens."
    )


def loss_report(prefix: str, loss: float, count: int, level: str) -> dict[str, float]:
    """nats (and bits) per char for characters, perplexity for words."""
    report = {f"{prefix}_loss_nats": round(loss, 4), f"{prefix}_tokens": count}
    if level == "char":
        report[f"{prefix}_bits_per_char"] = round(loss / math.log(2), 4)
    report[f"{prefix}_perplexity"] = round(math.exp(loss), 2)
    return report


def write_samples(model: RNNForCausalLM, tokenizer, data: DataArguments, path: Path) -> dict[str, str]:
    """Sample ``sample_length`` tokens at each temperature from the fixed prompt (seeded); write them to ``path``."""
    model.eval()
    inputs = tokenizer(data.sample_prompt, return_tensors="pt", add_special_tokens=False).to(model.device)
    samples = {}
    for temperature in data.sample_temperatures:
        torch.manual_seed(data.sample_seed)
        ids = model.generate(
            **inputs,
            do_sample=True,
            temperature=temperature,
            top_k=0,
            max_new_tokens=data.sample_length,
            pad_token_id=tokenizer.pad_token_id,
        )
        text = tokenizer.decode(ids[0], skip_special_tokens=data.level == "char")
        samples[str(temperature)] = text
    lines = [f"# prompt {data.sample_prompt!r}, {data.sample_length} new tokens, seed {data.sample_seed}\n"]
    for temperature, text in samples.items():
        lines.append(f"\n===== temperature {temperature} =====\n{text}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return samples


# ------------------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data, training_args = parse_recipe_args((ModelArguments, DataArguments, TrainingArguments), argv)
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    set_seed(training_args.seed)
    training_args.prediction_loss_only = True  # full-vocabulary logits of the whole eval set are never needed

    texts = load_texts(data)
    tokenizer = build_tokenizer(data, texts["train"])
    streams = {name: token_stream(split, tokenizer, data.level) for name, split in texts.items()}
    if data.max_train_tokens is not None:
        streams["train"] = streams["train"][: data.max_train_tokens]
    train_set = LMWindowDataset(streams["train"], data.segment_length, data.stride)
    eval_tokens = streams["validation"][: data.max_eval_tokens] if data.max_eval_tokens else streams["validation"]
    eval_set = LMWindowDataset(eval_tokens, data.segment_length)

    model_kwargs = asdict(model_args)
    if model_args.input_encoding == "one_hot":
        model_kwargs["embedding_size"] = len(tokenizer)  # the notes: a V-wide one-hot vector per character
    config = RNNConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **model_kwargs)
    model = RNNForCausalLM(config)
    num_params = sum(p.numel() for p in model.parameters())
    print(
        f"vocabulary {len(tokenizer)}, {num_params:,} parameters, {len(train_set):,} training windows of "
        f"{data.segment_length}+1 tokens (stride {train_set.stride}), {streams['train'].numel():,} training tokens"
    )

    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=Subset(eval_set, range(len(eval_set))),
        processing_class=tokenizer,
        callbacks=[TimeBudgetCallback(data.max_train_minutes, data.max_train_cpu_minutes)],
    )
    start, cpu_start = time.monotonic(), time.process_time()
    train_output = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
    train_minutes = (time.monotonic() - start) / 60.0
    train_cpu_minutes = (time.process_time() - cpu_start) / 60.0

    results: dict = {
        "corpus": data.corpus,
        "level": data.level,
        "model": {
            k: v
            for k, v in config.to_dict().items()
            if k
            in (
                "cell",
                "input_encoding",
                "embedding_size",
                "hidden_size",
                "num_layers",
                "dropout",
                "embedding_dropout",
                "tie_word_embeddings",
                "vocab_size",
            )
        },
        "parameters": num_params,
        "train_minutes": round(train_minutes, 2),
        "train_cpu_minutes": round(train_cpu_minutes, 2),
        "train_steps": train_output.global_step,
        "train_loss": round(train_output.training_loss, 4),
        "train_tokens_seen": train_output.global_step
        * training_args.per_device_train_batch_size
        * max(1, training_args.world_size)
        * data.segment_length,
        "train_tokens_available": streams["train"].numel(),
        "torch_threads": torch.get_num_threads(),
    }
    results["epochs"] = round(results["train_tokens_seen"] / max(1, streams["train"].numel()), 3)
    output_dir = Path(training_args.output_dir)
    save_final_model(trainer, output_dir)  # model + tokenizer + code for trust_remote_code, atomic; every rank calls
    if trainer.is_world_process_zero():
        eval_start = time.monotonic()
        for split in ("validation", "test"):
            tokens = streams[split]
            if data.final_eval_max_tokens is not None:
                tokens = tokens[: data.final_eval_max_tokens]
            if data.eval_carried:  # (the self-attention LSTM's tape would grow over the whole split: use windows)
                loss, count = evaluate_stream(model, tokens, data.segment_length, data.eval_streams, carry_state=True)
                results.update(loss_report(f"{split}_carried", loss, count, data.level))
            if data.eval_windows:
                loss, count = evaluate_stream(model, tokens, data.segment_length, data.eval_streams, carry_state=False)
                results.update(loss_report(f"{split}_windows", loss, count, data.level))
        results["eval_minutes"] = round((time.monotonic() - eval_start) / 60.0, 2)
        results["samples"] = write_samples(model, tokenizer, data, output_dir / "samples.txt")
        command = training_command(__file__, argv)
        path = write_results(output_dir, results, command=command)
        headline = "carried" if data.eval_carried else "windows"
        metric = "bits_per_char" if data.level == "char" else "perplexity"
        write_model_card(
            output_dir,
            trainer.model,
            dataset=dataset_description(data, streams, len(tokenizer)),
            metrics={
                k: results[k] for k in results if k.startswith(("validation", "test")) and not k.endswith("tokens")
            }
            | {
                "train_steps": results["train_steps"],
                "train_loss": results["train_loss"],
                "epochs": results["epochs"],
                "train_minutes": results["train_minutes"],
                "processes": training_args.world_size,
            },
            command=command,
            intended_use=f"{data.level.capitalize()}-level next-token prediction and sampling "
            f'(`pipeline("text-generation")`) on {CORPUS_NAMES.get(data.corpus, "the training text")}: a small '
            f"teaching model of recurrent language modelling (headline metric: test {metric}, state {headline} "
            "across windows), not a general-purpose text generator.",
            limitations="Trained on one small corpus with a closed vocabulary "
            + (
                "(characters unseen in training map to [UNK])"
                if data.level == "char"
                else "(unknown words map to <unk>)"
            )
            + f"; context is learned from {data.segment_length}-token windows, so long-range coherence is weak and "
            "samples drift into fluent-looking nonsense; it reproduces the style (and biases) of its training text.",
        )
        print(f"results -> {path}")
        for key in sorted(results):
            if key.startswith(("validation", "test")) and not key.endswith("tokens"):
                print(f"  {key}: {results[key]}")
    return results


if __name__ == "__main__":
    main()
