"""Write the splits of a preset (or any ``hf_seq.toolkit.data.load_data`` source) as users' files: one file per split.

    python scripts/export_dataset.py hf_seq/sentiment exports/sentiment --format csv
    python scripts/export_dataset.py hf_seq/brown exports/pos --format jsonl --columns tokens coarse_tags:tags
    python scripts/export_dataset.py hf_seq/shakespeare exports/shakespeare --format txt --columns text
    python scripts/export_dataset.py hf_seq/translation exports/en-es --format jsonl --columns translation
    python scripts/export_dataset.py hf_seq/brown_documents exports/brown --format txt --columns paragraphs

``--columns`` keeps (and with ``old:new`` renames) columns; ``ClassLabel`` values are written as their names.
``txt`` writes one column: text rows one after the other (a newline added where a row has none), or documents
(lists of sentences or of paragraphs) in BERT's pretraining format — a sentence per line, a blank line between
documents. The files are what ``--train_file`` / ``--validation_file`` / ``--test_file`` of the train scripts read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from datasets import ClassLabel, Dataset

from hf_seq.toolkit.data import load_data

FORMATS = ("csv", "tsv", "jsonl", "parquet", "txt")


def readable(dataset: Dataset, columns: list[str] | None) -> Dataset:
    """The chosen (renamed) columns, ClassLabel ids replaced by their names."""
    if columns:
        pairs = [c.split(":", 1) if ":" in c else [c, c] for c in columns]
        dataset = dataset.select_columns([old for old, _ in pairs])
    else:
        pairs = [[c, c] for c in dataset.column_names]
    rows = dataset.to_dict()
    for old, _ in pairs:
        feature = dataset.features[old]
        inner = getattr(feature, "feature", None)
        if isinstance(feature, ClassLabel):
            rows[old] = [feature.names[i] for i in rows[old]]
        elif isinstance(inner, ClassLabel):
            rows[old] = [[inner.names[i] for i in row] for row in rows[old]]
    return Dataset.from_dict({new: rows[old] for old, new in pairs})


def text_file(dataset: Dataset) -> str:
    """One column as a txt file: text rows, or documents in BERT's format."""
    if len(dataset.column_names) != 1:
        raise SystemExit(f"--format txt writes one column; choose it with --columns (columns: {dataset.column_names})")
    rows = dataset[dataset.column_names[0]]
    if rows and isinstance(rows[0], list):  # documents: sentences, or paragraphs of sentences
        docs = [[s for item in doc for s in ([item] if isinstance(item, str) else item)] for doc in rows]
        return "\n\n".join("\n".join(doc) for doc in docs) + "\n"
    return "".join(row if row.endswith("\n") else row + "\n" for row in rows)


def main(argv: list[str] | None = None) -> dict[str, str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset_name", help="a preset (hf_seq/sentiment, ...), a folder or a datasets name")
    parser.add_argument("output_dir")
    parser.add_argument("--format", choices=FORMATS, default="csv")
    parser.add_argument("--columns", nargs="+", help="columns to keep, old:new renames")
    parser.add_argument("--split_seed", type=int, default=42)
    args = parser.parse_args(argv)
    splits = load_data(args.dataset_name, split_seed=args.split_seed, require_validation=False)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, split in splits.items():
        table = readable(split, args.columns)
        path = out / f"{name}.{args.format}"
        if args.format == "txt":
            path.write_text(text_file(table), encoding="utf-8")
        elif args.format in ("csv", "tsv"):
            table.to_csv(path, index=False, sep="," if args.format == "csv" else "\t")
        elif args.format == "jsonl":
            table.to_json(path, lines=True, force_ascii=False)
        else:
            table.to_parquet(path)
        written[name] = str(path)
        print(f"{name}: {len(table)} rows -> {path}")
    (out / "source.json").write_text(json.dumps({"dataset_name": args.dataset_name, "files": written}, indent=2))
    return written


if __name__ == "__main__":
    main()
