"""Applying sites: rebuild the graph with each site's source replaced by its rule's target.

`apply_sites(graph, sites, rules)` applies a set of non-overlapping sites in one rebuild
(through `superopt.ir.passes.transform`) and returns `(new_graph, origin)` plus what was
applied and what was skipped and why. Dead nodes disappear and equal subexpressions merge
(the builder hash-conses), so a target that recreates an existing node reuses it.

Origins: unchanged nodes come from themselves; every node a site's target creates comes
from all the nodes the site matched (a fused conv comes from the conv and the relu).

A multi-output site is built when the rebuild reaches its first output. When a variable
it binds comes later in node order than that output (two matmuls sharing an input whose
second weight is declared after the first matmul), the graph is first renumbered in a
topological order that puts every bound variable before the site's outputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.passes import Lookup, Origin, PassResult, compose, copy_node, transform
from superopt.rewrite.match import Matcher, Site
from superopt.rewrite.terms import build_target
from superopt.substitutions.pattern import Bindings
from superopt.substitutions.rule import Rule

RuleLookup = Matcher | Mapping[str, Rule]


class RewriteError(IRError):
    """Sites that cannot be applied to a graph (stale, overlapping under strict, unknown rule)."""


@dataclass(frozen=True)
class RewriteResult(PassResult):
    """A rewritten graph and its origin map; unpacks as `(graph, origin)`."""

    applied: tuple[Site, ...] = ()
    skipped: tuple[tuple[Site, str], ...] = ()

    def __iter__(self) -> Iterator[Any]:
        yield self.graph
        yield self.origin


def _rule_of(rules: RuleLookup, name: str) -> Rule:
    if isinstance(rules, Matcher):
        return rules.rule(name)
    try:
        return rules[name]
    except KeyError:
        raise RewriteError(f"no rule named {name!r}") from None


def select_disjoint(sites: Sequence[Site]) -> tuple[list[Site], list[tuple[Site, str]]]:
    """Keep sites in order, skipping any that shares a matched node with one kept earlier."""
    kept: list[Site] = []
    skipped: list[tuple[Site, str]] = []
    owner: dict[int, Site] = {}
    for s in sites:
        clash = next((owner[n] for n in s.nodes if n in owner), None)
        if clash is not None:
            skipped.append((s, f"overlaps {clash.key}"))
            continue
        kept.append(s)
        for n in s.nodes:
            owner[n] = s
    return kept, skipped


def _reorder(graph: Graph, sites: Sequence[Site]) -> tuple[Graph, dict[int, int]] | None:
    """A renumbering that puts each site's bound variables before its outputs, or None if
    the graph's own order already does. Once any site needs it, every site's variables are
    constrained, not only the late ones: moving one site's outputs later can move a
    variable of another site after that site's outputs."""
    extra: dict[int, set[int]] = {}
    needed = False
    for s in sites:
        first = min(v.node for v in s.roots)
        bound = {v.node for _, v in s.tensors}
        needed = needed or any(n > first for n in bound)
        for r in {v.node for v in s.roots}:
            extra.setdefault(r, set()).update(bound)
    if not needed:
        return None
    n = len(graph.nodes)
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for node in graph.nodes:
        preds = {v.node for v in node.inputs} | extra.get(node.id, set())
        indeg[node.id] = len(preds)
        for p in preds:
            succ[p].append(node.id)
    ready = [i for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != n:
        raise RewriteError("these sites together would form a cycle (an output of one feeds "
                           "a variable of another)")
    new_id = {old: new for new, old in enumerate(order)}
    nodes = tuple(Node(new_id[old], graph.nodes[old].op,
                       tuple(Value(new_id[v.node], v.index) for v in graph.nodes[old].inputs),
                       graph.nodes[old].attrs, graph.nodes[old].types) for old in order)
    outputs = tuple(Value(new_id[v.node], v.index) for v in graph.outputs)
    return Graph(nodes, outputs, graph.weights, graph.name), new_id


def _drop_cycles(graph: Graph, sites: Sequence[Site]) -> tuple[list[Site],
                                                                list[tuple[Site, str]]]:
    """Sites in order, skipping any that would close a cycle with the ones kept before it
    (two multi-output rewrites, each reading what the other replaces)."""
    kept: list[Site] = []
    skipped: list[tuple[Site, str]] = []
    for s in sites:
        try:
            _reorder(graph, [*kept, s])
        except RewriteError:
            skipped.append((s, "would form a cycle with the sites applied before it"))
            continue
        kept.append(s)
    return kept, skipped


def _renumber(site: Site, new_id: Mapping[int, int]) -> Site:
    def mv(v: Value) -> Value:
        return Value(new_id[v.node], v.index)

    return Site(site.rule, tuple(mv(v) for v in site.roots),
                tuple(sorted(new_id[n] for n in site.nodes)),
                tuple((k, mv(v)) for k, v in site.tensors), site.attrs, site.key)


def apply_sites(graph: Graph, sites: Sequence[Site], rules: RuleLookup, *,
                strict: bool = False, check: bool = True, name: str | None = None
                ) -> RewriteResult:
    """Apply `sites` together. Sites overlapping an earlier one are skipped (or, with
    `strict`, raise). With `check` (and a Matcher as `rules`), each site is re-matched
    first so a stale site from another graph is refused rather than misapplied."""
    kept, skipped = select_disjoint(sites)
    if strict and skipped:
        s, why = skipped[0]
        raise RewriteError(f"site {s.key} {why}")
    for s in kept:
        _rule_of(rules, s.rule)
        if check and isinstance(rules, Matcher) and not rules.check(graph, s):
            raise RewriteError(f"site {s.key} ({s.rule} at "
                               f"{', '.join(str(v) for v in s.roots)}) does not match graph "
                               f"{graph.name!r}")
    if not kept:
        return RewriteResult(graph, MappingProxyType({n.id: (n.id,) for n in graph.nodes}),
                             (), tuple(skipped))
    try:
        reordered = _reorder(graph, kept)
    except RewriteError:
        if strict:
            raise
        kept, cyclic = _drop_cycles(graph, kept)
        skipped.extend(cyclic)
        reordered = _reorder(graph, kept)
    work, work_sites, back = graph, list(kept), None
    if reordered is not None:
        work, new_id = reordered
        work_sites = [_renumber(s, new_id) for s in kept]
        back = MappingProxyType({new: (old,) for old, new in new_id.items()})
    triggers: dict[int, int] = {}
    for i, s in enumerate(work_sites):
        triggers[min(v.node for v in s.roots)] = i
    stash: dict[Value, Value] = {}

    def rule_fn(b: GraphBuilder, node: Node, inputs: tuple[Value, ...], lookup: Lookup
                ) -> tuple[Value, ...] | None:
        i = triggers.get(node.id)
        if i is not None:
            s = work_sites[i]
            rule = _rule_of(rules, s.rule)
            bind = Bindings({k: lookup(v) for k, v in s.tensors}, dict(s.attrs))
            for root, pat in zip(s.roots, rule.target, strict=True):
                stash[root] = build_target(pat, b, bind)
        if not any(Value(node.id, k) in stash for k in range(len(node.types))):
            return None
        base: tuple[Value, ...] | None = None
        out: list[Value] = []
        for k in range(len(node.types)):
            new = stash.pop(Value(node.id, k), None)
            if new is None:
                if base is None:
                    base = copy_node(b, node, inputs, work)
                new = base[k]
            out.append(new)
        return tuple(out)

    result = transform(work, rule_fn, name or graph.name)
    origin: dict[int, tuple[int, ...]] = dict(result.origin)
    # Target nodes come from every node their site matched, not just the first output.
    by_trigger = {t: work_sites[i] for t, i in triggers.items()}
    for k, srcs in origin.items():
        hit = [by_trigger[o] for o in srcs if o in by_trigger]
        if hit:
            origin[k] = tuple(sorted(set(srcs).union(*(s.nodes for s in hit))))
    final: Origin = MappingProxyType(origin)
    if back is not None:
        final = compose(back, final)
    return RewriteResult(result.graph, final, tuple(kept), tuple(skipped))


def apply_site(graph: Graph, site: Site, rules: RuleLookup, *, check: bool = True
               ) -> RewriteResult:
    """Apply one site; see `apply_sites`."""
    return apply_sites(graph, [site], rules, strict=True, check=check)
