"""Model cards: the README.md written beside a trained model (architecture, config, data, metrics, command, use)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

PIPELINE_TAGS = {
    "ForSequenceClassification": "text-classification",
    "ForTokenClassification": "token-classification",
    "ForCausalLM": "text-generation",
    "ForConditionalGeneration": "translation",
    "ForMaskedLM": "fill-mask",
    "ForPreTraining": "fill-mask",
}
AUTO_CLASSES = {
    "ForSequenceClassification": "AutoModelForSequenceClassification",
    "ForTokenClassification": "AutoModelForTokenClassification",
    "ForCausalLM": "AutoModelForCausalLM",
    "ForConditionalGeneration": "AutoModelForSeq2SeqLM",
    "ForMaskedLM": "AutoModelForMaskedLM",
    "ForPreTraining": "AutoModelForPreTraining",
}


# size/shape fields shown in the card's "Architecture" section, when the config has them
ARCHITECTURE_FIELDS = (
    "cell",
    "input_encoding",
    "embedding_size",
    "hidden_size",
    "num_hidden_layers",
    "encoder_layers",
    "decoder_layers",
    "bidirectional",
    "pooling",
    "attention",
    "num_attention_heads",
    "intermediate_size",
    "norm_position",
    "position_embedding",
    "max_position_embeddings",
    "max_seq_length",
    "vocab_size",
    "num_labels",
)


def _architecture_lines(model) -> list[str]:
    config = model.config
    rows = [
        f"| {name} | {getattr(config, name)} |"
        for name in ARCHITECTURE_FIELDS
        if getattr(config, name, None) is not None and name in config.to_dict()
    ]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return ["| field | value |", "|---|---|", *rows, f"| trainable parameters | {trainable:,} |"]


def _head_suffix(class_name: str) -> str | None:
    return next((suffix for suffix in PIPELINE_TAGS if class_name.endswith(suffix)), None)


def _format_metric(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def render_model_card(
    model,
    *,
    dataset: str,
    metrics: dict[str, Any],
    command: str,
    intended_use: str,
    limitations: str = "",
    title: str | None = None,
) -> str:
    """Return the markdown model card for ``model`` (a ``PreTrainedModel``) with YAML metadata for the Hub."""
    class_name = type(model).__name__
    suffix = _head_suffix(class_name)
    auto_class = AUTO_CLASSES.get(suffix, "AutoModel")
    config = model.config.to_dict()
    for noisy in ("transformers_version", "auto_map", "architectures", "id2label", "label2id"):
        config.pop(noisy, None)
    num_params = sum(p.numel() for p in model.parameters())
    meta = ["---", "library_name: transformers", "tags:", "- hf_seq", f"- {model.config.model_type}"]
    if suffix:
        meta.append(f"pipeline_tag: {PIPELINE_TAGS[suffix]}")
    meta.append("---")
    metric_rows = "\n".join(f"| {k} | {_format_metric(v)} |" for k, v in sorted(metrics.items()))
    lines = [
        *meta,
        "",
        f"# {title or class_name}",
        "",
        f"`{class_name}` from **hf_seq** ({model.config.model_type}), {num_params:,} parameters.",
        "",
        "## Use",
        "",
        "```python",
        f"from transformers import AutoTokenizer, {auto_class}",
        f'model = {auto_class}.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)',
        'tokenizer = AutoTokenizer.from_pretrained("PATH_OR_HUB_ID", trust_remote_code=True)',
        "```",
        "",
        "With `hf_seq` installed (`import hf_seq`), `trust_remote_code` is not needed. Any head of the family loads "
        "this folder (the new head initialised). The tokenizer is a plain `PreTrainedTokenizerFast`; `AutoTokenizer` "
        "still reads the model's `config.json`, hence the flag (or a prompt) without `hf_seq`.",
        "",
        "## Architecture",
        "",
        *_architecture_lines(model),
        "",
        "## Intended use",
        "",
        intended_use,
        "",
        "## Training data",
        "",
        dataset,
        "",
        "## Results",
        "",
        "| metric | value |",
        "|---|---|",
        metric_rows,
        "",
        "## Training command",
        "",
        "```bash",
        command,
        "```",
        "",
        "## Configuration",
        "",
        "```json",
        json.dumps(config, indent=2, sort_keys=True, default=str),
        "```",
    ]
    if limitations:
        lines += ["", "## Limitations", "", limitations]
    return "\n".join(lines) + "\n"


def write_model_card(output_dir: str | os.PathLike, model, **kwargs: Any) -> Path:
    """Write :func:`render_model_card` as ``README.md`` in ``output_dir`` (atomically) and return its path."""
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(render_model_card(model, **kwargs))
    os.replace(tmp, path)
    return path
