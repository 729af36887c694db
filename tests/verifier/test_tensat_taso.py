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


# ---- TASO's concat rules from its own graph_subst.pb (issue 46) -------------------------

PB_CONCAT = Path(__file__).resolve().parents[1] / "substitutions" / "fixtures" / \
    "taso_concat_rules.pb"


def test_taso_s_concat_rules_are_typed_by_their_stated_rank_and_proved() -> None:
    """Rules 100-115 of TASO's graph_subst.pb, byte for byte. Six of them concatenate
    input_4/input_5 (2-D in TASO's input table) with 4-D kernels; the concat's PM_NUMDIM
    says 4, so they are read at rank 4 and must all be proved, as TASO proved them."""
    problems: list = []
    rules = read_any(PB_CONCAT, problems)
    assert (len(rules), problems) == (16, [])
    by_index = {100 + r.provenance["index"]: r for r in rules}  # the fixture starts at 100
    mixed = [103, 104, 110, 111, 112, 113]
    for i in mixed:
        cond = by_index[i].condition or ""
        assert "rank(?input_4) == 4" in cond, (i, cond)
        assert "input table" in by_index[i].provenance["taso_types_note"]
    # (a|b) + (c|d) == (c|b) + (a|d) along the axis needs |a| == |c| there (and so
    # |b| == |d|): the source alone types for any split, so that is the condition.
    assert "dim(?input_4,1) == dim(?input_10,1)" in (by_index[103].condition or "")
    assert "dim(?input_4,0) == dim(?input_5,0)" in (by_index[110].condition or "")
    # As `superopt verify` checks TASO's rules: at the shapes TASO found them at.
    results = verify_rules([at_source_shapes(r)[0] for r in rules], builtin_axioms(),
                           VerifyOptions(), jobs=1)
    assert Counter(r.state for r in results) == {PROVED: 16}, [
        (r.name, r.state, r.reason) for r in results if r.state != PROVED]
