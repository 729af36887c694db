"""Physical layouts: minor-to-major orders and TPU tiling with its padding.

A layout is XLA's `minor_to_major`: a permutation of the logical dims, fastest-varying
first. The IR's values are logical (NCHW convs, row-major tensors); the layout says how a
value sits in HBM and VMEM. The two minor-most dims are tiled: the minor-most dim pads up
to a multiple of 128 lanes, the second-minor dim to a multiple of 8 rows, every other dim has
a tile of 1. That is XLA's TPU tiling for every element type: f32 `T(8,128)`, bf16
`T(8,128)(2,1)` (pairs of rows packed into 32-bit words), pred and 8-bit `T(8,128)(4,1)`, as
the layouts of the measured TPU v3 programs in the TpuGraphs samples show. (An earlier
version padded 16-bit arrays to 16 rows and 8-bit ones to 32; the calibration data say
otherwise: a bf16[32,5,5,256] copy moves the bytes of 8-row padding.) A rank-1 array is tiled
linearly in chunks of one vreg (1024 elements); a rank-0 array is a single element (scalars
live in SMEM). So a [1, 1] f32 array occupies one whole (8, 128) tile, exactly as much as an
[8, 128] array.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache

from superopt.ir.graph import Value
from superopt.ir.types import DType, TensorType

Layout = tuple[int, ...]

LANES = 128
SUBLANES = 8


@lru_cache(maxsize=1 << 14)
def row_major(rank: int) -> Layout:
    return tuple(range(rank - 1, -1, -1))


def is_layout(layout: object, rank: int) -> bool:
    return (isinstance(layout, tuple) and len(layout) == rank
            and sorted(layout) == list(range(rank)))


def feature_minor(rank: int = 4) -> Layout:
    """NCHW logical dims stored as N, H, W, C (feature dim in lanes, W in sublanes)."""
    if rank != 4:
        return row_major(rank)
    return (1, 3, 2, 0)


def oihw_as_hwio() -> Layout:
    """Conv weights OIHW stored as H, W, I, O: output features in lanes, input in sublanes."""
    return (0, 1, 3, 2)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def sublane_tile(itemsize: int) -> int:
    """Rows the second-minor dim pads to: 8 for every element type (module docstring)."""
    return SUBLANES


@lru_cache(maxsize=1 << 16)
def padded_dims(shape: tuple[int, ...], layout: Layout, itemsize: int) -> tuple[int, ...]:
    """Physical dims, major to minor, each padded up to its tile."""
    rank = len(shape)
    if rank == 0:
        return ()
    if rank == 1:
        return (_round_up(shape[0], sublane_tile(itemsize) * LANES),)
    phys = [shape[d] for d in reversed(layout)]
    phys[-1] = _round_up(phys[-1], LANES)
    phys[-2] = _round_up(phys[-2], sublane_tile(itemsize))
    return tuple(phys)


@lru_cache(maxsize=1 << 16)
def _padded_elems(shape: tuple[int, ...], layout: Layout, itemsize: int) -> int:
    if not shape:
        return 1
    return math.prod(padded_dims(shape, layout, itemsize))


ITEMSIZE = {d: d.itemsize for d in DType}  # DType.itemsize rebuilds a dict on every call


def padded_elems(t: TensorType, layout: Layout) -> int:
    return _padded_elems(t.shape, layout, ITEMSIZE[t.dtype])


def padded_bytes(t: TensorType, layout: Layout) -> int:
    item = ITEMSIZE[t.dtype]
    return _padded_elems(t.shape, layout, item) * item


def vregs(t: TensorType, layout: Layout) -> float:
    """Vector-register passes to touch every padded element once.

    The vector unit computes in 32 bits, so a packed 16-bit array costs as many passes as
    an f32 one: either way the count is padded elements / (8 x 128).
    """
    elems = _padded_elems(t.shape, layout, ITEMSIZE[t.dtype])
    if elems == 0 or 0 in t.shape:
        return 0.0
    return max(1.0, elems / (SUBLANES * LANES))


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a pass allocates many small objects.

    Passes over 10^5-node graphs create millions of tuples and no reference cycles; with
    the collector on, its full-heap scans triggered by those allocations cost more than
    the pass itself.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()




@lru_cache(maxsize=1 << 14)
def permute_layout(in_layout: Layout, perm: tuple[int, ...]) -> Layout:
    """The output layout that makes `transpose(perm)` a bitcast of an input in `in_layout`.

    Output dim i is input dim perm[i], so input dim d is output dim perm.index(d).
    """
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse[d] for d in in_layout)


@lru_cache(maxsize=1 << 14)
def unpermute_layout(out_layout: Layout, perm: tuple[int, ...]) -> Layout:
    """The input layout that makes `transpose(perm)` a bitcast to `out_layout`."""
    return tuple(perm[d] for d in out_layout)


@lru_cache(maxsize=1 << 14)
def project(out_layout: Layout, out_rank: int, in_shape: tuple[int, ...]) -> Layout:
    """Layout of a broadcast operand that keeps the output's dim order.

    Numpy broadcasting aligns shapes on the right: operand dim j is output dim
    j + out_rank - rank.
    """
    off = out_rank - len(in_shape)
    return tuple(d - off for d in out_layout if d >= off)


@lru_cache(maxsize=1 << 14)
def drop_dims(layout: Layout, dropped: tuple[int, ...]) -> Layout:
    """Layout of a reduction output without `dropped` dims (renumbered)."""
    gone = set(dropped)
    return tuple(d - sum(1 for g in gone if g < d) for d in layout if d not in gone)


def is_row_major(layout: Layout) -> bool:
    return layout == row_major(len(layout))


def reshape_is_bitcast(in_shape: tuple[int, ...], in_layout: Layout, out_shape: tuple[int, ...],
                       out_layout: Layout, itemsize: int) -> bool:
    """A reshape moves no bytes when both sides are row-major and their tiles line up.

    Row-major tiled arrays keep the same bytes when the minor dim is unchanged and the
    second-minor dims are equal or both whole multiples of the sublane tile (merging or
    splitting major dims then only renumbers whole tiles). Rank <= 1 uses linear tiling, so
    it is a bitcast only to and from rank <= 1.
    """
    if not (is_row_major(in_layout) and is_row_major(out_layout)):
        return False
    if math.prod(in_shape) == 0:
        return True
    if len(in_shape) <= 1 or len(out_shape) <= 1:
        return len(in_shape) <= 1 and len(out_shape) <= 1
    if in_shape[-1] != out_shape[-1]:
        return False
    st = sublane_tile(itemsize)
    return in_shape[-2] == out_shape[-2] or (in_shape[-2] % st == 0 and out_shape[-2] % st == 0)



class NodeLayouts(Mapping[Value, Layout]):
    """Layouts of every value of one graph, stored per node (a tuple per node, one layout
    per output) and read as a `Mapping[Value, Layout]`. Per-node storage keeps passes over
    graphs of 10^5 nodes cheap; `per_node[n][i]` is the layout of `Value(n, i)`."""

    __slots__ = ("_hash", "per_node")

    def __init__(self, per_node: Sequence[tuple[Layout, ...]]) -> None:
        self.per_node: tuple[tuple[Layout, ...], ...] = tuple(per_node)
        self._hash: int | None = None

    # Hashable by content (the simulator's layout-pass cache keys on it), the hash computed
    # once: hashing 10^5 per-node tuples on every compile would cost milliseconds.
    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.per_node)
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeLayouts):
            return self is other or self.per_node == other.per_node
        return super().__eq__(other)

    def __getitem__(self, v: Value) -> Layout:
        if not isinstance(v, Value) or not 0 <= v.node < len(self.per_node):
            raise KeyError(v)
        outs = self.per_node[v.node]
        if not 0 <= v.index < len(outs):
            raise KeyError(v)
        return outs[v.index]

    def __iter__(self) -> Iterator[Value]:
        for n, outs in enumerate(self.per_node):
            for i in range(len(outs)):
                yield Value(n, i)

    def __len__(self) -> int:
        return sum(len(outs) for outs in self.per_node)

    def __repr__(self) -> str:
        return f"NodeLayouts({len(self.per_node)} nodes)"
