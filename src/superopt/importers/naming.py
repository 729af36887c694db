"""Unique source names for importers: a model may reuse a name (two constants from the same
layer, an input named like a parameter); the graph needs each input and weight named once."""

from __future__ import annotations


class UniqueNames:
    """Names taken so far; `claim` returns the hint, or `hint#2`, `hint#3`, ... if taken."""

    def __init__(self) -> None:
        self._taken: set[str] = set()

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def reserve(self, name: str) -> None:
        self._taken.add(name)

    def claim(self, hint: str) -> str:
        name, k = hint, 1
        while name in self._taken:
            k += 1
            name = f"{hint}#{k}"
        self._taken.add(name)
        return name
