"""Reductions and normalisations: reduce_sum/mean/max, argmax, softmax, layer_norm,
batch_norm, lrn, rms_norm."""

from __future__ import annotations

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import (
    LINEAR,
    NONLINEAR,
    REDUCTION,
    Attrs,
    AttrSpec,
    AttrValue,
    OpDef,
    register_op,
)
from superopt.ir.ops._common import expect_float, expect_rank, norm_axis
from superopt.ir.types import DType, TensorType


def _axes_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    rank = ts[0].rank
    axes = attrs["axes"] or tuple(range(rank))
    attrs["axes"] = tuple(sorted({norm_axis("reduce", a, rank) for a in axes}))
    return attrs


def _reduce_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    axes = set(attrs["axes"])
    if any(not 0 <= a < x.rank for a in axes):
        raise ShapeError("reduce", 0, f"rank > {max(axes)}", str(x))
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return (x.with_shape(shape),)


_REDUCE_ATTRS = (AttrSpec("axes", "ints", (), doc="() reduces every axis"),
                 AttrSpec("keepdims", "bool", False))

REDUCE_SUM = register_op(OpDef(
    name="reduce_sum", num_inputs=1, shape=_reduce_shape,
    reference=lambda xs, a: (np.sum(xs[0], axis=a["axes"], keepdims=a["keepdims"]),),
    attrs=_REDUCE_ATTRS, traits=frozenset({REDUCTION, LINEAR}), canonicalize=_axes_canon))

REDUCE_MEAN = register_op(OpDef(
    name="reduce_mean", num_inputs=1, shape=_reduce_shape,
    reference=lambda xs, a: (np.mean(xs[0], axis=a["axes"], keepdims=a["keepdims"]),),
    attrs=_REDUCE_ATTRS, traits=frozenset({REDUCTION, LINEAR}), canonicalize=_axes_canon))


def _axis_canon(ts: tuple[TensorType, ...], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
    attrs["axis"] = norm_axis("axis", attrs["axis"], ts[0].rank)
    return attrs


def _same_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        expect_float(op, 0, ts[0])
        return (ts[0],)
    return rule


def softmax_ref(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


SOFTMAX = register_op(OpDef(
    name="softmax", num_inputs=1, shape=_same_shape("softmax"),
    reference=lambda xs, a: (softmax_ref(xs[0], a["axis"]),),
    attrs=(AttrSpec("axis", "int", -1),), traits=frozenset({REDUCTION, NONLINEAR}),
    canonicalize=_axis_canon))


def _ln_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, g, b = ts
    expect_float("layer_norm", 0, x)
    norm = x.shape[attrs["axis"]:]
    for i, t in ((1, g), (2, b)):
        if t.shape != norm:
            raise ShapeError("layer_norm", i, f"shape {list(norm)} (normalised dims)", str(t))
    return (x,)


def layer_norm_ref(x: np.ndarray, g: np.ndarray, b: np.ndarray, axis: int, eps: float) -> np.ndarray:
    axes = tuple(range(axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


LAYER_NORM = register_op(OpDef(
    name="layer_norm", num_inputs=3, shape=_ln_shape,
    reference=lambda xs, a: (layer_norm_ref(*xs, a["axis"], a["eps"]),),
    attrs=(AttrSpec("axis", "int", -1, doc="first normalised dim"), AttrSpec("eps", "float", 1e-5)),
    traits=frozenset({REDUCTION, NONLINEAR}), canonicalize=_axis_canon,
    input_names=("x", "gamma", "beta")))


def _bn_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x = ts[0]
    expect_float("batch_norm", 0, x)
    if x.rank < 2:
        raise ShapeError("batch_norm", 0, "rank >= 2 (channels on dim 1)", str(x))
    for i, t in enumerate(ts[1:], start=1):
        if t.shape != (x.shape[1],):
            raise ShapeError("batch_norm", i, f"shape [{x.shape[1]}] (channels)", str(t))
    return (x,)


def batch_norm_ref(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                   var: np.ndarray, eps: float) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    s = scale / np.sqrt(var + eps)
    return (x - mean.reshape(shape)) * s.reshape(shape) + bias.reshape(shape)


BATCH_NORM = register_op(OpDef(
    name="batch_norm", num_inputs=5, shape=_bn_shape,
    reference=lambda xs, a: (batch_norm_ref(*xs, a["eps"]),),
    attrs=(AttrSpec("eps", "float", 1e-5),), traits=frozenset({NONLINEAR}),
    input_names=("x", "scale", "bias", "mean", "var"),
    doc="Inference batch norm over dim 1: (x - mean) * scale / sqrt(var + eps) + bias "
        "(affine in x, not linear)."))


def _lrn_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    expect_rank("lrn", 0, ts[0], 4)
    expect_float("lrn", 0, ts[0])
    return (ts[0],)


def lrn_square_sum(x2: np.ndarray, size: int) -> np.ndarray:
    """Sum of squares over a window of `size` channels centred on each channel (ONNX)."""
    c = x2.shape[1]
    lo, hi = (size - 1) // 2, size // 2
    padded = np.pad(x2, ((0, 0), (lo, hi), (0, 0), (0, 0)))
    return sum(padded[:, i:i + c] for i in range(size))


def _lrn_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = xs[0]
    s = lrn_square_sum(x * x, attrs["size"])
    return (x / (attrs["bias"] + attrs["alpha"] / attrs["size"] * s) ** attrs["beta"],)


LRN = register_op(OpDef(
    name="lrn", num_inputs=1, shape=_lrn_shape, reference=_lrn_ref,
    attrs=(AttrSpec("size", "int"), AttrSpec("alpha", "float", 1e-4),
           AttrSpec("beta", "float", 0.75), AttrSpec("bias", "float", 1.0)),
    traits=frozenset({NONLINEAR}),
    doc="Local response normalisation across channels (AlexNet, GoogLeNet; ONNX LRN)."))


REDUCE_MAX = register_op(OpDef(
    name="reduce_max", num_inputs=1, shape=_reduce_shape,
    reference=lambda xs, a: (np.max(xs[0], axis=a["axes"], keepdims=a["keepdims"]),),
    attrs=_REDUCE_ATTRS, traits=frozenset({REDUCTION, NONLINEAR}), canonicalize=_axes_canon,
    doc="Maximum over axes (softmax's stabiliser, max pooling over sequences)."))


def _argmax_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    if x.rank == 0:
        raise ShapeError("argmax", 0, "rank >= 1", str(x))
    (out,) = _reduce_shape(ts, attrs)
    return (TensorType(out.shape, DType.I64),)


def argmax_ref(x: np.ndarray, axis: int, keepdims: bool) -> np.ndarray:
    """The index of the first greatest element along `axis` (numpy's, torch's and ONNX
    ArgMax's default tie rule: the lowest index wins)."""
    return np.argmax(np.asarray(x), axis=axis, keepdims=keepdims).astype(np.int64)


def _one_axis(axes: AttrValue) -> str | None:
    return None if len(axes) == 1 else "exactly one axis"


# Decoder classifiers and CLIP's text tower pick a row per sequence by the argmax of a
# mask or of the token ids; the chosen index feeds a gather. Its attributes are the
# reductions' (one axis), so every table's reduction rule serves it.
ARGMAX = register_op(OpDef(
    name="argmax", num_inputs=1, shape=_argmax_shape,
    reference=lambda xs, a: (argmax_ref(xs[0], a["axes"][0], a["keepdims"]),),
    attrs=(AttrSpec("axes", "ints", check=_one_axis, doc="the one axis searched"),
           AttrSpec("keepdims", "bool", False)),
    traits=frozenset({REDUCTION, NONLINEAR}), canonicalize=_axes_canon,
    doc="Index (i64) of the first maximum along one axis (torch.argmax, ONNX ArgMax)."))


def _topk_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    (x,) = ts
    if x.rank == 0:
        raise ShapeError("topk", 0, "rank >= 1", str(x))
    ax, k = attrs["axis"], attrs["k"]
    if not 0 <= ax < x.rank or k > x.shape[ax]:
        raise ShapeError("topk", 0, f"an axis {ax} of length >= k={k}", str(x))
    shape = tuple(k if d == ax else s for d, s in enumerate(x.shape))
    return (x.with_shape(shape), TensorType(shape, DType.I64))


def topk_ref(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """The k greatest (or least) along `axis`, in order, and their indices; equal values
    keep their order (the lower index first, as ONNX TopK specifies)."""
    x = np.asarray(x)
    # Negated in float64: no integer overflows at the most negative value.
    key = -x.astype(np.float64) if largest else x
    order = np.argsort(key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _k_positive(k: AttrValue) -> str | None:
    return None if k >= 1 else "k >= 1"


# Mixture-of-experts routers pick each token's k experts with it (Mixtral, Qwen-MoE,
# OLMoE, GPT-OSS), and a sort is a topk of every element.
TOPK = register_op(OpDef(
    name="topk", num_inputs=1, shape=_topk_shape,
    reference=lambda xs, a: topk_ref(xs[0], a["k"], a["axis"], a["largest"]),
    attrs=(AttrSpec("k", "int", check=_k_positive, doc="how many"),
           AttrSpec("axis", "int", -1),
           AttrSpec("largest", "bool", True, doc="the greatest first, else the least first")),
    num_outputs=2, traits=frozenset({NONLINEAR}), canonicalize=_axis_canon,
    doc="The k greatest (or least) values along an axis, in order, and their i64 indices "
        "(torch.topk/sort, ONNX TopK); ties keep the lower index first."))


def _rms_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, w = ts
    expect_float("rms_norm", 0, x)
    norm = x.shape[attrs["axis"]:]
    if w.shape != norm:
        raise ShapeError("rms_norm", 1, f"shape {list(norm)} (normalised dims)", str(w))
    return (x,)


def rms_norm_ref(x: np.ndarray, w: np.ndarray, axis: int, eps: float) -> np.ndarray:
    axes = tuple(range(axis, x.ndim))
    return x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps) * w


# Primitive, not decomposed: rules need it whole (its weight folds into the next matmul;
# it is invariant to scaling its input) and the simulator costs it as one fused reduction.
RMS_NORM = register_op(OpDef(
    name="rms_norm", num_inputs=2, shape=_rms_shape,
    reference=lambda xs, a: (rms_norm_ref(*xs, a["axis"], a["eps"]),),
    attrs=(AttrSpec("axis", "int", -1, doc="first normalised dim"), AttrSpec("eps", "float", 1e-6)),
    traits=frozenset({REDUCTION, NONLINEAR}), canonicalize=_axis_canon,
    input_names=("x", "weight"),
    doc="RMSNorm (Llama, T5): x / sqrt(mean(x^2) + eps) * weight over dims axis.."))
