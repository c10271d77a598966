"""``specverify run SUITE``: the main job -- exact stage, sampling, statistics, verdict, reports."""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

from verifier._threads import MAX_THREADS, THREADS_PER_CPU, max_threads
from verifier.cli._diagnose_args import with_diagnose_mode
from verifier.cli._summary import print_outcome

HELP = "Run a verification suite (TOML): exact stage, sampling, statistics, verdict and reports."

DEFAULT_REPORT_DIR = "reports"  # runs go to <report-dir>/<suite name>/<run id>/
DEFAULT_CPU_THREADS = 1  # tiny models: intra-op threads cost more in synchronisation than they save


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("suite", nargs="?", metavar="SUITE", help="Suite file, e.g. suites/ci.toml (not needed with --resume).")
    parser.add_argument("--profile", metavar="NAME", default=None,
                        help="Sample-budget profile: ci, nightly, audit or one the suite defines. Default: the suite's default_profile.")
    parser.add_argument("--seed", metavar="INT", type=int, default=None, help="Override the suite seed (every chunk seed derives from it). Default: the suite's seed.")
    parser.add_argument("--report-dir", metavar="DIR", default=DEFAULT_REPORT_DIR,
                        help=f"Root folder of run folders (<DIR>/<suite>/<run id>/). Default: {DEFAULT_REPORT_DIR}.")
    parser.add_argument("--run-dir", metavar="DIR", default=None, help="Exact run folder to create (instead of <report-dir>/<suite>/<run id>).")
    parser.add_argument("--resume", metavar="RUN_DIR", default=None,
                        help="Continue an interrupted run: keep its shards, sample only the missing chunks.")
    parser.add_argument("--shard", metavar="I/N", default=None,
                        help="Sample only shard I of N (0-based) into the run folder, no statistics; combine the "
                        "shards with `specverify merge`. 'env': I and N from the launcher's rank variables (torchrun "
                        "RANK/WORLD_SIZE, a Slurm array SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT numbered from "
                        "SLURM_ARRAY_TASK_MIN, srun SLURM_PROCID/SLURM_NTASKS). Default: the whole suite in this process.")
    parser.add_argument("--device", metavar="DEVICE", default=None,
                        help="Run every model of the suite on this torch device (cpu, cuda, cuda:1). Default: each [models.*] table's device.")
    parser.add_argument("--dtype", metavar="DTYPE", default=None, choices=("float32", "float64", "bfloat16", "float16"),
                        help="Model weights dtype for every model (accept/reject arithmetic stays float64). Default: each [models.*] table's dtype.")
    parser.add_argument("--threads", metavar="N", type=int, default=DEFAULT_CPU_THREADS,
                        help="torch intra-op threads on CPU. Tiny models sample fastest on one thread (measured 7x faster "
                        f"than two on a busy 2-core machine); raise it for large CPU models (at most {THREADS_PER_CPU} per CPU, "
                        f"{MAX_THREADS} in all). Default: {DEFAULT_CPU_THREADS}.")
    parser.add_argument("--no-cache", action="store_true",
                        help="Neither read nor write the on-disk cache of Monte Carlo null streams (same p-values, "
                        "computed afresh; same as SPECVERIFY_NO_CACHE=1). Default: cached under $SPECVERIFY_CACHE_DIR "
                        "or ~/.cache/specverify.")
    parser.add_argument("--decoder", action="append", metavar="NAME", default=None,
                        help="Run only this decoder of the suite (repeatable or comma-separated; like pytest -k, its "
                             "samples and verdict are those of the full run). Default: every decoder.")
    parser.add_argument("--dry-run", action="store_true",
                        help="Print the plan -- sample sets, planned n, bias cells, an estimated time -- and exit 0 "
                             "without sampling, writing a run folder or claiming a verdict.")
    from verifier import progress
    from verifier.cli import _diagnose_args
    from verifier import _call_timeout as call_timeout

    call_timeout.add_argument(parser)
    progress.add_arguments(parser)
    _diagnose_args.add_arguments(parser)


def _no_cache(args: argparse.Namespace) -> None:
    """``--no-cache``: the statistics stage neither reads nor writes null streams on disk (verifier.stats.nullcache)."""
    if args.no_cache:
        import os

        from verifier.stats.nullcache import NO_CACHE_ENV

        os.environ[NO_CACHE_ENV] = "1"


def _progress(args: argparse.Namespace) -> bool:
    from verifier import progress

    return progress.from_args(args)


def _stage_line(stages: dict, verdict_at: dict | None = None) -> str:
    """The closing line: wall time per stage, and when the verdict was known (``run.time_to_verdict``:
    after the statistics stage, before the diagnosis and the report files; verifier.runner.clock)."""
    from verifier.cli import PROCESS_START

    total = sum(stages.values())
    at = (f"; time to verdict {verdict_at['wall_seconds']:.1f} s ({verdict_at['cpu_seconds']:.1f} s CPU) since "
          f"{verdict_at['wall_from']}" if verdict_at else "")
    return ("wall time per stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items())
            + f"; stages total {total:.1f} s; process total {time.perf_counter() - PROCESS_START:.1f} s (with start-up and imports)"
            + at)


def _comparable(raw: dict) -> dict:
    """A suite's raw table without what `run` options may have overridden (seed, device, dtype)."""
    out = copy.deepcopy(raw)
    out.pop("seed", None)
    for table in out.get("models", {}).values():
        if isinstance(table, dict):
            table.pop("device", None)
            table.pop("dtype", None)
    return out


def _check_same_suite(path: str, stored, run_dir: str) -> None:
    """Refuse ``run SUITE --resume RUN_DIR`` when SUITE is not the suite the run was started with:
    the stored suite would silently be resumed in its place."""
    from verifier.errors import ConfigError
    from verifier.suite import load_suite

    given = _comparable(load_suite(path).raw)
    kept = _comparable(stored.raw)
    if given != kept:
        keys = sorted(k for k in set(given) | set(kept) if given.get(k) != kept.get(k))
        raise ConfigError(
            f"SUITE={path!r} differs from the suite stored in {str(Path(run_dir) / 'run.json')!r} "
            f"(differing top-level keys: {keys}); allowed: the same suite, or no SUITE with --resume "
            "(the stored suite is resumed); start a new run folder for a changed suite")


def _only_decoders(suite, names: list[str]):
    """The suite with only the named decoders (``--decoder``); ConfigError (exit 2) listing the names on a miss."""
    from verifier.errors import ConfigError
    from verifier.suite import parse_suite

    wanted = [n.strip() for arg in names for n in arg.split(",") if n.strip()]
    known = [d.name for d in suite.decoders]
    for name in wanted:
        if name not in known:
            raise ConfigError(f"--decoder={name!r} is not a decoder of {suite.source}; allowed: {', '.join(known)}")
    raw = copy.deepcopy(suite.raw)
    raw["decoders"] = [d for d in raw.get("decoders", []) if d.get("name") in wanted]
    return parse_suite(raw, source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)


# the arms of a two-sample URL audit's folder (verifier.cli._audit_url.bind_blackbox_journals): journals, no run.json
_TWO_SAMPLE_JOURNALS = ("speculative/server/responses.jsonl", "reference/server/responses.jsonl")


def _refuse_audit_folder(run_dir: str | Path) -> None:
    """``specverify run --resume RUN_DIR`` on an audit's folder: refused before anything in it is read or written.

    Parameters
    ----------
    run_dir : path
        The folder given to ``--resume``.

    Raises
    ------
    ConfigError
        (exit 2) ``run_dir`` holds an audit's plan (``audit.json``: ``specverify audit --resume`` continues
        it with the plan -- the URL audit's server options, the numeric floor, the sequential stop -- which ``run
        --resume`` would drop), or is a self-reported / two-sample URL audit's folder (no run.json: rerun the audit
        command with the same ``--run-dir``; its journal answers every request already sent).
    """
    from verifier._resume import AUDIT_PLAN_FILE
    from verifier.errors import ConfigError

    folder = Path(run_dir)
    if (folder / AUDIT_PLAN_FILE).is_file():
        raise ConfigError(f"--resume={str(run_dir)!r} is an audit's run folder (its plan, {AUDIT_PLAN_FILE}: the server "
                          "options of a URL audit, the numeric floor, the sequential stop), which `specverify run "
                          f"--resume` would resume without; allowed: `specverify audit --resume {run_dir}`")
    from verifier.server.folder import not_for_self_reported, self_reported_report

    if self_reported_report(folder) is not None:
        raise not_for_self_reported("run --resume", run_dir)
    if not (folder / "run.json").exists() and any((folder / j).is_file() for j in _TWO_SAMPLE_JOURNALS):
        raise ConfigError(f"--resume={str(run_dir)!r} is a two-sample URL audit's folder (the response journals of its "
                          "two arms, no run.json); allowed: rerun its `specverify audit --url URL --reference-url ... "
                          f"--run-dir {run_dir}` command: the journals answer every request already sent, so nothing "
                          "is resampled")


@with_diagnose_mode  # --diagnose / --no-diagnosis
def run(args: argparse.Namespace) -> int:
    from verifier.errors import ConfigError, EXIT_USAGE
    from verifier.pipeline import run_suite
    from verifier.runner.run import load_run_suite, new_run_dir
    from verifier.suite import load_suite, parse_suite

    if args.resume:  # an audit's folder is continued by `specverify audit`: refused before it is touched
        _refuse_audit_folder(args.resume)
    most = max_threads()
    if not 1 <= args.threads <= most:  # torch/OpenMP allocate per thread: 100000 ran out of memory or segfaulted
        raise ConfigError(f"--threads={args.threads!r} is invalid; allowed: an integer 1..{most} "
                          f"(at most {THREADS_PER_CPU} per CPU of this machine, never over {MAX_THREADS})")
    import torch

    torch.set_num_threads(args.threads)
    _no_cache(args)
    if args.resume and (args.decoder or args.dry_run):
        raise ConfigError(f"--resume continues the stored run; --decoder={args.decoder!r} and --dry-run={args.dry_run!r} "
                          "are invalid with it; allowed: --decoder / --dry-run with SUITE and no --resume")
    from verifier import _call_timeout as call_timeout

    call_timeout.apply(args)
    if args.resume:
        suite, _ = load_run_suite(args.resume)
        if args.profile or args.seed is not None or args.device or args.dtype:
            raise ConfigError("--resume continues the stored suite; --profile, --seed, --device and --dtype cannot change it")
        if args.suite:
            _check_same_suite(args.suite, suite, args.resume)
        run_dir = Path(args.resume)
        print(f"resuming {run_dir} (suite {suite.name!r}, profile {suite.profile}, seed {suite.seed})")
    else:
        if not args.suite:
            print("specverify run: error: SUITE is required unless --resume RUN_DIR is given", file=sys.stderr)
            return EXIT_USAGE
        suite = load_suite(args.suite, args.profile)
        if args.seed is not None:
            if args.seed < 0:
                raise ConfigError(f"--seed={args.seed!r} is invalid; allowed: an integer >= 0")
            raw = dict(suite.raw, seed=args.seed)
            suite = parse_suite(raw, source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)
        if args.device or args.dtype:
            raw = copy.deepcopy(suite.raw)
            for table in raw.get("models", {}).values():
                if args.device:
                    table["device"] = args.device
                if args.dtype:
                    if args.dtype in ("float16", "bfloat16") and all(str(table.get(r, "")).startswith("tabular:") for r in ("target", "draft")):
                        raise ConfigError(f"--dtype={args.dtype!r} is invalid for the tabular models of this suite; "
                                          "allowed: float32, float64 or no --dtype (tabular models compute in float64)")
                    table["dtype"] = args.dtype
            suite = parse_suite(raw, source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)
        if args.decoder:
            suite = _only_decoders(suite, args.decoder)
        if args.dry_run:
            if args.shard:
                raise ConfigError(f"--dry-run plans the whole run; --shard={args.shard!r} is invalid with it; "
                                  "allowed: --dry-run without --shard")
            from verifier.runner.dry_run import dry_run, render_dry_run

            print(render_dry_run(dry_run(suite)))
            return 0
        if args.shard and not args.run_dir:
            raise ConfigError(f"--shard={args.shard!r} needs --run-dir DIR (every shard of a run writes into the "
                              "same folder; `specverify merge` reads it); allowed: --shard I/N with --run-dir DIR")
        run_dir = Path(args.run_dir) if args.run_dir else new_run_dir(args.report_dir, suite)
        print(f"suite {suite.name!r} ({suite.source}), profile {suite.profile}, seed {suite.seed} -> {run_dir}")
    if args.shard:
        from verifier.runner.shard import parse_shard, run_shard

        shard = parse_shard(args.shard)
        done = run_shard(suite, run_dir, shard, progress=_progress(args))
        print(f"shard {shard}: {done.samples} samples in {len(done.chunks)} chunks -> {run_dir} ({done.seconds:.1f} s)")
        for e in done.errors:
            print(f"  {e['decoder']} stopped at {e['set']}, chunk {e['chunk']}: {e['message']}")
        print(f"when every shard is done: specverify merge {run_dir} ...")
        return 3 if done.errors else 0
    from verifier.cli._rundir import removed_on_usage_error

    with removed_on_usage_error(run_dir, resume=bool(args.resume)):  # a load error leaves no half-made folder
        outcome = run_suite(suite, run_dir, resume=bool(args.resume), progress=_progress(args))
    print()
    print_outcome(outcome)
    print(_stage_line(outcome.stage_seconds, outcome.report.get("run", {}).get("time_to_verdict")))
    return outcome.exit_code
