"""The tensor-graph IR: op registry, graphs, interpreter and per-subsystem rule tables.

This package imports neither z3 nor torch (a test enforces it); every other subsystem
imports it.
"""

from superopt.ir import modp as _modp  # noqa: F401  (registers the "modp" semantics)
from superopt.ir import ops as _ops  # noqa: F401  (registers the op set)
from superopt.ir.errors import AttrError, IRError, LintError, ShapeError, UnknownOp
from superopt.ir.graph import Graph, GraphBuilder, Node, Value
from superopt.ir.interpret import FeedError, interpret, random_feeds
from superopt.ir.kernels import P
from superopt.ir.opdef import OPS, AttrSpec, OpDef, all_ops, get_op, register_op
from superopt.ir.passes import Origin, PassResult, compose, identity_origin, transform
from superopt.ir.rules import TABLES, MissingRule, RuleTable
from superopt.ir.serialize import GraphFileError, load, save, to_text
from superopt.ir.types import DType, TensorType

__all__ = [
    "OPS", "TABLES", "AttrError", "AttrSpec", "DType", "FeedError", "Graph", "GraphBuilder",
    "GraphFileError", "IRError", "LintError", "MissingRule", "Node", "OpDef", "Origin", "P",
    "PassResult", "RuleTable", "ShapeError", "TensorType", "UnknownOp", "Value", "all_ops",
    "compose", "get_op", "identity_origin", "interpret", "load", "random_feeds",
    "register_op", "save", "to_text", "transform",
]
