"""Guided fusion search with a learned local-advantage function (Wu et al., "Learning
Local Advantage Functions"): a greedy search whose fusion moves go where the model
predicts that flipping a node's decision gains most.

Each round, for the current best candidate, the advantage model (`superopt.xtat.advantage`,
trained offline on small graphs) scores every fusion site's alternative options in the
candidate's context; each site is ranked by its best alternative. A proposal is the best
candidate with 1..`changes` moves:

- a fusion move (probability `fusion_share` when other passes are tuned too, else
  always): a site drawn uniformly from the top `alpha` of the ranking that this best
  candidate has not tried yet is set to its predicted best option, and every other fusion
  site within `k` hops of it in the graph is set to a random other option with
  probability `spread` (the k-neighbourhood mutation: a flip often pays only together with
  its neighbours'); once the top `alpha` is tried, the window slides down the ranking;
- a kernel move otherwise: one random tile or flags choice, as the random strategy makes.

A measured candidate faster than the best becomes the best (and its ranking is computed
afresh). `model="none"` ranks the sites in a random order instead: the same search
without the model (the ablation that shows what the model adds).

Options are checked at construction (a one-line error names the option and its range).
Everything random comes from the context's seeded generator, so a run is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from superopt.xtat.advantage import SHIPPED, AdvantageModel, FlipFeatures
from superopt.xtat.context import TuneContext
from superopt.xtat.space import Choice, Site
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy, register
from superopt.xtat.strategies.modelbased import check_options

_MODELS: dict[tuple[str, int], AdvantageModel] = {}


def load_model(path: str, threads: int = 1) -> AdvantageModel:
    """The advantage model at `path` ("": the shipped one), loaded once per process."""
    key = (path or str(SHIPPED), threads)
    got = _MODELS.get(key)
    if got is None:
        got = _MODELS[key] = AdvantageModel.load(key[0], threads)
    return got


@register("guided")
class Guided(SearchStrategy):
    OPTIONS: ClassVar[dict[str, tuple[type, float | None, float | None, Any]]] = {
        "model": (str, None, None, ""),
        "alpha": (float, 1e-3, 1.0, 0.05),
        "k": (int, 0, 8, 1),
        "spread": (float, 0.0, 1.0, 0.25),
        "fusion_share": (float, 0.0, 1.0, 0.5),
        "changes": (int, 1, None, 2),
        "threads": (int, 1, None, 1),
    }

    def __init__(self, **opts: Any) -> None:
        super().__init__(**opts)
        self.o = check_options("guided", opts, self.OPTIONS)
        self.model: AdvantageModel | None = None
        if self.o["model"] != "none":
            self.model = load_model(self.o["model"], self.o["threads"])

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.current = ctx.best or ctx.default
        self.current_time = ctx.best_time
        self.fusion = ctx.pipeline.index("fusion") if "fusion" in passes else None
        self.others = tuple(p for p in passes if p != "fusion")
        self.estimates: dict[str, float] = {}  # kernel signature digest -> estimate
        self.proposed: set[str] = set()
        self._rank_key = ""
        self._ranking: list[tuple[Site, Choice]] = []
        self._tried: set[str] = set()
        self._window = 0

    # -- the ranking ----------------------------------------------------------------------

    def _ranked(self) -> list[tuple[Site, Choice]]:
        """(site, its predicted best option), best first, for the current candidate."""
        cand = self.current
        if cand.key == self._rank_key:
            return self._ranking
        j = self.fusion
        fp = self.ctx.pipeline.passes[j]
        sites = fp.sites(cand.stages[j]).tunable
        moves: list[tuple[int, Choice]] = []
        if self.model is None:
            order = [int(i) for i in self.ctx.rng.permutation(len(sites))]
            best = []
            for i in order:
                cur = self.ctx.choice(cand, "fusion", sites[i])
                others = [o for o in sites[i].options if o != cur]
                best.append((sites[i], others[int(self.ctx.rng.integers(len(others)))]))
        else:
            feats = FlipFeatures(cand, j, fp.sim, self.estimates)
            node_of = fp.node_of(cand.stages[j])
            rows = []
            for i, s in enumerate(sites):
                cur = self.ctx.choice(cand, "fusion", s)
                for o in s.options:
                    if o != cur:
                        rows.append(feats.row(node_of[s.key], s, cur, o))
                        moves.append((i, o))
            pred = self.model.predict(np.asarray(rows, dtype=np.float32))
            top: dict[int, tuple[float, Choice]] = {}
            for (i, o), p in zip(moves, pred, strict=True):
                if i not in top or p > top[i][0]:
                    top[i] = (float(p), o)
            # Ties keep the site order, so the ranking is deterministic.
            order = sorted(top, key=lambda i: (-top[i][0], i))
            best = [(sites[i], top[i][1]) for i in order]
        self._rank_key, self._ranking = cand.key, best
        self._tried, self._window = set(), max(1, math.ceil(self.o["alpha"] * len(best)))
        return best

    def _neighbours(self, cand: Candidate, site: Site) -> list[Site]:
        """The fusion sites within `k` hops of `site`'s node in the laid-out graph."""
        j = self.fusion
        stage = cand.stages[j]
        fp = self.ctx.pipeline.passes[j]
        node_of = fp.node_of(stage)
        g = stage.laid.graph
        memo = stage.memo.setdefault("guided_site_of", {})
        if not memo:
            memo.update({n: k for k, n in node_of.items()})
        start = node_of[site.key]
        seen = {start}
        frontier = [start]
        for _ in range(self.o["k"]):
            nxt = []
            for n in frontier:
                for m in [v.node for v in g.node(n).inputs] + list(g.consumers[n]):
                    if m not in seen:
                        seen.add(m)
                        nxt.append(m)
            frontier = nxt
        sites = fp.sites(stage)
        return [sites[memo[n]] for n in sorted(seen - {start}) if n in memo
                and len(sites[memo[n]].options) > 1]

    # -- moves ------------------------------------------------------------------------------

    def _fusion_move(self, cand: Candidate) -> Candidate:
        ranked = self._ranked()
        if not ranked:
            return cand
        rng = self.ctx.rng
        pool = [m for m in ranked[:self._window] if m[0].key not in self._tried]
        while not pool and self._window < len(ranked):
            step = max(1, math.ceil(self.o["alpha"] * len(ranked)))
            self._window = min(len(ranked), self._window + step)
            pool = [m for m in ranked[:self._window] if m[0].key not in self._tried]
        if not pool:  # every site tried from this best: draw among all again
            pool = ranked
        site, target = pool[int(rng.integers(len(pool)))]
        self._tried.add(site.key)
        pipeline, store = self.ctx.pipeline, self.ctx.store
        if self.ctx.choice(cand, "fusion", site) != target:
            cand = pipeline.with_choice(cand, "fusion", site.key, target, store)
        for s in self._neighbours(cand, site):
            if rng.random() < self.o["spread"]:
                cur = self.ctx.choice(cand, "fusion", s)
                others = [o for o in s.options if o != cur]
                cand = pipeline.with_choice(cand, "fusion", s.key,
                                            others[int(rng.integers(len(others)))], store)
        return cand

    def _propose(self) -> Candidate:
        ctx = self.ctx
        cand = self.current
        for _ in range(1 + int(ctx.rng.integers(self.o["changes"]))):
            fusion = self.fusion is not None and (
                not self.others or ctx.rng.random() < self.o["fusion_share"])
            if fusion:
                cand = self._fusion_move(cand)
            elif self.others:
                cand = ctx.mutate(cand, self.others, 1)
        return cand

    def ask(self, n: int) -> list[Candidate]:
        out = []
        for _ in range(n):
            for _ in range(8):  # a few tries for a candidate not proposed before
                cand = self._propose()
                if cand.key not in self.proposed:
                    break
            self.proposed.add(cand.key)
            out.append(cand)
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for cand, t in zip(candidates, times, strict=True):
            if math.isfinite(t) and t < self.current_time:
                self.current, self.current_time = cand, t


__all__ = ["Guided", "load_model"]
