"""The search-strategy interface (ask/tell) and its factory.

A strategy proposes candidates (`ask`), is told their measured times (`tell`), and is
done when `ask` returns nothing. It works on the passes it is started with, through the
moves of its `TuneContext`; everything random comes from the context's seeded generator,
so a run is reproducible from its seed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from superopt.ir.errors import IRError
from superopt.xtat.context import TuneContext
from superopt.xtat.stage import Candidate
from superopt.xtat.strategies.catalogue import CATALOGUE


class SearchStrategy(ABC):
    name = "strategy"
    # Whether a cost model may rank its proposals and measure only the best few
    # (`superopt.xtat.models.topk`): not for strategies whose every proposal carries
    # information the next ones rely on (per-kernel rounds read from profiles).
    rankable = True

    def __init__(self, **opts: Any) -> None:
        self.opts = opts
        self.ctx: TuneContext | None = None
        self.passes: tuple[str, ...] = ()
        self.budget = 0

    def start(self, ctx: TuneContext, passes: Sequence[str], budget: int) -> None:
        self.ctx, self.passes, self.budget = ctx, tuple(passes), budget

    @abstractmethod
    def ask(self, n: int) -> list[Candidate]:
        """Up to `n` candidates to measure next (empty: the strategy is done)."""

    def tell(self, candidates: Sequence[Candidate], times: Sequence[float]) -> None:
        """The measured times of the candidates of the last `ask` (stateless strategies
        ignore them)."""
        return None


STRATEGIES: dict[str, Callable[..., SearchStrategy]] = {}


def register(name: str) -> Callable[[type[SearchStrategy]], type[SearchStrategy]]:
    def deco(cls: type[SearchStrategy]) -> type[SearchStrategy]:
        STRATEGIES[name] = cls
        cls.name = name
        return cls
    return deco


def create(name: str, **opts: Any) -> SearchStrategy:
    """A strategy by name, one of `superopt.xtat.strategies.CATALOGUE` (whose modules are
    imported here, registering them)."""
    for module in CATALOGUE:
        import_module(f"superopt.xtat.strategies.{module}")
    cls = STRATEGIES.get(name)
    if cls is None:
        raise IRError(f"unknown strategy {name!r}: expected one of {', '.join(sorted(STRATEGIES))}")
    return cls(**opts)


__all__ = ["STRATEGIES", "SearchStrategy", "create", "register"]
