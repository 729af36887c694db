"""What a cost model sees of a kernel configuration: one `KernelSample` per measured
(kernel signature, tile, flags), hand features per sample (the gradient-boosted model's
input, AutoTVM style) and an op graph per signature (the GraphSAGE model's input).

Hand features (`FEATURES`, in this order) are computed from the kernel's signature through
the simulator's compile-time analysis only (`KernelCosts.stats`, the tile's grid or
`Bounds` plan): work (FLOPs, padded MXU FLOPs, vector cycles), bytes by operand role,
padded GEMM dims, op counts by kind, the tile (dims, steps, bytes moved with re-reads,
transfer count and size, the tile buffers' VMEM), the flags, and the default compiler's
analytical estimate. Nothing here reads the simulated time (`KernelCosts.cost`), so a
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
from functools import lru_cache
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
FLAG_FEATURES = ("double_buffer", "unroll", "split_n", "split_m", "split_k")
FEATURES = STAT_FEATURES + TILE_FEATURES + FLAG_FEATURES

_MXU_OPS = frozenset({"conv2d", "matmul", "batch_matmul", "dense", "linear", "einsum"})
_LAYOUT_OPS = frozenset({"layout", "transpose", "reshape", "copy", "concat", "slice", "pad"})
_REDUCE_OPS = frozenset({"reduce_sum", "reduce_mean", "reduce_max", "softmax", "pool2d",
                         "max_pool2d", "avg_pool2d", "global_avg_pool", "layer_norm",
                         "batch_norm"})

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
        mxu = sum(op in _MXU_OPS for op in s.ops)
        lay = sum(op in _LAYOUT_OPS for op in s.ops)
        red = sum(op in _REDUCE_OPS for op in s.ops)
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
        kc, hw = self.kc, self.hw
        s = kc.stats(sig)
        if isinstance(tile, Bounds):
            space = kc.space(sig)
            pl = bounds_module.plan(space, tile)
            ins, outs, in_b, out_b = bounds_module.transfers(space, pl)
            steps = pl.steps
            dims = list(tile.output) + list(tile.kernel)
            vmem = bounds_module.vmem(space, pl, 2 if flags.double_buffer else 1, 0.0)
        else:
            gr = grid(s, tile)
            steps = gr.steps
            in_b, out_b = gr.in_bytes, gr.out_bytes
            ins, outs = gr.transfers[:-1], gr.transfers[-1:]
            dims = list(tile)
            vmem = gr.vmem_io * (2 if flags.double_buffer else 1)
        dims = [*dims, 0, 0, 0][:3]
        n_in = sum(c for c, _, _ in ins)
        n_out = sum(c for c, _, _ in outs)
        in_size = sum(c * b for c, b, _ in ins) / max(1.0, n_in)
        in_run = min((r for c, _, r in ins if c), default=0.0)
        out_run = min((r for c, _, r in outs if c), default=0.0)
        compute = analytical_compute(s, hw)
        memory = (in_b + out_b) / hw.hbm_bytes_per_s
        est = analytical(compute, memory, hw)
        return [float(isinstance(tile, Bounds)), _lg(dims[0]), _lg(dims[1]), _lg(dims[2]),
                _lg(math.prod(max(1, d) for d in dims)), _lg(steps), _lg(in_b + out_b),
                _lg(n_in), _lg(in_size), _lg(in_run), _lg(n_out), _lg(out_run), _lg(vmem),
                math.log(est), math.log(est / max(1, steps)), math.log(compute + 1e-12),
                math.log(memory + 1e-12)]

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
            got = self._rows[key] = np.asarray(
                self.stat_row(sig) + self.tile_row(sig, tile, flags) + self.flag_row(flags),
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


__all__ = ["FEATURES", "NODE_FEATURES", "TASKS", "Featurizer", "KernelSample", "op_vocab",
           "schema"]
