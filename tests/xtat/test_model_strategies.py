"""The model-based strategies (autotvm, mbo): they find a toy space's known optimum in
a fraction of its size, a seed fixes every proposal, bad options are one-line errors, and
`superopt tune` takes them by the factory's names without importing their libraries at
start-up."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.pipeline import Pipeline
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Candidate, Stage
from superopt.xtat.strategies import create
from superopt.xtat.strategies.modelbased import FlatSpace

SITES, OPTIONS = 12, 6


class ToyPass(TunablePass):
    """`SITES` independent choices of `OPTIONS` options each (default: option 0)."""

    name = "toy"

    def list_sites(self, stage: Stage) -> list[Site]:
        return [Site(f"s{i}", tuple(range(OPTIONS)), 0) for i in range(SITES)]

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        return PassResult(stage.evolve(), None, {})


def toy_costs(seed: int = 3) -> np.ndarray:
    """Per site and option, the time it adds; option 0 (the default) is never the best,
    so the optimum changes every site (6^12 = 2e9 points, all 12 changes needed)."""
    rng = np.random.default_rng(seed)
    costs = rng.uniform(0.2, 1.0, size=(SITES, OPTIONS))
    best = rng.integers(1, OPTIONS, size=SITES)
    costs[np.arange(SITES), best] = rng.uniform(0.0, 0.1, size=SITES)
    return costs


def toy_time(cand: Candidate, costs: np.ndarray) -> float:
    cfg = cand.config("toy")
    # One interaction, so an additive model is not exactly right: sites 0 and 1 at their
    # best together save a little more.
    picks = [int(cfg.get(f"s{i}", 0)) for i in range(SITES)]
    t = 1.0 + sum(costs[i, o] for i, o in enumerate(picks))
    if picks[0] == int(costs[0].argmin()) and picks[1] == int(costs[1].argmin()):
        t -= 0.05
    return t


def run_toy(name: str, budget: int, seed: int, **opts: object) -> tuple[list[float], float]:
    costs = toy_costs()
    pipeline = Pipeline([ToyPass()])
    default = pipeline.initial(None)  # type: ignore[arg-type]
    ctx = TuneContext(pipeline, default, np.random.default_rng(seed))
    strat = create(name, **opts)
    t0 = toy_time(default, costs)
    ctx.observe(default, t0)
    times, seen = [t0], {default.key}
    strat.start(ctx, ("toy",), budget - 1)
    while len(times) < budget:
        cands = strat.ask(8)
        if not cands:
            break
        got = []
        for c in cands:
            t = toy_time(c, costs)
            got.append(t)
            if c.key not in seen and len(times) < budget:
                seen.add(c.key)
                times.append(t)
                ctx.observe(c, t)
        strat.tell(cands, got)
    optimum = 1.0 + costs.min(axis=1).sum() - 0.05
    return times, optimum


@pytest.mark.parametrize("name", ["autotvm", "mbo"])
def test_model_based_finds_the_toy_optimum(name: str) -> None:
    times, optimum = run_toy(name, 400, seed=0)
    assert math.isclose(min(times), optimum, rel_tol=1e-9), (min(times), optimum)
    # Random proposals (the default with up to 4 changes) cannot: all 12 sites must change.
    rtimes, _ = run_toy("random", 400, seed=0)
    assert min(rtimes) > optimum + 0.5


@pytest.mark.parametrize("name", ["autotvm", "mbo"])
def test_same_seed_same_proposals(name: str) -> None:
    a, _ = run_toy(name, 60, seed=5)
    b, _ = run_toy(name, 60, seed=5)
    c, _ = run_toy(name, 60, seed=6)
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", ["autotvm", "mbo"])
def test_tuner_runs_are_reproducible(name: str) -> None:
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    runs = []
    for _ in range(2):
        s = open_session({"model": "resnet18"})
        phases = make_schedule("custom", ("fusion", "tiling", "flags"), name)
        r = Tuner(s.pipeline, s.runner, s.default, seed=3).run(phases, 60)
        assert r.evaluations == 60
        assert r.best_time <= r.default_time
        runs.append([(p.measured, p.best) for p in r.history])
    assert runs[0] == runs[1]


EFFECTIVE = 4  # sites that take effect in the identity test; the rest change nothing


def effective(cand: Candidate) -> str:
    cfg = cand.config("toy")
    return ",".join(str(int(cfg.get(f"s{i}", 0))) for i in range(EFFECTIVE))


@pytest.mark.parametrize("name", ["autotvm", "mbo"])
def test_one_program_is_proposed_once(name: str) -> None:
    # Only the first EFFECTIVE sites make the program (as only the chosen sketch's
    # decisions make a MetaSchedule schedule): 6^4 = 1,296 programs under 2e9 keys. A
    # strategy told so by `TuneContext.identity` never proposes a program it measured
    # or proposed before, and so spends every trial on a new one.
    costs = toy_costs()
    pipeline = Pipeline([ToyPass()])
    default = pipeline.initial(None)  # type: ignore[arg-type]
    ctx = TuneContext(pipeline, default, np.random.default_rng(1), identity=effective)
    ctx.observe(default, toy_time(default, costs))
    strat = create(name)
    strat.start(ctx, ("toy",), 120)
    programs = [effective(default)]
    for _ in range(15):
        cands = strat.ask(8)
        programs += [effective(c) for c in cands]
        # A program's time is its effective sites' (what runs).
        strat.tell(cands, [1.0 + sum(costs[i, int(c.config("toy").get(f"s{i}", 0))]
                                     for i in range(EFFECTIVE)) for c in cands])
    assert len(programs) == 1 + 15 * 8
    assert len(set(programs)) == len(programs)


@pytest.mark.parametrize(("name", "opts", "says"), [
    ("autotvm", {"plan": 0}, "'plan' must be >= 1"),
    ("autotvm", {"epsilon": 1.5}, "'epsilon' must be in [0.0, 1.0]"),
    ("autotvm", {"plan": True}, "'plan' must be an integer"),
    ("autotvm", {"plan": 2.5}, "'plan' must be an integer"),
    ("autotvm", {"depth": "3"}, "'depth' must be an integer"),
    ("autotvm", {"temperature": 1}, "unknown option 'temperature'"),
    ("mbo", {"kappa": -1}, "'kappa' must be >= 0.0"),
    ("mbo", {"kappa": float("nan")}, "'kappa' must be >= 0.0"),
    ("mbo", {"members": "ridge,svm"}, "'members' takes a comma-separated subset"),
    ("mbo", {"members": ""}, "'members' takes a comma-separated subset"),
])
def test_bad_options_are_one_line_errors(name: str, opts: dict, says: str) -> None:
    with pytest.raises(IRError) as e:
        create(name, **opts)
    assert says in str(e.value)
    assert name in str(e.value)
    assert "\n" not in str(e.value)


def test_flat_space_round_trips_a_candidate() -> None:
    pipeline = Pipeline([ToyPass()])
    default = pipeline.initial(None)  # type: ignore[arg-type]
    ctx = TuneContext(pipeline, default, np.random.default_rng(0))
    space = FlatSpace(ctx, ("toy",))
    space.extend(default)
    x = np.array([i % OPTIONS for i in range(SITES)])
    cand = space.build(x, default)
    assert [cand.config("toy").get(f"s{i}", 0) for i in range(SITES)] == list(x)
    assert list(space.encode(cand)) == list(x)
    f = space.features(x)
    # One column per non-default option set, then per pass the change count and the
    # sum of log2(1 + option index) over the changes.
    changed = [i for i in range(SITES) if x[i] != 0]
    assert f[0, :space.dim].sum() == len(changed)
    assert f[0, space.dim] == len(changed)
    assert math.isclose(f[0, space.dim + 1], sum(math.log2(1 + x[i]) for i in changed),
                        rel_tol=1e-6)
    assert np.array_equal(space.csr(x).toarray(), f)


def test_cli_takes_the_factorys_names_and_starts_light() -> None:
    code = ("import sys; from superopt.cli import main\n"
            "try:\n    main(['tune', '--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('sklearn', 'xgboost', 'torch') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "import argparse\n"
            "from superopt.xtat.command import validate_args\n"
            "from superopt.ir.errors import IRError\n"
            "ns = dict(replay=None, model='resnet18', budget=5, workers=1, round=8,\n"
            "          plan_budget=0, out=None, json=None, plot=None, export=None,\n"
            "          waterfall=None, resume=False, db=None)\n"
            "for s in ('autotvm', 'mbo'):\n"
            "    validate_args(argparse.Namespace(strategy=s, **ns))\n"
            "try:\n"
            "    validate_args(argparse.Namespace(strategy='nope', **ns))\n"
            "except IRError as e:\n"
            "    assert 'autotvm' in str(e) and 'mbo' in str(e), e\n"
            "else:\n"
            "    raise SystemExit('nope accepted')\n"
            "heavy = [m for m in ('sklearn', 'xgboost', 'torch') if m in sys.modules]\n"
            "assert not heavy, heavy\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
