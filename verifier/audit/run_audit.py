"""Run an audit suite (:mod:`verifier.audit.suite_builder`) through the suite runner, fixed-n or sequential.

Fixed n: :func:`verifier.runner.run_suite` as is (shards, resume, reports, exit codes).

Sequential (``specverify audit --sequential``): sample chunk by chunk and stop as soon as bias is
certain or every cell is powered.  The family-wise ``alpha`` is split in two halves:

* ``alpha / 2`` for the anytime-valid Dirichlet-multinomial e-processes
  (:class:`verifier.stats.sequential.SequentialGOF`), one per TV cell (``gof@t`` and
  ``joint@1..J`` of every prompt), Bonferroni over them: a cell's e-process crossing
  ``2 M / alpha`` stops sampling with BIAS DETECTED (Ville's inequality: under the null this
  happens with probability <= alpha / 2 however often it is checked);
* ``alpha / 2`` for the suite runner's fixed-n gate at the planned n (the suite's ``alpha``, so the
  plan is made at that level): when no e-process crosses, sampling reaches the planned n, at which
  every TV cell is powered, and the runner's verdict stands.

So a correct decoder is failed with probability <= alpha; a biased one stops early, after about
the samples the e-process needs for its effect instead of the n planned for the smallest one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from verifier.errors import EXIT_BIAS

__all__ = ["AuditOutcome", "run_audit", "PLAN_FILE", "SEQUENTIAL_FILE"]

PLAN_FILE = "audit.json"  # the power plan of an audit run (read back by --resume)
SEQUENTIAL_FILE = "sequential.json"
# the advice of an UNDERPOWERED reason (verifier.runner.verdict.more_rows_advice): the audit's flag, not the suite's knob
MORE_ROWS = "rerun `specverify audit` with --num-samples {n}"


@dataclass
class AuditOutcome:
    """A runner outcome plus the audit's plan and, in sequential mode, where it stopped."""

    outcome: Any  # verifier.runner.RunOutcome
    plan: dict
    sequential: dict | None = None
    extra: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return self.outcome.exit_code

    @property
    def report(self) -> dict:
        return self.outcome.report


def plan_record(plan: Any, sequential: bool, family_alpha: float) -> dict:
    """JSON form of an :class:`~verifier.audit.suite_builder.AuditPlan` kept in the run folder."""
    return {"target_tv": plan.target_tv, "cell_alpha": plan.cell_alpha, "needed": plan.needed,
            "n_needed": plan.n_needed, "num_samples": plan.num_samples, "gof_positions": plan.gof_positions,
            "joint_tokens": plan.joint_tokens, "prompts": [list(p) for p in plan.prompts], "notes": plan.notes,
            "sequential": sequential, "family_alpha": family_alpha}


def run_audit(suite: Any, run_dir: str | Path, plan: dict, *, resume: bool = False, sequential: bool = False,
              progress: bool = True, log: Callable[[str], None] = print) -> AuditOutcome:
    """Run the audit suite into ``run_dir`` (continue it when ``resume``).

    Parameters
    ----------
    suite : Suite
        From :func:`verifier.audit.suite_builder.plan_audit` (or :func:`verifier.runner.load_run_suite`
        on resume).
    plan : dict
        :func:`plan_record` (stored as ``audit.json`` in the run folder).
    sequential : bool, default False
        Stop early on an e-process crossing (see the module docstring); the suite's alpha is then
        half the family-wise alpha.

    Returns
    -------
    AuditOutcome
    """
    from verifier.runner import run_suite
    from verifier.runner.store import SampleStore

    from verifier.runner import guards
    from verifier.runner.run import RUN_FILE
    from verifier.runner.verdict import more_rows_advice

    from verifier._run_lock import remove_stale_temp_files, run_dir_lock

    with run_dir_lock(run_dir), more_rows_advice(MORE_ROWS):  # one writer per run folder (run_suite takes it again)
        if not resume:
            guards.check_fresh_run_dir(run_dir, RUN_FILE)  # before audit.json: never overwrite another run's plan
        elif sequential:
            remove_stale_temp_files(run_dir)
        store = SampleStore(run_dir)
        store.write_json(PLAN_FILE, plan)
        if not sequential:
            return AuditOutcome(run_suite(suite, run_dir, resume=resume, progress=progress, log=log), plan)
        return _run_sequential(suite, store, plan, resume=resume, progress=progress, log=log)


def _monitors(ctx: Any, alpha: float) -> list[tuple[Any, str, Any, Callable[[np.ndarray], np.ndarray]]]:
    """One e-process per TV cell: (plan, label, SequentialGOF, tokens -> category ids)."""
    from verifier.runner.cells import tv_cells
    from verifier.stats.sequential import SequentialGOF

    cells = tv_cells(ctx)
    each = alpha / max(len(cells), 1)
    return [(p, label, SequentialGOF(law / law.sum(), alpha=each), fn) for p, label, law, fn in cells]


def _run_sequential(suite: Any, store: Any, plan: dict, *, resume: bool, progress: bool,
                    log: Callable[[str], None]) -> AuditOutcome:
    from verifier.reports import write_reports
    from verifier.runner import analyze_run, guards
    from verifier.runner import run as runner
    from verifier.runner.assemble import REPORT_SCHEMA_VERSION
    from verifier.runner.cells import expected_preflight
    from verifier.runner.context import SuiteContext
    from verifier.suite.schema import parse_suite

    if not resume:
        store.write_json(runner.RUN_FILE, {"schema_version": REPORT_SCHEMA_VERSION, "suite": suite.to_dict(),
                                           "created_at": runner._now(), "run_id": store.run_dir.name})
    ctx = SuiteContext(suite)
    guards.record_plugins(store, suite, runner.RUN_FILE, check=resume)  # a resume refuses a changed plugin file
    expected_preflight(ctx)
    monitors = _monitors(ctx, plan["family_alpha"] / 2)
    chunks = max(p.num_chunks for p in ctx.plans)
    crossed, errors, upto = None, {}, 0
    while upto < chunks and crossed is None:
        upto += 1
        errors = runner.sample_chunks(ctx, store, progress=progress, log=lambda _m: None,
                                      select=lambda p, i, u=upto: i == u - 1)
        if errors:
            break
        for p, label, seq, fn in monitors:
            shard = store.read_chunk(p.set_id, upto - 1)
            if shard is None or seq.stopped_at is not None:
                continue
            if seq.update(fn(shard.tokens)) and crossed is None:
                res = seq.result()
                crossed = {"cell": label, "n": int(res.stopped_at), "e_value": float(res.statistic),
                           "threshold": 1 / seq.alpha, "chunk": upto - 1}
    rows = min(upto * ctx.plans[0].chunk_size, ctx.plans[0].samples)
    if errors:
        store.write_json(runner.STOPPED_FILE, list(errors.values()))
    raw = copy.deepcopy(suite.raw)
    raw["defaults"]["samples"] = rows
    for d in raw.get("decoders", []):
        d.pop("samples", None)
    stopped_suite = parse_suite(raw, source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)
    store.write_json(runner.RUN_FILE, {**store.read_json(runner.RUN_FILE), "suite": stopped_suite.to_dict(),
                                       "planned_samples": ctx.plans[0].samples})
    info = {"planned_samples": int(ctx.plans[0].samples), "samples": int(rows), "chunks": upto,
            "monitored_cells": len(monitors), "alpha_e_process": plan["family_alpha"] / 2,
            "alpha_fixed_n": suite.stats.alpha, "crossed": crossed,
            "log_e": {label: round(seq.max_log_e, 3) for _p, label, seq, _fn in monitors}}
    store.write_json(SEQUENTIAL_FILE, info)
    outcome = analyze_run(store.run_dir, log=log)
    report = outcome.report
    report["sequential"] = info
    if crossed is not None and not errors:
        d = report["decoders"][0]
        if d["verdict"] != "BIAS DETECTED":
            d["verdict"], d["expectation_met"] = "BIAS DETECTED", False
            d["reason"] = (f"sequential e-process of {crossed['cell']} reached E = {crossed['e_value']:.3g} >= "
                           f"{crossed['threshold']:.3g} after {crossed['n']} rows (anytime-valid, alpha/2 = "
                           f"{info['alpha_e_process']:g} over {len(monitors)} cells); " + d["reason"])
            report["verdict"], report["exit_code"] = "FAIL", EXIT_BIAS
            report["summary"] = f"{d['decoder']}: BIAS DETECTED (sequential) -> exit {EXIT_BIAS}"
            outcome.exit_code = EXIT_BIAS
    write_reports(report, outcome.run_dir)
    return AuditOutcome(outcome, plan, info)
