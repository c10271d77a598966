"""verifier.api: assert_preserves_target (test the tester: a correct decoder passes, a biased one
fails with a useful message) and the power helpers beside it.

Expected laws come from the exact enumerator (verifier.exact.step_law), sample sizes from the
power function at the test's own alpha: every statistical test below states its seed, alpha and
the effect it can see.
"""

from __future__ import annotations

import pickle
from fractions import Fraction

import numpy as np
import pytest

from verifier import api
from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder
from verifier.errors import DecoderOutputError, InvalidArgumentError
from verifier.exact import TabularLM, step_law, total_variation
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig

ALPHA = 1e-3  # family-wise false-alarm rate of every check below
SEED = 0
TARGET_P = ("1/5", "1/2", "3/10")  # the seeds' p = (.2, .5, .3)
DRAFT_Q = ("0", "0", "1")  # one-hot draft: maximises the full-p-fallback TV (DESIGN.md "design CI drafts")
UNIGRAM_TARGET = TabularLM({(): TARGET_P}, vocab_size=3, context_len=0, name="p")
UNIGRAM_DRAFT = TabularLM({(): DRAFT_Q}, vocab_size=3, context_len=0, name="q")
BIGRAM_TARGET = TabularLM({(0,): ("1/5", "1/2", "3/10"), (1,): ("1/2", "1/4", "1/4"), (2,): ("1/10", "3/10", "3/5")},
                          vocab_size=3, context_len=1, name="bigram-p")
BIGRAM_DRAFT = TabularLM({(0,): ("1/2", "3/10", "1/5"), (1,): ("1/3", "1/3", "1/3"), (2,): ("1/2", "1/4", "1/4")},
                         vocab_size=3, context_len=1, name="bigram-q")


def _fallback_law() -> tuple[list[float], Fraction]:
    """Exact output law of the full-p-fallback rule on (p, q) and its TV to p (21/100)."""
    law = step_law([Fraction(v) for v in TARGET_P], [Fraction(v) for v in DRAFT_Q], rule="full_p_fallback").output_law
    tv = total_variation(dict(enumerate(law)), dict(enumerate(Fraction(v) for v in TARGET_P)))
    return [float(v) for v in law], tv


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=2)], ids=str)
def test_reference_speculative_decoder_passes(sampling):
    """Bigram pair, k=2, 2 prompts: a correct decoder passes at family-wise alpha=1e-3 (seed 0)."""
    decoder = SpeculativeDecoder(TabularCausalLM(BIGRAM_TARGET), TabularCausalLM(BIGRAM_DRAFT), 2)
    result = api.assert_preserves_target(decoder, BIGRAM_TARGET, [[0], [2]], sampling,
                                         num_samples=1500, max_new_tokens=4, alpha=ALPHA, seed=SEED)
    assert result.verdict == "PASS" and result.passed
    per_prompt = ["gof@1", "gof@2", "gof@3", "gof@4", "joint@1..3", "surprisal@1..3", "pit"]  # the suite runner's cells
    assert [c.name for c in result.cells] == [f"prompt{i}/{c}" for i in (0, 1) for c in per_prompt]
    assert next(c for c in result.cells if c.name == "prompt0/pit").n == 1500 * 4  # the PIT cell sees every emitted token
    verdict, combined = result
    assert verdict == "PASS" and combined > ALPHA / 2


def test_full_p_fallback_is_detected_with_a_useful_message(monkeypatch):
    """Full-p fallback on p=(.2,.5,.3), q one-hot on token 2: exact TV 0.21.  n is what the power
    function says detects it with power 0.999 at the gate's per-cell level (6 cells: gof@1..3, joint, surprisal, pit)."""
    monkeypatch.delenv(api.SEED_ENV_VAR, raising=False)
    law, tv = _fallback_law()
    assert tv == Fraction(21, 100)
    n = api.min_num_samples([float(Fraction(v)) for v in TARGET_P], law, alpha=ALPHA, power=0.999, num_cells=6)
    mutant = SpeculativeDecoder(TabularCausalLM(UNIGRAM_TARGET), TabularCausalLM(UNIGRAM_DRAFT), 1,
                                kernel=full_p_fallback_kernel, name="full-p-fallback")
    with pytest.raises(AssertionError) as info:
        api.assert_preserves_target(mutant, UNIGRAM_TARGET, [[0]], SamplingConfig(), num_samples=n,
                                    max_new_tokens=3, alpha=ALPHA)
    err = info.value
    assert isinstance(err, api.PreservationError)
    assert str(pickle.loads(pickle.dumps(err))) == str(err)  # survives multiprocessing / xdist
    result = err.result
    assert result.verdict == "BIAS DETECTED" and result.seed == 0
    gof1 = next(c for c in result.cells if c.name == "prompt0/gof@1")
    assert gof1.rejected and gof1.adjusted_pvalue <= ALPHA / 2
    assert gof1.effect_tv == pytest.approx(float(tv), abs=0.1)  # point estimate near the exact TV
    message = str(err)
    for needle in ("full-p-fallback does not preserve the target distribution: BIAS DETECTED",
                   "prompt0/gof@1: gof n=", "adj. p=", "TV 0.", "99% CI", "seed=0",
                   "reproduce: SPECVERIFY_SEED=0 python -m pytest tests/integration/test_api.py::"
                   "test_full_p_fallback_is_detected_with_a_useful_message"):
        assert needle in message, (needle, message)


def test_greedy_is_checked_by_exact_match():
    """T=0: the reference passes; a decoder that changes one token of one row fails, naming the row."""
    reference = SpeculativeDecoder(TabularCausalLM(BIGRAM_TARGET), TabularCausalLM(BIGRAM_DRAFT), 2)
    api.assert_preserves_target(reference, BIGRAM_TARGET, [[1]], SamplingConfig(temperature=0.0),
                                num_samples=8, max_new_tokens=5, seed=SEED)
    # issue 12: the greedy cell states its rows and MDE 1 - (1 - power)^(1/n) (was n = 0, no MDE)
    (cell,) = api.check_preserves_target(reference, BIGRAM_TARGET, [[1]], SamplingConfig(temperature=0.0),
                                         num_samples=8, max_new_tokens=5, seed=SEED).cells
    assert cell.n == 8 and cell.mde_tv == pytest.approx(1 - 0.01 ** (1 / 8))

    class OneWrongToken:
        name = "one-wrong-token"

        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            out = reference.generate(prompt_ids, num_samples, max_new_tokens, sampling, seed).copy()
            out[3, 2] = (out[3, 2] + 1) % 3
            return out

    with pytest.raises(api.PreservationError, match=r"prompt0/greedy: .*row 3 position 3"):
        api.assert_preserves_target(OneWrongToken(), BIGRAM_TARGET, [[1]], SamplingConfig(temperature=0.0),
                                    num_samples=8, max_new_tokens=5, seed=SEED)


def test_min_effect_turns_a_small_run_into_underpowered():
    decoder = AncestralDecoder(TabularCausalLM(UNIGRAM_TARGET))
    with pytest.raises(api.PreservationError, match="UNDERPOWERED") as info:
        api.assert_preserves_target(decoder, UNIGRAM_TARGET, [[0]], SamplingConfig(), num_samples=200,
                                    max_new_tokens=2, seed=SEED, min_effect=0.05)
    weakest = max(c.mde_tv for c in info.value.result.cells if c.test == "gof")
    assert weakest > 0.05


def test_seed_from_environment_is_used_and_same_seed_same_result(monkeypatch):
    decoder = AncestralDecoder(TabularCausalLM(BIGRAM_TARGET))
    kwargs = dict(num_samples=300, max_new_tokens=3)
    monkeypatch.setenv(api.SEED_ENV_VAR, "41")
    a = api.check_preserves_target(decoder, BIGRAM_TARGET, [[0]], SamplingConfig(), **kwargs)
    b = api.check_preserves_target(decoder, BIGRAM_TARGET, [[0]], SamplingConfig(), seed=41, **kwargs)
    c = api.check_preserves_target(decoder, BIGRAM_TARGET, [[0]], SamplingConfig(), seed=42, **kwargs)
    assert a.seed == 41 and a.reproduce.startswith("SPECVERIFY_SEED=41 python -m pytest ")
    assert not b.reproduce.startswith("SPECVERIFY_SEED")  # an explicit seed reproduces by itself
    assert [x.pvalue for x in a.cells] == [x.pvalue for x in b.cells]
    assert [x.pvalue for x in a.cells] != [x.pvalue for x in c.cells]


@pytest.mark.parametrize("kwargs, name", [
    (dict(prompts=[0, 1]), "prompts[0]"),
    (dict(prompts=[]), "prompts"),
    (dict(prompts=[[0, 7]]), "prompts[0]"),
    (dict(num_samples=0), "num_samples"),
    (dict(alpha=1.5), "alpha"),
    (dict(seed=-1), "seed"),
    (dict(min_effect=2.0), "min_effect"),
    (dict(sampling={"temperature": 1.0}), "sampling"),
    (dict(target="gpt2"), "target"),
])
def test_bad_arguments_name_the_argument(kwargs, name):
    call = dict(decoder=AncestralDecoder(TabularCausalLM(UNIGRAM_TARGET)), target=UNIGRAM_TARGET, prompts=[[0]],
                sampling=SamplingConfig(), num_samples=10, max_new_tokens=1)
    call.update(kwargs)
    with pytest.raises(InvalidArgumentError, match=rf"{name.replace('[', '.').replace(']', '.')}=.* is invalid; allowed: "):
        api.assert_preserves_target(**call)


def test_invalid_decoder_output_is_a_decoder_error():
    class Floats:
        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            return np.full((num_samples, max_new_tokens), np.nan)

    with pytest.raises(DecoderOutputError, match="dtype=float64"):
        api.assert_preserves_target(Floats(), UNIGRAM_TARGET, [[0]], SamplingConfig(), num_samples=5, max_new_tokens=2)


def test_power_helpers_reproduce_the_design_reference_numbers():
    """DESIGN.md: full-p fallback on p=(.2,.5,.3), q=(.5,.3,.2) needs n=1259 at alpha .01, power .99.
    The helpers take the family alpha and split it like the gate: alpha/(2 * num_cells)."""
    p = [Fraction(1, 5), Fraction(1, 2), Fraction(3, 10)]
    law = [float(v) for v in step_law(p, [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)], rule="full_p_fallback").output_law]
    assert law == pytest.approx([0.26, 0.45, 0.29])
    p = [float(v) for v in p]
    assert api.min_num_samples(p, law, alpha=0.02, power=0.99) == 1259
    assert api.min_num_samples(p, law, alpha=0.06, power=0.99, num_cells=3) == 1259
    assert api.min_num_samples(p, law, alpha=1e-3, num_cells=3) > 1259  # stricter per-cell level
    small, large = api.min_detectable_effect(1000, p), api.min_detectable_effect(4000, p)
    assert large.tv < small.tv and large.tv == pytest.approx(small.tv / 2, rel=0.05)  # ~ 1/sqrt(n)
    with pytest.raises(InvalidArgumentError, match="num_cells=0 is invalid"):
        api.min_detectable_effect(100, p, num_cells=0)


def test_eos_rows_and_padding_are_not_tested():
    """Target whose most likely first token is EOS (3/5): later positions have an "ended" category in
    their exact law; the PIT cell sees exactly the emitted (non-padding) tokens; the ancestral sampler passes."""
    eos_first = TabularLM({(0,): ("1/5", "1/5", "3/5"), (1,): ("1/2", "1/4", "1/4"), (2,): ("1/3", "1/3", "1/3")},
                          vocab_size=3, context_len=1, eos_token_id=2)
    inner = AncestralDecoder(TabularCausalLM(eos_first))
    calls = []

    class Recording:
        name = "ancestral"

        def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
            calls.append(inner.generate(prompt_ids, num_samples, max_new_tokens, sampling, seed))
            return calls[-1]

    result = api.assert_preserves_target(Recording(), eos_first, [[0]], SamplingConfig(), num_samples=500,
                                         max_new_tokens=3, seed=SEED)
    assert [c.name for c in result.cells] == ["prompt0/gof@1", "prompt0/gof@2", "prompt0/gof@3", "prompt0/joint@1..3",
                                              "prompt0/surprisal@1..3", "prompt0/pit"]
    emitted = np.concatenate(calls)
    assert len(calls) == 1 and len(emitted) == 500  # one chunk of 500 rows (chunk size 500)
    assert result.cells[-1].n == int((emitted >= 0).sum()) < 500 * 3
