"""Rule libraries on disk: JSON (or JSON lines) with per-rule provenance and proof status.

Each rule keeps its text form (the same line the text format uses) plus structured
fields, so a library is diff-friendly and readable by the text parser alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.files import json_too_deep, nesting_error
from superopt.substitutions.rule import ProofStatus, Rule
from superopt.substitutions.text import RuleSyntaxError, format_rule, parse_rule

SCHEMA = "superopt.rules"
VERSION = 1


class LibraryError(IRError):
    """A rule library that cannot be read; names the file and the rule index."""


@dataclass(frozen=True)
class RuleLibrary:
    rules: tuple[Rule, ...]
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __len__(self) -> int:
        return len(self.rules)

    def by_name(self) -> dict[str, Rule]:
        return {r.name: r for r in self.rules}


def status_to_json(s: ProofStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"state": s.state}
    if s.axioms:
        out["axioms"] = list(s.axioms)
    if s.time_s is not None:
        out["time_s"] = s.time_s
    if s.counterexample is not None:
        out["counterexample"] = dict(s.counterexample)
    if s.reason:
        out["reason"] = s.reason
    if s.timeout_s is not None:
        out["timeout_s"] = s.timeout_s
    return out


def status_from_json(d: Mapping[str, Any]) -> ProofStatus:
    return ProofStatus(state=d.get("state", "unverified"), axioms=tuple(d.get("axioms", ())),
                       time_s=d.get("time_s"), counterexample=d.get("counterexample"),
                       reason=d.get("reason", ""), timeout_s=d.get("timeout_s"))


def rule_to_json(rule: Rule) -> dict[str, Any]:
    return {"name": rule.name, "rule": format_rule(rule), "kind": rule.kind,
            "outputs": rule.outputs, "size": list(rule.size),
            "provenance": dict(rule.provenance), "status": status_to_json(rule.status)}


def rule_from_json(d: Mapping[str, Any], source: str, index: int) -> Rule:
    if not isinstance(d, Mapping) or not isinstance(d.get("rule"), str):
        raise LibraryError(f"{source}: rule {index}: missing \"rule\" text") from None
    text = d["rule"]
    for key, kind in (("name", str), ("kind", str), ("provenance", Mapping), ("status", Mapping)):
        if key in d and not isinstance(d[key], kind):
            raise LibraryError(f"{source}: rule {index}: \"{key}\" must be a "
                               f"{'string' if kind is str else 'JSON object'}")
    try:
        rule = parse_rule(text, f"{source} (rule {index})", 1)
    except RuleSyntaxError as e:
        raise LibraryError(f"{source}: rule {index}: {e.msg} (column {e.col})") from None
    try:
        status = status_from_json(d.get("status", {}))
    except (ValueError, TypeError) as e:
        raise LibraryError(f"{source}: rule {index}: bad status: {e}") from None
    return replace(rule, name=d.get("name", rule.name), kind=d.get("kind", rule.kind),
                   provenance=MappingProxyType(dict(d.get("provenance", {}))), status=status)


def save_library(lib: RuleLibrary | Iterable[Rule], path: str | Path,
                 meta: Mapping[str, Any] | None = None) -> Path:
    """`.jsonl` writes one rule per line after a header line; anything else writes JSON."""
    if not isinstance(lib, RuleLibrary):
        lib = RuleLibrary(tuple(lib), MappingProxyType(dict(meta or {})))
    path = Path(path)
    header = {"schema": SCHEMA, "version": VERSION, "meta": dict(lib.meta), "count": len(lib)}
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        if path.suffix == ".jsonl":
            f.write(json.dumps(header) + "\n")
            for r in lib.rules:
                f.write(json.dumps(rule_to_json(r)) + "\n")
        else:
            json.dump({**header, "rules": [rule_to_json(r) for r in lib.rules]}, f, indent=1)
            f.write("\n")
    tmp.replace(path)  # never leave a half-written library behind
    return path


def load_library(path: str | Path) -> RuleLibrary:
    from superopt.ir.files import read_text

    path = Path(path)
    text = read_text(path, LibraryError)
    try:
        return _parse_library(path, text)
    except RecursionError:
        raise LibraryError(f"{path}: invalid JSON: nested too deeply") from None
    except ValueError as e:  # NaN/Infinity, or an integer too long to convert
        raise LibraryError(f"{path}: invalid JSON: {e}") from None


def _no_constant(name: str) -> float:
    # json accepts NaN and Infinity, which no library field may hold.
    raise ValueError(f"{name} is not a valid JSON number")


def _parse_library(path: Path, text: str) -> RuleLibrary:
    if path.suffix == ".jsonl":
        lines = [ln for ln in text.splitlines() if ln.strip()]
        docs = []
        for i, ln in enumerate(lines, start=1):
            deep = json_too_deep(ln)
            if deep is not None:
                raise LibraryError(f"{path}:{i}:{deep[1]}: invalid JSON: "
                                   f"{nesting_error(deep[2])}")
            try:
                docs.append(json.loads(ln, parse_constant=_no_constant))
            except json.JSONDecodeError as e:
                raise LibraryError(f"{path}:{i}:{e.colno}: invalid JSON: {e.msg}") from None
        if not docs:
            raise LibraryError(f"{path}: empty library file")
        header, items = docs[0], docs[1:]
    else:
        deep = json_too_deep(text)
        if deep is not None:
            raise LibraryError(f"{path}:{deep[0]}:{deep[1]}: invalid JSON: "
                               f"{nesting_error(deep[2])}")
        try:
            header = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            raise LibraryError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
        items = header.get("rules") if isinstance(header, dict) else None
    if not isinstance(header, dict) or header.get("schema") != SCHEMA:
        raise LibraryError(f"{path}: not a superopt rule library (expected schema {SCHEMA!r})")
    if header.get("version") != VERSION:
        raise LibraryError(f"{path}: unsupported library version {header.get('version')!r}")
    if not isinstance(items, list):
        raise LibraryError(f"{path}: missing \"rules\" list")
    rules = tuple(rule_from_json(d, str(path), i) for i, d in enumerate(items))
    if "count" in header and header["count"] != len(rules):
        raise LibraryError(f"{path}: header says {header['count']} rules, file holds "
                           f"{len(rules)} (truncated?)")
    names = [r.name for r in rules]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise LibraryError(f"{path}: rule name {dup!r} used twice")
    return RuleLibrary(rules, MappingProxyType(dict(header.get("meta", {}))))
