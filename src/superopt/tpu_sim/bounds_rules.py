"""Per-op tile-bounds rules (table "tpu_bounds"): how an op's output dims relate to its inputs'.

`bounds.analyse` relates the dims of every value a kernel touches through its members, so
that one block of the kernel's iteration space says which block of each array it moves. Each
op's rule states, for one member, which (value, dim) pairs are the same dim (`same`: a union
in the analysis' union-find) and which input dims are *windows* over an output dim and a tap
dim (`window`: a conv's or pool's spatial input dims). A dim that no rule relates follows no
space dim, so its array is moved whole along it in every block -- the safe reading. Every
registered op has an entry (the coverage test checks it), so a new op's reading is a choice.

A rule also says whether the op reads its operands whole (`reads_operands_whole`: a slice
reads a window of its source, an embedding a few rows of its table): such an operand is never
a kernel's main array, and `simulate.compulsory_bytes` counts only what the op's cost rule
says it reads. An MXU op's rule says which of its weight dims it contracts and which result
dim feeds the MXU's columns (`mxu`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from superopt.ir.opdef import ELEMENTWISE, LAYOUT, SOURCE, ops_with
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType
from superopt.tpu_sim.layout import Layout

# A value of the kernel: ("x", external index) or ("m", member index, output index).
ValueKey = tuple[Any, ...]
DimKey = tuple[ValueKey, int]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, a: Any) -> Any:
        p = self.parent.setdefault(a, a)
        if p != a:
            p = self.parent[a] = self.find(p)
        return p

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


@dataclass
class DimRelations:
    """What the rules of a kernel's members found: equal dims and windows."""

    uf: _UnionFind = field(default_factory=_UnionFind)
    # (input dim, output dim, tap dim or None, stride, dilation)
    windows: list[tuple[DimKey, DimKey, DimKey | None, int, int]] = field(default_factory=list)

    def same(self, a: DimKey, b: DimKey) -> None:
        self.uf.union(a, b)

    def window(self, x: DimKey, out: DimKey, tap: DimKey | None, stride: int,
               dilation: int) -> None:
        self.windows.append((x, out, tap, stride, dilation))


class Member(NamedTuple):
    """One kernel member as a rule sees it: its attributes, output types and the keys and
    shapes of its operands (`out` is its first output's key)."""

    index: int
    attrs: dict[str, Any]
    types: tuple[TensorType, ...]
    ins: list[ValueKey]
    shapes: list[tuple[int, ...]]

    @property
    def out(self) -> ValueKey:
        return ("m", self.index, 0)

    @property
    def oshape(self) -> tuple[int, ...]:
        return self.types[0].shape if self.types else ()

    @property
    def rank(self) -> int:
        return len(self.oshape)


Relate = Callable[[Member, DimRelations], None]


class MxuDims(NamedTuple):
    """An MXU op's contraction: weight dim -> "feature" or "tap", the result dim that makes
    the MXU columns, and whether it contracts tap by tap (features per tap padded)."""

    contraction: dict[int, str]
    col_dim: int
    deep: bool = False
    # MXU passes per block relative to rows x columns x contraction: attention runs two
    # products per block (scores over D, then p v over Lk), (D + Dv) / Dv of the second.
    work: float = 1.0


# (op attributes, result types, result layouts, weight type) -> its MXU dims
MxuFn = Callable[[dict[str, Any], Sequence[TensorType], Sequence[Layout], TensorType], MxuDims]


@dataclass(frozen=True)
class BoundsRule:
    relate: Relate
    reads_operands_whole: bool = True
    mxu: MxuFn | None = None


BOUNDS_RULES: RuleTable[BoundsRule] = RuleTable("tpu_bounds")


def bounds_rule(op: str) -> BoundsRule:
    return BOUNDS_RULES.get(op)


# ---- relations ------------------------------------------------------------------------------

def _nothing(m: Member, r: DimRelations) -> None:
    """Sources have no operands to relate to."""


def _broadcast_inputs(slots: Callable[[Member], range]) -> Relate:
    """Operands relate to the output dim by dim under numpy broadcasting (trailing dims
    aligned; a broadcast dim of size 1 follows nothing, so its block is whole)."""

    def relate(m: Member, r: DimRelations) -> None:
        rank, oshape = m.rank, m.oshape
        for k in slots(m):
            off = rank - len(m.shapes[k])
            for j in range(off, rank):
                if m.shapes[k][j - off] == oshape[j]:
                    r.same((m.out, j), (m.ins[k], j - off))

    return relate


_every_operand = _broadcast_inputs(lambda m: range(len(m.ins)))
# A norm's scale, shift and statistics are per-feature vectors: only the data follows.
_data_operand = _broadcast_inputs(lambda m: range(1))


def _positional(m: Member, r: DimRelations) -> None:
    """Same rank, dims in place (sizes may differ: `ArrayDim.scale` prorates them)."""
    for k in range(len(m.ins)):
        for j in range(min(m.rank, len(m.shapes[k]))):
            r.same((m.out, j), (m.ins[k], j))


def _split(m: Member, r: DimRelations) -> None:
    _positional(m, r)
    for o in range(1, len(m.types)):
        for j in range(m.rank):
            r.same((("m", m.index, o), j), (m.out, j))


def _topk(m: Member, r: DimRelations) -> None:
    """Both results follow the operand on every dim but the searched one, which is read
    whole."""
    axis = m.attrs["axis"]
    for o in range(len(m.types)):
        for j in range(m.rank):
            if j != axis:
                r.same((("m", m.index, o), j), (m.ins[0], j))


def _transpose(m: Member, r: DimRelations) -> None:
    for j, p in enumerate(m.attrs["perm"]):
        r.same((m.out, j), (m.ins[0], p))


def reshape_pairs(src: Sequence[int], dst: Sequence[int]) -> list[tuple[int, int]]:
    """Dims of a row-major reshape that map one to one (a group of one dim on each side)."""
    pairs = []
    i = j = 0
    while i < len(src) and j < len(dst):
        gi, gj = [i], [j]
        a, b = src[i], dst[j]
        while a != b:
            if a < b:
                i += 1
                if i >= len(src):
                    return pairs
                a *= src[i]
                gi.append(i)
            else:
                j += 1
                if j >= len(dst):
                    return pairs
                b *= dst[j]
                gj.append(j)
        real_i = [k for k in gi if src[k] != 1]
        real_j = [k for k in gj if dst[k] != 1]
        if len(real_i) == 1 and len(real_j) == 1:
            pairs.append((real_i[0], real_j[0]))
        i += 1
        j += 1
    return pairs


def _reshape(m: Member, r: DimRelations) -> None:
    for s, d in reshape_pairs(m.shapes[0], m.oshape):
        r.same((m.ins[0], s), (m.out, d))


def _reduce(m: Member, r: DimRelations) -> None:
    """Reduced axes follow nothing; kept ones follow the output (in place under keepdims)."""
    axes = set(m.attrs["axes"])
    kept = [d for d in range(len(m.shapes[0])) if d not in axes]
    for j, d in enumerate(kept):
        r.same((m.out, d if m.attrs["keepdims"] else j), (m.ins[0], d))


def _conv2d(m: Member, r: DimRelations) -> None:
    """Batch and output features follow the result; input features are contracted with the
    weights' (unless grouped); spatial input dims are windows over output rows and taps."""
    x, w = m.ins
    a = m.attrs
    r.same((m.out, 0), (x, 0))
    r.same((m.out, 1), (w, 0))
    if a["groups"] == 1:
        r.same((x, 1), (w, 1))
    for s in (2, 3):
        r.window((x, s), (m.out, s), (w, s), a["stride"][s - 2], a["dilation"][s - 2])


def _matmul(m: Member, r: DimRelations) -> None:
    """Batch dims broadcast; rows follow the lhs, columns the rhs, the lhs' minor dim is
    contracted with the rhs' second-minor."""
    lhs, rhs = m.ins
    rank, oshape = m.rank, m.oshape
    for k, sh in enumerate(m.shapes[:2]):
        off = rank - len(sh)
        for j in range(off, rank - 2):
            if sh[j - off] == oshape[j]:
                r.same((m.out, j), (m.ins[k], j - off))
    r.same((m.out, rank - 2), (lhs, len(m.shapes[0]) - 2))
    r.same((m.out, rank - 1), (rhs, len(m.shapes[1]) - 1))
    r.same((lhs, len(m.shapes[0]) - 1), (rhs, len(m.shapes[1]) - 2))


def _linear(m: Member, r: DimRelations) -> None:
    """x (..., K) @ w (N, K)^T + b (N,)."""
    rank = m.rank
    for j in range(rank - 1):
        r.same((m.out, j), (m.ins[0], j))
    r.same((m.out, rank - 1), (m.ins[1], 0))
    r.same((m.out, rank - 1), (m.ins[2], 0))
    r.same((m.ins[0], rank - 1), (m.ins[1], 1))


def _pool(m: Member, r: DimRelations) -> None:
    """Batch and channels in place; spatial input dims are windows with no tap dim."""
    r.same((m.out, 0), (m.ins[0], 0))
    r.same((m.out, 1), (m.ins[0], 1))
    for s in (2, 3):
        r.window((m.ins[0], s), (m.out, s), None, m.attrs["stride"][s - 2], 1)


def _gather(m: Member, r: DimRelations) -> None:
    """x's dims before and after `axis` follow the result's; the indices' dims are the
    result's middle dims; x's gathered dim follows none (its rows are fetched one by one)."""
    axis = m.attrs["axis"]
    x_rank, i_rank = len(m.shapes[0]), len(m.shapes[1])
    for d in range(axis):
        r.same((m.out, d), (m.ins[0], d))
    for j in range(i_rank):
        r.same((m.out, axis + j), (m.ins[1], j))
    for d in range(axis + 1, x_rank):
        r.same((m.out, d + i_rank - 1), (m.ins[0], d))


def _attention(m: Member, r: DimRelations) -> None:
    """q (..., H, Lq, D), k (..., Hkv, Lk, D), v (..., Hkv, Lk, Dv) -> (..., H, Lq, Dv):
    batch dims broadcast, heads follow the result where H == Hkv (grouped-query k/v heads
    follow none), Lq follows q, Dv follows v; D (q with k) and Lk (k with v) are contracted."""
    q, k, v = m.ins
    rank, oshape = m.rank, m.oshape
    for slot, sh in enumerate(m.shapes):
        off = rank - len(sh)
        for j in range(max(off, 0), rank - 2):
            if sh[j - off] == oshape[j]:
                r.same((m.out, j), (m.ins[slot], j - off))
    qs, ks, vs = m.shapes
    r.same((m.out, rank - 2), (q, len(qs) - 2))
    r.same((m.out, rank - 1), (v, len(vs) - 1))
    r.same((q, len(qs) - 1), (k, len(ks) - 1))
    r.same((k, len(ks) - 2), (v, len(vs) - 2))


def _embedding(m: Member, r: DimRelations) -> None:
    """The result's leading dims follow the ids; the table is gathered, so follows none."""
    for j in range(len(m.shapes[0])):
        r.same((m.out, j), (m.ins[0], j))


# ---- MXU contraction ------------------------------------------------------------------------

def _conv2d_mxu(attrs: dict[str, Any], types: Sequence[TensorType], lays: Sequence[Layout],
                wt: TensorType) -> MxuDims:
    # The MXU's columns are the result's lane dim: features, or the batch (cost._conv).
    col = 0 if (lays[0] and lays[0][0] == 0 and types[0].shape[0] > 1
                and attrs.get("groups", 1) == 1) else 1
    return MxuDims({1: "feature", 2: "tap", 3: "tap"}, col, wt.shape[1] >= 128)


def _product_col(types: Sequence[TensorType], lays: Sequence[Layout]) -> int:
    # The columns are the result's lane dim here too: a product written with its rows
    # minor-most (a dense layer's output stored {0,1}) is computed transposed, its rows
    # streaming as MXU columns, rather than transposed after.
    r = types[0].rank
    return r - 2 if (r >= 2 and lays[0] and lays[0][0] == r - 2) else r - 1


def _matmul_mxu(attrs: dict[str, Any], types: Sequence[TensorType], lays: Sequence[Layout],
                wt: TensorType) -> MxuDims:
    return MxuDims({wt.rank - 2: "feature"}, _product_col(types, lays))


def _linear_mxu(attrs: dict[str, Any], types: Sequence[TensorType], lays: Sequence[Layout],
                wt: TensorType) -> MxuDims:
    return MxuDims({1: "feature"}, _product_col(types, lays))


def _attention_mxu(attrs: dict[str, Any], types: Sequence[TensorType], lays: Sequence[Layout],
                   wt: TensorType) -> MxuDims:
    # The "weight" is k (..., Hkv, Lk, D): its Lk is the contraction of p v, whose columns
    # are Dv; the score product over D (not a space dim: q and k blocks hold D whole) adds
    # pad(D) / pad(Dv) of that work.
    d = wt.shape[-1]
    dv = types[0].shape[-1]
    pad = lambda x: -(-max(x, 1) // 128) * 128  # noqa: E731
    return MxuDims({wt.rank - 2: "feature"}, _product_col(types, lays),
                   work=(pad(d) + pad(dv)) / pad(dv))


# ---- the table ------------------------------------------------------------------------------

for _name in ops_with(SOURCE):
    BOUNDS_RULES.register(_name, BoundsRule(_nothing))
for _name in ops_with(ELEMENTWISE):
    BOUNDS_RULES.register(_name, BoundsRule(_every_operand))
# Not element-wise, but each operand has the output's shape (or broadcasts to it: expand).
for _name in (*ops_with(LAYOUT), "softmax", "lrn", "expand"):
    BOUNDS_RULES.register(_name, BoundsRule(_every_operand))
for _name in ("batch_norm", "layer_norm", "rms_norm"):
    BOUNDS_RULES.register(_name, BoundsRule(_data_operand))
for _name in ("pad", "concat", "enlarge"):
    BOUNDS_RULES.register(_name, BoundsRule(_positional))
BOUNDS_RULES.register("slice", BoundsRule(_positional, reads_operands_whole=False))
BOUNDS_RULES.register("split", BoundsRule(_split))
BOUNDS_RULES.register("topk", BoundsRule(_topk))
BOUNDS_RULES.register("transpose", BoundsRule(_transpose))
BOUNDS_RULES.register("reshape", BoundsRule(_reshape))
for _name in ("reduce_sum", "reduce_mean", "reduce_max", "argmax"):
    BOUNDS_RULES.register(_name, BoundsRule(_reduce))
for _name in ("pool2d_avg", "pool2d_max"):
    BOUNDS_RULES.register(_name, BoundsRule(_pool))
BOUNDS_RULES.register("conv2d", BoundsRule(_conv2d, mxu=_conv2d_mxu))
BOUNDS_RULES.register("matmul", BoundsRule(_matmul, mxu=_matmul_mxu))
BOUNDS_RULES.register("linear", BoundsRule(_linear, mxu=_linear_mxu))
BOUNDS_RULES.register("embedding", BoundsRule(_embedding, reads_operands_whole=False))
BOUNDS_RULES.register("gather", BoundsRule(_gather, reads_operands_whole=False))
BOUNDS_RULES.register("attention", BoundsRule(_attention, mxu=_attention_mxu))
