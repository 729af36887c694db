"""Equality saturation as a graph optimizer (Tensat), beside TASO's backtracking search.

Yang et al., "Equality Saturation for Tensor Graph Superoptimization", MLSys 2021. The
model graph goes into an e-graph (`superopt.substitutions.egraph`: typed e-classes, one
e-node per op output), the same rule directions the backtracking search matches (less
those that only apply a one-output rule at several matches at once, `_products`) are
applied to every match at once, iteration after iteration, until nothing new is added
(saturated) or a limit is hit (e-nodes, wall time, iterations). Then one e-node per needed
e-class is extracted:

- `greedy`: per e-class the e-node of least tree cost (its own cost plus its operand
  classes' best), by fixpoint iteration. Shared operands are counted once per use, so it
  can miss a merge whose pay-off is sharing (Tensat's greedy extractor, same weakness).
- `ilp`: exact DAG cost by integer programming (HiGHS, `_milp`): a binary
  per e-node and a variable per class (needed: its e-nodes' sum), the outputs' classes
  needed, a chosen e-node's operand classes needed and no other class (`_ilp_problem`);
  each e-node's cost counts once however often it is used. Solved
  in parts where that is exact (`_chunks`): free classes (weights) left out, and below
  each class that dominates a part using nothing outside it, that part alone first. On
  a saturated BERT-base one solve of 28,000 e-nodes ran out of 60 s on three of the
  four proxies; in 20 parts each proxy was solved to optimality in 19-34 s. HiGHS starts
  from the part's greedy extraction, and a part that is an earlier part renamed (a
  transformer's repeated layers: `_part_key`, `_forced`) takes its solution unsolved.

Cycles: an e-graph has them (x = relu(relu(x))-like unions, split of a concat), and an
extraction must not. Greedy cannot choose a cycle (with non-negative costs an e-node is
only taken when strictly cheaper, and every class on a cycle through it was priced from
its old, higher cost). The ILP carries an order variable per e-class with
`order(class) > order(operand class)` when an e-node of the class reading it is chosen,
as Tensat has per e-node, but only inside a strongly connected component of the class
graph (networkx): an edge between components can never close a cycle, so the rest need
no constraint.

Saturation is scheduled (`_saturate`): a rule direction over its match limit in an
iteration applies that many and rests, for longer each time (egg's backoff scheduler), and
a rule with several sources (a merge of sibling convolutions) runs in at most two
iterations that change something (Tensat's k_multi).

Costs: the extraction needs a per-op cost. An additive search cost (`flops`, `simop`,
`torch`) is used as it is. The whole-graph `sim` cost (the default compiler fuses, so a
sum over ops misjudges) is extracted under four per-op proxies: each op simulated alone
(`simop`), and fused variants in which elementwise and movement ops, or every op off the
matrix unit, cost a share of that (`FusedOpCost`); an e-node a rule made costs 10 ns more,
so that ties keep the input's. Each extraction is priced with `sim` itself and the
fastest kept; then local moves, each priced with `sim` (`_refine`): per rule application,
adopt it or undo it, and per rule all of them or halves to eighths, hill-climbing from
the extraction and from the input (and from another proxy's extraction of a different
graph priced within 1%, the runner-up), with pivots through whole-rule moves up to 1.05x
slower (the backtracking search's alpha), until `refine_limit` seconds, or sooner where a
climb stalls: it stops once it has gone `refine_patience` of the search's time so far
without a gain (an anytime search spends on a stall as much as it has already spent,
at most; llama3_2_1b's climbs price a move in 32 ms, try 2,000 and keep none), or once
that last stretch gained at most `refine_share` of all the search has gained (diminishing
returns: inception_v3's climbs gain 1e-5 of its time a step for as long as they run),
but not before `refine_min` seconds of its own. Weight-only
values are free with the cost's `fold` (a compiler computes them once), so a move's graph
is priced as built folded (`_build(folded=True)`: same cost, a third of the time) and
only the result is built in full. The result is
never costlier than the input under the search cost: if nothing beats it, the input is
kept and `kept_input` says so. `progress` is the anytime curve: when the best graph so
far improved (the extraction's, then each kept move's), and to what cost.

The result has the backtracking search's shape (graph, origin, costs, seconds), so both
are plan sources for the tuner's rewrite pass (`superopt.xtat.passes.plan`). Its origin
maps an extracted e-node that was a node of the input to that node, and a new one to the
input nodes of its e-class (what it is equal to).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import importlib
import math
import os
import re
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.opdef import ELEMENTWISE, MOVEMENT, get_op
from superopt.ir.passes import Origin, identity_origin
from superopt.ir.types import TensorType
from superopt.rewrite.cost import AdditiveCost, CostFunction, SimOpCost, create_cost
from superopt.rewrite.match import Matcher
from superopt.substitutions.egraph import VAR, BudgetExceeded, EGraph
from superopt.substitutions.pattern import PatternError, PNode, PVar, compile_expr, walk
from superopt.substitutions.rule import Rule

EXTRACTIONS = ("greedy", "ilp")
# Under a fusing proxy a folded batch norm (a convolution with scaled weights and a bias
# add) ties with the unfolded one (both fuse), and which the ILP takes is arbitrary; taken,
# the fold hides the convolution from a merge with its sibling (inception_v3: 44 such
# classes, 1.7% slower than the backtracking search's graph). A rule-made e-node costs
# this much more (10 ns: below any gain the simulator reports, above HiGHS's gap).
TIE_S = 1e-8
ILP_GRACE_S = 10.0  # past HiGHS's own time limit, the solve is killed
# A cut's part with fewer e-nodes stays in the part above it (`_chunks`): a HiGHS call
# costs milliseconds, and a convolution net has a cut at nearly every layer.
MIN_CHUNK = 64
REFINE_GRACE_S = 10.0  # past its deadline (one move may be under way), a climb's child is
PIVOT = 1.05  # a whole-rule move this much slower may still lead somewhere faster
RUNNER_UP = 0.01  # another proxy's extraction this much slower is climbed too
# A local move of many sites is kept when it is faster by more than MIN_GAIN of the
# time: not 0, since two builds of one graph in different orders sum costs differently
# (about 1e-16); not larger, since the backtracking search keeps any gain (BERT-base's 12
# query scalings moved to the matmul's left operand gain 7e-10 in all). A one-site move
# needs MIN_GAIN_SITE: with 1e-12, efficientnet_b0's climbs spent their time on tiny
# merge_conv wins instead of undoing batch-norm folds and ended 0.5% behind backtracking.
MIN_GAIN = 1e-12
MIN_GAIN_SITE = 1e-9


class EqsatError(IRError):
    """Bad options of the equality-saturation search."""


@dataclass(frozen=True)
class EqsatOptions:
    """Limits: `node_limit` e-nodes, `time_limit` seconds of saturation, `iter_limit`
    iterations, `match_limit` matches of one rule direction per iteration before it rests
    `ban_iters` iterations (both doubling per rest: `_saturate`), `ilp_time_limit`
    seconds for HiGHS.
    `multi_iters`: the iterations in which rules with several outputs (merging two convs
    that share an input) are applied, Tensat's k_multi: each merge's result shares its
    input with the rest, so applied every iteration they merge every subset of siblings
    and fill the e-graph with nothing else (squeezenet: 20,000 e-nodes in 4 iterations)."""

    extraction: str = "ilp"
    node_limit: int = 50_000
    time_limit: float = 60.0
    # Every zoo model but four saturates in at most 5 iterations. Past the 6th, the four
    # transformers (llama3_2_1b, t5_small_encoder, bert_base, bert_small) add terms no
    # extraction used: the attention scale moved on through the merged projections' splits
    # and concats one step an iteration, and rules back from a rest (llama3_2_1b's 11th:
    # 1,688 RMS-norm weight folds). At 12: the same graphs on all 17 zoo models at an
    # equal number of pricings, 5,100 more e-nodes on llama3_2_1b and 3.2-4.8 s of
    # saturation there against 1.5-1.7 s.
    iter_limit: int = 6
    # Then the sinking rules alone run on (`_sinks`: a slice moved one op toward the
    # inputs) for up to this many more iterations: a chain of them pays only as a whole
    # (vit_b16's class-token slice needs 8 iterations to reach its last attention; with
    # 6, eqsat ended 0.3% behind backtracking there). Each step adds a few e-nodes.
    sink_iters: int = 32
    match_limit: int = 1_000
    ban_iters: int = 2
    ilp_time_limit: float = 60.0
    multi_iters: int = 2
    refine_limit: float = 20.0
    # A climb stops once the time since its last gain (a graph faster than any the search
    # held) is more than this share of the time since the search began. Measured on the
    # 17 zoo models (sim cost, ILP, 2 workers): at 0.5 every graph was within 0.003% of
    # the 20 s limit alone's and at least as fast as backtracking's, and llama3_2_1b's
    # search took 6.2 s against 12.9 s; at 0.3, nasnet_a ended 0.3% and mobilenet_v2 0.05% behind
    # backtracking (nasnet_a's climb waits 2.7 s for its first gain). 1: only the limit.
    refine_patience: float = 0.5
    # ... or once the gain over that window is at most this share of all the search has
    # gained from the input: diminishing returns (the last stretch's gain rate below
    # 1/50 of the search's average at 0.5 patience). 0: only a window with no gain.
    # Replayed on the 17 zoo models' anytime curves (63f2b96's run), every share from
    # 0.003 to 0.03 keeps every graph at least as fast as backtracking's; inception_v3's
    # climbs, which gain 1e-5 of its time a step for their whole 10 s, end at 3.8 s
    # (0.06x of backtracking's search) where mobilenet_v2's, still gaining 7% of what its
    # search has gained per window, go on to beat backtracking's graph at 5 s. Measured
    # at 0.01 (benchmarks/results/eqsat.json): inception_v3's search 4.3 s (0.072x), every
    # graph still at least as fast as backtracking's.
    refine_share: float = 0.01
    # ... but neither before the climb has run this many seconds. Patience alone gives a
    # climb as long as the search took to reach it, and once the merges of overlapping
    # sets were left out (`_merged_from`) bert_small's took 0.7 s, its climbs stopped
    # at 1.4 s and its graph 0.8% behind backtracking's: the merge of Q and K that pays
    # is found 0.8 s into its climb.
    refine_min: float = 1.0
    # Processes at once: the proxies' HiGHS solves, and the local moves' climbs (the
    # input's on a second process);
    # 0: one per core this process may use. Side by side pays even on cores other jobs
    # hold: at load 3-4 on 2 cores, 16 zoo models' ILP searches took 531 s against 920 s
    # one after another, the graphs the same or better (benchmarks/results/eqsat*.json).
    workers: int = 0

    def __post_init__(self) -> None:
        if self.extraction not in EXTRACTIONS:
            raise EqsatError(f"unknown extraction {self.extraction!r}; expected one of "
                             f"{', '.join(EXTRACTIONS)}")
        if self.workers < 0:
            raise EqsatError(f"workers must be >= 0, found {self.workers}")
        for name in ("node_limit", "iter_limit", "match_limit", "ban_iters", "multi_iters"):
            if getattr(self, name) < 1:
                raise EqsatError(f"{name} must be >= 1, found {getattr(self, name)}")
        if self.sink_iters < 0:
            raise EqsatError(f"sink_iters must be >= 0, found {self.sink_iters}")
        for name in ("time_limit", "ilp_time_limit", "refine_limit"):
            if not getattr(self, name) > 0:
                raise EqsatError(f"{name} must be > 0 seconds, found {getattr(self, name)}")
        if not 0 < self.refine_patience <= 1:
            raise EqsatError(f"refine_patience must be in (0, 1], found {self.refine_patience}")
        if not 0 <= self.refine_share < 1:
            raise EqsatError(f"refine_share must be in [0, 1), found {self.refine_share}")
        if not self.refine_min >= 0:
            raise EqsatError(f"refine_min must be >= 0 seconds, found {self.refine_min}")


@dataclass(frozen=True)
class EqsatResult:
    graph: Graph
    origin: Origin
    cost_before: float
    cost_after: float
    cost_name: str
    extraction: str
    extraction_cost: str  # the additive cost the extraction minimised
    objective: float  # the extracted graph under that cost (greedy: tree cost)
    iterations: int
    enodes: int
    eclasses: int
    stopped: str  # "saturated", "node limit", "time limit" or "iterations"
    ilp_status: str  # "" (greedy), "optimal", "time limit: best found", "failed: ...";
    # then which local moves were kept, from which start
    applied: Mapping[str, int]  # per rule direction: the unions its matches made
    used: Mapping[str, int]  # per rule direction: its applications the result contains
    saturate_s: float
    extract_s: float
    seconds: float
    kept_input: bool
    refine_moves: int = 0  # whole-graph-priced local moves tried after extraction
    workers: int = 1  # processes it ran at once (`EqsatOptions.workers`)
    # When the best graph so far improved: (seconds since the start, its cost), from the
    # input's at 0 s through the extraction's to the local moves' (an anytime curve: when
    # a result at least as good as a given one was first reached).
    progress: tuple[tuple[float, float], ...] = ()
    # Per climb of local moves, "START: why it ended" (`_Climbed`): from the extraction,
    # from the input, from the runner-up; none under an additive cost (no climbs).
    refine_ends: tuple[str, ...] = ()
    # Ctrl-C ended the local moves: the result is the best graph they had reached.
    interrupted: bool = False

    @property
    def speedup(self) -> float:
        return self.cost_before / self.cost_after if self.cost_after > 0 else math.inf


# ---- building and saturating the e-graph ------------------------------------------------


@dataclass
class _Loaded:
    eg: EGraph
    roots: list[int]
    leaf_of: dict[int, int] = field(default_factory=dict)  # e-node id -> input node id
    orig_of: dict[int, int] = field(default_factory=dict)  # e-node id -> input node id
    # Filled as `_build` needs them (the e-graph no longer changes by then): each e-node's
    # output types (type inference is most of a build's time otherwise), and the input's
    # source names.
    out_types: dict[int, tuple[TensorType, ...]] = field(default_factory=dict)
    names: frozenset[str] | None = None
    # Each e-node's operand classes (canonical), and per class the weight node a folded
    # build puts in its place: a local move orders and builds a whole extraction, and
    # `find` per operand or a weight checked anew per build were a third of that.
    kids: dict[int, tuple[int, ...]] = field(default_factory=dict)
    folded: dict[int, Node] = field(default_factory=dict)

    def children(self, i: int) -> tuple[int, ...]:
        """E-node i's operand classes; only once the e-graph no longer changes."""
        got = self.kids.get(i)
        if got is None:
            find = self.eg.find
            got = self.kids[i] = tuple(find(k) for k in self.eg.nodes[i].children)
        return got


def _load(graph: Graph, eg: EGraph) -> _Loaded:
    ids: dict[Value, int] = {}
    out = _Loaded(eg, [])
    for n in graph.nodes:
        if n.is_source:
            i = eg.var(f"%{n.id}", n.type)
            ids[Value(n.id, 0)] = i
            out.leaf_of[i] = n.id
            out.orig_of[i] = n.id
            continue
        for k in range(len(n.types)):
            i = eg.add(n.op, dict(n.attrs), [ids[v] for v in n.inputs], k)
            ids[Value(n.id, k)] = i
            out.orig_of.setdefault(i, n.id)
    out.roots = [ids[v] for v in graph.outputs]
    return out


def _directions(matcher: Matcher) -> list[Any]:
    """The matcher's rules as e-graph rewrite directions: what the backtracking search
    matches (each `<=>` rule both ways, as `Matcher` expands it), less the rules with
    several outputs that only apply a one-output rule to each (`_products`)."""
    from superopt.substitutions.covers import _direction

    out = []
    for r in matcher.rules:
        try:
            out.append(_direction(r, True))
        except IRError:
            continue  # a bare-variable source: the matcher cannot use it either
    return _products(out)


_VAR_RE = re.compile(r"\?([A-Za-z_][A-Za-z0-9_]*)")


def _output_rewrite(r: Rule, k: int) -> tuple[str, frozenset[str], bool] | None:
    """Output `k` of rule `r` as a rule of its own, its text with the variables named by
    first appearance; the conjuncts of the condition's top-level `and` that read only
    its variables (renamed, as `ast.unparse` writes them); and whether every conjunct
    does. None when that output is no rule alone (its target reads a variable another
    source binds, as a merge's does) or the condition does not parse."""
    import ast
    import copy

    from superopt.substitutions.text import format_rule

    try:
        text = format_rule(Rule("_", (r.source[k],), (r.target[k],))).split(":", 1)[1]
    except PatternError:
        return None
    names: dict[str, str] = {}
    key = _VAR_RE.sub(lambda m: "?" + names.setdefault(m.group(1), f"v{len(names)}"), text)
    if not r.condition:
        return key, frozenset(), True
    try:
        body = compile_expr(r.condition).body
    except PatternError:
        return None
    parts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) \
        else [body]
    has: set[str] = set()
    every = True
    for part in parts:
        variables = [n for n in ast.walk(part) if isinstance(n, ast.Name)
                     and n.id.startswith("v_")]  # `compile_expr` writes ?x as v_x
        if not {n.id[2:] for n in variables} <= names.keys():
            every = False
            continue
        part = copy.deepcopy(part)
        for n in ast.walk(part):
            if isinstance(n, ast.Name) and n.id.startswith("v_"):
                n.id = "v_" + names[n.id[2:]]
        has.add(ast.unparse(part))
    return key, frozenset(has), every


def _products(dirs: list[Any]) -> list[Any]:
    """`dirs` less each direction with several sources whose every output is a
    one-source direction's rewrite, variables renamed, under a condition that asks no
    more (fold_rms_norm_weight2: two matmuls reading one RMS norm, each folded as
    fold_rms_norm_weight folds one). In an e-graph such a rule adds nothing the one-output
    rule does not add at the same matches: its terms are the same terms, shared by hash
    consing (for the backtracking search it is a different step, a graph with both
    matmuls folded at once). Matching its pairs and triples of sources took 8,000 matches
    in an iteration on llama3_2_1b."""
    singles: dict[str, list[frozenset[str]]] = {}
    for d in dirs:
        got = _output_rewrite(d.rule, 0) if len(d.rule.source) == 1 else None
        if got is not None and got[2]:
            singles.setdefault(got[0], []).append(got[1])

    def covered(r: Rule, k: int) -> bool:
        got = _output_rewrite(r, k)
        return got is not None and any(needs <= got[1] for needs in singles.get(got[0], ()))

    return [d for d in dirs
            if len(d.rule.source) == 1 or not all(covered(d.rule, k)
                                                  for k in range(len(d.rule.source)))]


def _applicable(eg: EGraph, d: Any, m: Any) -> bool:
    """Whether a match's rule condition holds (what `_apply` checks first)."""
    from superopt.rewrite.terms import holds
    from superopt.substitutions.egraph import deferred_ok

    env: dict[str, Any] = {k: eg.type_of(c) for k, c in m.tensors.items()}
    env.update(m.attrs)
    try:
        return deferred_ok(eg, m, env) and holds(d.rule, env)
    except (IRError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return False


def _match_key(eg: EGraph, j: int, m: Any, roots: tuple[int, ...]) -> tuple[Any, ...] | None:
    """Direction `j`'s match by the classes it binds now (None: an attribute value that
    cannot be hashed, never the case for canonical attributes)."""
    key = (j, tuple(eg.find(r) for r in roots),
           tuple(sorted((k, eg.find(v)) for k, v in m.tensors.items())),
           tuple(sorted(m.attrs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _saturate(eg: EGraph, dirs: list[Any], opts: EqsatOptions,
              made: dict[str, list[frozenset[int]]],
              partial: frozenset[int] | None = None) -> tuple[int, str, Counter[str]]:
    """Apply every match of every direction per iteration until nothing changes or a limit
    is hit; `made` collects, per rule, the e-nodes each of its applications created.

    Scheduling (egg's backoff idea): a direction with more than `match_limit` matches in
    an iteration (scaled by 2 per earlier ban) applies only that many and then rests for
    `ban_iters` iterations (doubling per ban), so that one exploding rule (merging every
    subset of NasNet-A's sibling convolutions) does not fill the node limit with terms
    nobody extracts while the others wait. A multi-source direction runs in at most
    `multi_iters` iterations in which it applies (Tensat's k_multi; counting those only, a
    merge whose operands a chain of other rules makes is still found: an average pool
    rewritten as a convolution, then made dense, then merged with its 1x1 siblings).
    The sinking directions (`_sinks`) run on alone for `sink_iters` iterations past
    `iter_limit`, and with `partial` (e-nodes of values read in part: `_partial_demand`)
    apply only where they move a slice into one of those."""
    from superopt.substitutions.covers import _apply, _matches

    applied: Counter[str] = Counter()
    active = set(range(len(dirs)))
    sinking = {j for j, d in enumerate(dirs) if d.forward and _sinks(d.rule)}
    reparam = {j for j, d in enumerate(dirs) if d.forward and _reparams(d.rule)}
    # E-nodes of the operand terms the re-parameterising rules made (a merged conv's
    # masked kernel): their classes match no re-parameterisation again (`_reparams`).
    reparam_made: set[int] = set()
    last_iter, late = opts.iter_limit, False
    bans = [0] * len(dirs)
    resting_until = [0] * len(dirs)
    runs = [0] * len(dirs)
    tried: set[tuple[Any, ...]] = set()
    # The input's e-nodes, and per e-node a multi-source application made, the input
    # e-nodes it merges (`_merged_from`).
    n_input = len(eg)
    origins: dict[int, frozenset[int]] = {}
    it = 0
    try:
        while True:
            if it >= last_iter:
                if late or not sinking or not opts.sink_iters:
                    return it, "iterations", applied
                # The others stop here; the sinking rules run on alone.
                late, last_iter, active = True, last_iter + opts.sink_iters, sinking
            it += 1
            by_op = eg.by_op()
            index = eg.match_index()  # nothing changes the e-graph until every match is found
            present = set(by_op)
            wanted = None if partial is None else {eg.find(i) for i in partial}
            found = []
            resting = False
            for j, d in enumerate(dirs):
                if j not in active:
                    continue
                if resting_until[j] >= it:
                    resting = True
                    continue
                if len(d.sources) > 1 and runs[j] >= opts.multi_iters:
                    continue
                if not d.ops <= present:
                    continue
                limit = opts.match_limit << bans[j]
                # Only matches whose condition holds count: a merge of a 1x1 convolution
                # with a wider one matches every pair of 1x1 convolutions by pattern
                # (inception: 1,001), and counted, those would keep it resting for ever.
                got = [hit for hit in _matches(eg, d, by_op, 2 * limit + 1, index)
                       if _applicable(eg, d, hit[0])]
                if j in reparam and reparam_made:
                    made_now = {eg.find(c) for c in reparam_made}
                    got = [hit for hit in got if not any(
                        eg.find(c) in made_now for c in hit[0].tensors.values())]
                if wanted is not None and j in sinking:
                    # Only into what the outputs read in part (`_partial_demand`): a slice
                    # of a tensor needed whole anyway is cheaper than computing both.
                    got = [hit for hit in got if _sunk_into(eg, d, hit[0], by_op) & wanted]
                eg.check_deadline()
                if len(got) > limit:
                    # The first `limit` still apply (a merge of sibling convolutions has
                    # more matches each round, as merged ones pair up again; applying
                    # none would ban it for good), then it rests.
                    got = got[:limit]
                    resting_until[j] = it + (opts.ban_iters << bans[j])
                    bans[j] += 1
                    resting = True
                found += [(j, d, m, rts) for m, rts in got]
            size, unions = len(eg), eg.unions
            ran: set[int] = set()
            for j, d, m, rts in found:
                multi: frozenset[int] | None = None  # what a multi-source match merges
                # A match tried before, over the same classes, changes nothing again (the
                # union it states holds, or its condition or target failed then and
                # would now): most of a late iteration's matches (llama: 70%).
                key = _match_key(eg, j, m, rts)
                if key is not None:
                    if key in tried:
                        continue
                    tried.add(key)
                if len(rts) > 1:
                    # A rule with several sources (a merge of siblings) rewrites each set
                    # of classes once: merge(a, b) and merge(b, a) are the same values at
                    # the same cost, split in the other order, and made in every order of
                    # every subset they filled most of a transformer's e-graph
                    # (llama3_2_1b: 9,000 e-nodes in its first attention block, 600 in
                    # the others) and of its ILP's time. merge(a, a) stays: without it
                    # efficientnet_b0's local moves ended 0.4% slower (337.7 us against
                    # 336.1 with it).
                    classes = tuple(sorted(eg.find(r) for r in rts))  # as a multiset
                    if (j, classes) in tried:
                        continue
                    tried.add((j, classes))
                    merged = _merged_from(eg, origins, n_input, classes)
                    if merged is not None and (not merged or (j, merged) in tried):
                        continue  # overlapping sets, or this set merged before
                    multi = merged
                n0 = len(eg)
                if _apply(eg, d, m, rts):
                    applied[d.rule.name] += 1
                    ran.add(j)
                if len(eg) > n0:
                    made.setdefault(d.rule.name, []).append(frozenset(range(n0, len(eg))))
                    if multi is not None:
                        tried.add((j, multi))
                        origins.update(dict.fromkeys(range(n0, len(eg)), multi))
                    if j in reparam:
                        roots = {eg.find(r) for r in rts}
                        reparam_made.update(i for i in range(n0, len(eg))
                                            if eg.find(i) not in roots)
                eg.check_deadline()
            for j in ran:  # k_multi counts the iterations in which a direction changed something
                runs[j] += 1
            eg.rebuild()
            # Saturated only when no direction was left out for resting: one that rested
            # may still have something to add.
            if len(eg) == size and eg.unions == unions and not resting:
                # Past the limit only the sinking rules ran: the others did not saturate.
                return it, "iterations" if late else "saturated", applied
    except BudgetExceeded as e:
        eg.rebuild()  # congruence over what was added before the limit
        return it, "time limit" if "time" in str(e) else "node limit", applied


def _merged_from(eg: EGraph, origins: Mapping[int, frozenset[int]], n_input: int,
                 classes: Sequence[int]) -> frozenset[int] | None:
    """The input e-nodes a multi-source application over `classes` would merge (each
    class's: its input e-nodes, or for a class a merge made, what that merge merged), or
    None where that is not known for every class (a class only one-source rules made),
    and the empty set where two different classes share one (merging Q with the merge of
    Q and K computes Q twice: not applied). A direction applied once over a set of input
    terms need not apply over the same set again: merge(merge(Q, K), V) and
    merge(merge(Q, V), K) are one three-way merge with its columns in another order, at
    nearly the same cost (under the simulator, the slice taking V out of a nested split
    can run 1.8 ns faster: hf:t5-encoder's small config, docs/eqsat.md)."""
    per: dict[int, frozenset[int]] = {}
    for c in dict.fromkeys(classes):
        ids = eg.members[eg.find(c)]
        own = frozenset(i for i in ids if i < n_input)
        if not own:
            made = [origins[i] for i in ids if i in origins]
            own = frozenset.intersection(*made) if made else frozenset()
        if not own:
            return None
        per[c] = own
    if len(per) > 1 and sum(map(len, per.values())) > len(frozenset().union(*per.values())):
        return frozenset()  # overlapping: not applied
    return frozenset().union(*per.values())


def _reparams(rule: Rule) -> bool:
    """Does the rule re-parameterise one op: its one source that op over variables, its
    target the same op over the same data operand (the first) and terms for the others
    (`group_conv_dense`, `group_conv_merge{2,4}`: a grouped conv as one with fewer
    groups and a masked kernel)? Such a rule applied to its own kind's result only
    composes re-parameterisations (merging merged groups) that the rules state directly
    on the original, so the saturation does not (ResNeXt-50 with `--rules groups`:
    12,540 e-nodes with the chains, 3,189 without)."""
    if len(rule.source) != 1 or len(rule.target) != 1:
        return False
    src, tgt = rule.source[0], rule.target[0]
    return (isinstance(src, PNode) and isinstance(tgt, PNode) and src.op == tgt.op
            and bool(src.children) and all(isinstance(c, PVar) for c in src.children)
            and bool(tgt.children) and tgt.children[0] == src.children[0]
            and tgt.children != src.children)


def _sinks(rule: Rule) -> bool:
    """Does the rule move a movement op one op toward the inputs: its one source that op
    over another op (not its own kind: composing two is no move), its target the other op
    with the movement op over variables only (the narrowing rules: `(slice (gelu ?x)) =>
    (gelu (slice ?x))`)? Such chains end at the inputs, and a step pays only with the rest
    of its chain."""
    if len(rule.source) != 1 or len(rule.target) != 1:
        return False
    src, tgt = rule.source[0], rule.target[0]
    if not (isinstance(src, PNode) and len(src.children) == 1
            and isinstance(src.children[0], PNode) and isinstance(tgt, PNode)):
        return False
    op, inner = src.op, src.children[0].op
    if not get_op(op).has(MOVEMENT) or inner == op or tgt.op != inner:
        return False
    moved = [q for q in walk(tgt) if isinstance(q, PNode) and q.op == op]
    return bool(moved) and all(isinstance(c, PVar) for q in moved for c in q.children)


def _narrowed(rule: Rule) -> tuple[str, str, frozenset[int]] | None:
    """For a sinking rule (`_sinks`): the movement op, the op it moves through, and the
    operands of that op the target applies the movement op to (attention's rows: its
    queries, not its keys or values)."""
    if not _sinks(rule):
        return None
    src, tgt = rule.source[0], rule.target[0]
    assert isinstance(src, PNode) and isinstance(tgt, PNode)
    inner = src.children[0]
    assert isinstance(inner, PNode)
    moved = set()
    for k, (a, b) in enumerate(zip(inner.children, tgt.children, strict=False)):
        if (isinstance(a, PVar) and isinstance(b, PNode) and b.op == src.op
                and b.children == (a,)):
            moved.add(k)
    return src.op, inner.op, frozenset(moved)


def _partial_demand(graph: Graph, ld: _Loaded, rules: Iterable[Rule]) -> frozenset[int]:
    """The input's e-nodes whose value the outputs read only in part, as the sinking rules
    can narrow it: read by a slice, or only at narrowable operands of ops read so (ViT's
    last block up to its attention's queries; not a tensor that is itself an output or
    feeds a key, a value or a convolution)."""
    narrow: dict[str, set[int]] = {}
    movers: set[str] = set()
    for r in rules:
        got = _narrowed(r)
        if got is not None:
            movers.add(got[0])
            narrow.setdefault(got[1], set()).update(got[2])
    uses: dict[int, list[tuple[int, int]]] = {}
    for n in graph.nodes:
        for k, v in enumerate(n.inputs):
            uses.setdefault(v.node, []).append((n.id, k))
    full = {v.node for v in graph.outputs}
    for n in reversed(graph.nodes):
        if n.id in full or n.is_source:
            continue
        for c, k in uses.get(n.id, ()):
            op = graph.node(c).op
            if op in movers:
                continue
            if c in full or k not in narrow.get(op, ()):
                full.add(n.id)
                break
    return frozenset(i for i, n in ld.orig_of.items()
                     if n not in full and not graph.node(n).is_source)


def _sunk_into(eg: EGraph, d: Any, m: Any, by_op: Mapping[str, list[tuple[int, int]]]
               ) -> set[int]:
    """The classes a sinking direction's match moves its slice into: those holding the op
    under the slice over the matched operands."""
    inner = d.rule.source[0].children[0]
    kids = tuple(eg.find(m.tensors[c.name]) if isinstance(c, PVar) else None
                 for c in inner.children)
    return {eg.find(cls) for cls, i in by_op.get(inner.op, ())
            if tuple(eg.find(k) for k in eg.nodes[i].children) == kids}


# ---- extraction ---------------------------------------------------------------------------


@dataclass
class _Space:
    """The e-classes the outputs need, their distinct e-nodes and each e-node's cost."""

    classes: list[int]
    nodes: dict[int, list[int]]  # class -> e-node ids (one per distinct canonical e-node)
    kids: dict[int, tuple[int, ...]]  # e-node id -> distinct operand classes
    cost: dict[int, float]  # e-node id -> cost (inf: cannot be priced or typed)
    cls_of: dict[int, int] = field(default_factory=dict)  # e-node id -> its class
    users: dict[int, list[int]] = field(default_factory=dict)  # class -> e-nodes reading it
    rep: dict[int, int] = field(default_factory=dict)  # any e-node id -> the one kept of its kind
    weight_only: frozenset[int] = frozenset()  # classes whose values are weights' alone

    def __post_init__(self) -> None:
        if not self.cls_of:
            for c in self.classes:
                for i in self.nodes[c]:
                    self.cls_of[i] = c
                    for k in self.kids[i]:
                        self.users.setdefault(k, []).append(i)

    def repriced(self, cost: dict[int, float]) -> _Space:
        """The same e-graph under other e-node costs."""
        return _Space(self.classes, self.nodes, self.kids, cost, self.cls_of, self.users,
                      self.rep, self.weight_only)


class FusedOpCost(AdditiveCost):
    """An additive stand-in for a fusing compiler: an elementwise or movement op costs
    `share` of what `inner` says (the default compiler fuses it into the kernel that
    produces or consumes it, saving its launch and memory round trip), every other op
    what `inner` says. Under `simop` (each op its own kernel) a merge of two convolutions
    that share an input pays for the split after it as a kernel of its own, and never
    wins; under the simulator's fused time it does (squeezenet's expand convolutions,
    1.2x). With a share above zero, a bias fused into its matmul (`linear`) beats matmul +
    ewadd; at zero the two tie. Neither ranks every pair of graphs as the fused
    simulator does (bert_base: the graph cheaper at 0.05 is 1% slower simulated), so the
    whole-graph cost picks among the extractions (`_extraction_costs`)."""

    name = "fused"

    def __init__(self, inner: AdditiveCost, share: float = 0.05, vector: bool = False) -> None:
        super().__init__(inner.fold)
        self.inner = inner
        self.share = share
        self.vector = vector
        self.name = f"fused {'vector ' if vector else ''}{inner.name} ({share:g})"
        from superopt.tpu_sim.op_costs import is_mxu_op

        self._mxu = is_mxu_op

    def fusible(self, op: str) -> bool:
        """Elementwise and movement ops; with `vector`, every op off the matrix unit (the
        simulator's priority fusion puts a batch norm or a pooling into the kernel of the
        convolution next to it, and a convolution never into another's)."""
        if self.vector:
            return not self._mxu(op)
        d = get_op(op)
        return d.has(ELEMENTWISE) or d.has(MOVEMENT)

    def measure(self, op: str, attrs: Any, ins: Any, outs: Any,
                weights: tuple[bool, ...] = ()) -> float:
        share = self.share if self.fusible(op) else 1.0
        if share == 0.0:
            return 0.0  # not 0 * inf: an op the simulator cannot place alone is fused
        return share * self.inner.op_cost(op, attrs, ins, outs, weights)


def _extraction_costs(cost: CostFunction) -> list[AdditiveCost]:
    """The additive costs to extract under: the search cost itself if additive; else its
    per-op simulator proxy as it is and with fusion (each extraction is then priced with
    the whole-graph cost and the cheapest kept)."""
    if isinstance(cost, AdditiveCost):
        return [cost]
    proxies = [p for p in cost.proxies() if isinstance(p, SimOpCost)] or list(cost.proxies())
    if not proxies:
        raise EqsatError(f"cost {cost.name!r} has no additive proxy to extract with")
    return [proxies[0], FusedOpCost(proxies[0], 0.05), FusedOpCost(proxies[0], 0.0),
            FusedOpCost(proxies[0], 0.05, vector=True)]


def _space(ld: _Loaded, graph: Graph, cost: AdditiveCost, tie: float = 0.0,
           like: _Space | None = None,
           typed: dict[int, tuple[Any, ...]] | None = None) -> _Space:
    """The extraction problem under `cost`; an e-node a rule made costs `tie` more than
    the proxy says, so that where the proxy cannot tell two terms apart the input's
    stays (`TIE_S`). `like`: this e-graph's space under another cost with the same
    `fold`, whose classes, e-nodes and weight-only classes are taken as they are (only
    the prices differ; walking the e-graph was most of the time: llama3_2_1b's four
    proxies took 1.9-3.2 s, 1.1 s so). `typed`: per e-node, its operand and output types
    and which operands are weight-only (empty where it does not type), filled by the first
    space and read by the others with the same `fold` (inferring them again was half of
    each further space's time)."""
    eg = ld.eg
    if like is not None:
        order, nodes, kids = like.classes, like.nodes, like.kids
        rep, wo = like.rep, like.weight_only
    else:
        order, nodes, kids, rep, wo = _structure(ld, graph, cost.fold)
    prices: dict[int, float] = {}
    for c in order:
        for i in nodes[c]:
            n = eg.nodes[i]
            if n.op == VAR or (cost.fold and c in wo and all(k in wo for k in kids[i])):
                prices[i] = 0.0
                continue
            sig = typed.get(i) if typed is not None else None
            if sig is None:
                ins = tuple(eg.type_of(k) for k in n.children)
                try:
                    sig = (ins, tuple(get_op(n.op).shape(ins, dict(n.attrs))),
                           tuple(eg.find(k) in wo for k in n.children))
                except (IRError, ValueError, KeyError, TypeError, ZeroDivisionError):
                    sig = ()
                if typed is not None:
                    typed[i] = sig
            try:
                p = cost.op_cost(n.op, n.attrs, *sig) / max(len(sig[1]), 1) if sig \
                    else math.inf
            except (IRError, ValueError, KeyError, TypeError, ZeroDivisionError):
                p = math.inf
            # A multi-output op (split) is one e-node per output: each carries its share.
            prices[i] = p + (tie if i not in ld.orig_of else 0.0) \
                if math.isfinite(p) and p >= 0 else math.inf
    if like is not None:
        return like.repriced(prices)
    return _Space(order, nodes, kids, prices, rep=rep, weight_only=wo)


def _structure(ld: _Loaded, graph: Graph, fold: bool) -> tuple[
        list[int], dict[int, list[int]], dict[int, tuple[int, ...]], dict[int, int],
        frozenset[int]]:
    """`_space`'s classes (from the roots down), their distinct e-nodes, each one's
    operand classes, each e-node's representative, and the weight-only classes."""
    eg = ld.eg
    weights = {i for i, nid in ld.leaf_of.items() if graph.nodes[nid].op != "input"}
    # Weight-only classes (with `fold`, their values are computed once, for free): a class
    # holding a weight, or an e-node over weight-only classes only. A fixpoint, since
    # unions may put such an e-node anywhere.
    wo: set[int] = {eg.find(i) for i in weights}
    seen: set[int] = set()
    order: list[int] = []
    stack = [eg.find(r) for r in ld.roots]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        for i in eg.members[c]:
            stack.extend(eg.find(k) for k in eg.nodes[i].children)
    nodes: dict[int, list[int]] = {}
    kids: dict[int, tuple[int, ...]] = {}
    rep: dict[int, int] = {}
    readers: dict[int, list[int]] = {}  # class -> the classes with an e-node reading it
    for c in order:
        keys: dict[Any, int] = {}
        for i in eg.members[c]:
            n = eg.nodes[i]
            canon = tuple(eg.find(k) for k in n.children)
            key = (n.op, n.attrs, canon, n.output)
            rep[i] = keys.setdefault(key, i)
            if rep[i] != i:
                continue
            nodes.setdefault(c, []).append(i)
            kids[i] = tuple(dict.fromkeys(canon))
            for k in kids[i]:
                readers.setdefault(k, []).append(c)
    if fold:
        # A worklist: a class is looked at again only when one of its operand classes
        # became weight-only (sweeping every class until nothing changed was most of
        # this function's time on llama3_2_1b).
        work = deque(order)
        queued = set(order)
        while work:
            c = work.popleft()
            queued.discard(c)
            if c not in wo and any(eg.nodes[i].op != VAR and all(k in wo for k in kids[i])
                                   for i in nodes[c]):
                wo.add(c)
                for r in readers.get(c, ()):
                    if r not in wo and r not in queued:
                        queued.add(r)
                        work.append(r)
    return order, nodes, kids, rep, frozenset(wo)


def _greedy(sp: _Space) -> dict[int, int]:
    """Per class the e-node of least tree cost. A worklist: an e-node is priced again only
    when one of its operand classes got cheaper (a sweep over every e-node until nothing
    changes took 1.3 s per extraction on NasNet-A's 50,000 e-nodes). Strict improvements
    only, so no cycle is chosen (module docstring)."""
    best = dict.fromkeys(sp.classes, math.inf)
    pick: dict[int, int] = {}
    # Leaves first (operands were found after their users), so most e-nodes are priced
    # once their operands are final.
    work = deque(i for c in reversed(sp.classes) for i in sp.nodes[c])
    queued = set(work)
    while work:
        i = work.popleft()
        queued.discard(i)
        total = sp.cost[i]
        for k in sp.kids[i]:
            total += best[k]
        c = sp.cls_of[i]
        if total < best[c]:
            best[c], pick[c] = total, i
            for u in sp.users.get(c, ()):
                if u not in queued:
                    queued.add(u)
                    work.append(u)
    return pick


def _ilp(sp: _Space, roots: list[int], time_limit: float) -> tuple[dict[int, int] | None, str]:
    """Exact DAG-cost extraction with HiGHS; None and why when no solution was found."""
    return _ilp_many([(sp, roots)], time_limit, 1)[0]


def _ilp_many(problems: Sequence[tuple[_Space, list[int]]], time_limit: float, workers: int
              ) -> list[tuple[dict[int, int] | None, str]]:
    """`_ilp` of each (space, roots), up to `workers` at once, each in a forked child
    killed `ILP_GRACE_S` past the time limit (`_forked_many`)."""
    # The solves' modules imported here, once, before the fork: imported in each child
    # they took ~0.8 s of the proxies' 1.6-1.8 s wall on inception_v3 and llama3_2_1b.
    for module in ("networkx", "scipy.sparse", "highspy"):
        with contextlib.suppress(ImportError):  # highspy is optional (`_milp`)
            importlib.import_module(module)
    got = _forked_many([functools.partial(_ilp_solve, sp, roots, time_limit)
                        for sp, roots in problems], time_limit + ILP_GRACE_S, workers)
    return [(None, f"failed: {g}") if isinstance(g, str) else g for g in got]


@dataclass(frozen=True)
class _Chunk:
    """A part of the extraction solved alone (`_chunks`): the classes that only `cut`
    reaches (None: the outputs' part), and the cuts below it, priced as their optimum."""

    cut: int | None
    classes: tuple[int, ...]
    below: tuple[int, ...]


def _zero_terms(sp: _Space) -> dict[int, int]:
    """The classes with a term of cost 0 (weights, and under `fold` what is computed from
    them alone) and that term's e-node. Such a class is free in any extraction and needs
    nothing outside such classes, so the ILP leaves it out. A worklist from the leaves:
    an e-node counts once all its operand classes do."""
    waiting = {i: len(sp.kids[i]) for c in sp.classes for i in sp.nodes[c]
               if sp.cost[i] == 0 and c not in sp.kids[i]}
    work = [i for i, n in waiting.items() if n == 0]
    zero: dict[int, int] = {}
    while work:
        i = work.pop()
        c = sp.cls_of[i]
        if c in zero:
            continue
        zero[c] = i
        for u in sp.users.get(c, ()):
            if u in waiting:
                waiting[u] -= 1
                if waiting[u] == 0:
                    work.append(u)
    return zero


def _chunks(sp: _Space, roots: Sequence[int], zero: Mapping[int, int],
            min_chunk: int | None = None) -> list[_Chunk]:
    """The extraction split where it is exactly separable, smallest parts first. A class
    `x` whose dominated classes (every path from the outputs to them passes through `x`,
    in the class graph of priced e-nodes, free classes left out) use no class but
    themselves and `x` is a cut: whatever else is extracted, the part below `x` is
    needed exactly when `x` is, and shares nothing with the rest, so its optimum can be
    found alone and `x` priced at it above (a transformer's residual stream between
    layers; the outputs' one ILP was a product of per-layer searches for HiGHS). A cut
    with fewer than `min_chunk` (`MIN_CHUNK`) e-nodes of its own stays in the part above
    it."""
    import networkx as nx

    least = MIN_CHUNK if min_chunk is None else min_chunk

    top = -1  # a virtual class above the outputs (class ids are >= 0)
    g = nx.DiGraph()
    g.add_node(top)
    g.add_edges_from((top, r) for r in roots if r not in zero)
    for c in sp.classes:
        if c in zero:
            continue
        g.add_node(c)
        g.add_edges_from((c, k) for i in sp.nodes[c] if math.isfinite(sp.cost[i])
                         for k in sp.kids[i] if k not in zero)
    idom = nx.immediate_dominators(g, top)
    below: dict[int, list[int]] = {}
    for c, d in idom.items():
        if c != d:
            below.setdefault(d, []).append(c)
    # Dominator-tree intervals: `y` is dominated by `x` iff pre[x] <= pre[y] < end[x].
    pre: dict[int, int] = {}
    end: dict[int, int] = {}
    post: list[int] = []
    stack: list[tuple[int, bool]] = [(top, False)]
    while stack:
        c, done = stack.pop()
        if done:
            end[c] = len(pre)
            post.append(c)
            continue
        pre[c] = len(pre)
        stack.append((c, True))
        stack.extend((k, False) for k in below.get(c, ()))
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    size: dict[int, int] = {}  # e-nodes of a class's own part, its cuts' parts left out
    cuts: set[int] = set()
    for c in post:  # children before parents
        succ = [pre[k] for k in g.successors(c)]
        lo[c] = min([pre[c], *succ, *(lo[k] for k in below.get(c, ()))])
        hi[c] = max([pre[c], *succ, *(hi[k] for k in below.get(c, ()))])
        size[c] = len(sp.nodes.get(c, ())) + sum(size[k] for k in below.get(c, ())
                                                  if k not in cuts)
        if c != top and lo[c] >= pre[c] and hi[c] < end[c] and size[c] >= least:
            cuts.add(c)
    out: list[_Chunk] = []
    for c in post:
        if c != top and c not in cuts:
            continue
        own: list[int] = [] if c == top else [c]
        nested: list[int] = []
        walk = list(below.get(c, ()))
        while walk:
            k = walk.pop()
            if k in cuts:
                nested.append(k)
                continue
            own.append(k)
            walk.extend(below.get(k, ()))
        out.append(_Chunk(None if c == top else c, tuple(own), tuple(nested)))
    return out


def _ilp_solve(sp: _Space, roots: list[int], time_limit: float
               ) -> tuple[dict[int, int] | None, str]:
    """`_ilp` in this process: the free classes (`_zero_terms`) take their free term,
    and the rest is solved part by part (`_chunks`), each part's HiGHS solve limited to
    what is left of `time_limit`. A part HiGHS finds nothing for in time takes its
    greedy extraction. A part with the same problem as one solved before (`_part_key`:
    a transformer's repeated layers) takes that one's solution."""
    deadline = time.monotonic() + time_limit
    zero = _zero_terms(sp)
    pick: dict[int, int] = dict(zero)
    value: dict[int, float] = {}  # cut class -> its part's optimum
    statuses: set[str] = set()
    # Part key -> (per class in the key's order, the index of its chosen e-node), status.
    alike: dict[tuple[Any, ...], tuple[tuple[int | None, ...], str]] = {}
    for chunk in _chunks(sp, roots, zero):
        nodes: dict[int, list[int]] = {}
        kids: dict[int, tuple[int, ...]] = {}
        cost: dict[int, float] = {}
        for c in chunk.classes:
            nodes[c] = [i for i in sp.nodes[c] if math.isfinite(sp.cost[i])]
            for i in nodes[c]:
                kids[i] = tuple(k for k in sp.kids[i] if k not in zero)
                cost[i] = sp.cost[i]
        for c in chunk.below:  # one e-node of the part's optimum; ids < 0 are stand-ins
            nodes[c], kids[-2 - c], cost[-2 - c] = [-2 - c], (), value[c]
        tops = [chunk.cut] if chunk.cut is not None else list(
            dict.fromkeys(r for r in roots if r not in zero))
        if not chunk.classes or not tops:
            continue  # the outputs are cuts (or free) whose parts were solved
        # A part below that every extraction of this one needs is a constant of its
        # optimum: priced 0 in the ILP, the layers of a residual stream (whose parts below
        # add up as it goes) are the same problem (`_part_key`). `cost` keeps its price.
        forced = _forced(nodes, kids, tops, set(chunk.below))
        part = _Space([*chunk.classes, *chunk.below], nodes, kids,
                      {**cost, **{-2 - c: 0.0 for c in forced}})
        keyed = _part_key(part, tops)
        if keyed is not None and keyed[0] in alike:
            at, status = alike[keyed[0]]
            got = {c: nodes[c][k] for c, k in zip(keyed[1], at, strict=True) if k is not None}
        else:
            greedy = _greedy(part)
            problem, enodes, col = _ilp_problem(part, tops,
                                                max(deadline - time.monotonic(), 0.5),
                                                start=greedy)
            got, status = _ilp_pick(part, enodes, col, _milp(problem))
            if got is None:
                got, status = greedy, "time limit: greedy"
                if not all(t in got for t in tops):
                    return None, "failed: no extraction"
            if keyed is not None:
                alike[keyed[0]] = (tuple(nodes[c].index(got[c]) if c in got else None
                                         for c in keyed[1]), status)
        statuses.add(status)
        pick.update((c, i) for c, i in got.items() if i >= 0)
        if chunk.cut is not None:
            # fsum: the same part's optimum to the bit whatever order the set gives, so
            # the parts above two alike cuts stay alike.
            value[chunk.cut] = math.fsum(cost[got[c]] for c in _reached(part, tops, got))
    if statuses <= {"optimal"}:
        return pick, "optimal"
    return pick, "time limit: best found" if "time limit: greedy" not in statuses else \
        "time limit: best found, greedy in parts"


def _forced(nodes: Mapping[int, list[int]], kids: Mapping[int, tuple[int, ...]],
            tops: Sequence[int], among: set[int]) -> set[int]:
    """The classes of `among` that every extraction from `tops` needs: per class, those
    of `among` that all of its e-nodes need (itself, if in `among`), as the greatest
    fixpoint (a cycle needs nothing it does not need without it)."""
    if not among:
        return set()
    need: dict[int, frozenset[int]] = dict.fromkeys(nodes, frozenset(among))
    changed = True
    while changed:
        changed = False
        for c, members in nodes.items():
            got: frozenset[int] | None = None
            for i in members:
                via = frozenset().union(*(need[k] for k in kids[i]))
                got = via if got is None else got & via
            new = (got or frozenset()) | (frozenset({c}) & among)
            if new != need[c]:
                need[c], changed = new, True
    return set().union(*(need[t] for t in tops))


def _part_key(sp: _Space, tops: Sequence[int]
              ) -> tuple[tuple[Any, ...], list[int]] | None:
    """A key equal for two extraction problems that differ only in their class and
    e-node ids, and the classes in the key's order: each class as the list of its
    e-nodes, each e-node as its cost and its operand classes' places in that order, the
    classes numbered as first met from `tops` (operands in order). Two parts with one key
    are one ILP renamed, so one's optimum is the other's, e-node for e-node in list
    order. None when some class is not reached from `tops` (not a part `_chunks` makes)."""
    place = {t: n for n, t in enumerate(dict.fromkeys(tops))}
    order = list(place)
    for c in order:  # grows while walked: breadth-first
        for i in sp.nodes[c]:
            for k in sp.kids[i]:
                if k not in place:
                    place[k] = len(order)
                    order.append(k)
    if len(order) != len(sp.classes):
        return None
    key = (tuple(place[t] for t in tops),
           tuple(tuple((sp.cost[i], tuple(place[k] for k in sp.kids[i])) for i in sp.nodes[c])
                 for c in order))
    return key, order


def _reached(sp: _Space, roots: Iterable[int], pick: Mapping[int, int]) -> set[int]:
    """The classes an extraction needs from `roots`."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        stack.extend(sp.kids[pick[c]])
    return seen


def _ilp_pick(sp: _Space, enodes: list[int], col: Mapping[int, int],
              got: tuple[Any, bool] | str) -> tuple[dict[int, int] | None, str]:
    if isinstance(got, str):
        return None, f"failed: {got}"
    x, solved = got
    chosen = {i for i in enodes if x[col[i]] > 0.5}
    pick: dict[int, int] = {}
    for c in sp.classes:
        cands = [i for i in sp.nodes[c] if i in chosen]
        if cands:
            pick[c] = min(cands, key=lambda i: sp.cost[i])
    status = "optimal" if solved else "time limit: best found"
    return pick, status


def _ilp_problem(sp: _Space, roots: list[int], time_limit: float,
                 start: Mapping[int, int] | None = None
                 ) -> tuple[dict[str, Any], list[int], dict[int, int]]:
    """The extraction as `scipy.optimize.milp`'s arguments, with the e-nodes in column
    order and each e-node's column. A binary per e-node and a variable per class (it is
    needed), equal to the sum of its e-nodes' (at most one is chosen: with non-negative
    costs some optimum chooses one per needed class). The outputs' classes are needed;
    per class and operand class, the class's e-nodes that read it, summed, are at most
    that class's variable; any other class is needed only if a chosen e-node reads it.
    One row per pair of classes with two entries per e-node in it,
    where a row per e-node and operand class listing every e-node of the operand class
    was long wherever a class has many (a merge's outputs: each of its splits is an
    e-node of the class): the same optima on the 17 zoo models' 68 proxy problems,
    solved 1.8x faster in all, BERT-small's 1.7x, T5-small's, NASNet-A's and
    Llama-3.2-1B's 3x (benchmarks/results/eqsat_ilp_formulation_ab.json). With
    `start` (an acyclic pick per class, as `_greedy`'s), the problem also carries it as a
    feasible solution, `x0`, for the solver to start from (`_highs`)."""
    import networkx as nx
    import numpy as np
    from scipy.sparse import coo_matrix

    enodes = [i for c in sp.classes for i in sp.nodes[c]]
    col = {i: k for k, i in enumerate(enodes)}
    ycol = {c: len(enodes) + k for k, c in enumerate(sp.classes)}
    cls_of = sp.cls_of
    # Classes on a cycle of the class graph (an edge per e-node to each operand class).
    g = nx.DiGraph()
    g.add_nodes_from(sp.classes)
    g.add_edges_from((cls_of[i], k) for i in enodes for k in sp.kids[i])
    scc_of: dict[int, int] = {}
    for n, comp in enumerate(nx.strongly_connected_components(g)):
        if len(comp) > 1:
            for c in comp:
                scc_of[c] = n
    ordered = sorted(scc_of)
    base = len(enodes) + len(ycol)
    ocol = {c: base + k for k, c in enumerate(ordered)}
    nvar = base + len(ordered)
    big = float(max(len(ordered), 1))
    finite = [sp.cost[i] for i in enodes if math.isfinite(sp.cost[i]) and sp.cost[i] > 0]
    scale = 1.0 / max(finite) if finite else 1.0  # HiGHS tolerances are absolute: costs ~1
    c_vec = np.zeros(nvar)
    ub = np.ones(nvar)
    lb = np.zeros(nvar)
    for i in enodes:
        p = sp.cost[i]
        if not math.isfinite(p) or cls_of[i] in sp.kids[i]:
            ub[col[i]] = 0.0  # cannot be priced, or is its own operand
        else:
            c_vec[col[i]] = p * scale
    for r in roots:
        lb[ycol[r]] = 1.0
    for c in ordered:
        ub[ocol[c]] = big
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: Iterable[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for cidx, v in entries:
            rows.append(r)
            cols.append(cidx)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    read_by: dict[int, list[int]] = {}  # class -> the e-nodes of other classes reading it
    for c in sp.classes:
        # needed <=> one e-node chosen
        row([(ycol[c], 1.0), *((col[i], -1.0) for i in sp.nodes[c])], 0.0, 0.0)
        readers: dict[int, list[int]] = {}
        for i in sp.nodes[c]:
            for k in dict.fromkeys(sp.kids[i]):
                if k != c:
                    readers.setdefault(k, []).append(i)
                    read_by.setdefault(k, []).append(i)
        for k, users in readers.items():
            # an e-node reading k chosen -> k needed
            row([*((col[i], 1.0) for i in users), (ycol[k], -1.0)], -math.inf, 0.0)
            if c in scc_of and scc_of.get(k) == scc_of[c]:
                # an e-node reading k chosen -> order(c) >= order(k) + 1
                row([(ocol[c], 1.0), (ocol[k], -1.0), *((col[i], -big) for i in users)],
                    1.0 - big, math.inf)
    outputs = set(roots)
    for k in sp.classes:
        if k not in outputs:
            # needed -> a chosen e-node reads it: true of some optimum (with non-negative
            # costs the classes no chosen e-node reads can be dropped), and it tightens the
            # relaxation (BERT-small's second part: root bound 0.58 -> 0.79 of 1.63): the
            # 68 zoo problems 41.4 -> 28.5 s, BERT-base 2.0x, BERT-small and T5-small 1.5x,
            # the same optima (benchmarks/results/eqsat_ilp_upward_ab.json)
            row([(ycol[k], 1.0), *((col[i], -1.0) for i in read_by.get(k, ()))],
                -math.inf, 0.0)
    a = coo_matrix((vals, (rows, cols)), shape=(len(lo), nvar)).tocsr()
    integrality = np.zeros(nvar)
    integrality[:len(enodes)] = 1  # the class variables are sums of binaries
    # Rows and bounds as the (A, lb, ub) and (lb, ub) tuples `scipy.optimize.milp` also
    # takes: not its classes, whose module costs 0.25 s to import where highspy solves.
    problem = dict(c=c_vec, constraints=(a, np.array(lo), np.array(hi)),
                   integrality=integrality, bounds=(lb, ub),
                   options={"time_limit": time_limit, "disp": False, "mip_rel_gap": 1e-6})
    if start is not None and all(r in start for r in roots):
        x0 = np.zeros(nvar)
        need = _reached(sp, roots, start)
        for c in need:
            x0[col[start[c]]] = 1.0
            x0[ycol[c]] = 1.0
        # The order variables: a class's height over the chosen e-nodes inside its
        # component (0 for a class nothing chosen reaches), below `big` since the
        # chosen e-nodes form no cycle.
        inner = nx.DiGraph()
        inner.add_nodes_from(ordered)
        inner.add_edges_from((c, k) for c in ordered if c in need for k in sp.kids[start[c]]
                             if k != c and scc_of.get(k) == scc_of[c])
        height: dict[int, int] = {}
        for c in reversed(list(nx.topological_sort(inner))):
            height[c] = 1 + max((height[k] for k in inner.successors(c)), default=-1)
            x0[ocol[c]] = float(height[c])
        problem["x0"] = x0
    return problem, enodes, col


def _milp(problem: dict[str, Any]) -> tuple[Any, bool] | str:
    """Solve `problem` (`scipy.optimize.milp`'s arguments) with HiGHS: through HiGHS's own
    Python package (highspy) when it is installed, else through scipy, which bundles an
    older HiGHS (1.12 in scipy 1.17: 16.4 s on T5-small's largest part, where highspy's
    1.16 took 2.4 s, same optimum). Returns (x, proved optimal), or why there is no x."""
    try:
        import highspy
    except ImportError:
        from scipy.optimize import milp

        res = milp(**{k: v for k, v in problem.items() if k != "x0"})  # no starts
        return (res.x, res.status == 0) if res.x is not None else str(res.message)
    return _highs(highspy, problem)


def _highs(highspy: Any, problem: dict[str, Any]) -> tuple[Any, bool] | str:
    """`_milp` through highspy."""
    import numpy as np
    from scipy.sparse import csc_matrix

    c = np.asarray(problem["c"], dtype=float)
    n = len(c)
    cons_a, cons_lb, cons_ub = _rows(problem["constraints"])
    a = csc_matrix(cons_a)
    bounds = problem.get("bounds")
    if bounds is None:
        bounds = (0.0, np.inf)
    bounds_lb, bounds_ub = (bounds.lb, bounds.ub) if hasattr(bounds, "lb") else bounds
    col_lb = np.broadcast_to(bounds_lb, n).astype(float)
    col_ub = np.broadcast_to(bounds_ub, n).astype(float)
    integral = np.broadcast_to(problem.get("integrality", 0), n)
    opts = problem.get("options", {})
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, a.shape[0]
    lp.col_cost_ = c
    lp.col_lower_ = np.where(np.isfinite(col_lb), col_lb, -inf)
    lp.col_upper_ = np.where(np.isfinite(col_ub), col_ub, inf)
    row_lb = np.broadcast_to(cons_lb, a.shape[0]).astype(float)
    row_ub = np.broadcast_to(cons_ub, a.shape[0]).astype(float)
    lp.row_lower_ = np.where(np.isfinite(row_lb), row_lb, -inf)
    lp.row_upper_ = np.where(np.isfinite(row_ub), row_ub, inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    kinds = highspy.HighsVarType
    lp.integrality_ = [kinds.kInteger if v else kinds.kContinuous for v in integral]
    # HiGHS prints a banner from C when made, whatever its options say: into /dev/null.
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    h.setOptionValue("output_flag", bool(opts.get("disp", False)))
    h.setOptionValue("threads", 1)  # parallel solves are separate processes (`_ilp_many`)
    if "time_limit" in opts:
        h.setOptionValue("time_limit", float(opts["time_limit"]))
    if "mip_rel_gap" in opts:
        h.setOptionValue("mip_rel_gap", float(opts["mip_rel_gap"]))
    h.passModel(lp)
    if problem.get("x0") is not None:
        # A known solution (the greedy extraction) to start from: on BERT-small's largest
        # part HiGHS took 15 s to find the optimum alone, 3.6 s from greedy's.
        start = highspy.HighsSolution()
        start.col_value = list(map(float, problem["x0"]))
        start.value_valid = True
        h.setSolution(start)
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    if info.primal_solution_status != 2:  # no feasible solution found
        return h.modelStatusToString(status)
    x = np.array(h.getSolution().col_value)
    claimed = float(info.objective_function_value)
    if problem.get("x0") is not None and float(c @ x) > claimed + 1e-9 * max(1.0, abs(claimed)):
        # HiGHS 1.16 can hand back the start itself as its optimum while pricing the
        # better solution it found in the presolved problem (MobileNet-V2's and
        # EfficientNet-B0's parts under the fused proxies: 8 of 152 solves, by ties of
        # 1e-4 of the objective). Such a solve runs again without the start: no solve
        # without one has shown this.
        left = float(opts.get("time_limit", math.inf)) - h.getRunTime()
        again = {k: v for k, v in problem.items() if k != "x0"}
        again["options"] = {**opts, "time_limit": max(left, 0.5)}
        return _highs(highspy, again)
    return x, status == highspy.HighsModelStatus.kOptimal


def _rows(constraints: Any) -> tuple[Any, Any, Any]:
    """(A, lb, ub) of a problem's rows: given as that tuple, or as a `LinearConstraint`."""
    if isinstance(constraints, tuple):
        return constraints
    return constraints.A, constraints.lb, constraints.ub


def _milp_bounded(problem: dict[str, Any], hard_limit: float) -> tuple[Any, bool] | str:
    """`_milp(problem)` in a forked child, killed after `hard_limit` seconds: HiGHS does
    not always keep its own time limit (T5-small's encoder: over 15 minutes in one solve
    at a 60 s limit). Returns (x, proved optimal) or why not."""
    return _forked_many([lambda: _milp(problem)], hard_limit, 1)[0]


def _forked_many(fns: Sequence[Callable[[], Any]], hard_limit: float, workers: int
                 ) -> list[Any]:
    """Each `fn()` (its value picklable) in a forked child, up to `workers` at once, each
    killed `hard_limit` seconds after it started: its value, or why there is none (a
    string). The four proxies' extractions are independent, and one HiGHS solve keeps
    one core busy."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    parent = os.getpid()
    out: list[Any] = ["not run"] * len(fns)
    todo = list(range(len(fns)))
    running: dict[Any, tuple[int, Any, float]] = {}  # pipe end -> (index, child, deadline)

    def start(k: int) -> None:
        recv, send = ctx.Pipe(duplex=False)

        def solve() -> None:
            _guard_child(parent)
            try:
                got = fns[k]()
            except Exception as e:
                got = f"{type(e).__name__}: {e}"
            send.send((got,))

        child = ctx.Process(target=solve, daemon=True)
        child.start()
        send.close()
        running[recv] = (k, child, time.monotonic() + hard_limit)

    def finish(recv: Any, result: Any) -> None:
        k, child, _ = running.pop(recv)
        out[k] = result
        if child.is_alive():
            child.kill()
        child.join()
        recv.close()

    try:
        while todo or running:
            while todo and len(running) < max(workers, 1):
                start(todo.pop(0))
            now = time.monotonic()
            for recv, (_, _, deadline) in list(running.items()):
                if deadline <= now:
                    finish(recv, f"HiGHS ran past {hard_limit:g} s")
            if not running:
                continue
            soonest = min(d for _, _, d in running.values())
            for recv in wait(list(running), timeout=max(0.0, soonest - time.monotonic())):
                try:
                    (got,) = recv.recv()
                except EOFError:
                    got = "HiGHS died"
                finish(recv, got)
    finally:
        for recv in list(running):
            finish(recv, "interrupted")
    return out


def _guard_child(parent: int) -> None:
    """In a forked child: leave Ctrl-C and SIGTERM to the parent (which stops its
    children itself), tell the parent's interrupt watcher nothing, and exit if the parent
    is killed (`superopt.interrupts.guard_worker`)."""
    from superopt.interrupts import guard_worker

    guard_worker(parent)


class _Forked:
    """`fn()` in a forked child, started at once; `result()` waits at most `limit`
    seconds from the start for its (picklable) value, None if it died or ran past."""

    def __init__(self, fn: Any, limit: float) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("fork")
        parent = os.getpid()
        self.recv, send = ctx.Pipe(duplex=False)

        def run() -> None:
            _guard_child(parent)
            send.send(fn())

        self.child = ctx.Process(target=run, daemon=True)
        self.child.start()
        send.close()
        self.deadline = time.monotonic() + limit

    def result(self, wait: bool = True) -> Any:
        """Its value, or None; with `wait` False only one already sent."""
        try:
            if not self.recv.poll(max(0.0, self.deadline - time.monotonic()) if wait else 0):
                return None
            return self.recv.recv()
        except EOFError:
            return None
        finally:
            if self.child.is_alive():
                self.child.kill()
            self.child.join()
            self.recv.close()


def _cores() -> int:
    """The cores this process may run on (an affinity mask counts, as `taskset` sets)."""

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call on this platform
        return os.cpu_count() or 1


def _order(ld: _Loaded, pick: Mapping[int, int]) -> list[int]:
    """The classes the extraction uses, each after its operand classes; found without
    recursion (graphs are deep). Raises EqsatError for a cycle or a class left unchosen."""
    children = ld.children
    order: list[int] = []
    done: set[int] = set()
    on_path: set[int] = set()
    stack: list[tuple[int, bool]] = [(ld.eg.find(r), False) for r in reversed(ld.roots)]
    while stack:
        c, expanded = stack.pop()
        if c in done:
            continue
        if expanded:
            on_path.discard(c)
            done.add(c)
            order.append(c)
            continue
        i = pick.get(c)
        if i is None:
            raise EqsatError(f"extraction chose nothing for e-class {c}")
        if c in on_path:
            raise EqsatError("extraction chose a cycle")
        on_path.add(c)
        stack.append((c, True))
        stack.extend((k, False) for k in children(i) if k not in done)
    return order


def _chosen(ld: _Loaded, pick: Mapping[int, int]) -> set[int]:
    """The e-node ids the extraction uses."""
    return {pick[c] for c in _order(ld, pick)}


def _build(ld: _Loaded, graph: Graph, pick: Mapping[int, int], folded: bool = False,
           order: list[int] | None = None) -> tuple[Graph, Origin]:
    """The graph of the chosen e-nodes. `folded`: as `fold_weights(evaluate=False)` would
    leave it, for pricing only (no origin): each weight-only value an op computes becomes
    a weight without data, and what computes it is never built. The e-graph typed every
    term when it was made, so nodes are added without checking them again. `order`:
    `_order(ld, pick)`, where the caller has it already."""
    eg = ld.eg
    order = _order(ld, pick) if order is None else order
    roots = {eg.find(r) for r in ld.roots}
    as_weight: set[int] = set()
    if folded:
        weight_only: dict[int, bool] = {}
        for c in order:
            n = eg.nodes[pick[c]]
            if n.op == VAR:
                weight_only[c] = graph.nodes[ld.leaf_of[pick[c]]].op != "input"
            else:
                weight_only[c] = all(weight_only[k] for k in ld.children(pick[c]))
                if weight_only[c]:
                    as_weight.add(c)
    needed = set(roots)
    for c in reversed(order):
        if c in needed and c not in as_weight:
            needed.update(ld.children(pick[c]))
    if ld.names is None:
        ld.names = frozenset(n.attr("name") for n in graph.nodes if n.is_named_source)
    names = ld.names
    out_types = ld.out_types
    b = GraphBuilder(graph.name)
    value: dict[int, Value] = {}
    made: dict[int, set[int]] = {}  # builder node id -> input node ids
    equal_input: dict[int, set[int]] = {}
    if not folded:
        for i, nid in ld.orig_of.items():
            equal_input.setdefault(eg.find(i), set()).add(nid)
    for c in order:
        if c not in needed:
            continue
        i = pick[c]
        n = eg.nodes[i]
        start = len(b.nodes)
        if c in as_weight:
            tmpl = ld.folded.get(c)
            if tmpl is None:  # the weight node, checked once per class
                ty = eg.type_of(c)
                name, k = f"folded.c{c}", 1
                while name in names:
                    name, k = f"folded.c{c}~{k}", k + 1
                scratch = GraphBuilder("folded")
                tmpl = ld.folded[c] = scratch.nodes[
                    scratch.weight(name, ty.shape, ty.dtype, init="normal").node]
            v = b.recreate(tmpl, (), ())[0]
        elif n.op == VAR:
            src = graph.nodes[ld.leaf_of[i]]
            data = graph.weights.get(src.attr("name")) if src.op == "weight" else None
            v = b.recreate(src, (), (), data)[0]
        else:
            types = out_types.get(i)
            if types is None:
                types = out_types[i] = eg.output_types(i)
            v = b.add_typed(n.op, [value[k] for k in ld.children(i)], n.attrs,
                            types)[n.output]
        value[c] = v
        if not folded:
            from_input = {ld.orig_of[i]} if i in ld.orig_of else equal_input.get(c, set())
            for nid in {*range(start, len(b.nodes)), v.node}:
                made.setdefault(nid, set()).update(from_input)
    out, remap = b.build_with_map([value[eg.find(r)] for r in ld.roots], graph.name)
    origin = {remap[k]: tuple(sorted(v)) for k, v in made.items() if k in remap}
    return out, MappingProxyType(origin)


def _alike_key(eg: EGraph, i: int) -> str:
    """E-node `i`'s op, attributes, operand types and type: equal for the same
    computation at another place in the graph."""
    node = eg.canonical(i)
    return repr((node.op, node.attrs, node.output, eg.type_of(i),
                 tuple(eg.type_of(k) for k in node.children)))


def _moves(ld: _Loaded, sp: _Space, made: Mapping[str, list[frozenset[int]]],
           pick: Mapping[int, int]) -> list[tuple[float, str, dict[int, int]]]:
    """Local changes to an extraction, each a few classes re-chosen: per rule application
    (the e-nodes it created) not in the graph but touching it, adopt it; per one in the
    graph, undo it (its classes back to the input's e-node); per rule, all of either at
    once (the backtracking search's batch moves) and in parts. Each with its change under
    the extraction's per-op cost; whole-rule moves first, each kind most promising
    first."""
    chosen = _chosen(ld, pick)
    used = {sp.cls_of[i] for i in chosen}
    from_input: dict[int, int] = {}
    for i in ld.orig_of:
        r = sp.rep.get(i)
        if r is not None:
            from_input.setdefault(sp.cls_of[r], r)
    out: list[tuple[int, float, str, dict[int, int]]] = []

    def add(kind: int, label: str, change: dict[int, int]) -> None:
        change = {c: i for c, i in change.items() if pick.get(c) != i}
        if change:
            out.append((kind, sum(sp.cost[i] - sp.cost.get(pick.get(c, -1), 0.0)
                                  for c, i in change.items()), label, change))

    # The applications in the graph, by the classes they chose: adopting another
    # application over one of those classes undoes them too (BERT: merging Q and K
    # where Q, K and V are merged would keep the three-way merge for V alone).
    in_graph: dict[int, list[dict[int, int]]] = {}
    backs: dict[tuple[str, int], dict[int, int]] = {}
    for rule, groups in made.items():
        for k, g in enumerate(groups):
            hit = {sp.rep[e] for e in g if e in sp.rep} & chosen
            if hit:
                back = {sp.cls_of[e]: from_input[sp.cls_of[e]] for e in hit
                        if sp.cls_of[e] in from_input}
                backs[rule, k] = back
                for e in hit:
                    in_graph.setdefault(sp.cls_of[e], []).append(back)
    for rule, groups in sorted(made.items()):
        adopt: list[dict[int, int]] = []
        undo: list[dict[int, int]] = []
        for k, g in enumerate(groups):
            back = backs.get((rule, k))
            if back is not None:
                add(2, f"without {rule}#{k}", back)
                undo.append(back)
                continue
            reps = {sp.rep[e] for e in g if e in sp.rep}
            change = {sp.cls_of[e]: e for e in reps}
            if change.keys() & used:
                replaced = {c: i for cls in change for b in in_graph.get(cls, ())
                            for c, i in b.items()}
                change = {**replaced, **change}
                add(2, f"with {rule}#{k}", change)
                adopt.append(change)
        # Batches take applications that re-choose disjoint classes, in the order they
        # were made (the first round's before merges of merged ones), as the
        # backtracking search batches non-overlapping sites.
        disjoint: list[dict[int, int]] = []
        claimed: set[int] = set()
        for ch in adopt:
            if not claimed & ch.keys():
                disjoint.append(ch)
                claimed |= ch.keys()
        for verb, changes in (("with", disjoint), ("without", undo)):
            add(0, f"{verb} all {rule}", {c: i for ch in changes for c, i in ch.items()})
            # Sites alike (the same ops with the same attributes on the same types)
            # gain alike under the whole-graph cost too, so each such group is one
            # move, beside the halves (BERT-base: the bias fusions that pay are every
            # sixth in the graph's order, one shape of linear layer, so no half,
            # quarter or eighth holds only them).
            alike: dict[tuple[str, ...], list[dict[int, int]]] = {}
            for ch in changes:
                alike.setdefault(tuple(sorted(_alike_key(ld.eg, i) for i in ch.values())),
                                 []).append(ch)
            if 1 < len(alike) < len(changes):
                for q, group in enumerate(alike.values()):
                    if len(group) > 1:
                        add(1, f"{verb} {rule} part alike {q + 1}/{len(alike)}",
                            {c: i for ch in group for c, i in ch.items()})
            # Halves, quarters and eighths of them (in the graph's order), so that where
            # only some of a rule's sites pay (MobileNet-V2: folding the batch norms of
            # some convolutions) a few tries find which, before the sites one by one.
            for parts in (2, 4, 8):
                if len(changes) >= 2 * parts:
                    size = -(-len(changes) // parts)
                    for q in range(parts):
                        add(1 if parts == 2 else 2, f"{verb} {rule} part {q + 1}/{parts}",
                            {c: i for ch in changes[q * size:(q + 1) * size]
                             for c, i in ch.items()})
    # Whole-rule moves first (few, and each as much as many single ones), then parts,
    # then single sites. Within a kind, round-robin over the rules: the per-op cost is
    # what misjudges, so ordering by it alone would spend the time limit on one rule's
    # sites. Within a rule, undoing goes most promising first by the per-op cost, and
    # adopting in the order the applications were made: the first round's, on the
    # input's own terms (the backtracking search's sites), before merges of merged
    # ones (BERT-small: the merge of Q and K that pays is 3rd of merge_matmul's 1,000
    # in that order, past the 100th by the per-op cost).
    def order(m: tuple[int, float, str, dict[int, int]]) -> tuple[int, float, str]:
        kind, est, label, _ = m
        if kind == 2 and label.startswith("with ") and "#" in label:
            return kind, float(label.split("#")[1]), label
        return kind, est, label

    out.sort(key=order)
    rank: Counter[tuple[int, str]] = Counter()
    ranked = []
    for kind, est, label, change in out:
        family = (kind, label.split("#")[0].split(" part ")[0])
        ranked.append(((kind, rank[family], est, label), (est, label, change)))
        rank[family] += 1
    ranked.sort(key=lambda r: r[0])
    return [m for _, m in ranked]


# A climb's result (`_refine`): cost, extraction, moves kept, moves tried, when each
# kept move was kept with the cost it reached, and why it ended: "limit"
# (`refine_limit`), "stalled" (`refine_patience`), "diminishing returns"
# (`refine_share`) or "local optimum" (no move paid); the search reports "died" for a
# forked climb that sent nothing back in time.
_Climbed = tuple[float, dict[int, int], list[str], int, list[tuple[float, float]], str]


@dataclass(frozen=True)
class _Stop:
    """When a climb stops (`_refine`): at `deadline`, or once the best cost improved by
    at most `share` of all the search has gained (from `origin`, the input's cost) over
    the last `patience` of the time since `began` (the search's start): diminishing
    returns, the last stretch's gain rate fallen below `share` / `patience` of the
    whole search's average. With `share` 0, once the window holds no gain. A gain is a
    cost below `best` and below every gain before it: the best graph the search held
    when the climb began, so that a climb from the input, still behind the extraction,
    does not count its way up as progress. Before the climb began, the search's cost
    was `origin` (the extraction's gain is counted as made at the climb's start). Not
    before the climb has run `least` seconds."""

    deadline: float
    began: float
    patience: float = 1.0
    best: float = math.inf
    origin: float = math.inf
    share: float = 0.0
    least: float = 0.0  # seconds of the climb before it may stall

    def why(self, gains: Sequence[tuple[float, float]]) -> str:
        """Why the climb stops now (`_Climbed`), or "" if it goes on. `gains`: (when,
        cost) of the climb's start (at `best`) and each gain since, in time order."""
        t = time.perf_counter()
        if t >= self.deadline:
            return "limit"
        if t - gains[0][0] < self.least:
            return ""
        window = t - self.patience * (t - self.began)
        if window < gains[0][0]:
            return ""  # the window holds the extraction's gain, all of the search's
        at = bisect.bisect_right(gains, window, key=lambda g: g[0]) - 1
        now = gains[-1][1]
        gained = gains[at][1] - now
        if gained <= 0:
            return "stalled"
        if self.share > 0 and math.isfinite(self.origin) \
                and gained <= self.share * (self.origin - now):
            return "diminishing returns"
        return ""


def _refine(ld: _Loaded, sp: _Space, made: Mapping[str, list[frozenset[int]]],
            pick: dict[int, int], cost: float,
            price: Any, stop: _Stop) -> _Climbed:
    """Hill-climb an extraction (complete: a choice in every class) by `_moves`, each
    priced with the whole-graph cost and kept when faster, until a pass keeps nothing
    or `stop` says so. Then, as the backtracking search's `alpha` lets it, each
    whole-rule move that costs at most `PIVOT` times more is taken anyway and climbed
    from; kept if that ends faster. Returns the cost, the extraction, the moves kept,
    the moves tried, and when each move was kept (`time.perf_counter()`) with the cost
    it reached. A move that closes a cycle is skipped (`_build` refuses it)."""
    tried = 0
    trace: list[tuple[float, float]] = []
    # The climb's own view of the search's best over time (`_Stop.why`): its start, at
    # the best the search held, then each gain below that.
    gains = [(time.perf_counter(), min(stop.best, cost))]
    ended = ""
    # The best the climb has reached and how, what Ctrl-C hands back (a pivot's climb
    # may be under way from a worse graph).
    reached: list[Any] = [cost, pick, []]

    def halted() -> bool:
        nonlocal ended
        ended = stop.why(gains)
        return bool(ended)

    def attempt(trial: dict[int, int]) -> float:
        nonlocal tried
        tried += 1
        try:
            return float(price(trial))
        except EqsatError:
            return math.inf

    def climb(pick: dict[int, int], cost: float, kept: list[str],
              steps: list[tuple[float, float]]) -> tuple[float, dict[int, int], list[str]]:
        while not halted():
            better = False
            for _, label, change in _moves(ld, sp, made, pick):
                if halted():
                    break
                trial = {**pick, **change}
                t = attempt(trial)
                if t < cost * (1 - (MIN_GAIN_SITE if "#" in label else MIN_GAIN)):
                    cost, pick, better = t, trial, True
                    kept = [*kept, label]
                    steps.append((time.perf_counter(), cost))
                    if cost < gains[-1][1]:
                        gains.append(steps[-1])
                    if cost < reached[0]:
                        reached[:] = [cost, pick, kept]
            if not better:
                break
        return cost, pick, kept

    try:
        cost, pick, kept = climb(pick, cost, [], trace)
        pivoted = True
        while pivoted and not halted():
            pivoted = False
            for _, label, change in _moves(ld, sp, made, pick):
                if not label.split()[1] == "all":
                    continue
                if halted():
                    break
                trial = {**pick, **change}
                t = attempt(trial)
                if t > cost * PIVOT:
                    continue
                steps: list[tuple[float, float]] = []
                got = climb(trial, t, [*kept, label], steps)
                if got[0] < cost * (1 - MIN_GAIN_SITE):
                    cost, pick, kept = got
                    trace += steps  # only a pivot kept counts: the others were abandoned
                    pivoted = True
                    break
    except KeyboardInterrupt:
        # Ctrl-C: the best graph reached so far is finished work (`eqsat_optimize`).
        cost, pick, kept = reached
        if not trace or cost < trace[-1][1]:
            trace.append((time.perf_counter(), cost))
        ended = "interrupted"
    return cost, pick, kept, tried, trace, ended or "local optimum"


# ---- the optimizer --------------------------------------------------------------------


@dataclass(frozen=True)
class _Start:
    """Where a climb of local moves starts (`eqsat_optimize`): an extraction, its cost,
    what the result calls it, the space its moves are read from, the cost its gains must
    beat to count as progress (`_Stop.best`), and the proxy and ILP status it came from."""

    pick: dict[int, int]
    cost: float
    label: str
    space: _Space
    bar: float
    ext: AdditiveCost
    status: str


def eqsat_optimize(graph: Graph, rules: Iterable[Rule] | Matcher,
                   cost: str | CostFunction = "flops",
                   options: EqsatOptions | None = None) -> EqsatResult:
    """Saturate `graph`'s e-graph with the rules, extract the cheapest graph (module
    docstring). The result is never costlier than the input under `cost`."""
    opts = options or EqsatOptions()
    t0 = time.perf_counter()
    matcher = rules if isinstance(rules, Matcher) else Matcher(rules)
    cost_fn = create_cost(cost) if isinstance(cost, str) else cost
    ext_costs = _extraction_costs(cost_fn)
    before = cost_fn.cost(graph)
    eg = EGraph(max_nodes=2**62)
    ld = _load(graph, eg)
    # The limit counts every e-node, the input's included; the input always fits.
    eg.max_nodes = max(opts.node_limit, len(eg))
    eg.deadline = t0 + opts.time_limit
    made: dict[str, list[frozenset[int]]] = {}
    iters, stopped, applied = _saturate(eg, _directions(matcher), opts, made,
                                        _partial_demand(graph, ld, matcher.rules))
    t1 = time.perf_counter()

    spaces: dict[str, _Space] = {}  # by proxy name
    # Probes often re-extract a graph already priced (favouring a rule whose e-nodes the
    # best graph already uses): the whole-graph cost is paid once per distinct graph.
    # A cost with `fold` prices weight-only computations as folded, so the graph priced
    # is built folded (`_build`): 3-4x less time per local move than building every
    # weight computation for the cost to fold again (same costs; the result is built
    # in full once).
    priced: dict[frozenset[int], float] = {}

    def price(pick: Mapping[int, int]) -> float:
        order = _order(ld, pick)
        key = frozenset(pick[c] for c in order)
        got = priced.get(key)
        if got is None:
            got = priced[key] = cost_fn.cost(
                _build(ld, graph, pick, folded=cost_fn.fold, order=order)[0])
        return got

    tie = 0.0 if isinstance(cost_fn, AdditiveCost) else TIE_S
    shapes: dict[bool, _Space] = {}  # the first space per `fold`, the others' `like`
    typed: dict[bool, dict[int, tuple[Any, ...]]] = {}  # per `fold`, `_space`'s types
    for ext in ext_costs:
        spaces[ext.name] = _space(ld, graph, ext, tie, like=shapes.get(ext.fold),
                                  typed=typed.setdefault(ext.fold, {}))
        shapes.setdefault(ext.fold, spaces[ext.name])
    workers = opts.workers or _cores()
    solved: list[tuple[dict[int, int] | None, str]] = [(None, "")] * len(ext_costs)
    if opts.extraction == "ilp":
        roots = [eg.find(r) for r in ld.roots]
        solved = _ilp_many([(spaces[ext.name], roots) for ext in ext_costs],
                           opts.ilp_time_limit, workers)

    def extract(k: int) -> tuple[float, AdditiveCost, dict[int, int], str]:
        ext = ext_costs[k]
        got, status = solved[k]
        pick = got if got is not None else _greedy(spaces[ext.name])
        if opts.extraction == "ilp" and got is None:
            status += "; greedy used"
        return price(pick), ext, pick, status

    extracted = sorted((extract(k) for k in range(len(ext_costs))), key=lambda b: b[0])
    best = extracted[0]
    # (seconds since the start, a cost reached then): the input's, the extraction's,
    # then each climb's kept moves (the forked climb's clock is this one's: monotonic).
    reached = [(0.0, before), (time.perf_counter() - t0, best[0])]
    refined = 0
    ends: list[str] = []  # per climb, why it ended
    stopped_by_user = False  # Ctrl-C during the climbs
    t_refine = time.perf_counter()
    if not isinstance(cost_fn, AdditiveCost):
        # No per-op proxy ranks graphs as the fusing compiler does (inception_v3: average
        # pooling as a constant-kernel convolution is cheaper alone, slower fused; only
        # some merges of sibling convolutions pay). So the best extraction is improved
        # by local moves priced with the whole-graph cost itself (`_refine`).
        t, ext, pick, status = best
        sp = spaces[ext.name]
        greedy = _greedy(sp)
        # Two starting points, half the time each: the best extraction, and the input
        # itself (as the backtracking search starts). From the extraction, a better graph
        # can be two moves away with the first a loss (inception_v3: folding a batch norm
        # ties with fusing it, and the fold taken blocks merging that convolution with
        # its sibling); from the input, whole-rule moves take the backtracking search's
        # batch steps.
        as_input = {**greedy, **{sp.cls_of[sp.rep[i]]: sp.rep[i] for i in ld.orig_of
                                 if i in sp.rep}}
        starts = [_Start(pick, t, "extraction", sp, t, ext, status),
                  _Start(as_input, before, "input", sp, t, ext, status)]
        # A third start, the runner-up: the cheapest extraction of another proxy whose
        # graph differs from the best one's, when it is priced within RUNNER_UP of it. The
        # proxies disagree where the graph has two basins (Swin-T: the attention scale
        # folded into the query weights, or Q, K and V merged), and the cheaper start need
        # not be in the better one (Swin-T: 946.9 us climbs to 945.9, the runner-up's
        # 951.8 to 927.2). It climbs after the extraction's climb, on the same process, and
        # its own gains count as progress: it starts behind the best graph.
        chosen_best = _chosen(ld, pick)
        for t_k, ext_k, pick_k, status_k in extracted[1:]:
            if _chosen(ld, pick_k) == chosen_best:
                continue
            if t_k <= t * (1 + RUNNER_UP):
                sp_k = spaces[ext_k.name]
                starts.append(_Start({**_greedy(sp_k), **pick_k}, t_k,
                                     f"runner-up ({ext_k.name})", sp_k, t_k, ext_k, status_k))
            break

        def climb(k: int, deadline: float) -> _Climbed:
            st = starts[k]
            return _refine(ld, st.space, made, {**greedy, **st.pick}, st.cost, price,
                           _Stop(deadline, t0, opts.refine_patience, best=st.bar,
                                 origin=before, share=opts.refine_share,
                                 least=opts.refine_min))

        half = t_refine + opts.refine_limit / 2
        climbs: dict[int, _Climbed | None] = {}

        def user_stopped() -> bool:
            # Ctrl-C: a climb handed back its best so far.
            return any(c is not None and c[5] == "interrupted" for c in climbs.values())

        def run(k: int, deadline: float) -> None:
            if not user_stopped():  # after Ctrl-C no further climb starts
                climbs[k] = climb(k, deadline)

        if workers > 1:
            # The climbs are independent: with a second core, the input's side by side
            # with the extractions', each side with half the limit, in half the wall time.
            other = _Forked(lambda: climb(1, half), opts.refine_limit / 2 + REFINE_GRACE_S)
            for k in range(len(starts)):
                if k != 1:
                    run(k, half)
            try:
                # The child leaves Ctrl-C to this process, which does not wait for it then.
                climbs[1] = other.result(wait=not user_stopped())
            except KeyboardInterrupt:  # while waiting: the child is killed on the way out
                climbs[1] = None
                stopped_by_user = True
        else:
            run(0, half)
            for k in range(1, len(starts)):
                run(k, t_refine + opts.refine_limit)
        stopped_by_user = stopped_by_user or user_stopped()
        for k, got_climb in sorted(climbs.items()):
            label = starts[k].label
            if got_climb is None:
                ends.append(f"{label}: {'interrupted' if stopped_by_user else 'died'}")
                continue  # the child died or ran past its limit: that climb found nothing
            got_t, got, notes, n, trace, why = got_climb
            ends.append(f"{label}: {why}")
            refined += n
            reached += [(at - t0, c) for at, c in trace]
            if got_t < best[0]:
                best = (got_t, starts[k].ext, got,
                        f"{starts[k].status}; from the {label}: {_kept_summary(notes)}")
    after, ext, pick, status = best
    new, origin = _build(ld, graph, pick)
    objective = ext.cost(new)
    # Rule applications whose new e-nodes the extracted graph contains.
    chosen = _chosen(ld, pick)
    used = Counter(rule for rule, groups in made.items() for g in groups if g & chosen)
    t2 = time.perf_counter()
    kept = not after <= before
    if kept:
        new, origin, after, used = graph, identity_origin(graph), before, Counter()
    return EqsatResult(
        graph=new, origin=origin, cost_before=before, cost_after=after,
        cost_name=cost_fn.name, extraction=opts.extraction, extraction_cost=ext.name,
        objective=objective, iterations=iters, enodes=len(eg), eclasses=len(eg.members),
        stopped=stopped, ilp_status=status, applied=MappingProxyType(dict(applied)),
        used=MappingProxyType(dict(used)),
        saturate_s=t1 - t0, extract_s=t2 - t1, seconds=time.perf_counter() - t0,
        kept_input=kept, refine_moves=refined, workers=workers,
        progress=_progress(reached), refine_ends=tuple(ends), interrupted=stopped_by_user)


def _kept_summary(notes: Sequence[str]) -> str:
    """The moves a climb kept, in the order first kept, alike ones counted: one site of a
    rule (`with R#k`) or one part of its sites (`with R part alike 8/43`, `part 2/4`) is
    a move of the same kind as the others of that rule, so "with R x14" or "with R part
    alike x14"; a kind kept once keeps its whole label."""
    groups: dict[str, list[str]] = {}
    for note in notes:
        groups.setdefault(re.sub(r" \d+/\d+$", "", note.split("#")[0]), []).append(note)
    return ", ".join(f"{key} x{len(got)}" if len(got) > 1 else got[0].split("#")[0]
                     for key, got in groups.items())


def _progress(reached: Iterable[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """(seconds, cost) reached, in time order, kept where the cost is the least yet."""
    out: list[tuple[float, float]] = []
    for at, cost in sorted(reached):
        if not out or cost < out[-1][1]:
            out.append((at, cost))
    return tuple(out)
