"""Benchmark speedups come from exact times: the search benchmark reports the best
measured candidate's noise-free time over the default's, never the best of many noisy
measurements over one noisy measurement of the default (biased upward by the noise)."""

from __future__ import annotations

import pytest

from bench_modules import load_benchmark


def _module(name: str):
    return load_benchmark(name)


def test_search_speedups_are_exact_times_of_the_measured_best() -> None:
    from superopt.xtat.session import open_session

    search = _module("search")
    r = search.search("synthetic:30", "random", 0, 24, None)
    s = open_session({"model": "synthetic:30", "batch": None})
    exact_default = s.runner.time(s.default)
    assert r["default_exact"] == exact_default
    # The measured times carry the simulator's noise: a ratio of them is not the figure.
    assert r["default"] != exact_default
    assert r["curve"][0] == 1.0
    assert r["curve"][-1] == exact_default / r["best_exact"]
    assert len(r["curve"]) == r["measurements"]
    # The curve never counts a noisy minimum: each point is an exact time, and the best
    # measured candidate can be slower in exact time than one found earlier.
    assert all(c > 0 for c in r["curve"])


def test_eqsat_reaches_backtracking_at_the_first_graph_as_fast() -> None:
    """`reached_backtracking_s`: the first time on the anytime curve whose cost is at most
    backtracking's (up to the pricing's 1e-9), never a later one, None if never."""
    eqsat = _module("eqsat")
    curve = ((0.0, 10.0), (1.5, 8.0), (2.0, 7.5), (9.0, 7.0))
    assert eqsat._reached(curve, 8.0) == 1.5
    assert eqsat._reached(curve, 8.0 * (1 - 1e-12)) == 1.5  # within the pricing's noise
    assert eqsat._reached(curve, 7.9) == 2.0
    assert eqsat._reached(curve, 10.0) == 0.0  # backtracking found nothing better
    assert eqsat._reached(curve, 6.9) is None


def test_eqsat_benchmark_refuses_a_family_without_a_published_size(monkeypatch, capsys) -> None:
    eqsat = _module("eqsat")
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--hf", "bert,nosuch", "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit) as e:
        eqsat.main()
    assert e.value.code == 2
    assert "'nosuch'" in capsys.readouterr().err  # the unknown family named


def test_eqsat_benchmark_refuses_an_unknown_small_family(monkeypatch, capsys) -> None:
    eqsat = _module("eqsat")
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--hf-small", "llama,nosuch",
                                     "--out", "/nonexistent/x"])
    with pytest.raises(SystemExit) as e:
        eqsat.main()
    assert e.value.code == 2
    assert "'nosuch'" in capsys.readouterr().err


def test_eqsat_benchmark_loads_a_small_family_as_optimize_does() -> None:
    """`hf-small:FAMILY` rows are the graph `superopt optimize hf:FAMILY` imports, not the
    published-size file `hf:FAMILY` rows read."""
    from superopt import api

    eqsat = _module("eqsat")
    got = eqsat._load("hf-small:gpt2", None)
    want = api.load("hf:gpt2")
    assert len(got) == len(want) and [n.op for n in got.nodes] == [n.op for n in want.nodes]


def test_eqsat_benchmark_writes_a_row_and_its_summary(monkeypatch, tmp_path) -> None:
    """One small model end to end: the JSON is written (its settings included) with both
    searches' columns, and the summary counts the row."""
    import json

    eqsat = _module("eqsat")
    out = tmp_path / "eqsat.json"
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--models", "squeezenet", "--budget", "2",
                                     "--out", str(out)])
    eqsat.main()
    doc = json.loads(out.read_text())
    assert doc["settings"]["workdir"] and doc["summary"]["models"] == 1
    (row,) = doc["models"]
    assert row["model"] == "squeezenet"
    for side in ("backtracking", "eqsat_greedy", "eqsat_ilp"):
        assert row[side]["sim_s"] <= row["sim_input_s"]  # never slower than the input
    assert row["eqsat_ilp"]["values_ok"] is True


def test_an_interrupted_backtracking_search_writes_no_row(monkeypatch, tmp_path) -> None:
    """On Ctrl-C the backtracking search hands back its best graph so far
    (`stopped="interrupted"`): the benchmark must stop with exit 130 and keep no row for
    that model, not record it as a finished search."""
    from types import SimpleNamespace

    import superopt.rewrite

    eqsat = _module("eqsat")
    monkeypatch.setattr(superopt.rewrite, "optimize",
                        lambda g, *a, **k: SimpleNamespace(graph=g, stopped="interrupted"))
    out = tmp_path / "eqsat.json"
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--models", "squeezenet", "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        eqsat.main()
    assert e.value.code == 130 and not out.exists()


def test_an_eqsat_search_whose_local_moves_were_interrupted_writes_no_row(
        monkeypatch, tmp_path) -> None:
    """Ctrl-C during eqsat's local moves hands back their best graph so far
    (`interrupted`): not a finished row either (the backtracking columns are reused)."""
    from dataclasses import replace

    import superopt.rewrite.eqsat as E

    eqsat = _module("eqsat")
    real = E.eqsat_optimize
    monkeypatch.setattr(E, "eqsat_optimize",
                        lambda *a, **k: replace(real(*a, **k), interrupted=True))
    bt = tmp_path / "bt.json"
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--models", "squeezenet", "--budget", "2",
                                     "--phase", "backtracking", "--out", str(bt)])
    eqsat.main()
    out = tmp_path / "eqsat.json"
    monkeypatch.setattr("sys.argv", ["eqsat.py", "--models", "squeezenet", "--phase", "eqsat",
                                     "--backtracking-from", str(bt), "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        eqsat.main()
    assert e.value.code == 130 and not out.exists()


def _interrupted_search(monkeypatch) -> None:
    """Every backtracking search (`superopt.rewrite.optimize`, `superopt.optimize`) as
    Ctrl-C leaves it: its input handed back as its best graph so far."""
    from types import SimpleNamespace

    import superopt
    import superopt.rewrite

    def stopped(g, *a, **k):
        return SimpleNamespace(graph=g, stopped="interrupted", applied={})

    monkeypatch.setattr(superopt.rewrite, "optimize", stopped)
    monkeypatch.setattr(superopt, "optimize", stopped)


@pytest.mark.parametrize("bench,argv", [
    ("optimize", ["--models", "squeezenet", "--cost", "flops", "--nodes", ""]),
    ("peers", ["--models", "squeezenet", "--no-compile"]),
])
def test_benchmarks_keep_no_row_from_an_interrupted_search(bench, argv, monkeypatch,
                                                           tmp_path) -> None:
    """optimize.py and peers.py time the search's graph: from an interrupted search they
    stop with exit 130 and write no row (they did time and record it as a result)."""
    module = _module(bench)
    _interrupted_search(monkeypatch)
    out = tmp_path / f"{bench}.json"
    monkeypatch.setattr("sys.argv", [f"{bench}.py", *argv, "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        module.main()
    assert e.value.code == 130 and not out.exists()


def test_joints_taso_column_is_not_taken_from_an_interrupted_search(monkeypatch) -> None:
    from superopt import zoo

    joint = _module("joint")
    _interrupted_search(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        joint.taso_only(zoo.build("squeezenet"), budget=2)


def test_tune_cpu_tells_ctrl_c_from_its_row_limit(monkeypatch, tmp_path) -> None:
    """tune_cpu.py stops a row's tuning at --row-limit by interrupting the tuner, which
    then picks from what it measured: that row is recorded. A Ctrl-C interrupts it the
    same way; that row is not finished, and the run stops with exit 130."""
    import argparse
    from pathlib import Path
    from types import SimpleNamespace

    from superopt.xtat.tuner import Tuner

    tune_cpu = _module("tune_cpu")
    args = argparse.Namespace(threads=1, op_cost="flops", cost_db=tmp_path / "c.jsonl",
                              rounds=1, full_rounds=False, plan_budget=0, budget=4,
                              row_limit=0.0, workdir=tmp_path)
    got = tune_cpu._tune("squeezenet", 1, args, Path(tmp_path))  # the limit: a row
    assert got["tuned"] is not None
    monkeypatch.setattr(Tuner, "run", lambda self, *a, **k: SimpleNamespace(
        stopped="interrupted"))
    args.row_limit = 60.0
    (tmp_path / "again").mkdir()
    with pytest.raises(KeyboardInterrupt):
        tune_cpu._tune("squeezenet", 1, args, Path(tmp_path / "again"))

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_cpu, "run_row", ctrl_c)
    out = tmp_path / "rows.json"
    monkeypatch.setattr("sys.argv", ["tune_cpu.py", "--models", "squeezenet", "--batches", "1",
                                     "--workdir", str(tmp_path), "--out", str(out)])
    with pytest.raises(SystemExit) as e:
        tune_cpu.main()
    assert e.value.code == 130
