"""A function run in a daemon thread beside the caller's own work (standard library only).

Used where the work beside is mostly torch forward passes or large numpy operations, which release the GIL: the PIT
cell beside a sample set's other cells (:mod:`verifier.runner.cells`), the stale-KV Monte Carlo likelihood beside the
other hypotheses of a diagnosis (:mod:`verifier.diagnose.rank`).  A daemon thread, not an executor's: an interrupted
caller exits without waiting for it.  Work that runs long gets a ``stop`` event to poll: a caller that fails or is
interrupted calls :meth:`Beside.cancel`, so the thread has left torch before the interpreter shuts down (a daemon
thread still inside a torch call at exit aborted the process, "terminate called without an active exception", exit
134 instead of 130).
"""

from __future__ import annotations

import threading

__all__ = ["Beside", "Cancelled"]


class Cancelled(Exception):
    """Raised inside work run beside when its ``stop`` event is set (:meth:`Beside.cancel`)."""


class Beside:
    """``fn(*args)`` in a daemon thread named ``name``; :meth:`result` waits for it and returns its value or raises
    its exception in the caller's thread.  ``stop``: an event ``fn`` polls (raising :class:`Cancelled` once set)."""

    def __init__(self, fn, *args, name: str = "beside", stop: threading.Event | None = None) -> None:
        self._out: dict = {}
        self._stop = stop
        self._thread = threading.Thread(target=self._run, args=(fn, args), daemon=True, name=name)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the work to stop (its ``stop`` event) and wait until it has: a no-op wait for work without one."""
        if self._stop is not None:
            self._stop.set()
            self._thread.join()

    def _run(self, fn, args) -> None:
        try:
            self._out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again by result(), in the caller's thread
            self._out["error"] = exc

    def result(self):
        """The function's value, once it has returned (its exception, raised here, if it raised one)."""
        self._thread.join()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["value"]
