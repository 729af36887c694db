"""The tuner's passes and pipeline: the default candidate is the default compiler's
program, every candidate is a valid compiled program whose time the simulator agrees
with, XTAT-M carries choices across rebuilt stages, and incremental rebuilds equal full
ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from superopt import zoo
from superopt.tpu_sim import compile_default, problems, simulate
from superopt.xtat.session import open_session
from superopt.xtat.space import EMPTY, PassConfig
from superopt.xtat.stage import Candidate
from superopt.xtat.store import ConfigStore

MODELS = ["resnet18", "bert-small", "squeezenet"]


@pytest.fixture(scope="module", params=MODELS)
def session(request: pytest.FixtureRequest):
    return open_session({"model": request.param})


def test_default_candidate_is_the_default_compiler(session) -> None:
    # Independent reference: the simulator's own compile_default + simulate path.
    ref = simulate(compile_default(session.graph, session.sim.hw)).time
    assert session.runner.time(session.default) == ref
    assert all(len(c) == 0 for c in session.default.configs)


def test_sites_have_their_default_among_options(session) -> None:
    cand = session.default
    for j, p in enumerate(session.pipeline.passes):
        sites = p.sites(cand.stages[j])
        for s in sites.values():
            assert s.default in s.options
        keys = list(sites)
        assert len(keys) == len(set(keys))


def _random_candidates(session, n: int, changes: int, seed: int) -> list[Candidate]:
    from superopt.xtat.context import TuneContext

    ctx = TuneContext(session.pipeline, session.default, np.random.default_rng(seed))
    out = []
    for _ in range(n):
        out.append(ctx.mutate(session.default, session.pipeline.names, changes))
    return out


def test_random_candidates_are_valid_and_timed_as_the_simulator_times_them(session) -> None:
    for cand in _random_candidates(session, 12, 3, seed=1):
        compiled = session.runner.compile(cand)
        t = session.runner.time(cand)
        # A tile that does not fit VMEM under the chosen flags is the only way to fail.
        found = problems(compiled)
        assert found == [] if math.isfinite(t) else all("VMEM" in p for p in found)
        ref = simulate(compiled, sim=session.sim).time
        assert t == ref or (math.isinf(t) and math.isinf(ref))


def test_checked_pipeline_lints_every_stage() -> None:
    from superopt.xtat.session import make_pipeline

    s = open_session({"model": "resnet18"})
    checked = make_pipeline(s.sim, None, check=True)
    cand = checked.initial(s.graph)
    for c in _random_candidates(s, 4, 2, seed=3):
        rebuilt = checked.from_configs(s.graph, c.configs)
        assert rebuilt.key == c.key
    assert cand.key == s.default.key


def test_incremental_fusion_equals_a_fresh_build() -> None:
    # No rewrite plan (plan_budget 0): the plan search on inception_v3 took ~90 s per
    # session and plays no part in how fusion is rebuilt.
    spec = {"model": "inception_v3", "plan_budget": 0}
    s = open_session(spec)
    cands = _random_candidates(s, 10, 4, seed=5)
    fresh = open_session(dict(spec))  # no memo shared with `s`
    for c in cands:
        again = fresh.pipeline.from_configs(fresh.graph, c.configs)
        assert again.final.partition == c.final.partition
        assert fresh.runner.time(again) == s.runner.time(c)


def test_tile_choice_survives_a_fusion_change_elsewhere() -> None:
    s = open_session({"model": "resnet18"})
    p = s.pipeline
    t = p.index("tiling")
    sites = p.passes[t].sites(s.default.stages[t]).tunable
    site = max(sites, key=lambda x: x.weight)
    pick = next(o for o in site.options if o != site.default)
    cand = p.with_choice(s.default, "tiling", site.key, pick)
    f = p.index("fusion")
    fusion_sites = p.passes[f].sites(cand.stages[f]).tunable
    # A fusion flip whose kernels do not include the tuned kernel's signature.
    for fs in fusion_sites:
        other = p.with_choice(cand, "fusion", fs.key, not fs.default)
        if site.key in other.final.sig_keys:
            assert other.config("tiling").choices.get(site.key) == pick
            return
    pytest.fail("no fusion change kept the tuned kernel")


def test_xtat_m_moves_a_fusion_choice_through_origin_after_a_layout_change() -> None:
    s = open_session({"model": "resnet18"})
    p = s.pipeline
    f, lay = p.index("fusion"), p.index("layout")
    base = s.default
    # Choose a non-default fusion decision, then change an upstream layout so that the
    # node's structural hash (its key) changes; the choice must follow its source node.
    layout_sites = p.passes[lay].sites(base.stages[lay]).tunable
    moved = 0
    for ls in layout_sites[:6]:
        option = next(o for o in ls.options if o is not None)
        after_layout = p.with_choice(base, "layout", ls.key, option)
        new_sites = p.passes[f].sites(after_layout.stages[f])
        old_sites = p.passes[f].sites(base.stages[f])
        changed_keys = [k for k in old_sites if k not in new_sites
                        and len(old_sites[k].options) > 1]
        if not changed_keys:
            continue
        key = changed_keys[-1]
        fs = old_sites[key]
        with_fusion = p.with_choice(base, "fusion", key, not fs.default)
        configs = list(with_fusion.configs)
        configs[lay] = after_layout.configs[lay]
        rebuilt = p.build(with_fusion, configs)
        targets = [n for n in new_sites.by_sources(fs.sources)
                   if len(n.options) > 1 and n.default == fs.default]
        got = rebuilt.config("fusion").choices
        if targets:
            assert any(got.get(n.key) == (not fs.default) for n in targets)
            moved += 1
    assert moved, "no layout change re-keyed a fusion site with a carried choice"


def test_store_supplies_choices_for_new_sites() -> None:
    s = open_session({"model": "resnet18"})
    p = s.pipeline
    t = p.index("tiling")
    site = max(p.passes[t].sites(s.default.stages[t]).tunable, key=lambda x: x.weight)
    pick = next(o for o in site.options if o != site.default)
    best = p.with_choice(s.default, "tiling", site.key, pick)
    store = ConfigStore()
    store.record(best)
    # A stage without the site, then one with it again: the store brings the choice back.
    fresh = PassConfig.of({})
    repaired = p.repair(p.passes[t], best.stages[t], fresh, _stage_without(s, site.key), store)
    assert repaired.choices.get(site.key) == pick
    assert p.repair(p.passes[t], best.stages[t], fresh, best.stages[t], store).choices == {}


def _stage_without(s, key: str):
    # A tiling stage of another model has none of resnet18's kernel signatures... except
    # shared ones; pick one that lacks the key.
    for m in ("bert-small", "squeezenet"):
        o = open_session({"model": m})
        st = o.default.stages[o.pipeline.index("tiling")]
        if key not in o.pipeline.passes[o.pipeline.index("tiling")].sites(st):
            return st
    raise AssertionError("every other model has the key")


def test_empty_configs_rebuild_the_default() -> None:
    s = open_session({"model": "squeezenet"})
    again = s.pipeline.from_configs(s.graph, [EMPTY] * 5)
    assert again.key == s.default.key
    assert s.runner.time(again) == s.runner.time(s.default)


def test_zoo_graph_untouched_by_tuning() -> None:
    g = zoo.build("resnet18")
    h = g.structural_hash
    s = open_session({"model": "resnet18"}, graph=g)
    _random_candidates(s, 5, 3, seed=9)
    assert g.structural_hash == h


def test_multi_output_fusion_is_honoured_valid_and_simulated_alike() -> None:
    s = open_session({"model": "inception_v3"})
    p = s.pipeline
    f = p.index("fusion")
    sites = [x for x in p.passes[f].sites(s.default.stages[f]).tunable if "multi" in x.options]
    assert sites
    for site in sites[:6]:
        cand = p.with_choice(s.default, "fusion", site.key, "multi")
        written = [v for v in cand.final.fusion.values()
                   if isinstance(v, int) and not isinstance(v, bool)]
        assert len(written) == 1  # the node is an extra output of one later kernel
        compiled = s.runner.compile(cand)
        assert problems(compiled) == []
        assert simulate(compiled, sim=s.sim).time == s.runner.time(cand)
