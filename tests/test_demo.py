"""hf_seq.toolkit.demo without a browser: each head's answers against the model's own generate() / pipeline(), bad
input as a message, the command line, and the written Space served from a Python without hf_seq."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest
import torch
from conftest import BLOCK_HF_SEQ, run_clean
from demo_folders import FOLDERS, free_port, save_tiny_folder
from transformers import pipeline

pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")

from hf_seq.toolkit.demo import AVERAGE, Demo, DemoInputError, build_page, head_of, main  # noqa: E402

HEADS = {
    "classifier": "classifier",
    "tagger": "tagger",
    "lm": "language model",
    "rnn_translator": "translator",
    "transformer_translator": "translator",
    "bert_mlm": "masked language model",
}
SOURCE = "let there be light"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo_folders")
    return {name: save_tiny_folder(name, root) for name in FOLDERS}


@pytest.fixture(scope="module")
def demos(folders):
    return {name: Demo(folder) for name, folder in folders.items()}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_page_follows_the_head_and_builds(demos, name):
    demo = demos[name]
    assert demo.head == HEADS[name] == head_of(demo.config)
    assert demo.engines == ["PyTorch"]  # no export beside the folder
    assert type(demo.model).__name__ in demo.title and demo.head in demo.title
    build_page(demo)


def test_a_config_without_a_served_head_is_refused(folders):
    config = Demo(folders["classifier"]).config
    config.architectures = ["RNNModel"]
    with pytest.raises(ValueError, match="ForSequenceClassification"):
        head_of(config)


def test_classifier_answers_as_the_text_classification_pipeline(demos, folders):
    probs = demos["classifier"].classify("a cat sat on the mat")
    assert sorted(probs) == ["negative", "neutral", "positive"]
    classify = pipeline("text-classification", model=str(folders["classifier"]), top_k=None)
    expected = {row["label"]: row["score"] for row in classify(["a cat sat on the mat"])[0]}
    torch.testing.assert_close(probs, expected)


def test_tagger_pieces_spell_the_sentence_and_tag_each_token(demos):
    demo = demos["tagger"]
    text = "the cat  sat on the mat ."
    pieces = demo.tag(text)
    assert "".join(piece for piece, _ in pieces) == text
    enc = demo.tokenizer([text], return_tensors="pt")
    with torch.no_grad():
        tags = demo.model(**enc).logits[0].argmax(-1).tolist()
    expected = [demo.config.id2label[t] for t in tags]
    assert [tag for _, tag in pieces if tag is not None] == expected


def test_language_model_greedy_and_seeded_samples(demos, folders):
    demo = demos["lm"]
    greedy = demo.generate("the cat", 6, sampling=False)
    model, tokenizer = demo.model, demo.tokenizer
    ids = model.generate(**tokenizer(["the cat"], return_tensors="pt"), max_new_tokens=6, do_sample=False)
    assert greedy == tokenizer.batch_decode(ids, skip_special_tokens=True)
    samples = demo.generate("the cat", 8, True, temperature=1.5, num_samples=3, seed=7)
    assert len(samples) == 3 and samples == demo.generate("the cat", 8, True, temperature=1.5, num_samples=3, seed=7)
    assert samples != demo.generate("the cat", 8, True, temperature=1.5, num_samples=3, seed=8)


@pytest.mark.parametrize("name", ["rnn_translator", "transformer_translator"])
def test_translator_nbest_is_beam_search_and_its_heat_map_is_the_cross_attention(demos, name):
    demo = demos[name]
    hyps = demo.translate(SOURCE, 3)
    assert len(hyps) == 3 and [s for _, s, _ in hyps] == sorted((s for _, s, _ in hyps), reverse=True)
    enc = demo.tokenizer([SOURCE], return_tensors="pt")
    beams = demo.model.generate(**enc, num_beams=3, num_return_sequences=3, do_sample=False)
    assert [ids for _, _, ids in hyps] == [row[: len(ids)] for row, (_, _, ids) in zip(beams.tolist(), hyps)]
    assert hyps[0][0] == demo.tokenizer.decode(beams[0], skip_special_tokens=True)
    greedy = demo.translate(SOURCE, 1)
    assert len(greedy) == 1 and greedy[0][1] < 0
    weights, source, target = demo.attention(SOURCE, hyps[0][2], -1, AVERAGE)
    assert weights.shape == (len(hyps[0][2]) - 1, len(source)) and len(target) == weights.shape[0]
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[0]))  # each row: a distribution over source
    if demo.attention_heads() > 1:
        heads = [demo.attention(SOURCE, hyps[0][2], 0, str(h))[0] for h in range(demo.attention_heads())]
        torch.testing.assert_close(torch.stack(heads).mean(0), demo.attention(SOURCE, hyps[0][2], 0, AVERAGE)[0])
        assert demo.attention_layers() == 2


def test_heat_map_stops_at_the_end_token(demos):
    """A shorter beam of the n-best is padded to the longest one: the heat map has no rows for that padding."""
    demo = demos["rnn_translator"]
    ids = demo.translate(SOURCE, 1)[0][2]
    eos = demo.config.eos_token_id
    ended = [*ids, eos] if ids[-1] != eos else ids
    padded = [*ended, eos, eos, demo.config.pad_token_id]
    weights, _, target = demo.attention(SOURCE, padded)
    expected, _, expected_target = demo.attention(SOURCE, ended)
    assert target == expected_target and len(target) == len(ended) - 1
    torch.testing.assert_close(weights, expected)


def test_fill_mask_answers_as_the_fill_mask_pipeline(demos, folders):
    found = demos["bert_mlm"].fill_mask("the [MASK] sat on the mat", 3)
    fill = pipeline("fill-mask", model=str(folders["bert_mlm"]), top_k=3)
    expected = fill("the [MASK] sat on the mat")
    assert [token for token, _ in found] == [row["token_str"].strip() for row in expected]
    torch.testing.assert_close([p for _, p in found], [row["score"] for row in expected])


@pytest.mark.parametrize(
    ("name", "call", "message"),
    [
        ("classifier", lambda d: d.classify("   "), "empty"),
        ("bert_mlm", lambda d: d.fill_mask("the cat sat", 3), r"\[MASK\]"),
        ("bert_mlm", lambda d: d.fill_mask("the [MASK] " + "cat " * 40, 3), "at most 32"),
        ("transformer_translator", lambda d: d.translate("light " * 40, 2), "at most 32"),
        ("lm", lambda d: d.generate("", 5), "empty"),
        ("lm", lambda d: d.generate("the cat", 5, True, temperature=0.0), "temperature"),
    ],
)
def test_bad_input_is_a_message(demos, name, call, message):
    with pytest.raises(DemoInputError, match=message):
        call(demos[name])


def test_bad_input_reaches_the_page_as_a_gradio_error(demos):
    import gradio as gr

    from hf_seq.toolkit.demo import _shown

    with pytest.raises(gr.Error, match="empty"):
        _shown(demos["classifier"].classify)("")


def test_command_line_refuses_a_folder_without_a_model(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    assert exit_info.value.code == 2 and "no config.json" in capsys.readouterr().err


@pytest.mark.slow  # the ONNX exports: ~20 s
def test_exports_beside_the_folder_add_engines_that_answer_alike(folders, tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from hf_seq.toolkit.export import to_ctranslate2
    from hf_seq.toolkit.onnx_runtime import to_onnx

    folder = tmp_path / "translator"
    shutil.copytree(folders["transformer_translator"], folder)
    to_onnx(folder, tmp_path / "translator-onnx")
    # a sub-folder as the translation script's --test_engine writes it, from the model object (an export of the
    # folder itself never writes into it)
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    to_ctranslate2(model, folder / "ctranslate2", tokenizer=tokenizer)
    demo = Demo(folder)  # both found: a sibling and a sub-folder
    assert demo.engines == ["PyTorch", "ONNX Runtime", "CTranslate2"]
    expected = demo.translate(SOURCE, 3)
    for engine in ("ONNX Runtime", "CTranslate2"):
        found = demo.translate(SOURCE, 3, engine)
        assert [(text, ids) for text, _, ids in found] == [(text, ids) for text, _, ids in expected], engine
        torch.testing.assert_close([s for _, s, _ in found], [s for _, s, _ in expected], rtol=1e-4, atol=1e-4)
    classifier = tmp_path / "classifier"
    shutil.copytree(folders["classifier"], classifier)
    to_onnx(classifier, tmp_path / "classifier-onnx")
    demo = Demo(classifier)
    assert demo.engines == ["PyTorch", "ONNX Runtime"]
    torch.testing.assert_close(
        demo.classify("a cat sat", "ONNX Runtime"), demo.classify("a cat sat"), rtol=1e-4, atol=1e-5
    )


@pytest.mark.slow  # a second interpreter starts Gradio: ~40 s
def test_written_space_serves_the_page_without_hf_seq(folders, clean_python, tmp_path):
    from gradio_client import Client

    space = tmp_path / "space"
    main([str(folders["transformer_translator"]), "--write-space", str(space)])
    assert sorted(p.name for p in space.iterdir()) == [
        "README.md",
        "app.py",
        "hf_seq_demo.py",
        "model",
        "requirements.txt",
    ]
    readme = (space / "README.md").read_text()
    assert "sdk: gradio" in readme and "app_file: app.py" in readme
    assert "gradio>=" in (space / "requirements.txt").read_text()
    assert "hf_seq" not in (space / "requirements.txt").read_text()

    expected = run_clean(
        clean_python,
        BLOCK_HF_SEQ
        + "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n"
        + f"m = AutoModelForSeq2SeqLM.from_pretrained({str(space / 'model')!r}, trust_remote_code=True)\n"
        + f"t = AutoTokenizer.from_pretrained({str(space / 'model')!r}, trust_remote_code=True)\n"
        + f"ids = m.generate(**t([{SOURCE!r}], return_tensors='pt'), num_beams=2, do_sample=False)\n"
        + "print(t.decode(ids[0], skip_special_tokens=True))\n",
    )
    assert expected.returncode == 0, expected.stderr[-2000:]
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path))
    launch = (
        BLOCK_HF_SEQ + "import runpy, sys\nsys.path.insert(0, '.')\nrunpy.run_path('app.py', run_name='__main__')\n"
    )
    server = subprocess.Popen(
        [str(clean_python), "-c", launch],
        cwd=space,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(240):
            if server.poll() is not None:
                pytest.fail(f"the Space exited: {server.stdout.read()[-3000:]}")
            try:
                client = Client(url, verbose=False)
                break
            except Exception:
                time.sleep(0.5)
        else:
            pytest.fail("the Space did not answer in 120 s")
        answer = client.predict(SOURCE, 2, "PyTorch", 1, AVERAGE, api_name="/translate")
        assert answer[0] == expected.stdout.strip().splitlines()[-1]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_exports_next_to_the_folder_are_found(folders, tmp_path):
    from hf_seq.toolkit.demo import find_exports

    run = tmp_path / "run"
    run.mkdir()
    (run / "onnx").mkdir()
    (run / "onnx" / "hf_seq_onnx.json").write_text("{}")
    sibling = tmp_path / "run-ct2"
    sibling.mkdir()
    for name in ("model.bin", "hf_seq_export.json"):
        (sibling / name).write_text("")
    (tmp_path / "other-ct2").mkdir()  # not named after the run
    assert find_exports(run) == {"ONNX Runtime": run / "onnx", "CTranslate2": sibling}
    # a classifier is not offered CTranslate2 (a translator export only)
    demo = Demo(folders["classifier"], exports=find_exports(run))
    assert demo.engines == ["PyTorch", "ONNX Runtime"]
    with pytest.raises(DemoInputError, match="CTranslate2"):
        demo.engine("CTranslate2")


def test_space_loading_from_the_hub_names_the_model(folders, tmp_path):
    space = tmp_path / "space"
    main([str(folders["bert_mlm"]), "--write-space", str(space), "--model-id", "someone/tiny-bert"])
    assert not (space / "model").exists()
    assert "'someone/tiny-bert'" in (space / "app.py").read_text()
    assert "models:\n  - someone/tiny-bert" in (space / "README.md").read_text()


def test_command_line_refuses_a_head_without_a_page(tmp_path, capsys):
    from tiny_models import build_tokenizer, tiny_model

    import hf_seq

    tokenizer = build_tokenizer()
    tiny_model(hf_seq.RNNModel, len(tokenizer)).save_pretrained(tmp_path / "encoder")
    tokenizer.save_pretrained(tmp_path / "encoder")
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "encoder")])
    assert exit_info.value.code == 2 and "RNNModel" in capsys.readouterr().err
