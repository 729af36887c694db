"""The corrector: correction regions, restricted programs, fusion, exactness of corrected
mutants, costs and the export as PET rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES, without_activations
from superopt.corrector import RegionBuilder, correct, correction_regions, cost, fold_weights
from superopt.corrector.export import graph_patterns, to_rule, variable_names
from superopt.corrector.regions import copy_sources
from superopt.ir import Graph, GraphBuilder, TensorType, interpret
from superopt.mutants.boxes import TABLE
from superopt.mutants.boxtest import OutputBoxes, box_test, exhaustive_equal
from superopt.mutants.families import CONV_FAMILIES, _replace_one
from superopt.mutants.points import full_feeds
from superopt.substitutions.library import load_library, save_library
from superopt.substitutions.rule import Rule, differs
from superopt.substitutions.text import format_rule, parse_rule


def conv(shape: tuple[int, ...], out: int, k: int, pad: int, dilation: int = 1,
         stride: tuple[int, int] = (1, 1), groups: int = 1, bias: bool = False) -> Graph:
    b = GraphBuilder("original")
    x = b.input("x", shape)
    w = b.weight("w", (out, shape[1] // groups, k, k))
    y = b.conv2d(x, w, padding=(pad,) * 4, dilation=(dilation, dilation), stride=stride,
                 groups=groups)
    if bias:
        y = b.ewadd(y, b.weight("b", (1, out, 1, 1)))
    return b.build([y])


def test_correction_regions_cover_a_cross_with_four_strips() -> None:
    # Cells: rows [0,1) [1,2) [2,12) [12,13) [13,14), same for columns; rows and columns 1
    # and 12 wrong -> two full-width row strips and two full-height column strips.
    cuts = (1, 2, 12, 13)
    line = np.array([True, False, True, False, True])
    equal = (line[:, None] & line[None, :])[None, None]
    out = OutputBoxes((1, 1, 14, 14), ((), (), cuts, cuts), equal)
    regions = correction_regions(out)
    assert sorted(regions) == sorted([
        ((0, 1), (0, 1), (0, 14), (1, 2)), ((0, 1), (0, 1), (0, 14), (12, 13)),
        ((0, 1), (0, 1), (1, 2), (0, 14)), ((0, 1), (0, 1), (12, 13), (0, 14))])
    covered = np.zeros((1, 1, 14, 14), dtype=bool)
    for r in regions:
        covered[tuple(slice(lo, hi) for lo, hi in r)] = True
    np.testing.assert_array_equal(covered, out.wrong_mask())


SUPPORTED = sorted(op for op in TABLE.ops() if TABLE.supports(op)
                   and op not in ("input", "weight"))


@pytest.mark.parametrize("op", SUPPORTED)
def test_restricted_program_equals_a_slice_of_the_full_output(op: str) -> None:
    @settings(max_examples=10, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])
    @given(OP_CASES[op](), st.data())
    def check(g: Graph, data: st.DataObject) -> None:
        g = without_activations(g)
        shape = g.type_of(g.outputs[0]).shape
        assume(0 not in shape)
        region = []
        for d in shape:
            lo = data.draw(st.integers(0, d - 1))
            region.append((lo, data.draw(st.integers(lo + 1, d))))
        b = GraphBuilder("restricted")
        rb = RegionBuilder(b, g, copy_sources(b, g))
        v = rb.region(g.outputs[0], tuple(region))
        restricted = b.build([v])
        feeds = full_feeds(g, 0)
        want = np.asarray(interpret(g, feeds, "modp")[0])[tuple(slice(lo, hi)
                                                                for lo, hi in region)]
        got = np.asarray(interpret(restricted, {k: feeds[k] for k in feeds
                                                if any(n.op in ("input", "weight")
                                                       and n.attr("name") == k
                                                       for n in restricted.nodes)},
                                   "modp")[0])
        np.testing.assert_array_equal(got, want)

    check()


CASES = [
    ("plain", dict(shape=(2, 4, 8, 8), out=3, k=3, pad=1)),
    ("strided", dict(shape=(1, 4, 8, 8), out=2, k=3, pad=1, stride=(2, 1))),
    ("grouped", dict(shape=(2, 4, 8, 8), out=4, k=3, pad=1, groups=2)),
    ("dilated", dict(shape=(1, 2, 12, 12), out=2, k=3, pad=2, dilation=2)),
    ("biased", dict(shape=(2, 2, 6, 10), out=2, k=3, pad=1, bias=True)),
    ("tile", dict(shape=(1, 2, 22, 22), out=2, k=3, pad=1)),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_every_family_mutant_is_corrected_exactly(name: str, kw: dict) -> None:
    g = conv(**kw)
    nid = next(n.id for n in g.nodes if n.op == "conv2d")
    applied = 0
    for fam_name, fam in CONV_FAMILIES.items():
        m = _replace_one(g, nid, fam)
        if m is None:
            continue
        applied += 1
        fixed = correct(g, m)
        (eq,) = exhaustive_equal(g, fixed.corrected, draws=2)
        assert eq.all(), f"{fam_name}: corrected program differs"
        if fixed.report.fully_equivalent:
            assert not fixed.corrections
        else:
            assert fixed.corrections and fixed.fallbacks == 0
    assert applied >= 3


def test_corrections_of_the_same_conv_are_fused() -> None:
    g = conv((1, 3, 14, 14), 2, 3, 2, dilation=2)
    m = _replace_one(g, 2, CONV_FAMILIES["dilated_to_regular"])
    assert m is not None
    fixed = correct(g, m)
    # Two row strips share one fused conv, two column strips another.
    assert len(fixed.corrections) == 4 and fixed.fused_kernels == 2
    convs = [n for n in fixed.corrected.nodes if n.op == "conv2d"]
    assert len(convs) == 3  # main + two fused correction kernels
    unfused = correct(g, m, fuse=False)
    assert len([n for n in unfused.corrected.nodes if n.op == "conv2d"]) == 5
    assert exhaustive_equal(g, unfused.corrected)[0].all()


def test_fusion_looks_through_the_bias_add() -> None:
    g = conv((1, 4, 12, 12), 4, 3, 2, dilation=2, bias=True)
    m = _replace_one(g, next(n.id for n in g.nodes if n.op == "conv2d"),
                     CONV_FAMILIES["dilated_to_regular"])
    assert m is not None
    fixed = correct(g, m)
    # Each correction ends in the bias add; the convs under the adds still fuse in pairs.
    assert len(fixed.corrections) == 4 and fixed.fused_kernels == 2
    assert all(c.fused for c in fixed.corrections)
    assert len([n for n in fixed.corrected.nodes if n.op == "conv2d"]) == 3
    assert exhaustive_equal(g, fixed.corrected, draws=2)[0].all()


def test_main_kernel_joins_the_fusion_when_shapes_agree() -> None:
    # Width 4 stacked in halves: the main conv runs on (2, C, H, 2) padded to (.., H+2, 4);
    # the seam correction reads columns 0..3 padded to the same (.., H+2, 4).
    g = conv((1, 2, 5, 4), 2, 3, 1)
    m = _replace_one(g, 2, CONV_FAMILIES["stack_width"])
    assert m is not None
    fixed = correct(g, m)
    assert fixed.main_fused and fixed.fused_kernels == 1
    assert len([n for n in fixed.corrected.nodes if n.op == "conv2d"]) == 1
    assert exhaustive_equal(g, fixed.corrected, draws=3)[0].all()


def test_costs_and_weight_folding() -> None:
    g = conv((1, 4, 8, 8), 4, 3, 1)
    m = _replace_one(g, 2, CONV_FAMILIES["channel_to_height"])
    assert m is not None
    folded = fold_weights(m)
    assert not any(n.op in ("reshape", "transpose") and all(
        folded.node(v.node).op == "weight" for v in n.inputs) for n in folded.nodes)
    np.testing.assert_allclose(interpret(folded)[0], interpret(m)[0], rtol=1e-5, atol=1e-5)
    # Same multiply-accumulates: 1*4*8*8 outputs x 4*3*3 taps, twice for FLOPs.
    assert cost(g).flops == cost(folded).flops == 2 * 256 * 36
    s = _replace_one(g, 2, CONV_FAMILIES["stack_width"])
    assert s is not None
    fixed = correct(g, s)
    assert cost(fold_weights(fixed.corrected)).flops > cost(fold_weights(s)).flops


def test_corrected_mutant_as_a_pet_rule_round_trips(tmp_path) -> None:  # type: ignore[no-untyped-def]
    g = conv((1, 3, 14, 14), 2, 3, 2, dilation=2)
    m = _replace_one(g, 2, CONV_FAMILIES["dilated_to_regular"])
    assert m is not None
    rule = to_rule(correct(g, m), "pet_dilated")
    assert rule.kind == "pet"
    assert rule.condition == "shape(?x) == (1, 3, 14, 14) and shape(?w) == (2, 3, 3, 3)"
    assert rule.provenance["box_test"]["wrong_boxes"] > 0
    again = parse_rule(format_rule(rule))
    assert format_rule(again) == format_rule(rule)
    path = save_library([rule], tmp_path / "pet.json")
    loaded = load_library(path).rules[0]
    assert loaded.kind == "pet" and loaded.provenance["shapes"]["x"] == [1, 3, 14, 14]
    types = {"x": TensorType((1, 3, 14, 14)), "w": TensorType((2, 3, 3, 3))}
    assert loaded.holds_condition(types, {})
    assert not loaded.holds_condition({"x": TensorType((1, 3, 16, 16)),
                                       "w": TensorType((2, 3, 3, 3))}, {})
    src, tgt = loaded.instantiate(types)
    assert all(e.all() for e in exhaustive_equal(src, tgt, draws=2))
    # The rule model's own numeric check (what the verifier runs first) agrees.
    assert differs(loaded, types, trials=2) is None
    # ... and catches the mutant without its corrections.
    names = variable_names(g)
    uncorrected = Rule("uncorrected", loaded.source, graph_patterns(m, names))
    assert differs(uncorrected, types) is not None


def test_variable_names_are_identifiers() -> None:
    b = GraphBuilder()
    x = b.input("layer1.0.x", (2, 2))
    y = b.input("layer1_0_x", (2, 2))
    g = b.build([b.ewadd(x, y)])
    names = variable_names(g)
    assert names == {"layer1.0.x": "layer1_0_x", "layer1_0_x": "layer1_0_x_1"}


def test_multi_output_merge_is_corrected_per_output() -> None:
    b = GraphBuilder("two")
    x = b.input("x", (1, 4, 8, 8))
    y1 = b.conv2d(x, b.weight("w1", (2, 4, 3, 3)), padding=(1, 1, 1, 1))
    y2 = b.conv2d(x, b.weight("w2", (3, 4, 1, 1)))
    g = b.build([y1, y2])
    from superopt.mutants.families import family_mutants

    merged = [m for m in family_mutants(g) if m.family == "merge_shared_conv"]
    assert len(merged) == 1
    report = box_test(g, merged[0].graph)
    assert report.fully_equivalent  # 1x1 enlarged to 3x3 with padding 1 is exact
    stacked = [m for m in family_mutants(g) if m.family == "stack_width"]
    for m in stacked:
        fixed = correct(g, m.graph)
        assert all(e.all() for e in exhaustive_equal(g, fixed.corrected))
