"""Property tests over the shared op-case table: the three semantics agree on shapes,
exact values stay residues, graphs survive JSON, and linear ops are linear mod p."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from op_cases import OP_CASES
from superopt.ir import OPS, Graph, P, get_op, interpret
from superopt.ir.serialize import from_json, to_json

SETTINGS = settings(max_examples=15, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("op", sorted(OPS))
def test_semantics_agree_on_shapes_and_survive_json(op: str) -> None:
    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        graph.lint()
        shapes = interpret(graph, semantics="shapes")
        ref = interpret(graph)
        exact = interpret(graph, semantics="modp")
        for t, r, e in zip(shapes, ref, exact, strict=True):
            assert t.shape == r.shape == e.shape
            assert e.dtype == np.int64
            if t.dtype.is_float:
                assert ((e >= 0) & (e < P)).all()
        again = from_json(json.loads(json.dumps(to_json(graph))), dict(graph.weights))
        assert again.structural_hash == graph.structural_hash
        for a, b in zip(ref, interpret(again), strict=True):
            np.testing.assert_array_equal(a, b)

    check()


_LINEAR = sorted(name for name, op in OPS.items()
                 if op.linear_in or "linear" in op.traits)


@pytest.mark.parametrize("op", _LINEAR)
def test_linear_ops_are_linear_mod_p(op: str) -> None:
    """f(a*x + y) = a*f(x) + f(y) in each linear input (others fixed), when no activation
    is fused: the property PET's region testing relies on."""
    opdef = get_op(op)

    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        node = next(n for n in graph.nodes if n.op == op)
        if not opdef.is_multilinear(node.a):
            return
        sources = [graph.node(v.node) for v in node.inputs]
        slots = opdef.linear_in or tuple(range(len(sources)))
        rng = np.random.default_rng(0)
        base = {n.attr("name"): rng.integers(0, P, n.type.shape) for n in graph.nodes
                if n.op in ("input", "weight") and n.type.dtype.is_float}
        base.update({n.attr("name"): rng.integers(0, max(n.attr("high"), 1), n.type.shape)
                     for n in graph.nodes if n.op == "input" and not n.type.dtype.is_float})
        for slot in slots:
            src = sources[slot]
            if src.op not in ("input", "weight") or not src.type.dtype.is_float:
                continue
            name = src.attr("name")
            if "linear" not in opdef.traits and sum(s.id == src.id for s in sources) > 1:
                continue  # x * x is not linear in x
            # Jointly linear ops (ewadd, concat) are linear in all inputs at once.
            names = ([s.attr("name") for s in sources if s.op in ("input", "weight")]
                     if "linear" in opdef.traits else [name])
            a = int(rng.integers(1, P))
            xs = {k: base[k] for k in names}
            ys = {k: rng.integers(0, P, base[k].shape) for k in names}
            mixed = {k: (a * xs[k] + ys[k]) % P for k in names}
            fx = interpret(graph, {**base, **xs}, semantics="modp")
            fy = interpret(graph, {**base, **ys}, semantics="modp")
            fm = interpret(graph, {**base, **mixed}, semantics="modp")
            for m, x, y in zip(fm, fx, fy, strict=True):
                assert ((m - (a * x + y)) % P == 0).all(), f"{op} not linear in input {slot}"

    check()
