"""`KernelCosts`: one hardware preset's per-kernel costs and default tiles, cached by signature.

The compiler passes and the driver share it (the layout pass interns signatures through
it, the flags pass asks it for a `Bounds` tile's columns, the driver asks it for default
tiles and costs). It sits with the passes because it memoises the tiling pass's choice
(`tiling.default_tile`); what it caches comes from the kernel cost model below it
(`kernel_time`, `bounds`). `Simulator.kernels` is the instance a simulator owns.
(Moved out of `simulator` so that the passes can name it without importing the driver.)
"""

from __future__ import annotations

from collections.abc import Sequence

from superopt.tpu_sim import bounds as bounds_module
from superopt.tpu_sim import tiling
from superopt.tpu_sim.bounds import Bounds, Space
from superopt.tpu_sim.config import Flags, Tile
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_time import (
    KernelCost,
    KernelStats,
    analytical,
    analytical_compute,
    grid,
    kernel_cost,
    kernel_stats,
    tile_problem,
)
from superopt.tpu_sim.signature import Signature


class KernelCosts:
    """Kernel statistics, costs and default tiles for one hardware preset, cached by kernel
    signature (and tile and flags). Caches are bounded: they are cleared when full.
    (Was `cost.CostModel`; that name is kept for the learned cost models.)"""

    def __init__(self, hw: Hardware, max_entries: int = 1 << 20) -> None:
        self.hw = hw
        self.max_entries = max_entries
        self._stats: dict[Signature, KernelStats] = {}
        self._costs: dict[tuple[Signature, Tile, Flags], KernelCost] = {}
        self._tiles: dict[tuple[Signature, Flags], Tile] = {}
        self._spaces: dict[Signature, Space] = {}
        self._canon: dict[Signature, Signature] = {}
        self._names: dict[Signature, str] = {}
        self.hits = 0
        self.misses = 0

    def intern(self, sig: Signature) -> Signature:
        """The cached instance equal to `sig` (so later lookups compare by identity)."""
        known = self._canon.get(sig)
        if known is None:
            if len(self._canon) >= self.max_entries:
                self._canon.clear()
                self._names.clear()
            known = self._canon[sig] = sig
        return known

    def stats(self, sig: Signature) -> KernelStats:
        s = self._stats.get(sig)
        if s is None:
            if len(self._stats) >= self.max_entries:
                self._stats.clear()
            s = self._stats[sig] = kernel_stats(sig, self.hw)
        return s

    def space(self, sig: Signature) -> Space:
        """The kernel's iteration space for XLA-style `Bounds` tiles (see `bounds`)."""
        sp = self._spaces.get(sig)
        if sp is None:
            if len(self._spaces) >= self.max_entries:
                self._spaces.clear()
            sp = self._spaces[sig] = bounds_module.analyse(sig.key, self.stats(sig).hero)
        return sp

    def problem(self, sig: Signature, tile: Tile) -> str | None:
        """Why `tile` is not a tile of the kernel (shape only; VMEM is checked by `cost`)."""
        if isinstance(tile, Bounds):
            return bounds_module.problem(self.space(sig), tile)
        return tile_problem(self.stats(sig), tile)

    def analytical_time(self, sig: Signature, tile: Tile) -> float:
        """The default compiler's analytical estimate of the kernel under `tile` (compute is
        tile-independent; memory counts the tile's operand re-reads)."""
        stats = self.stats(sig)
        if isinstance(tile, Bounds):
            pl = bounds_module.plan(self.space(sig), tile)
            _, _, in_b, out_b = bounds_module.transfers(self.space(sig), pl)
            moved = in_b + out_b
        else:
            gr = grid(stats, tile)
            moved = gr.in_bytes + gr.out_bytes
        return analytical(analytical_compute(stats, self.hw), moved / self.hw.hbm_bytes_per_s,
                          self.hw)

    def tile_rank(self, sig: Signature, tile: tuple[int, ...]) -> tuple:
        """The default compiler's order of a kernel's (tm, tn, tk) or (rows,) tiles
        (`tiling.tile_rank`): analytical time, then fewer grid steps, then larger."""
        return tiling.tile_rank(self.analytical_time(sig, tile),
                                grid(self.stats(sig), tile).steps, tile)

    def default_choice(self, sig: Signature, tiles: Sequence[Tile], flags: Flags) -> Tile:
        """The default compiler's pick among candidate tiles (`tiling.default_choice`)."""
        return tiling.default_choice(tiles, lambda t: self.cost(sig, t, flags),
                                     lambda t: self.analytical_time(sig, t))

    def cost(self, sig: Signature, tile: Tile, flags: Flags) -> KernelCost:
        key = (sig, tile, flags)
        c = self._costs.get(key)
        if c is None:
            self.misses += 1
            if len(self._costs) >= self.max_entries:
                self._costs.clear()
            space = self.space(sig) if isinstance(tile, Bounds) else None
            c = self._costs[key] = kernel_cost(self.stats(sig), tile, flags, self.hw, space)
        else:
            self.hits += 1
        return c

    def name(self, sig: Signature) -> str:
        """The kernel's ops in order, each once: "conv2d+batch_norm+relu"."""
        got = self._names.get(sig)
        if got is None:
            got = self._names[sig] = "+".join(dict.fromkeys(self.stats(sig).ops))
        return got

    def default_tile(self, sig: Signature, flags: Flags) -> Tile:
        """The default compiler's tile of the kernel (`tiling.default_tile`), cached."""
        key = (sig, flags)
        t = self._tiles.get(key)
        if t is None:
            t = tiling.default_tile(self.stats(sig), flags, self.hw)
            if len(self._tiles) >= self.max_entries:
                self._tiles.clear()
            self._tiles[key] = t
        return t


__all__ = ["KernelCosts"]
