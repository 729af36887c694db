"""AutoTVM-style search (Chen et al., "Learning to Optimize Tensor Programs"): a
gradient-boosted ranking model of the measurements so far, simulated annealing on the
model to find promising unmeasured points, epsilon-greedy random picks and a
diversity-aware choice of the batch.

Each round (`plan` proposals; 16 by default, where AutoTVM uses 64: budgets here are
hundreds of measurements, and a smaller round puts the model's updates to use sooner):

1. fit xgboost with `rank:pairwise` on the knob features of every measurement (one-hot
   site options, `modelbased.FlatSpace`), label best/time (0 for an invalid candidate):
   only the order matters to the search, and a rank loss spends the trees on it;
2. anneal `sa_points` points in parallel on the model's score (each step changes one
   site; T falls linearly from 1 to 0 in units of the score's spread over the starting
   points, so the schedule does not depend on the ranker's arbitrary scale), starting
   from the fastest measurements and their mutants, stopping after `sa_stop` steps
   without a new point in the kept set; the best `pool`x the batch unseen points are kept;
3. pick the batch from them greedily by score rank plus `diversity` times the share of a
   point's changes (site, option pairs) not yet covered by the points picked (AutoTVM's
   submodular pick, which keeps a batch from being ten variants of one change);
4. `epsilon` of the batch (5%) are random proposals, so a wrong model cannot starve a
   region of measurements.

xgboost is imported on the first fit, never at import time.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from superopt.xtat.strategies.base import register
from superopt.xtat.strategies.modelbased import ModelBased


@register("autotvm")
class AutoTVM(ModelBased):
    OPTIONS = ModelBased.OPTIONS | {
        "plan": (int, 1, None, 16),
        "epsilon": (float, 0.0, 1.0, 0.05),
        "clip": (float, 0.05, 1.0, 0.5),
        "sa_points": (int, 1, None, 128),
        "sa_steps": (int, 1, None, 150),
        "sa_stop": (int, 1, None, 50),
        "pool": (int, 1, None, 3),
        "diversity": (float, 0.0, None, 1.0),
        "rounds": (int, 1, None, 80),
        "depth": (int, 1, 16, 3),
        "eta": (float, 1e-4, 1.0, 0.3),
        "threads": (int, 1, None, 1),
    }

    def start(self, ctx: Any, passes: Any, budget: int) -> None:
        super().start(ctx, passes, budget)
        self.booster: Any = None

    def fit(self, X: np.ndarray, times: np.ndarray) -> None:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        import xgboost as xgb

        finite = np.isfinite(times)
        if not finite.any():
            self.booster = None
            return
        y = np.zeros(len(times))
        y[finite] = times[finite].min() / times[finite]
        # Below the median all are "bad" (equal labels: no pair to order), so the ranker
        # spends its trees on ordering the good half, where the search looks.
        y = np.maximum(y, np.quantile(y, 1.0 - self.o["clip"]))
        dm = xgb.DMatrix(self.space.csr(X), label=y)
        dm.set_group([len(y)])
        o = self.o
        params = {"objective": "rank:pairwise", "max_depth": o["depth"], "eta": o["eta"],
                  "min_child_weight": 1.0, "gamma": 1e-4, "nthread": o["threads"],
                  "seed": (self.seed + self.rounds) % (2**31 - 1), "verbosity": 0}
        self.booster = xgb.train(params, dm, o["rounds"])

    def predict(self, xs: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(self.space.csr(xs)))

    def propose(self, k: int) -> list[np.ndarray]:
        if self.booster is None:
            return []
        o = self.o
        want = k - int(o["epsilon"] * k)
        if want <= 0:
            return []
        rng = self.ctx.rng
        space = self.space
        n = o["sa_points"]
        elite = self.elite(n)
        points = elite[np.arange(n) % len(elite)]
        # The fastest measurements themselves, then mutants of them.
        if n > len(elite):
            points[len(elite):] = space.mutate(rng, points[len(elite):], 2)
        scores = self.predict(points)
        scale = float(np.std(scores)) or 1.0
        keep = o["pool"] * want
        top: dict[bytes, tuple[float, np.ndarray]] = {}
        floor = -np.inf

        def offer(xs: np.ndarray, ss: np.ndarray) -> bool:
            nonlocal floor
            changed = False
            for x, s in zip(xs, ss, strict=True):
                if s <= floor:
                    continue
                c = self.code(x)
                if c in top or c in self.seen:
                    continue
                top[c] = (float(s), x.copy())
                changed = True
            if len(top) > keep:
                kept = sorted(top.items(), key=lambda e: -e[1][0])[:keep]
                top.clear()
                top.update(kept)
                floor = kept[-1][1][0]
            return changed

        offer(points, scores)
        idle = 0
        steps = o["sa_steps"]
        for step in range(steps):
            temp = 1.0 - step / steps
            cand = space.mutate(rng, points, 1)
            new = self.predict(cand)
            delta = (new - scores) / scale
            accept = (delta >= 0) | (rng.random(n) < np.exp(np.minimum(
                0.0, delta) / max(temp, 1e-5)))
            points[accept], scores[accept] = cand[accept], new[accept]
            idle = 0 if offer(cand, new) else idle + 1
            if idle >= o["sa_stop"]:
                break
        ranked = sorted(top.values(), key=lambda e: -e[0])
        return self._diverse([x for _, x in ranked], want)

    def _diverse(self, ranked: list[np.ndarray], k: int) -> list[np.ndarray]:
        """Greedy pick of `k` of the `ranked` points (best first) by rank score plus
        `diversity` x the share of their changes from the best not yet covered."""
        w = self.o["diversity"]
        if w == 0 or len(ranked) <= k:
            return ranked[:k]
        ref = self.elite(1)[0]
        changes = [{(int(i), int(x[i])) for i in np.nonzero(x != ref)[0]} for x in ranked]
        rank_score = 1.0 - np.arange(len(ranked)) / len(ranked)
        covered: set[tuple[int, int]] = set()
        left = list(range(len(ranked)))
        picked: list[np.ndarray] = []
        while left and len(picked) < k:
            gains = [rank_score[i] + w * len(changes[i] - covered) / max(1, len(changes[i]))
                     for i in left]
            j = left.pop(int(np.argmax(gains)))
            covered |= changes[j]
            picked.append(ranked[j])
        return picked


__all__ = ["AutoTVM"]
