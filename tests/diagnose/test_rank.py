"""Decision rules and sentences of the diagnosis (no sampling: synthetic rankings)."""

import math

from verifier.diagnose.rank import DIAGNOSIS_ALPHA, MechanismScore, Ranking, decide, threshold_for


def _ranking(**lrs):
    scores = [MechanismScore("canonical", "exact", -100.0, 0.0)]
    scores += [MechanismScore(n, "biased", -100.0 + v, v) for n, v in lrs.items()]
    return Ranking(100, -100.0, scores)


def test_threshold_is_ville_bonferroni():
    assert math.isclose(threshold_for(11), math.log(11 / DIAGNOSIS_ALPHA))


def test_consistent_sentence_names_both_margins():
    d = decide(_ranking(full_p_fallback=41.3, softmax_residual=11.1), bias_detected=True, fit_pvalue=0.5)
    assert d["status"] == "consistent"
    assert d["sentence"] == "consistent with full_p_fallback (log LR 41.3 over the target, 30.2 over the next mechanism softmax_residual)"


def test_rejected_fit_or_weak_evidence_is_no_known_mechanism():
    d = decide(_ranking(full_p_fallback=41.3, softmax_residual=11.1), bias_detected=True, fit_pvalue=1e-5)
    assert d["status"] == "no known mechanism" and d["sentence"].startswith("matches no known mechanism (the best, full_p_fallback")
    d = decide(_ranking(full_p_fallback=3.0), bias_detected=True)
    assert d["status"] == "no known mechanism" and "below the threshold" in d["sentence"]
    d = decide(_ranking(full_p_fallback=3.0), bias_detected=False)
    assert d["status"] == "none preferred" and d["sentence"].startswith("no mechanism preferred over the target")


def test_equal_laws_are_named_together():
    d = decide(_ranking(draft_raw_q=20.0, target_unprocessed=20.0, full_p_fallback=1.0), bias_detected=True, fit_pvalue=0.5)
    assert d["best"] == ["draft_raw_q", "target_unprocessed"]
    assert d["sentence"].startswith("consistent with draft_raw_q = target_unprocessed (log LR 20.0")
