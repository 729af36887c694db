"""The axiom library: every axiom validates against both semantics, unsound or partial
axioms are caught, and the shape theory agrees with the IR's shape rules."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES
from superopt.ir import Graph
from superopt.substitutions import parse_rules
from superopt.verifier.axioms import (
    Axiom,
    axioms_from_rules,
    builtin_axioms,
    builtin_text,
    compile_axioms,
    validate_axiom,
)
from superopt.verifier.shapes import check_graph

AXIOMS = builtin_axioms()


def test_library_covers_tasos_properties_and_more() -> None:
    names = {a.name for a in AXIOMS}
    # TASO's list: associativity/commutativity/distributivity, scalar laws, fused relu,
    # conv linearity and concat laws, matmul laws, split/concat, transpose, pooling,
    # constants, enlarge.
    for name in ("ewadd_assoc", "ewadd_comm", "ewmul_assoc", "ewmul_comm", "ewmul_distrib",
                 "smul_matmul_r", "smul_conv", "fuse_conv_relu", "relu_concat",
                 "relu_transpose", "conv_linear_w", "conv_linear_x", "conv_sum_concat",
                 "conv_batch_concat", "conv_out_concat", "conv_group_concat",
                 "matmul_assoc", "matmul_linear_r", "matmul_concat_inner2",
                 "split2_concat_0", "transpose_compose2", "transpose_matmul2",
                 "transpose_concat2", "concat_geometry", "avgpool_concat1",
                 "avgpool_as_conv", "conv_iconv", "matmul_imm_r", "ewmul_one",
                 "conv_enlarge"):
        assert name in names, name
    assert len(AXIOMS) >= 100
    assert len(names) == len(AXIOMS)
    assert builtin_text().count("\n") > len(AXIOMS)


def test_every_direction_compiles_to_a_triggered_quantifier() -> None:
    compiled, skipped = compile_axioms(AXIOMS)
    assert skipped == []
    bidirectional = sum(a.rule.bidirectional for a in AXIOMS)
    assert len(compiled) == len(AXIOMS) + bidirectional
    for q in compiled:
        assert q.formula.is_forall() and q.formula.num_patterns() == 1, q.name


@pytest.mark.parametrize("axiom", AXIOMS, ids=[a.name for a in AXIOMS])
def test_every_builtin_axiom_is_valid(axiom: Axiom) -> None:
    check = validate_axiom(axiom, samples=2, seed=1, shape_checks=0)
    assert check.ok, [(d.direction, d.failure) for d in check.directions] + list(
        check.shape_problems)
    assert all(d.instances >= 1 for d in check.directions)


@pytest.mark.slow
@pytest.mark.parametrize("axiom", AXIOMS, ids=[a.name for a in AXIOMS])
def test_every_builtin_axiom_is_valid_on_many_shapes(axiom: Axiom) -> None:
    check = validate_axiom(axiom, samples=32, seed=7, shape_checks=4, budget_s=120)
    assert check.ok, [(d.direction, d.failure) for d in check.directions] + list(
        check.shape_problems)


BAD = """\
relu_additive: (relu (ewadd ?x ?y)) => (ewadd (relu ?x) (relu ?y))
concat_commutes: (concat axis=?a ?x ?y) => (concat axis=?a ?y ?x)
concat_blocks_swapped: (concat 0 (concat 1 ?x ?y) (concat 1 ?z ?w)) <=> (concat 1 (concat 0 ?x ?w) (concat 0 ?z ?y)) if shape(?x) == shape(?y) and shape(?x) == shape(?z) and shape(?x) == shape(?w)
grouped_concat_no_condition: (concat 1 (conv2d [1,1] same [1,1] 1 none ?x ?y) (conv2d [1,1] same [1,1] 1 none ?z ?w)) => (conv2d [1,1] same [1,1] 2 none (concat 1 ?x ?z) (concat 0 ?y ?w)) if shape(?x) == shape(?z) and dim(?y,1) == dim(?w,1) and dim(?y,2) == dim(?w,2) and dim(?y,3) == dim(?w,3) and (dim(?y,0) + dim(?w,0)) % 2 == 0
enlarge_any_stride: (conv2d ?s same [1,1] 1 none ?x (enlarge 3 3 ?w)) => (conv2d ?s same [1,1] 1 none ?x ?w)
layer_norm_rows_permuted: (layer_norm 2 ?e ?x ?g ?t) => (reshape {shape(?x)} (layer_norm 1 ?e (reshape {[dim(?x,0) * dim(?x,1), dim(?x,2)]} (transpose [1,0,2] ?x)) ?g ?t)) if rank(?x) == 3
pow2_unscale_mismatched: (smul (smul ?x (pow 32.0 (reduce_sum [0] false (const_one [2])))) (pow -31.0 (reduce_sum [0] false (const_one [2])))) => ?x
ewmul_filled_row_dropped: (ewmul ?x (smul (const_one ?t) ?c)) => ?x if rank(?c) == 0 and len(?t) == 1 and ?t[0] == dim(?x,-1)
"""


@pytest.mark.parametrize("axiom", axioms_from_rules(parse_rules(BAD), "test"),
                         ids=lambda a: a.name)
def test_unsound_axioms_fail_with_a_separating_instance(axiom: Axiom) -> None:
    check = validate_axiom(axiom, samples=8, seed=0)
    assert not check.ok
    failed = [d for d in check.directions if d.failure]
    assert failed and failed[0].kind == "differs", failed


def test_partial_axiom_is_reported_as_partial() -> None:
    # True whenever both sides type-check, but the target only type-checks for rank 2.
    rule = parse_rules("tt: (matmul ?x ?y) => (transpose [1,0] (matmul (transpose [1,0] ?y) "
                       "(transpose [1,0] ?x)))")[0]
    check = validate_axiom(Axiom("tt", rule), samples=8)
    kinds = {d.kind for d in check.directions if d.failure}
    assert kinds == {"partial"}, check


def test_axiom_without_instances_is_not_accepted() -> None:
    # The condition is unsatisfiable: no instance can validate it.
    rule = parse_rules("never: (relu ?x) => ?x if rank(?x) == 1 and rank(?x) == 2")[0]
    check = validate_axiom(Axiom("never", rule), samples=4)
    assert not check.ok and check.directions[0].kind == "sparse"


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("op", sorted(OP_CASES))
def test_shape_theory_agrees_with_the_ir(op: str, data) -> None:
    graph: Graph = data.draw(OP_CASES[op]())
    assert check_graph(graph) == []


def test_a_seed_draws_the_same_instances_whatever_the_process_built_before() -> None:
    """`verify --seed 0` in a fresh process and the generator's check in a worker that
    tested other rules first must test the same instances (each sampler solves in a Z3
    context of its own, so AST ids do not depend on the process's history)."""
    from superopt.verifier.sampler import Sampler

    axioms = {a.name: a for a in builtin_axioms()}

    def draws(name: str) -> list[object]:
        s = Sampler(axioms[name].rule, axioms[name].spec, seed=0)
        return [None if i is None else i.key() for i in (s.draw(target=False)
                                                         for _ in range(10))]

    first = draws("bn_affine2")
    for other in ("avgpool_same3_rows", "matmul_concat_w", "reshape_ewadd", "linear_def",
                  "conv_enlarge_pads", "transpose_compose4"):
        draws(other)
    assert draws("bn_affine2") == first
    assert len({k for k in first if k is not None}) >= 8  # distinct instances, not one


def _wrong_fold_laws() -> list[Axiom]:
    """The column-fold laws with one detail wrong each: the kernel halves swapped (each
    half computes the other's columns), the halo mask on the wrong ends, and the pool's
    halves interleaved instead of in two blocks."""
    text = {a.name: builtin_text().split(f"\n{a.name}: ", 1)[1].split("\n", 1)[0]
            for a in AXIOMS if a.name in ("fold_conv", "fold_mask_ends", "fold_maxpool")}
    lo, hi = "[0,0,0,0,0,0,0,1]", "[0,0,0,1,0,0,0,0]"
    swapped = text["fold_conv"].replace(lo, "@").replace(hi, lo).replace("@", hi)
    first, last = "(pad [0,0,1,0,0,0]", "(pad [0,0,0,0,0,1]"
    ends = text["fold_mask_ends"].replace(first, "@").replace(last, first).replace("@", last)
    interleaved = text["fold_maxpool"].replace("[0,4,1,2,3]", "[0,1,4,2,3]")
    assert swapped != text["fold_conv"] and ends != text["fold_mask_ends"]
    assert interleaved != text["fold_maxpool"]
    rules = parse_rules(f"fold_conv_swapped: {swapped}\nfold_mask_wrong_ends: {ends}\n"
                        f"fold_maxpool_interleaved: {interleaved}\n")
    return axioms_from_rules(rules, "test")


@pytest.mark.parametrize("axiom", _wrong_fold_laws(), ids=lambda a: a.name)
def test_wrong_fold_laws_fail_with_a_separating_instance(axiom: Axiom) -> None:
    check = validate_axiom(axiom, samples=8, seed=0)
    assert not check.ok
    failed = [d for d in check.directions if d.failure]
    assert failed and failed[0].kind == "differs", failed


@pytest.mark.parametrize("name", ["fold_conv_bias_relu", "fold_mask_halo"])
def test_derived_fold_laws_are_proved_from_the_other_axioms(name: str) -> None:
    # Kept as axioms only to shorten E-matching chains: each must follow from the rest.
    from superopt.verifier.prover import PROVED, Prover, VerifyOptions

    axiom = next(a for a in AXIOMS if a.name == name)
    res = Prover(AXIOMS, VerifyOptions(timeout_s=30)).verify(
        axiom.rule, exclude={"fold_conv_bias_relu", "fold_mask_halo"})
    assert res.state == PROVED, res.reason
    assert {"fold_conv_bias_relu", "fold_mask_halo"}.isdisjoint(res.axioms)
