"""The default compiler's tiling pass: per kernel, the tile the analytical model prefers.

`default_tile` is the argmin of the XLA-like analytical model (`kernel_time.analytical`)
over a kernel's tile options that fit VMEM; `default_choice` is the same pick among given
candidate tiles (e.g. the `Bounds` a measured program lists). `kernel_costs.KernelCosts`
caches both per kernel signature. (Moved out of the old `cost.CostModel`.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from superopt.tpu_sim.config import Flags, Tile
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_time import (
    KernelCost,
    KernelStats,
    analytical,
    analytical_compute,
    grid,
    grid_vmem,
    tile_options,
)


def tile_rank(analytical_s: float, steps: int, tile: Tile) -> tuple:
    """How the default compiler orders tiles: the analytical time (whole picoseconds:
    float noise must not break ties between equal tiles), then fewer grid steps, then the
    larger tile."""
    return round(analytical_s * 1e12), steps, tuple(-x for x in tile)


def default_tile(stats: KernelStats, flags: Flags, hw: Hardware) -> Tile:
    """Argmin of the analytical model over the tiles that fit VMEM (ties: fewer steps,
    then the larger tile); the smallest tile when none fits."""
    best: tuple[float, int, tuple[int, ...]] | None = None
    options = tile_options(stats)
    compute = analytical_compute(stats, hw)
    bw = hw.hbm_bytes_per_s
    for tile in options:
        gr = grid(stats, tile)
        if grid_vmem(gr, flags, hw) > hw.vmem_bytes:
            continue
        score = tile_rank(analytical(compute, (gr.in_bytes + gr.out_bytes) / bw, hw),
                          gr.steps, tile)
        if best is None or score < best:
            best = score
    return tuple(-x for x in best[2]) if best is not None else options[0]


def default_choice(tiles: Sequence[Tile], cost: Callable[[Tile], KernelCost],
                   analytical_time: Callable[[Tile], float]) -> Tile:
    """The default compiler's pick among candidate tiles: the argmin of the analytical
    model over those that are valid and fit VMEM (ties: fewer grid steps, then the
    earlier candidate); the first candidate when none fits."""
    best: tuple[int, int, int] | None = None
    for i, tile in enumerate(tiles):
        c = cost(tile)
        if not c.valid:
            continue
        score = (round(analytical_time(tile) * 1e12), c.steps, i)
        if best is None or score < best:
            best = score
    return tiles[best[2] if best is not None else 0]
