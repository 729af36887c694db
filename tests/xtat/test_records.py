"""The records database: committed per measurement, refuses foreign or corrupt files
with one line, resumes only the same run, exports JSON lines."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from superopt.xtat.records import RecordsDB, RecordsError

W = {"graph": "abc", "model": "resnet18", "batch": None, "hardware": "v4"}
S = {"budget": 10, "seed": 0}


def _fill(path: Path, n: int) -> None:
    with RecordsDB(path, W, S) as db:
        for i in range(n):
            db.add(i, f"c{i % 3}", json.dumps({"fusion": {"k": i % 3}}), 1.0 + i, i, "anneal",
                   "graph", 0.001)


def test_add_count_best_and_reopen(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 5)
    with RecordsDB(p, None) as db:  # another connection sees every commit
        assert db.count() == 5
        best = db.best()
        assert best is not None and best.step == 0 and best.runtime == 1.0
        assert db.config("c1") == {"fusion": {"k": 1}}
        assert [m.step for m in db.measurements()] == [0, 1, 2, 3, 4]


def test_existing_run_needs_resume_and_same_settings(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 2)
    with pytest.raises(RecordsError, match="already holds 2 measurements; pass --resume"):
        RecordsDB(p, W, S)
    with pytest.raises(RecordsError, match="other settings"):
        RecordsDB(p, W, {"budget": 11, "seed": 0}, resume=True)
    # Each difference says what the file holds and what this run asks for.
    with pytest.raises(RecordsError, match=r"\(seed=0 there, unset now\); resume"):
        RecordsDB(p, W, {k: v for k, v in S.items() if k != "seed"}, resume=True)
    RecordsDB(p, W, S, resume=True).close()


def test_foreign_workload_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 1)
    with pytest.raises(RecordsError, match="holds another workload \\(graph, model differ"):
        RecordsDB(p, {**W, "graph": "zzz", "model": "bert-base"}, S, resume=True)


def test_corrupt_and_non_records_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(RecordsError, match="not a records database"):
        RecordsDB(junk, W, S)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(RecordsError, match="not a superopt records database"):
        RecordsDB(other, W, S)
    with pytest.raises(RecordsError, match="is a directory"):
        RecordsDB(tmp_path, W, S)
    with pytest.raises(RecordsError, match="does not exist"):
        RecordsDB(tmp_path / "missing" / "r.sqlite", W, S)
    with pytest.raises(RecordsError, match="no such records database"):
        RecordsDB(tmp_path / "none.sqlite", None)


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 1)
    con = sqlite3.connect(p)
    con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    con.commit()
    con.close()
    with pytest.raises(RecordsError, match="schema version 99"):
        RecordsDB(p, W, S, resume=True)


def test_export_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 3)
    out = tmp_path / "r.jsonl"
    with RecordsDB(p, None) as db:
        assert db.export_jsonl(out) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[2]["config"] == {"fusion": {"k": 2}} and rows[0]["workload"] == W


def test_invalid_runtime_round_trips_as_inf(tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    with RecordsDB(p, W, S) as db:
        db.add(0, "c", "{}", float("inf"), 0, "x", "y", 0.0)
        assert db.measurements()[0].runtime == float("inf")


def test_a_runners_facts_survive_reopening_and_cannot_overwrite_the_records_own(
        tmp_path: Path) -> None:
    p = tmp_path / "r.sqlite"
    _fill(p, 1)
    with RecordsDB(p, W, S, resume=True) as db:
        assert db.get_meta("noise") is None
        db.put_meta("noise", {"aa": 1.01, "aa_ci": [0.99, 1.03]})
        with pytest.raises(RecordsError, match="records' own"):
            db.put_meta("workload", {"graph": "other"})
    with RecordsDB(p, W, S, resume=True) as db:  # still the same workload
        assert db.get_meta("noise") == {"aa": 1.01, "aa_ci": [0.99, 1.03]}
