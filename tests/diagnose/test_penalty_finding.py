"""The penalty finding (``verifier.diagnose.penalty``; issue 29, bug kind 3) names the penalty zoo's mechanisms.

Rows are drawn (numpy, ``default_rng([29, i])``) from the exact laws (``verifier.exact.penalties``) of trigram3, prompt
(0, 1, 0, 1), ``PENALTY_SAMPLING``, k = 2, N = 4: 600 rows of each mutant's law name that mutant (log LR over every other
hypothesis >= log(3 / 0.01) and its own law fits at 1e-3); 600 rows of the target's law name nothing (a wrong name has
probability <= 0.01 by the threshold).  The end-to-end run: tests/runner/test_penalty_cells.py (full tier).
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.diagnose.penalty import PENALTY_GLOSSARY, penalty_set_finding
from verifier.exact import standard_tabular_pairs
from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_RULES, PENALTY_SAMPLING, penalty_n_token_law
from verifier.sampling import SamplingConfig

PAIR = standard_tabular_pairs()["trigram3"]
PROMPT, K, N, ROWS = PENALTY_PROMPTS["trigram3"], 2, 4, 600


def _rows(rule: str, seed: int) -> np.ndarray:
    law = penalty_n_token_law(PAIR.target, PAIR.draft, PROMPT, PENALTY_SAMPLING, K, N, rule=rule)
    keys = sorted(law)
    pick = np.random.default_rng([29, seed]).choice(len(keys), size=ROWS, p=np.array([float(law[k]) for k in keys]))
    return np.array([keys[i] for i in pick], dtype=np.int64)


@pytest.mark.parametrize("i, rule", list(enumerate(PENALTY_RULES)))
def test_each_mechanism_is_named_from_its_rows_and_the_target_names_none(i, rule):
    f = penalty_set_finding(PAIR.target, PAIR.draft, PROMPT, PENALTY_SAMPLING, K, _rows(rule, i))
    if rule == "canonical":
        assert f["named"] is None and f["sentence"].startswith("no penalty / min-p mechanism"), f["sentence"]
    else:
        assert f["named"] == rule and f["margin"] >= np.log(3 / 0.01), f
        assert PENALTY_GLOSSARY[rule].rstrip(".") in f["sentence"]


def test_no_finding_without_a_processor_and_a_note_for_other_models():
    rows = np.zeros((5, 4), dtype=np.int64)
    assert penalty_set_finding(PAIR.target, PAIR.draft, PROMPT, SamplingConfig(top_k=2), K, rows) is None
    note = penalty_set_finding(object(), object(), PROMPT, PENALTY_SAMPLING, K, rows)
    assert note["named"] is None and "need tabular models" in note["sentence"]
