"""The verifier (DESIGN.md section 6): prove rules with Z3 against validated axioms.

- `axioms`: operator axioms as rules in the text format, each with a sampler, validated
  against the float64 reference and exact mod-p semantics before use;
- `shapes`, `zvalues`, `encoding`: the Z3 encoding (one uninterpreted sort for tensors, one
  function per op output with attribute slots, a shape theory, triggered quantifiers);
- `sampler`: shapes and attributes for random testing, and the tester itself;
- `prover`: per rule PROVED / REFUTED / UNKNOWN, in parallel over processes;
- `command`: the `superopt verify` command.
"""

from superopt.verifier.axioms import Axiom, AxiomCheck, builtin_axioms, validate_axiom
from superopt.verifier.prover import (
    PROVED,
    REFUTED,
    UNKNOWN,
    Prover,
    RuleResult,
    VerifyOptions,
    verify_rules,
)

__all__ = [
    "PROVED", "REFUTED", "UNKNOWN", "Axiom", "AxiomCheck", "Prover", "RuleResult",
    "VerifyOptions", "builtin_axioms", "validate_axiom", "verify_rules",
]
