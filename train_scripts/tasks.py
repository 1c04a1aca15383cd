"""The task registry: one explicit table from a task's name to the module of its script (whose ``main(argv)`` runs it
and whose ``TASK`` describes its arguments), the script names that work as aliases, and each task's default recipe.

A module is imported only when its task is asked for (:func:`script`): nothing scans for scripts, and this module
imports no other module of hf_seq.
"""

from __future__ import annotations

import importlib
from types import ModuleType

TASKS = {
    "classifier": "hf_seq.train_scripts.train_classifier",
    "tagger": "hf_seq.train_scripts.train_tagger",
    "lm": "hf_seq.train_scripts.train_lm",
    "translation": "hf_seq.train_scripts.train_translation",
    "pretrain_bert": "hf_seq.train_scripts.pretrain_bert",
    "finetune_bert": "hf_seq.train_scripts.finetune_bert",
    "word_vectors": "hf_seq.train_scripts.train_word_vectors",
}
# the script names work too: `hf-seq-train train_classifier ...`
ALIASES = {module.rsplit(".", 1)[1]: name for name, module in TASKS.items()}
# the shipped recipe whose settings are each task's defaults (hf_seq.train_scripts.recipes; docs/training.md says why);
# finetune_bert has none: it starts from a pretrained checkpoint, for which Trainer's fine-tuning defaults fit
DEFAULT_RECIPES = {
    "classifier": "sentiment_bilstm_tuned",
    "tagger": "pos_bilstm",
    "lm": "lm_char_shakespeare",
    "translation": "translation_transformer",
    "pretrain_bert": "bert_pretrain_brown",
    "word_vectors": "word_vectors_skipgram",
}


def script(name: str) -> ModuleType:
    """The script module of the task ``name`` (a key of :data:`TASKS`)."""
    return importlib.import_module(TASKS[name])
