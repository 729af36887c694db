"""Measuring candidates for real: each candidate's rewritten graph exported to ONNX and
run in onnxruntime with all of its own graph optimizations on (what users already run),
at a stated thread count.

A candidate is never timed alone. Its graph, the incumbent's (the best candidate so far)
and the incumbent's again as a second session run in paired rounds, each round all three
once in alternating order after a warm-up, so the runs of a round share the machine's
load at that moment; the candidate's time is the incumbent's recorded time divided by
the median per-round ratio. Whether a difference is real is decided by the A/A control
in the same loop (the incumbent against itself): a candidate counts as faster only when
the bootstrap 95% interval of its ratio lies above 1 and the ratio above the A/A
interval's top; otherwise it is reported at least as slow as the incumbent, so noise
never replaces the incumbent. The first measurement, the input against itself after a
thrown-away warm-up pass, sets the scale (the input's time) and is kept as the run's
noise model.

A measurement ends before its last round once the rounds so far leave the candidate no
way to be measured faster (`cannot_be_faster`: at 10 rounds, once 4 went the incumbent's
way), since a candidate that is not faster changes nothing but its place among the
finalists; a clearly slower candidate costs 4 rounds instead of 10. `stop_early=False`
(`tune --full-rounds`) runs every round.

A candidate onnxruntime turns into the incumbent's program (its own optimizer folds the
same batch norm, fuses the same bias, folds the same scale: `OrtTimer.same_program`,
`superopt.xtat.ortprogram`) is not timed at all: it is the incumbent, as a candidate with
the incumbent's graph is.

Candidates that are not faster all report the incumbent's time (or more), so many tie;
among ties the finalists are ranked by their paired ratio over the incumbent they were
measured against (`promise`, kept in the records' meta `ratios` so a resumed run ranks
the same), not by which came first: squeezenet b1 tied its input on 8 of 15 candidates.

The final pick (`pick`) is one more paired comparison with more rounds, the input, the
best measured candidate and the input again (the A/A control) in each round: the tuned
graph is kept only when it is faster by the same rule, so the result is never slower
than the input on the target. A session's own speed (where its buffers landed) is part
of what one comparison measures, and the A/A control sees only two sessions of the
input: T5 at batch 16 passed once at 1.037x (A/A interval top 1.029) and ran 0.999x
[0.983, 1.014] in three fresh sessions later. So a comparison that says faster is run
again in fresh sessions (`confirm`), and the tuned graph is kept only when the fresh
sessions' interval lies above 1 too and the rounds of both, pooled, say faster (not that
the fresh ones alone clear their own A/A band: bert_small's flattened norms, 1.06x in the
first, measured 1.036x [1.020, 1.054] in the second beside an A/A interval up to 1.045 on a
machine timing on both cores). A first comparison whose interval lies above 1 but whose
ratio stays inside its A/A interval is unsettled, neither faster nor noise on its rounds
(BERT-base at batch 16: 1.043x [1.017, 1.075] beside an A/A top of 1.045, the input
kept): it runs as many rounds again in the same sessions (`extend`), which narrows both
intervals, and is judged on all of them pooled. The noise model and the final comparison
go to the records database's meta table as they are made, so a resumed run repeats
neither.

The timer is injected (`Timer`: graphs -> `SideBySide`); `OrtTimer` is onnxruntime's,
tests pass a fake one.
"""

from __future__ import annotations

import gc
import math
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from superopt.ir.graph import Graph
from superopt.ir.memory import SMALL_BYTES, MemoryLimitError, available_bytes, human_bytes
from superopt.ir.types import ORT_DTYPES
from superopt.rewrite.check import SideBySide, StopRule, interleave
from superopt.xtat.stage import Candidate

if TYPE_CHECKING:
    from superopt.xtat.context import TuneContext
    from superopt.xtat.records import RecordsDB

ROUNDS = 10  # paired rounds per measurement
WARMUP = 2  # runs of each session before the rounds (allocator, first-call setup)
FINAL_ROUNDS = 20  # the final comparison's rounds: it decides what the user gets
LEVEL = 0.95  # confidence of every interval
SETTLE_ROUNDS = 3  # the thrown-away pass before the A/A control (`RealRunner.calibrate`)


class Timer(Protocol):
    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: StopRule | None = None) -> SideBySide:
        """Seconds per run of each graph, in paired alternating rounds (a graph listed
        twice runs as two sessions); `stop`, asked after each round, may end the rounds
        early (`superopt.rewrite.check.interleave`)."""


class TorchTimer:
    """Paired rounds in torch eager on `device` through superopt's torch backend (float32;
    `threads` intra-op threads on the CPU), in the shape `OrtTimer` returns: what the
    torch targets measure with. Each call lowers its graphs afresh (no session cache: a
    lowered program holds its weights on the device)."""

    def __init__(self, device: str = "cpu", threads: int = 1, seed: int = 0) -> None:
        self.device, self.threads, self.seed = device, threads, seed
        self.shared_slots = 0  # every slot is a program of its own (the report reads it)

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: StopRule | None = None) -> SideBySide:
        from superopt.rewrite.check import time_side_by_side

        return time_side_by_side(graphs, repeats=rounds, warmup=warmup, device=self.device,
                                 seed=self.seed, threads=self.threads, stop=stop)

    def clear(self) -> None:
        """Nothing is cached (the benchmarks call this between rows)."""


def weight_bytes(graph: Graph) -> int:
    """The bytes of `graph`'s sources (weights, inputs and constants) in their dtypes: what
    an exported model's initializers and feeds take."""
    return sum(n.type.nbytes for n in graph.nodes if n.is_source)


class OrtTimer:
    """Paired rounds in onnxruntime (ORT_ENABLE_ALL, `threads` intra-op threads, one
    inter-op thread). Sessions are cached by the graph's structural hash and slot (a graph
    listed twice gets two sessions: the A/A control runs the same model twice, not one
    session twice); a few are kept, the least recently used dropped.

    Memory bounds the cache too. Before a session is made, cached sessions the current
    call does not use are dropped until the machine has `BUILD_PEAK` times the graph's
    weight bytes free. When even then a call's sessions do not fit, each graph listed
    twice runs its first slot's session in both places (counted in `shared_slots`: that
    A/A control compares one session with itself); when one session of each does not
    fit, a MemoryLimitError says so."""

    KEEP = 4
    # A session's peak while it is made, in weight bytes: the exported model, the file
    # written from it and onnxruntime's loaded and pre-packed copies (Llama-3.2-1B with
    # 4.9 GB of weights: about 13 GB above the process's baseline while each session was
    # made, 4.9 GB once made).
    BUILD_PEAK = 3.0

    def __init__(self, providers: Sequence[str] = ("CPUExecutionProvider",),
                 threads: int = 1, seed: int = 0) -> None:
        self.providers = list(providers)
        self.threads = threads
        self.seed = seed
        # A model with more initializer bytes than this is loaded from a file, not bytes.
        from superopt.exporters.onnx import EXTERNAL_DATA_ABOVE

        self.inline_bytes = EXTERNAL_DATA_ABOVE
        self._sessions: OrderedDict[tuple[str, int], Callable[[], object]] = OrderedDict()
        # Sessions made but not yet warmed up: a call warms only these. A cached session
        # has run before, and warming the incumbent's two again before every measurement
        # cost 4 of a measurement's 36 runs (ResNeXt-50 at batch 16: 1.4 s each).
        self._cold: set[tuple[str, int]] = set()
        # By structural hash: the digest of the program onnxruntime made of the graph
        # (`superopt.xtat.ortprogram`), None where it was not saved.
        self._digests: dict[str, str | None] = {}
        # Graphs (by structural hash) that run as an ONNX file of their own instead of
        # their export: the user's model, when `tune` was given an .onnx file (`use_file`).
        self.files: dict[str, Path] = {}
        self.exported = 0  # graphs exported and loaded (a session each)
        self.shared_slots = 0  # second slots that ran the first slot's session (memory)
        self.small_bytes = SMALL_BYTES  # below this peak, memory is not asked about

    def use_file(self, graph: Graph, path: str | Path) -> bool:
        """Run `graph` as the ONNX file `path` (the file it was imported from) wherever it
        is timed, so that every comparison with it is with what the user runs: superopt's
        own export of an imported model can be faster or slower than the file (before
        f0e3c01, MobileNet-V2's 2.3x slower; `benchmarks/ort_roundtrip.py`). Only when
        the file's inputs are the graph's, by name and order, with the same or symbolic
        dimensions (the timer's feeds are the graph's); False, and nothing changes,
        otherwise."""
        import onnx

        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception:
            return False
        inits = {t.name for t in model.graph.initializer}
        ins = [i for i in model.graph.input if i.name not in inits]
        if [i.name for i in ins] != [n.attr("name") for n in graph.inputs]:
            return False
        for i, n in zip(ins, graph.inputs, strict=True):
            dims = i.type.tensor_type.shape.dim
            if len(dims) != n.type.rank or any(
                    d.HasField("dim_value") and d.dim_value != want
                    for d, want in zip(dims, n.type.shape, strict=True)):
                return False
        self.files[graph.structural_hash] = Path(path)
        self._digests.pop(graph.structural_hash, None)  # the file's program is another
        self._sessions = OrderedDict((k, v) for k, v in self._sessions.items()
                                     if k[0] != graph.structural_hash)
        return True

    def export_vs_file(self, graph: Graph, rounds: int, warmup: int) -> SideBySide | None:
        """The file `graph` runs as (`use_file`), superopt's export of `graph` and the
        file again, in paired rounds (ratio(0, 1) > 1: the export is faster); None when
        `graph` has no file."""
        h = graph.structural_hash
        if h not in self.files:
            return None
        keys = [(h, 0), (h, -1), (h, 1)]
        runs = [self._session(graph, slot, keys) for _, slot in keys]
        device = "cuda" if "CUDAExecutionProvider" in self.providers else "cpu"
        return interleave(runs, rounds, warmup, device, self.threads)

    def clear(self) -> None:
        """Drop every cached session (their memory goes back when nothing else holds
        them)."""
        self._sessions.clear()
        self._cold.clear()
        gc.collect()

    def _room(self, graph: Graph, pinned: Collection[tuple[str, int]]) -> bool:
        """Whether a session of `graph` can be made now, after dropping the cached
        sessions not in `pinned` as far as needed (class docstring)."""
        need = int(weight_bytes(graph) * self.BUILD_PEAK)
        if need < self.small_bytes:
            return True
        for key in list(self._sessions):
            if available_bytes() >= need:
                break
            if key not in pinned:
                del self._sessions[key]
                gc.collect()
        return available_bytes() >= need

    def _session(self, graph: Graph, slot: int,
                 pinned: Collection[tuple[str, int]] = ()) -> Callable[[], object]:
        key = (graph.structural_hash, slot)
        got = self._sessions.get(key)
        if got is not None:
            self._sessions.move_to_end(key)
            return got
        if not self._room(graph, {*pinned, key}):
            need = weight_bytes(graph) * self.BUILD_PEAK
            raise MemoryLimitError(
                f"an onnxruntime session of graph {graph.name!r} needs about "
                f"{human_bytes(need)} while it is made, more than the "
                f"{human_bytes(available_bytes())} of memory available")
        import onnxruntime as ort

        from superopt.exporters import onnx as export
        from superopt.ir import random_feeds

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        folder = None
        # Slot -1 is superopt's export even of a graph that runs as a file elsewhere.
        own = self.files.get(graph.structural_hash) if slot >= 0 else None
        model = None if own is not None else export.to_onnx(graph, seed=self.seed)
        if model is None:
            source: bytes | str = str(own)
        elif export.initializer_bytes(model) <= self.inline_bytes:
            source = model.SerializeToString()
        else:
            # Protobuf refuses a message over 2 GiB (Llama-3.2-1B's weights are 5 GB):
            # such a model is loaded from a file with its weights beside it, removed once
            # the session has read it (below).
            folder = tempfile.TemporaryDirectory(prefix="superopt_ort_",
                                                 ignore_cleanup_errors=True)
            source = str(export.write_model(model, Path(folder.name) / "model.onnx", 0))
        del model
        if folder is None and slot >= 0 and weight_bytes(graph) <= self.inline_bytes:
            # The program onnxruntime makes of the graph, digested as the session is made
            # (`same_program`); a model too large for one message is not saved again.
            from superopt.xtat.ortprogram import program_digest

            with tempfile.TemporaryDirectory(prefix="superopt_ort_") as scratch:
                sess, digest = program_digest(opts, source, self.providers, scratch)
            self._digests[graph.structural_hash] = digest
        else:
            sess = ort.InferenceSession(source, opts, providers=self.providers)
        if folder is not None:
            # The session holds its weights (read, or mapped: an unlinked file stays
            # readable while mapped), so the 5 GB copy goes now rather than with the
            # session: a run killed with SIGKILL, as a long tuning may be, leaves no
            # folder behind. Where the system refuses to remove a mapped file, the
            # folder stays with the session as before.
            folder.cleanup()
            if not Path(folder.name).exists():
                folder = None
        feeds = random_feeds(graph, seed=self.seed)
        # The reference draws float64; the model's inputs have their own types.
        mine = {i.name: np.asarray(feeds[i.name], dtype=ORT_DTYPES.get(i.type, None))
                for i in sess.get_inputs()}
        self.exported += 1

        def run() -> object:
            _ = folder  # kept with the session
            return sess.run(None, mine)

        self._sessions[key] = run
        self._cold.add(key)
        while len(self._sessions) > self.KEEP:
            self._sessions.popitem(last=False)
        return run

    def same_program(self, a: Graph, b: Graph) -> bool:
        """Whether onnxruntime makes one program of both graphs: the same kernels on the
        same shapes after its own graph optimizations (`superopt.xtat.ortprogram`), so
        that timing one against the other measures only noise. Makes a session of each
        graph that has none (the measurement that follows uses it)."""
        digests = []
        for g in (a, b):
            if g.structural_hash not in self._digests:
                self._session(g, 0, [(a.structural_hash, 0), (b.structural_hash, 0)])
            digests.append(self._digests.get(g.structural_hash))
        return digests[0] is not None and digests[0] == digests[1]

    def outputs(self, graph: Graph) -> list[np.ndarray]:
        """The graph's outputs in onnxruntime on the timer's inputs (value checks)."""
        return list(self._session(graph, 0)())  # type: ignore[call-overload]

    def __call__(self, graphs: Sequence[Graph], rounds: int, warmup: int,
                 stop: StopRule | None = None) -> SideBySide:
        seen: dict[str, int] = {}
        keys = []
        for g in graphs:
            slot = seen.get(g.structural_hash, 0)
            seen[g.structural_hash] = slot + 1
            keys.append((g.structural_hash, slot))
        try:
            runs = [self._session(g, k[1], keys) for g, k in zip(graphs, keys, strict=True)]
        except MemoryLimitError:
            # Two sessions of one graph do not fit beside the others: each graph of the
            # call runs as its first slot's session (the second slots may now be dropped).
            firsts = [(h, 0) for h, _ in keys]
            if firsts == keys:
                raise
            runs = [self._session(g, 0, firsts) for g in graphs]
            self.shared_slots += len(keys) - len(set(firsts))
            keys = firsts
        for key, run in zip(keys, runs, strict=True):
            if key in self._cold:  # a new session: allocator and first-call setup
                for _ in range(warmup):
                    run()
                self._cold.discard(key)
        device = "cuda" if "CUDAExecutionProvider" in self.providers else "cpu"
        return interleave(runs, rounds, 0, device, self.threads, stop)


@dataclass(frozen=True)
class Noise:
    """The A/A control: the input against itself."""

    input_s: float  # the input's median time (the scale every later time is on)
    aa: float  # median per-round ratio (1 when there is no bias between two sessions)
    aa_ci: tuple[float, float]
    rounds: int


@dataclass(frozen=True)
class Paired:
    """One candidate measured against the incumbent."""

    candidate: str
    incumbent: str
    ratio: float  # incumbent time / candidate time (> 1: the candidate is faster)
    ci: tuple[float, float]
    aa: float  # the incumbent against itself in the same rounds
    aa_ci: tuple[float, float]
    verdict: str  # "faster", "slower" or "noise"
    reported_s: float
    rounds: int = ROUNDS  # rounds run: fewer when the rest could not have made it faster
    extended: bool = False  # unsettled after its rounds, it ran as many again (pooled)


@dataclass(frozen=True)
class Final:
    """The final paired comparison of the best measured candidate with the input."""

    candidate: str
    input_s: float  # median
    tuned_s: float  # median
    speedup: float  # input time / tuned time, median per round
    ci: tuple[float, float]
    aa: float  # input against itself in the same rounds
    aa_ci: tuple[float, float]
    rounds: int
    kept: bool  # the tuned graph is measurably faster: it is the result
    # When the first comparison said faster it ran again in fresh sessions
    # (`RealRunner._confirmed`): the figures above are then both pooled, and this holds
    # each one's ("first", "fresh": speedup, ci, aa, aa_ci, input_s, tuned_s); else None.
    again: dict[str, Any] | None = None
    # The first comparison was unsettled (`unsettled`) and ran as many rounds again in
    # the same sessions; its figures (and `rounds`) pool both.
    extended: bool = False

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Final:
        return cls(**{**d, "ci": tuple(d["ci"]), "aa_ci": tuple(d["aa_ci"])})


def verdict(ratio: float, ci: tuple[float, float], aa_ci: tuple[float, float]) -> str:
    """Faster when the interval of `ratio` lies above 1 and the ratio above the A/A
    interval's top; slower in the mirror case; otherwise noise."""
    if ci[0] > 1.0 and ratio > aa_ci[1]:
        return "faster"
    if ci[1] < 1.0 and ratio < aa_ci[0]:
        return "slower"
    return "noise"


def unsettled(f: Final) -> bool:
    """A comparison whose interval lies above 1 but whose ratio does not clear the A/A
    interval's top: more rounds narrow both intervals and may settle it either way
    (BERT-base at batch 16: 1.043x [1.017, 1.075] beside an A/A top of 1.045)."""
    return _unsettled(f.speedup, f.ci, f.aa_ci)


def _unsettled(ratio: float, ci: tuple[float, float], aa_ci: tuple[float, float]) -> bool:
    # `verdict` says noise here (faster needs the ratio above the A/A top), never faster.
    return ci[0] > 1.0 and ratio <= aa_ci[1]


def cannot_be_faster(slower: int, rounds: int, level: float = LEVEL) -> bool:
    """Whether a measurement of `rounds` paired rounds, `slower` of which have already
    gone the incumbent's way (the candidate no faster within the round), can no longer
    say faster however the rest go (`verdict` asks the bootstrap interval of the median
    ratio to lie above 1).

    Even if every other round favours the candidate, a `slower / rounds` share of its
    rounds do not, and a resampled median is at most 1 whenever more than half of its
    draws are such rounds: the interval's bottom is at or below 1 once that happens in
    more than (1 - level) / 2 of the resamples. Asked for twice that share, so the
    bootstrap's own sampling (2,000 resamples) cannot tip it: at 10 rounds, 4 slower
    rounds give 16.6%, 3 give 4.7% (not enough to stop)."""
    if rounds < 1 or slower < 1:
        return False
    need = rounds // 2 + 1
    p = min(1.0, slower / rounds)
    tail = sum(math.comb(rounds, k) * p ** k * (1.0 - p) ** (rounds - k)
               for k in range(need, rounds + 1))
    return tail >= 2.0 * (1.0 - level) / 2.0


def _pair(t: SideBySide, i: int, j: int) -> tuple[float, tuple[float, float]]:
    return t.ratio(i, j), t.ratio_ci(i, j, level=LEVEL)


def _final_of(candidate: str, t: SideBySide, rounds: int) -> Final:
    """The comparison `t` (baseline, pick, baseline again) as a Final, kept when the pick
    is faster by `verdict`."""
    speedup, ci = _pair(t, 0, 1)
    aa, aa_ci = _pair(t, 0, 2)
    return Final(candidate, t.medians[0], t.medians[1], speedup, ci, aa, aa_ci, rounds,
                 verdict(speedup, ci, aa_ci) == "faster")


Rounds = tuple[tuple[float, ...], ...]  # per graph, each round's time


def _pooled(times: Rounds, t: SideBySide) -> SideBySide:
    """The rounds `times` and `t`'s, as one comparison."""
    return SideBySide.of([a + b for a, b in zip(times, t.times, strict=True)], t.device,
                         t.threads)


def _figures(f: Final) -> dict[str, Any]:
    """One comparison's figures, as `Final.again` keeps them."""
    return {"speedup": f.speedup, "ci": list(f.ci), "aa": f.aa, "aa_ci": list(f.aa_ci),
            "input_s": f.input_s, "tuned_s": f.tuned_s}


class RealRunner:
    """The tuner's runner on a real target (module docstring). `graph_of` gives the graph
    a candidate runs (the rewritten graph, weight-only parts left to onnxruntime's
    constant folding)."""

    name = "onnxruntime"
    real = True

    def __init__(self, graph_of: Callable[[Candidate], Graph], timer: Timer,
                 rounds: int = ROUNDS, warmup: int = WARMUP,
                 final_rounds: int = FINAL_ROUNDS, confirm: bool = True,
                 stop_early: bool = True, extend: bool = True) -> None:
        self.graph_of = graph_of
        self.timer = timer
        self.rounds, self.warmup, self.final_rounds = rounds, warmup, final_rounds
        self.confirm = confirm  # a final comparison that says faster is run again
        # An unsettled measurement or final comparison (`unsettled`) runs as many rounds
        # again, pooled.
        self.extend = extend
        # A candidate's measurement ends once it can no longer say faster
        # (`cannot_be_faster`): a second or more of a large model's time per round.
        self.stop_early = stop_early
        self.ctx: TuneContext | None = None
        self.db: RecordsDB | None = None
        self.noise: Noise | None = None
        self.final: Final | None = None
        # The input kept and it ran as the user's file: that file against superopt's own
        # export of the same graph (`pick`); kept when the export is measurably faster.
        self.export: Final | None = None
        self.log: list[Paired] = []  # this process's paired measurements
        self.timed = 0  # paired comparisons run (A/A and final included)
        self.not_timed = 0  # candidates measured as the incumbent's program, untimed
        self._untimed: set[str] = set()  # keys of candidates measured without timing
        self._ratios: dict[str, float] = {}  # candidate key -> its paired ratio (`promise`)

    def bind(self, ctx: TuneContext, db: RecordsDB | None) -> None:
        """Measure against `ctx`'s incumbent; keep the noise model and the final
        comparison in `db` (and read them back from it on a resumed run)."""
        self.ctx, self.db = ctx, db
        if db is not None:
            got = db.get_meta("noise")
            if got is not None:
                self.noise = Noise(got["input_s"], got["aa"], tuple(got["aa_ci"]),
                                   got["rounds"])
            self._ratios = dict(db.get_meta("ratios") or {})

    def settings(self) -> dict[str, Any]:
        # Early stops are named only when on: records made before them ran every round,
        # and resume with --full-rounds.
        return {"rounds": self.rounds, "warmup": self.warmup,
                "final_rounds": self.final_rounds, "level": LEVEL, "confirm": self.confirm,
                **({"stop_early": True} if self.stop_early else {})}

    def _time(self, graphs: Sequence[Graph], rounds: int,
              stop: StopRule | None = None) -> SideBySide:
        self.timed += 1
        if stop is None:  # timers written before early stops need not take one
            return self.timer(graphs, rounds, self.warmup)
        return self.timer(graphs, rounds, self.warmup, stop=stop)

    def _same(self, a: Graph, b: Graph) -> bool:
        """The timer says the runtime makes one program of both (`OrtTimer.same_program`;
        a timer that cannot tell says no)."""
        same = getattr(self.timer, "same_program", None)
        return bool(same is not None and same(a, b))

    def _hopeless(self, times: Sequence[Sequence[float]]) -> bool:
        """The stop rule of `measure`'s loop (incumbent, candidate, incumbent again)."""
        slower = sum(1 for a, b in zip(times[0], times[1], strict=False) if a <= b)
        return cannot_be_faster(slower, self.rounds)

    def calibrate(self, graph: Graph) -> Noise:
        """The A/A control of the input graph (once per run)."""
        if self.noise is None:
            # Thrown away: fresh sessions' first runs pay for page faults and allocator
            # growth (bert_small b1: an A/A interval of [0.80, 1.91] and twice the input's
            # later time when this pass was kept). A few runs past the warm-up settle
            # that; a full pass cost a large model 14 more runs (ResNeXt-50 at batch 16:
            # 20 s of a 240 s benchmark row).
            self._time([graph, graph], min(self.rounds, SETTLE_ROUNDS))
            t = self._time([graph, graph], self.rounds)
            aa, aa_ci = _pair(t, 0, 1)
            self.noise = Noise(t.medians[0], aa, aa_ci, self.rounds)
            if self.db is not None:
                self.db.put_meta("noise", asdict(self.noise))
        return self.noise

    def measure(self, candidate: Candidate, seed: int = 0) -> float:
        """The candidate's time on the incumbent's scale (module docstring); the first
        measurement (the input) calibrates the noise model."""
        graph = self.graph_of(candidate)
        ctx = self.ctx
        if ctx is None or ctx.best is None:
            return self.calibrate(graph).input_s
        self.calibrate(self.graph_of(ctx.default))
        inc_graph = self.graph_of(ctx.best)
        inc_s = ctx.best_time
        if graph.structural_hash == inc_graph.structural_hash:
            self._untimed.add(candidate.key)
            return inc_s  # the same program: nothing to time, and never an improvement
        if self._same(inc_graph, graph):
            self.not_timed += 1
            self._untimed.add(candidate.key)
            return inc_s
        # The incumbent twice: the A/A control of this very loop, since a shared machine's
        # load changes between measurements more than within one.
        graphs = [inc_graph, graph, inc_graph]
        stop = self._hopeless if self.stop_early else None
        t = self._time(graphs, self.rounds, stop)
        ratio, ci = _pair(t, 0, 1)
        aa, aa_ci = _pair(t, 0, 2)
        extended = self.extend and _unsettled(ratio, ci, aa_ci)
        if extended:  # as the final comparison does (`unsettled`), on the pooled rounds
            t = _pooled(t.times, self._time(graphs, self.rounds, stop))
            ratio, ci = _pair(t, 0, 1)
            aa, aa_ci = _pair(t, 0, 2)
        v = verdict(ratio, ci, aa_ci)
        reported = inc_s / ratio if v == "faster" else max(inc_s, inc_s / ratio)
        self.log.append(Paired(candidate.key, ctx.best.key, ratio, ci, aa, aa_ci, v, reported,
                               len(t.times[0]), extended))
        self._ratios[candidate.key] = ratio
        if self.db is not None:
            self.db.put_meta("ratios", self._ratios)
        return reported

    def promise(self, candidate: Candidate) -> float:
        """How far ahead of its incumbent `candidate` measured: its paired ratio (1.0 for
        the input and for candidates not timed), the tuner's tie-break among finalists
        that report the same time (module docstring)."""
        return self._ratios.get(candidate.key, 1.0)

    def untimed(self, candidate: Candidate) -> bool:
        """Whether this process measured `candidate` without timing it (the incumbent's
        graph or program): the tuner does not count it against the budget."""
        return candidate.key in self._untimed

    def pick(self, default: Candidate, ranked: Sequence[Candidate]) -> tuple[Candidate, float]:
        """The final comparison (module docstring): `ranked` are the finalists, fastest
        measured first; the first whose graph differs from the input's is compared."""
        base = self.graph_of(default)

        def differs(c: Candidate) -> bool:  # another graph, and another program
            g = self.graph_of(c)
            return g.structural_hash != base.structural_hash and not self._same(base, g)

        best = next((c for c in ranked if differs(c)), None)
        noise = self.calibrate(base)
        if best is None:
            return default, self._export_or_file(base, noise.input_s)
        final = self.final
        if final is None or final.candidate != best.key:
            got = self.db.get_meta("final") if self.db is not None else None
            if got is not None and got["candidate"] == best.key:
                final = Final.from_json(got)
            else:
                final = self._final(best, base)
                if self.db is not None:
                    self.db.put_meta("final", asdict(final))
        self.final = final
        if final.kept:
            return best, final.tuned_s
        return default, self._export_or_file(base, final.input_s)

    def _final(self, best: Candidate, base: Graph) -> Final:
        """The input, the pick and the input again in paired rounds, confirmed in fresh
        sessions when faster (`_confirmed`)."""
        graphs = [base, self.graph_of(best), base]
        return self._confirmed(best.key, "final",
                               lambda: self._time(graphs, self.final_rounds))

    def _confirmed(self, candidate: str, key: str, run: Callable[[], SideBySide]) -> Final:
        """A final comparison (`run`: the baseline, the pick and the baseline again) and,
        when it says faster, the same again in fresh sessions (module docstring). Kept
        when the fresh sessions' own interval lies above 1 and the rounds of both, pooled,
        say faster by `verdict`; the Final's figures are then the pooled ones, each
        comparison's in `again`. A first comparison that is unsettled (`unsettled`: its
        interval above 1, its ratio inside the A/A band) runs as many rounds again in the
        same sessions first, and is judged on both pooled (`extend`). The first is kept in
        the records (meta `KEY_first`, with its rounds) before anything else runs, so a
        run killed between them repeats none."""
        got = self.db.get_meta(f"{key}_first") if self.db is not None else None
        if got is not None and got["candidate"] == candidate:
            first_t = tuple(tuple(x) for x in got.pop("times"))
            first = Final.from_json(got)
        else:
            t = run()
            first_t = t.times
            first = self._first(candidate, key, first_t, t, extended=False)
        if self.extend and unsettled(first) and not first.extended:
            more = run()
            first_t = _pooled(first_t, more).times
            first = self._first(candidate, key, first_t, more, extended=True)
        if not (first.kept and self.confirm):
            return first
        clear = getattr(self.timer, "clear", None)
        if clear is not None:
            clear()  # fresh sessions of every graph
        fresh = run()
        both = _final_of(candidate, _pooled(first_t, fresh),
                         len(first_t[0]) + len(fresh.times[0]))
        again = _final_of(candidate, fresh, self.final_rounds)
        return replace(both, kept=both.kept and again.ci[0] > 1.0, extended=first.extended,
                       again={"first": _figures(first), "fresh": _figures(again)})

    def _first(self, candidate: str, key: str, times: Rounds, last: SideBySide,
               extended: bool) -> Final:
        """The first comparison of `_confirmed` from its rounds `times` (`last`: its last
        timing), kept in the records with them."""
        first = replace(_final_of(candidate, SideBySide.of(times, last.device, last.threads),
                                  len(times[0])), extended=extended)
        if self.db is not None:
            self.db.put_meta(f"{key}_first", {**asdict(first), "times": times})
        return first

    def _export_or_file(self, base: Graph, input_s: float) -> float:
        """The input is the result. When it ran as the user's file, superopt's export of
        it is a finalist too (the round trip alone can be faster: EfficientNet-B0's
        1.10x, `benchmarks/ort_roundtrip.py`): timed against the file as the final
        comparison is, kept in the records like it, and the result's time is the
        export's when it is measurably faster."""
        versus = getattr(self.timer, "export_vs_file", None)
        if versus is None or base.structural_hash not in getattr(self.timer, "files", {}):
            return input_s
        got = self.db.get_meta("export") if self.db is not None else None
        if got is not None:
            self.export = Final.from_json(got)
        else:
            def run() -> SideBySide:
                self.timed += 1
                return versus(base, self.final_rounds, self.warmup)

            self.export = self._confirmed("superopt export", "export", run)
            if self.db is not None:
                self.db.put_meta("export", asdict(self.export))
        return self.export.tuned_s if self.export.kept else input_s

    def time(self, candidate: Candidate) -> float:
        """The candidate's time as the final comparison measured it (the input's and the
        pick's), else as it was reported when measured."""
        f = self.final
        if f is not None and self.ctx is not None:
            if candidate.key == self.ctx.default.key:
                return f.input_s
            if candidate.key == f.candidate:
                return f.tuned_s
        if self.ctx is not None and candidate.key == self.ctx.default.key and self.noise:
            return self.noise.input_s
        for p in reversed(self.log):
            if p.candidate == candidate.key:
                return p.reported_s
        return math.nan


__all__ = ["FINAL_ROUNDS", "LEVEL", "ROUNDS", "WARMUP", "Final", "Noise", "OrtTimer",
           "Paired", "RealRunner", "Timer", "TorchTimer", "cannot_be_faster", "unsettled",
           "verdict", "weight_bytes"]
