"""Kernel and engine modes of ``specverify audit`` (split from :mod:`verifier.cli.cmd_audit`).

* ``--kernel SPEC`` / ``--engine NAME`` of kind "kernel": the kernel audit on synthetic cases
  (:func:`verifier.audit.kernel_audit.audit_kernel`), optionally written as a report folder;
* ``--engine NAME`` of kind "decoder": rewritten to the known-p audit of the engine's decoder
  factory (:func:`_route_decoder_engine`).
"""

from __future__ import annotations

from verifier.cli._audit_common import _draft_spec, _write_json
from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_UNDERPOWERED, invalid_argument

__all__ = ["_run_kernel", "_kernel_exit", "_write_kernel_report", "_route_decoder_engine", "restore_kernel_resume"]

DEFAULT_NUM_DRAWS = 200_000  # kernel mode: draws per case


def _run_kernel(args) -> int:
    from verifier.audit.kernel_audit import adversarial_case, audit_kernel, standard_kernel_cases
    from verifier.plugins import load_kernel

    engine = None
    if args.engine:
        from verifier.plugins import PluginKernel
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

    if args.num_draws is None:
        args.num_draws = DEFAULT_NUM_DRAWS
    if isinstance(args.num_draws, bool) or args.num_draws < 1:
        raise invalid_argument("--num-draws", args.num_draws, "an integer >= 1")
    draw_seed = args.seed
    if getattr(args, "shard", None):  # shard I/N: its own seed, spawned from --seed (verifier.audit.kernel_shards)
        from verifier.audit.kernel_shards import shard_seed
        from verifier.runner.shard import parse_shard

        spec = parse_shard(args.shard)
        if not args.report_dir:
            raise invalid_argument("--shard", args.shard, "with --report-dir DIR (the shard's draws, merged by `specverify merge`)")
        args.shard, draw_seed = str(spec), shard_seed(args.seed, spec.index)
    args.draw_seed = draw_seed
    checkpoint = None
    if args.report_dir:  # the draws go to DIR/draws as they are drawn (verifier.audit.kernel_checkpoint)
        from verifier.audit.kernel_checkpoint import KernelCheckpoint

        checkpoint = KernelCheckpoint(args.report_dir, _kernel_identity(args, engine, cases), resume=bool(args.resume))
    results, times = [], []
    for c in cases:
        start = time.perf_counter()
        results.append(audit_kernel(kernel, c, num_draws=args.num_draws, seed=draw_seed, alpha=args.alpha,
                                    acceptance=args.acceptance, target_tv=args.target_tv, checkpoint=checkpoint))
        seconds = time.perf_counter() - start
        times.append(seconds)
        r = results[-1]
        fresh = args.num_draws - (checkpoint.resumed_rows if checkpoint is not None else 0)
        stored = f"; {args.num_draws - fresh} draws read back from {args.report_dir}/draws" if fresh < args.num_draws else ""
        print(f"{r.summary()} [{seconds:.1f} s, {fresh / seconds:,.0f} draws/s{stored}]")
        if r.power_note():
            print(f"  {r.power_note()}")
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
    return _kernel_exit(results)


def _kernel_identity(args, engine, cases) -> dict:
    """What a kernel audit's stored draws are of (:class:`verifier.audit.kernel_checkpoint.KernelCheckpoint`)."""
    from verifier.audit.kernel_audit import DEFAULT_BATCH
    from verifier.audit.kernel_checkpoint import case_digest

    return {"kernel": args.kernel, "engine": args.engine, "engine_version": getattr(engine, "version", None),
            "options": {str(k): v for k, v in args.option}, "engine_args": {str(k): v for k, v in args.engine_arg},
            "cases": [{"name": c.name, "sha256": case_digest(c)} for c in cases], "seed": args.seed, "alpha": args.alpha,
            "target_tv": args.target_tv, "acceptance": args.acceptance, "batch_size": DEFAULT_BATCH, "num_draws": args.num_draws,
            "shard": getattr(args, "shard", None), "draw_seed": args.draw_seed}


# flag, attribute, identity key, the flag's default (a flag left at its default takes the stored value)
_RESUMED_FLAGS = (("--seed", "seed", "seed", 0), ("--alpha", "alpha", "alpha", 1e-3), ("--acceptance", "acceptance", "acceptance", "any"),
                  ("--target-tv", "target_tv", "target_tv", None), ("--shard", "shard", "shard", None))


def restore_kernel_resume(args) -> None:
    """``--resume DIR`` of a kernel audit: the audit's flags from ``DIR/draws/identity.json``.

    ``--num-draws`` may grow the plan (default: the stored plan).  A flag given with a value other than
    the stored one is refused (exit 2, naming the flag); ``--engine-arg`` / ``--option`` / ``--case``
    cannot be changed on a resume.

    Raises
    ------
    InvalidArgumentError
        A flag differs from the stored identity.
    """
    import json
    from pathlib import Path

    from verifier.audit.kernel_checkpoint import DRAWS_DIR, IDENTITY_FILE

    stored = json.loads((Path(args.resume) / DRAWS_DIR / IDENTITY_FILE).read_text())
    for flag, attr, key, default in _RESUMED_FLAGS:
        given = getattr(args, attr)
        if given != default and given != stored[key]:
            raise invalid_argument(flag, given, f"the stored {stored[key]!r} of {args.resume} (or leave it out)")
        setattr(args, attr, stored[key])
    for flag, attr in (("--engine-arg", "engine_arg"), ("--option", "option"), ("--case", "case")):
        if getattr(args, attr):
            raise invalid_argument(flag, getattr(args, attr), f"nothing with --resume of a kernel audit (stored in {args.resume})")
    if args.report_dir and Path(args.report_dir) != Path(args.resume):
        raise invalid_argument("--report-dir", args.report_dir, f"nothing with --resume (the report is rewritten in {args.resume})")
    args.kernel, args.engine, args.report_dir = stored["kernel"], stored["engine"], args.resume
    args.option, args.engine_arg = list(stored["options"].items()), list(stored["engine_args"].items())
    args.case = [c["name"] for c in stored["cases"]]
    args.num_draws = stored["num_draws"] if args.num_draws is None else args.num_draws


def _kernel_exit(results) -> int:
    """1 on any bias or nonconformance, else 4 when any case is UNDERPOWERED, else 0."""
    if any(r.verdict == "BIAS DETECTED" or r.conforms is False for r in results):
        return EXIT_BIAS
    return EXIT_UNDERPOWERED if any(r.verdict == "UNDERPOWERED" for r in results) else EXIT_OK


def _write_kernel_report(args, kernel, engine, results, times) -> int:
    from verifier.audit.kernel_report import kernel_audit_report, write_kernel_report

    inner = getattr(kernel, "inner", kernel)
    described = None
    if engine is not None:
        from verifier.engines._source import file_sha256

        described = {**engine.describe(), "install_record": engine.install_record(),
                     "source_sha256": {f: file_sha256(engine.install_dir() / "src" / f) for f in engine.source_files()}}
    report = kernel_audit_report(results, kernel=args.engine or args.kernel, settings=getattr(inner, "settings", None), engine=described,
                                 target_tv=args.target_tv, acceptance_rule=getattr(inner, "acceptance_rule", "canonical"),
                                 command=_reproduce_command(args), seconds=times)
    out = write_kernel_report(report, args.report_dir)
    print(f"report: {out}/report.md -- {report['verdict']} (emitted-token law, target TV {args.target_tv:g})")
    return {"PASS": EXIT_OK, "BIAS DETECTED": EXIT_BIAS}.get(report["verdict"], 4)


def _reproduce_command(args) -> str | None:
    """The command a kernel report gives to reproduce it: the command line as typed, or, for ``--resume``, the one
    straight run it equals bit for bit (every flag from the stored identity, ``--num-draws`` the new total) -- a
    ``--resume DIR`` line reproduces nothing on another machine."""
    import shlex
    import sys

    if sys.argv[1:2] != ["audit"]:
        return None
    if not args.resume:
        return "specverify " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    words = ["audit", "--engine" if args.engine else "--kernel", args.engine or args.kernel]
    words += [w for k, v in args.engine_arg for w in ("--engine-arg", f"{k}={v}")]
    words += [w for k, v in args.option for w in ("--option", f"{k}={v}")]
    words += [w for c in args.case for w in ("--case", c)]
    for flag, attr, _, default in _RESUMED_FLAGS:
        if getattr(args, attr) is not None and getattr(args, attr) != default:
            words += [flag, str(getattr(args, attr))]
    words += ["--num-draws", str(args.num_draws), "--report-dir", str(args.report_dir)]
    return "specverify " + " ".join(shlex.quote(w) for w in words)


def _route_decoder_engine(args) -> bool:
    """``--engine NAME`` of kind "decoder": rewrite to ``--decoder verifier.engines.<module>:decoder``.

    The engine options are checked (exit 2 before anything starts), the target defaults to
    ``shipped:target`` and the engine converts the same checkpoints the harness scores
    (``target_model`` / ``draft_model`` options).  Returns False for a kernel engine.
    """
    from verifier.engines import get_engine

    engine = get_engine(args.engine)
    if engine.kind != "decoder":
        return False
    if args.option:
        raise invalid_argument("--option", dict(args.option), "--engine-arg KEY=VALUE with --engine (the engine's options)")
    from verifier.runner.draft import UNKNOWN_DRAFT, is_unknown

    options = engine.resolve_options(dict(args.engine_arg))
    engine.require_installed()
    args.target = args.target or engine.default_target(options) or "shipped:target"
    options.setdefault("target_model", args.target)
    if engine.draft_known(options) and not is_unknown(args.draft):
        options.setdefault("draft_model", _draft_spec(args))
    else:  # the engine drafts with its own model: the harness must not analyse another (verifier.runner.draft)
        if args.draft and not is_unknown(args.draft):
            options.setdefault("draft_model", args.draft)
        args.draft = UNKNOWN_DRAFT
        print(f"note: engine {engine.name} with {options} drafts with a model the harness cannot score: --draft unknown")
    args.engine_described, args.engine_class = engine.describe(), engine
    args.decoder, args.option, args.engine_arg, args.engine = engine.decoder_spec(), list(options.items()), [], None
    print(f"engine {engine.name} ({engine.package}=={engine.version}): {engine.entry_point}")
    return True
