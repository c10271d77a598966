"""The field mechanisms' diagnosis (issue 26) on inputs where a hypothesis cannot be computed.

On the shipped transformers pair (vocab ~1k), ``recovered_one_late``'s likelihood was not computed (756,480 forward rows
> the old MAX_LATE_ROWS for 600 rows of 4 tokens at k = 1 and 3; now rows beyond ``rank.MAX_LATE_POSITIONS``, see
``verifier.diagnose.rank._late_note``); a run of that decoder
then said "matches no known mechanism (the best, softmax_residual+shared_uniform ...)" and nothing about the one
hypothesis left out -- which is the decoder's real defect.  The sentence now says which were not computed.
"""

from __future__ import annotations

from verifier.diagnose.rank import MechanismScore, Ranking, decide


def _ranking(best_lr: float) -> Ranking:
    note = "not computed: a recovered token read one position late needs the models after every latent rejected token"
    return Ranking(600, -1000.0, [
        MechanismScore("canonical", "exact", -1000.0, 0.0),
        MechanismScore("full_p_fallback", "biased", -1000.0 + best_lr, best_lr),
        MechanismScore("recovered_one_late", "biased", None, None, note=note),
    ])


def test_a_hypothesis_not_computed_is_named_when_nothing_else_explains_the_rows():
    d = decide(_ranking(50.0), bias_detected=True, fit_pvalue=1e-9)  # the best one's own fit fails
    assert d["status"] == "no known mechanism" and d["not_computed"] == ["recovered_one_late"]
    assert "not computed on these rows, so not excluded: recovered_one_late" in d["sentence"], d["sentence"]
    d = decide(_ranking(0.5), bias_detected=False)
    assert d["status"] == "none preferred" and "not excluded: recovered_one_late" in d["sentence"], d["sentence"]


def test_a_named_mechanism_is_not_hedged_and_nothing_computed_says_nothing():
    d = decide(_ranking(50.0), bias_detected=True, fit_pvalue=0.5)
    assert d["status"] == "consistent" and "not computed" not in d["sentence"]
    full = Ranking(600, -1000.0, [MechanismScore("full_p_fallback", "biased", -999.0, 1.0)])
    assert "not computed" not in decide(full, bias_detected=True, fit_pvalue=1e-9)["sentence"]
