"""The rewrite pass as tunable choices (DESIGN.md section 9), free of any search policy.

`RewritePass.points(graph)` lists the places where rules apply: a *point* is a node at which
one or more sites have their first output, and its options are those sites (different rules,
or one multi-output rule paired with different partners). A configuration picks at most one
option per point; `apply(graph, config)` rewrites and returns `(graph, origin)`.

A rewrite can create new sites, so a configuration is a sequence of *rounds*: round i is
applied to the graph round i-1 produced, whose points are listed afresh. Point and site
keys are structural hashes (see `Site.key`), so a round's choices stay meaningful on any
graph that contains the same subgraphs; choices naming points that do not exist are
ignored and reported. When two chosen sites overlap, the one whose point comes first in
node order is applied and the other is reported as skipped, so every configuration yields
a valid graph.

`iterate(graph, select)` runs rounds with a caller-supplied `select` (the policy: a tuner,
or `choose_all` to apply everything applicable) and returns the configuration that
reproduces the run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph
from superopt.ir.passes import Origin, compose, identity_origin
from superopt.rewrite.apply import apply_sites
from superopt.rewrite.match import Matcher, Matches, Site
from superopt.substitutions.rule import Rule


@dataclass(frozen=True)
class Point:
    """Where one or more sites apply; a configuration picks one option or none."""

    key: str
    anchor: int
    options: tuple[Site, ...]

    def option(self, site_key: str) -> Site | None:
        return next((s for s in self.options if s.key == site_key), None)


Choices = Mapping[str, str]  # point key -> chosen site key


@dataclass(frozen=True)
class RewriteConfig:
    """Choices per round; an empty configuration rewrites nothing."""

    rounds: tuple[Choices, ...] = ()

    @staticmethod
    def single(choices: Choices) -> RewriteConfig:
        return RewriteConfig((MappingProxyType(dict(choices)),))

    def __len__(self) -> int:
        return sum(len(r) for r in self.rounds)

    def to_json(self) -> dict[str, Any]:
        return {"rounds": [dict(r) for r in self.rounds]}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> RewriteConfig:
        try:
            rounds = tuple(MappingProxyType({str(k): str(v) for k, v in r.items()})
                           for r in d["rounds"])
        except (KeyError, TypeError, AttributeError) as e:
            raise IRError(f"bad rewrite configuration: {type(e).__name__}: {e}") from None
        return RewriteConfig(rounds)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


@dataclass(frozen=True)
class RoundReport:
    points: int
    sites: int
    applied: tuple[Site, ...]
    skipped: tuple[tuple[Site, str], ...]
    unknown: tuple[str, ...]  # chosen point keys (or site keys) absent from the graph


@dataclass(frozen=True)
class PassRun:
    """The pass's result: unpacks as `(graph, origin)`; `rounds` explains every choice."""

    graph: Graph
    origin: Origin
    rounds: tuple[RoundReport, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        yield self.graph
        yield self.origin

    @property
    def applied(self) -> tuple[Site, ...]:
        return tuple(s for r in self.rounds for s in r.applied)


def point_key(graph: Graph, anchor: int) -> str:
    return hashlib.blake2b(graph.node_hashes[anchor], digest_size=8).hexdigest()


def group_points(graph: Graph, sites: Iterable[Site]) -> tuple[Point, ...]:
    by_anchor: dict[int, list[Site]] = {}
    for s in sites:
        by_anchor.setdefault(s.anchor, []).append(s)
    return tuple(Point(point_key(graph, a), a, tuple(by_anchor[a])) for a in sorted(by_anchor))


Select = Callable[[Graph, Sequence[Point]], Choices]


class RewritePass:
    """Rewrite sites of a rule list as per-point choices (see the module docstring)."""

    name = "rewrite"

    def __init__(self, rules: Iterable[Rule] | Matcher, *, exclusive: bool = True) -> None:
        self.matcher = rules if isinstance(rules, Matcher) else Matcher(rules, exclusive=exclusive)

    def matches(self, graph: Graph) -> Matches:
        return self.matcher.match(graph)

    def sites(self, graph: Graph) -> tuple[Site, ...]:
        return self.matcher.match(graph).sites

    def points(self, graph: Graph) -> tuple[Point, ...]:
        return group_points(graph, self.sites(graph))

    def default(self, graph: Graph) -> RewriteConfig:
        """The pass default: no rewrite."""
        return RewriteConfig()

    def apply_round(self, graph: Graph, choices: Choices,
                    points: Sequence[Point] | None = None) -> tuple[Graph, Origin, RoundReport]:
        """One round: the chosen option at each point (`points` as listed for `graph`)."""
        if points is None:
            points = self.points(graph)
        by_key = {p.key: p for p in points}
        chosen: list[Site] = []
        unknown: list[str] = []
        for p in points:
            want = choices.get(p.key)
            if want is None:
                continue
            site = p.option(want)
            if site is None:
                unknown.append(f"{p.key}:{want}")
            else:
                chosen.append(site)
        unknown.extend(k for k in choices if k not in by_key)
        result = apply_sites(graph, chosen, self.matcher, check=False)
        report = RoundReport(len(points), sum(len(p.options) for p in points), result.applied,
                             result.skipped, tuple(unknown))
        return result.graph, result.origin, report

    def apply(self, graph: Graph, config: RewriteConfig) -> PassRun:
        origin: Origin = identity_origin(graph)
        reports: list[RoundReport] = []
        for choices in config.rounds:
            graph, step, report = self.apply_round(graph, choices)
            origin = compose(origin, step)
            reports.append(report)
        return PassRun(graph, origin, tuple(reports))

    def iterate(self, graph: Graph, select: Select, max_rounds: int = 16
                ) -> tuple[RewriteConfig, PassRun]:
        """Rounds chosen by `select` until it chooses nothing (or `max_rounds`)."""
        origin: Origin = identity_origin(graph)
        rounds: list[Choices] = []
        reports: list[RoundReport] = []
        for _ in range(max_rounds):
            points = self.points(graph)
            choices = MappingProxyType(dict(select(graph, points))) if points else {}
            if not choices:
                break
            graph, step, report = self.apply_round(graph, choices, points)
            origin = compose(origin, step)
            rounds.append(choices)
            reports.append(report)
            if not report.applied:
                break
        return RewriteConfig(tuple(rounds)), PassRun(graph, origin, tuple(reports))


def choose_all(rules: Iterable[str] | None = None) -> Select:
    """A `select` that takes the first option (of the given rules) at every point."""
    allowed = None if rules is None else set(rules)

    def select(graph: Graph, points: Sequence[Point]) -> Choices:
        out: dict[str, str] = {}
        for p in points:
            site = next((s for s in p.options if allowed is None or s.rule in allowed), None)
            if site is not None:
                out[p.key] = site.key
        return out

    return select
