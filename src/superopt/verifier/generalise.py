"""`verify --generalise`: after a rule is proved at the shapes its source found it at, the
weakest condition on our ladder under which it is still proved.

A rule read from TASO's or Tensat's files is verified at TASO's input shapes first
(`prover.at_source_shapes`). The general form the reader also builds (every dimension
symbolic, shape-dependent attributes as expressions, the typing's equalities and TASO's
ranks as the condition) is then tried, and if that is not proved, ever stronger forms
made with the generator's strengthening steps: shape-dependent attributes fixed to their
value at TASO's shapes (groups = 1 where TASO had 1, split sizes), then every equality
between dimensions TASO's shapes have (no broadcasting unless both sides allow it, odd
kernels where the source has them). The first form proved is reported, with its
condition as the shapes the verdict holds for; a rule none of them proves stays proved at
TASO's shapes only. Refuted and invalid rules are never generalised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from superopt.ir.errors import IRError
from superopt.ir.types import TensorType
from superopt.substitutions.conditions import (
    _attribute_conditions,
    _equality_conditions,
    add_conditions,
)
from superopt.substitutions.rule import Rule
from superopt.verifier.axioms import Axiom
from superopt.verifier.prover import PROVED, RuleResult, VerifyOptions, verify_rules

LEVELS = ("as read", "attributes fixed", "dimension equalities")


def ladder(rule: Rule) -> list[tuple[str, Rule]]:
    """General forms of a rule with TASO shapes, weakest condition first; each holds at
    TASO's shapes (otherwise it could not generalise the rule proved there)."""
    shapes = rule.provenance.get("taso_types")
    if not shapes or not rule.provenance.get("at_taso_shapes"):
        return []
    types = {k: TensorType(tuple(v)) for k, v in shapes.items()}
    out: list[tuple[str, Rule]] = []
    cand = rule
    steps = [[], _attribute_conditions(rule, types), _equality_conditions(rule, types)]
    for level, parts in zip(LEVELS, steps, strict=True):
        cand = add_conditions(cand, parts)
        if out and cand.condition == out[-1][1].condition:
            continue
        try:
            if not cand.holds_condition(types, {}):
                continue
        except IRError:
            continue
        out.append((level, cand))
    return out


def generalise(rules: Sequence[Rule], results: Sequence[RuleResult], axioms: Sequence[Axiom],
               options: VerifyOptions, jobs: int,
               exclude: Callable[[Rule], Sequence[str]] | None = None,
               executor: str | None = None) -> list[RuleResult]:
    """`results` (of `rules` at their source's shapes) with every proved rule replaced by
    the proof of its most general form on the ladder, where one is proved."""
    out = list(results)
    pending = {i: ladder(r) for i, (r, res) in enumerate(zip(rules, results, strict=True))
               if res.state == PROVED}
    step = 0
    while pending:
        todo = [(i, forms[step]) for i, forms in pending.items() if step < len(forms)]
        if not todo:
            break
        got = verify_rules([r for _, (_, r) in todo], axioms, options, jobs, exclude,
                           executor=executor)
        for (i, (level, r)), res in zip(todo, got, strict=True):
            if res.state == PROVED:
                where = f"where {r.condition}" if r.condition else "all shapes"
                out[i] = replace(res, location=out[i].location,
                                 shapes=f"{where} (generalised: {level})")
                del pending[i]
        step += 1
    return out
