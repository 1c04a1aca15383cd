"""Rewrites of an exported step graph that move less data per decoding step and keep its products.

``model_generate.onnx`` runs a decoder step graph once per generated token inside ONNX Runtime's search operator;
what the exporter wrote for one forward call is then paid at every step. Each rewrite here removes a copy and
leaves every product and sum as it was (a product that now reads an operand transposed may run another of ONNX
Runtime's kernels, so the numbers are the same to float rounding; on the exported models of the tests and the
benchmark they were bit-identical):

* :func:`swap_last_axes_by_transpose`: ``torch.onnx``'s ``scaled_dot_product_attention`` swaps a key's last two axes
  as ``Reshape`` (to rank 3) → ``Transpose`` → ``Reshape`` (back), a copy of every key at every step (the whole
  self-attention cache and the encoder's keys). As one ``Transpose`` of the last two axes it is fused by ONNX
  Runtime into the next ``MatMul`` (``FusedMatMul`` reading the keys transposed), and the copy is gone.
* :func:`read_inputs_transposed`: the encoder's keys, which every step reads again, given with their last two axes
  swapped already (once per search), so that the attention product reads them as they are.
* :func:`keep_step_axis_in_logits`: the step's logits ``(B, V)`` computed as ``(B, 1, V)``, the shape the search
  operator reads, so that no ``Unsqueeze`` copies them at every step (a graph output is always a new buffer); the
  axis is added before the output layer instead (no copy after a Gather, a ``(B, D)`` one otherwise).

Each returns what it changed; a graph the pattern does not fit is left as it is.
"""

from __future__ import annotations

import numpy as np

MS_DOMAIN = "com.microsoft"
# ops between a (B, D) state and the logits that compute row by row (a leading axis more is fine)
_ROW_WISE = {"MatMul", "MatMulInteger", "DynamicQuantizeLinear", "Cast", "Mul", "Add", "Gemm"}


def _constants(graph) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _ranks(graph) -> dict[str, int]:
    values = [*graph.input, *graph.output, *graph.value_info]
    return {v.name: len(v.type.tensor_type.shape.dim) for v in values if v.type.tensor_type.HasField("shape")}


def _links(graph) -> tuple[dict, dict[str, list]]:
    """Each tensor's producing node, and the nodes that read it (a node reading it twice listed twice)."""
    producer = {name: node for node in graph.node for name in node.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return producer, readers


def _attribute(node, name: str, default=None):
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _read(graph) -> set[str]:
    """The tensor names the nodes of ``graph`` read, in their subgraphs too, and its outputs."""
    from onnx import AttributeProto

    names = {value.name for value in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            for inner in [attribute.g] if attribute.type == AttributeProto.GRAPH else attribute.graphs:
                names |= _read(inner)
    return names


def remove_unused_nodes(graph) -> None:
    """Drop the nodes whose outputs nothing reads (neither a node nor the graph's outputs), repeatedly, then the
    initializers nothing reads."""
    while True:
        read = _read(graph)
        unused = [node for node in graph.node if not any(name in read for name in node.output)]
        if not unused:
            break
        for node in unused:
            graph.node.remove(node)
    for initializer in [init for init in graph.initializer if init.name not in read]:
        graph.initializer.remove(initializer)


def swap_last_axes_by_transpose(graph) -> int:
    """Replace torch.onnx's ``Reshape(x, [-1, x.shape[-2], x.shape[-1]])`` → ``Transpose([0, 2, 1])`` →
    ``Reshape(., x.shape[:-2] + [x.shape[-1], x.shape[-2]])`` by one ``Transpose`` of ``x``'s last two axes
    (``x`` of a known rank); returns how many were replaced."""
    from onnx import helper

    producer, readers = _links(graph)
    constants, ranks = _constants(graph), _ranks(graph)

    def shape_slice(name: str, source: str) -> tuple[int, int | None] | None:
        """``(start, end)`` when ``name`` is ``Slice(Shape(source), [start], [end])`` (from the first axis: start 0;
        to the last: end None)."""
        node = producer.get(name)
        if node is None or node.op_type != "Slice" or len(node.input) != 3:
            return None
        shape = producer.get(node.input[0])
        if shape is None or shape.op_type != "Shape" or shape.input[0] != source:
            return None
        if _attribute(shape, "start", 0) != 0 or _attribute(shape, "end") is not None:
            return None
        start, end = constants.get(node.input[1]), constants.get(node.input[2])
        if start is None or end is None or start.size != 1 or end.size != 1:
            return None
        start, end = int(start.reshape(())), int(end.reshape(()))
        return (0 if start <= -(2**31) else start), (None if end >= 2**31 - 1 else end)

    def is_concat(name: str, source: str, parts: list) -> bool:
        """``name`` is ``Concat`` of ``parts``: ``("const", values)`` or a ``(start, end)`` slice of source's shape."""
        node = producer.get(name)
        if node is None or node.op_type != "Concat" or len(node.input) != len(parts):
            return False
        for given, part in zip(node.input, parts):
            if part[0] == "const":
                value = constants.get(given)
                if value is None or value.reshape(-1).tolist() != part[1]:
                    return False
            elif shape_slice(given, source) != part:
                return False
        return True

    swapped = 0
    for transpose in [node for node in graph.node if node.op_type == "Transpose"]:
        if list(_attribute(transpose, "perm", [])) != [0, 2, 1]:
            continue
        before, after = producer.get(transpose.input[0]), readers.get(transpose.output[0], [])
        if before is None or before.op_type != "Reshape" or len(after) != 1 or after[0].op_type != "Reshape":
            continue
        if len(readers.get(before.output[0], [])) != 1:
            continue
        source, after = before.input[0], after[0]
        rank = ranks.get(source)
        if rank is None or rank < 3:
            continue
        last, second_last = (-1, None), (-2, -1)  # slices of the source's shape
        if not is_concat(before.input[1], source, [("const", [-1]), second_last, last]):
            continue
        if not is_concat(after.input[1], source, [(0, -2), last, second_last]):
            continue
        perm = [*range(rank - 2), rank - 1, rank - 2]
        replacement = helper.make_node(
            "Transpose", [source], [after.output[0]], name=f"{transpose.name}/last_axes", perm=perm
        )
        graph.node.insert(list(graph.node).index(after), replacement)
        graph.node.remove(after)
        swapped += 1
    if swapped:
        remove_unused_nodes(graph)
    return swapped


def read_inputs_transposed(graph, names: list[str]) -> list[str]:
    """For each graph input of ``names`` whose one reader is a ``Transpose`` of its last two axes (as
    :func:`swap_last_axes_by_transpose` leaves a key), drop that Transpose: the input is then to be given with those
    axes swapped already (an encoder's keys, swapped once per search instead of at every step), as its declared shape
    now says. Returns the inputs that changed meaning."""
    _, readers = _links(graph)
    ranks, changed = _ranks(graph), []
    for name in names:
        found = readers.get(name, [])
        rank = ranks.get(name)
        if len(found) != 1 or found[0].op_type != "Transpose" or rank is None:
            continue
        if list(_attribute(found[0], "perm", [])) != [*range(rank - 2), rank - 1, rank - 2]:
            continue
        transpose = found[0]
        for node in readers.get(transpose.output[0], []):
            for i, given in enumerate(node.input):
                if given == transpose.output[0]:
                    node.input[i] = name
        graph.node.remove(transpose)
        declared = next(value for value in graph.input if value.name == name).type.tensor_type.shape.dim
        swapped = [type(declared[0])(), type(declared[0])()]
        swapped[0].CopyFrom(declared[rank - 1])
        swapped[1].CopyFrom(declared[rank - 2])
        declared[rank - 2].CopyFrom(swapped[0])
        declared[rank - 1].CopyFrom(swapped[1])
        changed.append(name)
    return changed


def keep_step_axis_in_logits(graph, output: str = "logits") -> int:
    """Make ``output`` ``(B, 1, V)`` instead of ``(B, V)`` when it is computed row by row (products, casts, scales,
    biases) from one ``(B, D)`` tensor: from ``Gather(hidden (B, 1, D), -1, axis=1)`` the Gather keeps the axis
    (index ``[-1]``); from another ``(B, D)`` tensor an ``Unsqueeze`` gives it the axis (a copy of ``B × D``
    numbers instead of ``B × V``). A ``Gemm`` on the way becomes ``com.microsoft.FusedMatMul`` (the same product on
    a leading axis more); a Gemm with a bias is left alone. Returns 1 when rewritten (the declared output shape
    too), else 0 (the graph unchanged)."""
    from onnx import helper, numpy_helper

    producer, readers = _links(graph)
    constants, ranks = _constants(graph), _ranks(graph)
    if ranks.get(output) != 2:
        return 0
    chain, name = [], output
    while name in producer and producer[name].op_type in _ROW_WISE:
        if chain and len(readers.get(name, [])) != 1:  # a tensor between two of the chain's nodes, read elsewhere too
            return 0
        chain.append(producer[name])
        name = producer[name].input[0]
    for node in chain:
        if node.op_type == "Gemm" and (
            _attribute(node, "transA", 0) or len(node.input) > 2 or _attribute(node, "beta", 1.0) != 1.0
        ):
            return 0
    if not chain or ranks.get(name, 2) != 2:
        return 0
    gather = producer.get(name)
    index = constants.get(gather.input[1]) if gather is not None and gather.op_type == "Gather" else None
    if (
        index is not None
        and index.shape == ()
        and int(index) == -1
        and _attribute(gather, "axis", 0) == 1
        and len(readers.get(name, [])) == 1
    ):
        kept = f"{gather.name}/keep_axis"
        graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), kept))
        gather.input[1] = kept
    else:
        axis = f"{chain[-1].name}/step_axis"
        graph.initializer.append(numpy_helper.from_array(np.array([1], np.int64), axis))
        unsqueeze = helper.make_node("Unsqueeze", [name, axis], [f"{name}/with_step_axis"], name=axis)
        graph.node.insert(list(graph.node).index(chain[-1]), unsqueeze)
        chain[-1].input[0] = unsqueeze.output[0]
    for node in chain:
        if node.op_type == "Gemm":
            trans_b, alpha = _attribute(node, "transB", 0), _attribute(node, "alpha", 1.0)
            fused = helper.make_node(
                "FusedMatMul", list(node.input), list(node.output), name=node.name, domain=MS_DOMAIN, transB=trans_b
            )
            fused.attribute.append(helper.make_attribute("alpha", float(alpha)))
            graph.node.insert(list(graph.node).index(node), fused)
            graph.node.remove(node)
    remove_unused_nodes(graph)  # a Gather's scalar index
    for value in graph.output:
        if value.name == output and value.type.tensor_type.HasField("shape"):
            dims = value.type.tensor_type.shape.dim
            dims.insert(1, type(dims[0])(dim_value=1))
    return 1


__all__ = [
    "keep_step_axis_in_logits",
    "read_inputs_transposed",
    "remove_unused_nodes",
    "swap_last_axes_by_transpose",
]
