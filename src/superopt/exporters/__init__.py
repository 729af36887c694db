"""Exporters: the importers' inverse, so an optimized or tuned graph goes back to a runtime.

- `superopt.exporters.onnx`: any graph as an ONNX model (weights as initializers);
- `superopt.exporters.torch`: any graph as a `torch.fx.GraphModule` (weights as buffers).

Both load their framework lazily; `export(graph, path)` picks the format by suffix.
"""

from __future__ import annotations

from pathlib import Path

from superopt.ir.graph import Graph

# Suffix -> format. `.json` is our own graph file (superopt.ir.serialize).
FORMATS: dict[str, str] = {".onnx": "onnx", ".json": "json", ".pt": "torch"}


def export(graph: Graph, path: str | Path, opset: int | None = None, seed: int = 0) -> Path:
    """Write `graph` to `path` in the format its suffix names (.onnx, .json or .pt).

    ONNX and torch files hold every weight's values: a weight without data gets the value
    the reference interpreter draws for it at `seed` (a JSON file leaves it undrawn).
    """
    path = Path(path)
    fmt = FORMATS.get(path.suffix)
    if fmt is None:
        raise ValueError(f"{path}: unknown export format {path.suffix!r}; expected one of "
                         f"{', '.join(sorted(FORMATS))}")
    if fmt == "onnx":
        from superopt.exporters.onnx import save_onnx

        save_onnx(graph, path, opset=opset, seed=seed)
    elif fmt == "torch":
        import torch

        from superopt.exporters.torch import to_module

        torch.save(to_module(graph, seed=seed), path)
    else:
        from superopt.ir.serialize import save

        save(graph, path)
    return path


__all__ = ["FORMATS", "export"]
