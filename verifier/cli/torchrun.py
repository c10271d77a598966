"""``torchrun`` launcher: N processes (on one or many machines) sample one suite in parallel.

::

    torchrun --nproc-per-node=4 -m verifier.cli.torchrun suites/nightly.toml \\
        --profile nightly --run-dir runs/nightly
    # several machines: add --nnodes=2 --node-rank=R --rdzv-backend=c10d --rdzv-endpoint=HOST:29500

Rank ``r`` of ``W`` samples shard ``r/W`` (:func:`verifier.runner.shard.run_shard`) into
``RUN_DIR/shards/rank-r-of-W``.  Then every rank sends its shard's files to rank 0 over the
process group (``torch.distributed.gather_object``, so machines need no shared file system),
rank 0 writes them under its own ``RUN_DIR/shards`` and merges them into ``RUN_DIR``
(:func:`verifier.pipeline.merge_runs`): exact stage, statistics, verdict, reports -- the same
report.json as one ``specverify run`` of the suite (timestamps aside), because chunk seeds depend
only on (suite seed, sample set, chunk).

Backend: NCCL when CUDA is available and the suite's models run on ``cuda`` (each rank then uses
``cuda:LOCAL_RANK``), gloo otherwise; ``--backend`` overrides.  Rank 0 exits with the verdict's
exit code (0 pass, 1 bias, 3 decoder error, 4 underpowered); torchrun reports any non-zero code as
a failed worker, and ``specverify report RUN_DIR`` prints the verdict again without resampling.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from pathlib import Path

__all__ = ["main", "build_parser", "pick_backend", "launcher_env", "TORCHRUN_VARIABLES"]

DEFAULT_TIMEOUT_S = 24 * 3600  # collectives wait for the slowest rank's sampling (default 30 min is too short)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun ... -m verifier.cli.torchrun",
        description="Sample a suite with every torchrun worker (shard RANK/WORLD_SIZE each), then merge on rank 0.")
    p.add_argument("suite", metavar="SUITE", help="Suite file, e.g. suites/nightly.toml.")
    p.add_argument("--run-dir", metavar="DIR", required=True,
                   help="Merged run folder (on rank 0); shards go to DIR/shards/rank-R-of-W on each machine.")
    p.add_argument("--profile", metavar="NAME", default=None, help="Sample-budget profile. Default: the suite's default_profile.")
    p.add_argument("--seed", metavar="INT", type=int, default=None, help="Override the suite seed. Default: the suite's seed.")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend. Default: auto (nccl when the models run on CUDA, else gloo).")
    p.add_argument("--timeout-s", metavar="SECONDS", type=int, default=DEFAULT_TIMEOUT_S,
                   help=f"How long ranks wait for each other. Default: {DEFAULT_TIMEOUT_S}.")
    p.add_argument("--no-progress", action="store_true", help="Do not show progress bars.")
    return p


def pick_backend(requested: str, suite) -> str:
    """``nccl`` when CUDA is available and some model pair runs on cuda, else ``gloo``."""
    import torch

    if requested != "auto":
        return requested
    on_cuda = any(str(pair.device).startswith("cuda") for pair in suite.models.values())
    return "nccl" if on_cuda and torch.cuda.is_available() else "gloo"


def _load_suite(args):
    from verifier.errors import ConfigError
    from verifier.suite import load_suite, parse_suite

    suite = load_suite(args.suite, args.profile)
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError(f"--seed={args.seed!r} is invalid; allowed: an integer >= 0")
        suite = parse_suite(dict(suite.raw, seed=args.seed), source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)
    return suite


def _shard_files(shard_dir: Path) -> list[tuple[str, bytes]]:
    """Every file of a shard run folder as (relative path, bytes)."""
    return [(str(p.relative_to(shard_dir)), p.read_bytes()) for p in sorted(shard_dir.rglob("*"))
            if p.is_file() and not p.name.startswith(".tmp-")]


TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets


def launcher_env(environ) -> tuple[int, int, int]:
    """``(RANK, WORLD_SIZE, LOCAL_RANK)`` from the variables torchrun sets, checked before any collective.

    Raises
    ------
    InvalidArgumentError
        A variable of :data:`TORCHRUN_VARIABLES` is missing (started without torchrun: ``init_process_group``
        raised a ValueError traceback, exit 1 -- the code of a BIAS verdict), or RANK / WORLD_SIZE / LOCAL_RANK are
        not integers with ``0 <= RANK < WORLD_SIZE`` and ``LOCAL_RANK >= 0``.

    Examples
    --------
    >>> launcher_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"})
    (1, 2, 1)
    """
    from verifier.errors import invalid_argument

    how = "torchrun --nproc-per-node=N -m verifier.cli.torchrun SUITE --run-dir DIR (torchrun sets them)"
    missing = [name for name in TORCHRUN_VARIABLES if not str(environ.get(name) or "").strip()]
    if missing:
        raise invalid_argument("environment", f"without {', '.join(missing)}",
                               f"a process started by torchrun: {how}; without torchrun, `specverify run SUITE "
                               "--shard I/N` per process, then `specverify merge`")
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        try:
            values[name] = int(str(environ[name]).strip())
        except ValueError:
            values[name] = None
    rank, world, local = values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]
    if None in (rank, world, local) or not (0 <= rank < world) or local < 0:
        shown = ", ".join(f"{n}={environ[n]!r}" for n in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
        raise invalid_argument("environment", f"({shown})",
                               f"integers with 0 <= RANK < WORLD_SIZE and LOCAL_RANK >= 0, as {how}")
    return rank, world, local


def _run(args) -> int:
    import torch
    import torch.distributed as dist

    from verifier.pipeline import merge_runs
    from verifier.runner.shard import ShardSpec, run_shard

    rank, world, local_rank = launcher_env(os.environ)
    suite = _load_suite(args)  # every rank fails the same way on a bad suite, before any collective
    backend = pick_backend(args.backend, suite)
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # suite device "cuda" then means this rank's GPU
    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=args.timeout_s))
    except (RuntimeError, ValueError) as exc:  # rendezvous refused or timed out: no traceback, never exit 1 (BIAS)
        from verifier.errors import ConfigError

        raise ConfigError(f"torch.distributed.init_process_group(backend={backend!r}) failed on rank {rank} of "
                          f"{world}: {exc}; allowed: the MASTER_ADDR:MASTER_PORT torchrun set reachable by every "
                          "rank (--rdzv-endpoint), --backend gloo on machines without CUDA") from None
    try:
        run_dir = Path(args.run_dir)
        shard = ShardSpec(rank, world)
        shard_dir = run_dir / "shards" / f"rank-{rank}-of-{world}"
        outcome = run_shard(suite, shard_dir, shard, progress=not args.no_progress and rank == 0,
                            log=lambda msg: print(f"[rank {rank}] {msg}", flush=True))
        print(f"[rank {rank}] shard {shard}: {outcome.samples} samples in {outcome.seconds:.1f} s "
              f"({backend})", flush=True)
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(_shard_files(shard_dir), gathered, dst=0)
        code = 0
        if rank == 0:
            dirs = []
            for r, files in enumerate(gathered):
                d = run_dir / "shards" / f"rank-{r}-of-{world}"
                for rel, data in files:
                    path = d / rel
                    if not path.is_file():  # another machine's shard (same machine: already there)
                        path.parent.mkdir(parents=True, exist_ok=True)
                        path.write_bytes(data)
                dirs.append(d)
            result = merge_runs(dirs, run_dir, log=lambda msg: print(f"[rank 0] {msg}", flush=True))
            code = result.exit_code
            print(f"verdict: {result.report['verdict']} (exit {code})")
            print(f"reports: {run_dir}/report.html, report.md, report.json, junit.xml")
        return code  # the gather was the last collective: other ranks are done (torchrun stops them all if one fails)
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    """Entry point of ``python -m verifier.cli.torchrun`` (run under ``torchrun``)."""
    from verifier.errors import VerifierError

    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except VerifierError as exc:
        print(f"verifier.cli.torchrun: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
