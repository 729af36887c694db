"""Export a superopt graph as a `torch.fx.GraphModule`: the torch importers' inverse.

`to_module(graph)` reuses the torch backend's lowering (`superopt.backends.torch.LOWERING`,
one rule per op) instead of a second copy of it: every node's kernel is applied to fx
proxies, which records the torch calls it makes as an fx graph. Inputs become the
module's positional arguments in `graph.inputs` order (floats in the module's dtype,
booleans as torch.bool, other integers as int64); float weights become parameters
(`requires_grad=False`, so the module is ready for inference and can be unfrozen for
fine-tuning), integer weights and TASO's constants become buffers. A weight without data
gets the value the reference interpreter draws for it at `seed`, so the module computes
what `superopt.ir.interpret(graph, seed=seed)` computes.

The result runs eagerly, under `torch.compile`, and through `torch.export` (whose saved
`.pt2` programs `superopt.importers.load_model` reads back).
"""

from __future__ import annotations

import re

import torch
from torch import fx, nn

from superopt.backends.torch import lower
from superopt.ir.graph import Graph

__all__ = ["to_module"]


def _attr_name(name: str, taken: set[str]) -> str:
    """A Python identifier for a weight or input name ('layer1.0.conv1.weight' ->
    'layer1_0_conv1_weight'), unique among `taken`."""
    base = re.sub(r"\W", "_", name) or "w"
    if base[0].isdigit():
        base = f"w_{base}"
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


def to_module(graph: Graph, seed: int = 0, dtype: torch.dtype = torch.float32
              ) -> fx.GraphModule:
    """The graph as an fx `GraphModule` on the CPU, floats in `dtype`.

    Call it with the graph's inputs in order; it returns one tensor, or a tuple when the
    graph has several outputs.
    """
    program = lower(graph, "cpu", dtype, seed)
    sources = program.prepare()  # weight data, else the reference draw at `seed`
    root = nn.Module()
    fx_graph = fx.Graph()
    tracer = fx.Tracer()
    # The tracer turns tensors captured by a kernel (a pooling divisor, say) into
    # attributes of `root`; these two fields are what trace() would have set up.
    tracer.graph, tracer.root, tracer.tensor_attrs = fx_graph, root, {}
    taken: set[str] = {"forward", "training"}
    env: dict[int, tuple[object, ...]] = {}
    with torch.inference_mode(False), torch.no_grad():
        for node, kernel in program.kernels:
            if node.op == "input":
                placeholder = fx_graph.placeholder(_attr_name(node.attr("name"), taken))
                env[node.id] = (fx.Proxy(placeholder, tracer),)
            elif node.is_source:
                value = sources[node.attr("name")] if node.is_named_source else kernel([])[0]
                attr = _attr_name(node.attr("name") if node.is_named_source else node.op, taken)
                if node.op == "weight" and value.is_floating_point():
                    root.register_parameter(attr, nn.Parameter(value.clone(),
                                                               requires_grad=False))
                else:
                    root.register_buffer(attr, value.clone())
                env[node.id] = (fx.Proxy(fx_graph.get_attr(attr), tracer),)
            else:
                env[node.id] = kernel([env[v.node][v.index] for v in node.inputs])
        outs = [env[v.node][v.index] for v in graph.outputs]
    result = outs[0] if len(outs) == 1 else tuple(outs)
    fx_graph.output(tracer.create_arg(result))
    module = fx.GraphModule(root, fx_graph, class_name=re.sub(r"\W", "_", graph.name) or "Graph")
    module.eval()
    return module
