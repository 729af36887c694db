"""Errors raised by the IR. Each message names the op, the input and what was expected."""

from __future__ import annotations


class IRError(Exception):
    """Base class for every IR error."""


class UnknownOp(IRError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown op {name!r}; known ops: {', '.join(sorted(known))}")
        self.name = name


class AttrError(IRError):
    def __init__(self, op: str, attr: str, problem: str) -> None:
        super().__init__(f"{op}: attribute {attr!r}: {problem}")
        self.op, self.attr = op, attr


class ShapeError(IRError):
    """Shape or dtype mismatch: which op, which input, what was expected, what was found."""

    def __init__(self, op: str, index: int | None, expected: str, found: str) -> None:
        where = f"input {index}" if index is not None else "attributes"
        super().__init__(f"{op}: {where}: expected {expected}, found {found}")
        self.op, self.index, self.expected, self.found = op, index, expected, found


class LintError(IRError):
    """A graph that violates an IR invariant (order, arity, shapes)."""
