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
(:class:`hf_seq.toolkit.collators.LMWindowDataset`); the model is trained on the next token at every position of a window.
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

import copy
import dataclasses
import itertools
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from hf_seq.train_scripts.arguments import (
    LABEL_FIELDS,
    TRANSLATION_FIELDS,
    BudgetArguments,
    PreprocessingArguments,
    RecipeError,
    Task,
)
from hf_seq.train_scripts.checks import check_test_engine
from hf_seq.train_scripts.common import (
    StepTimesCallback,
    describe_data,
    load_or_build_model,
    load_text_splits,
    load_tokenizer,
    tokenizer_source,
)
from hf_seq.train_scripts.features import (
    ColumnTexts,
    cached_token_stores,
    check_holdout_percentage,
    check_text_stream,
    dataset_cache_key,
    describe_sizes,
    held_out_rows,
    repeated_passes,
    repeated_stream,
    shuffle_buffered,
    split_by_node_setup,
    split_stream_by_node,
    stream_file,
    text_file_keys,
    text_read_errors,
)
from hf_seq.train_scripts.run_folder import run_training, save_run
from hf_seq.train_scripts.skeleton import (
    after_training,
    budgeted_trainer,
    env_threads,
    finish_script_run,
    parse_script_args,
    start_script_run,
)
from hf_seq.train_scripts.trainer import HfSeqTrainer
from torch.utils.data import Subset

from hf_seq.compat import output_cache
from hf_seq.modeling_rnn import RNNForCausalLM
from hf_seq.toolkit.collators import LMWindowDataset, stream_slice
from hf_seq.toolkit.data import DataError
from hf_seq.toolkit.preprocessing import (
    TokenStore,
    count_text_file_lines,
    iter_text_file_lines,
    make_encoder,
    read_meta,
    select_rows,
    tokenize_dataset,
    tokenize_text_file,
    tokenizer_fingerprint,
)
from hf_seq.toolkit.tokenization import build_char_tokenizer, build_word_level_tokenizer

LEVELS = ("char", "word")


TEST_ENGINES = ("pytorch", "onnxruntime")


@dataclass
class LMArguments(PreprocessingArguments, BudgetArguments):
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
        default_factory=lambda: [0.2, 0.5, 1.0, 1.2],
        metadata={"help": "sampling temperatures"},
    )
    sample_length: int = field(default=300, metadata={"help": "new tokens per sample"})
    sample_seed: int = field(default=0, metadata={"help": "torch seed of each sample"})
    test_engine: str = field(
        default="pytorch",
        metadata={
            "help": '"pytorch" or "onnxruntime": the final evaluation and the samples by the model exported to ONNX '
            "Runtime (generate() over the exported graph; written into <output_dir>/onnxruntime; needs onnx, "
            "onnxscript and onnxruntime: a run without them is refused before the first step).",
        },
    )
    test_onnxruntime_quantization: str | None = field(
        default=None,
        metadata={"help": "int8: ONNX Runtime dynamic quantization of that export (default float32)."},
    )

    def __post_init__(self):
        super().__post_init__()  # the preprocessing fields and the time budgets
        if self.level not in LEVELS:
            raise ValueError(f"`level` must be one of {list(LEVELS)}, got {self.level!r}")
        for name in ("segment_length", "eval_streams", "sample_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {getattr(self, name)!r}")
        if not all(0 < t < math.inf for t in self.sample_temperatures):
            raise ValueError(f"`sample_temperatures` must be positive numbers, got {self.sample_temperatures!r}")
        check_test_engine(self, TEST_ENGINES)


TASK = Task(
    name="train_lm",
    arguments=LMArguments,
    defaults={"model_type": "hf_seq_rnn", "text_column_name": "text"},
    unused=LABEL_FIELDS | TRANSLATION_FIELDS | {"max_seq_length", "tokenizer_kind", "padding_side", "truncation_side"},
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


def _text_files_only(data_args) -> bool:
    """Data given as .txt files only: read by :mod:`hf_seq.toolkit.preprocessing` itself (no Arrow copy of the text)."""
    files = [data_args.train_file, data_args.validation_file, data_args.test_file]
    return (
        not data_args.dataset_name
        and bool(data_args.train_file)
        and all(f is None or Path(f).suffix.lower() == ".txt" for f in files)
    )


def _capped_rows(keep: np.ndarray, cap: int | None) -> np.ndarray:
    """``keep`` with only its first ``cap`` True rows left True."""
    if cap is not None:
        keep = keep.copy()
        keep[np.flatnonzero(keep)[cap:]] = False
    return keep


def _rows_of_file(path: str, keep: np.ndarray | None, limit: int | None):
    """The lines of ``path`` where ``keep`` is true (all without it), at most ``limit`` of them."""
    row, given = 0, 0
    for lines in iter_text_file_lines(path):
        for line in lines:
            if keep is None or keep[row]:
                if limit is not None and given >= limit:
                    return
                yield line
                given += 1
            row += 1


def check_eos(args: LMArguments, model_args, tokenizer) -> None:
    """``RecipeError`` for a word-level run whose tokenizer has no eos token (it closes every text)."""
    if args.level == "word" and tokenizer.eos_token_id is None:
        raise RecipeError(
            f"`level` word closes every text with the tokenizer's eos token; "
            f"{model_args.tokenizer_name or model_args.model_name_or_path} has none"
        )


@dataclass
class LMData:
    """The tokenizer and the token streams of every split (memory-mapped), from the preprocessing cache."""

    tokenizer: object
    stores: dict
    data_line: str
    folder: Path
    reused: bool

    @property
    def streams(self) -> dict:
        return {name: store.flat for name, store in self.stores.items()}


def lm_cache_key(args: LMArguments, model_args, data_args, given, data_key: dict) -> dict:
    """The preprocessing cache's key of a run: the data (``data_key``), the level, how the splits are drawn and
    capped, and the tokenizer (``given``'s fingerprint, or the settings of the one built)."""
    split_key = {
        "validation_split_percentage": data_args.validation_split_percentage,
        "split_seed": data_args.split_seed,
        "max_train_samples": data_args.max_train_samples,
        "max_eval_samples": data_args.max_eval_samples,
        "max_predict_samples": data_args.max_predict_samples,
    }
    if given is not None:
        tokenizer_key = {"fingerprint": tokenizer_fingerprint(given)}
    else:
        tokenizer_key = {
            "built": "train_lm.build_tokenizer v1",
            "vocab_size": model_args.tokenizer_vocab_size,
            "min_frequency": model_args.tokenizer_min_frequency,
            "lowercase": model_args.lowercase,
            "max_train_lines": args.tokenizer_max_train_lines,
        }
    return {"task": "train_lm", "level": args.level, "data": data_key, "split": split_key, "tokenizer": tokenizer_key}


def _text_file_selections(files: dict, data_args) -> tuple[dict, np.ndarray | None]:
    """``{split: (the split whose file it reads, the rows it keeps)}`` of .txt files: without a validation file the
    seeded ``validation_split_percentage`` % of the training lines (the held-out mask, also returned; else None),
    then the ``max_*_samples`` caps."""
    rows = {}
    for split, path in files.items():
        with text_read_errors(path, f"{split}_file"):
            rows[split] = count_text_file_lines(path)
    keep = {split: np.ones(n, dtype=bool) for split, n in rows.items()}
    held_out = None
    if "validation" not in files:
        check_holdout_percentage(files["train"], data_args.validation_split_percentage)
        held_out = held_out_rows(
            files["train"], rows["train"], data_args.validation_split_percentage, data_args.split_seed
        )
        keep["train"] = ~held_out
    selections = {"train": ("train", _capped_rows(keep["train"], data_args.max_train_samples))}
    if held_out is not None:
        selections["validation"] = ("train", _capped_rows(held_out, data_args.max_eval_samples))
    else:
        selections["validation"] = ("validation", _capped_rows(keep["validation"], data_args.max_eval_samples))
    if "test" in files:
        selections["test"] = ("test", _capped_rows(keep["test"], data_args.max_predict_samples))
    return selections, held_out


def _tokenize_text_files(tmp: Path, files: dict, args: LMArguments, model_args, data_args, given):
    """The cache build of .txt files (:func:`tokenize_text_file`, the rows of each split selected from its file's
    store): ``(tokenizer, data line)``, the tokenizer ``given`` or built on the kept training lines."""
    selections, held_out = _text_file_selections(files, data_args)
    tokenizer = given
    if tokenizer is None:
        with text_read_errors(files["train"], "train_file"):
            lines = _rows_of_file(files["train"], selections["train"][1], args.tokenizer_max_train_lines)
            tokenizer = build_tokenizer(args, lines, model_args)
    check_eos(args, model_args, tokenizer)
    append = tokenizer.eos_token_id if args.level == "word" else None  # <eos> after every row (word level)
    whole = {}
    for source in sorted({source for source, _ in selections.values()}):
        with text_read_errors(files[source], f"{source}_file"):
            whole[source] = tokenize_text_file(
                files[source],
                tokenizer,
                tmp / f"_{source}_all",
                args.preprocessing_num_workers or 1,
                append,
                chars=args.level == "char",
            )
    for split, (source, mask) in selections.items():
        select_rows(whole[source], mask, tmp / split)
    for source in whole:
        shutil.rmtree(tmp / f"_{source}_all")
    sizes = {split: int(mask.sum()) for split, (_, mask) in selections.items()}
    return tokenizer, describe_sizes(data_args, sizes, files, held_out, unit="texts")


def _tokenize_splits(tmp: Path, raw: dict, args: LMArguments, model_args, data_args, given):
    """The cache build of ``datasets`` splits (:func:`tokenize_dataset`): ``(tokenizer, data line)``, the tokenizer
    ``given`` or built on the training split's first ``tokenizer_max_train_lines`` texts."""
    column = data_args.text_column_name
    tokenizer = given
    if tokenizer is None:
        texts = ColumnTexts(raw["train"], [column], max_rows=args.tokenizer_max_train_lines)
        tokenizer = build_tokenizer(args, texts, model_args)
    check_eos(args, model_args, tokenizer)
    append = tokenizer.eos_token_id if args.level == "word" else None  # <eos> after every row (word level)
    for name, split in raw.items():
        tokenize_dataset(
            split, column, tokenizer, tmp / name, args.preprocessing_num_workers or 1, append, args.level == "char"
        )
    return tokenizer, describe_data(data_args, raw, unit="texts")


def prepare_lm_data(args: LMArguments, model_args, data_args, training_args=None, tokenizer=None) -> LMData:
    """Tokenize every split once into :class:`hf_seq.toolkit.preprocessing.TokenStore` s in the preprocessing cache (or reuse
    it): the same token ids as tokenizing the in-memory splits, the tokenizer built (or given: ``tokenizer``, else
    :func:`load_tokenizer`'s) as before. Keyed by the data files (or data set fingerprints), the split settings and the tokenizer."""
    given = tokenizer if tokenizer is not None else load_tokenizer(model_args)
    files = {
        s: getattr(data_args, f"{s}_file") for s in ("train", "validation", "test") if getattr(data_args, f"{s}_file")
    }
    raw = None
    if _text_files_only(data_args):
        data_key = text_file_keys(files)
    else:
        raw = load_text_splits(TASK, data_args)
        data_key = {name: dataset_cache_key(split) for name, split in raw.items()}
        data_key["source"] = [data_args.dataset_name, data_args.dataset_config_name, data_args.text_column_name]
    key = lm_cache_key(args, model_args, data_args, given, data_key)

    def build(tmp: Path) -> tuple:
        if raw is None:
            tokenizer, data_line = _tokenize_text_files(tmp, files, args, model_args, data_args, given)
        else:
            tokenizer, data_line = _tokenize_splits(tmp, raw, args, model_args, data_args, given)
        return tokenizer, {"data_line": data_line}

    folder, reused, tokenizer = cached_token_stores(key, build, given, args, training_args, f"{args.level} tokens")
    check_eos(args, model_args, tokenizer)
    stores = {
        split: TokenStore(folder / split) for split in ("train", "validation", "test") if (folder / split).is_dir()
    }
    return LMData(tokenizer, stores, read_meta(folder)["data_line"], folder, reused)


class LMStreamWindows(torch.utils.data.IterableDataset):
    """``--streaming``: the training windows of a ``datasets`` IterableDataset, tokenized batch by batch.

    Rows are encoded ``batch_rows`` at a time and appended to a carried remainder, so the windows are exactly
    :class:`hf_seq.toolkit.collators.LMWindowDataset`'s over the whole token stream, in order (``stride`` and
    ``segment_length`` as there; memory stays constant). ``shuffle_buffer_size`` > 0 draws them through a seeded
    shuffle buffer (seed + epoch). With ``repeat`` (the script's stream) the file is read again and again
    (:func:`hf_seq.train_scripts.features.repeated_passes`): every pass holds the same windows (cut from the start of
    the file, its last partial window dropped, as the cached path's epochs), pass ``k`` shuffled with the seed of
    epoch ``k``, and the passes are joined; ``Trainer`` sees one epoch of ``max_steps`` steps, so a resumed run that
    skips the batches already seen gets the same batches as an uninterrupted one, in any pass. Under several
    processes the batches are read by the first process and dispatched (``accelerate``'s ``dispatch_batches``), or,
    with ``--streaming_split_by_node``, each process reads its own part (:meth:`split_by_node`)."""

    def __init__(
        self,
        source,
        column: str,
        encoder,
        append_id: int | None,
        segment_length: int,
        stride: int | None = None,
        shuffle_buffer_size: int = 0,
        seed: int = 0,
        batch_rows: int = 1000,
        repeat: bool = False,
        name: str = "the training stream",
    ) -> None:
        self.source, self.column, self.encoder, self.append_id = source, column, encoder, append_id
        self.segment_length, self.stride = segment_length, stride or segment_length
        self.shuffle_buffer_size, self.seed, self.batch_rows = shuffle_buffer_size, seed, batch_rows
        self.repeat, self.name = repeat, name
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def windows(self):
        """The windows in stream order, int64 tensors of ``segment_length + 1`` tokens."""
        width = self.segment_length + 1
        carried = np.zeros(0, dtype=np.int64)  # the tokens from the next window's start on
        for batch in self.source.iter(batch_size=self.batch_rows):
            flat, _ = self.encoder.encode(batch[self.column], self.append_id)
            carried = np.concatenate([carried, flat])
            start = 0
            while start + width <= len(carried):
                yield torch.from_numpy(carried[start : start + width].copy())
                start += self.stride
            carried = carried[start:]

    def split_by_node(self, world_size: int):
        """``--streaming_split_by_node``: a ``datasets`` IterableDataset of ``world_size`` shards
        (:func:`hf_seq.train_scripts.features.split_stream_by_node`); shard ``k`` holds the windows of the rows
        ``split_dataset_by_node`` gives rank ``k``, tokenized and cut by the process that reads it (its own token
        stream: the windows are not those of the whole stream). ``shuffle_buffer_size`` > 0: ``datasets``' seeded
        shuffle buffer (seed + epoch) over each process's windows. With ``repeat`` each shard reads its part again and
        again (:func:`hf_seq.train_scripts.features.repeated_stream`: pass ``k`` shuffled as epoch ``k``)."""
        from datasets import Features, List, Value

        def part_windows(part):
            own = copy.copy(self)
            own.source, own.repeat = part, False
            for window in own.windows():
                window = window.numpy()
                yield {"input_ids": window, "labels": window}

        features = Features({"input_ids": List(Value("int64")), "labels": List(Value("int64"))})
        stream = split_stream_by_node(self.source, world_size, part_windows, features)
        if self.shuffle_buffer_size:
            stream = stream.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer_size)
        if self.repeat:
            stream = repeated_stream(stream, self.name, parts=world_size)
        return stream.with_format("torch")

    def one_pass(self, index: int = 0):
        """Pass ``index`` over the stream: its windows through the shuffle buffer seeded with epoch
        ``self.epoch + index``."""
        rng = np.random.default_rng([self.seed, self.epoch + index])
        for window in shuffle_buffered(self.windows(), self.shuffle_buffer_size, rng):
            yield {"input_ids": window, "labels": window}

    def __iter__(self):
        return repeated_passes(self.one_pass, self.name) if self.repeat else self.one_pass(0)


def prepare_lm_stream(
    args: LMArguments, model_args, data_args, training_args=None, world_size: int | None = None
) -> tuple[LMData, LMStreamWindows]:
    """``--streaming``: the training file as a ``datasets`` IterableDataset (``load_dataset(..., streaming=True)``,
    no preprocessing pass), the tokenizer given or built on its first ``tokenizer_max_train_lines`` rows; the
    validation and test files tokenized into the cache as usual (they are needed whole). With
    ``--streaming_split_by_node`` the windows are :meth:`LMStreamWindows.split_by_node` of ``world_size`` parts
    (default: the run's processes)."""
    caps = {"max_train_tokens": args.max_train_tokens, "max_train_samples": data_args.max_train_samples}
    check_text_stream(data_args, training_args, caps)
    column = data_args.text_column_name
    source = stream_file(data_args.train_file, "train", allow_text=True, column=column)
    tokenizer = load_tokenizer(model_args)
    if tokenizer is None:
        texts = (row[column] for row in source)
        tokenizer = build_tokenizer(args, itertools.islice(texts, args.tokenizer_max_train_lines), model_args)
    # validation / test through the cache, with this tokenizer
    eval_data_args = dataclasses.replace(
        data_args, train_file=data_args.validation_file, validation_file=data_args.validation_file
    )
    cached = dataclasses.replace(args, streaming=False, streaming_split_by_node=False)
    data = prepare_lm_data(cached, model_args, eval_data_args, training_args, tokenizer)
    data.stores.pop("train", None)
    streamed = "streamed, split by process" if args.streaming_split_by_node else "streamed"
    data.data_line = (
        f"own data files: train `{data_args.train_file}` ({streamed}), " + data.data_line.split(", ", 1)[-1]
    )
    windows = LMStreamWindows(
        source,
        column,
        make_encoder(tokenizer, chars=args.level == "char"),
        tokenizer.eos_token_id if args.level == "word" else None,
        args.segment_length,
        args.stride,
        args.shuffle_buffer_size,
        training_args.seed if training_args is not None else 0,
        repeat=True,  # read until max_steps: Trainer's epochs of an IterableDataset are max_steps long
        name=f"`train_file` {data_args.train_file}",
    )
    if args.streaming_split_by_node:
        world = split_by_node_setup(args, training_args) if training_args is not None else 1
        return data, windows.split_by_node(world_size or world)
    return data, windows


# ------------------------------------------------------------------------------------------------------------
# evaluation
# ------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_stream(
    model: RNNForCausalLM,
    tokens,
    segment_length: int,
    streams: int,
    carry_state: bool,
    batch_size: int = 32,
) -> tuple[float, int]:
    """Mean next-token loss (nats/token) over ``tokens`` (a 1-D tensor or numpy array, e.g. a memory-mapped token
    store's stream) and the number of predicted tokens.

    ``carry_state``: the stream is cut into ``streams`` contiguous parts read side by side in windows of
    ``segment_length``, the recurrent state (``output.cache``) carried from each window to the next. Otherwise
    non-overlapping windows of ``segment_length + 1`` tokens are scored independently (state reset per window).
    """
    model.eval()
    device = model.device
    total, count = 0.0, 0
    if carry_state:
        length = (len(tokens) - 1) // streams
        cache = None
        for start in range(0, length, segment_length):
            stop = min(start + segment_length, length)
            # stream k is tokens[k*length : (k+1)*length]; read window by window (a memory-mapped split stays on disk)
            window = torch.stack(
                [stream_slice(tokens, k * length + start, k * length + stop + 1) for k in range(streams)]
            )
            inputs, targets = window[:, :-1].to(device), window[:, 1:].to(device)  # (S, L)
            out = model(inputs, cache=cache, use_cache=True)
            cache = output_cache(out)  # output.cache from transformers 5.24 on, past_key_values before
            logits = out.logits  # (S, L, V)
            total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"))
            count += targets.numel()
        return total / count, count
    windows = LMWindowDataset(tokens, segment_length, segment_length)
    for start in range(0, len(windows), batch_size):
        batch = torch.stack([windows[i]["input_ids"] for i in range(start, min(start + batch_size, len(windows)))])
        batch = batch.to(device)
        logits = model(batch, use_cache=False).logits[:, :-1]  # (B, L, V)
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"))
        count += batch[:, 1:].numel()
    return total / count, count


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


def lm_results(args, model_args, training_args, config, num_params, budget, train_output, timing) -> dict:
    """``results.json`` after training: data, model fields, parameters, time, steps, loss and tokens seen."""
    train_minutes, train_cpu_minutes, train_tokens, data_line = timing
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
                "num_hidden_layers",
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
        "train_tokens_available": train_tokens,
        "torch_threads": torch.get_num_threads(),
    }
    if train_tokens is not None:
        results["epochs"] = round(results["train_tokens_seen"] / max(1, train_tokens), 3)
    return results


def onnxruntime_model(model, tokenizer, args, results: dict) -> tuple:
    """``test_engine`` "onnxruntime": the model exported (``test_onnxruntime_quantization``) into a temporary folder
    and loaded there, and the folder (it goes into the run folder)."""
    from hf_seq.toolkit.export import load_onnxruntime, to_onnx

    export_dir = Path(tempfile.mkdtemp()) / "onnxruntime"
    to_onnx(model, export_dir, quantization=args.test_onnxruntime_quantization, tokenizer=tokenizer)
    threads = int(os.environ.get("OMP_NUM_THREADS") or torch.get_num_threads())
    results["test_engine"] = "onnxruntime"
    results["test_quantization"] = args.test_onnxruntime_quantization or "float32"
    tested = load_onnxruntime(export_dir, threads=threads)
    graph = getattr(tested, "generating_graph", None)  # greedy and length-penalty-free beams search in ONNX Runtime
    results["test_onnxruntime_graph"] = graph.entry["file"] if graph is not None else "step graphs"
    return tested, export_dir


def check_stream_lengths(lengths: dict, args, data_args) -> None:
    """Every split the run cuts into windows (``lengths``: split -> tokens it uses) holds one window of
    ``segment_length`` + 1 tokens; else a ``DataError`` naming the split, where it comes from, its token count and
    the flag that fixes it, before the model is built."""
    need = args.segment_length + 1
    short = {split: count for split, count in lengths.items() if count < need}
    if not short:
        return
    split, count = min(short.items(), key=lambda item: item[1])
    source = getattr(data_args, f"{split}_file", None)
    if source is None and split == "validation" and data_args.train_file:
        source = f"{data_args.validation_split_percentage:g}% of `train_file` {data_args.train_file} held out"
    source = source or data_args.dataset_name or data_args.train_file
    fixes = [f"`--segment_length {count - 1}` or less"] if count > 1 else []
    if split == "validation" and "held out" in str(source):
        fixes.append("a larger `--validation_split_percentage`")
    if split == "validation" and count == args.max_eval_tokens:
        fixes.append("a larger `--max_eval_tokens`")
    if split == "test" and count == args.final_eval_max_tokens:
        fixes.append("a larger `--final_eval_max_tokens`")
    fixes.append("more text")
    how = f"{', '.join(fixes[:-1])} or {fixes[-1]}" if len(fixes) > 1 else fixes[0]
    raise DataError(
        f"the {split} split ({source}) has {count} {args.level} tokens, fewer than one window of `segment_length` "
        f"{args.segment_length} + 1 = {need}: pass {how}"
    )


def final_evaluation(model, streams: dict, args, results: dict) -> None:
    """The validation / test losses (state carried across windows and/or per window) into ``results``; every
    process evaluates (the same numbers), so none waits alone at the final save's barrier."""
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


def lm_card(args, model_args, training_args, tokenizer, streams: dict, results: dict, data_line: str) -> dict:
    """The model card's data set, metrics, intended use and limitations."""
    headline = "carried" if args.eval_carried else "windows"
    metric = "bits_per_char" if args.level == "char" else "perplexity"
    tokens = {name: len(stream) for name, stream in streams.items()}
    evaluated = (
        ""
        if args.final_eval_max_tokens is None
        else f" (final evaluation on the first {args.final_eval_max_tokens:,} tokens)"
    )
    source = tokenizer_source(model_args, "built on the training split")
    return {
        "dataset": f"{data_line}; {' / '.join(f'{n:,}' for n in tokens.values())} {' / '.join(tokens)} "
        f"{args.level} tokens{evaluated}; {args.level}-level tokenizer {source}, {len(tokenizer)} tokens; training "
        f"windows of {args.segment_length}+1 tokens.",
        "metrics": {k: results[k] for k in results if k.startswith(("validation", "test")) and not k.endswith("tokens")}
        | {
            "train_steps": results["train_steps"],
            "train_loss": results["train_loss"],
            "epochs": results.get("epochs"),
            "train_minutes": results["train_minutes"],
            "processes": training_args.world_size,
        },
        "intended_use": f"{args.level.capitalize()}-level next-token prediction and sampling "
        '(`pipeline("text-generation")`) on text like its training data: a small teaching model of recurrent '
        f"language modelling (headline metric: test {metric}, state {headline} across windows), not a "
        "general-purpose text generator.",
        "limitations": "Trained on one small corpus with a closed vocabulary "
        + ("(characters unseen in training map to [UNK])" if args.level == "char" else "(unknown words map to <unk>)")
        + f"; context is learned from {args.segment_length}-token windows, so long-range coherence is weak and "
        "samples drift into fluent-looking nonsense; it reproduces the style (and biases) of its training text.",
    }


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    previous = start_script_run(training_args, threads=env_threads())
    if previous is not None:  # a finished run asked to resume: nothing to do
        return previous
    training_args.prediction_loss_only = True  # full-vocabulary logits of the whole eval set are never needed

    if args.streaming:
        data, train_set = prepare_lm_stream(args, model_args, data_args, training_args)
        tokenizer, streams = data.tokenizer, data.streams
        train_tokens = None  # a stream's length is not known
    else:
        data = prepare_lm_data(args, model_args, data_args, training_args)
        tokenizer, streams = data.tokenizer, data.streams  # memory-mapped token streams of the cached splits
        if args.max_train_tokens is not None:
            streams["train"] = streams["train"][: args.max_train_tokens]
        train_tokens = len(streams["train"])
    eval_tokens = streams["validation"][: args.max_eval_tokens] if args.max_eval_tokens else streams["validation"]
    lengths = {"validation": len(eval_tokens)}
    if train_tokens is not None:
        lengths["train"] = train_tokens
    if "test" in streams and (args.eval_windows or args.eval_carried):
        lengths["test"] = len(streams["test"][: args.final_eval_max_tokens])
    check_stream_lengths(lengths, args, data_args)  # one window in every split, before the model is built
    if not args.streaming:
        train_set = LMWindowDataset(streams["train"], args.segment_length, args.stride)
    eval_set = LMWindowDataset(eval_tokens, args.segment_length)

    model = load_or_build_model(TASK, model_args, data_args, tokenizer)
    config = model.config
    num_params = model.num_parameters()
    windows = "streamed" if args.streaming else f"{len(train_set):,}"
    print(
        f"vocabulary {len(tokenizer)}, {num_params:,} parameters, {windows} training windows of "
        f"{args.segment_length}+1 tokens (stride {args.stride or args.segment_length}), "
        f"{train_tokens or 'streamed'} training tokens"
    )

    trainer, budget = budgeted_trainer(
        HfSeqTrainer,
        model,
        training_args,
        args,
        train_dataset=train_set,
        eval_dataset=Subset(eval_set, range(len(eval_set))),
        processing_class=tokenizer,
        callbacks=[StepTimesCallback()],
    )
    start, cpu_start = time.monotonic(), time.process_time()
    train_output = run_training(trainer, training_args)
    train_minutes = (time.monotonic() - start) / 60.0
    train_cpu_minutes = (time.process_time() - cpu_start) / 60.0

    data_line = data.data_line
    timing = (train_minutes, train_cpu_minutes, train_tokens, data_line)
    results = lm_results(args, model_args, training_args, config, num_params, budget, train_output, timing)
    # the trained model first: nothing that runs after training (the export, evaluation, samples) can cost it
    save_run(trainer, training_args.output_dir, results, command)
    files: dict = {}
    guarded = {"results": results, "output_dir": training_args.output_dir}
    tested = model
    if args.test_engine == "onnxruntime":  # evaluate and sample with the exported model
        exported = after_training(
            "the ONNX Runtime export", onnxruntime_model, model, tokenizer, args, results, **guarded
        )
        if exported is None:
            tested = None
        else:
            tested, files["onnxruntime"] = exported
    if tested is not None:
        after_training("the final evaluation", final_evaluation, tested, streams, args, results, **guarded)
        sampled = after_training("sampling", sample_texts, tested, tokenizer, args, **guarded)
        if sampled is not None:
            files["samples.txt"], results["samples"] = sampled

    def report(results: dict) -> None:
        print(f"results -> {os.path.join(training_args.output_dir, 'results.json')}")
        for key in sorted(results):
            if key.startswith(("validation", "test")) and not key.endswith("tokens"):
                print(f"  {key}: {results[key]}")

    card = after_training(
        "the model card", lm_card, args, model_args, training_args, tokenizer, streams, results, data_line, **guarded
    )
    return finish_script_run(
        trainer, training_args, results, command, card=card, files=files, report=report, save_model=False
    )


if __name__ == "__main__":
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
