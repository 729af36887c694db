"""Search strategies behind one ask/tell interface: `create("anneal", **opts)`.

`CATALOGUE` names every strategy (the module of the same name here registers it) with a
one-line description. `create` imports the modules it lists, so a strategy missing from
it cannot be created, and `superopt tune --help` lists the strategies from it without
importing them (numpy and the simulator: a third of a second on every command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from superopt.xtat.strategies.base import STRATEGIES, SearchStrategy, create, register

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

_LAZY = ("STRATEGIES", "SearchStrategy", "create", "register")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from superopt.xtat.strategies import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CATALOGUE", "DEFAULT_STRATEGY", "STRATEGIES", "SearchStrategy", "create", "register"]
