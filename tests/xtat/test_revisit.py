"""The `revisit` strategy: a graph choice flipped on the best candidate, the kernels it
brings tuned from profiles, judged tuned against tuned. With an exact runner the flip's
tuned time must be the per-kernel best of its graph (computed here from the simulator,
independently of the strategy), the tuner must end on the faster of the two graphs, and
the strategy must keep to what it flips."""

from __future__ import annotations

import math

import pytest

from superopt.ir.errors import IRError
from superopt.xtat.passes.plan import PLAN_SITE
from superopt.xtat.runner import SimRunner
from superopt.xtat.session import open_session
from superopt.xtat.strategies import create
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
    assert untuned > 1.0 + 0.06  # the default slack
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
