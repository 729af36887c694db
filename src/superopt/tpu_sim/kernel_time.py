"""Kernel time: a kernel's statistics, its tiles and grid, and its time under a tile and flags.

The per-op rules (table "tpu_cost") and op facts live in `op_costs`. A kernel's statistics
are the sum over its member ops; they are computed once per *kernel signature* (ops,
attributes, types, layouts and the wiring inside the kernel), so repeated layers and
re-evaluated configurations hit a cache (`kernel_costs.KernelCosts`). Signatures are built
in `signature`; the default compiler's tile choice is in `tiling`. (This and those modules
were `cost.py`.)

Time of a kernel under a tile and flags (the "true" model the simulator reports):

- Tiles: the simulator's own `(tm, tn, tk)` / `(rows,)` tiles, or XLA-style `Bounds` over the
  physical dims of the kernel's main array, costed by `superopt.tpu_sim.bounds` with the same
  DMA, MXU, pipeline and fixed-cost model below.
- Kernels may write several values (multi-output fusion) and values may be stored in another
  element type than their IR dtype (`Config.dtypes`): signatures carry both.
- Grid: an MXU kernel tiles its product (tm x tn outputs, tk of the contraction per step;
  with several independent products, as in batched attention or grouped convs, tm beyond
  one product's rows stacks whole products into a step); other kernels stream `rows` rows
  of their largest array per step.
- HBM traffic: each operand tile is fetched when its block changes between steps, so a
  smaller output tile re-reads the other operand (operand re-reads); results are written
  once. Streams reach `hbm_efficiency` of the peak bandwidth and every contiguous run costs
  as much again as moving `dma_half_bytes`, so small tiles and narrow blocks move data
  inefficiently.
- MXU: per step, each 128x128 weight block streams max(rows, 128) rows (the weight-load
  floor: short row counts do not amortise loading weights), blocks are shared among MXUs
  by the `mxu_split` flag, and each step pays the systolic fill and drain.
- Vector unit: the ops' cycles, plus loop overhead per unrolled iteration and spills when
  live registers times unroll exceed the register file.
- Pipeline: with double buffering, step k+1's loads and step k-1's stores overlap step k's
  compute (a three-stage pipeline); without, each step waits for its DMAs and pays the DMA
  issue latency. Launch costs `launch_s`, every step after the first `step_s`; fusions whose
  ops x unroll exceed the instruction budget pay instruction fetch per step.
- VMEM: operand and result tiles (twice with double buffering), the f32 accumulator and the
  share of the fused intermediates VMEM holds (`Hardware.vmem_intermediate_share`; the rest
  stay in vregs) must fit; a tile that does not fit is invalid.

Two cheaper estimates stand beside it:

- `compiler_estimate`, what the default compiler's tiling pass minimises (XLA-strength,
  the default): the same grid, DMA runs, MXU block shapes and pipeline, without the vector
  unit's spills, loop overhead and instruction fetch (code generation's business, which a
  tile pass cannot see). On the measured TPU v3 kernels its pick is as good as XLA's own
  default (`benchmarks/calibrate.py`).
- `analytical` (the legacy default compiler's model, and the `analytical` cost model of the
  tuner): ignores DMA efficiency, the MXU weight-load floor and fill, loop overhead, spills,
  instruction fetch, pipeline prologue and per-step costs: time = compute + memory - 0.95 x
  min(compute, memory) + launch, with compute = padded MXU FLOPs / peak + vector cycles /
  clock, and memory = bytes / bandwidth including the tile's operand re-reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from superopt.ir.graph import Node
from superopt.ir.types import TensorType
from superopt.tpu_sim import bounds as bounds_module
from superopt.tpu_sim.bounds import Bounds, Space
from superopt.tpu_sim.config import Flags, Tile
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.layout import Layout, padded_bytes, padded_dims, sublane_tile, vregs
from superopt.tpu_sim.op_costs import (
    MXU_ROWS,
    Gemm,
    OpCost,
    OpView,
    is_reduction_op,
    op_flops,
    op_rule,
    round_up,
)
from superopt.tpu_sim.signature import Signature


@dataclass(frozen=True, slots=True)
class KernelStats:
    """Tile-independent work of one kernel (computed once per signature)."""

    ops: tuple[str, ...]
    flops: float  # useful FLOPs (unpadded)
    vector_cycles: float
    gemm: Gemm | None
    lhs_bytes: float  # bytes read from HBM, by the role the operand plays
    rhs_bytes: float
    stream_bytes: float
    out_bytes: float
    lhs_inter: float  # VMEM bytes of fused intermediates, by role
    stream_inter: float
    rows: int  # rows of the iteration space (non-MXU kernels)
    row_tile: int  # sublane tile of that space
    n_inputs: int
    n_outputs: int
    live_vregs: int
    loop_vregs: float  # vreg iterations of the vector loop
    transposing: bool
    reduction: bool
    hero: int | None = None  # the member whose product runs on the MXU
    dma_runs: float = 0.0  # the members' own DMAs (gathered rows), each a contiguous run

    @property
    def in_bytes(self) -> float:
        return self.lhs_bytes + self.rhs_bytes + self.stream_bytes

    @property
    def n_ops(self) -> int:
        return len(self.ops)


def kernel_stats(sig: Signature, hw: Hardware) -> KernelStats:
    entries, ext_desc, outs = sig.key
    n_members = len(entries)
    costs: list[OpCost] = []
    flops = 0.0
    vector = 0.0
    gemm: Gemm | None = None
    hero = -1
    transposing = False
    ops: list[str] = []
    for i, (op, attrs, types, out_layouts, refs) in enumerate(entries):
        node = Node(i, op, (), attrs, types)
        ins = tuple(t for _, t, _ in refs)
        view = OpView(node, ins, tuple(lay for _, _, lay in refs), out_layouts, hw)
        c = op_rule(op).cost(view)
        costs.append(c)
        ops.append(op)
        flops += op_flops(node, ins)
        vector += c.vector_cycles
        transposing = transposing or c.transposing
        if c.gemm is not None and gemm is None:
            gemm, hero = c.gemm, i

    # Which side of the MXU op each member feeds: lhs, rhs, or the epilogue ("stream"), as
    # the hero's cost entry says (`OpRule.roles`: a conv computed transposed swaps them,
    # attention's key and value are both re-read per query block).
    side = ["stream"] * n_members
    slots: tuple[tuple[int, str], ...] = ()
    if hero >= 0:
        hop, hattrs, htypes, hlays, _ = entries[hero]
        roles = op_rule(hop).roles
        slots = tuple(enumerate(roles(dict(hattrs), htypes, hlays))) if roles else ()
        for slot, name in slots:
            ref = entries[hero][4][slot][0]
            if ref[0] == "m":
                side[ref[1]] = name
        for i in range(hero - 1, -1, -1):
            if side[i] != "stream":
                for ref, _, _ in entries[i][4]:
                    if ref[0] == "m" and side[ref[1]] == "stream":
                        side[ref[1]] = side[i]

    full = [padded_bytes(t, lay) for t, lay in ext_desc]
    read: list[float | None] = [0.0] * len(ext_desc)  # None: read whole
    role = ["stream"] * len(ext_desc)
    rank = {"lhs": 0, "rhs": 1, "stream": 2}
    for i, (_, _, _, _, refs) in enumerate(entries):
        reads = costs[i].reads
        for slot, (ref, _, _) in enumerate(refs):
            if ref[0] != "x":
                continue
            j = ref[1]
            part = reads[slot] if slot < len(reads) else None
            if part is None:
                read[j] = None
            elif read[j] is not None:
                read[j] = (read[j] or 0.0) + part
            here = dict(slots).get(slot, side[i]) if i == hero else side[i]
            if rank[here] < rank[role[j]]:
                role[j] = here
    by_role = {"lhs": 0.0, "rhs": 0.0, "stream": 0.0}
    for j, b in enumerate(full):
        r = read[j]
        by_role[role[j]] += b if r is None else min(b, r)

    out_bytes = float(sum(padded_bytes(entries[m][2][k], entries[m][3][k]) for m, k in outs))
    inter = {"lhs": 0.0, "rhs": 0.0, "stream": 0.0}
    # The vector loop runs over the largest array a vector op touches (the MXU op's result
    # drains through it too); partially read operands (a looked-up table) do not count.
    largest: tuple[float, TensorType, Layout] | None = None
    loop = 0.0

    def consider(t: TensorType, lay: Layout) -> None:
        nonlocal largest, loop
        b = padded_bytes(t, lay)
        if largest is None or b > largest[0]:
            largest = (b, t, lay)
        loop = max(loop, vregs(t, lay))

    for i, (_, _, types, out_layouts, refs) in enumerate(entries):
        for t, lay in zip(types, out_layouts, strict=True):
            if i < n_members - 1:
                inter[side[i]] += padded_bytes(t, lay)
            consider(t, lay)
        if i == hero:
            continue
        reads = costs[i].reads
        for slot, (_, t, lay) in enumerate(refs):
            if slot >= len(reads) or reads[slot] is None:
                consider(t, lay)
    assert largest is not None
    _, big_t, big_l = largest
    dims = padded_dims(big_t.shape, big_l, big_t.dtype.itemsize)
    if len(dims) >= 2:
        rows, row_tile = math.prod(dims[:-1]), sublane_tile(big_t.dtype.itemsize)
    else:
        rows, row_tile = max(1, -(-(dims[0] if dims else 1) // 128)), 8
    return KernelStats(
        ops=tuple(ops), flops=flops, vector_cycles=vector, gemm=gemm,
        lhs_bytes=by_role["lhs"], rhs_bytes=by_role["rhs"], stream_bytes=by_role["stream"],
        out_bytes=out_bytes, lhs_inter=inter["lhs"] + inter["rhs"], stream_inter=inter["stream"],
        rows=max(1, rows), row_tile=row_tile, n_inputs=len(ext_desc), n_outputs=len(outs),
        live_vregs=_peak_live(entries), loop_vregs=loop,
        transposing=transposing, reduction=any(is_reduction_op(op) for op in ops),
        hero=hero if hero >= 0 else None, dma_runs=sum(c.dma_runs for c in costs))


def _peak_live(entries: tuple) -> int:
    """Values live at once in one iteration of the kernel's vector loop.

    A member's result lives from its op to its last use inside the kernel (the root's to
    the end); an operand read from HBM lives from its first use to its last. The peak over
    the op sequence is the register pressure of one unrolled copy of the loop body.
    """
    n = len(entries)
    last: dict[tuple[str, int, int], int] = {}
    first: dict[tuple[str, int, int], int] = {}
    for i, entry in enumerate(entries):
        for ref, _, _ in entry[4]:
            first.setdefault(ref, i)
            last[ref] = i
    delta = [0] * (n + 1)
    for i, entry in enumerate(entries):
        for k in range(len(entry[2])):
            end = n - 1 if i == n - 1 else last.get(("m", i, k), i)
            delta[i] += 1
            delta[end + 1] -= 1
    for ref, start in first.items():
        if ref[0] == "x":
            delta[start] += 1
            delta[last[ref] + 1] -= 1
    peak = live = 0
    for d in delta[:n]:
        live += d
        peak = max(peak, live)
    return max(1, peak)


# ---- tiles -------------------------------------------------------------------------------------

def _ladder(lo: int, hi: int) -> list[int]:
    """lo, 2 lo, 4 lo, ... below hi, then hi itself."""
    out = []
    x = lo
    while x < hi:
        out.append(x)
        x *= 2
    out.append(hi)
    return out


def tile_options(stats: KernelStats) -> list[Tile]:
    """The tiles a kernel can take (powers of two of the hardware tile, and the full dims).

    For an MXU kernel with several independent products (batched matmuls, grouped convs),
    tm beyond one product's rows stacks whole products in one grid step.
    """
    g = stats.gemm
    if g is not None:
        tms = _ladder(MXU_ROWS, g.m_pad)
        if g.count > 1:
            tms += [g.m_pad * b for b in _ladder(2, g.count)]
        return [(tm, tn, tk) for tm in tms for tn in _ladder(128, g.n_pad)
                for tk in _ladder(128, g.k_pad)]
    rows = round_up(stats.rows, stats.row_tile)
    return [(tr,) for tr in _ladder(stats.row_tile, rows)]


def tile_problem(stats: KernelStats, tile: Tile) -> str | None:
    """Why `tile` is not a tile of this kernel (shape only; VMEM is checked separately)."""
    g = stats.gemm
    if not isinstance(tile, tuple) or not all(isinstance(x, int) and x > 0 for x in tile):
        return f"a tile is a tuple of positive ints, found {tile!r}"
    if g is not None:
        if len(tile) != 3:
            return f"an MXU kernel takes a tile (tm, tn, tk), found {tile!r}"
        tm, tn, tk = tile
        if tm > g.m_pad:
            if tm % g.m_pad or tm > g.count * g.m_pad:
                return (f"tm={tm} must be a multiple of {MXU_ROWS} up to {g.m_pad}, or stack "
                        f"whole products: a multiple of {g.m_pad} up to {g.count * g.m_pad}")
        elif tm % MXU_ROWS and tm != g.m_pad:
            return f"tm={tm} must be a multiple of {MXU_ROWS} up to {g.m_pad}"
        if tn > g.n_pad or tn % 128:
            return f"tn={tn} must be a multiple of 128 up to {g.n_pad}"
        if tk > g.k_pad or tk % 128:
            return f"tk={tk} must be a multiple of 128 up to {g.k_pad}"
        return None
    if len(tile) != 1:
        return f"a vector kernel takes a tile (rows,), found {tile!r}"
    rows = round_up(stats.rows, stats.row_tile)
    if tile[0] > rows or tile[0] % stats.row_tile:
        return f"rows={tile[0]} must be a multiple of {stats.row_tile} up to {rows}"
    return None


def _rows(g: Gemm, tm: int) -> tuple[int, int, int, int]:
    """(rows per product, products per step, row blocks per product, product groups)."""
    if tm > g.m_pad:
        per_step = tm // g.m_pad
        return g.m_pad, per_step, 1, -(-g.count // per_step)
    return tm, 1, -(-g.m_pad // tm), g.count


@dataclass(frozen=True, slots=True)
class Grid:
    """How a tile cuts a kernel: steps, HBM traffic, per-transfer sizes and VMEM need."""

    steps: int
    in_bytes: float  # fetched, with re-reads
    out_bytes: float
    transfers: tuple[tuple[float, float, float], ...]  # (count, bytes each, contiguous run)
    vmem_io: float  # operand + result tile bytes (doubled with double buffering)
    vmem_fixed: float  # accumulator and intermediates
    vmem_inter: float = 0.0  # the intermediates' part of vmem_fixed


def grid(stats: KernelStats, tile: Tile) -> Grid:
    g = stats.gemm
    if g is not None:
        tm, tn, tk = tile
        rows, per_step, gm, gb = _rows(g, tm)
        gn, gk = -(-g.n_pad // tn), -(-g.k_pad // tk)
        steps = gb * gm * gn * gk
        # Blocks at the end of a dim may be partial: a block's bytes are the array's share.
        lhs_tile = stats.lhs_bytes / (gb * gm * gk)
        rhs_tile = stats.rhs_bytes / (gb * gn * gk)
        # A block is fetched again only when the step's block index changes: the lhs stays
        # put across output columns when one step covers the whole contraction; the rhs is
        # fetched again for each row block unless it is the only block.
        lhs_loads = gb * gm * gk * (gn if gk > 1 else 1)
        rhs_loads = gb * gn * gk * (gm if gk * gn > 1 else 1)
        out_tiles = gb * gm * gn
        stream_tile = stats.stream_bytes / out_tiles
        out_tile = stats.out_bytes / out_tiles
        row_groups = max(1, rows * per_step // MXU_ROWS)
        lhs_run = lhs_tile if gk == 1 else lhs_tile / row_groups
        rhs_run = rhs_tile if gn == 1 else rhs_tile / max(1, tk // MXU_ROWS)
        out_run = out_tile if gn == 1 else out_tile / row_groups
        transfers = ((lhs_loads, lhs_tile, lhs_run), (rhs_loads, rhs_tile, rhs_run),
                     (out_tiles if stats.stream_bytes else 0, stream_tile, out_run))
        vmem_io = lhs_tile + rhs_tile + stream_tile + out_tile
        acc = rows * per_step * tn * 4.0 if gk > 1 else 0.0
        inter = stats.lhs_inter / (gb * gm * gk) + stats.stream_inter / out_tiles
        return Grid(steps, lhs_loads * lhs_tile + rhs_loads * rhs_tile + stats.stream_bytes,
                    stats.out_bytes, (*transfers, (out_tiles, out_tile, out_run)),
                    vmem_io, acc + inter, inter)
    (tr,) = tile
    rows = round_up(stats.rows, stats.row_tile)
    steps = -(-rows // tr)
    frac = 1.0 / steps
    in_tile = stats.in_bytes * frac
    out_tile = stats.out_bytes * frac
    per_input = in_tile / max(1, stats.n_inputs)
    per_output = out_tile / max(1, stats.n_outputs)
    transfers = ((steps * stats.n_inputs, per_input, per_input),
                 (steps * stats.n_outputs, per_output, per_output))
    inter = (stats.lhs_inter + stats.stream_inter) * frac
    return Grid(steps, stats.in_bytes, stats.out_bytes, transfers, in_tile + out_tile, inter,
                inter)


def vmem_bytes(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware) -> float:
    """VMEM a (tm, tn, tk) or (rows,) tile needs (a `Bounds` tile: `kernel_cost(...).vmem`)."""
    return grid_vmem(grid(stats, tile), flags, hw)


def grid_vmem(gr: Grid, flags: Flags, hw: Hardware) -> float:
    """Operand and result tiles (twice with double buffering), the accumulator, and the
    share of fused intermediates held in VMEM (`Hardware.vmem_intermediate_share`)."""
    fixed = gr.vmem_fixed - gr.vmem_inter * (1.0 - hw.vmem_intermediate_share)
    return gr.vmem_io * (2 if flags.double_buffer else 1) + fixed


def mxu_cycles_per_step(g: Gemm, tile: Tile, split: str, hw: Hardware) -> tuple[float, float]:
    """(MXU cycles, extra vector cycles) of one grid step of a tiled product.

    Products stacked in one step stream back to back, so the pipeline fills once per step.
    """
    tm, tn, tk = tile
    rows, per_step, _, _ = _rows(g, tm)
    nb, kb = -(-tn // hw.mxu_dim), -(-tk // hw.mxu_dim)
    floor = hw.mxu_dim  # loading a weight block takes as long as streaming mxu_dim rows
    extra = 0.0
    if split == "n":
        cycles = -(-nb // hw.mxus) * kb * max(rows, floor)
    elif split == "m":
        cycles = nb * kb * max(round_up(-(-rows // hw.mxus), MXU_ROWS), floor)
    else:  # "k": partial sums from each MXU are added on the vector unit
        cycles = nb * -(-kb // hw.mxus) * max(rows, floor)
        if kb > 1:
            extra = (min(kb, hw.mxus) - 1) * rows * tn / hw.vreg_elems * hw.vpu_op_cycles
    return per_step * cycles + hw.mxu_fill_cycles, per_step * extra


# ---- kernel time -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KernelCost:
    """Simulated time of one kernel under a tile and flags (seconds, bytes, FLOPs)."""

    time: float
    compute: float  # steps x per-step compute (MXU and vector overlap)
    mxu: float
    vector: float
    memory: float  # DMA time of all transfers
    overhead: float  # time - max(compute, memory): fixed costs and what does not overlap
    flops: float
    bytes: float  # HBM bytes moved, with re-reads
    steps: int
    vmem: float
    valid: bool
    problem: str = ""

    @property
    def bound(self) -> str:
        parts = {"compute": self.compute, "memory": self.memory, "overhead": self.overhead}
        return max(parts, key=parts.__getitem__)


def _dma_time(transfers: Iterable[tuple[float, float, float]], hw: Hardware) -> float:
    """DMA time of (count, bytes each, contiguous run) transfers: streams reach
    `hbm_efficiency` of the peak bandwidth, and every contiguous run costs as much again as
    moving `dma_half_bytes` (so a run of that size reaches half the stream rate)."""
    total = 0.0
    rate = hw.hbm_bytes_per_s * hw.hbm_efficiency
    for count, size, run in transfers:
        if count and size > 0:
            total += count * size / rate * (1.0 + hw.dma_half_bytes / max(run, 1.0))
    return total


@dataclass(frozen=True, slots=True)
class _Work:
    """What a tile makes of a kernel before timing: grid steps, MXU cycles and the extra
    vector cycles of a split contraction, DMA time in and out, HBM bytes moved, VMEM."""

    steps: int
    mxu_cycles: float
    extra_vec: float
    dma_in: float
    dma_out: float
    moved: float
    vmem: float


def _work(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware,
          space: Space | None) -> _Work | str:
    """The kernel's work under `tile` and `flags`, or why the tile is not one of its
    tiles (a `Bounds` tile needs the kernel's `space`)."""
    w = _tiled_work(stats, tile, flags, hw, space)
    if isinstance(w, str) or not stats.dma_runs:
        return w
    # Each gathered row is a run of its own: the per-run DMA cost.
    runs = stats.dma_runs * hw.dma_half_bytes / (hw.hbm_bytes_per_s * hw.hbm_efficiency)
    return _Work(w.steps, w.mxu_cycles, w.extra_vec, w.dma_in + runs, w.dma_out, w.moved,
                 w.vmem)


def _tiled_work(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware,
                space: Space | None) -> _Work | str:
    if isinstance(tile, Bounds):
        if space is None:
            return ("a bounds tile is costed through KernelCosts.cost (it needs the kernel's "
                    "iteration space)")
        problem = bounds_module.problem(space, tile) or flags.problem()
        if problem:
            return problem
        pl = bounds_module.plan(space, tile)
        ins, outs, in_bytes, out_bytes = bounds_module.transfers(space, pl)
        mxu = extra_vec = 0.0
        if stats.gemm is not None:
            mxu, extra_vec = bounds_module.mxu_cycles(space, pl, flags.mxu_split, hw)
        vmem = bounds_module.vmem(space, pl, 2 if flags.double_buffer else 1,
                                  (stats.lhs_inter + stats.stream_inter)
                                  * hw.vmem_intermediate_share)
        return _Work(pl.steps, mxu, extra_vec, _dma_time(ins, hw), _dma_time(outs, hw),
                     in_bytes + out_bytes, vmem)
    problem = tile_problem(stats, tile) or flags.problem()
    if problem:
        return problem
    gr = grid(stats, tile)
    steps = gr.steps
    mxu = extra_vec = 0.0
    if stats.gemm is not None:
        per, extra = mxu_cycles_per_step(stats.gemm, tile, flags.mxu_split, hw)
        mxu, extra_vec = per * steps, extra * steps
    dma_in = _dma_time(gr.transfers[:-1] if stats.gemm is not None else gr.transfers[:1], hw)
    return _Work(steps, mxu, extra_vec, dma_in, _dma_time(gr.transfers[-1:], hw),
                 gr.in_bytes + gr.out_bytes, grid_vmem(gr, flags, hw))


def kernel_cost(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware,
                space: Space | None = None) -> KernelCost:
    """The simulator's time for one kernel (see the module docstring). A `Bounds` tile needs
    the kernel's `space` (`KernelCosts.cost` passes it)."""
    w = _work(stats, tile, flags, hw, space)
    if isinstance(w, str):
        return _invalid(stats, w)
    return _assemble(stats, tile, flags, hw, w.steps, w.mxu_cycles, w.extra_vec, w.dma_in,
                     w.dma_out, w.moved, w.vmem)


def _assemble(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware, steps: int,
              mxu_cycles: float, extra_vec: float, dma_in: float, dma_out: float,
              moved: float, vmem: float) -> KernelCost:
    """A kernel's time from its grid: compute and DMA per step through the pipeline, plus
    launch, per-step and instruction-fetch costs."""
    clock = hw.clock_hz
    mxu = mxu_cycles / clock
    live = stats.live_vregs * flags.unroll
    spill = max(0.0, 1.0 - hw.vregs / live) if live else 0.0
    vec_cycles = (stats.vector_cycles * (1.0 + spill) + extra_vec
                  + stats.loop_vregs / flags.unroll * hw.loop_overhead_cycles)
    vector = vec_cycles / clock
    compute = max(mxu, vector)
    memory = dma_in + dma_out
    code = stats.n_ops * flags.unroll
    icache = steps * max(0, code - hw.instruction_budget) * hw.instruction_miss_s
    time = pipeline_time(steps, compute, dma_in, dma_out, flags.double_buffer, hw) + icache
    valid = vmem <= hw.vmem_bytes
    short = tile.short() if isinstance(tile, Bounds) else str(tile)
    return KernelCost(
        time=time, compute=compute, mxu=mxu, vector=vector, memory=memory,
        overhead=time - max(compute, memory), flops=stats.flops,
        bytes=moved, steps=steps, vmem=vmem, valid=valid,
        problem="" if valid else (f"tile {short} needs {vmem / 2**20:.2f} MiB of VMEM "
                                  f"({flags.short()}), more than {hw.vmem_bytes / 2**20:.0f} MiB"))


def pipeline_time(steps: int, compute: float, dma_in: float, dma_out: float,
                  double_buffer: bool, hw: Hardware) -> float:
    """Launch, per-step costs and the grid's pipeline: with double buffering a three-stage
    pipeline (step k+1's loads and step k-1's stores under step k's compute: the first load
    and the last store are exposed); without, every step waits for its DMAs and each DMA
    after the first pays the issue latency."""
    c, i, o = compute / steps, dma_in / steps, dma_out / steps
    if double_buffer:
        if steps == 1:
            body = i + c + o
        else:
            body = i + max(c, i) + (steps - 2) * max(c, i + o) + max(c, o) + o
    else:
        body = steps * (i + c + o) + (steps - 1) * hw.dma_issue_s
    return hw.launch_s + (steps - 1) * hw.step_s + body


def compiler_estimate(stats: KernelStats, tile: Tile, flags: Flags, hw: Hardware,
                      space: Space | None = None) -> float:
    """The default compiler's estimate of a kernel under `tile` (what its tiling pass
    minimises; see `tiling`): the grid's pipeline with per-step costs, DMA transfers with
    their contiguous runs, and the MXU's block shapes, as an XLA-like compiler that knows
    its hardware can estimate them statically. Left out are the vector unit's register
    pressure (spills), loop overhead and instruction fetch, which depend on code
    generation. Infinite for a tile that is not one of the kernel's."""
    w = _work(stats, tile, flags, hw, space)
    if isinstance(w, str):
        return math.inf
    compute = max(w.mxu_cycles, stats.vector_cycles + w.extra_vec) / hw.clock_hz
    return pipeline_time(w.steps, compute, w.dma_in, w.dma_out, flags.double_buffer, hw)


def _invalid(stats: KernelStats, problem: str) -> KernelCost:
    return KernelCost(math.inf, 0.0, 0.0, 0.0, 0.0, 0.0, stats.flops, 0.0, 0, 0.0, False,
                      problem)


def analytical(compute: float, memory: float, hw: Hardware) -> float:
    """XLA-like estimate: compute + memory - 0.95 x min(compute, memory) + launch."""
    return compute + memory - 0.95 * min(compute, memory) + hw.launch_s


def analytical_compute(stats: KernelStats, hw: Hardware) -> float:
    mxu = stats.gemm.padded_flops / hw.peak_flops if stats.gemm is not None else 0.0
    return mxu + stats.vector_cycles / hw.clock_hz
