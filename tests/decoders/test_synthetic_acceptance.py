"""The declared-lossy ``synthetic_acceptance`` rule (issue 29 kind 6): exact law vs Monte Carlo of its kernel and
of its zoo decoder, and its parameter checks.

Expected laws from the exact enumerator (``verifier.exact.round_law`` / ``n_token_law`` / ``accepted_count_law``
with ``synthetic_acceptance(rates)``).  Chi-square at ALPHA = 1e-3, fixed seeds: a correct implementation fails a
cell with probability 1e-3 (deterministic for the seed).  Effect the tests can see: N_ROUNDS = 100k kernel rounds
at <= 27 pooled categories has power 0.99 against Cohen's w ~ 0.02; N = 20k decoder rows against w ~ 0.05 (TV ~
0.03); the mutant's TV to the target is 0.17 (bigram4_eos, T = 1, k = 2, first 3 tokens), its TV to its own law 0.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
from scipy import stats

from verifier.decoders import KERNELS, make_decoder
from verifier.decoders.kernels import make_synthetic_acceptance_kernel
from verifier.errors import InvalidArgumentError
from verifier.exact import accepted_count_law, n_token_law, round_law, run_exact_stage, standard_tabular_pairs, \
    step_law, target_law, total_variation
from verifier.exact.rules import RULES, SYNTHETIC_RATES, synthetic_acceptance
from verifier.models import TabularCausalLM
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig

from ._helpers import chisquare_vs_law, processed_tabular
from .test_kernels import _unigram_inputs

ALPHA = 1e-3
N_ROUNDS = 100_000
N_SAMPLES = 20_000
NUM_TOKENS = 3


def _padded(law: dict, width: int) -> dict:
    return {seq + (PADDING_TOKEN_ID,) * (width - len(seq)): pr for seq, pr in law.items()}


def test_rule_is_declared_lossy_and_its_one_step_law_is_the_fixed_rate_mixture():
    rule = RULES["synthetic_acceptance"]
    assert rule.declared == "lossy" and rule.position_acceptance == SYNTHETIC_RATES
    p, q = [F(2, 10), F(5, 10), F(3, 10)], [F(5, 10), F(3, 10), F(2, 10)]
    law = step_law(p, q, synthetic_acceptance([F(1, 2)]))
    residual = (F(0), F(2, 3), F(1, 3))
    assert law.output_law == tuple(F(1, 2) * qi + F(1, 2) * ri for qi, ri in zip(q, residual))
    assert step_law(p, p, synthetic_acceptance([F(1, 2)])).output_law == tuple(p)  # p == q: the residual is p
    assert step_law(p, q, synthetic_acceptance([1])).output_law == tuple(q)  # rate 1: accept_all's law


def test_round_law_accepts_each_position_with_its_own_rate_whatever_p_and_q():
    pair = standard_tabular_pairs()["unigram3"]  # no EOS: the accepted-count law is the rates' alone
    rule = synthetic_acceptance([F(9, 10), F(1, 3), F(1, 2)])
    law = accepted_count_law(pair.target, pair.draft, (), 4, rule)
    a = [F(9, 10), F(1, 3), F(1, 2), F(1, 2)]  # the last rate repeats at position 4
    expected, reach = [], F(1)
    for c in a:
        expected.append(reach * (1 - c))
        reach *= c
    assert law == tuple(expected + [reach])
    assert sum(round_law(pair.target, pair.draft, (), 4, rule).values()) == 1


def test_exact_stage_reports_its_tv_as_a_declared_lossy_rule():
    findings = [f for f in run_exact_stage(["synthetic_acceptance"]) if f.num_draft_tokens == 2]
    assert findings and all(f.declared == "lossy" and f.verdict == "biased" and f.matches_declared for f in findings)
    assert all(f.tv > 0 and f.samples_needed for f in findings)


@pytest.mark.parametrize("bad", [[], [F(3, 2)], [-0.1], ["x"], [True], [float("nan")], 0.5, "0.8"])
def test_bad_rates_are_refused_naming_the_argument(bad):
    with pytest.raises(InvalidArgumentError, match=r"rates=.*allowed: a non-empty sequence of probabilities in \[0, 1\]"):
        synthetic_acceptance(bad)
    with pytest.raises(InvalidArgumentError, match="rates"):
        make_synthetic_acceptance_kernel(bad)
    pair = standard_tabular_pairs()["bigram4_eos"]
    with pytest.raises(InvalidArgumentError, match="rates"):
        make_decoder("synthetic_acceptance", TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 2, rates=bad)


def test_kernel_matches_the_exact_round_law_and_not_the_canonical_one():
    """unigram3, k = 2, 100k rounds, seed 12, default rates (0.8, 0.6)."""
    k = 2
    pair, p, q, drafts, g = _unigram_inputs(k, N_ROUNDS, seed=12)
    emitted = KERNELS["synthetic_acceptance"](p, q, drafts, g).numpy()
    own = _padded(round_law(pair.target, pair.draft, (), k, "synthetic_acceptance"), k + 1)
    canonical = _padded(round_law(pair.target, pair.draft, (), k, "canonical"), k + 1)
    assert chisquare_vs_law(emitted, own)[1] > ALPHA
    assert chisquare_vs_law(emitted, canonical)[1] < ALPHA


@pytest.mark.parametrize("rates,temperature,seed", [(None, 1.0, 1234), ((0.5, 0.9, 0.25), 0.7, 77)])
def test_decoder_matches_the_exact_n_token_and_accepted_count_laws(rates, temperature, seed):
    """bigram4_eos (EOS 3), k = 3, first 3 tokens; the decoder's first-round accepted counts against the exact law
    too (chi-square, ALPHA, same rows)."""
    pair, k = standard_tabular_pairs()["bigram4_eos"], 3
    sampling = SamplingConfig(temperature=temperature)
    target_p, draft_p = processed_tabular(pair.target, sampling), processed_tabular(pair.draft, sampling)
    rule = synthetic_acceptance(SYNTHETIC_RATES if rates is None else rates)
    law = n_token_law(target_p, draft_p, pair.prefix, k, NUM_TOKENS, rule)
    truth = target_law(target_p, pair.prefix, NUM_TOKENS)
    assert total_variation(law, truth) > F(1, 20)
    options = {} if rates is None else {"rates": list(rates)}
    decoder = make_decoder("synthetic_acceptance", TabularCausalLM(pair.target), TabularCausalLM(pair.draft), k, **options)
    rows = decoder.generate(list(pair.prefix), N_SAMPLES, NUM_TOKENS, sampling, seed)
    assert chisquare_vs_law(rows, law)[1] > ALPHA
    assert chisquare_vs_law(rows, truth)[1] < ALPHA
    counts = np.bincount(np.asarray(decoder.last_stats.first_round_accepted), minlength=k + 1)
    expected = np.array([float(x) for x in accepted_count_law(target_p, draft_p, pair.prefix, k, rule)]) * N_SAMPLES
    keep = expected > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], expected[keep] * counts.sum() / expected[keep].sum()).pvalue > ALPHA
    assert decoder.settings["rates"] == [str(r) for r in rule.position_acceptance]


def test_bad_rates_in_a_suite_are_exit_2_naming_the_decoder_and_the_value(tmp_path, capsys):
    from verifier.cli import main

    suite = tmp_path / "bad.toml"
    suite.write_text('schema_version = 1\nname = "bad"\n[exact]\nenabled = false\n'
                     '[models.tri]\ntarget = "tabular:trigram3"\ndraft = "tabular:trigram3"\n'
                     '[prompts.p]\nids = [0, 1]\n[sampling.t1]\ntemperature = 1.0\n'
                     '[defaults]\nmax_new_tokens = 3\nnum_draft_tokens = [2]\nsamples = 10\n'
                     '[[decoders]]\nname = "synthetic"\ndecoder = "synthetic_acceptance"\noptions = { rates = [1.5] }\n'
                     'expect = "detect"\n')
    assert main(["run", str(suite), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "decoders[synthetic]" in err and "rates=[1.5] is invalid" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
