"""The layout pass: a minor-to-major order for the outputs of the ops whose layout matters
most (convolutions, matrix products, attention, reshapes and transposes); every other value
follows its operands as the default compiler propagates it, and a `layout` copy is inserted
wherever a consumer needs another layout (`Simulator.lay_out`).

Which ops get layout sites, and which orders they are offered, is the per-op table
`LAYOUT_OPTIONS` ("xtat_layout"); an op with no options there is marked unsupported with
the reason. Option None keeps the default compiler's choice for the value.

`promising` offers the orders that pad the value less than the layout it holds (a
64-channel conv output with its channels minor fills half the 128 lanes; W-minor at
224 wide, seven eighths): padding is what a layout choice mostly buys or costs, and a
graph has hundreds of layout sites whose rebuilds an estimate cannot all afford
(inception_v3 without its plan: 95 new sites, 78 s to estimate every option of each).
"""

from __future__ import annotations

from collections.abc import Callable

from superopt.ir.graph import Node, Value
from superopt.ir.opdef import OPS
from superopt.ir.passes import compose
from superopt.ir.rules import RuleTable
from superopt.tpu_sim import Simulator, row_major
from superopt.tpu_sim.layout import padded_bytes
from superopt.tpu_sim.op_costs import is_mxu_op
from superopt.xtat.passes.base import PassResult, TunablePass
from superopt.xtat.space import PassConfig, Site, digest
from superopt.xtat.stage import Stage

Layout = tuple[int, ...]
LayoutOptions = Callable[[Node], tuple[Layout, ...]]

LAYOUT_OPTIONS: RuleTable[LayoutOptions] = RuleTable("xtat_layout")


def _minor_orders(node: Node) -> tuple[Layout, ...]:
    """Row-major, each dim moved to the minor-most place (the rest row-major), and the two
    minor-most dims swapped: the orders XLA's layout assignment picks between."""
    rank = node.type.rank
    if rank < 2:
        return ()
    rm = row_major(rank)
    out: dict[Layout, None] = {rm: None}
    for d in range(rank):
        out[(d, *(x for x in rm if x != d))] = None
    out[(rm[1], rm[0], *rm[2:])] = None
    return tuple(out)


# The MXU ops (conv2d, matmul, linear, attention: the cost table's fact) and the two
# movement ops whose layout decides whether they are bitcasts.
for _op in (*(o for o in sorted(OPS) if is_mxu_op(o)), "reshape", "transpose"):
    LAYOUT_OPTIONS.register(_op, _minor_orders)
for _op in sorted(OPS):
    if _op not in LAYOUT_OPTIONS:
        LAYOUT_OPTIONS.unsupported(_op, "its layout follows its operands (propagated as the "
                                        "default compiler does)")


class LayoutSites(TunablePass):
    name = "layout"
    controls = "layout"

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def list_sites(self, stage: Stage) -> list[Site]:
        g = stage.graph
        hashes = g.node_hashes
        out = []
        for n in g.nodes:
            if len(n.types) != 1 or not LAYOUT_OPTIONS.supports(n.op):
                continue
            orders = LAYOUT_OPTIONS.get(n.op)(n)
            if not orders:
                continue
            out.append(Site(digest(hashes[n.id]), (None, *orders), None, stage.sources(n.id),
                            f"%{n.id} {n.op} {n.type}"))
        return out

    def node_of(self, stage: Stage) -> dict[str, int]:
        got = stage.memo.get("layout_nodes")
        if got is None:
            hashes = stage.graph.node_hashes
            got = stage.memo["layout_nodes"] = {
                digest(hashes[n.id]): n.id for n in stage.graph.nodes
                if len(n.types) == 1 and LAYOUT_OPTIONS.supports(n.op)}
        return got

    def promising(self, stage: Stage, out: Stage, site: Site, now: object
                  ) -> list[tuple[object, float]]:
        node = self.node_of(stage).get(site.key)
        held = None if node is None or out.laid is None else out.laid.layouts.get(Value(node))
        if held is None:
            return super().promising(stage, out, site, now)
        t = stage.graph.node(node).type
        pad = padded_bytes(t, held)
        # The hint: the padding bytes saved.
        return [(o, float(pad - padded_bytes(t, o))) for o in site.options
                if o is not None and o != now and padded_bytes(t, o) < pad]

    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        self.check_config(stage, config)
        nodes = self.node_of(stage)
        overrides = {Value(nodes[k]): v for k, v in config.items() if v is not None}
        laid = self.sim.lay_out(stage.graph, overrides or None)
        to_source = laid.origin if stage.to_source is None else compose(stage.to_source,
                                                                         laid.origin)
        copies = sum(1 for n in laid.graph.nodes if n.op == "layout") - sum(
            1 for n in stage.graph.nodes if n.op == "layout")
        return PassResult(stage.evolve(graph=laid.graph, to_source=to_source, laid=laid),
                          laid.origin, {"overrides": len(overrides), "copies": copies})


__all__ = ["LAYOUT_OPTIONS", "LayoutSites"]
