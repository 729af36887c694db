"""`superopt tune --target cpu` end to end in onnxruntime: a run killed with SIGKILL and
resumed repeats no measurement; replay reads the final comparison back."""

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

from superopt.ir.serialize import save
from xtat.realcases import dense_branches

pytest.importorskip("onnxruntime")

ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "COLUMNS": "160"}


def _query(db: Path, sql: str, *params: object) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def _rows(db: Path) -> list[tuple]:
    return _query(db, "SELECT step, candidate, runtime FROM measurements ORDER BY step")


def _meta(db: Path, key: str) -> str | None:
    got = _query(db, "SELECT value FROM meta WHERE key = ?", key)
    return got[0][0] if got else None


def test_sigkill_and_resume_repeat_no_measurement(tmp_path: Path) -> None:
    model = save(dense_branches(6, width=256, rows=64), tmp_path / "dense.json")
    db = tmp_path / "cpu.sqlite"
    cmd = [sys.executable, "-m", "superopt", "tune", str(model), "--target", "cpu",
           "--op-cost", "flops", "--plan-budget", "0", "--budget", "40", "--rounds", "30",
           "--round", "1", "--db", str(db)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            if db.exists() and len(_rows(db)) >= 3:
                break
        except sqlite3.Error:
            pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    at_kill = _rows(db)
    noise = _meta(db, "noise")
    assert len(at_kill) >= 3 and _meta(db, "final") is None, "the run must be killed mid-way"
    js = tmp_path / "r.json"
    subprocess.run([*cmd, "--resume", "--json", str(js)], env=ENV, check=True,
                   capture_output=True)
    after = _rows(db)
    assert after[:len(at_kill)] == at_kill  # read back, not measured again
    assert [r[0] for r in after] == list(range(len(after)))
    assert len({r[1] for r in after}) == len(after)  # no candidate measured twice
    assert _meta(db, "noise") == noise  # the A/A control was not run again
    summary = json.loads(js.read_text())
    assert summary["replayed"] == len(at_kill)
    assert summary["measured"] == len(after) - len(at_kill)
    assert summary["tuned_s"] <= summary["default_s"] and summary["valid"]
    rp = tmp_path / "replay.json"
    subprocess.run([sys.executable, "-m", "superopt", "tune", "--replay", str(db), "--json",
                    str(rp)], env=ENV, check=True, capture_output=True)
    assert _rows(db) == after
    assert json.loads(rp.read_text())["default_s"] == summary["default_s"]
