"""Where a tuned model will run: the simulated TPU presets, or onnxruntime on this
machine's CPU (or a CUDA GPU when there is one), or torch eager on either (`torch-cpu`,
`torch-cuda`: superopt's torch backend, for users who run their models in torch and for
machines whose onnxruntime has no CUDA provider).

A target says which kinds of decision it lets the tuner make (`Target.controls`); each
pass says which kind it makes (`TunablePass.controls`, the pass contract). A target offers
exactly the passes whose kind it lists: the simulator six of the seven, all but the batch
chunks;
onnxruntime and torch only the graph passes (the rewrite plan and the rewrite points) and
the batch chunks (`passes.chunk`: the batch run in chunks that stay in the CPU's caches),
since their own compilers pick layouts, fusions and kernels and take no say in them. Asking a target for a pass it does not
offer is bad input, named in one line.

On a simulator target the tuner's measurements are the simulator's; on a real target they
are paired runs in onnxruntime or torch (`superopt.xtat.realrunner`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from superopt.ir.errors import IRError
from superopt.tpu_sim.hardware import PRESETS, get_hardware
from superopt.xtat.passes.base import TunablePass
from superopt.xtat.passes.chunk import BatchChunks
from superopt.xtat.passes.fusion import FusionSites
from superopt.xtat.passes.kernel import FlagSites, TileSites
from superopt.xtat.passes.layout import LayoutSites
from superopt.xtat.passes.plan import RewritePlan
from superopt.xtat.passes.rewrite import RewriteSites
from superopt.xtat.rules import GROUPS, RUNTIME, STARTER


class TargetError(IRError):
    """A target that is unknown, absent on this machine, or asked for a pass it lacks."""


# Every pass type by name, in pipeline order (what `--passes` names).
PASS_TYPES: MappingProxyType[str, type[TunablePass]] = MappingProxyType({
    cls.name: cls for cls in (RewritePlan, RewriteSites, BatchChunks, LayoutSites,
                              FusionSites, TileSites, FlagSites)})

SIMULATOR, ONNXRUNTIME, TORCH = "simulator", "onnxruntime", "torch"  # how a target measures


@dataclass(frozen=True)
class Target:
    name: str
    measures: str  # SIMULATOR, ONNXRUNTIME or TORCH
    controls: frozenset[str]  # the kinds of decision the tuner may make (pass contract)
    what: str  # one line for help and reports
    hardware: str | None = None  # the TPU preset (simulator targets)
    device: str = "cpu"  # the runtime's device (real targets)
    # The rule libraries its rewrite passes use unless told (`--rules`): onnxruntime's
    # blocked convolutions want groups of 16 channels and depthwise convs on a multiple of 4,
    # so its targets add the group merges and the channel padding (`groups`), and its fused residual-add + layer norm is slower than the two ops (`runtime`).
    rules: tuple[str, ...] = (STARTER,)

    @property
    def real(self) -> bool:
        return self.measures in (ONNXRUNTIME, TORCH)

    def offers(self, p: TunablePass | type[TunablePass]) -> bool:
        return p.controls in self.controls

    def passes(self) -> tuple[str, ...]:
        """The names of the passes this target offers, in pipeline order."""
        return tuple(n for n, cls in PASS_TYPES.items() if self.offers(cls))


# The simulator: every pass but the batch chunks (its kernels are tiled for VMEM whatever
# the batch; what chunking gains on a CPU, operands kept in cache between ops, it does
# not model). The real targets: the graph, and the batch run in chunks.
_EVERYTHING = frozenset(cls.controls for cls in PASS_TYPES.values()) - {BatchChunks.controls}
_GRAPH_ONLY = frozenset({RewritePlan.controls, RewriteSites.controls, BatchChunks.controls})

TARGETS: MappingProxyType[str, Target] = MappingProxyType({
    **{f"tpu-{hw}": Target(f"tpu-{hw}", SIMULATOR, _EVERYTHING,
                           f"simulated TPU {hw} core (rewrites, layouts, fusion, tiles, flags)",
                           hardware=hw) for hw in PRESETS},
    "cpu": Target("cpu", ONNXRUNTIME, _GRAPH_ONLY,
                  "this machine's CPU, measured in onnxruntime (rewrites, batch chunks)",
                  rules=(STARTER, GROUPS, RUNTIME)),
    "cuda": Target("cuda", ONNXRUNTIME, _GRAPH_ONLY,
                   "a CUDA GPU, measured in onnxruntime (rewrites, batch chunks)", device="cuda",
                   rules=(STARTER, GROUPS, RUNTIME)),
    # torch eager picks its kernels per op and fuses nothing: as for onnxruntime, the
    # graph is all the tuner decides.
    "torch-cpu": Target("torch-cpu", TORCH, _GRAPH_ONLY,
                        "this machine's CPU, measured in torch eager (rewrites, batch chunks)"),
    "torch-cuda": Target("torch-cuda", TORCH, _GRAPH_ONLY,
                         "a CUDA GPU, measured in torch eager (rewrites, batch chunks)", device="cuda"),
})
DEFAULT_HARDWARE = "v4"


def get_target(name: str | None, hardware: str | None = None) -> Target:
    """The target named `name` (None: the TPU preset `hardware`, v4 by default). A TPU
    target and a `hardware` that names another preset, or a real target with any
    `hardware`, contradict each other."""
    if name is None:
        name = f"tpu-{get_hardware(hardware or DEFAULT_HARDWARE).name}"
        hardware = None
    key = name.strip().lower()
    target = TARGETS.get(key)
    if target is None:
        raise TargetError(f"unknown target {name!r}: expected one of {', '.join(TARGETS)}")
    if hardware is not None:
        if target.real:
            raise TargetError(f"--hardware {hardware} names a TPU preset; --target "
                              f"{target.name} runs on this machine's {target.device}")
        if get_hardware(hardware).name != target.hardware:
            raise TargetError(f"--hardware {hardware} contradicts --target {target.name}")
    return target


def tuned_passes(target: Target, requested: Sequence[str] | None) -> tuple[str, ...]:
    """The passes to tune on `target`: `requested` (None: all it offers), each of which
    it must offer."""
    if requested is None:
        return target.passes()
    for name in requested:
        cls = PASS_TYPES[name]
        if not target.offers(cls):
            why = (f"which {target.name} decides itself" if target.real else
                   "which the simulator does not model (real targets: cpu, cuda, torch-*)")
            raise TargetError(f"--target {target.name} cannot tune {name}: that pass decides "
                              f"{cls.controls}, {why}; it offers {', '.join(target.passes())}")
    return tuple(requested)


def check_device(target: Target) -> list[str]:
    """onnxruntime's execution providers for a real target on this machine, best first
    (a missing onnxruntime or device is a `TargetError`); [] for a simulator target and
    for torch's (whose device is checked here too)."""
    if not target.real:
        return []
    if target.measures == TORCH:
        try:
            import torch
        except ImportError as e:
            raise TargetError(f"--target {target.name} measures in torch, which is not "
                              f"installed ({e})") from None
        if target.device == "cuda" and not torch.cuda.is_available():
            raise TargetError(f"--target {target.name}: torch sees no CUDA device here; "
                              "use --target torch-cpu")
        return []
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise TargetError(f"--target {target.name} measures in onnxruntime, which is not "
                          f"installed ({e})") from None
    have = ort.get_available_providers()
    if target.device == "cuda":
        if "CUDAExecutionProvider" not in have:
            raise TargetError("--target cuda: no CUDA device here (onnxruntime offers "
                              f"{', '.join(have)}); use --target cpu")
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


__all__ = ["DEFAULT_HARDWARE", "ONNXRUNTIME", "PASS_TYPES", "SIMULATOR", "TARGETS", "TORCH",
           "Target", "TargetError", "check_device", "get_target", "tuned_passes"]
