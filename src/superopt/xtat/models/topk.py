"""The tuner's use of a cost model: rank proposed candidates and measure the top k.

`ModelTopK` wraps any search strategy. Graph-level phases: each round the strategy
proposes `pool` candidates, the model predicts each one's time (the sum of its kernels'
predicted times; kernels seen before are not predicted again) and the `k_graph` fastest
are measured (XTAT measures the top 10). Kernel-level phases with the exhaustive
strategy: for each kernel, every tile (or flags) option is ranked by the model's score of
that kernel's configuration and the `k_kernel` best are measured (top 5); the options
left out are told to the strategy as not worth measuring (an infinite time), so it
settles the kernel on what was measured. The wrapped strategy is told only the times it
would have been told, so its behaviour otherwise is unchanged.
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


class ModelTopK(SearchStrategy):
    def __init__(self, inner: SearchStrategy, costs: CandidateCosts, k_graph: int = K_GRAPH,
                 k_kernel: int = K_KERNEL, pool: int = POOL) -> None:
        super().__init__()
        self.inner = inner
        self.name = f"{inner.name}+model"
        self.costs = costs
        self.k_graph, self.k_kernel, self.pool = k_graph, k_kernel, pool
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
        pred = self.costs.scores(uniq, key) if key is not None else self.costs.times(uniq)
        order = sorted(range(len(uniq)), key=lambda i: (pred[i], i))
        chosen = [uniq[i] for i in order[:k]]
        if self.site_wise:
            picked = {c.key for c in chosen}
            self.rejected = [c for c in props if c.key not in picked]
        return chosen

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        cands, ts = list(candidates), list(times)
        if self.rejected:
            cands += self.rejected
            ts += [math.inf] * len(self.rejected)
            self.rejected = []
        self.inner.tell(cands, ts)


def wrapper(model: Any, k_graph: int = K_GRAPH, k_kernel: int = K_KERNEL, pool: int = POOL
            ) -> Any:
    """A `Tuner(wrap=...)` hook ranking every phase's proposals by `model`."""
    costs = CandidateCosts(model)

    def wrap(strategy: SearchStrategy, phase: Any) -> SearchStrategy:
        return ModelTopK(strategy, costs, k_graph, k_kernel, pool)

    wrap.costs = costs  # type: ignore[attr-defined]
    return wrap


__all__ = ["K_GRAPH", "K_KERNEL", "POOL", "CandidateCosts", "ModelTopK", "wrapper"]
