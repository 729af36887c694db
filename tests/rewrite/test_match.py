"""Matching: exactly the expected sites on small graphs, with every check a site must pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

from superopt.ir import GraphBuilder, Value
from superopt.rewrite import Matcher, Site, match
from superopt.rewrite.match import infer_types
from superopt.substitutions import PatternError, parse_rule, parse_rules

FUSE = parse_rule("fuse: (relu (conv2d ?s ?p ?d ?g none ?x ?w)) => (conv2d ?s ?p ?d ?g relu ?x ?w)")
MERGE = parse_rule(
    "merge: (matmul ?a ?x ?w1) ; (matmul ?a ?x ?w2) => "
    "(split.0 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) ; "
    "(split.1 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) "
    "if rank(?w1) == 2 and rank(?w2) == 2")


def _conv_graph():
    b = GraphBuilder("convs")
    x = b.input("x", (1, 3, 8, 8))
    w1 = b.weight("w1", (4, 3, 3, 3))
    w2 = b.weight("w2", (4, 3, 3, 3))
    c1 = b.conv2d(x, w1, padding="same")
    c2 = b.conv2d(x, w2, stride=(2, 2))
    y1 = b.relu(c1)
    y2 = b.relu(c2)
    y3 = b.relu(x)  # a relu of no conv: not a site
    return b.build([y1, y2, y3]), (c1, c2, y1, y2)


def test_single_output_rule_finds_exactly_the_conv_relu_pairs() -> None:
    g, (c1, _, y1, y2) = _conv_graph()
    m = match(g, [FUSE])
    assert m.per_rule == {"fuse": 2}
    by_root = {s.roots: s for s in m.sites}
    assert set(by_root) == {(y1,), (y2,)}
    s1, s2 = by_root[(y1,)], by_root[(y2,)]
    assert s1.nodes == tuple(sorted((c1.node, y1.node)))
    assert dict(s1.attrs) == {"s": (1, 1), "p": "same", "d": (1, 1), "g": 1}
    assert dict(s2.attrs)["s"] == (2, 2) and dict(s2.attrs)["p"] == "valid"
    assert s1.binding("w") != s2.binding("w")


def test_attribute_constants_and_defaults_restrict_matches() -> None:
    g, (_, _, _, y2) = _conv_graph()
    strided = parse_rule("r: (relu (conv2d [2,2] ?p ?x ?w)) => "
                         "(conv2d stride=[2,2] padding=?p activation=relu ?x ?w)")
    m = match(g, [strided])
    assert [s.roots for s in m.sites] == [(y2,)]
    # A pattern that names no activation requires the default ("none"): a fused conv is no site.
    b = GraphBuilder()
    x, w = b.input("x", (1, 3, 8, 8)), b.weight("w", (4, 3, 3, 3))
    fused = b.build([b.relu(b.conv2d(x, w, activation="relu"))])
    assert len(match(fused, [FUSE])) == 0


def _mm_graph(batched_weight: bool = False):
    b = GraphBuilder("mm")
    x = b.input("x", (2, 8))
    other = b.input("o", (2, 8))
    ws = [b.weight(f"w{i}", (8, 4 + i)) for i in range(2)]
    ws.append(b.weight("w2b", (3, 8, 6)) if batched_weight else b.weight("w2", (8, 6)))
    ys = [b.matmul(x, w) for w in ws]
    lone = b.matmul(other, b.weight("w9", (8, 4)))
    return b.build([*ys, lone]), ys


def test_multi_output_rule_pairs_matmuls_sharing_an_input_once_per_pair() -> None:
    g, ys = _mm_graph()
    m = match(g, [MERGE])
    assert m.per_rule["merge"] == 3  # 3 pairs of 3 matmuls; each unordered pair once
    pairs = {frozenset(s.roots) for s in m.sites}
    assert pairs == {frozenset(p) for p in ((ys[0], ys[1]), (ys[0], ys[2]), (ys[1], ys[2]))}
    for s in m.sites:
        assert s.binding("x") == Value(0)  # the shared input
        assert dict(s.attrs) == {"a": "none"}


def test_condition_excludes_sites_and_is_reported() -> None:
    g, ys = _mm_graph(batched_weight=True)
    m = match(g, [MERGE])
    assert {frozenset(s.roots) for s in m.sites} == {frozenset((ys[0], ys[1]))}
    # Candidates are ordered pairs (each order is tried, as a rule need not be symmetric).
    assert m.rejected["merge"]["condition"] == 4


def test_a_rule_whose_target_would_not_type_check_yields_no_site() -> None:
    # Kernels of different sizes cannot be concatenated: no merge site.
    rule = parse_rule("mc: (conv2d ?s ?p ?d 1 ?a ?x ?w1) ; (conv2d ?s ?p ?d 1 ?a ?x ?w2) => "
                      "(split.0 1 {[dim(?w1,0), dim(?w2,0)]} (conv2d ?s ?p ?d 1 ?a ?x "
                      "(concat 0 ?w1 ?w2))) ; (split.1 1 {[dim(?w1,0), dim(?w2,0)]} "
                      "(conv2d ?s ?p ?d 1 ?a ?x (concat 0 ?w1 ?w2)))")
    b = GraphBuilder()
    x = b.input("x", (1, 3, 8, 8))
    y1 = b.conv2d(x, b.weight("a", (4, 3, 3, 3)), padding="same")
    y2 = b.conv2d(x, b.weight("b", (4, 3, 1, 1)), padding="same")
    y3 = b.conv2d(x, b.weight("c", (2, 3, 3, 3)), padding="same")
    g = b.build([y1, y2, y3])
    m = match(g, [rule])
    assert {frozenset(s.roots) for s in m.sites} == {frozenset((y1, y3))}
    assert m.rejected["mc"]["types"] == 4  # two pairs, both orders
    # A rule that is wrong about types: the target's shape differs from the source's.
    wrong = parse_rule("t: (ewadd ?x ?y) => (matmul ?x ?y)")
    b = GraphBuilder()
    u, v = b.input("u", (3, 3)), b.input("v", (3, 4))
    sq = b.ewadd(u, b.input("w", (3, 3)))
    bad = b.ewadd(v, b.input("z", (3, 4)))  # matmul (3,4)x(3,4) does not type-check
    g2 = b.build([sq, bad])
    assert [s.roots for s in match(g2, [wrong]).sites] == [(sq,)]


def test_shared_inner_nodes_block_a_site_unless_duplication_is_allowed() -> None:
    b = GraphBuilder()
    x, w = b.input("x", (1, 3, 8, 8)), b.weight("w", (4, 3, 3, 3))
    c = b.conv2d(x, w)
    y = b.relu(c)
    z = b.ewadd(c, c)  # the conv is also read outside the match
    g = b.build([y, z])
    m = match(g, [FUSE])
    assert len(m) == 0 and m.rejected["fuse"]["shared"] == 1
    assert len(Matcher([FUSE], exclusive=False).match(g)) == 1
    # An inner node that is a graph output is shared too.
    b = GraphBuilder()
    x, w = b.input("x", (1, 3, 8, 8)), b.weight("w", (4, 3, 3, 3))
    c = b.conv2d(x, w)
    g = b.build([b.relu(c), c])
    assert len(match(g, [FUSE])) == 0


def test_multi_output_site_that_would_form_a_cycle_is_refused() -> None:
    b = GraphBuilder()
    x = b.input("x", (8, 8))
    y1 = b.matmul(x, b.weight("w", (8, 8)))
    y2 = b.matmul(x, b.relu(y1))  # the second weight depends on the first output
    g = b.build([y2])
    m = match(g, [MERGE])
    assert len(m) == 0 and m.rejected["merge"]["cycle"] == 2


def test_patterns_match_canonical_attributes() -> None:
    rules = parse_rules("neg: (concat -1 ?x ?y) => (concat 1 ?x ?y)\n"
                        "infer: (reshape [-1, 4] ?x) => (reshape [3, 4] ?x)\n")
    b = GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 3))
    c = b.concat(x, y, axis=1)
    r = b.reshape(b.input("z", (2, 6)), shape=(3, 4))
    g = b.build([c, r])
    m = match(g, rules)
    assert m.per_rule == {"neg": 1, "infer": 1}


def test_computed_attributes_in_a_source_must_equal_the_node() -> None:
    rule = parse_rule("sc: (split.0 ?a {[dim(?x,?a), dim(?y,?a)]} (concat axis=?a ?x ?y)) => ?x")
    b = GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (2, 4))
    cat = b.concat(x, y, axis=1)
    good = b.split(cat, axis=1, sizes=(3, 4))[0]
    cat2 = b.concat(b.input("u", (2, 3)), b.input("v", (2, 4)), axis=1)
    other = b.split(cat2, axis=1, sizes=(4, 3))[0]  # cuts elsewhere: not a site
    g = b.build([good, other])
    m = match(g, [rule])
    assert [s.roots for s in m.sites] == [(good,)]
    assert dict(m.sites[0].attrs) == {"a": 1}


def test_repeated_variables_must_bind_the_same_value() -> None:
    rule = parse_rule("dbl: (ewadd ?x ?x) => (smul ?x (ewadd (const_one []) (const_one [])))")
    b = GraphBuilder()
    x, y = b.input("x", (3,)), b.input("y", (3,))
    same = b.ewadd(x, x)
    diff = b.ewadd(x, y)
    g = b.build([same, diff])
    assert [s.roots for s in match(g, [rule]).sites] == [(same,)]


def test_sites_serialise_and_keys_are_structural() -> None:
    g, _ = _mm_graph()
    sites = match(g, [MERGE]).sites
    for s in sites:
        again = Site.from_json(json.loads(json.dumps(s.to_json())))
        assert again == s
    # The same structure built in another order gives the same keys (other node ids).
    b = GraphBuilder("mm")
    other = b.input("o", (2, 8))
    lone = b.matmul(other, b.weight("w9", (8, 4)))
    x = b.input("x", (2, 8))
    ws = [b.weight(f"w{i}", (8, 4 + i)) for i in range(3)]
    ys = [b.matmul(x, w) for w in ws]
    g2 = b.build([*ys, lone])
    sites2 = match(g2, [MERGE]).sites
    assert {s.key for s in sites} == {s.key for s in sites2}
    assert [s.roots for s in sites] != [s.roots for s in sites2]


def test_bidirectional_rules_match_both_ways_and_bare_sources_are_unmatchable() -> None:
    rules = parse_rules("comm: (ewadd ?x ?y) <=> (ewadd ?y ?x)\n"
                        "tt: (transpose [1,0] (transpose [1,0] ?x)) => ?x\n"
                        "bare: ?x => (relu (relu ?x))\n")
    m = Matcher(rules)
    assert [r.name for r in m.rules] == ["comm", "comm~rev", "tt", "bare"]
    assert "bare" in m.unmatchable
    b = GraphBuilder()
    g = b.build([b.ewadd(b.input("a", (2,)), b.input("b", (2,)))])
    assert m.match(g).per_rule["comm"] == 1 and m.match(g).per_rule["comm~rev"] == 1


def test_required_attribute_left_unnamed_in_a_source_is_an_error() -> None:
    from superopt.rewrite.match import compile_rule
    from superopt.substitutions.pattern import PNode, PVar
    from superopt.substitutions.rule import Rule

    rule = Rule("r", (PNode("concat", (), (PVar("x"), PVar("y"))),), (PVar("x"),))
    with pytest.raises(PatternError, match="required attribute 'axis'"):
        compile_rule(rule)


def test_infer_types_follows_the_builder() -> None:
    from superopt.ir import TensorType as T

    types = infer_types(MERGE.target, {"x": T((2, 8)), "w1": T((8, 3)), "w2": T((8, 5))},
                        {"a": "none"})
    assert types == (T((2, 3)), T((2, 5)))


def test_site_at_and_check_recognise_current_sites_only() -> None:
    g, ys = _mm_graph()
    m = Matcher([MERGE])
    site = m.match(g).sites[0]
    assert m.check(g, site)
    assert m.site_at(g, "merge", (ys[0], Value(0))) is None
    g2, _ = _conv_graph()
    assert not m.check(g2, site)


def test_matching_is_linear_in_graph_size() -> None:
    from superopt.rewrite import starter_rules
    from superopt.tpu_sim.synthetic import synthetic_graph

    m = Matcher(starter_rules())
    small, big = synthetic_graph(2_000, seed=3), synthetic_graph(8_000, seed=3)
    a, b = m.match(small), m.match(big)
    # Sites grow with the graph, and each node is tried a bounded number of times: four
    # times the nodes take about four times as long (the fastest of two runs each, with
    # room for a loaded machine).
    assert len(b) > 2 * len(a) > 0
    t_small = min(a.seconds, m.match(small).seconds)
    t_big = min(b.seconds, m.match(big).seconds)
    assert np.isfinite(t_big) and t_big < 12 * max(t_small, 1e-3)


@pytest.mark.slow
def test_the_starter_library_matches_a_100k_node_graph_in_seconds() -> None:
    from superopt.rewrite import starter_rules
    from superopt.tpu_sim.synthetic import synthetic_graph

    g = synthetic_graph(100_000, seed=0)
    m = Matcher(starter_rules()).match(g)
    assert len(g) >= 100_000 and len(m) > 1000
    assert m.seconds < 20


def test_cycle_check_follows_long_paths_and_spares_independent_pairs() -> None:
    b = GraphBuilder()
    x = b.input("x", (8, 8))
    y1 = b.matmul(x, b.weight("w", (8, 8)))
    chain = b.relu(b.relu(b.relu(y1)))  # y1 reaches the second weight three nodes later
    y2 = b.matmul(x, chain)
    y3 = b.matmul(x, b.weight("v", (8, 8)))  # independent of y1 and y2
    g = b.build([y2, y3])
    m = match(g, [MERGE])
    pairs = {frozenset(v.node for v in s.roots) for s in m.sites}
    assert pairs == {frozenset({y1.node, y3.node}), frozenset({y2.node, y3.node})}
    assert m.rejected["merge"]["cycle"] == 2  # (y1, y2) in either order


def test_rules_with_equal_sources_match_as_each_would_alone() -> None:
    # Matched once for both rules; the second's condition keeps the pairs whose second
    # weight has 4 columns: of the 3 pairs of matmuls reading x, those with w1.
    square = parse_rule(
        "merge_sq: (matmul ?a ?x ?w1) ; (matmul ?a ?x ?w2) => "
        "(split.0 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) ; "
        "(split.1 -1 {[dim(?w1,1), dim(?w2,1)]} (matmul ?a ?x (concat 1 ?w1 ?w2))) "
        "if dim(?w2, 1) == 4")
    b = GraphBuilder()
    x = b.input("x", (8, 8))
    outs = [b.matmul(x, b.weight(f"w{i}", (8, n))) for i, n in enumerate((8, 4, 8))]
    outs.append(b.relu(b.matmul(outs[0], b.weight("v", (8, 8)))))
    g = b.build(outs)
    both = Matcher([MERGE, square, FUSE]).match(g)
    for rule in (MERGE, square, FUSE):
        alone = Matcher([rule]).match(g)
        assert [s for s in both.sites if s.rule == rule.name] == list(alone.sites)
        assert both.per_rule[rule.name] == alone.per_rule[rule.name]
        assert both.rejected.get(rule.name) == alone.rejected.get(rule.name)
    assert both.per_rule["merge"] == 3 and both.per_rule["merge_sq"] == 2
