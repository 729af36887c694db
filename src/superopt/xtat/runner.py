"""Runners: the time of a candidate on the TPU simulator, exact or measured with noise.

A candidate's time is the sum of its kernels' times, each the simulator's cost of the
kernel's signature under its tile and flags (cached by signature, tile and flags in the
`Simulator`). Kernels sharing a signature share a choice, so the sum runs over distinct
signatures times their count; when only tiles or flags changed from a candidate whose
time is known, only the changed signatures are re-costed.

`measure` is what a profiled run reports: the sum of the kernels' measured times, each
the exact time times log-normal noise (sigma about 1.5%, as `tpu_sim.measure`) drawn from
the seed and the kernel's signature, tile and flags; `profile` is the per-kernel report
of the same run (a TPU profile names each kernel's time). A kernel configuration is
measured once per seed and its time reused wherever it recurs (XTAT caches kernel
measurements by kernel the same way), so two candidates that differ in one kernel differ
by that kernel's measured change, not by the whole program's noise; the same seed and
candidate always give the same number. `rejected` is what the compiler says before
anything runs: the kernels whose tile does not fit. `estimate` is what the default
compiler's analytical model predicts, with nothing run: a search may rank its proposals by
it at no cost in measurements (it ignores DMA efficiency and MXU shape, so it ranks, it
does not judge).
"""

from __future__ import annotations

import hashlib
import math

from superopt.tpu_sim import NOISE_SIGMA, Compiled, Config, Simulator, compile_with
from superopt.xtat.stage import Candidate


class SimRunner:
    name = "tpu_sim"

    def __init__(self, sim: Simulator, sigma: float = NOISE_SIGMA) -> None:
        self.sim = sim
        self.sigma = sigma
        self._noise: dict[tuple, float] = {}

    def time(self, candidate: Candidate) -> float:
        """The exact simulated time (inf when a kernel's tile does not fit): each distinct
        signature costed once, summed in kernel order as `simulate` does (bit-equal)."""
        final = candidate.final
        got = final.memo.get("time")
        if got is not None:
            return got
        kc = self.sim.kernels
        per: dict[str, float] = {}
        for key, sig in zip(final.sig_keys, final.signatures, strict=True):
            if key not in per:
                c = kc.cost(sig, final.tiles[key], final.flags[key])
                per[key] = c.time if c.valid else math.inf
        total = 0.0
        for key in final.sig_keys:
            total += per[key]
        final.memo["time"] = total
        final.memo["kernel_times"] = per
        return total

    def noise(self, seed: int, key: str, tile: object, flags: object) -> float:
        """The multiplicative noise of one kernel configuration's measurement."""
        k = (seed, key, tile, flags)
        got = self._noise.get(k)
        if got is None:
            if len(self._noise) > 1 << 20:
                self._noise.clear()
            h = hashlib.blake2b(repr(k).encode(), digest_size=16).digest()
            # Box-Muller on two 53-bit uniforms from the hash.
            u1 = (int.from_bytes(h[:8], "little") >> 11 | 1) / 2.0**53
            u2 = (int.from_bytes(h[8:], "little") >> 11) / 2.0**53
            z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
            got = self._noise[k] = math.exp(self.sigma * z)
        return got

    def profile(self, candidate: Candidate, seed: int) -> dict[str, float] | None:
        """What the profiler reports with the measurement: the measured time of one kernel
        of each signature (None when a kernel does not compile: nothing ran)."""
        if not math.isfinite(self.time(candidate)):
            return None
        final = candidate.final
        # Kept with the candidate: the tuner reads the profile of what it just measured.
        got = final.memo.get(("profile", seed))
        if got is None:
            per = final.memo["kernel_times"]
            got = final.memo[("profile", seed)] = {
                key: t * self.noise(seed, key, final.tiles[key], final.flags[key])
                for key, t in per.items()}
        return got

    def measure(self, candidate: Candidate, seed: int) -> float:
        """The profiled time of the candidate (module docstring): its kernels' measured
        times summed in kernel order."""
        noisy = self.profile(candidate, seed)
        if noisy is None:
            return math.inf
        total = 0.0
        for key in candidate.final.sig_keys:
            total += noisy[key]
        return total

    def estimate(self, candidate: Candidate) -> float:
        """The analytical roofline estimate of the candidate (the legacy default
        compiler's model): each kernel's `analytical_time` under its tile, summed (no
        measurement, no noise). Strategies order their moves by it; its thresholds
        (revisit's slack) were set on it."""
        final = candidate.final
        got = final.memo.get("estimate")
        if got is None:
            kc = self.sim.kernels
            per: dict[str, float] = {}
            got = 0.0
            for key, sig in zip(final.sig_keys, final.signatures, strict=True):
                if key not in per:
                    per[key] = kc.analytical_time(sig, final.tiles[key])
                got += per[key]
            final.memo["estimate"] = got
        return got

    def rejected(self, candidate: Candidate) -> frozenset[str]:
        """The signatures whose kernel the compiler rejects (its tile does not fit VMEM
        under its flags): known when compiling, before anything runs."""
        self.time(candidate)
        return frozenset(k for k, t in candidate.final.memo["kernel_times"].items()
                         if not math.isfinite(t))

    def config(self, candidate: Candidate) -> Config:
        """The candidate as a `tpu_sim.Config` of its rewritten graph."""
        final = candidate.final
        laid = final.laid
        tiles = {k.root: final.tiles[key]
                 for k, key in zip(final.partition.kernels, final.sig_keys, strict=True)}
        flags = {k.root: final.flags[key]
                 for k, key in zip(final.partition.kernels, final.sig_keys, strict=True)}
        return Config().with_(layouts=laid.layouts, fusion=final.fusion, tiles=tiles,
                              flags=flags)

    def compile(self, candidate: Candidate) -> Compiled:
        """Compile the candidate through the simulator's ordinary path (for validation)."""
        graph = candidate.stages[candidate.names.index("layout")].graph \
            if "layout" in candidate.names else candidate.stages[0].graph
        return compile_with(graph, self.config(candidate), self.sim.hw, sim=self.sim)


__all__ = ["SimRunner"]
