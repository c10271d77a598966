"""Calibration ("test the tester"): size under the null, power on DESIGN.md's reference bias.

Every test here states its seed, alpha and the effect it can detect.  Size checks: samples drawn
from the exact target law, alpha 0.01, RUNS = 2000 simulated runs; the number of false alarms
must lie in the 99% binomial interval of Bin(2000, 0.01), i.e. 10..31 (an e-process only needs
the upper end: Ville's inequality bounds it by alpha).  A check fails for a miscalibrated test
with false-alarm rate below 0.5% or above 1.6% with probability > 0.99.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verifier.stats import (
    adjust,
    e_process,
    gof_power,
    gof_pvalues,
    gof_test,
    pit_chi2_test,
    pit_ks_test,
    randomized_pit,
    samples_needed,
    two_sample_chi2_test,
    two_sample_ks_test,
)

from .laws import full_p_fallback_law

pytestmark = [pytest.mark.slow, pytest.mark.full]

ALPHA = 0.01
RUNS = 2000
LO, HI = (int(v) for v in stats.binom.interval(0.99, RUNS, ALPHA))

_zipf = 1.0 / np.arange(1, 501) ** 1.1
LAWS = {
    # name: (target probs, samples per run)
    "vocab3": (np.array([0.2, 0.5, 0.3]), 200),
    "vocab8": (np.array([0.3, 0.2, 0.15, 0.12, 0.1, 0.07, 0.04, 0.02]), 500),
    "zipf500": (_zipf / _zipf.sum(), 5000),
}


def assert_size(false_alarms: int, what: str, two_sided: bool = True) -> None:
    rate = false_alarms / RUNS
    assert false_alarms <= HI, f"{what}: false-alarm rate {rate:.4f} above the 99% interval of {ALPHA} ({LO}..{HI} of {RUNS})"
    if two_sided:
        assert false_alarms >= LO, f"{what}: false-alarm rate {rate:.4f} below the 99% interval of {ALPHA} ({LO}..{HI} of {RUNS})"


@pytest.mark.parametrize("law", LAWS)
def test_gof_size(law):
    """Seed 100+i; asymptotic (auto at alpha .01) and Monte Carlo Pearson p-values."""
    probs, n = LAWS[law]
    rng = np.random.default_rng(100 + list(LAWS).index(law))
    counts = rng.multinomial(n, probs, size=RUNS)
    asym = sum(gof_test(c, probs, alpha=ALPHA, num_bootstrap=0, pvalue_method="asymptotic").pvalue <= ALPHA for c in counts)
    assert gof_test(counts[0], probs, alpha=ALPHA, pvalue_method="asymptotic").method == "asymptotic"
    assert_size(asym, f"GOF asymptotic, {law}")
    assert np.count_nonzero(gof_pvalues(counts, probs) <= ALPHA) == asym
    mc = sum(gof_test(c, probs, alpha=ALPHA, pvalue_method="monte-carlo", num_resamples=999, rng=rng, num_bootstrap=0).pvalue <= ALPHA for c in counts[:RUNS])
    assert_size(mc, f"GOF Monte Carlo, {law}")


@pytest.mark.parametrize("law, n", [("vocab3", 12), ("vocab8", 60)])
def test_gof_small_sample_monte_carlo_size(law, n):
    """Seed 150+n; the small-sample regime (finer pooling, Monte Carlo p-value) at n far below the
    10-per-category rule.  Run i uses B = 1999 + i null draws, so each run has its own null sample
    (the size is unconditional, as for a user who runs once)."""
    probs, _ = LAWS[law]
    rng = np.random.default_rng(150 + n)
    counts = rng.multinomial(n, probs, size=RUNS)
    res = [gof_test(c, probs, alpha=ALPHA, num_resamples=1999 + i, num_bootstrap=0) for i, c in enumerate(counts)]
    assert all("small-sample monte-carlo" in r.method for r in res)  # alone, or min with the 10-floor test x 2
    # discrete statistic at tiny n: the exact size may sit below alpha, never above it
    assert_size(sum(r.pvalue <= ALPHA for r in res), f"GOF small-sample Monte Carlo, {law} n={n}", two_sided=False)


@pytest.mark.parametrize("law", LAWS)
def test_pit_size(law):
    """Seed 200+i; randomized PIT of target samples, KS and binned chi-square on each run's u's."""
    probs, n = LAWS[law]
    n = min(n, 1000)  # KS cost grows with n; 1000 PIT values per run
    rng = np.random.default_rng(200 + list(LAWS).index(law))
    tokens = rng.choice(len(probs), size=RUNS * n, p=probs)
    u, bad = randomized_pit(tokens, probs, rng=np.random.default_rng(rng.integers(2**63)))
    assert bad == ()
    u = u.reshape(RUNS, n)
    assert_size(sum(pit_ks_test(row).pvalue <= ALPHA for row in u), f"PIT KS, {law}")
    assert_size(sum(pit_chi2_test(row).pvalue <= ALPHA for row in u), f"PIT binned chi-square, {law}")


@pytest.mark.parametrize("law", LAWS)
def test_two_sample_size(law):
    """Seed 300+i; 2 x K permutation chi-square (99 permutations: P(p <= .01) = .01 exactly) and
    two-sample KS on randomized-PIT values, both arms from the target."""
    probs, n = LAWS[law]
    n = min(n, 2000)  # per arm; permutation cost grows with the pooled categories (~170 for Zipf at 2000)
    rng = np.random.default_rng(300 + list(LAWS).index(law))
    a, b = rng.multinomial(n, probs, size=RUNS), rng.multinomial(n, probs, size=RUNS)
    chi = sum(two_sample_chi2_test(x, y, alpha=ALPHA, num_permutations=99, rng=rng, num_bootstrap=0).pvalue <= ALPHA for x, y in zip(a, b))
    assert_size(chi, f"two-sample permutation chi-square, {law}")
    m = min(n, 500)
    ua, _ = randomized_pit(rng.choice(len(probs), size=RUNS * m, p=probs), probs, rng=rng)
    ub, _ = randomized_pit(rng.choice(len(probs), size=RUNS * m, p=probs), probs, rng=rng)
    ks = sum(two_sample_ks_test(x, y).pvalue <= ALPHA for x, y in zip(ua.reshape(RUNS, m), ub.reshape(RUNS, m)))
    assert_size(ks, f"two-sample KS on PIT values, {law}")


@pytest.mark.parametrize("law", LAWS)
def test_e_process_false_alarms_bounded(law):
    """Seed 400+i; null streams of 2000 tokens checked after every token: sup E >= 1/alpha at most alpha."""
    probs, _ = LAWS[law]
    rng = np.random.default_rng(400 + list(LAWS).index(law))
    streams = rng.choice(len(probs), size=(RUNS, 2000), p=probs)
    alarms = sum(e_process(s, probs, alpha=ALPHA).stopped_at is not None for s in streams)
    assert_size(alarms, f"e-process, {law}", two_sided=False)


def test_e_process_stops_before_fixed_n_on_reference_bias():
    """Seed 500; target (.2,.5,.3), full-p fallback output (.26,.45,.29) (TV .06), alpha .01:
    median stopping time below the fixed-n chi-square's 1259 (measured ~576)."""
    target = (0.2, 0.5, 0.3)
    alt = full_p_fallback_law(target, (0.5, 0.3, 0.2))
    fixed_n = samples_needed(target, alt, alpha=ALPHA, power=0.99)
    rng = np.random.default_rng(500)
    streams = rng.choice(3, size=(RUNS, 3 * fixed_n), p=alt)
    stops = np.array([e_process(s, target, alpha=ALPHA).stopped_at or np.inf for s in streams])
    assert np.median(stops) < fixed_n
    assert np.mean(np.isfinite(stops)) > 0.99  # and it does stop


def test_gof_power_at_design_n():
    """Seed 600; n = 1259 (samples_needed, exact): GOF rejects the full-p fallback in >= 98% of
    2000 runs, and the observed rate matches the predicted exact power 0.990 (99% binomial interval)."""
    target = (0.2, 0.5, 0.3)
    alt = full_p_fallback_law(target, (0.5, 0.3, 0.2))
    n = samples_needed(target, alt, alpha=ALPHA, power=0.99)
    assert n == 1259
    rng = np.random.default_rng(600)
    rejections = int(np.count_nonzero(gof_pvalues(rng.multinomial(n, alt, size=RUNS), target) <= ALPHA))
    assert rejections >= 0.98 * RUNS
    lo, hi = stats.binom.interval(0.99, RUNS, gof_power(n, target, alt, alpha=ALPHA))
    assert lo <= rejections <= hi
    # the noncentral approximation predicts the same n within 10%
    assert abs(samples_needed(target, alt, method="noncentral") - n) <= 0.1 * n


@pytest.mark.parametrize("dependent", [False, True])
def test_hybrid_gate_family_wise_error(dependent):
    """Seed 700; 10000 families of 100 null cells (vocab 8, n 500, asymptotic GOF p-values):
    the Holm(alpha/2) + Fisher/Cauchy(alpha/2) gate at alpha 1e-3 false-alarms at most at its
    alpha (upper end of the 99% binomial interval of Bin(10000, 1e-3) = 19)."""
    families, cells, gate_alpha = 10_000, 100, 1e-3
    probs, n = LAWS["vocab8"]
    rng = np.random.default_rng(700 + dependent)
    p = gof_pvalues(rng.multinomial(n, probs, size=families * cells), probs).reshape(families, cells)
    alarms = sum(adjust(row, alpha=gate_alpha, mode="gate", dependent=dependent).family_rejected for row in p)
    assert alarms <= stats.binom.interval(0.99, families, gate_alpha)[1]
