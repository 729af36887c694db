"""Which rules the tuner's rewrite pass may use, and the certificate of a tuned program.

Rules come from any number of sources: the libraries shipped with the package (the
starter, the group merges `groups`, and `runtime`: `superopt.rewrite.LIBRARIES`), each
with the proof status `superopt verify` gave each rule; rule
files and libraries (`.rules`, `.json`, `.jsonl`),
TASO's `.pb` and Tensat's files (read as `superopt verify` reads them), and PET's corrected
mutants (`superopt mutants --out`). Only rules that are proved (by Z3, from validated
axioms) or exactly corrected (PET's box test on the corrected mutant found it fully
equivalent) are used, unless `allow_unproved`; the rest are counted by reason.

The certificate of a tuned candidate lists, per applied rewrite, the rule, its proof
status and the axioms the proof used (or the PET check), so a tuned program says why each
rewrite preserves its values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from superopt.ir.errors import IRError
from superopt.substitutions.rule import Rule
from superopt.substitutions.text import format_rule

STARTER = "starter"
GROUPS = "groups"  # group merges, depthwise padding (`superopt/rewrite/groups.rules`)
RUNTIME = "runtime"  # rules against a runtime's slower fused kernels (`runtime.rules`)


def exactly_corrected(rule: Rule) -> bool:
    """A PET rule whose corrected mutant passed the exact box test as fully equivalent."""
    check = rule.provenance.get("corrected_check") if rule.kind == "pet" else None
    return bool(isinstance(check, dict) and check.get("fully_equivalent"))


def unusable(rule: Rule) -> str | None:
    """Why the tuner may not use `rule` without --allow-unproved (None: it may)."""
    if rule.status.state == "proved" or exactly_corrected(rule):
        return None
    return rule.status.state


def read_source(spec: str) -> list[Rule]:
    """The rules of one source (see the module docstring)."""
    from superopt.rewrite import LIBRARIES, library_rules, load_rules

    if spec in LIBRARIES:
        return library_rules(spec, verified=True)
    path = Path(spec)
    if not path.exists():
        raise IRError(f"{spec}: no such rule file (nor a shipped library: "
                      f"{', '.join(LIBRARIES)})")
    if path.is_dir():
        raise IRError(f"{spec}: is a directory, not a rule file")
    if path.suffix in (".rules", ".json", ".jsonl"):
        return load_rules(path, include_refuted=True)[0]
    from superopt.verifier.command import read_rule_file

    rules, problems, _ = read_rule_file(str(path))
    if not rules and problems:
        raise IRError(f"{spec}: no usable rule ({len(problems)} problems; "
                      "`superopt verify` lists them)")
    return list(rules)


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    sources: tuple[str, ...]
    excluded: dict[str, int] = field(default_factory=dict)  # reason -> rules left out

    def describe(self) -> str:
        out = f"{len(self.rules)} rules from {', '.join(self.sources)}"
        if self.excluded:
            out += " (left out: " + ", ".join(f"{n} {why}" for why, n in
                                               sorted(self.excluded.items())) + \
                "; --allow-unproved uses them)"
        return out


def rule_set(specs: Sequence[str] | str | None, allow_unproved: bool = False) -> RuleSet:
    if specs is None:
        specs = [STARTER]
    elif isinstance(specs, str):
        specs = [s for s in specs.split(",") if s]
    rules: list[Rule] = []
    excluded: dict[str, int] = {}
    names: set[str] = set()
    for spec in specs:
        for r in read_source(spec):
            why = None if allow_unproved else unusable(r)
            if why is None and r.status.state in ("refuted", "invalid"):
                why = r.status.state  # never, even with --allow-unproved
            if why is not None:
                excluded[why] = excluded.get(why, 0) + 1
                continue
            if r.name in names:  # two sources with one name: keep both, told apart
                r = replace(r, name=f"{r.name}@{Path(spec).stem}")
            names.add(r.name)
            rules.append(r)
    return RuleSet(tuple(rules), tuple(specs), excluded)


def certificate(rules: Sequence[Rule], applied: Sequence[str]) -> list[dict[str, Any]]:
    """Per applied rule (by name, in order): its status and the evidence for it."""
    by_name = {r.name: r for r in rules}
    out = []
    for name in applied:
        # The right-to-left direction of a '<=>' rule is matched as `name~rev`.
        r = by_name.get(name) or by_name.get(name.removesuffix("~rev"))
        if r is None:
            out.append({"rule": name, "status": "unknown rule"})
            continue
        entry: dict[str, Any] = {"rule": name, "status": r.status.state,
                                 "text": format_rule(r)}
        if r.status.state == "proved":
            entry["axioms"] = list(r.status.axioms)
            entry["proof_s"] = r.status.time_s
        elif exactly_corrected(r):
            entry["status"] = "exactly corrected (PET)"
            entry["check"] = dict(r.provenance["corrected_check"])
        else:
            entry["reason"] = r.status.reason
        out.append(entry)
    return out


__all__ = ["RuleSet", "certificate", "exactly_corrected", "read_source", "rule_set",
           "unusable"]
