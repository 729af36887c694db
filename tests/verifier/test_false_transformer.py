"""False rules over the transformer-era ops (benchmarks/data/false_transformer.rules): each
is refuted by a counterexample that really separates the two sides, and Z3 proves none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from superopt.ir import TensorType, interpret
from superopt.ir.types import DType
from superopt.substitutions import Rule, read_rules
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.encoding import encode_rule
from superopt.verifier.prover import PROVED, REFUTED, Prover, VerifyOptions
from superopt.verifier.sampler import var_dtypes

FALSE = read_rules(Path(__file__).parents[2] / "benchmarks" / "data" / "false_transformer.rules")


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(builtin_axioms(), VerifyOptions(timeout_s=10, samples=8))


def test_the_file_has_twenty_false_rules_over_the_new_ops() -> None:
    from superopt.substitutions.pattern import PNode, walk

    new = {"neg", "exp", "log", "sqrt", "rsqrt", "recip", "silu", "pow", "sub", "div",
           "maximum", "lt", "gt", "where", "cast", "gather", "expand", "tri_mask",
           "rms_norm", "attention"}
    over_new = [r.name for r in FALSE if new & {
        q.op for p in (*r.source, *r.target) for q in walk(p) if isinstance(q, PNode)}]
    assert len(over_new) >= 20, over_new


def _separates(rule: Rule, ce: dict) -> bool:
    """Rebuild the counterexample with the IR (ids and masks with their dtypes) and check
    that the sides differ."""
    dtypes = var_dtypes(rule)
    types = {k: TensorType(tuple(v), dtypes.get(k, DType.F32)) for k, v in ce["shapes"].items()}
    attrs = {k: tuple(v) if isinstance(v, list) else v for k, v in ce["attrs"].items()}
    src, tgt = rule.instantiate(types, attrs)
    i = ce["output"]
    if ce["kind"] == "shape":
        return src.type_of(src.outputs[i]).shape != tgt.type_of(tgt.outputs[i]).shape
    feeds = {k: np.asarray(v, dtype=np.float64 if types[k].dtype.is_float else np.int64)
             for k, v in ce["inputs"].items()}
    with np.errstate(all="ignore"):
        a, b = interpret(src, feeds)[i], interpret(tgt, feeds)[i]
    return not np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("rule", FALSE, ids=lambda r: r.name)
def test_false_rule_is_refuted_by_a_real_counterexample(prover: Prover, rule: Rule) -> None:
    res = prover.verify(rule)
    assert res.state == REFUTED, res.reason
    assert res.counterexample is not None and _separates(rule, res.counterexample)


@pytest.mark.parametrize("rule", FALSE, ids=lambda r: r.name)
def test_z3_never_proves_a_false_rule(prover: Prover, rule: Rule) -> None:
    outs = prover.prove(encode_rule(rule, prover.e, prefix="ft:"))
    assert not all(o.state == PROVED for o in outs), rule.name
