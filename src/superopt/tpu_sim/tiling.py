"""The default compiler's tiling pass: per kernel, the tile its estimate prefers.

`default_tile` is the argmin of the compiler's estimate over a kernel's tile options that
fit VMEM; `default_choice` is the same pick among given candidate tiles (e.g. the `Bounds`
a measured program lists). Which estimate is a choice of the default compiler
(`DEFAULT_TILINGS`): "xla" (the default) minimises `kernel_time.compiler_estimate`, whose
picks on the measured TPU v3 kernels are as good as XLA's own defaults; "legacy" minimises
the older analytical model (`kernel_time.analytical`), kept so that figures measured over
it stay reproducible. `kernel_costs.KernelCosts` caches picks per kernel signature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from superopt.ir.errors import IRError
from superopt.tpu_sim.config import Flags, Tile
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_time import KernelCost, KernelStats, grid, grid_vmem, tile_options

# The default compiler's tile heuristics: name -> what its tiling pass minimises.
DEFAULT_TILINGS: dict[str, str] = {
    "xla": "the compiler's estimate: pipeline with per-step costs, DMA runs, MXU block shapes "
           "(as strong as XLA's default pick on the measured TPU v3 kernels)",
    "legacy": "the analytical roofline: compute + memory - 0.95 x min + launch (before "
              "2026-11-29; tuning gains measured over it are over a weaker default)",
}
DEFAULT_TILING = "xla"


class UnknownDefaultTiling(IRError):
    def __init__(self, name: object) -> None:
        super().__init__(f"unknown default tiling {name!r}; known: "
                         f"{', '.join(DEFAULT_TILINGS)}")


def check_default_tiling(name: object) -> str:
    if name not in DEFAULT_TILINGS:
        raise UnknownDefaultTiling(name)
    return str(name)


def tile_rank(estimate_s: float, steps: int, tile: Tile) -> tuple:
    """How the default compiler orders tiles: its estimate (whole picoseconds: float noise
    must not break ties between equal tiles), then fewer grid steps, then the larger
    tile."""
    return round(estimate_s * 1e12), steps, tuple(-x for x in tile)


def default_tile(stats: KernelStats, flags: Flags, hw: Hardware,
                 estimate: Callable[[Tile], float]) -> Tile:
    """Argmin of `estimate` over the tiles that fit VMEM (ties: fewer steps, then the
    larger tile); the smallest tile when none fits."""
    best: tuple[float, int, tuple[int, ...]] | None = None
    options = tile_options(stats)
    for tile in options:
        gr = grid(stats, tile)
        if grid_vmem(gr, flags, hw) > hw.vmem_bytes:
            continue
        score = tile_rank(estimate(tile), gr.steps, tile)
        if best is None or score < best:
            best = score
    return tuple(-x for x in best[2]) if best is not None else options[0]


def default_choice(tiles: Sequence[Tile], cost: Callable[[Tile], KernelCost],
                   estimate: Callable[[Tile], float]) -> int:
    """Index of the default compiler's pick among candidate tiles: the argmin of its
    estimate over those that are valid and fit VMEM (ties: fewer grid steps, then the
    earlier candidate); the first candidate when none fits."""
    best: tuple[int, int, int] | None = None
    for i, tile in enumerate(tiles):
        c = cost(tile)
        if not c.valid:
            continue
        score = (round(estimate(tile) * 1e12), c.steps, i)
        if best is None or score < best:
            best = score
    return best[2] if best is not None else 0
