"""The `revisit` strategy: a graph choice flipped on the best candidate, the kernels it
brings tuned from profiles, judged tuned against tuned. With an exact runner the flip's
tuned time must be the per-kernel best of its graph (computed here from the simulator,
independently of the strategy), the tuner must end on the faster of the two graphs, and
the strategy must keep to what it flips."""

from __future__ import annotations

import math

import pytest

from superopt.ir.errors import IRError
from superopt.ir.graph import GraphBuilder, Value
from superopt.tpu_sim.layout import padded_bytes
from superopt.xtat.passes.plan import PLAN_SITE
from superopt.xtat.runner import SimRunner
from superopt.xtat.session import open_session
from superopt.xtat.space import PassConfig
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies import create
from superopt.xtat.strategies.revisit import REGRAPH_SLACK, REPAIR_GAIN, SLACK, Revisit
from superopt.xtat.tuner import Phase, Tuner, make_schedule

PLAN = Phase("plan", ("plan",), "exhaustive", 0.0)
TILING = Phase("tiling", ("tiling",), "parallel", 0.1)
REVISIT = Phase("revisit", ("plan",), "revisit", 0.1,
                (("kernels", ("tiling",)), ("both_ways", ("plan",))))
# The same with every flip tuned, however far behind it is untuned.
UNSCREENED = Phase("revisit", ("plan",), "revisit", 0.1,
                   (("kernels", ("tiling",)), ("both_ways", ("plan",)), ("slack", 10.0)))


@pytest.fixture(scope="module")
def squeezenet():
    s = open_session({"model": "squeezenet", "plan_budget": 5})
    return s, SimRunner(s.sim, sigma=0.0)


def _plan_on(s, base):
    site = s.pipeline.passes[0].sites(base.stages[0])[PLAN_SITE]
    return s.pipeline.with_choice(base, "plan", PLAN_SITE, site.options[1])


def test_the_plan_taken_untuned_is_judged_again_against_the_tuned_default(
        squeezenet, per_kernel_best) -> None:
    s, runner = squeezenet
    r = Tuner(s.pipeline, runner, s.default, seed=0).run([PLAN, TILING, UNSCREENED], 400)
    on, _ = per_kernel_best(s.pipeline, runner, _plan_on(s, s.default))
    off, _ = per_kernel_best(s.pipeline, runner, s.default)
    assert r.phases[:3][-1][0] == "revisit"
    # The flip (plan off) was tuned to its graph's per-kernel best and measured.
    assert any(math.isclose(p.measured, off, rel_tol=1e-9) for p in r.history
               if p.phase == "revisit")
    assert math.isclose(r.best_time, min(on, off), rel_tol=1e-9)
    assert (r.best.config("plan").choices != {}) == (on < off)


def test_a_flip_far_behind_untuned_is_not_tuned(squeezenet) -> None:
    s, runner = squeezenet
    untuned = runner.time(s.default) / runner.time(_plan_on(s, s.default))
    assert untuned > 1.0 + SLACK
    r = Tuner(s.pipeline, runner, s.default, seed=0).run([PLAN, TILING, REVISIT], 400)
    # Both untuned graphs were measured before (the default, the plan): nothing to measure.
    assert r.phases[2] == ("revisit", 0)
    assert r.best.config("plan").choices


def test_a_plan_left_is_tried_again_with_its_kernels_tuned(squeezenet, per_kernel_best
                                                            ) -> None:
    # No plan phase: the tuned default is the best, and the plan (both ways) is flipped on.
    s, runner = squeezenet
    r = Tuner(s.pipeline, runner, s.default, seed=0).run([TILING, REVISIT], 400)
    on, _ = per_kernel_best(s.pipeline, runner, _plan_on(s, s.default))
    off, _ = per_kernel_best(s.pipeline, runner, s.default)
    assert on < off  # squeezenet: the plan merges the expand convolutions
    assert math.isclose(r.best_time, on, rel_tol=1e-9)
    assert r.best.config("plan").choices


def test_sites_at_their_default_are_left_unless_both_ways(squeezenet) -> None:
    s, runner = squeezenet
    one_way = Phase("revisit", ("plan",), "revisit", 0.1, (("kernels", ("tiling",)),))
    r = Tuner(s.pipeline, runner, s.default, seed=0).run([TILING, one_way], 400)
    assert r.phases[1] == ("revisit", 0)  # nothing to flip: nothing measured
    assert not r.best.config("plan").choices


def test_revisit_closes_the_rewrite_schedules_with_the_kernel_passes_tuned() -> None:
    for kind in ("joint", "plan_last", "rewrite_first", "sequential"):
        last = make_schedule(kind)[-1]
        assert (last.strategy, last.passes) == ("revisit", ("plan", "rewrite"))
        assert dict(last.options)["kernels"] == ("tiling", "flags")
    only_tiles = make_schedule("joint", ("plan", "rewrite", "tiling"))[-1]
    assert dict(only_tiles.options)["kernels"] == ("tiling",)
    # Nothing to tune after a flip, or nothing to flip: no revisit phase.
    assert all(p.strategy != "revisit"
               for kind in ("joint", "sequential")
               for passes in (("plan", "rewrite", "layout"), ("layout", "tiling", "flags"))
               for p in make_schedule(kind, passes))


def test_revisit_refuses_kernel_passes_as_flips_and_an_unprofiled_runner(squeezenet
                                                                        ) -> None:
    s, runner = squeezenet
    tuner = Tuner(s.pipeline, runner, s.default, seed=0)
    with pytest.raises(IRError, match="flips graph choices, not 'tiling'"):
        create("revisit").start(tuner.ctx, ("tiling",), 10)
    with pytest.raises(IRError, match="tunes per-kernel passes .* not 'layout'"):
        create("revisit", kernels=("layout",)).start(tuner.ctx, ("plan",), 10)
    tuner.ctx.profiled = False
    with pytest.raises(IRError, match="needs a runner that reports"):
        create("revisit").start(tuner.ctx, ("plan",), 10)


# -- the repair of a flip's new layout sites -------------------------------------------

def _thin_first_conv():
    """A 64-channel conv on a 224x224 image, batch-normed: with its channels minor its
    output fills half of the 128 lanes, W-minor seven eighths (csrnet's first conv)."""
    b = GraphBuilder("thin_first_conv")
    x = b.input("x", (1, 3, 224, 224))
    y = b.op("conv2d", x, b.weight("w0", (64, 3, 3, 3)), padding="same")
    c = (64,)
    y = b.batch_norm(y, b.weight("s", c, init="normal"), b.weight("b", c, init="normal"),
                     b.weight("m", c, init="normal"), b.weight("v", c, init="positive"),
                     eps=1e-5)
    y = b.op("conv2d", b.op("relu", y), b.weight("w1", (64, 64, 3, 3)), padding="same")
    return b.build([b.op("relu", y)])


@pytest.fixture(scope="module")
def thin():
    """The graph, an exact runner, and the best candidate a revisit starts from: every
    rewrite point applied (folding the batch norm changes the conv's structural hash, so
    reverting it brings back a conv output whose layout site nothing was chosen for)."""
    s = open_session({"model": "thin", "plan_budget": 0}, _thin_first_conv())
    runner = SimRunner(s.sim, sigma=0.0)
    p, j = s.pipeline, s.pipeline.index("rewrite")
    on = s.default
    for site in p.passes[j].sites(on.stages[j]).tunable:
        on = p.with_choice(on, "rewrite", site.key,
                           next(o for o in site.options if o != site.default))
    return s, runner, on


class _Recording(Revisit):
    """The revisit, recording each flip it proposes in order."""

    def __init__(self, **opts: object) -> None:
        super().__init__(**opts)
        self.proposed: list[Candidate] = []

    def _next_flip(self) -> Candidate | None:
        got = super()._next_flip()
        if got is not None:
            self.proposed.append(got)
        return got


def _flips(s, runner, on, repair):
    """Every flip the revisit proposes from `on` (never adopted: the best stays `on`)."""
    tuner = Tuner(s.pipeline, runner, s.default, seed=0)
    tuner.ctx.best, tuner.ctx.best_time = on, runner.time(on)
    st = _Recording(kernels=("tiling",), repair=repair)
    st.start(tuner.ctx, ("rewrite",), 100)
    while st._next_flip() is not None:
        pass
    return tuner, st.proposed


def test_a_flips_new_layout_sites_take_the_orders_the_estimate_prefers(thin) -> None:
    s, runner, on = thin
    p = s.pipeline
    j = p.index("layout")
    _, plain = _flips(s, runner, on, ())
    _, repaired = _flips(s, runner, on, ("layout",))
    assert len(plain) == len(repaired) == len(p.passes[1].sites(on.stages[1]).tunable)
    old = p.passes[j].sites(on.stages[j])
    by_rewrite = {tuple(c.configs[1].items()): c for c in plain}
    changed = 0
    for flip in repaired:
        before = by_rewrite[tuple(flip.configs[1].items())]  # the same flip, unrepaired
        assert not before.configs[j].choices  # nothing carried to the new sites
        chosen = flip.configs[j].choices
        changed += bool(chosen)
        for key, order in chosen.items():
            assert key not in old  # only sites the flip made
            node = p.passes[j].node_of(flip.stages[j])[key]
            t = flip.stages[j].graph.node(node).type
            held = before.stages[j + 1].laid.layouts[Value(node)]
            assert padded_bytes(t, order) < padded_bytes(t, held)
        if chosen:
            assert runner.estimate(flip) < runner.estimate(before) * (1 - REPAIR_GAIN)
            # The simulator (not the estimate) agrees here: the thin conv's output
            # W-minor is faster.
            assert runner.time(flip) < runner.time(before)
    assert changed  # reverting the fold brings the thin conv back, and it is repaired


def test_flips_are_proposed_in_the_order_of_their_estimates(thin) -> None:
    s, runner, on = thin
    _, plain = _flips(s, runner, on, ())
    est = [runner.estimate(_untuned(s, c)) for c in plain]
    assert est == sorted(est)
    assert len({c.key for c in plain}) == len(plain)
    # The repair comes after the order: the same flips, in the same order.
    _, repaired = _flips(s, runner, on, ("layout",))
    assert [c.configs[1] for c in repaired] == [c.configs[1] for c in plain]


def _untuned(s, c):
    configs = list(c.configs)
    for name in ("tiling", "flags"):
        configs[s.pipeline.index(name)] = PassConfig.of({})
    return s.pipeline.build(c, configs)


def test_the_estimate_is_the_analytical_model_over_the_kernels(thin) -> None:
    s, runner, on = thin
    f = on.final
    kc = s.sim.kernels
    want = sum(kc.analytical_time(sig, f.tiles[k])
               for k, sig in zip(f.sig_keys, f.signatures, strict=True))
    assert math.isclose(runner.estimate(on), want, rel_tol=1e-12)
    assert not math.isclose(runner.estimate(on), runner.time(on), rel_tol=1e-3)
    # Flags are not in the analytical model; a tile is.
    t = s.pipeline.index("flags")
    key = f.sig_keys[0]
    site = s.pipeline.passes[t].sites(on.stages[t])[key]
    other = next(o for o in site.options if o != site.default)
    assert runner.estimate(s.pipeline.with_choice(on, "flags", key, other)) == \
        runner.estimate(on)


def test_the_joint_revisit_repairs_layouts_and_refuses_what_it_cannot_repair(thin) -> None:
    assert dict(make_schedule("joint")[-1].options)["repair"] == ("layout",)
    no_layout = make_schedule("joint", ("plan", "rewrite", "fusion", "tiling"))[-1]
    assert dict(no_layout.options)["repair"] == ()
    s, runner, _ = thin
    tuner = Tuner(s.pipeline, runner, s.default, seed=0)
    for opt in ("repair", "regraph"):
        with pytest.raises(IRError, match=f"option '{opt}' takes graph passes, not 'tiling'"):
            create("revisit", **{opt: ("tiling",)}).start(tuner.ctx, ("rewrite",), 10)
        with pytest.raises(IRError, match=f"option '{opt}' names 'nope', which the "
                                          f"pipeline lacks"):
            create("revisit", **{opt: ("nope",)}).start(tuner.ctx, ("rewrite",), 10)


# -- the regraph: a tuned flip's layout and fusion moves measured -----------------------

GRAPH = ("layout", "fusion")


def _drive(gen, runner):
    """Run a revisit generator to its end with exact times: (batches asked, its result)."""
    batches = []
    try:
        cands = next(gen)
        while True:
            batches.append(cands)
            cands = gen.send((cands, [runner.time(c) for c in cands]))
    except StopIteration as stop:
        return batches, stop.value


def test_the_regraph_measures_the_flips_graph_moves_lowest_estimate_first(thin) -> None:
    s, runner, on = thin
    p = s.pipeline
    tuner = Tuner(p, runner, s.default, seed=0)
    tuner.evaluate([on], 10)
    st = Revisit(kernels=("tiling",), regraph=GRAPH, regraph_budget=6)
    st.start(tuner.ctx, ("rewrite",), 100)
    st.n = 4  # measured four at a time
    flip = st._next_flip()
    assert flip is not None
    t = runner.time(flip)
    # Independently: every single layout or fusion move of the flip, by its estimate.
    est = sorted(runner.estimate(p.with_choice(flip, name, site.key, o))
                 for name in GRAPH
                 for site in p.passes[p.index(name)].sites(flip.stages[p.index(name)]).tunable
                 for o in site.options if o != flip.config(name).choices.get(site.key,
                                                                              site.default))
    assert len(est) > 6
    batches, (best, best_t) = _drive(st._regraph(on, flip, t), runner)
    first = sorted(runner.estimate(c) for c in batches[0])
    assert len(first) == 4
    assert first == pytest.approx(est[:4], rel=1e-12)
    measured = [c for b in batches for c in b]
    assert len(measured) == 6  # its budget, no more
    assert len({c.key for c in measured}) == 6
    # It ends on the fastest it measured (or the flip), as measured.
    assert best_t == min([t] + [runner.time(c) for c in measured])
    assert math.isclose(runner.time(best), best_t, rel_tol=1e-12)


def test_only_a_tuned_flip_near_the_best_is_regraphed(squeezenet) -> None:
    s, runner = squeezenet
    calls: list[tuple[float, float]] = []

    class Spy(Revisit):
        def _regraph(self, base, cur, cur_t):
            calls.append((cur_t, self.ctx.best_time))
            return (yield from super()._regraph(base, cur, cur_t))

    from superopt.xtat.strategies import base as strategies
    strategies.STRATEGIES["spy_revisit"] = Spy
    try:
        phase = Phase("revisit", ("plan",), "spy_revisit", 0.1,
                      (("kernels", ("tiling",)), ("both_ways", ("plan",)), ("slack", 10.0),
                       ("regraph", GRAPH), ("regraph_budget", 8)))
        Tuner(s.pipeline, runner, s.default, seed=0).run([PLAN, TILING, phase], 400)
        # squeezenet's plan merges the expand convolutions: without it, tuned, the graph
        # is far behind, and its layouts are not searched.
        assert not calls
        Tuner(s.pipeline, runner, s.default, seed=0).run([TILING, phase], 400)
        # The plan flipped on (the best) is regraphed; every call was near the best.
        assert calls
        assert all(t <= best * (1 + REGRAPH_SLACK) for t, best in calls)
    finally:
        del strategies.STRATEGIES["spy_revisit"]


def test_a_flip_whose_carried_layout_leaves_a_kernel_no_fitting_tile_reverts_it() -> None:
    # csrnet at batch 16: a conv output laid out (0, 3, 2, 1) leaves its kernel no tile
    # that fits VMEM; the revisit's flips carry layouts chosen on another graph, and one
    # such (vgg19 b16 without the plan) was never measured with a finite time.
    from superopt import zoo

    s = open_session({"model": "csrnet", "batch": 16, "rules": None},
                     zoo.build("csrnet", batch=16))
    runner = SimRunner(s.sim, sigma=0.0)
    p = s.pipeline
    j = p.index("layout")
    tuner = Tuner(p, runner, s.default, seed=0)
    st = Revisit(kernels=("tiling", "flags"), repair=("layout",))
    st.start(tuner.ctx, ("rewrite",), 10)
    bad, good = [], []
    for site in p.passes[j].sites(s.default.stages[j]).tunable:
        for o in site.options:
            if o != site.default:
                c = p.with_choice(s.default, "layout", site.key, o)
                (bad if runner.rejected(st._untuned(c)) else good).append((site.key, o))
    assert bad and good
    (bk, bo), (gk, go) = bad[0], next(m for m in good if m[0] != bad[0][0])
    flip = p.with_choice(p.with_choice(s.default, "layout", gk, go), "layout", bk, bo)
    assert runner.rejected(flip)
    fitted = st._fit(flip)
    assert not runner.rejected(st._untuned(fitted))
    assert dict(fitted.config("layout").choices) == {gk: go}  # the other choice kept
    ok = p.with_choice(s.default, "layout", gk, go)
    assert st._fit(ok).key == ok.key  # nothing to revert
    # Without the repair pass the strategy leaves the flip as it is.
    plain = Revisit(kernels=("tiling",))
    plain.start(tuner.ctx, ("rewrite",), 10)
    assert plain._fit(flip).key == flip.key
