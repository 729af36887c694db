"""A deterministic analytical model of one TPU core and the default compiler it runs.

`Simulator(hw)` owns every cache and is the entry point: `.compile(graph, config)` lays
out, fuses, tiles and flags a graph as an XLA-like compiler would (taking the choices a
partial configuration makes), `.simulate` returns the runtime with a per-kernel breakdown
and `.measure` adds seeded noise. The module-level `compile_default`, `compile_with`,
`simulate`, `measure` and `evaluate` do the same on a given or fresh `Simulator`.

Modules: `hardware` (presets, their sources and the calibrated constants), the passes
`layout_pass`, `fusion`, `tiling` and `flags`, `compiler` (orchestration and validation),
`kernels` (kernels from fusion decisions), `op_costs` (per-op cost rules and op facts),
`signature` (kernel cache keys), `kernel_time` (a kernel's time under a tile and flags),
`bounds` (XLA-style tile bounds), `simulator` (`KernelCosts`, `Simulator`), `simulate`,
and `replay` and `calibration` for the replay of real TPU measurements and the fit of the
constants.
"""

from superopt.tpu_sim.bounds import Bounds
from superopt.tpu_sim.compiler import (
    compile_default,
    compile_with,
    lay_out,
    problems,
    validate,
)
from superopt.tpu_sim.config import (
    DEFAULT_FLAGS,
    Compiled,
    Config,
    Flags,
    InvalidConfig,
    Tile,
    all_flags,
)
from superopt.tpu_sim.flags import bounds_columns, default_flags
from superopt.tpu_sim.fusion import priority_fusion
from superopt.tpu_sim.hardware import (
    PRESETS,
    TPU_V3,
    TPU_V4,
    TPU_V5E,
    Constants,
    Hardware,
    get_hardware,
)
from superopt.tpu_sim.kernel_time import KernelCost, KernelStats, tile_options
from superopt.tpu_sim.kernels import (
    Kernel,
    Kernels,
    effective_consumers,
    find_bitcasts,
    form_kernels,
    is_source,
    resolve_bitcasts,
)
from superopt.tpu_sim.layout import Layout, NodeLayouts, feature_minor, row_major
from superopt.tpu_sim.layout_pass import LaidOut, apply_layouts, assign_layouts
from superopt.tpu_sim.layout_rules import LAYOUT_RULES
from superopt.tpu_sim.op_costs import COST_RULES, OpRule, is_mxu_op, op_rule
from superopt.tpu_sim.signature import Signature, kernel_signature
from superopt.tpu_sim.simulate import (
    NOISE_SIGMA,
    KernelReport,
    Simulation,
    evaluate,
    measure,
    simulate,
)
from superopt.tpu_sim.simulator import KernelCosts, Simulator
from superopt.tpu_sim.synthetic import synthetic_graph

__all__ = [
    "COST_RULES", "DEFAULT_FLAGS", "LAYOUT_RULES", "NOISE_SIGMA", "PRESETS", "TPU_V3",
    "TPU_V4", "TPU_V5E", "Bounds", "Compiled", "Config", "Constants", "Flags", "Hardware",
    "InvalidConfig", "Kernel", "KernelCost", "KernelCosts", "KernelReport", "KernelStats",
    "Kernels", "LaidOut", "Layout", "NodeLayouts", "OpRule", "Signature", "Simulation",
    "Simulator", "Tile", "all_flags", "apply_layouts", "assign_layouts", "bounds_columns",
    "compile_default", "compile_with", "default_flags", "effective_consumers", "evaluate",
    "feature_minor", "find_bitcasts", "form_kernels", "get_hardware", "is_mxu_op",
    "is_source", "kernel_signature", "lay_out", "measure", "op_rule", "priority_fusion",
    "problems", "resolve_bitcasts", "row_major", "simulate", "synthetic_graph",
    "tile_options", "validate",
]
