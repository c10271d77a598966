"""One BLAS thread around small dense linear algebra (numpy's bundled OpenBLAS).

A 350 x 350 ``eigh`` takes 0.06 s on one thread and 1.7 s on two threads of a busy 2-core machine
(the threads spin against other jobs), as torch's intra-op threads do (verifier.runner.pitscore).
:func:`single_thread` sets numpy's OpenBLAS to one thread for a block and restores it after; where
the library or its symbols cannot be found it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import threading

import numpy as np

__all__ = ["single_thread"]

_NAMES = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
          ("openblas_get_num_threads", "openblas_set_num_threads"))
_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _functions():
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*.so*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get, put in _NAMES:
            if hasattr(lib, get) and hasattr(lib, put):
                return getattr(lib, get), getattr(lib, put)
    return None


@contextlib.contextmanager
def single_thread():
    """Run the block with one OpenBLAS thread (numpy's linalg), then restore the previous count."""
    funcs = _functions()
    if funcs is None:
        yield
        return
    get, put = funcs
    with _lock:
        before = int(get())
        put(1)
        try:
            yield
        finally:
            put(before)
