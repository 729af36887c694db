"""Learned cost models: the data (deterministic, resumable, consistent with the recorded
totals), the metrics on hand-made groups, the models' training, persistence and errors."""

from __future__ import annotations

import math
import pickle
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from superopt.xtat.models import ModelError, create, load_model
from superopt.xtat.models import dataset as ds
from superopt.xtat.models.features import KernelSample
from superopt.xtat.models.metrics import evaluate, group_metrics, mape, opa

TINY = ds.Settings(fusion=24, sites=4, tiles=6, flag_sites=1, extra_every=12, extra_sites=1)
WORKLOADS = [("squeezenet", 1), ("synthetic:120", None)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cm")
    ds.generate(out, WORKLOADS, TINY)
    return out


@pytest.fixture(scope="module")
def data(data_dir: Path) -> ds.KernelData:
    return ds.load(data_dir)


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as c:
        return list(c.execute("SELECT step, candidate, runtime, strategy, phase FROM "
                              "measurements ORDER BY step"))


def test_generation_is_deterministic_and_resumes(data_dir: Path, tmp_path: Path) -> None:
    ds.generate(tmp_path, WORKLOADS[:1], TINY)
    name = ds.slug(*WORKLOADS[0]) + ".sqlite"
    full = _rows(tmp_path / name)
    assert full == _rows(data_dir / name)
    # Kill it after 10 measurements: the rest is measured on resume, the first 10 kept.
    with sqlite3.connect(tmp_path / name) as c:
        c.execute("DELETE FROM measurements WHERE step >= 10")
    assert len(_rows(tmp_path / name)) == 10
    ds.generate(tmp_path, WORKLOADS[:1], TINY)
    assert _rows(tmp_path / name) == full
    # Another seed is another run: refused, not mixed in.
    with pytest.raises(Exception, match="other settings"):
        ds.generate(tmp_path, WORKLOADS[:1], ds.Settings(**{**TINY.__dict__, "seed": 1}))


def test_kernel_samples_sum_to_the_recorded_totals(data_dir: Path, data: ds.KernelData) -> None:
    from superopt.xtat.session import open_session

    assert {s.task for s in data.samples} == {"fusion", "tile", "flags"}
    s = open_session({"model": "squeezenet", "batch": 1})
    name = ds.slug("squeezenet", 1)
    default = {x.sig_key: x for x in data.samples
               if x.workload == name and x.task == "fusion"
               and s.default.final.tiles.get(x.sig_key) == x.tile
               and s.default.final.flags.get(x.sig_key) == x.flags}
    total = sum(default[k].measured for k in s.default.final.sig_keys)
    recorded = _rows(data_dir / f"{name}.sqlite")[0][2]
    assert math.isclose(total, recorded, rel_tol=1e-12)
    assert math.isclose(recorded, s.runner.measure(s.default, 0), rel_tol=1e-12)
    for g in data.groups().values():
        assert len({(x.sig_key, x.workload) for x in g}) == 1  # one kernel per group
        assert len(g) >= 2
    a, b = ds.load(data_dir), data
    assert a.data_hash == b.data_hash


def test_splits(data: ds.KernelData) -> None:
    tr, te = data.split("models", test=["squeezenet"])
    assert {s.model for s in te.samples} == {"squeezenet"}
    assert "squeezenet" not in {s.model for s in tr.samples}
    tr, te = data.split("random", seed=3)
    assert len(tr) + len(te) == len(data)
    assert not {s.group for s in tr.samples if s.group} & {s.group for s in te.samples
                                                          if s.group}
    with pytest.raises(ds.DatasetError, match="resnet50"):
        data.split("models", test=["resnet50"])


def _sample(t: float, group: str = "g") -> KernelSample:
    return KernelSample(None, "k", (8,), None, t, t, "w", "m", "tile", group)  # type: ignore


def test_metrics_on_hand_made_groups() -> None:
    groups = {"a": [_sample(1.0, "a"), _sample(2.0, "a"), _sample(4.0, "a")],
              "b": [_sample(3.0, "b"), _sample(1.0, "b")]}
    scores = {id(x): v for x, v in zip(groups["a"] + groups["b"], [2, 1, 3, 0, 1],
                                       strict=True)}
    m = group_metrics(groups, lambda g: np.asarray([scores[id(x)] for x in g], float))
    # a picks 2.0 (best 1.0), b picks 3.0 (best 1.0): 100 * (1 + 2) / (1 + 1)
    assert m.ape == pytest.approx(150.0)
    assert m.opa == pytest.approx((2 / 3 + 0) / 2)
    assert m.top1 == pytest.approx((2.0 + 3.0) / 2)
    assert opa([1, 2, 3], [1, 2, 3]) == 1.0 and opa([3, 2, 1], [1, 2, 3]) == 0.0
    assert mape([1.1, 0.9], [1.0, 1.0]) == pytest.approx(10.0)


def test_analytical_picks_the_legacy_default_compilers_tile(data: ds.KernelData) -> None:
    from superopt.tpu_sim import DEFAULT_FLAGS, KernelCosts, tile_options

    model = create("analytical")
    # The model is the legacy default compiler's: its argmin is that compiler's pick.
    kc = KernelCosts(model.feat.kc.hw, default_tiling="legacy")
    checked = 0
    for sig in list({s.sig: None for s in data.samples})[:40]:
        opts = [t for t in tile_options(kc.stats(sig)) if kc.cost(sig, t, DEFAULT_FLAGS).valid]
        if len(opts) < 2:
            continue
        sc = model.score_items([(sig, t, DEFAULT_FLAGS) for t in opts])
        assert opts[int(np.argmin(sc))] == kc.default_tile(sig, DEFAULT_FLAGS)
        checked += 1
    assert checked >= 5


def test_gbt_learns_the_times(data: ds.KernelData, tmp_path: Path) -> None:
    tr, te = data.split("random", seed=0)
    gbt = create("gbt", rounds=60).fit(tr)
    ana = create("analytical")
    got, base = evaluate(gbt, te), evaluate(ana, te)
    # Trained on measured times, it predicts held-out kernels far better than the
    # analytical model (which ignores DMA efficiency, MXU fill and per-step costs).
    assert got["fusion"]["mape"] < 0.5 * base["fusion"]["mape"]
    path = gbt.save(tmp_path / "gbt.model")
    again = load_model(path, "v4")
    assert np.array_equal(again.predict(te.samples), gbt.predict(te.samples))
    assert np.array_equal(again.score(te.samples), gbt.score(te.samples))
    assert again.data_hash == data.data_hash


def test_residual_models_start_from_the_analytical_estimate(data: ds.KernelData) -> None:
    # No boosting round: the residual regressor is its base margin, the default compiler's
    # estimate, exactly; without the residual it is a constant.
    ana = create("analytical").predict(data.samples[:40])
    flat = create("gbt", rounds=0, residual=False, rank=False).fit(data)
    res = create("gbt", rounds=0, rank=False).fit(data)
    assert np.allclose(res.predict(data.samples[:40]), ana, rtol=1e-5)
    assert np.ptp(flat.predict(data.samples[:40])) == 0.0
    # GraphSAGE's residual: the network's output is relative to the estimate, so its
    # predictions move with the estimate for the same network output.
    gs = create("graphsage", epochs=1, hidden=8).fit(data)
    off = create("graphsage", epochs=1, hidden=8, residual=False).fit(data)
    r_gs = np.log(gs.predict(data.samples[:40]) / ana)
    r_off = np.log(off.predict(data.samples[:40]) / ana)
    assert np.corrcoef(r_gs, np.log(ana))[0, 1] ** 2 < np.corrcoef(r_off, np.log(ana))[0, 1] ** 2


def test_nonnegative_fit_drops_negative_terms() -> None:
    from superopt.xtat.models.gbt import nonnegative_fit

    rng = np.random.default_rng(0)
    a = rng.uniform(0.0, 1.0, (200, 3))
    w = nonnegative_fit(a, a @ np.array([2.0, 0.5, 0.0]))
    assert np.allclose(w, [2.0, 0.5, 0.0], atol=1e-9)
    # A target that wants a negative coefficient gets 0 for it, not a negative one.
    w = nonnegative_fit(a, a @ np.array([1.0, -1.0, 0.5]))
    assert w[1] == 0.0 and (w >= 0).all()


def test_extra_features_see_what_the_estimate_leaves_out() -> None:
    from superopt.tpu_sim import KernelCosts, get_hardware
    from superopt.tpu_sim.replay import load_tiles, prepare_all
    from superopt.xtat.models.features import EXTRA_FEATURES, FEATURES, Featurizer

    kc = KernelCosts(get_hardware("v3"))
    feat = Featurizer(kc)
    pk = next(k for k in prepare_all(load_tiles())[0] if k.tunable and len(k.tiles) > 2)
    rows = feat.matrix([(pk.sig, t, pk.flags(kc, t)) for t in pk.tiles])
    assert rows.shape == (len(pk.tiles), len(FEATURES)) and np.isfinite(rows).all()
    # Bounds tiles of one kernel (the TpuGraphs transfer check) cut its traffic into
    # different numbers of DMA runs, which the analytical estimate ignores.
    assert FEATURES[-len(EXTRA_FEATURES):] == EXTRA_FEATURES
    assert np.ptp(rows[:, FEATURES.index("dma_runs")]) > 0.0


def test_graphsage_trains_in_seconds(data: ds.KernelData, tmp_path: Path) -> None:
    model = create("graphsage", epochs=4, hidden=16).fit(data)
    pred = model.predict(data.samples)
    assert np.isfinite(pred).all() and (pred > 0).all()
    meas = np.asarray([s.measured for s in data.samples])
    # Better than predicting every kernel at the data's geometric mean.
    flat = np.exp(np.log(meas).mean())
    assert mape(pred, meas) < mape(np.full_like(meas, flat), meas)
    again = load_model(model.save(tmp_path / "gs.model"))
    assert np.allclose(again.predict(data.samples[:50]), pred[:50], rtol=1e-5)


def test_ensemble_averages_its_members_in_log_space(data: ds.KernelData,
                                                    tmp_path: Path) -> None:
    opts = {"gbt": {"rounds": 20}, "graphsage": {"epochs": 2, "hidden": 16}}
    ens = create("ensemble", **opts).fit(data)
    gbt = create("gbt", **opts["gbt"]).fit(data)
    sage = create("graphsage", **opts["graphsage"]).fit(data)
    some = data.samples[:60]
    # The geometric mean of the members' times (trained alone on the same data).
    assert np.allclose(ens.predict(some), np.sqrt(gbt.predict(some) * sage.predict(some)),
                       rtol=1e-5)
    # One kernel's configurations: ordered by the mean of the members' standardised scores.
    group = max(data.task("tile").groups().values(), key=len)
    z = [(sc - sc.mean()) / sc.std() for sc in (gbt.score(group), sage.score(group))]
    assert np.allclose(ens.score(group), (z[0] + z[1]) / 2, atol=1e-5)
    again = load_model(ens.save(tmp_path / "ens.model"), "v4")
    assert np.allclose(again.predict(some), ens.predict(some), rtol=1e-5)
    assert again.data_hash == data.data_hash
    # Made of members trained already: the same model.
    from superopt.xtat.models.ensemble import Ensemble

    assert np.allclose(Ensemble.of(gbt, sage).predict(some), ens.predict(some), rtol=1e-5)


def test_saved_model_mismatches_are_one_line_errors(data: ds.KernelData,
                                                    tmp_path: Path) -> None:
    path = create("gbt", rounds=5).fit(data).save(tmp_path / "m")
    with pytest.raises(ModelError, match="trained for TPU v4, used for v3"):
        load_model(path, "v3")
    blob = pickle.loads(path.read_bytes())
    for key, value, msg in (("schema", "0000", "feature schema 0000"),
                            ("version", 99, "format version 99")):
        bad = tmp_path / f"bad_{key}"
        bad.write_bytes(pickle.dumps(blob | {key: value}))
        with pytest.raises(ModelError, match=msg) as e:
            load_model(bad)
        assert "\n" not in str(e.value)
    (tmp_path / "junk").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="not a superopt cost model"):
        load_model(tmp_path / "junk")
    with pytest.raises(ModelError, match="unknown cost model"):
        create("xgb")
    with pytest.raises(ModelError, match="not trained"):
        create("gbt").predict(data.samples[:2])
    with pytest.raises(ModelError, match="measured on TPU v4"):
        create("gbt", hardware="v3").fit(data)


def test_costmodel_cli_and_tune_with_a_model(tmp_path: Path, capsys: pytest.CaptureFixture
                                             ) -> None:
    from superopt.cli import main

    data = tmp_path / "data"
    assert main(["costmodel", "dataset", "--out", str(data), "--models", "squeezenet",
                 "--batches", "1", "--fusion", "16", "--sites", "3", "--tiles", "5"]) == 0
    model = tmp_path / "gbt.model"
    assert main(["costmodel", "train", "--data", str(data), "--rounds", "20", "--out",
                 str(model)]) == 0
    assert main(["costmodel", "eval", "--data", str(data), "--model-file", str(model),
                 "--json", str(tmp_path / "e.json")]) == 0
    import json

    got = json.loads((tmp_path / "e.json").read_text())
    assert set(got) == {"analytical", "gbt"} and "fusion" in got["gbt"]
    db = tmp_path / "runs.sqlite"
    assert main(["tune", "squeezenet", "--budget", "40", "--cost-model", str(model),
                 "--db", str(db), "--json", str(tmp_path / "t.json")]) == 0
    out = json.loads((tmp_path / "t.json").read_text())
    assert out["valid"] and out["evaluations"] <= 40
    # The tuning records feed back into training.
    assert main(["costmodel", "train", "--data", str(data), "--db", str(db), "--rounds", "5",
                 "--out", str(tmp_path / "again.model"), "--split", "none"]) == 0
    assert main(["tune", "squeezenet", "--budget", "5", "--hardware", "v3", "--cost-model",
                 str(model)]) == 2
    assert "trained for TPU v4, used for v3" in capsys.readouterr().err


def test_topk_goes_down_the_models_ranking_until_the_budget_is_spent() -> None:
    from superopt.xtat.models.topk import wrapper
    from superopt.xtat.session import open_session
    from superopt.xtat.tuner import Tuner, make_schedule

    s = open_session({"model": "squeezenet", "batch": 1})
    model = create("analytical")
    ti = s.pipeline.index("tiling")
    sites = s.pipeline.passes[ti].sites(s.default.stages[ti]).tunable
    f = s.default.final
    seen: dict[str, set] = {site.key: set() for site in sites}  # tiles measured per kernel

    class Recording:
        def measure(self, c: Any, seed: int) -> float:
            for key, tiles in seen.items():
                tiles.add(c.final.tiles[key])
            return s.runner.measure(c, seed)

        def time(self, c: Any) -> float:
            return s.runner.time(c)

    budget = 1 + 4 * len(sites)  # the default, then two passes of 2 tiles per kernel
    wrap = wrapper(model, k_graph=4, k_kernel=2)
    r = Tuner(s.pipeline, Recording(), s.default, seed=0, wrap=wrap).run(  # type: ignore[arg-type]
        make_schedule("custom", ("tiling",), "exhaustive"), budget)
    # The first pass measures the model's 2 best tiles of each kernel; the budget left
    # then goes to a second pass over the next 2 (it used to end after the first pass).
    assert r.evaluations == budget
    assert r.phases == [("tiling", 2 * len(sites)), ("tiling", 2 * len(sites))]
    for site in sites:
        sig = f.signatures[f.sig_keys.index(site.key)]
        others = [o for o in site.options if o != f.tiles[site.key]]
        order = np.argsort(model.score_items([(sig, o, f.flags[site.key]) for o in others]),
                           kind="stable")
        assert seen[site.key] == {f.tiles[site.key], *(others[i] for i in order[:4])}
    assert r.best_time <= r.default_time
    # Without a model the schedule runs once: one exhaustive pass over every tile.
    plain = Tuner(s.pipeline, s.runner, s.default, seed=0).run(
        make_schedule("custom", ("tiling",), "exhaustive"), 10_000)
    assert plain.phases == [("tiling", sum(len(site.options) - 1 for site in sites))]


def test_op_kinds_come_from_traits_and_the_cost_table() -> None:
    from superopt.ir.opdef import OPS
    from superopt.xtat.models.features import op_kind

    # Pools are window reductions (their old names, max_pool2d/avg_pool2d, never matched
    # the registry's), attention runs on the MXU, expand and split move data.
    assert op_kind("pool2d_avg") == op_kind("pool2d_max") == "reduce"
    assert op_kind("reduce_max") == op_kind("rms_norm") == op_kind("softmax") == "reduce"
    assert op_kind("attention") == op_kind("matmul") == op_kind("conv2d") == "mxu"
    assert op_kind("expand") == op_kind("split") == op_kind("transpose") == "layout"
    assert op_kind("exp") == op_kind("where") == op_kind("ewadd") == "other"
    assert op_kind("no_such_op") == "other"
    assert {op_kind(op) for op in OPS} == {"mxu", "layout", "reduce", "other"}
