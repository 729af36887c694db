"""The transformer-era axioms (issue 44): the laws the starter rewrites rest on are there,
each real-only law really needs its label (the mod-p semantics tells its sides apart), wrong
variants fail validation, and the new starter rules are proved from them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from superopt.rewrite import starter_rules
from superopt.substitutions import parse_rules
from superopt.verifier.axioms import (
    REAL_ONLY,
    Axiom,
    axioms_from_rules,
    builtin_axioms,
    validate_axiom,
)
from superopt.verifier.prover import PROVED, Prover, VerifyOptions

AXIOMS = {a.name: a for a in builtin_axioms()}


def test_the_laws_the_issue_asks_for_are_axioms() -> None:
    for name in ("exp_add", "div_def", "sqrt_square", "sub_def", "neg_ewadd", "neg_matmul_l",
                 "softmax_shift", "softmax_sub_max", "rms_norm_scale", "rms_norm_weight",
                 "silu_def", "rsqrt_def", "rsqrt_square", "sqrt_rsqrt", "attention_scale_q",
                 "attention_smul_q", "attention_batch_concat", "attention_rows_concat",
                 "attention_heads_concat", "rms_norm_concat", "expand_ewmul", "where_same",
                 "maximum_where", "lt_gt", "gather_ewadd", "expand_ewadd", "gather_smul"):
        assert name in AXIOMS, name
    assert set(REAL_ONLY) <= set(AXIOMS)


@pytest.mark.parametrize("name", sorted(REAL_ONLY))
def test_real_only_axioms_hold_on_the_reals_and_need_their_label(name: str) -> None:
    ax = AXIOMS[name]
    assert validate_axiom(ax, samples=4, seed=2, shape_checks=0).ok
    strict = validate_axiom(replace(ax, real_only=""), samples=4, seed=2, shape_checks=0)
    assert not strict.ok and {d.kind for d in strict.directions if d.failure} == {"differs"}
    assert all("mod-p" in d.failure for d in strict.directions if d.failure)


# Each is a new axiom with its condition weakened or one part changed.
WRONG = """\
softmax_shift_any: (softmax ?a (ewadd ?x ?c)) => (softmax ?a ?x) if shape(?c) == shape(?x)
rms_norm_scale_eps: (rms_norm ?a ?e (smul ?x (exp ?y)) ?w) => (rms_norm ?a ?e ?x ?w) if ?e >= 1.0
rms_norm_unweight_wrong: (ewmul (rms_norm ?a ?e ?x (const_one ?t)) ?w) => (rms_norm ?a ?e ?x ?w) if len(?t) == rank(?w) and rank(?w) == 1
attention_rows_causal: (attention ?s true (concat axis=?a ?q ?p) ?k ?v) => (concat axis=?a (attention ?s true ?q ?k ?v) (attention ?s true ?p ?k ?v)) if ?a == rank(?q) - 2
sqrt_square_neg: (ewmul (sqrt (neg (exp ?y))) (sqrt (neg (exp ?y)))) => (neg (exp ?y))
tri_mask_transpose_diag: (transpose [1,0] (tri_mask ?r ?c ?d ?l)) => (tri_mask ?c ?r ?d {not ?l}) if ?d != 0
"""


@pytest.mark.parametrize("axiom", axioms_from_rules(parse_rules(WRONG), "test"),
                         ids=lambda a: a.name)
def test_wrong_variants_fail_validation(axiom: Axiom) -> None:
    check = validate_axiom(axiom, samples=8, seed=0)
    assert not check.ok
    assert next(d.kind for d in check.directions if d.failure) in ("differs", "partial")


NEW_STARTER = ("merge_swiglu", "merge_qkv", "fold_attention_scale", "scale_through_mul",
               "scale_through_concat", "scale_through_neg", "scale_through_split",
               "fold_rms_norm_weight", "fold_rms_norm_weight2", "fold_rms_norm_weight3")


@pytest.mark.parametrize("name", NEW_STARTER)
def test_new_starter_rules_are_proved(name: str) -> None:
    rule = next(r for r in starter_rules() if r.name == name)
    res = Prover(builtin_axioms(), VerifyOptions(timeout_s=30, samples=6)).verify(rule)
    assert res.state == PROVED, res.reason
    assert res.test.instances > 0 and res.axioms


def test_rsqrt_in_conditions_means_one_over_the_square_root() -> None:
    import math

    import z3

    from superopt.ir import TensorType
    from superopt.verifier.zvalues import Translator

    q = z3.Const("q", z3.DeclareSort("T"))
    d = z3.Int("d")
    s = z3.Real("s")
    tr = Translator({"q": q}, {"s": s}, lambda t: z3.IntVal(4), lambda t, i: d)
    cond = tr.condition("?s == rsqrt(dim(?q,-1))")
    solver = z3.Solver()
    solver.add(cond, d == 16)
    assert solver.check() == z3.sat and solver.model()[s].as_fraction() == 0.25
    solver.add(s != 0.25)
    assert solver.check() == z3.unsat
    # Python evaluates it as attention resolves its default scale (also where s * s * d
    # is not exactly 1 in floats).
    rule = next(r for r in starter_rules() if r.name == "fold_attention_scale")
    t = TensorType((1, 2, 3, 128))
    assert rule.holds_condition({"q": t, "k": t, "v": t},
                                {"s": 1.0 / math.sqrt(128), "c": False})
    assert not rule.holds_condition({"q": t, "k": t, "v": t}, {"s": 0.088, "c": False})
