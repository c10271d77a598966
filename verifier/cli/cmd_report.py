"""``specverify report RUN_DIR``: statistics, verdict and reports again from stored samples."""

from __future__ import annotations

import argparse

from verifier.cli._summary import print_outcome

HELP = "Regenerate report.json/.md/.html and junit.xml of a run folder from its stored samples (no resampling)."


def register(parser: argparse.ArgumentParser) -> None:
    from verifier import progress

    progress.add_arguments(parser)
    parser.add_argument("run_dir", metavar="RUN_DIR", help="A run folder written by `specverify run`.")
    parser.add_argument("--out", metavar="DIR", default=None, help="Write the reports here instead of RUN_DIR. Default: RUN_DIR.")
    parser.add_argument("--allow-partial", action="store_true",
                        help="Report on the samples present when chunk files are missing or unreadable (the report says "
                        "how many are missing). Default: missing samples are an error naming the chunk files.")


def run(args: argparse.Namespace) -> int:
    from verifier import progress

    progress.from_args(args)
    from verifier.runner import analyze_run

    outcome = analyze_run(args.run_dir, out_dir=args.out, allow_partial=args.allow_partial)
    print_outcome(outcome)
    return outcome.exit_code
