"""Whole-folder atomic outputs (:mod:`hf_seq.train_scripts.run_folder`): a run's final folder is the previous run's or the new
one, never a mix, whatever moment the process is killed at; nothing else the folder held is lost.

The kill-point sweep saves run B (``save_run``: model, tokenizer, ``trainer_state.json``, ``results.json``, model
card) over the final folder of run A, which also holds a checkpoint and files of the user, and SIGKILLs the saving
process before its k-th step — every write of a part, every rename, the exchange, every removal — for k = 1, 2, ...
until a save runs through. After each kill the folder holds exactly A's or exactly B's run files (byte for byte)
as a reader finds it, and after the recovery every script runs first, also the checkpoint and the user's files,
unchanged, and nothing beside it. The sweep runs twice: with ``renameat2(RENAME_EXCHANGE)`` and with the two-rename
fallback of systems without it. It runs in a subprocess that forks one child per kill point."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_kill_point_of_the_final_save_leaves_one_runs_folder(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(
        [sys.executable, __file__, str(tmp_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    for mode in ("exchange", "rename"):
        outcomes = summary[mode]
        assert len(outcomes) >= 10, outcomes  # 4 parts written, the list, 3 carried entries, the swap, clean-up
        # killed early: A's folder; killed after the swap: B's — both happen, and nothing else
        assert set(outcomes) == {"A", "B"} and outcomes[0] == "A" and outcomes[-1] == "B", outcomes
        assert outcomes == sorted(outcomes), outcomes  # once B's folder is in place it stays


def test_an_evaluation_adds_its_results_beside_the_model(tmp_path):
    """``save_model=False`` (pretrain_bert's ``--eval_only``): the folder keeps its model; only the results change."""
    from hf_seq.train_scripts import run_folder

    out = tmp_path / "model"
    with run_folder.staged_output(out) as folder:
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "results.json").write_text("{}")
    with run_folder.staged_output(out, replace_run=False) as folder:
        (folder / "eval.json").write_text('{"eval": 1}')
    assert (out / "model.safetensors").read_bytes() == b"weights" and (out / "eval.json").is_file()
    with run_folder.staged_output(out) as folder:  # a new training run replaces all of the run's files
        (folder / "model.safetensors").write_bytes(b"new")
    assert sorted(p.name for p in out.iterdir()) == [".run_files.json", "model.safetensors"]


def test_output_dir_may_not_hold_the_working_directory(tmp_path, monkeypatch):
    from hf_seq.train_scripts import run_folder

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="current directory"):
        run_folder.resolve(".")
    with pytest.raises(ValueError, match="current directory"):
        run_folder.resolve(tmp_path.parent)
    assert run_folder.resolve("runs/x") == tmp_path / "runs" / "x"


# ------------------------------------------------------------------------------------------ the sweep (subprocess)
TEXTS = {
    "A": ["a warm and funny film", "a dull mess", "the cast is great"],
    "B": ["an awful boring movie", "brilliant acting throughout", "not worth it", "loved every minute"],
}


def _save(run: str, out: Path) -> None:
    import torch
    from hf_seq.train_scripts import run_folder
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    import hf_seq
    from hf_seq.toolkit.tokenization import build_word_level_tokenizer

    tokenizer = build_word_level_tokenizer(TEXTS[run])
    torch.manual_seed(0 if run == "A" else 1)
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, hidden_size=8, embedding_size=8, num_labels=2
    )
    model = AutoModelForSequenceClassification.from_config(config)
    args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, processing_class=tokenizer)
    card = {"dataset": f"run {run}", "metrics": {"run": run}, "intended_use": "a test"}
    run_folder.save_run(trainer, out, {"run": run}, command=f"train {run}", card=card)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _comparable(files: dict[str, bytes]) -> dict[str, bytes]:
    """The run list without the ids of the save (new at each save); every other file byte for byte."""
    from hf_seq.train_scripts.run_folder import RUN_FILES

    out = dict(files)
    if RUN_FILES in out:
        listing = json.loads(out[RUN_FILES])
        out[RUN_FILES] = json.dumps([listing["files"], listing["written"]]).encode()
    return out


def _restore(snapshot: dict[str, bytes], folder: Path) -> None:
    for sibling in folder.parent.iterdir():
        if sibling != folder and sibling.name.startswith(f".{folder.name}."):
            shutil.rmtree(sibling)
    shutil.rmtree(folder, ignore_errors=True)
    for rel, data in snapshot.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _kill_at(k: int, mode: str) -> None:
    """In the child: SIGKILL before the k-th step of the save (a part written, a rename, the swap, a removal)."""
    from hf_seq.train_scripts import run_folder
    from transformers import Trainer
    from transformers.trainer_callback import TrainerState

    import hf_seq.toolkit.model_card

    count = [0]

    def step(fn):
        def wrapped(*args, **kwargs):
            count[0] += 1
            if count[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)

        return wrapped

    real_exchange = run_folder.exchange
    run_folder.exchange = step(real_exchange if mode == "exchange" else (lambda a, b: False))
    run_folder.os = types.SimpleNamespace(**{**vars(os), "rename": step(os.rename)})
    run_folder.shutil = types.SimpleNamespace(**{**vars(shutil), "rmtree": step(shutil.rmtree)})
    run_folder.json = types.SimpleNamespace(dumps=step(json.dumps), loads=json.loads)  # the run-file list
    Trainer.save_model = step(Trainer.save_model)
    TrainerState.save_to_json = step(TrainerState.save_to_json)
    run_folder.write_results = step(run_folder.write_results)
    hf_seq.toolkit.model_card.write_model_card = step(hf_seq.toolkit.model_card.write_model_card)


def _sweep(root: Path) -> dict[str, list[str]]:
    import torch
    from hf_seq.train_scripts import run_folder

    torch.set_num_threads(1)
    out = root / "run"
    _save("A", out)
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"a checkpoint of run A")
    (out / "my_notes.txt").write_text("the user's own file")
    (out / "plots").mkdir()
    (out / "plots" / "loss.png").write_bytes(b"the user's own folder")
    start = _snapshot(out)
    _save("B", out)
    finished = _snapshot(out)
    kept = {rel: data for rel, data in start.items() if rel.startswith(("checkpoint-4/", "my_notes", "plots/"))}
    runs = {}
    for run, snap in (("A", start), ("B", finished)):
        names = set(json.loads(snap[run_folder.RUN_FILES])["files"]) | {run_folder.RUN_FILES}
        runs[run] = _comparable({rel: data for rel, data in snap.items() if rel.split("/")[0] in names})
    run_names = {rel for files in runs.values() for rel in files}
    assert runs["A"]["results.json"] != runs["B"]["results.json"]
    assert runs["A"]["tokenizer.json"] != runs["B"]["tokenizer.json"]
    assert runs["A"]["model.safetensors"] != runs["B"]["model.safetensors"]

    def which_run(label: str) -> str:
        now = _snapshot(out)
        present = _comparable({rel: data for rel, data in now.items() if rel in run_names})
        matches = [run for run, files in runs.items() if present == files]
        assert len(matches) == 1, f"{label}: the folder mixes runs: {sorted(present)}"
        return matches[0]

    summary = {}
    for mode in ("exchange", "rename"):
        outcomes = []
        for k in range(1, 200):
            _restore(start, out)
            pid = os.fork()
            if pid == 0:  # the child: save run B, killed at step k
                try:
                    _kill_at(k, mode)
                    _save("B", out)
                finally:
                    os._exit(0)
            _, status = os.waitpid(pid, 0)
            if not os.WIFSIGNALED(status):  # k is past the last step: the save ran through
                assert which_run(f"{mode}, complete") == "B"
                break
            assert os.WTERMSIG(status) == signal.SIGKILL
            if out.exists():  # a reader (no recovery yet); only the two-rename swap has a moment without the folder
                seen = which_run(f"{mode}, killed at step {k}")
            else:
                assert mode == "rename", f"killed at step {k}: {out} is gone"
                seen = None
            run_folder.recover_output_dir(out)  # what the next script does first
            after = which_run(f"{mode}, killed at step {k}, recovered")
            assert seen in (None, after), f"{mode}, step {k}: recovery changed {seen} into {after}"
            for rel, data in kept.items():
                assert (out / rel).read_bytes() == data, f"{mode}, step {k}: {rel} lost"
            leftovers = [p.name for p in out.parent.iterdir() if p != out]
            assert not leftovers, f"{mode}, step {k}: {leftovers} left beside the folder"
            outcomes.append(after)
        summary[mode] = outcomes
    return summary


if __name__ == "__main__":
    print(json.dumps(_sweep(Path(sys.argv[1]))))
