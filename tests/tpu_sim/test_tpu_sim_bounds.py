"""XLA-style tile bounds, multi-output kernels, storage dtypes and the MXU's orientation:
grid steps, re-reads and contiguous runs computed by hand for small kernels."""

from __future__ import annotations

import pytest

from superopt.ir import DType, GraphBuilder
from superopt.tpu_sim import (
    TPU_V3,
    Bounds,
    Config,
    InvalidConfig,
    KernelCosts,
    compile_with,
    simulate,
    validate,
)
from superopt.tpu_sim import bounds as B

X_BYTES = 26 * 26 * 32 * 256 * 4  # f32[32,26,26,192] stored H, W, N, C: 192 lanes pad to 256
M_BYTES = 26 * 32 * 256 * 4  # f32[32,26,192] stored W, N, C


def masked_sum(dtypes: dict | None = None):
    """sum over N, H, W of x * m, m broadcast over H: XLA's bias-gradient kernel shape."""
    b = GraphBuilder("masked_sum")
    x = b.weight("x", (32, 26, 26, 192))
    m = b.weight("m", (32, 26, 192))
    mb = b.reshape(m, shape=(32, 1, 26, 192))
    y = b.ewmul(x, mb)
    r = b.reduce_sum(y, axes=(0, 1, 2))
    g = b.build([r])
    layouts = {x: (3, 0, 2, 1), m: (2, 0, 1), mb: (3, 0, 2, 1), y: (3, 0, 2, 1), r: (0,)}
    fusion = {n.id: n.id != r.node for n in g.nodes if n.op != "weight"}
    c = compile_with(g, Config(layouts=layouts, fusion=fusion, dtypes=dtypes or {}), TPU_V3)
    validate(c)
    assert len(c.kernels) == 1
    return c, c.signatures[0], {"x": x, "m": m}


def test_the_space_is_the_main_arrays_physical_dims_in_tile_units() -> None:
    _, sig, _ = masked_sum()
    space = KernelCosts(TPU_V3).space(sig)
    assert [(d.size, d.unit) for d in space.dims] == [(26, 1), (26, 1), (32, 8), (192, 128)]
    m = next(a for a in space.arrays if len(a.dims) == 3)
    assert [d.space for d in m.dims] == [1, 2, 3]  # W, N, C: m does not follow H


OUT = 1024 * 4  # the f32[192] result: one 1024-element chunk


@pytest.mark.parametrize("tile,steps,x_run,m_bytes,out_bytes", [
    # H in 13 blocks, the rest whole: m's block never changes, x moves in 1.7 MB runs, the
    # result is written once.
    ((2, 26, 4, 2), 13, 2 * 26 * 32 * 256 * 4, M_BYTES, OUT),
    # C split in two inside the H loop: m is re-read for each of the 13 H blocks and so is
    # the result's C block rewritten; x's blocks hold one of the two 128-lane tiles, so each
    # (8, 128) tile is its own 4 KiB run.
    ((2, 26, 4, 1), 26, 8 * 128 * 4, 13 * M_BYTES, 13 * 2 * OUT),
    # H whole: m's W and C blocks are each fetched once; the W loop outside C revisits the
    # result's two C blocks twice.
    ((26, 13, 4, 1), 4, 8 * 128 * 4, M_BYTES, 2 * 2 * OUT),
])
def test_blocks_are_refetched_when_their_index_changes(tile: tuple[int, ...], steps: int,
                                                       x_run: int, m_bytes: int,
                                                       out_bytes: int) -> None:
    _, sig, _ = masked_sum()
    model = KernelCosts(TPU_V3)
    space = model.space(sig)
    pl = B.plan(space, Bounds(tile))
    assert pl.steps == steps
    _, _, got_in, got_out = B.transfers(space, pl)
    x = next(a for a in space.arrays if len(a.dims) == 4)
    assert got_in == X_BYTES + m_bytes
    assert got_out == out_bytes
    assert B._block(x, dict(enumerate(pl.ext)))[1] == x_run
    assert x.full_bytes == X_BYTES
    c = model.cost(sig, Bounds(tile), c_flags())
    assert c.steps == steps and c.valid
    assert c.bytes == got_in + got_out


def c_flags():
    from superopt.tpu_sim import Flags

    return Flags()


def test_more_steps_and_shorter_runs_cost_more() -> None:
    _, sig, _ = masked_sum()
    model = KernelCosts(TPU_V3)
    t = {tile: model.cost(sig, Bounds(tile), c_flags()).time
         for tile in ((2, 26, 4, 2), (2, 26, 4, 1), (3, 1, 1, 1))}
    assert t[(2, 26, 4, 2)] < t[(2, 26, 4, 1)] < t[(3, 1, 1, 1)]


def test_bad_bounds_are_reported() -> None:
    c, _, _ = masked_sum()
    root = c.kernels[0].root
    for tile, why in ((Bounds((2, 26, 4)), "4 positive ints"),
                      (Bounds((2, 27, 4, 2)), "exceeds its dim"),
                      (Bounds((2, 26, 4, 3)), "exceeds its dim"),
                      (Bounds((2, 26, 4, 2), (1, 1)), "only a kernel with an MXU op")):
        with pytest.raises(InvalidConfig, match=why):
            validate(compile_with(c.source, c.config.with_(tiles={root: tile}), TPU_V3))


def test_storage_dtypes_change_bytes_not_the_graph() -> None:
    _, sig32, vals = masked_sum()
    _, sig16, _ = masked_sum({vals["x"]: DType.BF16})
    model = KernelCosts(TPU_V3)
    tile = Bounds((2, 26, 4, 2))
    assert model.cost(sig16, tile, c_flags()).bytes == X_BYTES // 2 + M_BYTES + OUT
    assert model.cost(sig32, tile, c_flags()).bytes == X_BYTES + M_BYTES + OUT


def test_a_multi_output_fusion_is_one_kernel_writing_both_values() -> None:
    b = GraphBuilder("two_outputs")
    x = b.input("x", (256, 512))
    r = b.relu(x)
    a = b.ewmul(r, r)
    s = b.ewadd(r, r)
    g = b.build([a, s])
    fusion = {r.node: True, a.node: s.node, s.node: False}
    c = compile_with(g, Config(fusion=fusion), TPU_V3)
    validate(c)
    (k,) = c.kernels
    assert k.root == s.node and set(k.outputs) == {a, s}
    sim = simulate(c)
    assert sim.bytes == 3 * 256 * 512 * 4  # read x once, write a and s
    with pytest.raises(InvalidConfig, match="root of a later kernel"):
        compile_with(g, Config(fusion={r.node: True, a.node: r.node, s.node: False}), TPU_V3)


def test_a_multi_output_decision_that_cannot_be_honoured_is_repaired_and_reported() -> None:
    b = GraphBuilder("two_outputs")
    r = b.relu(b.input("x", (256, 512)))
    a = b.ewmul(r, r)
    s = b.ewadd(r, r)
    t = b.tanh(s)
    g = b.build([a, t])
    # s is fused into t's kernel, so it roots no kernel that could also write a.
    c = compile_with(g, Config(fusion={r.node: True, a.node: s.node, s.node: True,
                                       t.node: False}), TPU_V3)
    assert [n for n, _ in c.partition.repaired] == [a.node]
    with pytest.raises(InvalidConfig, match=f"fusion decision of %{a.node} was overridden"):
        validate(c)


def _conv(out_layout: tuple[int, ...]):
    b = GraphBuilder("wgrad_like")
    x = b.weight("x", (256, 64, 10, 10))
    w = b.weight("w", (64, 64, 3, 3))
    y = b.conv2d(x, w)
    g = b.build([y])
    c = compile_with(g, Config(layouts={x: (1, 3, 2, 0), w: (0, 1, 3, 2), y: out_layout},
                               fusion={n.id: False for n in g.nodes}), TPU_V3,
                     fusion_default="none")
    k = next(k for k in c.kernels if g.nodes[k.root].op == "conv2d")
    return KernelCosts(TPU_V3).stats(c.signatures[c.kernels.index(k)])


def test_the_mxu_columns_are_the_results_lane_dim() -> None:
    normal = _conv((1, 3, 2, 0))  # output features in lanes
    transposed = _conv((0, 1, 3, 2))  # batch in lanes: the transposed product
    assert (normal.gemm.m, normal.gemm.n) == (256 * 8 * 8, 64)
    assert (transposed.gemm.m, transposed.gemm.n) == (64 * 8 * 8, 256)
    # 64 output features fill half of a 128-wide MXU; 256 batch rows fill it.
    assert transposed.gemm.padded_flops < normal.gemm.padded_flops


def test_linear_has_the_tile_space_and_costs_of_matmul_plus_bias() -> None:
    """linear's (N, K) weight, laid out with N in lanes, is stored exactly as matmul's
    (K, N) weight: the same bounds (output rows x columns, weight K x N) cost the same."""
    from superopt.tpu_sim import Flags

    def kernel(lin: bool):  # type: ignore[no-untyped-def]
        b = GraphBuilder("lin" if lin else "mm")
        x = b.input("x", (256, 512))
        y = b.linear(x, b.weight("w", (384, 512)), b.weight("b", (384,))) if lin else \
            b.ewadd(b.matmul(x, b.weight("w", (512, 384))), b.weight("b", (384,)))
        c = compile_with(b.build([b.relu(y)]), Config(), TPU_V3)
        validate(c)
        assert len(c.kernels) == 1
        return c.signatures[0]

    model = KernelCosts(TPU_V3)
    spaces = [model.space(kernel(lin)) for lin in (False, True)]
    assert [(d.size, d.unit) for d in spaces[0].dims] == [(d.size, d.unit)
                                                          for d in spaces[1].dims]
    times = [[model.cost(kernel(lin), Bounds(t, (k, t[1])), Flags()).time
              for k in (1, 8, 64) for t in ((8, 1), (16, 3), (32, 3), (4, 2))]
             for lin in (False, True)]
    assert all(0 < t < float("inf") for t in times[0])
    assert times[1] == pytest.approx(times[0], rel=1e-9)
