"""Helpers every mode of ``specverify audit`` shares (split from :mod:`verifier.cli.cmd_audit`).

Argument types, the sampling and model pair the flags describe, checks that fail before any sampling
(exit 2), and the ``--json`` writer.  Imports stay inside the functions: ``--help`` loads this module.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from verifier.errors import invalid_argument

DEFAULT_REPORT_DIR = "reports"


def _progress_on(args: argparse.Namespace) -> bool:
    from verifier import progress

    return progress.from_args(args)


def _option(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} is invalid; allowed: KEY=VALUE (VALUE parsed as JSON, else a string)")  # argparse names the flag
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


SAMPLING_FLAGS = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
                  "repetition_penalty": "--repetition-penalty", "presence_penalty": "--presence-penalty",
                  "frequency_penalty": "--frequency-penalty", "min_p": "--min-p"}  # SamplingConfig field -> audit flag


def _sampling(args):
    """The audit's :class:`~verifier.sampling.SamplingConfig` from its flags; a value outside a field's range is an
    InvalidArgumentError (exit 2) naming the flag (``--min-p=1.5 is invalid; allowed: ...``)."""
    from verifier.errors import InvalidArgumentError
    from verifier.sampling import SamplingConfig

    values = {field: getattr(args, field, None) for field in SAMPLING_FLAGS}
    try:
        return SamplingConfig(**values)
    except InvalidArgumentError as exc:
        text = str(exc)
        for field, flag in SAMPLING_FLAGS.items():
            if text.startswith(f"{field}="):
                raise InvalidArgumentError(flag + text[len(field):]) from None
        raise


def _draft_spec(args) -> str:
    return args.draft or (args.target.replace("target", "draft") if args.target.startswith("shipped:") else args.target)


def _pair(args):
    if not args.target:
        return None
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    return load_pair(ModelPair(name="audit", target=args.target, draft=_draft_spec(args), device=args.device, dtype=args.dtype))


def _settings(decoder) -> Any:
    while decoder is not None and not hasattr(decoder, "settings"):
        decoder = getattr(decoder, "inner", None)
    return getattr(decoder, "settings", None)


def _check_output_path(flag: str, path: str | None) -> None:
    """Fail before any sampling when an output file cannot be created (exit 2, not a traceback at the end)."""
    import os

    from verifier.errors import ReportWriteError

    if not path:
        return
    folder = Path(path).parent
    if Path(path).is_dir():
        why = "it is a folder"
    elif not folder.is_dir() or not os.access(folder, os.W_OK):
        why = f"{str(folder)!r} is not a writable folder"
    else:  # os.access says yes for root even where creating fails (/proc): try to create it
        existed = Path(path).exists()
        try:
            with open(path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            why = exc.strerror or str(exc)
        else:
            if not existed:
                Path(path).unlink(missing_ok=True)
            return
    raise ReportWriteError(f"{flag}={path!r} cannot be written: {why}; allowed: a file path in an existing, writable folder")


def _check_model_flags(args, pair) -> None:
    """--vocab-size / --eos-token-id given together with a --target must agree with the target; no
    half-precision --dtype for tabular models."""
    if pair is None:
        return
    if args.dtype in ("float16", "bfloat16") and all(s.startswith("tabular:") for s in (args.target, _draft_spec(args))):
        raise invalid_argument("--dtype", args.dtype, "float32 or float64 for tabular models (they compute in "
                               "float64 and would silently ignore a half-precision dtype)")
    if args.vocab_size is not None and args.vocab_size != pair.vocab_size:
        raise invalid_argument("--vocab-size", args.vocab_size, f"the target's value {pair.vocab_size} (--target "
                               f"{args.target!r} defines it; omit the flag or make it agree)")
    eos = args.eos_token_id
    if eos is not None and pair.eos_token_id is not None and eos != pair.eos_token_id:
        raise invalid_argument("--eos-token-id", eos, f"the target's value {pair.eos_token_id} (--target "
                               f"{args.target!r} defines it; omit the flag or make it agree)")
    if eos is not None and not 0 <= eos < pair.vocab_size:
        raise invalid_argument("--eos-token-id", eos, f"a token id in 0..{pair.vocab_size - 1} (the target's "
                               "vocabulary)")


def _check_prompts(pair, prompts, name: str) -> None:
    """Prompt ids must lie in the target's vocabulary and be as long as a tabular model's context."""
    from verifier.exact.tabular import TabularLM

    for prompt in prompts:
        if not len(prompt):
            raise invalid_argument(name, "", "at least 1 token id (the target is scored after the prompt)")
        bad = [t for t in prompt if not 0 <= t < pair.vocab_size]
        if bad:
            raise invalid_argument(name, ",".join(map(str, prompt)), f"token ids in 0..{pair.vocab_size - 1} (id {bad[0]} is outside the vocabulary)")
        for ref in (pair.reference, pair.draft_reference):
            if ref is not None and isinstance(ref.model, TabularLM) and len(prompt) < ref.model.context_len:
                raise invalid_argument(name, ",".join(map(str, prompt)), f"at least {ref.model.context_len} ids (the tabular context length)")


def _write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        from verifier.errors import ReportWriteError

        try:
            Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
        except OSError as exc:
            raise ReportWriteError(f"--json={path!r} cannot be written: {exc.strerror or exc}") from None


def _draft_unknown_why(pair, decoder: str | None) -> str:
    """Why the audited decoder's draft is unknown ("" when known): ``--draft unknown``, or a factory,
    class or engine that declares ``draft_known = False`` (:mod:`verifier.runner.draft`)."""
    from verifier.runner.draft import declared_draft_known

    if pair is not None and pair.draft_reference is None:
        return "--draft unknown"
    if decoder and ":" in decoder:
        from verifier.plugins import _resolve

        try:
            factory = _resolve(decoder)
        except Exception:  # noqa: BLE001  the runner reports a bad spec with its own exit code
            return ""
        if not declared_draft_known(factory):
            return f"{decoder} declares draft_known = False: it loads its own draft"
    return ""

