"""The runner's stages: exact stage, models, sampling into resumable shards, statistics and verdict.

The order they run in -- and the diagnosis and report files after them -- is owned by
:mod:`verifier.pipeline` (``run_suite``, ``analyze_run``, ``run_audit``, ``merge_runs``); nothing here
calls a later stage.

1. **exact** -- :func:`exact_stage`: :func:`verifier.exact.run_exact_stage` on the suite's rules and
   cases; a rule whose exact verdict contradicts its declared status fails the run before any sampling.
2. **models** -- :func:`prepare`: load every model pair the decoders use, encode prompts, plan the
   sample sets (:class:`~verifier.runner.context.SuiteContext`), check plugin files and expected laws.
3. **sampling** -- :func:`sample_chunks`: per sample set and chunk, ``Decoder.generate`` with the
   chunk's derived seed, :func:`verifier.validation.check_emitted_tokens`, then the shard is written
   atomically.  A chunk whose shard is already on disk (``--resume``) is never sampled again.  A
   decoder that raises or returns invalid output stops *its* sampling; shards so far are kept and
   the report says where it stopped.
4. **statistics and verdict** -- :func:`assess`: cells per sample set (:mod:`verifier.runner.analysis`)
   against expected laws from the target's processed probs; correction and verdict per decoder
   (:mod:`verifier.runner.verdict`); beside it, never inside it, the acceptance audit and -- where
   declared -- acceptance rule conformance (:mod:`verifier.runner.acceptance`); the report dict.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as _dt
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from verifier.errors import (
    EXIT_BIAS,
    ConfigError,
    DecoderError,
    DecoderOutputError,
    ResourceError,
    SamplingRefusedError,
    is_out_of_memory,
)
from verifier._resume import resume_command
from verifier._tracebacks import crash_traceback
from verifier.runner import acceptance, analysis, batch, cost, fingerprint, guards, speculation
from verifier.runner.assemble import REPORT_SCHEMA_VERSION, build_report, environment
from verifier._call_timeout import CallTimeout
from verifier.runner.cells import (acceptance_cells, cell_levels, check_cell_weights, draft_unknown,
                                   expected_preflight, set_cells, warm_statistics)
from verifier.runner.clock import session_id, since_process_start
from verifier.runner.context import SuiteContext
from verifier.runner.inputs_key import KEY_FIELD, run_inputs_key
from verifier.runner.plan import SampleSetPlan, decoder_identity
from verifier.runner.store import SampleStore, Shard
from verifier.runner.verdict import DecoderVerdict, decide, exit_code
from verifier.suite.schema import Suite
from verifier.validation import (REPLAY_NATS, check_decoder_stats, check_emitted_tokens,
                                 plugin_attribute, same_rows_nats)

__all__ = ["REPORT_SCHEMA_VERSION", "RUN_FILE", "STOPPED_FILE", "RunOutcome", "new_run_dir", "load_run_suite", "utc_now",
           "start_run", "exact_stage", "prepare", "sample_chunks", "record_stops", "assess", "exact_failed_report",
           "regeneration"]

_Context = SuiteContext  # the old private name (bench modules, shards)

RUN_FILE = guards.RUN_FILE  # defined beside check_fresh_run_dir (a light module: the CLI reads it before torch loads)
STOPPED_FILE = "stopped.json"


@dataclass
class RunOutcome:
    """What :func:`verifier.pipeline.run_suite` / :func:`~verifier.pipeline.analyze_run` produced."""

    run_dir: Path
    report: dict[str, Any]
    exit_code: int
    stage_seconds: dict[str, float] = field(default_factory=dict)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_dir(report_root: str | Path, suite: Suite) -> Path:
    """``<report_root>/<suite name>/<UTC time>-seed<seed>`` (a suffix keeps it unique)."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = Path(report_root) / suite.name / f"{stamp}-seed{suite.seed}"
    path, i = base, 1
    while path.exists():
        i += 1
        path = base.with_name(f"{base.name}-{i}")
    return path


def load_run_suite(run_dir: str | Path) -> tuple[Suite, dict[str, Any]]:
    """The suite a run folder was started with (from its ``run.json``).

    Raises
    ------
    ConfigError
        ``run_dir`` is not a run folder.
    """
    path = Path(run_dir) / RUN_FILE
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"RUN_DIR={str(run_dir)!r} is not a run folder: {RUN_FILE} is missing") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable run file: {exc}") from None
    stored = info.get("suite") if isinstance(info, dict) else None
    if not isinstance(stored, dict) or not {"raw", "source", "base_dir"} <= set(stored):
        raise ConfigError(f"{path}: not a run file of spec-verifier (no 'suite' object with raw, source, base_dir); "
                          "allowed: the run.json that `specverify run` wrote")
    return Suite.from_dict(stored), info


# --------------------------------------------------------------------------- stage 1


def exact_stage(suite: Suite) -> dict[str, Any]:
    """Stage 1: the suite's exact rules and cases; ``{"ran", "ok", "findings", "wrong_rules"}``."""
    if not suite.exact["enabled"]:
        return {"ran": False, "ok": True, "findings": []}
    from verifier.exact import run_exact_stage, standard_cases

    cases = None
    if suite.exact["cases"]:
        by_name = {c.name: c for c in standard_cases()}
        unknown = [c for c in suite.exact["cases"] if c not in by_name]
        if unknown:
            raise ConfigError(f"{suite.source}: exact.cases contains {unknown[0]!r}; allowed: {sorted(by_name)}")
        cases = [by_name[c] for c in suite.exact["cases"]]
    findings = run_exact_stage(suite.exact["rules"] or None, cases)
    if suite.exact.get("trees"):  # opt-in: tree / multi-draft rules (verifier.exact.tree_stage)
        from verifier.exact.tree_stage import run_tree_exact_stage

        findings += run_tree_exact_stage()
    rows = []
    for f in findings:
        rows.append({
            "rule": f.rule, "case": f.case, "declared": f.declared, "verdict": f.verdict,
            "matches_declared": bool(f.matches_declared), "tv": float(f.tv), "tv_exact": str(f.tv),
            "samples_needed": f.samples_needed, "samples_note": f.samples_note,
            "num_draft_tokens": f.num_draft_tokens, "num_tokens": f.num_tokens,
        })
    ok = all(r["matches_declared"] for r in rows)
    return {"ran": True, "ok": ok, "findings": rows,
            "wrong_rules": sorted({r["rule"] for r in rows if not r["matches_declared"]})}


# --------------------------------------------------------------------------- stage 3


def _where(exc: BaseException) -> str:
    """`` (at file:line in function)`` of the innermost frame of a decoder's exception."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {f.filename}:{f.lineno} in {f.name})"


def _valid_shard(shard: Shard | None, plan: SampleSetPlan, index: int) -> bool:
    return (shard is not None and shard.meta.get("seed") == plan.chunk_seed(index)
            and shard.meta.get("set_key") == plan.key
            and shard.tokens.shape == (plan.chunk_rows(index), plan.max_new_tokens)
            and ("logprob" not in plan.decoder.tests or shard.logprobs is not None))  # the logprob test needs them


# a chunk whose rows are, as a multiset, those of an earlier chunk of its sample set (drawn with a
# different seed) is flagged when the chance that an i.i.d. sampler repeats them is <= exp(-SEED_REUSE_NATS)
SEED_REUSE_NATS = REPLAY_NATS  # about 1e-13 (verifier.validation, shared with the sample-file import)


def _check_seed_used(seen: dict[tuple[str, bytes], tuple[int, int]], plan: SampleSetPlan, index: int, seed: int,
                     tokens: np.ndarray, decoder_name: str) -> None:
    """Raise :class:`DecoderOutputError` when chunk ``index`` repeats an earlier chunk of its set
    (the same rows in any order).

    Under any i.i.d. law the probability that ``n`` rows have exactly the row counts ``c`` is at
    most the multinomial probability at the maximum-likelihood law ``c / n``:
    ``n! / prod(c_i!) * prod((c_i / n) ** c_i)``.  A repeat whose bound is ``<= exp(-SEED_REUSE_NATS)``
    means the decoder ignored the seed (or replays samples); greedy or near-constant chunks (bound
    near 1) are never flagged.
    """
    if tokens.shape[0] < 2:
        return
    import hashlib

    rows, counts = np.unique(tokens, axis=0, return_counts=True)  # sorted: the multiset of rows
    key = (plan.set_id, hashlib.sha256(np.ascontiguousarray(rows).tobytes() + counts.astype(np.int64).tobytes()).digest())
    earlier = seen.get(key)
    if earlier is None:
        seen[key] = (index, seed)
        return
    n = int(counts.sum())
    nats = same_rows_nats(counts)
    if nats >= SEED_REUSE_NATS and earlier[1] != seed:
        raise DecoderOutputError(
            f"{decoder_name} returned for chunk {index} (seed {seed}) the same {n} rows as for chunk {earlier[0]} "
            f"(seed {earlier[1]}) of {plan.label}: it ignores the seed or replays samples (an i.i.d. sampler "
            f"repeats them with probability <= exp(-{nats:.0f})); allowed: independent samples for different seeds")


def _start_engine(decoder: Any, sampling: Any, name: str, log: Callable[[str], None]) -> None:
    """An engine decoder's worker started before its first timed ``generate`` call
    (:meth:`verifier.engines.decoder.EngineDecoder.start_engine`, after its sampling check: a refused setting stays a
    usage error raised before the engine starts), so the report's sampling rate counts generate calls only; a plugin
    without ``start_engine`` is left alone."""
    start = getattr(decoder, "start_engine", None)
    seconds = start(sampling) if callable(start) else 0.0  # 0.0 once it runs
    if seconds:
        log(f"  {name}: engine started in {seconds:.1f} s (not counted in the sampling rate)")


def _sample(ctx: SuiteContext, store: SampleStore, progress: bool, log: Callable[[str], None],
            select: Callable[[SampleSetPlan, int], bool] | None = None) -> dict[str, dict]:
    """Stage 3.  Returns ``{decoder name: error dict}`` for decoders that failed.

    ``select(plan, chunk_index)`` restricts sampling to the chunks it returns True for (one
    shard of ``specverify run --shard I/N``); default every chunk.
    """
    from verifier import progress as _progress

    ctx.run_dir = store.run_dir  # before preflight builds the decoders
    errors: dict[str, dict] = ctx.preflight()
    seen_chunks: dict[tuple[str, bytes], tuple[int, int]] = {}
    for spec in ctx.suite.decoders:
        if spec.name in errors:
            log(f"  {spec.name}: not sampled: it could not be built ({errors[spec.name]['type']}; the error follows "
                "with the verdict)")
            continue
        plans = [p for p in ctx.plans if p.decoder.name == spec.name]
        mine = [(p, i) for p in plans for i in range(p.num_chunks) if select is None or select(p, i)]
        total = sum(p.chunk_rows(i) for p, i in mine)
        todo = [(p, i) for p, i in mine if not _valid_shard(store.read_chunk(p.set_id, i), p, i)]
        done = total - sum(p.chunk_rows(i) for p, i in todo)
        if not todo:
            log(f"  {spec.name}: all {total} samples already on disk")
            continue
        bar = _progress.bar(total, f"{spec.name:>24}", "samples", initial=done, leave=True, show=progress)
        used: list = []  # this decoder's instances (one per k): told to make no call ahead once its sampling ends
        ahead = 0  # chunks whose generate call the engine made while the harness planned (verifier.cli._presample)
        try:
            for plan, index in todo:
                pair = ctx.pairs[plan.pair]
                rows = plan.chunk_rows(index)
                seed = plan.chunk_seed(index)
                try:
                    decoder = ctx.decoder(spec, plan.num_draft_tokens)
                    if all(decoder is not d for d in used):
                        used.append(decoder)
                        # the runner only waits for a worker's replies: the statistics' memos meanwhile (every chunk
                        # of the sets sampled here, so the verdict's n is the planned one; not for a shard or a look)
                        if len(used) == 1 and select is None and getattr(decoder, "runs_in_worker", False):
                            ctx.warming.append(warm_statistics(ctx, plans))

                    def check(out, n, pair=pair, plan=plan):
                        return check_emitted_tokens(out, num_samples=n, max_new_tokens=plan.max_new_tokens,
                                                    vocab_size=pair.vocab_size, eos_token_id=pair.eos_token_id,
                                                    decoder_name=spec.name, stop_token_ids=spec.stop_token_ids,
                                                    max_tokens=spec.max_tokens)
                    try:  # one call of `rows` rows, or calls of a batch_composition level's rows (verifier.runner.batch)
                        _start_engine(decoder, plan.sampling, spec.name, log)  # its start-up: not in the generate time
                        called = time.perf_counter()  # the chunk's generate time: the rate in the report (runner.cost)
                        tokens, stats, call_meta, reported = batch.generate_chunk(
                            decoder, plan, index, spec.name, check,
                            return_logprobs="logprob" in spec.tests)  # the reported logprobs (verifier.runner.logprob)
                    except (DecoderError, ResourceError, KeyboardInterrupt):
                        raise
                    except CallTimeout as exc:
                        raise DecoderError(str(exc)) from None
                    except SamplingRefusedError as exc:  # a setting the decoder cannot express: usage (exit 2), no crash
                        # (also a URL audit's refused request or edited response journal: same class, same exit)
                        raise type(exc)(f"decoders[{spec.name}] at {plan.label}: {exc}") from None
                    except BaseException as exc:  # SystemExit from plugin code too: a crash, never a clean exit
                        if is_out_of_memory(exc):  # the machine, not the decoder (exit 2, shards so far kept)
                            raise ResourceError(
                                f"decoders[{spec.name}]: generate(num_samples={rows}) for {plan.label} ran out of memory "
                                f"({type(exc).__name__}: {exc}); allowed: a smaller chunk_size (now "
                                f"{plan.chunk_size}; rows per generate call) or a machine with more memory; resume "
                                f"with `{resume_command(store.run_dir)}`") from exc
                        raise DecoderError(f"{spec.name} raised {type(exc).__name__}: {exc}{_where(exc)}") from exc
                    _check_seed_used(seen_chunks, plan, index, seed, tokens, spec.name)
                    fra = plugin_attribute(stats, "first_round_accepted", None, decoder_name=f"{spec.name}.last_stats")
                    counts = plugin_attribute(stats, "accepted_counts", None, decoder_name=f"{spec.name}.last_stats")
                    fra, counts = check_decoder_stats(fra, counts, num_draft_tokens=plan.num_draft_tokens,
                                                      decoder_name=spec.name, num_samples=rows)
                    origins = plugin_attribute(stats, "origins", None, decoder_name=f"{spec.name}.last_stats")
                    meta = {"set_key": plan.key, "set_id": plan.set_id, "chunk": index, "seed": seed,
                            "num_samples": rows, "suite_seed": ctx.suite.seed,
                            "decoder": decoder_identity(spec, decoder, plan.num_draft_tokens), **call_meta}
                    extra = plugin_attribute(stats, "extra", None, decoder_name=f"{spec.name}.last_stats")
                    if isinstance(extra, dict) and isinstance(extra.get("speculation"), dict):  # verifier.runner.speculation
                        meta["speculation"] = {**extra["speculation"], "session": session_id()}  # sent by this process
                except DecoderError as exc:
                    kept = sum(1 for i in range(plan.num_chunks) if store.chunk_path(plan.set_id, i).is_file())
                    errors[spec.name] = {
                        "decoder": spec.name, "kind": "invalid_output" if isinstance(exc, DecoderOutputError) else "crash",
                        "type": type(exc).__name__, "message": str(exc), "traceback": crash_traceback(exc),
                        "set_id": plan.set_id,
                        "set": plan.label, "chunk": index, "seed": seed,
                        "chunks_kept_in_set": kept, "samples_dir": str(store.samples_dir / plan.set_id),
                    }
                    log(f"  {spec.name}: stopped at {plan.label}, chunk {index} (seed {seed}): {exc}")
                    break
                # optional per-token origins (diagnosis localization)
                origins = origins if origins is not None and np.shape(origins) == tokens.shape else None
                generate_seconds = time.perf_counter() - called
                early = getattr(decoder, "last_presampled_seconds", None)
                if isinstance(early, float):  # made ahead: the engine's own seconds for it, not the wait for its reply
                    generate_seconds, ahead = early, ahead + 1
                store.write_chunk(plan.set_id, index, Shard(tokens, fra, counts, meta, origins, reported))
                cost.record_chunk(store.run_dir, plan.set_id, index, rows, generate_seconds)
                bar.update(rows)
        finally:
            bar.close()
            for decoder in used:
                stop = getattr(decoder, "stop_presample", None)
                if callable(stop):
                    stop()
        if ahead:
            log(f"  {spec.name}: {ahead} of {len(todo)} chunks drawn by the engine while the harness planned")
    return errors


def sample_chunks(ctx: SuiteContext, store: SampleStore, *, progress: bool = False,
                  log: Callable[[str], None] = print,
                  select: Callable[[SampleSetPlan, int], bool] | None = None) -> dict[str, dict]:
    """Stage 3 (sampling) on the chunks ``select(plan, chunk_index)`` keeps (default all).

    Shards already valid on disk are kept.  Returns ``{decoder name: error dict}`` for decoders
    that stopped (crash or invalid output); used by shards and the sequential audit.
    """
    return _sample(ctx, store, progress, log, select=select)


# --------------------------------------------------------------------------- stage 4


def _load_set(store: SampleStore, plan: SampleSetPlan, pair, speculation: list | None = None,
              reported: list | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, int]:
    """A sample set's stored rows; a chunk with values no decoder could emit is StoredSampleError (exit 2).
    ``speculation`` collects each chunk's speculation figures (verifier.runner.speculation), ``reported`` each
    chunk's ``(logprobs, origins)`` (verifier.runner.logprob)."""
    toks, fras, counts, chunks = [], [], [], 0
    for i in range(plan.num_chunks):
        shard = store.read_chunk(plan.set_id, i)
        if not _valid_shard(shard, plan, i):
            continue
        if speculation is not None:
            speculation.append(shard.meta.get("speculation"))
        chunks += 1
        toks.append(store.check_tokens(plan.set_id, i, shard, max_new_tokens=plan.max_new_tokens,
                                       vocab_size=pair.vocab_size, eos_token_id=pair.eos_token_id,
                                       stop_token_ids=plan.decoder.stop_token_ids, max_tokens=plan.decoder.max_tokens))
        if reported is not None:  # checked as the tokens are: an edited array is a storage error, never a verdict
            reported.append(store.check_reported(shard, plan.set_id, i))
        fra, acc = store.check_stats(plan.set_id, i, shard, num_draft_tokens=plan.num_draft_tokens)
        fras.append(fra)
        counts.append(acc)
    tokens = np.concatenate(toks) if toks else np.zeros((0, plan.max_new_tokens), dtype=np.int64)
    fra = np.concatenate(fras) if fras and all(f is not None for f in fras) else None
    acc = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    return tokens, fra, acc, chunks


def _joined(parts: list) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The set's reported logprobs and origins, chunks joined (each None unless every chunk has it)."""
    out = []
    for i in range(2):
        got = [p[i] for p in parts]
        out.append(np.concatenate(got) if got and all(g is not None for g in got) else None)
    return out[0], out[1]


def _statistics(ctx: SuiteContext, store: SampleStore, errors: dict[str, dict], allow_partial: bool = False):
    from verifier import progress

    for thread in ctx.warming:  # the TV cells' memos warmed during sampling: done before the cells read them
        thread.join()
    ctx.warming.clear()

    bar = progress.bar(len(ctx.plans), "statistics", "sets")  # progress hook (issue 16)
    suite = ctx.suite
    verdicts: list[DecoderVerdict] = []
    sets_info: list[dict[str, Any]] = []
    for spec in suite.decoders:
        plans = [p for p in ctx.plans if p.decoder.name == spec.name]
        spec_metas: list = []  # the chunks' speculation counters, where the decoder reports them
        parts: dict[str, list] = {p.set_id: [] for p in plans}  # each chunk's (reported logprobs, origins)
        loaded = {p.set_id: _load_set(store, p, ctx.pairs[p.pair], spec_metas, parts[p.set_id]) for p in plans}
        level = cell_levels(suite, plans)
        cells: list[analysis.CellResult] = []
        audits, conformance_cells, untested = [], [], []
        for p in plans:
            tokens, fra, acc, chunks = loaded[p.set_id]
            info = p.describe()
            k = p.num_draft_tokens
            info.update({"samples_on_disk": int(len(tokens)), "chunks_on_disk": chunks,
                         "rounds": int(len(acc)),
                         "acceptance_rate": float(acc.mean() / k) if len(acc) else None,
                         "accepted_counts_hist": np.bincount(np.clip(acc, 0, k), minlength=k + 1).tolist() if len(acc) else [],
                         "first_round_accepted_reported": fra is not None})
            info["samples_missing"] = int(p.samples - len(tokens))
            if spec.name not in errors:
                guards.check_missing(store, p, len(tokens), allow_partial,
                                     valid=lambda i, p=p: _valid_shard(store.read_chunk(p.set_id, i), p, i))
            first = next((sh for sh in (store.read_chunk(p.set_id, i) for i in range(p.num_chunks))
                          if sh is not None), None) if chunks else None
            info["decoder_identity"] = first.meta.get("decoder") if first is not None else None
            sets_info.append(info)
            if spec.name in errors or not len(tokens):  # no sample, no cell (the report says what is missing)
                bar.update(1)
                continue
            cells.extend(set_cells(ctx, p, tokens, level, reported=_joined(parts[p.set_id])))
            audit, cell, why = acceptance_cells(ctx, p, fra, acc, draft_unknown(ctx, p, info["decoder_identity"]))
            audits += [audit] if audit else []
            conformance_cells += [cell] if cell is not None else []
            untested += [why] if why else []
            bar.update(1)
        verdict = decide(spec.name, spec.expect, cells, alpha=suite.stats.alpha,
                         correction=suite.stats.correction, target_mde=suite.stats.target_mde,
                         error=errors.get(spec.name), max_new_tokens=max((p.max_new_tokens for p in plans), default=None),
                         cell_weights=dict(suite.stats.cell_weights))
        verdict.acceptance = audits
        speculation.apply_guard(verdict, speculation.summarize(spec_metas, session=session_id()),  # no draft verified,
                                target_tv=suite.stats.target_mde)  # or too few calls drafted: no PASS
        if spec.acceptance == "canonical" and spec.name not in errors:
            verdict.conformance = acceptance.conformance(conformance_cells, suite.stats.alpha, untested)
            verdict.conformance["cell_results"] = [c.to_dict() for c in conformance_cells]
            if verdict.conformance["verdict"] == acceptance.NONCONFORMING and spec.expect == "pass":
                verdict.expectation_met = False  # declared, so a mismatch fails the run -- as conformance, not as bias
        verdicts.append(verdict)
    bar.close()
    # "above the coupling bound" is decided over every set of the run at the family alpha (issue 28)
    acceptance.coupling_bound_check([a for v in verdicts for a in v.acceptance or []], suite.stats.alpha)
    for v in verdicts:  # a fixed per-position rate across the decoder's sets (issue 29 kind 6): beside the verdict
        v.fingerprint = fingerprint.fixed_acceptance_check(v.acceptance or [], suite.stats.alpha)
    return verdicts, sets_info


# a check that runs after the verdict and may still change it (an audit's numeric floor): the time-to-verdict line
# then says the verdict is provisional instead of announcing a PASS the final report may not carry
_PENDING_CHECK: contextvars.ContextVar[str | None] = contextvars.ContextVar("pending_check", default=None)


@contextlib.contextmanager
def verdict_pending(check: str):
    """Within the block the ``time to verdict:`` line names ``check`` (e.g. "the numeric floor") as still to come."""
    token = _PENDING_CHECK.set(check)
    try:
        yield
    finally:
        _PENDING_CHECK.reset(token)


def assess(ctx: SuiteContext, store: SampleStore, errors: dict, exact: dict, stage: dict, info: dict,
           log: Callable[[str], None], *, allow_partial: bool = False, regenerating: bool = False,
           previous: dict | None = None) -> tuple[dict, int]:
    """Stage 4: statistics and verdict of the stored samples -> ``(report dict, exit code)``.

    Times the statistics into ``stage["statistics"]``; a run (not a regeneration) logs its time to
    verdict here, before the diagnosis and the report files (issue 17).  A numeric floor in ``previous``
    (the folder's report before a recompute or resume, or one an engine audit just measured) is applied
    first (:func:`verifier.engines.floor.reapply_floor`), so the announced verdict is the final one.
    """
    t0 = time.perf_counter()
    verdicts, sets_info = _statistics(ctx, store, errors, allow_partial)
    stage["statistics"] = time.perf_counter() - t0
    code = exit_code(verdicts, exact_ok=exact["ok"])
    report = build_report(ctx.suite, environment(ctx.suite), exact, verdicts, sets_info, errors, code, info)
    if previous is not None:  # measured once against the engine/server; no sample holds it (verifier.engines.floor)
        from verifier.engines.floor import reapply_floor

        code = reapply_floor(report, previous)
    if not regenerating:  # the verdict is known here, before the diagnosis and the report files (issue 17)
        report["run"]["time_to_verdict"] = ttv = since_process_start()
        pending = _PENDING_CHECK.get()
        said = (f"{report['verdict']} (exit {code})" if pending is None else
                f"{report['verdict']} before {pending} (exit {code} unless {pending} changes it)")
        log(f"time to verdict: {ttv['wall_seconds']:.1f} s since {ttv['wall_from']} ({ttv['cpu_seconds']:.1f} s CPU): "
            f"{said}; diagnosis and reports follow")
    report["run"][KEY_FIELD] = run_inputs_key(store.run_dir, allow_partial)
    timing = cost.chunks_on_disk(cost.read_timing([store.run_dir]), ctx.plans, store.chunk_path)
    before = previous.get("run") if regenerating and isinstance(previous, dict) and isinstance(previous.get("run"), dict) else {}
    kept = before.get("cost") if isinstance(before.get("cost"), dict) else None  # a folder without timing.jsonl (committed):
    report["run"]["cost"] = cost.decoder_costs(  # the rate its run measured; a timing file present is the only source
        report, timing, kept if not (store.run_dir / cost.TIMING_FILE).exists() else None)
    for key in RUN_FIGURES:  # a recompute keeps the figures of the run that drew the samples (its stage_seconds too)
        if key not in report["run"] and key in before:
            report["run"][key] = before[key]
    report["samples_planned"] = sum(s["samples"] for s in sets_info)
    report["samples_missing"] = sum(s["samples_missing"] for s in sets_info)
    if report["samples_missing"]:
        log(f"partial report: {report['samples_missing']} of {report['samples_planned']} samples are missing")
    return report, code


# report.json `run` figures measured by the run that drew the samples, kept by a recompute (`specverify report
# --recompute`) that cannot measure them again: its time to verdict and when it finished
RUN_FIGURES = ("time_to_verdict", "finished_at")


def start_run(store: SampleStore, suite: Suite, *, resume: bool, log: Callable[[str], None]) -> str:
    """Before the exact stage: a resume removes temporary files left by a writer killed mid-write; a fresh
    run refuses a folder that holds a run and writes ``run.json``.  Returns the start time (UTC)."""
    from verifier._run_lock import remove_stale_temp_files

    started = utc_now()
    run_dir = store.run_dir
    if resume:
        for path in remove_stale_temp_files(run_dir):  # left by a writer killed mid-write
            log(f"removed {path.relative_to(run_dir)}: a temporary file left by a job killed mid-write")
    else:
        guards.check_fresh_run_dir(run_dir, RUN_FILE)
        store.write_json(RUN_FILE, {"schema_version": REPORT_SCHEMA_VERSION, "suite": suite.to_dict(),
                                    "created_at": started, "run_id": Path(run_dir).name})
    return started


def prepare(suite: Suite, store: SampleStore, *, resume: bool, pairs: dict | None = None) -> SuiteContext:
    """Stage 2 (models): model pairs (``pairs``: already loaded by the caller, see :class:`SuiteContext`), prompts
    and sample-set plans; plugin files recorded in ``run.json`` (a resume refuses a changed one); the expected laws'
    sizes checked before any sample."""
    ctx = SuiteContext(suite, pairs)
    guards.record_plugins(store, suite, RUN_FILE, check=resume)
    check_cell_weights(ctx)
    expected_preflight(ctx)
    return ctx


def record_stops(store: SampleStore, errors: dict[str, dict]) -> None:
    """``stopped.json``: where each stopped decoder stopped (removed when none did)."""
    if errors:
        store.write_json(STOPPED_FILE, list(errors.values()))
    elif (store.run_dir / STOPPED_FILE).exists():
        (store.run_dir / STOPPED_FILE).unlink()


def exact_failed_report(ctx: SuiteContext, exact: dict, stage: dict, info: dict) -> dict:
    """The report of a run stopped by the exact stage (no sampling, exit 1)."""
    report = build_report(ctx.suite, environment(ctx.suite), exact, [], [], {}, EXIT_BIAS, info)
    report["run"]["stage_seconds"] = stage
    return report


def regeneration(run_dir: str | Path, run_file: dict) -> tuple[dict, dict, dict | None]:
    """What ``specverify report`` reads back besides the samples: ``(errors, info, run_stages)`` --
    the decoders that stopped, the run's identity, and the stage times of the run that drew the samples."""
    from verifier.runner.store import STOP_RECORD_KEYS, stop_records_problem

    store = SampleStore(run_dir)
    errors = {}
    if (store.run_dir / STOPPED_FILE).exists():  # edited or damaged: named, never a KeyError traceback (exit 3)
        path = store.run_dir / STOPPED_FILE
        try:
            stops = store.read_json(STOPPED_FILE)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: unreadable ({exc}); allowed: the stopped.json the run wrote") from None
        why = stop_records_problem(stops)
        if why:
            raise ConfigError(f"{path} is not as the run wrote it ({why}); allowed: a list of stop records, each an "
                              f"object with {', '.join(STOP_RECORD_KEYS)}")
        errors = {e["decoder"]: e for e in stops}
    info = {"run_id": run_file.get("run_id", Path(run_dir).name), "started_at": run_file.get("created_at"),
            "regenerated_at": utc_now(), "resumed": False}
    run_stages = None
    previous = store.run_dir / "report.json"
    if previous.is_file():  # keep the stage times of the run that drew the samples (report.json run.stage_seconds)
        try:
            run_stages = dict(json.loads(previous.read_text(encoding="utf-8"))["run"]["stage_seconds"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            run_stages = None
    return errors, info, run_stages
