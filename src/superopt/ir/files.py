"""Reading untrusted files and writing results safely: the one place where decoding
failures, paths that leave a file's folder and half-written outputs are dealt with.

Readers call `read_text` so that a file that is not UTF-8 is a one-line error naming the
file and the byte, never a UnicodeDecodeError; `sibling` keeps a file named inside another
(a graph's weights) in that file's folder; `atomic_write_text` and `atomic_path` make an
output appear whole or not at all, so an interrupted or failed run leaves no partial file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from superopt.ir.errors import IRError


def read_bytes(path: str | Path, error: type[IRError] = IRError) -> bytes:
    path = Path(path)
    if path.is_dir():
        raise error(f"{path}: is a directory, not a file")
    try:
        return path.read_bytes()
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    except MemoryError:
        raise error(f"{path}: too large to read into memory") from None


def decode(data: bytes, source: str, error: type[IRError] = IRError) -> str:
    """UTF-8 text; the error names the line and column of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise error(f"{source}:{line}:{col}: not UTF-8 text (byte {data[e.start]:#04x} at "
                    f"offset {e.start})") from None


def read_text(path: str | Path, error: type[IRError] = IRError) -> str:
    return decode(read_bytes(path, error), str(path), error)


def sibling(base: str | Path, name: object, what: str,
            error: type[IRError] = IRError) -> Path:
    """The file `name` that `base` refers to, which must lie in `base`'s own folder: a file
    from elsewhere must not make us read (or reveal the existence of) arbitrary paths."""
    base = Path(base)
    if not isinstance(name, str) or not name or name != Path(name).name \
            or name in (".", "..") or "\\" in name or "\x00" in name:
        raise error(f"{base}: {what} {name!r} must be a plain file name in the same folder")
    return base.with_name(name)


def _temp_beside(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    # mkstemp makes the file private (0600); the result should get the usual permissions.
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    return Path(tmp)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside `path` to write to; renamed onto `path` when the block ends
    normally and removed otherwise (an exception or Ctrl-C leaves no partial file)."""
    path = Path(path)
    tmp = _temp_beside(path)
    try:
        yield tmp
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return path


__all__ = ["atomic_path", "atomic_write_text", "decode", "read_bytes", "read_text", "sibling"]


# Deepest nesting a reader accepts (a term's parentheses, a JSON document's brackets, a
# TASO rule's chain of operators). Every later stage (matcher, Z3 encoding, interpreter,
# printers) walks a term recursively with a few frames per level, so a bound well below
# Python's 1000-frame stack keeps a hostile or corrupt file a one-line error; real rules
# nest a handful of levels, real graph documents under ten.
MAX_NESTING = 200


def nesting_error(depth: int, what: str = "nesting") -> str:
    return f"{what} deeper than {MAX_NESTING} levels (found at least {depth})"


def json_too_deep(text: str, limit: int = MAX_NESTING) -> tuple[int, int, int] | None:
    """(line, column, depth) of the first bracket that nests a JSON text deeper than
    `limit`, else None. Scanned without recursion, before `json.loads`, whose own error for
    this (a RecursionError) has no position."""
    depth, line, line_start, in_str, esc = 0, 1, 0, False, False
    for i, c in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
            elif c == "\n":
                line, line_start = line + 1, i + 1
            continue
        if c == '"':
            in_str = True
        elif c in "[{":
            depth += 1
            if depth > limit:
                return line, i - line_start + 1, depth
        elif c in "]}":
            depth -= 1
        elif c == "\n":
            line, line_start = line + 1, i + 1
    return None
