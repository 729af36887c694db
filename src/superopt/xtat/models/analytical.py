"""The analytical baseline: the legacy default compiler's roofline model, as it used it.

A kernel's time is `KernelCosts.analytical_time(sig, tile)` (compute + memory - 0.95 x
min(compute, memory) + launch, memory counting the tile's operand re-reads; DESIGN.md
section 8). Flags do not enter it. The default compiler now minimises a finer estimate
(`tiling.DEFAULT_TILINGS`); this model stays the untrained baseline the learned ones are
compared against.
Ranking follows that compiler's order: the estimate rounded to picoseconds, ties
by grid steps (fewer first), then by option order. Nothing is trained.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from superopt.xtat.models.base import CostModel, Item, register


@register("analytical")
class Analytical(CostModel):
    trainable = False

    def predict_items(self, its: Sequence[Item]) -> np.ndarray:
        kc = self.feat.kc
        return np.asarray([kc.analytical_time(s, t) for s, t, _ in its], dtype=np.float64)

    def score_items(self, its: Sequence[Item]) -> np.ndarray:
        # Picoseconds as the default compiler rounds them, then fewer steps first (the
        # steps enter as a fraction below one picosecond).
        t = np.round(self.predict_items(its) * 1e12)
        if not len(its):
            return t
        steps = np.asarray([self._steps(s, ti) for s, ti, _ in its], dtype=np.float64)
        return t + steps / (steps.max() + 1.0)

    def _steps(self, sig: object, tile: object) -> float:
        from superopt.tpu_sim import DEFAULT_FLAGS
        from superopt.xtat.models.features import TILE_FEATURES

        row = self.feat.tile_row(sig, tile, DEFAULT_FLAGS)  # type: ignore[arg-type]
        return float(2.0 ** row[TILE_FEATURES.index("steps")] - 1.0)


__all__ = ["Analytical"]
