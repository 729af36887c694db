"""Exact semantics modulo p = 2**31 - 1: every value is a residue in [0, p).

Multi-linear and movement ops are exact images of their real definitions (division by a
constant n becomes multiplication by n's inverse mod p). Non-linear ops get fixed,
deterministic integer definitions chosen so fingerprints are exact and reproducible, and
so that the identities that hold over the reals for *every* activation (commuting with
movement ops, applying element by element) still hold. The definitions:

- centred value c(x): x if x <= (p-1)/2 else x - p (a residue read as a signed integer).
- relu(x) = max(c(x), 0) mod p; fused activations use the same definitions.
- tanh(x) = T(x), a fixed pseudo-random odd function (T(-x) = -T(x)); erf the same with
  another salt. sigmoid(x) = (1 + T(x / 2)) / 2 and gelu(x) = x (1 + E(x)) / 2, so the
  real identities sigmoid(x) = (1 + tanh(x/2)) / 2, sigmoid(x) + sigmoid(-x) = 1 and
  gelu(x) - gelu(-x) = x hold exactly.
- pool2d_max: the maximum of c(x) over the window (padding never wins).
- pool2d_avg: window sum times the inverse of the divisor (linear, as over the reals).
- reduce_mean: sum times the inverse of the count.
- softmax: 7^x / sum 7^x (7 is a primitive root of p); the sum's inverse mod p.
- layer_norm / batch_norm: centring and scaling are exact; 1/sqrt(var + eps) is a fixed
  pseudo-random function R(var) (eps has no exact meaning and is ignored).
- lrn: x * L(sum of squares over the channel window), L pseudo-random.
- embedding: table[ids] (ids are plain integers, not residues).
- neg, sub, expand, gather: exact (linear or movement); gather's indices are plain ints.
- exp(x) = 7^c(x) (the centred value as exponent, taken mod p - 1, the order of 7), so
  exp(a + b) = exp(a) * exp(b) and exp(-x) = 1 / exp(x) hold exactly whenever c(a) + c(b)
  does not wrap around p (no map from residues under + to residues under * can make it
  hold always: the two groups have coprime orders p and p - 1); softmax and attention use
  the same exp.
- recip(x) = x^(p-2) (the inverse mod p, 0 for 0) and div(a, b) = a * recip(b), so
  div(x, y) = x * recip(y) holds exactly; pow with a non-negative integer exponent is the
  exact power, with a negative one the power of the inverse.
- silu(x) = x * sigmoid(x) with sigmoid as above.
- rsqrt(x) = recip(sqrt(x)) (the R of the norms), so rsqrt = 1 / sqrt holds exactly.
- log, sqrt, erf, sin: fixed pseudo-random functions
  (erf and sin odd, cos even); pow with a non-integer exponent: one salted by the exponent.
- maximum, minimum, eq, lt, gt, reduce_max: on centred values; comparisons give 0/1.
- where(c, a, b): a where c != 0.  cast: float to float is the identity, an integer to a
  float its residue, a float to an integer its centred value, anything to bool c != 0.
- iota, tri_mask: plain integers (0/1 for the mask).
- rms_norm: x * R(mean(x^2)) * weight (eps ignored, as for layer_norm).
- attention: scores q k^T times the scale's residue (its rational approximation with a
  denominator below 2^20), softmax as above with causally masked positions excluded from
  the sum, times v.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from superopt.ir import kernels
from superopt.ir.graph import Node
from superopt.ir.interpret import ModPSemantics, register_semantics
from superopt.ir.kernels import P, centred, mix, modp_inv, odd_mix
from superopt.ir.opdef import OpDef
from superopt.ir.ops.constants import const_iconv_value
from superopt.ir.ops.pool import avg_divisor, pool_geometry
from superopt.ir.ops.reduce import lrn_square_sum
from superopt.ir.rules import RuleTable

Arr = np.ndarray
ModPRule = Callable[[tuple[Arr, ...], dict[str, Any], Node], tuple[Arr, ...]]

TABLE: RuleTable[ModPRule] = RuleTable("modp", needs=lambda op: not op.named_source)

INV2 = modp_inv(2)
SALT_TANH, SALT_ERF, SALT_ERF_TANH, SALT_RSQRT, SALT_LRN = 1, 2, 3, 4, 5
SALT_LOG, SALT_SQRT, SALT_ERF1, SALT_SIN, SALT_COS, SALT_POW = 6, 7, 8, 9, 10, 11
SALT_ACOS = 12


def exp7(x: Arr) -> Arr:
    """7 ** c(x) mod p: the exponential of the centred value (negative: the inverse)."""
    return pow_mod(7, centred(x) % (P - 1))


def pow_mod(base: Arr | int, exp: Arr) -> Arr:
    """Element-wise base ** exp mod p by square-and-multiply (exponents < 2**31)."""
    exp = np.asarray(exp, dtype=np.int64)
    result = np.ones_like(exp)
    b = np.broadcast_to(np.asarray(base, dtype=np.int64) % P, exp.shape).copy()
    e = exp.copy()
    while np.any(e):
        odd = (e & 1).astype(bool)
        result = np.where(odd, result * b % P, result)
        b = b * b % P
        e >>= 1
    return result


def relu(x: Arr) -> Arr:
    return np.maximum(centred(x), 0) % P


def tanh(x: Arr) -> Arr:
    return odd_mix(x, SALT_TANH)


def sigmoid(x: Arr) -> Arr:
    return (1 + tanh(x * INV2 % P)) * INV2 % P


def activation(x: Arr, name: str) -> Arr:
    return {"none": lambda v: v, "relu": relu, "sigmoid": sigmoid, "tanh": tanh}[name](x)


def rsqrt(x: Arr) -> Arr:
    # the inverse of sqrt's pseudo-random value, so rsqrt(x) = 1 / sqrt(x) holds exactly
    return recip(sqrt(x))


def _reg(name: str) -> Callable[[ModPRule], ModPRule]:
    return TABLE.register(name)  # type: ignore[return-value]


@_reg("matmul")
def _matmul(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    return (activation(kernels.modp_matmul(xs[0], xs[1]), a["activation"]),)


@_reg("linear")
def _linear(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, w, b = xs
    return (activation((kernels.modp_matmul(x, w.T) + b) % P, a["activation"]),)


@_reg("conv2d")
def _conv(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, w = xs
    pads = kernels.resolve_pads(a["padding"], x.shape[2:], w.shape[2:], a["stride"], a["dilation"])
    y = kernels.conv2d(x, w, a["stride"], pads, a["dilation"], a["groups"], kernels.modp_matmul)
    return (activation(y % P, a["activation"]),)


TABLE.register("ewadd", lambda xs, a, n: ((xs[0] + xs[1]) % P,))
TABLE.register("ewmul", lambda xs, a, n: (xs[0] * xs[1] % P,))
TABLE.register("smul", lambda xs, a, n: (xs[0] * xs[1] % P,))
TABLE.register("relu", lambda xs, a, n: (relu(xs[0]),))
TABLE.register("tanh", lambda xs, a, n: (tanh(xs[0]),))
TABLE.register("sigmoid", lambda xs, a, n: (sigmoid(xs[0]),))


@_reg("gelu")
def _gelu(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    salt = SALT_ERF if a["approximate"] == "none" else SALT_ERF_TANH
    x = xs[0]
    return (x * ((1 + odd_mix(x, salt)) % P) % P * INV2 % P,)


def _via_reference(op: OpDef) -> ModPRule:
    # Movement ops only move, copy or zero-fill, so the numpy reference is exact on ints.
    return lambda xs, a, n: tuple(np.asarray(y, dtype=np.int64) for y in op.reference(xs, a))


def _register_movement() -> None:
    from superopt.ir.opdef import MOVEMENT, get_op, ops_with

    for name in ops_with(MOVEMENT):
        TABLE.register(name, _via_reference(get_op(name)))


_register_movement()


@_reg("pool2d_avg")
def _avg(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x = xs[0]
    pads, _, _ = pool_geometry(x.shape, a)
    total = kernels.windows(x, a["kernel"], a["stride"], (1, 1), pads).sum(axis=(-1, -2)) % P
    div = avg_divisor(x.shape, a)
    inv = np.vectorize(modp_inv, otypes=[np.int64])(div)
    return (activation(total * inv % P, a["activation"]),)


@_reg("pool2d_max")
def _max(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x = centred(xs[0])
    pads, _, _ = pool_geometry(x.shape, a)
    win = kernels.windows(x, a["kernel"], a["stride"], (1, 1), pads, fill=-P)
    return (activation(win.max(axis=(-1, -2)) % P, a["activation"]),)


def _sum(x: Arr, axes: tuple[int, ...], keepdims: bool) -> Arr:
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=np.int64) % P


TABLE.register("reduce_sum", lambda xs, a, n: (_sum(xs[0], a["axes"], a["keepdims"]),))


@_reg("reduce_mean")
def _mean(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    count = int(np.prod([xs[0].shape[i] for i in a["axes"]]))
    return (_sum(xs[0], a["axes"], a["keepdims"]) * modp_inv(count) % P,)


@_reg("softmax")
def _softmax(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    e = exp7(xs[0])
    s = _sum(e, (a["axis"],), True)
    return (e * pow_mod(s, np.full_like(s, P - 2)) % P,)


def _normalise(x: Arr, axes: tuple[int, ...]) -> tuple[Arr, Arr]:
    count = int(np.prod([x.shape[i] for i in axes]))
    inv = modp_inv(count)
    d = (x - _sum(x, axes, True) * inv % P) % P
    var = _sum(d * d % P, axes, True) * inv % P
    return d, rsqrt(var)


@_reg("layer_norm")
def _layer_norm(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, g, b = xs
    d, r = _normalise(x, tuple(range(a["axis"], x.ndim)))
    return ((d * r % P * g % P + b) % P,)


@_reg("batch_norm")
def _batch_norm(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, scale, bias, mean, var = xs
    shape = (1, -1) + (1,) * (x.ndim - 2)
    s = (scale * rsqrt(var) % P).reshape(shape)
    return (((x - mean.reshape(shape)) % P * s % P + bias.reshape(shape)) % P,)


@_reg("lrn")
def _lrn(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x = xs[0]
    s = lrn_square_sum(x * x % P, a["size"]) % P
    return (x * mix(s, SALT_LRN) % P,)


@_reg("embedding")
def _embedding(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    ids, table = xs
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise IndexError(f"embedding: index out of range [0, {table.shape[0]})")
    return (table[ids],)


@_reg("const_pool")
def _const_pool(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    return (np.full((a["channels"], 1, a["kh"], a["kw"]), modp_inv(a["kh"] * a["kw"]),
                    dtype=np.int64),)


TABLE.register("const_iconv", lambda xs, a, n: (const_iconv_value(a).astype(np.int64),))
TABLE.register("const_imm", lambda xs, a, n: (np.eye(a["n"], dtype=np.int64),))
TABLE.register("const_one", lambda xs, a, n: (np.ones(a["shape"], dtype=np.int64),))

# ---- the transformer-era ops -------------------------------------------------------------

def recip(x: Arr) -> Arr:
    return pow_mod(x, np.full(np.shape(x), P - 2, dtype=np.int64))


def sqrt(x: Arr) -> Arr:
    return mix(x, SALT_SQRT)


def int_pow(x: Arr, e: int) -> Arr:
    base = recip(x) if e < 0 else np.asarray(x, dtype=np.int64) % P
    return pow_mod(base, np.full(np.shape(x), abs(e), dtype=np.int64))


def scalar_residue(value: float) -> int:
    """A float attribute as a residue: its rational approximation num/den -> num * den^-1."""
    from fractions import Fraction

    f = Fraction(value).limit_denominator(1 << 20)
    return f.numerator % P * modp_inv(f.denominator) % P


def _pow(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, e = xs[0], float(a["exponent"])
    if e.is_integer():
        return (int_pow(x, int(e)),)
    if e == 0.5:
        return (sqrt(x),)
    if e == -0.5:
        return (rsqrt(x),)
    return (mix((x + scalar_residue(e)) % P, SALT_POW),)


def _compare(fn: Callable[[Arr, Arr], Arr]) -> ModPRule:
    return lambda xs, a, n: (fn(centred(xs[0]), centred(xs[1])).astype(np.int64),)


def _cast(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    # Plain integers within (-p/2, p/2) are their own centred values, so the same rule
    # serves integer and residue inputs without knowing the input's dtype.
    from superopt.ir.types import DType

    x, to = np.asarray(xs[0], dtype=np.int64), DType.parse(a["to"])
    if to == DType.BOOL:
        return ((x != 0).astype(np.int64),)
    return (x % P if to.is_float else centred(x),)


TABLE.register("cast", _cast)
TABLE.register("neg", lambda xs, a, n: ((-xs[0]) % P,))
TABLE.register("sub", lambda xs, a, n: ((xs[0] - xs[1]) % P,))
TABLE.register("exp", lambda xs, a, n: (exp7(xs[0]),))
TABLE.register("log", lambda xs, a, n: (mix(xs[0], SALT_LOG),))
TABLE.register("sqrt", lambda xs, a, n: (sqrt(xs[0]),))
TABLE.register("rsqrt", lambda xs, a, n: (rsqrt(xs[0]),))
TABLE.register("recip", lambda xs, a, n: (recip(xs[0]),))
TABLE.register("div", lambda xs, a, n: (xs[0] * recip(xs[1]) % P,))
TABLE.register("erf", lambda xs, a, n: (odd_mix(xs[0], SALT_ERF1),))
TABLE.register("silu", lambda xs, a, n: (xs[0] * sigmoid(xs[0]) % P,))
TABLE.register("sin", lambda xs, a, n: (odd_mix(xs[0], SALT_SIN),))
TABLE.register("cos", lambda xs, a, n: (mix(np.abs(centred(xs[0])), SALT_COS),))
TABLE.register("acos", lambda xs, a, n: (mix(xs[0], SALT_ACOS),))  # neither odd nor even
TABLE.register("pow", _pow)
TABLE.register("maximum", lambda xs, a, n: (np.maximum(centred(xs[0]), centred(xs[1])) % P,))
TABLE.register("minimum", lambda xs, a, n: (np.minimum(centred(xs[0]), centred(xs[1])) % P,))
TABLE.register("eq", _compare(np.equal))
TABLE.register("lt", _compare(np.less))
TABLE.register("gt", _compare(np.greater))
TABLE.register("where", lambda xs, a, n: (np.where(np.asarray(xs[0]) != 0, xs[1], xs[2]),))
TABLE.register("reduce_max", lambda xs, a, n: (
    np.max(centred(xs[0]), axis=a["axes"], keepdims=a["keepdims"]) % P,))
TABLE.register("topk", lambda xs, a, n: _topk(xs[0], a))
TABLE.register("argmax", lambda xs, a, n: (
    np.argmax(centred(xs[0]), axis=a["axes"][0], keepdims=a["keepdims"]).astype(np.int64),))


def _topk(x: Arr, a: dict[str, Any]) -> tuple[Arr, ...]:
    from superopt.ir.ops.reduce import topk_ref

    vals, idx = topk_ref(centred(x), a["k"], a["axis"], a["largest"])
    return vals % P, idx


@_reg("gather")
def _gather(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    from superopt.ir.ops.index import gather_ref

    return (gather_ref(np.asarray(xs[0], dtype=np.int64), xs[1], a["axis"]),)


@_reg("iota")
def _iota(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    from superopt.ir.ops.index import iota_value

    return (iota_value({**a, "dtype": "i64"}),)


@_reg("tri_mask")
def _tri_mask(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    from superopt.ir.ops.index import tri_mask_value

    return (tri_mask_value(a),)


@_reg("rms_norm")
def _rms_norm(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    x, w = xs
    axes = tuple(range(a["axis"], x.ndim))
    count = int(np.prod([x.shape[i] for i in axes]))
    ms = _sum(x * x % P, axes, True) * modp_inv(count) % P
    return (x * rsqrt(ms) % P * w % P,)


@_reg("attention")
def _attention(xs: tuple[Arr, ...], a: dict[str, Any], n: Node) -> tuple[Arr, ...]:
    q, k, v = xs
    group = q.shape[-3] // k.shape[-3]
    if group > 1:
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    s = kernels.modp_matmul(q, np.swapaxes(k, -1, -2)) * scalar_residue(a["scale"]) % P
    e = exp7(s)
    if a["causal"]:
        e = e * np.tril(np.ones(e.shape[-2:], dtype=np.int64)) % P
    total = _sum(e, (e.ndim - 1,), True)
    p = e * recip(total) % P
    return (kernels.modp_matmul(p, v) % P,)


MODP = ModPSemantics(TABLE)
register_semantics("modp", MODP)
