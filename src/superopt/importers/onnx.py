"""Import ONNX models into superopt graphs.

`import_onnx(path_or_model)` maps every ONNX node onto IR ops through `CONVERTERS`, a table
from ONNX op type to a converter function. A node whose inputs are all known at import time
is evaluated here instead (constant folding) and its outputs become weights with data, so
weight subgraphs such as the `ConstantOfShape` placeholders of the ONNX "light" models, or
the `Unsqueeze`d batch-norm scales of DenseNet, never reach the IR.

Patterns that exporters write out op by op are folded back while the graph is built, by
looking at the IR nodes already emitted (`_Context.mul`, `.add`, `.div`, `.recip` and the
MatMul converter): `x * Sigmoid(x)` is `silu`, GELU's erf and tanh forms are `gelu`,
normalisations over trailing dims are `rms_norm` / `layer_norm` (a following per-element
scale and bias move into them), `1 / Sqrt` is `rsqrt`, and a softmax of scaled `q @ k^T`
(no mask or a causal one) times `v` is `attention`. A near miss (another constant, another
mask) stays written out. Constant aranges and triangular masks become `iota` / `tri_mask`.

Every unsupported operator (an op type without a converter, or a node whose attributes or
non-constant inputs a converter cannot express) is collected over the whole model before
anything is raised: `UnsupportedOpsError` lists them all with where they occur, and no
partial graph is returned. Files that cannot be read raise `ModelImportError`.

`onnx` is imported lazily, inside functions, so that `superopt` works without it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from superopt.importers import composite
from superopt.importers.composite import Prim
from superopt.importers.einsum import einsum
from superopt.importers.errors import ModelImportError, UnsupportedOpsError
from superopt.importers.naming import UniqueNames
from superopt.importers.resample import read_maps, resample
from superopt.importers.transposed import conv_transpose2d
from superopt.ir import kernels
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.memory import ensure_fits
from superopt.ir.ops.index import tri_mask_value
from superopt.ir.ranges import LOOKUP_LIMIT, ValueRanges

__all__ = [
    "CONVERTERS", "LIGHT_MODELS", "Const", "OnnxNode", "import_onnx", "light_model_path",
    "supported_ops",
]

# The models the `onnx` package ships under onnx/backend/test/data/light (opset 9).
LIGHT_MODELS: tuple[str, ...] = (
    "light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2",
    "light_resnet50", "light_shufflenet", "light_squeezenet", "light_vgg19", "light_zfnet512",
)

_DEFAULT_DOMAINS = ("", "ai.onnx")

# Folding these would bake one random draw into the graph.
_NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Multinomial", "Bernoulli"})

# onnx.reference implements these with opset-13 semantics at every opset, so it must not
# fold them for older opsets (it gets the 2-D coercion of Softmax-1/11 wrong).
_COERCING_BEFORE_13 = frozenset({"Softmax", "LogSoftmax", "Hardmax"})


# ---- records -------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Const:
    """A tensor known at import time: an initializer or the output of a folded node.

    Compared by identity so that one constant used twice becomes one weight.
    """

    data: np.ndarray
    hint: str  # the name its weight gets if it reaches the graph

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)


Tensor = Const | Value


@dataclass(frozen=True)
class OnnxNode:
    """One ONNX node with decoded attributes and the opset of its domain."""

    op_type: str
    domain: str
    where: str  # the node's name, or "#index" for an unnamed node
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    opset: int

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    @property
    def label(self) -> str:
        return self.op_type if self.domain in _DEFAULT_DOMAINS else f"{self.domain}::{self.op_type}"


class _Unsupported(Exception):
    """This node cannot be expressed in the IR (reported with all the others)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class _Invalid(Exception):
    """The node is malformed (missing attribute or input): the model is invalid."""


class _NotFoldable(Exception):
    """Raised while folding when a converter would have to emit an IR node."""


Converter = Callable[["_Context", OnnxNode, list["Tensor | None"]], Sequence["Tensor | None"]]

# ONNX op type -> converter. Converters return one entry per node output; None marks an
# output the IR cannot provide (for example MaxPool's indices), an error only if it is read.
CONVERTERS: dict[str, Converter] = {}


def _converter(*op_types: str) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for op in op_types:
            if op in CONVERTERS:
                raise ValueError(f"ONNX converter for {op!r} registered twice")
            CONVERTERS[op] = fn
        return fn
    return deco


def supported_ops() -> list[str]:
    """ONNX op types with a converter (others import only when constant-folded)."""
    return sorted(CONVERTERS)


# ---- building context ----------------------------------------------------------------

def _ir_dtype(dt: np.dtype) -> str:
    name = np.dtype(dt).name
    table = {"float32": "f32", "float64": "f32", "float16": "f16", "bfloat16": "bf16",
             "int64": "i64", "int32": "i32", "bool": "bool"}
    if name not in table:
        raise _Unsupported(f"{name} tensors")
    return table[name]


class _Context:
    """The graph under construction plus helpers that fold when their inputs are constants."""

    def __init__(self, name: str, batch_change: tuple[int, int] | None) -> None:
        self.b = GraphBuilder(name)
        self.folding = False
        self.batch_change = batch_change  # (batch in the model, batch asked for)
        self._materialised: dict[int, tuple[Const, Value]] = {}
        self._names = UniqueNames()
        # Norms made by the folds whose scale is still ones ("unit") or whose bias is still
        # zeros ("scaled"): a following Mul / Add by a parameter moves into them.
        self._bare: dict[Value, str] = {}
        self.ranges = ValueRanges(self.b)  # integer values' spans (lookups)

    # -- naming and sources --

    def reserve(self, name: str) -> None:
        self._names.reserve(name)

    def unique(self, hint: str) -> str:
        return self._names.claim(hint or "const")

    def value(self, t: Tensor) -> Value:
        """The graph value of `t`; a constant becomes a weight with data (once)."""
        if isinstance(t, Value):
            return t
        if self.folding:
            raise _NotFoldable
        hit = self._materialised.get(id(t))
        if hit is not None:
            return hit[1]
        # A folded constant can be a broadcast view far larger than its data (a corrupt
        # Expand or ConstantOfShape shape): refused here, before comparing it with an
        # arange of its shape would allocate that much.
        ensure_fits(int(t.data.size) * t.data.dtype.itemsize,
                    f"constant {t.hint!r} of shape {list(t.shape)}")
        index = _index_constant(t.data)
        if index is not None:  # an arange or a triangular mask: the IR's constant op
            v = self.b.op(index[0], **index[1])
            assert isinstance(v, Value)
        else:
            dtype = _ir_dtype(t.data.dtype)
            v = self.b.weight(self.unique(t.hint), t.shape, dtype, data=t.data)  # copies
        self._materialised[id(t)] = (t, v)
        return v

    def emit(self, op: str, *inputs: Tensor, **attrs: Any) -> Value:
        if self.folding:
            raise _NotFoldable
        out = self.b.op(op, *(self.value(t) for t in inputs), **attrs)
        assert isinstance(out, Value)
        return out

    def emit_multi(self, op: str, *inputs: Tensor, **attrs: Any) -> tuple[Value, ...]:
        if self.folding:
            raise _NotFoldable
        return self.b.add(op, [self.value(t) for t in inputs], attrs)

    # -- types --

    def shape(self, t: Tensor) -> tuple[int, ...]:
        return t.shape if isinstance(t, Const) else self.b.shape(t)

    def np_dtype(self, t: Tensor) -> np.dtype:
        return t.data.dtype if isinstance(t, Const) else self.b.type_of(t).dtype.numpy

    def scalar(self, value: float, like: Tensor, hint: str) -> Const:
        return Const(np.asarray(value, dtype=self.np_dtype(like)), hint)

    # -- folding helpers --

    def reshape(self, t: Tensor, shape: Sequence[int]) -> Tensor:
        shape = tuple(int(d) for d in shape)
        if shape == self.shape(t):
            return t
        if isinstance(t, Const):
            return Const(t.data.reshape(shape), t.hint)
        return self.emit("reshape", t, shape=shape)

    def transpose(self, t: Tensor, perm: Sequence[int]) -> Tensor:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(len(perm))):
            return t
        if isinstance(t, Const):
            return Const(np.transpose(t.data, perm), f"{t.hint}:T")
        return self.emit("transpose", t, perm=perm)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(np.asarray(a.data + b.data), a.hint)
        if isinstance(a, Const):
            a, b = b, a
        if not self.folding:
            for n, beta in ((a, b), (b, a)):
                absorbed = self._absorb_bias(n, beta)
                if absorbed is not None:
                    return absorbed
        return self.emit("ewadd", a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(np.asarray(a.data * b.data), a.hint)
        if isinstance(a, Const):
            a, b = b, a
        if not self.folding:
            folded = self._fold_product(a, b)
            if folded is not None:
                return folded
        if isinstance(b, Const) and b.data.size == 1 and \
                np.broadcast_shapes(self.shape(a), b.shape) == self.shape(a):
            # The same Const when already rank 0, so a shared scalar stays one weight.
            scalar = b if b.data.ndim == 0 else Const(b.data.reshape(()), b.hint)
            return self.emit("smul", a, scalar)
        return self.emit("ewmul", a, b)

    def neg(self, t: Tensor) -> Tensor:
        if isinstance(t, Const):
            return Const(np.asarray(-t.data), f"{t.hint}:neg")
        return self.emit("neg", t)

    def sub(self, a: Tensor, b: Tensor) -> Tensor:
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(np.asarray(a.data - b.data), a.hint)
        return self.emit("sub", a, b)

    def div(self, a: Tensor, b: Tensor) -> Tensor:
        if isinstance(a, Const) and isinstance(b, Const):
            with np.errstate(divide="ignore", invalid="ignore"):
                return Const(np.asarray(a.data / b.data).astype(a.data.dtype), a.hint)
        if not self.folding:
            if _near(self.scalar_value(a), 1.0) and \
                    np.broadcast_shapes(self.shape(a), self.shape(b)) == self.shape(b):
                return self.recip(b)  # 1 / y: how torch's exporter writes rsqrt and recip
            root = self.producer(b)
            if root is not None and root.op == "sqrt":
                folded = self._norm_core(a, root.inputs[0])
                if folded is not None:
                    return folded
        return self.emit("div", a, b)

    def recip(self, t: Tensor) -> Tensor:
        if isinstance(t, Const):
            with np.errstate(divide="ignore"):
                return Const(np.asarray(1 / t.data).astype(t.data.dtype), f"{t.hint}:recip")
        root = self.producer(t)
        if root is not None and root.op == "sqrt":
            return self.emit("rsqrt", root.inputs[0])
        return self.emit("recip", t)

    # -- looking back at what was emitted: the pattern folds --

    def producer(self, t: Tensor | None) -> Node | None:
        """The IR node that computes `t` (None for constants and while folding)."""
        if not isinstance(t, Value) or self.folding:
            return None
        return self.b.nodes[t.node]

    def const_data(self, t: Tensor | None) -> np.ndarray | None:
        """`t`'s value when it is known at import time (a Const or a weight with data)."""
        if isinstance(t, Const):
            return t.data
        node = self.producer(t)
        if node is not None and node.op == "weight":
            return self.b.weights.get(node.attr("name"))
        return None

    def int_span(self, t: Tensor) -> tuple[int, int] | None:
        """[lo, hi] holding every element of the integer tensor t; None where unknown."""
        if isinstance(t, Const):
            d = t.data
            ok = d.dtype.kind in "iub" and d.size
            return (int(d.min()), int(d.max())) if ok else None
        return None if self.folding else self.ranges.span(t)

    def scalar_value(self, t: Tensor | None) -> float | None:
        """The value of a constant whose elements are all equal (a broadcast scalar)."""
        data = self.const_data(t)
        if data is None or data.size == 0 or data.dtype == np.bool_:
            return None
        flat = np.asarray(data, np.float64).ravel()
        return float(flat[0]) if np.all(flat == flat[0]) else None

    def factors(self, t: Tensor) -> tuple[list[Tensor], float]:
        """`t` as a product: its run-time factors (through ewmul, smul and division by a
        scalar) and the product of its scalar constant factors."""
        c = self.scalar_value(t)
        if c is not None:
            return [], c
        node = self.producer(t)
        if node is not None and node.op in ("ewmul", "smul"):
            fa, ca = self.factors(node.inputs[0])
            fb, cb = self.factors(node.inputs[1])
            return fa + fb, ca * cb
        if node is not None and node.op == "div":
            d = self.scalar_value(node.inputs[1])
            if d is not None and d != 0.0:
                fa, ca = self.factors(node.inputs[0])
                return fa, ca / d
        return [t], 1.0

    def _trailing_mean(self, t: Tensor) -> tuple[Value, int] | None:
        """(x, axis) when `t` is mean(x) over the dims axis.. with keepdims."""
        node = self.producer(t)
        if node is None or node.op != "reduce_mean" or not node.attr("keepdims"):
            return None
        x = node.inputs[0]
        rank = self.b.type_of(x).rank
        axes = tuple(node.attr("axes"))
        if not axes or axes != tuple(range(axes[0], rank)):
            return None
        return x, axes[0]

    def _square_of(self, t: Tensor) -> Value | None:
        """x when `t` is x*x or x**2."""
        node = self.producer(t)
        if node is None:
            return None
        if node.op == "pow" and node.attr("exponent") == 2.0:
            return node.inputs[0]
        if node.op == "ewmul" and node.inputs[0] == node.inputs[1]:
            return node.inputs[0]
        return None

    def _norm_core(self, num: Tensor, inner: Tensor) -> Value | None:
        """rms_norm or layer_norm (unit scale, zero bias) for num / sqrt(inner) when
        inner = mean(sq) + eps over trailing dims and num is x (sq = x*x: RMSNorm) or
        x - mean(x) (sq = num*num: LayerNorm); None for anything else."""
        node = self.producer(inner)
        if node is None or node.op != "ewadd":
            return None
        for mean_t, eps_t in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            eps = self.scalar_value(eps_t)
            found = self._trailing_mean(mean_t)
            if eps is None or found is None or eps < 0:
                continue
            sq, axis = found
            base = self._square_of(sq)
            if base is None or base != num or not self.b.type_of(base).dtype.is_float:
                continue
            shape = self.shape(base)
            norm, dt = shape[axis:], self.np_dtype(base)
            centred = self.producer(base)
            if centred is not None and centred.op == "sub":
                m = self._trailing_mean(centred.inputs[1])
                if m is not None and m == (centred.inputs[0], axis):
                    x = centred.inputs[0]
                    out = self.emit("layer_norm", x, Const(np.ones(norm, dt), "ln_scale"),
                                    Const(np.zeros(norm, dt), "ln_bias"), axis=axis, eps=eps)
                    self._bare[out] = "unit"
                    return out
            out = self.emit("rms_norm", base, Const(np.ones(norm, dt), "rms_scale"),
                            axis=axis, eps=eps)
            self._bare[out] = "unit"
            return out
        return None

    def _norm_param(self, norm_value: Value, t: Tensor) -> np.ndarray | None:
        """`t` as a per-element parameter of norm_value's normalised dims: a float constant
        whose leading dims are 1 and whose trailing dims broadcast to them."""
        data = self.const_data(t)
        node = self.producer(norm_value)
        if data is None or node is None or not np.issubdtype(data.dtype, np.floating):
            return None
        shape = self.shape(norm_value)
        norm = shape[node.attr("axis"):]
        cut = max(data.ndim - len(norm), 0)
        if data.ndim > len(shape) or any(d != 1 for d in data.shape[:cut]):
            return None
        try:
            out = np.broadcast_to(data.reshape(data.shape[cut:]), norm)
        except ValueError:
            return None
        return np.array(out, dtype=self.np_dtype(norm_value))

    def _absorb_scale(self, n: Tensor, g: Tensor) -> Value | None:
        """norm(x) * g with a unit-scale norm and g per normalised element: g becomes the
        norm's weight (rules fold it into the next matmul)."""
        if not isinstance(n, Value) or self._bare.get(n) != "unit":
            return None
        node = self.producer(n)
        assert node is not None
        gamma: Tensor | None
        if isinstance(g, Value) and self.shape(g) == self.shape(node.inputs[1]) and \
                self.b.type_of(g).dtype == self.b.type_of(n).dtype:
            gamma = g  # a run-time scale of exactly the normalised shape
        else:
            data = self._norm_param(n, g)
            gamma = None if data is None else Const(data, self.const_hint(g))
        if gamma is None:
            return None
        if node.op == "rms_norm":
            out = self.emit("rms_norm", node.inputs[0], gamma,
                            axis=node.attr("axis"), eps=node.attr("eps"))
        else:
            out = self.emit("layer_norm", node.inputs[0], gamma, node.inputs[2],
                            axis=node.attr("axis"), eps=node.attr("eps"))
            self._bare[out] = "scaled"
        return out

    def _absorb_bias(self, n: Tensor, beta: Tensor) -> Value | None:
        node = self.producer(n)
        if node is None or node.op != "layer_norm" or self._bare.get(n) not in ("unit",
                                                                                  "scaled"):
            return None
        assert isinstance(n, Value)
        data = self._norm_param(n, beta)
        if data is None:
            return None
        return self.emit("layer_norm", node.inputs[0], node.inputs[1],
                         Const(data, self.const_hint(beta)), axis=node.attr("axis"),
                         eps=node.attr("eps"))

    def const_hint(self, t: Tensor) -> str:
        if isinstance(t, Const):
            return t.hint
        node = self.producer(t)
        return str(node.attr("name")) if node is not None and node.op == "weight" else "param"

    def _fold_product(self, a: Tensor, b: Tensor) -> Value | None:
        """The IR op a product ends, when it ends one: SiLU, GELU (exact and tanh), a
        normalisation written out with rsqrt, or a norm's scale."""
        for x, y in ((a, b), (b, a)):
            node = self.producer(x)
            if node is not None and node.op == "sigmoid" and node.inputs[0] == y:
                return self.emit("silu", y)
            if node is not None and node.op in ("rsqrt", "recip"):
                inner = node.inputs[0]
                if node.op == "recip":
                    root = self.producer(inner)
                    if root is None or root.op != "sqrt":
                        continue
                    inner = root.inputs[0]
                folded = self._norm_core(y, inner)
                if folded is not None:
                    return folded
            absorbed = self._absorb_scale(x, y)
            if absorbed is not None:
                return absorbed
        return self._fold_gelu(a, b)

    def _fold_gelu(self, a: Tensor, b: Tensor) -> Value | None:
        fa, ca = self.factors(a)
        fb, cb = self.factors(b)
        terms, c = fa + fb, ca * cb
        if len(terms) != 2 or not _near(c, 0.5):
            return None
        for x, s in ((terms[0], terms[1]), (terms[1], terms[0])):
            node = self.producer(s)
            if node is None or node.op != "ewadd":
                continue
            for inner, one in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
                fn = self.producer(inner)
                if not _near(self.scalar_value(one), 1.0) or fn is None:
                    continue
                arg, k = self.factors(fn.inputs[0]) if fn.op in ("erf", "tanh") else ([], 0.0)
                if len(arg) != 1:
                    continue
                if fn.op == "erf" and arg[0] == x and _near(k, 1 / math.sqrt(2.0)):
                    return self.emit("gelu", x, approximate="none")
                if fn.op == "tanh" and _near(k, math.sqrt(2 / math.pi)) and \
                        self._is_cubic_poly(arg[0], x):
                    return self.emit("gelu", x, approximate="tanh")
        return None

    # -- attention: softmax(q k^T * scale [+ causal mask]) v --

    def fold_attention(self, p: Tensor, v: Tensor) -> Value | None:
        """`attention` for MatMul(p, v) when p is a last-axis softmax of scaled q @ k^T
        with no mask or a causal one (an additive 0 / -inf constant, or a select against a
        lower triangle), optionally behind the NaN guard torch's exporter writes after
        SDPA's softmax (a NaN needs a fully masked row, which a causal mask never has).
        K/V heads repeated by unsqueeze-expand-reshape (transformers' repeat_kv) are undone
        into grouped-query attention."""
        node = self.producer(p)
        if node is not None and node.op == "where" and _near(self.scalar_value(node.inputs[1]),
                                                             0.0, 0.0):
            guard = self.producer(node.inputs[0])  # not(s == s): IsNaN(s)
            if guard is not None and guard.op != "eq":  # another select before a matmul
                guard = None
            false = self.const_data(guard.inputs[1]) if guard is not None else None
            inner = self.producer(guard.inputs[0]) if guard is not None and \
                false is not None and not false.any() else None
            if inner is not None and inner.op == "eq" and \
                    inner.inputs[0] == inner.inputs[1] == node.inputs[2]:
                node = self.producer(node.inputs[2])
        if node is None or node.op != "softmax":
            return None
        rank = len(self.shape(p))
        if rank < 3 or node.attr("axis") != rank - 1:
            return None
        logits, causal = node.inputs[0], False
        masked = self.producer(logits)
        if masked is not None and masked.op in ("ewadd", "where"):
            kind, scores = self._attention_mask(masked)
            if kind is None or scores is None:
                return None
            logits, causal = scores, kind == "causal"
        terms, scale = self.factors(logits)
        mm = self.producer(terms[0]) if len(terms) == 1 else None
        if mm is None or mm.op != "matmul" or mm.attr("activation") != "none":
            return None
        fq, cq = self.factors(mm.inputs[0])
        fk, ck = self.factors(mm.inputs[1])
        if len(fq) != 1 or len(fk) != 1:
            return None
        q, kt, scale = fq[0], fk[0], scale * cq * ck
        if scale == 0.0:  # the op reads a scale of 0 as "1/sqrt(head dim)"
            return None
        if not isinstance(q, Value) or not isinstance(kt, Value) or not isinstance(v, Value):
            return None
        ranks = {len(self.shape(t)) for t in (q, kt, v)}
        if ranks != {rank}:
            return None
        swap = (*range(rank - 2), rank - 1, rank - 2)
        tnode = self.producer(kt)
        k = tnode.inputs[0] if tnode is not None and tnode.op == "transpose" and \
            tuple(tnode.attr("perm")) == swap else self.emit("transpose", kt, perm=swap)
        k0, v0 = self._unrepeated(k), self._unrepeated(v)
        if k0 is not None and v0 is not None and k0[1] == v0[1]:
            k, v = k0[0], v0[0]
        try:
            return self.emit("attention", q, k, v, scale=scale, causal=causal)
        except IRError:
            return None  # shapes the op does not take (k batch dims not broadcasting, ...)

    def _attention_mask(self, node: Node) -> tuple[str | None, Value | None]:
        """("none" | "causal", scores) for scores + mask or where(mask, scores, -inf)."""
        if node.op == "where":
            shape = self.shape(node.inputs[1])
            tri = self.producer(node.inputs[0])
            keep = self.const_data(node.inputs[0])
            if tri is not None and tri.op == "tri_mask":
                keep = tri_mask_value(tri.a).astype(bool)
            fill = self.scalar_value(node.inputs[2])
            if keep is None or fill is None or fill > np.finfo(np.float32).min / 2 or \
                    self.shape(node.inputs[2]) != () or \
                    np.broadcast_shapes(shape, keep.shape) != shape:
                return None, None
            k = np.broadcast_to(keep, shape).reshape(-1, *shape[-2:])
            if not np.all(k == k[0]):
                return None, None
            if k[0].all():
                return "none", node.inputs[1]
            if np.array_equal(k[0], np.tril(np.ones(k[0].shape, dtype=bool))):
                return "causal", node.inputs[1]
            return None, None
        for scores, mask in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            data = self.const_data(mask)
            if data is None or not np.issubdtype(data.dtype, np.floating):
                continue
            shape = self.shape(scores)
            if np.broadcast_shapes(shape, data.shape) != shape:
                continue
            m = np.broadcast_to(data, shape).reshape(-1, *shape[-2:])
            if not np.all(m == m[0]):
                continue
            # Additive masks spell "masked" as -inf or as the dtype's most negative value.
            keep, drop = m[0] == 0, m[0] <= np.finfo(np.float32).min / 2
            if not np.all(keep | drop):
                continue
            if keep.all():
                return "none", scores  # type: ignore[return-value]
            if np.array_equal(keep, np.tril(np.ones(keep.shape, dtype=bool))):
                return "causal", scores  # type: ignore[return-value]
        return None, None

    def _unrepeated(self, t: Value) -> tuple[Value, int] | None:
        """(x, g) when t = reshape(expand(reshape(x))) repeats each of x's heads g times:
        (..., Hkv, L, D) -> (..., Hkv, 1, L, D) -> (..., Hkv, g, L, D) -> (..., Hkv*g, L, D)."""
        outer = self.producer(t)
        wide = self.producer(outer.inputs[0]) if outer is not None and \
            outer.op == "reshape" else None
        unit = self.producer(wide.inputs[0]) if wide is not None and wide.op == "expand" else None
        if unit is None or unit.op != "reshape":
            return None
        x = unit.inputs[0]
        sx, su, sw, st = (self.shape(u) for u in (x, unit.outputs[0], wide.outputs[0], t))
        if len(sx) < 3 or su != (*sx[:-2], 1, *sx[-2:]):
            return None
        g = sw[-3]
        if sw != (*sx[:-2], g, *sx[-2:]) or st != (*sx[:-3], sx[-3] * g, *sx[-2:]):
            return None
        return x, g

    def _is_cubic_poly(self, t: Tensor, x: Tensor) -> bool:
        """t = x + 0.044715 * x**3 (in any order of factors)."""
        node = self.producer(t)
        if node is None or node.op != "ewadd":
            return False
        for lin, cub in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            if lin != x:
                continue
            terms, c = self.factors(cub)
            cube = [t for t in terms if t != x]
            powered = len(cube) == 1 and (p := self.producer(cube[0])) is not None and \
                p.op == "pow" and p.attr("exponent") == 3.0 and p.inputs[0] == x
            if _near(c, 0.044715) and ((not cube and len(terms) == 3) or
                                       (powered and len(terms) == 1)):
                return True
            if _near(c, 0.044715) and len(cube) == 1 and len(terms) == 2:
                sq = self._square_of(cube[0])
                if sq == x:
                    return True
        return False

    def scale(self, t: Tensor, factor: float) -> Tensor:
        if factor == 1.0:
            return t
        return self.mul(t, self.scalar(factor, t, f"scale_{factor:g}"))

    def relu(self, t: Tensor) -> Tensor:
        if isinstance(t, Const):
            return Const(np.maximum(t.data, 0).astype(t.data.dtype), t.hint)
        return self.emit("relu", t)

    def slice_axis(self, t: Tensor, axis: int, start: int, stop: int) -> Tensor:
        shape = self.shape(t)
        if (start, stop) == (0, shape[axis]):
            return t
        if isinstance(t, Const):
            idx = [slice(None)] * len(shape)
            idx[axis] = slice(start, stop)
            return Const(t.data[tuple(idx)], t.hint)
        starts = tuple(start if i == axis else 0 for i in range(len(shape)))
        ends = tuple(stop if i == axis else d for i, d in enumerate(shape))
        return self.emit("slice", t, starts=starts, ends=ends, steps=(1,) * len(shape))

    def concat(self, parts: Sequence[Tensor], axis: int) -> Tensor:
        if len(parts) == 1:
            return parts[0]
        arrays = [p.data for p in parts if isinstance(p, Const)]
        if len(arrays) == len(parts):
            return Const(np.concatenate(arrays, axis=axis), f"concat_{len(parts)}")
        return self.emit("concat", *parts, axis=axis)


def _near(value: float | None, target: float, rtol: float = 1e-4) -> bool:
    """A constant equal to `target` up to its float32 rounding in the file."""
    return value is not None and abs(value - target) <= rtol * abs(target)


def _index_constant(data: np.ndarray) -> tuple[str, dict[str, Any]] | None:
    """("iota", attrs) for an arange along one axis broadcast over the others, ("tri_mask",
    attrs) for a boolean lower/upper triangle; None for any other array. So a causal mask
    or a position ramp that a model computes from shapes reaches the IR as what it is."""
    a = np.asarray(data)
    if a.dtype == np.bool_:
        if a.ndim != 2:
            return None
        rows, cols = a.shape
        counts = a.sum(axis=1)
        partial = np.flatnonzero((counts > 0) & (counts < cols))
        if partial.size == 0:
            return None
        i, c = int(partial[0]), int(counts[partial[0]])
        for lower, k in ((True, c - 1 - i), (False, cols - c - i)):
            attrs = {"rows": rows, "cols": cols, "diagonal": k, "lower": lower}
            if np.array_equal(a, tri_mask_value(attrs).astype(bool)):
                return "tri_mask", attrs
        return None
    kinds = {"int64": "i64", "int32": "i32", "float32": "f32"}
    if a.dtype.name not in kinds or a.ndim == 0:
        return None
    if not a.size or a.flat[0] != 0:  # an empty constant is no arange either
        return None
    for axis, n in enumerate(a.shape):
        if n < 2:
            continue
        # One line along the axis first, then the whole array against a broadcast view: a
        # large index table (GatherND's) is rejected without building an arange its size.
        ramp = np.arange(n).reshape([-1 if d == axis else 1 for d in range(a.ndim)])
        line = a[tuple(slice(None) if d == axis else slice(0, 1) for d in range(a.ndim))]
        if np.array_equal(line, ramp) and np.array_equal(a, np.broadcast_to(ramp, a.shape)):
            return "iota", {"shape": tuple(int(d) for d in a.shape), "axis": axis,
                            "dtype": kinds[a.dtype.name]}
    return None


# ---- argument helpers ----------------------------------------------------------------

def _req(node: OnnxNode, ins: list[Tensor | None], i: int) -> Tensor:
    t = ins[i] if i < len(ins) else None
    if t is None:
        raise _Invalid(f"required input {i} is missing")
    return t


def _opt(ins: list[Tensor | None], i: int) -> Tensor | None:
    return ins[i] if i < len(ins) else None


def _const(t: Tensor | None, what: str) -> np.ndarray:
    if not isinstance(t, Const):
        raise _Unsupported(f"{what} is computed at run time, not a constant")
    return t.data


def _const_ints(t: Tensor | None, what: str) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(_const(t, what)).ravel())


def _const_float(t: Tensor | None, what: str) -> float:
    data = np.asarray(_const(t, what))
    if data.size != 1:
        raise _Invalid(f"{what} must hold one value, found shape {list(data.shape)}")
    return float(data.ravel()[0])


def _req_attr(node: OnnxNode, name: str) -> Any:
    if name not in node.attrs:
        raise _Invalid(f"required attribute {name!r} is missing")
    return node.attrs[name]


def _norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise _Invalid(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def _axes_input_or_attr(node: OnnxNode, ins: list[Tensor | None], index: int
                        ) -> tuple[int, ...] | None:
    """Axes given as an input (newer opsets) or as the `axes` attribute (older ones)."""
    t = _opt(ins, index)
    if t is not None:
        return _const_ints(t, "axes")
    axes = node.attr("axes")
    return None if axes is None else tuple(int(a) for a in axes)


def _all_const(ins: Sequence[Tensor | None]) -> bool:
    return all(t is None or isinstance(t, Const) for t in ins)


# ---- sources, identities and shape ops -----------------------------------------------

@_converter("Identity")
def _identity(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [_req(node, ins, 0)]


@_converter("Dropout")
def _dropout(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    training = _opt(ins, 2)
    if training is not None and bool(np.asarray(_const(training, "training_mode")).ravel()[0]):
        raise _Unsupported("training_mode is true")
    return [_req(node, ins, 0), None]  # the mask has no IR counterpart


@_converter("Constant")
def _constant(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    hint = node.outputs[0]
    if "value" in node.attrs:
        return [Const(np.asarray(node.attrs["value"]), hint)]
    kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64}
    for key, dtype in kinds.items():
        if key in node.attrs:
            return [Const(np.asarray(node.attrs[key], dtype=dtype), hint)]
    raise _Unsupported(f"attribute {sorted(node.attrs)} (only tensor and numeric values)")


@_converter("ConstantOfShape")
def _constant_of_shape(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                       ) -> list[Tensor | None]:
    shape = _const_ints(_req(node, ins, 0), "the shape")
    value = node.attr("value")
    fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(())
    # A zero-stride view: the placeholder weights of large models cost no memory until used.
    return [Const(np.broadcast_to(fill, shape), node.outputs[0])]


@_converter("Shape")
def _shape(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    shape = ctx.shape(_req(node, ins, 0))
    start, end = node.attr("start", 0), node.attr("end", None)
    return [Const(np.asarray(shape[start:end], dtype=np.int64), node.outputs[0])]


@_converter("Size")
def _size(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [Const(np.asarray(math.prod(ctx.shape(_req(node, ins, 0))), dtype=np.int64),
                  node.outputs[0])]


@_converter("Cast")
def _cast(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    from onnx import helper

    x = _req(node, ins, 0)
    target = np.dtype(helper.tensor_dtype_to_np_dtype(_req_attr(node, "to")))
    if isinstance(x, Const):
        return [Const(x.data.astype(target), x.hint)]
    if np.dtype(ctx.np_dtype(x)) == target:
        return [x]
    to = _ir_dtype(target)  # float64 runs as f32, as float64 inputs and initializers do
    if to == ctx.b.type_of(x).dtype.value:
        return [x]
    return [ctx.emit("cast", x, to=to)]


@_converter("Reshape")
def _reshape(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if node.opset < 5:
        target = [int(d) for d in _req_attr(node, "shape")]
    else:
        target = list(_const_ints(_req(node, ins, 1), "the target shape"))
    in_shape = ctx.shape(x)
    if not node.attr("allowzero", 0):
        target = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(target)]
    if ctx.batch_change and target and in_shape and not isinstance(x, Const):
        # Models exported with a fixed batch hard-code it in their reshapes; follow the
        # overridden batch where the reshape keeps the batch dimension in front.
        old, new = ctx.batch_change
        if target[0] == old and in_shape[0] == new:
            target[0] = new
    size = math.prod(in_shape)
    if target.count(-1) == 1:
        known = math.prod(d for d in target if d != -1)
        if known <= 0 or size % known:
            raise _Invalid(f"cannot reshape {list(in_shape)} to {target}")
        target[target.index(-1)] = size // known
    if math.prod(target) != size or any(d < 0 for d in target):
        raise _Invalid(f"cannot reshape {list(in_shape)} to {target}")
    return [ctx.reshape(x, target)]


@_converter("Flatten")
def _flatten(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axis = int(node.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return [ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))]


@_converter("Unsqueeze")
def _unsqueeze(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    axes = _axes_input_or_attr(node, ins, 1)
    if not axes:
        raise _Invalid("axes are missing")
    shape = list(ctx.shape(x))
    rank = len(shape) + len(axes)
    for a in sorted(_norm_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return [ctx.reshape(x, shape)]


@_converter("Squeeze")
def _squeeze(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axes = _axes_input_or_attr(node, ins, 1)
    drop = {i for i, d in enumerate(shape) if d == 1} if not axes else \
        {_norm_axis(a, len(shape)) for a in axes}
    if any(shape[a] != 1 for a in drop):
        raise _Invalid(f"cannot squeeze axes {sorted(drop)} of shape {list(shape)}")
    return [ctx.reshape(x, [d for i, d in enumerate(shape) if i not in drop])]


@_converter("Transpose")
def _transpose(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    rank = len(ctx.shape(x))
    perm = node.attr("perm")
    perm = tuple(reversed(range(rank))) if perm is None else tuple(int(p) for p in perm)
    return [ctx.transpose(x, perm)]


@_converter("Concat")
def _concat(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    parts = [t for t in ins if t is not None]
    if not parts:
        raise _Invalid("no inputs")
    rank = len(ctx.shape(parts[0]))
    axis = _norm_axis(int(node.attr("axis", 1)), rank)
    nonempty = [t for t in parts if ctx.shape(t)[axis] > 0] or parts[:1]
    return [ctx.concat(nonempty, axis)]


@_converter("Split")
def _split(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axis = _norm_axis(int(node.attr("axis", 0)), len(shape))
    dim = shape[axis]
    given = _opt(ins, 1)
    if given is not None:
        sizes = _const_ints(given, "split sizes")
    elif node.attr("split") is not None:
        sizes = tuple(int(s) for s in node.attr("split"))
    elif node.attr("num_outputs") is not None:
        n = int(node.attr("num_outputs"))
        chunk = -(-dim // n)
        sizes = tuple(min(chunk, dim - i * chunk) for i in range(n))
    else:
        n = len(node.outputs)
        if dim % n:
            raise _Invalid(f"cannot split {dim} into {n} equal parts")
        sizes = (dim // n,) * n
    if sum(sizes) != dim or len(sizes) != len(node.outputs):
        raise _Invalid(f"split sizes {list(sizes)} do not fit dim {dim} and "
                       f"{len(node.outputs)} outputs")
    if isinstance(x, Const):
        bounds = np.cumsum(sizes)[:-1]
        return [Const(p, x.hint) for p in np.split(x.data, bounds, axis=axis)]
    if len(sizes) == 1:
        return [x]
    return list(ctx.emit_multi("split", x, axis=axis, sizes=sizes))


@dataclass(frozen=True, eq=False)
class _Sequence:
    """An ONNX sequence of tensors known at import time (the pieces of a SplitToSequence);
    an empty piece is None, refused only where it is read."""

    items: tuple[Tensor | None, ...]


@_converter("SplitToSequence")
def _split_to_sequence(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                       ) -> list[Any]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axis = _norm_axis(int(node.attr("axis", 0)), len(shape))
    dim = shape[axis]
    given = _opt(ins, 1)
    if given is None:  # one piece per element, squeezed unless keepdims=0 says otherwise
        keep = bool(node.attr("keepdims", 1))
        pieces = [ctx.slice_axis(x, axis, i, i + 1) for i in range(dim)]
        if not keep:
            rest = tuple(d for i, d in enumerate(shape) if i != axis)
            pieces = [ctx.reshape(p, rest) for p in pieces]
        return [_Sequence(tuple(pieces))]
    split = np.asarray(_const(given, "split"), np.int64)
    if split.ndim == 0:  # pieces of that length, the last one shorter
        step = int(split)
        if step <= 0:
            raise _Invalid(f"split length {step}")
        sizes = [min(step, dim - i) for i in range(0, dim, step)]
    else:
        sizes = [int(v) for v in split]
    if sum(sizes) != dim or min(sizes, default=0) < 0:
        raise _Invalid(f"split sizes {sizes} do not fit dim {dim}")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    return [_Sequence(tuple(ctx.slice_axis(x, axis, a, a + k) if k else None
                            for a, k in zip(starts, sizes, strict=True)))]


@_converter("SequenceAt")
def _sequence_at(ctx: _Context, node: OnnxNode, ins: list[Any]) -> list[Tensor | None]:
    seq = _req(node, ins, 0)
    if not isinstance(seq, _Sequence):
        raise _Unsupported("a sequence not made by SplitToSequence")
    pos = _const_ints(_req(node, ins, 1), "position")[0]
    if not -len(seq.items) <= pos < len(seq.items):
        raise _Invalid(f"position {pos} of a sequence of {len(seq.items)}")
    item = seq.items[pos]
    if item is None:
        raise _Unsupported(f"item {pos} of the sequence is empty")
    return [item]


@_converter("SequenceLength")
def _sequence_length(ctx: _Context, node: OnnxNode, ins: list[Any]) -> list[Tensor | None]:
    seq = _req(node, ins, 0)
    if not isinstance(seq, _Sequence):
        raise _Unsupported("a sequence not made by SplitToSequence")
    return [Const(np.array(len(seq.items), np.int64), f"{node.outputs[0]}:length")]


@_converter("ConcatFromSequence")
def _concat_from_sequence(ctx: _Context, node: OnnxNode, ins: list[Any]
                          ) -> list[Tensor | None]:
    seq = _req(node, ins, 0)
    if not isinstance(seq, _Sequence):
        raise _Unsupported("a sequence not made by SplitToSequence")
    parts = [t for t in seq.items if t is not None]
    if not parts:
        raise _Unsupported("a sequence of empty tensors")
    rank = len(ctx.shape(parts[0]))
    if node.attr("new_axis", 0):
        axis = _norm_axis(int(_req_attr(node, "axis")), rank + 1)
        parts = [ctx.reshape(p, (*ctx.shape(p)[:axis], 1, *ctx.shape(p)[axis:])) for p in parts]
    else:
        axis = _norm_axis(int(_req_attr(node, "axis")), rank)
    return [ctx.concat(parts, axis)]


@_converter("Slice")
def _slice(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    if node.opset < 10:
        starts = tuple(int(v) for v in _req_attr(node, "starts"))
        ends = tuple(int(v) for v in _req_attr(node, "ends"))
        axes_attr = node.attr("axes")
        axes = tuple(range(len(starts))) if axes_attr is None else tuple(int(a) for a in axes_attr)
        steps: tuple[int, ...] = (1,) * len(starts)
    else:
        starts = _const_ints(_req(node, ins, 1), "starts")
        ends = _const_ints(_req(node, ins, 2), "ends")
        axes_t, steps_t = _opt(ins, 3), _opt(ins, 4)
        axes = tuple(range(len(starts))) if axes_t is None else _const_ints(axes_t, "axes")
        steps = (1,) * len(starts) if steps_t is None else _const_ints(steps_t, "steps")
    lo, hi, st = [0] * len(shape), list(shape), [1] * len(shape)
    for a, s, e, step in zip(axes, starts, ends, steps, strict=True):
        a = _norm_axis(a, len(shape))
        if step < 1:
            raise _Unsupported(f"step {step} (only positive steps)")
        start, stop, _ = slice(s, e, step).indices(shape[a])
        lo[a], hi[a], st[a] = start, max(stop, start), step
    if isinstance(x, Const):
        idx = tuple(slice(a, b, c) for a, b, c in zip(lo, hi, st, strict=True))
        return [Const(x.data[idx], x.hint)]
    if lo == [0] * len(shape) and hi == list(shape) and st == [1] * len(shape):
        return [x]
    return [ctx.emit("slice", x, starts=tuple(lo), ends=tuple(hi), steps=tuple(st))]


# Constant indices on run-time data become slices (and a concat) up to this many runs of
# consecutive indices, which every subsystem understands; beyond it, one gather.
_MAX_GATHER_SLICES = 4


@_converter("Gather")
def _gather(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    data = _req(node, ins, 0)
    shape = ctx.shape(data)
    axis = _norm_axis(int(node.attr("axis", 0)), len(shape))
    indices = _req(node, ins, 1)
    if not isinstance(indices, Const):
        if not np.issubdtype(ctx.np_dtype(indices), np.integer):
            raise _Invalid("indices are not integers")
        if axis == 0 and len(shape) == 2:
            # Rows of a table picked by run-time ids: an embedding lookup (as we export it).
            return [ctx.emit("embedding", indices, data)]
        return [ctx.emit("gather", data, indices, axis=axis)]
    idx = np.asarray(_const(indices, "indices")).astype(np.int64)
    idx = np.where(idx < 0, idx + shape[axis], idx)
    if idx.size and (idx.min() < 0 or idx.max() >= shape[axis]):
        raise _Invalid(f"indices out of range for dim {shape[axis]}")
    out_shape = (*shape[:axis], *idx.shape, *shape[axis + 1:])
    if isinstance(data, Const):
        return [Const(np.take(data.data, idx, axis=axis), data.hint)]
    if idx.size == 0:
        raise _Unsupported("empty indices")
    flat = idx.ravel().tolist()
    runs = 1 + sum(1 for p, q in pairwise(flat) if q != p + 1)
    if runs > _MAX_GATHER_SLICES:
        return [ctx.emit("gather", data, Const(idx, f"{node.outputs[0]}:indices"), axis=axis)]
    # Runs of consecutive indices become one slice each; the pieces are concatenated.
    pieces: list[Tensor] = []
    start = prev = flat[0]
    for i in [*flat[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        pieces.append(ctx.slice_axis(data, axis, start, prev + 1))
        if i is not None:
            start = prev = i
    return [ctx.reshape(ctx.concat(pieces, axis), out_shape)]


def _index_column(ctx: _Context, indices: Tensor, j: int) -> Tensor:
    """Column j of the last axis of `indices`, dropped to the leading shape; a concat along
    that axis (an arange beside a computed index, as exporters write a row pick) gives up
    its part rather than a slice of it."""
    lead = ctx.shape(indices)[:-1]
    src, at = indices, j
    n = ctx.producer(indices)
    if n is not None and n.op == "concat" and n.attr("axis") == len(lead):
        for part in n.inputs:
            width = ctx.shape(part)[-1]
            if at < width:
                src = part
                break
            at -= width
    return ctx.reshape(ctx.slice_axis(src, len(lead), at, at + 1), lead)


def _nonnegative(ctx: _Context, t: Tensor) -> bool:
    """An index known never negative: a constant without negatives, or an argmax or an
    arange (through reshapes)."""
    if isinstance(t, Const):
        return bool((t.data >= 0).all())
    n = ctx.producer(t)
    while n is not None and n.op == "reshape":
        n = ctx.producer(n.inputs[0])
    return n is not None and n.op in ("argmax", "iota")


def _wrapped(ctx: _Context, t: Tensor, n: int, hint: str) -> Tensor:
    """Integer indices into an axis of length n, as int64 in [0, n): negative ones count
    from the end (t + n), folded for a constant, a select where the graph computes them."""
    if isinstance(t, Const):
        c = np.asarray(t.data, np.int64)
        return Const(np.where(c < 0, c + n, c), t.hint)
    if ctx.np_dtype(t) != np.int64:
        t = ctx.emit("cast", t, to="i64")
    if _nonnegative(ctx, t):
        return t
    neg = ctx.emit("lt", t, Const(np.zeros((), np.int64), "zero"))
    return ctx.emit("where", neg, ctx.add(t, Const(np.array(n, np.int64), f"{hint}:n")), t)


@_converter("GatherND")
def _gather_nd(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # One gather over the leading axes of data merged into one, at a flat index the graph
    # computes from the index columns (and, with batch_dims, the batch positions).
    data, indices = _req(node, ins, 0), _req(node, ins, 1)
    shape, ishape = ctx.shape(data), ctx.shape(indices)
    b = int(node.attr("batch_dims", 0))
    if not np.issubdtype(ctx.np_dtype(indices), np.integer):
        raise _Invalid("indices are not integers")
    if not ishape or not 0 <= b < len(ishape) or not 1 <= ishape[-1] <= len(shape) - b \
            or tuple(ishape[:b]) != tuple(shape[:b]):
        raise _Invalid(f"indices of shape {list(ishape)} (batch_dims {b}) do not fit data of "
                       f"shape {list(shape)}")
    m, lead = ishape[-1], tuple(ishape[:-1])
    out_shape = (*lead, *shape[b + m:])
    if isinstance(data, Const) and isinstance(indices, Const):
        idx = np.asarray(indices.data, np.int64)
        grid = np.indices(lead).reshape(len(lead), -1)
        cols = [grid[k] for k in range(b)] + [idx.reshape(-1, m)[:, k] for k in range(m)]
        return [Const(data.data[tuple(cols)].reshape(out_shape), data.hint)]
    flat: Tensor | None = None
    for k in range(b + m):
        if k < b:  # batch position k: an arange along lead axis k
            col: Tensor = Const(np.arange(shape[k]).reshape(
                [-1 if i == k else 1 for i in range(len(lead))]), f"{node.outputs[0]}:batch{k}")
        else:
            col = _wrapped(ctx, _index_column(ctx, indices, k - b), shape[k],
                           f"{node.outputs[0]}:dim{k}")
        flat = col if flat is None else ctx.add(
            ctx.mul(flat, Const(np.array(shape[k], np.int64), f"{node.outputs[0]}:dim{k}")), col)
    assert flat is not None
    merged = ctx.reshape(data, (math.prod(shape[:b + m]), *shape[b + m:]))
    return [ctx.emit("gather", merged, flat, axis=0)]


@_converter("Expand")
def _expand(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    target = _const_ints(_req(node, ins, 1), "the shape")
    out = tuple(int(d) for d in np.broadcast_shapes(ctx.shape(x), target))
    if isinstance(x, Const):
        return [Const(np.broadcast_to(x.data, out), x.hint)]
    if out == ctx.shape(x):
        return [x]
    return [ctx.emit("expand", x, shape=out)]


@_converter("Tile")
def _tile(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    reps = list(_const_ints(_req(node, ins, 1), "the repeats"))
    if len(reps) != len(ctx.shape(x)):
        raise _Invalid(f"repeats {reps} for a rank-{len(ctx.shape(x))} input")
    if isinstance(x, Const):
        return [Const(np.tile(x.data, reps), x.hint)]
    try:
        return [composite.tile(_prim(ctx), x, reps)]
    except ValueError as e:
        raise _Invalid(str(e)) from None


# ---- element-wise arithmetic ----------------------------------------------------------

def _binary_operands(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                     ) -> tuple[Tensor, Tensor]:
    a, b = _req(node, ins, 0), _req(node, ins, 1)
    if node.opset < 7 and node.attr("broadcast", 0) and node.attr("axis") is not None:
        # Legacy broadcasting aligns b's dims at `axis` of a instead of at the end.
        ra, rb = len(ctx.shape(a)), len(ctx.shape(b))
        axis = _norm_axis(int(node.attr("axis")), ra)
        b = ctx.reshape(b, (*ctx.shape(b), *([1] * (ra - axis - rb))))
    return a, b


@_converter("Add")
def _add(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.add(*_binary_operands(ctx, node, ins))]


@_converter("Sub")
def _sub(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.sub(*_binary_operands(ctx, node, ins))]


@_converter("Mul")
def _mul(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.mul(*_binary_operands(ctx, node, ins))]


@_converter("Div")
def _div(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    a, b = _binary_operands(ctx, node, ins)
    if not np.issubdtype(ctx.np_dtype(b), np.floating):
        if isinstance(a, Const) and isinstance(b, Const):
            raise _NotFoldable  # integer division: leave its rounding to onnx.reference
        return [_integer_div(ctx, a, b, node.outputs[0])]
    return [ctx.div(a, b)]


def _integer_div(ctx: _Context, a: Tensor, b: Tensor, hint: str) -> Tensor:
    """Integer Div (truncating toward zero, as onnxruntime and the spec's reference do) of
    values of a known small range by a known positive divisor: one lookup in a table of the
    quotients (LongCat-Flash's shifted expert ids over the experts per group)."""
    return _integer_lookup(ctx, a, b, hint, "division", "quotients",
                           lambda v, k: np.sign(v) * (np.abs(v) // k))


def _integer_lookup(ctx: _Context, a: Tensor, b: Tensor, hint: str, what: str, table_name: str,
                    f: Callable[[np.ndarray, int], np.ndarray]) -> Tensor:
    """f(a, k) for integers a of a known small range and a known positive constant k, as
    one gather from the table of f over that range."""
    d = ctx.const_data(b)
    k = int(d.ravel()[0]) if d is not None and d.size and np.all(d == d.ravel()[0]) else 0
    if k <= 0:
        raise _Unsupported(f"integer {what} by other than a known positive constant")
    if np.broadcast_shapes(ctx.shape(a), ctx.shape(b)) != ctx.shape(a):
        raise _Unsupported(f"integer {what} whose divisor widens the dividend")
    span = ctx.int_span(a)
    if span is None or span[1] - span[0] >= LOOKUP_LIMIT:
        raise _Unsupported(f"integer {what} of values not known to lie in a small range")
    lo, hi = span
    table = np.asarray(f(np.arange(lo, hi + 1, dtype=np.int64), k)).astype(ctx.np_dtype(a))
    if lo == hi:
        return Const(np.full(ctx.shape(a), table[0]), f"{hint}:{table_name}")
    at = ctx.sub(a, Const(np.asarray(lo, ctx.np_dtype(a)), f"{hint}:low")) if lo else a
    return ctx.emit("gather", Const(table, f"{hint}:{table_name}"), at, axis=0)


@_converter("Mod")
def _mod(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Of integers: Python's remainder (the divisor's sign, fmod=0) or C's (the dividend's,
    # fmod=1). torch's default exporter writes floor division so (LongCat-Flash's routing).
    a, b = _binary_operands(ctx, node, ins)
    fmod = bool(node.attr("fmod", 0))
    if not np.issubdtype(ctx.np_dtype(a), np.integer):
        raise _Unsupported("the remainder of floats")
    if isinstance(a, Const) and isinstance(b, Const):
        with np.errstate(divide="ignore", invalid="ignore"):
            return [Const(np.asarray((np.fmod if fmod else np.mod)(a.data, b.data)), a.hint)]
    return [_integer_lookup(ctx, a, b, node.outputs[0], "remainder", "remainders",
                            np.fmod if fmod else np.mod)]


@_converter("DFT")
def _dft(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Along one axis, as products with the cos and sin matrices (FNet's token mixing, as
    # torch's default exporter writes torch.fft). The last dim holds the real part, or the
    # real and imaginary parts; the result's holds both.
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2):
        raise _Invalid(f"input of shape {list(shape)} (the last dim must be 1 or 2)")
    if node.opset >= 20:
        axis_t = _opt(ins, 2)
        axis = -2 if axis_t is None else int(_const_ints(axis_t, "axis")[0])
    else:
        axis = int(node.attr("axis", 1))
    axis = _norm_axis(axis, rank)
    if axis == rank - 1:
        raise _Invalid("the transform runs along the last dim (the complex parts)")
    n = shape[axis]
    length_t = _opt(ins, 1)
    length = n if length_t is None else int(_const_ints(length_t, "dft_length")[0])
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if length < 1 or (onesided and shape[-1] == 2):
        raise _Invalid(f"dft_length {length}" if length < 1 else
                       "onesided of a complex input")
    out = length // 2 + 1 if onesided else length
    rows = min(n, length)  # a longer transform zero-pads: its extra rows multiply zeros
    cos, sin = composite.dft_matrices(rows, length, out, inverse,
                                      1.0 / length if inverse else 1.0)
    hint = node.outputs[0]
    perm = [d for d in range(rank - 1) if d != axis] + [axis]
    back = list(np.argsort(perm))

    def part(k: int) -> Tensor:  # one part, the axis last and cut to `rows`
        p = ctx.reshape(ctx.slice_axis(x, rank - 1, k, k + 1), shape[:-1])
        return ctx.slice_axis(ctx.transpose(p, perm), rank - 2, 0, rows)

    def times(t: Tensor, m: np.ndarray, tag: str) -> Tensor:
        return ctx.emit("matmul", t, Const(m, f"{hint}:{tag}"))

    re = part(0)
    real, imag = times(re, cos, "cos"), times(re, sin, "sin")
    if shape[-1] == 2:  # (a + ib)(C + iS') = (aC - bS') + i(aS' + bC)
        im = part(1)
        real, imag = ctx.sub(real, times(im, sin, "sin")), ctx.add(imag, times(im, cos, "cos"))
    parts = [ctx.transpose(t, back) for t in (real, imag)]
    return [ctx.concat([ctx.reshape(t, (*ctx.shape(t), 1)) for t in parts], rank - 1)]


@_converter("Trilu")
def _trilu(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # The lower (or upper) triangle of the last two dims, the rest zero: a select against
    # the IR's triangular mask (Lara's chunked attention decay).
    x, k_t = _req(node, ins, 0), _opt(ins, 1)
    shape = ctx.shape(x)
    if len(shape) < 2:
        raise _Invalid(f"rank {len(shape)} (Trilu needs >= 2)")
    k = 0 if k_t is None else int(_const_ints(k_t, "k")[0])
    tri = np.triu if node.attr("upper", 1) else np.tril
    if isinstance(x, Const):
        return [Const(tri(x.data, k), x.hint)]
    mask = Const(tri(np.ones(shape[-2:], np.bool_), k), f"{node.outputs[0]}:triangle")
    zero = Const(np.zeros((), ctx.np_dtype(x)), f"{node.outputs[0]}:zero")
    return [ctx.emit("where", mask, x, zero)]


@_converter("Reciprocal")
def _reciprocal(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                ) -> list[Tensor | None]:
    return [ctx.recip(_req(node, ins, 0))]


@_converter("Neg")
def _neg(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.neg(_req(node, ins, 0))]


@_converter("Sum")
def _sum(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    parts = [t for t in ins if t is not None]
    if not parts:
        raise _Invalid("no inputs")
    return [reduce(ctx.add, parts)]


@_converter("Max", "Min")
def _max_min(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    parts = [t for t in ins if t is not None]
    if not parts:
        raise _Invalid("no inputs")
    op = "maximum" if node.op_type == "Max" else "minimum"
    return [reduce(lambda a, b: ctx.emit(op, a, b), parts)]


@_converter("Abs")
def _abs(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    return [ctx.add(ctx.relu(x), ctx.relu(ctx.neg(x)))]


@_converter("Pow")
def _pow(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, e = _req(node, ins, 0), _req(node, ins, 1)
    if isinstance(x, Const) and isinstance(e, Const):
        return [Const(np.power(x.data, e.data).astype(x.data.dtype), x.hint)]
    exponent = _const_float(e, "the exponent")
    if exponent == 1.0:
        return [x]
    return [ctx.emit("pow", x, exponent=exponent)]


_UNARY_MATH = {"Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Erf": "erf", "Sin": "sin",
               "Cos": "cos", "Acos": "acos"}


@_converter(*_UNARY_MATH)
def _unary_math(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.emit(_UNARY_MATH[node.op_type], _req(node, ins, 0))]


_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt"}


@_converter(*_COMPARE)
def _compare(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.emit(_COMPARE[node.op_type], *_binary_operands(ctx, node, ins))]


def _not(ctx: _Context, c: Tensor) -> Tensor:
    """Logical not of a bool tensor, as the IR writes it: c == false."""
    if isinstance(c, Const):
        return Const(np.logical_not(c.data), c.hint)
    return ctx.emit("eq", c, Const(np.zeros((), np.bool_), "false"))


def _bools(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> tuple[Tensor, Tensor]:
    a, b = _binary_operands(ctx, node, ins)
    if ctx.np_dtype(a) != np.bool_ or ctx.np_dtype(b) != np.bool_:
        raise _Invalid("operands are not bool tensors")
    return a, b


@_converter("Not")
def _not_op(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    c = _req(node, ins, 0)
    if ctx.np_dtype(c) != np.bool_:
        raise _Invalid("the operand is not a bool tensor")
    return [_not(ctx, c)]


@_converter("And", "Or")
def _and_or(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    a, b = _bools(ctx, node, ins)
    # As selects: a & b = where(a, b, false), a | b = where(a, true, b).
    if node.op_type == "And":
        return [ctx.emit("where", a, b, Const(np.zeros((), np.bool_), "false"))]
    return [ctx.emit("where", a, Const(np.ones((), np.bool_), "true"), b)]


@_converter("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def _bitwise(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Of integers known to be 0 or 1 (masks cast from bools, CPM-Ant's): and is the
    # product, or the larger, xor a + b - 2ab.
    a, b = _binary_operands(ctx, node, ins)
    spans = (ctx.int_span(a), ctx.int_span(b))
    if not all(s is not None and 0 <= s[0] and s[1] <= 1 for s in spans):
        raise _Unsupported(f"{node.op_type} of integers not known to be 0 or 1")
    if node.op_type == "BitwiseAnd":
        return [ctx.mul(a, b)]
    if node.op_type == "BitwiseOr":
        return [ctx.emit("maximum", a, b)]
    two = Const(np.asarray(2, ctx.np_dtype(a)), f"{node.outputs[0]}:two")
    return [ctx.sub(ctx.add(a, b), ctx.mul(ctx.mul(a, b), two))]


@_converter("LessOrEqual", "GreaterOrEqual")
def _compare_or_equal(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                      ) -> list[Tensor | None]:
    op = "gt" if node.op_type == "LessOrEqual" else "lt"  # a <= b is not (a > b)
    return [_not(ctx, ctx.emit(op, *_binary_operands(ctx, node, ins)))]


@_converter("IsNaN")
def _isnan(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if not np.issubdtype(ctx.np_dtype(x), np.floating):
        raise _Invalid("IsNaN of a non-float tensor")
    return [_not(ctx, ctx.emit("eq", x, x))]  # NaN is the one value unequal to itself


@_converter("CumSum")
def _cumsum(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if node.attr("exclusive", 0) or node.attr("reverse", 0):
        raise _Unsupported("exclusive or reverse running sums")
    rank = len(ctx.shape(x))
    axis = _norm_axis(int(_const_ints(_req(node, ins, 1), "the axis")[0]), rank)
    dt = ctx.np_dtype(x)
    if dt == np.bool_:
        raise _Invalid("CumSum of a bool tensor")
    # A running sum along the last dim is a product with an upper-triangular matrix of ones.
    n = ctx.shape(x)[axis]
    swap = [*range(rank)]
    swap[axis], swap[-1] = swap[-1], swap[axis]
    y = ctx.transpose(x, swap)
    y = ctx.emit("matmul", y, Const(np.triu(np.ones((n, n), dt)), "cumsum_triangle"))
    return [ctx.transpose(y, swap)]


@_converter("GatherElements")
def _gather_elements(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                     ) -> list[Tensor | None]:
    data, idx = _req(node, ins, 0), _req(node, ins, 1)
    values = ctx.const_data(data)
    if values is not None and values.size and np.all(values == values.ravel()[0]):
        # One repeated value (BERT's buffered token-type ids): the indices do not matter.
        return [Const(np.full(ctx.shape(idx), values.ravel()[0], values.dtype),
                      f"{node.outputs[0]}:filled")]
    shape, ishape = ctx.shape(data), ctx.shape(idx)
    axis = _norm_axis(int(node.attr("axis", 0)), len(shape))
    if len(ishape) != len(shape) or any(ishape[k] > shape[k] for k in range(len(shape))
                                        if k != axis):
        raise _Invalid(f"indices of shape {list(ishape)} do not fit data of shape "
                       f"{list(shape)} (axis {axis})")
    if not np.issubdtype(ctx.np_dtype(idx), np.integer):
        raise _Invalid("indices are not integers")
    # One gather from the flattened data at offset + index * stride (Funnel's relative
    # position shifts).
    offsets, stride = composite.element_gather_offsets(shape, ishape, axis)
    n = shape[axis]
    if isinstance(idx, Const):
        k = np.asarray(idx.data, np.int64)
        if k.size and (k.min() < -n or k.max() >= n):
            raise _Invalid(f"indices out of range [-{n}, {n})")
        flat: Tensor = Const(offsets + np.where(k < 0, k + n, k) * stride,
                             f"{node.outputs[0]}:flat")
        if isinstance(data, Const):
            return [Const(data.data.reshape(-1)[flat.data], data.hint)]
    else:
        k = _wrapped(ctx, idx, n, node.outputs[0])
        flat = ctx.add(ctx.mul(k, Const(np.array(stride, np.int64), f"{node.outputs[0]}:stride")),
                       Const(offsets, f"{node.outputs[0]}:offsets"))
    return [ctx.emit("gather", ctx.reshape(data, (math.prod(shape),)), flat, axis=0)]


@_converter("ScatterND")
def _scatter_nd(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # At known indices (an in-place slice update, as exporters write `x[..., 1:] *= m`):
    # each row of the data, over its first k dims, either keeps its value or takes the
    # update that lands there, a select between the data and a gather of the updates.
    data, idx, updates = (_req(node, ins, i) for i in range(3))
    if node.attr("reduction", "none") not in ("none", b"none"):
        raise _Unsupported(f"reduction {node.attr('reduction')!r}")
    if not isinstance(idx, Const):
        raise _Unsupported("indices computed at run time")
    shape, ishape = ctx.shape(data), ctx.shape(idx)
    k = ishape[-1] if ishape else 0
    lead, rest = tuple(ishape[:-1]), tuple(shape[k:])
    if not 1 <= k <= len(shape) or tuple(ctx.shape(updates)) != lead + rest:
        raise _Invalid(f"indices {list(ishape)} and updates {list(ctx.shape(updates))} do "
                       f"not fit data of shape {list(shape)}")
    at = np.asarray(idx.data, np.int64).reshape(-1, k)
    dims = np.array(shape[:k], np.int64)
    if at.size and (np.any(at < -dims) or np.any(at >= dims)):
        raise _Invalid("indices out of range")
    rows = np.ravel_multi_index(tuple(np.where(at < 0, at + dims, at).T), tuple(shape[:k]))
    src, hit = composite.scatter_rows(math.prod(shape[:k]), rows)
    n_rows, m = math.prod(shape[:k]), at.shape[0]
    base = ctx.reshape(data, (n_rows, *rest))
    if m == 0:
        return [data]
    moved = ctx.emit("gather", ctx.reshape(updates, (m, *rest)),
                     Const(src, f"{node.outputs[0]}:src"), axis=0)
    mask = Const(hit.reshape((n_rows,) + (1,) * len(rest)), f"{node.outputs[0]}:written")
    return [ctx.reshape(ctx.emit("where", mask, moved, base), shape)]


def _scatter_known(ctx: _Context, data: Tensor, idx: Const, updates: Tensor, axis: int,
                   hint: str) -> Tensor:
    """ScatterElements at constant indices (torch's default exporter writes `select_scatter`
    and `slice_scatter`, `x[..., i] = v`, this way): every place of the data either keeps
    its value or takes the update that lands there (the last, as the spec's loop writes
    them), a select between the data and a gather of the updates. Where each position
    along the axis takes one whole row of updates (the slice writes), the gather runs
    along that axis; otherwise over the flattened tensors."""
    shape, ishape = ctx.shape(data), ctx.shape(idx)
    if len(ishape) != len(shape) or tuple(ctx.shape(updates)) != tuple(ishape) or any(
            ishape[k] > shape[k] for k in range(len(shape)) if k != axis):
        raise _Invalid(f"indices {list(ishape)} and updates {list(ctx.shape(updates))} do "
                       f"not fit data of shape {list(shape)} (axis {axis})")
    n = shape[axis]
    k = np.asarray(idx.data, np.int64)
    if k.size and (k.min() < -n or k.max() >= n):
        raise _Invalid(f"indices out of range [-{n}, {n})")
    if not k.size:
        return data
    k = np.where(k < 0, k + n, k)
    rows = np.moveaxis(k, axis, 0).reshape(ishape[axis], -1)
    if all(ishape[d] == shape[d] for d in range(len(shape)) if d != axis) and bool(
            np.all(rows == rows[:, :1])):
        src, hit = composite.scatter_rows(n, rows[:, 0])
        moved = ctx.emit("gather", updates, Const(src, f"{hint}:src"), axis=axis)
        mask = hit.reshape([n if d == axis else 1 for d in range(len(shape))])
        return ctx.emit("where", Const(mask, f"{hint}:written"), moved, data)
    offsets, stride = composite.element_gather_offsets(shape, ishape, axis)
    total = math.prod(shape)
    src, hit = composite.scatter_rows(total, (offsets + k * stride).reshape(-1))
    moved = ctx.emit("gather", ctx.reshape(updates, (k.size,)), Const(src, f"{hint}:src"),
                     axis=0)
    out = ctx.emit("where", Const(hit, f"{hint}:written"), moved,
                   ctx.reshape(data, (total,)))
    return ctx.reshape(out, shape)


def _topk_indices_along(ctx: _Context, t: Tensor, axis: int) -> bool:
    """t is a TopK's indices along `axis` (distinct along it), through casts."""
    n = ctx.producer(t)
    while n is not None and n.op == "cast":
        t, n = n.inputs[0], ctx.producer(n.inputs[0])
    return n is not None and n.op == "topk" and getattr(t, "index", 0) == 1 \
        and n.attr("axis") == axis


@_converter("ScatterElements")
def _scatter_elements(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                      ) -> list[Tensor | None]:
    # At indices the graph computes, where each place takes at most one value: one value
    # repeated (a router's group mask, `zeros.scatter_(1, top_groups, 1)`), or indices of a
    # TopK along the scattered axis (distinct). Each place compares its position with every
    # index of its row; a select keeps the data where none names it.
    data, idx, updates = (_req(node, ins, i) for i in range(3))
    if node.attr("reduction", "none") not in ("none", b"none"):
        raise _Unsupported(f"reduction {node.attr('reduction')!r}")
    shape, ishape = ctx.shape(data), ctx.shape(idx)
    axis = _norm_axis(int(node.attr("axis", 0)), len(shape))
    if isinstance(idx, Const):
        return [_scatter_known(ctx, data, idx, updates, axis, node.outputs[0])]
    if len(ishape) != len(shape) or tuple(ctx.shape(updates)) != tuple(ishape) or any(
            ishape[k] != shape[k] for k in range(len(shape)) if k != axis):
        raise _Unsupported(f"indices {list(ishape)} into data {list(shape)} (only indices as "
                           "wide as the data off the scattered axis)")
    values = ctx.const_data(updates)
    one = values is not None and values.size and np.all(values == values.ravel()[0])
    if not one and not _topk_indices_along(ctx, idx, axis):
        raise _Unsupported("values scattered at indices not known to be distinct")
    n, hint = shape[axis], node.outputs[0]
    at = ctx.reshape(_wrapped(ctx, idx, n, hint),
                     (*ishape[:axis + 1], 1, *ishape[axis + 1:]))
    ramp = np.arange(n, dtype=np.int64).reshape(
        [-1 if k == axis + 1 else 1 for k in range(len(shape) + 1)])
    hits = ctx.emit("eq", at, Const(ramp, f"{hint}:positions"))
    hit = ctx.emit("gt", ctx.emit("reduce_max", ctx.emit("cast", hits, to="i64"),
                                  axes=(axis,), keepdims=False),
                   Const(np.zeros((), np.int64), f"{hint}:zero"))
    dt = ctx.np_dtype(data)
    if one:
        fill: Tensor = Const(np.asarray(values.ravel()[0], dt), f"{hint}:value")
    else:
        moved = ctx.reshape(updates, (*ishape[:axis + 1], 1, *ishape[axis + 1:]))
        fill = ctx.emit("reduce_sum", ctx.emit("where", hits, moved,
                                                Const(np.zeros((), dt), f"{hint}:nothing")),
                        axes=(axis,), keepdims=False)
    return [ctx.emit("where", hit, fill, data)]


@_converter("Where")
def _where(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    cond, a, b = (_req(node, ins, i) for i in range(3))
    if ctx.np_dtype(cond) != np.bool_:
        raise _Invalid("the condition is not a bool tensor")
    return [ctx.emit("where", cond, a, b)]


# ---- activations ---------------------------------------------------------------------

_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}


@_converter(*_UNARY)
def _unary(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    return [ctx.emit(_UNARY[node.op_type], _req(node, ins, 0))]


@_converter("Gelu")
def _gelu(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise _Invalid(f"approximate={approximate!r}")
    return [ctx.emit("gelu", _req(node, ins, 0), approximate=approximate)]


def _clip(ctx: _Context, x: Tensor, lo: float, hi: float,
          bounds: tuple[Tensor | None, Tensor | None] = (None, None)) -> Tensor:
    """min(max(x, lo), hi) as relu (lo = 0) or maximum, then minimum, each by a scalar
    constant: the form the torch importer gives clamp and ReLU6, and the one the exporter
    writes back as a single Clip (onnxruntime fuses Clip into the convolution before it;
    written out with relus and a subtraction, a MobileNet-V2 ran 2.3x slower there). A
    bound given as a rank-0 constant of x's dtype (`bounds`) is used as it is, so that it
    keeps its initializer's name."""
    finite_lo, finite_hi = math.isfinite(lo), math.isfinite(hi)
    if finite_lo and finite_hi and lo > hi:
        raise _Unsupported(f"min {lo:g} > max {hi:g}")

    def bound(k: int, value: float, hint: str) -> Tensor:
        t = bounds[k]
        if isinstance(t, Const) and t.data.ndim == 0 and t.data.dtype == ctx.np_dtype(x):
            return t
        return ctx.scalar(value, x, hint)

    y = x
    if finite_lo:
        # relu only for floats: an integer clamp (Jamba's expert ids) is a maximum.
        y = ctx.relu(x) if lo == 0 and ctx.np_dtype(x).kind == "f" else \
            ctx.emit("maximum", x, bound(0, lo, "clip_min"))
    if finite_hi:
        y = ctx.emit("minimum", y, bound(1, hi, "clip_max"))
    return y


@_converter("Clip")
def _clip_op(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if node.opset < 11:
        lo, hi = float(node.attr("min", -math.inf)), float(node.attr("max", math.inf))
        return [_clip(ctx, x, lo, hi)]
    lo_t, hi_t = _opt(ins, 1), _opt(ins, 2)
    lo = -math.inf if lo_t is None else _const_float(lo_t, "min")
    hi = math.inf if hi_t is None else _const_float(hi_t, "max")
    return [_clip(ctx, x, lo, hi, (lo_t, hi_t))]


@_converter("LeakyRelu")
def _leaky_relu(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    alpha = float(node.attr("alpha", 0.01))
    # relu(x) - alpha * relu(-x)
    return [ctx.add(ctx.relu(x), ctx.scale(ctx.relu(ctx.neg(x)), -alpha))]


@_converter("PRelu")
def _prelu(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, slope = _req(node, ins, 0), _req(node, ins, 1)
    return [ctx.add(ctx.relu(x), ctx.mul(ctx.relu(ctx.neg(x)), ctx.neg(slope)))]


def _prim(ctx: _Context) -> Prim[Tensor]:
    """This importer's ops for `superopt.importers.composite`."""
    def scalar_or(x: Tensor, v: Tensor | float) -> Tensor:
        return ctx.scalar(v, x, f"c_{v:g}") if isinstance(v, float | int) else v

    def unary(op: str, x: Tensor) -> Tensor:
        return ctx.relu(x) if op == "relu" else ctx.neg(x) if op == "neg" else ctx.emit(op, x)
    return Prim[Tensor](
        unary=unary, add=lambda a, b: ctx.add(a, scalar_or(a, b)),
        mul=lambda a, b: ctx.mul(a, scalar_or(a, b)),
        minimum=lambda x, v: ctx.emit("minimum", x, ctx.scalar(v, x, f"c_{v:g}")),
        reduce=lambda op, x, axes, keep: ctx.emit(op, x, axes=axes, keepdims=keep),
        shape=ctx.shape, reshape=ctx.reshape, transpose=ctx.transpose,
        expand=lambda x, shape: ctx.emit("expand", x, shape=shape),
        matmul=lambda a, b: ctx.emit("matmul", a, b))


@_converter("LogSoftmax")
def _log_softmax(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                 ) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    if node.opset >= 13:
        return [composite.log_softmax(_prim(ctx), x, _norm_axis(int(node.attr("axis", -1)),
                                                                  len(shape)))]
    # Before opset 13: over the input flattened to 2-D at `axis`.
    axis = _norm_axis(int(node.attr("axis", 1)), len(shape))
    flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return [ctx.reshape(composite.log_softmax(_prim(ctx), flat, 1), shape)]


@_converter("Elu", "Selu", "Celu")
def _elu(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if node.op_type == "Selu":
        return [composite.elu(_prim(ctx), x, float(node.attr("alpha", composite.SELU_ALPHA)),
                              float(node.attr("gamma", composite.SELU_SCALE)))]
    alpha = float(node.attr("alpha", 1.0))
    return [composite.elu(_prim(ctx), x, alpha,
                          inner=alpha if node.op_type == "Celu" else 1.0)]


@_converter("Softplus", "Mish")
def _softplus(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    fn = composite.mish if node.op_type == "Mish" else composite.softplus
    return [fn(_prim(ctx), x)]


@_converter("DepthToSpace", "SpaceToDepth")
def _depth_to_space(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                    ) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if len(ctx.shape(x)) != 4:
        raise _Invalid(f"input of rank {len(ctx.shape(x))} (needs N, C, H, W)")
    block = node.attr("blocksize")
    if block is None or int(block) < 1:
        raise _Invalid("no positive blocksize attribute")
    try:
        if node.op_type == "DepthToSpace":
            return [composite.depth_to_space(_prim(ctx), x, int(block),
                                              str(node.attr("mode", "DCR")))]
        return [composite.space_to_depth(_prim(ctx), x, int(block))]
    except ValueError as e:
        raise _Invalid(str(e)) from None


@_converter("HardSigmoid", "HardSwish")
def _hard_sigmoid(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    swish = node.op_type == "HardSwish"
    alpha = 1 / 6 if swish else float(node.attr("alpha", 0.2))
    beta = 0.5 if swish else float(node.attr("beta", 0.5))
    y = _clip(ctx, ctx.add(ctx.scale(x, alpha), ctx.scalar(beta, x, "hard_beta")), 0.0, 1.0)
    return [ctx.mul(x, y) if swish else y]


# ---- linear algebra ------------------------------------------------------------------

@_converter("MatMul")
def _matmul(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    a, b = _req(node, ins, 0), _req(node, ins, 1)
    if isinstance(a, Const) and isinstance(b, Const):
        return [Const(np.matmul(a.data, b.data), a.hint)]
    sa, sb = ctx.shape(a), ctx.shape(b)
    if not sa or not sb:
        raise _Invalid("matmul of a scalar")
    # numpy's 1-D rules: a vector operand gains a unit dim that the result loses again.
    if len(sa) >= 3 and len(sa) == len(sb):
        folded = ctx.fold_attention(a, b)
        if folded is not None:
            return [folded]
    a2 = ctx.reshape(a, (1, sa[0])) if len(sa) == 1 else a
    b2 = ctx.reshape(b, (sb[0], 1)) if len(sb) == 1 else b
    y: Tensor = ctx.emit("matmul", a2, b2)
    out = list(ctx.shape(y))
    if len(sb) == 1:
        out.pop(-1)
    if len(sa) == 1:
        out.pop(-2 if len(sb) > 1 else -1)
    return [ctx.reshape(y, out)]


@_converter("Gemm")
def _gemm(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    a, b, c = _req(node, ins, 0), _req(node, ins, 1), _opt(ins, 2)
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if node.attr("transA", 0):
        a = ctx.transpose(a, (1, 0))
    if node.attr("transB", 0):
        b = ctx.transpose(b, (1, 0))
    if isinstance(a, Const) and isinstance(b, Const):
        raise _NotFoldable
    y = ctx.scale(ctx.emit("matmul", a, b), alpha)
    if c is not None and beta != 0.0:
        y = ctx.add(y, ctx.scale(c, beta))
    return [y]


# ---- convolution and pooling ---------------------------------------------------------

def _spatial(node: OnnxNode, name: str, n: int, default: int) -> list[int]:
    v = node.attr(name)
    return [default] * n if v is None else [int(x) for x in v]


def _auto_pads(node: OnnxNode, sizes: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """ONNX pads [begin..., end...] after resolving `auto_pad`."""
    n = len(sizes)
    mode = node.attr("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        pads = _spatial(node, "pads", 2 * n, 0)
        if len(pads) != 2 * n:
            raise _Invalid(f"pads {pads} for {n} spatial dims")
        return pads
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise _Invalid(f"auto_pad={mode!r}")
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    return begin + end


def _ir_padding(pads: Sequence[int], hw: tuple[int, int], kernel: tuple[int, int],
                stride: tuple[int, int], dilation: tuple[int, int]
                ) -> str | tuple[int, int, int, int]:
    """IR padding for ONNX 2-D pads: 'valid' or 'same' when they match, else explicit."""
    explicit = (pads[0], pads[2], pads[1], pads[3])  # (top, bottom, left, right)
    if explicit == (0, 0, 0, 0):
        return "valid"
    if explicit == kernels.resolve_pads("same", hw, kernel, stride, dilation):
        return "same"
    return explicit


def _lift_1d(ctx: _Context, x: Tensor, what: str) -> tuple[Tensor, bool]:
    """Run 1-D convolutions and pools as 2-D ones over a unit height."""
    shape = ctx.shape(x)
    if len(shape) == 3:
        return ctx.reshape(x, (shape[0], shape[1], 1, shape[2])), True
    if len(shape) != 4:
        raise _Unsupported(f"{len(shape) - 2}-D {what}")
    return x, False


def _bias_and_unlift(ctx: _Context, y: Tensor, bias: Tensor | None, lifted: bool) -> Tensor:
    """A convolution's per-channel bias added, and a 1-D one's unit height dropped again."""
    if bias is not None:
        y = ctx.add(y, ctx.reshape(bias, (ctx.shape(bias)[0], 1, 1)))
    if lifted:
        s = ctx.shape(y)
        y = ctx.reshape(y, (s[0], s[1], s[3]))
    return y


@_converter("Conv")
def _conv(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, w, bias = _req(node, ins, 0), _req(node, ins, 1), _opt(ins, 2)
    x, lifted = _lift_1d(ctx, x, "convolution")
    n = 1 if lifted else 2
    wshape = ctx.shape(w)
    kernel = [int(k) for k in wshape[2:]]
    if len(kernel) != n:
        raise _Invalid(f"weight shape {list(wshape)} for a {n}-D convolution")
    strides = _spatial(node, "strides", n, 1)
    dilations = _spatial(node, "dilations", n, 1)
    xshape = ctx.shape(x)
    pads = _auto_pads(node, xshape[4 - n:], kernel, strides, dilations)
    if lifted:
        w = ctx.reshape(w, (wshape[0], wshape[1], 1, wshape[2]))
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
        pads = [0, pads[0], 0, pads[1]]
    stride, dilation = (strides[0], strides[1]), (dilations[0], dilations[1])
    padding = _ir_padding(pads, (xshape[2], xshape[3]), (kernel[0], kernel[1]), stride, dilation)
    y: Tensor = ctx.emit("conv2d", x, w, stride=stride, padding=padding, dilation=dilation,
                         groups=int(node.attr("group", 1)))
    return [_bias_and_unlift(ctx, y, bias, lifted)]


@_converter("Einsum")
def _einsum(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Transposes, reshapes, sums and batched matmuls (`superopt.importers.einsum`).
    equation = node.attr("equation")
    if equation is None:
        raise _Invalid("no equation attribute")
    operands = [t for t in ins if t is not None]
    try:
        return [einsum(str(equation), operands, [ctx.shape(t) for t in operands],
                       _prim(ctx))]
    except ValueError as e:
        raise _Unsupported(str(e)) from None


@_converter("ConvTranspose")
def _conv_transpose(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                    ) -> list[Tensor | None]:
    x, w, bias = _req(node, ins, 0), _req(node, ins, 1), _opt(ins, 2)
    kernel_w = _const(w, "the kernel")
    x, lifted = _lift_1d(ctx, x, "transposed convolution")
    n = 1 if lifted else 2
    if kernel_w.ndim != n + 2:
        raise _Invalid(f"weight shape {list(kernel_w.shape)} for a {n}-D transposed "
                       "convolution")
    kernel = [int(k) for k in kernel_w.shape[2:]]
    strides = _spatial(node, "strides", n, 1)
    dilations = _spatial(node, "dilations", n, 1)
    extra = _spatial(node, "output_padding", n, 0)
    sizes = ctx.shape(x)[4 - n:]
    mode = node.attr("auto_pad", "NOTSET")
    wanted = node.attr("output_shape")
    if wanted is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        # The spec: the padding that gives output_shape (SAME: input x stride), split with
        # the odd one at the end for SAME_UPPER, at the start otherwise.
        want = [int(v) for v in wanted][-n:] if wanted is not None else \
            [s * st for s, st in zip(sizes, strides, strict=True)]
        total = [st * (s - 1) + e + (k - 1) * d + 1 - o for s, st, e, k, d, o in
                 zip(sizes, strides, extra, kernel, dilations, want, strict=True)]
        if min(total) < 0:
            raise _Invalid(f"output_shape {want} beyond the convolution's reach")
        low = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in total]
        pads = low + [t - lo for t, lo in zip(total, low, strict=True)]
    elif mode == "VALID":
        pads = [0] * (2 * n)
    elif mode in ("NOTSET", ""):
        pads = _spatial(node, "pads", 2 * n, 0)
        if len(pads) != 2 * n:
            raise _Invalid(f"pads {pads} for {n} spatial dims")
    else:
        raise _Invalid(f"auto_pad={mode!r}")
    if lifted:
        kernel_w = kernel_w.reshape(*kernel_w.shape[:2], 1, kernel_w.shape[2])
        strides, dilations, extra = [1, *strides], [1, *dilations], [0, *extra]
        pads = [0, pads[0], 0, pads[1]]
    try:
        y: Tensor = conv_transpose2d(
            ctx.b, ctx.value(x), kernel_w,
            lambda a, hint: ctx.value(Const(a, f"{node.outputs[0]}:{hint}")), strides,
            (pads[0], pads[2], pads[1], pads[3]), extra, dilations, int(node.attr("group", 1)))
    except ValueError as e:
        raise _Invalid(str(e)) from None
    return [_bias_and_unlift(ctx, y, bias, lifted)]


def _window_counts(size: int, k: int, s: int, out: int, lo: int, hi: int) -> tuple[np.ndarray,
                                                                                    np.ndarray]:
    """Per output position: cells inside the input, and inside the explicitly padded input."""
    start = np.arange(out) * s - lo
    inside = np.minimum(start + k, size) - np.maximum(start, 0)
    padded = np.minimum(start + k, size + hi) - np.maximum(start, -lo)
    return np.maximum(inside, 0), np.maximum(padded, 0)


@_converter("MaxPool", "AveragePool")
def _pool(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, lifted = _lift_1d(ctx, _req(node, ins, 0), "pooling")
    n = 1 if lifted else 2
    kernel = [int(k) for k in _req_attr(node, "kernel_shape")]
    if len(kernel) != n:
        raise _Invalid(f"kernel_shape {kernel} for a {n}-D pool")
    strides = _spatial(node, "strides", n, 1)
    if any(d != 1 for d in _spatial(node, "dilations", n, 1)):
        raise _Unsupported("dilated pooling")
    xshape = ctx.shape(x)
    sizes = list(xshape[4 - n:])
    pads = _auto_pads(node, sizes, kernel, strides, [1] * n)
    if lifted:
        kernel, strides, sizes = [1, *kernel], [1, *strides], [1, *sizes]
        pads = [0, pads[0], 0, pads[1]]
    # ceil_mode: extra cells at the end make the floor formula give the ceiled size; a
    # window may not start in the end padding (as ONNX and PyTorch define it).
    extra = [0, 0]
    if node.attr("ceil_mode", 0) and node.attr("auto_pad", "NOTSET") in ("NOTSET", "", "VALID"):
        for i in range(2):
            span = sizes[i] + pads[i] + pads[2 + i] - kernel[i]
            out = -(-span // strides[i]) + 1
            if (out - 1) * strides[i] >= sizes[i] + pads[i]:
                out -= 1
            extra[i] = max(0, (out - 1) * strides[i] - span)
    ir_pads = [pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1]]
    outs = [(sizes[i] + ir_pads[i] + ir_pads[2 + i] - kernel[i]) // strides[i] + 1
            for i in range(2)]
    if node.op_type == "AveragePool" and not lifted and not any(pads) and outs == [1, 1] \
            and kernel[0] >= sizes[0] and kernel[1] >= sizes[1] and kernel != sizes:
        # One window wider than the map (EfficientNet's pooler: a kernel of 1280 with
        # ceil_mode over a map of a few cells; added cells never count): its mean. (A
        # window the map's size stays a pool: the exporter writes those.)
        return [ctx.emit("reduce_mean", x, axes=(2, 3), keepdims=True), None]
    kernel2, stride2 = (kernel[0], kernel[1]), (strides[0], strides[1])
    padding = _ir_padding(ir_pads, (sizes[0], sizes[1]), kernel2, stride2, (1, 1))
    y: Tensor
    if node.op_type == "MaxPool":
        y = ctx.emit("pool2d_max", x, kernel=kernel2, stride=stride2, padding=padding)
    else:
        include_pad = bool(node.attr("count_include_pad", 0))
        if not include_pad or extra == [0, 0]:
            y = ctx.emit("pool2d_avg", x, kernel=kernel2, stride=stride2, padding=padding,
                         count_include_pad=include_pad)
        else:
            # Cells added for ceil_mode never count, the model's own pads do: divide by the
            # valid cells, then rescale by valid / (cells inside the padded input).
            y = ctx.emit("pool2d_avg", x, kernel=kernel2, stride=stride2, padding=padding,
                         count_include_pad=False)
            oh, ow = ctx.shape(y)[2:]
            vh, ph = _window_counts(sizes[0], kernel[0], strides[0], oh, pads[0], pads[2])
            vw, pw = _window_counts(sizes[1], kernel[1], strides[1], ow, pads[1], pads[3])
            ratio = np.outer(vh, vw) / np.outer(ph, pw)
            y = ctx.mul(y, Const(ratio.astype(ctx.np_dtype(x)), f"{node.outputs[0]}:pad_ratio"))
    if lifted:
        s = ctx.shape(y)
        y = ctx.reshape(y, (s[0], s[1], s[3]))
    return [y, None]  # MaxPool's argmax indices have no IR counterpart


@_converter("GlobalAveragePool")
def _global_avg(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    rank = len(ctx.shape(x))
    return [ctx.emit("reduce_mean", x, axes=tuple(range(2, rank)), keepdims=True)]


@_converter("GlobalMaxPool")
def _global_max(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, lifted = _lift_1d(ctx, _req(node, ins, 0), "global pooling")
    s = ctx.shape(x)
    y = ctx.emit("pool2d_max", x, kernel=(s[2], s[3]), stride=(1, 1), padding="valid")
    return [ctx.reshape(y, (s[0], s[1], 1)) if lifted else y]


@_converter("Attention")
def _attention_op(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                  ) -> list[Tensor | None]:
    # Opset 23's scaled dot-product attention (torch's default exporter writes SDPA so from
    # opset 23): the IR's `attention` when unmasked (or causal); with a mask or a soft cap,
    # written out as products, the mask, a softmax and a product. A past key/value cache
    # (a decoder exported for generation) is concatenated before this step's keys and
    # values, and the whole is the `present` outputs.
    q, k, v = (_req(node, ins, i) for i in range(3))
    mask, past = _opt(ins, 3), (_opt(ins, 4), _opt(ins, 5))
    if (past[0] is None) != (past[1] is None):
        raise _Invalid("a past key without a past value, or the other way")
    if len(node.outputs) > 3 and node.outputs[3]:
        raise _Unsupported("the scores as an output (qk_matmul_output)")
    rank = len(ctx.shape(q))
    if rank == 3:  # (batch, length, heads * head_dim): heads from the attributes
        heads = (int(node.attr("q_num_heads", 0)), int(node.attr("kv_num_heads", 0)))
        if min(heads) < 1:
            raise _Invalid("3-D inputs without q_num_heads and kv_num_heads")

        def split(t: Tensor, h: int) -> Tensor:
            b, n, d = ctx.shape(t)
            if d % h:
                raise _Invalid(f"hidden size {d} is not a multiple of {h} heads")
            return ctx.transpose(ctx.reshape(t, (b, n, h, d // h)), (0, 2, 1, 3))

        q, k, v = split(q, heads[0]), split(k, heads[1]), split(v, heads[1])
    elif rank != 4:
        raise _Invalid(f"rank {rank} inputs (3 or 4)")
    cached = 0  # keys in the cache: a causal query sees them all (onnxruntime aligns so)
    if past[0] is not None and past[1] is not None:  # the cache, then this step's (4-D)
        cached = ctx.shape(past[0])[2]
        k, v = ctx.concat([past[0], k], 2), ctx.concat([past[1], v], 2)
    present: list[Tensor | None] = [k, v]  # all the keys and values, 4-D
    (b, qh, length, dim), (_, kvh, keys, _) = ctx.shape(q), ctx.shape(k)
    if kvh < 1 or qh % kvh:
        raise _Invalid(f"{qh} query heads over {kvh} key/value heads")
    scale = float(node.attr("scale", 0.0)) or 1.0 / math.sqrt(dim)
    causal, softcap = bool(node.attr("is_causal", 0)), float(node.attr("softcap", 0.0))
    known = ctx.const_data(mask)
    if known is not None and known.ndim >= 2 and known.shape[-2:] == (length, keys):
        # A mask built from constants (transformers passes its causal mask, or all-true
        # without padding): nothing, or the causal triangle, as the IR's attention says it.
        keep = known if known.dtype == np.bool_ else np.isfinite(known)
        finite = known.dtype == np.bool_ or not np.any(known[np.isfinite(known)])
        tri = np.tril(np.ones((length, keys), np.bool_))
        if finite and np.all(keep):
            mask = None
        elif finite and length == keys and not causal and np.all(keep == tri):
            mask, causal = None, True
    if mask is None and softcap == 0.0 and (not causal or length == keys):
        y = ctx.emit("attention", q, k, v, scale=scale, causal=causal)
    else:
        if qh != kvh:  # each key/value head serves qh / kvh consecutive query heads
            def widen(t: Tensor) -> Tensor:
                sh = ctx.shape(t)
                t = ctx.emit("expand", ctx.reshape(t, (sh[0], kvh, 1, *sh[2:])),
                             shape=(sh[0], kvh, qh // kvh, *sh[2:]))
                return ctx.reshape(t, (sh[0], qh, *sh[2:]))
            k, v = widen(k), widen(v)
        hint = node.outputs[0]
        scores = ctx.mul(ctx.emit("matmul", q, ctx.transpose(k, (0, 1, 3, 2))),
                         Const(np.asarray(scale, ctx.np_dtype(q)), f"{hint}:scale"))
        if softcap > 0.0:  # softcap * tanh(scores / softcap)
            cap = Const(np.asarray(softcap, ctx.np_dtype(q)), f"{hint}:softcap")
            inv = Const(np.asarray(1.0 / softcap, ctx.np_dtype(q)), f"{hint}:1/softcap")
            scores = ctx.mul(ctx.emit("tanh", ctx.mul(scores, inv)), cap)
        low = Const(np.asarray(-np.inf, ctx.np_dtype(q)), f"{hint}:masked")
        if causal:  # top-left aligned (torch's is_causal), shifted past a cache
            tri = Const(np.tril(np.ones((length, keys), np.bool_), cached), f"{hint}:causal")
            scores = ctx.emit("where", tri, scores, low)
        if mask is not None:
            if ctx.np_dtype(mask) == np.bool_:
                scores = ctx.emit("where", mask, scores, low)
            else:
                scores = ctx.add(scores, mask)
        y = ctx.emit("matmul", ctx.emit("softmax", scores, axis=3), v)
    if rank == 3:
        y = ctx.transpose(y, (0, 2, 1, 3))
        y = ctx.reshape(y, (b, length, qh * ctx.shape(y)[-1]))
    return [y, *present][:len(node.outputs)]


# ---- normalisation, softmax, reductions ----------------------------------------------

@_converter("BatchNormalization")
def _batch_norm(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    params = [_req(node, ins, i) for i in range(1, 5)]
    if node.attr("training_mode", 0):
        raise _Unsupported("training_mode=1")
    channels = ctx.shape(x)[1] if len(ctx.shape(x)) >= 2 else -1
    params = [ctx.reshape(p, (channels,)) if isinstance(p, Const) and p.data.size == channels
              else p for p in params]
    if any(ctx.shape(p) != (channels,) for p in params):
        raise _Unsupported("per-element (non-spatial) parameters")
    y = ctx.emit("batch_norm", x, *params, eps=float(node.attr("epsilon", 1e-5)))
    return [y] + [None] * (len(node.outputs) - 1)


@_converter("LRN")
def _lrn(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    if len(ctx.shape(x)) != 4:
        raise _Unsupported(f"LRN over a rank-{len(ctx.shape(x))} tensor")
    return [ctx.emit("lrn", x, size=int(_req_attr(node, "size")),
                     alpha=float(node.attr("alpha", 1e-4)), beta=float(node.attr("beta", 0.75)),
                     bias=float(node.attr("bias", 1.0)))]


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


@_converter("Softmax")
def _softmax(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    rank = len(shape)
    if node.opset >= 13:
        axis = _norm_axis(int(node.attr("axis", -1)), rank)
        if isinstance(x, Const):
            return [Const(_np_softmax(x.data, axis), x.hint)]
        return [ctx.emit("softmax", x, axis=axis)]
    # Before opset 13 the input is coerced to 2-D at `axis` and normalised over the second dim.
    axis = _norm_axis(int(node.attr("axis", 1)), rank)
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    if isinstance(x, Const):
        return [Const(_np_softmax(x.data.reshape(flat), 1).reshape(shape), x.hint)]
    if axis == rank - 1:
        return [ctx.emit("softmax", x, axis=axis)]
    y = ctx.emit("softmax", ctx.reshape(x, flat), axis=1)
    return [ctx.reshape(y, shape)]


@_converter("LayerNormalization")
def _layer_norm(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x, scale, bias = _req(node, ins, 0), _req(node, ins, 1), _opt(ins, 2)
    shape = ctx.shape(x)
    axis = _norm_axis(int(node.attr("axis", -1)), len(shape))
    norm = shape[axis:]

    def fit(t: Tensor, what: str) -> Tensor:
        if ctx.shape(t) == norm:
            return t
        if isinstance(t, Const):
            return Const(np.broadcast_to(t.data, norm), t.hint)
        raise _Unsupported(f"{what} of shape {list(ctx.shape(t))} (needs {list(norm)})")

    gamma = fit(scale, "scale")
    beta = fit(bias, "bias") if bias is not None else \
        Const(np.zeros(norm, ctx.np_dtype(x)), f"{node.outputs[0]}:zero_bias")
    y = ctx.emit("layer_norm", x, gamma, beta, axis=axis, eps=float(node.attr("epsilon", 1e-5)))
    return [y] + [None] * (len(node.outputs) - 1)


_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}


@_converter(*_REDUCE)
def _reduce(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    # Axes became an input in opset 13 for ReduceSum and 18 for the others.
    axes = _axes_input_or_attr(node, ins, 1)
    if not axes and node.attr("noop_with_empty_axes", 0):
        return [x]
    return [ctx.emit(_REDUCE[node.op_type], x, axes=tuple(axes or ()),
                     keepdims=bool(node.attr("keepdims", 1)))]


def _reduce_axes(node: OnnxNode, ins: list[Tensor | None]) -> tuple[int, ...] | None:
    """A reduction's axes; None for "no reduction" (noop_with_empty_axes, no axes)."""
    axes = _axes_input_or_attr(node, ins, 1)
    if not axes and node.attr("noop_with_empty_axes", 0):
        return None
    return tuple(axes or ())


@_converter("ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceMin")
def _reduce_composed(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                     ) -> list[Tensor | None]:
    # Written with the IR's sums and maxima (ConvNeXt-V2's global response norm is a
    # ReduceL2): sum(x*x), sqrt(sum(x*x)), sum(|x|), -max(-x).
    x = _req(node, ins, 0)
    axes = _reduce_axes(node, ins)
    keep = bool(node.attr("keepdims", 1))
    # No axes with noop_with_empty_axes: each element reduced alone (|x|, x*x), as
    # onnxruntime and onnx's reference evaluator compute it.
    if node.op_type == "ReduceMin":
        return [x if axes is None else
                ctx.neg(ctx.emit("reduce_max", ctx.neg(x), axes=axes, keepdims=keep))]
    if node.op_type == "ReduceL1":
        terms = ctx.add(ctx.relu(x), ctx.relu(ctx.neg(x)))
    else:
        terms = ctx.mul(x, x)
    total = terms if axes is None else ctx.emit("reduce_sum", terms, axes=axes, keepdims=keep)
    return [ctx.emit("sqrt", total) if node.op_type == "ReduceL2" else total]


@_converter("ReduceLogSumExp", "ReduceLogSum")
def _reduce_log(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # log(sum(x)), and log(sum(exp(x))) shifted by the maximum so that no exp overflows
    # (Granite's sliding-window attention sinks).
    x = _req(node, ins, 0)
    axes = _reduce_axes(node, ins)
    keep = bool(node.attr("keepdims", 1))
    if node.op_type == "ReduceLogSum":
        total = x if axes is None else ctx.emit("reduce_sum", x, axes=axes, keepdims=keep)
        return [ctx.emit("log", total)]
    if axes is None:  # each element alone: log(exp(x)) = x
        return [x]
    top = ctx.emit("reduce_max", x, axes=axes, keepdims=True)
    shifted = ctx.emit("exp", ctx.emit("sub", x, top))
    y = ctx.add(ctx.emit("log", ctx.emit("reduce_sum", shifted, axes=axes, keepdims=True)), top)
    if keep:
        return [y]
    rank = len(ctx.shape(x))
    dropped = {a % rank for a in axes} if axes else set(range(rank))
    return [ctx.reshape(y, tuple(n for k, n in enumerate(ctx.shape(x)) if k not in dropped))]


@_converter("ArgMax", "ArgMin")
def _argmax(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axis, keep = int(node.attr("axis", 0)), bool(node.attr("keepdims", 1))
    if not shape or not -len(shape) <= axis < len(shape):
        raise _Invalid(f"axis {axis} out of range for an input of shape {list(shape)}")
    if node.attr("select_last_index", 0):
        raise _Unsupported(f"{node.op_type} with select_last_index=1 (the IR's argmax "
                           "returns the first extreme index)")
    least = node.op_type == "ArgMin"
    if isinstance(x, Const):
        fn = np.argmin if least else np.argmax
        return [Const(fn(x.data, axis=axis, keepdims=keep).astype(np.int64), x.hint)]
    if least:  # the first least of x is the first greatest of -x (0 - x for integers)
        x = ctx.neg(x) if ctx.np_dtype(x).kind == "f" else \
            ctx.sub(Const(np.zeros((), ctx.np_dtype(x)), f"{node.outputs[0]}:zero"), x)
    return [ctx.emit("argmax", x, axes=(axis,), keepdims=keep)]


@_converter("TopK")
def _topk(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    axis = _norm_axis(int(node.attr("axis", -1)), len(shape))
    k = int(node.attr("k")) if node.opset < 10 else _const_ints(_req(node, ins, 1), "K")[0]
    largest = bool(node.attr("largest", 1))
    if not 1 <= k <= shape[axis]:
        raise _Invalid(f"K={k} for an axis of length {shape[axis]}")
    # sorted=0 leaves the order to the runtime: in order is one of the orders allowed.
    if isinstance(x, Const):
        from superopt.ir.ops.reduce import topk_ref

        vals, idx = topk_ref(x.data, k, axis, largest)
        return [Const(vals.astype(x.data.dtype), x.hint), Const(idx, f"{x.hint}:indices")]
    vals, idx = ctx.emit_multi("topk", x, k=k, axis=axis, largest=largest)
    return [vals, idx]


def _unit_norm(ctx: _Context, x: Tensor, axis: int, eps: float, hint: str) -> Tensor:
    """layer_norm of x over its dims from `axis` on, unit scale and zero bias."""
    norm, dt = ctx.shape(x)[axis:], ctx.np_dtype(x)
    return ctx.emit("layer_norm", x, Const(np.ones(norm, dt), f"{hint}:one"),
                    Const(np.zeros(norm, dt), f"{hint}:zero"), axis=axis, eps=eps)


def _channel_affine(ctx: _Context, y: Tensor, scale: Tensor, bias: Tensor) -> Tensor:
    """y * scale + bias with scale and bias per channel (dim 1) of y; a constant scale of
    ones or bias of zeros is left out."""
    per_channel = (ctx.shape(y)[1],) + (1,) * (len(ctx.shape(y)) - 2)
    for t, what in ((scale, "scale"), (bias, "bias")):
        if ctx.shape(t) != per_channel[:1]:
            raise _Invalid(f"{what} of shape {list(ctx.shape(t))} (needs "
                           f"[{per_channel[0]}], one per channel)")
    if not (isinstance(scale, Const) and np.all(scale.data == 1)):
        y = ctx.mul(y, ctx.reshape(scale, per_channel))
    if not (isinstance(bias, Const) and np.all(bias.data == 0)):
        y = ctx.add(y, ctx.reshape(bias, per_channel))
    return y


@_converter("InstanceNormalization")
def _instance_norm(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                   ) -> list[Tensor | None]:
    # Each (sample, channel) normalised over its spatial dims: a layer norm from dim 2 on
    # (torch writes GroupNorm(1, C) as this on a (N, 1, C*H*W) view), then the channels'
    # scale and bias.
    x, scale, bias = _req(node, ins, 0), _req(node, ins, 1), _req(node, ins, 2)
    if len(ctx.shape(x)) < 3:
        raise _Invalid(f"input of rank {len(ctx.shape(x))} (needs N, C and a spatial dim)")
    y = _unit_norm(ctx, x, 2, float(node.attr("epsilon", 1e-5)), node.outputs[0])
    return [_channel_affine(ctx, y, scale, bias)]


@_converter("GroupNormalization")
def _group_norm(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                ) -> list[Tensor | None]:
    x, scale, bias = _req(node, ins, 0), _req(node, ins, 1), _req(node, ins, 2)
    shape = ctx.shape(x)
    groups = node.attr("num_groups")
    if groups is None:
        raise _Invalid("no num_groups attribute")
    groups = int(groups)
    if len(shape) < 3 or groups < 1 or shape[1] % groups:
        raise _Invalid(f"{groups} groups for input of shape {list(shape)} (the channels, "
                       "dim 1, must split into them)")
    if node.opset < 21:
        # Opset 18's scale and bias are per group: each group's value for its channels.
        per = shape[1] // groups
        for t in (scale, bias):
            if ctx.shape(t) != (groups,) or not isinstance(t, Const):
                raise _Unsupported(f"scale and bias of opset {node.opset} must be constants "
                                   f"of shape [{groups}]")
        scale, bias = (Const(np.repeat(_const(t, "scale"), per), "group_affine")
                       for t in (scale, bias))
    view = ctx.reshape(x, (shape[0], groups, int(np.prod(shape[1:])) // groups))
    y = _unit_norm(ctx, view, 2, float(node.attr("epsilon", 1e-5)), node.outputs[0])
    return [_channel_affine(ctx, ctx.reshape(y, shape), scale, bias)]


def _run_resize(node: OnnxNode, x: np.ndarray, scales: Sequence[float] | None,
                sizes: Sequence[int]) -> np.ndarray:
    """The Resize / Upsample node itself (its attributes, the given scales, or sizes when
    scales is None) on `x`, in onnxruntime (onnx's reference evaluator, which loops in
    Python, when that is missing)."""
    from onnx import TensorProto, helper

    x = x.astype(np.float32)
    inits = []
    if node.op_type == "Upsample" and node.opset < 9:
        names = ["x"]
        attrs = {**node.attrs, "scales": list(scales or [])}
    else:
        attrs = {k: v for k, v in node.attrs.items() if k != "axes"}
        if scales is not None:
            names = ["x", "scales"] if node.op_type == "Upsample" or node.opset == 10 else \
                ["x", "", "scales"]
            inits = [helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)],
                                        list(scales))]
        else:
            names = ["x", "", "", "sizes"]
            inits = [helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], list(sizes))]
    graph = helper.make_graph(
        [helper.make_node(node.op_type, names, ["y"], **attrs)], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)])
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        return np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # a refusal is reported as this node's problem, not logged
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


@_converter("Resize", "Upsample")
def _resize(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Separable and linear in x for every mode: per resized axis, gathers of the input
    # times the runtime's own weights (`superopt.importers.resample`).
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    rank = len(shape)
    if rank < 3:
        raise _Unsupported(f"resize of a rank-{rank} tensor (needs N, C and spatial dims)")
    mode = node.attr("coordinate_transformation_mode", "half_pixel")
    if mode == "tf_crop_and_resize":
        raise _Unsupported("coordinate_transformation_mode 'tf_crop_and_resize'")
    if node.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise _Unsupported(f"keep_aspect_ratio_policy "
                           f"{node.attr('keep_aspect_ratio_policy')!r} (only 'stretch')")
    scales: list[float] | None = None
    sizes: list[int] | None = None
    if node.op_type == "Upsample" and node.opset < 9:
        scales = [float(s) for s in node.attr("scales") or []]
    elif node.op_type == "Upsample" or node.opset == 10:
        scales = [float(s) for s in _const(_req(node, ins, 1), "scales")]
    else:
        given = _opt(ins, 2)
        if given is not None and _const(given, "scales").size:
            scales = [float(s) for s in _const(given, "scales")]
        else:
            sizes = [int(s) for s in _const(_req(node, ins, 3), "sizes")]
    axes = node.attr("axes")
    if axes is not None:  # opset 18: scales or sizes of the listed axes only
        axes = [_norm_axis(int(a), rank) for a in axes]
        if scales is not None:
            full_s = [1.0] * rank
            for a, s in zip(axes, scales, strict=True):
                full_s[a] = s
            scales = full_s
        if sizes is not None:
            full = list(shape)
            for a, n in zip(axes, sizes, strict=True):
                full[a] = n
            sizes = full
    given_len = len(scales if scales is not None else sizes or [])
    if given_len != rank:
        raise _Invalid(f"{given_len} scales or sizes for a rank-{rank} input")
    out = sizes if sizes is not None else \
        [math.floor(d * s) for d, s in zip(shape, scales or [], strict=True)]
    if out[:2] != list(shape[:2]) or (scales is not None and scales[:2] != [1.0, 1.0]):
        raise _Unsupported("resizing the batch or channel axis")
    def run_axis(t: np.ndarray, k: int) -> np.ndarray:
        only = None if scales is None else \
            [scales[d] if d == 2 + k else 1.0 for d in range(rank)]
        return _run_resize(node, t, only, [out[d] if d == 2 + k else t.shape[d]
                                           for d in range(rank)])

    try:
        found = read_maps(shape[2:], run_axis, lambda t: _run_resize(
            node, t, None if scales is None else [1.0, 1.0, *scales[2:]], [1, 1, *out[2:]]))
    except ValueError as e:
        raise _Unsupported(str(e)) from None
    except Exception as e:  # the runtime refused the node's attributes itself
        raise _Unsupported(f"its interpolation could not be read from the runtime "
                           f"({type(e).__name__}: {_one_line(e)})") from None
    maps = [(2 + k, m) for k, m in enumerate(found)]
    dt = ctx.np_dtype(x)
    y = resample(x, rank, maps,
                 gather=lambda v, a, idx: ctx.emit("gather", v, Const(idx, "resize_index"),
                                                   axis=a),
                 scale=lambda v, w: ctx.mul(v, Const(w.astype(dt), "resize_weight")),
                 add=ctx.add)
    return [y]


@_converter("RMSNormalization")
def _rms_normalization(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]
                       ) -> list[Tensor | None]:
    x, scale = _req(node, ins, 0), _req(node, ins, 1)
    shape = ctx.shape(x)
    axis = _norm_axis(int(node.attr("axis", -1)), len(shape))
    norm = shape[axis:]
    eps = float(node.attr("epsilon", 1e-5))
    if ctx.shape(scale) != norm:
        sshape = ctx.shape(scale)

        def fits(target: tuple[int, ...]) -> bool:
            try:
                return np.broadcast_shapes(sshape, target) == target
            except ValueError:
                return False

        if isinstance(scale, Const) and fits(norm):
            scale = Const(np.array(np.broadcast_to(scale.data, norm)), scale.hint)
        elif fits(shape):
            # A scale over more than the normalised dims (the exporter's expanded weight):
            # the norm with a unit scale, then the product.
            ones = Const(np.ones(norm, ctx.np_dtype(x)), f"{node.outputs[0]}:unit")
            return [ctx.mul(ctx.emit("rms_norm", x, ones, axis=axis, eps=eps), scale)]
        else:
            raise _Invalid(f"scale of shape {list(sshape)} does not broadcast to the input "
                           f"{list(shape)}")
    return [ctx.emit("rms_norm", x, scale, axis=axis, eps=eps)]


@_converter("Pad")
def _pad(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    x = _req(node, ins, 0)
    shape = ctx.shape(x)
    rank = len(shape)
    mode = node.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("constant", "reflect", "edge"):
        raise _Unsupported(f"mode {mode!r} (constant, reflect and edge are known)")
    if node.opset < 11:
        pads = [int(p) for p in (node.attr("pads") or node.attr("paddings") or [])]
        value = float(node.attr("value", 0.0))
    else:
        pads = list(_const_ints(_req(node, ins, 1), "pads"))
        value_t = _opt(ins, 2)
        value = 0.0 if value_t is None else _const_float(value_t, "the pad value")
        axes_t = _opt(ins, 3)
        if axes_t is not None:
            axes = [_norm_axis(a, rank) for a in _const_ints(axes_t, "axes")]
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[rank + a] = pads[j], pads[len(axes) + j]
            pads = full
    if len(pads) != 2 * rank:
        raise _Invalid(f"{len(pads)} pads for rank {rank}")
    if mode != "constant":
        return [_edge_pad(ctx, node, x, pads, mode)]
    grow = [max(p, 0) for p in pads]
    if isinstance(x, Const):
        y: Tensor = Const(np.pad(x.data, [(grow[i], grow[rank + i]) for i in range(rank)],
                                 constant_values=value), x.hint)
    elif any(grow):
        y = ctx.emit("pad", x, pads=tuple(grow))
        if value != 0.0:
            # pad() fills zeros; add `value` on the padded border only.
            border = np.pad(np.zeros(shape, ctx.np_dtype(x)),
                            [(grow[i], grow[rank + i]) for i in range(rank)], constant_values=value)
            y = ctx.add(y, Const(border, f"{node.outputs[0]}:pad_value"))
    else:
        y = x
    if any(p < 0 for p in pads):  # negative pads crop
        grown = ctx.shape(y)
        for i in range(rank):
            lo, hi = -min(pads[i], 0), grown[i] + min(pads[rank + i], 0)
            y = ctx.slice_axis(y, i, lo, hi)
    return [y]


def _edge_pad(ctx: _Context, node: OnnxNode, x: Tensor, pads: Sequence[int], mode: str
              ) -> Tensor:
    """A reflect or edge pad: along each padded axis, one gather of the source positions
    (the mirror or the repeated edge around the whole axis)."""
    shape = ctx.shape(x)
    rank = len(shape)
    for a in range(rank):
        before, after = pads[a], pads[rank + a]
        if before < 0 or after < 0:
            raise _Unsupported(f"negative pads in mode {mode!r}")
        if not before and not after:
            continue
        if mode == "reflect" and max(before, after) >= shape[a]:
            raise _Invalid(f"reflect pads {before}, {after} of an axis of length {shape[a]} "
                           "(they must be shorter)")
        at = composite.edge_pad_indices(shape[a], before, after, mode)
        x = (Const(np.take(x.data, at, axis=a), x.hint) if isinstance(x, Const) else
             ctx.emit("gather", x, Const(at, f"{node.outputs[0]}:pad{a}"), axis=a))
    return x


@_converter("Col2Im")
def _col2im(ctx: _Context, node: OnnxNode, ins: list[Tensor | None]) -> list[Tensor | None]:
    # Blocks that tile the image (block == stride, no dilation, no padding: MobileViT-V2's
    # folding back of its patches) are a reshape, a transpose and a reshape.
    cols = _req(node, ins, 0)
    h, w = _const_ints(_req(node, ins, 1), "image_shape")
    kh, kw = _const_ints(_req(node, ins, 2), "block_shape")
    strides = tuple(node.attr("strides", [1, 1]))
    if tuple(node.attr("dilations", [1, 1])) != (1, 1) or any(node.attr("pads", [0] * 4)) \
            or strides != (kh, kw):
        raise _Unsupported("overlapping, dilated or padded blocks (only blocks that tile the "
                           "image)")
    n, ckk, length = ctx.shape(cols)
    if h % kh or w % kw or ckk % (kh * kw) or length != (h // kh) * (w // kw):
        raise _Invalid(f"columns of shape {[n, ckk, length]} do not fold into {h}x{w} "
                       f"by {kh}x{kw} blocks")
    c = ckk // (kh * kw)
    y = ctx.transpose(ctx.reshape(cols, (n, c, kh, kw, h // kh, w // kw)), (0, 1, 4, 2, 5, 3))
    return [ctx.reshape(y, (n, c, h, w))]


# ---- loading and the import driver ----------------------------------------------------

def _require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ModelImportError("the onnx package is not installed (pip install "
                               "'superopt[onnx]')") from None
    return onnx


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def light_model_path(name: str) -> Path:
    """Path of one of the `LIGHT_MODELS` shipped with the onnx package ("light_" optional)."""
    key = name.removesuffix(".onnx")
    if not key.startswith("light_"):
        key = f"light_{key}"
    if key not in LIGHT_MODELS:
        raise ModelImportError(f"unknown light model {name!r}; known: {', '.join(LIGHT_MODELS)}")
    onnx = _require_onnx()
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{key}.onnx"
    if not path.is_file():
        raise ModelImportError(f"{path}: not found in the installed onnx package")
    return path


def _load(path_or_model: Any) -> tuple[Any, str, str]:
    """(model, source for messages, graph name)."""
    onnx = _require_onnx()
    if isinstance(path_or_model, onnx.ModelProto):
        model = path_or_model
        name = model.graph.name or "onnx_model"
        source = f"<onnx model {name!r}>"
    elif isinstance(path_or_model, str | os.PathLike):
        path = Path(path_or_model)
        source, name = str(path), path.stem
        if not path.exists():
            raise ModelImportError(f"{source}: no such file")
        if not path.is_file():
            raise ModelImportError(f"{source}: not a file")
        try:
            model = onnx.load(str(path))
        except Exception as e:
            raise ModelImportError(f"{source}: not a readable ONNX model "
                                   f"({type(e).__name__}: {_one_line(e)})") from e
    else:
        raise ModelImportError(f"expected a path or an onnx.ModelProto, found "
                               f"{type(path_or_model).__name__}")
    if not model.HasField("graph") or not model.graph.output:
        raise ModelImportError(f"{source}: not an ONNX model (no graph with outputs)")
    return model, source, name


def _decode_attrs(proto: Any) -> dict[str, Any]:
    from onnx import AttributeProto, helper, numpy_helper

    out: dict[str, Any] = {}
    for a in proto.attribute:
        v = helper.get_attribute_value(a)
        if a.type == AttributeProto.TENSOR:
            v = numpy_helper.to_array(v)
        elif a.type == AttributeProto.STRING:
            v = v.decode("utf-8", "replace")
        elif a.type == AttributeProto.STRINGS:
            v = [s.decode("utf-8", "replace") for s in v]
        out[a.name] = v
    return out


_INPUT_DTYPES = {"float32": "f32", "float64": "f32", "float16": "f16", "bfloat16": "bf16",
                 "int64": "i64", "int32": "i32", "bool": "bool"}


def _masked_writes(graph: Any) -> tuple[dict[int, tuple[str, str]], set[int]]:
    """`x[mask] = c` as torch's default exporter writes it: ScatterND(x, Transpose(NonZero(
    mask)), Expand(c, [count of mask]) behind reshapes), whose NonZero and Expand have
    data-dependent shapes. Returns the ScatterND nodes (by index) with their mask and their
    one-element value, and the nodes only they read (the NonZero, the count), which the
    import skips: the write is `where(mask, c, x)`."""
    from onnx import numpy_helper

    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for x in n.input:
            readers.setdefault(x, []).append(i)
    outputs = {o.name for o in graph.output}
    sizes = {t.name: int(np.prod(t.dims)) for t in graph.initializer}
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            sizes[n.output[0]] = int(numpy_helper.to_array(n.attribute[0].t).size)

    def made_by(name: str, op: str) -> Any:
        i = producer.get(name)
        return nodes[i] if i is not None and nodes[i].op_type == op else None

    writes: dict[int, tuple[str, str]] = {}
    for i, n in enumerate(nodes):
        if n.op_type != "ScatterND" or len(n.input) != 3 or any(
                a.name == "reduction" and a.s not in (b"", b"none") for a in n.attribute):
            continue
        t = made_by(n.input[1], "Transpose")
        nz = made_by(t.input[0], "NonZero") if t is not None and list(
            t.attribute[0].ints if t.attribute else []) == [1, 0] else None
        upd = n.input[2]
        while made_by(upd, "Reshape") is not None:
            upd = made_by(upd, "Reshape").input[0]
        ex = made_by(upd, "Expand")
        if nz is None or ex is None or sizes.get(ex.input[0]) != 1:
            continue
        writes[i] = (nz.input[0], ex.input[0])
    # The nodes that only the folded writes read, back from their indices and updates.
    skipped: set[int] = set()
    kept = {x for pair in writes.values() for x in pair}  # the masks and values themselves
    work = [x for i in writes for x in nodes[i].input[1:]]
    while work:
        j = producer.get(work.pop())
        if j is None or j in skipped or j in writes:
            continue
        if any(o in outputs or o in kept or any(r not in skipped and r not in writes
                                   for r in readers.get(o, ())) for o in nodes[j].output):
            continue
        skipped.add(j)
        work.extend(nodes[j].input)
    return writes, skipped


def _masked_fill(ctx: _Context, data: Tensor, mask: Tensor, value: Tensor) -> Tensor:
    """`data[mask] = value` for a mask over data's leading dims and one value."""
    shape, mshape = ctx.shape(data), ctx.shape(mask)
    if tuple(shape[:len(mshape)]) != tuple(mshape):
        raise _Unsupported(f"a mask of shape {list(mshape)} over data of shape {list(shape)}")
    if ctx.np_dtype(mask) != np.bool_:  # NonZero's test of a number
        mask = ctx.emit("cast", mask, to="bool")
    mask = ctx.reshape(mask, (*mshape, *[1] * (len(shape) - len(mshape))))
    c = ctx.const_data(value)
    if c is None:
        raise _Unsupported("a masked write of a value computed at run time")
    fill = Const(np.asarray(c.reshape(()), ctx.np_dtype(data)), "masked_value")
    return ctx.emit("where", mask, fill, data)


class _Importer:
    """One import: walks the nodes in order, folding, converting and collecting problems."""

    def __init__(self, model: Any, source: str, name: str, batch: int | None,
                 input_shapes: Mapping[str, Sequence[int]] | None) -> None:
        self.model, self.source, self.name = model, source, name
        self.batch = batch
        self.input_shapes = dict(input_shapes or {})
        self.opsets = {o.domain: int(o.version) for o in model.opset_import}
        self.default_opset = max((v for d, v in self.opsets.items() if d in _DEFAULT_DOMAINS),
                                 default=1)
        self.env: dict[str, Tensor] = {}
        self.problems: list[tuple[str, str]] = []
        self.poisoned: set[str] = set()
        self.unavailable: dict[str, tuple[str, str]] = {}  # output -> (op label, where)

    def fail(self, msg: str) -> ModelImportError:
        return ModelImportError(f"{self.source}: {msg}")

    # -- sources --

    def _constants(self) -> None:
        from onnx import numpy_helper

        g = self.model.graph
        if len(g.sparse_initializer):
            raise self.fail("sparse initializers are not supported")
        for t in g.initializer:
            try:
                arr = numpy_helper.to_array(t)
            except Exception as e:
                raise self.fail(f"initializer {t.name!r} cannot be read ({_one_line(e)})") from e
            self.env[t.name] = Const(arr, t.name)

    def _inputs(self, ctx: _Context) -> None:
        from onnx import helper

        for vi in self.model.graph.input:
            if vi.name in self.env:  # an initializer listed as an input (IR version < 4)
                continue
            ctx.reserve(vi.name)
            if not vi.type.HasField("tensor_type"):
                raise self.fail(f"input {vi.name!r} is not a tensor")
            tt = vi.type.tensor_type
            try:
                np_name = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
            except Exception:
                np_name = f"element type {tt.elem_type}"
            if np_name not in _INPUT_DTYPES:
                raise self.fail(f"input {vi.name!r} has unsupported dtype {np_name}")
            if vi.name in self.input_shapes:
                shape = [int(d) for d in self.input_shapes[vi.name]]
            elif not tt.HasField("shape"):
                raise self.fail(f"input {vi.name!r} has no shape; pass input_shapes")
            else:
                shape = []
                for i, d in enumerate(tt.shape.dim):
                    if d.HasField("dim_value") and d.dim_value > 0:
                        shape.append(int(d.dim_value))
                    elif i == 0:
                        shape.append(self.batch or 1)
                    else:
                        raise self.fail(f"input {vi.name!r} has symbolic dimension {i} "
                                        f"({d.dim_param or '?'}); pass input_shapes")
            if self.batch is not None and shape and vi.name not in self.input_shapes:
                shape[0] = self.batch
            self.env[vi.name] = ctx.b.input(vi.name, shape, _INPUT_DTYPES[np_name])

    def _batch_change(self) -> tuple[int, int] | None:
        if self.batch is None:
            return None
        initializers = {t.name for t in self.model.graph.initializer}
        for vi in self.model.graph.input:
            if vi.name in initializers or not vi.type.tensor_type.shape.dim:
                continue
            d = vi.type.tensor_type.shape.dim[0]
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != self.batch:
                return (int(d.dim_value), self.batch)
            return None
        return None

    # -- nodes --

    def _node(self, proto: Any, index: int) -> OnnxNode:
        domain = proto.domain
        opset = self.default_opset if domain in _DEFAULT_DOMAINS else self.opsets.get(domain, 1)
        try:
            attrs = _decode_attrs(proto)
        except Exception as e:
            raise self.fail(f"node {proto.name or f'#{index}'} ({proto.op_type}): bad attribute "
                            f"({_one_line(e)})") from e
        return OnnxNode(proto.op_type, domain, proto.name or f"#{index}", tuple(proto.input),
                        tuple(proto.output), attrs, opset)

    def _reference_fold(self, node: OnnxNode, proto: Any, ins: list[Tensor | None]
                        ) -> list[Tensor | None] | None:
        """Evaluate one node on constant inputs with onnx.reference (numpy); None if it can't."""
        from onnx import ValueInfoProto, helper
        from onnx.reference import ReferenceEvaluator

        if node.op_type in _NEVER_FOLD or node.domain not in _DEFAULT_DOMAINS:
            return None
        if node.op_type in _COERCING_BEFORE_13 and node.opset < 13:
            return None
        feeds: dict[str, np.ndarray] = {}
        for name, t in zip(node.inputs, ins, strict=True):
            if name and isinstance(t, Const):
                feeds[name] = np.array(t.data, order="C")
        try:
            inputs = [helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in feeds.items()]
            outputs = [ValueInfoProto(name=n) for n in node.outputs if n]
            graph = helper.make_graph([proto], "fold", inputs, outputs)
            opsets = [helper.make_opsetid(d, v) for d, v in self.opsets.items()]
            model = helper.make_model(graph, opset_imports=opsets)
            results = iter(ReferenceEvaluator(model).run(None, feeds))
            return [Const(np.asarray(next(results)), n) if n else None for n in node.outputs]
        except Exception:
            return None

    def _convert(self, ctx: _Context, node: OnnxNode, proto: Any, ins: list[Tensor | None]
                 ) -> Sequence[Tensor | None]:
        known = node.domain in _DEFAULT_DOMAINS and node.op_type in CONVERTERS
        if _all_const(ins) and node.op_type not in _NEVER_FOLD:
            unsupported: _Unsupported | None = None
            if known:
                ctx.folding = True
                try:
                    outs = CONVERTERS[node.op_type](ctx, node, ins)
                    if all(o is None or isinstance(o, Const) for o in outs):
                        return outs
                except (_NotFoldable, _Invalid):
                    pass
                except _Unsupported as e:
                    unsupported = e
                finally:
                    ctx.folding = False
            folded = self._reference_fold(node, proto, ins)
            if folded is not None:
                return folded
            if unsupported is not None:
                raise unsupported
        if not known:
            raise _Unsupported()
        return CONVERTERS[node.op_type](ctx, node, ins)

    def _problem(self, node: OnnxNode, reason: str = "") -> None:
        self.problems.append((node.label, f"{node.where}: {reason}" if reason else node.where))
        self.poisoned.update(o for o in node.outputs if o)

    def run(self) -> Graph:
        self._constants()
        ctx = _Context(self.name, None)
        self._inputs(ctx)
        ctx.batch_change = self._batch_change()
        writes, skipped = _masked_writes(self.model.graph)
        for index, proto in enumerate(self.model.graph.node):
            if index in skipped:
                continue
            node = self._node(proto, index)
            if index in writes:  # x[mask] = c: reads x, the mask and c, not the skipped nodes
                needed = (node.inputs[0], *writes[index])
                for x in needed:
                    if x in self.unavailable:
                        op, where = self.unavailable[x]
                        self.problems.append((op, f"{where}: output {x!r} is read by "
                                                  f"{node.where}"))
                try:
                    if not all(x in self.env for x in needed):
                        raise _Unsupported()  # an operand is already reported
                    self.env[node.outputs[0]] = _masked_fill(
                        ctx, *(self.env[x] for x in needed))
                except _Unsupported as e:
                    if e.reason:
                        self._problem(node, e.reason)
                    self.poisoned.update(o for o in node.outputs if o)
                continue
            known = node.domain in _DEFAULT_DOMAINS and node.op_type in CONVERTERS
            gone = [x for x in node.inputs if x in self.unavailable]
            for x in gone:
                op, where = self.unavailable[x]
                self.problems.append((op, f"{where}: output {x!r} is read by {node.where}"))
            if gone or any(x in self.poisoned for x in node.inputs if x):
                if not known:
                    self.problems.append((node.label, node.where))
                self.poisoned.update(o for o in node.outputs if o)
                continue
            undefined = [x for x in node.inputs if x and x not in self.env]
            if undefined:
                raise self.fail(f"node {node.where} ({node.op_type}) reads {undefined[0]!r}, "
                                "which no input, initializer or earlier node defines")
            ins = [self.env[x] if x else None for x in node.inputs]
            try:
                outs = self._convert(ctx, node, proto, ins)
            except _Unsupported as e:
                self._problem(node, e.reason)
                continue
            except _Invalid as e:
                raise self.fail(f"node {node.where} ({node.op_type}): {e}") from e
            except IRError as e:
                raise self.fail(f"node {node.where} ({node.op_type}): {_one_line(e)}") from e
            except (ValueError, TypeError, IndexError, ArithmeticError) as e:
                # numpy rejecting a malformed node (mismatched shapes, bad indices)
                raise self.fail(f"node {node.where} ({node.op_type}): {type(e).__name__}: "
                                f"{_one_line(e)}") from e
            for name, t in zip(node.outputs, [*outs, *[None] * len(node.outputs)], strict=False):
                if not name:
                    continue
                if t is None:
                    self.unavailable[name] = (node.label, node.where)
                else:
                    self.env[name] = t
        return self._finish(ctx)

    def _finish(self, ctx: _Context) -> Graph:
        names = [vi.name for vi in self.model.graph.output]
        for name in names:
            if name in self.unavailable:
                op, where = self.unavailable[name]
                self.problems.append((op, f"{where}: output {name!r} is a graph output"))
            elif name not in self.env and name not in self.poisoned:
                raise self.fail(f"graph output {name!r} is never computed")
        if self.problems:
            raise UnsupportedOpsError(self.source, self.problems)
        try:
            outputs = [ctx.value(self.env[n]) for n in names]
        except _Unsupported as e:
            raise UnsupportedOpsError(self.source, [("graph output", e.reason)]) from None
        graph = ctx.b.build(outputs, self.name)
        for vi, v in zip(self.model.graph.output, graph.outputs, strict=True):
            declared = [d.dim_value if d.HasField("dim_value") else None
                        for d in vi.type.tensor_type.shape.dim]
            if not declared:
                continue
            got = list(graph.type_of(v).shape)
            if self.batch is not None:
                declared, got = declared[1:], got[1:]
            if len(declared) != len(got) or any(d not in (None, 0, g)
                                                for d, g in zip(declared, got, strict=True)):
                raise self.fail(f"output {vi.name!r} comes out as {graph.type_of(v)}, the model "
                                f"declares {declared}")
        return graph


def import_onnx(path_or_model: str | os.PathLike[str] | Any, batch: int | None = None,
                input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import an ONNX model (a file path or an `onnx.ModelProto`) as a superopt `Graph`.

    `batch` replaces dimension 0 of every graph input (and the batch that reshapes
    hard-code); `input_shapes` gives the full shape of inputs with symbolic dimensions.
    Raises `UnsupportedOpsError` listing every unsupported operator, or
    `ModelImportError` for unreadable or invalid models.
    """
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise ModelImportError(f"batch must be a positive integer, found {batch!r}")
    model, source, name = _load(path_or_model)
    return _Importer(model, source, name, batch, input_shapes).run()
