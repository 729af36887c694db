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
from superopt.tpu_sim.config import DEFAULT_FLAGS, MXU_SPLITS, Flags, Tile
from superopt.tpu_sim.flags import bounds_columns, default_flags
from superopt.tpu_sim.hardware import Hardware
from superopt.tpu_sim.kernel_time import (
    KernelCost,
    KernelStats,
    analytical,
    analytical_compute,
    compiler_estimate,
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

    def __init__(self, hw: Hardware, max_entries: int = 1 << 20,
                 default_tiling: str = tiling.DEFAULT_TILING) -> None:
        tiling.check_default_tiling(default_tiling)
        self.hw = hw
        self.default_tiling = default_tiling
        self.max_entries = max_entries
        self._stats: dict[Signature, KernelStats] = {}
        self._costs: dict[tuple[Signature, Tile, Flags], KernelCost] = {}
        self._tiles: dict[tuple[Signature, Flags], Tile] = {}
        # The same picks by the kernel's work: kernels of other signatures often do the
        # same work (a search's rewritten graphs: a third of its new kernels).
        self._tiles_by_stats: dict[tuple[KernelStats, Flags], Tile] = {}
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

    def tile_flags(self, sig: Signature, tile: Tile) -> Flags:
        """The flags the default compiler's flags pass gives the kernel under `tile`."""
        g = self.stats(sig).gemm
        return default_flags(g.n if g is not None else None, tile, self.hw,
                             bounds_columns(self, sig, tile))

    def estimate(self, sig: Signature, tile: Tile, flags: Flags | None = None) -> float:
        """What the default compiler's tiling pass minimises (`tiling.DEFAULT_TILINGS`):
        `kernel_time.compiler_estimate` ("xla"), or `analytical_time` ("legacy"). Default
        flags (or None) stand for the flags the flags pass would pick for `tile`."""
        if self.default_tiling == "legacy":
            return self.analytical_time(sig, tile)
        if flags is None or flags == DEFAULT_FLAGS:
            flags = self.tile_flags(sig, tile)
        space = self.space(sig) if isinstance(tile, Bounds) else None
        return compiler_estimate(self.stats(sig), tile, flags, self.hw, space)

    def tile_rank(self, sig: Signature, tile: tuple[int, ...]) -> tuple:
        """The default compiler's order of a kernel's (tm, tn, tk) or (rows,) tiles
        (`tiling.tile_rank`): its estimate, then fewer grid steps, then larger."""
        return tiling.tile_rank(self.estimate(sig, tile), grid(self.stats(sig), tile).steps,
                                tile)

    def option_rank(self, sig: Signature, tile: tuple[int, ...]) -> tuple:
        """How a tuner should order a kernel's tile options: `tile_rank`, except that under
        the "xla" heuristic each tile is priced under its best MXU split (double-buffered),
        since the flags are tuned after it: a tile that is fastest split over the
        contraction would otherwise rank by the split the defaults give it."""
        if self.default_tiling == "legacy" or self.stats(sig).gemm is None:
            return self.tile_rank(sig, tile)
        stats = self.stats(sig)
        est = min(compiler_estimate(stats, tile, Flags(True, 1, split), self.hw)
                  for split in MXU_SPLITS)
        return tiling.tile_rank(est, grid(stats, tile).steps, tile)

    def default_index(self, sig: Signature, tiles: Sequence[Tile],
                      flags: Flags | None = None) -> int:
        """Which of the candidate `tiles` the default compiler picks (`tiling.
        default_choice`); None flags: each tile under the flags the flags pass gives it."""
        def cost(t: Tile) -> KernelCost:
            return self.cost(sig, t, flags if flags is not None else self.tile_flags(sig, t))
        return tiling.default_choice(tiles, cost, lambda t: self.estimate(sig, t, flags))

    def default_choice(self, sig: Signature, tiles: Sequence[Tile],
                       flags: Flags | None = None) -> Tile:
        """The default compiler's pick among candidate tiles (`default_index`)."""
        return tiles[self.default_index(sig, tiles, flags)]

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
            # The pick reads the signature only through its stats: the options are plain
            # tiles (`tile_options`), whose estimate and default flags depend on the stats,
            # the flags and the hardware alone (only a `Bounds` tile reads the space).
            stats = self.stats(sig)
            by_work = (stats, flags)
            t = self._tiles_by_stats.get(by_work)
            if t is None:
                t = tiling.default_tile(stats, flags, self.hw,
                                        lambda tile: self.estimate(sig, tile, flags))
                if len(self._tiles_by_stats) >= self.max_entries:
                    self._tiles_by_stats.clear()
                self._tiles_by_stats[by_work] = t
            if len(self._tiles) >= self.max_entries:
                self._tiles.clear()
            self._tiles[key] = t
        return t


__all__ = ["KernelCosts"]
