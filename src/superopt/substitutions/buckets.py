"""Fingerprint buckets in shards: the stages between enumeration and rules, out of core.

At 4 operators the last level holds about 30M terms. Collecting their fingerprint buckets
in one process (one sort of every hash, Python lists of every term, the fresh values of
every bucket member) grew the parent past 15 GB. Here:

- the last level's columns (template, operands, output, hashes) are merged shard by shard
  into `.npy` files of the work directory (`last-*.npy`) and memory-mapped, so no process
  holds more of them than the pages it reads;
- terms are partitioned by the low bits of their first fingerprint: every member of a
  bucket lies in one partition, so each partition is bucketed, confirmed on fresh inputs
  and paired (TASO's common-subgraph and common-supergraph pruning) on its own, by a
  worker (forked, or any `superopt.executor`), and its result is saved as one file
  (`bucket-PPPP-of-NNNN.npz`) as it arrives; a resumed run redoes only the partitions
  without one;
- the parent merges the partitions' classes and candidates in the order of their
  fingerprints, which is the order one global sort gives, so a run's rules do not depend
  on the number of partitions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from superopt.substitutions import termstore
from superopt.substitutions.enumerate import (
    COUNT_KEYS,
    Shard,
    config_digest,
    load_shard,
    shard_path,
)
from superopt.substitutions.presets import GeneratorConfig

COLUMNS = ("tmpl", "a0", "a1", "out", "h1", "h2")  # per last-level term, memory-mapped
EXTRA = ("c_tmpl", "c_a0", "c_a1", "c_out", "c_inp", "counts")  # collapses and counts: small
LAST_META = "last.json"  # written after every column file is complete
PART_TERMS = 400_000  # terms per partition, about: bounds a worker's memory for one
COUNTS = ("distinct", "hits", "confirmed", "after_sub")

Progress = Callable[[str, int, int], None]


# ---- the last level's columns on disk --------------------------------------------------

ROW = np.dtype([("id", "<i8"), ("h1", "<u8"), ("h2", "<u8")])  # a partition file's rows


def _column_path(folder: Path, name: str) -> Path:
    return folder / f"last-{name}.bin"


def part_terms_path(folder: Path, p: int, parts: int) -> Path:
    return folder / f"terms-{p:04d}-of-{parts:04d}.bin"


def partitions_for(terms: int) -> int:
    """A power of two, so that the partition is the low bits of the first fingerprint."""
    parts = 1
    while terms > parts * PART_TERMS:
        parts *= 2
    return parts


def write_last_level(folder: Path, shards: Sequence[Shard], shard_dir: Path | None,
                     merged: dict[str, np.ndarray] | None = None) -> None:
    """Write the last level's columns to `folder`, and each partition's (id, fingerprint)
    rows to a file of its own: from the shard files of `shard_dir` one at a time, appended
    (no process holds the level), or from arrays already `merged` in memory. Skipped when
    an earlier run completed them."""
    meta = folder / LAST_META
    if meta.exists():
        return
    n_parts = 1 if merged is not None else len(shards)

    def load(k: int) -> dict[str, np.ndarray]:
        if merged is not None:
            return merged
        assert shard_dir is not None
        return load_shard(shard_path(shard_dir, shards[k]))

    sizes = []
    dtypes: dict[str, str] = {}
    extra: dict[str, list[np.ndarray]] = {k: [] for k in EXTRA}
    for k in range(n_parts):
        arrays = load(k)
        sizes.append(len(arrays["tmpl"]))
        dtypes = {name: arrays[name].dtype.str for name in COLUMNS}
        for name in EXTRA:
            extra[name].append(arrays[name])
    total = int(sum(sizes))
    parts = partitions_for(total)
    mask = np.uint64(parts - 1)
    cols = {name: open(_column_path(folder, name), "wb") for name in COLUMNS}
    rows = [open(part_terms_path(folder, p, parts), "wb") for p in range(parts)]
    try:
        pos = 0
        for k in range(n_parts):
            arrays = load(k)
            for name in COLUMNS:
                arrays[name].tofile(cols[name])
            n = sizes[k]
            keys = (arrays["h1"] & mask).astype(np.int64)
            order = np.argsort(keys, kind="stable")  # ids stay ascending in each partition
            rec = np.empty(n, dtype=ROW)
            rec["id"] = pos + order
            rec["h1"] = arrays["h1"][order]
            rec["h2"] = arrays["h2"][order]
            bounds = np.searchsorted(keys[order], np.arange(parts + 1))
            for p in range(parts):
                if bounds[p + 1] > bounds[p]:
                    rec[bounds[p]:bounds[p + 1]].tofile(rows[p])
            pos += n
    finally:
        for f in (*cols.values(), *rows):
            f.close()
    small = {name: np.concatenate(extra[name]) for name in EXTRA if name != "counts"}
    small["counts"] = np.sum(extra["counts"], axis=0) if extra["counts"] else \
        np.zeros(len(COUNT_KEYS), np.int64)
    _save(folder / "last-extra.npz", small)
    tmp_meta = meta.with_suffix(".tmp")
    tmp_meta.write_text(json.dumps({"terms": total, "parts": parts, "dtypes": dtypes}))
    tmp_meta.replace(meta)  # the files count only once this one exists


def open_last_level(folder: Path) -> tuple[dict[str, np.ndarray], int]:
    """The columns written by `write_last_level` (memory-mapped), the small arrays, and
    the number of partitions."""
    meta = json.loads((folder / LAST_META).read_text())
    total = int(meta["terms"])
    out: dict[str, np.ndarray] = {}
    for name in COLUMNS:
        dt = np.dtype(meta["dtypes"].get(name, "<i8"))
        # a plain ndarray view of the mapping: np.memmap's own __getitem__ is Python code,
        # and TermStore reads single elements millions of times (most of a partition's time)
        out[name] = (np.asarray(np.memmap(_column_path(folder, name), dtype=dt, mode="r",
                                          shape=(total,))) if total else np.zeros(0, dt))
    with np.load(folder / "last-extra.npz") as z:
        out.update({k: z[k] for k in z.files})
    return out, int(meta["parts"])


def part_path(folder: Path, p: int, parts: int) -> Path:
    return folder / f"bucket-{p:04d}-of-{parts:04d}.npz"


# ---- one partition: bucket, confirm, pair ---------------------------------------------

_STATE: dict[str, Any] = {}


def _state(cfg: GeneratorConfig, folder: str) -> dict[str, Any]:
    """The worker's table of lower levels (shared with a forked parent, else built once),
    the memory-mapped last level and the fresh values computed so far (kept across
    partitions: most table terms occur in many)."""
    key = (config_digest(cfg), folder)
    if _STATE.get("key") != key:
        termstore._worker_init(cfg)
        table = termstore._WORKER["table"]
        n_in = table.n_inputs
        last, _ = open_last_level(Path(folder))
        _STATE.clear()
        _STATE.update(key=key, table=table, last=last,
                      th1=np.array(table.h1[n_in:], dtype=np.uint64),
                      th2=np.array(table.h2[n_in:], dtype=np.uint64), fresh=None)
    return _STATE


def bucket_task(task: tuple[GeneratorConfig, str, int, int]) -> tuple[int, dict[str, np.ndarray]]:
    """Partition `p` of `parts` on any executor's worker: its buckets, the classes that
    fresh inputs confirm, and each member paired with the earliest smaller member that
    passes pruning. Returns the partition's index and arrays for the caller to save."""
    cfg, folder, p, parts = task
    st = _state(cfg, folder)
    table, last = st["table"], st["last"]
    store = termstore.TermStore(table, last, cfg.max_ops)
    if st["fresh"] is not None:
        store.share_fresh(st["fresh"])
    st["fresh"] = store.fresh_cache()
    n_in, n_table = table.n_inputs, len(table)
    # table terms then last-level terms, each in id order: the order one global sort of
    # every term keeps between equal fingerprints
    t_sel = np.flatnonzero((st["th1"] & np.uint64(parts - 1)) == np.uint64(p))
    rows = np.fromfile(part_terms_path(Path(folder), p, parts), dtype=ROW)
    ids = np.concatenate([n_in + t_sel, n_table + rows["id"]])
    h1 = np.concatenate([st["th1"][t_sel], rows["h1"]])
    h2 = np.concatenate([st["th2"][t_sel], rows["h2"]])
    del rows
    order = np.lexsort((h2, h1))
    ids, h1, h2 = ids[order], h1[order], h2[order]
    if len(ids):
        new = np.ones(len(ids), dtype=bool)
        new[1:] = (h1[1:] != h1[:-1]) | (h2[1:] != h2[:-1])
        starts = np.flatnonzero(new)
    else:
        starts = np.zeros(0, dtype=np.int64)
    ends = np.append(starts[1:], len(ids))
    multi = [(int(s), int(e)) for s, e in zip(starts, ends, strict=True) if e - s >= 2]
    members_all = [t for s, e in multi for t in ids[s:e].tolist()]
    store.preload(members_all)
    fresh = store.fresh_hashes(members_all)
    classes: list[list[int]] = []
    fps: list[tuple[int, int]] = []
    for s, e in multi:
        sub: dict[tuple[int, int], list[int]] = {}
        for t in ids[s:e].tolist():
            sub.setdefault(fresh[t], []).append(t)
        for members in sub.values():
            if len(members) >= 2:
                members.sort(key=lambda t: (store.size(t), t))
                classes.append(members)
                fps.append((int(h1[s]), int(h2[s])))
    candidates, after_sub = termstore._single_output_candidates(store, classes)
    off = np.zeros(len(classes) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(m) for m in classes])
    out = {
        "counts": np.array([len(starts), sum(e - s - 1 for s, e in multi),
                            sum(len(m) - 1 for m in classes), after_sub], dtype=np.int64),
        "cls_off": off,
        "cls_mem": np.array([t for m in classes for t in m], dtype=np.int64),
        "cls_h1": np.array([f[0] for f in fps], dtype=np.uint64),
        "cls_h2": np.array([f[1] for f in fps], dtype=np.uint64),
        "cand_src": np.array([c[0][0] for c in candidates], dtype=np.int64),
        "cand_tgt": np.array([c[1][0] for c in candidates], dtype=np.int64),
        "cand_ci": np.array([c[2] for c in candidates], dtype=np.int64),
    }
    return p, out


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)  # a partition file exists only once it is complete


@dataclass(frozen=True)
class Buckets:
    """Every partition's result merged: classes in fingerprint order as flat arrays (class
    c's members, smallest first, are members[offsets[c]:offsets[c + 1]]; 3M classes at 4
    ops, too many for Python lists), single-output candidates in class order, stage
    counts."""

    offsets: np.ndarray
    members: np.ndarray
    fp1: np.ndarray
    fp2: np.ndarray
    candidates: list[tuple[tuple[int, ...], tuple[int, ...], int]]
    counts: dict[str, int]
    parts: int
    parts_resumed: int

    def __len__(self) -> int:
        return len(self.fp1)

    def fingerprint(self, c: int) -> tuple[int, int]:
        return int(self.fp1[c]), int(self.fp2[c])

    def class_lists(self, below: int | None = None) -> list[Sequence[int]]:
        """Each class's members as a list; with `below`, only members with a smaller id
        (e.g. the table's terms), and an empty tuple for a class left with fewer than
        two."""
        out: list[Sequence[int]] = []
        mem = self.members.tolist()
        off = self.offsets.tolist()
        for c in range(len(off) - 1):
            m = mem[off[c]:off[c + 1]]
            if below is not None:
                m = [t for t in m if t < below]
                if len(m) < 2:
                    out.append(())
                    continue
            out.append(m)
        return out


class Fingerprints:
    """`class_fp[c]` of the generator's rules, read from the merged arrays."""

    def __init__(self, got: Buckets) -> None:
        self.got = got

    def __getitem__(self, c: int) -> tuple[int, int]:
        return self.got.fingerprint(c)


def bucket_and_pair(cfg: GeneratorConfig, folder: Path, workers: int,
                    progress: Progress | None, executor: str | None) -> Buckets:
    """Run (or load) every partition of the level `write_last_level` wrote to `folder`,
    and merge them (see the module docstring)."""
    _, parts = open_last_level(folder)
    results: dict[int, dict[str, np.ndarray]] = {}
    for p in range(parts):
        path = part_path(folder, p, parts)
        if path.exists():
            results[p] = load_shard(path)
    resumed = len(results)
    todo = [p for p in range(parts) if p not in results]
    if progress:
        progress("bucket+pair", len(results), parts)

    def arrived(item: tuple[int, dict[str, np.ndarray]]) -> None:
        p, arrays = item
        _save(part_path(folder, p, parts), arrays)
        results[p] = arrays
        if progress:
            progress("bucket+pair", len(results), parts)

    tasks = [(cfg, str(folder), p, parts) for p in todo]
    if executor is not None:
        from superopt.executor import run_tasks

        run_tasks(bucket_task, tasks, workers, arrived, executor)
    elif workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            arrived(bucket_task(t))
    else:
        # forked workers share the parent's table of lower levels instead of building it
        _fork_pool(tasks, workers, arrived)
    return _merge([results[p] for p in range(parts)], parts, resumed)


def _fork_pool(tasks: list[tuple[GeneratorConfig, str, int, int]], workers: int,
               arrived: Callable[[tuple[int, dict[str, np.ndarray]]], None]) -> None:
    import multiprocessing as mp
    import os
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    from superopt.executor import stop_pool

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                             initializer=termstore._forked_worker_init,
                             initargs=(tasks[0][0], os.getpid())) as pool:
        pending = {pool.submit(bucket_task, t) for t in tasks}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    arrived(f.result())
        except BaseException:
            stop_pool(pool)  # Ctrl-C: a partition can take minutes at 4 ops
            raise


def _merge(results: list[dict[str, np.ndarray]], parts: int, resumed: int) -> Buckets:
    counts = dict.fromkeys(COUNTS, 0)
    for r in results:
        for k, v in zip(COUNTS, r["counts"].tolist(), strict=True):
            counts[k] += v
    h1 = np.concatenate([r["cls_h1"] for r in results])
    h2 = np.concatenate([r["cls_h2"] for r in results])
    base = np.cumsum([0] + [len(r["cls_h1"]) for r in results])
    mbase = np.cumsum([0] + [len(r["cls_mem"]) for r in results])
    # equal fingerprints lie in one partition, in their order there: a stable sort keeps it
    order = np.lexsort((h2, h1))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    start = np.concatenate([mbase[k] + r["cls_off"][:-1] for k, r in enumerate(results)])
    length = np.concatenate([np.diff(r["cls_off"]) for r in results])
    members_in = np.concatenate([r["cls_mem"] for r in results])
    offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(length[order], out=offsets[1:])
    # member i of the merged list comes from start[class] + (i - offsets[class])
    members = members_in[np.repeat(start[order] - offsets[:-1], length[order])
                         + np.arange(offsets[-1])]
    src = np.concatenate([r["cand_src"] for r in results])
    tgt = np.concatenate([r["cand_tgt"] for r in results])
    ci = np.concatenate([rank[base[k] + r["cand_ci"]] for k, r in enumerate(results)])
    by_class = np.argsort(ci, kind="stable")  # within a class: the order pairing found them
    candidates = [((s,), (t,), c) for s, t, c in zip(
        src[by_class].tolist(), tgt[by_class].tolist(), ci[by_class].tolist(), strict=True)]
    return Buckets(offsets, members, h1[order], h2[order], candidates, counts, parts, resumed)
