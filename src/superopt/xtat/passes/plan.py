"""The rewrite-plan pass: the result of TASO's cost-model search as one choice.

The rewrite pass offers every rewrite point of its input graph, one round: it cannot reach
rewrites that only exist after another rewrite (merging two convolutions once their batch
norms are folded into them), nor take a step that pays off two steps later. TASO's
backtracking search (`superopt.rewrite.optimize`) does both, with a cost model and without
measuring. This pass runs that search once per input graph (cached by the graph's
structural hash, in the pass object) and offers its result as a single site, "plan", with
the options "no plan" (the default) and the plan (keyed by the digest of its steps). The
rewrite pass after it then refines the planned graph point by point, and layout, fusion,
tiles and flags are tuned on whatever the two produce (XTAT-M repairs their choices when
the plan is switched).

A plan is one path of rewrites: a few may pay under the default compiler and lose once
kernels are tuned, while the rest still pay (csrnet b1: PET's pad-conv-slice mutants of
three 512-channel convs, 25% faster at the default tile and 25% slower than the original
convs at their tuned tiles, beside mutants that pay either way). So the site also offers
the plan without each group of its rules (`<plan>-<group>`: the path replayed with that
group's steps left out, a step whose sites the shorter path no longer has skipped): a
group is one PET transformation family (its mutants of several subprograms: their
correction kernels cost alike) or one other rule; and without each pair of the
`PAIRED` most applied groups (csrnet b1 loses on both its pad-conv-slice and its
stack-height mutants). The revisit tries them with their kernels tuned, nearest the
current choice first (`alternatives`: from the whole plan, one group left out, then no
plan, then two); the plan phase measures one option (`top_k` 2): the one TASO's cost
prices lowest, the whole plan unless a variant or a source plan beat it.

A replay keeps the path's other steps; it never takes a step the path did not take. Where
two rule sources compete for the same nodes, the step that lost is reachable by no
variant: on bert_small b1 the plan merges each layer's query and key projections with the
starter's pairwise merge_linear (bias included), which leaves PET's three-way
merge_shared_matmul of query, key and value nothing to match, and PET then XTAT (PET's
mutants chosen first, the compiler tuned after) ends 3% ahead of joint. So the site also
offers each rule source's own plan (`<plan>~<source>`: TASO's search again, the same cost
and budget, with the rules of that source only: PET's corrected mutants, or the rule
library: the starter, a generated or a TASO/Tensat library), for each source whose rules
the matcher has and the plan does not use alone; the sequential pipelines' first step as
one more option.

Some rules pay only through what a runtime fuses across ops, which the plan's per-op cost
cannot see (`superopt.rewrite.measured_whole`: the `runtime` library; onnxruntime's fused
residual add and layer norm runs 3-6x slower than the two ops, and a reshape between them
keeps it from fusing, which a per-op cost prices as a small loss). One site at a time,
their gain is within a measurement's noise (0.2-1% per BERT layer norm). So the site also
offers the plan with each such rule applied at every site it matches (`<plan>+<rule>`;
`input+<rule>` where the search found no plan), and with all of them in the library's
order (`<plan>+<r1>+<r2>`, where two or more apply: one can open sites for the next, a max
pool moved above a concat letting the conv after it read the concat), right after the
plan TASO's cost prices lowest, for the measurement to judge.

The plan may instead be searched by equality saturation (`search="eqsat"`, `tune
--plan-search eqsat`: one extracted graph, no path, so no variants by rule group), or both
ways (`"both"`: backtracking's plan and its variants, eqsat's plan one more option). An
eqsat search stops its local moves on the clock, so the plan cache keeps its graph itself
rather than a path, and a resumed, replayed or worker-rebuilt candidate gets that graph.

The planned graph is handed on unfolded (the value check needs it runnable); the
rewrite pass folds the weight-only computations the plan created (the stage memo's
`fold_skip` names what the source graph already computed, which stays as it was).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from superopt.ir.graph import Graph
from superopt.ir.passes import Origin, compose, identity_origin
from superopt.rewrite.apply import apply_sites
from superopt.rewrite.fold import foldable_hashes
from superopt.rewrite.match import Matcher
from superopt.substitutions.text import format_rule
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.plancache import PlanCache
from superopt.xtat.space import PassConfig, Site, digest
from superopt.xtat.stage import Stage

PLAN_SITE = "plan"
# How a plan is searched (`RewritePlan(search=)`): TASO's backtracking, equality
# saturation, or both (the backtracking plan, with the eqsat plan as one more option).
PLAN_SEARCHES = ("backtracking", "eqsat", "both")
OTHER_SEARCH = "eqsat"  # with "both", the search whose plan is the extra option
# The plan without one group of its rules, for at most this many groups (the most applied
# first): each is a replay of the path, and a revisit flip costs measurements.
MAX_VARIANTS = 8
PAIRED = 4  # variants without two groups: each pair of this many most applied groups
PET_SOURCE, LIBRARY_SOURCE = "pet", "library"  # the rule sources a source plan searches
# How the site's options are made: results kept per tuner schedule (benchmarks) key on it.
SITE_OPTIONS = (("variants", MAX_VARIANTS), ("paired", PAIRED),
                ("source plans", (PET_SOURCE, LIBRARY_SOURCE)), ("first", "cheapest"))


@dataclass(frozen=True)
class Plan:
    """TASO's search result on one graph, as this pass uses it."""

    option: str  # "taso:<digest of the steps>"
    graph: Graph
    origin: Origin
    rules: tuple[str, ...]  # one entry per rewrite applied, in order
    cost_before: float
    cost_after: float
    evaluations: int  # graphs the search priced with its cost model (not measurements)
    seconds: float
    steps: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the path: (rule, site keys)
    dropped: tuple[str, ...] = ()  # a variant: the plan without these groups' steps
    only: str = ""  # a source plan: TASO's search with this rule source's rules only, or
    # OTHER_SEARCH: with search "both", the eqsat plan over every rule
    added: tuple[str, ...] = ()  # a variant: the plan with these rules at every site


class RewritePlan(TunablePass):
    """Options: `budget` (graphs TASO's search expands), `alpha` (its backtracking
    relaxation) and `cost` (a factory of the `superopt.rewrite` cost function it uses;
    the session passes the simulator's default-compiled time, as the TASO-only baseline
    uses it)."""

    name = "plan"

    def __init__(self, rules: Matcher, cost: Callable[[], object] | None, budget: int = 20,
                 alpha: float = 1.05, cost_key: str = "", search: str = "backtracking") -> None:
        if search not in PLAN_SEARCHES:
            raise ValueError(f"unknown plan search {search!r}; expected one of "
                             f"{', '.join(PLAN_SEARCHES)}")
        # "eqsat": the plan is equality saturation's extracted graph (`superopt.rewrite.
        # eqsat`): one graph, no path, so it has no variants by rule group; the source
        # plans are eqsat searches too. "both": the plan, its variants and source plans
        # are backtracking's, and the eqsat plan is one more option (`_other_search`).
        self.search = search
        self.matcher = rules
        self.cost_factory = cost
        self.budget = budget
        self.alpha = alpha
        # What the cost factory computes, for the plan cache's keys ("": not cacheable).
        self.cost_key = cost_key
        # Search results kept on disk (`superopt.xtat.plancache`), when a run names one.
        self.cache: PlanCache | None = None
        self._rules_digest: dict[tuple[str, ...], str] = {}  # rule names -> their text's
        self._cost: object | None = None
        self._plans: dict[str, Plan | None] = {}  # graph structural hash -> plan
        # graph structural hash -> the plan's variants, by option
        self._variants: dict[str, dict[str, Plan]] = {}

    def plan(self, graph: Graph) -> Plan | None:
        """The plan for `graph` (None: no search configured, or it found nothing)."""
        key = graph.structural_hash
        if key in self._plans:
            return self._plans[key]
        got = None
        if self._searching():
            got = self._search(graph, self.matcher)
        self._plans[key] = got
        return got

    def _searching(self) -> bool:
        return self.cost_factory is not None and self.budget > 0

    def _search(self, graph: Graph, matcher: Matcher, search: str | None = None
                ) -> Plan | None:
        """TASO's search (or `search`, by default the pass's own; "both" searches by
        backtracking here) with `matcher`'s rules; None unless it lowers the cost. With a
        plan cache, a search made before (same inputs, same code) is replayed instead."""
        from superopt.interrupts import finished
        from superopt.rewrite import optimize

        search = search or ("backtracking" if self.search == "both" else self.search)
        key = self._cache_key(graph, matcher, search)
        if key is not None:
            assert self.cache is not None
            got = self.cache.get(key)
            if got is not None:
                p = self._from_eqsat_record(graph, got) if search == "eqsat" \
                    else self._from_record(graph, matcher, got)
                if p is not False:
                    self.cache.hits += 1
                    return p
            self.cache.misses += 1
        if self._cost is None:
            assert self.cost_factory is not None
            self._cost = self.cost_factory()
        if search == "eqsat":
            return self._eqsat(graph, matcher, key)
        # Ctrl-C hands back the search's best so far: not a finished search to keep (and
        # replay on --resume) as the plan.
        res = finished(optimize(graph, matcher, self._cost, alpha=self.alpha,
                                budget=self.budget))
        out = None
        if res.steps and res.cost_after < res.cost_before:
            steps = [[s.rule, list(s.sites)] for s in res.steps]
            out = Plan(f"taso:{digest(str(steps), 12)}", res.graph, res.origin,
                       tuple(s.rule for s in res.steps for _ in s.sites),
                       res.cost_before, res.cost_after, res.evaluated, res.seconds,
                       tuple((s.rule, tuple(s.sites)) for s in res.steps))
        if key is not None:
            assert self.cache is not None
            # Searches that found nothing are kept too: a resumed run skips them as well.
            self.cache.put(key, {"steps": [[r, list(k)] for r, k in out.steps] if out else None,
                                 "cost_before": res.cost_before, "cost_after": res.cost_after,
                                 "evaluations": res.evaluated, "seconds": res.seconds})
        return out

    def _eqsat(self, graph: Graph, matcher: Matcher, key: str | None) -> Plan | None:
        """Equality saturation's graph as the plan; None unless it lowers the cost. Kept
        in the plan cache as the graph itself (it has no path to replay): its local
        moves stop on the clock, so searching again need not find the same graph, and a
        resumed or replayed run must rebuild the one its measurements were made on."""
        from superopt.interrupts import finished
        from superopt.ir.serialize import to_json
        from superopt.rewrite.cost import CostFunction
        from superopt.rewrite.eqsat import eqsat_optimize

        assert isinstance(self._cost, CostFunction)
        res = finished(eqsat_optimize(graph, matcher, self._cost))
        out = None
        if not res.kept_input and res.cost_after < res.cost_before:
            # One entry per rule application whose e-nodes the extracted graph contains.
            rules = tuple(r for r, n in sorted(res.used.items()) for _ in range(n))
            out = Plan(f"eqsat:{digest(res.graph.structural_hash, 12)}", res.graph,
                       res.origin, rules, res.cost_before, res.cost_after, 1, res.seconds)
        if key is not None:
            assert self.cache is not None
            # Searches that found nothing are kept too ("graph": null).
            self.cache.put(key, {
                "graph": to_json(out.graph) if out else None,
                "origin": [[k, list(v)] for k, v in sorted(out.origin.items())] if out else [],
                "rules": list(out.rules) if out else [],
                "cost_before": res.cost_before, "cost_after": res.cost_after,
                "seconds": res.seconds})
        return out

    def _from_eqsat_record(self, graph: Graph, rec: dict) -> Plan | bool | None:
        """The eqsat plan a stored result holds (None: it found nothing); False when the
        stored graph does not rebuild node for node as it was (a miss: searched again)."""
        from superopt.ir.errors import IRError
        from superopt.ir.serialize import from_json, to_json

        if "graph" not in rec:
            return False
        doc = rec["graph"]
        if doc is None:
            return None
        try:
            names = {nd["attrs"]["name"] for nd in doc["nodes"] if nd["op"] == "weight"}
            g = from_json(doc, {k: v for k, v in graph.weights.items() if k in names})
            origin = {int(k): tuple(int(i) for i in v) for k, v in rec["origin"]}
            rules = tuple(str(r) for r in rec["rules"])
            cost_before, cost_after = float(rec["cost_before"]), float(rec["cost_after"])
            seconds = float(rec["seconds"])
        except (IRError, KeyError, TypeError, ValueError):
            return False
        # The builder re-checks every node; a graph it builds otherwise (other ids, another
        # shape inference) would not match the origin or the measurements made on it.
        if to_json(g) != doc or not set(origin) <= {n.id for n in g.nodes}:
            return False
        return Plan(f"eqsat:{digest(g.structural_hash, 12)}", g, origin, rules,
                    cost_before, cost_after, 1, seconds)

    def _cache_key(self, graph: Graph, matcher: Matcher, search: str) -> str | None:
        """The plan cache's key of this search (None: no cache, or a cost it cannot name).
        An eqsat search does not read the budget or the relaxation; its own options are
        the defaults, which the code digest covers."""
        if self.cache is None or not self.cost_key:
            return None
        names = tuple(r.name for r in matcher.rules)
        text = self._rules_digest.get(names)
        if text is None:
            # Rules in the matcher's order (the search's proposals follow it), names included
            # (site keys and the path name them).
            text = self._rules_digest[names] = digest(
                "\n".join(format_rule(r) for r in matcher.rules), 16)
        if search == "eqsat":
            return self.cache.key("plan-eqsat", graph.structural_hash, text,
                                  matcher.exclusive, self.cost_key)
        return self.cache.key("plan", graph.structural_hash, text, matcher.exclusive,
                              self.budget, self.alpha, self.cost_key)

    def _from_record(self, graph: Graph, matcher: Matcher, rec: dict) -> Plan | bool | None:
        """The plan a stored search result stands for (None: it found nothing), rebuilt by
        replaying its path; False when the path does not replay step for step (a miss)."""
        steps = rec.get("steps")
        if steps is None:
            return None
        try:
            path = tuple((str(r), tuple(str(k) for k in keys)) for r, keys in steps)
            cost_before, cost_after = float(rec["cost_before"]), float(rec["cost_after"])
            evaluations, seconds = int(rec["evaluations"]), float(rec["seconds"])
        except (KeyError, TypeError, ValueError):
            return False
        walked = self._walk(graph, path, matcher, exact=True)
        if walked is None:
            return False
        g, origin, rules = walked
        return Plan(f"taso:{digest(str([[r, list(k)] for r, k in path]), 12)}", g, origin,
                    rules, cost_before, cost_after, evaluations, seconds, path)

    def _walk(self, graph: Graph, path: tuple[tuple[str, tuple[str, ...]], ...],
              matcher: Matcher, drop: tuple[str, ...] = (), exact: bool = False
              ) -> tuple[Graph, Origin, tuple[str, ...]] | None:
        """`path` applied to `graph` by site keys, leaving out the steps of the groups
        `drop`: (graph, origin, one rule per applied site). A step none of whose sites is
        found is skipped, unless `exact` (every site of every step must apply, else None)."""
        g, origin = graph, identity_origin(graph)
        rules: list[str] = []
        for rule, keys in path:
            if drop and self.group(rule) in drop:
                continue
            wanted = set(keys)
            sites = [s for s in matcher.match(g, [rule]).sites if s.key in wanted]
            res = apply_sites(g, sites, matcher, check=False) if sites else None
            if exact and (res is None or len(res.applied) != len(keys)):
                return None
            if res is None or not res.applied:
                continue
            g, origin = res.graph, compose(origin, res.origin)
            rules += [rule] * len(res.applied)
        return g, origin, tuple(rules)

    def variants(self, graph: Graph) -> dict[str, Plan]:
        """The plan for `graph` without each group of its rules, and without each pair
        of its `PAIRED` most applied groups, its source plans, and the plan (or the input,
        without one) with each rule measured whole at every site (module docstring), by
        option; a variant whose graph is the source's or another option's is left out."""
        key = graph.structural_hash
        got = self._variants.get(key)
        if got is not None:
            return got
        got = {}
        p = self.plan(graph)
        seen = {key} | ({p.graph.structural_hash} if p is not None else set())
        found: list[Plan] = []
        if p is not None:
            counts = Counter(self.group(r) for r in p.rules)
            order = list(dict.fromkeys(self.group(r) for r in p.rules))
            groups = sorted(counts, key=lambda g: (-counts[g], order.index(g)))
            if len(groups) > 1:
                drops = [(g,) for g in groups[:MAX_VARIANTS]] + list(
                    itertools.combinations(groups[:PAIRED], 2) if len(groups) > 2 else [])
                found += [v for v in (self._replay(graph, p, d) for d in drops) if v]
            found += self._source_plans(graph, p)
        found += self._other_search(graph)
        found += self._with_whole(graph, p)
        for v in found:
            if v.graph.structural_hash not in seen:
                seen.add(v.graph.structural_hash)
                got[v.option] = v
        self._variants[key] = got
        return got

    def _other_search(self, graph: Graph) -> list[Plan]:
        """With search "both": the eqsat plan over every rule, as one more option (none
        when it found nothing; left out by `variants` when it is the backtracking plan's
        graph). Its graph has no path: no variant is made from it."""
        if self.search != "both" or not self._searching():
            return []
        q = self._search(graph, self.matcher, OTHER_SEARCH)
        return [] if q is None else [replace(q, only=OTHER_SEARCH)]

    def _with_whole(self, graph: Graph, p: Plan | None) -> list[Plan]:
        """The plan (or, without one, the input) with each rule a measurement must judge
        whole (`superopt.rewrite.measured_whole`) applied at every site it matches there,
        one variant per rule and one with them all; none when no plan search is
        configured."""
        from superopt.rewrite import measured_whole

        if self.cost_factory is None or self.budget <= 0:
            return []
        base, origin = (p.graph, p.origin) if p is not None else (graph, identity_origin(graph))
        whole = [r.name for r in self.matcher.rules
                 if measured_whole(r) and (p is None or r.name not in p.rules)]
        found = [self._everywhere(base, origin, (rule,)) for rule in whole]
        # All of them together too, in the library's order, each at every site of the graph
        # the ones before it left, where two or more apply: one rule can open sites for the
        # next (a max pool moved above a concat lets the conv after it read the concat),
        # and gains that add up are measured at once, not site by site in the rewrite phase.
        if len(whole) > 1:
            g, got_origin, applied = self._everywhere(base, origin, tuple(whole))
            if len(set(applied)) > 1:
                found.append((g, got_origin, applied))
        out = []
        before: float | None = p.cost_before if p is not None else None
        for g, got_origin, applied in found:
            if not applied:
                continue
            if self._cost is None:
                assert self.cost_factory is not None  # checked above
                self._cost = self.cost_factory()
            cost = self._cost.cost  # type: ignore[attr-defined]
            if before is None:
                before = cost(graph)  # priced once, for every variant of the input
            used = tuple(dict.fromkeys(applied))
            out.append(Plan(f"{p.option if p is not None else 'input'}+{'+'.join(used)}", g,
                            got_origin, (*(p.rules if p is not None else ()), *applied),
                            before, cost(g), 0, 0.0, (), (), "", used))
        return out

    def _everywhere(self, graph: Graph, origin: Origin, rules: tuple[str, ...]
                    ) -> tuple[Graph, Origin, list[str]]:
        """`graph` with each of `rules` in turn applied at every site it matches in the
        graph the ones before it left: the graph, its origin, and one entry per rewrite
        applied."""
        applied: list[str] = []
        for rule in rules:
            sites = self.matcher.match(graph, [rule]).sites
            res = apply_sites(graph, sites, self.matcher, check=False) if sites else None
            if res is None or not res.applied:
                continue
            graph, origin = res.graph, compose(origin, res.origin)
            applied += [rule] * len(res.applied)
        return graph, origin, applied

    def source(self, rule: str) -> str:
        """The rule source a rule comes from: PET's mutants (a family) or the library."""
        return PET_SOURCE if self.group(rule).startswith("pet:") else LIBRARY_SOURCE

    def _source_plans(self, graph: Graph, p: Plan) -> list[Plan]:
        """TASO's search with each source's rules alone, for each source the matcher has
        rules of and `p` does not use alone (module docstring)."""
        used = {self.source(r) for r in p.rules}
        out = []
        for src in (PET_SOURCE, LIBRARY_SOURCE):
            rules = [r for r in self.matcher.rules if self.source(r.name) == src]
            if not rules or len(rules) == len(self.matcher.rules) or used == {src}:
                continue
            q = self._search(graph, Matcher(rules, exclusive=self.matcher.exclusive,
                                              both_ways=False))
            if q is not None:
                out.append(Plan(f"{p.option}~{src}", q.graph, q.origin, q.rules,
                                q.cost_before, q.cost_after, q.evaluations, q.seconds,
                                q.steps, (), src))
        return out

    def group(self, rule: str) -> str:
        """The group a variant leaves out together: a PET rule's family, else the rule."""
        fam = self.matcher.rule(rule).provenance.get("family")
        return f"pet:{fam}" if isinstance(fam, str) else rule

    def _replay(self, graph: Graph, p: Plan, drop: tuple[str, ...]) -> Plan | None:
        """`p`'s path on `graph` without the steps of the groups `drop`. Site keys are
        structural, so a later step finds its sites in the shorter path's graph unless
        they were made by a dropped step (then it is skipped too)."""
        walked = self._walk(graph, p.steps, self.matcher, drop)
        assert walked is not None  # only an exact walk gives up
        g, origin, rules = walked
        if not rules:
            return None
        if self._cost is None and self.cost_factory is not None:
            self._cost = self.cost_factory()  # a plan read from the cache made none
        cost = self._cost.cost(g) if self._cost is not None else math.nan
        return Plan(f"{p.option}-{'+'.join(drop)}", g, origin, rules, p.cost_before,
                    cost, 0, 0.0, (), drop)

    def chosen(self, graph: Graph, option: str) -> Plan | None:
        """The plan or variant behind `option` on `graph` (None: not one of its options)."""
        p = self.plan(graph)
        if p is not None and option == p.option:
            return p
        return self.variants(graph).get(option)

    def alternatives(self, stage: Stage, site: Site, now: object) -> list[object]:
        """From the whole plan or a variant: with search "both", the other search's whole
        plan first (the one rival over every rule: inception_v3 b16's joint tuning never
        reached eqsat's plan, 1.8% faster tuned, behind 14 variants); then the variants
        one group away, then no plan and the source plans (another search, no nearer to
        any variant), then the rest by how many groups they differ in (the site's order
        within)."""
        p = self.plan(stage.graph)
        if p is None:
            return super().alternatives(stage, site, now)
        variants = self.variants(stage.graph)

        def other(o: object) -> bool:
            v = variants.get(o)  # type: ignore[call-overload]
            return v is not None and v.only == OTHER_SEARCH

        def dropped(o: object) -> frozenset[str] | None:
            if o is None:
                return None
            v = variants.get(o)  # type: ignore[call-overload]
            if v is not None and v.only:
                return None
            return frozenset(v.dropped) if v is not None else frozenset()

        cur = dropped(now)

        def distance(o: object) -> float:
            if (other(o) and now == p.option) or (other(now) and o == p.option):
                return 0.5  # one whole plan from the other
            d = dropped(o)
            if d is None or cur is None:
                return 1.5  # no plan or a source plan, or any option from those
            return float(len(d ^ cur))
        return sorted((o for o in site.options if o != now),
                      key=lambda o: (distance(o), site.options.index(o)))

    @staticmethod
    def _label(p: Plan) -> str:
        counts = ", ".join(f"{r} x{n}" for r, n in Counter(p.rules).items())
        without = f" without {', '.join(p.dropped)}" if p.dropped else ""
        only = {PET_SOURCE: " over PET's mutants only",
                LIBRARY_SOURCE: " over the rule library only"}.get(p.only, "")
        added = f" with {', '.join(p.added)} at every site" if p.added else ""
        what = "the input" if p.option.startswith("input+") else \
            "eqsat plan" if p.option.startswith("eqsat:") else "TASO plan"
        return f"{what}{without}{only}{added}: {len(p.rules)} rewrites ({counts})"

    def list_sites(self, stage: Stage) -> list[Site]:
        p = self.plan(stage.graph)
        variants = self.variants(stage.graph)
        if p is None and not variants:
            return []
        # First after "no plan": the option TASO's cost prices lowest (the plan phase
        # measures only that one). The whole plan, unless a narrower search beat it: the
        # search over every source screens each graph's proposals to the best few per cost
        # proxy, and with PET's mutants there a block rewrite that only pays once fused
        # (fold_vgg_block: more flops, more ops) can be screened out. Next the variants
        # with a rule measured whole: their cost prices them too high by design.
        plans = [q for q in (p, *variants.values()) if q is not None]
        first = min(plans, key=lambda q: q.cost_after)
        whole = [q.option for q in plans if q.added and q is not first]
        rest = [q.option for q in plans if q is not first and not q.added]
        # Weight: visited before any single rewrite point by the greedy strategies.
        return [Site(PLAN_SITE, (None, first.option, *whole, *rest), None, (),
                     self._label(p if p is not None else first),
                     weight=float(len(stage.graph.nodes)))]

    def describe(self, stage: Stage, site: Site, choice: object) -> str:
        """A variant is named by the groups it leaves out and counts only its rewrites
        (the site's label describes the whole plan)."""
        p = self.chosen(stage.graph, choice) if isinstance(choice, str) else None
        return self._label(p) if p is not None else site.label

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        if config.choices.get(PLAN_SITE) is None:
            return PassResult(stage, None, {"applied": [], "plan": None})
        p = self.chosen(stage.graph, config.choices[PLAN_SITE])
        assert p is not None  # check_config found the option
        to_source = p.origin if stage.to_source is None else compose(stage.to_source,
                                                                     p.origin)
        out = stage.evolve(graph=p.graph, to_source=to_source)
        out.memo["fold_skip"] = foldable_hashes(stage.graph)
        return PassResult(out, p.origin, {
            "applied": list(p.rules), "plan": p.option, "plan_cost_before": p.cost_before,
            "plan_cost_after": p.cost_after, "plan_evaluations": p.evaluations,
            "plan_without": list(p.dropped), "plan_only": p.only})


__all__ = ["PLAN_SEARCHES", "PLAN_SITE", "SITE_OPTIONS", "Plan", "RewritePlan"]
