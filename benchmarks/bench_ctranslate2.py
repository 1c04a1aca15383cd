"""The demo's trained Transformer exported to CTranslate2: parity with ``generate()`` and decoding speed.

Parity (``--parity``, the 500 test verses of the run's split, sources truncated to 64 tokens, 80 new tokens at most):
the share of verses whose CTranslate2 translation (float32, int8) equals ``generate()``'s token for token, greedy and
beam 5, and sacreBLEU of each (references: the tokenized targets decoded, as the translation script scores them).
CTranslate2 decodes with ``hf_seq.toolkit.export.generate_options`` of the model's generation config (the same length
penalty; ``patience`` for ``early_stopping``). CTranslate2's beam search ends once ``round(num_beams * patience)``
hypotheses have finished (``patience`` 1 is ``generate(early_stopping=True)``); ``generate()``'s default
(``early_stopping=False``) keeps searching while a running beam's length-normalised score beats the worst finished
one, which no patience reproduces exactly, so beam 5 float32 is measured for each ``--patience`` against both
``generate()`` settings, and with ``length_penalty`` 0 (where the two searches return the same best hypothesis).

Speed (one process; every setting runs the engines one after the other, ``--repeats`` times, median of each):

* hf_seq eager ``generate()`` vs the CTranslate2 int8 export, on ``--verses`` test verses (real translations, so the
  same output lengths), batch 1 and 32, greedy and beam 5, one and two threads;
* the CTranslate2 int8 export vs a ``MarianMTModel`` of the same sizes (random weights, the same vocabulary size)
  converted by ``ct2-transformers-converter --quantization int8``; random weights give arbitrary output lengths, so
  both decode exactly ``--forced_length`` tokens (``min_decoding_length = max_decoding_length``).

Wall-clock seconds (CTranslate2 and torch both use ``threads`` threads); the 1-minute load average is recorded before
and after each setting. On a machine shared with other jobs only the ratios mean anything.

    OMP_NUM_THREADS=1 nice python benchmarks/bench_ctranslate2.py --model runs/translation_transformer_demo --parity
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import ctranslate2  # noqa: E402
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, MarianConfig, MarianMTModel  # noqa: E402

import hf_seq  # noqa: E402, F401
from hf_seq.toolkit.data import load_translation  # noqa: E402
from hf_seq.toolkit.export import ctranslate2_translate, generate_options, to_ctranslate2  # noqa: E402
from hf_seq.toolkit.metrics import load_metric  # noqa: E402

MAX_SOURCE_LENGTH = 64
MAX_NEW_TOKENS = 80  # the translation script's test decoding: max_target_length 64 + 16


def load() -> float:
    return round(os.getloadavg()[0], 2)


MAX_WORDS = 25  # the recipe's length filter, for a folder without results.json (a checkpoint)


def test_split(run_dir: Path, count: int) -> tuple[list[str], list[str]]:
    results_file = run_dir / "results.json"
    max_words = json.loads(results_file.read_text())["data"]["max_words"] if results_file.is_file() else MAX_WORDS
    test = load_translation(max_words=max_words)["test"]
    rows = [test[i]["translation"] for i in range(min(count, len(test)))]
    return [r["en"] for r in rows], [r["es"] for r in rows]


def generate_ids(model, tokenizer, sources, num_beams, batch_size, max_new=MAX_NEW_TOKENS, forced=False, **options):
    """generate()'s target ids (start token, end token and padding removed), in order."""
    out = []
    for i in range(0, len(sources), batch_size):
        enc = tokenizer(
            sources[i : i + batch_size],
            padding=True,
            truncation=True,
            max_length=MAX_SOURCE_LENGTH,
            return_tensors="pt",
        )
        extra = {"min_new_tokens": max_new} if forced else {}
        with torch.no_grad():
            seqs = model.generate(
                **enc, num_beams=num_beams, max_new_tokens=max_new, do_sample=False, **extra, **options
            )
        eos = model.config.eos_token_id
        for row in seqs[:, 1:].tolist():
            out.append(row[: row.index(eos)] if eos in row else row)
    return out


def ct2_ids(translator, tokenizer, sources, num_beams, batch_size, forced_length=None, generation_config=None, **kw):
    """CTranslate2's target ids with the search options of ``generate()`` under ``generation_config``."""
    options = dict(kw)
    if forced_length is not None:
        options["min_decoding_length"] = forced_length
    return ctranslate2_translate(
        translator,
        tokenizer,
        sources,
        num_beams=num_beams,
        max_new_tokens=forced_length or MAX_NEW_TOKENS,
        batch_size=batch_size,
        max_source_length=MAX_SOURCE_LENGTH,
        generation_config=generation_config,
        **options,
    )


def bleu_of(tokenizer, ids, references) -> float:
    bleu = load_metric("sacrebleu")
    hyps = [t.strip() for t in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    return round(bleu.compute(predictions=hyps, references=[[r] for r in references])["score"], 2)


def share(a, b) -> float:
    return sum(x == y for x, y in zip(a, b)) / len(a)


def who_scores_higher(translator, tokenizer, sources, ours, theirs, length_penalty=1.0) -> dict:
    """On the verses where two beam searches disagree: whose translation has the higher length-normalised score
    (summed log-probabilities, end token included, / length ** length_penalty; scored by ``translator``)."""
    rows = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if not rows:
        return {"differing": 0}
    src = [
        tokenizer.convert_ids_to_tokens(x)
        for x in tokenizer([sources[i] for i in rows], truncation=True, max_length=MAX_SOURCE_LENGTH)["input_ids"]
    ]

    def normalised(ids):
        results = translator.score_batch(src, [tokenizer.convert_ids_to_tokens(x) for x in ids])
        return [sum(r.log_probs) / len(r.log_probs) ** length_penalty for r in results]

    a, b = normalised([ours[i] for i in rows]), normalised([theirs[i] for i in rows])
    return {
        "differing": len(rows),
        "ct2_higher": sum(x > y + 1e-5 for x, y in zip(a, b)),
        "generate_higher": sum(y > x + 1e-5 for x, y in zip(a, b)),
    }


def parity(model, tokenizer, folders: dict[str, Path], run_dir: Path, count: int, patiences: list[float]) -> dict:
    sources, targets = test_split(run_dir, count)
    labels = tokenizer(text_target=targets, max_length=MAX_SOURCE_LENGTH, truncation=True)["input_ids"]
    references = [t.strip() for t in tokenizer.batch_decode([x[:64] for x in labels], skip_special_tokens=True)]
    torch.set_num_threads(1)
    config = model.generation_config
    out: dict = {"verses": len(sources), "load_before": load(), "ct2_options_beam5": generate_options(config, 5)}
    hf = {beams: generate_ids(model, tokenizer, sources, beams, 100) for beams in (1, 5)}
    hf_early = generate_ids(model, tokenizer, sources, 5, 100, early_stopping=True)
    hf_lp0 = generate_ids(model, tokenizer, sources, 5, 100, length_penalty=0.0)
    out["bleu"] = {
        "generate": {"greedy": bleu_of(tokenizer, hf[1], references), "beam5": bleu_of(tokenizer, hf[5], references)},
        "generate_early_stopping": {"beam5": bleu_of(tokenizer, hf_early, references)},
        "generate_length_penalty_0": {"beam5": bleu_of(tokenizer, hf_lp0, references)},
    }
    for name, folder in folders.items():
        translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
        ids = {beams: ct2_ids(translator, tokenizer, sources, beams, 100, generation_config=config) for beams in (1, 5)}
        out["bleu"][name] = {
            "greedy": bleu_of(tokenizer, ids[1], references),
            "beam5": bleu_of(tokenizer, ids[5], references),
        }
        out[f"{name}_greedy_identical_share"] = share(ids[1], hf[1])
        out[f"{name}_beam5_identical_share"] = share(ids[5], hf[5])
        if name != "ct2_float32":
            continue
        sweep = {}
        for patience in patiences:
            got = ct2_ids(translator, tokenizer, sources, 5, 100, generation_config=config, patience=patience)
            sweep[str(patience)] = {
                "bleu": bleu_of(tokenizer, got, references),
                "identical_share_vs_generate": share(got, hf[5]),
                "identical_share_vs_early_stopping": share(got, hf_early),
                "vs_generate_higher_score": who_scores_higher(translator, tokenizer, sources, got, hf[5]),
            }
        out["ct2_float32_beam5_patience"] = sweep
        got = ct2_ids(translator, tokenizer, sources, 5, 100, generation_config=config, length_penalty=0.0)
        out["ct2_float32_beam5_length_penalty_0"] = {
            "bleu": bleu_of(tokenizer, got, references),
            "identical_share_vs_generate_length_penalty_0": share(got, hf_lp0),
        }
    out["load_after"] = load()
    return out


def marian_tokenizer(tokenizer):
    """A word-level tokenizer with the hf_seq tokens at the same ids plus ``<pad>`` last: the layout
    ct2-transformers-converter expects of a Marian vocabulary (it drops the last row, Marian's decoder-start pad)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    tokens = [f"{t}_" if t == "<pad>" else t for t in tokens] + ["<pad>"]
    unk = tokenizer.unk_token if tokenizer.unk_token in tokens else tokens[0]
    backend = Tokenizer(WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=unk))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token=tokenizer.eos_token, unk_token=unk
    )


def convert_marian(model, tokenizer, workdir: Path) -> Path:
    """A MarianMTModel of the hf_seq model's sizes (random weights), converted by ct2-transformers-converter."""
    c = model.config
    vocab = len(tokenizer) + 1  # + Marian's pad, which the converter drops again
    marian = MarianMTModel(
        MarianConfig(
            vocab_size=vocab,
            decoder_vocab_size=vocab,
            d_model=c.hidden_size,
            encoder_layers=c.encoder_layers,
            decoder_layers=c.decoder_layers,
            encoder_attention_heads=c.num_attention_heads,
            decoder_attention_heads=c.num_attention_heads,
            encoder_ffn_dim=c.intermediate_size,
            decoder_ffn_dim=c.intermediate_size,
            activation_function=c.activation_function,
            max_position_embeddings=c.max_position_embeddings,
            scale_embedding=c.scale_embedding,
            pad_token_id=vocab - 1,
            eos_token_id=c.eos_token_id,
            decoder_start_token_id=vocab - 1,
            forced_eos_token_id=c.eos_token_id,
            share_encoder_decoder_embeddings=True,
        )
    ).eval()
    source = workdir / "marian"
    marian.save_pretrained(source)
    marian_tokenizer(tokenizer).save_pretrained(source)
    target = workdir / "marian_ct2_int8"
    converter = Path(sys.executable).with_name("ct2-transformers-converter")
    command = [str(converter), "--model", str(source), "--output_dir", str(target), "--quantization", "int8"]
    done = subprocess.run([*command, "--force"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ct2-transformers-converter failed:\n{done.stderr[-2000:]}")
    return target


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def speed(model, tokenizer, ours: Path, marian: Path, run_dir: Path, args) -> list[dict]:
    sources, _ = test_split(run_dir, args.verses)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        ct2 = ctranslate2.Translator(str(ours), device="cpu", intra_threads=threads)
        ct2_marian = ctranslate2.Translator(str(marian), device="cpu", intra_threads=threads)
        for batch in args.batches:
            for beams in args.beams:
                row = {
                    "threads": threads,
                    "batch": batch,
                    "num_beams": beams,
                    "verses": len(sources),
                    "load_before": load(),
                }
                times = {"generate": [], "ct2_int8": [], "ct2_int8_forced": [], "marian_ct2_int8_forced": []}
                tokens = {}
                runs = {
                    "generate": lambda b=beams, n=batch: generate_ids(model, tokenizer, sources, b, n),
                    "ct2_int8": lambda b=beams, n=batch, t=ct2: ct2_ids(t, tokenizer, sources, b, n),
                    "ct2_int8_forced": lambda b=beams, n=batch, t=ct2: ct2_ids(
                        t, tokenizer, sources, b, n, args.forced_length
                    ),
                    "marian_ct2_int8_forced": lambda b=beams, n=batch, t=ct2_marian: ct2_ids(
                        t, tokenizer, sources, b, n, args.forced_length
                    ),
                }
                for _ in range(args.repeats):  # the engines alternate
                    for name, run in runs.items():
                        times[name].append(timed(run))
                tokens["ct2_int8"] = sum(len(r) for r in ct2_ids(ct2, tokenizer, sources, beams, batch))
                tokens["generate"] = sum(len(r) for r in generate_ids(model, tokenizer, sources, beams, batch))
                medians = {k: statistics.median(v) for k, v in times.items()}
                row.update(
                    seconds_median=medians,
                    seconds_all=times,
                    new_tokens=tokens,
                    speedup_ct2_int8_vs_generate=medians["generate"] / medians["ct2_int8"],
                    ct2_int8_vs_marian_ct2_int8=medians["marian_ct2_int8_forced"] / medians["ct2_int8_forced"],
                    load_after=load(),
                )
                print(
                    f"threads {threads} batch {batch:>2} beams {beams}: generate {medians['generate']:.2f}s, "
                    f"ct2 int8 {medians['ct2_int8']:.2f}s ({row['speedup_ct2_int8_vs_generate']:.1f}x); forced "
                    f"{args.forced_length} tokens: ours {medians['ct2_int8_forced']:.2f}s, Marian "
                    f"{medians['marian_ct2_int8_forced']:.2f}s (Marian/ours {row['ct2_int8_vs_marian_ct2_int8']:.2f}); "
                    f"load {row['load_before']} -> {row['load_after']}",
                    flush=True,
                )
                rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="runs/translation_transformer_demo", help="A translation run folder.")
    parser.add_argument("--parity", action="store_true", help="Also measure parity on the test verses.")
    parser.add_argument("--parity_verses", type=int, default=500)
    parser.add_argument(
        "--patience",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[1.0, 1.5, 2.0, 3.0, 4.0],
        help="CTranslate2 beam-5 patience factors measured against generate() (with --parity).",
    )
    parser.add_argument("--verses", type=int, default=64, help="Test verses per speed measurement.")
    parser.add_argument("--threads", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    parser.add_argument("--beams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 5])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--forced_length", type=int, default=32)
    parser.add_argument("--no_speed", action="store_true")
    parser.add_argument("--output", default=str(REPO_ROOT / "benchmarks" / "results" / "bench_ctranslate2.json"))
    args = parser.parse_args()

    run_dir = Path(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(run_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    workdir = Path(tempfile.mkdtemp())
    folders = {q: to_ctranslate2(run_dir, workdir / f"ct2_{q}", quantization=q) for q in ("float32", "int8")}
    report: dict = {
        "command": "python " + " ".join(sys.argv),
        "model": str(run_dir),
        "parameters": sum(p.numel() for p in model.parameters()),
        "ctranslate2": ctranslate2.__version__,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if args.parity:
        report["parity"] = parity(
            model,
            tokenizer,
            {"ct2_float32": folders["float32"], "ct2_int8": folders["int8"]},
            run_dir,
            args.parity_verses,
            args.patience,
        )
        print(json.dumps(report["parity"], indent=1), flush=True)
    if not args.no_speed:
        marian = convert_marian(model, tokenizer, workdir)
        report["speed"] = speed(model, tokenizer, folders["int8"], marian, run_dir, args)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
