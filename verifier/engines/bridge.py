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
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from verifier.engines import _wire
from verifier.errors import DecoderError

__all__ = ["EngineWorker", "hashed_seeds", "WORKER_MAIN"]

WORKER_MAIN = Path(__file__).resolve().parent / "_worker_main.py"
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

    Raises
    ------
    DecoderError
        (exit 3) the interpreter is missing, the worker dies, or ``Handler.__init__`` raises.
    """

    def __init__(self, python: str | Path, handler_file: str | Path, *, name: str, init: Mapping[str, Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.python = Path(python)
        if not self.python.exists():
            raise DecoderError(f"engine {name!r}: interpreter {str(self.python)!r} does not exist (reinstall the engine)")
        self._stderr = tempfile.TemporaryFile(mode="w+b")
        full_env = {**os.environ, **(env or {})}
        full_env.pop("PYTHONPATH", None)  # the engine venv must not see the harness's packages
        self._lock = threading.Lock()
        try:
            self._proc = subprocess.Popen([str(self.python), "-u", str(WORKER_MAIN), str(handler_file)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=full_env)
        except OSError as exc:
            raise DecoderError(f"engine {name!r}: cannot start its worker ({exc})") from None
        #: the Handler's public methods, as its ``__init__`` reply lists them (``target_logits`` is optional)
        self.methods: frozenset[str] = frozenset(self.call("__init__", **dict(init or {})).get("methods") or ())

    def call(self, method: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and wait for its reply.

        Raises
        ------
        DecoderError
            (exit 3) the engine raised (its traceback is in the message) or the worker died.
        """
        with self._lock:
            try:
                _wire.write_message(self._proc.stdin, {"method": method, **kwargs})
                reply = _wire.read_message(self._proc.stdout)
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

    def close(self) -> None:
        """Close the worker's stdin (it exits) and reap it; idempotent."""
        proc = getattr(self, "_proc", None)
        if proc is None or proc.poll() is not None:
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
