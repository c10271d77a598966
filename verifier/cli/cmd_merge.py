"""``specverify merge RUN_DIR...``: combine the shards of ``specverify run --shard I/N`` and judge them."""

from __future__ import annotations

import argparse
from pathlib import Path

from verifier.cli._summary import print_outcome

HELP = "Combine shard run folders (specverify run --shard I/N) into one run: statistics, verdict, reports."

DEFAULT_REPORT_DIR = "reports"  # like `specverify run`: <report-dir>/<suite>/<run id>/


def register(parser: argparse.ArgumentParser) -> None:
    from verifier import progress

    progress.add_arguments(parser)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="Run folders written by `specverify run SUITE --shard I/N` (same suite, profile and seed). "
                        "One folder that all shards shared is merged in place.")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="Merged run folder to write. Default: the RUN_DIR itself when only one is given, "
                        "else a new <report-dir>/<suite>/<run id>.")
    parser.add_argument("--report-dir", metavar="DIR", default=DEFAULT_REPORT_DIR,
                        help=f"Root of new run folders when --out is not given. Default: {DEFAULT_REPORT_DIR}.")
    parser.add_argument("--allow-partial", action="store_true",
                        help="Report on the samples present even if shards are missing (cells may be UNDERPOWERED). "
                        "Default: missing shards are an error naming the --shard I/N to rerun.")


def run(args: argparse.Namespace) -> int:
    from verifier import progress

    progress.from_args(args)
    from verifier.pipeline import merge_runs
    from verifier.runner.run import load_run_suite, new_run_dir

    from verifier.server.folder import not_for_self_reported, self_reported_report

    seen: dict = {}
    for d in args.run_dirs:
        if self_reported_report(d) is not None:
            raise not_for_self_reported("merge", d)
        key = Path(d).resolve()
        if key in seen:
            from verifier.errors import invalid_argument

            raise invalid_argument("RUN_DIR", d, f"each run folder once ({d!r} is the same folder as {seen[key]!r}; "
                                   "merging it twice would count its samples twice)")
        seen[key] = d
    from verifier.audit.kernel_checkpoint import is_kernel_checkpoint

    if any(is_kernel_checkpoint(d) for d in args.run_dirs):  # shards of a kernel audit (verifier.audit.kernel_shards)
        return _merge_kernel(args)
    if args.out:
        out = Path(args.out)
    elif len(args.run_dirs) == 1:
        out = Path(args.run_dirs[0])
    else:
        suite, _ = load_run_suite(args.run_dirs[0])
        out = new_run_dir(args.report_dir, suite)
    from verifier._run_lock import run_dir_lock

    with run_dir_lock(out, optional=not args.out and len(args.run_dirs) == 1):  # one writer per run folder (exit 2)
        outcome = merge_runs(args.run_dirs, out, allow_partial=args.allow_partial)
    print_outcome(outcome)
    return outcome.exit_code


def _merge_kernel(args: argparse.Namespace) -> int:
    """Kernel-audit shard folders: one kernel report in ``--out`` on the summed draws; exit 0 / 1 / 4 by its verdict."""
    from verifier.audit.kernel_shards import merge_kernel_shards
    from verifier.errors import EXIT_BIAS, EXIT_OK, EXIT_UNDERPOWERED, invalid_argument

    if not args.out:
        raise invalid_argument("--out", None, "a folder for the merged kernel report (kernel shards are merged into a new folder)")
    report = merge_kernel_shards(args.run_dirs, args.out, allow_partial=args.allow_partial)
    for c in report["cases"]:
        print(f"{report['kernel']} on {c['case']}: {c['verdict']} (n={c['num_draws']}, {len(report['shards'])} shards)")
    print(f"report: {args.out}/report.md -- {report['verdict']} (emitted-token law, target TV {report['target_tv']:g})")
    return {"PASS": EXIT_OK, "BIAS DETECTED": EXIT_BIAS}.get(report["verdict"], EXIT_UNDERPOWERED)
