"""Readers for Tensat's equation and s-expression files and TASO's graph_subst.pb, and the
format dispatch of `read_any`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from superopt.ir import TensorType
from superopt.substitutions import PNode, RuleSyntaxError, differs, format_rules, save_library
from superopt.substitutions.readers import (
    RuleFileError,
    RuleProblem,
    detect_format,
    parse_tensat_equations,
    parse_tensat_sexprs,
    read_any,
)
from superopt.substitutions.taso_pb import (
    OP,
    PM,
    PbOperator,
    PbRule,
    PbTensor,
    TasoPbError,
    decode_rules,
    encode_rules,
    perm_code,
    perm_decode,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _types(rule) -> dict[str, TensorType]:
    return {k: TensorType(tuple(v)) for k, v in rule.provenance["taso_types"].items()}


def _holds(rule) -> bool:
    return differs(rule, _types(rule), trials=2, seed=7) is None


# ---- Tensat equations -----------------------------------------------------------------

def test_equations_run_together_on_one_line_are_all_read() -> None:
    rules = read_any(FIXTURES / "tensat_equations.txt")
    assert len(rules) == 11  # two share the first line with no separator
    assert all(r.provenance["source"] == "tensat-equations" for r in rules)
    assert [r.provenance["line"] for r in rules[:3]] == [1, 1, 2]
    assert all(_holds(r) for r in rules)
    by_line = {r.provenance["index"]: r for r in rules}
    fuse = by_line[2]  # relu(conv2d(1,1,0,0,..)) == conv2d(1,1,0,2,..)
    conv = fuse.source[0].children[0]
    assert isinstance(conv, PNode) and conv.op == "conv2d"
    assert dict(fuse.target[0].attrs)["activation"].value == "relu"
    assert dict(conv.attrs)["padding"].value == "same"
    # groups are not in the file: they become an expression over the variables
    assert dict(conv.attrs)["groups"].text == "dim(?input_7,1) // dim(?input_10,1)"
    assert fuse.bidirectional


def test_equation_whose_right_side_binds_more_is_read_right_to_left() -> None:
    (rule,) = parse_tensat_equations(
        "input_1==split_0(0,concat(0,input_1,input_2))")
    assert rule.source[0].op == "split" and rule.target[0] == rule.source[0].children[0].children[0]
    assert rule.provenance["reversed"] and not rule.bidirectional
    assert _holds(rule)


def test_equation_constants_get_their_sizes_from_the_context() -> None:
    rules = parse_tensat_equations(
        "poolavg(3,3,1,1,0,input_8)==conv2d(1,1,0,0,input_8,Cpool(3,3))"
        "matmul(input_2,Imatmul)==input_2 ewmul(input_9,Iewmul)==input_9")
    pool, imm, one = rules
    cpool = pool.target[0].children[1]
    assert cpool.op == "const_pool" and dict(cpool.attrs)["channels"].text == "dim(?input_8,1)"
    assert dict(imm.source[0].children[1].attrs)["n"].text == "dim(?input_2,1)"
    assert "dim(?input_9,3)" in dict(one.source[0].children[1].attrs)["shape"].text
    assert not imm.bidirectional or imm.target_vars() == imm.source_vars()
    assert all(_holds(r) for r in rules)


@pytest.mark.parametrize("text,line,col,msg", [
    ("ewadd(input_1,input_2)=ewadd(input_2,input_1)", 1, 23, "unexpected character '='"),
    ("ewadd(input_1,input_2)==ewadd(input_2,input_1", 1, 46, re.escape("expected ',' or ')'")),
    # A name of neither language is an error (a rule file with a typo must not verify
    # cleanly); a Tensat op superopt lacks is "unsupported" (the verdict is unknown).
    ("relu(input_1)==relu(input_1)\nfoo(input_1)==input_1", 2, 1,
     "unknown op 'foo' \\(neither a Tensat nor a superopt op\\)"),
    ("reshape(input_1,input_2)==input_1", 1, 1, "unsupported op 'reshape'"),
    ("conv2d(1,1,7,0,input_7,input_10)==input_7", 1, 1, "unknown padding code 7"),
    ("conv2d(1,1,0,input_7,input_10)==input_7", 1, 1, "expected 4 integer parameters"),
    ("relu(input_1)==relu(input_2)", 1, 1, "does not bind"),
    ("relu(input_1)", 1, 14, "expected '=='"),
])
def test_equation_errors_name_line_and_column(text: str, line: int, col: int, msg: str) -> None:
    with pytest.raises(RuleSyntaxError, match=msg) as e:
        parse_tensat_equations(text, "eqs.txt")
    assert (e.value.source, e.value.line, e.value.col) == ("eqs.txt", line, col)


# ---- Tensat s-expressions -------------------------------------------------------------

def test_sexpr_rules_are_directed_and_hold() -> None:
    rules = read_any(FIXTURES / "tensat_rules.txt")
    assert len(rules) == 6 and not any(r.bidirectional for r in rules)
    assert rules[1].source[0].op == "matmul"  # (matmul 0 ...): activation 0 is the default
    assert dict(rules[1].source[0].attrs) == {}
    assert rules[4].source[0].op == "concat" and dict(rules[4].source[0].attrs)["axis"].value == 0
    assert all(_holds(r) for r in rules)


def test_multi_output_file_pairs_consecutive_lines() -> None:
    rules = read_any(FIXTURES / "tensat_multi_rules.txt")
    assert [r.outputs for r in rules] == [2, 2]
    mm = rules[0]
    assert [p.op for p in mm.source] == ["matmul", "matmul"]
    assert [(p.op, p.output) for p in mm.target] == [("split", 0), ("split", 1)]
    # both outputs of the target come from one split node
    assert mm.target[0].children == mm.target[1].children
    sizes = dict(mm.target[0].attrs)["sizes"].text
    assert sizes == "[dim(?input_4,1), dim(?input_5,1)]"
    assert all(_holds(r) for r in rules)
    # the split also works at shapes other than TASO's
    other = {"input_1": TensorType((3, 5)), "input_4": TensorType((5, 2)),
             "input_5": TensorType((5, 7))}
    assert differs(mm, other, seed=3) is None


def test_sexpr_errors_and_odd_multi_files(tmp_path: Path) -> None:
    with pytest.raises(RuleSyntaxError, match="expected '=>'") as e:
        parse_tensat_sexprs("(relu ?x)=>(relu ?x)\n(relu ?x) (relu ?x)", "r.txt")
    assert (e.value.line, e.value.col) == (2, 11)
    with pytest.raises(RuleSyntaxError, match="unexpected character '-'") as e:
        parse_tensat_sexprs("(relu ?x) -> (relu ?x)", "r.txt")
    assert (e.value.line, e.value.col) == (1, 11)
    with pytest.raises(RuleSyntaxError, match="expected a term, found '=>'"):
        parse_tensat_sexprs("(relu (relu ?x)=>(relu ?x)", "r.txt")
    with pytest.raises(RuleSyntaxError, match="odd number"):
        parse_tensat_sexprs("(relu ?x)=>(relu ?x)", "m.txt", multi=True)


# ---- TASO's graph_subst.pb ------------------------------------------------------------

def _op(kind: str, inputs: list[tuple[int, int]], **params: int) -> PbOperator:
    return PbOperator(OP[kind], [PbTensor(o, t) for o, t in inputs],
                      {PM[f"PM_{k.upper()}"]: v for k, v in params.items()})


def _conv(x: tuple[int, int], w: tuple[int, int], kh: int, kw: int, acti: int = 0) -> PbOperator:
    return _op("OP_CONV2D", [x, w], kernel_h=kh, kernel_w=kw, stride_h=1, stride_w=1, pad=0,
               acti=acti)


def fixture_pb_rules() -> list[PbRule]:
    """Rules written the way TASO's generator writes them (pb_fill_rule): graph inputs are
    opId -1..-20 in its numbering (x1 = -1, w1 = -4, i1 = -7, w4 = -10, w7 = -13)."""
    x1, w1, w2, i1, w4, w7 = (-1, 0), (-4, 0), (-5, 0), (-7, 0), (-10, 0), (-13, 0)
    merge = PbRule(
        src=[_op("OP_MATMUL", [x1, w1], acti=0), _op("OP_MATMUL", [x1, w2], acti=0)],
        dst=[_op("OP_CONCAT", [w1, w2], num_inputs=2, axis=1, numdim=2),
             _op("OP_MATMUL", [x1, (0, 0)], acti=0),
             _op("OP_SPLIT", [(1, 0)], num_outputs=2, axis=1)],
        mapped=[(0, 2, 0, 0), (1, 2, 0, 1)])
    fuse = PbRule(src=[_conv(i1, w4, 3, 3), _op("OP_RELU", [(0, 0)])],
                  dst=[_conv(i1, w4, 3, 3, acti=2)], mapped=[(1, 0, 0, 0)])
    pool = PbRule(src=[_op("OP_POOL2D_AVG", [i1], op_type=OP["OP_POOL2D_AVG"], kernel_h=3,
                           kernel_w=3, stride_h=1, stride_w=1, pad=0, acti=0)],
                  dst=[_op("OP_CONSTANT_POOL", [], kernel_h=3, kernel_w=3),
                       _conv(i1, (0, 0), 3, 3)], mapped=[(0, 1, 0, 0)])
    trans = PbRule(
        src=[_op("OP_MATMUL", [x1, w1], acti=0),
             _op("OP_TRANSPOSE", [(0, 0)], numdim=2, perm=perm_code((1, 0)), outshuffle=0)],
        dst=[_op("OP_TRANSPOSE", [w1], numdim=2, perm=perm_code((1, 0)), outshuffle=0),
             _op("OP_TRANSPOSE", [x1], numdim=2, perm=perm_code((1, 0)), outshuffle=0),
             _op("OP_MATMUL", [(0, 0), (1, 0)], acti=0)],
        mapped=[(1, 2, 0, 0)])
    enlarge = PbRule(src=[_conv(i1, w7, 1, 3)],
                     dst=[_op("OP_ENLARGE", [w7], kernel_h=3, kernel_w=3),
                          _conv(i1, (0, 0), 3, 3)], mapped=[(0, 1, 0, 0)])
    return [merge, fuse, pool, trans, enlarge]


def test_committed_pb_fixture_is_what_the_encoder_writes() -> None:
    data = (FIXTURES / "taso_graph_subst.pb").read_bytes()
    assert data == encode_rules(fixture_pb_rules())
    assert decode_rules(data) == fixture_pb_rules()


def test_pb_encoding_matches_the_protobuf_library() -> None:
    pb = pytest.importorskip("google.protobuf")
    del pb
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="rules_test.proto", package="GraphSubst",
                                           syntax="proto2")
    req, rep = (descriptor_pb2.FieldDescriptorProto.LABEL_REQUIRED,
                descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    i32, msg = (descriptor_pb2.FieldDescriptorProto.TYPE_INT32,
                descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE)

    def message(name: str, fields: list[tuple[str, int, int, int, str]]) -> None:
        m = f.message_type.add(name=name)
        for fname, num, label, typ, tname in fields:
            m.field.add(name=fname, number=num, label=label, type=typ,
                        **({"type_name": f".GraphSubst.{tname}"} if tname else {}))

    message("Parameter", [("key", 1, req, i32, ""), ("value", 2, req, i32, "")])
    message("Tensor", [("opId", 1, req, i32, ""), ("tsId", 2, req, i32, "")])
    message("Operator", [("type", 1, req, i32, ""), ("input", 2, rep, msg, "Tensor"),
                         ("para", 3, rep, msg, "Parameter")])
    message("MapOutput", [("srcOpId", 1, req, i32, ""), ("dstOpId", 2, req, i32, ""),
                          ("srcTsId", 3, req, i32, ""), ("dstTsId", 4, req, i32, "")])
    message("Rule", [("srcOp", 1, rep, msg, "Operator"), ("dstOp", 2, rep, msg, "Operator"),
                     ("mappedOutput", 3, rep, msg, "MapOutput")])
    message("RuleCollection", [("rule", 1, rep, msg, "Rule")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("GraphSubst.RuleCollection"))
    ours = encode_rules(fixture_pb_rules())
    parsed = cls.FromString(ours)
    assert parsed.rule[0].srcOp[0].input[0].opId == -1  # a 10-byte negative varint
    assert parsed.rule[0].dstOp[2].para[1].value == 1
    assert parsed.SerializeToString() == ours  # byte-for-byte what protobuf writes


def test_pb_rules_read_and_hold() -> None:
    rules = read_any(FIXTURES / "taso_graph_subst.pb")
    assert [r.outputs for r in rules] == [2, 1, 1, 1, 1]
    assert rules[0].provenance["source"] == "taso-pb"
    assert rules[0].source_vars() == ["input_1", "input_4", "input_5"]
    assert [(p.op, p.output) for p in rules[0].target] == [("split", 0), ("split", 1)]
    assert rules[3].target[0].op == "matmul"
    assert dict(rules[3].source[0].attrs)["perm"].value == (1, 0)
    assert all(_holds(r) for r in rules)
    assert perm_decode(perm_code((2, 0, 1)), 3) == (2, 0, 1)


def test_pb_errors_name_the_rule(tmp_path: Path) -> None:
    data = encode_rules(fixture_pb_rules())
    bad = tmp_path / "cut.pb"
    bad.write_bytes(data[:-3])
    with pytest.raises(TasoPbError, match="cut.pb"):
        read_any(bad)
    bn = PbRule(src=[_op("OP_BATCHNORM", [(-7, 0)] * 5)], dst=[_op("OP_RELU", [(-7, 0)])],
                mapped=[(0, 0, 0, 0)])
    p = tmp_path / "bn.pb"
    p.write_bytes(encode_rules([fixture_pb_rules()[1], bn]))
    with pytest.raises(TasoPbError, match=r"rule 1 srcOp op 0: unsupported TASO operator "
                                          "OP_BATCHNORM"):
        read_any(p)
    fwd = PbRule(src=[_op("OP_RELU", [(1, 0)]), _op("OP_RELU", [(-1, 0)])],
                 dst=[_op("OP_RELU", [(-1, 0)])], mapped=[(0, 0, 0, 0)])
    p.write_bytes(encode_rules([fwd]))
    with pytest.raises(TasoPbError, match="rule 0 srcOp op 0: input refers to op 1"):
        read_any(p)


# ---- dispatch --------------------------------------------------------------------------

def test_read_any_dispatches_on_extension_and_content(tmp_path: Path) -> None:
    eqs = read_any(FIXTURES / "tensat_equations.txt")
    text = tmp_path / "mine.rules"
    text.write_text(format_rules(eqs))
    assert detect_format(text) == "text"
    assert [r.source for r in read_any(text)] == [r.source for r in eqs]
    lib = save_library(eqs, tmp_path / "mine.json")
    assert [r.source for r in read_any(lib)] == [r.source for r in eqs]
    jsonl = save_library(eqs, tmp_path / "mine.jsonl")
    assert len(read_any(jsonl)) == len(eqs)
    renamed = tmp_path / "graph_subst.bin"
    renamed.write_bytes((FIXTURES / "taso_graph_subst.pb").read_bytes())
    assert detect_format(renamed) == "taso-pb"  # binary content, any name
    assert len(read_any(renamed)) == 5
    for name in ("tensat_rules.txt", "tensat_multi_rules.txt"):
        assert detect_format(FIXTURES / name) == "tensat-sexpr"
    # A text file that starts with a blank line (byte 0x0a, as TASO's .pb does) is text,
    # under any name; it was read as protobuf ("unsupported wire type").
    for name in ("blank_first.rules", "blank_first", "blank_first.bin"):
        spaced = tmp_path / name
        spaced.write_text("\n\n" + format_rules(eqs))
        assert detect_format(spaced) == "text", name
        assert [r.source for r in read_any(spaced)] == [r.source for r in eqs]


def test_read_any_errors(tmp_path: Path) -> None:
    with pytest.raises(RuleFileError, match="cannot read"):
        read_any(tmp_path / "missing.rules")
    junk = tmp_path / "junk.rules"
    junk.write_text("this is not a rule\n")
    with pytest.raises(RuleSyntaxError, match="junk.rules:1:1"):
        read_any(junk)


# ---- whole files with one bad rule (lenient reads) ----------------------------------

GOOD = "ewadd(input_1,input_2)==ewadd(input_2,input_1)"


def test_one_sided_equation_is_a_problem_at_its_line_and_the_rest_is_read(tmp_path: Path
                                                                           ) -> None:
    f = tmp_path / "eqs.txt"
    # Line 2: each side reads an input the other lacks (neither direction is a rule).
    f.write_text(f"{GOOD}\nrelu(input_1)==relu(input_2)\n{GOOD}\n")
    problems: list[RuleProblem] = []
    rules = read_any(f, problems)
    assert [r.name for r in rules] == ["eqs_0001", "eqs_0003"]
    assert len(problems) == 1
    p = problems[0]
    assert p.location == f"{f}:2:1" and p.name == "eqs_0002" and not p.unsupported
    assert "input_2" in p.reason or "input_1" in p.reason
    with pytest.raises(RuleSyntaxError, match=r"eqs.txt:2:1"):
        read_any(f)  # the strict read still stops there


def test_unsupported_op_is_marked_unsupported_and_syntax_errors_still_stop(tmp_path: Path
                                                                          ) -> None:
    f = tmp_path / "eqs.txt"
    f.write_text(f"{GOOD}\nbatchnorm(input_7)==relu(input_7)\n")
    problems: list[RuleProblem] = []
    assert len(read_any(f, problems)) == 1
    assert problems[0].unsupported and "batchnorm" in problems[0].reason
    f.write_text(f"{GOOD}\nrelu(input_1==relu(input_1)\n")
    with pytest.raises(RuleSyntaxError, match=r"eqs.txt:2:"):
        read_any(f, [])


def test_text_rule_with_an_unbound_target_input_is_a_problem(tmp_path: Path) -> None:
    f = tmp_path / "mine.rules"
    f.write_text("a: (relu ?x) => (relu ?x)\nb: (relu ?x) => (ewadd ?x ?y)\n")
    problems: list[RuleProblem] = []
    assert [r.name for r in read_any(f, problems)] == ["a"]
    (q,) = problems
    assert q.location.startswith(f"{f}:2:") and q.name == "b" and not q.unsupported
    assert "?y" in q.reason


def test_pb_rules_that_cannot_be_typed_cost_only_themselves(tmp_path: Path) -> None:
    relu_i1 = PbRule(src=[_op("OP_RELU", [(-7, 0)])], dst=[_op("OP_RELU", [(-7, 0)])],
                     mapped=[(0, 0, 0, 0)])
    # input_20 is TASO's scalar: a matmul of it has no last two dims to match (this used
    # to be an IndexError in the shape inference).
    scalar_mm = PbRule(src=[_op("OP_MATMUL", [(-20, 0), (-20, 0)], acti=0)],
                       dst=[_op("OP_MATMUL", [(-20, 0), (-20, 0)], acti=0)],
                       mapped=[(0, 0, 0, 0)])
    one_sided = PbRule(src=[_op("OP_RELU", [(-7, 0)])], dst=[_op("OP_RELU", [(-8, 0)])],
                       mapped=[(0, 0, 0, 0)])
    p = tmp_path / "graph_subst.pb"
    p.write_bytes(encode_rules([relu_i1, scalar_mm, one_sided, relu_i1]))
    problems: list[RuleProblem] = []
    rules = read_any(p, problems)
    assert [r.provenance["index"] for r in rules] == [0, 3]
    assert [q.location for q in problems] == [f"{p}: rule 1", f"{p}: rule 2"]
    assert "matmul" in problems[0].reason and "IndexError" not in problems[0].reason
    assert "input_8" in problems[1].reason


def test_inconsistent_taso_numbering_infers_shapes_from_use(tmp_path: Path) -> None:
    # input_1 is a 2x4 matrix in TASO's table, but here it is a conv's image.
    conv = PbRule(src=[_op("OP_CONV2D", [(-1, 0), (-10, 0)], stride_h=1, stride_w=1, pad=0,
                           acti=0), _op("OP_RELU", [(0, 0)])],
                  dst=[_op("OP_CONV2D", [(-1, 0), (-10, 0)], stride_h=1, stride_w=1, pad=0,
                           acti=2)], mapped=[(1, 0, 0, 0)])
    p = tmp_path / "graph_subst.pb"
    p.write_bytes(encode_rules([conv]))
    problems: list[RuleProblem] = []
    (rule,) = read_any(p, problems)
    assert not problems
    assert "taso_types" not in rule.provenance
    assert "rank 4" in rule.provenance["taso_types_note"]
    assert "rank(?input_1) == 2" not in (rule.condition or "")


def test_truncated_pb_and_directory_are_clear_errors(tmp_path: Path) -> None:
    relu = PbRule(src=[_op("OP_RELU", [(-7, 0)])], dst=[_op("OP_RELU", [(-7, 0)])],
                  mapped=[(0, 0, 0, 0)])
    data = encode_rules([relu, relu, relu])
    p = tmp_path / "cut.pb"
    p.write_bytes(data[:-2])
    with pytest.raises(TasoPbError, match=r"cut.pb: rule 2 \(after 2 complete"):
        read_any(p, [])
    with pytest.raises(RuleFileError, match="is a directory"):
        read_any(tmp_path, [])


def test_rules_at_taso_shapes_type_each_side_on_its_own() -> None:
    # A false rule: pairing its outputs made the shapes contradictory; at TASO's shapes,
    # each side typed alone, the target is a depthwise conv over 8 channels.
    (bad,) = parse_tensat_equations(
        "concat(0,poolavg(3,3,1,1,0,input_7),poolavg(3,3,1,1,0,input_8))=="
        "conv2d(1,1,0,0,concat(1,input_7,input_8),Cpool(3,3))", "bad.txt")
    text = bad.provenance["at_taso_shapes"]
    assert "groups=8" in text and "(const_pool 8 3 3)" in text
    assert "shape(?input_7) == (2, 4, 5, 5)" in text
    # A true one: groups of a plain conv is the constant 1 there (left at its default),
    # the identity kernel gets the input's 4 channels from its use.
    (ok,) = parse_tensat_equations("conv2d(1,1,0,2,input_8,Iconv(3,3))==relu(input_8)", "t.txt")
    text = ok.provenance["at_taso_shapes"]
    assert "(const_iconv 4 3 3)" in text and "groups" not in text
