"""The rewrite engine: match substitution rules on graphs, apply them, and search (TASO).

- `match`: `Matcher(rules).match(graph)` lists every well-formed site (single- and
  multi-output rules, attribute variables, conditions, type-checked targets) through an
  op-name index, with counts per rule and the reasons candidates were rejected.
- `apply`: `apply_sites(graph, sites, matcher)` rewrites non-overlapping sites in one
  rebuild and returns `(new_graph, origin)`.
- `rewrite_pass`: `RewritePass` exposes sites as per-point choices for a tuner.
- `optimizer`: `optimize(graph, rules, cost)` is TASO's cost-based backtracking search.
- `cost`: `create_cost("sim" | "torch" | "flops")`; `fold`: constant folding of weights;
  `check`: value check and side-by-side torch timing.
- `starter.rules`: a hand-written starter library (`starter_rules()`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from superopt.ir.errors import IRError
from superopt.rewrite.apply import RewriteError, RewriteResult, apply_site, apply_sites
from superopt.rewrite.cost import CostFunction, create_cost
from superopt.rewrite.fold import fold_weights
from superopt.rewrite.match import Matcher, Matches, Site, match
from superopt.rewrite.optimizer import OptimizeResult, optimize
from superopt.rewrite.rewrite_pass import Point, RewriteConfig, RewritePass, choose_all
from superopt.substitutions.rule import Rule

STARTER = Path(__file__).with_name("starter.rules")
# The starter library as `superopt verify starter.rules --save` wrote it: every rule with
# its proof status and the axioms used (a test keeps it in step with starter.rules).
STARTER_VERIFIED = Path(__file__).with_name("starter_verified.json")


# Rules that pay where a runtime's kernels want wider groups or more channels
# (`groups.rules`), and the library `superopt verify groups.rules --save` wrote of them.
GROUPS = Path(__file__).with_name("groups.rules")
GROUPS_VERIFIED = Path(__file__).with_name("groups_verified.json")
# Rules that pay where a runtime's fused kernel is slower than its parts, or where the
# processor would take a slow path (`runtime.rules`).
RUNTIME = Path(__file__).with_name("runtime.rules")
RUNTIME_VERIFIED = Path(__file__).with_name("runtime_verified.json")


@dataclass(frozen=True)
class Library:
    """A rule library shipped with the package: the rules as written, as `superopt verify
    FILE --save` wrote them with their proofs, and whether their gain is one a per-op cost
    cannot see (`whole`: it comes from what a runtime fuses across ops), so a tuner
    measures each such rule applied at every site rather than trusting a screen."""

    rules: Path
    verified: Path
    whole: bool = False


# The libraries shipped with the package, by the name commands take (`--rules NAME`).
LIBRARIES: MappingProxyType[str, Library] = MappingProxyType({
    "starter": Library(STARTER, STARTER_VERIFIED),
    "groups": Library(GROUPS, GROUPS_VERIFIED),
    "runtime": Library(RUNTIME, RUNTIME_VERIFIED, whole=True),
})


def library_rules(name: str, verified: bool = False) -> list[Rule]:
    """A shipped library's rules (`LIBRARIES`): as written, or with the proof status
    `superopt verify` gave each rule; each rule's provenance names the library."""
    try:
        lib = LIBRARIES[name]
    except KeyError:
        raise IRError(f"no shipped rule library {name!r}; expected one of "
                      f"{', '.join(LIBRARIES)}") from None
    if verified:
        from superopt.substitutions.library import load_library

        rules = list(load_library(lib.verified).rules)
    else:
        from superopt.substitutions.text import read_rules

        rules = read_rules(lib.rules)
    return [replace(r, provenance={**r.provenance, "library": name}) for r in rules]


def measured_whole(rule: Rule) -> bool:
    """Whether `rule` comes from a library whose gains only a measurement sees
    (`Library.whole`)."""
    lib = LIBRARIES.get(str(rule.provenance.get("library", "")))
    return lib is not None and lib.whole


def starter_rules() -> list[Rule]:
    """The hand-written starter library shipped with the package."""
    return library_rules("starter")


def verified_starter_rules() -> list[Rule]:
    """The starter library with the proof status `superopt verify` gave each rule."""
    return library_rules("starter", verified=True)


def group_rules() -> list[Rule]:
    """The group-merge library shipped with the package (`groups.rules`)."""
    return library_rules("groups")


def verified_group_rules() -> list[Rule]:
    """The group-merge library with the proof status `superopt verify` gave each rule."""
    return library_rules("groups", verified=True)


def load_rules(spec: str | Path | None = None, include_refuted: bool = False
               ) -> tuple[list[Rule], int]:
    """Rules from `spec`: None or a shipped library's name (`LIBRARIES`: "starter",
    "groups" the group merges and channel padding, "runtime"), a text rule file, a
    JSON/JSONL library, TASO's graph_subst.pb or Tensat's rule files. Rules a verifier
    refuted are left out unless asked; returns the rules and how many were left out."""
    from superopt.substitutions.readers import read_any

    if spec is None:
        return starter_rules(), 0
    if str(spec) in LIBRARIES:
        return library_rules(str(spec)), 0
    path = Path(spec)
    if not path.exists():
        raise IRError(f"{path}: no such rule file (nor a shipped library: "
                      f"{', '.join(LIBRARIES)})")
    # Every format `verify` reads (TASO's .pb and Tensat's files too), by the same reader.
    rules = read_any(path)
    kept = [r for r in rules if include_refuted or r.status.state != "refuted"]
    return kept, len(rules) - len(kept)


__all__ = [
    "GROUPS",
    "LIBRARIES",
    "RUNTIME",
    "STARTER",
    "CostFunction",
    "Library",
    "Matcher",
    "Matches",
    "OptimizeResult",
    "Point",
    "RewriteConfig",
    "RewriteError",
    "RewritePass",
    "RewriteResult",
    "Site",
    "apply_site",
    "apply_sites",
    "choose_all",
    "create_cost",
    "fold_weights",
    "group_rules",
    "library_rules",
    "load_rules",
    "match",
    "measured_whole",
    "optimize",
    "starter_rules",
    "verified_group_rules",
    "verified_starter_rules",
]
