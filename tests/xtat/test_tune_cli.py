"""`superopt tune` end to end: a run, bad input as one-line errors (exit 2), SIGKILL and
resume losing and repeating nothing, replay without measuring."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from superopt.cli import main

ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "COLUMNS": "160"}


def _rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT step, candidate, runtime, noise_seed FROM measurements "
                           "ORDER BY step").fetchall()
    finally:
        con.close()


def test_tune_run_writes_db_json_graph_and_plot(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db, js, out, png = (tmp_path / n for n in ("r.sqlite", "r.json", "g.json", "c.png"))
    rc = main(["tune", "resnet18", "--budget", "30", "--db", str(db), "--json", str(js),
               "--out", str(out), "--plot", str(png), "--seed", "1"])
    assert rc == 0
    summary = json.loads(js.read_text())
    assert summary["evaluations"] == 30 and summary["valid"] is True
    assert summary["tuned_s"] <= summary["default_s"]
    assert len(_rows(db)) == 30
    assert out.exists() and png.stat().st_size > 1000
    text = capsys.readouterr().out
    assert "per pass" in text and "speedup" in text


@pytest.mark.parametrize("argv, message", [
    (["tune", "resnet18", "--passes", "fusion,tile,bogus"], "unknown pass 'bogus'"),
    (["tune", "resnet18", "--strategy", "greedy"], "unknown strategy 'greedy'"),
    (["tune", "resnet18", "--budget", "0"], "--budget must be >= 1"),
    (["tune", "no_such_model"], "no_such_model"),
    (["tune", "resnet18", "--workers", "0"], "--workers must be >= 1"),
    (["tune", "resnet18", "--target", "torch-cpu", "--threads", "0"], "--threads must be >= 1"),
    (["tune", "resnet18", "--resume"], "--resume needs --db"),
    (["tune"], "needs MODEL_OR_FILE"),
    (["tune", "resnet18", "--default", "xla2"], "unknown default tiling 'xla2'"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_corrupt_foreign_and_used_databases(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x00garbage" * 500)
    assert main(["tune", "resnet18", "--budget", "5", "--db", str(junk)]) == 2
    assert "not a records database" in capsys.readouterr().err
    db = tmp_path / "r.sqlite"
    assert main(["tune", "squeezenet", "--budget", "5", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["tune", "resnet18", "--budget", "5", "--db", str(db), "--resume"]) == 2
    assert "holds another workload" in capsys.readouterr().err
    assert main(["tune", "squeezenet", "--budget", "5", "--db", str(db)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["tune", "--replay", str(junk)]) == 2
    assert main(["tune", "squeezenet", "--out", str(tmp_path / "no" / "x.json")]) == 2


def _tune_cmd(db: Path, budget: int) -> list[str]:
    return [sys.executable, "-m", "superopt", "tune", "resnet18", "--budget", str(budget),
            "--db", str(db), "--seed", "3", "--round", "4"]


def test_sigkill_and_resume_lose_and_repeat_nothing(tmp_path: Path) -> None:
    budget = 200  # killed at 60 rows: mid-way
    whole = tmp_path / "whole.sqlite"
    subprocess.run(_tune_cmd(whole, budget), env=ENV, check=True, capture_output=True)
    killed = tmp_path / "killed.sqlite"
    proc = subprocess.Popen(_tune_cmd(killed, budget), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    n = 0
    while time.time() < deadline:
        if killed.exists():
            try:
                n = len(_rows(killed))
            except sqlite3.Error:
                n = 0
            if n >= 60:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = len(_rows(killed))
    assert 0 < at_kill < budget, "the run must be killed mid-way"
    subprocess.run([*_tune_cmd(killed, budget), "--resume"], env=ENV, check=True,
                   capture_output=True)
    assert _rows(killed) == _rows(whole)  # same steps, candidates, times: nothing repeated


def test_replay_rebuilds_the_best_without_measuring(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    assert main(["tune", "squeezenet", "--budget", "25", "--db", str(db)]) == 0
    before = _rows(db)
    capsys.readouterr()
    jl = tmp_path / "r.jsonl"
    js = tmp_path / "replay.json"
    assert main(["tune", "--replay", str(db), "--export", str(jl), "--json", str(js)]) == 0
    assert _rows(db) == before
    assert len(jl.read_text().splitlines()) == 25
    got = json.loads(js.read_text())
    best = min(r[2] for r in before)
    assert got["measured_s"] == best and got["tuned_s"] <= got["default_s"]


def test_worker_processes_measure_what_the_driver_would(tmp_path: Path) -> None:
    # The same run measured here and on two spawned workers records the same rows.
    here, pool = tmp_path / "here.sqlite", tmp_path / "pool.sqlite"
    assert main(["tune", "squeezenet", "--budget", "24", "--db", str(here), "--seed", "5",
                 "--no-check"]) == 0
    assert main(["tune", "squeezenet", "--budget", "24", "--db", str(pool), "--seed", "5",
                 "--no-check", "--workers", "2"]) == 0
    assert _rows(here) == _rows(pool)


def test_strategy_help_lists_every_registered_strategy(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The help is built from the catalogue, the catalogue's modules are what registers
    # strategies: every strategy `create` knows is listed, and only those.
    from superopt.xtat.strategies import CATALOGUE, STRATEGIES, create

    create("random")  # imports every strategy module
    assert sorted(STRATEGIES) == sorted(CATALOGUE)
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.rindex("--strategy STRATEGY")  # its entry, after the usage line
    entry = text[start:text.index("--budget BUDGET", start)]
    for name in STRATEGIES:
        assert f" {name} (" in entry, name


def test_interrupted_tuning_exits_130_with_its_records_and_no_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The tuner turns Ctrl-C into a result stopped 'interrupted'; the command must then end
    # with 130 at once, not report and exit 0 when the report beats the watcher's timer.
    import dataclasses

    from superopt.xtat import command

    search = command._search

    def interrupted_search(*a: object, **k: object) -> object:
        return dataclasses.replace(search(*a, **k), stopped="interrupted")

    monkeypatch.setattr(command, "_search", interrupted_search)
    db, js = tmp_path / "r.sqlite", tmp_path / "t.json"
    assert main(["tune", "squeezenet", "--budget", "6", "--db", str(db),
                 "--json", str(js)]) == 130
    assert capsys.readouterr().err.strip() == "superopt: interrupted"
    assert len(_rows(db)) == 6 and not js.exists()
