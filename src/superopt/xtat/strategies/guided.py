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
- a kernel move otherwise: one random site of the other passes (a tile, flags, a
  sampling decision of MetaSchedule's space) set, with probability `local`, to one of
  the `near` options nearest its current one (`near_options`: a tile with one factor
  moved from one loop to another, the next unroll step), else to any other option, as
  the random strategy does. A uniformly drawn factorization of a loop is almost never
  better than a tuned one (on MetaSchedule's space of the 1x1 convolution, `local=0`
  stalled for hundreds of trials at a third of MetaSchedule's speed); a step to a
  neighbouring one is the move MetaSchedule's own mutator makes.

With `screen` > 1 (default 1: off) and a context that has a cost model learned from
this run's measurements (`TuneContext.screen`: MetaSchedule's XGBoost model over its
features of the scheduled program, on MetaSchedule's space), each ask draws `screen`
times as many new proposals as it hands out, each from one of the `parents` fastest
candidates measured (not only the best, a local optimum whose neighbours the model soon
calls all worse), mutates the best-scored quarter again for `generations` rounds
(scored each time), and hands out the ones the model scores best, each one with
probability `explore` a random one of the pool instead (MetaSchedule's epsilon-greedy
pick). A proposal the model says cannot run (it fails to schedule) is not handed out.
It is off by default because on real kernels it did not pay: side by side with the
unscreened search on MetaSchedule's space (4 kernels, 2 seeds, 256 trials,
`benchmarks/results/tvm_compare_screen.json`) its best was above the unscreened
search's on 2 of 8 kernel-seed pairs and below on 6 (docs/benchmarks.md).

With `init` > 0 (default 0) the first `init` proposals are random points of the whole
space (`TuneContext.sample`: every site of the tuned passes drawn uniformly), and the
climb goes on from the fastest of them and the start; with `screen_init` > 1 and a
context's cost model (one pre-trained on other kernels' measurements:
`tvm_msspace.MsScreen.pretrain`) they are the best-scored of `screen_init` times as
many random points. On MetaSchedule's space a random
point is a fair schedule (MetaSchedule's own first trials, random samples of it, reached
0.44-0.91 of its final best within 16 trials on the four kernels of
`benchmarks/tvm_compare.py`, where the climb from its first sketch's sampled decisions
reached 0.25-0.57), and the climb from one start seldom leaves that start's sketch. On a
whole graph's fusion decisions a random point is a poor program, so it stays off there.

With `restart` > 0 (default 0: off) the climb starts again when it has gone `restart`
measured proposals without getting faster: `init` new random points (one when `init` is
0, screened as the first ones are) are proposed, and the climb goes on from the fastest
of them, even when that is slower than the best so far (which stays the run's best). On
MetaSchedule's space a climb from one start settles in that start's neighbourhood: with
a pre-trained start (`benchmarks/tvm_compare.py`'s `guided_prior_wide`, seeds 4-5) the
best was ahead of MetaSchedule's at trials 16 and 64 on 8 of 8 kernel-seed pairs, then
improved by under 5% from trial 64 to 192 on 5 of 8, while MetaSchedule's evolutionary
search, which keeps a population, caught up. The random points a climb starts from are
not counted as its proposals. It stays off by default: with `restart=32` the same runs
were within 0.5x of MetaSchedule's trials to its best on 5 of 6 re-timed pairs against
6 of 6 without it, and their best was lower on 4 of 6 (docs/benchmarks.md).

With `screen_after` > 0 (default 0: the screen, when on, screens from the first
proposal) the screen turns on only once the climb has gone `screen_after` measured
proposals without getting faster, and stays on for the rest of the run: the unscreened
climb from a pre-trained start first, then the model-picked proposals from the fastest
candidates, MetaSchedule's kind of search, late. On MetaSchedule's space the climb from a
pre-trained start led MetaSchedule's search at trial 64 and then stalled (under 3% gained
after trial 64 on QKV, seeds 4-7), while MetaSchedule's model-guided search gained 18-33%
after it; screening from the first proposal instead (`guided_prior_screened`) lost the
early lead on QKV. It stays off by default: with the pre-trained model, refitted as it
goes, screening after 24 stale trials (`guided_prior_late`, seeds 6-7, re-timed) reached
MetaSchedule's best on the 3x3 convolution in 0.27-0.39x its trials (0.69-0.87x
without), and never on either matmul, where the screened proposals gained 0-3%.

With `fresh` > 0 (default 0) a `fresh` share of each screened pool is new random points
of the whole space (every sketch's), scored and mutated for `generations` with the moves
of the fastest, as MetaSchedule's evolutionary search takes random schedules into its
population each round. It stays off by default: on the two matmuls of
`benchmarks/tvm_compare.py` (seeds 6-7, 256 trials, late screen with `fresh=0.5`) the
model handed out few of the random points, and 82-93% of QKV's trials still went to one
inner tile of the output's columns (8), where MetaSchedule's best and most of its trials
were on others; neither matmul reached MetaSchedule's best in half its trials as measured.

A measured candidate faster than the best becomes the best (and its ranking is computed
afresh). Where the context says which candidates are one program (`TuneContext.identity`:
MetaSchedule's space, whose other sketches' decisions change nothing), a proposal that is
a program proposed before is drawn again. `model="none"` ranks the sites in a random order instead: the same search
without the model (the ablation that shows what the model adds).

The ranking is kept up to date incrementally (`Scores`): a new best differs from the last
one in a few fusion decisions, so only the sites whose features read what changed (their
own decision, their producers' and consumers' decisions, the kernels computing them or
their consumers) get new feature rows and predictions. The two features that read the
whole program (the kernel shares, through its total estimated time) are recomputed for
every site, and a site is predicted again only when one of them crosses a threshold of
the model's trees: the ranking equals a full rescoring (`incremental=0`, which tests
compare it with), at a fraction of its cost on a large graph (the 100k-node synthetic
graph's 59k sites: 0.14 s per new best against 1.65 s, `benchmarks/search.py --ranking`).

Options are checked at construction (a one-line error names the option and its range).
Everything random comes from the context's seeded generator, so a run is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from superopt.tpu_sim import is_source
from superopt.xtat.advantage import FEATURES, SHIPPED, AdvantageModel, FlipFeatures, share_feature
from superopt.xtat.context import TuneContext
from superopt.xtat.space import Choice, Site
from superopt.xtat.stage import Candidate, Stage
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


def near_options(site: Site, current: Choice, k: int) -> list[Choice]:
    """The other options of `site` nearest `current`, the `k` nearest and any tied with
    the k-th. Tuples of positive integers (tiles, factorizations) are as near as the
    L1 distance of their factors' base-2 logarithms (a factor 2 moved from one loop to
    another: 2); integers and other orderable options by their rank among the site's
    options; options of any other kind (or mixed) are all equally near."""
    others = [o for o in site.options if o != current]
    if not others or k >= len(others):
        return others

    def tile(o: object) -> bool:
        return (isinstance(o, tuple) and len(o) > 0
                and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in o))

    if tile(current) and all(tile(o) and len(o) == len(current) for o in others):
        logs = np.log2(np.asarray(others, dtype=float))
        dist = np.abs(logs - np.log2(np.asarray(current, dtype=float))).sum(axis=1)
    else:
        try:
            ranked = sorted(site.options)  # type: ignore[type-var]
        except TypeError:
            return others
        if any(isinstance(o, bool) for o in ranked):
            return others
        pos = {o: i for i, o in enumerate(ranked)}
        dist = np.abs(np.asarray([pos[o] for o in others], dtype=float) - pos[current])
    cut = np.partition(dist, k - 1)[k - 1]
    return [o for o, d in zip(others, dist.tolist(), strict=True) if d <= cut + 1e-9]


def full_ranking(model: AdvantageModel, ctx: TuneContext, cand: Candidate, j: int,
                 estimates: dict[str, float]) -> list[tuple[int, Choice, float]]:
    """(site index, its predicted best option, the prediction) for every fusion site of
    `cand` (pass index `j`), best first (ties in site order): every site rescored."""
    fp = ctx.pipeline.passes[j]
    sites = fp.sites(cand.stages[j]).tunable
    feats = FlipFeatures(cand, j, fp.sim, estimates)
    node_of = fp.node_of(cand.stages[j])
    rows = []
    moves: list[tuple[int, Choice]] = []
    for i, s in enumerate(sites):
        cur = ctx.choice(cand, "fusion", s)
        for o in s.options:
            if o != cur:
                rows.append(feats.row(node_of[s.key], s, cur, o))
                moves.append((i, o))
    pred = model.predict(np.asarray(rows, dtype=np.float32))
    top: dict[int, tuple[float, Choice]] = {}
    for (i, o), p in zip(moves, pred, strict=True):
        if i not in top or p > top[i][0]:
            top[i] = (float(p), o)
    # Ties keep the site order, so the ranking is deterministic.
    order = sorted(top, key=lambda i: (-top[i][0], i))
    return [(i, top[i][1], top[i][0]) for i in order]


_OWN, _CONS = FEATURES.index("kernel_share"), FEATURES.index("cons_kernel_share")


class Scores:
    """The advantage model's predictions for every fusion site of one fusion stage (the
    laid-out graph), kept up to date from candidate to candidate (module docstring).

    One feature row per (site, alternative option), in site order: a site's options are
    fixed, so its rows keep their place whatever its current decision. `rank(cand)`
    finds what changed since the last candidate it ranked, rebuilds the rows of the
    sites that read it, recomputes the share features of every site, and predicts the
    rows whose inputs changed or whose share features moved to another side of a split
    of the model's trees."""

    def __init__(self, model: AdvantageModel, ctx: TuneContext, j: int, stage: Stage,
                 estimates: dict[str, float]) -> None:
        self.model, self.ctx, self.j, self.estimates = model, ctx, j, estimates
        fp = ctx.pipeline.passes[j]
        self.stage = stage
        # A site with one option has no flip (and no place in the ranking).
        self.sites = sites = [s for s in fp.sites(stage).tunable if len(s.options) > 1]
        node_of = fp.node_of(stage)
        self.node = [node_of[s.key] for s in sites]
        self.index = {s.key: i for i, s in enumerate(sites)}
        counts = np.array([len(s.options) - 1 for s in sites], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(counts)])
        self.counts = counts
        self.site_of_row = np.repeat(np.arange(len(sites)), counts)
        self.X = np.zeros((int(self.offset[-1]), len(FEATURES)), dtype=np.float32)
        self.pred = np.zeros(len(self.X), dtype=np.float32)
        self.alts: list[list[Choice]] = [[] for _ in sites]
        self.ests: list[tuple[tuple[float, ...], tuple[float, ...]]] = [((), ())] * len(sites)
        self.bins = np.full((len(sites), 2), -1, dtype=np.int64)
        self.splits = (model.split_points(_OWN), model.split_points(_CONS))
        # Per node of the laid-out graph: the sites whose rows read its fusion decision
        # (its own, its producers' and its consumers') and those whose rows read which
        # kernels compute it (its own, and the sites of the nodes it consumes).
        g = stage.laid.graph
        eff = stage.laid.consumers[0]
        n = len(g.nodes)
        self.reads_decision: list[list[int]] = [[] for _ in range(n)]
        self.reads_kernels: list[list[int]] = [[] for _ in range(n)]
        for i, v in enumerate(self.node):
            self.reads_decision[v].append(i)
            self.reads_kernels[v].append(i)
            for u in g.node(v).inputs:
                if not is_source(g.node(u.node).op):
                    self.reads_decision[u.node].append(i)
            for c in eff[v]:
                self.reads_decision[c].append(i)
                self.reads_kernels[c].append(i)
        self.last: Candidate | None = None
        self.best = np.zeros(len(sites), dtype=np.float32)
        self.rescored = (0, 0, 0)

    def _changed(self, cand: Candidate) -> list[int] | None:
        """The sites whose rows (but for the share features) may differ between the last
        ranked candidate and `cand`; None: all."""
        last, j = self.last, self.j
        if last is None:
            return None
        out: set[int] = set()
        a, b = last.config("fusion").choices, cand.config("fusion").choices
        for k in a.keys() | b.keys():
            if a.get(k) != b.get(k) and k in self.index:
                out.add(self.index[k])
        da, db = last.stages[j + 1], cand.stages[j + 1]
        if da is db:
            return sorted(out)
        fa, fb = da.fusion or {}, db.fusion or {}
        if fa is not fb:
            for v in fa.keys() | fb.keys():
                if fa.get(v) != fb.get(v):
                    out.update(self.reads_decision[v])
        pa, pb = da.partition, db.partition
        if pa is not pb:
            ka = {k.root: (k, key) for k, key in zip(pa.kernels, da.sig_keys, strict=True)}
            kb = {k.root: (k, key) for k, key in zip(pb.kernels, db.sig_keys, strict=True)}
            moved: set[int] = set()
            for r in ka.keys() | kb.keys():
                x, y = ka.get(r), kb.get(r)
                if x is not None and y is not None and x[1] == y[1] and (
                        x[0] is y[0] or (x[0].nodes == y[0].nodes and x[0].hero == y[0].hero)):
                    continue
                for got in (x, y):
                    if got is not None:
                        moved.update(got[0].nodes)
            for v in moved:
                out.update(self.reads_kernels[v])
        return sorted(out)

    def rank(self, cand: Candidate) -> list[tuple[Site, Choice]]:
        """(site, its predicted best option), best first, ties in site order."""
        ctx, j = self.ctx, self.j
        feats = FlipFeatures(cand, j, ctx.pipeline.passes[j].sim, self.estimates)
        changed = self._changed(cand)
        redo = np.zeros(len(self.sites), dtype=bool)
        for i in range(len(self.sites)) if changed is None else changed:
            s, v = self.sites[i], self.node[i]
            cur = ctx.choice(cand, "fusion", s)
            alts = [o for o in s.options if o != cur]
            lo = int(self.offset[i])
            for k, o in enumerate(alts):
                self.X[lo + k] = feats.row(v, s, cur, o)
            self.alts[i] = alts
            self.ests[i] = feats.estimates(v)
            redo[i] = True
        total = feats.total
        own = np.array([share_feature(e[0], total) for e in self.ests], dtype=np.float32)
        cons = np.array([share_feature(e[1], total) for e in self.ests], dtype=np.float32)
        bins = np.stack([np.searchsorted(self.splits[0], own, side="right"),
                         np.searchsorted(self.splits[1], cons, side="right")], axis=1)
        moved = (bins != self.bins).any(axis=1) & ~redo
        redo |= moved
        self.bins = bins
        # Every row's share features are current (a row predicted later reads them).
        self.X[:, _OWN] = np.repeat(own, self.counts)
        self.X[:, _CONS] = np.repeat(cons, self.counts)
        rows = np.flatnonzero(redo[self.site_of_row])
        if len(rows):
            self.pred[rows] = self.model.predict(self.X[rows])
        self.last = cand
        # What this ranking cost: sites rescored, those for a share feature alone, rows.
        self.rescored = (int(redo.sum()), int(moved.sum()), len(rows))
        # Per site, its best alternative (the first of equal ones), then the sites by it.
        starts = self.offset[:-1]
        best = np.maximum.reduceat(self.pred, starts)
        hit = np.where(self.pred == np.repeat(best, self.counts),
                       np.arange(len(self.pred)), len(self.pred))
        first = (np.minimum.reduceat(hit, starts) - starts).tolist()
        self.best = best
        sites, alts = self.sites, self.alts
        return [(sites[i], alts[i][first[i]]) for i in np.argsort(-best, kind="stable").tolist()]


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
        "incremental": (int, 0, 1, 1),
        "local": (float, 0.0, 1.0, 0.5),
        "near": (int, 1, None, 4),
        "screen": (int, 1, None, 1),
        "explore": (float, 0.0, 1.0, 0.05),
        "parents": (int, 1, None, 8),
        "generations": (int, 0, None, 2),
        "init": (int, 0, None, 0),
        "screen_init": (int, 1, None, 1),
        "restart": (int, 0, None, 0),
        "screen_after": (int, 0, None, 0),
        "fresh": (float, 0.0, 1.0, 0.0),
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
        self.proposed: set[str] = set()  # candidate keys, or programs with an identity
        self._rank_key = ""
        self._ranking: list[tuple[Site, Choice]] = []
        self._tried: set[str] = set()
        self._window = 0
        self._scores: Scores | None = None
        self.proposed.add(self._seen(self.current))  # the start is measured already
        # The fastest measured candidates (time, order told, candidate): a screened
        # ask mutates these, not only the best.
        self.elite: list[tuple[float, int, Candidate]] = []
        self._told = 0
        self._sampled = 0  # random points of the space proposed so far (`init`)
        self._quota = self.o["init"]  # random points this climb starts from
        self._stale = 0  # measured proposals since the climb last got faster
        self.restarts = 0
        self._starts: set[str] = set()  # keys of the random points proposed
        # With `screen_after`, the screen is off until the climb first stalls.
        self.late = not self.o["screen_after"]

    # -- the ranking ----------------------------------------------------------------------

    def _ranked(self) -> list[tuple[Site, Choice]]:
        """(site, its predicted best option), best first, for the current candidate."""
        cand = self.current
        if cand.key == self._rank_key:
            return self._ranking
        j = self.fusion
        fp = self.ctx.pipeline.passes[j]
        sites = fp.sites(cand.stages[j]).tunable
        if self.model is None:
            order = [int(i) for i in self.ctx.rng.permutation(len(sites))]
            best = []
            for i in order:
                cur = self.ctx.choice(cand, "fusion", sites[i])
                others = [o for o in sites[i].options if o != cur]
                best.append((sites[i], others[int(self.ctx.rng.integers(len(others)))]))
        elif self.o["incremental"]:
            if self._scores is None or self._scores.stage is not cand.stages[j]:
                self._scores = Scores(self.model, self.ctx, j, cand.stages[j], self.estimates)
            best = self._scores.rank(cand)
        else:
            best = [(sites[i], o) for i, o, _ in full_ranking(
                self.model, self.ctx, cand, j, self.estimates)]
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

    def _propose(self, start: Candidate | None = None) -> Candidate:
        ctx = self.ctx
        cand = self.current if start is None else start
        for _ in range(1 + int(ctx.rng.integers(self.o["changes"]))):
            fusion = self.fusion is not None and (
                not self.others or ctx.rng.random() < self.o["fusion_share"])
            if fusion:
                cand = self._fusion_move(cand)
            elif self.others:
                cand = self._kernel_move(cand)
        return cand

    def _kernel_move(self, cand: Candidate) -> Candidate:
        """One site of the other passes to a near option (probability `local`) or any."""
        ctx = self.ctx
        if self.o["local"] <= 0.0:  # exactly the plain mutation (its random draws too)
            return ctx.mutate(cand, self.others, 1)
        drawn = ctx.draw_site(cand, self.others)
        if drawn is None:
            return cand
        name, site = drawn
        current = ctx.choice(cand, name, site)
        if ctx.rng.random() < self.o["local"]:
            pool = near_options(site, current, self.o["near"])
        else:
            pool = [o for o in site.options if o != current]
        pick = pool[int(ctx.rng.integers(len(pool)))]
        return ctx.pipeline.with_choice(cand, name, site.key, pick, ctx.store)

    def _seen(self, cand: Candidate) -> str:
        ident = self.ctx.identity
        return cand.key if ident is None else ident(cand)

    def ask(self, n: int) -> list[Candidate]:
        if (self.o["restart"] and self._stale >= self.o["restart"]
                and self._sampled >= self._quota):
            # A new climb: the fastest of the new points becomes its start, however it
            # compares with the best so far (that stays in the context).
            self._sampled, self._quota = 0, max(1, self.o["init"])
            self.current_time, self._stale = math.inf, 0
            self.restarts += 1
        if self._sampled < self._quota:
            out = self._samples(min(n, self._quota - self._sampled))
            return out + (self.ask(n - len(out)) if len(out) < n else [])
        if self.ctx.screen is not None and self.o["screen"] > 1 and self.late:
            picked = self._screened(n)
            if picked:
                return picked
        return [self._fresh(self._propose) for _ in range(n)]

    def _samples(self, n: int) -> list[Candidate]:
        """`n` random points of the whole space (`TuneContext.sample`), the first `init`
        proposals (and a restart's): the search then climbs from the fastest of them and
        the start (a restart's climb from the fastest of its own). With
        `screen_init` > 1 and a context's cost model, `screen_init` x `n` new points are
        drawn and the `n` it scores best are proposed."""
        self._sampled += n

        def draw() -> Candidate:
            return self.ctx.sample(self.ctx.default, self.passes)

        screen, many = self.ctx.screen, n * self.o["screen_init"]
        if screen is not None and many > n:
            pool = self._new(draw, many, set())
            scores = np.asarray(screen.predict(pool), dtype=float) if pool else np.zeros(0)
            best = [pool[i] for i in np.argsort(-scores, kind="stable")[:n]
                    if np.isfinite(scores[i])]
            for cand in best:
                self.proposed.add(self._seen(cand))
            if best:
                self._starts.update(c.key for c in best)
                return best
        out = [self._fresh(draw) for _ in range(n)]
        self._starts.update(c.key for c in out)
        return out

    def _new(self, draw: Callable[[], Candidate], count: int, seen: set[str]
             ) -> list[Candidate]:
        """Up to `count` candidates from `draw` that are neither proposed before nor in
        `seen` (which takes them in), not yet recorded as proposed."""
        got: list[Candidate] = []
        for _ in range(4 * count):  # bounded: a small space runs out of new ones
            if len(got) >= count:
                break
            cand = draw()
            ident = self._seen(cand)
            if ident not in self.proposed and ident not in seen:
                seen.add(ident)
                got.append(cand)
        return got

    def _fresh(self, draw: Callable[[], Candidate]) -> Candidate:
        """A proposal from `draw`, drawn again (a few times) while it is a program
        proposed before; recorded as proposed."""
        for _ in range(8):
            cand = draw()
            if self._seen(cand) not in self.proposed:
                break
        self.proposed.add(self._seen(cand))
        return cand

    def _screened(self, n: int) -> list[Candidate]:
        """Up to `n` of `screen` x `n` new proposals, picked by the context's cost model
        (class docstring); none when no proposal is new or the model says none can run."""
        ctx, screen = self.ctx, self.ctx.screen
        assert screen is not None
        want = n * self.o["screen"]
        seen: set[str] = set()
        parents = [c for _, _, c in self.elite] or [self.current]

        def draw(starts: Sequence[Candidate], count: int) -> list[Candidate]:
            return self._new(
                lambda: self._propose(starts[int(ctx.rng.integers(len(starts)))]),
                count, seen)

        # A `fresh` share of the pool is new random points of the whole space (of every
        # sketch), which the generations below mutate too, as MetaSchedule's population
        # takes in new random schedules each round.
        fresh = round(self.o["fresh"] * want)
        pool = draw(parents, want - fresh)
        if fresh:
            pool += self._new(lambda: ctx.sample(ctx.default, self.passes), fresh, seen)
        if not pool:
            return []
        scores = np.asarray(screen.predict(pool), dtype=float)
        # Generations on the model: the best-scored quarter mutated again (a good
        # schedule is often two or three moves from a measured one).
        for _ in range(self.o["generations"]):
            top = [pool[i] for i in np.argsort(-scores, kind="stable")[:max(1, want // 4)]
                   if np.isfinite(scores[i])]
            more = draw(top, want // 2) if top else []
            if not more:
                break
            pool += more
            scores = np.concatenate([scores, np.asarray(screen.predict(more), dtype=float)])
        # Best score first; equal scores (a model not fitted yet) keep the drawn order.
        left = [i for i in np.argsort(-scores, kind="stable").tolist()
                if np.isfinite(scores[i])]
        out = []
        while left and len(out) < n:
            k = int(ctx.rng.integers(len(left))) if ctx.rng.random() < self.o["explore"] else 0
            cand = pool[left.pop(k)]
            self.proposed.add(self._seen(cand))
            out.append(cand)
        return out

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        for cand, t in zip(candidates, times, strict=True):
            if math.isfinite(t) and t < self.current_time:
                self.current, self.current_time = cand, t
                self._stale = 0
            elif cand.key not in self._starts:
                self._stale += 1
                if self._stale >= self.o["screen_after"] > 0:
                    self.late = True  # for the rest of the run (class docstring)
            if math.isfinite(t):
                self._told += 1
                self.elite.append((t, self._told, cand))
        self.elite = sorted(self.elite, key=lambda e: e[:2])[:self.o["parents"]]


__all__ = ["Guided", "Scores", "full_ranking", "load_model", "near_options"]
