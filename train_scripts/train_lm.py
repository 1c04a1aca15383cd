"""Train a recurrent language model (``RNNForCausalLM``) with ``Trainer``: the notes' char-level text generator on
Shakespeare, a word-level LSTM on the Penn Treebank, or either on your own text.

    python train_scripts/train_lm.py configs/lm_char_shakespeare.json [--max_train_minutes 10 ...]
    python train_scripts/train_lm.py configs/lm_word_ptb.json
    python train_scripts/train_lm.py configs/lm_char_shakespeare.json --train_file my_text.txt \
        --output_dir runs/my_char_lm          # 5% of the lines held out for validation (validation_split_percentage)
    hf-seq-train lm configs/lm_char_shakespeare.json
    accelerate launch train_scripts/train_lm.py configs/lm_char_shakespeare.json

Data: ``--dataset_name`` (the presets ``hf_seq/shakespeare``, ``hf_seq/ptb``; a folder; a ``datasets`` name) or
``--train_file`` / ``--validation_file`` / ``--test_file`` (txt: one row per line, line breaks kept; or csv, json, jsonl,
parquet with ``--text_column_name``, default ``text``). Each split becomes one long token stream: characters in order
(``level`` "char", the texts concatenated as they are) or words with ``<eos>`` closing every row (``level`` "word").
The training stream is cut into the notes' (segment, next token) windows with ``segment_length`` and ``stride``
(:class:`hf_seq.collators.LMWindowDataset`); the model is trained on the next token at every position of a window.
The tokenizer is ``--tokenizer_name``'s or ``--model_name_or_path``'s, otherwise built on the training split (all
characters; or the words, ``tokenizer_vocab_size`` most frequent, the rest ``<unk>``).

Evaluation (validation during training on at most ``max_eval_tokens`` tokens; at the end the full validation and test
splits): mean next-token cross-entropy in nats per token, reported as nats/char (and bits/char) for characters and as
perplexity ``exp(loss)`` for words. Two protocols are written to ``results.json``: ``*_carried`` reads the split as
``eval_streams`` contiguous streams in windows of ``segment_length`` tokens and carries the recurrent state (the
generation cache) from window to window (the usual PTB protocol, Zaremba et al. 2014); ``*_windows`` resets the
state at every window (every token sees at most ``segment_length`` tokens of context). The headline numbers are the
carried ones (the self-attention LSTM is evaluated per window: its tape would span the whole split). Samples at
``sample_temperatures`` from ``sample_prompt`` are written to ``samples.txt``. The model and tokenizer are saved to
``output_dir`` (``pipeline("text-generation", model=output_dir)`` works).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from hf_seq.train_scripts.arguments import BudgetArguments, Task, parse_args
from hf_seq.train_scripts.common import (
    TimeBudgetCallback,
    cap_splits,
    describe_data,
    load_or_build_model,
    load_task_data,
    load_tokenizer,
    require_columns,
    require_text,
    run_training,
    save_run,
    start_run,
    training_command,
    use_cpu_processes_without_gpu,
)
from hf_seq.train_scripts.trainer import HfSeqTrainer
from torch.utils.data import Subset
from transformers import set_seed

from hf_seq.collators import LMWindowDataset
from hf_seq.compat import output_cache
from hf_seq.modeling_rnn import RNNForCausalLM
from hf_seq.tokenization import build_char_tokenizer, build_word_level_tokenizer

LEVELS = ("char", "word")


@dataclass
class LMArguments(BudgetArguments):
    """Tokenization level, windows, evaluation and samples."""

    level: str = field(default="char", metadata={"help": '"char" | "word"'})
    segment_length: int = field(default=128, metadata={"help": "tokens per training window (the notes' segment)"})
    stride: int | None = field(default=None, metadata={"help": "tokens between window starts (default segment)"})
    max_train_tokens: int | None = field(default=None, metadata={"help": "use only the first N training tokens"})
    max_eval_tokens: int | None = field(default=100_000, metadata={"help": "validation tokens for periodic eval"})
    final_eval_max_tokens: int | None = field(default=None, metadata={"help": "cap the final evaluations (None: all)"})
    eval_streams: int = field(default=10, metadata={"help": "parallel streams of the carried-state evaluation"})
    eval_carried: bool = field(default=True, metadata={"help": "evaluate carrying the state across windows"})
    eval_windows: bool = field(default=True, metadata={"help": "evaluate with the state reset per window"})
    sample_prompt: str = field(default="ROMEO:\n", metadata={"help": "seed text of the samples"})
    sample_temperatures: list[float] = field(
        default_factory=lambda: [0.2, 0.5, 1.0, 1.2], metadata={"help": "sampling temperatures"}
    )
    sample_length: int = field(default=300, metadata={"help": "new tokens per sample"})
    sample_seed: int = field(default=0, metadata={"help": "torch seed of each sample"})

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"`level` must be one of {list(LEVELS)}, got {self.level!r}")
        for name in ("segment_length", "eval_streams", "sample_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)}")
        if any(t <= 0 for t in self.sample_temperatures):
            raise ValueError(f"`sample_temperatures` must be positive numbers, got {self.sample_temperatures}")


TASK = Task(
    name="train_lm",
    arguments=LMArguments,
    defaults={"model_type": "hf_seq_rnn", "text_column_name": "text"},
    unused=frozenset(
        {
            "label_column_name",
            "tokens_column_name",
            "tags_column_name",
            "source_lang",
            "target_lang",
            "max_seq_length",
            "max_source_length",
            "max_target_length",
            "tokenizer_kind",
            "padding_side",
            "truncation_side",
        }
    ),
    text_files=True,
    tokenizer_kinds=LEVELS,
    model_head="AutoModelForCausalLM",
    # the notes' one-hot input: each token is its vocabulary-wide one-hot vector
    derived_config=lambda values, vocab_size, data: (
        {"embedding_size": vocab_size} if values.get("input_encoding") == "one_hot" else {}
    ),
)


# ------------------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------------------


def build_tokenizer(args: LMArguments, train_texts: list[str], model_args=None):
    """Char tokenizer ([PAD], [UNK] + every character) or word tokenizer (<pad>, <unk>, <eos> + the words)."""
    vocab_size = model_args.tokenizer_vocab_size if model_args is not None else None
    lowercase = bool(model_args.lowercase) if model_args is not None else False
    if args.level == "char":
        return build_char_tokenizer(train_texts, lowercase=lowercase, padding_side="left")
    min_frequency = (model_args.tokenizer_min_frequency if model_args is not None else None) or 1
    return build_word_level_tokenizer(
        train_texts,
        max_vocab_size=vocab_size,
        min_frequency=min_frequency,
        lowercase=lowercase,
        special_tokens=("<pad>", "<unk>", "<eos>"),
        unk_token="<unk>",
        pad_token="<pad>",
        eos_token="<eos>",
        pre_tokenizer="whitespace",
        padding_side="left",
    )


def token_stream(texts: list[str], tokenizer, level: str) -> torch.Tensor:
    """One long (N,) stream: characters of the texts in order, or words with ``<eos>`` closing every text.

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
            cache = output_cache(out)  # output.cache from transformers 5.24 on, past_key_values before
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


def loss_report(prefix: str, loss: float, count: int, level: str) -> dict[str, float]:
    """nats (and bits) per char for characters, perplexity for words."""
    report = {f"{prefix}_loss_nats": round(loss, 4), f"{prefix}_tokens": count}
    if level == "char":
        report[f"{prefix}_bits_per_char"] = round(loss / math.log(2), 4)
    report[f"{prefix}_perplexity"] = round(math.exp(loss), 2)
    return report


def sample_texts(model: RNNForCausalLM, tokenizer, data: LMArguments) -> tuple[str, dict[str, str]]:
    """Sample ``sample_length`` tokens at each temperature from the fixed prompt (seeded): (samples.txt, samples)."""
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
    return "".join(lines), samples


# ------------------------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, args, training_args = parse_args(TASK, argv)
    previous = start_run(training_args)
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    set_seed(training_args.seed)
    training_args.prediction_loss_only = True  # full-vocabulary logits of the whole eval set are never needed
    command = training_command(__file__, argv)

    column = data_args.text_column_name
    raw = load_task_data(TASK, data_args)
    require_columns(raw, {"text_column_name": column})
    require_text(raw, column, "text_column_name")
    raw = cap_splits(raw, data_args)
    texts = {name: list(split[column]) for name, split in raw.items()}
    tokenizer = load_tokenizer(model_args) or build_tokenizer(args, texts["train"], model_args)
    if args.level == "word" and tokenizer.eos_token_id is None:
        raise ValueError(
            f"`level` word closes every text with the tokenizer's eos token; {model_args.tokenizer_name or model_args.model_name_or_path} has none"
        )
    streams = {name: token_stream(split, tokenizer, args.level) for name, split in texts.items()}
    if args.max_train_tokens is not None:
        streams["train"] = streams["train"][: args.max_train_tokens]
    train_set = LMWindowDataset(streams["train"], args.segment_length, args.stride)
    eval_tokens = streams["validation"][: args.max_eval_tokens] if args.max_eval_tokens else streams["validation"]
    eval_set = LMWindowDataset(eval_tokens, args.segment_length)

    model = load_or_build_model(
        TASK, model_args, data_args, tokenizer, {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    )
    config = model.config
    num_params = sum(p.numel() for p in model.parameters())
    print(
        f"vocabulary {len(tokenizer)}, {num_params:,} parameters, {len(train_set):,} training windows of "
        f"{args.segment_length}+1 tokens (stride {train_set.stride}), {streams['train'].numel():,} training tokens"
    )

    budget = TimeBudgetCallback(args.max_train_minutes, args.max_train_cpu_minutes)
    trainer = HfSeqTrainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=Subset(eval_set, range(len(eval_set))),
        processing_class=tokenizer,
        callbacks=[budget],
    )
    start, cpu_start = time.monotonic(), time.process_time()
    train_output = run_training(trainer, training_args)
    train_minutes = (time.monotonic() - start) / 60.0
    train_cpu_minutes = (time.process_time() - cpu_start) / 60.0

    data_line = describe_data(data_args, raw, unit="texts")
    results: dict = {
        "data": data_line,
        "level": args.level,
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
        "model_name_or_path": model_args.model_name_or_path,
        "parameters": num_params,
        "train_minutes": round(train_minutes, 2),
        "train_cpu_minutes": round(train_cpu_minutes, 2),
        "train_steps": train_output.global_step,
        "stopped_by_time_budget": budget.stopped_by_budget,
        "train_loss": round(train_output.training_loss, 4),
        "train_tokens_seen": train_output.global_step
        * training_args.per_device_train_batch_size
        * max(1, training_args.world_size)
        * args.segment_length,
        "train_tokens_available": streams["train"].numel(),
        "torch_threads": torch.get_num_threads(),
    }
    results["epochs"] = round(results["train_tokens_seen"] / max(1, streams["train"].numel()), 3)
    # every process evaluates (the same numbers), so none waits alone at the final save's barrier
    eval_start = time.monotonic()
    for split in ("validation", "test"):
        if split not in streams:
            continue
        tokens = streams[split]
        if args.final_eval_max_tokens is not None:
            tokens = tokens[: args.final_eval_max_tokens]
        if args.eval_carried:  # (the self-attention LSTM's tape would grow over the whole split: use windows)
            loss, count = evaluate_stream(model, tokens, args.segment_length, args.eval_streams, carry_state=True)
            results.update(loss_report(f"{split}_carried", loss, count, args.level))
        if args.eval_windows:
            loss, count = evaluate_stream(model, tokens, args.segment_length, args.eval_streams, carry_state=False)
            results.update(loss_report(f"{split}_windows", loss, count, args.level))
    results["eval_minutes"] = round((time.monotonic() - eval_start) / 60.0, 2)
    samples_text, results["samples"] = sample_texts(model, tokenizer, args)

    headline = "carried" if args.eval_carried else "windows"
    metric = "bits_per_char" if args.level == "char" else "perplexity"
    tokens = {name: int(stream.numel()) for name, stream in streams.items()}
    evaluated = (
        ""
        if args.final_eval_max_tokens is None
        else f" (final evaluation on the first {args.final_eval_max_tokens:,} tokens)"
    )
    source = (
        f"from `{model_args.tokenizer_name or model_args.model_name_or_path}`"
        if (model_args.tokenizer_name or model_args.model_name_or_path)
        else "built on the training split"
    )
    save_run(
        trainer,
        training_args.output_dir,
        results,
        command,
        files={"samples.txt": samples_text},
        card={
            "dataset": f"{data_line}; {' / '.join(f'{n:,}' for n in tokens.values())} {' / '.join(tokens)} "
            f"{args.level} tokens{evaluated}; {args.level}-level tokenizer {source}, {len(tokenizer)} tokens; training "
            f"windows of {args.segment_length}+1 tokens.",
            "metrics": {
                k: results[k] for k in results if k.startswith(("validation", "test")) and not k.endswith("tokens")
            }
            | {
                "train_steps": results["train_steps"],
                "train_loss": results["train_loss"],
                "epochs": results["epochs"],
                "train_minutes": results["train_minutes"],
                "processes": training_args.world_size,
            },
            "intended_use": f"{args.level.capitalize()}-level next-token prediction and sampling "
            '(`pipeline("text-generation")`) on text like its training data: a small teaching model of recurrent '
            f"language modelling (headline metric: test {metric}, state {headline} across windows), not a "
            "general-purpose text generator.",
            "limitations": "Trained on one small corpus with a closed vocabulary "
            + (
                "(characters unseen in training map to [UNK])"
                if args.level == "char"
                else "(unknown words map to <unk>)"
            )
            + f"; context is learned from {args.segment_length}-token windows, so long-range coherence is weak and "
            "samples drift into fluent-looking nonsense; it reproduces the style (and biases) of its training text.",
        },
    )
    if trainer.is_world_process_zero():
        print(f"results -> {os.path.join(training_args.output_dir, 'results.json')}")
        for key in sorted(results):
            if key.startswith(("validation", "test")) and not key.endswith("tokens"):
                print(f"  {key}: {results[key]}")
    return results


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
