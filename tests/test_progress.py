"""Progress when stdout is a pipe (issue 16, item 5): rich draws nothing live there, so
long commands print a plain line every few seconds with what the live display holds."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from superopt.progress import flatten

RULES = Path(__file__).parents[1] / "benchmarks" / "data" / "tensat_taso_rules.txt"


def test_a_progress_bar_flattens_to_one_plain_line() -> None:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    progress.add_task("verifying rules", total=931, completed=17)
    line = flatten(progress.get_renderable())
    assert line == "verifying rules 17/931"


def _counted(line: str) -> bool:
    """A line that says where the work is (a task with its count), not only that it runs."""
    return re.search(r"\d+ ?/ ?(\d+|\?)( |$)|\d+%", line) is not None  # 3/931, 12 / 300, 93%


def _progress_lines(argv: list[str], want: int, limit_s: float) -> list[str]:
    """The command's progress lines (stdout a pipe) until `want` of them came, the last
    with a count (a loaded machine may take seconds to start); then stop it."""
    env = {**os.environ, "SUPEROPT_PROGRESS_S": "0.5", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "superopt", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines: list[str] = []
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + limit_s
    try:
        while not (len(lines) >= want and _counted(lines[-1])) and \
                time.monotonic() < deadline:
            if not sel.select(timeout=0.5):
                continue
            raw = proc.stdout.readline()
            if not raw:
                break
            text = raw.decode(errors="replace").rstrip("\n")
            if text.startswith(f"[superopt {argv[0]} "):
                lines.append(text)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    return lines


def test_verify_prints_progress_lines_into_a_pipe() -> None:
    lines = _progress_lines(["verify", str(RULES), "--jobs", "1"], want=3, limit_s=90)
    assert len(lines) >= 3 and _counted(lines[-1]), lines
    from superopt.verifier.axioms import builtin_axioms

    # Axioms are validated first (every built-in one), then the 931 rules are verified.
    totals = (f"/{len(builtin_axioms())} ", "/931 ")
    assert any(t in lines[-1] for t in totals), (totals, lines)


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["generate", "--max-ops", "3", "--out", "{tmp}/g.json"],
    ["optimize", "resnet50", "--repeats", "0", "--out", "{tmp}/o.json"],
    ["tune", "squeezenet", "--budget", "3000"],
    ["mutants", "resnet18", "--out", "{tmp}/m.json"],
])
def test_long_commands_print_progress_lines_into_a_pipe(argv: list[str], tmp_path: Path
                                                        ) -> None:
    args = [a.format(tmp=tmp_path) for a in argv]
    lines = _progress_lines(args, want=3, limit_s=120)
    assert len(lines) >= 3 and _counted(lines[-1]), lines
