"""The gradient-boosted baseline (AutoTVM style): xgboost on the hand features.

Two boosters, as the paper trains one model per task kind: a regressor
(`reg:squarederror` on log seconds, every sample: absolute time, which `predict` and a
candidate's sum use) and a ranker (`rank:pairwise` within each tile or flags group, which
`score` uses to order one kernel's configurations). Without grouped samples the ranker is
skipped and `score` falls back to the regressor.

Residual (option `residual`, on by default): both boosters start from the default
compiler's analytical estimate (its log is the base margin: the regressor learns
log(measured / analytical), the ranker a correction to the analytical order). Trees
cannot extrapolate: a kernel larger or faster than any seen in training falls in the last
leaf, so a tree on absolute log time misjudges held-out models' kernels, while the
estimate's error depends on ratios (MXU occupancy, DMA run size, steps) that recur across
models.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from superopt.xtat.models.base import CostModel, Item, items, register
from superopt.xtat.models.features import ANALYTICAL, FEATURES

# The linear base's terms (option base="linear"), in seconds or counts: the double-buffered
# estimate, grid steps, contiguous DMA runs, and a constant (launch). The simulator's costs
# beyond the estimate are per step and per run: a sum the trees, which add in log space,
# fit only piecewise. Off by default: on the three validation folds of training models it
# was mixed (fusion MAPE 0.21/0.29/0.16x the analytical model's against 0.25/0.26/0.22x,
# tile APE 0.36/0.26/0.50x against 0.34/0.46/0.27x).
_STEPS, _RUNS, _PIPED = (FEATURES.index(n) for n in ("steps", "dma_runs", "double_buffered_s"))


def _terms(x: np.ndarray) -> np.ndarray:
    xd = x.astype(np.float64)
    return np.stack([np.exp(xd[:, _PIPED]), np.exp2(xd[:, _STEPS]) - 1.0,
                     np.exp2(xd[:, _RUNS]) - 1.0, np.ones(len(x))], 1)


def nonnegative_fit(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0: terms whose coefficient comes out negative
    are dropped and the rest refitted (few terms: a handful of solves)."""
    keep = list(range(a.shape[1]))
    w = np.zeros(a.shape[1])
    while keep:
        sol, *_ = np.linalg.lstsq(a[:, keep], b, rcond=None)
        if (sol >= 0).all():
            w[keep] = sol
            break
        keep = [k for k, v in zip(keep, sol, strict=True) if v >= 0]
    return w


def _xgb() -> Any:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xgboost

    return xgboost


@register("gbt")
class GBT(CostModel):
    """Options: `rounds` (boosting rounds, default 600), `depth` (8), `eta` (0.05),
    `min_child_weight` (10), `colsample` (0.7 of the features per tree), `subsample` (0.9),
    `residual` (True), `rank` (True: score with the ranker), `threads` (1: a pool thrashes
    a shared machine). The defaults won on validation folds of training models
    (benchmarks/costmodel.py) over depth 6, 300 rounds, eta 0.1, no column sampling: trees
    that see fewer features each and need more samples per leaf carry over better to
    models they never saw."""

    def _params(self) -> dict[str, Any]:
        o = self.opts
        return {"max_depth": int(o.get("depth", 8)), "eta": float(o.get("eta", 0.05)),
                "nthread": self._threads(), "subsample": float(o.get("subsample", 0.9)),
                "colsample_bytree": float(o.get("colsample", 0.7)),
                "min_child_weight": float(o.get("min_child_weight", 10.0)),
                "seed": int(o.get("seed", 0))}

    def _threads(self) -> int:
        return int(self.opts.get("threads", 1))

    def _margin(self, x: np.ndarray, sign: float) -> np.ndarray | None:
        if not self.opts.get("residual", True):
            return None
        if self.linear is not None:
            return sign * np.log(np.maximum(_terms(x) @ self.linear, 1e-9))
        return sign * x[:, ANALYTICAL].astype(np.float64)

    def _dmatrix(self, x: np.ndarray, sign: float, label: Any = None) -> Any:
        dm = _xgb().DMatrix(x, label=label)
        margin = self._margin(x, sign)
        if margin is not None:
            dm.set_base_margin(margin)
        return dm

    def _fit(self, data: Any) -> None:
        xgb = _xgb()
        rounds = int(self.opts.get("rounds", 600))
        samples = data.samples
        x = self.feat.matrix(items(samples))
        t = np.asarray([s.measured for s in samples])
        y = np.log(t)
        self.linear = None
        if self.opts.get("base") == "linear":
            # Relative errors: each row divided by its measured time.
            a = _terms(x)
            self.linear = nonnegative_fit(a / t[:, None], np.ones(len(t)))
        self.reg = xgb.train(self._params() | {"objective": "reg:squarederror"},
                             self._dmatrix(x, 1.0, y), rounds)
        groups = data.groups()
        self.rank = None
        if groups and self.opts.get("rank", True):
            names = sorted(groups)
            rows = [s for g in names for s in groups[g]]
            # The ranker's score is higher for faster: it starts from minus the estimate.
            dm = self._dmatrix(self.feat.matrix(items(rows)), -1.0,
                               self._relevance(names, groups))
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
        x = self.feat.matrix(its)
        return np.exp(self.reg.predict(self._dmatrix(x, 1.0)))

    def score_items(self, its: Sequence[Item]) -> np.ndarray:
        if self.rank is None or not its:
            return super().score_items(its)
        return -self.rank.predict(self._dmatrix(self.feat.matrix(its), -1.0))

    def state(self) -> dict[str, Any]:
        return {"reg": bytes(self.reg.save_raw("ubj")), "linear": self.linear,
                "rank": bytes(self.rank.save_raw("ubj")) if self.rank is not None else None}

    def set_state(self, state: dict[str, Any]) -> None:
        xgb = _xgb()
        self.linear = state.get("linear")
        self.reg = xgb.Booster(params={"nthread": self._threads()})
        self.reg.load_model(bytearray(state["reg"]))
        self.rank = None
        if state.get("rank") is not None:
            self.rank = xgb.Booster(params={"nthread": self._threads()})
            self.rank.load_model(bytearray(state["rank"]))


__all__ = ["GBT"]
