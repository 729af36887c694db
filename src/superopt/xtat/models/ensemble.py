"""The ensemble: gbt and graphsage trained on the same data, averaged in log space.

`predict` is the geometric mean of the members' predicted times (the mean of their log
predictions, both trained on log time): the two see a kernel differently (hand features
in trees against the op graph in a network), so where their errors are not the same,
the average cancels part of them. `score` ranks one kernel's configurations by the mean
of the members' scores, each standardised over the items scored (the gbt ranker's
margins and graphsage's log times are on different scales).

Options: `gbt` and `graphsage` (dicts: each member's options), `weight` (the gbt
member's weight in both averages, default 0.5). Nothing is fitted to the test data: the
equal weights are fixed, and the ensemble was chosen on validation folds of the training
models (benchmarks/costmodel.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.xtat.models.base import CostModel, Item, create, register

MEMBERS = ("gbt", "graphsage")


@register("ensemble")
class Ensemble(CostModel):
    def __init__(self, hardware: str = "v4", **opts: Any) -> None:
        super().__init__(hardware, **opts)
        self.members = {name: create(name, hardware, **dict(opts.get(name, {})))
                        for name in MEMBERS}
        self.weight = float(opts.get("weight", 0.5))

    @classmethod
    def of(cls, gbt: CostModel, graphsage: CostModel, weight: float = 0.5) -> Ensemble:
        """An ensemble of two members already trained on the same data (no training)."""
        graphsage.check_hardware(gbt.hardware)
        out = cls(gbt.hardware, gbt=gbt.opts, graphsage=graphsage.opts, weight=weight)
        out.members = {"gbt": gbt, "graphsage": graphsage}
        out.data_hash = gbt.data_hash
        out.fit_s = gbt.fit_s + graphsage.fit_s
        out.fitted = True
        return out

    def _fit(self, data: Any) -> None:
        for m in self.members.values():
            m.fit(data)

    def _weights(self) -> tuple[float, float]:
        return self.weight, 1.0 - self.weight

    def predict_items(self, its: Sequence[Item]) -> np.ndarray:
        if not its:
            return np.zeros(0)
        wg, ws = self._weights()
        logs = [np.log(np.maximum(self.members[n].predict_items(its), 1e-15)) for n in MEMBERS]
        return np.exp(wg * logs[0] + ws * logs[1])

    def score_items(self, its: Sequence[Item]) -> np.ndarray:
        if not its:
            return np.zeros(0)
        wg, ws = self._weights()
        out = np.zeros(len(its))
        for w, name in zip((wg, ws), MEMBERS, strict=True):
            s = np.asarray(self.members[name].score_items(its), dtype=np.float64)
            sd = s.std()
            out += w * ((s - s.mean()) / sd if sd > 0 else np.zeros(len(s)))
        return out

    def state(self) -> dict[str, Any]:
        return {name: m.state() for name, m in self.members.items()} | {"weight": self.weight}

    def set_state(self, state: dict[str, Any]) -> None:
        self.weight = float(state["weight"])
        for name, m in self.members.items():
            m.set_state(state[name])
            m.fitted = True


__all__ = ["Ensemble"]
