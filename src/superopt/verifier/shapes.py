"""The per-op Z3 table: function symbols, attribute canonicalisation and shape theory.

Tensors are one uninterpreted sort. Every op output is an uninterpreted function whose
first arguments are the op's attribute slots (`zvalues.AttrCodec`) and whose last
arguments are tensors; variadic `concat` has one function per arity, multi-output `split`
one per output. Three more functions describe tensors: `wt(t)` (t is a real, well-typed
tensor: rank <= MAX_RANK, every dim >= 1), `rank(t)` and `dim(t, i)`.

Each op's entry (`Z3Op` in the table named "z3") gives, for a call with symbolic
attributes and arguments, the facts that hold whenever the call is well typed: its
arguments are well typed, its typing constraints, its output rank and dims. The prover
turns them into guarded, triggered quantified axioms (`shape_axioms`); the sampler
instantiates them on ground terms to propose shapes. Facts may be weaker than the op's
shape rule (that only loses completeness), never stronger: `check_node` tests them against
the IR's shape rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from superopt.ir.opdef import VARIADIC, all_ops, get_op
from superopt.ir.rules import RuleTable
from superopt.verifier.zvalues import (
    MAX_RANK,
    AttrCodec,
    Num,
    Unsupported,
    ZPad,
    ZTup,
    ZVal,
    codec_for,
    sel,
    zmax,
    zmin,
)

# ---- the Z3 environment -------------------------------------------------------------

FuncKey = tuple[str, int, int]  # (op, number of tensor inputs, output index)


class Z3Env:
    """Sorts and functions of the encoding (one per process; Z3's default context)."""

    def __init__(self) -> None:
        self.T = z3.DeclareSort("Tensor")
        self.wt = z3.Function("wt", self.T, z3.BoolSort())
        self.rank_f = z3.Function("rank", self.T, z3.IntSort())
        self.dim_f = z3.Function("dim", self.T, z3.IntSort(), z3.IntSort())
        self.smooth = z3.Function("smooth", z3.IntSort(), z3.BoolSort())
        self._valuations: dict[int, z3.FuncDeclRef] = {}
        self._funcs: dict[FuncKey, z3.FuncDeclRef] = {}
        self._keys: dict[str, FuncKey] = {}
        self._codecs: dict[str, tuple[AttrCodec, ...]] = {}

    def valuation(self, p: int) -> z3.FuncDeclRef:
        if p not in self._valuations:
            self._valuations[p] = z3.Function(f"v{p}", z3.IntSort(), z3.IntSort())
        return self._valuations[p]

    def rank(self, t: z3.ExprRef) -> Num:
        return self.rank_f(t)

    def dim(self, t: z3.ExprRef, i: Num | int) -> Num:
        return self.dim_f(t, i)

    def codecs(self, op: str) -> tuple[AttrCodec, ...]:
        if op not in self._codecs:
            opdef = get_op(op)
            self._codecs[op] = tuple(codec_for(op, spec) for spec in opdef.attrs)
        return self._codecs[op]

    def func(self, op: str, arity: int, out: int) -> z3.FuncDeclRef:
        key = (op, arity, out)
        f = self._funcs.get(key)
        if f is None:
            TABLE.get(op)  # MissingRule (with the reason) for ops without an encoding
            opdef = get_op(op)
            if opdef.num_inputs != VARIADIC and arity != opdef.num_inputs:
                raise Unsupported(f"{op} takes {opdef.num_inputs} inputs, found {arity}")
            sorts = [s for c in self.codecs(op) for s in c.sorts()]
            name = op
            if opdef.num_inputs == VARIADIC:
                name += f"/{arity}"
            if callable(opdef.num_outputs) or opdef.num_outputs > 1:
                name += f".{out}"
            f = z3.Function(name, *sorts, *([self.T] * arity), self.T)
            self._funcs[key] = f
            self._keys[name] = key
        return f

    def key_of(self, term: z3.ExprRef) -> FuncKey | None:
        """The (op, arity, output) of an op application, None for anything else."""
        if not z3.is_app(term) or term.sort() != self.T:
            return None
        return self._keys.get(term.decl().name())

    def split(self, term: z3.ExprRef) -> tuple[FuncKey, dict[str, ZVal], list[z3.ExprRef],
                                               list[z3.ExprRef]]:
        """An op application's key, attributes (symbolic), slots and tensor arguments."""
        key = self.key_of(term)
        assert key is not None
        args = [term.arg(i) for i in range(term.num_args())]
        codecs = self.codecs(key[0])
        nslots = sum(c.size for c in codecs)
        slots, tensors = args[:nslots], args[nslots:]
        return key, attrs_from_slots(codecs, slots), slots, tensors


def attrs_from_slots(codecs: Sequence[AttrCodec], slots: Sequence[z3.ExprRef]) -> dict[str, ZVal]:
    out: dict[str, ZVal] = {}
    k = 0
    for c in codecs:
        out[c.name] = c.to_val(slots[k:k + c.size])
        k += c.size
    return out


_ENV: Z3Env | None = None


def env() -> Z3Env:
    global _ENV
    if _ENV is None:
        _ENV = Z3Env()
    return _ENV


# ---- the per-op table ---------------------------------------------------------------

@dataclass
class Call:
    """An op application as the shape functions see it."""

    env: Z3Env
    op: str
    a: dict[str, ZVal]
    args: list[z3.ExprRef]
    out: int = 0

    def R(self, j: int = 0) -> Num:
        return self.env.rank(self.args[j])

    def D(self, j: int, i: Num | int) -> Num:
        return self.env.dim(self.args[j], i)


@dataclass
class ShapeInfo:
    """Facts of a well-typed call. `dim(i)` is the output's dim i (0 <= i < rank);
    `dim_ok(i)` a typing constraint per output dim; `arg_dims[j](i)` a constraint on input
    j's dim i; `sampling` extra (non-linear) facts used only to propose shapes."""

    facts: list[z3.BoolRef]
    rank: Num
    dim: Callable[[Num], Num]
    dim_ok: Callable[[Num], z3.BoolRef] | None = None
    arg_dims: dict[int, Callable[[Num], z3.BoolRef]] = field(default_factory=dict)
    sampling: list[z3.BoolRef] = field(default_factory=list)


ShapeFn = Callable[[Call], ShapeInfo]
CanonFn = Callable[[Call], dict[str, ZVal]]


@dataclass(frozen=True)
class Z3Op:
    shape: ShapeFn
    canon: CanonFn | None = None  # rank/shape-dependent attribute normalisation


TABLE: RuleTable[Z3Op] = RuleTable("z3")

for _src in all_ops():
    if _src.named_source:  # TASO's constants are sources too, but op terms with a shape
        TABLE.unsupported(_src.name, "graph sources are a rule's tensor variables, not op terms")


def _reg(ops: Sequence[str], shape: ShapeFn, canon: CanonFn | None = None) -> None:
    for op in ops:
        TABLE.register(op, Z3Op(shape, canon))


def _num(v: ZVal) -> Num:
    if isinstance(v, z3.BoolRef):
        return z3.If(v, z3.IntVal(1), z3.IntVal(0))
    return v


def _tup(v: ZVal) -> ZTup:
    assert isinstance(v, ZTup), v
    return v


def _in_tuple(x: Num, t: ZTup) -> z3.BoolRef:
    return z3.Or(*[z3.And(k < t.length, t.item(k) == x) for k in range(len(t.items))])


def _tuple_sum(t: ZTup) -> Num:
    total: Num = z3.IntVal(0)
    for k in range(len(t.items)):
        total = total + z3.If(k < t.length, t.item(k), z3.IntVal(0))
    return total


def _dims(items: Sequence[Num]) -> Callable[[Num], Num]:
    return lambda i: sel(list(items), i)


def _perm_ok(p: ZTup) -> list[z3.BoolRef]:
    n = len(p.items)
    facts = [z3.Implies(k < p.length, z3.And(p.item(k) >= 0, p.item(k) < p.length))
             for k in range(n)]
    facts += [z3.Implies(m < p.length, p.item(k) != p.item(m))
              for k in range(n) for m in range(k + 1, n)]
    return facts


# ---- same-shape ops -----------------------------------------------------------------

def same_shape(j: int = 0, extra: Callable[[Call], list[z3.BoolRef]] | None = None) -> ShapeFn:
    def fn(c: Call) -> ShapeInfo:
        return ShapeInfo(extra(c) if extra else [], c.R(j), lambda i: c.D(j, i))
    return fn


_reg(("relu", "sigmoid", "tanh", "gelu", "copy"), same_shape())
_reg(("lrn",), same_shape(extra=lambda c: [c.R() == 4, _num(c.a["size"]) >= 1]))
_reg(("smul",), same_shape(extra=lambda c: [c.R(1) == 0]))
_reg(("layout",), same_shape(extra=lambda c: [_tup(c.a["minor_to_major"]).length == c.R(),
                                               *_perm_ok(_tup(c.a["minor_to_major"]))]))


def _axis_canon(name: str = "axis", j: int = 0) -> CanonFn:
    def fn(c: Call) -> dict[str, ZVal]:
        a = dict(c.a)
        ax = _num(a[name])
        a[name] = z3.If(ax < 0, ax + c.R(j), ax)
        return a
    return fn


def _axis_ok(c: Call, name: str = "axis") -> list[z3.BoolRef]:
    ax = _num(c.a[name])
    return [ax >= 0, ax < c.R()]


_reg(("softmax",), same_shape(extra=_axis_ok), _axis_canon())


def _layer_norm(c: Call) -> ShapeInfo:
    ax = _num(c.a["axis"])
    facts = [*_axis_ok(c), c.R(1) == c.R() - ax, c.R(2) == c.R() - ax]
    return ShapeInfo(facts, c.R(), lambda i: c.D(0, i),
                     arg_dims={1: lambda i: c.D(1, i) == c.D(0, i + ax),
                               2: lambda i: c.D(2, i) == c.D(0, i + ax)})


_reg(("layer_norm",), _layer_norm, _axis_canon())


def _batch_norm(c: Call) -> ShapeInfo:
    facts = [c.R() >= 2]
    for j in range(1, 5):
        facts += [c.R(j) == 1, c.D(j, 0) == c.D(0, 1)]
    return ShapeInfo(facts, c.R(), lambda i: c.D(0, i))


_reg(("batch_norm",), _batch_norm)


# ---- broadcasting element-wise ops ---------------------------------------------------

def _broadcast(c: Call, j0: int, j1: int, skip: int) -> tuple[Num, Callable[[Num], tuple[Num, z3.BoolRef]]]:
    """numpy broadcasting of the leading dims of inputs j0, j1 (all but the last `skip`)."""
    rx, ry = c.R(j0) - skip, c.R(j1) - skip
    r = zmax(rx, ry)

    def at(i: Num) -> tuple[Num, z3.BoolRef]:
        ix, iy = i - (r - rx), i - (r - ry)
        dx = z3.If(ix >= 0, c.D(j0, ix), z3.IntVal(1))
        dy = z3.If(iy >= 0, c.D(j1, iy), z3.IntVal(1))
        return z3.If(dx == 1, dy, dx), z3.Or(dx == dy, dx == 1, dy == 1)

    return r, at


def _elementwise(c: Call) -> ShapeInfo:
    r, at = _broadcast(c, 0, 1, 0)
    return ShapeInfo([], r, lambda i: at(i)[0], dim_ok=lambda i: at(i)[1])


_reg(("ewadd", "ewmul"), _elementwise)


def _matmul(c: Call) -> ShapeInfo:
    rx, ry = c.R(0), c.R(1)
    rb, at = _broadcast(c, 0, 1, 2)
    r = rb + 2
    facts = [rx >= 2, ry >= 2, c.D(0, rx - 1) == c.D(1, ry - 2)]

    def dim(i: Num) -> Num:
        return z3.If(i == r - 1, c.D(1, ry - 1), z3.If(i == r - 2, c.D(0, rx - 2), at(i)[0]))

    return ShapeInfo(facts, r, dim, dim_ok=lambda i: z3.Or(i >= r - 2, at(i)[1]))


_reg(("matmul",), _matmul)


def _linear(c: Call) -> ShapeInfo:
    rx = c.R(0)
    facts = [rx >= 2, c.R(1) == 2, c.R(2) == 1, c.D(0, rx - 1) == c.D(1, 1),
             c.D(2, 0) == c.D(1, 0)]
    return ShapeInfo(facts, rx, lambda i: z3.If(i == rx - 1, c.D(1, 0), c.D(0, i)))


_reg(("linear",), _linear)


# ---- convolution and pooling --------------------------------------------------------

def out_size(size: Num, k: Num, s: Num, d: Num, pad: ZPad, lo: int) -> Num:
    """Output size of a window op along one axis (`lo`: index of the low pad in t,b,l,r)."""
    eff = (k - 1) * d + 1
    explicit = (size + pad.pads[lo] + pad.pads[lo + 1] - eff) / s + 1
    return z3.If(pad.kind == 1, (size + s - 1) / s, explicit)


def _conv(c: Call) -> ShapeInfo:
    g = _num(c.a["groups"])
    s, d, pad = _tup(c.a["stride"]), _tup(c.a["dilation"]), c.a["padding"]
    assert isinstance(pad, ZPad)
    facts = [c.R(0) == 4, c.R(1) == 4, g >= 1, c.D(0, 1) == c.D(1, 1) * g, c.D(1, 0) % g == 0]
    oh = out_size(c.D(0, 2), c.D(1, 2), s.item(0), d.item(0), pad, 0)
    ow = out_size(c.D(0, 3), c.D(1, 3), s.item(1), d.item(1), pad, 2)
    return ShapeInfo(facts, z3.IntVal(4), _dims([c.D(0, 0), c.D(1, 0), oh, ow]))


_reg(("conv2d",), _conv)


def _pool(c: Call) -> ShapeInfo:
    k, s, pad = _tup(c.a["kernel"]), _tup(c.a["stride"]), c.a["padding"]
    assert isinstance(pad, ZPad)
    one = z3.IntVal(1)
    oh = out_size(c.D(0, 2), k.item(0), s.item(0), one, pad, 0)
    ow = out_size(c.D(0, 3), k.item(1), s.item(1), one, pad, 2)
    return ShapeInfo([c.R() == 4], z3.IntVal(4), _dims([c.D(0, 0), c.D(0, 1), oh, ow]))


_reg(("pool2d_avg", "pool2d_max"), _pool)


def _enlarge(c: Call) -> ShapeInfo:
    kh, kw = _num(c.a["kh"]), _num(c.a["kw"])
    facts = [c.R() == 4, c.D(0, 2) <= kh, c.D(0, 3) <= kw, (kh - c.D(0, 2)) % 2 == 0,
             (kw - c.D(0, 3)) % 2 == 0]
    return ShapeInfo(facts, z3.IntVal(4), _dims([c.D(0, 0), c.D(0, 1), kh, kw]))


_reg(("enlarge",), _enlarge)


# ---- movement ops -------------------------------------------------------------------

def _transpose(c: Call) -> ShapeInfo:
    p = _tup(c.a["perm"])
    facts = [p.length == c.R(), *_perm_ok(p)]
    return ShapeInfo(facts, c.R(), lambda i: c.D(0, sel(list(p.items), i)))


def _transpose_canon(c: Call) -> dict[str, ZVal]:
    p = _tup(c.a["perm"])
    r = c.R()
    empty = p.length == 0
    items = tuple(z3.If(empty, z3.If(k < r, r - 1 - k, z3.IntVal(0)), p.item(k))
                  for k in range(len(p.items)))
    return {**c.a, "perm": ZTup(z3.If(empty, r, p.length), items)}


_reg(("transpose",), _transpose, _transpose_canon)


def _size_of(c: Call, j: int = 0) -> Num:
    prod: Num = z3.IntVal(1)
    for k in range(MAX_RANK):
        prod = prod * z3.If(k < c.R(j), c.D(j, k), z3.IntVal(1))
    return prod


SMOOTH_PRIMES = (2, 3, 5, 7)
SMOOTH_TABLE = 128


def _valuation(n: int, p: int) -> int:
    k = 0
    while n % p == 0:
        n //= p
        k += 1
    return k


_SMOOTH: list[z3.BoolRef] = []


def smooth_tables(e: Z3Env) -> list[z3.BoolRef]:
    """Ground tables of the prime valuations used by reshape's sampling facts."""
    if not _SMOOTH:
        _SMOOTH.extend(_smooth_tables(e))
    return _SMOOTH


def _smooth_tables(e: Z3Env) -> list[z3.BoolRef]:
    facts = []
    for n in range(1, SMOOTH_TABLE + 1):
        rest = n
        for p in SMOOTH_PRIMES:
            v = _valuation(n, p)
            rest //= p ** v
            facts.append(e.valuation(p)(n) == v)
        facts.append(e.smooth(n) == (rest == 1))
    return facts


def _same_size(c: Call, items: Sequence[Num], length: Num) -> list[z3.BoolRef]:
    """size(input) == product(items), linearised over 7-smooth numbers: equal sums of
    prime valuations (only for proposing shapes; the IR checks the real sizes)."""
    e = c.env
    dims = [(k < c.R(), c.D(0, k)) for k in range(MAX_RANK)]
    outs = [(k < length, items[k]) for k in range(len(items))]
    facts = [z3.Implies(live, e.smooth(d)) for live, d in (*dims, *outs)]
    for p in SMOOTH_PRIMES:
        v = e.valuation(p)
        facts.append(z3.Sum([z3.If(live, v(d), 0) for live, d in dims])
                     == z3.Sum([z3.If(live, v(d), 0) for live, d in outs]))
    return facts


def _reshape(c: Call) -> ShapeInfo:
    s = _tup(c.a["shape"])
    facts = [z3.Implies(k < s.length, s.item(k) >= 0) for k in range(len(s.items))]
    return ShapeInfo(facts, s.length, _dims(s.items), sampling=_same_size(c, s.items, s.length))


def _reshape_canon(c: Call) -> dict[str, ZVal]:
    s = _tup(c.a["shape"])
    if all(z3.is_int_value(z3.simplify(x)) and z3.simplify(x).as_long() >= 0 for x in s.items):
        return c.a
    known: Num = z3.IntVal(1)
    for k in range(len(s.items)):
        known = known * z3.If(z3.And(k < s.length, s.item(k) != -1), s.item(k), z3.IntVal(1))
    inferred = _size_of(c) / known
    items = tuple(z3.If(s.item(k) == -1, inferred, s.item(k)) for k in range(len(s.items)))
    return {**c.a, "shape": ZTup(s.length, items)}


_reg(("reshape",), _reshape, _reshape_canon)


def _concat(c: Call) -> ShapeInfo:
    ax = _num(c.a["axis"])
    n = len(c.args)
    facts = [*_axis_ok(c), *[c.R(j) == c.R(0) for j in range(1, n)]]
    total: Num = c.D(0, ax)
    for j in range(1, n):
        total = total + c.D(j, ax)

    def arg(j: int) -> Callable[[Num], z3.BoolRef]:
        return lambda i: z3.Implies(i != ax, z3.And(*[c.D(m, i) == c.D(j, i)
                                                      for m in range(n) if m != j]))

    return ShapeInfo(facts, c.R(), lambda i: z3.If(i == ax, total, c.D(0, i)),
                     arg_dims={j: arg(j) for j in range(n)} if n > 1 else {})


_reg(("concat",), _concat, _axis_canon())


def _split(c: Call) -> ShapeInfo:
    ax, sizes = _num(c.a["axis"]), _tup(c.a["sizes"])
    # Every output of the split is a value of the graph, so none is empty in the domain.
    facts = [*_axis_ok(c), c.out < sizes.length, _tuple_sum(sizes) == c.D(0, ax),
             *[z3.Implies(k < sizes.length, sizes.item(k) >= 1) for k in range(len(sizes.items))]]
    mine = sizes.item(c.out)
    return ShapeInfo(facts, c.R(), lambda i: z3.If(i == ax, mine, c.D(0, i)))


_reg(("split",), _split, _axis_canon())


def _topk(c: Call) -> ShapeInfo:
    ax, k = _num(c.a["axis"]), _num(c.a["k"])
    facts = [*_axis_ok(c), c.out < 2, k >= 1, k <= c.D(0, ax)]
    return ShapeInfo(facts, c.R(), lambda i: z3.If(i == ax, k, c.D(0, i)))


_reg(("topk",), _topk, _axis_canon())


def _slice(c: Call) -> ShapeInfo:
    st, en, sp = _tup(c.a["starts"]), _tup(c.a["ends"]), _tup(c.a["steps"])
    r = c.R()
    facts = [st.length == r, en.length == r, sp.length == r]
    for k in range(len(st.items)):
        facts.append(z3.Implies(k < r, z3.And(sp.item(k) >= 1, st.item(k) >= 0,
                                            st.item(k) <= en.item(k), en.item(k) <= c.D(0, k))))

    def dim(i: Num) -> Num:
        lo, hi, step = sel(list(st.items), i), sel(list(en.items), i), sel(list(sp.items), i)
        return (hi - lo + step - 1) / step

    return ShapeInfo(facts, r, dim)


def _slice_canon(c: Call) -> dict[str, ZVal]:
    """Python's slice(start, stop, step).indices(dim), as the op's canonicalisation does."""
    st, en, sp = _tup(c.a["starts"]), _tup(c.a["ends"]), _tup(c.a["steps"])
    r = c.R()
    n = len(st.items)
    steps_empty = sp.length == 0
    steps = tuple(z3.If(steps_empty, z3.If(k < r, z3.IntVal(1), z3.IntVal(0)), sp.item(k))
                  for k in range(n))
    starts, ends = [], []
    for k in range(n):
        d = c.D(0, k)

        def clamp(v: Num, d: Num = d) -> Num:
            return z3.If(v < 0, zmax(v + d, z3.IntVal(0)), zmin(v, d))

        lo, hi = clamp(st.item(k)), clamp(en.item(k))
        live = k < st.length
        starts.append(z3.If(live, lo, z3.IntVal(0)))
        ends.append(z3.If(live, zmax(hi, lo), z3.IntVal(0)))
    return {**c.a, "starts": ZTup(st.length, tuple(starts)), "ends": ZTup(en.length, tuple(ends)),
            "steps": ZTup(z3.If(steps_empty, r, sp.length), steps)}


_reg(("slice",), _slice, _slice_canon)


def _pad(c: Call) -> ShapeInfo:
    p = _tup(c.a["pads"])
    r = c.R()
    facts = [p.length == 2 * r,
             *[z3.Implies(k < p.length, p.item(k) >= 0) for k in range(len(p.items))]]
    items = list(p.items)
    return ShapeInfo(facts, r, lambda i: c.D(0, i) + sel(items, i) + sel(items, r + i))


_reg(("pad",), _pad)


# ---- reductions ---------------------------------------------------------------------

def _reduce(c: Call) -> ShapeInfo:
    axes, keep = _tup(c.a["axes"]), _num(c.a["keepdims"])
    r = c.R()
    n = len(axes.items)
    facts = [z3.Implies(k < axes.length, z3.And(axes.item(k) >= 0, axes.item(k) < r))
             for k in range(n)]
    facts += [z3.Implies(k + 1 < axes.length, axes.item(k) < axes.item(k + 1))
              for k in range(n - 1)]
    facts.append(z3.Or(axes.length >= 1, r == 0))  # canonical: () means every axis

    def dropped(i: Num) -> Num:
        # Output dim i of a reduction without keepdims is input dim j, j skipping the
        # (sorted) reduced axes.
        j = i
        for k in range(n):
            j = z3.If(z3.And(k < axes.length, axes.item(k) <= j), j + 1, j)
        return c.D(0, j)

    def dim(i: Num) -> Num:
        return z3.If(keep == 1, z3.If(_in_tuple(i, axes), z3.IntVal(1), c.D(0, i)), dropped(i))

    return ShapeInfo(facts, z3.If(keep == 1, r, r - axes.length), dim)


def _reduce_canon(c: Call) -> dict[str, ZVal]:
    axes = _tup(c.a["axes"])
    vals = [z3.simplify(x) for x in (axes.length, *axes.items)]
    if not all(z3.is_int_value(v) for v in vals):
        return c.a  # an attribute variable: bound by matching to a canonical value
    n, items = vals[0].as_long(), [v.as_long() for v in vals[1:1 + vals[0].as_long()]]
    if n == 0:
        r = c.R()
        return {**c.a, "axes": ZTup(r, tuple(z3.If(k < r, z3.IntVal(k), z3.IntVal(0))
                                              for k in range(len(axes.items))))}
    if min(items) < 0:
        raise Unsupported(f"reduce axes {tuple(items)} with negative entries need a known rank; "
                          "write them as non-negative axes")
    canon = sorted(set(items))
    return {**c.a, "axes": ZTup(z3.IntVal(len(canon)), tuple(
        z3.IntVal(canon[k] if k < len(canon) else 0) for k in range(len(axes.items))))}


_reg(("reduce_sum", "reduce_mean"), _reduce, _reduce_canon)


def _embedding(c: Call) -> ShapeInfo:
    ri = c.R(0)
    return ShapeInfo([c.R(1) == 2], ri + 1,
                     lambda i: z3.If(i < ri, c.D(0, i), c.D(1, 1)))


_reg(("embedding",), _embedding)


# ---- constants ----------------------------------------------------------------------

def _const_pool(c: Call) -> ShapeInfo:
    ch, kh, kw = (_num(c.a[k]) for k in ("channels", "kh", "kw"))
    return ShapeInfo([ch >= 1, kh >= 1, kw >= 1], z3.IntVal(4), _dims([ch, z3.IntVal(1), kh, kw]))


def _const_iconv(c: Call) -> ShapeInfo:
    ch, kh, kw, g = (_num(c.a[k]) for k in ("channels", "kh", "kw", "groups"))
    facts = [ch >= 1, kh >= 1, kw >= 1, g >= 1, ch % g == 0, kh % 2 == 1, kw % 2 == 1]
    return ShapeInfo(facts, z3.IntVal(4), _dims([ch, ch / g, kh, kw]))


def _const_imm(c: Call) -> ShapeInfo:
    n = _num(c.a["n"])
    return ShapeInfo([n >= 1], z3.IntVal(2), _dims([n, n]))


def _const_one(c: Call) -> ShapeInfo:
    s = _tup(c.a["shape"])
    return ShapeInfo([], s.length, _dims(s.items))


_reg(("const_pool",), _const_pool)
_reg(("const_iconv",), _const_iconv)
_reg(("const_imm",), _const_imm)
_reg(("const_one",), _const_one)


# ---- the transformer-era ops (issue 44) ----------------------------------------------

_reg(("neg", "exp", "log", "sqrt", "rsqrt", "recip", "erf", "silu", "sin", "cos", "acos", "pow",
      "cast"), same_shape())
_reg(("sub", "div", "maximum", "minimum", "eq", "lt", "gt"), _elementwise)


def _where(c: Call) -> ShapeInfo:
    """numpy broadcasting of all three inputs: (cond, a) first, then with b."""
    r01, at01 = _broadcast(c, 0, 1, 0)
    r2 = c.R(2)
    r = zmax(r01, r2)

    def at(i: Num) -> tuple[Num, z3.BoolRef]:
        i01, i2 = i - (r - r01), i - (r - r2)
        d01, ok01 = at01(i01)
        dx = z3.If(i01 >= 0, d01, z3.IntVal(1))
        dy = z3.If(i2 >= 0, c.D(2, i2), z3.IntVal(1))
        ok = z3.And(z3.Implies(i01 >= 0, ok01), z3.Or(dx == dy, dx == 1, dy == 1))
        return z3.If(dx == 1, dy, dx), ok

    return ShapeInfo([], r, lambda i: at(i)[0], dim_ok=lambda i: at(i)[1])


_reg(("where",), _where)


def _gather(c: Call) -> ShapeInfo:
    ax, rx, ri = _num(c.a["axis"]), c.R(0), c.R(1)
    facts = [rx >= 1, ax >= 0, ax < rx, rx - 1 + ri <= MAX_RANK]

    def dim(i: Num) -> Num:
        return z3.If(i < ax, c.D(0, i), z3.If(i < ax + ri, c.D(1, i - ax), c.D(0, i - ri + 1)))

    return ShapeInfo(facts, rx - 1 + ri, dim)


_reg(("gather",), _gather, _axis_canon())


def _expand(c: Call) -> ShapeInfo:
    s, rx = _tup(c.a["shape"]), c.R()
    facts = [s.length >= rx, *[z3.Implies(k < s.length, s.item(k) >= 1)
                               for k in range(len(s.items))]]
    # Input dim i sits under output dim i + (len - rank): size 1 or that size.
    return ShapeInfo(facts, s.length, _dims(s.items), arg_dims={
        0: lambda i: z3.Or(c.D(0, i) == 1, c.D(0, i) == sel(list(s.items), i + s.length - rx))})


_reg(("expand",), _expand)


def _iota(c: Call) -> ShapeInfo:
    # The IR stores iota's axis as given (-1 and len - 1 are both valid).
    s, ax = _tup(c.a["shape"]), _num(c.a["axis"])
    facts = [ax >= -s.length, ax < s.length, *[z3.Implies(k < s.length, s.item(k) >= 1)
                                               for k in range(len(s.items))]]
    return ShapeInfo(facts, s.length, _dims(s.items))


_reg(("iota",), _iota)


def _tri_mask(c: Call) -> ShapeInfo:
    rows, cols = _num(c.a["rows"]), _num(c.a["cols"])
    return ShapeInfo([rows >= 1, cols >= 1], z3.IntVal(2), _dims([rows, cols]))


_reg(("tri_mask",), _tri_mask)
_reg(("reduce_max",), _reduce, _reduce_canon)


def _argmax(c: Call) -> ShapeInfo:
    info = _reduce(c)
    # One searched axis of a non-scalar (the IR's attribute check and shape rule).
    info.facts.extend([_tup(c.a["axes"]).length == 1, c.R() >= 1])
    return info


_reg(("argmax",), _argmax, _reduce_canon)


def _rms_norm(c: Call) -> ShapeInfo:
    ax = _num(c.a["axis"])
    return ShapeInfo([*_axis_ok(c), c.R(1) == c.R() - ax], c.R(), lambda i: c.D(0, i),
                     arg_dims={1: lambda i: c.D(1, i) == c.D(0, i + ax)})


_reg(("rms_norm",), _rms_norm, _axis_canon())


def _attention(c: Call) -> ShapeInfo:
    """q (..., H, Lq, D), k (..., Hkv, Lk, D), v (..., Hkv, Lk, Dv) -> (..., H, Lq, Dv);
    k's and v's batch dims broadcast into q's (which are the output's)."""
    rq, rk, rv = c.R(0), c.R(1), c.R(2)
    h, hkv = c.D(0, rq - 3), c.D(1, rk - 3)
    facts = [rq >= 3, rk >= 3, rv >= 3, rk <= rq, rv <= rq, c.D(1, rk - 1) == c.D(0, rq - 1),
             c.D(2, rv - 2) == c.D(1, rk - 2), c.D(2, rv - 3) == hkv, h % hkv == 0]

    def dim(i: Num) -> Num:
        return z3.If(i == rq - 1, c.D(2, rv - 1), c.D(0, i))

    def batch(j: int, r: Num) -> Callable[[Num], z3.BoolRef]:
        # Batch dim i of input j (i < rank - 3) sits under q's dim i + rank(q) - rank.
        return lambda i: z3.Or(i >= r - 3, c.D(j, i) == 1, c.D(j, i) == c.D(0, i + rq - r))

    return ShapeInfo(facts, rq, dim, arg_dims={1: batch(1, rk), 2: batch(2, rv)})


def _attention_canon(c: Call) -> dict[str, ZVal]:
    s = z3.simplify(_num(c.a["scale"]))
    if z3.is_rational_value(s) and s.as_fraction() == 0:
        raise Unsupported("attention scale 0 (1/sqrt(head dim)) is resolved when a graph is "
                          "built; write the scale explicitly")
    return c.a


_reg(("attention",), _attention, _attention_canon)


# ---- building terms and shape facts -------------------------------------------------

def make_call(e: Z3Env, op: str, attrs: dict[str, ZVal], args: Sequence[z3.ExprRef], out: int = 0,
              canonical: bool = False) -> z3.ExprRef:
    """The term of `op` applied to `args`; canonicalises attributes unless `canonical`."""
    entry = TABLE.get(op)
    if entry.canon is not None and not canonical:
        attrs = entry.canon(Call(e, op, dict(attrs), list(args), out))
    slots: list[z3.ExprRef] = []
    for codec in e.codecs(op):
        slots += [z3.simplify(x) for x in codec.slots(attrs[codec.name])]
    return e.func(op, len(args), out)(*slots, *args)


def shape_info(e: Z3Env, term: z3.ExprRef) -> tuple[ShapeInfo, list[z3.BoolRef], list[z3.ExprRef]]:
    """Shape facts of an op term, the validity of its attribute slots and its tensor args."""
    key, attrs, slots, tensors = e.split(term)
    call = Call(e, key[0], attrs, tensors, key[2])
    info = TABLE.get(key[0]).shape(call)
    domain: list[z3.BoolRef] = []
    k = 0
    for codec in e.codecs(key[0]):
        domain += codec.domain(slots[k:k + codec.size])
        k += codec.size
    return info, domain, tensors


def head_facts(e: Z3Env, term: z3.ExprRef) -> z3.BoolRef:
    """wt(term) implies: args well typed, attributes valid, typing facts, output rank."""
    info, domain, tensors = shape_info(e, term)
    return z3.Implies(e.wt(term), z3.And(*[e.wt(t) for t in tensors], *domain, *info.facts,
                                         e.rank(term) == info.rank))


def dim_fact(e: Z3Env, term: z3.ExprRef, i: Num) -> z3.BoolRef:
    info, _, _ = shape_info(e, term)
    body = e.dim(term, i) == info.dim(i)
    if info.dim_ok is not None:
        body = z3.And(body, info.dim_ok(i))
    return z3.Implies(z3.And(e.wt(term), i >= 0, i < e.rank(term)), body)


def arg_dim_facts(e: Z3Env, term: z3.ExprRef, i: Num) -> list[tuple[int, z3.BoolRef]]:
    info, _, tensors = shape_info(e, term)
    return [(j, z3.Implies(z3.And(e.wt(term), i >= 0, i < e.rank(tensors[j])), f(i)))
            for j, f in info.arg_dims.items()]


def general_axioms(e: Z3Env) -> list[z3.BoolRef]:
    """Every well-typed tensor has rank 0..MAX_RANK and dims >= 1 (the verifier's domain)."""
    t = z3.Const("t", e.T)
    i = z3.Int("i")
    return [
        z3.ForAll([t], z3.Implies(e.wt(t), z3.And(e.rank(t) >= 0, e.rank(t) <= MAX_RANK)),
                  patterns=[e.rank(t)]),
        z3.ForAll([t, i], z3.Implies(z3.And(e.wt(t), i >= 0, i < e.rank(t)), e.dim(t, i) >= 1),
                  patterns=[e.dim(t, i)]),
    ]


def bound_call(e: Z3Env, key: FuncKey) -> tuple[z3.ExprRef, list[z3.ExprRef]]:
    """A call of the function `key` on fresh bound variables, and those variables."""
    op, arity, out = key
    slots: list[z3.ExprRef] = []
    for codec in e.codecs(op):
        _, consts = codec.fresh(f"{op}:{codec.name}")
        slots += consts
    tensors = [z3.Const(f"{op}:x{j}", e.T) for j in range(arity)]
    return e.func(op, arity, out)(*slots, *tensors), [*slots, *tensors]


_SHAPE_AXIOMS: dict[FuncKey, list[z3.BoolRef]] = {}


def shape_axioms(e: Z3Env, key: FuncKey) -> list[z3.BoolRef]:
    """Quantified shape theory of one function symbol, each with an explicit trigger."""
    if key not in _SHAPE_AXIOMS:
        _SHAPE_AXIOMS[key] = _shape_axioms(e, key)
    return _SHAPE_AXIOMS[key]


def _shape_axioms(e: Z3Env, key: FuncKey) -> list[z3.BoolRef]:
    term, bound = bound_call(e, key)
    i = z3.Int("i")
    out = [z3.ForAll(bound, head_facts(e, term), patterns=[term]),
           z3.ForAll([*bound, i], dim_fact(e, term, i), patterns=[e.dim(term, i)])]
    _, _, tensors = shape_info(e, term)
    for j, fact in arg_dim_facts(e, term, i):
        out.append(z3.ForAll([*bound, i], fact,
                             patterns=[z3.MultiPattern(term, e.dim(tensors[j], i))]))
    return out


_GROUND: dict[tuple[int, bool, bool], list[tuple[z3.ExprRef, list[z3.BoolRef]]]] = {}


def _memo(kind: bool, term: z3.ExprRef, sampling: bool,
          build: Callable[[], list[z3.BoolRef]]) -> list[z3.BoolRef]:
    """Ground facts are pure functions of the term; samplers of many rules share terms
    (their variables have the same names), so building them once saves most of the time."""
    key = (term.hash(), kind, sampling)
    for t, facts in _GROUND.get(key, ()):
        if t.eq(term):
            return facts
    if len(_GROUND) > 50_000:
        _GROUND.clear()
    facts = build()
    _GROUND.setdefault(key, []).append((term, facts))
    return facts


def ground_facts(e: Z3Env, term: z3.ExprRef, sampling: bool = False) -> list[z3.BoolRef]:
    """The shape theory instantiated on one ground term for every dim index."""
    return _memo(True, term, sampling, lambda: _from_template(e, term, sampling))


def _holes(e: Z3Env, n: int) -> list[z3.ExprRef]:
    return [z3.Const(f"hole!{j}", e.T) for j in range(n)]


def _from_template(e: Z3Env, term: z3.ExprRef, sampling: bool) -> list[z3.BoolRef]:
    """`_ground_facts(term)`, made by substituting the term's tensor arguments into the
    facts of the same op and attributes applied to placeholders. An op's shape rule reads
    its tensor arguments only through wt, rank and dim, so the facts are the same terms
    (tests/verifier/test_shape_templates.py checks it); convs over different inputs then
    share one build, which is most of checking a rule's premise."""
    key = e.key_of(term)
    if key is None:
        return _ground_facts(e, term, sampling)
    _, _, slots, tensors = e.split(term)
    holes = _holes(e, len(tensors))
    if all(t.eq(h) for t, h in zip(tensors, holes, strict=True)):
        return _ground_facts(e, term, sampling)
    template = term.decl()(*slots, *holes)
    facts = _memo(True, template, sampling, lambda: _ground_facts(e, template, sampling))
    pairs = list(zip(holes, tensors, strict=True))
    return [z3.substitute(f, *pairs) for f in facts]


def _ground_facts(e: Z3Env, term: z3.ExprRef, sampling: bool) -> list[z3.BoolRef]:
    info, domain, tensors = shape_info(e, term)
    w = e.wt(term)
    facts = [z3.Implies(w, z3.And(*[e.wt(t) for t in tensors], *domain, *info.facts,
                                  e.rank(term) == info.rank))]
    for k in range(MAX_RANK):
        i = z3.IntVal(k)
        body = e.dim(term, i) == info.dim(i)
        if info.dim_ok is not None:
            body = z3.And(body, info.dim_ok(i))
        facts.append(z3.Implies(z3.And(w, k < e.rank(term)), body))
        facts += [z3.Implies(z3.And(w, k < e.rank(tensors[j])), f(i))
                  for j, f in info.arg_dims.items()]
    if sampling and info.sampling:
        facts.append(z3.Implies(w, z3.And(*info.sampling)))
    return facts


def general_ground(e: Z3Env, term: z3.ExprRef) -> list[z3.BoolRef]:
    def build() -> list[z3.BoolRef]:
        # The same facts for every term: made once on a placeholder and substituted.
        (hole,) = _holes(e, 1)
        if term.eq(hole):
            return _general_ground(e, hole)
        return [z3.substitute(f, (hole, term)) for f in general_ground(e, hole)]

    return _memo(False, term, False, build)


def _general_ground(e: Z3Env, term: z3.ExprRef) -> list[z3.BoolRef]:
    r = e.rank(term)
    facts = [z3.Implies(e.wt(term), z3.And(r >= 0, r <= MAX_RANK))]
    facts += [z3.Implies(z3.And(e.wt(term), k < r), e.dim(term, k) >= 1) for k in range(MAX_RANK)]
    return facts


def subterms(e: Z3Env, terms: Sequence[z3.ExprRef]) -> list[z3.ExprRef]:
    """Every tensor-sorted subterm (op applications and variables), each once."""
    seen: dict[int, z3.ExprRef] = {}
    stack = list(terms)
    while stack:
        t = stack.pop()
        if t.get_id() in seen:
            continue
        seen[t.get_id()] = t
        if e.key_of(t) is not None:
            stack.extend(e.split(t)[3])
    return list(seen.values())


# ---- checking the shape theory against the IR ---------------------------------------

def check_call(op: str, attrs: dict[str, Any], in_shapes: Sequence[tuple[int, ...]],
               out_shapes: Sequence[tuple[int, ...]], out: int | None = None) -> str | None:
    """Does the shape theory agree with one concrete, well-typed application of `op`?

    Returns None when it does, else a description of the disagreement. The facts must be
    satisfiable together with the real output shapes (soundness) and must imply them
    (completeness of the output shape; the prover relies on it for split sizes etc.).
    """
    e = env()
    xs = [z3.Const(f"chk:{op}:{j}", e.T) for j in range(len(in_shapes))]
    vals: dict[str, ZVal] = {}
    for codec in e.codecs(op):
        vals[codec.name] = codec.to_val(codec.encode(attrs[codec.name]))
    outs = range(len(out_shapes)) if out is None else [out]
    s = z3.Solver()
    s.set("timeout", 10000)
    for x, shp in zip(xs, in_shapes, strict=True):
        s.add(e.wt(x), e.rank(x) == len(shp), *[e.dim(x, k) == d for k, d in enumerate(shp)])
    expected = []
    for o in outs:
        term = make_call(e, op, vals, xs, o, canonical=True)
        s.add(e.wt(term), *ground_facts(e, term), *general_ground(e, term))
        shp = out_shapes[o]
        expected.append(z3.And(e.rank(term) == len(shp),
                               *[e.dim(term, k) == d for k, d in enumerate(shp)]))
    s.push()
    s.add(*expected)
    if s.check() != z3.sat:
        return f"{op}{attrs}: shape facts contradict the real shapes {list(in_shapes)} -> " \
               f"{list(out_shapes)}"
    s.pop()
    s.add(z3.Not(z3.And(*expected)))
    if s.check() != z3.unsat:
        return f"{op}{attrs}: shape facts do not determine the output shape {list(out_shapes)} " \
               f"of inputs {list(in_shapes)}"
    return None


def check_graph(graph: Any) -> list[str]:
    """Check the shape theory on every op node of a graph (see `check_call`). Nodes with
    an empty input or output are outside the verifier's domain and are skipped."""
    problems = []
    for n in graph.nodes:
        if n.is_named_source:
            continue
        ins = [graph.type_of(v).shape for v in n.inputs]
        if any(0 in s for s in (*ins, *(t.shape for t in n.types))) or any(
                len(s) > MAX_RANK for s in (*ins, *(t.shape for t in n.types))):
            continue
        problem = check_call(n.op, n.a, ins, [t.shape for t in n.types])
        if problem:
            problems.append(problem)
    return problems


def ops_table_status() -> dict[str, str]:
    """op -> 'encoded' or the reason it is unsupported (for reports)."""
    from superopt.ir.opdef import OPS

    out = {}
    for name in sorted(OPS):
        if TABLE.supports(name):
            out[name] = "encoded"
        else:
            try:
                TABLE.get(name)
            except Exception as err:  # MissingRule carries the reason
                out[name] = str(err)
    return out

