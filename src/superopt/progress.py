"""Progress for CI logs and `nohup`: when stdout is not a terminal, rich draws no live
display (no bar, no table, nothing until the summary), so a long command looked dead.
`heartbeat` starts a thread that prints one plain line every few seconds: what the
command's live display would show now (a progress bar's tasks, the tuner's table, a
status message), flattened to one line, with the time since the command started.

Every console the commands print to comes from `console()`, so the heartbeat knows where
the live display is. Interval: `SUPEROPT_PROGRESS_S` seconds (default 5; 0 turns it off).
"""

from __future__ import annotations

import io
import os
import re
import sys
import threading
import time
import weakref
from typing import Any

DEFAULT_INTERVAL_S = 5.0
_consoles: weakref.WeakSet[Any] = weakref.WeakSet()
_BOX = re.compile(r"[\u2500-\u259f\u2800-\u28ff]+")  # box drawing, bars, spinners


def console(**options: Any) -> Any:
    """A rich Console for a command's output (tables 160 wide when not a terminal, where
    rich would wrap them at 80), watched by the heartbeat."""
    from rich.console import Console

    options.setdefault("highlight", False)
    options.setdefault("width", None if sys.stdout.isatty() else 160)
    c = Console(**options)
    _consoles.add(c)
    return c


def interval_s() -> float:
    try:
        return max(0.0, float(os.environ.get("SUPEROPT_PROGRESS_S", DEFAULT_INTERVAL_S)))
    except ValueError:
        return DEFAULT_INTERVAL_S


def flatten(renderable: Any) -> str:
    """A rich renderable as one plain line: rows joined by ' | ', bars and borders gone."""
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=200, color_system=None, highlight=False,
            force_terminal=False).print(renderable)
    rows = []
    for line in buf.getvalue().splitlines():
        text = " ".join(_BOX.sub(" ", line).split())
        if text:
            rows.append(text)
    return " | ".join(rows)


def current() -> str:
    """What the live display of any watched console shows now ('' when none is live)."""
    for c in list(_consoles):
        stack = getattr(c, "_live_stack", None)  # rich keeps its live displays here
        if stack:
            try:
                return flatten(stack[-1].renderable)
            except Exception:  # a display changing under us: say nothing this time
                return ""
    return ""


def heartbeat(command: str, stream: Any = None) -> threading.Thread | None:
    """Unless stdout is a terminal (or the interval is 0), print
    `[superopt COMMAND 0:00:05] <progress>` every interval, from a daemon thread."""
    every = interval_s()
    if every <= 0 or sys.stdout.isatty():
        return None
    out = stream or sys.stdout
    t0 = time.monotonic()

    def beat() -> None:
        while True:
            time.sleep(every)
            elapsed = int(time.monotonic() - t0)
            now = current() or "working"
            stamp = f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"
            try:
                out.write(f"[superopt {command} {stamp}] {now}\n")
                out.flush()
            except (OSError, ValueError):  # the pipe is gone: nobody is reading
                return

    thread = threading.Thread(target=beat, name="superopt-progress", daemon=True)
    thread.start()
    return thread


__all__ = ["console", "current", "flatten", "heartbeat", "interval_s"]
