"""Accuracy of a cost model on kernel samples, as the learned TPU performance model paper
reports it (Kaufman, Phothilimthana et al., MLSys 2021):

- tile APE: 100 x sum over groups of |t(best predicted) - t(best)| / sum of t(best), t the
  measured times of the group's configurations (one kernel's tiles);
- fusion MAPE: mean over fusion samples of |predicted - measured| / measured, in percent;
- Kendall's tau-b and the ordered-pair accuracy (OPA: the share of a group's pairs with
  distinct measured times that the scores order the same way), averaged over groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from superopt.xtat.models.features import KernelSample


@dataclass(frozen=True)
class GroupMetrics:
    groups: int
    ape: float
    tau: float
    opa: float
    top1: float  # mean over groups of t(best predicted) / t(best)

    def to_json(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in self.__dict__.items()}


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    from superopt.tpu_sim.replay import kendall_tau_b

    return kendall_tau_b(x, y)


def opa(scores: Sequence[float], measured: Sequence[float]) -> float:
    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    dm = np.sign(m[:, None] - m[None, :])
    ds = np.sign(s[:, None] - s[None, :])
    mask = np.triu(dm != 0, 1)
    n = int(mask.sum())
    return float(((dm == ds) & mask).sum() / n) if n else math.nan


def group_metrics(groups: dict[str, list[KernelSample]],
                  score: Callable[[Sequence[KernelSample]], np.ndarray]) -> GroupMetrics:
    """Tile APE, tau, OPA and top-1 over `groups` (at least two samples each)."""
    num = den = 0.0
    taus: list[float] = []
    opas: list[float] = []
    top1: list[float] = []
    n = 0
    for name in sorted(groups):
        g = groups[name]
        if len(g) < 2:
            continue
        n += 1
        sc = np.asarray(score(g), dtype=np.float64)
        meas = [s.measured for s in g]
        pick = int(np.argmin(sc))
        best = min(meas)
        num += abs(meas[pick] - best)
        den += best
        top1.append(meas[pick] / best)
        t = kendall_tau(list(sc), meas)
        if not math.isnan(t):
            taus.append(t)
        o = opa(sc, meas)
        if not math.isnan(o):
            opas.append(o)
    return GroupMetrics(n, 100.0 * num / den if den else math.nan, _mean(taus), _mean(opas),
                        _mean(top1))


def _mean(v: list[float]) -> float:
    return float(np.mean(v)) if v else math.nan


def mape(predicted: Sequence[float], measured: Sequence[float]) -> float:
    p = np.asarray(predicted, dtype=np.float64)
    m = np.asarray(measured, dtype=np.float64)
    return float(100.0 * np.mean(np.abs(p - m) / m)) if len(m) else math.nan


def evaluate(model: Any, data: Any) -> dict[str, Any]:
    """Every metric of `model` on `data` (a `dataset.KernelData`), per task."""
    out: dict[str, Any] = {}
    fusion = data.task("fusion").samples
    if fusion:
        pred = model.predict(fusion)
        meas = [s.measured for s in fusion]
        out["fusion"] = {"samples": len(fusion), "mape": mape(pred, meas),
                         "tau": kendall_tau(list(pred), meas) if len(fusion) <= 3000
                         else _tau_sample(pred, meas)}
    for task in ("tile", "flags"):
        groups = data.task(task).groups()
        if groups:
            out[task] = group_metrics(groups, model.score).to_json()
    return out


def _tau_sample(pred: Sequence[float], meas: Sequence[float], n: int = 3000) -> float:
    # tau-b is quadratic: a fixed random subset of a large fusion set estimates it.
    idx = np.random.default_rng(0).choice(len(meas), n, replace=False)
    return kendall_tau([float(pred[i]) for i in idx], [meas[i] for i in idx])


__all__ = ["GroupMetrics", "evaluate", "group_metrics", "kendall_tau", "mape", "opa"]
