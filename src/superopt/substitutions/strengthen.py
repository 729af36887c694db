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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.types import TensorType
from superopt.substitutions.conditions import (
    _attribute_conditions,
    _equality_conditions,
    _pins,
    add_conditions,
    elementwise_everywhere,
    pinned_shapes,
    rank_conditions,
    rank_free_ops,
    untested_reason,
)
from superopt.substitutions.rule import Rule
from superopt.verifier.sampler import random_test

# Seeds of the random tester: the verifier's default seed first, so that a rule passing
# here is not refuted by `superopt verify` with its default options, then another one.
TEST_SEEDS = (0, 1)
TEST_SAMPLES = 12
TEST_BUDGET_S = 5.0

LEVELS = ("rank", "attributes", "equalities", "pinned")
UNTESTED = "untested"  # the level of a rule that testing at other shapes cannot refute
TYPING = "typing"  # not refuted; restricted to its discovery ranks, where its target types


@dataclass(frozen=True)
class Outcome:
    """What testing at other shapes did to one rule: `level` is '' (passed as
    generalised), UNTESTED (no other shapes can refute it: `untested_reason`), one of
    LEVELS (strengthened), TYPING (not refuted, but given its discovery ranks where its
    target did not type-check), or 'refuted' (even the pinned rule failed; the rule is
    left out)."""

    rule: Rule | None
    level: str
    counterexample: str = ""


def _probe(rule: Rule, seeds: Sequence[int] = TEST_SEEDS, samples: int = TEST_SAMPLES,
           budget_s: float = TEST_BUDGET_S) -> tuple[str, str]:
    """(a counterexample, sampled shapes where only the source type-checks), each
    described, or '' where the tests found none; one random test per seed gives both."""
    gap = ""
    for seed in seeds:
        report = random_test(rule, samples=samples, seed=seed, budget_s=budget_s)
        ce = report.counterexample
        if ce is not None:
            return f"{ce.get('kind')} at shapes {ce.get('shapes')} attrs {ce.get('attrs')}", gap
        if report.source_only and not gap:
            gap = f"target does not type-check at {report.source_only_example}"
    return "", gap


def counterexample(rule: Rule, seeds: Sequence[int] = TEST_SEEDS, samples: int = TEST_SAMPLES,
                   budget_s: float = TEST_BUDGET_S) -> str:
    """A description of sampled shapes/attributes/inputs separating the sides, or ''."""
    return _probe(rule, seeds, samples, budget_s)[0]


def _rank_only(rule: Rule, types: Mapping[str, TensorType], gap: str, **test: Any
               ) -> Outcome:
    """A rule no sampled shapes refute but some give only its source a type: restricted
    to its discovery ranks when that closes the gap (a 2-D rule with a concat along axis
    0, stated for every rank, matches batched matmuls where its target cannot be built:
    it claims more than was found; six of the TASO-preset 3-op rules were so, and the
    verifier, whose premise is that both sides type-check, left them unknown until they
    had their ranks). Otherwise kept as it is: the gap is in the target's typing alone (an
    enlarge to 3 x 3 needs a kernel no larger), which the premise already carries, and
    stronger conditions would pin the rule to its discovery shapes."""
    ranks = {v: len(t.shape) for v, t in types.items()}
    cand = add_conditions(rule, rank_conditions(rule, ranks))
    if cand.condition == rule.condition:
        return Outcome(rule, "")
    try:
        holds = cand.holds_condition(types, {})
    except IRError:
        holds = False
    if holds and _probe(cand, **test) == ("", ""):
        prov = dict(cand.provenance)
        prov["strengthened"] = {"level": TYPING, "refuted_by": gap}
        return Outcome(replace(cand, provenance=prov), TYPING, gap)
    return Outcome(rule, "")


def strengthen(rule: Rule, types: Mapping[str, TensorType], **test: Any) -> Outcome:
    """Test `rule` at sampled shapes; if refuted, the first strengthening (LEVELS) that
    holds at `types` (the discovery shapes) and survives the same test. A rule that no
    other shapes can refute (`untested_reason`) is kept as it is, untested. A rule whose
    target alone fails to type-check at sampled shapes gets its discovery ranks where that
    is enough (`_rank_only`)."""
    if untested_reason(rule, types):
        return Outcome(rule, UNTESTED)
    ce, gap = _probe(rule, **test)
    if not ce:
        return _rank_only(rule, types, gap, **test) if gap else Outcome(rule, "")
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


# The condition builders live in `conditions` (below the verifier); named here too, where
# the generator and the tests have always found them.
__all__ = ["LEVELS", "TEST_BUDGET_S", "TEST_SAMPLES", "TEST_SEEDS", "TYPING", "UNTESTED",
           "Outcome", "add_conditions", "counterexample", "elementwise_everywhere",
           "pinned_shapes", "rank_conditions", "rank_free_ops", "strengthen", "strengthen_task",
           "untested_reason"]
