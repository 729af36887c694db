"""Content-addressed cache of axiom validations.

Validation is deterministic given the axiom, its sampler settings, the seed and the code
that defines the semantics, so a result is stored under a hash of all of them: the
axiom's text and settings, and the source of `superopt.ir`, `superopt.verifier` and the
rule model, plus the Z3 and numpy versions. Any change to any of these re-validates.
`superopt verify --check-axioms` (or --no-cache) always validates afresh. The cache lives
in $SUPEROPT_CACHE_DIR, else $XDG_CACHE_HOME/superopt, else ~/.cache/superopt.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from superopt.substitutions.text import format_rule
from superopt.verifier.axioms import Axiom, AxiomCheck, DirectionCheck, validate_axioms


def cache_dir() -> Path:
    if os.environ.get("SUPEROPT_CACHE_DIR"):
        return Path(os.environ["SUPEROPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "superopt"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    import numpy
    import z3

    root = Path(__file__).parent.parent  # the superopt package (not imported: it is above)
    h = hashlib.sha256()
    files = sorted([*(root / "ir").rglob("*.py"), *(root / "verifier").rglob("*.py"),
                    *(root / "substitutions" / n for n in ("pattern.py", "rule.py", "text.py"))])
    for f in files:
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    h.update(z3.get_version_string().encode())
    h.update(numpy.__version__.encode())
    return h.hexdigest()


def check_key(ax: Axiom, samples: int, seed: int, shape_checks: int) -> str:
    h = hashlib.sha256()
    h.update(code_fingerprint().encode())
    h.update(repr((ax.name, format_rule(ax.rule), repr(ax.spec), samples, seed,
                   shape_checks)).encode())
    return h.hexdigest()


def check_to_json(c: AxiomCheck) -> dict[str, Any]:
    return asdict(c)


def check_from_json(d: dict[str, Any]) -> AxiomCheck:
    dirs = tuple(DirectionCheck(**x) for x in d["directions"])
    return AxiomCheck(d["name"], d["origin"], d["text"], dirs, tuple(d["shape_problems"]),
                      d["time_s"])


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def validate_axioms_cached(axioms: Sequence[Axiom], samples: int = 8, seed: int = 0,
                           jobs: int = 1, shape_checks: int = 1, use_cache: bool = True,
                           progress: Callable[[AxiomCheck], None] | None = None,
                           executor: str | None = None) -> tuple[list[AxiomCheck], int]:
    """Validation of every axiom (cached results where the cache has them) and how many
    came from the cache."""
    path = cache_dir() / "axiom-checks.json"
    store = _load(path) if use_cache else {}
    keys = [check_key(a, samples, seed, shape_checks) for a in axioms]
    out: list[AxiomCheck | None] = [None] * len(axioms)
    todo = []
    for i, k in enumerate(keys):
        if k in store:
            try:
                out[i] = check_from_json(store[k])
            except (KeyError, TypeError):
                todo.append(i)
                continue
            if progress is not None:
                progress(out[i])
        else:
            todo.append(i)
    key_of = {axioms[i].name: keys[i] for i in todo}
    added = [0]

    def arrived(c: AxiomCheck) -> None:
        if c.name in key_of:  # kept as it arrives: an interrupted validation keeps its part
            store[key_of[c.name]] = check_to_json(c)
            added[0] += 1
        if progress is not None:
            progress(c)

    try:
        fresh = validate_axioms([axioms[i] for i in todo], samples, seed, jobs, shape_checks,
                                arrived, executor)
    finally:
        if added[0] and use_cache:
            _save(path, store)
    for i, c in zip(todo, fresh, strict=True):
        out[i] = c
    return [c for c in out if c is not None], len(axioms) - len(todo)


def _save(path: Path, store: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(store))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs time
