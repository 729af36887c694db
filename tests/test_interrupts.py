"""superopt.interrupts: Ctrl-C that lands in a finalizer prints no traceback, and the
command still ends with 130 within the grace period."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import gc, os, signal, time
    from superopt.interrupts import install

    install()

    class Finalized:
        # As z3's AstRef.__del__ running when Ctrl-C arrives.
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100))

    try:
        Finalized()
        gc.collect()
        time.sleep(10)
        print("not ended")
    except KeyboardInterrupt:
        print("delivered after all")
""")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job inherits it ignored


def test_ctrl_c_in_a_finalizer_prints_no_traceback_and_ends_the_command() -> None:
    run = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                         timeout=60, preexec_fn=_default_sigint)
    assert run.returncode == 130, run.stdout + run.stderr
    assert run.stderr == "superopt: interrupted\n"


def test_a_result_ctrl_c_stopped_is_not_finished() -> None:
    """`finished`: what a search or tuning hands back on Ctrl-C (its best so far) raises;
    any other result passes through as it is."""
    from types import SimpleNamespace

    from superopt.interrupts import finished

    done = SimpleNamespace(stopped="budget")
    assert finished(done) is done
    with pytest.raises(KeyboardInterrupt):
        finished(SimpleNamespace(stopped="interrupted"))
    # An eqsat result: its saturation finished, its local moves were cut short.
    assert finished(SimpleNamespace(stopped="saturated", interrupted=False)).stopped
    with pytest.raises(KeyboardInterrupt):
        finished(SimpleNamespace(stopped="saturated", interrupted=True))
