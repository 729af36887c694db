"""TASO-style rule generation: enumerate, fingerprint, bucket, confirm, prune, verify.

Stages (each reported with its count):

1. enumerate every term of up to N ops (`enumerate.py`; the last level in shards, in
   parallel, resumable from a work directory);
2. bucket terms by exact mod-p fingerprint (shape included);
3. confirm each bucket on fresh random inputs (a second, independent evaluation);
4. pair each term with the earliest smaller member of its bucket that passes TASO's
   common-subgraph and common-supergraph pruning; terms equal to one of their inputs give
   rules with a bare variable as target. Stages 2-4 run by partition of the fingerprints,
   out of core, on workers (`buckets.py`);
5. two-output rules: pairs of terms that share operators (e.g. two matmuls of one input vs
   one matmul on concatenated weights then split) against other pairs of the same two
   buckets, for graphs of up to TWO_OUTPUT_MAX_OPS ops;
6. drop duplicates under renaming of interchangeable inputs;
7. build rules with shape-dependent attributes as expressions (`symshape.py`) and check
   every one with the IR's interpreter: `differs` on fresh exact inputs and the float64
   reference semantics on random normal inputs. Only rules passing both are written;
8. test every rule at shapes other than the generator's and strengthen its condition where
   it fails there (`strengthen.py`). With `prune_derived`, the rules of the largest size
   are first checked against the tested smaller rules by bounded equality saturation
   (`covers.py`, at the shapes they were found at) and those derived are left out before
   their own test: TASO's redundancy pruning decided by derivation, which also spares the
   test for most of them.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.types import TensorType
from superopt.substitutions.enumerate import (
    COUNT_KEYS,
    Shard,
    TermTable,
    Unit,
    config_digest,
    load_shard,
    merge_arrays,
    plan_shards,
    run_shard,
    save_shard,
    shard_path,
)
from superopt.substitutions.presets import GeneratorConfig
from superopt.substitutions.prune import canonical, common_subgraph
from superopt.substitutions.rule import Rule, differs
from superopt.substitutions.symshape import RuleSpec, build_rule
from superopt.substitutions.termstore import (
    _WORKER,
    NodeKey,
    TermStore,
    _forked_worker_init,
    _orient,
    _worker_init,
)

if TYPE_CHECKING:
    from superopt.substitutions.buckets import Fingerprints

Progress = Callable[[str, int, int], None]
# Two-output graphs have at most this many ops. Linking two terms that share an operator
# is quadratic in the terms holding it; at 4 ops 8.6M terms have an equal partner (3 ops:
# 110k), beyond one process's memory and this machine's time. So a 4-op run adds no new
# two-output rules to the 3-op ones (its single-output rules go up to 4 ops).
TWO_OUTPUT_MAX_OPS = 3
PROGRESS_EVERY = 5_000  # dedup and build report every this many candidates

VERIFY_SEED = 1_000_003
REFERENCE_TRIALS_BOUNDED = 8  # float draws of the IR check when inputs were drawn bounded


class GenerateError(IRError):
    """A generator run that cannot proceed (e.g. a work directory from another run)."""


@dataclass
class GenerateResult:
    rules: list[Rule]
    stages: dict[str, int]
    times: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


# ---- the pipeline --------------------------------------------------------------------

def shard_task(task: tuple[GeneratorConfig, int]) -> tuple[int, dict[str, np.ndarray]]:
    """One shard on any executor's worker: the worker builds the lower levels' table once
    (per config) and returns the shard's index and arrays for the caller to save."""
    cfg, index = task
    _worker_init(cfg)
    return index, _worker_run(index, None)


def _worker_run(index: int, path: str | None) -> dict[str, np.ndarray]:
    table: TermTable = _WORKER["table"]
    shard: Shard = _WORKER["shards"][index]
    arrays = run_shard(table, _WORKER["units"], shard, table.cfg.max_ops)
    if path is not None:
        save_shard(Path(path), arrays)
    return arrays


def _peak_mb() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"parent": round(own, 1), "largest_worker": round(kids, 1)}


def _prepare_workdir(workdir: Path, cfg: GeneratorConfig) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    meta = workdir / "run.json"
    digest = config_digest(cfg)
    if meta.exists():
        try:
            old = json.loads(meta.read_text())
        except json.JSONDecodeError:
            old = {}
        if old.get("digest") != digest:
            raise GenerateError(f"{workdir}: work directory holds shards of another run "
                                f"(config {old.get('digest')!r}, this run {digest!r}); use "
                                "another directory")
    else:
        meta.write_text(json.dumps({"digest": digest, "config": cfg.key()}, indent=1))


def enumerate_last_level(table: TermTable, units: list[Unit], shards: list[Shard],
                         workers: int, workdir: Path | None, progress: Progress | None,
                         executor: str | None = None, merge: bool = True
                         ) -> tuple[dict[str, np.ndarray] | None, int]:
    """Run (or load) every shard of the last level; returns merged arrays and how many
    shards came from the work directory. Without `merge` (a work directory is then
    needed) shards are only saved there, never held together: None for the arrays.

    By default the shards run in this process or in forked workers that share the table
    of lower levels with the parent. A named `executor` (`superopt.executor`: `process`,
    `dask`, `dask://HOST:PORT`) sends (config, shard index) tasks instead: each worker
    builds the table once, and the caller saves every shard as it arrives, so an
    interrupted run resumes from the work directory either way."""
    cfg = table.cfg
    level = cfg.max_ops
    results: dict[int, dict[str, np.ndarray]] = {}
    resumed = 0
    todo: list[int] = []
    for i, sh in enumerate(shards):
        p = shard_path(workdir, sh) if workdir is not None else None
        if p is not None and p.exists():
            if merge:
                results[i] = load_shard(p)
            resumed += 1
        else:
            todo.append(i)
    done = resumed
    if progress:
        progress("enumerate", done, len(shards))
    keep = merge or workdir is None
    todo.sort(key=lambda i: -shards[i].cost)  # longest first balances the pool
    if executor is not None and todo:
        from superopt.executor import run_tasks

        def arrived(item: tuple[int, dict[str, np.ndarray]]) -> None:
            nonlocal done
            i, arrays = item
            if workdir is not None:  # saved as it arrives: an interrupted run resumes
                save_shard(shard_path(workdir, shards[i]), arrays)
            if keep:
                results[i] = arrays
            done += 1
            if progress:
                progress("enumerate", done, len(shards))

        run_tasks(shard_task, [(cfg, i) for i in todo], workers, arrived, executor)
    elif workers <= 1 or len(todo) <= 1:
        for i in todo:
            arrays = run_shard(table, units, shards[i], level)
            if workdir is not None:
                save_shard(shard_path(workdir, shards[i]), arrays)
            if keep:
                results[i] = arrays
            done += 1
            if progress:
                progress("enumerate", done, len(shards))
    else:
        import multiprocessing as mp

        _WORKER.update(digest=config_digest(cfg), table=table, units=units, shards=shards)
        ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                 initializer=_forked_worker_init,
                                 initargs=(cfg, os.getpid())) as pool:
            futures: dict[Future[dict[str, np.ndarray]], int] = {}
            try:
                for i in todo:
                    p = str(shard_path(workdir, shards[i])) if workdir is not None else None
                    futures[pool.submit(_worker_run, i, p)] = i
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        arrays = f.result()
                        if keep:
                            results[futures[f]] = arrays
                        done += 1
                        if progress:
                            progress("enumerate", done, len(shards))
            except BaseException:
                from superopt.executor import stop_pool

                stop_pool(pool)  # Ctrl-C: the running shards could take minutes
                raise
    if not keep:
        return None, resumed
    merged = merge_arrays([results[i] for i in range(len(shards))])
    return merged, resumed


def generate(cfg: GeneratorConfig, workers: int = 1, workdir: str | Path | None = None,
             progress: Progress | None = None, verify: bool = True,
             name_prefix: str | None = None, drop_instances: bool = False,
             sample_check: bool = True, executor: str | None = None,
             prune_derived: bool = False) -> GenerateResult:
    """Generate a rule library for `cfg` (see the module docstring for the stages).

    With `drop_instances`, a rule that another rule yields by substituting one variable for
    another (`(concat 0 (concat 0 ?x1 ?x2) ?x1) => ...` from concat associativity) is left
    out, as TASO's generator does; by default such rules are only counted.

    With `sample_check` (and `verify`), every rule is also random-tested at shapes other
    than the generator's and strengthened where it fails there (`strengthen.py`).

    `executor` (`process`, `dask`, `dask://HOST:PORT`) runs the enumeration shards and the
    check at other shapes on `superopt.executor` instead of forked workers.

    With `prune_derived` (and the test at other shapes), rules whose larger side has the
    most ops of the run are left out when the rules with fewer ops, tested first, derive
    them (`covers.check` at the shapes they were found at, with ewadd/ewmul commutativity,
    budget `PRUNE_BUDGET`); only the rest are tested. Checkpointed like the test."""
    t_start, c_start = time.perf_counter(), time.process_time()
    times: dict[str, float] = {}
    stages: dict[str, int] = {}
    wd = Path(workdir) if workdir is not None else None
    if wd is not None:
        _prepare_workdir(wd, cfg)
    level = cfg.max_ops
    prefix = name_prefix or f"{cfg.preset}{level}"
    settings = {"verify": verify, "prefix": prefix}
    saved = _load_checked(wd, settings) if wd is not None else None
    if saved is not None:
        # Every stage up to the IR check finished in an earlier run: take its rules.
        checked, stages, times, info = saved
        rules = [r for r, _ in checked]
        return _finish(checked, rules, stages, times, info, workers, wd, progress, verify,
                       sample_check, drop_instances, executor, prefix, (t_start, c_start),
                       prune_derived, level)

    t0 = time.perf_counter()
    table = TermTable(cfg, level - 1)
    units, shards = plan_shards(table, level)
    last, resumed = enumerate_last_level(table, units, shards, workers, wd, progress,
                                         executor, merge=wd is None)
    times["enumerate"] = time.perf_counter() - t0

    # ---- buckets, confirmation, single-output pairs: by partition, on disk ----------
    t0 = time.perf_counter()
    scratch = None
    if wd is None:
        import tempfile

        scratch = tempfile.TemporaryDirectory(prefix="superopt-buckets-")
    folder = wd if wd is not None else Path(scratch.name)  # type: ignore[union-attr]
    from superopt.substitutions import buckets as bk

    table.release_values()  # enumeration's values: the stages below use fresh ones
    bk.write_last_level(folder, shards, wd, last)
    last, _ = bk.open_last_level(folder)
    counts = {k: sum(c[k] for c in table.level_counts.values()) for k in COUNT_KEYS}
    for k, v in zip(COUNT_KEYS, last["counts"].tolist(), strict=True):
        counts[k] += v
    stages["graphs enumerated (terms evaluated)"] = counts["evaluated"]
    stages["pruned: duplicate tensors in graph"] = counts["pruned_duplicate"]
    stages["terms kept"] = counts["clean_terms"]
    store = TermStore(table, last, level)
    _WORKER.update(digest=config_digest(cfg), table=table, units=units, shards=shards)
    got = bk.bucket_and_pair(cfg, folder, workers, progress, executor)
    class_fp = bk.Fingerprints(got)
    stages["distinct fingerprints"] = got.counts["distinct"]
    stages["candidate pairs (bucket hits)"] = got.counts["hits"]
    stages["collapse candidates (term equal to one of its inputs)"] = len(store.coll)
    coll_ids = [store.cbase + c for c in range(len(store.coll))]
    fresh = store.fresh_hashes(coll_ids + list(range(table.n_inputs)))
    confirmed_coll: list[tuple[int, int]] = []
    for c in range(len(store.coll)):
        t = store.cbase + c
        k = store.coll[c][4]
        if fresh[t] == fresh[k]:
            confirmed_coll.append((t, k))
    stages["confirmed on fresh inputs"] = got.counts["confirmed"]
    stages["collapse candidates confirmed"] = len(confirmed_coll)
    times["bucket+confirm+pair"] = time.perf_counter() - t0
    if progress:
        progress("candidates", 0, 1)

    t0 = time.perf_counter()
    candidates = list(got.candidates)
    after_sub = got.counts["after_sub"]
    single_after_super = len(candidates)
    for t, k in confirmed_coll:
        candidates.append(((t,), (k,), -1))

    # ---- two-output candidates ----------------------------------------------------
    multi_stats = {"linked": 0, "candidates": 0, "after_sub": 0}
    if cfg.max_outputs >= 2:
        two_ops = min(level, TWO_OUTPUT_MAX_OPS)
        # at 4 ops only the table's terms (up to 3 ops) can be part of a two-output graph:
        # the classes keep those members alone
        classes = got.class_lists(None if two_ops == level else store.n_table)
        two = _two_output_candidates(store, classes, two_ops, multi_stats)
        del classes
        candidates.extend(two)
    stages["after common-subgraph pruning"] = after_sub
    stages["after common-supergraph pruning"] = single_after_super
    stages["two-output graphs sharing operators"] = multi_stats["linked"]
    stages["two-output: partner left after common-subgraph pruning"] = multi_stats["after_sub"]
    stages["two-output: after common-supergraph pruning"] = multi_stats["candidates"]
    stages["all candidates (single + collapse + two-output)"] = len(candidates)
    times["two-output pair+prune"] = time.perf_counter() - t0
    if progress:
        progress("candidates", 1, 1)

    # ---- duplicates under renaming ------------------------------------------------
    t0 = time.perf_counter()
    groups = _input_groups(cfg)
    commutative = {i for i, t in enumerate(cfg.templates) if t.commutative}
    tkeys = [t.key for t in cfg.templates]
    seen: dict[str, int] = {}
    unique: list[tuple[tuple[int, ...], tuple[int, ...], int, dict[int, int]]] = []
    for n, (src, tgt, ci) in enumerate(candidates):
        if progress and n % PROGRESS_EVERY == 0:  # minutes at 4 ops (850k candidates)
            progress("dedup", n, len(candidates))
        key, mapping = canonical([store.expr(t) for t in src], [store.expr(t) for t in tgt],
                                 groups, tkeys.__getitem__, commutative.__contains__)
        if key in seen:
            continue
        seen[key] = len(unique)
        unique.append((src, tgt, ci, mapping))
    stages["after renaming dedup"] = len(unique)
    stages["after renaming dedup: two-output"] = sum(1 for u in unique if len(u[0]) == 2)
    times["dedup"] = time.perf_counter() - t0

    # ---- rules, checked by the IR ---------------------------------------------------
    t0 = time.perf_counter()
    built: list[tuple[Rule, dict[str, TensorType]]] = []
    build_failed = 0
    for n, (src, tgt, ci, mapping) in enumerate(unique):
        if progress and n % PROGRESS_EVERY == 0:
            progress("build", n, len(unique))
        try:
            rule, types = _make_rule(store, src, tgt, mapping, ci, class_fp, prefix)
        except IRError:
            build_failed += 1
            continue
        built.append((rule, types))
    general: dict[str, int] = {}
    merged: list[tuple[Rule, dict[str, TensorType]]] = []
    for rule, types in built:
        gkey = _general_key(rule)
        if gkey in general:
            first = merged[general[gkey]][0]
            merged[general[gkey]] = (_add_instance(first, rule), merged[general[gkey]][1])
            continue
        general[gkey] = len(merged)
        merged.append((rule, types))
    stages["after generalization dedup"] = len(merged)
    stages["after generalization dedup: two-output"] = sum(1 for r, _ in merged if r.outputs == 2)
    built = merged
    refuted = 0
    rules: list[Rule] = []
    checked: list[tuple[Rule, dict[str, TensorType]]] = []
    if progress:
        progress("verify", 0, len(built))
    for n, (rule, types) in enumerate(built):
        if verify and not check_rule(rule, types, bound=cfg.input_bound):
            refuted += 1
            continue
        rules.append(rule)
        checked.append((rule, types))
        if progress and n % 50 == 0:
            progress("verify", n, len(built))
    if progress:
        progress("verify", len(built), len(built))
    stages["rules not expressible"] = build_failed
    stages["rejected by the IR check"] = refuted
    times["build+verify"] = time.perf_counter() - t0
    if scratch is not None:
        scratch.cleanup()
    info = {"shards": len(shards), "shards_resumed": resumed, "table_terms": len(table),
            "bucket_partitions": got.parts, "bucket_partitions_resumed": got.parts_resumed,
            "last_level_terms": store.m, "classes": len(got),
            "level_counts": {str(k): dict(v) for k, v in table.level_counts.items()},
            "last_level_counts": dict(zip(COUNT_KEYS, last["counts"].tolist(), strict=True)),
            "stages_resumed": []}
    if wd is not None:
        _save_checked(wd, settings, checked, stages, times, info)
    return _finish(checked, rules, stages, times, info, workers, wd, progress, verify,
                   sample_check, drop_instances, executor, prefix, (t_start, c_start),
                   prune_derived, level)


def _finish(checked: list[tuple[Rule, dict[str, TensorType]]], rules: list[Rule], stages: dict[str, int], times: dict[str, float],
            info: dict[str, Any], workers: int, wd: Path | None, progress: Progress | None,
            verify: bool, sample_check: bool, drop_instances: bool, executor: str | None,
            prefix: str, start: tuple[float, float], prune_derived: bool = False,
            level: int = 0) -> GenerateResult:
    """The stages after the IR check: the test at other shapes (checkpointed rule by rule
    in the work directory; with `prune_derived` the largest rules are pruned by derivation
    from the tested smaller ones first), instances, naming."""
    t_start, c_start = start
    if verify and sample_check and prune_derived and checked:
        # The largest: single-output rules with a side of the run's size (tree size: a
        # shared subterm counts twice, so a few smaller graphs join them; any split is
        # sound, the smaller rules alone being the library). Two-output rules come from
        # graphs of at most TWO_OUTPUT_MAX_OPS ops and stay with the smaller ones.
        largest = [k for k, (r, _) in enumerate(checked)
                   if r.outputs == 1 and max(r.size) >= level]
        smaller = sorted(set(range(len(checked))) - set(largest))
        t0 = time.perf_counter()
        rules = _test_at_other_shapes(checked, workers, stages, progress, executor, wd, info,
                                      smaller)
        times["test at other shapes: smaller rules"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        left = _prune_derived(checked, largest, rules, workers, progress, executor, wd)
        stages[f"{level}-op rules derived by smaller ones (pruned before their test)"] = (
            len(largest) - len(left))
        times["prune by derivation"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rules += _test_at_other_shapes(checked, workers, stages, progress, executor, wd, info,
                                       left)
        times["test at other shapes"] = time.perf_counter() - t0
    elif verify and sample_check:
        t0 = time.perf_counter()
        rules = _test_at_other_shapes(checked, workers, stages, progress, executor, wd, info)
        times["test at other shapes"] = time.perf_counter() - t0
    instances = instance_rules(rules)
    stages["instances of another rule (kept unless drop_instances)"] = len(instances)
    if drop_instances:
        rules = [r for k, r in enumerate(rules) if k not in instances]
    rules.sort(key=lambda r: (r.outputs, sum(r.size), max(r.size), _text(r)))
    from dataclasses import replace

    rules = [replace(r, name=f"{prefix}_{i + 1:04d}") for i, r in enumerate(rules)]
    stages["rules written"] = len(rules)
    stages["single-output rules"] = sum(1 for r in rules if r.outputs == 1)
    stages["two-output rules"] = sum(1 for r in rules if r.outputs == 2)
    stages["rules with a bare-variable target"] = sum(
        1 for r in rules if r.outputs == 1 and r.size[1] == 0)
    times["total"] = time.perf_counter() - t_start
    times["cpu_parent"] = time.process_time() - c_start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    times["cpu_workers"] = kids.ru_utime + kids.ru_stime
    info = {**info, "workers": workers, "peak_rss_mb": _peak_mb(), "cpu_count": os.cpu_count()}
    return GenerateResult(rules, stages, times, info)


# ---- checkpoints of the stages after enumeration ----------------------------------------

CHECKED_FILE = "checked.json"  # the rules that passed the IR check, with their stage counts
SHAPES_FILE = "shapes.jsonl"  # one line per rule tested at other shapes, as it finishes
_BEFORE_CHECKED = ("enumerate", "bucket+confirm", "pair+prune", "dedup", "build+verify")


def _save_checked(wd: Path, settings: dict[str, Any],
                  checked: Sequence[tuple[Rule, dict[str, TensorType]]],
                  stages: dict[str, int], times: dict[str, float], info: dict[str, Any]) -> None:
    from superopt.ir.files import atomic_write_text
    from superopt.substitutions.library import rule_to_json

    rows = [{"rule": rule_to_json(r), "types": {v: [list(t.shape), str(t.dtype)]
                                                for v, t in types.items()}}
            for r, types in checked]
    (wd / SHAPES_FILE).unlink(missing_ok=True)  # results of an earlier rule list
    atomic_write_text(wd / CHECKED_FILE, json.dumps(
        {"settings": settings, "stages": stages, "times": times, "info": info,
         "rules": rows}))


def _load_checked(wd: Path, settings: dict[str, Any]) -> tuple[
        list[tuple[Rule, dict[str, TensorType]]], dict[str, int], dict[str, float],
        dict[str, Any]] | None:
    """The checkpoint of the stages up to the IR check, or None when there is none for
    these settings (the work directory's config digest was checked already)."""
    from superopt.ir.types import DType
    from superopt.substitutions.library import rule_from_json

    path = wd / CHECKED_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("settings") != settings:
            return None
        checked = [(rule_from_json(row["rule"], str(path), i),
                    {v: TensorType(tuple(shape), DType(dt))
                     for v, (shape, dt) in row["types"].items()})
                   for i, row in enumerate(data["rules"])]
    except (ValueError, KeyError, TypeError, IRError) as e:
        raise GenerateError(f"{path}: unreadable checkpoint ({e}); remove it to redo the "
                            "stages after enumeration") from None
    info = dict(data["info"])
    info["shards_resumed"] = info["shards"]
    info["stages_resumed"] = list(_BEFORE_CHECKED)
    return checked, dict(data["stages"]), dict(data["times"]), info


def _load_shape_results(wd: Path | None, n: int) -> dict[int, list[Any]]:
    """Results of the test at other shapes that an earlier run finished (by rule index);
    a line cut short by a kill is ignored."""
    path = wd / SHAPES_FILE if wd is not None else None
    if path is None or not path.exists():
        return {}
    got: dict[int, list[Any]] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
            k, res = int(row["k"]), list(row["res"])
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= k < n and len(res) == 4:
            got[k] = res
    return got


def indexed_strengthen(task: tuple[int, Any]) -> tuple[int, Any]:
    """`strengthen_task` with the rule's index carried along, so that each result can be
    checkpointed as it arrives (in any order)."""
    from superopt.substitutions import strengthen

    k, inner = task
    return k, strengthen.strengthen_task(inner)


def _test_at_other_shapes(checked: Sequence[tuple[Rule, dict[str, TensorType]]], workers: int,
                          stages: dict[str, int], progress: Progress | None,
                          executor: str | None = None, wd: Path | None = None,
                          info: dict[str, Any] | None = None,
                          only: Sequence[int] | None = None) -> list[Rule]:
    """Random-test each rule at sampled shapes (the verifier's tester) and keep it as
    generalised, strengthened, or (refuted even at its own shapes) not at all. With a work
    directory each result is appended to it as it arrives, and a resumed run tests only
    the rules left. `only`: the positions in `checked` to test (the others are not
    returned); the stage counts are added to those of an earlier call."""
    from dataclasses import replace

    from superopt.substitutions.strengthen import LEVELS, TYPING, UNTESTED, untested_reason
    # Rules that no other shapes can refute are not sent to the workers at all.
    results: list[tuple[bool, str | None, str, str] | None] = [
        (True, r.condition, UNTESTED, "") if untested_reason(r, types) else None
        for r, types in checked]
    wanted = range(len(checked)) if only is None else only
    earlier = _load_shape_results(wd, len(checked))
    for k, res in earlier.items():
        if results[k] is None:
            results[k] = tuple(res)  # type: ignore[assignment]
    if info is not None:
        info["shape_tests_resumed"] = info.get("shape_tests_resumed", 0) + sum(
            1 for k in wanted if k in earlier)
    todo = [k for k in wanted if results[k] is None]
    tasks = [(k, (_text(checked[k][0]), {v: list(t.shape) for v, t in checked[k][1].items()}))
             for k in todo]
    done = [0]

    def tick(item: tuple[int, Any]) -> list[dict[str, Any]]:
        k, res = item
        results[k] = res
        done[0] += 1
        if progress and (done[0] % 25 == 0 or done[0] == len(tasks)):
            progress("test at other shapes", done[0], len(tasks))
        return [{"k": k, "res": list(res)}]

    _run_logged(indexed_strengthen, tasks, workers, executor,
                wd / SHAPES_FILE if wd is not None else None, tick)
    out: list[Rule] = []
    levels: dict[str, int] = dict.fromkeys(("", UNTESTED, TYPING, *LEVELS, "refuted"), 0)
    for k in wanted:
        rule, res = checked[k][0], results[k]
        assert res is not None
        keep, cond, level, ce = res
        levels[level] += 1
        if not keep:
            continue
        if level and level != UNTESTED:
            prov = dict(rule.provenance)
            prov["strengthened"] = {"level": level, "refuted_by": ce}
            rule = replace(rule, condition=cond, provenance=prov)
        out.append(rule)
    counts = {
        "not tested at other shapes (none can refute them)": levels[UNTESTED],
        "refuted at sampled shapes": len(wanted) - levels[""] - levels[UNTESTED]
        - levels[TYPING],
        "target untyped at sampled shapes: rank conditions": levels[TYPING],
        "strengthened: rank conditions": levels["rank"],
        "strengthened: + attribute values": levels["attributes"],
        "strengthened: + dimension equalities": levels["equalities"],
        "strengthened: pinned to discovery shapes": levels["pinned"],
        "refuted even when pinned (left out)": levels["refuted"]}
    for key, n in counts.items():
        stages[key] = (stages.get(key, 0) if only is not None else 0) + n
    return out


# ---- pruning by derivation (prune_derived) ----------------------------------------------

DERIVED_FILE = "derived.jsonl"  # one line per largest rule checked against smaller ones
# E-nodes, seconds, rounds. Bound by nodes, not time, so that the verdicts (and the library)
# do not depend on the machine's load. TASO preset at 3 ops: 310 of 650 rules derived in
# ~12 s with 2 workers; (2000, 0.25 s, 8) derived 315 in ~48 s. A rule left undecided is
# kept and tested, never dropped.
PRUNE_BUDGET = (300, 1.0, 6)
PRUNE_CHUNK = 100


def derived_task(task: tuple[list[dict], list[tuple[int, dict]], tuple[int, float, int]]
                 ) -> list[tuple[int, str]]:
    """(position, verdict) of each rule of a chunk checked against the library rules (both
    as library JSON: rules hold mapping proxies, which do not pickle)."""
    from superopt.substitutions.covers import Budget, check, compile_library
    from superopt.substitutions.library import rule_from_json

    lib_rules, chunk, budget = task
    lib = compile_library([rule_from_json(r, "<library>", i) for i, r in enumerate(lib_rules)],
                          commutative=True)
    return [(k, check(lib, rule_from_json(r, "<candidates>", k), Budget(*budget),
                      count=1).verdict) for k, r in chunk]


def _prune_derived(checked: Sequence[tuple[Rule, dict[str, TensorType]]],
                   largest: Sequence[int], library: Sequence[Rule], workers: int,
                   progress: Progress | None, executor: str | None,
                   wd: Path | None) -> list[int]:
    """The positions in `largest` whose rule `library` (the tested smaller rules) does not
    derive within PRUNE_BUDGET. Verdicts are appended to the work directory as they arrive
    (with the library's digest: a changed library checks again)."""
    import hashlib

    from superopt.substitutions.library import rule_to_json

    lib_json = [rule_to_json(r) for r in library]
    lib_digest = hashlib.sha256(json.dumps([*lib_json, list(PRUNE_BUDGET)], sort_keys=True,
                                           default=str).encode()).hexdigest()[:16]
    verdicts: dict[int, str] = {}
    path = wd / DERIVED_FILE if wd is not None else None
    if path is not None and path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                if row["lib"] == lib_digest:
                    verdicts[int(row["k"])] = str(row["verdict"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill
    todo = [k for k in largest if k not in verdicts]
    tasks = [(lib_json, [(k, rule_to_json(checked[k][0])) for k in todo[i:i + PRUNE_CHUNK]],
              PRUNE_BUDGET) for i in range(0, len(todo), PRUNE_CHUNK)]
    done = [0]

    def tick(got: list[tuple[int, str]]) -> list[dict[str, Any]]:
        verdicts.update(got)
        done[0] += len(got)
        if progress:
            progress("prune by derivation", done[0], len(todo))
        return [{"k": k, "verdict": verdict, "lib": lib_digest} for k, verdict in got]

    _run_logged(derived_task, tasks, workers, executor, path, tick)
    return [k for k in largest if verdicts[k] != "covered"]


def _run_logged(fn: Callable[[Any], Any], tasks: Sequence[Any], workers: int,
                executor: str | None, path: Path | None,
                tick: Callable[[Any], list[dict[str, Any]]]) -> None:
    """`run_parallel(fn, tasks)`, appending the JSON lines `tick` makes of each result to
    `path` as it arrives, so a killed run keeps every finished result. A line an earlier
    kill cut short is ended first: it stays a line of its own, ignored when read."""
    from superopt.verifier.parallel import run_parallel

    log = open(path, "a") if path is not None else None
    if log is not None and path is not None and log.tell() and not path.read_bytes(
            ).endswith(b"\n"):
        log.write("\n")

    def logged(item: Any) -> None:
        rows = tick(item)
        if log is not None:
            log.writelines(json.dumps(row) + "\n" for row in rows)
            log.flush()

    try:
        run_parallel(fn, tasks, workers, logged, executor)
    finally:
        if log is not None:
            log.close()


def instance_rules(rules: Sequence[Rule]) -> set[int]:
    """Positions of rules that another rule of the list yields by a (non-injective)
    substitution of variables: the same text once variables are mapped consistently."""
    import re

    var = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")
    by_skeleton: dict[str, list[tuple[int, list[str]]]] = defaultdict(list)
    for k, r in enumerate(rules):
        # a two-way rule also yields the instances of its reversed form
        forms = [r, r.reversed()] if r.bidirectional else [r]
        for f in forms:
            body = _text(f).split(": ", 1)[1]
            by_skeleton[var.sub("?", body)].append((k, var.findall(body)))
    out: set[int] = set()
    for group in by_skeleton.values():
        for k, specific in group:
            for j, general in group:
                if j == k:
                    continue
                m: dict[str, str] = {}
                if all(m.setdefault(g, s) == s for g, s in zip(general, specific, strict=True)) \
                        and len(set(m.values())) < len(m):
                    out.add(k)
                    break
    return out


def _general_key(rule: Rule) -> str:
    """The rule's text with variables renamed in order of first occurrence, and its
    condition's conjuncts in a canonical order: rules found at different shapes that
    generalize to the same rule share it. (The conjuncts come in the order of the shape
    solver's dimension classes, which depends on the shapes the rule was found at: the
    same rule found at 2x4 and at 4x4x3x3 could read `a == b and c == d` once and
    `c == d and a == b` the other time.)"""
    import re
    from dataclasses import replace

    var = re.compile(r"\?[A-Za-z_][A-Za-z0-9_]*")
    conjuncts = _conjuncts(rule.condition)
    keys = []
    for perm in itertools.permutations(range(rule.outputs)):
        r = replace(rule, source=tuple(rule.source[i] for i in perm),
                    target=tuple(rule.target[i] for i in perm), condition=None)
        text = _text(r).split(":", 1)[1]
        names: dict[str, str] = {}

        def sub(m: re.Match[str], names: dict[str, str] = names) -> str:
            return names.setdefault(m.group(0), f"?v{len(names)}")

        key = var.sub(sub, text)
        # every variable of the condition occurs in the patterns (named above) first
        cond = sorted({var.sub(sub, c) for c in conjuncts})
        keys.append(key + (" if " + " and ".join(cond) if cond else ""))
    return min(keys)


def _conjuncts(condition: str | None) -> list[str]:
    """The top-level ` and `-separated parts of a condition (outside brackets)."""
    from superopt.substitutions.text import _top_level_split

    return [p.strip() for p, _ in _top_level_split(condition, " and ")] if condition else []


def _add_instance(rule: Rule, other: Rule) -> Rule:
    """Record that `other` (found at other shapes) generalizes to the same rule."""
    from dataclasses import replace

    prov = dict(rule.provenance)
    inst = list(prov.get("also_found_at", []))
    if len(inst) < 8:
        inst.append(other.provenance.get("types", {}))
    prov["also_found_at"] = inst
    prov["instances"] = int(prov.get("instances", 1)) + 1
    return replace(rule, provenance=prov)


def _text(rule: Rule) -> str:
    from superopt.substitutions.text import format_rule

    return format_rule(rule)


def _input_groups(cfg: GeneratorConfig) -> list[int]:
    """Interchangeable inputs (same shape and role) share a group number."""
    seen: dict[tuple[Any, ...], int] = {}
    return [seen.setdefault((tuple(i.shape), i.role), len(seen)) for i in cfg.inputs]




def _two_output_candidates(store: TermStore, classes: Sequence[Sequence[int]], level: int,
                           stats: dict[str, int]) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """Two-output rules: a graph whose two outputs share operators (e.g. one matmul on
    concatenated weights, then split) against the smallest other graph computing the same
    two values that passes pruning. Only terms with an equivalent partner can take part (a
    term without one would be common to both sides, which common-subgraph pruning drops)."""
    class_of: dict[int, int] = {}
    for ci, members in enumerate(classes):
        for m in members:
            class_of[m] = ci
    terms = sorted(class_of)
    by_nodeset: dict[frozenset[NodeKey], list[int]] = defaultdict(list)
    for t in terms:
        by_nodeset[store.nodes(t)].append(t)

    def valid(u1: int, u2: int) -> bool:
        if len(store.nodes(u1) | store.nodes(u2)) > level:
            return False
        if u1 in store.consumed(u2) or u2 in store.consumed(u1):
            return False
        f1, f2 = store.dag_fps(u1), store.dag_fps(u2)
        inv = {fp: ref for ref, fp in f1.items()}
        for ref, fp in f2.items():
            if inv.setdefault(fp, ref) != ref:
                return False  # two distinct tensors with equal values in one graph
        return True

    linked: set[tuple[int, int]] = set()

    def consider(a: int, b: int) -> None:
        if a == b or class_of[a] == class_of[b]:
            return
        pair = (a, b) if class_of[a] < class_of[b] else (b, a)
        if pair not in linked and valid(*pair):
            linked.add(pair)

    # a graph of <= N ops with two outputs that share operators: either one output's node
    # set contains the other's (split siblings and their consumers) ...
    for t1 in terms:
        ns = sorted(store.nodes(t1))
        for r in range(1, len(ns) + 1):
            for sub in itertools.combinations(ns, r):
                for t2 in by_nodeset.get(frozenset(sub), ()):
                    consider(t1, t2)
    # ... or they overlap without nesting (two consumers of a shared operator)
    by_node: dict[NodeKey, list[int]] = defaultdict(list)
    for t in terms:
        if store.size(t) < level:
            for k in store.nodes(t):
                by_node[k].append(t)
    for lst in by_node.values():
        for i, t1 in enumerate(lst):
            n1 = store.nodes(t1)
            for t2 in lst[i + 1:]:
                n2 = store.nodes(t2)
                if not (n1 <= n2 or n2 <= n1) and len(n1 | n2) <= level:
                    consider(t1, t2)
    stats["linked"] = len(linked)

    out: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []
    for t1, t2 in sorted(linked):
        g = (t1, t2)
        gi = store.info(g)
        gmask = store.vmask(t1) | store.vmask(t2)
        gsize = len(store.nodes(t1) | store.nodes(t2))
        # class members are sorted by size; the smallest partner is among the first ones
        f1 = [u for u in classes[class_of[t1]] if store.leaves(u).isdisjoint(gi.leaves)]
        f2 = [u for u in classes[class_of[t2]] if store.leaves(u).isdisjoint(gi.leaves)]
        f1, f2 = f1[:PARTNER_SIDE], f2[:PARTNER_SIDE]
        if not f1 or not f2:
            continue
        stats["after_sub"] += 1
        best: tuple[int, int] | None = None
        for u1, u2 in sorted(itertools.product(f1, f2),
                             key=lambda p: (store.size(p[0]) + store.size(p[1]), p)):
            if (u1, u2) == g or not valid(u1, u2):
                continue
            hi = store.info((u1, u2))
            if common_subgraph(gi, hi) or store.supergraph(gi, hi):
                continue
            hmask = store.vmask(u1) | store.vmask(u2)
            oriented = _orient(gmask, hmask)
            if oriented is None:
                continue
            best = (u1, u2)
            break
        if best is None:
            continue
        hsize = len(store.nodes(best[0]) | store.nodes(best[1]))
        bmask = store.vmask(best[0]) | store.vmask(best[1])
        # the larger graph is the source unless only the reverse binds all variables
        forward = _orient(gmask, bmask)
        if forward and (gsize >= hsize or _orient(bmask, gmask) is not True):
            out.append((g, best, -2))
        else:
            out.append((best, g, -2))
        stats["candidates"] += 1
    return out


PARTNER_SIDE = 64  # members of each bucket tried as partners of a two-output graph


def _make_rule(store: TermStore, src: tuple[int, ...], tgt: tuple[int, ...],
               mapping: dict[int, int], ci: int, class_fp: Fingerprints, prefix: str
               ) -> tuple[Rule, dict[str, TensorType]]:
    cfg = store.cfg
    used: dict[int, None] = {}
    for t in (*src, *tgt):
        _collect_inputs(store, t, used)
    # The canonical renaming fixes the rule up to names; within each group of
    # interchangeable inputs, hand out the group's names in order of first occurrence.
    groups = _input_groups(cfg)
    members: dict[int, list[int]] = defaultdict(list)
    for k, g in enumerate(groups):
        members[g].append(k)
    seen_in: dict[int, int] = defaultdict(int)
    rename: dict[int, int] = {}
    for k in sorted(used, key=lambda k: _first_use(store, (*src, *tgt), k, mapping)):
        g = groups[k]
        rename[k] = members[g][seen_in[g]]
        seen_in[g] += 1
    order = sorted(used, key=lambda k: rename[k])
    var_index = {k: i for i, k in enumerate(order)}
    names = tuple(cfg.inputs[rename[k]].name for k in order)
    shapes = tuple(tuple(cfg.inputs[k].shape) for k in order)
    spec = RuleSpec(prefix, store.side(src, var_index), store.side(tgt, var_index), names, shapes)
    size = [len(frozenset().union(*(store.nodes(t) for t in side))) for side in (src, tgt)]
    prov: dict[str, Any] = {
        "generator": "superopt generate", "preset": cfg.preset, "max_ops": cfg.max_ops,
        "seed": cfg.seed, "size": size,
        "types": {n: list(s) for n, s in zip(names, shapes, strict=True)},
    }
    if ci >= 0:
        prov["fingerprint"] = f"{class_fp[ci][0]:016x}{class_fp[ci][1]:016x}"
    rule = build_rule(spec, provenance=prov)
    types = {n: TensorType(s) for n, s in zip(names, shapes, strict=True)}
    return rule, types


def _first_use(store: TermStore, outs: Sequence[int], k: int, mapping: dict[int, int]
               ) -> tuple[int, int]:
    """Position of input k's first occurrence in a left-to-right walk of the rule, with
    commutative operands visited in their canonical order."""
    pos = 0
    found: list[int] = []

    def walk(t: int) -> None:
        nonlocal pos
        if found:
            return
        if store.is_input(t):
            if t == k:
                found.append(pos)
            pos += 1
            return
        args = list(store.args(t))
        if store.templates[store.struct(t)[0]].commutative:
            args.sort(key=lambda a: (not store.is_input(a), mapping.get(a, a)))
        for a in args:
            walk(a)

    for t in outs:
        walk(t)
    return (found[0] if found else 1 << 30, mapping[k])


def _collect_inputs(store: TermStore, t: int, acc: dict[int, None]) -> None:
    if store.is_input(t):
        acc.setdefault(t, None)
        return
    for a in store.args(t):
        _collect_inputs(store, a, acc)


def check_rule(rule: Rule, types: dict[str, TensorType], seed: int = VERIFY_SEED,
               bound: int = 0) -> bool:
    """The IR's verdict: equal on fresh exact inputs mod p (`differs`, drawn within `bound`
    as the generator's were) and, within float tolerance, on random normal inputs under
    the float64 reference semantics (NaN where both sides are undefined, as log or sqrt of
    a negative, counts as equal)."""
    from superopt.ir.interpret import interpret, random_feeds

    try:
        if differs(rule, types, trials=2, seed=seed, bound=bound) is not None:
            return False
        src, tgt = rule.instantiate(types)
        # Small integer inputs (bound) make some false rules hold mod p: min(x, x*x) = x on
        # every integer, max(relu(x)) = max(x) wherever a row has a positive entry. The
        # float check then decides, on draws with every sign pattern and magnitude.
        for t in range(REFERENCE_TRIALS_BOUNDED if bound else 1):
            feeds = random_feeds(src, "reference", seed=seed + t)
            if t:
                feeds = {k: _REFERENCE_SHAPING[t % len(_REFERENCE_SHAPING)](np.asarray(v))
                         for k, v in feeds.items()}
            if not _close(interpret(src, feeds), interpret(tgt, feeds)):
                return False
    except IRError:
        return False
    return True


# How the float draws of a bounded preset's IR check are shaped, by trial: all negative,
# all positive, small (|x| < 1, where x*x < |x|), then as drawn.
_REFERENCE_SHAPING: tuple[Callable[[np.ndarray], np.ndarray], ...] = (
    lambda v: v, lambda v: -np.abs(v), np.abs, lambda v: 0.1 * v)


def _close(a: Sequence[Any], b: Sequence[Any]) -> bool:
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False
        finite = np.abs(x[np.isfinite(x)])
        scale = max(1.0, float(np.max(finite)) if finite.size else 1.0)
        if not np.allclose(x, y, rtol=1e-9, atol=1e-9 * scale, equal_nan=True):
            return False
    return True
