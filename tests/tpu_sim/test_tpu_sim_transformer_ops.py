"""The simulator on the transformer-era ops: every op compiles and simulates under drawn
shapes; attention is one flash-style MXU kernel that never writes its scores to HBM;
transcendentals cost more than plain vector ops, polynomial expansions more than EUP
instructions; gathers read rows, not tables; RMSNorm is one reduction."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings

from op_cases import OP_CASES, op_case
from superopt.ir import Graph, GraphBuilder
from superopt.ir.opdef import ELEMENTWISE, TRANSCENDENTAL, get_op
from superopt.tpu_sim import TPU_V4, Bounds, Flags, KernelCosts, Simulator, problems
from superopt.tpu_sim.layout import row_major
from superopt.tpu_sim.op_costs import OpView, is_cheap_op, op_rule

NEW_OPS = ("sub", "div", "neg", "exp", "log", "sqrt", "rsqrt", "recip", "pow", "erf", "silu",
           "sin", "cos", "maximum", "minimum", "eq", "lt", "gt", "where", "cast", "gather",
           "expand", "iota", "tri_mask", "reduce_max", "rms_norm", "attention")


@pytest.mark.parametrize("op", [o for o in NEW_OPS if o in OP_CASES])
def test_each_new_op_compiles_validly_and_simulates(op: str) -> None:
    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(graph=op_case(op))
    def check(graph: Graph) -> None:
        sim = Simulator("v4")
        c = sim.compile(graph)
        assert problems(c, sim=sim) == []
        s = sim.simulate(c)
        assert s.valid and math.isfinite(s.time) and s.time >= 0

    check()


def _attention_graph(decomposed: bool, seq: int = 1024, heads: int = 8, kv_heads: int = 8,
                     d: int = 128) -> Graph:
    b = GraphBuilder("attention")
    q = b.input("q", (1, heads, seq, d), "bf16")
    k = b.input("k", (1, kv_heads, seq, d), "bf16")
    v = b.input("v", (1, kv_heads, seq, d), "bf16")
    if not decomposed:
        return b.build([b.attention(q, k, v, causal=True)])
    s = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    s = b.where(b.tri_mask(rows=seq, cols=seq), s, b.weight("fill", (), "bf16"))
    e = b.exp(b.sub(s, b.reduce_max(s, axes=(3,), keepdims=True)))
    p = b.div(e, b.reduce_sum(e, axes=(3,), keepdims=True))
    return b.build([b.matmul(p, v)])


def test_attention_is_one_mxu_kernel_that_never_writes_the_scores() -> None:
    sim = Simulator("v4")
    fused = sim.simulate(sim.compile(_attention_graph(False)))
    (kernel,) = fused.kernels
    heads, seq, d = 8, 1024, 128
    scores_bytes = heads * seq * seq * 2  # bf16 scores, were they written once
    # Its HBM traffic is q, k, v (re-read per query block) and the result, far below one
    # write of the scores; its MXU time is at least the two products at the MXU's peak.
    assert kernel.cost.bytes < scores_bytes
    assert kernel.cost.mxu >= 2 * heads * seq * seq * (d + d) / TPU_V4.peak_flops
    # The same attention decomposed (matmul, mask, max, exp, sum, div, matmul) writes and
    # reads the scores through HBM: more bytes and more time (what flash attention avoids).
    split = sim.simulate(sim.compile(_attention_graph(True)))
    assert split.bytes > scores_bytes > fused.bytes
    assert split.time > fused.time


def test_grouped_query_attention_moves_fewer_bytes_for_the_same_products() -> None:
    sim = Simulator("v4")
    mha = sim.simulate(sim.compile(_attention_graph(False, kv_heads=8)))
    gqa = sim.simulate(sim.compile(_attention_graph(False, kv_heads=2)))
    assert gqa.flops == mha.flops
    assert gqa.bytes < mha.bytes


def test_attention_bounds_tile_counts_both_products() -> None:
    """An XLA-style bounds tile over the same kernel runs the same two products on the MXU
    as the simulator's own tile (the score product is not a space dim of the result)."""
    sim = Simulator("v4")
    c = sim.compile(_attention_graph(False))
    (sig,) = c.signatures
    kc: KernelCosts = sim.kernels
    flags = Flags(mxu_split="m")  # 128 result columns: rows shared among the MXUs
    own = kc.cost(sig, c.config.tiles[c.kernels[0].root], flags)
    # Result (1, 8, 1024, 128) row-major: bounds over [1, 8, 1024/8 rows, 128/128 lanes],
    # here a head per block; k (1, 8, 1024, 128): kernel bounds over its physical dims, all
    # 1024 keys in one block.
    tile = Bounds((1, 1, 128, 1), (1, 1, 128, 1))
    assert kc.problem(sig, tile) is None
    got = kc.cost(sig, tile, flags)
    ideal = 2 * 8 * 1024 * 1024 * 256 / TPU_V4.peak_flops
    assert got.valid and own.valid
    assert ideal <= got.mxu <= 2 * ideal and ideal <= own.mxu <= 2 * ideal


def _vector_cycles(op: str, **attrs: object) -> float:
    """Vector cycles of `op` over (1024, 1024) f32 operands, row-major (a where's condition
    is a comparison's result)."""
    b = GraphBuilder(op)
    xs = [b.input(f"x{i}", (1024, 1024)) for i in range(get_op(op).num_inputs)]
    if op == "where":
        xs[0] = b.gt(xs[0], xs[1])
    g = b.build([b.op(op, *xs, **attrs)])
    node = g.nodes[-1]
    ins = tuple(g.type_of(v) for v in node.inputs)
    view = OpView(node, ins, tuple(row_major(t.rank) for t in ins), (row_major(2),), TPU_V4)
    return op_rule(op).cost(view).vector_cycles


def test_transcendentals_cost_more_than_vector_ops_and_polynomials_more_than_the_eup() -> None:
    plain = _vector_cycles("ewadd")
    # Single VPU ops: subtraction, negation, max, a cast.
    for op in ("sub", "neg", "maximum", "where"):
        assert _vector_cycles(op) == plain, op
    assert _vector_cycles("cast", to="bf16") == plain
    # EUP instructions (exp, log, rsqrt, reciprocal) cost more than a vector op...
    eup = _vector_cycles("exp")
    assert eup > plain
    for op in ("log", "rsqrt", "recip"):
        assert _vector_cycles(op) == eup, op
    # ... a root or quotient adds a multiply to its EUP op, SiLU is a sigmoid and a multiply,
    # and erf, sin and cos, which TPUs have no instruction for, expand into polynomials.
    assert eup < _vector_cycles("sqrt") == _vector_cycles("div") < _vector_cycles("silu")
    for op in ("erf", "sin", "cos"):
        assert _vector_cycles(op) > 3 * eup, op
    # pow by its exponent: x**2 is one multiply, x**0.5 a sqrt, x**-1 a reciprocal and more.
    assert _vector_cycles("pow", exponent=2.0) == plain
    assert _vector_cycles("pow", exponent=0.5) == _vector_cycles("sqrt")
    assert _vector_cycles("pow", exponent=1.7) > _vector_cycles("pow", exponent=-1.0) > plain


def test_cheap_ops_are_the_plain_element_wise_ones() -> None:
    for op in ("sub", "neg", "maximum", "minimum", "eq", "lt", "gt", "where", "cast", "expand"):
        assert is_cheap_op(op), op
    for op in ("exp", "erf", "div", "silu", "gather", "rms_norm", "reduce_max", "attention"):
        assert not is_cheap_op(op), op
    # Every element-wise op has a rule, from its traits when it has no row of its own.
    from superopt.ir.opdef import ops_with

    for op in ops_with(ELEMENTWISE):
        assert op_rule(op).cheap == (not get_op(op).has(TRANSCENDENTAL)), op


def _gather_graph(ids: int) -> Graph:
    b = GraphBuilder("gather")
    table = b.weight("table", (32000, 512))
    idx = b.input("ids", (ids,), "i64", high=32000)
    return b.build([b.gather(table, idx, axis=0)])


def test_gather_reads_rows_not_the_table_and_pays_per_row() -> None:
    sim = Simulator("v4")
    few = sim.simulate(sim.compile(_gather_graph(16)))
    many = sim.simulate(sim.compile(_gather_graph(1024)))
    table_bytes = 32000 * 512 * 4
    row = 512 * 4
    assert few.bytes < table_bytes / 100
    assert many.bytes >= 1024 * row
    assert many.time > few.time
    # Each gathered row is its own DMA, paying the per-run cost.
    (sig,) = sim.compile(_gather_graph(1024)).signatures
    assert sim.kernels.stats(sig).dma_runs == 1024


def _norm_cycles(op: str) -> float:
    b = GraphBuilder(op)
    x = b.input("x", (512, 4096))
    if op == "rms_norm":
        y = b.rms_norm(x, b.weight("w", (4096,)))
    else:
        y = b.layer_norm(x, b.weight("g", (4096,)), b.weight("b", (4096,)))
    sim = Simulator("v4")
    (sig,) = sim.compile(b.build([y])).signatures
    return sim.kernels.stats(sig).vector_cycles


def test_rms_norm_is_one_reduction_cheaper_than_layer_norm() -> None:
    # No mean to subtract: one pass of squares and a sum against layer_norm's two.
    assert _norm_cycles("rms_norm") < _norm_cycles("layer_norm")
