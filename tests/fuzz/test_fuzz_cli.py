"""Every CLI command, in a subprocess, on mutated input files and bad option values.

A run fails the test when it prints a traceback, runs past its time limit, exits 0 on an
input file its reader rejects, or exits non-zero and leaves a file in its output folder;
an exit status of 2 must come with a one-line error. The default run keeps a sample of
the commands (about 25 runs); -m slow runs each command on hundreds of mutations."""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

import pytest
from fuzz_corpus import TALLY, judge, mutate, mutate_json_number, read_verdict, run_cli

# (name, the seed file it mutates, argv with IN for the mutated file and OUT for the
# output folder). Budgets are tiny: the point is the input boundary, not the search.
COMMANDS: list[tuple[str, str, list[str]]] = [
    ("show", "graph", ["show", "IN", "--save", "OUT/s.json"]),
    ("show-weights", "weights", ["show", "GRAPH", "--text"]),
    ("run", "weights", ["run", "GRAPH", "--backend", "reference", "--repeats", "1"]),
    ("simulate", "graph", ["simulate", "IN", "--json", "OUT/sim.json"]),
    ("optimize", "graph", ["optimize", "IN", "--budget", "2", "--repeats", "0", "--cost",
                           "flops", "--out", "OUT/o.json", "--json", "OUT/f.json"]),
    ("optimize-rules", "rules", ["optimize", "GRAPH", "--rules", "IN", "--budget", "2",
                                 "--repeats", "0", "--cost", "flops", "--json", "OUT/f.json"]),
    ("mutants", "graph", ["mutants", "IN", "--no-dfs", "--limit", "1", "--no-sim", "--json",
                          "OUT/m.json"]),
    ("show-onnx", "onnx", ["show", "IN"]),
    ("verify", "rules", ["verify", "IN", "--timeout", "2", "--jobs", "1", "--samples", "2",
                         "--json", "OUT/v.json", "--save", "OUT/lib.json"]),
    ("verify-library", "library", ["verify", "IN", "--timeout", "2", "--jobs", "1",
                                   "--samples", "2", "--json", "OUT/v.json"]),
    ("verify-tensat", "tensat", ["verify", "IN", "--timeout", "2", "--jobs", "1",
                                 "--samples", "2"]),
    ("verify-pb", "pb", ["verify", "IN", "--timeout", "2", "--jobs", "1", "--samples", "2"]),
    ("verify-axioms", "library", ["verify", "RULES", "--axioms", "IN", "--timeout", "2",
                                  "--jobs", "1", "--samples", "2"]),
    ("tune-replay", "records", ["tune", "--replay", "IN", "--out", "OUT/t.json"]),
]


def _case(name: str, kind: str, argv: list[str], seeds: dict[str, Path], work: Path,
          i: int, salt: str) -> str | None:
    rng = random.Random(f"{name}:{salt}:{i}")
    folder = work / f"{name}_{i}"
    out = folder / "out"
    folder.mkdir()
    for f in seeds.values():
        shutil.copy(f, folder / f.name)
    target = folder / seeds[kind].name
    data = seeds[kind].read_bytes()
    structured = kind in ("graph", "library") and rng.random() < 0.5
    target.write_bytes(mutate_json_number(data, rng) if structured else mutate(data, rng))
    graph = folder / seeds["graph"].name
    verdict = read_verdict(kind, target, graph if kind == "weights" else None)
    if verdict.startswith("TRACEBACK"):
        TALLY.tracebacks += 1
        return f"{name} case {i}: reader {verdict}"
    subst = {"IN": str(target), "GRAPH": str(graph), "RULES": str(folder / seeds["rules"].name)}
    args = [subst.get(a, a.replace("OUT", str(out))) for a in argv]
    result = run_cli(args, out, timeout=90)
    problem = judge(result, input_ok=verdict == "ok")
    shutil.rmtree(folder)
    return None if problem is None else f"{name} case {i}: {problem}"


# Two mutations of each command by default: a cheap sample that still runs every command.
@pytest.mark.parametrize("name, kind, argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_commands_on_mutated_files(name: str, kind: str, argv: list[str],
                                   seeds: dict[str, Path], tmp_path: Path) -> None:
    problems = [p for i in range(2) if (p := _case(name, kind, argv, seeds, tmp_path, i, ""))]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.parametrize("name, kind, argv", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_commands_on_hundreds_of_mutated_files(name: str, kind: str, argv: list[str],
                                               seeds: dict[str, Path], tmp_path: Path) -> None:
    problems = [p for i in range(150)
                if (p := _case(name, kind, argv, seeds, tmp_path, i, "slow"))]
    assert not problems, "\n".join(problems[:10])


# ---- option values ------------------------------------------------------------------

def _numeric_options() -> list[tuple[str, str, type]]:
    from superopt.cli import build_parser

    found = []

    def walk(p: argparse.ArgumentParser, path: list[str]) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, [*path, name])
            elif a.option_strings and a.type is not None and a.choices is None and \
                    getattr(a.type, "__name__", "") in ("int", "float"):
                found.append((" ".join(path), max(a.option_strings, key=len),
                              int if a.type.__name__ == "int" else float))
    walk(build_parser(), [])
    return found


BAD_VALUES = {int: ["-1", "2.5", "1e3", "10" + "0" * 30, "", "nan", "0x10"],
              float: ["-1", "nan", "inf", "-inf", "1e400", "abc", ""]}


def test_every_numeric_option_rejects_bad_values_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from superopt.cli import main

    options = _numeric_options()
    assert len(options) > 40  # every command's options were found
    failures = []
    for command, flag, kind in options:
        for value in BAD_VALUES[kind]:
            argv = [*command.split(), *(["MODEL"] if command in (
                "show", "run", "simulate", "mutants", "optimize") else []), f"{flag}={value}"]
            code = main(argv)
            err = capsys.readouterr().err.strip().splitlines()
            TALLY.cases += 1
            if code != 2 or len(err) != 1 or flag not in err[0]:
                failures.append(f"{' '.join(argv)}: exit {code}, {err}")
    assert not failures, "\n".join(failures[:20])


def test_zero_is_refused_where_it_means_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    from superopt.cli import main
    from superopt.options import BOUNDS, FLOAT_INCLUSIVE

    checked = 0
    for command, flag, kind in _numeric_options():
        dest = flag.lstrip("-").replace("-", "_")
        lo = BOUNDS.get(f"{command}.{dest}", BOUNDS.get(dest))
        lowest = lo[0] if lo is not None else (1 if kind is int else 0.0)
        zero_allowed = lowest is None or (lowest <= 0 if kind is int else
                                          lowest < 0 or dest in FLOAT_INCLUSIVE)
        if zero_allowed:
            continue
        argv = [*command.split(), *(["MODEL"] if command in (
            "show", "run", "simulate", "mutants", "optimize") else []), f"{flag}=0"]
        assert main(argv) == 2, argv
        assert flag in capsys.readouterr().err, argv  # refused by the option, not later
        checked += 1
    assert checked > 20
