"""The kernel-level passes: a tile (tiling) and code-generation flags (flags) per kernel.

Both key their sites by the kernel's signature digest, so kernels that are the same
computation on the same layouts (repeated layers) share one choice, and a choice
survives any change elsewhere in the graph. Tiling runs first: its default is the default
compiler's argmin of the analytical model (with default flags); the flags default depends
on the chosen tile, as the default compiler's does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from superopt.tpu_sim import (
    DEFAULT_FLAGS,
    Flags,
    Simulator,
    all_flags,
    bounds_columns,
    default_flags,
    tile_options,
)
from superopt.xtat.passes.base import PassError, PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site
from superopt.xtat.stage import Stage

SINGLE_BUFFER = Flags(double_buffer=False)
# Width of the analytical model's price bands in the tile order (`TileSites`): within a
# band the model's price says less than the grid's step count.
BAND = 0.05


@lru_cache(maxsize=256)
def flags_from_short(text: str) -> Flags:
    """The inverse of `Flags.short()` ("db/u2/n")."""
    try:
        buf, unroll, split = text.split("/")
        flags = Flags(buf == "db", int(unroll[1:]), split)
    except ValueError:
        raise PassError(f"bad flags {text!r}: expected db|sb/u<unroll>/<split>") from None
    if buf not in ("db", "sb") or not unroll.startswith("u") or flags.problem():
        raise PassError(f"bad flags {text!r}: {flags.problem() or 'expected db|sb/u<n>/<split>'}")
    return flags


class _KernelPass(TunablePass):
    """Sites per distinct kernel signature. What a site offers depends only on its
    signature (and, for flags, the tile), so it is kept per key in the pass object and a
    new stage (after any fusion change) only counts its kernels. A site's choice changes
    its kernels' time and nothing else (`per_kernel`)."""

    per_kernel = True

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self._info: dict[object, tuple[tuple, object, float]] = {}

    def info(self, stage: Stage, key: str, sig: object) -> tuple[tuple, object, float]:
        """(options, default, time of one kernel under the default) of a site."""
        raise NotImplementedError

    def list_sites(self, stage: Stage) -> list[Site]:
        first: dict[str, int] = {}
        count: dict[str, int] = {}
        for i, key in enumerate(stage.sig_keys):
            if key in first:
                count[key] += 1
            else:
                first[key] = i
                count[key] = 1
        out = []
        kernels = stage.partition.kernels
        for key, i in first.items():
            options, default, weight = self.info(stage, key, stage.signatures[i])
            root = kernels[i].root
            out.append(Site(key, options, default, stage.sources(root),
                            f"%{root} {len(kernels[i].nodes)} ops", count[key] * weight))
        return out

    def _cached(self, memo_key: object, make: Callable[[], tuple[tuple, object, float]]
                ) -> tuple[tuple, object, float]:
        got = self._info.get(memo_key)
        if got is None:
            if len(self._info) > 1 << 18:
                self._info.clear()
            got = self._info[memo_key] = make()
        return got


class TileSites(_KernelPass):
    name = "tiling"
    controls = "tile"
    # How the options are ordered (a search with `top_k` tries the first k): results
    # measured under another order are not comparable (benchmarks key them by it).
    ORDER = ("default first; fits double-buffered first; interleaved: analytical (ties: "
             f"fewer grid steps, larger tile) and {BAND:.0%} analytical bands by fewer steps")

    def info(self, stage: Stage, key: str, sig: object) -> tuple[tuple, object, float]:
        def make() -> tuple[tuple, object, float]:
            kc = self.sim.kernels
            default = kc.default_tile(sig, DEFAULT_FLAGS)
            # Tiles that fit VMEM under no flags (single buffering needs the least) are
            # never worth a measurement.
            opts = [t for t in tile_options(kc.stats(sig))
                    if t == default or kc.cost(sig, t, SINGLE_BUFFER).valid]
            if default not in opts:
                return (default,), default, kc.cost(sig, default, DEFAULT_FLAGS).time
            opts.remove(default)
            rank = {t: kc.option_rank(sig, t) for t in opts}
            # A tile that fits VMEM only single-buffered is rejected under the default
            # flags, which the kernel passes measure new tiles under: such a tile's round
            # is lost to its kernel (vgg19 b16's 512-channel convs: 8 of their first 12
            # tiles), so those come after every tile that fits double-buffered.
            fits = {t: kc.cost(sig, t, DEFAULT_FLAGS).valid for t in opts}
            # The default compiler's analytical order: a search with a budget per site
            # measures the likeliest first. Ties broken as that compiler breaks them
            # (`tiling.tile_rank`): fewer grid steps, then the larger tile. The model
            # prices every step alike, so ties are common; broken in ladder order, the
            # tiniest tiles (8 rows: 15x slower on vgg19 b16's convs) took most of a
            # kernel's top 12.
            exact = sorted(opts, key=lambda t: (not fits[t], rank[t]))
            # The model also ignores DMA efficiency and the MXU's shape, so a tile it
            # prices a few percent above its best may well be faster: within bands of
            # `BAND`, fewer grid steps first. Interleaved with the exact order, the first
            # 12 hold the best tile (under its best flags) of every kernel of the zoo's
            # default programs but a few of resnext50 b16's (0.3% of its kernels' time);
            # the exact order alone misses by 2.4% and 2.1% of the kernels' time on
            # csrnet and vgg19 at batch 16, the bands alone by 0.9% on csrnet b1.
            low = min((r[0] for r in rank.values()), default=0)

            def band(t: tuple) -> int:
                est = rank[t][0]
                return 0 if low <= 0 else math.floor(math.log(est / low) / math.log1p(BAND))
            coarse = sorted(opts, key=lambda t: (not fits[t], band(t), *rank[t][1:]))
            merged = dict.fromkeys(t for pair in zip(exact, coarse, strict=True) for t in pair)
            # Weight: the kernel's time under its default tile (most expensive first).
            return ((default, *merged), default, kc.cost(sig, default, DEFAULT_FLAGS).time)
        return self._cached(key, make)

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        sites = self.sites(stage)
        tiles = {k: config.choices.get(k, s.default) for k, s in sites.items()}
        return PassResult(stage.evolve(tiles=tiles), None, {"changed": len(config)})

    def requires(self, stage: Stage) -> None:
        if stage.partition is None:
            raise PassError("tiling needs the fusion pass's kernels")


class FlagSites(_KernelPass):
    name = "flags"
    controls = "flags"

    def info(self, stage: Stage, key: str, sig: object) -> tuple[tuple, object, float]:
        tile = stage.tiles[key]

        def make() -> tuple[tuple, object, float]:
            kc = self.sim.kernels
            g = kc.stats(sig).gemm
            dflt = default_flags(g.n if g is not None else None, tile, self.sim.hw,
                                 bounds_columns(kc, sig, tile)).short()
            opts = tuple(f.short() for f in all_flags(g is not None))
            return (opts if dflt in opts else (dflt, *opts), dflt,
                    kc.cost(sig, tile, flags_from_short(dflt)).time)
        return self._cached((key, tile), make)

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        sites = self.sites(stage)
        flags = {k: flags_from_short(config.choices.get(k, s.default)) for k, s in sites.items()}
        return PassResult(stage.evolve(flags=flags), None, {"changed": len(config)})

    def requires(self, stage: Stage) -> None:
        if stage.tiles is None:
            raise PassError("flags needs the tiling pass's tiles")


__all__ = ["FlagSites", "TileSites", "flags_from_short"]
