"""``bench detect --penalties`` (``verifier.bench.detect_penalty``; issue 29, bug kind 3).

Quick: the mutant list is the zoo's, the oracle figures come from the exact laws (trigram3, prompt (0, 1, 0, 1),
strong setting, k = 2, N = 4: penalty_ignored_in_verification's 4-token law differs from the target's by TV 0.41 and
the Neyman-Pearson oracle needs 10 rows at alpha 0.01, power 0.99), and bad arguments are clear errors.
Full: the rows of min_p_skipped_on_verified on trigram3 with 5 seeds (the case whose cell-level oracle underflowed
``(p0 of the extreme outcome) ** n`` to 0 and divided by it before), rendered as ``bench detect``'s markdown.
"""

from __future__ import annotations

import pytest

from verifier.bench._oracle import np_oracle_samples
from verifier.bench.detect import detect_penalty_rows, render_markdown
from verifier.bench.detect_penalty import PENALTY_MUTANTS, SETTINGS
from verifier.cli import main
from verifier.decoders.penalty_mutants import PENALTY_DECODER_REGISTRY
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, total_variation
from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_RULES, PENALTY_SAMPLING, penalty_n_token_law, penalty_target_law


def test_mutants_settings_and_oracle_from_the_exact_laws():
    assert set(PENALTY_MUTANTS) == set(PENALTY_DECODER_REGISTRY) == set(PENALTY_RULES[1:])
    assert SETTINGS["strong"] == PENALTY_SAMPLING
    pair, prompt = standard_tabular_pairs()["trigram3"], PENALTY_PROMPTS["trigram3"]
    tlaw = penalty_target_law(pair.target, prompt, PENALTY_SAMPLING, 4)
    law = penalty_n_token_law(pair.target, pair.draft, prompt, PENALTY_SAMPLING, 2, 4, rule="penalty_ignored_in_verification")
    assert round(float(total_variation(law, tlaw)), 2) == 0.41
    assert np_oracle_samples(tlaw, law, alpha=0.01, power=0.99).n == 10


def test_bad_arguments_are_clear_errors(capsys):
    with pytest.raises(InvalidArgumentError, match="mutants"):
        detect_penalty_rows(["stop_mid_block"])
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_penalty_rows(None, ["shipped"])
    with pytest.raises(InvalidArgumentError, match="seeds"):
        detect_penalty_rows(seeds=0)
    assert main(["bench", "detect", "--penalties", "--stop"]) == 2
    assert "--penalties" in capsys.readouterr().err


@pytest.mark.full  # ~30 s of batteries; the quick tests above exercise the module's laws and arguments
def test_min_p_rows_and_markdown():
    rows = detect_penalty_rows(["min_p_skipped_on_verified"], ["trigram3"], seeds=5)
    assert {(r.case, r.battery) for r in rows} == {(f"trigram3/{s}", b) for s in SETTINGS for b in ("default", "window")}
    assert all(r.fixed_median <= r.max_n for r in rows)
    assert "| min_p_skipped_on_verified | trigram3/strong | default |" in render_markdown(rows)
