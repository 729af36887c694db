"""Does a rule library derive a rule? Bounded equality saturation at concrete instances.

A rule is checked at instances of its variables (concrete shapes, and attribute values
where it has attribute variables): the shapes it was found at where its provenance
records them (TASO's and Tensat's input table, our generator's `types`), otherwise up to
three instances drawn by the verifier's sampler (covered only if derived at each). At
each, its two sides go into an e-graph (`superopt.substitutions.egraph`) and the library's rules are applied, in both
directions, until the sides meet (covered, with the chain of library rules that joins
them), nothing new can be added (not covered: no sequence of rewrites derives it at that
instance), or a budget runs out (nodes, time or iterations).

Rules are equalities under their condition, so applying one right to left is sound: when
its target matches, its condition holds and its source type-checks to the same type, the
two are equal by the rule itself. A direction is left out where it cannot be matched (a
bare-variable source, which matches anything, or variables its source does not bind);
`compile_library` reports each such direction.

Pruning (`prune`) keeps a rule only if the rules kept before it, smaller first, do not
derive it: TASO's redundancy pruning, decided by derivation rather than by the shape of a
common subgraph.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.types import DType, TensorType
from superopt.rewrite.terms import holds
from superopt.substitutions.egraph import (
    BudgetExceeded,
    CPattern,
    EGraph,
    Match,
    MatchIndex,
    Step,
    build,
    compile_pattern,
    deferred_ok,
    ematch,
)
from superopt.substitutions.pattern import (
    AExpr,
    AVar,
    PNode,
    attr_vars,
    expr_vars,
    tensor_vars,
    walk,
)
from superopt.substitutions.rule import Rule

VERDICTS = ("covered", "not covered", "budget", "error")


@dataclass(frozen=True)
class Budget:
    """Limits of one check. `max_matches` caps the matches of one rule direction per
    iteration, so that associativity and commutativity cannot crowd out every other rule
    (egg's backoff scheduler does the same job adaptively)."""

    max_nodes: int = 4000
    time_s: float = 2.0
    max_iters: int = 12
    max_matches: int = 400


@dataclass(frozen=True, eq=False)
class Direction:
    """One usable direction of a library rule, oriented source to target."""

    rule: Rule
    name: str
    forward: bool
    sources: tuple[CPattern, ...]
    ops: frozenset[str]


@dataclass(frozen=True)
class Skipped:
    rule: str
    direction: str
    reason: str


@dataclass(frozen=True)
class Coverage:
    """The verdict on one rule; `steps` is the derivation when covered (library rule
    applications from the rule's source to its target, output by output)."""

    rule: str
    verdict: str
    steps: tuple[Step, ...] = ()
    reason: str = ""
    time_s: float = 0.0
    nodes: int = 0
    iterations: int = 0
    instance: str = ""

    def derivation(self) -> str:
        return " ; ".join(s.describe() for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "verdict": self.verdict,
                "derivation": [{"rule": s.rule, "forward": s.forward} for s in self.steps],
                "reason": self.reason, "time_s": round(self.time_s, 4), "nodes": self.nodes,
                "iterations": self.iterations, "instance": self.instance}


@dataclass(frozen=True)
class Library:
    directions: tuple[Direction, ...]
    skipped: tuple[Skipped, ...] = field(default=())


# ---- the library's directions ---------------------------------------------------------


def _avars(pats: Sequence[Any]) -> set[str]:
    return {a.name for p in pats for q in walk(p) if isinstance(q, PNode)
            for _, a in q.attrs if isinstance(a, AVar)}


def _needed(pats: Sequence[Any], condition: str | None) -> set[str]:
    """Variables a target (and the condition) reads: tensor and attribute variables,
    also inside computed attributes."""
    out = {v for p in pats for v in (*tensor_vars(p), *attr_vars(p))}
    if condition:
        out |= set(expr_vars(condition))
    return out


def _direction(rule: Rule, forward: bool) -> Direction:
    src, tgt = (rule.source, rule.target) if forward else (rule.target, rule.source)
    for p in src:
        if not isinstance(p, PNode):
            raise IRError("its source is a bare variable, which matches anything")
    bound = {v for p in src for v in tensor_vars(p)} | _avars(src)
    # Computed attributes in the source are checked, not bound: they may read only what
    # the rest of the source binds.
    missing = (_needed(tgt, rule.condition) | _expr_vars_in(src)) - bound
    if missing:
        raise IRError(f"its source does not bind ?{sorted(missing)[0]}")
    cps = tuple(compile_pattern(p) for p in src)
    ops: set[str] = set()
    for cp in cps:
        assert isinstance(cp, CPattern)
        ops |= cp.ops()
    oriented = rule if forward else Rule(rule.name, src, tgt, rule.condition, kind=rule.kind)
    return Direction(oriented, rule.name, forward, cps, frozenset(ops))  # type: ignore[arg-type]


def _expr_vars_in(pats: Sequence[Any]) -> set[str]:
    return {v for p in pats for q in walk(p) if isinstance(q, PNode)
            for _, a in q.attrs if isinstance(a, AExpr) for v in expr_vars(a.text)}


# The generator enumerates commutative ops with their operands in one order only, so its
# rules hold modulo commutativity and it never emits commutativity as a rule of its own;
# TASO's verifier likewise has it as an axiom. `commutative=True` adds it.
COMMUTATIVITY = ("comm.ewadd: (ewadd ?x ?y) => (ewadd ?y ?x)",
                 "comm.ewmul: (ewmul ?x ?y) => (ewmul ?y ?x)")


def compile_library(rules: Sequence[Rule], commutative: bool = False) -> Library:
    """Every usable direction of every rule (with `commutative`, also ewadd's and ewmul's
    commutativity, named comm.*), and why the others cannot be used."""
    from superopt.substitutions.text import parse_rules

    out: list[Direction] = []
    skipped: list[Skipped] = []
    extra = parse_rules("\n".join(COMMUTATIVITY), "<commutativity>") if commutative else []
    for r in (*rules, *extra):
        for forward in (True, False):
            try:
                out.append(_direction(r, forward))
            except IRError as e:
                skipped.append(Skipped(r.name, "forward" if forward else "backward", str(e)))
    return Library(tuple(out), tuple(skipped))


# ---- the instance a rule is checked at ------------------------------------------------


@dataclass(frozen=True)
class Instance:
    rule: Rule  # the rule as checked (TASO's rules: at its input shapes)
    types: Mapping[str, TensorType]
    attrs: Mapping[str, Any]

    def describe(self) -> str:
        parts = [f"?{k}: {list(t.shape)}" for k, t in self.types.items()]
        parts += [f"?{k} = {v!r}" for k, v in self.attrs.items()]
        return ", ".join(parts)


def instances_of(rule: Rule, count: int = 3, seed: int = 0) -> list[Instance]:
    """Where the provenance records the shapes a rule was found at, that one instance (the
    rule is claimed there: TASO's and Tensat's rules, our generator's); otherwise up to
    `count` distinct instances from the verifier's sampler at which both sides type-check
    (one instance can make a false rule true: a grouped conv whose groups happen to line
    up). Raises IRError when there is none."""
    from superopt.substitutions.text import parse_rule

    prov = rule.provenance
    tensors = rule.source_vars()
    attr_only = [v for v in rule.attr_vars() if v not in tensors]
    at = prov.get("at_taso_shapes")
    shapes = prov.get("taso_types") if at else prov.get("types")
    if shapes and not attr_only and all(v in shapes for v in tensors):
        checked = parse_rule(f"{rule.name}: {at}", "<provenance>") if at else rule
        types = {v: TensorType(tuple(shapes[v]), DType.F32) for v in tensors}
        return [Instance(checked, types, {})]
    from superopt.verifier.sampler import Sampler, instances, pinned_spec

    found = [Instance(rule, dict(inst.types), dict(inst.attrs))
             for inst, built in instances(Sampler(rule, pinned_spec(rule), seed), count,
                                          8 * count, time.perf_counter() + 5.0)
             if built.target is not None and not built.outside]
    if not found:
        raise IRError("no instance of the rule found (its condition admits no shapes the "
                      "sampler can draw)")
    return found[:count]


# ---- saturation ---------------------------------------------------------------------


def _matches(eg: EGraph, d: Direction, by_op: Mapping[str, list[tuple[int, int]]],
             cap: int, index: MatchIndex | None = None
             ) -> list[tuple[Match, tuple[int, ...]]]:
    """Up to `cap` matches of a direction's sources, each with the classes they matched
    (`index`: as `ematch` takes it; a later source with an operand variable bound by an
    earlier one is then tried only on that operand's users)."""
    out: list[tuple[Match, tuple[int, ...]]] = []

    def extend(k: int, m: Match, roots: tuple[int, ...]
               ) -> Iterator[tuple[Match, tuple[int, ...]]]:
        if k == len(d.sources):
            yield m, roots
            return
        cp = d.sources[k]
        seen: set[int] = set()
        cands: Iterable[int] = (cls for cls, _ in by_op.get(cp.op, ()))
        anchored = [] if index is None else [
            _users_up(index, eg.find(bound), ops) for bound, ops in _anchors(cp, m.tensors)]
        if anchored:
            # An operand bound by an earlier source: the candidates are the classes above
            # it through the pattern's ops; the fewest such (a scale constant every
            # scaled term reads is a poor anchor beside the split's input).
            cands = min(anchored, key=len)
        elif index is not None:
            # Rooted at a common op (a scale) over a rare one (a split): the rare op's
            # classes' users are the candidates, not every class of the common op.
            rare = min((c.op for c in cp.children if isinstance(c, CPattern)),
                       key=lambda op: len(by_op.get(op, ())), default=None)
            if rare is not None and len(by_op.get(rare, ())) < len(by_op.get(cp.op, ())):
                cands = list(dict.fromkeys(u for c, _ in by_op.get(rare, ())
                                           for u in _users_up(index, eg.find(c), [cp.op])))
        for cls in cands:
            # A direction with several sources (a two-output rule) searches a product of
            # classes that may yield nothing for a long while: the cap on matches does not
            # bound that work, the deadline does.
            eg.check_deadline()
            cls = eg.find(cls)
            if cls in seen:
                continue
            seen.add(cls)
            for m2 in ematch(eg, cp, cls, m, index):
                yield from extend(k + 1, m2, (*roots, cls))

    for hit in extend(0, Match({}, {}), ()):
        out.append(hit)
        if len(out) >= cap:
            break
    return out


def _users_up(index: MatchIndex, cls: int, ops: list[str]) -> list[int]:
    """The classes reached from `cls` through users of each op in turn."""
    found = [cls]
    for op in ops:
        found = list(dict.fromkeys(u for c in found for u in index.users.get(c, {}).get(op, ())))
    return found


def _anchors(cp: CPattern, tensors: Mapping[str, int]) -> Iterator[tuple[int, list[str]]]:
    """Each tensor variable of `cp` bound already, with the ops of the patterns that
    enclose it, innermost first (their last is `cp.op`)."""
    todo: list[tuple[CPattern, list[str]]] = [(cp, [cp.op])]
    while todo:
        p, ops = todo.pop()
        for c in p.children:
            if isinstance(c, str):
                if c in tensors:
                    yield tensors[c], ops
            else:
                todo.append((c, [c.op, *ops]))


def _apply(eg: EGraph, d: Direction, m: Match, roots: tuple[int, ...]) -> bool:
    """Apply one match; True if it joined two classes."""
    env: dict[str, Any] = {k: eg.type_of(c) for k, c in m.tensors.items()}
    env.update(m.attrs)
    try:
        if not deferred_ok(eg, m, env) or not holds(d.rule, env):
            return False
        # The source's instance, term for term, so the union states exactly the rule's
        # equation (it is congruent to what matched: the same class).
        sources = [build(eg, p, m.tensors, m.attrs, env) for p in d.rule.source]
        targets = [build(eg, p, m.tensors, m.attrs, env) for p in d.rule.target]
    except (IRError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return False  # the target does not type-check here: no rewrite
    if any(eg.find(a) != eg.find(r) for a, r in zip(sources, roots, strict=True)) or any(
            eg.type_of(a) != eg.type_of(b) for a, b in zip(sources, targets, strict=True)):
        return False
    joined = False
    for a, b in zip(sources, targets, strict=True):
        joined |= eg.union(a, b, (d.name, d.forward))
    return joined


def check(lib: Library, rule: Rule, budget: Budget = Budget(),
          exclude: Callable[[Direction], bool] | None = None, count: int = 3) -> Coverage:
    """Does `lib` derive `rule`? Covered only if derived at every instance checked
    (`instances_of`); otherwise the verdict at the first instance where it is not."""
    t0 = time.perf_counter()
    try:
        insts = instances_of(rule, count)
    except IRError as e:
        return Coverage(rule.name, "error", reason=f"no instance: {e}",
                        time_s=time.perf_counter() - t0)
    first: Coverage | None = None
    for inst in insts:
        cov = check_at(lib, inst, budget, exclude, rule.name)
        if cov.verdict != "covered":
            return replace(cov, time_s=time.perf_counter() - t0)
        first = first or cov
    assert first is not None
    return replace(first, time_s=time.perf_counter() - t0)


def check_at(lib: Library, inst: Instance, budget: Budget = Budget(),
             exclude: Callable[[Direction], bool] | None = None, name: str | None = None,
             t0: float | None = None) -> Coverage:
    t0 = time.perf_counter() if t0 is None else t0
    rule = inst.rule
    name = name or rule.name
    eg = EGraph(budget.max_nodes, t0 + budget.time_s)
    where = inst.describe()
    try:
        env: dict[str, Any] = {**inst.types, **inst.attrs}
        if not holds(rule, env):
            return Coverage(name, "error", reason="its condition does not hold at the "
                            f"instance ({where})", instance=where)
        leaves = {v: eg.var(v, t) for v, t in inst.types.items()}
        src = [build(eg, p, leaves, inst.attrs, env) for p in rule.source]
        tgt = [build(eg, p, leaves, inst.attrs, env) for p in rule.target]
    except BudgetExceeded as e:
        return Coverage(name, "budget", reason=f"{e} before the rule's own sides were built",
                        instance=where, time_s=time.perf_counter() - t0)
    except IRError as e:
        return Coverage(name, "error", reason=f"the rule does not type-check at ({where}): "
                        f"{e}", instance=where, time_s=time.perf_counter() - t0)
    if any(eg.type_of(a) != eg.type_of(b) for a, b in zip(src, tgt, strict=True)):
        return Coverage(name, "error", reason="its sides have different types", instance=where)
    dirs = [d for d in lib.directions if exclude is None or not exclude(d)]

    def done() -> bool:
        return all(eg.find(a) == eg.find(b) for a, b in zip(src, tgt, strict=True))

    def result(verdict: str, reason: str, iters: int) -> Coverage:
        steps: list[Step] = []
        if verdict == "covered":
            for a, b in zip(src, tgt, strict=True):
                steps += eg.explain(a, b)
        return Coverage(name, verdict, tuple(steps), reason, time.perf_counter() - t0, len(eg),
                        iters, where)

    it = 0
    try:
        while not done():
            if it >= budget.max_iters:
                return result("budget", f"{budget.max_iters} iterations", it)
            it += 1
            by_op = eg.by_op()
            present = set(by_op)
            found: list[tuple[Direction, Match, tuple[int, ...]]] = []
            for d in dirs:
                if d.ops <= present:
                    found += [(d, m, roots)
                              for m, roots in _matches(eg, d, by_op, budget.max_matches)]
                    eg.check_deadline()
            size, unions = len(eg), eg.unions
            for d, m, roots in found:
                _apply(eg, d, m, roots)
                if done():
                    break
                eg.check_deadline()
            eg.rebuild()
            if len(eg) == size and eg.unions == unions:
                return result("not covered", f"saturated after {it} iterations", it)
    except BudgetExceeded as e:
        if done():
            return result("covered", "", it)
        return result("budget", str(e), it)
    return result("covered", "", it)


# ---- many rules ---------------------------------------------------------------------


def prune(rules: Sequence[Rule], budget: Budget = Budget(),
          progress: Callable[[Coverage], None] | None = None, commutative: bool = False
          ) -> tuple[list[Rule], list[Coverage]]:
    """The rules no smaller kept rule derives, and the verdict on every rule. Rules are
    taken smallest first (total ops, then their order): each is checked against the rules
    kept before it, so of two rules that derive each other the first is kept."""
    order = sorted(range(len(rules)), key=lambda i: (sum(rules[i].size), i))
    kept: list[Rule] = []
    dirs: list[Direction] = list(compile_library([], commutative).directions)
    verdicts: dict[int, Coverage] = {}
    for i in order:
        r = rules[i]
        cov = check(Library(tuple(dirs)), r, budget)
        verdicts[i] = cov
        if progress is not None:
            progress(cov)
        if cov.verdict != "covered":
            kept.append(r)
            dirs += compile_library([r]).directions
    keep = {id(r) for r in kept}
    return [r for r in rules if id(r) in keep], [verdicts[i] for i in range(len(rules))]
