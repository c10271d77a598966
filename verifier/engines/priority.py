"""The harness yields the CPU to an engine worker that draws the audit's chunks ahead (issue 27, "every audit as fast
as the engine allows").

While the worker makes the calls handed to it (:meth:`verifier.engines.bridge.EngineWorker.presample`) the harness's
own thread imports torch and transformers, loads the reference pair and plans: about 9 s of CPU on the shipped pair.
On a 2-core machine that work shares the cores with the engine's two threads and slows its calls.  Here the harness's
thread lowers its own scheduling priority by :data:`YIELD_NICE` while the calls are made ahead, so the engine's
threads run first and the harness takes the time they leave: measured on the 2-core box, OpenVINO GenAI's 5,000-row
audit reaches its verdict 0.6-1.1 s sooner (reports/benchmarks.md section 42).  Nothing about a sample or a statistic
depends on it.

Linux gives each thread its own nice value (``setpriority(PRIO_PROCESS, tid)``), so only the calling thread and the
threads it starts later yield; the worker process, started before, keeps its priority.  :func:`reclaim` raises the
thread's priority again once the sampling ends; a process that may not raise it (no ``CAP_SYS_NICE``, ``RLIMIT_NICE``
0: the usual unprivileged user) keeps the lower priority to its end, which changes nothing on a machine that has no
other work.  Elsewhere (no per-thread nice, a refused call) nothing changes.
"""

from __future__ import annotations

import os
import threading

__all__ = ["YIELD_NICE", "yield_to_engine", "reclaim"]

YIELD_NICE = 10  # CFS weight 110 against the engine's 1024: the harness gets ~10% of a contended core
_SAVED: dict[int, int] = {}  # native thread id -> its nice value before yield_to_engine


def yield_to_engine() -> bool:
    """Lower the calling thread's priority by :data:`YIELD_NICE` (at most to 19); whether it now yields."""
    tid = threading.get_native_id()
    if tid in _SAVED:
        return True
    if not hasattr(os, "setpriority"):
        return False
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, before + YIELD_NICE))
    except OSError:  # no per-thread nice here (a thread id is no process id), or refused
        return False
    _SAVED[tid] = before
    return True


def reclaim() -> None:
    """Give the calling thread back the priority :func:`yield_to_engine` lowered, where the process may raise it."""
    before = _SAVED.pop(threading.get_native_id(), None)
    if before is None:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), before)
    except OSError:  # not permitted (unprivileged): the thread keeps the lower priority
        pass
