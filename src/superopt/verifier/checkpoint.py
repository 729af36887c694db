"""`verify --checkpoint FILE`: each verdict is appended to FILE as it is reached, so a run
stopped by Ctrl-C or a kill resumes without verifying again what it finished.

A line holds one rule's full result under a key of the rule's text (its name aside), the
axioms it may not use, and a digest of the settings (the axioms, the options and the code
of the verifier, as the axiom cache keys them); a rerun with other settings appends its
own lines and reads none of these. A line cut short by a kill is ignored. Results that
say "internal error" are not recorded: they are what an interrupted or broken task
leaves, not a verdict.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from superopt.verifier.prover import OutputProof, RuleResult, SampleReport


def result_from_dict(d: dict[str, Any]) -> RuleResult:
    d = dict(d)
    d["outputs"] = tuple(OutputProof(**{**o, "axioms": tuple(o["axioms"])})
                         for o in d["outputs"])
    d["test"] = SampleReport(**d["test"])
    return RuleResult(**d)


class VerdictLog:
    """The verdicts of a checkpoint file for one settings digest; `add` appends."""

    def __init__(self, path: str | Path, settings: Any) -> None:
        from superopt.verifier.cache import code_fingerprint

        self.path = Path(path)
        self.digest = hashlib.sha256(repr((code_fingerprint(), settings)).encode()).hexdigest()
        self.found: dict[str, RuleResult] = {}
        if self.path.exists():
            for line in self.path.read_text(errors="replace").splitlines():
                try:
                    row = json.loads(line)
                    if row["settings"] == self.digest:
                        self.found[row["key"]] = result_from_dict(row["result"])
                except (ValueError, KeyError, TypeError):
                    continue  # cut short by a kill, or not ours
        self.resumed = 0
        self._file = None

    @staticmethod
    def key(body: str, exclude: tuple[str, ...]) -> str:
        return hashlib.sha256(repr((body, exclude)).encode()).hexdigest()

    def get(self, key: str) -> RuleResult | None:
        got = self.found.get(key)
        if got is not None:
            self.resumed += 1
        return got

    def add(self, key: str, result: RuleResult) -> None:
        if result.reason.startswith("internal error"):
            return
        if self._file is None:
            self._file = open(self.path, "a")
            if self._file.tell() and not self.path.read_bytes().endswith(b"\n"):
                self._file.write("\n")  # a line cut short stays a line of its own
        row = {"settings": self.digest, "key": key, "result": asdict(result)}
        self._file.write(json.dumps(row, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


__all__ = ["VerdictLog", "result_from_dict"]
