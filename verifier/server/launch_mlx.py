"""Start MLX-LM's server (``mlx_lm server``) for tests and URL audits, as shipped or with the prompt-cache fix.

:func:`launch_mlx_server` runs ``python -m mlx_lm server`` from the venv of ``bash ci/engines/mlx-lm.sh``
(mlx-lm 0.32.2, CPU build of MLX) on the shipped pair converted by MLX-LM's own converter, and waits
for ``/health``; the process is stopped with the harness (:mod:`verifier.server._process`).

The prompt-cache defect (reports/audits/mlx-lm-server-0.32.2/FINDINGS.md): with a draft model,
``speculative_generate_step`` ends with KV caches that hold fewer tokens than the prompt plus the
emitted ones (the last emitted token is not fed to the target when the last round ends with the
target's own token; the draft's cache is one behind as well), while ``_serve_single`` stores the cache
under all of them and ``LRUPromptCache.fetch_nearest_cache`` trims ``len(key) - prefix`` entries; the
next request with that prompt then runs the target on a context without one of its tokens.
``patches=("prompt_cache",)`` starts the server on a copy of the installed ``mlx_lm`` with
:data:`PROMPT_CACHE_FIX` applied (the diff is ``reports/audits/mlx-lm-server-0.32.2/prompt-cache.patch``):

1. ``server.py``: store the caches under the tokens they hold (every layer trimmed to the shortest);
2. ``models/cache.py``: an exact prompt hit keeps one token to process (generation needs one).  Without
   it the first hunk makes exact hits common, and they already fail as shipped (``ValueError: [reshape]
   Cannot infer the shape of an empty array``, the request's connection closed) whenever a prompt equals a
   stored key -- e.g. the numeric floor's prefixes, which are prompts plus emitted tokens.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

from verifier.errors import invalid_argument
from verifier.server._process import LOOPBACK, ServerProcess, check_server_args, launch_process

__all__ = ["launch_mlx_server", "PROMPT_CACHE_FIX", "patched_mlx_lm", "OVERLAY_PREFIX"]

OVERLAY_PREFIX = "specverify-mlx-overlay-"  # the temporary folder of the patched mlx_lm copy (removed on stop)

_SAVE_OLD = """            rqueue.put(None)

            # Save the KV cache again
"""
_SAVE_NEW = """            rqueue.put(None)

            # Save the KV cache under the tokens it holds: speculative decoding
            # leaves the target (and draft) cache without the last emitted
            # token(s), and fetch_nearest_cache trims len(key) - prefix entries.
            held = min(c.offset for c in cache)
            for c in cache:
                c.trim(c.offset - held)
            cache_key = cache_key[:held]

            # Save the KV cache again
"""
_EXACT_OLD = """            cache_entry = self._trie.get(result.model, result.exact)
            return copy.deepcopy(cache_entry.prompt_cache), []
"""
_EXACT_NEW = """            cache_entry = self._trie.get(result.model, result.exact)
            cache = copy.deepcopy(cache_entry.prompt_cache)
            if can_trim_prompt_cache(cache):
                # Leave the last token to process: generation needs one.
                trim_prompt_cache(cache, 1)
                return cache, tokens[-1:]
            return cache, []
"""
PROMPT_CACHE_FIX = (("server.py", _SAVE_OLD, _SAVE_NEW), ("models/cache.py", _EXACT_OLD, _EXACT_NEW))


def patched_mlx_lm(site_packages: Path, dest: Path) -> Path:
    """Copy ``site_packages/mlx_lm`` into ``dest`` and apply :data:`PROMPT_CACHE_FIX`; returns ``dest`` (put it
    first on ``PYTHONPATH``).  A hunk whose old text is not found exactly once is an InvalidArgumentError
    naming the file: another mlx-lm version, never a silent partial patch."""
    shutil.copytree(site_packages / "mlx_lm", dest / "mlx_lm", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, old, new in PROMPT_CACHE_FIX:
        path = dest / "mlx_lm" / rel
        text = path.read_text(encoding="utf-8")
        if text.count(old) != 1:
            raise invalid_argument("patches", "prompt_cache", f"mlx-lm 0.32.2's mlx_lm/{rel} (the hunk's text is "
                                   f"found {text.count(old)} times in {path})")
        path.write_text(text.replace(old, new), encoding="utf-8")
    return dest


def launch_mlx_server(*, num_draft_tokens: int = 1, draft: bool = True, prompt_cache_size: int | None = None,
                      patches: Sequence[str] = (), port: int | None = None, extra_args: Sequence[str] = (),
                      log_path: str | os.PathLike | None = None, startup_timeout_s: float = 180.0) -> ServerProcess:
    """Start ``python -m mlx_lm server`` on the shipped pair and wait for ``/health``.

    Parameters
    ----------
    num_draft_tokens : int, default 1
        ``--num-draft-tokens`` (k; a request may override it with ``num_draft_tokens``).
    draft : bool, default True
        Load the shipped draft (``--draft-model``); False: no speculation.
    prompt_cache_size : int or None
        ``--prompt-cache-size`` (0 turns the prompt cache off: the workaround); None: the server's default.
    patches : sequence of {"prompt_cache"}
        ``"prompt_cache"``: run a copy of ``mlx_lm`` with :data:`PROMPT_CACHE_FIX` (module docstring).
    port, extra_args, log_path, startup_timeout_s
        As :func:`verifier.server.launch.launch_llama_server` (start-up takes about 5 s on 2 cores).

    Returns
    -------
    ServerProcess
        ``.base_url``; a context manager that stops the server (and removes the patched copy of ``mlx_lm``; if the
        server does not start, the copy is removed before the error is raised).

    Raises
    ------
    EngineNotInstalledError
        (exit 2) MLX-LM is not installed; names ``bash ci/engines/mlx-lm.sh``.
    InvalidArgumentError, ServerStartError
        A bad argument; the server did not become ready (its log's tail in the message).
    """
    from verifier.engines.mlx_lm_engine import MLXLM

    check_server_args(port, 1, startup_timeout_s, extra_args)
    if not isinstance(num_draft_tokens, int) or isinstance(num_draft_tokens, bool) or num_draft_tokens < 1:
        raise invalid_argument("num_draft_tokens", num_draft_tokens, "an integer >= 1")
    if prompt_cache_size is not None and (not isinstance(prompt_cache_size, int) or prompt_cache_size < 0):
        raise invalid_argument("prompt_cache_size", prompt_cache_size, "None (the server's default) or an integer >= 0")
    if isinstance(patches, (str, bytes)) or not set(patches) <= {"prompt_cache"}:
        raise invalid_argument("patches", patches, "a sequence of names from ['prompt_cache']")
    root = MLXLM.require_installed()
    python = root / "venv" / "bin" / "python"
    env = dict(os.environ)

    def argv(chosen_port: int) -> list[str]:
        cmd = [str(python), "-m", "mlx_lm", "server", "--model", str(root / "models" / "target"), "--host", LOOPBACK,
               "--port", str(chosen_port)]
        if draft:
            cmd += ["--draft-model", str(root / "models" / "draft"), "--num-draft-tokens", str(num_draft_tokens)]
        if prompt_cache_size is not None:
            cmd += ["--prompt-cache-size", str(prompt_cache_size)]
        return cmd + list(extra_args)

    overlay = None  # the patched copy of mlx_lm: removed when the server stops, or at once if it never starts
    try:
        if patches:
            site = next((root / "venv" / "lib").glob("python3*/site-packages"))
            overlay = Path(tempfile.mkdtemp(prefix=OVERLAY_PREFIX))
            patched_mlx_lm(site, overlay)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(overlay), os.environ.get("PYTHONPATH"))))
        server = launch_process("mlx-lm", argv, port, log_path, env, "/health", startup_timeout_s)
    except BaseException:  # a hunk not found, a server that did not start, Ctrl-C while waiting
        if overlay is not None:
            shutil.rmtree(overlay, ignore_errors=True)
        raise
    if overlay is not None:
        server.remove_on_stop(overlay)
    return server
