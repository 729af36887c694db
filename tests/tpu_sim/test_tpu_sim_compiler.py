"""The default compiler: every zoo model and every op compile to valid configurations;
layouts, fusion and repairs behave as documented; scale."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from op_cases import OP_CASES, op_case
from superopt import zoo
from superopt.ir import Graph, GraphBuilder, Value
from superopt.tpu_sim import (
    Config,
    InvalidConfig,
    Simulator,
    assign_layouts,
    compile_default,
    compile_with,
    problems,
    simulate,
    validate,
)
from superopt.tpu_sim.compiler import lay_out
from superopt.tpu_sim.fusion import MAX_OPERANDS
from superopt.tpu_sim.layout import feature_minor, row_major
from superopt.tpu_sim.synthetic import synthetic_graph


@pytest.mark.parametrize("name", zoo.names())
def test_every_zoo_model_compiles_by_default_to_a_valid_plausible_configuration(name: str
                                                                                ) -> None:
    g = zoo.build(name)
    c = compile_default(g)
    validate(c)
    assert c.partition.repaired == ()
    sim = simulate(c)
    assert sim.valid
    assert sim.roofline <= sim.time <= 100 * sim.roofline
    assert 20e-6 < sim.time < 20e-3  # batch-1 inference on one v4 core
    assert 5 <= len(c.kernels) < sum(1 for n in g.nodes if n.op not in ("input", "weight"))
    assert sim.time == pytest.approx(sum(r.time for r in sim.kernels))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=st.sampled_from(sorted(OP_CASES)).flatmap(op_case))
def test_every_op_compiles_and_simulates(graph: Graph) -> None:
    c = compile_default(graph)
    assert problems(c) == []
    sim = simulate(c)
    assert sim.valid and math.isfinite(sim.time) and sim.time >= 0


def _conv_after_input() -> tuple[Graph, Value]:
    b = GraphBuilder("conv")
    y = b.conv2d(b.input("x", (1, 64, 56, 56)), b.weight("w", (64, 64, 3, 3)), padding="same")
    return b.build([b.relu(y)]), y


def test_layout_conflicts_insert_copies_with_origins() -> None:
    b = GraphBuilder("flatten")
    y = b.relu(b.conv2d(b.input("x", (2, 64, 14, 14)), b.weight("w", (64, 64, 3, 3)),
                        padding="same"))
    flat = b.reshape(y, shape=(2, 64 * 14 * 14))
    g = b.build([b.matmul(flat, b.weight("fc", (64 * 14 * 14, 10)))])
    c = compile_default(g)
    validate(c)
    conv = next(n for n in c.graph.nodes if n.op == "conv2d")
    assert c.layouts[Value(conv.id)] == feature_minor()  # channels in lanes
    # The flatten is a row-major reshape: the conv's layout conflicts, so a copy goes in.
    (copy,) = [n for n in c.graph.nodes if n.op == "layout"]
    assert copy.attr("minor_to_major") == row_major(4)
    reshape = next(n for n in c.graph.nodes if n.op == "reshape")
    assert reshape.inputs == (Value(copy.id),)
    assert c.origin[copy.id] == (flat.node,)  # invented for the reshape
    assert compile_default(g).graph.structural_hash == c.graph.structural_hash


def test_graph_outputs_are_copied_back_to_row_major() -> None:
    g, _y = _conv_after_input()
    c = compile_default(g)
    validate(c)
    (copy,) = [n for n in c.graph.nodes if n.op == "layout"]
    assert c.graph.outputs == (Value(copy.id),)
    assert c.layouts[Value(copy.id)] == row_major(4)


def test_layout_overrides_propagate_to_elementwise_followers() -> None:
    b = GraphBuilder("follow")
    x = b.relu(b.input("x", (2, 32, 8, 8)))
    y = b.sigmoid(b.ewadd(x, b.weight("bias", (32, 1, 1))))
    g = b.build([b.tanh(y)])
    lay = assign_layouts(g, {x: feature_minor()})
    assert lay[y] == feature_minor()
    assert lay[Value(g.outputs[0].node)] == feature_minor()
    bias = next(n for n in g.nodes if n.op == "weight")
    assert lay[Value(bias.id)] == (0, 2, 1)  # C, 1, 1 stored with C minor, like the output


@pytest.mark.parametrize("layouts,needle", [
    (lambda x, r: {r: (0, 0, 1, 2)}, "not a permutation"),
    (lambda x, r: {x: (1, 3, 2, 0)}, "arrives row-major"),
    (lambda x, r: {Value(99): (0,)}, "not a value of graph"),
])
def test_bad_layouts_are_one_line_errors(layouts, needle: str) -> None:
    b = GraphBuilder("bad")
    x = b.input("x", (1, 4, 4, 4))
    r = b.relu(x)
    g = b.build([r])
    with pytest.raises(InvalidConfig, match=needle) as err:
        compile_with(g, Config(layouts=layouts(x, r)))
    assert "\n" not in str(err.value)


def test_fusion_decisions_for_unknown_nodes_are_rejected() -> None:
    g, _ = _conv_after_input()
    with pytest.raises(InvalidConfig, match="fusion decision for node 1000"):
        compile_with(g, Config(fusion={1000: True}))


def test_an_mxu_op_is_never_duplicated_and_the_repair_is_reported() -> None:
    b = GraphBuilder("shared")
    h = b.matmul(b.input("x", (256, 256)), b.weight("w", (256, 256)))
    g = b.build([b.relu(h), b.sigmoid(h)])
    default = compile_default(g)
    validate(default)
    assert default.partition.kernel_of[h.node] == (h.node,)  # the default keeps it alone
    forced = compile_with(g, Config(fusion={h.node: True}))
    assert forced.partition.kernel_of[h.node] == (h.node,)
    found = problems(forced)
    assert len(found) == 1 and "not duplicated" in found[0]


def test_a_second_mxu_op_is_not_fused_into_a_kernel_that_has_one() -> None:
    b = GraphBuilder("two")
    h = b.matmul(b.input("x", (256, 256)), b.weight("w1", (256, 256)))
    y = b.matmul(h, b.weight("w2", (256, 256)))
    g = b.build([y])
    c = compile_with(g, Config(fusion={n.id: n.id == h.node for n in g.nodes}))
    assert len(c.kernels) == 2
    assert any("already has an MXU op" in p for p in problems(c))


@settings(max_examples=25, deadline=None)
@given(data=st.data(), name=st.sampled_from(["resnet18", "bert_small", "squeezenet"]))
def test_any_fusion_configuration_gives_acyclic_kernels(data: st.DataObject, name: str) -> None:
    g = zoo.build(name)
    sim = Simulator()
    laid = lay_out(g, None, sim=sim).graph
    flips = data.draw(st.lists(st.booleans(), min_size=len(laid.nodes),
                               max_size=len(laid.nodes)))
    c = compile_with(g, Config(fusion=dict(enumerate(flips))), sim=sim)
    assert c.graph is laid  # the simulator's layout-pass cache
    for p in problems(c, lint=False):
        # Only honest repairs and VMEM limits of huge fusions; never a cycle or a lost node.
        assert "overridden" in p or "VMEM" in p, p
    again = compile_with(g, Config(fusion=dict(enumerate(flips))))
    assert [k.nodes for k in again.kernels] == [k.nodes for k in c.kernels]  # deterministic


def test_kernels_respect_the_operand_limit() -> None:
    b = GraphBuilder("wide")
    xs = [b.input(f"x{i}", (64, 128)) for i in range(150)]
    y = xs[0]
    for x in xs[1:]:
        y = b.ewadd(y, x)
    c = compile_default(b.build([y]))
    validate(c)
    assert len(c.kernels) >= 2
    assert all(len(k.inputs) + len(k.outputs) <= MAX_OPERANDS for k in c.kernels)


def test_a_transposing_producer_is_not_fused_into_a_reduction() -> None:
    b = GraphBuilder("t")
    x = b.relu(b.input("x", (512, 256)))
    t = b.op("layout", x, minor_to_major=(0, 1))  # a physical transpose of the tiles
    g = b.build([b.reduce_sum(t, axes=(1,))])
    c = compile_default(g)
    validate(c)
    layout_node = next(n.id for n in c.graph.nodes if n.op == "layout")
    reduce_node = next(n.id for n in c.graph.nodes if n.op == "reduce_sum")
    assert c.partition.kernel_of[layout_node] != c.partition.kernel_of[reduce_node]


def test_a_fusion_that_fits_no_tile_is_split_back_by_the_default_compiler() -> None:
    # EfficientNet-B0's squeeze-excite at batch 16: priority fusion alone fuses the global
    # mean over a 112x112 image into the 1x1 convolution that reads it, a kernel whose grid
    # tiles only the tiny output, so no tile fits VMEM and the whole program was invalid.
    from superopt.tpu_sim.fusion import priority_fusion

    g = zoo.build("efficientnet_b0", batch=16)
    sim = Simulator()
    laid = sim.lay_out(g)
    raw = priority_fusion(laid.graph, laid.laid_layouts, sim.hw, laid.bitcasts, laid.stored)
    before = sim.simulate(sim.compile(g, Config(fusion=raw)))
    assert not before.valid  # the case exists: fusion alone makes an untileable kernel
    c = sim.compile(g)
    validate(c)
    after = sim.simulate(c)
    assert after.valid and math.isfinite(after.time)
    # Only the offending kernels were split: every other fusion decision is priority's.
    changed = [n for n, d in c.config.fusion.items() if d != raw[n]]
    assert changed and all(raw[n] and not c.config.fusion[n] for n in changed)
    assert len(changed) < sum(raw.values()) // 4


def test_a_fused_producer_leaves_the_kernels_reads_and_brings_its_own() -> None:
    # A two-output producer (%5, as a split) read by its consumer through both outputs:
    # fused, neither is read from memory any more; what both read is read once, at the
    # larger of the two byte counts.
    from superopt.tpu_sim.fusion import _Group, _merged
    from superopt.tpu_sim.hardware import get_hardware

    hw = get_hardware()
    p = _Group([5], {(1, 0): 100.0, (2, 0): 50.0}, 80.0, 0.0, 1e-9, False, False, False,
               True, 2)._finish(hw)
    c = _Group([9], {(5, 0): 40.0, (5, 1): 40.0, (2, 0): 70.0, (7, 0): 10.0}, 30.0, 0.0,
               1e-9, False, False, False, True, 1)._finish(hw)
    m = _merged(c, p, 5, hw)
    assert m.ext == {(2, 0): 70.0, (7, 0): 10.0, (1, 0): 100.0}
    assert m.vec_s == 2e-9 and m.out_bytes == 30.0 and m.outputs == 1
    assert c.ext[(5, 1)] == 40.0  # the consumer's own group is left as it was


def test_priority_fusion_given_the_layout_pass_consumers_decides_as_without() -> None:
    from superopt.tpu_sim.fusion import priority_fusion

    g = zoo.build("inception_v3")
    sim = Simulator()
    laid = sim.lay_out(g)
    args = (laid.graph, laid.laid_layouts, sim.hw, laid.bitcasts, laid.stored)
    assert priority_fusion(*args, consumers=laid.consumers) == priority_fusion(*args)


def test_the_default_partition_is_formed_once_and_is_the_one_a_fresh_formation_gives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from superopt.tpu_sim import pipeline, simulator
    from superopt.tpu_sim.kernels import form_kernels

    calls: list[int] = []

    def counting(*a: object, **k: object) -> object:
        calls.append(1)
        return form_kernels(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(pipeline, "form_kernels", counting)
    monkeypatch.setattr(simulator, "form_kernels", counting)
    for name, batch, split in (("resnet18", 1, False), ("efficientnet_b0", 16, True)):
        g = zoo.build(name, batch=batch)
        sim = Simulator()
        calls.clear()
        c = sim.compile(g)
        # Once (the default decisions' own partition is reused), twice when a kernel had
        # to be split back (the decisions changed after it was formed).
        assert len(calls) == (2 if split else 1)
        laid = sim.lay_out(g)
        fresh = form_kernels(laid.graph, laid.laid_layouts, c.config.fusion, laid.bitcasts,
                             laid.consumers)
        assert fresh.kernels == c.partition.kernels
        assert fresh.kernel_of == c.partition.kernel_of
        # A second compile on the same layouts decides nothing again.
        calls.clear()
        again = sim.compile(g, Config(tiles=dict(c.config.tiles)))
        assert len(calls) == (1 if split else 0)
        assert again.partition.kernels == c.partition.kernels
        # A changed decision forms its own kernels.
        node = next(n for n, d in c.config.fusion.items() if d is True)
        calls.clear()
        other = sim.compile(g, Config(fusion={node: False}))
        assert len(calls) == 1 and other.partition.kernels != c.partition.kernels
        assert simulate(again).time == simulate(c).time


def test_a_compiled_configuration_round_trips() -> None:
    g = zoo.build("bert_small")
    sim = Simulator()
    c = sim.compile(g)
    again = sim.compile(g, c.config)
    assert again.graph is c.graph  # the assigned layouts hit the cache: no second pass
    # Keyed by content: a rebuilt, equal graph hits it too; a fresh simulator does not.
    assert sim.compile(zoo.build("bert_small")).graph is c.graph
    assert Simulator().compile(g).graph is not c.graph
    assert simulate(again).time == simulate(c).time
    assert again.config.tiles == c.config.tiles and again.config.flags == c.config.flags


def test_partial_configurations_are_completed_with_defaults() -> None:
    g = zoo.build("resnet18")
    c = compile_default(g)
    root = c.kernels[3].root
    tile = c.config.tiles[root]
    smaller = (*tile[:-1], 128) if len(tile) == 3 else (8,)
    partial = compile_with(g, Config(tiles={root: smaller}))
    assert partial.config.tiles[root] == smaller
    assert len(partial.config.fusion) == len(partial.graph.nodes)
    assert {k.root for k in partial.kernels} == {k.root for k in c.kernels}


def test_synthetic_graphs_are_deterministic_and_sized() -> None:
    a, b = synthetic_graph(3000, seed=1), synthetic_graph(3000, seed=1)
    assert len(a) >= 3000 and a.structural_hash == b.structural_hash
    assert synthetic_graph(3000, seed=2).structural_hash != a.structural_hash
    ops = a.op_histogram()
    assert {"matmul", "conv2d", "softmax", "layer_norm", "transpose"} <= set(ops)


def test_a_medium_synthetic_graph_compiles_quickly() -> None:
    g = synthetic_graph(5000)
    t0 = time.perf_counter()
    c = compile_default(g)
    sim = simulate(c)
    assert time.perf_counter() - t0 < 10
    validate(c, lint=False)
    assert sim.valid and len(c.kernels) > 500


@pytest.mark.slow
def test_a_100k_node_graph_compiles_and_simulates_in_seconds() -> None:
    g = synthetic_graph(100_000)
    t0 = time.perf_counter()
    c = compile_default(g)
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim = simulate(c)
    t_sim = time.perf_counter() - t0
    t0 = time.perf_counter()
    simulate(compile_with(g, c.config))
    t_eval = time.perf_counter() - t0
    assert problems(c, lint=False) == []
    assert sim.valid
    assert t_sim < 5 and t_eval < 10 and t_compile < 30


def test_validate_catches_inconsistent_layouts_and_partitions() -> None:
    import dataclasses

    from superopt.tpu_sim.layout import NodeLayouts

    b = GraphBuilder("chain")
    r = b.relu(b.input("x", (64, 256)))
    s = b.sigmoid(r)
    g = b.build([b.tanh(s)])
    c = compile_with(g, Config(fusion={n.id: False for n in g.nodes}))
    validate(c)
    # The sigmoid's result claims a transposed layout its row-major consumer cannot read.
    per = list(c.layouts.per_node)
    per[s.node] = ((0, 1),)
    bad_layouts = dataclasses.replace(c, layouts=NodeLayouts(per))
    found = problems(bad_layouts)
    assert any("needs operand 0 in layout (1, 0)" in p for p in found)
    # A partition that drops the sigmoid's kernel but still reads its value.
    part = c.partition
    kernel_of = list(part.kernel_of)
    kernel_of[s.node] = (s.node + 1,)
    fake = dataclasses.replace(part, kernels=tuple(k for k in part.kernels if k.root != s.node),
                               kernel_of=tuple(kernel_of))
    sigs = tuple(sig for k, sig in zip(part.kernels, c.signatures, strict=True)
                 if k.root != s.node)
    found = problems(dataclasses.replace(c, partition=fake, signatures=sigs))
    assert any("not the root of an earlier kernel" in p for p in found)
    assert any(f"%{s.node} (sigmoid) is computed by no kernel" in p for p in found)
    with pytest.raises(InvalidConfig, match="invalid configuration"):
        validate(dataclasses.replace(c, partition=fake, signatures=sigs))


@pytest.mark.parametrize("rows,k,n", [(128, 768, 3072), (8, 256, 128), (200, 96, 40)])
def test_a_dense_layer_costs_the_same_as_linear_or_as_matmul_plus_bias(rows: int, k: int,
                                                                      n: int) -> None:
    """XLA fuses a dot's bias add and activation into the dot's kernel, so the fused op
    `linear` (weight stored (N, K), laid out with N in lanes) is one MXU kernel of the
    same time as matmul + ewadd + gelu."""
    b = GraphBuilder("mm")
    y = b.ewadd(b.matmul(b.input("x", (rows, k)), b.weight("w", (k, n))), b.weight("b", (n,)))
    unfused = b.build([b.gelu(y)])
    b = GraphBuilder("lin")
    y = b.linear(b.input("x", (rows, k)), b.weight("w", (n, k)), b.weight("b", (n,)))
    fused = b.build([b.gelu(y)])
    times = []
    for g in (unfused, fused):
        c = compile_default(g)
        validate(c)
        assert len(c.kernels) == 1
        times.append(simulate(c).time)
    assert times[1] == pytest.approx(times[0], rel=0.02)
