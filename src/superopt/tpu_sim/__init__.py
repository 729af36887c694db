"""A deterministic analytical model of one TPU core and the default compiler it runs.

`compile_default(graph)` lays out, fuses, tiles and flags a graph as an XLA-like compiler
would; `compile_with(graph, config)` takes a (partial) configuration instead; `simulate`
returns the runtime with a per-kernel breakdown and `measure` adds seeded noise. See
`hardware` for the presets, their sources and the calibrated constants, `cost` for the kernel
cost model, `bounds` for XLA-style tile bounds, `compiler` for the default passes, `replay`
and `calibration` for the replay of real TPU measurements and the fit of the constants.
"""

from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.compiler import (
    InvalidConfig,
    LaidOut,
    apply_layouts,
    assign_layouts,
    clear_caches,
    compile_default,
    compile_with,
    lay_out,
    priority_fusion,
    problems,
    validate,
)
from superopt.tpu_sim.config import DEFAULT_FLAGS, Compiled, Config, Flags, Tile, all_flags
from superopt.tpu_sim.cost import (
    CostModel,
    KernelCost,
    KernelStats,
    Signature,
    cost_model,
)
from superopt.tpu_sim.hardware import (
    PRESETS,
    TPU_V3,
    TPU_V4,
    TPU_V5E,
    Constants,
    Hardware,
    get_hardware,
)
from superopt.tpu_sim.kernels import Kernel, Kernels, form_kernels
from superopt.tpu_sim.layout import Layout, NodeLayouts, feature_minor, row_major
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.op_costs import COST_RULES, OpRule, is_mxu_op, op_rule
from superopt.tpu_sim.simulate import KernelReport, Simulation, evaluate, measure, simulate
from superopt.tpu_sim.synthetic import synthetic_graph

__all__ = [
    "COST_RULES", "DEFAULT_FLAGS", "LAYOUT_RULES", "PRESETS", "TPU_V3", "TPU_V4", "TPU_V5E",
    "Bounds", "Compiled", "Config", "Constants", "CostModel", "Flags", "Hardware", "InvalidConfig", "Kernel",
    "KernelCost", "KernelReport", "KernelStats", "Kernels", "LaidOut", "Layout", "NodeLayouts", "OpRule",
    "Signature", "Simulation", "Tile", "all_flags", "apply_layouts", "assign_layouts",
    "clear_caches", "compile_default", "compile_with", "cost_model", "evaluate",
    "feature_minor", "form_kernels", "get_hardware", "is_mxu_op", "lay_out", "measure", "op_rule", "priority_fusion",
    "problems", "row_major", "simulate", "synthetic_graph", "validate",
]
