"""PET on the transformer-era ops: sub, neg and expand are multi-linear with box rules;
every NONLINEAR op and every attribute-made constant is where PET splits a program; ops
linear in only some inputs (div in its divisor, gather in its indices) are refused with a
one-line reason; the box test and the mutant search go through sub."""

from __future__ import annotations

import pytest

from superopt.ir import GraphBuilder
from superopt.ir.opdef import NONLINEAR, OPS, ops_with
from superopt.ir.rules import MissingRule
from superopt.mutants.boxes import TABLE, BoxError, output_grids
from superopt.mutants.degrees import check_multilinear


def test_every_nonlinear_op_and_constant_is_marked_unsupported() -> None:
    for op in ops_with(NONLINEAR):
        with pytest.raises(MissingRule, match="non-linear"):
            TABLE.get(op)
    for op in ("iota", "tri_mask", "const_one"):
        with pytest.raises(MissingRule, match="constant"):
            TABLE.get(op)
    # div is linear in its dividend only: the NONLINEAR trait wins (1/b is no polynomial).
    assert "div" in ops_with(NONLINEAR)
    for op in ("sub", "neg", "expand"):
        assert TABLE.supports(op), op
    assert {op for op in OPS if TABLE.supports(op)} >= {"sub", "neg", "expand"}


def test_sub_neg_expand_program_has_the_boxes_of_its_operands() -> None:
    b = GraphBuilder("p")
    x, y = b.input("x", (4, 6)), b.input("y", (4, 6))
    w = b.weight("w", (6, 1))
    top = b.slice(x, starts=(0, 0), ends=(2, 6))
    stacked = b.concat(top, b.neg(b.slice(x, starts=(2, 0), ends=(4, 6))), axis=0)
    out = b.sub(b.matmul(stacked, b.expand(w, shape=(6, 5))), b.matmul(y, b.expand(w, shape=(6, 5))))
    g = b.build([out])
    # Rows 0-1 and 2-3 come from differently signed halves: one cut at row 2.
    assert output_grids(g) == (((2,), ()),)
    check_multilinear(g)


@pytest.mark.parametrize("op", ["div", "gather", "embedding"])
def test_ops_linear_in_some_inputs_only_are_refused_with_a_reason(op: str) -> None:
    b = GraphBuilder(op)
    if op == "div":
        out = b.div(b.input("a", (3, 4)), b.input("c", (3, 4)))
    elif op == "gather":
        out = b.gather(b.input("x", (5, 4)), b.input("i", (3,), "i64", high=5), axis=0)
    else:
        out = b.embedding(b.input("i", (3,), "i64", high=5), b.weight("t", (5, 4)))
    g = b.build([out])
    with pytest.raises(BoxError, match="not multi-linear"):
        check_multilinear(g)


def _dist(form: str):
    b = GraphBuilder(form)
    x, y = b.input("x", (4, 8)), b.input("y", (4, 8))
    w = b.weight("w", (8, 4))
    if form == "original":
        return b.build([b.matmul(b.sub(x, y), w)])
    op = b.sub if form == "distributed" else b.ewadd
    return b.build([op(b.matmul(x, w), b.matmul(y, w))])


def test_box_test_through_sub_tells_equal_from_wrong() -> None:
    from superopt.mutants.boxtest import box_test

    # (x - y) @ w == x @ w - y @ w, evaluated point by point mod p through the sub rule;
    # the sum in place of the difference is wrong everywhere.
    assert box_test(_dist("original"), _dist("distributed")).fully_equivalent
    assert box_test(_dist("original"), _dist("sum")).equal_fraction == 0.0


def test_generator_searches_through_sub() -> None:
    from superopt.mutants.boxtest import box_test
    from superopt.mutants.generator import dfs_mutants

    g = _dist("original")
    found, _ = dfs_mutants(g, depth=3, max_states=4000, time_budget=20.0)
    with_sub = [m for m in found if "sub" in {n.op for n in m.graph.nodes}]
    assert with_sub
    for m in with_sub:  # every candidate box-tests without error
        assert 0.0 <= box_test(g, m.graph).equal_fraction <= 1.0
