"""Testing generalised rules at other shapes, and strengthening the ones that fail there.

A rule found at the generator's shapes is generalised (`symshape.py`), but the
generalisation can claim too much: a 2-D matmul identity does not hold for batched,
broadcasting matmul at rank 3, and a split of a conv's weights is wrong once the inferred
`groups` exceeds 1. Each generalised rule is therefore random-tested with the verifier's
sampler (`superopt.verifier.sampler.random_test`, the same tester `superopt verify` runs
first). A refuted rule is not dropped but restricted by ever stronger conditions that hold
at the shapes where it was found, each re-tested:

1. the rank of every tensor variable;
2. plus each shape-dependent attribute expression equal to its value there (e.g.
   `dim(?x,1) // dim(?w,1) == 1`, a groups == 1 condition);
3. plus every equality between dimensions that the discovery shapes satisfy;
4. the discovery shapes themselves (`shape(?v) == (...)`), as for inexpressible sizes.

Two kinds of rules are not tested, because no instance at other shapes can separate their
sides unless the discovery shapes already do (and `check_rule` has tested those):

- rules whose condition pins every tensor variable to its discovery shape (and that have
  no attribute variables): the discovery instance is the only one there is;
- rules built only from elementwise ops (`rank_free_ops()`, from the IR's traits) whose every output uses the same
  tensor variables on both sides (`elementwise_everywhere`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.opdef import ELEMENTWISE, LAYOUT, all_ops
from superopt.ir.types import TensorType
from superopt.substitutions.pattern import (
    AExpr,
    AVar,
    PNode,
    PVar,
    compile_expr,
    eval_expr,
    walk,
)
from superopt.substitutions.rule import Rule

# Seeds of the random tester: the verifier's default seed first, so that a rule passing
# here is not refuted by `superopt verify` with its default options, then another one.
TEST_SEEDS = (0, 1)
TEST_SAMPLES = 12
TEST_BUDGET_S = 5.0

LEVELS = ("rank", "attributes", "equalities", "pinned")
UNTESTED = "untested"  # the level of a rule that testing at other shapes cannot refute



@functools.cache
def rank_free_ops() -> frozenset[str]:
    """Ops whose rules hold at every rank (with the condition the typing adds), from the
    IR's traits: every element-wise op, and layout ops without attributes (copy; `layout`
    names a rank-specific axis order)."""
    return frozenset(op.name for op in all_ops()
                     if op.has(ELEMENTWISE) or (op.has(LAYOUT) and not op.attrs))



@dataclass(frozen=True)
class Outcome:
    """What testing at other shapes did to one rule: `level` is '' (passed as
    generalised), UNTESTED (no other shapes can refute it: `untested_reason`), one of
    LEVELS (strengthened), or 'refuted' (even the pinned rule failed; the rule is left
    out)."""

    rule: Rule | None
    level: str
    counterexample: str = ""


def add_conditions(rule: Rule, parts: Sequence[str]) -> Rule:
    """The rule with `parts` conjoined to its condition (duplicates skipped)."""
    have = [rule.condition] if rule.condition else []
    new = [p for p in parts if p and p not in (rule.condition or "")]
    if not new:
        return rule
    return replace(rule, condition=" and ".join(have + list(dict.fromkeys(new))))


def rank_conditions(rule: Rule, ranks: Mapping[str, int]) -> list[str]:
    """`rank(?v) == r` for every source variable of known rank, unless every op of the
    rule is elementwise (those rules hold at any rank)."""
    ops = {q.op for p in (*rule.source, *rule.target) for q in walk(p) if isinstance(q, PNode)}
    if ops <= rank_free_ops():
        return []
    return [f"rank(?{v}) == {ranks[v]}" for v in rule.source_vars() if v in ranks]


def _attribute_conditions(rule: Rule, types: Mapping[str, TensorType]) -> list[str]:
    out = []
    for p in (*rule.source, *rule.target):
        for q in walk(p):
            if not isinstance(q, PNode):
                continue
            for _, a in q.attrs:
                if not isinstance(a, AExpr):
                    continue
                try:
                    v = eval_expr(a.text, types)
                except IRError:
                    continue
                if isinstance(v, int) and not isinstance(v, bool):
                    out.append(f"({a.text}) == {v}")
    return out


def _equality_conditions(rule: Rule, types: Mapping[str, TensorType]) -> list[str]:
    first: dict[int, str] = {}
    out = []
    for v in rule.source_vars():
        for ax, d in enumerate(types[v].shape):
            here = f"dim(?{v},{ax})"
            if d in first:
                out.append(f"{first[d]} == {here}")
            else:
                first[d] = here
    return out


def _pins(rule: Rule, types: Mapping[str, TensorType]) -> list[str]:
    return [f"shape(?{v}) == {tuple(types[v].shape)!r}" for v in rule.source_vars()]


def pinned_shapes(rule: Rule) -> dict[str, tuple[int, ...]]:
    """Shapes the rule's condition pins with a top-level `shape(?v) == (...)` conjunct."""
    if not rule.condition:
        return {}
    body = compile_expr(rule.condition).body
    parts = body.values if isinstance(body, ast.BoolOp) and isinstance(body.op, ast.And) \
        else [body]
    out: dict[str, tuple[int, ...]] = {}
    for c in parts:
        if not (isinstance(c, ast.Compare) and len(c.ops) == 1 and isinstance(c.ops[0], ast.Eq)
                and isinstance(c.left, ast.Call) and isinstance(c.left.func, ast.Name)
                and c.left.func.id == "shape" and len(c.left.args) == 1
                and isinstance(c.left.args[0], ast.Name)):
            continue
        try:
            value = ast.literal_eval(c.comparators[0])
        except ValueError:
            continue
        if isinstance(value, tuple) and all(type(d) is int for d in value):
            out[c.left.args[0].id.removeprefix("v_")] = value
    return out


def _attribute_variables(rule: Rule) -> bool:
    """Does the rule bind attributes to variables (which the sampler draws)?"""
    return any(isinstance(a, AVar) for p in (*rule.source, *rule.target) for q in walk(p)
               if isinstance(q, PNode) for _, a in q.attrs)


def elementwise_everywhere(rule: Rule) -> bool:
    """Only elementwise ops, and each output's two sides read the same tensor variables.

    Such a side computes, at every output position, one scalar function of the values its
    variables hold at that position (broadcast: each variable is read at the position
    projected onto its own shape), and its output shape is the broadcast of its variables'
    shapes. With the same variables on both sides, the output shapes agree at every
    shape, and the values agree at every shape exactly when the two scalar functions agree
    on the values drawn. The discovery check draws every variable's values independently at
    every position, so other shapes only draw more tuples of the same kind. (A target that
    does not type-check where the source does, e.g. `smul` for `ewmul` with a non-scalar,
    is not a counterexample to the random tester either.)"""
    if _attribute_variables(rule):
        return False
    for src, tgt in zip(rule.source, rule.target, strict=True):
        nodes = [q for p in (src, tgt) for q in walk(p) if isinstance(q, PNode)]
        if any(q.op not in rank_free_ops() for q in nodes):
            return False
        if {q.name for q in walk(src) if isinstance(q, PVar)} != \
                {q.name for q in walk(tgt) if isinstance(q, PVar)}:
            return False
    return True


def untested_reason(rule: Rule, types: Mapping[str, TensorType]) -> str:
    """Why testing `rule` at shapes other than `types` (where `check_rule` has tested it)
    cannot refute it, or '' when it has to be tested."""
    if not _attribute_variables(rule):
        if not rule.source_vars():
            return "no variables: its only instance is the one checked"
        pins = pinned_shapes(rule)
        if all(v in types and pins.get(v) == tuple(types[v].shape)
               for v in rule.source_vars()):
            return "pinned to the shapes it was checked at"
    if elementwise_everywhere(rule):
        return "elementwise on the same variables on both sides"
    return ""


def counterexample(rule: Rule, seeds: Sequence[int] = TEST_SEEDS, samples: int = TEST_SAMPLES,
                   budget_s: float = TEST_BUDGET_S) -> str:
    """A description of sampled shapes/attributes/inputs separating the sides, or ''."""
    from superopt.verifier.sampler import random_test

    for seed in seeds:
        report = random_test(rule, samples=samples, seed=seed, budget_s=budget_s)
        ce = report.counterexample
        if ce is not None:
            return f"{ce.get('kind')} at shapes {ce.get('shapes')} attrs {ce.get('attrs')}"
    return ""


def strengthen(rule: Rule, types: Mapping[str, TensorType], **test: Any) -> Outcome:
    """Test `rule` at sampled shapes; if refuted, the first strengthening (LEVELS) that
    holds at `types` (the discovery shapes) and survives the same test. A rule that no
    other shapes can refute (`untested_reason`) is kept as it is, untested."""
    if untested_reason(rule, types):
        return Outcome(rule, UNTESTED)
    ce = counterexample(rule, **test)
    if not ce:
        return Outcome(rule, "")
    ranks = {v: len(t.shape) for v, t in types.items()}
    steps = [rank_conditions(rule, ranks) or [f"rank(?{v}) == {ranks[v]}"
                                              for v in rule.source_vars()]]
    steps.append(steps[-1] + _attribute_conditions(rule, types))
    steps.append(steps[-1] + _equality_conditions(rule, types))
    steps.append(_pins(rule, types))
    tried: set[str | None] = {rule.condition}
    for level, parts in zip(LEVELS, steps, strict=True):
        cand = add_conditions(rule, parts)
        if cand.condition in tried:
            continue
        tried.add(cand.condition)
        try:
            if not cand.holds_condition(types, {}):
                continue
        except IRError:
            continue
        if untested_reason(cand, types) or not counterexample(cand, **test):
            prov = dict(cand.provenance)
            prov["strengthened"] = {"level": level, "refuted_by": ce}
            return Outcome(replace(cand, provenance=prov), level, ce)
    return Outcome(None, "refuted", ce)


def strengthen_task(task: tuple[str, dict[str, list[int]]]
                    ) -> tuple[bool, str | None, str, str]:
    """Process-pool entry: a rule as text and its discovery shapes. Returns whether a rule
    is kept, its (possibly strengthened) condition, the level and the counterexample."""
    from superopt.substitutions.text import parse_rule

    text, shapes = task
    rule = parse_rule(text, "<generated rule>")
    out = strengthen(rule, {k: TensorType(tuple(s)) for k, s in shapes.items()})
    cond = out.rule.condition if out.rule is not None else None
    return out.rule is not None, cond, out.level, out.counterexample
