"""Plan searches kept on disk: TASO's search results of the rewrite-plan pass, keyed by content.

The plan pass runs TASO's cost-model search once per input graph, again for each rule
source alone (`passes.plan`): seconds on small models, over an hour on nasnet_a with PET's
~1,000 mutants. Those searches are not measurements, so the records database did not hold
them and a run killed after them ran them all again when resumed. `tune --db` now keeps
each search's result in the same file (table `plans`) as it finishes, and the benchmarks
may name a cache file shared by all their rows.

A result is stored as its path (rule, site keys per step), its costs and its counts; a hit
replays the path, which rebuilds the same graph (site keys are structural). The key is a
digest of everything the result depends on: the input graph's structural hash, the
matcher's rules in order with its matching options, the search's budget, backtracking
relaxation and cost model, and the code and data of the packages the search runs
(`superopt.ir`, `rewrite`, `substitutions`, `tpu_sim` and the plan pass itself), so a
changed simulator or search misses instead of returning a stale plan. A stored path that
no longer replays step for step is treated as a miss and searched again.
"""

from __future__ import annotations

import json
import sqlite3
from importlib import resources
from pathlib import Path
from typing import Any

from superopt.ir.errors import IRError
from superopt.xtat.space import digest

# What a plan search's result depends on, besides its inputs (module docstring).
CODE_PACKAGES = ("ir", "rewrite", "substitutions", "tpu_sim")
CODE_FILES = ("xtat/passes/plan.py",)

_SCHEMA = "CREATE TABLE IF NOT EXISTS plans (key TEXT PRIMARY KEY, result TEXT NOT NULL)"


class PlanCacheError(IRError):
    """A plan cache file that cannot be used (not SQLite, or corrupt)."""


def code_digest() -> str:
    """Digest of the source and data files the plan search depends on."""
    root = resources.files("superopt")
    parts: list[tuple[str, bytes]] = []

    def walk(node: Any, rel: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            name = f"{rel}/{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, name)
            elif not child.name.endswith((".pyc", ".pyo")):
                parts.append((name, child.read_bytes()))

    for pkg in CODE_PACKAGES:
        walk(root / pkg, pkg)
    for f in CODE_FILES:
        parts.append((f, root.joinpath(*f.split("/")).read_bytes()))
    h = "\n".join(f"{name}:{digest(data, 16)}" for name, data in parts)
    return digest(h, 16)


class PlanCache:
    """Plan search results in a SQLite file (module docstring). Each `put` is committed at
    once, so a run killed at any moment keeps every search that finished."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        """Open (or create) the cache at `path`. `read_only`: use what the file holds and
        write nothing to it (a database read by `tune --replay`; one made before plans
        were kept has none, and every search is then a miss)."""
        self.path = Path(path)
        self.read_only = read_only
        if self.path.is_dir():
            raise PlanCacheError(f"{self.path}: is a directory, not a plan cache")
        if not self.path.parent.exists():
            raise PlanCacheError(f"{self.path}: directory {self.path.parent} does not exist")
        try:
            if read_only:
                self.conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro",
                                            uri=True, isolation_level=None, timeout=30)
                self.empty = self.conn.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name='plans'"
                ).fetchone() is None
            else:
                self.conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30)
                self.conn.execute("PRAGMA journal_mode=WAL")
                self.conn.execute("PRAGMA synchronous=NORMAL")
                self.conn.execute(_SCHEMA)
                self.empty = False
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            raise PlanCacheError(f"{self.path}: not a usable plan cache ({e})") from None
        self.code = code_digest()
        self.hits = self.misses = 0

    def key(self, *parts: object) -> str:
        """The cache key of a search with these inputs (and this code)."""
        return digest(json.dumps([self.code, *parts], sort_keys=True, default=str), 16)

    def get(self, key: str) -> dict[str, Any] | None:
        if self.empty:
            return None
        try:
            row = self.conn.execute("SELECT result FROM plans WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as e:
            raise PlanCacheError(f"{self.path}: corrupt plan cache ({e})") from None
        if row is None:
            return None
        try:
            got = json.loads(row[0])
        except ValueError:
            return None  # a damaged entry is a miss; the search writes it again
        return got if isinstance(got, dict) else None

    def put(self, key: str, result: dict[str, Any]) -> None:
        if self.read_only:
            return
        try:
            self.conn.execute("INSERT OR REPLACE INTO plans (key, result) VALUES (?, ?)",
                              (key, json.dumps(result, sort_keys=True)))
        except sqlite3.DatabaseError as e:
            raise PlanCacheError(f"{self.path}: cannot write the plan cache ({e})") from None

    def __len__(self) -> int:
        if self.empty:
            return 0
        return int(self.conn.execute("SELECT COUNT(*) FROM plans").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


__all__ = ["PlanCache", "PlanCacheError", "code_digest"]
