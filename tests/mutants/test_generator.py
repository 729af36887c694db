"""Mutant generation: the depth-first search finds the stacking and padding mutants of a
conv on its own, every mutant keeps the original's inputs and output shapes, and the
families apply where their preconditions hold."""

from __future__ import annotations

from superopt.ir import Graph, GraphBuilder
from superopt.mutants.boxtest import box_test
from superopt.mutants.families import family_mutants
from superopt.mutants.generator import compute_signature, describe, dfs_mutants
from superopt.mutants.rebuild import fold


def conv(shape: tuple[int, ...], k: int = 3, pad: int = 1, dilation: int = 1) -> Graph:
    b = GraphBuilder("original")
    x = b.input("x", shape)
    w = b.weight("w", (shape[1], shape[1], k, k))
    return b.build([b.conv2d(x, w, padding=(pad,) * 4, dilation=(dilation, dilation))])


def _sources(g: Graph) -> dict[str, tuple[int, ...]]:
    return {n.attr("name"): n.type.shape for n in g.nodes if n.op in ("input", "weight")}


def test_fold_moves_a_factor_between_dims() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 8))
    assert b.shape(fold(b, x, 3, 2, True, 0, True)) == (2, 3, 4, 4)  # width halves -> batch
    assert b.shape(fold(b, x, 1, 3, True, 2, False)) == (1, 1, 12, 8)  # channels -> rows
    back = fold(b, fold(b, x, 2, 2, False, 2, True), 2, 2, True, 2, False)
    g = b.build([back])
    from superopt.mutants.boxtest import exhaustive_equal

    # de-interleaving rows then interleaving them again is the identity
    b2 = GraphBuilder()
    x2 = b2.input("x", (1, 3, 4, 8))
    copy = b2.build([b2.copy(x2)])
    assert exhaustive_equal(copy, g)[0].all()


def test_search_finds_stacking_and_explicit_padding() -> None:
    g = conv((2, 4, 8, 8))
    muts, stats = dfs_mutants(g, depth=3, max_states=4000, time_budget=20)
    assert muts and stats.programs >= len(muts)
    for m in muts:
        assert _sources(m.graph) == _sources(g)
        assert [m.graph.type_of(v).shape for v in m.graph.outputs] == [(2, 4, 8, 8)]
        assert compute_signature(m.graph) != compute_signature(g)
    descr = {describe(m.graph) for m in muts}
    assert "pad>conv2d" in descr  # explicit padding, then a valid conv
    results = [(describe(m.graph), box_test(g, m.graph)) for m in muts]
    stacked = [r for d, r in results if d == "rt>conv2d>rt" and not r.fully_equivalent
               and r.equal_fraction == 0.75]
    # Halves of the width (or height) stacked into the batch: 2 of 8 columns wrong.
    assert stacked
    assert all(r.fully_equivalent for d, r in results if d == "pad>conv2d")


def test_degree_pruning_keeps_bias_terms() -> None:
    b = GraphBuilder("biased")
    x = b.input("x", (1, 2, 6, 6))
    y = b.ewadd(b.conv2d(x, b.weight("w", (2, 2, 3, 3)), padding=(1, 1, 1, 1)),
                b.weight("bias", (1, 2, 1, 1)))
    g = b.build([y])
    muts, stats = dfs_mutants(g, depth=4, max_states=1200, time_budget=20)
    assert stats.reasons["degree"] > 0
    for m in muts:
        assert any(n.op == "ewadd" for n in m.graph.nodes)  # the bias term is always added


def test_families_apply_by_their_preconditions() -> None:
    plain = {m.family for m in family_mutants(conv((2, 4, 8, 8)))}
    assert {"stack_width", "stack_height", "unstack_width", "channel_to_height",
            "tile2"} <= plain
    assert "dilated_to_regular" not in plain
    dilated = {m.family for m in family_mutants(conv((1, 4, 14, 14), pad=2, dilation=2))}
    assert {"dilated_to_regular", "dilated_to_batch"} <= dilated
    one = {m.family for m in family_mutants(conv((1, 4, 7, 7), k=1, pad=0))}
    assert "conv1x1_as_matmul" in one and "unstack_width" not in one


def test_matmul_merges_are_exact() -> None:
    b = GraphBuilder("qkv")
    x = b.input("x", (1, 6, 8))
    outs = [b.matmul(x, b.weight(f"w{i}", (8, 8))) for i in range(3)]
    g = b.build(outs)
    (m,) = [m for m in family_mutants(g) if m.family == "merge_shared_matmul"]
    assert len([n for n in m.graph.nodes if n.op == "matmul"]) == 1
    assert box_test(g, m.graph).fully_equivalent
    b = GraphBuilder("pair")
    x1, x2 = b.input("x1", (6, 8)), b.input("x2", (6, 8))
    g2 = b.build([b.matmul(x1, b.weight("w1", (8, 4))), b.matmul(x2, b.weight("w2", (8, 4)))])
    (m2,) = [m for m in family_mutants(g2) if m.family == "merge_batched_matmul"]
    assert box_test(g2, m2.graph).fully_equivalent
