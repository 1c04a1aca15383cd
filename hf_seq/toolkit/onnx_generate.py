"""Generation inside ONNX Runtime: one ``model_generate.onnx`` per exported generative folder, whose search (greedy
or beam) runs in ONNX Runtime's ``com.microsoft.BeamSearch`` operator, with no Python loop and no torch at run time.

The operator drives two subgraphs in its encoder-decoder contract (``model_type=1``; the format whose encoder
subgraph also runs the first decoder step): an *encoder* subgraph ``(encoder_input_ids, encoder_attention_mask,
decoder_input_ids)`` → ``(logits, encoder_hidden_states, present_*_self_*, present_*_cross_*)`` and a *decoder*
subgraph ``(input_ids, encoder_attention_mask, past_*_self_*, past_*_cross_*)`` → ``(logits, present_*_self_*)``.
Both are built here around the folder's own graphs (``encoder_model.onnx`` and ``decoder_model.onnx`` of
:func:`~.onnx_runtime.to_onnx`, token-identical to ``generate()``), with no new trace of the model:

* the *self* tensors are what a step changes, rank 4 with the batch (times the beams) first, which the operator
  reorders by beam after every step: for an RNN decoder its state ``h`` (and ``c``) as ``(N, L, 1, H)`` and the
  input-feeding vector as ``(N, 1, 1, F)``; for the Transformer every layer's self-attention keys and values
  ``(N, nh, T, hs)``;
* the *cross* tensors are what the encoder computed once (repeated per beam by the operator): the RNN encoder
  states and attention keys as ``(N, 1, S, D)``, the Transformer's cross-attention keys and values;
* the operator counts "layers" as pairs of self tensors and pairs of cross tensors and wants as many of each:
  an unused slot holds a ``(N, 1, 1, 1)`` zero tensor.

The RNN language model uses the operator's decoder-only contract (``model_type=0``): the folder's prompt graph as
``init_decoder``, its step graph as ``decoder``, the state as one "past" tensor (:func:`_causal_lm_subgraphs`).

The decoder's weights are initializers of the outer graph, read by both subgraphs. ``decoder_start_token_id``,
``eos_token_id``, ``pad_token_id``, ``no_repeat_ngram_size`` and ``early_stopping`` are attributes of the operator
(fixed at export, from the folder's ``generation_config``); the lengths, ``num_beams``, ``num_return_sequences``,
``length_penalty`` and ``repetition_penalty`` are inputs of every call. The encoder mask is an input
(``attention_mask``), so left and right padding both mean what they mean in PyTorch.

A language model's folder also gets ``model_sample.onnx``: the same two subgraphs inside ONNX Runtime's
``com.microsoft.Sampling`` operator (:func:`build_sampling_graph`), whose ``temperature`` and ``top_p`` are attributes
(fixed at export; :func:`write_sampling_graph` writes the graph again with others) and which has no top-k filter. Its
draws come from ONNX Runtime's generator, seeded by the graph's ``seed`` input: the same seed gives the same tokens,
the distribution is transformers' (temperature, then top-p), the draws are not PyTorch's.

What a graph does not do is refused by :func:`unhonoured` / :func:`unhonoured_sampling` (naming the argument);
``load_onnxruntime(...)``'s ``generate()`` then runs the step graphs instead (one log line says which ran).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from .onnx_rewrites import keep_step_axis_in_logits, read_inputs_transposed, swap_last_axes_by_transpose

logger = logging.getLogger(__name__)

GENERATE_FILE = "model_generate.onnx"
GENERATE_SCRIPT = "generate.py"
SAMPLE_FILE = "model_sample.onnx"
MS_DOMAIN = "com.microsoft"
NO_EOS = -1  # the operator's eos_token_id for a model without an end token
# what an exported folder holds (onnx_runtime.ONNX_INFO; not imported: onnx_runtime imports this module)
ONNX_INFO = "hf_seq_onnx.json"
# the operator's input slots, in order (``""`` for an omitted optional input)
BEAM_INPUTS = (
    "input_ids",
    "max_length",
    "min_length",
    "num_beams",
    "num_return_sequences",
    "length_penalty",
    "repetition_penalty",
    "",  # vocab_mask
    "",  # prefix_vocab_mask
    "attention_mask",
)
SAMPLE_INPUTS = (  # the Sampling operator's
    "input_ids",
    "max_length",
    "min_length",
    "",  # repetition_penalty (1.0)
    "",  # vocab_mask
    "",  # prefix_vocab_mask
    "attention_mask",
    "",  # presence_mask
    "seed",
)


class GeneratingGraphError(ValueError):
    """A generation argument that ``model_generate.onnx`` cannot honour; the message names it."""


# ---------------------------------------------------------------------------------------------------------------
# Building the subgraphs from the exported graphs
# ---------------------------------------------------------------------------------------------------------------


class _GraphBuilder:
    """Nodes, initializers and the I/O of one subgraph, written with ``onnx.helper``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0
        self.renamed: dict[str, str] = {}  # a tensor made a graph output → the output's name

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{self.prefix}/{hint}_{self.count}"

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs) -> str:
        from onnx import helper

        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(self, values, dtype=np.int64) -> str:
        from onnx import numpy_helper

        name = self.name("const")
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def output(self, source: str, name: str) -> None:
        """Make ``source`` the graph output ``name``: renamed where a node of this graph computes it (an ``Identity``
        would copy it at every run, as ONNX Runtime gives a graph output a buffer of its own), else an
        ``Identity`` (an input passed through, a tensor already output under another name)."""
        from onnx import helper

        source = self.renamed.get(source, source)
        if source in self.renamed.values() or not any(source in node.output for node in self.nodes):
            self.nodes.append(helper.make_node("Identity", [source], [name], name=f"{self.prefix}/{name}"))
            return
        for node in self.nodes:
            _rename(node, source, name)
        self.renamed[source] = name

    def inline(self, model, prefix: str, feeds: dict[str, str], share_weights: list | None = None) -> dict[str, str]:
        """The nodes of ``model`` (an exported graph), renamed under ``prefix``, fed from ``feeds`` (its input name →
        a name of this graph); returns its output names → their names here. Its initializers go to
        ``share_weights`` (the outer graph, shared by both subgraphs) when given, else into this graph."""
        from onnx import compose, helper

        graph = compose.add_prefix_graph(model.graph, prefix, inplace=False)
        for value in model.graph.input:
            self.nodes.append(
                helper.make_node(
                    "Identity", [feeds[value.name]], [prefix + value.name], name=f"{prefix}in/{value.name}"
                )
            )
        self.nodes.extend(graph.node)
        if share_weights is None:
            self.initializers.extend(graph.initializer)
        else:
            known = {init.name for init in share_weights}
            share_weights.extend(init for init in graph.initializer if init.name not in known)
        return {value.name: prefix + value.name for value in model.graph.output}

    def zeros_like_batch(self, ids: str) -> str:
        """A ``(N, 1, 1, 1)`` zero tensor for the batch of ``ids`` (an unused state or cross slot)."""
        from onnx import TensorProto, helper

        batch = self.op("Slice", [self.op("Shape", [ids]), self.const([0]), self.const([1])])
        shape = self.op("Concat", [batch, self.const([1, 1, 1])], axis=0)
        return self.op("ConstantOfShape", [shape], value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))

    def graph(self, name: str, inputs: list, outputs: list):
        from onnx import helper

        return helper.make_graph(self.nodes, name, inputs, outputs, self.initializers)


def _rename(node, old: str, new: str) -> None:
    """Call the tensor ``old`` ``new`` in ``node``'s inputs and outputs and in its subgraphs (a Loop's body reads
    outer tensors by name)."""
    from onnx import AttributeProto

    for names in (node.input, node.output):
        for i, name in enumerate(names):
            if name == old:
                names[i] = new
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == AttributeProto.GRAPH else list(attribute.graphs)
        for graph in graphs:
            for inner in graph.node:
                _rename(inner, old, new)


def _info(name: str, elem_type, shape):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem_type, shape)


def _slot_names(pairs: int) -> tuple[list[str], list[str]]:
    self_names = [f"{kind}_self_{i}" for i in range(pairs) for kind in ("key", "value")]
    cross_names = [f"{kind}_cross_{i}" for i in range(pairs) for kind in ("key", "value")]
    return self_names, cross_names


def _encoder_start(encoder) -> tuple[_GraphBuilder, str, str, dict[str, str]]:
    """The encoder subgraph's beginning: its int32 inputs cast and ``encoder`` (the folder's encoder graph) inlined;
    returns the builder, the ids and mask (int64) and the encoder's outputs."""
    from onnx import TensorProto

    b = _GraphBuilder("enc")
    ids = b.op("Cast", ["encoder_input_ids"], to=TensorProto.INT64)
    mask = b.op("Cast", ["encoder_attention_mask"], to=TensorProto.INT64)
    return b, ids, mask, b.inline(encoder, "enc/encoder/", {"input_ids": ids, "attention_mask": mask})


def _encoder_graph(b: _GraphBuilder, vocab: int, logits: str, states: str, presents: list[tuple[str, str, list]]):
    """The encoder subgraph's outputs in the operator's order: the first step's logits, the encoder states, then
    ``presents`` (``(slot name, value, shape)``: the self slots, then the cross slots)."""
    from onnx import TensorProto

    b.output(logits, "logits")
    b.output(states, "encoder_hidden_states")
    for name, value, _ in presents:
        b.output(value, f"present_{name}")
    return b.graph(
        "encoder and first decoder step",
        [
            _info("encoder_input_ids", TensorProto.INT32, ["B", "S"]),
            _info("encoder_attention_mask", TensorProto.INT32, ["B", "S"]),
            _info("decoder_input_ids", TensorProto.INT32, ["B", 1]),
        ],
        [
            _info("logits", TensorProto.FLOAT, ["B", 1, vocab]),
            _info("encoder_hidden_states", TensorProto.FLOAT, ["B", "S", None]),
            *(_info(f"present_{name}", TensorProto.FLOAT, shape) for name, _, shape in presents),
        ],
    )


def _decoder_graph(b: _GraphBuilder, vocab: int, logits: str, presents: list[tuple[str, str, list]], pasts: list):
    """The decoder subgraph: one step's logits and ``presents`` (``(slot name, value, shape)``, the self slots) from
    ``input_ids``, the encoder mask and ``pasts`` (``(slot name, shape)``: the self slots, then the cross slots)."""
    from onnx import TensorProto

    b.output(logits, "logits")
    for name, value, _ in presents:
        b.output(value, f"present_{name}")
    return b.graph(
        "decoder step",
        [
            _info("input_ids", TensorProto.INT32, ["N", 1]),
            _info("encoder_attention_mask", TensorProto.INT32, ["N", "S"]),
            *(_info(f"past_{name}", TensorProto.FLOAT, shape) for name, shape in pasts),
        ],
        [
            _info("logits", TensorProto.FLOAT, ["N", 1, vocab]),
            *(_info(f"present_{name}", TensorProto.FLOAT, shape) for name, _, shape in presents),
        ],
    )


def _rnn_seq2seq_subgraphs(folder: Path, info: dict, weights: list, step_rewrites: bool = True):
    """The encoder and decoder subgraphs of an RNN seq2seq folder (module docstring)."""
    import onnx
    from onnx import TensorProto

    graphs = info["graphs"]
    encoder = onnx.load(str(folder / graphs["encoder"]["file"]))
    decoder = onnx.load(str(folder / graphs["decoder"]["file"]))
    states = list(graphs["state"])  # "h" or "h", "c"
    attention = bool(graphs["attention"])
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in decoder.graph.input}
    layers, hidden = shapes["h"][0], shapes["h"][2]
    vocab = [d.dim_value for d in decoder.graph.output[0].type.tensor_type.shape.dim][1]
    feed_size = shapes["feed"][1] if attention else None
    # speed, the same arithmetic (onnx_rewrites): the logits computed in the operator's (N, 1, V), not copied into it
    logits_have_step_axis = step_rewrites and keep_step_axis_in_logits(decoder.graph)
    # the self slots: the state, then the fed vector; the cross slots: encoder states and keys
    self_kinds = [*states, *(("feed",) if attention else ())]
    cross_kinds = ["memory", "keys"] if attention else []
    pairs = max(1, (len(self_kinds) + 1) // 2, (len(cross_kinds) + 1) // 2)
    self_kinds += ["unused"] * (2 * pairs - len(self_kinds))
    cross_kinds += ["unused"] * (2 * pairs - len(cross_kinds))
    self_names, cross_names = _slot_names(pairs)
    shape_of = {
        **{s: ["N", layers, 1, hidden] for s in states},
        "feed": ["N", 1, 1, feed_size],
        "memory": ["N", 1, "S", shapes["encoder_hidden_states"][2] if attention else 1],
        "keys": ["N", 1, "S", shapes["keys"][2] if attention else 1],
        "unused": ["N", 1, 1, 1],
    }

    def step(b: _GraphBuilder, ids32: str, mask64: str, self_in: dict, cross_in: dict) -> tuple[str, dict]:
        """One decoder step from the slot tensors: logits (N, 1, V) and the new self slots."""
        feeds = {"decoder_input_ids": b.op("Cast", [ids32], to=TensorProto.INT64)}
        for s in states:  # (N, L, 1, H) -> (L, N, H)
            feeds[s] = b.op("Transpose", [b.op("Squeeze", [self_in[s], b.const([2])])], perm=[1, 0, 2])
        if attention:
            feeds["feed"] = b.op("Flatten", [self_in["feed"]], axis=1)
            feeds["encoder_hidden_states"] = b.op("Squeeze", [cross_in["memory"], b.const([1])])
            feeds["keys"] = b.op("Squeeze", [cross_in["keys"], b.const([1])])
            feeds["encoder_attention_mask"] = mask64
        out = b.inline(decoder, "decoder/", feeds, share_weights=weights)
        new = {}
        for s in states:  # (L, N, H) -> (N, L, 1, H)
            new[s] = b.op("Unsqueeze", [b.op("Transpose", [out[f"{s}_out"]], perm=[1, 0, 2]), b.const([2])])
        if attention:
            new["feed"] = b.op("Unsqueeze", [out["feed_out"], b.const([1, 2])])
        logits = out["logits"] if logits_have_step_axis else b.op("Unsqueeze", [out["logits"], b.const([1])])
        return logits, new

    # encoder subgraph: the encoder, the bridge and the first decoder step
    b, ids, mask, enc = _encoder_start(encoder)
    self_in = {s: b.op("Unsqueeze", [enc[f"init_{s}"], b.const([2])]) for s in states}  # (B, L, H) -> (B, L, 1, H)
    cross_in = {}
    if attention:
        self_in["feed"] = b.op("Unsqueeze", [enc["feed"], b.const([1, 2])])
        cross_in["memory"] = b.op("Unsqueeze", [enc["encoder_hidden_states"], b.const([1])])
        cross_in["keys"] = b.op("Unsqueeze", [enc["keys"], b.const([1])])
    unused = b.zeros_like_batch("encoder_input_ids")
    logits, new = step(b, "decoder_input_ids", mask, self_in, cross_in)
    presents = [(n, new.get(k, unused), shape_of[k]) for n, k in zip(self_names, self_kinds)]
    presents += [(n, cross_in.get(k, unused), shape_of[k]) for n, k in zip(cross_names, cross_kinds)]
    enc_graph = _encoder_graph(b, vocab, logits, enc["encoder_hidden_states"], presents)

    # decoder subgraph: one step from the slots
    b = _GraphBuilder("dec")
    mask = b.op("Cast", ["encoder_attention_mask"], to=TensorProto.INT64)
    self_in = {k: f"past_{n}" for n, k in zip(self_names, self_kinds) if k != "unused"}
    cross_in = {k: f"past_{n}" for n, k in zip(cross_names, cross_kinds) if k != "unused"}
    logits, new = step(b, "input_ids", mask, self_in, cross_in)
    presents = [(n, new.get(k, f"past_{n}"), shape_of[k]) for n, k in zip(self_names, self_kinds)]
    pasts = [(n, shape_of[k]) for n, k in zip([*self_names, *cross_names], [*self_kinds, *cross_kinds])]
    dec_graph = _decoder_graph(b, vocab, logits, presents, pasts)
    return enc_graph, dec_graph, [encoder, decoder]


def _transformer_subgraphs(folder: Path, info: dict, weights: list, step_rewrites: bool = True):
    """The encoder and decoder subgraphs of a Transformer folder: the self slots are every decoder layer's keys and
    values ``(N, nh, T, hs)`` (empty before the first step), the cross slots its cross-attention keys
    ``(N, nh, hs, S)`` (the last two axes swapped once, as the attention product reads them) and values
    ``(N, nh, S, hs)``."""
    import onnx
    from onnx import TensorProto, helper

    graphs = info["graphs"]
    encoder = onnx.load(str(folder / graphs["encoder"]["file"]))
    decoder = onnx.load(str(folder / graphs["decoder"]["file"]))
    layers = int(graphs["decoder_layers"])
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in decoder.graph.input}
    heads, head_size = shapes["past_key_0"][1], shapes["past_key_0"][3]
    vocab = [d.dim_value for d in decoder.graph.output[0].type.tensor_type.shape.dim][1]
    # Speed, with the same arithmetic (onnx_rewrites): no copy of the keys at every step (their axes swapped
    # inside the attention product; the encoder's keys swapped once per search), and the logits computed in the
    # operator's (N, 1, V) instead of copied into it.
    cross_keys_swapped, logits_have_step_axis = [], False
    if step_rewrites:
        swap_last_axes_by_transpose(decoder.graph)
        cross_keys_swapped = read_inputs_transposed(decoder.graph, [f"cross_key_{i}" for i in range(layers)])
        logits_have_step_axis = keep_step_axis_in_logits(decoder.graph)
    self_names, cross_names = _slot_names(layers)
    ours = [f"{kind}_{i}" for i in range(layers) for kind in ("key", "value")]  # the exported graphs' suffixes

    def step(b: _GraphBuilder, ids32: str, mask64: str, past: list[str], cross: list[str]) -> tuple[str, list[str]]:
        feeds = {"decoder_input_ids": b.op("Cast", [ids32], to=TensorProto.INT64), "encoder_attention_mask": mask64}
        feeds.update({f"past_{s}": t for s, t in zip(ours, past)})
        feeds.update({f"cross_{s}": t for s, t in zip(ours, cross)})
        out = b.inline(decoder, "decoder/", feeds, share_weights=weights)
        logits = out["logits"] if logits_have_step_axis else b.op("Unsqueeze", [out["logits"], b.const([1])])
        return logits, [out[f"present_{s}"] for s in ours]

    b, ids, mask, enc = _encoder_start(encoder)
    cross = []  # cross_key_values (B, L, 2, nh, S, hs) -> per layer and kind (B, nh, S, hs); swapped keys (B, nh, hs, S)
    cross_shapes = []
    for i, name in enumerate(ours):
        layer = b.op("Gather", [enc["cross_key_values"], b.const(i // 2)], axis=1)
        picked = b.op("Gather", [layer, b.const(i % 2)], axis=1)
        swapped = f"cross_{name}" in cross_keys_swapped
        cross.append(b.op("Transpose", [picked], perm=[0, 1, 3, 2]) if swapped else picked)
        cross_shapes.append([heads, head_size, None] if swapped else [heads, None, head_size])
    batch = b.op("Slice", [b.op("Shape", [ids]), b.const([0]), b.const([1])])
    empty_shape = b.op("Concat", [batch, b.const([heads, 0, head_size])], axis=0)
    empty = b.op("ConstantOfShape", [empty_shape], value=helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0]))
    logits, present = step(b, "decoder_input_ids", mask, [empty] * (2 * layers), cross)
    kv = [heads, None, head_size]
    presents = [(n, v, ["B", *kv]) for n, v in zip(self_names, present)]
    presents += [(n, v, ["B", *shape]) for n, v, shape in zip(cross_names, cross, cross_shapes)]
    enc_graph = _encoder_graph(b, vocab, logits, enc["encoder_hidden_states"], presents)
    b = _GraphBuilder("dec")
    mask = b.op("Cast", ["encoder_attention_mask"], to=TensorProto.INT64)
    logits, present = step(b, "input_ids", mask, [f"past_{n}" for n in self_names], [f"past_{n}" for n in cross_names])
    presents = [(n, v, ["N", *kv]) for n, v in zip(self_names, present)]
    pasts = [(n, ["N", *kv]) for n in self_names] + [(n, ["N", *shape]) for n, shape in zip(cross_names, cross_shapes)]
    dec_graph = _decoder_graph(b, vocab, logits, presents, pasts)
    return enc_graph, dec_graph, [encoder, decoder]


def _causal_lm_subgraphs(folder: Path, info: dict):
    """The prompt and step subgraphs of an RNN LM folder in the operator's decoder-only contract (``model_type=0``):
    ``(input_ids, position_ids, attention_mask, past_0)`` → ``(logits, present_0)``, the recurrent state as the one
    "past" tensor ``(2, N, L, P, H)`` (``h`` and ``c``, or ``h`` twice): the operator starts it empty (``P`` = 0), whose
    sum over ``P`` is the zero state, and then feeds back each step's ``(2, N, L, 1, H)``. The prompt subgraph is the
    folder's ``decoder_model.onnx`` (the prompt's own columns of the mask: left padding as in PyTorch), the step
    subgraph its ``step_model.onnx``."""
    import onnx
    from onnx import TensorProto

    graphs = info["graphs"]
    prompt = onnx.load(str(folder / graphs["decoder"]["file"]))
    stepper = onnx.load(str(folder / graphs["step"]["file"]))
    states = list(graphs["state"])
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in prompt.graph.input}
    layers, hidden = shapes["h"][0], shapes["h"][2]
    vocab = [d.dim_value for d in prompt.graph.output[0].type.tensor_type.shape.dim][2]

    def subgraph(model, prefix: str, with_mask: bool):
        b = _GraphBuilder(prefix)
        feeds = {"input_ids": b.op("Cast", ["input_ids"], to=TensorProto.INT64)}
        summed = b.op("ReduceSum", ["past_0", b.const([3])], keepdims=0)  # (2, N, L, H); zeros when P = 0
        for i, name in enumerate(states):
            feeds[name] = b.op("Transpose", [b.op("Gather", [summed, b.const(i)], axis=0)], perm=[1, 0, 2])
        if with_mask:  # the columns of the tokens read now: the last T of (N, P + T)
            length = b.op("Slice", [b.op("Shape", ["input_ids"]), b.const([1]), b.const([2])])
            columns = b.op("Slice", ["attention_mask", b.op("Neg", [length]), b.const([2**62]), b.const([1])])
            feeds["attention_mask"] = b.op("Cast", [columns], to=TensorProto.INT64)
        out = b.inline(model, f"{prefix}/model/", feeds)
        new = [b.op("Transpose", [out[f"{name}_out"]], perm=[1, 0, 2]) for name in states]  # (N, L, H)
        new = new if len(new) == 2 else new * 2
        stacked = b.op("Concat", [b.op("Unsqueeze", [t, b.const([0])]) for t in new], axis=0)  # (2, N, L, H)
        b.output(out["logits"], "logits")
        b.output(b.op("Unsqueeze", [stacked, b.const([3])]), "present_0")
        return b.graph(
            f"{prefix} step",
            [
                _info("input_ids", TensorProto.INT32, ["N", "T"]),
                _info("position_ids", TensorProto.INT32, ["N", "T"]),
                _info("attention_mask", TensorProto.INT32, ["N", "A"]),
                _info("past_0", TensorProto.FLOAT, [2, "N", layers, "P", hidden]),
            ],
            [
                _info("logits", TensorProto.FLOAT, ["N", "T", vocab]),
                _info("present_0", TensorProto.FLOAT, [2, "N", layers, 1, hidden]),
            ],
        )

    return subgraph(prompt, "prompt", True), subgraph(stepper, "step", False), [prompt, stepper]


# ---------------------------------------------------------------------------------------------------------------
# The generating graph
# ---------------------------------------------------------------------------------------------------------------


def _single_token(value, name: str) -> int:
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise GeneratingGraphError(f"`{name}` {list(value)}: the search operator takes one token id")
        value = value[0]
    if value is None:
        raise GeneratingGraphError(f"`{name}` is None: the search operator needs it")
    return int(value)


def with_defaults(generation_config):
    """A copy of ``generation_config`` with transformers' global defaults where it holds None (as ``generate()``
    completes it)."""
    import copy

    generation_config = copy.deepcopy(generation_config)
    generation_config.update(**generation_config._get_default_generation_params(), defaults_only=True)
    return generation_config


def search_attributes(generation_config, config, decoder_only: bool = False) -> dict:
    """The operator's fixed attributes from the folder's ``generation_config`` (transformers' global defaults where it
    sets nothing; the model config's ``decoder_start_token_id`` as the fallback). The operator pads with the end
    token (``pad_token_id`` = ``eos_token_id``), so that a sequence's end is told from a generated padding token;
    :meth:`GeneratingGraph.run` pads as ``generate()`` does."""
    generation_config = with_defaults(generation_config)
    # no end token (a char LM trained on a stream): -1, an id the search never draws, so no sequence ends early
    eos = (
        NO_EOS
        if generation_config.eos_token_id is None
        else _single_token(generation_config.eos_token_id, "eos_token_id")
    )
    early = generation_config.early_stopping
    if early not in (True, False):
        raise GeneratingGraphError(f"`early_stopping` {early!r}: the search operator takes True or False")
    attributes = {
        "eos_token_id": eos,
        "pad_token_id": eos,
        "no_repeat_ngram_size": int(generation_config.no_repeat_ngram_size or 0),
        "early_stopping": int(bool(early)),
    }
    if not decoder_only:
        start = generation_config.decoder_start_token_id
        if start is None:
            start = getattr(config, "decoder_start_token_id", None)
        attributes["decoder_start_token_id"] = _single_token(start, "decoder_start_token_id")
    return attributes


def _save_search_model(path: Path, nodes: list, inputs: list, outputs: list, weights: list, sources: list) -> None:
    """Save a one-operator model (``nodes``: the search node, and what reshapes its outputs) whose subgraphs were built
    from ``sources`` (the folder's graphs: their opsets, IR version and functions carry over)."""
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "hf_seq generate", inputs, outputs, weights)
    opsets = {}
    for source in sources:
        for entry in source.opset_import:
            opsets[entry.domain] = max(opsets.get(entry.domain, 0), entry.version)
    opsets[MS_DOMAIN] = max(opsets.get(MS_DOMAIN, 0), 1)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(domain, version) for domain, version in opsets.items()],
        ir_version=max(s.ir_version for s in sources),
        producer_name="hf_seq",
    )
    functions = {}
    for source in sources:
        for function in source.functions:
            functions.setdefault((function.domain, function.name), function)
    model.functions.extend(functions.values())
    onnx.save(model, str(path))


def build_generating_graph(folder: str | os.PathLike, step_rewrites: bool = True) -> dict:
    """Write ``model_generate.onnx`` (and ``generate.py``) into an exported seq2seq or RNN LM folder; returns what
    ``hf_seq_onnx.json`` records of it (file, operator, inputs, fixed attributes). :class:`GeneratingGraphError`
    names what the folder has that the operator cannot take. ``step_rewrites=False`` inlines a seq2seq folder's
    step graph as exported, without the rewrites of :mod:`.onnx_rewrites` (for comparing their speed)."""
    from onnx import TensorProto, helper
    from transformers import AutoConfig, GenerationConfig

    folder = Path(folder)
    info = json.loads((folder / ONNX_INFO).read_text(encoding="utf-8"))
    kind = info["kind"]
    if kind not in ("seq2seq_lm", "causal_lm"):
        raise GeneratingGraphError(f"kind {kind!r}: the generating graph is written for generative folders")
    config = AutoConfig.from_pretrained(folder)
    generation_config = GenerationConfig.from_pretrained(folder)
    attributes = search_attributes(generation_config, config, decoder_only=kind == "causal_lm")
    weights: list = []
    if kind == "causal_lm":
        init_graph, dec_graph, sources = _causal_lm_subgraphs(folder, info)
        subgraphs = {"model_type": 0, "init_decoder": init_graph, "decoder": dec_graph}
    else:
        if "decoder_layers" in info["graphs"]:  # the Transformer's key/value cache (the RNN's: "state")
            enc_graph, dec_graph, sources = _transformer_subgraphs(folder, info, weights, step_rewrites)
        else:
            enc_graph, dec_graph, sources = _rnn_seq2seq_subgraphs(folder, info, weights, step_rewrites)
        subgraphs = {"model_type": 1, "encoder": enc_graph, "decoder": dec_graph}
    node = helper.make_node(
        "BeamSearch",
        list(BEAM_INPUTS),
        ["sequences", "sequences_scores"],
        name="BeamSearch",
        domain=MS_DOMAIN,
        **subgraphs,
        **attributes,
    )
    scalar = {"length_penalty": TensorProto.FLOAT, "repetition_penalty": TensorProto.FLOAT}
    inputs = [
        _info("input_ids", TensorProto.INT32, ["batch", "source"]),
        *(_info(n, scalar.get(n, TensorProto.INT32), [1]) for n in BEAM_INPUTS[1:7]),
        _info("attention_mask", TensorProto.INT32, ["batch", "source"]),
    ]
    outputs = [
        _info("sequences", TensorProto.INT32, ["batch", "num_return_sequences", "length"]),
        _info("sequences_scores", TensorProto.FLOAT, ["batch", "num_return_sequences"]),
    ]
    _save_search_model(folder / GENERATE_FILE, [node], inputs, outputs, weights, sources)
    script = GENERATE_PY.format(decoder_only=kind == "causal_lm", early_stopping=bool(attributes["early_stopping"]))
    (folder / GENERATE_SCRIPT).write_text(script, encoding="utf-8")
    return {
        "file": GENERATE_FILE,
        "operator": f"{MS_DOMAIN}.BeamSearch",
        "kind": kind,
        "inputs": [n for n in BEAM_INPUTS if n],
        "outputs": ["sequences", "sequences_scores"],
        "attributes": attributes,
        "pad_token_id": _output_pad(with_defaults(generation_config), attributes["eos_token_id"]),
        "script": GENERATE_SCRIPT,
    }


def write_generating_graph(folder: str | os.PathLike) -> bool:
    """:func:`build_generating_graph` for an exported generative folder, recorded in its ``hf_seq_onnx.json``
    under ``graphs.generate``; a folder it cannot serve keeps its step graphs only (logged, naming why)."""
    folder = Path(folder)
    path = folder / ONNX_INFO
    info = json.loads(path.read_text(encoding="utf-8"))
    if info["kind"] not in ("seq2seq_lm", "causal_lm"):
        return False
    try:
        entry = build_generating_graph(folder)
    except GeneratingGraphError as error:
        logger.warning("No %s in %s: %s", GENERATE_FILE, folder, error)
        return False
    info["graphs"]["generate"] = entry
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if info["kind"] == "causal_lm":  # and sampling, for a language model
        try:
            write_sampling_graph(folder)
        except GeneratingGraphError as error:
            logger.warning("No %s in %s: %s", SAMPLE_FILE, folder, error)
    return True


def sampling_attributes(generation_config, temperature: float | None = None, top_p: float | None = None) -> dict:
    """The ``Sampling`` operator's fixed attributes: the end and padding tokens, ``no_repeat_ngram_size``, and
    ``temperature`` and ``top_p`` (the folder's ``generation_config`` values unless given; 1.0 and 1.0 by default)."""
    generation_config = with_defaults(generation_config)
    temperature = float(generation_config.temperature if temperature is None else temperature)
    top_p = float(generation_config.top_p if top_p is None else top_p)
    if not temperature > 0:
        raise GeneratingGraphError(f"`temperature` {temperature}: the sampling operator takes a value > 0")
    if not 0 < top_p <= 1:
        raise GeneratingGraphError(f"`top_p` {top_p}: the sampling operator takes a value in (0, 1]")
    attributes = search_attributes(generation_config, None, decoder_only=True)
    del attributes["early_stopping"]  # a beam search setting
    # min_tokens_to_keep 1: top-p keeps at least the most probable token, as transformers' TopPLogitsWarper does
    return {**attributes, "temperature": temperature, "top_p": top_p, "min_tokens_to_keep": 1}


def build_sampling_graph(folder: str | os.PathLike, temperature: float | None = None, top_p: float | None = None):
    """Write ``model_sample.onnx`` into an exported RNN LM folder: sampling inside ONNX Runtime (its
    ``com.microsoft.Sampling`` operator around the same prompt and step subgraphs as ``model_generate.onnx``), with
    ``temperature`` and ``top_p`` fixed in the graph (operator attributes; the folder's ``generation_config``
    values unless given). Returns what ``hf_seq_onnx.json`` records of it. Its draws come from ONNX Runtime's own
    generator, seeded by the ``seed`` input: the same seed gives the same tokens, but not PyTorch's draws."""
    from onnx import TensorProto, helper
    from transformers import GenerationConfig

    folder = Path(folder)
    info = json.loads((folder / ONNX_INFO).read_text(encoding="utf-8"))
    if info["kind"] != "causal_lm":
        raise GeneratingGraphError(
            f"kind {info['kind']!r}: ONNX Runtime's sampling operator serves decoder-only models (a language model)"
        )
    attributes = sampling_attributes(GenerationConfig.from_pretrained(folder), temperature, top_p)
    init_graph, dec_graph, sources = _causal_lm_subgraphs(folder, info)
    node = helper.make_node(
        "Sampling",
        list(SAMPLE_INPUTS),
        ["sampled"],
        name="Sampling",
        domain=MS_DOMAIN,
        model_type=0,
        init_decoder=init_graph,
        decoder=dec_graph,
        **attributes,
    )
    # (batch, length) -> (batch, 1, length): the layout of model_generate.onnx's sequences
    axis = helper.make_tensor("axis", TensorProto.INT64, [1], [1])
    nodes = [
        node,
        helper.make_node("Constant", [], ["sequences_axis"], value=axis),
        helper.make_node("Unsqueeze", ["sampled", "sequences_axis"], ["sequences"]),
    ]
    inputs = [
        _info("input_ids", TensorProto.INT32, ["batch", "source"]),
        _info("max_length", TensorProto.INT32, [1]),
        _info("min_length", TensorProto.INT32, [1]),
        _info("attention_mask", TensorProto.INT32, ["batch", "source"]),
        _info("seed", TensorProto.INT32, [1]),
    ]
    outputs = [_info("sequences", TensorProto.INT32, ["batch", 1, "length"])]
    _save_search_model(folder / SAMPLE_FILE, nodes, inputs, outputs, [], sources)
    vocab = dec_graph.output[0].type.tensor_type.shape.dim[2].dim_value
    return {
        "file": SAMPLE_FILE,
        "operator": f"{MS_DOMAIN}.Sampling",
        "kind": info["kind"],
        "inputs": [value.name for value in inputs],
        "outputs": ["sequences"],
        "attributes": attributes,
        "pad_token_id": _output_pad(
            with_defaults(GenerationConfig.from_pretrained(folder)), attributes["eos_token_id"]
        ),
        "vocab_size": int(vocab),
    }


def write_sampling_graph(folder: str | os.PathLike, temperature: float | None = None, top_p: float | None = None):
    """:func:`build_sampling_graph`, recorded in the folder's ``hf_seq_onnx.json`` under ``graphs.sample`` (again
    with other ``temperature`` / ``top_p``: the graph holds them as fixed values)."""
    folder = Path(folder)
    entry = build_sampling_graph(folder, temperature, top_p)
    path = folder / ONNX_INFO
    info = json.loads(path.read_text(encoding="utf-8"))
    info["graphs"]["sample"] = entry
    path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return entry


# ---------------------------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------------------------

# generation_config fields the graph does not implement: any value other than the default sends generate() to the
# step graphs (and a direct call to GeneratingGraph.generate raises, naming it)
UNSUPPORTED_FIELDS = (
    "do_sample",
    "num_beam_groups",
    "diversity_penalty",
    "penalty_alpha",
    "constraints",
    "force_words_ids",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "forced_decoder_ids",
    "sequence_bias",
    "encoder_no_repeat_ngram_size",
    "exponential_decay_length_penalty",
    "renormalize_logits",
    "remove_invalid_values",
    "guidance_scale",
    "low_memory",
    "stop_strings",
    "max_time",
    "output_scores",
    "output_logits",
    "output_attentions",
    "output_hidden_states",
    "return_dict_in_generate",
    "watermarking_config",
    "encoder_repetition_penalty",
    "prompt_lookup_num_tokens",
    "assistant_early_exit",
    "dola_layers",
    "token_healing",
    "cache_implementation",
)
# model keyword arguments generate() may get that the graph takes
GRAPH_KWARGS = ("input_ids", "attention_mask", "inputs")


def _output_pad(generation_config, eos: int) -> int:
    pad = generation_config.pad_token_id
    return eos if pad is None else _single_token(pad, "pad_token_id")


def _fixed_settings_differ(generation_config, entry: dict, kwargs: dict, allowed: tuple = ()) -> str | None:
    """What ``generation_config`` (defaults filled in) and ``kwargs`` ask that neither search operator does, or that
    differs from the operator's fixed attributes in ``entry``; None when nothing does. ``allowed``: fields of
    :data:`UNSUPPORTED_FIELDS` the operator does (``do_sample`` for the sampling graph)."""
    attributes = entry["attributes"]
    default = generation_config._get_default_generation_params()
    for name in UNSUPPORTED_FIELDS:
        value = getattr(generation_config, name, None)
        if name in allowed or value is None or value == default.get(name) or value in (False, 0, [], {}):
            continue
        return f"`{name}`={value!r} is not done by the search operator"
    for name, value in kwargs.items():
        if name not in GRAPH_KWARGS and value is not None:
            return f"`{name}` is not an input of the generating graph"
    eos = generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, (list, tuple)) and len(eos) == 1 else eos
    eos = NO_EOS if eos is None else eos
    given = {"eos_token_id": eos, "no_repeat_ngram_size": generation_config.no_repeat_ngram_size or 0}
    if "early_stopping" in attributes:
        early = generation_config.early_stopping
        if early not in (True, False):
            return f"`early_stopping`={early!r}: the search operator takes True or False"
        given["early_stopping"] = int(bool(early))
    if "decoder_start_token_id" in attributes:
        start = generation_config.decoder_start_token_id
        given["decoder_start_token_id"] = attributes["decoder_start_token_id"] if start is None else start
    for name in ("temperature", "top_p"):
        if name in attributes:
            given[name] = float(getattr(generation_config, name))
    for name, value in given.items():
        if value != attributes[name] and not (isinstance(value, float) and abs(value - attributes[name]) < 1e-6):
            return (
                f"`{name}`={value!r}: the graph was exported with {attributes[name]!r} (an attribute of the operator)"
            )
    pad = generation_config.pad_token_id
    if (eos if pad is None else pad) != entry["pad_token_id"]:
        return f"`pad_token_id`={pad!r}: the graph was exported with {entry['pad_token_id']!r}"
    return None


def unhonoured(generation_config, entry: dict, kwargs: dict) -> str | None:
    """Why ``model_generate.onnx`` (its ``hf_seq_onnx.json`` entry ``entry``) cannot run ``generate()`` with the merged
    ``generation_config`` and the model keyword arguments ``kwargs``, or None when it can."""
    generation_config = with_defaults(generation_config)
    reason = _fixed_settings_differ(generation_config, entry, kwargs)
    if reason is not None:
        return reason
    beams = generation_config.num_beams or 1
    if beams > 1 and not entry["attributes"]["early_stopping"]:
        return (
            "`early_stopping`=False with beam search: the search operator decides when a source row is done "
            "otherwise than generate() (on trained translators 7-11 % of beam-5 translations differed); a folder "
            "whose generation_config has early_stopping=True gets the same search"
        )
    if beams == 1 and (generation_config.repetition_penalty or 1.0) != 1.0:
        return (
            "`repetition_penalty` with greedy search: PyTorch divides the logits, the search operator the "
            "log-probabilities"
        )
    if entry.get("kind") == "causal_lm" and (generation_config.repetition_penalty or 1.0) != 1.0:
        return (
            "`repetition_penalty` for a language model: on a left-padded prompt the search operator leaves the "
            "padding out of the penalty, generate() does not"
        )
    if beams > 1 and entry.get("kind") == "causal_lm" and generation_config.length_penalty != 0:
        return (
            f"`length_penalty`={generation_config.length_penalty} with beam search: the search operator divides a "
            "language model's sequence by its whole length, the prompt included, generate() by the generated length "
            "(length_penalty=0.0 is the same search)"
        )
    if beams > 1 and generation_config.length_penalty < 0:
        return (
            f"`length_penalty`={generation_config.length_penalty}: the search operator divides a sequence cut at "
            "the maximum length by one more position than generate() does"
        )
    return None


# the sampling warpers of transformers that the Sampling operator has no counterpart for, at their neutral values
SAMPLING_NEUTRAL = {"typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "min_p": None, "top_h": None}


def unhonoured_sampling(generation_config, entry: dict | None, kwargs: dict) -> str | None:
    """Why ``model_sample.onnx`` (its ``hf_seq_onnx.json`` entry ``entry``; None: the folder has none) cannot run
    ``generate(do_sample=True, ...)`` with the merged ``generation_config`` and the model keyword arguments
    ``kwargs``, or None when it can. It samples with the graph's fixed ``temperature`` and ``top_p``, without a
    top-k filter (transformers' default ``top_k=50`` is the same search only when the vocabulary has at most 50
    entries), one sequence per row at a time."""
    if entry is None:
        return "`do_sample`: the folder has no sampling graph (ONNX Runtime samples decoder-only models)"
    generation_config = with_defaults(generation_config)
    reason = _fixed_settings_differ(generation_config, entry, kwargs, allowed=("do_sample",))
    if reason is not None:
        return reason
    if (generation_config.num_beams or 1) > 1:
        return f"`num_beams`={generation_config.num_beams} with `do_sample`: the sampling operator draws one sequence"
    top_k = generation_config.top_k
    if top_k and top_k < entry["vocab_size"]:
        return (
            f"`top_k`={top_k}: the sampling operator has no top-k filter (top_k=0 or None, or at least the "
            f"vocabulary's {entry['vocab_size']}, is the same search)"
        )
    for name, neutral in SAMPLING_NEUTRAL.items():
        value = getattr(generation_config, name, neutral)
        if value is not None and value != neutral:
            return f"`{name}`={value!r} is not done by the sampling operator"
    if (generation_config.repetition_penalty or 1.0) != 1.0:
        return (
            "`repetition_penalty` with sampling: on a left-padded prompt the sampling operator leaves the padding "
            "out of the penalty, generate() does not"
        )
    return None


class GeneratingGraph:
    """``model_generate.onnx`` of a folder in one ONNX Runtime session (numpy in and out)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        threads: int | None = None,
        providers=None,
        session=None,
        sample_session=None,
    ) -> None:
        self.folder = Path(folder)
        info = json.loads((self.folder / ONNX_INFO).read_text(encoding="utf-8"))
        self.entry = info["graphs"]["generate"]
        self.attributes = self.entry["attributes"]
        # model_sample.onnx (a language model's): sampling in ONNX Runtime's Sampling operator
        self.sample_entry = info["graphs"].get("sample")

        def open_session(entry):
            import onnxruntime

            options = onnxruntime.SessionOptions()
            if threads is not None:
                options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            path = str(self.folder / entry["file"])
            return onnxruntime.InferenceSession(path, options, providers=providers or ["CPUExecutionProvider"])

        self.session = session if session is not None else open_session(self.entry)
        if self.sample_entry is not None and sample_session is None:
            sample_session = open_session(self.sample_entry)
        self.sample_session = sample_session
        # generate() calls run by this graph, calls left to the step graphs, source rows searched again by them
        self.counts = {"graph": 0, "steps": 0, "rows_by_steps": 0}

    def report(self) -> str:
        """Which graphs ran the ``generate()`` calls so far, in words (for a run's results)."""
        counts = self.counts
        words = f"{self.entry['file']}: {counts['graph']} calls; step graphs: {counts['steps']} calls"
        return words + (f", {counts['rows_by_steps']} source rows searched again" if counts["rows_by_steps"] else "")

    def generate(self, model, args: tuple, kwargs: dict):
        """``model.generate(*args, **kwargs)`` (an ``ORTModelForSeq2SeqLM`` of this folder) by this graph: the
        sequences as ``generate()`` returns them, or None (logged, with the reason) when the call asks for what the
        graph does not do, which the step graphs then run."""
        import inspect

        import torch
        from transformers import GenerationMixin

        call = inspect.signature(GenerationMixin.generate).bind_partial(model, *args, **kwargs).arguments
        call.pop("self", None)
        settings = call.pop("kwargs", {})
        generation_config = call.pop("generation_config", None)
        inputs = call.pop("inputs", None)
        extra = {name: value for name, value in call.items() if value not in (None, False)}
        config, model_kwargs = model._prepare_generation_config(generation_config, **settings)
        ids = inputs if inputs is not None else model_kwargs.pop("input_ids", None)
        mask = model_kwargs.pop("attention_mask", None)
        sampling = bool(config.do_sample)
        if ids is None or ids.dim() != 2 or ids.shape[1] == 0:
            reason = "no `input_ids` (the graph starts from a prompt or a source)"
        elif mask is None and bool((ids == self.entry["pad_token_id"]).any()):
            reason = "no `attention_mask` for inputs that hold the padding token"
        elif sampling:
            reason = unhonoured_sampling(config, self.sample_entry, {**extra, **model_kwargs})
        else:
            reason = unhonoured(config, self.entry, {**extra, **model_kwargs})
        prepared, config = config, with_defaults(config)  # prepared: the lengths as generate() reads them
        beams, returned = config.num_beams or 1, config.num_return_sequences or 1
        if reason is None and returned > beams and not sampling:
            reason = f"`num_return_sequences`={returned} > `num_beams`={beams}"
        if reason is not None:
            logger.info("generate(): the step graphs (%s)", reason)
            self.counts["steps"] += 1
            return None
        prompt = ids.shape[1] if self.entry.get("kind") == "causal_lm" else 1  # what the sequences start with
        max_length = prompt + config.max_new_tokens if config.max_new_tokens is not None else config.max_length
        min_length = max(config.min_length or 0, prompt + config.min_new_tokens if config.min_new_tokens else 0)
        if sampling:  # ONNX Runtime's draws, from a seed that torch's generator draws (torch.manual_seed repeats it)
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
            sequences, _ = self.sample(
                ids.cpu().numpy(),
                None if mask is None else mask.cpu().numpy(),
                max_length=max_length,
                min_length=min_length,
                seed=seed,
                num_return_sequences=returned,
            )
            self.counts["graph"] += 1
            logger.info("generate(): %s (sampling in ONNX Runtime, its own draws)", self.sample_entry["file"])
            return torch.from_numpy(sequences)
        sequences, _, cut = self.run(
            ids.cpu().numpy(),
            None if mask is None else mask.cpu().numpy(),
            max_length=max_length,
            min_length=min_length,
            num_beams=beams,
            num_return_sequences=returned,
            length_penalty=config.length_penalty,
            repetition_penalty=config.repetition_penalty,
        )
        rows = np.flatnonzero(cut.any(-1)) if beams > 1 and config.length_penalty != 0 else np.array([], int)
        self.counts["graph"] += 1
        self.counts["rows_by_steps"] += len(rows)
        if len(rows) == 0:
            logger.info("generate(): %s (the search in ONNX Runtime)", self.entry["file"])
            return torch.from_numpy(sequences.reshape(-1, sequences.shape[-1]))
        # a returned sequence cut at max_length: the operator's length penalty counts one position more there than
        # generate()'s, so those sources are searched again by the step graphs (the rows of a batch are independent)
        logger.info(
            "generate(): %s, and the step graphs for source rows %s (a returned sequence reached max_length, where "
            "the search operator's length penalty counts one position more than generate())",
            self.entry["file"],
            rows.tolist(),
        )
        index = torch.from_numpy(rows)
        again = GenerationMixin.generate(
            model,
            ids[index],
            generation_config=prepared,
            attention_mask=None if mask is None else mask[index],
        ).view(len(rows), returned, -1)
        width = max(sequences.shape[-1], again.shape[-1])
        fill = self.entry["pad_token_id"] or self.attributes["eos_token_id"]
        merged = torch.full((sequences.shape[0], returned, width), fill, dtype=torch.long)
        merged[:, :, : sequences.shape[-1]] = torch.from_numpy(sequences)
        merged[index] = fill
        merged[index, :, : again.shape[-1]] = again
        return merged.view(-1, width)

    def run(
        self,
        input_ids,
        attention_mask=None,
        max_length: int = 20,
        min_length: int = 0,
        num_beams: int = 1,
        num_return_sequences: int = 1,
        length_penalty: float = 1.0,
        repetition_penalty: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(sequences (B, R, T) int64, sequences_scores (B, R), cut (B, R) bool)`` as ``generate()`` returns them:
        every sequence starts with the decoder start token (a language model's: with its prompt, left-padded) and
        ends with its end token, padded to the longest of
        the batch (with ``pad_token_id`` after greedy search, with ``pad_token_id or eos_token_id`` after beam
        search); ``cut`` marks the sequences that reached ``max_length`` without an end token. With one beam the
        search is greedy: ``length_penalty`` is not used."""
        ids = np.asarray(input_ids, dtype=np.int32)
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int32)
        feeds = {
            "input_ids": ids,
            "max_length": np.array([max_length], np.int32),
            "min_length": np.array([min_length], np.int32),
            "num_beams": np.array([num_beams], np.int32),
            "num_return_sequences": np.array([num_return_sequences], np.int32),
            # one beam: no length normalisation, so that the finished sequence is the greedy one
            "length_penalty": np.array([length_penalty if num_beams > 1 else 0.0], np.float32),
            "repetition_penalty": np.array([repetition_penalty], np.float32),
            "attention_mask": mask,
        }
        sequences, scores = self.session.run(None, feeds)
        eos, pad = self.attributes["eos_token_id"], self.entry["pad_token_id"]
        fill = pad if num_beams == 1 else (pad or eos)  # as generate() pads (a pad id 0 gives way to eos in beams)
        start = ids.shape[1] if self.entry.get("kind") == "causal_lm" else 1
        sequences, cut = finish(sequences.astype(np.int64), eos, fill, start)
        return sequences, scores, cut

    def sample(
        self,
        input_ids,
        attention_mask=None,
        max_length: int = 20,
        min_length: int = 0,
        seed: int = 0,
        num_return_sequences: int = 1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(sequences (B * R, T) int64, cut (B * R) bool)`` sampled by ``model_sample.onnx`` with its fixed
        temperature and top-p, as ``generate(do_sample=True)`` lays them out: each prompt (left-padded) repeated
        ``num_return_sequences`` times, its continuation ending with the end token, then ``pad_token_id``; ``cut``
        marks those that reached ``max_length``. The same ``seed`` gives the same sequences (ONNX Runtime's
        generator: not PyTorch's draws)."""
        if self.sample_session is None:
            raise GeneratingGraphError(f"{self.folder} has no sampling graph (a language model's {SAMPLE_FILE})")
        if not 0 <= seed < 2**31:
            raise GeneratingGraphError(f"`seed` {seed}: the sampling operator takes an int32 >= 0")
        ids = np.asarray(input_ids, dtype=np.int32)
        mask = np.ones_like(ids) if attention_mask is None else np.asarray(attention_mask, dtype=np.int32)
        feeds = {
            "input_ids": np.repeat(ids, num_return_sequences, axis=0),
            "max_length": np.array([max_length], np.int32),
            "min_length": np.array([min_length], np.int32),
            "attention_mask": np.repeat(mask, num_return_sequences, axis=0),
            "seed": np.array([seed], np.int32),
        }
        (sequences,) = self.sample_session.run(None, feeds)
        entry = self.sample_entry
        sequences, cut = finish(
            sequences[:, 0].astype(np.int64), entry["attributes"]["eos_token_id"], entry["pad_token_id"], ids.shape[1]
        )
        return sequences, cut


def finish(sequences: np.ndarray, eos: int, fill: int, start: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """The operator's ``sequences`` (..., T), padded with the end token, as ``generate()`` returns them: cut to the
    longest (each ends at its first end token from position ``start`` on, after the start token or the prompt, or
    runs to the full width), ``fill`` after the end token; and which ran to the full width."""
    ends = sequences[..., start:] == eos
    finished = ends.any(-1)
    lengths = np.where(finished, ends.argmax(-1) + start + 1, sequences.shape[-1])
    width = int(lengths.max())
    out = sequences[..., :width].copy()
    out[np.arange(width) >= lengths[..., None]] = fill
    return out, ~finished


GENERATE_PY = '''"""Generate with this folder, with onnxruntime, tokenizers and numpy only (no torch, no transformers):
python generate.py "a text" ["another" ...] [--num_beams 5] [--max_new_tokens 50]"""
import argparse, json, pathlib, sys
import numpy as np, onnxruntime, tokenizers

DECODER_ONLY = {decoder_only}  # a language model continues its prompt; a translator starts from a source
EARLY_STOPPING = {early_stopping}  # the beam search's early_stopping, as exported
here = pathlib.Path(__file__).parent
parser = argparse.ArgumentParser()
parser.add_argument("texts", nargs="+")
parser.add_argument("--num_beams", type=int, default=1)
parser.add_argument("--max_new_tokens", type=int, default=50)
args = parser.parse_args()
if args.num_beams > 1 and not EARLY_STOPPING:
    print("note: with early_stopping=False ONNX Runtime's own rule decides when a beam search is done; a few results "
          "can differ from transformers' generate() (export with early_stopping=True for its search)", file=sys.stderr)
tokenizer = tokenizers.Tokenizer.from_file(str(here / "tokenizer.json"))
pad = json.loads((here / "generation_config.json").read_text()).get("pad_token_id") or 0
tokenizer.enable_padding(pad_id=pad, pad_token=tokenizer.id_to_token(pad), direction="left" if DECODER_ONLY else "right")
batch = tokenizer.encode_batch(args.texts)
ids = np.array([e.ids for e in batch], np.int32)
start = ids.shape[1] if DECODER_ONLY else 1  # what the sequences start with: the prompt, or the decoder start token
session = onnxruntime.InferenceSession(str(here / "model_generate.onnx"))
one = lambda value, dtype=np.int32: np.array([value], dtype)
sequences, scores = session.run(None, {{
    "input_ids": ids, "attention_mask": np.array([e.attention_mask for e in batch], np.int32),
    "max_length": one(start + args.max_new_tokens), "min_length": one(0), "num_beams": one(args.num_beams),
    "num_return_sequences": one(1), "length_penalty": one(1.0 if args.num_beams > 1 and not DECODER_ONLY else 0.0, np.float32),
    "repetition_penalty": one(1.0, np.float32)}})
for row in sequences[:, 0]:
    print(tokenizer.decode(row.tolist(), skip_special_tokens=True))
'''


__all__ = [
    "GENERATE_FILE",
    "SAMPLE_FILE",
    "GeneratingGraph",
    "GeneratingGraphError",
    "build_generating_graph",
    "build_sampling_graph",
    "search_attributes",
    "finish",
    "unhonoured",
    "unhonoured_sampling",
    "write_generating_graph",
    "write_sampling_graph",
]
