"""Statistics engine: per-cell hypothesis tests, power, multiple comparisons, sequential tests.

Independent of models: every function takes counts, token arrays and (when known) float64
processed target probs, and returns a :class:`CellTestResult` that unpacks as
``(statistic, pvalue)``.  See docs/ARCHITECTURE.md ("Statistics" and "Statistical defaults") for why
each default was chosen.

=====================  ==========================================================================
known-p GOF            :func:`gof_test`, :func:`gof_pvalues`, :func:`token_counts`, :func:`support_violations`
joint / conditional    :func:`joint_test`, :func:`conditional_test`, :func:`accepted_count_test`, :func:`law_probs`
randomized PIT         :func:`randomized_pit`, :func:`pit_ks_test`, :func:`pit_chi2_test`
black-box two-sample   :func:`two_sample_chi2_test`, :func:`two_sample_ks_test`
multiple comparisons   :func:`adjust` (gate: Holm + Fisher/Cauchy; audit: BH/BY)
power                  :func:`samples_needed`, :func:`min_detectable_effect`, :func:`gof_power`
sequential             :func:`e_process`, :class:`SequentialGOF`, :func:`log_e_value`
effect size            :func:`tv_estimate`
=====================  ==========================================================================
"""

from verifier.stats.cells import accepted_count_test, conditional_counts, conditional_test, joint_counts, joint_test, law_probs
from verifier.stats.effect import tv_estimate
from verifier.stats.gof import gof_pvalues, gof_test, support_violations, token_counts
from verifier.stats.multiple import AUDIT_Q, GATE_ALPHA, Adjustment, adjust
from verifier.stats.pit import pit_chi2_test, pit_ks_test, randomized_pit, randomized_pit_from_cdf
from verifier.stats.pooling import MIN_EXPECTED_COUNT, Pooling, pool_categories
from verifier.stats.power import MinDetectableEffect, gof_power, min_detectable_effect, samples_needed
from verifier.stats.results import BIAS_DETECTED, PASS, UNDERPOWERED, CellTestResult, SupportViolation, TVEstimate
from verifier.stats.sequential import SequentialGOF, SequentialResult, e_process, log_e_value
from verifier.stats.two_sample import two_sample_chi2_test, two_sample_ks_test

__all__ = [
    "AUDIT_Q",
    "Adjustment",
    "BIAS_DETECTED",
    "CellTestResult",
    "GATE_ALPHA",
    "MIN_EXPECTED_COUNT",
    "MinDetectableEffect",
    "PASS",
    "Pooling",
    "SequentialGOF",
    "SequentialResult",
    "SupportViolation",
    "TVEstimate",
    "UNDERPOWERED",
    "accepted_count_test",
    "adjust",
    "conditional_counts",
    "conditional_test",
    "e_process",
    "gof_power",
    "gof_pvalues",
    "gof_test",
    "joint_counts",
    "joint_test",
    "law_probs",
    "log_e_value",
    "min_detectable_effect",
    "pit_chi2_test",
    "pit_ks_test",
    "pool_categories",
    "randomized_pit",
    "randomized_pit_from_cdf",
    "samples_needed",
    "support_violations",
    "token_counts",
    "tv_estimate",
    "two_sample_chi2_test",
    "two_sample_ks_test",
]
