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

import pytest

from superopt.tpu_sim import TPU_V3
from superopt.tpu_sim import bounds as B
from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.replay import TileKernel, TileRow, data_dir, prepare_all, replay_tiles

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


# ---- layout-true tiling ------------------------------------------------------------------------

def space_of(pk: Any) -> B.Space:
    """The tile space of a prepared kernel (its MXU member, if any, is the hero)."""
    entries = pk.sig.key[0]
    hero = next((i for i, e in enumerate(entries) if e[0] in ("matmul", "conv2d")), None)
    return B.analyse(pk.sig.key, hero)


def units(space: B.Space) -> list[tuple[int, int]]:
    return [(d.size, d.unit) for d in space.dims]


# f32[32,26,26,192] from row-major into {3,0,2,1}: physically [26,26,32,192], in (8, 128)
# tiles [26,26,4,2]; XLA's default-like bounds take 2 of the major dim and the rest whole.
PERMUTED = ((32, 26, 26, 192), [3, 2, 1, 0], [3, 0, 2, 1])
PAD_IN = 32 * 26 * 32 * 256 * 4  # row-major input: 26 rows pad to 32, 192 lanes to 256
PAD_OUT = 26 * 26 * 32 * 256 * 4  # the output: the 32-wide dim is the sublane dim


def test_a_copy_into_a_permuted_layout_is_one_kernel_tiled_in_the_outputs_physical_order(
        ) -> None:
    rows = [([2, 26, 4, 2], []), ([1, 26, 4, 2], []), ([26, 1, 1, 1], []),
            ([26, 26, 4, 2], [])]
    (pk,), skipped = prepare_all([kernel(copy_module("copy.25", *PERMUTED), rows)])
    assert not skipped
    assert [e[0] for e in pk.sig.key[0]] == ["layout"]  # no second copy back to row-major
    space = space_of(pk)
    assert units(space) == [(26, 1), (26, 1), (32, 8), (192, 128)]
    r = replay_tiles(pk, TPU_V3)
    # Only the whole array does not fit VMEM (22 MB out + 27 MB in, double-buffered).
    assert [s.split(":")[0] for s in r.invalid] == ["26x26x4x2"]
    # The default-like tile reads and writes each array once, in 13 blocks.
    pl = B.plan(space, Bounds((2, 26, 4, 2)))
    assert pl.steps == 13
    ins, outs, in_bytes, out_bytes = B.transfers(space, pl)
    assert in_bytes == PAD_IN and out_bytes == PAD_OUT
    # The output block (2 x 26 x 32 x 192) is one run; the row-major input's block is 32 runs
    # (one per index of its major dim) of 2 x 26 rows x 192 lanes = 2 x 4 x 2 tiles.
    assert {(n, run) for n, _, run in outs} == {(13, PAD_OUT / 13)}
    assert {(n, size / run, run) for n, size, run in ins} == {(13, 32, 2 * 4 * 2 * 4096)}


def test_the_strided_side_of_a_layout_changing_copy_costs_more_than_a_plain_copy() -> None:
    # Same bounds, same output layout: the permuted copy's row-major input moves 1-tile runs
    # (8 rows of its major dim x 26 x one tile per block), the plain copy's input is laid out
    # as its output and moves 26 runs per block.
    tile = ([26, 1, 1, 1], [])
    permuted = prepare_all([kernel(copy_module("copy.p", *PERMUTED), [tile])])[0][0]
    dims, _, dst = PERMUTED
    plain = prepare_all([kernel(copy_module("copy.s", dims, dst, dst), [tile])])[0][0]
    def input_runs(pk: Any) -> tuple[float, set[tuple[float, float]]]:
        space = space_of(pk)
        ins = B.transfers(space, B.plan(space, Bounds((26, 1, 1, 1))))[0]
        return sum(n for n, _, _ in ins), {(size / run, run) for _, size, run in ins}

    # 26 x 4 x 2 blocks (the last lane block holds 64 of 192 lanes: still one tile).
    assert input_runs(permuted) == (26 * 4 * 2, {(8 * 26, 4096)})
    assert input_runs(plain) == (26 * 4 * 2, {(26, 4096)})
    assert (replay_tiles(permuted, TPU_V3).simulated[0]
            > 1.5 * replay_tiles(plain, TPU_V3).simulated[0])


@pytest.mark.parametrize("dst", [[3, 0, 2, 1], [0, 3, 1, 2], [1, 2, 3, 0], [2, 1, 0, 3]])
@pytest.mark.parametrize("src", [[3, 2, 1, 0], [3, 0, 2, 1]])
def test_permuted_4d_copies_tile_the_outputs_physical_dims(src: list[int], dst: list[int]
                                                           ) -> None:
    dims = (16, 10, 12, 256)
    phys = [dims[d] for d in reversed(dst)]
    unit = [1, 1, 8, 128]
    tiled = [-(-n // u) for n, u in zip(phys, unit, strict=True)]
    # Default-like: one index of the major dim, the rest whole (at most 64 KiB a block).
    default = [1, *tiled[1:]]
    (pk,), _ = prepare_all([kernel(copy_module("copy.x", dims, src, dst), [(default, [])])])
    assert [e[0] for e in pk.sig.key[0]] == ["layout" if src != dst else "copy"]
    space = space_of(pk)
    assert units(space) == list(zip(phys, unit, strict=True))
    r = replay_tiles(pk, TPU_V3)
    assert not r.invalid and B.plan(space, Bounds(tuple(default))).steps == phys[0]


def test_a_dense_layer_with_a_transposed_output_tiles_its_physical_dims() -> None:
    # f32[4096,1000]{0,1}: physically [1000, 4096]; the MXU columns are its lane dim (the
    # 4096 one) and the contraction (32) follows the weights' physical order: [32, 1000]{1,0}
    # has it as the sublane dim (kernel bounds [4, 8] = all of it, all 1000 columns).
    mod = fc_module()
    mod["computations"][0]["instructions"][-1]["shape"] = shape("f32", (4096, 1000), [0, 1])
    (pk,), _ = prepare_all([kernel(mod, [([125, 4], [4, 8]), ([125, 32], [4, 8])])])
    space = space_of(pk)
    assert units(space)[:2] == [(1000, 8), (4096, 128)]
    assert units(space)[2] == (32, 8) and space.kernel_dims == (2, None)
    assert space.cols == 1 and space.rows == (0,)
    r = replay_tiles(pk, TPU_V3)
    assert [s.split(":")[0] for s in r.invalid] == ["125x32/4x8"]  # 16 MB of output
    assert r.simulated[0] > 0
