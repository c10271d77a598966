"""Run a job command in a child process whose exit counts only with the verdict file it writes.

Plugin code (a decoder, kernel or model factory) runs inside ``specverify run``/``audit``/
``report``/``merge``.  If it ends the process itself -- ``os._exit(0)``, ``sys.exit()`` from a
thread or an ``atexit`` hook, a segfault, the OOM killer -- a CI gate must not read the exit
status as a result.  So the dispatcher re-runs the same command line in a child process
(``python -m verifier.cli ...``) with :data:`VERDICT_ENV` naming a file; the child's
:func:`verifier.cli.main` writes ``{"exit_code": N}`` there as the very last thing before it
returns.  The parent returns that code unchanged (0-4, 130), and exit code 3 with a message naming
the likely cause when the child ended without writing it.

The child's allocator (opt-in): large tensors (a (rows, vocab) float32 block is 134 MB at rows
131, V = 256k) are mmap'd fresh by glibc and faulted in 4 KiB pages each time -- measured 28% of
the CPU time of a V = 256k run went to the kernel.  With ``SPECVERIFY_HUGEPAGES=1`` the child gets
``GLIBC_TUNABLES=glibc.malloc.hugetlb=1`` (glibc >= 2.35: malloc asks for transparent huge pages
on its mmap'd chunks; older glibc and other C libraries ignore it), appended to any tunables the
user set, unless the user already chose ``glibc.malloc.hugetlb``: 21% less CPU at V = 256k, the
same samples and p-values.  It is not the default: in a fresh-machine CI run with it, two Ctrl-C
tests saw the job still running 60 s after SIGINT (right after the engine builds; not reproduced
since; issue 28 found the same two tests fail whenever the test run starts with SIGINT ignored --
a background CI job -- with or without huge pages, fixed below, so huge pages are most likely not
the cause, but the default was not changed back without a fresh-machine rerun), and a CI gate must
stop when told.

Argument parsing (``--help``, usage errors) happens in the parent first, so those stay cheap and
never start a child.  Ctrl-C reaches the child from the terminal (same process group); a SIGINT
or SIGTERM sent to the parent alone is forwarded to the child.  A process started with SIGINT
ignored (``specverify run ... &`` from a script: a non-interactive shell starts background jobs
so) still stops on SIGINT: the parent installs its handlers before it starts the child (handled
signals are reset to the default at ``exec``, ignored ones are not), and the child
(:func:`child_setup`) puts Python's ``default_int_handler`` back when it inherited ``SIG_IGN``
all the same (a parent that is not on its main thread cannot install handlers).

The child dies with its parent (:func:`child_setup`): on Linux ``prctl(PR_SET_PDEATHSIG,
SIGKILL)``; elsewhere, or when that fails, a daemon thread that polls the parent's pid.  A
dispatcher killed by SIGKILL must not leave a job sampling into a run folder a ``--resume``
then races.  Once the verdict is written, the child ends at once (:func:`child_exit`: atexit
hooks, flush, ``os._exit``): a plugin's non-daemon thread cannot keep the job alive after its
verdict.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from verifier._verdict_file import VERDICT_ENV, write_verdict  # the child's side of the verdict file
from verifier.errors import EXIT_DECODER

__all__ = ["VERDICT_ENV", "ISOLATED_COMMANDS", "run_in_child", "write_verdict", "child_setup", "child_exit", "child_signals"]

PARENT_ENV = "SPECVERIFY_PARENT_PID"  # set in the child: the dispatcher's pid (the child dies with it)
PR_SET_PDEATHSIG = 1  # linux/prctl.h: signal the caller when its parent thread dies
PARENT_POLL_S = 1.0  # the watchdog's period where PR_SET_PDEATHSIG is unavailable
ISOLATED_COMMANDS = frozenset({"run", "audit", "report", "merge"})  # commands that execute plugin code
EXIT_INTERRUPTED = 130  # as the in-process KeyboardInterrupt path returns
FORWARD_DELAY_S = 1.0  # a terminal Ctrl-C reaches the child directly; forward only if it is still running then
POLL_S = 0.2
HUGEPAGE_TUNABLE = "glibc.malloc.hugetlb"  # 1: madvise(MADV_HUGEPAGE) on malloc's mmap'd chunks (glibc >= 2.35)
HUGEPAGES_ENV = "SPECVERIFY_HUGEPAGES"  # "1": the job child runs with HUGEPAGE_TUNABLE=1 (opt-in)


def child_signals() -> None:
    """In a child job process: take SIGINT even when it started ignored (a shell starts background jobs with
    SIGINT ignored, and an ignored signal stays ignored across exec); the parent takes it either way and
    forwards it, so an ignored one here made ``kill -INT`` of a backgrounded audit do nothing."""
    if os.environ.get(VERDICT_ENV) and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread
            pass


def _read_verdict(path: Path) -> int | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return int(data["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _child_env(verdict: Path) -> dict[str, str]:
    import verifier

    root = str(Path(verifier.__file__).resolve().parent.parent)  # the very package the parent runs
    env = dict(os.environ)
    env[VERDICT_ENV] = str(verdict)
    env[PARENT_ENV] = str(os.getpid())
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if env.get(HUGEPAGES_ENV) == "1":
        env["GLIBC_TUNABLES"] = with_hugepage_malloc(env.get("GLIBC_TUNABLES", ""))
    return env


def with_hugepage_malloc(tunables: str) -> str:
    """``tunables`` (a ``GLIBC_TUNABLES`` value, ``name=value`` pairs joined by ``:``) with
    ``glibc.malloc.hugetlb=1`` appended, or unchanged when it already sets that tunable."""
    pairs = [p for p in tunables.split(":") if p]
    if any(p.split("=", 1)[0].strip() == HUGEPAGE_TUNABLE for p in pairs):
        return tunables  # the user's choice wins
    return ":".join([*pairs, f"{HUGEPAGE_TUNABLE}=1"])


def _missing_verdict(command: str, rc: int) -> str:
    head = f"specverify {command}: error: the job process"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        cause = (f" was killed by {name} before writing its verdict"
                 + (" (SIGKILL: most likely out of memory)" if name == "SIGKILL" else "")
                 + "; plugin code (decoder, kernel or model factory) or the machine ended it")
    elif rc == 0:
        cause = (" ended with exit status 0 without writing its verdict: plugin code (decoder, kernel or model factory) "
                 "most likely called os._exit() or exited from a thread or atexit hook; this is no result")
    else:
        cause = (f" ended with exit status {rc} without writing its verdict (see the traceback above; plugin code that "
                 "called os._exit() or crashed the interpreter also ends it this way)")
    return f"{head}{cause}; exit {EXIT_DECODER} (decoder error). Samples written so far are kept on disk."


def run_in_child(argv: Sequence[str], command: str) -> int:
    """Run ``python -m verifier.cli *argv`` and return its verdict's exit code (3 when it wrote none)."""
    folder = Path(tempfile.mkdtemp(prefix="specverify-"))
    verdict = folder / "verdict.json"
    cmd = [sys.executable, *subprocess._args_from_interpreter_flags(), "-m", "verifier.cli", *argv]
    state: dict = {"interrupted": False, "forward_at": None, "term": False, "proc": None}

    def on_sigint(signum, frame):  # noqa: ARG001 - signal handler signature
        state["interrupted"] = True
        if state["forward_at"] is None:
            state["forward_at"] = time.monotonic() + FORWARD_DELAY_S

    def on_sigterm(signum, frame):  # noqa: ARG001
        state["interrupted"] = state["term"] = True
        if state["proc"] is not None and state["proc"].poll() is None:
            state["proc"].send_signal(signal.SIGTERM)

    # handlers first: the child then starts with SIGINT at its default even when this process
    # started with it ignored (exec keeps SIG_IGN, resets handled signals)
    try:
        old_int = signal.signal(signal.SIGINT, on_sigint)
        old_term = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: signals stay with whoever owns them
        old_int = old_term = None
    try:
        proc = state["proc"] = subprocess.Popen(cmd, env=_child_env(verdict))
        if state["term"]:  # SIGTERM arrived while the child was starting
            proc.send_signal(signal.SIGTERM)
    except BaseException:
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
        raise
    try:
        while True:
            try:
                rc = proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                if state["forward_at"] is not None and time.monotonic() >= state["forward_at"]:
                    state["forward_at"] = float("inf")  # once
                    proc.send_signal(signal.SIGINT)
    finally:
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, old_term)
    code = _read_verdict(verdict)
    try:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()
    except OSError:
        pass
    if code is not None:
        return code
    if state["interrupted"]:
        print(f"specverify {command}: interrupted; samples written so far, if any, are kept on disk", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(_missing_verdict(command, rc), file=sys.stderr)
    return EXIT_DECODER


def child_setup() -> None:
    """In the job child, first thing: SIGINT raises ``KeyboardInterrupt`` even when the process
    started with it ignored, and the child dies with the dispatcher that started it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.stdout, sys.stderr = _private_stream(sys.stdout), _private_stream(sys.stderr)
    try:
        parent = int(os.environ.pop(PARENT_ENV, ""))  # popped: a process this one starts has another parent
    except ValueError:
        return
    if not _die_with_parent(parent):
        import threading

        threading.Thread(target=_watch_parent, args=(parent,), name="specverify-parent-watchdog", daemon=True).start()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        os._exit(EXIT_INTERRUPTED)


class _KeptOpen(io.TextIOWrapper):
    """The job's own stdout/stderr: plugin code that closes ``sys.stdout`` only flushes it."""

    def close(self) -> None:
        try:
            self.flush()
        except (OSError, ValueError):
            pass


def _private_stream(stream):
    """``stream`` re-opened on a duplicate of its file descriptor, lone surrogates escaped: plugin
    code that closes ``sys.stdout`` or file descriptor 1 cannot silence (or crash) the harness's
    report lines.  ``stream`` itself when it has no file descriptor."""
    try:
        fd = os.dup(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return stream
    try:
        stream.flush()
    except (OSError, ValueError):
        pass
    return _KeptOpen(io.open(fd, "wb"),
                     encoding=getattr(stream, "encoding", None) or "utf-8", errors="backslashreplace",
                     line_buffering=getattr(stream, "line_buffering", True), write_through=getattr(stream, "write_through", False))


def _die_with_parent(parent: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux); False when unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(EXIT_INTERRUPTED)  # the dispatcher is gone: nobody reads this job's verdict


def child_exit(code: int) -> None:
    """In the job child, after the verdict is written: run the atexit hooks, flush and end now,
    without waiting for threads a plugin left running (``os._exit``)."""
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # closed or replaced by plugin code
                pass
        os._exit(int(code))
