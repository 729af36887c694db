"""What the model-based strategies (`autotvm`, `mbo`) share: a flat encoding of the
search space, option checking, and the plan-measure-refit loop.

A model-based strategy scores tens of thousands of points per round; building each one
as a `Candidate` (rebuilding stages through the pipeline) would cost milliseconds apiece.
So points are *encodings*: one option index per known site (AutoTVM's "knob" features),
searched and scored as integer vectors, and only the few picked for measurement are built.

`FlatSpace` holds the known sites: the tunable sites, in the strategy's passes, of the
starting candidate and of every candidate that became the best so far (a fusion change
makes kernels, hence tile and flags sites, the start did not have). Features are one-hot
over each site's non-default options (the default option is all zeros, so a config is as
sparse as its changes), then per pass the number of changes and how far down their
sites' option lists they go (`FlatSpace._counts` says why). Building an encoding sets, pass by pass in pipeline order, each
known site that the stage built so far has to the encoded option; sites the encoding does
not know keep the best candidate's choice (XTAT-M repair through the pipeline).

`ModelBased` measures a first round of random proposals (the `random` strategy's: the
default with 1..`changes` changes), then each round refits its model on every
measurement so far and plans the next `plan` proposals; `ask` hands them out in the
tuner's batch size. Everything random comes from the context's generator (model seeds
too), so a run is reproducible from its seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.space import Choice, PassConfig, Site
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.base import SearchStrategy

# With `TuneContext.identity`, a round draws this many times its size from the model's
# ranking, before the programs measured or planned before are dropped.
OVERDRAW = 4


class StrategyOptionError(IRError):
    """A strategy option that is unknown or out of range."""


def check_options(strategy: str, given: Mapping[str, Any],
                  spec: Mapping[str, tuple[type, float | None, float | None, Any]]
                  ) -> dict[str, Any]:
    """`given` checked against `spec` (name -> (type, min, max, default)) and completed
    with the defaults: an unknown name, a wrong type or a value out of range is a one-line
    error naming the strategy, the option and what it accepts."""
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise StrategyOptionError(f"strategy {strategy!r}: unknown option {unknown[0]!r}: "
                                  f"expected some of {', '.join(sorted(spec))}")
    out: dict[str, Any] = {}
    for name, (kind, lo, hi, default) in spec.items():
        value = given.get(name, default)
        if kind is str:
            if not isinstance(value, str):
                raise StrategyOptionError(f"strategy {strategy!r}: option {name!r} must be "
                                          f"text, found {value!r}")
            out[name] = value
            continue
        # bool is an int to Python; an option that counts must not take True.
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                kind is int and not float(value).is_integer()):
            raise StrategyOptionError(f"strategy {strategy!r}: option {name!r} must be "
                                      f"{'an integer' if kind is int else 'a number'}, "
                                      f"found {value!r}")
        value = kind(value)
        if not math.isfinite(value) or (lo is not None and value < lo) or (
                hi is not None and value > hi):
            rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
            raise StrategyOptionError(f"strategy {strategy!r}: option {name!r} must be "
                                      f"{rng}, found {value!r}")
        out[name] = value
    return out


class FlatSpace:
    """Known sites as integer vectors (see the module docstring)."""

    def __init__(self, ctx: TuneContext, passes: Sequence[str]) -> None:
        self.ctx = ctx
        names = ctx.pipeline.names
        self.passes = tuple(n for n in names if n in passes)  # pipeline order
        self.sites: list[tuple[str, Site]] = []
        self.index: dict[tuple[str, str], int] = {}
        self.option_index: list[dict[Choice, int]] = []
        self.n_options = np.zeros(0, dtype=np.int64)
        self.defaults = np.zeros(0, dtype=np.int64)
        self.offsets = np.zeros(0, dtype=np.int64)  # first one-hot column of each site
        self.dim = 0
        self.by_pass: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.sites)

    def extend(self, cand: Candidate) -> int:
        """Know the tunable sites of `cand` (in the passes); returns how many are new."""
        new = [(n, s) for n, s in self.ctx.tunable(cand, self.passes)
               if (n, s.key) not in self.index]
        if not new:
            return 0
        for n, s in new:
            self.index[(n, s.key)] = len(self.sites)
            self.sites.append((n, s))
            self.option_index.append({o: i for i, o in enumerate(s.options)})
        self.n_options = np.asarray([len(s.options) for _, s in self.sites], dtype=np.int64)
        self.defaults = np.asarray([s.options.index(s.default) for _, s in self.sites],
                                   dtype=np.int64)
        widths = self.n_options - 1
        self.offsets = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64)
        self.dim = int(widths.sum())
        self.by_pass = {}
        for i, (n, _) in enumerate(self.sites):
            self.by_pass.setdefault(n, []).append(i)  # type: ignore[arg-type]
        self.by_pass = {n: np.asarray(v, dtype=np.int64) for n, v in self.by_pass.items()}
        return len(new)

    def present(self, cand: Candidate, name: str) -> list[tuple[int, Site]]:
        """(index, the site in `cand`'s stage) of the known sites of pass `name` that
        `cand`'s stage has."""
        pipeline = self.ctx.pipeline
        idx = self.by_pass.get(name)
        if idx is None:
            return []
        j = pipeline.index(name)
        sites = pipeline.passes[j].sites(cand.stages[j])
        out = []
        for i in idx:
            site = sites.get(self.sites[i][1].key)
            if site is not None:
                out.append((int(i), site))
        return out

    def encode(self, cand: Candidate) -> np.ndarray:
        """The candidate's option per known site (its complete choice where the site
        exists in its stages, so a default that depends on the stage reads right; the
        known default elsewhere)."""
        x = self.defaults.copy()
        for name in self.passes:
            given = cand.config(name).choices
            for i, site in self.present(cand, name):
                k = self.option_index[i].get(given.get(site.key, site.default))
                if k is not None:
                    x[i] = k
        return x

    def pad(self, x: np.ndarray) -> np.ndarray:
        """An encoding made before sites were added, with the defaults of the new ones."""
        if len(x) == len(self.sites):
            return x
        return np.concatenate([x, self.defaults[len(x):]])

    @property
    def width(self) -> int:
        """Feature columns: the one-hot options, then two summaries per pass."""
        return self.dim + 2 * len(self.passes)

    def _counts(self, xs: np.ndarray) -> np.ndarray:
        # Per pass, the number of changes and the sum of log2(1 + option index) over them.
        # Most changes from a tuned default cost time, and the count lets a model charge
        # a change it has never seen the average cost of one (a one-hot column that no
        # measurement set says nothing, so without it the model's search drifts freely
        # through untried changes). The passes list options best-first where they have
        # an order (tiles in the analytical model's order), so the index sum tells a
        # change to the runner-up tile from a change to the worst one.
        out = np.zeros((xs.shape[0], 2 * len(self.passes)), dtype=np.float32)
        for k, p in enumerate(self.passes):
            idx = self.by_pass.get(p)
            if idx is not None:
                sub = xs[:, idx]
                changed = sub != self.defaults[idx]
                out[:, 2 * k] = changed.sum(axis=1)
                out[:, 2 * k + 1] = (np.log2(1.0 + sub) * changed).sum(axis=1)
        return out

    def _nonzero(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Option k of a site maps to column k, or k - 1 past the default (which has none).
        rel = xs - (xs > self.defaults).astype(np.int64)
        rows, cols = np.nonzero(xs != self.defaults)
        return rows, self.offsets[cols] + rel[rows, cols]

    def features(self, xs: np.ndarray) -> np.ndarray:
        """Rows of encodings as dense feature rows (`width` columns)."""
        xs = np.atleast_2d(xs)
        out = np.zeros((xs.shape[0], self.width), dtype=np.float32)
        rows, cols = self._nonzero(xs)
        out[rows, cols] = 1.0
        out[:, self.dim:] = self._counts(xs)
        return out

    def csr(self, xs: np.ndarray) -> Any:
        """`features(xs)` as a scipy CSR matrix (what xgboost takes without densifying)."""
        from scipy.sparse import csr_matrix

        xs = np.atleast_2d(xs)
        rows, cols = self._nonzero(xs)
        counts = self._counts(xs)
        crow, ccol = np.nonzero(counts)
        data = np.concatenate([np.ones(len(rows), dtype=np.float32), counts[crow, ccol]])
        return csr_matrix((data, (np.concatenate([rows, crow]),
                                  np.concatenate([cols, self.dim + ccol]))),
                          shape=(xs.shape[0], self.width))

    def mutate(self, rng: np.random.Generator, xs: np.ndarray, changes: int) -> np.ndarray:
        """Each row with 1..`changes` sites set to another option; a pass is drawn first,
        then a site in it, as `TuneContext.mutate` does."""
        xs = np.array(xs, copy=True)
        passes = [p for p in self.passes if p in self.by_pass
                  and np.any(self.n_options[self.by_pass[p]] > 1)]
        if not passes:
            return xs
        n = xs.shape[0]
        k = 1 + rng.integers(changes, size=n)
        for step in range(int(k.max())):
            live = np.nonzero(k > step)[0]
            which = rng.integers(len(passes), size=len(live))
            for p_i, p in enumerate(passes):
                rows = live[which == p_i]
                if not len(rows):
                    continue
                pool = self.by_pass[p]
                site = pool[rng.integers(len(pool), size=len(rows))]
                m = self.n_options[site]
                shift = 1 + (rng.random(len(rows)) * (m - 1)).astype(np.int64)
                xs[rows, site] = (xs[rows, site] + shift) % m
        return xs

    def crossover(self, rng: np.random.Generator, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per site, each parent's option with probability 1/2 (rows pairwise)."""
        mask = rng.random(a.shape) < 0.5
        return np.where(mask, a, b)

    def build(self, x: np.ndarray, base: Candidate) -> Candidate:
        """The candidate of encoding `x`, built from `base` (module docstring)."""
        ctx, pipeline = self.ctx, self.ctx.pipeline
        cand = base
        for name in self.passes:
            j = pipeline.index(name)
            choices = dict(cand.configs[j].choices)
            for i, site in self.present(cand, name):
                choice = self.sites[i][1].options[int(x[i])]
                if choice not in site.options:
                    continue
                if choice == site.default:
                    choices.pop(site.key, None)
                else:
                    choices[site.key] = choice
            config = PassConfig.of(choices)
            if config.choices == cand.configs[j].choices:
                continue
            configs = list(cand.configs)
            configs[j] = config
            cand = pipeline.build(cand, configs, ctx.store)
        return cand


class ModelBased(SearchStrategy):
    """Plan `plan` proposals per round from a model of the measurements so far (module
    docstring). Subclasses set `OPTIONS` (checked at construction) and implement
    `fit(X, times)` and `propose(k)` (encodings, best first)."""

    OPTIONS: ClassVar[dict[str, tuple[type, float | None, float | None, Any]]] = {
        "plan": (int, 1, None, 64),
        "changes": (int, 1, None, 4),
    }

    def __init__(self, **opts: Any) -> None:
        super().__init__(**opts)
        self.o = check_options(type(self).name, opts, self.OPTIONS)

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        super().start(ctx, passes, budget)
        self.space = FlatSpace(ctx, passes)
        self.base = ctx.best or ctx.default
        self.space.extend(self.base)
        self.xs: list[np.ndarray] = []  # measured encodings (padded on use)
        self.ts: list[float] = []
        self.seen: set[bytes] = set()  # encodings measured or planned
        self.keys: set[str] = set()  # candidate keys measured or planned
        self.idents: set[str] = set()  # programs measured or planned (`ctx.identity`)
        self.queue: list[Candidate] = []
        self.rounds = 0
        self.seed = int(ctx.rng.integers(2**31 - 1))  # the models' seeds come from here
        self.best_time = ctx.best_time
        if math.isfinite(ctx.best_time):
            self._observe(self.base, ctx.best_time)

    # -- the loop ---------------------------------------------------------------------

    def ask(self, n: int) -> list[Candidate]:
        if not len(self.space):
            return []
        if not self.queue:
            self.queue = self._plan()
        out, self.queue = self.queue[:n], self.queue[n:]
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for c, t in zip(candidates, times, strict=True):
            if t < self.best_time:
                self.best_time = t
                self.space.extend(c)
            self._observe(c, t)

    def code(self, x: np.ndarray) -> bytes:
        """What identifies an encoding whatever sites were added since: its changes from
        the known defaults."""
        d = np.nonzero(x != self.space.defaults[:len(x)])[0]
        return d.tobytes() + b"|" + x[d].tobytes()

    def _observe(self, cand: Candidate, t: float) -> None:
        x = self.space.encode(cand)
        self.keys.add(cand.key)
        if self.ctx.identity is not None:
            self.idents.add(self.ctx.identity(cand))
        self.seen.add(self.code(x))
        self.xs.append(x)
        self.ts.append(t)

    def _plan(self) -> list[Candidate]:
        k = self.o["plan"]
        self.rounds += 1
        picks: list[np.ndarray] = []
        if len(self.ts) >= self.min_data():
            X = np.stack([self.space.pad(x) for x in self.xs])
            self.fit(X, np.asarray(self.ts))
            # Where many encodings are one program, more of the ranking is drawn, so that
            # the round still holds `k` the model picked after the same programs go
            # (MetaSchedule's space: two in three mutations change another sketch's
            # decisions, which nothing runs; a round of 16 then held one new program, and
            # mbo refitted its four models a round per trial).
            picks = self.propose(k if self.ctx.identity is None else OVERDRAW * k)
        out: list[Candidate] = []
        base = self.ctx.best or self.base
        for x in picks:
            if len(out) >= k:
                break
            self._add(out, self.space.build(x, base), self.code(x))
        # Random proposals fill the round (all of the first one, the epsilon share of
        # later ones, and whatever the model could not fill with unseen points).
        tries = 0
        while len(out) < k and tries < 20 * k:
            tries += 1
            c = self.ctx.mutate(self.ctx.default, self.passes,
                                1 + int(self.ctx.rng.integers(self.o["changes"])))
            self._add(out, c, None)
        return out

    def _add(self, out: list[Candidate], cand: Candidate, code: bytes | None) -> None:
        if code is not None:
            self.seen.add(code)
        if cand.key in self.keys:
            return
        self.keys.add(cand.key)
        if self.ctx.identity is not None:
            ident = self.ctx.identity(cand)
            if ident in self.idents:
                return
            self.idents.add(ident)
        out.append(cand)

    # -- for subclasses ----------------------------------------------------------------

    def min_data(self) -> int:
        """Measurements needed before the model is fitted (the first round is random)."""
        return self.o["plan"]

    def fit(self, X: np.ndarray, times: np.ndarray) -> None:
        raise NotImplementedError

    def propose(self, k: int) -> list[np.ndarray]:
        raise NotImplementedError

    def unseen(self, xs: np.ndarray) -> np.ndarray:
        """Mask of rows not measured or planned before."""
        return np.asarray([self.code(x) not in self.seen for x in xs], dtype=bool)

    def elite(self, k: int) -> np.ndarray:
        """The encodings of the `k` fastest measurements (ties by order)."""
        order = sorted(range(len(self.ts)), key=lambda i: (self.ts[i], i))[:k]
        return np.stack([self.space.pad(self.xs[i]) for i in order])


__all__ = ["FlatSpace", "ModelBased", "StrategyOptionError", "check_options"]
