"""The task scheduler: Ansor's gradient by hand on constructed task states, round-robin
order, the objective bookkeeping against a recomputation, reproducibility by seed, and
one-line errors for bad names and options."""

from __future__ import annotations

import math

import pytest

from superopt.ir.errors import IRError
from superopt.tpu_sim import DEFAULT_FLAGS
from superopt.xtat.scheduler import Task, TaskState, create, tune_tasks, workload


def state(weight: float, history: list[float], work: float = 0.0, kind: str = "mxu",
          done: bool = False) -> TaskState:
    t = Task(key=f"k{weight}-{len(history)}", sig=None, weight=weight, counts=(),
             work=work, kind=kind, default=((8,), DEFAULT_FLAGS), tiles=((8,),))
    s = TaskState(t, history=list(history), queue=[] if done else [((8,), DEFAULT_FLAGS)],
                  flags_queued=done)
    if history:
        s.best = ((8,), DEFAULT_FLAGS, history[-1])
    return s


def test_gradient_matches_the_paper_formula_by_hand() -> None:
    g = create("gradient")  # alpha 0.2, beta 2, window 3
    # Work 0: no similar-speed bound, only -g/t. Task a: 4 rounds, 10 -> 6 over the last 3.
    a = state(2.0, [10.0, 10.0, 9.0, 6.0], work=0.0)
    # back = (6 - 10) / 3 = -4/3; forward = -6/4 = -1.5
    want_a = 2.0 * (0.2 * (-4.0 / 3.0) + 0.8 * -1.5)
    assert math.isclose(g.gradient(0, [a]), want_a, rel_tol=1e-12)
    # Two rounds only: no backward term yet.
    b = state(1.0, [4.0, 3.0], work=0.0)
    assert math.isclose(g.gradient(0, [b]), 0.8 * -1.5, rel_tol=1e-12)
    # Similar tasks: c runs at 100 work/s, d at 10; d could reach 2 * 50 / 100 = 1 s,
    # so its forward term is min(-5 / 1, 1 - 5) = -5 and min(-2/1, ...) for c.
    c = state(1.0, [2.0], work=200.0)
    d = state(1.0, [5.0], work=50.0)
    assert math.isclose(g.gradient(1, [c, d]), 0.8 * -5.0, rel_tol=1e-12)
    d2 = state(1.0, [5.0, 5.0], work=50.0)  # -5/2 = -2.5 > 1 - 5 = -4: the bound wins
    assert math.isclose(g.gradient(1, [c, d2]), 0.8 * -4.0, rel_tol=1e-12)
    # Another kind does not count as similar.
    d3 = state(1.0, [5.0, 5.0], work=50.0, kind="vpu")
    assert math.isclose(g.gradient(1, [c, d3]), 0.8 * -2.5, rel_tol=1e-12)


def test_gradient_picks_warm_up_first_then_the_steepest() -> None:
    g = create("gradient", epsilon=0.0)
    heavy = state(10.0, [1.0, 1.0])  # 10 * 0.8 * -0.5 = -4
    light = state(1.0, [1.0])  # 1 * 0.8 * -1 = -0.8
    fresh = state(0.1, [])
    assert g.pick([heavy, light, fresh]) == 2
    assert g.pick([heavy, light]) == 0
    assert g.pick([state(1.0, [1.0], done=True), light]) == 1
    assert g.pick([state(1.0, [1.0], done=True)]) is None


def test_epsilon_greedy_draws_live_tasks_by_seed() -> None:
    heavy = state(10.0, [1.0, 1.0])
    states = [heavy, state(1.0, [1.0]), state(1.0, [1.0], done=True), state(1.0, [1.0])]

    def picks(**opts: object) -> list[int]:
        g = create("gradient", **opts)
        return [g.pick(states) for _ in range(60)]

    always = picks(epsilon=1.0, seed=3)
    assert set(always) == {0, 1, 3}  # every live task, never the done one
    assert always == picks(epsilon=1.0, seed=3) != picks(epsilon=1.0, seed=4)
    assert set(picks(epsilon=0.0)) == {0}
    some = picks(epsilon=0.2, seed=1)
    assert 0 < sum(1 for i in some if i != 0) < 30  # mostly the steepest


def test_similar_tasks_are_the_same_computation(small) -> None:
    # Ansor's N(i): the same fused ops on the same unit, at any shape. Kernels with
    # another op list are not similar even on the same unit.
    seen: dict[str, tuple] = {}
    units: dict[str, set] = {}
    for t in small.tasks:
        st = small.sim.kernels.stats(t.sig)
        unit = (st.gemm is not None, st.reduction)
        assert seen.setdefault(t.kind, (unit, st.ops)) == (unit, st.ops)
        units.setdefault(unit, set()).add(t.kind)
    assert any(len(kinds) > 1 for kinds in units.values())


def test_round_robin_takes_live_tasks_in_turn() -> None:
    r = create("round-robin")
    states = [state(1.0, [1.0]), state(1.0, [1.0], done=True), state(1.0, [1.0])]
    assert [r.pick(states) for _ in range(4)] == [0, 2, 0, 2]


@pytest.mark.parametrize(("kind", "opts", "says"), [
    ("ansor", {}, "unknown task scheduler 'ansor'"),
    ("gradient", {"alpha": 1.5}, "'alpha' must be in [0.0, 1.0]"),
    ("gradient", {"window": 0}, "'window' must be >= 1"),
    ("gradient", {"epsilon": -0.1}, "'epsilon' must be in [0.0, 1.0]"),
    ("gradient", {"gamma": 1}, "unknown option 'gamma'"),
    ("round-robin", {"alpha": 0.2}, "unknown option 'alpha'"),
])
def test_bad_schedulers_are_one_line_errors(kind: str, opts: dict, says: str) -> None:
    with pytest.raises(IRError) as e:
        create(kind, **opts)
    assert says in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def small():
    # Over the legacy default's tiles: the XLA-strength default leaves these kernels'
    # tiles (nearly) nothing to gain, so the objective could not fall.
    return workload(["squeezenet", "bert_small"], default_tiling="legacy")


@pytest.mark.parametrize("kind", ["round-robin", "gradient"])
def test_tuning_spends_the_budget_and_tracks_the_objective(small, kind: str) -> None:
    steps, states = tune_tasks(small, create(kind), 300, seed=1)
    assert len(steps) == 300 == sum(len(s.measured) for s in states)
    # Recompute the objective from scratch: each model's kernels under the best measured
    # configuration of their task, over the model's default time.
    configs = {s.task.key: (s.best[0], s.best[1]) if s.best else s.task.default
               for s in states}
    assert math.isclose(steps[-1].objective, small.objective(configs), rel_tol=1e-9)
    assert math.isclose(small.objective({t.key: t.default for t in small.tasks}),
                        len(small.kernels), rel_tol=1e-9)
    assert steps[-1].objective < len(small.kernels)  # 300 measurements gain something
    again, _ = tune_tasks(small, create(kind), 300, seed=1)
    assert [s.objective for s in again] == [s.objective for s in steps]


def test_gradient_spends_more_on_heavy_tasks_than_round_robin(small) -> None:
    budget = 4 * len(small.tasks) * 3
    heavy = max(small.tasks, key=lambda t: t.weight * small.exact(t, *t.default)).key
    rounds = {}
    for kind in ("round-robin", "gradient"):
        _, states = tune_tasks(small, create(kind), budget, seed=0)
        rounds[kind] = next(s.rounds for s in states if s.task.key == heavy)
    assert rounds["gradient"] > rounds["round-robin"]
