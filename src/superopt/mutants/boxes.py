"""Regions ("boxes") of multi-linear programs: the per-op rules of the mutants subsystem.

A multi-linear program computes each output element as a sum over a summation set of
products of input elements whose indices depend on the output position. PET's Theorem 1
needs boxes: sets of output positions that share one summation set and whose index maps
are affine in the position. We describe the boxes of a tensor as a *grid*: for every
dimension a sorted tuple of interior cut points; a box is one cell of the grid. A grid
is sound when, inside every cell, each input element read by a summation slot lies in
one cell of that input's grid (or always in zero padding) and its coordinates are an
affine function of the output position. Over-cutting is always sound, only slower.

Each op brings one `BoxRule` in the table `TABLE` ("boxes"):

- `cuts`: the output grids from the input grids (conv padding, strides, dilations,
  stacking, slicing, reshapes create cut points that propagate through every op);
- `points`: for a list of output positions, which input elements each one reads and how
  to combine them (exact point evaluation mod p, so a box test costs evaluations per
  tested position rather than per output position);
- `restrict`: a program computing the op on one output region from its inputs restricted
  to the regions that feed it (the corrector's correction kernels).

Non-linear ops, constants and data-dependent indexing are marked unsupported: the box
theorem holds only for multi-linear programs over free inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from superopt.ir import kernels
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.kernels import P, modp_inv
from superopt.ir.opdef import NONLINEAR, SOURCE, get_op, ops_with
from superopt.ir.ops.pool import avg_divisor, pool_geometry
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType

Cuts = tuple[int, ...]  # sorted interior cut points of one dimension: 0 < c < size
Grid = tuple[Cuts, ...]  # one entry per dimension
Span = tuple[int, int]  # [lo, hi)
Region = tuple[Span, ...]  # one span per dimension


class BoxError(IRError):
    """A program the box theorem does not cover (a non-linear op, a constant, ...)."""


@dataclass(frozen=True)
class PointPlan:
    """What a set of output positions reads: `needs[i]` holds flat indices into input i
    (any shape, -1 for an implicit zero), and `combine` maps the gathered input values
    (same shapes as `needs`) to the output values at the positions, as residues mod p."""

    needs: tuple[np.ndarray, ...]
    combine: Callable[[tuple[np.ndarray, ...]], np.ndarray]


Sub = Callable[[int, Region], Value]  # builds input i restricted to a region
CutRule = Callable[[Node, tuple[TensorType, ...], tuple[Grid, ...]], tuple[Grid, ...]]
PointRule = Callable[[Node, tuple[TensorType, ...], int, np.ndarray], PointPlan]
RestrictRule = Callable[[GraphBuilder, Node, tuple[TensorType, ...], int, Region, Sub],
                        Value | None]


@dataclass(frozen=True)
class BoxRule:
    cuts: CutRule
    points: PointRule | None = None  # None only for sources (the evaluator draws them)
    restrict: RestrictRule | None = None  # None: compute in full, then slice
    # A compute kernel in PET's sense (a contraction: convolution, matrix product): the
    # corrector's correction kernels and a mutant's cost count these.
    kernel: bool = False
    # Only relabels the elements of its input (a reshape, a transpose): PET counts a run
    # of such ops as one op.
    relabel: bool = False


TABLE: RuleTable[BoxRule] = RuleTable("boxes")


def is_kernel(op: str) -> bool:
    """Whether `op` is a compute kernel (`BoxRule.kernel`); False for an op the table
    does not support."""
    return TABLE.supports(op) and TABLE.get(op).kernel


def relabels(op: str) -> bool:
    """Whether `op` only relabels its input's elements (`BoxRule.relabel`)."""
    return TABLE.supports(op) and TABLE.get(op).relabel


# ---- grids and regions --------------------------------------------------------------

def norm_cuts(cuts: object, size: int) -> Cuts:
    return tuple(sorted({int(c) for c in cuts if 0 < c < size}))  # type: ignore[attr-defined]


def empty_grid(shape: Sequence[int]) -> Grid:
    return tuple(() for _ in shape)


def merge_grids(shape: Sequence[int], *grids: Grid) -> Grid:
    """The common refinement (intersection of boxes) of grids over one shape."""
    return tuple(norm_cuts(set().union(*(g[d] for g in grids)), size)
                 for d, size in enumerate(shape))


def intervals(cuts: Cuts, size: int) -> list[Span]:
    bounds = [0, *cuts, size]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def full_region(shape: Sequence[int]) -> Region:
    return tuple((0, int(d)) for d in shape)


def region_shape(region: Region) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in region)


def region_size(region: Region) -> int:
    return math.prod(region_shape(region))


def num_cells(grid: Grid) -> int:
    return math.prod(len(c) + 1 for c in grid)


def cell_regions(grid: Grid, shape: Sequence[int]) -> list[Region]:
    """Every box of the grid, in row-major cell order."""
    import itertools

    return [tuple(r) for r in itertools.product(*(intervals(c, s) for c, s in zip(grid, shape,
                                                                                   strict=True)))]


def slice_region(b: GraphBuilder, v: Value, region: Region) -> Value:
    shape = b.shape(v)
    if region == full_region(shape):
        return v
    return b.slice(v, starts=tuple(lo for lo, _ in region), ends=tuple(hi for _, hi in region))


# ---- propagation ----------------------------------------------------------------------

def rule_for(node: Node) -> BoxRule:
    rule = TABLE.get(node.op)
    if not get_op(node.op).has("source") and not get_op(node.op).is_multilinear(node.a):
        raise BoxError(f"{node.op} %{node.id} has a fused activation "
                       f"{node.attr('activation')!r}: not multi-linear")
    return rule


def propagate(graph: Graph) -> dict[Value, Grid]:
    """The grid of every value of a multi-linear graph (sources have no cuts)."""
    grids: dict[Value, Grid] = {}
    for n in graph.nodes:
        rule = rule_for(n)
        ins = tuple(graph.type_of(v) for v in n.inputs)
        outs = rule.cuts(n, ins, tuple(grids[v] for v in n.inputs))
        for i, g in enumerate(outs):
            grids[Value(n.id, i)] = tuple(norm_cuts(c, s) for c, s in zip(g, n.types[i].shape,
                                                                          strict=True))
    return grids


def output_grids(graph: Graph) -> tuple[Grid, ...]:
    grids = propagate(graph)
    return tuple(grids[v] for v in graph.outputs)


# ---- index helpers --------------------------------------------------------------------

def unravel(flat: np.ndarray, shape: Sequence[int]) -> tuple[np.ndarray, ...]:
    if len(shape) == 0:
        return ()
    return tuple(np.asarray(c, dtype=np.int64) for c in np.unravel_index(flat, tuple(shape)))


def ravel(coords: Sequence[np.ndarray], shape: Sequence[int]) -> np.ndarray:
    """Flat indices of coordinates (broadcast together); -1 where any is out of range."""
    if len(shape) == 0:
        return np.zeros((), dtype=np.int64)
    arrs = np.broadcast_arrays(*[np.asarray(c, dtype=np.int64) for c in coords])
    flat = np.zeros(arrs[0].shape, dtype=np.int64)
    ok = np.ones(arrs[0].shape, dtype=bool)
    for c, d in zip(arrs, shape, strict=True):
        ok &= (c >= 0) & (c < d)
        flat = flat * d + c
    return np.where(ok, flat, -1)


def _sum_mod(x: np.ndarray, axis: int = -1) -> np.ndarray:
    # Residues are < 2**31, so sums of up to 2**32 terms fit in int64.
    return np.sum(x, axis=axis, dtype=np.int64) % P


def _same(plan_needs: tuple[np.ndarray, ...]) -> PointPlan:
    return PointPlan(plan_needs, lambda vs: vs[0] % P)


# ---- sources ----------------------------------------------------------------------------

def _source_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    return (empty_grid(n.type.shape),)


TABLE.register("input", BoxRule(_source_cuts))
TABLE.register("weight", BoxRule(_source_cuts))


# ---- sliding windows (conv2d, pool2d_avg) ---------------------------------------------

def window_cuts(in_cuts: Cuts, size: int, out: int, kernel: int, stride: int, dilation: int,
                pad_lo: int) -> Cuts:
    """Output positions where some tap of the window crosses an input cut or a border.

    Tap t of output y reads y*stride + t*dilation - pad_lo; it is on the far side of a
    boundary b from output ceil((b + pad_lo - t*dilation) / stride) on.
    """
    out_cuts: set[int] = set()
    for bnd in {0, size, *in_cuts}:
        for t in range(kernel):
            y = -(-(bnd + pad_lo - t * dilation) // stride)
            if 0 < y < out:
                out_cuts.add(y)
    return tuple(sorted(out_cuts))


def window_span(y0: int, y1: int, stride: int, dilation: int, kernel: int, pad_lo: int,
                size: int) -> tuple[int, int, int, int] | None:
    """Input rows [lo, hi) read by outputs [y0, y1), and the zero rows (before, after)."""
    r0 = y0 * stride - pad_lo
    r1 = (y1 - 1) * stride - pad_lo + (kernel - 1) * dilation + 1
    lo, hi = max(0, r0), min(size, r1)
    if hi <= lo:
        return None
    return lo, hi, lo - r0, r1 - hi


def _conv_geometry(n: Node, x: TensorType, w: TensorType) -> kernels.Pads:
    return kernels.resolve_pads(n.attr("padding"), x.shape[2:], w.shape[2:], n.attr("stride"),
                                n.attr("dilation"))


def _conv_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    x, w = ins
    gx, gw = grids
    pads = _conv_geometry(n, x, w)
    (sh, sw), (dh, dw), g = n.attr("stride"), n.attr("dilation"), n.attr("groups")
    _, o, oh, ow = n.type.shape
    og = o // g
    # Output channels of different groups read different input channels: cut at groups.
    chan = set(gw[0]) | ({og * i for i in range(1, g)} if g > 1 else set())
    return ((gx[0], tuple(chan),
             window_cuts(gx[2], x.shape[2], oh, w.shape[2], sh, dh, pads[0]),
             window_cuts(gx[3], x.shape[3], ow, w.shape[3], sw, dw, pads[2])),)


def _conv_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    x, w = ins
    _, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pads = _conv_geometry(n, x, w)
    (sh, sw), (dh, dw), g = n.attr("stride"), n.attr("dilation"), n.attr("groups")
    bn, oc, oy, ox = unravel(flat, n.type.shape)
    m = len(flat)
    # Index arithmetic on the small factors, broadcast once at the end.
    plane = ((bn * c + (oc // (o // g)) * cg)[:, None] + np.arange(cg)[None, :]) * (h * wd)
    rows = (oy * sh - pads[0])[:, None] + (np.arange(kh) * dh)[None, :]  # (m, kh)
    cols = (ox * sw - pads[2])[:, None] + (np.arange(kw) * dw)[None, :]  # (m, kw)
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < wd))[:, None, :]
    spot = np.where(inside, rows[:, :, None] * wd + cols[:, None, :], -1)  # (m, kh, kw)
    xi = plane[:, :, None, None] + spot[:, None, :, :]
    xi = np.where(spot[:, None, :, :] >= 0, xi, -1).reshape(m, -1)
    wi = (oc * (cg * kh * kw))[:, None] + np.arange(cg * kh * kw)[None, :]
    return PointPlan((xi, wi), lambda vs: _sum_mod(vs[0] * vs[1] % P))


def _conv_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int, region: Region,
                   sub: Sub) -> Value | None:
    x, w = ins
    (n0, n1), (o0, o1), (y0, y1), (x0, x1) = region
    o, cg, kh, kw = w.shape
    pads = _conv_geometry(n, x, w)
    (sh, sw), (dh, dw), g = n.attr("stride"), n.attr("dilation"), n.attr("groups")
    rows = window_span(y0, y1, sh, dh, kh, pads[0], x.shape[2])
    cols = window_span(x0, x1, sw, dw, kw, pads[2], x.shape[3])
    if rows is None or cols is None:
        return None
    og = o // g
    g0, g1 = o0 // og, -(-o1 // og)  # whole groups covering the channel range
    xv = sub(0, ((n0, n1), (g0 * cg, g1 * cg), rows[:2], cols[:2]))
    wv = sub(1, ((g0 * og, g1 * og), (0, cg), (0, kh), (0, kw)))
    y = b.conv2d(xv, wv, stride=(sh, sw), dilation=(dh, dw), groups=g1 - g0,
                 padding=(rows[2], rows[3], cols[2], cols[3]))
    assert isinstance(y, Value)
    return slice_region(b, y, ((0, n1 - n0), (o0 - g0 * og, o1 - g0 * og), (0, y1 - y0),
                               (0, x1 - x0)))


TABLE.register("conv2d", BoxRule(_conv_cuts, _conv_points, _conv_restrict, kernel=True))


def _pool_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    (x,), (gx,) = ins, grids
    pads, oh, ow = pool_geometry(x.shape, n.a)
    (kh, kw), (sh, sw) = n.attr("kernel"), n.attr("stride")
    return ((gx[0], gx[1], window_cuts(gx[2], x.shape[2], oh, kh, sh, 1, pads[0]),
             window_cuts(gx[3], x.shape[3], ow, kw, sw, 1, pads[2])),)


def _pool_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    (x,) = ins
    pads, _, _ = pool_geometry(x.shape, n.a)
    (kh, kw), (sh, sw) = n.attr("kernel"), n.attr("stride")
    bn, ch, oy, ox = unravel(flat, n.type.shape)
    rows = (oy * sh - pads[0])[:, None, None] + np.arange(kh)[None, :, None]
    cols = (ox * sw - pads[2])[:, None, None] + np.arange(kw)[None, None, :]
    xi = ravel((bn[:, None, None], ch[:, None, None], rows, cols), x.shape).reshape(len(flat), -1)
    table = avg_divisor(x.shape, n.a)
    values = np.unique(table)
    inverses = np.array([modp_inv(int(d)) for d in values], dtype=np.int64)
    inv = inverses[np.searchsorted(values, table[oy, ox])]
    return PointPlan((xi,), lambda vs: _sum_mod(vs[0]) * inv % P)


def _pool_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int, region: Region,
                   sub: Sub) -> Value | None:
    (x,) = ins
    pads, _, _ = pool_geometry(x.shape, n.a)
    (kh, kw), (sh, sw) = n.attr("kernel"), n.attr("stride")
    (n0, n1), (c0, c1), (y0, y1), (x0, x1) = region
    rows = window_span(y0, y1, sh, 1, kh, pads[0], x.shape[2])
    cols = window_span(x0, x1, sw, 1, kw, pads[2], x.shape[3])
    if rows is None or cols is None:
        return None
    xv = sub(0, ((n0, n1), (c0, c1), rows[:2], cols[:2]))
    attrs = n.a
    attrs["padding"] = (rows[2], rows[3], cols[2], cols[3])
    return b.add("pool2d_avg", (xv,), attrs)[0]


TABLE.register("pool2d_avg", BoxRule(_pool_cuts, _pool_points, _pool_restrict))


# ---- matmul --------------------------------------------------------------------------

def _aligned(t: TensorType, out_rank: int, d: int) -> int | None:
    """The dim of `t` aligned (numpy broadcasting) with output dim d, or None."""
    i = d - (out_rank - t.rank)
    return i if i >= 0 else None


def _broadcast_cuts(out: tuple[int, ...], ins: Sequence[TensorType], grids: Sequence[Grid],
                    dims: Sequence[int]) -> list[set[int]]:
    res: list[set[int]] = [set() for _ in out]
    for d in dims:
        for t, g in zip(ins, grids, strict=True):
            i = _aligned(t, len(out), d)
            if i is not None and t.shape[i] == out[d]:
                res[d] |= set(g[i])
    return res


def _matmul_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    a, bt = ins
    ga, gb = grids
    out = n.type.shape
    batch = [(a, ga), (bt, gb)]
    cuts = [set[int]() for _ in out]
    for t, g in batch:
        for d in range(len(out) - 2):
            i = _aligned(t, len(out), d)
            if i is not None and i < t.rank - 2 and t.shape[i] == out[d]:
                cuts[d] |= set(g[i])
    cuts[-2] |= set(ga[-2])
    cuts[-1] |= set(gb[-1])
    return (tuple(tuple(c) for c in cuts),)


def _batch_coords(coords: tuple[np.ndarray, ...], t: TensorType, out_rank: int
                  ) -> list[np.ndarray]:
    """Coordinates in t's batch dims for output batch coordinates (broadcast dims -> 0)."""
    res = []
    for i in range(t.rank - 2):
        d = i + out_rank - t.rank
        res.append(coords[d] if t.shape[i] != 1 else np.zeros_like(coords[d]))
    return res


def _matmul_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    a, bt = ins
    out = n.type.shape
    coords = unravel(flat, out)
    m, col = coords[-2], coords[-1]
    kk = np.arange(a.shape[-1])[None, :]
    ai = ravel([*(c[:, None] for c in _batch_coords(coords, a, len(out))), m[:, None], kk],
               a.shape)
    bi = ravel([*(c[:, None] for c in _batch_coords(coords, bt, len(out))), kk, col[:, None]],
               bt.shape)
    return PointPlan((ai, bi), lambda vs: _sum_mod(vs[0] * vs[1] % P))


def _broadcast_region(t: TensorType, out_rank: int, region: Region, skip: int = 0) -> list[Span]:
    """t's spans for an output region: broadcast dims take (0, 1); the last `skip` dims are
    left to the caller."""
    res = []
    for i in range(t.rank - skip):
        d = i + out_rank - t.rank
        res.append((0, 1) if t.shape[i] == 1 else region[d])
    return res


def _matmul_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                     region: Region, sub: Sub) -> Value | None:
    a, bt = ins
    r = len(n.type.shape)
    av = sub(0, (*_broadcast_region(a, r, region, 2), region[-2], (0, a.shape[-1])))
    bv = sub(1, (*_broadcast_region(bt, r, region, 2), (0, bt.shape[-2]), region[-1]))
    y = b.matmul(av, bv)
    assert isinstance(y, Value)
    return y


TABLE.register("matmul", BoxRule(_matmul_cuts, _matmul_points, _matmul_restrict,
                                  kernel=True))


# ---- element-wise --------------------------------------------------------------------

def _ew_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    out = n.type.shape
    return (tuple(tuple(c) for c in _broadcast_cuts(out, ins, grids, range(len(out)))),)


def _ew_index(t: TensorType, coords: tuple[np.ndarray, ...], out_rank: int) -> np.ndarray:
    cs = []
    for i in range(t.rank):
        d = i + out_rank - t.rank
        cs.append(coords[d] if t.shape[i] != 1 else np.zeros_like(coords[d]))
    if not cs:
        return np.zeros(len(coords[0]) if coords else 1, dtype=np.int64)
    return ravel(cs, t.shape)


def _ew_points(combine: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> PointRule:
    def rule(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
        out = n.type.shape
        coords = unravel(flat, out)
        if not out:
            needs = tuple(np.zeros(len(flat), dtype=np.int64) for _ in ins)
        else:
            needs = tuple(_ew_index(t, coords, len(out)) for t in ins)
        return PointPlan(needs, lambda vs: combine(vs[0], vs[1]))
    return rule


def _ew_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int, region: Region,
                 sub: Sub) -> Value | None:
    r = len(n.type.shape)
    xs = tuple(sub(i, tuple(_broadcast_region(t, r, region))) for i, t in enumerate(ins))
    return b.add(n.op, xs, n.a)[0]


TABLE.register("ewadd", BoxRule(_ew_cuts, _ew_points(lambda a, c: (a + c) % P), _ew_restrict))
TABLE.register("ewmul", BoxRule(_ew_cuts, _ew_points(lambda a, c: a * c % P), _ew_restrict))


def _smul_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    return PointPlan((flat, np.zeros_like(flat)), lambda vs: vs[0] * vs[1] % P)


def _smul_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                   region: Region, sub: Sub) -> Value | None:
    return b.add("smul", (sub(0, region), sub(1, ())), {})[0]


TABLE.register("smul", BoxRule(lambda n, ins, gs: (gs[0],), _smul_points, _smul_restrict))

# Subtraction is a sum with a negated term; negation is linear: both keep their operands'
# cells (under numpy broadcasting) and apply element by element.
TABLE.register("sub", BoxRule(_ew_cuts, _ew_points(lambda a, c: (a - c) % P), _ew_restrict))


def _neg_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    return PointPlan((flat,), lambda vs: (-vs[0]) % P)


TABLE.register("neg", BoxRule(lambda n, ins, gs: (gs[0],), _neg_points,
                              lambda b, n, ins, k, region, sub: b.add(
                                  "neg", (sub(0, region),), n.a)[0]))


# ---- movement ------------------------------------------------------------------------

def _identity_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    return _same((flat,))


def _identity_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                       region: Region, sub: Sub) -> Value | None:
    return b.add(n.op, (sub(0, region),), n.a)[0]


for _name in ("copy", "layout"):
    TABLE.register(_name, BoxRule(lambda n, ins, gs: (gs[0],), _identity_points,
                                  _identity_restrict))


def _transpose_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                    ) -> tuple[Grid, ...]:
    return (tuple(grids[0][p] for p in n.attr("perm")),)


def _transpose_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    perm = n.attr("perm")
    coords = unravel(flat, n.type.shape)
    src: list[np.ndarray] = [np.empty(0)] * len(perm)
    for i, p in enumerate(perm):
        src[p] = coords[i]
    return _same((ravel(src, ins[0].shape) if perm else flat,))


def _transpose_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                        region: Region, sub: Sub) -> Value | None:
    perm = n.attr("perm")
    src: list[Span] = [(0, 0)] * len(perm)
    for i, p in enumerate(perm):
        src[p] = region[i]
    return b.transpose(sub(0, tuple(src)), perm=perm)  # type: ignore[return-value]


TABLE.register("transpose", BoxRule(_transpose_cuts, _transpose_points, _transpose_restrict,
                                     relabel=True))


def _expand_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    out = n.type.shape
    return _same((_ew_index(ins[0], unravel(flat, out), len(out)),))


def _expand_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                     region: Region, sub: Sub) -> Value | None:
    xv = sub(0, tuple(_broadcast_region(ins[0], len(n.type.shape), region)))
    return b.add("expand", (xv,), {"shape": region_shape(region)})[0]


# A broadcast: each output element is the input element its position maps to (broadcast
# dims read index 0), so the input's cuts carry over on the dims it does not broadcast.
TABLE.register("expand", BoxRule(_ew_cuts, _expand_points, _expand_restrict))


def reshape_groups(a: Sequence[int], c: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair runs of input dims with runs of output dims of equal product (row-major)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(c):
        gi: list[int] = []
        gj: list[int] = []
        pi = pj = 1
        if i < len(a):
            gi.append(i)
            pi *= a[i]
            i += 1
        if j < len(c):
            gj.append(j)
            pj *= c[j]
            j += 1
        while pi != pj:
            if (pi < pj and i < len(a)) or j >= len(c):
                gi.append(i)
                pi *= a[i]
                i += 1
            else:
                gj.append(j)
                pj *= c[j]
                j += 1
        # Trailing size-1 dims join the group they follow.
        groups.append((gi, gj))
    return groups


def _flat_cuts(sizes: list[int], cuts: list[Cuts]) -> set[int]:
    """Cuts of the row-major flattening of dims `sizes` with per-dim `cuts`.

    Within a run of the last non-trivial dim the other coordinates are constant and the
    flat index is affine, so every run boundary is a cut, plus that dim's own cuts.
    """
    big = [d for d, s in enumerate(sizes) if s > 1]
    if not big:
        return set()
    last = big[-1]
    stride = math.prod(sizes[last + 1:])  # 1 unless trailing size-1 dims
    total = math.prod(sizes)
    if len(big) == 1:
        return {c * stride for c in cuts[last]}
    run = sizes[last] * stride
    res = {m * run for m in range(1, total // run)}
    for m in range(total // run):
        res |= {m * run + c * stride for c in cuts[last]}
    return res


def _unflatten_cuts(flat_cuts: set[int], sizes: list[int]) -> list[set[int]]:
    """Per-dim cuts such that no cell of the grid over `sizes` straddles a flat cut."""
    res: list[set[int]] = [set() for _ in sizes]
    strides = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
    for s in flat_cuts:
        digits = [(s // strides[d]) % sizes[d] for d in range(len(sizes))]
        nz = [d for d, q in enumerate(digits) if q]
        if not nz:
            continue
        r = nz[-1]
        # {flat < s} is "digits before r lexicographically below": cut above and below the
        # digit in dims before r, and below the digit in dim r.
        for d in range(r):
            res[d] |= {digits[d], digits[d] + 1}
        res[r].add(digits[r])
    return res


def _reshape_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                  ) -> tuple[Grid, ...]:
    a, out = ins[0].shape, n.type.shape
    res: list[set[int]] = [set() for _ in out]
    if 0 in a:
        return (tuple(() for _ in out),)
    for gi, gj in reshape_groups(a, out):
        fc = _flat_cuts([a[i] for i in gi], [grids[0][i] for i in gi])
        for d, cs in zip(gj, _unflatten_cuts(fc, [out[j] for j in gj]), strict=True):
            res[d] |= cs
    return (tuple(tuple(c) for c in res),)


def _flat_range(spans: list[Span], sizes: list[int]) -> tuple[int, int] | None:
    """The row-major flat range covered by a box over `sizes`, if it is contiguous."""
    strides = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
    wide = [d for d, (lo, hi) in enumerate(spans) if hi - lo > 1]
    f = wide[0] if wide else len(sizes) - 1
    if any(spans[d] != (0, sizes[d]) for d in range(f + 1, len(sizes))):
        return None
    start = sum(lo * s for (lo, _), s in zip(spans, strides, strict=True))
    if not sizes:
        return (0, 1)
    return start, start + (spans[f][1] - spans[f][0]) * strides[f]


def _flat_box(f0: int, f1: int, sizes: list[int]) -> list[Span] | None:
    """A flat range [f0, f1) as a box over `sizes`, if it is one."""
    for e in range(len(sizes)):
        stride = math.prod(sizes[e + 1:])
        block = stride * sizes[e]
        if f0 % stride == 0 and f1 % stride == 0 and f0 // block == (f1 - 1) // block:
            spans = [((f0 // math.prod(sizes[d + 1:])) % sizes[d],) * 2 for d in range(e)]
            lo = (f0 // stride) % sizes[e]
            return ([(s, s + 1) for s, _ in spans] + [(lo, lo + (f1 - f0) // stride)]
                    + [(0, sizes[d]) for d in range(e + 1, len(sizes))])
    return None


def _reshape_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                      region: Region, sub: Sub) -> Value | None:
    a, out = ins[0].shape, n.type.shape
    src: list[Span] = [(0, s) for s in a]
    for gi, gj in reshape_groups(a, out):
        spans = [region[j] for j in gj]
        if all(sp == (0, out[j]) for sp, j in zip(spans, gj, strict=True)):
            continue
        rng = _flat_range(spans, [out[j] for j in gj])
        box = _flat_box(*rng, [a[i] for i in gi]) if rng is not None else None
        if box is None:
            return None  # not a box of the input: the corrector computes it in full
        for i, sp in zip(gi, box, strict=True):
            src[i] = sp
    y = b.reshape(sub(0, tuple(src)), shape=region_shape(region))
    return y  # type: ignore[return-value]


TABLE.register("reshape", BoxRule(_reshape_cuts, _identity_points, _reshape_restrict,
                                   relabel=True))


def _concat_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                 ) -> tuple[Grid, ...]:
    axis = n.attr("axis")
    out = n.type.shape
    res: list[set[int]] = [set() for _ in out]
    off = 0
    for t, g in zip(ins, grids, strict=True):
        for d in range(len(out)):
            if d == axis:
                res[d] |= {off + c for c in g[d]} | {off, off + t.shape[d]}
            else:
                res[d] |= set(g[d])
        off += t.shape[axis]
    return (tuple(tuple(c) for c in res),)


def _concat_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    axis = n.attr("axis")
    coords = unravel(flat, n.type.shape)
    needs = []
    off = 0
    for t in ins:
        cs = list(coords)
        cs[axis] = coords[axis] - off  # out of range (-> -1) for the other inputs
        needs.append(ravel(cs, t.shape))
        off += t.shape[axis]
    # Exactly one input owns each position; the others read an implicit zero.
    return PointPlan(tuple(needs), lambda vs: _sum_mod(np.stack(vs), axis=0))


def _concat_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                     region: Region, sub: Sub) -> Value | None:
    axis = n.attr("axis")
    lo, hi = region[axis]
    parts = []
    off = 0
    for i, t in enumerate(ins):
        s0, s1 = max(lo, off), min(hi, off + t.shape[axis])
        if s0 < s1:
            r = list(region)
            r[axis] = (s0 - off, s1 - off)
            parts.append(sub(i, tuple(r)))
        off += t.shape[axis]
    return parts[0] if len(parts) == 1 else b.concat(*parts, axis=axis)  # type: ignore[return-value]


TABLE.register("concat", BoxRule(_concat_cuts, _concat_points, _concat_restrict))


def _split_offsets(n: Node) -> list[int]:
    return [0, *np.cumsum(n.attr("sizes")).tolist()]


def _split_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                ) -> tuple[Grid, ...]:
    axis = n.attr("axis")
    offs = _split_offsets(n)
    outs = []
    for j, size in enumerate(n.attr("sizes")):
        g = list(grids[0])
        g[axis] = tuple(c - offs[j] for c in g[axis] if 0 < c - offs[j] < size)
        outs.append(tuple(g))
    return tuple(outs)


def _split_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    axis = n.attr("axis")
    coords = list(unravel(flat, n.types[k].shape))
    coords[axis] = coords[axis] + _split_offsets(n)[k]
    return _same((ravel(coords, ins[0].shape),))


def _split_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                    region: Region, sub: Sub) -> Value | None:
    axis = n.attr("axis")
    off = _split_offsets(n)[k]
    r = list(region)
    r[axis] = (region[axis][0] + off, region[axis][1] + off)
    return sub(0, tuple(r))


TABLE.register("split", BoxRule(_split_cuts, _split_points, _split_restrict))


def _slice_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                ) -> tuple[Grid, ...]:
    starts, steps = n.attr("starts"), n.attr("steps")
    res = []
    for d, size in enumerate(n.type.shape):
        res.append(tuple(-(-(c - starts[d]) // steps[d]) for c in grids[0][d]
                         if 0 < -(-(c - starts[d]) // steps[d]) < size))
    return (tuple(res),)


def _slice_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    starts, steps = n.attr("starts"), n.attr("steps")
    coords = unravel(flat, n.type.shape)
    src = [starts[d] + c * steps[d] for d, c in enumerate(coords)]
    return _same((ravel(src, ins[0].shape) if src else flat,))


def _slice_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                    region: Region, sub: Sub) -> Value | None:
    starts, steps = n.attr("starts"), n.attr("steps")
    src = tuple((starts[d] + lo * steps[d], starts[d] + (hi - 1) * steps[d] + 1)
                for d, (lo, hi) in enumerate(region))
    v = sub(0, src)
    if all(s == 1 for s in steps):
        return v
    shape = region_shape(src)
    return b.slice(v, starts=(0,) * len(shape), ends=shape, steps=steps)  # type: ignore[return-value]


TABLE.register("slice", BoxRule(_slice_cuts, _slice_points, _slice_restrict))


def _pads_of(n: Node, x: TensorType) -> tuple[list[int], list[int]]:
    if n.op == "enlarge":
        dh = (n.attr("kh") - x.shape[2]) // 2
        dw = (n.attr("kw") - x.shape[3]) // 2
        return [0, 0, dh, dw], [0, 0, dh, dw]
    r = x.rank
    pads = n.attr("pads")
    return list(pads[:r]), list(pads[r:])


def _pad_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]) -> tuple[Grid, ...]:
    (x,) = ins
    lo, _ = _pads_of(n, x)
    res = []
    for d, size in enumerate(x.shape):
        res.append(tuple({lo[d] + c for c in grids[0][d]} | {lo[d], lo[d] + size}))
    return (tuple(res),)


def _pad_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    (x,) = ins
    lo, _ = _pads_of(n, x)
    coords = unravel(flat, n.type.shape)
    return _same((ravel([c - lo[d] for d, c in enumerate(coords)], x.shape) if coords
                  else flat,))


def _pad_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int, region: Region,
                  sub: Sub) -> Value | None:
    (x,) = ins
    lo, _ = _pads_of(n, x)
    src: list[Span] = []
    before: list[int] = []
    after: list[int] = []
    for d, (r0, r1) in enumerate(region):
        s0, s1 = max(r0 - lo[d], 0), min(r1 - lo[d], x.shape[d])
        if s1 <= s0:
            return None  # the region lies in the zero padding along this dim
        src.append((s0, s1))
        before.append(s0 + lo[d] - r0)
        after.append(r1 - (s1 + lo[d]))
    v = sub(0, tuple(src))
    if not any(before) and not any(after):
        return v
    return b.pad(v, pads=(*before, *after))  # type: ignore[return-value]


TABLE.register("pad", BoxRule(_pad_cuts, _pad_points, _pad_restrict))
TABLE.register("enlarge", BoxRule(_pad_cuts, _pad_points, _pad_restrict))


# ---- reductions ------------------------------------------------------------------------

def _reduce_cuts(n: Node, ins: tuple[TensorType, ...], grids: tuple[Grid, ...]
                 ) -> tuple[Grid, ...]:
    axes, keep = set(n.attr("axes")), n.attr("keepdims")
    res = []
    for d in range(ins[0].rank):
        if d in axes:
            if keep:
                res.append(())
        else:
            res.append(grids[0][d])
    return (tuple(res),)


def _reduce_points(n: Node, ins: tuple[TensorType, ...], k: int, flat: np.ndarray) -> PointPlan:
    (x,) = ins
    axes, keep = n.attr("axes"), n.attr("keepdims")
    kept = [d for d in range(x.rank) if d not in axes]
    coords = unravel(flat, n.type.shape)
    if keep:
        coords = tuple(coords[d] for d in kept)
    red_shape = tuple(x.shape[d] for d in axes)
    red = np.indices(red_shape).reshape(len(axes), -1) if axes else np.zeros((0, 1), np.int64)
    src: list[np.ndarray] = [np.empty(0)] * x.rank
    for i, d in enumerate(kept):
        src[d] = coords[i][:, None]
    for i, d in enumerate(axes):
        src[d] = red[i][None, :]
    xi = ravel(src, x.shape) if x.rank else np.zeros((len(flat), 1), dtype=np.int64)
    xi = np.broadcast_to(xi, (len(flat), xi.shape[-1]))
    count = math.prod(red_shape)
    scale = modp_inv(count) if n.op == "reduce_mean" else 1
    return PointPlan((xi,), lambda vs: _sum_mod(vs[0]) * scale % P)


def _reduce_restrict(b: GraphBuilder, n: Node, ins: tuple[TensorType, ...], k: int,
                     region: Region, sub: Sub) -> Value | None:
    (x,) = ins
    axes, keep = n.attr("axes"), n.attr("keepdims")
    src: list[Span] = []
    i = 0
    for d in range(x.rank):
        if d in axes:
            src.append((0, x.shape[d]))
            i += keep
        else:
            src.append(region[i])
            i += 1
    return b.add(n.op, (sub(0, tuple(src)),), n.a)[0]


TABLE.register("reduce_sum", BoxRule(_reduce_cuts, _reduce_points, _reduce_restrict))
TABLE.register("reduce_mean", BoxRule(_reduce_cuts, _reduce_points, _reduce_restrict))


# ---- what the box theorem does not cover --------------------------------------------------

# Every op with the NONLINEAR trait (relu, sigmoid, softmax, the norms, exp, log, ...,
# comparisons, where, cast, reduce_max, attention, and div: 1/b is no polynomial in a
# free b -- mod p it is b^(p-2), a degree no random test bounds) is where PET splits a
# program; a new such op needs no row here.
for _name in ops_with(NONLINEAR):
    TABLE.unsupported(_name, "non-linear op (NONLINEAR trait): PET splits programs here")
TABLE.unsupported("linear", "affine, not multi-linear (its bias): PET splits programs here")
TABLE.unsupported("embedding", "data-dependent indexing: not multi-linear in its ids")
TABLE.unsupported("gather", "data-dependent indexing: linear in x only for fixed indices, and "
                            "its indices are an integer source or a constant, neither a free "
                            "input PET can draw")
# Sources made from attributes (TASO's constants, iota, triangular masks): fixed tensors
# whose values vary with the position, not the free inputs the box theorem assumes.
for _name in ops_with(SOURCE):
    if not get_op(_name).named_source:
        TABLE.unsupported(_name, "constant tensor: the box theorem assumes free inputs")
