"""The text rule format (DESIGN.md section 4), read and written exactly.

One rule per line::

    name: (matmul ?x (concat 1 ?y ?z)) => (concat 1 (matmul ?x ?y) (matmul ?x ?z))
    both: (ewadd ?x ?y) <=> (ewadd ?y ?x)
    merge: (matmul ?x ?y) ; (matmul ?x ?z) => (split.0 1 {[dim(?y,1), dim(?z,1)]} T) ; ...
    cond: (concat ?a ?x ?y) => ... if rank(?x) == 2

Attributes come first in a term, positionally in the op's attribute order or as
`name=value`; values are ints, floats, identifiers, `true`/`false`, lists `[1,1]`,
attribute variables `?k` (positional ones only for ops of fixed arity) and computed
`{expressions}`. `;` separates the outputs of multi-output rules, `#` starts a comment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.files import MAX_NESTING, nesting_error
from superopt.ir.opdef import VARIADIC, get_op
from superopt.substitutions.pattern import (
    AConst,
    AExpr,
    AttrPat,
    AVar,
    Pattern,
    PNode,
    PVar,
    check_ops,
    compile_expr,
)
from superopt.substitutions.rule import Rule


class RuleSyntaxError(IRError):
    def __init__(self, source: str, line: int, col: int, msg: str) -> None:
        super().__init__(f"{source}:{line}:{col}: {msg}")
        self.source, self.line, self.col, self.msg = source, line, col, msg


class RuleSemanticError(RuleSyntaxError):
    """A rule that parses but means nothing: an input on one side only, an unknown op,
    shapes that cannot be made consistent. A strict reader stops at it like at a syntax
    error; a lenient one (`problems=`) records it and goes on with the next rule."""

    def __init__(self, source: str, line: int, col: int, msg: str, name: str = "") -> None:
        super().__init__(source, line, col, msg)
        self.name = name


@dataclass(frozen=True)
class Tok:
    kind: str  # ( ) [ ] , = var num ident expr
    text: str
    col: int  # 1-based column in the line


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<punct>[()\[\],=])
  | (?P<var>\?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
""", re.VERBOSE)


class _Parser:
    def __init__(self, text: str, source: str, line: int, offset: int) -> None:
        self.source, self.line, self.offset = source, line, offset
        self.toks = self._lex(text)
        self.i = 0

    def error(self, col: int, msg: str) -> RuleSyntaxError:
        return RuleSyntaxError(self.source, self.line, col + self.offset, msg)

    def _lex(self, text: str) -> list[Tok]:
        toks: list[Tok] = []
        pos = 0
        while pos < len(text):
            if text[pos] == "{":
                depth, end = 0, pos
                while end < len(text):
                    depth += {"{": 1, "}": -1}.get(text[end], 0)
                    if depth == 0:
                        break
                    end += 1
                if depth:
                    raise self.error(pos + 1, "unclosed '{'")
                toks.append(Tok("expr", text[pos + 1:end].strip(), pos + 1))
                pos = end + 1
                continue
            m = _TOKEN.match(text, pos)
            if not m:
                raise self.error(pos + 1, f"unexpected character {text[pos]!r}")
            kind = m.lastgroup or ""
            if kind != "ws":
                toks.append(Tok(m.group() if kind == "punct" else kind, m.group(), pos + 1))
            pos = m.end()
        return toks

    def peek(self) -> Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self, what: str) -> Tok:
        t = self.peek()
        if t is None:
            end = self.toks[-1].col + len(self.toks[-1].text) if self.toks else 1
            raise self.error(end, f"expected {what}, found end of input")
        self.i += 1
        return t

    def expect(self, kind: str, what: str) -> Tok:
        t = self.next(what)
        if t.kind != kind:
            raise self.error(t.col, f"expected {what}, found {t.text!r}")
        return t

    def done(self) -> None:
        t = self.peek()
        if t is not None:
            raise self.error(t.col, f"unexpected {t.text!r} after the term")

    def term(self, depth: int = 1) -> Pattern:
        t = self.next("a term")
        if t.kind == "var":
            return PVar(t.text[1:])
        if t.kind != "(":
            raise self.error(t.col, f"expected '(' or a ?variable, found {t.text!r}")
        if depth > MAX_NESTING:
            raise self.error(t.col, f"term {nesting_error(depth)}")
        head = self.expect("ident", "an op name")
        op_name, _, out = head.text.partition(".")
        try:
            op = get_op(op_name)
        except IRError as e:
            raise self.error(head.col, str(e)) from None
        if out and not out.isdigit():
            raise self.error(head.col, f"bad output index in {head.text!r}")
        items: list[tuple[Tok, Any]] = []  # (token, Pattern | AttrPat | ('kw', name, AttrPat))
        while True:
            t = self.peek()
            if t is None:
                raise self.error(head.col, f"unclosed '(' of {head.text}")
            if t.kind == ")":
                self.i += 1
                break
            if t.kind == "ident" and self.i + 1 < len(self.toks) and self.toks[self.i + 1].kind == "=":
                self.i += 2
                items.append((t, ("kw", t.text, self.attr_value())))
            elif t.kind == "(":
                items.append((t, self.term(depth + 1)))
            elif t.kind == "var":
                self.i += 1
                items.append((t, t))
            else:
                items.append((t, self.attr_value()))
        return self._assemble(op, head, items, int(out or 0))

    def _assemble(self, op: Any, head: Tok, items: list[tuple[Tok, Any]], out: int) -> PNode:
        fixed = op.num_inputs != VARIADIC
        n_children = op.num_inputs if fixed else None
        positional: list[tuple[Tok, Any]] = []
        keywords: dict[str, AttrPat] = {}
        children: list[Pattern] = []
        if fixed:
            # The last `arity` items are children; earlier vars are attribute variables.
            plain = [it for it in items if not (isinstance(it[1], tuple) and it[1][0] == "kw")]
            split = len(plain) - (n_children or 0)
            if split < 0:
                raise self.error(head.col, f"{op.name} takes {n_children} inputs, found {len(plain)}")
            attr_items, child_items = plain[:split], plain[split:]
        else:
            attr_items, child_items = [], []
            for it in items:
                if isinstance(it[1], tuple) and it[1][0] == "kw":
                    continue
                if child_items or isinstance(it[1], Tok | PNode | PVar):
                    child_items.append(it)
                else:
                    attr_items.append(it)
        for tok, val in attr_items:
            positional.append((tok, AVar(val.text[1:]) if isinstance(val, Tok) else val))
        for tok, val in child_items:
            if isinstance(val, Tok):
                children.append(PVar(val.text[1:]))
            elif isinstance(val, PNode | PVar):
                children.append(val)
            else:
                raise self.error(tok.col, f"{op.name}: attribute value {tok.text!r} after an input")
        for tok, val in items:
            if isinstance(val, tuple) and val[0] == "kw":
                if val[1] in keywords:
                    raise self.error(tok.col, f"{op.name}: attribute {val[1]!r} given twice")
                keywords[val[1]] = val[2]
        if not fixed and len(children) < op.min_inputs:
            raise self.error(head.col, f"{op.name} needs at least {op.min_inputs} inputs")
        names = [a.name for a in op.attrs]
        if len(positional) > len(names):
            raise self.error(positional[len(names)][0].col,
                             f"{op.name} has only {len(names)} attributes ({', '.join(names)})")
        attrs: dict[str, AttrPat] = {}
        for (_tok, val), name in zip(positional, names, strict=False):
            attrs[name] = val
        for name, val in keywords.items():
            if name not in names:
                raise self.error(head.col, f"{op.name} has no attribute {name!r}; "
                                           f"known: {', '.join(names) or 'none'}")
            if name in attrs:
                raise self.error(head.col, f"{op.name}: attribute {name!r} given twice")
            attrs[name] = val
        for name, val in attrs.items():
            if isinstance(val, AConst):
                try:
                    op.attr_spec(name).validate(op.name, val.value)
                except IRError as e:
                    raise self.error(head.col, str(e)) from None
        node = PNode(op.name, tuple(sorted(attrs.items())), tuple(children), out)
        if out and not callable(op.num_outputs) and out >= op.num_outputs:
            raise self.error(head.col, f"{op.name} has {op.num_outputs} output(s), not {out + 1}")
        return node

    def attr_value(self) -> AttrPat:
        t = self.next("an attribute value")
        if t.kind == "var":
            return AVar(t.text[1:])
        if t.kind == "expr":
            try:
                compile_expr(t.text)
            except IRError as e:
                raise self.error(t.col, str(e)) from None
            return AExpr(t.text)
        return AConst(self._const(t))

    def _const(self, t: Tok, depth: int = 1) -> Any:
        if depth > MAX_NESTING:
            raise self.error(t.col, f"attribute value {nesting_error(depth)}")
        if t.kind == "num":
            return float(t.text) if any(c in t.text for c in ".eE") else int(t.text)
        if t.kind == "ident":
            return {"true": True, "false": False}.get(t.text, t.text)
        if t.kind == "[":
            vals: list[Any] = []
            while True:
                nxt = self.next("']'")
                if nxt.kind == "]":
                    return tuple(vals)
                if nxt.kind == ",":
                    continue
                vals.append(self._const(nxt, depth + 1))
        raise self.error(t.col, f"expected an attribute value, found {t.text!r}")


def _top_level_split(text: str, sep: str) -> list[tuple[str, int]]:
    """Split at `sep` outside brackets; return (piece, offset) pairs."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append((text[start:i], start))
            i += len(sep)
            start = i
            continue
        i += 1
    out.append((text[start:], start))
    return out


_NAME = re.compile(r"\s*([A-Za-z_][\w.\-~]*)\s*:(?!=)")


def parse_rule(line: str, source: str = "<rules>", lineno: int = 1) -> Rule:
    """Parse one rule line (without a trailing comment)."""
    m = _NAME.match(line)
    if m:
        name, body, base = m.group(1), line[m.end():], m.end()
    else:
        name, body, base = f"rule{lineno}", line, 0
    for arrow in ("<=>", "=>"):
        parts = _top_level_split(body, arrow)
        if len(parts) == 2:
            break
        if len(parts) > 2:
            raise RuleSyntaxError(source, lineno, base + parts[2][1] - len(arrow) + 1,
                                  f"more than one '{arrow}'")
    else:
        raise RuleSyntaxError(source, lineno, base + 1, "expected 'source => target'")
    bidirectional = arrow == "<=>"
    (lhs, lhs_off), (rhs_all, rhs_off) = parts
    cond_parts = _top_level_split(rhs_all, " if ")
    rhs, condition = cond_parts[0][0], None
    if len(cond_parts) > 1:
        condition = rhs_all[cond_parts[1][1]:].strip()
        try:
            compile_expr(condition)
        except IRError as e:
            raise RuleSyntaxError(source, lineno, base + rhs_off + cond_parts[1][1] + 1,
                                  str(e)) from None

    def side(text: str, off: int) -> tuple[Pattern, ...]:
        pats = []
        for piece, poff in _top_level_split(text, ";"):
            if not piece.strip():
                raise RuleSyntaxError(source, lineno, base + off + poff + 1, "empty term")
            p = _Parser(piece, source, lineno, base + off + poff)
            pats.append(p.term())
            p.done()
        return tuple(pats)

    src, tgt = side(lhs, lhs_off), side(rhs, rhs_off)
    if len(src) != len(tgt):
        raise RuleSyntaxError(source, lineno, base + 1,
                              f"{len(src)} source outputs but {len(tgt)} target outputs")
    try:
        rule = Rule(name, src, tgt, condition, bidirectional, kind="manual")
        for p in (*src, *tgt):
            check_ops(p)
    except IRError as e:
        raise RuleSemanticError(source, lineno, base + 1, str(e), name) from None
    return rule


def strip_comment(line: str) -> str:
    depth = 0
    for i, c in enumerate(line):
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == "#" and depth == 0:
            return line[:i]
    return line


def parse_rules(text: str, source: str = "<rules>",
                problems: list[RuleSemanticError] | None = None) -> list[Rule]:
    """All rules of a text, or a RuleSyntaxError for the first bad line (nothing partial).

    With `problems`, a rule that parses but is meaningless (RuleSemanticError) is
    appended there and the other rules are still read; syntax errors always stop."""
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = strip_comment(raw)
        if not line.strip():
            continue
        try:
            rule = parse_rule(line, source, lineno)
        except RuleSemanticError as err:
            if problems is None:
                raise
            problems.append(err)
            continue
        if rule.name in seen:
            raise RuleSyntaxError(source, lineno, 1, f"rule name {rule.name!r} already used on "
                                                     f"line {seen[rule.name]}")
        seen[rule.name] = lineno
        rules.append(rule)
    return rules


def read_rules(path: str | Path) -> list[Rule]:
    from superopt.ir.files import read_text

    return parse_rules(read_text(path, RuleFileReadError), str(path))


class RuleFileReadError(IRError):
    """A rule text file that cannot be read or is not UTF-8 text."""


# ---- printing -----------------------------------------------------------------------

def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "[" + ",".join(format_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def format_attr(a: AttrPat) -> str:
    if isinstance(a, AVar):
        return f"?{a.name}"
    if isinstance(a, AExpr):
        return "{" + a.text + "}"
    return format_value(a.value)


def format_pattern(p: Pattern) -> str:
    if isinstance(p, PVar):
        return f"?{p.name}"
    op = get_op(p.op)
    order = [a.name for a in op.attrs]
    named = dict(p.attrs)
    prefix = order[:len(named)]
    fixed = op.num_inputs != VARIADIC
    positional = set(named) == set(prefix) and (
        fixed or not any(isinstance(a, AVar) for a in named.values()))
    multi = callable(op.num_outputs) or op.num_outputs > 1
    parts = [p.op + (f".{p.output}" if p.output or multi else "")]
    if positional:
        parts += [format_attr(named[k]) for k in prefix]
    else:
        parts += [f"{k}={format_attr(named[k])}" for k in order if k in named]
    parts += [format_pattern(c) for c in p.children]
    return "(" + " ".join(parts) + ")"


def format_rule(rule: Rule) -> str:
    lhs = " ; ".join(format_pattern(p) for p in rule.source)
    rhs = " ; ".join(format_pattern(p) for p in rule.target)
    arrow = "<=>" if rule.bidirectional else "=>"
    cond = f" if {rule.condition}" if rule.condition else ""
    return f"{rule.name}: {lhs} {arrow} {rhs}{cond}"


def format_rules(rules: Iterable[Rule]) -> str:
    return "".join(format_rule(r) + "\n" for r in rules)
