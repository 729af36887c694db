"""Rules with one instance (every variable's shape forced, no attribute variable) are
tested on that instance without asking Z3 for it; the verdicts must be those of the Z3
sampler, which proposes the same instance and then nothing else."""

from __future__ import annotations

import pytest

from superopt.ir.types import DType, TensorType
from superopt.substitutions import parse_rule
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.prover import INVALID, PROVED, REFUTED, Prover, VerifyOptions
from superopt.verifier.sampler import pinned_spec, random_test, unique_instance

PINNED = "shape(?x) == (2, 4, 5, 5) and shape(?w) == (4, 4, 3, 3)"


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(builtin_axioms(), VerifyOptions(timeout_s=10, samples=8))


def test_the_instance_is_the_forced_shapes() -> None:
    rule = parse_rule(f"r: (relu (conv2d padding=same ?x ?w)) => "
                      f"(conv2d padding=same activation=relu ?x ?w) if {PINNED}")
    inst = unique_instance(rule)
    assert inst is not None and inst.attrs == {}
    assert inst.types == {"x": TensorType((2, 4, 5, 5), DType.F32),
                          "w": TensorType((4, 4, 3, 3), DType.F32)}


@pytest.mark.parametrize("text", [
    # a shape under `or` forces nothing
    "r: (relu ?x) => (relu ?x) if shape(?x) == (2, 3) or rank(?x) == 1",
    # a variable whose shape is not given
    "r: (ewadd ?x ?y) => (ewadd ?y ?x) if shape(?x) == (2, 3)",
    # an attribute variable has many values
    "r: (transpose ?p ?x) => (transpose ?p ?x) if shape(?x) == (2, 3)",
    # no condition at all
    "r: (relu ?x) => (relu ?x)",
])
def test_rules_with_more_than_one_instance_go_to_the_sampler(text: str) -> None:
    assert unique_instance(parse_rule(text)) is None


@pytest.mark.parametrize("text", [
    f"t: (relu (conv2d padding=same ?x ?w)) => (conv2d padding=same activation=relu ?x ?w) "
    f"if {PINNED}",
    # false: relu is not the identity
    "f: (relu ?x) => ?x if shape(?x) == (2, 4, 5, 5)",
    # the sides have different shapes
    "s: (transpose [1,0] ?x) => ?x if shape(?x) == (2, 3)",
    # the target does not type-check there
    "i: (relu ?x) => (matmul ?x ?x) if shape(?x) == (2, 3)",
])
def test_the_report_is_the_z3_sampler_s(text: str) -> None:
    rule = parse_rule(text)
    assert unique_instance(rule) is not None
    fast = random_test(rule, samples=8, seed=3)
    # Given a spec, the tester always asks Z3 (the sampler's own path).
    slow = random_test(rule, samples=8, seed=3, spec=pinned_spec(rule))
    for field in ("instances", "source_checked", "source_only", "outside", "proposals"):
        assert getattr(fast, field) == getattr(slow, field), field
    assert (fast.counterexample is None) == (slow.counterexample is None)
    if fast.counterexample is not None:
        assert fast.counterexample.get("kind") == slow.counterexample.get("kind")


def test_verdicts_on_single_instance_rules(prover: Prover) -> None:
    good = prover.verify(parse_rule(
        f"t: (relu (conv2d padding=same ?x ?w)) => (conv2d padding=same activation=relu "
        f"?x ?w) if {PINNED}"))
    assert good.state == PROVED and good.test.instances == 1
    # The premise is still solved by Z3, with a model.
    assert good.premise.startswith("sat (") and "?x: [2, 4, 5, 5]" in good.premise
    bad = prover.verify(parse_rule("f: (relu ?x) => ?x if shape(?x) == (2, 4, 5, 5)"))
    assert bad.state == REFUTED and bad.counterexample is not None
    # The forced shape contradicts the rest of the condition: no instance, never proved.
    none = prover.verify(parse_rule(
        "c: (relu ?x) => (relu ?x) if shape(?x) == (2, 3) and dim(?x,0) == 3"))
    assert none.state == INVALID and "premise unsatisfiable" in none.reason
    ill = prover.verify(parse_rule("i: (relu ?x) => (matmul ?x ?x) if shape(?x) == (2, 3)"))
    assert ill.state == INVALID and "does not type-check" in ill.reason
