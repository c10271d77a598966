"""Mechanisms the field reports (issue 26): the diagnosis names each from its own mutant and never on the null.

Setting of the ci suite (tests/diagnose/_helpers.py): trigram3, prompt (0, 1), k = 2, 3 tokens, n = 2500 in generate
calls of 500, T = 1 (T = 0.7 with top_k = 2 for target_processed_first_only, the only config where it is not the
target), fixed seeds.  Naming needs log LR >= log(M / 0.01) over the target and its own law not rejected at 1e-3;
the reference decoder must get no name (false-diagnosis rate <= 0.01 by construction).  The likelihoods are
checked against the exact enumerator (``verifier.exact.n_token_law`` on the processed tables with the rules of
``verifier.exact.field_rules``) under processing; at T = 1 tests/diagnose/test_likelihood_exact.py covers them.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.diagnose.family import family_names, family_size, hypothesis
from verifier.diagnose.inputs import all_sequences, sequence_probs
from verifier.diagnose.late import late_recover_cost
from verifier.diagnose.likelihood import SequenceProbs, log_likelihood
from verifier.diagnose.mechanisms import MECHANISMS, mechanism_for_decoder
from verifier.diagnose.rank import MAX_LATE_POSITIONS, rank_mechanisms
from verifier.exact import n_token_law
from verifier.exact.field_rules import target_processed_first_only
from verifier.models import processed_tabular
from verifier.sampling import SamplingConfig

from tests.diagnose._helpers import CI_K, PROMPT, T07K2, T1, decoder_calls, diagnose, trigram3, wrapped

FIELD = ("recovered_one_late", "draft_accept_same_uniform", "target_processed_first_only")


def test_family_holds_each_alone_with_prefill_and_in_pairs():
    """Each alone and @prefill, and in pairs with the disjoint parts (tests/diagnose/test_field_pairs.py): M = 154."""
    names = family_names()
    for name in FIELD:
        assert mechanism_for_decoder(name) == name and name in names and name + "@prefill" in names
        assert any("+" in n and name in n.split("@")[0].split("+") for n in names)  # composed (issue 26)
    assert family_size() == 154


@pytest.mark.parametrize("name", FIELD)
@pytest.mark.parametrize("prefill", [False, True], ids=["", "prefill"])
def test_likelihood_is_the_exact_law_under_processing(name, prefill):
    """T = 0.7, top_k = 2: every 3-token outcome's likelihood equals the exact enumerator's probability."""
    pair, tr, dr = trigram3()
    cfg = SamplingConfig(temperature=0.7, top_k=2)
    target, draft = processed_tabular(pair.target, cfg), processed_tabular(pair.draft, cfg)
    rule = target_processed_first_only(processed_tabular(pair.target, T1)) if name == "target_processed_first_only" else name
    if prefill:  # one plain target sample, then rounds: mix the rule's 2-token law over the first token
        first = {(x,): target.probs(PROMPT)[x] for x in range(3) if target.probs(PROMPT)[x]}
        law = {f + rest: pf * pr for f, pf in first.items()
               for rest, pr in n_token_law(target, draft, PROMPT + f, CI_K, 2, rule).items()}
    else:
        law = n_token_law(target, draft, PROMPT, CI_K, 3, rule)
    seqs = all_sequences(3, 3, None)
    sp = sequence_probs(tr, dr, PROMPT, seqs, cfg)
    got = np.exp(log_likelihood(hypothesis(name + ("@prefill" if prefill else "")), sp, CI_K))
    expected = np.array([float(law.get(tuple(int(v) for v in s), 0)) for s in seqs])
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize("name", FIELD)
def test_mutant_is_diagnosed_as_itself(name):
    target, draft = wrapped()
    cfg = T07K2 if name == "target_processed_first_only" else T1
    rows, calls = decoder_calls(make_decoder(name, target, draft, CI_K), cfg, seed=1601)
    d = diagnose(rows, cfg, calls=calls)["decision"]
    assert d["status"] == "consistent" and d["best"] == [name], d["sentence"]


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_reference_rows_never_name_a_field_mechanism(cfg):
    target, draft = wrapped()
    rows, calls = decoder_calls(make_decoder("reference", target, draft, CI_K), cfg, seed=1602)
    for bias in (False, True):
        d = diagnose(rows, cfg, calls=calls, bias=bias)["decision"]
        assert d["status"] != "consistent", d["sentence"]


def test_processed_first_only_is_the_target_at_t1_and_is_not_named():
    """At T = 1 without filters the mutant's rows are the target's: the mechanism scores log LR 0 (the canonical law)."""
    target, draft = wrapped()
    rows, calls = decoder_calls(make_decoder("target_processed_first_only", target, draft, CI_K), T1, seed=1603)
    out = diagnose(rows, T1, calls=calls, bias=True)
    assert out["decision"]["status"] != "consistent", out["decision"]["sentence"]
    _, tr, dr = trigram3()
    sp = sequence_probs(tr, dr, PROMPT, rows, T1)
    score = next(s for s in rank_mechanisms(sp, CI_K, mechanisms=["target_processed_first_only"]).scores)
    assert abs(score.log_lr) < 1e-9


def test_late_recovered_likelihood_is_not_computed_without_oracles_or_beyond_its_budget():
    """A large vocabulary (384) and long distinct rows (3,000 x 12 tokens: ~1e8 token positions of forward rows, above
    MAX_LATE_POSITIONS): the ranking notes it instead of running them; the note names the numbers and the caps."""
    rng = np.random.default_rng(0)
    n, steps, vocab = 3000, 12, 384
    p = rng.dirichlet(np.ones(vocab), size=(n, steps))
    seqs = SequenceProbs(rng.integers(0, vocab, size=(n, steps)), p, p)
    score = rank_mechanisms(seqs, 2, mechanisms=["recovered_one_late"], per_position=False).scores[0]
    assert score.log_lr is None and "no oracle" in score.note
    seqs.target_after = seqs.draft_after = lambda ctx: np.full((len(ctx), vocab), 1.0 / vocab)
    cost = late_recover_cost(seqs)
    assert cost.positions > MAX_LATE_POSITIONS
    score = rank_mechanisms(seqs, 2, mechanisms=["recovered_one_late"], per_position=False).scores[0]
    assert score.log_lr is None and f"{cost.positions} token positions" in score.note and str(MAX_LATE_POSITIONS) in score.note
    assert MECHANISMS["recovered_one_late"].late_recover
