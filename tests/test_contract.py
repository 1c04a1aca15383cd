"""The PyTorch / Hugging Face tool-chain contract of every registered hf_seq head (checks transformers' common tests lack).

The heads are read from what ``import hf_seq`` registers with transformers' Auto classes (``registered_heads``), so
a newly registered head is checked without editing this file; its family needs a tiny config in tests/tiny_models.py
(a KeyError otherwise, never a skip). Where it shows that a check is fair, the same check also runs on transformers'
own MarianMTModel and BertForMaskedLM (ids ``peer-...``, slow tests).

Checked per head: no graph breaks (training forward with labels, inference forward); a ``torch.compile(fullgraph=True)``
training step equal to eager; ``torch.export`` and ONNX export (dynamo) with onnxruntime parity; dynamic int8
quantization of every Linear/LSTM/GRU; gradient checkpointing; config-level vs call-level output flags; the old
``past_key_values=`` name; the recurrent models' stateful generation contract; Trainer label smoothing of causal LMs;
clear ValueErrors for bad input.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from unittest import mock

import pytest
import torch
import transformers
from conftest import assert_same_outputs
from tiny_models import (
    ALL_HEADS,
    BOS,
    FAMILIES,
    PAD,
    TEXTS,
    build_tokenizer,
    family_of,
    main_output,
    model_inputs,
    registered_heads,
    tiny_model,
)
from torch import nn
from torch.utils._pytree import tree_flatten

import hf_seq
from hf_seq.toolkit.quantization import quantize_dynamic_int8

HEADS = [model_cls for _, model_cls in registered_heads()]
AUTO_NAME = {model_cls: auto_name for auto_name, model_cls in registered_heads()}
# families whose models have attention layers (output_attentions applies); a new family must say
HAS_ATTENTIONS = {"rnn": False, "rnn_seq2seq": True, "transformer": True, "bert": True}
RECURRENT_FAMILIES = {"rnn", "rnn_seq2seq"}
PEERS = ("MarianMTModel", "BertForMaskedLM")  # transformers' own models, to show a check is fair


def head_id(head) -> str:
    return head if isinstance(head, str) else head.__name__


def peer_params(*names):
    """transformers' own models through the same check: they show the check is fair, and they do not change with
    hf_seq, so they run with the slow tests (``make test-all``)."""
    slow = pytest.mark.slow(reason="a peer: transformers' own model through the same check")
    return [pytest.param(name, id=f"peer-{name}", marks=slow) for name in names]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def peer_model(name: str, vocab_size: int) -> transformers.PreTrainedModel:
    """A tiny transformers model of the same size as the hf_seq tiny configs."""
    torch.manual_seed(0)
    if name == "MarianMTModel":
        config = transformers.MarianConfig(
            vocab_size=vocab_size,
            hidden_size=16,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            max_position_embeddings=32,
            dropout=0.0,
            pad_token_id=PAD,
            eos_token_id=3,
            decoder_start_token_id=BOS,
        )
        return transformers.MarianMTModel(config).eval()
    config = transformers.BertConfig(
        vocab_size=vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForMaskedLM(config).eval()


def build(head, tokenizer, train: bool = False, labels: bool = False, **overrides):
    """(model, inputs): the tiny model of ``head`` (an hf_seq class or a peer's name) and a padded batch for it."""
    if isinstance(head, str):
        model = peer_model(head, len(tokenizer))
    else:
        model = tiny_model(head, len(tokenizer), **overrides)
    model.train(train)
    return model, model_inputs(model, tokenizer, labels=labels)


def takes(model, name: str) -> bool:
    return name in inspect.signature(model.forward).parameters


def training_loss(output) -> torch.Tensor:
    """The model's loss, or for a head without one (a base model) the mean square of its main output."""
    loss = output.get("loss") if hasattr(output, "get") else None
    return loss if loss is not None else main_output(output).float().pow(2).mean()


def tensor_leaves(output) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(output)[0] if isinstance(leaf, torch.Tensor)]


def clone_inputs(inputs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def describe_breaks(explanation) -> str:
    """One line per distinct place of a graph break (file:line, reason, how often)."""
    places: dict[str, int] = {}
    for reason in explanation.break_reasons:
        where = reason.user_stack[-1] if reason.user_stack else None
        place = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where is not None else "?"
        key = f"{place}: {str(reason.reason).splitlines()[0][:160]}"
        places[key] = places.get(key, 0) + 1
    return "\n".join(f"  {key} (x{count})" for key, count in places.items())


def test_registry_matches_the_tiny_model_list():
    """Every registered head has a tiny config and tests/tiny_models.py lists no head that is not registered."""
    assert {head for _, head in ALL_HEADS} == set(HEADS)
    assert {family_of(head) for head in HEADS} == set(FAMILIES) == set(HAS_ATTENTIONS)


# ------------------------------------------------------------------------------------------- compiler stack


@pytest.mark.parametrize("mode", ["train", "inference"])
@pytest.mark.parametrize("head", [*HEADS, *peer_params(*PEERS)], ids=head_id)
def test_no_graph_breaks(head, mode, tokenizer):
    """``torch._dynamo.explain`` finds one graph: a training forward with labels, an inference forward without."""
    train = mode == "train"
    model, inputs = build(head, tokenizer, train=train, labels=train)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(**inputs)
    torch._dynamo.reset()
    breaks = explanation.graph_break_count
    assert breaks == 0, f"{head_id(head)} {mode} forward: {breaks} graph breaks at\n{describe_breaks(explanation)}"


COMPILE_BACKENDS = [
    "aot_eager",  # Dynamo capture + AOTAutograd: where graph breaks and data-dependent guards fail
    pytest.param("inductor", marks=pytest.mark.slow),  # the default backend: 20-50 s of C++ codegen per model here
]


@pytest.mark.parametrize("backend", COMPILE_BACKENDS)
@pytest.mark.parametrize("head", [*HEADS, *peer_params("BertForMaskedLM")], ids=head_id)
def test_compiled_training_step_matches_eager(head, backend, tokenizer):
    """``torch.compile(model, fullgraph=True)``: same loss and gradients as eager (rtol 1e-4)."""
    model, inputs = build(head, tokenizer, train=True, labels=True)
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    eager_loss = training_loss(model(**clone_inputs(inputs)))
    eager_loss.backward()
    compiled_loss = training_loss(compiled(**clone_inputs(inputs)))
    compiled_loss.backward()
    torch._dynamo.reset()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-4, atol=1e-6)
    for (name, param), (_, twin_param) in zip(model.named_parameters(), twin.named_parameters()):
        if param.grad is None:  # unused in the step (e.g. BertModel's pooler): AOTAutograd may give zeros instead
            assert twin_param.grad is None or not twin_param.grad.any(), name
            continue
        torch.testing.assert_close(twin_param.grad, param.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def inference_inputs(model, tokenizer) -> dict:
    """The batch of an inference forward; generative heads without a cache (an exported graph serves logits)."""
    inputs = model_inputs(model, tokenizer)
    if takes(model, "use_cache"):
        inputs["use_cache"] = False
    return inputs


@pytest.mark.parametrize("head", [*HEADS, *peer_params(*PEERS)], ids=head_id)
def test_export_and_onnx_match_eager(head, tokenizer, tmp_path):
    """``torch.export.export`` and ``torch.onnx.export(dynamo=True)`` of the inference forward; onnxruntime <= 1e-4."""
    import onnxruntime

    model, _ = build(head, tokenizer)
    inputs = inference_inputs(model, tokenizer)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        expected = tensor_leaves(model(**inputs))
        exported = torch.export.export(model, args=(), kwargs=inputs)
        got = tensor_leaves(exported.module()(**inputs))
    assert len(got) == len(expected)
    for actual, reference in zip(got, expected):
        assert_same_outputs(actual, reference)

    program = torch.onnx.export(model, args=(), kwargs=inputs, dynamo=True, verbose=False)
    path = tmp_path / "model.onnx"
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {arg.name: tensors[arg.name].numpy() for arg in session.get_inputs()}
    outputs = session.run(None, feeds)
    assert len(outputs) == len(expected)
    for actual, reference in zip(outputs, expected):
        torch.testing.assert_close(torch.from_numpy(actual), reference, rtol=0, atol=1e-4)


QUANTIZABLE = (nn.Linear, nn.LSTM, nn.GRU)
QUANTIZED = (
    torch.ao.nn.quantized.dynamic.Linear,
    torch.ao.nn.quantized.dynamic.LSTM,
    torch.ao.nn.quantized.dynamic.GRU,
)


def tied_output_layer(model) -> str | None:
    """The module name of the output layer when it shares its weight with the input embeddings."""
    output, inputs = model.get_output_embeddings(), model.get_input_embeddings()
    if output is None or inputs is None or output.weight is not inputs.weight:
        return None
    return next(name for name, module in model.named_modules() if module is output)


@pytest.mark.parametrize("head", [*HEADS, *peer_params(*PEERS)], ids=head_id)
def test_quantize_dynamic(head, tokenizer):
    """``hf_seq.toolkit.quantization.quantize_dynamic_int8`` quantizes every ``Linear``/``LSTM``/``GRU`` layer (a tied output
    layer may stay), leaks no deprecation warning, and the quantized model gives finite outputs. For the recurrent
    families it calls ``prepare_for_quantization_()`` (their recurrent layers become the ``torch.nn`` modules
    quantize_dynamic matches by exact class); every recurrent layer of the tiny models (LSTM) must then be among the
    quantized ones."""
    model, inputs = build(head, tokenizer)
    if not isinstance(head, str) and family_of(head) in RECURRENT_FAMILIES:
        recurrent = [name for name, module in model.named_modules() if isinstance(module, nn.RNNBase)]
        model.prepare_for_quantization_()
        assert recurrent and all(type(model.get_submodule(name)) in (nn.LSTM, nn.GRU) for name in recurrent)
    targets = {name for name, module in model.named_modules() if isinstance(module, QUANTIZABLE)}
    assert targets, "the tiny model has no Linear/LSTM/GRU layer"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantized = quantize_dynamic_int8(model)
    assert not [str(w.message) for w in caught if "deprecated" in str(w.message)]
    modules = dict(quantized.named_modules())
    missed = sorted(
        f"{name} ({type(modules.get(name)).__module__}.{type(modules.get(name)).__name__})"
        for name in targets - {tied_output_layer(model)}
        if not isinstance(modules.get(name), QUANTIZED)
    )
    assert not missed, f"{len(missed)} of {len(targets)} layers not quantized: {missed}"
    with torch.no_grad():
        output = main_output(quantized(**inputs))
    assert torch.isfinite(output).all()


def test_quantize_dynamic_int8_prepares_recurrent_models_itself_and_copies(tokenizer):
    """Without ``prepare_for_quantization_()`` and without ``inplace``: the float model is left as it was (same
    outputs, its own recurrent layers) and the int8 copy has torch's dynamic int8 LSTM."""
    model, inputs = build(hf_seq.RNNForSequenceClassification, tokenizer)
    with torch.no_grad():
        expected = main_output(model(**inputs))
        quantized = quantize_dynamic_int8(model)
        assert torch.equal(main_output(model(**inputs)), expected)
        assert torch.isfinite(main_output(quantized(**inputs))).all()
    assert not any(type(m) is nn.LSTM for m in model.modules())
    assert any(type(m) is torch.ao.nn.quantized.dynamic.LSTM for m in quantized.modules())


def test_quantize_dynamic_int8_without_torch_eager_quantization_says_what_to_use(tokenizer):
    """A torch that dropped ``torch.ao.quantization``: one RuntimeError naming it and the alternatives, before the
    model is touched."""
    model, _ = build(hf_seq.RNNForSequenceClassification, tokenizer)
    with mock.patch.dict("sys.modules", {"torch.ao.quantization": None}):
        with pytest.raises(RuntimeError, match=r"torch\.ao\.quantization\.quantize_dynamic.*--quantization int8"):
            quantize_dynamic_int8(model)
    with pytest.raises(TypeError, match="`model` must be a torch.nn.Module"):
        quantize_dynamic_int8("a model")


@pytest.mark.parametrize("head", [*HEADS, *peer_params(*PEERS)], ids=head_id)
def test_gradient_checkpointing_gives_equal_gradients(head, tokenizer):
    """``gradient_checkpointing_enable()`` is declared, really checkpoints, and leaves loss and gradients unchanged."""
    model, inputs = build(head, tokenizer, train=True, labels=True)
    assert type(model).supports_gradient_checkpointing is True
    loss = training_loss(model(**clone_inputs(inputs)))
    loss.backward()
    reference = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    real = transformers.modeling_utils.checkpoint
    with mock.patch("transformers.modeling_utils.checkpoint", wraps=real) as spy:
        model.gradient_checkpointing_enable()
        assert model.is_gradient_checkpointing
        checkpointed = training_loss(model(**clone_inputs(inputs)))
        checkpointed.backward()
    assert spy.call_count > 0, "gradient_checkpointing_enable() left every layer unchanged"
    torch.testing.assert_close(checkpointed, loss, rtol=1e-5, atol=1e-7)
    got = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == reference.keys()
    for name, grad in reference.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


def test_trainer_gradient_checkpointing(tokenizer, tmp_path):
    """``TrainingArguments(gradient_checkpointing=True)`` trains an hf_seq model with checkpointed layers."""
    model, inputs = build(hf_seq.TransformerForConditionalGeneration, tokenizer, train=True, labels=True)
    rows = [{k: v[i] for k, v in inputs.items()} for i in range(inputs["input_ids"].shape[0])]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        gradient_checkpointing=True,
        max_steps=2,
        per_device_train_batch_size=3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
    )
    before = [p.detach().clone() for p in model.parameters()]
    real = transformers.modeling_utils.checkpoint
    with mock.patch("transformers.modeling_utils.checkpoint", wraps=real) as spy:
        transformers.Trainer(model=model, args=args, train_dataset=rows).train()
    assert model.is_gradient_checkpointing
    assert spy.call_count > 0
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


# ------------------------------------------------------------------------------------------- output plumbing


def outputs_named(output, suffix: str) -> dict:
    return {k: v for k, v in output.items() if k.endswith(suffix) and k != "last_hidden_state"}


@pytest.mark.parametrize("head", HEADS, ids=head_id)
def test_config_and_call_level_output_flags_agree(head, tokenizer):
    """``output_hidden_states`` / ``output_attentions`` / ``return_dict``: set on the config or passed to the call,
    the same outputs; neither, none."""
    model, inputs = build(head, tokenizer)
    flags = {"output_hidden_states": "hidden_states"}
    if HAS_ATTENTIONS[family_of(head)]:
        flags["output_attentions"] = "attentions"
        if model.config._attn_implementation == "sdpa":
            model.set_attn_implementation("eager")  # transformers refuses config.output_attentions with sdpa
    with torch.no_grad():
        default = model(**inputs)
        for flag, suffix in flags.items():
            assert not any(v is not None for v in outputs_named(default, suffix).values()), f"{flag} off by default"
            by_call = outputs_named(model(**inputs, **{flag: True}), suffix)
            by_call = {k: v for k, v in by_call.items() if v is not None}
            assert by_call, f"{flag}=True in the call returned no {suffix}"
            setattr(model.config, flag, True)
            try:
                by_config = outputs_named(model(**inputs), suffix)
            finally:
                setattr(model.config, flag, False)
            assert {k: v for k, v in by_config.items() if v is not None}.keys() == by_call.keys(), (
                f"config.{flag}=True: {sorted(k for k, v in by_config.items() if v is not None)}, "
                f"call: {sorted(by_call)}"
            )
            for key, value in by_call.items():
                for a, b in zip(tensor_leaves(by_config[key]), tensor_leaves(value)):
                    assert torch.equal(a, b), key
        as_tuple = model(**inputs, return_dict=False)
        model.config.return_dict = False
        try:
            by_config = model(**inputs)
        finally:
            model.config.return_dict = True
    assert isinstance(as_tuple, tuple) and isinstance(by_config, tuple), (type(as_tuple), type(by_config))
    assert isinstance(default, transformers.utils.ModelOutput)
    expected = tensor_leaves(default)
    for got in (tensor_leaves(as_tuple), tensor_leaves(by_config)):
        assert len(got) == len(expected)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))


SEQ2SEQ = [h for h in HEADS if FAMILIES[family_of(h)][0]().is_encoder_decoder]


@pytest.mark.parametrize("head", [*SEQ2SEQ, *peer_params("MarianMTModel")], ids=head_id)
def test_seq2seq_dummy_inputs(head, tokenizer):
    """``model(**model.dummy_inputs)`` works for an encoder-decoder (its dummy inputs include decoder_input_ids)."""
    model, _ = build(head, tokenizer)
    assert "decoder_input_ids" in model.dummy_inputs
    with torch.no_grad():
        output = model(**model.dummy_inputs)
    assert torch.isfinite(main_output(output)).all()


# ------------------------------------------------------------------------------------------------- caches

CACHED = [h for h in HEADS if h.can_generate() or "cache" in inspect.signature(h.forward).parameters]


def split_for_cache(model, inputs: dict) -> tuple[dict, dict]:
    """(prefix inputs, continuation inputs) of one unpadded batch: the last two tokens are read from a cache."""
    if model.config.is_encoder_decoder:
        source = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
        target = inputs["decoder_input_ids"]
        return {**source, "decoder_input_ids": target[:, :-2]}, {**source, "decoder_input_ids": target[:, -2:]}
    full = inputs["attention_mask"].bool().all(dim=1)
    ids = inputs["input_ids"][full]  # rows without padding
    mask = torch.ones_like(ids)
    return {"input_ids": ids[:, :-2], "attention_mask": mask[:, :-2]}, {
        "input_ids": ids[:, -2:],
        "attention_mask": mask,
    }


@pytest.mark.parametrize("head", [*CACHED, *peer_params("MarianMTModel")], ids=head_id)
def test_past_key_values_name_is_never_silently_ignored(head, tokenizer):
    """The old ``past_key_values=`` name: accepted with transformers' deprecation warning (continuing exactly as from
    ``cache=``), or rejected with an error naming it."""
    model, _ = build(head, tokenizer)
    prefix, rest = split_for_cache(model, model_inputs(model, tokenizer))
    with torch.no_grad():
        expected = main_output(model(**rest, cache=model(**prefix, use_cache=True).cache, use_cache=True))
        old_cache = model(**prefix, use_cache=True).cache
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = main_output(model(**rest, past_key_values=old_cache, use_cache=True))
            except (TypeError, ValueError) as error:
                assert "past_key_values" in str(error), f"unclear error: {error}"
                return
    assert any("past_key_values" in str(w.message) and "deprecated" in str(w.message) for w in caught), (
        "past_key_values= accepted without a deprecation warning: " + str([str(w.message) for w in caught])
    )
    assert_same_outputs(got, expected)


# ------------------------------------------------------------------------------------- recurrent models

RECURRENT_GENERATIVE = [h for h in HEADS if family_of(h) in RECURRENT_FAMILIES and h.can_generate()]


@pytest.mark.parametrize("head", RECURRENT_GENERATIVE, ids=head_id)
@pytest.mark.parametrize("assist", ["assistant_model", "prompt_lookup_num_tokens"])
def test_recurrent_models_are_stateful(head, assist, tokenizer):
    """Assisted and prompt-lookup decoding roll the cache back, which a recurrent state cannot do: a clear
    ``ValueError`` on every release, asked for by keyword or through a generation config (``_is_stateful = True`` is
    what transformers up to 5.24 reads; 5.25 has no such check)."""
    assert head._is_stateful is True
    model, _ = build(head, tokenizer)
    inputs = model_inputs(model, tokenizer, texts=["let there be light"])
    inputs.pop("decoder_input_ids", None)
    extra = {"assistant_model": model} if assist == "assistant_model" else {"prompt_lookup_num_tokens": 2}
    with pytest.raises(ValueError, match="not supported with stateful models"):
        model.generate(**inputs, max_new_tokens=3, do_sample=False, **extra)
    if assist == "prompt_lookup_num_tokens":
        config = transformers.GenerationConfig(prompt_lookup_num_tokens=2, max_new_tokens=3, do_sample=False)
        with pytest.raises(ValueError, match="not supported with stateful models"):
            model.generate(inputs.pop(model.main_input_name), config, **inputs)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (hf_seq.HfSeqRNNConfig(num_hidden_layers=3), 3),
        (hf_seq.HfSeqRNNSeq2SeqConfig(encoder_layers=2, decoder_layers=3), 3),  # the decoder's, as TransformerConfig's
        (hf_seq.HfSeqTransformerConfig(encoder_layers=2, decoder_layers=3), 3),
        (hf_seq.HfSeqBertConfig(num_hidden_layers=3), 3),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, int) else str(v),
)
def test_configs_have_num_hidden_layers(config, expected):
    assert config.num_hidden_layers == expected


GENERATIVE_SEQ2SEQ = [h for h in SEQ2SEQ if h.can_generate()]


@pytest.mark.parametrize("head", [*GENERATIVE_SEQ2SEQ, *peer_params("MarianMTModel")], ids=head_id)
def test_generate_from_a_decoder_prompt_with_its_mask(head, tokenizer):
    """``generate(decoder_input_ids=p, decoder_attention_mask=m)`` continues the prompt ``p`` as without the mask."""
    model, _ = build(head, tokenizer)
    enc = tokenizer(["a cat sat on the mat .", "let there be light"], padding=True, return_tensors="pt")
    prompt = torch.tensor([[BOS, 7, 8], [BOS, 10, 11]])
    kwargs = dict(max_new_tokens=3, min_new_tokens=3, do_sample=False)
    plain = model.generate(
        input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], decoder_input_ids=prompt, **kwargs
    )
    masked = model.generate(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        decoder_input_ids=prompt,
        decoder_attention_mask=torch.ones_like(prompt),
        **kwargs,
    )
    assert masked[:, :3].tolist() == prompt.tolist()
    assert masked.tolist() == plain.tolist()


# ------------------------------------------------------------------------------------------------ Trainer

CAUSAL_LMS = [h for h in HEADS if AUTO_NAME[h] == "AutoModelForCausalLM"]


def smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Cross-entropy against (1 - epsilon) * one-hot + epsilon * uniform, averaged over labels != -100."""
    log_probs = logits.float().log_softmax(-1)  # (N, V)
    active = labels != -100
    picked = log_probs.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    nll = -picked[active].sum() / active.sum()
    uniform = -log_probs.sum(-1)[active].sum() / (active.sum() * logits.shape[-1])
    return (1 - epsilon) * nll + epsilon * uniform


@pytest.mark.parametrize("head", [*CAUSAL_LMS, *peer_params("GPT2LMHeadModel")], ids=head_id)
def test_trainer_label_smoothing_trains_causal_lm_on_the_next_token(head, tokenizer, tmp_path):
    """``Trainer.compute_loss`` with ``label_smoothing_factor`` smooths the NEXT-token loss (labels shifted)."""
    if head == "GPT2LMHeadModel":
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=16,
            n_layer=1,
            n_head=2,
            n_positions=32,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        model = transformers.GPT2LMHeadModel(config).train()
        enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
        labels = torch.where(enc["attention_mask"].bool(), enc["input_ids"], -100)
        inputs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels}
    else:
        model, inputs = build(head, tokenizer, train=True, labels=True)
    with torch.no_grad():  # peaked logits (a fresh tiny model's are flat): shifted and unshifted losses then differ
        model.get_output_embeddings().weight.mul_(100.0)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), label_smoothing_factor=0.1, use_cpu=True, report_to=[]
    )
    trainer = transformers.Trainer(model=model, args=args)
    loss = trainer.compute_loss(model, clone_inputs(inputs))
    with torch.no_grad():
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits  # (B, T, V)
    labels = inputs["labels"]
    next_token = smoothed_loss(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), 0.1)
    same_token = smoothed_loss(logits.flatten(0, 1), labels.flatten(), 0.1)
    assert not torch.allclose(next_token, same_token, rtol=1e-2)  # the check can tell the two apart
    assert not torch.allclose(loss.detach(), same_token, rtol=1e-5), "smoothed against the unshifted labels"
    torch.testing.assert_close(loss.detach(), next_token, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- bad input


def out_of_range_labels(head, model, labels: torch.Tensor) -> torch.Tensor:
    bad = labels.clone()
    classes = model.config.num_labels if AUTO_NAME[head].endswith("Classification") else model.config.vocab_size
    if bad.dim() == 1:
        bad[0] = classes
    else:
        row, col = (bad != -100).nonzero()[0].tolist()
        bad[row, col] = classes
    return bad


@pytest.mark.parametrize("head", HEADS, ids=head_id)
def test_bad_input_gets_a_clear_value_error(head, tokenizer):
    """Eager mode: ids >= vocab_size and labels out of range raise ValueError naming the argument."""
    model, inputs = build(head, tokenizer, labels=True)
    bad = clone_inputs(inputs)
    bad["input_ids"][0, 0] = model.config.vocab_size
    with pytest.raises(ValueError, match="input_ids"):
        model(**bad)
    if "labels" in inputs:
        bad = clone_inputs(inputs)
        bad["labels"] = out_of_range_labels(head, model, inputs["labels"])
        with pytest.raises(ValueError, match="labels"):
            model(**bad)
