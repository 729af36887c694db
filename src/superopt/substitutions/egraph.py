"""An e-graph over typed tensor terms, with e-matching of rule patterns and explanations.

Every e-class holds terms of one concrete tensor type: rules are matched at the shapes of
one instance, so their conditions and computed attributes evaluate exactly as they do on
a graph. An e-node is an op applied to e-classes (with the op's canonical attributes, as
`GraphBuilder.add` stores them); a multi-output op is one e-node per output, told apart by
its output index. Leaves are the instance's tensor variables.

Each union is recorded with its reason (a rule application or congruence) between the
two ids it joined, so the unions form a forest; the explanation of two equal terms is the
forest path between them, a congruence step explained by its operands' paths (the proof
forest of egg, Willsey et al. 2021, without its shortest-proof search).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.opdef import VARIADIC, OpDef, get_op
from superopt.ir.types import TensorType
from superopt.rewrite.terms import evaluate, resolve
from superopt.substitutions.pattern import AConst, AExpr, AVar, Pattern, PatternError, PNode

VAR = "?"  # the op of a leaf e-node; its one attribute is the variable's name

AttrItems = tuple[tuple[str, Any], ...]


@dataclass(frozen=True, slots=True)
class ENode:
    op: str
    attrs: AttrItems
    children: tuple[int, ...]
    output: int = 0


@dataclass(frozen=True, slots=True)
class Step:
    """One rule application in a derivation: `forward` is source to target as written."""

    rule: str
    forward: bool

    def describe(self) -> str:
        return self.rule if self.forward else f"{self.rule} (right to left)"


CONGRUENCE = ("congruence", True)


class BudgetExceeded(Exception):
    """The e-graph grew past its node budget or the deadline passed."""


@dataclass(frozen=True, slots=True)
class MatchIndex:
    """A snapshot of an e-graph for a matching phase that changes nothing between its
    matches (equality saturation's): `by_class` is class -> op -> one node id per distinct
    e-node (ids name terms, so a class keeps every congruent copy of an e-node for the
    explanations; matched one by one, each copy would yield the same match again), and
    `users` is class -> op -> the classes of the e-nodes of that op reading it (where a
    pattern's operand is already bound, its candidates are those, not every class)."""

    by_class: Mapping[int, Mapping[str, list[int]]]
    users: Mapping[int, Mapping[str, list[int]]]


class EGraph:
    """Hash-consed e-nodes, union-find over their ids, and the proof forest."""

    def __init__(self, max_nodes: int = 10_000, deadline: float | None = None) -> None:
        self.max_nodes = max_nodes
        self.deadline = deadline
        self.nodes: list[ENode] = []  # node id -> the e-node as created (children then)
        self.parent: list[int] = []
        self.types: list[TensorType] = []  # by node id; equal within a class
        self.members: dict[int, list[int]] = {}  # canonical id -> node ids
        self.memo: dict[ENode, int] = {}
        # id -> (other id, reason, whether the reason reads from this id to the other)
        self.proof: dict[int, list[tuple[int, tuple[str, bool], bool]]] = {}
        self.unions = 0
        # class -> the e-nodes reading it (as operand), and the classes merged since the
        # last rebuild: only their readers' keys can have changed (egg's worklist).
        self.readers: dict[int, list[int]] = {}
        self._dirty: list[int] = []
        self._shape_cache: dict[tuple[Any, ...], tuple[AttrItems, tuple[TensorType, ...]]] = {}

    # ---- union-find -----------------------------------------------------------------

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:  # path compression
            self.parent[i], i = root, self.parent[i]
        return root

    def type_of(self, i: int) -> TensorType:
        return self.types[self.find(i)]

    def output_types(self, i: int) -> tuple[TensorType, ...]:
        """Every output type of e-node `i`'s op (its class holds output `output` of
        them); a variable's, its own."""
        n = self.nodes[i]
        if n.op == VAR:
            return (self.types[i],)
        kids = tuple(self.types[self.find(k)] for k in n.children)
        return self._typed(n.op, get_op(n.op), dict(n.attrs), kids)[1]

    def classes(self) -> list[int]:
        return list(self.members)

    def __len__(self) -> int:
        return len(self.nodes)

    def _new(self, node: ENode, ty: TensorType) -> int:
        if len(self.nodes) >= self.max_nodes:
            raise BudgetExceeded(f"more than {self.max_nodes} e-nodes")
        i = len(self.nodes)
        self.nodes.append(node)
        self.parent.append(i)
        self.types.append(ty)
        self.members[i] = [i]
        for k in dict.fromkeys(self.find(c) for c in node.children):
            self.readers.setdefault(k, []).append(i)
        if node.op == VAR:
            self.memo[node] = i
        return i

    # ---- adding terms -------------------------------------------------------------------

    def var(self, name: str, ty: TensorType) -> int:
        node = ENode(VAR, (("name", name),), ())
        found = self.memo.get(node)
        return found if found is not None else self._new(node, ty)

    def add(self, op: str, attrs: Mapping[str, Any], children: Sequence[int],
            output: int = 0) -> int:
        """The id of the term `op(children)` output `output`, added if new. Ids name
        terms, not classes: where a congruent e-node exists over other ids of the same
        classes, a new id joins its class by congruence, so that an explanation can say
        how the two terms are equal (egg's explanation mode does the same). Raises
        IRError when the op does not type-check on the children's types."""
        kids = tuple(children)
        opdef = get_op(op)
        if opdef.num_inputs == VARIADIC:
            if len(kids) < opdef.min_inputs:
                raise IRError(f"{op}: expected at least {opdef.min_inputs} inputs")
        elif len(kids) != opdef.num_inputs:
            raise IRError(f"{op}: expected {opdef.num_inputs} inputs, found {len(kids)}")
        canon_kids = tuple(self.find(k) for k in kids)
        in_types = tuple(self.types[k] for k in canon_kids)
        items, out_types = self._typed(op, opdef, attrs, in_types)
        if output >= len(out_types):
            raise IRError(f"{op}.{output}: the op has only {len(out_types)} outputs")
        key = ENode(op, items, canon_kids, output)
        found = self.memo.get(key)
        if found is None:
            i = self._new(ENode(op, items, kids, output), out_types[output])
            self.memo[key] = i
            return i
        if self.nodes[found].children == kids:
            return found
        i = self._new(ENode(op, items, kids, output), out_types[output])
        self.memo[key] = found
        self.union(found, i, CONGRUENCE)
        return i

    def _typed(self, op: str, opdef: OpDef, attrs: Mapping[str, Any],
               in_types: tuple[TensorType, ...]) -> tuple[AttrItems, tuple[TensorType, ...]]:
        try:
            key: tuple[Any, ...] = (op, tuple(sorted(attrs.items())), in_types)
            hit = self._shape_cache.get(key)
        except TypeError:  # an unhashable attribute value (a list): not cached
            key, hit = (), None
        if hit is not None:
            return hit
        checked = opdef.check_attrs(attrs)
        if opdef.canonicalize is not None:
            checked = opdef.canonicalize(in_types, checked)
        types = tuple(opdef.shape(in_types, checked))
        out = (tuple(sorted(checked.items())), types)
        if key:
            self._shape_cache[key] = out
        return out

    # ---- merging ----------------------------------------------------------------------

    def union(self, a: int, b: int, reason: tuple[str, bool]) -> bool:
        """Join the classes of ids `a` and `b`; False if they were one already. Raises
        IRError for classes of different types (an unsound rule or a bad match)."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        if self.types[ra] != self.types[rb]:
            raise IRError(f"cannot merge a {self.types[ra]} with a {self.types[rb]}")
        self.proof.setdefault(a, []).append((b, reason, True))
        self.proof.setdefault(b, []).append((a, reason, False))
        if len(self.members[ra]) < len(self.members[rb]):
            ra, rb = rb, ra
        self.parent[rb] = ra
        self.members[ra].extend(self.members.pop(rb))
        moved = self.readers.pop(rb, None)
        if moved:
            self.readers.setdefault(ra, []).extend(moved)
        self._dirty.append(ra)
        self.unions += 1
        return True

    def canonical(self, i: int) -> ENode:
        """E-node `i` over its operands' classes (congruent e-nodes are equal)."""
        n = self.nodes[i]
        if not n.children:
            return n
        return ENode(n.op, n.attrs, tuple(self.find(c) for c in n.children), n.output)

    def rebuild(self) -> int:
        """Restore congruence (equal operands make equal terms); returns the unions made.
        Only the e-nodes reading a class merged since the last rebuild are keyed again
        (egg's worklist; every other e-node's operands kept their classes): `memo` maps
        each e-node's key over its operands' classes to the first e-node seen with it,
        and an entry over a class since merged away is never asked for again."""
        made = 0
        while self._dirty:
            todo = dict.fromkeys(self.find(c) for c in self._dirty)
            self._dirty = []
            for c in todo:
                for i in list(self.readers.get(self.find(c), ())):
                    key = self.canonical(i)
                    other = self.memo.get(key)
                    if other is None:
                        self.memo[key] = i
                    elif self.union(other, i, CONGRUENCE):
                        made += 1
        return made

    def match_index(self) -> MatchIndex:
        """The e-nodes as `MatchIndex` lists them; valid until the next change."""
        by_class: dict[int, dict[str, list[int]]] = {}
        users: dict[int, dict[str, list[int]]] = {}
        for root, ids in self.members.items():
            seen: set[ENode] = set()
            per: dict[str, list[int]] = {}
            for i in ids:
                key = self.canonical(i)
                if key in seen:
                    continue
                seen.add(key)
                per.setdefault(key.op, []).append(i)
                for c in set(key.children):
                    got = users.setdefault(c, {}).setdefault(key.op, [])
                    if not got or got[-1] != root:
                        got.append(root)
            by_class[root] = per
        return MatchIndex(by_class, users)

    def by_op(self) -> dict[str, list[tuple[int, int]]]:
        """op -> (class, node id) for every e-node."""
        out: dict[str, list[tuple[int, int]]] = {}
        for root, ids in self.members.items():
            for i in ids:
                out.setdefault(self.nodes[i].op, []).append((root, i))
        return out

    # ---- explanations -----------------------------------------------------------------

    def explain(self, a: int, b: int) -> list[Step]:
        """The rule applications that make `a` equal `b` (they must be equal)."""
        if self.find(a) != self.find(b):
            raise ValueError(f"e-nodes {a} and {b} are not equal")
        steps: list[Step] = []
        self._explain(a, b, steps, set())
        return steps

    def _explain(self, a: int, b: int, steps: list[Step], busy: set[tuple[int, int]]) -> None:
        if a == b or (a, b) in busy:
            return
        busy.add((a, b))
        for x, y, reason, along in self._path(a, b):
            if reason is CONGRUENCE:
                nx, ny = self.nodes[x], self.nodes[y]
                for cx, cy in zip(nx.children, ny.children, strict=True):
                    self._explain(cx, cy, steps, busy)
            else:
                # Read against its recorded direction, a rule step is applied the other way.
                steps.append(Step(reason[0], reason[1] == along))
        busy.discard((a, b))

    def _path(self, a: int, b: int) -> list[tuple[int, int, tuple[str, bool], bool]]:
        prev: dict[int, tuple[int, tuple[str, bool], bool]] = {a: (a, CONGRUENCE, True)}
        todo = [a]
        while todo and b not in prev:
            nxt: list[int] = []
            for x in todo:
                for y, reason, along in self.proof.get(x, ()):
                    if y not in prev:
                        prev[y] = (x, reason, along)
                        nxt.append(y)
            todo = nxt
        if b not in prev:
            raise ValueError(f"no proof path from {a} to {b}")
        path: list[tuple[int, int, tuple[str, bool], bool]] = []
        while b != a:
            x, reason, along = prev[b]
            path.append((x, b, reason, along))
            b = x
        path.reverse()
        return path

    def check_deadline(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise BudgetExceeded("out of time")


# ---- patterns --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class CPattern:
    """A source pattern ready for e-matching: attribute constants validated and the
    op's defaults filled in for attributes the pattern leaves unnamed."""

    op: str
    opdef: OpDef
    output: int
    children: tuple[CPattern | str, ...]  # a str is a tensor variable
    fixed: tuple[tuple[str, Any], ...]
    avars: tuple[tuple[str, str], ...]  # (attribute, variable)
    aexprs: tuple[tuple[str, str], ...]  # (attribute, expression)

    def ops(self) -> set[str]:
        out = {self.op}
        for c in self.children:
            if isinstance(c, CPattern):
                out |= c.ops()
        return out


def compile_pattern(p: Pattern) -> CPattern | str:
    if not isinstance(p, PNode):
        return p.name
    op = get_op(p.op)
    named = dict(p.attrs)
    fixed: list[tuple[str, Any]] = []
    avars: list[tuple[str, str]] = []
    aexprs: list[tuple[str, str]] = []
    for spec in op.attrs:
        a = named.get(spec.name)
        if isinstance(a, AVar):
            avars.append((spec.name, a.name))
        elif isinstance(a, AExpr):
            aexprs.append((spec.name, a.text))
        elif isinstance(a, AConst):
            fixed.append((spec.name, spec.validate(op.name, a.value)))
        elif spec.required:
            raise PatternError(f"({p.op} ...) leaves the required attribute {spec.name!r} "
                               "unnamed")
        else:
            fixed.append((spec.name, spec.validate(op.name, spec.default)))
    return CPattern(p.op, op, p.output, tuple(compile_pattern(c) for c in p.children),
                    tuple(fixed), tuple(avars), tuple(aexprs))


@dataclass(frozen=True)
class Match:
    """Bindings of one match: tensor variables to classes, attribute variables to values,
    and the (pattern, e-node) pairs whose computed attributes are still to be checked."""

    tensors: Mapping[str, int]
    attrs: Mapping[str, Any]
    deferred: tuple[tuple[CPattern, int], ...] = ()


def _fixed_ok(eg: EGraph, cp: CPattern, node: ENode, have: dict[str, Any],
              wanted: dict[str, Any]) -> bool:
    """Do the pattern's constants equal the node's attributes once canonicalised for the
    node's input types (axis -1 on a rank-2 input is axis 1)?"""
    op = cp.opdef
    if op.canonicalize is None:
        return False
    try:
        checked = op.check_attrs({**have, **wanted})
        canon = op.canonicalize(tuple(eg.types[eg.find(c)] for c in node.children),
                                dict(checked))
    except (IRError, KeyError, TypeError, ValueError):
        return False
    return all(canon.get(k) == have.get(k) for k in wanted)


def ematch(eg: EGraph, cp: CPattern | str, cls: int, m: Match,
           index: MatchIndex | None = None) -> Iterator[Match]:
    """Every extension of `m` under which pattern `cp` matches a term of class `cls`;
    with `index` (current), only the distinct e-nodes of `cp`'s op."""
    if isinstance(cp, str):
        # Variables bind the operand's id (a term), so that the rule's instance can be
        # rebuilt term for term; equal bindings are compared by class.
        bound = m.tensors.get(cp)
        if bound is None:
            yield Match({**m.tensors, cp: cls}, m.attrs, m.deferred)
        elif eg.find(bound) == eg.find(cls):
            yield m
        return
    cls = eg.find(cls)
    ids = eg.members.get(cls, ()) if index is None else index.by_class.get(cls, {}).get(
        cp.op, ())
    for i in ids:
        node = eg.nodes[i]
        if node.op != cp.op or node.output != cp.output or len(node.children) != len(
                cp.children):
            continue
        have = dict(node.attrs)
        attrs = m.attrs
        ok = True
        for name, var in cp.avars:
            val = have.get(name)
            prev = attrs.get(var, _MISSING)
            if prev is _MISSING:
                attrs = {**attrs, var: val}
            elif prev != val:
                ok = False
                break
        if not ok:
            continue
        wrong = {k: v for k, v in cp.fixed if have.get(k) != v}
        if wrong and not _fixed_ok(eg, cp, node, have, wrong):
            continue
        deferred = (*m.deferred, (cp, i)) if cp.aexprs else m.deferred
        yield from _children(eg, cp.children, node.children, 0,
                             Match(m.tensors, attrs, deferred), index)


def _children(eg: EGraph, pats: tuple[CPattern | str, ...], kids: tuple[int, ...], k: int,
              m: Match, index: MatchIndex | None = None) -> Iterator[Match]:
    if k == len(pats):
        yield m
        return
    for m2 in ematch(eg, pats[k], kids[k], m, index):
        yield from _children(eg, pats, kids, k + 1, m2, index)


_MISSING = object()


def deferred_ok(eg: EGraph, m: Match, env: Mapping[str, Any]) -> bool:
    """Computed attributes in a source equal the matched node's, canonicalised."""
    for cp, i in m.deferred:
        node = eg.nodes[i]
        have = dict(node.attrs)
        try:
            wanted = {name: evaluate(text, env) for name, text in cp.aexprs}
            wanted = {k: cp.opdef.attr_spec(k).validate(cp.op, v) for k, v in wanted.items()}
        except (IRError, KeyError, TypeError, ValueError):
            return False
        wrong = {k: v for k, v in wanted.items() if have.get(k) != v}
        if wrong and not _fixed_ok(eg, cp, node, have, wrong):
            return False
    return True


def build(eg: EGraph, p: Pattern, tensors: Mapping[str, int], attrs: Mapping[str, Any],
          env: Mapping[str, Any]) -> int:
    """Add a pattern under the bindings; the id of its term. Raises IRError (PatternError,
    ShapeError) where it does not type-check."""
    if not isinstance(p, PNode):
        try:
            return tensors[p.name]
        except KeyError:
            raise PatternError(f"tensor variable ?{p.name} is not bound") from None
    kids = [build(eg, c, tensors, attrs, env) for c in p.children]
    return eg.add(p.op, resolve(p, env, attrs), kids, p.output)
