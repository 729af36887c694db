"""The joint benchmark's graph pairs: joint.py --save-graphs writes them, joint_device.py
times them (here on the CPU) and reports a file it cannot read without losing the rest."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from bench_modules import load_benchmark
from superopt.ir.graph import GraphBuilder
from superopt.ir.serialize import from_json

BENCH = Path(__file__).parents[1] / "benchmarks"


def _joint_module():
    return load_benchmark("joint")


def _pair():
    b = GraphBuilder("tiny")
    x = b.input("x", (1, 3, 8, 8))
    y = b.relu(b.conv2d(x, b.weight("w", (4, 3, 3, 3)), padding="same"))
    before = b.build([y])
    # The same conv with its kernel computed from two weights: a weight-only computation
    # the simulator prices as folded, so the saved graph must hold it folded too.
    b = GraphBuilder("tiny")
    x = b.input("x", (1, 3, 8, 8))
    w = b.ewadd(b.weight("w1", (4, 3, 3, 3)), b.weight("w2", (4, 3, 3, 3)))
    after = b.build([b.relu(b.conv2d(x, w, padding="same"))])
    return before, after


def test_save_pair_keeps_the_original_and_folds_the_joint_graphs_weight_computations(
        tmp_path: Path) -> None:
    before, after = _pair()
    path = _joint_module().save_pair(tmp_path, "tiny", 2, before, after)
    assert path.name == "tiny_b2.json.gz"
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    assert (doc["model"], doc["batch"]) == ("tiny", 2)
    assert from_json(doc["before"]).structural_hash == before.structural_hash
    saved = from_json(doc["after"])
    assert after.op_histogram()["ewadd"] == 1 and saved.op_histogram()["ewadd"] == 0
    assert saved.op_histogram()["conv2d"] == 1


def _device(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "joint_device.py"), "--graphs", str(tmp_path / "g"),
         "--device", "cpu", "--repeats", "3", "--warmup", "1",
         "--joint-json", str(tmp_path / "none.json"), "--out", str(tmp_path / "out.json"),
         *extra], capture_output=True, text=True, timeout=300)


def test_joint_device_times_each_pair_and_reports_an_unreadable_one(tmp_path: Path) -> None:
    before, after = _pair()
    _joint_module().save_pair(tmp_path / "g", "tiny", 1, before, after)
    (tmp_path / "g" / "broken_b1.json.gz").write_bytes(gzip.compress(b'{"model": "x"'))
    r = _device(tmp_path)
    assert r.returncode == 1
    err = [ln for ln in r.stderr.splitlines() if "broken_b1.json.gz" in ln]
    assert len(err) == 1, r.stderr
    doc = json.loads((tmp_path / "out.json").read_text())
    (row,) = doc["rows"]
    assert (row["model"], row["batch"]) == ("tiny", 1)
    assert row["before_s"] > 0 and row["after_s"] > 0 and row["aa_ratio"] > 0
    assert row["ratio_ci"][0] <= row["ratio"] <= row["ratio_ci"][1]
    assert doc["complete"] is False  # one of the two files was not timed


def test_joint_device_refuses_an_empty_folder_and_a_missing_device(tmp_path: Path) -> None:
    (tmp_path / "g").mkdir()
    r = _device(tmp_path)
    assert r.returncode != 0 and "no *.json.gz graph pairs" in r.stderr
    before, after = _pair()
    _joint_module().save_pair(tmp_path / "g", "tiny", 1, before, after)
    r = _device(tmp_path, "--device", "nosuchdevice")
    assert r.returncode != 0 and r.stderr.strip().startswith("--device:")
    assert not (tmp_path / "out.json").exists()


def test_equal_information_summarises_only_the_rows_with_the_exact_column() -> None:
    mod = _joint_module()
    assert mod.equal_information([{"speedup": {"xtat": 1.1, "joint": 1.2}}]) == {}
    rows = [
        {"speedup": {"xtat": 1.0, "joint": 1.2, "xtat_exact": 1.1},
         "xtat_exact": [{"exact_screen_allowed": 10, "exact_evaluations": 7}]},
        {"speedup": {"xtat": 1.0, "joint": 1.0, "xtat_exact": 1.25},
         "xtat_exact": [{"exact_screen_allowed": 5, "exact_evaluations": 5}]},
        {"speedup": {"xtat": 2.0, "joint": 3.0}},  # no equal-information column: left out
    ]
    got = mod.equal_information(rows)["equal_information"]
    assert got["rows"] == 2
    assert got["joint_at_least_xtat_exact"] == 1  # 1.2 >= 1.1, 1.0 < 1.25
    assert abs(got["geomean_xtat_exact"] - (1.1 * 1.25) ** 0.5) < 1e-12
    assert abs(got["geomean_joint_same_rows"] - 1.2 ** 0.5) < 1e-12
    assert (got["exact_evaluations_allowed"], got["exact_evaluations_used"]) == (15, 12)


def test_taso_only_leaves_the_models_own_weight_only_computations_computed() -> None:
    from superopt.tpu_sim import Simulator, simulate

    # w1 @ w2 depends on weights only (its own kernel: a second MXU op is never fused
    # into one that has one), and no starter rule applies: the default compiler computes
    # it, so TASO-only's time must be the default's, not the time with it folded away.
    b = GraphBuilder("own_constant")
    x = b.input("x", (64, 256))
    w = b.matmul(b.weight("w1", (256, 1024)), b.weight("w2", (1024, 512)))
    g = b.build([b.matmul(x, w)])
    mod = _joint_module()
    got = mod.taso_only(g, 5)
    sim = Simulator("v4", default_tiling=mod.DEFAULT["tiling"])
    assert got["applied"] == 0
    assert got["time_s"] == simulate(sim.compile(g), sim=sim).time


def test_a_row_stopped_within_keeps_its_finished_columns_and_resume_measures_only_the_rest(
        tmp_path: Path, monkeypatch) -> None:
    # A nasnet_a row takes two CPU-hours; stopped in its TASO-only column, the XTAT-only
    # column already measured must be in --out, and --resume must not measure it again.
    mod = _joint_module()
    calls: list[str] = []
    stop = {"taso": True}

    def fake_tuner(model, batch, graph, rules, passes, schedule, strategy, budget, seeds,
                   keep=None, **kw):
        col = "xtat" if rules is None else "pet" if "starter" not in rules else "joint"
        calls.append(col)
        if keep is not None:
            keep.update(time_s=1.0, graph=graph)
        t = {"xtat": 0.9, "pet": 0.95, "joint": 0.8}[col]
        return [{"time_s": t, "default_s": 1.0, "plan_cost_evaluations": 3}
                for _ in seeds]

    def fake_taso(graph, budget, keep=None):
        calls.append("taso")
        if stop["taso"]:
            raise KeyboardInterrupt
        return {"time_s": 0.85, "evaluations": 1, "wall_s": 0.0, "applied": 1}

    def fake_pet(graph, batch, path):
        calls.append("pet_search")
        path.write_text("{}")
        return str(path), 2, 0.0

    monkeypatch.setattr(mod, "run_tuner", fake_tuner)
    monkeypatch.setattr(mod, "taso_only", fake_taso)
    monkeypatch.setattr(mod, "pet_rules", fake_pet)
    monkeypatch.setattr(mod, "library_key", lambda: "lib")
    out = tmp_path / "j.json"
    argv = ["joint.py", "--models", "squeezenet", "--batches", "1", "--seeds", "2",
            "--no-torch", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        mod.main()
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the fake TASO-only column did not stop the run")
    doc = json.loads(out.read_text())
    assert doc["rows"] == [] and doc["complete"] is False
    (kept,) = doc["partial"]
    assert "xtat" in kept and "taso" not in kept
    assert calls == ["xtat", "taso"]
    calls.clear()
    stop["taso"] = False
    monkeypatch.setattr(sys, "argv", [*argv, "--resume"])
    mod.main()
    assert "xtat" not in calls and calls.count("taso") == 1
    doc = json.loads(out.read_text())
    assert "partial" not in doc and doc["complete"] is True
    (row,) = doc["rows"]
    assert row["speedup"]["xtat"] == 1.0 / 0.9 and row["speedup"]["joint"] == 1.0 / 0.8
    assert set(row["columns_measured_at"]) == {"xtat", "taso", "pet", "joint"}
