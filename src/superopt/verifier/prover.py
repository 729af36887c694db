"""The prover: per rule, random testing first, then a Z3 proof per output.

Outcomes (DESIGN.md section 6):

- REFUTED: the random tester found valid shapes, attributes and inputs where the two
  sides differ in the float64 reference semantics (or have different output shapes);
  the counterexample is reported. Z3 is not asked.
- PROVED: for every output, Z3 showed `premise and src != tgt` unsatisfiable from the
  validated axioms; the axioms in the unsat core and the time are reported. Three more
  checks guard against a vacuous proof (a premise nothing satisfies proves anything):
  the premise (condition, typing of both sides, definedness of computed attributes) is
  satisfiable with a model in the quantifier-free shape theory; Z3 cannot derive `false`
  from the premise and the axioms of the proof without the goal; and the random tester ran
  at least one concrete, well-typed instance on which both sides agree.
- INVALID: the rule has no instance: its premise is unsatisfiable, its target never
  type-checks where its source does, or the proof was vacuous. The reason says which.
- UNKNOWN: anything else (time limit, the axioms do not imply the rule, an op or
  condition the encoding cannot express, no concrete instance found to confirm a proof).
  Never counted as proved.

Axioms are selected per rule: an axiom direction is used once every function symbol of
its trigger can occur (symbols of the rule, closed under what selected axioms introduce),
and the shape theory of those symbols comes with them. Z3 runs with model-based
quantifier instantiation off: e-matching on the explicit triggers either finds the proof
or saturates, which then reads as "the axioms do not imply the rule".
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import z3

from superopt.ir.errors import IRError
from superopt.substitutions.rule import ProofStatus, Rule
from superopt.substitutions.text import format_rule, parse_rule
from superopt.verifier.axioms import Axiom, Payload, compile_axioms, from_payload, payload
from superopt.verifier.encoding import GroundRule, QAxiom, encode_rule
from superopt.verifier.sampler import (
    SampleReport,
    assert_all,
    premise_model,
    random_test,
    unique_instance,
)
from superopt.verifier.shapes import (
    FuncKey,
    env,
    general_axioms,
    general_ground,
    ground_facts,
    shape_axioms,
    subterms,
)
from superopt.verifier.zvalues import Unsupported

PROVED, REFUTED, UNKNOWN, INVALID = "proved", "refuted", "unknown", "invalid"
OUTCOMES = (PROVED, REFUTED, INVALID, UNKNOWN)


@dataclass(frozen=True)
class VerifyOptions:
    timeout_s: float = 10.0  # Z3 time limit per rule output
    samples: int = 12  # well-typed instances the random tester runs per rule
    test_budget_s: float = 5.0  # time limit of the random tester per rule
    seed: int = 0
    # Z3 runs per output, seeds seed, seed + 1, ..., each with timeout_s: E-matching time
    # on deep rules is heavy-tailed in the seed (starter.rules' fold_vgg_block: 13-15 s on
    # some seeds, over 150 s on others), so fresh seeds beat one long run.
    restarts: int = 1


@dataclass(frozen=True)
class OutputProof:
    index: int
    state: str  # proved | unknown
    axioms: tuple[str, ...] = ()
    time_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class RuleResult:
    """Everything known about one rule after verification."""

    name: str
    text: str
    state: str
    outputs: tuple[OutputProof, ...] = ()
    counterexample: dict[str, Any] | None = None
    reason: str = ""
    test: SampleReport = field(default_factory=SampleReport)
    time_s: float = 0.0
    prove_time_s: float = 0.0
    timeout_s: float | None = None
    cpu_s: float = 0.0  # CPU time of the process that verified the rule
    n_outputs: int = 1  # outputs of the rule (a refuted rule has no per-output proofs)
    location: str = ""  # file:line or pb rule index, where the reader knows it
    shapes: str = ""  # which shapes the verdict holds for
    premise: str = ""  # Z3's verdict on the premise alone, with a model where sat

    @property
    def axioms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a for o in self.outputs for a in o.axioms))

    @property
    def shape_note(self) -> str:
        t = self.test
        if self.state == INVALID:
            return ""  # the reason already says what is wrong with the shapes
        if t.error:
            return t.error
        if t.source_only:
            return (f"target does not type-check on {t.source_only} of {t.source_checked} "
                    f"sampled instances where the source does, e.g. {t.source_only_example}")
        if t.instances == 0 and self.state != REFUTED:
            return "no well-typed instance found by the sampler"
        return ""

    def status(self) -> ProofStatus:
        return ProofStatus(state=self.state, axioms=self.axioms, time_s=round(self.time_s, 4),
                           counterexample=self.counterexample, reason=self.reason,
                           timeout_s=self.timeout_s)

    def to_json(self) -> dict[str, Any]:
        t = self.test
        return {
            "name": self.name, "rule": self.text, "state": self.state, "reason": self.reason,
            "location": self.location, "n_outputs": self.n_outputs,
            "verdict_shapes": self.shapes, "premise": self.premise,
            "axioms": list(self.axioms), "time_s": round(self.time_s, 4),
            "prove_time_s": round(self.prove_time_s, 4), "test_time_s": round(t.time_s, 4),
            "cpu_s": round(self.cpu_s, 4),
            "timeout_s": self.timeout_s,
            "outputs": [{"index": o.index, "state": o.state, "axioms": list(o.axioms),
                         "time_s": round(o.time_s, 4), "reason": o.reason}
                        for o in self.outputs],
            "testing": {"instances": t.instances, "source_checked": t.source_checked,
                        "source_only": t.source_only,
                        "outside_domain": t.outside, "proposals": t.proposals,
                        "modp_only": t.modp_only, "error": t.error},
            "shapes": self.shape_note,
            "counterexample": self.counterexample,
        }


class Prover:
    """Compiles a set of axioms once and verifies rules against it (one per process)."""

    def __init__(self, axioms: Sequence[Axiom], options: VerifyOptions = VerifyOptions()) -> None:
        self.axioms = list(axioms)
        self.options = options
        self.e = env()
        self.compiled, self.skipped = compile_axioms(self.axioms)
        self._general = general_axioms(self.e)

    def select(self, keys: set[FuncKey], exclude: set[str]) -> tuple[list[QAxiom], set[FuncKey]]:
        keys = set(keys)
        chosen: list[QAxiom] = []
        todo = [q for q in self.compiled if q.name not in exclude]
        changed = True
        while changed:
            changed = False
            rest = []
            for q in todo:
                if q.trigger_keys <= keys:
                    chosen.append(q)
                    if not q.keys <= keys:
                        keys |= q.keys
                        changed = True
                else:
                    rest.append(q)
            todo = rest
        return chosen, keys

    def premise_check(self, g: GroundRule) -> tuple[z3.CheckSatResult, str]:
        """Is the rule's premise satisfiable? Z3 on the quantifier-free shape theory
        instantiated on the rule's terms (what the sampler solves, without its bounds),
        with a short description of a model when it is."""
        e = self.e
        s = z3.Solver()
        s.set("timeout", max(1, int(min(self.options.timeout_s, 5.0) * 1000)))
        for t in subterms(e, [*g.sources, *g.targets]):
            if e.key_of(t) is not None:
                assert_all(s, ground_facts(e, t))
            assert_all(s, general_ground(e, t))
        assert_all(s, g.premise(e))
        r = s.check()
        if r != z3.sat:
            return r, s.reason_unknown() if r == z3.unknown else ""
        m = s.model()
        parts = []
        for name, x in g.tensors.items():
            rank = m.eval(e.rank(x), model_completion=True)
            if not z3.is_int_value(rank):
                continue
            dims = [m.eval(e.dim(x, k), model_completion=True) for k in range(rank.as_long())]
            parts.append(f"?{name}: {[d.as_long() if z3.is_int_value(d) else str(d) for d in dims]}")
        return r, ", ".join(parts)

    def _attempt(self, g: GroundRule, src: z3.ExprRef, tgt: z3.ExprRef, chosen: list[QAxiom],
                 keys: set[FuncKey], seed: int, ground: bool = False
                 ) -> tuple[z3.Solver, z3.CheckSatResult, dict[int, str]]:
        """One Z3 run on `src != tgt`: the solver, its answer and the axiom literals' names.
        `ground`: with the shape theory of the rule's own terms at every dim index too."""
        e = self.e
        s = z3.Solver()
        s.set("timeout", max(1, int(self.options.timeout_s * 1000)))
        # E-matching only: without auto-configuration Z3 stops as soon as the
        # triggers are saturated instead of restarting on a satisfiable goal.
        s.set("auto_config", False)
        s.set("smt.mbqi", False)
        s.set("random_seed", seed)
        lits: list[z3.BoolRef] = []
        names: dict[int, str] = {}
        for k, q in enumerate(chosen):
            lit = z3.Bool(f"axiom!{k}")
            s.add(z3.Implies(lit, q.formula))
            lits.append(lit)
            names[lit.get_id()] = q.name
        for key in sorted(keys):
            assert_all(s, shape_axioms(e, key))
        assert_all(s, self._general)
        assert_all(s, g.premise(e))
        if ground:
            for t in subterms(e, [*g.sources, *g.targets]):
                if e.key_of(t) is not None:
                    assert_all(s, ground_facts(e, t))
        # The goal behind a literal of its own, so that the same solver can be asked
        # afterwards whether the premise alone is contradictory.
        goal = z3.Bool("goal!")
        s.add(z3.Implies(goal, src != tgt))
        return s, s.check(*lits, goal), names

    def prove(self, g: GroundRule, exclude: set[str] = frozenset()) -> list[OutputProof]:
        e = self.e
        chosen, keys = self.select(g.keys(e), exclude)
        outs = []
        for i, (src, tgt) in enumerate(zip(g.sources, g.targets, strict=True)):
            t0 = time.perf_counter()
            for attempt in range(max(1, self.options.restarts)):
                s, r, names = self._attempt(g, src, tgt, chosen, keys, self.options.seed + attempt)
                why = s.reason_unknown() if r == z3.unknown else ""
                if "quantifiers" in why:
                    # Saturated: once more with the rule's own terms' shape theory at every
                    # dim index, as the premise check has it. The quantified theory gives a
                    # term's facts at index i only once dim(term, i) occurs, and an axiom's
                    # condition may need one no term mentions (ewadd(concat 0 x1 x2,
                    # concat 0 x3 x1) where dim(x1,0) == dim(x2,0) gives dim(x3,0) ==
                    # dim(x1,0) from the sum's broadcasting at axis 0 alone). Only then:
                    # on rules proved without them they made proofs up to 7x slower.
                    s, r, names = self._attempt(g, src, tgt, chosen, keys,
                                                self.options.seed + attempt, ground=True)
                    why = s.reason_unknown() if r == z3.unknown else ""
                if "timeout" not in why and "canceled" not in why:
                    break  # proved, a model, or saturated: another seed changes nothing
            dt = time.perf_counter() - t0
            if r == z3.unsat:
                core_lits = [c for c in s.unsat_core() if c.get_id() in names]
                core = [names[c.get_id()] for c in core_lits]
                vacuous = s.check(*core_lits)
                dt = time.perf_counter() - t0
                if vacuous == z3.unsat:
                    outs.append(OutputProof(i, INVALID, (), dt, "vacuous proof: Z3 derives "
                                            "false from the premise and the axioms alone "
                                            "(the rule's premise is contradictory)"))
                    continue
                outs.append(OutputProof(i, PROVED, tuple(dict.fromkeys(core)), dt))
            elif r == z3.sat:
                # Cannot happen with sound axioms unless the premise is satisfiable by
                # terms the axioms do not constrain; still not a refutation.
                outs.append(OutputProof(i, UNKNOWN, (), dt, "Z3 found a model of the "
                                        "axioms where the sides differ (incomplete axioms)"))
            else:
                why = s.reason_unknown()
                if "timeout" in why or "canceled" in why:
                    reason = f"time limit of {self.options.timeout_s:g} s reached"
                    if self.options.restarts > 1:
                        reason += f" on each of {self.options.restarts} seeds"
                elif "quantifiers" in why:
                    reason = ("not implied by the axioms (quantifier instantiation saturated "
                              f"after {len(chosen)} axiom directions)")
                else:
                    reason = f"Z3: {why}"
                outs.append(OutputProof(i, UNKNOWN, (), dt, reason))
        return outs

    def verify(self, rule: Rule, exclude: set[str] = frozenset()) -> RuleResult:
        c0 = time.process_time()
        result = self._verify(rule, exclude)
        loc = rule_location(rule)
        return replace(result, cpu_s=time.process_time() - c0, n_outputs=rule.outputs,
                       location=result.location or loc,
                       shapes=result.shapes or verdict_shapes(rule))

    def _verify(self, rule: Rule, exclude: set[str]) -> RuleResult:
        t0 = time.perf_counter()
        o = self.options
        text = format_rule(rule)

        def done(state: str, reason: str, **kw: Any) -> RuleResult:
            return RuleResult(rule.name, text, state, reason=reason, test=report,
                              time_s=time.perf_counter() - t0, **kw)

        report = random_test(rule, samples=o.samples, seed=o.seed, budget_s=o.test_budget_s)
        if report.counterexample is not None:
            ce = report.counterexample
            what = ("output shapes differ" if ce.get("kind") == "shape"
                    else "values differ (float64 reference)")
            return done(REFUTED, f"{what} on output {ce.get('output', 0)}", counterexample=ce)
        if report.instances == 0 and report.source_only:
            # Every instance where the source type-checks leaves the target ill-typed:
            # the rule cannot be applied anywhere the tester looked, and no proof of it
            # would mean anything.
            return done(INVALID, "the target does not type-check where the source does "
                        f"({report.source_only} of {report.source_checked} instances), "
                        f"e.g. {report.source_only_example}")
        try:
            # One prefix for every rule: a rule's ground shape facts are built per term
            # and kept (`shapes.ground_facts`), and rules of one file share many terms.
            g = encode_rule(rule, self.e, prefix="rule:")
        except (Unsupported, IRError) as err:
            return done(UNKNOWN, f"no Z3 encoding: {err}")
        sat, detail = z3.unknown, ""
        if unique_instance(rule) is None:
            # The tester built the premise's facts for this rule; solving them is cheap.
            # (A rule with one instance was tested without them.)
            try:
                sat, detail = premise_model(rule, timeout_s=min(o.timeout_s, 5.0))
            except (Unsupported, IRError):
                sat, detail = z3.unknown, ""
        if sat != z3.sat:
            # The exact check on the prover's own encoding decides INVALID.
            sat, detail = self.premise_check(g)
        premise = f"{sat}" + (f" ({detail})" if detail else "")
        if sat == z3.unsat:
            if report.instances:
                # A concrete instance exists, so the shape theory is too strong here: a
                # bug of the encoding, never a verdict on the rule.
                return done(UNKNOWN, "the encoding's shape theory contradicts a concrete "
                            "instance (encoding too strong for this rule)", premise=premise)
            return done(INVALID, "contradictory rule: its condition and the typing of both "
                        "sides cannot hold together (Z3: premise unsatisfiable)",
                        premise=premise)
        if report.instances == 0:
            why = report.error or "no concrete well-typed instance found by the tester"
            return done(UNKNOWN, f"{why}; a proof could be vacuous, so none is claimed",
                        premise=premise)
        t1 = time.perf_counter()
        outs = self.prove(g, exclude)
        prove_time = time.perf_counter() - t1
        if all(x.state == PROVED for x in outs):
            state, reason = PROVED, ""
        else:
            bad = next((x for x in outs if x.state == INVALID), None) or \
                next(x for x in outs if x.state != PROVED)
            state = INVALID if bad.state == INVALID else UNKNOWN
            reason = (f"output {bad.index}: " if len(outs) > 1 else "") + bad.reason
        if report.modp_only:
            reason = (reason + "; " if reason else "") + report.modp_only
        return done(state, reason, outputs=tuple(outs), prove_time_s=prove_time,
                    premise=premise, timeout_s=o.timeout_s if state == UNKNOWN else None)


def rule_location(rule: Rule) -> str:
    """Where a rule came from, as readers record it: file:line, or file: rule N."""
    prov = rule.provenance
    f = prov.get("file")
    if not f:
        return ""
    if prov.get("line") is not None:
        return f"{f}:{prov['line']}"
    if prov.get("index") is not None and prov.get("source") == "taso-pb":
        return f"{f}: rule {prov['index']}"
    return str(f)


def verdict_shapes(rule: Rule) -> str:
    """Which shapes a verdict holds for: the rule's condition (every instance of it)."""
    return f"where {rule.condition}" if rule.condition else "all shapes the rule types at"


def at_source_shapes(rule: Rule) -> tuple[Rule, str]:
    """The rule as its source checked it, and which shapes a verdict on it holds for.

    TASO found its rules (and Tensat copied them) at the generator's input shapes; the
    readers record the rule at those shapes, each side typed on its own
    (`at_taso_shapes`). That is what is verified by default: general rules can be false at
    shapes TASO never used (broadcasting adds, grouped convs, even kernels), and a false
    rule must show different shapes or values rather than an unsatisfiable premise.
    Other rules are verified as they are, for every shape their condition admits."""
    prov = rule.provenance
    text = prov.get("at_taso_shapes")
    if text:
        pinned = replace(parse_rule(f"{rule.name}: {text}", rule_location(rule) or "<rule>"),
                         provenance=prov, kind=rule.kind)
        shapes = ", ".join(f"?{k}: {v}" for k, v in (prov.get("taso_types") or {}).items())
        return pinned, f"at TASO's input shapes ({shapes})"
    if prov.get("taso_types_note"):
        return rule, f"{verdict_shapes(rule)} ({prov['taso_types_note']})"
    return rule, verdict_shapes(rule)


# ---- parallel verification ----------------------------------------------------------

AxiomData = tuple[Payload, ...]


def axiom_data(axioms: Sequence[Axiom]) -> AxiomData:
    return tuple(payload(a) for a in axioms)


def _axioms_from_data(data: AxiomData) -> list[Axiom]:
    return [from_payload(p) for p in data]


_PROVERS: dict[str, Prover] = {}


def _prover_for(data: AxiomData, options: VerifyOptions) -> Prover:
    key = hashlib.sha256(repr((data, options)).encode()).hexdigest()
    if key not in _PROVERS:
        _PROVERS.clear()
        _PROVERS[key] = Prover(_axioms_from_data(data), options)
    return _PROVERS[key]


def _verify_task(task: tuple[int, str, AxiomData, VerifyOptions, tuple[str, ...], str]
                 ) -> tuple[int, RuleResult]:
    index, text, data, options, exclude, location = task
    rule = parse_rule(text, f"<rule {index}>")  # the text travels; provenance does not
    prover = _prover_for(data, options)
    try:
        return index, replace(prover.verify(rule, set(exclude)), location=location)
    except Exception as err:  # one broken rule must not take the run down with it
        return index, RuleResult(rule.name, text, UNKNOWN,
                                 reason=f"internal error: {type(err).__name__}: {err}",
                                 n_outputs=rule.outputs, location=location)


class Verdicts(Protocol):
    """Verdicts kept across runs (`checkpoint.VerdictLog`, which builds on this module's
    `RuleResult` and so is named here by what `verify_rules` asks of it)."""

    def key(self, body: str, exclude: tuple[str, ...]) -> str: ...

    def get(self, key: str) -> RuleResult | None: ...

    def add(self, key: str, result: RuleResult) -> None: ...


def verify_rules(rules: Sequence[Rule], axioms: Sequence[Axiom], options: VerifyOptions =
                 VerifyOptions(), jobs: int = 1,
                 exclude: Callable[[Rule], Sequence[str]] | None = None,
                 progress: Callable[[RuleResult], None] | None = None,
                 executor: str | None = None, log: Verdicts | None = None
                 ) -> list[RuleResult]:
    """Verify every rule (in parallel over `jobs` workers of `executor`, see
    `superopt.executor`); results in input order.

    `exclude(rule)` names axioms not to use for that rule (a library rule is not an
    axiom for itself when checking redundancy). `log` (a `VerdictLog`) supplies the
    verdicts an earlier run reached and records each new one as it arrives."""
    from superopt.verifier.parallel import run_parallel

    data = axiom_data(axioms)
    # Published rule files repeat rules (Tensat's 931 TASO equations hold the same
    # equation under several numbers): the same rule with the same axioms is verified
    # once (the seed makes its verdict the same anyway) and its result copied.
    first: dict[tuple[str, tuple[str, ...]], int] = {}
    same: list[int] = []
    tasks = []
    done: dict[int, RuleResult] = {}
    keys: dict[int, str] = {}
    for i, r in enumerate(rules):
        ex = tuple(exclude(r)) if exclude else ()
        key = (format_rule(r).split(":", 1)[1], ex)
        if key not in first:
            first[key] = len(tasks)
            tasks.append((i, format_rule(r), data, options, ex, rule_location(r)))
            if log is not None:
                keys[i] = log.key(*key)
                earlier = log.get(keys[i])
                if earlier is not None:
                    done[i] = replace(earlier, name=r.name, text=format_rule(r),
                                      location=rule_location(r))
                    if progress:
                        progress(done[i])
        same.append(first[key])

    def arrived(item: tuple[int, RuleResult]) -> None:
        if log is not None:
            log.add(keys[item[0]], item[1])
        if progress:
            progress(item[1])

    done.update(run_parallel(_verify_task, [t for t in tasks if t[0] not in done], jobs,
                             arrived, executor))
    out = []
    for i, (r, k) in enumerate(zip(rules, same, strict=True)):
        res = done[tasks[k][0]]
        if tasks[k][0] != i:
            res = replace(res, name=r.name, text=format_rule(r), location=rule_location(r))
            if progress:
                progress(res)
        out.append(res)
    return out
