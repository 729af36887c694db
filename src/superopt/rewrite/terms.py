"""Rule terms evaluated many times: cached expressions, resolved attributes, built targets.

The rule model parses an expression on every evaluation, which is fine for a rule file and
too slow for a search that instantiates thousands of targets. Here each expression is
parsed and validated once (by the rule model's own `compile_expr`, so the language is the
same) and compiled to Python bytecode; results are memoised by the values of the variables
the expression reads. `build_target` is `superopt.substitutions.pattern.build` on top of
that.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import lru_cache
from types import CodeType
from typing import Any

from superopt.ir.graph import GraphBuilder, Value
from superopt.substitutions.pattern import (
    FUNCTIONS,
    AConst,
    AVar,
    Bindings,
    Pattern,
    PatternError,
    PNode,
    PVar,
    compile_expr,
)
from superopt.substitutions.rule import Rule

_PREFIX = "v_"  # how the rule model spells ?x in the Python it parses expressions into


@lru_cache(maxsize=4096)
def _compiled(text: str) -> tuple[CodeType, tuple[str, ...]]:
    tree = compile_expr(text)
    names = tuple(dict.fromkeys(n.id for n in ast.walk(tree)
                                if isinstance(n, ast.Name) and n.id.startswith(_PREFIX)))
    return compile(tree, "<pattern>", "eval"), names


_RESULTS: dict[tuple[Any, ...], Any] = {}
_MAX_RESULTS = 200_000


def evaluate(text: str, env: Mapping[str, Any]) -> Any:
    """`superopt.substitutions.pattern.eval_expr`, memoised."""
    code, names = _compiled(text)
    values = []
    for name in names:
        var = name[len(_PREFIX):]
        if var not in env:
            raise PatternError(f"expression {text!r}: variable ?{var} is not bound")
        values.append(env[var])
    key = (text, *values)
    try:
        return _RESULTS[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable value: evaluate without memoising
        key = ()
    scope = dict(FUNCTIONS)
    scope.update(zip(names, values, strict=True))
    try:
        value = eval(code, {"__builtins__": {}}, scope)
    except PatternError:
        raise
    except Exception as e:
        raise PatternError(f"expression {text!r} failed: {type(e).__name__}: {e}") from None
    value = tuple(value) if isinstance(value, list) else value
    if key:
        if len(_RESULTS) >= _MAX_RESULTS:
            _RESULTS.clear()
        _RESULTS[key] = value
    return value


def holds(rule: Rule, env: Mapping[str, Any]) -> bool:
    """`Rule.holds_condition` with `env` holding tensor types and attribute values."""
    return rule.condition is None or bool(evaluate(rule.condition, env))


def resolve(p: PNode, env: Mapping[str, Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a target node names, with variables and expressions evaluated."""
    out: dict[str, Any] = {}
    for k, a in p.attrs:
        if isinstance(a, AConst):
            out[k] = a.value
        elif isinstance(a, AVar):
            if a.name not in attrs:
                raise PatternError(f"{p.op}: attribute variable ?{a.name} is not bound")
            out[k] = attrs[a.name]
        else:
            out[k] = evaluate(a.text, env)
    return out


def build_target(p: Pattern, b: GraphBuilder, bind: Bindings) -> Value:
    """Add a pattern's nodes to `b` (hash-consed) and return the value it denotes."""
    env: dict[str, Any] = {k: b.type_of(v) for k, v in bind.tensors.items()}
    env.update(bind.attrs)

    def go(q: Pattern) -> Value:
        if isinstance(q, PVar):
            try:
                return bind.tensors[q.name]
            except KeyError:
                raise PatternError(f"tensor variable ?{q.name} is not bound") from None
        children = tuple(go(c) for c in q.children)
        outs = b.add(q.op, children, resolve(q, env, bind.attrs))
        if q.output >= len(outs):
            raise PatternError(f"{q.op}.{q.output}: the op has only {len(outs)} outputs")
        return outs[q.output]

    return go(p)
