"""The checks tests/test_compat.py runs in the environment of another transformers or torch release
(tests/compat_envs.py).

Run as a script with that environment's interpreter: ``python compat_checks.py remote SPECS.json`` (folders saved by
this project's environment, loaded through ``trust_remote_code=True`` only), ``python compat_checks.py trainer OUT``
(a short Trainer run + evaluate() with the installed hf_seq), ``python compat_checks.py compile`` (one head per family
through ``torch.compile(fullgraph=True)``, equal to eager), ``python compat_checks.py outputs`` (hidden states and
attentions of the installed hf_seq's BERT and Transformer through the release's capturing decorator, mistyped
keywords refused), ``python compat_checks.py below_range FOLDER`` (the transformers release is below the supported
range: the clear error) or ``python compat_checks.py below_torch_range FOLDER [VERSION]`` (the same for torch; VERSION
stands in for the installed release's version string). Imports only torch and transformers at the top, never
anything of the test suite. Prints one ``ok ...`` line per passed check; any failure is an exception (exit code 1).
"""

from __future__ import annotations

import inspect
import json
import sys

import torch
import transformers
from safetensors.torch import load_file

# the torch range pyproject.toml declares (hf_seq/compat.py TORCH_SUPPORTED_RANGE)
TORCH_RANGE = ">=2.11"


def main_output(output):
    for key in ("logits", "prediction_logits", "last_hidden_state"):
        value = output.get(key)
        if value is not None:
            return value
    return output[0]


def remote(specs_file: str) -> None:
    """Every spec: its folder loads with the Auto class through remote code, gives the saving process' outputs (logits
    close; greedy, uncached greedy and beam ``generate()`` token-identical), and loads with every other head of its
    ``auto_map`` with the pretrained base weights unchanged."""
    specs = json.load(open(specs_file))
    for spec in specs:
        folder = spec["folder"]
        model = getattr(transformers, spec["auto"]).from_pretrained(folder, trust_remote_code=True).eval()
        assert type(model).__name__ == spec["name"], (type(model), spec["name"])
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        saved = torch.load(folder + "/inputs.pt")
        expected = torch.load(folder + "/expected.pt")
        with torch.no_grad():
            got = main_output(model(**saved["forward"]))
        torch.testing.assert_close(got, expected["output"], rtol=1e-5, atol=1e-6)
        for name, kwargs in spec.get("generate", {}).items():
            tokens = model.generate(**saved["generate"], **kwargs)
            assert torch.equal(tokens, expected[name]), (spec["name"], name, tokens, expected[name])
        print("ok", spec["name"], "outputs", *sorted(spec.get("generate", {})))
        state_dict = load_file(folder + "/model.safetensors")
        auto_map = json.load(open(folder + "/config.json"))["auto_map"]
        for auto, target in sorted(auto_map.items()):
            if auto in ("AutoConfig", spec["auto"]):
                continue
            other = getattr(transformers, auto).from_pretrained(folder, trust_remote_code=True)
            assert type(other).__name__ == target.split(".")[-1], (auto, type(other), target)
            prefix = other.base_model_prefix + "."
            state = other.state_dict()
            base = [k for k in state_dict if k.startswith(prefix)] or list(state_dict)  # a base model's folder
            assert base, (folder, prefix)
            matched = 0
            for key in base:
                bare = key[len(prefix) :] if key.startswith(prefix) else key
                mine = next((k for k in (key, bare, prefix + bare) if k in state), None)  # with or without the prefix
                if mine is None:  # a head without the pooler drops it (BertForMaskedLM from BertModel's folder)
                    assert ".pooler." in f".{key}", (spec["name"], auto, key)
                    continue
                assert torch.equal(state[mine], state_dict[key]), (spec["name"], auto, key)
                matched += 1
            assert matched, (spec["name"], auto)
            print("ok", spec["name"], "loads as", type(other).__name__)
    assert not any(name == "hf_seq" or name.startswith("hf_seq.") for name in sys.modules), (
        "remote code imported hf_seq"
    )


def tiny_heads() -> dict:
    """One head per family of the installed hf_seq with a tiny config: {head class: config}."""
    import hf_seq

    assert "site-packages" in hf_seq.__file__, hf_seq.__file__
    return {
        hf_seq.RNNForSequenceClassification: hf_seq.HfSeqRNNConfig(vocab_size=20, embedding_size=6, hidden_size=5),
        hf_seq.RNNForCausalLM: hf_seq.HfSeqRNNConfig(vocab_size=20, embedding_size=6, hidden_size=5),
        hf_seq.RNNSeq2SeqForConditionalGeneration: hf_seq.HfSeqRNNSeq2SeqConfig(
            vocab_size=20, embedding_size=6, hidden_size=8, attention="additive", decoder_start_token_id=2
        ),
        hf_seq.TransformerForConditionalGeneration: hf_seq.HfSeqTransformerConfig(
            vocab_size=20,
            hidden_size=8,
            encoder_layers=1,
            decoder_layers=1,
            num_attention_heads=2,
            intermediate_size=16,
            max_position_embeddings=16,
            decoder_start_token_id=2,
        ),
        hf_seq.BertForMaskedLM: hf_seq.HfSeqBertConfig(
            vocab_size=20,
            hidden_size=8,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=16,
            max_position_embeddings=16,
        ),
    }


def trainer(out_dir: str) -> None:
    """A short Trainer run of one head per family with the installed hf_seq; evaluate() reports eval_loss and calls
    compute_metrics."""
    import hf_seq

    torch.manual_seed(0)
    heads = tiny_heads()
    ids = torch.randint(4, 20, (8, 6))
    for head, config in heads.items():
        model = head(config)
        rows = []
        for row in ids:
            item = {"input_ids": row, "attention_mask": torch.ones_like(row), "labels": row.clone()}
            if head is hf_seq.RNNForSequenceClassification:
                item["labels"] = row[0] % 2
            rows.append(item)
        calls = []

        def compute_metrics(prediction, calls=calls):
            calls.append(prediction)
            return {"seen": float(len(calls))}

        args = transformers.TrainingArguments(
            output_dir=f"{out_dir}/{head.__name__}",
            max_steps=2,
            per_device_train_batch_size=4,
            per_device_eval_batch_size=4,
            learning_rate=1e-2,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=rows, eval_dataset=rows, compute_metrics=compute_metrics
        )
        trained = trainer.train()
        metrics = trainer.evaluate()
        assert torch.isfinite(torch.tensor(trained.training_loss)), trained
        assert "eval_loss" in metrics and metrics["eval_loss"] > 0, (head.__name__, metrics)
        assert len(calls) == 1 and metrics.get("eval_seen") == 1.0, (head.__name__, metrics)
        print("ok trainer", head.__name__, round(metrics["eval_loss"], 4))


def compile_families(backend: str = "inductor") -> None:
    """``torch.compile(model, fullgraph=True, backend=backend)`` of one head per family of the installed hf_seq (the
    default backend, inductor, generates and builds C++ here): a training forward + backward with labels and an
    inference forward of a padded batch, each equal to the eager model's (loss and every gradient ``rtol=1e-4``;
    dropout off). Prints ``ok compile ...`` or ``failed compile ... <error>`` per head."""
    torch.manual_seed(0)
    ids = torch.randint(4, 20, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    for head, config in tiny_heads().items():
        try:
            _compile_one(head, config, ids, mask, backend)
        except Exception as error:  # reported, not raised: the caller compares with the release's known failures
            torch._dynamo.reset()
            print(
                "failed compile", backend, head.__name__, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            )
        else:
            print("ok compile", backend, head.__name__)


def _compile_one(head, config, ids, mask, backend: str) -> None:
    import copy

    for name, value in config.to_dict().items():  # no dropout: eager and compiled draw different masks
        if isinstance(value, float) and ("dropout" in name or name.endswith("_prob")):
            setattr(config, name, 0.0)
    model = head(config)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}
    if head.__name__ == "RNNForSequenceClassification":
        batch["labels"] = ids[:, 0] % 2
    twin = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(twin, fullgraph=True, backend=backend)
    model.train(), twin.train()
    eager_loss = model(**batch).loss
    eager_loss.backward()
    compiled_loss = compiled(**batch).loss
    compiled_loss.backward()
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-4, atol=1e-6)
    for (name, param), (_, twin_param) in zip(model.named_parameters(), twin.named_parameters()):
        if param.grad is None:  # unused in the step: a compiled graph may give zeros
            assert twin_param.grad is None or not twin_param.grad.any(), name
            continue
        torch.testing.assert_close(twin_param.grad, param.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    model.eval(), twin.eval()
    inference = {k: v for k, v in batch.items() if k != "labels"}
    if head.__name__ in ("RNNSeq2SeqForConditionalGeneration", "TransformerForConditionalGeneration"):
        inference["decoder_input_ids"] = ids[:, :4]
    if "use_cache" in inspect.signature(model.forward).parameters:
        inference["use_cache"] = False
    with torch.no_grad():
        expected = model(**inference).logits
        got = compiled(**inference).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def _recorded_by_hooks(model, **inputs):
    """``model(**inputs)`` and its embeddings outputs, block outputs and attention weights, recorded by forward hooks
    of this file (not the release's capturing): {stack: {"hidden": [embeddings, block 1, ...], "self_attn": [...]}}."""
    import re

    records, handles = {}, []

    def keep(stack, kind, take):
        def hook(module, args, output):
            records.setdefault(stack, {}).setdefault(kind, []).append(take(output))

        return hook

    for name, module in model.named_modules():
        stack = "decoder" if ".decoder." in f".{name}." else "encoder"
        if re.search(r"(^|\.)embeddings$", name):
            handles.append(module.register_forward_hook(keep(stack, "hidden", lambda out: out)))
        elif re.search(r"(^|\.)layers\.\d+$", name):
            handles.append(module.register_forward_hook(keep(stack, "hidden", lambda out: out)))
        elif re.search(r"\.(self_attn|cross_attn)$", name):
            kind = name.rsplit(".", 1)[1]
            handles.append(module.register_forward_hook(keep(stack, kind, lambda out: out[1])))
    try:
        output = model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return output, records


def _same(got, expected, what):
    assert got is not None and len(got) == len(expected) > 0, (what, None if got is None else len(got), len(expected))
    for index, (a, b) in enumerate(zip(got, expected)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"{what}[{index}]")


def outputs() -> None:
    """``output_hidden_states`` / ``output_attentions`` of the installed hf_seq's BERT and Transformer on this release
    (the capturing decorator through hf_seq/compat.py): equal to the blocks' outputs and the attention weights that
    forward hooks of this file record, in the call, on the config and as a tuple; BERT's equal to transformers' own
    BertModel with the same weights; the same through a function registered with ``AttentionInterface``; with
    ``generate(return_dict_in_generate=True)``; and a mistyped keyword is a ``TypeError`` naming it."""
    import hf_seq
    from hf_seq.attention import eager_attention_forward
    from hf_seq.toolkit.bert_conversion import from_transformers_bert

    assert "site-packages" in hf_seq.__file__, hf_seq.__file__
    calls = []

    def counting(module, query, key, value, attention_mask, **kwargs):
        calls.append(module)
        return eager_attention_forward(module, query, key, value, attention_mask, **kwargs)

    transformers.AttentionInterface.register("compat_counting", counting)
    torch.manual_seed(0)
    ids = torch.randint(4, 40, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    flags = dict(output_hidden_states=True, output_attentions=True)
    kw = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=24)
    reference = transformers.BertModel(transformers.BertConfig(**kw, attn_implementation="eager")).eval()
    bert = from_transformers_bert(hf_seq.BertModel, reference).eval()
    seq2seq = hf_seq.TransformerForConditionalGeneration(
        hf_seq.HfSeqTransformerConfig(
            vocab_size=40, hidden_size=16, encoder_layers=2, decoder_layers=2, num_attention_heads=2,
            intermediate_size=24, max_position_embeddings=32, pad_token_id=0, bos_token_id=2, eos_token_id=3,
            decoder_start_token_id=2, dropout=0.0, norm_position="post",
        )
    ).eval()  # fmt: skip
    target = torch.tensor([[2, 5, 6, 7], [2, 8, 9, 10]])
    inputs = {
        "bert": dict(input_ids=ids, attention_mask=mask),
        "transformer": dict(input_ids=ids, attention_mask=mask, decoder_input_ids=target, use_cache=False),
    }
    names = {  # output field -> (stack, recorded kind)
        "bert": {"hidden_states": ("encoder", "hidden"), "attentions": ("encoder", "self_attn")},
        "transformer": {
            "encoder_hidden_states": ("encoder", "hidden"),
            "encoder_attentions": ("encoder", "self_attn"),
            "decoder_hidden_states": ("decoder", "hidden"),
            "decoder_attentions": ("decoder", "self_attn"),
            "cross_attentions": ("decoder", "cross_attn"),
        },
    }
    for family, model in (("bert", bert), ("transformer", seq2seq)):
        batch = inputs[family]
        for implementation in ("sdpa", "eager", "compat_counting"):
            model.set_attn_implementation(implementation)
            for where in ("call", "config", "tuple"):
                if where == "config" and implementation != "eager":
                    continue  # transformers refuses config.output_attentions but with eager (5.0: any other)
                calls.clear()
                for name in flags:
                    setattr(model.config, name, where == "config")
                extra = {} if where == "config" else dict(flags, return_dict=where != "tuple")
                with torch.no_grad():
                    got, recorded = _recorded_by_hooks(model, **batch, **extra)
                if where == "tuple":
                    assert isinstance(got, tuple), type(got)
                    # BERT: (last, pooler, hidden states, attentions); the Transformer (no cache): logits, decoder states,
                    # decoder attentions, cross attentions, encoder last / states / attentions
                    fields = {"bert": (2, 3), "transformer": (5, 6, 1, 2, 3)}[family]
                    got = dict(zip(names[family], (got[i] for i in fields)))
                for field, (stack, kind) in names[family].items():  # post-LN: the last block's output is last
                    _same(got[field], recorded[stack][kind], f"{family} {implementation} {where} {field}")
                assert (len(calls) > 0) == (implementation == "compat_counting"), (implementation, len(calls))
                print("ok outputs", family, implementation, where)
        for name in flags:
            setattr(model.config, name, False)
        model.set_attn_implementation("eager")
        with torch.no_grad():
            assert model(**batch).get("attentions") is None and model(**batch).get("cross_attentions") is None
        for typo in ("output_hiden_states", "atention_mask"):
            try:
                model(**batch, **{typo: True})
            except TypeError as error:
                assert f"'{typo}'" in str(error) and "'output_hidden_states'" in str(error), str(error)
            else:
                raise AssertionError(f"{family}: {typo}= was accepted")
        print("ok typo refused", family)
    with torch.no_grad():
        expected = reference(**inputs["bert"], **flags)
        got = bert(**inputs["bert"], **flags)
    for field in ("hidden_states", "attentions"):
        _same(got[field], expected[field], f"bert vs transformers.BertModel {field}")
    print("ok outputs bert equals transformers.BertModel")
    generated = seq2seq.generate(
        ids, attention_mask=mask, max_new_tokens=3, do_sample=False, num_beams=1, return_dict_in_generate=True,
        **flags,
    )  # fmt: skip
    steps = generated.sequences.shape[1] - 1
    assert len(generated.decoder_hidden_states) == len(generated.cross_attentions) == steps, generated.keys()
    assert len(generated.encoder_hidden_states) == 3 and len(generated.encoder_attentions) == 2
    assert len(generated.decoder_attentions[0]) == 2, len(generated.decoder_attentions[0])
    print("ok outputs generate", steps)


def below_range(folder: str) -> None:
    """Below the supported range: ``import hf_seq`` and loading a saved folder each raise the one clear error."""
    version = transformers.__version__
    for what in ("import", "load"):
        try:
            if what == "import":
                import hf_seq  # noqa: F401
            else:
                transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        except ImportError as err:
            message = str(err)
            assert type(err).__name__ == "UnsupportedTransformersError", (what, type(err), message)
            assert f"transformers {version} is installed" in message and ">=5.0,<6" in message, (what, message)
            print("ok", what, "refused:", message)
        else:
            raise AssertionError(f"{what} worked on transformers {version}")


def below_torch_range(folder: str, version: str | None = None) -> None:
    """Below the supported torch range: ``import hf_seq`` and loading a saved folder each raise the one clear error,
    naming the installed torch and the range. ``version`` replaces ``torch.__version__`` first (a newer torch standing
    in for an old one: what hf_seq reads is the version string)."""
    if version is not None:
        torch.__version__ = version
    version = str(torch.__version__)
    for what in ("import", "load"):
        try:
            if what == "import":
                import hf_seq  # noqa: F401
            else:
                transformers.AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
        except ImportError as err:
            message = str(err)
            assert type(err).__name__ == "UnsupportedTorchError", (what, type(err), message)
            assert "\n" not in message, message
            assert f"torch {version} is installed" in message and f"torch{TORCH_RANGE}" in message, (what, message)
            print("ok", what, "refused:", message)
        else:
            raise AssertionError(f"{what} worked on torch {version}")


if __name__ == "__main__":
    checks = {"remote": remote, "trainer": trainer, "compile": compile_families, "outputs": outputs}
    checks.update(below_range=below_range, below_torch_range=below_torch_range)
    checks[sys.argv[1]](*sys.argv[2:])
