"""A deterministic analytical model of one TPU core and the default compiler it runs.

`Simulator(hw)` owns every cache and is the entry point: `.compile(graph, config)` lays
out, fuses, tiles and flags a graph as an XLA-like compiler would (taking the choices a
partial configuration makes), `.simulate` returns the runtime with a per-kernel breakdown
and `.measure` adds seeded noise. The module-level `compile_default`, `compile_with`,
`simulate`, `measure` and `evaluate` do the same on a given or fresh `Simulator`.

Modules in layers, each importing only from its own layer or below (the contract is
`superopt.layers`, held by `tests/test_layers.py`; docs/architecture.md draws it):

1. types and machine: `hardware` (presets, sources, calibrated constants), `layout`,
   `config` (`Tile`, `Flags`, `Config`), `kernels` (kernels from fusion decisions),
   `signature` (kernel cache keys) and the per-op tables `op_costs`, `layout_rules`,
   `bounds_rules`;
2. kernel cost model: `bounds` (XLA-style tile bounds), `kernel_time` (a kernel's time
   under a tile and flags);
3. compiler passes: `layout_pass`, `fusion`, `tiling`, `flags`, and `kernel_costs`
   (`KernelCosts`, the per-signature cache they share);
4. compiler driver: `pipeline` (`Compiled`, the passes in order), `timing` (a compiled
   graph's time), `simulator` (`Simulator`), `compiler` (`compile_with`, `validate`);
5. entry points and tools: `simulate` (`simulate`, `measure`, `evaluate`), `replay` and
   `calibration` (real TPU measurements and the fit of the constants), `incremental`,
   `synthetic`, `plot`.
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
from superopt.tpu_sim.kernel_costs import KernelCosts
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
from superopt.tpu_sim.pipeline import Compiled
from superopt.tpu_sim.signature import Signature, kernel_signature
from superopt.tpu_sim.simulate import (
    NOISE_SIGMA,
    KernelReport,
    Simulation,
    evaluate,
    measure,
    simulate,
)
from superopt.tpu_sim.simulator import Simulator
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
