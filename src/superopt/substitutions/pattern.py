"""Patterns: the terms on either side of a substitution rule.

A pattern is a tree of op nodes over tensor variables (`?x`). Attribute values are
constants, attribute variables (`?k`) bound by matching, or expressions (`{dim(?x, 0)}`)
evaluated from the bindings when the target is built. Attributes a pattern does not name
take the op's default value. `split.1` names output 1 of a multi-output op.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import CodeType
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.files import MAX_NESTING, nesting_error
from superopt.ir.graph import GraphBuilder, Value
from superopt.ir.opdef import get_op
from superopt.ir.types import TensorType


class PatternError(IRError):
    """A pattern that cannot be built or evaluated (unbound variable, bad expression)."""


@dataclass(frozen=True, slots=True)
class AConst:
    value: Any


@dataclass(frozen=True, slots=True)
class AVar:
    name: str  # without the leading '?'


@dataclass(frozen=True, slots=True)
class AExpr:
    text: str  # a condition-language expression, e.g. "(dim(?a, 1), dim(?b, 1))"


AttrPat = AConst | AVar | AExpr


@dataclass(frozen=True, slots=True)
class PVar:
    """A tensor variable."""

    name: str  # without the leading '?'


@dataclass(frozen=True, slots=True)
class PNode:
    op: str
    attrs: tuple[tuple[str, AttrPat], ...]  # only the attributes the pattern names, sorted
    children: tuple[Pattern, ...]
    output: int = 0

    def attr(self, name: str) -> AttrPat | None:
        for k, v in self.attrs:
            if k == name:
                return v
        return None


Pattern = PVar | PNode


def walk(p: Pattern) -> Iterator[Pattern]:
    yield p
    if isinstance(p, PNode):
        for c in p.children:
            yield from walk(c)


def tensor_vars(p: Pattern) -> list[str]:
    """Tensor variables in first-occurrence order."""
    return list(dict.fromkeys(q.name for q in walk(p) if isinstance(q, PVar)))


def attr_vars(p: Pattern) -> list[str]:
    out: list[str] = []
    for q in walk(p):
        if isinstance(q, PNode):
            for _, a in q.attrs:
                if isinstance(a, AVar):
                    out.append(a.name)
                elif isinstance(a, AExpr):
                    out.extend(expr_vars(a.text))
    return list(dict.fromkeys(out))


def op_count(p: Pattern) -> int:
    return sum(1 for q in walk(p) if isinstance(q, PNode))


# ---- the expression language of conditions and computed attributes ------------------

_ALLOWED = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
            ast.BinOp, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Compare, ast.Eq,
            ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.In, ast.NotIn, ast.Call, ast.Name,
            ast.Load, ast.Constant, ast.Tuple, ast.List, ast.Subscript, ast.IfExp)


def _shape(t: Any) -> tuple[int, ...]:
    if not isinstance(t, TensorType):
        raise PatternError(f"expected a tensor variable, found {t!r}")
    return t.shape


FUNCTIONS: dict[str, Any] = {
    "rank": lambda t: len(_shape(t)),
    "dim": lambda t, i: _shape(t)[i],
    "shape": lambda t: _shape(t),
    "size": lambda t: math.prod(_shape(t)),
    "len": len,
    "min": min,
    "max": max,
    "sum": sum,
    "tuple": tuple,
    # 1/sqrt(n) computed as attention resolves its default scale, so a condition
    # `?s == rsqrt(dim(?q,-1))` recognises that scale exactly (for every head dim).
    "rsqrt": lambda n: 1.0 / math.sqrt(n),
}


def _to_python(text: str) -> str:
    return text.replace("?", "v_")


def compile_expr(text: str) -> ast.Expression:
    """Parse an expression; only arithmetic, comparisons, booleans and FUNCTIONS."""
    try:
        tree = ast.parse(_to_python(text), mode="eval")
        depth = _ast_depth(tree)
    except SyntaxError as e:
        raise PatternError(f"bad expression {_short(text)!r}: {e.msg}") from None
    except (RecursionError, MemoryError):
        # `not not not ...` or `1+1+...` thousands long: the parser's own stack runs out.
        raise PatternError(f"bad expression {_short(text)!r}: nested too deeply") from None
    if depth > MAX_NESTING:
        # Compiling and evaluating recurse over the tree as deep as it is.
        raise PatternError(f"bad expression {_short(text)!r}: {nesting_error(depth)}")
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise PatternError(f"bad expression {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                               and node.func.id in FUNCTIONS):
            raise PatternError(f"bad expression {text!r}: unknown function")
        if isinstance(node, ast.Name) and not (node.id.startswith("v_") or node.id in FUNCTIONS):
            raise PatternError(f"bad expression {text!r}: unknown name {node.id!r}")
    return tree


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _ast_depth(tree: ast.AST) -> int:
    """The tree's depth, without recursion (a left-leaning `1+1+...` is as deep as long)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))
    return deepest


@functools.lru_cache(maxsize=8192)
def _compiled(text: str) -> tuple[CodeType, tuple[str, ...]]:
    """The checked expression's code and its variables. Building a rule's sides evaluates
    the same few expressions at every instance (the sampler builds thousands), and parsing
    and checking them again each time was most of that cost; failures are not cached."""
    tree = compile_expr(text)
    names = tuple(dict.fromkeys(n.id[2:] for n in ast.walk(tree)
                                if isinstance(n, ast.Name) and n.id.startswith("v_")))
    return compile(tree, "<pattern>", "eval"), names


def expr_vars(text: str) -> list[str]:
    return list(_compiled(text)[1])


def eval_expr(text: str, env: Mapping[str, Any]) -> Any:
    """Evaluate with `env` mapping variable names (no '?') to TensorTypes or attributes."""
    code, names = _compiled(text)
    scope = dict(FUNCTIONS)
    for name in names:
        if name not in env:
            raise PatternError(f"expression {text!r}: variable ?{name} is not bound")
        scope[f"v_{name}"] = env[name]
    try:
        value = eval(code, {"__builtins__": {}}, scope)
    except PatternError:
        raise
    except Exception as e:
        raise PatternError(f"expression {text!r} failed: {type(e).__name__}: {e}") from None
    return tuple(value) if isinstance(value, list) else value


# ---- building a pattern into a graph -----------------------------------------------

@dataclass(frozen=True)
class Bindings:
    tensors: Mapping[str, Value]
    attrs: Mapping[str, Any]


def resolve_attrs(p: PNode, b: GraphBuilder, bind: Bindings) -> dict[str, Any]:
    env: dict[str, Any] = {k: b.type_of(v) for k, v in bind.tensors.items()}
    env.update(bind.attrs)
    out: dict[str, Any] = {}
    for k, a in p.attrs:
        if isinstance(a, AConst):
            out[k] = a.value
        elif isinstance(a, AVar):
            if a.name not in bind.attrs:
                raise PatternError(f"{p.op}: attribute variable ?{a.name} is not bound")
            out[k] = bind.attrs[a.name]
        else:
            out[k] = eval_expr(a.text, env)
    return out


def build(p: Pattern, b: GraphBuilder, bind: Bindings) -> Value:
    """Add the pattern's nodes to `b` (hash-consed) and return the value it denotes."""
    if isinstance(p, PVar):
        try:
            return bind.tensors[p.name]
        except KeyError:
            raise PatternError(f"tensor variable ?{p.name} is not bound") from None
    children = tuple(build(c, b, bind) for c in p.children)
    outs = b.add(p.op, children, resolve_attrs(p, b, bind))
    if p.output >= len(outs):
        raise PatternError(f"{p.op}.{p.output}: the op has only {len(outs)} outputs")
    return outs[p.output]


def check_ops(p: Pattern) -> None:
    """Every op named exists and every attribute named is one of its attributes."""
    for q in walk(p):
        if isinstance(q, PNode):
            op = get_op(q.op)
            for k, _ in q.attrs:
                op.attr_spec(k)
