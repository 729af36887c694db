"""`superopt demo` does the main job: every step ok, and the files it promises exist."""

from __future__ import annotations

from pathlib import Path

import pytest

from superopt.demo import run_demo


@pytest.mark.slow
def test_demo_runs_every_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_demo(tmp_path, tune_budget=12) == 0
    text = capsys.readouterr().out
    assert "REFUTED" in text and "counterexample" in text
    for name in ("rules.json", "rules.rules", "bert_small.onnx", "tune_curve.png"):
        assert (tmp_path / name).stat().st_size > 0, name
