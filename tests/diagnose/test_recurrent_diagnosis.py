"""The recurrent-state diagnosis names the policy that produced the rows (issue 29, bug kind 8).

Rows: the zoo's decoders on ``parity3`` (prompt (0,), k = 2, 3 tokens, T = 1, draftless-round probability 1/2),
4,000 rows, seed 5.  Expected names: the decoder's own; the reference gives None (no policy beats the target's law
by log(1 / 0.01)); rows from a law no policy produces (uniform over the 27 rows) are
"biased, but not by a recurrent-state policy" -- never a wrong name.
"""

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.diagnose.recurrent import recurrent_state_finding
from verifier.errors import InvalidArgumentError
from verifier.exact.recurrent import parity3
from verifier.sampling import SamplingConfig

ROWS, WIDTH, K, SKIP, SEED = 4_000, 3, 2, 0.5, 5


@pytest.mark.parametrize("name", ["recurrent_reference", "state_not_rolled_back", "state_checkpoint_stale"])
def test_names_the_decoders_policy(name):
    target, draft = parity3()
    rows = make_decoder(name, target, draft, K, skip_prob=SKIP).generate([0], ROWS, WIDTH, SamplingConfig(), seed=SEED)
    found = recurrent_state_finding(target, draft, (0,), K, rows, skip_prob="1/2")
    if name == "recurrent_reference":
        assert found is None
    else:
        assert found["mechanism"] == name and found["fits"], found["sentence"]


def test_a_bias_no_policy_explains_gets_no_name():
    target, draft = parity3()
    rows = np.random.default_rng(SEED).integers(0, 3, size=(ROWS, WIDTH))
    found = recurrent_state_finding(target, draft, (0,), K, rows, skip_prob="1/2")
    assert found is not None and found["mechanism"] is None and not found["fits"]


def test_bad_rows():
    target, draft = parity3()
    with pytest.raises(InvalidArgumentError, match="rows"):
        recurrent_state_finding(target, draft, (0,), K, [[0, -1]])
    with pytest.raises(InvalidArgumentError, match="alpha"):
        recurrent_state_finding(target, draft, (0,), K, [[0, 1]], alpha=2)
