"""Ray launcher: one suite sampled as N Ray tasks (on a local Ray instance or a running cluster), then merged.

::

    python -m verifier.cli.raylaunch suites/nightly.toml --shards 8 --run-dir runs/nightly            # local Ray
    python -m verifier.cli.raylaunch suites/nightly.toml --shards 64 --run-dir runs/nightly --address auto

Task ``i`` of ``N`` samples shard ``i/N`` (:func:`verifier.runner.shard.run_shard`) into
``RUN_DIR/shards/rank-i-of-N`` and returns that folder's files, which the driver writes where they are missing (a
cluster without a shared file system loses nothing); then the driver merges the shards into ``RUN_DIR``
(:func:`verifier.pipeline.merge_runs`: exact stage, statistics, verdict, reports) -- the same report.json as one
``specverify run`` of the suite (timestamps aside), because a chunk's seed depends only on (suite seed, sample set,
chunk), and the merge refuses two shards that hold the same chunk with different bytes (``merge_shards``).

Nothing is lost across runs: rerunning the same command skips every shard whose folder already holds its
completion marker (``shard-i-of-N.json``), and a task that fails is retried by Ray (``--max-retries``; the same
chunks, so the same samples).  Without ``--address`` the launcher starts a local Ray instance with ``--num-cpus``
CPUs (the embedded default of the tests) and stops it at the end; ``--address auto`` joins the cluster that
``ray start`` runs.  Every worker needs this package and the suite file (with its plugins) at the same path.

Exit code: the merged verdict's (0 pass, 1 bias, 3 decoder error, 4 underpowered), 2 for bad arguments or a
missing ``ray`` (``pip install "spec-verifier[ray]"``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser", "sample_shard"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verifier.cli.raylaunch",
                                description="Sample a suite as N Ray tasks (shard i/N each), then merge the shards.")
    p.add_argument("suite", metavar="SUITE", help="Suite file, e.g. suites/nightly.toml.")
    p.add_argument("--run-dir", metavar="DIR", required=True,
                   help="Merged run folder; the shards go to DIR/shards/rank-I-of-N.")
    p.add_argument("--shards", metavar="N", type=int, required=True, help="Number of Ray tasks (shards), >= 1.")
    p.add_argument("--address", metavar="ADDR", default=None,
                   help="Ray cluster to join ('auto': the one `ray start` runs on this machine). "
                        "Default: start a local Ray instance for this run.")
    p.add_argument("--num-cpus", metavar="N", type=int, default=None,
                   help="CPUs of the local Ray instance (not with --address). Default: Ray's (every core).")
    p.add_argument("--cpus-per-shard", metavar="C", type=float, default=1.0,
                   help="CPUs Ray reserves per task. Default: 1.")
    p.add_argument("--max-retries", metavar="N", type=int, default=2,
                   help="Ray retries of a failed task (same chunks, same samples). Default: 2.")
    p.add_argument("--profile", metavar="NAME", default=None, help="Sample-budget profile. Default: the suite's.")
    p.add_argument("--seed", metavar="INT", type=int, default=None, help="Override the suite seed.")
    return p


def _check(args) -> None:
    from verifier.errors import invalid_argument

    if args.shards < 1:
        raise invalid_argument("--shards", args.shards, "an integer >= 1")
    if args.num_cpus is not None and (args.num_cpus < 1 or args.address is not None):
        raise invalid_argument("--num-cpus", args.num_cpus, "an integer >= 1, and only without --address "
                               "(a cluster's CPUs are its own)")
    if not 0 < args.cpus_per_shard < float("inf"):
        raise invalid_argument("--cpus-per-shard", args.cpus_per_shard, "a number > 0")
    local_cpus = args.num_cpus if args.num_cpus is not None else os.cpu_count()
    if args.address is None and local_cpus and args.cpus_per_shard > local_cpus:  # Ray would wait for it forever
        raise invalid_argument("--cpus-per-shard", args.cpus_per_shard,
                               f"a number <= the {local_cpus} CPUs of the local Ray instance (--num-cpus, default "
                               "every core): a task that needs more never starts, and the launch waits forever")
    if args.max_retries < 0:
        raise invalid_argument("--max-retries", args.max_retries, "an integer >= 0")


def sample_shard(suite_path: str, profile: str | None, seed: int | None, index: int, count: int,
                 shard_dir: str) -> dict[str, Any]:
    """Sample shard ``index/count`` of the suite (the body of one Ray task; also callable without Ray).

    The shard is written into ``shard_dir`` when this machine can create it (a shared or local file system: chunks
    on disk are kept across retries), else into a temporary folder; either way its files come back.

    Returns
    -------
    dict
        ``{"files": [(relative path, bytes), ...], "samples": int, "seconds": float, "host": str}``.
    """
    import socket

    from verifier.cli.torchrun import _load_suite, _shard_files
    from verifier.runner.shard import ShardSpec, run_shard

    suite = _load_suite(argparse.Namespace(suite=suite_path, profile=profile, seed=seed))
    try:
        Path(shard_dir).mkdir(parents=True, exist_ok=True)
        target, tmp = Path(shard_dir), None
    except OSError:  # another machine without the driver's file system
        tmp = tempfile.TemporaryDirectory(prefix="specverify-shard-")
        target = Path(tmp.name)
    try:
        outcome = run_shard(suite, target, ShardSpec(index, count), progress=False, log=lambda _m: None)
        return {"files": _shard_files(target), "samples": outcome.samples, "seconds": outcome.seconds,
                "host": socket.gethostname()}
    finally:
        if tmp is not None:
            tmp.cleanup()


def _check_same_suite(suite, run_dir: Path, dirs: list[Path]) -> None:
    """Refuse a ``--run-dir`` whose merged folder or shard folders hold another suite, profile or seed.

    A complete shard is skipped, not sampled again, so without this check the launch of suite B into the folder
    of an earlier launch of suite A merged A's shards and printed A's verdict as B's (exit 0 on A's PASS).

    Raises
    ------
    ConfigError
        Naming the folder, the run it holds and the run asked for.
    """
    from verifier.errors import ConfigError
    from verifier.runner.run import RUN_FILE, load_run_suite

    for d in [run_dir, *dirs]:
        if not (d / RUN_FILE).is_file():
            continue
        stored, _ = load_run_suite(d)
        if stored.to_dict() != suite.to_dict():
            raise ConfigError(
                f"--run-dir={str(run_dir)!r}: {d} already holds a run of suite {stored.name!r} (profile "
                f"{stored.profile}, seed {stored.seed}, {stored.source}); this launch is suite {suite.name!r} "
                f"(profile {suite.profile}, seed {suite.seed}, {suite.source}), and its complete shards would be "
                "merged instead of sampled. Allowed: a --run-dir that does not exist yet, or the --run-dir of an "
                "earlier launch of the same suite, profile and seed (it resumes)")


def _check_fits_a_node(ray, cpus_per_shard: float) -> None:
    """Refuse ``--cpus-per-shard`` above every live node's CPUs (a joined cluster's): Ray would keep the task pending
    forever (with ``log_to_driver=False`` not even its "infeasible" warning shows)."""
    from verifier.errors import invalid_argument

    largest = max([float((n.get("Resources") or {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")] or [0.0])
    if cpus_per_shard > largest:
        raise invalid_argument("--cpus-per-shard", cpus_per_shard,
                               f"a number <= {largest:g}, the CPUs of the largest live node of the Ray cluster: a "
                               "task that needs more never starts, and the launch waits forever")


def _run(args) -> int:
    try:
        import ray
    except ImportError:
        print("verifier.cli.raylaunch: error: ray is not installed; allowed: pip install \"spec-verifier[ray]\" "
              "(or pip install ray), or another launcher (specverify run --shard I/N, verifier.cli.torchrun)",
              file=sys.stderr)
        return 2
    from verifier.cli.torchrun import _load_suite
    from verifier.pipeline import merge_runs
    from verifier.runner.shard import ShardSpec, shard_marker_name

    args.suite = str(Path(args.suite).resolve())  # the tasks' path: their run.json and this suite compare equal
    suite = _load_suite(args)  # a bad suite, profile or seed fails here, before any Ray start-up
    run_dir = Path(args.run_dir).resolve()
    dirs = [run_dir / "shards" / f"rank-{i}-of-{args.shards}" for i in range(args.shards)]
    _check_same_suite(suite, run_dir, dirs)
    todo = [i for i, d in enumerate(dirs) if not (d / shard_marker_name(ShardSpec(i, args.shards))).is_file()]
    print(f"{args.shards} shards: {args.shards - len(todo)} already complete in {run_dir / 'shards'}, "
          f"{len(todo)} to sample", flush=True)
    if todo:
        started = time.perf_counter()
        own = args.address is None
        ray.init(address=args.address, num_cpus=args.num_cpus if own else None, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
        try:
            _check_fits_a_node(ray, args.cpus_per_shard)
            task = ray.remote(num_cpus=args.cpus_per_shard, max_retries=args.max_retries)(sample_shard)
            refs = {task.remote(args.suite, args.profile, args.seed, i, args.shards,
                                str(dirs[i])): i for i in todo}
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                i = refs[done[0]]
                result = ray.get(done[0])
                for rel, data in result["files"]:
                    path = dirs[i] / rel
                    if not path.is_file():  # a shard sampled on another machine (same machine: already there)
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(data)
                print(f"shard {i}/{args.shards}: {result['samples']} samples in {result['seconds']:.1f} s on "
                      f"{result['host']}", flush=True)
        finally:
            if own:
                ray.shutdown()
        print(f"sampling: {time.perf_counter() - started:.1f} s with Ray", flush=True)
    result = merge_runs(dirs, run_dir, log=lambda msg: print(msg, flush=True))
    print(f"verdict: {result.report['verdict']} (exit {result.exit_code})")
    print(f"reports: {run_dir}/report.html, report.md, report.json, junit.xml")
    return result.exit_code


def main(argv=None) -> int:
    """Entry point of ``python -m verifier.cli.raylaunch``."""
    from verifier.errors import VerifierError

    args = build_parser().parse_args(argv)
    try:
        _check(args)
        return _run(args)
    except VerifierError as exc:
        print(f"verifier.cli.raylaunch: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
