"""The kernel cost model: the issue's sanity targets and the trade-off behind every decision."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from superopt.ir import Graph, GraphBuilder, Value
from superopt.tpu_sim import (
    TPU_V4,
    Compiled,
    Config,
    Flags,
    InvalidConfig,
    KernelCosts,
    compile_default,
    compile_with,
    measure,
    simulate,
    validate,
)
from superopt.tpu_sim.kernel_time import kernel_cost
from superopt.tpu_sim.layout import feature_minor, row_major


def matmul_graph(m: int, k: int, n: int, dtype: str = "bf16") -> Graph:
    b = GraphBuilder(f"mm{m}x{k}x{n}")
    x = b.input("x", (m, k), dtype)
    w = b.weight("w", (k, n), dtype)
    return b.build([b.matmul(x, w)])


def add_graph(shape: tuple[int, ...]) -> Graph:
    b = GraphBuilder("add")
    return b.build([b.ewadd(b.input("x", shape), b.input("y", shape))])


def only_kernel(c: Compiled, op: str):
    """The report of the single kernel that contains an `op` node."""
    sim = simulate(c)
    hits = [r for r in sim.kernels if op in r.name.split("+")]
    assert len(hits) == 1, [r.name for r in sim.kernels]
    return hits[0]


# ---- sanity targets -------------------------------------------------------------------------

def test_2048_cubed_bf16_matmul_reaches_85_to_92_percent_of_peak() -> None:
    # The band was 85-90% with the assumed fixed costs; the constants calibrated on
    # TPU v3 kernels (a 62-cycle grid step, the 256-cycle MXU fill) gave 90.9% at the legacy
    # default's tile, and the XLA-strength default's tile (fewer, larger steps) 92.0%.
    c = compile_default(matmul_graph(2048, 2048, 2048))
    validate(c)
    sim = simulate(c)
    assert sim.flops == 2 * 2048**3
    assert 0.85 <= sim.flops_fraction <= 0.93
    assert sim.kernels[0].bound == "compute"


def test_tiny_elementwise_kernel_is_dominated_by_its_fixed_cost() -> None:
    # DESIGN's target says about 1 us, but real TPU v3 kernels measure 0.6 us whole (issue
    # 15), so the launch is held at 470 cycles (0.45 us on v4's 1.05 GHz): a 4 KiB add is
    # mostly that fixed cost and still faster than the smallest measured real kernel.
    sim = simulate(compile_default(add_graph((8, 128))))
    (k,) = sim.kernels
    assert 0.4e-6 <= k.time < 0.6e-6
    assert k.cost.overhead >= 0.9 * k.time
    assert k.bound == "overhead"


def test_kernels_turn_compute_bound_near_the_ridge_point() -> None:
    # Intensity of a bf16 (m x 4096) @ (4096 x 4096) product: m * 4096 / (2m + 4096) FLOP/B.
    low = only_kernel(compile_default(matmul_graph(64, 4096, 4096)), "matmul")
    high = only_kernel(compile_default(matmul_graph(2048, 4096, 4096)), "matmul")
    assert 64 * 4096 / (2 * 64 + 4096) < TPU_V4.ridge < 2048 * 4096 / (2 * 2048 + 4096)
    assert low.bound == "memory"
    assert high.bound == "compute"


def test_padding_follows_the_tiling() -> None:
    one = simulate(compile_default(add_graph((1, 1))))
    tile = simulate(compile_default(add_graph((8, 128))))
    wider = simulate(compile_default(add_graph((8, 129))))
    assert one.time == tile.time
    assert one.bytes == tile.bytes == 3 * 8 * 128 * 4  # two operands and a result, one tile each
    assert wider.bytes == 2 * tile.bytes  # 129 lanes pad to 256
    big_one = simulate(compile_default(add_graph((1024, 1))))
    big_full = simulate(compile_default(add_graph((1024, 128))))
    assert big_one.time == pytest.approx(big_full.time)


def _conv_net() -> tuple[Graph, Value, Value]:
    b = GraphBuilder("conv7")
    x = b.relu(b.input("x", (4, 256, 7, 7)))
    y = b.conv2d(x, b.weight("w", (256, 256, 3, 3)), padding="same")
    return b.build([b.relu(y)]), x, y


def test_feature_dim_in_lanes_beats_a_layout_that_pads_it() -> None:
    g, x, y = _conv_net()
    separate = {n.id: False for n in g.nodes}  # the conv kernel reads x and writes y

    def conv(layout: tuple[int, ...]):
        c = compile_with(g, Config(layouts={x: layout, y: layout}, fusion=separate),
                         fusion_default="none")
        validate(c)
        return only_kernel(c, "conv2d"), simulate(c).time

    (good, good_total), (bad, bad_total) = conv(feature_minor()), conv(row_major(4))
    # x and y: 4 x 7 x 8 x 256 f32 in lanes; 4 x 256 x 8 x 128 (W=7 padded to 128 lanes).
    weights = 256 * 256 * 9 * 4
    assert good.cost.bytes == weights + 2 * 4 * 7 * 8 * 256 * 4
    assert bad.cost.bytes == weights + 2 * 4 * 256 * 8 * 128 * 4
    assert good.cost.compute < bad.cost.compute  # the MXU wants channels in lanes
    assert good.time < bad.time
    assert good_total < bad_total


def test_fusing_an_elementwise_chain_saves_its_intermediate_traffic() -> None:
    b = GraphBuilder("chain")
    y = b.tanh(b.sigmoid(b.relu(b.input("x", (256, 4096)))))
    g = b.build([y])
    fused = compile_default(g)
    unfused = compile_with(g, Config(fusion={n.id: False for n in g.nodes}))
    validate(fused)
    validate(unfused)
    mib4 = 256 * 4096 * 4
    assert len(fused.kernels) == 1 and len(unfused.kernels) == 3
    sf, su = simulate(fused), simulate(unfused)
    assert sf.bytes == 2 * mib4  # read x, write y
    assert su.bytes - sf.bytes == 2 * 2 * mib4  # two intermediates, each written and read
    assert sf.time < su.time


def test_a_tile_too_big_for_vmem_is_rejected() -> None:
    g = matmul_graph(4096, 4096, 4096, "f32")
    c = compile_default(g)
    root = c.kernels[0].root
    huge = compile_with(g, c.config.with_(tiles={root: (4096, 4096, 4096)}))
    with pytest.raises(InvalidConfig, match="VMEM"):
        validate(huge)
    sim = simulate(huge)
    assert not sim.valid and math.isinf(sim.time)
    fine = compile_with(g, c.config.with_(tiles={root: (512, 512, 512)}))
    validate(fine)


def test_double_buffering_doubles_the_tiles_vmem() -> None:
    b = GraphBuilder("relu")
    g = b.build([b.relu(b.input("x", (4096, 1024)))])
    c = compile_default(g)
    sig = c.signatures[0]
    stats = KernelCosts(TPU_V4).stats(sig)
    # 2048 rows of 1024 f32 lanes: 8 MiB in + 8 MiB out.
    single = kernel_cost(stats, (2048,), Flags(double_buffer=False), TPU_V4)
    double = kernel_cost(stats, (2048,), Flags(double_buffer=True), TPU_V4)
    assert single.vmem == 16 * 2**20 and single.valid
    assert double.vmem == 32 * 2**20 and not double.valid


def test_measure_noise_is_reproducible_by_seed_and_about_1_5_percent() -> None:
    c = compile_default(matmul_graph(512, 512, 512))
    exact = simulate(c).time
    assert measure(c, seed=7) == measure(c, seed=7)
    assert measure(c, seed=7) != measure(c, seed=8)
    samples = np.array([measure(c, seed=s) for s in range(400)]) / exact
    assert 0.01 <= samples.std() <= 0.02
    assert abs(samples.mean() - 1) < 0.005


# ---- the trade-offs behind each decision ------------------------------------------------------

def test_fusing_a_producer_into_two_kernels_duplicates_its_work() -> None:
    b = GraphBuilder("dup")
    h = b.relu(b.input("x", (512, 1024)))
    y1 = b.matmul(h, b.weight("w1", (1024, 256)))
    y2 = b.matmul(h, b.weight("w2", (1024, 256)))
    g = b.build([y1, y2])
    relu = h.node
    dup = compile_with(g, Config(fusion={n.id: n.id == relu for n in g.nodes}))
    alone = compile_with(g, Config(fusion={n.id: False for n in g.nodes}))
    validate(dup)
    validate(alone)
    sd, sa = simulate(dup), simulate(alone)
    assert len(dup.kernels) == 2 and len(alone.kernels) == 3
    assert sd.executed_flops - sd.flops == 512 * 1024  # the relu runs twice
    assert sa.executed_flops == sa.flops


def test_smaller_output_tiles_reread_the_other_operand() -> None:
    g = matmul_graph(2048, 2048, 2048)
    c = compile_default(g)
    root = c.kernels[0].root
    mib8 = 2048 * 2048 * 2

    def traffic(tile: tuple[int, int, int]) -> float:
        return simulate(compile_with(g, c.config.with_(tiles={root: tile}))).bytes

    # With the whole contraction per step the lhs block stays resident; the rhs is read once
    # per row block of the output.
    assert traffic((256, 256, 2048)) == mib8 + 8 * mib8 + mib8
    assert traffic((1024, 1024, 2048)) == mib8 + 2 * mib8 + mib8


def test_short_row_counts_pay_the_mxu_weight_load_floor() -> None:
    r = only_kernel(compile_default(matmul_graph(8, 4096, 4096)), "matmul")
    ideal = 2 * 8 * 4096 * 4096 / TPU_V4.peak_flops
    assert r.cost.mxu > 10 * ideal  # 8 useful rows per 128-row weight load


def test_mxu_split_matters_for_narrow_outputs() -> None:
    g = matmul_graph(2048, 2048, 128)
    c = compile_default(g)
    root = c.kernels[0].root

    def mxu(split: str) -> float:
        return only_kernel(compile_with(g, c.config.with_(flags={root: Flags(mxu_split=split)})),
                           "matmul").cost.mxu

    # One 128-column block keeps one MXU of four busy when MXUs split columns.
    assert mxu("n") > 3 * mxu("m")
    assert mxu("n") > 2 * mxu("k")
    assert c.config.flags[root].mxu_split == "m"  # the default picks the sensible split


def test_batched_products_stack_into_grid_steps() -> None:
    b = GraphBuilder("heads")
    q = b.input("q", (64, 128, 64), "bf16")
    k = b.input("k", (64, 64, 128), "bf16")
    g = b.build([b.matmul(q, k)])
    c = compile_default(g)
    root = c.kernels[0].root
    tm = c.config.tiles[root][0]
    assert tm > 128 and tm % 128 == 0  # several heads per step
    one = compile_with(g, c.config.with_(tiles={root: (128, 128, 128)}))
    validate(one)
    stacked, single = simulate(c).kernels[0], simulate(one).kernels[0]
    assert single.cost.steps == 64 and stacked.cost.steps == 64 * 128 // tm
    assert stacked.cost.bytes == single.cost.bytes  # same data, fewer fills and step costs
    assert stacked.time < single.time


def test_unrolling_amortises_loop_overhead_until_registers_spill() -> None:
    b = GraphBuilder("branches")
    x = b.input("x", (1024, 1024))
    # Twelve branches computed before they are summed: all twelve are live at once.
    branches = [b.sigmoid(b.ewmul(x, b.weight(f"s{i}", (1024,)))) for i in range(12)]
    y = branches[0]
    for t in branches[1:]:
        y = b.ewadd(y, t)
    g = b.build([y])
    c = compile_default(g)
    assert len(c.kernels) == 1
    stats = KernelCosts(TPU_V4).stats(c.signatures[0])
    assert 12 <= stats.live_vregs <= 16
    tile = c.config.tiles[c.kernels[0].root]
    vec = {u: kernel_cost(stats, tile, Flags(unroll=u), TPU_V4).vector for u in (1, 2, 8)}
    assert vec[2] < vec[1]  # 2 x 14 live values fit 32 registers
    assert vec[8] > vec[2]  # 8 x 14 do not: spills


def test_a_chain_keeps_few_values_live() -> None:
    b = GraphBuilder("chain")
    y = b.input("x", (1024, 1024))
    for i in range(12):
        y = b.ewmul(b.sigmoid(y), b.weight(f"s{i}", (1024,)))
    c = compile_default(b.build([y]))
    assert len(c.kernels) == 1
    assert KernelCosts(TPU_V4).stats(c.signatures[0]).live_vregs <= 3


def test_without_double_buffering_steps_wait_for_their_dmas() -> None:
    b = GraphBuilder("relu")
    g = b.build([b.relu(b.input("x", (4096, 1024)))])
    c = compile_default(g)
    stats = KernelCosts(TPU_V4).stats(c.signatures[0])
    on = kernel_cost(stats, (256,), Flags(double_buffer=True), TPU_V4)
    off = kernel_cost(stats, (256,), Flags(double_buffer=False), TPU_V4)
    assert on.steps == off.steps == 16
    assert off.time > on.time


def test_small_transfers_move_data_less_efficiently() -> None:
    b = GraphBuilder("relu")
    g = b.build([b.relu(b.input("x", (4096, 1024)))])
    stats = KernelCosts(TPU_V4).stats(compile_default(g).signatures[0])
    big = kernel_cost(stats, (512,), Flags(), TPU_V4)
    small = kernel_cost(stats, (8,), Flags(), TPU_V4)
    assert big.bytes == small.bytes == 2 * 4096 * 1024 * 4
    ideal = big.bytes / TPU_V4.hbm_bytes_per_s
    # 8-row tiles move 32 KiB runs: the per-run DMA cost (7 ns, 4.2 KB of transfer time at
    # v4's 600 GB/s) makes them about 13% slower than the stream rate.
    assert big.memory < 1.01 * ideal
    assert small.memory > 1.05 * ideal


def test_repeated_layers_share_cached_kernel_costs() -> None:
    from superopt import zoo

    c = compile_default(zoo.build("resnet50"))
    assert len(set(c.signatures)) < len(c.kernels)
    assert c.simulator is not None
    model = c.simulator.kernels  # simulate(c) uses the simulator that compiled it
    simulate(c)
    hits = model.hits
    simulate(c)
    assert model.hits - hits == len(c.kernels)


def test_invalid_tile_shapes_are_reported() -> None:
    g = matmul_graph(256, 256, 256)
    c = compile_default(g)
    root = c.kernels[0].root
    cases = [((256, 256), r"tile \(tm, tn, tk\)"), ((256, 100, 256), "tn=100"),
             ((12, 128, 128), "tm=12")]
    for tile, why in cases:
        bad = compile_with(g, c.config.with_(tiles={root: tile}))
        with pytest.raises(InvalidConfig, match=why):
            validate(bad)
    with pytest.raises(InvalidConfig, match="unroll"):
        validate(compile_with(g, c.config.with_(flags={root: Flags(unroll=3)})))


def test_times_are_statistically_stable_across_zoo_sizes() -> None:
    # Bigger batches take longer but amortise fixed costs: time per image falls.
    from superopt import zoo

    t1 = simulate(compile_default(zoo.build("resnet18", batch=1))).time
    t8 = simulate(compile_default(zoo.build("resnet18", batch=8))).time
    assert t1 < t8 < 8 * t1
    assert statistics.fmean([t1, t8 / 8]) < t1


def test_very_large_fusions_pay_instruction_fetch() -> None:
    b = GraphBuilder("big_fusion")
    y = b.input("x", (512, 512))
    for i in range(60):
        y = b.ewadd(b.relu(y), b.weight(f"b{i}", (512,)))
    big = compile_default(b.build([y]))
    assert len(big.kernels) == 1
    stats = KernelCosts(TPU_V4).stats(big.signatures[0])
    tile = big.config.tiles[big.kernels[0].root]
    roomy = TPU_V4.with_(instruction_budget=10**6)
    assert stats.n_ops == 120 > TPU_V4.instruction_budget
    extra = (kernel_cost(stats, tile, Flags(), TPU_V4).time
             - kernel_cost(stats, tile, Flags(), roomy).time)
    steps = kernel_cost(stats, tile, Flags(), TPU_V4).steps
    assert extra == pytest.approx(steps * (120 - 96) * TPU_V4.instruction_miss_s)
    small = compile_default(add_graph((512, 512)))
    s_stats = KernelCosts(TPU_V4).stats(small.signatures[0])
    s_tile = small.config.tiles[small.kernels[0].root]
    assert (kernel_cost(s_stats, s_tile, Flags(), TPU_V4).time
            == kernel_cost(s_stats, s_tile, Flags(), roomy).time)


def test_the_default_compilers_analytical_formula() -> None:
    from superopt.tpu_sim.kernel_time import analytical

    launch = TPU_V4.launch_s
    assert analytical(2e-6, 1e-6, TPU_V4) == pytest.approx(2e-6 + 1e-6 - 0.95e-6 + launch)
    assert analytical(0.0, 0.0, TPU_V4) == pytest.approx(launch)
