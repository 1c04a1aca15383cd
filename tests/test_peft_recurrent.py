"""PEFT LoRA on the recurrent weights: ``LoraConfig(target_modules="all-linear")`` reaches the gates of every recurrent
head (classifier, tagger, LM, both sides of the seq2seq), adapts, saves, loads and merges, and the fused kernels stay
the path that runs."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import hf_seq
from hf_seq import recurrent_kernels
from hf_seq.recurrent import FOLD, MODULES, GateProjection, RecurrentLayer

pytest.importorskip("peft")
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from peft.tuners.lora import LoraLayer  # noqa: E402

VOCAB, PAD, BOS, EOS = 24, 0, 2, 3
FUSED_KERNELS = {
    recurrent_kernels.FULL,
    recurrent_kernels.PACKED,
    recurrent_kernels.ALIGNED,
    recurrent_kernels.ONE_STEP,
}


def rnn_config(**overrides) -> hf_seq.HfSeqRNNConfig:
    kwargs = dict(
        vocab_size=VOCAB,
        embedding_size=6,
        hidden_size=5,
        num_hidden_layers=2,
        cell="lstm",
        dropout=0.0,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    return hf_seq.HfSeqRNNConfig(**{**kwargs, **overrides})


def seq2seq_config(**overrides) -> hf_seq.HfSeqRNNSeq2SeqConfig:
    kwargs = dict(
        vocab_size=VOCAB,
        embedding_size=8,
        hidden_size=10,
        attention="additive",
        dropout=0.0,
        max_target_length=16,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    return hf_seq.HfSeqRNNSeq2SeqConfig(**{**kwargs, **overrides})


# head -> (model factory, PEFT task type, the output layer all-linear leaves alone or None)
HEADS = {
    "classifier": (
        lambda **kw: hf_seq.RNNForSequenceClassification(rnn_config(bidirectional=True, num_labels=3, **kw)),
        "SEQ_CLS",
        "classifier",
    ),
    # PEFT treats a token classifier's head as any other linear layer (no task type: see the test comparing with
    # transformers' BertForTokenClassification)
    "tagger": (
        lambda **kw: hf_seq.RNNForTokenClassification(rnn_config(bidirectional=True, num_labels=4, **kw)),
        None,
        None,
    ),
    "lm": (lambda **kw: hf_seq.RNNForCausalLM(rnn_config(**kw)), "CAUSAL_LM", "lm_head"),
    "seq2seq": (
        lambda **kw: hf_seq.RNNSeq2SeqForConditionalGeneration(
            seq2seq_config(bidirectional=True, encoder_layers=2, **kw)
        ),
        "SEQ_2_SEQ_LM",
        "lm_head",
    ),
}
CELLS = {"classifier": "lstm", "tagger": "gru", "lm": "lstm", "seq2seq": "lstm"}


def build(head: str, seed: int = 0, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return HEADS[head][0](**{"cell": CELLS[head], **overrides}).eval()


def batch(head: str, labels: bool = False) -> dict:
    """Left-padded batch of 3 (one row with 2 pads), labels for a training step."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (3, 7), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    inputs = {"input_ids": ids, "attention_mask": mask}
    if head == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(4, VOCAB, (3, 5), generator=generator)
        if labels:
            inputs["labels"] = torch.randint(4, VOCAB, (3, 5), generator=generator)
    elif labels:
        inputs["labels"] = {
            "classifier": torch.tensor([0, 2, 1]),
            "tagger": torch.randint(0, 4, (3, 7), generator=generator).masked_fill(mask == 0, -100),
            "lm": ids.masked_fill(mask == 0, -100),
        }[head]
    return inputs


def logits(model: nn.Module, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**{k: v for k, v in inputs.items() if k != "labels"}).logits


def differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Clearly different (relative to the outputs' scale: the seq2seq's initial logits are ~1e-4)."""
    return bool((a - b).abs().max() > 0.05 * b.abs().max())


def lora(head: str, **overrides) -> LoraConfig:
    """The usual config; ``init_lora_weights=False`` so that the adapter starts non-zero (adapted != base)."""
    kwargs = dict(target_modules="all-linear", r=2, lora_alpha=4, init_lora_weights=False, task_type=HEADS[head][1])
    return LoraConfig(**{**kwargs, **overrides})


def gate_names(model: nn.Module) -> set[str]:
    """Every gate projection of every recurrent layer (ih/hh, both directions)."""
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, RecurrentLayer):
            names.update(f"{name}.{gate}" for gate in module._gate_names)
    return names


@pytest.mark.parametrize("head", HEADS)
def test_all_linear_reaches_every_gate_and_leaves_the_output_layer(head):
    model = build(head)
    gates = gate_names(model)
    expected = 2 * 2 * 2  # two layers (encoder), ih and hh, both directions (or the seq2seq decoder's layer)
    assert len(gates) >= (expected if head != "lm" else 4)
    peft_model = get_peft_model(model, lora(head))
    wrapped = {name for name, module in peft_model.base_model.model.named_modules() if isinstance(module, LoraLayer)}
    assert gates <= wrapped, f"gates without LoRA: {sorted(gates - wrapped)}"
    if head == "seq2seq":  # both sides: encoder and decoder gates
        assert any(".encoder." in name for name in gates) and any(".decoder." in name for name in gates)
        assert {"model.decoder.attention_proj", "model.decoder.score.query_proj"} <= wrapped
    output_layer = HEADS[head][2]
    if output_layer is not None:
        assert output_layer not in wrapped
        assert not any(isinstance(m, LoraLayer) for m in [peft_model.base_model.model.get_submodule(output_layer)])
    else:
        assert "classifier" in wrapped


def test_token_classifier_head_rule_is_transformers_rule():
    """PEFT's all-linear treats the tagger's head as it treats transformers' BertForTokenClassification's: a LoRA
    target without a task type; with ``task_type="TOKEN_CLS"`` (which also lists it in ``modules_to_save``) PEFT
    refuses both models alike."""
    from transformers import BertConfig, BertForTokenClassification

    def bert():
        config = BertConfig(vocab_size=VOCAB, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
        return BertForTokenClassification(config)

    for factory in (bert, lambda: build("tagger")):
        peft_model = get_peft_model(factory(), LoraConfig(target_modules="all-linear", r=2))
        assert isinstance(peft_model.base_model.model.classifier, LoraLayer)
        with pytest.raises(TypeError, match="modules_to_save"):
            get_peft_model(factory(), LoraConfig(target_modules="all-linear", r=2, task_type="TOKEN_CLS"))


@pytest.mark.parametrize("head", HEADS)
def test_adapted_differs_merged_equals_adapted_and_adapter_round_trips(head, tmp_path):
    model = build(head)
    inputs = batch(head)
    base = logits(model, inputs)
    peft_model = get_peft_model(copy.deepcopy(model), lora(head)).eval()
    adapted = logits(peft_model, inputs)
    assert differs(adapted, base), "the adapter changed nothing"
    with peft_model.disable_adapter():
        # a deep copy, not the same object: its weights sit at other addresses, so close (MKL), not bit-equal
        torch.testing.assert_close(logits(peft_model, inputs), base, rtol=1e-6, atol=1e-6)
    # a gate's adapter alone changes the output: the recurrent weights are really adapted
    only_gates = get_peft_model(copy.deepcopy(model), lora(head, target_modules=["ih_l0", "hh_l0"]))
    assert differs(logits(only_gates.eval(), inputs), base)

    peft_model.save_pretrained(tmp_path / "adapter")
    loaded = PeftModel.from_pretrained(build(head), tmp_path / "adapter").eval()
    torch.testing.assert_close(logits(loaded, inputs), adapted, rtol=1e-5, atol=1e-6)

    merged = loaded.merge_and_unload()
    assert not any(isinstance(m, LoraLayer) for m in merged.modules())
    layers = [m for m in merged.modules() if isinstance(m, RecurrentLayer)]
    assert all(type(getattr(layer, gate)) is GateProjection for layer in layers for gate in layer._gate_names)
    assert merged.state_dict().keys() == model.state_dict().keys()  # the same names: folders load as before
    torch.testing.assert_close(logits(merged, inputs), adapted, rtol=1e-5, atol=1e-5)
    merged.save_pretrained(tmp_path / "merged")
    reloaded = type(model).from_pretrained(tmp_path / "merged").eval()
    for name, tensor in merged.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name
    torch.testing.assert_close(logits(reloaded, inputs), logits(merged, inputs), rtol=1e-6, atol=1e-6)  # two objects


@pytest.mark.parametrize("head", HEADS)
def test_training_step_changes_only_adapter_weights(head):
    peft_model = get_peft_model(build(head), lora(head))
    peft_model.train()
    before = {name: p.detach().clone() for name, p in peft_model.named_parameters()}
    trainable = {name for name, p in peft_model.named_parameters() if p.requires_grad}
    gate_adapters = {n for n in trainable if any(f".{g}." in n for g in ("ih_l0", "hh_l0", "ih_l0_reverse"))}
    assert gate_adapters, "no trainable adapter weight on a recurrent gate"
    assert all("lora_" in name or "modules_to_save" in name for name in trainable)
    optimizer = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=0.5)
    peft_model(**batch(head, labels=True)).loss.backward()
    optimizer.step()
    after = dict(peft_model.named_parameters())
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert gate_adapters <= changed, f"gate adapters not trained: {sorted(gate_adapters - changed)}"
    assert changed <= trainable, f"frozen weights changed: {sorted(changed - trainable)}"


class KernelLog:
    """Records what :func:`choose_kernel` answers for each recurrent layer call."""

    def __init__(self, monkeypatch):
        self.kernels: list[str] = []
        original = recurrent_kernels.choose_kernel

        def recording(layer, inputs, padding):
            kernel = original(layer, inputs, padding)
            self.kernels.append(kernel)
            return kernel

        monkeypatch.setattr(recurrent_kernels, "choose_kernel", recording)

    def run(self, model: nn.Module, inputs: dict) -> set[str]:
        self.kernels.clear()
        logits(model, inputs)
        return set(self.kernels)


@pytest.mark.parametrize("head", ["lm", "seq2seq"])
def test_fused_kernels_run_without_adapter_and_with_a_folded_lora(head, monkeypatch):
    """No adapter, a disabled or merged one: the fused kernels over the layer's own parameters. An active LoRA without
    dropout: the same fused kernels over ``W + ΔW``. Dropout while training or DoRA: the cell path."""
    log = KernelLog(monkeypatch)
    model = build(head)
    inputs = batch(head)
    assert log.run(model, inputs) and log.run(model, inputs) <= FUSED_KERNELS
    peft_model = get_peft_model(copy.deepcopy(model), lora(head, lora_dropout=0.1)).eval()
    layers = [m for m in peft_model.modules() if isinstance(m, RecurrentLayer)]
    assert {layer.adapter_path() for layer in layers} == {FOLD}
    assert log.run(peft_model, inputs) <= FUSED_KERNELS
    with peft_model.disable_adapter():
        assert {layer.adapter_path() for layer in layers} == {None}
        assert log.run(peft_model, inputs) <= FUSED_KERNELS
    peft_model.train()  # dropout on the adapter input: its own forward, step by step
    assert {layer.adapter_path() for layer in layers} == {MODULES}
    assert log.run(peft_model, inputs) == {recurrent_kernels.CELL}
    peft_model.eval()
    merged = copy.deepcopy(peft_model).merge_and_unload()
    assert {m.adapter_path() for m in merged.modules() if isinstance(m, RecurrentLayer)} == {None}
    assert log.run(merged, inputs) <= FUSED_KERNELS


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_adapter_modules_path_merges_to_the_adapted_model(cell):
    """DoRA cannot be folded into ``W + ΔW`` before the kernel: the cell path calls the adapter modules at every step
    (the recurrent half passed as the step's bias). PEFT's own merge of the same adapter gives the same outputs."""
    torch.manual_seed(0)
    model = hf_seq.RNNForCausalLM(rnn_config(cell=cell, bidirectional=False)).eval()
    inputs = batch("lm")
    peft_model = get_peft_model(copy.deepcopy(model), lora("lm", use_dora=True)).eval()
    assert {m.adapter_path() for m in peft_model.modules() if isinstance(m, RecurrentLayer)} == {MODULES}
    adapted = logits(peft_model, inputs)
    assert differs(adapted, logits(model, inputs))
    merged = peft_model.merge_and_unload()
    torch.testing.assert_close(logits(merged, inputs), adapted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_folded_lora_equals_the_modules_path(cell):
    """The two ways of running the same LoRA adapter agree: folded into the fused kernel's weights and, on the cell
    path, through the adapter modules' own forward (forced here by a dropout of p=0 seen as active)."""
    torch.manual_seed(0)
    model = hf_seq.RNNForCausalLM(rnn_config(cell=cell, bidirectional=False)).eval()
    inputs = batch("lm")
    peft_model = get_peft_model(model, lora("lm")).eval()
    folded = logits(peft_model, inputs)
    for module in peft_model.modules():
        if isinstance(module, LoraLayer) and isinstance(module.get_base_layer(), GateProjection):
            module.lora_dropout["default"] = nn.Dropout(p=1e-30)  # an active dropout that keeps every value
    peft_model.train()
    assert {m.adapter_path() for m in peft_model.modules() if isinstance(m, RecurrentLayer)} == {MODULES}
    torch.testing.assert_close(logits(peft_model, inputs), folded, rtol=1e-5, atol=1e-6)


def test_quantization_swap_refuses_unmerged_adapters():
    peft_model = get_peft_model(build("lm"), lora("lm"))
    with pytest.raises(ValueError, match="merge_and_unload"):
        peft_model.base_model.model.prepare_for_quantization_()
    merged = peft_model.merge_and_unload()
    merged.prepare_for_quantization_()
    assert all(type(m) is nn.LSTM for m in merged.rnn.encoder.layers)


def test_gate_projection_holds_no_tensor():
    """The gate modules are views: no parameter of their own, so names, state dict and initialisation are unchanged."""
    model = build("classifier")
    layer = model.rnn.encoder.layers[0]
    assert layer.ih_l0.weight is layer.weight_ih_l0 and layer.hh_l0_reverse.bias is layer.bias_hh_l0_reverse
    assert not list(layer.ih_l0.parameters()) and not layer.ih_l0.state_dict()
    torch_lstm = nn.LSTM(6, 5, batch_first=True, bidirectional=True)
    assert set(layer.state_dict()) == set(torch_lstm.state_dict())
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(layer.ih_l0(x), nn.functional.linear(x, layer.weight_ih_l0, layer.bias_ih_l0))
    clone = copy.deepcopy(model)
    assert clone.rnn.encoder.layers[0].ih_l0.weight is clone.rnn.encoder.layers[0].weight_ih_l0


def test_gate_projection_assignment_and_int8_quantizers():
    """Assigning a gate module's weight assigns the layer's parameter (the kernels use it); int8 quantizers of
    ``nn.Linear`` layers skip the gates: torch's by exact class, torchao's by torch's ``NonDynamicallyQuantizableLinear``
    marker (the recurrent layer is quantized as a whole instead)."""
    model = build("lm")
    inputs = batch("lm")
    layer = model.rnn.encoder.layers[0]
    before = logits(model, inputs)
    replacement = nn.Parameter(layer.weight_hh_l0.detach() * 0.5)
    layer.hh_l0.weight = replacement
    assert layer.weight_hh_l0 is replacement and layer.hh_l0.weight is replacement
    assert differs(logits(model, inputs), before)
    assert isinstance(layer.ih_l0, nn.modules.linear.NonDynamicallyQuantizableLinear)
    torchao = pytest.importorskip("torchao.quantization")
    torchao.quantize_(model, torchao.Int8DynamicActivationInt8WeightConfig())
    assert type(layer.weight_ih_l0) is nn.Parameter and type(layer.weight_ih_l0.data) is torch.Tensor
    assert torch.isfinite(logits(model, inputs)).all()


@pytest.mark.parametrize("head", ["lm", "seq2seq"])
def test_adapted_generate_equals_merged_generate(head):
    """Decoding steps (the one-step kernel and the recurrent cache) run the adapter too: greedy and beam search of the
    adapted model give the merged model's tokens."""
    model = build(head)
    inputs = {k: v for k, v in batch(head).items() if k in ("input_ids", "attention_mask")}
    kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=PAD, eos_token_id=None)
    base = [model.generate(**inputs, num_beams=beams, **kwargs) for beams in (1, 3)]
    peft_model = get_peft_model(model, lora(head)).eval()
    adapted = [peft_model.generate(**inputs, num_beams=beams, **kwargs) for beams in (1, 3)]
    assert not all(torch.equal(a, b) for a, b in zip(adapted, base)), "the adapter changed no token"
    merged = peft_model.merge_and_unload()
    for beams, tokens in zip((1, 3), adapted):
        assert torch.equal(merged.generate(**inputs, num_beams=beams, **kwargs), tokens)
