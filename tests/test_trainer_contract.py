"""Trainer's contract over every registered head: ``find_labels`` (Trainer's ``label_names`` default) finds the head's
labels only, and ``Trainer.evaluate()`` returns ``eval_loss`` and calls ``compute_metrics`` with the labels.

A second forward parameter named like a label (a named ``shift_labels`` did this to ``RNNForCausalLM``) makes
``prediction_step`` find "no labels" in every batch: no ``eval_loss``, ``compute_metrics`` silently skipped."""

from __future__ import annotations

import inspect

import pytest
import torch
from tiny_models import build_tokenizer, model_inputs, registered_heads, tiny_model
from transformers import Trainer, TrainingArguments
from transformers.utils import find_labels

import hf_seq  # noqa: F401  (registers the heads)

HEADS = sorted({head for _, head in registered_heads()}, key=lambda head: head.__name__)
# the heads that take labels (a loss); the others are the families' bare base models (AutoModel)
WITH_LOSS = [head for head in HEADS if "labels" in inspect.signature(head.forward).parameters]
EXPECTED_LABELS = {"BertForPreTraining": ["labels", "next_sentence_label"]}


def test_every_registered_head_is_a_base_model_or_has_a_loss():
    bare = {head.__name__ for head in HEADS} - {head.__name__ for head in WITH_LOSS}
    assert bare == {"BertModel", "RNNModel", "RNNSeq2SeqModel", "TransformerModel"}, bare
    assert len(WITH_LOSS) >= 8, WITH_LOSS


@pytest.mark.parametrize("head", WITH_LOSS, ids=lambda head: head.__name__)
def test_evaluate_reports_eval_loss_and_calls_compute_metrics(head, tmp_path):
    assert find_labels(head) == EXPECTED_LABELS.get(head.__name__, ["labels"])
    tokenizer = build_tokenizer()
    model = tiny_model(head, len(tokenizer), **({"bidirectional": False} if "RNNFor" in head.__name__ else {}))
    batch = model_inputs(model, tokenizer, labels=True)
    rows = [{key: value[i] for key, value in batch.items()} for i in range(len(batch["input_ids"]))]
    calls = []

    def compute_metrics(prediction):
        calls.append(prediction)
        return {"called": 1.0}

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=len(rows),
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, eval_dataset=rows, compute_metrics=compute_metrics)
    metrics = trainer.evaluate()
    with torch.no_grad():
        loss = model(**batch).loss
    assert "eval_loss" in metrics, metrics
    torch.testing.assert_close(torch.tensor(metrics["eval_loss"]), loss, rtol=1e-4, atol=1e-5)  # one batch: the same
    assert len(calls) == 1 and metrics["eval_called"] == 1.0, metrics
    label_ids = calls[0].label_ids
    first = label_ids[0] if isinstance(label_ids, tuple) else label_ids
    assert first is not None and first.shape[0] == len(rows), type(label_ids)
