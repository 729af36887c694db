"""Benchmark: our search strategies against TVM's MetaSchedule on real kernels (issue 45,
part 5), measured by TVM on this CPU.

Four kernels of the zoo (`superopt.xtat.tvm_kernels.KERNELS`: two resnet50 convs, two
bert-base matmuls, batch 1) are tuned by MetaSchedule (`tune_tir`, its evolutionary
search with its XGBoost model, trials of 64) and by `guided`, `evolution`, `autotvm` and
`mbo` (and variants of guided: `guided_plain`, with uniform kernel moves instead
of near ones, its ablation; `guided_screened`, with MetaSchedule's cost model picking
its proposals on the ms space; `guided_init`, whose first 16 proposals are random points
of the space; `guided_prior`, whose 16 random points are the best-scored of 256 by
MetaSchedule's cost model pre-trained on the other three kernels' committed cells,
`guided_prior_screened`, which screens its climb with that model too, refitted as it
goes, `guided_prior_frozen`, the same never refitted, and `guided_prior_wide`, whose
model also reads the cells of `tvm_kernels.CORPUS`, five more kernels of the two models
tuned only for this: `--kernels` names them; `guided_prior_restart`, guided_prior_wide
whose climb starts again from 16 new screened points after 32 trials without getting
faster; `guided_prior_late`, guided_prior_wide whose climb is screened by that model,
refitted as it goes, once 24 trials in a row did not make it faster;
`guided_prior_late_own`, the same screened late by a model of the run's own
measurements alone; `guided_prior_late_fresh`, guided_prior_late whose screened pool is
half new random schedules of every sketch; `guided_prior_late_pop`, the same with moves
of the 64 fastest and a late model of the run alone) driving one of
two spaces (`--space`): `ms`, MetaSchedule's own design space
(`tvm_msspace.MsSpace`: its sketches' sampling decisions as sites), or `knobs`, our
AutoTVM-like knob space of the kernel's loops (`tvm_kernels.KnobSpace`, at most ~55% of
MetaSchedule's best: over it the comparison measures the spaces, not the search). TVM
builds every trial (`tvm.tirx.build`, the host's LLVM target) and times it
(`time_evaluator`, the same number/repeat/min_repeat_ms as MetaSchedule's runner).
Budgets count trials.

Cells are (kernel, tuner, space, seed, budget), one JSON each under `--cells` with every
trial's time in measurement order: a killed run continues where it stopped, and the
report reads whatever cells exist. Our tuners' cells name their space in the file name
and the JSON; cells from before the `ms` space have neither and are the `knobs` space.
MetaSchedule's cells have no space: they are the reference for both. A budget's results come from its own cell when one
was run, else from the first trials of a larger budget's cell of the same seed: no
strategy here reads its budget, and MetaSchedule's first 64 trials are its first round
whatever the budget, so the prefix is the run a smaller budget would have made.

Per kernel, budget, seed and space: each tuner's best GFLOP/s; MetaSchedule's trials to
its own best; each of our tuners' trials to reach MetaSchedule's best (the same seed's
MetaSchedule run at the same budget; "-" when it never does) and their ratio to
MetaSchedule's. The goal (issue 45), per space: guided reaches MetaSchedule's best in
<= 0.5x its trials on >= 3 of the 4 kernels (at a budget, on every seed run); guided's
variants are judged by the same rule apart (`goal_variants`).

Each cell also keeps every trial's program beside it (`.programs.json.gz`: our tuners'
configurations, MetaSchedule's database). `--retime` rebuilds them after the runs and
times each in rounds alternating with the kernel's reference program
(`superopt.xtat.tvm_retime`), into `.retimed.json` beside the cell; `--retimed` reports
on those figures. As measured during the search, one library's time moves by up to 1.6x
within seconds on this shared machine, so which tuner reaches the other's best first
depends on when each was measured; the re-timed figures compare the programs found.

Run pinned to one core with one TVM thread (the cells record the CPU and the pinning):
`TVM_NUM_THREADS=1 taskset -c 0 .venv/bin/python benchmarks/tvm_compare.py --budgets 256
--seeds 0 --space ms`; `--report` only rebuilds the table and JSON from the cells.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
# A tuner here is a strategy, or a variant of one with other options: `guided_plain` is
# guided with uniform kernel moves (local=0), the search before near moves, run beside
# guided as its ablation.
# `guided_screened` is guided with MetaSchedule's cost model picking its proposals
# (`screen=8`: eight scored per trial; `tvm_msspace.MsScreen`), on the ms space only.
# `guided_init` is guided whose first 16 proposals are random points of the whole space
# (`init=16`), the climb starting from the fastest: MetaSchedule's own first trials,
# random samples of its space, reach 0.44-0.91 of its final best in 16 trials where
# guided's climb from the default reached 0.25-0.57 (the re-timed 256-trial cells).
# `guided_prior` is guided_init whose 16 random points are the best-scored of 256 by
# MetaSchedule's cost model pre-trained on the other three kernels' measured schedules
# (leave-one-kernel-out, `prior_examples`); `guided_prior_screened` also screens its climb
# with that model (`screen=8`), refitted on the run's own measurements as it goes;
# `guided_prior_frozen` screens its climb with the pre-trained model as it is (never
# refitted); `guided_prior_wide` is guided_prior whose model also reads the corpus
# kernels' cells (`tvm_kernels.CORPUS`: five more kernels of the two models, tuned only
# for this); `guided_prior_restart` is guided_prior_wide whose climb starts again
# (`restart=32`) from 16 new screened points when 32 trials in a row did not make it
# faster (guided's docstring says why); `guided_prior_late` is guided_prior_wide whose
# proposals are screened (16 scored a proposal, refitted model) from the first time 24
# trials in a row did not make it faster (`screen_after`); `guided_prior_late_own` is
# guided_prior_late whose late screen is a model fitted on the run's measurements alone
# (`MsScreen.own_after`: from the 32nd), the pre-trained one only picking the start;
# `guided_prior_late_fresh` is guided_prior_late whose screened pool is half new random
# points of the whole space (`fresh`), mutated with the rest for four generations, as
# MetaSchedule's evolutionary search takes random schedules into its population each round;
# `guided_prior_late_pop` is guided_prior_late_fresh whose moves are of the 64 fastest
# measured (not 8) and whose late screen is the run-only model of guided_prior_late_own:
# MetaSchedule's own population (its measured best and random schedules) and model.
_LATE = {"init": 16, "screen_init": 16, "screen": 16, "screen_after": 24}
_FRESH = _LATE | {"fresh": 0.5, "generations": 4}
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "guided_plain": ("guided", {"local": 0.0}),
    "guided_screened": ("guided", {"screen": 8}),
    "guided_init": ("guided", {"init": 16}),
    "guided_prior": ("guided", {"init": 16, "screen_init": 16}),
    "guided_prior_screened": ("guided", {"init": 16, "screen_init": 16, "screen": 8}),
    "guided_prior_frozen": ("guided", {"init": 16, "screen_init": 16, "screen": 8}),
    "guided_prior_wide": ("guided", {"init": 16, "screen_init": 16}),
    "guided_prior_restart": ("guided", {"init": 16, "screen_init": 16, "restart": 32}),
    "guided_prior_late": ("guided", _LATE),
    "guided_prior_late_own": ("guided", _LATE),
    "guided_prior_late_fresh": ("guided", _FRESH),
    "guided_prior_late_pop": ("guided", _FRESH | {"parents": 64})}
# The variants whose cost model is pre-trained on other kernels' cells, with what their
# model reads and does: `corpus`, the corpus kernels' cells too; `learn`, refitted on the
# run's measurements; `own_after`, replaced by a model of the run's measurements alone
# once that has read so many. Their own cells never feed a prior, so a prior depends on the
# committed cells of the other tuners only.
@dataclass(frozen=True)
class Prior:
    corpus: bool = False
    learn: bool = True
    own_after: int = 0


PRIOR: dict[str, Prior] = {
    "guided_prior": Prior(),
    "guided_prior_screened": Prior(),
    "guided_prior_frozen": Prior(learn=False),
    "guided_prior_wide": Prior(corpus=True),
    "guided_prior_restart": Prior(corpus=True),
    "guided_prior_late": Prior(corpus=True),
    "guided_prior_late_own": Prior(corpus=True, learn=False, own_after=32),
    "guided_prior_late_fresh": Prior(corpus=True),
    "guided_prior_late_pop": Prior(corpus=True, learn=False, own_after=32)}
GUIDED = ("guided", *(n for n, (base, _) in VARIANTS.items() if base == "guided"))
# Every variant is one of ours: listed once, in VARIANTS.
OURS = ("guided", *VARIANTS, "evolution", "autotvm", "mbo")
TUNERS = ("metaschedule", *OURS)
SPACES = ("ms", "knobs")
BUDGETS = (64, 256, 1000)


def cell_path(cells: Path, kernel: str, tuner: str, seed: int, budget: int,
              space: str = "knobs") -> Path:
    if tuner == "metaschedule":
        return cells / f"{kernel}__{tuner}__s{seed}__b{budget}.json"
    return cells / f"{kernel}__{tuner}__{space}__s{seed}__b{budget}.json"


def done_path(cells: Path, kernel: str, tuner: str, seed: int, budget: int,
              space: str) -> Path | None:
    """The cell already run, if any (a knob-space cell may have the name from before
    spaces were named: kernel__tuner__s..__b..)."""
    paths = [cell_path(cells, kernel, tuner, seed, budget, space)]
    if space == "knobs":
        paths.append(cells / f"{kernel}__{tuner}__s{seed}__b{budget}.json")
    return next((p for p in paths if p.exists()), None)


def make_space(kernel: Any, space: str) -> Any:
    from superopt.xtat import tvm_kernels as tk

    if space == "ms":
        from superopt.xtat.tvm_msspace import MsSpace

        return MsSpace(kernel)
    return tk.KnobSpace(kernel)


def run_cell(kernel: Any, tuner: str, seed: int, budget: int, cells: Path,
             space: str = "knobs") -> dict:
    from superopt.rewrite.cost import processor_name
    from superopt.xtat import tvm_kernels as tk

    path = cell_path(cells, kernel.name, tuner, seed, budget, space)
    done = done_path(cells, kernel.name, tuner, seed, budget, space)
    if done is not None:
        return json.loads(done.read_text())
    start = time.perf_counter()
    ev = tk.Evaluator()
    extra: dict[str, Any] = {}
    if tuner == "metaschedule":
        work = Path(tempfile.mkdtemp(prefix=f"ms_{kernel.name}_"))
        try:
            secs = tk.tune_metaschedule(kernel, budget, seed, work, ev)
            programs = {"workload": (work / "database_workload.json").read_text().splitlines(),
                        "records": (work / "database_tuning_record.json").read_text()
                        .splitlines()}
        finally:
            shutil.rmtree(work, ignore_errors=True)
    else:
        sp = make_space(kernel, space)
        measure = tk.TvmMeasure(sp, ev)
        strategy, opts = VARIANTS.get(tuner, (tuner, {}))
        screen = None
        # a strategy asks for the model
        if space == "ms" and max(opts.get("screen", 1), opts.get("screen_init", 1)) > 1:
            from superopt.xtat.tvm_msspace import MsScreen

            prior = PRIOR.get(tuner)
            screen = MsScreen(sp, seed=seed, learn=prior is None or prior.learn,
                              own_after=0 if prior is None else prior.own_after)
            if prior is not None:
                t0 = time.perf_counter()
                examples = prior_examples(kernel, corpus=prior.corpus)
                extra["prior"] = {sp_.kernel.name: len(cf) for sp_, cf, _ in examples}
                extra["prior_read"] = screen.pretrain(examples)
                extra["prior_s"] = round(time.perf_counter() - t0, 1)
        trials = tk.search(sp, strategy, seed, budget, measure, opts=opts, screen=screen)
        secs = [t.seconds for t in trials]
        programs = {"configs": [t.config for t in trials]}
        best = min(trials, key=lambda t: t.seconds)
        steps = [e.split(":", 1)[0] for e in measure.errors]
        extra |= {"space": space, "strategy": strategy, "options": opts,
                 "best_config": best.config, "errors": len(measure.errors),
                 # schedule: failed to replay or postprocess (MetaSchedule's search drops
                 # such a candidate unmeasured; here it is a failed trial)
                 "errors_by_step": {k: steps.count(k) for k in sorted(set(steps))},
                 "first_errors": measure.errors[:3], "build_s": round(measure.build_s, 2),
                 "space_size": sp.size(), "sites": len(sp.sites)}
        if space == "ms":
            extra["sketches"] = len(sp.sketches)
    out = {"kernel": kernel.name, "tuner": tuner, "seed": seed, "budget": budget,
           "seconds": [None if math.isinf(s) else s for s in secs],
           "wall_s": round(time.perf_counter() - start, 1), "evaluator": vars(ev),
           "cpu": processor_name() or platform.machine(),
           "affinity": sorted(os.sched_getaffinity(0)),
           "tvm_num_threads": os.environ.get("TVM_NUM_THREADS"), **extra}
    cells.mkdir(parents=True, exist_ok=True)
    # The programs first: a cell file without its programs is one from before they
    # were kept, never one killed between the two writes.
    write_atomic(programs_path(path), gzip.compress(json.dumps(programs).encode()))
    write_atomic(path, json.dumps(out, indent=1).encode())
    return out


class PriorError(ValueError):
    """A cell of a pre-trained model's corpus that does not read."""


def prior_examples(kernel: Any, root: Path = ROOT / "results", corpus: bool = True,
                   held_in: bool = False) -> list[tuple[Any, list, list]]:
    """The other kernels' measured schedules on MetaSchedule's space, for a cost model
    pre-trained leave-one-kernel-out: every cell of our tuners with its programs under
    `root`'s `tvm_compare*_cells` folders (the pre-trained variants' own cells excepted;
    the compared kernels', and with `corpus` the corpus kernels' `tvm_kernels.CORPUS`),
    per kernel (its `MsSpace`, configurations, seconds), one schedule once with the median
    of its measurements. Empty when no other kernel has cells. With `held_in`, `kernel`'s
    own cells are read too (to score a prior on them, never to train one)."""
    from superopt.xtat import tvm_kernels as tk
    from superopt.xtat.tvm_msspace import MsSpace

    compared = {k.name for k in tk.KERNELS}
    times: dict[str, dict[str, list[float]]] = {}
    for p in sorted(root.glob("tvm_compare*_cells/*__ms__*.json")):
        if p.name.endswith(".retimed.json") or not programs_path(p).exists():
            continue
        c = json.loads(p.read_text())
        if ((c["kernel"] == kernel.name and not held_in) or c["tuner"] in PRIOR
                or not (corpus or c["kernel"] in compared)):
            continue
        try:
            configs = json.loads(gzip.decompress(programs_path(p).read_bytes()))["configs"]
        except (OSError, EOFError, ValueError, KeyError) as e:  # truncated, not gzip/JSON
            raise PriorError(f"{programs_path(p)}: not a programs file of our tuners "
                             f"({type(e).__name__}: {e})") from None
        per = times.setdefault(c["kernel"], {})
        for config, t in zip(configs, c["seconds"], strict=True):
            if t is not None:
                per.setdefault(json.dumps(config, sort_keys=True), []).append(t)
    out = []
    for k in (*tk.KERNELS, *(tk.CORPUS if corpus else ())):
        if k.name in times:
            keys = sorted(times[k.name])
            configs = [{key: tuple(v) if isinstance(v, list) else v
                        for key, v in json.loads(j).items()} for j in keys]
            out.append((MsSpace(k), configs,
                        [statistics.median(times[k.name][j]) for j in keys]))
    return out


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def programs_path(cell: Path) -> Path:
    """Where a cell keeps every trial's program: our tuners' configurations, or
    MetaSchedule's database (its workload and tuning-record lines), gzipped."""
    return cell.with_name(cell.stem + ".programs.json.gz")


def retimed_path(cell: Path) -> Path:
    return cell.with_name(cell.stem + ".retimed.json")


Key = tuple[str, str, int, str]  # kernel, tuner, seed, space ("" for MetaSchedule)


def load_cells(cells: Path, retimed: bool = False,
               refined: bool = False) -> dict[Key, dict[int, list[float]]]:
    """(kernel, tuner, seed, space) -> budget -> trial times (inf for failed trials).
    With `retimed`, only the cells re-timed in full (`retime`), each trial's time its
    ratio to the kernel's reference times the median of every reference timing of that
    kernel in the same re-timing session (one process: the reference's own speed moves
    between processes, up to 1.3x here on the 1x1 convolution, more than a fast
    program's does, so ratios from two processes are not on one scale). Cells re-timed
    in one session compare as their ratios do. With `refined` (implies `retimed`), only
    the cells refined (`refine`): a refined trial's time is its refined ratio on the
    refining session's scale, any other trial's is inf (it was further from every cell's
    best than the window, so it is no cell's best and reaches none)."""
    retimed = retimed or refined
    out: dict[Key, dict[int, list[float]]] = {}
    loaded = []
    for p in sorted(cells.glob("*.json")):
        if p.name.endswith(".retimed.json"):
            continue
        c = json.loads(p.read_text())
        secs = [math.inf if s is None else float(s) for s in c["seconds"]]
        if retimed:
            r = retimed_path(p)
            if not r.exists():
                continue
            got = json.loads(r.read_text())
            if len(got["ratios"]) < len(secs):  # unfinished: not a whole run
                continue
            secs = [math.inf if x is None else float(x) for x in got["ratios"]]
            if refined:
                fine = got.get("refined")
                if fine is None:
                    continue
                secs = [math.inf] * len(secs)
                for i, x in fine["ratios"].items():
                    secs[int(i)] = math.inf if x is None else float(x)
                loaded.append(((c["kernel"], fine["session"]), secs, fine["reference_s"]))
            else:
                loaded.append(((c["kernel"], got.get("session", "")), secs,
                               got["reference_s"]))
        space = "" if c["tuner"] == "metaschedule" else c.get("space", "knobs")
        out.setdefault((c["kernel"], c["tuner"], c["seed"], space), {})[c["budget"]] = secs
    if retimed:
        refs: dict[tuple[str, str], list[float]] = {}
        for group, _, reference_s in loaded:
            refs.setdefault(group, []).extend(reference_s)
        for group, secs, _ in loaded:
            scale = statistics.median(refs[group])
            secs[:] = [x * scale for x in secs]
    return out


def retime(cells: Path, kernels: list[Any], rounds: int, tuners: set[str],
           log: Any = print, seeds: set[int] | None = None) -> None:
    """Re-time every trial of the cells of `kernels` (and `tuners`, and `seeds`: all when
    None) that keep their programs (`superopt.xtat.tvm_retime`): each rebuilt, timed in `rounds` rounds
    alternating with the kernel's reference program (MetaSchedule's space's default
    schedule), its figure the median ratio. Written to the cell's `.retimed.json` every
    16 trials, so a killed re-timing goes on where it stopped."""
    from superopt.rewrite.cost import processor_name
    from superopt.xtat import tvm_kernels as tk
    from superopt.xtat.tvm_msspace import MsSpace
    from superopt.xtat.tvm_retime import Retimer

    # One process, one session: its reference timings put its ratios in seconds.
    session = f"{platform.node()}:{os.getpid()}:{int(time.time())}"
    for k in kernels:
        todo = []
        for p in sorted(cells.glob(f"{k.name}__*.json")):
            if p.name.endswith(".retimed.json") or not programs_path(p).exists():
                continue
            c = json.loads(p.read_text())
            if c["tuner"] not in tuners or (seeds is not None and c["seed"] not in seeds):
                continue
            done = json.loads(retimed_path(p).read_text()) if retimed_path(p).exists() \
                else None
            if done is None or len(done["ratios"]) < len(c["seconds"]):
                if done is not None and done.get("rounds", rounds) != rounds:
                    raise ValueError(f"{retimed_path(p)}: begun with {done['rounds']} "
                                     f"rounds a trial, not {rounds}: go on with those")
                # Read before TVM builds the kernel's space: a bad file fails at once.
                try:
                    programs = json.loads(gzip.decompress(programs_path(p).read_bytes()))
                except (OSError, EOFError, ValueError) as e:  # truncated, not gzip/JSON
                    raise ValueError(f"{programs_path(p)}: not a programs file "
                                     f"({type(e).__name__}: {e})") from None
                todo.append((p, c, done, programs))
        if not todo:
            continue
        ms_space = MsSpace(k)
        retimer = Retimer(tk.TvmMeasure(ms_space, tk.Evaluator()),
                          ms_space.schedule(ms_space.complete({})), rounds)
        spaces = {"ms": ms_space}
        for p, c, done, programs in todo:
            start = time.perf_counter()
            mods = _cell_modules(k, c, programs, spaces)
            if len(mods) != len(c["seconds"]):
                raise ValueError(f"{programs_path(p)}: {len(mods)} programs for "
                                 f"{len(c['seconds'])} trials")
            ratios = list(done["ratios"]) if done else []
            kept = len(ratios)
            reference_s = list(done["reference_s"]) if done else []
            wall = done["wall_s"] if done else 0.0
            # Where another process went on: its reference may run at another speed, so
            # a resumed file's ratios come from two processes (said here, not hidden).
            resumed_at = [*done.get("resumed_at", []), kept] if done else []
            retimer.reference_s = reference_s
            for i in range(len(ratios), len(mods)):
                failed = c["seconds"][i] is None  # failed when tuned: stays failed
                x = math.inf if failed else retimer.ratio(mods[i])
                ratios.append(None if math.isinf(x) else round(x, 6))
                if (i + 1) % 16 == 0 or i + 1 == len(mods):
                    write_atomic(retimed_path(p), json.dumps({
                        "kernel": k.name, "tuner": c["tuner"], "seed": c["seed"],
                        "budget": c["budget"], "rounds": rounds, "ratios": ratios,
                        # a resumed re-timing keeps its first session's name
                        "session": done.get("session", session) if done else session,
                        "resumed_at": resumed_at,
                        "reference_s": reference_s,
                        "reference": "MetaSchedule's space, default decisions (MsSpace)",
                        "evaluator": vars(tk.Evaluator()),
                        "cpu": processor_name() or platform.machine(),
                        "affinity": sorted(os.sched_getaffinity(0)),
                        "wall_s": round(wall + time.perf_counter() - start, 1)},
                        indent=1).encode())
            log(f"{p.name}: {len(ratios)} trials re-timed ({len(ratios) - kept} now, "
                f"{kept} kept from before) in {time.perf_counter() - start:.0f} s")


def _cell_modules(kernel: Any, cell: dict, programs: dict, spaces: dict) -> list[Any]:
    """Every trial's scheduled module of a cell from its kept programs (`spaces`: the
    kernel's spaces by name, built on first use)."""
    from superopt.xtat.tvm_retime import ms_record_modules

    if cell["tuner"] == "metaschedule":
        return ms_record_modules(programs["workload"], programs["records"])
    name = cell.get("space", "knobs")
    if name not in spaces:  # one space per kernel and name: TVM builds it
        spaces[name] = make_space(kernel, name)
    return [_config_module(spaces[name], cfg) for cfg in programs["configs"]]


def refine(cells: Path, kernels: list[Any], tuners: set[str], window: float, rounds: int,
           log: Any = print, seeds: set[int] | None = None) -> None:
    """Re-time again, with `rounds` paired rounds each, every trial near the top of the
    re-timed cells of each kernel and seed (of `tuners`): those whose re-timed ratio is
    within `window` of the slowest of the cells' bests (so every cell's best and every
    trial that could reach one is refined). One process, one session for them all, so
    the refined ratios of a kernel and seed are on one scale. Written into each cell's
    `.retimed.json` under `refined` every 16 trials (a killed refine goes on)."""
    from superopt.xtat import tvm_kernels as tk
    from superopt.xtat.tvm_msspace import MsSpace
    from superopt.xtat.tvm_retime import Retimer

    session = f"{platform.node()}:{os.getpid()}:{int(time.time())}"
    for k in kernels:
        groups: dict[int, list[tuple[Path, dict, dict]]] = {}
        for p in sorted(cells.glob(f"{k.name}__*.json")):
            if p.name.endswith(".retimed.json") or not retimed_path(p).exists():
                continue
            c = json.loads(p.read_text())
            got = json.loads(retimed_path(p).read_text())
            if c["tuner"] not in tuners or (seeds is not None and c["seed"] not in seeds):
                continue
            if len(got["ratios"]) < len(c["seconds"]):
                raise ValueError(f"{retimed_path(p)}: re-timed in part only "
                                 f"({len(got['ratios'])} of {len(c['seconds'])} trials): "
                                 f"finish it with --retime first")
            groups.setdefault(c["seed"], []).append((p, c, got))
        if not groups:
            continue
        ms_space = MsSpace(k)
        retimer = Retimer(tk.TvmMeasure(ms_space, tk.Evaluator()),
                          ms_space.schedule(ms_space.complete({})), rounds)
        spaces: dict[str, Any] = {"ms": ms_space}
        for seed in sorted(groups):
            group = groups[seed]
            bests = [min((x for x in got["ratios"] if x is not None), default=math.inf)
                     for _, _, got in group]
            limit = max(bests) * (1.0 + window)
            for p, c, got in group:
                start = time.perf_counter()
                fine = got.get("refined") or {
                    "rounds": rounds, "window": window, "limit": limit, "session": session,
                    "ratios": {}, "reference_s": []}
                if fine["rounds"] != rounds:
                    raise ValueError(f"{retimed_path(p)}: refined with {fine['rounds']} "
                                     f"rounds a trial, not {rounds}: go on with those")
                todo = [i for i, x in enumerate(got["ratios"])
                        if x is not None and x <= fine["limit"] and str(i) not in
                        fine["ratios"]]
                if not todo:
                    continue
                programs = json.loads(gzip.decompress(programs_path(p).read_bytes()))
                mods = _cell_modules(k, c, programs, spaces)
                retimer.reference_s = fine["reference_s"]
                for n, i in enumerate(todo, 1):
                    x = retimer.refine(mods[i], rounds)
                    fine["ratios"][str(i)] = None if math.isinf(x) else round(x, 6)
                    if n % 16 == 0 or n == len(todo):
                        got["refined"] = fine
                        write_atomic(retimed_path(p), json.dumps(got, indent=1).encode())
                log(f"{p.name}: {len(todo)} trials refined ({rounds} rounds each) in "
                    f"{time.perf_counter() - start:.0f} s")


def _config_module(space: Any, config: dict[str, Any]) -> Any | None:
    """The scheduled module of a trial's recorded (canonical, JSON) configuration."""
    choices = {key: tuple(v) if isinstance(v, list) else v for key, v in config.items()}
    try:
        return space.schedule(space.complete(choices))
    except Exception:  # did not schedule when tuned either: a failed trial
        return None


def at_budget(runs: dict[int, list[float]], budget: int) -> tuple[list[float], str] | None:
    """The trials a run of `budget` made: its own cell, else a larger cell's prefix."""
    if budget in runs:
        return runs[budget][:budget], "own"
    larger = sorted(b for b in runs if b > budget)
    if larger:
        return runs[larger[0]][:budget], f"prefix of {larger[0]}"
    return None


def report(cells: Path, retimed: bool = False, refined: bool = False) -> dict:
    from superopt.xtat import tvm_kernels as tk

    data = load_cells(cells, retimed, refined)
    kernels = []
    goal_rows: dict[str, dict[int, dict[str, bool]]] = {}
    # Ratios to MetaSchedule's trials, per kernel-seed pair: guided's (per space and
    # budget), and MetaSchedule's own against its other seeds (the A/A control).
    pairs: dict[str, dict[int, list[float | None]]] = {}
    pairs_aa: dict[int, list[float | None]] = {}
    for k in tk.KERNELS:
        entry: dict[str, Any] = {"kernel": k.name, "model": k.model, "op": k.op,
                                 "shapes": k.shapes(), "gflop": round(k.flops / 1e9, 4),
                                 "budgets": {}}
        seeds = sorted({key[2] for key in data if key[0] == k.name})
        for b in BUDGETS:
            rows = []
            for seed in seeds:
                ms_runs = data.get((k.name, "metaschedule", seed, "")) or data.get(
                    (k.name, "metaschedule", 0, ""))
                ms = at_budget(ms_runs, b) if ms_runs else None
                ms_best = min(ms[0]) if ms else None
                ms_trials = tk.trials_to(ms[0], ms_best) if ms else None
                for tuner, space in [("metaschedule", ""),
                                     *((t, sp) for sp in SPACES for t in OURS)]:
                    runs = data.get((k.name, tuner, seed, space))
                    got = at_budget(runs, b) if runs else None
                    if got is None:
                        continue
                    secs, source = got
                    best = min(secs)
                    row: dict[str, Any] = {
                        "tuner": tuner, "space": space or None, "seed": seed,
                        "source": source, "trials_run": len(secs),
                        "best_gflops": round(k.flops / best / 1e9, 3) if math.isfinite(best)
                        else None}
                    if tuner == "metaschedule":
                        row["trials_to_own_best"] = ms_trials
                        # The other way round: MetaSchedule's trials to each of our
                        # tuners' best (same seed and budget), per space.
                        row["trials_to_best_of"] = {
                            sp: {t: tk.trials_to(secs, min(o[0])) for t, o in ours.items()}
                            for sp in SPACES
                            if (ours := _ours_at(data, k.name, seed, sp, b))}
                    elif ms_best is not None and ms_trials:
                        n = tk.trials_to(secs, ms_best)
                        row["ms_seed"] = seed if (k.name, "metaschedule", seed, "") in data \
                            else 0
                        row["trials_to_ms_best"] = n
                        row["ratio_vs_ms"] = round(n / ms_trials, 3) if n else None
                        row["gflops_share_of_ms_best"] = round(ms_best / best, 3)
                    rows.append(row)
            if rows:
                entry["budgets"][str(b)] = rows
                aa = _ms_across_seeds(data, k.name, b, seeds)
                if aa:
                    entry.setdefault("ms_across_seeds", {})[str(b)] = aa
                    pairs_aa.setdefault(b, []).extend(r["ratio"] for r in aa)
                for sp in SPACES:
                    within = _within_space(data, k, b, seeds, sp)
                    if within:
                        entry.setdefault("within_space", {}).setdefault(sp, {})[str(b)] = within
                    for tuner in GUIDED:
                        guided = [r for r in rows if r["tuner"] == tuner
                                  and r["space"] == sp and "ratio_vs_ms" in r]
                        if guided:
                            key = sp if tuner == "guided" else f"{tuner}/{sp}"
                            pairs.setdefault(key, {}).setdefault(b, []).extend(
                                r["ratio_vs_ms"] for r in guided)
                            goal_rows.setdefault(key, {}).setdefault(b, {})[k.name] = all(
                                r["ratio_vs_ms"] is not None and r["ratio_vs_ms"] <= 0.5
                                for r in guided)
        # Trial 0 of each of our cells of a space is the same schedule (the knobs' naive
        # one, MetaSchedule's first sketch as sampled), measured at other moments: its
        # spread is the machine's noise on one measurement.
        noise = {}
        for sp in SPACES:
            zero = [runs[max(runs)][0] for (kn, t, _, s), runs in data.items()
                    if kn == k.name and t in OURS and s == sp and runs
                    and math.isfinite(runs[max(runs)][0])]
            if len(zero) >= 2:
                noise[sp] = {"measurements": len(zero), "min_ms": round(min(zero) * 1e3, 3),
                             "max_ms": round(max(zero) * 1e3, 3),
                             "max_over_min": round(max(zero) / min(zero), 3)}
        if noise:
            entry["noise_default_schedule"] = noise
        kernels.append(entry)
    goal: dict[str, dict[str, Any]] = {}
    variants: dict[str, dict[str, dict[str, Any]]] = {}
    for key, per_budget in sorted(goal_rows.items()):
        tuner, _, sp = key.rpartition("/")
        for b, per in sorted(per_budget.items()):
            met = sum(1 for v in per.values() if v)
            ratios = pairs.get(key, {}).get(b, [])
            aa = pairs_aa.get(b, [])
            (variants.setdefault(tuner, {}) if tuner else goal).setdefault(sp, {})[str(b)] = {
                "kernels_with_guided_ratio_le_0.5": met, "kernels_measured": len(per),
                "per_kernel": per, "met": met >= 3,
                "pairs_guided_le_0.5": [_within_half(ratios), len(ratios)],
                "pairs_ms_vs_own_other_seeds_le_0.5": [_within_half(aa), len(aa)]}
    return {"what": "issue 45 part 5: our strategies vs TVM MetaSchedule on real kernels "
                    "(TVM builds and times every trial, this CPU, 1 core, 1 thread), our "
                    "strategies over MetaSchedule's own design space (ms) and over our "
                    "knob space (knobs)",
            "goal_rule": "per space: guided's trials to reach MetaSchedule's best (same "
                         "seed, same budget) <= 0.5x MetaSchedule's trials to that best, on "
                         "every seed run, on >= 3 of 4 kernels",
            "measure": "refined: the re-timed trials within the window of the slowest of "
                       "the cells' bests re-timed again with more rounds, in one session per "
                       "kernel; the other trials count as never reaching a best" if refined
                       else
                       "re-timed after the runs: every trial's program rebuilt and timed in "
                       "rounds alternating with the kernel's reference program, its time the "
                       "median ratio times the median reference time (cells re-timed in "
                       "full only)" if retimed else
                       "each trial as measured when its tuner ran it",
            "kernels": kernels, "goal": goal,
            # The same rule for guided's variants (options of guided; VARIANTS), apart
            # from the goal, which is guided's as it runs by default.
            "goal_variants": variants}


def _within_half(ratios: list[float | None]) -> int:
    return sum(1 for r in ratios if r is not None and r <= 0.5)


def _ms_across_seeds(data: dict, kernel: str, b: int, seeds: list[int]) -> list[dict]:
    """The A/A control of the goal's rule: MetaSchedule against itself. For each ordered
    pair of its seeds (a, b) at budget `b`, seed a's trials to seed b's best and their
    ratio to seed b's own trials to it (None: a never reaches it). A search no better
    than MetaSchedule, on this noise, meets the rule on the share of pairs this gives."""
    from superopt.xtat import tvm_kernels as tk

    runs = {}
    for seed in seeds:
        got = at_budget(data.get((kernel, "metaschedule", seed, ""), {}), b)
        if got and math.isfinite(min(got[0])):
            runs[seed] = got[0]
    out = []
    for sa in runs:
        for sb in runs:
            if sa == sb:
                continue
            target = min(runs[sb])
            own = tk.trials_to(runs[sb], target)
            n = tk.trials_to(runs[sa], target)
            out.append({"seed": sa, "target_seed": sb, "trials": n,
                        "ratio": round(n / own, 3) if n and own else None})
    return out


def _ours_at(data: dict, kernel: str, seed: int, space: str,
             b: int) -> dict[str, tuple[list[float], str]]:
    """Our tuners' trials at budget `b` on one space (those with a cell)."""
    runs = {t: at_budget(data.get((kernel, t, seed, space), {}), b) for t in OURS}
    return {t: r for t, r in runs.items() if r}


def _within_space(data: dict, k: Any, b: int, seeds: list[int], space: str) -> list[dict]:
    """Our tuners against each other on one space: per seed, the target is the least of
    their bests at budget `b` (so each reaches it), and each one's trials to it."""
    from superopt.xtat import tvm_kernels as tk

    out = []
    for seed in seeds:
        secs_of = {t: r[0] for t, r in _ours_at(data, k.name, seed, space, b).items()}
        if len(secs_of) < 2:
            continue
        target = max(min(secs) for secs in secs_of.values())
        out.append({"seed": seed, "target_gflops": round(k.flops / target / 1e9, 3),
                    "trials": {t: tk.trials_to(secs, target) for t, secs in secs_of.items()}})
    return out


def print_table(res: dict) -> None:
    for k in res["kernels"]:
        print(f"\n{k['kernel']} ({k['op']} {k['shapes']}, {k['gflop']} GFLOP)")
        print(f"  {'budget':>6} {'tuner':<13} {'space':<6} {'seed':>4} {'GFLOP/s':>8} "
              f"{'trials':>7} {'ratio':>6} {'/MS':>6}  source")
        for b, rows in k["budgets"].items():
            for r in rows:
                trials = r.get("trials_to_own_best", r.get("trials_to_ms_best"))
                ratio = r.get("ratio_vs_ms")
                print(f"  {b:>6} {r['tuner']:<13} {r['space'] or '-':<6} {r['seed']:>4} "
                      f"{r['best_gflops'] if r['best_gflops'] is not None else '-':>8} "
                      f"{trials if trials is not None else '-':>7} "
                      f"{ratio if ratio is not None else '-':>6} "
                      f"{r.get('gflops_share_of_ms_best', '-'):>6}  {r['source']}")
        for sp, z in k.get("noise_default_schedule", {}).items():
            print(f"  noise ({sp}): the default schedule measured {z['measurements']}x, "
                  f"{z['min_ms']}..{z['max_ms']} ms (max/min {z['max_over_min']})")
        for sp, per in k.get("within_space", {}).items():
            for b, rows in per.items():
                for r in rows:
                    print(f"  {sp} space, budget {b}, seed {r['seed']}: trials to "
                          f"{r['target_gflops']} GFLOP/s (the least of our bests): "
                          + ", ".join(f"{t} {n}" for t, n in r["trials"].items()))
    print(f"\nmeasure: {res['measure']}")
    print("\ngoal (guided <= 0.5x MetaSchedule's trials on >= 3 of 4 kernels):")
    rules = [("guided", sp, per) for sp, per in res["goal"].items()] + [
        (t, sp, per) for t, spaces in res.get("goal_variants", {}).items()
        for sp, per in spaces.items()]
    for name, sp, per in rules:
        for b, g in per.items():
            print(f"  {name}, {sp} space, budget {b}: {g['kernels_with_guided_ratio_le_0.5']} "
                  f"of {g['kernels_measured']} kernels -> {'met' if g['met'] else 'not met'}; "
                  f"kernel-seed pairs within 0.5x: {name} "
                  "{}/{}".format(*g["pairs_guided_le_0.5"]) + ", MetaSchedule against its "
                  "own other seeds (A/A) {}/{}".format(*g["pairs_ms_vs_own_other_seeds_le_0.5"]))


INTERRUPTED = ("tvm_compare.py: interrupted; finished cells, re-timings and refinements "
               "(written every 16 trials) are kept: run the same command again to go on")


def main(argv: list[str] | None = None) -> int:
    import signal

    from superopt.interrupts import exit_fast

    def stop(signum: int, frame: Any) -> None:
        # Ends the process here: a KeyboardInterrupt raised inside TVM's calls comes
        # back as TVM's own error, which a trial's build takes for an invalid schedule,
        # and the run would go on and keep that trial as failed. Every file is written
        # whole (write_atomic), so what is on disk is what was finished.
        print(INTERRUPTED, file=sys.stderr)
        exit_fast(130)

    try:
        previous = signal.signal(signal.SIGINT, stop)
    except ValueError:  # not the main thread: Python's own KeyboardInterrupt then
        previous = None
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", default="256", help="comma-separated trial budgets")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds (tuning: 0; --retime: every seed's cells)")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (all)")
    ap.add_argument("--tuners", default=",".join(TUNERS))
    ap.add_argument("--space", choices=SPACES, default="ms",
                    help="the space our tuners search (MetaSchedule's runs serve both)")
    ap.add_argument("--cells", type=Path, default=ROOT / "results" / "tvm_compare_cells")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "tvm_compare.json")
    ap.add_argument("--report", action="store_true", help="only rebuild the report")
    ap.add_argument("--retime", action="store_true",
                    help="no tuning: re-time every trial of the cells (of --kernels and "
                         "--tuners) that keep their programs, paired with a reference "
                         "program, then report on those figures")
    ap.add_argument("--retime-rounds", type=int, default=3,
                    help="paired rounds per re-timed trial")
    ap.add_argument("--retimed", action="store_true",
                    help="only the report, on the re-timed figures (the cells re-timed in "
                         "full); like --report, it runs nothing")
    ap.add_argument("--refine", action="store_true",
                    help="no tuning: re-time again, with --refine-rounds rounds each, the "
                         "re-timed trials within --refine-window of the slowest of the "
                         "cells' bests (per kernel and seed), then report on those figures")
    ap.add_argument("--refine-window", type=float, default=0.2,
                    help="refine the trials within this fraction above the slowest best")
    ap.add_argument("--refine-rounds", type=int, default=9,
                    help="paired rounds per refined trial")
    ap.add_argument("--refined", action="store_true",
                    help="only the report, on the refined figures (like --report)")
    a = ap.parse_args(argv)
    if a.refine_rounds < 1:
        ap.error(f"--refine-rounds must be at least 1, not {a.refine_rounds}")
    if not 0.0 <= a.refine_window <= 10.0:
        ap.error(f"--refine-window must be within [0, 10], not {a.refine_window}")
    if a.retime_rounds < 1:
        ap.error(f"--retime-rounds must be at least 1, not {a.retime_rounds}")
    os.environ.setdefault("TVM_NUM_THREADS", "1")
    from superopt.xtat import tvm_kernels as tk

    names = [n for n in a.kernels.split(",") if n]
    # The corpus kernels are tuned only when named (a prior's training data).
    known = (*tk.KERNELS, *tk.CORPUS)
    unknown = sorted(set(names) - {k.name for k in known})
    if unknown:
        ap.error(f"--kernels: unknown kernel {unknown[0]!r} (known: "
                 f"{', '.join(k.name for k in known)})")
    kernels = [k for k in known if k.name in names] if names else list(tk.KERNELS)
    bad = sorted(set(t for t in a.tuners.split(",") if t) - set(TUNERS))
    if bad:
        ap.error(f"--tuners: unknown tuner {bad[0]!r} (known: {', '.join(TUNERS)})")
    # Only a tuning run makes the folder; any other mode reads cells that must be there
    # (an empty report would look like one on cells that measured nothing).
    reads = a.report or a.retimed or a.refined or a.retime or a.refine
    if reads and not a.cells.is_dir():
        ap.error(f"--cells: no such folder {a.cells}")
    try:
        seeds = [int(s) for s in (a.seeds or "").split(",") if s]
    except ValueError:
        ap.error(f"--seeds: not a comma-separated list of integers: {a.seeds!r}")
    if a.retime:
        try:
            retime(a.cells, kernels, a.retime_rounds, set(a.tuners.split(",")),
                   seeds=None if a.seeds is None else set(seeds))
        except ValueError as e:  # a cell's programs or re-timing that do not fit it
            print(f"tvm_compare.py: {e}", file=sys.stderr)
            return 2
    elif a.refine:
        try:
            refine(a.cells, kernels, set(a.tuners.split(",")), a.refine_window,
                   a.refine_rounds, seeds=None if a.seeds is None else set(seeds))
        except ValueError as e:  # a re-timing unfinished, or begun with other rounds
            print(f"tvm_compare.py: {e}", file=sys.stderr)
            return 2
    elif not (a.report or a.retimed or a.refined):  # a report tunes nothing new
        for budget in (int(b) for b in a.budgets.split(",")):
            for seed in seeds or [0]:
                for k in kernels:
                    for tuner in a.tuners.split(","):
                        t0 = time.perf_counter()
                        done = done_path(a.cells, k.name, tuner, seed, budget,
                                         a.space) is not None
                        try:
                            c = run_cell(k, tuner, seed, budget, a.cells, a.space)
                        except PriorError as e:  # a prior's cell that does not read
                            print(f"tvm_compare.py: {e}", file=sys.stderr)
                            return 2
                        secs = [s for s in c["seconds"] if s is not None]
                        best = k.flops / min(secs) / 1e9 if secs else 0.0
                        where = "" if tuner == "metaschedule" else f" ({a.space})"
                        print(f"{k.name} {tuner}{where} seed {seed} budget {budget}: "
                              f"{len(c['seconds'])} trials, best {best:.2f} GFLOP/s, "
                              f"{'cached' if done else f'{time.perf_counter() - t0:.0f} s'}",
                              flush=True)
    res = report(a.cells, retimed=a.retime or a.retimed,
                 refined=a.refine or a.refined)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print_table(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
