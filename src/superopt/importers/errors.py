"""Errors shared by all importers."""

from __future__ import annotations

from collections.abc import Sequence

from superopt.ir.errors import IRError


class ModelImportError(IRError):
    """A model file or object that cannot be imported (corrupt, unreadable, invalid)."""


class UnsupportedOpsError(ModelImportError):
    """Every unsupported operator of a model, with where each occurs; no partial graph."""

    def __init__(self, source: str, found: Sequence[tuple[str, str]]) -> None:
        # found: (foreign op type, location such as a node name)
        by_op: dict[str, list[str]] = {}
        for op, where in found:
            by_op.setdefault(op, []).append(where)
        parts = []
        for op in sorted(by_op):
            places = by_op[op]
            shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
            parts.append(f"{op} (at {shown})")
        super().__init__(f"{source}: {len(by_op)} unsupported operator(s): " + "; ".join(parts))
        self.source = source
        self.ops = sorted(by_op)
        self.where = by_op
