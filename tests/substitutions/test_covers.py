"""`superopt covers`: derivation of rules by equality saturation over a library.

Expected verdicts come from how the rules were written, not from the checker's output:
a rule made by composing two library rules must be covered by exactly those two steps, a
false rule must never be covered, a true rule no library rule touches must saturate.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.substitutions import parse_rules
from superopt.substitutions.covers import Budget, check, compile_library, prune
from superopt.substitutions.egraph import Step

REPO = Path(__file__).resolve().parents[2]

# Two true rules over 2-D tensors (relu commutes with a transpose; two transposes cancel).
LIB_TEXT = """
relu_t: (relu (transpose [1,0] ?x)) => (transpose [1,0] (relu ?x))
tt: (transpose [1,0] (transpose [1,0] ?x)) => ?x
"""
AT = "if shape(?a) == (2, 3)"


def lib(text: str = LIB_TEXT):
    return compile_library(parse_rules(text, "<lib>"))


def one(text: str):
    return parse_rules(text, "<rule>")[0]


def test_composition_of_two_rules_is_covered_by_those_two_steps() -> None:
    # relu_t inside the outer transpose, then tt at the top.
    rule = one(f"c: (transpose [1,0] (relu (transpose [1,0] ?a))) => (relu ?a) {AT}")
    cov = check(lib(), rule)
    assert cov.verdict == "covered"
    assert cov.steps == (Step("relu_t", True), Step("tt", True))


def test_reversed_rule_is_covered_right_to_left() -> None:
    rule = one(f"r: (transpose [1,0] (relu ?a)) => (relu (transpose [1,0] ?a)) {AT}")
    cov = check(lib(), rule)
    assert cov.verdict == "covered"
    assert cov.steps == (Step("relu_t", False),)


def test_true_rule_the_library_does_not_touch_saturates_not_covered() -> None:
    rule = one("comm: (ewadd ?a ?b) => (ewadd ?b ?a) if shape(?a) == (2, 3) and "
               "shape(?b) == (2, 3)")
    cov = check(lib(), rule)
    assert cov.verdict == "not covered"
    assert "saturated" in cov.reason


def test_false_rule_is_not_covered() -> None:
    # A transpose does not cancel on its own; the library's rules are all true.
    rule = one("f: (relu (transpose [1,0] ?a)) => (relu ?a) if shape(?a) == (3, 3)")
    assert check(lib(), rule).verdict != "covered"


def test_bare_variable_source_direction_is_reported_not_applied() -> None:
    skipped = lib().skipped
    assert [(s.rule, s.direction) for s in skipped] == [("tt", "backward")]


def test_node_budget_is_reported() -> None:
    text = """
    comm: (ewadd ?x ?y) => (ewadd ?y ?x)
    assoc: (ewadd (ewadd ?x ?y) ?z) => (ewadd ?x (ewadd ?y ?z))
    """
    # relu never appears: no rewrite can reach the target, so only the budget stops it.
    rule = one("g: (ewadd (ewadd ?a ?b) (ewadd ?c ?d)) => (relu (ewadd (ewadd ?a ?b) "
               "(ewadd ?c ?d))) if shape(?a) == (2, 2) and shape(?b) == (2, 2) and "
               "shape(?c) == (2, 2) and shape(?d) == (2, 2)")
    cov = check(lib(text), rule, Budget(max_nodes=60))
    assert cov.verdict == "budget"
    assert "60 e-nodes" in cov.reason


def test_computed_attribute_in_a_library_source_must_equal_the_node() -> None:
    split = lib("sc: (split.0 1 {[dim(?x,1), dim(?y,1)]} (concat 1 ?x ?y)) => ?x")
    at = "if shape(?a) == (2, 4) and shape(?b) == (2, 4)"
    good = one(f"g: (split.0 1 [4,4] (concat 1 ?a ?b)) => ?a {at}")
    # Split at another boundary: its first part is not ?a, and sc must not match.
    bad = one(f"b: (split.0 1 [3,5] (concat 1 ?a ?b)) => (slice [0,0] [2,3] [1,1] ?a) {at}")
    assert check(split, good).steps == (Step("sc", True),)
    assert check(split, bad).verdict != "covered"


def test_multi_output_rule_needs_every_output_derived() -> None:
    rules = """
    c1: (split.0 1 {[dim(?x,1), dim(?y,1)]} (concat 1 ?x ?y)) => ?x
    c2: (split.1 1 {[dim(?x,1), dim(?y,1)]} (concat 1 ?x ?y)) => ?y
    """
    at = "if shape(?a) == (2, 4) and shape(?b) == (2, 4)"
    both = one(f"m: (split.0 1 [4,4] (concat 1 ?a ?b)) ; (split.1 1 [4,4] (concat 1 ?a ?b)) "
               f"=> ?a ; ?b {at}")
    assert check(lib(rules), both).steps == (Step("c1", True), Step("c2", True))
    only_first = lib(rules.split("\n")[1])
    assert check(only_first, both).verdict == "not covered"


def test_prune_drops_the_composed_rule_and_keeps_its_parts() -> None:
    rules = parse_rules(LIB_TEXT + "c: (transpose [1,0] (relu (transpose [1,0] ?a))) => "
                        "(relu ?a) if rank(?a) == 2\n", "<lib>")
    kept, covs = prune(rules)
    assert [r.name for r in kept] == ["relu_t", "tt"]
    by = {c.rule: c for c in covs}
    assert by["c"].verdict == "covered"
    assert [s.rule for s in by["c"].steps] == ["relu_t", "tt"]


def test_false_rules_are_never_covered_by_the_verifier_axioms() -> None:
    from superopt.substitutions.readers import read_any
    from superopt.verifier.axioms import builtin_text

    axioms = compile_library(parse_rules(builtin_text(), "<axioms>"))
    for rule in read_any(REPO / "benchmarks/data/false_rules.rules"):
        cov = check(axioms, rule, Budget(max_nodes=1500, time_s=1.0))
        assert cov.verdict != "covered", (rule.name, cov.derivation())


# ---- the command ---------------------------------------------------------------------


def test_cli_reports_covered_with_derivation(tmp_path: Path) -> None:
    (tmp_path / "lib.rules").write_text(LIB_TEXT.lstrip())
    (tmp_path / "r.rules").write_text(
        f"c: (transpose [1,0] (relu (transpose [1,0] ?a))) => (relu ?a) {AT}\n"
        "f: (relu (transpose [1,0] ?a)) => (relu ?a) if shape(?a) == (3, 3)\n")
    out = tmp_path / "cov.json"
    assert main(["covers", str(tmp_path / "lib.rules"), str(tmp_path / "r.rules"),
                 "--jobs", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    by = {v["rule"]: v for v in report["verdicts"]}
    assert [d["rule"] for d in by["c"]["derivation"]] == ["relu_t", "tt"]
    assert by["f"]["verdict"] != "covered"


def test_cli_prunes_a_library(tmp_path: Path) -> None:
    (tmp_path / "lib.rules").write_text(
        LIB_TEXT.lstrip() + "c: (transpose [1,0] (relu (transpose [1,0] ?a))) => (relu ?a) "
        "if rank(?a) == 2\n")
    out = tmp_path / "pruned.json"
    assert main(["covers", str(tmp_path / "lib.rules"), "--out", str(out)]) == 0
    assert [r["name"] for r in json.loads(out.read_text())["rules"]] == ["relu_t", "tt"]


@pytest.mark.parametrize("content, where", [
    (None, "no such file"),
    ("ok: (relu ?x) => ?x\nbad: (relu ?x => ?x\n", ":2:"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                              content: str | None, where: str) -> None:
    good = tmp_path / "lib.rules"
    good.write_text(LIB_TEXT.lstrip())
    bad = tmp_path / "bad.rules"
    if content is not None:
        bad.write_text(content)
    assert main(["covers", str(good), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and where in err


def test_commutativity_is_applied_only_when_asked() -> None:
    rule = one("swap: (ewmul (ewadd ?a ?b) ?c) => (ewmul ?c (ewadd ?b ?a)) if shape(?a) == "
               "(2, 2) and shape(?b) == (2, 2) and shape(?c) == (2, 2)")
    empty = compile_library([])
    assert check(empty, rule).verdict == "not covered"
    with_comm = compile_library([], commutative=True)
    assert sorted(s.rule for s in check(with_comm, rule).steps) == ["comm.ewadd", "comm.ewmul"]


def test_a_rule_larger_than_the_node_budget_is_budget_not_error() -> None:
    rule = one(f"c: (transpose [1,0] (relu (transpose [1,0] ?a))) => (relu ?a) {AT}")
    assert check(lib(), rule, Budget(max_nodes=2)).verdict == "budget"


def test_a_rule_that_does_not_type_check_is_an_error() -> None:
    rule = one("m: (matmul ?a ?b) => (matmul ?b ?a) if shape(?a) == (2, 3) and "
               "shape(?b) == (3, 2)")
    assert check(lib(), rule).verdict == "error"


def test_matching_a_several_source_direction_stops_at_the_deadline() -> None:
    """A two-output library rule is matched over pairs of classes, which may find nothing
    for a long while: the time budget must stop that search, not only the match cap."""
    import time

    from superopt.ir.types import TensorType
    from superopt.substitutions.covers import _matches
    from superopt.substitutions.egraph import BudgetExceeded, EGraph, build

    two = lib("m: (split.0 1 [4,4] (concat 1 ?a ?b)) ; (split.1 1 [4,4] (concat 1 ?a ?b)) "
              "=> ?a ; ?b")
    (d,) = [d for d in two.directions if len(d.sources) == 2]
    src = one("s: (split.0 1 [4,4] (concat 1 ?a ?b)) ; (split.1 1 [4,4] (concat 1 ?a ?b)) "
              "=> ?a ; ?b if shape(?a) == (2, 4) and shape(?b) == (2, 4)")
    eg = EGraph(1000)
    leaves = {v: eg.var(v, TensorType((2, 4))) for v in ("a", "b")}
    for p in src.source:
        build(eg, p, leaves, {}, {"a": TensorType((2, 4)), "b": TensorType((2, 4))})
    assert _matches(eg, d, eg.by_op(), 400)  # without a deadline the pair matches
    eg.deadline = time.perf_counter() - 1.0
    with pytest.raises(BudgetExceeded):
        _matches(eg, d, eg.by_op(), 400)
