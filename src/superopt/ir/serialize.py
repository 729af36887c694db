"""Graph files: versioned JSON (weights in a side .npz) and a readable text form.

`to_text` (the text form) is defined with `Graph` in `graph`, whose `str` it is, and
named here too; this module imports `graph`, never the other way round.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.ir.files import (
    atomic_path,
    atomic_write_text,
    json_too_deep,
    nesting_error,
    read_text,
    sibling,
)
from superopt.ir.graph import Graph, GraphBuilder, Node, Value, to_text

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
    where = "graph"  # what was being read, for the error message
    try:
        if not isinstance(doc["nodes"], list) or not isinstance(doc["outputs"], list):
            raise fail("\"nodes\" and \"outputs\" must be lists")
        for k, nd in enumerate(doc["nodes"]):
            where = f"node {k}"
            if not isinstance(nd, dict) or not isinstance(nd.get("attrs", {}), dict):
                raise fail(f"node {k}: expected an object with an \"attrs\" object")
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
        where = "outputs"
        outputs = [Value(ids[i], j) for i, j in doc["outputs"]]
        if not outputs:
            raise fail("the graph has no outputs")
        graph = b.build(outputs)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise fail(f"{where}: malformed ({type(e).__name__}: {e})") from None
    except GraphFileError:
        raise
    except IRError as e:
        raise fail(f"{where}: {e}") from None
    missing = set(weights) - set(graph.weights)
    if missing:
        raise fail(f"weight data for unknown weights: {sorted(missing)[:5]}")
    return graph


def weights_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + ".weights.npz")


def save(graph: Graph, path: str | Path) -> Path:
    """Write `path` (JSON) and, when the graph carries weight data, `<stem>.weights.npz`.
    Each file appears whole or not at all (an interrupted save leaves no partial file)."""
    path = Path(path)
    doc = to_json(graph)
    if graph.weights:
        wp = weights_path(path)
        with atomic_path(wp) as tmp, tmp.open("wb") as f:
            np.savez(f, **{k: np.asarray(v) for k, v in graph.weights.items()})
        doc["weights_file"] = wp.name
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return path


def _parse_constant(name: str) -> float:
    # json accepts NaN and Infinity, which no graph field may hold.
    raise ValueError(f"{name} is not a valid JSON number")


def load(path: str | Path) -> Graph:
    path = Path(path)
    text = read_text(path, GraphFileError)
    deep = json_too_deep(text)
    if deep is not None:
        raise GraphFileError(f"{path}:{deep[0]}:{deep[1]}: invalid JSON: "
                             f"{nesting_error(deep[2])}")
    try:
        doc = json.loads(text, parse_constant=_parse_constant)
    except json.JSONDecodeError as e:
        raise GraphFileError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        # int() of a 5000-digit number, NaN, or nesting deeper than the parser's stack.
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise GraphFileError(f"{path}: invalid JSON: {what}") from None
    weights: dict[str, np.ndarray] = {}
    if isinstance(doc, dict) and doc.get("weights_file") is not None:
        wp = sibling(path, doc["weights_file"], "weights_file", GraphFileError)
        weights = _load_weights(wp)
    return from_json(doc, weights, source=str(path))


def _load_weights(wp: Path) -> dict[str, np.ndarray]:
    import zipfile
    import zlib

    weights: dict[str, np.ndarray] = {}
    try:
        # allow_pickle=False: a weights file must never run code.
        data = np.load(wp, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise GraphFileError(f"{wp}: not an .npz archive of named arrays")
        with data:
            for k in data.files:
                arr = data[k]
                if arr.dtype.kind not in "biuf":
                    raise GraphFileError(f"{wp}: weight {k!r}: {arr.dtype} data, expected "
                                         "numbers")
                weights[k] = arr
    except GraphFileError:
        raise
    except FileNotFoundError:
        raise GraphFileError(f"{wp}: weight data file not found") from None
    except IsADirectoryError:
        raise GraphFileError(f"{wp}: is a directory, not a weight data file") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error,
            RuntimeError) as e:  # zipfile: NotImplementedError for flags it lacks, ...
        raise GraphFileError(f"{wp}: corrupt or truncated weight data "
                             f"({type(e).__name__}: {e})") from None
    except MemoryError:
        raise GraphFileError(f"{wp}: weight data too large for memory") from None
    return weights


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
