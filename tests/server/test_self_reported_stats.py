"""The statistics of the self-reported design without a server: the rebuilt law and the collision test.

Test the tester: a law rebuilt from top-K rows equals :func:`verifier.sampling.processed_probs` of the
full logits; the collision test holds its level under the null (a simulated correct server) and
rejects a shared random stream.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest

from verifier.sampling import SamplingConfig, processed_probs
from verifier.stats.collisions import collision_test, identical_pairs, poisson_binomial_sf
from verifier.server.reported_law import ReportedLaw, Undefined, law_tv, rebuild_law


def _top(logprobs: np.ndarray, k: int) -> dict[int, float]:
    order = np.argsort(-logprobs, kind="stable")[:k]
    return {int(t): float(logprobs[t]) for t in order}


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.7, top_k=4), SamplingConfig(temperature=1.3, top_k=4, top_p=0.8),
                                      SamplingConfig(top_k=1)])
def test_raw_rows_rebuild_the_processed_law_exactly(sampling):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=50) * 2
    raw = np.log(processed_probs(logits, SamplingConfig()).numpy())
    want = processed_probs(logits, sampling).numpy()
    law = rebuild_law(_top(raw, 6), sampling, "raw")  # top-6 rows, top_k 4 <= 6
    assert isinstance(law, ReportedLaw)
    assert np.allclose(law.dense(50), want, atol=1e-12)


def test_processed_rows_are_renormalised_and_must_hold_the_kept_set():
    sampling = SamplingConfig(temperature=0.7, top_k=3)
    law = np.array([0.5, 0.3, 0.2])
    row = {i: math.log(p) for i, p in enumerate(law)}
    assert np.allclose(rebuild_law(row, sampling, "processed").probs, law)
    partial = rebuild_law({0: math.log(0.5), 1: math.log(0.3)}, sampling, "processed")
    assert isinstance(partial, Undefined) and "kept set is larger" in partial.reason


@pytest.mark.parametrize("row, reason", [(None, "no reported logprobs"), ({}, "no reported logprobs"),
                                         ({0: -0.1, 1: -0.2}, "sum to"), ({0: math.log(0.4)}, "holds 1 of the top_k=2")])
def test_rows_that_cannot_define_the_law_say_why(row, reason):
    out = rebuild_law(row, SamplingConfig(top_k=2), "raw")
    assert isinstance(out, Undefined) and reason in out.reason


def test_law_tv_and_pit_ranking():
    a = ReportedLaw(np.array([3, 1]), np.array([0.5, 0.5]))
    assert a.cdf_below(1) == 0.0 and a.cdf_below(3) == 0.5  # ties by id
    assert law_tv(a, a) == 0.0


def test_poisson_binomial_matches_enumeration():
    probs = [0.1, 0.5, 0.3, 0.05]
    for k in range(6):
        exact = sum(np.prod([p if b else 1 - p for p, b in zip(probs, bits)])
                    for bits in product([0, 1], repeat=4) if sum(bits) >= k)
        assert poisson_binomial_sf(probs, k) == pytest.approx(exact, abs=1e-12)


def test_collision_test_holds_its_level_and_sees_a_shared_stream():
    """Null: 400 simulated audits of 200 independent draws from a 4-token law over 3 positions (collision prob
    ~0.04), alpha 0.05: the rejection rate stays below 0.05 + 3 standard errors.  A shared stream (every
    request identical) is rejected at alpha 1e-6 (seed 0)."""
    rng = np.random.default_rng(0)
    law = np.array([0.55, 0.25, 0.15, 0.05])
    rejections = 0
    for _ in range(400):
        draws = rng.choice(4, size=(200, 3), p=law)
        pi = law[draws].prod(axis=1)
        res = collision_test(pi[0::2], identical_pairs(draws.tolist()), alpha=0.05)
        rejections += res.pvalue <= 0.05
    assert rejections / 400 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 400)
    same = [[0, 1, 2]] * 200
    res = collision_test([law[0] * law[1] * law[2]] * 100, identical_pairs(same), alpha=1e-6)
    assert res.pvalue < 1e-6 and res.statistic == 100 and res.mde < 1.0


def test_llama_server_verification_rows_are_named_and_more_samples_are_not_advised():
    """llama-server's row for a token of a speculative verification step (prob 1.0, no top entries) is counted
    under its own reason, and the undefined guard leads an UNDERPOWERED verdict with it: more samples cannot
    define those positions (an n-only reason would send the user after the wrong fix)."""
    from verifier.runner.analysis import CellResult
    from verifier.runner.verdict import decide
    from verifier.server.dialects import Completion
    from verifier.server.self_reported import UNDEFINED_REASON, VERIFICATION_ROW, position_laws, undefined_guard

    row = {0: math.log(0.6), 1: math.log(0.4)}
    spec_step = Completion((0, 1, 1), "length", (math.log(0.6), 0.0, math.log(0.4)), (row, {}, row))
    no_row = Completion((1, 0, 0), "length", (math.log(0.4), -0.5, math.log(0.6)), (row, {}, row))
    laws = position_laws([spec_step, no_row], SamplingConfig(top_k=2), "processed", vocab_size=2)
    assert laws.undefined == {VERIFICATION_ROW: 1, "no reported logprobs at this position": 1}
    assert laws.examples[VERIFICATION_ROW] == ["completion 0, position 2"]
    weak = CellResult("d/s/gof@1", decoder="d", set_id="s", test="gof@1", method="m", n=2, statistic=1.0, pvalue=0.5,
                      effect=0.0, effect_unit="tv", mde=0.9)
    verdict = decide("d", "pass", [weak], alpha=1e-3, correction="gate", target_mde=0.05)
    assert verdict.verdict == "UNDERPOWERED" and not verdict.reason.startswith(UNDEFINED_REASON)
    undefined_guard(verdict, laws, 0.05)
    assert verdict.verdict == "UNDERPOWERED" and verdict.reason.startswith(UNDEFINED_REASON + " at 2 of 6 emitted")
    assert VERIFICATION_ROW in verdict.reason and "(the cells alone: 1 of 1 cells underpowered" in verdict.reason
    again = verdict.reason
    undefined_guard(verdict, laws, 0.05)  # a second prompt's laws do not nest the reason
    assert verdict.reason == again


def test_an_unchecked_consistency_cell_leads_an_underpowered_reason_not_the_n_advice():
    """openai-completions without --reference-url: the consistency cell compares nothing, so no number of samples
    can make the run PASS; an UNDERPOWERED verdict must say what is missing before the cells' "rerun with n" advice."""
    from verifier.runner.analysis import CellResult
    from verifier.runner.verdict import decide
    from verifier.server.consistency import ConsistencyResult, consistency_cell, consistency_guard

    cell = consistency_cell("d/s/consistency", ConsistencyResult(reference="not run: no speculation-off reference"),
                            0.05, decoder="d", set_id="s")
    assert cell.effect is None and cell.verdict == "UNDERPOWERED"
    weak = CellResult("d/s/gof@1", decoder="d", set_id="s", test="gof@1", method="m", n=2, statistic=1.0, pvalue=0.5,
                      effect=0.0, effect_unit="tv", mde=0.9)
    verdict = decide("d", "pass", [weak], alpha=1e-3, correction="gate", target_mde=0.05)
    assert verdict.verdict == "UNDERPOWERED"
    consistency_guard(verdict, cell, 0.05)
    assert verdict.verdict == "UNDERPOWERED"
    assert verdict.reason.startswith("reported logprobs were not checked against speculation off")
    assert "--reference-url" in verdict.reason and "more samples alone cannot PASS" in verdict.reason
    again = verdict.reason
    consistency_guard(verdict, cell, 0.05)  # a second prompt's guard does not nest the reason
    assert verdict.reason == again


def test_consistency_names_the_reporting_defect_position_by_position():
    """Issue 29, kind 4 on a URL audit: the positions whose speculation-on law differs from speculation off are
    checked against the offline logprob cell's defects: all report the sampled token with probability 1 (``zero``),
    or all repeat an earlier position's law (``first_only``); a mix names none.  Speculation-off rows (one per
    position): {0: 0.6, 1: 0.4}, {0: 0.3, 1: 0.7}, {0: 0.8, 1: 0.2}."""
    from verifier.server.consistency import compare, consistency_cell, server_defect
    from verifier.server.dialects import Completion
    from verifier.server.self_reported import position_laws

    sampling = SamplingConfig(top_k=2)
    right = {0: math.log(0.6), 1: math.log(0.4)}
    other = {0: math.log(0.9), 1: math.log(0.1)}
    off = [Completion((0,), "length", (math.log(p0),), ({0: math.log(p0), 1: math.log(1 - p0)},)) for p0 in (0.6, 0.3, 0.8)]
    cases = {"zero": (right, {1: 0.0}, {0: 0.0}), "first_only": (right, right, right), None: (right, other, {0: 0.0})}
    for defect, rows in cases.items():
        tokens = (0, 1, 0)
        on = Completion(tokens, "length", tuple(rows[j].get(t, -9.0) for j, t in enumerate(tokens)), rows)
        laws = position_laws([on], sampling, "processed", vocab_size=2)
        picks = [(0, 0), (0, 1), (0, 2)]
        result = compare(picks, laws, [on], off, [5], sampling, "processed", vocab_size=2, reference="ref")
        cell = consistency_cell("d/s/consistency", result, 0.05, decoder="d", set_id="s")
        assert cell.verdict == "UNDERPOWERED" and cell.extra["defect"]["defect"] == defect, (defect, result.rows)
    assert server_defect([], 0.05)["defect"] is None
