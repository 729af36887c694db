"""The records database: every measurement of a tuning run, in one SQLite file (WAL).

Tables: `meta` (schema version, the workload: structural hash of the source graph, model,
hardware and what else fixes the search space, and the run's settings), `candidates`
(canonical JSON of every pass configuration, keyed by its digest) and `measurements`
(step, candidate, runtime, noise seed, strategy, phase, wall time). Each measurement is
committed as it arrives, so a run killed at any moment (SIGKILL included) loses at most
the measurement in flight; a resumed run replays the search from its seed, reads the
recorded measurements instead of measuring again, and measures only from the first
missing step. A database made for another workload, by other settings, or with another
schema version is refused with one line saying which.
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from superopt.ir.errors import IRError

SCHEMA_VERSION = 1


class RecordsError(IRError):
    """A records database that cannot be used: corrupt, foreign, or of another version."""


@dataclass(frozen=True)
class Measurement:
    step: int
    candidate: str  # digest of the candidate's canonical JSON
    runtime: float  # seconds (inf: invalid candidate)
    noise_seed: int
    strategy: str
    phase: str
    wall_s: float


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (key TEXT PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measurements (
    step INTEGER PRIMARY KEY,
    candidate TEXT NOT NULL REFERENCES candidates(key),
    runtime REAL NOT NULL,
    noise_seed INTEGER NOT NULL,
    strategy TEXT NOT NULL,
    phase TEXT NOT NULL,
    wall_s REAL NOT NULL,
    at REAL NOT NULL
);
"""


T = TypeVar("T")


def _readable(method: Callable[..., T]) -> Callable[..., T]:
    """A query over a file that may be damaged: SQLite's corruption errors and rows whose
    fields are not the numbers they should be become one RecordsError naming the file."""
    @functools.wraps(method)
    def wrapper(self: RecordsDB, *args: Any, **kwargs: Any) -> T:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            raise RecordsError(f"{self.path}: corrupt records database ({e})") from None
        except (TypeError, ValueError, OverflowError) as e:
            raise RecordsError(f"{self.path}: corrupt record in {method.__name__} "
                               f"({type(e).__name__}: {e})") from None
    return wrapper


def _dump(value: Mapping[str, Any]) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class RecordsDB:
    """One tuning run's records (see the module docstring)."""

    def __init__(self, path: str | Path, workload: Mapping[str, Any] | None,
                 settings: Mapping[str, Any] | None = None, resume: bool = False) -> None:
        """Open `path` for `workload` (None: read-only use, any workload). A new file is
        created; an existing one must hold the same workload (and with `resume`, the same
        settings); without `resume` it must hold no measurement yet."""
        self.path = Path(path)
        if self.path.is_dir():
            raise RecordsError(f"{self.path}: is a directory, not a records database")
        if workload is not None and not self.path.parent.exists():
            raise RecordsError(f"{self.path}: directory {self.path.parent} does not exist")
        if workload is None and not self.path.exists():
            raise RecordsError(f"{self.path}: no such records database")
        try:
            self.conn = sqlite3.connect(str(self.path), isolation_level=None)
            self.conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed transaction survives the process being
            # killed; only a power loss may cost the last ones.
            self.conn.execute("PRAGMA synchronous=NORMAL")
            tables = {r[0] for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:  # a corrupt header
            raise RecordsError(f"{self.path}: not a records database ({e})") from None
        fresh = not tables
        if not fresh and not {"meta", "candidates", "measurements"} <= tables:
            raise RecordsError(f"{self.path}: not a superopt records database (tables: "
                               f"{', '.join(sorted(tables))})")
        try:
            if fresh:
                if workload is None:
                    raise RecordsError(f"{self.path}: empty file, not a records database")
                self.conn.executescript(_SCHEMA)
                with self.conn:
                    self.conn.execute("BEGIN")
                    self._set("schema_version", str(SCHEMA_VERSION))
                    self._set("workload", _dump(workload))
                    self._set("settings", _dump(settings or {}))
            meta = dict(self.conn.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError as e:
            raise RecordsError(f"{self.path}: corrupt records database ({e})") from None
        version = meta.get("schema_version")
        if version != str(SCHEMA_VERSION):
            raise RecordsError(f"{self.path}: records schema version {version}, this superopt "
                               f"reads version {SCHEMA_VERSION}")
        try:
            self.workload = json.loads(meta["workload"])
            self.settings = json.loads(meta.get("settings", "{}"))
        except (KeyError, ValueError) as e:
            raise RecordsError(f"{self.path}: corrupt meta table ({e})") from None
        if workload is not None and not fresh:
            if self.workload != dict(workload):
                diff = sorted(k for k in set(self.workload) | set(workload)
                              if self.workload.get(k) != workload.get(k))
                raise RecordsError(
                    f"{self.path}: holds another workload ({', '.join(diff)} differ: "
                    f"{self.workload.get('model')!r} on {self.workload.get('hardware')!r}, "
                    f"graph {str(self.workload.get('graph'))[:12]})")
            n = self.count()
            if not resume and n:
                raise RecordsError(f"{self.path}: already holds {n} measurements; pass "
                                   "--resume to continue that run, or name a new file")
            if resume and settings is not None and self.settings != dict(settings):
                diff = sorted(k for k in set(self.settings) | set(settings)
                              if self.settings.get(k) != settings.get(k))
                def was(k: str) -> str:
                    have = (repr(self.settings[k]) if k in self.settings else "unset")
                    now = repr(settings[k]) if k in settings else "unset"
                    return f"{k}={have} there, {now} now"

                raise RecordsError(f"{self.path}: was made with other settings "
                                   f"({'; '.join(was(k) for k in diff)}); "
                                   "resume with the same ones")
            if not n and settings is not None:
                with self.conn:
                    self.conn.execute("BEGIN")
                    self._set("settings", _dump(settings))
                self.settings = dict(settings)

    def _set(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # Keys the meta table keeps for the records themselves; a runner's own facts (a real
    # target's noise model, its final comparison) go beside them under other keys.
    RESERVED = frozenset({"schema_version", "workload", "settings"})

    def put_meta(self, key: str, value: Mapping[str, Any]) -> None:
        """Keep a runner's fact (JSON) in the file, committed at once."""
        if key in self.RESERVED:
            raise RecordsError(f"{self.path}: meta key {key!r} is the records' own")
        with self.conn:
            self.conn.execute("BEGIN")
            self._set(key, _dump(value))

    @_readable
    def get_meta(self, key: str) -> dict[str, Any] | None:
        r = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if r is None else json.loads(r[0])

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RecordsDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, step: int, candidate: str, config_json: str, runtime: float,
            noise_seed: int, strategy: str, phase: str, wall_s: float) -> None:
        """Record one measurement (and its candidate) and commit."""
        with self.conn:
            self.conn.execute("BEGIN")
            self.conn.execute("INSERT OR IGNORE INTO candidates (key, config) VALUES (?, ?)",
                              (candidate, config_json))
            self.conn.execute(
                "INSERT INTO measurements (step, candidate, runtime, noise_seed, strategy, "
                "phase, wall_s, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (step, candidate, runtime if math.isfinite(runtime) else 1e300, noise_seed,
                 strategy, phase, wall_s, time.time()))

    @staticmethod
    def _row(r: tuple) -> Measurement:
        rt = float(r[2])
        return Measurement(int(r[0]), str(r[1]), math.inf if rt >= 1e300 else rt, int(r[3]),
                           str(r[4]), str(r[5]), float(r[6]))

    @_readable
    def measurements(self) -> list[Measurement]:
        rows = self.conn.execute("SELECT step, candidate, runtime, noise_seed, strategy, phase, "
                                 "wall_s FROM measurements ORDER BY step")
        return [self._row(r) for r in rows]

    @_readable
    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])

    @_readable
    def best(self) -> Measurement | None:
        r = self.conn.execute("SELECT step, candidate, runtime, noise_seed, strategy, phase, "
                              "wall_s FROM measurements ORDER BY runtime, step LIMIT 1").fetchone()
        return self._row(r) if r is not None else None

    @_readable
    def config(self, candidate: str) -> dict[str, Any]:
        r = self.conn.execute("SELECT config FROM candidates WHERE key = ?",
                              (candidate,)).fetchone()
        if r is None:
            raise RecordsError(f"{self.path}: no candidate {candidate}")
        try:
            return json.loads(r[0])
        except ValueError as e:
            raise RecordsError(f"{self.path}: candidate {candidate} is corrupt ({e})") from None

    def export_jsonl(self, path: str | Path) -> int:
        """One JSON line per measurement (with its candidate's configuration)."""
        out = Path(path)
        if not out.parent.exists():
            raise RecordsError(f"{out}: directory {out.parent} does not exist")
        n = 0
        with out.open("w") as f:
            for m in self.measurements():
                f.write(json.dumps({
                    "workload": self.workload, "step": m.step, "candidate": m.candidate,
                    "runtime_s": m.runtime if math.isfinite(m.runtime) else None,
                    "noise_seed": m.noise_seed, "strategy": m.strategy, "phase": m.phase,
                    "wall_s": m.wall_s, "config": self.config(m.candidate)},
                    sort_keys=True) + "\n")
                n += 1
        return n

    def __iter__(self) -> Iterator[Measurement]:
        return iter(self.measurements())


__all__ = ["SCHEMA_VERSION", "Measurement", "RecordsDB", "RecordsError"]
