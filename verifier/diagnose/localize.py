"""Where the bias is: per emitted position, per position within a round, per emitted-token origin.

* Per position: the best mechanism's log LR over the target from each emitted position
  (``log P_best(x_t | x_<t) - log p_t(x_t)`` summed over rows).
* Per origin and per position within a round, when the decoder reported the origin of each emitted
  token (:data:`ORIGIN_CODES`): under the canonical rule a token's law given its history and its
  origin is known -- an accepted draft ~ ``min(p, q) / sum min(p, q)``, a recovered token ~ the
  residual, a bonus token ~ p -- and given its history and its position j within the round it is p
  whatever j.  Each group gets a randomized-PIT Kolmogorov-Smirnov test against those laws
  (:func:`verifier.stats.pit.pit_ks_test`), at ``LOCALIZE_ALPHA`` Bonferroni over the groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.diagnose.likelihood import SequenceProbs
from verifier.diagnose.rows import sequence_ends
from verifier.errors import InvalidArgumentError

__all__ = ["ORIGIN_ACCEPTED", "ORIGIN_RECOVERED", "ORIGIN_BONUS", "ORIGIN_SUFFIX", "ORIGIN_CODES", "localize",
           "LOCALIZE_ALPHA", "round_position_groups", "mark_biased"]

ORIGIN_ACCEPTED, ORIGIN_RECOVERED, ORIGIN_BONUS, ORIGIN_SUFFIX = 0, 1, 2, 3
from verifier.protocols import ORIGIN_CODES  # noqa: E402  (0 accepted, 1 recovered, 2 bonus, 3 unverified draft)
LOCALIZE_ALPHA = 1e-3  # family level of the per-group PIT tests
MIN_GROUP = 20  # tokens a group needs before it is tested


def _pit_group(tokens: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    from verifier.stats.pit import pit_ks_test, randomized_pit

    probs = np.clip(probs, 0.0, None)
    s = probs.sum(axis=1, keepdims=True)
    probs = np.where(s > 0, probs / np.where(s > 0, s, 1.0), probs)
    ok = probs.sum(axis=1) > 0
    u, bad = randomized_pit(tokens[ok], probs[ok], rng)
    off = int(sum(v.count for v in bad))
    try:
        res = pit_ks_test(u, alpha=LOCALIZE_ALPHA)
    except InvalidArgumentError:  # u's too tied for KS (near one-hot laws): this group is not tested
        return {"n": int(len(tokens)), "ks": None, "pvalue": 0.0 if off else None, "off_support": off,
                "note": "PIT values too tied for a KS test"}
    return {"n": int(len(tokens)), "ks": float(res.statistic), "pvalue": 0.0 if off else float(res.pvalue),
            "off_support": off}


def round_position_groups(tokens: np.ndarray, origins: np.ndarray, live: np.ndarray, p: np.ndarray,
                          rng: np.random.Generator) -> list[dict[str, Any]]:
    """Randomized-PIT groups of the tokens at each position within a round (given its history a token's law is p
    there, whatever the position); j = drafts accepted since the round started, read off the origin codes."""
    j = np.zeros_like(tokens)
    for t in range(1, tokens.shape[1]):
        j[:, t] = np.where(origins[:, t - 1] == ORIGIN_ACCEPTED, j[:, t - 1] + 1, 0)
    rounds = []
    for jj in range(int(j[live].max(initial=0)) + 1):
        sel = live & (j == jj)
        if sel.sum() >= MIN_GROUP:
            rounds.append({"group": "first token of a round" if jj == 0 else f"round position {jj + 1}",
                           **_pit_group(tokens[sel], p[sel], rng)})
    return rounds


def mark_biased(groups: list[dict[str, Any]]) -> float:
    """Set ``biased`` on every tested group at ``LOCALIZE_ALPHA`` Bonferroni over them; returns the per-group level."""
    tested = [g for g in groups if g.get("pvalue") is not None]
    level = LOCALIZE_ALPHA / max(1, len(tested))
    for g in tested:
        g["biased"] = bool(g["pvalue"] < level)
    return level


def localize(ranking, best: str | None, tokens: np.ndarray, origins: np.ndarray | None,
             seqs: SequenceProbs, seed: int = 0) -> dict[str, Any]:
    """Localization table of one sample set (see the module docstring).

    Returns
    -------
    dict
        ``log_lr_per_position`` (best mechanism, list per emitted position or None), ``by_origin`` and
        ``by_round_position`` (lists of group dicts with n, ks, pvalue, biased) when ``origins`` is given.
    """
    out: dict[str, Any] = {"mechanism": best, "log_lr_per_position": ranking.per_position.get(best) if best else None}
    if origins is None:
        out["note"] = "the decoder reported no per-token origin: localization by position only"
        return out
    origins = np.asarray(origins)
    rng = np.random.default_rng(seed)
    ends = sequence_ends(tokens, seqs.eos_token_id)
    live = np.arange(tokens.shape[1])[None] < ends[:, None]
    p, q = seqs.p, seqs.q
    laws = {ORIGIN_ACCEPTED: np.minimum(p, q), ORIGIN_RECOVERED: np.clip(p - q, 0.0, None), ORIGIN_BONUS: p}
    groups = []
    for code, name in ORIGIN_CODES.items():
        sel = live & (origins == code)
        if code not in laws or sel.sum() < MIN_GROUP:
            if sel.sum():
                groups.append({"group": name, "n": int(sel.sum()), "pvalue": None, "note": "not tested"})
            continue
        groups.append({"group": name, **_pit_group(tokens[sel], laws[code][sel], rng)})
    rounds = round_position_groups(tokens, origins, live, p, rng)
    level = mark_biased(groups + rounds)
    out.update({"by_origin": groups, "by_round_position": rounds, "group_alpha": level})
    flagged = [g["group"] for g in groups if g.get("biased")]
    clean = [g["group"] for g in groups if g.get("biased") is False]
    parts = []
    if flagged:
        parts.append(f"the bias appears on {', '.join(flagged)} tokens" + (f", not on {', '.join(clean)} tokens" if clean else ""))
    suffix = int((live & (origins == ORIGIN_SUFFIX)).sum())
    if suffix:
        parts.append(f"{suffix} unverified draft tokens were emitted after rejections")
    if parts:
        out["sentence"] = "; ".join(parts)
    return out
