"""Strategies and the tuning loop: reproducible from a seed, never worse than the
default, exhaustive kernel search finds each kernel's best option, schedules split the
budget as documented, bad names are one-line errors."""

from __future__ import annotations

import math

import pytest

from superopt.ir.errors import IRError
from superopt.xtat.session import open_session
from superopt.xtat.strategies import create
from superopt.xtat.tuner import FLAGS_TOP_K, KERNEL_PHASES, Tuner, make_schedule


@pytest.fixture(scope="module")
def resnet():
    return open_session({"model": "resnet18"})


@pytest.mark.parametrize("strategy", ["random", "anneal", "evolution", "exhaustive"])
def test_strategy_is_reproducible_and_never_worse(strategy: str) -> None:
    runs = []
    for _ in range(2):
        s = open_session({"model": "resnet18"})
        phases = make_schedule("custom", ("layout", "fusion", "tiling"), strategy)
        r = Tuner(s.pipeline, s.runner, s.default, seed=7).run(phases, 40)
        runs.append(r)
        assert r.best_time <= r.default_time
        assert r.evaluations == 40 or (strategy == "exhaustive" and r.evaluations <= 40)
    a, b = runs
    assert [p.measured for p in a.history] == [p.measured for p in b.history]
    assert a.best.key == b.best.key


def test_different_seeds_explore_differently() -> None:
    hist = []
    for seed in (1, 2):
        s = open_session({"model": "resnet18"})
        r = Tuner(s.pipeline, s.runner, s.default, seed=seed).run(
            make_schedule("custom", ("fusion",), "random"), 20)
        hist.append([p.measured for p in r.history])
    assert hist[0] != hist[1]


def test_exhaustive_tiles_reach_each_kernels_best_option() -> None:
    s = open_session({"model": "squeezenet"})
    p = s.pipeline
    t = p.index("tiling")
    sites = p.passes[t].sites(s.default.stages[t]).tunable
    budget = 1 + sum(len(x.options) - 1 for x in sites)
    r = Tuner(s.pipeline, s.runner, s.default, seed=0).run(
        make_schedule("custom", ("tiling",), "exhaustive"), budget + 10)
    # Independent optimum: per kernel signature, the least cost over its tile options
    # under the default flags, straight from the simulator's kernel costs.
    kc = s.sim.kernels
    st = s.default.final
    sig_of = dict(zip(st.sig_keys, st.signatures, strict=True))
    want = 0.0
    for key in st.sig_keys:
        site = p.passes[t].sites(s.default.stages[t])[key]
        flags = st.flags[key]
        costs = [kc.cost(sig_of[key], o, flags) for o in site.options]
        want += min(c.time for c in costs if c.valid)
    # The tuned flags follow the new tiles' defaults; compare with the default flags kept.
    assert r.best_time <= s.runner.time(s.default)
    assert r.best_time <= want * 1.02


def test_schedules() -> None:
    joint = make_schedule("joint")
    kernels = [("tiling",), ("flags",)]
    rewrites = ("plan", "rewrite")
    assert [p.passes for p in joint] == [("plan",), *kernels, ("layout", "fusion"), *kernels,
                                         ("rewrite",), *kernels, rewrites]
    assert [p.strategy for p in joint] == ["exhaustive", "parallel", "parallel", "sweep",
                                           "parallel", "parallel", "exhaustive", "parallel",
                                           "parallel", "revisit"]
    first = make_schedule("rewrite_first")
    assert [p.passes for p in first] == [*kernels, rewrites,
                                         ("rewrite", "layout", "fusion"), *kernels, rewrites]
    assert [p.strategy for p in first] == ["parallel", "parallel", "exhaustive", "sweep",
                                           "parallel", "parallel", "revisit"]
    # Without the rewrite passes both schedules are XTAT's: the same phases, the kernel
    # phases that would repeat with nothing between them left out.
    compiler = ("layout", "fusion", "tiling", "flags")
    assert make_schedule("rewrite_first", compiler) == make_schedule("joint", compiler)
    # plan_last: joint without its first phase (the plan judged by the revisit only).
    assert make_schedule("plan_last") == joint[1:]
    assert make_schedule("plan_last", compiler) == make_schedule("joint", compiler)
    assert [p.passes for p in make_schedule("joint", compiler)] == [
        *kernels, ("layout", "fusion"), *kernels]
    assert [p.passes for p in make_schedule("joint", ("tiling",))] == [("tiling",)]
    seq = make_schedule("sequential", ("layout", "flags"), "evolution")
    assert [p.passes for p in seq] == [("layout",), ("flags",)]
    assert make_schedule("custom", ("flags", "rewrite"))[0].passes == ("rewrite", "flags")
    with pytest.raises(IRError, match="unknown pass 'tile'"):
        make_schedule("joint", ("tile",))
    with pytest.raises(IRError, match="unknown schedule"):
        make_schedule("greedy")
    with pytest.raises(IRError, match="unknown strategy 'bogus'"):
        create("bogus")


def test_joint_schedule_spends_the_budget_in_phases(resnet) -> None:
    r = Tuner(resnet.pipeline, resnet.runner, resnet.default, seed=0).run(
        make_schedule("joint"), 60)
    assert r.evaluations == 60
    assert sum(n for _, n in r.phases) == 59  # plus the default
    names = [p.name for p in make_schedule("joint")]
    # In schedule order; the revisit, last with no share of its own, takes what the
    # others leave (here nothing: the last kernel phase may use all that is left).
    first = [n for n, _ in r.phases][:len(names)]
    assert first == names[:len(first)] and len(first) >= names.index("rewrite") + 1
    # Budget left after the schedule goes to it again (phases that measured nothing new
    # are not listed).
    assert all(n in names and k > 0 for n, k in r.phases[len(names):])
    assert math.isfinite(r.best_time) and r.best_time <= r.default_time


def test_a_flags_phase_measures_its_top_k_rounds_and_the_pick(resnet) -> None:
    # resnet18's kernels with an MXU op have 24 flag settings, more than FLAGS_TOP_K: the
    # phase measures FLAGS_TOP_K rounds (the default setting is one of them, or put
    # first) and the candidate of each kernel's fastest (without the cap: 25).
    flags = resnet.pipeline.passes[resnet.pipeline.index("flags")]
    tiled = Tuner(resnet.pipeline, resnet.runner, resnet.default, seed=0).run(
        list(KERNEL_PHASES[:1]), 100).best
    sites = flags.sites(tiled.stages[resnet.pipeline.index("flags")])
    assert max(len(s.options) for s in sites.values()) > FLAGS_TOP_K
    r = Tuner(resnet.pipeline, resnet.runner, resnet.default, seed=0).run(
        list(KERNEL_PHASES), 100)
    assert r.phases[1] == ("flags", FLAGS_TOP_K + 1)


def test_budget_must_be_positive(resnet) -> None:
    with pytest.raises(IRError, match="--budget must be >= 1"):
        Tuner(resnet.pipeline, resnet.runner, resnet.default).run(make_schedule("joint"), 0)


def test_exhaustive_min_gain_keeps_the_incumbent_below_the_threshold() -> None:
    # Over the legacy default's tiles, where some tile helps (the XLA-strength default
    # already picks squeezenet's best tiles).
    spec = {"model": "squeezenet", "default_tiling": "legacy"}
    s = open_session(spec)
    free = Tuner(s.pipeline, s.runner, s.default, seed=0).run(
        make_schedule("custom", ("tiling",), "exhaustive"), 40)
    assert free.best_time < free.default_time  # some tile helps
    s = open_session(spec)
    tuner = Tuner(s.pipeline, s.runner, s.default, seed=0, strategy_opts={"min_gain": 0.99})
    strict = tuner.run(make_schedule("custom", ("tiling",), "exhaustive"), 40)
    # Every site was measured on the default (no option is 100x faster), so the proposals
    # are one-site changes of the default only.
    assert all(sum(e[3].changed().values()) <= 1 for e in tuner.finalists)
    assert strict.evaluations == 40


@pytest.mark.parametrize("start", ["best", "default"])
def test_anneal_starts_from_the_best_or_from_the_default(start: str) -> None:
    import numpy as np

    from superopt.xtat.context import TuneContext

    s = open_session({"model": "resnet18"})
    ctx = TuneContext(s.pipeline, s.default, np.random.default_rng(0))
    moved = ctx.mutate(s.default, ("layout",), 2)
    assert moved.config("layout").choices  # the best so far has other layouts
    ctx.observe(s.default, 2.0)
    ctx.observe(moved, 1.0)
    strat = create("anneal", start=start)
    strat.start(ctx, ("fusion",), 20)
    cands = strat.ask(4)
    base = s.default if start == "default" else moved
    # Fusion moves never touch the layouts: each proposal keeps its start's layouts.
    assert all(c.config("layout").choices == base.config("layout").choices for c in cands)
    if start == "default":
        assert cands[0].key == s.default.key  # proposed again (a free repeat) for its time
        strat.tell(cands, [2.0, 3.0, 3.0, 3.0])
        assert strat.current_time == 2.0  # then only accepted uphill by the temperature


def test_anneal_refuses_an_unknown_start() -> None:
    s = open_session({"model": "resnet18"})
    import numpy as np

    from superopt.xtat.context import TuneContext

    with pytest.raises(IRError, match="start must be best or default"):
        create("anneal", start="middle").start(
            TuneContext(s.pipeline, s.default, np.random.default_rng(0)), ("fusion",), 5)
