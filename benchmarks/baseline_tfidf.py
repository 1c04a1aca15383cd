"""TF-IDF + logistic-regression baseline on the sentiment splits of ``hf_seq.toolkit.data.load_sentiment``.

Fits on ``train``, chooses the inverse regularisation strength ``C`` by ``validation`` accuracy, then reports the
accuracy on ``test`` once. Writes ``benchmarks/results/baseline_tfidf.json`` and prints it.

    python benchmarks/baseline_tfidf.py [--seed 42] [--output benchmarks/results/baseline_tfidf.json]

Needs scikit-learn (the ``bench`` extra: ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from hf_seq.toolkit.data import load_sentiment  # noqa: E402

C_GRID = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42, help="split seed of load_sentiment (default 42)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "baseline_tfidf.json")
    args = parser.parse_args(argv)

    import sklearn
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    start = time.perf_counter()
    data = load_sentiment(seed=args.seed)
    vectorizer_params = {"ngram_range": (1, 2), "min_df": 1, "sublinear_tf": True, "lowercase": True}
    vectorizer = TfidfVectorizer(**vectorizer_params)
    x_train = vectorizer.fit_transform(data["train"]["text"])  # vocabulary from train only
    x_val = vectorizer.transform(data["validation"]["text"])
    x_test = vectorizer.transform(data["test"]["text"])
    y_train, y_val, y_test = data["train"]["label"], data["validation"]["label"], data["test"]["label"]

    validation = {}
    models = {}
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000)
        model.fit(x_train, y_train)
        validation[str(c)] = accuracy_score(y_val, model.predict(x_val))
        models[c] = model
    best_c = max(C_GRID, key=lambda c: (validation[str(c)], -c))  # ties → the stronger regularisation
    test_accuracy = accuracy_score(y_test, models[best_c].predict(x_test))
    majority = max(sum(y_test), len(y_test) - sum(y_test)) / len(y_test)

    result = {
        "task": "sentiment (Rotten Tomatoes critic snippets, hf_seq.toolkit.data.load_sentiment)",
        "model": "TF-IDF (word 1-2 grams, sublinear tf) + LogisticRegression",
        "seed": args.seed,
        "split_sizes": {k: len(v) for k, v in data.items()},
        "vectorizer": {k: list(v) if isinstance(v, tuple) else v for k, v in vectorizer_params.items()},
        "num_features": len(vectorizer.vocabulary_),
        "C_grid": list(C_GRID),
        "validation_accuracy": validation,
        "best_C": best_c,
        "best_validation_accuracy": validation[str(best_c)],
        "test_accuracy": test_accuracy,
        "test_majority_class_accuracy": majority,
        "seconds": round(time.perf_counter() - start, 2),
        "command": "python benchmarks/baseline_tfidf.py" + ("" if args.seed == 42 else f" --seed {args.seed}"),
        "versions": {"python": platform.python_version(), "scikit-learn": sklearn.__version__},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
