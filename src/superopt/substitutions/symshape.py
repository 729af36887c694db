"""Rule sides as small graphs, and the symbolic shapes that turn them into general rules.

A rule found at concrete shapes (or read from TASO/Tensat files, which have no shapes)
still needs attributes that depend on shapes: a conv's `groups`, a split's `sizes`, the
channel count of a constant kernel. Writing the concrete numbers would make a rule wrong at
other shapes, so every tensor dimension of both sides becomes a symbol, the ops' typing
rules and the pairing of outputs unify them (union-find), and each shape-dependent
attribute is written as an expression over the variables, e.g. `{dim(?x1,1)}` or
`{[dim(?w1,1), dim(?w2,1)]}`. Equalities that the target needs but the source's own
typing does not imply become the rule's condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.opdef import ELEMENTWISE, LAYOUT, REDUCTION, get_op
from superopt.substitutions.pattern import AConst, AExpr, AttrPat, Pattern, PNode, PVar, eval_expr
from superopt.substitutions.rule import Rule

Ref = tuple[str, int, int]  # ("var", index, 0) or ("node", index, output)

# Attributes computed from shapes, per op (the rest are written as given).
SHAPE_ATTRS = {
    "conv2d": ("groups",), "split": ("sizes",), "const_pool": ("channels",),
    "const_iconv": ("channels",), "const_imm": ("n",), "const_one": ("shape",),
}


class SymShapeError(IRError):
    """Shapes of a rule that cannot be made consistent."""


@dataclass(frozen=True)
class SNode:
    op: str
    attrs: tuple[tuple[str, Any], ...]  # attributes known as constants
    inputs: tuple[Ref, ...]
    infer: tuple[str, ...] = ()  # attributes to compute from shapes
    # The output rank where the file states it (TASO's concat carries PM_NUMDIM): a rule
    # whose ops alone do not fix its inputs' ranks is typed by what its writer said.
    rank: int | None = None

    def attr(self, name: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == name:
                return v
        return default


@dataclass(frozen=True)
class Side:
    nodes: tuple[SNode, ...]
    outputs: tuple[Ref, ...]


# ---- union-find over dimension symbols ----------------------------------------------

@dataclass
class _UF:
    parent: list[int] = field(default_factory=list)
    ints: dict[int, int] = field(default_factory=dict)  # element -> known value
    vardims: dict[int, tuple[int, int]] = field(default_factory=dict)  # element -> (var, axis)
    sums: dict[int, tuple[int, int]] = field(default_factory=dict)  # element = a + b
    conflict: str | None = None

    def new(self, value: int | None = None) -> int:
        e = len(self.parent)
        self.parent.append(e)
        if value is not None:
            self.ints[e] = value
        return e

    def find(self, e: int) -> int:
        while self.parent[e] != e:
            self.parent[e] = self.parent[self.parent[e]]
            e = self.parent[e]
        return e

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra

    def classes(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for e in range(len(self.parent)):
            out.setdefault(self.find(e), []).append(e)
        return out


Dims = list[int]


class _Solver:
    """Symbolic dims for every tensor of both sides; `derived` holds, per (side, node,
    attribute), the elements that attribute is made of."""

    def __init__(self, sides: Sequence[Side], var_ranks: Sequence[int | None],
                 var_shapes: Sequence[tuple[int, ...] | None] | None, pair_outputs: bool,
                 which: Sequence[int], node_ranks: Sequence[Sequence[int | None]] | None = None,
                 by_use: bool = False) -> None:
        self.node_ranks = node_ranks
        self.by_use = by_use
        self.uf = _UF()
        self.concrete: dict[int, int] = {}
        self.var_dims: list[Dims | None] = []
        for v, r in enumerate(var_ranks):
            if r is None:
                self.var_dims.append(None)
                continue
            dims = []
            for ax in range(r):
                conc = var_shapes[v][ax] if var_shapes and var_shapes[v] is not None else None
                e = self.uf.new()
                self.uf.vardims[e] = (v, ax)
                if conc is not None:
                    self.concrete[e] = conc
                dims.append(e)
            self.var_dims.append(dims)
        self.derived: dict[tuple[int, int, str], Any] = {}
        # Channel dims of constant kernels (const_pool, const_iconv): TASO sizes them by
        # their use, so with `by_use` a conv using one as its weight gives them its
        # input's channels (typing alone would also allow multiples of them).
        self.const_channels: set[int] = set()
        self.side_dims: list[list[list[Dims | None]]] = []
        for s, side in enumerate(sides):
            if s not in which:
                self.side_dims.append([])
                continue
            self.side_dims.append(self._side(s, side))
        if pair_outputs and all(s in which for s in range(len(sides))):
            for r0, r1 in zip(sides[0].outputs, sides[1].outputs, strict=True):
                self._unify(self._dims(0, r0), self._dims(1, r1))
        self._cancel_sums()

    def _cancel_sums(self) -> None:
        """Concatenated dims are sums: two equal sums with an equal addend have equal other
        addends (a + b = c + b gives a = c), and equal addends give equal sums. Without
        this, `ewadd (concat a b) (concat c d)` rewritten to `ewadd (concat c b) (concat a
        d)` types for any split of the concat axis, though only a = c, b = d make the
        target well-typed; with it those equalities become the rule's condition."""
        uf = self.uf
        changed = True
        while changed:
            changed = False
            items = list(uf.sums.items())
            for i, (e, (p, q)) in enumerate(items):
                for f, (p2, q2) in items[i + 1:]:
                    fp, fq, fp2, fq2 = uf.find(p), uf.find(q), uf.find(p2), uf.find(q2)
                    same_sum = uf.find(e) == uf.find(f)
                    pairs = ((fp, fq, fp2, fq2), (fp, fq, fq2, fp2))  # a + b = b + a
                    for x, y, x2, y2 in pairs:
                        if same_sum and x == x2 and y != y2:
                            uf.union(y, y2)
                            changed = True
                        elif same_sum and y == y2 and x != x2:
                            uf.union(x, x2)
                            changed = True
                        elif not same_sum and x == x2 and y == y2:
                            uf.union(e, f)
                            changed = True
                        same_sum = uf.find(e) == uf.find(f)

    def _dims(self, s: int, r: Ref) -> Dims | None:
        if r[0] == "var":
            return self.var_dims[r[1]]
        return self.side_dims[s][r[1]][r[2]]

    def _unify(self, a: Dims | None, b: Dims | None) -> None:
        if a is None or b is None:
            return
        if len(a) != len(b):
            self.uf.conflict = f"rank {len(a)} vs rank {len(b)}"
            return
        for x, y in zip(a, b, strict=True):
            self.uf.union(x, y)

    def _int(self, v: int) -> int:
        return self.uf.new(v)

    def _fresh(self, n: int) -> Dims:
        return [self.uf.new() for _ in range(n)]

    def _side(self, s: int, side: Side) -> list[list[Dims | None]]:
        outs: list[list[Dims | None]] = []
        self.side_dims.append(outs)  # visible to _dims while building
        for k, node in enumerate(side.nodes):
            ins = [self._dims(s, r) for r in node.inputs]
            outs.append(self._node(s, k, node, ins))
        self.side_dims.pop()
        return outs

    def _node(self, s: int, k: int, node: SNode, ins: list[Dims | None]) -> list[Dims | None]:
        _check_ranks(node, ins)
        op = node.op
        a = node.attr
        uf = self.uf
        if _pointwise(op):
            # element-wise (the generator's operands have equal shapes; smul's scalar has
            # rank 0): operands of the output's rank share its dims
            known = [d for d in ins if d is not None]
            if len(known) < len(ins):  # some rank unknown: a known operand that is not a scalar
                return [next((d for d in known if d), None)]
            top = max(len(d) for d in known)
            first = next(d for d in known if len(d) == top)
            for d in known:
                if d is not first and len(d) == top:
                    self._unify(first, d)
            return [first]
        if _normalizes(op):  # softmax, layer_norm, rms_norm: input 0's shape
            x = ins[0]
            if x is not None:
                for w in ins[1:]:  # weights cover x's trailing axes
                    if w is not None and 0 < len(w) <= len(x):
                        self._unify(x[len(x) - len(w):], w)
            return [x]
        if get_op(op).has(REDUCTION) and get_op(op).attrs and \
                any(sp.name == "axes" for sp in get_op(op).attrs):
            (x,) = ins
            if x is None:
                return [None]
            axes = {ax % len(x) for ax in a("axes", ()) or range(len(x))} if x else set()
            if a("keepdims", False):
                return [[self._int(1) if i in axes else d for i, d in enumerate(x)]]
            return [[d for i, d in enumerate(x) if i not in axes]]
        if op == "attention":
            q, k, v = ins
            if q is None or k is None or v is None:
                return [None]
            uf.union(q[-1], k[-1])
            uf.union(k[-2], v[-2])
            return [[*q[:-1], v[-1]]]
        if op == "matmul":
            x, y = ins
            if x is None or y is None:
                return [None]
            uf.union(x[-1], y[-2])
            batch = x[:-2] if len(x) >= len(y) else y[:-2]
            if len(x) == len(y):
                for p, q in zip(x[:-2], y[:-2], strict=True):
                    uf.union(p, q)
            return [[*batch, x[-2], y[-1]]]
        if op == "conv2d":
            x, w = ins
            if x is None or w is None:
                return [None]
            self.derived[(s, k, "groups")] = ("div", x[1], w[1])
            if self.by_use and w[0] in self.const_channels:
                # depthwise pooling kernel or identity kernel: one output per input channel
                uf.union(w[0], x[1])
            stride = a("stride", (1, 1))
            same = a("padding", "valid") == "same" and tuple(stride) == (1, 1)
            spatial = [x[2], x[3]] if same else self._fresh(2)
            return [[x[0], w[0], *spatial]]
        if op in ("pool2d_avg", "pool2d_max"):
            (x,) = ins
            if x is None:
                return [None]
            stride = a("stride", (1, 1))
            same = a("padding", "valid") == "same" and tuple(stride) == (1, 1)
            spatial = [x[2], x[3]] if same else self._fresh(2)
            return [[x[0], x[1], *spatial]]
        if op == "transpose":
            (x,) = ins
            if x is None:
                return [None]
            perm = a("perm", ()) or tuple(reversed(range(len(x))))
            return [[x[p] for p in perm]]
        if op == "concat":
            ax = a("axis", 0)
            known = [d for d in ins if d is not None]
            if len(known) != len(ins) or not known:
                return [None]
            rank = len(known[0])
            ax %= rank
            for d in known[1:]:
                for i in range(rank):
                    if i != ax:
                        uf.union(known[0][i], d[i])
            total = known[0][ax]
            for d in known[1:]:
                e = uf.new()
                uf.sums[e] = (total, d[ax])
                total = e
            out = list(known[0])
            out[ax] = total
            return [out]
        if op == "split":
            (x,) = ins
            if x is None:
                return [None, None]
            ax = a("axis", 0) % len(x)
            n_out = len(a("sizes", ())) or 2
            parts = self._split_parts(x[ax], n_out)
            self.derived[(s, k, "sizes")] = ("list", parts)
            res = []
            for p in parts:
                d = list(x)
                d[ax] = p
                res.append(d)
            return res
        if op == "enlarge":
            (w,) = ins
            if w is None:
                return [None]
            return [[w[0], w[1], self._int(a("kh")), self._int(a("kw"))]]
        if op == "const_pool":
            c = uf.new()
            self.const_channels.add(c)
            self.derived[(s, k, "channels")] = ("elem", c)
            return [[c, self._int(1), self._int(a("kh")), self._int(a("kw"))]]
        if op == "const_iconv":
            c = uf.new()
            self.const_channels.add(c)
            self.derived[(s, k, "channels")] = ("elem", c)
            g = a("groups", 1)
            c1 = c if g == 1 else uf.new()
            return [[c, c1, self._int(a("kh")), self._int(a("kw"))]]
        if op == "const_imm":
            n = uf.new()
            self.derived[(s, k, "n")] = ("elem", n)
            return [[n, n]]
        if op == "const_one":
            shape = a("shape")
            rank = len(shape) if shape is not None else (
                self.node_ranks[s][k] if self.node_ranks is not None else None)
            if rank is None:
                return [None]
            dims = self._fresh(rank)
            self.derived[(s, k, "shape")] = ("list", dims)
            return [dims]
        if get_op(op).named_source:
            return [None]
        return [None for _ in range(_n_outputs(node))]

    def _split_parts(self, e: int, n: int) -> list[int]:
        """The parts of a concatenated dimension, top-level boundary first (as TASO)."""
        # the element (or any member of its class) defined as a sum tells where it was cut
        root = self.uf.find(e)
        for m, (p, q) in self.uf.sums.items():
            if self.uf.find(m) == root and n == 2:
                return [p, q]
        return self._fresh(n)


_RANK4 = {"conv2d", "pool2d_avg", "pool2d_max", "enlarge"}


def _pointwise(op: str) -> bool:
    """Element-wise (trait), or a layout op without attributes (copy): output position i
    reads position i of each operand."""
    d = get_op(op)
    return d.has(ELEMENTWISE) or (d.has(LAYOUT) and not d.attrs)


def _normalizes(op: str) -> bool:
    """A reduction over an `axis` whose output has its first input's shape (softmax,
    layer_norm, rms_norm; reductions with `axes` drop or keep them as 1)."""
    d = get_op(op)
    return d.has(REDUCTION) and any(sp.name == "axis" for sp in d.attrs)


def _check_ranks(node: SNode, ins: Sequence[Dims | None]) -> None:
    """Operand ranks the op cannot take (a rule using an input at another rank than its
    op needs) are a SymShapeError naming the op, not an IndexError further down."""
    ranks = [len(d) if d is not None else None for d in ins]
    op = node.op
    bad = ""
    if op in _RANK4 and any(r is not None and r != 4 for r in ranks):
        bad = "4-D operands"
    elif op == "matmul" and any(r is not None and r < 2 for r in ranks):
        bad = "operands of rank >= 2"
    elif op == "concat" and len({r for r in ranks if r is not None}) > 1:
        bad = "operands of one rank"
    elif op in ("concat", "split") and any(r == 0 for r in ranks):
        bad = "operands of rank >= 1"
    elif op == "transpose" and node.attr("perm") and ranks and ranks[0] is not None and \
            sorted(node.attr("perm")) != list(range(ranks[0])):
        bad = f"a rank-{len(node.attr('perm'))} operand for perm {list(node.attr('perm'))}"
    if bad:
        raise SymShapeError(f"{op} needs {bad}, found ranks {ranks}")


def _n_outputs(node: SNode) -> int:
    op = get_op(node.op)
    if callable(op.num_outputs):
        sizes = node.attr("sizes")
        return len(sizes) if sizes else 2
    return op.num_outputs


# ---- rank inference (for rules read from files, which carry no shapes) --------------

# Ops whose output has the rank of all of their inputs beyond the element-wise ones
# (`_pointwise`, from the IR's traits), and those whose output has their first input's rank.
_SAME_RANK_MOVE = {"pool2d_avg", "pool2d_max", "transpose", "concat", "enlarge"}
_FIRST_RANK = {"smul", "split", "const_one"}


def _same_rank(op: str) -> str:
    """'all': output and every input share a rank; 'first': output and input 0; ''."""
    if op in _FIRST_RANK or _normalizes(op):
        return "first"
    if op in _SAME_RANK_MOVE or _pointwise(op):
        return "all"
    return ""


def infer_ranks(sides: Sequence[Side], n_vars: int, pair_outputs: bool = True,
                known: Sequence[int | None] | None = None
                ) -> tuple[list[int | None], list[list[int | None]]]:
    """Variable ranks from how the ops use them (conv: 4, matmul: as its operands), starting
    from `known` ones."""
    ranks: list[int | None] = list(known) if known is not None else [None] * n_vars
    node_ranks: list[list[int | None]] = [[None] * len(s.nodes) for s in sides]

    def get(s: int, r: Ref) -> int | None:
        return ranks[r[1]] if r[0] == "var" else node_ranks[s][r[1]]

    def put(s: int, r: Ref, v: int | None) -> bool:
        if v is None or get(s, r) is not None:
            return False
        if r[0] == "var":
            ranks[r[1]] = v
        else:
            node_ranks[s][r[1]] = v
        return True

    changed = True
    while changed:
        changed = False
        for s, side in enumerate(sides):
            for k, node in enumerate(side.nodes):
                me: Ref = ("node", k, 0)
                op = node.op
                ins = node.inputs
                if node.rank is not None:
                    changed |= put(s, me, node.rank)
                if op in ("conv2d", "pool2d_avg", "pool2d_max", "enlarge", "lrn"):
                    for r in ins:
                        changed |= put(s, r, 4)
                    changed |= put(s, me, 4)
                elif op in ("const_pool", "const_iconv"):
                    changed |= put(s, me, 4)
                elif op == "const_imm":
                    changed |= put(s, me, 2)
                elif op == "const_one" and node.attr("shape") is not None:
                    changed |= put(s, me, len(node.attr("shape")))
                elif op == "smul":
                    changed |= put(s, ins[1], 0)
                if op == "transpose" and node.attr("perm"):
                    changed |= put(s, me, len(node.attr("perm")))
                if op == "matmul":
                    rs = [get(s, r) for r in ins]
                    known = [x for x in rs if x is not None]
                    if not known and get(s, me) is None:
                        continue
                    v = get(s, me) or max(known)
                    changed |= put(s, me, v)
                    for r in ins:
                        changed |= put(s, r, v)
                same = _same_rank(op)
                if same:
                    group = [me] + (list(ins[:1]) if same == "first" else list(ins))
                    if op == "enlarge":
                        group = [me, *ins]
                    vals = [get(s, r) for r in group]
                    v = next((x for x in vals if x is not None), None)
                    for r in group:
                        changed |= put(s, r, v)
                    if op == "split":
                        changed |= put(s, ("node", k, 1), v)
                        changed |= put(s, ("node", k, 0), v)
        if pair_outputs and len(sides) == 2:
            for r0, r1 in zip(sides[0].outputs, sides[1].outputs, strict=True):
                v = get(0, r0) if get(0, r0) is not None else get(1, r1)
                changed |= put(0, r0, v)
                changed |= put(1, r1, v)
    return ranks, node_ranks


# ---- rendering ----------------------------------------------------------------------

class _Renderer:
    def __init__(self, uf: _UF, var_names: Sequence[str], concrete: Mapping[int, int]) -> None:
        self.uf = uf
        self.names = var_names
        self.members = uf.classes()
        self.concrete = concrete

    def value(self, e: int) -> int | None:
        """The concrete size of a dimension where known."""
        for m in self.members[self.uf.find(e)]:
            if m in self.uf.ints:
                return self.uf.ints[m]
            if m in self.concrete:
                return self.concrete[m]
        return None

    def render(self, e: int, depth: int = 0) -> str | int | None:
        members = self.members[self.uf.find(e)]
        dims = sorted(self.uf.vardims[m] for m in members if m in self.uf.vardims)
        if dims:
            v, ax = dims[0]
            return f"dim(?{self.names[v]},{ax})"
        for m in members:
            if m in self.uf.ints:
                return self.uf.ints[m]
        if depth < 6:
            for m in members:
                if m in self.uf.sums:
                    p, q = self.uf.sums[m]
                    a, b = self.render(p, depth + 1), self.render(q, depth + 1)
                    if a is None or b is None:
                        continue
                    if isinstance(a, int) and isinstance(b, int):
                        return a + b
                    return f"{a} + {b}"
        return None

    def derived(self, spec: Any) -> Any:
        kind = spec[0]
        if kind == "elem":
            return self.render(spec[1])
        if kind == "div":
            x, w = spec[1], spec[2]
            if self.uf.find(x) == self.uf.find(w):
                return 1
            rx, rw = self.render(x), self.render(w)
            if rx is None or rw is None:
                return None
            if rw == 1:
                return rx
            if isinstance(rx, int) and isinstance(rw, int):
                return rx // rw if rw else None
            return f"{_paren(rx)} // {_paren(rw)}"
        if kind == "list":
            parts = [self.render(p) for p in spec[1]]
            if any(p is None for p in parts):
                return None
            if all(isinstance(p, int) for p in parts):
                return tuple(parts)
            return "[" + ", ".join(str(p) for p in parts) + "]"
        raise ValueError(spec)


def _paren(x: str | int) -> str:
    return f"({x})" if isinstance(x, str) and " " in x else str(x)


def _as_attr(value: Any) -> AttrPat:
    if isinstance(value, str) and ("dim(" in value or "?" in value):
        return AExpr(value)
    return AConst(value)


# ---- building rules -----------------------------------------------------------------

@dataclass(frozen=True)
class RuleSpec:
    """A rule as two side graphs over numbered variables, before it becomes patterns."""

    name: str
    source: Side
    target: Side
    var_names: tuple[str, ...]
    var_shapes: tuple[tuple[int, ...], ...] | None = None  # concrete shapes, when known
    bidirectional: bool | None = None  # None: when both sides use the same variables
    var_ranks: tuple[int | None, ...] | None = None  # ranks, when known without shapes


def side_vars(side: Side) -> list[int]:
    seen: dict[int, None] = {}

    def walk(r: Ref) -> None:
        if r[0] == "var":
            seen.setdefault(r[1], None)
        else:
            for c in side.nodes[r[1]].inputs:
                walk(c)

    for o in side.outputs:
        walk(o)
    return list(seen)


def build_rule(spec: RuleSpec, kind: str = "taso", provenance: Mapping[str, Any] | None = None,
               at_shapes: bool = False, by_use: bool = False) -> Rule:
    """Patterns with shape-dependent attributes as expressions (checked against the concrete
    shapes when given) and the condition the target's typing adds.

    With `at_shapes` (needs `spec.var_shapes`): the rule as its source meant it, at those
    shapes only. Each side's shape-dependent attributes come from that side's own typing
    (pairing the outputs would make a false rule contradictory instead of false; it is
    only asked where one side alone does not determine an attribute), written as the
    constants they are there, and every variable is pinned to its shape.

    With `by_use` (always with `at_shapes`): a constant kernel used as a conv's weight has
    that conv's input channels, as TASO sizes its constants; else its channels are free."""
    n_vars = len(spec.var_names)
    sides = (spec.source, spec.target)
    node_ranks: list[list[int | None]] | None = None
    if spec.var_shapes is not None:
        ranks: list[int | None] = [len(s) for s in spec.var_shapes]
        if at_shapes:  # constants without a shape of their own take the rank of their use
            _, node_ranks = infer_ranks(sides, n_vars, known=ranks)
    else:
        if at_shapes:
            raise SymShapeError(f"rule {spec.name}: at_shapes needs the variables' shapes")
        ranks, node_ranks = infer_ranks(sides, n_vars, known=spec.var_ranks)
    full = _Solver(sides, ranks, spec.var_shapes, not at_shapes, (0, 1), node_ranks,
                   at_shapes or by_use)
    if full.uf.conflict:
        raise SymShapeError(f"rule {spec.name}: inconsistent shapes ({full.uf.conflict})")
    rend = _Renderer(full.uf, spec.var_names, full.concrete)
    paired: tuple[_Solver, _Renderer] | None = None
    if at_shapes:
        both = _Solver(sides, ranks, spec.var_shapes, True, (0, 1), node_ranks, True)
        if not both.uf.conflict:
            paired = (both, _Renderer(both.uf, spec.var_names, both.concrete))

    def value_of(key: tuple[int, int, str]) -> Any:
        d = full.derived.get(key)
        value = rend.derived(d) if d is not None else None
        if value is None and paired is not None:
            d = paired[0].derived.get(key)
            value = paired[1].derived(d) if d is not None else None
        return value

    types = None
    if spec.var_shapes is not None:
        from superopt.ir.types import TensorType

        types = {spec.var_names[v]: TensorType(s) for v, s in enumerate(spec.var_shapes)}
    patterns = []
    fallback: list[bool] = []
    for s, side in enumerate(sides):
        built = [_node_attrs(node, value_of, s, k, types, fallback, at_shapes)
                 for k, node in enumerate(side.nodes)]
        patterns.append(tuple(_pattern(side, r, built, spec.var_names) for r in side.outputs))
    src_vars, tgt_vars = set(side_vars(spec.source)), set(side_vars(spec.target))
    bidir = spec.bidirectional if spec.bidirectional is not None else src_vars == tgt_vars
    condition = None if at_shapes else _condition(sides, ranks, spec, full, bidir, node_ranks)
    if (any(fallback) or at_shapes) and spec.var_shapes is not None:
        # Some shape-dependent attribute could only be written as the number found at the
        # generator's shapes: the rule is then only known to hold at those shapes.
        pins = [f"shape(?{n}) == {tuple(sh)!r}"
                for n, sh in zip(spec.var_names, spec.var_shapes, strict=True)]
        condition = " and ".join(([condition] if condition else []) + pins)
    return Rule(spec.name, patterns[0], patterns[1], condition, bidir, kind,
                dict(provenance or {}))


def _node_attrs(node: SNode, value_of: Any, s: int, k: int, types: Mapping[str, Any] | None,
                fallback: list[bool], constants: bool = False) -> dict[str, AttrPat]:
    op = get_op(node.op)
    out: dict[str, AttrPat] = {}
    for name, value in node.attrs:
        if name in node.infer:
            continue
        spec = op.attr_spec(name)
        if spec.required or spec.validate(node.op, value) != spec.validate(node.op, spec.default):
            out[name] = AConst(spec.validate(node.op, value))
    for name in node.infer:
        value = value_of((s, k, name))
        concrete = node.attr(name)
        if value is None:
            if concrete is None:
                continue  # leave the op's default
            out[name] = AConst(concrete)
            fallback.append(True)
            continue
        pat = _as_attr(value)
        if isinstance(pat, AExpr) and types is not None and concrete is not None:
            try:
                ok = eval_expr(pat.text, types) == concrete
            except IRError:
                ok = False
            if not ok:
                pat = AConst(concrete)
                fallback.append(True)
        if constants and isinstance(pat, AExpr) and types is not None:
            # At fixed shapes the attribute is a number; written as one, axioms whose
            # triggers need e.g. groups = 1 literally apply.
            try:
                v = eval_expr(pat.text, types)
            except IRError:
                v = None
            if v is not None:
                pat = AConst(tuple(v) if isinstance(v, list) else v)
        if isinstance(pat, AConst):
            spec = op.attr_spec(name)
            if not spec.required and pat.value == spec.default:
                continue
        out[name] = pat
    return out


def _pattern(side: Side, r: Ref, built: list[dict[str, AttrPat]], names: Sequence[str]) -> Pattern:
    if r[0] == "var":
        return PVar(names[r[1]])
    node = side.nodes[r[1]]
    children = tuple(_pattern(side, c, built, names) for c in node.inputs)
    return PNode(node.op, tuple(sorted(built[r[1]].items())), children, r[2])


def _condition(sides: Sequence[Side], ranks: Sequence[int | None], spec: RuleSpec,
               full: _Solver, bidir: bool, node_ranks: Any) -> str | None:
    """Equalities between variable dimensions that the full unification implies but the
    matched side's own typing does not (the source's, and the target's for `<=>`)."""
    parts: list[str] = []
    full_cls = full.uf.classes()
    for s in ((0, 1) if bidir else (0,)):
        own = _Solver(sides, ranks, spec.var_shapes, False, (s,), node_ranks)
        for members in full_cls.values():
            dims = sorted(full.uf.vardims[m] for m in members if m in full.uf.vardims)
            if not dims:
                continue
            groups: dict[int, tuple[int, int]] = {}
            for v, ax in dims:
                e = own.var_dims[v][ax] if own.var_dims[v] is not None else None
                if e is None:
                    continue
                groups.setdefault(own.uf.find(e), (v, ax))
            reps = sorted(groups.values())
            for v, ax in reps[1:]:
                a = f"dim(?{spec.var_names[reps[0][0]]},{reps[0][1]})"
                parts.append(f"{a} == dim(?{spec.var_names[v]},{ax})")
    parts = list(dict.fromkeys(parts))
    return " and ".join(parts) if parts else None

