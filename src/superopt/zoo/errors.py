"""Errors of the model zoo: an unknown model name, or options a model cannot be built with."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from superopt.ir.errors import IRError


class ZooError(IRError):
    """Base class for model-zoo errors."""


class UnknownModel(ZooError):
    """A model name the zoo does not know; the message suggests the closest known name."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        close = difflib.get_close_matches(name.lower().replace("-", "_").replace(".", "_"), list(known), n=1,
                                          cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        super().__init__(f"unknown model {name!r}{hint}; known models: {', '.join(known)}")
        self.name = name
        self.suggestion = close[0] if close else None


class BadOption(ZooError):
    """An option (batch size, image size, ...) that a model cannot be built with."""

    def __init__(self, model: str, problem: str) -> None:
        super().__init__(f"model {model!r}: {problem}")
        self.model = model
