"""Draw a tuning run's schedule phase by phase from its records: budget and gain per phase.

Reads the records database of one `superopt tune ... --db RUNS.sqlite` run (every
measurement with the phase that made it), splits the measurements into the schedule's
phases in the order they ran (consecutive measurements of one phase label are one phase;
phases that measured nothing leave no record), and draws three panels:

1. the best measured time so far against the measurement step, shaded by phase;
2. measurements per phase (the budget each phase spent);
3. the gain per phase: how much the best measured time fell during it, in percent of
   the default compiler's time.

The first pass of the schedule is drawn phase by phase (matched in order to the phases
`make_schedule` gives for the run's settings); what follows it (budget left after the
schedule's last phase, given to the schedule again from the best candidate) is one bar,
"again". Times are the measured ones (with the simulator's ~1.5% seeded
noise); the run's final pick compares its finalists' exact times.

Run: `.venv/bin/python tools/tuning_phases.py RUNS.sqlite --out docs/tuning_phases.png
[--json docs/tuning_phases.json]`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from superopt.xtat.records import Measurement, RecordsDB  # noqa: E402  (the checkout's)
from superopt.xtat.tuner import make_schedule  # noqa: E402

AGAIN = "again"


@dataclass(frozen=True)
class PhaseSpan:
    label: str  # the phase's name, numbered when it recurs ("tiling 2")
    phase: str  # the records' phase label
    strategy: str
    first_step: int
    measurements: int
    best_before_s: float  # best measured time before the phase
    best_after_s: float  # and after it
    pick_before_s: float = math.nan  # exact time of the tuner's pick before the phase
    pick_after_s: float = math.nan  # and after it

    def gain(self, default_s: float) -> float:
        """Percent of the default time by which the pick's exact time fell (the best
        measured time's fall without a session to rebuild candidates)."""
        if math.isfinite(self.pick_before_s):
            return 100.0 * (self.pick_before_s - self.pick_after_s) / default_s
        return 100.0 * (self.best_before_s - self.best_after_s) / default_s


def spans(measured: list[Measurement], schedule: list[str]) -> tuple[float, list[PhaseSpan]]:
    """(default time, phases in order). Runs of one phase label are matched in order to
    `schedule` (the phase names of the run's schedule; a phase that measured nothing has
    no run); a run that matches no later phase starts the schedule's next pass, and from
    there on everything is one span, AGAIN."""
    if not measured or measured[0].phase != "default":
        raise SystemExit("the records do not start with the default candidate's measurement")
    runs: list[list[Measurement]] = []
    for m in measured[1:]:
        if runs and runs[-1][-1].phase == m.phase:
            runs[-1].append(m)
        else:
            runs.append([m])
    default = best = measured[0].runtime
    out: list[PhaseSpan] = []
    seen: dict[str, int] = {}
    at = 0  # the schedule's next phase that may run
    again: list[Measurement] = []
    for run in runs:
        name = run[0].phase
        nxt = next((i for i in range(at, len(schedule)) if schedule[i] == name), None)
        if again or nxt is None:
            again.extend(run)
            continue
        at = nxt + 1
        before = best
        best = min([best, *(m.runtime for m in run if math.isfinite(m.runtime))])
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name} {seen[name]}"
        out.append(PhaseSpan(label, name, run[0].strategy, run[0].step, len(run), before, best))
    if again:
        before = best
        best = min([best, *(m.runtime for m in again if math.isfinite(m.runtime))])
        out.append(PhaseSpan(AGAIN, AGAIN, "schedule", again[0].step, len(again), before, best))
    return default, out


def exact_picks(db_path: str, workload: dict, measured: list[Measurement],
                ends: list[int]) -> tuple[float, dict[int, float]]:
    """(exact default time, {step: exact time of the tuner's pick after that step}): the
    pick as `Tuner.pick` makes it, the least exact time among the FINALISTS best measured
    candidates so far and the default, each rebuilt from its recorded configuration (the
    plan searches from the run's own cache: nothing is searched or measured)."""
    import heapq

    from superopt.xtat.records import RecordsDB
    from superopt.xtat.session import PLAN_BUDGET, open_session, use_plan_cache
    from superopt.xtat.space import PassConfig
    from superopt.xtat.tuner import FINALISTS

    session = open_session({"model": workload["model"], "batch": workload.get("batch"),
                            "hardware": workload.get("hardware"),
                            "rules": workload.get("rules"),
                            "allow_unproved": workload.get("allow_unproved"),
                            "plan_budget": workload.get("plan_budget", PLAN_BUDGET)})
    if session.workload != workload:
        raise SystemExit(f"{db_path}: the model now builds another graph or rule set")
    plans = use_plan_cache(session, db_path, read_only=True)
    db = RecordsDB(db_path, None)
    exact: dict[str, float] = {}

    def time_of(key: str) -> float:
        if key not in exact:
            config = db.config(key)
            configs = [PassConfig.from_json(config.get(n, {})) for n in session.pipeline.names]
            cand = session.pipeline.from_configs(session.graph, configs)
            if cand.key != key:
                raise SystemExit(f"{db_path}: candidate {key} rebuilds as {cand.key}")
            exact[key] = session.runner.time(cand)
        return exact[key]

    try:
        default = session.runner.time(session.default)
        finalists: list[tuple[float, int, str]] = []  # max-heap by -time, as Tuner keeps it
        picks: dict[int, float] = {}
        wanted = set(ends)
        for m in measured:
            entry = (-m.runtime, -m.step, m.candidate)
            if len(finalists) < FINALISTS:
                heapq.heappush(finalists, entry)
            elif entry[:2] > finalists[0][:2]:
                heapq.heapreplace(finalists, entry)
            if m.step in wanted:
                picks[m.step] = min([default, *(time_of(k) for _, _, k in finalists)])
    finally:
        db.close()
        if plans is not None:
            plans.close()
    return default, picks


def draw(default: float, phases: list[PhaseSpan], measured: list[Measurement], title: str,
         out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [p.label if p.phase == AGAIN else f"{p.label} ({p.strategy})" for p in phases]
    colours = plt.get_cmap("tab10")
    kinds = list(dict.fromkeys(p.phase for p in phases))
    colour = {k: colours(i % 10) for i, k in enumerate(kinds)}
    fig, (ax0, ax1, ax2) = plt.subplots(3, 1, figsize=(9, 9.5),
                                        gridspec_kw={"height_ratios": [1.2, 1, 1]})
    steps, best, b = [], [], default
    for m in measured:
        if math.isfinite(m.runtime):
            b = min(b, m.runtime)
        steps.append(m.step)
        best.append(b * 1e6)
    ax0.plot(steps, best, color="black", lw=1.0, label="best measured so far (with noise)")
    if all(math.isfinite(p.pick_after_s) for p in phases):
        xs = [0] + [p.first_step + p.measurements - 1 for p in phases]
        ys = [phases[0].pick_before_s * 1e6] + [p.pick_after_s * 1e6 for p in phases]
        ax0.step(xs, ys, where="post", color="tab:blue", lw=1.6,
                 label="tuner's pick at the end of each phase (exact)")
    for p in phases:
        ax0.axvspan(p.first_step - 0.5, p.first_step + p.measurements - 0.5,
                    color=colour[p.phase], alpha=0.25, lw=0)
    ax0.axhline(default * 1e6, color="grey", ls="--", lw=1, label="default compiler")
    ax0.set_xlabel("measurement")
    ax0.set_ylabel("time (us)")
    ax0.set_title(title)
    ax0.legend(loc="upper right", fontsize=8)
    x = range(len(phases))
    ax1.bar(x, [p.measurements for p in phases], color=[colour[p.phase] for p in phases])
    ax1.set_ylabel("measurements")
    ax1.set_title("budget per phase", fontsize=10)
    for i, p in enumerate(phases):
        ax1.annotate(str(p.measurements), (i, p.measurements), ha="center", va="bottom",
                     fontsize=8)
    gains = [p.gain(default) for p in phases]
    ax2.bar(x, gains, color=[colour[p.phase] for p in phases])
    ax2.set_ylabel("% of default time")
    exact = all(math.isfinite(p.pick_after_s) for p in phases)
    ax2.set_title("gain per phase (fall of the "
                  + ("pick's exact time)" if exact else "best measured time)"), fontsize=10)
    for i, g in enumerate(gains):
        ax2.annotate(f"{g:.1f}", (i, g), ha="center", va="bottom", fontsize=8)
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="records database of one `superopt tune --db` run")
    ap.add_argument("--out", default=str(ROOT / "docs" / "tuning_phases.png"))
    ap.add_argument("--json", default=None, help="also write the per-phase table here")
    ap.add_argument("--measured-only", action="store_true",
                    help="gains from the best measured (noisy) time, without rebuilding "
                         "candidates to time them exactly")
    args = ap.parse_args(argv)
    db = RecordsDB(args.db, None)
    try:
        measured = db.measurements()
        workload, settings = db.workload, db.settings
    finally:
        db.close()
    schedule = make_schedule(settings.get("schedule", "joint"),
                             settings.get("passes", ()) or (),
                             settings.get("strategy", "sweep"))
    default, phases = spans(measured, [ph.name for ph in schedule])
    if not args.measured_only:
        ends = [p.first_step + p.measurements - 1 for p in phases]
        exact_default, picks = exact_picks(args.db, workload, measured, ends)
        before = exact_default
        for i, p in enumerate(phases):
            after = picks[ends[i]]
            phases[i] = replace(p, pick_before_s=before, pick_after_s=after)
            before = after
        default = exact_default
    best = min((m.runtime for m in measured if math.isfinite(m.runtime)), default=default)
    final = phases[-1].pick_after_s if phases and math.isfinite(phases[-1].pick_after_s) else best
    title = (f"{workload.get('model')} b{workload.get('batch')} on TPU {workload.get('hardware')}"
             f": schedule {settings.get('schedule')}, budget {settings.get('budget')}, "
             f"seed {settings.get('seed')}: {default / final:.3f}x the default compiler")
    draw(default, phases, measured, title, Path(args.out))
    print(f"{'phase':<18} {'strategy':<10} {'measurements':>12} {'gain %':>7}")
    for p in phases:
        print(f"{p.label:<18} {p.strategy:<10} {p.measurements:>12} {p.gain(default):>7.2f}")
    print(f"wrote {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "workload": workload, "settings": settings, "default_s": default,
            "best_measured_s": best,
            "phases": [asdict(p) | {"gain_pct": p.gain(default)} for p in phases]},
            indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
