"""Hardware presets: one TPU TensorCore, with the published figures each field comes from.

The simulator models one TensorCore (a "core"). Chip-level figures from Google's Cloud TPU
pages are divided by the number of cores per chip:

- TPU v4 (default): two TensorCores per chip, four 128x128 MXUs per core, 1050 MHz;
  275 TFLOP/s bf16 and 1200 GB/s of HBM2 per chip (cloud.google.com/tpu/docs/v4; Jouppi et
  al., "TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning with Hardware
  Support for Embeddings", ISCA 2023, arXiv:2304.01433). Per core: 4 x 128 x 128 x 2 x
  1.05 GHz = 137.6 TFLOP/s and 600 GB/s, so the ridge point is about 229 FLOP/byte.
- TPU v3: two TensorCores per chip, two MXUs per core, 940 MHz; 123 TFLOP/s bf16 and
  900 GB/s per chip (cloud.google.com/tpu/docs/v3; Norrie et al., "The Design Process for
  Google's Training Chips: TPUv2 and TPUv3", IEEE Micro 2021). Per core: 61.6 TFLOP/s and
  450 GB/s.
- TPU v5e: one TensorCore per chip, four MXUs, 1.5 GHz; 197 TFLOP/s bf16 and 819 GB/s
  (cloud.google.com/tpu/docs/v5e).

Vector unit: a vreg holds 8 sublanes x 128 lanes of 32-bit values (the (8, 128) tile XLA
lays arrays out in; see `superopt.tpu_sim.layout`). VMEM per core: 16 MiB on v3 and v4,
128 MiB on v5e, the sizes the Pallas TPU guides work with.

The kernel model's other constants are not published. They are *calibrated* against real
TPU v3 kernel timings (the TpuGraphs samples; `superopt.tpu_sim.calibration` and
`benchmarks/calibrate.py`) and recorded, with the data they came from, the fit's residuals
and its date, in `v3_calibration.json` next to this module. The record holds them in
physical units (`Constants`): launch and per-grid-step costs and the MXU fill in core cycles,
the cost of each contiguous DMA run in seconds, the VPU's cycles per vreg op, and the share
of a fused kernel's intermediates that VMEM holds (the rest stay in vregs). Every preset
applies the same record at its own clock and bandwidth, so v4 and v5e are derived from the
model fitted on v3 with their own published figures. `UNCALIBRATED` keeps the assumptions
the simulator used before calibration (about 1 us to launch a kernel, about 0.35 us per grid
step, 2 cycles per vreg op, ...), for before/after comparisons. Constants the data do not
constrain keep their assumed values: the DMA issue latency without double buffering, loop
overhead, register file and instruction budget.

Only the per-grid-step cost and the VPU rate are fitted; the launch cost (470 cycles: 0.5 us on
v3, 0.45 us on v4), the MXU fill and drain (256 cycles for a 128-deep array) and the per-run DMA
cost (7 ns) are held at physically grounded values (`calibration.FIXED` says why), since
leave-one-kernel-out cross-validation showed the tile data cannot pin them. The launch cost is
below DESIGN's "about 1 us" on purpose: real TPU v3 kernels measure 0.6 us whole, so a kernel's
fixed cost cannot be larger.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from superopt.ir.errors import IRError

KIB = 1024
MIB = 1024 * 1024

# Fixed costs before calibration (seconds), kept for comparisons.
KERNEL_LAUNCH_S = 1.0e-6
GRID_STEP_S = 0.35e-6
DMA_ISSUE_S = 0.4e-6

CALIBRATION_NAME = "v3_calibration.json"  # package data of superopt.tpu_sim
CALIBRATION_FILE = Path(__file__).with_name(CALIBRATION_NAME)  # where --write-record writes

# Transcendental (EUP) and cross-lane (XLU) ops keep these ratios to an element-wise op.
TRANSCENDENTAL_RATIO = 7.0 / 2.0
XLU_RATIO = 4.0 / 2.0


class UnknownHardware(IRError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown hardware {name!r}; known: {', '.join(PRESETS)}")


@dataclass(frozen=True)
class Hardware:
    """One TPU TensorCore. Rates are per core; times in seconds, sizes in bytes."""

    name: str
    clock_hz: float
    mxus: int
    mxu_dim: int  # the MXU is a mxu_dim x mxu_dim systolic array
    hbm_bytes_per_s: float
    vmem_bytes: int
    sublanes: int = 8
    lanes: int = 128
    vpu_op_cycles: float = 2.0  # f32 add/mul/max/select over one vreg
    transcendental_cycles: float = 7.0  # exp, log, tanh, erf, rsqrt, reciprocal over one vreg
    xlu_cycles: float = 4.0  # cross-lane work (transpose, lane shift, lane reduce) per vreg
    launch_s: float = KERNEL_LAUNCH_S
    step_s: float = GRID_STEP_S
    dma_issue_s: float = DMA_ISSUE_S
    # Second-order effects (calibrated where the data constrain them; module docstring).
    dma_half_bytes: float = 4 * KIB  # a contiguous run of this size reaches half the rate
    hbm_efficiency: float = 1.0  # fraction of the peak HBM bandwidth long DMA streams reach
    mxu_fill_cycles: float = 256  # systolic fill + drain paid once per grid step
    vmem_intermediate_share: float = 1.0  # of a fused kernel's intermediates, held in VMEM
    loop_overhead_cycles: float = 2.0  # loop control not hidden in VLIW slots, per iteration
    vregs: int = 32  # vector register file
    instruction_budget: int = 96  # fused ops x unroll that fit the instruction memory
    instruction_miss_s: float = 0.02e-6  # per step, per op beyond the budget
    source: str = ""

    @property
    def peak_flops(self) -> float:
        """MXU peak in FLOP/s: MXUs x dim x dim multiply-accumulates x 2 x clock."""
        return self.mxus * self.mxu_dim * self.mxu_dim * 2 * self.clock_hz

    @property
    def ridge(self) -> float:
        """Arithmetic intensity (FLOP/byte) where the roofline turns from memory to compute."""
        return self.peak_flops / self.hbm_bytes_per_s

    @property
    def vreg_elems(self) -> int:
        return self.sublanes * self.lanes

    def with_(self, **changes: object) -> Hardware:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Constants:
    """The kernel model's calibrated constants, in physical units (module docstring)."""

    launch_cycles: float  # a kernel's fixed cost: launch, pipeline set-up and drain
    step_cycles: float  # each grid step beyond the first
    dma_run_s: float  # each contiguous DMA run, on top of its bytes
    hbm_efficiency: float  # fraction of the peak HBM bandwidth long streams reach
    mxu_fill_cycles: float  # systolic fill and drain per grid step
    vpu_op_cycles: float  # one element-wise op over one vreg
    vmem_intermediate_share: float = 1.0  # of fused intermediates, held in VMEM (not vregs)

    @staticmethod
    def of(hw: Hardware) -> Constants:
        """The constants a preset uses."""
        rate = hw.hbm_bytes_per_s * hw.hbm_efficiency
        return Constants(hw.launch_s * hw.clock_hz, hw.step_s * hw.clock_hz,
                         hw.dma_half_bytes / rate, hw.hbm_efficiency,
                         float(hw.mxu_fill_cycles), hw.vpu_op_cycles,
                         hw.vmem_intermediate_share)

    def apply(self, hw: Hardware) -> Hardware:
        """`hw` with these constants, at its own clock and bandwidth."""
        return hw.with_(
            launch_s=self.launch_cycles / hw.clock_hz, step_s=self.step_cycles / hw.clock_hz,
            dma_half_bytes=self.dma_run_s * hw.hbm_bytes_per_s * self.hbm_efficiency,
            hbm_efficiency=self.hbm_efficiency, mxu_fill_cycles=self.mxu_fill_cycles,
            vpu_op_cycles=self.vpu_op_cycles,
            transcendental_cycles=self.vpu_op_cycles * TRANSCENDENTAL_RATIO,
            xlu_cycles=self.vpu_op_cycles * XLU_RATIO,
            vmem_intermediate_share=self.vmem_intermediate_share)

    def to_json(self) -> dict[str, float]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, float]) -> Constants:
        return Constants(**{f.name: float(d[f.name]) for f in fields(Constants) if f.name in d})


@cache
def calibration_record() -> MappingProxyType:
    """The recorded v3 calibration (`v3_calibration.json`): constants, data, residuals."""
    # Through importlib.resources: an installed package (a wheel, a zip) reads its own copy.
    src = resources.files("superopt.tpu_sim").joinpath(CALIBRATION_NAME)
    try:
        return MappingProxyType(json.loads(src.read_text()))
    except (OSError, ValueError) as e:
        raise IRError(f"{src}: cannot read the calibration record ({e})") from None


BASE_V4 = Hardware(
    name="v4", clock_hz=1.05e9, mxus=4, mxu_dim=128, hbm_bytes_per_s=600e9,
    vmem_bytes=16 * MIB,
    source="Cloud TPU v4 docs (275 TFLOP/s, 1200 GB/s per 2-core chip); Jouppi et al. ISCA 2023")
BASE_V3 = Hardware(
    name="v3", clock_hz=0.94e9, mxus=2, mxu_dim=128, hbm_bytes_per_s=450e9,
    vmem_bytes=16 * MIB,
    source="Cloud TPU v3 docs (123 TFLOP/s, 900 GB/s per 2-core chip); Norrie et al. 2021")
BASE_V5E = Hardware(
    name="v5e", clock_hz=1.5e9, mxus=4, mxu_dim=128, hbm_bytes_per_s=819e9,
    vmem_bytes=128 * MIB,
    source="Cloud TPU v5e docs (197 TFLOP/s, 819 GB/s, one core per chip)")

UNCALIBRATED = Constants.of(BASE_V3)  # the assumptions before calibration, in physical units
CALIBRATED = Constants.from_json(calibration_record()["constants"])

TPU_V4 = CALIBRATED.apply(BASE_V4)
TPU_V3 = CALIBRATED.apply(BASE_V3)
TPU_V5E = CALIBRATED.apply(BASE_V5E)

PRESETS = MappingProxyType({h.name: h for h in (TPU_V4, TPU_V3, TPU_V5E)})
DEFAULT = TPU_V4


def get_hardware(name: str | Hardware | None = None) -> Hardware:
    """A preset by name ('v4', 'v3', 'v5e'; 'tpu-v4' and case variants accepted)."""
    if name is None:
        return DEFAULT
    if isinstance(name, Hardware):
        return name
    key = name.strip().lower().removeprefix("tpu").lstrip("-_ ")
    try:
        return PRESETS[key]
    except KeyError:
        raise UnknownHardware(name) from None
