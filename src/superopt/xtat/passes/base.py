"""The pass contract every tuner pass follows (torch.fx's pass infra is the model).

- `sites(stage)`: the choices this pass makes on `stage`, each with a stable key, its
  options and its default (cached in the stage's memo: a stage is immutable);
- `default(stage)`: the pass default as a configuration (always the empty delta: a
  configuration lists only choices that differ from the default);
- `apply(stage, config) -> PassResult(stage, origin, report)`: the next stage, the
  origin of its graph's nodes in `stage.graph`'s (identity when the graph is unchanged),
  and a report of what the configuration did;
- `requires(stage)` / `ensures(stage)`: checks run between passes by `check=True`
  pipelines and in tests (`lint()` of the stage graph and the pass's own invariants);
- `alternatives(stage, site, now)`: the other options of a site, nearest first (the
  order in which the revisit strategy tries them);
- `promising(stage, out, site, now)`: the options of a site worth estimating when a
  graph change made the site, each with a hint of its gain (the revisit's repair; by
  default every option but the one held);
- `per_kernel`: a trait, True when each site is one kernel signature whose choice
  changes that kernel's time only (tiles, flags): a profiled run then measures every
  site's option at once (the `parallel` strategy);
- `controls`: a trait, the kind of decision the pass makes ("graph": which rewrites
  apply; "batch": whether the batch runs in chunks; "layout", "fusion", "tile", "flags":
  what a compiler decides below the graph).
  A tuning target (`superopt.xtat.targets`) lists the kinds it lets the tuner decide, and
  offers exactly the passes whose `controls` it lists: the TPU simulator all but the
  batch chunks, onnxruntime on a CPU or GPU only the graph passes and the batch chunks
  (its own compiler lays out, fuses and picks kernels, and takes no say in them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from superopt.ir.errors import IRError
from superopt.ir.passes import Origin
from superopt.xtat.space import EMPTY, PassConfig, Site, Sites
from superopt.xtat.stage import Stage


class PassError(IRError):
    """A stage a pass cannot work on, or a configuration it cannot apply."""


@dataclass(frozen=True)
class PassResult:
    stage: Stage
    origin: Origin | None  # None: the graph is unchanged (identity origin)
    report: Mapping[str, Any]


class TunablePass(ABC):
    """Base of the seven passes (plan, rewrite, chunk, layout, fusion, tiling, flags)."""

    name: str = "pass"
    per_kernel: bool = False  # see the module docstring
    controls: str = "graph"  # see the module docstring; a target offers the pass by it

    def sites(self, stage: Stage) -> Sites:
        got = stage.memo.get(("sites", self.name))
        if got is None:
            got = stage.memo[("sites", self.name)] = Sites(self.list_sites(stage))
        return got

    @abstractmethod
    def list_sites(self, stage: Stage) -> list[Site]:
        """Every site of this pass on `stage`, in a deterministic order."""

    def default(self, stage: Stage) -> PassConfig:
        return EMPTY

    @abstractmethod
    def apply(self, stage: Stage, config: PassConfig) -> PassResult:
        """The stage after this pass, under `config` (defaults where it says nothing)."""

    def requires(self, stage: Stage) -> None:
        stage.graph.lint()

    def ensures(self, stage: Stage) -> None:
        stage.graph.lint()

    def alternatives(self, stage: Stage, site: Site, now: Any) -> list[Any]:
        """The options of `site` other than `now`, nearest first (a revisit flips a site
        to them in this order): in the site's order, the default first."""
        return [o for o in site.options if o != now]

    def promising(self, stage: Stage, out: Stage, site: Site, now: Any
                  ) -> list[tuple[Any, float]]:
        """The options of `site` (on `stage`, which this pass made into `out` with `site`
        at `now`) worth the analytical estimate of a rebuilt candidate each, with a hint
        of how much each may gain (larger first; the revisit repairs a flip's new sites
        with them): by default every other option, hint 0."""
        return [(o, 0.0) for o in site.options if o != now]

    def describe(self, stage: Stage, site: Site, choice: Any) -> str:
        """What `site` set to `choice` does, for the explain table (the site's label
        unless the pass says more)."""
        return site.label

    def choice(self, stage: Stage, config: PassConfig, key: str) -> Any:
        """The complete configuration's choice at site `key`."""
        return config.choices.get(key, self.sites(stage)[key].default)

    def check_config(self, stage: Stage, config: PassConfig) -> None:
        """Raise `PassError` when `config` names a site or option `stage` lacks."""
        if not config.choices:
            return  # nothing to check, and no reason to list the sites (matching rules)
        sites = self.sites(stage)
        for key, choice in config.items():
            site = sites.get(key)
            if site is None:
                raise PassError(f"{self.name}: no site {key!r} in this stage")
            if choice not in site.options:
                raise PassError(f"{self.name}: {choice!r} is not an option of site {key} "
                                f"({site.label})")


__all__ = ["PassError", "PassResult", "TunablePass"]
