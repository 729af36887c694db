"""XTAT: the multi-pass tuner (DESIGN.md section 9).

- `space`: sites (stable keys, options, default, source nodes) and per-pass configs;
- `stage`: `Stage` (a graph plus earlier decisions) and `Candidate` (stages + configs);
- `passes`: one contract (`sites`, `default`, `apply -> PassResult`) and six passes:
  plan (TASO's search result as one choice), rewrite, layout, fusion, tiling, flags;
- `pipeline`: rebuild from the first changed pass and XTAT-M repair; `store`: the best
  choice per site key;
- `runner`: candidate time on the TPU simulator (exact, or measured with seeded noise);
- `strategies`: random, exhaustive, anneal, evolution, mbo, autotvm, guided behind
  `create(name)`; `advantage`: the local-advantage model of fusion flips that guides
  `guided` (its training data: `advantage_data`);
  `scheduler`: kernel tuning tasks of several models by Ansor's gradient or round-robin;
- `records`: the SQLite records database; `tuner`: schedules and the loop;
- `session`: build everything from a model spec; `remote`: measuring on executors;
- `command`: `superopt tune`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["open_session", "tune"]


def open_session(spec: dict[str, Any], graph: Any = None) -> Any:
    from superopt.xtat.session import open_session as _open

    return _open(spec, graph)


def tune(model: str, budget: int = 200, schedule: str = "joint", passes: Any = None,
         strategy: str = "sweep", seed: int = 0, batch: int | None = None,
         hardware: str | None = None, rules: str | None = None, db: str | None = None,
         graph: Any = None, default_tiling: str | None = None,
         plan_search: str = "backtracking") -> Any:
    """Tune a model on the simulator; returns a `TuneResult` (see `superopt.xtat.tuner`).
    `default_tiling` is the default compiler's tile heuristic the tuning starts from and is
    measured against (`superopt.tpu_sim.tiling.DEFAULT_TILINGS`; None: "xla");
    `plan_search` how the rewrite plan is searched (`passes.plan.PLAN_SEARCHES`)."""
    from superopt.xtat.records import RecordsDB
    from superopt.xtat.tuner import PASS_NAMES, Tuner, make_schedule

    session = open_session({"model": model, "batch": batch, "hardware": hardware,
                            "rules": rules, "default_tiling": default_tiling,
                            "plan_search": plan_search}, graph)
    phases = make_schedule(schedule, tuple(passes or PASS_NAMES), strategy)
    settings = {"passes": list(passes or PASS_NAMES), "schedule": schedule,
                "strategy": strategy, "budget": budget, "seed": seed, "round": 8}
    records = RecordsDB(db, session.workload, settings) if db else None
    try:
        return Tuner(session.pipeline, session.runner, session.default, seed=seed,
                     db=records).run(phases, budget)
    finally:
        if records is not None:
            records.close()
