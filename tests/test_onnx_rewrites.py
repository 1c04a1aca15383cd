"""The step-graph rewrites of hf_seq.toolkit.onnx_rewrites: each removes a copy and leaves the products as they were,
so ONNX Runtime computes the same numbers before and after (to float rounding: a product that reads an operand
transposed may run another kernel); a graph the pattern does not fit is left unchanged. Small graphs written by hand
in the form ``torch.onnx`` exports."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from hf_seq.toolkit.onnx_rewrites import (  # noqa: E402
    keep_step_axis_in_logits,
    read_inputs_transposed,
    swap_last_axes_by_transpose,
)

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
B, H, T, D, V = 3, 2, 5, 4, 7


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)


def run(graph, feeds: dict) -> list[np.ndarray]:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)], ir_version=10
    )
    onnx.checker.check_model(model)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def const(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def attention_scores_graph():
    """``q @ k.transpose(-2, -1)`` with the key's axes swapped as torch.onnx's scaled_dot_product_attention does:
    Reshape to rank 3, Transpose, Reshape back (shapes from Slices of ``Shape(k)``)."""
    nodes = [
        helper.make_node("Shape", ["k"], ["shape"], start=0),
        helper.make_node("Slice", ["shape", "minus1", "end"], ["last"]),
        helper.make_node("Slice", ["shape", "minus2", "minus1"], ["second_last"]),
        helper.make_node("Slice", ["shape", "begin", "minus2"], ["first"]),
        helper.make_node("Concat", ["minus1", "second_last", "last"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["k", "flat_shape"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["flat_t"], perm=[0, 2, 1]),
        helper.make_node("Concat", ["first", "last", "second_last"], ["back_shape"], axis=0),
        helper.make_node("Reshape", ["flat_t", "back_shape"], ["k_t"]),
        helper.make_node("MatMul", ["q", "k_t"], ["scores"]),
    ]
    initializers = [
        const("minus1", [-1]),
        const("minus2", [-2]),
        const("end", [INT64_MAX]),
        const("begin", [INT64_MIN]),
    ]
    return helper.make_graph(
        nodes,
        "scores",
        [
            helper.make_tensor_value_info("q", TensorProto.FLOAT, ["B", H, 1, D]),
            helper.make_tensor_value_info("k", TensorProto.FLOAT, ["B", H, "T", D]),
        ],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["B", H, 1, "T"])],
        initializers,
    )


def test_swapped_key_axes_become_one_transpose_with_the_same_scores():
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((B, H, 1, D), np.float32), "k": rng.standard_normal((B, H, T, D), np.float32)}
    graph = attention_scores_graph()
    (expected,) = run(graph, feeds)
    assert swap_last_axes_by_transpose(graph) == 1
    assert [node.op_type for node in graph.node] == ["Transpose", "MatMul"]  # the shape arithmetic is gone too
    assert list(graph.node[0].attribute[0].ints) == [0, 1, 3, 2]
    (got,) = run(graph, feeds)
    assert_same(got, expected)
    assert swap_last_axes_by_transpose(graph) == 0  # nothing left to rewrite

    # an input read transposed by the product: given with its axes swapped already, the same scores again
    assert read_inputs_transposed(graph, ["k"]) == ["k"]
    assert [node.op_type for node in graph.node] == ["MatMul"]
    (got,) = run(graph, {"q": feeds["q"], "k": np.ascontiguousarray(feeds["k"].swapaxes(-1, -2))})
    assert_same(got, expected)


def test_a_reshape_that_is_not_the_axis_swap_is_left_alone():
    graph = attention_scores_graph()
    for initializer in graph.initializer:
        if initializer.name == "minus1":  # the first Concat's leading -1 becomes 1: another reshape
            initializer.CopyFrom(const("minus1", [1]))
    before = graph.SerializeToString()
    assert swap_last_axes_by_transpose(graph) == 0
    assert graph.SerializeToString() == before


def logits_graph(bias: bool = False, gather: bool = True):
    """The last position's logits ``(B, V)``: ``Gemm(Gather(hidden, -1, axis=1), W, transB=1)``; without the
    Gather, ``Gemm(Tanh(hidden (B, D)), W, transB=1)``, the hidden state also an output (read twice)."""
    rng = np.random.default_rng(1)
    inputs = ["last", "weight", *(["bias"] if bias else [])]
    nodes = [
        helper.make_node("Gather", ["hidden", "index"], ["last"], axis=1)
        if gather
        else helper.make_node("Tanh", ["hidden"], ["last"]),
        helper.make_node("Gemm", inputs, ["logits"], transB=1),
    ]
    initializers = [
        numpy_helper.from_array(np.array(-1, np.int64), "index"),
        numpy_helper.from_array(rng.standard_normal((V, D)).astype(np.float32), "weight"),
        numpy_helper.from_array(rng.standard_normal(V).astype(np.float32), "bias"),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", V])]
    if not gather:
        outputs.append(helper.make_tensor_value_info("last", TensorProto.FLOAT, ["B", D]))
    return helper.make_graph(
        nodes,
        "logits",
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["B", 1, D] if gather else ["B", D])],
        outputs,
        (initializers if bias else initializers[:2]) if gather else initializers[1:2],
    )


def test_logits_keep_the_step_axis_with_the_same_numbers():
    feeds = {"hidden": np.random.default_rng(2).standard_normal((B, 1, D), np.float32)}
    graph = logits_graph()
    (expected,) = run(graph, feeds)
    assert expected.shape == (B, V)
    assert keep_step_axis_in_logits(graph) == 1
    assert [node.op_type for node in graph.node] == ["Gather", "FusedMatMul"]
    declared = [d.dim_value or d.dim_param for d in graph.output[0].type.tensor_type.shape.dim]
    assert declared == ["B", 1, V]
    (got,) = run(graph, feeds)
    assert got.shape == (B, 1, V)
    assert_same(got[:, 0], expected)


def test_logits_with_a_gemm_bias_are_left_alone():
    graph = logits_graph(bias=True)
    before = graph.SerializeToString()
    assert keep_step_axis_in_logits(graph) == 0
    assert graph.SerializeToString() == before


def test_logits_of_a_two_axis_state_get_the_axis_before_the_output_layer():
    feeds = {"hidden": np.random.default_rng(3).standard_normal((B, D), np.float32)}
    graph = logits_graph(gather=False)
    expected, state = run(graph, feeds)
    assert keep_step_axis_in_logits(graph) == 1
    assert [node.op_type for node in graph.node] == ["Tanh", "Unsqueeze", "FusedMatMul"]
    got, got_state = run(graph, feeds)
    assert got.shape == (B, 1, V) and got_state.shape == (B, D)  # the other reader still gets (B, D)
    assert_same(got[:, 0], expected)
