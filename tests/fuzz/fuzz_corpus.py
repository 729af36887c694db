"""Seed files, mutators, readers and a CLI runner shared by the fuzz tests.

Every reader is held to one contract: it returns, or raises the project's `IRError` (the
CLI prints that as one line and exits 2). Anything else is a traceback a user would see.
`Tally` counts cases, tracebacks, hangs and silent accepts for the closing summary.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "substitutions" / "fixtures"
ENV = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONFAULTHANDLER": "0",
       "OMP_NUM_THREADS": "1", "COLUMNS": "160"}


@dataclass
class Tally:
    """Counts over the whole session, printed by conftest's terminal summary."""

    cases: int = 0
    cli_runs: int = 0
    tracebacks: int = 0
    hangs: int = 0
    silent_accepts: int = 0
    left_outputs: int = 0
    rejected: int = 0  # clean one-line errors
    failures: list[str] = field(default_factory=list)


TALLY = Tally()


# ---- seed files ---------------------------------------------------------------------

def seed_files(folder: Path) -> dict[str, Path]:
    """One valid file of every kind a reader takes, written into `folder`."""
    from superopt.importers.onnx import light_model_path
    from superopt.ir import GraphBuilder, save

    folder.mkdir(parents=True, exist_ok=True)
    b = GraphBuilder("seed")
    x = b.input("x", (1, 2, 4, 4))
    w = b.weight("w", (3, 2, 3, 3), data=np.linspace(-1, 1, 54).reshape(3, 2, 3, 3))
    y = b.conv2d(x, w, padding=(1, 1, 1, 1), activation="relu")
    graph = save(b.build([b.ewadd(y, y)]), folder / "graph.json")
    rules = folder / "seed.rules"
    rules.write_text("# seed rules\n"
                     "add_comm: (ewadd ?x ?y) => (ewadd ?y ?x)\n"
                     "scale: (smul (matmul none ?x ?y) ?c) => (matmul ?x (smul ?y ?c))\n"
                     "two: (relu ?x); (ewadd ?x ?y) => (relu ?x); (ewadd ?y ?x)\n")
    from superopt.substitutions.library import save_library
    from superopt.substitutions.text import read_rules

    library = save_library(read_rules(rules)[:2], folder / "seed_library.json")
    onnx_file = folder / "model.onnx"
    onnx_file.write_bytes(light_model_path("light_bvlc_alexnet").read_bytes())
    tensat = folder / "tensat.txt"
    tensat.write_text("\n".join((FIXTURES / "tensat_equations.txt").read_text()
                                .splitlines()[:6]) + "\n")
    pb = folder / "graph_subst.pb"
    pb.write_bytes((FIXTURES / "taso_graph_subst.pb").read_bytes()[:3000])
    return {"graph": graph, "weights": folder / "graph.weights.npz", "rules": rules,
            "library": library, "onnx": onnx_file, "tensat": tensat, "pb": pb}


def records_db(folder: Path) -> Path:
    """A tuner records database from a real (tiny) `superopt tune --db` run."""
    db = folder / "runs.sqlite"
    if not db.exists():
        subprocess.run([sys.executable, "-m", "superopt", "tune", "synthetic:12", "--budget",
                        "6", "--db", str(db), "--passes", "fusion,tiling", "--plan-budget",
                        "0"], env=ENV, check=True, capture_output=True, timeout=120)
    return db


# ---- mutators -----------------------------------------------------------------------

INTERESTING = [b"\x00", b"\xff", b"\xfe\xff", b"-1", b"0", b"1e400", b"NaN", b"-0.0",
               b"99999999999999999999", b"[", b"]", b"{", b"}", b'"', b"(", b")" * 50,
               b"(" * 5000, b"?x", b"=>", b"<=>", b";", b"\n", b"\r\n", b"#", b"\xc3",
               b"../../../etc/passwd", b"\\u0000", b"true", b"null", b"[]", b"{}",
               b"2.5", b"-7", b"4294967296"]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four byte-level edits: flip, truncate, delete, duplicate, insert or
    overwrite with an interesting token."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            j = min(i, len(buf) - 1)
            buf[j] ^= 1 << rng.randrange(8)
        elif op == 1:
            buf = buf[: rng.randrange(len(buf) + 1)]
        elif op == 2 and buf:
            del buf[i: i + rng.randint(1, 64)]
        elif op == 3 and buf:
            j = rng.randrange(len(buf))
            buf[i:i] = buf[j: j + rng.randint(1, 256)]
        elif op == 4:
            buf[i:i] = rng.choice(INTERESTING)
        elif op == 5:
            token = rng.choice(INTERESTING)
            buf[i: i + len(token)] = token
        else:
            buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(buf)


def mutate_json_number(data: bytes, rng: random.Random) -> bytes:
    """Replace one number in a JSON text by an interesting one (shapes, ids, indices)."""
    import re

    text = data.decode("utf-8", errors="replace")
    spots = [m.span() for m in re.finditer(r"-?\d+(\.\d+)?", text)]
    if not spots:
        return mutate(data, rng)
    a, b = rng.choice(spots)
    value = rng.choice(["0", "-1", "2.5", "1e400", "1e30", "100000", "true", "null", '"7"',
                        "[]", "-0", "NaN", "Infinity"])
    return (text[:a] + value + text[b:]).encode()


# ---- readers ------------------------------------------------------------------------

def _read_graph(path: Path) -> object:
    from superopt.ir import load

    return load(path)


def _read_rules(path: Path) -> object:
    from superopt.substitutions.readers import read_any

    return read_any(path)


def _read_library(path: Path) -> object:
    from superopt.substitutions.library import load_library

    return load_library(path)


def _read_onnx(path: Path) -> object:
    from superopt.importers import load_model

    return load_model(str(path))


def _read_records(path: Path) -> object:
    from superopt.xtat.records import RecordsDB

    with RecordsDB(path, None) as db:
        best = db.best()
        return db.config(best.candidate) if best is not None else db.measurements()


READERS: dict[str, Callable[[Path], object]] = {
    "graph": _read_graph, "weights": _read_graph, "rules": _read_rules,
    "library": _read_library, "onnx": _read_onnx, "tensat": _read_rules, "pb": _read_rules,
    "records": _read_records,
}


def read_verdict(kind: str, path: Path, read_from: Path | None = None) -> str:
    """'ok', 'rejected' (an IRError), or 'TRACEBACK: ...' for any other exception."""
    from superopt.ir.errors import IRError

    try:
        READERS[kind](read_from or path)
    except IRError:
        return "rejected"
    except Exception as e:  # the point of the test: nothing else may escape
        return f"TRACEBACK: {type(e).__name__}: {str(e)[:200]}"
    return "ok"


# ---- the CLI in a subprocess --------------------------------------------------------

@dataclass(frozen=True)
class CliResult:
    argv: tuple[str, ...]
    code: int | None  # None: killed at the time limit
    stderr: str
    outputs: tuple[str, ...]  # files under the output folder after the run

    @property
    def traceback(self) -> bool:
        return "Traceback (most recent call last)" in self.stderr or \
            "terminate called" in self.stderr or "Fatal Python error" in self.stderr


def run_cli(argv: list[str], out_dir: Path, timeout: float = 60.0) -> CliResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run([sys.executable, "-m", "superopt", *argv], env=ENV,
                              capture_output=True, text=True, timeout=timeout,
                              errors="replace", stdin=subprocess.DEVNULL)
        code: int | None = proc.returncode
        stderr = proc.stderr
    except subprocess.TimeoutExpired as e:
        code = None
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else \
            str(e.stderr or "")
    left = tuple(sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*")
                        if p.is_file()))
    return CliResult(tuple(argv), code, stderr, left)


def judge(result: CliResult, input_ok: bool) -> str | None:
    """Count one CLI run; the failure it shows, if any."""
    TALLY.cli_runs += 1
    problem = None
    if result.code is None:
        TALLY.hangs += 1
        problem = "hang"
    elif result.traceback:
        TALLY.tracebacks += 1
        problem = "traceback:\n" + result.stderr[-1500:]
    elif result.code == 0 and not input_ok:
        TALLY.silent_accepts += 1
        problem = "exit 0 on an input the reader rejects"
    elif result.code != 0 and result.outputs:
        TALLY.left_outputs += 1
        problem = f"exit {result.code} left {list(result.outputs)}"
    elif result.code not in (0, 1, 2):
        problem = f"exit status {result.code}:\n{result.stderr[-800:]}"
    elif result.code == 2:
        lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
        if len(lines) != 1:
            problem = "bad input not reported in one line:\n" + result.stderr[-800:]
        else:
            TALLY.rejected += 1
    if problem is not None:
        TALLY.failures.append(f"{' '.join(result.argv)}: {problem}")
    return problem


def dump_json(value: object) -> bytes:
    return json.dumps(value).encode()
