"""Attention heat maps (hf_seq.toolkit.visualization)."""

from __future__ import annotations

import pytest
import torch
from hf_seq.train_scripts.checks import missing_modules

from hf_seq.toolkit.visualization import plot_attention

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# matplotlib is the `plot` extra, not the `test` one: the figures are checked where it is installed
needs_matplotlib = pytest.mark.skipif(
    bool(missing_modules(["matplotlib"])), reason="matplotlib (pip install 'hf-seq[plot]') is not installed"
)


@needs_matplotlib
def test_plot_attention_writes_png(tmp_path):
    weights = torch.softmax(torch.randn(3, 5), dim=-1)  # (target_len, source_len)
    path = plot_attention(
        weights,
        ["I", "am", "here", ".", "</s>"],
        ["Estoy", "aquí", "</s>"],
        tmp_path / "sub" / "map.png",
        title="additive",
    )
    data = (tmp_path / "sub" / "map.png").read_bytes()
    assert path.endswith("map.png") and data.startswith(PNG_MAGIC) and len(data) > 2000


@needs_matplotlib
def test_plot_attention_accepts_lists(tmp_path):
    plot_attention([[0.5, 0.5], [1.0, 0.0]], ["a", "b"], ["x", "y"], tmp_path / "ok.png")
    assert (tmp_path / "ok.png").exists()


def test_plot_attention_checks_shapes_before_it_needs_matplotlib(tmp_path):
    with pytest.raises(ValueError, match="target"):
        plot_attention([[0.5, 0.5]], ["a", "b"], ["x", "y"], tmp_path / "bad.png")
    with pytest.raises(ValueError, match="2-D"):
        plot_attention([0.5, 0.5], ["a", "b"], ["x"], tmp_path / "bad.png")


def _word_tokenizer():
    from hf_seq.toolkit.tokenization import build_translation_tokenizer

    pairs = [{"en": "in the beginning", "es": "en el principio"}, {"en": "and god said", "es": "y dijo dios"}] * 5
    return build_translation_tokenizer(pairs, kind="word", vocab_size=50)


def _seq2seq(family: str, tok, **overrides):
    from hf_seq import (
        HfSeqRNNSeq2SeqConfig,
        HfSeqTransformerConfig,
        RNNSeq2SeqForConditionalGeneration,
        TransformerForConditionalGeneration,
    )

    ids = dict(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.bos_token_id,
    )
    torch.manual_seed(0)
    if family == "transformer":
        config = HfSeqTransformerConfig(
            hidden_size=16,
            encoder_layers=1,
            decoder_layers=2,
            num_attention_heads=4,
            intermediate_size=32,
            dropout=0.0,
            **ids,
            **overrides,
        )
        return TransformerForConditionalGeneration(config).eval()
    config = HfSeqRNNSeq2SeqConfig(embedding_size=8, hidden_size=8, dropout=0.0, **ids, **overrides)
    return RNNSeq2SeqForConditionalGeneration(config).eval()


@needs_matplotlib
@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_plot_translation_attention_plots_the_cross_attention_of_the_translation(tmp_path, monkeypatch, family):
    import hf_seq.toolkit.visualization as visualization

    tok = _word_tokenizer()
    model = _seq2seq(family, tok)
    seen = {}
    real_plot = visualization.plot_attention

    def spy(weights, source_tokens, target_tokens, path, title=None):
        seen.update(weights=weights, source=list(source_tokens), target=list(target_tokens))
        return real_plot(weights, source_tokens, target_tokens, path, title=title)

    monkeypatch.setattr(visualization, "plot_attention", spy)
    path = visualization.plot_translation_attention(
        model, tok, "in the beginning", tmp_path / "map.png", max_new_tokens=6
    )
    assert path == str(tmp_path / "map.png") and (tmp_path / "map.png").read_bytes().startswith(PNG_MAGIC)

    enc = tok(["in the beginning"], return_tensors="pt")
    generated = model.generate(**enc, max_new_tokens=6, num_beams=1, do_sample=False)
    assert seen["source"] == visualization.token_strings(tok, enc["input_ids"][0])
    assert seen["target"] == visualization.token_strings(tok, generated[0, 1:])
    with torch.no_grad():
        cross = model(**enc, decoder_input_ids=generated[:, :-1], output_attentions=True).cross_attentions[-1][0]
    expected = cross.mean(0) if cross.dim() == 3 else cross  # a Transformer's heads are averaged
    torch.testing.assert_close(seen["weights"], expected)
    assert seen["weights"].shape == (generated.shape[1] - 1, enc["input_ids"].shape[1])
    torch.testing.assert_close(seen["weights"].sum(-1), torch.ones(generated.shape[1] - 1))


def test_plot_translation_attention_without_attention_returns_none(tmp_path):
    from hf_seq.toolkit.visualization import plot_translation_attention

    tok = _word_tokenizer()
    model = _seq2seq("rnn", tok, attention="none")
    assert plot_translation_attention(model, tok, "and god said", tmp_path / "none.png", max_new_tokens=4) is None
    assert not (tmp_path / "none.png").exists()
