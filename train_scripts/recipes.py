"""The shipped recipes: found by name, listed per task, and each task's defaults.

The repository's ``configs/*.json`` (and ``configs/accelerate/*.yaml``) are installed with the package as
``hf_seq/recipes/`` (package data of the wheel), so ``hf-seq-train classifier sentiment_bilstm`` works from any
folder after ``pip install hf-seq``; in a clone (also an editable install) they are read from ``configs/``.

* **Which task a recipe is for** follows from its name (:data:`RECIPE_TASKS`: ``sentiment_*`` recipes are the
  classifier's, ``lm_*`` the language model's, ...).
* **A recipe argument** is a path to a JSON file, or the name of a shipped recipe of the task (``sentiment_bilstm``
  or ``sentiment_bilstm.json``): :func:`resolve_recipe`.
* **Without a recipe**, a task's defaults are its shipped default recipe (:data:`hf_seq.train_scripts.tasks.DEFAULT_RECIPES`: a model and an
  optimisation that learn) less the keys that describe the recipe's own data, earlier runs, output and machine
  (:data:`NOT_DEFAULTS`): the model, tokenizer and training settings apply to the user's data, every flag overrides
  them, and the data must be given (``--train_file`` or ``--dataset_name``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hf_seq.train_scripts.errors import RecipeError, json_kind
from hf_seq.train_scripts.tasks import ALIASES, DEFAULT_RECIPES

# recipe name prefix -> the `hf-seq-train` task it is for
RECIPE_TASKS = {
    "sentiment_": "classifier",
    "pos_": "tagger",
    "lm_": "lm",
    "translation_": "translation",
    "bert_pretrain": "pretrain_bert",
    "bert_finetune": "finetune_bert",
    "word_vectors": "word_vectors",
}


# keys of a default recipe that are not defaults of the task, by why
NOT_DEFAULTS = {
    # the recipe's own data: the user's data is given on the command line
    "data": (
        "dataset_name",
        "dataset_config_name",
        "train_file",
        "validation_file",
        "test_file",
        "text_column_name",
        "label_column_name",
        "tokens_column_name",
        "tags_column_name",
        "source_lang",
        "target_lang",
        "sample_prompt",
    ),
    # folders of earlier runs that a user does not have
    "earlier runs": ("model_name_or_path", "tokenizer_name", "pretrained_embeddings"),
    # where the run goes and which checkpoints it keeps (Trainer's defaults; `load_best_model_at_end` would tie the
    # user's --eval_strategy / --save_strategy to each other)
    "output": (
        "output_dir",
        "save_strategy",
        "save_steps",
        "save_total_limit",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "plot_attention",
    ),
    # the machine and the time budgets of the recipe's corpus
    "machine": ("use_cpu", "max_train_minutes", "max_train_cpu_minutes"),
}


def read_recipe(path: str | os.PathLike) -> dict:
    """The JSON object of a recipe file, comment keys (``_comment``, any key starting with ``_``) removed."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"recipe {path} does not exist")
    text = path.read_text(encoding="utf-8")
    try:
        recipe = json.loads(text)
    except json.JSONDecodeError as error:
        raise RecipeError(
            f"recipe {path} is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}"
        ) from None
    if not isinstance(recipe, dict):
        raise RecipeError(
            f'recipe {path} must be a JSON object {{"field": value, ...}}, got {json_kind(recipe)} at the top level'
        )
    return {key: value for key, value in recipe.items() if not key.startswith("_")}


def recipes_dir() -> Path:
    """The folder of the shipped recipes: ``hf_seq/recipes`` of an installed wheel, else the clone's ``configs``."""
    here = Path(__file__).resolve().parent  # hf_seq/train_scripts installed; the clone's train_scripts/ otherwise
    for candidate in (here.parent / "recipes", here.parent / "configs"):
        if candidate.is_dir() and any(candidate.glob("*.json")):
            return candidate
    raise RecipeError(
        f"the shipped recipes are missing: neither {here.parent / 'recipes'} nor {here.parent / 'configs'}"
    )


def task_of(name: str) -> str | None:
    """The task a shipped recipe is for, from its name (None: no task claims it)."""
    return next((task for prefix, task in RECIPE_TASKS.items() if name.startswith(prefix)), None)


def shipped_recipes(task: str | None = None) -> dict[str, Path]:
    """Name -> path of every shipped recipe (of ``task`` only, when given), sorted by name."""
    found = {path.stem: path for path in sorted(recipes_dir().glob("*.json"))}
    return {name: path for name, path in found.items() if task is None or task_of(name) == task}


def description(path: Path, width: int = 110) -> str:
    """One line about a recipe: its data preset and the first sentence of its ``_comment`` (else its model)."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    text = str(raw.get("_comment", "")).split(". ")[0].rstrip(".")
    if not text:
        text = f"{raw.get('model_type', 'model')} {json.dumps(raw.get('model_config', {}), separators=(',', ':'))}"
    data = raw.get("dataset_name")
    line = f"[{data}] {text}" if data else text
    return line if len(line) <= width else line[: width - 3] + "..."


def list_recipes(task: str) -> str:
    """The text of ``hf-seq-train <task> --list-recipes``."""
    recipes = shipped_recipes(task)
    default = DEFAULT_RECIPES.get(task)
    width = max(len(name) for name in recipes) + 2
    lines = [f"shipped recipes of {task} (hf-seq-train {task} <name> [--field value ...]; * = the defaults):"]
    for name, path in recipes.items():
        mark = "*" if name == default else " "
        lines.append(f"{mark} {name:<{width}}{description(path)}")
    folder = recipes_dir()
    lines.append(f"in {folder}; accelerate configs: {folder / 'accelerate'}")
    return "\n".join(lines)


def cli_task(task_name: str) -> str:
    """The ``hf-seq-train`` task of a script's :class:`~hf_seq.train_scripts.arguments.Task` name
    (``train_classifier`` -> ``classifier``)."""
    return ALIASES.get(task_name, task_name)


def resolve_recipe(argument: str, task_name: str) -> Path:
    """The recipe file of a command's recipe argument: an existing file, or a shipped recipe of the task by name
    (``sentiment_bilstm``, ``sentiment_bilstm.json``). ``RecipeError`` for a name that is neither, or a shipped
    recipe of another task."""
    path = Path(argument)
    if path.is_file():
        return path
    task = cli_task(task_name)
    name = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    shipped = shipped_recipes()
    if path.parent == Path(".") and name in shipped:
        owner = task_of(name)
        if owner is not None and owner != task:
            raise RecipeError(
                f"recipe {argument} is a recipe of {owner}, not of {task}: run `hf-seq-train {owner} {name} ...`"
            )
        return shipped[name]
    own = ", ".join(shipped_recipes(task)) or "none"
    hint = f"; `{name}` is a shipped recipe: pass its name alone" if name in shipped else ""
    raise RecipeError(
        f"recipe {argument} does not exist: neither a file nor a shipped recipe of {task} ({own}; "
        f"`hf-seq-train {task} --list-recipes` describes them){hint}"
    )


def default_recipe(task_name: str) -> tuple[str, dict] | None:
    """``(name, settings)`` of a task's defaults: its default recipe less :data:`NOT_DEFAULTS` (None: no default)."""
    name = DEFAULT_RECIPES.get(cli_task(task_name))
    if name is None:
        return None
    path = shipped_recipes().get(name)
    if path is None:
        raise RecipeError(f"the default recipe of {cli_task(task_name)}, {name}, is missing from {recipes_dir()}")
    dropped = {key for keys in NOT_DEFAULTS.values() for key in keys}
    return name, {key: value for key, value in read_recipe(path).items() if key not in dropped}
