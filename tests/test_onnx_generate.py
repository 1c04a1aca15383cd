"""The generating graph (hf_seq.toolkit.onnx_generate, ``model_generate.onnx``): the whole search inside ONNX
Runtime's BeamSearch operator gives PyTorch ``generate()``'s tokens (greedy, beam search, ``num_return_sequences``)
and sequence scores, on left- and right-padded batches with rows of different lengths, for the RNN seq2seq (cells,
attention types, input feeding, bidirectional encoder) and the Transformer; ``load_onnxruntime(...).generate()``
runs it when it does what the call asks and the step graphs otherwise; the folder translates with onnxruntime,
tokenizers and numpy only.

One RNN seq2seq export (~10 s) serves the fast tests; the grid of cells and attention types, the Transformer and the
clean virtual environment are slow."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import venv

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from test_onnxruntime import left_padded, lm, right_padded, rnn_seq2seq, transformer  # noqa: E402
from tiny_models import EOS, TEXTS, build_tokenizer  # noqa: E402

from hf_seq.toolkit.export import load_onnxruntime, to_onnx  # noqa: E402
from hf_seq.toolkit.onnx_generate import (  # noqa: E402
    GENERATE_FILE,
    GeneratingGraph,
    unhonoured,
    write_generating_graph,
)

SEARCHES = {
    "greedy": dict(num_beams=1),
    "beam4": dict(num_beams=4),
    "beam4-return2": dict(num_beams=4, num_return_sequences=2),
    "beam3-no-length-penalty": dict(num_beams=3, length_penalty=0.0, repetition_penalty=1.3),
    "beam3-min-length": dict(num_beams=3, length_penalty=0.5, min_length=4),
}
LM_SEARCHES = {  # the language model's beams: the operator's length penalty would count the prompt
    "greedy": dict(num_beams=1),
    "greedy-min-new-tokens": dict(num_beams=1, min_new_tokens=3),
    "beam4-return2": dict(num_beams=4, num_return_sequences=2, length_penalty=0.0),
}
NEW_TOKENS = (4, 12)  # one that cuts sequences at max_length, one where most end with their end token


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def batches(tokenizer, decoder_only: bool = False):
    if decoder_only:  # a prompt is continued at its end: padded on the left
        return {"left": left_padded(tokenizer)}
    return {"right": right_padded(tokenizer), "left": left_padded(tokenizer)}


def check_graph_matches_pytorch(model, folder, tokenizer) -> int:
    """The graph's sequences equal ``generate()``'s for every search, padding side and length (scores close where the
    operator's and generate()'s length penalties agree); returns how many calls compared equal scores."""
    graph = GeneratingGraph(folder, threads=1)
    decoder_only = not model.config.is_encoder_decoder
    compared = 0
    for side, inputs in batches(tokenizer, decoder_only).items():
        assert inputs["attention_mask"].min() == 0  # rows of different lengths
        start = inputs["input_ids"].shape[1] if decoder_only else 1  # the prompt, or the decoder start token
        for name, search in (LM_SEARCHES if decoder_only else SEARCHES).items():
            for new in NEW_TOKENS:
                with torch.no_grad():
                    expected = model.generate(
                        **inputs,
                        max_new_tokens=new,
                        do_sample=False,
                        output_scores=True,
                        return_dict_in_generate=True,
                        **search,
                    )
                beams = search["num_beams"]
                sequences, scores, cut = graph.run(
                    inputs["input_ids"].numpy(),
                    inputs["attention_mask"].numpy(),
                    max_length=start + new,
                    min_length=max(search.get("min_length", 0), start + search.get("min_new_tokens", 0)),
                    num_beams=beams,
                    num_return_sequences=search.get("num_return_sequences", 1),
                    length_penalty=search.get("length_penalty", 1.0),
                    repetition_penalty=search.get("repetition_penalty", 1.0),
                )
                got = torch.from_numpy(sequences.reshape(-1, sequences.shape[-1]))
                label = f"{side} {name} max_new_tokens={new}"
                if beams > 1 and search.get("length_penalty", 1.0) != 0 and cut.any():
                    continue  # the operator divides a cut sequence by one position more: generate() decides
                assert torch.equal(got, expected.sequences), label
                if beams > 1:
                    torch.testing.assert_close(torch.from_numpy(scores.reshape(-1)), expected.sequences_scores)
                    compared += 1
    return compared


def early_stopping_folder(folder, tmp_path):
    """A copy of an exported folder whose generation_config has ``early_stopping=True``, its generating graph
    written again: the beam search the front door runs in the graph (with False it leaves beams to the step
    graphs)."""
    import json
    import shutil

    from hf_seq.toolkit.onnx_generate import write_generating_graph

    copy = shutil.copytree(folder, tmp_path / "early_stopping")
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**config, "early_stopping": True}))
    assert write_generating_graph(copy)
    return copy


def check_front_door(model, folder, tokenizer, caplog, tmp_path) -> None:
    """``load_onnxruntime(...).generate()`` equals PyTorch's whichever graphs run, and says which ran: beam search
    in the graph only with ``early_stopping=True``."""
    exported = load_onnxruntime(early_stopping_folder(folder, tmp_path), threads=1)
    inputs = right_padded(tokenizer)
    runs = {  # name: (generate() arguments, run by model_generate.onnx, the step graphs' reason)
        "greedy": (dict(max_new_tokens=12), True, None),
        "beam": (dict(max_new_tokens=12, num_beams=4, num_return_sequences=2, early_stopping=True), True, None),
        "beam-early-stopping-false": (
            dict(max_new_tokens=12, num_beams=4, early_stopping=False),
            False,
            "early_stopping",
        ),
        "sample": (dict(max_new_tokens=6, do_sample=True, top_k=0), False, "do_sample"),
    }
    with caplog.at_level(logging.INFO, logger="hf_seq.toolkit.onnx_generate"):
        for name, (run, graph, reason) in runs.items():
            caplog.clear()
            torch.manual_seed(3)
            with torch.no_grad():
                expected = model.generate(**inputs, **run)
            torch.manual_seed(3)
            assert torch.equal(exported.generate(**inputs, **run), expected), name
            said = " ".join(r.getMessage() for r in caplog.records)
            assert (GENERATE_FILE in said) == graph, said
            assert reason is None or f"`{reason}`" in said, said


@pytest.fixture(scope="module")
def seq2seq_export(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generate") / "onnx"
    model = rnn_seq2seq(len(tokenizer), input_feeding=True)
    to_onnx(model, folder, tokenizer=tokenizer)
    return model, folder


def test_export_writes_the_generating_graph_and_its_script(seq2seq_export):
    _, folder = seq2seq_export
    assert (folder / GENERATE_FILE).is_file() and (folder / "generate.py").is_file()
    import onnx

    graph = onnx.load(str(folder / GENERATE_FILE)).graph
    assert [node.op_type for node in graph.node] == ["BeamSearch"]
    assert [i.name for i in graph.input][-1] == "attention_mask"  # the encoder mask is given, any padding side
    from hf_seq.toolkit import onnx_generate, onnx_runtime

    assert onnx_generate.ONNX_INFO == onnx_runtime.ONNX_INFO  # one file name, written twice to avoid an import cycle
    # a subgraph output computed by the subgraph is that node's output, not an Identity's copy of it
    for subgraph in subgraphs(folder).values():
        inputs = {value.name for value in subgraph.input}
        for node in subgraph.node:
            if node.op_type == "Identity" and node.output[0] in {value.name for value in subgraph.output}:
                assert node.input[0] in inputs or node.input[0] in {value.name for value in subgraph.output}


def subgraphs(folder) -> dict:
    """The search operator's subgraphs in ``folder``'s generating graph, by attribute name."""
    import onnx

    (node,) = onnx.load(str(folder / GENERATE_FILE)).graph.node
    return {attribute.name: attribute.g for attribute in node.attribute if attribute.type == onnx.AttributeProto.GRAPH}


def _generate_py(folder, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(folder / "generate.py"), *TEXTS[:2], "--max_new_tokens", "4", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_generate_py_says_when_its_beam_search_is_the_operators_own(seq2seq_export, tmp_path):
    """A folder exported with early_stopping=False (transformers' default): ``generate.py`` with beams says on stderr
    that the operator's done rule is not generate()'s; greedy, or a folder exported with early_stopping=True, says
    nothing."""
    _, folder = seq2seq_export
    for beams, noted in (("1", False), ("2", True)):
        run = _generate_py(folder, "--num_beams", beams)
        assert run.returncode == 0 and len(run.stdout.splitlines()) == 2, run.stderr[-2000:]
        assert ("early_stopping=False" in run.stderr) is noted, run.stderr
    exported_so = tmp_path / "early_stopping"
    shutil.copytree(folder, exported_so)
    config = json.loads((exported_so / "generation_config.json").read_text())
    (exported_so / "generation_config.json").write_text(json.dumps({**config, "early_stopping": True}))
    write_generating_graph(exported_so)
    run = _generate_py(exported_so, "--num_beams", "2")
    assert run.returncode == 0 and len(run.stdout.splitlines()) == 2 and "early_stopping" not in run.stderr, run.stderr


def test_rnn_seq2seq_graph_matches_pytorch(seq2seq_export, tokenizer):
    model, folder = seq2seq_export
    assert check_graph_matches_pytorch(model, folder, tokenizer) > 0


def test_front_door_runs_the_graph_when_it_can(seq2seq_export, tokenizer, caplog, tmp_path):
    model, folder = seq2seq_export
    check_front_door(model, folder, tokenizer, caplog, tmp_path)


def test_unhonoured_arguments_are_named(seq2seq_export):
    model, folder = seq2seq_export
    exported = GeneratingGraph(folder).entry
    assert not exported["attributes"]["early_stopping"]  # the folder's generation_config: early_stopping False
    entry = {**exported, "attributes": {**exported["attributes"], "early_stopping": 1}}
    config = model.generation_config

    def why(**fields):
        copy = config.__class__(**{**config.to_dict(), "early_stopping": True, **fields})
        return unhonoured(copy, entry, {})

    assert unhonoured(config, exported, {}) is None  # greedy
    assert "early_stopping" in unhonoured(config.__class__(**{**config.to_dict(), "num_beams": 4}), exported, {})
    assert why() is None
    assert why(num_beams=4, num_return_sequences=2) is None
    assert "early_stopping" in why(num_beams=4, early_stopping=False)
    assert "do_sample" in why(do_sample=True)
    assert "no_repeat_ngram_size" in why(no_repeat_ngram_size=2)
    assert "early_stopping" in why(num_beams=3, early_stopping="never")
    assert "repetition_penalty" in why(repetition_penalty=1.2)  # greedy: logits in PyTorch, log-probs in the op
    assert "length_penalty" in why(num_beams=3, length_penalty=-1.0)
    assert "eos_token_id" in why(eos_token_id=5)
    assert "decoder_input_ids" in unhonoured(config, entry, {"decoder_input_ids": torch.ones(1, 1)})
    assert "length_penalty" not in (why(num_beams=3, length_penalty=2.0) or "")  # a seq2seq graph honours it


SEQ2SEQ_GRID = {
    "lstm-additive-bidirectional": dict(),
    "gru-dot-feeding": dict(cell="gru", attention="dot", input_feeding=True),
    "rnn-general-unidirectional": dict(cell="rnn", attention="general", bidirectional=False),
    "gru-none": dict(cell="gru", attention="none"),
    "lstm-none-one-layer": dict(attention="none", encoder_layers=1, decoder_layers=1),
}


@pytest.mark.slow(reason="one export per case, ~10 s each")
@pytest.mark.parametrize("overrides", list(SEQ2SEQ_GRID.values()), ids=list(SEQ2SEQ_GRID))
def test_rnn_seq2seq_cells_and_attention_types(overrides, tokenizer, tmp_path):
    model = rnn_seq2seq(len(tokenizer), **overrides)
    folder = to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    check_graph_matches_pytorch(model, folder, tokenizer)


@pytest.mark.slow(reason="a Transformer export, ~20 s")
def test_transformer_graph_and_front_door(tokenizer, tmp_path, caplog):
    model = transformer(len(tokenizer), tie_word_embeddings=False)
    folder = to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    # the step rewrites took: no key is swapped through rank 3, the encoder's keys come swapped, the logits are
    # computed as (N, 1, V), not copied into that shape
    step = subgraphs(folder)["decoder"]
    transposes = [list(a.ints) for node in step.node if node.op_type == "Transpose" for a in node.attribute]
    assert [0, 2, 1] not in transposes and [0, 1, 3, 2] in transposes
    key = next(value for value in step.input if value.name == "past_key_cross_0").type.tensor_type.shape.dim
    assert key[2].dim_value == 16 // 2  # (N, nh, hs, S): hidden 16 over 2 heads
    assert next(node.op_type for node in step.node if "logits" in node.output) == "FusedMatMul"
    check_graph_matches_pytorch(model, folder, tokenizer)
    check_front_door(model, folder, tokenizer, caplog, tmp_path)


@pytest.fixture(scope="module")
def lm_export(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("generate_lm") / "onnx"
    model = lm(len(tokenizer))
    to_onnx(model, folder, tokenizer=tokenizer)
    return model, folder


def test_language_model_graph_matches_pytorch(lm_export, tokenizer):
    model, folder = lm_export
    assert check_graph_matches_pytorch(model, folder, tokenizer) > 0


def test_language_model_front_door(lm_export, tokenizer, caplog, tmp_path):
    model, folder = lm_export
    exported = load_onnxruntime(early_stopping_folder(folder, tmp_path), threads=1)
    inputs = left_padded(tokenizer)
    beams = dict(num_beams=3, early_stopping=True)
    runs = (  # generate() arguments, the step graphs' reason (None: model_generate.onnx)
        (dict(), None),
        (dict(**beams, length_penalty=0.0), None),
        (beams, "length_penalty"),  # the operator's length penalty would count the prompt
        (dict(num_beams=3, length_penalty=0.0, early_stopping=False), "early_stopping"),
    )
    with caplog.at_level(logging.INFO, logger="hf_seq.toolkit.onnx_generate"):
        for run, reason in runs:
            caplog.clear()
            with torch.no_grad():
                expected = model.generate(**inputs, max_new_tokens=8, do_sample=False, **run)
            assert torch.equal(exported.generate(**inputs, max_new_tokens=8, do_sample=False, **run), expected)
            said = " ".join(r.getMessage() for r in caplog.records)
            assert (GENERATE_FILE in said) == (reason is None), said
            assert reason is None or f"`{reason}`" in said, said


def test_language_model_without_end_token(lm_export, tokenizer, tmp_path):
    """A model without ``eos_token_id`` (a char LM trained on a stream) generates to the full length."""
    import json
    import shutil

    from hf_seq.toolkit.onnx_generate import write_generating_graph

    model, folder = lm_export
    copy = shutil.copytree(folder, tmp_path / "no_eos")
    config = json.loads((copy / "generation_config.json").read_text())
    config.pop("eos_token_id", None)
    (copy / "generation_config.json").write_text(json.dumps(config))
    assert write_generating_graph(copy)
    inputs = left_padded(tokenizer)
    sequences, _, cut = GeneratingGraph(copy, threads=1).run(
        inputs["input_ids"].numpy(), inputs["attention_mask"].numpy(), max_length=inputs["input_ids"].shape[1] + 8
    )
    model.generation_config.eos_token_id = None
    try:
        with torch.no_grad():
            expected = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    finally:
        model.generation_config.eos_token_id = EOS
    assert cut.all() and torch.equal(torch.from_numpy(sequences[:, 0]), expected)


def sample(graph, inputs, new: int, seed: int, returned: int = 1, min_new: int = 0):
    prompt = inputs["input_ids"].shape[1]
    return graph.sample(
        inputs["input_ids"].numpy(),
        inputs["attention_mask"].numpy(),
        max_length=prompt + new,
        min_length=prompt + min_new,
        seed=seed,
        num_return_sequences=returned,
    )


def test_language_model_sampling_is_seeded_and_well_formed(lm_export, tokenizer):
    """model_sample.onnx: the same seed gives the same tokens, other seeds other tokens; every token is a vocabulary
    id; a sequence ends at its first end token (padding after it) or runs to max_length; min_length holds."""
    model, folder = lm_export
    graph = GeneratingGraph(folder, threads=1)
    inputs = left_padded(tokenizer)
    prompt = inputs["input_ids"].shape[1]
    first, cut = sample(graph, inputs, new=12, seed=5, returned=8)
    again, _ = sample(graph, inputs, new=12, seed=5, returned=8)
    assert np.array_equal(first, again)
    assert any(not np.array_equal(first, sample(graph, inputs, new=12, seed=seed, returned=8)[0]) for seed in (6, 7))
    assert first.shape[0] == 8 * len(TEXTS) and first.shape[1] <= prompt + 12
    assert np.array_equal(first[:, :prompt], np.repeat(inputs["input_ids"].numpy(), 8, axis=0))
    new = first[:, prompt:]
    assert ((new >= 0) & (new < model.config.vocab_size)).all()
    ended = (new == EOS).any(-1)
    assert ended.any() and (~ended).any()  # both kinds of rows in this draw
    assert np.array_equal(cut, ~ended) and (first.shape[1] == prompt + 12) == bool(cut.any())
    for row in new[ended]:
        end = int(np.argmax(row == EOS))
        assert (row[end + 1 :] == tokenizer.pad_token_id).all()
    late, _ = sample(graph, inputs, new=12, seed=5, returned=8, min_new=6)
    assert not (late[:, prompt : prompt + 6] == EOS).any()


def test_language_model_sampling_with_tiny_top_p_is_greedy(lm_export, tokenizer, tmp_path):
    import shutil

    from hf_seq.toolkit.onnx_generate import write_sampling_graph

    model, folder = lm_export
    copy = shutil.copytree(folder, tmp_path / "top_p")
    assert write_sampling_graph(copy, top_p=1e-6)["attributes"]["top_p"] == 1e-6
    inputs = left_padded(tokenizer)
    sequences, _ = sample(GeneratingGraph(copy, threads=1), inputs, new=10, seed=1)
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=10, do_sample=False)
    assert torch.equal(torch.from_numpy(sequences), expected)


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.02, 1.0), (1.0, 0.3)])
def test_language_model_sampling_draws_from_pytorchs_distribution(lm_export, tokenizer, tmp_path, temperature, top_p):
    """The first sampled token's frequencies over 20,000 draws per prompt match the distribution transformers'
    warpers give (temperature, then top-p) within a total variation of 0.04 (the expected sampling error is ~0.015 on this nearly flat model),
    and are farther from the plain softmax when the warpers change it."""
    import shutil

    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    from hf_seq.toolkit.onnx_generate import write_sampling_graph

    model, folder = lm_export
    copy = shutil.copytree(folder, tmp_path / "warped")
    write_sampling_graph(copy, temperature=temperature, top_p=top_p)
    inputs = left_padded(tokenizer)
    draws = 20000
    sequences, _ = sample(GeneratingGraph(copy, threads=1), inputs, new=1, seed=11, returned=draws)
    first = sequences[:, -1].reshape(len(TEXTS), draws)
    with torch.no_grad():
        logits = model(**inputs).logits[:, -1]
    warped = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, logits.clone()))
    expected, plain = torch.softmax(warped, -1).numpy(), torch.softmax(logits, -1).numpy()
    for row in range(len(TEXTS)):
        seen = np.bincount(first[row], minlength=expected.shape[1]) / draws
        distance = 0.5 * np.abs(seen - expected[row]).sum()
        assert distance < 0.04, (row, distance)
        if (temperature, top_p) != (1.0, 1.0):
            assert 0.5 * np.abs(seen - plain[row]).sum() > 2 * distance, row


def test_language_model_front_door_samples_in_the_graph(lm_export, tokenizer, caplog):
    """generate(do_sample=True): model_sample.onnx, reproducible under torch.manual_seed; what it cannot do (a top-k
    below the vocabulary, another temperature, beam sampling) runs on the step graphs with PyTorch's draws, named."""
    model, folder = lm_export
    exported = load_onnxruntime(folder, threads=1)
    inputs = left_padded(tokenizer)
    run = dict(max_new_tokens=8, do_sample=True)
    with caplog.at_level(logging.INFO, logger="hf_seq.toolkit.onnx_generate"):
        caplog.clear()
        torch.manual_seed(3)
        first = exported.generate(**inputs, **run, num_return_sequences=2)
        torch.manual_seed(3)
        assert torch.equal(exported.generate(**inputs, **run, num_return_sequences=2), first)
        assert "model_sample.onnx" in " ".join(r.getMessage() for r in caplog.records)
        assert first.shape[0] == 2 * len(TEXTS)
        for refused, name in (
            (dict(top_k=5), "top_k"),
            (dict(temperature=0.5), "temperature"),
            (dict(num_beams=2), "num_beams"),
        ):
            caplog.clear()
            torch.manual_seed(3)
            with torch.no_grad():
                expected = model.generate(**inputs, **run, **refused)
            torch.manual_seed(3)
            assert torch.equal(exported.generate(**inputs, **run, **refused), expected), name
            said = " ".join(r.getMessage() for r in caplog.records)
            assert "step graphs" in said and f"`{name}`" in said, said


@pytest.mark.slow(reason="an export, ~10 s")
def test_language_model_gru(tokenizer, tmp_path):
    model = lm(len(tokenizer), cell="gru", layers=1)
    folder = to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    check_graph_matches_pytorch(model, folder, tokenizer)


@pytest.mark.slow(reason="an int8 export, ~15 s")
def test_int8_generating_graph_runs_and_stays_close(seq2seq_export, tokenizer, tmp_path):
    model, _ = seq2seq_export
    folder = to_onnx(model, tmp_path / "int8", quantization="int8", tokenizer=tokenizer)
    inputs = right_padded(tokenizer)
    sequences, scores, _ = GeneratingGraph(folder, threads=1).run(
        inputs["input_ids"].numpy(), inputs["attention_mask"].numpy(), max_length=13, num_beams=4
    )
    assert sequences.shape[:2] == (len(TEXTS), 1) and np.isfinite(scores).all()


@pytest.mark.slow(reason="a fresh virtual environment with onnxruntime, tokenizers and numpy from the registry")
def test_folder_translates_with_onnxruntime_tokenizers_and_numpy_only(seq2seq_export, tokenizer, tmp_path):
    model, folder = seq2seq_export
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "onnxruntime", "tokenizers", "numpy"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if installed.returncode != 0:
        pytest.skip(
            f"pip could not install onnxruntime, tokenizers, numpy from the registry: {installed.stderr[-300:]}"
        )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run(
        [str(python), str(folder / "generate.py"), *TEXTS, "--num_beams", "1", "--max_new_tokens", "12"],
        check=True,
        capture_output=True,
        text=True,
        env=clean,
        timeout=300,
    )
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print([u.find_spec(m) is None for m in ('torch', 'transformers', 'hf_seq')])",
        ],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
    )
    assert probe.stdout.strip() == "[True, True, True]"
    inputs = right_padded(tokenizer)
    with torch.no_grad():
        expected = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    assert out.stdout.splitlines() == tokenizer.batch_decode(expected, skip_special_tokens=True)


@pytest.mark.slow
@pytest.mark.data
def test_translation_script_reports_the_generating_graph(tmp_path):
    from hf_seq.train_scripts import train_translation
    from test_export import TINY_RUN

    argv = [*TINY_RUN, "--max_steps", "4", "--save_strategy", "no", "--output_dir", str(tmp_path / "onnx")]
    exported = train_translation.main([*argv, "--test_engine", "onnxruntime"])
    for key in ("test_greedy", "test_beam2"):
        assert exported[key]["test_onnxruntime_graph"].startswith(f"{GENERATE_FILE}: "), exported[key]
    assert (tmp_path / "onnx" / "onnxruntime" / GENERATE_FILE).is_file()
