"""Symbolic attribute values for the Z3 encoding, and the condition language in Z3.

Every op attribute is laid out in a fixed number of Z3 slots (`AttrCodec`): ints, bools
and string choices as one Int, floats as one Real, stride-like pairs as two Ints, padding
as five Ints (kind: explicit, 'same' or 'valid', then top, bottom, left, right) and other int tuples as a length plus a fixed capacity of items
(unused items are 0, so equal tuples are equal slot lists).

`Translator` evaluates the rule language's expressions (conditions and computed attributes,
`superopt.substitutions.pattern`) over symbolic tensors and attributes. The translation is
exact on the verifier's domain (ranks at most `MAX_RANK`): a value together with the
condition under which Python would evaluate it without an error, so a condition holds
exactly when it is defined and true, as `Rule.holds_condition` treats it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import z3

from superopt.ir.errors import IRError
from superopt.ir.opdef import AttrSpec
from superopt.ir.ops._common import padding_check, positive_pair
from superopt.substitutions.pattern import compile_expr

MAX_RANK = 6  # the verifier's domain: tensors of rank <= MAX_RANK with positive dims
TUPLE_CAP = MAX_RANK  # items of a tuple attribute (perm, shape, axes, sizes, starts, ...)
PADS_CAP = 2 * MAX_RANK  # `pad` has two entries per dim


class Unsupported(IRError):
    """A pattern, condition or attribute the Z3 encoding cannot express."""


# ---- symbolic values ----------------------------------------------------------------

Num = z3.ArithRef


@dataclass(frozen=True, eq=False)
class ZTup:
    """A tuple of ints: a symbolic length and `cap` items (items past the length are 0)."""

    length: Num
    items: tuple[Num, ...]

    def item(self, k: int) -> Num:
        return self.items[k] if k < len(self.items) else z3.IntVal(0)


@dataclass(frozen=True, eq=False)
class ZStr:
    """A string attribute from a finite set of choices, as its index."""

    index: Num
    choices: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class ZPad:
    """Conv/pool padding: kind 0 is explicit (t, b, l, r), 1 is 'same', 2 is 'valid'."""

    kind: Num
    pads: tuple[Num, Num, Num, Num]


@dataclass(frozen=True, eq=False)
class ZTensor:
    term: z3.ExprRef


ZVal = Any  # Num | z3.BoolRef | ZTup | ZStr | ZPad | ZTensor | str (constant)


def ival(v: int | Num) -> Num:
    return z3.IntVal(v) if isinstance(v, int) else v


def sel(items: Sequence[Num], i: Num, default: int = 0) -> Num:
    """items[i] for a symbolic index (default outside the range)."""
    out: Num = z3.IntVal(default)
    for k in reversed(range(len(items))):
        out = z3.If(i == k, items[k], out)
    return out


def zmax(a: Num, b: Num) -> Num:
    return z3.If(a >= b, a, b)


def zmin(a: Num, b: Num) -> Num:
    return z3.If(a <= b, a, b)


def const_tuple(values: Sequence[int], cap: int) -> ZTup:
    if len(values) > cap:
        raise Unsupported(f"tuple {tuple(values)} is longer than {cap} (the verifier's limit)")
    items = [z3.IntVal(int(v)) for v in values] + [z3.IntVal(0)] * (cap - len(values))
    return ZTup(z3.IntVal(len(values)), tuple(items))


# ---- attribute codecs ---------------------------------------------------------------

@dataclass(frozen=True)
class AttrCodec:
    """Layout of one attribute in Z3 slots. `kind`: int, bool, str, float, pair, padding,
    tuple."""

    name: str
    kind: str
    choices: tuple[str, ...] = ()
    cap: int = 0

    @property
    def size(self) -> int:
        return {"int": 1, "bool": 1, "str": 1, "float": 1, "pair": 2, "padding": 5}.get(
            self.kind, 1 + self.cap)

    def sorts(self) -> list[z3.SortRef]:
        return [z3.RealSort() if self.kind == "float" else z3.IntSort()] * self.size

    def fresh(self, prefix: str) -> tuple[ZVal, list[z3.ExprRef]]:
        consts = [z3.Const(f"{prefix}#{k}" if self.size > 1 else prefix, s)
                  for k, s in enumerate(self.sorts())]
        return self.to_val(consts), consts

    def to_val(self, slots: Sequence[z3.ExprRef]) -> ZVal:
        if self.kind in ("int", "float", "bool"):  # bools are 0/1 ints
            return slots[0]
        if self.kind == "str":
            return ZStr(slots[0], self.choices)
        if self.kind == "pair":
            return ZTup(z3.IntVal(2), (slots[0], slots[1]))
        if self.kind == "padding":
            return ZPad(slots[0], (slots[1], slots[2], slots[3], slots[4]))
        return ZTup(slots[0], tuple(slots[1:]))

    def encode(self, value: Any) -> list[z3.ExprRef]:
        """Slots of a concrete attribute value (as stored in a graph or a pattern)."""
        return self.slots(value)

    def slots(self, v: ZVal) -> list[z3.ExprRef]:
        """Slots of a symbolic or concrete value; raises Unsupported on a kind mismatch."""
        k = self.kind
        if k == "int":
            if isinstance(v, bool) or not isinstance(v, int | z3.ArithRef):
                raise Unsupported(f"attribute {self.name}: expected an int, found {v!r}")
            return [ival(v)]
        if k == "float":
            if isinstance(v, int | float) and not isinstance(v, bool):
                return [z3.RealVal(Fraction(v))]
            if isinstance(v, z3.ArithRef):
                return [z3.ToReal(v) if v.is_int() else v]
            raise Unsupported(f"attribute {self.name}: expected a float, found {v!r}")
        if k == "bool":
            if isinstance(v, bool):
                return [z3.IntVal(int(v))]
            if isinstance(v, z3.BoolRef):
                return [z3.If(v, z3.IntVal(1), z3.IntVal(0))]
            if isinstance(v, z3.ArithRef) and v.is_int():
                return [v]
            raise Unsupported(f"attribute {self.name}: expected a bool, found {v!r}")
        if k == "str":
            if isinstance(v, str):
                if v not in self.choices:
                    raise Unsupported(f"attribute {self.name}: {v!r} is not one of {self.choices}")
                return [z3.IntVal(self.choices.index(v))]
            if isinstance(v, ZStr) and v.choices == self.choices:
                return [v.index]
            raise Unsupported(f"attribute {self.name}: expected one of {self.choices}, found {v!r}")
        if k == "pair":
            t = as_tuple(v, 2)
            return [t.item(0), t.item(1)]
        if k == "padding":
            if v == "same":
                return [z3.IntVal(1)] + [z3.IntVal(0)] * 4
            if v == "valid":
                return [z3.IntVal(2)] + [z3.IntVal(0)] * 4
            if isinstance(v, ZPad):
                return [v.kind, *v.pads]
            t = as_tuple(v, 4)
            return [z3.IntVal(0), t.item(0), t.item(1), t.item(2), t.item(3)]
        t = as_tuple(v, self.cap)
        if len(t.items) > self.cap:
            raise Unsupported(f"attribute {self.name}: tuple longer than {self.cap}")
        return [t.length, *[t.item(i) for i in range(self.cap)]]

    def domain(self, slots: Sequence[z3.ExprRef]) -> list[z3.BoolRef]:
        """Facts every valid value satisfies (used for well-typed terms)."""
        k = self.kind
        if k == "bool":
            return [z3.Or(slots[0] == 0, slots[0] == 1)]
        if k == "str":
            return [slots[0] >= 0, slots[0] < len(self.choices)]
        if k == "pair":
            return [slots[0] >= 1, slots[1] >= 1]
        if k == "padding":
            kind, *pads = slots
            return [kind >= 0, kind <= 2, *[p >= 0 for p in pads],
                    z3.Implies(kind != 0, z3.And(*[p == 0 for p in pads]))]
        if k == "tuple":
            n, *items = slots
            return [n >= 0, n <= self.cap] + [z3.Implies(n <= i, items[i] == 0)
                                             for i in range(self.cap)]
        return []

    def decode(self, values: Sequence[Any]) -> Any:
        """A concrete Python attribute value from concrete slot values (ints/Fractions)."""
        k = self.kind
        if k == "int":
            return int(values[0])
        if k == "float":
            return float(values[0])
        if k == "bool":
            return bool(values[0])
        if k == "str":
            return self.choices[int(values[0])]
        if k == "pair":
            return (int(values[0]), int(values[1]))
        if k == "padding":
            kind, *pads = (int(x) for x in values)
            return {1: "same", 2: "valid"}.get(kind, tuple(pads))
        n = int(values[0])
        return tuple(int(x) for x in values[1:1 + n])


def as_tuple(v: ZVal, cap: int) -> ZTup:
    if isinstance(v, ZTup):
        return v
    if isinstance(v, tuple | list):
        if not all(isinstance(x, int | z3.ArithRef) and not isinstance(x, bool) for x in v):
            raise Unsupported(f"expected a tuple of ints, found {v!r}")
        if len(v) > cap:
            raise Unsupported(f"tuple {tuple(v)} is longer than {cap} (the verifier's limit)")
        items = [ival(x) for x in v] + [z3.IntVal(0)] * (cap - len(v))
        return ZTup(z3.IntVal(len(v)), tuple(items))
    raise Unsupported(f"expected a tuple of ints, found {v!r}")


def codec_for(op: str, spec: AttrSpec) -> AttrCodec:
    if spec.kind == "int":
        return AttrCodec(spec.name, "int")
    if spec.kind == "bool":
        return AttrCodec(spec.name, "bool")
    if spec.kind == "float":
        return AttrCodec(spec.name, "float")
    if spec.kind == "str" and spec.choices:
        return AttrCodec(spec.name, "str", tuple(spec.choices))
    if spec.kind == "ints" and spec.check is positive_pair:
        return AttrCodec(spec.name, "pair")
    if spec.kind == "ints":
        return AttrCodec(spec.name, "tuple", cap=PADS_CAP if spec.name == "pads" else TUPLE_CAP)
    if spec.kind == "any" and spec.check is padding_check:
        return AttrCodec(spec.name, "padding")
    raise Unsupported(f"{op}: attribute {spec.name!r} of kind {spec.kind} has no Z3 encoding")


# ---- the condition language in Z3 ----------------------------------------------------

RSQRT = z3.Function("rsqrt", z3.RealSort(), z3.RealSort())  # the condition language's rsqrt()

ShapeFns = tuple[Callable[[z3.ExprRef], Num], Callable[[z3.ExprRef, Num], Num]]


def _true() -> z3.BoolRef:
    return z3.BoolVal(True)


def to_bool(v: ZVal) -> z3.BoolRef:
    if isinstance(v, bool):
        return z3.BoolVal(v)
    if isinstance(v, z3.BoolRef):
        return v
    if isinstance(v, z3.ArithRef):
        return v != 0
    if isinstance(v, int):
        return z3.BoolVal(v != 0)
    raise Unsupported(f"cannot use {v!r} as a condition")


def to_num(v: ZVal) -> Num:
    if isinstance(v, bool):
        return z3.IntVal(int(v))
    if isinstance(v, int):
        return z3.IntVal(v)
    if isinstance(v, float):
        return z3.RealVal(Fraction(v))
    if isinstance(v, z3.BoolRef):
        return z3.If(v, z3.IntVal(1), z3.IntVal(0))
    if isinstance(v, z3.ArithRef):
        return v
    raise Unsupported(f"expected a number, found {_describe(v)}")


def _describe(v: ZVal) -> str:
    return {ZTup: "a tuple", ZStr: "a string attribute", ZPad: "a padding",
            ZTensor: "a tensor"}.get(type(v), repr(v))


def _numeric_pair(a: Num, b: Num) -> tuple[Num, Num]:
    if a.is_real() != b.is_real():
        a = z3.ToReal(a) if a.is_int() else a
        b = z3.ToReal(b) if b.is_int() else b
    return a, b


def equal(a: ZVal, b: ZVal) -> z3.BoolRef:
    """Python `a == b` for the translator's values (attributes compare as stored)."""
    if isinstance(b, ZPad | ZStr | ZTup) and not isinstance(a, ZPad | ZStr | ZTup):
        a, b = b, a
    if isinstance(a, ZStr):
        if isinstance(b, str):
            return z3.BoolVal(False) if b not in a.choices else a.index == a.choices.index(b)
        if isinstance(b, ZStr):
            if a.choices != b.choices:
                raise Unsupported("comparison of string attributes with different choices")
            return a.index == b.index
        return z3.BoolVal(False)
    if isinstance(a, ZPad):
        if b == "same":
            return a.kind == 1
        if b == "valid":
            return a.kind == 2
        if isinstance(b, ZPad):
            return z3.And(a.kind == b.kind, *[p == q for p, q in zip(a.pads, b.pads, strict=True)])
        if isinstance(b, ZTup | tuple | list):
            t = as_tuple(b, 4)
            return z3.And(a.kind == 0, t.length == 4, *[a.pads[i] == t.item(i) for i in range(4)])
        return z3.BoolVal(False)
    if isinstance(a, ZTup) or isinstance(b, ZTup) or isinstance(a, tuple | list) or isinstance(
            b, tuple | list):
        if not isinstance(a, ZTup | tuple | list) or not isinstance(b, ZTup | tuple | list):
            return z3.BoolVal(False)
        cap = max(len(a.items) if isinstance(a, ZTup) else len(a),
                  len(b.items) if isinstance(b, ZTup) else len(b))
        ta, tb = as_tuple(a, cap), as_tuple(b, cap)
        n = max(len(ta.items), len(tb.items))
        return z3.And(ta.length == tb.length,
                      *[z3.Implies(k < ta.length, ta.item(k) == tb.item(k)) for k in range(n)])
    if isinstance(a, str) or isinstance(b, str):
        return z3.BoolVal(a == b)
    if isinstance(a, ZTensor) or isinstance(b, ZTensor):
        raise Unsupported("tensors cannot be compared in a condition; compare shape(...)")
    if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
        return a == b
    x, y = _numeric_pair(to_num(a), to_num(b))
    return x == y


def floordiv(a: Num, b: Num) -> Num:
    """Python's a // b (floor division) from Z3's Euclidean division."""
    return z3.If(b > 0, a / b, (-a) / (-b))


def pymod(a: Num, b: Num) -> Num:
    return a - b * floordiv(a, b)


class Translator:
    """Evaluate a rule-language expression over symbolic tensors and attributes.

    `tensors` maps variable names (no '?') to Z3 tensor terms, `attrs` to symbolic values.
    `rank` and `dim` build the shape terms of a tensor.
    """

    def __init__(self, tensors: dict[str, z3.ExprRef], attrs: dict[str, ZVal],
                 rank: Callable[[z3.ExprRef], Num], dim: Callable[[z3.ExprRef, Num], Num]) -> None:
        self.tensors, self.attrs = tensors, attrs
        self.rank, self.dim = rank, dim

    def evaluate(self, text: str) -> tuple[ZVal, z3.BoolRef]:
        """The value of `text` and the condition under which it is defined."""
        tree = compile_expr(text)
        return self._eval(tree.body)

    def condition(self, text: str) -> z3.BoolRef:
        """True exactly when Python would evaluate `text` to a true value without error."""
        v, ok = self.evaluate(text)
        return z3.And(ok, to_bool(v))

    # Each case returns (value, defined).
    def _eval(self, n: ast.AST) -> tuple[ZVal, z3.BoolRef]:
        method = getattr(self, f"_e_{type(n).__name__}", None)
        if method is None:
            raise Unsupported(f"{type(n).__name__} is not supported in verified conditions")
        return method(n)

    def _e_Constant(self, n: ast.Constant) -> tuple[ZVal, z3.BoolRef]:
        v = n.value
        if isinstance(v, bool):
            return z3.BoolVal(v), _true()
        if isinstance(v, int):
            return z3.IntVal(v), _true()
        if isinstance(v, float):
            return z3.RealVal(Fraction(v)), _true()
        if isinstance(v, str):
            return v, _true()
        raise Unsupported(f"constant {v!r} is not supported in verified conditions")

    def _e_Name(self, n: ast.Name) -> tuple[ZVal, z3.BoolRef]:
        name = n.id[2:]
        if name in self.tensors:
            return ZTensor(self.tensors[name]), _true()
        if name in self.attrs:
            return self.attrs[name], _true()
        raise Unsupported(f"variable ?{name} is not bound")

    def _seq(self, elts: list[ast.expr]) -> tuple[ZVal, z3.BoolRef]:
        vals, oks = [], []
        for e in elts:
            v, ok = self._eval(e)
            if isinstance(v, str):
                raise Unsupported("tuples of strings are not supported in verified conditions")
            vals.append(to_num(v))
            oks.append(ok)
        return as_tuple(vals, max(len(vals), TUPLE_CAP)), z3.And(*oks) if oks else _true()

    def _e_Tuple(self, n: ast.Tuple) -> tuple[ZVal, z3.BoolRef]:
        return self._seq(n.elts)

    def _e_List(self, n: ast.List) -> tuple[ZVal, z3.BoolRef]:
        return self._seq(n.elts)

    def _e_UnaryOp(self, n: ast.UnaryOp) -> tuple[ZVal, z3.BoolRef]:
        v, ok = self._eval(n.operand)
        if isinstance(n.op, ast.Not):
            return z3.Not(to_bool(v)), ok
        return -to_num(v), ok

    def _e_BoolOp(self, n: ast.BoolOp) -> tuple[ZVal, z3.BoolRef]:
        # Short-circuit: a later operand is evaluated only if the earlier ones let it.
        is_and = isinstance(n.op, ast.And)
        vals: list[z3.BoolRef] = []
        ok: z3.BoolRef = _true()
        for e in n.values:
            v, d = self._eval(e)
            if not vals:
                reached: z3.BoolRef = _true()
            else:
                reached = z3.And(*vals) if is_and else z3.Not(z3.Or(*vals))
            ok = z3.And(ok, z3.Implies(reached, d))
            vals.append(to_bool(v))
        return (z3.And(*vals) if is_and else z3.Or(*vals)), ok

    def _e_IfExp(self, n: ast.IfExp) -> tuple[ZVal, z3.BoolRef]:
        c, okc = self._eval(n.test)
        a, oka = self._eval(n.body)
        b, okb = self._eval(n.orelse)
        cond = to_bool(c)
        ok = z3.And(okc, z3.If(cond, oka, okb))
        if isinstance(a, ZTup) or isinstance(b, ZTup):
            cap = max(len(x.items) if isinstance(x, ZTup) else 0 for x in (a, b))
            ta, tb = as_tuple(a, cap), as_tuple(b, cap)
            return ZTup(z3.If(cond, ta.length, tb.length),
                        tuple(z3.If(cond, ta.item(k), tb.item(k)) for k in range(cap))), ok
        if isinstance(a, z3.BoolRef) and isinstance(b, z3.BoolRef):
            return z3.If(cond, a, b), ok
        x, y = _numeric_pair(to_num(a), to_num(b))
        return z3.If(cond, x, y), ok

    def _e_BinOp(self, n: ast.BinOp) -> tuple[ZVal, z3.BoolRef]:
        a, oka = self._eval(n.left)
        b, okb = self._eval(n.right)
        ok = z3.And(oka, okb)
        if isinstance(n.op, ast.Add) and isinstance(a, ZTup) and isinstance(b, ZTup):
            return self._concat(a, b), ok
        x, y = _numeric_pair(to_num(a), to_num(b))
        if isinstance(n.op, ast.Add):
            return x + y, ok
        if isinstance(n.op, ast.Sub):
            return x - y, ok
        if isinstance(n.op, ast.Mult):
            return x * y, ok
        if not (x.is_int() and y.is_int()):
            raise Unsupported("// and % are supported on integers only")
        if isinstance(n.op, ast.FloorDiv):
            return floordiv(x, y), z3.And(ok, y != 0)
        if isinstance(n.op, ast.Mod):
            return pymod(x, y), z3.And(ok, y != 0)
        raise Unsupported(f"operator {type(n.op).__name__} is not supported")

    @staticmethod
    def _concat(a: ZTup, b: ZTup) -> ZTup:
        la, lb = z3.simplify(a.length), z3.simplify(b.length)
        if not (z3.is_int_value(la) and z3.is_int_value(lb)):
            raise Unsupported("+ of tuples of unknown length")
        items = list(a.items[:la.as_long()]) + list(b.items[:lb.as_long()])
        return as_tuple(items, max(len(items), TUPLE_CAP))

    def _e_Compare(self, n: ast.Compare) -> tuple[ZVal, z3.BoolRef]:
        left, ok = self._eval(n.left)
        results = []
        for op, right_node in zip(n.ops, n.comparators, strict=True):
            right, okr = self._eval(right_node)
            ok = z3.And(ok, okr)
            results.append(self._compare(op, left, right))
            left = right
        return z3.And(*results), ok

    def _compare(self, op: ast.cmpop, a: ZVal, b: ZVal) -> z3.BoolRef:
        if isinstance(op, ast.Eq):
            return equal(a, b)
        if isinstance(op, ast.NotEq):
            return z3.Not(equal(a, b))
        if isinstance(op, ast.In | ast.NotIn):
            if isinstance(b, tuple | list):
                b = as_tuple(list(b), max(len(b), TUPLE_CAP))
            if not isinstance(b, ZTup):
                raise Unsupported("'in' needs a tuple on the right")
            found = z3.Or(*[z3.And(k < b.length, equal(a, b.item(k))) for k in range(len(b.items))])
            return found if isinstance(op, ast.In) else z3.Not(found)
        x, y = _numeric_pair(to_num(a), to_num(b))
        return {ast.Lt: x < y, ast.LtE: x <= y, ast.Gt: x > y, ast.GtE: x >= y}[type(op)]

    def _e_Subscript(self, n: ast.Subscript) -> tuple[ZVal, z3.BoolRef]:
        base, okb = self._eval(n.value)
        idx, oki = self._eval(n.slice)
        i = to_num(idx)
        if isinstance(base, ZPad):
            # Only explicit paddings index as ints ('same'[0] is a character in Python).
            j = z3.If(i < 0, i + 4, i)
            ok = z3.And(okb, oki, base.kind == 0, j >= 0, j < 4)
            return sel(list(base.pads), j), ok
        if not isinstance(base, ZTup):
            raise Unsupported(f"cannot index {_describe(base)}")
        j = z3.If(i < 0, i + base.length, i)
        return sel(list(base.items), j), z3.And(okb, oki, j >= 0, j < base.length)

    def _e_Call(self, n: ast.Call) -> tuple[ZVal, z3.BoolRef]:
        fn = n.func.id if isinstance(n.func, ast.Name) else ""
        args = [self._eval(a) for a in n.args]
        ok = z3.And(*[d for _, d in args]) if args else _true()
        vals = [v for v, _ in args]

        def tensor(k: int) -> z3.ExprRef:
            if k >= len(vals) or not isinstance(vals[k], ZTensor):
                raise Unsupported(f"{fn}() expects a tensor variable")
            return vals[k].term

        if fn == "rank":
            return self.rank(tensor(0)), ok
        if fn == "dim":
            t = tensor(0)
            i, r = to_num(vals[1]), self.rank(t)
            j = z3.If(i < 0, i + r, i)
            return self.dim(t, j), z3.And(ok, j >= 0, j < r)
        if fn == "shape":
            t = tensor(0)
            return ZTup(self.rank(t), tuple(self.dim(t, z3.IntVal(k)) for k in range(MAX_RANK))), ok
        if fn == "size":
            t = tensor(0)
            r = self.rank(t)
            prod: Num = z3.IntVal(1)
            for k in range(MAX_RANK):
                prod = prod * z3.If(k < r, self.dim(t, z3.IntVal(k)), z3.IntVal(1))
            return prod, ok
        if fn == "len":
            if isinstance(vals[0], ZTup):
                return vals[0].length, ok
            if isinstance(vals[0], str):
                return z3.IntVal(len(vals[0])), ok
            raise Unsupported("len() of a non-tuple")
        if fn == "tuple":
            if not isinstance(vals[0], ZTup):
                raise Unsupported("tuple() of a non-tuple")
            return vals[0], ok
        if fn in ("min", "max", "sum"):
            pick = zmin if fn == "min" else zmax
            if len(vals) == 1:
                t = vals[0]
                if not isinstance(t, ZTup):
                    raise Unsupported(f"{fn}() of a non-tuple")
                if fn == "sum":
                    total: Num = z3.IntVal(0)
                    for k in range(len(t.items)):
                        total = total + z3.If(k < t.length, t.item(k), z3.IntVal(0))
                    return total, ok
                acc = t.item(0)
                for k in range(1, len(t.items)):
                    acc = z3.If(k < t.length, pick(acc, t.item(k)), acc)
                return acc, z3.And(ok, t.length >= 1)
            if fn == "sum":
                raise Unsupported("sum() takes one tuple")
            nums = [to_num(v) for v in vals]
            acc = nums[0]
            for x in nums[1:]:
                acc = pick(*_numeric_pair(acc, x))
            return acc, ok
        if fn == "rsqrt":
            # Uninterpreted beyond what defines it: r > 0 and r * r * n == 1 (Python's
            # 1.0 / math.sqrt(n) is its correctly rounded neighbour).
            n = to_num(vals[0])
            n = z3.ToReal(n) if n.is_int() else n
            r = RSQRT(n)
            return r, z3.And(ok, n > 0, r > 0, r * r * n == 1)
        raise Unsupported(f"function {fn}() is not supported in verified conditions")
