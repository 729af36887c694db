"""The plan cache: TASO's plan searches kept on disk and replayed. A second pipeline on the
same cache file searches nothing and offers exactly the plan, variants and source plans
the first one found (same graphs, rules, costs); another budget or rule list misses; a
stored path that no longer replays is searched again; a search that found nothing is kept
too; bad files are one-line errors; `tune --db` keeps its searches so that `--resume` and
`--replay` run none. An eqsat plan is kept as its graph (its search stops on the clock):
rebuilt without searching, by a resumed run, a replay and a worker; the plan's search
prices with the session's default tile heuristic."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

import superopt.rewrite
from superopt.cli import main
from superopt.ir.graph import Graph, GraphBuilder
from superopt.rewrite import Matcher
from superopt.tpu_sim import Simulator
from superopt.xtat.passes.plan import RewritePlan
from superopt.xtat.plancache import PlanCache, PlanCacheError
from superopt.xtat.rules import rule_set
from superopt.xtat.session import make_pipeline
from xtat.plan_cases import merge3_rule, qkv


def _plan_pass(cache: PlanCache, budget: int = 20, rules: list | None = None) -> RewritePlan:
    library = list(rule_set(None).rules)
    pipe = make_pipeline(Simulator("v4"), Matcher(rules or [*library, merge3_rule()]),
                         plan_budget=budget)
    plan = pipe.passes[pipe.index("plan")]
    plan.cache = cache
    return plan


def _offers(plan: RewritePlan, graph: Graph) -> list[tuple]:
    """The plan and every other option of its site, as what a tuner sees of them."""
    p = plan.plan(graph)
    assert p is not None
    return [(option, v.graph.structural_hash, v.rules, v.only, v.dropped, v.cost_before,
             v.cost_after, v.steps)
            for option, v in [(p.option, p), *plan.variants(graph).items()]]


class _Counting:
    """A search function (by default superopt.rewrite.optimize), counting its calls."""

    def __init__(self, module: object = superopt.rewrite, name: str = "optimize") -> None:
        self.calls = 0
        self.real = getattr(module, name)

    def __call__(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self.real(*args, **kwargs)


def test_a_warm_cache_replays_every_search_and_offers_the_same_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = qkv(with_bn=True)
    search = _Counting()
    monkeypatch.setattr(superopt.rewrite, "optimize", search)
    cold_cache = PlanCache(tmp_path / "plans.sqlite")
    cold = _plan_pass(cold_cache)
    cold_offers = _offers(cold, graph)
    # The plan and the library's own search (PET's own is a variant already, but it is
    # searched to find that out).
    assert search.calls == cold_cache.misses >= 2 and cold_cache.hits == 0
    assert len(cold_cache) == search.calls
    cold_cache.close()
    search.calls = 0
    warm_cache = PlanCache(tmp_path / "plans.sqlite")
    warm = _plan_pass(warm_cache)
    assert _offers(warm, graph) == cold_offers
    assert search.calls == 0 and warm_cache.misses == 0
    assert warm_cache.hits == cold_cache.misses
    # The replayed plan's origin maps the planned graph back as the searched one does.
    assert warm.plan(graph).origin == cold.plan(graph).origin


def test_a_search_ctrl_c_cut_short_is_not_kept(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a plan search: TASO's search hands back its best so far
    (`stopped="interrupted"`), which must not be kept as the finished search that
    `--resume` would replay; the interrupt goes on to the tuner."""
    from dataclasses import replace

    real = superopt.rewrite.optimize

    def cut_short(*args: object, **kwargs: object) -> object:
        return replace(real(*args, **kwargs), stopped="interrupted")

    monkeypatch.setattr(superopt.rewrite, "optimize", cut_short)
    cache = PlanCache(tmp_path / "plans.sqlite")
    with pytest.raises(KeyboardInterrupt):
        _plan_pass(cache).plan(qkv(with_bn=True))
    assert len(cache) == 0


def test_another_budget_or_rule_list_misses_and_the_same_rules_hit(tmp_path: Path) -> None:
    graph = qkv(with_bn=True)
    cache = PlanCache(tmp_path / "plans.sqlite")
    _offers(_plan_pass(cache), graph)
    first = cache.misses
    _offers(_plan_pass(cache, budget=7), graph)
    assert cache.misses == 2 * first and cache.hits == 0
    library = list(rule_set(None).rules)
    _plan_pass(cache, rules=library[1:]).plan(graph)  # one rule fewer: another search
    assert cache.misses == 2 * first + 1 and cache.hits == 0
    # The library's rules alone are the first pass's library-only search, whatever
    # matcher holds them: keyed by content, it is found.
    _plan_pass(cache, rules=library).plan(graph)
    assert cache.misses == 2 * first + 1 and cache.hits == 1


def test_a_path_that_no_longer_replays_is_searched_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = qkv(with_bn=True)
    path = tmp_path / "plans.sqlite"
    cache = PlanCache(path)
    cold = _offers(_plan_pass(cache), graph)
    cache.close()
    con = sqlite3.connect(path)
    for key, text in con.execute("SELECT key, result FROM plans").fetchall():
        rec = json.loads(text)
        if rec["steps"]:
            rec["steps"] = [[rule, ["no-such-site"]] for rule, _ in rec["steps"]]
            con.execute("UPDATE plans SET result = ? WHERE key = ?", (json.dumps(rec), key))
    con.commit()
    con.close()
    search = _Counting()
    monkeypatch.setattr(superopt.rewrite, "optimize", search)
    cache = PlanCache(path)
    assert _offers(_plan_pass(cache), graph) == cold
    assert search.calls == cache.misses >= 1


def test_a_search_that_found_nothing_is_kept(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    b = GraphBuilder("plain")
    x = b.input("x", (64, 64))
    graph = b.build([b.op("relu", b.op("matmul", x, b.weight("w", (64, 64))))])
    search = _Counting()
    monkeypatch.setattr(superopt.rewrite, "optimize", search)
    cache = PlanCache(tmp_path / "plans.sqlite")
    assert _plan_pass(cache).plan(graph) is None
    assert search.calls == 1
    assert _plan_pass(cache).plan(graph) is None
    assert search.calls == 1 and cache.hits == 1


def test_bad_cache_files_are_one_line_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x00garbage" * 500)
    with pytest.raises(PlanCacheError, match="not a usable plan cache"):
        PlanCache(junk)
    with pytest.raises(PlanCacheError, match="is a directory"):
        PlanCache(tmp_path)
    with pytest.raises(PlanCacheError, match="does not exist"):
        PlanCache(tmp_path / "no" / "plans.sqlite")


def test_tune_keeps_its_plan_searches_and_a_resumed_run_searches_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite"
    argv = ["tune", "squeezenet", "--budget", "12", "--db", str(db), "--no-check"]
    search = _Counting()
    monkeypatch.setattr(superopt.rewrite, "optimize", search)
    assert main(argv) == 0
    searched = search.calls
    assert searched >= 1
    con = sqlite3.connect(db)
    stored = con.execute("SELECT COUNT(*) FROM plans").fetchone()[0]
    con.close()
    assert stored == searched
    capsys.readouterr()
    search.calls = 0
    assert main([*argv, "--resume"]) == 0
    assert search.calls == 0
    # --replay rebuilds the best candidate, its plan included, from the kept searches.
    js = tmp_path / "replay.json"
    assert main(["tune", "--replay", str(db), "--json", str(js)]) == 0
    assert json.loads(js.read_text())["candidate"]["plan"]  # the best holds the plan
    assert search.calls == 0
    # A database made before plans were kept: replay searches, and writes nothing.
    con = sqlite3.connect(db)
    con.execute("DROP TABLE plans")
    con.commit()
    con.close()
    db.chmod(0o444)
    assert main(["tune", "--replay", str(db)]) == 0
    assert search.calls == 1
    con = sqlite3.connect(db)
    assert con.execute("SELECT name FROM sqlite_master WHERE name = 'plans'").fetchone() is None
    con.close()


def _eqsat_pass(cache: PlanCache) -> RewritePlan:
    library = list(rule_set(None).rules)
    pipe = make_pipeline(Simulator("v4"), Matcher([*library, merge3_rule()]),
                         plan_search="eqsat")
    plan = pipe.passes[pipe.index("plan")]
    plan.cache = cache
    return plan


def test_an_eqsat_plan_is_kept_as_its_graph_and_rebuilt_without_searching(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An eqsat plan has no path to replay and its local moves stop on the clock, so the
    cache keeps the graph itself: a warm pass searches nothing and offers the same
    plan and source plans (graphs, rules, costs, origins); a stored graph that does not
    rebuild as it was is a miss, searched again."""
    import superopt.rewrite.eqsat

    graph = qkv(with_bn=True)
    search = _Counting(superopt.rewrite.eqsat, "eqsat_optimize")
    monkeypatch.setattr(superopt.rewrite.eqsat, "eqsat_optimize", search)
    path = tmp_path / "plans.sqlite"
    cold_cache = PlanCache(path)
    cold = _eqsat_pass(cold_cache)
    cold_offers = _offers(cold, graph)
    assert cold_offers[0][0].startswith("eqsat:")
    # The plan and each rule source's own (the library's and PET's merge).
    assert search.calls == cold_cache.misses == len(cold_cache) >= 2
    cold_cache.close()
    search.calls = 0
    warm_cache = PlanCache(path)
    warm = _eqsat_pass(warm_cache)
    assert _offers(warm, graph) == cold_offers
    assert search.calls == 0 and warm_cache.hits == cold_cache.misses
    for option, p in [(None, warm.plan(graph)), *warm.variants(graph).items()]:
        q = cold.plan(graph) if option is None else cold.variants(graph)[option]
        assert p.origin == q.origin and p.graph.weights.keys() == q.graph.weights.keys()
    warm_cache.close()
    # A backtracking pass on the same file finds none of them (another key).
    bt_cache = PlanCache(path)
    _plan_pass(bt_cache).plan(graph)
    assert bt_cache.hits == 0 and bt_cache.misses == 1
    bt_cache.close()
    # Damage each stored eqsat graph (its last node's id): not rebuilt, so a miss.
    con = sqlite3.connect(path)
    for key, text in con.execute("SELECT key, result FROM plans").fetchall():
        rec = json.loads(text)
        if rec.get("graph"):
            rec["graph"]["nodes"][-1]["id"] = -1
            con.execute("UPDATE plans SET result = ? WHERE key = ?", (json.dumps(rec), key))
    con.commit()
    con.close()
    again = PlanCache(path)
    assert _offers(_eqsat_pass(again), graph) == cold_offers
    assert search.calls == again.misses >= 1


def test_the_plan_is_priced_by_the_sessions_default_compiler() -> None:
    """The plan's search prices graphs as the session's default compiler compiles them
    (`--default legacy` too), and its cache key names a non-default heuristic."""
    keys = []
    for tiling in ("xla", "legacy"):
        pipe = make_pipeline(Simulator("v4", default_tiling=tiling))
        plan = pipe.passes[pipe.index("plan")]
        assert plan.cost_factory().simulator.default_tiling == tiling
        keys.append(plan.cost_key)
    assert keys == ["sim:v4", "sim:v4:legacy"]


def test_tune_plan_search_eqsat_keeps_its_plans_for_resume_and_replay(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import superopt.rewrite.eqsat

    db = tmp_path / "r.sqlite"
    argv = ["tune", "squeezenet", "--budget", "12", "--db", str(db), "--no-check",
            "--plan-search", "eqsat"]
    search, bt = _Counting(superopt.rewrite.eqsat, "eqsat_optimize"), _Counting()
    monkeypatch.setattr(superopt.rewrite.eqsat, "eqsat_optimize", search)
    monkeypatch.setattr(superopt.rewrite, "optimize", bt)
    js = tmp_path / "first.json"
    assert main([*argv, "--json", str(js)]) == 0
    assert search.calls >= 1 and bt.calls == 0
    plan = json.loads(js.read_text())["candidate"]["plan"]["plan"]
    assert plan.startswith("eqsat:")
    search.calls = 0
    assert main([*argv, "--resume"]) == 0
    assert search.calls == 0
    js = tmp_path / "replay.json"
    assert main(["tune", "--replay", str(db), "--json", str(js)]) == 0
    assert json.loads(js.read_text())["candidate"]["plan"]["plan"] == plan
    assert search.calls == 0 and bt.calls == 0
    capsys.readouterr()
    # The records name the plan search: resuming them with TASO's search is refused.
    assert main(["tune", "squeezenet", "--budget", "12", "--db", str(db), "--resume"]) == 2
    assert "plan_search" in capsys.readouterr().err


def test_workers_rebuild_an_eqsat_plan_from_the_drivers_searches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tune --workers N --plan-search eqsat`: a worker opens the session with the
    driver's plan cache (`spec["plan_cache"]`) and rebuilds a planned candidate with the
    same key without searching; its own search could find another graph."""
    import superopt.rewrite.eqsat
    import superopt.xtat.remote as remote
    from superopt.xtat.passes.plan import PLAN_SITE
    from superopt.xtat.session import open_session, use_plan_cache

    path = tmp_path / "plans.sqlite"
    s = open_session({"model": "squeezenet", "plan_search": "eqsat"})
    cache = use_plan_cache(s, path)
    pipe = s.pipeline
    site = pipe.passes[pipe.index("plan")].sites(s.default.stages[0])[PLAN_SITE]
    option = site.options[1]
    assert str(option).startswith("eqsat:")
    cand = pipe.with_choice(s.default, "plan", PLAN_SITE, option)

    def no_search(*args: object, **kwargs: object) -> object:
        raise AssertionError("a worker searched for a plan")

    monkeypatch.setattr(superopt.rewrite.eqsat, "eqsat_optimize", no_search)
    monkeypatch.setattr(remote, "_STATE", remote.WorkerState())
    spec = {**s.spec, "plan_cache": str(path)}
    [(key, t)] = remote.measure_task((spec, [(cand.json, 0)]))
    assert key == cand.key and t > 0
    cache.close()


def test_replay_of_a_file_from_other_search_code_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Recorded, then replayed by "another version": the code digest differs, so every kept
    # search misses and the plan is searched again; here the new search finds nothing,
    # and the recorded best (which holds a plan) no longer rebuilds.
    db = tmp_path / "r.sqlite"
    assert main(["tune", "squeezenet", "--budget", "12", "--db", str(db), "--no-check"]) == 0
    import superopt.xtat.plancache as plancache

    def nothing(graph: Graph, *args: object, **kwargs: object) -> object:
        """A search that finds no rewrite."""
        return SimpleNamespace(steps=[], cost_after=1.0, cost_before=1.0, graph=graph,
                               origin=None, evaluated=0, seconds=0.0, stopped="budget")

    capsys.readouterr()
    js = tmp_path / "best.json"
    assert main(["tune", "--replay", str(db), "--json", str(js)]) == 0
    assert json.loads(js.read_text())["candidate"]["plan"]  # the best holds a plan
    monkeypatch.setattr(plancache, "code_digest", lambda: "another version")
    monkeypatch.setattr(superopt.rewrite, "optimize", nothing)
    assert main(["tune", "--replay", str(db)]) != 0
    err = capsys.readouterr().err
    assert "does not rebuild" in err and "another version of superopt's search code" in err
    assert len(err.strip().splitlines()) == 1
