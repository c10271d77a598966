"""``audit --engine NAME``: start the engine's worker before the harness's own start-up.

An engine audit's harness work before its first ``generate`` call -- importing torch, transformers, scipy and
statsmodels, loading the reference pair, planning -- runs on one core for several seconds, and so does most of a
worker engine's start-up (its imports and model load in its own venv).  Started at the beginning of the audit, after
the cheap argument checks, the engine's start-up runs beside the harness's instead of after it; the runner's decoder,
built later from the same arguments, adopts the worker (:func:`verifier.engines.bridge.adopt`), and a worker that is
not adopted (other arguments, a usage error found later, an interrupt) is killed, never waited for.

Only the engine's own factory is called here (its module imports nothing heavy), with the parameters the runner's
:func:`verifier.runner.plan.build_decoder` would offer it: the options, ``num_draft_tokens``, and the target
checkpoint's ``vocab_size`` / ``eos_token_id`` read from its ``config.json`` (and ``generation_config.json``), as
:func:`verifier.runner.models._info` reads them from the loaded model.  Anything else it asks for, or anything
unusual (``--resume``, ``--url``, a target that is no checkpoint folder), and nothing is started here.

Measured (reports/benchmarks.md section 40, quiet 2-core machine): vLLM control, T = 1, k = 3, n = 5,000, time to
verdict 19.6-21.9 s without, 15.7-16.3 s with (three alternating runs each); the 53,474-row certificate against vLLM
alone making the same calls 0.81 without, 0.94 with.  (Session 25 started the worker after the pair had loaded:
that overlapped the plan only, and measured no gain.)
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

from verifier.errors import VerifierError
from verifier.runner.guards import RUN_FILE, check_fresh_run_dir  # a light module (no torch)

__all__ = ["prestart_engine", "prestarted_decoder", "discard_prestarted"]

_STARTED: list = []  # the decoder whose worker prestart_engine started (at most one)


def prestarted_decoder() -> Any:
    """The decoder :func:`prestart_engine` built and whose worker it started, or None."""
    return _STARTED[0] if _STARTED else None


def prestart_engine(args: Any) -> bool:
    """Start the worker of an ``audit --engine`` decoder now (after :func:`verifier.cli._audit_engines
    ._route_decoder_engine`); True when one was started.

    Raises
    ------
    VerifierError
        Only a usage error (exit 2) the engine's factory raised (an option it refuses), at once; any other error is
        left to the runner, which builds the decoder again and reports it."""
    engine = getattr(args, "engine_class", None)
    if (engine is None or not getattr(engine, "worker_decoder", False) or getattr(args, "url", None)
            or getattr(args, "resume", None)):
        return False
    try:
        info = checkpoint_info(args.target)
        if info is None or ":" not in str(args.decoder) or not _worth_starting(args, info[0]):
            return False
        module, name = str(args.decoder).rsplit(":", 1)
        factory = getattr(importlib.import_module(module), name)
        offered = {"num_draft_tokens": int(args.num_draft_tokens), "vocab_size": info[0], "eos_token_id": info[1]}
        params = inspect.signature(factory).parameters
        kwargs = dict(args.option)
        # the runner offers a name only where the options do not give it (verifier.plugins._build); a loaded model
        # asked for (target, draft, or a *_model the options leave out): only the runner has it
        if any(p in params and p not in kwargs for p in ("target", "draft", "target_model", "draft_model")):
            return False
        kwargs.update({k: v for k, v in offered.items() if k in params and k not in kwargs})
        decoder = factory(**kwargs)
        start = getattr(decoder, "start", None)
        if not callable(start):
            return False
        start()
        _STARTED[:] = [decoder]  # its worker may also draw the first chunks (verifier.cli._presample)
        return True
    except VerifierError as exc:
        if exc.exit_code == 2:  # e.g. the factory refused an option: the same usage error the runner would raise later
            raise
        return False
    except Exception:  # noqa: BLE001 - the runner builds the decoder again and reports the error
        return False


def _worth_starting(args: Any, vocab_size: int) -> bool:
    """False when the audit will stop with a usage error before it samples (the runner raises it, exit 2, later; no
    engine should start for it): a run folder that already holds a run, a count below 1, a prompt id outside the
    vocabulary."""
    for name in ("num_samples", "max_new_tokens", "chunk_size"):
        value = getattr(args, name, None)
        if value is not None and (not isinstance(value, int) or value < 1):
            return False
    if any(not 0 <= int(t) < vocab_size for p in (getattr(args, "prompt_ids", None) or []) for t in p):
        return False
    if getattr(args, "run_dir", None):
        try:
            check_fresh_run_dir(args.run_dir, RUN_FILE)
        except VerifierError:
            return False
    return True


def checkpoint_folder(target: Any) -> Path | None:
    """The checkpoint folder of ``shipped:NAME`` or a path, as engines resolve it
    (:func:`verifier.engines.decoder.checkpoint_dir`); None where that refuses it (no ``config.json``, a tabular or
    unknown shipped name)."""
    from verifier.engines.decoder import checkpoint_dir

    try:
        return checkpoint_dir(str(target or ""))
    except VerifierError:
        return None


def checkpoint_info(target: Any) -> tuple[int, int | None] | None:
    """``(vocab_size, eos_token_id)`` of a checkpoint folder (``shipped:NAME`` or a path) from its JSON files, as the
    loaded model gives them (the generation config's eos first, a list's first id); None when not readable."""
    folder = checkpoint_folder(target)
    if folder is None:
        return None
    try:
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    gen = {}
    if (folder / "generation_config.json").is_file():
        try:
            gen = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    vocab = cfg.get("vocab_size") if isinstance(cfg, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool):
        return None
    eos = gen.get("eos_token_id") if isinstance(gen, dict) else None
    eos = cfg.get("eos_token_id") if eos is None else eos
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    if eos is not None and (isinstance(eos, bool) or not isinstance(eos, int)):
        return None  # a value the runner may read otherwise (true, 0.0): not mirrored, nothing started
    return vocab, eos


def discard_prestarted() -> None:
    """Kill a worker started here that no decoder adopted (the audit ended first: a usage error found after the start,
    an interrupt), now rather than at the process's exit -- an in-process caller of ``main`` goes on running."""
    from verifier.engines.bridge import close_pool

    _STARTED.clear()
    close_pool()
