"""The opt-in ``stats.tv_test = "weighted"`` (issue 27): schema, audit plan and the TV cell it runs.

The default stays Pearson's chi-square (no committed verdict moves); the weighted identity test
(:mod:`verifier.stats.identity`) is asked for by name.  Expected laws are exact (trigram3's target law,
``verifier.exact.target_law``); the cell tests state their seed and level.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.audit.suite_builder import AuditSpec, plan_audit
from verifier.errors import ConfigError, InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law
from verifier.runner.identity_cell import METHOD, identity_cell
from verifier.suite import load_suite

from .conftest import EXACT_DECODER, suite_text

META = {"decoder": "d", "set_id": "x"}


def test_schema_default_is_pearson_and_the_choice_is_checked(write_suite):
    assert load_suite(write_suite(suite_text(EXACT_DECODER))).stats.tv_test == "pearson"
    suite = load_suite(write_suite(suite_text(EXACT_DECODER, stats="tv_test = 'weighted'")), "nightly")
    assert suite.stats.tv_test == "weighted"  # kept through a profile
    assert load_suite(write_suite(suite_text(EXACT_DECODER, stats="tv_test = 'mixture'"))).stats.tv_test == "mixture"
    with pytest.raises(ConfigError, match=r"stats\.tv_test='vv' is invalid; allowed: 'pearson' \| 'weighted' \| 'mixture'"):
        load_suite(write_suite(suite_text(EXACT_DECODER, stats="tv_test = 'vv'")))


def test_audit_plan_with_the_weighted_test_needs_fewer_rows_at_the_same_level():
    common = dict(decoder="reference", target="tabular:trigram3", prompts=(("ids", (0, 1)),), num_draft_tokens=2,
                  target_tv=0.1)
    old = plan_audit(AuditSpec(**common))
    new = plan_audit(AuditSpec(**common, tv_test="weighted"))
    assert new.cell_alpha == old.cell_alpha and new.raw["stats"]["tv_test"] == "weighted"
    assert "tv_test" not in old.raw["stats"]  # the default suite is unchanged
    assert new.n_needed < 0.9 * old.n_needed, (old.needed, new.needed)
    with pytest.raises(InvalidArgumentError, match="--tv-test"):
        plan_audit(AuditSpec(**common, tv_test="chi2"))


@pytest.fixture(scope="module")
def law():
    exact = target_law(standard_tabular_pairs()["trigram3"].target, (0, 1), 3)
    return np.array([float(exact[k]) for k in sorted(exact)])


def test_cell_passes_exact_samples_and_rejects_a_shifted_law(law):
    """Seed 3, level 1e-3, n = 3000: counts from the exact law pass; counts from a law at TV 0.15 from it
    (mass moved from the likeliest outcome to the second) are rejected."""
    rng = np.random.default_rng(3)
    ok = identity_cell("d/p/s/k=2/joint@1..3", rng.multinomial(3000, law), law, cell_alpha=1e-3, power=0.99,
                       target_mde=0.1, test="joint@1..3", decoder="d", set_id="x")
    assert ok.pvalue > 1e-3 and ok.method == METHOD and ok.test == "joint@1..3"
    assert ok.mde is not None and ok.mde < 0.1 and ok.n_needed is None and ok.effect_ci[0] <= 0.05
    shifted = law.copy()
    top = np.argsort(-law)[:2]
    shifted[top[0]] -= 0.15
    shifted[top[1]] += 0.15
    bad = identity_cell("c", rng.multinomial(3000, shifted), law, cell_alpha=1e-3, power=0.99, test="joint@1..3", **META)
    assert bad.pvalue <= 1e-3


def test_cell_reports_n_needed_and_support_violations(law):
    rng = np.random.default_rng(4)
    small = identity_cell("c", rng.multinomial(200, law), law, cell_alpha=1e-3, power=0.99, target_mde=0.1, **META)
    assert small.mde > 0.1 and small.n_needed is not None and small.n_needed > 200
    with_zero = np.append(law, 0.0)
    counts = np.append(rng.multinomial(500, law), 2)
    cell = identity_cell("c", counts, with_zero, cell_alpha=1e-3, power=0.99, label_fn=lambda c: f"t{c}", **META)
    assert cell.pvalue == 0.0 and cell.support_violation == f"token t{len(law)} emitted 2 times at target prob 0"


@pytest.mark.full  # minutes: every TV cell's n is bisected by measured power at the audit's cell level
def test_audit_plan_with_the_mixture_test_is_measured_and_no_larger_than_the_weighted_one():
    """trigram3, prompt (0, 1), k = 2, TV 0.1, the audit's alpha 1e-3 and power 0.99: the mixture plan keeps the
    level, writes ``tv_test = "mixture"`` and needs at most 2% (its bisection step) more rows than the weighted plan."""
    common = dict(decoder="reference", target="tabular:trigram3", prompts=(("ids", (0, 1)),), num_draft_tokens=2,
                  target_tv=0.1)
    weighted = plan_audit(AuditSpec(**common, tv_test="weighted"))
    mixture = plan_audit(AuditSpec(**common, tv_test="mixture"))
    assert mixture.cell_alpha == weighted.cell_alpha and mixture.raw["stats"]["tv_test"] == "mixture"
    assert mixture.n_needed <= 1.02 * weighted.n_needed, (weighted.needed, mixture.needed)
