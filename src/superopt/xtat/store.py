"""The global config store: the best choice seen per site key, per pass.

When a candidate becomes the best so far, every non-default choice it makes is recorded
under its site's key (a structural hash or a kernel signature digest). XTAT-M consults the
store for sites that a rebuilt stage has and the stage it replaced did not (a rewrite
created them, a layout change re-shaped them): such a site takes the best choice seen for
its key, else the pass default.
"""

from __future__ import annotations

from collections.abc import Iterator

from superopt.xtat.space import Choice
from superopt.xtat.stage import Candidate


class ConfigStore:
    def __init__(self) -> None:
        self._best: dict[str, dict[str, Choice]] = {}
        self.updates = 0

    def record(self, candidate: Candidate) -> None:
        for name, config in zip(candidate.names, candidate.configs, strict=True):
            per = self._best.setdefault(name, {})
            for key, choice in config.items():
                per[key] = choice
        self.updates += 1

    def get(self, pass_name: str, key: str) -> Choice | None:
        return self._best.get(pass_name, {}).get(key)

    def entries(self, pass_name: str) -> Iterator[tuple[str, Choice]]:
        yield from sorted(self._best.get(pass_name, {}).items())

    def __len__(self) -> int:
        return sum(len(v) for v in self._best.values())


__all__ = ["ConfigStore"]
