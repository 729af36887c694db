"""The `parallel` strategy: every kernel's option in one profiled run. It must reach each
kernel's best option in about as many measurements as the widest site has options,
leave a rejected kernel alone without losing the round, never measure a kernel
configuration twice, and refuse passes whose sites are not per kernel."""

from __future__ import annotations

import math

import pytest

from superopt.ir.errors import IRError
from superopt.xtat.runner import SimRunner
from superopt.xtat.session import open_session
from superopt.xtat.tuner import Phase, Tuner, make_schedule


def _exact(model: str):
    s = open_session({"model": model})
    return s, SimRunner(s.sim, sigma=0.0)


def test_profile_is_the_measurement_per_kernel() -> None:
    s = open_session({"model": "squeezenet"})
    prof = s.runner.profile(s.default, 3)
    f = s.default.final
    assert set(prof) == set(f.sig_keys)
    total = 0.0
    for key in f.sig_keys:
        total += prof[key]
    assert total == s.runner.measure(s.default, 3)
    # Noise is per kernel configuration: another seed gives other kernel times.
    assert s.runner.profile(s.default, 4) != prof


def test_parallel_tiles_reach_each_kernels_best_in_few_measurements(per_kernel_best) -> None:
    s, runner = _exact("squeezenet")
    p = s.pipeline
    t = p.index("tiling")
    sites = p.passes[t].sites(s.default.stages[t]).tunable
    widest = max(len(x.options) for x in sites)
    r = Tuner(p, runner, s.default, seed=0).run(
        make_schedule("custom", ("tiling",), "parallel"), 1000)
    want, _ = per_kernel_best(s.pipeline, runner, s.default)
    # One measurement per round (at most the widest site's options, the current one
    # included), the default, and the combination of the bests.
    assert r.evaluations <= widest + 2
    assert r.evaluations < sum(len(x.options) for x in sites) / 4
    assert math.isclose(r.best_time, want, rel_tol=1e-9)


def test_parallel_with_noise_is_reproducible_and_not_worse_than_exhaustive() -> None:
    # Over the legacy default compiler's tiles, which leave the tile search headroom (the
    # XLA-strength default picks nearly every kernel's best tile itself).
    s = open_session({"model": "resnet18", "batch": 16, "default_tiling": "legacy"})
    phases = make_schedule("custom", ("tiling",), "parallel")
    a = Tuner(s.pipeline, s.runner, s.default, seed=5).run(phases, 300)
    b = Tuner(s.pipeline, s.runner, s.default, seed=5).run(phases, 300)
    assert [x.measured for x in a.history] == [x.measured for x in b.history]
    ex = Tuner(s.pipeline, s.runner, s.default, seed=5).run(
        make_schedule("custom", ("tiling",), "exhaustive"), a.evaluations)
    assert a.best_time < ex.best_time  # same budget: every kernel against a few


def test_a_rejected_kernel_keeps_its_choice_and_the_others_are_tuned(per_kernel_best
                                                                    ) -> None:
    s, runner = _exact("squeezenet")
    p = s.pipeline
    _, best = per_kernel_best(s.pipeline, runner, s.default)
    moved = sorted(k for k, o in best.items()
                   if o != p.passes[p.index("tiling")].sites(
                       s.default.stages[p.index("tiling")])[k].default)
    assert len(moved) >= 2
    held = moved[0]
    tuner = Tuner(p, runner, s.default, seed=0)
    tuner.ctx.rejected = lambda c: frozenset({held}) if c.final.tiles[held] != \
        s.default.final.tiles[held] else frozenset()
    r = tuner.run(make_schedule("custom", ("tiling",), "parallel"), 1000)
    got = r.best.final.tiles
    assert got[held] == s.default.final.tiles[held]
    assert all(got[k] == best[k] for k in moved[1:])


def test_a_kernel_configuration_is_measured_once() -> None:
    s = open_session({"model": "squeezenet"})
    once = Tuner(s.pipeline, s.runner, s.default, seed=1).run(
        make_schedule("custom", ("tiling",), "parallel"), 1000)
    twice = Tuner(s.pipeline, s.runner, s.default, seed=1).run(
        [Phase("tiling", ("tiling",), "parallel", 0.5),
         Phase("tiling", ("tiling",), "parallel", 0.5)], 1000)
    assert twice.evaluations == once.evaluations
    assert twice.best.key == once.best.key


@pytest.mark.parametrize("passes", [("layout",), ("fusion", "tiling")])
def test_parallel_refuses_passes_that_are_not_per_kernel(passes) -> None:
    s = open_session({"model": "squeezenet"})
    with pytest.raises(IRError, match="per-kernel passes"):
        Tuner(s.pipeline, s.runner, s.default).run(
            make_schedule("custom", passes, "parallel"), 20)


def test_parallel_needs_a_profile() -> None:
    s = open_session({"model": "squeezenet"})

    class Plain:  # measures whole programs only
        def __init__(self, inner: SimRunner) -> None:
            self.inner = inner

        def time(self, c):
            return self.inner.time(c)

        def measure(self, c, seed):
            return self.inner.measure(c, seed)

    with pytest.raises(IRError, match="needs a runner that reports"):
        Tuner(s.pipeline, Plain(s.runner), s.default).run(
            make_schedule("custom", ("tiling",), "parallel"), 20)
