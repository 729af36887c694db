"""The screen's exact-evaluation budget (issue 49's equal information): a budgeted
predictor prices at most its limit of distinct candidates, and a tuner screened by the
exact simulated time measures nothing exactly slower than its incumbent while the budget
lasts."""

from __future__ import annotations

import math
from dataclasses import dataclass

from superopt.xtat.screen import Budgeted, screening
from superopt.xtat.session import open_session
from superopt.xtat.tuner import Tuner, make_schedule


@dataclass(frozen=True)
class Fake:
    key: str
    time: float


def test_budgeted_prices_at_most_its_limit_of_distinct_candidates() -> None:
    calls: list[str] = []

    def price(c: Fake) -> float:
        calls.append(c.key)
        return c.time

    b = Budgeted(price, 2)
    a, c, d = Fake("a", 3.0), Fake("c", 5.0), Fake("d", 7.0)
    assert b(a) == 3.0 and b(a) == 3.0  # a repeat is the cached price, not a new one
    assert b(c) == 5.0
    assert b(d) == 0.0  # past the limit: let through unpriced
    assert calls == ["a", "c"] and b.used == 2
    assert b(c) == 5.0  # candidates priced before keep their price


def test_an_exact_screen_spends_its_budget_and_keeps_slower_proposals_unmeasured() -> None:
    s = open_session({"model": "squeezenet", "default_tiling": "legacy"})
    # (exact time, the incumbent's when it was proposed, whether the screen priced it)
    measured: list[tuple[float, float, bool]] = []
    runner = s.runner
    exact = Budgeted(runner.time, 60)
    hook = screening(exact, margin=0.0)
    tuner = Tuner(s.pipeline, runner, s.default, seed=3, wrap=hook)
    evaluate = tuner.evaluate

    def spy(cands, limit):  # type: ignore[no-untyped-def]
        base = tuner.ctx.best or tuner.ctx.default
        for c in cands:
            measured.append((runner.time(c), runner.time(base), exact.priced(c)))
        return evaluate(cands, limit)

    tuner.evaluate = spy  # type: ignore[method-assign]
    r = tuner.run(make_schedule("custom", ("tiling",), "random"), 40)
    assert exact.used == 60  # the whole budget was spent screening
    assert hook.screened() > 0
    # Every measured proposal the screen priced was at most the incumbent's exact time;
    # past the budget, proposals go through unpriced, slower ones included.
    priced = [(t, inc) for t, inc, p in measured[1:] if p]
    assert priced and all(t <= inc for t, inc in priced)
    assert any(t > inc for t, inc, p in measured[1:] if not p)
    assert math.isfinite(r.best_time) and r.best_time <= r.default_time


def test_a_skipped_phase_keeps_its_strategy_unscreened() -> None:
    from superopt.xtat.strategies import create
    from superopt.xtat.tuner import KERNEL_PHASES

    hook = screening(lambda c: 0.0, skip=lambda ph: ph.name == "tiling")
    tiles, flags = KERNEL_PHASES[0], KERNEL_PHASES[1]
    inner = create("random")
    assert hook(inner, tiles) is inner
    assert hook(inner, flags) is not inner and hook(inner, flags).inner is inner
