"""``specverify bench certificate`` (issue 27): its argument errors, its table, and the any-test bound it prints.

The bound (:func:`verifier.bench.certificate.mixture_np_power`) is the power of the Neyman-Pearson test against a
sign mixture of alternatives at a TV: no level-alpha test can have a larger worst-case power, so it must sit above
the weighted identity test's power at that test's planned n (exact law: trigram3's 4-token target law).
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.bench.certificate import CellPlan, ConfigPlan, _selected, alternatives, mixture_np_power, render_markdown
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law
from verifier.stats.identity import identity_samples_needed
from verifier.stats.pooling import pool_categories


def test_configs_argument_is_checked():
    assert _selected("all") == [0, 1, 2, 3] and _selected("1,4") == [0, 3]
    with pytest.raises(InvalidArgumentError, match=r"--configs='9' is invalid; allowed: 'all' or comma-separated indices 1-4"):
        _selected("9")


def test_table_shows_old_weighted_and_mixture_n_side_by_side():
    plan = ConfigPlan("T=1, k=1", 1e-4, [CellPlan("joint@1..2", 53474, 30512, 351, 247, 0.589, mix_n=29000)], 53474, 30512,
                      "joint@1..2", "joint@1..2", mix_n=29000, mix_binding="joint@1..2")
    text = render_markdown([plan])
    assert "| T=1, k=1 | 0.0001 | 53,474 (joint@1..2) | 30,512 (0.571x) (joint@1..2) | 29,000 (0.542x) (joint@1..2) |" in text


def test_every_alternative_is_a_law_at_the_stated_tv():
    exact = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 4)
    law = np.array([float(exact[k]) for k in sorted(exact)])
    p = pool_categories(law, 3000).expected_probs
    labels = []
    for label, laws in alternatives(p, 0.05, np.random.default_rng(0), 100):
        labels.append(label)
        for q, _ in laws:
            assert q.sum() == pytest.approx(1.0) and (q >= 0).all()
            assert 0.5 * np.abs(q - p).sum() == pytest.approx(0.05, rel=1e-6), label
    assert {"fixed 0.667", "random 0.75", "light +", "tail +"} <= set(labels)


def test_one_sign_per_category_is_a_harder_mixture_than_one_per_pair():
    exact = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 4)
    law = np.array([float(exact[k]) for k in sorted(exact)])
    pairs = mixture_np_power(law, 3000, 0.01, 0.75, target_tv=0.05, grid=1 << 14)
    single = mixture_np_power(law, 3000, 0.01, 0.75, target_tv=0.05, grid=1 << 14, paired=False)
    assert single < pairs


def test_any_test_bound_is_above_the_weighted_tests_power_and_grows_with_n():
    exact = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 4)
    law = np.array([float(exact[k]) for k in sorted(exact)])
    n = identity_samples_needed(law, 0.05, alpha=0.01, power=0.9)
    at_n = mixture_np_power(law, n, 0.01, 2 / 3, target_tv=0.05, grid=1 << 14)
    assert at_n >= 0.9 - 0.01  # the weighted test reaches 0.9 there (tests/stats/test_identity.py measures it)
    assert mixture_np_power(law, n // 4, 0.01, 2 / 3, target_tv=0.05, grid=1 << 14) < at_n
