"""Search strategies behind one ask/tell interface: `create("anneal", **opts)`.

`CATALOGUE` (in `catalogue`) names every strategy (the module of the same name here registers it) with a
one-line description. `create` imports the modules it lists, so a strategy missing from
it cannot be created, and `superopt tune --help` lists the strategies from it without
importing them (numpy and the simulator: a third of a second on every command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from superopt.xtat.strategies.catalogue import CATALOGUE, DEFAULT_STRATEGY

if TYPE_CHECKING:
    from superopt.xtat.strategies.base import STRATEGIES, SearchStrategy, create, register

_LAZY = ("STRATEGIES", "SearchStrategy", "create", "register")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from superopt.xtat.strategies import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CATALOGUE", "DEFAULT_STRATEGY", "STRATEGIES", "SearchStrategy", "create", "register"]
