"""Export a superopt graph as an ONNX model: the inverse of `superopt.importers.onnx`.

`to_onnx(graph, opset=DEFAULT_OPSET)` returns an `onnx.ModelProto`; `save_onnx` writes it.
Inputs become graph inputs, weights become initializers (their data, or for a weight
without data the value the reference interpreter draws for it at `seed`, so onnxruntime
and `superopt.ir.interpret` compute the same function), and TASO's constant ops become
initializers holding their value.

Every op is lowered by its rule in `LOWERING`, the "onnx" `RuleTable`; the coverage test
fails when an op has none. A rule emits ONNX nodes through an `_Emitter` that names values
and holds the initializers. Ops chosen so that `import_onnx` reads each back as the same
IR op (conv2d as Conv without bias, smul as Mul by a rank-0 initializer, embedding as a
Gather on runtime indices); what cannot come back as itself is listed in `NOT_INVERTIBLE`.

`onnx` is imported when this module is, so import it lazily (`superopt.exporters` does).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from superopt.importers.naming import UniqueNames
from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Node, Value
from superopt.ir.interpret import REFERENCE
from superopt.ir.kernels import resolve_pads
from superopt.ir.ops.constants import const_iconv_value, const_pool_value
from superopt.ir.ops.index import iota_value, tri_mask_value
from superopt.ir.ops.pool import avg_divisor, pool_geometry
from superopt.ir.rules import RuleTable
from superopt.ir.types import DType

__all__ = ["CLIP_BOUND", "DEFAULT_OPSET", "EXTERNAL_DATA_ABOVE", "LOWERING", "MAX_OPSET",
           "MIN_OPSET", "NOT_INVERTIBLE", "ExportError", "save_onnx", "to_onnx"]

# Opset 20 has Gelu, ReduceMean with axes as an input and LayerNormalization; 17 is the
# oldest with LayerNormalization, where gelu is written out with Erf instead.
DEFAULT_OPSET = 20
MIN_OPSET = 17
MAX_OPSET = 21

# IR op -> what `import_onnx` builds from its lowering instead of the op itself; the
# round-trip tests compare graphs after undoing these (tests/exporters/test_onnx_export.py).
NOT_INVERTIBLE: dict[str, str] = {
    "linear": "Gemm / MatMul + Add: imports as matmul with a transposed weight plus ewadd",
    "copy": "Identity: a physical copy has no ONNX meaning, imports as nothing",
    "layout": "Identity: ONNX values have no physical layout, imports as nothing",
    "enlarge": "Pad: imports as pad",
    "lrn": "for an even size, written out with Pow and AveragePool (onnxruntime runs odd "
           "sizes only): imports as those ops",
    "const_pool": "an initializer: imports as a weight with its value",
    "const_iconv": "an initializer: imports as a weight with its value",
    "const_imm": "an initializer: imports as a weight with its value",
    "const_one": "an initializer: imports as a weight with its value",
}


class ExportError(IRError):
    """A graph (or one node's attributes) that the ONNX exporter cannot express."""


_ONNX_DTYPE: dict[DType, int] = {
    DType.F32: TensorProto.FLOAT, DType.F16: TensorProto.FLOAT16,
    DType.BF16: TensorProto.BFLOAT16, DType.I64: TensorProto.INT64,
    DType.I32: TensorProto.INT32, DType.I16: TensorProto.INT16, DType.I8: TensorProto.INT8,
    DType.BOOL: TensorProto.BOOL,
}

_ACTIVATION_OP = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


# ---- emitter ---------------------------------------------------------------------------

class _Emitter:
    """The ONNX graph under construction: value names, nodes and initializers."""

    def __init__(self, graph: Graph, opset: int, seed: int) -> None:
        self.graph, self.opset, self.seed = graph, opset, seed
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._names = UniqueNames()
        self._value_names: dict[tuple[int, int], str] = {}
        # Sources keep their names, so a round trip returns the same inputs and weights.
        for n in graph.nodes:
            if n.is_named_source:
                self._names.reserve(n.attr("name"))

    def name_of(self, v: Value) -> str:
        return self._value_names[(v.node, v.index)]

    def inp(self, node: Node, i: int) -> str:
        return self.name_of(node.inputs[i])

    def out(self, node: Node, i: int = 0) -> str:
        key = (node.id, i)
        if key not in self._value_names:
            hint = f"{node.op}_{node.id}" + (f"_{i}" if i else "")
            self._value_names[key] = self._names.claim(hint)
        return self._value_names[key]

    def bind(self, node: Node, name: str) -> None:
        self._value_names[(node.id, 0)] = name

    def tmp(self, hint: str) -> str:
        return self._names.claim(hint)

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str],
             **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=self.tmp(f"{op_type}_node"), **attrs))

    def initializer(self, name: str, data: np.ndarray, dtype: DType) -> str:
        self.initializers.append(_tensor(name, data, dtype))
        return name

    def ints(self, values: Sequence[int], hint: str) -> str:
        """An int64 initializer for a shape-like operand (Reshape's shape, Slice's starts)."""
        return self.initializer(self.tmp(hint), np.asarray(list(values), dtype=np.int64),
                                DType.I64)

    def activated(self, node: Node, op_type: str, inputs: Sequence[str], **attrs: Any) -> None:
        """`op_type` followed by the node's fused activation, if any."""
        act = node.a.get("activation", "none")
        if act == "none":
            self.emit(op_type, inputs, [self.out(node)], **attrs)
            return
        pre = self.tmp(f"{node.op}_{node.id}_pre")
        self.emit(op_type, inputs, [pre], **attrs)
        self.emit(_ACTIVATION_OP[act], [pre], [self.out(node)])


def _tensor(name: str, data: np.ndarray, dtype: DType) -> onnx.TensorProto:
    if dtype == DType.BF16:
        # numpy has no bfloat16: round float32 to the upper 16 bits (nearest even).
        bits = np.asarray(data, dtype=np.float32).view(np.uint32).astype(np.uint64)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        t = helper.make_tensor(name, TensorProto.BFLOAT16, list(np.shape(data)),
                               rounded.tobytes(), raw=True)
        return t
    # np.array, not np.ascontiguousarray: the latter turns a rank-0 array into rank 1.
    return numpy_helper.from_array(np.array(data, dtype=dtype.numpy, order="C"),
                                   name)


# ---- lowering rules ------------------------------------------------------------------

OnnxRule = Callable[[Node, _Emitter], None]

LOWERING: RuleTable[OnnxRule] = RuleTable("onnx")


def _rule(*ops: str) -> Callable[[OnnxRule], OnnxRule]:
    def deco(fn: OnnxRule) -> OnnxRule:
        for op in ops:
            LOWERING.register(op, fn)
        return fn
    return deco


@_rule("input")
def _input(node: Node, em: _Emitter) -> None:
    em.bind(node, node.attr("name"))


@_rule("weight")
def _weight(node: Node, em: _Emitter) -> None:
    name = node.attr("name")
    data = em.graph.weights.get(name)
    if data is None:
        data = REFERENCE.draw(node, em.seed)
    em.bind(node, em.initializer(name, np.asarray(data), node.type.dtype))


def _constant(value: Callable[[Node], np.ndarray]) -> OnnxRule:
    def rule(node: Node, em: _Emitter) -> None:
        em.initializer(em.out(node), value(node), node.type.dtype)
    return rule


LOWERING.register("const_pool", _constant(lambda n: const_pool_value(n.a)))
LOWERING.register("const_iconv", _constant(lambda n: const_iconv_value(n.a)))
LOWERING.register("const_imm", _constant(lambda n: np.eye(n.attr("n"))))
LOWERING.register("const_one", _constant(lambda n: np.ones(n.attr("shape"))))
# iota and tri_mask are initializers too; the importer recognises such arrays again.
LOWERING.register("iota", _constant(lambda n: iota_value(n.a)))
LOWERING.register("tri_mask", _constant(lambda n: tri_mask_value(n.a)))


def _simple(op_type: str) -> OnnxRule:
    def rule(node: Node, em: _Emitter) -> None:
        em.emit(op_type, [em.inp(node, i) for i in range(len(node.inputs))], [em.out(node)])
    return rule


# Element-wise ops that are one ONNX op each. smul's scalar is a rank-0 tensor, which Mul
# broadcasts, and the importer turns a Mul by a one-element constant back into smul.
for _op, _onnx in (("relu", "Relu"), ("sigmoid", "Sigmoid"), ("tanh", "Tanh"),
                   ("ewadd", "Add"), ("ewmul", "Mul"), ("smul", "Mul"),
                   ("neg", "Neg"), ("exp", "Exp"), ("log", "Log"), ("sqrt", "Sqrt"),
                   ("recip", "Reciprocal"), ("erf", "Erf"), ("sin", "Sin"), ("cos", "Cos"), ("acos", "Acos"),
                   ("sub", "Sub"), ("div", "Div"), ("maximum", "Max"), ("minimum", "Min"),
                   ("eq", "Equal"), ("lt", "Less"), ("gt", "Greater"), ("where", "Where")):
    LOWERING.register(_op, _simple(_onnx))


def _scalar(em: _Emitter, node: Node, value: float, hint: str) -> str:
    """A rank-0 initializer of the node's input dtype."""
    dt = em.graph.type_of(node.inputs[0]).dtype
    return em.initializer(em.tmp(hint), np.asarray(value), dt)


@_rule("rsqrt")
def _rsqrt(node: Node, em: _Emitter) -> None:
    # ONNX has no Rsqrt; the importer reads Reciprocal(Sqrt(x)) back as rsqrt.
    root = em.tmp(f"rsqrt_{node.id}_sqrt")
    em.emit("Sqrt", [em.inp(node, 0)], [root])
    em.emit("Reciprocal", [root], [em.out(node)])


@_rule("silu")
def _silu(node: Node, em: _Emitter) -> None:
    # Swish is opset 24; x * Sigmoid(x) is what torch's exporter writes and the importer folds.
    x = em.inp(node, 0)
    gate = em.tmp(f"silu_{node.id}_sigmoid")
    em.emit("Sigmoid", [x], [gate])
    em.emit("Mul", [x, gate], [em.out(node)])


@_rule("pow")
def _pow(node: Node, em: _Emitter) -> None:
    exponent = _scalar(em, node, node.attr("exponent"), f"pow_{node.id}_exponent")
    em.emit("Pow", [em.inp(node, 0), exponent], [em.out(node)])


@_rule("cast")
def _cast(node: Node, em: _Emitter) -> None:
    em.emit("Cast", [em.inp(node, 0)], [em.out(node)],
            to=_ONNX_DTYPE[DType.parse(node.attr("to"))])


def _repeat_factor(index: np.ndarray | None, n: int) -> int:
    """s when `index` lists 0..n-1 each s > 1 times in order (nearest upsampling by s along
    the axis), else 0."""
    if index is None or index.ndim != 1 or n < 1 or index.size % n or index.size == n:
        return 0
    s = index.size // n
    return s if np.array_equal(index, np.arange(index.size) // s) else 0


@_rule("gather")
def _gather(node: Node, em: _Emitter) -> None:
    x_type = em.graph.type_of(node.inputs[0])
    axis = int(node.attr("axis"))
    s = _repeat_factor(_index_data(em.graph, node.inputs[1]), x_type.shape[axis]) \
        if x_type.dtype.is_float else 0
    if s:
        # Nearest upsampling by a whole factor, as the importers read Resize and torch's
        # interpolation: onnxruntime's Resize (floor of i / s) runs it about 4x faster than
        # Gather ((1, 64, 80, 80) doubled: 1.3 ms against 5.7 ms for two Gathers).
        scales = [1.0] * x_type.rank
        scales[axis] = float(s)
        em.emit("Resize", [em.inp(node, 0), "",
                           em.initializer(em.tmp(f"gather_{node.id}_scales"),
                                          np.asarray(scales, dtype=np.float32), DType.F32)],
                [em.out(node)], mode="nearest", coordinate_transformation_mode="asymmetric",
                nearest_mode="floor")
        return
    em.emit("Gather", [em.inp(node, 0), em.inp(node, 1)], [em.out(node)],
            axis=node.attr("axis"))


@_rule("expand")
def _expand(node: Node, em: _Emitter) -> None:
    em.emit("Expand", [em.inp(node, 0), em.ints(node.attr("shape"), f"expand_{node.id}_shape")],
            [em.out(node)])


@_rule("copy", "layout")
def _identity(node: Node, em: _Emitter) -> None:
    em.emit("Identity", [em.inp(node, 0)], [em.out(node)])


@_rule("gelu")
def _gelu(node: Node, em: _Emitter) -> None:
    approximate = node.attr("approximate")
    if em.opset >= 20:
        em.emit("Gelu", [em.inp(node, 0)], [em.out(node)], approximate=approximate)
        return
    if approximate != "none":
        raise ExportError(f"gelu(approximate={approximate!r}) needs opset >= 20, asked for "
                          f"{em.opset}")
    # 0.5 * x * (1 + erf(x / sqrt(2))), the exact form, before opset 20 had Gelu.
    x = em.inp(node, 0)
    dt = em.graph.type_of(node.inputs[0]).dtype
    half = em.initializer(em.tmp("half"), np.asarray(0.5), dt)
    one = em.initializer(em.tmp("one"), np.asarray(1.0), dt)
    rsqrt2 = em.initializer(em.tmp("rsqrt2"), np.asarray(1 / math.sqrt(2.0)), dt)
    t = [em.tmp(f"gelu_{node.id}_{k}") for k in range(4)]
    em.emit("Mul", [x, rsqrt2], [t[0]])
    em.emit("Erf", [t[0]], [t[1]])
    em.emit("Add", [t[1], one], [t[2]])
    em.emit("Mul", [x, t[2]], [t[3]])
    em.emit("Mul", [t[3], half], [em.out(node)])


@_rule("matmul")
def _matmul(node: Node, em: _Emitter) -> None:
    em.activated(node, "MatMul", [em.inp(node, 0), em.inp(node, 1)])


@_rule("linear")
def _linear(node: Node, em: _Emitter) -> None:
    x, w, b = (em.inp(node, i) for i in range(3))
    if em.graph.type_of(node.inputs[0]).rank == 2:
        em.activated(node, "Gemm", [x, w, b], transB=1)
        return
    wt, prod = em.tmp(f"{w}_T"), em.tmp(f"linear_{node.id}_mm")
    em.emit("Transpose", [w], [wt], perm=[1, 0])
    em.emit("MatMul", [x, wt], [prod])
    em.activated(node, "Add", [prod, b])


@_rule("conv2d")
def _conv2d(node: Node, em: _Emitter) -> None:
    a = node.a
    x_t, w_t = em.graph.type_of(node.inputs[0]), em.graph.type_of(node.inputs[1])
    t, b, left, r = resolve_pads(a["padding"], x_t.shape[2:], w_t.shape[2:], a["stride"],
                                 a["dilation"])
    em.activated(node, "Conv", [em.inp(node, 0), em.inp(node, 1)],
                 kernel_shape=list(w_t.shape[2:]), strides=list(a["stride"]),
                 dilations=list(a["dilation"]), group=a["groups"], pads=[t, left, b, r])


@_rule("embedding")
def _embedding(node: Node, em: _Emitter) -> None:
    em.emit("Gather", [em.inp(node, 1), em.inp(node, 0)], [em.out(node)], axis=0)


# ---- movement ------------------------------------------------------------------------

@_rule("transpose")
def _transpose(node: Node, em: _Emitter) -> None:
    if not node.attr("perm"):  # a rank-0 value: ONNX cannot type an empty perm
        em.emit("Identity", [em.inp(node, 0)], [em.out(node)])
        return
    em.emit("Transpose", [em.inp(node, 0)], [em.out(node)], perm=list(node.attr("perm")))


@_rule("reshape")
def _reshape(node: Node, em: _Emitter) -> None:
    shape = em.ints(node.attr("shape"), f"reshape_{node.id}_shape")
    em.emit("Reshape", [em.inp(node, 0), shape], [em.out(node)])


@_rule("concat")
def _concat(node: Node, em: _Emitter) -> None:
    em.emit("Concat", [em.inp(node, i) for i in range(len(node.inputs))], [em.out(node)],
            axis=node.attr("axis"))


@_rule("split")
def _split(node: Node, em: _Emitter) -> None:
    sizes = em.ints(node.attr("sizes"), f"split_{node.id}_sizes")
    outs = [em.out(node, i) for i in range(len(node.attr("sizes")))]
    em.emit("Split", [em.inp(node, 0), sizes], outs, axis=node.attr("axis"))


@_rule("slice")
def _slice(node: Node, em: _Emitter) -> None:
    starts, ends, steps = node.attr("starts"), node.attr("ends"), node.attr("steps")
    em.emit("Slice", [em.inp(node, 0), em.ints(starts, f"slice_{node.id}_starts"),
                      em.ints(ends, f"slice_{node.id}_ends"),
                      em.ints(range(len(starts)), f"slice_{node.id}_axes"),
                      em.ints(steps, f"slice_{node.id}_steps")], [em.out(node)])


def _pad_node(em: _Emitter, x: str, pads: Sequence[int], out: str, hint: str,
              value: float = 0.0, dtype: DType = DType.F32) -> None:
    inputs = [x, em.ints(pads, f"{hint}_pads")]
    if value != 0.0:
        inputs.append(em.initializer(em.tmp(f"{hint}_value"), np.asarray(value), dtype))
    em.emit("Pad", inputs, [out], mode="constant")


@_rule("pad")
def _pad(node: Node, em: _Emitter) -> None:
    if not node.attr("pads"):  # onnxruntime's Pad refuses a rank-0 input
        em.emit("Identity", [em.inp(node, 0)], [em.out(node)])
        return
    _pad_node(em, em.inp(node, 0), node.attr("pads"), em.out(node), f"pad_{node.id}")


@_rule("enlarge")
def _enlarge(node: Node, em: _Emitter) -> None:
    w = em.graph.type_of(node.inputs[0]).shape
    dh, dw = (node.attr("kh") - w[2]) // 2, (node.attr("kw") - w[3]) // 2
    _pad_node(em, em.inp(node, 0), [0, 0, dh, dw, 0, 0, dh, dw], em.out(node),
              f"enlarge_{node.id}")


# ---- pooling ---------------------------------------------------------------------------

def _pool(node: Node, em: _Emitter, op_type: str) -> None:
    a = node.a
    x_t = em.graph.type_of(node.inputs[0])
    (t, b, left, r), _, _ = pool_geometry(x_t.shape, a)
    kernel, stride = list(a["kernel"]), list(a["stride"])
    x = em.inp(node, 0)
    extra: dict[str, Any] = {}
    if op_type == "AveragePool":
        extra["count_include_pad"] = int(a["count_include_pad"])
    # onnxruntime rejects pads as large as the kernel; the IR allows them (a window all in
    # the padding), so such pads become an explicit Pad first.
    if max(t, b) < kernel[0] and max(left, r) < kernel[1]:
        em.activated(node, op_type, [x], kernel_shape=kernel, strides=stride,
                     pads=[t, left, b, r], **extra)
        return
    dtype = x_t.dtype
    padded = em.tmp(f"{node.op}_{node.id}_padded")
    fill = -np.inf if op_type == "MaxPool" else 0.0
    _pad_node(em, x, [0, 0, t, left, 0, 0, b, r], padded, f"{node.op}_{node.id}", fill, dtype)
    if op_type == "MaxPool" or a["count_include_pad"]:
        em.activated(node, op_type, [padded], kernel_shape=kernel, strides=stride)
        return
    # Excluding pads: full-window means of the zero-padded input, rescaled to valid cells.
    means = em.tmp(f"{node.op}_{node.id}_means")
    em.emit("AveragePool", [padded], [means], kernel_shape=kernel, strides=stride)
    ratio = (kernel[0] * kernel[1]) / avg_divisor(x_t.shape, a)
    scale = em.initializer(em.tmp(f"{node.op}_{node.id}_ratio"), ratio, dtype)
    em.activated(node, "Mul", [means, scale])


LOWERING.register("pool2d_max", lambda node, em: _pool(node, em, "MaxPool"))
LOWERING.register("pool2d_avg", lambda node, em: _pool(node, em, "AveragePool"))


# ---- reductions and normalisations -----------------------------------------------------

def _reduce(op_type: str, axes_input_since: int) -> OnnxRule:
    def rule(node: Node, em: _Emitter) -> None:
        axes, keep = list(node.attr("axes")), int(node.attr("keepdims"))
        if not axes:  # only a rank-0 input has no axes; the IR returns it unchanged
            em.emit("Identity", [em.inp(node, 0)], [em.out(node)])
            return
        if em.opset >= axes_input_since:
            em.emit(op_type, [em.inp(node, 0), em.ints(axes, f"{op_type}_{node.id}_axes")],
                    [em.out(node)], keepdims=keep)
        else:
            em.emit(op_type, [em.inp(node, 0)], [em.out(node)], axes=axes, keepdims=keep)
    return rule


LOWERING.register("reduce_sum", _reduce("ReduceSum", 13))
LOWERING.register("reduce_mean", _reduce("ReduceMean", 18))
LOWERING.register("reduce_max", _reduce("ReduceMax", 18))


@_rule("topk")
def _topk(node: Node, em: _Emitter) -> None:
    # sorted=1: in order; TopK keeps the lower index first among equal values.
    k = em.ints([node.attr("k")], f"topk_{node.id}_k")
    em.emit("TopK", [em.inp(node, 0), k], [em.out(node, 0), em.out(node, 1)],
            axis=node.attr("axis"), largest=int(node.attr("largest")), sorted=1)


@_rule("argmax")
def _argmax(node: Node, em: _Emitter) -> None:
    # select_last_index=0: the first maximal index, the IR's tie rule.
    em.emit("ArgMax", [em.inp(node, 0)], [em.out(node)], axis=node.attr("axes")[0],
            keepdims=int(node.attr("keepdims")), select_last_index=0)


@_rule("softmax")
def _softmax(node: Node, em: _Emitter) -> None:
    em.emit("Softmax", [em.inp(node, 0)], [em.out(node)], axis=node.attr("axis"))


@_rule("layer_norm")
def _layer_norm(node: Node, em: _Emitter) -> None:
    em.emit("LayerNormalization", [em.inp(node, i) for i in range(3)], [em.out(node)],
            axis=node.attr("axis"), epsilon=node.attr("eps"))


@_rule("rms_norm")
def _rms_norm(node: Node, em: _Emitter) -> None:
    # RMSNormalization arrives in opset 23; before it, written out the way torch's exporter
    # writes RMSNorm, which the importer folds back: x / sqrt(mean(x ** 2) + eps) * weight.
    # Pow, not x * x: onnxruntime fuses this chain into one SimplifiedLayerNormalization
    # only from Pow (with Mul(x, x), T5's and Llama's norms ran as five ops each).
    x, w = em.inp(node, 0), em.inp(node, 1)
    rank = em.graph.type_of(node.inputs[0]).rank
    axes = list(range(node.attr("axis"), rank))
    t = [em.tmp(f"rms_norm_{node.id}_{k}") for k in range(5)]
    em.emit("Pow", [x, _scalar(em, node, 2.0, "rms_norm_two")], [t[0]])
    if em.opset >= 18:
        em.emit("ReduceMean", [t[0], em.ints(axes, f"rms_norm_{node.id}_axes")], [t[1]],
                keepdims=1)
    else:
        em.emit("ReduceMean", [t[0]], [t[1]], axes=axes, keepdims=1)
    em.emit("Add", [t[1], _scalar(em, node, node.attr("eps"), "rms_norm_eps")], [t[2]])
    em.emit("Sqrt", [t[2]], [t[3]])
    em.emit("Div", [x, t[3]], [t[4]])
    em.emit("Mul", [t[4], w], [em.out(node)])


def _repeat_heads(em: _Emitter, x: str, shape: tuple[int, ...], group: int, hint: str) -> str:
    """(..., Hkv, L, D) -> (..., Hkv, 1, L, D) -> expanded to `group` -> (..., Hkv*group, L, D)."""
    lead, (hk, length, d) = shape[:-3], shape[-3:]
    unit, wide, out = (em.tmp(f"{hint}_{s}") for s in ("unit", "wide", "rep"))
    em.emit("Reshape", [x, em.ints((*lead, hk, 1, length, d), f"{hint}_unit_shape")], [unit])
    em.emit("Expand", [unit, em.ints((*lead, hk, group, length, d), f"{hint}_wide_shape")],
            [wide])
    em.emit("Reshape", [wide, em.ints((*lead, hk * group, length, d), f"{hint}_shape")], [out])
    return out


@_rule("attention")
def _attention(node: Node, em: _Emitter) -> None:
    q_t, k_t, v_t = (em.graph.type_of(v) for v in node.inputs)
    heads, kv_heads = q_t.shape[-3], k_t.shape[-3]
    q, k, v = (em.inp(node, i) for i in range(3))
    hint = f"attention_{node.id}"
    if heads != kv_heads:
        # Grouped-query: K/V head h serves query heads h*g .. h*g+g-1 (repeat_interleave):
        # (..., Hkv, L, D) -> (..., Hkv, 1, L, D) -> expand to g -> (..., H, L, D).
        group = heads // kv_heads
        k = _repeat_heads(em, k, k_t.shape, group, f"{hint}_k")
        v = _repeat_heads(em, v, v_t.shape, group, f"{hint}_v")
    rank = k_t.rank
    perm = [*range(rank - 2), rank - 1, rank - 2]
    kt, scores, scaled, probs = (em.tmp(f"{hint}_{s}") for s in ("kT", "scores", "scaled",
                                                                   "probs"))
    em.emit("Transpose", [k], [kt], perm=perm)
    em.emit("MatMul", [q, kt], [scores])
    em.emit("Mul", [scores, _scalar(em, node, node.attr("scale"), f"{hint}_scale")], [scaled])
    if node.attr("causal"):
        lq, lk = q_t.shape[-2], k_t.shape[-2]
        keep = em.initializer(em.tmp(f"{hint}_causal"),
                              tri_mask_value({"rows": lq, "cols": lk, "diagonal": 0,
                                              "lower": True}), DType.BOOL)
        masked = em.tmp(f"{hint}_masked")
        em.emit("Where", [keep, scaled, _scalar(em, node, -math.inf, f"{hint}_neg_inf")],
                [masked])
        scaled = masked
    em.emit("Softmax", [scaled], [probs], axis=-1)
    em.emit("MatMul", [probs, v], [em.out(node)])


@_rule("batch_norm")
def _batch_norm(node: Node, em: _Emitter) -> None:
    em.emit("BatchNormalization", [em.inp(node, i) for i in range(5)], [em.out(node)],
            epsilon=node.attr("eps"))


@_rule("lrn")
def _lrn(node: Node, em: _Emitter) -> None:
    size, alpha, beta, bias = (node.attr(k) for k in ("size", "alpha", "beta", "bias"))
    x = em.inp(node, 0)
    if size % 2:
        em.emit("LRN", [x], [em.out(node)], size=size, alpha=alpha, beta=beta, bias=bias)
        return
    # onnxruntime implements odd sizes only. For an even size ONNX's window reaches one
    # channel further up than down: written out as a mean of squares over a channel window.
    n, c, h, w = em.graph.type_of(node.inputs[0]).shape
    dt = em.graph.type_of(node.inputs[0]).dtype
    lo, hi = (size - 1) // 2, size // 2
    t = [em.tmp(f"lrn_{node.id}_{k}") for k in range(8)]
    em.emit("Mul", [x, x], [t[0]])
    em.emit("Reshape", [t[0], em.ints((n, 1, c, h * w), f"lrn_{node.id}_flat")], [t[1]])
    _pad_node(em, t[1], [0, 0, lo, 0, 0, 0, hi, 0], t[2], f"lrn_{node.id}")
    em.emit("AveragePool", [t[2]], [t[3]], kernel_shape=[size, 1], strides=[1, 1])
    em.emit("Reshape", [t[3], em.ints((n, c, h, w), f"lrn_{node.id}_shape")], [t[4]])
    em.emit("Mul", [t[4], em.initializer(em.tmp("lrn_alpha"), np.asarray(alpha), dt)], [t[5]])
    em.emit("Add", [t[5], em.initializer(em.tmp("lrn_bias"), np.asarray(bias), dt)], [t[6]])
    em.emit("Pow", [t[6], em.initializer(em.tmp("lrn_beta"), np.asarray(beta), dt)], [t[7]])
    em.emit("Div", [x, t[7]], [em.out(node)])


# ---- models ----------------------------------------------------------------------------

def _value_info(name: str, dtype: DType, shape: Sequence[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _ONNX_DTYPE[dtype], list(shape))


# ---- clamps as Clip ----------------------------------------------------------------

# A clamp is one Clip node in ONNX, and onnxruntime fuses a Clip into the convolution
# before it (and keeps it in its blocked channel layout); the IR writes a clamp as relu or
# maximum, then minimum, each by a scalar constant (the importers read Clip, ReLU6 and
# clamp so). Written as Relu and Min, MobileNet-V2 ran 1.50x slower in onnxruntime.
# `_clips` finds them; the importer reads each Clip back as the same IR ops, so the round
# trip is exact: relu then minimum is Clip(x, 0, hi); maximum by lo != 0 then minimum is
# Clip(x, lo, hi); a minimum alone is Clip(x, , hi), a maximum by lo != 0 alone Clip(x, lo)
# (a maximum by 0 stays Max: a Clip(x, 0) would come back as relu).
# The IR ops a Clip stands for, and which of its bounds each sets (relu: the lower, 0).
CLIP_BOUND: dict[str, str] = {"maximum": "min", "minimum": "max", "relu": "min"}
# A bound: its value, and the one-element weight that holds it (None: relu's 0).
_Bound = tuple[float, Value | None]
_Clip = tuple[Value, _Bound | None, _Bound | None]


def _scalar_operand(graph: Graph, node: Node) -> tuple[Value, _Bound] | None:
    """The other operand and the bound of a binary op by a rank-0 weight with data, when
    the result has the other operand's type. Rank 0 only: Clip's bounds are rank 0, so the
    Clip reads that weight by its name and the import gives it back under it (a shape-(1,)
    bound would come back as another weight)."""
    for k in (0, 1):
        src = graph.node(node.inputs[k].node)
        data = graph.weights.get(src.attr("name")) if src.op == "weight" else None
        other = node.inputs[1 - k]
        if (data is not None and src.type.shape == () and src.type.dtype == node.type.dtype
                and graph.type_of(other) == node.type and node.type.dtype.is_float):
            value = float(np.asarray(data).reshape(-1)[0])
            if math.isfinite(value):
                return other, (value, node.inputs[k])
    return None


def _clips(graph: Graph) -> tuple[dict[int, _Clip], set[int]]:
    """The nodes written as Clip ((operand, lo, hi) by node id) and the relu or maximum
    nodes a Clip takes in (read by it alone and not outputs)."""
    outputs = {v.node for v in graph.outputs}
    clips: dict[int, _Clip] = {}
    absorbed: set[int] = set()
    for node in graph.nodes:
        side = CLIP_BOUND.get(node.op)
        got = _scalar_operand(graph, node) if side and len(node.inputs) == 2 else None
        if got is None:
            continue
        x, c = got
        if side == "min":
            if c[0] != 0:
                clips[node.id] = (x, c, None)
            continue
        inner = graph.node(x.node)
        only_here = inner.id not in outputs and graph.consumers[inner.id] == (node.id,)
        lo: _Bound | None = None
        if only_here and CLIP_BOUND.get(inner.op) == "min" and len(inner.inputs) == 1:
            x, lo = inner.inputs[0], (0.0, None)  # relu
        elif only_here and CLIP_BOUND.get(inner.op) == "min":
            under = _scalar_operand(graph, inner)
            if under is not None and under[1][0] != 0 and under[1][0] <= c[0]:
                x, lo = under
        if lo is not None:
            absorbed.add(inner.id)
            clips.pop(inner.id, None)
        clips[node.id] = (x, lo, c)
    return clips, absorbed


def _emit_clip(node: Node, em: _Emitter, x: Value, lo: _Bound | None, hi: _Bound | None
               ) -> None:
    """Clip(x, lo, hi), a bound passed by its weight's name (relu's 0 as an initializer of
    its own)."""
    names = []
    for side, b in (("min", lo), ("max", hi)):
        if b is None:
            names.append("")
        elif b[1] is not None:
            names.append(em.name_of(b[1]))
        else:
            names.append(em.initializer(em.tmp(f"clip_{node.id}_{side}"), np.asarray(b[0]),
                                        node.type.dtype))
    while names and not names[-1]:
        names.pop()
    em.emit("Clip", [em.name_of(x), *names], [em.out(node)])


# ---- linear interpolation as Resize ----------------------------------------------------

# The importers read a linear Resize / interpolation along an axis as a sum of two gathers
# of the input, each times a weight per output (`superopt.importers.resample`); written so,
# onnxruntime runs five ops where the file ran one (DPT's and SegFormer's small configs:
# 0.57x and 0.60x the file). `_resizes` finds such sums whose map is exactly that of a
# linear Resize with one of ONNX's coordinate transformations (computed here from the
# spec's formulas, compared with the weights to 1e-6), and they are written as that Resize.
RESIZE_TRANSFORMS = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")
_Resize = tuple[Value, int, str]  # (input, axis, coordinate transformation)


def linear_resize_map(n: int, out: int, transform: str) -> np.ndarray:
    """The (out x n) map of ONNX Resize, mode linear, `sizes` given (scale out / n), along
    one axis: source coordinate by `transform`, clamped to [0, n - 1], two neighbours."""
    scale = out / n
    i = np.arange(out, dtype=np.float64)
    if transform == "half_pixel":
        src = (i + 0.5) / scale - 0.5
    elif transform == "pytorch_half_pixel":
        src = (i + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    elif transform == "align_corners":
        src = i * (n - 1) / (out - 1) if out > 1 else np.zeros(out)
    elif transform == "asymmetric":
        src = i / scale
    else:
        raise ValueError(f"unknown coordinate transformation {transform!r}")
    src = np.clip(src, 0, n - 1)
    lo = np.floor(src).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    m = np.zeros((out, n))
    np.add.at(m, (np.arange(out), lo), 1 - (src - lo))
    np.add.at(m, (np.arange(out), hi), src - lo)
    return m


def _index_data(graph: Graph, v: Value) -> np.ndarray | None:
    """A gather's indices when they are known: a weight's data, or an iota's (an arange
    becomes one at import)."""
    src = graph.node(v.node)
    if src.op == "iota":
        return iota_value(src.a)
    return graph.weights.get(src.attr("name")) if src.op == "weight" else None


def _weighted_gather(graph: Graph, v: Value, only: int
                     ) -> tuple[Value, int, np.ndarray, np.ndarray, Node] | None:
    """(x, axis, index, weight, gather) when v = gather(x, axis, index) * weight, both
    constants, the product read by node `only` alone and the gather by the product alone."""
    mul = graph.node(v.node)
    if mul.op != "ewmul" or graph.consumers[mul.id] != (only,):
        return None
    for k in (0, 1):
        g, w = graph.node(mul.inputs[k].node), graph.node(mul.inputs[1 - k].node)
        if g.op != "gather" or w.op != "weight" or graph.consumers[g.id] != (mul.id,):
            continue
        index = _index_data(graph, g.inputs[1])
        weight = graph.weights.get(w.attr("name"))
        axis = int(g.attr("axis"))
        x_type = graph.type_of(g.inputs[0])
        want = (index.size,) + (1,) * (x_type.rank - 1 - axis) if index is not None else ()
        if index is None or weight is None or index.ndim != 1 or weight.shape != want or \
                mul.type != g.type:
            continue
        return (g.inputs[0], axis, np.asarray(index),
                np.asarray(weight, np.float64).reshape(-1), g)
    return None


def _resizes(graph: Graph) -> tuple[dict[int, _Resize], set[int]]:
    """The ewadd nodes written as a linear Resize ((input, axis, transform) by node id) and
    the gathers and products each takes in (its weights are left to `to_onnx`, which
    writes only the initializers a node reads)."""
    outputs = {v.node for v in graph.outputs}
    found: dict[int, _Resize] = {}
    absorbed: set[int] = set()
    for node in graph.nodes:
        if node.op != "ewadd" or not node.type.dtype.is_float or \
                any(v.node in outputs for v in node.inputs):
            continue
        terms = [t for t in (_weighted_gather(graph, v, node.id) for v in node.inputs) if t]
        if len(terms) != 2 or len({(t[0], t[1]) for t in terms}) != 1:
            continue
        x, axis = terms[0][0], terms[0][1]
        n, out = graph.type_of(x).shape[axis], node.type.shape[axis]
        m = np.zeros((out, n))
        for _, _, index, weight, _ in terms:
            if index.size != out or index.min() < 0 or index.max() >= n:
                break
            np.add.at(m, (np.arange(out), index), weight)
        else:
            transform = next((t for t in RESIZE_TRANSFORMS if np.allclose(
                linear_resize_map(n, out, t), m, rtol=0, atol=1e-6)), None)
            if transform is not None:
                found[node.id] = (x, axis, transform)
                absorbed.update(i for v, t in zip(node.inputs, terms, strict=True)
                                for i in (v.node, t[4].id))
    return found, absorbed


def _emit_resize(node: Node, em: _Emitter, x: Value, axis: int, transform: str) -> None:
    sizes = list(em.graph.type_of(x).shape)
    sizes[axis] = node.type.shape[axis]
    em.emit("Resize", [em.name_of(x), "", "", em.ints(sizes, f"resize_{node.id}_sizes")],
            [em.out(node)], mode="linear", coordinate_transformation_mode=transform)


def to_onnx(graph: Graph, opset: int = DEFAULT_OPSET, seed: int = 0) -> onnx.ModelProto:
    """The graph as an ONNX model at `opset` (default opset 20, domain ai.onnx).

    Weights without data get the values `superopt.ir.interpret(graph, seed=seed)` draws for
    them, so the model and the reference interpreter compute the same function.
    """
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ExportError(f"opset {opset} is not supported; expected {MIN_OPSET}..{MAX_OPSET}")
    graph.lint()
    em = _Emitter(graph, opset, seed)
    clips, absorbed = _clips(graph)
    resizes, taken_in = _resizes(graph)
    for node in graph.nodes:
        if node.id in absorbed or node.id in taken_in:
            continue  # a relu or maximum a Clip takes in, a gather or product a Resize does
        clip = clips.get(node.id)
        if clip is not None:
            _emit_clip(node, em, *clip)
            continue
        resize = resizes.get(node.id)
        if resize is not None:
            _emit_resize(node, em, *resize)
            continue
        LOWERING.get(node.op)(node, em)
    inputs = [_value_info(n.attr("name"), n.type.dtype, n.type.shape) for n in graph.inputs]
    outputs: list[onnx.ValueInfoProto] = []
    taken: set[str] = {n.attr("name") for n in graph.nodes if n.is_named_source}
    for i, v in enumerate(graph.outputs):
        name = em.name_of(v)
        # A graph output must be a distinct name that no input or initializer holds.
        if name in taken:
            alias = em.tmp(f"output_{i}")
            em.emit("Identity", [name], [alias])
            name = alias
        taken.add(name)
        t = graph.type_of(v)
        outputs.append(_value_info(name, t.dtype, t.shape))
    # Weights only a Resize's gathers read (their indices and weights) are not written:
    # onnxruntime would drop each with a warning.
    read = {i for n in em.nodes for i in n.input} | {o.name for o in outputs}
    body = helper.make_graph(em.nodes, graph.name or "superopt", inputs, outputs,
                             initializer=[t for t in em.initializers if t.name in read])
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="superopt")
    # Readers older than this IR version refuse the file; onnxruntime 1.17+ reads 9.
    model.ir_version = min(model.ir_version, 9)
    return model


# Protobuf refuses to serialise a message over 2 GiB, so a model with more initializer
# bytes than this keeps them in one side file (ONNX external data) beside the model.
EXTERNAL_DATA_ABOVE = 1 << 30


def save_onnx(graph: Graph, path: str | os.PathLike[str], opset: int | None = None,
              seed: int = 0, external_data_above: int = EXTERNAL_DATA_ABOVE) -> Path:
    """Write `graph` as an ONNX file (checked by `onnx.checker`) and return the path.

    Initializers over `external_data_above` bytes in all go to `PATH.data` beside the file
    (the model then needs that file next to it to load)."""
    return write_model(to_onnx(graph, opset or DEFAULT_OPSET, seed), path,
                       external_data_above)


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The bytes of the model's initializers (what decides whether it fits protobuf)."""
    return sum(len(t.raw_data) for t in model.graph.initializer)


def write_model(model: onnx.ModelProto, path: str | os.PathLike[str],
                external_data_above: int = EXTERNAL_DATA_ABOVE) -> Path:
    """`model` checked and written to `path`, its initializers in `PATH.data` beside it
    when they are over `external_data_above` bytes (`save_onnx`)."""
    path = Path(path)
    if initializer_bytes(model) <= external_data_above:
        onnx.checker.check_model(model)
        onnx.save_model(model, str(path))
        return path
    onnx.save_model(model, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=f"{path.name}.data",
                    size_threshold=1024)
    onnx.checker.check_model(str(path))  # by path: the checker reads the side file
    return path
