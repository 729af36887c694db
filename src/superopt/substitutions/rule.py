"""Substitution rules: named source => target pattern pairs with conditions and status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import numpy as np

from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.types import TensorType
from superopt.substitutions.pattern import (
    Bindings,
    Pattern,
    PatternError,
    attr_vars,
    build,
    eval_expr,
    op_count,
    tensor_vars,
)

STATES = ("unverified", "proved", "refuted", "unknown", "invalid")


@dataclass(frozen=True)
class ProofStatus:
    """What is known about a rule: proved (with the axioms used), refuted (with a
    counterexample), unknown (with the reason and time limit), invalid (ill-typed or
    contradictory: no instance of the rule exists, with the reason), or not yet checked."""

    state: str = "unverified"
    axioms: tuple[str, ...] = ()
    time_s: float | None = None
    counterexample: Mapping[str, Any] | None = None
    reason: str = ""
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"proof state must be one of {STATES}, found {self.state!r}")


@dataclass(frozen=True)
class Rule:
    """`source` and `target` hold one pattern per output, paired position by position."""

    name: str
    source: tuple[Pattern, ...]
    target: tuple[Pattern, ...]
    condition: str | None = None
    bidirectional: bool = False
    kind: str = "taso"  # taso (exact), pet (mutant + corrections), manual
    provenance: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    status: ProofStatus = field(default_factory=ProofStatus)

    def __post_init__(self) -> None:
        if not self.source or len(self.source) != len(self.target):
            raise PatternError(f"rule {self.name}: source has {len(self.source)} outputs, "
                               f"target {len(self.target)}")
        if not isinstance(self.provenance, MappingProxyType):
            object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))
        missing = set(self.target_vars()) - set(self.source_vars())
        if missing:
            raise PatternError(f"rule {self.name}: target uses ?{sorted(missing)[0]}, which the "
                               "source does not bind")
        if self.bidirectional:
            back = set(self.source_vars()) - set(tensor_vars_all(self.target))
            if back:
                raise PatternError(f"rule {self.name}: '<=>' but the target does not bind "
                                   f"?{sorted(back)[0]}")

    @property
    def outputs(self) -> int:
        return len(self.source)

    def source_vars(self) -> list[str]:
        return list(dict.fromkeys(v for p in self.source for v in tensor_vars(p)))

    def target_vars(self) -> list[str]:
        return tensor_vars_all(self.target)

    def attr_vars(self) -> list[str]:
        return list(dict.fromkeys(v for p in (*self.source, *self.target) for v in attr_vars(p)))

    @property
    def size(self) -> tuple[int, int]:
        return (sum(op_count(p) for p in self.source), sum(op_count(p) for p in self.target))

    def reversed(self) -> Rule:
        return replace(self, name=f"{self.name}~rev", source=self.target, target=self.source)

    def with_status(self, status: ProofStatus) -> Rule:
        return replace(self, status=status)

    def holds_condition(self, types: Mapping[str, TensorType], attrs: Mapping[str, Any]) -> bool:
        if self.condition is None:
            return True
        return bool(eval_expr(self.condition, {**types, **attrs}))

    def instantiate(self, types: Mapping[str, TensorType], attrs: Mapping[str, Any] | None = None,
                    ) -> tuple[Graph, Graph]:
        """Both sides as graphs over inputs named after the tensor variables.

        Raises an IRError (ShapeError, PatternError) when a side does not type-check.
        """
        return (self._side(self.source, types, attrs or {}),
                self._side(self.target, types, attrs or {}))

    def _side(self, pats: tuple[Pattern, ...], types: Mapping[str, TensorType],
              attrs: Mapping[str, Any]) -> Graph:
        b = GraphBuilder(self.name)
        tensors: dict[str, Value] = {}
        for v in self.source_vars():
            if v not in types:
                raise PatternError(f"rule {self.name}: no type given for ?{v}")
            tensors[v] = b.input(v, types[v].shape, types[v].dtype)
        bind = Bindings(tensors, dict(attrs))
        return b.build([build(p, b, bind) for p in pats])


def tensor_vars_all(pats: tuple[Pattern, ...]) -> list[str]:
    return list(dict.fromkeys(v for p in pats for v in tensor_vars(p)))


def differs(rule: Rule, types: Mapping[str, TensorType], attrs: Mapping[str, Any] | None = None,
            trials: int = 2, seed: int = 0, bound: int = 0) -> dict[str, np.ndarray] | None:
    """Test a rule on random exact inputs mod p; return separating inputs, or None if the
    two sides agree on every trial (shape mismatches count as differing). With `bound`,
    the inputs are integers in [-bound, bound] as the generator drew them (exp is exact
    mod p only while sums do not wrap: `superopt.ir.modp`)."""
    from superopt.ir.interpret import interpret, random_feeds
    from superopt.ir.kernels import P

    src, tgt = rule.instantiate(types, attrs)
    for t in range(trials):
        feeds = random_feeds(src, "modp", seed=seed + t)
        if bound:
            rng = np.random.default_rng([seed + t, bound])
            feeds = {k: rng.integers(-bound, bound + 1, size=np.shape(v), dtype=np.int64) % P
                     for k, v in feeds.items()}
        a = interpret(src, feeds, "modp")
        b = interpret(tgt, feeds, "modp")
        for x, y in zip(a, b, strict=True):
            if x.shape != y.shape or not np.array_equal(x, y):
                return feeds
    return None
