"""Helpers shared by the tuner's tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from superopt.xtat.runner import SimRunner


def _per_kernel_best(p, runner, base) -> tuple[float, dict[str, object]]:
    """Independently of any strategy: per signature of `base`, the least simulator cost
    over its tile options (each with the flags the default compiler gives that tile),
    summed over `base`'s kernels, and the tile reaching it."""
    t = p.index("tiling")
    stage = base.stages[t]
    total, best = 0.0, {}
    for key in base.final.sig_keys:
        site = p.passes[t].sites(stage)[key]
        timed = []
        for o in site.options:
            c = p.with_choice(base, "tiling", key, o)
            kt = runner.time(c) and c.final.memo["kernel_times"][key]
            timed.append((kt, o))
        kt, o = min(timed, key=lambda e: e[0])
        best[key] = o
        total += kt
    return total, best


@pytest.fixture
def per_kernel_best() -> Callable:
    return _per_kernel_best


def _single_moves(p, runner, base, passes) -> list[float]:
    """Independently of any strategy: the simulator time of every single move of `base`
    (one site of `passes` set to another option)."""
    times = []
    for name in passes:
        j = p.index(name)
        for site in p.passes[j].sites(base.stages[j]).tunable:
            now = base.config(name).choices.get(site.key, site.default)
            times += [runner.time(p.with_choice(base, name, site.key, o))
                      for o in site.options if o != now]
    return times


@pytest.fixture
def single_moves() -> Callable:
    return _single_moves


class _Uphill(SimRunner):
    """Every change makes the program slower: 1% per changed choice."""

    def measure(self, candidate, seed: int) -> float:
        return 1.0 + 0.01 * sum(candidate.changed().values())


@pytest.fixture
def uphill() -> type[SimRunner]:
    return _Uphill
