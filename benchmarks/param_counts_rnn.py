"""Parameter counts of the notes' recipes, from real model instances, beside the notes' (Keras) formulas.

    python benchmarks/param_counts_rnn.py     # prints a markdown table, writes benchmarks/results/param_counts_rnn.json

Formulas of the notes (x = input size, h = state size): SimpleRNN h·(h+x) weights (+h bias in Keras);
LSTM 4·h·(h+x) (+4h bias); the 20×8 logistic-regression head 160 weights + 1 bias = 161. PyTorch keeps two bias
vectors per gate block (b_ih and b_hh; their sum is the notes' b), so a recurrent layer has one extra h (rnn),
4h (lstm) or 3h (gru, like Keras' reset_after=True GRU) parameters. A ``num_labels=2`` softmax head has two rows
where the notes' sigmoid head has one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hf_seq.configuration_rnn import HfSeqRNNConfig  # noqa: E402
from hf_seq.modeling_rnn import RNNForSequenceClassification  # noqa: E402

GATES = {"rnn": 1, "lstm": 4, "gru": 3}

RECIPES = {
    "logistic regression (notes: Embedding(10k, 8), Flatten 20x8, Dense(1, sigmoid))": dict(
        cell="none", embedding_size=8, pooling="flatten", max_seq_length=20
    ),
    "SimpleRNN(32), x=32": dict(cell="rnn", embedding_size=32, hidden_size=32),
    "LSTM(32), x=32": dict(cell="lstm", embedding_size=32, hidden_size=32),
    "stacked LSTM 3x32, x=32": dict(cell="lstm", embedding_size=32, hidden_size=32, num_hidden_layers=3),
    "bidirectional LSTM(32), x=32": dict(cell="lstm", embedding_size=32, hidden_size=32, bidirectional=True),
    "GRU(32), x=32": dict(cell="gru", embedding_size=32, hidden_size=32),
}


def notes_layer_formula(cell: str, x: int, h: int) -> tuple[str, int]:
    g = GATES[cell]
    prefix = "" if g == 1 else f"{g}·"
    return f"{prefix}h·(h+x) + {prefix}h = {g * h * (h + x) + g * h}", g * h * (h + x) + g * h


def rows_for(name: str, kwargs: dict, vocab: int = 10000) -> list[dict]:
    rows = []
    sigmoid = RNNForSequenceClassification(
        HfSeqRNNConfig(vocab_size=vocab, num_labels=1, problem_type="multi_label_classification", **kwargs)
    )
    softmax = RNNForSequenceClassification(HfSeqRNNConfig(vocab_size=vocab, num_labels=2, **kwargs))
    emb = sigmoid.get_input_embeddings().weight.numel()
    rows.append(
        {
            "recipe": name,
            "layer": "embedding",
            "notes_formula": f"vocab·x = {vocab}·{kwargs['embedding_size']}",
            "notes": vocab * kwargs["embedding_size"],
            "hf_seq": emb,
            "difference": "—",
        }
    )
    encoder = sigmoid.rnn.encoder
    if encoder is not None:
        for k, layer in enumerate(encoder.layers):
            x = encoder.input_size if k == 0 else encoder.output_size
            h = encoder.hidden_size
            formula, per_direction = notes_layer_formula(kwargs["cell"], x, h)
            dirs = encoder.num_directions
            notes = per_direction * dirs
            ours = sum(p.numel() for p in layer.parameters())
            rows.append(
                {
                    "recipe": name,
                    "layer": f"{kwargs['cell']} layer {k + 1}" + (" (both directions)" if dirs == 2 else ""),
                    "notes_formula": (f"2·({formula})" if dirs == 2 else formula) + f" with x={x}, h={h}",
                    "notes": notes,
                    "hf_seq": ours,
                    "difference": f"+{ours - notes} = second bias b_hh ({GATES[kwargs['cell']]}h per direction)"
                    + (
                        " (GRU is not in the notes; Keras' default reset_after=True GRU also has 2 biases)"
                        if kwargs["cell"] == "gru"
                        else ""
                    ),
                }
            )
    head_in = sigmoid.classifier.in_features
    rows.append(
        {
            "recipe": name,
            "layer": "head, 1 sigmoid output (num_labels=1, multi_label_classification)",
            "notes_formula": f"{head_in} + 1",
            "notes": head_in + 1,
            "hf_seq": sum(p.numel() for p in sigmoid.classifier.parameters()),
            "difference": "0",
        }
    )
    rows.append(
        {
            "recipe": name,
            "layer": "head, 2-way softmax (num_labels=2, the default)",
            "notes_formula": f"{head_in} + 1",
            "notes": head_in + 1,
            "hf_seq": sum(p.numel() for p in softmax.classifier.parameters()),
            "difference": f"+{head_in + 1} = second output row",
        }
    )
    return rows


def main() -> None:
    rows = [r for name, kwargs in RECIPES.items() for r in rows_for(name, kwargs)]
    lines = ["| recipe | layer | notes' formula | notes | hf_seq | difference |", "|---|---|---|---:|---:|---|"]
    for r in rows:
        lines.append(
            f"| {r['recipe']} | {r['layer']} | {r['notes_formula']} | {r['notes']} | {r['hf_seq']} | "
            f"{r['difference']} |"
        )
    table = "\n".join(lines)
    print(table)
    out = Path(__file__).parent / "results" / "param_counts_rnn.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    out.with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
