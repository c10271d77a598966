"""The acceptance fingerprint of a fixed (synthetic) acceptance mode (issue 29 kind 6; verifier.runner.fingerprint).

Setting: trigram3, k = 2, six sample sets (prompts (0, 1), (1, 1), (2, 2) x T = 1, 0.5) whose canonical draft-1
acceptance ranges 0.11-0.70 (exact, ``verifier.exact.accepted_count_law`` on the processed tables; Cohen's w^2 of
the spread 0.15); n = 1,000 first rounds per set; the run's family alpha 1e-3, so the accusation level is 1e-5
(5e-6 per draft position).  Real decoders, fixed seeds.  What the tests can see: one fixed rate across the sets
(power ~0.95 at 6,000 rounds: ``rounds_for_power``); what they must not do: accuse a decoder whose acceptance varies
with the sets by >= 1/4 of the canonical spread -- measured on the reference, fresh_target_match (0.46 of it) and
block_verification decoders, under the canonical null by simulation (300 runs: 0 flagged; bound 1e-5), and the
equivalence p-value's calibration at the boundary of that class (rejection rate at nominal 0.05 and 0.01).
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.exact import accepted_count_law, standard_tabular_pairs
from verifier.models import TabularCausalLM, processed_tabular
from verifier.runner.acceptance import acceptance_audit, coupling_bound_check
from verifier.runner.fingerprint import FIXED_ACCEPTANCE, SPREAD_FRACTION, equivalence_pvalue, fixed_acceptance_check
from verifier.sampling import SamplingConfig

ALPHA = 1e-3
K = 2
N = 1000
PROMPTS = [(0, 1), (1, 1), (2, 2)]
TEMPERATURES = [1.0, 0.5]


def _canonical_laws():
    pair = standard_tabular_pairs()["trigram3"]
    out = {}
    for t in TEMPERATURES:
        s = SamplingConfig(temperature=t)
        tp, dp = processed_tabular(pair.target, s), processed_tabular(pair.draft, s)
        for prompt in PROMPTS:
            out[(prompt, t)] = np.array([float(x) for x in accepted_count_law(tp, dp, prompt, K, "canonical")])
    return out


CANONICAL = _canonical_laws()


def _audits(name: str, seed: int, **options) -> list[dict]:
    pair = standard_tabular_pairs()["trigram3"]
    decoder = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K, **options)
    audits = []
    for i, ((prompt, t), law) in enumerate(CANONICAL.items()):
        decoder.generate(list(prompt), N, 3, SamplingConfig(temperature=t), seed + i)
        fra = np.asarray(decoder.last_stats.first_round_accepted)
        audits.append(acceptance_audit(f"s{i}", f"{name} | {prompt} | T={t}", name, K, fra, None, law).to_dict())
    return audits


@pytest.mark.parametrize("name", ["reference", "fresh_target_match", "block_verification"])
def test_no_fingerprint_on_decoders_that_read_p_and_q(name):
    audits = _audits(name, seed=2901)
    check = fixed_acceptance_check(audits, ALPHA)
    assert check is not None and not check["flagged"], check["note"]
    assert check["note"].startswith("no fixed per-position acceptance shown")
    assert check["positions"][0]["rounds"] >= check["positions"][0]["rounds_for_power"]  # the test could have fired
    assert not any(a.get("fixed_acceptance") for a in audits)


@pytest.mark.parametrize("rates", [None, [0.05]], ids=["default-0.8-0.6", "below-every-canonical-0.05"])
def test_fingerprint_fires_on_the_synthetic_mode(rates):
    options = {} if rates is None else {"rates": rates}
    audits = _audits("synthetic_acceptance", seed=2902, **options)
    check = fixed_acceptance_check(audits, ALPHA)
    assert check["flagged"], check
    assert check["note"].startswith(FIXED_ACCEPTANCE) and "not a bias verdict" in check["note"]
    assert all(a["fixed_acceptance"] and a["note"].startswith(FIXED_ACCEPTANCE) for a in audits)
    hit = next(p for p in check["positions"] if p["fingerprint"])
    assert abs(hit["common_rate"] - (0.8 if rates is None else 0.05)) < 0.05
    bound = coupling_bound_check(audits, ALPHA)
    if rates is not None:  # below every canonical rate: only the fingerprint sees the fixed acceptance
        assert bound["rejected"] == []


@pytest.mark.full  # 17 s under load; the quick decoder tests above drive the same check on real rows
def test_canonical_null_is_never_flagged_and_the_synthetic_alternative_almost_always():
    """300 simulated runs of the six sets (seed 29): first-round counts drawn from the exact canonical laws (the
    null: <= 1e-5 per run) and from the synthetic rule at rates (0.8, 0.6) (power ~0.95 at 6,000 rounds)."""
    rng = np.random.default_rng(29)
    laws = list(CANONICAL.values())
    synthetic = np.array([0.2, 0.8 * 0.4, 0.8 * 0.6])  # trigram3 has no EOS: the count law is the rates'
    flagged = {"canonical": 0, "synthetic": 0}
    runs = 300
    for _ in range(runs):
        for kind in flagged:
            audits = [acceptance_audit(f"s{i}", f"s{i}", "d", K, rng.choice(K + 1, N, p=law if kind == "canonical" else synthetic),
                                       None, law).to_dict() for i, law in enumerate(laws)]
            flagged[kind] += fixed_acceptance_check(audits, ALPHA)["flagged"]
    assert flagged["canonical"] == 0
    assert flagged["synthetic"] >= 0.9 * runs


@pytest.mark.parametrize("nominal", [0.05, 0.01])
def test_equivalence_pvalue_is_calibrated_at_the_boundary_of_the_protected_class(nominal):
    """Draft-1 rates at exactly SPREAD_FRACTION x the canonical spread (r' = rbar + gamma (r - rbar)), 20,000 simulated
    runs of the six sets at n = 1,000 (seed 30): the rejection rate at the nominal level is within 3 standard errors
    of it or below (asymptotic noncentral chi-square; the gate runs at 5e-6, far in the same tail)."""
    rng = np.random.default_rng(30)
    r = np.array([1 - law[0] for law in CANONICAL.values()])
    boundary = r.mean() + SPREAD_FRACTION * (r - r.mean())
    n = np.full(len(r), N)
    runs = 20_000
    accepted = rng.binomial(N, boundary, size=(runs, len(r)))
    pvalues = np.array([equivalence_pvalue(n, a, r)[0] for a in accepted[:2000]])  # the function itself
    from scipy import stats as sps

    c = accepted.sum(axis=1, keepdims=True) / n.sum()
    stat = ((accepted - n * c) ** 2 / (n * c * (1 - c))).sum(axis=1)  # the same statistic, vectorised for 20,000 runs
    lam0 = equivalence_pvalue(n, accepted[0], r)[1]
    all_p = sps.ncx2.cdf(stat, len(r) - 1, lam0)
    np.testing.assert_allclose(all_p[:2000], pvalues, rtol=1e-9)
    rate = (all_p <= nominal).mean()
    assert rate <= nominal + 3 * np.sqrt(nominal * (1 - nominal) / runs), rate


def test_not_tested_without_two_sets_and_none_without_statistics():
    law = CANONICAL[(PROMPTS[0], 1.0)]
    one = [acceptance_audit("s", "s", "d", K, np.array([2] * N), None, law).to_dict()]
    assert fixed_acceptance_check(one, ALPHA)["note"].startswith("acceptance fingerprint not tested")
    assert fixed_acceptance_check([acceptance_audit("s", "s", "d", K, None, None, law).to_dict()], ALPHA) is None
    all_one = [acceptance_audit(f"s{i}", "s", "d", K, np.array([1] * N), None, law).to_dict() for i in range(3)]
    assert "a set expects fewer than 5 accepted or rejected rounds" in fixed_acceptance_check(all_one, ALPHA)["note"]
    rng = np.random.default_rng(31)
    same = [acceptance_audit(f"s{i}", "s", "d", K, rng.choice(K + 1, N, p=law), None, law).to_dict() for i in range(3)]
    check = fixed_acceptance_check(same, ALPHA)  # identical canonical rates: no spread to compare, never a fingerprint
    assert not check["flagged"] and all(p["rounds_for_power"] is None for p in check["positions"])
    assert "the sets' canonical rates are equal" in check["note"]


@pytest.mark.full  # ~40 s wall under load; the quick tests above drive the same decoders, audits and check
def test_lossy_suite_end_to_end(tmp_path):
    import json
    from pathlib import Path

    from verifier.pipeline import run_suite
    from verifier.suite import load_suite

    suite = load_suite(Path(__file__).parent / "suites" / "lossy.toml")
    outcome = run_suite(suite, tmp_path / "run")
    assert outcome.exit_code == 0
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    flagged = {d["decoder"]: d["acceptance_fingerprint"]["flagged"] for d in report["decoders"]}
    assert flagged == {"reference": False, "fresh_target_match": False, "block_verification": False,
                       "synthetic_acceptance": True, "synthetic_low": True}
    assert FIXED_ACCEPTANCE in (tmp_path / "run" / "report.md").read_text()
