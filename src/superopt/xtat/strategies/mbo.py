"""Model-based optimisation (XTAT's MBO): an ensemble of regressors defines an
acquisition function, optimised by evolution on the model, that picks each round's
proposals.

Each round (`plan` proposals, 16 by default):

1. fit every member (`members`, default all four: ridge, random forest, gradient
   boosting, a small MLP; scikit-learn) on log(time / best) of the finite measurements,
   over the knob features (`modelbased.FlatSpace`) of the sites some measurement
   changed (a column no measurement sets tells a model nothing);
2. score each member on a seeded held-out fifth (R^2), keep the members within `slack`
   of the best score and at least `min_r2` (the best one when none is), and refit the
   kept ones on everything: a member that cannot fit this space (a linear model when
   choices interact) would only add noise to the mean and inflate the spread;
3. acquisition = ensemble mean - `kappa` x the members' standard deviation (a lower
   confidence bound on log time: where the members disagree, the point may be better
   than their mean says, which is what makes the search explore);
4. minimise it with the evolutionary strategy's operators (tournament of
   `tournament`, per-site crossover, 1..`mutations` mutations) on encodings, a
   `population` seeded with the fastest measurements, `children` per generation for
   `generations` generations; the best unseen points become the round's proposals.

With fewer than `plan` measurements, or no finite one, the round is random proposals.
scikit-learn is imported on the first fit, never at import time.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from superopt.xtat.strategies.base import register
from superopt.xtat.strategies.modelbased import ModelBased, StrategyOptionError

MEMBERS = ("ridge", "forest", "boost", "mlp")


def _member(name: str, seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
    from sklearn.linear_model import Ridge
    from sklearn.neural_network import MLPRegressor

    if name == "ridge":
        return Ridge(alpha=1.0)
    if name == "forest":
        return RandomForestRegressor(n_estimators=30, max_features=0.3, min_samples_leaf=2,
                                     random_state=seed, n_jobs=1)
    if name == "boost":
        return HistGradientBoostingRegressor(max_iter=80, learning_rate=0.1,
                                             early_stopping=False, random_state=seed)
    return MLPRegressor(hidden_layer_sizes=(32,), alpha=1e-3, max_iter=300,
                        random_state=seed)


@register("mbo")
class MBO(ModelBased):
    OPTIONS = ModelBased.OPTIONS | {
        "plan": (int, 1, None, 16),
        "members": (str, None, None, ",".join(MEMBERS)),
        "kappa": (float, 0.0, None, 1.0),
        "clip": (float, 0.05, 1.0, 0.5),
        "slack": (float, 0.0, None, 0.2),
        "min_r2": (float, None, 1.0, 0.0),
        "population": (int, 2, None, 32),
        "children": (int, 1, None, 64),
        "generations": (int, 1, None, 15),
        "tournament": (int, 1, None, 3),
        "mutations": (int, 1, None, 2),
    }

    def __init__(self, **opts: Any) -> None:
        super().__init__(**opts)
        names = [m.strip() for m in self.o["members"].split(",") if m.strip()]
        bad = [m for m in names if m not in MEMBERS]
        if bad or not names:
            raise StrategyOptionError(
                f"strategy 'mbo': option 'members' takes a comma-separated subset of "
                f"{', '.join(MEMBERS)}, found {self.o['members']!r}")
        self.names = tuple(dict.fromkeys(names))

    def start(self, ctx: Any, passes: Any, budget: int) -> None:
        super().start(ctx, passes, budget)
        self.models: list[Any] = []
        self.kept: tuple[str, ...] = ()
        self.r2: dict[str, float] = {}

    def fit(self, X: np.ndarray, times: np.ndarray) -> None:
        from threadpoolctl import threadpool_limits

        # One thread: these fits are small, and BLAS/OpenMP thread pools on a shared
        # machine turn a 0.2 s fit into 20 s (measured at load 8 on 2 cores).
        with threadpool_limits(1):
            self._fit(X, times)

    def _fit(self, X: np.ndarray, times: np.ndarray) -> None:
        from sklearn.exceptions import ConvergenceWarning

        self.models = []
        finite = np.isfinite(times)
        if finite.sum() < 10:
            return
        oh = self.space.features(X[finite])
        self.cols = np.nonzero(oh.any(axis=0))[0]
        x = oh[:, self.cols]
        y = np.log(times[finite] / times[finite].min())
        # Worse than the median is all "bad": a 2.5x slower tile must not spend the
        # models' fit on how bad it is when the search needs the 1% differences on top.
        y = np.minimum(y, np.quantile(y, self.o["clip"]))
        self.mu, self.sd = float(y.mean()), float(y.std()) or 1.0
        y = (y - self.mu) / self.sd
        seed = (self.seed + self.rounds) % (2**31 - 1)
        split = np.random.default_rng(seed).permutation(len(y))
        n_test = max(2, len(y) // 5)
        test, train = split[:n_test], split[n_test:]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            r2 = {}
            for name in self.names:
                m = _member(name, seed).fit(x[train], y[train])
                r2[name] = float(m.score(x[test], y[test]))
            best = max(r2.values())
            kept = tuple(n for n in self.names
                         if r2[n] >= max(best - self.o["slack"], self.o["min_r2"]))
            if not kept:
                kept = (max(self.names, key=lambda n: r2[n]),)
            self.models = [_member(n, seed).fit(x, y) for n in kept]
        self.kept, self.r2 = kept, r2

    def acquisition(self, xs: np.ndarray) -> np.ndarray:
        """Lower confidence bound on the standardised log time (lower is better)."""
        from threadpoolctl import threadpool_limits

        x = self.space.features(xs)[:, self.cols]
        with threadpool_limits(1):
            preds = np.stack([m.predict(x) for m in self.models])
        return preds.mean(axis=0) - self.o["kappa"] * preds.std(axis=0)

    def propose(self, k: int) -> list[np.ndarray]:
        if not self.models:
            return []
        o = self.o
        rng = self.ctx.rng
        space = self.space
        pop = self.elite(o["population"])
        fit = self.acquisition(pop)
        found: dict[bytes, tuple[float, np.ndarray]] = {}
        for _ in range(o["generations"]):
            n = o["children"]
            # Tournament selection (lower acquisition wins), as `evolution` picks parents.
            draws = rng.integers(len(pop), size=(2, n, o["tournament"]))
            pa = draws[0][np.arange(n), np.argmin(fit[draws[0]], axis=1)]
            pb = draws[1][np.arange(n), np.argmin(fit[draws[1]], axis=1)]
            kids = space.mutate(rng, space.crossover(rng, pop[pa], pop[pb]), o["mutations"])
            kid_fit = self.acquisition(kids)
            for x, f in zip(kids, kid_fit, strict=True):
                c = self.code(x)
                if c not in self.seen and c not in found:
                    found[c] = (float(f), x)
            # The next population: the best distinct of parents and children.
            allx = np.concatenate([pop, kids])
            allf = np.concatenate([fit, kid_fit])
            order = np.argsort(allf, kind="stable")
            chosen, codes = [], set()
            for i in order:
                c = self.code(allx[i])
                if c not in codes:
                    codes.add(c)
                    chosen.append(i)
                if len(chosen) == o["population"]:
                    break
            pop, fit = allx[chosen], allf[chosen]
        ranked = sorted(found.values(), key=lambda e: e[0])
        return [x for _, x in ranked[:k]]


__all__ = ["MBO", "MEMBERS"]
