"""Per-op layout rules (table "tpu_layout"): default layouts, operand constraints, bitcasts.

For every op the table says three things, as XLA's layout assignment does:

- `default(node, types, operand_layouts)`: the output layouts the default compiler picks
  from its operands' layouts (operand layouts may be None for weights not yet placed);
- `operands(node, types, out_layouts, producer_layouts)`: the layout each operand must
  have, or None where any layout is accepted (the kernel then pays for what it gets). When
  a producer's layout differs from the requirement, the layout pass inserts a `layout` op
  (an explicit copy that transposes tiles in HBM);
- `bitcast(node, types, in_layouts, out_layouts)`: whether the op moves no bytes under
  these layouts (a transpose whose output layout is its input's permuted, a reshape whose
  tiles line up); bitcasts are views, never kernels.

Preferred layouts: convolutions keep feature dims in lanes (NCHW stored as NHWC) unless
that pads more than twice the bytes of spatial-minor storage (a 3-channel image would pad
3 to 128 lanes); matmul and attention operands keep their two matrix dims minor-most, in
either order; element-wise ops (by trait) need every operand in the output's layout; a
gather reads its source row-major.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from superopt.ir.graph import Node
from superopt.ir.opdef import ELEMENTWISE, SOURCE, ops_with
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType
from superopt.tpu_sim.layout import (
    Layout,
    drop_dims,
    feature_minor,
    is_row_major,
    oihw_as_hwio,
    padded_bytes,
    permute_layout,
    project,
    reshape_is_bitcast,
    row_major,
    unpermute_layout,
)

MaybeLayout = Layout | None
Types = tuple[TensorType, ...]
DefaultFn = Callable[[Node, Types, tuple[MaybeLayout, ...]], tuple[Layout, ...]]
OperandsFn = Callable[[Node, Types, tuple[Layout, ...], tuple[MaybeLayout, ...]],
                      tuple[MaybeLayout, ...]]
BitcastFn = Callable[[Node, Types, tuple[Layout, ...], tuple[Layout, ...]], bool]


def _never(node: Node, ts: Types, ins: tuple[Layout, ...], outs: tuple[Layout, ...]) -> bool:
    return False


@dataclass(frozen=True)
class LayoutRule:
    default: DefaultFn
    operands: OperandsFn
    bitcast: BitcastFn = _never


LAYOUT_RULES: RuleTable[LayoutRule] = RuleTable("tpu_layout")


def _rank_layout(layout: MaybeLayout, rank: int) -> Layout:
    return layout if layout is not None and len(layout) == rank else row_major(rank)


CONV_PAD_TOLERANCE = 2.0


def best_conv_layout(t: TensorType) -> Layout:
    """Feature-minor unless that pads more than twice the bytes of spatial-minor storage
    (a 3-channel image padded to 128 lanes would be 42 times its size)."""
    fm, rm = feature_minor(4), row_major(4)
    return fm if padded_bytes(t, fm) <= CONV_PAD_TOLERANCE * padded_bytes(t, rm) else rm


# ---- sources ------------------------------------------------------------------------

def _source_default(node: Node, ts: Types, ins: tuple[MaybeLayout, ...]) -> tuple[Layout, ...]:
    return (row_major(node.type.rank),)


def _no_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                 ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    return ()


for _op in ops_with(SOURCE):
    LAYOUT_RULES.register(_op, LayoutRule(_source_default, _no_operands))


# ---- element-wise family: operands follow the output ----------------------------------

def _follow_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                     ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    rank = node.type.rank
    return tuple(None if t.rank <= 1 else project(outs[0], rank, t.shape) for t in ts)


def _largest_operand_default(node: Node, ts: Types, ins: tuple[MaybeLayout, ...]
                             ) -> tuple[Layout, ...]:
    """The layout of the operand that has the output's shape (else the same rank)."""
    out = node.type
    best: Layout | None = None
    for want_exact in (True, False):
        for t, layout in zip(ts, ins, strict=True):
            if layout is None or t.rank != out.rank:
                continue
            if not want_exact or t.shape == out.shape:
                best = layout
                break
        if best is not None:
            break
    return tuple(_rank_layout(best, t.rank) for t in node.types)


_ELEMENTWISE = LayoutRule(_largest_operand_default, _follow_operands)
# Every element-wise op (by trait, so a new one needs no row), and the ops whose operands
# have the output's shape or broadcast to it: norms (their per-feature vectors are rank 1
# or follow), pools, softmax, copy, and expand (its input broadcasts to the output).
for _op in (*ops_with(ELEMENTWISE), "batch_norm", "pool2d_avg", "pool2d_max", "lrn",
            "softmax", "layer_norm", "rms_norm", "copy", "expand"):
    LAYOUT_RULES.register(_op, _ELEMENTWISE)


def _first_operand_default(node: Node, ts: Types, ins: tuple[MaybeLayout, ...]
                           ) -> tuple[Layout, ...]:
    return tuple(_rank_layout(ins[0] if ins else None, t.rank) for t in node.types)


def _movement_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                       ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    # concat, split, slice, pad, enlarge keep rank: operands share output 0's layout.
    return tuple(outs[0] if t.rank > 1 else None for t in ts)


for _op in ("concat", "split", "slice", "pad", "enlarge", "topk"):
    LAYOUT_RULES.register(_op, LayoutRule(_first_operand_default, _movement_operands))


# ---- MXU ops ----------------------------------------------------------------------------

def _matrix_minor(layout: MaybeLayout, rank: int) -> bool:
    return layout is not None and len(layout) == rank and set(layout[:2]) == {rank - 1, rank - 2}


def _matmul_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                     ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    return tuple(ins[i] if _matrix_minor(ins[i], t.rank) else row_major(t.rank)
                 for i, t in enumerate(ts))


LAYOUT_RULES.register("matmul", LayoutRule(
    lambda node, ts, ins: (row_major(node.type.rank),), _matmul_operands))


def _linear_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                     ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    # The (N, K) weight is wanted with N in lanes, i.e. stored as the (K, N) rhs of a matmul.
    x, w = ins[0], ins[1]
    return (x if _matrix_minor(x, ts[0].rank) else row_major(ts[0].rank),
            w if _matrix_minor(w, 2) else (0, 1), None)


LAYOUT_RULES.register("linear", LayoutRule(
    lambda node, ts, ins: (row_major(node.type.rank),), _linear_operands))

# Attention streams q, k and v as matrices (heads and batch major): like matmul operands,
# each keeps its two minor dims minor-most in either order (the kernel pays an XLU
# transpose for the other one) and is copied to row-major otherwise.
LAYOUT_RULES.register("attention", LayoutRule(
    lambda node, ts, ins: (row_major(node.type.rank),), _matmul_operands))


def _conv_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                   ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    # Any order of the major dims works once the feature dim sits in lanes (XLA lays out
    # conv activations as, e.g., H, W, N, C); weights may keep O or I in lanes (the kernel
    # pays a transpose for I). Other layouts are copied to the preferred one.
    x, w = ins
    x_ok = x is not None and len(x) == 4 and (x[0] == 1 or x == row_major(4))
    w_ok = w is not None and len(w) == 4 and (w[0] in (0, 1) or w == row_major(4))
    return (x if x_ok else best_conv_layout(ts[0]), w if w_ok else oihw_as_hwio())


LAYOUT_RULES.register("conv2d", LayoutRule(
    lambda node, ts, ins: (best_conv_layout(node.type),), _conv_operands))


# ---- reductions ---------------------------------------------------------------------------

def _reduce_default(node: Node, ts: Types, ins: tuple[MaybeLayout, ...]) -> tuple[Layout, ...]:
    src = _rank_layout(ins[0], ts[0].rank)
    if node.attr("keepdims"):
        return (src,)
    return (drop_dims(src, node.attr("axes")),)


_REDUCE = LayoutRule(_reduce_default, lambda node, ts, outs, ins: (None,))
for _op in ("reduce_sum", "reduce_mean", "reduce_max", "argmax"):
    LAYOUT_RULES.register(_op, _REDUCE)


# ---- transpose and reshape: bitcasts where the layouts allow -----------------------------

LAYOUT_RULES.register("transpose", LayoutRule(
    default=lambda node, ts, ins: (permute_layout(_rank_layout(ins[0], ts[0].rank),
                                                  node.attr("perm")),),
    operands=lambda node, ts, outs, ins: (unpermute_layout(outs[0], node.attr("perm")),),
    bitcast=lambda node, ts, ins, outs: ins[0] == unpermute_layout(outs[0], node.attr("perm")),
))


def _reshape_operands(node: Node, ts: Types, outs: tuple[Layout, ...],
                      ins: tuple[MaybeLayout, ...]) -> tuple[MaybeLayout, ...]:
    # A row-major output is a bitcast of a row-major input (when tiles line up); any other
    # output layout is a physical relayout that reads whatever it is given.
    return (row_major(ts[0].rank),) if is_row_major(outs[0]) else (None,)


LAYOUT_RULES.register("reshape", LayoutRule(
    default=lambda node, ts, ins: (row_major(node.type.rank),),
    operands=_reshape_operands,
    bitcast=lambda node, ts, ins, outs: reshape_is_bitcast(
        ts[0].shape, ins[0], node.type.shape, outs[0], ts[0].dtype.itemsize),
))


# ---- the rest -------------------------------------------------------------------------------

LAYOUT_RULES.register("layout", LayoutRule(
    default=lambda node, ts, ins: (tuple(node.attr("minor_to_major")),),
    operands=lambda node, ts, outs, ins: (None,),
))

LAYOUT_RULES.register("embedding", LayoutRule(
    default=lambda node, ts, ins: (row_major(node.type.rank),),
    operands=lambda node, ts, outs, ins: (None, row_major(2)),
))

# A gather fetches rows of x: x row-major keeps each gathered slice contiguous (as an
# embedding's table); the indices are read in any layout.
LAYOUT_RULES.register("gather", LayoutRule(
    default=lambda node, ts, ins: (row_major(node.type.rank),),
    operands=lambda node, ts, outs, ins: (row_major(ts[0].rank), None),
))
