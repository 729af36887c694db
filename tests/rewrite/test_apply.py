"""Applying sites: values preserved, dead nodes removed, subexpressions merged, origins right."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.ir import Graph, GraphBuilder, interpret, random_feeds
from superopt.rewrite import Matcher, RewriteError, apply_site, apply_sites
from superopt.substitutions import parse_rules

RULES = parse_rules("""\
fuse: (relu (conv2d ?s ?p ?d ?g none ?x ?w)) => (conv2d ?s ?p ?d ?g relu ?x ?w)
merge: (matmul ?a ?x ?w1) ; (matmul ?a ?x ?w2) => (split.0 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) ; (split.1 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2)))
tt: (transpose [1,0] (transpose [1,0] ?x)) => ?x
rr: (relu (relu ?x)) => (relu ?x)
""")
M = Matcher(RULES)


def _same_values(a: Graph, b: Graph, seed: int = 0) -> None:
    a.lint()
    b.lint()
    feeds = random_feeds(a, seed=seed)
    want, got = interpret(a, feeds), interpret(b, feeds)
    assert len(want) == len(got)
    for x, y in zip(want, got, strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12)


def test_fusion_removes_the_source_and_keeps_values() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    c = b.conv2d(x, b.weight("w", (4, 3, 3, 3)), padding="same")
    y = b.relu(c)
    out = b.ewadd(y, b.weight("bias", (4, 1, 1)))
    g = b.build([out])
    site = M.match(g).by_rule()["fuse"][0]
    new, origin = apply_site(g, site, M)
    _same_values(g, new)
    assert new.op_histogram()["relu"] == 0 and new.op_histogram()["conv2d"] == 1
    conv = next(n for n in new.nodes if n.op == "conv2d")
    assert conv.attr("activation") == "relu" and conv.attr("padding") == "same"
    # The fused conv comes from the conv and the relu; untouched nodes from themselves.
    assert origin[conv.id] == (c.node, y.node)
    for n in new.nodes:
        if n.op in ("input", "weight", "ewadd"):
            (old,) = origin[n.id]
            assert g.nodes[old].op == n.op and g.nodes[old].attrs == n.attrs


def test_multi_output_site_with_a_late_weight_is_applied_after_reordering() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    y1 = b.matmul(x, b.weight("w1", (8, 3)))
    r1 = b.relu(y1)
    y2 = b.matmul(x, b.weight("w2", (8, 5)))  # w2 is declared after y1 and its reader
    g = b.build([r1, y2])
    (site,) = M.match(g).by_rule()["merge"]
    res = apply_site(g, site, M)
    new, origin = res
    _same_values(g, new)
    hist = new.op_histogram()
    assert hist["matmul"] == 1 and hist["split"] == 1 and hist["concat"] == 1
    split = next(n for n in new.nodes if n.op == "split")
    merged = next(n for n in new.nodes if n.op == "matmul")
    assert set(origin[split.id]) == {y1.node, y2.node}
    assert set(origin[merged.id]) == {y1.node, y2.node}
    relu = next(n for n in new.nodes if n.op == "relu")
    assert relu.inputs[0].node == split.id and origin[relu.id] == (r1.node,)
    assert res.applied == (site,)


def test_reordering_for_one_site_keeps_every_other_sites_variables_before_its_outputs() -> None:
    # Site A's late variable v delays A's first output a1, and with it x0 = relu(a1), which
    # site B reads. B's second output b2 reads neither, so a reordering that only looked
    # at each site's late variables put b2 (B's trigger) before x0: applying B then read
    # x0 before it existed (a KeyError while tuning inception_v3 with PET's mutants).
    pair = Matcher(parse_rules(
        "pair: (matmul ?a ?x ?w1) ; (matmul ?a ?y ?w2) => "
        "(matmul ?a ?x ?w1) ; (matmul ?a ?y ?w2)"))
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    w = [b.weight(f"w{i}", (4, 4)) for i in range(4)]
    a1 = b.matmul(x, w[0])
    x0 = b.relu(a1)
    b1 = b.matmul(x0, w[1])
    b2 = b.matmul(x, w[2])
    v = b.relu(b.relu(x))
    a2 = b.matmul(v, w[3])
    g = b.build([b1, b2, a2])
    site_a = pair.site_at(g, "pair", (a1, a2))
    site_b = pair.site_at(g, "pair", (b1, b2))
    assert site_a is not None and site_b is not None
    res = apply_sites(g, [site_a, site_b], pair, check=False)
    assert len(res.applied) == 2
    _same_values(g, res.graph)


def test_bare_variable_target_and_hash_consing() -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    t = b.transpose(b.transpose(x, perm=(1, 0)), perm=(1, 0))
    r = b.relu(x)
    rr = b.relu(r)
    g = b.build([b.ewadd(t, rr), r])
    sites = M.match(g).sites
    assert {s.rule for s in sites} == {"tt"}  # rr shares its inner relu (an output): no site
    new, origin = apply_sites(g, sites, M)
    _same_values(g, new)
    assert new.op_histogram()["transpose"] == 0
    add = next(n for n in new.nodes if n.op == "ewadd")
    assert add.inputs[0].node == 0  # reads x directly
    # x comes from itself and from the two transposes it replaced.
    assert set(origin[0]) == {0, t.node, t.node - 1}
    # Allowing shared inner nodes, relu(relu(x)) becomes relu(x): the existing node is reused.
    m2 = Matcher(RULES, exclusive=False)
    site = m2.match(g).by_rule()["rr"][0]
    new2, _ = apply_site(g, site, m2)
    _same_values(g, new2)
    assert new2.op_histogram()["relu"] == 1


def test_overlapping_sites_are_skipped_or_refused() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    ys = [b.matmul(x, b.weight(f"w{i}", (8, 4))) for i in range(3)]
    g = b.build(ys)
    sites = M.match(g).sites
    assert len(sites) == 3
    res = apply_sites(g, sites, M)
    assert len(res.applied) == 1 and len(res.skipped) == 2
    assert all("overlaps" in why for _, why in res.skipped)
    _same_values(g, res.graph)
    with pytest.raises(RewriteError, match="overlaps"):
        apply_sites(g, sites, M, strict=True)


def test_sites_that_together_would_form_a_cycle_are_skipped_or_refused() -> None:
    # Merge A pairs m1 = x@w1 with m2 = x@relu(m3); merge B pairs m3 = z@v1 with
    # m4 = z@relu(m1). A's merged matmul needs m3 (B's output) and B's needs m1 (A's
    # output): each alone is fine, both together form a cycle.
    b = GraphBuilder()
    x = b.input("x", (4, 4))
    z = b.input("z", (4, 4))
    m1 = b.matmul(x, b.weight("w1", (4, 4)))
    m3 = b.matmul(z, b.weight("v1", (4, 4)))
    m4 = b.matmul(z, b.relu(m1))
    m2 = b.matmul(x, b.relu(m3))
    g = b.build([m2, m4])
    sites = M.match(g).by_rule()["merge"]
    pair_a = next(s for s in sites if {m1.node, m2.node} <= set(s.nodes))
    pair_b = next(s for s in sites if {m3.node, m4.node} <= set(s.nodes))
    for one in (pair_a, pair_b):
        _same_values(g, apply_sites(g, [one], M).graph)
    res = apply_sites(g, [pair_a, pair_b], M)
    assert res.applied == (pair_a,)
    assert [s for s, _ in res.skipped] == [pair_b]
    assert "cycle" in res.skipped[0][1]
    _same_values(g, res.graph)
    with pytest.raises(RewriteError, match="cycle"):
        apply_sites(g, [pair_a, pair_b], M, strict=True)


def test_stale_sites_are_refused() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 8))
    g = b.build([b.matmul(x, b.weight("a", (8, 4))), b.matmul(x, b.weight("b", (8, 4)))])
    (site,) = M.match(g).sites
    new, _ = apply_site(g, site, M)
    with pytest.raises(RewriteError, match="does not match"):
        apply_site(new, site, M)


def test_many_sites_in_one_rebuild() -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 2, 6, 6))
    for i in range(4):
        x = b.relu(b.conv2d(x, b.weight(f"w{i}", (2, 2, 3, 3)), padding="same"))
    g = b.build([x])
    sites = M.match(g).sites
    assert len(sites) == 4
    new, origin = apply_sites(g, sites, M)
    _same_values(g, new)
    assert len(new) == len(g) - 4
    assert all(set(v) <= set(range(len(g))) for v in origin.values())


def test_transform_copies_unchanged_nodes_and_shares_weight_data() -> None:
    # The IR's copy path (GraphBuilder.recreate) that every rewrite goes through.
    from superopt.ir import transform

    b = GraphBuilder()
    x = b.input("x", (2, 3))
    w = b.weight("w", (3, 4), data=np.ones((3, 4)))
    g = b.build([b.relu(b.matmul(x, w))])
    same = transform(g, lambda *_: None).graph
    assert same.nodes == g.nodes and same.structural_hash == g.structural_hash
    assert same.weights["w"] is g.weights["w"]  # read-only data is shared, not copied

    # When a rewrite changes an input's type, the reader is re-checked (and re-inferred).
    def widen(bb, node, inputs, lookup):
        if node.op == "input":
            return (bb.input("x", (5, 3)),)
        return None

    wide = transform(g, widen).graph
    wide.lint()
    assert wide.type_of(wide.outputs[0]).shape == (5, 4)
