"""tools/tuning_phases.py: a run's records split into the schedule's phases, budget and gain.

The figure in docs/tuning.md is drawn from these spans, so their bookkeeping is checked on
hand-made records: phases that measured nothing leave no run, a recurring phase is
numbered, and what follows the schedule's first pass is one "again" span.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from superopt.xtat.records import Measurement
from superopt.xtat.tuner import make_schedule

TOOL = Path(__file__).resolve().parent.parent / "tools" / "tuning_phases.py"


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tuning_phases", TOOL)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("tuning_phases", mod)
    spec.loader.exec_module(mod)
    return mod


def _records(phases: list[tuple[str, list[float]]]) -> list[Measurement]:
    out = [Measurement(0, "c0", 100.0, 0, "default", "default", 0.0)]
    for phase, times in phases:
        for t in times:
            out.append(Measurement(len(out), f"c{len(out)}", t, 0, "s", phase, 0.0))
    return out


def test_phases_follow_the_schedule_and_the_rest_is_one_span(tool: ModuleType) -> None:
    names = [ph.name for ph in make_schedule("joint")]
    assert names[:4] == ["plan", "tiling", "flags", "layout+fusion"]
    # The rewrite phase and the second tiling/flags measure nothing here; then the
    # schedule starts again at the plan.
    measured = _records([("plan", [90.0]), ("tiling", [95.0, 80.0]), ("flags", [79.0]),
                         ("layout+fusion", [85.0, 81.0]), ("tiling", [78.0]),
                         ("plan+rewrite", [77.0, 90.0]), ("plan", [76.0]),
                         ("layout+fusion", [75.0])])
    default, spans = tool.spans(measured, names)
    assert default == 100.0
    assert [s.label for s in spans] == ["plan", "tiling", "flags", "layout+fusion",
                                        "tiling 2", "plan+rewrite", "again"]
    assert [s.measurements for s in spans] == [1, 2, 1, 2, 1, 2, 2]
    assert [s.first_step for s in spans] == [1, 2, 4, 5, 7, 8, 10]
    gains = [round(s.gain(default), 6) for s in spans]
    assert gains == [10.0, 10.0, 1.0, 0.0, 1.0, 1.0, 2.0]
    assert sum(gains) == pytest.approx(100.0 - 75.0)


def test_an_exact_pick_replaces_the_measured_gain(tool: ModuleType) -> None:
    span = tool.PhaseSpan("tiling", "tiling", "parallel", 2, 12, 95.0, 80.0, 99.0, 90.0)
    assert span.gain(100.0) == pytest.approx(9.0)
    measured_only = tool.PhaseSpan("tiling", "tiling", "parallel", 2, 12, 95.0, 80.0)
    assert measured_only.gain(100.0) == pytest.approx(15.0)


def test_records_without_the_default_first_are_refused(tool: ModuleType) -> None:
    measured = _records([("plan", [90.0])])[1:]
    with pytest.raises(SystemExit):
        tool.spans(measured, ["plan"])
