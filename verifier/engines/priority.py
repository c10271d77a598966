"""The harness yields the CPU to an engine worker that draws the audit's chunks ahead (issue 27, "every audit as fast
as the engine allows").

While the worker makes the calls handed to it (:meth:`verifier.engines.bridge.EngineWorker.presample`) the harness's
own thread imports torch and transformers, loads the reference pair and plans: about 7.5 s on the shipped pair, one
core.  On a 2-core machine that work shares the cores with the engine's threads and slows its calls.  Where the engine
still has more than :data:`YIELD_AFTER_SECONDS` of calls to make once its first call is back (its seconds times the
calls left), or where the engine is still starting after :data:`STARTING_YIELD_SECONDS` (vLLM's ~11 s start-up on
CPU is longer than the harness's own), it is the audit's critical path: the harness's thread then lowers its
scheduling priority by
:data:`YIELD_NICE`, so the engine's threads run first and the harness takes the time they leave.  Measured on the 2-core
box (reports/benchmarks.md section 42): OpenVINO GenAI's 5,000-row audit (~14 s of calls) reaches its verdict 0.6-1.1 s
sooner; llama-cpp-python's (~7 s of calls, done before the harness is ready) was 0.6 s slower with the harness yielding,
so short work does not yield.  A harness yields only where it may raise its priority again (root, ``CAP_SYS_NICE`` or
``RLIMIT_NICE``) and where no other work keeps the cores busy (1-minute load average below the number of cores): it
would yield to that work too.  Nothing about a sample or a statistic depends on it.

Linux gives each thread its own nice value (``setpriority(PRIO_PROCESS, tid)``), so only the harness's thread and the
threads it starts later yield; the worker process, started before, keeps its priority.  :func:`reclaim` raises their
priority again once the calls ahead are done (or stopped).  Elsewhere (no per-thread nice, a refused call) nothing
changes.
"""

from __future__ import annotations

import os
import threading

__all__ = ["YIELD_NICE", "YIELD_AFTER_SECONDS", "STARTING_YIELD_SECONDS", "yield_to_engine", "reclaim"]

YIELD_NICE = 10  # CFS weight 110 against the engine's 1024: the harness gets ~10% of a contended core
YIELD_AFTER_SECONDS = 8.0  # engine calls left, in seconds, above which the harness yields (its own start-up: ~7.5 s)
STARTING_YIELD_SECONDS = 2.0  # an engine still starting after this long yields too (OpenVINO, llama.cpp: < 1 s)
_SAVED: dict[int, tuple[int, int, frozenset[int]]] = {}  # tid -> (nice before, nice after, threads then alive)
_LOCK = threading.Lock()


def _threads() -> frozenset[int]:
    """This process's native thread ids (Linux ``/proc/self/task``; empty elsewhere)."""
    try:
        return frozenset(int(t) for t in os.listdir("/proc/self/task"))
    except (OSError, ValueError):
        return frozenset()


def yield_to_engine(tid: int | None = None) -> bool:
    """Lower the priority of thread ``tid`` (a native thread id of this process; default the calling thread) by
    :data:`YIELD_NICE` (at most to 19); whether it now yields.  Threads it starts afterwards inherit the lower
    priority (torch's intra-op pool, the statistics' warming thread): :func:`reclaim` restores those too."""
    tid = threading.get_native_id() if tid is None else int(tid)
    with _LOCK:
        if tid in _SAVED:
            try:  # still lowered: nothing to do; else a reused thread id of a thread that never reclaimed
                if os.getpriority(os.PRIO_PROCESS, tid) == _SAVED[tid][1]:
                    return True
            except Exception:  # noqa: BLE001 - gone: forget it
                pass
            del _SAVED[tid]
        if not hasattr(os, "setpriority"):
            return False
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            if not _may_raise_again(before) or _busy():
                return False
            after = min(19, before + YIELD_NICE)
            os.setpriority(os.PRIO_PROCESS, tid, after)
        except Exception:  # noqa: BLE001 - no per-thread nice here (OSError), an id the call cannot take (OverflowError)
            return False
        _SAVED[tid] = (before, after, _threads())
        return True


def _may_raise_again(nice: int) -> bool:
    """Whether this process may set a thread's nice value back to ``nice`` (root, or ``RLIMIT_NICE`` allowing it): a
    process that may not would keep the lower priority to its end, behind every other process too, so it never
    yields."""
    if os.geteuid() == 0:
        return True
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_NICE)[0]
    except (ImportError, AttributeError, OSError, ValueError):
        return False
    return limit == resource.RLIM_INFINITY or 20 - limit <= nice


def _busy() -> bool:
    """Whether other work keeps this machine's cores busy: a 1-minute load average of at least the number of cores
    (read seconds into an audit, it is mostly the load from before it).  A yielding harness would yield to that work
    too (measured by the breaker at load 6: a 2x slower verdict), so then it does not."""
    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except (AttributeError, OSError):
        return True


def reclaim(tid: int | None = None) -> None:
    """Give thread ``tid`` (default the calling thread) back the priority :func:`yield_to_engine` lowered, and the
    threads started since then at that lowered priority theirs, where the process may raise them; idempotent."""
    tid = threading.get_native_id() if tid is None else int(tid)
    with _LOCK:  # held while restoring: a second reclaim of the same thread returns only once it is done
        saved = _SAVED.pop(tid, None)
        if saved is None:
            return
        before, after, alive = saved
        for thread in [tid, *sorted(_threads() - alive)]:
            try:
                if thread == tid or os.getpriority(os.PRIO_PROCESS, thread) == after:
                    os.setpriority(os.PRIO_PROCESS, thread, before)
            except Exception:  # noqa: BLE001 - not permitted, or the thread is gone
                pass
