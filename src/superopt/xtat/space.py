"""Tunable choices: sites, their options, and per-pass configurations.

A *site* is one place where a pass makes a choice (a rewrite point, the layout of one
value, the fusion decision of one node, the tile or flags of one kernel signature). Its
`key` is stable across rebuilt graphs: a structural hash for nodes and rewrite points, a
digest of the kernel signature for tiles and flags. `sources` are the ids of the source
graph's nodes the site descends from; XTAT-M uses them to carry a choice to a site whose
key changed because an earlier pass changed the graph around it.

A pass configuration is stored as a *delta*: only the sites whose choice differs from the
pass default. The default is a function of the stage, so a delta and the stage give the
complete configuration, and a candidate on a 100k-node graph that changes ten choices is
ten entries, not 100k. Choices are JSON values (bool, str, None, lists of ints); lists are
kept as tuples in memory so that choices hash and compare.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

Choice = Any  # bool | str | None | tuple[int, ...]


def freeze(choice: Any) -> Choice:
    """A choice read from JSON as the hashable value the passes compare with."""
    if isinstance(choice, list | tuple):
        return tuple(freeze(c) for c in choice)
    return choice


def thaw(choice: Choice) -> Any:
    if isinstance(choice, tuple):
        return [thaw(c) for c in choice]
    return choice


@dataclass(frozen=True, slots=True)
class Site:
    """One choice of one pass on one stage."""

    key: str
    options: tuple[Choice, ...]
    default: Choice
    sources: tuple[int, ...] = ()
    label: str = ""
    weight: float = 1.0  # how many kernels or values share the choice

    def __post_init__(self) -> None:
        if self.default not in self.options:
            raise ValueError(f"site {self.key}: default {self.default!r} is not an option")


class Sites(Mapping[str, Site]):
    """The sites of one pass on one stage, in a deterministic order, with an index from
    source node ids to sites (built on first use)."""

    def __init__(self, sites: Iterable[Site]) -> None:
        self._by_key: dict[str, Site] = {}
        for s in sites:
            self._by_key.setdefault(s.key, s)
        self._by_source: dict[int, list[str]] | None = None

    def __getitem__(self, key: str) -> Site:
        return self._by_key[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    @cached_property
    def tunable(self) -> list[Site]:
        """Sites with more than one option, in order."""
        return [s for s in self._by_key.values() if len(s.options) > 1]

    def by_sources(self, sources: Iterable[int]) -> list[Site]:
        """Sites sharing a source node with `sources` (in site order)."""
        if self._by_source is None:
            index: dict[int, list[str]] = {}
            for s in self._by_key.values():
                for n in s.sources:
                    index.setdefault(n, []).append(s.key)
            self._by_source = index
        keys: dict[str, None] = {}
        for n in sources:
            for k in self._by_source.get(n, ()):
                keys[k] = None
        return [self._by_key[k] for k in keys]


@dataclass(frozen=True)
class PassConfig:
    """A pass's choices that differ from its default, keyed by site key."""

    choices: Mapping[str, Choice] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def of(choices: Mapping[str, Choice]) -> PassConfig:
        return PassConfig(MappingProxyType({k: freeze(choices[k]) for k in sorted(choices)}))

    def __len__(self) -> int:
        return len(self.choices)

    def get(self, key: str, default: Choice = None) -> Choice:
        return self.choices.get(key, default)

    def items(self) -> list[tuple[str, Choice]]:
        return sorted(self.choices.items())

    def with_choice(self, site: Site, choice: Choice) -> PassConfig:
        """This configuration with `site` set to `choice` (dropped when it is the default)."""
        d = dict(self.choices)
        if choice == site.default:
            d.pop(site.key, None)
        else:
            d[site.key] = choice
        return PassConfig.of(d)

    def to_json(self) -> dict[str, Any]:
        return {k: thaw(v) for k, v in self.items()}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PassConfig:
        if not isinstance(d, Mapping):
            raise ValueError(f"a pass configuration is an object, found {type(d).__name__}")
        return PassConfig.of({str(k): v for k, v in d.items()})


EMPTY = PassConfig()


def canonical(configs: Mapping[str, PassConfig]) -> str:
    """Canonical JSON of every pass's configuration (the records database's candidate)."""
    return json.dumps({name: configs[name].to_json() for name in sorted(configs)},
                      sort_keys=True, separators=(",", ":"))


def digest(text: str | bytes, size: int = 8) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.blake2b(data, digest_size=size).hexdigest()


__all__ = ["EMPTY", "Choice", "PassConfig", "Site", "Sites", "canonical", "digest", "freeze",
           "thaw"]
