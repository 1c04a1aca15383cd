"""Behaviour shared by every hf_seq ``PreTrainedModel``: clear errors when ``from_pretrained`` gets a folder it cannot
load, instead of transformers' defaults (a default config + "size mismatch" when ``config.json`` is missing, a bare
``SafetensorError`` that names no file for a corrupt weights file, and a SILENT random initialisation with only a
load report when the folder holds another family's model).

Wiring (one line per family): ``class RNNPreTrainedModel(CheckedLoadingMixin, PreTrainedModel):`` with
``from .modeling_utils import CheckedLoadingMixin``. The file is a flat sibling imported relatively, so
``save_pretrained`` copies it next to the modelling file and ``trust_remote_code`` loading keeps the checks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.json"
SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"


def check_safetensors_file(path: str | os.PathLike) -> None:
    """Raise ``OSError`` naming ``path`` if it is not a complete, readable safetensors file (truncated, garbage,
    empty). Reads only the header; the tensor bytes themselves carry no checksum, so a flipped byte inside a tensor
    cannot be detected here."""
    path = Path(path)
    size = path.stat().st_size
    problem = None
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            problem = f"it has only {size} bytes (a safetensors file starts with an 8-byte header length)"
        else:
            header_len = int.from_bytes(prefix, "little")
            if header_len > size - 8:
                problem = f"its header claims {header_len} bytes but the file has only {size}"
            else:
                try:
                    header = json.loads(f.read(header_len))
                    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
                except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
                    problem = f"its header is not valid safetensors JSON ({err})"
                else:
                    expected = 8 + header_len + max(ends, default=0)
                    if size != expected:
                        problem = f"it has {size} bytes but its header describes {expected}"
    if problem is None:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt"):
                pass
        except SafetensorError as err:
            problem = str(err)
    if problem is not None:
        raise OSError(
            f"{path} is not a valid safetensors weights file: {problem}. The file is truncated or corrupted; save the "
            "model again (save_pretrained) or download it again."
        )


def check_pretrained_folder(model_cls: type, folder: str | os.PathLike, config_given: bool = False) -> None:
    """Checks for a LOCAL model folder before ``from_pretrained`` reads it (Hub ids are left to transformers).

    * no ``config.json`` (unless ``config=`` is passed) → ``OSError`` naming the file;
    * ``config.json`` of another ``model_type`` → ``ValueError`` naming both types and the class to use;
    * ``model.safetensors`` (or a shard listed in its index) truncated / garbage → ``OSError`` naming the file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return
    config_file = folder / CONFIG_NAME
    if not config_given:
        if not config_file.is_file():
            raise OSError(
                f"{folder} has no {CONFIG_NAME}: {model_cls.__name__}.from_pretrained needs the model configuration "
                f"that save_pretrained writes beside the weights (without it a default "
                f"{model_cls.config_class.__name__} would be built and the weights would not fit)."
            )
        try:
            config = json.loads(config_file.read_text())
        except ValueError as err:
            raise OSError(f"{config_file} is not valid JSON ({err}); the file is corrupted.") from err
        expected = model_cls.config_class.model_type
        found = config.get("model_type")
        if found != expected:
            saved_as = ", ".join(config.get("architectures") or []) or "unknown class"
            raise ValueError(
                f"{config_file} describes a {found!r} model ({saved_as}), but {model_cls.__name__} loads "
                f"{expected!r} models. Load this folder with the class it was saved from or an AutoModel class "
                f"(e.g. AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True))."
            )
    index_file = folder / SAFE_WEIGHTS_INDEX_NAME
    if index_file.is_file():
        try:
            shards = sorted(set(json.loads(index_file.read_text())["weight_map"].values()))
        except (ValueError, KeyError, AttributeError) as err:
            raise OSError(f"{index_file} is not a valid weights index ({err}); the file is corrupted.") from err
        for shard in shards:
            if not (folder / shard).is_file():
                raise OSError(f"{folder / shard} is missing (listed in {index_file}).")
            check_safetensors_file(folder / shard)
    elif (folder / SAFE_WEIGHTS_NAME).is_file():
        check_safetensors_file(folder / SAFE_WEIGHTS_NAME)


class CheckedLoadingMixin:
    """Put before ``PreTrainedModel`` in a family's base class: ``from_pretrained`` first runs
    :func:`check_pretrained_folder` on local folders, then loads as usual."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | None, *model_args: Any, **kwargs: Any):
        if pretrained_model_name_or_path is not None:
            folder = Path(pretrained_model_name_or_path) / (kwargs.get("subfolder") or "")
            check_pretrained_folder(cls, folder, config_given=kwargs.get("config") is not None)
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
