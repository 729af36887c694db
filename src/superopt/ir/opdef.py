"""Operator definitions and the op registry: what an op *is* is defined once, here.

An `OpDef` holds the op's arity, typed attributes with domains, traits, shape rule and
float64 numpy reference semantics. Every subsystem keeps its own per-op rules in a
`RuleTable` (see `superopt.ir.rules`), keyed by the op's snake_case name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from superopt.ir.errors import AttrError, UnknownOp
from superopt.ir.types import TensorType

# Traits shared by subsystems (DESIGN.md section 2).
ELEMENTWISE = "elementwise"
MOVEMENT = "movement"
REDUCTION = "reduction"
NONLINEAR = "nonlinear"
CONSTANT = "constant"
LINEAR = "linear"  # jointly linear in all tensor inputs (ewadd, concat, movement ops)
LAYOUT = "layout"
SOURCE = "source"  # graph inputs and weights: no tensor operands
# An element-wise op a compiler evaluates with a transcendental unit or a polynomial
# (exp, log, roots, erf, sin...): FLOP counts and kernel costs derive from it, so a new
# such op needs no row in those tables.
TRANSCENDENTAL = "transcendental"
TRAITS = frozenset({ELEMENTWISE, MOVEMENT, REDUCTION, NONLINEAR, CONSTANT, LINEAR, LAYOUT,
                    SOURCE, TRANSCENDENTAL})

VARIADIC = -1

AttrValue = Any
Attrs = Mapping[str, AttrValue]
ShapeRule = Callable[[tuple[TensorType, ...], Attrs], tuple[TensorType, ...]]
RefImpl = Callable[[tuple[np.ndarray, ...], Attrs], tuple[np.ndarray, ...]]
Canonicalize = Callable[[tuple[TensorType, ...], dict[str, AttrValue]], dict[str, AttrValue]]

_REQUIRED = object()


def _freeze(value: Any) -> Any:
    """Lists (from JSON or users) become tuples so attributes stay hashable."""
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


_KIND_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "ints": lambda v: isinstance(v, tuple) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in v),
    "any": lambda v: True,
}


@dataclass(frozen=True)
class AttrSpec:
    """One typed attribute. `choices` is a finite domain; `check` returns an error or None."""

    name: str
    kind: str
    default: AttrValue = _REQUIRED
    choices: tuple[AttrValue, ...] | None = None
    check: Callable[[AttrValue], str | None] | None = None
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def validate(self, op: str, value: AttrValue) -> AttrValue:
        value = _freeze(value)
        if self.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not _KIND_CHECKS[self.kind](value):
            raise AttrError(op, self.name, f"expected {self.kind}, found {value!r}")
        if self.choices is not None and value not in self.choices:
            raise AttrError(op, self.name, f"expected one of {list(self.choices)}, found {value!r}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise AttrError(op, self.name, problem)
        return value


@dataclass(frozen=True)
class OpDef:
    """A tensor operator, defined once for every subsystem."""

    name: str
    num_inputs: int  # VARIADIC for concat
    shape: ShapeRule
    reference: RefImpl
    attrs: tuple[AttrSpec, ...] = ()
    traits: frozenset[str] = frozenset()
    linear_in: tuple[int, ...] = ()  # inputs in which the op is multi-linear
    num_outputs: Callable[[Attrs], int] | int = 1
    canonicalize: Canonicalize | None = None
    min_inputs: int = 1  # only for VARIADIC
    doc: str = ""
    input_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        unknown = set(self.traits) - TRAITS
        if unknown:
            raise ValueError(f"{self.name}: unknown traits {sorted(unknown)}")

    def outputs(self, attrs: Attrs) -> int:
        return self.num_outputs(attrs) if callable(self.num_outputs) else self.num_outputs

    def attr_spec(self, name: str) -> AttrSpec:
        for spec in self.attrs:
            if spec.name == name:
                return spec
        raise AttrError(self.name, name, f"no such attribute; known: {[a.name for a in self.attrs]}")

    def has(self, trait: str) -> bool:
        return trait in self.traits

    @property
    def named_source(self) -> bool:
        """An input or weight: a source known by its `name` attribute (feeds and weight
        data are keyed by it). TASO's constants are sources too, made from attributes."""
        return SOURCE in self.traits and any(a.name == "name" for a in self.attrs)

    def check_attrs(self, attrs: Attrs) -> dict[str, AttrValue]:
        """Validate attribute types and domains and fill in defaults."""
        known = {spec.name for spec in self.attrs}
        extra = set(attrs) - known
        if extra:
            raise AttrError(self.name, sorted(extra)[0],
                            f"unknown attribute; known: {sorted(known) or 'none'}")
        out: dict[str, AttrValue] = {}
        for spec in self.attrs:
            if spec.name in attrs:
                out[spec.name] = spec.validate(self.name, attrs[spec.name])
            elif spec.required:
                raise AttrError(self.name, spec.name, "required attribute is missing")
            else:
                out[spec.name] = _freeze(spec.default)
        return out

    def is_multilinear(self, attrs: Attrs) -> bool:
        """Linear in each of `linear_in` (or jointly linear), with no fused activation."""
        fused = attrs.get("activation", "none") != "none"
        return bool(self.linear_in or LINEAR in self.traits) and not fused


OPS: dict[str, OpDef] = {}


def register_op(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is already registered")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise UnknownOp(name, list(OPS)) from None


def all_ops() -> list[OpDef]:
    return [OPS[k] for k in sorted(OPS)]


def ops_with(trait: str) -> list[str]:
    """Names of the registered ops that have `trait`: a table registers a rule shared by a
    trait's ops this way, so a new op with the trait gets it without an edit there."""
    return [op.name for op in all_ops() if op.has(trait)]
