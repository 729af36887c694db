"""Cost-model data: random configurations measured on the simulator, kept in the tuner's
records databases, and read back as kernel samples.

`generate` writes one records database per workload (model and batch) under a folder.
Per workload, from a generator seeded by the seed and the workload's name:

- the default candidate;
- `fusion` candidates: chains of random layout and fusion changes from the default
  (restarted every `CHAIN` steps), tiles and flags repaired as the tuner repairs them;
- `tile` groups: for the heaviest kernels of the default and of some fusion candidates,
  the kernel's current tile and up to `tiles - 1` other tiles drawn from its options;
- `flags` groups: for the heaviest kernels of the default, every flags combination.

Each candidate is measured with the runner's noise (`SimRunner.measure`, noise seed =
the seed) and committed as it is measured, with the group in the strategy column
("dataset:<base candidate>:<site>"), so a killed run resumes where it stopped (the
candidates are regenerated from the seed, and recorded ones are checked, not measured
again) and the same seed always writes the same rows.

`load` rebuilds every recorded candidate through the pipeline and yields one
`KernelSample` per kernel configuration: all distinct kernels of default and fusion
candidates (task "fusion": absolute time), the tuned kernel of a tile or flags record
(grouped). A kernel's measured time is its exact time times the measurement's noise
for that kernel configuration, which is how the recorded total was summed (a profile's
per-kernel breakdown). Databases written by `superopt tune` load the same way: their
every distinct kernel becomes a fusion sample (`superopt costmodel train --db`).

Splits: `random` (a seeded 80/20 by group, fusion samples each on its own) and `models`
(the held-out models' every sample in the test set, never in training).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from superopt.ir.errors import IRError
from superopt.xtat.models.features import KernelSample
from superopt.xtat.space import PassConfig, digest

CHAIN = 8
GENERATOR_VERSION = 1
HELD_OUT = ("resnet18", "squeezenet", "bert_small")
# Batches 2 and 32 beside 1 and 8: a held-out model's kernels are mostly kernels of the
# training models at other sizes, and trees do not extrapolate past the sizes they saw.
ZOO_BATCHES = (1, 2, 8, 32)
SYNTHETIC = ("synthetic:200", "synthetic:400")


class DatasetError(IRError):
    """Cost-model data that cannot be generated or read."""


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    fusion: int = 160  # fusion candidates per workload
    sites: int = 16  # tile groups on the default's heaviest kernels
    tiles: int = 16  # tiles per group, the current one included
    flag_sites: int = 6  # flags groups on the default's heaviest kernels
    extra_every: int = 40  # tile groups on every n-th fusion candidate's new kernels too
    extra_sites: int = 3
    hardware: str = "v4"

    def as_dict(self) -> dict[str, Any]:
        return {"generator": GENERATOR_VERSION, **self.__dict__}


def default_workloads() -> list[tuple[str, int | None]]:
    from superopt import zoo

    return [(m, b) for m in zoo.names() for b in ZOO_BATCHES] + [(s, None) for s in SYNTHETIC]


def slug(model: str, batch: int | None) -> str:
    return f"{model.replace(':', '-')}@{batch if batch is not None else 'n'}"


def _site_key(stage: Any, name: str, pipeline: Any) -> list[Any]:
    j = pipeline.index(name)
    sites = pipeline.passes[j].sites(stage.stages[j]).tunable
    return sorted(sites, key=lambda s: (-s.weight, s.key))


def candidates(session: Any, settings: Settings) -> Iterator[tuple[str, str, Any]]:
    """(phase, strategy column, candidate) in measurement order (module docstring)."""
    from superopt.xtat.context import TuneContext

    spec = session.spec
    rng = np.random.default_rng([settings.seed, zlib.crc32(
        slug(spec["model"], spec.get("batch")).encode())])
    ctx = TuneContext(session.pipeline, session.default, rng)
    pipe = session.pipeline
    default = session.default
    yield "default", "dataset", default

    def tile_group(base: Any, n_sites: int, skip: set[str]) -> Iterator[tuple[str, str, Any]]:
        sites = [s for s in _site_key(base, "tiling", pipe) if s.key not in skip][:n_sites]
        for s in sites:
            current = ctx.choice(base, "tiling", s)
            others = [o for o in s.options if o != current]
            pick = rng.choice(len(others), min(len(others), settings.tiles - 1), replace=False)
            tag = f"dataset:{base.key}:{s.key}"
            yield "tile", tag, base
            for i in sorted(int(p) for p in pick):
                yield "tile", tag, pipe.with_choice(base, "tiling", s.key, others[i])

    yield from tile_group(default, settings.sites, set())
    for s in _site_key(default, "flags", pipe)[:settings.flag_sites]:
        tag = f"dataset:{default.key}:{s.key}"
        yield "flags", tag, default
        current = ctx.choice(default, "flags", s)
        for o in s.options:
            if o != current:
                yield "flags", tag, pipe.with_choice(default, "flags", s.key, o)
    known = set(default.final.sig_keys)
    cur = default
    for i in range(settings.fusion):
        if i % CHAIN == 0:
            cur = default
        cur = ctx.mutate(cur, ("layout", "fusion"), 1 + int(rng.integers(6)))
        yield "fusion", "dataset", cur
        if settings.extra_every and (i + 1) % settings.extra_every == 0:
            yield from tile_group(cur, settings.extra_sites, known)


def generate(out_dir: str | Path, workloads: Sequence[tuple[str, int | None]],
             settings: Settings, progress: Callable[[str, int, int], None] | None = None
             ) -> list[Path]:
    """Write (or complete) one records database per workload; returns their paths."""
    from superopt.xtat.records import RecordsDB
    from superopt.xtat.session import open_session

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise DatasetError(f"{out}: not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for model, batch in workloads:
        session = open_session({"model": model, "batch": batch, "hardware": settings.hardware})
        path = out / f"{slug(model, batch)}.sqlite"
        db = RecordsDB(path, session.workload, settings.as_dict(), resume=True)
        try:
            recorded = {m.step: m for m in db.measurements()}
            runner = session.runner
            n = 0
            for step, (phase, tag, cand) in enumerate(candidates(session, settings)):
                rec = recorded.get(step)
                if rec is not None:
                    if rec.candidate != cand.key:
                        raise DatasetError(f"{path}: step {step} recorded {rec.candidate}, the "
                                           f"seed regenerates {cand.key}: another generator")
                else:
                    t = runner.measure(cand, settings.seed)
                    db.add(step, cand.key, cand.json, t, settings.seed, tag, phase, 0.0)
                n = step + 1
                if progress is not None and n % 50 == 0:
                    progress(slug(model, batch), n, len(recorded))
            if progress is not None:
                progress(slug(model, batch), n, len(recorded))
        finally:
            db.close()
        paths.append(path)
    return paths


# ---- reading back ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class KernelData:
    """Kernel samples of one hardware preset, with the hash of the records they came from."""

    samples: tuple[KernelSample, ...]
    hardware: str
    data_hash: str

    def __len__(self) -> int:
        return len(self.samples)

    def task(self, *tasks: str) -> KernelData:
        return self.subset([s for s in self.samples if s.task in tasks])

    def subset(self, samples: Sequence[KernelSample]) -> KernelData:
        return KernelData(tuple(samples), self.hardware, self.data_hash)

    def groups(self) -> dict[str, list[KernelSample]]:
        out: dict[str, list[KernelSample]] = {}
        for s in self.samples:
            if s.group:
                out.setdefault(s.group, []).append(s)
        return out

    def models(self) -> list[str]:
        return sorted({s.model for s in self.samples})

    def split(self, how: str, seed: int = 0, test: Sequence[str] = HELD_OUT,
              frac: float = 0.2) -> tuple[KernelData, KernelData]:
        """(train, test): `random` (a seeded share of groups and fusion samples) or
        `models` (every sample of the `test` models held out)."""
        if how == "models":
            held = set(test)
            missing = held - set(self.models())
            if missing:
                raise DatasetError(f"held-out model(s) {', '.join(sorted(missing))} not in the "
                                   "data")
            return (self.subset([s for s in self.samples if s.model not in held]),
                    self.subset([s for s in self.samples if s.model in held]))
        if how != "random":
            raise DatasetError(f"unknown split {how!r}: expected random or models")

        def unit(s: KernelSample) -> str:
            return s.group or f"{s.workload}|{s.sig_key}|{s.tile}|{s.flags}"

        units = sorted({unit(s) for s in self.samples})
        rng = np.random.default_rng(seed)
        chosen = {units[i] for i in rng.permutation(len(units))[:round(frac * len(units))]}
        return (self.subset([s for s in self.samples if unit(s) not in chosen]),
                self.subset([s for s in self.samples if unit(s) in chosen]))


def db_paths(where: str | Path | Sequence[str | Path]) -> list[Path]:
    items = [where] if isinstance(where, str | Path) else list(where)
    out: list[Path] = []
    for w in items:
        p = Path(w)
        if p.is_dir():
            out += sorted(p.glob("*.sqlite"))
        elif p.exists():
            out.append(p)
        else:
            raise DatasetError(f"{p}: no such records database or folder")
    if not out:
        raise DatasetError(f"no records database (*.sqlite) in {', '.join(map(str, items))}")
    return out


def load(where: str | Path | Sequence[str | Path], hardware: str | None = None) -> KernelData:
    """Every kernel sample of the records databases in `where` (files or folders)."""
    from superopt.xtat.records import RecordsDB
    from superopt.xtat.session import open_session

    samples: list[KernelSample] = []
    h = []
    hw_seen: set[str] = set()
    for path in db_paths(where):
        db = RecordsDB(path, None)
        try:
            wl = db.workload
            rows = db.measurements()
            configs = {m.candidate: db.config(m.candidate) for m in rows}
        finally:
            db.close()
        hw_seen.add(str(wl.get("hardware")))
        if hardware is not None and wl.get("hardware") != hardware:
            raise DatasetError(f"{path}: measured on TPU {wl.get('hardware')}, expected "
                               f"{hardware}")
        spec = {"model": wl["model"], "batch": wl.get("batch"), "hardware": wl["hardware"],
                "rules": wl.get("rules") or None, "allow_unproved": wl.get("allow_unproved")}
        session = open_session(spec)
        if session.graph.structural_hash != wl["graph"]:
            raise DatasetError(f"{path}: model {wl['model']!r} no longer builds the recorded "
                               "graph")
        name = slug(wl["model"], wl.get("batch"))
        model = str(wl["model"])
        pipe, runner, kc = session.pipeline, session.runner, session.sim.kernels
        built: dict[str, Any] = {}
        seen: set[tuple] = set()
        for m in rows:
            h.append(f"{name}:{m.step}:{m.candidate}:{m.runtime!r}:{m.noise_seed}")
            if not math.isfinite(m.runtime):
                continue
            cand = built.get(m.candidate)
            if cand is None:
                cfg = configs[m.candidate]
                cand = pipe.build(session.default, [PassConfig.from_json(cfg.get(n, {}))
                                                    for n in pipe.names])
                if cand.key != m.candidate:
                    raise DatasetError(f"{path}: step {m.step} rebuilds as {cand.key}, "
                                       f"recorded {m.candidate}")
                built[m.candidate] = cand
            final = cand.final
            if m.phase in ("tile", "flags") and m.strategy.startswith("dataset:"):
                _, base, site = m.strategy.split(":", 2)
                keys = [site]
                group = f"{name}|{m.phase}|{base}|{site}"
                task = m.phase
            else:
                keys = list(dict.fromkeys(final.sig_keys))
                group, task = "", "fusion"
            for key in keys:
                sig = final.signatures[final.sig_keys.index(key)]
                tile, flags = final.tiles[key], final.flags[key]
                ident = (key, tile, flags, group)
                if ident in seen:
                    continue
                seen.add(ident)
                cost = kc.cost(sig, tile, flags)
                if not cost.valid:
                    continue
                noise = runner.noise(m.noise_seed, key, tile, flags)
                samples.append(KernelSample(kc.intern(sig), key, tile, flags, cost.time * noise,
                                            cost.time, name, model, task, group))
    if len(hw_seen) > 1:
        raise DatasetError(f"records of several TPU presets ({', '.join(sorted(hw_seen))}): "
                           "load one preset at a time")
    return KernelData(tuple(samples), hardware or hw_seen.pop(), digest("\n".join(sorted(h)), 8))


__all__ = ["HELD_OUT", "DatasetError", "KernelData", "Settings", "candidates",
           "default_workloads", "generate", "load", "slug"]
