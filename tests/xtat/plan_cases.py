"""Graphs and rules shared by the plan pass's tests (`test_plan`, `test_plancache`): three
linear layers reading one input, and a three-way merge of them marked as PET's."""

from __future__ import annotations

import dataclasses

from superopt.ir.graph import Graph, GraphBuilder, Value
from superopt.substitutions.rule import Rule
from superopt.substitutions.text import parse_rule


def merge3_rule() -> Rule:
    """A three-way merge of linear layers reading one input, marked as a PET family's
    mutant (the provenance a PET rule file gives it): a rule source of its own."""
    outs = " ; ".join(
        f"(split.{i} -1 {{[dim(?w1,1), dim(?w2,1), dim(?w3,1)]}} (ewadd (matmul ?x (concat 1 "
        f"?w1 ?w2 ?w3)) (concat 0 ?b1 ?b2 ?b3)))" for i in range(3))
    ins = " ; ".join(f"(ewadd (matmul none ?x ?w{i}) ?b{i})" for i in (1, 2, 3))
    conds = " and ".join(f"rank(?w{i}) == 2 and rank(?b{i}) == 1 and dim(?b{i},0) == "
                         f"dim(?w{i},1)" for i in (1, 2, 3))
    rule = parse_rule(f"merge3_linear: {ins} => {outs} if {conds}")
    return dataclasses.replace(rule, provenance={"family": "merge_shared_matmul"})


def qkv(with_bn: bool) -> Graph:
    """Three linear layers reading one input (a transformer's query, key and value), and
    optionally a conv with its batch norm elsewhere."""
    b = GraphBuilder("qkv")
    x = b.input("x", (256, 512))
    outs = [b.op("ewadd", b.op("matmul", x, b.weight(f"w{i}", (512, 512))),
                 b.weight(f"b{i}", (512,))) for i in range(3)]
    if with_bn:
        outs.append(conv_bn(b))
    return b.build(outs)


def conv_bn(b: GraphBuilder) -> Value:
    """A conv and its batch norm on an input of their own (a fold any plan takes)."""
    u = b.input("u", (8, 32, 14, 14))
    y = b.op("conv2d", u, b.weight("wu", (32, 32, 3, 3)), padding="same")
    c = (32,)
    return b.batch_norm(y, b.weight("s", c, init="normal"), b.weight("bb", c, init="normal"),
                        b.weight("m", c, init="normal"), b.weight("v", c, init="positive"),
                        eps=1e-5)
