"""XLA-style tile bounds: a kernel's iteration space and what one block of it moves and computes.

XLA's TPU backend (and the TpuGraphs tile-size data its autotuner produced) describes a kernel's
tile as *bounds* over the physical dims of the kernel's main array -- the MXU op's result, or
for a vector kernel the largest array it touches (for a reduction, its input) -- listed major to
minor. The two minor-most dims count in units of the (8, 128) hardware tile (8 rows, 128
lanes), every other dim in elements; a rank-1 array counts in 128-lane units. A convolution
also has *kernel bounds* over the physical dims of its weights, in the same units: those over
the contraction dims (input features and window taps) cut the contraction into grid steps.
For example f32[32,26,26,192]{3,0,2,1} is physically [26,26,32,192], tiled [26,26,4,2];
bounds [2,26,4,2] cut it into 13 blocks of 2 x 26 x 32 x 192 elements.

`analyse` derives, once per kernel signature, the *space* (the main array's physical dims,
then the contraction dims of an MXU kernel) and, for every array the kernel reads from or
writes to HBM, which space dim each of its physical dims follows. Dims are related through the
kernel's ops by a union-find over (value, dim) pairs: element-wise ops relate equal dims under
numpy broadcasting (a broadcast dim follows no space dim, so its block is whole), transposes
permute, reshapes relate dims that map one to one, reductions drop their axes, a conv relates
batch, output feature and input feature, and an input's spatial dim is a *window* over an
output dim and a tap dim (its block is (out - 1) x stride + (taps - 1) x dilation + 1 rows).
Each op's part of this -- its relations, whether it reads its operands whole, an MXU op's
contraction dims -- is its rule in the "tpu_bounds" table (`bounds_rules`).

`bounds_cost` then costs a tile as the simulator's kernel model does for its own tiles:

- Grid: the blocks of every space dim. A vector kernel loops over its dims in physical
  order. An MXU kernel is weight-stationary: its output-column blocks are the outermost loop
  (a weight block stays in VMEM while the row blocks stream past it), then the other output
  dims in physical order, then the contraction dims (innermost, accumulating in VMEM).
- HBM traffic: an array's block is fetched again whenever the block index of a space dim it
  follows changes between consecutive steps, so a block that depends on an inner loop is
  re-read for every iteration of the outer loops around it; a block that depends on no dim
  that is split is fetched once. Each transfer moves whole (8, 128) tiles of the array's
  layout and pays the DMA cost of each contiguous run (tiles are contiguous; a block is one
  run from its innermost partial dim outwards).
- MXU: per step, rows (the output dims other than the columns) x columns x contraction of the
  block, with the weight-load floor, the MXU split flag and the fill and drain per step.
- Partial blocks at the end of a dim: DMA moves what they hold (up to two distinct extents
  per dim, so every combination is enumerated exactly), but the MXU computes them as whole
  blocks (the emitter pads the last block and masks the result; the measured 3x3 conv pays
  for two taps in a block of one when its tap bound is 2).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

from superopt.ir.types import TensorType
from superopt.tpu_sim.bounds_rules import BOUNDS_RULES, DimRelations, Member, bounds_rule
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.layout import LANES, SUBLANES, Layout, padded_bytes, sublane_tile


class Bounds(NamedTuple):
    """A tile given as XLA bounds: `output` over the main array's physical dims, `kernel`
    over a convolution's weight dims (empty for other kernels); units as the module says."""

    output: tuple[int, ...]
    kernel: tuple[int, ...] = ()

    def short(self) -> str:
        out = "x".join(str(b) for b in self.output)
        return out + ("/" + "x".join(str(b) for b in self.kernel) if self.kernel else "")


@dataclass(frozen=True, slots=True)
class SpaceDim:
    size: int  # elements
    unit: int  # elements per unit of a bound (128 lanes, 8 rows or 1)
    reduction: bool


@dataclass(frozen=True, slots=True)
class ArrayDim:
    """One physical dim of an HBM array: the space dim it follows (None: whole in every
    block), or a conv window over an output dim and a tap dim."""

    size: int
    space: int | None = None
    window: tuple[int, int, int, int] | None = None  # (out dim, tap dim, stride, dilation)
    scale: float = 1.0  # array size / space size along a followed dim (slice, pad, concat)


@dataclass(frozen=True, slots=True)
class ArrayUse:
    dims: tuple[ArrayDim, ...]  # physical order, major to minor
    itemsize: int
    output: bool
    full_bytes: float

    def depends(self) -> set[int]:
        out: set[int] = set()
        for d in self.dims:
            if d.space is not None:
                out.add(d.space)
            if d.window is not None:
                out.update(d.window[:2])
        return out


@dataclass(frozen=True, slots=True)
class Space:
    dims: tuple[SpaceDim, ...]  # main array's physical dims, then contraction dims
    n_output: int  # the first n_output dims are the output bounds' dims
    kernel_dims: tuple[int | None, ...]  # weight physical dim -> contraction space dim
    arrays: tuple[ArrayUse, ...]
    rows: tuple[int, ...] = ()  # MXU kernels: space dims that make the MXU rows
    cols: int | None = None  # ... the MXU columns
    taps: tuple[int, ...] = ()  # ... contraction dims that are window taps
    features: tuple[int, ...] = ()  # ... contraction dims that are features (padded to 128)
    deep: bool = False  # contract tap by tap (features per tap padded to 128)
    main_elems: int = 1  # padded elements of the main array (for intermediates' share)
    order: tuple[int, ...] = ()  # loop order, outermost first (default: dims in order)
    work: float = 1.0  # MXU passes per block (`bounds_rules.MxuDims.work`)

    @property
    def loops(self) -> tuple[int, ...]:
        return self.order or tuple(range(len(self.dims)))


# ---- analysis -----------------------------------------------------------------------------

def _phys(layout: Layout) -> list[int]:
    """Logical dims in physical order, major to minor."""
    return list(reversed(layout))


def analyse(key: tuple[Any, ...], hero: int | None) -> Space:
    """The space of a kernel signature's key (see the module docstring). `hero` is the
    member whose matrix product runs on the MXU, or None for a vector kernel."""
    entries, ext_desc, outs = key
    rel = DimRelations()
    uf = rel.uf
    ext_view: dict[int, tuple[TensorType, Layout]] = {}

    def vkey(ref: tuple[str, int, int]) -> tuple[Any, ...]:
        return ("x", ref[1]) if ref[0] == "x" else ("m", ref[1], ref[2])

    for i, (op, attrs, types, _, refs) in enumerate(entries):
        for (ref, t, lay) in refs:
            if ref[0] == "x":
                ext_view.setdefault(ref[1], (t, lay))
        member = Member(i, dict(attrs), types, [vkey(r) for r, _, _ in refs],
                        [t.shape for _, t, _ in refs])
        bounds_rule(op).relate(member, rel)

    # The main array and the space's output dims.
    if hero is not None:
        _, _, htypes, hlays, hrefs = entries[hero]
        main_t, main_l, main_key = htypes[0], hlays[0], ("m", hero, 0)
    else:
        main_t, main_l, main_key = _main_array(entries, outs)
    phys = _phys(main_l)
    rank = main_t.rank
    dims: list[SpaceDim] = []
    cls_space: dict[Any, int] = {}
    for p, d in enumerate(phys):
        unit = LANES if p == rank - 1 else SUBLANES if p == rank - 2 else 1
        dims.append(SpaceDim(main_t.shape[d], unit, False))
        cls_space.setdefault(uf.find((main_key, d)), p)
    n_output = len(dims)

    # Contraction dims of an MXU kernel, in the weight's physical order.
    kernel_dims: list[int | None] = []
    rows: list[int] = []
    cols: int | None = None
    taps: list[int] = []
    features: list[int] = []
    deep = False
    work = 1.0
    if hero is not None:
        hop, hattrs, htypes, hlays, hrefs = entries[hero]
        (_, wt, wl) = hrefs[1]
        wkey = vkey(hrefs[1][0])
        wphys = _phys(wl)
        mxu_fn = bounds_rule(hop).mxu
        if mxu_fn is None:
            raise ValueError(f"kernel hero {hop!r} has no MXU contraction in the "
                             f"{BOUNDS_RULES.name} table")
        dims_of = mxu_fn(dict(hattrs), htypes, hlays, wt)
        contraction, col_dim, deep, work = (dims_of.contraction, dims_of.col_dim,
                                            dims_of.deep, dims_of.work)
        for p, d in enumerate(wphys):
            if d not in contraction:
                kernel_dims.append(None)
                continue
            unit = LANES if p == wt.rank - 1 else SUBLANES if p == wt.rank - 2 else 1
            c = uf.find((wkey, d))
            s = cls_space.get(c)
            if s is None:
                s = cls_space[c] = len(dims)
                dims.append(SpaceDim(wt.shape[d], unit, True))
            kernel_dims.append(s)
            (taps if contraction[d] == "tap" else features).append(s)
        cols = cls_space.get(uf.find((main_key, col_dim)))
        rows = [cls_space[uf.find((main_key, d))] for d in range(rank)
                if d != col_dim and uf.find((main_key, d)) in cls_space]

    win: dict[Any, tuple[int, int, int, int]] = {}
    for xd, od, td, stride, dil in rel.windows:
        so = cls_space.get(uf.find(od))
        st = cls_space.get(uf.find(td)) if td is not None else None
        if so is not None:
            win[uf.find(xd)] = (so, st if st is not None else -1, stride, dil)

    def use(t: TensorType, lay: Layout, k: Any, output: bool) -> ArrayUse:
        adims = []
        for d in _phys(lay):
            c = uf.find((k, d))
            s = cls_space.get(c)
            size = t.shape[d]
            if s is not None:
                adims.append(ArrayDim(size, s, None, size / max(1, dims[s].size)))
            elif c in win:
                adims.append(ArrayDim(size, None, win[c]))
            else:
                adims.append(ArrayDim(size))
        return ArrayUse(tuple(adims), t.dtype.itemsize, output, float(padded_bytes(t, lay)))

    arrays = []
    for j, (t, lay) in enumerate(ext_desc):
        vt, vl = ext_view.get(j, (t, lay))
        arrays.append(use(vt, vl, ("x", j), False))
    for m, k in outs:
        _, _, types, lays, _ = entries[m]
        arrays.append(use(types[k], lays[k], ("m", m, k), True))
    main_elems = padded_bytes(main_t, main_l) // max(1, main_t.dtype.itemsize)
    order: tuple[int, ...] = ()
    if cols is not None:
        order = (cols, *(d for d in range(len(dims)) if d != cols))
    return Space(tuple(dims), n_output, tuple(kernel_dims), tuple(arrays), tuple(rows), cols,
                 tuple(taps), tuple(features), deep, max(1, main_elems), order, work)


def _main_array(entries: tuple, outs: Sequence[tuple[int, int]]
                ) -> tuple[TensorType, Layout, tuple[Any, ...]]:
    """A vector kernel's main array: its (largest) output -- XLA tiles the iteration space of
    what it writes, so a layout-changing copy is tiled in its *output's* physical order --
    unless the kernel reads or computes a larger array (a reduction's input, a slice's
    source), which is then the main array (`_largest`)."""
    best: tuple[int, TensorType, Layout, tuple[Any, ...]] | None = None
    for m, k in outs:
        t, lay = entries[m][2][k], entries[m][3][k]
        if best is None or t.size > best[0]:
            best = (t.size, t, lay, ("m", m, k))
    big = _largest(entries)
    if best is None or big[0].size > best[0]:
        return big
    return best[1], best[2], best[3]


def _largest(entries: tuple) -> tuple[TensorType, Layout, tuple[Any, ...]]:
    """The largest array a member computes or reads whole (ties: the first)."""
    best: tuple[float, TensorType, Layout, tuple[Any, ...]] | None = None
    for i, (op, _, types, lays, refs) in enumerate(entries):
        cands = [(t, lay, ("m", i, k)) for k, (t, lay) in enumerate(zip(types, lays, strict=True))]
        if bounds_rule(op).reads_operands_whole:
            cands += [(t, lay, ("x", r[1]) if r[0] == "x" else ("m", r[1], r[2]))
                      for r, t, lay in refs]
        for t, lay, k in cands:
            b = padded_bytes(t, lay)
            if best is None or b > best[0]:
                best = (b, t, lay, k)
    assert best is not None
    return best[1], best[2], best[3]


# ---- a tile --------------------------------------------------------------------------------

def problem(space: Space, tile: Bounds) -> str | None:
    """Why `tile` is not a tile of this space (shape only)."""
    out, ker = tuple(tile.output), tuple(tile.kernel)
    if len(out) != space.n_output or not all(isinstance(b, int) and b > 0 for b in out):
        return (f"output bounds must be {space.n_output} positive ints (the main array's "
                f"physical dims), found {list(out)}")
    for b, d in zip(out, space.dims, strict=False):
        if (b - 1) * d.unit >= d.size:
            return f"output bound {b} exceeds its dim ({d.size} elements in units of {d.unit})"
    if any(s is not None for s in space.kernel_dims):
        if len(ker) != len(space.kernel_dims) or not all(isinstance(b, int) and b > 0
                                                         for b in ker):
            return (f"kernel bounds must be {len(space.kernel_dims)} positive ints (the "
                    f"weights' physical dims), found {list(ker)}")
        for b, s in zip(ker, space.kernel_dims, strict=True):
            if s is not None and (b - 1) * space.dims[s].unit >= space.dims[s].size:
                return f"kernel bound {b} exceeds its dim ({space.dims[s].size} elements)"
    elif ker:
        return f"only a kernel with an MXU op takes kernel bounds, found {list(ker)}"
    return None


@dataclass(frozen=True, slots=True)
class Plan:
    """Per space dim: block extent, the distinct extents with their counts, block count."""

    ext: tuple[int, ...]
    parts: tuple[tuple[tuple[int, int], ...], ...]  # ((extent, how many blocks), ...)
    blocks: tuple[int, ...]

    @property
    def steps(self) -> int:
        return math.prod(self.blocks)


@lru_cache(maxsize=1 << 14)
def plan(space: Space, tile: Bounds) -> Plan:
    bounds = list(tile.output)
    bounds += [1] * (len(space.dims) - len(bounds))
    for b, s in zip(tile.kernel, space.kernel_dims, strict=False):
        if s is not None:
            bounds[s] = b
    ext, parts, blocks = [], [], []
    for b, d in zip(bounds, space.dims, strict=True):
        e = max(1, min(d.size, b * d.unit))
        n = -(-d.size // e)
        rest = d.size - (n - 1) * e
        ext.append(e)
        blocks.append(n)
        parts.append(((e, n),) if rest == e else ((e, n - 1), (rest, 1)))
    return Plan(tuple(ext), tuple(parts), tuple(blocks))


def _round_up(x: float, m: int) -> int:
    return -(-math.ceil(x) // m) * m


def _extent(d: ArrayDim, ext: dict[int, int]) -> int:
    if d.space is not None:
        return min(d.size, max(1, math.ceil(ext[d.space] * d.scale)))
    if d.window is not None:
        so, st, stride, dil = d.window
        taps = ext[st] if st >= 0 else 1
        return min(d.size, (ext[so] - 1) * stride + (taps - 1) * dil + 1)
    return d.size


def _block(a: ArrayUse, ext: dict[int, int]) -> tuple[float, float]:
    """(bytes, contiguous run in bytes) of one block of `a` with these space extents."""
    es = [_extent(d, ext) for d in a.dims]
    rank = len(es)
    st = sublane_tile(a.itemsize)
    if rank == 0:
        return float(a.itemsize), float(a.itemsize)
    if rank == 1:
        chunk = st * LANES
        n = -(-es[0] // chunk) * chunk
        full = -(-a.dims[0].size // chunk) * chunk
        return float(n * a.itemsize), float(n * a.itemsize if n <= full else full)
    grid = [*es[:-2], -(-es[-2] // st), -(-es[-1] // LANES)]
    full = [*(d.size for d in a.dims[:-2]), -(-a.dims[-2].size // st),
            -(-a.dims[-1].size // LANES)]
    tile_bytes = st * LANES * a.itemsize
    n_tiles = math.prod(grid)
    run = n_tiles
    for p in range(rank - 1, -1, -1):
        if grid[p] < full[p]:
            run = math.prod(grid[p:])
            break
    return float(n_tiles * tile_bytes), float(run * tile_bytes)


def _combos(pl: Plan, dims: Iterable[int]) -> list[tuple[dict[int, int], int]]:
    """Every combination of block extents over `dims`, with how many blocks have it."""
    dims = sorted(dims)
    out = []
    for choice in itertools.product(*(pl.parts[s] for s in dims)):
        ext = dict(zip(dims, (e for e, _ in choice), strict=True))
        out.append((ext, math.prod(n for _, n in choice)))
    return out


def refetches(pl: Plan, depends: set[int], loops: Sequence[int]) -> int:
    """How many times the loops around an array's blocks repeat its whole block sequence: the
    product of the blocks of the dims it does not follow that sit outside its innermost split
    dim in loop order (consecutive steps that keep its block index keep its block in VMEM)."""
    pos = [i for i, s in enumerate(loops) if s in depends and pl.blocks[s] > 1]
    if not pos:
        return 1
    return math.prod(pl.blocks[s] for s in loops[:max(pos) + 1] if s not in depends)


Transfer = tuple[float, float, float]  # (count, bytes each, contiguous run)


@lru_cache(maxsize=1 << 14)
def transfers(space: Space, pl: Plan) -> tuple[tuple[Transfer, ...], tuple[Transfer, ...],
                                               float, float]:
    """(input transfers, output transfers, input bytes, output bytes) of the whole grid
    (cached: a tuner or a calibration costs the same blocks under many constants)."""
    ins: list[Transfer] = []
    outs: list[Transfer] = []
    in_bytes = out_bytes = 0.0
    for a in space.arrays:
        dep = a.depends()
        again = refetches(pl, dep, space.loops)
        for ext, count in _combos(pl, {s for s in dep if pl.blocks[s] > 1}):
            full_ext = {s: pl.ext[s] for s in dep}
            full_ext.update(ext)
            size, run = _block(a, full_ext)
            n = count * again
            (outs if a.output else ins).append((float(n), size, run))
            if a.output:
                out_bytes += n * size
            else:
                in_bytes += n * size
    return tuple(ins), tuple(outs), in_bytes, out_bytes


def mxu_cycles(space: Space, pl: Plan, split: str, hw: Hardware) -> tuple[float, float]:
    """(MXU cycles, extra vector cycles) of the whole grid of an MXU kernel."""
    total = extra = 0.0
    dims = set(space.rows) | set(space.taps) | set(space.features)
    if space.cols is not None:
        dims.add(space.cols)
    whole = Plan(pl.ext, tuple(((e, n),) for e, n in zip(pl.ext, pl.blocks, strict=True)),
                 pl.blocks)  # the MXU computes every block whole
    for ext, count in _combos(whole, dims):
        rows = _round_up(math.prod(ext[s] for s in space.rows), SUBLANES)
        cols = ext[space.cols] if space.cols is not None else 1
        feats = math.prod(ext[s] for s in space.features)
        ntaps = math.prod(ext[s] for s in space.taps)
        k = (ntaps * _round_up(feats, hw.mxu_dim) if space.deep
             else _round_up(ntaps * feats, hw.mxu_dim))
        nb, kb = -(-cols // hw.mxu_dim), k // hw.mxu_dim
        floor = hw.mxu_dim
        if split == "n":
            cyc = -(-nb // hw.mxus) * kb * max(rows, floor)
        elif split == "m":
            cyc = nb * kb * max(_round_up(rows / hw.mxus, SUBLANES), floor)
        else:
            cyc = nb * -(-kb // hw.mxus) * max(rows, floor)
            if kb > 1:
                extra += count * ((min(kb, hw.mxus) - 1) * rows * nb * hw.mxu_dim
                                  / hw.vreg_elems * hw.vpu_op_cycles)
        total += count * (cyc * space.work + hw.mxu_fill_cycles)
    return total, extra * space.work


def vmem(space: Space, pl: Plan, buffers: int, inter_bytes: float) -> float:
    """VMEM of the largest block: operand and result blocks (`buffers` each, one for a block
    that never changes), the f32 accumulator of a split contraction, and the block's share
    of the fused intermediates held in VMEM (`inter_bytes`: all of them, times the share)."""
    ext = dict(enumerate(pl.ext))
    io = 0.0
    for a in space.arrays:
        moving = any(pl.blocks[s] > 1 for s in a.depends())
        io += _block(a, ext)[0] * (buffers if moving else 1)
    acc = 0.0
    if any(pl.blocks[s] > 1 for s in (*space.taps, *space.features)):
        rows = math.prod(ext[s] for s in space.rows)
        cols = _round_up(ext[space.cols], LANES) if space.cols is not None else LANES
        acc = 4.0 * rows * cols
    main = math.prod(pl.ext[: space.n_output]) / space.main_elems
    return io + acc + inter_bytes * min(1.0, main)
