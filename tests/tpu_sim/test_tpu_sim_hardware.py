"""Hardware presets: the per-core figures follow from the published per-chip figures."""

from __future__ import annotations

import pytest

from superopt.ir.errors import IRError
from superopt.tpu_sim import PRESETS, TPU_V3, TPU_V4, TPU_V5E, get_hardware
from superopt.tpu_sim.hardware import CALIBRATED, UNCALIBRATED


def test_v4_peak_is_mxus_times_array_times_clock() -> None:
    # 4 MXUs x 128 x 128 MACs x 2 FLOPs x 1.05 GHz; the chip (two cores) is sold as 275 TFLOP/s.
    assert TPU_V4.peak_flops == pytest.approx(137.6256e12)
    assert 2 * TPU_V4.peak_flops == pytest.approx(275e12, rel=0.01)
    assert 2 * TPU_V4.hbm_bytes_per_s == pytest.approx(1200e9)
    assert TPU_V4.vmem_bytes == 16 * 2**20


def test_v4_ridge_point_is_about_230_flop_per_byte() -> None:
    assert 220 < TPU_V4.ridge < 240


def test_v3_and_v5e_match_their_chip_figures() -> None:
    assert 2 * TPU_V3.peak_flops == pytest.approx(123e12, rel=0.01)  # two cores per chip
    assert 2 * TPU_V3.hbm_bytes_per_s == pytest.approx(900e9)
    assert TPU_V5E.peak_flops == pytest.approx(197e12, rel=0.01)  # one core per chip
    assert TPU_V5E.hbm_bytes_per_s == pytest.approx(819e9)
    assert TPU_V5E.vmem_bytes == 128 * 2**20


def test_fixed_costs_are_named_constants() -> None:
    # Before calibration: about 1 us per launch, 0.35 us per grid step, 2 cycles per vreg op.
    assert UNCALIBRATED.launch_cycles == pytest.approx(1e-6 * TPU_V3.clock_hz)
    assert UNCALIBRATED.step_cycles == pytest.approx(0.35e-6 * TPU_V3.clock_hz)
    assert UNCALIBRATED.vpu_op_cycles == 2
    assert TPU_V4.dma_issue_s == pytest.approx(0.4e-6)  # not constrained by the data
    assert TPU_V4.sublanes * TPU_V4.lanes == 1024


def test_every_preset_applies_the_calibrated_constants_at_its_own_clock_and_bandwidth() -> None:
    for hw in (TPU_V3, TPU_V4, TPU_V5E):
        assert hw.launch_s * hw.clock_hz == pytest.approx(CALIBRATED.launch_cycles)
        assert hw.step_s * hw.clock_hz == pytest.approx(CALIBRATED.step_cycles)
        # The same time per contiguous DMA run: more bytes of transfer time at more bandwidth.
        assert hw.dma_half_bytes / hw.hbm_bytes_per_s == pytest.approx(CALIBRATED.dma_run_s)
        assert hw.mxu_fill_cycles == pytest.approx(CALIBRATED.mxu_fill_cycles)
        assert hw.vpu_op_cycles == pytest.approx(CALIBRATED.vpu_op_cycles)
        assert hw.transcendental_cycles == pytest.approx(3.5 * hw.vpu_op_cycles)
        assert hw.xlu_cycles == pytest.approx(2 * hw.vpu_op_cycles)
    assert TPU_V4.dma_half_bytes > TPU_V3.dma_half_bytes  # 600 vs 450 GB/s
    assert TPU_V4.launch_s < TPU_V3.launch_s  # 1.05 vs 0.94 GHz


@pytest.mark.parametrize("name,want", [("v4", "v4"), ("TPU-v4", "v4"), ("tpu_v3", "v3"),
                                       (" V5E ", "v5e"), (None, "v4")])
def test_get_hardware_accepts_spellings(name: str | None, want: str) -> None:
    assert get_hardware(name).name == want


def test_unknown_hardware_names_the_presets() -> None:
    with pytest.raises(IRError, match=r"unknown hardware 'v9'.*v4.*v3.*v5e"):
        get_hardware("v9")
    assert set(PRESETS) == {"v3", "v4", "v5e"}
