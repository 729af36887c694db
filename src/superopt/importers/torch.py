"""PyTorch importers: `torch.fx.symbolic_trace` graphs and `torch.export` programs (ATen).

Both importers walk the captured FX graph once, in order, and keep for every FX node one of:

- a graph `Value` (the node computes on runtime inputs or on parameters);
- a `Const` (a tensor known at import time: buffers, lifted constants, and every node whose
  operands are all known; such nodes are evaluated with torch right away, so attention-mask
  arithmetic, position-id slicing and the like become weight data; where an op reads one,
  a known arange along one axis becomes `iota` and a triangle of ones `tri_mask` instead);
- an `Expanded` value (a broadcast from `aten.expand`, kept lazy for the element-wise op that
  reads it and materialised as `expand` only where an op needs the full tensor);
- plain Python values (shapes, scalars) and tuples of the above (multi-output ops).

Parameters become weights named by their fully qualified name, with data. The mapping from
a torch target to the IR lives in three tables (`ATEN`, `FX_FUNCTIONS`/`FX_METHODS`,
`FX_MODULES`). Unsupported operators are collected over the whole graph and reported at
once as an `UnsupportedOpsError`; no partial graph is ever returned.

Four spellings that transformers' modelling code writes out are recognised as the IR's
primitive while the graph is built (the replaced nodes are left unused and pruned):
RMSNorm (`x * rsqrt(mean(x^2) + eps)`, times its weight) as `rms_norm`, GELU's tanh form
as `gelu`, eager attention without a mask (`softmax(q @ k^T * scale) @ v`) as `attention`,
and `repeat_kv` (heads repeated in place) in front of SDPA as grouped-query `attention`. SDPA whose mask is known to be all-true or the causal triangle is `attention`;
other masks are decomposed.

The graph is the inference graph: dropout is the identity and batch norm uses the running
statistics; a module captured in training mode is refused where that would differ.
This module imports torch at the top; only import it lazily (`superopt.importers` does).
"""

from __future__ import annotations

import ast
import builtins
import functools
import math
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import fx, nn

from superopt.importers import composite
from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.importers.naming import UniqueNames
from superopt.ir.errors import IRError, ShapeError
from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.ir.opdef import get_op
from superopt.ir.ranges import LOOKUP_LIMIT, ValueRanges
from superopt.ir.types import DType

aten = torch.ops.aten

# ---- values the importer tracks per FX node -----------------------------------------


@dataclass(frozen=True, eq=False)
class Const:
    """A tensor known at import time; it becomes a weight with data only if an op reads it."""

    tensor: torch.Tensor
    name: str


@dataclass(frozen=True)
class Expanded:
    """`value` broadcast to `shape` (numpy rules); materialised only where an op needs it."""

    value: Value
    shape: tuple[int, ...]


@dataclass(frozen=True)
class _Missing:
    """An output of a multi-output op that the IR does not compute (e.g. layer-norm stats)."""

    what: str


@dataclass(frozen=True)
class _Complex:
    """A complex tensor as its real and imaginary parts (each a Value, Const or Expanded of
    the same shape): the IR has no complex type, and rotary embeddings written with complex
    products (DeepSeek-V2, Llama-4) need only products, sums and moves of them."""

    re: Any
    im: Any


class _Refuse(Exception):
    """A converter cannot map this particular use of an op; collected, never shown alone."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _live(x: Any) -> bool:
    return isinstance(x, Value | Expanded | _Complex)


def _leaves(x: Any) -> Iterator[Any]:
    if isinstance(x, list | tuple):
        for y in x:
            yield from _leaves(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _leaves(y)
    else:
        yield x


def _any_live(*xs: Any) -> bool:
    return any(_live(leaf) for x in xs for leaf in _leaves(x))


_TORCH_TO_IR: dict[torch.dtype, DType] = {
    torch.float32: DType.F32, torch.float64: DType.F32, torch.bfloat16: DType.BF16,
    torch.float16: DType.F16, torch.int64: DType.I64, torch.int32: DType.I32,
    torch.int16: DType.I32, torch.int8: DType.I32, torch.uint8: DType.I32,
    torch.bool: DType.BOOL,
}
_IR_TO_TORCH: dict[DType, torch.dtype] = {
    DType.F32: torch.float32, DType.BF16: torch.bfloat16, DType.F16: torch.float16,
    DType.I64: torch.int64, DType.I32: torch.int32, DType.BOOL: torch.bool,
}


def ir_dtype(dtype: torch.dtype) -> DType:
    """The IR dtype that holds a torch dtype (float64 is narrowed to f32: the IR has no f64)."""
    try:
        return _TORCH_TO_IR[dtype]
    except KeyError:
        raise _Refuse(f"tensors of dtype {dtype}") from None


def _numpy(t: torch.Tensor, dtype: DType) -> np.ndarray:
    t = t.detach().cpu().to(_IR_TO_TORCH[dtype])
    if dtype == DType.BF16:  # numpy has no bfloat16; DType.numpy stores it as float32
        t = t.to(torch.float32)
    return t.contiguous().numpy()


def _pair(v: Any, what: str = "value") -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise _Refuse(f"a {what} of length {len(v)} (expected 2-D)")
    return (v[0], v[1])


def _axis(d: int, rank: int) -> int:
    if not -max(rank, 1) <= d < max(rank, 1):
        raise _Refuse(f"dim {d} out of range for rank {rank}")
    return d % rank if rank else 0


def _broadcastable(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


def _mask_kind(mask: Any, lq: int, lk: int) -> str:
    """A known attention mask as "none" (keeps every score), "causal" (the top-left tril,
    torch's is_causal) or "other"; boolean masks keep True, additive ones keep 0."""
    if not isinstance(mask, Const):
        return "other"
    t = mask.tensor
    keep = t if t.dtype == torch.bool else t == 0
    if t.dtype != torch.bool and not bool(((t == 0) | (t <= _MASKED)).all()):
        return "other"  # a bias, not a mask
    keep = keep.expand(*keep.shape[:-2], lq, lk) if keep.dim() >= 2 else keep.expand(lq, lk)
    if bool(keep.all()):
        return "none"
    tril = torch.ones(lq, lk, dtype=torch.bool).tril()
    return "causal" if bool((keep == tril).all()) else "other"


_MASKED = float(torch.finfo(torch.float32).min)
# Known tensors up to this size are checked for being an iota or a triangular mask.
_CONSTANT_OP_MAX_ELEMENTS = 1 << 22
_IOTA_DTYPES = next(a.choices for a in get_op("iota").attrs if a.name == "dtype") or ()  # masked-out score: finite, so weights stay finite


# ---- the graph-building context: one emitter per tensor operation --------------------


class _Ctx:
    """Builds the IR for one capture; emitters accept Values, Consts, Expanded and scalars."""

    def __init__(self, name: str, fold_parameters: bool = False) -> None:
        self.b = GraphBuilder(name)
        self.fold_parameters = fold_parameters
        self._names = UniqueNames()
        self._consts: dict[tuple[int, DType], Value] = {}
        self._params: dict[str, Value] = {}
        self._keep: list[Const] = []  # keeps ids in _consts from being reused
        self._unit_scales: set[Value] = set()  # all-ones weights of fused RMSNorms
        self.ranges = ValueRanges(self.b)  # integer values' spans (lookups, index bounds)

    # ---- sources ---------------------------------------------------------------------

    def _claim(self, name: str) -> str:
        return self._names.claim(name)

    def input(self, name: str, shape: Sequence[int], dtype: torch.dtype, high: int = 0) -> Value:
        dt = ir_dtype(dtype)
        return self.b.input(self._claim(name), tuple(shape), dt.value, high=high)

    def param(self, name: str, tensor: torch.Tensor) -> Value:
        if name not in self._params:
            dt = ir_dtype(tensor.dtype)
            self._params[name] = self.b.weight(self._claim(name), tuple(tensor.shape), dt.value,
                                               data=_numpy(tensor, dt))
        return self._params[name]

    def tensor_attr(self, name: str, t: torch.Tensor) -> Any:
        """A parameter (a weight, unless parameters fold) or a buffer (a constant)."""
        if isinstance(t, nn.Parameter) and not self.fold_parameters:
            return self.param(name, t)
        return Const(t.detach(), name)

    def scalar(self, v: float | int | bool, dtype: DType) -> Value:
        if not dtype.is_float and isinstance(v, float) and not v.is_integer():
            raise _Refuse("an integer tensor combined with a non-integer scalar")
        v = float(v) if dtype.is_float else int(v)
        name = f"const.{dtype.value}.{v!r}"
        if name not in self._params:
            self._names.reserve(name)
            self._params[name] = self.b.weight(name, (), dtype.value,
                                               data=np.array(v, dtype=dtype.numpy))
        return self._params[name]

    def _weight(self, c: Const, dtype: DType | None) -> Value:
        dt = dtype or ir_dtype(c.tensor.dtype)
        key = (id(c), dt)
        if key not in self._consts:
            self._keep.append(c)
            t = c.tensor.detach().to(_IR_TO_TORCH[dt])
            self._consts[key] = (self._constant_op(t, dt)
                                 or self.b.weight(self._claim(c.name), tuple(c.tensor.shape),
                                                  dt.value, data=_numpy(c.tensor, dt)))
        return self._consts[key]

    def _constant_op(self, t: torch.Tensor, dt: DType) -> Value | None:
        """The IR constant op that computes a known tensor, where one does: positions
        (`arange`, broadcast along one axis) become `iota`, `tril`/`triu` of ones (causal
        masks) become `tri_mask`. Anything else stays weight data."""
        if not 2 <= t.numel() <= _CONSTANT_OP_MAX_ELEMENTS:
            return None
        shape = tuple(int(d) for d in t.shape)
        if dt == DType.BOOL:
            return self._tri_mask(t)
        if dt.value not in _IOTA_DTYPES:
            return None
        wide = t.to(torch.float64)
        for axis, n in enumerate(shape):
            if n < 2:
                continue
            ramp = torch.arange(n, dtype=torch.float64).reshape(
                [-1 if i == axis else 1 for i in range(len(shape))])
            if torch.equal(wide, ramp.expand(shape)):
                return self.b.op("iota", shape=shape, axis=axis, dtype=dt.value)
            return None  # a ramp along one axis is constant along every other
        return None

    def _tri_mask(self, t: torch.Tensor) -> Value | None:
        shape = tuple(int(d) for d in t.shape)
        if len(shape) < 2 or any(d != 1 for d in shape[:-2]):
            return None
        rows, cols = shape[-2:]
        m = t.reshape(rows, cols)
        counts = m.sum(dim=1).tolist()
        for lower in (True, False):
            # The diagonal from any row that is neither empty nor full, then checked whole.
            for i, n in enumerate(counts):
                if 0 < n < cols:
                    k = n - 1 - i if lower else cols - n - i
                    ones = torch.ones(rows, cols, dtype=torch.bool)
                    if torch.equal(m, ones.tril(k) if lower else ones.triu(k)):
                        v = self.b.op("tri_mask", rows=rows, cols=cols, diagonal=k, lower=lower)
                        return v if len(shape) == 2 else self.b.reshape(v, shape=shape)
                    break
        return None

    def value(self, x: Any, dtype: DType | None = None) -> Value:
        """`x` as a graph value: materialises broadcasts, constants and scalars."""
        if isinstance(x, Value):
            return x
        if isinstance(x, _Complex):
            raise _Refuse("a complex tensor where a real one is needed")
        if isinstance(x, Expanded):
            return self._materialise(x)
        if isinstance(x, Const):
            return self._weight(x, dtype)
        if isinstance(x, bool | int | float):
            return self.scalar(x, dtype or DType.F32)
        if isinstance(x, _Missing):
            raise _Refuse(f"use of {x.what}")
        raise _Refuse(f"an operand of type {type(x).__name__}")

    def loose(self, x: Any, dtype: DType | None = None) -> Value:
        """Like `value`, but a pending broadcast is left to the (broadcasting) consumer."""
        return x.value if isinstance(x, Expanded) else self.value(x, dtype)

    def _materialise(self, e: Expanded) -> Value:
        return self.b.op("expand", e.value, shape=e.shape)

    # ---- facts about operands --------------------------------------------------------

    def shape(self, x: Any) -> tuple[int, ...]:
        if isinstance(x, Value):
            return self.b.shape(x)
        if isinstance(x, _Complex):
            return self.shape(x.re)
        if isinstance(x, Expanded):
            return x.shape
        if isinstance(x, Const):
            return tuple(x.tensor.shape)
        if isinstance(x, bool | int | float):
            return ()
        raise _Refuse(f"the shape of a {type(x).__name__}")

    def rank(self, x: Any) -> int:
        return len(self.shape(x))

    def dtype(self, x: Any) -> DType:
        if isinstance(x, Value):
            return self.b.type_of(x).dtype
        if isinstance(x, Expanded):
            return self.b.type_of(x.value).dtype
        if isinstance(x, Const):
            return ir_dtype(x.tensor.dtype)
        return DType.F32 if isinstance(x, float) else DType.I64

    def torch_dtype(self, x: Any) -> torch.dtype:
        return _IR_TO_TORCH[self.dtype(x)]

    def conform(self, x: Any, shape: tuple[int, ...] | None, where: str) -> Any:
        """Check a converted value against torch's shape; finish broadcasts left lazy."""
        if isinstance(x, _Complex):
            return _Complex(self.conform(x.re, shape, where), self.conform(x.im, shape, where))
        if shape is None or not _live(x):
            return x
        have = self.shape(x)
        if have == shape:
            return x
        base = x.value if isinstance(x, Expanded) else x
        if _broadcastable(self.b.shape(base), shape):
            return Expanded(base, shape)
        raise ModelImportError(f"{where}: imported shape {list(have)} differs from torch's "
                               f"{list(shape)} (importer bug)")

    # ---- element-wise arithmetic -----------------------------------------------------

    @staticmethod
    def fold(fn: Callable[..., Any], *xs: Any) -> Any:
        """Evaluate `fn` on operands that are all known (Consts and Python scalars)."""
        args = [x.tensor if isinstance(x, Const) else x for x in xs]
        out = fn(*args)
        return Const(out, "const.folded") if isinstance(out, torch.Tensor) else out

    def _common_dtype(self, op: str, *xs: Any) -> DType:
        dts = {self.dtype(a) for a in xs if _live(a)}
        if len(dts) > 1:
            raise _Refuse(f"{op} of mixed dtypes {sorted(d.value for d in dts)}")
        if dts:
            return dts.pop()
        return self.dtype(xs[0])

    def _ew(self, op: str, x: Any, y: Any) -> Value:
        live = [t for t in (x, y) if _live(t)]
        if len({self.dtype(t) for t in live}) > 1 and all(self.rank(t) for t in live):
            # Tensors of mixed dtypes (a float times an integer mask): torch promotes both
            # to one type first. Zero-dim tensors promote by other rules, and stay refused.
            to = functools.reduce(torch.promote_types, [self.torch_dtype(t) for t in live])
            x, y = (self.cast(t, to) if _live(t) and self.torch_dtype(t) != to else t
                    for t in (x, y))
        dt = self._common_dtype(op, x, y)
        return self.b.op(op, self.loose(x, dt), self.loose(y, dt))

    def add(self, x: Any, y: Any, alpha: float = 1) -> Any:
        if alpha != 1:
            y = self.mul(y, alpha)
        if not _live(x) and not _live(y):
            return self.fold(operator.add, x, y)
        if not _live(x):
            x, y = y, x
        if isinstance(y, Const) and y.tensor.numel() and not bool(y.tensor.any()) \
                and _broadcastable(tuple(y.tensor.shape), self.shape(x)) \
                and y.tensor.dtype in _TORCH_TO_IR and ir_dtype(y.tensor.dtype) == self.dtype(x):
            # x + 0 (an all-ones padding mask turned additive, as BERT's eager attention
            # adds it): nothing to compute, and the attention pattern stays visible.
            return x
        return self._ew("ewadd", x, y)

    def sub(self, x: Any, y: Any, alpha: float = 1) -> Any:
        if alpha != 1:
            y = self.mul(y, alpha)
        if not _live(x) and not _live(y):
            return self.fold(operator.sub, x, y)
        return self._ew("sub", x, y)

    def mul(self, x: Any, y: Any) -> Any:
        if not _live(x) and not _live(y):
            return self.fold(operator.mul, x, y)
        if not _live(x):
            x, y = y, x
        fused = self._rms_norm_fusion(x, y)
        if fused is None:
            fused = self._gelu_tanh_fusion(x, y)
        if fused is not None:
            return fused
        if self.dtype(x) == DType.BOOL and not isinstance(y, bool | int | float) \
                and self.dtype(y) == DType.BOOL:
            return self.logical("and", x, y)  # a product of masks is their conjunction
        if self.rank(y) == 0 and not (_live(y) and self.dtype(y) != self.dtype(x)):
            dt = self.dtype(x)
            if dt == DType.BOOL:
                raise _Refuse("a product of a boolean tensor and a number")
            return self.b.smul(self.loose(x), self.value(y, dt))
        return self._ew("ewmul", x, y)

    # ---- RMSNorm written out (Llama, T5, Gemma): x * rsqrt(mean(x^2) + eps) [* w] ------

    def _node(self, v: Any) -> Any:
        return self.b.nodes[v.node] if isinstance(v, Value) else None

    def _scalar_data(self, v: Value) -> float | None:
        n = self._node(v)
        if n is None or n.op != "weight":
            return None
        data = self.b.weights.get(n.attr("name"))
        return float(data) if data is not None and data.size == 1 else None

    def _rms_norm_fusion(self, x: Any, y: Any) -> Value | None:
        """The IR's `rms_norm` for the products that end a written-out RMSNorm.

        `x * rsqrt(mean(x^2 over the last dims, keepdim) + eps)` becomes
        `rms_norm(x, ones)`, and `w * rms_norm(x, ones)` with `w` of the normalised shape
        becomes `rms_norm(x, w)`: rules about RMSNorm (its weight folded into the next
        matmul) see one node. The nodes it replaces are left unused and pruned at build.
        """
        for a, b in ((x, y), (y, x)):
            node = self._node(b)
            if node is None:
                continue
            if node.op == "rsqrt" and isinstance(a, Value):
                eps_axis = self._rms_denominator(node.inputs[0], a)
                if eps_axis is not None:
                    eps, axis = eps_axis
                    ns = self.b.shape(a)[axis:]
                    ones = self.value(Const(torch.ones(ns), "const.ones"), self.dtype(a))
                    self._unit_scales.add(ones)
                    return self.b.op("rms_norm", a, ones, axis=axis, eps=eps)
            if node.op == "rms_norm" and node.inputs[1] in self._unit_scales and _live(a):
                ns = self.b.shape(node.inputs[0])[node.attr("axis"):]
                w = a.value if isinstance(a, Expanded) else a
                if self.b.shape(w) == ns and self.dtype(w) == self.dtype(node.inputs[0]):
                    return self.b.op("rms_norm", node.inputs[0], w, axis=node.attr("axis"),
                                     eps=node.attr("eps"))
        return None

    def _is_scalar(self, v: Value, want: float) -> bool:
        got = self._scalar_data(v)
        return got is not None and math.isclose(got, want, rel_tol=1e-6)

    def _smul_of(self, v: Any, scale: float) -> Value | None:
        """x if v is smul(x, scale)."""
        n = self._node(v)
        if n is not None and n.op == "smul" and self._is_scalar(n.inputs[1], scale):
            return n.inputs[0]
        return None

    def _gelu_tanh_fusion(self, x: Any, y: Any) -> Value | None:
        """GELU's tanh form written out (GPT-2's and Phi's `gelu_new`):
        `0.5 x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))` becomes
        `gelu(x, approximate="tanh")`; the nodes it replaces are pruned at build."""
        for half, rest in ((x, y), (y, x)):
            x0 = self._smul_of(half, 0.5)
            add = self._node(rest)
            if x0 is None or add is None or add.op != "ewadd":
                continue
            for t, one in (add.inputs, tuple(reversed(add.inputs))):
                tanh = self._node(t)
                if tanh is None or tanh.op != "tanh" or not self._is_scalar(one, 1.0):
                    continue
                inner = self._node(self._smul_of(tanh.inputs[0], math.sqrt(2.0 / math.pi)))
                if inner is None or inner.op != "ewadd" or x0 not in inner.inputs:
                    continue
                other = inner.inputs[1] if inner.inputs[0] == x0 else inner.inputs[0]
                cube = self._node(self._smul_of(other, 0.044715))
                if cube is not None and cube.op == "pow" and cube.attr("exponent") == 3.0 \
                        and cube.inputs[0] == x0:
                    return self.b.op("gelu", x0, approximate="tanh")
        return None

    def _eager_attention(self, probs: Value, v: Value) -> Value | None:
        """`softmax(q @ k^T [* scale]) @ v` written out (eager attention without a mask:
        BERT's and MobileViT's modelling code) as the IR's `attention`."""
        soft = self._node(probs)
        rank = len(self.b.shape(probs))
        if soft is None or soft.op != "softmax" or rank < 3 or soft.attr("axis") != rank - 1:
            return None
        scores, scale = soft.inputs[0], 1.0
        sm = self._node(scores)
        if sm is not None and sm.op == "smul":
            got = self._scalar_data(sm.inputs[1])
            if got is None or got == 0.0:
                return None
            scores, scale = sm.inputs[0], got
        qk = self._node(scores)
        if qk is None or qk.op != "matmul":
            return None
        q, kt = qk.inputs
        tr = self._node(kt)
        swap = (*range(rank - 2), rank - 1, rank - 2)
        if tr is None or tr.op != "transpose" or tuple(tr.attr("perm")) != swap:
            return None
        k = tr.inputs[0]
        sq, sk, sv = self.b.shape(q), self.b.shape(k), self.b.shape(v)
        if not (len(sq) == len(sk) == len(sv) == rank and sk[:-1] == sv[:-1]
                and sq[:-2] == sk[:-2]):
            return None
        try:
            return self.b.op("attention", q, k, v, scale=scale, causal=False)
        except ShapeError:
            return None

    def _rms_denominator(self, v: Value, x: Value) -> tuple[float, int] | None:
        """(eps, first normalised axis) if v is mean(x^2 over the last dims, keepdim) + eps."""
        add = self._node(v)
        if add is None or add.op != "ewadd":
            return None
        for m, e in (add.inputs, tuple(reversed(add.inputs))):
            mean, eps = self._node(m), self._scalar_data(e)
            if mean is None or mean.op != "reduce_mean" or eps is None:
                continue
            sq = self._node(mean.inputs[0])
            squares_x = sq is not None and (
                (sq.op == "pow" and sq.attr("exponent") == 2.0 and sq.inputs[0] == x)
                or (sq.op == "ewmul" and sq.inputs == (x, x)))
            rank = len(self.b.shape(x))
            axes = tuple(mean.attr("axes"))
            if squares_x and mean.attr("keepdims") and axes and \
                    axes == tuple(range(rank - len(axes), rank)):
                return eps, rank - len(axes)
        return None

    def div(self, x: Any, y: Any, rounding_mode: str | None = None) -> Any:
        if not _live(x) and not _live(y):
            return self.fold(lambda a, b: torch.div(a, b, rounding_mode=rounding_mode), x, y)
        if rounding_mode is not None:
            # Integers of known range by a positive constant: a lookup (a mixture of
            # experts' `perm // top_k`, as torch's decompositions write it).
            span = self.value_range(x) if not self.dtype(x).is_float else None
            if isinstance(y, int) and y > 0 and span is not None:
                if rounding_mode == "floor" or span[0] >= 0:  # trunc = floor when >= 0
                    return self.floor_divide(x, y)
                return self.lookup(x, lambda v: torch.div(v, y, rounding_mode="trunc"),
                                   "truncated division")
            raise _Refuse(f"division of a computed tensor with rounding_mode={rounding_mode!r}")
        if not self.dtype(x).is_float and not (_live(y) and self.dtype(y).is_float):
            raise _Refuse("true division of an integer tensor")
        if not _live(y):
            # A known divisor: multiply by its reciprocal, so the scale is a plain product
            # that rules can move (attention's 1/sqrt(d) into the query projection).
            if isinstance(y, Const):
                t = y.tensor if y.tensor.is_floating_point() else y.tensor.to(torch.float32)
                return self.mul(x, Const(torch.reciprocal(t), y.name + ".reciprocal"))
            if y == 0:
                raise _Refuse("division by zero")
            return self.mul(x, 1.0 / y)
        return self._ew("div", x, y)

    def neg(self, x: Any) -> Any:
        return self.unary("neg", x)

    def unary(self, op: str, x: Any, **attrs: Any) -> Any:
        v = self.value(x)
        try:
            return self.b.op(op, v, **attrs)
        except ShapeError as e:  # e.g. exp of an integer tensor: the op's own shape rule
            raise _Refuse(f"{op} of a {self.b.type_of(v)} tensor ({_first_line(e)})") from None

    def silu(self, x: Any) -> Value:
        return self.unary("silu", x)

    def abs(self, x: Any) -> Value:
        v = self.value(x)
        return self.b.op("maximum", v, self.b.op("neg", v))

    def pow(self, x: Any, exponent: Any) -> Any:
        if _live(exponent):
            raise _Refuse("a power with a computed exponent")
        if not _live(x):
            return self.fold(torch.pow, x, exponent)
        if isinstance(exponent, Const):
            if exponent.tensor.numel() != 1:
                raise _Refuse("a power with a tensor of exponents")
            exponent = exponent.tensor.item()
        if exponent == 1:
            return x
        if not self.dtype(x).is_float:
            raise _Refuse("a power of an integer tensor")
        return self.b.op("pow", self.value(x), exponent=float(exponent))

    def binary(self, op: str, x: Any, y: Any) -> Any:
        """maximum / minimum: element-wise, broadcasting, scalars as rank-0 weights."""
        if not _live(x):
            x, y = y, x  # both are symmetric
        return self._ew(op, x, y)

    def clamp(self, x: Any, lo: Any = None, hi: Any = None) -> Any:
        if lo is not None:
            x = self.binary("maximum", x, lo)
        if hi is not None:
            x = self.binary("minimum", x, hi)
        return x

    def compare(self, op: str, x: Any, y: Any) -> Any:
        """eq / ne / lt / le / gt / ge as the IR's eq, lt, gt (ne, le, ge negated)."""
        flip = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "eq": "eq", "ne": "ne"}
        if not _live(x):
            x, y, op = y, x, flip[op]
        negate = {"ne": "eq", "le": "gt", "ge": "lt"}
        base = negate.get(op, op)
        dt = self._common_dtype(op, x, y)
        out = self.b.op(base, self.loose(x, dt), self.loose(y, dt))
        return self.logical_not(out) if op in negate else out

    def logical_not(self, x: Any) -> Value:
        v = self.value(x)
        if self.b.type_of(v).dtype != DType.BOOL:
            return self.compare("eq", v, 0)
        return self.b.op("eq", v, self.scalar(False, DType.BOOL))

    def logical(self, op: str, x: Any, y: Any) -> Any:
        """and / or of boolean tensors as selects: a & b = where(a, b, false). An integer
        operand known to hold only 0 and 1 (a mask kept as integers, CPM-Ant's) is that
        mask; the result then has torch's promoted integer type."""
        if not _live(x):
            x, y = y, x
        ints = [t for t in (x, y) if self.dtype(t) != DType.BOOL]
        for t in ints:
            bound = self.index_bound(t)
            if self.dtype(t).is_float or bound is None or bound > 2:
                raise _Refuse(f"logical {op} of a non-boolean tensor (values not known to be "
                              "0 or 1)")
        x, y = (self.compare("ne", t, 0) if self.dtype(t) != DType.BOOL else t for t in (x, y))
        out = self.where(x, y, False) if op == "and" else self.where(x, True, y)
        if not ints:
            return out
        dtypes = [self.torch_dtype(t) for t in ints]
        return self.cast(out, functools.reduce(torch.promote_types, dtypes))

    def where(self, cond: Any, x: Any, y: Any) -> Any:
        if not _any_live(cond, x, y):
            return self.fold(torch.where, cond, x, y)
        if isinstance(cond, Const) and cond.tensor.numel():
            # A known condition that picks one side everywhere (an all-true padding mask):
            # that side, broadcast by the caller's shape check if it is the smaller.
            keep = cond.tensor.bool()
            side = x if bool(keep.all()) else y if not bool(keep.any()) else None
            if _live(side) and self.dtype(side) == self._common_dtype(
                    "where", *[b for b in (x, y) if _live(b)]):
                return side
        live = [b for b in (x, y) if _live(b)]
        if live:
            dt = self._common_dtype("where", *live)
        elif isinstance(x, Const) or isinstance(y, Const):
            dt = self.dtype(x if isinstance(x, Const) else y)
        else:
            dt = DType.BOOL if isinstance(x, bool) and isinstance(y, bool) else \
                DType.F32 if isinstance(x, float) or isinstance(y, float) else DType.I64
        c = self.loose(cond, DType.BOOL)
        if self.b.type_of(c).dtype != DType.BOOL:
            c = self.logical_not(self.logical_not(c))
        return self.b.op("where", c, self.loose(x, dt), self.loose(y, dt))

    def cumsum(self, x: Any, dim: int) -> Any:
        """Running sum along `dim` as a product with an upper-triangular matrix of ones."""
        rank = self.rank(x)
        d = _axis(dim, rank)
        n = self.shape(x)[d]
        dt = self.dtype(x)
        if dt == DType.BOOL:
            raise _Refuse("cumsum of a boolean tensor")
        tri = Const(torch.ones(n, n, dtype=_IR_TO_TORCH[dt]).triu(), "const.cumsum")
        y = self.swap(x, d, -1) if d != rank - 1 else x
        y = self.matmul(y, tri)
        return self.swap(y, d, -1) if d != rank - 1 else y

    # ---- matrix products -------------------------------------------------------------

    def matmul(self, a: Any, b: Any) -> Value:
        av, bv = self.value(a), self.value(b)
        sa, sb = self.b.shape(av), self.b.shape(bv)
        if not sa or not sb:
            raise _Refuse("matmul of a rank-0 tensor")
        fused = self._eager_attention(av, bv)
        if fused is not None:
            return fused
        if len(sa) == 1:
            av = self.reshape(av, (1, sa[0]))
        if len(sb) == 1:
            bv = self.reshape(bv, (sb[0], 1))
        y = self.b.matmul(av, bv)
        out = list(self.b.shape(y))
        if len(sb) == 1:
            out.pop(-1)
        if len(sa) == 1:
            out.pop(-1 if len(sb) == 1 else -2)
        return self.reshape(y, tuple(out))

    def linear(self, x: Any, w: Any, bias: Any = None) -> Any:
        if self.rank(w) != 2:
            raise _Refuse(f"linear with a rank-{self.rank(w)} weight")
        y = self.matmul(x, self.transpose(w, (1, 0)))
        return y if bias is None else self.add(y, bias)

    def addmm(self, bias: Any, m1: Any, m2: Any, beta: float = 1, alpha: float = 1) -> Any:
        y = self.matmul(m1, m2)
        if alpha != 1:
            y = self.mul(y, alpha)
        if beta == 0:
            return y
        return self.add(y, self.mul(bias, beta) if beta != 1 else bias)

    def sdpa(self, q: Any, k: Any, v: Any, mask: Any = None, dropout_p: float = 0.0,
             is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Any:
        """The IR's `attention` where the mask is none, all-true or the causal triangle;
        otherwise decomposed (matmul, scale, mask, softmax, matmul)."""
        if dropout_p:
            raise _Refuse("attention dropout")
        for t in (q, k, v):
            if self.rank(t) < 3:
                raise _Refuse(f"attention over a rank-{self.rank(t)} tensor")
        if self.shape(k)[-3] == self.shape(q)[-3] and self.shape(v)[-3] == self.shape(q)[-3]:
            k0, v0 = self._unrepeated_heads(k), self._unrepeated_heads(v)
            if k0 is not None and v0 is not None and self.shape(k0) == self.shape(v0)[:-1] + \
                    self.shape(k0)[-1:]:
                k, v, enable_gqa = k0, v0, True
        lq, lk = self.shape(q)[-2], self.shape(k)[-2]
        heads, kv_heads = self.shape(q)[-3], self.shape(k)[-3]
        if heads != kv_heads and (not enable_gqa or heads % kv_heads):
            raise _Refuse(f"attention of {heads} query heads over {kv_heads} key heads")
        causal = bool(is_causal)
        if mask is not None and not _live(mask):
            kind = _mask_kind(mask, lq, lk)
            if kind == "none" or (kind == "causal" and not causal):
                mask, causal = None, causal or kind == "causal"
        scale_attr = 0.0 if scale is None else float(scale)
        if mask is None:
            qv, kv, vv = self.value(q), self.value(k), self.value(v)
            dt = self._common_dtype("attention", qv, kv, vv)
            if dt.is_float:
                return self.b.op("attention", qv, kv, vv, scale=scale_attr, causal=causal)
        # Decomposed: the explicit mask is added (a boolean one as a select).
        if heads != kv_heads:
            k, v = self._repeat_heads(k, heads // kv_heads), self._repeat_heads(v, heads // kv_heads)
        e = self.shape(q)[-1]
        s = self.matmul(q, self.swap(k, -2, -1))
        s = self.mul(s, 1.0 / math.sqrt(e) if scale is None else scale)
        if causal:
            s = self.where(Const(torch.ones(lq, lk, dtype=torch.bool).tril(), "const.causal"),
                           s, _MASKED)
        if mask is not None:
            if self.dtype(mask) == DType.BOOL:
                s = self.where(mask, s, _MASKED)
            else:
                s = self.add(s, mask)
        return self.matmul(self.softmax(s, -1), v)

    def _unrepeated_heads(self, x: Any) -> Value | None:
        """k0 if x is k0's heads each repeated in place (transformers' repeat_kv:
        k0[:, :, None].expand(B, Hkv, g, L, D).reshape(B, Hkv * g, L, D)), else None."""
        outer = self._node(x)
        if outer is None or outer.op != "reshape":
            return None
        exp = self._node(outer.inputs[0])
        if exp is None or exp.op != "expand":
            return None
        inner = self._node(exp.inputs[0])
        if inner is None or inner.op != "reshape":
            return None
        k0 = inner.inputs[0]
        s0, s1, s2 = self.b.shape(k0), self.b.shape(inner.outputs[0]), tuple(exp.attr("shape"))
        if len(s0) < 3 or s1 != (*s0[:-2], 1, *s0[-2:]):
            return None
        if s2[:-3] != s0[:-2] or s2[-2:] != s0[-2:] or \
                self.shape(x) != (*s0[:-3], s0[-3] * s2[-3], *s0[-2:]):
            return None
        return k0

    def _repeat_heads(self, x: Any, group: int) -> Any:
        """(..., H, L, D) -> (..., H * group, L, D), each head repeated `group` times in place
        (torch's repeat_interleave, as SDPA's enable_gqa does)."""
        shape = self.shape(x)
        y = self.unsqueeze(x, -3)
        y = self.expand(y, (*shape[:-2], group, *shape[-2:]))
        return self.reshape(y, (*shape[:-3], shape[-3] * group, *shape[-2:]))

    # ---- convolution, normalisation, pooling -----------------------------------------

    def _batched(self, x: Any, what: str) -> tuple[Value, bool]:
        v = self.value(x)
        shape = self.b.shape(v)
        if len(shape) == 3:  # unbatched C, H, W
            return self.reshape(v, (1, *shape)), True
        if len(shape) != 4:
            raise _Refuse(f"{what} of a rank-{len(shape)} input (only 2-D, NCHW)")
        return v, False

    def _unbatch(self, y: Value, unbatched: bool) -> Value:
        return self.reshape(y, self.b.shape(y)[1:]) if unbatched else y

    def conv1d(self, x: Any, w: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
               groups: int) -> Any:
        """A 1-D convolution as a 2-D one over a height of 1."""
        def first(v: Any) -> int:
            return v if isinstance(v, int) else int(v[0])

        shape = self.shape(x)
        if len(shape) not in (2, 3):
            raise _Refuse(f"conv1d of a rank-{len(shape)} input")
        x2 = self.unsqueeze(x, -2)
        w2 = self.unsqueeze(w, -2)
        pad: Any = padding if isinstance(padding, str) else (0, first(padding))
        y = self.conv2d(x2, w2, bias, (1, first(stride)), pad, (1, first(dilation)), groups)
        return self.squeeze(y, -2)

    def conv2d(self, x: Any, w: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
               groups: int) -> Any:
        if self.rank(w) == 3:
            return self.conv1d(x, w, bias, stride, padding, dilation, groups)
        if self.rank(w) != 4:
            raise _Refuse(f"convolution with a rank-{self.rank(w)} kernel (only conv2d)")
        xv, unbatched = self._batched(x, "convolution")
        wv = self.value(w)
        st, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
        kh, kw = self.b.shape(wv)[2:]
        if isinstance(padding, str):
            if padding == "valid":
                pads = (0, 0, 0, 0)
            elif padding == "same":  # torch puts the odd extra cell at the end
                th, tw = dil[0] * (kh - 1), dil[1] * (kw - 1)
                pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
            else:
                raise _Refuse(f"padding {padding!r}")
        else:
            ph, pw = _pair(padding, "padding")
            pads = (ph, ph, pw, pw)
        y = self.b.conv2d(xv, wv, stride=st, padding=pads, dilation=dil, groups=int(groups))
        if bias is not None:
            y = self.add(y, self.reshape(bias, (-1, 1, 1)))
        return self._unbatch(self.value(y), unbatched)

    def conv_transpose(self, x: Any, w: Any, bias: Any, stride: Any, padding: Any,
                       output_padding: Any, groups: int, dilation: Any) -> Any:
        """conv_transpose1d/2d (`superopt.importers.transposed`); 1-D over a height of 1."""
        from superopt.importers.transposed import conv_transpose2d

        if isinstance(w, Const):
            known, name = w.tensor.detach(), w.name
        else:  # a parameter: its weight node's data
            node = self.b.nodes[w.node] if isinstance(w, Value) else None
            if node is None or node.op != "weight" or node.attr("name") not in self.b.weights:
                raise _Refuse("a transposed convolution with a computed kernel")
            name = str(node.attr("name"))
            known = torch.from_numpy(np.array(self.b.weights[name]))
        kernel = known.double().numpy()
        if kernel.ndim == 3:
            if self.rank(x) != 3:
                raise _Refuse(f"conv_transpose1d of a rank-{self.rank(x)} input")
            y = self.conv_transpose(self.unsqueeze(x, -2), Const(known.unsqueeze(-2), name),
                                    bias, (1, _pair(stride)[0]), (0, _pair(padding)[0]),
                                    (0, _pair(output_padding)[0]), groups,
                                    (1, _pair(dilation)[0]))
            return self.squeeze(y, -2)
        if kernel.ndim != 4:
            raise _Refuse(f"transposed convolution with a rank-{kernel.ndim} kernel")
        xv, unbatched = self._batched(x, "transposed convolution")
        ph, pw = _pair(padding, "padding")
        dt = _IR_TO_TORCH[self.dtype(xv)]
        try:
            y: Any = conv_transpose2d(
                self.b, xv, kernel,
                lambda a, hint: self.value(Const(torch.from_numpy(a).to(dt), f"{name}.{hint}")),
                _pair(stride, "stride"), (ph, ph, pw, pw), _pair(output_padding),
                _pair(dilation, "dilation"), int(groups))
        except ValueError as e:
            raise _Refuse(f"transposed convolution: {e}") from None
        if bias is not None:
            y = self.add(y, self.reshape(bias, (-1, 1, 1)))
        return self._unbatch(self.value(y), unbatched)

    def layer_norm(self, x: Any, normalized_shape: Any, w: Any, bias: Any, eps: float) -> Value:
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        rank = self.rank(x)
        if tuple(self.shape(x)[rank - len(ns):]) != ns:
            raise _Refuse(f"layer_norm over {list(ns)} of a {list(self.shape(x))} tensor")
        dt = self.dtype(x)
        g = self.value(Const(torch.ones(ns), "const.ones") if w is None else w, dt)
        b = self.value(Const(torch.zeros(ns), "const.zeros") if bias is None else bias, dt)
        return self.b.layer_norm(self.value(x), g, b, axis=rank - len(ns), eps=float(eps))

    def group_norm(self, x: Any, groups: int, w: Any, bias: Any, eps: float) -> Any:
        """GroupNorm: the channels (dim 1) in `groups` groups, each sample's group
        normalised over its channels and positions (a layer norm of the (N, G, rest) view),
        then the per-channel weight and bias."""
        shape = tuple(self.shape(x))
        groups = int(groups)
        if len(shape) < 2 or groups < 1 or shape[1] % groups:
            raise _Refuse(f"group_norm of {groups} groups over a {list(shape)} tensor")
        view = self.reshape(x, (shape[0], groups, math.prod(shape[1:]) // groups))
        y = self.reshape(self.layer_norm(view, self.shape(view)[2:], None, None, eps), shape)
        return self._channel_affine(y, w, bias)

    def _channel_affine(self, y: Any, w: Any, bias: Any) -> Any:
        """y times a per-channel (dim 1) weight plus a per-channel bias, either absent."""
        per_channel = (-1,) + (1,) * (self.rank(y) - 2)
        if w is not None:
            y = self.mul(y, self.reshape(w, per_channel))
        if bias is not None:
            y = self.add(y, self.reshape(bias, per_channel))
        return y

    def batch_stats_norm(self, x: Any, w: Any, bias: Any, eps: float) -> Any:
        """Batch norm in training mode without running statistics (nothing to update):
        each channel (dim 1) normalised by its mean and biased variance over every other
        axis, a layer norm of the (C, rest) view, then the per-channel weight and bias.
        BiT standardises its convolution weights this way."""
        shape = tuple(self.shape(x))
        if len(shape) < 2:
            raise _Refuse("batch norm of a rank < 2 input")
        perm = (1, 0, *range(2, len(shape)))  # its own inverse
        moved = self.transpose(x, perm)
        rows = self.reshape(moved, (shape[1], math.prod(shape) // shape[1]))
        y = self.layer_norm(rows, self.shape(rows)[1:], None, None, eps)
        y = self.transpose(self.reshape(y, self.shape(moved)), perm)
        return self._channel_affine(y, w, bias)

    def resample(self, x: Any, op: Callable[[torch.Tensor, int | None], torch.Tensor]) -> Any:
        """An interpolation (nearest, linear, cubic; any corner rule) of x's spatial dims,
        as gathers times weights (`superopt.importers.resample`). `op(t, k)` runs the
        interpolation on `t` with only spatial axis k resized (the others kept as they
        are), `op(t, None)` as given: each axis's map is read back from torch itself."""
        from superopt.importers.resample import read_maps, resample

        shape = tuple(self.shape(x))
        if len(shape) < 3:
            raise _Refuse(f"interpolation of a rank-{len(shape)} tensor")

        def run(t: np.ndarray, k: int | None) -> np.ndarray:
            with torch.no_grad():
                return op(torch.from_numpy(t), k).numpy()
        try:
            found = read_maps(shape[2:], run, lambda t: run(t, None))
        except ValueError as e:
            raise _Refuse(str(e)) from None
        except RuntimeError as e:  # torch refused the arguments on the probes
            raise _Refuse(f"its interpolation could not be read from torch "
                          f"({_first_line(e)})") from None
        dt = _IR_TO_TORCH[self.dtype(x)]
        return resample(
            x, len(shape), [(2 + k, m) for k, m in enumerate(found)],
            gather=lambda v, a, idx: self.gather(v, Const(torch.from_numpy(idx), "resize.index"),
                                                 a),
            scale=lambda v, w: self.mul(v, Const(torch.from_numpy(w).to(dt), "resize.weight")),
            add=self.add)

    def einsum(self, equation: str, operands: Sequence[Any]) -> Any:
        """torch.einsum as transposes, reshapes, sums and batched matmuls
        (`superopt.importers.einsum`)."""
        from superopt.importers.einsum import einsum

        try:
            return einsum(equation, list(operands), [self.shape(x) for x in operands], self.prim)
        except ValueError as e:
            raise _Refuse(f"einsum: {e}") from None

    @property
    def prim(self) -> Any:
        """This importer's ops for `superopt.importers.composite`."""
        from superopt.importers.composite import Prim

        return Prim[Any](
            unary=lambda op, x: self.neg(x) if op == "neg" else self.unary(op, x),
            add=self.add, mul=self.mul, minimum=lambda x, v: self.binary("minimum", x, v),
            reduce=lambda op, x, axes, keep: self.reduce(op, x, list(axes), keep),
            shape=lambda x: tuple(self.shape(x)), reshape=self.reshape,
            transpose=self.transpose, expand=self.expand, matmul=self.matmul)

    def prelu(self, x: Any, w: Any) -> Any:
        """relu(x) + w * min(x, 0), w one per channel (dim 1) or one for all."""
        rank = self.rank(x)
        count = math.prod(self.shape(w))
        slope = self.reshape(w, (count,) + (1,) * (rank - 2)) if count > 1 and rank > 2 else \
            self.reshape(w, (count,) if count > 1 else ())
        return self.add(self.unary("relu", x), self.mul(self.binary("minimum", x, 0.0), slope))

    def weight_norm(self, v: Any, g: Any, dim: int) -> Any:
        """torch's weight normalisation: v * g / ||v||, the norm over every dim but `dim`
        (every dim for -1): wav2vec2's positional convolution."""
        rank = self.rank(v)
        axes = list(range(rank)) if dim == -1 else [i for i in range(rank) if i != dim % rank]
        norm = self.unary("sqrt", self.reduce("reduce_sum", self.mul(v, v), axes, True))
        return self.mul(v, self.div(g, norm))

    def vector_norm(self, x: Any, order: float, dims: Any, keepdim: bool) -> Any:
        """linalg.vector_norm of orders 1, 2 and inf (ConvNeXt-V2's response norm is the
        2-norm over positions): sum |x|, sqrt(sum x*x), max |x|."""
        if order == 2:
            return self.unary("sqrt", self.reduce("reduce_sum", self.mul(x, x), dims, keepdim))
        if order == 1:
            return self.reduce("reduce_sum", self.abs(x), dims, keepdim)
        if order == math.inf:
            return self.reduce("reduce_max", self.abs(x), dims, keepdim)
        raise _Refuse(f"vector norm of order {order} (only 1, 2 and inf)")

    def rms_norm(self, x: Any, normalized_shape: Any, w: Any, eps: float | None) -> Value:
        ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        rank = self.rank(x)
        if tuple(self.shape(x)[rank - len(ns):]) != ns:
            raise _Refuse(f"rms_norm over {list(ns)} of a {list(self.shape(x))} tensor")
        dt = self.dtype(x)
        if eps is None:  # torch's default: the dtype's machine epsilon
            eps = float(torch.finfo(_IR_TO_TORCH[dt]).eps)
        g = self.value(Const(torch.ones(ns), "const.ones") if w is None else w, dt)
        return self.b.op("rms_norm", self.value(x), g, axis=rank - len(ns), eps=float(eps))

    def batch_norm(self, x: Any, w: Any, bias: Any, mean: Any, var: Any, eps: float) -> Value:
        if mean is None or var is None:
            raise _Refuse("batch norm without running statistics")
        if self.rank(x) < 2:
            raise _Refuse("batch norm of a rank < 2 input")
        c = self.shape(x)[1]
        dt = self.dtype(x)
        ops = [self.value(Const(torch.ones(c), "const.ones") if w is None else w, dt),
               self.value(Const(torch.zeros(c), "const.zeros") if bias is None else bias, dt),
               self.value(mean, dt), self.value(var, dt)]
        return self.b.batch_norm(self.value(x), *ops, eps=float(eps))

    def _pool_pads(self, shape: tuple[int, ...], k: tuple[int, int], s: tuple[int, int],
                   p: tuple[int, int], ceil_mode: bool) -> tuple[list[int], bool]:
        """Explicit pads; with ceil_mode the extra end cells that torch's rounding adds."""
        pads = [p[0], p[0], p[1], p[1]]
        grew = False
        if ceil_mode:
            for i, n in enumerate(shape[2:]):
                span = n + 2 * p[i] - k[i]
                floor_out, ceil_out = span // s[i] + 1, -(-span // s[i]) + 1
                if (ceil_out - 1) * s[i] >= n + p[i]:  # last window must start inside
                    ceil_out -= 1
                if ceil_out > floor_out:
                    pads[2 * i + 1] += (ceil_out - 1) * s[i] + k[i] - (n + 2 * p[i])
                    grew = True
        return pads, grew

    def max_pool2d(self, x: Any, kernel: Any, stride: Any = None, padding: Any = 0,
                   dilation: Any = 1, ceil_mode: bool = False) -> Any:
        k = _pair(kernel, "kernel")
        s = _pair(stride, "stride") if stride else k
        if _pair(dilation, "dilation") != (1, 1):
            raise _Refuse("dilated max pooling")
        xv, unbatched = self._batched(x, "max pooling")
        pads, _ = self._pool_pads(self.b.shape(xv), k, s, _pair(padding), ceil_mode)
        y = self.b.pool2d_max(xv, kernel=k, stride=s, padding=tuple(pads))
        return self._unbatch(y, unbatched)

    def avg_pool2d(self, x: Any, kernel: Any, stride: Any = None, padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: int | None = None) -> Any:
        k = _pair(kernel, "kernel")
        s = _pair(stride, "stride") if stride else k
        if divisor_override is not None:
            raise _Refuse("average pooling with divisor_override")
        xv, unbatched = self._batched(x, "average pooling")
        h, w = self.b.shape(xv)[2:]
        if not any(_pair(padding)) and k[0] >= h and k[1] >= w and ceil_mode \
                and (k[0], k[1]) != (h, w):
            # One window wider than the map (EfficientNet's pooler: a kernel of 1280 and
            # ceil_mode over a map of a few cells, divided by the cells inside): its mean.
            return self._unbatch(self.b.reduce_mean(xv, axes=(2, 3), keepdims=True),
                                 unbatched)
        pads, grew = self._pool_pads(self.b.shape(xv), k, s, _pair(padding), ceil_mode)
        if grew and count_include_pad:
            if any(_pair(padding)):
                raise _Refuse("ceil_mode average pooling that counts padding")
            # Without explicit padding torch divides the windows that ceil_mode adds by
            # their cells inside the input, as count_include_pad=False does.
            count_include_pad = False
        y = self.b.pool2d_avg(xv, kernel=k, stride=s, padding=tuple(pads),
                              count_include_pad=bool(count_include_pad))
        return self._unbatch(y, unbatched)

    def adaptive_avg_pool2d(self, x: Any, output_size: Any) -> Any:
        xv, unbatched = self._batched(x, "adaptive average pooling")
        h, w = self.b.shape(xv)[2:]
        size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
        oh, ow = (h if size[0] is None else size[0]), (w if size[-1] is None else size[-1])
        if (oh, ow) == (1, 1):
            y = self.b.reduce_mean(xv, axes=(2, 3), keepdims=True)
        elif h % oh == 0 and w % ow == 0:
            y = self.b.pool2d_avg(xv, kernel=(h // oh, w // ow), stride=(h // oh, w // ow))
        else:
            # Uneven (or overlapping, when growing) windows: each output the mean of its
            # window, separable by axis, so written like an interpolation (PSPNet's and
            # UperNet's pyramid pooling to 1, 2, 3 and 6).
            y = self.value(self.resample(xv, lambda t, k: F.adaptive_avg_pool2d(
                t, (oh, ow) if k is None else
                ((oh, t.shape[3]) if k == 0 else (t.shape[2], ow)))))
        return self._unbatch(y, unbatched)

    def reduce(self, op: str, x: Any, dims: Any, keepdim: bool) -> Value:
        rank = self.rank(x)
        if dims is None or (isinstance(dims, list | tuple) and len(dims) == 0):
            axes = tuple(range(rank))
        else:
            axes = tuple(_axis(d, rank) for d in ((dims,) if isinstance(dims, int) else dims))
        if not axes:  # a rank-0 tensor: nothing to reduce
            return self.value(x)
        return self.b.op(op, self.value(x), axes=axes, keepdims=bool(keepdim))

    def softmax(self, x: Any, dim: int | None) -> Value:
        if dim is None:
            raise _Refuse("softmax without an explicit dim")
        return self.b.softmax(self.value(x), axis=_axis(dim, self.rank(x)))

    def embedding(self, table: Any, ids: Any) -> Value:
        if self.rank(table) != 2:
            raise _Refuse(f"embedding with a rank-{self.rank(table)} table")
        return self.b.embedding(self.value(ids), self.value(table))

    # ---- movement --------------------------------------------------------------------

    def reshape(self, x: Any, shape: Sequence[int]) -> Any:
        have = self.shape(x)
        shape = [int(d) for d in shape]
        if shape.count(-1) == 1:
            known = math.prod(d for d in shape if d != -1)
            shape[shape.index(-1)] = math.prod(have) // known if known else 0
        target = tuple(shape)
        if target == have:
            return x
        if math.prod(target) != math.prod(have):
            raise _Refuse(f"reshape of {list(have)} to {list(target)}")
        if isinstance(x, Const):
            return Const(x.tensor.reshape(target), x.name + ".reshape")
        return self.b.reshape(self.value(x), shape=target)

    def transpose(self, x: Any, perm: Sequence[int]) -> Any:
        rank = self.rank(x)
        perm = tuple(_axis(p, rank) for p in perm)
        if sorted(perm) != list(range(rank)):
            raise _Refuse(f"permutation {list(perm)} of a rank-{rank} tensor")
        if perm == tuple(range(rank)):
            return x
        if isinstance(x, Const):
            return Const(x.tensor.permute(perm).contiguous(), x.name + ".T")
        return self.b.transpose(self.value(x), perm=perm)

    def swap(self, x: Any, d0: int, d1: int) -> Any:
        rank = self.rank(x)
        if rank < 2:
            return x
        perm = list(range(rank))
        a, b = _axis(d0, rank), _axis(d1, rank)
        perm[a], perm[b] = perm[b], perm[a]
        return self.transpose(x, perm)

    def t(self, x: Any) -> Any:
        return self.swap(x, 0, 1) if self.rank(x) == 2 else x

    def flatten(self, x: Any, start: int = 0, end: int = -1) -> Any:
        shape = self.shape(x)
        if not shape:
            return self.reshape(x, (1,))
        s, e = _axis(start, len(shape)), _axis(end, len(shape))
        return self.reshape(x, (*shape[:s], math.prod(shape[s:e + 1]), *shape[e + 1:]))

    def unflatten(self, x: Any, dim: int, sizes: Sequence[int]) -> Any:
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        return self.reshape(x, (*shape[:d], *sizes, *shape[d + 1:]))

    def unsqueeze(self, x: Any, dim: int) -> Any:
        shape = list(self.shape(x))
        shape.insert(_axis(dim, len(shape) + 1), 1)
        return self.reshape(x, shape)

    def squeeze(self, x: Any, dims: Any = None) -> Any:
        shape = self.shape(x)
        if dims is None:
            drop = {i for i, d in enumerate(shape) if d == 1}
        else:
            drop = {_axis(d, len(shape)) for d in ((dims,) if isinstance(dims, int) else dims)}
            drop = {i for i in drop if shape[i] == 1}
        return self.reshape(x, [d for i, d in enumerate(shape) if i not in drop])

    def slice(self, x: Any, dim: int, start: int | None, end: int | None, step: int = 1) -> Any:
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        lo, hi, st = builtins.slice(start, end, step).indices(shape[d])
        if st < 1:
            raise _Refuse("a slice with a negative step")
        hi = max(hi, lo)
        if (lo, hi, st) == (0, shape[d], 1):
            return x
        if isinstance(x, Const):
            idx = [builtins.slice(None)] * len(shape)
            idx[d] = builtins.slice(lo, hi, st)
            return Const(x.tensor[tuple(idx)], x.name + ".slice")
        starts, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
        starts[d], ends[d], steps[d] = lo, hi, st
        return self.b.slice(self.value(x), starts=tuple(starts), ends=tuple(ends),
                            steps=tuple(steps))

    def select(self, x: Any, dim: int, index: int) -> Any:
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        i = index + shape[d] if index < 0 else index
        if not 0 <= i < shape[d]:
            raise _Refuse(f"index {index} out of range for dim of size {shape[d]}")
        y = self.slice(x, d, i, i + 1)
        return self.reshape(y, shape[:d] + shape[d + 1:])

    def split(self, x: Any, sizes: Any, dim: int = 0) -> tuple[Any, ...]:
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        if isinstance(sizes, int):
            n = shape[d]
            sizes = [sizes] * (n // sizes) + ([n % sizes] if n % sizes else [])
        sizes = [int(s) for s in sizes]
        if len(sizes) == 1:
            return (x,)
        if isinstance(x, Const):
            return tuple(Const(t, f"{x.name}.{i}")
                         for i, t in enumerate(torch.split(x.tensor, sizes, d)))
        return tuple(self.b.op("split", self.value(x), axis=d, sizes=tuple(sizes)))

    def tensor_split(self, x: Any, indices: Sequence[int], dim: int = 0) -> tuple[Any, ...]:
        """Tensor.tensor_split at indices: the pieces between consecutive cut points
        (clamped to the axis, as torch does; a piece may be empty)."""
        n = self.shape(x)[_axis(dim, self.rank(x))]
        cuts = [0, *(min(max(int(i) + (n if int(i) < 0 else 0), 0), n) for i in indices), n]
        sizes = [max(b - a, 0) for a, b in pairwise(cuts)]
        parts = iter(self.split(x, [k for k in sizes if k], dim))
        # An empty piece has no IR value; only a use of it is refused (Mamba splits off the
        # steps it would replay one by one, none without a cache).
        return tuple(next(parts) if k else _Missing("an empty piece of tensor_split")
                     for k in sizes)

    def unbind(self, x: Any, dim: int = 0) -> tuple[Any, ...]:
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        parts = self.split(x, [1] * shape[d], d) if shape[d] > 1 else (x,)
        return tuple(self.reshape(p, shape[:d] + shape[d + 1:]) for p in parts)

    def chunk(self, x: Any, chunks: int, dim: int = 0) -> tuple[Any, ...]:
        n = self.shape(x)[_axis(dim, self.rank(x))]
        return self.split(x, -(-n // chunks), dim)

    def cat(self, xs: Sequence[Any], dim: int = 0) -> Any:
        # torch still accepts 1-D empty tensors in cat and skips them; a piece empty along
        # the axis adds nothing either (DeepSeek-V4 concatenates one to its rotary part).
        xs = [x for x in xs if self.shape(x) != (0,)]
        if xs:
            d = _axis(dim, self.rank(xs[0]))
            xs = [x for x in xs if self.shape(x)[d] != 0] or xs[:1]
        if len(xs) == 1:
            if 0 in self.shape(xs[0]):
                raise _Refuse("a concatenation of empty tensors")
            return xs[0]
        dts = {self.dtype(x) for x in xs if _live(x)}
        if len(dts) != 1:
            raise _Refuse("concatenation of mixed dtypes")
        (dt,) = dts
        return self.b.concat(*(self.value(x, dt) for x in xs), axis=_axis(dim, self.rank(xs[0])))

    def stack(self, xs: Sequence[Any], dim: int = 0) -> Any:
        d = _axis(dim, self.rank(xs[0]) + 1)
        return self.cat([self.unsqueeze(x, d) for x in xs], d)

    def expand(self, x: Any, sizes: Sequence[int]) -> Any:
        shape = self.shape(x)
        lead = len(sizes) - len(shape)
        if lead < 0:
            raise _Refuse(f"expand of {list(shape)} to fewer dims {list(sizes)}")
        target = tuple(shape[i - lead] if s == -1 else int(s) for i, s in enumerate(sizes))
        if not _broadcastable(shape, target):
            raise _Refuse(f"expand of {list(shape)} to {list(target)}")
        if target == shape:
            return x
        if isinstance(x, Const):
            return Const(x.tensor.expand(target), x.name + ".expand")
        return Expanded(x.value if isinstance(x, Expanded) else x, target)

    def repeat(self, x: Any, repeats: Sequence[int]) -> Any:
        """Tensor.repeat (tiling, `composite.tile`)."""
        try:
            return composite.tile(self.prim, x, [int(r) for r in repeats])
        except ValueError as e:
            raise _Refuse(f"repeat: {e}") from None

    def repeat_interleave(self, x: Any, repeats: Any, dim: int | None) -> Any:
        """Tensor.repeat_interleave by a constant count: each element `repeats` times in a
        row along `dim` (of the flattened tensor without one), an expand and a reshape."""
        if not isinstance(repeats, int):
            raise _Refuse("repeat_interleave with a tensor of counts")
        if dim is None:
            x, dim = self.reshape(x, (-1,)), 0
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        grown = self.expand(self.unsqueeze(x, d + 1),
                            (*shape[:d + 1], repeats, *shape[d + 1:]))
        return self.reshape(grown, (*shape[:d], shape[d] * repeats, *shape[d + 1:]))

    def _tiling_patches(self, kernel: Any, dilation: Any, padding: Any, stride: Any,
                        what: str) -> tuple[int, int]:
        """The patch size of an unfold/fold whose patches tile the image (kernel ==
        stride, no dilation or padding); refused otherwise."""
        k, st = _pair(kernel, "kernel"), _pair(stride, "stride")
        if k != st or _pair(dilation, "dilation") != (1, 1) or _pair(padding) != (0, 0):
            raise _Refuse(f"{what} with overlapping or padded patches (kernel {list(k)}, "
                          f"stride {list(st)})")
        return k

    def unfold_patches(self, x: Any, kernel: Any, dilation: Any, padding: Any, stride: Any
                       ) -> Any:
        """im2col of patches that tile the image (MobileViT-V2): (N, C, H, W) ->
        (N, C*kh*kw, H/kh * W/kw), a reshape, a transpose and a reshape."""
        kh, kw = self._tiling_patches(kernel, dilation, padding, stride, "unfold")
        n, c, h, w = self.shape(x)
        if h % kh or w % kw:
            raise _Refuse(f"unfold of a {h}x{w} map into {kh}x{kw} patches")
        y = self.transpose(self.reshape(x, (n, c, h // kh, kh, w // kw, kw)),
                           (0, 1, 3, 5, 2, 4))
        return self.reshape(y, (n, c * kh * kw, (h // kh) * (w // kw)))

    def fold_patches(self, cols: Any, output_size: Any, kernel: Any, dilation: Any,
                     padding: Any, stride: Any) -> Any:
        """col2im of patches that tile the image: the inverse of `unfold_patches`."""
        kh, kw = self._tiling_patches(kernel, dilation, padding, stride, "fold")
        h, w = _pair(output_size, "output size")
        n, ckk, length = self.shape(cols)
        if h % kh or w % kw or ckk % (kh * kw) or length != (h // kh) * (w // kw):
            raise _Refuse(f"fold of {list(self.shape(cols))} into a {h}x{w} map")
        c = ckk // (kh * kw)
        y = self.transpose(self.reshape(cols, (n, c, kh, kw, h // kh, w // kw)),
                           (0, 1, 4, 2, 5, 3))
        return self.reshape(y, (n, c, h, w))

    def pad(self, x: Any, pad: Sequence[int], value: float | None = 0) -> Any:
        rank = self.rank(x)
        if len(pad) % 2 or len(pad) > 2 * rank:
            raise _Refuse(f"pad {list(pad)}")
        if min(pad, default=0) < 0:
            # A negative pad crops (RWKV's time shift pads one step in front and crops one
            # at the end): the crops as slices, then the rest as a pad.
            shape = self.shape(x)
            for i in range(len(pad) // 2):
                d, lo, hi = rank - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1])
                if -min(lo, 0) - min(hi, 0) > shape[d]:
                    raise _Refuse(f"pad {list(pad)} of a {list(shape)} tensor")
                if lo < 0 or hi < 0:
                    x = self.slice(x, d, -min(lo, 0), shape[d] + min(hi, 0))
            return self.pad(x, [max(int(p), 0) for p in pad], value)
        begins, ends = [0] * rank, [0] * rank
        for i in range(len(pad) // 2):  # torch lists the last dim first
            begins[rank - 1 - i], ends[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
        if not any(begins) and not any(ends):
            return x
        if value not in (0, None):
            # The IR pads with zeros: pad(x - v) + v fills with v and keeps x.
            return self.add(self.pad(self.sub(x, value), pad), value)
        return self.b.pad(self.value(x), pads=tuple(begins + ends))

    def roll(self, x: Any, shifts: Sequence[int], dims: Sequence[int]) -> Any:
        """torch.roll: along each dim, the last `shift` elements moved to the front (Swin's
        shifted windows); without dims, the flattened tensor rolled."""
        shifts, dims = list(shifts), list(dims)
        if not dims:
            shape = self.shape(x)
            return self.reshape(self.roll(self.reshape(x, (math.prod(shape),)), shifts, [0]),
                                shape)
        if len(shifts) != len(dims):
            raise _Refuse(f"roll by {shifts} along {dims}")
        for shift, dim in zip(shifts, dims, strict=True):
            d = _axis(dim, self.rank(x))
            n = self.shape(x)[d]
            k = int(shift) % n if n else 0
            if k:
                x = self.cat([self.slice(x, d, n - k, n), self.slice(x, d, 0, n - k)], d)
        return x

    def index(self, x: Any, idx: Any) -> Any:
        """Basic tensor indexing x[...] with ints, slices, None and Ellipsis."""
        items = list(idx) if isinstance(idx, tuple) else [idx]
        if any(isinstance(it, Const | Value) for it in items):
            # Tensor indices beside full slices only: x[idx], x[:, idx], x[i, j].
            full = builtins.slice(None)
            if any(not isinstance(it, Const | Value) and it != full for it in items):
                raise _Refuse("tensor indexing mixed with ints, partial slices or None")
            return self.index_tensors(x, [it if isinstance(it, Const | Value) else None
                                          for it in items])
        if any(not (it is None or it is Ellipsis or isinstance(it, int | builtins.slice))
               for it in items):
            raise _Refuse("advanced (tensor) indexing")
        shape = self.shape(x)
        real = sum(1 for it in items if it is not None and it is not Ellipsis)
        if Ellipsis in items:
            at = items.index(Ellipsis)
            items[at:at + 1] = [builtins.slice(None)] * (len(shape) - real)
        items += [builtins.slice(None)] * (len(shape) - sum(1 for it in items if it is not None))
        y, out, d = x, [], 0
        for it in items:
            if it is None:
                out.append(1)
                continue
            if isinstance(it, int):
                i = it + shape[d] if it < 0 else it
                if not 0 <= i < shape[d]:
                    raise _Refuse(f"index {it} out of range for size {shape[d]}")
                y = self.slice(y, d, i, i + 1)
            else:
                y = self.slice(y, d, it.start, it.stop, 1 if it.step is None else it.step)
                out.append(self.shape(y)[d])
            d += 1
        return self.reshape(y, out)

    def index_tensors(self, x: Any, indices: Sequence[Any]) -> Any:
        """x[i0, i1, ...] with index tensors (None for a full slice): one gather along the
        indexed axis, or along the merged axes when several adjacent known tensors index."""
        tensors = [(d, t) for d, t in enumerate(indices) if t is not None]
        if not tensors:
            return x
        if len(tensors) == 1 and isinstance(tensors[0][1], Const) \
                and tensors[0][1].tensor.dtype == torch.bool:
            # A known mask (X-MOD's adapters pick the rows of one language): the rows it
            # keeps, over the dims it covers merged, as one gather; the count is known.
            d, mask = tensors[0][0], tensors[0][1].tensor
            shape = self.shape(x)
            span = shape[d:d + mask.dim()]
            if tuple(mask.shape) != tuple(span):
                raise _Refuse(f"a {list(mask.shape)} mask over {list(span)}")
            merged = self.reshape(x, (*shape[:d], math.prod(span), *shape[d + mask.dim():]))
            keep = Const(torch.nonzero(mask.reshape(-1)).reshape(-1), "const.mask_rows")
            return self.gather(merged, keep, d)
        for _, t in tensors:
            if self.dtype(t) == DType.BOOL:
                raise _Refuse("indexing with a boolean mask computed at run time")
        if len(tensors) == 1:
            d, t = tensors[0]
            return self.gather(x, t, d)
        dims = [d for d, _ in tensors]
        if dims != list(range(dims[0], dims[-1] + 1)):
            raise _Refuse("indexing with several index tensors that are apart")
        shape = self.shape(x)
        d0, d1 = dims[0], dims[-1] + 1
        if any(_live(t) for _, t in tensors):
            # x[arange(B), computed] (a decoder classifier's last token, CLIP's end token):
            # one gather over the merged axes at the flat index, computed in the graph.
            flat: Any = None
            for n, (_, t) in zip(shape[d0:d1], tensors, strict=True):
                t = self._wrapped_index(t, n)
                flat = t if flat is None else self.add(self.mul(flat, n), t)
            merged = self.reshape(x, (*shape[:d0], math.prod(shape[d0:d1]), *shape[d1:]))
            return self.gather(merged, flat, d0)
        parts = torch.broadcast_tensors(*(t.tensor if isinstance(t, Const) else torch.tensor(t)
                                          for _, t in tensors))
        flat = torch.zeros_like(parts[0])
        for n, t in zip(shape[d0:d1], parts, strict=True):
            flat = flat * n + torch.where(t < 0, t + n, t)
        merged = self.reshape(x, (*shape[:d0], math.prod(shape[d0:d1]), *shape[d1:]))
        return self.gather(merged, Const(flat, "const.index"), d0)

    def _wrapped_index(self, t: Any, n: int) -> Any:
        """An index tensor in [0, n): negative entries count from the end (t + n)."""
        if not _live(t):
            t = t.tensor if isinstance(t, Const) else torch.tensor(t)
            return Const(torch.where(t < 0, t + n, t).to(torch.int64), "const.index")
        t = self.cast(t, torch.int64)
        if self.index_bound(t) is not None:
            return t  # of known range, so never negative
        return self.where(self.compare("lt", t, 0), self.add(t, n), t)

    def gather(self, x: Any, idx: Any, axis: int) -> Any:
        """numpy take / ONNX Gather: x.shape[:axis] + idx.shape + x.shape[axis+1:]."""
        if not _live(x) and not _live(idx):
            t = idx.tensor if isinstance(idx, Const) else torch.tensor(idx)
            return self.fold(lambda a: torch.index_select(a, axis, t.reshape(-1)).reshape(
                *a.shape[:axis], *t.shape, *a.shape[axis + 1:]), x)
        if isinstance(idx, int):
            return self.select(x, axis, idx)
        d = _axis(axis, self.rank(x))
        return self.b.op("gather", self.value(x), self.value(idx), axis=d)

    def gather_elements(self, x: Any, dim: int, idx: Any) -> Any:
        """torch.gather: one gather from the flattened source at offset + index * stride
        (a source of one repeated value needs none: RoBERTa's buffered token-type ids)."""
        if isinstance(x, Const) and x.tensor.numel() and bool((x.tensor == x.tensor.reshape(-1)[0]).all()):
            return Const(torch.full(self.shape(idx), x.tensor.reshape(-1)[0].item(),
                                    dtype=x.tensor.dtype), x.name + ".gather")
        shape, ishape = self.shape(x), self.shape(idx)
        d = _axis(dim, len(shape))
        if len(ishape) != len(shape) or any(ishape[k] > shape[k] for k in range(len(shape))
                                            if k != d):
            raise _Refuse(f"torch.gather of {list(shape)} at indices {list(ishape)}")
        offsets, stride = composite.element_gather_offsets(shape, ishape, d)
        at = self._wrapped_index(idx, shape[d])
        flat = self.add(self.mul(at, stride), Const(torch.from_numpy(offsets), "const.offsets"))
        return self.gather(self.reshape(x, (math.prod(shape),)), flat, 0)

    def scatter_value(self, x: Any, dim: int, idx: Any, value: Any) -> Any:
        """torch.scatter of one value: x with value wherever an index along `dim` points (a
        router's group mask, `zeros.scatter_(1, top_groups, 1)`). A place is hit when some
        index in its row equals its position: a comparison with an arange, reduced over the
        indices, then a select."""
        shape, ishape = self.shape(x), self.shape(idx)
        d = _axis(dim, len(shape))
        if len(ishape) != len(shape) or any(ishape[k] != shape[k] for k in range(len(shape))
                                            if k != d):
            raise _Refuse(f"scatter into {list(shape)} at indices {list(ishape)} (only "
                          "indices as wide as the target off the scattered dim)")
        at = self.unsqueeze(self._wrapped_index(idx, shape[d]), d + 1)  # (.., k, 1, ..)
        ramp = torch.arange(shape[d]).reshape([-1 if k == d + 1 else 1
                                              for k in range(len(shape) + 1)])
        hits = self.cast(self.compare("eq", at, Const(ramp, "const.positions")), torch.int64)
        hit = self.compare("gt", self.reduce("reduce_max", hits, (d,), False), 0)
        fill = value if isinstance(value, bool | int | float) else self.cast(
            value, self.torch_dtype(x))
        return self.where(hit, fill, x)

    def scatter_src(self, x: Any, dim: int, idx: Any, src: Any) -> Any:
        """torch.scatter of a tensor at indices that are a top-k's along the same dim (a
        router's scores placed at its chosen experts, Llama-4's `full(-inf).scatter_(1,
        top_indices, top_values)`): distinct, so each place is hit at most once and takes
        the one source element whose index names it (a select summed over the indices)."""
        shape, ishape = self.shape(x), self.shape(idx)
        d = _axis(dim, len(shape))
        node = self.b.nodes[idx.node] if isinstance(idx, Value) else None
        if node is None or node.op != "topk" or idx.index != 1 or node.attr("axis") != d \
                or tuple(self.shape(src)) != tuple(ishape) or len(ishape) != len(shape) \
                or any(ishape[k] != shape[k] for k in range(len(shape)) if k != d):
            raise _Refuse(f"scatter into {list(shape)} of {list(self.shape(src))} values "
                          "(only at a top-k's indices along the scattered dim)")
        at = self.unsqueeze(idx, d + 1)  # (.., k, 1, ..): each index against every place
        ramp = torch.arange(shape[d]).reshape([-1 if k == d + 1 else 1
                                              for k in range(len(shape) + 1)])
        hits = self.compare("eq", at, Const(ramp, "const.positions"))
        values = self.cast(self.unsqueeze(src, d + 1), self.torch_dtype(x))
        picked = self.reduce("reduce_sum", self.where(hits, values, 0.0), (d,), False)
        hit = self.compare("gt", self.reduce("reduce_max", self.cast(hits, torch.int64), (d,),
                                             False), 0)
        return self.where(hit, picked, x)

    def any_all(self, x: Any, dims: Any, keepdim: bool, every: bool) -> Any:
        """torch.any / torch.all over dims: a maximum (a minimum, for all) of the tensor as
        0/1 integers, compared with 0."""
        ones = self.cast(self.compare("ne", x, 0) if self.dtype(x) != DType.BOOL else x,
                         torch.int64)
        if every:
            ones = self.sub(1, ones)
        hit = self.compare("gt", self.reduce("reduce_max", ones, dims, bool(keepdim)), 0)
        return self.logical_not(hit) if every else hit

    def log1p(self, x: Any) -> Any:
        """log(1 + x) without losing x's digits near 0: log(u) * x / (u - 1) with u = 1 + x
        (exact where u rounds to 1: then x itself)."""
        u = self.add(x, 1.0)
        same = self.compare("eq", u, 1.0)
        ratio = self.div(x, self.where(same, 1.0, self.sub(u, 1.0)))
        return self.where(same, x, self.mul(self.unary("log", u), ratio))

    def logsumexp(self, x: Any, dims: Any, keepdim: bool) -> Any:
        """log(sum(exp(x))) over dims, shifted by the maximum so that no exp overflows."""
        top = self.reduce("reduce_max", x, dims, True)
        total = self.reduce("reduce_sum", self.unary("exp", self.sub(x, top)), dims, True)
        y = self.add(self.unary("log", total), top)
        if keepdim:
            return y
        axes = {_axis(a, self.rank(x)) for a in ((dims,) if isinstance(dims, int) else dims)}
        return self.reshape(y, tuple(n for k, n in enumerate(self.shape(x)) if k not in axes))

    def scatter_slice(self, x: Any, src: Any, dim: int, start: int | None, end: int | None,
                      step: int = 1) -> Any:
        """slice_scatter: x with x[..., start:end, ...] replaced by src (torch's
        functional form of a write into a slice): the pieces around it and src, concatenated."""
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        lo, hi, st = builtins.slice(start, end, step).indices(shape[d])
        if st != 1:
            raise _Refuse("slice_scatter with a step")
        hi = max(hi, lo)
        src = self.cast(self.expand(src, (*shape[:d], hi - lo, *shape[d + 1:])),
                        self.torch_dtype(x))
        parts = [p for p, n in ((self.slice(x, d, 0, lo), lo), (src, hi - lo),
                                (self.slice(x, d, hi, shape[d]), shape[d] - hi)) if n]
        return parts[0] if len(parts) == 1 else self.cat(parts, d)

    def scatter_select(self, x: Any, src: Any, dim: int, index: int) -> Any:
        """select_scatter: x with x.select(dim, index) replaced by src."""
        shape = self.shape(x)
        d = _axis(dim, len(shape))
        i = index + shape[d] if index < 0 else index
        return self.scatter_slice(x, self.unsqueeze(src, d), d, i, i + 1)

    def expm1(self, x: Any) -> Any:
        """exp(x) - 1 without the cancellation near 0: 2 tanh(x/2) / (1 - tanh(x/2)) for
        |x| < 1 (the same value, exactly), exp(x) - 1 elsewhere."""
        t = self.unary("tanh", self.mul(x, 0.5))
        near = self.div(self.mul(t, 2.0), self.sub(1.0, t))
        far = self.sub(self.unary("exp", x), 1.0)
        small = self.compare("lt", self.abs(x), 1.0)
        return self.where(small, near, far)

    def cast(self, x: Any, dtype: torch.dtype | None) -> Any:
        if dtype is None:
            return x
        want, have = ir_dtype(dtype), self.dtype(x)
        if want == have or (want.is_float and have.is_float):
            return x  # float widths: the IR computes every float dtype alike
        if isinstance(x, Const):
            return Const(x.tensor.to(dtype), x.name + ".cast")
        if not _live(x):
            return x
        return self.b.op("cast", self.value(x), to=want.value)

    def adaptive_avg_pool1d(self, x: Any, output_size: Any) -> Any:
        o = output_size if isinstance(output_size, int) else int(output_size[0])
        shape = self.shape(x)
        n = shape[-1]
        if o == 1:
            return self.b.reduce_mean(self.value(x), axes=(len(shape) - 1,), keepdims=True)
        if n % o:
            if len(shape) != 3:
                raise _Refuse(f"adaptive pooling from {n} to {o} (uneven windows) of a "
                              f"rank-{len(shape)} tensor")
            return self.resample(x, lambda t, k: F.adaptive_avg_pool1d(t, o))
        y = self.reshape(x, (*shape[:-1], o, n // o))
        return self.b.reduce_mean(self.value(y), axes=(len(shape),), keepdims=False)

    def reduce_min(self, x: Any, dims: Any, keepdim: bool) -> Any:
        return self.neg(self.reduce("reduce_max", self.neg(x), dims, keepdim))

    def topk(self, x: Any, k: int, dim: int, largest: bool) -> tuple[Any, Any]:
        """torch.topk / torch.sort (k = the whole axis): values and indices, in order, equal
        values in index order (an unsorted or unstable request allows that order too)."""
        shape = self.shape(x)
        if not shape:
            raise _Refuse("topk of a scalar")
        d = _axis(dim, len(shape))
        if not 1 <= int(k) <= shape[d]:
            raise _Refuse(f"topk of {k} along an axis of length {shape[d]}")
        if not _live(x):
            t = x.tensor if isinstance(x, Const) else torch.tensor(x)
            vals, idx = torch.sort(t, dim=d, descending=bool(largest), stable=True)
            return (Const(vals.narrow(d, 0, int(k)), "const.topk"),
                    Const(idx.narrow(d, 0, int(k)), "const.topk"))
        out = self.b.op("topk", self.value(x), k=int(k), axis=d, largest=bool(largest))
        assert isinstance(out, tuple)
        return out[0], out[1]

    # ---- index values of known range (a mixture of experts' routing) -------------------

    def index_bound(self, x: Any) -> int | None:
        """n where every element of the integer tensor x is known to lie in [0, n) (an
        index into an axis of length n needs no wrapping); None where unknown."""
        span = self.value_range(x)
        return span[1] + 1 if span is not None and span[0] >= 0 else None

    def value_range(self, x: Any) -> tuple[int, int] | None:
        """[lo, hi] holding every element of the integer tensor x; None where unknown:
        constants here, graph values by the IR's interval analysis (`superopt.ir.ranges`:
        weight tables such as DeepSeek-V4's token-to-expert, a topk's or argmax's indices,
        what keeps a subset of known values, and sums, differences and products of known
        ranges, as LongCat-Flash's `(top_k_ids - n) * n // zeros`)."""
        if isinstance(x, bool | int):
            return int(x), int(x)
        if isinstance(x, Const):
            data = x.tensor.numpy()
            if data.dtype.kind not in "iub" or not data.size:
                return None
            return int(data.min()), int(data.max())
        return self.ranges.span(x) if isinstance(x, Value) else None

    def lookup(self, x: Any, table_of: Callable[[torch.Tensor], torch.Tensor],
               what: str) -> Any:
        """f(x) for an integer tensor x known to lie in [lo, hi], exactly, as one gather
        from the table `table_of(arange(lo, hi + 1))` of f's values there."""
        span = self.value_range(x)
        if span is None or span[1] - span[0] >= LOOKUP_LIMIT:
            raise _Refuse(f"{what} of an integer tensor whose values are not known to lie "
                          "in a small range")
        lo, hi = span
        table = table_of(torch.arange(lo, hi + 1))
        if not _live(x):
            at = x.tensor if isinstance(x, Const) else torch.tensor(x)
            return Const(table[at - lo], "const.lookup")
        return self.gather(Const(table, "const.lookup"), self.sub(x, lo) if lo else x, 0)

    def floor_divide(self, x: Any, y: Any) -> Any:
        if not _live(x) and not _live(y):
            return self.fold(torch.floor_divide, x, y)
        if not isinstance(y, int) or y <= 0 or self.dtype(x).is_float:
            raise _Refuse("floor division other than of integers by a positive constant")
        return self.lookup(x, lambda v: torch.div(v, y, rounding_mode="floor"),
                           "floor division")

    def histc(self, x: Any, bins: int, lo: float, hi: float) -> Any:
        """torch.histc of values known to be integers in [0, n) (a cast of routed expert
        ids): each value's bin, read from a table, one-hot and summed."""
        if not _live(x):
            return self.fold(lambda t: torch.histc(t, bins, lo, hi), x)
        if bins == 1 and lo == hi == 0:
            # One bin over the data's own range holds every element (a router of one
            # expert; torch refuses data whose range is not finite).
            return Const(torch.tensor([float(math.prod(self.shape(x)))],
                                      dtype=self.torch_dtype(x)), "const.histc")
        node = self.b.nodes[self.value(x).node]
        if node.op != "cast" or self.b.type_of(node.inputs[0]).dtype.is_float or hi <= lo:
            raise _Refuse("histc of values not known to be integers in a small range")

        def bin_of(values: torch.Tensor) -> torch.Tensor:
            # torch's bin of v in [lo, hi]: floor((v - lo) * bins / (hi - lo)), hi in the
            # last; -1 (no bin) outside.
            v = values.double()
            b = torch.floor((v - lo) * bins / (hi - lo)).clamp(max=bins - 1).long()
            return torch.where((v >= lo) & (v <= hi), b, torch.full_like(b, -1))

        which = self.lookup(node.inputs[0], bin_of, "histc")
        hits = self.compare("eq", self.unsqueeze(which, -1),
                            Const(torch.arange(bins), "const.bins"))
        counts = self.reduce("reduce_sum", self.cast(hits, torch.float32),
                             tuple(range(self.rank(which))), False)
        return self.cast(counts, self.torch_dtype(x))

    def is_permutation(self, x: Any) -> bool:
        """x is a 1-D permutation of range(len(x)): the indices of a full sort."""
        if not isinstance(x, Value):
            return False
        node = self.b.nodes[x.node]
        return (node.op == "topk" and x.index == 1 and len(node.type.shape) == 1
                and node.attr("k") == self.b.type_of(node.inputs[0]).shape[0])

    def index_put(self, base: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
        """base[perm] = values where perm is a whole permutation (the inverse of a sort):
        every row is written once, so the result is values read at the inverse permutation,
        whatever base held."""
        idx = [t for t in indices if t is not None]
        if len(indices) == 1 and idx and self.torch_dtype(idx[0]) == torch.bool:
            return self.masked_put(base, idx[0], values, accumulate)
        if accumulate or len(idx) != 1 or indices[0] is None or not self.is_permutation(idx[0]) \
                or self.shape(idx[0])[0] != self.shape(base)[0]:
            raise _Refuse("index_put other than a write of every row at a permutation")
        if tuple(self.shape(values)) != tuple(self.shape(base)):
            values = self.expand(values, self.shape(base))
        inverse = self.topk(idx[0], self.shape(idx[0])[0], 0, False)[1]
        return self.cast(self.gather(values, inverse, 0), self.torch_dtype(base))

    def masked_put(self, base: Any, mask: Any, values: Any, accumulate: bool) -> Any:
        """base[mask] = values (or += with accumulate) for a boolean mask over base's leading
        dims and one value for every masked place (a scalar, or one row of base's trailing
        dims): a select (Gemma-3 zeroes its image tokens' ids this way). Values that differ
        per masked place would be read in the mask's order, a count only the data knows."""
        shape, mshape = tuple(self.shape(base)), tuple(self.shape(mask))
        tail = shape[len(mshape):]
        vshape = tuple(self.shape(values))
        if isinstance(mask, Const) and mshape == shape[:len(mshape)] and not accumulate \
                and vshape == (int(mask.tensor.sum()), *tail):
            # A known mask and a row of values per masked place (X-MOD's adapter output
            # written back): place k takes row k, read by a gather at known rows.
            flat = mask.tensor.reshape(-1)
            rows = math.prod(mshape)
            src = (torch.cumsum(flat.long(), 0) - 1).clamp(min=0)
            moved = self.gather(values, Const(src, "const.mask_src"), 0)
            marks = Const(flat.reshape((rows,) + (1,) * len(tail)), "const.mask_rows")
            merged = self.reshape(base, (rows, *tail))
            return self.reshape(self.where(marks, moved, merged), shape)
        if mshape != shape[:len(mshape)] or (math.prod(vshape) != 1 and vshape != tail):
            raise _Refuse(f"index_put at a {list(mshape)} mask of a {list(shape)} tensor with "
                          f"{list(vshape)} values (one value per masked place)")
        if math.prod(vshape) == 1:
            values = self.reshape(values, ())
        marks = self.reshape(mask, mshape + (1,) * len(tail))
        new = self.add(base, values) if accumulate else values
        return self.cast(self.where(marks, new, base), self.torch_dtype(base))

    def masked_scatter(self, x: Any, mask: Any, source: Any) -> Any:
        """x with the masked places filled by source's elements in order (a vision-language
        model placing its image features at the image tokens). Over the leading dims where
        the mask varies (it is constant over the others: whole rows), row r takes source
        row (number of masked rows up to r) - 1: a running sum, a gather, a select."""
        shape = self.shape(x)
        base = mask
        if isinstance(mask, Expanded):
            base = mask.value
        bshape = (1,) * (len(shape) - self.rank(base)) + tuple(self.shape(base))
        r = len(shape)
        while r > 0 and bshape[r - 1] == 1:
            r -= 1
        rows, width = math.prod(shape[:r]), math.prod(shape[r:])
        total = math.prod(self.shape(source))
        if rows > 8192 or total % width:
            raise _Refuse(f"masked_scatter of {rows} rows of {width} from a source of "
                          f"{total} elements")
        marks = self.expand(self.reshape(base, bshape[:r]) if r else base, shape[:r])
        marks = self.reshape(self.cast(marks, torch.bool), (rows,))
        seen = self.cumsum(self.cast(marks, torch.int64), 0)
        at = self.binary("maximum", self.sub(seen, 1), 0)
        picked = self.gather(self.reshape(source, (total // width, width)), at, 0)
        out = self.where(self.reshape(marks, (rows, 1)), self.cast(picked, self.torch_dtype(x)),
                         self.reshape(x, (rows, width)))
        return self.reshape(out, shape)

    def grouped_mm(self, x: Any, w: Any, offsets: Any) -> Any:
        """transformers' grouped matmul: rows [offsets[e-1], offsets[e]) of x times w[e].
        Row s's group is the number of offsets <= s; each row is multiplied by its group's
        matrix, gathered (transformers' `batched_mm` form: static shapes, each row reading
        its expert's weights)."""
        (rows, k), (groups, k2, n) = self.shape(x), self.shape(w)
        if k != k2 or self.shape(offsets) != (groups,):
            raise _Refuse(f"grouped matmul of {list(self.shape(x))} and {list(self.shape(w))}")
        at = Const(torch.arange(rows).reshape(rows, 1), "const.rows")
        ends = self.cast(self.unsqueeze(offsets, 0), torch.int64)
        passed = self.cast(self.compare("le", ends, at), torch.int64)  # (rows, groups)
        group = self.binary("minimum", self.reduce("reduce_sum", passed, (1,), False),
                            groups - 1)
        picked = self.gather(w, group, 0)  # (rows, k, n)
        y = self.matmul(self.unsqueeze(self.cast(x, self.torch_dtype(w)), 1), picked)
        return self.reshape(y, (rows, n))

    def argmax(self, x: Any, dim: int | None, keepdim: bool, least: bool = False) -> Any:
        """torch.argmax / argmin: the first extreme index along `dim`, or into the flattened
        tensor when `dim` is None (then keepdim keeps every dim at size 1)."""
        shape = self.shape(x)
        if not _live(x):
            t = x.tensor if isinstance(x, Const) else torch.tensor(x)
            fn = torch.argmin if least else torch.argmax
            return Const(fn(t, dim=dim, keepdim=bool(keepdim)), "const.argmax")
        if not shape:  # the one element of a scalar
            return Const(torch.tensor(0), "const.argmax")
        if least:  # the first least of x is the first greatest of -x (0 - x for integers)
            x = self.neg(x) if self.dtype(x).is_float else self.sub(0, x)
        if dim is None:
            flat = self.b.op("argmax", self.value(self.reshape(x, (-1,))), axes=(0,))
            return self.reshape(flat, (1,) * len(shape)) if keepdim else flat
        return self.b.op("argmax", self.value(x), axes=(_axis(dim, len(shape)),),
                         keepdims=bool(keepdim))

    def tri(self, x: Any, diagonal: int, lower: bool) -> Any:
        """tril/triu of a computed tensor: a select with the triangular mask."""
        shape = self.shape(x)
        if len(shape) < 2:
            raise _Refuse(f"{'tril' if lower else 'triu'} of a rank-{len(shape)} tensor")
        ones = torch.ones(shape[-2:], dtype=torch.bool)
        keep = ones.tril(diagonal) if lower else ones.triu(diagonal)
        zero = 0.0 if self.dtype(x).is_float else 0
        return self.where(Const(keep, "const.tri"), x, zero)

    def like(self, x: Any, fill: float, dtype: torch.dtype | None = None) -> Const:
        dt = dtype or self.torch_dtype(x)
        return Const(torch.full(self.shape(x), fill, dtype=dt), "const.like")


# ---- ATen converters (torch.export) --------------------------------------------------

AtenConverter = Callable[[_Ctx, dict[str, Any]], Any]


def _identity(cx: _Ctx, a: dict[str, Any]) -> Any:
    return a["self"] if "self" in a else a["input"]


def _dropout(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a["train"] and a["p"] > 0:
        raise _Refuse("dropout in training mode")
    return a["input"]


def _aten_batch_norm(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a.get("training") and a["running_mean"] is None and a["running_var"] is None:
        y = cx.batch_stats_norm(a["input"], a["weight"], a["bias"], a["eps"])
    elif a.get("training"):
        raise _Refuse("batch norm in training mode (call .eval() before capture)")
    else:
        y = cx.batch_norm(a["input"], a["weight"], a["bias"], a["running_mean"],
                          a["running_var"], a["eps"])
    if "training" in a:  # aten.batch_norm has one output, the _native_ variants three
        return y
    return (y, _Missing("batch-norm saved mean"), _Missing("batch-norm saved inverse std"))


def _aten_conv(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a.get("transposed"):
        return cx.conv_transpose(a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                                 a["output_padding"], a["groups"], a["dilation"])
    return cx.conv2d(a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                     a["dilation"], a["groups"])


def _aten_max_pool(with_indices: bool) -> AtenConverter:
    def conv(cx: _Ctx, a: dict[str, Any]) -> Any:
        y = cx.max_pool2d(a["self"], a["kernel_size"], a["stride"], a["padding"], a["dilation"],
                          a["ceil_mode"])
        return (y, _Missing("max-pool indices")) if with_indices else y
    return conv


def _aten_sum(cx: _Ctx, a: dict[str, Any]) -> Any:
    return cx.reduce("reduce_sum", cx.cast(a["self"], a.get("dtype")), a.get("dim"),
                     a.get("keepdim", False))


def _aten_mean(cx: _Ctx, a: dict[str, Any]) -> Any:
    return cx.reduce("reduce_mean", cx.cast(a["self"], a.get("dtype")), a.get("dim"),
                     a.get("keepdim", False))


def _aten_upsample(op: Any) -> AtenConverter:
    """upsample_* / _upsample_*: `op` itself resamples the probes, one spatial axis at a
    time (the `.vec` overloads take output_size or scale_factors lists, the others an
    output_size and one optional scale per axis)."""
    def conv(cx: _Ctx, a: dict[str, Any]) -> Any:
        src = "input" if "input" in a else "self"
        spatial = cx.rank(a[src]) - 2
        per_axis = [n for n in ("scales_d", "scales_h", "scales_w") if n in a] or \
            [n for n in ("scales",) if n in a]

        def run(t: torch.Tensor, k: int | None) -> torch.Tensor:
            args = dict(a, **{src: t})
            if k is None:
                return op(**args)
            keep = [t.shape[2 + j] for j in range(spatial)]
            if args.get("output_size") is not None:
                args["output_size"] = [a["output_size"][j] if j == k else keep[j]
                                       for j in range(spatial)]
            if args.get("scale_factors") is not None:
                args["scale_factors"] = [a["scale_factors"][j] if j == k else 1.0
                                         for j in range(spatial)]
            for j, name in enumerate(per_axis):
                if j != k:
                    args[name] = None
            return op(**args)
        return cx.resample(a[src], run)
    return conv


def _fx_interpolate(cx: _Ctx, a: dict[str, Any]) -> Any:
    """F.interpolate (and nn.Upsample): F.interpolate itself resamples the probes."""
    spatial = cx.rank(a["input"]) - 2

    def one_axis(v: Any, k: int | None, keep: list[int] | list[float]) -> Any:
        if v is None or k is None:
            return v
        vs = list(v) if isinstance(v, list | tuple) else [v] * spatial
        return tuple(vs[j] if j == k else keep[j] for j in range(spatial))

    def run(t: torch.Tensor, k: int | None) -> torch.Tensor:
        return F.interpolate(t, size=one_axis(a["size"], k, list(t.shape[2:])),
                             scale_factor=one_axis(a["scale_factor"], k, [1.0] * spatial),
                             mode=a["mode"], align_corners=a["align_corners"],
                             recompute_scale_factor=a["recompute_scale_factor"],
                             antialias=a["antialias"])
    return cx.resample(a["input"], run)


def _fx_correction(a: dict[str, Any]) -> float:
    """Tensor.var/std's correction from `correction` or the older `unbiased` flag."""
    if a.get("correction") is not None:
        return float(a["correction"])
    return 0.0 if a.get("unbiased") is False else 1.0


def _correction(a: dict[str, Any]) -> float:
    """var/std's correction: 1 (the unbiased estimate) when not given."""
    c = a.get("correction")
    return 1.0 if c is None else float(c)


def _aten_native_layer_norm(cx: _Ctx, a: dict[str, Any]) -> Any:
    y = cx.layer_norm(a["input"], a["normalized_shape"], a["weight"], a["bias"], a["eps"])
    return (y, _Missing("layer-norm mean"), _Missing("layer-norm inverse std"))


def _aten_to(cx: _Ctx, a: dict[str, Any]) -> Any:
    if "other" in a:  # to.other: to the other tensor's dtype
        return cx.cast(a["self"], cx.torch_dtype(a["other"]))
    return cx.cast(a["self"], a.get("dtype"))


def _aten_new(fill: float | None) -> AtenConverter:
    """new_ones / new_zeros / new_full / new_empty: a known tensor of the given size."""
    def conv(cx: _Ctx, a: dict[str, Any]) -> Any:
        dtype = a.get("dtype") or cx.torch_dtype(a["self"])
        value = a["fill_value"] if fill is None else fill
        return Const(torch.full(tuple(a["size"]), value, dtype=dtype), "const.new")
    return conv


def _aten_max_dim(cx: _Ctx, a: dict[str, Any]) -> Any:
    return (cx.reduce("reduce_max", a["self"], a["dim"], a["keepdim"]),
            cx.argmax(a["self"], a["dim"], a["keepdim"]))


def _aten_min_dim(cx: _Ctx, a: dict[str, Any]) -> Any:
    return (cx.reduce_min(a["self"], a["dim"], a["keepdim"]),
            cx.argmax(a["self"], a["dim"], a["keepdim"], least=True))


# ---- complex tensors as pairs of real ones ---------------------------------------------

# ATen ops that move or view elements without reading their values: on a complex tensor,
# the same op on each part.
_COMPLEX_MOVES = frozenset({
    "unsqueeze", "squeeze", "view", "reshape", "_unsafe_view", "slice", "select", "permute",
    "transpose", "t", "expand", "clone", "alias", "contiguous", "flatten", "unflatten",
    "index_select", "repeat", "detach", "lift_fresh_copy", "narrow", "movedim", "unbind",
    "split", "chunk", "split_with_sizes", "cat", "stack"})


def _as_complex(x: Any) -> Any:
    if isinstance(x, Const) and x.tensor.is_complex():
        return _Complex(Const(x.tensor.real.clone(), f"{x.name}.re"),
                        Const(x.tensor.imag.clone(), f"{x.name}.im"))
    if isinstance(x, list | tuple):
        return type(x)(_as_complex(y) for y in x)
    return x


def _has_complex(a: dict[str, Any]) -> bool:
    return any(isinstance(leaf, _Complex) or (isinstance(leaf, Const) and leaf.tensor.is_complex())
               for leaf in _leaves(a))


def _part(x: Any, which: str) -> Any:
    """One part of every complex operand in x (a real operand is its own real part and has
    no imaginary one in a move: moves take one complex tensor or a list of them)."""
    if isinstance(x, _Complex):
        return getattr(x, which)
    if isinstance(x, list | tuple):
        return type(x)(_part(y, which) for y in x)
    return x


def _pairwise(re: Any, im: Any) -> Any:
    if isinstance(re, tuple):
        return tuple(_pairwise(r, i) for r, i in zip(re, im, strict=True))
    return _Complex(re, im)


def _complex_call(cx: _Ctx, target: Any, a: dict[str, Any], conv: AtenConverter) -> Any:
    """An ATen op with a complex operand: products, sums and moves of complex pairs."""
    name = target._overloadpacket.__name__
    a = {k: _as_complex(v) for k, v in a.items()}
    if name in _COMPLEX_MOVES:
        if name in ("cat", "stack") and not all(isinstance(t, _Complex) for t in a["tensors"]):
            raise _Refuse(f"{name} of complex and real tensors")
        return _pairwise(conv(cx, {k: _part(v, "re") for k, v in a.items()}),
                         conv(cx, {k: _part(v, "im") for k, v in a.items()}))
    if name.startswith("fft_"):  # transforms take complex operands themselves
        return conv(cx, a)
    if name in ("to", "_to_copy"):
        dtype = a.get("dtype")
        if dtype is not None and not dtype.is_complex:
            raise _Refuse("a complex tensor cast to a real type (its imaginary part dropped)")
        return a["self"] if "self" in a else a["input"]
    if name == "view_as_real":
        c = a["self"]
        return cx.cat([cx.unsqueeze(c.re, -1), cx.unsqueeze(c.im, -1)], -1)
    if name == "real":
        return a["self"].re
    if name == "imag":
        return a["self"].im
    x, y = a.get("self"), a.get("other")
    if name == "mul":
        if isinstance(x, _Complex) and isinstance(y, _Complex):
            return _Complex(cx.sub(cx.mul(x.re, y.re), cx.mul(x.im, y.im)),
                            cx.add(cx.mul(x.re, y.im), cx.mul(x.im, y.re)))
        c, r = (x, y) if isinstance(x, _Complex) else (y, x)
        return _Complex(cx.mul(c.re, r), cx.mul(c.im, r))
    if name in ("add", "sub") and a.get("alpha", 1) == 1:
        step = cx.add if name == "add" else cx.sub
        if isinstance(x, _Complex) and isinstance(y, _Complex):
            return _Complex(step(x.re, y.re), step(x.im, y.im))
        if isinstance(x, _Complex):
            return _Complex(step(x.re, y), x.im)
        return _Complex(step(x, y.re), y.im if name == "add" else cx.mul(y.im, -1.0))
    raise _Refuse(f"{name} of a complex tensor")


def _dft(cx: _Ctx, x: Any, dims: Sequence[int], norm: str | None, inverse: bool) -> _Complex:
    """The discrete Fourier transform of x (real or complex) along dims, as products with
    the cos and sin matrices: (a + ib)(C -+ iS) along each dim (FNet's token mixing)."""
    # The unscaled direction under norm: forward for backward, inverse for forward.
    plain = {None: not inverse, "backward": not inverse, "forward": inverse}
    if norm not in (*plain, "ortho"):
        raise _Refuse(f"fft norm {norm!r}")
    z = x if isinstance(x, _Complex) else _Complex(x, None)
    rank = cx.rank(z.re)
    for dim in dims:
        d = _axis(dim, rank)
        n = cx.shape(z.re)[d]
        f = n ** -0.5 if norm == "ortho" else 1.0 if plain[norm] else 1.0 / n
        c, s = composite.dft_matrices(n, n, n, inverse, f)
        cos = Const(torch.from_numpy(c), "const.dft_cos")
        sin = Const(torch.from_numpy(s), "const.dft_sin")  # signed by the direction
        perm = [*range(rank)]
        perm[d], perm[-1] = perm[-1], perm[d]

        def along(t: Any, m: Const, perm: list[int] = perm) -> Any:
            # t contracted with the symmetric matrix m along d
            return cx.transpose(cx.matmul(cx.transpose(t, perm), m), perm)

        # (a + ib)(C + iS') = (aC - bS') + i(aS' + bC), S' the signed sine above.
        re = along(z.re, cos) if z.im is None else cx.sub(along(z.re, cos), along(z.im, sin))
        im = along(z.re, sin) if z.im is None else cx.add(along(z.re, sin), along(z.im, cos))
        z = _Complex(re, im)
    return z


def _fft(inverse: bool, many: bool) -> AtenConverter:
    def convert(cx: _Ctx, a: dict[str, Any]) -> Any:
        x = a["self"]
        rank = cx.rank(x)
        if many:
            if a["s"] is not None:
                raise _Refuse("fftn with output sizes (s)")
            dims = list(range(rank)) if a["dim"] is None else _int_list(a["dim"])
        else:
            if a["n"] is not None and a["n"] != cx.shape(x)[_axis(a["dim"], rank)]:
                raise _Refuse("fft with a length (n) other than the axis's")
            dims = [a["dim"]]
        if cx.dtype(x.re if isinstance(x, _Complex) else x) != DType.F32:
            raise _Refuse("fft of a non-float32 tensor")
        return _dft(cx, x, dims, a["norm"], inverse)
    return convert


def _view_as_complex(cx: _Ctx, a: dict[str, Any]) -> Any:
    x = a["self"]
    if not cx.shape(x) or cx.shape(x)[-1] != 2:
        raise _Refuse(f"view_as_complex of a {list(cx.shape(x))} tensor (last dim not 2)")
    return _Complex(cx.select(x, -1, 0), cx.select(x, -1, 1))


def _polar(cx: _Ctx, a: dict[str, Any]) -> Any:
    r, theta = a["abs"], a["angle"]
    return _Complex(cx.mul(r, cx.unary("cos", theta)), cx.mul(r, cx.unary("sin", theta)))


def _aten_unary(op: str) -> AtenConverter:
    return lambda cx, a: cx.unary(op, a["self"])


def _aten_compare(op: str) -> AtenConverter:
    return lambda cx, a: cx.compare(op, a["self"], a["other"])


ATEN: dict[Any, AtenConverter] = {
    # element-wise arithmetic
    aten.add.Tensor: lambda cx, a: cx.add(a["self"], a["other"], a["alpha"]),
    aten.add.Scalar: lambda cx, a: cx.add(a["self"], a["other"], a["alpha"]),
    aten.sub.Tensor: lambda cx, a: cx.sub(a["self"], a["other"], a["alpha"]),
    aten.sub.Scalar: lambda cx, a: cx.sub(a["self"], a["other"], a["alpha"]),
    aten.rsub.Tensor: lambda cx, a: cx.sub(a["other"], a["self"], a["alpha"]),
    aten.rsub.Scalar: lambda cx, a: cx.sub(a["other"], a["self"], a["alpha"]),
    aten.mul.Tensor: lambda cx, a: cx.mul(a["self"], a["other"]),
    aten.mul.Scalar: lambda cx, a: cx.mul(a["self"], a["other"]),
    aten.div.Tensor: lambda cx, a: cx.div(a["self"], a["other"]),
    aten.div.Scalar: lambda cx, a: cx.div(a["self"], a["other"]),
    aten.div.Tensor_mode: lambda cx, a: cx.div(a["self"], a["other"], a["rounding_mode"]),
    aten.neg.default: lambda cx, a: cx.neg(a["self"]),
    aten.pow.Tensor_Scalar: lambda cx, a: cx.pow(a["self"], a["exponent"]),
    aten.pow.Tensor_Tensor: lambda cx, a: cx.pow(a["self"], a["exponent"]),
    aten.square.default: lambda cx, a: cx.pow(a["self"], 2),
    aten.exp.default: _aten_unary("exp"),
    aten.expm1.default: lambda cx, a: cx.expm1(a["self"]),
    aten.slice_scatter.default: lambda cx, a: cx.scatter_slice(
        a["self"], a["src"], a["dim"], a["start"], a["end"], a["step"]),
    aten.select_scatter.default: lambda cx, a: cx.scatter_select(a["self"], a["src"], a["dim"],
                                                                 a["index"]),
    aten.log.default: _aten_unary("log"),
    aten.sqrt.default: _aten_unary("sqrt"),
    aten.rsqrt.default: _aten_unary("rsqrt"),
    aten.reciprocal.default: _aten_unary("recip"),
    aten.erf.default: _aten_unary("erf"),
    aten.view_as_complex.default: _view_as_complex,
    aten.fft_fft.default: _fft(False, False),
    aten.fft_ifft.default: _fft(True, False),
    aten.fft_fftn.default: _fft(False, True),
    aten.fft_ifftn.default: _fft(True, True),
    # Reached with a real operand only (a complex one takes `_complex_call`).
    aten.view_as_real.default: lambda cx, a: _raise(_Refuse("view_as_real of a real tensor")),
    aten.real.default: lambda cx, a: a["self"],
    aten.imag.default: lambda cx, a: _raise(_Refuse("imag of a real tensor")),
    aten.polar.default: _polar,
    aten.sin.default: _aten_unary("sin"),
    aten.cos.default: _aten_unary("cos"),
    aten.acos.default: _aten_unary("acos"),
    aten.abs.default: lambda cx, a: cx.abs(a["self"]),
    aten.maximum.default: lambda cx, a: cx.binary("maximum", a["self"], a["other"]),
    aten.minimum.default: lambda cx, a: cx.binary("minimum", a["self"], a["other"]),
    aten.max.other: lambda cx, a: cx.binary("maximum", a["self"], a["other"]),
    aten.min.other: lambda cx, a: cx.binary("minimum", a["self"], a["other"]),
    aten.clamp.default: lambda cx, a: cx.clamp(a["self"], a["min"], a["max"]),
    aten.clamp.Tensor: lambda cx, a: cx.clamp(a["self"], a["min"], a["max"]),
    aten.clamp_min.default: lambda cx, a: cx.clamp(a["self"], a["min"]),
    aten.clamp_max.default: lambda cx, a: cx.clamp(a["self"], None, a["max"]),
    aten.hardtanh.default: lambda cx, a: cx.clamp(a["self"], a["min_val"], a["max_val"]),
    aten.relu6.default: lambda cx, a: cx.clamp(a["self"], 0.0, 6.0),
    aten.cumsum.default: lambda cx, a: cx.cumsum(cx.cast(a["self"], a["dtype"]), a["dim"]),
    # comparisons, logic and select
    aten.eq.Tensor: _aten_compare("eq"), aten.eq.Scalar: _aten_compare("eq"),
    aten.ne.Tensor: _aten_compare("ne"), aten.ne.Scalar: _aten_compare("ne"),
    aten.lt.Tensor: _aten_compare("lt"), aten.lt.Scalar: _aten_compare("lt"),
    aten.le.Tensor: _aten_compare("le"), aten.le.Scalar: _aten_compare("le"),
    aten.gt.Tensor: _aten_compare("gt"), aten.gt.Scalar: _aten_compare("gt"),
    aten.ge.Tensor: _aten_compare("ge"), aten.ge.Scalar: _aten_compare("ge"),
    aten.logical_not.default: lambda cx, a: cx.logical_not(a["self"]),
    aten.bitwise_not.default: lambda cx, a: cx.logical_not(a["self"])
    if cx.dtype(a["self"]) == DType.BOOL else _refuse("bitwise not of an integer tensor"),
    aten.logical_and.default: lambda cx, a: cx.logical("and", a["self"], a["other"]),
    aten.logical_or.default: lambda cx, a: cx.logical("or", a["self"], a["other"]),
    aten.__and__.Tensor: lambda cx, a: cx.logical("and", a["self"], a["other"]),
    aten.__or__.Tensor: lambda cx, a: cx.logical("or", a["self"], a["other"]),
    aten.bitwise_and.Tensor: lambda cx, a: cx.logical("and", a["self"], a["other"]),
    aten.bitwise_or.Tensor: lambda cx, a: cx.logical("or", a["self"], a["other"]),
    aten.where.self: lambda cx, a: cx.where(a["condition"], a["self"], a["other"]),
    aten.where.ScalarOther: lambda cx, a: cx.where(a["condition"], a["self"], a["other"]),
    aten.where.ScalarSelf: lambda cx, a: cx.where(a["condition"], a["self"], a["other"]),
    aten.where.Scalar: lambda cx, a: cx.where(a["condition"], a["self"], a["other"]),
    aten.tril.default: lambda cx, a: cx.tri(a["self"], a["diagonal"], True),
    aten.triu.default: lambda cx, a: cx.tri(a["self"], a["diagonal"], False),
    aten.masked_fill.Scalar: lambda cx, a: cx.where(a["mask"], a["value"], a["self"]),
    aten.masked_scatter.default: lambda cx, a: cx.masked_scatter(a["self"], a["mask"],
                                                                 a["source"]),
    aten.masked_fill.Tensor: lambda cx, a: cx.where(a["mask"], a["value"], a["self"]),
    # activations
    aten.relu.default: lambda cx, a: cx.unary("relu", a["self"]),
    aten.tanh.default: lambda cx, a: cx.unary("tanh", a["self"]),
    aten.sigmoid.default: lambda cx, a: cx.unary("sigmoid", a["self"]),
    aten.gelu.default: lambda cx, a: cx.unary("gelu", a["self"], approximate=a["approximate"]),
    aten.silu.default: lambda cx, a: cx.silu(a["self"]),
    aten.softmax.int: lambda cx, a: cx.softmax(cx.cast(a["self"], a["dtype"]), a["dim"]),
    aten._softmax.default: lambda cx, a: cx.softmax(a["self"], a["dim"]),
    # matrix products and convolution
    aten.mm.default: lambda cx, a: cx.matmul(a["self"], a["mat2"]),
    aten.bmm.default: lambda cx, a: cx.matmul(a["self"], a["mat2"]),
    aten.matmul.default: lambda cx, a: cx.matmul(a["self"], a["other"]),
    aten.linear.default: lambda cx, a: cx.linear(a["input"], a["weight"], a["bias"]),
    aten.addmm.default: lambda cx, a: cx.addmm(a["self"], a["mat1"], a["mat2"], a["beta"],
                                               a["alpha"]),
    aten.conv1d.default: _aten_conv,
    aten.conv1d.padding: _aten_conv,
    aten.conv2d.default: _aten_conv,
    aten.conv2d.padding: _aten_conv,
    aten.convolution.default: _aten_conv,
    aten.conv_transpose1d.default: lambda cx, a: cx.conv_transpose(
        a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["output_padding"],
        a["groups"], a["dilation"]),
    aten.conv_transpose2d.input: lambda cx, a: cx.conv_transpose(
        a["input"], a["weight"], a["bias"], a["stride"], a["padding"], a["output_padding"],
        a["groups"], a["dilation"]),
    aten.scaled_dot_product_attention.default: lambda cx, a: cx.sdpa(
        a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"], a["is_causal"],
        a["scale"], a["enable_gqa"]),
    # normalisation, pooling, reductions
    aten.layer_norm.default: lambda cx, a: cx.layer_norm(a["input"], a["normalized_shape"],
                                                         a["weight"], a["bias"], a["eps"]),
    aten.native_layer_norm.default: _aten_native_layer_norm,
    aten.rms_norm.default: lambda cx, a: cx.rms_norm(a["input"], a["normalized_shape"],
                                                     a["weight"], a["eps"]),
    aten.group_norm.default: lambda cx, a: cx.group_norm(a["input"], a["num_groups"],
                                                         a["weight"], a["bias"], a["eps"]),
    aten.native_group_norm.default: lambda cx, a: (
        cx.group_norm(a["input"], a["group"], a["weight"], a["bias"], a["eps"]),
        _Missing("group-norm mean"), _Missing("group-norm inverse std")),
    aten.linalg_vector_norm.default: lambda cx, a: cx.vector_norm(
        cx.cast(a["self"], a.get("dtype")), a.get("ord", 2), a.get("dim"),
        a.get("keepdim", False)),
    # interpolation: each overload resamples its own probes (`_aten_upsample`)
    aten.upsample_nearest1d.vec: _aten_upsample(aten.upsample_nearest1d.vec),
    aten.upsample_nearest1d.default: _aten_upsample(aten.upsample_nearest1d.default),
    aten.upsample_nearest2d.vec: _aten_upsample(aten.upsample_nearest2d.vec),
    aten.upsample_nearest2d.default: _aten_upsample(aten.upsample_nearest2d.default),
    aten.upsample_nearest3d.vec: _aten_upsample(aten.upsample_nearest3d.vec),
    aten.upsample_nearest3d.default: _aten_upsample(aten.upsample_nearest3d.default),
    aten._upsample_nearest_exact1d.vec: _aten_upsample(aten._upsample_nearest_exact1d.vec),
    aten._upsample_nearest_exact1d.default: _aten_upsample(aten._upsample_nearest_exact1d.default),
    aten._upsample_nearest_exact2d.vec: _aten_upsample(aten._upsample_nearest_exact2d.vec),
    aten._upsample_nearest_exact2d.default: _aten_upsample(aten._upsample_nearest_exact2d.default),
    aten._upsample_nearest_exact3d.vec: _aten_upsample(aten._upsample_nearest_exact3d.vec),
    aten._upsample_nearest_exact3d.default: _aten_upsample(aten._upsample_nearest_exact3d.default),
    aten.upsample_linear1d.vec: _aten_upsample(aten.upsample_linear1d.vec),
    aten.upsample_linear1d.default: _aten_upsample(aten.upsample_linear1d.default),
    aten.upsample_bilinear2d.vec: _aten_upsample(aten.upsample_bilinear2d.vec),
    aten.upsample_bilinear2d.default: _aten_upsample(aten.upsample_bilinear2d.default),
    aten.upsample_trilinear3d.vec: _aten_upsample(aten.upsample_trilinear3d.vec),
    aten.upsample_trilinear3d.default: _aten_upsample(aten.upsample_trilinear3d.default),
    aten.upsample_bicubic2d.vec: _aten_upsample(aten.upsample_bicubic2d.vec),
    aten.upsample_bicubic2d.default: _aten_upsample(aten.upsample_bicubic2d.default),
    aten._upsample_bilinear2d_aa.vec: _aten_upsample(aten._upsample_bilinear2d_aa.vec),
    aten._upsample_bilinear2d_aa.default: _aten_upsample(aten._upsample_bilinear2d_aa.default),
    aten._upsample_bicubic2d_aa.vec: _aten_upsample(aten._upsample_bicubic2d_aa.vec),
    aten._upsample_bicubic2d_aa.default: _aten_upsample(aten._upsample_bicubic2d_aa.default),
    aten.batch_norm.default: _aten_batch_norm,
    aten._native_batch_norm_legit_no_training.default: _aten_batch_norm,
    aten.max_pool2d.default: _aten_max_pool(False),
    aten.max_pool2d_with_indices.default: _aten_max_pool(True),
    aten.avg_pool2d.default: lambda cx, a: cx.avg_pool2d(
        a["self"], a["kernel_size"], a["stride"], a["padding"], a["ceil_mode"],
        a["count_include_pad"], a["divisor_override"]),
    aten.adaptive_avg_pool2d.default: lambda cx, a: cx.adaptive_avg_pool2d(a["self"],
                                                                           a["output_size"]),
    aten._adaptive_avg_pool2d.default: lambda cx, a: cx.adaptive_avg_pool2d(a["self"],
                                                                            a["output_size"]),
    aten.adaptive_avg_pool1d.default: lambda cx, a: cx.adaptive_avg_pool1d(a["self"],
                                                                           a["output_size"]),
    aten.amax.default: lambda cx, a: cx.reduce("reduce_max", a["self"], a["dim"], a["keepdim"]),
    aten.logsumexp.default: lambda cx, a: cx.logsumexp(a["self"], a["dim"], a["keepdim"]),
    aten.log1p.default: lambda cx, a: cx.log1p(a["self"]),
    aten.any.default: lambda cx, a: cx.any_all(a["self"], None, False, False),
    aten.any.dim: lambda cx, a: cx.any_all(a["self"], a["dim"], a["keepdim"], False),
    aten.any.dims: lambda cx, a: cx.any_all(a["self"], a["dim"], a["keepdim"], False),
    aten.all.default: lambda cx, a: cx.any_all(a["self"], None, False, True),
    aten.all.dim: lambda cx, a: cx.any_all(a["self"], a["dim"], a["keepdim"], True),
    aten.all.dims: lambda cx, a: cx.any_all(a["self"], a["dim"], a["keepdim"], True),
    aten.scatter.src: lambda cx, a: cx.scatter_src(a["self"], a["dim"], a["index"], a["src"]),
    aten.scatter.value: lambda cx, a: cx.scatter_value(a["self"], a["dim"], a["index"],
                                                       a["value"]),
    aten.argmax.default: lambda cx, a: cx.argmax(a["self"], a["dim"], a["keepdim"]),
    aten.topk.default: lambda cx, a: cx.topk(a["self"], a["k"], a["dim"], a["largest"]),
    aten.floor_divide.default: lambda cx, a: cx.floor_divide(a["self"], a["other"]),
    aten.histc.default: lambda cx, a: cx.histc(a["self"], a["bins"], a["min"], a["max"]),
    aten.index_put.default: lambda cx, a: cx.index_put(a["self"], a["indices"], a["values"],
                                                        a["accumulate"]),
    # Its contents are unspecified; a write of every element (index_put at a permutation)
    # or nothing at all may follow, and zeros are one of its contents.
    aten.empty_like.default: lambda cx, a: cx.like(a["self"], 0.0, a["dtype"]),
    aten.sort.default: lambda cx, a: cx.topk(a["self"], cx.shape(a["self"])[a["dim"]],
                                             a["dim"], a["descending"]),
    aten.sort.stable: lambda cx, a: cx.topk(a["self"], cx.shape(a["self"])[a["dim"]],
                                            a["dim"], a["descending"]),
    aten.argmin.default: lambda cx, a: cx.argmax(a["self"], a["dim"], a["keepdim"], least=True),
    aten.max.dim: _aten_max_dim,
    aten.max.default: lambda cx, a: cx.reduce("reduce_max", a["self"], None, False),
    aten.amin.default: lambda cx, a: cx.reduce_min(a["self"], a["dim"], a["keepdim"]),
    aten.min.dim: _aten_min_dim,
    aten.mean.dim: _aten_mean,
    aten.mean.default: _aten_mean,
    aten.sum.dim_IntList: _aten_sum,
    aten.sum.default: _aten_sum,
    # movement
    aten.t.default: lambda cx, a: cx.t(a["self"]),
    aten.permute.default: lambda cx, a: cx.transpose(a["self"], a["dims"]),
    aten.transpose.int: lambda cx, a: cx.swap(a["self"], a["dim0"], a["dim1"]),
    aten.view.default: lambda cx, a: cx.reshape(a["self"], a["size"]),
    aten._unsafe_view.default: lambda cx, a: cx.reshape(a["self"], a["size"]),
    aten.reshape.default: lambda cx, a: cx.reshape(a["self"], a["shape"]),
    aten.flatten.using_ints: lambda cx, a: cx.flatten(a["self"], a["start_dim"], a["end_dim"]),
    aten.unflatten.int: lambda cx, a: cx.unflatten(a["self"], a["dim"], a["sizes"]),
    aten.unsqueeze.default: lambda cx, a: cx.unsqueeze(a["self"], a["dim"]),
    aten.squeeze.default: lambda cx, a: cx.squeeze(a["self"]),
    aten.squeeze.dim: lambda cx, a: cx.squeeze(a["self"], a["dim"]),
    aten.squeeze.dims: lambda cx, a: cx.squeeze(a["self"], a["dim"]),
    aten.expand.default: lambda cx, a: cx.expand(a["self"], a["size"]),
    aten.expand_as.default: lambda cx, a: cx.expand(a["self"], cx.shape(a["other"])),
    aten.view_as.default: lambda cx, a: cx.reshape(a["self"], cx.shape(a["other"])),
    aten.reshape_as.default: lambda cx, a: cx.reshape(a["self"], cx.shape(a["other"])),
    aten.repeat.default: lambda cx, a: cx.repeat(a["self"], a["repeats"]),
    aten.repeat_interleave.self_int: lambda cx, a: cx.repeat_interleave(
        a["self"], a["repeats"], a["dim"]),
    aten.im2col.default: lambda cx, a: cx.unfold_patches(
        a["self"], a["kernel_size"], a["dilation"], a["padding"], a["stride"]),
    aten.col2im.default: lambda cx, a: cx.fold_patches(
        a["self"], a["output_size"], a["kernel_size"], a["dilation"], a["padding"],
        a["stride"]),
    # activations and normalisers written with the IR's ops (`superopt.importers.composite`)
    aten._log_softmax.default: lambda cx, a: composite.log_softmax(cx.prim, a["self"],
                                                                   a["dim"]),
    aten.log_softmax.int: lambda cx, a: composite.log_softmax(
        cx.prim, cx.cast(a["self"], a["dtype"]), a["dim"]),
    aten.elu.default: lambda cx, a: composite.elu(
        cx.prim, a["self"], float(a["alpha"]), float(a["scale"]),
        1.0 / float(a["input_scale"])),
    aten.selu.default: lambda cx, a: composite.elu(cx.prim, a["self"], composite.SELU_ALPHA,
                                                   composite.SELU_SCALE),
    aten.celu.default: lambda cx, a: composite.elu(cx.prim, a["self"], float(a["alpha"]),
                                                   inner=float(a["alpha"])),
    aten.softplus.default: lambda cx, a: composite.softplus(cx.prim, a["self"],
                                                            float(a["beta"])),
    aten.mish.default: lambda cx, a: composite.mish(cx.prim, a["self"]),
    aten.log_sigmoid.default: lambda cx, a: composite.log_sigmoid(cx.prim, a["self"]),
    aten.log_sigmoid_forward.default: lambda cx, a: (
        composite.log_sigmoid(cx.prim, a["self"]), _Missing("log-sigmoid buffer")),
    aten.leaky_relu.default: lambda cx, a: cx.prelu(
        a["self"], Const(torch.tensor([float(a["negative_slope"])]), "slope")),
    aten.prelu.default: lambda cx, a: cx.prelu(a["self"], a["weight"]),
    aten._prelu_kernel.default: lambda cx, a: cx.prelu(a["self"], a["weight"]),
    aten.var.correction: lambda cx, a: composite.variance(
        cx.prim, a["self"], a["dim"] or (), _correction(a), a.get("keepdim", False)),
    aten.std.correction: lambda cx, a: cx.unary("sqrt", composite.variance(
        cx.prim, a["self"], a["dim"] or (), _correction(a), a.get("keepdim", False))),
    aten.var.dim: lambda cx, a: composite.variance(cx.prim, a["self"], a["dim"] or (),
                                                   float(a["unbiased"]), a["keepdim"]),
    aten.std.dim: lambda cx, a: cx.unary("sqrt", composite.variance(
        cx.prim, a["self"], a["dim"] or (), float(a["unbiased"]), a["keepdim"])),
    aten.pixel_shuffle.default: lambda cx, a: composite.depth_to_space(
        cx.prim, a["self"], a["upscale_factor"], "CRD"),
    aten.pixel_unshuffle.default: lambda cx, a: composite.space_to_depth(
        cx.prim, a["self"], a["downscale_factor"], "CRD"),
    aten.einsum.default: lambda cx, a: cx.einsum(a["equation"], a["tensors"]),
    aten._weight_norm.default: lambda cx, a: cx.weight_norm(a["v"], a["g"], a.get("dim", 0)),
    aten.slice.Tensor: lambda cx, a: cx.slice(a["self"], a["dim"], a["start"], a["end"],
                                              a["step"]),
    aten.select.int: lambda cx, a: cx.select(a["self"], a["dim"], a["index"]),
    aten.split.Tensor: lambda cx, a: cx.split(a["self"], a["split_size"], a["dim"]),
    aten.tensor_split.indices: lambda cx, a: cx.tensor_split(a["self"], a["indices"], a["dim"]),
    # The functional form of an in-place copy_ (see _out_of_place): src, broadcast to the
    # destination's shape in its dtype.
    aten.copy.default: lambda cx, a: cx.cast(cx.expand(a["src"], cx.shape(a["self"])),
                                             cx.torch_dtype(a["self"])),
    aten.split_with_sizes.default: lambda cx, a: cx.split(a["self"], a["split_sizes"], a["dim"]),
    aten.chunk.default: lambda cx, a: cx.chunk(a["self"], a["chunks"], a["dim"]),
    aten.unbind.int: lambda cx, a: cx.unbind(a["self"], a["dim"]),
    aten.cat.default: lambda cx, a: cx.cat(a["tensors"], a["dim"]),
    aten.concat.default: lambda cx, a: cx.cat(a["tensors"], a["dim"]),  # cat's alias
    aten.stack.default: lambda cx, a: cx.stack(a["tensors"], a["dim"]),
    aten.roll.default: lambda cx, a: cx.roll(a["self"], a["shifts"], a["dims"]),
    aten.constant_pad_nd.default: lambda cx, a: cx.pad(a["self"], a["pad"], a["value"]),
    aten.pad.default: lambda cx, a: cx.pad(a["self"], a["pad"], a["value"])
    if a["mode"] == "constant" else _refuse(f"{a['mode']} padding"),
    aten.index.Tensor: lambda cx, a: cx.index_tensors(a["self"], a["indices"]),
    aten.index_select.default: lambda cx, a: cx.gather(a["self"], a["index"], a["dim"]),
    aten.gather.default: lambda cx, a: cx.gather_elements(a["self"], a["dim"], a["index"]),
    aten.embedding.default: lambda cx, a: cx.embedding(a["weight"], a["indices"]),
    # identities on values
    aten.clone.default: _identity,
    aten.contiguous.default: _identity,
    aten.detach.default: _identity,
    aten.alias.default: _identity,
    aten.lift_fresh_copy.default: _identity,
    aten.dropout.default: _dropout,
    aten._to_copy.default: _aten_to,
    aten.to.dtype: _aten_to,
    aten.to.dtype_layout: _aten_to,
    aten.to.device: _aten_to,
    aten.to.other: _aten_to,
    aten.type_as.default: _aten_to,
    aten.new_ones.default: _aten_new(1),
    aten.new_zeros.default: _aten_new(0),
    aten.new_empty.default: _aten_new(0),
    aten.new_full.default: _aten_new(None),
    # values that depend on an operand's shape only
    aten.zeros_like.default: lambda cx, a: cx.like(a["self"], 0.0, a["dtype"]),
    aten.ones_like.default: lambda cx, a: cx.like(a["self"], 1.0, a["dtype"]),
    aten.full_like.default: lambda cx, a: cx.like(a["self"], a["fill_value"], a["dtype"]),
    aten.sym_size.int: lambda cx, a: cx.shape(a["self"])[a["dim"]],
    # run-time assertions about static facts the import already checks
    aten._assert_tensor_metadata.default: lambda cx, a: None,
}


def _bind(schema: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments by schema name, with defaults filled in."""
    out: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            out[arg.name] = args[i]
        elif arg.name in kwargs:
            out[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            out[arg.name] = None
    return out


# ---- FX converters (torch.fx.symbolic_trace) -----------------------------------------

FxConverter = Callable[[_Ctx, tuple[Any, ...], dict[str, Any]], Any]


def _spec(spec: str, fn: Callable[[_Ctx, dict[str, Any]], Any]) -> FxConverter:
    """A converter taking Python-level arguments named by `spec` ("input, dim=-1, ...")."""
    names: list[str] = []
    defaults: dict[str, Any] = {}
    for part in (p.strip() for p in spec.split(",")):
        name, eq, default = part.partition("=")
        names.append(name.strip())
        if eq:
            defaults[name.strip()] = ast.literal_eval(default.strip())

    def conv(cx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if len(args) > len(names):
            raise _Refuse(f"{len(args)} positional arguments")
        a = dict(defaults)
        a.update(zip(names, args, strict=False))
        for k, v in kwargs.items():
            if k not in names:
                raise _Refuse(f"argument {k!r}")
            a[k] = v
        missing = [n for n in names if n not in a]
        if missing:
            raise _Refuse(f"missing argument {missing[0]!r}")
        return fn(cx, a)
    return conv


def _sizes(rest: Sequence[Any]) -> list[int]:
    """Sizes given as varargs (x.view(2, 3)) or as one sequence (x.view((2, 3)))."""
    if len(rest) == 1 and isinstance(rest[0], list | tuple | torch.Size):
        return list(rest[0])
    return list(rest)


def _fx_dropout(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a["training"] and a["p"] > 0:
        raise _Refuse("dropout in training mode")
    return a["input"]


def _fx_to(cx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    dtype = kwargs.get("dtype")
    for v in args[1:]:
        if isinstance(v, torch.dtype):
            dtype = v
        elif _live(v) or isinstance(v, Const):
            dtype = cx.torch_dtype(v)
    return cx.cast(args[0], dtype)


def _fx_getattr(cx: _Ctx, a: dict[str, Any]) -> Any:
    x, name = a["obj"], a["name"]
    if isinstance(x, tuple) and name in ("values", "indices"):  # torch.max(x, dim) and co.
        item = x[0 if name == "values" else 1]
        if isinstance(item, _Missing):
            raise _Refuse(f"use of {item.what}")
        return item
    if name == "shape":
        return torch.Size(cx.shape(x))
    if name == "ndim":
        return cx.rank(x)
    if name == "dtype":
        return cx.torch_dtype(x)
    if name == "T":
        return cx.transpose(x, tuple(reversed(range(cx.rank(x)))))
    raise _Refuse(f"tensor attribute {name!r}")


def _fx_getitem(cx: _Ctx, a: dict[str, Any]) -> Any:
    x, idx = a["a"], a["b"]
    if isinstance(x, tuple | list):
        # A missing item passes through: an op that reads it refuses it (`_Ctx.value`),
        # a getitem nothing reads does not.
        return x[idx]
    return cx.index(x, idx)


def _fx_max_pool(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a["return_indices"]:
        raise _Refuse("max pooling that returns indices")
    return cx.max_pool2d(a["input"], a["kernel_size"], a["stride"], a["padding"],
                         a["dilation"], a["ceil_mode"])


def _fx_pad(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a["mode"] != "constant":
        raise _Refuse(f"{a['mode']} padding")
    return cx.pad(a["input"], a["pad"], a["value"])


def _fx_batch_norm(cx: _Ctx, a: dict[str, Any]) -> Any:
    if a["training"] and a["running_mean"] is None and a["running_var"] is None:
        return cx.batch_stats_norm(a["input"], a["weight"], a["bias"], a["eps"])
    if a["training"]:
        raise _Refuse("batch norm in training mode")
    return cx.batch_norm(a["input"], a["weight"], a["bias"], a["running_mean"],
                         a["running_var"], a["eps"])


def _fx_size(cx: _Ctx, a: dict[str, Any]) -> Any:
    shape = cx.shape(a["input"])
    return torch.Size(shape) if a["dim"] is None else shape[_axis(a["dim"], len(shape))]


_ADD = _spec("input, other, alpha=1", lambda cx, a: cx.add(a["input"], a["other"], a["alpha"]))
_SUB = _spec("input, other, alpha=1", lambda cx, a: cx.sub(a["input"], a["other"], a["alpha"]))
_MUL = _spec("input, other", lambda cx, a: cx.mul(a["input"], a["other"]))
_DIV = _spec("input, other, rounding_mode=None",
             lambda cx, a: cx.div(a["input"], a["other"], a["rounding_mode"]))
_MATMUL = _spec("input, other", lambda cx, a: cx.matmul(a["input"], a["other"]))
_NEG = _spec("input", lambda cx, a: cx.neg(a["input"]))
_RELU = _spec("input, inplace=False", lambda cx, a: cx.unary("relu", a["input"]))
_TANH = _spec("input", lambda cx, a: cx.unary("tanh", a["input"]))
_SIGMOID = _spec("input", lambda cx, a: cx.unary("sigmoid", a["input"]))
_SOFTMAX = _spec("input, dim=None, _stacklevel=3, dtype=None",
                 lambda cx, a: cx.softmax(cx.cast(a["input"], a["dtype"]), a["dim"]))
_CAT = _spec("tensors, dim=0", lambda cx, a: cx.cat(a["tensors"], a["dim"]))
_FLATTEN = _spec("input, start_dim=0, end_dim=-1",
                 lambda cx, a: cx.flatten(a["input"], a["start_dim"], a["end_dim"]))
_TRANSPOSE = _spec("input, dim0, dim1", lambda cx, a: cx.swap(a["input"], a["dim0"], a["dim1"]))
_UNSQUEEZE = _spec("input, dim", lambda cx, a: cx.unsqueeze(a["input"], a["dim"]))
_SQUEEZE = _spec("input, dim=None", lambda cx, a: cx.squeeze(a["input"], a["dim"]))
_MEAN = _spec("input, dim=None, keepdim=False, dtype=None",
              lambda cx, a: cx.reduce("reduce_mean", cx.cast(a["input"], a["dtype"]), a["dim"],
                                      a["keepdim"]))
_VAR = _spec("input, dim=None, unbiased=None, keepdim=False, correction=None",
             lambda cx, a: composite.variance(
                 cx.prim, a["input"], (a["dim"],) if isinstance(a["dim"], int) else
                 (a["dim"] or ()), _fx_correction(a), a["keepdim"]))
_STD = _spec("input, dim=None, unbiased=None, keepdim=False, correction=None",
             lambda cx, a: cx.unary("sqrt", _VAR(cx, (a["input"],), {
                 k: v for k, v in a.items() if k != "input"})))
_SUM = _spec("input, dim=None, keepdim=False, dtype=None",
             lambda cx, a: cx.reduce("reduce_sum", cx.cast(a["input"], a["dtype"]), a["dim"],
                                     a["keepdim"]))
_SPLIT = _spec("input, split_size_or_sections, dim=0",
               lambda cx, a: cx.split(a["input"], a["split_size_or_sections"], a["dim"]))
_CHUNK = _spec("input, chunks, dim=0", lambda cx, a: cx.chunk(a["input"], a["chunks"], a["dim"]))
_UNBIND = _spec("input, dim=0", lambda cx, a: cx.unbind(a["input"], a["dim"]))
_UNFLATTEN = _spec("input, dim, sizes",
                   lambda cx, a: cx.unflatten(a["input"], a["dim"], a["sizes"]))
_IDENTITY = _spec("input, memory_format=None", lambda cx, a: a["input"])
_WHERE = _spec("condition, input, other",
               lambda cx, a: cx.where(a["condition"], a["input"], a["other"]))
_T = _spec("input", lambda cx, a: cx.t(a["input"]))
_POW = _spec("input, exponent", lambda cx, a: cx.pow(a["input"], a["exponent"]))
_LIKE_ARGS = "dtype=None, layout=None, device=None, requires_grad=False, memory_format=None"


def _fx_unary(op: str) -> FxConverter:
    return _spec("input", lambda cx, a: cx.unary(op, a["input"]))


def _fx_compare(op: str) -> FxConverter:
    return _spec("input, other", lambda cx, a: cx.compare(op, a["input"], a["other"]))


def _fx_max(reduce: str) -> FxConverter:
    """torch.max / torch.min: of a whole tensor, along a dim (values, indices), or of two."""
    def conv(cx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x, rest = args[0], list(args[1:])
        if "dim" in kwargs:
            rest = [kwargs.pop("dim"), kwargs.pop("keepdim", False)]
        elif "other" in kwargs:
            rest = [kwargs.pop("other")]
        if kwargs:
            raise _Refuse(f"argument {next(iter(kwargs))!r}")
        if not rest:
            return (cx.reduce("reduce_max", x, None, False) if reduce == "max"
                    else cx.reduce_min(x, None, False))
        if isinstance(rest[0], int):
            keep = bool(rest[1]) if len(rest) > 1 else False
            vals = (cx.reduce("reduce_max", x, rest[0], keep) if reduce == "max"
                    else cx.reduce_min(x, rest[0], keep))
            return (vals, cx.argmax(x, rest[0], keep, least=reduce == "min"))
        return cx.binary("maximum" if reduce == "max" else "minimum", x, rest[0])
    return conv


def _fx_cast(dtype: torch.dtype) -> FxConverter:
    return _spec("input, memory_format=None", lambda cx, a: cx.cast(a["input"], dtype))


_CLAMP = _spec("input, min=None, max=None", lambda cx, a: cx.clamp(a["input"], a["min"], a["max"]))
_CUMSUM = _spec("input, dim, dtype=None",
                lambda cx, a: cx.cumsum(cx.cast(a["input"], a["dtype"]), a["dim"]))
_AMAX = _spec("input, dim=(), keepdim=False",
              lambda cx, a: cx.reduce("reduce_max", a["input"], a["dim"], a["keepdim"]))
_CONV_T = _spec("input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, "
                "dilation=1", lambda cx, a: cx.conv_transpose(
                    a["input"], a["weight"], a["bias"], a["stride"], a["padding"],
                    a["output_padding"], a["groups"], a["dilation"]))
_VECTOR_NORM = _spec("x, ord=2, dim=None, keepdim=False, dtype=None",
                     lambda cx, a: cx.vector_norm(cx.cast(a["x"], a["dtype"]), a["ord"],
                                                  a["dim"], a["keepdim"]))
_TOPK = _spec("input, k, dim=-1, largest=True, sorted=True",
              lambda cx, a: cx.topk(a["input"], a["k"], a["dim"], a["largest"]))
_SORT = _spec("input, dim=-1, descending=False, stable=False",
              lambda cx, a: cx.topk(a["input"], cx.shape(a["input"])[a["dim"]], a["dim"],
                                    a["descending"]))
_ARGMAX = _spec("input, dim=None, keepdim=False",
                lambda cx, a: cx.argmax(a["input"], a["dim"], a["keepdim"]))
_ARGMIN = _spec("input, dim=None, keepdim=False",
                lambda cx, a: cx.argmax(a["input"], a["dim"], a["keepdim"], least=True))
_INDEX_SELECT = _spec("input, dim, index",
                      lambda cx, a: cx.gather(a["input"], a["index"], a["dim"]))
_TRIL = _spec("input, diagonal=0", lambda cx, a: cx.tri(a["input"], a["diagonal"], True))
_TRIU = _spec("input, diagonal=0", lambda cx, a: cx.tri(a["input"], a["diagonal"], False))
_RMS_NORM = _spec("input, normalized_shape, weight=None, eps=None",
                  lambda cx, a: cx.rms_norm(a["input"], a["normalized_shape"], a["weight"],
                                            a["eps"]))
_NEW_OPS_FX: dict[Any, FxConverter] = {
    torch.exp: _fx_unary("exp"), torch.log: _fx_unary("log"), torch.sqrt: _fx_unary("sqrt"),
    torch.rsqrt: _fx_unary("rsqrt"), torch.erf: _fx_unary("erf"), torch.sin: _fx_unary("sin"),
    torch.cos: _fx_unary("cos"), torch.acos: _fx_unary("acos"),
    torch.reciprocal: _fx_unary("recip"),
    torch.abs: _spec("input", lambda cx, a: cx.abs(a["input"])), operator.abs:
    _spec("input", lambda cx, a: cx.abs(a["input"])),
    torch.maximum: _spec("input, other", lambda cx, a: cx.binary("maximum", a["input"],
                                                                 a["other"])),
    torch.minimum: _spec("input, other", lambda cx, a: cx.binary("minimum", a["input"],
                                                                 a["other"])),
    torch.max: _fx_max("max"), torch.min: _fx_max("min"),
    torch.clamp: _CLAMP, torch.clip: _CLAMP,
    torch.eq: _fx_compare("eq"), operator.eq: _fx_compare("eq"),
    torch.ne: _fx_compare("ne"), operator.ne: _fx_compare("ne"),
    torch.lt: _fx_compare("lt"), operator.lt: _fx_compare("lt"),
    torch.le: _fx_compare("le"), operator.le: _fx_compare("le"),
    torch.gt: _fx_compare("gt"), operator.gt: _fx_compare("gt"),
    torch.ge: _fx_compare("ge"), operator.ge: _fx_compare("ge"),
    torch.logical_not: _spec("input", lambda cx, a: cx.logical_not(a["input"])),
    operator.invert: _spec("input", lambda cx, a: cx.logical_not(a["input"])),
    operator.and_: _spec("input, other", lambda cx, a: cx.logical("and", a["input"],
                                                                  a["other"])),
    operator.or_: _spec("input, other", lambda cx, a: cx.logical("or", a["input"], a["other"])),
    torch.linalg.vector_norm: _VECTOR_NORM,
    torch.einsum: lambda cx, args, kwargs: cx.einsum(
        args[0], list(args[1]) if len(args) == 2 and isinstance(args[1], list | tuple)
        else list(args[1:])),
    torch.cumsum: _CUMSUM, torch.amax: _AMAX, torch.index_select: _INDEX_SELECT,
    torch.argmax: _ARGMAX, torch.argmin: _ARGMIN, torch.topk: _TOPK, torch.sort: _SORT,
    torch.tril: _TRIL, torch.triu: _TRIU,
    F.adaptive_avg_pool1d: _spec("input, output_size", lambda cx, a: cx.adaptive_avg_pool1d(
        a["input"], a["output_size"])),
    F.hardtanh: _spec("input, min_val=-1.0, max_val=1.0, inplace=False",
                      lambda cx, a: cx.clamp(a["input"], a["min_val"], a["max_val"])),
    F.relu6: _spec("input, inplace=False", lambda cx, a: cx.clamp(a["input"], 0.0, 6.0)),
    F.conv1d: _spec("input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1",
                    lambda cx, a: cx.conv1d(a["input"], a["weight"], a["bias"], a["stride"],
                                            a["padding"], a["dilation"], a["groups"])),
    F.rms_norm: _RMS_NORM,
}

def _int_list(x: Any) -> list[int]:
    """An int or a sequence of them (torch's int-or-tuple arguments) as a list; None: []."""
    if x is None:
        return []
    return [int(v) for v in x] if isinstance(x, list | tuple) else [int(x)]


FX_FUNCTIONS: dict[Any, FxConverter] = {
    operator.add: _ADD, operator.iadd: _ADD, torch.add: _ADD,
    operator.sub: _SUB, operator.isub: _SUB, torch.sub: _SUB,
    torch.rsub: _spec("input, other, alpha=1",
                      lambda cx, a: cx.sub(a["other"], a["input"], a["alpha"])),
    operator.mul: _MUL, operator.imul: _MUL, torch.mul: _MUL,
    operator.truediv: _DIV, operator.itruediv: _DIV, torch.div: _DIV,
    operator.neg: _NEG, torch.neg: _NEG,
    operator.pow: _POW, torch.pow: _POW,
    torch.zeros_like: _spec(f"input, {_LIKE_ARGS}",
                            lambda cx, a: cx.like(a["input"], 0.0, a["dtype"])),
    torch.ones_like: _spec(f"input, {_LIKE_ARGS}",
                           lambda cx, a: cx.like(a["input"], 1.0, a["dtype"])),
    torch.full_like: _spec(f"input, fill_value, {_LIKE_ARGS}",
                           lambda cx, a: cx.like(a["input"], a["fill_value"], a["dtype"])),
    operator.matmul: _MATMUL, torch.matmul: _MATMUL,
    torch.mm: _spec("input, mat2", lambda cx, a: cx.matmul(a["input"], a["mat2"])),
    torch.bmm: _spec("input, mat2", lambda cx, a: cx.matmul(a["input"], a["mat2"])),
    torch.relu: _RELU, F.relu: _RELU,
    torch.tanh: _TANH, F.tanh: _TANH, torch.sigmoid: _SIGMOID, F.sigmoid: _SIGMOID,
    F.silu: _spec("input, inplace=False", lambda cx, a: cx.silu(a["input"])),
    F.gelu: _spec("input, approximate='none'",
                  lambda cx, a: cx.unary("gelu", a["input"], approximate=a["approximate"])),
    F.softmax: _SOFTMAX, torch.softmax: _SOFTMAX,
    torch.cat: _CAT, torch.concat: _CAT,
    torch.roll: _spec("input, shifts, dims=None", lambda cx, a: cx.roll(
        a["input"], _int_list(a["shifts"]), _int_list(a["dims"]))),
    torch.stack: _spec("tensors, dim=0", lambda cx, a: cx.stack(a["tensors"], a["dim"])),
    torch.flatten: _FLATTEN,
    torch.reshape: _spec("input, shape", lambda cx, a: cx.reshape(a["input"], a["shape"])),
    torch.permute: _spec("input, dims", lambda cx, a: cx.transpose(a["input"], a["dims"])),
    torch.transpose: _TRANSPOSE, torch.t: _T,
    torch.unsqueeze: _UNSQUEEZE, torch.squeeze: _SQUEEZE,
    torch.mean: _MEAN, torch.sum: _SUM,
    torch.split: _SPLIT, torch.chunk: _CHUNK, torch.unbind: _UNBIND,
    torch.unflatten: _UNFLATTEN,
    torch.where: _WHERE,
    F.dropout: _spec("input, p=0.5, training=True, inplace=False", _fx_dropout),
    F.linear: _spec("input, weight, bias=None",
                    lambda cx, a: cx.linear(a["input"], a["weight"], a["bias"])),
    F.log_softmax: _spec("input, dim=None, _stacklevel=3, dtype=None",
                         lambda cx, a: composite.log_softmax(
                             cx.prim, cx.cast(a["input"], a["dtype"]), a["dim"])),
    F.elu: _spec("input, alpha=1.0, inplace=False",
                 lambda cx, a: composite.elu(cx.prim, a["input"], float(a["alpha"]))),
    F.selu: _spec("input, inplace=False", lambda cx, a: composite.elu(
        cx.prim, a["input"], composite.SELU_ALPHA, composite.SELU_SCALE)),
    F.celu: _spec("input, alpha=1.0, inplace=False", lambda cx, a: composite.elu(
        cx.prim, a["input"], float(a["alpha"]), inner=float(a["alpha"]))),
    F.softplus: _spec("input, beta=1.0, threshold=20.0", lambda cx, a: composite.softplus(
        cx.prim, a["input"], float(a["beta"]))),
    F.mish: _spec("input, inplace=False", lambda cx, a: composite.mish(cx.prim, a["input"])),
    F.logsigmoid: _spec("input", lambda cx, a: composite.log_sigmoid(cx.prim, a["input"])),
    F.leaky_relu: _spec("input, negative_slope=0.01, inplace=False", lambda cx, a: cx.prelu(
        a["input"], Const(torch.tensor([float(a["negative_slope"])]), "slope"))),
    F.prelu: _spec("input, weight", lambda cx, a: cx.prelu(a["input"], a["weight"])),
    F.pixel_shuffle: _spec("input, upscale_factor", lambda cx, a: composite.depth_to_space(
        cx.prim, a["input"], a["upscale_factor"], "CRD")),
    F.pixel_unshuffle: _spec("input, downscale_factor", lambda cx, a: composite.space_to_depth(
        cx.prim, a["input"], a["downscale_factor"], "CRD")),
    F.unfold: _spec("input, kernel_size, dilation=1, padding=0, stride=1",
                    lambda cx, a: cx.unfold_patches(a["input"], a["kernel_size"],
                                                    a["dilation"], a["padding"], a["stride"])),
    F.fold: _spec("input, output_size, kernel_size, dilation=1, padding=0, stride=1",
                  lambda cx, a: cx.fold_patches(a["input"], a["output_size"], a["kernel_size"],
                                                a["dilation"], a["padding"], a["stride"])),
    F.conv_transpose1d: _CONV_T,
    F.conv_transpose2d: _CONV_T,
    F.conv2d: _spec("input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1",
                    lambda cx, a: cx.conv2d(a["input"], a["weight"], a["bias"], a["stride"],
                                            a["padding"], a["dilation"], a["groups"])),
    F.layer_norm: _spec("input, normalized_shape, weight=None, bias=None, eps=1e-5",
                        lambda cx, a: cx.layer_norm(a["input"], a["normalized_shape"],
                                                    a["weight"], a["bias"], a["eps"])),
    F.group_norm: _spec("input, num_groups, weight=None, bias=None, eps=1e-5",
                        lambda cx, a: cx.group_norm(a["input"], a["num_groups"], a["weight"],
                                                    a["bias"], a["eps"])),
    F.interpolate: _spec("input, size=None, scale_factor=None, mode='nearest', "
                         "align_corners=None, recompute_scale_factor=None, antialias=False",
                         _fx_interpolate),
    F.batch_norm: _spec("input, running_mean, running_var, weight=None, bias=None, "
                        "training=False, momentum=0.1, eps=1e-5", _fx_batch_norm),
    F.max_pool2d: _spec("input, kernel_size, stride=None, padding=0, dilation=1, "
                        "ceil_mode=False, return_indices=False", _fx_max_pool),
    F.avg_pool2d: _spec("input, kernel_size, stride=None, padding=0, ceil_mode=False, "
                        "count_include_pad=True, divisor_override=None",
                        lambda cx, a: cx.avg_pool2d(a["input"], a["kernel_size"], a["stride"],
                                                    a["padding"], a["ceil_mode"],
                                                    a["count_include_pad"],
                                                    a["divisor_override"])),
    F.adaptive_avg_pool2d: _spec("input, output_size", lambda cx, a: cx.adaptive_avg_pool2d(
        a["input"], a["output_size"])),
    F.embedding: _spec("input, weight, padding_idx=None, max_norm=None, norm_type=2.0, "
                       "scale_grad_by_freq=False, sparse=False",
                       lambda cx, a: cx.embedding(a["weight"], a["input"])
                       if a["max_norm"] is None else _refuse("embedding with max_norm")),
    F.scaled_dot_product_attention: _spec(
        "query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, "
        "enable_gqa=False",
        lambda cx, a: cx.sdpa(a["query"], a["key"], a["value"], a["attn_mask"], a["dropout_p"],
                              a["is_causal"], a["scale"], a["enable_gqa"])),
    F.pad: _spec("input, pad, mode='constant', value=None", _fx_pad),
    operator.getitem: _spec("a, b", _fx_getitem),
    builtins.getattr: _spec("obj, name", _fx_getattr),
    **_NEW_OPS_FX,
}


def _refuse(reason: str) -> Any:
    raise _Refuse(reason)


def _method_sizes(fn: Callable[[_Ctx, Any, list[int]], Any]) -> FxConverter:
    def conv(cx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rest = list(args[1:])
        for key in ("size", "shape", "dims", "sizes"):
            if key in kwargs:
                rest = [kwargs.pop(key)]
        if kwargs:
            raise _Refuse(f"argument {next(iter(kwargs))!r}")
        return fn(cx, args[0], _sizes(rest))
    return conv


def _float_method(cx: _Ctx, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return cx.cast(args[0], torch.float32)


FX_METHODS: dict[str, FxConverter] = {
    "add": _ADD, "add_": _ADD, "sub": _SUB, "mul": _MUL, "mul_": _MUL, "div": _DIV,
    "neg": _NEG, "matmul": _MATMUL, "pow": _POW,
    "mm": _spec("input, mat2", lambda cx, a: cx.matmul(a["input"], a["mat2"])),
    "bmm": _spec("input, mat2", lambda cx, a: cx.matmul(a["input"], a["mat2"])),
    "relu": _RELU, "relu_": _RELU, "tanh": _TANH, "sigmoid": _SIGMOID,
    "softmax": _spec("input, dim, dtype=None",
                     lambda cx, a: cx.softmax(cx.cast(a["input"], a["dtype"]), a["dim"])),
    "view": _method_sizes(lambda cx, x, s: cx.reshape(x, s)),
    "reshape": _method_sizes(lambda cx, x, s: cx.reshape(x, s)),
    "permute": _method_sizes(lambda cx, x, s: cx.transpose(x, s)),
    "expand": _method_sizes(lambda cx, x, s: cx.expand(x, s)),
    "repeat": _method_sizes(lambda cx, x, s: cx.repeat(x, s)),
    "roll": _spec("input, shifts, dims=None", lambda cx, a: cx.roll(
        a["input"], _int_list(a["shifts"]), _int_list(a["dims"]))),
    "expand_as": _spec("input, other", lambda cx, a: cx.expand(a["input"],
                                                               cx.shape(a["other"]))),
    "view_as": _spec("input, other", lambda cx, a: cx.reshape(a["input"], cx.shape(a["other"]))),
    "reshape_as": _spec("input, other",
                        lambda cx, a: cx.reshape(a["input"], cx.shape(a["other"]))),
    "flatten": _FLATTEN, "transpose": _TRANSPOSE, "t": _T,
    "unsqueeze": _UNSQUEEZE, "squeeze": _SQUEEZE,
    "mean": _MEAN, "sum": _SUM, "var": _VAR, "std": _STD, "split": _SPLIT, "chunk": _CHUNK,
    "unbind": _UNBIND,
    "unflatten": _UNFLATTEN,
    "contiguous": _IDENTITY, "clone": _IDENTITY,
    "detach": _spec("input", lambda cx, a: a["input"]),
    "to": _fx_to, "float": _float_method,
    "type_as": _spec("input, other", lambda cx, a: cx.cast(a["input"], cx.torch_dtype(a["other"]))),
    "masked_fill": _spec("input, mask, value",
                         lambda cx, a: cx.where(a["mask"], a["value"], a["input"])),
    "size": _spec("input, dim=None", _fx_size),
    "dim": _spec("input", lambda cx, a: cx.rank(a["input"])),
    "exp": _fx_unary("exp"), "log": _fx_unary("log"), "sqrt": _fx_unary("sqrt"),
    "rsqrt": _fx_unary("rsqrt"), "erf": _fx_unary("erf"), "sin": _fx_unary("sin"),
    "acos": _fx_unary("acos"), "cos": _fx_unary("cos"), "reciprocal": _fx_unary("recip"),
    "abs": _spec("input", lambda cx, a: cx.abs(a["input"])),
    "square": _spec("input", lambda cx, a: cx.pow(a["input"], 2)),
    "max": _fx_max("max"), "min": _fx_max("min"), "amax": _AMAX,
    "argmax": _ARGMAX, "argmin": _ARGMIN, "topk": _TOPK, "sort": _SORT,
    "clamp": _CLAMP, "clip": _CLAMP,
    "clamp_min": _spec("input, min", lambda cx, a: cx.clamp(a["input"], a["min"])),
    "clamp_max": _spec("input, max", lambda cx, a: cx.clamp(a["input"], None, a["max"])),
    "eq": _fx_compare("eq"), "ne": _fx_compare("ne"), "lt": _fx_compare("lt"),
    "le": _fx_compare("le"), "gt": _fx_compare("gt"), "ge": _fx_compare("ge"),
    "logical_not": _spec("input", lambda cx, a: cx.logical_not(a["input"])),
    "cumsum": _CUMSUM, "index_select": _INDEX_SELECT, "tril": _TRIL, "triu": _TRIU,
    "where": _spec("input, condition, other",
                   lambda cx, a: cx.where(a["condition"], a["input"], a["other"])),
    "int": _fx_cast(torch.int32), "long": _fx_cast(torch.int64), "bool": _fx_cast(torch.bool),
    "half": _fx_cast(torch.float16), "bfloat16": _fx_cast(torch.bfloat16),
    "silu": _spec("input", lambda cx, a: cx.silu(a["input"])),
    "gelu": _spec("input, approximate='none'",
                  lambda cx, a: cx.unary("gelu", a["input"], approximate=a["approximate"])),
}

ModuleConverter = Callable[[_Ctx, nn.Module, str, tuple[Any, ...]], Any]


def _p(cx: _Ctx, mod: nn.Module, path: str, attr: str) -> Any:
    """A module's parameter or buffer as the importer sees it (None when absent)."""
    t = getattr(mod, attr, None)
    if t is None:
        return None
    return cx.tensor_attr(f"{path}.{attr}" if path else attr, t)


def _mod_conv2d(cx: _Ctx, m: nn.Module, path: str, args: tuple[Any, ...]) -> Any:
    assert isinstance(m, nn.Conv2d)
    if m.padding_mode != "zeros":
        raise _Refuse(f"{m.padding_mode} padding")
    return cx.conv2d(args[0], _p(cx, m, path, "weight"), _p(cx, m, path, "bias"), m.stride,
                     m.padding, m.dilation, m.groups)


def _mod_conv_transpose(cx: _Ctx, m: nn.Module, path: str, args: tuple[Any, ...]) -> Any:
    assert isinstance(m, nn.ConvTranspose1d | nn.ConvTranspose2d)
    if m.padding_mode != "zeros" or len(args) > 1:
        raise _Refuse(f"{m.padding_mode} padding" if m.padding_mode != "zeros" else
                      "a transposed convolution called with output_size")
    return cx.conv_transpose(args[0], _p(cx, m, path, "weight"), _p(cx, m, path, "bias"),
                             m.stride, m.padding, m.output_padding, m.groups, m.dilation)


def _mod_batch_norm(cx: _Ctx, m: nn.Module, path: str, args: tuple[Any, ...]) -> Any:
    assert isinstance(m, nn.modules.batchnorm._BatchNorm)
    if m.training or m.running_mean is None:
        raise _Refuse("batch norm in training mode or without running statistics")
    return cx.batch_norm(args[0], _p(cx, m, path, "weight"), _p(cx, m, path, "bias"),
                         _p(cx, m, path, "running_mean"), _p(cx, m, path, "running_var"), m.eps)


def _mod_dropout(cx: _Ctx, m: nn.Module, path: str, args: tuple[Any, ...]) -> Any:
    if m.training and getattr(m, "p", 0) > 0:
        raise _Refuse("dropout in training mode")
    return args[0]


def _mod_embedding(cx: _Ctx, m: nn.Module, path: str, args: tuple[Any, ...]) -> Any:
    assert isinstance(m, nn.Embedding)
    if m.max_norm is not None:
        raise _Refuse("embedding with max_norm")
    return cx.embedding(_p(cx, m, path, "weight"), args[0])


FX_MODULES: dict[type, ModuleConverter] = {
    nn.Conv2d: _mod_conv2d,
    nn.ConvTranspose1d: _mod_conv_transpose,
    nn.ELU: lambda cx, m, p, a: composite.elu(cx.prim, a[0], float(m.alpha)),
    nn.SELU: lambda cx, m, p, a: composite.elu(cx.prim, a[0], composite.SELU_ALPHA,
                                               composite.SELU_SCALE),
    nn.CELU: lambda cx, m, p, a: composite.elu(cx.prim, a[0], float(m.alpha),
                                               inner=float(m.alpha)),
    nn.Softplus: lambda cx, m, p, a: composite.softplus(cx.prim, a[0], float(m.beta)),
    nn.Mish: lambda cx, m, p, a: composite.mish(cx.prim, a[0]),
    nn.LogSigmoid: lambda cx, m, p, a: composite.log_sigmoid(cx.prim, a[0]),
    nn.LogSoftmax: lambda cx, m, p, a: composite.log_softmax(cx.prim, a[0], m.dim),
    nn.LeakyReLU: lambda cx, m, p, a: cx.prelu(
        a[0], Const(torch.tensor([float(m.negative_slope)]), "slope")),
    nn.PReLU: lambda cx, m, p, a: cx.prelu(a[0], _p(cx, m, p, "weight")),
    nn.PixelShuffle: lambda cx, m, p, a: composite.depth_to_space(cx.prim, a[0],
                                                                  m.upscale_factor, "CRD"),
    nn.PixelUnshuffle: lambda cx, m, p, a: composite.space_to_depth(cx.prim, a[0],
                                                                    m.downscale_factor, "CRD"),
    nn.ConvTranspose2d: _mod_conv_transpose,
    nn.Linear: lambda cx, m, p, a: cx.linear(a[0], _p(cx, m, p, "weight"), _p(cx, m, p, "bias")),
    nn.BatchNorm1d: _mod_batch_norm,
    nn.BatchNorm2d: _mod_batch_norm,
    nn.LayerNorm: lambda cx, m, p, a: cx.layer_norm(a[0], m.normalized_shape,
                                                    _p(cx, m, p, "weight"), _p(cx, m, p, "bias"),
                                                    m.eps),
    nn.GroupNorm: lambda cx, m, p, a: cx.group_norm(a[0], m.num_groups, _p(cx, m, p, "weight"),
                                                    _p(cx, m, p, "bias"), m.eps),
    nn.Upsample: lambda cx, m, p, a: _fx_interpolate(cx, {
        "input": a[0], "size": m.size, "scale_factor": m.scale_factor, "mode": m.mode,
        "align_corners": m.align_corners, "recompute_scale_factor": m.recompute_scale_factor,
        "antialias": False}),
    nn.Embedding: _mod_embedding,
    nn.ReLU: lambda cx, m, p, a: cx.unary("relu", a[0]),
    nn.GELU: lambda cx, m, p, a: cx.unary("gelu", a[0], approximate=m.approximate),
    nn.Tanh: lambda cx, m, p, a: cx.unary("tanh", a[0]),
    nn.Sigmoid: lambda cx, m, p, a: cx.unary("sigmoid", a[0]),
    nn.SiLU: lambda cx, m, p, a: cx.silu(a[0]),
    nn.Softmax: lambda cx, m, p, a: cx.softmax(a[0], m.dim),
    nn.Identity: lambda cx, m, p, a: a[0],
    nn.Dropout: _mod_dropout,
    nn.Flatten: lambda cx, m, p, a: cx.flatten(a[0], m.start_dim, m.end_dim),
    nn.Unflatten: lambda cx, m, p, a: cx.unflatten(a[0], m.dim, m.unflattened_size),
    nn.MaxPool2d: lambda cx, m, p, a: cx.max_pool2d(a[0], m.kernel_size, m.stride, m.padding,
                                                    m.dilation, m.ceil_mode)
    if not m.return_indices else _refuse("max pooling that returns indices"),
    nn.AvgPool2d: lambda cx, m, p, a: cx.avg_pool2d(a[0], m.kernel_size, m.stride, m.padding,
                                                    m.ceil_mode, m.count_include_pad,
                                                    m.divisor_override),
    nn.AdaptiveAvgPool2d: lambda cx, m, p, a: cx.adaptive_avg_pool2d(a[0], m.output_size),
    nn.AdaptiveAvgPool1d: lambda cx, m, p, a: cx.adaptive_avg_pool1d(a[0], m.output_size),
    nn.Hardtanh: lambda cx, m, p, a: cx.clamp(a[0], m.min_val, m.max_val),
    nn.Conv1d: lambda cx, m, p, a: cx.conv1d(a[0], _p(cx, m, p, "weight"), _p(cx, m, p, "bias"),
                                             m.stride, m.padding, m.dilation, m.groups)
    if m.padding_mode == "zeros" else _refuse(f"{m.padding_mode} padding"),
    nn.RMSNorm: lambda cx, m, p, a: cx.rms_norm(a[0], m.normalized_shape, _p(cx, m, p, "weight"),
                                                m.eps),
}


# torch.fx targets whose result shares its operand's memory (a write through one is seen
# through the other): the methods and functions, and getitem (a slice, or a piece of a split).
_FX_VIEW_NAMES = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "expand", "expand_as",
    "narrow", "select", "squeeze", "unsqueeze", "flatten", "unflatten", "t", "swapaxes",
    "swapdims", "movedim", "diagonal", "unfold", "split", "chunk", "unbind", "detach",
    "contiguous", "as_strided", "real", "imag", "getitem"})
_FX_IN_PLACE_FUNCTIONS = frozenset({operator.iadd, operator.isub, operator.imul,
                                    operator.itruediv})


def _fx_name(node: fx.Node) -> str:
    return node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")


def _fx_in_place(node: fx.Node, mod: nn.Module | None) -> bool:
    """A torch.fx call that writes its first operand: `x.add_(y)`, `x += y`, and
    `inplace=True` functions and modules (`nn.ReLU(inplace=True)`)."""
    if node.op == "call_method":
        name = str(node.target)
        if name.endswith("_") and not name.endswith("__"):
            return True
    if node.op == "call_function" and node.target in _FX_IN_PLACE_FUNCTIONS:
        return True
    if node.kwargs.get("inplace") is True:
        return True
    return mod is not None and getattr(mod, "inplace", False) is True


def _fx_writes_through_view(node: fx.Node) -> bool:
    """Whether a write by `node` to its first operand reaches memory that another tensor
    shares: the operand is a view, or a view is taken of it. The importer computes an
    in-place op functionally and lets later readers of the operand read the result
    (`_FxImporter.call`), which is right only when no view shares the memory."""
    def is_view(n: fx.Node) -> bool:
        return n.op in ("call_method", "call_function") and _fx_name(n) in _FX_VIEW_NAMES

    cur = node.args[0] if node.args else None
    if not isinstance(cur, fx.Node):
        return False
    return is_view(cur) or any(u is not node and is_view(u) for u in cur.users)


def _module_converter(mod: nn.Module) -> ModuleConverter | None:
    """The converter for a module's class, or for a base class whose forward it keeps."""
    for cls in type(mod).__mro__:
        conv = FX_MODULES.get(cls)
        if conv is not None:
            return conv if type(mod).forward is cls.forward else None
    return None


# ---- the shared driver ---------------------------------------------------------------


class _Importer:
    """Walks one FX graph; subclasses say how sources and call nodes are handled."""

    source = "torch module"

    def __init__(self, graph: fx.Graph, name: str, fold_parameters: bool) -> None:
        self.graph = graph
        self.cx = _Ctx(name, fold_parameters)
        self.fold_parameters = fold_parameters
        self.env: dict[fx.Node, Any] = {}
        self.found: list[tuple[str, str]] = []
        self.poisoned: set[fx.Node] = set()

    # subclass hooks
    def placeholder(self, node: fx.Node) -> Any:
        raise NotImplementedError

    def op_name(self, node: fx.Node) -> str:
        raise NotImplementedError

    def converter(self, node: fx.Node) -> Callable[[tuple[Any, ...], dict[str, Any]], Any] | None:
        raise NotImplementedError

    def evaluate(self, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def foldable(self, node: fx.Node) -> bool:
        return True

    def expected(self, node: fx.Node) -> Any:
        return None

    def outputs(self, node: fx.Node) -> list[Any]:
        raise NotImplementedError

    # driver
    def run(self) -> Graph:
        outputs: list[Any] = []
        live = self.live_nodes()
        for node in self.graph.nodes:
            try:
                if node.op == "placeholder":
                    self.env[node] = self.placeholder(node)
                elif node.op == "output":
                    outputs = self.outputs(node)
                elif node in live:
                    self.call(node)
            except _Refuse as r:
                self.refuse(node, r.reason)
            except ModelImportError:
                raise
            except Exception as e:  # IR shape errors and converter failures alike
                raise ModelImportError(f"{self.source}: node {node.name} "
                                       f"({self.op_name(node)}): {type(e).__name__}: "
                                       f"{_first_line(e)}") from e
        if self.found:
            raise UnsupportedOpsError(self.source, self.found)
        cx = self.cx
        values: list[Value] = []
        for i, out in enumerate(outputs):
            if isinstance(out, _Complex):
                raise ModelImportError(f"{self.source}: output {i} is a complex tensor (the IR "
                                       "has none; return torch.view_as_real of it)")
            if not isinstance(out, Value | Expanded | Const):
                raise ModelImportError(f"{self.source}: output {i} is not a tensor "
                                       f"({type(out).__name__})")
            try:
                values.append(cx.value(out))
            except _Refuse as r:
                raise ModelImportError(f"{self.source}: output {i}: {r.reason}") from None
        if not values:
            raise ModelImportError(f"{self.source}: the model has no tensor outputs")
        try:
            graph = cx.b.build(values)
            graph.lint()
        except IRError as e:
            raise ModelImportError(f"{self.source}: {e}") from e
        return graph

    def effectful(self, node: fx.Node) -> bool:
        """Whether the node writes a tensor (an in-place op), so that it matters even when
        nothing reads its result."""
        return False

    def live_nodes(self) -> set[fx.Node]:
        """The nodes the outputs depend on, with the writes they may read: what is left is
        never converted (transformers' checks that the image tokens match the image
        features compute Python numbers for runtime assertions, and nothing else)."""
        roots = [n for n in self.graph.nodes if n.op == "output" or self.effectful(n)]
        live: set[fx.Node] = set()
        while roots:
            n = roots.pop()
            if n not in live:
                live.add(n)
                roots.extend(n.all_input_nodes)
        return live

    def refuse(self, node: fx.Node, reason: str | None) -> None:
        op = self.op_name(node)
        self.found.append((f"{op} ({reason})" if reason else op, node.name))
        self.poisoned.add(node)

    def call(self, node: fx.Node) -> None:
        conv = self.converter(node)
        if any(n in self.poisoned for n in node.all_input_nodes):
            # The inputs failed already; still report this op if it is unsupported itself.
            if conv is None:
                self.refuse(node, None)
            self.poisoned.add(node)
            return
        args = fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, self.env.__getitem__)
        if not _any_live(args, kwargs) and self.foldable(node):
            self.env[node] = self.fold(node, args, kwargs)
            return
        if conv is None:
            self.refuse(node, None)
            return
        result = conv(tuple(args), dict(kwargs))
        self.env[node] = self.check(node, result)

    def fold(self, node: fx.Node, args: Any, kwargs: Any) -> Any:
        def unwrap(x: Any) -> Any:
            if isinstance(x, Const):
                return x.tensor
            if isinstance(x, _Missing):
                raise _Refuse(f"use of {x.what}")
            if isinstance(x, list | tuple):
                return type(x)(unwrap(y) for y in x)
            if isinstance(x, dict):
                return {k: unwrap(v) for k, v in x.items()}
            return x

        args, kwargs = unwrap(args), unwrap(kwargs)
        try:
            with torch.no_grad():
                out = self.evaluate(node, args, kwargs)
        except Exception as e:
            raise ModelImportError(f"{self.source}: evaluating the constant node {node.name} "
                                   f"({self.op_name(node)}) failed: {type(e).__name__}: "
                                   f"{_first_line(e)}") from e
        return self.wrap(out, f"const.{node.name}")

    def wrap(self, out: Any, name: str) -> Any:
        if isinstance(out, torch.Tensor):
            return Const(out, name)
        if isinstance(out, list | tuple) and not isinstance(out, torch.Size):
            return tuple(self.wrap(o, f"{name}.{i}") for i, o in enumerate(out))
        return out

    def check(self, node: fx.Node, result: Any) -> Any:
        want = self.expected(node)
        where = f"{self.source}: node {node.name} ({self.op_name(node)})"
        if isinstance(result, tuple) and isinstance(want, list):
            return tuple(self.cx.conform(r, w, where)
                         for r, w in zip(result, list(want) + [None] * len(result), strict=False))
        return self.cx.conform(result, want if isinstance(want, tuple) else None, where)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _meta_shape(val: Any) -> Any:
    """Shapes from FX metadata: a tuple for a tensor, a list for a tuple of tensors; None
    where a size is a symbol only the data fixes (a mask's count; the importer knows it
    where it imports the node at all)."""
    if isinstance(val, torch.Tensor) or (hasattr(val, "shape") and hasattr(val, "dtype")):
        dims = tuple(val.shape)
        if not all(isinstance(d, int) or (hasattr(d, "node") and d.node.is_constant())
                   for d in dims):
            return None
        return tuple(int(d) for d in dims)
    if isinstance(val, list | tuple):
        return [_meta_shape(v) for v in val]
    return None


# ---- torch.export --------------------------------------------------------------------


class _ExportImporter(_Importer):
    def __init__(self, ep: torch.export.ExportedProgram, name: str, fold_parameters: bool,
                 input_high: Mapping[str, int]) -> None:
        super().__init__(ep.graph, name, fold_parameters)
        self.ep = ep
        self.source = f"torch.export program {name!r}"
        self.specs = {s.arg.name: s for s in ep.graph_signature.input_specs
                      if hasattr(s.arg, "name")}
        self.high = dict(_embedding_highs_export(ep.graph))
        self.high.update(input_high)

    def op_name(self, node: fx.Node) -> str:
        if node.op == "placeholder":
            return "input"
        return str(node.target) if node.target is not operator.getitem else "getitem"

    @functools.cached_property
    def order(self) -> dict[fx.Node, int]:
        """Each node's place in the program (which readers run before an in-place op)."""
        return {n: i for i, n in enumerate(self.graph.nodes)}

    def call(self, node: fx.Node) -> None:
        if node.op == "get_attr":  # a submodule a higher-order op runs (kept as it is)
            self.env[node] = _fetch_attr(self.ep.graph_module, node.target)
            return
        wrapped = _WRAPPERS.get(str(node.target))
        if wrapped is None:
            super().call(node)
            return
        if any(n in self.poisoned for n in node.all_input_nodes):
            self.poisoned.add(node)  # an operand failed already (and is reported)
            return
        # A region run under a grad or autocast mode (transformers' weight preparation,
        # CPM-Ant's and HRM's blocks): the mode changes nothing here, so its graph is
        # imported in place, its inputs bound to the operands.
        sub = node.args[wrapped]
        module = self.env.get(sub) if isinstance(sub, fx.Node) else None
        if not isinstance(module, fx.GraphModule):
            raise _Refuse("a wrapped region that is not a graph")
        operands = node.args[wrapped + 1:]
        inner = [n for n in module.graph.nodes if n.op == "placeholder"]
        if len(inner) != len(operands):
            raise _Refuse(f"a wrapped region of {len(inner)} inputs called with "
                          f"{len(operands)}")
        for ph, arg in zip(inner, operands, strict=True):
            self.env[ph] = self.env[arg] if isinstance(arg, fx.Node) else arg
        for n in module.graph.nodes:
            if n.op == "output":
                self.env[node] = tuple(fx.node.map_arg(n.args[0], self.env.__getitem__))
            elif n.op != "placeholder":
                self.call(n)
                if n in self.poisoned:
                    raise _Refuse(f"its region's {self.op_name(n)} ({n.name})")

    def placeholder(self, node: fx.Node) -> Any:
        from torch.export.graph_signature import InputKind

        spec = self.specs.get(node.name)
        val = node.meta.get("val")
        if spec is None or spec.kind == InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                return val  # a non-tensor user input is a constant of the capture
            return self.cx.input(node.name, tuple(val.shape), val.dtype,
                                 self.high.get(node.name, 0))
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            t = self.ep.state_dict.get(spec.target)
            if t is None:
                t = self.ep.constants[spec.target]
            if spec.kind == InputKind.PARAMETER and not self.fold_parameters:
                return self.cx.param(spec.target, t)
            return Const(t.detach(), spec.target)
        raise _Refuse(f"program input of kind {spec.kind.name}")

    def converter(self, node: fx.Node) -> Callable[[tuple[Any, ...], dict[str, Any]], Any] | None:
        if node.target is operator.getitem:
            return lambda args, kwargs: _fx_getitem(self.cx, {"a": args[0], "b": args[1]})
        conv = ATEN.get(node.target) or NAMED_OPS.get(str(node.target))
        target = node.target
        if conv is None:
            # A wrapped region's nodes live in the region's own graph.
            order = self.order if node.graph is self.graph else {
                n: i for i, n in enumerate(node.graph.nodes)}
            target, seen = _out_of_place(node, order)
            conv = ATEN.get(target) if target is not None else None
            if conv is not None and seen:
                why = "its mutation is read elsewhere (through a view, or it is an input)"
                return lambda args, kwargs: _raise(_Refuse(why))
        if conv is None:
            return None
        schema = target._schema

        def call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            bound = _bind(schema, args, kwargs)
            if _has_complex(bound):
                return _complex_call(self.cx, target, bound, conv)
            return conv(self.cx, bound)

        return call

    def foldable(self, node: fx.Node) -> bool:
        tags = getattr(node.target, "tags", ())
        return torch.Tag.nondeterministic_seeded not in tags

    def effectful(self, node: fx.Node) -> bool:
        schema = getattr(node.target, "_schema", None)
        if schema is None or not schema.is_mutable:
            return False
        # Runtime checks on the inputs (shapes, token counts) guard the computation and
        # write nothing: dropped with whatever computes only their operands.
        return not schema.name.split("::")[-1].startswith(("_assert", "sym_constrain"))

    def evaluate(self, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return node.target(*args, **kwargs)

    def expected(self, node: fx.Node) -> Any:
        return _meta_shape(node.meta.get("val"))

    def outputs(self, node: fx.Node) -> list[Any]:
        from torch.export.graph_signature import OutputKind

        kinds = [s.kind for s in self.ep.graph_signature.output_specs]
        outs = []
        for kind, arg in zip(kinds, node.args[0], strict=True):
            if kind != OutputKind.USER_OUTPUT or arg is None:
                continue  # buffer updates do not change what the outputs compute
            if arg in self.poisoned:
                continue
            outs.append(self.env[arg] if isinstance(arg, fx.Node) else arg)
        return outs


# Higher-order ops that run a submodule under a mode (grad, autocast): the position of the
# submodule among their arguments; its operands follow it.
_WRAPPERS = {"wrap_with_set_grad_enabled": 1, "wrap_with_autocast": 4}

# Operators outside ATen, by their qualified name (they exist only once their library has
# registered them): transformers' grouped matmul of mixture-of-experts layers.
NAMED_OPS: dict[str, AtenConverter] = {
    "transformers.grouped_mm_fallback.default":
        lambda cx, a: cx.grouped_mm(a["input"], a["weight"], a["offs"]),
}


def _out_of_place(node: fx.Node, order: Mapping[fx.Node, int]) -> tuple[Any, bool]:
    """The functional overload of an in-place ATen op (`add_.Tensor` -> `add.Tensor`), and
    whether its mutation can be seen. It cannot when the mutated operand, and every view it
    was taken from up to the tensor that owns the memory, is read by nothing else after it
    (nor viewed), and that tensor is computed in the program (not an input or a weight):
    then the functional op computes the same. transformers' exporter leaves such ops in (DETR's residual `add_`,
    Funnel's `mul_`). (None, False) for an op that is not in-place."""
    target = node.target
    schema = getattr(target, "_schema", None)
    name = schema.name.split("::")[-1] if schema is not None else ""
    if not name.endswith("_") or name.endswith("__") or not node.args:
        return None, False
    packet = getattr(aten, name[:-1], None)
    functional = getattr(packet, schema.overload_name or "default", None)
    if functional is None:
        return None, False
    def aliases(n: fx.Node) -> bool:
        returns = getattr(getattr(n.target, "_schema", None), "returns", ())
        return any(r.alias_info is not None for r in returns)

    cur, reader = node.args[0], node
    while True:
        if not isinstance(cur, fx.Node) or cur.op != "call_function":
            return functional, True  # a program input, weight or constant: the caller sees it
        # Another reader sees the old value if it runs first and keeps no view of it (the
        # divisor of Mixtral's `weights /= weights.sum()`).
        if any(u is not reader and (order[u] > order[node] or aliases(u)) for u in cur.users):
            return functional, True
        if not aliases(cur):
            return functional, False  # cur owns its memory (a getitem of a tuple does too)
        reader, cur = cur, cur.args[0]


def _raise(e: Exception) -> Any:
    raise e


def _embedding_highs_export(graph: fx.Graph) -> Iterator[tuple[str, int]]:
    """Integer inputs that index an embedding table draw from [0, rows)."""
    for n in graph.nodes:
        if n.op == "call_function" and n.target is aten.embedding.default:
            table, ids = n.args[0], n.args[1]
            if isinstance(ids, fx.Node) and ids.op == "placeholder":
                yield ids.name, int(table.meta["val"].shape[0])


def _as_program(program: Any, example_inputs: Any) -> tuple[torch.export.ExportedProgram, str]:
    if isinstance(program, torch.export.ExportedProgram):
        return program, "exported"
    if isinstance(program, tuple) and len(program) == 2 and example_inputs is None:
        program, example_inputs = program
    if not isinstance(program, nn.Module):
        raise ModelImportError(f"import_exported: expected an ExportedProgram or a torch module, "
                               f"found {type(program).__name__}")
    if example_inputs is None:
        raise ModelImportError(f"{type(program).__name__}: torch.export needs example inputs")
    args = tuple(example_inputs) if isinstance(example_inputs, list | tuple) else (example_inputs,)
    try:
        ep = torch.export.export(program, args)
    except Exception as e:
        raise ModelImportError(f"{type(program).__name__}: torch.export failed: "
                               f"{_first_line(e)}") from e
    return ep, type(program).__name__


def import_exported(program: Any, example_inputs: Any = None, *, name: str | None = None,
                    decompose: bool = False, fold_parameters: bool = False,
                    input_high: Mapping[str, int] | None = None) -> Graph:
    """Import a `torch.export` program (or export `module` on `example_inputs` first).

    `program` is an `ExportedProgram`, a module (with `example_inputs`) or a pair
    `(module, example_inputs)`. The ATen graph is imported as exported; if that leaves
    unsupported operators, the program's `run_decompositions()` is tried before giving up
    (the error then lists the operators of the undecomposed program). `decompose=True`
    imports the decomposed program directly. With `fold_parameters`, ops that read only
    parameters (e.g. a weight transpose) are evaluated at import time too. `input_high`
    gives the value range [0, high) of integer inputs (embedding inputs get it by default).
    """
    ep, default_name = _as_program(program, example_inputs)
    name = name or default_name
    high = dict(input_high or {})
    if decompose:
        ep = ep.run_decompositions()
    try:
        return _ExportImporter(ep, name, fold_parameters, high).run()
    except UnsupportedOpsError as first:
        if decompose:
            raise
        try:
            decomposed = ep.run_decompositions()
            return _ExportImporter(decomposed, name, fold_parameters, high).run()
        except Exception:
            # The undecomposed program's operators are the ones the user wrote; name those.
            raise first from None


# ---- torch.fx ------------------------------------------------------------------------


class _FxImporter(_Importer):
    def __init__(self, gm: fx.GraphModule, inputs: tuple[Any, ...], name: str,
                 fold_parameters: bool, input_high: Mapping[str, int]) -> None:
        super().__init__(gm.graph, name, fold_parameters)
        self.gm = gm
        self.inputs = inputs
        self.source = f"torch.fx trace of {name!r}"
        self._next_input = 0
        self.high = dict(_embedding_highs_fx(gm))
        self.high.update(input_high)

    def op_name(self, node: fx.Node) -> str:
        if node.op == "call_module":
            cls = type(self.gm.get_submodule(node.target))
            mod = cls.__module__
            return f"nn.{cls.__name__}" if mod.startswith("torch.nn") else f"{mod}.{cls.__name__}"
        if node.op == "call_method":
            return f"Tensor.{node.target}"
        if node.op == "call_function":
            return _function_name(node.target)
        return node.op

    def placeholder(self, node: fx.Node) -> Any:
        i = self._next_input
        self._next_input += 1
        if i < len(self.inputs):
            x = self.inputs[i]
            if isinstance(x, torch.Tensor):
                return self.cx.input(node.name, tuple(x.shape), x.dtype,
                                     self.high.get(node.name, 0))
            return x
        if node.args:  # a default argument of forward
            return node.args[0]
        raise ModelImportError(f"{self.source}: no example input for argument {node.name!r}")

    def call(self, node: fx.Node) -> None:
        if node.op == "get_attr":
            self.env[node] = self.cx.tensor_attr(node.target,
                                                 _fetch_attr(self.gm, node.target))
            return
        super().call(node)
        mod = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        target = node.args[0] if node.args else None
        if node in self.env and isinstance(target, fx.Node) and _fx_in_place(node, mod):
            # A symbolic trace keeps reading the operand after `y.mul_(3)` or `x += y`:
            # from here on it holds the result (no view shares it: see the converter).
            self.env[target] = self.env[node]

    def converter(self, node: fx.Node) -> Callable[[tuple[Any, ...], dict[str, Any]], Any] | None:
        cx = self.cx
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            mconv = _module_converter(mod)
            if mconv is None:
                return None
            if _fx_in_place(node, mod) and _fx_writes_through_view(node):
                why = "in place through a view (a tensor shares the memory it writes)"
                return lambda args, kwargs: _raise(_Refuse(why))

            def run_module(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
                if kwargs:
                    raise _Refuse(f"module called with keyword arguments {sorted(kwargs)}")
                return mconv(cx, mod, node.target, args)
            return run_module
        table = FX_METHODS if node.op == "call_method" else FX_FUNCTIONS
        fconv = table.get(node.target)
        if fconv is None:
            return None
        if _fx_in_place(node, None) and _fx_writes_through_view(node):
            why = "in place through a view (a tensor shares the memory it writes)"
            return lambda args, kwargs: _raise(_Refuse(why))
        return lambda args, kwargs: fconv(cx, args, kwargs)

    def effectful(self, node: fx.Node) -> bool:
        mod = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        return node.op in ("call_method", "call_function", "call_module") and \
            _fx_in_place(node, mod)

    def foldable(self, node: fx.Node) -> bool:
        if node.op == "call_module" and not self.fold_parameters:
            return not any(True for _ in self.gm.get_submodule(node.target).parameters())
        return True

    def evaluate(self, node: fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if node.op == "call_module":
            return self.gm.get_submodule(node.target)(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        return node.target(*args, **kwargs)

    def expected(self, node: fx.Node) -> Any:
        return _meta_shape(node.meta.get("tensor_meta"))

    def outputs(self, node: fx.Node) -> list[Any]:
        outs: list[Any] = []
        for leaf in _leaves(node.args[0]):
            if leaf is None:
                continue
            if isinstance(leaf, fx.Node):
                if leaf in self.poisoned:
                    continue
                val = self.env[leaf]
                outs.extend(v for v in _leaves(val) if v is not None)
            else:
                outs.append(leaf)
        return outs


def _fetch_attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _function_name(fn: Any) -> str:
    mod = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", repr(fn))
    if mod in ("_operator", "operator"):
        return f"operator.{name}"
    if mod.startswith("torch.nn.functional"):
        return f"F.{name}"
    if mod.startswith("torch") or mod == "":
        return f"torch.{name}"
    return f"{mod}.{name}"


def _embedding_highs_fx(gm: fx.GraphModule) -> Iterator[tuple[str, int]]:
    for n in gm.graph.nodes:
        ids: Any = None
        rows = 0
        if n.op == "call_module":
            mod = gm.get_submodule(n.target)
            if isinstance(mod, nn.Embedding) and n.args:
                ids, rows = n.args[0], mod.num_embeddings
        elif n.op == "call_function" and n.target is F.embedding and len(n.args) >= 2:
            ids, table = n.args[0], n.args[1]
            tm = table.meta.get("tensor_meta") if isinstance(table, fx.Node) else None
            rows = int(tm.shape[0]) if tm is not None else 0
        if isinstance(ids, fx.Node) and ids.op == "placeholder" and rows:
            yield ids.name, rows


def import_fx(module: nn.Module, example_inputs: Any, *, name: str | None = None,
              fold_parameters: bool = False,
              input_high: Mapping[str, int] | None = None) -> Graph:
    """Import `module` through `torch.fx.symbolic_trace`, with shapes from `example_inputs`.

    Leaf modules of torch.nn (Conv2d, Linear, BatchNorm, LayerNorm, Embedding, pooling,
    activations, Dropout, Flatten, ...) and the usual torch functions and tensor methods are
    mapped; everything that only depends on known values is evaluated at import time.
    """
    name = name or type(module).__name__
    inputs = (tuple(example_inputs) if isinstance(example_inputs, list | tuple)
              else (example_inputs,))
    try:
        gm = fx.symbolic_trace(module)
    except Exception as e:
        raise ModelImportError(f"{name}: torch.fx.symbolic_trace failed: {_first_line(e)}") from e
    from torch.fx.passes.shape_prop import ShapeProp

    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*inputs)
    except Exception as e:
        raise ModelImportError(f"{name}: running the traced module on the example inputs "
                               f"failed: {_first_line(e)}") from e
    return _FxImporter(gm, inputs, name, fold_parameters, dict(input_high or {})).run()


__all__ = ["ATEN", "FX_FUNCTIONS", "FX_METHODS", "FX_MODULES", "Const", "Expanded",
           "import_exported", "import_fx", "ir_dtype"]
