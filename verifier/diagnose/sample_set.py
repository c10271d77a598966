"""Diagnose one sample set: mechanism ranking, fit check, parametric fits and localization.

:func:`diagnose_sample_set` is what ``specverify diagnose`` and the automatic diagnosis after a BIAS
DETECTED run call for every sample set of a biased decoder (:mod:`verifier.diagnose.run_dir`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from verifier.diagnose import fit as fits
from verifier.diagnose.inputs import MAX_LAW_OUTCOMES, joint_codes, mechanism_law, sequence_probs
from verifier.diagnose.latent import GROUPED
from verifier.diagnose.likelihood import SequenceProbs, log_likelihood, target_per_position
from verifier.diagnose.rows import sequence_ends
from verifier.diagnose.localize import localize
from verifier.diagnose.family import hypothesis
from verifier.diagnose.mechanisms import MECHANISMS
from verifier.diagnose.rank import FIT_ALPHA, Ranking, decide, rank_mechanisms
from verifier.errors import InvalidArgumentError
from verifier.sampling import SamplingConfig

__all__ = ["diagnose_sample_set", "fit_window", "fit_check", "best_fit_pvalue", "MAX_FIT_TOKENS"]

MAX_FIT_TOKENS = 3  # J of the best mechanism's goodness of fit (first J emitted tokens)


def fit_window(vocab_size: int, max_new_tokens: int) -> int:
    """J: the most leading tokens (<= MAX_FIT_TOKENS) whose outcomes fit in MAX_LAW_OUTCOMES; 0 if none."""
    j = 0
    while j < min(MAX_FIT_TOKENS, max_new_tokens) and vocab_size ** (j + 1) <= MAX_LAW_OUTCOMES:
        j += 1
    return j


def best_fit_pvalue(name: str, target_ref, draft_ref, prompt, sampling, k: int, tokens: np.ndarray,
                    window: int, rng: np.random.Generator, contamination: float = 0.0) -> tuple[float | None, np.ndarray | None]:
    """Goodness-of-fit p-value of mechanism ``name``'s law of the first ``window`` tokens (and the law); with a
    fitted ``contamination`` share eps, of the mixture ``(1 - eps) law + eps target law`` it was ranked by."""
    from verifier.stats.gof import gof_pvalues

    if window < 1:
        return None, None
    law = mechanism_law(hypothesis(name), target_ref, draft_ref, prompt, sampling, k, window)
    if law is None:
        return None, None
    if contamination:
        law = (1.0 - contamination) * law + contamination * mechanism_law(
            MECHANISMS["canonical"], target_ref, draft_ref, prompt, sampling, k, window)
    vocab = target_ref.vocab_size
    counts = np.bincount(joint_codes(tokens[:, :window], vocab), minlength=(vocab + 1) ** window)
    law = np.clip(law, 0.0, None)
    if law.sum() <= 0 or (counts[law <= 0] > 0).any():  # an outcome the mechanism cannot emit: rejected outright
        return 0.0, law
    # pooled Pearson chi-square, asymptotic p-value (data-blind pooling, every expected count >= 10)
    return float(gof_pvalues(counts[None], law / law.sum(), pvalue_method="asymptotic", alpha=FIT_ALPHA)[0]), law


def fit_check(name: str, seqs: SequenceProbs, inverse: np.ndarray, tokens: np.ndarray, target_ref, draft_ref, prompt,
              sampling, k: int, window: int, rng: np.random.Generator,
              contamination: float = 0.0) -> tuple[float | None, np.ndarray | None, dict]:
    """Goodness of fit of mechanism ``name`` itself: its J-token law (chi-square) and its sequential
    predictive law at every emitted position (randomized PIT, Kolmogorov-Smirnov), Bonferroni over the two.

    ``seqs`` holds the distinct rows, ``inverse`` maps each observed row to its distinct row.  With a fitted
    ``contamination`` share eps (:mod:`verifier.diagnose.robust`) the law checked is the mixture the hypothesis was
    ranked by: ``(1 - eps) P_m + eps P_target`` (its predictive law mixes the two by their posterior weight given
    each row's prefix).  eps is fitted on the same rows (one grid parameter), so this check is slightly lenient.

    Returns
    -------
    (p-value or None, the J-token law or None, parts {"law": p, "pit": p})
    """
    from verifier.stats.pit import pit_ks_test, randomized_pit

    if name in GROUPED:
        return _call_fit_check(seqs, k, tokens, rng)
    p_law, law = best_fit_pvalue(name, target_ref, draft_ref, prompt, sampling, k, tokens, window, rng, contamination)
    p_pit = None
    mech = hypothesis(name)
    from verifier.diagnose.latent import feasible

    estimated = mech.latent and feasible(seqs, k, name) is not None  # Monte Carlo likelihood: no predictive law
    if not (mech.keep_suffix and k > 1) and not estimated:
        pred = np.full(seqs.p.shape, np.nan)
        _, cond = log_likelihood(mech, seqs, k, per_position=True, predictive=pred)
        if contamination:
            pred = _mixture_predictive(seqs, pred, cond, contamination)
        full = pred[inverse]
        live = np.arange(tokens.shape[1])[None] < sequence_ends(tokens, seqs.eos_token_id)[:, None]
        rows = np.clip(full[live], 0.0, None)
        sums = rows.sum(axis=1, keepdims=True)
        ok = sums[:, 0] > 0
        u, bad = randomized_pit(tokens[live][ok], rows[ok] / sums[ok], rng)
        if bad or (~ok).any():
            p_pit = 0.0  # a token the mechanism cannot emit
        else:
            try:
                p_pit = float(pit_ks_test(u, alpha=FIT_ALPHA).pvalue)
            except InvalidArgumentError:  # u's too tied for KS (near one-hot predictive laws): the law check decides
                p_pit = None
    parts = {"law": p_law, "pit": p_pit}
    if mech.keep_suffix and k > 1:  # no sequential predictive law (in-flight jumps): the law after common prefixes
        parts["prefix"] = prefix_fit_pvalue(name, tokens, target_ref, draft_ref, prompt, sampling, k)
    ps = [v for v in parts.values() if v is not None]
    return (min(1.0, min(ps) * len(ps)) if ps else None), law, parts


def _mixture_predictive(seqs: SequenceProbs, pred: np.ndarray, cond: np.ndarray, eps: float) -> np.ndarray:
    """Predictive law (rows, T, V) of ``(1 - eps) P_m + eps P_target`` given each row's prefix."""
    cond_t = target_per_position(seqs)
    rows = len(seqs.tokens)
    with np.errstate(invalid="ignore"):
        lm = np.concatenate([np.zeros((rows, 1)), np.cumsum(np.nan_to_num(cond, nan=-np.inf), axis=1)[:, :-1]], axis=1)
        lt = np.concatenate([np.zeros((rows, 1)), np.cumsum(cond_t, axis=1)[:, :-1]], axis=1)
        a, b = np.log1p(-eps) + lm, np.log(eps) + lt
        w = np.exp(a - np.logaddexp(a, b))  # posterior weight of the mechanism given x_<t
    w = np.where(np.isfinite(w), w, 0.0)[..., None]
    return w * np.nan_to_num(pred, nan=0.0) + (1.0 - w) * seqs.p


PREFIX_FIT_TOP, PREFIX_FIT_MIN_ROWS = 3, 100  # most common prefixes per position, rows a prefix needs


def prefix_fit_pvalue(name: str, tokens: np.ndarray, target_ref, draft_ref, prompt, sampling, k: int) -> float | None:
    """Goodness of fit of mechanism ``name``'s law of token t given the most common observed prefixes x_<t.

    For t = 2..T and each of the :data:`PREFIX_FIT_TOP` most common prefixes with at least
    :data:`PREFIX_FIT_MIN_ROWS` rows, the mechanism's conditional law ``P(x_<t, v) / P(x_<t)`` (prefix
    marginals: the rows cut after the prefix, later tokens summed out) against the observed x_t
    (chi-square, pooled to expected counts >= 10); Bonferroni over the tests.  Cost: V candidate rows
    per test (their teacher-forced probs, and the draft along them for a kept suffix).
    """
    from verifier.stats.gof import gof_pvalues

    mech = hypothesis(name)
    vocab = target_ref.vocab_size
    ends = sequence_ends(tokens, target_ref.eos_token_id)
    ps = []
    for t in range(1, tokens.shape[1]):
        rows = tokens[ends > t]
        if not len(rows):
            continue
        prefixes, counts = np.unique(rows[:, :t], axis=0, return_counts=True)
        for i in np.argsort(-counts)[:PREFIX_FIT_TOP]:
            if counts[i] < PREFIX_FIT_MIN_ROWS:
                break
            pre = prefixes[i]
            cand = np.full((vocab + 1, tokens.shape[1]), -1, dtype=np.int64)  # row 0: the prefix alone
            cand[:, :t] = pre
            cand[1:, t] = np.arange(vocab)
            sp = sequence_probs(target_ref, draft_ref, prompt, cand, sampling)
            ll = log_likelihood(mech, sp, k)
            with np.errstate(invalid="ignore", over="ignore"):
                law = np.exp(ll[1:] - ll[0]) if np.isfinite(ll[0]) else np.zeros(vocab)
            obs = np.bincount(rows[(rows[:, :t] == pre).all(axis=1), t], minlength=vocab)
            if law.sum() <= 0 or (obs[law <= 0] > 0).any():
                ps.append(0.0)
                continue
            ps.append(float(gof_pvalues(obs[None], law / law.sum(), pvalue_method="asymptotic", alpha=FIT_ALPHA)[0]))
    return min(1.0, min(ps) * len(ps)) if ps else None


def _call_fit_check(seqs: SequenceProbs, k: int, tokens: np.ndarray, rng: np.random.Generator) -> tuple[float | None, None, dict]:
    """Batch cross-talk's own fit: randomized PIT of the non-first rows' tokens under their call's most likely
    round structure (:func:`verifier.diagnose.latent.call_predictive`), Kolmogorov-Smirnov."""
    from verifier.diagnose.latent import call_predictive
    from verifier.stats.pit import pit_ks_test, randomized_pit

    rows, laws = call_predictive(seqs, k)
    obs = tokens[rows]
    live = np.arange(obs.shape[1])[None] < sequence_ends(obs, seqs.eos_token_id)[:, None]
    if not live.any():  # no row beside a call's first (calls of one row: batch_composition level 1): nothing to fit
        return None, None, {"law": None, "pit": None}
    u, bad = randomized_pit(obs[live], laws[live], rng)
    if bad:
        p = 0.0
    else:
        try:
            p = float(pit_ks_test(u, alpha=FIT_ALPHA).pvalue)
        except InvalidArgumentError:
            p = None
    return p, None, {"law": None, "pit": p}


def diagnose_sample_set(target_ref, draft_ref, prompt, sampling: SamplingConfig, num_draft_tokens: int,
                        tokens: np.ndarray, *, bias_detected: bool, origins: np.ndarray | None = None,
                        seed: int = 0, with_fits: bool = True, calls: np.ndarray | None = None) -> dict[str, Any]:
    """Ranking, decision, fits and localization of one sample set.

    Parameters
    ----------
    target_ref, draft_ref : verifier.runner.models.ReferenceModel
    prompt : sequence of int
    sampling : SamplingConfig
    num_draft_tokens : int
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
    bias_detected : bool
        The decoder's verdict was BIAS DETECTED.
    origins : np.ndarray or None, shape like ``tokens``, int8
        Origin code of each emitted token when the decoder reported it (:mod:`verifier.diagnose.localize`).
    seed : int, default 0
        Seeds the Monte Carlo p-value of the fit check.
    with_fits : bool, default True
        Also fit the effective temperature and compare sampling settings.
    calls : np.ndarray or None, shape (num_samples,), int
        The generate call (shard) of each row, rows in generate order: batch cross-talk's likelihood
        needs it (None: that mechanism is not computed).

    Returns
    -------
    dict
        ``ranking`` (scores), ``decision`` (status, sentence, ...), ``fits``, ``localization``, ``plot``
        (observed / target / best-mechanism law on the most telling position), ``_ranking`` (the
        :class:`~verifier.diagnose.rank.Ranking`) and ``_seqs`` ((distinct-row SequenceProbs, inverse)):
        not JSON, pop them before serialising.
    """
    from verifier.diagnose.rows import check_rows

    tokens = check_rows(tokens, target_ref.vocab_size)
    uniq, inverse, counts = np.unique(tokens, axis=0, return_inverse=True, return_counts=True)
    seqs: SequenceProbs = sequence_probs(target_ref, draft_ref, prompt, uniq, sampling)  # each distinct row once
    seqs.weights = counts.astype(np.float64)
    if calls is not None:
        seqs.calls = (np.asarray(calls).reshape(-1), np.asarray(inverse).reshape(-1))
    ranking: Ranking = rank_mechanisms(seqs, num_draft_tokens)
    pre = decide(ranking, bias_detected=bias_detected)
    window = fit_window(target_ref.vocab_size, tokens.shape[1])
    fit_p, law, parts = None, None, {}
    inverse = np.asarray(inverse).reshape(-1)
    if pre["best"] and pre["status"] == "consistent":
        fit_p, law, parts = fit_check(pre["best"][0], seqs, inverse, tokens, target_ref, draft_ref, prompt, sampling,
                                      num_draft_tokens, window, np.random.default_rng(seed),
                                      contamination=pre.get("contamination") or 0.0)
    decision = decide(ranking, bias_detected=bias_detected, fit_pvalue=fit_p)
    decision["fit_parts"] = parts
    out: dict[str, Any] = {"n": int(len(tokens)), "num_draft_tokens": num_draft_tokens, "ranking": ranking.to_dict(),
                           "decision": decision, "fit_window": window, "_ranking": ranking, "_seqs": (seqs, inverse)}
    if with_fits and bias_detected:
        out["fits"] = {"temperature": fits.fit_temperature(seqs, sampling), "settings": fits.compare_settings(seqs, sampling)}
    best = decision["best"][0] if decision["best"] else None
    full = seqs
    if origins is not None:  # per-row groups: every observed row again
        full = seqs.rows(np.asarray(inverse).reshape(-1))
        full.weights = None
    out["localization"] = localize(ranking, best, tokens, origins, full)
    out["plot"] = _plot_data(out["localization"], best, law, target_ref, draft_ref, prompt, sampling,
                             num_draft_tokens, tokens, window)
    return out


def _plot_data(loc, best, law, target_ref, draft_ref, prompt, sampling, k, tokens, window) -> dict | None:
    """Observed vs target vs best-mechanism marginal law of the most telling position (within the fit window)."""
    if best is None or window < 1:
        return None
    per_pos = loc.get("log_lr_per_position") or []
    cand = [(v, i) for i, v in enumerate(per_pos[:window]) if isinstance(v, (int, float)) and math.isfinite(v)]
    pos = max(cand)[1] if cand else 0
    if law is None:
        law = mechanism_law(hypothesis(best), target_ref, draft_ref, prompt, sampling, k, window)
    target = mechanism_law(MECHANISMS["canonical"], target_ref, draft_ref, prompt, sampling, k, window)
    if law is None or target is None:
        return None
    vocab = target_ref.vocab_size
    shape = (vocab + 1,) * window
    axes = tuple(a for a in range(window) if a != pos)
    m_law = law.reshape(shape).sum(axis=axes) if axes else law
    t_law = target.reshape(shape).sum(axis=axes) if axes else target
    col = np.where(tokens[:, pos] < 0, vocab, tokens[:, pos])
    obs = np.bincount(col, minlength=vocab + 1) / max(1, len(tokens))
    top = np.argsort(-(np.abs(obs - t_law) + np.abs(m_law - t_law)))[:12]
    top = np.sort(top)
    return {"position": pos + 1, "mechanism": best, "labels": [("<ended>" if c == vocab else str(int(c))) for c in top],
            "observed": obs[top].tolist(), "target": t_law[top].tolist(), "mechanism_law": m_law[top].tolist()}
