"""The e-graph under `superopt covers`: typed classes, congruence and explanations."""

from __future__ import annotations

import pytest

from superopt.ir import TensorType
from superopt.ir.errors import IRError
from superopt.substitutions.egraph import EGraph, Step

T = TensorType((2, 3))


def test_congruence_after_a_rule_union_is_explained_by_that_rule() -> None:
    eg = EGraph()
    a, b = eg.var("a", T), eg.var("b", T)
    ra, rb = eg.add("relu", {}, [a]), eg.add("relu", {}, [b])
    assert eg.find(ra) != eg.find(rb)
    eg.union(a, b, ("a_is_b", True))
    assert eg.rebuild() == 1  # relu(a) and relu(b) now have equal operands
    assert eg.find(ra) == eg.find(rb)
    assert eg.explain(ra, rb) == [Step("a_is_b", True)]
    assert eg.explain(rb, ra) == [Step("a_is_b", False)]  # read backwards


def test_classes_of_different_types_are_never_merged() -> None:
    eg = EGraph()
    a, c = eg.var("a", T), eg.var("c", TensorType((3, 2)))
    with pytest.raises(IRError):
        eg.union(a, c, ("bad", True))


def test_an_op_that_does_not_type_check_is_refused() -> None:
    eg = EGraph()
    a, c = eg.var("a", T), eg.var("c", TensorType((3, 3)))
    with pytest.raises(IRError):
        eg.add("ewadd", {}, [a, c])


def test_equal_terms_are_one_node() -> None:
    eg = EGraph()
    a = eg.var("a", T)
    assert eg.add("transpose", {"perm": (1, 0)}, [a]) == eg.add("transpose", {"perm": [1, 0]},
                                                                 [a])
    assert len(eg) == 2


def test_output_types_are_every_output_of_the_enodes_op() -> None:
    from superopt.ir.types import TensorType

    eg = EGraph()
    x = eg.var("x", TensorType((2, 6), "f32"))
    first = eg.add("split", {"axis": 1, "sizes": (2, 4)}, [x], 0)
    second = eg.add("split", {"axis": 1, "sizes": (2, 4)}, [x], 1)
    assert eg.output_types(first) == eg.output_types(second) == (
        TensorType((2, 2), "f32"), TensorType((2, 4), "f32"))
    assert eg.type_of(second) == TensorType((2, 4), "f32")
    assert eg.output_types(x) == (TensorType((2, 6), "f32"),)
