"""``specverify diagnose RUN_DIR``: which known mechanism explains a biased decoder, and where."""

from __future__ import annotations

import argparse
import json

HELP = ("Diagnose the decoders with BIAS DETECTED in a run folder: mechanism likelihoods, effective temperature, "
        "localization (writes RUN_DIR/diagnosis.json).")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="A run folder written by `specverify run` (with its report.json).")
    parser.add_argument("--decoder", action="append", metavar="NAME", default=None,
                        help="Diagnose this decoder whatever its verdict (repeatable). Default: every decoder with BIAS DETECTED.")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="Output on stdout. Default: text.")
    from verifier.cli._diagnose_args import rows_arg

    parser.add_argument("--rows", type=rows_arg, default=None, metavar="N|all",
                        help="Read the first rows of each sample set, in generate order, through the row that brings the "
                             "distinct rows to N: a bounded cost, less evidence. Default: all (every row).")
    parser.add_argument("--recompute", action="store_true",
                        help="Recompute the diagnosis even when report.json holds one for the same samples. Default: reuse it.")
    from verifier import progress

    progress.add_arguments(parser)
    parser.add_argument("--out", metavar="FILE", default=None, help="Write the diagnosis JSON here. Default: RUN_DIR/diagnosis.json.")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from verifier.diagnose.render import diagnosis_text
    from verifier.diagnose.run_dir import diagnose_run_dir
    from verifier.errors import ReportWriteError

    from verifier import progress

    progress.from_args(args)
    from verifier.server.folder import not_for_self_reported, self_reported_report

    if self_reported_report(args.run_dir) is not None:
        raise not_for_self_reported("diagnose", args.run_dir)
    _check_sealed(args.run_dir)
    result = diagnose_run_dir(args.run_dir, decoders=args.decoder, recompute=args.recompute, max_distinct_rows=args.rows)
    out = Path(args.out) if args.out else Path(args.run_dir) / "diagnosis.json"
    try:
        out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ReportWriteError(f"cannot write {str(out)!r}: {exc.strerror or exc}") from None
    if args.format == "json":
        print(json.dumps(result, indent=2, default=str))
    else:
        print(diagnosis_text(result))
        if result.get("reused"):
            print(f"reused the diagnosis stored in {result['reused']}; --recompute to recompute it")
        print(f"diagnosis: {out}")
    return 0


def _check_sealed(run_dir: str) -> None:
    """Refuse a report.json that is not as ``write_reports`` sealed it (``run.report_sha256``) or whose verdicts do
    not follow from its cells: the diagnosis picks its decoders (BIAS DETECTED) and biased sets from it, so a
    hand-edited PASS made ``specverify diagnose`` answer "no decoder to diagnose" and exit 0 over biased samples.

    A missing, unreadable or malformed report.json is left to :func:`diagnose_run_dir`, whose errors name it.

    Raises
    ------
    ConfigError
        Naming the file, what is wrong with it and the command that recomputes it from the samples.
    """
    from pathlib import Path

    from verifier.errors import ConfigError
    from verifier.reports.cache import seal_problem

    path = Path(run_dir) / "report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(report, dict) or not isinstance(report.get("decoders", []), list):
        return
    try:
        why = seal_problem(report) if isinstance(report.get("run"), dict) else "has no run record"
    except (TypeError, ValueError) as exc:
        why = f"is malformed ({exc})"
    if why is not None:
        raise ConfigError(f"{path} {why}: its verdicts choose what to diagnose, so they are not used. Allowed: "
                          f"`specverify report {run_dir} --recompute` (statistics and verdicts from the samples, a "
                          f"new sealed report.json), then `specverify diagnose {run_dir}`")
