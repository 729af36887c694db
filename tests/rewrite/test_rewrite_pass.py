"""The rewrite pass as choices: points, options, rounds, stable keys, well-formed results."""

from __future__ import annotations

import json

import numpy as np

from superopt.ir import GraphBuilder, interpret, random_feeds
from superopt.rewrite import RewriteConfig, RewritePass, choose_all
from superopt.substitutions import parse_rules

RULES = parse_rules("""\
fuse: (relu (conv2d ?s ?p ?d ?g none ?x ?w)) => (conv2d ?s ?p ?d ?g relu ?x ?w)
fuse_keep: (relu (conv2d ?s ?p ?d ?g none ?x ?w)) => (relu (conv2d ?s ?p ?d ?g relu ?x ?w))
merge: (matmul ?a ?x ?w1) ; (matmul ?a ?x ?w2) => (split.0 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) ; (split.1 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2)))
tc: (transpose ?p (transpose ?q ?x)) => (transpose {[?q[?p[0]], ?q[?p[1]]]} ?x) if rank(?x) == 2
tid: (transpose [0,1] ?x) => ?x
""")


def _graph():
    b = GraphBuilder("g")
    x = b.input("x", (1, 2, 6, 6))
    y = b.relu(b.conv2d(x, b.weight("w", (2, 2, 3, 3)), padding="same"))
    m = b.input("m", (3, 4))
    mms = [b.matmul(m, b.weight(f"v{i}", (4, 2))) for i in range(3)]
    t = b.transpose(b.transpose(b.input("t", (2, 5)), perm=(1, 0)), perm=(1, 0))
    return b.build([y, *mms, t])


def _values_equal(a, b) -> None:
    feeds = random_feeds(a, seed=4)
    for u, v in zip(interpret(a, feeds), interpret(b, feeds), strict=True):
        np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-12)


def test_points_group_alternative_sites() -> None:
    g = _graph()
    p = RewritePass(RULES)
    points = p.points(g)
    by_rules = sorted(tuple(sorted({s.rule for s in pt.options})) for pt in points)
    # relu(conv): two rules; first matmul: paired with either other one; second matmul:
    # paired with the third; the outer transpose: compose.
    assert by_rules == [("fuse", "fuse_keep"), ("merge",), ("merge",), ("tc",)]
    assert sum(len(pt.options) for pt in points) == len(p.sites(g)) == 6
    assert p.apply(g, p.default(g)).graph is g


def test_a_configuration_picks_one_option_per_point_and_rounds_iterate() -> None:
    g = _graph()
    p = RewritePass(RULES)
    points = p.points(g)
    fuse_pt = next(pt for pt in points if any(s.rule == "fuse" for s in pt.options))
    tc_pt = next(pt for pt in points if pt.options[0].rule == "tc")
    keep = next(s for s in fuse_pt.options if s.rule == "fuse_keep")
    cfg = RewriteConfig.single({fuse_pt.key: keep.key, tc_pt.key: tc_pt.options[0].key})
    run = p.apply(g, cfg)
    run.graph.lint()
    _values_equal(g, run.graph)
    assert {s.rule for s in run.applied} == {"fuse_keep", "tc"}
    convs = [n for n in run.graph.nodes if n.op == "conv2d"]
    assert [c.attr("activation") for c in convs] == ["relu"]
    assert run.graph.op_histogram()["relu"] == 1
    # The composed transpose is the identity: a second round can remove it.
    (tid_pt,) = [pt for pt in p.points(run.graph) if pt.options[0].rule == "tid"]
    cfg2 = RewriteConfig((cfg.rounds[0], {tid_pt.key: tid_pt.options[0].key}))
    run2 = p.apply(g, cfg2)
    assert run2.graph.op_histogram()["transpose"] == 0
    _values_equal(g, run2.graph)
    # Origins compose across rounds back to the input graph.
    assert all(set(o) <= set(range(len(g))) for o in run2.origin.values())
    assert RewriteConfig.from_json(json.loads(cfg2.dumps())) == RewriteConfig(
        tuple(dict(r) for r in cfg2.rounds))


def test_overlapping_and_unknown_choices_leave_a_valid_graph() -> None:
    g = _graph()
    p = RewritePass(RULES)
    merge_pts = [pt for pt in p.points(g) if pt.options[0].rule == "merge"]
    # First matmul merged with the second, second matmul merged with the third: they overlap.
    first = merge_pts[0]
    choice_a = next(s for s in first.options
                    if s.roots[1] == merge_pts[1].options[0].roots[0])
    cfg = RewriteConfig.single({first.key: choice_a.key,
                                merge_pts[1].key: merge_pts[1].options[0].key,
                                "no-such-point": "x"})
    run = p.apply(g, cfg)
    (report,) = run.rounds
    assert len(report.applied) == 1 and len(report.skipped) == 1
    assert report.unknown == ("no-such-point",)
    _values_equal(g, run.graph)


def test_keys_carry_over_to_a_rebuilt_graph() -> None:
    g = _graph()
    p = RewritePass(RULES)
    cfg, run = p.iterate(g, choose_all(["fuse", "tc", "tid"]))
    assert len(cfg.rounds) == 2  # compose, then drop the identity transpose
    again = p.apply(_graph(), cfg)  # a fresh, equal graph: the same keys apply
    assert again.graph.structural_hash == run.graph.structural_hash
    assert [len(r.applied) for r in again.rounds] == [2, 1]


def test_iterate_reaches_a_fixpoint() -> None:
    g = _graph()
    p = RewritePass(RULES)
    _, run = p.iterate(g, choose_all(), max_rounds=10)
    _values_equal(g, run.graph)
    assert not any(s.rule in ("tc", "tid") for s in p.sites(run.graph))
    assert run.graph.op_histogram()["matmul"] == 1  # three matmuls merged in two rounds
