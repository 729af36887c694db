"""Why a tuned candidate is faster: the simulated time each changed decision gains.

`decisions(...)` reverts one non-default choice at a time (that site back to its pass
default, everything after it repaired as in the search) and reports the time the final
candidate loses; `passes(...)` does the same per pass (the whole pass back to its
default). Decisions interact (a tile choice may only pay off on the fused kernel a fusion
choice made), so the single-revert gains need not add up to the total: the table shows
the remainder as "interaction".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from superopt.xtat.pipeline import Pipeline
from superopt.xtat.runner import SimRunner
from superopt.xtat.space import EMPTY
from superopt.xtat.stage import Candidate


@dataclass(frozen=True)
class Decision:
    pass_name: str
    key: str
    label: str
    choice: object
    gain_s: float  # time lost when this decision alone reverts (inf: revert is invalid)


def decisions(pipeline: Pipeline, runner: SimRunner, best: Candidate) -> list[Decision]:
    base = runner.time(best)
    out = []
    for j, name in enumerate(best.names):
        p = pipeline.passes[j]
        sites = p.sites(best.stages[j])
        for key, choice in best.configs[j].items():
            site = sites[key]
            reverted = pipeline.build(best, [c.with_choice(site, site.default) if i == j else c
                                             for i, c in enumerate(best.configs)])
            out.append(Decision(name, key, p.describe(best.stages[j], site, choice), choice,
                                runner.time(reverted) - base))
    out.sort(key=lambda d: (-d.gain_s if math.isfinite(d.gain_s) else -math.inf,
                            d.pass_name, d.key))
    return out


def passes(pipeline: Pipeline, runner: SimRunner, best: Candidate
           ) -> dict[str, tuple[int, float]]:
    """Per pass: choices changed from its default, and the time lost when that pass alone
    goes back to its default (seconds)."""
    base = runner.time(best)
    out = {}
    for j, name in enumerate(best.names):
        n = len(best.configs[j])
        if not n:
            out[name] = (0, 0.0)
            continue
        configs = list(best.configs)
        configs[j] = EMPTY
        out[name] = (n, runner.time(pipeline.build(best, configs)) - base)
    return out


def waterfall_png(default_s: float, tuned_s: float, items: list[Decision], path: str | Path,
                  title: str, top: int = 15) -> Path:
    """Default time, minus each decision's gain (largest first, the rest grouped), plus
    the interaction remainder, down to the tuned time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finite = [d for d in items if math.isfinite(d.gain_s)]
    shown = finite[:top]
    rest = sum(d.gain_s for d in finite[top:])
    steps = [(f"{d.pass_name}: {d.label}"[:40], d.gain_s) for d in shown]
    if finite[top:]:
        steps.append((f"{len(finite) - top} more decisions", rest))
    interaction = (default_s - tuned_s) - sum(g for _, g in steps)
    steps.append(("interaction", interaction))
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(steps) + 2))
    level = default_s * 1e6
    ax.barh(0, level, color="grey")
    labels = ["default compiler"]
    for i, (label, gain) in enumerate(steps, start=1):
        g = gain * 1e6
        ax.barh(i, -g, left=level, color="C2" if g >= 0 else "C3")
        level -= g
        labels.append(label)
    ax.barh(len(steps) + 1, tuned_s * 1e6, color="C0")
    labels.append("tuned")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (us)")
    ax.set_title(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


__all__ = ["Decision", "decisions", "passes", "waterfall_png"]
