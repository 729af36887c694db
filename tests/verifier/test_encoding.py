"""The Z3 encoding: the condition language translates exactly, attribute values survive
the slot layout, and every op has a Z3 rule (or an explicit 'unsupported')."""

from __future__ import annotations

import random

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES
from superopt.ir import OPS, TensorType, get_op
from superopt.ir.errors import IRError
from superopt.substitutions.pattern import eval_expr
from superopt.verifier.shapes import TABLE, env
from superopt.verifier.zvalues import AttrCodec, Translator

EXPRS = [
    "rank(?x) == 2",
    "dim(?x, -1) == dim(?y, 0)",
    "shape(?x) == shape(?y)",
    "rank(?x) == 1 and dim(?x, 2) == 2",  # short-circuit: the right side may not exist
    "rank(?x) >= 3 or dim(?x, 2) == 1",
    "dim(?x, ?a) + 1 > 2",
    "?a in ?s",
    "?a not in ?s and len(?s) >= 1",
    "sum(?s) == size(?y)",
    "max(?s) - min(?s) <= 1",
    "?s[?a] == 1",
    "?s[-1] * 2 == dim(?x, 0)",
    "(?a // 2) % 3 == dim(?y, 0) % 2",
    "(-?a) // 2 == -1",
    "(dim(?x, 0) if rank(?x) > 0 else 7) == 3",
    "1 <= rank(?x) < 3",
    "?p == 'same' or ?p == (1, 0, 1, 0)",
    "?p == 'valid' and ?act != 'relu'",
    "?p[0] + ?p[1] == 1",
    "?s == (dim(?x, 0), dim(?y, 0))",
    "shape(?x) == (2, 3) or shape(?y) == ()",
    "not (rank(?x) == rank(?y))",
]
CODECS = {"a": AttrCodec("a", "int"), "s": AttrCodec("s", "tuple", cap=6),
          "p": AttrCodec("p", "padding"),
          "act": AttrCodec("act", "str", ("none", "relu", "sigmoid", "tanh"))}


def _python(text: str, env_: dict) -> bool:
    try:
        return bool(eval_expr(text, env_))
    except IRError:
        return False


@pytest.mark.parametrize("text", EXPRS)
def test_conditions_translate_exactly(text: str) -> None:
    e = env()
    rng = random.Random(hash(text) % 1000)
    x, y = z3.Const("tx", e.T), z3.Const("ty", e.T)
    agree = 0
    for _ in range(20):
        shapes = {k: tuple(rng.randint(1, 3) for _ in range(rng.randint(0, 4)))
                  for k in ("x", "y")}
        attrs = {"a": rng.randint(-3, 3),
                 "s": tuple(rng.randint(0, 3) for _ in range(rng.randint(0, 3))),
                 "p": rng.choice(["same", "valid", (1, 0, 1, 0), (0, 1, 2, 0)]),
                 "act": rng.choice(["none", "relu", "tanh"])}
        want = _python(text, {"x": TensorType(shapes["x"]), "y": TensorType(shapes["y"]),
                              **attrs})
        vals = {k: c.to_val(c.encode(attrs[k])) for k, c in CODECS.items()}
        tr = Translator({"x": x, "y": y}, vals, e.rank, e.dim)
        s = z3.Solver()
        for t, shp in ((x, shapes["x"]), (y, shapes["y"])):
            s.add(e.rank(t) == len(shp), *[e.dim(t, k) == d for k, d in enumerate(shp)])
        s.add(tr.condition(text) != z3.BoolVal(want))
        assert s.check() == z3.unsat, (text, shapes, attrs, want)
        agree += 1
    assert agree == 20


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_attributes_survive_the_slot_layout(op: str, data) -> None:
    graph = data.draw(OP_CASES[op]())
    e = env()
    for n in graph.nodes:
        if n.op in ("input", "weight"):
            continue
        for codec in e.codecs(n.op):
            value = n.attr(codec.name)
            slots = [z3.simplify(v) for v in codec.encode(value)]
            concrete = [v.as_fraction() if z3.is_rational_value(v) else v.as_long()
                        for v in slots]
            back = codec.decode(concrete)
            if isinstance(value, float):
                assert back == pytest.approx(value)
            else:
                assert back == value, (n.op, codec.name)


def test_every_op_has_a_z3_rule_or_a_reason() -> None:
    assert TABLE.missing() == [] and TABLE.stale() == []
    for name in OPS:
        if not TABLE.supports(name):
            assert get_op(name).attrs and name in ("input", "weight")
