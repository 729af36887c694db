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

Vector unit: a vreg holds 8 sublanes x 128 lanes of 32-bit values (the (8, 128) tile of
f32 arrays; bf16 packs (16, 128) into the same bytes). An f32 add or multiply over one vreg
takes 2 cycles; a transcendental on the EUP about 7 (the project's issue figures, which
we adopt as stated). Every preset shares this (8, 128) tiling, which
`superopt.tpu_sim.layout` applies to array layouts. VMEM per core: 16 MiB on v3 and v4, 128 MiB on v5e, the sizes the
Pallas TPU guides work with.

Fixed costs are named constants: about 1 us to launch a kernel, about 0.35 us per grid
step beyond the first (the per-iteration overhead the Pallas TPU pipelining guide
describes), about 0.4 us DMA issue latency. The remaining constants (DMA efficiency of
small transfers, MXU pipeline fill, loop overhead, register file, instruction budget) are
documented modelling assumptions, not published figures; they drive the second-order
effects that the default compiler's analytical model ignores.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from superopt.ir.errors import IRError

KIB = 1024
MIB = 1024 * 1024

# Fixed costs (seconds).
KERNEL_LAUNCH_S = 1.0e-6
GRID_STEP_S = 0.35e-6
DMA_ISSUE_S = 0.4e-6


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
    # Modelling assumptions (second-order effects; see the module docstring).
    dma_half_bytes: int = 4 * KIB  # a transfer of this size reaches half of the bandwidth
    mxu_fill_cycles: int = 256  # systolic fill + drain paid once per grid step
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


TPU_V4 = Hardware(
    name="v4", clock_hz=1.05e9, mxus=4, mxu_dim=128, hbm_bytes_per_s=600e9,
    vmem_bytes=16 * MIB,
    source="Cloud TPU v4 docs (275 TFLOP/s, 1200 GB/s per 2-core chip); Jouppi et al. ISCA 2023")
TPU_V3 = Hardware(
    name="v3", clock_hz=0.94e9, mxus=2, mxu_dim=128, hbm_bytes_per_s=450e9,
    vmem_bytes=16 * MIB,
    source="Cloud TPU v3 docs (123 TFLOP/s, 900 GB/s per 2-core chip); Norrie et al. 2021")
TPU_V5E = Hardware(
    name="v5e", clock_hz=1.5e9, mxus=4, mxu_dim=128, hbm_bytes_per_s=819e9,
    vmem_bytes=128 * MIB,
    source="Cloud TPU v5e docs (197 TFLOP/s, 819 GB/s, one core per chip)")

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
