"""Calibration of the simulator's free constants: the fitting machinery, the recorded v3
calibration (its provenance, that the presets use it, that it reproduces), and (slow) that a
fresh fit from the uncalibrated constants finds it again."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from superopt.tpu_sim import TPU_V3, TPU_V4, TPU_V5E
from superopt.tpu_sim.calibration import (
    FIXED,
    FREE,
    PACKAGE_DATA,
    RANGES,
    cross_validate,
    fit,
    fit_vmem,
    loss,
    nelder_mead,
    residuals,
)
from superopt.tpu_sim.hardware import (
    BASE_V3,
    BASE_V4,
    BASE_V5E,
    CALIBRATED,
    UNCALIBRATED,
    Constants,
    calibration_record,
)
from superopt.tpu_sim.kernel_time import KernelCost
from superopt.tpu_sim.replay import data_dir, load_tiles, prepare
from superopt.tpu_sim.simulator import KernelCosts

DATA = data_dir()  # package data: present in every checkout and installation


@pytest.fixture(scope="module")
def kernels():
    return [prepare(k) for k in load_tiles(DATA / "op_tuning_data.json")]


def test_nelder_mead_finds_a_quadratics_minimum() -> None:
    target = np.array([1.5, -2.0, 0.25])
    x, fx, evals = nelder_mead(lambda u: float(np.sum((u - target) ** 2)), np.zeros(3),
                               iters=500, tol=1e-14)
    np.testing.assert_allclose(x, target, atol=1e-5)
    assert fx < 1e-9 and evals > 3


def test_constants_round_trip_through_a_preset() -> None:
    c = Constants(700.0, 80.0, 5e-9, 0.9, 300.0, 0.5, 0.2)
    hw = c.apply(BASE_V4)
    back = Constants.of(hw)
    for name, value in c.to_json().items():
        assert getattr(back, name) == pytest.approx(value)
    assert hw.step_s == pytest.approx(80.0 / 1.05e9)
    assert hw.dma_half_bytes == pytest.approx(5e-9 * 600e9 * 0.9)


def test_the_presets_use_the_recorded_calibration() -> None:
    rec = calibration_record()
    assert Constants.from_json(rec["constants"]) == CALIBRATED
    assert TPU_V3 == CALIBRATED.apply(BASE_V3)
    assert TPU_V4 == CALIBRATED.apply(BASE_V4)
    assert TPU_V5E == CALIBRATED.apply(BASE_V5E)
    assert CALIBRATED != UNCALIBRATED
    for name in FREE:
        lo, hi = RANGES[name]
        assert lo <= getattr(CALIBRATED, name) <= hi, name


def test_only_the_free_constants_are_fitted_the_rest_hold_their_grounded_values() -> None:
    assert not set(FREE) & set(FIXED)
    rec = calibration_record()
    assert set(rec["fixed"]) == set(FIXED)
    for name, (value, why) in FIXED.items():
        assert getattr(CALIBRATED, name) == pytest.approx(value), name
        assert rec["fixed"][name]["value"] == pytest.approx(value) and why
    # What each grounded value is: a 128-deep systolic array fills and drains in 2 x 128
    # cycles; the launch is 0.5 us at v3's 940 MHz.
    assert CALIBRATED.mxu_fill_cycles == 2 * BASE_V3.mxu_dim
    assert CALIBRATED.launch_cycles / BASE_V3.clock_hz == pytest.approx(0.5e-6, rel=0.001)


def test_fixed_costs_fit_inside_the_smallest_measured_kernels(kernels) -> None:
    # Independent of the fit: real v3 kernels of 0.6 us (issue 15) and the measured rows bound
    # what a launch, a grid step and a DMA run can cost.
    assert TPU_V3.launch_s < 0.6e-6
    model = KernelCosts(TPU_V3)
    for k in kernels:
        costs: list[KernelCost] = k.costs(model)
        for c, t in zip(costs, k.measured, strict=True):
            # The fixed costs alone stay under every measured row's time, with room for the
            # row's own DMA and compute (fusion.181's 128 one-tile steps: 84% at the fitted
            # 73-cycle step, 0.81x of its 96 ns measured per step)...
            fixed = TPU_V3.launch_s + (c.steps - 1) * TPU_V3.step_s
            assert fixed < 0.9 * t, (k.name, c.steps, t)
            # ...and a grid step costs less than the measured time per step of any row.
            assert TPU_V3.step_s < t / c.steps, (k.name, c.steps, t)
    # A contiguous run costs less than moving one 4 KiB VMEM transaction.
    assert CALIBRATED.dma_run_s < 4096 / BASE_V3.hbm_bytes_per_s


def test_the_record_says_where_its_data_came_from() -> None:
    rec = calibration_record()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rec["date"])
    assert rec["data"]["commit"] == "ddd187c583cd3b0c72fb5adada905ad7b7532794"
    assert set(rec["free"]) >= set(FREE)
    assert rec["loss"]["after"] < rec["loss"]["before"]
    assert {r["name"] for r in rec["residuals"]} >= {"fusion.191", "fusion.232"}
    # The files the fit read are the package's own (moved from shared/, byte-identical).
    assert rec["data"]["directory"] == PACKAGE_DATA
    for name, info in rec["data"]["files"].items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == info["sha256"]


def test_the_recorded_residuals_reproduce(kernels) -> None:
    rec = calibration_record()
    assert loss(kernels, TPU_V3) == pytest.approx(rec["loss"]["after"], rel=1e-6)
    got = {r.name: r for r in residuals(kernels, TPU_V3)}
    for want in rec["residuals"]:
        r = got[want["name"]]
        assert r.rows == want["rows"]
        assert r.rms_log_error == pytest.approx(want["rms_log_error"], rel=1e-6)
        assert r.mape == pytest.approx(want["mape"], rel=1e-6)


def test_the_recorded_constants_are_a_local_minimum(kernels) -> None:
    best = loss(kernels, TPU_V3)
    for name in FREE:
        for factor in (0.9, 1.1):
            c = Constants.from_json({**CALIBRATED.to_json(),
                                     name: getattr(CALIBRATED, name) * factor})
            assert loss(kernels, c.apply(BASE_V3)) > best - 1e-4, (name, factor)


@pytest.mark.slow
def test_the_vmem_share_is_the_largest_that_fits_every_measured_tile(kernels) -> None:
    assert fit_vmem(kernels, TPU_V3) == pytest.approx(CALIBRATED.vmem_intermediate_share)


@pytest.mark.slow
def test_a_fresh_fit_finds_the_recorded_calibration_again(kernels) -> None:
    result = fit(kernels, UNCALIBRATED.apply(BASE_V3), start=UNCALIBRATED)
    rec = calibration_record()
    assert result.loss == pytest.approx(rec["loss"]["after"], rel=0.01)
    for name in FREE:
        assert getattr(result.constants, name) == pytest.approx(getattr(CALIBRATED, name),
                                                                rel=0.05), name
    assert json.loads(json.dumps(result.constants.to_json())) == result.constants.to_json()


def test_cross_validation_scores_each_kernel_under_constants_fitted_without_it(kernels
                                                                               ) -> None:
    few = [k for k in kernels if k.name in ("copy.24", "fusion.181", "fusion.245")]
    held = cross_validate(few, UNCALIBRATED.apply(BASE_V3), start=UNCALIBRATED, rounds=1,
                          iters=15)
    assert [h.name for h in held] == [k.name for k in few]
    for i, h in enumerate(held):
        others = [k for j, k in enumerate(few) if j != i]
        alone = fit(others, UNCALIBRATED.apply(BASE_V3), start=UNCALIBRATED, rounds=1,
                    iters=15)
        assert h.constants == alone.constants  # fitted to the other kernels only
        for name, (value, _) in FIXED.items():  # a fold fits only the free constants
            assert getattr(h.constants, name) == pytest.approx(value), name
        assert h.rows == len(few[i].measured)
        assert 1.0 <= h.top1 and 0.0 <= h.mape
    assert len({h.constants for h in held}) == 3  # each fold fits its own constants


@pytest.mark.slow
def test_held_out_kernels_keep_their_rankings(kernels) -> None:
    # Issue 15's must-show on kernels the fit did not see. Only the rankings: the held-out
    # absolute errors are reported by benchmarks/calibrate.py --cv, not held to thresholds
    # (thresholds on held-out kernels are how a constant once came to be chosen by them).
    held = {h.name: h for h in cross_validate(kernels, UNCALIBRATED.apply(BASE_V3),
                                              start=UNCALIBRATED)}
    for h in held.values():
        if h.tunable and h.rows >= 10:
            assert h.tau >= 0.7 and h.top1 <= 1.10, h
