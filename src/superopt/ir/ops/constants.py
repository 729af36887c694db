"""TASO's constant tensors: pooling kernel, identity conv kernel, identity matrix, ones."""

from __future__ import annotations

import numpy as np

from superopt.ir.errors import ShapeError
from superopt.ir.opdef import CONSTANT, SOURCE, Attrs, AttrSpec, OpDef, register_op
from superopt.ir.types import TensorType

_POS = lambda v: None if v >= 1 else "must be >= 1"  # noqa: E731
_TRAITS = frozenset({CONSTANT, SOURCE})


def _fixed(shape_of):
    def rule(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
        return (TensorType(shape_of(attrs)),)
    return rule


def const_pool_value(attrs: Attrs) -> np.ndarray:
    c, kh, kw = attrs["channels"], attrs["kh"], attrs["kw"]
    return np.full((c, 1, kh, kw), 1.0 / (kh * kw))


CONST_POOL = register_op(OpDef(
    name="const_pool", num_inputs=0,
    shape=_fixed(lambda a: (a["channels"], 1, a["kh"], a["kw"])),
    reference=lambda xs, a: (const_pool_value(a),),
    attrs=(AttrSpec("channels", "int", check=_POS), AttrSpec("kh", "int", check=_POS),
           AttrSpec("kw", "int", check=_POS)),
    traits=_TRAITS,
    doc="Depthwise averaging kernel (C, 1, kh, kw) of 1/(kh*kw): avg-pool = grouped conv."))


def _iconv_shape(ts: tuple[TensorType, ...], attrs: Attrs) -> tuple[TensorType, ...]:
    c, g, kh, kw = attrs["channels"], attrs["groups"], attrs["kh"], attrs["kw"]
    if c % g or kh % 2 == 0 or kw % 2 == 0:
        raise ShapeError("const_iconv", None, "channels divisible by groups and odd kh, kw",
                         f"channels={c} groups={g} kernel={kh}x{kw}")
    return (TensorType((c, c // g, kh, kw)),)


def const_iconv_value(attrs: Attrs) -> np.ndarray:
    c, g, kh, kw = attrs["channels"], attrs["groups"], attrs["kh"], attrs["kw"]
    w = np.zeros((c, c // g, kh, kw))
    for o in range(c):
        w[o, o % (c // g), kh // 2, kw // 2] = 1.0
    return w


CONST_ICONV = register_op(OpDef(
    name="const_iconv", num_inputs=0, shape=_iconv_shape,
    reference=lambda xs, a: (const_iconv_value(a),),
    attrs=(AttrSpec("channels", "int", check=_POS), AttrSpec("kh", "int", check=_POS),
           AttrSpec("kw", "int", check=_POS), AttrSpec("groups", "int", 1, check=_POS)),
    traits=_TRAITS,
    doc="Identity conv kernel: a same-padded conv with it returns its input."))

CONST_IMM = register_op(OpDef(
    name="const_imm", num_inputs=0, shape=_fixed(lambda a: (a["n"], a["n"])),
    reference=lambda xs, a: (np.eye(a["n"]),),
    attrs=(AttrSpec("n", "int", check=_POS),), traits=_TRAITS,
    doc="Identity matrix n x n (TASO's Imatmul)."))

CONST_ONE = register_op(OpDef(
    name="const_one", num_inputs=0, shape=_fixed(lambda a: tuple(a["shape"])),
    reference=lambda xs, a: (np.ones(a["shape"]),),
    attrs=(AttrSpec("shape", "ints"),), traits=_TRAITS,
    doc="All-ones tensor (TASO's Iewmul: identity of ewmul)."))
