"""The TVM kernel adapter (`superopt.xtat.tvm_kernels`): its knob space, the shim that
drives our strategies over it (with a fake measure: no TVM needed), the MetaSchedule
record reader, the benchmark's report, and one real TVM build and measurement (skipped
where TVM is not installed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from superopt.xtat.tvm_kernels import (
    KERNELS,
    Kernel,
    KnobSpace,
    best_curve,
    read_ms_records,
    search,
    trials_to,
)
from xtat.knob_cases import knob_cost
from xtat.tvm_bench import load_bench

MATMUL = Kernel("t_matmul", "test", "matmul", (32, 64, 48))
CONV = Kernel("t_conv", "test", "conv2d", (8, 10, 10, 16, 3, 3, 1, 1))


def _same_op(g, n, k: Kernel) -> bool:
    """Whether node `n` of zoo graph `g` is the op `k` describes (shapes and, for a
    conv, stride and padding)."""
    ours = next(m for m in k.graph().nodes if m.op == k.op)
    want = [tuple(k.graph().type_of(v).shape) for v in ours.inputs]
    got = [tuple(g.type_of(v).shape) for v in n.inputs]
    if n.op != k.op:
        return False
    if k.op == "matmul":  # the zoo's activations carry a batch axis of 1
        return [s[-2:] for s in got] == want and got[0][:-2] in ((), (1,))
    return got == want and all(n.a[a] == ours.a[a] for a in ("stride", "padding"))


def test_kernels_are_the_zoo_shapes() -> None:
    from superopt import api

    for k in KERNELS:
        g = api.load(k.model)
        assert any(_same_op(g, n, k) for n in g.nodes), k.name
    # and the check can fail: a shape the zoo's resnet50 does not have
    odd = Kernel("odd", "resnet50", "conv2d", (64, 56, 56, 64, 5, 5, 2, 1))
    assert not any(_same_op(api.load("resnet50"), n, odd) for n in api.load("resnet50").nodes)


def test_importing_the_adapter_does_not_import_tvm() -> None:
    code = ("import sys, superopt.xtat.tvm_kernels as tk, superopt.xtat.tvm_msspace; "
            "tk.KnobSpace(tk.KERNELS[0]); print(' '.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    mods = set(out.stdout.split())
    assert {"superopt.xtat.tvm_kernels", "superopt.xtat.tvm_msspace"} <= mods  # it sees imports
    assert not {m for m in mods if m == "tvm" or m.startswith(("tvm.", "tvm_ffi"))}


def test_flops_and_shapes() -> None:
    m, n, k = MATMUL.dims
    assert MATMUL.flops == 2 * m * n * k
    assert MATMUL.shapes() == {"A": [m, k], "B": [k, n], "C": [m, n]}
    assert CONV.out_hw == (10, 10)
    assert CONV.flops == 2 * 16 * 10 * 10 * 8 * 9
    strided = Kernel("s", "test", "conv2d", (8, 11, 11, 4, 3, 3, 1, 2))
    assert strided.out_hw == (6, 6)


@pytest.mark.parametrize("kernel", [MATMUL, CONV, *KERNELS], ids=lambda k: k.name)
def test_tile_options_divide_their_extents(kernel: Kernel) -> None:
    space = KnobSpace(kernel)
    ext = dict(kernel.spatial()) | dict(kernel.reduction())
    for s in space.sites:
        if not s.key.startswith("tile_"):
            continue
        e = ext[s.key[5:]]
        for o in s.options:
            prod = math.prod(o) if isinstance(o, tuple) else o
            assert e % prod == 0, (s.key, o, e)
        assert len(set(s.options)) == len(s.options)
    default = space.complete({})
    assert all(default[f"tile_{n}"] == (1, 1) for n, _ in kernel.spatial())
    assert default["vectorize"] is False and default["unroll"] == 0


def test_unit_reductions_have_no_site() -> None:
    one = Kernel("c1", "test", "conv2d", (8, 6, 6, 4, 1, 1, 0, 1))
    keys = {s.key for s in KnobSpace(one).sites}
    assert "tile_rc" in keys and "tile_ry" not in keys and "tile_rx" not in keys


@pytest.mark.parametrize("strategy", ["guided", "evolution", "autotvm", "mbo"])
def test_strategies_search_the_knobs_through_the_shim(strategy: str) -> None:
    space = KnobSpace(MATMUL)
    target = space.random(np.random.default_rng(7))
    calls: list[dict] = []
    trials = search(space, strategy, seed=3, budget=60, measure=knob_cost(space, target, calls))
    assert len(trials) == 60 == len(calls)
    assert trials[0].config == {k: list(v) if isinstance(v, tuple) else v
                                for k, v in space.complete({}).items()}
    assert [t.index for t in trials] == list(range(60))
    # A schedule is never measured twice: repeats come from the cache.
    keys = [json.dumps(c, sort_keys=True, default=list) for c in calls]
    assert len(set(keys)) == len(keys)
    curve = best_curve([t.seconds for t in trials])
    assert curve[-1] < curve[0] / 2  # the search found a much better schedule
    again = search(space, strategy, seed=3, budget=60, measure=knob_cost(space, target, []))
    assert [t.config for t in again] == [t.config for t in trials]


def test_failed_trials_count_and_do_not_stop_the_search() -> None:
    space = KnobSpace(MATMUL)
    n = 0

    def measure(config: dict) -> float:
        nonlocal n
        n += 1
        return math.inf if config["vectorize"] else 1.0 / (1 + config["unroll"])

    trials = search(space, "evolution", seed=0, budget=40, measure=measure)
    assert len(trials) == 40 == n
    assert any(math.isinf(t.seconds) for t in trials)
    assert min(t.seconds for t in trials) < 1.0


def test_trials_to_and_best_curve() -> None:
    secs = [5.0, math.inf, 3.0, 4.0, 2.0, 2.0]
    assert best_curve(secs) == [5.0, 5.0, 3.0, 3.0, 2.0, 2.0]
    assert trials_to(secs, 3.0) == 3
    assert trials_to(secs, 2.0) == 5
    assert trials_to(secs, 1.0) is None


def test_read_ms_records_in_file_order(tmp_path: Path) -> None:
    lines = [[0, ["trace", [0.5, 0.7], "t", []]], [0, ["trace", [1e10], "t", []]],
             [0, ["trace", [0.2], "t", []]]]
    p = tmp_path / "db.json"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got = read_ms_records(p)
    assert got[0] == pytest.approx(0.6) and math.isinf(got[1]) and got[2] == 0.2


def _bench():
    return load_bench()


def test_report_ratios_and_prefixes(tmp_path: Path) -> None:
    bench = _bench()
    k = KERNELS[0]

    def cell(tuner: str, secs: list[float | None]) -> None:
        p = bench.cell_path(tmp_path, k.name, tuner, 0, 256)
        p.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": 0,
                                 "budget": 256, "seconds": secs}))

    ms = [1.0] * 256
    ms[99] = 0.5  # MetaSchedule's best at trial 100 (within 256, not within 64)
    cell("metaschedule", ms)
    ours = [2.0] * 256
    ours[29] = 0.45  # reaches it at trial 30
    cell("guided", ours)
    slow = [None] + [3.0] * 255  # never reaches it; its first trial failed
    cell("evolution", slow)
    res = bench.report(tmp_path)
    entry = next(e for e in res["kernels"] if e["kernel"] == k.name)
    rows = {r["tuner"]: r for r in entry["budgets"]["256"]}
    assert rows["metaschedule"]["trials_to_own_best"] == 100
    assert rows["guided"]["trials_to_ms_best"] == 30
    assert rows["guided"]["ratio_vs_ms"] == 0.3
    assert rows["evolution"]["ratio_vs_ms"] is None
    assert rows["metaschedule"]["trials_to_best_of"] == {
        "knobs": {"guided": None, "evolution": 1}}
    assert rows["guided"]["gflops_share_of_ms_best"] == pytest.approx(0.5 / 0.45, abs=1e-3)
    assert rows["guided"]["best_gflops"] == pytest.approx(k.flops / 0.45 / 1e9, rel=1e-3)
    # At 64 the cells' prefixes stand in: MetaSchedule's best is then 1.0 at trial 1.
    rows64 = {r["tuner"]: r for r in entry["budgets"]["64"]}
    assert rows64["metaschedule"]["source"] == "prefix of 256"
    assert rows64["metaschedule"]["trials_to_own_best"] == 1
    assert rows64["guided"]["trials_to_ms_best"] == 30
    assert "1000" not in entry["budgets"]
    # Among our tuners, the target is the least of their bests (evolution's 3.0).
    assert entry["within_space"]["knobs"]["256"] == [{
        "seed": 0, "target_gflops": round(k.flops / 3.0 / 1e9, 3),
        "trials": {"guided": 1, "evolution": 2}}]
    # Trial 0 (the default schedule) of our two cells: 2.0 and a failure (left out).
    assert "noise_default_schedule" not in entry
    # One kernel measured: the goal (3 of 4) cannot be met.
    assert res["goal"]["knobs"]["256"]["per_kernel"] == {k.name: True}
    assert res["goal"]["knobs"]["256"]["met"] is False
    assert set(res["goal"]) == {"knobs"}


def test_report_keeps_the_spaces_apart(tmp_path: Path) -> None:
    """A cell from before spaces were named is the knob space; an ms cell names its
    space in its file and JSON; MetaSchedule's one cell is the reference of both."""
    bench = _bench()
    k = KERNELS[1]

    def write(path: Path, tuner: str, secs: list[float], **extra) -> None:
        path.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": 0,
                                    "budget": 64, "seconds": secs, **extra}))

    write(bench.cell_path(tmp_path, k.name, "metaschedule", 0, 64), "metaschedule",
          [1.0] * 9 + [0.5] + [1.0] * 54)  # best at trial 10
    legacy = tmp_path / f"{k.name}__guided__s0__b64.json"
    write(legacy, "guided", [2.0] * 64)  # never reaches it
    ms_cell = bench.cell_path(tmp_path, k.name, "guided", 0, 64, "ms")
    assert "__ms__" in ms_cell.name and ms_cell != legacy
    write(ms_cell, "guided", [2.0] * 3 + [0.4] + [2.0] * 60, space="ms")  # at trial 4
    assert bench.done_path(tmp_path, k.name, "guided", 0, 64, "knobs") == legacy
    assert bench.done_path(tmp_path, k.name, "evolution", 0, 64, "ms") is None
    res = bench.report(tmp_path)
    entry = next(e for e in res["kernels"] if e["kernel"] == k.name)
    rows = {(r["tuner"], r["space"]): r for r in entry["budgets"]["64"]}
    assert set(rows) == {("metaschedule", None), ("guided", "ms"), ("guided", "knobs")}
    assert rows[("guided", "ms")]["trials_to_ms_best"] == 4
    assert rows[("guided", "ms")]["ratio_vs_ms"] == 0.4
    assert rows[("guided", "knobs")]["trials_to_ms_best"] is None
    assert rows[("metaschedule", None)]["trials_to_best_of"] == {
        "ms": {"guided": None}, "knobs": {"guided": 1}}
    assert res["goal"]["ms"]["64"]["per_kernel"] == {k.name: True}
    assert res["goal"]["knobs"]["64"]["per_kernel"] == {k.name: False}


@pytest.mark.parametrize("kernel", [MATMUL, CONV], ids=lambda k: k.name)
def test_real_tvm_build_and_measure(kernel: Kernel) -> None:
    pytest.importorskip("tvm")
    from superopt.xtat.tvm_kernels import Evaluator, TvmMeasure

    space = KnobSpace(kernel)
    measure = TvmMeasure(space, Evaluator(number=1, repeat=1, min_repeat_ms=0), check=True)
    rng = np.random.default_rng(0)
    configs = [space.complete({})] + [space.random(rng) for _ in range(3)]
    configs.append(space.complete({"vectorize": True, "cache": True, "unroll": 16,
                                   "order": "S0 S1 R0 R1 S2"}))
    for c in configs:
        t = measure(c)
        assert math.isfinite(t) and t > 0, (c, measure.errors)
    assert measure.errors == []
    trials = search(space, "evolution", seed=0, budget=4, measure=measure)
    assert len(trials) == 4 and all(math.isfinite(t.seconds) for t in trials)


# MetaSchedule's own design space (`superopt.xtat.tvm_msspace`).

def test_perfect_tiles_are_every_factorization() -> None:
    from superopt.xtat.tvm_msspace import perfect_tiles

    tiles = perfect_tiles(12, 3, 64)
    assert all(math.prod(t) == 12 and len(t) == 3 for t in tiles)
    assert len(set(tiles)) == len(tiles) == 18  # ordered 3-factorizations of 2^2 * 3
    assert (1, 12, 1) in tiles and (12, 1, 1) in tiles
    bounded = perfect_tiles(12, 3, 4)
    assert max(t[-1] for t in bounded) == 4 and (1, 1, 12) not in bounded
    assert (1, 1, 12) in tiles and perfect_tiles(7, 2, 0) == [(1, 7), (7, 1)]


@pytest.fixture(scope="module")
def ms_spaces() -> dict:
    """One MetaSchedule space per tiny kernel (TVM's import of its tensor intrinsics,
    which the space generator needs, is paid once)."""
    pytest.importorskip("tvm")
    from superopt.xtat.tvm_msspace import MsSpace

    return {k.name: MsSpace(k) for k in (MATMUL, CONV)}


def _quick_measure(space, check: bool = True):
    from superopt.xtat.tvm_kernels import Evaluator, TvmMeasure

    return TvmMeasure(space, Evaluator(number=1, repeat=1, min_repeat_ms=0), check=check)


@pytest.mark.parametrize("name", [MATMUL.name, CONV.name])
def test_ms_sites_are_the_sketches_sampling_instructions(ms_spaces: dict, name: str) -> None:
    from superopt.xtat.tvm_msspace import SKETCH

    space = ms_spaces[name]
    assert len(space.sketches) >= 2
    assert space.by_key[SKETCH].options == tuple(range(len(space.sketches)))
    kinds = set()
    for i, sketch in enumerate(space.sketches):
        trace = sketch.trace
        insts = list(trace.insts)
        sampling = [(p, x) for p, x in enumerate(insts) if x.kind.name.startswith("Sample")]
        mine = space.samplings[i]
        assert [(s.position, s.kind) for s in mine] == [(p, x.kind.name) for p, x in sampling]
        for smp, (_, inst) in zip(mine, sampling, strict=True):
            site = space.by_key[smp.key]
            d = trace.get_decision(inst)
            own = int(d) if smp.kind != "SamplePerfectTile" else tuple(int(v) for v in d)
            assert site.default == own and own in site.options  # MetaSchedule's decision
            if smp.kind == "SamplePerfectTile":
                n = int(inst.attrs[0])
                assert all(len(o) == n and math.prod(o) == math.prod(own)
                           for o in site.options)
            kinds.add(smp.kind)
    assert {"SamplePerfectTile", "SampleCategorical"} <= kinds
    # Keys name the sketch, the position and the kind (not objects): stable across runs.
    assert [s.key for s in space.sites] == [SKETCH] + [
        f"s{i}.{p:03d}.{x.kind.name}" for i, sk in enumerate(space.sketches)
        for p, x in enumerate(sk.trace.insts) if x.kind.name.startswith("Sample")]


@pytest.mark.parametrize("name", [MATMUL.name, CONV.name])
def test_ms_configurations_replay_build_and_compute(ms_spaces: dict, name: str) -> None:
    space = ms_spaces[name]
    measure = _quick_measure(space)
    rng = np.random.default_rng(1)
    for sketch in range(len(space.sketches)):
        # MetaSchedule's own decisions, then other options on every site.
        for config in (space.complete({"sketch": sketch}), space.random(rng) | {"sketch": sketch}):
            t = measure(config)
            assert math.isfinite(t) and t > 0, (config, measure.errors)
    assert measure.errors == []


def test_ms_two_tilings_are_two_schedules(ms_spaces: dict) -> None:
    import tvm_ffi

    space = ms_spaces[MATMUL.name]
    a = space.complete({})
    tile = next(s for s in space.sites if s.key.startswith("s0.") and len(s.options) > 1
                and s.key.endswith("SamplePerfectTile"))
    b = a | {tile.key: next(o for o in tile.options if o != a[tile.key])}
    assert space.canonical(a) != space.canonical(b)
    assert not tvm_ffi.structural_equal(space.schedule(a), space.schedule(b))
    assert tvm_ffi.structural_equal(space.schedule(a), space.schedule(dict(a)))
    # Another sketch's sites do not change sketch 0's schedule.
    other = next(s for s in space.sites if s.key.startswith("s1.") and len(s.options) > 1)
    c = a | {other.key: next(o for o in other.options if o != a[other.key])}
    assert space.canonical(c) == space.canonical(a)


def test_ms_illegal_compute_location_is_the_legal_one_before_it(ms_spaces: dict) -> None:
    space = ms_spaces[CONV.name]
    loc = next(s for s in space.sites if s.key.endswith("SampleComputeLocation"))
    canon = {space.canonical(space.complete({"sketch": int(loc.key[1]), loc.key: o}))[loc.key]
             for o in loc.options}
    # Some loops are not legal locations (unit loops): fewer schedules than options.
    assert 1 < len(canon) < len(loc.options) and canon <= set(loc.options)


def test_ms_invalid_choice_is_a_failed_trial(ms_spaces: dict) -> None:
    space = ms_spaces[MATMUL.name]
    tile = next(s for s in space.sites if s.key.startswith("s0.")
                and s.key.endswith("SamplePerfectTile"))
    unroll = next(s for s in space.sites if s.key.startswith("s0.")
                  and s.key.endswith("SampleCategorical"))
    # A tile of the wrong arity, an unroll index past the candidates: not schedules.
    bads = [space.complete({tile.key: (math.prod(tile.default),)}),
            space.complete({unroll.key: len(unroll.options)})]
    measure = _quick_measure(space)
    for bad in bads:
        assert space.canonical(bad)[tile.key] == bad[tile.key]  # kept as asked
        assert math.isinf(measure(bad))
    assert len(measure.errors) == 2
    assert all(e.startswith("schedule:") for e in measure.errors), measure.errors
    assert math.isfinite(measure(space.complete({})))  # and the next trial is fine


@pytest.mark.parametrize("strategy", ["guided", "evolution"])
def test_strategies_search_the_ms_space(ms_spaces: dict, strategy: str) -> None:
    space = ms_spaces[MATMUL.name]
    # A fake cost with one optimum: a sketch and tiles on the sketch's sites.
    target = space.random(np.random.default_rng(5)) | {"sketch": 1}
    calls: list[dict] = []

    def measure(config: dict) -> float:
        calls.append(config)
        t = 1.0 + (config["sketch"] != target["sketch"])
        for s in space.samplings[config["sketch"]]:
            site = space.by_key[s.key]
            i, j = site.options.index(config[s.key]), site.options.index(target[s.key])
            t *= 1.0 + 0.5 * min(1.0, abs(i - j) / 4)
        return t

    trials = search(space, strategy, seed=0, budget=40, measure=measure)
    assert len(trials) == 40 == len(calls)
    assert trials[0].config == {k: list(v) if isinstance(v, tuple) else v
                                for k, v in space.canonical(space.complete({})).items()}
    assert set(trials[0].config) == {"sketch", *(s.key for s in space.samplings[0])}
    canon = [json.dumps(space.canonical(c), sort_keys=True, default=list) for c in calls]
    assert len(set(canon)) == len(canon)  # no schedule measured twice
    assert min(t.seconds for t in trials) < trials[0].seconds / 1.5


def test_a_strategy_tunes_the_ms_space_with_tvm(ms_spaces: dict) -> None:
    space = ms_spaces[CONV.name]
    measure = _quick_measure(space)
    trials = search(space, "evolution", seed=0, budget=5, measure=measure)
    assert len(trials) == 5 and all(math.isfinite(t.seconds) for t in trials)
    assert measure.errors == []
    assert len({json.dumps(t.config, sort_keys=True) for t in trials}) == 5  # 5 schedules


def test_ms_screen_scores_schedules_after_warmup_and_fails_what_cannot_run(
        ms_spaces: dict) -> None:
    from superopt.xtat.pipeline import Pipeline
    from superopt.xtat.space import PassConfig
    from superopt.xtat.store import ConfigStore
    from superopt.xtat.tvm_msspace import SKETCH, MsScreen

    space = ms_spaces[MATMUL.name]
    pipeline = Pipeline([space.make_pass()])
    start = pipeline.initial(space.kernel.graph())
    store = ConfigStore()

    def cand(config: dict):
        return pipeline.build(start, [PassConfig.of(
            {k: v for k, v in config.items() if v != space.by_key[k].default})], store)

    rng = np.random.default_rng(0)
    tile = next(s for s in space.sites if s.key.startswith("s0.")
                and s.key.endswith("SamplePerfectTile"))
    configs = [space.complete({}) | {SKETCH: 0, tile.key: o} for o in tile.options]
    configs += [space.random(rng) | {SKETCH: 0} for _ in range(24)]
    cands = [cand(c) for c in configs]
    bad = cand(space.complete({tile.key: (math.prod(tile.default),)}))  # wrong arity

    # A made-up cost the features can see: the first tile's innermost factor, best at 8.
    def cost(config: dict) -> float:
        return 1.0 + abs(math.log2(config[tile.key][-1]) - 3.0)

    times = [cost(c) for c in configs]
    screen = MsScreen(space, warmup=16)
    before = screen.predict([*cands[:3], bad])
    assert before[:3].tolist() == [0.0, 0.0, 0.0] and before[3] == -np.inf
    screen.update(cands, times)
    after = screen.predict([*cands, bad])
    assert after[-1] == -np.inf and np.isfinite(after[:-1]).all()
    # Higher score for a faster schedule: ranks agree with the cost it was fitted on.
    from scipy.stats import spearmanr

    assert spearmanr(after[:-1], [-t for t in times]).statistic > 0.5


def test_ms_screen_pretrained_on_another_kernel_scores_from_the_first_proposal(
        ms_spaces: dict) -> None:
    """A model fitted on one matmul's measurements ranks another matmul's schedules
    before any of them is measured (no warm-up), by the trend it was fitted on."""
    from scipy.stats import spearmanr

    from superopt.xtat.pipeline import Pipeline
    from superopt.xtat.space import PassConfig
    from superopt.xtat.store import ConfigStore
    from superopt.xtat.tvm_msspace import SKETCH, MsScreen, MsSpace, measure_candidates

    def first_tile(space: MsSpace):
        return next(s for s in space.sites if s.key.startswith("s0.")
                    and s.key.endswith("SamplePerfectTile"))

    def cost(space: MsSpace, config: dict) -> float:  # best with an innermost 8
        return 1.0 + abs(math.log2(config[first_tile(space).key][-1]) - 3.0)

    def configs(space: MsSpace, seed: int) -> list[dict]:
        tile = first_tile(space)
        rng = np.random.default_rng(seed)
        out = [space.complete({}) | {SKETCH: 0, tile.key: o} for o in tile.options]
        return out + [space.random(rng) | {SKETCH: 0} for _ in range(24)]

    seen = ms_spaces[MATMUL.name]
    train = configs(seen, 0)
    space_bad = seen.complete({}) | {first_tile(seen).key: (7,)}  # wrong arity
    other = MsSpace(Kernel("t_matmul2", "test", "matmul", (64, 32, 64)))
    screen = MsScreen(other, warmup=16)
    # The bad configuration in the middle, with a time of its own: it is skipped, and the
    # times after it stay with their configurations.
    half = len(train) // 2
    read = screen.pretrain([(seen, [*train[:half], space_bad, *train[half:]],
                             [*(cost(seen, c) for c in train[:half]), 0.01,
                              *(cost(seen, c) for c in train[half:])])])
    assert read == len(train) and screen.prior == read
    cands_seen, kept = measure_candidates(seen, [*train[:half], space_bad, *train[half:]])
    assert len(cands_seen) == len(train) and half not in kept and kept[-1] == len(train)
    pipeline = Pipeline([other.make_pass()])
    start = pipeline.initial(other.kernel.graph())
    store = ConfigStore()
    test = configs(other, 1)
    cands = [pipeline.build(start, [PassConfig.of(
        {k: v for k, v in c.items() if v != other.by_key[k].default})], store) for c in test]
    scores = screen.predict(cands)  # nothing of this kernel measured yet
    assert np.isfinite(scores).all() and len(set(scores.tolist())) > 1
    assert spearmanr(scores, [-cost(other, c) for c in test]).statistic > 0.5
    clean = MsScreen(other, warmup=16)
    clean.pretrain([(seen, train, [cost(seen, c) for c in train])])
    assert clean.predict(cands).tolist() == scores.tolist()
    untrained = MsScreen(other, warmup=16).predict(cands[:3])
    assert untrained.tolist() == [0.0, 0.0, 0.0]  # without a prior: warm-up first
    # The run's measurements, the prior's trend reversed: a frozen screen (learn=False)
    # keeps the pre-trained scores, a learning one is refitted on them.
    reversed_times = [1.0 / cost(other, c) for c in test]
    for learn in (False, True):
        s2 = MsScreen(other, warmup=16, learn=learn)
        s2.pretrain([(seen, train, [cost(seen, c) for c in train])])
        before = s2.predict(cands)
        s2.update(cands, reversed_times)
        assert (s2.predict(cands).tolist() == before.tolist()) is not learn
    # With own_after=n the prior scores until the run has measured n schedules, then a
    # model of the run's measurements alone does: exactly a screen with no prior.
    n = len(test)
    s3 = MsScreen(other, warmup=16, learn=False, own_after=n)
    s3.pretrain([(seen, train, [cost(seen, c) for c in train])])
    s3.update(cands[:n - 1], reversed_times[:n - 1])
    assert s3.predict(cands).tolist() == scores.tolist()  # one short: still the prior
    s3.update(cands[n - 1:], reversed_times[n - 1:])
    alone = MsScreen(other, warmup=16)
    alone.update(cands[:n - 1], reversed_times[:n - 1])
    alone.update(cands[n - 1:], reversed_times[n - 1:])
    assert s3.predict(cands).tolist() == alone.predict(cands).tolist() != scores.tolist()


def test_report_counts_metaschedule_against_its_other_seeds(tmp_path: Path) -> None:
    """The A/A control: each MetaSchedule seed's trials to another seed's best, as a
    ratio of that seed's own trials to it."""
    bench = _bench()
    k = KERNELS[0]

    def cell(tuner: str, seed: int, secs: list[float]) -> None:
        p = bench.cell_path(tmp_path, k.name, tuner, seed, 256, "ms")
        p.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": seed,
                                 "budget": 256, "space": "ms", "seconds": secs}))

    a, b = [1.0] * 256, [1.0] * 256
    a[199] = 0.5  # seed 0: its best at trial 200
    b[39], b[79] = 0.6, 0.4  # seed 1: 0.6 at trial 40, its best 0.4 at trial 80
    cell("metaschedule", 0, a)
    cell("metaschedule", 1, b)
    g0, g1 = [2.0] * 256, [2.0] * 256
    g0[59] = 0.5  # guided seed 0 reaches seed 0's best at 60: 0.3x
    cell("guided", 0, g0)
    cell("guided", 1, g1)  # never reaches seed 1's
    res = bench.report(tmp_path)
    entry = next(e for e in res["kernels"] if e["kernel"] == k.name)
    aa = {(r["seed"], r["target_seed"]): r for r in entry["ms_across_seeds"]["256"]}
    # Seed 1 reaches seed 0's 0.5 at trial 80 (0.4): 80/200; seed 0 never reaches 0.4.
    assert aa[(1, 0)]["trials"] == 80 and aa[(1, 0)]["ratio"] == 0.4
    assert aa[(0, 1)]["trials"] is None and aa[(0, 1)]["ratio"] is None
    goal = res["goal"]["ms"]["256"]
    assert goal["pairs_guided_le_0.5"] == [1, 2]
    assert goal["pairs_ms_vs_own_other_seeds_le_0.5"] == [1, 2]


@pytest.mark.slow  # three of MetaSchedule's spaces built (about 30 s each here)
def test_ms_records_replay_and_a_killed_retiming_resumes(ms_spaces: dict,
                                                          tmp_path: Path) -> None:
    """A MetaSchedule record replays to the program it measured, and `--retime` of a
    cell whose re-timing was cut short keeps what it had and times only the rest."""
    from tvm.s_tir import meta_schedule as ms

    from superopt.xtat.tvm_kernels import _same, host_target
    from superopt.xtat.tvm_retime import ms_record_modules

    space = ms_spaces[MATMUL.name]
    sch = space.postprocessed(space.complete({}))
    workload = ms.database.Workload(space.workload)
    record = ms.database.TuningRecord(sch.trace, workload, [1e-3], host_target())
    mods = ms_record_modules([json.dumps(workload.as_json())],
                             [json.dumps([0, record.as_json()]), ""])
    assert len(mods) == 1 and _same(mods[0], sch.mod)

    bench = _bench()
    cell = bench.run_cell(MATMUL, "guided", 0, 3, tmp_path, "ms")
    path = bench.cell_path(tmp_path, MATMUL.name, "guided", 0, 3, "ms")
    assert bench.programs_path(path).exists()
    # Killed after one trial: a marker ratio that a fresh re-timing would not give.
    bench.retimed_path(path).write_text(json.dumps(
        {"ratios": [7.0], "reference_s": [0.5], "wall_s": 1.0}))
    bench.retime(tmp_path, [MATMUL], 1, {"guided"}, log=lambda _: None)
    got = json.loads(bench.retimed_path(path).read_text())
    assert got["ratios"][0] == 7.0 and len(got["ratios"]) == len(cell["seconds"]) == 3
    assert got["resumed_at"] == [1]
    assert got["reference_s"][0] == 0.5 and len(got["reference_s"]) >= 2
    assert all(r is not None and 0 < r < 100 for r in got["ratios"][1:])
    # Refined: every trial within the window re-timed again (a large window: all three);
    # a refine cut short goes on with the trials it had not done.
    bench.refine(tmp_path, [MATMUL], {"guided"}, 100.0, 1, log=lambda _: None)
    got = json.loads(bench.retimed_path(path).read_text())
    fine = got["refined"]
    assert sorted(fine["ratios"]) == ["0", "1", "2"] and fine["rounds"] == 1
    assert got["ratios"][0] == 7.0  # the first re-timing is kept as it was
    del fine["ratios"]["2"]
    fine["ratios"]["0"] = 3.0  # a marker a new refine would not give
    bench.retimed_path(path).write_text(json.dumps(got))
    bench.refine(tmp_path, [MATMUL], {"guided"}, 100.0, 1, log=lambda _: None)
    again = json.loads(bench.retimed_path(path).read_text())["refined"]["ratios"]
    assert again["0"] == 3.0 and sorted(again) == ["0", "1", "2"]


def test_refined_report_reads_the_refined_ratios_and_drops_the_rest(tmp_path: Path) -> None:
    """On refined figures MetaSchedule's lucky first re-timing no longer sets the target;
    a trial not refined reaches nothing."""
    bench = _bench()
    k = KERNELS[0]

    def cell(tuner: str, ratios: list[float], refined: dict[int, float]) -> None:
        p = bench.cell_path(tmp_path, k.name, tuner, 0, 256, "ms")
        p.write_text(json.dumps({"kernel": k.name, "tuner": tuner, "seed": 0,
                                 "budget": 256, "space": "ms", "seconds": [1.0] * 256}))
        bench.retimed_path(p).write_text(json.dumps({
            "ratios": ratios, "reference_s": [1.0], "session": "a",
            "refined": {"rounds": 9, "window": 0.2, "limit": 0.6, "session": "b",
                        "reference_s": [2.0],
                        "ratios": {str(i): x for i, x in refined.items()}}}))

    ms, g = [1.0] * 256, [1.0] * 256
    ms[99], ms[199] = 0.5, 0.4  # first re-timing: its best 0.4 at trial 200 (lucky)
    g[39], g[59] = 0.45, 0.5
    cell("metaschedule", ms, {99: 0.5, 199: 0.52})  # refined: its best is trial 100
    cell("guided", g, {39: 0.49, 59: 0.5})
    fine = bench.report(tmp_path, refined=True)
    rows = next(e for e in fine["kernels"] if e["kernel"] == k.name)["budgets"]["256"]
    msr = next(r for r in rows if r["tuner"] == "metaschedule")
    gr = next(r for r in rows if r["tuner"] == "guided")
    assert msr["trials_to_own_best"] == 100
    assert gr["trials_to_ms_best"] == 40 and gr["ratio_vs_ms"] == 0.4
    # The refined scale: ratio x the refining session's reference (2.0 s).
    assert math.isclose(msr["best_gflops"], k.flops / (0.5 * 2.0) / 1e9, rel_tol=1e-3)
    coarse = bench.report(tmp_path, retimed=True)
    rows = next(e for e in coarse["kernels"] if e["kernel"] == k.name)["budgets"]["256"]
    assert next(r for r in rows if r["tuner"] == "metaschedule")["trials_to_own_best"] == 200
    assert next(r for r in rows if r["tuner"] == "guided")["trials_to_ms_best"] is None
