"""The verifier's own negatives (issue 14, item 5): one-place mutations of true rule
libraries that the float64 reference shows false must never be proved, and at least 95%
of them must be refuted with a counterexample. A sample runs by default, every mutant of
the starter library, `benchmarks/data/taso_like.rules` and a generated size-2 library
under `-m slow`."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from superopt.rewrite import starter_rules
from superopt.substitutions import Rule, parse_rule, read_rules
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.mutate import Mutant, false_mutants, mutants, sample
from superopt.verifier.prover import PROVED, REFUTED, Prover, VerifyOptions

DATA = Path(__file__).parents[2] / "benchmarks" / "data"


@pytest.fixture(scope="module")
def prover() -> Prover:
    return Prover(builtin_axioms(), VerifyOptions(timeout_s=10, samples=8))


def _check(prover: Prover, ms: list[Mutant]) -> None:
    assert ms
    results = [prover.verify(m.rule) for m in ms]
    proved = [m.rule.name for m, r in zip(ms, results, strict=True) if r.state == PROVED]
    assert not proved, f"false mutants proved: {proved}"
    refuted = [r for r in results if r.state == REFUTED and r.counterexample]
    assert len(refuted) >= 0.95 * len(results), [
        (m.rule.name, m.change, r.state, r.reason) for m, r in zip(ms, results, strict=True)
        if r.state != REFUTED]


def test_mutations_cover_the_kinds_the_issue_lists() -> None:
    rule = parse_rule("r: (matmul ?x (concat 1 ?y ?z)) => (concat 1 (matmul ?x ?y) "
                      "(matmul ?x ?z)) if rank(?x) == 2 and rank(?y) == 2")
    changes = [m.change for m in mutants(rule)]
    assert "concat axis 1 -> 2" in changes and "concat axis 1 -> 0" in changes
    assert "matmul activation none -> relu" in changes
    assert "matmul operands swapped" in changes
    assert "concat dropped (operand 0 kept)" in changes
    assert any(c.startswith("?y -> ?") for c in changes)
    pool = parse_rule("p: (pool2d_avg [3,3] [1,1] same none true ?x) => (conv2d [1,1] same "
                      "[1,1] {dim(?x,1)} none ?x (const_pool {dim(?x,1)} 3 3))")
    changes = [m.change for m in mutants(pool)]
    assert "const_pool kh 3 -> 4" in changes and "conv2d padding 'same' -> 'valid'" in changes
    # every mutant is a different rule whose target reads only source inputs
    assert all(m.rule.target != pool.target for m in mutants(pool))


def test_a_mutant_that_is_still_true_is_not_kept() -> None:
    # Dropping one relu of three still gives relu(relu(x)) == relu(x): true, not a negative.
    rule = parse_rule("r: (relu (relu ?x)) => (relu (relu (relu ?x)))")
    still_true = parse_rule("t: (relu ?x) => (relu (relu ?x))").target
    assert still_true in {m.rule.target for m in mutants(rule)}
    kept = false_mutants([rule])
    assert still_true not in {m.rule.target for m in kept}
    assert "op relu -> sigmoid" in {m.change for m in kept}  # sigmoid(relu(relu x)): false
    assert all(m.witness for m in kept)


def _sampled_rules(rules: list[Rule], n: int, seed: int) -> list[Rule]:
    return random.Random(seed).sample(rules, min(n, len(rules)))


def test_sampled_mutants_are_never_proved_and_mostly_refuted(prover: Prover) -> None:
    rules = (_sampled_rules(list(starter_rules()), 6, 1)
             + _sampled_rules(read_rules(DATA / "taso_like.rules"), 8, 2))
    _check(prover, sample(false_mutants(rules), 30, seed=3))


@pytest.mark.slow
@pytest.mark.parametrize("library", ["starter", "taso_like", "generated2"])
def test_every_mutant_is_never_proved_and_mostly_refuted(prover: Prover, library: str
                                                         ) -> None:
    if library == "starter":
        rules = list(starter_rules())
    elif library == "taso_like":
        rules = read_rules(DATA / "taso_like.rules")
    else:
        from superopt.substitutions.generator import generate
        from superopt.substitutions.presets import make_config

        rules = list(generate(make_config("taso", max_ops=2), workers=1).rules)
    _check(prover, false_mutants(rules))
