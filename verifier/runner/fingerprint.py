"""Acceptance fingerprint of a fixed (synthetic) acceptance mode: per-position rates that ignore p and q.

Serving engines have benchmarking modes that accept draft j with a configured probability whatever the target
and draft probs are (vLLM ``rejection_sample_method = "synthetic"``; the zoo's ``synthetic_acceptance``).  Left on,
such a mode biases the output law (the bias cells see that) and leaves a fingerprint in the acceptance audit:
the first-round acceptance at draft position j is the **same in every sample set** of the decoder (prompt,
temperature, top-k/top-p), where any rule that reads p and q follows the sets' probabilities.  This module looks
for that fingerprint across the sample sets of one decoder (:func:`fixed_acceptance_check`, called once per
decoder at the end of the statistics stage, beside :func:`verifier.runner.acceptance.coupling_bound_check`).

Test, per draft position j over the sets that reached it and have a canonical figure (the canonical rule's
conditional acceptance ``r_s`` at j, from the exact first-round accepted-count law of
:func:`verifier.runner.expected.accepted_count_law` -- the audit's ``canonical``), with ``n_s`` rounds reaching j,
``N = sum n_s``, ``w_s = n_s / N``:

* the canonical spread: ``phi_c^2 = sum_s w_s (r_s - rbar)^2 / (rbar (1 - rbar))`` (Cohen's w^2 of the sets'
  canonical rates, ``rbar = sum w_s r_s``) -- how far apart a decoder that reads p and q shows the sets;
* **one rate fits every set** (an equivalence test): the Pearson chi-square homogeneity statistic ``X^2`` of the
  accepted / not-accepted counts (2 x S, S - 1 df) is implausibly *small* for a decoder whose own spread is at least
  :data:`SPREAD_FRACTION` (gamma = 1/4) of the canonical one: ``P(X^2 <= observed)`` under the noncentral chi-square
  with ``lambda_0 = N gamma^2 phi_c^2`` (the least spread of that class; the lower tail shrinks as lambda grows) is
  at most ``alpha * ACCUSATION_ALPHA_SHARE / k`` (Bonferroni over the k positions);
* **not the canonical rates**: the set farthest from its canonical rate (z score) has a count implausible under it,
  an exact two-sided binomial test at the same level divided by the sets (Bonferroni: valid for a set chosen by the
  data; reported as the evidence against the exact canonical acceptance).

A position meeting both fingerprints the decoder.  Error control: any decoder whose per-set acceptance varies across
the sets by at least a quarter of the canonical rule's spread (in Cohen's w units, at every position) -- the
canonical rule itself, ``fresh_target_match`` (about 0.46 of it on tests/runner/suites/lossy.toml),
``block_verification`` (more than canonical at position 2) -- is flagged with probability at most ``alpha *
ACCUSATION_ALPHA_SHARE`` (1e-5 at the default family alpha 1e-3; the same policy as "ABOVE THE COUPLING BOUND": an
accusation must essentially never hit a correct decoder), asymptotically (noncentral chi-square; calibration
simulated in tests/runner/test_acceptance_fingerprint.py).  A decoder whose acceptance varies less than that across
the sets is, as far as these sets can tell, not reading p and q.  Power: the synthetic mode is flagged when
``lambda_0`` reaches about 55 (positions where a set expects fewer than :data:`MIN_EXPECTED` accepted or rejected
rounds at the pooled rate are not tested: the approximation needs them; S = 6: ``N phi_c^2 >= 880``; 1,000 rounds per set on lossy.toml, where ``phi_c^2 =
0.15`` at draft 1); less data says "not tested" with the rounds it would need.  Like every acceptance finding it is
an efficiency / configuration finding, **never a bias verdict**: the verdict comes from the output law (the mode's
bias is visible there whenever the fixed rate is not the canonical one).

Glossary: see :mod:`verifier.protocols` (accepted, round, num_draft_tokens).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats as sps
from scipy.optimize import brentq

from verifier.runner.acceptance import ACCUSATION_ALPHA_SHARE

__all__ = ["SPREAD_FRACTION", "FINGERPRINT_TEST", "FIXED_ACCEPTANCE", "fixed_acceptance_check", "equivalence_pvalue"]

MIN_EXPECTED = 5  # a position is tested when every set expects >= this many accepted and rejected rounds (pooled rate)
SPREAD_FRACTION = 0.25  # gamma: decoders whose acceptance spread across sets is >= this x the canonical one are protected
FINGERPRINT_TEST = ("per draft position across the decoder's sample sets: chi-square homogeneity statistic implausibly "
                    f"small for any decoder whose acceptance varies >= {SPREAD_FRACTION:g} x the canonical rule's spread "
                    "(noncentral chi-square lower tail), and an exact binomial test against a set's canonical rate; both at "
                    "the accusation level, Bonferroni over positions (and sets)")
FIXED_ACCEPTANCE = ("ACCEPTANCE INDEPENDENT OF THE TARGET AND DRAFT PROBS: a synthetic/fixed acceptance mode looks like "
                    "this")


def _position_rows(audits: list[dict[str, Any]], j: int) -> list[tuple[str, int, int, float]]:
    rows = []
    for a in audits:
        pos = next((p for p in a.get("positions") or [] if p.get("position") == j), None)
        if pos and pos.get("reached") and pos.get("canonical") is not None:
            rows.append((a.get("label", a.get("set_id", "?")), int(pos["reached"]), int(pos["accepted"]), float(pos["canonical"])))
    return rows


def _homogeneity_statistic(n: np.ndarray, a: np.ndarray) -> float:
    """Pearson 2 x S homogeneity statistic (0 when every round accepted, or none: one rate fits exactly)."""
    c = a.sum() / n.sum()
    if c <= 0 or c >= 1:
        return 0.0
    return float(((a - n * c) ** 2 / (n * c * (1 - c))).sum())


def _canonical_spread(n: np.ndarray, r: np.ndarray) -> float:
    """phi_c^2: Cohen's w^2 of the canonical rates across the sets, weighted by the rounds reaching the position."""
    w = n / n.sum()
    rbar = float((w * r).sum())
    if rbar <= 0 or rbar >= 1:
        return 0.0
    return float((w * (r - rbar) ** 2).sum() / (rbar * (1 - rbar)))


def equivalence_pvalue(reached, accepted, canonical, spread_fraction: float = SPREAD_FRACTION) -> tuple[float, float]:
    """P-value of "this decoder's acceptance varies across the sets by >= spread_fraction x the canonical spread".

    Parameters
    ----------
    reached, accepted : array_like of int, shape (S,)
        Rounds reaching the draft position and rounds accepting it, per sample set (S >= 2, reached > 0).
    canonical : array_like of float, shape (S,)
        The canonical rule's conditional acceptance at the position in each set (exact).
    spread_fraction : float, default :data:`SPREAD_FRACTION`

    Returns
    -------
    (pvalue, lambda_0) : float
        ``P(X^2 <= observed)`` under the noncentral chi-square (S - 1 df, ``lambda_0 = N gamma^2 phi_c^2``); small =
        the sets' acceptance is more alike than any decoder of that class shows them (asymptotic); 1 when the
        canonical rates are equal (``lambda_0 = 0``).
    """
    n = np.asarray(reached, dtype=np.float64)
    a = np.asarray(accepted, dtype=np.float64)
    lam0 = float(n.sum() * spread_fraction ** 2 * _canonical_spread(n, np.asarray(canonical, dtype=np.float64)))
    if lam0 <= 0:  # the sets' canonical rates are equal: nothing to tell a fixed rate from
        return 1.0, 0.0
    return float(sps.ncx2.cdf(_homogeneity_statistic(n, a), len(n) - 1, lam0)), lam0


def _rounds_for_power(df: int, level: float, spread: float) -> int | None:
    """Rounds N at which a decoder with one fixed rate is flagged with power 0.95 (None: equal canonical rates)."""
    return None if spread <= 0 else int(np.ceil(_lambda_for_power(df, level) / (SPREAD_FRACTION ** 2 * spread)))


@lru_cache(maxsize=256)
def _lambda_for_power(df: int, level: float, power: float = 0.95) -> float:
    target = float(sps.chi2.ppf(power, df))  # a fixed rate's X^2 is central chi-square
    return float(brentq(lambda x: float(sps.ncx2.ppf(level, df, x)) - target, 1e-6, 1e7))


def _binomial_p(a: int, n: int, r: float) -> float:
    """Exact two-sided binomial p-value (outcomes no more likely than ``a``; = ``scipy.stats.binomtest``'s)."""
    if r <= 0 or r >= 1:
        return 1.0 if a == round(n * r) else 0.0
    pmf = sps.binom.pmf(np.arange(n + 1), n, r)
    return float(min(1.0, pmf[pmf <= pmf[a] * (1 + 1e-7)].sum()))


def fixed_acceptance_check(audits: list[dict[str, Any]], alpha: float) -> dict[str, Any] | None:
    """Look for per-position acceptance that does not depend on the sample set (prompt, T) in one decoder's audits.

    Parameters
    ----------
    audits : list of dict
        The decoder's acceptance audits (:meth:`verifier.runner.acceptance.AcceptanceAudit.to_dict`); when the
        fingerprint is found, each audit of a tested set gets ``fixed_acceptance = True`` and the loud note
        (modified in place).
    alpha : float
        The run's family alpha (``stats.alpha``); the check runs at ``alpha * ACCUSATION_ALPHA_SHARE``, Bonferroni
        over the draft positions.

    Returns
    -------
    dict or None
        None when no audit reported first-round statistics.  Else ``test``, ``alpha`` (the accusation level),
        ``spread_fraction``, ``positions`` ([{position, sets, rounds, common_rate, homogeneity_statistic, lambda_0,
        equivalence_pvalue, canonical_min, canonical_max, canonical_spread, min_binomial_pvalue, level, worst_set,
        rounds_for_power, fingerprint}]), ``flagged`` and ``note``.

    Examples
    --------
    >>> def audit(label, reached, accepted, canonical):
    ...     return {"label": label, "num_draft_tokens": 1, "reported": True,
    ...             "positions": [{"position": 1, "reached": reached, "accepted": accepted, "canonical": canonical}]}
    >>> fixed = [audit("a", 800, 640, 0.35), audit("b", 800, 636, 0.9), audit("c", 800, 645, 0.6)]
    >>> fixed_acceptance_check(fixed, 1e-3)["flagged"]
    True
    >>> follows = [audit("a", 800, 285, 0.35), audit("b", 800, 716, 0.9), audit("c", 800, 475, 0.6)]
    >>> fixed_acceptance_check(follows, 1e-3)["flagged"]
    False
    """
    reported = [a for a in audits if a.get("reported") and a.get("positions")]
    if not reported:
        return None
    with_canon = [a for a in reported if any(p.get("canonical") is not None for p in a["positions"])]
    level = float(alpha) * ACCUSATION_ALPHA_SHARE
    out: dict[str, Any] = {"test": FINGERPRINT_TEST, "alpha": level, "spread_fraction": SPREAD_FRACTION, "positions": [],
                           "untested": [], "flagged": False, "note": ""}
    if len(with_canon) < 2:
        out["note"] = ("acceptance fingerprint not tested: it compares sample sets with a canonical figure, and "
                       f"{len(with_canon)} set(s) have one")
        return out
    k = max(len(a["positions"]) for a in with_canon)
    per_position = level / k
    for j in range(1, k + 1):
        rows = _position_rows(with_canon, j)
        if len(rows) < 2:
            continue
        n = np.array([r[1] for r in rows], dtype=np.float64)
        acc = np.array([r[2] for r in rows], dtype=np.float64)
        canon = np.array([r[3] for r in rows])
        pooled = acc.sum() / n.sum()
        if min(n.min() * pooled, n.min() * (1 - pooled)) < MIN_EXPECTED:  # the chi-square approximation needs them
            out["untested"].append(f"draft {j}: a set expects fewer than {MIN_EXPECTED} accepted or rejected rounds")
            continue
        with np.errstate(divide="ignore", invalid="ignore"):  # the set farthest from its canonical rate (z score)
            z = np.abs(acc - n * canon) / np.sqrt(n * canon * (1 - canon))
        z = np.where(np.isnan(z), 0.0, z)
        worst = int(np.argmax(z))
        binom_worst = _binomial_p(int(acc[worst]), int(n[worst]), float(canon[worst]))  # Bonferroni over the sets below
        pvalue, lam0 = equivalence_pvalue(n, acc, canon)
        pos = {"position": j, "sets": len(rows), "rounds": int(n.sum()), "common_rate": float(acc.sum() / n.sum()),
               "homogeneity_statistic": _homogeneity_statistic(n, acc), "lambda_0": lam0, "equivalence_pvalue": pvalue,
               "canonical_min": float(canon.min()), "canonical_max": float(canon.max()),
               "canonical_spread": _canonical_spread(n, canon), "min_binomial_pvalue": binom_worst, "level": per_position,
               "worst_set": {"label": rows[worst][0], "reached": rows[worst][1], "accepted": rows[worst][2],
                             "canonical": rows[worst][3]}}
        pos["rounds_for_power"] = _rounds_for_power(len(rows) - 1, per_position, pos["canonical_spread"])
        pos["fingerprint"] = bool(pvalue <= per_position and binom_worst <= per_position / len(rows))
        out["positions"].append(pos)
    hits = [p for p in out["positions"] if p["fingerprint"]]
    out["flagged"] = bool(hits)
    if not out["positions"]:
        out["note"] = ("acceptance fingerprint not tested: " + ("; ".join(out["untested"]) if out["untested"] else
                                                                "fewer than 2 sets reached any draft position"))
    elif hits:
        out["note"] = _loud(hits[0], level)
        for a in with_canon:
            a["fixed_acceptance"] = True
            a["note"] = f"{FIXED_ACCEPTANCE} (see the decoder's acceptance fingerprint); {a.get('note', '')}"
    else:
        out["note"] = ("no fixed per-position acceptance shown (" + "; ".join(
            f"draft {p['position']}: P(rates this alike | spread >= {SPREAD_FRACTION:g} x canonical) = "
            f"{p['equivalence_pvalue']:.2g} > {p['level']:.2g}" + _need(p) for p in out["positions"]) + ")")
    return out


def _need(p: dict[str, Any]) -> str:
    need = p["rounds_for_power"]
    if need is None:
        return ", the sets' canonical rates are equal: no fingerprint possible"
    return f", {p['rounds']} rounds; a fixed rate is seen with power 0.95 from about {need}" if p["rounds"] < need else ""


def _loud(p: dict[str, Any], level: float) -> str:
    w = p["worst_set"]
    return (f"{FIXED_ACCEPTANCE}: draft {p['position']} accepted at {p['common_rate']:.3f} in every one of {p['sets']} "
            f"sample sets although the canonical rule's acceptance there ranges {p['canonical_min']:.3f}-"
            f"{p['canonical_max']:.3f}: rates this alike have p = {p['equivalence_pvalue']:.2g} <= {p['level']:.2g} for "
            f"any decoder whose acceptance varies with the sets by >= {SPREAD_FRACTION:g} x the canonical spread; "
            f"{w['label']}: {w['accepted']} of {w['reached']} ({w['accepted'] / w['reached']:.3f}) where the canonical "
            f"rule accepts {w['canonical']:.3f} (exact binomial p = {p['min_binomial_pvalue']:.2g}); accusation level "
            f"{level:g} over the positions.  The acceptance does not depend on the prompt or on T: look for a "
            "synthetic-acceptance or benchmarking option left on (vLLM rejection_sample_method='synthetic').  An "
            "efficiency/configuration finding, not a bias verdict")
