"""Tiny saved folders of every head the demo page serves (tests/test_demo.py, tests/test_demo_browser.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import torch
from tiny_models import build_tokenizer, tiny_model

import hf_seq

TAGS = {0: "NOUN", 1: "VERB", 2: "DET"}
SENTIMENT = {0: "negative", 1: "neutral", 2: "positive"}
# name -> (head, config overrides)
FOLDERS = {
    "classifier": (hf_seq.RNNForSequenceClassification, {"id2label": SENTIMENT}),
    "tagger": (hf_seq.RNNForTokenClassification, {"id2label": TAGS}),
    "lm": (hf_seq.RNNForCausalLM, {}),
    "rnn_translator": (hf_seq.RNNSeq2SeqForConditionalGeneration, {}),
    "transformer_translator": (hf_seq.TransformerForConditionalGeneration, {"decoder_layers": 2}),
    "bert_mlm": (hf_seq.BertForMaskedLM, {}),
}


def save_tiny_folder(name: str, root: Path) -> Path:
    """``root/name``: the tiny model of :data:`FOLDERS` ``name`` with its tokenizer, a few steps trained to copy its
    input (so that beams and samples differ from a random model's), saved with ``save_pretrained``."""
    head, overrides = FOLDERS[name]
    tokenizer = build_tokenizer()
    tokenizer.mask_token = "[MASK]"
    model = tiny_model(head, len(tokenizer), **overrides)
    if model.config.is_encoder_decoder:
        model.generation_config.max_length = 12
        _train_to_copy(model, tokenizer)
    folder = root / name
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _train_to_copy(model, tokenizer, steps: int = 40) -> None:
    from tiny_models import TEXTS

    enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    torch.manual_seed(0)
    model.train()
    for _ in range(steps):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a page or Space the test serves)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
