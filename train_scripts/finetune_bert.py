"""Fine-tune hf_seq BERT for text classification or token classification (tagging).

    python train_scripts/finetune_bert.py configs/bert_finetune_sentiment.json --model_name_or_path runs/bert-pretrain-brown
    python train_scripts/finetune_bert.py configs/bert_finetune_sentiment.json --model_name_or_path "" \\
        --tokenizer_name runs/bert-pretrain-brown --output_dir runs/bert-sentiment-scratch   # no pretraining
    python train_scripts/finetune_bert.py configs/bert_finetune_pos.json --model_name_or_path bert-base-uncased-folder
    python train_scripts/finetune_bert.py configs/bert_minilm_sentiment.json   # after `make pretrained`
    hf-seq-train finetune_bert configs/bert_finetune_pos.json

``--task text-classification`` is :mod:`hf_seq.train_scripts.train_classifier` and ``--task token-classification``
:mod:`hf_seq.train_scripts.train_tagger` with BERT defaults: the same data flags (``--dataset_name`` or files, column names),
``model_type`` ``hf_seq_bert``, a WordPiece tokenizer, no word dropout. ``--model_name_or_path`` is a folder saved by
``pretrain_bert.py`` (any hf_seq BERT head: the encoder is loaded, the task head is new and reported) or a
``transformers`` BERT checkpoint folder (converted with ``from_transformers_bert``; ``--convert_transformers_bert
false`` trains transformers' own model instead, as a reference), or empty for a randomly initialised model of
``model_config``'s size. The tokenizer comes from ``--tokenizer_name`` (default: the model
folder's); with neither, a WordPiece tokenizer is trained on the training split. The best validation checkpoint is
evaluated on the test split; ``results.json`` and a model card are written beside the model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from hf_seq.train_scripts import tasks
from hf_seq.train_scripts.arguments import BERT_DEFAULTS, TRANSLATION_FIELDS, BudgetArguments, Task
from hf_seq.train_scripts.skeleton import parse_script_args

HEADS = {
    "text-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
}
# the task (hf_seq.train_scripts.tasks) whose script's public `run` trains each head, with its own arguments class
HEAD_TASKS = {"text-classification": "classifier", "token-classification": "tagger"}


@dataclass
class FinetuneArguments(BudgetArguments):
    """The task (which head) and word dropout."""

    task: str = field(default="text-classification", metadata={"help": f"one of {list(HEADS)}"})
    word_dropout: float = field(default=0.0, metadata={"help": "alpha of frequency-based word dropout (0 = off)"})
    convert_transformers_bert: bool = field(
        default=True,
        metadata={
            "help": "convert a transformers BERT checkpoint (`model_name_or_path`) into hf_seq's BERT; false trains "
            "transformers' own BertForSequenceClassification / BertForTokenClassification instead (the reference to "
            "compare with: same data, tokenizer and recipe)"
        },
    )

    def __post_init__(self):
        super().__post_init__()  # the time budgets
        if self.task not in HEADS:
            raise ValueError(f"`task` must be one of {list(HEADS)}, got {self.task!r}")
        if not 0 <= self.word_dropout < math.inf:
            raise ValueError(f"`word_dropout` must be >= 0, got {self.word_dropout!r}")


TASK = Task(
    name="finetune_bert",
    arguments=FinetuneArguments,
    defaults=BERT_DEFAULTS,
    unused=TRANSLATION_FIELDS,
    tokenizer_kinds=("wordpiece",),
    model_head="AutoModelForSequenceClassification",  # the tagging run uses the token head
    model_head_of=lambda args: HEADS[args.task],  # the head checked up front
    model_types=("hf_seq_bert", "bert"),  # hf_seq's BERT, or a transformers BERT checkpoint (converted)
)


def main(argv: list[str] | None = None, command_prefix: list[str] | None = None) -> dict:
    model_args, data_args, args, training_args, command = parse_script_args(TASK, argv, __file__, command_prefix)
    task = dataclasses.replace(
        TASK, model_head=HEADS[args.task], convert_transformers_bert=args.convert_transformers_bert
    )
    budget = {"max_train_minutes": args.max_train_minutes, "max_train_cpu_minutes": args.max_train_cpu_minutes}
    if args.task == "text-classification":
        data_args.text_column_name = data_args.text_column_name or "text"
        data_args.label_column_name = data_args.label_column_name or "label"
    runner = tasks.script(HEAD_TASKS[args.task])
    run_args = runner.TASK.arguments(word_dropout=args.word_dropout, **budget)
    return runner.run(model_args, data_args, run_args, training_args, command, task=task)


if __name__ == "__main__":
    np.seterr(all="ignore")
    from hf_seq.train_scripts.cli import run_script

    raise SystemExit(run_script(main))
