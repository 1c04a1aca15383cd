"""The custom pipelines an encoder-decoder config declares, as ``transformers.pipeline()`` reads them.

A saved hf_seq seq2seq folder declares ``pipeline("translation")`` and ``pipeline("text2text-generation")`` in its
``config.json`` (``custom_pipelines``, served by the folder's ``seq2seq_pipelines.py``: remote code, so
``trust_remote_code=True``). ``import hf_seq`` registers the same classes with transformers' pipeline registry
(:func:`hf_seq.seq2seq_pipelines.register_pipelines`); then the installed classes serve those tasks and no remote code
runs, so the config hides from ``config.custom_pipelines`` each declared task that the registry serves with the class
it names, and ``pipeline()`` takes its registry path, without the flag. ``config.json`` keeps every declared task
(:meth:`to_dict` reads the stored value), so a user without hf_seq gets the remote-code pipeline as before.

Standard library only: this file travels with a saved model (remote code).
"""

from __future__ import annotations

import sys

PIPELINES_MODULE = "seq2seq_pipelines"  # the module the declared classes live in ("seq2seq_pipelines.<Class>")


def _served_by_registry(task: str, declared: dict) -> bool:
    """Whether transformers' pipeline registry serves ``task`` with the installed hf_seq class ``declared`` names."""
    pipelines = sys.modules.get("transformers.pipelines")  # hf_seq registers after importing it
    registry = getattr(pipelines, "PIPELINE_REGISTRY", None)
    registered = getattr(registry, "supported_tasks", {}).get(task) if registry is not None else None
    impl = registered.get("impl") if isinstance(registered, dict) else None
    if not isinstance(impl, type) or impl.__module__ != f"hf_seq.{PIPELINES_MODULE}":
        return False
    return isinstance(declared, dict) and declared.get("impl") == f"{PIPELINES_MODULE}.{impl.__name__}"


class DeclaredPipelinesMixin:
    """``custom_pipelines`` of a config: stored as given (and saved so), read without the tasks that the installed
    hf_seq serves through transformers' registry (module docstring)."""

    @property
    def custom_pipelines(self) -> dict:
        try:
            declared = self.__dict__["custom_pipelines"]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute 'custom_pipelines'") from None
        if not isinstance(declared, dict):
            return declared
        return {task: spec for task, spec in declared.items() if not _served_by_registry(task, spec)}

    @custom_pipelines.setter
    def custom_pipelines(self, value) -> None:
        self.__dict__["custom_pipelines"] = value
