"""The graph IR: immutable, hash-consed nodes with stable ids, built once by a builder.

A `Graph` never changes after `GraphBuilder.build`. Node ids are positions in
`Graph.nodes`, which is always a topological order. Passes build a new graph and return
`(new_graph, origin)`, where `origin[new_id]` lists the old node ids it came from
(see `superopt.ir.passes`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from types import MappingProxyType
from typing import Any

import numpy as np

from superopt.ir import ops as _ops  # noqa: F401  (registers the op set)
from superopt.ir.errors import IRError, LintError, ShapeError
from superopt.ir.memory import MemoryLimitError, ensure_fits, human_bytes
from superopt.ir.opdef import SOURCE, VARIADIC, AttrValue, get_op
from superopt.ir.types import DType, TensorType

# Far above any real tensor, far below where int64 arithmetic on sizes would overflow.
MAX_DIM = 2**40


def source_dims(op: str, name: str, shape: object) -> tuple[int, ...]:
    """An input's or weight's shape as ints: a fractional, non-finite, boolean, zero,
    negative or absurd dimension is an error, never truncated to an int."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ShapeError(op, None, f"a list of dimensions for {name!r}", repr(shape))
    items, dims = list(shape), []
    for d in items:
        ok = isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))
        if isinstance(d, (float, np.floating)) and np.isfinite(d) and float(d).is_integer():
            ok = True
        if not ok or not 1 <= d <= MAX_DIM:
            raise ShapeError(op, None, f"dimensions of {name!r} that are whole numbers from 1 "
                             f"to {MAX_DIM}", f"{d!r} in {items!r}")
        dims.append(int(d))
    return tuple(dims)


@dataclass(frozen=True, slots=True, order=True)
class Value:
    """Output `index` of node `node`."""

    node: int
    index: int = 0

    def __str__(self) -> str:
        return f"%{self.node}" if self.index == 0 else f"%{self.node}:{self.index}"


AttrItems = tuple[tuple[str, AttrValue], ...]


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    op: str
    inputs: tuple[Value, ...]
    attrs: AttrItems
    types: tuple[TensorType, ...]

    @property
    def a(self) -> dict[str, AttrValue]:
        """Attributes as a dict (a fresh copy)."""
        return dict(self.attrs)

    def attr(self, name: str) -> AttrValue:
        for k, v in self.attrs:
            if k == name:
                return v
        raise KeyError(f"{self.op} node %{self.id} has no attribute {name!r}")

    @property
    def type(self) -> TensorType:
        return self.types[0]

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(Value(self.id, i) for i in range(len(self.types)))

    @property
    def is_source(self) -> bool:
        return get_op(self.op).has(SOURCE)

    @property
    def is_named_source(self) -> bool:
        """An input or weight (a source known by name; constants are not)."""
        return get_op(self.op).named_source

    @property
    def key(self) -> tuple[str, tuple[Value, ...], AttrItems]:
        return (self.op, self.inputs, self.attrs)


def _attr_repr(v: AttrValue) -> str:
    if isinstance(v, tuple):
        return "(" + ",".join(_attr_repr(x) for x in v) + ")"
    if isinstance(v, float):
        return repr(v)
    return str(v)


@lru_cache(maxsize=1 << 16)
def _attrs_bytes(attrs: AttrItems) -> bytes:
    # Graphs repeat a few attribute tuples many times; hashing is on every pass's path.
    return _attr_repr(attrs).encode()


@dataclass(frozen=True, eq=False)
class Graph:
    """An immutable tensor graph. `weights` holds the data of weights that have any."""

    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    weights: Mapping[str, np.ndarray] = field(default_factory=lambda: MappingProxyType({}))
    name: str = "graph"

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def type_of(self, v: Value) -> TensorType:
        return self.nodes[v.node].types[v.index]

    def topological(self) -> Iterator[Node]:
        """Nodes in a topological order (ids are assigned in one)."""
        return iter(self.nodes)

    @cached_property
    def inputs(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "input")

    @cached_property
    def weight_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.op == "weight")

    @cached_property
    def consumers(self) -> tuple[tuple[int, ...], ...]:
        """consumers[i] = ids of the nodes that read any output of node i (each once)."""
        users: list[list[int]] = [[] for _ in self.nodes]
        for n in self.nodes:
            for i in dict.fromkeys(v.node for v in n.inputs):
                users[i].append(n.id)
        return tuple(tuple(u) for u in users)

    def op_histogram(self) -> Counter[str]:
        return Counter(n.op for n in self.nodes)

    # ---- hashing ------------------------------------------------------------------

    @cached_property
    def node_hashes(self) -> tuple[bytes, ...]:
        """Merkle hash per node: op, attributes and the hashes of its inputs.

        Independent of node numbering, so two graphs with the same structure hash
        alike. Weight data is not hashed (a weight is identified by name, shape, dtype).
        """
        out: list[bytes] = []
        for n in self.nodes:
            h = hashlib.blake2b(digest_size=16)
            h.update(n.op.encode())
            h.update(_attrs_bytes(n.attrs))
            for v in n.inputs:
                h.update(out[v.node])
                h.update(v.index.to_bytes(2, "little"))
            out.append(h.digest())
        return tuple(out)

    @cached_property
    def structural_hash(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for n in sorted(self.node_hashes[n.id] for n in self.inputs):
            h.update(n)
        h.update(b"|")
        for v in self.outputs:
            h.update(self.node_hashes[v.node])
            h.update(v.index.to_bytes(2, "little"))
        return h.hexdigest()

    # ---- invariants ---------------------------------------------------------------

    def lint(self) -> None:
        """Check ids, topological order, arity, attributes, shapes and dtypes."""
        problems: list[str] = []
        seen_keys: set[tuple[Any, ...]] = set()
        names: dict[str, int] = {}
        for pos, n in enumerate(self.nodes):
            where = f"node %{pos} ({n.op})"
            if n.id != pos:
                problems.append(f"{where}: id {n.id} is not its position")
                continue
            try:
                op = get_op(n.op)
            except IRError as e:
                problems.append(f"{where}: {e}")
                continue
            if op.num_inputs == VARIADIC:
                if len(n.inputs) < op.min_inputs:
                    problems.append(f"{where}: expected >= {op.min_inputs} inputs, found {len(n.inputs)}")
            elif len(n.inputs) != op.num_inputs:
                problems.append(f"{where}: expected {op.num_inputs} inputs, found {len(n.inputs)}")
            bad_input = False
            for v in n.inputs:
                if not 0 <= v.node < pos:
                    problems.append(f"{where}: input {v} is not an earlier node")
                    bad_input = True
                elif v.index >= len(self.nodes[v.node].types):
                    problems.append(f"{where}: input {v} names a missing output")
                    bad_input = True
            if n.key in seen_keys:
                problems.append(f"{where}: duplicate of an earlier node (not hash-consed)")
            seen_keys.add(n.key)
            if op.named_source:
                name = n.attr("name")
                if name in names:
                    problems.append(f"{where}: source name {name!r} also used by %{names[name]}")
                names[name] = pos
            if bad_input:
                continue
            try:
                attrs = op.check_attrs(dict(n.attrs))
                in_types = tuple(self.type_of(v) for v in n.inputs)
                types = op.shape(in_types, attrs)
            except IRError as e:
                problems.append(f"{where}: {e}")
                continue
            if tuple(types) != n.types:
                problems.append(f"{where}: stored types {[str(t) for t in n.types]} differ from "
                                f"inferred {[str(t) for t in types]}")
        for v in self.outputs:
            if not 0 <= v.node < len(self.nodes) or v.index >= len(self.nodes[v.node].types):
                problems.append(f"graph output {v} does not exist")
        for name, data in self.weights.items():
            if name not in names or self.nodes[names[name]].op != "weight":
                problems.append(f"weight data {name!r} has no weight node")
            elif tuple(data.shape) != self.nodes[names[name]].type.shape:
                problems.append(f"weight data {name!r} has shape {tuple(data.shape)}, node says "
                                f"{self.nodes[names[name]].type}")
        if problems:
            raise LintError(f"graph {self.name!r} fails lint: " + "; ".join(problems[:20])
                            + (f"; ... {len(problems) - 20} more" if len(problems) > 20 else ""))

    # ---- conversions --------------------------------------------------------------

    def to_networkx(self) -> Any:
        import networkx as nx

        g = nx.MultiDiGraph(name=self.name)
        for n in self.nodes:
            g.add_node(n.id, op=n.op, attrs=dict(n.attrs), types=[str(t) for t in n.types])
            for slot, v in enumerate(n.inputs):
                g.add_edge(v.node, n.id, index=v.index, slot=slot)
        return g

    def __str__(self) -> str:
        return to_text(self)


def to_text(graph: Graph, max_nodes: int | None = None) -> str:
    """One line per node: `%3 = conv2d(%0, %1) stride=(2,2) ... : f32[1,64,112,112]`.
    (Here, not in `serialize`, so that `str(graph)` needs no import of a module above this
    one; `serialize` re-exports it.)"""
    lines = [f"graph {graph.name} ({len(graph)} nodes, hash {graph.structural_hash[:12]})"]
    for n in graph.nodes[:max_nodes]:
        lhs = ", ".join(str(v) for v in n.outputs)
        args = ", ".join(str(v) for v in n.inputs)
        types = ", ".join(str(t) for t in n.types)
        if n.is_named_source:
            data = " (data)" if n.attr("name") in graph.weights else ""
            lines.append(f"  {lhs} = {n.op} {n.attr('name')!r}{data} : {types}")
            continue
        spec = get_op(n.op)
        # Attributes at their default value are left out to keep lines short.
        attrs = " ".join(f"{k}={_attr_repr(v)}" for k, v in n.attrs
                         if spec.attr_spec(k).required or v != spec.attr_spec(k).default)
        lines.append(f"  {lhs} = {n.op}({args}){' ' + attrs if attrs else ''} : {types}")
    if max_nodes is not None and len(graph) > max_nodes:
        lines.append(f"  ... {len(graph) - max_nodes} more nodes")
    lines.append("  return " + ", ".join(str(v) for v in graph.outputs))
    return "\n".join(lines)


class GraphBuilder:
    """Builds a graph node by node; structurally identical nodes are created once.

    `b.op("conv2d", x, w, stride=(2, 2))` or, equivalently, `b.conv2d(x, w, stride=(2, 2))`.
    Shapes are inferred (and checked) as nodes are added.
    """

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self._index: dict[tuple[str, tuple[Value, ...], AttrItems], int] = {}
        self._names: dict[str, int] = {}
        self.weights: dict[str, np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            get_op(name)
        except IRError:
            raise AttributeError(f"GraphBuilder has no op or attribute {name!r}") from None
        return partial(self.op, name)

    def type_of(self, v: Value) -> TensorType:
        return self.nodes[v.node].types[v.index]

    def _has(self, v: object) -> bool:
        return (isinstance(v, Value) and 0 <= v.node < len(self.nodes)
                and 0 <= v.index < len(self.nodes[v.node].types))

    def shape(self, v: Value) -> tuple[int, ...]:
        return self.type_of(v).shape

    def input(self, name: str, shape: Sequence[int], dtype: str | DType = "f32",
              high: int = 0) -> Value:
        return self._source("input", name, shape, dtype, init="normal", high=high)

    def weight(self, name: str, shape: Sequence[int], dtype: str | DType = "f32",
               data: np.ndarray | None = None, init: str = "fan_in") -> Value:
        v = self._source("weight", name, shape, dtype, init=init)
        if data is not None:
            arr = np.asarray(data)
            if tuple(arr.shape) != tuple(shape):
                raise ShapeError("weight", None, f"data of shape {list(shape)} for {name!r}",
                                 f"{list(arr.shape)}")
            ensure_fits(arr.nbytes, f"weight {name!r} {list(arr.shape)}")
            try:
                arr = arr.copy()
            except MemoryError:
                raise MemoryLimitError(f"weight {name!r} {list(arr.shape)}: "
                                       f"{human_bytes(arr.nbytes)} do not fit in memory") from None
            arr.setflags(write=False)
            self.weights[name] = arr
        return v

    def _source(self, op: str, name: str, shape: Sequence[int], dtype: str | DType,
                init: str, high: int = 0) -> Value:
        dt = DType.parse(dtype).value
        dims = source_dims(op, name, shape)
        if name in self._names:
            prev = self.nodes[self._names[name]]
            want = {"shape": dims, "dtype": dt}
            if prev.op != op or any(prev.attr(k) != v for k, v in want.items()):
                raise IRError(f"source name {name!r} is already used by {prev.op} {prev.type}")
            return Value(prev.id)
        v = self.op(op, name=name, shape=dims, dtype=dt, init=init, high=high)
        assert isinstance(v, Value)
        self._names[name] = v.node
        return v

    def op(self, op_name: str, /, *inputs: Value, **attrs: AttrValue) -> Value | tuple[Value, ...]:
        values = self.add(op_name, inputs, attrs)
        opdef = get_op(op_name)
        if callable(opdef.num_outputs) or len(values) != 1:
            return values
        return values[0]

    def add(self, name: str, inputs: Sequence[Value], attrs: Mapping[str, AttrValue]
            ) -> tuple[Value, ...]:
        """Add (or find) a node and return all of its outputs."""
        opdef = get_op(name)
        inputs = self._own(name, inputs)
        if opdef.num_inputs == VARIADIC:
            if len(inputs) < opdef.min_inputs:
                raise IRError(f"{name}: expected at least {opdef.min_inputs} inputs, "
                              f"found {len(inputs)}")
        elif len(inputs) != opdef.num_inputs:
            raise IRError(f"{name}: expected {opdef.num_inputs} inputs, found {len(inputs)}")
        in_types = tuple(self.type_of(v) for v in inputs)
        checked = opdef.check_attrs(attrs)
        if opdef.canonicalize is not None:
            checked = opdef.canonicalize(in_types, checked)
        items: AttrItems = tuple(sorted(checked.items()))
        key = (name, inputs, items)
        found = self._index.get(key)
        if found is None:
            types = tuple(opdef.shape(in_types, checked))
            if len(types) != opdef.outputs(checked):
                raise IRError(f"{name}: shape rule gave {len(types)} outputs, expected "
                              f"{opdef.outputs(checked)}")
            found = len(self.nodes)
            self.nodes.append(Node(found, name, inputs, items, types))
            self._index[key] = found
        return self.nodes[found].outputs

    def recreate(self, node: Node, inputs: Sequence[Value], in_types: tuple[TensorType, ...],
                 data: np.ndarray | None = None) -> tuple[Value, ...]:
        """Add (or find) a copy of `node`, a node of another graph, reading `inputs`.

        Passes copy most nodes unchanged, so this skips re-checking what was checked when
        `node` was built: if the new inputs have the node's old input types (`in_types`),
        its attributes and output types are reused as they are. Otherwise it is added
        afresh through `add`. A source keeps its attributes; read-only weight `data` (as
        builders store it) is shared rather than copied.
        """
        inputs = tuple(inputs)
        if node.is_named_source:
            name = node.attr("name")
            if name in self._names:  # the usual checks for a name used twice
                if node.op == "input":
                    return (self.input(name, node.type.shape, node.type.dtype,
                                       high=node.attr("high")),)
                return (self.weight(name, node.type.shape, node.type.dtype, data=data,
                                    init=node.attr("init")),)
            v = self._append(node.op, (), node.attrs, node.types)
            self._names[name] = v
            if data is not None:
                arr = np.asarray(data)
                if arr.flags.writeable or tuple(arr.shape) != node.type.shape:
                    self.weight(name, node.type.shape, node.type.dtype, data=arr)
                else:
                    self.weights[name] = arr
            return self.nodes[v].outputs
        for v in inputs:
            if not isinstance(v, Value) or not 0 <= v.node < len(self.nodes):
                raise IRError(f"{node.op}: input is not a value of this builder: {v!r}")
        if tuple(self.type_of(v) for v in inputs) != tuple(in_types):
            return self.add(node.op, inputs, dict(node.attrs))
        return self.nodes[self._append(node.op, inputs, node.attrs, node.types)].outputs

    def add_typed(self, op: str, inputs: Sequence[Value], attrs: AttrItems,
                  types: tuple[TensorType, ...]) -> tuple[Value, ...]:
        """Add (or find) a node whose attributes and output types were checked already
        (an e-graph typed the term when it was made): `add` without re-checking them,
        which is most of its time when a search builds thousands of candidate graphs."""
        return self.nodes[self._append(op, self._own(op, inputs), attrs, types)].outputs

    def _own(self, op: str, inputs: Sequence[Value]) -> tuple[Value, ...]:
        """`inputs` as a tuple, each checked to be a value of this builder."""
        inputs = tuple(inputs)
        for i, v in enumerate(inputs):
            if not self._has(v):
                raise IRError(f"{op}: input {i} is not a value of this builder: {v!r}")
        return inputs

    def _append(self, op: str, inputs: tuple[Value, ...], attrs: AttrItems,
                types: tuple[TensorType, ...]) -> int:
        key = (op, inputs, attrs)
        found = self._index.get(key)
        if found is None:
            found = len(self.nodes)
            self.nodes.append(Node(found, op, inputs, attrs, types))
            self._index[key] = found
        return found

    def build(self, outputs: Sequence[Value] | Value, name: str | None = None) -> Graph:
        return self.build_with_map(outputs, name)[0]

    def build_with_map(self, outputs: Sequence[Value] | Value, name: str | None = None
                       ) -> tuple[Graph, dict[int, int]]:
        """Freeze the graph, keeping inputs and what the outputs need; renumber densely.

        Returns the graph and the map from builder node ids to graph node ids.
        """
        outs = (outputs,) if isinstance(outputs, Value) else tuple(outputs)
        for i, v in enumerate(outs):
            if not self._has(v):
                raise IRError(f"output {i} is not a value of this builder: {v!r}")
        live = [False] * len(self.nodes)
        stack = [v.node for v in outs] + [n.id for n in self.nodes if n.op == "input"]
        while stack:
            i = stack.pop()
            if not live[i]:
                live[i] = True
                stack.extend(v.node for v in self.nodes[i].inputs)
        remap: dict[int, int] = {}
        nodes: list[Node] = []
        if all(live):
            # Nothing to drop (a search's candidate graphs, built from what they need):
            # the ids are dense already, and the nodes are kept as they are.
            remap = {n.id: n.id for n in self.nodes}
            nodes = self.nodes
        else:
            for n in self.nodes:
                if live[n.id]:
                    remap[n.id] = len(nodes)
                    nodes.append(Node(len(nodes), n.op,
                                      tuple(Value(remap[v.node], v.index) for v in n.inputs),
                                      n.attrs, n.types))
        kept = {n.attr("name") for n in nodes if n.op == "weight"}
        weights = {k: v for k, v in self.weights.items() if k in kept}
        graph = Graph(tuple(nodes), tuple(Value(remap[v.node], v.index) for v in outs),
                      MappingProxyType(weights), name or self.name)
        return graph, remap
