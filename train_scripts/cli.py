"""``hf-seq-train <task> [recipe.json] [--field value ...]``: every train script behind one command.

Installed by ``pip install hf-seq`` (``[project.scripts]``), so the scripts run without a clone; ``python -m
hf_seq.train_scripts <task> ...`` is the same (and works under ``torchrun -m`` / ``accelerate launch -m``). The task name is
the script's (``classifier`` = ``train_scripts/train_classifier.py``); the rest of the command line is the script's.
"""

from __future__ import annotations

import importlib
import sys

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

USAGE = f"""usage: hf-seq-train <task> [recipe.json] [--field value ...]

tasks: {", ".join(TASKS)}
`hf-seq-train <task> --help` lists every field of that task (docs/training.md describes them)."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name = ALIASES.get(argv[0], argv[0])
    if name not in TASKS:
        print(f"hf-seq-train: unknown task {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    from hf_seq.train_scripts import common

    common.COMMAND_PREFIX = ["hf-seq-train", name]  # what results.json and the model card record
    sys.argv = [f"hf-seq-train {name}", *argv[1:]]  # argparse's usage line
    importlib.import_module(TASKS[name]).main(argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
