"""Attention heat maps (hf_seq.visualization)."""

from __future__ import annotations

import pytest
import torch

from hf_seq.visualization import plot_attention

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_plot_attention_writes_png(tmp_path):
    weights = torch.softmax(torch.randn(3, 5), dim=-1)  # (target_len, source_len)
    path = plot_attention(weights, ["I", "am", "here", ".", "</s>"], ["Estoy", "aquí", "</s>"],
                          tmp_path / "sub" / "map.png", title="additive")
    data = (tmp_path / "sub" / "map.png").read_bytes()
    assert path.endswith("map.png") and data.startswith(PNG_MAGIC) and len(data) > 2000


def test_plot_attention_accepts_lists_and_checks_shapes(tmp_path):
    plot_attention([[0.5, 0.5], [1.0, 0.0]], ["a", "b"], ["x", "y"], tmp_path / "ok.png")
    assert (tmp_path / "ok.png").exists()
    with pytest.raises(ValueError, match="target"):
        plot_attention([[0.5, 0.5]], ["a", "b"], ["x", "y"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="2-D"):
        plot_attention([0.5, 0.5], ["a", "b"], ["x"], tmp_path / "bad.png")
