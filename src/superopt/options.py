"""The command line's input boundary: every numeric option checked against its range and
every output path checked before a command does any work; argparse's errors printed
as one line.

Numeric options get their bounds from one table (`BOUNDS`, keyed by option name, with
`command.option` entries where one command's meaning differs); an option missing from the
table falls back to the defaults for its type, so a new option is never unchecked. argparse
then rejects a zero, negative, huge, non-integer or non-finite value with its one-line
error and exit status 2. Output paths are checked in `check_paths`: an output file's folder
must exist and be writable and the path must not name a directory; a working folder
(--workdir, --out-dir) is created when its parent is writable, and removed again when the
command fails and it is still empty (`Outputs.cleanup`).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

# (lowest, highest) accepted value; None: unbounded on that side. The highest values are
# far above any sensible use and far below what would overflow, hang or exhaust memory.
INT_DEFAULT = (1, 10**9)
FLOAT_DEFAULT = (0.0, 1e9)  # lowest excluded for floats: a float option must be > 0
SEED = (0, 2**32 - 1)
WORKERS = (0, 256)  # 0: one per core (or the command's default)
BOUNDS: dict[str, tuple[float | None, float | None]] = {
    "seed": SEED,
    "batch": (1, 1 << 20),
    "max_nodes": (0, 10**9),
    "repeats": (1, 10**6),
    "optimize.repeats": (0, 10**6),  # 0: no timing
    "warmup": (0, 10**6),
    "jobs": WORKERS,
    "workers": WORKERS,
    "tune.workers": (1, 256),
    "threads": (0, 1024),  # 0: torch's default
    "tune.threads": (1, 1024),  # a real target's runtime threads, recorded with its records
    "max_ops": (1, 8),
    "depth": (1, 8),
    "plan_budget": (0, 10**6),  # 0: no plan
    "axiom_samples": (0, 10**6),  # 0: the default
    "samples": (1, 10**6),
    "top": (1, 10**6),
    "top_k": (1, 10**6),
    "tune_budget": (1, 10**6),
    "limit": (1, 10**9),
    "rtol": (0.0, 1.0),
    "min_equal": (0.0, 1.0),
    "alpha": (1.0, 100.0),
    "timeout": (0.0, 86400.0),
    "time_limit": (0.0, 7 * 86400.0),
    "dfs_seconds": (0.0, 86400.0),
    "refine_share": (0.0, 1.0),  # 0: only a stretch with no gain (below 1: EqsatOptions)
    "refine_min": (0.0, 86400.0),  # 0: no floor
}
# Floats whose lowest bound is itself allowed (a tolerance of 0, a fraction of 0 or 1).
FLOAT_INCLUSIVE = {"min_equal", "rtol", "alpha", "refine_share", "refine_min"}

# Options that name a file a command writes.
OUTPUTS = ("out", "json", "save", "text", "plot", "waterfall", "export", "checkpoint")
# Options that name a folder a command writes into (created when missing).
OUTPUT_DIRS = ("workdir", "out_dir")


def _bounds(command: str, dest: str, kind: type) -> tuple[float | None, float | None]:
    found = BOUNDS.get(f"{command}.{dest}", BOUNDS.get(dest))
    if found is not None:
        return found
    return INT_DEFAULT if kind is int else FLOAT_DEFAULT


def _shown(v: float | None) -> str:
    return "" if v is None else (f"{v:g}" if isinstance(v, float) else f"{v:,}")


class UsageError(SystemExit):
    """A bad command line, already reported in one line; exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse without the usage block on errors: one line, `prog: error: message`, as
    every other input error of the command line reads."""

    def error(self, message: str) -> NoReturn:
        # "argument --budget: --budget must be >= 1" says the option's name twice.
        message = re.sub(r"^argument (\S+): (?=\1 )", "", message)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise UsageError(2)


def checked(kind: type, lo: float | None, hi: float | None, inclusive: bool = True,
            flag: str = "value") -> Callable[[str], int | float]:
    """An argparse type: `kind(text)` within [lo, hi] (for floats with `inclusive` False,
    lo itself excluded), finite, and for ints written as a whole number."""
    def convert(text: str) -> int | float:
        try:
            value = kind(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} must be {'a whole number' if kind is int else 'a number'}, found "
                f"{text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{flag} must be a finite number, found {text!r}")
        too_low = lo is not None and (value < lo or (not inclusive and value == lo))
        if too_low or (hi is not None and value > hi):
            low = "" if lo is None else (f">= {_shown(lo)}" if inclusive else f"> {_shown(lo)}")
            high = "" if hi is None else f"<= {_shown(hi)}"
            raise argparse.ArgumentTypeError(
                f"{flag} must be {' and '.join(x for x in (low, high) if x)}, found {text}")
        return value

    convert.__name__ = kind.__name__  # argparse names the type in some messages
    return convert


def _subparsers(parser: argparse.ArgumentParser, name: str = ""
                ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, p in action.choices.items():
                yield from _subparsers(p, name or sub)


def install(parser: argparse.ArgumentParser) -> None:
    """Give every int and float option of every command its checked type."""
    for command, p in _subparsers(parser):
        for action in p._actions:
            if action.type not in (int, float) or action.choices is not None:
                continue
            kind = action.type
            lo, hi = _bounds(command, action.dest, kind)
            inclusive = kind is int or action.dest in FLOAT_INCLUSIVE
            flag = max(action.option_strings, key=len, default=action.dest)
            action.type = checked(kind, lo, hi, inclusive, flag)


@dataclass(frozen=True)
class Outputs:
    """Folders created for a command's outputs, deepest first."""

    created: tuple[Path, ...]

    def cleanup(self) -> None:
        """Remove the created folders that are still empty (the command failed)."""
        for folder in self.created:
            try:
                folder.rmdir()
            except OSError:
                pass  # something was written there after all: keep it


class PathError(Exception):
    """An output path that cannot be written."""


def _writable_folder(folder: Path, what: str) -> list[Path]:
    """Check that `folder` exists or can be created; returns the parts to create,
    deepest first (without creating them)."""
    missing: list[Path] = []
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            raise PathError(f"{what}: {probe} is a broken link")
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise PathError(f"{what}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise PathError(f"{what}: no permission to write in {probe}")
    return missing


def check_paths(args: argparse.Namespace) -> Outputs:
    """Check every output path of `args`, then create the missing folders they need."""
    to_create: list[Path] = []
    for dest in OUTPUTS + OUTPUT_DIRS:
        value = getattr(args, dest, None)
        if not isinstance(value, str):
            continue
        flag = "--" + dest.replace("_", "-")
        if not value.strip():
            raise PathError(f"{flag}: empty path")
        path = Path(value)
        if dest in OUTPUT_DIRS:
            if path.exists() and not path.is_dir():
                raise PathError(f"{flag} {value}: is a file, expected a directory")
            to_create += _writable_folder(path, f"{flag} {value}")
            continue
        if path.is_dir() or value.endswith(("/", os.sep)):
            raise PathError(f"{flag} {value}: is a directory, expected a file name")
        if path.exists() and not os.access(path, os.W_OK):
            raise PathError(f"{flag} {value}: no permission to write this file")
        if not path.parent.is_dir():
            # A typo in a folder name should not quietly make a new tree of folders.
            raise PathError(f"{flag} {value}: no such folder {path.parent}")
        if dest == "out" and getattr(args, "out_format", None) == "graph":
            # A graph is saved by its suffix: known before the run, not after it.
            from superopt.exporters import FORMATS

            if path.suffix not in FORMATS:
                raise PathError(f"{flag} {value}: unknown graph format {path.suffix!r}; "
                                f"expected one of {', '.join(sorted(FORMATS))}")
        _writable_folder(path.parent, f"{flag} {value}")
    created: list[Path] = []
    for folder in sorted(set(to_create), key=lambda p: len(p.parts)):
        try:
            folder.mkdir(exist_ok=True)
        except OSError as e:
            Outputs(tuple(reversed(created))).cleanup()
            raise PathError(f"cannot create {folder}: {e.strerror or e}") from None
        created.append(folder)
    return Outputs(tuple(reversed(created)))


__all__ = ["BOUNDS", "OneLineParser", "Outputs", "PathError", "UsageError", "check_paths",
           "checked", "install"]
