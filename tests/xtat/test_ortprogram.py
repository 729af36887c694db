"""The digest of the program onnxruntime makes of a model: names, node order and weight
values do not count; ops, attributes, wiring and shapes do. And the real runner does not
time a candidate onnxruntime turns into the incumbent's program."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.xtat.ortprogram import graph_digest

onnx = pytest.importorskip("onnx")
helper, numpy_helper = onnx.helper, onnx.numpy_helper


def _model(order: tuple[int, ...] = (0, 1, 2), prefix: str = "", alpha: float = 0.1,
           weight: np.ndarray | None = None, swap: bool = False) -> onnx.GraphProto:
    """x -> MatMul(w) -> LeakyRelu(alpha) -> Add(x) : a small graph to vary one thing at a
    time."""
    n = lambda s: prefix + s  # noqa: E731
    w = np.ones((4, 4), np.float32) if weight is None else weight
    nodes = [helper.make_node("MatMul", [n("x"), n("w")], [n("m")], name=n("a")),
             helper.make_node("LeakyRelu", [n("m")], [n("r")], alpha=alpha, name=n("b")),
             helper.make_node("Add", [n("x"), n("r")] if swap else [n("r"), n("x")],
                              [n("y")], name=n("c"))]
    return helper.make_graph(
        [nodes[i] for i in order], "g",
        [helper.make_tensor_value_info(n("x"), onnx.TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info(n("y"), onnx.TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w, n("w"))])


def test_names_node_order_and_weight_values_do_not_count() -> None:
    base = graph_digest(_model())
    assert graph_digest(_model(order=(2, 0, 1))) == base
    assert graph_digest(_model(prefix="renamed_")) == base
    assert graph_digest(_model(weight=np.full((4, 4), 3.0, np.float32))) == base


def test_ops_attributes_wiring_and_shapes_do() -> None:
    base = graph_digest(_model())
    assert graph_digest(_model(alpha=0.2)) != base  # an attribute
    assert graph_digest(_model(swap=True)) != base  # an input's position
    assert graph_digest(_model(weight=np.ones((4, 4), np.float64))) != base  # a type
    g = _model()
    g.node[1].op_type = "Relu"
    del g.node[1].attribute[:]
    assert graph_digest(g) != base


def test_a_cycle_is_reported() -> None:
    g = _model()
    g.node[0].input[0] = "y"  # MatMul reads the Add's output, which reads the MatMul's
    with pytest.raises(ValueError, match="cycle"):
        graph_digest(g)


def test_onnxruntime_makes_one_program_of_a_batch_norm_folded_by_hand_or_by_itself() -> None:
    pytest.importorskip("onnxruntime")
    from superopt.ir import GraphBuilder
    from superopt.rewrite import Matcher, starter_rules
    from superopt.rewrite.apply import apply_site
    from superopt.xtat.realrunner import OrtTimer
    from xtat.plan_cases import conv_bn

    b = GraphBuilder("convbn")
    graph = b.build([b.relu(conv_bn(b))])
    matcher = Matcher(starter_rules())
    sites = matcher.match(graph).by_rule()["fold_conv_bn"]
    folded = apply_site(graph, sites[0], matcher).graph
    assert folded.structural_hash != graph.structural_hash
    b = GraphBuilder("conv")  # another program: no batch norm, a wider conv
    x = b.input("u", (8, 32, 14, 14))
    other = b.build([b.relu(b.conv2d(x, b.weight("w", (64, 32, 3, 3)), padding="same"))])
    timer = OrtTimer(threads=1)
    assert timer.same_program(graph, folded)
    assert not timer.same_program(graph, other)


def test_a_program_that_cannot_be_saved_still_gives_a_session_and_no_digest(
        tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    from superopt.xtat.ortprogram import program_digest

    model = helper.make_model(_model(), opset_imports=[helper.make_opsetid("", 17)])
    source = model.SerializeToString()
    sess, digest = program_digest(ort.SessionOptions(), source, ["CPUExecutionProvider"],
                                  str(tmp_path / "gone"))  # no such folder to save in
    assert digest is None
    out = sess.run(None, {"x": np.ones((2, 4), np.float32)})[0]
    assert np.allclose(out, 5.0)  # ones @ ones(4, 4) = 4, kept by the leaky relu, plus x
    sess, digest = program_digest(ort.SessionOptions(), source, ["CPUExecutionProvider"],
                                  str(tmp_path))
    assert digest is not None and not list(tmp_path.iterdir())  # read, then removed
    with pytest.raises(Exception, match="(?i)protobuf|parse|invalid"):
        program_digest(ort.SessionOptions(), b"not a model", ["CPUExecutionProvider"],
                       str(tmp_path))
