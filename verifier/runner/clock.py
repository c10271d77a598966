"""Time to verdict: how long after its process started a run knew its verdict (issue 17 part 4).

The verdict is known once the statistics stage has corrected every decoder's cells; the
diagnosis (which mechanism a biased decoder follows) and the report files come after it.  So the
run records, at that moment, the wall time since the *process* started -- interpreter start and
imports included, as a user waiting on ``specverify run`` sees it -- and the process's CPU time
(``time.process_time``: user + system of this process, every thread).  On a shared machine only
the CPU figure is comparable between runs.
"""

from __future__ import annotations

import os
import sys
import time

__all__ = ["since_process_start", "session_id"]

_SESSION: dict[int, str] = {}  # pid -> this process's session id (a forked child gets its own)


def _process_age_linux() -> float | None:
    """Wall seconds since this process started, from ``/proc`` (10 ms resolution); None elsewhere."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 (state) is index 0
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: starttime in clock ticks
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def since_process_start() -> dict[str, float | str]:
    """Wall and CPU seconds of this process so far.

    Returns
    -------
    dict
        ``wall_seconds`` (since the process started; where ``/proc`` is missing, since
        ``verifier.cli`` was imported, or since this call when it never was), ``cpu_seconds``
        (``time.process_time()``) and ``wall_from`` naming the start the wall figure counts from.
    """
    cpu = time.process_time()
    wall = _process_age_linux()
    origin = "process start"
    if wall is None:
        cli = sys.modules.get("verifier.cli")
        start = getattr(cli, "PROCESS_START", None)
        wall, origin = (time.perf_counter() - start, "import of verifier.cli") if start is not None else (0.0, "unknown")
    return {"wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3), "wall_from": origin}


def session_id() -> str:
    """An id of this process's sampling session: chunks sampled in it are stamped with it, so a resumed run can
    tell the requests it sent itself from those an earlier process sent (:func:`verifier.runner.speculation.summarize`)."""
    pid = os.getpid()
    return _SESSION.setdefault(pid, f"{pid}-{time.time_ns()}")
