"""The names of the search strategies, each with a one-line description, and the default.

Kept apart from `base` and from the package's `__init__` so that both read it without
importing each other (`base.create` imports the modules it lists; `superopt tune --help`
lists them without importing numpy or the simulator).
"""

from __future__ import annotations

CATALOGUE: dict[str, str] = {
    "random": "the default with 1-4 random changes",
    "exhaustive": "every option of one site at a time, best kept",
    "parallel": "per-kernel sites: every kernel's next option in one profiled run",
    "revisit": "each changed graph choice reverted, its kernels tuned, then compared",
    "anneal": "simulated annealing",
    "sweep": "every single-site move in random order, the first faster one kept",
    "ranked": "the sweep with its moves ordered by the analytical estimate",
    "evolution": "evolutionary search",
    "mbo": "model-based: an ensemble of regressors, its acquisition optimised by evolution",
    "autotvm": "AutoTVM-style: a ranking model, annealing on it",
    "guided": "fusion moves where a learned local-advantage model predicts gains",
}

# The graph phases' strategy unless one is named (`superopt tune --strategy`).
DEFAULT_STRATEGY = "sweep"


__all__ = ["CATALOGUE", "DEFAULT_STRATEGY"]
