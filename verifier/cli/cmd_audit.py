"""``specverify audit``: audit a third-party decoder, kernel or sample file without changing its code.

Modes (exactly one of ``--decoder``, ``--kernel``, ``--samples``):

* ``--decoder module:factory`` (known-p): the decoder's samples are tested against the target's
  processed probs (:func:`verifier.api.check_preserves_target`).  Add ``--blackbox`` to compare
  with plain sampling of ``--target`` instead, or ``--blackbox-reference module:factory`` to compare
  with another plugin (e.g. the same engine with speculation off) -- two-sample tests.
* ``--kernel module:factory``: kernel-level audit on synthetic cases (standard + adversarial).
* ``--engine NAME``: the same, for an outside engine's kernel registered in :mod:`verifier.engines`
  (``--engine-arg KEY=VALUE`` are its options; ``specverify engines`` lists names and options).
  ``--report-dir DIR`` writes report.json + report.md (:mod:`verifier.audit.kernel_report`); then the
  exit code is the report's verdict on the emitted-token law (0 PASS, 1 BIAS DETECTED, 4 UNDERPOWERED).
* ``--samples FILE.jsonl``: imported samples (schema in :mod:`verifier.audit.jsonl`), known-p
  against ``--target`` or black-box against ``--blackbox-reference``.

``--export FILE.jsonl`` writes the audited decoder's samples in the import format.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_USAGE, invalid_argument

HELP = "Audit a third-party decoder (module:factory), verification kernel, or imported JSONL samples."


def _option(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--option {text!r} is invalid; allowed: KEY=VALUE (VALUE parsed as JSON, else a string)")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def _ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--prompt-ids {text!r} is invalid; allowed: comma-separated token ids, e.g. 5,2,9") from None
    if not ids or min(ids) < 0:
        raise argparse.ArgumentTypeError(f"--prompt-ids {text!r} is invalid; allowed: at least one token id >= 0")
    return ids


def register(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--decoder", metavar="SPEC", help="decoder plugin: package.module:factory or path/to/file.py:factory")
    mode.add_argument("--kernel", metavar="SPEC", help="verification-kernel plugin (the kernel function or a factory)")
    mode.add_argument("--samples", metavar="FILE", help="imported samples, .jsonl or .jsonl.gz (streamed)")
    mode.add_argument("--engine", metavar="NAME", help="outside engine's verification kernel (see `specverify engines`)")
    parser.add_argument("--engine-arg", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="engine option (repeatable; VALUE is JSON if it parses), e.g. block_verification=true")
    parser.add_argument("--report-dir", metavar="DIR", help="kernel/engine mode: write report.json and report.md here")
    parser.add_argument("--target-tv", type=float, default=0.03, metavar="TV",
                        help="kernel/engine mode with --report-dir: a cell that cannot see TV is UNDERPOWERED. Default: 0.03")
    parser.add_argument("--option", action="append", type=_option, default=[], metavar="KEY=VALUE",
                        help="option passed to the plugin factory (repeatable; VALUE is JSON if it parses)")
    parser.add_argument("--target", metavar="MODEL", help="target model: checkpoint folder, shipped:target or tabular:NAME")
    parser.add_argument("--draft", metavar="MODEL", help="draft model offered to factories that take `draft` (default: the target's pair)")
    parser.add_argument("--blackbox", action="store_true", help="two-sample mode: compare with plain sampling of --target")
    parser.add_argument("--blackbox-reference", metavar="SPEC", help="two-sample mode: compare with this plugin decoder")
    parser.add_argument("--prompt-ids", action="append", type=_ids, default=[], metavar="IDS",
                        help="prompt token ids, comma-separated (repeatable; one set of cells per prompt)")
    parser.add_argument("--temperature", type=float, default=1.0, help="Default: 1.0")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--num-draft-tokens", type=int, default=4, metavar="K", help="offered to factories as num_draft_tokens. Default: 4")
    parser.add_argument("--num-samples", type=int, default=2000, metavar="N", help="samples per prompt (per arm in black-box mode). Default: 2000")
    parser.add_argument("--max-new-tokens", type=int, default=4, metavar="T", help="Default: 4")
    parser.add_argument("--num-draws", type=int, default=200_000, metavar="N", help="kernel mode: draws per case. Default: 200000")
    parser.add_argument("--case", action="append", default=[], metavar="NAME",
                        help="kernel mode: run only these cases (seed-3token, chain-k4, one-hot-blind, adversarial[full_p_fallback]; "
                             "repeatable). Default: all")
    parser.add_argument("--alpha", type=float, default=1e-3, help="family-wise false-alarm rate. Default: 0.001")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0")
    parser.add_argument("--vocab-size", type=int, default=None, help="vocabulary size when no --target gives it")
    parser.add_argument("--eos-token-id", type=int, default=None, help="EOS id when no --target gives it")
    parser.add_argument("--acceptance", choices=("any", "canonical"), default="any",
                        help="kernel mode: 'canonical' declares the min(1, p/q) rule, so its accepted-count law is tested "
                             "(acceptance rule conformance, exit 1 on a mismatch); 'any' only reports acceptance beside "
                             "the bias verdict. Default: any")
    parser.add_argument("--blind-tolerance", type=float, default=0.01, metavar="TV",
                        help="flag a prompt's first position as blind when full-p fallback moves it by <= TV. Default: 0.01")
    parser.add_argument("--export", metavar="FILE", help="also write the audited decoder's samples as JSONL")
    parser.add_argument("--json", metavar="FILE", help="write the verdict and every cell as JSON")


def _sampling(args):
    from verifier.sampling import SamplingConfig

    return SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, repetition_penalty=args.repetition_penalty)


def _pair(args):
    if not args.target:
        return None
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    draft = args.draft or (args.target.replace("target", "draft") if args.target.startswith("shipped:") else args.target)
    return load_pair(ModelPair(name="audit", target=args.target, draft=draft))


class _Recording:
    """Keeps every batch the audited decoder returned, so ``--export`` writes exactly the audited samples."""

    def __init__(self, decoder) -> None:
        self.inner, self.calls = decoder, []
        self.name, self.vocab_size, self.eos_token_id = decoder.name, decoder.vocab_size, decoder.eos_token_id

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        rows = self.inner.generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)
        self.calls.append((list(prompt_ids), rows, int(seed)))
        return rows


def _print_blind_cells(pair, prompts, sampling, tolerance: float) -> None:
    """Flag prompts whose first position cannot reveal a rejection-path defect (blind cells)."""
    import numpy as np

    from verifier.audit.kernel_audit import blind_cell_reasons

    if sampling.greedy:
        return
    for i, prompt in enumerate(prompts):
        ids = np.asarray([prompt], dtype=np.int64)
        p = pair.reference.next_probs(ids, sampling)[0]
        q = pair.draft_reference.next_probs(ids, sampling)[0]
        for reason in blind_cell_reasons(list(p), list(q), tolerance=tolerance):
            print(f"blind cell: prompt {i} {list(prompt)[:8]} ({sampling.label()}), position 1: {reason}")


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
    else:
        return
    raise ReportWriteError(f"{flag}={path!r} cannot be written: {why}; allowed: a file path in an existing, writable folder")


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
            if isinstance(ref.model, TabularLM) and len(prompt) < ref.model.context_len:
                raise invalid_argument(name, ",".join(map(str, prompt)), f"at least {ref.model.context_len} ids (the tabular context length)")


def _write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path:
        from verifier.errors import ReportWriteError

        try:
            Path(path).write_text(json.dumps(payload, indent=2, default=str) + "\n")
        except OSError as exc:
            raise ReportWriteError(f"--json={path!r} cannot be written: {exc.strerror or exc}") from None


def _run_kernel(args) -> int:
    from verifier.audit.kernel_audit import adversarial_case, audit_kernel, standard_kernel_cases
    from verifier.audit.plugins import load_kernel

    engine = None
    if args.engine:
        from verifier.audit.plugins import PluginKernel
        from verifier.engines import get_engine

        engine = get_engine(args.engine)
        if engine.kind != "kernel":
            raise invalid_argument("--engine", args.engine, "an engine of kind 'kernel' (see `specverify engines`)")
        inner = engine.make(**dict(args.option + args.engine_arg))
        kernel = PluginKernel(inner, name=getattr(inner, "name", args.engine))
    else:
        kernel = load_kernel(args.kernel, **dict(args.option + args.engine_arg))
    cases = standard_kernel_cases() + [adversarial_case("full_p_fallback", seed=args.seed)[0]]
    if args.case:
        unknown = sorted(set(args.case) - {c.name for c in cases})
        if unknown:
            raise invalid_argument("--case", unknown[0], "one of " + ", ".join(c.name for c in cases))
        cases = [c for c in cases if c.name in args.case]
    import time

    results, times = [], []
    for c in cases:
        start = time.perf_counter()
        results.append(audit_kernel(kernel, c, num_draws=args.num_draws, seed=args.seed, alpha=args.alpha,
                                    acceptance=args.acceptance))
        seconds = time.perf_counter() - start
        times.append(seconds)
        r = results[-1]
        print(f"{r.summary()} [{seconds:.1f} s, {args.num_draws / seconds:,.0f} draws/s]")
        print(f"  acceptance: {r.acceptance['note']}")  # beside the verdict, never part of it
        if r.conforms is not None:
            print(f"  acceptance rule conformance (declared canonical): {'CONFORMS' if r.conforms else 'NONCONFORMING'} "
                  f"(p={r.conformance.result.pvalue:.3g}, alpha={r.alpha:g}; not distribution bias)")
    for r in results:
        for reason in r.blind:
            print(f"  blind cell ({r.case.name}) {reason}")
    _write_json(args.json, {"mode": "kernel", "kernel": args.kernel, "results": [
        {"case": r.case.name, "verdict": r.verdict, "num_draws": r.num_draws, "blind": r.blind,
         "cells": [{"name": c.name, "statistic": c.result.statistic, "pvalue": c.result.pvalue} for c in r.cells],
         "acceptance": r.acceptance, "acceptance_conformance": None if r.conforms is None else
         {"verdict": "CONFORMS" if r.conforms else "NONCONFORMING", "pvalue": r.conformance.result.pvalue}} for r in results]})
    if args.report_dir:
        return _write_kernel_report(args, kernel, engine, results, times)
    return EXIT_BIAS if any(r.verdict != "PASS" or r.conforms is False for r in results) else EXIT_OK


def _write_kernel_report(args, kernel, engine, results, times) -> int:
    import shlex
    import sys

    from verifier.audit.kernel_report import kernel_audit_report, write_kernel_report

    inner = getattr(kernel, "inner", kernel)
    described = None
    if engine is not None:
        from verifier.engines._source import file_sha256

        described = {**engine.describe(), "install_record": engine.install_record(),
                     "source_sha256": {f: file_sha256(engine.install_dir() / "src" / f) for f in engine.source_files()}}
    report = kernel_audit_report(results, kernel=args.engine or args.kernel, settings=getattr(inner, "settings", None), engine=described,
                                 target_tv=args.target_tv, acceptance_rule=getattr(inner, "acceptance_rule", "canonical"),
                                 command="specverify " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["audit"] else None,
                                 seconds=times)
    out = write_kernel_report(report, args.report_dir)
    print(f"report: {out}/report.md -- {report['verdict']} (emitted-token law, target TV {args.target_tv:g})")
    return {"PASS": EXIT_OK, "BIAS DETECTED": EXIT_BIAS}.get(report["verdict"], 4)


def run(args: argparse.Namespace) -> int:
    _check_output_path("--json", args.json)
    _check_output_path("--export", args.export)
    if (args.engine_arg and not (args.engine or args.kernel)) or (args.report_dir and not (args.engine or args.kernel)):
        raise invalid_argument("--engine-arg/--report-dir", args.engine_arg or args.report_dir, "with --engine NAME or --kernel SPEC")
    if args.num_draft_tokens < 1:
        raise invalid_argument("--num-draft-tokens", args.num_draft_tokens, "an integer >= 1")
    if not args.blind_tolerance >= 0:
        raise invalid_argument("--blind-tolerance", args.blind_tolerance, "a total variation >= 0")
    if args.kernel or args.engine:
        return _run_kernel(args)
    from verifier.audit.plugins import load_decoder

    sampling = _sampling(args)
    pair = _pair(args)
    vocab = args.vocab_size if args.vocab_size is not None else (pair.vocab_size if pair else None)
    eos = args.eos_token_id if args.eos_token_id is not None else (pair.eos_token_id if pair else None)
    prompts = args.prompt_ids or [[0]]
    context = {}
    if pair is not None:
        context = {"target": lambda: pair.target, "draft": lambda: pair.draft, "vocab_size": lambda: pair.vocab_size,
                   "eos_token_id": lambda: pair.eos_token_id}
    context["num_draft_tokens"] = lambda: args.num_draft_tokens
    if args.samples:
        from verifier.audit.jsonl import ReplayDecoder, import_jsonl

        if vocab is None:
            raise invalid_argument("--vocab-size", None, "an integer (or --target) to validate imported token ids")
        groups = import_jsonl(args.samples, max_new_tokens=args.max_new_tokens, vocab_size=vocab, eos_token_id=eos)
        decoder = ReplayDecoder(groups, vocab_size=vocab, eos_token_id=eos, name=f"imported:{Path(args.samples).name}")
        if not args.prompt_ids:
            prompts = [list(g.prompt_token_ids) for g in groups.values() if g.sampling == sampling]
        counts = [g.num_samples for g in groups.values() if g.sampling == sampling]
        num_samples = min(counts) if counts else args.num_samples
        if pair is not None:
            from verifier.audit.jsonl import compare_target_logprobs

            for g in groups.values():
                if g.target_logprobs is not None:
                    print(compare_target_logprobs(g, pair.reference).summary())
    else:
        decoder = _Recording(load_decoder(args.decoder, vocab_size=vocab, eos_token_id=eos, context=context, **dict(args.option)))
        num_samples = args.num_samples
    if pair is not None:
        _check_prompts(pair, prompts, "--prompt-ids" if args.prompt_ids or not args.samples else f"prompt_token_ids in {args.samples}")
        _print_blind_cells(pair, prompts, sampling, args.blind_tolerance)
    if args.blackbox or args.blackbox_reference:
        from verifier.audit.blackbox import blackbox_audit

        if args.blackbox_reference:
            reference = load_decoder(args.blackbox_reference, vocab_size=vocab, eos_token_id=eos, context=context)
        elif pair is not None:
            from verifier.decoders.speculative import AncestralDecoder

            reference = AncestralDecoder(pair.target)
        else:
            raise invalid_argument("--blackbox", True, "with --target (plain sampling of it is the reference) or --blackbox-reference SPEC")
        result = blackbox_audit(decoder, reference, prompts, sampling, num_samples=num_samples, max_new_tokens=args.max_new_tokens,
                                vocab_size=decoder.vocab_size, alpha=args.alpha, seed=args.seed, eos_token_id=decoder.eos_token_id)
        print(result.summary())
        payload = {"mode": "blackbox", "verdict": result.verdict, "cells": [
            {"prompt": c.prompt_index, "name": c.name, "statistic": c.result.statistic, "pvalue": c.result.pvalue}
            for c in result.cells]}
    else:
        if pair is None:
            raise invalid_argument("--target", None, "a target model for known-p mode (or use --blackbox-reference SPEC)")
        from verifier.api import check_preserves_target

        target = pair.target_model
        result = check_preserves_target(decoder, target, prompts, sampling, num_samples=num_samples,
                                        max_new_tokens=args.max_new_tokens, alpha=args.alpha, seed=args.seed)
        print(result.message())
        payload = {"mode": "known-p", "verdict": result.verdict, "combined_pvalue": result.combined_pvalue, "cells": [
            {"name": c.name, "test": c.test, "n": c.n, "statistic": c.statistic, "pvalue": c.pvalue,
             "adjusted_pvalue": c.adjusted_pvalue, "effect": c.effect} for c in result.cells]}
    payload.update(decoder=decoder.name, sampling=sampling.to_dict(), num_samples=num_samples, seed=args.seed, alpha=args.alpha,
                   settings=_settings(decoder))
    _write_json(args.json, payload)
    if args.export and isinstance(decoder, _Recording):
        from verifier.audit.jsonl import export_jsonl

        for i, (prompt, rows, seed) in enumerate(decoder.calls):
            export_jsonl(args.export, rows, prompt_id=f"p{i}", prompt_token_ids=prompt, sampling=sampling, seed=seed,
                         decoder=decoder.name, append=i > 0)
        print(f"exported {sum(len(c[1]) for c in decoder.calls)} samples to {args.export}")
    return EXIT_OK if result.verdict == "PASS" else EXIT_BIAS if result.verdict == "BIAS DETECTED" else 4


__all__ = ["HELP", "register", "run", "EXIT_USAGE"]
