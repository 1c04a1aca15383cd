"""Train a translation model (any registered seq2seq config) on the English–Spanish verse pairs with Seq2SeqTrainer.

    python train_scripts/train_translation.py configs/translation_rnn_additive.json [--flag value ...]
    accelerate launch train_scripts/train_translation.py configs/translation_rnn_additive.json

The first argument is a JSON recipe: its keys are the fields of ``ModelArguments``, ``DataArguments`` and
``Seq2SeqTrainingArguments``; flags on the command line override the recipe. The model is built from
``model_type`` + the ``model_config`` dict with ``AutoConfig.for_model`` and ``AutoModelForSeq2SeqLM.from_config``,
so every seq2seq family registered by ``import hf_seq`` (``hf_seq_rnn_seq2seq``, ``hf_seq_transformer``) works
unchanged; the special token ids of the shared tokenizer (``<pad>``/``<s>``/``</s>``) and its vocabulary size are
filled in. Evaluation: sacreBLEU and chrF (local ``evaluate`` modules) on generated translations — on a capped
validation subset during training, on the test split (greedy and beam search) at the end. Writes
``<output_dir>/results.json``, the model + tokenizer, and with ``--plot_attention`` a heat map of one test sentence.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    HfArgumentParser,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    set_seed,
)

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import hf_seq  # noqa: E402,F401  (registers the hf_seq configs/models with the Auto classes)
from hf_seq.data import load_translation  # noqa: E402
from hf_seq.metrics import load_metric  # noqa: E402
from hf_seq.model_card import write_model_card  # noqa: E402
from hf_seq.tokenization import build_translation_tokenizer  # noqa: E402
from hf_seq.visualization import plot_translation_attention  # noqa: E402
from train_scripts.common import (  # noqa: E402
    TimeBudgetCallback,
    resolve_resume_checkpoint,
    save_final_model,
    training_command,
    use_cpu_processes_without_gpu,
    write_results,
)

logger = logging.getLogger("train_translation")


@dataclass
class ModelArguments:
    """Which model to build (or load) and which tokenizer to use."""

    model_type: str = field(default="hf_seq_rnn_seq2seq", metadata={"help": "A registered seq2seq model_type."})
    model_config: dict | str | None = field(
        default=None, metadata={"help": "Config fields (dict in the recipe, or a JSON string on the command line)."}
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Comma-separated overrides of model_config, e.g. 'attention=dot,hidden_size=128'."},
    )
    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Continue from a saved model folder instead of building a new one."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Load this tokenizer instead of building one."})
    tokenizer_kind: str = field(default="bpe", metadata={"help": "Shared tokenizer kind: 'bpe' or 'word'."})
    tokenizer_vocab_size: int = field(default=8000, metadata={"help": "Vocabulary size of a newly built tokenizer."})


@dataclass
class DataArguments:
    """Corpus, length filter, sample caps, time budget and the attention plot."""

    source_lang: str = field(default="en", metadata={"help": "Source language key of `translation`."})
    target_lang: str = field(default="es", metadata={"help": "Target language key of `translation`."})
    split_seed: int = field(default=42, metadata={"help": "Seed of the fixed train/validation/test split."})
    max_words: int | None = field(default=25, metadata={"help": "Drop pairs whose longer side has more words."})
    max_source_length: int = field(default=64, metadata={"help": "Truncate sources to this many tokens."})
    max_target_length: int = field(default=64, metadata={"help": "Truncate targets to this many tokens."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Cap on training pairs."})
    max_eval_samples: int | None = field(default=200, metadata={"help": "Validation pairs used during training."})
    max_test_samples: int | None = field(default=500, metadata={"help": "Test pairs of the final evaluation."})
    test_num_beams: str = field(default="1,5", metadata={"help": "Comma-separated beam sizes for the final test."})
    max_train_minutes: float | None = field(
        default=None,
        metadata={"help": "Stop training after this many minutes of training steps (evaluation excluded)."},
    )
    max_train_cpu_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Stop training after this many CPU-minutes of training steps (one thread: "
            "core-minutes; fair budgets on a shared machine)."
        },
    )
    plot_attention: bool = field(default=False, metadata={"help": "Write a heat map PNG of one test translation."})
    plot_attention_index: int = field(default=0, metadata={"help": "Index (in the capped test set) of that sentence."})
    plot_attention_path: str | None = field(default=None, metadata={"help": "PNG path (default <output_dir>/...)."})
    results_file: str = field(default="results.json", metadata={"help": "Results JSON (relative to output_dir)."})


def parse_args(argv: list[str]) -> tuple[ModelArguments, DataArguments, Seq2SeqTrainingArguments]:
    """``script recipe.json [--flag value ...]``: recipe values become defaults, command-line flags override them."""
    parser = HfArgumentParser((ModelArguments, DataArguments, Seq2SeqTrainingArguments))
    if argv and argv[0].endswith(".json"):
        recipe = json.loads(Path(argv[0]).read_text())
        known = {f.dest for f in parser._actions}
        unknown = sorted(set(recipe) - known)
        if unknown:
            raise ValueError(f"Unknown keys in recipe {argv[0]}: {unknown}")
        parser.set_defaults(**recipe)
        argv = argv[1:]
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    return model_args, data_args, training_args


def build_config(model_args: ModelArguments, tokenizer):
    """``AutoConfig.for_model(model_type, **fields)`` with the tokenizer's vocabulary size and special token ids."""
    fields = model_args.model_config or {}
    if isinstance(fields, str):
        fields = json.loads(fields)
    fields = dict(fields)
    fields.setdefault("vocab_size", len(tokenizer))
    for name, token_id in (
        ("pad_token_id", tokenizer.pad_token_id),
        ("bos_token_id", tokenizer.bos_token_id),
        ("eos_token_id", tokenizer.eos_token_id),
        ("decoder_start_token_id", tokenizer.bos_token_id),
    ):
        fields.setdefault(name, token_id)
    config = AutoConfig.for_model(model_args.model_type, **fields)
    if model_args.config_overrides:
        config.update_from_string(model_args.config_overrides)
        values = {k: v for k, v in config.to_diff_dict().items() if k not in ("model_type", "transformers_version")}
        config = AutoConfig.for_model(model_args.model_type, **values)  # re-validate
    return config


def translation_dataset_description(
    model_args: ModelArguments, data_args: DataArguments, sizes: dict, tokenizer
) -> str:
    """The model card's training-data line: corpus, split, filters, sizes and tokenizer."""
    loaded_from = model_args.tokenizer_name or model_args.model_name_or_path
    source = (
        f"loaded from `{loaded_from}`" if loaded_from else f"{model_args.tokenizer_kind}, built on the training split"
    )
    return (
        "English (KJV) - Spanish (Reina-Valera 1909) Bible verse pairs, `hf_seq.data.load_translation(seed="
        f"{data_args.split_seed}, max_words={data_args.max_words})` (fixed 90/5/5 split by verse); used: "
        f"{sizes['train_pairs']} training / {sizes['validation_pairs']} validation / {sizes['test_pairs']} test pairs "
        f"({data_args.source_lang} -> {data_args.target_lang}); one tokenizer shared by both languages, "
        f"{len(tokenizer)} tokens, {source}; sources truncated to {data_args.max_source_length}, "
        f"targets to {data_args.max_target_length} tokens."
    )


def translation_card_metrics(results: dict) -> dict:
    """Test BLEU / chrF per decoding mode, the last validation BLEU, steps and training time for the model card."""
    metrics: dict = {}
    for key, value in results.items():
        if key.startswith("test_") and isinstance(value, dict):
            mode = key[len("test_") :]
            for name in ("bleu", "chrf"):
                if f"test_{name}" in value:
                    metrics[f"test_{name}_{mode}"] = round(value[f"test_{name}"], 2)
    if results.get("validation_history"):
        metrics["validation_bleu_last"] = round(results["validation_history"][-1]["eval_bleu"], 2)
    if "train" in results:
        metrics["train_steps"] = results["train"]["global_steps"]
        metrics["epochs"] = round(results["train"]["epochs"], 3)
        metrics["train_minutes"] = round(results["train"]["train_minutes"], 3)
    return metrics


def main(argv: list[str] | None = None) -> dict:
    use_cpu_processes_without_gpu()
    model_args, data_args, training_args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    set_seed(training_args.seed)

    raw = load_translation(seed=data_args.split_seed, max_words=data_args.max_words)
    src, tgt = data_args.source_lang, data_args.target_lang
    caps = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_test_samples,
    }
    for split, cap in caps.items():
        if cap is not None and cap < len(raw[split]):
            raw[split] = raw[split].select(range(cap))

    # one tokenizer for both languages, trained on the training split only
    if model_args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    elif model_args.model_name_or_path:
        tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    else:
        tokenizer = build_translation_tokenizer(
            raw["train"], kind=model_args.tokenizer_kind, vocab_size=model_args.tokenizer_vocab_size
        )

    if model_args.model_name_or_path:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_args.model_name_or_path)
    else:
        model = AutoModelForSeq2SeqLM.from_config(build_config(model_args, tokenizer))
    if training_args.generation_max_length:  # the saved model decodes as the evaluation did
        model.generation_config.max_length = training_args.generation_max_length
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("model %s: %.2fM parameters", model.config.model_type, n_params / 1e6)

    def preprocess(batch):
        sources = [pair[src] for pair in batch["translation"]]
        targets = [pair[tgt] for pair in batch["translation"]]
        return tokenizer(
            sources,
            text_target=targets,
            max_length=data_args.max_source_length,
            truncation=True,
        )

    # labels are truncated with the source limit above; apply the target limit separately
    def cut_labels(example):
        example["labels"] = example["labels"][: data_args.max_target_length]
        return example

    columns = raw["train"].column_names
    tokenized = {
        split: raw[split].map(preprocess, batched=True, remove_columns=columns).map(cut_labels)
        for split in ("train", "validation", "test")
    }
    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)

    bleu = load_metric("sacrebleu")
    chrf = load_metric("chrf")

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        preds = np.where(preds < 0, tokenizer.pad_token_id, preds)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hyps = [t.strip() for t in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        refs = [t.strip() for t in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        lengths = [int(np.count_nonzero(p != tokenizer.pad_token_id)) for p in preds]
        return {
            "bleu": bleu.compute(predictions=hyps, references=[[r] for r in refs])["score"],
            "chrf": chrf.compute(predictions=hyps, references=[[r] for r in refs])["score"],
            "gen_len": float(np.mean(lengths)),
        }

    budget = TimeBudgetCallback(data_args.max_train_minutes, data_args.max_train_cpu_minutes)
    trainer = Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=tokenized["validation"],
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=[budget],
    )

    results: dict = {
        "command": training_command(__file__, argv),
        "model_type": model.config.model_type,
        "model_config": model.config.to_diff_dict(),
        "parameters": n_params,
        "data": {
            "max_words": data_args.max_words,
            "train_pairs": len(tokenized["train"]),
            "validation_pairs": len(tokenized["validation"]),
            "test_pairs": len(tokenized["test"]),
        },
        "torch_threads": torch.get_num_threads(),
    }
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=resolve_resume_checkpoint(training_args))
        # model + tokenizer + code for trust_remote_code, atomic; every rank calls it
        save_final_model(trainer, training_args.output_dir)
        target_tokens = sum(len(x) for x in tokenized["train"]["labels"])
        epochs = trainer.state.epoch or 0.0
        results["train"] = {
            **train_result.metrics,
            "train_minutes": budget.train_seconds / 60.0,
            "train_cpu_minutes": budget.train_cpu_seconds / 60.0,
            "stopped_by_time_budget": budget.stopped_by_budget,
            "global_steps": trainer.state.global_step,
            "epochs": epochs,
            "target_tokens_per_second": (target_tokens * epochs) / max(budget.train_seconds, 1e-9),
        }
        results["validation_history"] = [h for h in trainer.state.log_history if "eval_bleu" in h]

    if training_args.do_predict:
        max_new = data_args.max_target_length + 16
        for beams in (int(b) for b in data_args.test_num_beams.split(",") if b.strip()):
            t0 = time.perf_counter()
            pred = trainer.predict(tokenized["test"], metric_key_prefix="test", num_beams=beams, max_new_tokens=max_new)
            metrics = dict(pred.metrics)
            metrics["generation_seconds"] = time.perf_counter() - t0
            results[f"test_beam{beams}" if beams > 1 else "test_greedy"] = metrics
            logger.info("test num_beams=%d: %s", beams, metrics)
            if beams == 1:  # a few examples; the eval sampler may reorder rows, so find each row's source
                preds = np.where(pred.predictions < 0, tokenizer.pad_token_id, pred.predictions)
                row_of = {tuple(labels): i for i, labels in enumerate(tokenized["test"]["labels"])}
                examples = []
                for k in range(min(5, len(preds))):
                    i = row_of.get(tuple(int(x) for x in pred.label_ids[k] if x != -100))
                    if i is not None:
                        examples.append(
                            {
                                "test_index": i,
                                "source": raw["test"][i]["translation"][src],
                                "reference": raw["test"][i]["translation"][tgt],
                                "greedy": tokenizer.decode(preds[k], skip_special_tokens=True).strip(),
                            }
                        )
                results["examples"] = examples

    if data_args.plot_attention:
        path = data_args.plot_attention_path or os.path.join(training_args.output_dir, "attention_heatmap.png")
        index = data_args.plot_attention_index
        sentence = raw["test"][index]["translation"][src]
        written = plot_translation_attention(trainer.model, tokenizer, sentence, path)
        if written is None:
            logger.warning("The model returns no cross-attention maps (attention='none'?); no heat map written.")
        results["attention_plot"] = {"path": written, "test_index": index, "source": sentence}

    if trainer.is_world_process_zero():
        out_path = write_results(training_args.output_dir, results, name=data_args.results_file)
        logger.info("results written to %s", out_path)
        if training_args.do_train:  # a final model was saved: describe it
            write_model_card(
                training_args.output_dir,
                trainer.model,
                dataset=translation_dataset_description(model_args, data_args, results["data"], tokenizer),
                metrics=translation_card_metrics(results) | {"processes": training_args.world_size},
                command=results["command"],
                intended_use=f"Translation {src} -> {tgt} of short Bible verses (early-modern English -> 1909 "
                "Spanish style); a small teaching model for comparing seq2seq architectures / attention variants "
                "on one CPU, not a general-purpose translator.",
                limitations=f"Trained on one narrow domain (verses of at most {data_args.max_words} words, archaic "
                "religious register, ~30k pairs): modern or out-of-domain text, names and long sentences are "
                "translated poorly; the closed vocabulary of the training split limits rare words; BLEU/chrF are "
                "measured on a capped test subset (see the data line).",
            )
        for key in ("test_greedy", "test_beam5"):
            if key in results:
                logger.info(
                    "%s: BLEU %.2f chrF %.2f",
                    key,
                    results[key].get("test_bleu", math.nan),
                    results[key].get("test_chrf", math.nan),
                )
    return results


if __name__ == "__main__":
    main()
