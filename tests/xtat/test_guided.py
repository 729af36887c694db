"""Local-advantage guided fusion search: labels, data collection, the model and the
`guided` strategy (seed-reproducible, bad options are one-line errors, and at a small
equal budget it finds fusion configurations at least as fast as random search's)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from superopt.ir.graph import Graph, GraphBuilder
from superopt.tpu_sim.synthetic import synthetic_graph
from superopt.xtat.advantage import (
    FEATURES,
    AdvantageError,
    AdvantageModel,
    FlipFeatures,
    graph_sigma,
    label,
)
from superopt.xtat.advantage_data import TRAINING_TILING, collect, train
from superopt.xtat.session import open_session
from superopt.xtat.space import Site
from superopt.xtat.strategies import create
from superopt.xtat.strategies.guided import near_options
from superopt.xtat.strategies.modelbased import StrategyOptionError
from superopt.xtat.tuner import Tuner, make_schedule
from xtat.knob_cases import knob_cost


def chain_graph() -> Graph:
    """x -> relu -> tanh -> out on a 4 MiB tensor: fusing relu into tanh saves writing and
    reading its 4 MiB value through HBM."""
    b = GraphBuilder("chain")
    x = b.input("x", (1024, 1024))
    return b.build([b.op("tanh", b.op("relu", x))])


def test_label_is_signed_log_scaled() -> None:
    got = label(np.array([2.0, -2.0, 0.0, 0.5]), 1.0)
    assert got == pytest.approx([math.log(3.0), -math.log(3.0), 0.0, math.log(1.5)])
    with pytest.raises(ValueError):
        label(1.0, 0.0)
    assert graph_sigma(np.array([0.0, -3.0, 1.0, 2.0])) == 2.0


def test_label_sign_on_a_constructed_flip() -> None:
    s = open_session({"model": "chain"}, chain_graph())
    j = s.pipeline.index("fusion")
    sites = {x.label.split(" ")[1]: x for x in s.pipeline.passes[j].sites(
        s.default.stages[j]).tunable}
    relu = sites["relu"]
    fused = s.pipeline.with_choice(s.default, "fusion", relu.key, True)
    apart = s.pipeline.with_choice(s.default, "fusion", relu.key, False)
    t_fused, t_apart = s.runner.time(fused), s.runner.time(apart)
    # Fusing (the flip apart -> fused) is faster: positive advantage, positive label.
    assert label(t_apart - t_fused, 1e-6) > 0
    assert label(t_fused - t_apart, 1e-6) < 0
    feats = FlipFeatures(apart, j, s.sim)
    node = s.pipeline.passes[j].node_of(apart.stages[j])[relu.key]
    row = feats.row(node, relu, False, True)
    assert len(row) == len(FEATURES)
    assert row[FEATURES.index("op=relu")] == 1.0
    assert row[FEATURES.index("current=mat")] == 1.0
    assert row[FEATURES.index("target=fuse")] == 1.0


def test_collection_is_deterministic_and_resumes(tmp_path) -> None:
    a = collect("synthetic:120@3", seed=1, chains=2, steps=40, cache=tmp_path)
    files = sorted(tmp_path.glob("*.npz"))
    assert len(files) == 2 and len(a) > 0
    files[1].unlink()  # as if killed before the second chain was saved
    b = collect("synthetic:120@3", seed=1, chains=2, steps=40, cache=tmp_path)
    c = collect("synthetic:120@3", seed=1, chains=2, steps=40, cache=None)
    for other in (b, c):
        assert np.array_equal(a.X, other.X) and np.array_equal(a.a, other.a)
    d = collect("synthetic:120@3", seed=2, chains=2, steps=40, cache=None)
    assert not (len(d) == len(a) and np.array_equal(a.a, d.a))


# The tiny model is trained over the legacy default's tiles (`TRAINING_TILING`); it is
# judged over the same.
LEGACY = TRAINING_TILING


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """A model trained in seconds on two small synthetic graphs."""
    folder = tmp_path_factory.mktemp("adv")
    tr = train(["synthetic:150@1", "synthetic:200@2"], seed=0, chains=2, steps=100,
               cache=folder, rounds=60, depth=4)
    path = folder / "model.json"
    tr.model.save(path)
    return str(path)


def test_model_round_trips(tiny_model: str) -> None:
    m = AdvantageModel.load(tiny_model)
    X = np.random.default_rng(0).random((5, len(FEATURES))).astype(np.float32)
    again = AdvantageModel.load(tiny_model)
    assert np.array_equal(m.predict(X), again.predict(X))
    assert m.meta["graphs"] == ["synthetic:150@1", "synthetic:200@2"]


def run_fusion(graph: Graph, strategy: str, seed: int, budget: int, **opts: object
               ) -> list[float]:
    s = open_session({"model": graph.name, "default_tiling": LEGACY}, graph)
    tuner = Tuner(s.pipeline, s.runner, s.default, seed=seed, strategy_opts=opts)
    tuner.run(make_schedule("custom", ("fusion",), strategy), budget)
    return [p.best for p in tuner.history]


def test_guided_is_reproducible_by_seed(tiny_model: str) -> None:
    g = synthetic_graph(300, seed=7)
    a = run_fusion(g, "guided", 4, 60, model=tiny_model)
    b = run_fusion(g, "guided", 4, 60, model=tiny_model)
    c = run_fusion(g, "guided", 5, 60, model="none")
    assert a == b and len(a) == 60
    assert a != c


@pytest.mark.parametrize("opts, words", [
    ({"alpha": 2.0}, "'alpha' must be in [0.001, 1.0]"),
    ({"k": -1}, "'k' must be in [0, 8]"),
    ({"spread": "x"}, "'spread' must be a number"),
    ({"beta": 1}, "unknown option 'beta'"),
    ({"model": 3}, "'model' must be text"),
    ({"restart": -1}, "'restart' must be"),
])
def test_bad_options_are_one_line_errors(opts: dict, words: str) -> None:
    with pytest.raises(StrategyOptionError) as e:
        create("guided", **opts)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_missing_model_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(AdvantageError, match="not found"):
        create("guided", model=str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "old", "booster": {}}')
    with pytest.raises(AdvantageError, match="another feature schema"):
        create("guided", model=str(bad))


def test_guided_beats_random_and_unguided_at_equal_small_budget(tiny_model: str) -> None:
    # A graph the model never saw; the sum over seeds of the best time after 80
    # measurements (random search: the default with 1..4 random changes).
    # The same search with the sites in random order (model="none") must do worse too,
    # or the model is not what helps.
    g = synthetic_graph(400, seed=11)
    guided = sum(run_fusion(g, "guided", s, 80, model=tiny_model)[-1] for s in range(3))
    unguided = sum(run_fusion(g, "guided", s, 80, model="none")[-1] for s in range(3))
    rand = sum(run_fusion(g, "random", s, 80)[-1] for s in range(3))
    assert guided <= rand
    assert guided <= unguided



def test_incremental_ranking_equals_full_rescoring() -> None:
    # Rankings of a chain of candidates, each 1-60 random fusion changes from the last
    # (large jumps move the program's total estimated time, so share features cross
    # split thresholds of sites whose neighbourhood did not change): the incremental
    # ranking must equal a full rescoring of every site, predictions included.
    from superopt.xtat.context import TuneContext
    from superopt.xtat.strategies.guided import Scores, full_ranking, load_model

    g = synthetic_graph(500, seed=5)
    s = open_session({"model": g.name, "default_tiling": LEGACY}, g)  # the model's own
    ctx = TuneContext(s.pipeline, s.default, np.random.default_rng(0))
    j = s.pipeline.index("fusion")
    scores = Scores(load_model(""), ctx, j, s.default.stages[j], {})
    cand = s.default
    by_share = 0
    for step in range(40):
        cand = ctx.mutate(cand, ["fusion"], [1, 3, 60][step % 3])
        got = scores.rank(cand)
        full = full_ranking(scores.model, ctx, cand, j, {})
        assert [(x.key, o) for x, o in got] == [(scores.sites[i].key, o) for i, o, _ in full]
        assert [float(scores.best[i]) for i, _, _ in full] == [p for _, _, p in full]
        if step and step % 3 != 2:  # a 60-change jump may move every site's shares
            assert scores.rescored[0] < len(scores.sites)
        by_share += scores.rescored[1]
    assert by_share > 0  # the share-threshold path was exercised


def test_guided_run_is_the_same_incremental_or_not(monkeypatch) -> None:
    # Every time the guided search ranks the sites of a new best, the incremental ranking
    # must be the one a full rescoring of every site gives (same sites, same order, same
    # predicted best options); the run's measurements must then be the same too.
    from superopt.xtat.strategies import guided

    g = synthetic_graph(400, seed=3)
    checked: list[tuple[int, int]] = []
    rank = guided.Scores.rank
    predict = guided.AdvantageModel.predict
    predicted: list[int] = []

    def counting_predict(self, X):
        predicted.append(len(X))
        return predict(self, X)

    def checked_rank(self, cand):
        predicted.clear()
        got = rank(self, cand)
        rows = sum(predicted)
        full = guided.full_ranking(self.model, self.ctx, cand, self.j, {})
        assert [(s.key, o) for s, o in got] == [(self.sites[i].key, o) for i, o, _ in full]
        checked.append((rows, len(self.X)))
        return got

    monkeypatch.setattr(guided.AdvantageModel, "predict", counting_predict)
    monkeypatch.setattr(guided.Scores, "rank", checked_rank)
    passes = ("fusion", "tiling", "flags")

    def run(incremental: int) -> list[float]:
        s = open_session({"model": g.name}, g)
        tuner = Tuner(s.pipeline, s.runner, s.default, seed=2,
                      strategy_opts={"incremental": incremental, "fusion_share": 0.8})
        tuner.run(make_schedule("custom", passes, "guided"), 150)
        return [p.measured for p in tuner.history]

    inc = run(1)
    assert len(checked) >= 10  # new bests, each ranked both ways
    # After the first ranking, a new best re-predicts a small part of the rows.
    assert all(rows < total / 4 for rows, total in checked[1:])
    assert inc == run(0)


# ---- kernel moves: near options ----------------------------------------------------------


def _site(options: tuple, default: object) -> Site:
    return Site("s", options, default)


def test_near_options_of_a_factorization_move_one_factor() -> None:
    # 16 as two factors: from (4, 4) one factor 2 moved either way is log-distance 2;
    # (1, 16) and (16, 1) are 4 away.
    site = _site(((1, 16), (2, 8), (4, 4), (8, 2), (16, 1)), (4, 4))
    assert sorted(near_options(site, (4, 4), 2)) == [(2, 8), (8, 2)]
    assert sorted(near_options(site, (4, 4), 1)) == [(2, 8), (8, 2)]  # tied with the 1st
    assert sorted(near_options(site, (1, 16), 1)) == [(2, 8)]
    assert len(near_options(site, (4, 4), 9)) == 4  # k past the options: all others


def test_near_options_of_integers_by_rank_and_of_flags_all() -> None:
    site = _site((-2, -1, 0, 1, 2, 3), 0)
    assert sorted(near_options(site, 0, 2)) == [-1, 1]
    assert sorted(near_options(site, -2, 2)) == [-1, 0]
    flags = _site((False, True), False)
    assert near_options(flags, False, 1) == [True]
    mixed = _site(("a", 3, None), "a")
    assert sorted(near_options(mixed, "a", 1), key=str) == [3, None]


def _knob_context(seed: int) -> tuple:
    """(the knob pass, its default candidate, a context whose best is that candidate)
    over the first kernel's knob space."""
    from superopt.xtat.context import TuneContext
    from superopt.xtat.pipeline import Pipeline
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace

    space = KnobSpace(KERNELS[0])
    knob = space.make_pass()
    pipeline = Pipeline([knob])
    start = pipeline.initial(space.kernel.graph())
    ctx = TuneContext(pipeline, start, np.random.default_rng(seed))
    ctx.best, ctx.best_time = start, 1.0
    return knob, start, ctx


def test_guided_kernel_moves_are_near_with_local_one() -> None:
    """With local=1 each proposal from the start changes a tile to a near option only."""
    knob, start, ctx = _knob_context(0)
    g = create("guided", model="none", local=1.0, changes=1, near=1)
    g.start(ctx, [knob.name], 50)
    sites = {s.key: s for s in knob.sites(start.stages[0]).tunable}
    for cand in g.ask(30):
        changed = {k: v for k, v in cand.config(knob.name).choices.items()
                   if v != sites[k].default}
        assert len(changed) == 1
        (key, value), = changed.items()
        assert value in near_options(sites[key], sites[key].default, 1)


class _OracleScreen:
    """A `TuneContext.screen` that knows the fake cost (it scores minus the time) and
    says a vectorized schedule cannot run; it records what it is told."""

    def __init__(self, space, cost) -> None:
        self.space, self.cost = space, cost
        self.told: list[tuple[dict, float]] = []
        self.asked = 0

    def _config(self, cand) -> dict:
        return self.space.complete(cand.config(self.space.make_pass().name))

    def predict(self, cands) -> np.ndarray:
        self.asked += len(cands)
        cfgs = [self._config(c) for c in cands]
        return np.array([-np.inf if c["vectorize"] else -self.cost(c) for c in cfgs])

    def update(self, cands, times) -> None:
        self.told.extend((self._config(c), t) for c, t in zip(cands, times, strict=True))


def test_guided_screen_picks_what_the_model_scores_best_and_hears_every_measurement() -> None:
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace, best_curve, search

    space = KnobSpace(KERNELS[2])
    target = space.random(np.random.default_rng(3)) | {"vectorize": False}
    cost = knob_cost(space, target)
    screen = _OracleScreen(space, cost)
    screened = search(space, "guided", seed=0, budget=60, measure=cost, screen=screen,
                      opts={"screen": 8, "explore": 0.0})
    idle = _OracleScreen(space, cost)
    plain = search(space, "guided", seed=0, budget=60, measure=cost, screen=idle)
    assert idle.asked == 0 and len(idle.told) == 60  # off by default: told, never asked
    assert screen.asked >= 8 * (60 - 1)  # eight proposals scored per trial handed out
    # The driver tells the screen each measurement once, in measurement order.
    assert [t for _, t in screen.told] == [t.seconds for t in screened]
    # What the screen says cannot run is never measured (but the default, measured first).
    assert not any(t.config["vectorize"] for t in screened[1:])
    assert any(t.config["vectorize"] for t in plain)  # the unscreened search does try it
    # An exact model finds a better schedule in the same trials than no model.
    assert best_curve([t.seconds for t in screened])[-1] < best_curve(
        [t.seconds for t in plain])[-1]
    again = search(space, "guided", seed=0, budget=60, measure=cost,
                   screen=_OracleScreen(space, cost), opts={"screen": 8, "explore": 0.0})
    assert [t.config for t in again] == [t.config for t in screened]


def test_guided_screen_after_turns_the_screen_on_once_the_climb_stalls() -> None:
    """With screen_after=s the proposals are the unscreened climb's (the screen scores
    nothing) until s measured proposals in a row were not faster; from then on every
    ask is screened, also after the climb gets faster again."""
    from superopt.xtat.context import TuneContext
    from superopt.xtat.pipeline import Pipeline
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace

    space = KnobSpace(KERNELS[0])
    cost = knob_cost(space, space.random(np.random.default_rng(4)))

    def strategy(opts: dict) -> tuple:
        knob = space.make_pass()
        pipeline = Pipeline([knob])
        start = pipeline.initial(space.kernel.graph())
        screen = _OracleScreen(space, cost)
        ctx = TuneContext(pipeline, start, np.random.default_rng(0), screen=screen)
        ctx.best, ctx.best_time = start, 1.0
        g = create("guided", model="none", changes=1, **opts)
        g.start(ctx, [knob.name], 60)
        return g, screen

    g, screen = strategy({"screen": 4, "screen_after": 3})
    plain, _ = strategy({})
    first, same = g.ask(2), plain.ask(2)
    assert screen.asked == 0 and [c.key for c in first] == [c.key for c in same]
    g.tell(first, [0.5, 2.0])  # faster, then one stale proposal
    more = g.ask(2)
    assert screen.asked == 0 and not g.late
    g.tell(more, [2.0, 2.0])  # three in a row not faster
    assert g.late
    g.tell(g.ask(2), [0.1, 0.2])
    assert screen.asked >= 4 * 2  # screened: four scored per proposal handed out
    asked = screen.asked
    g.ask(2)  # faster again, and still screened
    assert screen.asked > asked
    eager, eager_screen = strategy({"screen": 4})  # screen_after=0: from the first ask
    eager.ask(2)
    assert eager_screen.asked >= 8


def test_guided_fresh_screens_random_points_of_the_whole_space_beside_moves() -> None:
    """With fresh=1 the screened pool is whole-space samples (most change several sites
    at once); with fresh=0 it is moves of the start (one site each, changes=1); with
    fresh=0.5 it is both. The pool's size is `screen` times the ask either way."""
    from superopt.xtat.context import TuneContext
    from superopt.xtat.pipeline import Pipeline
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace

    space = KnobSpace(KERNELS[0])
    cost = knob_cost(space, space.random(np.random.default_rng(5)))

    def pool(fresh: float) -> tuple[list[int], int]:
        knob = space.make_pass()
        pipeline = Pipeline([knob])
        start = pipeline.initial(space.kernel.graph())
        screen = _OracleScreen(space, cost)
        seen: list = []
        predict = screen.predict
        screen.predict = lambda cands: (seen.extend(cands), predict(cands))[1]
        ctx = TuneContext(pipeline, start, np.random.default_rng(0), screen=screen)
        ctx.best, ctx.best_time = start, 1.0
        g = create("guided", model="none", changes=1, screen=4, generations=0,
                   explore=0.0, fresh=fresh)
        g.start(ctx, [knob.name], 60)
        assert len(g.ask(4)) == 4
        return [len(c.config(knob.name).choices) for c in seen], screen.asked

    moves, asked = pool(0.0)
    assert asked == 16 and max(moves) <= 1
    samples, asked = pool(1.0)
    assert asked == 16 and sum(s >= 2 for s in samples) >= 12
    both, _ = pool(0.5)
    assert sum(s <= 1 for s in both) >= 8 and sum(s >= 2 for s in both) >= 4


def test_guided_without_a_screen_in_the_context_ignores_its_screen_option() -> None:
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace, search

    space = KnobSpace(KERNELS[2])
    cost = knob_cost(space, space.random(np.random.default_rng(4)))
    a = search(space, "guided", seed=1, budget=30, measure=cost)
    b = search(space, "guided", seed=1, budget=30, measure=cost, opts={"screen": 8})
    assert [t.config for t in a] == [t.config for t in b]


def test_guided_init_proposes_random_points_first_then_climbs_from_the_fastest() -> None:
    """With init=n the first n proposals are whole-space samples (most of them change
    many sites at once, which no single move does); the next ones are moves of the
    fastest of them."""
    knob, _, ctx = _knob_context(0)
    g = create("guided", model="none", init=6, changes=1)
    g.start(ctx, [knob.name], 50)
    first = g.ask(4) + g.ask(4)  # the second ask has two samples left, then moves
    assert len(first) == 8
    sizes = [len(c.config(knob.name).choices) for c in first]
    assert max(sizes[:6]) >= 3  # a sample sets every site: several differ from default
    assert all(s <= 1 for s in sizes[6:])  # moves of the start (one site, changes=1)
    g.tell(first, [5.0, 5.0, 0.5, 5.0, 5.0, 5.0, 5.0, 5.0])
    fastest = first[2].config(knob.name).choices
    for cand in g.ask(10):  # each a move of the fastest sample: one site away from it
        got = cand.config(knob.name).choices
        keys = set(got) | set(fastest)
        assert sum(got.get(k) != fastest.get(k) for k in keys) == 1


def test_guided_restart_climbs_from_new_points_after_stale_proposals() -> None:
    """With restart=r, after r measured moves in a row that are not faster, the next
    proposals are `init` new random points, and the climb goes on from the fastest of
    them even when it is slower than the best so far. The random points themselves do
    not count as stale moves."""
    knob, _, ctx = _knob_context(0)
    g = create("guided", model="none", init=4, changes=1, restart=3)
    g.start(ctx, [knob.name], 60)

    def away(cand, ref: dict) -> int:
        got = cand.config(knob.name).choices
        return sum(got.get(k) != ref.get(k) for k in set(got) | set(ref))

    first = g.ask(4)
    g.tell(first, [5.0, 5.0, 0.5, 5.0])  # three samples slower than the fastest
    fastest = first[2].config(knob.name).choices
    for _ in range(3):  # a climb from the fastest sample; three moves not faster
        move, = g.ask(1)
        assert away(move, fastest) == 1 and g.restarts == 0
        g.tell([move], [0.9])
    again = g.ask(4)
    assert g.restarts == 1
    assert max(len(c.config(knob.name).choices) for c in again) >= 3  # samples, not moves
    g.tell(again, [9.0, 8.0, 7.0, 9.0])  # all slower than the run's best (0.5)
    start = again[2].config(knob.name).choices
    for cand in g.ask(6):  # the new climb: moves of its own fastest point
        assert away(cand, start) == 1
    plain = create("guided", model="none", init=4, changes=1)
    plain.start(_knob_context(0)[2], [knob.name], 60)
    samples = plain.ask(4)
    plain.tell(samples, [5.0, 5.0, 0.5, 5.0])
    for _ in range(5):  # off by default: the climb never leaves its start
        move, = plain.ask(1)
        assert away(move, samples[2].config(knob.name).choices) == 1
        plain.tell([move], [0.9])


def test_context_sample_draws_every_site_uniformly_and_reproducibly() -> None:
    knob, start, _ = _knob_context(0)
    sites = knob.sites(start.stages[0]).tunable

    def draws(seed: int) -> list[dict]:
        _, _, ctx = _knob_context(seed)
        return [dict(ctx.sample(start, [knob.name]).config(knob.name).choices)
                for _ in range(300)]

    got = draws(1)
    assert got == draws(1)  # from the context's generator alone
    for s in sites:
        seen = [c.get(s.key, s.default) for c in got]
        assert all(v in s.options for v in seen)
        # Uniform over the options: each option's share within 4 standard deviations.
        n, k = len(seen), len(s.options)
        for o in s.options:
            share = sum(v == o for v in seen)
            assert abs(share - n / k) <= 4 * math.sqrt(n * (1 / k) * (1 - 1 / k)) + 1


def test_guided_screen_init_measures_the_best_scored_random_points() -> None:
    """With screen_init=k the init's n proposals are the n best-scored of k x n random
    points: with an exact model, none it says cannot run, and a fastest start better
    than the unscreened init's."""
    from superopt.xtat.tvm_kernels import KERNELS, KnobSpace, search

    space = KnobSpace(KERNELS[2])
    cost = knob_cost(space, space.random(np.random.default_rng(5)) | {"vectorize": False})
    wins = 0
    for seed in range(4):
        screen = _OracleScreen(space, cost)
        got = search(space, "guided", seed=seed, budget=9, measure=cost, screen=screen,
                     opts={"init": 8, "screen_init": 8})
        assert screen.asked == 64  # one pool of 8 x 8 new points, scored once
        assert not any(t.config["vectorize"] for t in got[1:])
        plain = search(space, "guided", seed=seed, budget=9, measure=cost,
                       screen=_OracleScreen(space, cost), opts={"init": 8})
        wins += min(t.seconds for t in got[1:]) < min(t.seconds for t in plain[1:])
    assert wins >= 3
