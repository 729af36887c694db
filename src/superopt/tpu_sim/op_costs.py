"""Per-op cost rules and op facts: the table "tpu_cost" (`COST_RULES`).

Each entry is an `OpRule`: the op's cost rule and the facts about the op that the
compiler's passes read (`mxu`: the op runs a product on the MXU, a kernel's "hero";
`cheap`: priority fusion may duplicate it into several consumers; `reduction`: the IR's
REDUCTION trait). Read them through `op_rule(op)` (or `is_mxu_op`, `is_cheap_op`,
`is_reduction_op`), so the coverage test sees every op's facts with its rule.

Per op, a rule returns the op's work on the *padded* data its layouts imply: vector-unit
cycles (VPU arithmetic, EUP transcendentals, XLU cross-lane moves) and, for matmul and
conv2d, an implicit matrix product for the MXU. Kernel statistics sum these over a
kernel's members (`kernel_time`).

Per-op work, in vector passes over the op's padded output (one pass = one vreg of 8 x 128
32-bit values: `vpu_op_cycles` for an add/mul/max, `transcendental_cycles` for exp, tanh,
erf, rsqrt, `xlu_cycles` for a cross-lane move), as the rules below charge it:

- element-wise ops by trait unless they have a row: a TRANSCENDENTAL op (exp, log, rsqrt,
  recip, tanh) 1 op + 1 transcendental; any other (ewadd, ewmul, smul, relu, sub, neg,
  maximum/minimum, eq/lt/gt, where, cast) 1 op, cheap. Rows: copy 1 op; batch_norm 2 ops
  (scale and shift, folded); sigmoid 2 + 2; silu 3 + 2; sqrt and div 2 + 1; erf 26 + 1,
  sin and cos 18 + 0 (polynomial expansions: no EUP instruction); pow by its exponent
  (`pow_work`); gelu 5 ops (6 for the tanh form) + 1.
- reduce_sum/mean/max: 1 op per *input* pass, plus an XLU pass when the reduction crosses
  lanes or an op when it crosses sublanes; softmax and layer_norm: two such reductions plus
  3 (softmax) or 6 (layer_norm) ops and a transcendental per output pass; rms_norm: one
  reduction plus 3 ops and a transcendental.
- attention: one flash-style MXU kernel (`_attention`): the two products as one `Gemm`
  per (batch, head), an online softmax over the scores on the vector unit, the scores
  never in HBM; key and value blocks re-read per query block (`OpRule.roles`).
- pooling: per window tap 1 op, plus an XLU shift when H or W sits in lanes; lrn: a
  window of `size` taps (XLU when channels sit in lanes) + 4 ops + 2 transcendentals.
- matmul, conv2d, linear (its bias add: 1 op): the MXU (below); a fused activation on the result; an XLU transpose of
  any operand or result whose minor dim is not the one the MXU streams (K of the lhs, N of
  the rhs and result, channels for convs). The MXU produces the result's lane dim as its
  columns: a conv whose result keeps its batch dim in lanes (XLA's weight-gradient convs)
  computes the transposed product, batch as columns, input stationary. A conv whose groups are so narrow that the MXU
  would idle (depthwise) runs on the VPU instead, at kh x kw x C/groups multiply-adds per
  output, when that is cheaper.
- transpose, reshape, layout: 1 op per pass when the two tiled dims stay in place (whole
  tiles move), else an XLU pass; bitcasts move nothing and never reach the cost model.
- concat, split, slice, pad, enlarge: 1 op per pass, plus an XLU pass when an offset on a
  tiled dim is not tile-aligned; slice and embedding read only the tiles they need;
  expand: 1 op per output pass.
- gather: 2 ops per output pass, reads only the rows it selects, each row its own DMA
  (`OpCost.dma_runs`: the per-run DMA cost); along the lane dim, the whole array and an
  XLU permute.
- iota, tri_mask and the other sources: free here (their bytes are the consumer's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from superopt.ir.analysis import COUNTS
from superopt.ir.graph import Node
from superopt.ir.opdef import ELEMENTWISE, OPS, REDUCTION, SOURCE, TRANSCENDENTAL, get_op, ops_with
from superopt.ir.rules import RuleTable
from superopt.ir.types import DType, TensorType
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.layout import (
    Layout,
    padded_bytes,
    permute_layout,
    row_major,
    sublane_tile,
    vregs,
)

MXU_ROWS = 8  # rows of an MXU operand block pad to the sublane tile


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


# ---- per-op rules -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Gemm:
    """`count` independent products (m x k) @ (k x n); `k_pad` is the contraction as the MXU
    sees it (per-tap padding for deep convs)."""

    count: int
    m: int
    n: int
    k: int
    k_pad: int

    @property
    def m_pad(self) -> int:
        return round_up(max(self.m, 1), MXU_ROWS)

    @property
    def n_pad(self) -> int:
        return round_up(max(self.n, 1), 128)

    @property
    def padded_flops(self) -> float:
        return 2.0 * self.count * self.m_pad * self.n_pad * self.k_pad


@dataclass(frozen=True, slots=True)
class OpCost:
    """Work of one op on padded data. `reads[i]` is the bytes the op reads of input i when it
    reads less than the whole padded array (slice, embedding), else None."""

    vector_cycles: float = 0.0
    gemm: Gemm | None = None
    reads: tuple[float | None, ...] = ()
    transposing: bool = False  # moves data across lanes or sublanes (layout change)
    # Separate DMA transfers the op issues besides the kernel's streamed blocks: a gather
    # fetches each selected row by itself, each paying the per-run DMA cost.
    dma_runs: float = 0.0


@dataclass(frozen=True, slots=True)
class OpView:
    """What a cost rule sees: the node, its operand types and every layout involved."""

    node: Node
    ins: tuple[TensorType, ...]
    in_layouts: tuple[Layout, ...]
    out_layouts: tuple[Layout, ...]
    hw: Hardware

    @property
    def out(self) -> TensorType:
        return self.node.types[0]

    def vout(self, i: int = 0) -> float:
        return vregs(self.node.types[i], self.out_layouts[i])

    def vin(self, i: int) -> float:
        return vregs(self.ins[i], self.in_layouts[i])

    @property
    def op(self) -> float:
        return self.hw.vpu_op_cycles

    @property
    def tr(self) -> float:
        return self.hw.transcendental_cycles

    @property
    def xl(self) -> float:
        return self.hw.xlu_cycles


CostRule = Callable[[OpView], OpCost]
# (attributes, result types, result layouts) -> the role of each operand slot of an MXU op
# ("lhs": streamed rows, "rhs": the stationary operand re-read per row block); slots past
# the tuple feed the epilogue ("stream").
RolesFn = Callable[[dict, tuple[TensorType, ...], tuple[Layout, ...]], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class OpRule:
    """One op's entry in the cost table: its rule and the facts the passes read."""

    cost: CostRule
    # Runs a product on the MXU: a kernel's "hero" (one per kernel, never duplicated).
    mxu: bool = False
    # Cheap enough for priority fusion to duplicate into several consumers' kernels.
    cheap: bool = False
    # The IR's REDUCTION trait (set by `_register`): a transposing producer is not fused
    # into a reduction.
    reduction: bool = False
    # An MXU op's operand roles (`RolesFn`); None for vector ops.
    roles: RolesFn | None = None


COST_RULES: RuleTable[OpRule] = RuleTable("tpu_cost")


def _lhs_rhs(attrs: dict, types: tuple[TensorType, ...], layouts: tuple[Layout, ...]
             ) -> tuple[str, ...]:
    return ("lhs", "rhs")


def _register(op: str, cost: CostRule, *, mxu: bool = False, cheap: bool = False,
              roles: RolesFn | None = None) -> None:
    COST_RULES.register(op, OpRule(cost, mxu, cheap, get_op(op).has(REDUCTION),
                                   (roles or _lhs_rhs) if mxu else None))


@cache
def op_rule(op: str) -> OpRule:
    """The cost table's entry of `op`: its cost rule and facts (the one accessor)."""
    return COST_RULES.get(op)


def is_mxu_op(op: str) -> bool:
    """Whether `op` runs on the MXU (matmul, conv2d, linear, attention): a kernel's hero."""
    return op_rule(op).mxu


def is_cheap_op(op: str) -> bool:
    """Whether priority fusion may duplicate `op` into several consumers."""
    return op_rule(op).cheap


def is_reduction_op(op: str) -> bool:
    return op_rule(op).reduction


def _act(v: OpView, activation: str) -> float:
    """Cycles per output vreg of a fused activation."""
    return {"none": 0.0, "relu": v.op, "sigmoid": 2 * v.tr + 2 * v.op,
            "tanh": v.tr + v.op}[activation]


def _free(v: OpView) -> OpCost:
    return OpCost()


for _op in sorted(name for name, opdef in OPS.items() if opdef.has(SOURCE)):
    _register(_op, _free)  # sources live in HBM: reading them is the consumer's cost


def _matmul(v: OpView) -> OpCost:
    a, b = v.ins
    out = v.out
    batch_a, batch_b = math.prod(a.shape[:-2]), math.prod(b.shape[:-2])
    batch_out = math.prod(out.shape[:-2])
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if batch_b == 1:  # a shared weight: fold every batch into the rows of one product
        gemm = Gemm(1, batch_a * m if batch_a == batch_out else batch_out * m, n, k,
                    round_up(max(k, 1), 128))
    else:
        gemm = Gemm(batch_out, m, n, k, round_up(max(k, 1), 128))
    cycles = v.vout() * _act(v, v.node.attr("activation"))
    # The MXU streams lhs rows with K in lanes and produces rows with N in lanes; an operand
    # or result in the other minor order goes through the XLU transpose unit.
    if v.in_layouts[0][0] != a.rank - 1:
        cycles += v.vin(0) * v.xl
    if v.in_layouts[1][0] != b.rank - 1:
        cycles += v.vin(1) * v.xl
    if v.out_layouts[0][0] != out.rank - 1:
        cycles += v.vout() * v.xl
    return OpCost(cycles, gemm)


_register("matmul", _matmul, mxu=True)


def _linear(v: OpView) -> OpCost:
    x, w, _ = v.ins
    out = v.out
    rows, k, n = math.prod(x.shape[:-1]), x.shape[-1], w.shape[0]
    gemm = Gemm(1, rows, n, k, round_up(max(k, 1), 128))
    # The bias add runs in the epilogue: one op per output pass, then any activation.
    cycles = v.vout() * (v.op + _act(v, v.node.attr("activation")))
    # As matmul: K of the lhs and N of the result in lanes; the (N, K) weight wants N in
    # lanes (stored transposed, as XLA lays out a dense layer's constant weight).
    if v.in_layouts[0][0] != x.rank - 1:
        cycles += v.vin(0) * v.xl
    if v.in_layouts[1][0] != 0:
        cycles += v.vin(1) * v.xl
    if v.out_layouts[0][0] != out.rank - 1:
        cycles += v.vout() * v.xl
    return OpCost(cycles, gemm)


_register("linear", _linear, mxu=True)


def conv_gemm(x: TensorType, w: TensorType, out: TensorType, groups: int,
              transposed: bool = False) -> Gemm:
    """Implicit GEMM of a conv: rows = output pixels, columns = output channels per group.

    Deep convs (>= 128 input channels per group) contract tap by tap, each tap padded to
    128; shallow ones fold the taps into the contraction (as XLA's TPU emitter does), so a
    3-channel 7x7 conv contracts over 147 -> 256 rather than 49 x 128. `transposed`: the
    product is computed the other way round, batch in the columns (see `_conv`).
    """
    o, cg, kh, kw = w.shape
    m = out.shape[0] * out.shape[2] * out.shape[3]
    k = cg * kh * kw
    k_pad = kh * kw * round_up(cg, 128) if cg >= 128 else round_up(max(k, 1), 128)
    if transposed:
        return Gemm(1, o * out.shape[2] * out.shape[3], out.shape[0], k, k_pad)
    return Gemm(groups, m, o // groups, k, k_pad)


def batch_in_lanes(out: TensorType, layout: Layout, groups: int) -> bool:
    """Whether a conv's result keeps its batch dim in lanes, so the MXU computes the
    transposed product (XLA does this for weight-gradient convs, whose "batch" is the
    forward conv's input features)."""
    return groups == 1 and bool(layout) and layout[0] == 0 and out.shape[0] > 1


def _conv(v: OpView) -> OpCost:
    x, w = v.ins
    out = v.out
    # The MXU produces the result's lane dim as its columns: output features normally, the
    # batch dim when the result keeps it in lanes (then no transpose of the result either).
    transposed = batch_in_lanes(out, v.out_layouts[0], v.node.attr("groups"))
    gemm = conv_gemm(x, w, out, v.node.attr("groups"), transposed)
    _, cg, kh, kw = w.shape
    # Each group is at least one grid step on the MXU (fill, drain, step overhead).
    per_group = v.hw.mxu_fill_cycles + v.hw.step_s * v.hw.clock_hz
    mxu_cycles = gemm.count * ((gemm.k_pad // 128) * (gemm.n_pad // 128)
                               * max(gemm.m_pad, v.hw.mxu_dim) / v.hw.mxus + per_group)
    vpu_cycles = v.vout() * kh * kw * cg * 2 * v.op
    cycles = v.vout() * _act(v, v.node.attr("activation"))
    # Feature dims belong in lanes: input and output channels minor, weights O-minor.
    if v.in_layouts[0][0] != 1:
        cycles += v.vin(0) * v.xl
    if v.in_layouts[1][0] != 0:
        cycles += v.vin(1) * v.xl
    if v.out_layouts[0][0] != 1 and not transposed:
        cycles += v.vout() * v.xl
    if vpu_cycles < mxu_cycles:  # depthwise-like convs run on the vector unit
        return OpCost(cycles + vpu_cycles, None)
    return OpCost(cycles, gemm)


def _conv_roles(attrs: dict, types: tuple[TensorType, ...], layouts: tuple[Layout, ...]
               ) -> tuple[str, ...]:
    # Computed transposed (batch in the result's lanes), a conv streams its weights as rows
    # and keeps its input stationary: the roles swap.
    if batch_in_lanes(types[0], layouts[0], attrs["groups"]):
        return ("rhs", "lhs")
    return ("lhs", "rhs")


_register("conv2d", _conv, mxu=True, roles=_conv_roles)


def _unary(arith: float, trans: float) -> CostRule:
    return lambda v: OpCost(v.vout() * (arith * v.op + trans * v.tr))


# Element-wise ops whose work is not the trait default below, in (VPU ops, EUP
# transcendentals) per output vreg, with where the count comes from:
# - sigmoid 1 / (1 + exp(-x)): negate and add on the VPU, exp and reciprocal on the EUP.
# - silu x * sigmoid(x): sigmoid's work and one multiply.
# - sqrt: x * rsqrt(x) (the EUP has rsqrt; XLA's TPU backend expands sqrt this way).
# - div a / b: a * reciprocal(b), the reciprocal on the EUP.
# - erf: no EUP instruction; XLA expands f32 erf into a clamp to [-4, 4] and a rational
#   function of x^2 with 7 numerator and 5 denominator coefficients (ErfImpl32): 2 (clamp)
#   + 1 (x^2) + 12 + 8 (Horner) + 1 (times x) VPU ops and a division (as div: 2 + 1).
# - sin, cos: no EUP instruction; a Cody-Waite range reduction (x - k * 2pi in two parts:
#   scale, round, two multiply-subtracts = 4) and a degree-11 odd (sin) / degree-10 even
#   (cos) polynomial in x^2 (1 + 12 Horner + 1) = 18 VPU ops, as a libm-style expansion.
# - acos: a polynomial in |x| times sqrt(1 - |x|) (one EUP sqrt), and the reflection
#   pi - y for x < 0: |x|, 1 - |x|, 14 Horner, a product, a select and a subtraction = 20.
# - batch_norm: scale and shift (folded); copy: one load and store.
for _op, _a, _t, _cheap in (("sigmoid", 2, 2, False), ("silu", 3, 2, False),
                           ("sqrt", 2, 1, False), ("div", 2, 1, False),
                           ("erf", 26, 1, False), ("sin", 18, 0, False),
                           ("cos", 18, 0, False), ("acos", 20, 1, False),
                           ("batch_norm", 2, 0, True),
                           ("copy", 1, 0, True)):
    _register(_op, _unary(_a, _t), cheap=_cheap)


def _gelu(v: OpView) -> OpCost:
    arith = 6 if v.node.attr("approximate") == "tanh" else 5
    return OpCost(v.vout() * (arith * v.op + v.tr))


_register("gelu", _gelu)


def pow_work(exponent: float) -> tuple[int, int]:
    """(VPU ops, EUP transcendentals) per element of x ** exponent for a constant exponent.

    An integer exponent is square-and-multiply (floor(log2 |e|) squarings and one multiply
    per further set bit; x**2 is one multiply) and a negative one adds a reciprocal; +-0.5
    are sqrt and rsqrt; any other exponent is exp(e * log(x)) (log, multiply, exp: three
    ops and two transcendentals; log gives the NaN below 0).
    """
    e = float(exponent)
    if e in (0.0, 1.0):
        return 1, 0  # a constant or a copy
    if e == 0.5:
        return 2, 1
    if e == -0.5:
        return 1, 1
    if e.is_integer() and abs(e) <= 2 ** 31:
        n = int(abs(e))
        muls = max(1, n.bit_length() - 1 + bin(n).count("1") - 1)
        return (muls + 1, 1) if e < 0 else (muls, 0)
    return 3, 2


def _pow(v: OpView) -> OpCost:
    arith, trans = pow_work(v.node.attr("exponent"))
    return OpCost(v.vout() * (arith * v.op + trans * v.tr))


_register("pow", _pow)

# Every other element-wise op, from its traits (so a new one needs no row here): a
# TRANSCENDENTAL op is one EUP push plus one VPU op to issue it and collect its result
# (exp, log, rsqrt, reciprocal and tanh are single instructions of the TPU core's
# transcendental unit, the "extended unary pipeline", in XLA's and Pallas' TPU lowerings;
# tanh kept its existing 1 + 1); any other is one VPU op per vreg and cheap
# enough to duplicate: add, sub, mul, neg, max/min, relu, comparisons (a compare writes a
# mask), where (a select) and casts (one convert).
for _op in ops_with(ELEMENTWISE):
    if _op not in COST_RULES:
        if get_op(_op).has(TRANSCENDENTAL):
            _register(_op, _unary(1, 1))
        else:
            _register(_op, _unary(1, 0), cheap=True)


def _lane_sublane(layout: Layout) -> tuple[int | None, int | None]:
    return (layout[0] if layout else None, layout[1] if len(layout) > 1 else None)


def _reduction_cycles(v: OpView, axes: Iterable[int], passes: int) -> float:
    """Cross-lane reductions go through the XLU; sublane and major-dim ones are vector adds."""
    lane, sub = _lane_sublane(v.in_layouts[0])
    axes = set(axes)
    per = 0.0
    if lane in axes:
        per += v.xl
    if sub in axes:
        per += v.op
    return v.vin(0) * passes * (v.op + per)


def _reduce(v: OpView) -> OpCost:
    axes = v.node.attr("axes")
    cycles = _reduction_cycles(v, axes, 1)
    if v.node.op == "reduce_mean":
        cycles += v.vout() * v.op
    return OpCost(cycles)


_register("reduce_sum", _reduce)
_register("reduce_mean", _reduce)
_register("reduce_max", _reduce)  # a max is a vector op like an add, lane reduce on the XLU
_register("argmax", _reduce)  # a max carrying its index: the same passes over the data


def _topk(v: OpView) -> OpCost:
    # A selection of k: log2(k) + 1 passes over the data along the axis, each a compare
    # and a select (a bitonic merge network on the vector units).
    passes = 2 * (int(v.node.attr("k")).bit_length() + 1)
    return OpCost(_reduction_cycles(v, (v.node.attr("axis"),), passes)
                  + v.vout(0) + v.vout(1))


_register("topk", _topk)


def _softmax(v: OpView) -> OpCost:
    # max, subtract, exp, sum, reciprocal (per row), multiply.
    cycles = _reduction_cycles(v, (v.node.attr("axis"),), 2) + v.vout() * (3 * v.op + v.tr)
    return OpCost(cycles)


def _layer_norm(v: OpView) -> OpCost:
    axes = range(v.node.attr("axis"), v.ins[0].rank)
    # mean and variance reductions, rsqrt, normalise, scale and shift.
    cycles = _reduction_cycles(v, axes, 2) + v.vout() * (6 * v.op + v.tr)
    return OpCost(cycles)


def _rms_norm(v: OpView) -> OpCost:
    axes = range(v.node.attr("axis"), v.ins[0].rank)
    # One fused reduction (square and sum), then per output pass rsqrt of the mean (EUP),
    # normalise and weight: 3 ops and a transcendental -- half a layer_norm's passes.
    cycles = _reduction_cycles(v, axes, 1) + v.vout() * (3 * v.op + v.tr)
    return OpCost(cycles)


_register("softmax", _softmax)
_register("layer_norm", _layer_norm)
_register("rms_norm", _rms_norm)


# ---- attention: one fused flash-style kernel ----------------------------------------------

def attention_gemm(q: TensorType, k: TensorType, v: TensorType) -> Gemm:
    """Attention's MXU work as one product per (batch, head): rows Lq, columns Lk, and a
    contraction of D (the scores q k^T: Lq x Lk x D) plus Dv (the weighted sum p v:
    Lq x Dv x Lk), each padded to 128 as its own product pads it. 2 x Lq x Lk x (D + Dv)
    useful FLOPs, the two matmuls'; the Lq x Lk scores stay on chip."""
    count = math.prod(q.shape[:-2])
    d, dv = q.shape[-1], v.shape[-1]
    return Gemm(count, q.shape[-2], k.shape[-2], d + dv,
                round_up(max(d, 1), 128) + round_up(max(dv, 1), 128))


def _attention(v: OpView) -> OpCost:
    """Flash attention (Dao et al. 2022) as one kernel: per block of queries it streams the
    key/value blocks, computes scores on the MXU, an online softmax on the vector unit and
    accumulates p v on the MXU; the scores are never written to HBM.

    Vector work per vreg of scores (f32, Lk in lanes): scale (1 op), running row max (1 op +
    an XLU lane reduce), subtract (1), exp (1 op + 1 EUP), row sum (1 + XLU); a causal mask
    adds an iota compare and a select (2 ops) -- masked blocks are computed and discarded,
    as XLA's fused attention does (Pallas' splash attention skips them). Per output vreg:
    rescale the accumulator, reciprocal of the row sum (EUP) and normalise (3 ops + 1 EUP).
    GQA: each key/value head serves H/Hkv query heads; the MXU work is per query head.
    """
    q, k, val = v.ins
    gemm = attention_gemm(q, k, val)
    scores = TensorType((*q.shape[:-1], k.shape[-2]), DType.F32)
    per_score = (5 + (2 if v.node.attr("causal") else 0)) * v.op + 2 * v.xl + v.tr
    cycles = vregs(scores, row_major(scores.rank)) * per_score + v.vout() * (3 * v.op + v.tr)
    # q, k and v stream with their head dim minor (the MXU loads the stationary k block
    # transposed), the result is written Dv-minor; any other minor dim is an XLU transpose.
    for i, t in enumerate(v.ins):
        if v.in_layouts[i][0] != t.rank - 1:
            cycles += v.vin(i) * v.xl
    if v.out_layouts[0][0] != v.out.rank - 1:
        cycles += v.vout() * v.xl
    return OpCost(cycles, gemm)


def _attention_roles(attrs: dict, types: tuple[TensorType, ...], layouts: tuple[Layout, ...]
                     ) -> tuple[str, ...]:
    # Query blocks stream as rows; key and value blocks are re-read for every query block.
    return ("lhs", "rhs", "rhs")


_register("attention", _attention, mxu=True, roles=_attention_roles)


def _pool(v: OpView) -> OpCost:
    kh, kw = v.node.attr("kernel")
    lane, sub = _lane_sublane(v.in_layouts[0])
    # Window taps along a lane dim are lane shifts on the XLU; along sublanes or major dims
    # they are plain vector loads.
    per_tap = v.op + (v.xl if lane in (2, 3) else 0.0) + (0.5 * v.op if sub in (2, 3) else 0.0)
    cycles = v.vout() * (kh * kw * per_tap + _act(v, v.node.attr("activation")))
    if v.node.op == "pool2d_avg":
        cycles += v.vout() * v.op
    return OpCost(cycles)


_register("pool2d_avg", _pool)
_register("pool2d_max", _pool)


def _lrn(v: OpView) -> OpCost:
    size = v.node.attr("size")
    lane, _ = _lane_sublane(v.in_layouts[0])
    window = size * (v.op + (v.xl if lane == 1 else 0.0))  # a channel window across lanes
    return OpCost(v.vout() * (window + 4 * v.op + 2 * v.tr))


_register("lrn", _lrn)


def _moves_tiles(in_layout: Layout, out_layout: Layout, perm: tuple[int, ...] | None = None
                 ) -> bool:
    """Whether a relayout keeps the two tiled dims in place (then it only moves whole tiles)."""
    src = permute_layout(in_layout, perm) if perm is not None else in_layout
    return src[:2] == out_layout[:2]


def _transpose(v: OpView) -> OpCost:
    # After layout assignment a transpose is a bitcast; a physical one (only reachable by a
    # configuration that bypasses the layout pass) costs a relayout.
    if _moves_tiles(v.in_layouts[0], v.out_layouts[0], v.node.attr("perm")):
        return OpCost(v.vout() * v.op)
    return OpCost(v.vout() * v.xl, transposing=True)


_register("transpose", _transpose, cheap=True)


def _reshape(v: OpView) -> OpCost:
    # Not a bitcast (bitcasts never reach the cost model): elements change tiles.
    return OpCost(v.vout() * v.xl, transposing=True)


_register("reshape", _reshape, cheap=True)


def _layout(v: OpView) -> OpCost:
    if _moves_tiles(v.in_layouts[0], v.out_layouts[0]):
        return OpCost(v.vout() * v.op)
    return OpCost(v.vout() * v.xl, transposing=True)


_register("layout", _layout, cheap=True)


def _misaligned(layout: Layout, axis: int, offsets: Iterable[int], itemsize: int) -> bool:
    lane, sub = _lane_sublane(layout)
    if axis == lane:
        return any(o % 128 for o in offsets)
    if axis == sub:
        return any(o % sublane_tile(itemsize) for o in offsets)
    return False


def _concat(v: OpView) -> OpCost:
    axis = v.node.attr("axis")
    offsets = [sum(t.shape[axis] for t in v.ins[:i]) for i in range(1, len(v.ins))]
    shift = _misaligned(v.out_layouts[0], axis, offsets, v.out.dtype.itemsize)
    return OpCost(v.vout() * (v.op + (v.xl if shift else 0.0)))


def _split(v: OpView) -> OpCost:
    axis = v.node.attr("axis")
    sizes = v.node.attr("sizes")
    offsets = [sum(sizes[:i]) for i in range(1, len(sizes))]
    shift = _misaligned(v.in_layouts[0], axis, offsets, v.ins[0].dtype.itemsize)
    total = sum(vregs(t, lay) for t, lay in zip(v.node.types, v.out_layouts, strict=True))
    return OpCost(total * (v.op + (v.xl if shift else 0.0)))


def _slice(v: OpView) -> OpCost:
    starts, steps = v.node.attr("starts"), v.node.attr("steps")
    layout = v.in_layouts[0]
    item = v.ins[0].dtype.itemsize
    shift = any(_misaligned(layout, d, (starts[d],), item) or steps[d] != 1
                for d in layout[:2])
    # A slice reads only the tiles it needs: about its output's share of the input.
    reads = min(padded_bytes(v.ins[0], layout), 2 * padded_bytes(v.out, v.out_layouts[0]))
    return OpCost(v.vout() * (v.op + (v.xl if shift else 0.0)), reads=(reads,))


def _pad(v: OpView) -> OpCost:
    pads = v.node.attr("pads")
    rank = v.ins[0].rank
    layout = v.out_layouts[0]
    item = v.out.dtype.itemsize
    shift = any(_misaligned(layout, d, (pads[d],), item) for d in layout[:2]) if rank else False
    return OpCost(v.vout() * (v.op + (v.xl if shift else 0.0)))


def _enlarge(v: OpView) -> OpCost:
    w = v.ins[0]
    dh, dw = (v.node.attr("kh") - w.shape[2]) // 2, (v.node.attr("kw") - w.shape[3]) // 2
    layout = v.out_layouts[0]
    shift = (_misaligned(layout, 2, (dh,), w.dtype.itemsize)
             or _misaligned(layout, 3, (dw,), w.dtype.itemsize))
    return OpCost(v.vout() * (v.op + (v.xl if shift else 0.0)))


def _embedding(v: OpView) -> OpCost:
    ids, table = v.ins
    row = padded_bytes(TensorType((1, table.shape[1]), table.dtype), (1, 0)) / 8
    reads = min(padded_bytes(table, v.in_layouts[1]), ids.size * row)
    return OpCost(v.vout() * 2 * v.op, reads=(None, reads))


def _expand(v: OpView) -> OpCost:
    # A broadcast writes every output element once (a sublane or lane broadcast of the
    # input vreg, then a store): one op per output pass; the input is read once.
    return OpCost(v.vout() * v.op)


def _gather(v: OpView) -> OpCost:
    """Row gathers (ONNX Gather, index_select): each selected slice of x along `axis` is
    one DMA (`dma_runs`), memory-bound. Slices along a major or the sublane dim are rows
    of tiles, read at their own size (as an embedding reads a table row); gathering along
    the lane dim picks single elements out of every tile, so it reads x whole and permutes
    across lanes (XLU) per output pass."""
    x, idx = v.ins
    axis = v.node.attr("axis")
    layout = v.in_layouts[0]
    lane, sub = _lane_sublane(layout)
    cycles = v.vout() * 2 * v.op  # index arithmetic and the store, as embedding
    if axis == lane:
        return OpCost(cycles + v.vout() * v.xl, reads=(None, None))
    outer = math.prod(x.shape[:axis])
    rows = outer * idx.size
    one = TensorType(tuple(1 if d <= axis else s for d, s in enumerate(x.shape)), x.dtype)
    row_bytes = padded_bytes(one, layout) / (sublane_tile(x.dtype.itemsize) if axis == sub
                                             else 1)
    reads = min(padded_bytes(x, layout), rows * row_bytes)
    return OpCost(cycles, reads=(reads, None), dma_runs=float(rows))


_register("expand", _expand, cheap=True)
_register("gather", _gather)
_register("concat", _concat, cheap=True)
_register("split", _split, cheap=True)
_register("slice", _slice, cheap=True)
_register("pad", _pad, cheap=True)
_register("enlarge", _enlarge)
_register("embedding", _embedding)


def op_flops(node: Node, ins: tuple[TensorType, ...]) -> float:
    macs, other = COUNTS.get(node.op)(node, ins)
    return 2.0 * macs + other

