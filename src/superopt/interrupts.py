"""Ctrl-C and SIGTERM: the command stops within a grace period, exit status 130, and its
worker processes go with it, also when the parent is killed outright.

Python turns SIGINT into KeyboardInterrupt only when the main thread next runs Python
code, and libraries swallow it: z3 reports it from a ctypes callback and carries on, so
`verify --jobs 1` once ran to completion and wrote a verdict for the interrupted rule. So
`install` also starts a watcher thread woken by the signal itself (the interpreter's
wakeup fd is written from the C signal handler, whatever the main thread is doing): if
the command has not ended GRACE_S after the signal, the watcher terminates the worker
processes and exits with 130. Finished work stays, because every output is written
atomically and the tuner's records are committed as they arrive; a half-made verdict or
library is never written, because the process ends before the command gets there.

Workers call `guard_worker`: they ignore SIGINT (the parent decides what an interrupt
means) and exit when their parent process is gone (SIGKILL gives the parent no chance to
clean up, and a pool worker would otherwise go on at full CPU as an orphan).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Protocol, TypeVar

GRACE_S = 1.5
_POLL_S = 0.5
_state = {"signalled": 0.0, "deadline": 0.0}


def interrupted() -> bool:
    """True once SIGINT or SIGTERM has arrived in this process."""
    return _state["signalled"] > 0


def _terminate_children() -> None:
    import multiprocessing

    children = multiprocessing.active_children()
    for child in children:
        child.terminate()
    deadline = time.monotonic() + 0.3
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()


def _watch(read_fd: int) -> None:
    while True:
        try:
            data = os.read(read_fd, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if not any(b in (signal.SIGINT, signal.SIGTERM) for b in data):
            continue
        if _state["deadline"]:  # a second Ctrl-C: no more waiting
            _exit_now()
        _state["signalled"] = _state["signalled"] or time.monotonic()
        _state["deadline"] = time.monotonic() + GRACE_S
        threading.Thread(target=_wait_then_exit, daemon=True).start()


def _wait_then_exit() -> None:
    while time.monotonic() < _state["deadline"]:
        time.sleep(0.05)
    # Still running: the main thread is stuck in native code or swallowed the interrupt.
    # End it here; what was finished is already on disk.
    _exit_now()


def _exit_now() -> None:
    try:
        sys.stderr.write("superopt: interrupted\n")
        sys.stderr.flush()
    finally:
        exit_fast(130)


def exit_fast(status: int = 130) -> None:
    """End an interrupted command now: its outputs are written, so skip the interpreter's
    teardown (a second or more with torch and a large graph loaded, on a loaded machine),
    which would break the 2 s promise."""
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        _terminate_children()
    finally:
        os._exit(status)


def allow_finish(seconds: float) -> None:
    """After an interrupt, give the command `seconds` more to save what it has finished
    (optimize saving the best graph of an interrupted search); a second Ctrl-C still
    stops it at once."""
    if _state["deadline"]:
        _state["deadline"] = max(_state["deadline"], time.monotonic() + seconds)


def _raise_interrupt(signum: int, frame: object) -> None:
    _state["signalled"] = _state["signalled"] or time.monotonic()
    raise KeyboardInterrupt


def _unraisable(hook: object) -> object:
    """A KeyboardInterrupt raised inside a finalizer (z3's AstRef.__del__ runs often during
    a proof) cannot propagate: Python printed "Exception ignored in ..." with a traceback
    after the user's Ctrl-C. Say nothing: the interrupt is swallowed like the ones z3's
    callbacks swallow, and the watcher ends the command within GRACE_S as for those.
    (Raising it again in the main thread was tried: it could land after the command had
    handled the first interrupt, e.g. while optimize saved its interrupted search.)"""

    def handle(unraisable: object) -> None:
        if not isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            hook(unraisable)  # type: ignore[operator]

    return handle


def install() -> None:
    """In the main thread of the command-line process, before any work."""
    if threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:
        os.close(read_fd)
        os.close(write_fd)
        return
    # SIGTERM takes the same path as Ctrl-C: finished work kept, workers terminated.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    sys.unraisablehook = _unraisable(sys.unraisablehook)  # type: ignore[assignment]
    # A pool stopped by an interrupt leaves its semaphores to multiprocessing's resource
    # tracker, which unlinks them and warns in three lines of stderr ("leaked semaphore
    # objects"); the tracker takes its -W options from ours, so it cleans up silently.
    sys.warnoptions.append("ignore:resource_tracker:UserWarning")
    threading.Thread(target=_watch, args=(read_fd,), name="superopt-interrupts",
                     daemon=True).start()


def _poll_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(_POLL_S)


def guard_worker(parent: int | None = None) -> None:
    """In a worker process: leave SIGINT to the parent; exit when the parent is gone.
    `parent`: the pid the parent passed (os.getpid() there). Without it the worker takes
    its current parent, which is already init's or a subreaper's when the real parent was
    killed while this worker was still starting (a spawned worker imports for ~1 s), and
    such a worker would never notice."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A forked worker inherits the parent's SIGTERM handler and wakeup fd: terminating it
    # would raise KeyboardInterrupt in it and tell the parent's watcher of a second Ctrl-C.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread: nothing was set here
        pass
    threading.Thread(target=_poll_parent, args=(parent or os.getppid(),),
                     name="superopt-parent", daemon=True).start()


class _Stopped(Protocol):
    stopped: str


S = TypeVar("S", bound=_Stopped)


def finished(result: S) -> S:
    """`result`, unless Ctrl-C stopped the search or tuning that made it: those hand back
    their best so far (`stopped == "interrupted"`, what `optimize` and `tune` report;
    `interrupted` on an eqsat result, whose local moves were cut short), which a benchmark
    must not record as a finished row, nor a plan cache keep as a finished search. Raises
    KeyboardInterrupt then."""
    if result.stopped == "interrupted" or getattr(result, "interrupted", False):
        raise KeyboardInterrupt
    return result


__all__ = ["GRACE_S", "allow_finish", "exit_fast", "finished", "guard_worker", "install",
           "interrupted"]
