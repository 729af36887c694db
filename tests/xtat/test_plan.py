"""The rewrite-plan pass: TASO's search result as one choice, refined by the rewrite pass.
On two convolutions with batch norms reading the same input, the plan is exactly what
the search finds on its own, costs what the search says it costs once folded, and the
tuned graph computes the same values as the source."""

from __future__ import annotations

import pytest

from superopt.ir.graph import Graph, GraphBuilder
from superopt.rewrite import Matcher, create_cost, optimize
from superopt.rewrite.check import check_values
from superopt.tpu_sim import Simulator
from superopt.xtat.passes.plan import PLAN_SITE
from superopt.xtat.rules import rule_set
from superopt.xtat.runner import SimRunner
from superopt.xtat.session import applied_rewrites, make_pipeline, rewritten_graph
from superopt.xtat.tuner import Tuner, make_schedule


def two_branches() -> Graph:
    b = GraphBuilder("two_branches")
    x = b.input("x", (8, 64, 28, 28))
    outs = []
    for i in range(2):
        w = b.weight(f"w{i}", (64, 64, 3, 3))
        y = b.op("conv2d", x, w, padding="same")
        c = (64,)
        y = b.batch_norm(y, b.weight(f"s{i}", c, init="normal"),
                         b.weight(f"b{i}", c, init="normal"),
                         b.weight(f"m{i}", c, init="normal"),
                         b.weight(f"v{i}", c, init="positive"), eps=1e-5)
        outs.append(b.op("relu", y))
    return b.build([b.op("ewadd", outs[0], outs[1])])


@pytest.fixture(scope="module")
def setup():
    sim = Simulator("v4")
    pipe = make_pipeline(sim)
    graph = two_branches()
    return pipe, SimRunner(sim), graph, pipe.initial(graph)


def test_plan_is_tasos_search_result(setup) -> None:
    pipe, runner, graph, default = setup
    plan = pipe.passes[pipe.index("plan")]
    site = plan.sites(default.stages[0])[PLAN_SITE]
    assert site.default is None and len(site.options) == 2
    cand = pipe.with_choice(default, "plan", PLAN_SITE, site.options[1])
    # Independent: the search run directly, with the same rules, cost and budget.
    ref = optimize(graph, Matcher(rule_set(None).rules), create_cost("sim", hardware="v4"),
                   budget=20)
    assert cand.stages[1].graph.structural_hash == ref.graph.structural_hash
    assert applied_rewrites(cand) == [s.rule for s in ref.steps for _ in s.sites]
    assert applied_rewrites(cand)
    # The plan's weight-only computations are folded before costing: the tuned time is
    # the TASO search's own (simulator) cost of the graph.
    assert runner.time(cand) == pytest.approx(ref.cost_after, rel=1e-9)
    assert runner.time(cand) < runner.time(default)
    check = check_values(graph, rewritten_graph(pipe, cand))
    assert check.ok, check.summary()


def test_rewrite_first_measures_the_plan_after_the_kernels_and_keeps_it(setup) -> None:
    pipe, runner, graph, default = setup
    r = Tuner(pipe, runner, default, seed=0).run(make_schedule("rewrite_first"), 60)
    names = [n for n, _ in r.phases]
    assert names[:3] == ["tiling", "flags", "plan+rewrite"]
    first = next(p for p in r.history if p.phase == "plan+rewrite")
    assert first.step == sum(k for _, k in r.phases[:2]) + 1  # the plan, measured first
    assert r.best.config("plan").choices.get(PLAN_SITE) is not None
    assert r.best_time < runner.time(default)
    check = check_values(graph, rewritten_graph(pipe, r.best))
    assert check.ok, check.summary()


def test_joint_measures_plan_kernels_layouts_then_rewrite_points(setup) -> None:
    pipe, runner, graph, default = setup
    r = Tuner(pipe, runner, default, seed=0).run(make_schedule("joint"), 60)
    names = [n for n, _ in r.phases]
    assert names[:4] == ["plan", "tiling", "flags", "layout+fusion"]
    assert "rewrite" in names[4:]
    assert r.phases[0] == ("plan", 1) and r.history[1].phase == "plan"
    assert r.best.config("plan").choices.get(PLAN_SITE) is not None
    assert r.best_time < runner.time(default)
    check = check_values(graph, rewritten_graph(pipe, r.best))
    assert check.ok, check.summary()


def test_plan_last_judges_the_plan_in_the_revisit_with_kernels_tuned(setup) -> None:
    pipe, runner, graph, default = setup
    r = Tuner(pipe, runner, default, seed=0).run(make_schedule("plan_last"), 300)
    names = [n for n, _ in r.phases]
    assert names[:3] == ["tiling", "flags", "layout+fusion"] and "plan" not in names
    # No candidate before the revisit has the plan: it is flipped on there only.
    before = [p for p in r.history if p.phase != "plan+rewrite"]
    assert len(before) < r.evaluations
    assert r.best.config("plan").choices.get(PLAN_SITE) is not None
    assert r.best_time < runner.time(default)
    check = check_values(graph, rewritten_graph(pipe, r.best))
    assert check.ok, check.summary()


def test_no_plan_site_without_a_budget() -> None:
    sim = Simulator("v4")
    pipe = make_pipeline(sim, plan_budget=0)
    default = pipe.initial(two_branches())
    assert len(pipe.passes[0].sites(default.stages[0])) == 0
