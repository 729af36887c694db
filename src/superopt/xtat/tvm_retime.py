"""Re-timing tuners' trials side by side with a reference program, after the search.

A trial's time in a tuning run is one measurement taken when the tuner made it. On a
shared machine one measurement of the same library moves by up to 1.6x within seconds
(regimes that last several measurements), so a comparison of "trials to reach the other
tuner's best" on those figures is decided partly by which tuner was measured in a quiet
moment. Re-timing separates the search from the measurement: every trial's program is
rebuilt after the run and timed in rounds that alternate it with one fixed reference
program of the kernel, and its figure is the median over the rounds of its time over the
reference's time beside it. Both tuners' trials (MetaSchedule's were timed by its own
runner process) are re-timed by the same code in the same process, so a slow regime,
which scales the two programs of a round alike, drops out of the ratio. Ratios from two
processes are not on one scale: the reference's own speed can differ between processes
more than a fast program's does.

- `ms_record_modules`: each record of a MetaSchedule JSON database as the scheduled
  module it measured (its trace replayed with its postprocessing), in file order.
- `Retimer`: paired re-timing against a reference module; programs already re-timed are
  answered from its cache (keyed by the module's structural hash).

TVM is imported inside functions only.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from superopt.xtat.tvm_kernels import TvmMeasure


def ms_record_modules(workload_lines: Iterable[str],
                      record_lines: Iterable[str]) -> list[Any | None]:
    """The scheduled IRModule of each tuning record of a MetaSchedule JSON database
    (`database_workload.json` and `database_tuning_record.json` as lines), in the order
    of the record file, which is the order the tuner committed its trials; None where
    the record's trace does not replay."""
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    workloads = [ms.database.Workload.from_json(json.loads(line))
                 for line in workload_lines if line.strip()]
    out: list[Any | None] = []
    for line in record_lines:
        if not line.strip():
            continue
        index, rec_json = json.loads(line)
        record = ms.database.TuningRecord.from_json(rec_json, workloads[index])
        try:
            sch = s_tir.Schedule(record.workload.mod)
            # The trace holds the postprocessors' steps too: the replay is the program
            # the runner built.
            record.trace.apply_to_schedule(sch, remove_postproc=False)
        except Exception:  # a record that no longer replays is not re-timed
            out.append(None)
            continue
        out.append(sch.mod)
    return out


class Retimer:
    """Times modules of one kernel in `rounds` paired rounds against `reference` (a
    module of the same kernel), alternating which of the two runs first; a module's
    figure is the median of its time over the reference's time in each round. Every
    reference timing is kept (`reference_s`): their median puts the ratios back in
    seconds. `key` names a module's content for the cache (default: TVM's structural
    hash)."""

    def __init__(self, measure: TvmMeasure, reference: Any, rounds: int = 3,
                 key: Callable[[Any], int] | None = None) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, not {rounds}")
        self.measure, self.rounds = measure, rounds
        self._key = key or _structural_hash
        self._ref_lib = measure.build(reference)[0]
        self.reference_s: list[float] = []
        self._cache: dict[int, float] = {}  # by structural hash of the module

    def ratio(self, mod: Any | None) -> float:
        """`mod`'s time over the reference's (median over the rounds); inf when it is
        None or does not build or run."""
        if mod is None:
            return math.inf
        key = self._key(mod)
        if key not in self._cache:
            self._cache[key] = self._paired(mod, self.rounds)
        return self._cache[key]

    def refine(self, mod: Any | None, rounds: int) -> float:
        """`mod`'s ratio from `rounds` new paired rounds (the cache is neither read nor
        written): a second, finer look at a program whose first figure is near the top,
        where the max over hundreds of three-round figures favours a lucky one."""
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, not {rounds}")
        return math.inf if mod is None else self._paired(mod, rounds)

    def _paired(self, mod: Any, rounds: int) -> float:
        """The median over `rounds` rounds of `mod`'s time over the reference's, the two
        run in alternating order; inf when `mod` does not build or run."""
        try:
            lib = self.measure.build(mod)[0]
            ratios = []
            for r in range(rounds):
                if r % 2 == 0:
                    ref = self.measure.run(self._ref_lib)
                    got = self.measure.run(lib)
                else:
                    got = self.measure.run(lib)
                    ref = self.measure.run(self._ref_lib)
                self.reference_s.append(ref)
                ratios.append(got / ref)
            return statistics.median(ratios)
        except Exception:  # the program as rebuilt here fails: no figure for it
            return math.inf


def _structural_hash(mod: Any) -> int:
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


__all__ = ["Retimer", "ms_record_modules"]
