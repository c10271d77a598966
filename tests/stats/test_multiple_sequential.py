"""Multiple-comparison adjustment and the e-process (fast unit tests)."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from verifier.errors import InvalidArgumentError
from verifier.stats import SequentialGOF, adjust, e_process, gof_test, log_e_value


def test_gate_is_holm_at_half_alpha_plus_fisher():
    p = np.array([1e-5, 2e-4, 0.3, 0.9])
    res = adjust(p, alpha=1e-3)
    assert res.method == "holm+fisher" and res.cell_alpha == 5e-4
    assert res.rejected.tolist() == multipletests(p, alpha=5e-4, method="holm")[0].tolist()
    assert res.family_rejected


def test_fisher_catches_many_small_biases_no_cell_sees():
    res = adjust(np.full(100, 0.02), alpha=1e-3)
    assert not res.rejected.any() and res.combined_pvalue < 5e-4 and res.family_rejected


def test_dependent_cells_use_cauchy_and_refuse_fisher():
    res = adjust(np.full(100, 0.02), alpha=1e-3, dependent=True)
    assert res.method == "holm+cauchy" and not res.family_rejected  # Cauchy of equal p's is that p
    assert res.combined_pvalue == pytest.approx(0.02)
    assert adjust([0.5, 1e-7], dependent=True, combine="bonferroni").combined_pvalue == pytest.approx(2e-7)
    with pytest.raises(InvalidArgumentError, match="^combine="):
        adjust([0.5], dependent=True, combine="fisher")


def test_audit_modes():
    p = [0.001, 0.01, 0.02, 0.5]
    bh = adjust(p, mode="audit")
    by = adjust(p, mode="audit", dependent=True)
    assert bh.method == "fdr_bh" and bh.rejected.tolist() == [True, True, True, False]
    assert by.method == "fdr_by" and by.rejected.sum() < bh.rejected.sum()


def test_adjust_takes_results_and_counts_support_violations_as_zero():
    clean = gof_test([200, 500, 300], [0.2, 0.5, 0.3])
    violating = gof_test([200, 500, 299, 1], [0.2, 0.5, 0.3, 0.0])
    assert adjust([clean, violating]).rejected.tolist() == [False, True]


@pytest.mark.parametrize("p, name", [([], "pvalues"), ([0.5, np.nan], "pvalues"), ([1.2], "pvalues")])
def test_adjust_errors(p, name):
    with pytest.raises(InvalidArgumentError, match=f"^{name}="):
        adjust(p)
    with pytest.raises(InvalidArgumentError, match="^mode="):
        adjust([0.5], mode="fdr")


def test_e_process_path_equals_closed_form_and_streaming():
    rng = np.random.default_rng(4)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    ids = rng.choice(4, size=3000, p=probs)
    res = e_process(ids, probs, alpha=1e-300)  # never stops: consumes the whole stream
    assert res.stopped_at is None and res.n == 3000
    assert res.log_e_final == pytest.approx(log_e_value(np.bincount(ids, minlength=4), probs), abs=1e-8)
    seq = SequentialGOF(probs, alpha=1e-300)
    for chunk in np.array_split(ids, 7):
        seq.update(chunk)
    assert seq.log_e == pytest.approx(res.log_e_final, abs=1e-8) and seq.result().pvalue == pytest.approx(res.pvalue)


def test_e_process_stops_on_bias_and_support_violation():
    rng = np.random.default_rng(5)
    res = e_process(rng.choice(3, size=5000, p=[0.26, 0.45, 0.29]), [0.2, 0.5, 0.3], alpha=0.01)
    assert res.stopped_at is not None and res.pvalue <= 0.01 and res.statistic >= 100
    hard = e_process(np.array([0, 1, 2]), [0.5, 0.5, 0.0], alpha=0.01)
    assert hard.stopped_at == 3 and hard.support_violations[0].token_id == 2


def test_e_process_errors():
    with pytest.raises(InvalidArgumentError, match="^token_ids"):
        e_process(np.array([-1, -1]), [0.5, 0.5])
    with pytest.raises(InvalidArgumentError, match="^concentration="):
        e_process(np.array([0, 1]), [0.5, 0.5], concentration=0)
    with pytest.raises(InvalidArgumentError, match="^token_ids="):
        e_process(np.array([0.5, 1.0]), [0.5, 0.5])
