"""Drive an engine that lives in its own virtual environment through a worker process.

Engines pin conflicting torch versions (``../shared/engines.md``), so each decoder-kind engine is
installed by ``ci/engines/<name>.sh`` into its own venv (``Engine.install_dir() / "venv"``) and the
harness talks to it through :class:`EngineWorker`: one long-lived child process running
``verifier/engines/_worker_main.py`` with the engine's Python and a handler file
(``verifier/engines/workers/<engine>.py``).  Requests and replies carry numpy arrays in ``.npy``
format (:mod:`verifier.engines._wire`).

Failure mapping (the CLI's exit-code contract):

* the worker cannot start, dies, or the engine raises -> :class:`~verifier.errors.DecoderError`
  (exit 3), with the engine's own traceback and the tail of the worker's stderr;
* an option the engine cannot express is refused by the adapter *before* the worker starts
  (:class:`~verifier.errors.InvalidArgumentError`, exit 2).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from verifier.engines import _wire
from verifier.errors import DecoderError

__all__ = ["EngineWorker", "hashed_seeds", "WORKER_MAIN", "prestart", "adopt", "close_pool"]

WORKER_MAIN = Path(__file__).resolve().parent / "_worker_main.py"
PARENT_ENV = "SPECVERIFY_WORKER_PARENT"  # = _worker_main.PARENT_ENV: the harness pid the worker watches
STDERR_TAIL_CHARS = 4000  # engine stderr shown when a worker dies


def hashed_seeds(seed: int, count: int) -> np.ndarray:
    """``count`` per-sample seeds derived from ``seed`` by hashing (never ``seed + i``).

    Some engines feed the seed to a linear congruential generator (llama.cpp's
    ``std::default_random_engine``), whose first draws for consecutive seeds are correlated; seeds
    from :class:`numpy.random.SeedSequence` are not.

    Parameters
    ----------
    seed : int
        The chunk seed the harness passes to ``generate`` (>= 0).
    count : int
        Number of samples (>= 0).

    Returns
    -------
    np.ndarray, shape (count,), int64
        Seeds in ``1 .. 2**31 - 1`` (every engine accepts a positive 31-bit seed).
    """
    state = np.random.SeedSequence(int(seed)).generate_state(max(int(count), 1), dtype=np.uint32)[:count]
    return (state.astype(np.int64) % (2**31 - 1)) + 1


def request_digest(request: Mapping[str, Any]) -> str:
    """A digest of one ``generate`` call's keywords (arrays by dtype, shape and bytes; other values as sorted JSON):
    equal exactly when the worker would receive the same call."""
    import hashlib
    import json

    h = hashlib.sha256()
    for key in sorted(request):
        value = request[key]
        h.update(key.encode("utf-8") + b"\0")
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype.str}{value.shape}".encode("ascii") + np.ascontiguousarray(value).tobytes())
        else:
            h.update(json.dumps(value, sort_keys=True, default=repr).encode("utf-8"))
        h.update(b"\1")
    return h.hexdigest()


class EngineWorker:
    """One engine worker process: ``call(method, **kwargs) -> dict``.

    Parameters
    ----------
    python : path
        The engine venv's interpreter (``<install_dir>/venv/bin/python``).
    handler_file : path
        Python file defining ``class Handler`` (runs inside the engine's venv; may import only the
        standard library, numpy and the engine).
    name : str
        Engine name, for error messages.
    init : mapping
        Keyword arguments of ``Handler.__init__`` (JSON-able values, top-level numpy arrays).
    env : mapping, optional
        Extra environment variables of the worker (e.g. ``VLLM_CPU_KVCACHE_SPACE``).
    wait : bool, default True
        Wait for ``Handler.__init__`` (the engine's start-up: imports, model load) here.  False: send it and return at
        once; the first :attr:`methods` or :meth:`call` waits for it (and raises its error there).

    Raises
    ------
    DecoderError
        (exit 3) the interpreter is missing, the worker dies, or ``Handler.__init__`` raises.
    """

    def __init__(self, python: str | Path, handler_file: str | Path, *, name: str, init: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None, wait: bool = True) -> None:
        self.name = name
        self.python = Path(python)
        self.handler_file = str(handler_file)
        if not self.python.exists():
            raise DecoderError(f"engine {name!r}: interpreter {str(self.python)!r} does not exist (reinstall the engine)")
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        full_env = {**os.environ, **(env or {})}
        full_env.pop("PYTHONPATH", None)  # the engine venv must not see the harness's packages
        full_env[PARENT_ENV] = str(os.getpid())  # the worker exits when this process is gone (_worker_main)
        self._lock = threading.Lock()
        try:
            self._proc = subprocess.Popen([str(self.python), "-u", str(WORKER_MAIN), str(handler_file)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=full_env)
        except OSError as exc:
            raise DecoderError(f"engine {name!r}: cannot start its worker ({exc})") from None
        self._methods: frozenset[str] | None = None
        self._init_error: DecoderError | None = None
        # generate calls made ahead of the runner (:meth:`presample`): digest -> (reply, engine seconds)
        self._ahead: dict[str, tuple[dict[str, Any], float]] = {}
        self._ahead_todo: list[str] = []  # digests still to run or running, in order
        self._ahead_order: list[str] = []  # every digest handed over, in order
        self._ahead_stop = threading.Event()
        self._ahead_over = False  # the calls ahead ended (made, stopped or failed): no yield after that
        self._caller_tid: int | None = None  # the harness's thread that handed them over (it yields, verifier.engines.priority)
        self._guessed, self._first_seconds = False, None  # a planned n's guessed count; the first call's seconds
        self._ahead_limit: int | None = None  # calls ahead still wanted (limit_presample), None: all handed over
        self._ahead_done = threading.Condition()
        self._init_sent = self._send("__init__", dict(init or {}))  # the engine starts now; its reply is read below
        if wait:
            try:
                _ = self.methods
            except DecoderError:  # its start-up failed: the process (perhaps still exiting) is not left behind
                self.close(kill=True)
                raise

    @property
    def methods(self) -> frozenset[str]:
        """The Handler's public methods, as its ``__init__`` reply lists them (``target_logits`` is optional); waits
        for the engine's start-up the first time."""
        if self._methods is None:
            with self._lock:
                if self._init_error is not None:  # its reply was read: never wait for a second one
                    raise self._init_error
                if self._methods is None:
                    try:
                        reply = self._receive("__init__", self._init_sent)
                    except DecoderError as exc:
                        self._init_error = exc
                        raise
                    self._methods = frozenset(reply.get("methods") or ())
        return self._methods

    def _send(self, method: str, kwargs: Mapping[str, Any]) -> bool:
        try:
            _wire.write_message(self._proc.stdin, {"method": method, **kwargs})
            return True
        except (BrokenPipeError, OSError):
            return False

    def call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and wait for its reply (after the engine's start-up, when that is still running).

        Raises
        ------
        DecoderError
            (exit 3) the engine raised (its traceback is in the message) or the worker died.
        """
        _ = self.methods
        with self._lock:
            return self._receive(method, self._send(method, kwargs))

    def _receive(self, method: str, sent: bool) -> dict[str, Any]:
        """The reply to the request just sent (``sent``: whether writing it worked), or DecoderError."""
        try:
            reply = _wire.read_message(self._proc.stdout) if sent else None
        except (BrokenPipeError, EOFError, OSError):
            reply = None
        if reply is None:
            code = self._proc.poll()
            if code is None:
                try:
                    code = self._proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    code = "still running"
            raise DecoderError(f"engine {self.name!r}: worker died during {method!r} (exit status {code}); "
                               f"its stderr ends with:\n{self.stderr_tail()}")
        if _wire.ERROR_KEY in reply:
            err = reply[_wire.ERROR_KEY]
            raise DecoderError(f"engine {self.name!r} raised during {method!r}: {err['type']}: {err['message']}\n"
                               f"engine traceback:\n{err['traceback'].rstrip()}")
        return reply

    def presample(self, requests: list[dict[str, Any]], *, guessed: bool = False) -> None:
        """Make these ``generate`` calls now, in order, in a background thread, and keep their replies for
        :meth:`take_presampled` (the audit's first chunks, drawn while the harness imports, loads its reference pair
        and plans: :mod:`verifier.cli._presample`).  Each reply is kept with the engine's own seconds for it.  The
        thread stops at the first error (the runner's own call then meets it) or at :meth:`stop_presample`.

        The calling thread (the harness's) yields the CPU to the engine where the engine is the critical path
        (:mod:`verifier.engines.priority`): still starting after ``STARTING_YIELD_SECONDS``, or, once the first call
        is back, more than ``YIELD_AFTER_SECONDS`` of calls left -- for ``guessed`` calls (a planned n) counted only
        when :meth:`limit_presample` says how many are wanted.  It gets its priority back when the calls ahead are
        done or stopped."""
        with self._ahead_done:
            self._ahead_todo = [request_digest(r) for r in requests]
            self._ahead_order = list(self._ahead_todo)
            self._caller_tid = threading.get_native_id()
            self._guessed, self._first_seconds = bool(guessed), None
        thread = threading.Thread(target=self._presample_loop, args=(list(requests),), daemon=True,
                                  name=f"presample-{self.name}")
        thread.start()

    def _yield_if(self, critical: bool) -> None:
        """Make the harness's thread yield when ``critical`` and the calls ahead still run (hold ``_ahead_done``:
        :meth:`stop_presample` sets its flag under it, so no yield lands after its reclaim)."""
        from verifier.engines.priority import yield_to_engine

        if critical and not self._ahead_stop.is_set() and not self._ahead_over:
            yield_to_engine(self._caller_tid)

    def _yield_while_starting(self) -> None:
        with self._ahead_done:
            self._yield_if(self._methods is None)  # still starting: vLLM's ~11 s, longer than the harness's own

    def _yield_for_calls_left(self) -> None:
        """(hold ``_ahead_done``) Yield when the first call's seconds times the calls still to make exceed
        ``YIELD_AFTER_SECONDS``; a planned n's guessed calls count only once :meth:`limit_presample` has cut them."""
        from verifier.engines.priority import YIELD_AFTER_SECONDS

        if self._first_seconds is None or (self._guessed and self._ahead_limit is None):
            return
        left = len(self._ahead_todo) - len(self._ahead)
        self._yield_if(self._first_seconds * left > YIELD_AFTER_SECONDS)

    def _presample_loop(self, requests: list[dict[str, Any]]) -> None:
        from verifier.engines import priority

        starting = threading.Timer(priority.STARTING_YIELD_SECONDS, self._yield_while_starting)
        starting.daemon = True
        starting.start()
        try:
            try:
                _ = self.methods  # the engine's start-up first: not counted in a call's seconds
            finally:
                starting.cancel()
            for i, req in enumerate(requests):
                if not self._ahead_wanted(i):
                    break
                with self._lock:
                    if not self._ahead_wanted(i):
                        break
                    started = time.perf_counter()
                    reply = self._receive("generate", self._send("generate", req))
                    seconds = time.perf_counter() - started
                with self._ahead_done:
                    if not self._ahead_wanted(i):
                        break  # stopped or limited while it ran: not kept
                    self._ahead[request_digest(req)] = (reply, seconds)
                    self._ahead_done.notify_all()
                    if i == 0:
                        self._first_seconds = seconds
                        self._yield_for_calls_left()
        except Exception:  # noqa: BLE001 - the runner's own call of this request raises it, with its context
            pass
        finally:
            with self._ahead_done:
                self._ahead_todo = []
                self._ahead_over = True
                self._ahead_done.notify_all()
            priority.reclaim(self._caller_tid)  # the engine has no more calls ahead: the harness's priority back

    def _ahead_wanted(self, index: int) -> bool:
        """Whether call ``index`` of those handed to :meth:`presample` is still to be made (and kept)."""
        return not self._ahead_stop.is_set() and (self._ahead_limit is None or index < self._ahead_limit)

    def take_presampled(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], float] | None:
        """``(reply, engine seconds)`` of a ``generate`` call :meth:`presample` made with exactly these keywords
        (waiting for it when it is queued or running), else None -- and then no further call is made ahead (the
        runner has left the predicted order: its own call goes next)."""
        digest = request_digest(request)
        with self._ahead_done:
            while digest not in self._ahead and digest in self._ahead_todo:
                self._ahead_done.wait(timeout=1.0)
                if self._proc.poll() is not None:
                    break
            hit = self._ahead.pop(digest, None)
        if hit is None:
            self.stop_presample()
        return hit

    def limit_presample(self, count: int) -> None:
        """Make only the first ``count`` of the calls handed to :meth:`presample` (one running finishes first): the
        rest were a guess the caller now knows it will not need.  With the first call's seconds known, the calls
        left now decide whether the harness yields."""
        with self._ahead_done:
            self._ahead_limit = max(0, int(count))
            self._ahead_todo = self._ahead_todo[:self._ahead_limit]
            for digest in self._ahead_order[self._ahead_limit:]:  # made already: not taken either
                self._ahead.pop(digest, None)
            self._yield_for_calls_left()
            self._ahead_done.notify_all()

    def stop_presample(self) -> None:
        """Make no further call ahead (one running finishes first: :meth:`call` waits for it); drop kept replies.
        The harness's thread gets back the priority the calls ahead lowered (:func:`verifier.engines.priority.reclaim`)."""
        from verifier.engines.priority import reclaim

        with self._ahead_done:
            self._ahead_stop.set()  # under the lock: no yield after the reclaim below
            self._ahead.clear()
            self._ahead_todo = []
            self._ahead_done.notify_all()
        if self._caller_tid is not None:  # nothing handed over: nothing lowered
            reclaim(self._caller_tid)

    def stderr_tail(self, chars: int = STDERR_TAIL_CHARS) -> str:
        """The last ``chars`` characters the worker wrote to stderr (engine logs)."""
        try:
            self._stderr.flush()
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - chars))
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    def close(self, *, kill: bool = False) -> None:
        """Close the worker's stdin (it exits) and reap it, or with ``kill`` end it at once (a worker nobody adopted,
        perhaps still starting its engine: nothing of it is kept); idempotent."""
        stop = getattr(self, "_ahead_stop", None)
        if stop is not None:
            stop.set()  # no call ahead after this
        proc = getattr(self, "_proc", None)
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
            proc.wait()
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def __del__(self) -> None:  # a worker must not outlive its decoder
        try:
            self.close()
        except Exception:  # noqa: BLE001  interpreter shutdown
            pass


# workers started ahead of their decoder (prestart), each adopted by the first decoder built with the same arguments
_POOL: dict[str, EngineWorker] = {}
_POOL_LOCK = threading.Lock()


def _pool_key(python, handler_file, init, env) -> str:
    import json

    def plain(value):
        return value.tolist() if isinstance(value, np.ndarray) else repr(value)

    return json.dumps([str(python), str(handler_file), dict(init or {}), dict(env or {})], sort_keys=True, default=plain)


def prestart(python: str | Path, handler_file: str | Path, *, name: str, init: Mapping[str, Any] | None = None,
             env: Mapping[str, str] | None = None) -> None:
    """Start an engine worker now without waiting for the engine's start-up, for the decoder built next with the same
    arguments (:func:`adopt`): the engine's imports and model load then run while the harness imports its own
    libraries, loads the reference pair and plans the audit (an ``audit --engine``: :func:`verifier.cli._prestart`).

    At most one worker waits per handler file (an earlier one of that handler is killed first: engines hold GBs);
    one never adopted is killed at exit (it may still be starting its engine; nothing of it is kept).  Start-up errors surface where the adopting decoder first uses it.
    """
    key = _pool_key(python, handler_file, init, env)
    with _POOL_LOCK:
        if key in _POOL:
            return
        for k in [k for k, w in _POOL.items() if w.handler_file == str(handler_file)]:
            _POOL.pop(k).close(kill=True)
        try:
            worker = EngineWorker(python, handler_file, name=name, init=init, env=env, wait=False)
        except DecoderError:
            return  # the adopting decoder starts its own and reports the error
        _POOL[key] = worker


def adopt(python: str | Path, handler_file: str | Path, init: Mapping[str, Any] | None = None,
          env: Mapping[str, str] | None = None) -> EngineWorker | None:
    """The worker :func:`prestart` started with these arguments (removed from the pool), or None; a worker of the same
    handler started with other arguments is killed (the caller starts its own: two engines would share the CPU)."""
    with _POOL_LOCK:
        worker = _POOL.pop(_pool_key(python, handler_file, init, env), None)
        if worker is None:
            for k in [k for k, w in _POOL.items() if w.handler_file == str(handler_file)]:
                _POOL.pop(k).close(kill=True)
        return worker


def pooled(python: str | Path, handler_file: str | Path, init: Mapping[str, Any] | None = None,
           env: Mapping[str, str] | None = None) -> EngineWorker | None:
    """The worker :func:`prestart` started with these arguments, left in the pool (None when there is none)."""
    with _POOL_LOCK:
        return _POOL.get(_pool_key(python, handler_file, init, env))


def close_pool() -> None:
    """Kill every worker :func:`prestart` started that no decoder adopted (never waited for)."""
    with _POOL_LOCK:
        while _POOL:
            _POOL.popitem()[1].close(kill=True)  # never adopted (a usage error, an interrupt): not waited for


import atexit  # noqa: E402  (the pool's workers never outlive the harness)

atexit.register(close_pool)
