"""Matching substitution rules on graphs: every site where a rule applies.

A *site* is one way a rule's source matches a graph: the values its outputs match
(`roots`), every op node the source covers (`nodes`), and the bindings of its tensor and
attribute variables. A site is listed only where applying it is well-formed:

- the rule's condition holds for the bound shapes and attributes;
- the target type-checks for those bindings and produces exactly the types of the values
  it replaces (so a rule that would not type-check yields no site);
- with `exclusive` (the default, TASO's rule) no node inside the source other than its
  outputs is used outside the match, so applying the site removes the whole source;
- for multi-output rules no output feeds a bound variable (the target would form a cycle),
  the outputs are distinct values, and each set of outputs is listed once.

Candidates come from an index from op name to nodes: the first output's pattern is tried at
every node with its root op, and each further output only at consumers of a variable it
shares with earlier outputs. For a fixed library matching is linear in graph size.
"""

from __future__ import annotations

import hashlib
import time
import weakref
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Value
from superopt.ir.opdef import OpDef, get_op
from superopt.ir.serialize import jsonable
from superopt.ir.types import TensorType
from superopt.rewrite.terms import evaluate, holds, resolve
from superopt.substitutions.pattern import (
    AConst,
    AExpr,
    AVar,
    Pattern,
    PatternError,
    PNode,
    PVar,
)
from superopt.substitutions.rule import Rule

# ---- sites ----------------------------------------------------------------------------


def _value_text(v: Value) -> str:
    return f"{v.node}:{v.index}"


def _parse_value(text: str) -> Value:
    node, _, index = str(text).partition(":")
    return Value(int(node), int(index or 0))


def _frozen(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_frozen(x) for x in v)
    return v


@dataclass(frozen=True)
class Site:
    """One match of a rule in one graph (node ids refer to that graph).

    `key` is stable across graphs: the rule name and a structural hash of the matched
    outputs, so the same subgraph in a rebuilt or partly rewritten graph keeps its key.
    """

    rule: str
    roots: tuple[Value, ...]
    nodes: tuple[int, ...]
    tensors: tuple[tuple[str, Value], ...]
    attrs: tuple[tuple[str, Any], ...]
    key: str

    @property
    def anchor(self) -> int:
        """The node of the first output: sites sharing an anchor are alternatives."""
        return self.roots[0].node

    def binding(self, name: str) -> Value:
        for k, v in self.tensors:
            if k == name:
                return v
        raise KeyError(f"site {self.key}: no tensor variable ?{name}")

    def describe(self) -> str:
        roots = ", ".join(str(v) for v in self.roots)
        binds = ", ".join(f"?{k}={v}" for k, v in self.tensors)
        extra = ", ".join(f"?{k}={v!r}" for k, v in self.attrs)
        return f"{self.rule} at {roots} ({binds}{'; ' + extra if extra else ''})"

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "key": self.key,
                "roots": [_value_text(v) for v in self.roots], "nodes": list(self.nodes),
                "tensors": {k: _value_text(v) for k, v in self.tensors},
                "attrs": {k: jsonable(v) for k, v in self.attrs}}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Site:
        try:
            return Site(rule=str(d["rule"]),
                        roots=tuple(_parse_value(v) for v in d["roots"]),
                        nodes=tuple(int(n) for n in d["nodes"]),
                        tensors=tuple((k, _parse_value(v)) for k, v in d["tensors"].items()),
                        attrs=tuple((k, _frozen(v)) for k, v in d["attrs"].items()),
                        key=str(d["key"]))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise IRError(f"bad site record: {type(e).__name__}: {e}") from None


def site_key(graph: Graph, rule: str, roots: Sequence[Value]) -> str:
    h = hashlib.blake2b(digest_size=8)
    hashes = graph.node_hashes
    for v in roots:
        h.update(hashes[v.node])
        h.update(v.index.to_bytes(2, "little"))
    return f"{rule}@{h.hexdigest()}"


# ---- compiled patterns ------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _CNode:
    op: str
    opdef: OpDef
    output: int
    children: tuple[_CNode | str, ...]  # a str is a tensor variable
    fixed: tuple[tuple[int, str, Any], ...]  # (position in node.attrs, name, required value)
    avars: tuple[tuple[int, str, str], ...]  # (position, attribute, variable)
    aexprs: tuple[tuple[int, str, str], ...]  # (position, attribute, expression)


def _compile(p: Pattern, rule: str) -> _CNode | str:
    if isinstance(p, PVar):
        return p.name
    op = get_op(p.op)
    order = sorted(spec.name for spec in op.attrs)  # node.attrs are sorted by name
    named = dict(p.attrs)
    fixed: list[tuple[int, str, Any]] = []
    avars: list[tuple[int, str, str]] = []
    aexprs: list[tuple[int, str, str]] = []
    for spec in op.attrs:
        pos = order.index(spec.name)
        a = named.get(spec.name)
        if isinstance(a, AVar):
            avars.append((pos, spec.name, a.name))
        elif isinstance(a, AExpr):
            aexprs.append((pos, spec.name, a.text))
        elif isinstance(a, AConst):
            fixed.append((pos, spec.name, spec.validate(op.name, a.value)))
        elif spec.required:
            raise PatternError(f"rule {rule}: source pattern ({p.op} ...) leaves the required "
                               f"attribute {spec.name!r} unnamed")
        else:
            fixed.append((pos, spec.name, spec.validate(op.name, spec.default)))
    children = tuple(_compile(c, rule) for c in p.children)
    return _CNode(p.op, op, p.output, children, tuple(fixed), tuple(avars), tuple(aexprs))


def _var_paths(cn: _CNode | str, path: tuple[tuple[_CNode, int], ...] = ()
               ) -> Iterator[tuple[str, tuple[tuple[_CNode, int], ...]]]:
    if isinstance(cn, str):
        yield cn, path
        return
    for i, c in enumerate(cn.children):
        yield from _var_paths(c, (*path, (cn, i)))


@dataclass(frozen=True, eq=False)
class _Link:
    """How to find candidates for output k: walk up from a variable bound earlier."""

    var: str
    path: tuple[tuple[_CNode, int], ...]  # root ... parent of the variable, with child slots


@dataclass(frozen=True, eq=False)
class CompiledRule:
    rule: Rule
    sources: tuple[_CNode, ...]
    links: tuple[_Link | None, ...]  # per output; None for output 0 (and unlinked outputs)

    @property
    def name(self) -> str:
        return self.rule.name

    @property
    def root_op(self) -> str:
        return self.sources[0].op


def compile_rule(rule: Rule) -> CompiledRule:
    """Raises PatternError for a rule whose source cannot be matched (a bare variable)."""
    sources: list[_CNode] = []
    for p in rule.source:
        c = _compile(p, rule.name)
        if isinstance(c, str):
            raise PatternError(f"rule {rule.name}: a source output is the bare variable ?{c}, "
                               "which matches anything; such a rule can only be applied "
                               "in the other direction")
        sources.append(c)
    links: list[_Link | None] = [None]
    seen: set[str] = {v for v, _ in _var_paths(sources[0])}
    for c in sources[1:]:
        best: _Link | None = None
        for var, path in _var_paths(c):
            if var in seen and (best is None or len(path) < len(best.path)):
                best = _Link(var, path)
        links.append(best)
        seen |= {v for v, _ in _var_paths(c)}
    return CompiledRule(rule, tuple(sources), tuple(links))


# ---- per-graph facts shared by all rules ------------------------------------------------


@dataclass(frozen=True, eq=False)
class GraphFacts:
    """What matching needs of a graph beyond its nodes: the op index and output nodes."""

    by_op: Mapping[str, tuple[int, ...]]
    output_nodes: frozenset[int]
    consumers: tuple[tuple[int, ...], ...]
    inputs: tuple[tuple[int, ...], ...]  # per node, the nodes it reads

    @cached_property
    def reach(self) -> tuple[int, ...]:
        """Per node, its ancestors and itself as a bit set (bit i: node i). A two-output
        rule with unrelated outputs (PET's mutants of two parallel convolutions) is tried
        on every pair of nodes with the op; walking the graph for each pair's cycle check
        took 80% of matching PET's 920 rules on NasNet-A (288 s per whole-graph match).
        Built on first use: the sets grow with the graph (quadratic bits), and graphs
        matched by single-output rules only never need them."""
        reach: list[int] = []
        for i, preds in enumerate(self.inputs):  # node ids are topological
            bits = 1 << i
            for p in preds:
                bits |= reach[p]
            reach.append(bits)
        return tuple(reach)


# A binding of a rule's source: its outputs, the state, why it cannot be a site (or None).
Binding = tuple[tuple[Value, ...], "_State", str | None]

_FACTS: weakref.WeakKeyDictionary[Graph, GraphFacts] = weakref.WeakKeyDictionary()


def graph_facts(graph: Graph) -> GraphFacts:
    facts = _FACTS.get(graph)
    if facts is None:
        by_op: dict[str, list[int]] = {}
        for n in graph.nodes:
            by_op.setdefault(n.op, []).append(n.id)
        facts = GraphFacts(MappingProxyType({k: tuple(v) for k, v in by_op.items()}),
                           frozenset(v.node for v in graph.outputs), graph.consumers,
                           tuple(tuple(v.node for v in n.inputs) for n in graph.nodes))
        _FACTS[graph] = facts
    return facts


# ---- matching one pattern at one value --------------------------------------------------


class _State:
    __slots__ = ("attrs", "deferred", "nodes", "tensors")

    def __init__(self, tensors: dict[str, Value] | None = None,
                 attrs: dict[str, Any] | None = None, nodes: list[int] | None = None,
                 deferred: list[tuple[_CNode, int]] | None = None) -> None:
        self.tensors = tensors if tensors is not None else {}
        self.attrs = attrs if attrs is not None else {}
        self.nodes = nodes if nodes is not None else []
        self.deferred = deferred if deferred is not None else []

    def copy(self) -> _State:
        return _State(dict(self.tensors), dict(self.attrs), list(self.nodes), list(self.deferred))


def _attr_at(items: tuple[tuple[str, Any], ...], pos: int, name: str) -> Any:
    if pos < len(items) and items[pos][0] == name:
        return items[pos][1]
    for k, v in items:  # a node built outside the builder may order attributes otherwise
        if k == name:
            return v
    raise KeyError(name)


def _canonical_equal(cn: _CNode, graph: Graph, node_id: int, wanted: Mapping[str, Any]) -> bool:
    """Do the `wanted` attribute values, canonicalised for the node's input types (e.g.
    reshape's -1, negative axes), equal the node's?"""
    node = graph.nodes[node_id]
    op = cn.opdef
    if op.canonicalize is None:
        return False
    have = dict(node.attrs)
    try:
        checked = op.check_attrs({**have, **wanted})
        canon = op.canonicalize(tuple(graph.type_of(v) for v in node.inputs), dict(checked))
    except (IRError, KeyError, TypeError, ValueError):
        return False
    return all(canon.get(k) == have.get(k) for k in wanted)


def _match(cn: _CNode, v: Value, graph: Graph, st: _State) -> bool:
    node = graph.nodes[v.node]
    if node.op != cn.op or v.index != cn.output or len(node.inputs) != len(cn.children):
        return False
    items = node.attrs
    for pos, name, var in cn.avars:
        val = _attr_at(items, pos, name)
        prev = st.attrs.get(var, _MISSING)
        if prev is _MISSING:
            st.attrs[var] = val
        elif prev != val:
            return False
    mismatched = {name: want for pos, name, want in cn.fixed if _attr_at(items, pos, name) != want}
    if mismatched and not _canonical_equal(cn, graph, node.id, mismatched):
        return False
    for child, inp in zip(cn.children, node.inputs, strict=True):
        if isinstance(child, str):
            prev_v = st.tensors.get(child)
            if prev_v is None:
                st.tensors[child] = inp
            elif prev_v != inp:
                return False
        elif not _match(child, inp, graph, st):
            return False
    if cn.aexprs:
        st.deferred.append((cn, node.id))
    st.nodes.append(node.id)
    return True


_MISSING = object()


def _check_deferred(st: _State, graph: Graph) -> bool:
    """Computed attributes in a source must equal the node's, once everything is bound."""
    if not st.deferred:
        return True
    env: dict[str, Any] = {k: graph.type_of(v) for k, v in st.tensors.items()}
    env.update(st.attrs)
    for cn, nid in st.deferred:
        items = graph.nodes[nid].attrs
        wanted: dict[str, Any] = {}
        for pos, name, text in cn.aexprs:
            try:
                value = cn.opdef.attr_spec(name).validate(cn.op, evaluate(text, env))
            except IRError:
                return False
            if _attr_at(items, pos, name) != value:
                wanted[name] = value
        if wanted and not _canonical_equal(cn, graph, nid, wanted):
            return False
    return True


# ---- type-checking a target -------------------------------------------------------------


def infer_types(pats: Sequence[Pattern], types: Mapping[str, TensorType],
                attrs: Mapping[str, Any]) -> tuple[TensorType, ...]:
    """The types a pattern list denotes for the given variable types, computed the way
    `GraphBuilder.add` would (attribute checks, canonicalisation, shape rules); raises an
    IRError where building it would fail."""
    env: dict[str, Any] = dict(types)
    env.update(attrs)

    def go(p: Pattern) -> TensorType:
        if isinstance(p, PVar):
            try:
                return types[p.name]
            except KeyError:
                raise PatternError(f"tensor variable ?{p.name} is not bound") from None
        ins = tuple(go(c) for c in p.children)
        op = get_op(p.op)
        checked = op.check_attrs(resolve(p, env, attrs))
        if op.canonicalize is not None:
            checked = op.canonicalize(ins, checked)
        outs = tuple(op.shape(ins, checked))
        if p.output >= len(outs):
            raise PatternError(f"{p.op}.{p.output}: the op has only {len(outs)} outputs")
        return outs[p.output]

    return tuple(go(p) for p in pats)


# ---- the matcher ---------------------------------------------------------------------------

REJECTIONS = ("condition", "types", "shared", "cycle", "error")


@dataclass(frozen=True)
class Matches:
    """Sites found in one graph, with counts per rule and why candidates were rejected."""

    sites: tuple[Site, ...]
    per_rule: Mapping[str, int]
    rejected: Mapping[str, Mapping[str, int]]
    seconds: float
    nodes: int

    def by_rule(self) -> dict[str, list[Site]]:
        out: dict[str, list[Site]] = {r: [] for r in self.per_rule}
        for s in self.sites:
            out.setdefault(s.rule, []).append(s)
        return out

    def __len__(self) -> int:
        return len(self.sites)

    def __iter__(self) -> Iterator[Site]:
        return iter(self.sites)


def expand_rules(rules: Iterable[Rule], both_ways: bool = True) -> tuple[Rule, ...]:
    """The rules as matched: each `<=>` rule also right to left (named `name~rev`) unless that
    direction's source is a bare variable."""
    out: list[Rule] = []
    for r in rules:
        out.append(r)
        if both_ways and r.bidirectional and all(isinstance(p, PNode) for p in r.target):
            out.append(r.reversed())
    names = [r.name for r in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise PatternError(f"rule name {dup!r} is used twice")
    return tuple(out)


class Matcher:
    """Matches a fixed rule list on any number of graphs.

    `exclusive=False` also lists sites whose inner nodes are used elsewhere (applying them
    keeps those nodes, so work is duplicated). Rules whose source is a bare variable are
    not matchable and are listed in `unmatchable` with the reason.
    """

    def __init__(self, rules: Iterable[Rule], *, exclusive: bool = True,
                 both_ways: bool = True) -> None:
        self.exclusive = exclusive
        self.rules = expand_rules(rules, both_ways)
        self.by_name: dict[str, Rule] = {r.name: r for r in self.rules}
        compiled: list[CompiledRule] = []
        unmatchable: dict[str, str] = {}
        for r in self.rules:
            try:
                compiled.append(compile_rule(r))
            except IRError as e:
                unmatchable[r.name] = str(e)
        self.compiled = tuple(compiled)
        self._source_keys: dict[str, Hashable] = {c.name: _source_key(c) for c in compiled}
        self.unmatchable = MappingProxyType(unmatchable)
        self._verdicts: dict[tuple[Any, ...], str | None] = {}

    def rule(self, name: str) -> Rule:
        try:
            return self.by_name[name]
        except KeyError:
            raise IRError(f"no rule named {name!r} in this matcher") from None

    # -- whole graph -------------------------------------------------------------------

    def match(self, graph: Graph, rules: Iterable[str] | None = None) -> Matches:
        t0 = time.perf_counter()
        wanted = None if rules is None else set(rules)
        facts = graph_facts(graph)
        sites: list[Site] = []
        per_rule: dict[str, int] = {}
        rejected: dict[str, dict[str, int]] = {}
        # Rules with equal sources (PET's mutants of one subprogram: up to a dozen targets
        # each) are matched once.
        shared: dict[Hashable, list[Binding]] = {}
        for cr in self.compiled:
            if wanted is not None and cr.name not in wanted:
                continue
            reasons: Counter[str] = Counter()
            key = self._source_keys[cr.name]
            bindings = shared.get(key)
            if bindings is None:
                bindings = shared[key] = self._bindings(graph, facts, cr)
            found = list(self._sites(graph, cr, bindings, reasons))
            sites.extend(found)
            per_rule[cr.name] = len(found)
            if reasons:
                rejected[cr.name] = dict(reasons)
        return Matches(tuple(sites), MappingProxyType(per_rule),
                       MappingProxyType({k: MappingProxyType(v) for k, v in rejected.items()}),
                       time.perf_counter() - t0, len(graph))

    def site_at(self, graph: Graph, rule: str, roots: Sequence[Value]) -> Site | None:
        """The site of `rule` whose outputs are exactly `roots`, if it is one."""
        cr = next((c for c in self.compiled if c.name == rule), None)
        if cr is None or len(roots) != len(cr.sources):
            return None
        if any(not 0 <= v.node < len(graph) for v in roots):
            return None
        facts = graph_facts(graph)
        st = _State()
        for cn, v in zip(cr.sources, roots, strict=True):
            if not _match(cn, v, graph, st):
                return None
        return self._finish(graph, facts, cr, tuple(roots), st, Counter())

    def check(self, graph: Graph, site: Site) -> bool:
        """Does `site` describe a current match in `graph` (same nodes and bindings)?"""
        found = self.site_at(graph, site.rule, site.roots)
        return found is not None and found.nodes == site.nodes and \
            found.tensors == site.tensors and found.attrs == site.attrs

    # -- one rule ------------------------------------------------------------------------

    def _bindings(self, graph: Graph, facts: GraphFacts, cr: CompiledRule) -> list[Binding]:
        """Every binding of `cr`'s source in `graph`, with why it cannot be a site (None:
        it can, if the rule's conditions and types allow; "": rejected uncounted). Only
        the source decides these, so rules with equal sources share them."""
        out: list[Binding] = []
        first = cr.sources[0]
        for nid in facts.by_op.get(first.op, ()):
            root = Value(nid, first.output)
            if first.output >= len(graph.nodes[nid].types):
                continue
            st = _State()
            if not _match(first, root, graph, st):
                continue
            for roots, full in self._extend(graph, facts, cr, 1, (root,), st):
                out.append((roots, full, self._structure(graph, facts, roots, full)))
        return out

    def _sites(self, graph: Graph, cr: CompiledRule, bindings: list[Binding],
               reasons: Counter[str]) -> Iterator[Site]:
        seen_roots: set[frozenset[Value]] = set()
        for roots, full, why in bindings:
            if len(cr.sources) > 1:
                key = frozenset(roots)
                if key in seen_roots:
                    continue
            if why is not None:
                if why:
                    reasons[why] += 1
                continue
            site = self._site(graph, cr, roots, full, reasons)
            if site is not None:
                if len(cr.sources) > 1:
                    seen_roots.add(frozenset(roots))
                yield site

    def _extend(self, graph: Graph, facts: GraphFacts, cr: CompiledRule, k: int,
                roots: tuple[Value, ...], st: _State
                ) -> Iterator[tuple[tuple[Value, ...], _State]]:
        if k == len(cr.sources):
            yield roots, st
            return
        cn, link = cr.sources[k], cr.links[k]
        for cand in self._candidates(graph, facts, cn, link, st):
            if cand in roots:
                continue
            nxt = st.copy()
            if _match(cn, cand, graph, nxt):
                yield from self._extend(graph, facts, cr, k + 1, (*roots, cand), nxt)

    @staticmethod
    def _candidates(graph: Graph, facts: GraphFacts, cn: _CNode, link: _Link | None,
                    st: _State) -> list[Value]:
        if link is None or link.var not in st.tensors:
            # No shared variable: every node with the op (quadratic; generated rules
            # never have unrelated outputs, so this is for hand-written oddities).
            return [Value(n, cn.output) for n in facts.by_op.get(cn.op, ())
                    if cn.output < len(graph.nodes[n].types)]
        current = {st.tensors[link.var]}
        for pnode, slot in reversed(link.path):
            nxt: set[Value] = set()
            for val in current:
                for c in facts.consumers[val.node]:
                    n = graph.nodes[c]
                    if n.op == pnode.op and slot < len(n.inputs) and n.inputs[slot] == val \
                            and pnode.output < len(n.types):
                        nxt.add(Value(c, pnode.output))
            current = nxt
            if not current:
                break
        return sorted(current)

    def _finish(self, graph: Graph, facts: GraphFacts, cr: CompiledRule,
                roots: tuple[Value, ...], st: _State, reasons: Counter[str]) -> Site | None:
        why = self._structure(graph, facts, roots, st)
        if why is not None:
            if why:
                reasons[why] += 1
            return None
        return self._site(graph, cr, roots, st, reasons)

    def _structure(self, graph: Graph, facts: GraphFacts, roots: tuple[Value, ...],
                   st: _State) -> str | None:
        """Why this binding of a source cannot be rewritten whatever the rule's target
        (None: it can; "": not counted as a rejection)."""
        if not _check_deferred(st, graph):
            return ""
        if len(set(roots)) != len(roots):
            return ""
        if self.exclusive and not _exclusive(facts, tuple(sorted(set(st.nodes))), roots):
            return "shared"
        if len(roots) > 1 and _makes_cycle(facts, roots, st.tensors.values()):
            return "cycle"
        return None

    def _site(self, graph: Graph, cr: CompiledRule, roots: tuple[Value, ...], st: _State,
              reasons: Counter[str]) -> Site | None:
        rule = cr.rule
        types = {k: graph.type_of(v) for k, v in st.tensors.items()}
        verdict = self._verdict(rule, types, st.attrs, tuple(graph.type_of(v) for v in roots))
        if verdict is not None:
            reasons[verdict] += 1
            return None
        order = rule.source_vars()
        tensors = tuple((k, st.tensors[k]) for k in order if k in st.tensors)
        attrs = tuple(sorted(st.attrs.items()))
        nodes = tuple(sorted(set(st.nodes)))
        return Site(rule.name, roots, nodes, tensors, attrs, site_key(graph, rule.name, roots))

    def _verdict(self, rule: Rule, types: Mapping[str, TensorType], attrs: Mapping[str, Any],
                 root_types: tuple[TensorType, ...]) -> str | None:
        """None if the site is well-formed, else the rejection reason (memoised: many sites
        of one rule share their shapes)."""
        key = (rule.name, tuple(sorted(types.items(), key=_first)),
               tuple(sorted(attrs.items(), key=_first)), root_types)
        try:
            return self._verdicts[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute value; just compute it
            return _verdict(rule, types, attrs, root_types)
        verdict = _verdict(rule, types, attrs, root_types)
        self._verdicts[key] = verdict
        return verdict


def _source_key(cr: CompiledRule) -> Hashable:
    """Equal for rules whose sources match the same bindings: the source patterns
    themselves (or the rule's own name where an attribute value is unhashable)."""
    try:
        hash(cr.rule.source)
    except TypeError:
        return ("rule", cr.name)
    return cr.rule.source


def _first(item: tuple[str, Any]) -> str:
    return item[0]


def _verdict(rule: Rule, types: Mapping[str, TensorType], attrs: Mapping[str, Any],
             root_types: tuple[TensorType, ...]) -> str | None:
    try:
        if not holds(rule, {**types, **attrs}):
            return "condition"
    except IRError:
        return "error"
    try:
        got = infer_types(rule.target, types, attrs)
    except IRError:
        return "types"
    return None if got == root_types else "types"


def _exclusive(facts: GraphFacts, nodes: tuple[int, ...], roots: tuple[Value, ...]) -> bool:
    inside = set(nodes)
    root_nodes = {v.node for v in roots}
    for n in nodes:
        if n in root_nodes:
            continue
        if n in facts.output_nodes:
            return False
        if any(c not in inside for c in facts.consumers[n]):
            return False
    return True


def _makes_cycle(facts: GraphFacts, roots: tuple[Value, ...], bound: Iterable[Value]) -> bool:
    """Is some output an ancestor of a bound variable? (Then the target, which reads the
    variable, would feed itself.) Variables on the lowest output's node or below it are
    not followed: nothing below it can descend from an output."""
    low = min(v.node for v in roots)
    mask = 0
    for v in roots:
        mask |= 1 << v.node
    reach = facts.reach
    return any(reach[v.node] & mask for v in bound if v.node > low)


def match(graph: Graph, rules: Iterable[Rule], *, exclusive: bool = True) -> Matches:
    """Every site of every rule in `graph` (a one-off `Matcher`)."""
    return Matcher(rules, exclusive=exclusive).match(graph)
