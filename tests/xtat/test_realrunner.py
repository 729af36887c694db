"""The real-target runner with an injected timer: paired measurement against the
incumbent, the A/A noise model, the final comparison, screening and resuming."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from superopt.ir.graph import Graph
from superopt.rewrite.check import SideBySide
from superopt.xtat.realrunner import ROUNDS, OrtTimer, RealRunner, cannot_be_faster, verdict
from superopt.xtat.records import RecordsDB
from superopt.xtat.screen import screening
from superopt.xtat.session import Session, open_session, rewritten_graph
from superopt.xtat.tuner import GRAPH_ONLY_PLAN_TOP_K, Tuner, TuneResult, make_schedule
from xtat.realcases import FakeTimer, dense_branches, node_count


def _session(timer: FakeTimer, graph: Graph | None = None, plan_budget: int = 20
             ) -> Session:
    return open_session({"model": "dense", "target": "cpu", "op_cost": "flops",
                         "plan_budget": plan_budget}, graph or dense_branches(4), timer=timer)


def _tune(session: Session, budget: int, db: RecordsDB | None = None,
          screen: bool = True) -> tuple[Tuner, TuneResult]:
    tuner = Tuner(session.pipeline, session.runner, session.default, seed=0, db=db, batch=4,
                  wrap=screening(session.screen) if screen else None)
    return tuner, tuner.run(make_schedule("joint", ("plan", "rewrite")), budget)


def test_a_difference_is_real_only_outside_the_interval_and_the_aa_band() -> None:
    aa = (0.98, 1.02)
    assert verdict(1.05, (1.01, 1.09), aa) == "faster"
    assert verdict(1.05, (1.01, 1.09), (0.95, 1.06)) == "noise"  # inside the A/A band
    assert verdict(1.01, (0.99, 1.03), aa) == "noise"  # the interval holds 1
    assert verdict(0.9, (0.85, 0.95), aa) == "slower"


def test_noise_alone_never_replaces_the_input() -> None:
    # Every graph costs the same: whatever the rewrites, only noise differs.
    timer = FakeTimer(lambda g: 1e-3, sigma=0.03)
    session = _session(timer)
    _, result = _tune(session, 12, screen=False)
    assert result.evaluations == 12
    assert result.best is session.default and result.speedup == 1.0
    runner = session.runner
    assert isinstance(runner, RealRunner)
    assert all(p.verdict != "faster" for p in runner.log)
    assert runner.final is None or not runner.final.kept


def test_a_real_gain_is_kept_with_its_interval() -> None:
    timer = FakeTimer(node_count, sigma=0.01)
    session = _session(timer)
    _, result = _tune(session, 12)
    runner = session.runner
    assert isinstance(runner, RealRunner) and runner.final is not None
    assert runner.final.kept and runner.final.ci[0] > 1.0
    tuned = rewritten_graph(session.pipeline, result.best)
    # Judged independently of the runner: the kept graph has fewer ops, hence is faster.
    assert node_count(tuned) < node_count(session.graph)
    assert result.best_time < result.default_time
    # The final comparison times input, tuned, input (the A/A control) in one loop.
    assert timer.calls[-1][0] == timer.calls[-1][2] != timer.calls[-1][1]


class _SessionLuck(FakeTimer):
    """Every graph costs the same, but until the sessions are made afresh (`clear`) the
    input's sessions run 5% slower than the others: a session effect that one final
    comparison, with its A/A control of two input sessions alike, takes for a gain."""

    def __init__(self) -> None:
        self.input_hash = ""
        self.fresh = 0
        super().__init__(lambda g: 1e-3 * (1.05 if g.structural_hash == self.input_hash
                                           and not self.fresh else 1.0), sigma=0.005)

    def clear(self) -> None:
        self.fresh += 1


def test_a_gain_one_set_of_sessions_shows_is_confirmed_in_fresh_ones_or_dropped() -> None:
    timer = _SessionLuck()
    session = _session(timer)
    timer.input_hash = session.graph.structural_hash
    _, result = _tune(session, 12)
    final = session.runner.final
    assert isinstance(session.runner, RealRunner) and final is not None
    assert timer.fresh == 1 and final.again is not None
    first, fresh = final.again["first"], final.again["fresh"]
    assert first["speedup"] > 1.03 and first["ci"][0] > 1.0  # the first said faster
    assert fresh["ci"][0] <= 1.0 <= fresh["ci"][1]  # fresh sessions: no gain
    assert not final.kept and result.best is session.default
    assert final.rounds == 2 * session.runner.final_rounds  # the figures pool both
    # The last two timings are the two final comparisons: input, pick, input each.
    assert timer.calls[-1] == timer.calls[-2]
    import argparse
    import io

    from rich.console import Console

    from superopt.xtat.realcommand import report

    out = io.StringIO()
    _, summary, _ = report(session, result, argparse.Namespace(no_check=True, seed=0),
                           Console(file=out, width=300))
    assert "each comparison (the figures above pool both)" in out.getvalue()
    assert "not confirmed in fresh sessions" in out.getvalue()
    assert summary["final"]["again"] == final.again


def test_a_real_gain_survives_the_confirmation_and_a_loss_is_not_run_twice() -> None:
    timer = FakeTimer(node_count, sigma=0.01)
    session = _session(timer)
    _tune(session, 12)
    final = session.runner.final
    assert final is not None and final.kept and final.again is not None
    assert final.again["fresh"]["ci"][0] > 1.0 and final.ci[0] > 1.0
    # Nothing faster: the first comparison says so and no second one runs.
    timer = FakeTimer(lambda g: 1e-3, sigma=0.01)
    session = _session(timer)
    _tune(session, 12, screen=False)
    final = session.runner.final
    assert final is None or (not final.kept and final.again is None)


class _FreshNarrow(FakeTimer):
    """The pick runs 4% faster in every set of sessions; the fresh set's A/A control
    comes out wide (a machine timing on both cores: the input's second session noisy)."""

    def __init__(self) -> None:
        self.pick_hash = ""
        self.fresh = 0
        self.slot = 0
        super().__init__(lambda g: 1e-3, sigma=0.004)

    def clear(self) -> None:
        self.fresh += 1

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int) -> SideBySide:
        def run(k: int, g: Graph) -> float:
            noisy = 0.2 if self.fresh and k == 2 else self.sigma
            base = 1e-3 / 1.04 if g.structural_hash == self.pick_hash else 1e-3
            return float(base * np.exp(noisy * self.rng.standard_normal()))
        times = tuple(tuple(run(k, g) for _ in range(rounds)) for k, g in enumerate(graphs))
        return SideBySide(tuple(float(np.median(t)) for t in times),
                          tuple(min(t) for t in times), times, "cpu", 1)


def test_a_gain_both_sets_show_is_kept_though_one_aa_control_came_out_wide() -> None:
    session = _session(FakeTimer(node_count, sigma=0.01))
    runner = session.runner
    assert isinstance(runner, RealRunner)
    timer = _FreshNarrow()
    runner.timer = timer
    base, pick = session.graph, dense_branches(2)
    timer.pick_hash = pick.structural_hash
    final = runner._confirmed("c", "final", lambda: timer([base, pick, base], 20, 0))
    fresh = final.again["fresh"] if final.again else {}
    assert fresh["ci"][0] > 1.0 and fresh["speedup"] < fresh["aa_ci"][1]  # alone: noise
    assert final.kept and final.ci[0] > 1.0 and final.speedup > final.aa_ci[1]


def test_a_run_killed_between_the_two_final_comparisons_repeats_neither(
        tmp_path: Path) -> None:
    session = _session(FakeTimer(node_count, sigma=0.01))
    runner = session.runner
    assert isinstance(runner, RealRunner)
    rounds = (2e-3,) * 4, (1e-3,) * 4, (2e-3,) * 4
    faster = SideBySide((2e-3, 1e-3, 2e-3), (2e-3, 1e-3, 2e-3), rounds, "cpu", 1)
    made: list[str] = []

    def run() -> SideBySide:
        made.append("timed")
        return faster

    path = tmp_path / "r.sqlite"
    with RecordsDB(path, session.workload, {}) as db:
        runner.db = db
        # Killed after the first comparison: the second raises before it times anything.
        calls = iter([run, _killed])
        with pytest.raises(KeyboardInterrupt):
            runner._confirmed("c", "final", lambda: next(calls)())
    assert made == ["timed"]
    with RecordsDB(path, session.workload, {}, resume=True) as db:
        runner.db = db
        final = runner._confirmed("c", "final", run)
    assert made == ["timed", "timed"]  # only the confirmation ran after the resume
    assert final.kept and final.again is not None


def _killed() -> SideBySide:
    raise KeyboardInterrupt


def test_the_screen_leaves_proposals_priced_above_the_incumbent_unmeasured() -> None:
    timer = FakeTimer(node_count)
    session = _session(timer, plan_budget=0)
    # Price each candidate by its op count, negated: every rewrite that removes ops is
    # priced above the input, so none of them may run.
    session.screen = lambda c: -node_count(rewritten_graph(session.pipeline, c))
    tuner = Tuner(session.pipeline, session.runner, session.default, seed=0, batch=4,
                  wrap=(hook := screening(session.screen)))
    result = tuner.run(make_schedule("joint", ("plan", "rewrite")), 12)
    assert result.evaluations == 1 and hook.screened() > 0  # type: ignore[attr-defined]
    assert len(timer.calls) == 2  # the A/A control alone (after its warm-up pass)


def test_a_real_targets_plan_options_are_measured_whatever_the_screen_prices() -> None:
    # The plan and its variants differ in what the runtime fuses, which the per-op cost
    # cannot see: the plan phase measures them all, even priced above the input; the
    # rewrite points after it are still screened.
    timer = FakeTimer(node_count)
    session = _session(timer)
    session.screen = lambda c: -node_count(rewritten_graph(session.pipeline, c))
    plan = session.pipeline.passes[session.pipeline.index("plan")]
    options = plan.list_sites(session.default.stages[0])[0].options
    tuner = Tuner(session.pipeline, session.runner, session.default, seed=0, batch=1,
                  wrap=screening(session.screen))
    result = tuner.run(make_schedule("joint", ("plan", "rewrite")), 12)
    assert len(options) > 2  # the plan and at least one variant without a rule
    assert dict(result.phases).get("plan") == min(len(options), GRAPH_ONLY_PLAN_TOP_K) - 1
    assert dict(result.phases).get("rewrite", 0) == 0  # nothing after it priced below


def test_resume_measures_nothing_twice_and_keeps_the_noise_model(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    first = FakeTimer(node_count, seed=1)
    s1 = _session(first, plan_budget=0)  # no plan: the rewrite points take the budget
    with RecordsDB(path, s1.workload, {}) as db:
        _tune(s1, 5, db, screen=False)
        rows = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
    assert len(rows) == 5
    second = FakeTimer(node_count, seed=2)
    s2 = _session(second, plan_budget=0)
    with RecordsDB(path, s2.workload, {}, resume=True) as db:
        tuner, _ = _tune(s2, 9, db, screen=False)
        after = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
    # Nine count against the budget; candidates with the incumbent's graph are free.
    assert after[:5] == rows and tuner.spent == 9 and len(after) == 9 + len(tuner.free)
    assert tuner.replayed == 5 and tuner.measured == len(after) - 5
    aa = (s2.graph.structural_hash,) * 2
    assert aa not in second.calls  # the A/A control was read back, not run again
    assert len({c for _, c, _ in after}) == len(after)  # no candidate measured twice


def test_onnxruntime_times_a_graph_and_its_own_aa_control() -> None:
    pytest.importorskip("onnxruntime")
    g = dense_branches(2)
    timer = OrtTimer(threads=1)
    t = timer([g, g], rounds=3, warmup=1)
    assert len(t.times) == 2 and all(len(x) == 3 and min(x) > 0 for x in t.times)
    assert timer.exported == 2  # a graph listed twice runs as two sessions
    timer([g], rounds=1, warmup=0)
    assert timer.exported == 2  # and a session is reused by content


def test_a_model_over_the_inline_limit_is_loaded_from_a_file_and_gives_the_same_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Protobuf refuses a message over 2 GiB (llama3_2_1b's 5 GB of weights stopped the
    # CPU benchmark there): over the limit the session loads the model from a file with
    # its weights beside it. Forced here with a limit of 0 bytes.
    pytest.importorskip("onnxruntime")
    import tempfile

    import onnxruntime as ort

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    g = dense_branches(2)
    inline = OrtTimer(threads=1)
    filed = OrtTimer(threads=1)
    filed.inline_bytes = 0
    seen: list[str] = []
    real = ort.InferenceSession

    def spy(source, *args, **kwargs):
        seen.append("file" if isinstance(source, str) else "bytes")
        return real(source, *args, **kwargs)

    ort.InferenceSession = spy
    try:
        a, b = inline.outputs(g), filed.outputs(g)
    finally:
        ort.InferenceSession = real
    assert seen == ["bytes", "file"]
    # The file is gone once the session has read it: a SIGKILL later leaves no copy of
    # the weights in the temporary folder (5 GB each for Llama-3.2-1B).
    assert list(tmp_path.iterdir()) == []
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert filed([g], rounds=2, warmup=1).times[0][0] > 0  # the filed session still runs


def _memory(monkeypatch: pytest.MonkeyPatch, timer: OrtTimer, free: list[int]) -> None:
    """`timer` asks about memory for every graph, and the machine has `free[0]` bytes
    available less what its cached sessions hold (their weights)."""
    import superopt.xtat.realrunner as rr

    timer.small_bytes = 0
    held = {}

    def available() -> int:
        live = {key for key in timer._sessions}
        return free[0] - sum(held.get(k, 0) for k in live)

    real = timer._session

    def session(graph, slot, pinned=()):  # type: ignore[no-untyped-def]
        run = real(graph, slot, pinned)
        held.setdefault((graph.structural_hash, slot), rr.weight_bytes(graph))
        return run

    monkeypatch.setattr(rr, "available_bytes", available)
    monkeypatch.setattr(timer, "_session", session)


def test_sessions_the_call_does_not_use_are_dropped_when_memory_is_short(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from superopt.ir.memory import MemoryLimitError
    from superopt.xtat.realrunner import weight_bytes

    g, h = dense_branches(2), dense_branches(3)
    timer = OrtTimer(threads=1)
    # Room for h's session once g's is gone, not beside it.
    free = [int(weight_bytes(h) * OrtTimer.BUILD_PEAK) + weight_bytes(g) - 1]
    _memory(monkeypatch, timer, free)
    timer([g], rounds=1, warmup=0)
    timer([h], rounds=1, warmup=0)
    assert list(timer._sessions) == [(h.structural_hash, 0)] and timer.exported == 2
    # g beside h does not fit, and h is in this call: it is kept, and g is refused.
    free[0] = int(weight_bytes(g) * OrtTimer.BUILD_PEAK) + weight_bytes(h) - 1
    with pytest.raises(MemoryLimitError):
        timer([h, g], rounds=1, warmup=0)
    assert list(timer._sessions) == [(h.structural_hash, 0)]


def test_a_second_slot_that_does_not_fit_runs_the_first_slots_session(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from superopt.xtat.realrunner import weight_bytes

    g = dense_branches(2)
    timer = OrtTimer(threads=1)
    free = [int(weight_bytes(g) * OrtTimer.BUILD_PEAK)]  # one session, then no room
    _memory(monkeypatch, timer, free)
    t = timer([g, g], rounds=2, warmup=0)
    assert timer.exported == 1 and timer.shared_slots == 1
    assert len(t.times) == 2 and all(len(x) == 2 for x in t.times)
    free[0] = 10**15  # with room again, the second slot gets its own session
    timer([g, g], rounds=1, warmup=0)
    assert timer.exported == 2 and timer.shared_slots == 1


def test_a_candidate_beside_the_incumbents_two_sessions_drops_the_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # llama3_2_1b: the A/A control's two sessions of the input fit, and a candidate's
    # session does not fit beside them; the candidate is timed against one of them.
    pytest.importorskip("onnxruntime")
    from superopt.xtat.realrunner import weight_bytes

    g, h = dense_branches(2), dense_branches(3)
    timer = OrtTimer(threads=1)
    free = [int(weight_bytes(h) * OrtTimer.BUILD_PEAK) + weight_bytes(g)]
    _memory(monkeypatch, timer, free)
    timer([g, g], rounds=1, warmup=0)
    assert timer.exported == 2 and timer.shared_slots == 0
    t = timer([g, h, g], rounds=2, warmup=0)
    assert len(t.times) == 3 and timer.shared_slots == 1 and timer.exported == 3
    assert set(timer._sessions) == {(g.structural_hash, 0), (h.structural_hash, 0)}


def test_a_session_that_does_not_fit_at_all_is_refused_with_the_figures(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    from superopt.ir.memory import MemoryLimitError
    from superopt.xtat.realrunner import weight_bytes

    g = dense_branches(2)
    timer = OrtTimer(threads=1)
    _memory(monkeypatch, timer, [int(weight_bytes(g) * OrtTimer.BUILD_PEAK) - 1])
    with pytest.raises(MemoryLimitError, match=f"graph {g.name!r} needs about .* available"):
        timer([g], rounds=1, warmup=0)
    assert timer.exported == 0


def test_the_report_says_when_an_aa_control_ran_one_session_twice() -> None:
    import argparse
    import io

    from rich.console import Console

    from superopt.xtat.realcommand import report

    timer = FakeTimer(node_count, sigma=0.01)
    session = _session(timer)
    _, result = _tune(session, 12)
    args = argparse.Namespace(no_check=True, seed=0)
    seen = []
    for shared in (0, 1):
        timer.shared_slots = shared  # what OrtTimer counts when memory is short
        out = io.StringIO()
        _, summary, _ = report(session, result, args, Console(file=out, width=200))
        seen.append((summary["aa_one_session"], "one session run twice" in out.getvalue()))
    assert seen == [(False, False), (True, True)]


def test_the_report_names_the_rules_applied_with_their_counts() -> None:
    import argparse
    import io
    from collections import Counter

    from rich.console import Console

    from superopt.xtat.realcommand import applied_summary, report

    session = _session(FakeTimer(node_count, sigma=0.01))
    _, result = _tune(session, 12)
    out = io.StringIO()
    _, summary, _ = report(session, result, argparse.Namespace(no_check=True, seed=0),
                           Console(file=out, width=300))
    counts = Counter(summary["applied"])
    assert counts  # fewer nodes run faster here, so the tuned graph applies rewrites
    line = next(x for x in out.getvalue().splitlines() if "rewrites applied" in x)
    assert f"{sum(counts.values())}: " in line
    for rule, n in counts.most_common(6):
        assert f"{rule} x{n}" in line
    assert applied_summary([]) == "0"
    many = [f"r{i}" for i in range(8) for _ in range(8 - i)]
    assert applied_summary(many) == ("36: r0 x8, r1 x7, r2 x6, r3 x5, r4 x4, r5 x3, "
                                     "2 more rules")


class _FileTimer(FakeTimer):
    """A fake timer whose input graph runs as a user's file costing `file_s` per run
    wherever it is timed, while superopt's export of it costs what `cost` says
    (`OrtTimer.use_file`, `OrtTimer.export_vs_file`)."""

    def __init__(self, cost: Callable[[Graph], float], file_s: float, input_hash: str
                 ) -> None:
        super().__init__(lambda g: file_s if g.structural_hash == input_hash else cost(g),
                         sigma=0.01)
        self.export_cost = cost
        self.file_s = file_s
        self.files = {input_hash: Path("model.onnx")}

    def export_vs_file(self, graph: Graph, rounds: int, warmup: int) -> SideBySide:
        def runs(base: float) -> tuple[float, ...]:
            return tuple(base * float(np.exp(0.01 * self.rng.standard_normal()))
                         for _ in range(rounds))

        times = (runs(self.file_s), runs(self.export_cost(graph)), runs(self.file_s))
        return SideBySide(tuple(float(np.median(t)) for t in times),
                          tuple(min(t) for t in times), times, "cpu", 1)


@pytest.mark.parametrize("file_ms, kept", [(1.25, True), (1.0, False)])
def test_superopts_export_of_a_kept_input_is_the_result_only_when_faster_than_the_file(
        file_ms: float, kept: bool) -> None:
    # superopt's export of the input runs 1 ms, every rewrite 1.3 ms (so the input is
    # kept), and the user's file 1.25 ms (the export is the result) or 1 ms (the file).
    g = dense_branches(4)
    h = g.structural_hash
    timer = _FileTimer(lambda x: 1e-3 if x.structural_hash == h else 1.3e-3, file_ms * 1e-3, h)
    session = _session(timer, g)
    _, result = _tune(session, 8, screen=False)
    runner = session.runner
    assert isinstance(runner, RealRunner) and runner.export is not None
    assert result.best is session.default
    assert runner.export.kept is kept
    if kept:
        assert runner.export.ci[0] > 1.0
        assert result.speedup == pytest.approx(1.25, rel=0.05)
    else:
        assert result.speedup == 1.0


def _verdict_of(inc: Sequence[float], cand: Sequence[float], inc2: Sequence[float]) -> str:
    """What `RealRunner.measure` decides from these rounds (incumbent, candidate,
    incumbent again)."""
    t = SideBySide((float(np.median(inc)), float(np.median(cand)), float(np.median(inc2))),
                   (min(inc), min(cand), min(inc2)), (tuple(inc), tuple(cand), tuple(inc2)),
                   "cpu", 1)
    return verdict(t.ratio(0, 1), t.ratio_ci(0, 1), t.ratio_ci(0, 2))


def test_an_early_stop_never_ends_a_measurement_that_would_have_said_faster() -> None:
    # Rounds drawn for candidates from 10% slower to 10% faster under light to heavy
    # noise: wherever the stop rule fires on the first k rounds, the verdict on all ten
    # (judged by `verdict` itself, not by the rule) is not faster.
    rng = np.random.default_rng(7)
    fired = faster = 0
    for trial in range(600):
        speedup = (0.9, 0.97, 1.0, 1.02, 1.05, 1.1)[trial % 6]
        sigma = (0.005, 0.02, 0.08)[trial % 3]
        inc, cand, inc2 = ([float(np.exp(sigma * rng.standard_normal())) / s
                            for _ in range(ROUNDS)] for s in (1.0, speedup, 1.0))
        slower = np.cumsum([a <= b for a, b in zip(inc, cand, strict=True)])
        stops = [k for k in range(1, ROUNDS) if cannot_be_faster(int(slower[k - 1]), ROUNDS)]
        v = _verdict_of(inc, cand, inc2)
        faster += v == "faster"
        if stops:
            fired += 1
            assert v != "faster", (trial, stops[0])
    assert fired > 100 and faster > 100  # both cases are common in this draw


def test_the_stop_rule_waits_while_the_rest_could_still_say_faster() -> None:
    # Two rounds the incumbent's way and eight 5% faster: the measurement says faster,
    # so no rule may stop at two; at four such rounds no arrangement of ten says faster.
    inc = [1.0] * ROUNDS
    cand = [1.01, 1.01] + [1.0 / 1.05] * (ROUNDS - 2)
    assert _verdict_of(inc, cand, [1.0, 1.001] * (ROUNDS // 2)) == "faster"
    assert not cannot_be_faster(2, ROUNDS)
    assert cannot_be_faster(4, ROUNDS)
    for at in range(ROUNDS - 3):  # the four slower rounds anywhere, the rest 20% faster
        cand = [1.0 / 1.2] * ROUNDS
        cand[at:at + 4] = [1.02] * 4
        assert _verdict_of(inc, cand, [1.0, 1.001] * (ROUNDS // 2)) != "faster"


def _measured(cost: Callable[[Graph], float], stop_early: bool) -> tuple[RealRunner, FakeTimer]:
    timer = FakeTimer(cost, sigma=0.01)
    session = open_session({"model": "dense", "target": "cpu", "op_cost": "flops",
                            "stop_early": stop_early}, dense_branches(4), timer=timer)
    runner = session.runner
    assert isinstance(runner, RealRunner) and runner.stop_early is stop_early
    assert ("stop_early" in runner.settings()) is stop_early  # old records: full rounds
    _tune(session, 12, screen=False)
    return runner, timer


def test_a_slower_candidate_is_measured_in_fewer_rounds_and_a_faster_one_in_all() -> None:
    base = node_count(dense_branches(4))

    def more_ops_faster(g: Graph) -> float:  # every rewrite here removes ops: all slower
        return 2 * base - node_count(g)

    runner, timer = _measured(more_ops_faster, stop_early=True)
    slower = [p for p in runner.log if p.verdict == "slower"]
    assert slower and all(p.rounds < runner.rounds for p in slower)
    assert 4 in timer.rounds_run  # the rule's first chance
    runner, _ = _measured(more_ops_faster, stop_early=False)
    assert runner.log and all(p.rounds == runner.rounds for p in runner.log)
    runner, _ = _measured(node_count, stop_early=True)  # every rewrite faster
    gained = [p for p in runner.log if p.verdict == "faster"]
    assert gained and all(p.rounds == runner.rounds for p in gained)


def test_interleave_asks_the_stop_rule_after_every_round() -> None:
    from superopt.rewrite.check import interleave

    seen: list[int] = []

    def stop(times: Sequence[Sequence[float]]) -> bool:
        seen.append(len(times[0]))
        return len(times[0]) == 3

    t = interleave([lambda: None, lambda: None], 10, 1, stop=stop)
    assert seen == [1, 2, 3] and len(t.times[0]) == len(t.times[1]) == 3
    assert len(interleave([lambda: None], 5, 0, stop=lambda _: False).times[0]) == 5


def test_the_report_says_which_measurements_ended_early() -> None:
    import argparse
    import io

    from rich.console import Console

    from superopt.xtat.realcommand import report

    base = node_count(dense_branches(4))
    timer = FakeTimer(lambda g: 2 * base - node_count(g), sigma=0.01)
    session = _session(timer)
    _, result = _tune(session, 12, screen=False)
    runner = session.runner
    assert isinstance(runner, RealRunner)
    out = io.StringIO()
    _, summary, _ = report(session, result, argparse.Namespace(no_check=True, seed=0),
                           Console(file=out, width=400))
    # The timer's own count of the rounds each paired measurement ran (three graphs,
    # the incumbent first and last; not the A/A calibration's two graphs, nor the final
    # comparison's 20 rounds).
    measured = [n for c, n in zip(timer.calls, timer.rounds_run, strict=True)
                if len(c) == 3 and c[0] == c[2] != c[1] and n <= runner.rounds]
    assert sorted(summary["rounds_run"]) == sorted(measured)
    early = [r for r in measured if r < runner.rounds]
    assert early and f"{len(early)} of {len(measured)} ended early" in out.getvalue()


def test_onnxruntime_warms_up_only_the_sessions_it_just_made() -> None:
    pytest.importorskip("onnxruntime")
    timer = OrtTimer(threads=1)
    inc, first, second = dense_branches(2), dense_branches(3), dense_branches(4)
    timer([inc, first, inc], 3, 2)
    runs: dict[tuple[str, int], int] = {}
    for key, run in list(timer._sessions.items()):
        def counted(run: Callable[[], object] = run, key: tuple[str, int] = key) -> object:
            runs[key] = runs.get(key, 0) + 1
            return run()
        timer._sessions[key] = counted
    made = timer.exported
    t = timer([inc, second, inc], 3, 2)
    assert len(t.times[0]) == len(t.times[1]) == 3
    h = inc.structural_hash
    # The incumbent's two sessions ran their rounds only; the new one was made and warmed.
    assert runs == {(h, 0): 3, (h, 1): 3}
    assert timer.exported == made + 1 and not timer._cold


class _OneProgram(FakeTimer):
    """Every graph is one program to the runtime, as a folded batch norm and the one
    onnxruntime folds itself are: only the structural hashes differ."""

    def same_program(self, a: Graph, b: Graph) -> bool:
        return True


def test_a_candidate_the_runtime_runs_as_the_incumbents_program_is_not_timed() -> None:
    timer = _OneProgram(node_count, sigma=0.01)  # the op counts would say faster
    session = _session(timer)
    _, result = _tune(session, 12, screen=False)
    assert result.evaluations > 1
    assert all(c == (session.graph.structural_hash,) * 2 for c in timer.calls)  # A/A only
    assert result.best is session.default and not session.runner.log
    import argparse
    import io

    from rich.console import Console

    from superopt.xtat.realcommand import report

    out = io.StringIO()
    _, summary, _ = report(session, result, argparse.Namespace(no_check=True, seed=0),
                           Console(file=out, width=400))
    # Every measurement after the input's: the A/A control was the only timing.
    assert summary["same_program"] == session.runner.not_timed == result.evaluations - 1
    assert (f"{result.evaluations - 1} not timed: onnxruntime runs them as the "
            "incumbent's program") in out.getvalue()
    # A timer that cannot tell (no same_program) times them, and finds them faster.
    timer = FakeTimer(node_count, sigma=0.01)
    session = _session(timer)
    _, result = _tune(session, 12, screen=False)
    assert result.best is not session.default


def _rounds(rng: np.random.Generator, rounds: int, speedup: float, sigma: float,
            aa_sigma: float) -> SideBySide:
    """The input, the pick (`speedup` faster) and the input again, each run with
    log-normal noise; the second input session's own (`aa_sigma`) widens the A/A
    interval."""
    sig = (sigma, sigma, aa_sigma)
    base = (1e-3, 1e-3 / speedup, 1e-3)
    times = tuple(tuple(float(b * np.exp(s * rng.standard_normal())) for _ in range(rounds))
                  for b, s in zip(base, sig, strict=True))
    return SideBySide(tuple(float(np.median(t)) for t in times), tuple(min(t) for t in times),
                      times, "cpu", 1)


def _runner(extend: bool) -> RealRunner:
    runner = _session(FakeTimer(node_count)).runner
    assert isinstance(runner, RealRunner)
    runner.extend = extend
    return runner


def test_an_unsettled_final_comparison_runs_as_many_rounds_again_and_is_judged_on_both(
        ) -> None:
    from superopt.xtat.realrunner import unsettled

    # A pick 4% faster, the first 20 rounds unsettled: its interval above 1, its ratio
    # inside an A/A interval a noisy second input session made wide.
    for seed in range(200):
        rng = np.random.default_rng(seed)
        first = _rounds(rng, 20, 1.04, 0.01, 0.06)
        off = _runner(extend=False)._confirmed("c", "final", lambda f=first: f)
        if unsettled(off):
            break
    else:
        pytest.fail("no seed gave an unsettled first comparison")
    assert not off.kept and not off.extended  # without the extension: the input kept
    later = iter([first, _rounds(rng, 20, 1.04, 0.01, 0.01), _rounds(rng, 20, 1.04, 0.01,
                                                                        0.01)])
    runner = _runner(extend=True)
    made: list[int] = []

    def run() -> SideBySide:
        made.append(1)
        return next(later)

    final = runner._confirmed("c", "final", run)
    assert len(made) == 3  # the first, as many rounds again, then the fresh sessions
    assert final.extended and final.kept and final.rounds == 60
    assert final.again is not None and final.again["first"]["ci"][0] > 1.0
    # Judged on the pooled rounds by the same rule as any comparison.
    assert final.ci[0] > 1.0 and final.speedup > final.aa_ci[1]


def test_the_extension_keeps_a_pick_no_faster_at_most_as_often_as_the_level_allows() -> None:
    # Equal graphs, 400 final comparisons: a kept one is a false gain. A kept pick needs
    # two 95% intervals above 1, the first comparison's (pooled) and the fresh sessions'
    # own, each one-sided 2.5% for an equal graph: far under 1% of the draws together.
    kept = extended = 0
    # One runner for all draws (a session per draw re-read the rule library 400 times:
    # 30 s of the test). Without records a comparison keeps nothing between calls.
    runner = _runner(extend=True)
    assert runner.db is None
    for seed in range(400):
        rng = np.random.default_rng(seed)
        final = runner._confirmed(
            "c", "final", lambda rng=rng: _rounds(rng, 20, 1.0, 0.02, 0.02))
        kept += final.kept
        extended += final.extended
    # The case arose more often than the bound: keeping every extended pick would fail.
    assert extended > 0.01 * 400
    assert kept <= 0.01 * 400


def test_a_run_killed_during_the_extension_resumes_it_and_never_extends_twice(
        tmp_path: Path) -> None:
    from superopt.xtat.realrunner import unsettled

    session = _session(FakeTimer(node_count, sigma=0.01))
    runner = session.runner
    assert isinstance(runner, RealRunner)
    for seed in range(200):
        rng = np.random.default_rng(seed)
        first = _rounds(rng, 20, 1.04, 0.01, 0.06)
        if unsettled(_runner(extend=False)._confirmed("c", "final", lambda f=first: f)):
            break
    more = _rounds(rng, 20, 1.04, 0.01, 0.01)
    path = tmp_path / "r.sqlite"
    with RecordsDB(path, session.workload, {}) as db:
        runner.db = db
        calls = iter([lambda: first, _killed])
        with pytest.raises(KeyboardInterrupt):  # killed as the extension starts
            runner._confirmed("c", "final", lambda: next(calls)())
    made: list[str] = []

    def run() -> SideBySide:
        made.append("timed")
        return more

    with RecordsDB(path, session.workload, {}, resume=True) as db:
        runner.db = db
        with pytest.raises(KeyboardInterrupt):  # the extension ran; killed before fresh
            calls = iter([run, _killed])
            runner._confirmed("c", "final", lambda: next(calls)())
    assert made == ["timed"]
    with RecordsDB(path, session.workload, {}, resume=True) as db:
        runner.db = db
        final = runner._confirmed("c", "final", run)
    assert made == ["timed", "timed"]  # the fresh sessions only: no second extension
    assert final.extended and final.rounds == 60


def test_the_report_says_when_the_first_comparison_was_extended() -> None:
    import argparse
    import io
    from dataclasses import replace

    from rich.console import Console

    from superopt.xtat.realcommand import report

    session = _session(FakeTimer(node_count, sigma=0.01))
    _, result = _tune(session, 6)
    runner = session.runner
    assert isinstance(runner, RealRunner) and runner.final is not None
    for extended in (False, True):
        runner.final = replace(runner.final, extended=extended)
        out = io.StringIO()
        _, summary, _ = report(session, result, argparse.Namespace(no_check=True, seed=0),
                               Console(file=out, width=400))
        said = f"unsettled at {runner.final_rounds} rounds" in out.getvalue()
        assert said == extended and summary["final"]["extended"] == extended


class _WideFirst(FakeTimer):
    """Every rewrite runs 4% faster than the input; in the first timing of each graph
    triple the incumbent's second session runs every other round 8% fast (an A/A
    interval up to 1.08: a session effect), in a second timing of the same graphs not."""

    def __init__(self, input_hash: str) -> None:
        self.timings: dict[tuple[str, ...], int] = {}
        super().__init__(lambda g: 1e-3 if g.structural_hash == input_hash else 1e-3 / 1.04,
                         sigma=0.004)

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: object = None) -> SideBySide:
        key = tuple(g.structural_hash for g in graphs)
        self.timings[key] = self.timings.get(key, 0) + 1
        wide = len(graphs) == 3 and self.timings[key] == 1
        times = tuple(tuple(float(self.cost(g) * np.exp(self.sigma * self.rng.standard_normal())
                                  / (1.08 if wide and k == 2 and r % 2 else 1.0))
                            for r in range(rounds)) for k, g in enumerate(graphs))
        self.calls.append(key)
        return SideBySide(tuple(float(np.median(t)) for t in times),
                          tuple(min(t) for t in times), times, "cpu", 1)


def test_an_unsettled_measurement_runs_as_many_rounds_again_and_may_then_say_faster(
        ) -> None:
    logs = {}
    for extend in (False, True):
        graph = dense_branches(4)
        session = _session(_WideFirst(graph.structural_hash), graph)
        runner = session.runner
        assert isinstance(runner, RealRunner)
        runner.extend = extend
        _tune(session, 6, screen=False)
        logs[extend] = runner.log
    # Without the extension the wide A/A band leaves every 4% gain as noise.
    assert logs[False] and all(p.verdict == "noise" and p.ci[0] > 1.0 for p in logs[False])
    first = logs[True][0]
    assert first.extended and first.rounds == 2 * ROUNDS and first.verdict == "faster"
    assert all(p.extended == (p.rounds > ROUNDS) for p in logs[True])


def test_the_report_counts_extended_measurements_and_their_planned_rounds() -> None:
    from superopt.xtat.realcommand import _rounds_saved
    from superopt.xtat.realrunner import Paired

    runner = _runner(extend=True)
    aa = (0.99, 1.01)
    runner.log = [Paired("a", "i", 1.03, (1.01, 1.05), 1.0, aa, "faster", 1.0, 20, True),
                  Paired("b", "i", 0.97, (0.95, 0.99), 1.0, aa, "slower", 1.0, 14, True),
                  Paired("c", "i", 0.9, (0.85, 0.95), 1.0, aa, "slower", 1.0, 4)]
    text = _rounds_saved(runner)
    assert f"2 unsettled after {ROUNDS} rounds" in text
    # b's second pass and c ended early: 38 of the 2 x 2 x 10 + 10 planned.
    assert "2 of 3 ended early" in text and f"38 of {5 * ROUNDS} rounds run" in text


class _HalfSame(FakeTimer):
    """About half the graphs (by their hash) are the incumbent's program to the runtime."""

    def same_program(self, a: Graph, b: Graph) -> bool:
        return int(b.structural_hash[:2], 16) % 2 == 0


def test_untimed_candidates_do_not_count_against_the_budget(tmp_path: Path) -> None:
    timer = _HalfSame(node_count, sigma=0.01)
    session = _session(timer, plan_budget=0)
    runner = session.runner
    assert isinstance(runner, RealRunner)
    with RecordsDB(tmp_path / "r.sqlite", session.workload, {}) as db:
        tuner, result = _tune(session, 6, db, screen=False)
        steps = {m.step: m.candidate for m in db.measurements()}
        kept = db.get_meta("untimed")
    # Each free step is one the runner did not time; the budget counts the others.
    assert tuner.free and {steps[s] for s in tuner.free} <= runner._untimed
    assert sorted(tuner.free) == kept  # in the records, for a resume
    assert tuner.step - len(tuner.free) == tuner.spent == 6
    assert result.evaluations == tuner.step == len(steps) > 6
    # A runtime that runs every graph as the input's program: the cap bounds the run.
    session = _session(_OneProgram(node_count, sigma=0.01))
    tuner, result = _tune(session, 4, screen=False)
    assert len(tuner.free) <= 3 * 4 and result.evaluations <= 4 + len(tuner.free)


class _KilledAt(_HalfSame):
    """Ctrl-C as its `at`-th timing starts (the tuner stops, keeping its records)."""

    def __init__(self, at: int, seed: int) -> None:
        super().__init__(node_count, sigma=0.01, seed=seed)
        self.at = at

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: object = None) -> SideBySide:
        if len(self.calls) + 1 == self.at:
            self.calls.append(())  # once: the final comparison after it runs
            raise KeyboardInterrupt
        return super().__call__(graphs, rounds, warmup, stop)  # type: ignore[arg-type]


def test_a_resumed_run_replays_the_free_steps_and_measures_nothing_twice(
        tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    s1 = _session(_KilledAt(4, seed=1), plan_budget=0)  # the 2 A/A timings, then 1 more
    with RecordsDB(path, s1.workload, {}) as db:
        first, result = _tune(s1, 8, db, screen=False)
        rows = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
    assert result.stopped == "interrupted" and first.free and first.spent < 8
    s2 = _session(_KilledAt(0, seed=2), plan_budget=0)  # the same timer, never killed
    with RecordsDB(path, s2.workload, {}, resume=True) as db:
        again, _ = _tune(s2, 8, db, screen=False)
        after = [(m.step, m.candidate, m.runtime) for m in db.measurements()]
        kept = db.get_meta("untimed")
    # Every step read back (the free ones free again), the budget then spent in full.
    assert after[:len(rows)] == rows and again.replayed == len(rows)
    assert first.free <= again.free and sorted(again.free) == kept and again.spent == 8
    assert len({c for _, c, _ in after}) == len(after)  # no candidate measured twice


def test_a_search_that_runs_out_of_candidates_says_so_rather_than_budget() -> None:
    session = _session(FakeTimer(node_count, sigma=0.01), plan_budget=0)
    tuner, result = _tune(session, 500, screen=False)
    assert tuner.spent < 500 and result.stopped == "no new candidates"
    session = _session(FakeTimer(node_count, sigma=0.01), plan_budget=0)
    tuner, result = _tune(session, 3, screen=False)
    assert tuner.spent == 3 and result.stopped == "budget"


def test_ties_go_to_the_final_comparison_by_their_ratio_and_a_resume_ranks_the_same(
        tmp_path: Path) -> None:
    # Every graph costs the same: no candidate is faster, and each one measured ahead of
    # the input (ratio >= 1) reports the input's time: they tie. The final comparison
    # takes the one measured furthest ahead, not the first measured.
    path = tmp_path / "r.sqlite"
    session = _session(FakeTimer(lambda g: 1e-3, sigma=0.03, seed=3), plan_budget=0)
    runner = session.runner
    assert isinstance(runner, RealRunner)
    with RecordsDB(path, session.workload, {}) as db:
        tuner, result = _tune(session, 8, db, screen=False)
        steps = [(m.candidate, m.runtime) for m in db.measurements()]
    assert result.best is session.default  # nothing was faster
    ratio = {p.candidate: p.ratio for p in runner.log}
    ties = [k for k, t in steps[1:] if t == steps[0][1] and k in ratio]
    assert len(ties) >= 2
    best = max(ties, key=ratio.__getitem__)
    assert best != ties[0]  # the case needs the first tie not to be the best ratio
    assert runner.final is not None and runner.final.candidate == best
    # The ratios are in the records: a runner bound to them later ranks the same.
    later = _session(FakeTimer(lambda g: 1e-3, seed=4), plan_budget=0).runner
    assert isinstance(later, RealRunner)
    with RecordsDB(path, session.workload, {}, resume=True) as db:
        later.bind(tuner.ctx, db)
    assert [later.promise(e[3]) for e in tuner.finalists] == \
        [runner.promise(e[3]) for e in tuner.finalists]
