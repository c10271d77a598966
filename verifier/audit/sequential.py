"""The audit's run record and its sequential stop: what :func:`verifier.pipeline.run_audit` needs below it.

An audit suite (:mod:`verifier.audit.suite_builder`) runs through the pipeline, fixed-n
(:func:`verifier.pipeline.run_suite` as is: shards, resume, reports, exit codes) or sequential.
Here: the plan kept in the run folder (:func:`plan_record`, ``audit.json``), the outcome
(:class:`AuditOutcome`) and the sequential parts -- :func:`monitors`, :func:`sample_until_crossed`,
:func:`stopped_suite`, :func:`mark_crossed`.

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
from typing import Any, Callable

import numpy as np

from verifier._resume import AUDIT_PLAN_FILE
from verifier.errors import EXIT_BIAS

__all__ = ["AuditOutcome", "plan_record", "monitors", "sample_until_crossed", "stopped_suite", "mark_crossed",
           "PLAN_FILE", "SEQUENTIAL_FILE"]

PLAN_FILE = AUDIT_PLAN_FILE  # the power plan of an audit run (read back by --resume; verifier._resume names the command)
SEQUENTIAL_FILE = "sequential.json"
# the advice of an UNDERPOWERED reason (verifier.runner.verdict.more_rows_advice): the audit's flag, not the suite's knob
MORE_ROWS = "rerun `specverify audit` with --num-samples {n}"


@dataclass
class AuditOutcome:
    """A runner outcome plus the audit's plan and, in sequential mode, where it stopped."""

    outcome: Any  # verifier.runner.run.RunOutcome
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
            **({"cell_weights": dict(plan.cell_weights)} if plan.cell_weights else {}),
            "n_needed": plan.n_needed, "num_samples": plan.num_samples, "gof_positions": plan.gof_positions,
            "joint_tokens": plan.joint_tokens, "prompts": [list(p) for p in plan.prompts], "notes": plan.notes,
            "sequential": sequential, "family_alpha": family_alpha}


def monitors(ctx: Any, alpha: float) -> list[tuple[Any, str, Any, Callable[[np.ndarray], np.ndarray]]]:
    """One e-process per TV cell: (plan, label, SequentialGOF, tokens -> category ids)."""
    from verifier.runner.cells import tv_cells
    from verifier.stats.sequential import SequentialGOF

    cells = tv_cells(ctx)
    each = alpha / max(len(cells), 1)
    return [(p, label, SequentialGOF(law / law.sum(), alpha=each), fn) for p, label, law, fn in cells]


def sample_until_crossed(ctx: Any, store: Any, watched: list, *, progress: bool) -> tuple[dict | None, dict, int]:
    """Sample chunk by chunk (chunk j of every set, then j + 1, ...) until an e-process of ``watched``
    crosses, a decoder stops, or the plan's chunks are done: ``(crossed or None, errors, chunks)``."""
    from verifier.runner.run import sample_chunks

    chunks = max(p.num_chunks for p in ctx.plans)
    crossed, errors, upto = None, {}, 0
    while upto < chunks and crossed is None:
        upto += 1
        errors = sample_chunks(ctx, store, progress=progress, log=lambda _m: None,
                               select=lambda p, i, u=upto: i == u - 1)
        if errors:
            break
        for p, label, seq, fn in watched:
            shard = store.read_chunk(p.set_id, upto - 1)
            if shard is None or seq.stopped_at is not None:
                continue
            if seq.update(fn(shard.tokens)) and crossed is None:
                res = seq.result()
                crossed = {"cell": label, "n": int(res.stopped_at), "e_value": float(res.statistic),
                           "threshold": 1 / seq.alpha, "chunk": upto - 1}
    return crossed, errors, upto


def stopped_suite(suite: Any, rows: int) -> Any:
    """The suite as sampled: every decoder's samples set to the ``rows`` drawn (stored in ``run.json``)."""
    from verifier.suite.schema import parse_suite

    raw = copy.deepcopy(suite.raw)
    raw["defaults"]["samples"] = rows
    for d in raw.get("decoders", []):
        d.pop("samples", None)
    return parse_suite(raw, source=suite.source, base_dir=suite.base_dir).with_profile(suite.profile)


def mark_crossed(outcome: Any, info: dict, num_monitors: int) -> None:
    """An e-process crossed: the decoder is BIAS DETECTED (exit 1) whatever the fixed-n gate said."""
    crossed = info["crossed"]
    report = outcome.report
    d = report["decoders"][0]
    if d["verdict"] != "BIAS DETECTED":
        d["verdict"], d["expectation_met"] = "BIAS DETECTED", False
        d["reason"] = (f"sequential e-process of {crossed['cell']} reached E = {crossed['e_value']:.3g} >= "
                       f"{crossed['threshold']:.3g} after {crossed['n']} rows (anytime-valid, alpha/2 = "
                       f"{info['alpha_e_process']:g} over {num_monitors} cells); " + d["reason"])
        report["verdict"], report["exit_code"] = "FAIL", EXIT_BIAS
        report["summary"] = f"{d['decoder']}: BIAS DETECTED (sequential) -> exit {EXIT_BIAS}"
        outcome.exit_code = EXIT_BIAS
