"""Graph files: versioned JSON (weights in a side .npz) and a readable text form."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.graph import Graph, GraphBuilder, Node, Value, _attr_repr
from superopt.ir.opdef import get_op

SCHEMA = "superopt.graph"
VERSION = 1


class GraphFileError(IRError):
    """A graph file that cannot be read: names the file and the problem."""


def jsonable(v: Any) -> Any:
    """An attribute value as JSON data (tuples, nested, become lists)."""
    return [jsonable(x) for x in v] if isinstance(v, tuple) else v


def to_json(graph: Graph) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "name": graph.name,
        "hash": graph.structural_hash,
        "nodes": [{"id": n.id, "op": n.op,
                   "inputs": [[v.node, v.index] for v in n.inputs],
                   "attrs": {k: jsonable(v) for k, v in n.attrs}} for n in graph.nodes],
        "outputs": [[v.node, v.index] for v in graph.outputs],
    }


def from_json(doc: Any, weights: dict[str, np.ndarray] | None = None,
              source: str = "<json>") -> Graph:
    """Rebuild a graph through the builder, so every node is re-checked."""
    def fail(msg: str) -> GraphFileError:
        return GraphFileError(f"{source}: {msg}")

    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise fail(f"not a superopt graph (expected \"schema\": \"{SCHEMA}\")")
    if doc.get("version") != VERSION:
        raise fail(f"unsupported graph schema version {doc.get('version')!r} (this is {VERSION})")
    weights = weights or {}
    b = GraphBuilder(str(doc.get("name", "graph")))
    ids: dict[int, int] = {}
    try:
        for k, nd in enumerate(doc["nodes"]):
            if nd["id"] != k:
                raise fail(f"node {k}: id {nd['id']} is not its position")
            try:
                inputs = tuple(Value(ids[i], j) for i, j in nd["inputs"])
            except KeyError as e:
                raise fail(f"node {k}: input refers to unknown node {e}") from None
            attrs = nd.get("attrs", {})
            try:
                if nd["op"] == "weight":
                    name = attrs["name"]
                    v = b.weight(name, attrs["shape"], attrs.get("dtype", "f32"),
                                 data=weights.get(name), init=attrs.get("init", "fan_in"))
                elif nd["op"] == "input":
                    v = b.input(attrs["name"], attrs["shape"], attrs.get("dtype", "f32"),
                                high=attrs.get("high", 0))
                else:
                    v = b.add(nd["op"], inputs, attrs)[0]
            except IRError as e:
                raise fail(f"node {k} ({nd.get('op')}): {e}") from None
            ids[k] = v.node
        outputs = [Value(ids[i], j) for i, j in doc["outputs"]]
    except (KeyError, TypeError, ValueError) as e:
        raise fail(f"malformed graph document ({type(e).__name__}: {e})") from None
    graph = b.build(outputs)
    missing = set(weights) - set(graph.weights)
    if missing:
        raise fail(f"weight data for unknown weights: {sorted(missing)[:5]}")
    return graph


def weights_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + ".weights.npz")


def save(graph: Graph, path: str | Path) -> Path:
    """Write `path` (JSON) and, when the graph carries weight data, `<stem>.weights.npz`."""
    path = Path(path)
    doc = to_json(graph)
    if graph.weights:
        wp = weights_path(path)
        np.savez(wp, **{k: np.asarray(v) for k, v in graph.weights.items()})
        doc["weights_file"] = wp.name
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load(path: str | Path) -> Graph:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise GraphFileError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphFileError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    weights: dict[str, np.ndarray] = {}
    if isinstance(doc, dict) and doc.get("weights_file"):
        wp = path.with_name(doc["weights_file"])
        try:
            with np.load(wp) as data:
                weights = {k: data[k] for k in data.files}
        except (OSError, ValueError) as e:
            raise GraphFileError(f"{wp}: cannot read weight data ({e})") from None
    return from_json(doc, weights, source=str(path))


def to_text(graph: Graph, max_nodes: int | None = None) -> str:
    """One line per node: `%3 = conv2d(%0, %1) stride=(2,2) ... : f32[1,64,112,112]`."""
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


def with_weights(graph: Graph, weights: dict[str, np.ndarray]) -> Graph:
    """The same graph with (more) weight data attached."""
    merged = dict(graph.weights)
    for k, v in weights.items():
        arr = np.asarray(v).copy()
        arr.setflags(write=False)
        merged[k] = arr
    out = Graph(graph.nodes, graph.outputs, MappingProxyType(merged), graph.name)
    out.lint()
    return out


__all__ = ["GraphFileError", "Node", "from_json", "load", "save", "to_json", "to_text",
           "with_weights"]
