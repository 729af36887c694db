"""The default compiler's flags pass: per kernel, the code-generation switches it picks.

Double buffering on, no unrolling, and the MXUs split over output columns when the tile
has a block of 128 columns per MXU, else over rows. (Moved out of `compiler`.)
"""

from __future__ import annotations

from typing import Any, Protocol

from superopt.tpu_sim.bounds import Bounds, Space, plan
from superopt.tpu_sim.config import DEFAULT_FLAGS, Flags
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.signature import Signature


class KernelFacts(Protocol):
    """What `bounds_columns` asks of a kernel cost cache (`kernel_costs.KernelCosts`,
    which asks the flags pass for a tile's flags: named structurally, not imported)."""

    def stats(self, sig: Signature) -> Any: ...
    def space(self, sig: Signature) -> Space: ...
    def problem(self, sig: Signature, tile: Any) -> str | None: ...


def default_flags(gemm_columns: int | None, tile: tuple[int, ...], hw: Hardware,
                  tile_columns: int | None = None) -> Flags:
    """Double buffering, no unrolling, MXUs split over columns when the tile has a block of
    128 columns per MXU, else over rows. `tile_columns` gives the columns of a `Bounds`
    tile's block (which `tile` does not spell out)."""
    if gemm_columns is None:
        return DEFAULT_FLAGS
    cols = tile_columns if tile_columns is not None else tile[1]
    split = "n" if cols // hw.mxu_dim >= hw.mxus else "m"
    return Flags(double_buffer=True, unroll=1, mxu_split=split)


def bounds_columns(kernels: KernelFacts, sig: Signature, tile: object) -> int | None:
    """Output columns of a `Bounds` tile's block on the MXU (None for other tiles)."""
    if not isinstance(tile, Bounds) or kernels.stats(sig).gemm is None:
        return None
    space = kernels.space(sig)
    if space.cols is None or kernels.problem(sig, tile):
        return None
    return plan(space, tile).ext[space.cols]
