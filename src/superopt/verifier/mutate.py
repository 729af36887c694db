"""False rules made by mutating true ones: the verifier's own negatives (issue 14).

Every rule's target is changed in one place at a time: an op swapped for a look-alike, an
attribute changed (axis, activation, stride, padding, kernel, permutation, the size of a
constant), the operands of a non-commutative op swapped, an op dropped (replaced by one of
its operands), a variable renamed to another input of the rule. Many mutants are still
true (relu of relu is relu) or meaningless (ill-typed everywhere); a mutant is kept as a
negative only when the float64 reference semantics separate its two sides at an instance
of the *original* rule: the witness comes from the original's instances, not from testing
the mutant, so the verifier's own tester is not the judge of what counts as false.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.opdef import ELEMENTWISE, REDUCTION, get_op
from superopt.ir.rules import RuleTable
from superopt.substitutions.pattern import AConst, Pattern, PNode, PVar
from superopt.substitutions.rule import Rule
from superopt.verifier.sampler import Built, Instance, build, compare, random_test


@dataclass(frozen=True)
class OpMutations:
    """How mutations treat one op: the look-alike it is swapped for (same operands;
    attributes the look-alike lacks are dropped), None for none; and whether swapping its
    first two operands leaves it unchanged (then that mutation is not made)."""

    look_alike: str | None
    symmetric: bool = False


# Every element-wise op and reduction says what it is mistaken for, or that nothing is (the
# coverage test checks the table against the registry); other ops may add a row.
MUTATIONS: RuleTable[OpMutations] = RuleTable(
    "mutate", needs=lambda op: bool({ELEMENTWISE, REDUCTION} & op.traits))
for _op, _facts in {
    "ewadd": OpMutations("ewmul", True), "ewmul": OpMutations("ewadd", True),
    "relu": OpMutations("sigmoid"), "sigmoid": OpMutations("tanh"),
    "tanh": OpMutations("relu"), "gelu": OpMutations("relu"),
    "pool2d_avg": OpMutations("pool2d_max"), "pool2d_max": OpMutations("pool2d_avg"),
    "reduce_sum": OpMutations("reduce_mean"), "reduce_mean": OpMutations("reduce_sum"),
    "reduce_max": OpMutations("reduce_sum"), "sub": OpMutations("ewadd"),
    "div": OpMutations("ewmul"), "maximum": OpMutations("minimum", True),
    "minimum": OpMutations("maximum", True), "lt": OpMutations("gt"), "gt": OpMutations("lt"),
    "eq": OpMutations("lt", True), "exp": OpMutations("sigmoid"), "log": OpMutations("tanh"),
    "silu": OpMutations("gelu"), "sqrt": OpMutations("rsqrt"), "rsqrt": OpMutations("sqrt"),
    "recip": OpMutations("neg"), "neg": OpMutations("recip"), "sin": OpMutations("cos"),
    "cos": OpMutations("sin"), "erf": OpMutations("tanh"), "acos": OpMutations("cos"),
    # No look-alike with the same operands and attributes: other mutations still apply.
    "argmax": OpMutations(None), "attention": OpMutations(None), "cast": OpMutations(None),
    "layer_norm": OpMutations(None), "rms_norm": OpMutations(None),
    "pow": OpMutations(None), "smul": OpMutations(None), "softmax": OpMutations(None),
    "where": OpMutations(None),
}.items():
    MUTATIONS.register(_op, _facts)


def _facts(op: str) -> OpMutations:
    return MUTATIONS.get(op) if MUTATIONS.supports(op) else OpMutations(None)


@dataclass(frozen=True)
class Mutant:
    """A mutated rule, what was changed, and (once checked) the instance of the original
    rule at which the reference semantics separate its sides."""

    rule: Rule
    original: str
    change: str
    witness: str = ""


# ---- mutations ------------------------------------------------------------------------

def _changed_values(op: str, name: str, value: Any) -> list[Any]:
    """Other values for one attribute constant: the next axis or size, another choice."""
    spec = get_op(op).attr_spec(name)
    out: list[Any] = []
    if spec.choices is not None:
        out += [c for c in spec.choices if c != value][:2]
    elif isinstance(value, bool):
        out.append(not value)
    elif isinstance(value, int):
        out += [value + 1] + ([value - 1] if value > 0 else [])
    elif isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
        if name == "perm":
            out.append(tuple(reversed(value)))
        else:
            out.append((value[0] + 1, *value[1:]))
            if len(value) > 1:
                out.append((*value[:-1], value[-1] + 1))
    elif isinstance(value, str) and name == "padding":
        out.append("valid" if value == "same" else "same")
    valid = []
    for v in out:
        try:
            valid.append(spec.validate(op, v))
        except IRError:
            continue
    return valid


def _node_mutations(p: PNode, variables: Sequence[str]) -> Iterator[tuple[str, Pattern]]:
    """(what changed, the changed node) for one node of a pattern."""
    new = _facts(p.op).look_alike
    if new is not None:
        names = {a.name for a in get_op(new).attrs}
        yield f"op {p.op} -> {new}", PNode(new, tuple((k, v) for k, v in p.attrs if k in names),
                                          p.children, p.output)
    for k, (name, a) in enumerate(p.attrs):
        if not isinstance(a, AConst):
            continue
        for v in _changed_values(p.op, name, a.value):
            attrs = (*p.attrs[:k], (name, AConst(v)), *p.attrs[k + 1:])
            yield f"{p.op} {name} {a.value!r} -> {v!r}", replace(p, attrs=attrs)
    named = {k for k, _ in p.attrs}
    if "activation" in {a.name for a in get_op(p.op).attrs} and "activation" not in named:
        attrs = tuple(sorted((*p.attrs, ("activation", AConst("relu")))))
        yield f"{p.op} activation none -> relu", replace(p, attrs=attrs)
    if len(p.children) >= 2 and not _facts(p.op).symmetric and p.children[0] != p.children[1]:
        kids = (p.children[1], p.children[0], *p.children[2:])
        yield f"{p.op} operands swapped", replace(p, children=kids)
    for j, c in enumerate(p.children):
        yield f"{p.op} dropped (operand {j} kept)", c
    for j, c in enumerate(p.children):
        if isinstance(c, PVar):
            for other in variables:
                if other != c.name:
                    kids = (*p.children[:j], PVar(other), *p.children[j + 1:])
                    yield f"?{c.name} -> ?{other} in {p.op}", replace(p, children=kids)
                    break


def _mutations(p: Pattern, variables: Sequence[str]) -> Iterator[tuple[str, Pattern]]:
    """Every pattern that differs from `p` in one node."""
    if not isinstance(p, PNode):
        return
    yield from _node_mutations(p, variables)
    for j, c in enumerate(p.children):
        for what, m in _mutations(c, variables):
            yield what, replace(p, children=(*p.children[:j], m, *p.children[j + 1:]))


def mutants(rule: Rule) -> list[Mutant]:
    """Every one-place mutation of the rule's target that is still a rule (its target
    reads only inputs its source binds), one-directional, without duplicates."""
    out: list[Mutant] = []
    seen = {rule.target}
    variables = rule.source_vars()
    for i, t in enumerate(rule.target):
        for what, m in _mutations(t, variables):
            target = (*rule.target[:i], m, *rule.target[i + 1:])
            if target in seen:
                continue
            seen.add(target)
            try:
                r = Rule(f"{rule.name}~m{len(out) + 1}", rule.source, target, rule.condition,
                         False, "manual", {"mutant_of": rule.name, "change": what})
            except IRError:
                continue
            out.append(Mutant(r, rule.name, what))
    return out


# ---- which mutants are false ----------------------------------------------------------

def original_instances(rule: Rule, samples: int = 6, seed: int = 0) -> list[Instance]:
    """Instances where the original rule's two sides type-check (its tester's draws)."""
    got: list[Instance] = []

    def keep(inst: Instance, built: Built) -> None:
        if built.source is not None and built.target is not None and not built.outside:
            got.append(inst)

    random_test(rule, samples=samples, seed=seed, budget_s=3.0, on_instance=keep)
    return got


def separates(m: Rule, instances: Sequence[Instance], seed: int = 0) -> str:
    """An instance (described) where the reference semantics tell the mutant's sides
    apart (different output shapes or values), or ''."""
    for k, inst in enumerate(instances):
        try:
            built = build(m, inst)
        except IRError:
            continue
        if built.source is None or built.target is None or built.outside:
            continue
        try:
            cmp = compare(m, inst, built, seed * 1000 + k)
        except IRError:
            continue
        if cmp.separates:
            ce = cmp.counterexample or {}
            return f"{inst.describe()}: {ce.get('kind', 'value')} differs"
    return ""


def false_mutants(rules: Sequence[Rule], seed: int = 0, samples: int = 6) -> list[Mutant]:
    """The mutants of `rules` that the float64 reference shows to be false."""
    out: list[Mutant] = []
    for rule in rules:
        ms = mutants(rule)
        if not ms:
            continue
        insts = original_instances(rule, samples, seed)
        for m in ms:
            w = separates(m.rule, insts, seed)
            if w:
                out.append(replace(m, witness=w))
    return out


def sample(items: Sequence[Mutant], n: int, seed: int = 0) -> list[Mutant]:
    """n mutants spread over the originals (one per rule before a second of any)."""
    rng = random.Random(seed)
    by_rule: dict[str, list[Mutant]] = {}
    for m in items:
        by_rule.setdefault(m.original, []).append(m)
    for ms in by_rule.values():
        rng.shuffle(ms)
    out: list[Mutant] = []
    while len(out) < n and any(by_rule.values()):
        for name in sorted(by_rule):
            if by_rule[name] and len(out) < n:
                out.append(by_rule[name].pop())
    return out
