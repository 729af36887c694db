"""Tables and JSON for PET search results (`superopt mutants`, `benchmarks/mutants.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from superopt.ir.analysis import human
from superopt.mutants.search import ModelReport, SubprogramResult


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e6:.1f}us" if s < 1e-3 else f"{s * 1e3:.2f}ms"


def _gain(g: float | None) -> str:
    return "-" if g is None else f"{g:.2f}x"


def rows(report: ModelReport) -> list[list[str]]:
    """One row per subprogram; the mutant columns describe the best kept mutant."""
    out = []
    for s in report.subprograms:
        b = s.best
        row = [s.describe(), str(len(s.sub.sites)), str(s.candidates), str(s.box_tested),
               str(s.full), str(s.partial)]
        if b is None:
            row += ["-"] * 7
        else:
            extra_f = b.extra_flops / b.cost_original.flops if b.cost_original.flops else 0.0
            extra_b = b.extra_bytes / b.cost_original.bytes if b.cost_original.bytes else 0.0
            best = b.family if b.family != "dfs" else f"dfs {b.detail}"
            row += [best, _pct(1 - b.equal_fraction),
                    f"+{human(b.extra_flops)} ({_pct(extra_f)})",
                    f"+{human(b.extra_bytes, 'B')} ({_pct(extra_b)})",
                    f"{_time(b.sim_original)} -> {_time(b.sim_corrected)} "
                    f"({_gain(b.sim_gain)})",
                    f"{_time(b.torch_original)} -> {_time(b.torch_corrected)} "
                    f"({_gain(b.torch_gain)})" if b.torch_original is not None else "-",
                    f"{s.seconds:.1f}"]
        out.append(row)
    return out


COLUMNS = ("subprogram", "sites", "candidates", "box-tested", "full", "partial", "best",
           "wrong", "extra FLOPs", "extra bytes", "simulated (gain)", "torch (gain)", "s")


def table(report: ModelReport) -> Any:
    from rich.table import Table

    t = Table(title=f"PET mutants of {report.model}"
              + (f" (batch {report.batch})" if report.batch else ""))
    for c in COLUMNS:
        t.add_column(c, justify="left" if c in ("subprogram", "best") else "right")
    for r in rows(report):
        t.add_row(*r)
    return t


def totals(report: ModelReport) -> dict[str, Any]:
    subs: tuple[SubprogramResult, ...] = report.subprograms
    evals = sum(r.corrected.report.evaluations for s in subs for r in s.results)
    positions = sum(r.corrected.report.positions for s in subs for r in s.results)
    gains = [r.sim_gain for s in subs for r in s.results[:1] if r.sim_gain is not None]
    return {
        "subprograms": len(subs),
        "candidates": sum(s.candidates for s in subs),
        "box_tested": sum(s.box_tested for s in subs),
        "mutants": sum(len(s.results) for s in subs),
        "fully_equivalent": sum(s.full for s in subs),
        "partially_equivalent": sum(s.partial for s in subs),
        "box_test_evaluations": evals,
        "output_positions_covered": positions,
        "subprograms_faster_on_sim": sum(g > 1.0 for g in gains),
        "best_sim_gain": max(gains, default=None),
        "seconds": round(report.seconds, 2),
    }


def write_json(reports: list[ModelReport], path: str | Path, extra: dict[str, Any] | None = None
               ) -> Path:
    path = Path(path)
    doc = {"reports": [{**r.summary(), "totals": totals(r)} for r in reports], **(extra or {})}
    path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return path
