"""TASO's graph optimizer: cost-based backtracking search over rewrites.

Jia et al., "TASO: Optimizing Deep Learning Computation with Automatic Generation of Graph
Substitutions", SOSP 2019, Algorithm 2. A priority queue holds candidate graphs by cost;
the cheapest is taken, every rewrite of it is proposed, and a proposal is kept if it costs
less than `alpha` times the best cost seen (alpha = 1.05: slightly worse graphs may lead to
better ones). Graphs are deduplicated by structural hash; graphs with more than
`max_growth` times the input's runtime ops are dropped (TASO uses 2x; weight-only ops,
which fold away, do not count). `budget` bounds the number
of graphs taken from the queue (TASO's budget), `time_limit` the wall time; Ctrl-C ends the
search with the best graph so far (`stopped="interrupted"`).

Two practical departures, both optional:

- Pricing before building. With an additive cost (per-op sums: `torch`, `flops`), each
  proposal is priced from what it adds and removes (`superopt.rewrite.effect`), and a graph
  is only built when taken from the queue. With a whole-graph cost (`sim`) every proposal
  must be built and evaluated; `screen` then limits a graph's proposals to the `screen`
  best single rewrites under each of the cost's additive proxies (the analytical `flops`
  cost, and for `sim` also each op simulated alone), plus the batches below.
- Batches (`batch=True`). Besides every single rewrite, each graph proposes, per rule, all
  of that rule's non-overlapping sites applied at once: both all of its sites and those
  that each look like a gain (under the cost, or each of a whole-graph cost's proxies).
  Models repeat layers, so many independent improvements exist (190 batch norms to fold
  in NasNet-A); one step per site would spend the budget walking through them one by one.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph
from superopt.ir.passes import Origin, compose, identity_origin
from superopt.rewrite.apply import apply_sites, select_disjoint
from superopt.rewrite.cost import AdditiveCost, CostFunction, create_cost
from superopt.rewrite.effect import site_effect
from superopt.rewrite.fold import runtime_ops
from superopt.rewrite.match import Matcher, Site
from superopt.substitutions.rule import Rule


@dataclass(frozen=True)
class Step:
    """One move on the path from the input to the result."""

    rule: str
    sites: tuple[str, ...]  # site keys (several for a batch)
    cost: float  # cost after the move


@dataclass(frozen=True)
class OptimizeResult:
    graph: Graph
    origin: Origin
    cost_before: float
    cost_after: float
    cost_name: str
    steps: tuple[Step, ...]
    initial_sites: Mapping[str, int]  # per rule, sites in the input graph
    expanded: int  # graphs taken from the queue and expanded (the budget counts these)
    proposed: int  # rewrites proposed
    evaluated: int  # graphs built and priced
    duplicates: int  # graphs seen before
    seconds: float
    match_seconds: float
    stopped: str  # why the search ended: "queue empty", "budget", "time limit", "interrupted"

    @property
    def speedup(self) -> float:
        return self.cost_before / self.cost_after if self.cost_after > 0 else math.inf

    @property
    def applied(self) -> Counter[str]:
        """Sites applied per rule along the path to the result."""
        out: Counter[str] = Counter()
        for s in self.steps:
            out[s.rule] += len(s.sites)
        return out


_MASK = (1 << 64) - 1
_MARGIN = 1e-9


def _site_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def _moves_fingerprint(base: int, sites: Iterable[Site]) -> int:
    """Order-independent fingerprint of the rewrites applied since the input graph.

    Site keys are structural, so applying independent rewrites in either order gives the
    same keys and the same fingerprint; the search skips such a proposal before building
    it (TASO dedupes by hashing the built graph, which is done here too)."""
    return (base + sum(_site_hash(s.key) for s in sites)) & _MASK


@dataclass(eq=False)
class _State:
    graph: Graph
    cost: float
    origin: Origin
    parent: _State | None = None
    step: Step | None = None
    fingerprint: int = 0

    def path(self) -> list[Step]:
        out: list[Step] = []
        s: _State | None = self
        while s is not None and s.step is not None:
            out.append(s.step)
            s = s.parent
        return out[::-1]


@dataclass(eq=False)
class _Pending:
    parent: _State
    sites: tuple[Site, ...]
    rule: str
    fingerprint: int


Progress = Callable[[int, int, float], None]


@dataclass
class _Search:
    matcher: Matcher
    cost: CostFunction
    alpha: float
    budget: int
    max_nodes: float
    batch: bool
    screen: int | None
    deadline: float
    proxies: tuple[AdditiveCost, ...]
    progress: Progress | None = None
    seen: set[str] = field(default_factory=set)
    seen_moves: set[int] = field(default_factory=set)
    queue: list[tuple[float, int, _State | _Pending]] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)
    best: _State | None = None
    expanded: int = 0
    proposed: int = 0
    evaluated: int = 0
    duplicates: int = 0
    match_seconds: float = 0.0

    def threshold(self) -> float:
        """Costs must be below this to be kept. Rounding in a sum of per-op costs must not
        make an equal-cost graph count as an improvement, hence the relative margin."""
        assert self.best is not None
        return self.alpha * self.best.cost * (1 - _MARGIN)

    def better(self, cost: float) -> bool:
        assert self.best is not None
        return cost < self.best.cost * (1 - _MARGIN)

    def build(self, parent: _State, sites: tuple[Site, ...], rule: str, fingerprint: int
              ) -> _State | None:
        result = apply_sites(parent.graph, list(sites), self.matcher, check=False)
        graph = result.graph
        h = graph.structural_hash
        if h in self.seen:
            self.duplicates += 1
            return None
        self.seen.add(h)
        if runtime_ops(graph) > self.max_nodes:
            return None
        self.evaluated += 1
        cost = self.cost.cost(graph)
        step = Step(rule, tuple(s.key for s in result.applied), cost)
        return _State(graph, cost, compose(parent.origin, result.origin), parent, step,
                      fingerprint)

    def push(self, priority: float, item: _State | _Pending) -> None:
        heapq.heappush(self.queue, (priority, next(self.counter), item))

    def proposals(self, state: _State) -> list[tuple[float | None, tuple[Site, ...], str]]:
        """(estimated cost or None, sites, rule) for every move from `state`."""
        t0 = time.perf_counter()
        found = self.matcher.match(state.graph)
        self.match_seconds += time.perf_counter() - t0
        graph = state.graph
        additive = isinstance(self.cost, AdditiveCost)
        pricers = (self.cost,) if isinstance(self.cost, AdditiveCost) else self.proxies
        # Per site: its cost delta under each pricer (nan, from inf - inf when a proxy
        # cannot compile an op, counts as no gain), and its change in runtime ops.
        priced: list[tuple[tuple[float, ...], int, Site]] = []
        for s in found.sites:
            if not pricers:
                priced.append(((), 0, s))
                continue
            effect = site_effect(graph, s, self.matcher.rule(s.rule))
            deltas = tuple(effect.cost_delta(graph, p) for p in pricers)
            priced.append((tuple(d if d == d else math.inf for d in deltas),
                           effect.runtime_delta(graph), s))
        out: list[tuple[float | None, tuple[Site, ...], str]] = []
        singles = priced
        if not additive and self.screen is not None and pricers:
            # The best `screen` under each proxy: proxies err in different places (flops
            # misses what runs faster on another unit, per-op simulation misses fusion).
            keep_keys: set[str] = set()
            for j in range(len(pricers)):
                ranked = sorted(priced, key=lambda t, j=j: t[0][j])
                keep_keys.update(t[2].key for t in ranked[:self.screen])
            singles = [t for t in priced if t[2].key in keep_keys]
        ops = runtime_ops(graph)
        for deltas, grow, s in singles:
            if additive and ops + grow > self.max_nodes:
                continue
            out.append((state.cost + deltas[0] if additive else None, (s,), s.rule))
        if self.batch:
            by_rule: dict[str, list[tuple[tuple[float, ...], int, Site]]] = {}
            for item in priced:
                by_rule.setdefault(item[2].rule, []).append(item)
            for rule, items in by_rule.items():
                # Per rule: the sites that each look like a gain (under each pricer), and
                # all of them. The last takes a step whose first half is cost-neutral (the
                # first of two pairwise merges of three matmuls) in one move instead of one
                # site at a time; it is priced, and kept only under the threshold, like
                # any move.
                candidates = [[t for t in items if t[0][j] < 0]
                              for j in range(len(pricers))] + [items]
                batches: set[tuple[str, ...]] = set()
                for chosen in candidates:
                    kept, _ = select_disjoint([t[2] for t in chosen])
                    keys = tuple(sorted(s.key for s in kept))
                    if len(kept) < 2 or keys in batches:
                        continue
                    batches.add(keys)
                    keep = set(keys)
                    est = None
                    if additive:
                        est = state.cost + sum(t[0][0] for t in chosen if t[2].key in keep)
                    out.append((est, tuple(kept), rule))
        self.proposed += len(out)
        return out

    def expand(self, state: _State) -> None:
        for est, sites, rule in self.proposals(state):
            if time.perf_counter() > self.deadline:
                return
            fp = _moves_fingerprint(state.fingerprint, sites)
            if fp in self.seen_moves:
                self.duplicates += 1
                continue
            if est is not None:
                if est < self.threshold():
                    self.seen_moves.add(fp)
                    self.push(est, _Pending(state, sites, rule, fp))
                continue
            self.seen_moves.add(fp)
            child = self.build(state, sites, rule, fp)
            if child is not None and child.cost < self.threshold():
                self.push(child.cost, child)

    def run(self, start: _State) -> str:
        self.best = start
        self.seen.add(start.graph.structural_hash)
        self.push(start.cost, start)
        while self.queue:
            if self.expanded >= self.budget:
                return "budget"
            if time.perf_counter() > self.deadline:
                return "time limit"
            priority, _, item = heapq.heappop(self.queue)
            if priority >= self.threshold() and item is not start:
                continue
            if isinstance(item, _Pending):
                state = self.build(item.parent, item.sites, item.rule, item.fingerprint)
                if state is None or state.cost >= self.threshold():
                    continue
            else:
                state = item
            if self.better(state.cost):
                self.best = state
            self.expanded += 1
            self.expand(state)
            if self.progress is not None:
                self.progress(self.expanded, self.budget, self.best.cost)  # type: ignore[union-attr]
        return "queue empty"

    def finish(self) -> None:
        """After a stop: the cheapest queued proposal may beat the best expanded graph."""
        for _ in range(8):
            if not self.queue:
                return
            priority, _, item = heapq.heappop(self.queue)
            if not self.better(priority):
                return
            state = item if isinstance(item, _State) else \
                self.build(item.parent, item.sites, item.rule, item.fingerprint)
            if state is not None and self.better(state.cost):
                self.best = state
                return


def optimize(graph: Graph, rules: Iterable[Rule] | Matcher, cost: str | CostFunction = "flops",
             *, alpha: float = 1.05, budget: int = 100, time_limit: float | None = None,
             max_growth: float = 2.0, batch: bool = True, screen: int | None = 16,
             progress: Progress | None = None) -> OptimizeResult:
    """Search for the cheapest graph reachable by rewrites (see the module docstring)."""
    if alpha < 1.0:
        raise IRError(f"alpha must be >= 1 (1 = only improvements), found {alpha}")
    if budget < 1:
        raise IRError(f"budget must be >= 1, found {budget}")
    t0 = time.perf_counter()
    matcher = rules if isinstance(rules, Matcher) else Matcher(rules)
    cost_fn = create_cost(cost) if isinstance(cost, str) else cost
    proxies = () if isinstance(cost_fn, AdditiveCost) else cost_fn.proxies()
    search = _Search(matcher, cost_fn, alpha, budget, max_growth * max(runtime_ops(graph), 1), batch,
                     screen, t0 + time_limit if time_limit is not None else math.inf, proxies,
                     progress)
    initial = matcher.match(graph)
    start = _State(graph, cost_fn.cost(graph), identity_origin(graph))
    try:
        stopped = search.run(start)
        search.finish()
    except KeyboardInterrupt:
        # Ctrl-C ends the search, not the run: the best graph found so far is complete
        # (states are immutable once built) and the caller checks, reports and saves it;
        # optimizing the saved graph again continues from there.
        stopped = "interrupted"
    best = search.best
    assert best is not None
    return OptimizeResult(
        graph=best.graph, origin=best.origin, cost_before=start.cost, cost_after=best.cost,
        cost_name=cost_fn.name, steps=tuple(best.path()),
        initial_sites=MappingProxyType(dict(initial.per_rule)), expanded=search.expanded,
        proposed=search.proposed, evaluated=search.evaluated, duplicates=search.duplicates,
        seconds=time.perf_counter() - t0, match_seconds=search.match_seconds, stopped=stopped)
