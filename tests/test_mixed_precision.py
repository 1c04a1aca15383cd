"""bf16 mixed precision: ``Trainer(bf16=True, use_cpu=True)`` (CPU autocast) trains every family for a few steps with
finite, decreasing losses and finite parameters, and really runs the matmuls in bfloat16."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import FIRST_HEADS, build_tokenizer, model_inputs, tiny_model
from transformers import Trainer, TrainingArguments, default_data_collator

import hf_seq

HEADS = [
    *FIRST_HEADS,
    ("rnn", hf_seq.RNNForTokenClassification),
    ("rnn", hf_seq.RNNForCausalLM),
    ("bert", hf_seq.BertForPreTraining),
]


class RowDataset(torch.utils.data.Dataset):
    """The rows of a fixed batch, repeated ``times`` times."""

    def __init__(self, batch: dict, times: int) -> None:
        self.batch, self.rows = batch, next(iter(batch.values())).shape[0]
        self.times = times

    def __len__(self) -> int:
        return self.rows * self.times

    def __getitem__(self, i: int) -> dict:
        return {k: v[i % self.rows] for k, v in self.batch.items()}


@pytest.mark.parametrize("family,head", HEADS, ids=[h.__name__ for _, h in HEADS])
def test_bf16_training_is_finite_and_learns(family, head, tmp_path):
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer)).train()
    data = RowDataset(model_inputs(model, tokenizer, labels=True), times=4)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        bf16=True,
        use_cpu=True,
        max_steps=8,
        per_device_train_batch_size=6,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
        train_sampling_strategy="sequential",
    )
    linear_dtypes: set[torch.dtype] = set()
    hooks = [
        m.register_forward_hook(lambda mod, inp, out: linear_dtypes.add(out.dtype))
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=default_data_collator)
    trainer.train()
    for hook in hooks:
        hook.remove()

    assert trainer.accelerator.mixed_precision == "bf16"
    assert torch.bfloat16 in linear_dtypes, linear_dtypes  # autocast really ran the projections in bf16
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses), losses
    assert min(losses[-3:]) < losses[0], losses  # same 3 rows over and over: the loss must come down
    for name, param in model.named_parameters():
        assert param.dtype == torch.float32, name  # master weights stay float32
        assert torch.isfinite(param).all(), name
