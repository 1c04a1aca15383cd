"""Tiny models of every hf_seq family and head, a shared word-level tokenizer and matching inputs.

Used by the sharing/scaling tests (test_hub.py, test_mixed_precision.py, test_loading_errors.py): one place that
knows how to build a small instance of each registered head and feed it a batch.
"""

from __future__ import annotations

import inspect

import torch

import hf_seq

TEXTS = [
    "a cat sat on the mat .",
    "the dog ate my homework and then it slept",
    "let there be light",
]
SPECIALS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]", "[CLS]", "[SEP]", "[MASK]")  # ids 0..6
PAD, UNK, BOS, EOS = 0, 1, 2, 3

# family -> (config factory kwargs, heads); the first head of each family is the one the fast tests use
FAMILIES: dict[str, tuple[type, dict, list[type]]] = {
    "rnn": (
        hf_seq.HfSeqRNNConfig,
        dict(
            embedding_size=6,
            hidden_size=5,
            num_hidden_layers=1,
            cell="lstm",
            bidirectional=True,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
        ),
        [hf_seq.RNNForSequenceClassification, hf_seq.RNNModel, hf_seq.RNNForTokenClassification, hf_seq.RNNForCausalLM],
    ),
    "rnn_seq2seq": (
        hf_seq.HfSeqRNNSeq2SeqConfig,
        dict(
            embedding_size=8,
            hidden_size=10,
            attention="additive",
            dropout=0.0,
            max_target_length=16,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=BOS,
        ),
        [hf_seq.RNNSeq2SeqForConditionalGeneration, hf_seq.RNNSeq2SeqModel],
    ),
    "transformer": (
        hf_seq.HfSeqTransformerConfig,
        dict(
            hidden_size=16,
            encoder_layers=1,
            decoder_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            dropout=0.0,
            max_position_embeddings=32,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=BOS,
        ),
        [hf_seq.TransformerForConditionalGeneration, hf_seq.TransformerModel],
    ),
    "bert": (
        hf_seq.HfSeqBertConfig,
        dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=24,
            max_position_embeddings=32,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=PAD,
        ),
        [
            hf_seq.BertForMaskedLM,
            hf_seq.BertModel,
            hf_seq.BertForPreTraining,
            hf_seq.BertForSequenceClassification,
            hf_seq.BertForTokenClassification,
        ],
    ),
}
ALL_HEADS = [(family, head) for family, (_, _, heads) in FAMILIES.items() for head in heads]
FIRST_HEADS = [(family, heads[0]) for family, (_, _, heads) in FAMILIES.items()]


def registered_heads() -> list[tuple[str, type]]:
    """Every ``(Auto class name, model class)`` that ``import hf_seq`` registered with transformers' Auto classes
    (``hf_seq.auto_heads()``, filled by the registration itself: a newly registered head is included without editing
    any list here)."""
    return sorted(
        ((auto_name, model_cls) for heads in hf_seq.auto_heads().values() for auto_name, model_cls in heads.items()),
        key=lambda pair: (pair[0], pair[1].__name__),
    )


def family_of(head: type) -> str:
    """The :data:`FAMILIES` key of ``head`` (by its config class; KeyError for a family without a tiny config)."""
    for family, (config_cls, _, _) in FAMILIES.items():
        if head.config_class is config_cls:
            return family
    raise KeyError(f"no tiny config for {head.__name__} (config {head.config_class.__name__}): add it to FAMILIES")


def build_tokenizer():
    """A word-level ``PreTrainedTokenizerFast`` over :data:`TEXTS` (specials first, so PAD=0, BOS=2, EOS=3)."""
    from hf_seq.toolkit.tokenization import build_word_level_tokenizer

    return build_word_level_tokenizer(TEXTS, special_tokens=SPECIALS, bos_token="[BOS]", eos_token="[EOS]")


def tiny_model(head: type, vocab_size: int, seed: int = 0, **overrides):
    """A small ``head`` model (its family's tiny config, 3 labels for the classifiers) in eval mode."""
    config_cls, kwargs, _ = FAMILIES[family_of(head)]
    if head.__name__.endswith("ForCausalLM"):
        overrides = {"bidirectional": False, **overrides}  # a language model cannot read ahead
    config = config_cls(vocab_size=vocab_size, **{**kwargs, "num_labels": 3, **overrides})
    torch.manual_seed(seed)
    return head(config).eval()


def accepted(model, batch: dict) -> dict:
    """The entries of ``batch`` that ``model.forward`` takes."""
    params = inspect.signature(model.forward).parameters
    return {k: v for k, v in batch.items() if k in params}


def model_inputs(model, tokenizer, texts=TEXTS, labels: bool = False) -> dict:
    """A padded batch of ``texts`` for ``model`` (decoder inputs for encoder-decoders; labels when asked)."""
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    batch_size, length = batch["input_ids"].shape
    name = type(model).__name__
    if model.config.is_encoder_decoder:
        target = torch.tensor([[BOS, 7, 8, 9, EOS], [BOS, 10, 11, EOS, PAD], [BOS, 12, EOS, PAD, PAD]])[:batch_size]
        if labels and "labels" in inspect.signature(model.forward).parameters:
            batch["labels"] = torch.where(target[:, 1:] == PAD, -100, target[:, 1:])  # (B, 4)
        else:
            batch["decoder_input_ids"] = target[:, :-1]  # (B, 4)
    elif labels:
        if name.endswith("ForSequenceClassification"):
            batch["labels"] = torch.arange(batch_size) % 3
        elif name.endswith("ForTokenClassification"):
            batch["labels"] = torch.where(batch["attention_mask"].bool(), batch["input_ids"] % 3, -100)
        elif name.endswith(("ForCausalLM", "ForMaskedLM")):
            batch["labels"] = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
        elif name.endswith("ForPreTraining"):
            batch["labels"] = torch.where(batch["attention_mask"].bool(), batch["input_ids"], -100)
            batch["next_sentence_label"] = torch.arange(batch_size) % 2
    if "token_type_ids" in inspect.signature(model.forward).parameters:
        batch["token_type_ids"] = torch.zeros(batch_size, length, dtype=torch.long)
    return accepted(model, batch)


def main_output(output) -> torch.Tensor:
    """The tensor to compare for a model output: logits / prediction logits, else the last hidden state."""
    for key in ("logits", "prediction_logits", "last_hidden_state"):
        value = output.get(key) if hasattr(output, "get") else None
        if value is not None:
            return value
    return output[0]
