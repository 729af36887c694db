"""Kernels the simulator was not fitted to, built by hand in the TpuGraphs format: XLA's forms
of a dense layer (a convolution without spatial dims) and of layout-changing copies (into and
out of permuted minor-to-major orders). They must import, replay with tile spaces over the
physical dims XLA's bounds use (the default-like configurations valid), and a data file with
an unsupported kernel must calibrate without it instead of stopping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.replay import TileKernel, TileRow, data_dir, prepare_all

REPO = Path(__file__).resolve().parents[2]


# ---- kernels in the TpuGraphs format -----------------------------------------------------------

def shape(etype: str, dims: tuple[int, ...], m2m: list[int] | None = None) -> dict[str, Any]:
    return {"type": etype, "dims": list(dims),
            "minor_to_major": m2m if m2m is not None else list(range(len(dims) - 1, -1, -1))}


def module(name: str, instructions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "entry_computation_id": 0, "computations": [
        {"id": 0, "name": name, "root_id": instructions[-1]["id"],
         "instructions": instructions}]}


def param(i: int, s: dict[str, Any]) -> dict[str, Any]:
    return {"id": i + 1, "name": f"parameter.{i}", "opcode": "parameter", "shape": s,
            "operand_ids": [], "parameter_number": i}


def copy_module(name: str, dims: tuple[int, ...], src: list[int], dst: list[int],
                etype: str = "f32") -> dict[str, Any]:
    return module(name, [param(0, shape(etype, dims, src)),
                         {"id": 2, "name": name, "opcode": "copy",
                          "shape": shape(etype, dims, dst), "operand_ids": [1]}])


DENSE_WGRAD = {"input_batch_dimension": 1, "input_feature_dimension": 0,
               "input_spatial_dimensions": [], "kernel_input_feature_dimension": 0,
               "kernel_output_feature_dimension": 1, "kernel_spatial_dimensions": [],
               "output_batch_dimension": 0, "output_feature_dimension": 1,
               "output_spatial_dimensions": []}


def fc_module(name: str = "fusion.fc") -> dict[str, Any]:
    """The issue's dense layer: f32[4096,1000] from [32,4096] x [32,1000], contracting both
    operands over their dim 0 (a dense layer's weight gradient)."""
    return module(name, [param(0, shape("f32", (32, 4096))), param(1, shape("f32", (32, 1000))),
                         {"id": 3, "name": name, "opcode": "convolution",
                          "shape": shape("f32", (4096, 1000)), "operand_ids": [1, 2],
                          "window": [], "convolution_dimension_numbers": DENSE_WGRAD,
                          "feature_group_count": 1, "batch_group_count": 1}])


def kernel(mod: dict[str, Any], rows: list[tuple[list[int], list[int]]]) -> TileKernel:
    """Rows with made-up times (1, 2, 3 ... us): for tile spaces and validity, not timing."""
    return TileKernel(mod["name"], mod, tuple(
        TileRow(Bounds(tuple(ob), tuple(kb)), 1e-6 * (i + 1), i == 0, False)
        for i, (ob, kb) in enumerate(rows)))


def entry(mod: dict[str, Any], rows: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """A kernel as `op_tuning_data.json` lists it."""
    return {**mod, "configs": [{"output_bounds": ob, "kernel_bounds": kb, "is_default": i == 0,
                                "error": False, "compute_time_ns": 1000.0 * (i + 1)}
                               for i, (ob, kb) in enumerate(rows)]}


# ---- a data file with kernels the importer lacks ---------------------------------------------

def test_calibrate_reports_a_kernel_it_cannot_import_and_replays_the_rest(tmp_path: Path
                                                                          ) -> None:
    data = json.loads((data_dir() / "op_tuning_data.json").read_text())
    sort = copy_module("sort.1", (8, 128), [1, 0], [1, 0])
    sort["computations"][0]["instructions"][1]["opcode"] = "sort"
    data["kernels"] += [entry(fc_module(), [([64, 8], [4, 8]), ([128, 8], [4, 8])]),
                        entry(sort, [([1, 1], [])])]
    (tmp_path / "op_tuning_data.json").write_text(json.dumps(data))
    out = tmp_path / "out.json"
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibrate.py"), "--no-fit",
                        "--data", str(tmp_path), "--out", str(out)], capture_output=True,
                       text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    got = json.loads(out.read_text())
    assert [s["kernel"] for s in got["skipped"]] == ["sort.1"]
    assert "sort" in got["skipped"][0]["reason"]
    names = [k["kernel"] for k in got["after"]["kernels"]]
    assert "fusion.fc" in names and len(names) == 9
    assert got["after"]["layout"] is None  # no layout file in that directory

    missing = subprocess.run([sys.executable, str(REPO / "benchmarks" / "calibrate.py"),
                              "--no-fit", "--data", str(tmp_path / "nowhere")],
                             capture_output=True, text=True, timeout=600, check=False)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no such file" in missing.stderr


def test_prepare_all_skips_only_the_kernel_that_fails() -> None:
    sort = copy_module("sort.1", (8, 128), [1, 0], [1, 0])
    sort["computations"][0]["instructions"][1]["opcode"] = "sort"
    done, skipped = prepare_all([kernel(sort, [([1, 1], [])]),
                                 kernel(fc_module(), [([64, 8], [4, 8])])])
    assert [k.name for k in done] == ["fusion.fc"]
    assert [(s.name, "unsupported" in s.reason) for s in skipped] == [("sort.1", True)]
