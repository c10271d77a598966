"""Diagnosis when the draft is unknown: localize the bias with what needs no draft probs.

Every mechanism of the zoo is a law of the target's and the draft's processed probs, so when the decoder drafts with
a model the harness does not have (a server, an assistant class, a different-tokenizer draft) no mechanism can be
scored.  What needs only the target still localizes the bias:

* **per emitted position**: the randomized PIT of the tokens at position t under the processed target law given
  their prefix (Kolmogorov-Smirnov; under any lossless decoder each token's law given its history is p): which
  positions carry the bias, and whether the first token -- often a plain target sample (the prefill) -- is clean;
* **effective temperature per position**: the maximum-likelihood temperature of the tokens at t
  (:func:`verifier.diagnose.fit.fit_temperature` on that position alone) with its 95% interval;
* **sampling settings**: whether the emitted law is closer to the target without top-k/top-p or unprocessed
  (:func:`verifier.diagnose.fit.compare_settings`);
* **origins** (when the decoder reported them): bonus tokens and each position within a round have law p given
  their history; accepted and recovered tokens have laws that need q and are not tested.

Tests run at ``LOCALIZE_ALPHA`` (1e-3), Bonferroni over the groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.diagnose import fit as fits
from verifier.diagnose.inputs import sequence_probs
from verifier.diagnose.likelihood import SequenceProbs
from verifier.diagnose.localize import (MIN_GROUP, ORIGIN_ACCEPTED, ORIGIN_BONUS, ORIGIN_CODES, ORIGIN_RECOVERED,
                                        _pit_group, mark_biased, round_position_groups)
from verifier.diagnose.rows import sequence_ends

__all__ = ["diagnose_without_draft", "UNKNOWN_DRAFT_NOTE"]

UNKNOWN_DRAFT_NOTE = ("the draft is unknown (the decoder drafts with its own model), and every mechanism of the zoo is a "
                      "law of the target's and the draft's processed probs, so no mechanism is scored; what needs no "
                      "draft localizes the bias below (rerun with the draft the decoder uses, --draft MODEL, where it is "
                      "known, to name the mechanism)")


def _position(seqs: SequenceProbs, t: int) -> SequenceProbs:
    """The rows' token t alone, with the target probs at t (rows ended before t stay ended)."""
    tok = seqs.tokens[:, t:t + 1].copy()
    ended = np.arange(seqs.tokens.shape[1])[None, :t] >= sequence_ends(seqs.tokens, seqs.eos_token_id)[:, None]
    tok[ended.any(axis=1)] = -1
    pick = (lambda a: None if a is None else a[:, t:t + 1])
    return SequenceProbs(tok, seqs.p[:, t:t + 1], seqs.q[:, t:t + 1], pick(seqs.p_raw), pick(seqs.q_raw),
                         seqs.eos_token_id, seqs.prompt, weights=seqs.weights, q_temp=pick(seqs.q_temp))


def diagnose_without_draft(target_ref, prompt, sampling, tokens: np.ndarray, *, origins: np.ndarray | None = None,
                           seed: int = 0, with_fits: bool = True) -> dict[str, Any]:
    """Localization of one sample set's bias without the draft (see the module docstring).

    Parameters
    ----------
    target_ref : verifier.runner.models.ReferenceModel
    prompt : sequence of int
    sampling : SamplingConfig
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64, -1 after EOS
    origins : np.ndarray or None, shape like ``tokens``, int8
        Origin code of each emitted token (:data:`verifier.protocols.ORIGIN_CODES`) when the decoder reported it.
    seed : int, default 0
        Seeds the randomized PITs.
    with_fits : bool, default True
        Also fit the temperature per position and compare sampling settings.

    Returns
    -------
    dict
        ``note`` (why no mechanism is scored), ``localization`` (``by_position``: per position n, ks, pvalue, biased,
        temperature fit; ``by_origin`` / ``by_round_position`` when origins are given; ``sentence``), ``fits``
        (whole-row temperature and settings) when ``with_fits``.
    """
    from verifier.diagnose.rows import check_rows

    tokens = check_rows(tokens, target_ref.vocab_size)
    uniq, inverse, counts = np.unique(tokens, axis=0, return_inverse=True, return_counts=True)
    inverse = np.asarray(inverse).reshape(-1)
    seqs = sequence_probs(target_ref, target_ref, prompt, uniq, sampling)  # q is a placeholder: never read
    seqs.weights = counts.astype(np.float64)
    rng = np.random.default_rng(seed)
    ends = sequence_ends(tokens, target_ref.eos_token_id)
    live = np.arange(tokens.shape[1])[None] < ends[:, None]
    p = seqs.p[inverse]
    groups = []
    for t in range(tokens.shape[1]):
        sel = live[:, t]
        if sel.sum() < MIN_GROUP:
            continue
        g = {"group": f"position {t + 1}", **_pit_group(tokens[sel, t], p[sel, t], rng)}
        if with_fits and seqs.p_raw is not None:
            fit = fits.fit_temperature(_position(seqs, t), sampling)
            g["temperature"], g["temperature_ci"] = fit["temperature"], fit["ci"]
        groups.append(g)
    rounds, by_origin = [], []
    if origins is not None:
        origins = np.asarray(origins)
        sel = live & (origins == ORIGIN_BONUS)
        if sel.sum() >= MIN_GROUP:
            by_origin.append({"group": "bonus", **_pit_group(tokens[sel], p[sel], rng)})
        for code in (ORIGIN_ACCEPTED, ORIGIN_RECOVERED):
            by_origin.append({"group": ORIGIN_CODES[code], "n": int((live & (origins == code)).sum()),
                              "pvalue": None, "note": "not tested: its law given the origin needs q"})
        rounds = round_position_groups(tokens, origins, live, p, rng)
    level = mark_biased(groups + by_origin + rounds)
    loc: dict[str, Any] = {"mechanism": None, "by_position": groups, "by_origin": by_origin,
                           "by_round_position": rounds, "group_alpha": level}
    loc["sentence"] = _sentence(groups, by_origin, rounds, sampling)
    out: dict[str, Any] = {"note": UNKNOWN_DRAFT_NOTE, "localization": loc}
    if with_fits and seqs.p_raw is not None:
        out["fits"] = {"temperature": fits.fit_temperature(seqs, sampling), "settings": fits.compare_settings(seqs, sampling)}
    return out


def _bound(t: float) -> str:
    """An interval end, marked when it is the search range's edge (the interval is cut there, not closed)."""
    if t <= fits.T_MIN * 1.001:
        return f"<= {fits.T_MIN:g} (search edge)"
    if t >= fits.T_MAX * 0.999:
        return f">= {fits.T_MAX:g} (search edge)"
    return f"{t:.3g}"


def _sentence(groups: list[dict], by_origin: list[dict], rounds: list[dict], sampling) -> str:
    flagged = [g for g in groups if g.get("biased")]
    clean = [g for g in groups if g.get("biased") is False]
    if not flagged:
        parts = ["no emitted position departs from the target law on its own at this n"]
    else:
        parts = [f"the bias is at {', '.join(g['group'] for g in flagged)}"
                 + (f" (not at {', '.join(g['group'] for g in clean)})" if clean else "")]
        temps = [f"{g['group']}: T = {g['temperature']:.3g} [{_bound(g['temperature_ci'][0])}, {_bound(g['temperature_ci'][1])}]"
                 for g in flagged if "temperature" in g]
        if temps:
            parts.append(f"effective temperature ({'requested T = ' + format(sampling.temperature, 'g')}): " + "; ".join(temps))
    for g in by_origin + rounds:
        if g.get("biased"):
            parts.append(f"{g['group']} tokens depart from p")
    return "; ".join(parts)
