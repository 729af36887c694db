"""The kernel passes' sites: tiles offered in the default compiler's analytical order,
ties broken as that compiler breaks them (fewer grid steps, then the larger tile), so
that a search with a few tiles per kernel (`top_k`) does not spend them on the smallest
tiles, which the analytical model prices like the best ones."""

from __future__ import annotations

import itertools

from superopt.tpu_sim import DEFAULT_FLAGS
from superopt.xtat.session import open_session


def _tile_sites(model: str, batch: int):
    """(kernel costs, [(signature, tiling site)]) of the model's default candidate."""
    s = open_session({"model": model, "batch": batch})
    p = s.pipeline
    t = p.index("tiling")
    stage = s.default.stages[t]
    sig_of = dict(zip(stage.sig_keys, stage.signatures, strict=True))
    return s.sim.kernels, [(sig_of[x.key], x) for x in p.passes[t].sites(stage).tunable]


def test_tiles_come_in_analytical_order_with_fewer_steps_first_on_ties() -> None:
    kc, sites = _tile_sites("vgg19", 16)
    ties = 0
    for sig, site in sites:
        assert site.options[0] == site.default  # the default compiler's pick first
        rest = site.options[1:]
        keys = [(round(kc.analytical_time(sig, t) * 1e12), kc.cost(sig, t, DEFAULT_FLAGS).steps)
                for t in rest]
        assert keys == sorted(keys)
        ties += sum(a[0] == b[0] for a, b in itertools.pairwise(keys))
    assert ties > 0  # the model ties often: the tie-break is exercised


def test_among_equally_priced_tiles_the_fewest_steps_come_before_the_tiniest() -> None:
    # vgg19 b16's convs over 256+ channels: every tm from 8 rows up ties in the model
    # (the weights are read once whatever tm is); the 8-row tile takes the most grid
    # steps and is many times slower in the simulator, so it comes late in its tie.
    kc, sites = _tile_sites("vgg19", 16)
    checked = 0
    for sig, site in sites:
        g = kc.stats(sig).gemm
        if g is None or g.k_pad < 2304:
            continue
        price = {t: round(kc.analytical_time(sig, t) * 1e12) for t in site.options}
        first = site.options[1]
        tie = [t for t in site.options[1:] if price[t] == price[first]]
        if len({t[0] for t in tie}) <= 3:  # the FC layers: 16 rows, one tm
            continue
        tiny = min(tie, key=lambda t: t[0])
        steps = {t: kc.cost(sig, t, DEFAULT_FLAGS).steps for t in tie}
        assert tie.index(tiny) >= len(tie) // 2
        assert all(steps[t] <= steps[tiny] for t in tie[:tie.index(tiny)])
        assert kc.cost(sig, tie[0], DEFAULT_FLAGS).time < kc.cost(sig, tiny, DEFAULT_FLAGS).time
        checked += 1
    assert checked >= 2
