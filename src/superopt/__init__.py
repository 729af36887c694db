"""superopt: find, prove and apply tensor-graph rewrites, and tune them with an ML compiler.

The package is layered (see DESIGN.md section 1): `superopt.ir` is the spine that every
other subsystem imports; heavy dependencies (torch, onnx, transformers) load lazily.
"""

__version__ = "0.1.0"
