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
    # The batch (64 rows) is offered in chunks; the summary names the result's count.
    assert "chunk" in {p for s in summary["phases"] for p in s[0].split("+")}
    assert summary["chunks"] == next(iter(summary["candidate"]["chunk"].values()), 1)
    rp = tmp_path / "replay.json"
    subprocess.run([sys.executable, "-m", "superopt", "tune", "--replay", str(db), "--json",
                    str(rp)], env=ENV, check=True, capture_output=True)
    assert _rows(db) == after
    assert json.loads(rp.read_text())["default_s"] == summary["default_s"]


def test_measured_op_costs_are_kept_beside_the_records_for_the_resume(tmp_path: Path) -> None:
    # Without --cost-db the op costs were measured afresh on --resume; their noise
    # reordered the plan phase's options and screened other proposals, and the resume
    # was refused ("the database belongs to another run"). Resuming a finished run must
    # propose every recorded candidate again, in order, from the kept costs.
    model = save(dense_branches(4, width=128, rows=32), tmp_path / "dense.json")
    db = tmp_path / "cpu.sqlite"
    costs = tmp_path / "cpu.sqlite.opcosts.jsonl"
    cmd = [sys.executable, "-m", "superopt", "tune", str(model), "--target", "cpu",
           "--budget", "6", "--rounds", "6", "--db", str(db)]
    first = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert first.returncode == 0, first.stdout + first.stderr
    rows = _rows(db)
    kept = costs.read_text().splitlines()
    assert kept and all(json.loads(line)["s"] >= 0 for line in kept)
    js = tmp_path / "again.json"
    again = subprocess.run([*cmd, "--resume", "--json", str(js)], env=ENV,
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _rows(db) == rows
    summary = json.loads(js.read_text())
    assert summary["replayed"] == len(rows) and summary["measured"] == 0
    assert costs.read_text().splitlines() == kept  # every op priced from the file


def _onnx_file(path: Path, op: str, name: str = "x") -> Path:
    """A one-node ONNX model y = OP(x, x) on a (4, 8) float input named `name`."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node(op, [name, name], ["y"])], "one",
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))
    return path


def test_the_timer_runs_a_graph_as_the_file_it_came_from(tmp_path: Path) -> None:
    import numpy as np

    from superopt.importers.onnx import import_onnx
    from superopt.xtat.realrunner import OrtTimer

    graph = import_onnx(_onnx_file(tmp_path / "add.onnx", "Add"))
    timer = OrtTimer()
    doubled = timer.outputs(graph)[0]
    # Another file with the same input: from now on the graph runs as that file (a Mul,
    # so x * x, not x + x, comes back: the file ran, not the graph's export).
    assert timer.use_file(graph, _onnx_file(tmp_path / "mul.onnx", "Mul"))
    squared = timer.outputs(graph)[0]
    x = doubled / 2
    np.testing.assert_allclose(squared, x * x, rtol=1e-6)
    # The file against superopt's export of the graph, in paired rounds; a graph with no
    # file has nothing to compare.
    t = timer.export_vs_file(graph, 3, 1)
    assert t is not None and len(t.times) == 3 and all(len(x) == 3 for x in t.times)
    assert OrtTimer().export_vs_file(graph, 3, 1) is None
    # A file whose input is named otherwise is not used.
    assert not OrtTimer().use_file(graph, _onnx_file(tmp_path / "z.onnx", "Mul", "z"))


def test_tune_keeps_the_users_onnx_file_when_nothing_beats_it(tmp_path: Path) -> None:
    from superopt.xtat.realrunner import FINAL_ROUNDS

    model = _onnx_file(tmp_path / "add.onnx", "Add")
    out, js, db = tmp_path / "out.onnx", tmp_path / "r.json", tmp_path / "db.sqlite"
    got = subprocess.run([sys.executable, "-m", "superopt", "tune", str(model), "--target",
                          "cpu", "--op-cost", "flops", "--plan-budget", "0", "--budget", "3",
                          "--rounds", "4", "--out", str(out), "--json", str(js), "--db",
                          str(db)], env=ENV, capture_output=True, text=True, check=False)
    assert got.returncode == 0, got.stderr
    summary = json.loads(js.read_text())
    assert summary["input_file"].startswith("add.onnx:")
    # superopt's export of the kept input was compared with the file; unless it measured
    # faster (one Add either way: noise), the result is the user's file, not a re-export.
    export = summary["export_vs_file"]
    assert export is not None and export["rounds"] == FINAL_ROUNDS
    assert (out.read_bytes() == model.read_bytes()) is not export["kept"]
    # The replay writes what the run wrote, without measuring.
    again = tmp_path / "again.onnx"
    got = subprocess.run([sys.executable, "-m", "superopt", "tune", "--replay", str(db),
                          "--out", str(again)], env=ENV, capture_output=True, text=True,
                         check=False)
    assert got.returncode == 0, got.stderr
    assert again.read_bytes() == out.read_bytes()
