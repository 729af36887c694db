"""Multi-linear ops (matmul, conv2d, element-wise add/mul, scalar multiplication) and the
affine `linear` layer (a matmul with its bias fused, as torch's and ONNX's dense layers)."""

from __future__ import annotations

import numpy as np

from superopt.ir import kernels
from superopt.ir.errors import ShapeError
from superopt.ir.opdef import ELEMENTWISE, LINEAR, Attrs, AttrSpec, OpDef, register_op
from superopt.ir.ops._common import (
    activation_attr,
    broadcast,
    expect_min_rank,
    expect_rank,
    expect_same_dtype,
    logistic,
    padding_attr,
    pair_attr,
)
from superopt.ir.types import TensorType


def apply_activation(x: np.ndarray, activation: str) -> np.ndarray:
    if activation == "none":
        return x
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "sigmoid":
        return logistic(x)
    if activation == "tanh":
        return np.tanh(x)
    raise ValueError(f"unknown activation {activation!r}")


# ---- matmul -------------------------------------------------------------------------

def _matmul_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    a, b = ts
    expect_min_rank("matmul", 0, a, 2)
    expect_min_rank("matmul", 1, b, 2)
    dtype = expect_same_dtype("matmul", ts)
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError("matmul", 1, f"dim -2 of size {a.shape[-1]} (input 0's dim -1)",
                         f"{b} with dim -2 of size {b.shape[-2]}")
    batch = broadcast("matmul", a.shape[:-2], b.shape[:-2])
    return (TensorType((*batch, a.shape[-2], b.shape[-1]), dtype),)


def _matmul_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (apply_activation(np.matmul(xs[0], xs[1]), attrs["activation"]),)


MATMUL = register_op(OpDef(
    name="matmul", num_inputs=2, shape=_matmul_shape, reference=_matmul_ref,
    attrs=(activation_attr(),), linear_in=(0, 1), input_names=("a", "b"),
    doc="Batched matrix product (..., M, K) @ (..., K, N), batch dims broadcast.",
))


# ---- linear (dense layer with a fused bias) --------------------------------------------

def _linear_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, w, b = ts
    expect_min_rank("linear", 0, x, 2)
    expect_rank("linear", 1, w, 2)
    expect_rank("linear", 2, b, 1)
    dtype = expect_same_dtype("linear", ts)
    if x.shape[-1] != w.shape[1]:
        raise ShapeError("linear", 1, f"dim 1 of size {x.shape[-1]} (input 0's dim -1)", str(w))
    if b.shape[0] != w.shape[0]:
        raise ShapeError("linear", 2, f"size {w.shape[0]} (input 1's dim 0)", str(b))
    return (TensorType((*x.shape[:-1], w.shape[0]), dtype),)


def _linear_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, w, b = xs
    return (apply_activation(np.matmul(x, w.T) + b, attrs["activation"]),)


# Affine, not multi-linear (the bias term), so no `linear_in`: PET and the multi-linear
# checks treat it like any other non-linear op.
LINEAR_OP = register_op(OpDef(
    name="linear", num_inputs=3, shape=_linear_shape, reference=_linear_ref,
    attrs=(activation_attr(),), input_names=("x", "w", "b"),
    doc="Dense layer x @ w^T + b: x (..., K), weight (N, K) stored output-major as torch's "
        "nn.Linear, bias (N,).",
))


# ---- conv2d -------------------------------------------------------------------------

def conv_geometry(x: TensorType, w: TensorType, attrs: Attrs) -> tuple[kernels.Pads, int, int]:
    kh, kw = w.shape[2], w.shape[3]
    pads = kernels.resolve_pads(attrs["padding"], (x.shape[2], x.shape[3]), (kh, kw),
                                attrs["stride"], attrs["dilation"])
    oh = kernels.out_size(x.shape[2], kh, attrs["stride"][0], attrs["dilation"][0], pads[0], pads[1])
    ow = kernels.out_size(x.shape[3], kw, attrs["stride"][1], attrs["dilation"][1], pads[2], pads[3])
    return pads, oh, ow


def _conv_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, w = ts
    expect_rank("conv2d", 0, x, 4)
    expect_rank("conv2d", 1, w, 4)
    dtype = expect_same_dtype("conv2d", ts)
    g = attrs["groups"]
    if x.shape[1] % g:
        raise ShapeError("conv2d", 0, f"channels divisible by groups={g}", str(x))
    if w.shape[1] * g != x.shape[1]:
        raise ShapeError("conv2d", 1, f"weight dim 1 == in_channels/groups = {x.shape[1] // g}",
                         f"{w}")
    if w.shape[0] % g:
        raise ShapeError("conv2d", 1, f"out channels divisible by groups={g}", str(w))
    _, oh, ow = conv_geometry(x, w, attrs)
    if oh < 1 or ow < 1:
        raise ShapeError("conv2d", 0, f"spatial size large enough for a {w.shape[2]}x{w.shape[3]} "
                         "kernel", f"{x} (output would be {oh}x{ow})")
    return (TensorType((x.shape[0], w.shape[0], oh, ow), dtype),)


def _conv_ref(xs: tuple[np.ndarray, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, w = xs
    pads = kernels.resolve_pads(attrs["padding"], x.shape[2:], w.shape[2:], attrs["stride"],
                                attrs["dilation"])
    y = kernels.conv2d(x, w, attrs["stride"], pads, attrs["dilation"], attrs["groups"])
    return (apply_activation(y, attrs["activation"]),)


CONV2D = register_op(OpDef(
    name="conv2d", num_inputs=2, shape=_conv_shape, reference=_conv_ref,
    attrs=(
        pair_attr("stride"),
        padding_attr("valid"),
        pair_attr("dilation"),
        AttrSpec("groups", "int", 1, check=lambda g: None if g >= 1 else "groups must be >= 1"),
        activation_attr(),
    ),
    linear_in=(0, 1), input_names=("x", "w"),
    doc="2-D convolution, NCHW input and OIHW weight (O, C/groups, kh, kw).",
))


# ---- element-wise add / mul, scalar mul ---------------------------------------------

def _ew_shape(op: str):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        dtype = expect_same_dtype(op, ts)
        return (TensorType(broadcast(op, ts[0].shape, ts[1].shape), dtype),)
    return rule


EWADD = register_op(OpDef(
    name="ewadd", num_inputs=2, shape=_ew_shape("ewadd"),
    reference=lambda xs, a: (xs[0] + xs[1],),
    traits=frozenset({ELEMENTWISE, LINEAR}), input_names=("a", "b"),
    doc="Element-wise sum (numpy broadcasting).",
))

EWMUL = register_op(OpDef(
    name="ewmul", num_inputs=2, shape=_ew_shape("ewmul"),
    reference=lambda xs, a: (xs[0] * xs[1],),
    traits=frozenset({ELEMENTWISE}), linear_in=(0, 1), input_names=("a", "b"),
    doc="Element-wise product (numpy broadcasting).",
))


def _smul_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    x, s = ts
    if s.rank != 0:
        raise ShapeError("smul", 1, "a scalar (rank 0)", str(s))
    return (TensorType(x.shape, expect_same_dtype("smul", ts)),)


SMUL = register_op(OpDef(
    name="smul", num_inputs=2, shape=_smul_shape,
    reference=lambda xs, a: (xs[0] * xs[1],),
    traits=frozenset({ELEMENTWISE}), linear_in=(0, 1), input_names=("x", "scalar"),
    doc="Multiply by a rank-0 scalar tensor (TASO's smul).",
))
