"""Small graphs and a fake timer for the real-target tests (`--target cpu`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder
from superopt.rewrite.check import SideBySide, StopRule


def dense_branches(n: int = 4, width: int = 32, rows: int = 8) -> Graph:
    """`n` dense layers (matmul + bias, relu) on one input, summed: every branch is a
    fuse_matmul_bias point, every pair a merge point."""
    b = GraphBuilder("dense_branches")
    x = b.input("x", (rows, width))
    total = None
    for i in range(n):
        w = b.weight(f"w{i}", (width, width))
        bias = b.weight(f"b{i}", (width,))
        y = b.op("relu", b.op("ewadd", b.op("matmul", x, w), bias))
        total = y if total is None else b.op("ewadd", total, y)
    return b.build([total])


class FakeTimer:
    """Per-run seconds = `cost(graph)` times log-normal noise of `sigma` (seeded), in the
    shape onnxruntime's timer returns; counts the graphs it timed."""

    def __init__(self, cost: Callable[[Graph], float], sigma: float = 0.01,
                 seed: int = 0) -> None:
        self.cost = cost
        self.sigma = sigma
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[str, ...]] = []
        self.rounds_run: list[int] = []  # per call: rounds before the stop rule ended it

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: StopRule | None = None) -> SideBySide:
        self.calls.append(tuple(g.structural_hash for g in graphs))
        runs: list[list[float]] = [[] for _ in graphs]
        for r in range(rounds):
            for k, g in enumerate(graphs):
                runs[k].append(float(self.cost(g) * np.exp(self.sigma
                                                           * self.rng.standard_normal())))
            if stop is not None and r + 1 < rounds and stop(runs):
                break
        times = tuple(tuple(t) for t in runs)
        self.rounds_run.append(len(runs[0]) if runs else 0)
        return SideBySide(tuple(float(np.median(t)) for t in times),
                          tuple(min(t) for t in times), times, "cpu", 1)


def node_count(graph: Graph) -> float:
    """A cost that rewards removing ops: 1 ms per op that runs (weight-only ops are
    folded before a model runs, as onnxruntime's constant folding does)."""
    from superopt.rewrite.fold import weight_only

    folded = weight_only(graph)
    return 1e-3 * sum(1 for n in graph.nodes if not folded[n.id])
