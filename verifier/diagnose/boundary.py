"""The filter-boundary finding: a bias confined to tokens at a top-k / top-p / min-p threshold (numeric precision).

An engine that computes the target's logits at a lower precision than the reference (bf16 or fp16 inference, a
quantised KV cache) moves every probability by a fraction of a percent -- invisible to any cell at audit sizes --
except where a *threshold processor* turns that small change into a support change: a token whose ``p / p_max`` sits
1% above min-p is dropped, or the k-th and (k+1)-th logits swap.  The emitted law then differs from the requested
processed law in whole tokens (never emitted although kept, or emitted although dropped), and only in tokens whose
filter decision lies within a rounding error of the threshold.  No mechanism of the speculative rule explains that
(:mod:`verifier.diagnose.family` ranks rules applied to the exact probs), so the ranking says "matches no known
mechanism"; this module says what it is.

Margins.  On the target's processed logits ``x`` before the filters (penalties and temperature applied, teacher-forced
along each observed row: ``log`` of :func:`verifier.sampling.processed_probs` with the filters off), the *margin* of a
token is how far, in nats, its filter decision lies from flipping:

* top-k: a kept token's distance to the largest dropped logit, a dropped token's distance to the smallest kept one;
* top-p: ``|log(mass before it) - log(top_p)|`` in the descending order of the top-k-filtered probs;
* min-p: ``|log(p / p_max) - log(min_p)|``.

A perturbation of every processed logit by at most ``e`` nats changes a decision only where the margin is at most
``2 e``.  The *band* is every token with margin <= :data:`BAND_NATS` (0.05 nats: a 5% change of a probability ratio,
the order of bf16 rounding -- 8 significant bits -- of logits of magnitude 10-20, as this module's callers report).

The finding (the band is fixed before the data are looked at).  **Named** when all of:

1. **Every impossible token lies in the band.**  An emitted token the requested law gives probability 0 (a support
   violation) outside the band rules the finding out.
2. **The band deviates.**  Emissions of band tokens the requested law keeps, against their expected number (a sum of
   per-position probabilities along the observed prefixes: a martingale, normal approximation, two-sided), or any
   emission of a band token the law drops; significant at ``alpha`` (:data:`verifier.diagnose.rank.DIAGNOSIS_ALPHA`).
3. **All or nothing per context.**  The logits are deterministic, so a rounding error moves a band token wholly across
   its threshold in a given context (position and observed prefix): some kept band token is never emitted where its
   requested prob makes that unlikely (``(1 - p)^n < alpha``, Bonferroni), or a dropped one is emitted; and no band
   token is emitted at a partial rate (two-sided binomial, Bonferroni, at ``FIT_ALPHA``) -- a defect of the rule moves
   rates part of the way (``deterministic_acceptance`` drops a token wholly too, but fails 4); and no kept token far
   from every threshold is wholly gone in a context (``(1 - p)^n``, Bonferroni, at ``FIT_ALPHA``: a rule defect that
   drops tokens drops non-band ones too, visible before the TV test of 4 has power).
4. **Outside the band, within rounding in TV.**  Each emitted non-band token is tested under the requested law
   restricted to the non-band tokens of its position (which band tokens an engine keeps changes only the
   normalisation).  A perturbation of every logit by at most ``BAND_NATS / 2`` moves a law by at most TV
   :data:`TOLERANCE_TV` ((e^0.05 - 1) / 2 = 0.0256), so the data must be consistent with a distance <= TOLERANCE_TV:
   the lower ``1 - FIT_ALPHA`` confidence bound of the randomized-PIT KS distance over every analysed position (KS
   distance <= TV) and of the first position's chi-square TV interval (one context for every row) at most TOLERANCE_TV.

**Rounding** when, besides, the non-band tokens' effective temperature (profile likelihood on the fixed non-band
support) has the requested T in its ``1 - FIT_ALPHA`` interval; else the report names both candidates (lower precision
with a quantised KV cache, or a temperature / logits-processor defect) and the float32 run that separates them.
``specverify bench diagnose-boundary`` measures both rates on flips, temperature errors, the null and every mechanism.

Positions analysed: 1..P, P the last position of a rejected gof / joint cell of the set (every position when a
rejected cell covers all of them, e.g. the PIT).  An engine law module may add where the precision comes from
(``PRECISION_HINT`` of :data:`verifier.engines.reproductions.LAWS`, e.g. OpenVINO's CPU default bf16).

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

import numpy as np

from verifier.diagnose.rank import DIAGNOSIS_ALPHA, FIT_ALPHA

__all__ = ["BAND_NATS", "BOUNDARY_STATUS", "filter_margins", "covered_positions", "boundary_set_finding",
           "add_boundary_finding", "target_only_entry", "decoder_engine"]

BAND_NATS = 0.05  # a filter decision within this many nats of its threshold can flip under bf16/fp16 logits
TOLERANCE_TV = (math.exp(BAND_NATS) - 1) / 2  # TV a perturbation of every logit by BAND_NATS / 2 can cause at most
BOUNDARY_STATUS = "filter boundary (numeric precision)"  # the diagnosis status when the finding holds
MAX_LISTED = 4  # band tokens of the first position named in the sentence


def _filters(sampling) -> list[str]:
    out = []
    if sampling.top_k is not None:
        out.append("top-k")
    if sampling.top_p is not None and sampling.top_p < 1.0:
        out.append("top-p")
    if sampling.min_p:
        out.append("min-p")
    return out


def filter_margins(logits, sampling, context_token_mask=None) -> tuple[np.ndarray, np.ndarray]:
    """Distance, in nats of processed logits, of every token's filter decision from its threshold.

    Parameters
    ----------
    logits : array_like, shape (..., vocab), float
        Raw target logits (or log of the unprocessed probs: a constant per row changes nothing).
    sampling : SamplingConfig
        The requested setting; its penalties and temperature shape the processed logits, its top-k / top-p / min-p
        are the filters measured.
    context_token_mask : array_like, shape (..., vocab), int, optional
        Context codes (:func:`verifier.sampling.context_codes`), needed with a penalty.

    Returns
    -------
    margins : np.ndarray, shape (..., vocab), float64
        The smallest margin over the active filters; ``inf`` for a token no filter decision is near (and everywhere
        when no filter is on).
    kept : np.ndarray, shape (..., vocab), bool
        The requested decision (the token has processed prob > 0).
    """
    import torch

    from verifier.sampling import processed_probs

    raw = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    requested = processed_probs(raw, sampling, context_token_mask).numpy()
    kept = requested > 0
    margins = np.full(kept.shape, np.inf)
    if sampling.greedy or not _filters(sampling):
        return margins, kept
    unfiltered = processed_probs(raw, replace(sampling, top_k=None, top_p=None, min_p=None), context_token_mask).numpy()
    with np.errstate(divide="ignore"):
        x = np.log(unfiltered)
    vocab = x.shape[-1]
    if sampling.top_k is not None and sampling.top_k < vocab:
        desc = -np.sort(-x, axis=-1)
        kth, next_ = desc[..., sampling.top_k - 1:sampling.top_k], desc[..., sampling.top_k:sampling.top_k + 1]
        in_k = x >= kth
        margins = np.minimum(margins, np.where(in_k, x - next_, kth - x))
        x = np.where(in_k, x, -np.inf)
    with np.errstate(invalid="ignore"):
        probs = np.exp(x - x.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    if sampling.top_p is not None and sampling.top_p < 1.0:
        order = np.argsort(-probs, axis=-1, kind="stable")
        sp = np.take_along_axis(probs, order, axis=-1)
        before = np.cumsum(sp, axis=-1) - sp
        with np.errstate(divide="ignore"):
            m_sorted = np.where((sp > 0) & (before > 0), np.abs(np.log(np.maximum(before, 1e-300)) - math.log(sampling.top_p)), np.inf)
        m = np.empty_like(m_sorted)
        np.put_along_axis(m, order, m_sorted, axis=-1)
        margins = np.minimum(margins, m)
        keep_sorted = before < sampling.top_p
        keep_sorted[..., 0] = True
        keep = np.empty_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=-1)
        probs = np.where(keep, probs, 0.0)  # min-p reads p / p_max after top-p (p_max is always kept)
    if sampling.min_p:
        with np.errstate(divide="ignore"):
            ratio = np.log(probs) - np.log(probs.max(axis=-1, keepdims=True))
        margins = np.minimum(margins, np.where(np.isfinite(ratio), np.abs(ratio - math.log(sampling.min_p)), np.inf))
    return margins, kept


_POSITION = re.compile(r"/(?:gof|surprisal)@(\d+)$|/joint@1\.\.(\d+)$")


def covered_positions(cells: list[dict], prefix: str, width: int) -> int:
    """How many first positions the rejected cells whose id starts with ``prefix`` (a sample set's cells:
    ``decoder/prompt/sampling/k=K/``) cover; ``width`` when one covers every position or none is found."""
    last = 0
    for c in cells:
        cid = str(c.get("id", ""))
        if not cid.startswith(prefix) or c.get("verdict") != "BIAS":
            continue
        m = _POSITION.search(cid)
        last = max(last, int(m.group(1) or m.group(2))) if m else width
    return min(width, last or width)


def _context(seqs) -> np.ndarray | None:
    from verifier.diagnose.fit import _context_mask

    return _context_mask(seqs.prompt, seqs.tokens, seqs.p.shape[-1])


def boundary_set_finding(seqs, sampling, positions: int, *, label=None, alpha: float = DIAGNOSIS_ALPHA,
                         seed: int = 0) -> dict[str, Any] | None:
    """Whether one sample set's deviation is confined to tokens at a filter threshold (module docstring).

    Parameters
    ----------
    seqs : SequenceProbs
        Distinct rows with ``weights`` (counts) and ``p_raw`` (:func:`verifier.diagnose.likelihood.sequence_probs`).
    sampling : SamplingConfig
        The requested setting (a top-k, top-p or min-p must be on, else None is returned).
    positions : int
        Analyse emitted positions 1..positions (:func:`covered_positions`).
    label : callable (int) -> str, optional
        A token's text for the sentence (default: its id).
    alpha : float, default DIAGNOSIS_ALPHA
        Level of the band-deviation test (step 2).
    seed : int, default 0
        Seeds the randomized PIT (step 3).

    Returns
    -------
    dict or None
        ``named`` (bool), ``filters``, ``band_nats``, ``impossible`` / ``impossible_outside_band`` (weighted counts),
        ``band_observed`` / ``band_expected`` / ``band_pvalue``, ``pit_pvalue``, ``first_pvalue``, ``fit_pvalue``
        (Bonferroni of the two), ``first_position`` (band tokens of position 1: id, margin, observed, expected),
        ``sentence``.  None when no filter is on or the rows carry no unprocessed probs.
    """
    from verifier.diagnose.rows import sequence_ends
    from verifier.stats.gof import gof_test
    from verifier.stats.pit import pit_ks_test, randomized_pit

    filters = _filters(sampling)
    if not filters or sampling.greedy or seqs.p_raw is None:
        return None
    name = label or (lambda t: f"id {t}")
    n_rows, width, vocab = seqs.p.shape
    steps = max(1, min(int(positions), width))
    w = np.ones(n_rows) if seqs.weights is None else np.asarray(seqs.weights, dtype=np.float64)
    ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
    with np.errstate(divide="ignore"):
        logits = np.log(seqs.p_raw[:, :steps])
    mask = _context(seqs)[:, :steps] if sampling.uses_context else None
    margins, kept = filter_margins(logits, sampling, mask)
    law = seqs.p[:, :steps]
    band = margins <= BAND_NATS
    tok = seqs.tokens[:, :steps]
    live = (np.arange(steps)[None] < ends[:, None]) & (tok >= 0)
    r, t = np.nonzero(live)
    x = tok[r, t]
    ww = w[r]
    impossible = law[r, t, x] <= 0
    in_band = band[r, t, x]
    imp_total, imp_out = float(ww[impossible].sum()), float(ww[impossible & ~in_band].sum())
    kept_band = band & kept
    m = (law * kept_band).sum(axis=-1)[r, t]
    obs_kept = float(ww[kept_band[r, t, x]].sum())
    exp_kept = float((ww * m).sum())
    var = float((ww * m * (1 - m)).sum())
    dropped_emitted = float(ww[in_band & ~kept[r, t, x]].sum())
    if dropped_emitted > 0:
        band_p = 0.0
    elif var > 0:
        from scipy.stats import norm

        band_p = float(2 * norm.sf(abs(obs_kept - exp_kept) / math.sqrt(var)))
    else:
        band_p = 1.0
    flip = _flip_test(seqs.tokens[:, :steps], live, w, law, band, kept)
    # step 3: the requested law restricted to the non-band tokens of each position
    outside = np.where(band, 0.0, law)
    z = outside.sum(axis=-1, keepdims=True)
    cond = np.divide(outside, z, out=np.zeros_like(outside), where=z > 0)
    sel = ~in_band & ~impossible
    reps = np.repeat(np.arange(len(x))[sel], ww[sel].astype(np.int64))  # weighted rows -> observed rows
    pit_p = pit_low = None
    if len(reps) >= 2:
        from scipy.stats import kstwo

        u, _ = randomized_pit(x[reps], cond[r[reps], t[reps]], np.random.default_rng(seed))
        if len(u) >= 2:
            ks = pit_ks_test(u, alpha=FIT_ALPHA)
            pit_p = float(ks.pvalue)
            pit_low = max(0.0, float(ks.statistic) - float(kstwo.ppf(1 - FIT_ALPHA, len(u))))
    first_p = first_low = None
    first = []
    on_first = sel & (t == 0)
    if on_first.any():
        row0 = r[t == 0][0]
        counts = np.bincount(x[on_first], weights=ww[on_first], minlength=vocab).round().astype(np.int64)
        if counts.sum() > 0:
            res = gof_test(counts, cond[row0, 0], alpha=FIT_ALPHA, confidence=1 - FIT_ALPHA)
            first_p = float(res.pvalue)
            first_low = float(res.effect.ci_low) if res.effect is not None else None
        n_first = float(ww[t == 0].sum())
        for v in np.flatnonzero(band[row0, 0]):
            first.append({"token": int(v), "label": name(int(v)), "margin": float(margins[row0, 0, v]),
                          "kept": bool(kept[row0, 0, v]), "observed": float(ww[(t == 0) & (x == v)].sum()),
                          "expected": float(law[row0, 0, v] * n_first)})
    temp = _temperature_check(logits, sampling, mask, ~band & kept, r[sel], t[sel], x[sel], ww[sel])
    ps = [p for p in (pit_p, first_p) if p is not None]
    fit_p = min(1.0, min(ps) * len(ps)) if ps else None
    lows = [v for v in (pit_low, first_low) if v is not None]
    fits = bool(lows) and max(lows) <= TOLERANCE_TV  # within a rounding-level perturbation outside the band
    # the support changed at a threshold, all or nothing per context, and nowhere else
    # ... and the rest of the law within the TV a rounding-level logit error can cause
    named = bool(imp_out == 0 and band_p < alpha and flip["flip_pvalue"] < alpha and flip["partial_pvalue"] >= FIT_ALPHA
                 and flip["far_gone_pvalue"] >= FIT_ALPHA and fits)
    rounding = bool(named and temp["consistent"])  # ... at the requested temperature: rounding, as far as the data see
    out = {"named": named, "rounding": rounding, "filters": filters, "band_nats": BAND_NATS, "positions": steps,
           "impossible": imp_total, "impossible_outside_band": imp_out, "band_observed": obs_kept,
           "band_expected": exp_kept, "band_dropped_emitted": dropped_emitted, "band_pvalue": band_p,
           "analysed": float(ww.sum()), "band_positions": float(ww[band[r, t].any(axis=-1)].sum()), **flip,
           "pit_pvalue": pit_p, "first_pvalue": first_p, "fit_pvalue": fit_p, "pit_ks_low": pit_low,
           "first_tv_low": first_low, "tolerance_tv": TOLERANCE_TV, "temperature": temp, "first_position": first}
    out["sentence"] = _sentence(out, sampling)
    return out


def add_boundary_finding(item: dict, cells: list[dict], engine: str | None, plans, pairs, cache) -> None:
    """Add the finding to a diagnosed decoder (``item``, :func:`verifier.diagnose.run_dir.diagnose_decoders`) whose
    rows no mechanism explains: one entry per rejected sample set (``item["boundary"]``), named -- status
    :data:`BOUNDARY_STATUS`, the engine's ``PRECISION_HINT`` appended -- when every rejected set shows it.

    Parameters
    ----------
    item : dict
        The decoder's diagnosis (``decoder``, ``sets``, ``sentence``, ``status``); updated in place.
    cells : list of dict
        The report's cells (which positions the rejected cells cover: :func:`covered_positions`).
    engine : str or None
        The audited engine (audit.json), else the engine whose adapter provides the decoder.
    plans, pairs, cache
        The run's sample-set plans, loaded pairs, and ``{set_id: ((seqs, inverse), tokens, window)}`` of the ranked
        sets.
    """
    from verifier.runner.cells import token_labeler

    found = []
    for plan in (p for p in plans if p.decoder.name == item["decoder"] and p.set_id in cache):
        entry = next((s for s in item["sets"] if s["set_id"] == plan.set_id), {})
        if not entry.get("biased"):
            continue
        (seqs, _), tokens, _ = cache[plan.set_id]
        pair = pairs[plan.pair]
        text = token_labeler(pair, pair.vocab_size)
        f = boundary_set_finding(seqs, plan.sampling, covered_positions(cells, plan.cell_base + "/", tokens.shape[1]),
                                 label=lambda t, text=text: f"{text(t)} (id {t})")
        found.append((plan.label, f or {"named": False, "filters": [], "sentence": NO_FILTER}))
    if not any(f["filters"] for _, f in found):
        return  # no rejected set is filtered: nothing to say about thresholds
    item["boundary"] = {label: f for label, f in found}
    if all(f["named"] for _, f in found):
        plan = next(p for p in plans if p.decoder.name == item["decoder"])
        hint = _precision_hint(engine or decoder_engine(plan)) or (
            URL_HINT if getattr(plan.decoder, "decoder", None) == "verifier.server.decoder:decoder" else None)
        item["status"] = BOUNDARY_STATUS
        item["sentence"] = "; ".join(f"{label}: {f['sentence']}" for label, f in found) + (f" ({hint})" if hint else "")
    elif any(f["named"] for _, f in found):  # named on some rejected sets only: say why it does not hold for the run
        item["sentence"] += "; not a filter-boundary effect: " + "; ".join(
            f"{label}: {f['sentence']}" for label, f in found if not f["named"])


def target_only_entry(target_ref, prompt, sampling, tokens: np.ndarray):
    """The ``cache`` entry of :func:`add_boundary_finding` for a sample set whose draft is unknown (a URL audit's
    server drafts with its own model): the finding reads the target's probs only (``p``, ``p_raw``), so the distinct
    rows are teacher-forced on the target alone -- its probs also fill the draft's slots, which nothing here reads.

    Parameters
    ----------
    target_ref, prompt, sampling
        The target (a :class:`~verifier.runner.models.ReferenceModel`), the prompt ids and the requested setting.
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
        The set's stored rows, -1 after EOS.

    Returns
    -------
    tuple or None
        ``((seqs, inverse), tokens, None)`` with ``seqs.weights`` the rows' counts; None when no top-k / top-p / min-p
        filter is on (no threshold to flip) or there are no rows.
    """
    if not _filters(sampling) or sampling.greedy or not len(tokens):
        return None
    from verifier.diagnose.inputs import sequence_probs

    uniq, inverse, counts = np.unique(np.asarray(tokens, dtype=np.int64), axis=0, return_inverse=True,
                                      return_counts=True)
    seqs = sequence_probs(target_ref, target_ref, tuple(int(t) for t in prompt), uniq, sampling)
    seqs.weights = counts.astype(np.float64)
    return (seqs, inverse.reshape(-1)), tokens, None


NO_FILTER = "no top-k / top-p / min-p filter on this set: its bias is not a filter-boundary effect"
URL_HINT = ("a URL audit: the server computes the target's logits with its own numerics (another implementation, "
            "dtype or quantisation than --target's); a two-sample audit against the same server without a draft "
            "(--reference-url) compares the speculative rows with the server's own law")


def decoder_engine(plan) -> str | None:
    """The registered engine whose adapter module provides ``plan``'s decoder (``module:factory``), or None."""
    source = getattr(plan.decoder, "decoder", None)
    if not isinstance(source, str) or ":" not in source:
        return None
    from verifier.engines import engine_names, get_engine

    module = source.split(":", 1)[0]
    return next((name for name in engine_names() if get_engine(name).__module__ == module), None)


def _precision_hint(engine: str | None) -> str | None:
    """Where ``engine``'s precision comes from (its law module's ``PRECISION_HINT``), or None."""
    from verifier.diagnose.engine_laws import engine_module

    module = engine_module(engine)
    return getattr(module, "PRECISION_HINT", None) if module is not None else None


def _flip_test(tokens, live, w, law, band, kept) -> dict:
    """All or nothing per context: a rounding error moves a band token wholly across its threshold in a given
    context (the logits are deterministic), a defect of the rule moves its rate partly.

    For each (position, observed prefix) context with ``n`` rows and each band token of it: a kept token emitted 0
    times is a flip with p-value ``(1 - p)^n`` (p its requested prob); a dropped one emitted is a flip (p 0); a kept
    one emitted must not be emitted less or more than its requested prob allows (two-sided binomial test) -- a partial
    rate is no flip.  Returns ``flip_pvalue`` (smallest flip p, Bonferroni over the band pairs), ``partial_pvalue``
    (smallest binomial p, Bonferroni), ``flipped`` (how many pairs look flipped)."""
    from scipy.stats import binomtest

    steps = tokens.shape[1]
    pairs, flip_ps, partial_ps = 0, [], []
    gone_pairs, gone_ps = 0, []  # kept tokens far from every threshold, never emitted in a context
    for t in range(steps):
        rows = np.flatnonzero(live[:, t])
        if not len(rows):
            continue
        groups: dict[bytes, list[int]] = {}
        for i in rows:
            groups.setdefault(tokens[i, :t].tobytes(), []).append(int(i))
        for members in groups.values():
            i0 = members[0]
            n_ctx = float(w[members].sum())
            far = kept[i0, t] & ~band[i0, t]
            seen = np.bincount(tokens[members, t], weights=w[members], minlength=far.shape[0]) > 0
            gone_pairs += int(far.sum())
            missing = far & ~seen
            if missing.any():
                gone_ps.append(float(np.exp(n_ctx * np.log1p(-law[i0, t][missing].max()))))
            for v in np.flatnonzero(band[i0, t]):
                pairs += 1
                n = int(round(float(w[members].sum())))
                o = int(round(float(w[[i for i in members if tokens[i, t] == v]].sum())))
                if not kept[i0, t, v]:
                    if o > 0:
                        flip_ps.append(0.0)
                    continue
                pv = float(law[i0, t, v])
                if o == 0:
                    flip_ps.append((1.0 - pv) ** n)
                else:
                    partial_ps.append(float(binomtest(o, n, pv).pvalue))
    bonf = max(1, pairs)
    return {"flip_pvalue": min(1.0, min(flip_ps) * bonf) if flip_ps else 1.0,
            "partial_pvalue": min(1.0, min(partial_ps) * bonf) if partial_ps else 1.0,
            "flipped": int(sum(p < DIAGNOSIS_ALPHA for p in flip_ps)),
            # a token far from every threshold wholly gone: no rounding error does that (Bonferroni over those pairs)
            "far_gone_pvalue": min(1.0, min(gone_ps) * max(1, gone_pairs)) if gone_ps else 1.0}


def _temperature_check(logits, sampling, mask, support, r, t, x, w) -> dict:
    """Maximum-likelihood temperature of the emitted non-band tokens: the processed logits at temperature T on the
    requested law's non-band support (``support``, (rows, steps, vocab) bool: kept and not in the band; held fixed: a temperature that moves a filter is not what is fitted);
    consistent when the requested T lies in the ``1 - FIT_ALPHA`` profile-likelihood interval (a rounding error shifts
    no temperature; a temperature defect does)."""
    import torch
    from scipy import optimize, stats

    from verifier.sampling import processed_probs

    raw = torch.as_tensor(np.asarray(logits, dtype=np.float64))
    shape = replace(sampling, top_k=None, top_p=None, min_p=None)

    def ll(temperature: float) -> float:
        law = processed_probs(raw, replace(shape, temperature=float(temperature)), mask).numpy()
        law = np.where(support, law, 0.0)
        z = law.sum(axis=-1)[r, t]
        px = law[r, t, x]
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.log(px) - np.log(z)
        return float((w * v).sum()) if np.isfinite(v).all() else -math.inf

    requested = float(sampling.temperature)
    if len(x) == 0:
        return {"consistent": True, "fitted": requested, "requested": requested, "log_lr": 0.0}
    res = optimize.minimize_scalar(lambda lt: -ll(math.exp(lt)) if math.isfinite(ll(math.exp(lt))) else 1e300,
                                   bounds=(math.log(0.05), math.log(5.0)), method="bounded", options={"xatol": 1e-3})
    fitted, best = float(math.exp(res.x)), -float(res.fun)
    lr = best - ll(requested)
    cut = float(stats.chi2.ppf(1 - FIT_ALPHA, 1)) / 2

    def gap(lt: float) -> float:  # < 0 inside the (1 - FIT_ALPHA) profile-likelihood interval
        v = ll(math.exp(lt))
        return (best - v) - cut if math.isfinite(v) else 1.0

    lo_b, hi_b = math.log(0.05), math.log(5.0)
    low = 0.05 if gap(lo_b) < 0 else float(math.exp(optimize.brentq(gap, lo_b, res.x, xtol=1e-3)))
    high = 5.0 if gap(hi_b) < 0 else float(math.exp(optimize.brentq(gap, res.x, hi_b, xtol=1e-3)))
    return {"consistent": bool(lr <= cut), "fitted": fitted, "ci": [low, high], "ci_level": 1 - FIT_ALPHA,
            "requested": requested, "log_lr": lr, "cut": cut}


def _sentence(f: dict, sampling) -> str:
    which = "/".join(f["filters"])
    if not f["named"]:
        why = ("an emitted token the requested law drops lies outside the band" if f["impossible_outside_band"] else
               f"no emitted token in positions 1-{f['positions']} to analyse" if not f["analysed"] else
               f"no token's {which} decision lies within {BAND_NATS:g} nats of its threshold at any emitted position"
               if not f["band_positions"] else
               "the band tokens are emitted as often as expected" if f["band_pvalue"] >= DIAGNOSIS_ALPHA else
               "no band token is wholly gone or wholly new in any context" if f["flip_pvalue"] >= DIAGNOSIS_ALPHA else
               "a band token's rate moved part of the way (a rounding error moves it all or nothing)"
               if f["partial_pvalue"] < FIT_ALPHA else
               "a token far from every threshold is wholly gone in some context (no rounding error does that)"
               if f.get("far_gone_pvalue", 1.0) < FIT_ALPHA else
               f"outside the band the law is farther than TV {f['tolerance_tv']:.3g} from the requested one")
        return f"not a {which} boundary effect ({why}; band {BAND_NATS:g} nats)"
    moved = sorted(f["first_position"], key=lambda e: -abs(e["observed"] - e["expected"]))[:MAX_LISTED]
    listed = "; ".join(
        f"{e['label']} ({'kept' if e['kept'] else 'dropped'} by {which} with a margin of {e['margin']:.3g} nats: "
        f"{e['observed']:,.0f} emitted, {e['expected']:.1f} expected)" for e in moved)
    where = f"at token 1: {listed}" if listed else (
        f"band tokens kept by the filter emitted {f['band_observed']:,.0f} times, {f['band_expected']:.1f} expected; "
        f"{f['band_dropped_emitted']:,.0f} emitted that it drops")
    temp = f["temperature"]
    fit = ", ".join(s for s in (
        f"randomized-PIT KS p = {f['pit_pvalue']:.2g}" if f["pit_pvalue"] is not None else "",
        f"token-1 chi-square p = {f['first_pvalue']:.2g}" if f["first_pvalue"] is not None else "",
        f"effective temperature {temp['fitted']:.3g}, {100 * temp['ci_level']:.1f}% interval [{temp['ci'][0]:.3g}, "
        f"{temp['ci'][1]:.3g}], requested {temp['requested']:g}" if "ci" in temp else "") if s)
    head = (f"the support changed at the {which} threshold only -- {where}; every emitted token the requested law "
            f"drops lies within {BAND_NATS:g} nats of a threshold")
    if f["rounding"]:
        return (f"{head}, and elsewhere the emitted law is within the TV {f['tolerance_tv']:.3g} a {BAND_NATS / 2:g}-nat "
                f"logit error can cause, at the requested temperature ({fit}; positions 1-{f['positions']}): the "
                f"engine's target logits differ from the reference's by a rounding error (lower-precision inference, "
                f"e.g. bf16 / fp16), which the filter turns into a support change; not a defect of the speculative "
                f"rule. Confirm with a run at float32 precision")
    return (f"{head}; elsewhere the law is within TV {f['tolerance_tv']:.3g} of the requested one but its effective "
            f"temperature moved ({fit}; positions 1-{f['positions']}): the engine's target logits differ from the "
            f"reference's by more than rounding -- lower precision with a quantised KV cache, or a temperature / "
            f"logits-processor defect; a run at float32 precision separates them (it passes: precision; it keeps the "
            f"change: a defect)")
