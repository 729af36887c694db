"""Running a compiled graph on the simulated core: `simulate` (exact) and `measure` (noisy).

Kernels run one after another on one TensorCore, so the graph's time is the sum of its
kernels' times (bitcasts are free views). `simulate` returns the total and a per-kernel
breakdown; `measure` adds seeded multiplicative noise of about 1.5% (log-normal), like a
real benchmark: the same seed and configuration always give the same number.

These module-level functions take an optional `sim` and make a fresh `Simulator` without
one, so they sit above the driver; the timing itself (`Simulation`, the roofline bound,
the noise) is `timing`'s, re-exported here under the names callers know.
"""

from __future__ import annotations

from superopt.ir.graph import Graph
from superopt.tpu_sim.compiler import compile_with
from superopt.tpu_sim.config import Config
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.layout import paused_gc
from superopt.tpu_sim.pipeline import Caches, Compiled
from superopt.tpu_sim.simulator import Simulator
from superopt.tpu_sim.timing import (
    NOISE_SIGMA,
    KernelReport,
    Simulation,
    compulsory_bytes,
    graph_totals,
    time_compiled,
    with_noise,
)


def _caches(compiled: Compiled, sim: Caches | None) -> Caches:
    """`sim`, else the simulator that compiled it, else a fresh one for its hardware."""
    if sim is not None:
        return sim
    if compiled.simulator is not None:
        return compiled.simulator
    return Simulator(compiled.hw)


def simulate(compiled: Compiled, sim: Caches | None = None) -> Simulation:
    """The noise-free simulated run: total time and a per-kernel breakdown. Kernel costs
    come from `sim`, else from the simulator that compiled it (`Compiled.simulator`)."""
    with paused_gc():
        return time_compiled(compiled, _caches(compiled, sim))


def measure(compiled: Compiled, seed: int = 0, sigma: float = NOISE_SIGMA,
            sim: Caches | None = None) -> float:
    """The simulated runtime with seeded multiplicative noise (log-normal, `sigma` ~ 1.5%).

    The noise depends on the seed and on the configuration's kernel times, so repeating a
    measurement with the same seed reproduces it exactly and two configurations measured
    with one seed do not share their noise."""
    return with_noise(simulate(compiled, sim), seed, sigma)


def evaluate(graph: Graph, config: Config | None = None, hw: Hardware | str | None = None,
             seed: int | None = None, sim: Simulator | None = None) -> float:
    """One candidate evaluation: compile under `config` (defaults elsewhere) and time it;
    with a seed the time is measured (noisy), else simulated. `sim` supplies the caches
    (a caller that evaluates repeatedly should hold one)."""
    compiled = compile_with(graph, config, hw, sim=sim)
    return simulate(compiled).time if seed is None else measure(compiled, seed)


__all__ = ["NOISE_SIGMA", "KernelReport", "Simulation", "compulsory_bytes", "evaluate",
           "graph_totals", "measure", "simulate"]
