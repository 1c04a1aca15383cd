"""The training front door without training: ``hf_seq.toolkit.data.load_data`` (user files, folders, presets, the seeded
validation hold-out, errors naming the file) and the one recipe schema / argument parser of every train script
(each recipe in configs/ parses; wrong JSON, keys, types and values fail up front, naming the file, the key and what
is expected)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from hf_seq.train_scripts import (
    finetune_bert,
    pretrain_bert,
    train_classifier,
    train_lm,
    train_tagger,
    train_translation,
    train_word_vectors,
)
from hf_seq.train_scripts.arguments import RecipeError, parse_args, recipe_type
from own_data import write_table

from hf_seq.toolkit import data as D

REPO = Path(__file__).resolve().parents[1]
ROWS = [{"text": f"review number {i}", "label": "pos" if i % 3 else "neg"} for i in range(20)]


# ------------------------------------------------------------------------------------------------- load_data
@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".json", ".parquet"])
def test_load_data_reads_each_file_type_and_names_the_source(tmp_path, suffix):
    train = write_table(tmp_path / f"train{suffix}", ROWS[:12])
    validation = write_table(tmp_path / f"dev{suffix}", ROWS[12:16])
    test = write_table(tmp_path / f"test{suffix}", ROWS[16:])
    splits = D.load_data(train_file=str(train), validation_file=str(validation), test_file=str(test))
    assert {k: len(v) for k, v in splits.items()} == {"train": 12, "validation": 4, "test": 4}
    assert splits["test"]["text"] == [r["text"] for r in ROWS[16:]] and splits["train"]["label"][0] == "neg"
    assert D.split_source(splits["validation"]) == str(validation)


def test_txt_files_keep_their_lines_and_line_breaks_only_where_allowed(tmp_path):
    text = "first line\n\nthird line\n"
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    splits = D.load_data(train_file=str(path), allow_text_files=True, require_validation=False)
    assert splits["train"]["text"] == ["first line\n", "\n", "third line\n"]
    assert "".join(splits["train"]["text"]) == text  # a char LM sees the file as it is
    with pytest.raises(D.DataError, match=r"corpus\.txt.*unsupported file type '\.txt'.*language-model"):
        D.load_data(train_file=str(path))


def test_validation_hold_out_is_seeded_disjoint_and_keeps_row_order(tmp_path):
    train = write_table(tmp_path / "train.csv", ROWS)
    a = D.load_data(train_file=str(train), validation_split_percentage=25, split_seed=1)
    b = D.load_data(train_file=str(train), validation_split_percentage=25, split_seed=1)
    c = D.load_data(train_file=str(train), validation_split_percentage=25, split_seed=2)
    assert len(a["validation"]) == 5 and len(a["train"]) == 15 and "test" not in a
    assert list(a["validation"]["text"]) == list(b["validation"]["text"]) != list(c["validation"]["text"])
    order = [r["text"] for r in ROWS]
    assert sorted([*a["train"]["text"], *a["validation"]["text"]], key=order.index) == order  # a partition
    for split in ("train", "validation"):  # reading order kept inside each split
        assert list(a[split]["text"]) == sorted(a[split]["text"], key=order.index)
    assert "25% held out for validation, seed 1" in D.split_source(a["validation"])
    with pytest.raises(D.DataError, match="without a validation split"):
        D.load_data(train_file=str(train), validation_split_percentage=None)


def test_folders_save_to_disk_and_split_aliases(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    write_table(folder / "train.csv", ROWS[:14])
    write_table(folder / "valid.csv", ROWS[14:17])
    write_table(folder / "test.csv", ROWS[17:])
    splits = D.load_data(str(folder))
    assert {k: len(v) for k, v in splits.items()} == {"train": 14, "validation": 3, "test": 3}
    saved = tmp_path / "saved"
    DatasetDict({"train": Dataset.from_list(ROWS[:15]), "dev": Dataset.from_list(ROWS[15:])}).save_to_disk(saved)
    splits = D.load_data(str(saved))
    assert {k: len(v) for k, v in splits.items()} == {"train": 15, "validation": 5}
    assert D.split_source(splits["validation"]) == f"{saved} (validation split)"
    single = tmp_path / "single"
    Dataset.from_list(ROWS).save_to_disk(single)  # one Dataset: its training split, 5% held out
    assert {k: len(v) for k, v in D.load_data(str(single)).items()} == {"train": 19, "validation": 1}


def test_load_data_errors_name_the_file_and_what_is_wrong(tmp_path):
    good = write_table(tmp_path / "train.csv", ROWS)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    header = tmp_path / "header.csv"
    header.write_text("text,label\n")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text('{"text": "a", "label": 1}\nnot json at all\n')
    sheet = tmp_path / "data.xlsx"
    sheet.write_bytes(b"PK\x03\x04")
    cases = [
        ({"train_file": str(empty)}, r"`train_file` .*empty\.csv is empty"),
        ({"train_file": str(header)}, r"`train_file` .*header\.csv has no data rows"),
        ({"train_file": str(garbage)}, r"`train_file` .*garbage\.jsonl line 2: not valid JSON"),
        ({"train_file": str(sheet)}, r"`train_file` .*data\.xlsx: unsupported file type '\.xlsx'"),
        ({"train_file": str(tmp_path / "missing.csv")}, r"`train_file` .*missing\.csv does not exist"),
        ({"train_file": str(good), "validation_file": str(empty)}, r"`validation_file` .*empty\.csv is empty"),
        ({"dataset_name": "hf_seq/sentiment", "train_file": str(good)}, "either `dataset_name`"),
        ({}, "no training data"),
        ({"dataset_name": "hf_seq/no_such_preset"}, r"unknown dataset preset 'hf_seq/no_such_preset'.*hf_seq/ptb"),
        ({"dataset_name": str(tmp_path / "no_such_folder")}, "is neither a preset .*, a local folder, nor a data set"),
    ]
    for kwargs, message in cases:
        with pytest.raises(D.DataError, match=message):
            D.load_data(**kwargs)


# ------------------------------------------------------------------------------------------------- presets
@pytest.mark.data
@pytest.mark.parametrize(
    ("name", "loader"),
    [
        ("hf_seq/sentiment", D.load_sentiment),
        ("hf_seq/translation", D.load_translation),
        ("hf_seq/brown_documents", D.load_brown_documents),
        ("hf_seq/shakespeare", D.load_shakespeare),
        ("hf_seq/ptb", D.load_ptb),
    ],
)
def test_presets_are_the_loaders_splits(name, loader):
    preset, direct = (
        D.load_data(name, split_seed=7 if name != "hf_seq/ptb" else 42),
        (loader(seed=7) if name != "hf_seq/ptb" else loader()),
    )
    assert list(preset) == list(direct) == ["train", "validation", "test"]
    for split in direct:
        assert preset[split].to_dict() == direct[split].to_dict(), split
        assert D.split_source(preset[split]) == f"{name} ({split} split)"


@pytest.mark.data
def test_brown_preset_holds_the_same_sentences_with_class_label_tags():
    preset, direct = D.load_data("hf_seq/brown"), D.load_brown()
    coarse = preset["train"].features["coarse_tags"].feature
    full = preset["train"].features["tags"].feature
    assert isinstance(coarse, ClassLabel) and coarse.names == D.BROWN_COARSE_TAGS
    assert isinstance(full, ClassLabel) and len(full.names) == 472  # every Brown tag of the corpus: none unseen
    for split in ("validation", "test"):
        assert preset[split]["tokens"] == direct[split]["tokens"]
        assert [[coarse.names[i] for i in row] for row in preset[split]["coarse_tags"]] == direct[split]["coarse_tags"]
        assert [[full.names[i] for i in row] for row in preset[split]["tags"]] == direct[split]["tags"]
    assert len(preset["train"]) == len(direct["train"])


@pytest.mark.data
def test_unlabelled_text_preset_is_brown_ptb_and_sentiment_training_text():
    text = D.load_data("hf_seq/unlabelled_text", require_validation=False)
    brown, ptb, sentiment = D.load_brown(), D.load_ptb(), D.load_sentiment()
    n_brown = sum(len(brown[s]) for s in brown)
    assert list(text) == ["train"] and len(text["train"]) == n_brown + len(ptb["train"]) + len(sentiment["train"])
    rows = text["train"]["text"]
    assert rows[0] == " ".join(brown["train"][0]["tokens"]) and rows[-1] == sentiment["train"][-1]["text"]
    assert not set(sentiment["test"]["text"]) & set(rows[n_brown + len(ptb["train"]) :])  # no test snippet


# ------------------------------------------------------------------------------------------------- recipes
SCRIPTS = {
    "sentiment_": train_classifier,
    "pos_": train_tagger,
    "lm_": train_lm,
    "translation_": train_translation,
    "bert_pretrain": pretrain_bert,
    "bert_finetune": finetune_bert,
    "word_vectors": train_word_vectors,
}
# paths to earlier runs that a fresh checkout does not have
EXTERNAL = {"model_name_or_path": "", "pretrained_embeddings": ""}


def script_for(recipe: Path):
    return next(module for prefix, module in SCRIPTS.items() if recipe.stem.startswith(prefix))


@pytest.mark.parametrize("recipe", sorted((REPO / "configs").glob("*.json")), ids=lambda p: p.stem)
def test_every_recipe_parses_for_its_script(recipe):
    module = script_for(recipe)
    raw = json.loads(recipe.read_text())
    overrides = [f"--{key}={EXTERNAL[key]}" for key in EXTERNAL if key in raw]
    model_args, data_args, args, training_args = parse_args(module.TASK, [str(recipe), *overrides])
    assert data_args.dataset_name in D.DATASET_PRESETS  # every shipped recipe trains on a preset
    assert training_args.output_dir.startswith("runs/")
    if "model_type" in raw:
        assert model_args.model_type == raw["model_type"] and model_args.model_config == raw["model_config"]


def write_recipe(tmp_path: Path, content) -> str:
    path = tmp_path / "recipe.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def test_invalid_json_and_a_list_name_the_file_and_position(tmp_path):
    path = write_recipe(tmp_path, '{\n  "max_steps": 10,\n  "learning_rate": \n}')
    with pytest.raises(RecipeError, match=rf"recipe {path} is not valid JSON: .* line 4, column 1"):
        parse_args(train_classifier.TASK, [path])
    path = write_recipe(tmp_path, [{"max_steps": 10}])
    with pytest.raises(RecipeError, match=rf"recipe {path} must be a JSON object .*got a list"):
        parse_args(train_classifier.TASK, [path])
    with pytest.raises(RecipeError, match=r"recipe .*nothing\.json does not exist"):
        parse_args(train_classifier.TASK, [str(tmp_path / "nothing.json")])


@pytest.mark.parametrize(
    ("module", "recipe", "message"),
    [
        (train_lm, {"sample_temperatures": 1.0}, r"`sample_temperatures` 1\.0 has the wrong type: .*expected a list"),
        (train_lm, {"sample_temperatures": [0.5, "hot"]}, r"`sample_temperatures` .* wrong type: .*index 1"),
        (train_lm, {"eval_windows": "yes"}, r'`eval_windows` "yes" has the wrong type: .*expected bool'),
        (train_classifier, {"max_steps": "10"}, r'`max_steps` "10" has the wrong type: .*expected int, got str'),
        (train_classifier, {"max_steps": 10.5}, r"`max_steps` 10\.5 has the wrong type: .*expected int, got float"),
        (train_classifier, {"learning_rate": True}, r"`learning_rate` true has the wrong type"),
        (train_classifier, {"model_config": "lstm"}, r"`model_config` must be a JSON object, got \"lstm\""),
        (
            train_classifier,
            {"eval_strategy": "epochs"},
            r"`eval_strategy` \"epochs\" has the wrong type: .*one of \('no', 'steps', 'epoch'\)",
        ),
        (train_classifier, {"max_train_samples": -3}, r"`max_train_samples` must be a positive integer or null"),
    ],
)
def test_values_of_the_wrong_type_fail_up_front_naming_file_key_and_type(tmp_path, module, recipe, message):
    path = write_recipe(tmp_path, {"dataset_name": "hf_seq/sentiment", **recipe})
    with pytest.raises(RecipeError, match=rf"recipe {path}.*{message}"):
        parse_args(module.TASK, [path])


@pytest.mark.parametrize(
    ("module", "recipe", "message"),
    [
        (train_classifier, {"hidden_size": 8}, r"`hidden_size` is a field of the hf_seq_rnn config: put it under"),
        (train_classifier, {"sample_prompt": "x"}, r"unknown key `sample_prompt` .*an option of train_lm"),
        (train_classifier, {"leaning_rate": 0.1}, r"unknown key `leaning_rate` .*did you mean `learning_rate`"),
        (train_lm, {"label_column_name": "y"}, r"unknown key `label_column_name` for train_lm"),
        (
            train_classifier,
            {"model_config": {"hiden_size": 8}},
            r"`model_config` has a field `hiden_size` .*`hidden_size`",
        ),
        (train_classifier, {"model_config": {"cell": "transformer"}}, r"not a valid hf_seq_rnn config.*cell"),
        (train_classifier, {"model_type": "hf_seq_transformer"}, r"has no text classifier head \(AutoModelForSeq"),
        (train_classifier, {"model_type": "gpt9"}, r"unknown `model_type` 'gpt9'"),
        (train_classifier, {"tokenizer_kind": "char"}, r"`tokenizer_kind` must be one of \['word', 'wordpiece'\]"),
        (train_classifier, {"train_file": "reviews.txt"}, r"reviews\.txt: unsupported file type '\.txt'"),
        (train_classifier, {"train_file": "nowhere.csv"}, r"`train_file` nowhere\.csv does not exist"),
        (train_classifier, {"dataset_name": "hf_seq/sentimentt"}, r"unknown dataset preset 'hf_seq/sentimentt'"),
        (
            train_classifier,
            {"validation_split_percentage": 150},
            r"`validation_split_percentage` must be in \[0, 100\)",
        ),
        (train_classifier, {"padding_side": "top"}, r"`padding_side` must be one of \['left', 'right'\]"),
        (train_lm, {"level": "byte"}, r"`level` must be one of \['char', 'word'\]"),
        (finetune_bert, {"task": "sentiment"}, r"`task` must be one of \['text-classification'"),
        (train_translation, {"test_num_beams": "1,five"}, r"`test_num_beams` must be comma-separated positive"),
    ],
)
def test_unknown_keys_and_bad_values_fail_up_front(tmp_path, module, recipe, message):
    data = {} if "train_file" in recipe else {"dataset_name": "hf_seq/sentiment"}
    path = write_recipe(tmp_path, {**data, **recipe})
    with pytest.raises(RecipeError, match=message):
        parse_args(module.TASK, [path])


def test_command_line_is_checked_like_the_recipe(tmp_path):
    with pytest.raises(RecipeError, match=r"command line: --tokens_column_name is not an option of train_lm"):
        parse_args(train_lm.TASK, ["--dataset_name", "hf_seq/ptb", "--tokens_column_name", "words"])
    with pytest.raises(RecipeError, match=r"--hidden_size is not an option .*--config_overrides hidden_size=VALUE"):
        parse_args(train_lm.TASK, ["--dataset_name", "hf_seq/ptb", "--hidden_size", "8"])
    with pytest.raises(RecipeError, match="needs data"):
        parse_args(train_classifier.TASK, ["--output_dir", str(tmp_path)])
    with pytest.raises(RecipeError, match="either `dataset_name`"):
        parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", "--train_file", __file__])
    with pytest.raises(RecipeError, match=r"--model_config is not valid JSON"):
        parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", "--model_config", "{hidden: 8}"])
    with pytest.raises(RecipeError, match=r"`config_overrides`: hf_seq_rnn has no field `hiden`"):
        parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", "--config_overrides", "hiden=8"])
    for overrides, message in (("hidden_size=x", "`hidden_size=x`"), ("bidirectional=maybe", "`bidirectional=maybe`")):
        with pytest.raises(RecipeError, match=rf"`config_overrides`: {message}"):  # the field and its value
            parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", "--config_overrides", overrides])
    with pytest.raises(RecipeError, match=r"`model_name_or_path` no_model does not exist; pass a local folder"):
        parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", "--model_name_or_path", "no_model"])
    # the recipe gives defaults, the command line wins
    path = write_recipe(tmp_path, {"dataset_name": "hf_seq/sentiment", "model_config": {"hidden_size": 8}})
    model_args, data_args, args, training_args = parse_args(
        train_classifier.TASK, [path, "--model_config", '{"hidden_size": 4}', "--max_steps", "3"]
    )
    assert model_args.model_config == '{"hidden_size": 4}' and training_args.max_steps == 3
    # the data source as a whole: files on the command line replace the recipe's preset, and the other way round
    own = str(write_table(tmp_path / "own.csv", ROWS))
    path = write_recipe(tmp_path, {"dataset_name": "hf_seq/sentiment", "text_column_name": "snippet"})
    data_args = parse_args(train_classifier.TASK, [path, "--train_file", own])[1]
    assert data_args.dataset_name is None and data_args.train_file == own
    assert data_args.text_column_name == "text"  # the recipe's column names went with its data set
    data_args = parse_args(train_classifier.TASK, [path, "--train_file", own, "--text_column_name", "body"])[1]
    assert data_args.text_column_name == "body"
    files_recipe = write_recipe(tmp_path, {"train_file": own, "validation_file": own})
    data_args = parse_args(train_classifier.TASK, [files_recipe, "--dataset_name", "hf_seq/sentiment"])[1]
    assert data_args.dataset_name == "hf_seq/sentiment" and data_args.train_file is data_args.validation_file is None


def test_a_wrong_recipe_stops_before_any_data_is_read(tmp_path, monkeypatch):
    """The reported failure: a list-valued key given a number used to fail only after training."""
    import hf_seq.train_scripts.common

    def no_data(*args, **kwargs):
        raise AssertionError("data was read before the recipe was checked")

    monkeypatch.setattr(hf_seq.train_scripts.common, "load_data", no_data)
    out = tmp_path / "run"
    path = write_recipe(
        tmp_path, {"dataset_name": "hf_seq/shakespeare", "sample_temperatures": 1.0, "output_dir": str(out)}
    )
    with pytest.raises(RecipeError, match="sample_temperatures"):
        train_lm.main([path])
    assert not out.exists()


@pytest.mark.parametrize("module", sorted(set(SCRIPTS.values()), key=lambda m: m.__name__), ids=lambda m: m.TASK.name)
def test_help_lists_the_script_fields_only(module, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(module.TASK, ["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0 and "--dataset_name" in text and "--output_dir" in text
    assert all(f"--{name} " not in text for name in module.TASK.unused)


def test_recipe_types_are_the_field_types_as_json_holds_them():
    from huggingface_hub.dataclasses import type_validator
    from transformers import GenerationConfig
    from transformers.trainer_utils import IntervalStrategy

    for value, annotation in (
        (3, float),
        (None, int | None),
        ("epoch", IntervalStrategy | str),
        ({}, GenerationConfig),
    ):
        type_validator("field", value, recipe_type(annotation))
    for value, annotation in ((True, int), (3.0, int), ([1, "a"], list[int]), ("epochs", IntervalStrategy | str)):
        with pytest.raises(TypeError):
            type_validator("field", value, recipe_type(annotation))


def test_export_dataset_writes_files_the_scripts_read_back(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("export_dataset", REPO / "scripts" / "export_dataset.py")
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    features = {"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])}
    saved = tmp_path / "saved"
    rows = [{"text": r["text"], "label": int(r["label"] == "pos")} for r in ROWS]
    DatasetDict(
        {
            "train": Dataset.from_list(rows[:15], features=Features(features)),
            "test": Dataset.from_list(rows[15:], features=Features(features)),
        }
    ).save_to_disk(saved)
    files = export.main([str(saved), str(tmp_path / "csv"), "--columns", "text:review", "label"])
    back = D.load_data(train_file=files["train"], test_file=files["test"], require_validation=False)
    assert back["test"].to_dict() == {
        "review": [r["text"] for r in ROWS[15:]],
        "label": [r["label"] for r in ROWS[15:]],
    }
    files = export.main([str(saved), str(tmp_path / "txt"), "--format", "txt", "--columns", "text"])
    assert Path(files["train"]).read_text() == "".join(r["text"] + "\n" for r in ROWS[:15])
    docs = tmp_path / "docs"
    Dataset.from_dict({"paragraphs": [[["a b", "c d"], ["e f"]], [["g h"]]]}).save_to_disk(docs)
    files = export.main([str(docs), str(tmp_path / "bert"), "--format", "txt"])
    assert Path(files["train"]).read_text() == "a b\nc d\ne f\n\ng h\n"  # BERT's format


# ------------------------------------------------------------------------------------------------- the console front door
def test_argparse_type_and_choice_errors_are_one_line(capsys):
    """A value argparse rejects (a type, a choice) is one line and exit status 2, without the usage block."""
    for flags, message in (
        (["--eval_strategy", "epochs"], "argument --eval_strategy/--eval-strategy: invalid choice: 'epochs'"),
        (["--per_device_train_batch_size", "abc"], "--per-device-train-batch-size: invalid int value: 'abc'"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            parse_args(train_classifier.TASK, ["--dataset_name", "hf_seq/sentiment", *flags])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
        assert err.endswith("(`--help` lists the options)\n") and "usage:" not in err


TEXT_ONLY = """
import sys, hf_seq_cli
for argv in ([], ["--help"], ["classifier", "--list-recipes"], ["no_such_task"]):
    print("status", hf_seq_cli.train(argv), flush=True)
print("status", hf_seq_cli.data(["path"]), flush=True)
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "transformers", "accelerate", "datasets", "numpy"})
print("heavy", heavy, "hf_seq" in sys.modules)
import hf_seq  # the package as usual afterwards: its models registered
print("registered", sorted(hf_seq.auto_heads()))
"""


def test_help_recipes_and_data_commands_import_no_torch(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", TEXT_ONLY],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HF_SEQ_DATA": str(tmp_path / "d"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert [line for line in out if line.startswith("status")] == [f"status {s}" for s in (2, 0, 0, 2, 0)]
    assert "usage: hf-seq-train <task>" in result.stdout and "* sentiment_bilstm_tuned" in result.stdout
    assert str(tmp_path / "d") in out and "unknown task 'no_such_task'" in result.stderr
    assert "heavy [] False" in out  # no torch, transformers, ...; no half-imported hf_seq left behind
    assert out[-1] == "registered ['hf_seq_bert', 'hf_seq_rnn', 'hf_seq_rnn_seq2seq', 'hf_seq_transformer']"
