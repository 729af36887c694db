"""PET's golden cases (issue 7, DESIGN.md section 7): which output positions each published
transformation gets wrong, checked three ways: the box test, exhaustive comparison of every
position mod p, and the expected rows/columns worked out by hand from the conv geometry.
In every case the corrected program equals the original exactly."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.corrector import correct
from superopt.ir import Graph, GraphBuilder, interpret
from superopt.mutants.boxes import intervals
from superopt.mutants.boxtest import box_test, exhaustive_equal
from superopt.mutants.families import CONV_FAMILIES, _replace_one


def conv(shape: tuple[int, int, int, int], out: int, k: int, pad: int, dilation: int = 1,
         stride: tuple[int, int] = (1, 1)) -> Graph:
    b = GraphBuilder("original")
    x = b.input("x", shape)
    w = b.weight("w", (out, shape[1], k, k))
    y = b.conv2d(x, w, padding=(pad,) * 4, dilation=(dilation, dilation), stride=stride)
    return b.build([y])


def mutant(g: Graph, family: str) -> Graph:
    nid = next(n.id for n in g.nodes if n.op == "conv2d")
    m = _replace_one(g, nid, CONV_FAMILIES[family])
    assert m is not None, f"{family} does not apply"
    return m


def mutant_conv(m: Graph) -> tuple[tuple[int, ...], dict]:
    n = next(n for n in m.nodes if n.op == "conv2d")
    return m.type_of(n.inputs[0]).shape, n.a


def wrong_lines(wrong: np.ndarray) -> tuple[set[int], set[int]]:
    """Rows and columns wrong at every position (per image and channel)."""
    plane = wrong.reshape(-1, *wrong.shape[2:]).all(axis=0)
    return set(np.nonzero(plane.all(axis=1))[0].tolist()), \
        set(np.nonzero(plane.all(axis=0))[0].tolist())


def check_three_ways(g: Graph, m: Graph, expected: np.ndarray) -> None:
    """Box test == exhaustive == the hand-derived mask; corrected program exact."""
    report = box_test(g, m)
    (ex,) = exhaustive_equal(g, m)
    np.testing.assert_array_equal(~ex, expected)
    np.testing.assert_array_equal(report.outputs[0].wrong_mask(), expected)
    assert report.equal_fraction == pytest.approx(1 - expected.mean())
    fixed = correct(g, m, report)
    assert fixed.check.fully_equivalent
    assert all(e.all() for e in exhaustive_equal(g, fixed.corrected, draws=3))
    np.testing.assert_allclose(interpret(fixed.corrected, seed=5)[0], interpret(g, seed=5)[0],
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis,family", [(3, "stack_width"), (2, "stack_height")])
def test_stacking_halves_into_the_batch_is_wrong_next_to_the_seam(axis: int, family: str
                                                                  ) -> None:
    shape = (2, 3, 6, 8) if axis == 3 else (2, 3, 8, 6)
    g = conv(shape, 4, 3, 1)
    m = mutant(g, family)
    xs, _ = mutant_conv(m)
    assert xs[0] == 4 and xs[axis] == shape[axis] // 2  # halves stacked into the batch
    # Each half-image's conv reads zero padding instead of the other half across the seam:
    # the last column of the left half (3) and the first of the right half (4).
    expected = np.zeros((2, 4, *shape[2:]), dtype=bool)
    idx = [slice(None)] * 4
    idx[axis] = slice(3, 5)
    expected[tuple(idx)] = True
    check_three_ways(g, m, expected)
    rows, cols = wrong_lines(expected)
    assert (cols if axis == 3 else rows) == {3, 4}


def test_dilated_conv_as_regular_conv_over_deinterleaved_rows_and_columns() -> None:
    g = conv((1, 3, 14, 14), 2, 3, 2, dilation=2)
    m = mutant(g, "dilated_to_regular")
    xs, a = mutant_conv(m)
    assert xs == (1, 3, 14, 14) and a["dilation"] == (1, 1) and a["padding"] == (1, 1, 1, 1)
    # Output row y = 2i + r sits at i + 7r of the de-interleaved image. A regular 3x3 conv
    # there reads rows i-1..i+1 of the stacked image: for y = 12 (i=6, r=0) the row below
    # is the first odd row instead of padding; for y = 1 (i=0, r=1) the row above is the
    # last even row instead of padding. Same for columns.
    line = np.zeros(14, dtype=bool)
    line[[1, 12]] = True
    plane = line[:, None] | line[None, :]
    assert plane.sum() == 52
    check_three_ways(g, m, np.broadcast_to(plane, (1, 2, 14, 14)).copy())


def test_dilated_conv_with_subimages_in_the_batch_is_exact() -> None:
    g = conv((1, 3, 14, 14), 2, 3, 2, dilation=2)
    m = mutant(g, "dilated_to_batch")
    xs, _ = mutant_conv(m)
    assert xs == (4, 3, 7, 7)
    check_three_ways(g, m, np.zeros((1, 2, 14, 14), dtype=bool))


def test_channel_to_height_with_a_stride_2_conv_is_fully_equivalent() -> None:
    g = conv((2, 4, 6, 5), 3, 3, 1)
    m = mutant(g, "channel_to_height")
    xs, a = mutant_conv(m)
    assert xs == (2, 2, 12, 5) and a["stride"] == (2, 1) and a["padding"] == (2, 2, 1, 1)
    report = box_test(g, m)
    assert report.fully_equivalent and report.equal_fraction == 1.0
    check_three_ways(g, m, np.zeros((2, 3, 6, 5), dtype=bool))


def test_tiling_a_38x38_image_into_4x4_tiles_is_wrong_near_the_seams() -> None:
    g = conv((1, 2, 38, 38), 2, 5, 2)
    m = mutant(g, "tile4")
    xs, a = mutant_conv(m)
    assert xs == (16, 2, 10, 10) and a["padding"] == (2, 2, 2, 2)
    # Tiles of the zero-padded 40x40 image meet at 10, 20, 30; a 5x5 conv reads two rows
    # on each side, so rows (and columns) 8-11, 18-21 and 28-31 see tile padding.
    line = np.zeros(38, dtype=bool)
    for seam in (10, 20, 30):
        line[seam - 2:seam + 2] = True
    plane = line[:, None] | line[None, :]
    check_three_ways(g, m, np.broadcast_to(plane, (1, 2, 38, 38)).copy())
    rows, cols = wrong_lines(plane[None, None])
    assert rows == cols == {8, 9, 10, 11, 18, 19, 20, 21, 28, 29, 30, 31}


def test_box_test_cost_is_boxes_times_m_plus_1_times_draws() -> None:
    g = conv((2, 8, 64, 64), 8, 3, 1)
    m = mutant(g, "stack_width")
    report = box_test(g, m, draws=3)
    out = report.outputs[0]
    expected_positions = 0
    spans = [intervals(c, s) for c, s in zip(out.grid, out.shape, strict=True)]
    import itertools

    for cell in itertools.product(*spans):
        expected_positions += 1 + sum(hi - lo > 1 for lo, hi in cell)
    assert report.tested_positions == expected_positions
    assert report.evaluations == 2 * 3 * expected_positions
    assert report.boxes <= 4 * 6  # N cut at the stacking, W cut at borders and the seam
    assert report.evaluations < report.positions / 100  # 65,536 output positions
    assert report.error_bound < 1e-12
