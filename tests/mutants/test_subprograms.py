"""Multi-linear subprograms: split at non-linear ops, subsets of big pieces, merges."""

from __future__ import annotations

import pytest

from superopt.importers import load_model
from superopt.ir import GraphBuilder
from superopt.mutants.degrees import check_multilinear
from superopt.mutants.subprograms import count_ops, extract, make_subprogram, pieces


def _ops(sub) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.op for n in sub.graph.nodes if n.op not in ("input", "weight")]


def test_split_at_nonlinear_ops_and_fused_activations() -> None:
    b = GraphBuilder("m")
    x = b.input("x", (1, 4, 8, 8))
    y = b.conv2d(x, b.weight("w1", (4, 4, 3, 3)), padding=(1, 1, 1, 1))
    y = b.ewadd(y, b.weight("b1", (1, 4, 1, 1)))
    y = b.relu(y)
    y = b.conv2d(y, b.weight("w2", (4, 4, 3, 3)), padding=(1, 1, 1, 1), activation="relu")
    y = b.conv2d(y, b.weight("w3", (8, 4, 1, 1)))
    g = b.build([y])
    got = sorted(tuple(_ops(s)) for s in extract(g))
    # The fused-relu conv is not multi-linear: it is no subprogram and splits the rest.
    assert got == [("conv2d",), ("conv2d", "ewadd")]
    subs = extract(g)
    first = next(s for s in subs if _ops(s) == ["conv2d", "ewadd"])
    assert [n.attr("name") for n in first.graph.nodes if n.op in ("input", "weight")] == \
        ["x0", "w0", "w1"]
    (site,) = first.sites
    assert [g.node(v.node).attr("name") for v in site.inputs] == ["x", "w1", "b1"]


def test_count_ops_counts_reshape_transpose_runs_once() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 6))
    y = b.transpose(b.reshape(b.matmul(x, b.weight("w", (6, 4))), shape=(2, 2, 2)),
                    perm=(1, 0, 2))
    g = b.build([y])
    assert count_ops(g.nodes) == 2


def test_shared_input_ops_are_merged() -> None:
    b = GraphBuilder("m")
    x = b.input("x", (1, 4, 8, 8))
    a = b.relu(b.conv2d(x, b.weight("w1", (4, 4, 3, 3)), padding=(1, 1, 1, 1)))
    c = b.relu(b.conv2d(x, b.weight("w2", (2, 4, 1, 1))))
    g = b.build([a, c])
    merged = [s for s in extract(g) if s.kind == "merged"]
    assert len(merged) == 1 and _ops(merged[0]) == ["conv2d", "conv2d"]
    assert len(merged[0].graph.outputs) == 2
    assert len(merged[0].graph.inputs) == 1  # one shared activation


def test_attention_is_split_into_multilinear_subsets() -> None:
    # Q K^T of one input is quadratic in it: not a subprogram, but its parts are.
    b = GraphBuilder("attn")
    x = b.input("x", (1, 8, 16))
    q = b.matmul(x, b.weight("wq", (16, 16)))
    k = b.matmul(x, b.weight("wk", (16, 16)))
    s = b.matmul(q, b.transpose(k, perm=(0, 2, 1)))
    g = b.build([b.softmax(s)])
    (piece,) = pieces(g)
    sub, _ = make_subprogram(g, piece)
    with pytest.raises(Exception, match="not multi-linear"):
        check_multilinear(sub)
    subs = extract(g)
    assert subs, "no subsets"
    for s_ in subs:
        check_multilinear(s_.graph)
        assert count_ops(s_.graph.nodes) <= 4
    assert any(s_.kind == "merged" and _ops(s_) == ["matmul", "matmul"] for s_ in subs)


def test_every_csrnet_conv_is_covered_once() -> None:
    g = load_model("csrnet", 1)
    subs = extract(g)
    convs = {n.id for n in g.nodes if n.op == "conv2d"}
    covered = [nid for s in subs for site in s.sites for nid in site.nodes
               if g.node(nid).op == "conv2d"]
    assert sorted(covered) == sorted(convs)  # 17 convs, each in exactly one site
    assert all(_ops(s) == ["conv2d", "ewadd"] for s in subs)
    # Sites with equal shapes share one subprogram: 17 convs, fewer distinct subprograms.
    assert len(subs) < len(convs)


def test_resnet_downsample_convs_are_merged() -> None:
    g = load_model("resnet18", 1)
    merged = [s for s in extract(g) if s.kind == "merged"]
    # Three downsampling blocks: a 3x3 stride-2 conv and a 1x1 stride-2 conv read one input.
    assert len(merged) == 3
    for s in merged:
        kernels = sorted(n.type.shape[2] for n in s.graph.nodes if n.op == "weight")
        assert kernels == [1, 3]
