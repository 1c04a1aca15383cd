"""hf_seq.toolkit.export: CTranslate2 export of the Transformer and BERT, checkpoint averaging, hf-seq-export, and the
translation script's --average_last_checkpoints / --test_engine ctranslate2. Tiny random models only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_models import BOS, EOS, PAD, TEXTS, build_tokenizer

import hf_seq
from hf_seq.toolkit.export import (
    ExportError,
    average_checkpoints,
    average_state_dicts,
    ctranslate2_translate,
    to_ctranslate2,
)

ctranslate2 = pytest.importorskip("ctranslate2")

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def tiny_transformer(vocab_size: int, seed: int = 0, **overrides) -> hf_seq.TransformerForConditionalGeneration:
    torch.manual_seed(seed)
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=16,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        dropout=0.0,
        max_position_embeddings=40,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        initializer_range=0.3,  # large random weights: outputs that depend on every weight
    )
    fields.update(overrides)
    return hf_seq.TransformerForConditionalGeneration(hf_seq.HfSeqTransformerConfig(**fields)).eval()


def tiny_bert(vocab_size: int, cls=hf_seq.BertModel, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    fields = dict(
        vocab_size=vocab_size,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=40,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.3,
    )
    fields.update(overrides)
    return cls(hf_seq.HfSeqBertConfig(**fields)).eval()


def greedy_ids(model, tokenizer, texts, max_new_tokens=12) -> list[list[int]]:
    """generate()'s greedy target ids without the start token, the end token and the padding after it."""
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, num_beams=1, do_sample=False)
    rows = []
    for row in out[:, 1:].tolist():
        rows.append(row[: row.index(EOS)] if EOS in row else row)  # an unfinished row fills max_new_tokens
    return rows


VARIANTS = {
    "post_ln_sinusoidal_tied_relu": {},
    "pre_ln": {"norm_position": "pre"},
    "learned_positions": {"position_embedding": "learned"},
    "untied_embeddings": {"tie_word_embeddings": False},
    "unscaled_embeddings": {"scale_embedding": False},
    "pre_ln_learned_untied": {"norm_position": "pre", "position_embedding": "learned", "tie_word_embeddings": False},
    **{
        f"activation_{name}": {"activation_function": name}
        for name in ("gelu", "gelu_new", "quick_gelu", "silu", "tanh", "sigmoid")
    },
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_translator_matches_generate_and_scores(variant, tokenizer, tmp_path):
    model = tiny_transformer(len(tokenizer), **VARIANTS[variant])
    folder = to_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    # greedy: token for token
    assert ctranslate2_translate(translator, tokenizer, TEXTS, max_new_tokens=12) == greedy_ids(model, tokenizer, TEXTS)
    # the log-probability of arbitrary targets, step by step: every weight, position row and norm shows here
    generator = torch.Generator().manual_seed(1)
    targets = [torch.randint(4, len(tokenizer), (n,), generator=generator).tolist() for n in (5, 9, 3)]
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(TEXTS)["input_ids"]]
    scored = translator.score_batch(sources, [tokenizer.convert_ids_to_tokens(t) for t in targets])
    for text, target, result in zip(TEXTS, targets, scored):
        enc = tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            logits = model(**enc, decoder_input_ids=torch.tensor([[BOS, *target]])).logits
        expected = logits.log_softmax(-1)[0, torch.arange(len(target) + 1), torch.tensor([*target, EOS])]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, atol=1e-5, rtol=1e-5)


def test_position_table_is_hf_seqs_own(tokenizer, tmp_path):
    """The runtime's default sinusoid table (left unset) has another layout: the export must write ours."""
    model = tiny_transformer(len(tokenizer))
    folder = to_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    translator = ctranslate2.Translator(str(folder), device="cpu", intra_threads=1)
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(TEXTS)["input_ids"]]
    target = ["let", "there", "be"]
    ours = translator.score_batch(sources[:1], [target])[0].log_probs
    spec_model = model.model
    with torch.no_grad():  # a model whose table is shifted by one row scores differently: the table matters
        for stack in (spec_model.encoder, spec_model.decoder):
            stack.embeddings.embed_positions.weight.copy_(stack.embeddings.embed_positions.weight.roll(1, dims=0))
    shifted_folder = to_ctranslate2(model, tmp_path / "shifted", tokenizer=tokenizer)
    shifted = ctranslate2.Translator(str(shifted_folder), device="cpu").score_batch(sources[:1], [target])[0].log_probs
    assert max(abs(a - b) for a, b in zip(ours, shifted)) > 1e-3


@pytest.mark.parametrize("quantization", ["int8", "int16", "float16"])
def test_exporting_a_model_object_leaves_its_weights_as_they_were(quantization, tokenizer, tmp_path):
    """The converter quantizes the arrays it is given in place: they must be copies, not views of the parameters."""
    model = tiny_transformer(len(tokenizer))
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    to_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer, quantization=quantization)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name


def test_folder_export_translates_from_the_folder_alone(tokenizer, tmp_path):
    model = tiny_transformer(len(tokenizer))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    folder = to_ctranslate2(tmp_path / "model", tmp_path / "ct2", quantization="int8")
    assert {"model.bin", "config.json", "tokenizer.json", "hf_seq_export.json"} <= {p.name for p in folder.iterdir()}
    info = json.loads((folder / "hf_seq_export.json").read_text())
    assert info["quantization"] == "int8" and info["engine"] == "ctranslate2.Translator"
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(folder)
    out = ctranslate2_translate(ctranslate2.Translator(str(folder)), reloaded, TEXTS, max_new_tokens=6)
    assert len(out) == len(TEXTS) and all(all(0 <= t < len(tokenizer) for t in row) for row in out)
    with pytest.raises(ExportError, match="exists and is not empty"):
        to_ctranslate2(tmp_path / "model", folder)


@pytest.mark.parametrize("head", ["BertModel", "BertForMaskedLM", "BertForSequenceClassification"])
def test_bert_encoder_hidden_states(head, tokenizer, tmp_path):
    model = tiny_bert(len(tokenizer), cls=getattr(hf_seq, head))
    folder = to_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer)
    encoder = ctranslate2.Encoder(str(folder), device="cpu", intra_threads=1)
    ids = [tokenizer(t)["input_ids"] for t in TEXTS]
    segments = [[0] * (len(i) // 2) + [1] * (len(i) - len(i) // 2) for i in ids]
    out = encoder.forward_batch(ids, token_type_ids=segments)
    batch = tokenizer(list(TEXTS), padding=True, return_tensors="pt")
    token_types = torch.zeros_like(batch["input_ids"])
    for row, seg in enumerate(segments):
        token_types[row, : len(seg)] = torch.tensor(seg)
    bert = model if head == "BertModel" else model.bert
    with torch.no_grad():
        expected = bert(**batch, token_type_ids=token_types)
    mask = batch["attention_mask"].bool()
    last = torch.as_tensor(np.array(out.last_hidden_state))
    torch.testing.assert_close(last[mask], expected.last_hidden_state[mask], atol=1e-4, rtol=1e-4)
    if bert.pooler is not None:
        torch.testing.assert_close(
            torch.as_tensor(np.array(out.pooler_output)), expected.pooler_output, atol=1e-4, rtol=1e-4
        )


def test_refusals_name_the_field(tokenizer, tmp_path):
    with pytest.raises(ExportError, match="`activation_function` 'relu6'"):
        to_ctranslate2(
            tiny_transformer(len(tokenizer), activation_function="relu6"), tmp_path / "a", tokenizer=tokenizer
        )
    with pytest.raises(ExportError, match="`hidden_act` 'leaky_relu'"):
        to_ctranslate2(tiny_bert(len(tokenizer), hidden_act="leaky_relu"), tmp_path / "b", tokenizer=tokenizer)
    with pytest.raises(ExportError, match="`quantization`"):
        to_ctranslate2(tiny_transformer(len(tokenizer)), tmp_path / "c", quantization="int4", tokenizer=tokenizer)
    model = tiny_transformer(len(tokenizer))
    model.generation_config.suppress_tokens = [5]
    with pytest.raises(ExportError, match="suppress_tokens"):
        to_ctranslate2(model, tmp_path / "d", tokenizer=tokenizer)
    rnn = hf_seq.RNNSeq2SeqForConditionalGeneration(
        hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=len(tokenizer),
            embedding_size=8,
            hidden_size=8,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=BOS,
        )
    )
    rnn.save_pretrained(tmp_path / "rnn")
    with pytest.raises(ExportError, match="`model_type` 'hf_seq_rnn_seq2seq'.*no recurrent"):
        to_ctranslate2(tmp_path / "rnn", tmp_path / "e")
    assert not any((tmp_path / name).exists() for name in "abcde")


def test_cli(tokenizer, tmp_path, capsys):
    from hf_seq.toolkit.export import main

    model = tiny_transformer(len(tokenizer))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert main(["ctranslate2", str(tmp_path / "model"), str(tmp_path / "ct2"), "--quantization", "int16"]) == 0
    assert json.loads((tmp_path / "ct2" / "hf_seq_export.json").read_text())["quantization"] == "int16"
    for argv, message in (
        (["ctranslate2", str(tmp_path / "nowhere"), str(tmp_path / "x")], "is not a directory"),
        (["ctranslate2", str(tmp_path / "model"), str(tmp_path / "ct2")], "exists and is not empty"),
        (["ctranslate2", str(tmp_path / "model"), str(tmp_path / "y"), "--quantization", "int4"], "invalid choice"),
        (["average", str(tmp_path / "model"), str(tmp_path / "z")], "at least two CHECKPOINT"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1] and err[-1].startswith("hf-seq-export")


def test_hf_seq_imports_without_ctranslate2(monkeypatch):
    """No module of the package imports ctranslate2 at module level (export.py only inside its functions), and
    without it the export says how to install the extra."""
    import ast

    for path in sorted((REPO / "hf_seq").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module-level statements only
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(name.split(".")[0] == "ctranslate2" for name in names), path
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r"pip install 'hf_seq\[ctranslate2\]'"):
        to_ctranslate2("x", "y")


# ---------------------------------------------------------------------------------------------------------------
# averaging
# ---------------------------------------------------------------------------------------------------------------


def _saved(model, tokenizer, folder: Path) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_average_is_the_mean_of_the_weights(tokenizer, tmp_path):
    folders = [_saved(tiny_transformer(len(tokenizer), seed=s), tokenizer, tmp_path / f"ck{s}") for s in range(3)]
    (folders[-1] / "optimizer.pt").write_bytes(b"not a model file")
    out = average_checkpoints(folders, tmp_path / "avg")
    saved = [load_file(f / "model.safetensors") for f in folders]
    averaged = load_file(out / "model.safetensors")
    assert set(averaged) == set(saved[0])
    for key, value in averaged.items():
        expected = torch.stack([s[key].double() for s in saved]).mean(0).to(saved[0][key].dtype)
        assert torch.equal(value, expected), key
    assert not (out / "optimizer.pt").exists() and (out / "tokenizer.json").is_file()
    reloaded = hf_seq.TransformerForConditionalGeneration.from_pretrained(out)  # a loadable model, still tied
    assert reloaded.lm_head.weight is reloaded.model.encoder.embeddings.embed_tokens.weight
    torch.testing.assert_close(reloaded.lm_head.weight, averaged["model.encoder.embeddings.embed_tokens.weight"])


def test_average_refuses_mismatched_checkpoints(tokenizer, tmp_path):
    base = _saved(tiny_transformer(len(tokenizer)), tokenizer, tmp_path / "a")
    bert = _saved(tiny_bert(len(tokenizer)), tokenizer, tmp_path / "bert")
    with pytest.raises(ExportError, match="different families.*'hf_seq_transformer'.*'hf_seq_bert'"):
        average_state_dicts([base, bert])
    wider = _saved(tiny_transformer(len(tokenizer), intermediate_size=48), tokenizer, tmp_path / "wider")
    with pytest.raises(ExportError, match="config field `intermediate_size` is 32"):
        average_state_dicts([base, wider])
    reshaped = tmp_path / "reshaped"
    _saved(tiny_transformer(len(tokenizer)), tokenizer, reshaped)
    weights = load_file(reshaped / "model.safetensors")
    weights["model.encoder.layers.0.ffn.fc1.bias"] = torch.zeros(7)
    save_file(weights, reshaped / "model.safetensors", {"format": "pt"})
    with pytest.raises(ExportError, match=r"weight `model.encoder.layers.0.ffn.fc1.bias` is \(32,\)"):
        average_state_dicts([base, reshaped])
    with pytest.raises(ExportError, match="no config.json"):
        average_state_dicts([base, tmp_path])
    with pytest.raises(ExportError, match="is one of the checkpoints"):
        average_checkpoints([base, wider], base)


# ---------------------------------------------------------------------------------------------------------------
# the translation script
# ---------------------------------------------------------------------------------------------------------------

TINY_RUN = [
    str(REPO / "configs" / "translation_transformer.json"),
    "--max_train_samples",
    "64",
    "--max_eval_samples",
    "8",
    "--max_predict_samples",
    "6",
    "--tokenizer_vocab_size",
    "300",
    "--config_overrides",
    "hidden_size=16,intermediate_size=32,num_attention_heads=2,encoder_layers=1,decoder_layers=1",
    "--test_num_beams",
    "1,2",
    "--plot_attention",
    "false",
    "--max_target_length",
    "12",
]


@pytest.mark.data
def test_translation_script_averages_and_tests_with_ctranslate2(tmp_path):
    from hf_seq.train_scripts import train_translation

    out = tmp_path / "run"
    argv = [*TINY_RUN, "--output_dir", str(out), "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"]
    results = train_translation.main([*argv, "--average_last_checkpoints", "2", "--test_engine", "ctranslate2"])
    assert results["averaged_checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    for store in (results, results["before_averaging"]):
        for key in ("test_greedy", "test_beam2"):
            assert store[key]["test_engine"] == "ctranslate2" and 0.0 <= store[key]["test_bleu"] <= 100.0
    saved = load_file(out / "model.safetensors")
    checkpoints = [load_file(out / name / "model.safetensors") for name in ("checkpoint-2", "checkpoint-4")]
    for key, value in saved.items():  # the saved model is the average
        assert torch.equal(value, ((checkpoints[0][key].double() + checkpoints[1][key].double()) / 2).float()), key
    assert (out / "ctranslate2" / "model.bin").is_file()  # the tested export travels with the run


def test_translation_script_refuses_averaging_without_checkpoints(tmp_path):
    from hf_seq.train_scripts import train_translation
    from hf_seq.train_scripts.arguments import RecipeError

    argv = [*TINY_RUN, "--output_dir", str(tmp_path / "r"), "--average_last_checkpoints", "3"]
    with pytest.raises(RecipeError, match="`average_last_checkpoints` 3 .*save_strategy"):
        train_translation.main(argv)
    with pytest.raises(RecipeError, match="save_total_limit"):
        train_translation.main([*argv, "--save_strategy", "steps", "--save_total_limit", "2"])
    with pytest.raises((RecipeError, ValueError), match="`test_engine`"):
        train_translation.main([*argv, "--test_engine", "onnx"])


def eos_prone_transformer(vocab_size: int, seed: int, eos_scale: float):
    """A random model whose end-token logit is scaled: its beams finish at different steps (some at once)."""
    model = tiny_transformer(vocab_size, seed=seed, tie_word_embeddings=False)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= eos_scale
    return model


def generate_ids(model, tokenizer, texts, max_new_tokens=12, **options) -> list[list[int]]:
    enc = tokenizer(list(texts), padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, **options)
    return [row[: row.index(EOS)] if EOS in row else row for row in out[:, 1:].tolist()]


@pytest.mark.parametrize(
    "search",
    [
        {"num_beams": 5, "early_stopping": True},  # CTranslate2's own stopping rule: patience 1
        {"num_beams": 5, "early_stopping": True, "length_penalty": 2.0},
        {"num_beams": 4, "length_penalty": 0.0},  # no normalisation: both stop when nothing can beat the best
        {"num_beams": 1, "no_repeat_ngram_size": 2, "min_new_tokens": 2},
    ],
    ids=lambda search: "-".join(f"{k}={v}" for k, v in search.items()),
)
def test_search_options_match_generate(search, tokenizer, tmp_path):
    """generate_options: the generation settings whose CTranslate2 counterparts decode token for token the same,
    on models whose hypotheses end at different steps, the first step included (an empty translation)."""
    lengths = set()
    for seed, eos_scale in ((1, 3.0), (2, 2.0), (4, 3.0), (2, 1.0)):
        model = eos_prone_transformer(len(tokenizer), seed, eos_scale)
        translator = ctranslate2.Translator(
            str(to_ctranslate2(model, tmp_path / f"ct2_{seed}_{eos_scale}", tokenizer=tokenizer)), intra_threads=1
        )
        expected = generate_ids(model, tokenizer, TEXTS, **search)
        fields = {k: v for k, v in search.items() if k != "num_beams"}
        got = ctranslate2_translate(
            translator, tokenizer, TEXTS, num_beams=search["num_beams"], max_new_tokens=12, generation_config=fields
        )
        assert got == expected, (seed, eos_scale)
        lengths.update(len(row) for row in expected)
    assert len(lengths) >= 2  # translations of several lengths: the stopping rules were exercised


def test_generate_options_mapping():
    from transformers import GenerationConfig

    from hf_seq.toolkit.export import EARLY_STOPPING_FALSE_PATIENCE, generate_options

    assert generate_options(None, 1) == {"min_decoding_length": 0}
    assert generate_options(None, 5) == {
        "min_decoding_length": 0,
        "length_penalty": 1.0,
        "patience": EARLY_STOPPING_FALSE_PATIENCE,
    }
    config = GenerationConfig(num_beams=4, early_stopping=True, length_penalty=0.6, min_length=4)
    assert generate_options(config, 4) == {"min_decoding_length": 3, "length_penalty": 0.6, "patience": 1.0}
    assert generate_options({"min_new_tokens": 5, "no_repeat_ngram_size": 3}, 1) == {
        "min_decoding_length": 5,
        "no_repeat_ngram_size": 3,
    }
    # a trained model's saved generation_config.json spells the neutral values out: they are not refused
    saved = {
        "repetition_penalty": 1.0,
        "diversity_penalty": 0.0,
        "num_beam_groups": 1,
        "do_sample": False,
        "encoder_repetition_penalty": 1.0,
        "length_penalty": 1.0,
        "early_stopping": False,
    }
    assert generate_options(saved, 5) == generate_options(None, 5)
    assert generate_options(GenerationConfig(**saved), 1) == {"min_decoding_length": 0}
    with pytest.raises(ExportError, match="`repetition_penalty`"):
        generate_options({"repetition_penalty": 1.2}, 1)
    with pytest.raises(ExportError, match="`diversity_penalty`"):
        generate_options({"diversity_penalty": 0.5}, 1)
    with pytest.raises(ExportError, match="`do_sample`"):
        generate_options(GenerationConfig(do_sample=True), 1)
    with pytest.raises(ExportError, match="no field `beam_sise`"):
        generate_options({"beam_sise": 4}, 4)
