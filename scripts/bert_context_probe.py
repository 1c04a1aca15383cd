"""Does a pretrained BERT use the context? Masked-LM accuracy on the held-out Brown test pairs, split by how each
selected token was corrupted, with the real context and with every unselected token replaced by a random one.

    python scripts/bert_context_probe.py runs/bert-pretrain-brown-4 [--pairs 512]

The test pairs are those of ``train_scripts/pretrain_bert.py`` (same document split, same per-example seeds). A
selected token is shown to the model as ``[MASK]`` (80 %), as a random token (10 %) or unchanged (10 %). Accuracy on
the ``[MASK]`` positions is the contextual masked-LM skill; on the unchanged positions a model can score by copying
its input. If the ``[MASK]`` accuracy barely moves when the context is randomised, the encoder predicts from word
frequencies alone (the masked-LM plateau).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_seq import BertForPreTraining  # noqa: E402
from hf_seq.toolkit.collators import DataCollatorForBertPretraining, bert_pretraining_anchors, tokenize_documents  # noqa: E402
from hf_seq.toolkit.data import load_brown_documents  # noqa: E402

TEST_SEED_OFFSET = 2_000_000  # pretrain_bert.py's per-example seeds of the test pairs


def test_batch(folder: str, pairs: int, max_length: int, data_seed: int) -> tuple[dict, object]:
    """The first ``pairs`` fixed test pairs of the pretraining script, and the tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    docs = tokenize_documents(load_brown_documents(seed=data_seed)["test"]["paragraphs"], tokenizer)
    anchors = bert_pretraining_anchors(docs, max_length)
    features = [
        {"doc_index": d, "sentence_index": s, "example_seed": TEST_SEED_OFFSET + i}
        for i, (d, s) in enumerate(zip(anchors["doc_index"], anchors["sentence_index"]))
    ][:pairs]
    return DataCollatorForBertPretraining(tokenizer, docs, max_length=max_length)(features), tokenizer


@torch.no_grad()
def probe(model: BertForPreTraining, batch: dict, tokenizer, seed: int = 0) -> dict[str, dict[str, float]]:
    """Masked-LM accuracy per corruption kind, with the real and with a randomised context."""
    labels, input_ids = batch["labels"], batch["input_ids"]
    selected = labels != -100  # (B, T)
    kinds = {
        "mask": selected & (input_ids == tokenizer.mask_token_id),
        "kept": selected & (input_ids == labels),
    }
    kinds["random"] = selected & ~kinds["mask"] & ~kinds["kept"]
    kinds["all"] = selected
    special = torch.isin(input_ids, torch.tensor(sorted(set(tokenizer.all_special_ids))))
    generator = torch.Generator().manual_seed(seed)
    noise = torch.randint(len(tokenizer.all_special_ids), len(tokenizer), input_ids.shape, generator=generator)
    keep = selected | special | (batch["attention_mask"] == 0)
    contexts = {"real context": input_ids, "random context": torch.where(keep, input_ids, noise)}
    results = {}
    for name, ids in contexts.items():
        logits = model(
            input_ids=ids, attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
        ).prediction_logits  # (B, T, V)
        hits = logits.argmax(-1) == labels  # (B, T)
        results[name] = {kind: round(float(hits[where].float().mean()), 4) for kind, where in kinds.items()}
    results["share of selected tokens"] = {
        kind: round(float(where.sum() / selected.sum()), 4) for kind, where in kinds.items()
    }
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="a folder saved by train_scripts/pretrain_bert.py")
    parser.add_argument("--pairs", type=int, default=512, help="number of test pairs (default 512)")
    parser.add_argument("--data_seed_split", type=int, default=42, help="seed of the Brown document split")
    args = parser.parse_args(argv)
    model = BertForPreTraining.from_pretrained(args.folder, sparse_prediction=False).eval()
    batch, tokenizer = test_batch(args.folder, args.pairs, model.config.max_position_embeddings, args.data_seed_split)
    results = probe(model, batch, tokenizer)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
