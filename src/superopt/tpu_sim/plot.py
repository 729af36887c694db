"""Per-kernel roofline plot (PNG). matplotlib is imported only when a plot is drawn.

Each kernel is a point at its arithmetic intensity (useful FLOPs per HBM byte moved) and
achieved FLOP/s, sized by its share of the graph's time and coloured by what bounds it;
the roofline is min(peak, bandwidth x intensity), with the ridge point marked.
"""

from __future__ import annotations

import math
from pathlib import Path

from superopt.tpu_sim.simulate import Simulation

COLOURS = {"compute": "tab:red", "memory": "tab:blue", "overhead": "tab:gray"}


def roofline_png(sim: Simulation, path: str | Path, title: str | None = None) -> Path:
    """Draw the per-kernel roofline of `sim` to `path` and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hw = sim.hw
    path = Path(path)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    points = [r for r in sim.kernels if r.cost.bytes > 0 and r.cost.flops > 0
              and math.isfinite(r.time) and r.time > 0]
    xs = [r.intensity for r in points]
    lo = min([0.1, *xs]) / 2
    hi = max([10 * hw.ridge, *xs]) * 2
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(hw.peak_flops, hw.hbm_bytes_per_s * x) for x in grid], color="black",
            lw=1.5, label=f"roofline ({hw.name}: {hw.peak_flops / 1e12:.1f} TFLOP/s, "
                          f"{hw.hbm_bytes_per_s / 1e9:.0f} GB/s)")
    ax.axvline(hw.ridge, color="black", ls=":", lw=1)
    ax.annotate(f"ridge {hw.ridge:.0f} FLOP/B", (hw.ridge, hw.peak_flops / 30), rotation=90,
                fontsize=8, ha="right")
    total = sim.time if math.isfinite(sim.time) and sim.time > 0 else 1.0
    for bound, colour in COLOURS.items():
        sel = [r for r in points if r.bound == bound]
        if sel:
            ax.scatter([r.intensity for r in sel], [r.cost.flops / r.time for r in sel],
                       s=[20 + 600 * r.time / total for r in sel], c=colour, alpha=0.6,
                       edgecolors="black", linewidths=0.3, label=f"{bound}-bound kernels")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    achieved = [r.cost.flops / r.time for r in points] or [hw.peak_flops / 1e3]
    ax.set_ylim(min(achieved) / 3, hw.peak_flops * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title or f"{sim.name}: {sim.time * 1e3:.3f} ms, {len(sim.kernels)} kernels, "
                          f"{100 * sim.flops_fraction:.1f}% of peak")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
