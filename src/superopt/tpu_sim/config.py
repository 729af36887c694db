"""The compilation state: a graph plus one configuration per pass.

Passes run in order layout -> fusion -> tiling -> flags, and each pass's configuration is
a collection of per-item choices on the graph that pass sees:

- layouts: minor-to-major order per value of the *source* graph (`Value -> Layout`);
  the layout pass inserts `layout` ops where a consumer needs another layout;
- fusion: per node of the *laid-out* graph, "fuse into all consumers" (True) or
  "materialise" (False), the encoding XLA's fusion decisions and TpuGraphs use; or the root
  of another kernel (an int): compute the node in that kernel and write its value as an
  extra output (XLA's multi-output fusion);
- tiles: per kernel (keyed by the kernel's root node in the laid-out graph), the output
  tile and reduction tile: `(tm, tn, tk)` for a kernel with an MXU op (rows and columns of
  the output block, contraction per step), `(rows,)` otherwise (rows of the kernel's
  largest array per step, lanes whole); or XLA-style `Bounds` over the physical dims of the
  kernel's main array (see `superopt.tpu_sim.bounds`);
- flags: per kernel, the code-generation switches of `Flags`;
- dtypes: per value of the *source* graph, the element type it is stored in when that
  differs from its IR dtype (an imported XLA program computes in one IR dtype but stores
  bf16 or 8-bit arrays): every byte count and tiling uses the stored type.

A configuration may be partial; `superopt.tpu_sim.compiler.compile_with` (or
`Simulator.compile`) completes it with the default compiler's choices and returns a
`pipeline.Compiled`, whose config is complete. `InvalidConfig` is the error for one that
cannot be compiled.

This module is the bottom of the simulator's layers, with `hardware` and `layout`: the
types every layer above shares (`Tile`, `Flags`, `Config`) and nothing that computes a
cost or runs a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from superopt.ir.errors import IRError
from superopt.ir.graph import Value
from superopt.ir.types import DType
from superopt.tpu_sim.layout import Layout, NodeLayouts

Tile = tuple[int, ...]  # or a `Bounds` (a named tuple of two tuples)


class InvalidConfig(IRError):
    """A configuration that cannot be compiled or does not pass `validate`."""


UNROLLS = (1, 2, 4, 8)
MXU_SPLITS = ("n", "m", "k")


def _empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True, order=True)
class Flags:
    """Per-kernel code-generation switches, each with a modelled trade-off.

    - double_buffer: overlap the DMA of the next tile with compute on this one; costs twice
      the VMEM for operand and result tiles (so the largest tiles may no longer fit).
      Off: every step waits for its DMAs (and pays the DMA issue latency), but tiles can be
      twice as large.
    - unroll: vector-loop unroll factor (1, 2, 4, 8). Higher amortises the per-iteration
      loop overhead, but multiplies the live vector registers; beyond the 32-entry register
      file values spill to VMEM, and big fusions times unroll overflow the instruction budget.
    - mxu_split: how the MXUs of a core share a tile's matrix product. "n": each MXU takes
      different output columns (needs >= MXUs blocks of 128 columns to keep all busy); "m":
      each takes a slice of the rows (short row slices pay the MXU's weight-load floor);
      "k": each takes part of the contraction and the partial sums are added on the vector
      unit (keeps all MXUs busy for narrow outputs, at vector cost).
    """

    double_buffer: bool = True
    unroll: int = 1
    mxu_split: str = "n"

    def problem(self) -> str | None:
        if self.unroll not in UNROLLS:
            return f"unroll must be one of {UNROLLS}, found {self.unroll!r}"
        if self.mxu_split not in MXU_SPLITS:
            return f"mxu_split must be one of {MXU_SPLITS}, found {self.mxu_split!r}"
        if not isinstance(self.double_buffer, bool):
            return f"double_buffer must be a bool, found {self.double_buffer!r}"
        return None

    def short(self) -> str:
        return f"{'db' if self.double_buffer else 'sb'}/u{self.unroll}/{self.mxu_split}"


DEFAULT_FLAGS = Flags()


def all_flags(mxu: bool = True) -> tuple[Flags, ...]:
    """Every flag combination (the MXU split only matters for kernels with an MXU op)."""
    splits = MXU_SPLITS if mxu else ("n",)
    return tuple(Flags(db, u, s) for db in (True, False) for u in UNROLLS for s in splits)


@dataclass(frozen=True)
class Config:
    """Per-pass choices; any part may be partial (missing entries get defaults)."""

    layouts: Mapping[Value, Layout] = field(default_factory=_empty)
    fusion: Mapping[int, bool | int] = field(default_factory=_empty)
    tiles: Mapping[int, Tile] = field(default_factory=_empty)
    flags: Mapping[int, Flags] = field(default_factory=_empty)
    dtypes: Mapping[Value, DType] = field(default_factory=_empty)

    def with_(self, **changes: Mapping) -> Config:
        """A copy with some parts replaced (frozen: mappings are copied and wrapped).

        Layouts given as a `NodeLayouts` (e.g. a compiled configuration's) are kept as
        they are, so the compiler recognises them and skips the layout pass."""
        return replace(self, **{k: v if isinstance(v, NodeLayouts) else MappingProxyType(dict(v))
                                for k, v in changes.items()})
