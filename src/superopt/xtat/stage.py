"""Stages and candidates.

A `Stage` is what one pass hands to the next: a graph plus what earlier passes decided.
Stage 0 is the source graph; after the rewrite pass, the rewritten graph; after layout,
the laid-out graph (`laid`); after fusion, the kernels (`partition`, `signatures`); after
tiling and flags, a tile and flags per kernel signature digest. `to_source` maps the
stage graph's node ids to the source graph's (composed origins), which XTAT-M uses to
carry choices across changed graphs.

A stage owns a small `memo` for what passes derive from it (its sites, its default
configuration): the cache belongs to the stage object and dies with it.

A `Candidate` is the stages between passes and every pass's configuration (as deltas
from the pass defaults); its `key` is the digest of the canonical JSON of the configs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from superopt.ir.graph import Graph
from superopt.ir.passes import Origin
from superopt.xtat.space import PassConfig, canonical, digest


@dataclass(frozen=True, eq=False)
class Stage:
    graph: Graph
    to_source: Origin | None = None  # None: the stage graph is the source graph
    laid: Any = None  # tpu_sim.LaidOut after the layout pass
    fusion: Mapping[int, bool] | None = None  # complete decisions on the laid-out graph
    partition: Any = None  # tpu_sim.Kernels after fusion
    signatures: tuple[Any, ...] | None = None  # per kernel
    sig_keys: tuple[str, ...] | None = None  # per kernel, the signature digest
    tiles: Mapping[str, Any] | None = None  # signature digest -> tile
    flags: Mapping[str, Any] | None = None  # signature digest -> Flags
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def sources(self, node: int) -> tuple[int, ...]:
        if self.to_source is None:
            return (node,)
        return self.to_source.get(node, ())

    def evolve(self, **changes: Any) -> Stage:
        """A new stage (with an empty memo) that differs in `changes`."""
        return replace(self, memo={}, **changes)


@dataclass(frozen=True, eq=False)
class Candidate:
    """Every pass's configuration and the stages they produce (`stages[i]` feeds pass i)."""

    names: tuple[str, ...]
    configs: tuple[PassConfig, ...]
    stages: tuple[Stage, ...]
    reports: tuple[Any, ...] = ()

    @property
    def final(self) -> Stage:
        return self.stages[-1]

    def config(self, name: str) -> PassConfig:
        return self.configs[self.names.index(name)]

    def as_dict(self) -> dict[str, PassConfig]:
        return dict(zip(self.names, self.configs, strict=True))

    @cached_property
    def json(self) -> str:
        return canonical(self.as_dict())

    @cached_property
    def key(self) -> str:
        return digest(self.json, 16)

    def changed(self) -> dict[str, int]:
        """Per pass, how many choices differ from its default."""
        return {n: len(c) for n, c in zip(self.names, self.configs, strict=True)}


__all__ = ["Candidate", "Stage"]
