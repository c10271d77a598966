"""Decision rules and sentences of the diagnosis (no sampling: synthetic rankings)."""

import math

import numpy as np

from verifier.diagnose.rank import DIAGNOSIS_ALPHA, MechanismScore, Ranking, decide, separation_for, threshold_for


def _ranking(**lrs):
    scores = [MechanismScore("canonical", "exact", -100.0, 0.0)]
    scores += [MechanismScore(n, "biased", -100.0 + v, v) for n, v in lrs.items()]
    return Ranking(100, -100.0, scores)


def test_threshold_is_ville_bonferroni():
    assert math.isclose(threshold_for(11), math.log(11 / DIAGNOSIS_ALPHA))


def test_consistent_sentence_names_both_margins():
    d = decide(_ranking(full_p_fallback=41.3, softmax_residual=11.1), bias_detected=True, fit_pvalue=0.5)
    assert d["status"] == "consistent"
    assert d["sentence"] == "consistent with full_p_fallback (log LR 41.3 over the target, 30.2 over the next hypothesis softmax_residual)"


def test_rejected_fit_or_weak_evidence_is_no_known_mechanism():
    d = decide(_ranking(full_p_fallback=41.3, softmax_residual=11.1), bias_detected=True, fit_pvalue=1e-5)
    assert d["status"] == "no known mechanism" and d["sentence"].startswith("matches no known mechanism (the best, full_p_fallback")
    d = decide(_ranking(full_p_fallback=3.0), bias_detected=True)
    assert d["status"] == "no known mechanism" and "below the threshold" in d["sentence"]
    d = decide(_ranking(full_p_fallback=3.0), bias_detected=False)
    assert d["status"] == "none preferred" and d["sentence"].startswith("no mechanism preferred over the target")


def test_equal_laws_are_named_together():
    r = _ranking(draft_raw_q=20.0, target_unprocessed=20.0, full_p_fallback=1.0)
    r.row_ll = {"draft_raw_q": np.array([-1.0, -2.0]), "target_unprocessed": np.array([-1.0, -2.0])}
    d = decide(r, bias_detected=True, fit_pvalue=0.5)
    assert d["best"] == ["draft_raw_q", "target_unprocessed"] and d["equivalent"] == ["target_unprocessed"]
    assert d["sentence"].startswith("consistent with draft_raw_q = target_unprocessed (log LR 20.0")
    assert "no amount of these data separates them" in d["sentence"]


def test_hypotheses_the_data_do_not_separate_are_named_together_never_one_of_them():
    """Within the separation log(2 M / alpha) of the best, a hypothesis is a contender: "A or B", never A alone."""
    r = _ranking(full_p_fallback=40.0, softmax_residual=38.0, greedy_draft=1.0)
    r.row_ll = {"full_p_fallback": np.array([-1.0, -2.0]), "softmax_residual": np.array([-1.5, -2.0])}
    d = decide(r, bias_detected=True, fit_pvalue=0.5)
    assert d["best"] == ["full_p_fallback", "softmax_residual"] and d["equivalent"] == []
    assert d["sentence"].startswith("consistent with full_p_fallback or softmax_residual (log LR 40.0")
    assert "do not separate them" in d["sentence"]
    far = decide(_ranking(full_p_fallback=40.0, softmax_residual=40.0 - separation_for(4) - 0.1), bias_detected=True)
    assert far["best"] == ["full_p_fallback"]


def test_a_composite_must_beat_what_it_contains_and_cross_talk_every_other_by_the_separation():
    sep = separation_for(4)
    d = decide(_ranking(**{"greedy_draft": 50.0, "greedy_draft+residual_by_index": 52.0, "batch_cross_talk": 55.0}),
               bias_detected=True)
    assert d["best"] == ["batch_cross_talk", "greedy_draft"], d  # the pair adds 2 nats < log(1/alpha): not named,
    assert d["not_excluded"] == [{"name": "greedy_draft+residual_by_index", "nats": 2.0}]  # but said
    assert "more and smaller generate calls" in d["sentence"]  # cross-talk's classes include greedy_draft's law
    assert "not excluded: greedy_draft+residual_by_index (2.0 nats more likely)" in d["sentence"]
    d = decide(_ranking(**{"greedy_draft": 50.0, "greedy_draft+residual_by_index": 55.0}), bias_detected=True)
    assert d["best"] == ["greedy_draft+residual_by_index", "greedy_draft"], d  # 6 nats: 5 nats: both named (between log(1/alpha) and the separation log(2 M / alpha) = 6.0)
    d = decide(_ranking(**{"greedy_draft": 50.0, "greedy_draft+residual_by_index": 50.0 + sep + 1}), bias_detected=True)
    assert d["best"] == ["greedy_draft+residual_by_index"], d


def test_a_contaminated_mechanism_is_still_named_and_its_share_fitted():
    """Issue 26 robust likelihoods: rows of greedy_draft's exact law (trigram3, T = 1, k = 2, 3 tokens, n = 2500)
    with 1% and 5% of rows from the target (seed 26): greedy_draft is named (its pure law cannot emit some target
    rows, so without the mixture, and its mixture fit check, it was 'no known mechanism')."""
    from verifier.bench.diagnose import _Setting
    from verifier.sampling import SamplingConfig

    st = _Setting(SamplingConfig(temperature=1.0))
    rng = np.random.default_rng(26)
    for share in (0.01, 0.05):
        d = st.diagnose(*st.draw("greedy_draft", 2500, rng, share), True, rng)
        assert d["status"] == "consistent" and d["best"] == ["greedy_draft"], d["sentence"]
        assert 0 < d["contamination"] <= 0.1 and "of rows fitted as plain target samples" in d["sentence"]


def test_no_rows_are_not_ranked():
    d = decide(Ranking(0, 0.0, [MechanismScore("canonical", "exact", 0.0, 0.0), MechanismScore("a", "biased", 0.0, 0.0)]),
               bias_detected=True)
    assert d["best"] == [] and d["sentence"] == "no rows to diagnose" and d["status"] == "no known mechanism"


def test_a_temperature_interval_cut_at_the_search_edge_says_so():
    from verifier.diagnose.no_draft import _bound

    assert _bound(5.0) == ">= 5 (search edge)" and _bound(0.05) == "<= 0.05 (search edge)" and _bound(1.234) == "1.23"
