"""``specverify report RUN_DIR``: statistics, verdict and reports again from stored samples.

When the run folder's report.json was computed from the same samples, suite and statistics code,
only the reports are re-rendered (:mod:`verifier.reports.cache`); ``--recompute`` forces the
statistics.  The run's own stage times stay in report.json (``run.stage_seconds``); this command's
go to ``run.report_stage_seconds``."""

from __future__ import annotations

import argparse

from verifier.cli._summary import print_outcome

HELP = "Regenerate report.json/.md/.html and junit.xml of a run folder from its stored samples (no resampling)."


def register(parser: argparse.ArgumentParser) -> None:
    from verifier import progress

    progress.add_arguments(parser)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="A run folder written by `specverify run` or `specverify audit` (a self-reported URL audit's folder too: its reports are re-rendered from its sealed report.json).")
    parser.add_argument("--out", metavar="DIR", default=None, help="Write the reports here instead of RUN_DIR. Default: RUN_DIR.")
    parser.add_argument("--allow-partial", action="store_true",
                        help="Report on the samples present when chunk files are missing or unreadable (the report says "
                        "how many are missing). Default: missing samples are an error naming the chunk files.")
    parser.add_argument("--recompute", action="store_true",
                        help="Recompute every statistic even when report.json was computed from the same samples, suite and "
                        "statistics code. Default: then only re-render the reports from it (seconds).")
    parser.add_argument("--no-cache", action="store_true",
                        help="Neither read nor write the on-disk cache of Monte Carlo null streams (same p-values, "
                        "computed afresh; same as SPECVERIFY_NO_CACHE=1). Default: cached under $SPECVERIFY_CACHE_DIR "
                        "or ~/.cache/specverify.")


def run(args: argparse.Namespace) -> int:
    from verifier import progress

    progress.from_args(args)
    from verifier._run_lock import run_dir_lock

    with run_dir_lock(args.run_dir, optional=True):  # a run folder a job is writing is refused (exit 2)
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    import datetime as dt
    from types import SimpleNamespace

    from verifier.reports import cache

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    from verifier.server.folder import not_for_self_reported, rerender_self_reported, self_reported_report

    self_reported = self_reported_report(args.run_dir)
    if self_reported is not None:  # a URL audit's folder: replies journaled, no sample chunks (verifier.server.folder)
        if args.recompute:
            raise not_for_self_reported("report --recompute", args.run_dir)
        report = rerender_self_reported(args.run_dir, self_reported, args.out, now)
        code = int(report.get("exit_code", 0))
        print_outcome(SimpleNamespace(report=report, exit_code=code, run_dir=args.out or args.run_dir))
        return code
    hit = None if args.recompute else cache.try_rerender(args.run_dir, args.out, args.allow_partial, now)
    if hit is not None:  # same inputs: no torch import, no model, no statistic
        report, _stage = hit
        code = int(report.get("exit_code", 0))
        print_outcome(SimpleNamespace(report=report, exit_code=code, run_dir=args.out or args.run_dir))
        return code
    from verifier.cli.cmd_run import _no_cache
    from verifier.pipeline import analyze_run

    _no_cache(args)
    outcome = analyze_run(args.run_dir, out_dir=args.out, allow_partial=args.allow_partial, recompute=args.recompute)
    print_outcome(outcome)
    return outcome.exit_code
