"""What a cost model sees of a kernel configuration: one `KernelSample` per measured
(kernel signature, tile, flags), hand features per sample (the gradient-boosted model's
input, AutoTVM style) and an op graph per signature (the GraphSAGE model's input).

Hand features (`FEATURES`, in this order) are computed from the kernel's signature through
the simulator's compile-time analysis only (`KernelCosts.stats`, the tile's grid or
`Bounds` plan): work (FLOPs, padded MXU FLOPs, vector cycles), bytes by operand role,
padded GEMM dims, op counts by kind, the tile (dims, steps, bytes moved with re-reads,
transfer count and size, the tile buffers' VMEM), the flags, and the default compiler's
analytical estimate. Op kinds (`op_kind`) come from the op registry's traits and the
simulator's cost table, so a new op is counted without an edit here. Nothing here reads the simulated time (`KernelCosts.cost`), so a
model learns the time model from measurements only. Counts enter as log2(1 + x), which
is what a tree splits on and keeps a network's inputs in a few units.

Tiles of both kinds (the simulator's `(tm, tn, tk)` / `(rows,)` and XLA's `Bounds`) map to
the same tile-derived columns (steps, bytes, transfers), so a model trained on one kind
can rank the other (the TpuGraphs transfer check).

`SCHEMA` names the feature layout and the node encoding; a saved model records it and
refuses to load under another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import numpy as np

from superopt.tpu_sim import Flags, KernelCosts, Signature, get_hardware
from superopt.tpu_sim import bounds as bounds_module
from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.kernel_time import analytical, analytical_compute, grid
from superopt.xtat.space import digest

TASKS = ("fusion", "tile", "flags")


@dataclass(frozen=True, eq=False)
class KernelSample:
    """One measured kernel configuration. `group` ties the samples that differ only in
    the tuned choice (one kernel's tiles, or its flags): ranking is judged within a group;
    fusion samples have no group ("")."""

    sig: Signature
    sig_key: str
    tile: Any
    flags: Flags
    measured: float  # seconds, with the measurement noise
    exact: float  # seconds, the simulator's exact time (for reference only)
    workload: str  # "model@batch"
    model: str
    task: str  # fusion, tile or flags
    group: str = ""


def _lg(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


STAT_FEATURES = (
    "flops", "mxu_flops", "vector_cycles", "lhs_bytes", "rhs_bytes", "stream_bytes",
    "out_bytes", "inter_bytes", "rows", "n_ops", "n_inputs", "n_outputs", "live_vregs",
    "loop_vregs", "has_gemm", "gemm_count", "gemm_m", "gemm_n", "gemm_k", "transposing",
    "reduction", "ops_mxu", "ops_layout", "ops_reduce", "ops_other",
)
TILE_FEATURES = (
    "bounds_tile", "tile0", "tile1", "tile2", "tile_elems", "steps", "moved_bytes",
    "in_transfers", "in_transfer_bytes", "in_run_bytes", "out_transfers", "out_run_bytes",
    "vmem_tiles", "analytical_s", "analytical_step_s", "compute_s", "memory_s",
)
# What the analytical estimate leaves out, as compile-time quantities a compiler engineer
# would hand a model (none of them is the simulated time): how full each grid step keeps
# the MXU (rows against the weight-load floor, blocks shared among the MXUs by the split
# flag), how many contiguous DMA runs the tile cuts its traffic into, bytes per FLOP,
# per-step work, register and instruction pressure under the unroll, VMEM use, and two
# roofline variants (a pipelined and a serial sum over the steps), and the estimate redone
# with the MXU work divided by its occupancy and the steps run through a double-buffered
# pipeline (loads of step k+1 and stores of k-1 under step k's compute, with its
# prologue and epilogue; serial without double buffering). Held-out models differ
# from the training ones mostly in these ratios, not in absolute sizes.
EXTRA_FEATURES = (
    "pad_eff", "mxu_row_occ", "mxu_split_occ", "mxu_blocks", "dma_runs", "dma_run_bytes",
    "bytes_per_flop", "step_bytes", "step_flops", "vreg_pressure", "code_excess",
    "loop_iters", "vmem_frac", "compute_memory", "pipelined_s", "serial_s",
    "occupied_compute_s", "double_buffered_s",
)
FLAG_FEATURES = ("double_buffer", "unroll", "split_n", "split_m", "split_k")
FEATURES = STAT_FEATURES + TILE_FEATURES + FLAG_FEATURES + EXTRA_FEATURES
# Where the default compiler's estimate sits in a row (log seconds): the residual
# models learn the measured time relative to it.
ANALYTICAL = FEATURES.index("analytical_s")



@cache
def op_kind(op: str) -> str:
    """The op-count column an op falls in, from the registry's traits and the cost table:
    "mxu" (the cost table's MXU ops: conv2d, matmul, linear, attention), "layout" (the
    MOVEMENT trait: transposes, reshapes, copies, concat/split/slice/pad, expand...),
    "reduce" (the REDUCTION trait, and window reductions: ops with a `kernel` window
    attribute, the pools), else "other". An op this version does not know is "other"."""
    from superopt.ir.opdef import MOVEMENT, OPS, REDUCTION
    from superopt.tpu_sim.op_costs import COST_RULES, is_mxu_op

    opdef = OPS.get(op)
    if opdef is None:
        return "other"
    if COST_RULES.supports(op) and is_mxu_op(op):
        return "mxu"
    if opdef.has(MOVEMENT):
        return "layout"
    if opdef.has(REDUCTION) or any(a.name == "kernel" for a in opdef.attrs):
        return "reduce"
    return "other"


# Per node of the op graph: these numeric columns next to the opcode's embedding.
NODE_FEATURES = ("out_elems", "rank", "last_dim", "second_dim", "itemsize", "row_major",
                 "minor_dim", "n_in", "n_ext_in", "is_last", "out_bytes")


def _ops() -> tuple[str, ...]:
    from superopt.ir.opdef import all_ops

    return tuple(sorted(o.name for o in all_ops()))


@lru_cache(maxsize=1)
def op_vocab() -> dict[str, int]:
    """Opcode -> embedding row (0: an op this version does not know)."""
    return {name: i + 1 for i, name in enumerate(_ops())}


@lru_cache(maxsize=1)
def schema() -> str:
    """Digest of everything the features' meaning depends on."""
    return digest("|".join(FEATURES) + "#" + "|".join(NODE_FEATURES) + "#"
                  + "|".join(_ops()), 8)


class Featurizer:
    """Hand features and op graphs for one hardware preset, cached per signature (and per
    tile and flags): a tuner asks again for kernels it has seen."""

    def __init__(self, hw: Any) -> None:
        self.kc = hw if isinstance(hw, KernelCosts) else KernelCosts(get_hardware(hw))
        self.hw = self.kc.hw
        self._stats: dict[Signature, list[float]] = {}
        self._rows: dict[tuple, np.ndarray] = {}
        self._graphs: dict[Signature, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    # ---- hand features ----------------------------------------------------------------

    def stat_row(self, sig: Signature) -> list[float]:
        got = self._stats.get(sig)
        if got is not None:
            return got
        s = self.kc.stats(sig)
        g = s.gemm
        kinds = [op_kind(op) for op in s.ops]
        mxu, lay, red = kinds.count("mxu"), kinds.count("layout"), kinds.count("reduce")
        got = [_lg(s.flops), _lg(g.padded_flops if g else 0), _lg(s.vector_cycles),
               _lg(s.lhs_bytes), _lg(s.rhs_bytes), _lg(s.stream_bytes), _lg(s.out_bytes),
               _lg(s.lhs_inter + s.stream_inter), _lg(s.rows), float(s.n_ops),
               float(s.n_inputs), float(s.n_outputs), float(s.live_vregs), _lg(s.loop_vregs),
               float(g is not None), _lg(g.count if g else 0), _lg(g.m_pad if g else 0),
               _lg(g.n_pad if g else 0), _lg(g.k_pad if g else 0), float(s.transposing),
               float(s.reduction), float(mxu), float(lay), float(red),
               float(s.n_ops - mxu - lay - red)]
        if len(self._stats) > 1 << 16:
            self._stats.clear()
        self._stats[sig] = got
        return got

    def tile_row(self, sig: Signature, tile: Any, flags: Flags) -> list[float]:
        return self._tile_rows(sig, tile, flags)[0]

    def _tile_rows(self, sig: Signature, tile: Any, flags: Flags
                   ) -> tuple[list[float], list[float]]:
        """(`TILE_FEATURES`, `EXTRA_FEATURES`) of one configuration."""
        kc, hw = self.kc, self.hw
        s = kc.stats(sig)
        if isinstance(tile, Bounds):
            space = kc.space(sig)
            pl = bounds_module.plan(space, tile)
            ins, outs, in_b, out_b = bounds_module.transfers(space, pl)
            steps = pl.steps
            dims = list(tile.output) + list(tile.kernel)
            vmem = bounds_module.vmem(space, pl, 2 if flags.double_buffer else 1, 0.0)
            mxu = _bounds_mxu(space, pl, hw.mxu_dim) if s.gemm is not None else None
        else:
            gr = grid(s, tile)
            steps = gr.steps
            in_b, out_b = gr.in_bytes, gr.out_bytes
            ins, outs = gr.transfers[:-1], gr.transfers[-1:]
            dims = list(tile)
            vmem = gr.vmem_io * (2 if flags.double_buffer else 1)
            mxu = _grid_mxu(s.gemm, tile, hw.mxu_dim) if s.gemm is not None else None
        dims = [*dims, 0, 0, 0][:3]
        n_in = sum(c for c, _, _ in ins)
        n_out = sum(c for c, _, _ in outs)
        in_size = sum(c * b for c, b, _ in ins) / max(1.0, n_in)
        in_run = min((r for c, _, r in ins if c), default=0.0)
        out_run = min((r for c, _, r in outs if c), default=0.0)
        compute = analytical_compute(s, hw)
        moved = in_b + out_b
        memory = moved / hw.hbm_bytes_per_s
        est = analytical(compute, memory, hw)
        tile_part = [float(isinstance(tile, Bounds)), _lg(dims[0]), _lg(dims[1]), _lg(dims[2]),
                     _lg(math.prod(max(1, d) for d in dims)), _lg(steps), _lg(moved),
                     _lg(n_in), _lg(in_size), _lg(in_run), _lg(n_out), _lg(out_run),
                     _lg(vmem), math.log(est), math.log(est / max(1, steps)),
                     math.log(compute + 1e-12), math.log(memory + 1e-12)]
        g = s.gemm
        pad_eff = s.flops / g.padded_flops if g is not None and g.padded_flops else 1.0
        row_occ, split_occ, blocks = 1.0, 1.0, 0.0
        if mxu is not None:
            rows, nb, kb, products = mxu
            row_occ = rows / max(rows, hw.mxu_dim)
            split_occ = _split_occupancy(flags.mxu_split, rows, nb, kb, hw.mxus, hw.mxu_dim)
            blocks = _lg(products * nb * kb)
        runs = sum(c * b / max(r, 1.0) for c, b, r in (*ins, *outs) if c)
        work = g.padded_flops if g is not None else s.flops
        steps = max(1, steps)
        mxu_s = g.padded_flops / hw.peak_flops if g is not None else 0.0
        occupied = mxu_s / max(1e-3, row_occ * split_occ) + s.vector_cycles / hw.clock_hz
        piped = _pipeline(occupied / steps, in_b / hw.hbm_bytes_per_s / steps,
                          out_b / hw.hbm_bytes_per_s / steps, steps, flags.double_buffer)
        extra = [pad_eff, row_occ, split_occ, blocks, _lg(runs), _lg(moved / max(1.0, runs)),
                 math.log((moved + 1.0) / (s.flops + 1.0)), _lg(moved / steps),
                 _lg(work / steps), s.live_vregs * flags.unroll / hw.vregs,
                 _lg(steps * max(0, s.n_ops * flags.unroll - hw.instruction_budget)),
                 _lg(s.loop_vregs / flags.unroll), vmem / hw.vmem_bytes,
                 math.log((compute + 1e-12) / (memory + 1e-12)),
                 math.log(max(compute, memory) + hw.launch_s),
                 math.log(compute + memory + hw.launch_s), math.log(occupied + 1e-12),
                 math.log(piped + hw.launch_s)]
        return tile_part, extra

    @staticmethod
    def flag_row(flags: Flags) -> list[float]:
        return [float(flags.double_buffer), math.log2(flags.unroll),
                float(flags.mxu_split == "n"), float(flags.mxu_split == "m"),
                float(flags.mxu_split == "k")]

    def row(self, sig: Signature, tile: Any, flags: Flags) -> np.ndarray:
        key = (sig, tile, flags)
        got = self._rows.get(key)
        if got is None:
            if len(self._rows) > 1 << 18:
                self._rows.clear()
            tile_part, extra = self._tile_rows(sig, tile, flags)
            got = self._rows[key] = np.asarray(
                self.stat_row(sig) + tile_part + self.flag_row(flags) + extra,
                dtype=np.float32)
        return got

    def matrix(self, items: Sequence[tuple[Signature, Any, Flags]]) -> np.ndarray:
        if not items:
            return np.zeros((0, len(FEATURES)), dtype=np.float32)
        return np.stack([self.row(s, t, f) for s, t, f in items])

    # ---- op graphs ----------------------------------------------------------------------

    def graph(self, sig: Signature) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(opcode ids [n], node features [n, len(NODE_FEATURES)], edges [2, e]): one node
        per kernel member, an edge from each member to the members that read it (both
        directions: GraphSAGE aggregates neighbours either way)."""
        got = self._graphs.get(sig)
        if got is not None:
            return got
        entries, _, _ = sig.key
        vocab = op_vocab()
        n = len(entries)
        ids = np.zeros(n, dtype=np.int64)
        x = np.zeros((n, len(NODE_FEATURES)), dtype=np.float32)
        src: list[int] = []
        dst: list[int] = []
        for i, (op, _attrs, types, layouts, refs) in enumerate(entries):
            ids[i] = vocab.get(op, 0)
            t = types[0] if types else None
            lay = layouts[0] if layouts else ()
            shape = tuple(t.shape) if t is not None else ()
            item = t.dtype.itemsize if t is not None else 4
            elems = math.prod(shape) if shape else 1
            minor = shape[lay[0]] if lay and shape else 1
            ext = 0
            for ref, _, _ in refs:
                if ref[0] == "m":
                    src.append(ref[1])
                    dst.append(i)
                else:
                    ext += 1
            x[i] = [_lg(elems), len(shape), _lg(shape[-1] if shape else 1),
                    _lg(shape[-2] if len(shape) > 1 else 1), item,
                    float(tuple(lay) == tuple(range(len(shape) - 1, -1, -1))), _lg(minor),
                    len(refs), ext, float(i == n - 1), _lg(elems * item)]
        edges = np.asarray([src + dst, dst + src], dtype=np.int64).reshape(2, -1)
        got = self._graphs[sig] = (ids, x, edges)
        return got


def _grid_mxu(g: Any, tile: tuple[int, ...], mxu_dim: int) -> tuple[int, int, int, int]:
    """(rows, weight blocks across, down, products) one grid step streams through the MXU
    for a (tm, tn, tk) tile; a tm stacking whole products streams them back to back."""
    tm, tn, tk = tile
    rows = g.m_pad if tm > g.m_pad else tm
    return rows, -(-tn // mxu_dim), -(-tk // mxu_dim), max(1, tm // g.m_pad)


def _bounds_mxu(space: Any, pl: Any, mxu_dim: int) -> tuple[int, int, int, int] | None:
    """The same for a `Bounds` tile: its block's rows, output columns and contraction."""
    if not space.rows:
        return None
    ext = pl.ext
    rows = -(-math.prod(ext[d] for d in space.rows) // 8) * 8
    cols = ext[space.cols] if space.cols is not None else 1
    feats = math.prod(ext[d] for d in space.features)
    taps = math.prod(ext[d] for d in space.taps)
    k = taps * -(-feats // mxu_dim) * mxu_dim if space.deep else taps * feats
    return rows, -(-cols // mxu_dim), max(1, -(-k // mxu_dim)), 1


def _pipeline(c: float, i: float, o: float, steps: int, double_buffer: bool) -> float:
    """Seconds of `steps` grid steps with per-step compute c, loads i and stores o."""
    if not double_buffer:
        return steps * (i + c + o)
    if steps == 1:
        return i + c + o
    return i + max(c, i) + (steps - 2) * max(c, i + o) + max(c, o) + o


def _split_occupancy(split: str, rows: int, nb: int, kb: int, mxus: int, mxu_dim: int
                     ) -> float:
    """The share of the MXUs the split flag keeps busy: blocks dealt out across columns
    (n) or contraction (k) leave the last round partly idle; rows dealt out (m) fall under
    the weight-load floor when each MXU gets fewer than mxu_dim."""
    if split == "n":
        return nb / (-(-nb // mxus) * mxus)
    if split == "k":
        return kb / (-(-kb // mxus) * mxus)
    per = -(-rows // mxus)
    return rows / (mxus * max(per, mxu_dim))


__all__ = ["ANALYTICAL", "EXTRA_FEATURES", "FEATURES", "NODE_FEATURES", "TASKS", "Featurizer",
           "KernelSample", "op_kind", "op_vocab", "schema"]
