"""``specverify run SUITE --dry-run``: what a run would do -- sample sets, cells, planned n, a time estimate.

Like ``pytest --collect-only``: the suite is loaded, its models and prompts too (a plan needs the prompt
ids and vocabularies), the sample sets are planned exactly as :func:`verifier.pipeline.run_suite` plans them,
and nothing is written: no run folder, no samples, no verdict.  The sampling time is estimated per
sample set from timed probe ``generate`` calls (a 1-row warm-up, then :data:`PROBE_ROWS` / 8 and
:data:`PROBE_ROWS` rows at chunk 0's seed; the tokens are discarded): a per-call and a per-row cost,
scaled to the set's chunks and rows; the statistics stage, the diagnosis after
BIAS DETECTED and the reports are not included (ci suite, idle 2-core machine: statistics 2-8 s,
diagnosis 25-60 s, reports ~1 s; reports/benchmarks.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROBE_ROWS", "SetPlanRow", "DryRun", "dry_run", "render_dry_run"]

PROBE_ROWS = 64  # rows of the larger timed probe call per sample set: ~0.01-0.2 s on the shipped/tabular models


@dataclass
class SetPlanRow:
    """One planned sample set."""

    label: str
    decoder: str
    samples: int
    chunks: int
    cells: int
    seconds: float | None  # estimated sampling time; None when the probe failed
    note: str = ""


@dataclass
class DryRun:
    """The plan of a suite (``to_dict`` is JSON-ready)."""

    suite: str
    profile: str | None
    seed: int
    decoders: list[str]
    exact_stage: bool
    sets: list[SetPlanRow] = field(default_factory=list)
    models_seconds: float = 0.0

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.sets)

    @property
    def cells(self) -> int:
        return sum(s.cells for s in self.sets)

    @property
    def sampling_seconds(self) -> float:
        return sum(s.seconds or 0.0 for s in self.sets)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["sets"] = [dict(s.__dict__) for s in self.sets]
        d.update(samples=self.samples, cells=self.cells, sampling_seconds=self.sampling_seconds)
        return d


def dry_run(suite: Any, *, probe: bool = True) -> DryRun:
    """Plan ``suite`` (profile applied) without sampling it; ``probe=False`` skips the time estimate.

    Raises
    ------
    ConfigError, ModelLoadError
        As :func:`verifier.pipeline.run_suite` before sampling (models, prompts, sizes, decoder arguments).
    """
    from verifier.runner.cells import count_cells
    from verifier.runner.context import SuiteContext

    t0 = time.perf_counter()
    ctx = SuiteContext(suite)
    errors = ctx.preflight()  # a decoder whose factory raises: the run would stop it before sampling
    out = DryRun(suite.name, suite.profile, suite.seed, [d.name for d in suite.decoders], bool(suite.exact.get("enabled")),
                 models_seconds=time.perf_counter() - t0)
    for plan in ctx.plans:
        row = SetPlanRow(plan.label, plan.decoder.name, plan.samples, plan.num_chunks, count_cells(plan), None)
        if plan.decoder.name in errors:
            row.note = f"not sampled: {errors[plan.decoder.name]['message']}"
        elif probe:
            try:
                row.seconds = _estimate(ctx.decoder(plan.decoder, plan.num_draft_tokens), plan)
            except Exception as exc:  # the plan still lists the set; the run would report the crash
                row.note = f"probe generate raised {type(exc).__name__}: {exc}"
        out.sets.append(row)
    return out


def _estimate(decoder: Any, plan: Any) -> float:
    """Sampling seconds of a set: ``chunks x a + samples x b`` from ``t(rows) = a + b rows`` fitted on two timed
    probe calls (after a 1-row warm-up call: first-call set-up is no per-chunk cost); at a ``batch_composition`` level
    ``calls x (a + b x batch_rows)``."""
    def timed(rows: int) -> float:
        t = time.perf_counter()
        decoder.generate(list(plan.prompt_ids), rows, plan.max_new_tokens, plan.sampling, plan.chunk_seed(0),
                         **plan.stop_kwargs())
        return time.perf_counter() - t

    timed(1)
    big = min(PROBE_ROWS, plan.chunk_size, plan.samples)
    small = max(1, big // 8)
    t_small, t_big = timed(small), timed(big)
    per_row = max(0.0, (t_big - t_small) / (big - small)) if big > small else t_big / big
    per_call = max(0.0, t_small - per_row * small)
    if getattr(plan, "batch_rows", None) is not None:  # batch_composition: calls of batch_rows rows, fillers included
        from verifier.suite.batch import audited_rows

        return plan.samples // audited_rows(plan.batch_rows, plan.mixed) * (per_call + per_row * plan.batch_rows)
    return plan.num_chunks * per_call + plan.samples * per_row


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def render_dry_run(plan: DryRun) -> str:
    """The text ``specverify run --dry-run`` prints."""
    lines = [f"plan of suite {plan.suite!r}, profile {plan.profile}, seed {plan.seed}: {len(plan.decoders)} decoder(s), "
             f"{len(plan.sets)} sample set(s), {plan.samples:,} samples, {plan.cells} bias cells"
             + ("; exact stage: every rule on the standard cases first" if plan.exact_stage else "")]
    width = max((len(s.label) for s in plan.sets), default=10)
    lines.append(f"  {'sample set':<{width}}  {'samples':>8}  {'chunks':>6}  {'cells':>5}  est. sampling")
    for s in plan.sets:
        est = _duration(s.seconds) if s.seconds is not None else "n/a"
        lines.append(f"  {s.label:<{width}}  {s.samples:>8,}  {s.chunks:>6}  {s.cells:>5}  {est}"
                     + (f"  ({s.note})" if s.note else ""))
    lines.append(f"estimated time: models {_duration(plan.models_seconds)} + sampling ~{_duration(plan.sampling_seconds)} "
                 "(timed probe calls per set, scaled; statistics, diagnosis and reports not included)")
    lines.append("this is a plan (--dry-run): nothing was sampled or written and no verdict is claimed")
    return "\n".join(lines)
