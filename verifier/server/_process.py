"""A started server as a process: its port, readiness, its log and its death with ours (split from
:mod:`verifier.server.launch`, which builds the llama-server and vLLM command lines on top of it).

Glossary
--------
ready
    ``GET /health`` answered 200 (llama-server answers 503 ``Loading model`` until the weights are in;
    vLLM answers 200 once its engine is up).
stop
    SIGTERM to the server's process group, SIGKILL to the group after ``grace_s``; idempotent.
What makes a started server die with us (the issue's "stopped when the audit ends, also on Ctrl-C or a
crash"):

1. the server runs in its own session / process group (``start_new_session``), so one ``killpg`` reaches
   it and anything it forks, and a Ctrl-C in the terminal reaches only us: ``KeyboardInterrupt`` unwinds
   through the ``with`` block (or the caller's ``finally``), which stops it;
2. on Linux the child asks the kernel for ``SIGKILL`` when its parent dies (``prctl(PR_SET_PDEATHSIG)``
   via ctypes, set between fork and exec), which covers ``kill -9`` of the harness and crashes no Python
   code runs after.  The kernel ties this to the *thread* that forked: launch from the main thread (or
   another thread that lives as long as the server), never from a short-lived worker thread.  The signal
   reaches only that child; vLLM's server starts helper processes (its EngineCore), so it runs under a small
   supervisor that gets SIGTERM instead and then SIGKILLs the whole process group;
3. an ``atexit`` hook stops every server still running when the interpreter exits normally.

Each server's stdout and stderr go to one log file (``.log_path``); every error raised here ends with
the last lines of that log, which is where the server says why it did not start.  The log is kept after
:meth:`ServerProcess.stop`; other temporary folders a launcher made for the server
(:meth:`ServerProcess.remove_on_stop`) are removed then.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from verifier.errors import DecoderError, invalid_argument

__all__ = ["LOOPBACK", "ServerStartError", "ServerProcess", "free_port", "launch_process", "check_server_args"]

LOOPBACK = "127.0.0.1"  # servers the harness starts listen on loopback only: nothing else can reach them
LOG_TAIL_LINES = 40  # lines of the server log quoted in errors: enough for llama-server's load failure
HEALTH_POLL_S = 0.25  # delay between /health probes while starting
HEALTH_PROBE_TIMEOUT_S = 5.0  # one /health request; llama-server answers at once even while loading
STOP_GRACE_S = 10.0  # SIGTERM -> SIGKILL delay; llama-server finishes in-flight slots, then exits
GROUP_EXIT_WAIT_S = 10.0  # after the group's SIGKILL: until its last member is gone (vLLM's EngineCore takes ~0.1 s)
PORT_RETRIES = 3  # fresh ports tried when an automatically picked port was taken before the server bound it
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: deliver a signal to this process when its parent (thread) dies


class ServerStartError(DecoderError):
    """A server did not become ready: it exited, or ``/health`` did not answer ok in time (exit 3).

    The message names the command, the URL probed, what was seen last and the tail of the server's log;
    the log file itself is kept (``log=...`` in the message).
    """


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0, read it, close).

    Another process may take it before the server binds it; :func:`launch_process` then retries
    with a new port (``PORT_RETRIES``) when it picked the port itself.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# -- the process -------------------------------------------------------------------------------------

_LIVE: "set[ServerProcess]" = set()  # servers to stop at interpreter exit (strong refs: a dropped one is stopped too)
_LIVE_LOCK = threading.Lock()


def _stop_all_at_exit() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for server in live:
        server.stop()


atexit.register(_stop_all_at_exit)


def _death_signal_hook(sig: int = signal.SIGKILL):
    """A ``preexec_fn`` that makes the child get ``sig`` when its parent thread dies (Linux), else None.

    libc is loaded here, in the parent: the hook itself only calls ``prctl`` and ``getppid`` (no
    imports, no allocation worth the name) between fork and exec.  If the parent died before the
    ``prctl`` took effect, the child exits at once.  The setting survives ``exec`` but not ``fork``:
    it covers the direct child only (see :data:`_SUPERVISOR` for servers that fork helpers).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent is already gone: do not start an orphan server
            os._exit(1)

    return hook


_SUPERVISOR = """\
import os, signal, subprocess, sys, time
grace, stop = float(sys.argv[1]), []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))  # only a flag: waiting in a handler would spin on Popen's lock
child = subprocess.Popen(sys.argv[2:])
while child.poll() is None and not stop:
    time.sleep(0.2)
if stop:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(0, signal.SIGKILL)
sys.exit(child.returncode)
"""


def _group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes of process group ``pgid`` (Linux ``/proc``; elsewhere [])."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp, ...
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


class ServerProcess:
    """A server started by this module: its URL, its log, and how to stop it.

    Use as a context manager (stopped on exit, also on an exception or Ctrl-C), or call :meth:`stop`.

    Attributes
    ----------
    name : str
        ``"llama-server"`` or ``"vllm"``.
    base_url : str
        ``http://127.0.0.1:PORT`` (no trailing slash); the completions endpoints hang below it.
    port : int
    command : tuple of str
        The argv that started it (paste it to start the same server by hand).
    log_path : Path
        stdout + stderr of the server; kept after :meth:`stop`.
    pid : int
        The process the harness started: the server itself, or for servers with helper processes (vLLM) the
        supervisor that runs it; either way the leader of the server's process group.
    """

    def __init__(self, name: str, command: Sequence[str], port: int, log_path: Path, env: dict[str, str] | None,
                 health_path: str, supervise: bool = False):
        self.name = name
        self.command = tuple(command)
        argv, hook = self.command, _death_signal_hook(signal.SIGKILL)
        if supervise:  # a server with helper processes: a supervisor takes the whole group down with it
            argv = (sys.executable, "-c", _SUPERVISOR, str(STOP_GRACE_S), *self.command)
            hook = _death_signal_hook(signal.SIGTERM)
        self.port = port
        self.base_url = f"http://{LOOPBACK}:{port}"
        self.log_path = log_path
        self.health_path = health_path
        self._log = open(log_path, "ab")
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True, preexec_fn=hook)
        except OSError as exc:
            self._log.close()
            raise ServerStartError(f"{name}: could not execute {self.command[0]!r}: {exc}") from exc
        self.pid = self._proc.pid
        self._stopped = False
        self._temp_dirs: list[Path] = []  # removed by stop() (remove_on_stop)
        with _LIVE_LOCK:
            _LIVE.add(self)

    # -- state ----------------------------------------------------------------------------------------
    @property
    def returncode(self) -> int | None:
        """The exit status once the process ended (negative: killed by that signal), else None."""
        return self._proc.poll()

    def is_running(self) -> bool:
        return self._proc.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server log (empty if unreadable)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def describe(self) -> str:
        """One paragraph for error messages: command, URL, pid, exit status, log file and its tail."""
        status = "running" if self.returncode is None else f"exited with status {self.returncode}"
        return (f"{self.name} at {self.base_url} (pid {self.pid}, {status}); command: {' '.join(self.command)}; "
                f"log={str(self.log_path)!r}; last lines of the log:\n{self.log_tail()}")

    # -- readiness ------------------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float) -> None:
        """Poll ``GET {health_path}`` until it answers 200.

        Raises
        ------
        ServerStartError
            The process exited, or no 200 within ``timeout_s`` (the server is stopped then).
        """
        url = self.base_url + self.health_path
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        while True:
            if self.returncode is not None:
                raise ServerStartError(f"{self.name} exited while starting (last /health probe: {last}): "
                                       f"{self.describe()}")
            try:
                with urllib.request.urlopen(url, timeout=HEALTH_PROBE_TIMEOUT_S) as reply:
                    if reply.status == 200:
                        return
                    last = f"HTTP {reply.status}"
            except urllib.error.HTTPError as exc:  # 503 {"error": {"message": "Loading model"}} while loading
                last = f"HTTP {exc.code} {exc.read(300).decode('utf-8', 'replace')!r}"
            except (urllib.error.URLError, OSError) as exc:
                last = f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}"
            if time.monotonic() >= deadline:
                self.stop()
                raise ServerStartError(f"{self.name} not ready after {timeout_s:g} s (GET {url}: {last}): "
                                       f"{self.describe()}")
            time.sleep(HEALTH_POLL_S)

    # -- stopping -------------------------------------------------------------------------------------
    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Stop the server and everything in its process group; returns its exit status.  Idempotent.

        SIGTERM to the group, then SIGKILL to the group if the server has not exited after ``grace_s``.
        The group is signalled even when the server itself already exited (a child it started may live on),
        and on Linux ``stop`` returns once no process of the group is left (zombies not yet reaped by
        whoever adopted them excepted), or after ``GROUP_EXIT_WAIT_S``.
        """
        if not self._stopped:
            self._stopped = True
            for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:  # the whole group is gone
                    break
                except PermissionError:  # the pid was reused by a process we do not own: only ours can be waited
                    self._proc.kill()
                try:
                    self._proc.wait(timeout=wait_s)
                    if sig == signal.SIGTERM:
                        try:  # stragglers of the group (none for llama-server)
                            os.killpg(self.pid, signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
                    break
                except subprocess.TimeoutExpired:
                    continue
            deadline = time.monotonic() + GROUP_EXIT_WAIT_S  # SIGKILLed members take a moment to be gone
            while _group_members(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            self._log.close()
            with _LIVE_LOCK:
                _LIVE.discard(self)
        self._remove_temp_dirs()  # after the process is gone: nothing of it still reads them
        return self._proc.poll()

    def remove_on_stop(self, path: str | os.PathLike) -> None:
        """Remove the folder ``path`` (the server's own temporary files, e.g. a patched package it runs) when the
        server stops; at once if it already has."""
        self._temp_dirs.append(Path(path))
        if self._stopped:
            self._remove_temp_dirs()

    def _remove_temp_dirs(self) -> None:
        while self._temp_dirs:
            shutil.rmtree(self._temp_dirs.pop(), ignore_errors=True)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running() else f"exited {self.returncode}"
        return f"ServerProcess(name={self.name!r}, base_url={self.base_url!r}, pid={self.pid}, {state})"


def _log_file(name: str, log_path: str | os.PathLike | None) -> Path:
    if log_path is not None:
        path = Path(log_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path
    return Path(tempfile.mkdtemp(prefix=f"specverify-{name}-")) / "server.log"


def _bind_failed(server: ServerProcess) -> bool:
    tail = server.log_tail().lower()
    return "bind" in tail or "address already in use" in tail


def launch_process(name: str, build_argv, port: int | None, log_path, env, health_path: str,
            startup_timeout_s: float, supervise: bool = False) -> ServerProcess:
    """Start ``build_argv(port)``, wait for readiness; retry on a fresh port if an auto-picked one was taken."""
    attempts = 1 if port is not None else PORT_RETRIES
    log = _log_file(name, log_path)
    for attempt in range(attempts):
        chosen = port if port is not None else free_port()
        server = ServerProcess(name, build_argv(chosen), chosen, log, env, health_path, supervise)
        try:
            server.wait_ready(startup_timeout_s)
            return server
        except ServerStartError:
            server.stop()
            if port is None and attempt + 1 < attempts and _bind_failed(server):
                continue
            raise
        except BaseException:  # Ctrl-C while waiting: never leave it running
            server.stop()
            raise
    raise AssertionError("unreachable")  # the loop returns or raises


def check_server_args(port, parallel, startup_timeout_s, extra_args) -> None:
    if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
        raise invalid_argument("port", port, "None (pick a free loopback port) or an integer in [1, 65535]")
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise invalid_argument("parallel", parallel, "an integer >= 1 (server slots: requests decoded at once)")
    if not isinstance(startup_timeout_s, (int, float)) or not startup_timeout_s > 0:
        raise invalid_argument("startup_timeout_s", startup_timeout_s, "a number of seconds > 0")
    if isinstance(extra_args, (str, bytes)) or not all(isinstance(a, str) for a in extra_args):
        raise invalid_argument("extra_args", extra_args, "a sequence of strings (argv items), not one string")
