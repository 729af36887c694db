"""Per-subsystem rule tables keyed by op name (the JAX-primitive pattern).

Each subsystem (verifier, mutants, tpu_sim, backends, importers) owns one or more tables.
`get` raises `MissingRule` naming the op and the subsystem; an op a subsystem cannot
handle is marked `unsupported` with a reason, which the coverage test accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from superopt.ir.errors import IRError
from superopt.ir.opdef import OPS, OpDef

R = TypeVar("R")


class MissingRule(IRError):
    def __init__(self, table: str, op: str, reason: str | None = None) -> None:
        msg = f"no {table} rule for op {op!r}"
        if reason:
            msg += f": unsupported ({reason})"
        super().__init__(msg)
        self.table, self.op, self.reason = table, op, reason


@dataclass(frozen=True)
class Unsupported:
    reason: str


class RuleTable(Generic[R]):
    """A table of rules for one subsystem. `needs(op)` says which ops must be covered."""

    def __init__(self, name: str, needs: Callable[[OpDef], bool] = lambda op: True) -> None:
        self.name = name
        self.needs = needs
        self._rules: dict[str, R | Unsupported] = {}
        TABLES[name] = self

    def register(self, op: str, rule: R | None = None) -> Callable[[R], R] | R:
        """`table.register("relu", fn)` or as a decorator `@table.register("relu")`."""
        if op in self._rules:
            raise ValueError(f"{self.name}: op {op!r} registered twice")
        if rule is not None:
            self._rules[op] = rule
            return rule

        def deco(fn: R) -> R:
            self._rules[op] = fn
            return fn

        return deco

    def unsupported(self, op: str, reason: str) -> None:
        if op in self._rules:
            raise ValueError(f"{self.name}: op {op!r} registered twice")
        self._rules[op] = Unsupported(reason)

    def get(self, op: str) -> R:
        rule = self._rules.get(op)
        if rule is None:
            raise MissingRule(self.name, op)
        if isinstance(rule, Unsupported):
            raise MissingRule(self.name, op, rule.reason)
        return rule

    def supports(self, op: str) -> bool:
        rule = self._rules.get(op)
        return rule is not None and not isinstance(rule, Unsupported)

    def __contains__(self, op: str) -> bool:
        return op in self._rules

    def ops(self) -> list[str]:
        return sorted(self._rules)

    def missing(self) -> list[str]:
        """Registered ops this table needs but has neither a rule nor an unsupported mark."""
        return sorted(name for name, op in OPS.items() if self.needs(op) and name not in self._rules)

    def stale(self) -> list[str]:
        """Rules for op names that are not registered ops (typos, removed ops)."""
        return sorted(name for name in self._rules if name not in OPS)


TABLES: dict[str, RuleTable] = {}
