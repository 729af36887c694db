"""One interpreter for every graph, parameterised by a semantics table.

Three semantics ship with the IR:

- `reference`: float64 numpy, from each OpDef's reference implementation;
- `modp`: exact integers modulo p = 2**31 - 1 (see `superopt.ir.modp` for how each
  non-linear op is defined there), used for fingerprints and PET's region tests;
- `shapes`: abstract values (`TensorType`), from each OpDef's shape rule.

Sources (inputs, weights) take their value from `feeds`, then from the graph's weight
data, then from a deterministic random draw keyed by (seed, source name).
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, Node, Value
from superopt.ir.kernels import P
from superopt.ir.memory import MemoryLimitError as MemoryLimitError  # re-exported
from superopt.ir.memory import ensure_fits, human_bytes
from superopt.ir.opdef import get_op
from superopt.ir.rules import RuleTable
from superopt.ir.types import TensorType


class FeedError(IRError):
    """A feed that does not match the graph's input (unknown name, shape or dtype)."""


def check_memory(graph: Graph, itemsize: int = 8) -> None:
    """Refuse to run `graph` when its sources plus twice its largest value (an op's input
    and output live together), at `itemsize` bytes per element, exceed the memory
    available now. The figure and the largest tensor are in the message."""
    total, largest, where = 0, 0, None
    for n in graph.nodes:
        if n.is_named_source:
            total += n.type.size
        for t in n.types:
            if t.size > largest:
                largest, where = t.size, (n, t)
    if where is None:
        return
    node, t = where
    label = f"{node.op} {node.attr('name')!r}" if node.is_named_source else \
        f"%{node.id} ({node.op})"
    ensure_fits((total + 2 * largest) * itemsize,
                f"graph {graph.name!r} at {itemsize * 8}-bit precision (largest tensor: "
                f"{label} {t}, {human_bytes(t.size * itemsize)})")


def source_rng(seed: int, name: str) -> np.random.Generator:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


def fan_in(shape: tuple[int, ...]) -> int:
    if len(shape) == 4:  # conv OIHW
        return max(1, math.prod(shape[1:]))
    if len(shape) >= 2:  # matmul (.., K, N)
        return max(1, shape[-2])
    return 1


class Semantics(ABC):
    """How values look and how each op computes on them."""

    name: str

    @abstractmethod
    def apply(self, node: Node, args: tuple[Any, ...]) -> tuple[Any, ...]: ...

    @abstractmethod
    def draw(self, node: Node, seed: int) -> Any:
        """A value for a source that has neither a feed nor weight data."""

    @abstractmethod
    def accept(self, node: Node, value: Any, graph: Graph) -> Any:
        """Check and convert a fed (or stored) value for a source node."""

    def source(self, node: Node, graph: Graph, feeds: Mapping[str, Any], seed: int) -> Any:
        name = node.attr("name")
        if name in feeds:
            return self.accept(node, feeds[name], graph)
        if name in graph.weights and self.uses_weight_data:
            return self.accept(node, graph.weights[name], graph)
        return self.draw(node, seed)

    uses_weight_data: bool = True


def _check_shape(node: Node, value: np.ndarray, graph: Graph) -> None:
    if tuple(value.shape) != node.type.shape:
        raise FeedError(f"graph {graph.name!r}: {node.op} {node.attr('name')!r} expects "
                        f"{node.type}, fed shape {list(value.shape)}")


def _float32_exact(x: np.ndarray) -> np.ndarray:
    """`x` rounded to the nearest float32 values, kept as float64."""
    return x.astype(np.float32).astype(np.float64)


class ReferenceSemantics(Semantics):
    name = "reference"

    def apply(self, node: Node, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(get_op(node.op).reference(args, node.a))

    def accept(self, node: Node, value: Any, graph: Graph) -> np.ndarray:
        arr = np.asarray(value)
        _check_shape(node, arr, graph)
        return arr.astype(np.float64 if node.type.dtype.is_float else np.int64)

    def draw(self, node: Node, seed: int) -> np.ndarray:
        t = node.type
        rng = source_rng(seed, node.attr("name"))
        if not t.dtype.is_float:
            return rng.integers(0, max(node.attr("high"), 1), size=t.shape, dtype=np.int64)
        init = node.attr("init")
        if init == "ones":
            return np.ones(t.shape)
        if init == "zeros":
            return np.zeros(t.shape)
        # Values a float32 tensor holds exactly: a model's weights are float32 data, and a
        # rewrite whose folded weights are stored as float32 (a concatenation, a transpose)
        # then keeps them bit for bit, so a value check sees the rewrite, not the rounding
        # of 64-bit draws (t5_small_encoder's merged matmuls read 1.8e-5 apart before).
        if init == "positive":
            return _float32_exact(rng.uniform(0.5, 1.5, size=t.shape))
        scale = math.sqrt(2.0 / fan_in(t.shape)) if init == "fan_in" else 1.0
        return _float32_exact(rng.standard_normal(t.shape) * scale)


class ModPSemantics(Semantics):
    name = "modp"
    uses_weight_data = False  # float weight data has no exact meaning mod p

    def __init__(self, table: RuleTable) -> None:
        self.table = table

    def apply(self, node: Node, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(self.table.get(node.op)(args, node.a, node))

    def accept(self, node: Node, value: Any, graph: Graph) -> np.ndarray:
        arr = np.asarray(value)
        _check_shape(node, arr, graph)
        if arr.dtype.kind not in "iu":
            raise FeedError(f"modp feed {node.attr('name')!r} must hold integers, found {arr.dtype}")
        arr = arr.astype(np.int64)
        return arr if not node.type.dtype.is_float else arr % P

    def draw(self, node: Node, seed: int) -> np.ndarray:
        t = node.type
        rng = source_rng(seed, node.attr("name"))
        if not t.dtype.is_float:
            return rng.integers(0, max(node.attr("high"), 1), size=t.shape, dtype=np.int64)
        return rng.integers(0, P, size=t.shape, dtype=np.int64)


class ShapeSemantics(Semantics):
    name = "shapes"

    def apply(self, node: Node, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(get_op(node.op).shape(tuple(args), node.a))

    def accept(self, node: Node, value: Any, graph: Graph) -> TensorType:
        t = value if isinstance(value, TensorType) else TensorType(tuple(np.shape(value)),
                                                                   node.type.dtype)
        if t.shape != node.type.shape:
            raise FeedError(f"graph {graph.name!r}: {node.attr('name')!r} expects {node.type}, "
                            f"fed {t}")
        return t

    def draw(self, node: Node, seed: int) -> TensorType:
        return node.type

    def source(self, node: Node, graph: Graph, feeds: Mapping[str, Any], seed: int) -> Any:
        name = node.attr("name")
        return self.accept(node, feeds[name], graph) if name in feeds else node.type


# Semantics by name. `modp` registers its own on import (it builds on `ModPSemantics` here,
# so this module cannot import it); the `superopt.ir` package imports it, so the name is
# there before any module of the package runs.
_NAMED: dict[str, Semantics] = {}


def register_semantics(name: str, semantics: Semantics) -> None:
    """Make `semantics` available as `interpret(..., semantics=name)`."""
    _NAMED[name] = semantics


def _semantics(name: str | Semantics) -> Semantics:
    if isinstance(name, Semantics):
        return name
    got = _NAMED.get(name)
    if got is None:
        raise IRError(f"unknown semantics {name!r}; expected reference, modp or shapes")
    return got


def interpret(graph: Graph, feeds: Mapping[str, Any] | None = None,
              semantics: str | Semantics = "reference", seed: int = 0,
              keep: bool = False) -> tuple[Any, ...] | dict[Value, Any]:
    """Run `graph`; return its outputs, or every value when `keep` is set."""
    sem = _semantics(semantics)
    if sem.name != "shapes":
        check_memory(graph)
    feeds = dict(feeds or {})
    known = {n.attr("name") for n in graph.nodes if n.is_named_source}
    unknown = sorted(set(feeds) - known)
    if unknown:
        raise FeedError(f"graph {graph.name!r} has no input or weight named {unknown[0]!r}")
    # Free each value after its last use so large models fit in memory.
    last_use: dict[int, int] = {}
    for n in graph.nodes:
        for v in n.inputs:
            last_use[v.node] = n.id
    pinned = {v.node for v in graph.outputs}
    env: dict[int, tuple[Any, ...]] = {}
    every: dict[Value, Any] = {}
    for n in graph.nodes:
        if n.is_named_source:
            out: tuple[Any, ...] = (sem.source(n, graph, feeds, seed),)
        else:
            args = tuple(env[v.node][v.index] for v in n.inputs)
            try:
                out = sem.apply(n, args)
            except IRError:
                raise
            except Exception as e:
                raise IRError(f"{sem.name} evaluation of {n.op} %{n.id} failed: "
                              f"{type(e).__name__}: {e}") from e
        env[n.id] = out
        if keep:
            for i, x in enumerate(out):
                every[Value(n.id, i)] = x
        for v in dict.fromkeys(v.node for v in n.inputs):
            if last_use.get(v) == n.id and v not in pinned and not keep:
                env.pop(v, None)
    if keep:
        return every
    return tuple(env[v.node][v.index] for v in graph.outputs)


def random_feeds(graph: Graph, semantics: str | Semantics = "reference", seed: int = 0,
                 include_weights: bool = False) -> dict[str, Any]:
    """Random values for the graph's inputs (and weights without data, if asked)."""
    sem = _semantics(semantics)
    drawn = [n for n in graph.nodes
             if n.op == "input" or (include_weights and n.op == "weight"
                                    and n.attr("name") not in graph.weights)]
    if sem.name != "shapes" and drawn:
        # Only what is drawn counts: a model's weights are not (llama3_2_1b's 5 GB of
        # them, counted at 64 bits, refused a feed of 16 token ids).
        big = max(drawn, key=lambda n: n.type.size)
        ensure_fits(sum(n.type.size for n in drawn) * 8,
                    f"random feeds of graph {graph.name!r} at 64-bit precision (largest: "
                    f"{big.op} {big.attr('name')!r} {big.type})")
    return {n.attr("name"): sem.draw(n, seed) for n in drawn}


REFERENCE = ReferenceSemantics()
SHAPES = ShapeSemantics()
register_semantics("reference", REFERENCE)
register_semantics("ref", REFERENCE)
register_semantics("shapes", SHAPES)
