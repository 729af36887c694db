"""Tensat's 931 TASO equations (benchmarks/data): every one is read, and every one is
proved at TASO's input shapes (issue 14: a true TASO rule must not come back refuted or
unknown at the shapes TASO found it at)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from superopt.substitutions.readers import read_any
from superopt.verifier.axioms import builtin_axioms
from superopt.verifier.prover import PROVED, VerifyOptions, at_source_shapes, verify_rules

FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "tensat_taso_rules.txt"


def test_all_931_equations_are_read_with_taso_s_shapes() -> None:
    problems: list = []
    rules = read_any(FILE, problems)
    assert (len(rules), problems) == (931, [])
    # Every rule is recorded at TASO's input shapes, which is what verify checks.
    assert all("shape(?input_" in (at_source_shapes(r)[0].condition or "") for r in rules)


@pytest.mark.slow
def test_all_931_equations_are_proved_at_taso_s_shapes() -> None:
    rules = [at_source_shapes(r)[0] for r in read_any(FILE, [])]
    results = verify_rules(rules, builtin_axioms(), VerifyOptions(), jobs=2)
    states = Counter(r.state for r in results)
    assert states == {PROVED: 931}, [(r.name, r.state, r.reason) for r in results
                                      if r.state != PROVED][:5]
    # PROVED means a concrete agreeing instance and a premise Z3 satisfied with a model.
    assert all(r.test.instances >= 1 and r.premise.startswith("sat") for r in results)
