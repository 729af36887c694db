"""TASO's search: relaxation alpha, budget, equal values, origins, costs of every kind."""

from __future__ import annotations

import numpy as np
import pytest

from superopt.ir import Graph, GraphBuilder
from superopt.rewrite import Matcher, apply_sites, optimize, starter_rules
from superopt.rewrite.check import check_values
from superopt.rewrite.cost import FlopsCost, SimCost
from superopt.substitutions import parse_rules

SCALE_RULES = [r for r in starter_rules() if r.name.startswith("scale_")]


def _attention_scores() -> Graph:
    """smul(q @ k, c) with q = heads(x @ W + b): the scale can travel into W and b."""
    b = GraphBuilder("scores")
    x = b.input("x", (1, 16, 16))
    q = b.ewadd(b.matmul(x, b.weight("W", (16, 16))), b.weight("bias", (16,)))
    q = b.transpose(b.reshape(q, shape=(1, 16, 2, 8)), perm=(0, 2, 1, 3))
    k = b.input("k", (1, 2, 8, 16))
    c = b.weight("c", (), data=np.array(0.125, dtype=np.float32))
    return b.build([b.smul(b.matmul(q, k), c)])


def test_alpha_lets_the_search_cross_equal_cost_steps() -> None:
    g = _attention_scores()
    strict = optimize(g, SCALE_RULES, FlopsCost(), alpha=1.0, budget=50, batch=False)
    relaxed = optimize(g, SCALE_RULES, FlopsCost(), alpha=1.05, budget=50, batch=False)
    # Only improvements: the scale moves onto q (smaller than the scores) and stops there,
    # since moving it through transpose, reshape and the bias add costs the same.
    assert [s.rule for s in strict.steps] in (["scale_matmul_lhs"], ["scale_matmul_rhs"])
    # Relaxed: it reaches the weights, where it folds away; no smul is left at run time.
    assert relaxed.cost_after < strict.cost_after < strict.cost_before
    rules = [s.rule for s in relaxed.steps]
    assert "scale_through_add" in rules and rules[-1] == "scale_matmul_rhs"
    smul = [n for n in relaxed.graph.nodes if n.op == "smul"]
    assert all(relaxed.graph.nodes[n.inputs[0].node].op == "weight" for n in smul)
    for r in (strict, relaxed):
        check = check_values(g, r.graph, rtol=1e-12)
        assert check.ok, check.summary()
        assert set(r.origin) == set(range(len(r.graph)))
        assert all(set(o) <= set(range(len(g))) for o in r.origin.values())


def test_budget_bounds_the_expansions() -> None:
    g = _attention_scores()
    r = optimize(g, SCALE_RULES, FlopsCost(), budget=1, batch=False)
    assert r.expanded == 1 and r.stopped == "budget"
    assert r.cost_after <= r.cost_before
    with pytest.raises(Exception, match="alpha"):
        optimize(g, SCALE_RULES, alpha=0.9)


def test_a_model_gets_cheaper_with_equal_values_and_the_search_is_deterministic() -> None:
    from superopt import zoo

    g = zoo.build("resnet18", image_size=32)
    m = Matcher(starter_rules())
    a = optimize(g, m, FlopsCost(), budget=6)
    b = optimize(g, m, FlopsCost(), budget=6)
    assert a.graph.structural_hash == b.graph.structural_hash
    assert a.cost_after < a.cost_before
    assert a.applied["fold_conv_bn"] == 20  # every batch norm follows a conv
    assert a.initial_sites["fold_conv_bn"] == 20
    check = check_values(g, a.graph, rtol=1e-9)
    assert check.ok, check.summary()
    # Without batch moves the same budget folds one batch norm per expansion.
    single = optimize(g, m, FlopsCost(), budget=6, batch=False)
    assert sum(single.applied.values()) <= 6
    assert single.cost_after > a.cost_after


def test_ctrl_c_ends_the_search_with_the_best_graph_so_far() -> None:
    from superopt import zoo

    class Interrupting(FlopsCost):
        """Raises KeyboardInterrupt at its n-th priced op, as Ctrl-C would."""

        def __init__(self, n: int) -> None:
            super().__init__()
            self.left = n

        def measure(self, op, attrs, ins, outs, weights=()):  # type: ignore[no-untyped-def]
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
            return super().measure(op, attrs, ins, outs, weights)

    g = zoo.build("resnet18", image_size=32)
    m = Matcher(starter_rules())
    full = optimize(g, m, FlopsCost(), budget=6)
    calls = FlopsCost()
    optimize(g, m, calls, budget=6)
    # Interrupted after the first graph was priced but well before the search ended.
    r = optimize(g, m, Interrupting(calls.cached - 2), budget=6)
    assert r.stopped == "interrupted"
    assert r.expanded < full.expanded
    assert r.cost_after <= r.cost_before
    assert check_values(g, r.graph, rtol=1e-9).ok


def test_growth_limit_counts_runtime_ops_only() -> None:
    rules = parse_rules("grow: (relu ?x) => (relu (relu ?x))")
    b = GraphBuilder()
    x = b.input("x", (4,))
    g = b.build([b.relu(x)])
    # Growing is never cheaper, but alpha large enough lets it through up to the limit.
    r = optimize(g, rules, FlopsCost(), alpha=10.0, budget=20, max_growth=3.0, batch=False)
    assert r.expanded <= 3 and r.stopped == "queue empty"


def test_whole_graph_cost_path_with_the_simulator() -> None:
    b = GraphBuilder("sim")
    x = b.input("x", (1, 8, 16, 16))
    y = b.conv2d(x, b.weight("w", (8, 8, 3, 3)), padding="same")
    y = b.batch_norm(y, b.weight("s", (8,), init="positive"), b.weight("bb", (8,)),
                     b.weight("m", (8,)), b.weight("v", (8,), init="positive"))
    g = b.build([b.relu(y)])
    cost = SimCost()
    r = optimize(g, starter_rules(), cost, budget=4)
    assert r.cost_name == "sim" and cost.evaluations >= 2
    assert r.cost_after <= r.cost_before
    assert check_values(g, r.graph, rtol=1e-9).ok


def test_every_dense_layer_of_bert_becomes_one_linear_op() -> None:
    """BERT-small has 4 layers of 6 dense layers (Q, K, V, attention output, two FFN) and a
    pooler (dense + tanh): 25 matmul + bias pairs. Under the FLOP cost each fuses into
    `linear`, the pooler's tanh joins it, and each layer's Q, K and V merge into one
    (two pairwise merges): 4 x 4 + 1 = 17 linear ops, with the original values."""
    from superopt import zoo

    g = zoo.build("bert-small", seq_len=16)
    r = optimize(g, Matcher(starter_rules()), FlopsCost(), budget=20)
    assert r.initial_sites["fuse_matmul_bias"] == 25
    assert r.applied["fuse_matmul_bias"] == 25
    assert r.applied["fuse_linear_tanh"] == 1 and r.applied["merge_dense"] == 8
    assert sum(1 for n in r.graph.nodes if n.op == "linear") == 17
    assert not [n for n in r.graph.nodes if n.op == "ewadd" and
                any(r.graph.nodes[v.node].op == "matmul" for v in n.inputs)
                and any(r.graph.type_of(v).rank == 1 for v in n.inputs)]
    check = check_values(g, r.graph, rtol=1e-9)
    assert check.ok, check.summary()


def _grouped_block(batch: int) -> Graph:
    """ResNeXt-50's first-stage 3x3 convolution (32 groups of 4 channels), then a 1x1
    convolution with a batch norm to fold."""
    b = GraphBuilder("resnext_block")
    x = b.input("x", (batch, 128, 56, 56))
    y = b.relu(b.conv2d(x, b.weight("wg", (128, 4, 3, 3)), padding="same", groups=32))
    y = b.conv2d(y, b.weight("w1", (256, 128, 1, 1)))
    y = b.batch_norm(y, b.weight("s", (256,), init="positive"), b.weight("bb", (256,)),
                     b.weight("m", (256,)), b.weight("v", (256,), init="positive"))
    return b.build([b.relu(y)])


def test_the_simulated_proxy_prices_a_grouped_conv_as_the_simulator_does() -> None:
    """Flops rank the dense form of a grouped convolution as 32 times the work; on the
    simulated chip it moves from the vector unit to the matrix unit and gets faster. The
    per-op simulated proxy must agree in sign with the whole-graph simulated time."""
    from superopt.rewrite.cost import SimOpCost
    from superopt.rewrite.effect import site_effect

    g = _grouped_block(16)
    rules = Matcher(starter_rules())
    site = next(s for s in rules.match(g).sites if s.rule == "group_conv_dense")
    effect = site_effect(g, site, rules.rule(site.rule))
    sim = SimCost()
    whole = sim.cost(apply_sites(g, [site], rules).graph) - sim.cost(g)
    assert whole < 0
    assert effect.cost_delta(g, SimOpCost()) < 0 < effect.cost_delta(g, FlopsCost())
    assert [type(p) for p in sim.proxies()] == [FlopsCost, SimOpCost]
    assert sim.proxies() is sim.proxies()  # per-op prices kept across searches


def test_screening_keeps_the_best_rewrites_of_each_proxy() -> None:
    """With one single rewrite screened per graph and two graphs expanded, a search whose
    only proxy is flops spends both on the rewrites flops prefer (the batch-norm fold and
    the relu fusion) and never tries the grouped convolution's dense form; with the
    simulated proxy beside it, it tries and keeps it."""

    class FlopsOnly(SimCost):
        def proxies(self) -> tuple:
            return (FlopsCost(),)

    g = _grouped_block(16)
    kw = {"budget": 2, "screen": 1, "batch": False}
    old = optimize(g, starter_rules(), FlopsOnly(), **kw)
    new = optimize(g, starter_rules(), SimCost(), **kw)
    assert "group_conv_dense" not in old.applied
    assert new.applied["group_conv_dense"] == 1
    assert new.cost_after < old.cost_after
