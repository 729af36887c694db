"""The program onnxruntime makes of a model, as a digest: what a real target's measurement
compares, so that two graphs onnxruntime turns into one program are not timed apart.

Many of the rewrites a CPU tuner proposes are ones onnxruntime's own optimizer already
makes (a batch norm folded into the convolution before it, a bias add fused into a
matrix product, an attention scale folded into a MatMul): the candidate and the
incumbent then run the same kernels on the same shapes, and a paired measurement of them
(ResNeXt-50 at batch 16: 30 s) can only say noise. `program_digest` hashes the model
onnxruntime saves after its graph optimizations (`SessionOptions.optimized_model_filepath`)
from its inputs up: every node's op type, domain and attributes and the digests of its
inputs in order; an initializer counts by its type and shape, not its values (a kernel's
speed does not depend on them, and two folds of one batch norm round differently); node
and tensor names do not count. The model's digest is that of its outputs in order, so
nodes are free to come in any order.
"""

from __future__ import annotations

import hashlib
from typing import Any


def _h(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def _attribute(a: Any) -> object:
    """An attribute's value as the digest reads it (tensors by type and shape; a
    subgraph by its own digest)."""
    import onnx

    kind = a.type
    if kind == onnx.AttributeProto.TENSOR:
        return ("tensor", a.t.data_type, tuple(a.t.dims))
    if kind == onnx.AttributeProto.TENSORS:
        return ("tensors", tuple((t.data_type, tuple(t.dims)) for t in a.tensors))
    if kind == onnx.AttributeProto.GRAPH:
        return ("graph", graph_digest(a.g))
    if kind == onnx.AttributeProto.GRAPHS:
        return ("graphs", tuple(graph_digest(g) for g in a.graphs))
    value = onnx.helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, list):
        return tuple(v.decode(errors="replace") if isinstance(v, bytes) else v for v in value)
    return value


def graph_digest(g: Any) -> str:
    """The digest of an ONNX GraphProto (module docstring)."""
    known: dict[str, str] = {}
    for i, value in enumerate(g.input):
        t = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param
                     for d in t.shape.dim)
        known[value.name] = _h("input", i, t.elem_type, dims)
    for init in g.initializer:
        known[init.name] = _h("initializer", init.data_type, tuple(init.dims))
    for init in g.sparse_initializer:
        known[init.values.name] = _h("sparse", init.values.data_type, tuple(init.dims))
    made = {out for node in g.node for out in node.output if out}
    pending = list(g.node)
    while pending:
        left = []
        for node in pending:
            ins = [known.get(x, "outer:" + x) if x else "" for x in node.input]
            # An input a node of this graph makes: wait for it. One nothing here makes is
            # a subgraph reading its parent's values, kept by name.
            if any(x in made and x not in known for x in node.input):
                left.append(node)
                continue
            attrs = tuple(sorted((a.name, _attribute(a)) for a in node.attribute))
            mine = _h(node.domain or "ai.onnx", node.op_type, attrs, tuple(ins))
            for k, out in enumerate(node.output):
                if out:
                    known[out] = _h(mine, k)
        if len(left) == len(pending):
            raise ValueError("the optimized model's graph has a cycle")
        pending = left
    return _h("graph", tuple(known.get(o.name, "missing:" + o.name) for o in g.output))


def model_digest(path: str) -> str:
    """The digest of the ONNX model file `path` (its initializers' values are not read:
    a model with external data is digested without loading them)."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    return graph_digest(model.graph)


def program_digest(session_options: Any, source: bytes | str, providers: list[str],
                   folder: str) -> tuple[Any, str | None]:
    """A session of `source` (model bytes or a path) made with `session_options`, and
    the digest of the program onnxruntime made of it (None where it could not save it).
    The optimized model is written in `folder` and read back; the session is an ordinary
    one, so making it once serves both the digest and the measurements."""
    import os

    import onnxruntime as ort

    path = os.path.join(folder, "optimized.onnx")
    session_options.optimized_model_filepath = path
    # Saving after the layout transformer warns that the model fits this machine only:
    # it is read here, on this machine, and never run.
    session_options.log_severity_level = max(session_options.log_severity_level, 3)
    # The weights go to a file beside it, so reading the model back parses the graph only.
    session_options.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", "weights.bin")
    session_options.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    try:
        sess = ort.InferenceSession(source, session_options, providers=providers)
    except Exception:
        # The model could not be saved (a provider's compiled nodes, a folder that went
        # away): made again without saving, the digest unknown. A model onnxruntime
        # cannot load fails again here, with its own error.
        session_options.optimized_model_filepath = ""
        return ort.InferenceSession(source, session_options, providers=providers), None
    try:
        digest = model_digest(path)
    except (OSError, ValueError):  # not written
        digest = None
    finally:
        for name in os.listdir(folder):
            os.remove(os.path.join(folder, name))
    return sess, digest


__all__ = ["graph_digest", "model_digest", "program_digest"]
