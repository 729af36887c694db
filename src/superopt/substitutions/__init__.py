"""Substitution rules: patterns, the text format, JSON libraries (and, with the generator,
enumeration of rules in the manner of TASO)."""

from superopt.substitutions.library import LibraryError, RuleLibrary, load_library, save_library
from superopt.substitutions.pattern import AConst, AExpr, AVar, Pattern, PatternError, PNode, PVar
from superopt.substitutions.rule import ProofStatus, Rule, differs
from superopt.substitutions.text import (
    RuleSyntaxError,
    format_rule,
    format_rules,
    parse_rule,
    parse_rules,
    read_rules,
)

__all__ = [
    "AConst", "AExpr", "AVar", "LibraryError", "PNode", "PVar", "Pattern", "PatternError",
    "ProofStatus", "Rule", "RuleLibrary", "RuleSyntaxError", "differs", "format_rule",
    "format_rules", "load_library", "parse_rule", "parse_rules", "read_rules", "save_library",
]
