"""An installed package carries the simulator's data: `pip install .` of a copy of the working
tree into a fresh venv outside the repository, then `superopt simulate resnet50` and
`benchmarks/calibrate.py --no-fit` run there and read the package's own calibration record
and TpuGraphs samples (nothing beside a checkout).

It builds and installs a wheel (about 20 s). No download: the fresh venv reaches the
dependencies already installed in the project's venv through a path entry (a `.pth` line),
and pip installs with `--no-deps --no-build-isolation`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600
         ) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                       check=False)
    assert p.returncode == 0, f"{' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _tree_copy(dest: Path) -> None:
    """The files a clone of the working tree has: tracked and untracked-but-not-ignored."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def test_pip_install_outside_the_repository_simulates_and_calibrates(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to copy")
    tree, venv, work = tmp_path / "tree", tmp_path / "venv", tmp_path / "work"
    tree.mkdir()
    work.mkdir()
    _tree_copy(tree)
    assert not (tree / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"  # never download
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], work, env)
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     work, env).stdout.strip())
    # Dependencies (numpy, torch, setuptools, ...) from the project's venv, as a plain path:
    # its .pth files (the editable install of src/) are not processed from there.
    (site / "project_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
          "--no-build-isolation", str(tree)], work, env)

    where = _run([str(py), "-c", "import superopt; print(superopt.__file__)"], work, env)
    pkg = Path(where.stdout.strip()).parent
    assert pkg.is_relative_to(venv), where.stdout
    # The samples travel with their source and license note.
    assert "Apache License" in (pkg / "tpu_sim" / "data" / "README.md").read_text()

    sim = _run([str(venv / "bin" / "superopt"), "simulate", "resnet50"], work, env)
    assert "conv2d" in sim.stdout

    out = work / "calibrate.json"
    _run([str(py), str(tree / "benchmarks" / "calibrate.py"), "--no-fit", "--out", str(out)],
         work, env)
    got = json.loads(out.read_text())
    assert got["fitted"] is False
    assert got["data"]["directory"].startswith("superopt.tpu_sim/data")
    assert {f for f in got["data"]["files"]} == {"op_tuning_data.json",
                                                 "module_tuning_data_layout.json"}
    assert len(got["after"]["kernels"]) == 8
