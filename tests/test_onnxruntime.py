"""ONNX Runtime generation (hf_seq.toolkit.onnx_runtime, ``hf-seq-export onnx``): the exported graphs decoded by
transformers' own ``generate()`` give PyTorch's tokens for greedy search and beam search (``num_return_sequences``),
the same seeded samples and logits, on padded batches, for the RNN LM, the RNN seq2seq (every attention type,
input feeding, bidirectional encoder) and the Transformer; int8 stays close; the CLI folder loads and serves
``pipeline()``; what cannot be exported is refused naming the field.

Exports take 10-60 s each on a loaded 2-core machine (``torch.onnx.export(dynamo=True)``): the language model is
exported once for the fast tests (through the CLI); the seq2seq models, the Transformer and the other heads are
marked slow."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from tiny_models import BOS, EOS, PAD, TEXTS, build_tokenizer  # noqa: E402

import hf_seq  # noqa: E402
from hf_seq.toolkit.export import load_onnxruntime, main, to_onnx  # noqa: E402
from hf_seq.toolkit.onnx_runtime import OnnxExportError, check_onnx_exportable, quantize_graphs  # noqa: E402

NEW_TOKENS = 10


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def lm(vocab_size: int, cell: str = "lstm", layers: int = 2, seed: int = 0):
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=vocab_size,
        embedding_size=8,
        hidden_size=12,
        num_hidden_layers=layers,
        cell=cell,
        dropout=0.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    torch.manual_seed(seed)
    model = hf_seq.RNNForCausalLM(config).eval()
    with torch.no_grad():  # a sharper distribution than the uniform init: beams and samples differ from greedy
        model.lm_head.weight.mul_(8.0)
    return model


def rnn_seq2seq(vocab_size: int, seed: int = 0, **overrides):
    fields = dict(
        embedding_size=8,
        hidden_size=10,
        encoder_layers=2,
        decoder_layers=2,
        cell="lstm",
        bidirectional=True,
        attention="additive",
        input_feeding=False,
        dropout=0.0,
        max_target_length=16,
        uniform_init_range=0.5,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    config = hf_seq.HfSeqRNNSeq2SeqConfig(vocab_size=vocab_size, **{**fields, **overrides})
    torch.manual_seed(seed)
    return hf_seq.RNNSeq2SeqForConditionalGeneration(config).eval()


def transformer(vocab_size: int, seed: int = 0, **overrides):
    fields = dict(
        hidden_size=16,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    config = hf_seq.HfSeqTransformerConfig(vocab_size=vocab_size, **{**fields, **overrides})
    torch.manual_seed(seed)
    model = hf_seq.TransformerForConditionalGeneration(config).eval()
    if not config.tie_word_embeddings:
        with torch.no_grad():  # sharper: beams and samples differ from greedy
            model.lm_head.weight.mul_(4.0)
    return model


def left_padded(tokenizer, texts=TEXTS):
    tokenizer.padding_side = "left"
    try:
        return tokenizer(list(texts), padding=True, return_tensors="pt")
    finally:
        tokenizer.padding_side = "right"


def right_padded(tokenizer, texts=TEXTS):
    return tokenizer(list(texts), padding=True, return_tensors="pt")


SEARCHES = {
    "greedy": dict(do_sample=False),
    "beam4": dict(num_beams=4, num_return_sequences=2, do_sample=False),
    "beam4-length-penalty": dict(num_beams=4, length_penalty=0.5, early_stopping=True, do_sample=False),
}


def assert_generate_matches(model, exported, inputs: dict, **extra) -> None:
    """Greedy and beam search token-identical; a seeded sample reproducible and equal to PyTorch's."""
    for name, search in SEARCHES.items():
        with torch.no_grad():
            expected = model.generate(**inputs, max_new_tokens=NEW_TOKENS, **search, **extra)
        got = exported.generate(**inputs, max_new_tokens=NEW_TOKENS, **search, **extra)
        assert torch.equal(got, expected), name
    sample = dict(do_sample=True, top_k=0, temperature=1.0, max_new_tokens=NEW_TOKENS, **extra)
    torch.manual_seed(7)
    first = exported.generate(**inputs, **sample)
    torch.manual_seed(7)
    again = exported.generate(**inputs, **sample)
    torch.manual_seed(7)
    with torch.no_grad():
        reference = model.generate(**inputs, **sample)
    assert torch.equal(first, again)
    # the step graphs: same seed, same distributions, the same draws (a language model's model_sample.onnx draws with
    # ONNX Runtime's generator instead: tests/test_onnx_generate.py)
    graph, exported.generating_graph = exported.generating_graph, None
    try:
        torch.manual_seed(7)
        by_steps = exported.generate(**inputs, **sample)
    finally:
        exported.generating_graph = graph
    assert torch.equal(by_steps, reference)


def first_step_scores(model, inputs: dict) -> torch.Tensor:
    out = model.generate(**inputs, max_new_tokens=1, do_sample=False, output_scores=True, return_dict_in_generate=True)
    return out.scores[0]


# ---------------------------------------------------------------------------------------------------------------
# RNN language model: exported by the CLI from a saved folder
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm_export(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_lm")
    model = lm(len(tokenizer))
    model.save_pretrained(root / "run")
    tokenizer.save_pretrained(root / "run")
    assert main(["onnx", str(root / "run"), str(root / "onnx")]) == 0
    return model, root


def test_cli_folder_holds_graph_config_generation_config_and_tokenizer(lm_export):
    _, root = lm_export
    names = {p.name for p in (root / "onnx").iterdir()}
    assert {"decoder_model.onnx", "step_model.onnx", "config.json", "generation_config.json"} <= names
    assert "hf_seq_onnx.json" in names
    assert "tokenizer.json" in names
    assert not any(name.endswith(".safetensors") for name in names)  # the graphs are the model


def test_lm_generate_matches_pytorch(lm_export, tokenizer):
    model, root = lm_export
    exported = load_onnxruntime(root / "onnx", threads=1)
    assert type(exported).__name__ == "ORTModelForCausalLM"
    inputs = left_padded(tokenizer)
    assert inputs["attention_mask"].min() == 0  # a padded batch
    assert_generate_matches(model, exported, inputs)
    single = tokenizer(["the dog"], return_tensors="pt")
    assert_generate_matches(model, exported, single)


def test_lm_logits_of_every_position_and_carried_state(lm_export, tokenizer):
    """The graph gives the logits of every prompt position (perplexity) and continues from a returned cache."""
    model, root = lm_export
    exported = load_onnxruntime(root / "onnx")
    ids = tokenizer(["a cat sat on the mat . let there be light"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = model(ids).logits
        first = model(ids[:, :4], use_cache=True)
        second = model(ids[:, 4:], cache=first.cache, use_cache=True).logits
    torch.testing.assert_close(exported(ids).logits, expected, rtol=1e-4, atol=1e-5)
    out = exported(ids[:, :4], use_cache=True)
    torch.testing.assert_close(exported(ids[:, 4:], cache=out.cache).logits, second, rtol=1e-4, atol=1e-5)


RECURRENT_OPS = {"Loop", "Scan", "LSTM", "GRU", "RNN"}


def graph_ops(path) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(str(path)).graph.node}


def test_lm_steps_run_the_one_step_graph_unless_a_row_is_padding(lm_export, tokenizer):
    """A decoding step runs step_model.onnx (the cell equations: no recurrent op, no Loop); a new token that is
    padding in some row goes through the prompt graph, which keeps that row's state as PyTorch does."""
    model, root = lm_export
    assert "LSTM" in graph_ops(root / "onnx" / "decoder_model.onnx")  # the prompt: ONNX's LSTM over time
    assert not RECURRENT_OPS & graph_ops(root / "onnx" / "step_model.onnx")
    exported = load_onnxruntime(root / "onnx")
    inputs = left_padded(tokenizer)
    token = torch.tensor([[5], [6], [7]])
    for new_mask in ([1, 1, 1], [1, 0, 1]):
        mask = torch.cat([inputs["attention_mask"], torch.tensor(new_mask)[:, None]], dim=1)
        with torch.no_grad():
            first = model(**inputs, use_cache=True)
            expected = model(token, attention_mask=mask, cache=first.cache, use_cache=True)
        out = exported(**inputs, use_cache=True)
        got = exported(token, attention_mask=mask, cache=out.cache, use_cache=True)
        torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
        for got_state, expected_state in zip(got.cache.state, expected.cache.state):
            torch.testing.assert_close(got_state, expected_state, rtol=1e-4, atol=1e-5)


def test_lm_text_generation_pipeline(lm_export, tokenizer):
    from transformers import pipeline

    model, root = lm_export
    exported = load_onnxruntime(root / "onnx")
    settings = dict(max_new_tokens=6, do_sample=False)
    expected = pipeline("text-generation", model=model, tokenizer=tokenizer)("the dog", **settings)
    got = pipeline("text-generation", model=exported, tokenizer=tokenizer)("the dog", **settings)
    assert got == expected and got[0]["generated_text"].startswith("the dog")


def test_lm_int8_runs_and_stays_close(lm_export, tokenizer, tmp_path):
    model, root = lm_export
    shutil.copytree(root / "onnx", tmp_path / "int8")
    quantize_graphs(tmp_path / "int8", ["decoder_model.onnx", "step_model.onnx"])
    exported = load_onnxruntime(tmp_path / "int8")
    inputs = left_padded(tokenizer)
    with torch.no_grad():
        expected = model(**inputs).logits[:, -1]
    got = exported(**inputs).logits[:, -1]
    assert not torch.equal(got, expected)  # quantized weights
    scale = expected.abs().max()
    torch.testing.assert_close(got, expected, rtol=0.0, atol=float(0.05 * scale))
    assert exported.generate(**inputs, max_new_tokens=4).shape == (3, inputs["input_ids"].shape[1] + 4)


@pytest.mark.slow(reason="a third LM export, ~10 s; the fast suite exports the LSTM LM")
def test_lm_simple_rnn_keeps_dynamic_batch_and_length(tokenizer, tmp_path):
    """cell="rnn" (the SimpleRNN kernel, aten.rnn_tanh): exported as ONNX's RNN operator over a dynamic length, so
    prompts of other lengths and batch sizes than the example's generate PyTorch's tokens."""
    import onnx

    model = lm(len(tokenizer), cell="rnn")
    folder = to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer)
    assert "RNN" in graph_ops(folder / "decoder_model.onnx")
    assert not RECURRENT_OPS & graph_ops(folder / "step_model.onnx")
    graph = onnx.load(str(folder / "decoder_model.onnx")).graph
    ids = next(value for value in graph.input if value.name == "input_ids").type.tensor_type.shape.dim
    assert [d.dim_value for d in ids] == [0, 0]  # both axes symbolic
    exported = load_onnxruntime(folder, threads=1)
    assert_generate_matches(model, exported, left_padded(tokenizer))
    assert_generate_matches(model, exported, tokenizer(["the dog"], return_tensors="pt"))


@pytest.mark.slow
@pytest.mark.parametrize("cell,layers", [("gru", 1), ("gru", 3)])
def test_lm_other_cells(cell, layers, tokenizer, tmp_path):
    model = lm(len(tokenizer), cell=cell, layers=layers)
    exported = load_onnxruntime(to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer))
    assert_generate_matches(model, exported, left_padded(tokenizer))


def test_lm_labels_give_pytorchs_loss(lm_export, tokenizer):
    """``labels`` (shifted inside, -100 ignored) and ``shift_labels`` give RNNForCausalLM's loss, not None."""
    model, root = lm_export
    exported = load_onnxruntime(root / "onnx")
    inputs = right_padded(tokenizer)
    labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
    for given in ({"labels": labels}, {"shift_labels": labels.roll(-1, dims=1)}):
        with torch.no_grad():
            expected = model(**inputs, **given)
        got = exported(**inputs, **given)
        assert got.loss is not None
        torch.testing.assert_close(got.loss, expected.loss, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="`labels` must have the input's shape"):
        exported(**inputs, labels=labels[:, :-1])
    with torch.no_grad():  # logits_to_keep, and return_dict=False as a tuple
        expected = model(**inputs, logits_to_keep=1, return_dict=False)
    got = exported(**inputs, logits_to_keep=1, return_dict=False)
    assert isinstance(got, tuple)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-4, atol=1e-5)


def test_lm_arguments_the_graphs_cannot_honour_are_refused(lm_export, tokenizer):
    """Never a None where PyTorch gives a tensor: what the graphs cannot return is a ValueError naming the argument,
    in generate() before decoding, and in forward."""
    _, root = lm_export
    exported = load_onnxruntime(root / "onnx")
    inputs = left_padded(tokenizer)
    for flag in ("output_hidden_states", "output_attentions"):
        with pytest.raises(ValueError, match=f"`{flag}` cannot be given to ORTModelForCausalLM"):
            exported.generate(**inputs, max_new_tokens=2, return_dict_in_generate=True, **{flag: True})
        with pytest.raises(ValueError, match=f"`{flag}`"):
            exported(**inputs, **{flag: True})
    embeds = torch.zeros(*inputs["input_ids"].shape, 8)
    with pytest.raises(ValueError, match="`inputs_embeds` cannot be given.*pass `input_ids`"):
        exported(**inputs, inputs_embeds=embeds)
    with pytest.raises(ValueError, match="`output_hiden_states` cannot be given"):
        exported(**inputs, output_hiden_states=True)
    assert exported(**inputs, output_hidden_states=False).logits.shape[:2] == inputs["input_ids"].shape


def test_rnn_translator_refuses_cross_attentions_before_decoding(tokenizer):
    """The issue's case without an export: the refusal comes before any graph runs (this model has none)."""
    from hf_seq.toolkit.onnx_runtime import ORTModelForSeq2SeqLM

    config = rnn_seq2seq(len(tokenizer)).config
    exported = ORTModelForSeq2SeqLM(config, sessions={}, info={"graphs": {}})
    inputs = right_padded(tokenizer)
    for flag in ("output_attentions", "output_hidden_states"):
        with pytest.raises(ValueError, match=f"`{flag}` cannot be given to ORTModelForSeq2SeqLM"):
            exported.generate(**inputs, max_new_tokens=2, return_dict_in_generate=True, **{flag: True})
    exported.generation_config.output_attentions = True  # a saved generation config asking for them
    with pytest.raises(ValueError, match="`output_attentions`"):
        exported.generate(**inputs, max_new_tokens=2)
    with pytest.raises(ValueError, match="`decoder_inputs_embeds`"):
        exported(**inputs, decoder_inputs_embeds=torch.zeros(3, 1, 8))


def test_exported_generate_checks_the_call_as_the_pytorch_heads_do(tokenizer):
    """The exported models' one ``generate()`` override runs the PyTorch heads' call checks and refuses assisted
    decoding, both before any graph runs (this model has none)."""
    from transformers import GenerationConfig

    from hf_seq.toolkit.onnx_runtime import ORTModelForSeq2SeqLM

    exported = ORTModelForSeq2SeqLM(rnn_seq2seq(len(tokenizer)).config, sessions={}, info={"graphs": {}})
    inputs = right_padded(tokenizer)
    with pytest.raises(ValueError, match="`num_beams` must be a positive integer, got 0"):
        exported.generate(**inputs, num_beams=0)
    with pytest.raises(ValueError, match="`max_new_tokens` must be a positive integer, got 2.5"):
        exported.generate(inputs["input_ids"], GenerationConfig(max_new_tokens=2.5))
    with pytest.raises(ValueError, match="assisted generation is not supported with stateful models"):
        exported.generate(**inputs, max_new_tokens=2, prompt_lookup_num_tokens=2)


# ---------------------------------------------------------------------------------------------------------------
# an export's graphs against its manifest, its tokenizer against its config: checked at load
# ---------------------------------------------------------------------------------------------------------------


def drop_digests(folder) -> None:
    """Make ``folder``'s manifest look like one written before the graphs' digests were recorded."""
    info = json.loads((folder / "hf_seq_onnx.json").read_text())
    for graph in info["graphs"].values():
        if isinstance(graph, dict):
            graph.pop("sha256", None)
    (folder / "hf_seq_onnx.json").write_text(json.dumps(info))


def test_a_graph_that_is_not_the_manifests_is_refused_at_load(lm_export, tmp_path):
    _, root = lm_export
    folder = tmp_path / "swapped"
    shutil.copytree(root / "onnx", folder)
    shutil.copy(folder / "decoder_model.onnx", folder / "step_model.onnx")  # another graph under the step's name
    with pytest.raises(OnnxExportError, match=r"step_model\.onnx is not the graph hf_seq_onnx\.json describes"):
        load_onnxruntime(folder)
    # an export written before the digests were recorded: the graph's input names still give it away
    drop_digests(folder)
    with pytest.raises(OnnxExportError, match=r"step_model\.onnx has inputs \['input_ids', 'attention_mask'"):
        load_onnxruntime(folder)
    shutil.copy(root / "onnx" / "step_model.onnx", folder / "step_model.onnx")
    assert type(load_onnxruntime(folder)).__name__ == "ORTModelForCausalLM"  # older exports without digests load
    (folder / "step_model.onnx").unlink()
    with pytest.raises(OnnxExportError, match="lacks step_model.onnx"):
        load_onnxruntime(folder)


@pytest.mark.slow(reason="a second LM export, ~10 s")
def test_another_exports_step_graph_is_refused_at_load(lm_export, tokenizer, tmp_path):
    """The case on record: a step graph of another export (another hidden size) failed only at the first decoding
    step with ONNX Runtime's INVALID_ARGUMENT; it is refused at load, naming the file."""
    _, root = lm_export
    other = lm(len(tokenizer))
    other.config.hidden_size = 16
    other = hf_seq.RNNForCausalLM(other.config).eval()
    to_onnx(other, tmp_path / "other", tokenizer=tokenizer)
    folder = tmp_path / "mixed"
    shutil.copytree(root / "onnx", folder)
    shutil.copy(tmp_path / "other" / "step_model.onnx", folder / "step_model.onnx")
    with pytest.raises(OnnxExportError, match=r"step_model\.onnx is not the graph .*another export"):
        load_onnxruntime(folder)
    drop_digests(folder)  # an export without digests: the state's size gives it away
    with pytest.raises(OnnxExportError, match=r"step_model\.onnx and decoder_model\.onnx disagree on the shape of `h`"):
        load_onnxruntime(folder)


def test_an_export_whose_tokenizer_disagrees_with_its_config_is_refused_at_load(lm_export, tmp_path):
    _, root = lm_export
    folder = tmp_path / "edited"
    shutil.copytree(root / "onnx", folder)
    config = json.loads((folder / "config.json").read_text())
    config["eos_token_id"] = 6
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(OnnxExportError, match=r"eos_token_id is 3 but the model's config says `eos_token_id` 6"):
        load_onnxruntime(folder)
    with pytest.raises(FileNotFoundError, match="no_such_export: no such folder"):
        load_onnxruntime(tmp_path / "no_such_export")


# ---------------------------------------------------------------------------------------------------------------
# RNN seq2seq
# ---------------------------------------------------------------------------------------------------------------

SEQ2SEQ_FAST = {"additive-feeding-bidirectional": dict(attention="additive", input_feeding=True)}
SEQ2SEQ_SLOW = {
    "dot": dict(attention="dot"),
    "scaled_dot": dict(attention="scaled_dot"),
    "general": dict(attention="general"),
    "cosine-feeding": dict(attention="cosine", input_feeding=True),
    "additive-unidirectional-gru": dict(attention="additive", bidirectional=False, cell="gru"),
    "none": dict(attention="none"),
    "none-bidirectional-gru": dict(attention="none", cell="gru"),
    "general-feeding-rnn": dict(attention="general", input_feeding=True, cell="rnn"),
    "none-unidirectional-rnn": dict(attention="none", bidirectional=False, cell="rnn"),
}


def check_rnn_seq2seq(overrides: dict, tokenizer, folder) -> None:
    model = rnn_seq2seq(len(tokenizer), **overrides)
    exported = load_onnxruntime(to_onnx(model, folder, tokenizer=tokenizer), threads=1)
    assert type(exported).__name__ == "ORTModelForSeq2SeqLM"
    assert not RECURRENT_OPS & graph_ops(folder / "decoder_model.onnx")  # one token a call: the cell equations
    inputs = right_padded(tokenizer)
    assert inputs["attention_mask"].min() == 0
    assert_generate_matches(model, exported, inputs)
    with torch.no_grad():
        expected = first_step_scores(model, inputs)
    torch.testing.assert_close(first_step_scores(exported, inputs), expected, rtol=1e-4, atol=1e-5)
    assert_teacher_forcing_matches(model, exported, inputs)


def assert_teacher_forcing_matches(model, exported, inputs: dict) -> None:
    """``labels`` give PyTorch's loss and the logits of every decoder position (not the last one alone)."""
    labels = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, -100], [10, EOS, -100, -100]])
    with torch.no_grad():
        expected = model(**inputs, labels=labels)
    got = exported(**inputs, labels=labels)
    assert got.logits.shape == expected.logits.shape
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("overrides", list(SEQ2SEQ_FAST.values()), ids=list(SEQ2SEQ_FAST))
def test_rnn_seq2seq_generate_matches_pytorch(overrides, tokenizer, tmp_path):
    check_rnn_seq2seq(overrides, tokenizer, tmp_path / "onnx")


@pytest.mark.slow
@pytest.mark.parametrize("overrides", list(SEQ2SEQ_SLOW.values()), ids=list(SEQ2SEQ_SLOW))
def test_rnn_seq2seq_every_attention_type(overrides, tokenizer, tmp_path):
    check_rnn_seq2seq(overrides, tokenizer, tmp_path / "onnx")


# ---------------------------------------------------------------------------------------------------------------
# Transformer
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transformer_export(tokenizer, tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_transformer")
    model = transformer(len(tokenizer), tie_word_embeddings=False)
    return model, to_onnx(model, root / "onnx", tokenizer=tokenizer)


@pytest.mark.slow
def test_transformer_generate_matches_pytorch(transformer_export, tokenizer):
    model, folder = transformer_export
    exported = load_onnxruntime(folder, threads=1)
    inputs = right_padded(tokenizer)
    assert_generate_matches(model, exported, inputs)
    with torch.no_grad():
        expected = first_step_scores(model, inputs)
    torch.testing.assert_close(first_step_scores(exported, inputs), expected, rtol=1e-4, atol=1e-5)
    assert_teacher_forcing_matches(model, exported, inputs)


@pytest.mark.slow
def test_transformer_translation_pipeline_and_int8(transformer_export, tokenizer, tmp_path):
    from hf_seq.seq2seq_pipelines import TranslationPipeline

    model, folder = transformer_export
    exported = load_onnxruntime(folder)
    settings = dict(max_new_tokens=6)
    expected = TranslationPipeline(model=model, tokenizer=tokenizer)(TEXTS[:2], **settings)
    assert TranslationPipeline(model=exported, tokenizer=tokenizer)(TEXTS[:2], **settings) == expected

    shutil.copytree(folder, tmp_path / "int8")
    quantize_graphs(tmp_path / "int8", ["encoder_model.onnx", "decoder_model.onnx"])
    quantized = load_onnxruntime(tmp_path / "int8")
    inputs = right_padded(tokenizer)
    with torch.no_grad():
        reference = first_step_scores(model, inputs)
    got = first_step_scores(quantized, inputs)
    assert not torch.equal(got, reference)
    torch.testing.assert_close(got, reference, rtol=0.0, atol=float(0.05 * reference.abs().max()))


# ---------------------------------------------------------------------------------------------------------------
# other heads, refusals
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("cell", ["lstm", "rnn"])
def test_sequence_classifier_export_matches_pytorch(cell, tokenizer, tmp_path):
    config = hf_seq.HfSeqRNNConfig(
        vocab_size=len(tokenizer),
        embedding_size=6,
        hidden_size=5,
        num_hidden_layers=2,
        cell=cell,
        bidirectional=True,
        num_labels=3,
        pad_token_id=PAD,
    )
    torch.manual_seed(0)
    model = hf_seq.RNNForSequenceClassification(config).eval()
    exported = load_onnxruntime(to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer))
    assert type(exported).__name__ == "ORTModelForSequenceClassification"
    for inputs in (right_padded(tokenizer), left_padded(tokenizer)):
        with torch.no_grad():
            expected = model(**inputs).logits
        torch.testing.assert_close(exported(**inputs).logits, expected, rtol=1e-4, atol=1e-5)
    labels = torch.tensor([0, 2, 1])
    with torch.no_grad():
        expected_loss = model(**inputs, labels=labels).loss
    torch.testing.assert_close(exported(**inputs, labels=labels).loss, expected_loss, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("head", ["RNNForTokenClassification", "BertForSequenceClassification", "BertModel"])
def test_tagger_and_bert_exports_match_pytorch(head, tokenizer, tmp_path):
    cls = getattr(hf_seq, head)
    if head.startswith("Bert"):
        config = hf_seq.HfSeqBertConfig(
            vocab_size=len(tokenizer),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=24,
            max_position_embeddings=32,
            num_labels=3,
            pad_token_id=PAD,
        )
    else:
        config = hf_seq.HfSeqRNNConfig(vocab_size=len(tokenizer), embedding_size=6, hidden_size=5, num_labels=4)
    torch.manual_seed(0)
    model = cls(config).eval()
    exported = load_onnxruntime(to_onnx(model, tmp_path / "onnx", tokenizer=tokenizer))
    inputs = right_padded(tokenizer)
    with torch.no_grad():
        expected = model(**inputs)
    field = "last_hidden_state" if head == "BertModel" else "logits"
    torch.testing.assert_close(getattr(exported(**inputs), field), getattr(expected, field), rtol=1e-4, atol=1e-5)
    if head == "RNNForTokenClassification":
        labels = inputs["input_ids"].remainder(4).masked_fill(inputs["attention_mask"] == 0, -100)
        with torch.no_grad():
            expected_loss = model(**inputs, labels=labels).loss
        torch.testing.assert_close(exported(**inputs, labels=labels).loss, expected_loss, rtol=1e-4, atol=1e-5)
    elif head == "BertModel":  # the encoder takes no labels, in PyTorch either
        with pytest.raises(ValueError, match="`labels` cannot be given to ORTModelForFeatureExtraction"):
            exported(**inputs, labels=torch.zeros(3, dtype=torch.long))


def test_refusals_name_the_field(tokenizer, tmp_path):
    lstmn = hf_seq.RNNForCausalLM(
        hf_seq.HfSeqRNNConfig(vocab_size=20, embedding_size=4, hidden_size=4, cell="self_attention_lstm")
    )
    with pytest.raises(OnnxExportError, match="`cell` 'self_attention_lstm'"):
        check_onnx_exportable(lstmn)
    unstarted = hf_seq.RNNSeq2SeqForConditionalGeneration(
        hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=20, embedding_size=4, hidden_size=4, cell="rnn", decoder_start_token_id=None
        )
    )
    with pytest.raises(OnnxExportError, match="`decoder_start_token_id` is None"):
        check_onnx_exportable(unstarted)
    masked_lm = hf_seq.BertForMaskedLM(
        hf_seq.HfSeqBertConfig(
            vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8
        )
    )
    with pytest.raises(OnnxExportError, match="BertForMaskedLM .*exportable heads"):
        check_onnx_exportable(masked_lm)
    with pytest.raises(OnnxExportError, match="`quantization`"):
        to_onnx(lstmn, tmp_path / "x", quantization="int4")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(OnnxExportError, match="`output_dir` .* not empty"):
        to_onnx(rnn_seq2seq(20), tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    with pytest.raises(OnnxExportError, match="no hf_seq_onnx.json"):
        load_onnxruntime(tmp_path / "full")
    with pytest.raises(SystemExit) as exit_info:
        main(["onnx", str(tmp_path / "missing"), str(tmp_path / "out")])
    assert exit_info.value.code == 2
    lstmn.save_pretrained(tmp_path / "lstmn")  # the command line: one line naming the field, exit status 2
    with pytest.raises(SystemExit) as exit_info:
        main(["onnx", str(tmp_path / "lstmn"), str(tmp_path / "out")])
    assert exit_info.value.code == 2 and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------
# --test_engine onnxruntime in the training scripts
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_lm_script_tests_with_onnxruntime(tmp_path):
    """The final evaluation and the samples through the export give the PyTorch figures and texts of the same run."""
    from hf_seq.train_scripts import train_lm
    from test_train_lm import run_args

    for name in ("eager", "onnx", "bad"):
        (tmp_path / name).mkdir()
    model_config = ["--max_steps", "10", "--model_config", '{"cell": "lstm", "hidden_size": 16, "embedding_size": 8}']
    eager = train_lm.main(run_args(tmp_path / "eager", *model_config, "--eval_windows", "true"))
    exported = train_lm.main(
        run_args(tmp_path / "onnx", *model_config, "--eval_windows", "true", "--test_engine", "onnxruntime")
    )
    assert exported["test_engine"] == "onnxruntime" and exported["test_quantization"] == "float32"
    for key in ("test_windows_loss_nats", "test_carried_loss_nats", "validation_windows_loss_nats"):
        assert exported[key] == pytest.approx(eager[key], abs=2e-4), key
    assert exported["samples"]["0.2"] == eager["samples"]["0.2"]
    assert (tmp_path / "onnx" / "run" / "onnxruntime" / "decoder_model.onnx").is_file()
    with pytest.raises(ValueError, match="`test_onnxruntime_quantization` needs"):
        train_lm.main(run_args(tmp_path / "bad", "--test_onnxruntime_quantization", "int8"))


@pytest.mark.slow
@pytest.mark.data
def test_translation_script_tests_with_onnxruntime(tmp_path):
    from hf_seq.train_scripts import train_translation
    from test_export import TINY_RUN

    argv = [*TINY_RUN, "--max_steps", "4", "--save_strategy", "no"]
    eager = train_translation.main([*argv, "--output_dir", str(tmp_path / "eager")])
    exported = train_translation.main([*argv, "--output_dir", str(tmp_path / "onnx"), "--test_engine", "onnxruntime"])
    for key in ("test_greedy", "test_beam2"):
        assert exported[key]["test_engine"] == "onnxruntime"
        assert exported[key]["test_bleu"] == pytest.approx(eager[key]["test_bleu"], abs=1e-6)
    assert (tmp_path / "onnx" / "onnxruntime" / "encoder_model.onnx").is_file()
