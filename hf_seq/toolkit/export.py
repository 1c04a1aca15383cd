"""Deployment of trained hf_seq models: CTranslate2 and ONNX Runtime exports, checkpoint averaging.

* :func:`to_ctranslate2` writes a CTranslate2 model folder (``ctranslate2.Translator`` for
  ``TransformerForConditionalGeneration``, ``ctranslate2.Encoder`` for the BERT models) with the tokenizer files
  beside it, so the folder alone translates or encodes. ``ctranslate2`` is an optional extra
  (``pip install hf_seq[ctranslate2]``), imported only inside the functions that need it.
* :func:`to_onnx` writes ONNX graphs of any generative family (the RNN LM, the RNN seq2seq, the Transformer: encoder
  and one decoder step with its state) or of a classifier, tagger or encoder, and :func:`load_onnxruntime` loads
  the folder as a model whose ``generate()`` is ``transformers``' own (:mod:`hf_seq.toolkit.onnx_runtime`); ``onnx``,
  ``onnxscript`` and ``onnxruntime`` are optional, imported only there.
* :func:`average_checkpoints` writes the element-wise mean of the weights of several checkpoints of one model (the
  habit of fairseq's ``scripts/average_checkpoints.py`` and OpenNMT-py's ``average_models.py``).
* :func:`ctranslate2_translate` decodes texts with an exported translator and returns token ids, as ``generate()``;
  :func:`generate_options` maps a generation config's search settings to CTranslate2's options.
* ``hf-seq-export ctranslate2 FOLDER OUTPUT_DIR [--quantization ...]``, ``hf-seq-export onnx FOLDER OUTPUT_DIR
  [--quantization int8]`` and ``hf-seq-export average CHECKPOINT... OUTPUT_DIR`` (:func:`main`) run them from the
  command line.

A config CTranslate2 cannot express is refused with :class:`ExportError` naming the field — never converted into a
silently different model. The mapping of every weight:

=========================================================  ==========================================================
hf_seq ``TransformerForConditionalGeneration``               CTranslate2 ``TransformerSpec``
=========================================================  ==========================================================
``model.{encoder,decoder}.embeddings.embed_tokens``         ``{encoder,decoder}.embeddings.weight`` (+ ``scale_embeddings``
                                                            = sqrt(d_model) or 1)
sinusoidal table / learned table                            ``{encoder,decoder}.position_encodings.encodings`` (always
                                                            written: the runtime's own sinusoid table has another layout)
``layers.i.self_attn.qkv_proj`` (fused ``[W_Q; W_K; W_V]``)  ``layer[i].self_attention.linear[0]``
``layers.i.self_attn.out_proj``                             ``layer[i].self_attention.linear[1]``
``layers.i.self_attn_residual.norm``                        ``layer[i].self_attention.layer_norm``
``layers.i.cross_attn.q_proj`` / ``kv_proj``                ``layer[i].attention.linear[0]`` / ``linear[1]``
``layers.i.cross_attn.out_proj``                            ``layer[i].attention.linear[2]``
``layers.i.ffn.fc1`` / ``fc2``, ``ffn_residual.norm``       ``layer[i].ffn.linear_0`` / ``linear_1``, ``ffn.layer_norm``
final LayerNorm of a pre-LN stack                           ``{encoder,decoder}.layer_norm``
``lm_head`` (tied: the embedding matrix)                    ``decoder.projection`` (no bias)
=========================================================  ==========================================================

BERT (``BertModel`` or any head's ``bert``) maps to ``TransformerEncoderModelSpec`` as ``transformers``' BERT does in
CTranslate2's own ``BertLoader``: word + segment embeddings added, learned positions, embedding LayerNorm, post-LN
blocks, and the pooler (dense + tanh). Task heads (masked-LM, classifiers) are not part of ``ctranslate2.Encoder``
and are left out; :func:`to_ctranslate2` says so.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .export_folders import check_output_dir, check_source_folder, check_tokenizer_fits, folder_tokenizer, install

logger = logging.getLogger(__name__)

TRANSFORMER_TYPE = "hf_seq_transformer"
BERT_TYPE = "hf_seq_bert"
RNN_TYPES = ("hf_seq_rnn", "hf_seq_rnn_seq2seq")
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
EXPORT_INFO = "hf_seq_export.json"  # what was exported from where, written into the CTranslate2 folder

# ACT2FN keys -> the name of CTranslate2's ``specs.Activation`` member computing the same function
ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "gelu_new": "GELUTanh",
    "gelu_pytorch_tanh": "GELUTanh",
    "gelu_fast": "GELUTanh",
    "quick_gelu": "GELUSigmoid",
    "silu": "SWISH",
    "swish": "SWISH",
    "gelu_python": "GELU",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}

# files of a Trainer checkpoint that are not the model (left out of an averaged folder)
_TRAINING_STATE_FILES = {
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "trainer_state.json",
    "training_args.bin",
    ".run_files.json",
}
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# config entries that may differ between checkpoints of one model
_CONFIG_KEYS_IGNORED = {"transformers_version", "_name_or_path", "dtype", "torch_dtype"}


class ExportError(ValueError):
    """A model, config or checkpoint that cannot be exported or averaged; the message names the field."""


# ---------------------------------------------------------------------------------------------------------------
# checks: what CTranslate2 can express
# ---------------------------------------------------------------------------------------------------------------


def _refuse_rnn(model_type: str) -> None:
    if model_type in RNN_TYPES:
        raise ExportError(
            f"`model_type` {model_type!r}: CTranslate2 has no recurrent-network spec (it runs Transformer encoders "
            f"and decoders only); exportable families are {TRANSFORMER_TYPE!r} and {BERT_TYPE!r}"
        )


def _activation(field_name: str, value: Any):
    import ctranslate2.specs as specs

    if value not in ACTIVATIONS:
        raise ExportError(
            f"`{field_name}` {value!r} has no CTranslate2 equivalent; exportable activations are {sorted(ACTIVATIONS)}"
        )
    return getattr(specs.Activation, ACTIVATIONS[value])


def check_exportable(config) -> None:
    """Raise :class:`ExportError` naming the field for a config CTranslate2 cannot run as the same model.

    Every field of ``HfSeqTransformerConfig`` / ``HfSeqBertConfig`` was checked: the dropouts,
    ``initializer_range``, ``use_cache`` and the classifier fields do not change inference; the others map to the
    spec (activation, LayerNorm position and epsilon, position table, embedding scale, tying, special tokens)."""
    model_type = getattr(config, "model_type", None)
    _refuse_rnn(model_type)
    if model_type == TRANSFORMER_TYPE:
        if not config.is_encoder_decoder:
            raise ExportError("`is_encoder_decoder` must be True: CTranslate2's TransformerSpec is an encoder-decoder")
        _activation("activation_function", config.activation_function)
        if config.norm_position not in ("post", "pre"):
            raise ExportError(f"`norm_position` {config.norm_position!r}: CTranslate2 has post- and pre-LN only")
        if config.position_embedding not in ("sinusoidal", "learned"):
            raise ExportError(
                f"`position_embedding` {config.position_embedding!r}: CTranslate2 takes a position table only"
            )
        for name in ("decoder_start_token_id", "eos_token_id"):
            if getattr(config, name, None) is None:
                raise ExportError(f"`{name}` is None: a CTranslate2 translator needs it (its start / end token)")
        if isinstance(config.eos_token_id, (list, tuple)):
            raise ExportError(f"`eos_token_id` {config.eos_token_id}: CTranslate2 stops on one end token")
    elif model_type == BERT_TYPE:
        _activation("hidden_act", config.hidden_act)
        if getattr(config, "position_embedding_type", "absolute") != "absolute":
            raise ExportError(
                f"`position_embedding_type` {config.position_embedding_type!r}: CTranslate2 has absolute positions only"
            )
    else:
        raise ExportError(
            f"`model_type` {model_type!r} cannot be exported to CTranslate2; exportable families are "
            f"{TRANSFORMER_TYPE!r} (TransformerForConditionalGeneration) and {BERT_TYPE!r} (BERT encoders)"
        )


def check_generation_config(generation_config) -> None:
    """Refuse a generation config whose decoding rules a CTranslate2 translator would not apply by itself."""
    if generation_config is None:
        return
    unsupported = {
        "forced_bos_token_id": None,
        "forced_eos_token_id": None,
        "bad_words_ids": None,
        "suppress_tokens": None,
        "begin_suppress_tokens": None,
    }
    for name, default in unsupported.items():
        value = getattr(generation_config, name, default)
        if value not in (default, [], ()):
            raise ExportError(
                f"generation_config `{name}` = {value!r}: the exported translator would not apply it (CTranslate2 "
                "takes such rules per call); remove it from the generation config or pass the rule at translation"
            )


# ---------------------------------------------------------------------------------------------------------------
# CTranslate2 export
# ---------------------------------------------------------------------------------------------------------------


def _numpy(tensor: torch.Tensor):
    # a copy: the converter quantizes the arrays of its spec in place, which would rewrite the model's own weights
    return tensor.detach().to("cpu", torch.float32, copy=True).contiguous().numpy()


def _set_linear(spec, linear: torch.nn.Linear) -> None:
    spec.weight = _numpy(linear.weight)
    if linear.bias is not None:
        spec.bias = _numpy(linear.bias)


def _set_layer_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _numpy(norm.weight)
    spec.beta = _numpy(norm.bias)


def _set_stack_embeddings(spec, embeddings) -> None:
    """Token table and hf_seq's own position table (sinusoidal buffer or learned weight) of one stack."""
    table = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings  # the encoder has a list
    table.weight = _numpy(embeddings.embed_tokens.weight)
    spec.scale_embeddings = float(embeddings.scale)
    spec.position_encodings.encodings = _numpy(embeddings.embed_positions.weight)  # (max_positions, d)


def _set_attention(spec, attention, self_attention: bool) -> None:
    if self_attention:
        _set_linear(spec.linear[0], attention.qkv_proj)  # fused [W_Q; W_K; W_V]
        _set_linear(spec.linear[1], attention.out_proj)
    else:
        _set_linear(spec.linear[0], attention.q_proj)
        _set_linear(spec.linear[1], attention.kv_proj)  # fused [W_K; W_V]
        _set_linear(spec.linear[2], attention.out_proj)


def _set_ffn(spec, block) -> None:
    _set_linear(spec.linear_0, block.ffn.fc1)
    _set_linear(spec.linear_1, block.ffn.fc2)


def _vocabulary(tokenizer, vocab_size: int) -> list[str]:
    """The tokenizer's tokens in id order (``vocab_size`` of them; CTranslate2 maps tokens to rows by position)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(vocab_size)))
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing or len(set(tokens)) != len(tokens):
        raise ExportError(
            f"the tokenizer does not give {vocab_size} distinct tokens for ids 0..{vocab_size - 1} (`vocab_size`): "
            f"{len(missing)} ids have no token, {len(tokens) - len(set(tokens))} tokens repeat"
        )
    return tokens


def _transformer_spec(model, tokenizer):
    import ctranslate2.specs as specs

    config = model.config
    check_exportable(config)
    check_generation_config(getattr(model, "generation_config", None))
    pre_norm = config.norm_position == "pre"
    spec = specs.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.num_attention_heads,
        pre_norm=pre_norm,
        activation=_activation("activation_function", config.activation_function),
    )
    base = model.model
    for stack_spec, stack, is_decoder in ((spec.encoder, base.encoder, False), (spec.decoder, base.decoder, True)):
        _set_stack_embeddings(stack_spec, stack.embeddings)
        if pre_norm:
            _set_layer_norm(stack_spec.layer_norm, stack.layer_norm)
        for layer_spec, block in zip(stack_spec.layer, stack.layers):
            _set_attention(layer_spec.self_attention, block.self_attn, self_attention=True)
            _set_layer_norm(layer_spec.self_attention.layer_norm, block.self_attn_residual.norm)
            if is_decoder:
                _set_attention(layer_spec.attention, block.cross_attn, self_attention=False)
                _set_layer_norm(layer_spec.attention.layer_norm, block.cross_attn_residual.norm)
            _set_ffn(layer_spec.ffn, block)
            _set_layer_norm(layer_spec.ffn.layer_norm, block.ffn_residual.norm)
    spec.decoder.projection.weight = _numpy(model.lm_head.weight)  # no bias

    tokens = _vocabulary(tokenizer, config.vocab_size)
    spec.register_source_vocabulary(tokens)  # one joint vocabulary: the same list twice
    spec.register_target_vocabulary(tokens)
    spec.config.decoder_start_token = tokens[config.decoder_start_token_id]
    spec.config.bos_token = tokens[config.bos_token_id] if config.bos_token_id is not None else tokens[0]
    spec.config.eos_token = tokens[config.eos_token_id]
    unk = getattr(tokenizer, "unk_token", None)
    spec.config.unk_token = unk if unk in tokens else spec.config.eos_token
    spec.config.add_source_bos = False  # the inputs are the tokenizer's own ids, special tokens included
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)
    return spec


def _bert_spec(model, tokenizer):
    import ctranslate2.specs as specs

    config = model.config
    check_exportable(config)
    bert = model if hasattr(model, "embeddings") else getattr(model, "bert", None)
    if bert is None:
        raise ExportError(f"{type(model).__name__} holds no BERT encoder (`bert` / `embeddings`)")
    pooler = getattr(bert, "pooler", None)
    heads = [name for name, _ in model.named_children() if name != "bert"] if bert is not model else []
    if heads:
        logger.warning(
            "%s: exporting its BERT encoder%s; the task head(s) %s are not part of ctranslate2.Encoder",
            type(model).__name__,
            " and pooler" if pooler is not None else "",
            heads,
        )
    encoder_spec = specs.TransformerEncoderSpec(
        config.num_hidden_layers,
        config.num_attention_heads,
        pre_norm=False,
        activation=_activation("hidden_act", config.hidden_act),
        layernorm_embedding=True,
        num_source_embeddings=2,
        embeddings_merge=specs.EmbeddingsMerge.ADD,
    )
    spec = specs.TransformerEncoderModelSpec(
        encoder_spec,
        pooling_layer=pooler is not None,
        pooling_activation=specs.Activation.Tanh,
    )
    emb = bert.embeddings
    spec.encoder.embeddings[0].weight = _numpy(emb.word_embeddings.weight)
    spec.encoder.embeddings[1].weight = _numpy(emb.token_type_embeddings.weight)
    spec.encoder.position_encodings.encodings = _numpy(emb.position_embeddings.weight)
    spec.encoder.scale_embeddings = False
    _set_layer_norm(spec.encoder.layernorm_embedding, emb.norm)
    for layer_spec, block in zip(spec.encoder.layer, bert.encoder.layers):
        _set_attention(layer_spec.self_attention, block.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, block.self_attn_residual.norm)
        _set_ffn(layer_spec.ffn, block)
        _set_layer_norm(layer_spec.ffn.layer_norm, block.ffn_residual.norm)
    if pooler is not None:
        _set_linear(spec.pooler_dense, pooler.dense)
    tokens = _vocabulary(tokenizer, config.vocab_size)
    spec.register_vocabulary(tokens)
    spec.config.unk_token = getattr(tokenizer, "unk_token", None) or tokens[0]
    spec.config.layer_norm_epsilon = float(config.layer_norm_eps)
    return spec


def _load(model_or_folder, tokenizer=None):
    """(model, tokenizer, source description) from a model object or a saved folder."""
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    if isinstance(model_or_folder, (str, os.PathLike)):
        folder = Path(model_or_folder)
        check_source_folder(folder, ExportError)  # before any work: one line naming the missing file
        config = AutoConfig.from_pretrained(folder)
        _refuse_rnn(config.model_type)
        check_exportable(config)
        tokenizer = folder_tokenizer(folder, ExportError) if tokenizer is None else tokenizer
        check_tokenizer_fits(tokenizer, config, ExportError, f"the tokenizer of {folder}")
        if config.model_type == TRANSFORMER_TYPE:
            model = AutoModelForSeq2SeqLM.from_pretrained(folder)
        else:
            architectures = getattr(config, "architectures", None) or []
            from .. import modeling_bert

            cls = getattr(modeling_bert, architectures[0], None) if architectures else None
            model = cls.from_pretrained(folder) if cls is not None else AutoModel.from_pretrained(folder)
        return model.eval(), tokenizer, str(folder)
    model = model_or_folder
    if tokenizer is None:
        raise ExportError("pass `tokenizer=` with a model object (the CTranslate2 folder carries its vocabulary)")
    check_tokenizer_fits(tokenizer, model.config, ExportError, "`tokenizer`")
    return model, tokenizer, type(model).__name__


def to_ctranslate2(
    model_or_folder,
    output_dir: str | os.PathLike,
    quantization: str | None = None,
    tokenizer=None,
    force: bool = False,
) -> Path:
    """Export an hf_seq Transformer (``ctranslate2.Translator``) or BERT encoder (``ctranslate2.Encoder``).

    Args:
        model_or_folder: a saved model folder (with its tokenizer) or a model object (then pass ``tokenizer``).
        output_dir: the CTranslate2 folder to write (``model.bin``, vocabulary, ``config.json``, the tokenizer files
            and ``hf_seq_export.json``), written beside it and renamed into place when complete; an earlier export
            there is replaced only with ``force=True``, and a trained model, the source folder or a folder inside or
            around it never (:func:`~.export_folders.check_output_dir`).
        quantization: the weight type, one of ``QUANTIZATIONS`` (None: float32 as trained).
        tokenizer: the tokenizer (default: the folder's).
        force: replace an earlier export in ``output_dir``.

    Returns the folder. :class:`ExportError` for a config CTranslate2 cannot express (naming the field) and an
    ``ImportError`` saying how to install the extra without ``ctranslate2``.
    """
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.converters.converter import Converter
    except ImportError as error:
        raise ImportError(
            "to_ctranslate2 needs the optional package ctranslate2: pip install 'hf_seq[ctranslate2]'"
        ) from error
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"`quantization` must be one of {list(QUANTIZATIONS)} or None, got {quantization!r}")
    sources = [model_or_folder] if isinstance(model_or_folder, (str, os.PathLike)) else []
    output_dir = check_output_dir(output_dir, sources, force, ExportError)
    model, tokenizer, source = _load(model_or_folder, tokenizer)
    model_type = model.config.model_type
    _refuse_rnn(model_type)
    with torch.no_grad():
        spec = _transformer_spec(model, tokenizer) if model_type == TRANSFORMER_TYPE else _bert_spec(model, tokenizer)

    class _SpecConverter(Converter):
        def _load(self):
            return spec

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging_parent = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        staging = staging_parent / output_dir.name  # the converter creates the folder it writes
        _SpecConverter().convert(str(staging), quantization=quantization)
        tokenizer.save_pretrained(staging)
        _write_ctranslate2_info(staging, model, source, quantization)
        install(staging, output_dir)
    finally:
        shutil.rmtree(staging_parent, ignore_errors=True)
    return output_dir


def _write_ctranslate2_info(folder: Path, model, source: str, quantization: str | None) -> None:
    import ctranslate2

    model_type = model.config.model_type
    info = {
        "exported_from": source,
        "model_type": model_type,
        "architecture": type(model).__name__,
        "engine": "ctranslate2.Translator" if model_type == TRANSFORMER_TYPE else "ctranslate2.Encoder",
        "quantization": quantization or "float32",
        "ctranslate2_version": ctranslate2.__version__,
    }
    if model_type == TRANSFORMER_TYPE:
        info["max_position_embeddings"] = model.config.max_position_embeddings
        info["generation_max_length"] = getattr(model.generation_config, "max_length", None)
    (folder / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


# CTranslate2's beam search stops once round(beam_size * patience) hypotheses have finished; generate()'s default
# (early_stopping=False) stops once no running beam's score so far, normalised by the current length, beats the
# worst of the num_beams best finished ones. No patience reproduces that rule; this one came closest on the
# translation recipe's 500 test verses (docs/results/translation.md, "Beam search").
EARLY_STOPPING_FALSE_PATIENCE = 1.5


# generate() settings CTranslate2 would apply differently, with the value that leaves decoding unchanged
NEUTRAL_UNMAPPED_FIELDS = {
    "repetition_penalty": 1.0,
    "diversity_penalty": 0.0,
    "num_beam_groups": 1,
    "do_sample": False,
    "encoder_repetition_penalty": 1.0,
}


def generate_options(generation_config=None, num_beams: int = 1) -> dict[str, Any]:
    """``translate_batch`` options under which CTranslate2 decodes as ``generate()`` does with ``generation_config``
    (a ``GenerationConfig``, a dict of its fields, or None for transformers' defaults).

    * ``length_penalty``: the same rule in both engines: a finished hypothesis scores its summed log-probabilities
      divided by (generated tokens, the end token included) ** ``length_penalty``;
    * ``early_stopping`` -> ``patience``: True is CTranslate2's own rule (stop once ``num_beams`` hypotheses have
      finished: ``patience`` 1); False (the default) and "never" keep searching while a running beam might still
      win, which CTranslate2 cannot test: ``patience`` :data:`EARLY_STOPPING_FALSE_PATIENCE` (the closest measured).
      With ``length_penalty`` 0 CTranslate2 instead stops once the best beam has finished, where no later hypothesis
      can beat the best one, so both engines return the same best hypothesis;
    * ``min_new_tokens`` (or ``min_length`` less the decoder start token; default 0) -> ``min_decoding_length``:
      CTranslate2's own default 1 forbids an empty translation, which ``generate()`` allows;
    * ``no_repeat_ngram_size`` -> ``no_repeat_ngram_size``.

    The last two are exact for greedy search only: CTranslate2 masks the logits before the softmax (the other tokens'
    probabilities renormalised), ``generate()``'s beam search masks the log-probabilities after it, so with beams
    the hypotheses' scores, and at times the winner, differ.

    Greedy search (``num_beams`` 1) needs only the last two. A field CTranslate2 would apply differently
    (``repetition_penalty``, ``diversity_penalty``, ``do_sample``) is refused with :class:`ExportError` naming it."""
    from transformers import GenerationConfig

    defaults = GenerationConfig()
    if generation_config is None:
        generation_config = defaults
    elif isinstance(generation_config, dict):
        fields, generation_config = generation_config, GenerationConfig()
        for name, value in fields.items():  # set one by one: no greedy-vs-beam validation warnings
            if not hasattr(defaults, name):
                raise ExportError(f"generation_config has no field `{name}`")
            setattr(generation_config, name, value)
    for name, neutral in NEUTRAL_UNMAPPED_FIELDS.items():
        value = getattr(generation_config, name, None)
        # transformers 5 leaves these None until generate() resolves them; a saved generation_config.json writes
        # the neutral value itself (repetition_penalty 1.0, do_sample false): both mean "not used"
        if value is not None and value != neutral:
            raise ExportError(
                f"generation_config `{name}` = {value!r}: CTranslate2 has no identical rule; decode with generate() "
                "or pass the CTranslate2 option of your choice to ctranslate2_translate yourself"
            )
    # CTranslate2 forbids the end token as the first token by default (min_decoding_length 1); generate() does not,
    # and an empty translation also changes the other hypotheses' scores (the end token's probability is dropped)
    min_new = max(generation_config.min_new_tokens or 0, (generation_config.min_length or 0) - 1)  # - start token
    options: dict[str, Any] = {"min_decoding_length": int(min_new)}
    if (generation_config.no_repeat_ngram_size or 0) > 0:
        options["no_repeat_ngram_size"] = int(generation_config.no_repeat_ngram_size)
    if num_beams > 1:
        length_penalty = generation_config.length_penalty
        options["length_penalty"] = float(1.0 if length_penalty is None else length_penalty)
        options["patience"] = 1.0 if generation_config.early_stopping is True else EARLY_STOPPING_FALSE_PATIENCE
    return options


def ctranslate2_translate(
    translator,
    tokenizer,
    texts: Sequence[str],
    num_beams: int = 1,
    max_new_tokens: int = 64,
    batch_size: int = 32,
    max_source_length: int | None = None,
    generation_config=None,
    **options,
) -> list[list[int]]:
    """Translate ``texts`` with a ``ctranslate2.Translator`` of an exported folder; the target token ids of each (the
    decoder start token and the end token left out), as ``tokenizer.batch_decode`` takes them.

    The sources are the tokenizer's own ids (special tokens included, truncated to ``max_source_length``), as
    ``generate()`` reads them. The search follows ``generate()`` with ``generation_config`` (None: transformers'
    defaults) through :func:`generate_options`; ``options`` go to ``translate_batch`` as given and take precedence
    (``patience``, ``length_penalty``, ``sampling_topk``, ...)."""
    encoded = tokenizer(list(texts), max_length=max_source_length, truncation=max_source_length is not None)[
        "input_ids"
    ]
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in encoded]
    options = {**generate_options(generation_config, num_beams), **options}
    results = translator.translate_batch(
        sources,
        beam_size=num_beams,
        max_batch_size=batch_size,
        max_decoding_length=max_new_tokens,
        **options,
    )
    return [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


# ---------------------------------------------------------------------------------------------------------------
# checkpoint averaging
# ---------------------------------------------------------------------------------------------------------------


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ExportError(f"checkpoint {folder} has no config.json (not a saved model or Trainer checkpoint)")
    return json.loads(path.read_text(encoding="utf-8"))


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The state dict saved in ``folder`` (``model.safetensors``, sharded or not, or ``pytorch_model.bin``)."""
    from safetensors.torch import load_file

    if (folder / "model.safetensors").is_file():
        return load_file(folder / "model.safetensors")
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        weights: dict[str, torch.Tensor] = {}
        for shard in shards:
            weights.update(load_file(folder / shard))
        return weights
    if (folder / "pytorch_model.bin").is_file():
        return torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise ExportError(
        f"checkpoint {folder} holds no weights (model.safetensors / pytorch_model.bin); a checkpoint of sharded "
        "training (FSDP) must be consolidated first"
    )


def average_state_dicts(folders: Sequence[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the weights of ``folders`` (checkpoints of one model: the same family and config,
    the same weight names and shapes; :class:`ExportError` naming the first difference otherwise).

    Floating-point weights are summed in float64 and divided once, then cast back to their dtype; integer buffers
    must be equal in every checkpoint."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise ExportError("average needs at least one checkpoint folder")
    reference_config = _read_config(folders[0])
    reference = _read_weights(folders[0])
    sums = {k: v.to(torch.float64) if v.is_floating_point() else v.clone() for k, v in reference.items()}
    for folder in folders[1:]:
        config = _read_config(folder)
        if config.get("model_type") != reference_config.get("model_type"):
            raise ExportError(
                f"checkpoints of different families: {folders[0]} is `model_type` "
                f"{reference_config.get('model_type')!r}, {folder} is {config.get('model_type')!r}"
            )
        for key in sorted(set(config) | set(reference_config)):
            if key not in _CONFIG_KEYS_IGNORED and config.get(key) != reference_config.get(key):
                raise ExportError(
                    f"checkpoints of different models: config field `{key}` is {reference_config.get(key)!r} in "
                    f"{folders[0]} and {config.get(key)!r} in {folder}"
                )
        weights = _read_weights(folder)
        if set(weights) != set(reference):
            only_here = sorted(set(weights) - set(reference))[:3]
            only_there = sorted(set(reference) - set(weights))[:3]
            raise ExportError(
                f"checkpoints with different weights: {folder} has {only_here} that {folders[0]} lacks and lacks "
                f"{only_there}"
            )
        for key, value in weights.items():
            if value.shape != reference[key].shape or value.dtype != reference[key].dtype:
                raise ExportError(
                    f"weight `{key}` is {tuple(reference[key].shape)} {reference[key].dtype} in {folders[0]} and "
                    f"{tuple(value.shape)} {value.dtype} in {folder}"
                )
            if value.is_floating_point():
                sums[key] += value.to(torch.float64)
            elif not torch.equal(value, reference[key]):
                raise ExportError(f"integer buffer `{key}` differs between {folders[0]} and {folder}")
    count = len(folders)
    return {
        key: (value / count).to(reference[key].dtype) if reference[key].is_floating_point() else value
        for key, value in sums.items()
    }


def average_checkpoints(
    folders: Sequence[str | os.PathLike], output_dir: str | os.PathLike, force: bool = False
) -> Path:
    """Write the mean of the weights of ``folders`` (:func:`average_state_dicts`) as a model folder ``output_dir``.

    The other files (config, generation config, tokenizer, remote code) come from the LAST folder; a Trainer
    checkpoint's optimizer, scheduler and trainer state are left out. The folder is written beside ``output_dir``
    and renamed into place when complete; an earlier export there is replaced only with ``force``, and a trained
    model, a checkpoint or a folder inside or around one never (:func:`~.export_folders.check_output_dir`)."""
    from safetensors.torch import save_file

    folders = [Path(f) for f in folders]
    output_dir = check_output_dir(output_dir, folders, force, ExportError, "one of the checkpoints being averaged")
    averaged = average_state_dicts(folders)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        last = folders[-1]
        for entry in last.iterdir():
            if entry.name in _TRAINING_STATE_FILES or entry.name in _WEIGHT_FILES or entry.name.startswith("rng_state"):
                continue
            if entry.is_file():
                shutil.copy2(entry, staging / entry.name)
        save_file({k: v.contiguous() for k, v in averaged.items()}, staging / "model.safetensors", {"format": "pt"})
        (staging / "averaged_from.json").write_text(
            json.dumps({"checkpoints": [str(f) for f in folders], "count": len(folders)}, indent=2) + "\n",
            encoding="utf-8",
        )
        install(staging, output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return output_dir


# ---------------------------------------------------------------------------------------------------------------
# ONNX Runtime (hf_seq.toolkit.onnx_runtime, imported when used)
# ---------------------------------------------------------------------------------------------------------------


def to_onnx(model_or_folder, output_dir, quantization: str | None = None, tokenizer=None, force: bool = False) -> Path:
    """Export a model for ONNX Runtime generation (or inference); see :func:`hf_seq.toolkit.onnx_runtime.to_onnx`."""
    from .onnx_generate import write_generating_graph
    from .onnx_runtime import to_onnx as export

    out = export(model_or_folder, output_dir, quantization=quantization, tokenizer=tokenizer, force=force)
    write_generating_graph(out)  # model_generate.onnx: the whole search in ONNX Runtime (seq2seq folders)
    return out


def load_onnxruntime(folder, threads: int | None = None, providers: list | None = None):
    """The ``ORTModelFor...`` of a folder written by :func:`to_onnx`; ``generate()`` takes the PyTorch model's
    arguments. See :func:`hf_seq.toolkit.onnx_runtime.load_onnxruntime`."""
    from .onnx_runtime import load_onnxruntime as load

    return load(folder, threads=threads, providers=providers)


# ---------------------------------------------------------------------------------------------------------------
# hf-seq-export
# ---------------------------------------------------------------------------------------------------------------


FORCE_HELP = (
    "Replace an earlier export in OUTPUT_DIR (a folder holding its manifest); a trained model or run, FOLDER itself "
    "or a folder inside or around it is never replaced."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hf-seq-export",
        description="Export a trained hf_seq model to CTranslate2 or ONNX Runtime, or average checkpoints.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{ctranslate2,onnx,average}")
    ct2 = commands.add_parser(
        "ctranslate2",
        help="Export a Transformer translation model or a BERT encoder to a CTranslate2 folder.",
        description="Export FOLDER (a saved TransformerForConditionalGeneration or hf_seq BERT model with its "
        "tokenizer) to the CTranslate2 folder OUTPUT_DIR.",
    )
    ct2.add_argument("folder", metavar="FOLDER", help="A saved hf_seq model folder (model, config, tokenizer).")
    ct2.add_argument("output_dir", metavar="OUTPUT_DIR", help="The CTranslate2 folder to write.")
    ct2.add_argument(
        "--quantization", choices=QUANTIZATIONS, default=None, help="Weight type (default: float32 as trained)."
    )
    ct2.add_argument("--force", action="store_true", help=FORCE_HELP)
    onnx = commands.add_parser(
        "onnx",
        help="Export any hf_seq model to ONNX graphs that ONNX Runtime generates with (load_onnxruntime).",
        description="Export FOLDER (a saved hf_seq model with its tokenizer: RNN LM, RNN seq2seq, Transformer, "
        "classifier, tagger, BERT) to OUTPUT_DIR: ONNX graphs (encoder and one decoder step with its state for "
        "the generative models), config, generation config, tokenizer. hf_seq.toolkit.export.load_onnxruntime(OUTPUT_DIR) "
        "loads it.",
    )
    onnx.add_argument("folder", metavar="FOLDER", help="A saved hf_seq model folder (model, config, tokenizer).")
    onnx.add_argument("output_dir", metavar="OUTPUT_DIR", help="The folder to write.")
    onnx.add_argument(
        "--quantization",
        choices=("int8",),
        default=None,
        help="int8: ONNX Runtime dynamic quantization of every graph (default: float32 as trained).",
    )
    onnx.add_argument("--force", action="store_true", help=FORCE_HELP)
    avg = commands.add_parser(
        "average",
        help="Average the weights of checkpoints of one model.",
        description="Write the element-wise mean of the weights of CHECKPOINT... (folders of one model) to OUTPUT_DIR.",
    )
    avg.add_argument(
        "paths", nargs="+", metavar="CHECKPOINT... OUTPUT_DIR", help="Two or more folders, then the output."
    )
    avg.add_argument("--force", action="store_true", help=FORCE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``hf-seq-export``: usage mistakes and refused models exit 2 with one line (argparse's ``parser.error``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    try:
        if args.command == "ctranslate2":
            if not Path(args.folder).is_dir():
                parser.error(f"FOLDER {args.folder} is not a directory")
            out = to_ctranslate2(args.folder, args.output_dir, quantization=args.quantization, force=args.force)
            print(f"Wrote {out} ({args.quantization or 'float32'})")
        elif args.command == "onnx":
            if not Path(args.folder).is_dir():
                parser.error(f"FOLDER {args.folder} is not a directory")
            from .onnx_runtime import OnnxExportError

            try:
                out = to_onnx(args.folder, args.output_dir, quantization=args.quantization, force=args.force)
            except OnnxExportError as error:
                parser.error(str(error))
            print(f"Wrote {out} (ONNX, {args.quantization or 'float32'})")
        else:
            if len(args.paths) < 3:
                parser.error("average needs at least two CHECKPOINT folders and then OUTPUT_DIR")
            *checkpoints, output = args.paths
            missing = [c for c in checkpoints if not Path(c).is_dir()]
            if missing:
                parser.error(f"CHECKPOINT {missing[0]} is not a directory")
            out = average_checkpoints(checkpoints, output, force=args.force)
            print(f"Wrote {out} (the mean of {len(checkpoints)} checkpoints)")
    except (ExportError, ImportError, FileNotFoundError) as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
