"""Pieces the engine reproductions share: the first two tokens' laws, a pooled chi-square, Clopper-Pearson."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats as sps

from verifier.sampling import processed_probs

__all__ = ["first_two_token_probs", "chi2_p", "clopper_pearson", "SHIPPED_PROMPT"]

SHIPPED_PROMPT = [272, 70, 221]  # "def " in the shipped tokenizer (the audits' default prompt)


def first_two_token_probs(prompt, sampling, target, draft):
    """``(p1, support, p2, q2)``: the target's processed law of token 1 (vocab,), the ids it can emit,
    and the target's / draft's processed laws of token 2 after ``prompt + token 1`` for each of
    them, shape (len(support), vocab); float64."""
    with torch.no_grad():
        p1 = processed_probs(target(torch.tensor([prompt])).logits[0, -1], sampling).numpy()
        support = np.nonzero(p1)[0]
        ctx = torch.tensor([list(prompt) + [int(t)] for t in support])
        p2 = processed_probs(target(ctx).logits[:, -1], sampling).numpy()
        q2 = processed_probs(draft(ctx).logits[:, -1], sampling).numpy()
    return p1, support, p2, q2


def chi2_p(counts, law, *, min_prob: float = 0.0, renormalise: bool = False, ddof: int = 0) -> float:
    """Chi-square p-value of ``counts`` against ``law``; 0 when a count falls where the law is <= ``min_prob``.

    Categories sorted by expected count, the tail pooled until every expected count is >= 10 (as the
    harness pools, without looking at the data).  ``renormalise`` rescales the kept law to sum 1.  ``ddof``
    (default 0): parameters of ``law`` fitted to these counts (a mixture's free shares), taken off the degrees of
    freedom (``scipy.stats.chisquare``'s ``ddof``); 1.0 when fewer than one degree of freedom is left (nothing to test).
    """
    counts, law = np.asarray(counts, dtype=float).ravel(), np.asarray(law).ravel()
    keep = law > min_prob
    if counts[~keep].sum() > 0:
        return 0.0
    exp = (law[keep] / law[keep].sum() if renormalise else law[keep]) * counts.sum()
    order = np.argsort(-exp)
    obs, exp = counts[keep][order], exp[order]
    bins_o, bins_e, o, e = [], [], 0.0, 0.0
    for a, b in zip(obs, exp):
        o, e = o + a, e + b
        if e >= 10:
            bins_o.append(o), bins_e.append(e)
            o = e = 0.0
    if e > 0 and bins_e:
        bins_o[-1] += o
        bins_e[-1] += e
    return float(sps.chisquare(bins_o, bins_e, ddof=ddof).pvalue) if len(bins_o) - 1 - ddof >= 1 else 1.0


def clopper_pearson(k: int, n: int, confidence: float = 0.99) -> tuple[float, float]:
    """Clopper-Pearson interval of a binomial proportion k/n."""
    a = (1 - confidence) / 2
    lo = sps.beta.ppf(a, k, n - k + 1) if k > 0 else 0.0
    hi = sps.beta.ppf(1 - a, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def acceptance_by_position(orig, canonical: float, predicted: float, source: str, out, report_dir=None, *,
                           above_note: str = "ABOVE THE COUPLING BOUND") -> None:
    """Print the observed first-round acceptance per draft position from per-token origins ``orig`` (rows x tokens:
    0 = an accepted draft, -1 past the end) with 99% Clopper-Pearson intervals, against the acceptance ``predicted``
    from the engine's source (``source`` names the rule) and the canonical ``sum min(p, q)``; position 1's line goes to
    ``REPORT_DIR/acceptance.txt`` (the README audit matrix reads it)."""
    from pathlib import Path

    reached = orig[:, 1] >= 0
    acc = int((orig[reached, 1] == 0).sum())
    lo, hi = clopper_pearson(acc, int(reached.sum()))
    note = above_note if lo > canonical else "FAR BELOW CANONICAL" if hi < 0.5 * canonical else ""
    out(f"    ACCEPTANCE first round, draft position 1 (token 2): observed {acc / reached.sum():.3f} "
        f"[99% CI {lo:.3f}, {hi:.3f}] (n={int(reached.sum())}); predicted from the source ({source}) "
        f"{predicted:.3f}; canonical sum min(p, q) {canonical:.3f} {note}")
    if report_dir:
        Path(report_dir, "acceptance.txt").write_text(
            f"draft position 1 (token 2; round 1 starts after token 1): {acc / reached.sum():.3f} [99% CI {lo:.3f}, {hi:.3f}] "
            f"vs canonical {canonical:.3f} (predicted from the source {predicted:.3f}) {note.split(' (')[0]}\n")
    for j in range(2, orig.shape[1]):
        alive = (orig[:, 1:j] == 0).all(1) & (orig[:, j] >= 0)
        if alive.sum():
            a_j = int((orig[alive, j] == 0).sum())
            lo, hi = clopper_pearson(a_j, int(alive.sum()))
            out(f"        draft position {j}: observed {a_j / alive.sum():.3f} [99% CI {lo:.3f}, {hi:.3f}] "
                f"(n={int(alive.sum())}, rounds that reached it)")
