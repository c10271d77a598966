"""The run order: exact -> sample -> statistics -> verdict -> diagnose -> reports.

This module owns the order and nothing else; each stage lives below it and never calls a later one:

=============  ==========================================================================
exact          :func:`verifier.runner.run.exact_stage` (a contradicted rule: no sampling, exit 1)
models         :func:`verifier.runner.run.prepare` (pairs, prompts, sample-set plans, plugin files)
sample         :func:`verifier.runner.run.sample_chunks` (resumable shards; a failing decoder stops)
numeric floor  an engine audit's ``floor_probe`` on the live decoder (:mod:`verifier.engines.floor`)
statistics,    :func:`verifier.runner.run.assess` (cells, correction, verdict, exit code, report dict)
verdict
diagnose       :func:`verifier.diagnose.run_dir.auto_diagnosis` (after BIAS DETECTED; never changes a verdict)
reports        :func:`verifier.reports.write_reports` (report.json / .md / .html, junit.xml)
=============  ==========================================================================

Entry points: :func:`run_suite` (a fresh or resumed run), :func:`analyze_run` (``specverify report``:
statistics onward from stored shards, or a re-render when the inputs are unchanged),
:func:`merge_runs` (``specverify merge``: shard folders combined, then :func:`analyze_run`) and
:func:`run_audit` (an audit suite, fixed n or sequential: sampling stops when an e-process crosses).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from verifier.errors import EXIT_BIAS, ReportWriteError
from verifier.runner import run as stages
from verifier.runner.run import RunOutcome
from verifier.runner.store import SampleStore

FLOOR_KEY = "numeric_floor"  # report.json key (verifier.engines.floor.FLOOR_KEY; that module imports numpy)
FloorProbe = Callable[[Any], dict]  # live SuiteContext -> floor record with its target_tv (run_suite's floor_probe)

__all__ = ["run_suite", "analyze_run", "merge_runs", "run_audit", "RunOutcome"]


@contextmanager
def _timed(stage: dict[str, float], name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        stage[name] = time.perf_counter() - t0


def run_suite(suite: Any, run_dir: str | Path, *, resume: bool = False, progress: bool = True,
              log: Callable[[str], None] = print, floor_probe: FloorProbe | None = None,
              pairs: dict | None = None) -> RunOutcome:
    """Run a suite end to end into ``run_dir`` (or continue the run there when ``resume``).

    Parameters
    ----------
    suite : Suite
        With its profile applied (:func:`verifier.suite.load_suite`).  On resume, pass the suite
        from :func:`verifier.runner.run.load_run_suite` so the plan is exactly the stored one.
    run_dir : path
        Run folder (``reports/<suite>/<run-id>``); created if absent.
    resume : bool, default False
        Keep every valid shard already in ``run_dir``; sample only missing chunks.
    progress : bool, default True
        Show tqdm progress bars (samples/s, ETA) on stderr.
    log : callable
        Receives one-line progress messages.
    floor_probe : callable, optional
        An engine audit's numeric floor (:func:`verifier.engines.floor.measure_floor`), called once with the live
        :class:`~verifier.runner.context.SuiteContext` right after sampling -- its decoders (the engine instance
        that drew the samples) and model pairs are still loaded -- unless the folder's previous report already
        holds a measured floor (a resume).  It returns the floor record with its ``target_tv``; the floor is
        applied before the verdict is announced (:func:`verifier.engines.floor.reapply_floor`).
    pairs : dict[str, LoadedPair], optional
        Model pairs the caller already loaded (an audit plans its n on them): reused by the models stage where the
        suite's ``[models.NAME]`` is the same, with the exact laws computed on them (see
        :class:`verifier.runner.context.SuiteContext`).

    Returns
    -------
    RunOutcome
        ``exit_code`` per :mod:`verifier.errors` (0 ok, 1 bias/undetected, 3 decoder error, 4 underpowered).

    Raises
    ------
    ConfigError, ModelLoadError
        Bad suite content found while loading models or prompts (exit 2); without ``resume``, a
        ``run_dir`` that already holds a run; a ``run_dir`` another job is writing
        (:mod:`verifier._run_lock`); sizes beyond available memory; a device absent here;
        on ``resume``, a plugin file changed since the run started (:mod:`verifier.runner.guards`).
    ReportWriteError
        ``run_dir`` cannot be written (samples already written are kept).
    """
    from verifier._run_lock import run_dir_lock

    with run_dir_lock(run_dir):  # one writer per run folder: a resume racing a live job is refused (exit 2)
        return _run_suite(suite, run_dir, resume=resume, progress=progress, log=log, floor_probe=floor_probe,
                          pairs=pairs)


def _run_suite(suite: Any, run_dir: str | Path, *, resume: bool, progress: bool,
               log: Callable[[str], None], floor_probe: FloorProbe | None = None,
               pairs: dict | None = None) -> RunOutcome:
    store = SampleStore(run_dir)
    stage: dict[str, float] = {}
    previous = _previous_report(store.run_dir) if resume else None  # its measured numeric floor is carried over
    started = stages.start_run(store, suite, resume=resume, log=log)
    with _timed(stage, "exact"):
        exact = stages.exact_stage(suite)
    info = {"run_id": Path(run_dir).name, "started_at": started, "resumed": resume}
    if not exact["ok"]:
        log(f"exact stage: rules contradict their declared status: {', '.join(exact['wrong_rules'])}; no sampling")
    with _timed(stage, "models"):
        ctx = stages.prepare(suite, store, resume=resume, pairs=pairs)
    with _timed(stage, "sampling"):
        errors = stages.sample_chunks(ctx, store, progress=progress, log=log) if exact["ok"] else {}
    stages.record_stops(store, errors)
    info["finished_at"] = stages.utc_now()
    if floor_probe is not None and exact["ok"] and not _has_floor(previous):
        with _timed(stage, "numeric_floor"):  # the engine instance that drew the samples is still loaded
            previous = {**(previous or {}), FLOOR_KEY: floor_probe(ctx)}
    if not exact["ok"]:
        from verifier.reports import write_reports

        report = stages.exact_failed_report(ctx, exact, stage, info)
        write_reports(report, store.run_dir)
        return RunOutcome(store.run_dir, report, EXIT_BIAS, stage)
    return _finish(ctx, store, errors, exact, stage, info, log, previous=previous)


def _finish(ctx: Any, store: SampleStore, errors: dict, exact: dict, stage: dict, info: dict,
            log: Callable[[str], None], out_dir: Path | None = None, allow_partial: bool = False,
            run_stages: dict | None = None, previous: dict | None = None) -> RunOutcome:
    """statistics -> verdict -> diagnose -> reports (a regeneration keeps the ``previous`` report's numeric floor)."""
    from verifier.diagnose.run_dir import auto_diagnosis  # after BIAS DETECTED: which mechanism, where (issue 15)
    from verifier.reports import write_reports

    report, code = stages.assess(ctx, store, errors, exact, stage, info, log, allow_partial=allow_partial,
                                 regenerating=run_stages is not None, previous=previous)
    auto_diagnosis(report, ctx.plans, ctx.pairs, store, stage, log)
    t0 = time.perf_counter()
    target = Path(out_dir) if out_dir is not None else store.run_dir
    report["run"]["stage_seconds"] = stage if run_stages is None else run_stages  # a regeneration keeps the run's figures
    if run_stages is not None:
        report["run"]["report_stage_seconds"] = stage  # ... and adds its own (issue 16)
    try:
        write_reports(report, target)
    except ReportWriteError as exc:
        raise ReportWriteError(f"{exc}; the samples are kept in {store.samples_dir} -- rerun "
                               f"`specverify report {store.run_dir} --out DIR` with a writable DIR") from None
    stage["reports"] = time.perf_counter() - t0
    report["run"]["stage_seconds"] = stage if run_stages is None else run_stages
    return RunOutcome(target, report, code, stage)


def analyze_run(run_dir: str | Path, *, out_dir: str | Path | None = None,
                log: Callable[[str], None] = print, allow_partial: bool = False, recompute: bool = False,
                floor: dict | None = None) -> RunOutcome:
    """Recompute statistics, verdict, diagnosis and reports from a run folder's shards, without sampling.

    Unless ``recompute``, a report.json computed from the same inputs (:mod:`verifier.runner.inputs_key`)
    is only re-rendered (:func:`verifier.reports.cache.try_rerender`).  ``allow_partial`` reports on the
    samples present when shards are missing or unreadable (the report then gives ``samples_missing``
    per sample set and in total); without it that is an error.  ``floor`` is a numeric floor its caller just
    measured (a sequential engine audit's ``floor_probe``), applied instead of the folder's previous one.

    Raises
    ------
    ConfigError
        ``run_dir`` is not a run folder, or (without ``allow_partial``) samples of a decoder that did
        not stop are missing or unreadable -- the message names the chunk files.
    ReportWriteError
        The output folder cannot be written (the samples are untouched).
    """
    from verifier.reports import cache as report_cache
    from verifier.runner.context import SuiteContext

    suite, run_file = stages.load_run_suite(run_dir)
    store = SampleStore(run_dir)
    hit = None if recompute or floor is not None else report_cache.try_rerender(run_dir, out_dir, allow_partial,
                                                                                   stages.utc_now())
    if hit is not None:  # same inputs: re-render only (issue 16: `report` was slower than the run)
        report, stage = hit
        return RunOutcome(Path(out_dir) if out_dir else store.run_dir, report, int(report.get("exit_code", 0)), stage)
    stage: dict[str, float] = {}
    with _timed(stage, "exact"):
        exact = stages.exact_stage(suite)
    with _timed(stage, "models"):
        ctx = SuiteContext(suite)
    errors, info, run_stages = stages.regeneration(run_dir, run_file)
    previous = _previous_report(store.run_dir)
    if floor is not None:
        previous = {**(previous or {}), FLOOR_KEY: floor}
    return _finish(ctx, store, errors, exact, stage, info, log, out_dir=Path(out_dir) if out_dir else None,
                   allow_partial=allow_partial, run_stages=run_stages, previous=previous)


def _has_floor(previous: dict | None) -> bool:
    """The previous report.json of the folder (a resume) holds a numeric floor: it is kept, not measured again."""
    return isinstance(previous, dict) and isinstance(previous.get(FLOOR_KEY), dict)


def _previous_report(run_dir: Path) -> dict | None:
    """The folder's report.json before a regeneration (its measured numeric floor is carried over), or None."""
    import json

    try:
        previous = json.loads((Path(run_dir) / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return previous if isinstance(previous, dict) else None


def merge_runs(run_dirs: Sequence[str | Path], out_dir: str | Path, *, allow_partial: bool = False,
               log: Callable[[str], None] = print) -> RunOutcome:
    """Combine shard run folders into ``out_dir`` (:func:`verifier.runner.shard.merge_shards`) and
    produce its verdict and reports (:func:`analyze_run`); same exit codes as ``specverify run``."""
    from verifier.runner.shard import merge_shards

    out = merge_shards(run_dirs, out_dir, allow_partial=allow_partial, log=log)
    return analyze_run(out, log=log, allow_partial=allow_partial)


def run_audit(suite: Any, run_dir: str | Path, plan: dict, *, resume: bool = False, sequential: bool = False,
              progress: bool = True, log: Callable[[str], None] = print, floor_probe: FloorProbe | None = None,
              pairs: dict | None = None) -> Any:
    """Run an audit suite into ``run_dir`` (continue it when ``resume``); see :mod:`verifier.audit.sequential`.

    Parameters
    ----------
    suite : Suite
        From :func:`verifier.audit.suite_builder.plan_audit` (or :func:`verifier.runner.run.load_run_suite`
        on resume).
    plan : dict
        :func:`verifier.audit.sequential.plan_record` (stored as ``audit.json`` in the run folder).
    sequential : bool, default False
        Stop early on an e-process crossing; the suite's alpha is then half the family-wise alpha.
    floor_probe : callable, optional
        An engine audit's numeric floor on the live decoder (see :func:`run_suite`).
    pairs : dict[str, LoadedPair], optional
        The pairs the audit planned on, reused by the run (see :func:`run_suite`).

    Returns
    -------
    verifier.audit.sequential.AuditOutcome
    """
    from verifier._run_lock import remove_stale_temp_files, run_dir_lock
    from verifier.audit.sequential import MORE_ROWS, PLAN_FILE, AuditOutcome
    from verifier.runner import guards
    from verifier.runner.verdict import more_rows_advice

    # one writer per run folder (run_suite takes it again, re-entrant); an UNDERPOWERED reason names the audit's flag
    with run_dir_lock(run_dir), more_rows_advice(MORE_ROWS):
        if not resume:
            guards.check_fresh_run_dir(run_dir, stages.RUN_FILE)  # before audit.json: never overwrite another run's plan
        elif sequential:
            remove_stale_temp_files(run_dir)
        store = SampleStore(run_dir)
        store.write_json(PLAN_FILE, plan)
        if not sequential:
            return AuditOutcome(run_suite(suite, run_dir, resume=resume, progress=progress, log=log,
                                          floor_probe=floor_probe, pairs=pairs), plan)
        return _run_sequential(suite, store, plan, resume=resume, progress=progress, log=log, floor_probe=floor_probe,
                               pairs=pairs)


def _run_sequential(suite: Any, store: SampleStore, plan: dict, *, resume: bool, progress: bool,
                    log: Callable[[str], None], floor_probe: FloorProbe | None = None,
                    pairs: dict | None = None) -> Any:
    """sample (chunk by chunk, until an e-process crosses) -> statistics -> verdict -> diagnose -> reports."""
    from verifier.audit import sequential as seq
    from verifier.reports import write_reports
    from verifier.runner.assemble import REPORT_SCHEMA_VERSION

    if not resume:
        store.write_json(stages.RUN_FILE, {"schema_version": REPORT_SCHEMA_VERSION, "suite": suite.to_dict(),
                                           "created_at": stages.utc_now(), "run_id": store.run_dir.name})
    ctx = stages.prepare(suite, store, resume=resume, pairs=pairs)  # a resume refuses a changed plugin file
    monitors = seq.monitors(ctx, plan["family_alpha"] / 2)
    crossed, errors, upto = seq.sample_until_crossed(ctx, store, monitors, progress=progress)
    rows = min(upto * ctx.plans[0].chunk_size, ctx.plans[0].samples)
    if errors:
        store.write_json(stages.STOPPED_FILE, list(errors.values()))
    store.write_json(stages.RUN_FILE, {**store.read_json(stages.RUN_FILE), "suite": seq.stopped_suite(suite, rows).to_dict(),
                                       "planned_samples": ctx.plans[0].samples})
    info = {"planned_samples": int(ctx.plans[0].samples), "samples": int(rows), "chunks": upto,
            "monitored_cells": len(monitors), "alpha_e_process": plan["family_alpha"] / 2,
            "alpha_fixed_n": suite.stats.alpha, "crossed": crossed,
            "log_e": {label: round(m.max_log_e, 3) for _p, label, m, _fn in monitors}}
    store.write_json(seq.SEQUENTIAL_FILE, info)
    floor = None
    if floor_probe is not None and not _has_floor(_previous_report(store.run_dir)):
        t0 = time.perf_counter()  # the engine instance that drew the samples is still loaded
        floor = floor_probe(ctx)
        info["numeric_floor_seconds"] = round(time.perf_counter() - t0, 3)
    outcome = analyze_run(store.run_dir, log=log, floor=floor)
    outcome.report["sequential"] = info
    if crossed is not None and not errors:
        seq.mark_crossed(outcome, info, len(monitors))
    write_reports(outcome.report, outcome.run_dir)
    return seq.AuditOutcome(outcome, plan, info)
