"""``pipeline("translation" | "text2text-generation", model=folder)``: with hf_seq imported, served by the installed
classes through transformers' pipeline registry, without ``trust_remote_code``; with remote code alone (hf_seq not
importable), the flag stays required and the folder's own ``seq2seq_pipelines.py`` serves the task."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import BLOCK_HF_SEQ
from tiny_models import build_tokenizer, tiny_model
from transformers import AutoModelForSeq2SeqLM, pipeline

import hf_seq
from hf_seq.seq2seq_pipelines import SEQ2SEQ_CUSTOM_PIPELINES, Text2TextGenerationPipeline, TranslationPipeline

SEQ2SEQ_HEADS = [hf_seq.RNNSeq2SeqForConditionalGeneration, hf_seq.TransformerForConditionalGeneration]
TEXTS = ["the cat sat on the mat", "a dog ran"]


def save_folder(head: type, path):
    tok = build_tokenizer()
    tiny_model(head, vocab_size=len(tok)).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=SEQ2SEQ_HEADS, ids=lambda head: head.__name__)
def folder(request, tmp_path_factory):
    return save_folder(request.param, tmp_path_factory.mktemp(request.param.__name__))


def expected(folder, texts: list[str], **generate) -> list[str]:
    """The texts ``generate()`` of the saved model produces, one per input."""
    tok = build_tokenizer()
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    return [
        tok.decode(model.generate(**tok([t], return_tensors="pt"), **generate)[0], skip_special_tokens=True).strip()
        for t in texts
    ]


@pytest.mark.parametrize(
    "task, pipeline_class, key",
    [
        ("translation", TranslationPipeline, "translation_text"),
        ("text2text-generation", Text2TextGenerationPipeline, "generated_text"),
    ],
)
def test_declared_tasks_need_no_flag_after_import_hf_seq(folder, task, pipeline_class, key):
    declared = json.loads((folder / "config.json").read_text())["custom_pipelines"]
    assert declared == json.loads(json.dumps(SEQ2SEQ_CUSTOM_PIPELINES))  # the folder still declares both tasks
    served = pipeline(task, model=str(folder))  # no trust_remote_code
    assert type(served) is pipeline_class  # the installed class, not a copy loaded from the folder
    out = served(TEXTS, max_new_tokens=6, num_beams=2)
    assert [o[key] for o in out] == expected(folder, TEXTS, max_new_tokens=6, num_beams=2)


def test_saving_a_pipeline_keeps_every_declared_task(folder, tmp_path):
    """The registry's mark on a class would make ``Pipeline.save_pretrained`` rewrite ``custom_pipelines`` to one
    task; the saved folder declares both and serves both again."""
    pipeline("translation", model=str(folder)).save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "config.json").read_text())["custom_pipelines"]
    assert sorted(saved) == sorted(SEQ2SEQ_CUSTOM_PIPELINES)
    assert type(pipeline("text2text-generation", model=str(tmp_path / "saved"))) is Text2TextGenerationPipeline


def test_other_encoder_decoders_get_a_clear_error(tmp_path):
    """hf_seq serves the removed tasks for its own models only: a transformers model gets a message, not a pipeline."""
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(
        vocab_size=40, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    BartForConditionalGeneration(config).save_pretrained(tmp_path / "bart")
    build_tokenizer().save_pretrained(tmp_path / "bart")
    with pytest.raises(ValueError, match=r"serves hf_seq encoder-decoder models.*'bart'"):
        pipeline("translation", model=str(tmp_path / "bart"))


REMOTE_ONLY = BLOCK_HF_SEQ + textwrap.dedent(
    """
    import json, sys
    from transformers import pipeline
    try:
        pipeline("translation", model=sys.argv[1])
        print("NO ERROR")
    except ValueError as error:
        print("REFUSED", "trust_remote_code=True" in str(error))
    served = pipeline("translation", model=sys.argv[1], trust_remote_code=True)
    out = served(json.loads(sys.argv[2]), max_new_tokens=6, num_beams=2)
    assert "hf_seq" not in sys.modules
    print(type(served).__module__.startswith("transformers_modules"), json.dumps([o["translation_text"] for o in out]))
    """
)


@pytest.mark.parametrize(
    "head",
    [pytest.param(hf_seq.RNNSeq2SeqForConditionalGeneration, marks=pytest.mark.slow), *SEQ2SEQ_HEADS[1:]],
    ids=lambda head: head.__name__,
)
def test_remote_code_alone_still_needs_the_flag(head, tmp_path):
    folder = save_folder(head, tmp_path / "model")
    result = subprocess.run(
        [sys.executable, "-c", REMOTE_ONLY, str(folder), json.dumps(TEXTS)],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    refused, served = result.stdout.strip().splitlines()[-2:]
    assert refused.endswith("REFUSED True")  # after transformers' "run the custom code? [y/N]" prompt, unanswered
    remote, texts = served.split(" ", 1)
    assert remote == "True" and json.loads(texts) == expected(folder, TEXTS, max_new_tokens=6, num_beams=2)
