"""The tuner's use of a cost model: rank proposed candidates and measure the top k.

`ModelTopK` wraps any search strategy. Graph-level phases: each round the strategy
proposes `pool` candidates, the model predicts each one's time (the sum of its kernels'
predicted times; kernels seen before are not predicted again) and the `k_graph` fastest
are measured (XTAT measures the top 10). Kernel-level phases with the exhaustive
strategy: for each kernel, every tile (or flags) option is ranked by the model's score of
that kernel's configuration and the `k_kernel` best are measured (top 5); the options
left out are told to the strategy as not worth measuring (an infinite time), so it
settles the kernel on what was measured. The wrapped strategy is told only the times it
would have been told, so its behaviour otherwise is unchanged. The `parallel` strategy
(and `revisit`, which runs it) is not ranked: each of its rounds measures an option of
every kernel at once, so leaving a round out saves one measurement and loses every
kernel's option in it.

The phases of one tuning run share a `Memory`: the candidates measured so far (a graph
round takes the k best-ranked among the proposals not measured yet: a repeat costs no
measurement but would take one of the k places) and, per kernel, the options already
offered. When the tuner goes through its schedule again with budget left (`Tuner.run`
with a cost model), a kernel phase offers each kernel the next k options in the model's
order, not those measured in an earlier round: the budget goes deeper into the model's
ranking instead of ending with the first k.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy

K_GRAPH = 10
K_KERNEL = 5
POOL = 40
KERNEL_PASSES = ("tiling", "flags")


class CandidateCosts:
    """Predicted candidate times from a kernel cost model, cached per kernel configuration."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self._pred: dict[tuple, float] = {}
        self.predicted = 0  # kernel configurations predicted (for throughput reports)

    def times(self, cands: Sequence[Candidate]) -> np.ndarray:
        new: dict[tuple, tuple] = {}
        for c in cands:
            f = c.final
            for key, sig in zip(f.sig_keys, f.signatures, strict=True):
                k = (key, f.tiles[key], f.flags[key])
                if k not in self._pred and k not in new:
                    new[k] = (sig, f.tiles[key], f.flags[key])
        if new:
            got = self.model.predict_items(list(new.values()))
            self._pred.update(zip(new, (float(v) for v in got), strict=True))
            self.predicted += len(new)
        out = []
        for c in cands:
            f = c.final
            out.append(sum(self._pred[(k, f.tiles[k], f.flags[k])] for k in f.sig_keys))
        return np.asarray(out)

    def scores(self, cands: Sequence[Candidate], key: str) -> np.ndarray:
        """The model's ranking score of kernel `key`'s configuration in each candidate."""
        its = []
        for c in cands:
            f = c.final
            its.append((f.signatures[f.sig_keys.index(key)], f.tiles[key], f.flags[key]))
        return np.asarray(self.model.score_items(its))


def _changed_key(base: Candidate, cands: Sequence[Candidate]) -> str | None:
    """The one kernel whose configuration the candidates change (None: not one kernel)."""
    bf = base.final
    keys: set[str] = set()
    for c in cands:
        f = c.final
        if f.sig_keys != bf.sig_keys:
            return None
        keys |= {k for k in f.tiles if (f.tiles[k], f.flags[k]) != (bf.tiles[k], bf.flags[k])}
        if len(keys) > 1:
            return None
    return next(iter(keys)) if keys else None


class Memory:
    """What the ranked phases of one tuning run measured and offered (see the module
    docstring)."""

    def __init__(self) -> None:
        self.measured: set[str] = set()  # candidate keys
        self.offered: set[tuple[str, str, Any]] = set()  # (kernel, "tile"|"flags", option)


def _option(base: Candidate, cand: Candidate, key: str) -> tuple[str, str, Any]:
    """Kernel `key`'s option in `cand`: its tile when that differs from `base`'s, else its
    flags (a kernel-level site changes one of them)."""
    f = cand.final
    if f.tiles[key] != base.final.tiles[key]:
        return (key, "tile", f.tiles[key])
    return (key, "flags", f.flags[key])


class ModelTopK(SearchStrategy):
    def __init__(self, inner: SearchStrategy, costs: CandidateCosts, k_graph: int = K_GRAPH,
                 k_kernel: int = K_KERNEL, pool: int = POOL, memory: Memory | None = None
                 ) -> None:
        super().__init__()
        self.inner = inner
        self.name = f"{inner.name}+model"
        self.costs = costs
        self.k_graph, self.k_kernel, self.pool = k_graph, k_kernel, pool
        self.memory = memory if memory is not None else Memory()
        self.rejected: list[Candidate] = []
        self.proposed = 0

    @property
    def site_wise(self) -> bool:
        return self.inner.name == "exhaustive"

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        if self.site_wise:
            # The model, not the analytical order, picks what is measured of each site.
            self.inner.opts.pop("top_k", None)
        self.kernel_level = all(p in KERNEL_PASSES for p in passes)
        self.inner.start(ctx, passes, budget)

    def ask(self, n: int) -> list[Candidate]:
        if not self.inner.rankable:  # module docstring
            return self.inner.ask(n)
        while True:
            if self.site_wise:
                props = self.inner.ask(1 << 30)  # the current site's every option
                k = self.k_kernel if self.kernel_level else self.k_graph
            else:
                props = self.inner.ask(max(self.pool, n))
                k = max(1, min(self.k_graph, len(props)))
            if not props:
                return []
            uniq = list({c.key: c for c in props}.values())
            self.proposed += len(uniq)
            base = self.ctx.best or self.ctx.default
            key = _changed_key(base, uniq) if self.site_wise else None
            if key is not None and self.kernel_level:
                # Options offered in an earlier pass over this kernel are left out, and so
                # is the one it has now (measured with the best candidate).
                kind = _option(base, uniq[0], key)[1]
                now = base.final.tiles[key] if kind == "tile" else base.final.flags[key]
                self.memory.offered.add((key, kind, now))
                uniq = [c for c in uniq if _option(base, c, key) not in self.memory.offered]
                if not uniq:  # every option of this kernel offered: the next site
                    self.inner.tell(props, [math.inf] * len(props))
                    continue
            elif not self.site_wise:
                fresh = [c for c in uniq if c.key not in self.memory.measured]
                uniq = fresh or uniq
            pred = self.costs.scores(uniq, key) if key is not None else self.costs.times(uniq)
            order = sorted(range(len(uniq)), key=lambda i: (pred[i], i))
            chosen = [uniq[i] for i in order[:k]]
            if key is not None and self.kernel_level:
                self.memory.offered.update(_option(base, c, key) for c in chosen)
            if self.site_wise:
                picked = {c.key for c in chosen}
                self.rejected = [c for c in props if c.key not in picked]
            return chosen

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        cands, ts = list(candidates), list(times)
        self.memory.measured.update(c.key for c in cands)
        if self.rejected:
            cands += self.rejected
            ts += [math.inf] * len(self.rejected)
            self.rejected = []
        self.inner.tell(cands, ts)


def wrapper(model: Any, k_graph: int = K_GRAPH, k_kernel: int = K_KERNEL, pool: int = POOL
            ) -> Any:
    """A `Tuner(wrap=...)` hook ranking every phase's proposals by `model` (its phases
    share one `Memory`)."""
    costs = CandidateCosts(model)
    memory = Memory()

    def wrap(strategy: SearchStrategy, phase: Any) -> SearchStrategy:
        return ModelTopK(strategy, costs, k_graph, k_kernel, pool, memory)

    wrap.costs = costs  # type: ignore[attr-defined]
    wrap.memory = memory  # type: ignore[attr-defined]
    return wrap


__all__ = ["K_GRAPH", "K_KERNEL", "POOL", "CandidateCosts", "Memory", "ModelTopK", "wrapper"]
