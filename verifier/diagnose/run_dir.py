"""Diagnose the biased decoders of a run: per sample set and summed over a decoder's sample sets.

Two callers: the runner, right after the verdict (every decoder with BIAS DETECTED; the result goes
into report.json ``diagnosis`` and the "Diagnosis" section of report.md/html), and
``specverify diagnose RUN_DIR`` (:mod:`verifier.cli.cmd_diagnose`), which reads the samples back
through :class:`verifier.runner.store.SampleStore` and the verdicts from report.json.

Per decoder: every sample set is diagnosed (:func:`verifier.diagnose.sample_set.diagnose_sample_set`,
its own bias flag = one of its cells rejected); the log-likelihoods of all its sets are summed (the
sets are independent samples) and ranked once more, which gives the decoder's sentence; the
per-set decisions say under which sampling configs the bias appears.  When the cells that look across rows
(``collision``, ``serial``) rejected, the independence finding (:mod:`verifier.diagnose.independence`) is the
diagnosis if no other cell rejected, else it leads the sentence (a certain finding, which can also make the
single-row cells reject) and the per-row diagnosis follows it.  Likewise the stop-rule finding
(:mod:`verifier.diagnose.stoprule`) when the deterministic ``stop-rule`` cell rejected, and the reported-logprob
finding (:mod:`verifier.diagnose.logprob`) when the deterministic ``logprob`` cell rejected.  When the cells of some
``batch_composition`` levels rejected and those of others passed, the batch finding
(:mod:`verifier.diagnose.batchlevel`, "bias only at batch composition ...") leads the sentence and the decoder's
ranking sums the sample sets of the rejecting levels only.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from verifier.diagnose.engine_law_sets import add_engine_laws
from verifier.diagnose.engine_laws import ranking_alpha
from verifier.diagnose.render import json_safe
from verifier.diagnose.rank import DIAGNOSIS_ALPHA, FIT_ALPHA, Ranking, combine, decide
from verifier.diagnose.row_budget import CUT_MARK, RowBudget, budget_sentence
from verifier.diagnose.sample_set import diagnose_sample_set, fit_check
from verifier.diagnose.setting_laws import setting_law_of_decoder, setting_law_of_set, setting_law_without_draft
from verifier.runner.verdict import CELL_BIAS

__all__ = ["diagnose_decoders", "auto_diagnosis", "stored_diagnosis", "load_tokens", "DIAGNOSED_VERDICT", "DIAGNOSE_MODES", "set_mode", "mode",
           "skipped_diagnosis"]

DIAGNOSED_VERDICT = "BIAS DETECTED"
# the runner's automatic diagnosis fits temperature/settings when the distinct rows' teacher-forced probs hold at
# most this many entries (rows x tokens x vocab): O(T x V) per distinct row and per likelihood evaluation, about
# 40 evaluations; measured 0.3-0.6 s CPU at the shipped vocab (384, n = 3000, 3 tokens: 150-1200 distinct rows)
AUTO_FIT_MAX_ENTRIES = 20_000_000
# ... and diagnoses a sample set at all only up to this many entries: the likelihoods keep ~11 float64 arrays of
# that size (measured 86 B per entry at V = 32k: 16 GiB for 2,000 distinct rows x 3 tokens, which got the run
# killed by the kernel after its verdict was known, exit 3 and no reports); larger sets are left to `specverify diagnose`
AUTO_DIAGNOSE_MAX_ENTRIES = 50_000_000
BYTES_PER_ENTRY = 86
AUTO_DIAGNOSE_MEMORY_SHARE = 0.5  # ... and only while those bytes fit this share of the memory available now
# when the only rejected cells are collision cells: every mechanism is a law of one row, which that finding leaves
# unchanged (each row may have the target's law; pairs of rows repeat), so no likelihood ranking can explain it
from verifier._diagnose_mode import DIAGNOSE_MODES, distinct_rows, mode, set_mode  # noqa: E402  (re-exported: the CLI sets them)


def skipped_diagnosis(run_dir) -> dict[str, Any]:
    """report.json ``diagnosis`` of a run with ``--diagnose off``: why skipped and the command that diagnoses later."""
    return {"skipped": "--diagnose off", "command": f"specverify diagnose {run_dir}", "decoders": []}


def auto_diagnose_budget(available: int | None = -1) -> int:
    """Entries (rows x tokens x vocab) the automatic diagnosis takes on: :data:`AUTO_DIAGNOSE_MAX_ENTRIES`,
    lowered to :data:`AUTO_DIAGNOSE_MEMORY_SHARE` of ``available`` bytes (default: measured now; None: unknown)
    at :data:`BYTES_PER_ENTRY` each."""
    from verifier.runner.guards import available_memory

    available = available_memory() if available == -1 else available
    if available is None:
        return AUTO_DIAGNOSE_MAX_ENTRIES
    return int(min(AUTO_DIAGNOSE_MAX_ENTRIES, AUTO_DIAGNOSE_MEMORY_SHARE * available // BYTES_PER_ENTRY))


def load_tokens(store, plan, *, with_calls: bool = False, pair=None):
    """Emitted tokens of a sample set from its shards (unreadable shards skipped), and origins when stored.

    With ``with_calls``, also the generate call of each row, shape (rows,), int64: its shard, or at a
    ``batch_composition`` level its call within the shard (:mod:`verifier.runner.batch`).
    With ``pair`` (its ``vocab_size`` / ``eos_token_id``), a chunk holding values no decoder could emit is
    :class:`~verifier.errors.StoredSampleError` naming the file (``SampleStore.check_tokens``).
    """
    toks, origins, calls = [], [], []
    for i in range(plan.num_chunks):
        shard = store.read_chunk(plan.set_id, i)
        if shard is None or np.asarray(shard.tokens).shape[1:] != (plan.max_new_tokens,):
            continue
        toks.append(np.asarray(shard.tokens, dtype=np.int64) if pair is None else store.check_tokens(
            plan.set_id, i, shard, max_new_tokens=plan.max_new_tokens, vocab_size=pair.vocab_size,
            eos_token_id=pair.eos_token_id, stop_token_ids=plan.decoder.stop_token_ids,
            max_tokens=plan.decoder.max_tokens))
        origins.append(getattr(shard, "origins", None))
        b = getattr(plan, "batch_rows", None)  # a batch_composition level: the chunk is calls of b (kept) rows
        b = b // 2 if b and getattr(plan, "mixed", getattr(plan, "filler_temperature", None) is not None) else b
        calls.append(i * (plan.chunk_size // b) + np.arange(len(toks[-1])) // b if b else np.full(len(toks[-1]), i))
    tokens = np.concatenate(toks) if toks else np.zeros((0, plan.max_new_tokens), dtype=np.int64)
    orig = np.concatenate(origins) if origins and all(o is not None for o in origins) else None
    if with_calls:
        return tokens, orig, (np.concatenate(calls) if calls else np.zeros(0, dtype=np.int64))
    return tokens, orig


def _set_biased(report: dict, set_id: str) -> bool:
    return any(c.get("set_id") == set_id and c.get("verdict") == CELL_BIAS for c in report.get("cells", []))


def diagnose_decoders(report: dict, plans: list, pairs: dict, store, *, decoders: list[str] | None = None,
                      with_fits: bool = True, log: Callable[[str], None] | None = None,
                      max_distinct_rows: int | None = None) -> dict[str, Any]:
    """Diagnosis of each decoder with BIAS DETECTED in ``report`` (or of the named ``decoders``).

    Parameters
    ----------
    report : dict
        report.json of the run (its ``decoders`` verdicts and ``cells``).
    plans : list of SampleSetPlan
    pairs : dict of str -> LoadedPair
    store : SampleStore
    decoders : list of str, optional
        Diagnose these decoders whatever their verdict.
    with_fits : bool or "small", default True
        Fit the effective temperature and other settings; "small": only when the distinct rows x tokens x
        vocab stay within :data:`AUTO_FIT_MAX_ENTRIES` (the runner's automatic diagnosis; the shipped models' are).
    log : callable, optional
    max_distinct_rows : int or None, default None
        Read only the first rows of each sample set, through the row that brings the distinct rows to this many
        (:mod:`verifier.diagnose.row_budget`; the runner's automatic diagnosis); None reads every row.

    Returns
    -------
    dict
        ``{"alpha", "fit_alpha", "decoders": [{decoder, verdict, status, sentence, decision, sets: [...],
        configs}]}`` (deterministic: no wall time).
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small per-row ops: intra-op threads only spin (measured 10x slower on a busy 2-core box)
    try:
        return _diagnose_decoders(report, plans, pairs, store, decoders, with_fits, log, max_distinct_rows)
    finally:
        torch.set_num_threads(threads)


def _diagnose_decoders(report, plans, pairs, store, decoders, with_fits, log, max_distinct_rows) -> dict[str, Any]:
    from verifier import progress

    verdicts = {d["decoder"]: d.get("verdict") for d in report.get("decoders", [])}
    names = decoders if decoders is not None else [n for n, v in verdicts.items() if v == DIAGNOSED_VERDICT]
    bar = progress.bar(sum(1 for p in plans if p.decoder.name in names), "diagnosis", "sets")  # 1-2 min in the ci suite
    try:
        rows = RowBudget(lambda p: load_tokens(store, p, with_calls=True, pair=pairs[p.pair]), max_distinct_rows)
        return _diagnose_names(report, plans, pairs, store, names, verdicts, with_fits, log, bar, rows)
    finally:
        bar.close()


def _diagnose_names(report, plans, pairs, store, names, verdicts, with_fits, log, bar, rows) -> dict[str, Any]:
    from verifier.diagnose.batchlevel import batch_finding
    from verifier.diagnose.glossary import mechanism_entries
    from verifier.diagnose.independence import INDEPENDENCE_STATUS, independence_finding
    from verifier.diagnose.logprob import LOGPROB_STATUS, logprob_finding
    from verifier.diagnose.penalty import PENALTY_STATUS, penalty_finding
    from verifier.diagnose.stoprule import STOP_STATUS, stop_finding

    from verifier.diagnose.boundary import decoder_engine

    out = []
    audited = _engine_name(store)  # the audited engine (audit.json), one per run folder
    for name in names:
        bar.set_postfix_str(name)
        # a suite's decoder given as an engine adapter's factory (verifier.engines.vllm_engine:decoder) is that engine
        engine = audited or next((decoder_engine(p) for p in plans if p.decoder.name == name), None)
        alpha = ranking_alpha(engine)  # alpha / 2 each when the engine's laws are ranked too (verifier.diagnose.engine_laws)
        biased = verdicts.get(name) == DIAGNOSED_VERDICT
        stop = stop_finding(name, report.get("cells", []))  # the stop-rule cell rejected (issue 29, kind 5)
        finding = independence_finding(name, report.get("cells", []))  # collision / serial cells rejected
        lp = logprob_finding(name, report.get("cells", []))  # the logprob cell rejected (issue 29, kind 4)
        batch = batch_finding(name, report.get("cells", []))  # rejecting at some batch_composition levels only
        # every token up to the stop is right / each row alone is right: no per-row law to rank (stop rule first)
        whole = next(((f, status, key) for f, status, key in ((stop, STOP_STATUS, "stop_rule"),
                                                              (finding, INDEPENDENCE_STATUS, "independence"),
                                                              (lp, LOGPROB_STATUS, "logprob"))
                      if f is not None and f["marginal_clean"]), None)
        if whole is None and biased:  # a state-space target: the per-row mechanisms do not apply (issue 29, kind 8)
            from verifier.diagnose.recurrent import RECURRENT_STATUS, recurrent_run_finding

            rec = recurrent_run_finding(name, plans, pairs, rows.tokens)
            whole = None if rec is None else (rec, RECURRENT_STATUS, "recurrent_state")
        if whole is not None:
            f, status, key = whole
            for _ in _counted((p for p in plans if p.decoder.name == name), bar):
                pass
            item = {"decoder": name, "verdict": verdicts.get(name), "sets": [], "status": status, "sentence": f["sentence"], key: f}
            out.append(_record_cuts(item, rows, plans))
            if log:
                log(f"diagnosis {name}: {item['sentence']}")
            continue
        # penalties / min-p on (issue 29, kind 3): their mechanisms have exact laws on tabular pairs only
        pen = penalty_finding(name, plans, pairs, rows.tokens) if biased else None
        if pen is not None and pen["named"]:
            for _ in _counted((p for p in plans if p.decoder.name == name), bar):
                pass
            item = {"decoder": name, "verdict": verdicts.get(name), "sets": [], "status": PENALTY_STATUS,
                    "sentence": pen["sentence"], "penalty": pen}
            out.append(_record_cuts(item, rows, plans))
            if log:
                log(f"diagnosis {name}: {item['sentence']}")
            continue
        sets, rankings, cache, too_large, unknown_draft, no_draft_rows, target_only = [], [], {}, None, [], {}, {}
        for plan in _counted((p for p in plans if p.decoder.name == name), bar):
            entry = {"set_id": plan.set_id, "set": plan.label, "sampling": plan.sampling_name,
                     "sampling_label": plan.sampling.label(), "biased": _set_biased(report, plan.set_id)}
            if plan.sampling.greedy:
                entry["note"] = "temperature 0: the greedy contract (exact match) decides; nothing to diagnose"
                sets.append(entry)
                continue
            tokens, origins, calls = rows.load(plan)
            if plan.set_id in rows.cut:
                entry["rows_diagnosed"], entry["rows"] = rows.cut[plan.set_id]
            if pairs[plan.pair].draft_reference is None and len(tokens):  # draft unknown: localize with the target only
                from verifier.diagnose.no_draft import diagnose_without_draft

                entry.update(diagnose_without_draft(pairs[plan.pair].reference, plan.prompt_ids, plan.sampling, tokens,
                                                    origins=origins, with_fits=bool(with_fits)))
                too_large = f"not diagnosed: {entry['note']}"
                no_draft_rows[plan.set_id] = tokens  # an engine law that needs no draft is still scored on them
                if entry["biased"]:
                    unknown_draft.append(f"{plan.sampling.label()}: {entry['localization']['sentence']}")
                    from verifier.diagnose.boundary import target_only_entry

                    # a support change at a filter threshold needs the target's probs only (numeric precision)
                    found = target_only_entry(pairs[plan.pair].reference, plan.prompt_ids, plan.sampling, tokens)
                    if found is not None:
                        target_only[plan.set_id] = found
                sets.append(entry)
                continue
            if not len(tokens):
                entry["note"] = "no samples on disk"
                sets.append(entry)
                continue
            pair = pairs[plan.pair]
            entries = len(np.unique(tokens, axis=0)) * tokens.shape[1] * pair.vocab_size
            budget = auto_diagnose_budget() if with_fits == "small" else None
            if budget is not None and entries > budget:
                entry["note"] = too_large = (
                    f"not diagnosed automatically: the teacher-forced probs of its distinct rows hold {entries:,} "
                    f"entries (rows x tokens x vocab) > {budget:,} (the budget for the memory available), about "
                    f"{entries * BYTES_PER_ENTRY / 2**30:.1f} GiB; run `specverify diagnose RUN_DIR` where that fits")
                sets.append(entry)
                continue
            fits = with_fits is True or (with_fits == "small" and entries <= AUTO_FIT_MAX_ENTRIES)
            res = diagnose_sample_set(pair.reference, pair.draft_reference, plan.prompt_ids, plan.sampling,
                                      plan.num_draft_tokens, tokens, bias_detected=entry["biased"], origins=origins,
                                      with_fits=fits, calls=calls)
            if not fits and entry["biased"]:
                res["fits_note"] = (f"parametric fits left to `specverify diagnose` ({entries} teacher-forced entries > "
                                    f"{AUTO_FIT_MAX_ENTRIES})")
            ranking, seqs_set = res.pop("_ranking"), res.pop("_seqs")
            setting_law_of_set(res, ranking, seqs_set, tokens, plan, alpha, pen)
            if (batch is None or plan.batch_rows is None  # a clean level has the target's law: not ranked
                    or plan.level_name in batch["rejected_levels"]):
                rankings.append(ranking)
                cache[plan.set_id] = (seqs_set, tokens, res["fit_window"])
            entry.update(res)
            sets.append(entry)
        item = {"decoder": name, "verdict": verdicts.get(name), "sets": sets}
        if rankings:
            total: Ranking = combine(rankings)
            pre = decide(total, bias_detected=biased, alpha=alpha)
            fit_p = None
            if pre["status"] == "consistent":  # the best mechanism's own fit, on each set it was computed for
                ps = []
                for plan in (p for p in plans if p.set_id in cache):
                    pair = pairs[plan.pair]
                    (seqs, inverse), tokens, window = cache[plan.set_id]
                    done = next((s["decision"] for s in sets if s["set_id"] == plan.set_id and "decision" in s), {})
                    if done.get("best") and done["best"][0] == pre["best"][0] and done.get("fit_pvalue") is not None:
                        p = done["fit_pvalue"]  # already checked for this set
                    else:
                        p, _, _ = fit_check(pre["best"][0], seqs, inverse, tokens, pair.reference, pair.draft_reference,
                                            plan.prompt_ids, plan.sampling, plan.num_draft_tokens, window,
                                            np.random.default_rng(0), contamination=pre.get("contamination") or 0.0)
                    if p is not None:
                        ps.append(p)
                fit_p = min(1.0, min(ps) * len(ps)) if ps else None  # Bonferroni over the sets
            item["decision"] = decide(total, bias_detected=biased, fit_pvalue=fit_p, alpha=alpha)
            item["status"], item["sentence"] = item["decision"]["status"], item["decision"]["sentence"]
            if item["status"] == "consistent":  # what the code did wrong, in plain words (verifier.diagnose.glossary)
                item["mechanism"] = mechanism_entries(item["decision"]["best"])
                source = _engine_source(engine, item["decision"]["best"])
                if source:  # the engine's own source predicts this law: the root cause in the engine's terms
                    item["engine_source"] = source
                    item["sentence"] += f"; {source}"
            item["ranking"] = total.to_dict()
            item["configs"] = _config_sentence(sets)
            setting_law_of_decoder(item, [p for p in plans if p.set_id in cache], cache, total, alpha, pen)
            add_engine_laws(item, engine, plans, pairs, cache, no_draft_rows, biased, store)
            if biased and item["status"] != "consistent":  # a support change at a filter threshold (numeric)
                try:
                    from verifier.diagnose.boundary import add_boundary_finding

                    add_boundary_finding(item, report.get("cells", []), engine, plans, pairs, cache)
                except Exception as exc:  # noqa: BLE001 - an optional finding must not cost the ranking above
                    item["boundary_error"] = f"{type(exc).__name__}: {exc}"
        else:
            item["status"], item["sentence"] = "not diagnosed", too_large or "no sample set to diagnose"
            if unknown_draft:
                item["sentence"] += "; where: " + " | ".join(unknown_draft)
            if biased and target_only:  # the draft is unknown: a setting the server ignores needs the target alone
                setting_law_without_draft(item, [p for p in plans if p.set_id in target_only], target_only, alpha)
            add_engine_laws(item, engine, plans, pairs, cache, no_draft_rows, biased, store)
            if biased and target_only and item["status"] != "consistent":  # the filter-boundary finding
                try:
                    from verifier.diagnose.boundary import add_boundary_finding

                    add_boundary_finding(item, report.get("cells", []), engine, plans, pairs, target_only)
                except Exception as exc:  # noqa: BLE001 - an optional finding must not cost the localization above
                    item["boundary_error"] = f"{type(exc).__name__}: {exc}"
        # rows also not independent / also past their stop: certain findings, so they lead (the stop rule first)
        if pen is not None:  # penalties on, no penalty mechanism named: what was checked
            item["penalty"] = pen
        ctx = None  # a rejecting mixed-prompts level: which context the audited rows continue (issue 29, kind 1)
        if batch is not None and any(level.endswith("mixed prompts") for level in batch["rejected_levels"]):
            from verifier.diagnose.batchprompts import prompt_context_finding

            ctx = prompt_context_finding((p for p in plans if p.decoder.name == name), pairs, batch["rejected_levels"],
                                         rows.tokens)
            if ctx is not None:
                item["prompt_context"] = ctx
        named_ctx = ctx if ctx is not None and ctx["named"] else None
        if named_ctx is not None and item.get("status") == "consistent":
            # the rows continue another prompt: a per-row mechanism ranked at the own prompt does not apply, and naming
            # it would send the engineer to the wrong code (issue 26: never a wrong name) -- kept aside, not named
            item["ranked_at_own_prompt"] = {"status": item.pop("status"), "mechanism": item.pop("mechanism", None)}
            item["status"] = PROMPT_CONTEXT_STATUS
        for f, key in ((lp, "logprob"), (named_ctx, "prompt_context"), (batch, "batch_composition"),
                       (finding, "independence"), (stop, "stop_rule")):
            if f is not None:
                item[key] = f
                item["sentence"] = f"{f['sentence']}: {item['sentence']}"
        _record_cuts(item, rows, plans)
        if log:
            log(f"diagnosis {name}: {item['sentence']}")
        out.append(item)
    # no wall time here: report.json keeps volatile figures in `run` only (run.stage_seconds["diagnosis"])
    return json_safe({"alpha": DIAGNOSIS_ALPHA, "fit_alpha": FIT_ALPHA, "decoders": out})


def _record_cuts(item: dict, rows: RowBudget, plans) -> dict:
    """Where the row budget cut some of the decoder's sets (whatever path diagnosed it): ``row_budget``, ``rows_read``
    and the sentence saying how many rows were read (:mod:`verifier.diagnose.row_budget`); ``item`` returned."""
    cuts = rows.cut_of(p.set_id for p in plans if p.decoder.name == item["decoder"])
    if cuts:
        item["row_budget"] = rows.max_distinct
        item["rows_read"] = {s: {"rows_diagnosed": m, "rows": n} for s, (m, n) in cuts.items()}
        item["sentence"] += budget_sentence(cuts, rows.max_distinct)
    return item


PROMPT_CONTEXT_STATUS = "prompt context"  # the audited rows continue another row's prompt (verifier.diagnose.batchprompts)


def _engine_name(store) -> str | None:
    """The audited engine's name (an engine audit's audit.json), or None."""
    import json as _json

    from verifier._resume import AUDIT_PLAN_FILE

    path = getattr(store, "run_dir", None)
    try:
        plan = _json.loads((path / AUDIT_PLAN_FILE).read_text()) if path is not None and (path / AUDIT_PLAN_FILE).is_file() else {}
    except (OSError, ValueError, RecursionError):
        return None
    engine = plan.get("engine") if isinstance(plan, dict) else None
    name = engine.get("name") if isinstance(engine, dict) else None
    return name if isinstance(name, str) else None


def _engine_source(engine: str | None, best: list[str]) -> str | None:
    """The engine's source-level explanation of the named hypothesis, when exactly one is named."""
    from verifier.engines.reproductions import source_explanation

    return source_explanation(engine, best[0]) if len(best) == 1 else None


def _counted(items, bar):
    """Yield ``items``, advancing ``bar`` once each item's loop body has finished (``continue`` included)."""
    for item in items:
        yield item
        bar.update(1)


def _config_sentence(sets: list[dict]) -> str:
    """Where the bias appears across sampling configs, by their settings (a suite's table names, or the
    audit's internal "s", mean nothing to a reader): "the bias appears only under T=0.7, top-k=2"."""
    def label(s: dict) -> str:
        return s.get("sampling_label") or s["sampling"]

    biased = sorted({label(s) for s in sets if s.get("biased")})
    clean = sorted({label(s) for s in sets if not s.get("biased")} - set(biased))
    if not biased:
        return "no sample set has a rejected cell on its own"
    if clean:
        return f"the bias appears only under sampling config {'; '.join(biased)} (not under {'; '.join(clean)})"
    return f"the bias appears under every sampling config ({'; '.join(biased)})"


def auto_diagnosis(report: dict, plans: list, pairs: dict, store, stage: dict, log: Callable[[str], None]) -> None:
    """The runner's hook: add ``report["diagnosis"]`` when a decoder has BIAS DETECTED (else nothing).

    A failure of the diagnosis never changes the verdict or the exit code: it is recorded as
    ``report["diagnosis"] = {"error": ...}`` and logged.
    """
    if not any(d.get("verdict") == DIAGNOSED_VERDICT for d in report.get("decoders", [])):
        return
    if mode() == "off":
        report["diagnosis"] = skipped_diagnosis(store.run_dir)
        log(f"diagnosis skipped (--diagnose off); later: {report['diagnosis']['command']}")
        return
    t0 = time.perf_counter()
    try:
        report["diagnosis"] = diagnose_decoders(report, plans, pairs, store, with_fits="small",
                                                max_distinct_rows=distinct_rows())
    except Exception as exc:  # the diagnosis explains a verdict; it must never turn one into a crash
        report["diagnosis"] = {"error": f"{type(exc).__name__}: {exc}", "decoders": []}
        log(f"diagnosis failed ({type(exc).__name__}: {exc}); verdicts are unaffected")
    stage["diagnosis"] = time.perf_counter() - t0


DIAGNOSIS_FILE = "diagnosis.json"  # written by `specverify diagnose` (default --out), with the inputs key it was computed for


def _well_formed(items: list) -> bool:
    """Every decoder entry has the shape the diagnosis writes (dict, sets a list of dicts, mechanism entries whole)."""
    for d in items:
        if not isinstance(d, dict) or not isinstance(d.get("sets", []), list) or not isinstance(d.get("sentence", ""), str):
            return False
        if not all(isinstance(s, dict) for s in d.get("sets", [])):
            return False
        if not all(isinstance(m, dict) and {"name", "plain", "reproduce"} <= set(m) for m in d.get("mechanism") or []):
            return False
    return True


def _budget_of(item: dict) -> int | str | None:
    """The row budget a stored decoder entry was diagnosed with: None (every row read), its distinct-row budget, or
    "unknown" where its fields do not say it consistently (an edited diagnosis.json: recomputed, never reused)."""
    sets = [s for s in item.get("sets") or [] if isinstance(s, dict)]
    if not (item.get("rows_read") or "row_budget" in item or any("rows_diagnosed" in s for s in sets)
            or CUT_MARK in str(item.get("sentence", ""))):
        return None
    budget = item.get("row_budget")
    if isinstance(budget, bool) or not isinstance(budget, int) or not isinstance(item.get("rows_read"), dict) \
            or not item["rows_read"]:
        return "unknown"
    return budget


def stored_diagnosis(run_dir, report: dict, wanted: list[str], max_distinct_rows: int | None = None) -> dict[str, Any] | None:
    """A diagnosis already computed for ``wanted`` on the same inputs, when it can be reused as is; else None.

    Looked for in report.json (the runner's automatic diagnosis), then in RUN_DIR/diagnosis.json (an earlier
    ``specverify diagnose``).  Reused only when the run's inputs -- samples, suite, models and the
    statistics/diagnosis code -- hash to the key stored with it (:func:`verifier.reports.cache.run_inputs_key`),
    it has an entry for every wanted decoder, and none of their sets was left to ``specverify diagnose``
    by the runner's budget (a set "not diagnosed automatically" or with parametric fits skipped), and it read as many
    rows as asked for: a diagnosis cut by a row budget (:mod:`verifier.diagnose.row_budget`) is reused only for
    the same ``max_distinct_rows``, never when every row is asked for.
    """
    import json
    from pathlib import Path

    from verifier.runner.inputs_key import KEY_FIELD, run_inputs_key

    run = report.get("run") if isinstance(report.get("run"), dict) else {}
    candidates = [("report.json", report.get("diagnosis") or {}, run.get(KEY_FIELD))]
    try:
        earlier = json.loads((Path(run_dir) / DIAGNOSIS_FILE).read_text(encoding="utf-8"))
        if isinstance(earlier, dict):
            candidates.append((DIAGNOSIS_FILE, earlier, earlier.get(KEY_FIELD)))
    except (OSError, ValueError):
        pass
    now = None
    for source, diag, stored_key in candidates:
        if not isinstance(diag, dict) or not stored_key or diag.get("error") or diag.get("skipped") \
                or not isinstance(diag.get("decoders"), list) or not _well_formed(diag["decoders"]):
            continue  # an edited or damaged diagnosis is recomputed, never reused
        items = {d.get("decoder"): d for d in diag["decoders"] if isinstance(d, dict)}
        if any(name not in items for name in wanted) or any(
                s.get("fits_note") or str(s.get("note", "")).startswith("not diagnosed automatically")
                for name in wanted for s in items[name].get("sets") or []) or any(
                _budget_of(items[name]) not in (None, max_distinct_rows) for name in wanted):
            continue
        now = now or (run_inputs_key(run_dir, False), run_inputs_key(run_dir, True))
        if stored_key not in now:
            continue
        out = {k: v for k, v in diag.items() if k not in ("decoders", "reused")}
        out["decoders"] = [items[name] for name in wanted]
        out["reused"] = f"{source} (samples, suite, models and code unchanged since it was written)"
        return out
    return None


def diagnose_run_dir(run_dir, *, decoders: list[str] | None = None, with_fits: bool = True,
                     log: Callable[[str], None] | None = None, recompute: bool = False,
                     max_distinct_rows: int | None = None) -> dict[str, Any]:
    """Diagnose a run folder from its stored samples and its report.json (``specverify diagnose``).

    Parameters
    ----------
    run_dir : path
        Written by ``specverify run`` (run.json, samples/, report.json).
    decoders : list of str, optional
        Diagnose these decoders whatever their verdict (default: every decoder with BIAS DETECTED).
    recompute : bool, default False
        Recompute even when report.json or diagnosis.json holds a reusable diagnosis (:func:`stored_diagnosis`).
    max_distinct_rows : int or None, default None
        Read the first rows of each sample set up to this many distinct rows (``specverify diagnose --rows``;
        :mod:`verifier.diagnose.row_budget`); None reads every row.

    Raises
    ------
    ConfigError
        Not a run folder, no report.json (run ``specverify report RUN_DIR`` first), or an unknown decoder name.
    """
    import json
    from pathlib import Path

    from verifier.errors import ConfigError
    from verifier.runner.context import entry_prompt_ids
    from verifier.runner.models import load_pair
    from verifier.suite.batch import filler_prompt_names
    from verifier.runner.plan import plan_sample_sets
    from verifier.runner.run import load_run_suite
    from verifier.runner.store import SampleStore

    suite, _ = load_run_suite(run_dir)
    path = Path(run_dir) / "report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"RUN_DIR={str(run_dir)!r} has no report.json; allowed: a run folder with its report "
                          f"(write it with `specverify report {run_dir}`)") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: unreadable report ({exc}); rewrite it with `specverify report {run_dir}`") from None
    if not isinstance(report, dict) or not isinstance(report.get("decoders", []), list) or not all(
            isinstance(d, dict) and "decoder" in d for d in report.get("decoders", [])):
        raise ConfigError(f"{path}: not a report written by specverify (a JSON object with a list of decoders); "
                          f"rewrite it with `specverify report {run_dir}`")
    known = [d.name for d in suite.decoders]
    for name in decoders or []:
        if name not in known:
            raise ConfigError(f"--decoder={name!r} is not a decoder of this run; allowed: {', '.join(known)}")
    wanted = set(decoders) if decoders else {d["decoder"] for d in report.get("decoders", []) if d.get("verdict") == DIAGNOSED_VERDICT}
    if not recompute:  # the run already diagnosed these samples (issue 28: 168 s recomputed what report.json held)
        order = [d["decoder"] for d in report.get("decoders", []) if d["decoder"] in wanted]
        reused = stored_diagnosis(run_dir, report, list(decoders) if decoders else order, max_distinct_rows)
        if reused is not None:
            return reused
    used = sorted({d.models for d in suite.decoders if d.name in wanted})
    pairs = {name: load_pair(suite.models[name], suite.base_dir) for name in used}
    # prompt ids of the pairs not loaded are placeholders, of distinct lengths (a mixed-prompts level of theirs is never
    # left without a filler of another length): their decoders' plans are dropped below
    placeholders = {pr: (0,) * (i + 1) for i, pr in enumerate(suite.prompts)}
    ids = {(d.models, pr): placeholders[pr] for d in suite.decoders if d.models not in pairs
           for pr in dict.fromkeys([*d.prompts, *filler_prompt_names(d.batch_mixed_prompts, list(suite.prompts))])}
    ids.update(entry_prompt_ids(suite, pairs))  # the run's own ids: the same fillers, the same sample sets
    plans = [p for p in plan_sample_sets(suite, ids, {n: pair.vocab_size for n, pair in pairs.items()})
             if p.decoder.name in wanted] if ids else []
    from verifier.runner.inputs_key import KEY_FIELD, run_inputs_key

    result = diagnose_decoders(report, plans, pairs, SampleStore(run_dir), decoders=decoders, with_fits=with_fits, log=log,
                               max_distinct_rows=max_distinct_rows)
    result[KEY_FIELD] = run_inputs_key(run_dir, False)  # lets the next `specverify diagnose` reuse diagnosis.json
    return result
