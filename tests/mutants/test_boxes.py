"""Box rules: cut points by hand on known cases, and two properties over the shared op-case
table for every op the box theorem covers: (1) inside every cell of an output grid, each
summation slot reads input coordinates that are an affine function of the position and
stay in one cell of the input's grid (the condition Theorem 1 needs); (2) point
evaluation equals the exact mod-p interpreter at every position."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES, without_activations
from superopt.ir import OPS, Graph, GraphBuilder, get_op, interpret
from superopt.ir.rules import MissingRule
from superopt.mutants.boxes import (
    TABLE,
    BoxError,
    cell_regions,
    empty_grid,
    intervals,
    norm_cuts,
    output_grids,
    reshape_groups,
    unravel,
    window_cuts,
)
from superopt.mutants.points import evaluate_points, full_feeds

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])

SUPPORTED = sorted(op for op in OPS if TABLE.supports(op) and op not in ("input", "weight"))


def test_nonlinear_ops_are_marked_unsupported() -> None:
    for op in ("relu", "softmax", "layer_norm", "batch_norm", "pool2d_max", "embedding",
               "const_one"):
        with pytest.raises(MissingRule, match="unsupported"):
            TABLE.get(op)
    assert set(SUPPORTED) >= {"conv2d", "matmul", "ewadd", "ewmul", "smul", "transpose",
                              "reshape", "concat", "split", "slice", "pad", "pool2d_avg",
                              "reduce_sum"}


def test_fused_activation_is_rejected() -> None:
    b = GraphBuilder()
    x, w = b.input("x", (1, 2, 5, 5)), b.weight("w", (2, 2, 3, 3))
    g = b.build([b.conv2d(x, w, activation="relu")])
    with pytest.raises(BoxError, match="not multi-linear"):
        output_grids(g)


def test_window_cuts_of_a_padded_conv() -> None:
    # 3x3, padding 1, stride 1 on 8: row 0 reads the top padding with tap 0, row 7 the bottom
    # padding with tap 2, rows 1..6 read only real rows -> cells [0,1), [1,7), [7,8).
    assert window_cuts((), 8, 8, 3, 1, 1, 1) == (1, 7)
    # valid conv: no padding is ever read, one cell
    assert window_cuts((), 8, 6, 3, 1, 1, 0) == ()
    # stride 2, padding 1 on 8 -> 4 outputs reading rows 2y-1..2y+1: only y=0 reads padding
    assert window_cuts((), 8, 4, 3, 2, 1, 1) == (1,)
    # an input cut at 4 (e.g. two stacked halves) crosses the taps of outputs 3 and 4
    assert window_cuts((4,), 8, 8, 3, 1, 1, 1) == (1, 3, 4, 5, 7)


def test_reshape_groups_and_cuts() -> None:
    assert reshape_groups((2, 3, 4), (6, 4)) == [([0, 1], [0]), ([2], [1])]
    assert reshape_groups((1, 6), (6,)) == [([0, 1], [0])]
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    # A cut at column 3 of a 4x6 tensor, flattened: every row start and every row's column 3.
    y = b.reshape(b.pad(b.slice(x, starts=(0, 0), ends=(4, 3)), pads=(0, 0, 0, 3)), shape=(24,))
    (grid,) = output_grids(b.build([y]))
    assert grid == ((3, 6, 9, 12, 15, 18, 21),)
    # Splitting a dim with a cut at a multiple of the inner size cuts only the outer dim.
    b = GraphBuilder()
    x = b.input("x", (12,))
    y = b.reshape(b.concat(b.slice(x, starts=(0,), ends=(4,)), b.slice(x, starts=(4,),
                                                                         ends=(12,)), axis=0),
                  shape=(3, 4))
    (grid,) = output_grids(b.build([y]))
    assert grid == ((1,), ())


def _case_node(graph: Graph, op: str) -> int:
    return [n.id for n in graph.nodes if n.op == op][-1]


def _multilinear(graph: Graph) -> bool:
    return all(get_op(n.op).is_multilinear(n.a) for n in graph.nodes
               if n.op not in ("input", "weight"))


@pytest.mark.parametrize("op", SUPPORTED)
def test_cells_have_affine_reads_within_one_input_cell(op: str) -> None:
    @SETTINGS
    @given(OP_CASES[op](), st.data())
    def check(graph: Graph, data: st.DataObject) -> None:
        graph = without_activations(graph)
        assert _multilinear(graph)
        node = graph.node(_case_node(graph, op))
        ins = tuple(graph.type_of(v) for v in node.inputs)
        # Random input grids stand for whatever produced the operands.
        grids = tuple(tuple(tuple(sorted(data.draw(st.sets(st.integers(1, max(d - 1, 1)),
                                                           max_size=2)) - {d}))
                            for d in t.shape) for t in ins)
        rule = TABLE.get(op)
        outs = rule.cuts(node, ins, grids)
        for k, raw in enumerate(outs):
            shape = node.types[k].shape
            assert len(raw) == len(shape)
            grid = tuple(norm_cuts(c, d) for c, d in zip(raw, shape, strict=True))
            if 0 in shape:
                continue
            for region in cell_regions(grid, shape)[:40]:
                _check_cell(rule, node, ins, grids, k, shape, region)

    check()


def _cell_of(coord: np.ndarray, grid: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    return tuple(int(np.searchsorted(np.array(c), x, side="right")) for c, x in zip(grid, coord,
                                                                                     strict=True))


def _check_cell(rule, node, ins, grids, k, shape, region) -> None:  # type: ignore[no-untyped-def]
    pts = list(itertools.product(*(range(lo, hi) for lo, hi in region)))
    flat = np.array([np.ravel_multi_index(p, shape) if shape else 0 for p in pts], dtype=np.int64)
    plan = rule.points(node, ins, k, flat)
    v0 = np.array(pts[0], dtype=np.int64)
    for slot, t in enumerate(ins):
        raw = np.asarray(plan.needs[slot])
        need = np.broadcast_to(raw, (len(pts), *raw.shape[1:])).reshape(len(pts), -1)
        zero = need < 0
        assert (zero == zero[0]).all(), f"{node.op}: zero reads vary inside the cell {region}"
        coords = [np.stack(unravel(np.maximum(need[i], 0), t.shape), axis=-1) if t.shape
                  else np.zeros((need.shape[1], 0), np.int64) for i in range(len(pts))]
        base = coords[0]
        steps = []
        for d in range(len(shape)):
            e = v0.copy()
            e[d] += 1
            j = pts.index(tuple(e)) if tuple(e) in pts else None
            steps.append(coords[j] - base if j is not None else np.zeros_like(base))
        for i, p in enumerate(pts):
            want = base + sum((p[d] - v0[d]) * steps[d] for d in range(len(shape)))
            live = ~zero[0]
            assert (coords[i][live] == want[live]).all(), \
                f"{node.op}: reads are not affine in the position inside {region}"
            cells = {_cell_of(c, grids[slot]) for c in coords[i][live]}
            cells0 = {_cell_of(c, grids[slot]) for c in base[live]}
            assert cells == cells0, f"{node.op}: a slot changes input cell inside {region}"


@pytest.mark.parametrize("op", SUPPORTED)
def test_point_evaluation_equals_the_modp_interpreter(op: str) -> None:
    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        graph = without_activations(graph)
        feeds = full_feeds(graph, draw=1)
        want = interpret(graph, feeds, "modp")
        got = evaluate_points(graph, [np.arange(graph.type_of(v).size) for v in graph.outputs],
                              draw=1)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(np.asarray(w).reshape(-1), g)

    check()


def test_intervals_and_cells() -> None:
    assert intervals((2, 5), 7) == [(0, 2), (2, 5), (5, 7)]
    assert len(cell_regions(((1,), (), (2, 3)), (3, 2, 4))) == 2 * 1 * 3
    assert empty_grid((3, 4)) == ((), ())


@pytest.mark.parametrize("op", [op for op in SUPPORTED if TABLE.get(op).relabel])
def test_a_relabelling_op_outputs_its_inputs_elements_each_once(op: str) -> None:
    # `BoxRule.relabel` (PET counts a run of such ops as one): the output holds exactly
    # the input's elements, rearranged; checked on distinct values from the op cases.
    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        node = next(n for n in graph.nodes if n.op == op)
        (src,) = node.inputs
        t = graph.type_of(src)
        x = np.arange(t.size, dtype=np.float64).reshape(t.shape)
        (y,) = get_op(op).reference((x,), node.a)
        assert sorted(np.asarray(y).reshape(-1).tolist()) == list(range(t.size))

    check()


@pytest.mark.parametrize("op", [op for op in SUPPORTED if TABLE.get(op).kernel])
def test_a_compute_kernel_is_a_contraction_of_two_inputs(op: str) -> None:
    # `BoxRule.kernel`: the corrector's kernels are contractions, linear in each of two
    # inputs (data and weights) and summing over a reduction set: doubling either input
    # doubles the output, and the output is not an element-wise product.
    @SETTINGS
    @given(OP_CASES[op]())
    def check(graph: Graph) -> None:
        graph = without_activations(graph)
        node = next(n for n in graph.nodes if n.op == op)
        assert len(get_op(op).linear_in) >= 2
        rng = np.random.default_rng(0)
        xs = tuple(rng.standard_normal(graph.type_of(v).shape) for v in node.inputs)
        (y,) = get_op(op).reference(xs, node.a)
        for i in get_op(op).linear_in[:2]:
            scaled = tuple(2 * x if k == i else x for k, x in enumerate(xs))
            (y2,) = get_op(op).reference(scaled, node.a)
            np.testing.assert_allclose(y2, 2 * np.asarray(y), rtol=1e-9, atol=1e-9)

    check()


def test_the_tables_kernels_and_relabels_are_pets() -> None:
    # PET's op counting and its correction kernels (Wang et al., OSDI'21): convolutions
    # and matrix products are the kernels; reshapes and transposes relabel.
    kernels = {op for op in SUPPORTED if TABLE.get(op).kernel}
    assert {"conv2d", "matmul"} <= kernels
    assert {"reshape", "transpose"} <= {op for op in SUPPORTED if TABLE.get(op).relabel}
    assert not kernels & {op for op in SUPPORTED if get_op(op).has("elementwise")}
