"""Registry coverage: every op has a rule (or an explicit 'unsupported') in every table that
needs one, no table names an op that does not exist, and every op has a shared test case."""

from __future__ import annotations

import importlib

import pytest

from superopt.ir import OPS, TABLES

# Every module that owns a per-op rule table; a new subsystem adds its module here.
TABLE_MODULES = (
    "superopt.ir.modp",
    "superopt.ir.analysis",
    "superopt.backends.torch",
    "superopt.tpu_sim.op_costs",
    "superopt.tpu_sim.layout_rules",
    "superopt.tpu_sim.bounds_rules",
    "superopt.verifier.shapes",
    "superopt.mutants.boxes",
    "superopt.xtat.passes.layout",
    "superopt.exporters.onnx",
    "superopt.verifier.mutate",
    "superopt.ir.ranges",
    "superopt.rewrite.batchsplit",
)


@pytest.fixture(scope="module", autouse=True)
def _load_tables() -> None:
    for name in TABLE_MODULES:
        importlib.import_module(name)


def test_expected_tables_are_registered() -> None:
    assert {"modp", "flops", "torch", "tpu_cost", "tpu_layout", "tpu_bounds",
            "z3", "boxes", "xtat_layout", "onnx", "mutate", "int_ranges",
            "batch_chunk"} <= set(TABLES)


@pytest.mark.parametrize("table", ["modp", "flops", "torch", "tpu_cost", "tpu_layout",
                                   "tpu_bounds", "z3", "boxes", "xtat_layout", "onnx",
                                   "mutate", "int_ranges", "batch_chunk"])
def test_table_covers_every_op(table: str) -> None:
    t = TABLES[table]
    assert t.missing() == [], f"ops without a {table} rule: {t.missing()}"
    assert t.stale() == [], f"{table} rules for unknown ops: {t.stale()}"


def test_every_table_is_complete() -> None:
    for name, t in TABLES.items():
        assert t.missing() == [], f"table {name}: ops without a rule: {t.missing()}"


def test_every_op_has_a_shared_test_case() -> None:
    from op_cases import OP_CASES

    assert sorted(set(OPS) - set(OP_CASES)) == []


def test_tpu_cost_entries_carry_op_facts() -> None:
    """The compiler's passes read op facts (MXU hero, cheap to duplicate, reduction) from
    the cost table, so every registered op has them next to its cost rule."""
    from superopt.ir.opdef import REDUCTION
    from superopt.tpu_sim.op_costs import COST_RULES, OpRule, op_rule

    for name, op in OPS.items():
        assert COST_RULES.supports(name), name
        rule = op_rule(name)
        assert isinstance(rule, OpRule), name
        assert all(isinstance(x, bool) for x in (rule.mxu, rule.cheap, rule.reduction)), name
        assert rule.reduction == op.has(REDUCTION), name
        assert not (rule.mxu and rule.cheap), f"{name}: an MXU op is never duplicated"
    assert sorted(n for n in OPS if op_rule(n).mxu) == ["attention", "conv2d", "linear", "matmul"]


def test_tpu_bounds_mxu_ops_carry_their_contraction() -> None:
    """`bounds.analyse` takes an MXU hero's contraction dims from its bounds rule, so every
    op the cost table calls an MXU op has one."""
    from superopt.tpu_sim.bounds_rules import bounds_rule
    from superopt.tpu_sim.op_costs import op_rule

    for name in OPS:
        assert (bounds_rule(name).mxu is not None) == op_rule(name).mxu, name
