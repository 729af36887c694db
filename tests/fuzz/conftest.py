"""Fuzz tests: the helpers module on the path, seed files once per session, and the
session's counts in the terminal summary (cases run, tracebacks, hangs, silent accepts)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_corpus import TALLY, records_db, seed_files


@pytest.fixture(scope="session")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fuzz_seeds")
    files = seed_files(folder)
    files["records"] = records_db(folder)
    return files


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.cases or TALLY.cli_runs:
        terminalreporter.write_line(
            f"fuzz: {TALLY.cases} reader cases, {TALLY.cli_runs} CLI runs "
            f"({TALLY.rejected} clean one-line rejections); tracebacks {TALLY.tracebacks}, "
            f"hangs {TALLY.hangs}, silent accepts {TALLY.silent_accepts}, outputs left by "
            f"failed runs {TALLY.left_outputs}")
