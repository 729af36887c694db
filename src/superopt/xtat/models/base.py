"""The cost-model interface and its factory.

A `CostModel` predicts a kernel configuration's time (`predict`: seconds, for absolute
uses: a candidate's time is the sum over its kernels) and scores configurations of one
kernel against each other (`score`: lower is faster; by default the log of `predict`,
a model trained with a rank loss scores with what that loss trained). `fit` trains on
`dataset.KernelData`; `save` writes one file that `load_model` reads back.

A saved model carries the format version, the feature schema (`features.schema()`), the
hash of its training data and the hardware preset; loading one made under another
version or schema is a one-line `ModelError`, and so is using it for another preset
(`check_hardware`). Files are pickles of plain data (numbers, strings, bytes): load
only files you made, as with any pickle.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.xtat.models.features import Featurizer, KernelSample, schema

FORMAT = "superopt-costmodel"
VERSION = 1

Item = tuple[Any, Any, Any]  # (signature, tile, flags)


class ModelError(IRError):
    """A cost model that cannot be created, trained, loaded or used as asked."""


def items(samples: Sequence[KernelSample]) -> list[Item]:
    return [(s.sig, s.tile, s.flags) for s in samples]


class CostModel(ABC):
    name = "model"
    trainable = True

    def __init__(self, hardware: str = "v4", **opts: Any) -> None:
        from superopt.tpu_sim import get_hardware

        self.hardware = get_hardware(hardware).name
        self.opts = opts
        self.data_hash = ""
        self.fitted = not self.trainable
        self.fit_s = 0.0
        self.feat = Featurizer(self.hardware)

    # ---- the interface --------------------------------------------------------------------

    def fit(self, data: Any) -> CostModel:
        """Train on `data` (a `dataset.KernelData` of this model's preset)."""
        import time

        if data.hardware != self.hardware:
            raise ModelError(f"data measured on TPU {data.hardware}, the model is for "
                             f"{self.hardware}")
        if not len(data):
            raise ModelError("no training samples")
        start = time.perf_counter()
        self._fit(data)
        self.fit_s = time.perf_counter() - start
        self.data_hash = data.data_hash
        self.fitted = True
        return self

    def _fit(self, data: Any) -> None:
        return None

    @abstractmethod
    def predict_items(self, its: Sequence[Item]) -> np.ndarray:
        """Predicted seconds per (signature, tile, flags)."""

    def score_items(self, its: Sequence[Item]) -> np.ndarray:
        """Per item, a score to rank configurations of one kernel (lower: faster)."""
        return np.log(np.maximum(self.predict_items(its), 1e-15))

    def predict(self, samples: Sequence[KernelSample]) -> np.ndarray:
        self._ready()
        return self.predict_items(items(samples))

    def score(self, samples: Sequence[KernelSample]) -> np.ndarray:
        self._ready()
        return self.score_items(items(samples))

    def _ready(self) -> None:
        if not self.fitted:
            raise ModelError(f"the {self.name} model is not trained: fit or load it first")

    # ---- persistence ----------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {}

    def set_state(self, state: dict[str, Any]) -> None:
        return None

    def save(self, path: str | Path) -> Path:
        self._ready()
        p = Path(path)
        if not p.parent.exists():
            raise ModelError(f"{p}: directory {p.parent} does not exist")
        blob = {"format": FORMAT, "version": VERSION, "kind": self.name, "schema": schema(),
                "data_hash": self.data_hash, "hardware": self.hardware,
                "opts": self.opts, "fit_s": self.fit_s, "state": self.state()}
        p.write_bytes(pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL))
        return p

    def check_hardware(self, hardware: str) -> None:
        if hardware != self.hardware:
            raise ModelError(f"cost model trained for TPU {self.hardware}, used for "
                             f"{hardware}: train one on {hardware} data")

    def describe(self) -> str:
        return (f"{self.name} model (TPU {self.hardware}, schema {schema()}, data "
                f"{self.data_hash or '-'})")


MODELS: dict[str, Callable[..., CostModel]] = {}


def register(name: str) -> Callable[[type[CostModel]], type[CostModel]]:
    def deco(cls: type[CostModel]) -> type[CostModel]:
        MODELS[name] = cls
        cls.name = name
        return cls
    return deco


# The modules that register a model (`create` imports them by name, as
# `strategies.base.create` does its strategies: the implementations build on this module,
# so it names them rather than importing them).
KINDS = ("analytical", "ensemble", "gbt", "graphsage")


def _register_all() -> None:
    for module in KINDS:
        import_module(f"superopt.xtat.models.{module}")


def create(name: str, hardware: str = "v4", **opts: Any) -> CostModel:
    """A cost model by name: analytical, gbt, graphsage or ensemble (gbt and graphsage
    averaged in log space)."""
    _register_all()
    cls = MODELS.get(name)
    if cls is None:
        raise ModelError(f"unknown cost model {name!r}: expected one of "
                         f"{', '.join(sorted(MODELS))}")
    return cls(hardware=hardware, **opts)


def load_model(path: str | Path, hardware: str | None = None) -> CostModel:
    """A saved model; `hardware`: the preset it must have been trained for."""
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"{p}: no such cost model file")
    try:
        blob = pickle.loads(p.read_bytes())
    except Exception as e:  # any unpickling failure means "not a model"
        raise ModelError(f"{p}: not a superopt cost model ({type(e).__name__})") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise ModelError(f"{p}: not a superopt cost model")
    if blob.get("version") != VERSION:
        raise ModelError(f"{p}: cost model format version {blob.get('version')}, this "
                         f"superopt reads version {VERSION}")
    if blob.get("schema") != schema():
        raise ModelError(f"{p}: trained on feature schema {blob.get('schema')}, this superopt "
                         f"computes schema {schema()}: train it again")
    model = create(blob["kind"], blob["hardware"], **blob.get("opts", {}))
    if hardware is not None:
        model.check_hardware(hardware)
    model.set_state(blob["state"])
    model.data_hash = blob["data_hash"]
    model.fit_s = float(blob.get("fit_s", 0.0))
    model.fitted = True
    return model


__all__ = ["FORMAT", "MODELS", "VERSION", "CostModel", "ModelError", "create", "load_model",
           "register"]
