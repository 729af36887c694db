"""Timing a compiled graph on the simulated core: the per-kernel sum and the seeded noise.

Kernels run one after another on one TensorCore, so the graph's time is the sum of its
kernels' times (bitcasts are free views). `time_compiled` returns the total and a
per-kernel breakdown (`Simulation`); `with_noise` turns a run into a noisy measurement.
The roofline lower bound of a graph is max(useful FLOPs / peak, compulsory bytes /
bandwidth), where compulsory bytes are the logical (unpadded) bytes of the inputs, the
parts of the weights that are read (a whole matrix, but only the looked-up rows of an
embedding table) and the outputs.

This is the driver's timing core: `Simulator.simulate` and `.measure` call it, and the
module-level `simulate.simulate`, `measure` and `evaluate` (which make a fresh
`Simulator` when none is given) sit above the driver. (Moved out of `simulate`.)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from superopt.ir.graph import Graph
from superopt.tpu_sim.bounds_rules import bounds_rule
from superopt.tpu_sim.config import Flags, Tile
from superopt.tpu_sim.hardware import DEFAULT, Hardware
from superopt.tpu_sim.kernel_time import KernelCost
from superopt.tpu_sim.kernels import is_source
from superopt.tpu_sim.layout import padded_bytes, row_major
from superopt.tpu_sim.op_costs import OpView, op_flops, op_rule
from superopt.tpu_sim.pipeline import Caches, Compiled

NOISE_SIGMA = 0.015


@dataclass(frozen=True, slots=True)
class KernelReport:
    root: int
    name: str  # the member ops, e.g. "conv2d+batch_norm+relu"
    nodes: int
    tile: Tile
    flags: Flags
    cost: KernelCost

    @property
    def time(self) -> float:
        return self.cost.time

    @property
    def bound(self) -> str:
        return self.cost.bound

    @property
    def intensity(self) -> float:
        """FLOPs per HBM byte."""
        return self.cost.flops / self.cost.bytes if self.cost.bytes else math.inf


@dataclass(frozen=True)
class Simulation:
    """The simulated run of one compiled graph (times in seconds)."""

    name: str
    hw: Hardware
    time: float
    kernels: tuple[KernelReport, ...]
    flops: float  # useful FLOPs of the source graph
    executed_flops: float  # FLOPs the kernels execute (duplicated producers count twice)
    bytes: float  # HBM bytes the kernels move (padded, with re-reads)
    compulsory_bytes: float
    problems: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def flops_fraction(self) -> float:
        """Achieved fraction of the MXU peak (useful FLOPs)."""
        return self.flops / self.time / self.hw.peak_flops if self.time > 0 else 0.0

    @property
    def bandwidth_fraction(self) -> float:
        return self.bytes / self.time / self.hw.hbm_bytes_per_s if self.time > 0 else 0.0

    @property
    def roofline(self) -> float:
        """Lower bound on the graph's time: max(FLOPs / peak, compulsory bytes / bandwidth)."""
        return max(self.flops / self.hw.peak_flops,
                   self.compulsory_bytes / self.hw.hbm_bytes_per_s)

    @property
    def roofline_ratio(self) -> float:
        return self.time / self.roofline if self.roofline > 0 else math.inf

    def top(self, k: int = 10) -> list[KernelReport]:
        return sorted(self.kernels, key=lambda r: -r.time)[:k]

    def breakdown(self) -> Mapping[str, float]:
        """Seconds by what bounds each kernel (compute, memory, overhead)."""
        out = {"compute": 0.0, "memory": 0.0, "overhead": 0.0}
        for r in self.kernels:
            out[r.bound] += r.time
        return MappingProxyType(out)

    def to_json(self) -> dict:
        return {
            "model": self.name, "hardware": self.hw.name, "time_s": self.time,
            "kernels": len(self.kernels), "flops": self.flops,
            "executed_flops": self.executed_flops, "hbm_bytes": self.bytes,
            "compulsory_bytes": self.compulsory_bytes, "roofline_s": self.roofline,
            "roofline_ratio": self.roofline_ratio, "flops_fraction": self.flops_fraction,
            "bandwidth_fraction": self.bandwidth_fraction, "valid": self.valid,
            "problems": list(self.problems),
            "per_kernel": [
                {"root": r.root, "name": r.name, "nodes": r.nodes, "tile": list(r.tile),
                 "flags": {"double_buffer": r.flags.double_buffer, "unroll": r.flags.unroll,
                           "mxu_split": r.flags.mxu_split},
                 "time_s": r.time, "compute_s": r.cost.compute, "memory_s": r.cost.memory,
                 "overhead_s": r.cost.overhead, "bound": r.bound, "flops": r.cost.flops,
                 "bytes": r.cost.bytes, "steps": r.cost.steps, "vmem_bytes": r.cost.vmem}
                for r in self.kernels],
        }


def compulsory_bytes(graph: Graph, hw: Hardware = DEFAULT) -> float:
    """Logical bytes that any execution must move: inputs, the read part of each weight,
    outputs."""
    reads: dict[int, float | None] = {}  # source -> logical bytes read (None: all of it)
    for n in graph.nodes:
        partial: tuple[float | None, ...] = ()
        if not bounds_rule(n.op).reads_operands_whole:  # ask its cost rule what it reads
            in_types = tuple(graph.type_of(v) for v in n.inputs)
            view = OpView(n, in_types, tuple(row_major(t.rank) for t in in_types),
                          (row_major(n.type.rank),), hw)
            partial = op_rule(n.op).cost(view).reads
        for i, v in enumerate(n.inputs):
            p = partial[i] if i < len(partial) else None
            if p is None or (v.node in reads and reads[v.node] is None):
                reads[v.node] = None
                continue
            t = graph.type_of(v)  # rules report padded bytes: keep their share of the array
            share = min(1.0, p / max(1, padded_bytes(t, row_major(t.rank))))
            reads[v.node] = (reads.get(v.node) or 0.0) + share * t.nbytes
    total = 0.0
    for n in graph.nodes:
        if n.op == "input":
            total += n.type.nbytes
        elif is_source(n.op):
            r = reads.get(n.id)
            total += n.type.nbytes if r is None else min(n.type.nbytes, r)
    return total + sum(graph.type_of(v).nbytes for v in graph.outputs)


def graph_totals(graph: Graph, hw: Hardware) -> tuple[float, float]:
    """(useful FLOPs, compulsory bytes) of a graph (`Simulator.graph_totals` caches it)."""
    flops = sum(op_flops(n, tuple(graph.type_of(v) for v in n.inputs)) for n in graph.nodes)
    return flops, compulsory_bytes(graph, hw)


def time_compiled(compiled: Compiled, sim: Caches) -> Simulation:
    """The noise-free run of `compiled` with `sim`'s kernel costs (the caller pauses the
    garbage collector: `Simulator.simulate`)."""
    model = sim.kernels
    tiles = compiled.config.tiles
    flags_of = compiled.config.flags
    reports = []
    total = executed = moved = 0.0
    problems = []
    for k, sig in zip(compiled.kernels, compiled.signatures, strict=True):
        tile = tiles[k.root]
        flags = flags_of[k.root]
        cost = model.cost(sig, tile, flags)
        if not cost.valid:
            problems.append(f"kernel %{k.root}: {cost.problem}")
        reports.append(KernelReport(k.root, model.name(sig), len(k.nodes), tile, flags, cost))
        total += cost.time
        executed += cost.flops
        moved += cost.bytes
    flops, compulsory = sim.graph_totals(compiled.source)
    return Simulation(compiled.source.name, compiled.hw, total if not problems else math.inf,
                      tuple(reports), flops, executed, moved, compulsory, tuple(problems))


def compiled_time(compiled: Compiled, sim: Caches) -> float:
    """`time_compiled(compiled, sim).time` alone: the kernels' times summed in the same
    order (the same float), without the reports or the graph's FLOP and byte totals, which
    a search pricing thousands of graphs never reads (a tenth of its time)."""
    model = sim.kernels
    tiles = compiled.config.tiles
    flags_of = compiled.config.flags
    total = 0.0
    for k, sig in zip(compiled.kernels, compiled.signatures, strict=True):
        cost = model.cost(sig, tiles[k.root], flags_of[k.root])
        if not cost.valid:
            return math.inf
        total += cost.time
    return total


def _digest(sim: Simulation) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(np.array([r.time for r in sim.kernels], dtype=np.float64).tobytes())
    return int.from_bytes(h.digest(), "little")


def with_noise(run: Simulation, seed: int, sigma: float = NOISE_SIGMA) -> float:
    """`run`'s time times seeded log-normal noise (`simulate.measure` documents it): the
    noise depends on the seed and on the kernel times, so a repeat reproduces it."""
    if not math.isfinite(run.time):
        return run.time
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, _digest(run)])
    return run.time * float(np.exp(sigma * rng.standard_normal()))


__all__ = ["NOISE_SIGMA", "KernelReport", "Simulation", "compiled_time", "compulsory_bytes",
           "graph_totals", "time_compiled", "with_noise"]
