"""The folders of an export: what it may replace, how it is put into place, and what it reads.

Every exporter of :mod:`hf_seq.toolkit.export` (``to_ctranslate2``, ``to_onnx``, ``average_checkpoints``) and
``hf-seq-export`` run these checks before any work:

* :func:`check_output_dir`: an export never deletes what it did not write. It refuses an output folder that is its
  source, lies inside it or contains it, or holds a trained model or run, whatever ``force`` says; ``force``
  replaces only an earlier export, recognised by its manifest (:data:`EXPORT_MANIFESTS`).
* :func:`install`: a completed staging folder is renamed into place; an earlier export is moved aside first and
  deleted only once the new one is there.
* :func:`check_source_folder` and :func:`folder_tokenizer`: a saved model folder with its configuration, weights
  and tokenizer, or one line naming the missing file.
* :func:`check_tokenizer_fits`: the tokenizer's ids fit the model's vocabulary and name the same special tokens.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

# the manifest each exporter writes: a folder holding one is an earlier export, which ``force`` may replace
EXPORT_MANIFESTS = ("hf_seq_onnx.json", "hf_seq_export.json", "averaged_from.json")
# files only a training run writes; weights beside a config.json make a saved model
TRAINING_FILES = ("trainer_state.json", "training_args.bin", "optimizer.pt")
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# the files of a saved tokenizer (a fast tokenizer's tokenizer.json, or a slow one's vocabulary)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "tokenizer.model",
    "sentencepiece.bpe.model",
)


def trained_model_marker(folder: Path) -> str | None:
    """The file that makes ``folder`` a trained model or run (a Trainer checkpoint, a training run, a saved model),
    or None. An averaged folder of ``hf-seq-export average`` (its manifest beside the weights) is an export."""
    for name in TRAINING_FILES:
        if (folder / name).is_file():
            return name
    checkpoints = sorted(p.name for p in folder.glob("checkpoint-*") if p.is_dir())
    if checkpoints:
        return f"{checkpoints[0]}/"
    if (folder / "config.json").is_file() and not (folder / "averaged_from.json").is_file():
        weights = next((name for name in WEIGHT_FILES if (folder / name).is_file()), None)
        if weights is not None:
            return f"config.json and {weights}"
    return None


def check_output_dir(
    output_dir: str | os.PathLike,
    sources: Sequence[str | os.PathLike],
    force: bool,
    error: type[Exception],
    source_name: str = "the model folder being exported",
) -> Path:
    """``output_dir`` as a ``Path`` if an export may write it, else ``error`` naming the folder and what to do.

    Refused whatever ``force`` says: the output is one of ``sources`` (folders the export reads), lies inside one or
    contains one; it is a file; it holds a trained model or run (:func:`trained_model_marker`); it is not empty and
    holds no export manifest. An earlier export (its manifest) is replaced only with ``force``."""
    output_dir = Path(output_dir)
    target = output_dir.resolve()
    for source in sources:
        source = Path(source)
        resolved = source.resolve()
        relation = None
        if target == resolved:
            relation = "is"
        elif resolved in target.parents:
            relation = "lies inside"
        elif target in resolved.parents:
            relation = "contains"
        if relation is not None:
            raise error(
                f"`output_dir` {output_dir} {relation} {source_name} ({source}): an export never writes into the "
                f"folder it reads, whatever `force` says; choose a new folder beside it "
                f"(e.g. {resolved.parent / (resolved.name + '_export')})"
            )
    if output_dir.exists() and not output_dir.is_dir():
        raise error(f"`output_dir` {output_dir} is a file; an export writes a folder: choose a new folder")
    if not output_dir.is_dir() or not any(output_dir.iterdir()):
        return output_dir
    marker = trained_model_marker(output_dir)
    if marker is not None:
        raise error(
            f"`output_dir` {output_dir} holds a trained model or run ({marker}): an export never replaces it, "
            "whatever `force` says; choose a new or empty folder"
        )
    manifest = next((name for name in EXPORT_MANIFESTS if (output_dir / name).is_file()), None)
    if manifest is None:
        raise error(
            f"`output_dir` {output_dir} is not empty and holds no earlier export (none of "
            f"{', '.join(EXPORT_MANIFESTS)}): an export replaces only a folder an export wrote; choose a new or "
            "empty folder"
        )
    if not force:
        raise error(
            f"`output_dir` {output_dir} exists and is not empty: it holds an earlier export ({manifest}); pass "
            "force=True (--force) to replace it"
        )
    return output_dir


def install(staging: Path, output_dir: Path) -> None:
    """Rename the completed ``staging`` folder to ``output_dir``; an existing ``output_dir`` (an earlier export, or
    an empty folder) is moved aside first and deleted only once the new folder is in place."""
    aside = None
    if output_dir.exists():
        aside = output_dir.with_name(f".{output_dir.name}.replaced.{os.getpid()}")
        os.replace(output_dir, aside)
    try:
        os.replace(staging, output_dir)
    except BaseException:
        if aside is not None:
            os.replace(aside, output_dir)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def check_source_folder(folder: str | os.PathLike, error: type[Exception]) -> None:
    """Refuse what is not a saved model folder before any work: ``FileNotFoundError`` for a folder that does not
    exist, ``error`` naming the missing file (``config.json``, the weights) otherwise."""
    folder = Path(folder)
    if not folder.exists():
        raise FileNotFoundError(f"{folder}: no such model folder")
    if not folder.is_dir():
        raise error(f"{folder} is a file; pass the folder of a saved model (save_pretrained, hf-seq-train)")
    if not (folder / "config.json").is_file():
        raise error(f"{folder} is not a saved model folder: it has no config.json (save_pretrained writes it)")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise error(
            f"{folder} has a config.json but no weights (none of {', '.join(WEIGHT_FILES)}): not a complete saved "
            "model; save the model again (save_pretrained) or pass a checkpoint folder"
        )


def folder_tokenizer(folder: str | os.PathLike, error: type[Exception]):
    """The tokenizer saved in the model folder ``folder``, or ``error`` naming the tokenizer files it lacks (an
    export carries the tokenizer beside the model) or the reason they do not load."""
    from transformers import AutoTokenizer

    folder = Path(folder)
    present = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not present:
        raise error(
            f"{folder} has no tokenizer (none of {', '.join(TOKENIZER_FILES[:2])}): the export carries the tokenizer "
            "beside the model; save it into the folder (tokenizer.save_pretrained) or export from Python with "
            "`tokenizer=`"
        )
    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise error(
            f"the tokenizer in {folder} ({', '.join(present)}) does not load: {first_line}; save the tokenizer "
            "into the folder again (tokenizer.save_pretrained)"
        ) from err


def check_tokenizer_fits(tokenizer, config, error: type[Exception], where: str = "the tokenizer") -> None:
    """``error`` when ``tokenizer`` gives ids the model has no row for (more tokens than ``config.vocab_size``) or
    names another id than ``config`` for a special token (``pad``, ``bos``, ``eos``) that both define."""
    vocab_size = getattr(config, "vocab_size", None)
    if tokenizer is None or vocab_size is None:
        return
    if len(tokenizer) > vocab_size:
        raise error(
            f"{where} has {len(tokenizer)} tokens but the model's `vocab_size` is {vocab_size}: ids from {vocab_size} "
            "on have no embedding row; export the model with the tokenizer it was trained with"
        )
    for name in ("pad", "bos", "eos"):
        ours, theirs = getattr(config, f"{name}_token_id", None), getattr(tokenizer, f"{name}_token_id", None)
        if ours is None or theirs is None:
            continue
        allowed = list(ours) if isinstance(ours, (list, tuple)) else [ours]
        if theirs not in allowed:
            raise error(
                f"{where}'s {name}_token_id is {theirs} but the model's config says `{name}_token_id` {ours}: the "
                "tokenizer is not the one the model was trained with; export the model with its own tokenizer"
            )


__all__ = [
    "EXPORT_MANIFESTS",
    "check_output_dir",
    "check_source_folder",
    "check_tokenizer_fits",
    "folder_tokenizer",
    "install",
    "trained_model_marker",
]
