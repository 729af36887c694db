"""Never a vacuous proof: PROVED needs a satisfiable premise, a premise Z3 cannot refute
on its own, and a concrete well-typed instance on which both sides agree (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from superopt.cli import main
from superopt.substitutions import parse_rule
from superopt.substitutions.readers import parse_tensat_equations
from superopt.substitutions.text import format_rule
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.encoding import encode_rule
from superopt.verifier.generalise import ladder
from superopt.verifier.prover import (
    INVALID,
    PROVED,
    REFUTED,
    Prover,
    VerifyOptions,
    at_source_shapes,
)

# The false rule the issue found PROVED: at TASO's shapes the source is (4,4,5,5), the
# target a depthwise 3x3 average over 8 channels, (2,8,5,5).
ISSUE_RULE = ("concat(0,poolavg(3,3,1,1,0,input_7),poolavg(3,3,1,1,0,input_8))=="
              "conv2d(1,1,0,0,concat(1,input_7,input_8),Cpool(3,3))")


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(builtin_axioms(), VerifyOptions(timeout_s=10, samples=8))


def test_the_issue_s_false_rule_is_not_proved(prover: Prover) -> None:
    (rule,) = parse_tensat_equations(ISSUE_RULE, "issue14.txt")
    # As read (symbolic shapes, outputs paired): no instance at all, so never proved.
    res = prover.verify(rule)
    assert res.state in (INVALID, REFUTED), res.reason
    assert not res.axioms
    # As TASO meant it, at its input shapes, each side typed on its own: the two sides
    # have different shapes, which is a refutation with the shape pair.
    pinned, where = at_source_shapes(rule)
    assert "TASO's input shapes" in where
    res = prover.verify(pinned)
    assert res.state == REFUTED, res.reason
    ce = res.counterexample
    assert ce is not None and ce["kind"] == "shape"
    assert (ce["source_shape"], ce["target_shape"]) == ([4, 4, 5, 5], [2, 8, 5, 5])


def test_true_taso_rules_are_proved_at_taso_s_shapes_and_generalised(prover: Prover) -> None:
    text = ("poolavg(3,3,1,1,0,input_8)==conv2d(1,1,0,0,input_8,Cpool(3,3))"
            "conv2d(1,1,0,2,input_8,Iconv(3,3))==relu(input_8)"
            "ewadd(input_1,input_2)==ewadd(input_2,input_1)")
    for rule in parse_tensat_equations(text, "t.txt"):
        pinned, _ = at_source_shapes(rule)
        assert "shape(?input_" in (pinned.condition or "")
        res = prover.verify(pinned)
        assert res.state == PROVED, (rule.name, res.reason)
        forms = ladder(rule)
        assert forms and forms[0][1] == rule  # the rule as read is tried first


def test_contradictory_condition_is_invalid_not_proved(prover: Prover) -> None:
    # Anything follows from a premise nothing satisfies; this rule is false as well.
    rule = parse_rule("c: (matmul ?x ?y) => (matmul ?y ?x) if rank(?x) == 2 and "
                      "rank(?x) == 3")
    res = prover.verify(rule)
    assert res.state == INVALID and "premise unsatisfiable" in res.reason
    assert res.premise.startswith("unsat")


def test_the_vacuity_check_catches_a_premise_the_axioms_refute(prover: Prover) -> None:
    # A premise the quantifier-free check would have caught; asked directly, the proof
    # step itself must not call the goal proved.
    rule = parse_rule("v: (relu ?x) => (ewadd ?x ?x) if dim(?x,0) == 1 and dim(?x,0) == 2")
    g = encode_rule(rule, prover.e, prefix="vac:")
    (out,) = prover.prove(g)
    assert out.state == INVALID and "vacuous" in out.reason


def test_a_true_rule_has_a_satisfiable_premise_with_a_model(prover: Prover) -> None:
    rule = parse_rule("t: (relu (conv2d [1,1] same [1,1] 1 none ?x ?w)) => "
                      "(conv2d [1,1] same [1,1] 1 relu ?x ?w)")
    res = prover.verify(rule)
    assert res.state == PROVED and res.test.instances >= 1
    assert res.premise.startswith("sat (") and "?x: [" in res.premise


def test_verify_json_counts_outputs_of_refuted_two_output_rules(tmp_path: Path,
                                                               monkeypatch) -> None:
    monkeypatch.setenv("SUPEROPT_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "r.rules"
    # Two outputs, the second false.
    f.write_text("two: (relu ?x) ; (ewadd ?x ?y) => (relu ?x) ; (ewmul ?x ?y)\n"
                 "bad: (relu ?x) => (ewadd ?x ?y)\n")
    lib = tmp_path / "lib.rules"
    lib.write_text("a_comm: (ewadd ?x ?y) => (ewadd ?y ?x)\n")
    out = tmp_path / "out.json"
    rc = main(["verify", "--no-builtin-axioms", "--axioms", str(lib), "--jobs", "1",
               "--samples", "4", "--axiom-samples", "3", str(f), "--json", str(out)])
    assert rc == 1
    doc = json.loads(out.read_text())
    s = doc["summary"]
    assert (s["rules"], s["outputs"]) == (2, 3)
    assert s["refuted"] == 1 and s["outputs_by_state"]["refuted"] == 2
    assert s["invalid"] == 1
    bad = next(r for r in doc["rules"] if r["name"] == "bad")
    assert bad["state"] == INVALID and bad["location"].startswith(f"{f}:2:")


def test_empty_file_and_directory_exit_2(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.rules"
    empty.write_text("# nothing here\n")
    assert main(["verify", "--jobs", "1", str(empty)]) == 2
    assert "no rules" in capsys.readouterr().err
    assert main(["verify", "--jobs", "1", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_repeated_rules_are_verified_once_and_reported_under_their_own_names() -> None:
    from superopt.verifier.prover import verify_rules

    text = ("relu(conv2d(1,1,0,0,input_7,input_10))==conv2d(1,1,0,2,input_7,input_10)"
            "relu(input_1)==relu(input_1)"
            "relu(conv2d(1,1,0,0,input_7,input_10))==conv2d(1,1,0,2,input_7,input_10)")
    rules = [at_source_shapes(r)[0] for r in parse_tensat_equations(text, "dup.txt")]
    seen: list[str] = []
    results = verify_rules(rules, builtin_axioms(), VerifyOptions(samples=4), jobs=1,
                           progress=lambda r: seen.append(r.name))
    assert [r.name for r in results] == ["eq_0001", "eq_0002", "eq_0003"]
    assert results[0].state == results[2].state == PROVED
    assert results[2].location == "dup.txt:1" and results[2].axioms == results[0].axioms
    assert sorted(seen) == ["eq_0001", "eq_0002", "eq_0003"]  # progress for each


@pytest.mark.parametrize("text", [
    # Iconv over an average pool, against a depthwise Cpool conv
    "conv2d(1,1,0,2,pool2d_avg(3,3,1,1,0,input_7),const_iconv(3,3))=="
    "relu(conv2d(1,1,0,0,input_7,const_pool(3,3)))",
    # Iconv under relu, then a conv with an enlarged kernel
    "conv2d(1,1,0,0,conv2d(1,1,0,2,input_7,const_iconv(3,3)),input_13)=="
    "conv2d(1,1,0,0,relu(input_7),enlarge(3,3,input_13))",
])
def test_constant_kernels_take_their_channels_from_their_use_in_the_general_form(
        prover: Prover, text: str) -> None:
    # Nothing but the conv using them says how many channels TASO's constants have; the
    # general form (every dim symbolic) must say it too, or it has no encoding.
    (rule,) = parse_tensat_equations(text, "t.txt")
    assert "shape(" not in (rule.condition or "")  # the general form, not TASO's shapes
    assert "(const_iconv {dim(?input_7,1)} 3 3)" in format_rule(rule)
    res = prover.verify(rule)
    assert res.state == PROVED, res.reason
