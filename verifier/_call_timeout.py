"""``--call-timeout SECONDS``: a decoder's ``generate`` call that does not return in time is a decoder error.

A decoder that sleeps or deadlocks used to hang the run forever.  With ``--call-timeout S``
(``specverify run`` / ``audit``; the environment variable :data:`CALL_TIMEOUT_ENV` carries it
to the runner) every ``generate`` call of the runner gets S seconds:

* on the main thread, ``SIGALRM`` (``setitimer``) raises :class:`CallTimeout` inside the call;
  the runner records it like any decoder crash -- exit 3, the decoder's verdict ERROR, a message
  naming the call (``generate(prompt_ids=..., num_samples=..., ...)``) and the limit, samples
  written so far kept, the other decoders still run; black-box audits get the same limit through
  :class:`verifier.plugins.PluginDecoder`;
* a call stuck in C code that never returns to the interpreter cannot be interrupted so: in a job
  child (:mod:`verifier.cli._isolate`), a watchdog thread ends the process a grace period after the
  deadline (the limit itself, at least 1 s and at most :data:`HARD_GRACE_S`) with the same message
  and verdict 3 (no report then).

Default: no limit.  A slow but correct decoder (a large model on CPU, one chunk of thousands of
rows) must never be called broken by a default; the progress bar shows a stall.  Off the main
thread (an API caller's worker thread) only the job-child watchdog applies.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from typing import Iterator

from verifier.errors import EXIT_DECODER, invalid_argument

__all__ = ["CALL_TIMEOUT_ENV", "CallTimeout", "add_argument", "apply", "call_deadline"]

CALL_TIMEOUT_ENV = "SPECVERIFY_CALL_TIMEOUT"  # seconds per generate call; unset or empty: no limit
MAX_CALL_TIMEOUT_S = 1e6  # ~11.6 days; timers overflow time_t near 1e10 s, and a longer limit is no limit
HARD_GRACE_S = 30.0  # at most this long after the deadline, a call that never came back to Python ends the job child


class CallTimeout(BaseException):
    """A decoder call ran past ``--call-timeout`` (a BaseException: a plugin's ``except Exception``
    cannot swallow it)."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(what, seconds)
        self.what, self.seconds = what, seconds

    def __str__(self) -> str:
        return (f"{self.what} did not return within --call-timeout={self.seconds:g} s: the decoder hangs or is slower "
                "than the limit; allowed: a larger --call-timeout, or none (the default: no limit)")


def add_argument(parser) -> None:
    parser.add_argument("--call-timeout", metavar="SECONDS", type=float, default=None,
                        help="Stop a decoder whose generate() call runs longer than this (exit 3, the call named). "
                        "Default: no limit.")


def apply(args) -> None:
    """Check ``args.call_timeout`` (exit 2 naming it) and hand it to the runner (environment)."""
    value = getattr(args, "call_timeout", None)
    if value is None:
        return
    if not (math.isfinite(value) and 0 < value <= MAX_CALL_TIMEOUT_S):
        raise invalid_argument("--call-timeout", value, f"a number of seconds in (0, {MAX_CALL_TIMEOUT_S:g}] "
                               "(or no option: no limit)")
    os.environ[CALL_TIMEOUT_ENV] = repr(float(value))


def _seconds() -> float | None:
    try:
        value = float(os.environ.get(CALL_TIMEOUT_ENV) or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 < value <= MAX_CALL_TIMEOUT_S else None


@contextlib.contextmanager
def call_deadline(what: str) -> Iterator[None]:
    """Raise :class:`CallTimeout` in the ``with`` block after ``--call-timeout`` seconds (no-op without one)."""
    seconds = _seconds()
    if seconds is None or _active:  # no limit, or inside an outer deadline already (one alarm at a time)
        yield
        return
    _active.append(what)
    try:
        with _armed(what, seconds):
            yield
    finally:
        _active.pop()


_active: list[str] = []  # the call under a deadline now (nested call_deadline blocks share the outer one)


@contextlib.contextmanager
def _armed(what: str, seconds: float) -> Iterator[None]:
    armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    old = None
    if armed:
        def on_alarm(signum, frame):  # noqa: ARG001 - signal handler signature
            raise CallTimeout(what, seconds)

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    watchdog = None
    from verifier._verdict_file import VERDICT_ENV

    if os.environ.get(VERDICT_ENV):
        watchdog = threading.Timer(seconds + min(HARD_GRACE_S, max(1.0, seconds)), _hard_stop, args=(what, seconds))
        watchdog.daemon = True
        watchdog.start()
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.cancel()
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _hard_stop(what: str, seconds: float) -> None:
    from verifier._verdict_file import write_verdict

    try:
        print(f"specverify: error: {CallTimeout(what, seconds)}; the call never returned to Python (stuck in native code), "
              f"so the job ends here without a report; exit {EXIT_DECODER} (decoder error)", file=sys.stderr, flush=True)
        write_verdict(EXIT_DECODER)
    finally:
        os._exit(EXIT_DECODER)
