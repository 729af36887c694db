"""Readers for published rule files: Tensat's two formats and TASO's `graph_subst.pb`.

- Tensat equations (TASO's verifier dialect), `lhs==rhs`, several possibly run together
  with no separator: `conv2d(1,1,0,2,input_7,input_10)`, `concat(ax,A,B)` or
  `concat(ax,ndim,A,B)`, `split_0(ax,X)` or `split_0(split(ax,X))`, `poolavg(kh,kw,sh,sw,
  pad,X)`, `enlarge(kh,kw,X)`, `smul(X,s)` / `scalar_mul(X,s)`, `matmul(A,B)` or
  `matmul(act,A,B)`, constants `Cpool(kh,kw)` / `const_pool(kh,kw)`, `Iconv(kh,kw)`,
  `Imatmul`, `Iewmul`.
- Tensat's optimizer s-expressions, one rule per line: `(matmul 0 ?input_1 ?input_4)=>(...)`;
  in a multi-output file two consecutive lines are one two-output rule.
- TASO's binary `graph_subst.pb` (see `taso_pb.py`).

TASO's codes: padding 0 = same, 1 = valid; activation 0 none, 1 sigmoid, 2 relu, 3 tanh.
Shape-dependent attributes these files leave out (a conv's groups, a split's sizes, the
size of a constant) become expressions over the variables (`symshape.py`). Variables
`input_1`..`input_20` follow TASO's generator numbering; when a rule uses only those, its
provenance records TASO's shapes for them (`taso_types`), which a tester can instantiate.

`read_any(path)` picks the reader from the extension and content, also for this
project's own text and JSON formats. Errors name the file, line and column (or the rule
index) and the problem; nothing is returned half-read.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.files import MAX_NESTING, decode, nesting_error, read_bytes
from superopt.substitutions.conditions import add_conditions, rank_conditions
from superopt.substitutions.library import LibraryError, load_library
from superopt.substitutions.presets import TASO_INPUTS
from superopt.substitutions.rule import Rule
from superopt.substitutions.symshape import (
    Ref,
    RuleSpec,
    Side,
    SNode,
    build_rule,
    infer_ranks,
    side_vars,
)
from superopt.substitutions.taso_pb import (
    ACTI,
    OP,
    OP_TYPES,
    PADDING,
    PbOperator,
    PbRule,
    TasoPbError,
    TasoPbTooDeep,
    decode_rules,
    perm_decode,
)
from superopt.substitutions.text import (
    RuleSemanticError,
    RuleSyntaxError,
    format_rule,
    parse_rules,
)


class RuleFileError(IRError):
    """A rule file of an unknown or unreadable format."""


@dataclass(frozen=True)
class RuleProblem:
    """A rule of a file that was read but cannot be used: where it is (file:line:col, or
    file: rule N for TASO's .pb), its name where known, and why. `unsupported`: an op or
    parameter outside what this project supports (rather than a meaningless rule)."""

    location: str
    name: str
    reason: str
    unsupported: bool = False


Problems = list[RuleProblem]


def _problem_of(err: RuleSyntaxError, name: str = "") -> RuleProblem:
    return RuleProblem(f"{err.source}:{err.line}:{err.col}", getattr(err, "name", "") or name,
                       err.msg, "unsupported" in err.msg)


# ---- a small term language shared by both Tensat formats ----------------------------

@dataclass(frozen=True)
class Term:
    kind: str  # "var", "num", "sym", "app"
    name: str
    args: tuple[Term, ...] = ()
    line: int = 1
    col: int = 1

    @property
    def value(self) -> int:
        return int(self.name)


_CONSTS = {"Imatmul": "const_imm", "const_imm": "const_imm", "Iewmul": "const_one",
           "const_one": "const_one"}
# Ops of Tensat's language (its model.rs) that the reader has no superopt op for.
_TENSAT_ONLY = frozenset({"dropout", "merge", "reshape", "noop", "batchnorm", "concat3",
                          "concat4", "concat5"})


class _Lexer:
    def __init__(self, text: str, source: str, line: int = 1, sexpr: bool = False) -> None:
        self.text, self.source, self.sexpr = text, source, sexpr
        self.pos, self.line, self.line_start = 0, line, 0
        self.toks: list[tuple[str, str, int, int]] = []
        pat = (r"\s+|\?[A-Za-z_][A-Za-z0-9_]*|-?[A-Za-z0-9_.]+|<=>|=>|==|[(),]" if sexpr
               else r"\s+|[A-Za-z0-9_]+|==|[(),]")
        rx = re.compile(pat)
        while self.pos < len(text):
            m = rx.match(text, self.pos)
            col = self.pos - self.line_start + 1
            if not m:
                raise RuleSyntaxError(source, self.line, col,
                                      f"unexpected character {text[self.pos]!r}")
            tok = m.group()
            if tok.isspace():
                for k, ch in enumerate(tok):
                    if ch == "\n":
                        self.line += 1
                        self.line_start = self.pos + k + 1
            else:
                self.toks.append((tok, tok, self.line, col))
            self.pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next(self, what: str) -> tuple[str, str, int, int]:
        t = self.peek()
        if t is None:
            last = self.toks[-1] if self.toks else ("", "", self.line, 1)
            raise RuleSyntaxError(self.source, last[2], last[3] + len(last[1]),
                                  f"expected {what}, found end of input")
        self.i += 1
        return t

    def error(self, tok: tuple[str, str, int, int], msg: str) -> RuleSyntaxError:
        return RuleSyntaxError(self.source, tok[2], tok[3], msg)


def _atom(tok: tuple[str, str, int, int]) -> Term:
    text, _, line, col = tok
    if text.startswith("?"):
        return Term("var", text[1:], line=line, col=col)
    if re.fullmatch(r"-?\d+", text):
        return Term("num", text, line=line, col=col)
    return Term("sym", text, line=line, col=col)


def _parse_call(lx: _Lexer, depth: int = 1) -> Term:
    """name | name(args) (equations)."""
    tok = lx.next("an expression")
    if tok[0] in "(),=":
        raise lx.error(tok, f"expected an expression, found {tok[0]!r}")
    nxt = lx.peek()
    if nxt is None or nxt[0] != "(":
        t = _atom(tok)
        return t if t.kind == "num" else Term("var" if tok[0] not in _CONSTS else "sym",
                                              tok[0], line=tok[2], col=tok[3])
    if depth > MAX_NESTING:
        raise lx.error(tok, f"term {nesting_error(depth)}")
    lx.next("'('")
    args = [_parse_call(lx, depth + 1)]
    while True:
        sep = lx.next("',' or ')'")
        if sep[0] == ")":
            break
        if sep[0] != ",":
            raise lx.error(sep, f"expected ',' or ')', found {sep[0]!r}")
        args.append(_parse_call(lx, depth + 1))
    return Term("app", tok[0], tuple(args), tok[2], tok[3])


def _parse_sexpr(lx: _Lexer, depth: int = 1) -> Term:
    tok = lx.next("a term")
    if tok[0] != "(":
        if tok[0] in (")", "=>", "<=>"):
            raise lx.error(tok, f"expected a term, found {tok[0]!r}")
        return _atom(tok)
    if depth > MAX_NESTING:
        raise lx.error(tok, f"term {nesting_error(depth)}")
    head = lx.next("an op name")
    if head[0] in ("(", ")") or head[0].startswith("?"):
        raise lx.error(head, f"expected an op name, found {head[0]!r}")
    args: list[Term] = []
    while True:
        t = lx.peek()
        if t is None:
            raise lx.error(head, f"unclosed '(' of {head[0]}")
        if t[0] == ")":
            lx.next("')'")
            break
        args.append(_parse_sexpr(lx, depth + 1))
    return Term("app", head[0], tuple(args), head[2], head[3])


# ---- Tensat terms -> side graphs ----------------------------------------------------

class _SideBuilder:
    """Hash-consed nodes of one side; variables are shared across both sides."""

    def __init__(self, source: str, var_index: dict[str, int]) -> None:
        self.source = source
        self.nodes: list[SNode] = []
        self.index: dict[tuple[Any, ...], int] = {}
        self.vars = var_index

    def error(self, t: Term, msg: str) -> RuleSyntaxError:
        return RuleSyntaxError(self.source, t.line, t.col, msg)

    def add(self, node: SNode) -> int:
        key = (node.op, node.attrs, node.inputs, node.infer, node.rank)
        if key not in self.index:
            self.index[key] = len(self.nodes)
            self.nodes.append(node)
        return self.index[key]

    def ref(self, t: Term) -> Ref:
        if t.kind == "var":
            k = self.vars.setdefault(t.name, len(self.vars))
            return ("var", k, 0)
        if t.kind == "num":
            raise self.error(t, f"expected a tensor, found the number {t.name}")
        if t.kind == "sym":
            if t.name in _CONSTS:
                return ("node", self.add(SNode(_CONSTS[t.name], (), (), _INFER[_CONSTS[t.name]])),
                        0)
            raise self.error(t, f"expected a tensor, found {t.name!r}")
        return self._app(t)

    def _nums(self, t: Term, args: Sequence[Term], n: int | tuple[int, ...]) -> list[int]:
        counts = (n,) if isinstance(n, int) else n
        nums = [a for a in args if a.kind == "num"]
        if len(nums) not in counts:
            want = " or ".join(str(c) for c in counts)
            raise self.error(t, f"{t.name}: expected {want} integer parameters, found {len(nums)}")
        return [a.value for a in nums]

    def _tensors(self, t: Term, args: Sequence[Term], n: int) -> list[Ref]:
        ts = [a for a in args if a.kind != "num"]
        if len(ts) != n:
            raise self.error(t, f"{t.name}: expected {n} tensor operand(s), found {len(ts)}")
        return [self.ref(a) for a in ts]

    def _code(self, t: Term, table: dict[int, str], v: int, what: str) -> str:
        if v not in table:
            raise self.error(t, f"{t.name}: unknown {what} code {v}")
        return table[v]

    def _app(self, t: Term) -> Ref:
        name, args = t.name, t.args
        if name in ("split_0", "split_1"):
            out = int(name[-1])
            if len(args) == 1 and args[0].kind == "app" and args[0].name == "split":
                inner = args[0]
                (axis,) = self._nums(inner, inner.args, 1)
                (x,) = self._tensors(inner, inner.args, 1)
            else:
                (axis,) = self._nums(t, args, 1)
                (x,) = self._tensors(t, args, 1)
            k = self.add(SNode("split", (("axis", axis),), (x,), ("sizes",)))
            return ("node", k, out)
        if name == "split":
            raise self.error(t, "split has two outputs; select one with split_0 or split_1")
        if name == "matmul":
            nums = self._nums(t, args, (0, 1))
            a, b = self._tensors(t, args, 2)
            attrs = (("activation", self._code(t, ACTI, nums[0], "activation")),) if nums else ()
            return ("node", self.add(SNode("matmul", attrs, (a, b))), 0)
        if name == "conv2d":
            sh, sw, pad, act = self._nums(t, args, 4)
            x, w = self._tensors(t, args, 2)
            attrs = (("activation", self._code(t, ACTI, act, "activation")),
                     ("padding", self._code(t, PADDING, pad, "padding")), ("stride", (sh, sw)))
            return ("node", self.add(SNode("conv2d", attrs, (x, w), ("groups",))), 0)
        if name in ("ewadd", "ewmul", "relu", "tanh", "sigmoid"):
            n = 2 if name.startswith("ew") else 1
            self._nums(t, args, 0)
            return ("node", self.add(SNode(name, (), tuple(self._tensors(t, args, n)))), 0)
        if name in ("smul", "scalar_mul"):
            self._nums(t, args, 0)
            return ("node", self.add(SNode("smul", (), tuple(self._tensors(t, args, 2)))), 0)
        if name == "transpose":
            self._nums(t, args, 0)
            tensors = [a for a in args if a.kind != "num"]
            perm: tuple[int, ...] = ()
            if len(tensors) >= 2 and tensors[1].kind in ("sym", "var") and "_" in tensors[1].name:
                perm = tuple(int(p) for p in tensors[1].name.split("_"))
                tensors = tensors[:1]
            if len(tensors) != 1:
                raise self.error(t, "transpose: expected one tensor operand")
            attrs = (("perm", perm),) if perm else ()
            return ("node", self.add(SNode("transpose", attrs, (self.ref(tensors[0]),))), 0)
        if name == "concat":
            nums = self._nums(t, args, (1, 2))
            xs = [a for a in args if a.kind != "num"]
            if len(xs) < 2:
                raise self.error(t, "concat: expected at least two tensor operands")
            refs = tuple(self.ref(a) for a in xs)
            ndim = nums[1] if len(nums) == 2 else None
            return ("node", self.add(SNode("concat", (("axis", nums[0]),), refs, rank=ndim)), 0)
        if name in ("poolavg", "poolmax", "pool2d_avg", "pool2d_max"):
            nums = self._nums(t, args, (5, 6))
            (x,) = self._tensors(t, args, 1)
            op = "pool2d_avg" if "avg" in name else "pool2d_max"
            attrs = [("kernel", (nums[0], nums[1])), ("stride", (nums[2], nums[3])),
                     ("padding", self._code(t, PADDING, nums[4], "padding"))]
            if len(nums) == 6:
                attrs.append(("activation", self._code(t, ACTI, nums[5], "activation")))
            return ("node", self.add(SNode(op, tuple(sorted(attrs)), (x,))), 0)
        if name == "enlarge":
            kh, kw = self._nums(t, args, 2)
            (w,) = self._tensors(t, args, 1)
            return ("node", self.add(SNode("enlarge", (("kh", kh), ("kw", kw)), (w,))), 0)
        if name in ("Cpool", "const_pool", "Iconv", "const_iconv"):
            kh, kw = self._nums(t, args, 2)
            self._tensors(t, args, 0)
            op = "const_pool" if "pool" in name.lower() else "const_iconv"
            return ("node", self.add(SNode(op, (("kh", kh), ("kw", kw)), (), _INFER[op])), 0)
        if name in _CONSTS:
            self._nums(t, args, 0)
            self._tensors(t, args, 0)
            op = _CONSTS[name]
            return ("node", self.add(SNode(op, (), (), _INFER[op])), 0)
        if name in _TENSAT_ONLY:
            raise self.error(t, f"unsupported op {name!r} (not in the superopt op set)")
        # Not an op of Tensat's language either: a typo or a corrupt file, not a rule this
        # op set cannot express (which would be an "unknown" verdict, not a failure).
        raise self.error(t, f"unknown op {name!r} (neither a Tensat nor a superopt op)")


_INFER = {"const_pool": ("channels",), "const_iconv": ("channels",), "const_imm": ("n",),
          "const_one": ("shape",)}


def _side(builder: _SideBuilder, outs: Sequence[Ref]) -> Side:
    return _reachable(Side(tuple(builder.nodes), tuple(outs)))


def _reachable(side: Side) -> Side:
    """Drop nodes no output depends on; renumber in topological order."""
    keep: dict[int, int] = {}

    def visit(r: Ref) -> None:
        if r[0] == "node" and r[1] not in keep:
            for c in side.nodes[r[1]].inputs:
                visit(c)
            keep[r[1]] = len(keep)

    for o in side.outputs:
        visit(o)

    def remap(r: Ref) -> Ref:
        return r if r[0] == "var" else ("node", keep[r[1]], r[2])

    order = sorted(keep, key=keep.__getitem__)
    nodes = tuple(replace(side.nodes[k], inputs=tuple(remap(c) for c in side.nodes[k].inputs))
                  for k in order)
    return Side(nodes, tuple(remap(o) for o in side.outputs))


def taso_types(var_names: Sequence[str]) -> dict[str, list[int]] | None:
    """TASO's generator shapes for variables named input_1..input_20, if all are."""
    out: dict[str, list[int]] = {}
    for n in var_names:
        m = re.fullmatch(r"input_(\d+)", n)
        if not m or not 1 <= int(m.group(1)) <= len(TASO_INPUTS):
            return None
        out[n] = list(TASO_INPUTS[int(m.group(1)) - 1].shape)
    return out


def table_types(src: Side, tgt: Side, names: Sequence[str]
                ) -> tuple[dict[str, list[int]] | None, str]:
    """TASO's table shapes for a rule's variables, unless the rule uses a variable at a
    rank its table entry does not have (TASO's files number some rules' inputs
    inconsistently): then None and why, and the ranks are inferred from use instead."""
    types = taso_types(names)
    if types is None:
        return None, ""
    try:
        used, _ = infer_ranks((src, tgt), len(names))
    except (IRError, IndexError):
        used = [None] * len(names)
    for n, r in zip(names, used, strict=True):
        if r is not None and r != len(types[n]):
            return None, (f"?{n} is used at rank {r}, but TASO's input table gives it shape "
                          f"{types[n]}; shapes inferred from use instead")
    return types, ""


def at_taso_shapes(name: str, src: Side, tgt: Side, names: Sequence[str],
                   types: dict[str, list[int]], bidirectional: bool | None) -> dict[str, str]:
    """Provenance entries for the rule as TASO checked it: at its input table's shapes,
    each side typed on its own (`build_rule(at_shapes=True)`), as rule text without the
    name (`at_taso_shapes`), or why it cannot be built (`at_taso_shapes_error`)."""
    shapes = tuple(tuple(types[n]) for n in names)
    try:
        r = build_rule(RuleSpec(name, src, tgt, tuple(names), shapes, bidirectional),
                       kind="taso", at_shapes=True)
    except IRError as e:
        return {"at_taso_shapes_error": str(e)}
    return {"at_taso_shapes": format_rule(r).split(":", 1)[1].strip()}


def _rank_checked(rule: Rule, types: dict[str, list[int]] | None,
                  used: dict[str, int] | None = None) -> Rule:
    """TASO checked its rules only at its input shapes: where those are known, the rule is
    claimed only at their ranks (a 2-D matmul identity need not hold for batched matmul),
    unless all of its ops are elementwise. Where the file's own ranks (a concat's
    PM_NUMDIM) overrode the table, `used` holds them and they are the ranks claimed."""
    if types is None:
        return rule if not used else add_conditions(rule, rank_conditions(rule, used))
    return add_conditions(rule, rank_conditions(rule, {k: len(v) for k, v in types.items()}))


def _used_ranks(src: Side, tgt: Side, names: Sequence[str]) -> dict[str, int]:
    """The ranks the rule's ops (and the file's stated ranks) give its variables."""
    try:
        used, _ = infer_ranks((src, tgt), len(names))
    except (IRError, IndexError):
        return {}
    return {n: r for n, r in zip(names, used, strict=True) if r is not None}


def _make(source: str, name: str, src: Side, tgt: Side, var_index: dict[str, int],
          bidirectional: bool | None, line: int, col: int, prov: dict[str, Any]) -> Rule:
    names = tuple(sorted(var_index, key=var_index.__getitem__))
    types, note = table_types(src, tgt, names)
    if types is not None:
        prov = {**prov, "taso_types": types}
    elif note:
        prov = {**prov, "taso_types_note": note}
    ranks = tuple(len(v) for v in types.values()) if types is not None else None
    if bidirectional is None:
        src, tgt, prov = _orient(src, tgt, prov)
    if types is not None:
        prov = {**prov, **at_taso_shapes(name, src, tgt, names, types, bidirectional)}
    try:
        # TASO sizes a constant kernel by its use (Iconv, Cpool): so does the general form.
        rule = build_rule(RuleSpec(name, src, tgt, names, None, bidirectional, ranks),
                          kind="taso", provenance=prov, by_use=True)
        return _rank_checked(rule, types, _used_ranks(src, tgt, names) if note else None)
    except IRError as e:
        raise RuleSemanticError(source, line, col, str(e), name) from None


def _orient(src: Side, tgt: Side, prov: dict[str, Any]) -> tuple[Side, Side, dict[str, Any]]:
    """An undirected equation whose right side alone binds every variable is written
    right to left (a rule's target may only use variables its source binds)."""
    sv, tv = set(side_vars(src)), set(side_vars(tgt))
    if not tv <= sv and sv <= tv:
        return tgt, src, {**prov, "reversed": True}
    return src, tgt, prov


def parse_tensat_equations(text: str, source: str = "<equations>", multi: bool = False,
                           name: str = "eq", problems: Problems | None = None) -> list[Rule]:
    """Rules from `lhs==rhs` equations; with `multi`, equations pair into two-output rules.
    With `problems`, a rule that parses but cannot be built is recorded there instead of
    stopping the file."""
    lx = _Lexer(text, source)
    eqs: list[tuple[Term, Term]] = []
    while lx.peek() is not None:
        lhs = _parse_call(lx)
        eq = lx.next("'=='")
        if eq[0] != "==":
            raise lx.error(eq, f"expected '==', found {eq[0]!r}")
        eqs.append((lhs, _parse_call(lx)))
    return _rules_from_pairs(eqs, source, multi, name, "tensat-equations", None, problems)


def parse_tensat_sexprs(text: str, source: str = "<sexprs>", multi: bool = False,
                        name: str = "sx", problems: Problems | None = None) -> list[Rule]:
    """Rules from `(op ...)=>(op ...)` lines; with `multi`, line pairs are two-output rules
    (`problems`: as for `parse_tensat_equations`)."""
    eqs: list[tuple[Term, Term]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0] if raw.lstrip().startswith("#") else raw
        if not line.strip():
            continue
        lx = _Lexer(line, source, lineno, sexpr=True)
        lhs = _parse_sexpr(lx)
        arrow = lx.next("'=>'")
        if arrow[0] not in ("=>", "<=>"):
            raise lx.error(arrow, f"expected '=>', found {arrow[0]!r}")
        rhs = _parse_sexpr(lx)
        extra = lx.peek()
        if extra is not None:
            raise lx.error(extra, f"unexpected {extra[0]!r} after the rule")
        eqs.append((lhs, rhs))
    return _rules_from_pairs(eqs, source, multi, name, "tensat-sexpr", False, problems)


def _rules_from_pairs(eqs: list[tuple[Term, Term]], source: str, multi: bool, name: str,
                      fmt: str, bidirectional: bool | None,
                      problems: Problems | None = None) -> list[Rule]:
    if multi and len(eqs) % 2:
        last = eqs[-1][0]
        raise RuleSyntaxError(source, last.line, last.col,
                              f"multi-output file has an odd number of rules ({len(eqs)}); "
                              "its rules come in pairs")
    group = 2 if multi else 1
    rules: list[Rule] = []
    for k in range(0, len(eqs), group):
        chunk = eqs[k:k + group]
        # Rules keep their position in the file as their name and index, also when an
        # earlier one could not be built.
        idx = k // group
        rule_name = f"{name}_{idx + 1:04d}"
        try:
            var_index: dict[str, int] = {}
            sb, tb = _SideBuilder(source, var_index), _SideBuilder(source, var_index)
            src = [sb.ref(lhs) for lhs, _ in chunk]
            tgt = [tb.ref(rhs) for _, rhs in chunk]
            first = chunk[0][0]
            rules.append(_make(source, rule_name, _side(sb, src), _side(tb, tgt),
                               var_index, bidirectional, first.line, first.col,
                               {"source": fmt, "file": source, "index": idx,
                                "line": first.line}))
        except RuleSyntaxError as err:
            # The file parsed; this rule's terms do not make a rule (an unsupported op,
            # wrong parameters, an input on one side only, inconsistent shapes).
            if problems is None:
                raise
            problems.append(_problem_of(err, rule_name))
    return rules


# ---- TASO's graph_subst.pb ----------------------------------------------------------

def _pb_side(ops: list[PbOperator], outs: list[tuple[int, int]], var_index: dict[str, int],
             where: str) -> Side:
    nodes: list[SNode] = []
    depth: list[int] = []  # operators on the longest path to each op, inputs excluded
    for k, op in enumerate(ops):
        refs: list[Ref] = []
        for t in op.inputs:
            if t.op_id < 0:
                refs.append(("var", var_index.setdefault(f"input_{-t.op_id}", len(var_index)), 0))
            elif t.op_id >= k:
                raise TasoPbError(f"{where} op {k}: input refers to op {t.op_id}, not an "
                                  "earlier op")
            else:
                refs.append(("node", t.op_id, t.ts_id))
        depth.append(1 + max((depth[r[1]] for r in refs if r[0] == "node"), default=0))
        if depth[-1] > MAX_NESTING:
            # later stages walk the rule's terms recursively, as deep as this chain
            raise TasoPbTooDeep(f"{where} op {k}: operators {nesting_error(depth[-1])}")
        nodes.append(_pb_node(op, tuple(refs), f"{where} op {k}"))
    for o, _ in outs:
        if not 0 <= o < len(ops):
            raise TasoPbError(f"{where}: mapped output refers to op {o}, which does not exist")
    return _reachable(Side(tuple(nodes), tuple(("node", o, ts) for o, ts in outs)))


def _pb_node(op: PbOperator, refs: tuple[Ref, ...], where: str) -> SNode:
    tname = OP_TYPES[op.type] if 0 <= op.type < len(OP_TYPES) else f"type {op.type}"

    def need(n: int) -> None:
        if len(refs) != n:
            raise TasoPbError(f"{where}: {tname} expects {n} inputs, found {len(refs)}")

    def code(table: dict[int, str], key: str, default: int) -> str:
        v = op.param(key, default)
        if v not in table:
            raise TasoPbError(f"{where}: {tname}: unknown {key} value {v}")
        return table[v]

    t = op.type
    if t == OP["OP_CONV2D"]:
        need(2)
        attrs = (("activation", code(ACTI, "PM_ACTI", 0)), ("padding", code(PADDING, "PM_PAD", 0)),
                 ("stride", (op.param("PM_STRIDE_H", 1), op.param("PM_STRIDE_W", 1))))
        return SNode("conv2d", attrs, refs, ("groups",))
    if t in (OP["OP_POOL2D_AVG"], OP["OP_POOL2D_MAX"]):
        need(1)
        attrs = (("activation", code(ACTI, "PM_ACTI", 0)),
                 ("kernel", (op.param("PM_KERNEL_H", 3), op.param("PM_KERNEL_W", 3))),
                 ("padding", code(PADDING, "PM_PAD", 0)),
                 ("stride", (op.param("PM_STRIDE_H", 1), op.param("PM_STRIDE_W", 1))))
        return SNode("pool2d_avg" if t == OP["OP_POOL2D_AVG"] else "pool2d_max", attrs, refs)
    if t in (OP["OP_RELU"], OP["OP_SIGMOID"], OP["OP_TANH"]):
        need(1)
        return SNode({8: "relu", 9: "sigmoid", 10: "tanh"}[t], (), refs)
    if t == OP["OP_CONCAT"]:
        n = op.param("PM_NUM_INPUTS", len(refs))
        if n != len(refs) or n < 1:
            raise TasoPbError(f"{where}: concat of {n} inputs lists {len(refs)}")
        # PM_NUMDIM is the rank TASO built the concat at: the only type some rules carry
        # (a concat of inputs no conv or matmul touches), and it overrides the input table.
        return SNode("concat", (("axis", op.param("PM_AXIS", 0)),), refs,
                     rank=op.param("PM_NUMDIM"))
    if t == OP["OP_SPLIT"]:
        need(1)
        if op.param("PM_NUM_OUTPUTS", 2) != 2:
            raise TasoPbError(f"{where}: only two-way splits are supported")
        return SNode("split", (("axis", op.param("PM_AXIS", 0)),), refs, ("sizes",))
    if t == OP["OP_TRANSPOSE"]:
        need(1)
        nd = op.param("PM_NUMDIM", 2) or 2
        perm = perm_decode(op.param("PM_PERM", 0) or 0, nd)
        if sorted(perm) != list(range(nd)):
            raise TasoPbError(f"{where}: transpose: {op.param('PM_PERM')} is not a "
                              f"permutation of {nd} dims")
        return SNode("transpose", (("perm", perm),), refs)
    if t in (OP["OP_EW_ADD"], OP["OP_EW_MUL"]):
        need(2)
        return SNode("ewadd" if t == OP["OP_EW_ADD"] else "ewmul", (), refs)
    if t == OP["OP_MATMUL"]:
        need(2)
        return SNode("matmul", (("activation", code(ACTI, "PM_ACTI", 0)),), refs)
    if t == OP["OP_MUL"]:
        need(2)
        return SNode("smul", (), refs)
    if t == OP["OP_ENLARGE"]:
        need(1)
        return SNode("enlarge", (("kh", op.param("PM_KERNEL_H", 3)),
                                 ("kw", op.param("PM_KERNEL_W", 3))), refs)
    if t in (OP["OP_CONSTANT_POOL"], OP["OP_CONSTANT_ICONV"]):
        need(0)
        name = "const_pool" if t == OP["OP_CONSTANT_POOL"] else "const_iconv"
        return SNode(name, (("kh", op.param("PM_KERNEL_H", 3)), ("kw", op.param("PM_KERNEL_W", 3))),
                     (), ("channels",))
    if t == OP["OP_CONSTANT_IMM"]:
        need(0)
        return SNode("const_imm", (), (), ("n",))
    if t == OP["OP_CONSTANT_ONE"]:
        need(0)
        return SNode("const_one", (), (), ("shape",))
    raise TasoPbError(f"{where}: unsupported TASO operator {tname}")


def taso_pb_rules(rules: list[PbRule], source: str = "<pb>", name: str = "taso",
                  problems: Problems | None = None) -> list[Rule]:
    """Our rules from decoded TASO rules. With `problems`, a rule that cannot be made one
    (an unsupported operator, inconsistent shapes, a target input the source lacks) is
    recorded there with its index and the others are still read."""
    out: list[Rule] = []
    for i, r in enumerate(rules):
        where = f"{source}: rule {i}"
        try:
            out.append(_pb_rule(r, i, where, source, name))
        except TasoPbTooDeep:
            raise
        except (IRError, IndexError, ValueError, KeyError, ZeroDivisionError) as e:
            # IndexError and friends: a rule the shape inference was not written for;
            # it must cost that rule, not the file (and never show a traceback).
            msg = str(e) if isinstance(e, IRError) else f"{where}: {type(e).__name__}: {e}"
            if problems is None:
                if isinstance(e, IRError):
                    raise
                raise TasoPbError(msg) from None
            reason = msg[len(where) + 2:] if msg.startswith(where + ": ") else msg
            problems.append(RuleProblem(where, f"{name}_{i + 1:04d}", reason,
                                        "unsupported" in reason))
    return out


def _pb_rule(r: PbRule, i: int, where: str, source: str, name: str) -> Rule:
    if not r.mapped:
        raise TasoPbError(f"{where}: no mapped outputs")
    var_index: dict[str, int] = {}
    src = _pb_side(r.src, [(m[0], m[2]) for m in r.mapped], var_index, where + " srcOp")
    n_src = len(var_index)
    tgt = _pb_side(r.dst, [(m[1], m[3]) for m in r.mapped], var_index, where + " dstOp")
    if len(var_index) != n_src and not set(side_vars(src)) <= set(side_vars(tgt)):
        extra = sorted(var_index, key=var_index.__getitem__)[n_src]
        raise TasoPbError(f"{where}: the target uses {extra}, which the source does not")
    names = tuple(sorted(var_index, key=var_index.__getitem__))
    prov: dict[str, Any] = {"source": "taso-pb", "file": source, "index": i}
    src, tgt, prov = _orient(src, tgt, prov)
    types, note = table_types(src, tgt, names)
    ranks = None
    if types is not None:
        prov["taso_types"] = types
        ranks = tuple(len(v) for v in types.values())
        prov.update(at_taso_shapes(f"{name}_{i + 1:04d}", src, tgt, names, types, None))
    elif note:
        prov["taso_types_note"] = note
    try:
        return _rank_checked(build_rule(RuleSpec(f"{name}_{i + 1:04d}", src, tgt, names,
                                                 var_ranks=ranks),
                                        kind="taso", provenance=prov, by_use=True), types,
                             _used_ranks(src, tgt, names) if note else None)
    except IRError as e:
        raise TasoPbError(f"{where}: {e}") from None


# ---- files --------------------------------------------------------------------------

TEXT_SUFFIXES = (".rules", ".txt", ".json", ".jsonl")


def _read_bytes(path: Path) -> bytes:
    return read_bytes(path, RuleFileError)


def _stem(path: Path) -> str:
    return re.sub(r"\W", "_", path.stem) or "rule"


def read_taso_pb(path: str | Path, problems: Problems | None = None) -> list[Rule]:
    path = Path(path)
    return taso_pb_rules(decode_rules(_read_bytes(path), str(path)), str(path), _stem(path),
                         problems)


def read_tensat_equations(path: str | Path, multi: bool | None = None,
                          problems: Problems | None = None) -> list[Rule]:
    path = Path(path)
    text = decode(_read_bytes(path), str(path), RuleFileError)
    m = "multi" in path.name if multi is None else multi
    return parse_tensat_equations(text, str(path), m, _stem(path), problems)


def read_tensat_sexprs(path: str | Path, multi: bool | None = None,
                       problems: Problems | None = None) -> list[Rule]:
    path = Path(path)
    text = decode(_read_bytes(path), str(path), RuleFileError)
    m = "multi" in path.name if multi is None else multi
    return parse_tensat_sexprs(text, str(path), m, _stem(path), problems)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def detect_format(path: str | Path) -> str:
    """One of "library", "taso-pb", "tensat-equations", "tensat-sexpr", "text"."""
    path = Path(path)
    if path.suffix in (".json", ".jsonl"):
        return "library"
    data = _read_bytes(path)
    if path.suffix == ".pb":
        return "taso-pb"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # A file named as text is text that cannot be decoded, not a binary rule file.
        return "text" if path.suffix in TEXT_SUFFIXES else "taso-pb"
    # TASO's protobuf has field tags and lengths below 0x20 (0x08, 0x12, 0x1a ...) besides
    # 0x0a; text has none but tabs and line ends. (A leading 0x0a alone is a blank line.)
    if path.suffix not in TEXT_SUFFIXES and _CONTROL.search(text):
        return "taso-pb"
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return "library"
    if "==" in text and "=>" not in text:
        return "tensat-equations"
    named = re.search(r"^\s*[A-Za-z_][\w.\-~]*\s*:(?!=)", text, re.MULTILINE)
    if "?" in text and "=>" in text and not named and (
            "multi" in path.name or re.search(r"\((?:poolavg|poolmax|Cpool|Iconv|split_[01]|"
                                              r"conv2d -?\d|matmul -?\d|concat \d+ \d)", text)):
        return "tensat-sexpr"
    return "text"


def read_any(path: str | Path, problems: Problems | None = None) -> list[Rule]:
    """Rules from a file in any supported format, chosen by extension and content: this
    project's text rules (.rules/.txt) or JSON/JSONL library, Tensat's equations or
    s-expressions (`multi` in the file name: two-output rules in line pairs) and TASO's
    binary graph_subst.pb. Raises an IRError naming the file and problem.

    With `problems`, only syntax errors (and unreadable files) raise: a rule that parses
    but cannot be made a rule is recorded there, with its location, and reading goes on."""
    path = Path(path)
    if path.is_dir():
        raise RuleFileError(f"{path}: is a directory, not a rule file")
    fmt = detect_format(path)
    if fmt == "library":
        try:
            return list(load_library(path).rules)
        except LibraryError:
            raise
    if fmt == "taso-pb":
        return read_taso_pb(path, problems=problems)
    if fmt == "tensat-equations":
        return read_tensat_equations(path, problems=problems)
    if fmt == "tensat-sexpr":
        return read_tensat_sexprs(path, problems=problems)
    text = decode(_read_bytes(path), str(path), RuleFileError)
    ours_problems: list[RuleSemanticError] | None = [] if problems is not None else None
    try:
        rules = parse_rules(text, str(path), ours_problems)
    except RuleSyntaxError as ours:
        if "=>" in text and "?" in text:
            try:
                return parse_tensat_sexprs(text, str(path), "multi" in path.name, _stem(path),
                                           problems)
            except RuleSyntaxError:
                pass
        raise ours from None
    if problems is not None and ours_problems:
        problems.extend(_problem_of(e) for e in ours_problems)
    return rules
