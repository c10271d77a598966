"""Statistics stage: one hypothesis test per cell of a sample set.

Cells of one sample set (decoder, prompt, sampling config, num_draft_tokens):

``gof@t``
    Pearson chi-square goodness of fit of emitted token ``t`` against its exact marginal law
    (:mod:`verifier.runner.expected`), categories pooled data-blind by target prob
    (:func:`verifier.stats.pooling.pool_categories`).  An emitted token with target prob 0 is a
    support violation (p-value 0, whatever the counts).
``joint@1..J``
    The same test on the tuple of the first J emitted tokens (``joint_tokens``, default 2).
    Below ~10 expected rows per category the test keeps categories down to an expected count
    of 1 apart and takes a Monte Carlo p-value (``gof_test``'s small-sample regime).
``surprisal@1..J``
    Mean surprisal ``-log P`` of the first J emitted tokens against the entropy of their exact law
    (:func:`verifier.stats.surprisal.surprisal_test`): one degree of freedom, the most powerful
    test against a temperature (sharpening or flattening) error, Monte Carlo p-value.  Its
    effect and MDE are in nats per row.
``pit``
    Randomized probability integral transform of every emitted token,
    ``u = F(x^-) + V * p(x)`` with tokens ordered by target prob descending and ``V`` from a
    generator independent of the decoder's; under the null the u's are iid Uniform(0, 1):
    one-sample Kolmogorov-Smirnov test (scipy).  Its effect and MDE are KS distances.
``collision@1..J``
    Identical disjoint pairs of whole continuations (the first J emitted tokens, rows ``2i`` and
    ``2i + 1`` in sampling order) against the exact collision probability: one-sided exact
    Poisson-binomial test (:mod:`verifier.stats.collisions`).  Only a decoder whose rows are not
    independent (a shared or repeated random stream, an ignored seed) fails it; every other cell
    sees one row at a time.  Its effect and MDE are an excess per-pair collision probability.
``serial@1``
    Serial correlation of the rows in request order: the randomized PIT of each row's first emitted
    token in token-id order (``u = F(x^-) + V p(x)``, ``F`` the target mass of the smaller ids), iid
    Uniform(0, 1) under the null, and a Ljung--Box test at lags 1..5 with a Monte Carlo p-value under
    that exact null (:mod:`verifier.stats.serial`).  Requests whose random streams are shifted copies of
    each other fail it though they rarely repeat a row (which the collision cell needs).  Its effect is
    the lag-1 autocorrelation, its MDE the smallest lag-1 autocorrelation detected at the cell's level.
``accepted``
    Not a bias cell: the test name asks for the acceptance audit (:mod:`verifier.runner.acceptance`),
    reported beside the verdict; only a decoder declaring ``acceptance = "canonical"`` gets its
    first-round accepted-count law tested, as acceptance rule conformance.

Every cell carries its n, statistic, p-value, effect estimate (total variation between observed
and expected on the pooled categories, bias-corrected, with a 95% interval whose coverage is
finite-sample valid: :mod:`verifier.stats.effect`) and its minimum detectable effect at the
per-cell level of the family-wise correction and the suite's power
(:func:`verifier.stats.gof.gof_mde`); a chi-square cell whose MDE exceeds the suite's
``target_mde`` also carries ``n_needed``, the rows per sample set that would reach it
(:func:`verifier.stats.power.samples_for_mde`).  A cell with a support violation has p-value 0
(the null cannot produce it) and shows the violation as its reason (``support_violation``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as sps

from verifier.protocols import PADDING_TOKEN_ID
from verifier.stats.pooling import pool_categories

__all__ = ["CellResult", "violation_text", "n_needed_for", "gof_cell", "surprisal_cell", "pit_cell", "collision_cell", "collision_result_cell", "serial_cell", "randomized_pit", "token_counts", "joint_counts"]

CI_LEVEL = 0.95  # confidence of the effect (TV) interval shown in reports
ENDED = -1  # category index meaning "the row had already ended (EOS) before this position"


@dataclass
class CellResult:
    """One cell's test result (serialised into report.json as is)."""

    id: str
    decoder: str
    set_id: str
    test: str
    method: str
    n: int
    statistic: float
    pvalue: float
    df: int | None = None
    effect: float | None = None  # TV (or KS distance for pit) between observed and expected
    effect_ci: tuple[float, float] | None = None
    effect_unit: str = "tv"
    mde: float | None = None  # minimum detectable effect, same unit as `effect`
    mde_w: float | None = None  # Cohen's w of the MDE (chi-square cells)
    cell_alpha: float | None = None
    n_needed: int | None = None  # rows per sample set that would bring `mde` down to the suite's target_mde
    support_violation: str | None = None
    adjusted_pvalue: float | None = None
    verdict: str = ""
    observed: list[float] | None = None  # pooled counts (for the report's bar chart)
    expected: list[float] | None = None  # pooled expected counts
    labels: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):  # unpacks as (statistic, pvalue)
        return iter((self.statistic, self.pvalue))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["effect_ci"] = list(self.effect_ci) if self.effect_ci is not None else None
        return {k: _json_float(v) for k, v in d.items()}


def _json_float(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def token_counts(tokens: np.ndarray, position: int, vocab: int) -> np.ndarray:
    """Counts of emitted token ``position`` (1-based) over ``vocab + 1`` categories (last = ended)."""
    col = tokens[:, position - 1]
    col = np.where(col == PADDING_TOKEN_ID, vocab, col)
    return np.bincount(col, minlength=vocab + 1).astype(np.int64)


def joint_counts(tokens: np.ndarray, joint_tokens: int, vocab: int) -> np.ndarray:
    """Counts of the first ``joint_tokens`` emitted tokens, flattened row-major from shape
    ``(vocab + 1,) * joint_tokens`` (index ``vocab`` = the row had ended)."""
    codes = np.zeros(len(tokens), dtype=np.int64)
    for t in range(joint_tokens):
        col = np.where(tokens[:, t] == PADDING_TOKEN_ID, vocab, tokens[:, t])
        codes = codes * (vocab + 1) + col
    return np.bincount(codes, minlength=(vocab + 1) ** joint_tokens).astype(np.int64)


def _count_cell_inputs(counts, expected_probs) -> tuple[np.ndarray, np.ndarray]:
    """(int64 counts, expected probs clipped at 0 and renormalised) of a count cell (float64 laws may carry -0 / 1e-17 noise)."""
    probs = np.clip(np.asarray(expected_probs, dtype=np.float64), 0.0, None)
    return np.asarray(counts, dtype=np.int64), probs / probs.sum()


def violation_text(violations: tuple, label_fn=None) -> str | None:
    """The reason a support violation is reported with: ``"token 'x' emitted 23 times at target prob 0"``
    (the most frequent violating token first, then how many others)."""
    if not violations:
        return None
    v = max(violations, key=lambda v: v.count)
    name = label_fn(v.token_id) if label_fn else str(v.token_id)
    text = f"token {name} emitted {v.count} time{'s' if v.count != 1 else ''} at target prob 0"
    more = len(violations) - 1
    return text + (f" (and {more} other token{'s' if more != 1 else ''} at target prob 0)" if more else "")


def n_needed_for(expected_probs: np.ndarray, n: int, *, cell_alpha: float, power: float, target_mde: float) -> int | None:
    """Smallest number of rows at which :func:`verifier.stats.gof.gof_mde` of this cell is <= ``target_mde``
    (None when no n up to :data:`verifier.stats.power.MAX_PLANNED_SAMPLES` reaches it).

    A pure function of its arguments, memoised on the law's bytes: every decoder of a suite tests the same
    expected laws at the same n, and the search costs ~15 gof_mde calls (issue 17: 16 of 58 s CPU of the
    statistics stage of ``nightly --profile ci`` before the memo)."""
    probs = np.ascontiguousarray(expected_probs, dtype=np.float64)
    return _n_needed(probs.tobytes(), int(n), float(cell_alpha), float(power), float(target_mde))


@functools.lru_cache(maxsize=4096)
def _n_needed(probs_bytes: bytes, n: int, cell_alpha: float, power: float, target_mde: float) -> int | None:
    from verifier.stats.gof import gof_mde
    from verifier.stats.power import samples_for_mde

    probs = np.frombuffer(probs_bytes, dtype=np.float64)
    return samples_for_mde(lambda m: gof_mde(m, probs, alpha=cell_alpha, power=power).tv, target_mde, n_min=max(n, 1))


def gof_cell(cell_id: str, counts: np.ndarray, expected_probs: np.ndarray, *, cell_alpha: float,
             power: float, rng: np.random.Generator, label_fn=None, target_mde: float | None = None,
             **meta: Any) -> CellResult:
    """Pooled Pearson chi-square GOF of ``counts`` against ``expected_probs`` (:func:`verifier.stats.gof_test`).

    Parameters
    ----------
    counts : np.ndarray, shape (categories,), int64
    expected_probs : np.ndarray, shape (categories,), float64
        Exact law under the null (sums to 1).
    cell_alpha : float
        Per-cell level of the correction: decides asymptotic vs Monte Carlo p-values and the
        level at which the minimum detectable effect is stated.
    power : float
        Power at which the MDE is stated (suite ``stats.power``, default 0.99).
    rng : np.random.Generator
        For Monte Carlo p-values.
    label_fn : callable (category index) -> str, optional
        Names a category in the support-violation message and the labels.
    target_mde : float, optional
        The suite's target MDE (TV); when the cell's MDE exceeds it, ``n_needed`` is set.

    Returns
    -------
    CellResult
        ``support_violation`` (its reason, :func:`violation_text`) and ``pvalue = 0`` when a
        category with expected prob 0 was observed.  A single-outcome expected law is a support
        check (:func:`verifier.stats.gof_test`).
    """
    from verifier.stats.gof import gof_test

    test = meta.pop("test", "gof")
    counts, expected_probs = _count_cell_inputs(counts, expected_probs)
    n = int(counts.sum())
    if n == 0:
        return CellResult(cell_id, test=test, method="no samples", n=0, statistic=math.nan, pvalue=1.0, **meta)
    res = gof_test(counts, expected_probs, alpha=cell_alpha, rng=rng, power=power, confidence=CI_LEVEL, test=test)
    violation = violation_text(res.support_violations, label_fn)
    mde = float(res.mde.tv) if res.mde else None
    n_needed = None
    if target_mde is not None and mde is not None and mde > target_mde and not violation:
        n_needed = n_needed_for(expected_probs, n, cell_alpha=cell_alpha, power=power, target_mde=target_mde)
    pooling = pool_categories(expected_probs, n, min_expected=res.min_expected)  # the test's own pooling
    observed = pooling.pool(counts).astype(np.float64)
    labels = []
    by_group = np.argsort(pooling.groups, kind="stable")  # one pass, not one scan of all categories per group
    bounds = np.searchsorted(pooling.groups[by_group], np.arange(pooling.num_categories + 1))
    for g in range(pooling.num_categories):
        members = by_group[bounds[g]:bounds[g + 1]]
        names = [label_fn(int(m)) if label_fn else str(int(m)) for m in members[:3]]
        labels.append(", ".join(names) + (f" +{len(members) - 3}" if len(members) > 3 else ""))
    eff = res.effect
    method = (res.method if res.method.startswith("support check")
              else f"pearson chi-square, data-blind pooling, {res.method} p-value")
    return CellResult(
        cell_id, test=test, method=("support violation; " if violation else "") + method, n=n,
        statistic=float(res.statistic), pvalue=0.0 if violation else float(res.pvalue), df=res.df,
        effect=eff.estimate if eff else None, effect_ci=(eff.ci_low, eff.ci_high) if eff else None,
        mde=mde, mde_w=float(res.mde.w) if res.mde and math.isfinite(res.mde.w) else None,
        cell_alpha=cell_alpha, n_needed=n_needed, support_violation=violation,
        observed=observed.tolist(), expected=(pooling.expected_probs * n).tolist(), labels=labels,
        extra={"num_resamples": res.num_resamples, "effect_method": eff.method if eff else None,
               "effect_plug_in": eff.plug_in if eff else None}, **meta,
    )


def surprisal_cell(cell_id: str, counts: np.ndarray, expected_probs: np.ndarray, *, cell_alpha: float, power: float,
                   label_fn=None, **meta: Any) -> CellResult:
    """Surprisal test of the outcome counts of a cell against their exact law (module docstring).

    Parameters
    ----------
    counts : np.ndarray, shape (categories,), int64
        E.g. :func:`joint_counts` of the first J emitted tokens.
    expected_probs : np.ndarray, shape (categories,), float64
        Exact law of the same categories.
    cell_alpha, power : float
        Per-cell level (Monte Carlo resolution) and the power at which the MDE is stated.
    label_fn : callable (category index) -> str, optional
        Names a category in the support-violation message.

    Returns
    -------
    CellResult
        ``effect`` = mean surprisal minus entropy (nats per row; negative: too likely outputs)
        with a 95% normal interval; ``mde`` in the same unit.
    """
    from verifier.stats.surprisal import surprisal_test

    test = meta.pop("test", "surprisal")
    counts, expected_probs = _count_cell_inputs(counts, expected_probs)
    n = int(counts.sum())
    if n == 0:
        return CellResult(cell_id, test=test, method="no samples", n=0, statistic=math.nan, pvalue=1.0, **meta)
    res = surprisal_test(counts, expected_probs, alpha=cell_alpha, power=power, confidence=CI_LEVEL)
    violation = violation_text(res.support_violations, label_fn)
    return CellResult(
        cell_id, test=test, method=("support violation; " if violation and "support violation" not in res.method else "")
        + f"mean surprisal vs entropy {res.entropy:.4g} nats, {res.method} p-value", n=n,
        statistic=float(res.statistic), pvalue=0.0 if violation else float(res.pvalue), effect=float(res.statistic),
        effect_ci=(float(res.ci_low), float(res.ci_high)), effect_unit="nats", mde=float(res.mde),
        cell_alpha=cell_alpha, support_violation=violation,
        extra={"entropy": res.entropy, "varentropy": res.varentropy, "num_resamples": res.num_resamples}, **meta,
    )


def collision_cell(cell_id: str, window: np.ndarray, row_probs: np.ndarray, collision_prob: float, *, cell_alpha: float,
                   power: float, pooled: bool = False, **meta: Any) -> CellResult:
    """Collision test of a sample set's rows in sampling order (module docstring, ``collision@1..J``).

    Parameters
    ----------
    window : np.ndarray, shape (rows, J), int64
        The first J emitted tokens of every row, in the order the decoder returned them (padding -1 after EOS).
    row_probs : np.ndarray, shape (rows,), float64
        Exact probability of each row's window under the processed target law (a pooled category's
        mass where the law is pooled: at least the row's own probability, so the test stays valid).
    collision_prob : float
        Exact collision probability ``sum_x P(x)^2`` of the window's law (reported); with ``pooled``, that of the
        pooled law ("other" counted as one outcome): an upper bound of the exact one, reported as such.
    cell_alpha, power : float
        Per-cell level and the power at which the MDE is stated.
    pooled : bool, default False
        The window's law is pooled (top outcomes + "other", :class:`verifier.runner.expected.PositionLaws`).

    Returns
    -------
    CellResult
        ``statistic`` = identical pairs; ``effect`` = observed minus expected identical share per pair;
        ``mde`` in the same unit (``effect_unit = "collision"``).  Fewer than 2 rows: ``n = 0``, p = 1.
    """
    from verifier.stats.collisions import collision_test, identical_pairs

    test = meta.pop("test", "collision")
    rows = int(window.shape[0])
    if rows < 2:
        return CellResult(cell_id, test=test, method="fewer than 2 rows: no pair", n=0, statistic=math.nan,
                          pvalue=1.0, effect_unit="collision", **meta)
    same = identical_pairs([tuple(r) for r in window.tolist()])
    res = collision_test(row_probs[0:2 * same.size:2], same, collision_prob=collision_prob, alpha=cell_alpha,
                         power=power)
    return collision_result_cell(cell_id, test, res, pairs_of="in sampling order", tokens=int(window.shape[1]),
                                 law="the pooled law" if pooled else "the exact law", cell_alpha=cell_alpha,
                                 prob_bound=pooled, extra={"distinct_rows": len({tuple(r) for r in window.tolist()})},
                                 **meta)


def collision_result_cell(cell_id: str, test: str, res: Any, *, pairs_of: str, tokens: int, law: str, cell_alpha: float,
                          dropped: str = "", extra: dict | None = None, prob_bound: bool = False,
                          **meta: Any) -> CellResult:
    """The CellResult of a :class:`~verifier.stats.collisions.CollisionResult` (the runner's ``collision@1..J`` and the
    self-reported design's collision cells): ``pairs_of`` says whose pairs, ``law`` against what, ``dropped`` an
    optional tail of the method text; ``extra`` joins the common figures; ``prob_bound``: ``res.collision_prob`` is an
    upper bound (a pooled law's), written ``<=``.  A collision probability that is not a number is left out."""
    prob = res.collision_prob
    shown = (f"collision prob {'<= ' if prob_bound else ''}{prob:.3g}"
             + (" ('other' counted as one outcome)" if prob_bound else "") + "; ") if math.isfinite(prob) else ""
    return CellResult(
        cell_id, test=test,
        method=(f"identical disjoint pairs {pairs_of}, first {tokens} tokens, one-sided exact Poisson-binomial test "
                f"against {law} ({shown}{res.statistic} identical of {res.pairs} pairs, "
                f"{res.expected:.3g} expected; rejects from {res.critical}{dropped})"),
        n=res.pairs, statistic=float(res.statistic), pvalue=res.pvalue, effect=res.excess, effect_unit="collision",
        mde=res.mde, cell_alpha=cell_alpha,
        extra={"identical_pairs": res.statistic, "expected": res.expected, "collision_prob": res.collision_prob,
               **({"collision_prob_bound": True} if prob_bound else {}), "critical": res.critical, **(extra or {})},
        **meta)


def serial_cell(cell_id: str, first_tokens: np.ndarray, law: np.ndarray, *, rng: np.random.Generator, cell_alpha: float,
                power: float, label_fn=None, **meta: Any) -> CellResult:
    """Serial-correlation test of a sample set's rows in request order (module docstring, ``serial@1``).

    Parameters
    ----------
    first_tokens : np.ndarray, shape (rows,), int64
        Each row's first emitted token, in the order the decoder returned the rows (chunk after chunk).
    law : np.ndarray, shape (vocab + 1,), float64
        Exact law of the first emitted token (:attr:`verifier.runner.expected.PositionLaws.marginals` ``[1]``).
    rng : np.random.Generator
        The PIT's V's and the seed of the Monte Carlo null sequences: independent of the decoder.
    cell_alpha, power : float
        Per-cell level (Monte Carlo draws) and the power at which the MDE is stated.
    label_fn : callable (token id) -> str, optional
        Names a token in the support-violation message.

    Returns
    -------
    CellResult
        ``statistic`` = Ljung--Box Q; ``effect`` = lag-1 autocorrelation with its 95% null interval;
        ``mde`` = smallest detectable lag-1 autocorrelation (``effect_unit = "autocorrelation"``).  Fewer than
        :data:`verifier.stats.serial.SERIAL_MIN_ROWS` rows: ``n`` rows, p = 1, "not tested".  A first token at
        target prob 0 is a support violation (p = 0) and leaves its row out of the sequence.
    """
    from verifier.stats.pit import randomized_pit_from_cdf
    from verifier.stats.results import SupportViolation
    from verifier.stats.serial import SERIAL_LAGS, SERIAL_MIN_ROWS, serial_test

    test = meta.pop("test", "serial")
    law = np.clip(np.asarray(law, dtype=np.float64), 0.0, None)
    law = law / law.sum()
    x = np.asarray(first_tokens, dtype=np.int64)
    p_x = law[x]
    zero = p_x == 0
    bad, cnt = np.unique(x[zero], return_counts=True)
    violation = violation_text(tuple(SupportViolation(int(t), int(c)) for t, c in zip(bad, cnt)), label_fn)
    u = randomized_pit_from_cdf((np.cumsum(law) - law)[x[~zero]], p_x[~zero], rng)  # token-id order
    if u.size < SERIAL_MIN_ROWS or np.ptp(u) == 0:
        return CellResult(cell_id, test=test, method=f"fewer than {SERIAL_MIN_ROWS} rows: not tested", n=int(u.size),
                          statistic=math.nan, pvalue=0.0 if violation else 1.0, effect_unit="autocorrelation",
                          support_violation=violation, cell_alpha=cell_alpha, **meta)
    res = serial_test(u, alpha=cell_alpha, power=power, lags=SERIAL_LAGS, null_seed=int(rng.integers(2**63)))
    return CellResult(
        cell_id, test=test, method=("support violation; " if violation else "")
        + f"randomized PIT of the first token in token-id order, rows in request order; Ljung-Box Q over lags "
          f"1..{res.lags} (statsmodels), {res.method} p-value", n=res.n, statistic=res.statistic,
        pvalue=0.0 if violation else res.pvalue, df=res.lags, effect=res.effect, effect_ci=res.ci,
        effect_unit="autocorrelation", mde=res.mde, cell_alpha=cell_alpha, support_violation=violation,
        extra={"acf": [round(v, 6) for v in res.acf], "lags": res.lags, "null_draws": res.draws}, **meta)


def randomized_pit(tokens: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, tuple]:
    """Randomized PIT of emitted tokens (:func:`verifier.stats.pit.randomized_pit`).

    Parameters
    ----------
    tokens : np.ndarray, shape (rows,), int64
        Emitted tokens, ``-1`` (padding) skipped.
    probs : np.ndarray, shape (rows, vocab), float64
        Teacher-forced processed target probs for each token's prefix.
    rng : np.random.Generator
        Independent of the decoder's randomness.

    Returns
    -------
    u : np.ndarray, float64 -- iid Uniform(0, 1) under the null.
    violations : tuple of SupportViolation
    """
    from verifier.stats.pit import randomized_pit as _pit

    return _pit(tokens, probs, rng)


def _merge_violations(violations: tuple) -> tuple:
    """One :class:`~verifier.stats.results.SupportViolation` per token (the PIT collects them per batch)."""
    from verifier.stats.results import SupportViolation

    total: dict[int, int] = {}
    for v in violations:
        total[v.token_id] = total.get(v.token_id, 0) + v.count
    return tuple(SupportViolation(t, c) for t, c in total.items())


def pit_cell(cell_id: str, u: np.ndarray, *, cell_alpha: float, power: float, violations: tuple = (),
             **meta: Any) -> CellResult:
    """One-sample KS test of randomized-PIT values against Uniform(0, 1).

    The MDE is the KS distance detected with probability ``power`` at level ``cell_alpha``,
    from the asymptotic Kolmogorov law: ``(K_{1-alpha} + z_power / 2) / sqrt(n)`` (the empirical
    CDF at the maximising point has standard deviation <= 1 / (2 sqrt(n))).
    """
    n = int(u.size)
    if n == 0:
        return CellResult(cell_id, test="pit", method="no samples", n=0, statistic=math.nan, pvalue=1.0, **meta)
    from verifier.stats.pit import pit_ks_test

    res = pit_ks_test(u, alpha=cell_alpha)
    k_alpha = float(sps.kstwobign.isf(cell_alpha))
    mde = (k_alpha + float(sps.norm.isf(1 - power)) / 2) / math.sqrt(n)
    half = float(sps.kstwobign.isf(1 - CI_LEVEL)) / math.sqrt(n)  # DKW-type band for the KS distance
    d = float(res.statistic)
    hist, _ = np.histogram(u, bins=20, range=(0.0, 1.0))
    violation = violation_text(_merge_violations(violations))
    return CellResult(
        cell_id, test="pit", method=("support violation; " if violation else "")
        + f"randomized PIT, Kolmogorov-Smirnov vs Uniform(0,1), {res.method} p-value", n=n,
        statistic=d, pvalue=0.0 if violation else float(res.pvalue), effect=d, effect_ci=(max(0.0, d - half), min(1.0, d + half)),
        effect_unit="ks", mde=min(mde, 1.0), cell_alpha=cell_alpha,
        support_violation=violation,
        observed=hist.astype(float).tolist(), expected=[n / 20.0] * 20,
        extra={"quantiles": np.quantile(u, np.linspace(0, 1, 101)).round(6).tolist()}, **meta,
    )
