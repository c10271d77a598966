"""A function run beside the caller's own work: in a daemon thread, or in a forked child process (standard library only).

Used where the work beside is mostly torch forward passes or large numpy operations, which release the GIL: the PIT
cell beside a sample set's other cells (:mod:`verifier.runner.cells`), the stale-KV Monte Carlo likelihood beside the
other hypotheses of a diagnosis (:mod:`verifier.diagnose.rank`).  A daemon thread, not an executor's: an interrupted
caller exits without waiting for it.  Work that runs long gets a ``stop`` event to poll: a caller that fails or is
interrupted calls :meth:`Beside.cancel`, so the thread has left torch before the interpreter shuts down (a daemon
thread still inside a torch call at exit aborted the process, "terminate called without an active exception", exit
134 instead of 130).

Work whose Python-level loop is long (the stale-KV Monte Carlo's per-round bookkeeping, many small forward passes)
holds the GIL for much of its time, so a thread beside another Python-heavy loop mostly takes turns with it: on the
OpenVINO 5,000-row BIAS folder the Monte Carlo thread added 27 s of wall time to a 53 s diagnosis (reports/benchmarks.md
section 44).  :func:`beside_process` runs such work in a child forked from the caller (Linux): it inherits the loaded
models and inputs, computes on the other core without the GIL, and sends its value back pickled through a pipe.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading

__all__ = ["Beside", "Cancelled", "ChildLost", "Forked", "beside_process", "can_fork", "forked_or_none"]


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


class ChildLost(RuntimeError):
    """A forked child ended without sending a result (killed: out of memory, ``kill -9``): the caller may compute the
    work itself (:func:`verifier.diagnose.rank._mc_beside`'s and :func:`verifier.diagnose.late._in_halves`' callers do)."""


def _die_with(parent: int) -> None:
    """In a forked child: be killed when ``parent`` dies (Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so a caller killed
    by SIGTERM or SIGKILL leaves no child computing; leave at once if it is gone already.  Linux sends the signal when
    the *thread* that forked ends: fork and read the result in one thread (as every caller here does)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # no prctl: the child ends when its work does (its pipe's reader is gone)
        pass
    if os.getppid() != parent:
        os._exit(0)


def _one_thread() -> None:
    """In a forked child: torch (where the caller imported it) on one intra-op thread before any of its operations.

    The caller's OpenMP thread pool does not survive the fork: a child whose first parallel region asks for the
    caller's team of threads waits for threads that do not exist (a forward pass that never returns: a caller that had
    run torch on 2 threads, tests/foundations/test_forked.py).  One thread is what PyTorch's own forked workers
    (``torch.utils.data`` DataLoader) set, and what the diagnosis runs on anyway (``torch.set_num_threads(1)``)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


class Forked:
    """``fn(*args)`` in a child process forked now; :meth:`result` waits for it and returns its value or raises its
    exception (re-raised from its pickle; an unpicklable one as a ``RuntimeError`` naming it) in the caller.

    The child ignores SIGINT (the caller's Ctrl-C is the caller's to handle: a ranking that is interrupted or fails calls
    :meth:`cancel`, which kills the child and reaps it), is killed with the caller (SIGTERM, SIGKILL), runs torch on one
    thread (:func:`_one_thread`) and leaves by ``os._exit`` (no ``atexit`` handler or finaliser of the caller's runs in
    it).  The caller's streams are flushed before the fork, so its buffered output is not written twice; what ``fn``
    prints goes to the same streams.  An exception from ``fn`` carries the child's traceback as a note.  A child that
    dies without a value (killed, out of memory) makes :meth:`result` raise :class:`ChildLost` with its wait status.
    A fork that fails raises its ``OSError`` here, the pipe closed.  :func:`forked_or_none` gives None instead (the
    caller computes the work itself), :func:`beside_process` a thread.
    """

    def __init__(self, fn, *args, name: str = "beside") -> None:
        self.name = name
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):  # a closed or replaced stream: nothing buffered to copy
                pass
        read, write = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError:  # no process to be had (EAGAIN: a process limit; ENOMEM): the caller computes in turn instead
            os.close(read)
            os.close(write)
            raise
        if pid == 0:  # the child: compute, send, leave without running the caller's exit handlers
            try:
                os.close(read)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _die_with(parent)
                _one_thread()
                try:
                    out = ("value", fn(*args))
                except BaseException as exc:  # noqa: BLE001 - sent to the caller, raised there by result()
                    import traceback

                    where = "".join(traceback.format_tb(exc.__traceback__))
                    exc.add_note(f"(raised in the child process '{name}':)\n{where}")
                    out = ("error", exc)
                try:
                    data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
                except Exception:  # noqa: BLE001 - an unpicklable value or exception: say what it was
                    data = pickle.dumps(("error", RuntimeError(f"{name}: {type(out[1]).__name__}: {out[1]}")))
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
            finally:
                os._exit(0)
        os.close(write)
        self._pid, self._read, self._done = pid, read, False

    def _reap(self) -> int:
        self._done = True
        _, status = os.waitpid(self._pid, 0)
        return status

    def cancel(self) -> None:
        """Kill the child (SIGKILL: it holds no resource of the caller's) and reap it; a no-op once it is done."""
        if self._done:
            return
        try:
            os.kill(self._pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._reap()
        if self._read is not None:  # not yet handed to result()'s reader, which closes it
            os.close(self._read)
            self._read = None

    def result(self):
        """The function's value, once the child has sent it (its exception, raised here, if it raised one).

        Raises
        ------
        RuntimeError
            The child ended without sending a value (its exit status named), or :meth:`cancel` was called first.
        """
        if self._done:
            raise RuntimeError(f"{self.name}: cancelled before its result was read")
        pipe, self._read = os.fdopen(self._read, "rb"), None  # closed by the reader, also when the read is interrupted
        with pipe:
            data = pipe.read()
        status = self._reap()
        if not data:
            raise ChildLost(f"{self.name}: its child process ended without a result (wait status {status}: "
                            f"{_status_text(status)})")
        try:
            kind, value = pickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - e.g. an exception class whose __init__ its pickle cannot call
            raise RuntimeError(f"{self.name}: the child's result could not be read back ({type(exc).__name__}: "
                               f"{exc})") from None
        if kind == "error":
            raise value
        return value


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"killed by signal {sig}" + (" (SIGKILL: out of memory or kill -9)" if sig == signal.SIGKILL else "")
    return f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else "unknown"


def can_fork() -> bool:
    """Whether work beside may run in a child forked from this process: Linux, where ``os.fork`` is the platform's way
    (elsewhere a fork is unavailable or unsafe with the frameworks loaded)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def forked_or_none(fn, *args, name: str = "beside") -> Forked | None:
    """``Forked(fn, *args)`` where :func:`can_fork` and the fork succeeds; None otherwise (no fork here, or a process
    limit / no memory): the caller then computes the work itself."""
    if not can_fork():
        return None
    try:
        return Forked(fn, *args, name=name)
    except OSError:  # the fork failed (EAGAIN: a process limit; ENOMEM)
        return None


def beside_process(fn, *args, name: str = "beside", stop: threading.Event | None = None):
    """``fn(*args)`` in a forked child (:func:`forked_or_none`); where none can be forked, in a daemon thread
    (:class:`Beside` with ``stop``, the event ``fn`` polls).  Both have ``result()`` and ``cancel()``; a child is killed
    on ``cancel()``, so ``stop`` only matters to the thread."""
    child = forked_or_none(fn, *args, name=name)
    return child if child is not None else Beside(fn, *args, name=name, stop=stop)
