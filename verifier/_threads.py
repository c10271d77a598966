"""The ``--threads`` limit of ``specverify run`` (torch intra-op threads), shared with ``bench scale``.

Standard library only: the CLI reads these constants while it builds its ``--help``.
"""

from __future__ import annotations

import os

__all__ = ["THREADS_PER_CPU", "MAX_THREADS", "max_threads"]

THREADS_PER_CPU = 4  # --threads above this many per CPU only adds synchronisation
MAX_THREADS = 1024  # and never above this: OpenMP allocates per thread (--threads 100000 crashed the job)


def max_threads() -> int:
    """The largest ``--threads`` allowed here: ``THREADS_PER_CPU`` per CPU, at most ``MAX_THREADS``."""
    return max(1, min(MAX_THREADS, THREADS_PER_CPU * (os.cpu_count() or 1)))
