"""The `superopt` command line: show, run, errors as one line with a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from superopt.cli import main
from superopt.ir import GraphBuilder, save


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "superopt", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture()
def small_graph(tmp_path: Path) -> Path:
    b = GraphBuilder("small")
    x = b.input("x", (2, 3, 8, 8))
    w = b.weight("w", (4, 3, 3, 3), data=np.random.default_rng(0).standard_normal((4, 3, 3, 3)))
    y = b.pool2d_max(b.conv2d(x, w, padding="same", activation="relu"), kernel=(2, 2), stride=(2, 2))
    return save(b.build([y]), tmp_path / "small.json")


def test_show_prints_summary(small_graph: Path, capsys) -> None:
    assert main(["show", str(small_graph)]) == 0
    out = capsys.readouterr().out
    assert "parameters" in out and "108" in out  # 4*3*3*3 weights
    # conv MACs: 2*4*8*8 outputs * 27 = 13,824
    assert "13,824" in out
    assert "pool2d_max" in out


def test_show_text(small_graph: Path, capsys) -> None:
    assert main(["show", str(small_graph), "--text"]) == 0
    out = capsys.readouterr().out
    assert "conv2d(%0, %1)" in out and "return" in out


def test_run_checks_values_against_reference(small_graph: Path, capsys) -> None:
    assert main(["run", str(small_graph), "--backend", "torch", "--repeats", "2"]) == 0
    out = capsys.readouterr().out
    assert "match" in out


@pytest.mark.parametrize("args,needle", [
    (["show", "no_such_model"], "unknown model"),
    (["show", "missing.json"], "missing.json"),
    (["show", "missing.onnx"], "missing.onnx"),
])
def test_bad_input_is_one_line_and_nonzero(args: list[str], needle: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "superopt", *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("superopt: error:"), r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


def test_corrupt_files_are_reported(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.onnx").write_bytes(b"\x00\x01garbage" * 10)
    for name in ("bad.json", "bad.onnx"):
        r = subprocess.run([sys.executable, "-m", "superopt", "show", name], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 2
        assert r.stderr.count("\n") == 1 and name in r.stderr and "Traceback" not in r.stderr


def test_help_everywhere() -> None:
    for cmd in ([], ["show"], ["run"], ["demo"]):
        r = _cli(*cmd, "--help")
        assert r.returncode == 0 and "usage: superopt" in r.stdout


def test_generate_uses_every_core_by_default() -> None:
    """`superopt generate` runs one enumeration worker per core unless told otherwise (it
    ran as one process, so the README's 2-worker figure was not what a user got)."""
    from superopt.cli import build_parser

    args = build_parser().parse_args(["generate", "--preset", "taso", "--max-ops", "2"])
    assert args.workers == 0  # 0 resolves to os.cpu_count() in the command
    args = build_parser().parse_args(["generate", "--workers", "1"])
    assert args.workers == 1
