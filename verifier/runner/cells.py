"""Stage 4 of a run, per sample set: the expected laws and the cells (bias cells, acceptance audit).

* :func:`position_plan` -- which gof positions and which joint window J a sample set tests;
* :func:`expected_laws` / :func:`accepted_law` -- the expected laws (:mod:`verifier.runner.expected`),
  cached in the context and enumerated before sampling by :func:`expected_preflight`;
* :func:`set_cells` -- the bias cells of one sample set (``gof@t``, ``joint@1..J``,
  ``surprisal@1..J``, ``pit``, ``collision@1..J``, ``serial@1``, ``stop-rule`` and ``stop-position@1..L``
  (:mod:`verifier.runner.stop`); ``greedy`` at temperature 0) and :func:`count_cells` their number,
  which never depends on the decoder's ``last_stats``;
* :func:`acceptance_cells` -- the acceptance audit and, where declared, the conformance cell;
* :func:`tv_cells` -- the TV cells as (plan, label, law, tokens -> category ids), for monitors such
  as the sequential audit (:mod:`verifier.audit.sequential`).
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from verifier._beside import Beside
from verifier.errors import ConfigError
from verifier.runner import acceptance, analysis, expected, greedy, logprob, pitscore, stop
from verifier.runner.context import SuiteContext
from verifier.runner.models import LoadedPair
from verifier.runner.plan import SampleSetPlan
from verifier.runner.seeds import stream_seed
from verifier.runner.verdict import cell_level

__all__ = ["position_plan", "expected_laws", "accepted_law", "stop_law", "expected_preflight", "set_cells",
           "acceptance_cells", "token_labeler", "count_cells", "cell_tests", "check_cell_weights", "tv_cells"]


def position_plan(plan: SampleSetPlan) -> tuple[list[int], int]:
    """(gof positions, J) of a sample set: J is the window of the joint law (0: none), the first
    ``min(joint_tokens, max_new_tokens)`` tokens; the joint cell needs ``J == joint_tokens``, the
    surprisal cell takes any J >= 1."""
    spec = plan.decoder
    positions = [t for t in spec.gof_positions if t <= plan.max_new_tokens] if "gof" in spec.tests else []
    window = min(spec.joint_tokens, plan.max_new_tokens)
    jt = window if ("joint" in spec.tests and window == spec.joint_tokens) or {"surprisal", "collision"} & set(spec.tests) else 0
    return positions, jt


def expected_laws(ctx: SuiteContext, plan: SampleSetPlan) -> expected.PositionLaws | None:
    positions, jt = position_plan(plan)
    if not (positions or jt or "serial" in plan.decoder.tests):  # serial@1: the first token's law (marginals[1])
        return None
    key = (plan.pair, plan.prompt_ids, plan.sampling, max(positions or [1]), jt)
    if key not in ctx.expected_cache:
        ctx.expected_cache[key] = expected.shared_position_laws(ctx.pairs[plan.pair].reference, plan.prompt_ids,
                                                                plan.sampling, max(positions or [1]), jt)
    return ctx.expected_cache[key]


def accepted_law(ctx: SuiteContext, plan: SampleSetPlan) -> np.ndarray | None:
    """The canonical rule's first-round accepted-count law (for the acceptance audit and, where
    declared, acceptance rule conformance); None when not requested or -- unless the decoder
    declares ``acceptance = "canonical"`` -- too large to enumerate (the audit then says so)."""
    k = plan.num_draft_tokens
    if "accepted" not in plan.decoder.tests or plan.max_new_tokens < k + 1 or not ctx.pairs[plan.pair].draft_known:
        return None
    key = ("accepted", plan.pair, plan.prompt_ids, plan.sampling, k)
    if key not in ctx.expected_cache:
        pair = ctx.pairs[plan.pair]
        try:
            ctx.expected_cache[key] = expected.accepted_count_law(pair.reference, pair.draft_reference,
                                                                  plan.prompt_ids, plan.sampling, k)
        except ConfigError:
            if plan.decoder.acceptance == "canonical":
                raise
            ctx.expected_cache[key] = None
    return ctx.expected_cache[key]


def stop_limit(plan: SampleSetPlan) -> int:
    """The request's length limit of a sample set: ``max_tokens``, else ``max_new_tokens``."""
    return plan.decoder.max_tokens or plan.max_new_tokens


def stop_law(ctx: SuiteContext, plan: SampleSetPlan) -> stop.StopLaw | None:
    """The law of the stopping position (:func:`verifier.runner.stop.stop_position_law`); None without a ``stop`` test."""
    if "stop" not in plan.decoder.tests or plan.sampling.greedy:
        return None
    pair = ctx.pairs[plan.pair]
    ends = stop.stop_ends(plan.decoder.stop_token_ids, pair.eos_token_id)
    key = ("stop", plan.pair, plan.prompt_ids, plan.sampling, tuple(ends.tolist()), stop_limit(plan))
    if key not in ctx.expected_cache:
        ctx.expected_cache[key] = stop.stop_position_law(pair.reference, plan.prompt_ids, plan.sampling, ends,
                                                         stop_limit(plan))
    return ctx.expected_cache[key]


def check_cell_weights(ctx: SuiteContext) -> None:
    """``[stats] cell_weights`` names cells of this suite: a label no sample set has (a typo, another J) would leave
    every weight at 1 silently, so it is a ConfigError (exit 2) before any sample, naming the labels there are."""
    labels = {t for plan in ctx.plans for t in cell_tests(plan)}
    unknown = sorted(set(dict(ctx.suite.stats.cell_weights)) - labels)
    if unknown:
        raise ConfigError(f"{ctx.suite.source}: stats.cell_weights.{unknown[0]} names no cell of this suite; "
                          f"allowed: the cells' test labels {sorted(labels)}")


def expected_preflight(ctx: SuiteContext) -> None:
    """Enumerate every expected law before sampling: a law too large to enumerate is a
    ConfigError (exit 2) before any sample is drawn, not after."""
    for plan in ctx.plans:
        try:
            expected_laws(ctx, plan)
            accepted_law(ctx, plan)
            stop_law(ctx, plan)
        except ConfigError as exc:
            raise ConfigError(f"decoders[{plan.decoder.name}] ({plan.label}): {exc}") from None


def set_cells(ctx: SuiteContext, plan: SampleSetPlan, tokens: np.ndarray,
               cell_alpha_of: Callable[[str], float], reported: tuple | None = None) -> list[analysis.CellResult]:
    """The bias cells of one sample set; ``cell_alpha_of(test)`` = the level of the cell whose test label is ``test``
    (:func:`cell_tests`); ``reported`` = (logprobs, origins) of its rows for the ``logprob`` cell.  At
    a ``batch_composition`` level each cell's id ends with the level (``.../gof@1[batch=4]``, ``[batch=4,mixed
    T=0.5]``, ``[batch=4,mixed prompts]``: :func:`verifier.suite.batch.level_tag`) and its ``extra["batch_rows"]``
    (and ``extra["filler_temperature"]`` / ``extra["filler_prompts"]``, the filler prompts' names) hold it."""
    cells = _set_cells(ctx, plan, tokens, cell_alpha_of, reported)
    if plan.batch_rows is not None:
        from verifier.suite.batch import level_tag

        for cell in cells:
            cell.id += level_tag(plan.batch_rows, plan.filler_temperature, bool(plan.filler_prompts))
            cell.extra["batch_rows"] = plan.batch_rows
            if plan.filler_temperature is not None:
                cell.extra["filler_temperature"] = plan.filler_temperature
            if plan.filler_prompts:
                cell.extra["filler_prompts"] = list(plan.filler_prompt_names)
    return cells


def _set_cells(ctx: SuiteContext, plan: SampleSetPlan, tokens: np.ndarray,
               cell_alpha_of: Callable[[str], float], reported: tuple | None = None) -> list[analysis.CellResult]:
    suite, spec = ctx.suite, plan.decoder
    pair = ctx.pairs[plan.pair]
    vocab = pair.vocab_size
    base = plan.cell_base
    meta = {"decoder": spec.name, "set_id": plan.set_id}
    rng = np.random.default_rng(stream_seed(suite.seed, "analysis|" + plan.key))
    power = suite.stats.power
    alpha = cell_alpha_of  # the cell's level by its test label (a planned allocation: verifier.stats.allocation)
    tok_label = token_labeler(pair, vocab)
    if plan.sampling.greedy:  # T = 0: the greedy contract replaces the distribution tests (verifier.runner.greedy)
        expected_row = greedy.greedy_output(pair.reference, plan.prompt_ids, plan.sampling, plan.max_new_tokens)
        return [greedy.greedy_cell(f"{base}/greedy", tokens, expected_row, power=power, cell_alpha=alpha("greedy"),
                                   label_fn=tok_label, **meta)]
    cells = []
    pit = _pit_started(suite, plan, pair, tokens, alpha("pit"), power, meta) if "pit" in spec.tests else None
    positions, jt = position_plan(plan)
    tv_cell = analysis.gof_cell  # the TV cells' test: Pearson, or the opt-in weighted identity test (issue 27)
    if getattr(suite.stats, "tv_test", "pearson") in ("weighted", "mixture"):
        import functools

        from verifier.runner.identity_cell import identity_cell

        tv_cell = functools.partial(identity_cell, tv_test=suite.stats.tv_test)
    if positions or jt:
        laws = expected_laws(ctx, plan)
        note = laws.note()

        def label(c: int) -> str:
            return "<other prefix>" if c == vocab + 1 else tok_label(c)

        def noted(cell, pooled: bool):
            if pooled and note:
                cell.method += f"; {note}"
            return cell

        for t in positions:
            law = laws.marginals[t]
            counts = np.bincount(laws.marginal_codes(tokens, t), minlength=len(law)).astype(np.int64)
            cells.append(noted(tv_cell(f"{base}/gof@{t}", counts, law, cell_alpha=alpha(f"gof@{t}"), power=power, rng=rng,
                                                 label_fn=label, target_mde=suite.stats.target_mde, test=f"gof@{t}",
                                                 **meta), laws.pooled(t)))

        def tuple_label(c: int) -> str:
            return laws.joint_label(c, tok_label)

        pooled_joint = laws.joint_keys is not None
        if jt == spec.joint_tokens and "joint" in spec.tests:
            cells.append(noted(tv_cell(f"{base}/joint@1..{jt}", laws.joint_counts(tokens), laws.joint,
                                                 cell_alpha=alpha(f"joint@1..{jt}"), power=power, rng=rng, label_fn=tuple_label,
                                                 target_mde=suite.stats.target_mde, test=f"joint@1..{jt}", **meta),
                               pooled_joint))
        if jt and "surprisal" in spec.tests:
            cells.append(noted(analysis.surprisal_cell(f"{base}/surprisal@1..{jt}", laws.joint_counts(tokens),
                                                       laws.joint, cell_alpha=alpha(f"surprisal@1..{jt}"), power=power, label_fn=tuple_label,
                                                       test=f"surprisal@1..{jt}", **meta), pooled_joint))
        if jt and "collision" in spec.tests:
            codes = laws.joint_codes(tokens)
            probs = np.append(laws.joint, 0.0)[codes]  # the pooled "other" category: its mass (>= the row's own)
            # exact; pooled: the pooled law's, "other" as one outcome -- an upper bound of the exact one
            collision_prob = float(np.dot(laws.joint, laws.joint))
            cells.append(noted(analysis.collision_cell(f"{base}/collision@1..{jt}", tokens[:, :jt], probs, collision_prob,
                                                       cell_alpha=alpha(f"collision@1..{jt}"), power=power, pooled=pooled_joint,
                                                       test=f"collision@1..{jt}", **meta), pooled_joint))
    if "serial" in spec.tests:  # rows in request order: chunk after chunk, each as the decoder returned it
        srng = np.random.default_rng(stream_seed(suite.seed, "serial|" + plan.key))  # independent of the decoder
        cells.append(analysis.serial_cell(f"{base}/serial@1", tokens[:, 0], expected_laws(ctx, plan).marginals[1], rng=srng,
                                          cell_alpha=alpha("serial@1"), power=power, label_fn=tok_label, test="serial@1", **meta))
    if "stop" in spec.tests:  # the request's stop rule (issue 29, bug kind 5)
        ends = stop.stop_ends(spec.stop_token_ids, pair.eos_token_id)
        limit = stop_limit(plan)
        cells.append(stop.stop_rule_cell(f"{base}/stop-rule", tokens, ends, limit, power=power, cell_alpha=alpha("stop-rule"),
                                         test="stop-rule", **meta))
        srng = np.random.default_rng(stream_seed(suite.seed, "stop|" + plan.key))  # independent of the decoder
        cells.append(stop.stop_position_cell(f"{base}/stop-position@1..{limit}", tokens, stop_law(ctx, plan), ends,
                                             cell_alpha=alpha(f"stop-position@1..{limit}"), power=power, rng=srng, target_mde=suite.stats.target_mde,
                                             test=f"stop-position@1..{limit}", **meta))
    if "logprob" in spec.tests:  # the logprobs the decoder reports (issue 29, bug kind 4)
        cells.append(_logprob_cell(pair, plan, tokens, reported, power=power, cell_alpha=alpha("logprob"), cell_id=f"{base}/logprob",
                                   **meta))
    if pit is not None:
        cells.append(pit.result())
    return cells  # the accepted-draft count is no bias cell: see acceptance_cells (verifier.runner.acceptance)


def _pit_cell(suite, plan: SampleSetPlan, pair: LoadedPair, tokens: np.ndarray, cell_alpha: float, power: float,
              meta: dict) -> analysis.CellResult:
    """The randomized-PIT cell of one sample set (its own generator: the values do not depend on the other cells)."""
    u_parts, violations = [], []
    vrng = np.random.default_rng(stream_seed(suite.seed, "pit|" + plan.key))  # independent of the decoder
    if pitscore.fast_pit_applies(pair.reference, plan.sampling):  # float32 logits, no [rows, T, V] float64
        u_parts, violations = pitscore.pit_values(pair.reference, plan.prompt_ids, tokens, plan.sampling, vrng)
    else:
        for rows, probs in pair.reference.teacher_forced(plan.prompt_ids, tokens, plan.sampling):
            tk = tokens[rows]
            live = tk != -1
            u, bad = analysis.randomized_pit(tk[live], probs[live], vrng)
            u_parts.append(u)
            violations.extend(bad)
    u_all = np.concatenate(u_parts) if u_parts else np.zeros(0)
    return analysis.pit_cell(f"{plan.cell_base}/pit", u_all, cell_alpha=cell_alpha, power=power,
                             violations=tuple(violations), **meta)


class _Now:
    """A computed value behind the ``result()`` of a future (the PIT cell computed in the caller's thread)."""

    def __init__(self, value) -> None:
        self._value = value

    def result(self):
        return self._value


def _pit_started(suite, plan: SampleSetPlan, pair: LoadedPair, tokens: np.ndarray, cell_alpha: float, power: float,
                 meta: dict):
    """The PIT cell, started beside the set's other cells where its forward passes run through torch (they release the
    GIL: on the 2-core box the statistics stage of a 5,000-row engine audit takes ~0.4 s less); ``.result()`` gives it.
    Same function, same inputs, its own generator: the cell is the one computed alone, value for value."""
    if not pitscore.fast_pit_applies(pair.reference, plan.sampling) or len(tokens) < PIT_THREAD_MIN_ROWS:
        return _Now(_pit_cell(suite, plan, pair, tokens, cell_alpha, power, meta))
    return Beside(_pit_cell, suite, plan, pair, tokens, cell_alpha, power, dict(meta), name="pit-cell")


PIT_THREAD_MIN_ROWS = 1000  # below this the PIT cell is a few ms: computed in place, no thread


def cell_levels(suite, plans: list[SampleSetPlan]) -> Callable[[str], float]:
    """A decoder's cell level by test label: its strictest (weighted) Holm step over the cells of ``plans`` (every
    sample set of that decoder)."""
    tests = [t for p in plans for t in cell_tests(p)]
    weighted = bool(suite.stats.cell_weights) and suite.stats.correction == "gate"
    total = sum(suite.stats.weight_of(t) for t in tests) if weighted else None

    def level(test: str, m=len(tests), total=total) -> float:
        weight = suite.stats.weight_of(test) if total is not None else 1.0
        return cell_level(suite.stats.alpha, m, suite.stats.correction, weight, total)
    return level


def warm_statistics(ctx: SuiteContext, plans: list[SampleSetPlan]) -> threading.Thread:
    """Start a thread that computes the sample-independent part of one decoder's sets' TV cells (``plans``: every set of
    that decoder; :func:`warm_tv_cells`) while an engine worker samples them: the runner's thread only waits for the
    worker's replies then, and the statistics stage after the last chunk finds those values memoised.  An error
    there is dropped: the cells compute the same values again and raise it with their context."""
    level = cell_levels(ctx.suite, plans)

    def run() -> None:
        for plan in plans:
            try:
                warm_tv_cells(ctx, plan, level)
            except Exception:  # noqa: BLE001 - a memo warmed or not; never a result
                return
    thread = threading.Thread(target=run, daemon=True, name="warm-statistics")
    thread.start()
    return thread


def warm_tv_cells(ctx: SuiteContext, plan: SampleSetPlan, cell_alpha_of: Callable[[str], float]) -> None:
    """Compute now what a set's Pearson TV cells will ask at its planned n, into the memos they read: the MDE at n
    (:func:`verifier.stats.gof.gof_mde`) and, where it is above the target TV, the n it needs
    (:func:`verifier.runner.analysis.n_needed_for`), with the arguments :func:`analysis.gof_cell` passes.  Called
    while an engine worker samples (:func:`warm_statistics`); nothing here is a result: the cells
    are computed as before and only find their values memoised (a set that ends with another n misses the memo)."""
    from verifier.stats.gof import gof_mde

    suite, spec = ctx.suite, plan.decoder
    if plan.sampling.greedy or getattr(suite.stats, "tv_test", "pearson") != "pearson":
        return
    positions, jt = position_plan(plan)
    laws = expected_laws(ctx, plan) if positions or jt else None
    if laws is None:
        return
    tv = [(f"gof@{t}", laws.marginals[t]) for t in positions]
    if jt == spec.joint_tokens and "joint" in spec.tests:
        tv.append((f"joint@1..{jt}", laws.joint))
    n, power, target = int(plan.samples), suite.stats.power, suite.stats.target_mde
    for test, law in tv:
        _, law = analysis._count_cell_inputs(np.zeros(len(law), np.int64), law)
        mde = gof_mde(n, law, alpha=cell_alpha_of(test), power=power).tv
        if target is not None and mde > target:
            analysis.n_needed_for(law, n, cell_alpha=cell_alpha_of(test), power=power, target_mde=target)


def draft_unknown(ctx: SuiteContext, plan: SampleSetPlan, identity: dict | None) -> str:
    """Why the draft of a sample set is unknown ("" when known): see :mod:`verifier.runner.draft`."""
    if not ctx.pairs[plan.pair].draft_known:
        return f"models.{plan.pair}.draft = \"unknown\""
    if identity is not None and identity.get("draft_known") is False:
        return f"decoder {plan.decoder.name!r} declares draft_known = False: it loads its own draft"
    return ""


def acceptance_cells(ctx: SuiteContext, plan: SampleSetPlan, fra: np.ndarray | None, acc: np.ndarray, unknown: str = ""):
    """(acceptance audit dict, conformance cell or None, why untested) of one sample set.

    ``unknown``: why the draft is unknown (then no canonical figure and no conformance cell, stated).
    """
    from verifier.runner.draft import skipped

    spec, k = plan.decoder, plan.num_draft_tokens
    if "accepted" not in spec.tests:
        return None, None, "the suite does not ask for the `accepted` test"
    law = None if unknown else accepted_law(ctx, plan)
    audit = acceptance.acceptance_audit(plan.set_id, plan.label, spec.name, k, fra, acc, law,
                                        canonical_skipped=skipped("canonical_acceptance", unknown) if unknown else "")
    if spec.acceptance != "canonical":
        return audit.to_dict(), None, ""
    if unknown:
        return audit.to_dict(), None, skipped("acceptance_conformance", unknown)
    if law is None or fra is None:
        why = "max_new_tokens < k + 1" if plan.max_new_tokens < k + 1 else "the decoder reports no first_round_accepted"
        return audit.to_dict(), None, why
    rng = np.random.default_rng(stream_seed(ctx.suite.seed, "conformance|" + plan.key))
    counts = np.bincount(np.clip(fra[fra != acceptance.NO_ROUND], 0, k), minlength=k + 1)
    cell = analysis.gof_cell(f"{plan.cell_base}/acceptance-conformance", counts, law,
                             cell_alpha=ctx.suite.stats.alpha, power=ctx.suite.stats.power, rng=rng,
                             label_fn=lambda j: f"{j} accepted", test="acceptance conformance",
                             decoder=spec.name, set_id=plan.set_id)
    return audit.to_dict(), cell, ""


def token_labeler(pair: LoadedPair, vocab: int) -> Callable[[int], str]:
    tok = pair.tokenizer

    def label(c: int) -> str:
        if c == vocab:
            return "<ended>"
        if tok is not None:
            try:
                return repr(tok.decode([c]))
            except Exception:  # a tokenizer without that id: fall back to the number
                pass
        return str(c)

    return label


def count_cells(plan: SampleSetPlan) -> int:
    """Bias cells of a sample set (never depends on whether the decoder reports last_stats)."""
    return len(cell_tests(plan))


def cell_tests(plan: SampleSetPlan) -> list[str]:
    """The ``test`` labels of a sample set's bias cells (``gof@1``, ``joint@1..2``, ``pit``, ...): what
    ``[stats] cell_weights`` keys a cell's Holm weight by (:func:`verifier.runner.verdict.cell_level`)."""
    spec = plan.decoder
    if plan.sampling.greedy:
        return ["greedy"]
    positions, jt = position_plan(plan)
    out = [f"gof@{t}" for t in positions]
    out += [f"joint@1..{spec.joint_tokens}"] * int("joint" in spec.tests and plan.max_new_tokens >= spec.joint_tokens)
    out += [f"surprisal@1..{jt}"] * int("surprisal" in spec.tests) + ["pit"] * int("pit" in spec.tests)
    out += [f"collision@1..{jt}"] * int("collision" in spec.tests and plan.max_new_tokens >= 1)
    out += ["serial@1"] * int("serial" in spec.tests)
    out += ["stop-rule", f"stop-position@1..{stop_limit(plan)}"] if "stop" in spec.tests else []
    return out + ["logprob"] * int("logprob" in spec.tests)


def _logprob_cell(pair: LoadedPair, plan: SampleSetPlan, tokens: np.ndarray, reported: tuple | None, *, power: float,
                  cell_alpha: float, cell_id: str, **meta) -> analysis.CellResult:
    """The ``logprob`` cell (:mod:`verifier.runner.logprob`): the stored reported logprobs against the reference's."""
    lps, origins = reported if reported is not None else (None, None)
    if lps is None or np.shape(lps) != tokens.shape:  # _valid_shard resamples such chunks: only a partial set lands here
        return analysis.CellResult(cell_id, test="logprob", method="reported logprobs: none stored for these rows",
                                   n=0, statistic=float("nan"), pvalue=float("nan"), effect_unit="tokens",
                                   cell_alpha=cell_alpha, **meta)
    ref = logprob.reference_logprobs(pair.reference, plan.prompt_ids, tokens, plan.sampling)
    draft = (logprob.reference_logprobs(pair.draft_reference, plan.prompt_ids, tokens, plan.sampling)
             if pair.draft_known else None)
    return logprob.logprob_cell(cell_id, tokens, lps, ref, logprob.logprob_tolerance(pair.target_model), power=power,
                                cell_alpha=cell_alpha, origins=origins, draft=draft, test="logprob", **meta)


def tv_cells(ctx: SuiteContext) -> list[tuple[SampleSetPlan, str, np.ndarray, Callable[[np.ndarray], np.ndarray]]]:
    """The TV cells of every sample set (``gof@t`` and, for J >= 2, ``joint@1..J``).

    Returns
    -------
    list of (plan, label, law, codes)
        ``label`` is ``"<prompt>/gof@t"`` or ``"<prompt>/joint@1..J"``; ``law`` the expected law over
        the cell's categories (float64, sums to 1 up to rounding); ``codes(tokens[rows, max_new_tokens])
        -> int64[rows]`` maps emitted rows to category ids of ``law`` (``vocab`` = row already ended).
    """
    out = []
    for p in ctx.plans:
        laws = expected_laws(ctx, p)
        if laws is None:
            continue
        positions, jt = position_plan(p)
        for t in positions:
            out.append((p, f"{p.prompt}/gof@{t}", laws.marginals[t], lambda tok, t=t, laws=laws: laws.marginal_codes(tok, t)))
        if laws.joint is not None and jt >= 2:
            out.append((p, f"{p.prompt}/joint@1..{jt}", laws.joint, laws.joint_codes))
    return out
