"""`superopt simulate`: summary and top-kernel tables, JSON results, roofline plot, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from superopt.cli import main
from superopt.ir import GraphBuilder, save


def test_simulate_prints_tables_and_writes_json_and_plot(tmp_path: Path, capsys) -> None:
    out, png = tmp_path / "r18.json", tmp_path / "plots" / "r18.png"
    png.parent.mkdir()  # output folders must exist (issue 16: fail before the work)
    assert main(["simulate", "resnet18", "--json", str(out), "--plot", str(png),
                 "--top", "3"]) == 0
    text = capsys.readouterr().out
    for needle in ("simulated time", "roofline lower bound", "% of peak", "top 3 kernels",
                   "conv2d"):
        assert needle in text
    data = json.loads(out.read_text())
    assert data["model"] == "resnet18" and data["hardware"] == "v4" and data["valid"]
    assert len(data["per_kernel"]) == data["kernels"] > 5
    assert abs(data["time_s"] - sum(k["time_s"] for k in data["per_kernel"])) < 1e-12
    assert data["roofline_s"] <= data["time_s"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_a_saved_graph_on_another_preset(tmp_path: Path, capsys) -> None:
    b = GraphBuilder("small")
    x = b.input("x", (4, 256))
    w = b.weight("w", (256, 512), data=np.random.default_rng(0).standard_normal((256, 512)))
    path = save(b.build([b.relu(b.matmul(x, w))]), tmp_path / "small.json")
    out = tmp_path / "v5e.json"
    assert main(["simulate", str(path), "--hardware", "v5e", "--json", str(out)]) == 0
    assert "v5e" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["hardware"] == "v5e" and data["nodes"] == 4 and data["kernels"] == 1


def test_simulate_errors_are_one_line(tmp_path: Path) -> None:
    for args, needle in ((["simulate", "resnet18", "--hardware", "v9"], "unknown hardware"),
                         (["simulate", "no_such_model"], "unknown model")):
        r = subprocess.run([sys.executable, "-m", "superopt", *args], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 2
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0]


def test_simulate_help() -> None:
    r = subprocess.run([sys.executable, "-m", "superopt", "simulate", "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--hardware" in r.stdout and "--plot" in r.stdout
