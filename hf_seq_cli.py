"""The console commands ``hf-seq-train`` and ``hf-seq-data`` (``[project.scripts]``).

``import hf_seq`` imports torch and transformers and registers the models; printing ``hf-seq-train --help``, listing
recipes or installing data needs none of that. So the commands start here, outside the package: a command that only
prints text or installs data (``hf-seq-train``, ``hf-seq-train --help``, ``hf-seq-train <task> --list-recipes``, an
unknown task, ``hf-seq-data ...``) runs hf_seq's standard-library modules (``hf_seq.train_scripts.cli`` / ``tasks`` /
``recipes`` / ``errors``, ``hf_seq.toolkit.data_install``, ``hf_seq.toolkit.checksums``) without executing ``hf_seq/__init__.py``;
every other command imports hf_seq as usual and runs :func:`hf_seq.train_scripts.cli.main`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Iterator

# the modules a text-only command runs: each imports only the standard library and the others of this list
_LIGHT_MODULES = (
    "hf_seq.toolkit.checksums",
    "hf_seq.toolkit.data_install",
    "hf_seq.train_scripts.errors",
    "hf_seq.train_scripts.tasks",
    "hf_seq.train_scripts.recipes",
    "hf_seq.train_scripts.cli",
)


@contextlib.contextmanager
def _without_package_init() -> Iterator[None]:
    """Import :data:`_LIGHT_MODULES` under a stand-in for the package ``hf_seq`` (its module object, made from its
    import spec, ``__init__.py`` not executed; ``hf_seq.toolkit`` and ``hf_seq.train_scripts`` likewise); on exit the stand-ins and every
    module imported under them leave ``sys.modules``, so a later ``import hf_seq`` runs the package as usual. Where
    hf_seq is already imported, its modules are used as they are."""
    if "hf_seq" in sys.modules:
        yield
        return
    before = set(sys.modules)
    for name in ("hf_seq", "hf_seq.toolkit", "hf_seq.train_scripts"):
        spec = importlib.util.find_spec(name)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.modules[name] = importlib.util.module_from_spec(spec)
    try:
        yield
    finally:
        for name in set(sys.modules) - before:
            if name == "hf_seq" or name.startswith("hf_seq."):
                del sys.modules[name]


def _text_only(argv: list[str]) -> bool:
    """Whether ``hf-seq-train ARGV`` only prints text (usage, recipes, an unknown task): the cases
    :func:`hf_seq.train_scripts.cli.main` answers before it imports a script."""
    if not argv or argv[0] in ("-h", "--help") or "--list-recipes" in argv[1:]:
        return True
    with _without_package_init():
        tasks = importlib.import_module("hf_seq.train_scripts.tasks")
        return tasks.ALIASES.get(argv[0], argv[0]) not in tasks.TASKS


def train(argv: list[str] | None = None) -> int:
    """``hf-seq-train <task> [recipe] [--field value ...]`` (:mod:`hf_seq.train_scripts.cli`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _text_only([arg for arg in args if arg != "--debug"]):
        with _without_package_init():
            return importlib.import_module("hf_seq.train_scripts.cli").main(argv)
    from hf_seq.train_scripts.cli import main

    return main(argv)


def data(argv: list[str] | None = None) -> int:
    """``hf-seq-data fetch|list|path ...`` (:mod:`hf_seq.toolkit.data_install`)."""
    with _without_package_init():
        return importlib.import_module("hf_seq.toolkit.data_install").main(argv)
