"""The transformers sweep judges the importer only where the family was built and exported:
its outcomes, its count of verdicts, and a family it runs end to end."""

from __future__ import annotations

import pytest

from bench_modules import load_benchmark


def _module():
    return load_benchmark("hf_sweep")


def test_summary_counts_only_import_verdicts() -> None:
    rows = {"a": {"status": "ok", "rel_err": 1e-7}, "b": {"status": "import", "why": "x"},
            "c": {"status": "config", "why": "y"}, "d": {"status": "export", "why": "z"},
            "e": {"status": "values", "rel_err": 0.2, "program_vs_eager": 0.3},
            "f": {"status": "ok", "rel_err": 2e-7, "program_vs_eager": 0.0}}
    s = _module().summarize(rows)
    assert s["families"] == 6 and s["judged"] == 4  # config and export are no verdicts
    assert s["counts"] == {"ok": 2, "import": 1, "config": 1, "export": 1, "values": 1}
    assert s["imported_share_of_judged"] == 0.5 and s["export_not_faithful"] == ["e"]


def test_a_family_runs_end_to_end() -> None:
    pytest.importorskip("transformers")
    row = _module().one("llama", 1e-4)
    assert row["status"] == "ok" and row["rel_err"] < 1e-5 and row["nodes"] > 50
    assert row["program_vs_eager"] < 1e-5
    assert _module().one("no-such-family", 1e-4)["status"] == "config"
