"""superopt: find, prove and apply tensor-graph rewrites, and tune them with an ML compiler.

The package is layered (docs/architecture.md): `superopt.ir` is the spine that every other
subsystem imports; heavy dependencies (torch, z3, onnx, transformers) load lazily. The
Python API (`superopt.api`) is here at the top: `load`, `optimize`, `verify`, `generate`,
`tune` and `export`.
"""

from superopt.api import export, generate, load, optimize, tune, verify

__version__ = "0.1.0"

__all__ = ["__version__", "export", "generate", "load", "optimize", "tune", "verify"]
