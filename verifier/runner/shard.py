"""Scale-out: sample one share of a suite (``specverify run --shard I/N``) and merge the shares.

Sampling is embarrassingly parallel.  A suite's work is the ordered list of chunks of every sample
set (:func:`verifier.runner.plan.plan_sample_sets`, chunk ``i`` of set ``s``); shard ``I`` of
``N`` owns the chunks at positions ``j`` with ``j % N == I`` in that list (round robin, so every
shard gets a similar mix of decoders and prompts).  A chunk's seed is a pure function of
``(suite seed, sample-set key, chunk index)`` (:mod:`verifier.runner.seeds`), so

* shards never share a seed stream and never write the same chunk, and
* the union of all shards is, chunk for chunk, the sample set an unsharded run draws:
  merging them (:func:`verifier.pipeline.merge_runs`) gives the same report.json as one process (timestamps aside).

A shard's run folder is a normal run folder (``run.json`` + ``samples/``) plus a marker
``shard-I-of-N.json``; shards may write into one shared folder or into separate ones.
:func:`merge_shards` checks the folders hold the same suite, that every shard ``0..N-1`` finished
(or, for an unsharded input, nothing is missing) and copies the shards into one run folder; the
pipeline then runs the statistics, verdict and reports there (:func:`verifier.pipeline.merge_runs`).

Any scheduler can drive the two steps -- a Slurm array job, Ray tasks, Kubernetes jobs, or the
``torchrun`` launcher in :mod:`verifier.cli.torchrun`.
"""

from __future__ import annotations

import filecmp
import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from verifier.errors import ConfigError, invalid_argument

__all__ = ["ShardSpec", "ShardOutcome", "RANK_VARIABLES", "shard_from_env", "parse_shard", "run_shard", "merge_shards",
           "shard_marker_name"]

SHARD_MARKER_GLOB = "shard-*-of-*.json"
_SHARD_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_MARKER_RE = re.compile(r"^shard-(\d+)-of-(\d+)\.json$")


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (0-based): owns work items ``j`` with ``j % count == index``."""

    index: int
    count: int

    def owns(self, position: int) -> bool:
        return position % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass
class ShardOutcome:
    """What :func:`run_shard` wrote."""

    run_dir: Path
    shard: ShardSpec
    chunks: list[str]  # "<set_id>/chunk-NNNNNN.npz" owned by this shard, all on disk unless errors
    samples: int
    errors: list[dict[str, Any]]
    seconds: float


# the rank variables of the launchers users run, in the order they are read: (index, count)
RANK_VARIABLES = (("RANK", "WORLD_SIZE"),                                # torchrun, Ray Train, MPI-style launchers
                  ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),   # a Slurm job array (ids MIN..MAX, see below)
                  ("SLURM_PROCID", "SLURM_NTASKS"))                    # srun tasks of one Slurm job
# a Slurm array's first id (`--array=1-8` numbers its tasks 1..8: shard = id - MIN), its last and its step
SLURM_ARRAY_RANGE = ("SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP")


def shard_from_env(environ: Any = None) -> ShardSpec:
    """The shard the launcher's rank variables name (``--shard env``): the first pair of :data:`RANK_VARIABLES`
    that is set (torchrun ``RANK``/``WORLD_SIZE``; a Slurm array ``SLURM_ARRAY_TASK_ID``/``SLURM_ARRAY_TASK_COUNT``;
    srun ``SLURM_PROCID``/``SLURM_NTASKS``).

    A Slurm array is numbered from ``SLURM_ARRAY_TASK_MIN`` when Slurm sets it (``--array=1-8``: ids 1..8 are shards
    0..7 of 8); its ids must be consecutive (``MAX - MIN + 1 == COUNT``, step 1), else some shards would never run,
    and it must hold more than one task (a task resubmitted alone with ``sbatch --array=K`` is an array of one).

    Raises
    ------
    InvalidArgumentError
        None of the pairs is set (naming a pair set only in half), the set pair is not two integers 0 <= I < N, or a
        Slurm array's ids are not consecutive.

    Examples
    --------
    >>> shard_from_env({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"})
    ShardSpec(index=3, count=8)
    >>> shard_from_env({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1",
    ...                 "SLURM_ARRAY_TASK_MAX": "8", "SLURM_ARRAY_TASK_STEP": "1"})
    ShardSpec(index=0, count=8)
    """
    import os

    env = os.environ if environ is None else environ
    for index, count in RANK_VARIABLES:
        if env.get(index) is not None and env.get(count) is not None:
            shown = f"{index}={env[index]!r}, {count}={env[count]!r}"
            m = _SHARD_RE.match(f"{env[index]}/{env[count]}")
            first = 0
            if m and index == "SLURM_ARRAY_TASK_ID":
                if int(m.group(2)) == 1:  # `sbatch --array=K`: most likely one task of a larger array, resubmitted
                    raise invalid_argument("--shard", f"env ({shown})",
                                           f"a Slurm array of more than one task; a task resubmitted alone "
                                           f"(sbatch --array={env[index]}) is an array of one, which --shard env "
                                           f"would read as the whole suite: give --shard {env[index]}/N with N the "
                                           "size of the original array")
                first, shown = _slurm_array_first(env, int(m.group(2)), shown)
            if not m or not (0 <= int(m.group(1)) - first < int(m.group(2))):
                base = f"{index} - SLURM_ARRAY_TASK_MIN" if first else index
                raise invalid_argument("--shard", f"env ({shown})",
                                       f"{index} and {count} integers with 0 <= {base} < {count}")
            return ShardSpec(int(m.group(1)) - first, int(m.group(2)))
    half = [(i, c) for i, c in RANK_VARIABLES if (env.get(i) is None) != (env.get(c) is None)]
    names = ", ".join(f"{i}/{c}" for i, c in RANK_VARIABLES)
    if half:
        said = "; ".join(f"{a}={env[a]!r} is set but {b} is not" if env.get(a) is not None else
                         f"{b}={env[b]!r} is set but {a} is not" for a, b in half)
        raise invalid_argument("--shard", f"env ({said})", f"both variables of one of {names}, or --shard I/N")
    raise invalid_argument("--shard", "env", f"a launcher that sets one of {names} (none is set here), or --shard I/N")


def _slurm_array_first(env: Any, count: int, shown: str) -> tuple[int, str]:
    """The first id of a Slurm array (0 when Slurm does not say), checked to number ``count`` consecutive tasks."""
    got = {name: env.get(name) for name in SLURM_ARRAY_RANGE if env.get(name) is not None}
    if not got:
        return 0, shown
    shown += "".join(f", {name}={value!r}" for name, value in got.items())
    try:
        lo = int(str(got.get("SLURM_ARRAY_TASK_MIN", "0")).strip())
        hi = int(str(got["SLURM_ARRAY_TASK_MAX"]).strip()) if "SLURM_ARRAY_TASK_MAX" in got else lo + count - 1
        step = int(str(got.get("SLURM_ARRAY_TASK_STEP", "1")).strip())
    except ValueError:
        raise invalid_argument("--shard", f"env ({shown})", "integer Slurm array variables") from None
    if step != 1 or hi - lo + 1 != count:
        raise invalid_argument("--shard", f"env ({shown})",
                               f"a Slurm array of consecutive ids, e.g. --array=0-{count - 1} or --array=1-{count} "
                               "(with another step or a list of ids some shards would never run)")
    return lo, shown


def parse_shard(text: str) -> ShardSpec:
    """Parse ``"I/N"`` (0 <= I < N), or ``"env"``: the launcher's rank variables (:func:`shard_from_env`).

    Raises
    ------
    InvalidArgumentError
        Anything else, e.g. ``"2/2"`` or ``"1-of-4"``.

    Examples
    --------
    >>> parse_shard("1/4")
    ShardSpec(index=1, count=4)
    """
    if str(text).strip() == "env":
        return shard_from_env()
    m = _SHARD_RE.match(str(text))
    if not m or not (0 <= int(m.group(1)) < int(m.group(2))):
        raise invalid_argument("--shard", text, "I/N with integers 0 <= I < N, e.g. 0/4 (shard indices start at 0)")
    return ShardSpec(int(m.group(1)), int(m.group(2)))


def shard_marker_name(shard: ShardSpec) -> str:
    return f"shard-{shard.index}-of-{shard.count}.json"


def _work_items(plans) -> list[tuple[Any, int]]:
    """Every (sample-set plan, chunk index) of the suite, in run order."""
    return [(p, i) for p in plans for i in range(p.num_chunks)]


def run_shard(suite, run_dir: str | Path, shard: ShardSpec, *, progress: bool = True,
              log: Callable[[str], None] = print) -> ShardOutcome:
    """Sample only ``shard``'s share of ``suite`` into ``run_dir`` (resumable, like a full run).

    No exact stage, statistics or reports: :func:`merge_runs` does those once over all shards.

    Parameters
    ----------
    suite : Suite
        With its profile applied; every shard must get the same suite, profile and seed.
    run_dir : path
        This shard's run folder (may be shared by all shards).
    shard : ShardSpec
    progress : bool, default True
        tqdm progress bars on stderr.
    log : callable

    Returns
    -------
    ShardOutcome

    Raises
    ------
    ConfigError
        ``run_dir`` already holds a different suite (or profile, or seed).
    ReportWriteError
        ``run_dir`` cannot be written.
    """
    from verifier._run_lock import run_dir_lock

    with run_dir_lock(run_dir, shared=True):  # shard workers share the folder; a run or resume there is refused
        return _run_shard(suite, run_dir, shard, progress=progress, log=log)


def _run_shard(suite, run_dir: str | Path, shard: ShardSpec, *, progress: bool,
               log: Callable[[str], None]) -> ShardOutcome:
    from verifier.runner import guards
    from verifier.runner import run as _run
    from verifier.runner.store import SampleStore

    started = time.perf_counter()
    store = SampleStore(run_dir)
    run_file = {"schema_version": _run.REPORT_SCHEMA_VERSION, "suite": suite.to_dict(),
                "created_at": _run.utc_now(), "run_id": Path(run_dir).name}
    existing = Path(run_dir) / _run.RUN_FILE
    if existing.is_file():
        stored, _ = _run.load_run_suite(run_dir)
        if stored.to_dict() != suite.to_dict():
            raise ConfigError(f"{run_dir} already holds a different suite, profile or seed; "
                              "give each suite/profile/seed its own --run-dir")
    else:
        store.write_json(_run.RUN_FILE, run_file)
    _check_one_sharding(Path(run_dir), shard)
    ctx = _run.SuiteContext(suite)
    guards.record_plugins(store, suite, _run.RUN_FILE, check=True)  # every shard sharing a folder must run the same plugin files
    items = _work_items(ctx.plans)
    position = {(p.set_id, i): j for j, (p, i) in enumerate(items)}
    mine = [(p, i) for j, (p, i) in enumerate(items) if shard.owns(j)]
    log(f"shard {shard}: {len(mine)} of {len(items)} chunks ({sum(p.chunk_rows(i) for p, i in mine)} samples)")
    errors = _run.sample_chunks(ctx, store, progress=progress, log=log, select=lambda p, i: shard.owns(position[(p.set_id, i)]))
    chunks = [str(store.chunk_path(p.set_id, i).relative_to(store.samples_dir)) for p, i in mine]
    on_disk = [(p, i) for p, i in mine if store.chunk_path(p.set_id, i).is_file()]
    # Written last: its presence means the shard ran to the end (a decoder that stopped is a
    # finding for the merge to report, not a reason to sample again).
    marker = {"shard": shard.index, "num_shards": shard.count, "suite_seed": suite.seed, "profile": suite.profile,
              "chunks": chunks, "missing_chunks": len(mine) - len(on_disk), "complete": True,
              "stopped": list(errors.values()), "finished_at": _run.utc_now()}
    store.write_json(shard_marker_name(shard), marker)
    samples = sum(p.chunk_rows(i) for p, i in on_disk)
    return ShardOutcome(Path(run_dir), shard, chunks, samples, list(errors.values()), time.perf_counter() - started)


def _check_one_sharding(run_dir: Path, shard: ShardSpec) -> None:
    """Refuse a shard of N into a folder holding another N's shard markers: `merge` refuses mixed shardings, so the
    samples of this shard could not be merged (it sampled, exited 0, and the merge failed afterwards)."""
    other = sorted({(int(m.group(1)), int(m.group(2))) for p in run_dir.glob(SHARD_MARKER_GLOB)
                    if (m := _MARKER_RE.match(p.name)) and int(m.group(2)) != shard.count})
    if other:
        held = ", ".join(f"shard-{i}-of-{n}.json" for i, n in other)
        raise invalid_argument("--shard", str(shard),
                               f"I/{other[0][1]} as the shards already in {str(run_dir)!r} ({held}): merge refuses "
                               "folders that mix shardings; or another --run-dir, or remove those markers to shard "
                               "this folder again with another N (its chunks are kept and reused: same seeds)")


def _markers(run_dir: Path) -> list[dict[str, Any]]:
    """The shard markers of a folder, each checked to be as :func:`run_shard` writes it.

    Raises
    ------
    ConfigError
        A marker that is unreadable, not a JSON object, whose ``shard`` / ``num_shards`` are not its file name's, whose
        ``complete`` is not a bool or whose ``stopped`` is not a list of stop records (an edited or damaged marker was a
        KeyError / TypeError traceback in ``merge``, exit 3: "decoder error").
    """
    out = []
    for path in sorted(run_dir.glob(SHARD_MARKER_GLOB)):
        name = _MARKER_RE.match(path.name)
        if not name:
            continue
        try:
            marker = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: unreadable shard marker: {exc}") from None
        why = _marker_problem(marker, int(name.group(1)), int(name.group(2)))
        if why:
            raise ConfigError(f"{path}: not a shard marker as `specverify run --shard` writes it ({why}); allowed: "
                              f"remove it and run `specverify run SUITE --shard {name.group(1)}/{name.group(2)} "
                              f"--run-dir {run_dir}` again (it resumes: the chunks on disk are kept)")
        out.append(marker)
    return out


def _marker_problem(marker: Any, index: int, count: int) -> str | None:
    """Why ``marker`` (of file ``shard-INDEX-of-COUNT.json``) is not one :func:`run_shard` wrote; None if it is."""
    if not isinstance(marker, dict):
        return f"a JSON {type(marker).__name__}, not an object"
    for key, want in (("shard", index), ("num_shards", count)):
        value = marker.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value != want:
            return f"{key}={value!r} where the file name says {want}"
    if not isinstance(marker.get("complete"), bool):
        return f"complete={marker.get('complete')!r}, not true or false"
    return _stops_problem(marker.get("stopped", []))


def _stops_problem(stopped: Any) -> str | None:
    """Why ``stopped`` (a marker's, or an unsharded folder's stopped.json) is not a list of stop records."""
    from verifier.runner.store import stop_records_problem

    why = stop_records_problem(stopped)
    return f"stopped: {why}" if why else None


def merge_shards(run_dirs: Sequence[str | Path], out_dir: str | Path, *, allow_partial: bool = False,
                 log: Callable[[str], None] = print) -> Path:
    """Combine shard run folders into ``out_dir`` (checked, samples copied, stops merged); its verdict and
    reports come after, from :func:`verifier.pipeline.merge_runs`.

    Parameters
    ----------
    run_dirs : sequence of paths
        Run folders written by ``specverify run --shard I/N`` (or unsharded runs of the same
        suite).  ``out_dir`` may be one of them.
    out_dir : path
        The merged run folder; receives ``run.json``, every shard's samples and ``stopped.json``.
    allow_partial : bool, default False
        Report on whatever samples exist even when shards are missing or chunk files unreadable
        (their cells have fewer samples and may be UNDERPOWERED; the report says how many samples
        are missing).  Without it, either is a ConfigError.

    Returns
    -------
    Path
        ``out_dir``.

    Raises
    ------
    ConfigError
        A folder is not a run folder, the folders hold different suites/profiles/seeds, two
        folders hold different samples for the same chunk, or (without ``allow_partial``) a shard
        is missing or unfinished -- the message says which ``--shard I/N`` to run again.
    """
    from verifier.runner import run as _run
    from verifier.runner.store import SampleStore

    dirs = [Path(d) for d in run_dirs]
    if not dirs:
        raise invalid_argument("RUN_DIR", [], "at least one run folder")
    out = Path(out_dir)
    suites = [(_run.load_run_suite(d)[0], d) for d in dirs]
    first, first_dir = suites[0]
    for suite, d in suites[1:]:
        if suite.to_dict() != first.to_dict():
            raise ConfigError(f"{d} holds a different suite, profile or seed than {first_dir}; "
                              "merge only shards of one `specverify run SUITE --profile P --seed S`")
    _check_same_plugins(dirs, _run.RUN_FILE)
    _check_complete(dirs, allow_partial)
    _check_out_dir(out, dirs, first)
    out_store = SampleStore(out)
    if not (out / _run.RUN_FILE).is_file():
        out_store.write_json(_run.RUN_FILE, {**json.loads((first_dir / _run.RUN_FILE).read_text(encoding="utf-8")),
                                             "run_id": out.name, "merged_from": [str(d) for d in dirs]})
    copied = 0
    for d in dirs:
        if d.resolve() == out.resolve():
            continue
        for src in sorted((d / "samples").glob("*/chunk-*.npz")):
            dst = out / "samples" / src.parent.name / src.name
            if dst.is_file():
                if not filecmp.cmp(src, dst, shallow=False) and not _same_shard(src, dst):
                    raise ConfigError(f"{src} and {dst} hold different samples for the same chunk; "
                                      "the folders come from different runs")
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
            copied += 1
    _merge_timing(dirs, out)
    stopped = []
    for d in dirs:
        for m in _markers(d):
            stopped.extend(m.get("stopped", []))
        if (d / _run.STOPPED_FILE).is_file() and not _markers(d):
            path = d / _run.STOPPED_FILE
            try:
                stops = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{path}: unreadable: {exc}") from None
            if _stops_problem(stops):
                raise ConfigError(f"{path}: not as `specverify run` writes it ({_stops_problem(stops)}); allowed: "
                                  "the stopped.json the run wrote (a list of stop records, each with a decoder name)")
            stopped.extend(stops)
    first_stop: dict[str, dict] = {}
    for e in stopped:  # keep each decoder's earliest stop
        key = e["decoder"]
        if key not in first_stop or _stop_order(e) < _stop_order(first_stop[key]):
            first_stop[key] = e
    if first_stop:
        out_store.write_json(_run.STOPPED_FILE, list(first_stop.values()))
    log(f"merged {len(dirs)} run folder(s) into {out} ({copied} chunk files copied)")
    return out


def _stop_order(stop: dict[str, Any]) -> tuple[str, int]:
    """Where a stop happened, comparable whatever the record holds (a stop outside a sample set has no set_id)."""
    return str(stop.get("set_id") or ""), int(stop.get("chunk") or 0)


def _check_out_dir(out: Path, dirs: list[Path], suite) -> None:
    """The merged folder is one of the shards, new, or an earlier merge of the same suite (merged again):
    a folder holding another run (another suite, profile or seed, or samples without a run.json) is
    refused as ``run --run-dir`` refuses it -- else the merge analysed that other run (issue 28)."""
    from verifier.runner import run as _run

    if any(d.resolve() == out.resolve() for d in dirs):
        return
    where = f"--out={str(out)!r}"
    if (out / _run.RUN_FILE).is_file():
        stored, _ = _run.load_run_suite(out)
        if stored.to_dict() != suite.to_dict():
            raise ConfigError(
                f"{where} already holds a run of suite {stored.name!r} (profile {stored.profile}, seed {stored.seed}); "
                f"merging shards of suite {suite.name!r} (profile {suite.profile}, seed {suite.seed}) there would "
                "report on that other run. Allowed: an --out that does not exist yet, or an earlier merge of the "
                "same suite, profile and seed")
    elif (out / "samples").is_dir() and any((out / "samples").rglob("chunk-*.npz")):
        raise ConfigError(f"{where} holds sample files but no {_run.RUN_FILE}: not a merge of these shards. "
                          "Allowed: an --out that does not exist yet, or an earlier merge of the same suite")


def _check_same_plugins(dirs: list[Path], run_file: str) -> None:
    """Shards sampled with different plugin files (sha256 in each run.json) must not be merged."""
    from verifier.runner.guards import check_plugins_unchanged

    first = json.loads((dirs[0] / run_file).read_text(encoding="utf-8")).get("plugins")
    for d in dirs[1:]:
        other = json.loads((d / run_file).read_text(encoding="utf-8")).get("plugins") or {}
        try:
            check_plugins_unchanged(first, other, dirs[0])
        except ConfigError as exc:
            raise ConfigError(f"{d} was sampled with another plugin file than {dirs[0]}: {exc}") from None


def _merge_timing(dirs: list[Path], out: Path) -> None:
    """Carry every shard's chunk timing (``timing.jsonl``, :mod:`verifier.runner.cost`) into ``out``, once per chunk."""
    from verifier.runner.cost import read_timing, record_chunks

    have = read_timing([out])
    new: list[tuple[str, int, int, float]] = []
    for d in dirs:
        if d.resolve() == out.resolve():
            continue
        for (set_id, chunk), (rows, seconds) in sorted(read_timing([d]).items()):
            if (set_id, chunk) not in have:
                new.append((set_id, chunk, rows, seconds))
                have[(set_id, chunk)] = (rows, seconds)
    record_chunks(out, new)


def _same_shard(a: Path, b: Path) -> bool:
    """Same tokens and seed (npz bytes may differ only by zip timestamps)."""
    import numpy as np

    with np.load(a, allow_pickle=False) as za, np.load(b, allow_pickle=False) as zb:
        return (np.array_equal(za["tokens"], zb["tokens"])
                and json.loads(str(za["meta"])).get("seed") == json.loads(str(zb["meta"])).get("seed"))


def _check_complete(dirs: list[Path], allow_partial: bool) -> None:
    counts: set[int] = set()
    finished: set[int] = set()
    unfinished: list[str] = []
    for d in dirs:
        for m in _markers(d):
            counts.add(int(m["num_shards"]))
            if m.get("complete"):
                finished.add(int(m["shard"]))
            else:
                unfinished.append(f"{m['shard']}/{m['num_shards']} in {d}")
    if len(counts) > 1:
        raise ConfigError(f"the folders mix shardings {sorted(counts)} (N in --shard I/N); merge shards of one N")
    if not counts or allow_partial:
        return  # unsharded inputs: analyze_run uses every valid chunk on disk
    n = counts.pop()
    missing = sorted(set(range(n)) - finished)
    if missing:
        which = ", ".join(f"--shard {i}/{n}" for i in missing)
        extra = f" (unfinished: {'; '.join(unfinished)})" if unfinished else ""
        raise ConfigError(f"shards missing or unfinished: {which}{extra}; run them again (they resume), "
                          "or pass --allow-partial to report on the samples present")
