"""The recurrent-state zoo (issue 29, bug kind 8) against the exact laws of ``verifier.exact.recurrent``.

Each decoder samples rows of 4 tokens on the ``parity3`` pair (prompt (0,), k = 2, T = 1); the joint law of the 4
tokens (81 categories, pooled chi-square / Monte Carlo of ``gof_test``) is tested at alpha = 1e-3 against the exact
law of the same state policy (must pass) and against the target's law (a mutant must fail).  Effects: TV 0.094
(state_not_rolled_back) and 0.039 (state_checkpoint_stale at skip_prob 1/2) -- from ``recurrent_law`` -- far above
what 8,000 rows resolve (the cell's MDE there is about TV 0.02).
"""

from fractions import Fraction

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.errors import InvalidArgumentError
from verifier.exact.recurrent import parity3, recurrent_law, recurrent_target_law
from verifier.sampling import SamplingConfig
from verifier.stats.cells import joint_test

ALPHA, ROWS, WIDTH, K, SEED = 1e-3, 8_000, 4, 2, 11
POLICY = {"recurrent_reference": "rolled_back", "state_not_rolled_back": "not_rolled_back",
          "state_checkpoint_stale": "stale_checkpoint"}


def _rows(name, skip):
    target, draft = parity3()
    return make_decoder(name, target, draft, K, skip_prob=skip).generate([0], ROWS, WIDTH, SamplingConfig(), seed=SEED)


def _pvalue(rows, law):
    return joint_test(rows, law, tuple(range(WIDTH)), 3, alpha=ALPHA, rng=np.random.default_rng(0)).pvalue


@pytest.mark.parametrize("name, skip", [("recurrent_reference", 0.0), ("recurrent_reference", 0.5),
                                        ("state_not_rolled_back", 0.0), ("state_checkpoint_stale", 0.5)])
def test_sampled_law_is_the_exact_law(name, skip):
    target, draft = parity3()
    rows = _rows(name, skip)
    own = recurrent_law(target, draft, (0,), K, WIDTH, rollback=POLICY[name], skip_prob=Fraction(skip))
    assert _pvalue(rows, own) > ALPHA
    biased = name != "recurrent_reference"
    assert (_pvalue(rows, recurrent_target_law(target, (0,), WIDTH)) <= ALPHA) == biased


def test_stale_checkpoint_is_the_reference_when_every_round_drafts():
    # the checkpoint restore + re-run lands on the rolled-back state, and draws no random numbers: same rows
    assert np.array_equal(_rows("state_checkpoint_stale", 0.0), _rows("recurrent_reference", 0.0))


@pytest.mark.parametrize("options, name", [({"skip_prob": 1.0}, "skip_prob"), ({"skip_prob": -0.1}, "skip_prob"),
                                           ({"num_draft_tokens": 0}, "num_draft_tokens")])
def test_bad_options_name_themselves(options, name):
    target, draft = parity3()
    k = options.pop("num_draft_tokens", K)
    with pytest.raises(InvalidArgumentError, match=name):
        make_decoder("recurrent_reference", target, draft, k, **options)


def test_bad_draft_and_sampling():
    target, draft = parity3()
    with pytest.raises(InvalidArgumentError, match="draft"):
        make_decoder("recurrent_reference", target, target, K)
    decoder = make_decoder("recurrent_reference", target, draft, K)
    with pytest.raises(InvalidArgumentError, match="sampling"):
        decoder.generate([0], 2, 2, SamplingConfig(repetition_penalty=1.2), seed=0)
    with pytest.raises(InvalidArgumentError, match="prompt_ids"):
        decoder.generate([3], 2, 2, SamplingConfig(), seed=0)
