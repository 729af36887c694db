"""The gradient-boosted baseline (AutoTVM style): xgboost on the hand features.

Two boosters, as the paper trains one model per task kind: a regressor
(`reg:squarederror` on log seconds, every sample: absolute time, which `predict` and a
candidate's sum use) and a ranker (`rank:pairwise` within each tile or flags group, which
`score` uses to order one kernel's configurations). Without grouped samples the ranker is
skipped and `score` falls back to the regressor.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.xtat.models.base import CostModel, Item, items, register


def _xgb() -> Any:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xgboost

    return xgboost


@register("gbt")
class GBT(CostModel):
    """Options: `rounds` (boosting rounds, default 300), `depth` (6), `eta` (0.1),
    `threads` (2)."""

    def _params(self) -> dict[str, Any]:
        o = self.opts
        return {"max_depth": int(o.get("depth", 6)), "eta": float(o.get("eta", 0.1)),
                "nthread": int(o.get("threads", 2)), "subsample": 0.9,
                "min_child_weight": 1.0, "seed": int(o.get("seed", 0))}

    def _fit(self, data: Any) -> None:
        xgb = _xgb()
        rounds = int(self.opts.get("rounds", 300))
        samples = data.samples
        x = self.feat.matrix(items(samples))
        y = np.log(np.asarray([s.measured for s in samples]))
        self.reg = xgb.train(self._params() | {"objective": "reg:squarederror"},
                             xgb.DMatrix(x, label=y), rounds)
        groups = data.groups()
        self.rank = None
        if groups:
            names = sorted(groups)
            rows = [s for g in names for s in groups[g]]
            dm = xgb.DMatrix(self.feat.matrix(items(rows)),
                             label=self._relevance(names, groups))
            dm.set_group([len(groups[g]) for g in names])
            self.rank = xgb.train(self._params() | {"objective": "rank:pairwise"}, dm, rounds)

    @staticmethod
    def _relevance(names: list[str], groups: dict[str, list[Any]]) -> np.ndarray:
        # rank:pairwise orders by label, higher first: the fastest gets the highest label
        # (the negative log time relative to the group's best keeps the spacing).
        out = []
        for g in names:
            t = np.log(np.asarray([s.measured for s in groups[g]]))
            out.append(t.min() - t)
        return np.concatenate(out)

    def predict_items(self, its: Sequence[Item]) -> np.ndarray:
        if not its:
            return np.zeros(0)
        xgb = _xgb()
        return np.exp(self.reg.predict(xgb.DMatrix(self.feat.matrix(its))))

    def score_items(self, its: Sequence[Item]) -> np.ndarray:
        if self.rank is None or not its:
            return super().score_items(its)
        xgb = _xgb()
        return -self.rank.predict(xgb.DMatrix(self.feat.matrix(its)))

    def state(self) -> dict[str, Any]:
        return {"reg": bytes(self.reg.save_raw("ubj")),
                "rank": bytes(self.rank.save_raw("ubj")) if self.rank is not None else None}

    def set_state(self, state: dict[str, Any]) -> None:
        xgb = _xgb()
        self.reg = xgb.Booster(params={"nthread": int(self.opts.get("threads", 2))})
        self.reg.load_model(bytearray(state["reg"]))
        self.rank = None
        if state.get("rank") is not None:
            self.rank = xgb.Booster(params={"nthread": int(self.opts.get("threads", 2))})
            self.rank.load_model(bytearray(state["rank"]))


__all__ = ["GBT"]
