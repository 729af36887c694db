"""Layouts: (8, 128) tiling of the two minor dims for every element type, padding, bitcasts."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superopt.ir import TensorType, Value
from superopt.ir.types import DType
from superopt.tpu_sim.layout import (
    NodeLayouts,
    drop_dims,
    feature_minor,
    padded_bytes,
    padded_dims,
    permute_layout,
    project,
    reshape_is_bitcast,
    row_major,
    unpermute_layout,
    vregs,
)


def f32(*shape: int) -> TensorType:
    return TensorType(shape, DType.F32)


def bf16(*shape: int) -> TensorType:
    return TensorType(shape, DType.BF16)


@pytest.mark.parametrize("t,want", [
    (f32(1, 1), 8 * 128 * 4),  # one (8, 128) tile
    (f32(8, 128), 8 * 128 * 4),
    (f32(8, 129), 8 * 256 * 4),  # lanes pad to 256
    (f32(9, 128), 16 * 128 * 4),  # sublanes pad to 16
    (f32(3, 5, 7), 3 * 8 * 128 * 4),  # major dims are not padded
    # bf16 is tiled T(8,128)(2,1) as in the measured TPU v3 programs: 8 rows, 2 KiB a tile.
    (bf16(1, 1), 8 * 128 * 2),
    (bf16(17, 128), 24 * 128 * 2),
    (f32(768), 1024 * 4),  # rank 1: whole vregs of 1024 elements
    (bf16(768), 1024 * 2),
    (f32(), 4),
])
def test_row_major_padding(t: TensorType, want: int) -> None:
    assert padded_bytes(t, row_major(t.rank)) == want


def test_feature_minor_layout_pads_deep_small_maps_far_less() -> None:
    t = f32(1, 256, 7, 7)
    # N, H, W, C: W=7 -> 8 sublanes, C=256 lanes; row-major: H=7 -> 8, W=7 -> 128 lanes.
    assert padded_bytes(t, feature_minor()) == 7 * 8 * 256 * 4
    assert padded_bytes(t, row_major(4)) == 256 * 8 * 128 * 4
    assert padded_dims(t.shape, feature_minor(), 4) == (1, 7, 8, 256)


def test_vregs_count_padded_tiles() -> None:
    assert vregs(f32(1, 1), (1, 0)) == 1
    assert vregs(f32(16, 256), (1, 0)) == 4
    assert vregs(f32(0, 5), (1, 0)) == 0


perms = st.integers(1, 4).flatmap(lambda r: st.permutations(list(range(r))).map(tuple))


@settings(max_examples=60, deadline=None)
@given(perm=perms, data=st.data())
def test_transpose_with_permuted_layout_keeps_the_physical_array(perm: tuple[int, ...],
                                                                 data: st.DataObject) -> None:
    rank = len(perm)
    shape = tuple(data.draw(st.lists(st.integers(1, 20), min_size=rank, max_size=rank)))
    in_layout = tuple(data.draw(st.permutations(list(range(rank)))))
    out_shape = tuple(shape[p] for p in perm)
    out_layout = permute_layout(in_layout, perm)
    assert padded_dims(out_shape, out_layout, 4) == padded_dims(shape, in_layout, 4)
    assert unpermute_layout(out_layout, perm) == in_layout


def test_project_and_drop_dims() -> None:
    # A (C, 1, 1) operand broadcast against an NCHW output stored NHWC keeps C minor.
    assert project((1, 3, 2, 0), 4, (5, 1, 1)) == (0, 2, 1)
    assert project((1, 0), 2, (7,)) == (0,)
    # Reducing H and W of NHWC-stored NCHW leaves (N, C) with C minor.
    assert drop_dims((1, 3, 2, 0), (2, 3)) == (1, 0)


@pytest.mark.parametrize("src,dst,want", [
    ((1, 128, 768), (128, 768), True),
    ((4, 8, 128), (32, 128), True),  # whole sublane tiles merge
    ((2, 3, 128), (6, 128), False),  # 3 rows pad to 8: tiles do not line up
    ((128, 768), (1, 128, 12, 64), False),  # the minor dim changes
    ((768,), (768,), True),
    ((768,), (1, 768), False),  # rank 1 tiles linearly
])
def test_reshape_bitcasts(src: tuple[int, ...], dst: tuple[int, ...], want: bool) -> None:
    assert reshape_is_bitcast(src, row_major(len(src)), dst, row_major(len(dst)), 4) is want


def test_reshape_of_a_non_row_major_array_is_never_a_bitcast() -> None:
    assert not reshape_is_bitcast((4, 8, 128), (1, 2, 0), (32, 128), (1, 0), 4)


def test_node_layouts_is_a_mapping_of_values() -> None:
    lay = NodeLayouts([((1, 0),), ((0,), (0,))])
    assert lay[Value(0)] == (1, 0) and lay[Value(1, 1)] == (0,)
    assert len(lay) == 3
    assert list(lay) == [Value(0), Value(1, 0), Value(1, 1)]
    for bad in (Value(2), Value(0, 1), Value(-1)):
        with pytest.raises(KeyError):
            lay[bad]
    assert lay.get(Value(5)) is None
    assert dict(lay) == {Value(0): (1, 0), Value(1, 0): (0,), Value(1, 1): (0,)}


def test_every_permutation_of_a_rank_3_array_holds_its_elements() -> None:
    t = f32(3, 9, 130)
    for layout in itertools.permutations(range(3)):
        assert padded_bytes(t, layout) >= t.nbytes


def test_cached_signatures_tell_kernels_with_other_outputs_apart() -> None:
    """`LaidOut.signature` caches per kernel: a kernel with the same members but other
    outputs (another fusion decision elsewhere) must not get the first one's signature."""
    import dataclasses

    from superopt import zoo
    from superopt.tpu_sim import Simulator
    from superopt.tpu_sim.kernels import form_kernels
    from superopt.tpu_sim.signature import kernel_signature

    sim = Simulator("v4")
    lo = sim.lay_out(zoo.build("squeezenet", batch=1))
    part = form_kernels(lo.graph, lo.laid_layouts, sim.fusion_default(lo), lo.bitcasts,
                        lo.consumers)
    k = next(k for k in part.kernels if len(k.nodes) > 1)
    # The same members, one more of their values read by a kernel elsewhere.
    more = dataclasses.replace(k, outputs=(*k.outputs, Value(k.nodes[0], 0)))
    for kern in (k, more):  # the second call finds the first one's members cached
        got = lo.signature(kern, part.resolved, sim.kernels)
        assert got == kernel_signature(lo.graph, lo.laid_layouts, kern, part.resolved,
                                       lo.stored)
    assert lo.signature(k, part.resolved, sim.kernels) != lo.signature(
        more, part.resolved, sim.kernels)
