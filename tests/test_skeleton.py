"""The run skeleton's trainer and epilogue (train_scripts/skeleton.py): ``budgeted_trainer`` puts the time budget
first among the callbacks; ``finish_script_run`` writes the final folder as ``save_run`` does and reports on the
first process only."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from hf_seq.train_scripts import common, run_folder, skeleton
from transformers import AutoModelForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

import hf_seq
from hf_seq.toolkit.tokenization import build_word_level_tokenizer

TEXTS = ["a warm and funny film", "a dull mess", "the cast is great"]


def _trainer(out, **kwargs):
    tokenizer = build_word_level_tokenizer(TEXTS)
    torch.manual_seed(0)
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, hidden_size=8, embedding_size=8, num_labels=2
    )
    model = AutoModelForSequenceClassification.from_config(config)
    training_args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True, disable_tqdm=True)
    budget_args = SimpleNamespace(max_train_minutes=2.5, max_train_cpu_minutes=None)
    return skeleton.budgeted_trainer(Trainer, model, training_args, budget_args, processing_class=tokenizer, **kwargs)


def test_budgeted_trainer_puts_the_time_budget_first(tmp_path):
    class Marker(TrainerCallback):
        pass

    trainer, budget = _trainer(tmp_path / "out", callbacks=[Marker()])
    assert isinstance(budget, common.TimeBudgetCallback)
    assert budget.max_seconds == 150.0 and budget.max_cpu_seconds is None
    ours = [c for c in trainer.callback_handler.callbacks if isinstance(c, (common.TimeBudgetCallback, Marker))]
    assert ours[0] is budget and isinstance(ours[1], Marker) and len(ours) == 2
    assert trainer.args.output_dir == str(tmp_path / "out")


def test_finish_script_run_writes_what_save_run_writes_and_reports_once(tmp_path):
    card = {"dataset": "three texts", "metrics": {"accuracy": 0.5}, "intended_use": "a test"}
    results = {"validation_accuracy": 0.5}
    direct, _ = _trainer(tmp_path / "direct")
    run_folder.save_run(direct, tmp_path / "direct", dict(results), "train x", card=card, files={"notes.txt": "n"})
    trainer, _ = _trainer(tmp_path / "epilogue")
    reports = []
    returned = skeleton.finish_script_run(
        trainer, trainer.args, results, "train x", card=card, files={"notes.txt": "n"}, report=reports.append
    )
    assert returned is results and reports == [results]
    names = sorted(p.name for p in (tmp_path / "epilogue").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "direct").iterdir())
    assert {"results.json", "README.md", "notes.txt", "trainer_state.json", "config.json"} <= set(names)
    for name in ("results.json", "README.md", "notes.txt"):
        assert (tmp_path / "epilogue" / name).read_text() == (tmp_path / "direct" / name).read_text(), name
    assert json.loads((tmp_path / "epilogue" / "results.json").read_text())["command"] == "train x"


@pytest.mark.parametrize("main", [True, False])
def test_finish_script_run_passes_its_settings_to_save_run_and_reports_on_the_first_process(monkeypatch, main):
    calls = []
    monkeypatch.setattr(skeleton, "save_run", lambda *args, **kwargs: calls.append((args, kwargs)))
    trainer = SimpleNamespace(is_world_process_zero=lambda: main)
    training_args = SimpleNamespace(output_dir="runs/x")
    reports = []
    skeleton.finish_script_run(
        trainer, training_args, {"a": 1}, "cmd", results_name="r.json", save_model=False, report=reports.append
    )
    assert calls == [
        (
            (trainer, "runs/x", {"a": 1}, "cmd"),
            {"card": None, "files": None, "results_name": "r.json", "save_model": False},
        )
    ]
    assert reports == ([{"a": 1}] if main else [])
