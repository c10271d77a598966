"""Worker process entry point, run with an *engine's* Python: ``python _worker_main.py HANDLER_FILE``.

Runs inside the engine's own virtual environment (engines pin conflicting torch versions), so it
imports neither ``verifier`` nor anything but the standard library, numpy and -- through the
handler file -- the engine.  ``HANDLER_FILE`` is a Python file (``verifier/engines/workers/*.py``)
defining ``class Handler`` whose ``__init__(**init)`` loads the engine and models and whose public
methods take keyword arguments and return a dict (JSON-able values and top-level numpy arrays).

Protocol (see :mod:`verifier.engines._wire`): the first message is ``{"method": "__init__", ...}``,
then one request -> one reply until stdin closes.  A raised exception is sent back as
``{"__error__": {"type", "message", "traceback"}}`` and the worker keeps serving.  The protocol
uses private duplicates of fds 0/1; fd 1 is pointed at stderr so an engine's prints cannot corrupt
the replies.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Python put this script's folder (verifier/engines/) first on sys.path; take it off, or an adapter module
# there (llama_cpp.py, vllm.py, ...) would shadow the engine package of the same name inside the worker.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
# the package's one "import a file as a module" (verifier/_import_file.py, standard library only), run by path:
# the engine's Python has no verifier package
_import_file = runpy.run_path(str(_HERE.parent / "_import_file.py"))["import_file"]
_wire = _import_file("_specverify_wire", _HERE / "_wire.py")


def _load_handler(path: str):
    return _import_file(f"specverify_worker_{Path(path).stem}", path).Handler


ORPHAN_POLL_S = 0.5  # how often the worker checks that the harness process that started it is alive
PARENT_ENV = "SPECVERIFY_WORKER_PARENT"  # the harness's pid, set by verifier.engines.bridge.EngineWorker


def _exit_when_orphaned(parent: int) -> None:
    """Exit at once when the harness process that started this worker is gone (re-parented: SIGKILL, a SIGTERM the
    harness did not survive).  The protocol's closed stdin says the same, but only once the engine's start-up -- tens
    of seconds, started ahead of the harness's own -- has finished and the next request is read."""
    import threading
    import time

    def watch() -> None:
        while True:
            if os.getppid() != parent:  # checked at once too: the harness may have died before this thread started
                os._exit(0)
            time.sleep(ORPHAN_POLL_S)

    threading.Thread(target=watch, name="specverify-orphan-watch", daemon=True).start()


def main() -> int:
    try:
        parent = int(os.environ.pop(PARENT_ENV, ""))  # popped: an engine's own subprocesses have another parent
    except ValueError:
        parent = os.getppid()
    _exit_when_orphaned(parent)
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # engine prints go to stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = sys.stderr
    handler = None
    while True:
        request = _wire.read_message(proto_in)
        if request is None:
            return 0
        method = request.pop("method", None)
        try:
            if method == "__init__":
                handler = _load_handler(sys.argv[1])(**request)
                reply = {"ok": True, "methods": sorted(m for m in dir(handler)
                                                       if not m.startswith("_") and callable(getattr(handler, m, None)))}
            elif handler is None:
                raise RuntimeError("the worker got a request before __init__")
            elif not isinstance(method, str) or method.startswith("_") or not callable(getattr(handler, method, None)):
                raise AttributeError(f"the engine worker has no method {method!r}")
            else:
                reply = getattr(handler, method)(**request)
        except BaseException as exc:  # noqa: BLE001  every failure goes back to the harness, which maps it to exit 3
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {_wire.ERROR_KEY: {"type": type(exc).__name__, "message": str(exc),
                                       "traceback": "".join(traceback.format_exception(
                                           type(exc), exc, exc.__traceback__.tb_next))}}  # the engine's frames, not this loop's
        sys.stderr.flush()
        _wire.write_message(proto_out, reply)


if __name__ == "__main__":
    sys.exit(main())
