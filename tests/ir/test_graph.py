"""Graph IR: hash-consing, ids, structural hashing, lint, builder errors, origin maps."""

from __future__ import annotations

import pytest

from superopt.ir import GraphBuilder, IRError, LintError, ShapeError, Value, interpret, transform
from superopt.ir.graph import Graph, Node
from superopt.ir.passes import compose, identity_origin


def _mlp(order: str = "ab") -> Graph:
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4))
    branches = {}
    for tag in order:  # build the two branches in a chosen order
        w = b.weight(f"w{tag}", (4, 4))
        branches[tag] = b.relu(b.matmul(x, w))
    return b.build([b.ewadd(branches["a"], branches["b"])])


def test_hash_consing_returns_the_same_node() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.weight("w", (4, 4))
    assert b.matmul(x, w) == b.matmul(x, w)
    assert b.matmul(x, w) != b.matmul(x, w, activation="relu")
    # Defaults are filled in, so an explicit default is the same node.
    assert b.matmul(x, w) == b.matmul(x, w, activation="none")
    assert len(b.nodes) == 4


def test_structural_hash_ignores_construction_order_but_not_structure() -> None:
    g1, g2 = _mlp("ab"), _mlp("ba")
    assert [n.op for n in g1.nodes] != [n.op for n in g2.nodes] or g1.nodes != g2.nodes
    assert g1.structural_hash == g2.structural_hash
    b = GraphBuilder("mlp")
    x = b.input("x", (2, 4))
    y = b.ewadd(b.relu(b.matmul(x, b.weight("wa", (4, 4)))), b.matmul(x, b.weight("wb", (4, 4))))
    assert b.build([y]).structural_hash != g1.structural_hash


def test_ids_are_positions_in_topological_order_and_dead_nodes_are_dropped() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    unused_in = b.input("unused", (3,))
    b.relu(x)  # dead
    y = b.tanh(x)
    g = b.build([y])
    assert [n.id for n in g.nodes] == list(range(len(g)))
    for n in g.nodes:
        assert all(v.node < n.id for v in n.inputs)
    assert [n.op for n in g.nodes] == ["input", "input", "tanh"]  # inputs are always kept
    assert g.type_of(unused_in).shape == (3,)
    g.lint()


def test_a_graph_with_nothing_dead_keeps_its_ids_and_is_not_changed_by_later_adds() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    y = b.tanh(b.matmul(x, b.weight("w", (4, 4))))
    g, remap = b.build_with_map([y])
    assert remap == {i: i for i in range(len(b.nodes))}
    assert [(n.op, n.inputs) for n in g.nodes] == [(n.op, n.inputs) for n in b.nodes]
    z = b.relu(y)  # the builder goes on; the graph built before must not see it
    assert len(g) == 4 and g.outputs == (y,)
    g2, remap2 = b.build_with_map([z])
    assert len(g2) == 5 and remap2[z.node] == 4
    b.relu(x)  # dead in the next build: ids renumbered densely, the map says how
    g3, remap3 = b.build_with_map([z])
    assert len(g3) == 5 and remap3 == {i: i for i in range(5)}
    g.lint()
    g3.lint()


def test_multi_output_split_values() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    parts = b.split(x, axis=1, sizes=(1, 2, 3))
    assert isinstance(parts, tuple) and len(parts) == 3
    assert [b.shape(p) for p in parts] == [(2, 1), (2, 2), (2, 3)]
    g = b.build([parts[2], parts[0]])
    assert g.outputs[0] == Value(1, 2)
    outs = interpret(g, {"x": [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]})
    assert outs[0].tolist() == [[3, 4, 5], [9, 10, 11]]
    assert outs[1].tolist() == [[0], [6]]


def test_builder_errors_name_op_input_and_shapes() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.weight("w", (5, 3))
    with pytest.raises(ShapeError) as e:
        b.matmul(x, w)
    msg = str(e.value)
    assert "matmul" in msg and "input 1" in msg and "4" in msg and "[5,3]" in msg
    with pytest.raises(IRError, match="expected 2 inputs"):
        b.op("matmul", x)
    with pytest.raises(IRError, match="unknown op 'convolution'"):
        b.op("convolution", x)
    with pytest.raises(IRError, match="already used"):
        b.input("x", (3, 3))
    with pytest.raises(IRError, match="attribute 'activation'.*one of"):
        b.matmul(x, b.weight("v", (4, 4)), activation="swish")
    with pytest.raises(IRError, match="unknown attribute"):
        b.relu(x, alpha=0.1)


def test_lint_reports_broken_graphs() -> None:
    good = _mlp()
    good.lint()
    nodes = list(good.nodes)
    # Corrupt a stored type: lint recomputes shapes and notices.
    n = nodes[3]
    nodes[3] = Node(n.id, n.op, n.inputs, n.attrs, tuple(t.with_shape((9, 9)) for t in n.types))
    with pytest.raises(LintError, match="differ from inferred"):
        Graph(tuple(nodes), good.outputs, name="bad").lint()
    # Forward reference: not a topological order.
    nodes = list(good.nodes)
    n = nodes[2]
    nodes[2] = Node(n.id, n.op, (Value(5), *n.inputs[1:]), n.attrs, n.types)
    with pytest.raises(LintError, match="not an earlier node"):
        Graph(tuple(nodes), good.outputs).lint()
    with pytest.raises(LintError, match="does not exist"):
        Graph(good.nodes, (Value(99),)).lint()


def test_transform_tracks_origin_for_a_fusion_pass() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 5, 5))
    w = b.weight("w", (3, 2, 3, 3))
    y = b.relu(b.conv2d(x, w, padding="same"))
    g = b.build([b.tanh(y)])

    def fuse(nb: GraphBuilder, node: Node, ins: tuple[Value, ...], lookup) -> tuple[Value, ...] | None:
        if node.op == "relu":
            src = g.node(node.inputs[0].node)
            if src.op == "conv2d":
                attrs = dict(src.attrs, activation="relu")
                return nb.add("conv2d", tuple(lookup(v) for v in src.inputs), attrs)
        return None

    result = transform(g, fuse)
    ops = [n.op for n in result.graph.nodes]
    assert ops == ["input", "weight", "conv2d", "tanh"]  # the unfused conv is dead and gone
    fused = ops.index("conv2d")
    relu_id = next(n.id for n in g.nodes if n.op == "relu")
    assert relu_id in result.origin[fused]
    tanh_new = ops.index("tanh")
    assert result.origin[tanh_new] == (next(n.id for n in g.nodes if n.op == "tanh"),)
    before, after = interpret(g)[0], interpret(result.graph)[0]
    assert (abs(before - after) < 1e-12).all()
    composed = compose(identity_origin(g), result.origin)
    assert composed[fused] == result.origin[fused]
