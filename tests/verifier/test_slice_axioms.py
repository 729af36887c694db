"""The narrowing laws (slices through ops that compute each cell from the same cells of
their input): built in, and a broken variant of each is caught by validation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from superopt.substitutions import parse_rules
from superopt.verifier.axioms import Axiom, axioms_from_rules, builtin_axioms, validate_axiom

AXIOMS = {a.name: a for a in builtin_axioms()}
LAWS = ("slice_ewadd", "slice_ewmul", "slice_ewadd_bias3", "slice_matmul3", "slice_linear3",
        "slice_layer_norm", "slice_transpose_0213", "slice_reshape_merge_last",
        "slice_reshape_split_last", "slice_attention_rows", "gelu_slice", "silu_slice")

# Each breaks one condition or one detail of a law above.
BAD = """\
slice_attention_rows_causal: (slice ?b ?e ?t (attention ?s true ?q ?k ?v)) => (attention ?s true (slice ?b {[?e[0], ?e[1], ?e[2], dim(?q,3)]} ?t ?q) ?k ?v) if rank(?q) == 4 and ?b[0] == 0 and ?e[0] == dim(?q,0) and ?t[0] == 1 and ?b[1] == 0 and ?e[1] == dim(?q,1) and ?t[1] == 1 and ?b[3] == 0 and ?e[3] == dim(?v,3) and ?t[3] == 1 and ?b[2] > 0
slice_attention_rows_keys_too: (slice ?b ?e ?t (attention ?s false ?q ?k ?v)) => (attention ?s false (slice ?b {[?e[0], ?e[1], ?e[2], dim(?q,3)]} ?t ?q) (slice ?b {[?e[0], ?e[1], ?e[2], dim(?k,3)]} ?t ?k) (slice ?b {[?e[0], ?e[1], ?e[2], dim(?v,3)]} ?t ?v)) if rank(?q) == 4 and dim(?k,2) == dim(?q,2) and ?b[0] == 0 and ?e[0] == dim(?q,0) and ?t[0] == 1 and ?b[1] == 0 and ?e[1] == dim(?q,1) and ?t[1] == 1 and ?b[3] == 0 and ?e[3] == dim(?v,3) and ?t[3] == 1 and ?e[2] - ?b[2] < dim(?q,2)
slice_layer_norm_cut: (slice ?b ?e ?t (layer_norm ?a ?n ?x ?g ?c)) => (layer_norm ?a ?n (slice ?b ?e ?t ?x) (slice {[?b[2]]} {[?e[2]]} {[?t[2]]} ?g) (slice {[?b[2]]} {[?e[2]]} {[?t[2]]} ?c)) if rank(?x) == 3 and ?a == 2 and ?e[2] - ?b[2] < dim(?x,2)
slice_transpose_unpermuted: (slice ?b ?e ?t (transpose [0,2,1,3] ?x)) => (transpose [0,2,1,3] (slice ?b ?e ?t ?x)) if dim(?x,1) == dim(?x,2)
slice_reshape_cut_merged: (slice ?b ?e ?t (reshape ?s ?x)) => (reshape {[?e[0] - ?b[0], ?e[1] - ?b[1], ?e[2] - ?b[2]]} (slice {[?b[0], ?b[1], 1, ?b[2]]} {[?e[0], ?e[1], 2, ?e[2]]} [1,1,1,1] ?x)) if rank(?x) == 4 and ?s == (dim(?x,0), dim(?x,1), dim(?x,2) * dim(?x,3)) and ?t == (1, 1, 1) and dim(?x,2) > 1 and ?e[2] <= dim(?x,3) and ?b[2] < ?e[2] and ?b[0] < ?e[0] and ?b[1] < ?e[1]
slice_matmul_activation_dropped: (slice ?b ?e ?t (matmul ?a ?x ?w)) => (matmul none (slice ?b {[?e[0], ?e[1], dim(?x,2)]} ?t ?x) ?w) if rank(?x) == 3 and rank(?w) == 2 and ?b[2] == 0 and ?e[2] == dim(?w,1) and ?t[2] == 1 and ?a == 'relu'
"""


def test_the_narrowing_laws_are_built_in() -> None:
    assert not [n for n in LAWS if n not in AXIOMS]


@pytest.mark.parametrize("name", LAWS)
def test_narrowing_law_is_valid_with_proper_slices(name: str) -> None:
    check = validate_axiom(AXIOMS[name], samples=8, seed=5, shape_checks=1)
    assert check.ok, [(d.direction, d.failure) for d in check.directions]
    assert all(d.instances >= 8 for d in check.directions)


@pytest.mark.parametrize("axiom", axioms_from_rules(parse_rules(BAD), "test"),
                         ids=lambda a: a.name)
def test_broken_narrowing_law_is_rejected(axiom: Axiom) -> None:
    # Sampled as the law it breaks is (attention with several keys and query rows).
    law = next((n for n in LAWS if axiom.name.startswith(n)), None)
    spec = AXIOMS[law].spec if law else axiom.spec
    check = validate_axiom(replace(axiom, spec=spec), samples=16, seed=0)
    assert not check.ok
    assert [d for d in check.directions if d.kind in ("differs", "partial")], check
