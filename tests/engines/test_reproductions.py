"""Engine reproductions (verifier/engines/reproductions/): the laws they predict are the exact ones.

No engine is needed: each float64 reproduction is checked on a tabular pair (trigram3, prefix (0, 1):
every law depends on the context) against the exact rational laws of
:mod:`verifier.engines.llama_cpp_repro` and :func:`verifier.exact.target_law`, and against the per-step
law of :mod:`verifier.engines.openvino_repro`.  ``openvino_replay`` runs the engine itself (``bash
ci/engines/openvino-genai.sh``); here only its generator is checked against std::mt19937."""

from fractions import Fraction as F

import numpy as np
import pytest
from scipy import stats as sps

from verifier.engines.llama_cpp_repro import speculative_step_law
from verifier.engines.openvino_repro import validation_step_law_np
from verifier.engines.reproductions import _common, llama_cpp, llama_cpp_python, openvino_genai, openvino_replay, vllm
from verifier.exact import standard_tabular_pairs, target_law
from verifier.models.tabular import TabularCausalLM
from verifier.sampling import SamplingConfig

PAIR = standard_tabular_pairs()["trigram3"]
PROMPT = list(PAIR.prefix)
T1 = SamplingConfig(temperature=1.0)
TOL = 1e-12


@pytest.fixture(scope="module")
def models():
    return TabularCausalLM(PAIR.target), TabularCausalLM(PAIR.draft)


def _p(model, context):
    return [F(v) for v in model.probs(tuple(context))]


def _law_of_token_2():
    law = [F(0)] * 3
    for (_, x2), prob in target_law(PAIR.target, PROMPT, 2).items():
        law[x2] += prob
    return law


@pytest.mark.parametrize("variant", list(llama_cpp.VARIANTS))
def test_llama_cpp_float_step_law_is_the_exact_one(variant):
    kw = llama_cpp.VARIANTS[variant]
    for p, q in [([F(2, 10), F(5, 10), F(3, 10)], [F(5, 10), F(3, 10), F(2, 10)]),
                 ([F(1, 2), F(1, 3), F(1, 6)], [F(1, 2), F(0), F(1, 2)])]:
        law, _acc = llama_cpp.step_law_float(np.array(p, dtype=float), np.array(q, dtype=float), **kw)
        assert np.allclose(law, [float(v) for v in speculative_step_law(p, q, **kw)], atol=TOL, rtol=0)


def test_llama_cpp_predict_mixes_the_step_law_over_token_1(models):
    law = llama_cpp.predict(PROMPT, T1, *models)
    assert np.allclose(law["target"], [float(v) for v in _law_of_token_2()], atol=TOL, rtol=0)
    shipped = [F(0)] * 3
    for t1, w in enumerate(_p(PAIR.target, PROMPT)):
        ctx = PROMPT + [t1]
        for x, v in enumerate(speculative_step_law(_p(PAIR.target, ctx), _p(PAIR.draft, ctx))):
            shipped[x] += w * v
    assert np.allclose(law["as shipped"], [float(v) for v in shipped], atol=TOL, rtol=0)


def test_llama_cpp_python_predicts_target_match_and_canonical_acceptance(models):
    law = llama_cpp_python.predict(PROMPT, T1, *models)
    greedy = canonical = F(0)
    for t1, w in enumerate(_p(PAIR.target, PROMPT)):
        p, q = _p(PAIR.target, PROMPT + [t1]), _p(PAIR.draft, PROMPT + [t1])
        greedy += w * p[max(range(3), key=q.__getitem__)]
        canonical += w * sum(min(a, b) for a, b in zip(p, q))
    assert law["target-match greedy"] == pytest.approx(float(greedy), abs=TOL)
    assert law["canonical"] == pytest.approx(float(canonical), abs=TOL)
    assert np.allclose(law["target token 2"], [float(v) for v in _law_of_token_2()], atol=TOL, rtol=0)


def test_vllm_first_round_acceptance(models):
    acc = vllm.first_round_acceptance(*models, prompt=PROMPT)
    expected = llama_cpp_python.predict(PROMPT, T1, *models)
    assert acc["greedy_draft"] == pytest.approx(expected["target-match greedy"], abs=TOL)
    assert acc["canonical"] == pytest.approx(expected["canonical"], abs=TOL)


def test_openvino_independent_law_mixes_the_validation_law_over_token_1(models):
    """The per-step law is :func:`validation_step_law_np` (tested against the exact one in test_openvino_repro.py);
    here the mixture over token 1 and the rows it reads.  The probs come from the same float path as the
    module's (a threshold q(x)/p(y) on an exact hundredth -- tabular laws share values -- flips with rounding)."""
    target, draft = models
    laws, acc = openvino_genai.predict(PROMPT, T1, target, draft)
    p1 = openvino_genai._probs(target, [PROMPT], T1)[0]
    joint, shipped, accepted = np.zeros((3, 3)), np.zeros((3, 3)), 0.0
    for t1, w in enumerate(p1):
        ctx = PROMPT + [t1]
        p, q = (openvino_genai._probs(m, [ctx], T1)[0] for m in (target, draft))
        nxt = openvino_genai._probs(target, [ctx + [x] for x in range(3)], T1)
        law, a = validation_step_law_np(p, q, nxt)
        joint[t1], shipped[t1] = w * p, w * law
        accepted += w * a
    exact = np.zeros((3, 3))
    for (x1, x2), prob in target_law(PAIR.target, PROMPT, 2).items():
        exact[x1, x2] = float(prob)
    assert np.allclose(laws["target"], exact, atol=TOL, rtol=0)
    assert np.allclose(laws["as shipped, independent"], shipped, atol=TOL, rtol=0)
    assert acc["as shipped, independent"] == pytest.approx(accepted, abs=TOL)
    assert laws["as shipped, shared seed"].sum() == pytest.approx(1.0, abs=TOL)


def test_chi2_p_pools_and_flags_impossible_counts():
    law = np.array([0.5, 0.3, 0.2, 0.0])
    assert _common.chi2_p([50, 30, 20, 0], law) == pytest.approx(1.0)
    assert _common.chi2_p([50, 30, 19, 1], law) == 0.0  # a count where the law is 0
    counts = np.array([70, 20, 10, 0])
    assert _common.chi2_p(counts, law) == pytest.approx(sps.chisquare([70, 20, 10], [50, 30, 20]).pvalue)
    assert _common.chi2_p(counts, law * 2, renormalise=True) == pytest.approx(_common.chi2_p(counts, law))


def test_clopper_pearson_is_scipys_exact_interval():
    ci = sps.binomtest(7, 40).proportion_ci(confidence_level=0.99, method="exact")
    assert _common.clopper_pearson(7, 40) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert _common.clopper_pearson(0, 40)[0] == 0.0 and _common.clopper_pearson(40, 40)[1] == 1.0


def test_openvino_replay_generator_is_std_mt19937():
    # std::mt19937 default seed 5489: first output 3499211612 (the C++ standard's 10000th is 4123659995)
    mt = openvino_replay.MT(5489)
    assert mt.raw() == 3499211612
    for _ in range(9998):
        mt.raw()
    assert mt.raw() == 4123659995
    assert 0 <= openvino_replay.MT(1).int101() <= 100
    ids, probs = np.array([4, 7, 9]), np.array([0.25, 0.5, 0.25], dtype=np.float32)
    assert [openvino_replay.draw(ids, probs, np.float32(u))[0] for u in (0.1, 0.3, 0.9)] == [4, 7, 9]
