"""hf_seq.toolkit.samplers.LengthBucketSampler: every example once per epoch, batches of similar length in random order, the
order a function of (seed, epoch); ``--train_sampling_strategy length_buckets`` in the train scripts' Trainer, and a
run resumed mid-epoch from a checkpoint trains on the same batches as an uninterrupted one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO_ROOT
from datasets import Dataset
from hf_seq.train_scripts import train_translation
from hf_seq.train_scripts.arguments import (
    HfSeqSeq2SeqTrainingArguments,
    HfSeqTrainingArguments,
    RecipeError,
    parse_args,
)
from hf_seq.train_scripts.trainer import HfSeqSeq2SeqTrainer
from safetensors.torch import load_file
from transformers import TrainerCallback

from hf_seq import HfSeqTransformerConfig, TransformerForConditionalGeneration
from hf_seq.toolkit.samplers import LengthBucketSampler, example_lengths

LENGTHS = [(7 * i) % 61 + 1 for i in range(103)]  # 103 examples, lengths 1..61 in scrambled order


def _stream(sampler: LengthBucketSampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return list(sampler)


def _batches(stream: list[int], size: int) -> list[list[int]]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


@pytest.mark.parametrize("epoch", [0, 1, 7])
def test_every_example_once_per_epoch_in_batches_cut_from_the_length_order(epoch):
    sampler = LengthBucketSampler(LENGTHS, batch_size=8, seed=3)
    stream = _stream(sampler, epoch)
    assert sorted(stream) == list(range(len(LENGTHS))) and len(sampler) == len(LENGTHS)
    batches = _batches(stream, 8)
    assert [len(b) for b in batches] == [8] * 12 + [7]  # the incomplete batch comes last
    # sorted by their shortest example, each batch ends at or below where the next begins: the batches are
    # consecutive slices of the length order (similar lengths), not a random mix
    by_start = sorted(batches, key=lambda b: (min(LENGTHS[i] for i in b), max(LENGTHS[i] for i in b)))
    for a, b in zip(by_start, by_start[1:]):
        assert max(LENGTHS[i] for i in a) <= min(LENGTHS[i] for i in b)
    spread = sum(max(LENGTHS[i] for i in b) - min(LENGTHS[i] for i in b) for b in batches)
    assert spread <= 61  # the slices tile 1..61: random batches of 8 would spread ~45 each
    # ... and the full batches are not yielded in length order (12 batches: sorted by chance has probability 2/12!)
    means = [sum(LENGTHS[i] for i in b) / len(b) for b in batches[:-1]]
    assert means != sorted(means) and means != sorted(means, reverse=True)


def test_order_is_a_function_of_seed_and_epoch():
    a = LengthBucketSampler(LENGTHS, batch_size=8, seed=3)
    b = LengthBucketSampler(LENGTHS, batch_size=8, seed=3)
    assert _stream(a, 0) == _stream(b, 0)
    epoch_1 = _stream(a, 1)
    assert epoch_1 == _stream(b, 1) != _stream(b, 0)  # a new order each epoch, the same in every process
    assert list(a) == epoch_1  # iterating again in the same epoch repeats it (what a resumed run relies on)
    assert _stream(a, 5) == _stream(LengthBucketSampler(LENGTHS, batch_size=8, seed=3), 5)  # no history needed
    assert _stream(LengthBucketSampler(LENGTHS, batch_size=8, seed=4), 0) != _stream(a, 0)
    # equal lengths: the order within a bucket is random too (ties are not broken by index)
    ties = _stream(LengthBucketSampler([5] * 40, batch_size=8, seed=0), 0)
    assert sorted(ties) == list(range(40)) and ties != list(range(40))


def test_drop_last_leaves_out_only_the_incomplete_batch():
    sampler = LengthBucketSampler(LENGTHS, batch_size=8, seed=0, drop_last=True)
    stream = list(sampler)
    assert len(stream) == len(sampler) == 96 and len(set(stream)) == 96
    assert all(len(b) == 8 for b in _batches(stream, 8))
    kept_out = set(range(103)) - set(stream)
    assert len(kept_out) == 7  # ... which is one bucket: the 7 longest after the shuffle-then-stable-sort
    assert min(LENGTHS[i] for i in kept_out) >= max(LENGTHS[i] for i in stream)
    assert sorted(list(LengthBucketSampler([3] * 16, batch_size=8, drop_last=True))) == list(range(16))


def reference_batches(lengths, batch_size, seed, epoch, drop_last):
    """The sampler's order written with torch's stable sort and one tensor per batch (its first implementation)."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    shuffled = torch.randperm(len(lengths), generator=generator)
    by_length = shuffled[torch.sort(lengths[shuffled], stable=True).indices]
    batches = list(by_length.split(batch_size))
    last = batches.pop() if len(batches[-1]) < batch_size else None
    batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return [b.tolist() for b in batches + ([last] if last is not None and not drop_last else [])]


@pytest.mark.parametrize("n,batch_size,drop_last", [(1, 4, False), (3, 4, True), (8, 4, False), (1001, 32, True)])
def test_order_equals_a_torch_sort_of_the_lengths(n, batch_size, drop_last):
    """One numpy index array and a radix sort of int16 lengths: the batches of a stable torch sort."""
    for lengths in (torch.randint(0, 60, (n,)).tolist(), torch.randint(0, 70_000, (n,)).tolist()):
        for seed, epoch in ((0, 0), (42, 3)):
            sampler = LengthBucketSampler(lengths, batch_size, seed=seed, drop_last=drop_last)
            sampler.set_epoch(epoch)
            expected = reference_batches(lengths, batch_size, seed, epoch, drop_last)
            assert [b.tolist() for b in sampler.batches()] == expected
            assert list(sampler) == [i for b in expected for i in b]


def test_bad_arguments_are_named():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch_size"):
            LengthBucketSampler(LENGTHS, batch_size=bad)
    with pytest.raises(ValueError, match="seed"):
        LengthBucketSampler(LENGTHS, batch_size=4, seed="1")
    with pytest.raises(ValueError, match="lengths.*empty"):
        LengthBucketSampler([], batch_size=4)
    for bad in ([3, -1], [1.5, 2.0], [[1, 2], [3, 4]]):
        with pytest.raises(ValueError, match="lengths"):
            LengthBucketSampler(bad, batch_size=4)


def test_example_lengths_from_columns_and_the_error_without_them():
    pairs = Dataset.from_dict({"input_ids": [[1, 2, 3], [1], [1, 2]], "labels": [[1], [1, 2, 3, 4], [1, 2]]})
    assert example_lengths(pairs).tolist() == [3, 4, 2]  # the longer of source and target
    classes = Dataset.from_dict({"input_ids": [[1, 2, 3], [1]], "labels": [0, 1]})
    assert example_lengths(classes).tolist() == [3, 1]  # a class label is not a sequence
    given = Dataset.from_dict({"input_ids": [[1, 2, 3], [1]], "length": [9, 8]})
    assert example_lengths(given).tolist() == [9, 8]
    assert example_lengths([{"input_ids": [1, 2], "labels": torch.tensor([1, 2, 3])}, {"input_ids": [1]}]).tolist() == [
        3,
        1,
    ]
    text = Dataset.from_dict({"text": ["a b", "c"], "label": [0, 1]})
    with pytest.raises(ValueError, match=r"'length' column or a 'input_ids' column.*\['text', 'label'\]"):
        example_lengths(text)
    with pytest.raises(ValueError, match=r"'src_ids'.*\['text', 'label'\]"):
        LengthBucketSampler.from_dataset(text, batch_size=2, model_input_name="src_ids")
    with pytest.raises(ValueError, match=r"'length' or 'input_ids' key; example 0 is dict with keys \['text'\]"):
        example_lengths([{"text": "a"}])
    with pytest.raises(ValueError, match="example 0 is str"):
        example_lengths(["a b"])


def test_example_lengths_of_a_mapped_cache_release_its_pages(tmp_path):
    """Measuring a memory-mapped cache reads its list offsets chunk by chunk and leaves few of the file's pages
    resident; the lengths equal the formatted path's (a shuffled view) and the Python ones."""

    def file_rss() -> int:
        status = Path("/proc/self/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("RssFile:"))) * 1024

    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 200, size=(30_000, 2))
    rows = {"input_ids": [[7] * a for a, _ in sizes], "labels": [[5] * b for _, b in sizes]}
    Dataset.from_dict(rows).save_to_disk(tmp_path / "d", max_shard_size="1GB")
    path = next((tmp_path / "d").glob("*.arrow"))
    dataset = Dataset.from_file(str(path))
    assert dataset.data.column("input_ids").num_chunks > 1
    untouched = file_rss()
    for column in ("input_ids", "labels"):  # every page of the file resident
        dataset.data.column(column).combine_chunks().flatten().to_numpy().sum()
    touched = file_rss()
    assert touched - untouched > path.stat().st_size * 0.5
    lengths = example_lengths(dataset)
    assert lengths.tolist() == sizes.max(axis=1).tolist()
    if sys.platform.startswith("linux"):
        assert file_rss() < touched - path.stat().st_size * 0.5
    shuffled = dataset.shuffle(seed=0)  # an indices mapping: the formatted path
    assert example_lengths(shuffled).tolist() == lengths[np.asarray(shuffled._indices.column(0))].tolist()


def test_sampling_strategy_is_checked_in_the_arguments_and_the_recipe(tmp_path):
    for arguments in (HfSeqTrainingArguments, HfSeqSeq2SeqTrainingArguments):
        assert arguments(output_dir=str(tmp_path), train_sampling_strategy="length_buckets").train_sampling_strategy
        with pytest.raises(ValueError, match=r"`train_sampling_strategy` must be one of \[.*'length_buckets'\]"):
            arguments(output_dir=str(tmp_path), train_sampling_strategy="buckets")
    recipe = json.loads((REPO_ROOT / "configs" / "translation_transformer.json").read_text())
    recipe["train_sampling_strategy"] = "by_length"
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    with pytest.raises(RecipeError, match="train_sampling_strategy.*by_length"):
        parse_args(train_translation.TASK, [str(path), "--output_dir", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse rejects a bad choice on the command line
        parse_args(train_translation.TASK, [str(path), "--train_sampling_strategy", "by_length"])
    *_, args = parse_args(
        train_translation.TASK,
        [str(path), "--output_dir", str(tmp_path), "--train_sampling_strategy", "length_buckets"],
    )
    assert args.train_sampling_strategy == "length_buckets"


# ---------------------------------------------------------------------------------------------------------------
# the Trainer: batches come from the sampler, a new order each epoch, and a resumed run continues the same order
# ---------------------------------------------------------------------------------------------------------------
def _pairs() -> Dataset:
    # 24 pairs, source length n = 1..24 (token n + 4 repeated, so that each batch can be told apart), target 25 - n:
    # the bucket key max(n, 25 - n) pairs n with 25 - n, so a batch of 4 is two such pairs with consecutive keys
    rows = [{"input_ids": [n + 4] * (n - 1) + [2], "labels": [n + 4] * (24 - n) + [2]} for n in range(1, 25)]
    return Dataset.from_list(rows)


def _pad(rows: list[dict]) -> dict:
    width = max(len(r["input_ids"]) for r in rows)
    target = max(len(r["labels"]) for r in rows)
    return {
        "input_ids": torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in rows]),
        "labels": torch.tensor([r["labels"] + [-100] * (target - len(r["labels"])) for r in rows]),
    }


class _StopAt(TrainerCallback):
    """Ends training after step ``step`` (after its checkpoint is written), as a killed run would have."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


class _RecordingTrainer(HfSeqSeq2SeqTrainer):
    """Records the source lengths of every training batch, in order (each n identifies one example)."""

    def training_step(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs["attention_mask"].sum(1).tolist())
        return super().training_step(model, inputs, *args, **kwargs)


def _train(out, resume=None, stop_at=None) -> _RecordingTrainer:
    config = HfSeqTransformerConfig(
        vocab_size=32,
        hidden_size=8,
        encoder_layers=1,
        decoder_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        dropout=0.3,
    )
    torch.manual_seed(0)
    model = TransformerForConditionalGeneration(config)
    settings = {
        "output_dir": str(out),
        "per_device_train_batch_size": 4,
        "max_steps": 16,  # 6 batches per epoch: epochs 0, 1 and four batches of epoch 2
        "learning_rate": 1e-2,  # linear decay over the 16 steps
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "steps",
        "save_steps": 9,  # a checkpoint in the middle of epoch 1
        "logging_steps": 100,
        "disable_tqdm": True,
        "seed": 1,
        "train_sampling_strategy": "length_buckets",
    }
    trainer = _RecordingTrainer(
        model=model,
        args=HfSeqSeq2SeqTrainingArguments(**settings),
        train_dataset=_pairs(),
        data_collator=_pad,
        callbacks=[_StopAt(stop_at)] if stop_at else None,
    )
    trainer.seen = []
    trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    trainer = _train(out)
    return trainer.seen, load_file(str(out / "checkpoint-16" / "model.safetensors"))


def test_trainer_trains_on_length_buckets_in_a_new_order_each_epoch(uninterrupted):
    seen, _ = uninterrupted
    assert len(seen) == 16
    epochs = [seen[:6], seen[6:12]]
    for batches in epochs:
        assert sorted(n for batch in batches for n in batch) == list(range(1, 25))
        for batch in batches:  # one bucket: keys max(n, 25 - n) of two consecutive pairs {n, 25 - n}
            keys = sorted(max(n, 25 - n) for n in batch)
            assert keys[0] == keys[1] and keys[2] == keys[3] and keys[2] == keys[0] + 1
    assert epochs[0] != epochs[1] and seen[12:] != epochs[0][:4] and seen[12:] != epochs[1][:4]
    # the sampler's own order for seed 1, epochs 0 and 1 (lengths = max(source, target) tokens)
    sampler = LengthBucketSampler([max(n, 25 - n) for n in range(1, 25)], batch_size=4, seed=1)
    for epoch, batches in enumerate(epochs):
        assert [[i + 1 for i in b] for b in _batches(_stream(sampler, epoch), 4)] == batches


def test_other_strategies_are_transformers_own(tmp_path):
    trainer = _RecordingTrainer(
        model=TransformerForConditionalGeneration(
            HfSeqTransformerConfig(
                vocab_size=32, hidden_size=8, encoder_layers=1, decoder_layers=1, num_attention_heads=2
            )
        ),
        args=HfSeqSeq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none"),
        train_dataset=_pairs(),
        data_collator=_pad,
    )
    from hf_seq.toolkit.samplers import PermutationSampler

    # random: Trainer's seeded order without its list of every index (test_lm_windows_are_shuffled_as_trainer_...)
    assert isinstance(trainer._get_train_sampler(), PermutationSampler)
    trainer.args.train_sampling_strategy = "sequential"
    assert type(trainer._get_train_sampler()).__name__ == "SequentialSampler"
    trainer.args.train_sampling_strategy = "length_buckets"
    assert isinstance(trainer._get_train_sampler(), LengthBucketSampler)


def test_resumed_mid_epoch_continues_the_same_batches_and_ends_with_the_same_weights(uninterrupted, tmp_path):
    seen, weights = uninterrupted
    first = _train(tmp_path / "run", stop_at=9)  # stops at the checkpoint in epoch 1 (3 batches in)
    assert first.seen == seen[:9]
    resumed = _train(tmp_path / "run", resume=str(tmp_path / "run" / "checkpoint-9"))
    assert resumed.seen == seen[9:]  # Trainer skips the 3 batches of epoch 1 in the order of epoch 1, not epoch 0
    final = load_file(str(tmp_path / "run" / "checkpoint-16" / "model.safetensors"))
    assert final.keys() == weights.keys()
    for name in weights:  # dropout on: the RNG state is restored too, so the weights are equal
        assert torch.equal(final[name], weights[name]), name


# the language model's windows: PermutationSampler gives Trainer's own shuffle, epoch after epoch, and resumes it
# ---------------------------------------------------------------------------------------------------------------
class _Scalar(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, input_ids, labels=None, **kwargs):
        return {"loss": (self.weight * input_ids.float().mean()).square().sum()}


def _window_starts(trainer_class, out, resume=None, stop_at=None, rows=False, **settings) -> list[list[int]]:
    """The first ids of each batch of 17 windows of 3 tokens (window i starts with token 3 i): an
    ``LMWindowDataset``, or with ``rows`` the same windows as the rows of a ``datasets.Dataset``."""
    from datasets import Dataset

    from hf_seq.toolkit.collators import LMWindowDataset

    class Recording(trainer_class):
        def training_step(self, model, inputs, *args, **kwargs):
            self.seen.append(inputs["input_ids"][:, 0].tolist())  # window i starts with token 3 i
            return super().training_step(model, inputs, *args, **kwargs)

    args = HfSeqTrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=3,
        max_steps=40,  # 17 windows, 6 batches an epoch: epochs 0-5 and four batches of epoch 6
        use_cpu=True,
        report_to="none",
        save_strategy="steps",
        save_steps=15,
        logging_steps=100,
        disable_tqdm=True,
        **settings,
    )
    trainer = Recording(
        model=_Scalar(),
        args=args,
        train_dataset=Dataset.from_dict({"input_ids": np.arange(51).reshape(17, 3).tolist()})
        if rows
        else LMWindowDataset(np.arange(52, dtype=np.uint16), 3),
        callbacks=[_StopAt(stop_at)] if stop_at else None,
    )
    trainer.seen = []
    trainer.train(resume_from_checkpoint=resume)
    return trainer, trainer.seen


@pytest.mark.parametrize("rows", [False, True], ids=["lm_windows", "dataset_rows"])
def test_lm_windows_are_shuffled_as_trainer_shuffles_them(tmp_path, rows):
    from hf_seq.train_scripts.trainer import HfSeqTrainer
    from transformers import Trainer

    from hf_seq.toolkit.samplers import PermutationSampler

    ours, seen = _window_starts(HfSeqTrainer, tmp_path / "ours", seed=3, rows=rows)
    assert isinstance(ours._get_train_sampler(), PermutationSampler)
    reference_trainer, reference = _window_starts(Trainer, tmp_path / "reference", seed=3, rows=rows)
    assert not isinstance(reference_trainer._get_train_sampler(), PermutationSampler)  # RandomSampler, made seedable
    assert len(seen) == 40 and seen == reference
    epochs = [sorted(i for batch in seen[6 * e : 6 * e + 6] for i in batch) for e in range(6)]
    assert all(e == list(range(0, 51, 3)) for e in epochs) and seen[:6] != seen[6:12]
    resume = {"resume": str(tmp_path / "ours" / "checkpoint-15"), "rows": rows}
    _, resumed = _window_starts(HfSeqTrainer, tmp_path / "ours", **resume)
    _, resumed_reference = _window_starts(
        Trainer, tmp_path / "reference", resume=str(tmp_path / "reference" / "checkpoint-15"), rows=rows
    )
    assert len(resumed) == 25 and resumed == resumed_reference  # Trainer's own resume of its shuffle


def test_permutation_sampler_is_the_seeded_randperm_in_blocks():
    from hf_seq.toolkit.samplers import PermutationSampler

    sampler = PermutationSampler(range(1000), seed=5, block=7)
    for epoch in range(2):
        generator = torch.Generator().manual_seed(5 + epoch)
        assert list(sampler) == torch.randperm(1000, generator=generator).tolist()  # then the next epoch
    sampler.set_epoch(0)
    assert list(sampler) == torch.randperm(1000, generator=torch.Generator().manual_seed(5)).tolist()
    assert len(sampler) == 1000
