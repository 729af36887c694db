"""A fake kernel cost over a knob space, for the tests that drive strategies through the
TVM shim without TVM."""

from __future__ import annotations

from collections.abc import Callable


def knob_cost(space, target: dict, calls: list | None = None) -> Callable[[dict], float]:
    """A cost with one optimum (`target`): each knob off it multiplies the time by up to
    1.5, more the further down its options it is. `calls` collects every config timed."""
    def measure(config: dict) -> float:
        if calls is not None:
            calls.append(dict(config))
        t = 1.0
        for s in space.sites:
            if config[s.key] != target[s.key]:
                i, j = s.options.index(config[s.key]), s.options.index(target[s.key])
                t *= 1.0 + 0.5 * min(1.0, abs(i - j) / 4)
        return t
    return measure
