"""Figures: attention heat maps (PNG). matplotlib is imported inside the functions (optional dependency, Agg backend)."""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["plot_attention", "plot_translation_attention", "token_strings"]


def _to_matrix(weights):
    """A 2-D float numpy array from a tensor / array / nested list of shape ``(target_len, source_len)``."""
    import numpy as np

    if hasattr(weights, "detach"):
        weights = weights.detach().float().cpu().numpy()
    matrix = np.asarray(weights, dtype=float)
    if matrix.ndim != 2:
        raise ValueError(f"`weights` must be 2-D (target_len, source_len), got shape {matrix.shape}")
    return matrix


def plot_attention(
    weights,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    path: str | os.PathLike,
    title: str | None = None,
) -> str:
    """Save an attention heat map as PNG: source tokens on the x axis, target tokens on the y axis.

    Args:
        weights: ``(target_len, source_len)`` attention weights (torch tensor, numpy array or nested lists), e.g.
            ``model(..., output_attentions=True).cross_attentions[-1][0]`` of an RNN seq2seq model.
        source_tokens: ``source_len`` labels of the columns.
        target_tokens: ``target_len`` labels of the rows.
        path: output file (``.png``); parent folders are created.
        title: optional figure title.

    Returns:
        ``str(path)``.
    """
    matrix = _to_matrix(weights)
    if matrix.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"`weights` has shape {matrix.shape} but there are {len(target_tokens)} target and "
            f"{len(source_tokens)} source tokens"
        )
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    width = max(4.0, 0.38 * len(source_tokens) + 2.0)
    height = max(3.0, 0.32 * len(target_tokens) + 1.5)
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(matrix, cmap="viridis", aspect="auto", vmin=0.0, vmax=max(float(matrix.max()), 1e-9))
    ax.set_xticks(range(len(source_tokens)))
    ax.set_xticklabels(list(source_tokens), rotation=90, fontsize=8)
    ax.set_yticks(range(len(target_tokens)))
    ax.set_yticklabels(list(target_tokens), fontsize=8)
    ax.set_xlabel("source tokens")
    ax.set_ylabel("target tokens")
    if title:
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.02)
    fig.tight_layout()
    path = str(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def token_strings(tokenizer, ids) -> list[str]:
    """Readable token labels: each id decoded on its own (byte-level BPE shows text, not byte symbols)."""
    return [tokenizer.decode([int(i)]).strip() or tokenizer.convert_ids_to_tokens(int(i)) for i in ids]


def plot_translation_attention(
    model, tokenizer, source_text: str, path: str | os.PathLike, max_new_tokens: int | None = None, layer: int = -1
) -> str | None:
    """Translate ``source_text`` greedily, re-run the translation with ``output_attentions=True`` and save the
    cross-attention of decoder layer ``layer`` as a heat map (a Transformer's heads are averaged).
    ``max_new_tokens=None`` leaves the length to the model's generation config.

    Works for every hf_seq encoder-decoder (``RNNSeq2SeqForConditionalGeneration``,
    ``TransformerForConditionalGeneration``). Returns the path, or ``None`` when the model has no cross-attention
    (an RNN seq2seq model with ``attention="none"``).
    """
    import torch

    model.eval()
    enc = tokenizer([source_text], return_tensors="pt").to(model.device)
    with torch.no_grad():
        length = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
        generated = model.generate(**enc, num_beams=1, do_sample=False, **length)
        out = model(**enc, decoder_input_ids=generated[:, :-1], output_attentions=True)
    maps = getattr(out, "cross_attentions", None)
    if not maps or maps[layer] is None:
        return None
    weights = maps[layer][0]  # (T, S) for the RNN decoder, (heads, T, S) for a Transformer layer
    if weights.dim() == 3:
        weights = weights.mean(0)
    return plot_attention(
        weights,
        token_strings(tokenizer, enc["input_ids"][0]),
        token_strings(tokenizer, generated[0, 1:]),
        path,
        title=f"{model.config.model_type} attention={getattr(model.config, 'attention', 'multi-head')}",
    )
