"""Learned cost models for the tuner (DESIGN.md section 9): one interface
(`base.CostModel`: fit/predict/score/save/load) and `create("analytical"|"gbt"|"graphsage")`;
the data (`dataset`), the features (`features`), the metrics (`metrics`), the tuner's
top-k ranking (`topk`) and `superopt costmodel` (`command`). Names load on first use, so
the CLI's parser can import `command` without numpy; xgboost and torch load only inside
the models that need them."""

from __future__ import annotations

from typing import Any

__all__ = ["MODELS", "CostModel", "ModelError", "create", "load_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from superopt.xtat.models import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
