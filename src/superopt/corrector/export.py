"""A corrected mutant as a rule of the project's rule model (kind "pet").

The source is the original subprogram, the target the mutant plus its corrections, both
as patterns over one tensor variable per input or weight. Attributes are concrete: the
corrections were derived for concrete shapes, so the rule's condition pins the shape of
every variable (a rewrite engine must not apply it at other shapes) and the provenance
records those shapes, the box test and the correction summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from superopt.corrector.correct import CorrectedMutant
from superopt.ir.graph import Graph, Value
from superopt.ir.opdef import get_op
from superopt.substitutions.pattern import AConst, Pattern, PNode, PVar
from superopt.substitutions.rule import ProofStatus, Rule


def variable_names(graph: Graph) -> dict[str, str]:
    """Source name -> rule variable name (identifiers; kept when already valid)."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for n in graph.nodes:
        if not n.is_named_source:
            continue
        name = n.attr("name")
        var = name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else \
            re.sub(r"\W", "_", name).strip("_") or "v"
        if not re.match(r"[A-Za-z_]", var):
            var = "v" + var
        base, i = var, 1
        while var in used:
            var = f"{base}_{i}"
            i += 1
        used.add(var)
        out[name] = var
    return out


def graph_patterns(graph: Graph, names: Mapping[str, str]) -> tuple[Pattern, ...]:
    """One pattern tree per output; attributes at their op's default are left out."""
    memo: dict[Value, Pattern] = {}

    def pat(v: Value) -> Pattern:
        if v in memo:
            return memo[v]
        n = graph.node(v.node)
        if n.is_named_source:
            p: Pattern = PVar(names[n.attr("name")])
        else:
            op = get_op(n.op)
            attrs = []
            for k, val in n.attrs:
                spec = op.attr_spec(k)
                if spec.required or spec.default != val:
                    attrs.append((k, AConst(val)))
            p = PNode(n.op, tuple(sorted(attrs)), tuple(pat(u) for u in n.inputs), v.index)
        memo[v] = p
        return p

    return tuple(pat(v) for v in graph.outputs)


def shape_condition(graph: Graph, names: Mapping[str, str]) -> str:
    parts = []
    for n in graph.nodes:
        if n.is_named_source:
            shape = tuple(n.type.shape)
            parts.append(f"shape(?{names[n.attr('name')]}) == {shape!r}")
    return " and ".join(parts)


def to_rule(cm: CorrectedMutant, name: str, provenance: Mapping[str, Any] | None = None) -> Rule:
    """The corrected mutant as a PET rule: original => mutant + corrections."""
    names = variable_names(cm.original)
    shapes = {names[n.attr("name")]: list(n.type.shape) for n in cm.original.nodes
              if n.is_named_source}
    rep = cm.report
    prov: dict[str, Any] = {
        "generator": "pet",
        "shapes": shapes,
        "variables": {v: k for k, v in names.items()},
        "box_test": {"boxes": rep.boxes, "wrong_boxes": rep.wrong_boxes,
                     "equal_fraction": round(rep.equal_fraction, 6), "draws": rep.draws,
                     "evaluations": rep.evaluations, "positions": rep.positions,
                     "error_bound": rep.error_bound},
        "corrections": [{"output": c.output, "region": [list(s) for s in c.region],
                         "fused": c.fused} for c in cm.corrections],
        "fused_kernels": cm.fused_kernels,
        "corrected_check": {"boxes": cm.check.boxes, "fully_equivalent":
                            cm.check.fully_equivalent, "draws": cm.check.draws},
        **dict(provenance or {}),
    }
    status = ProofStatus(state="unverified",
                         reason="exact box test mod p (PET Theorems 1-2), not a Z3 proof")
    return Rule(name=name, source=graph_patterns(cm.original, names),
                target=graph_patterns(cm.corrected, names),
                condition=shape_condition(cm.original, names), kind="pet",
                provenance=prov, status=status)
