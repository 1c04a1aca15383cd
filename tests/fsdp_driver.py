"""Tiny FSDP2 training runs for tests/test_fsdp.py: ``torchrun --nproc_per_node 2 tests/fsdp_driver.py ...`` (CPU,
gloo) or one plain process (the reference on the same global batch).

Four families, each with the units its ``_no_split_modules`` names: BERT masked LM (encoder blocks; the word
embedding tied to the decoder), the Transformer (encoder and decoder blocks), the recurrent causal LM (its
``RecurrentLayer`` s), the RNN seq2seq translator (the encoder's recurrent stack and the attention decoder; the word
embedding, tied to the output layer, outside both). The data make every process's share of a global batch hold the same number of loss tokens
(fixed lengths, the same number of masked positions per row), so the mean of the processes' losses is the loss of the
global batch; dropout is off, the sampler sequential. Each run: ``HfSeqTrainer`` with Trainer's own FSDP arguments
(``fsdp=True``, ``fsdp_config``: version 2, transformer-based wrap from ``_no_split_modules``, sharded state dicts)
when there are several processes, 4 steps of 4 rows, checkpoints at steps 2 and 4, the final folder written by
``save_run``; ``report_dir/<family>.json`` gets each process's local parameter count, and ``<family>_logits.pt`` the
trained model's logits on a probe batch (computed by the sharded model on every process).

    python tests/fsdp_driver.py REPORT_DIR OUT_ROOT FAMILY[,FAMILY...] [--kill_at STEP] [--resume]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
from pathlib import Path

import torch
from torch.utils.data import Dataset
from transformers import TrainerCallback, TrainingArguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_seq.train_scripts.run_folder import run_training, save_run  # noqa: E402
from hf_seq.train_scripts.trainer import HfSeqTrainer  # noqa: E402

import hf_seq  # noqa: E402

FAMILIES = ("bert_mlm", "transformer", "rnn_lm", "rnn_seq2seq")
VOCAB, ROWS, STEPS, GLOBAL_BATCH = 40, 16, 4, 4


def build_model(family: str):
    torch.manual_seed(0)
    if family == "bert_mlm":
        config = hf_seq.HfSeqBertConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=0,
        )
        return hf_seq.BertForMaskedLM(config)
    if family == "transformer":
        config = hf_seq.HfSeqTransformerConfig(
            vocab_size=VOCAB,
            hidden_size=16,
            encoder_layers=2,
            decoder_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            dropout=0.0,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        )
        return hf_seq.TransformerForConditionalGeneration(config)
    if family == "rnn_seq2seq":
        config = hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=VOCAB,
            cell="lstm",
            embedding_size=16,
            hidden_size=16,
            bidirectional=True,
            attention="additive",
            dropout=0.0,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=1,
        )
        return hf_seq.RNNSeq2SeqForConditionalGeneration(config)
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=VOCAB,
        cell="lstm",
        embedding_size=16,
        hidden_size=16,
        num_hidden_layers=2,
        dropout=0.0,
        pad_token_id=0,
    )
    return hf_seq.RNNForCausalLM(config)


def rows(family: str, n: int = ROWS, seed: int = 1) -> list[dict]:
    """Fixed-length rows; BERT: 3 masked positions (id 4) per row."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(5, VOCAB, (12,), generator=g)
        if family == "bert_mlm":
            labels = torch.full_like(ids, -100)
            masked = torch.randperm(12, generator=g)[:3]
            labels[masked] = ids[masked]
            ids = ids.clone()
            ids[masked] = 4
            out.append({"input_ids": ids, "labels": labels})
        elif family in ("transformer", "rnn_seq2seq"):
            out.append({"input_ids": ids, "labels": torch.randint(5, VOCAB, (8,), generator=g)})
        else:
            out.append({"input_ids": ids, "labels": ids.clone()})
    return out


class Rows(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def probe_batch(family: str) -> dict:
    batch = rows(family, n=3, seed=2)
    return {k: torch.stack([r[k] for r in batch]) for k in batch[0]}


class Report(TrainerCallback):
    """The local parameter count of this process once the model is sharded; SIGKILL at ``kill_at``."""

    def __init__(self, kill_at: int | None):
        self.kill_at = kill_at
        self.local = self.total = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        params = list(model.parameters())
        self.local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in params)
        self.total = sum(p.numel() for p in params)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.kill_at is not None and state.global_step == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # every process: killed in the step after the checkpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report_dir")
    parser.add_argument("out_root")
    parser.add_argument("families")
    parser.add_argument("--kill_at", type=int)
    parser.add_argument("--resume", action="store_true")
    cli = parser.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")  # as the train scripts do without CUDA
    torch.set_num_threads(1)
    report_dir = Path(cli.report_dir)
    if world > 1:  # runs last at exit (after the handlers the trainers register): is the process group gone by then?
        atexit.register(report_exit, report_dir)
    for family in cli.families.split(","):
        sharded = {
            "fsdp": True,
            "fsdp_config": {
                "version": 2,
                "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",  # the units of _no_split_modules
                "state_dict_type": "SHARDED_STATE_DICT",
                "reshard_after_forward": True,
            },
        }
        args = TrainingArguments(
            output_dir=str(Path(cli.out_root) / family),
            per_device_train_batch_size=GLOBAL_BATCH // world,
            max_steps=STEPS,
            learning_rate=1e-2,
            lr_scheduler_type="constant",
            logging_steps=1,
            save_strategy="steps",
            save_steps=2,
            train_sampling_strategy="sequential",
            report_to="none",
            disable_tqdm=True,
            use_cpu=True,
            seed=0,
            resume_from_checkpoint="last" if cli.resume else None,
            **(sharded if world > 1 else {}),
        )
        report = Report(cli.kill_at)
        model = build_model(family)
        trainer = HfSeqTrainer(model=model, args=args, train_dataset=Rows(rows(family)), callbacks=[report])
        run_training(trainer, args)
        trainer.model.eval()
        with torch.no_grad():
            logits = trainer.model(**probe_batch(family)).logits  # the sharded model, on every process
        save_run(trainer, args.output_dir, {"family": family}, command="tests/fsdp_driver.py")
        write_report(trainer, report_dir, family, {"local": report.local, "total": report.total}, logits, world)


def write_report(trainer, report_dir: Path, family: str, info: dict, logits: torch.Tensor, world: int) -> None:
    """Every process's ``info`` (plus the world size) gathered into ``<family>.json`` and the probe ``logits`` into
    ``<family>_logits.pt``, written by the main process."""
    info = {**info, "world": world}
    gathered = [None] * world
    if world > 1:
        torch.distributed.all_gather_object(gathered, info)
    else:
        gathered = [info]
    if trainer.is_world_process_zero():
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / f"{family}.json").write_text(json.dumps(gathered))
        torch.save(logits, report_dir / f"{family}_logits.pt")


def report_exit(report_dir: Path) -> None:
    """``exit_rank<R>.json``: whether the default process group was destroyed before this process's teardown (left
    to the interpreter, gloo's threads can abort it: ``terminate called without an active exception``)."""
    rank = int(os.environ["RANK"])
    report_dir.mkdir(parents=True, exist_ok=True)
    destroyed = not torch.distributed.is_initialized()
    (report_dir / f"exit_rank{rank}.json").write_text(json.dumps({"process_group_destroyed": destroyed}))


if __name__ == "__main__":
    main()
