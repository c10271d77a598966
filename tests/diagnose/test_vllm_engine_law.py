"""vLLM-CPU's engine law (verifier.engines.reproductions.vllm): the unwritten per-token temperature's classes, ranked by
the diagnosis (verifier.diagnose.engine_laws) beside the family on tokens 1-2.

Real components: the shipped target and draft at T = 1 (what the published vLLM audits ran), the laws of tokens 1-2
predicted from vLLM's source, the family of verifier.diagnose.family scored on the same rows.  Rows (two tokens,
n = 1000, seeds stated per test) are drawn from:

* the mixture the source predicts, with known shares on the weight grid (uniform 0.05, the target's argmax 0.20, its
  argmin 0.15, the draft token 0.55, the target 0.05; TV 0.78 from the target on tokens 1-2): the diagnosis names
  "uninitialised temperature" and fits each share within SHARE_TOL;
* the target's own law: nothing is named (the ranking's threshold log(M / (alpha / 2)) keeps a false name below
  DIAGNOSIS_ALPHA / 2 = 0.005);
* llama.cpp's greedy-draft law (draft = argmax q accepted with p/q, residual by id: the family's greedy_draft@prefill;
  TV 0.23 from the target): not named as a vLLM law -- it puts its token-2 mass on the draft token *and* on the
  residual, which no share of the vLLM classes reproduces.

The three tests above score the family beside the laws (12-14 s each at T = 1: full tier); the quick tier runs the
draft-free variants (a URL audit's case: the finite classes alone, 1 s).

alpha: the diagnosis's (DIAGNOSIS_ALPHA 0.01, split in two when an engine predicts laws), fit check at FIT_ALPHA 1e-3.
"""

import numpy as np
import pytest

from verifier.diagnose.engine_laws import ENGINE_LAW_MARK, engine_law_diagnosis, ranking_alpha
from verifier.diagnose.rank import DIAGNOSIS_ALPHA
from verifier.diagnose.inputs import sequence_probs
from verifier.engines.reproductions import vllm as law
from verifier.engines.reproductions._common import first_two_token_probs
from verifier.engines.reproductions.llama_cpp import step_law_float
from verifier.models.loading import load_model
from verifier.runner.models import ReferenceModel, _info
from verifier.sampling import SamplingConfig

PROMPT = [272, 70, 221]  # "def ", the audits' prompt
SAMPLING = SamplingConfig(temperature=1.0)
K = 1
N = 1000
SHARES = {law.UNIFORM: 0.05, law.ARGMAX: 0.20, law.ARGMIN: 0.15, law.NAN_DRAFT: 0.55, "target": 0.05}
SHARE_TOL = 0.05  # the fitted (maximum-likelihood) shares: the sampling sd of a share is <= 0.016 at N, so ~3 sd
MIXTURE = f"{ENGINE_LAW_MARK}vllm/{law.MIXTURE}"


@pytest.fixture(scope="module")
def models():
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    return target, draft, law.engine_laws(PROMPT, SAMPLING, target, draft)


def _rows(joint: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    flat = rng.choice(joint.size, size=N, p=joint.ravel() / joint.sum())
    return np.stack(np.unravel_index(flat, joint.shape), axis=1).astype(np.int64)


def _diagnose(models, tokens, *, with_draft=True):
    target, draft, _ = models
    vocab, eos = _info(target)
    seqs = None
    if with_draft:  # the rows' teacher-forced probs, for the family scored beside the laws (no whole-row ranking here)
        uniq, counts = np.unique(tokens, axis=0, return_counts=True)
        seqs = sequence_probs(ReferenceModel(target, vocab, eos), ReferenceModel(draft, vocab, eos), tuple(PROMPT),
                              uniq, SAMPLING)
        seqs.weights = counts.astype(np.float64)
    return engine_law_diagnosis("vllm", [{"seqs": seqs, "tokens": tokens, "prompt": PROMPT, "sampling": SAMPLING,
                                          "label": "s", "num_draft_tokens": K, "target": target,
                                          "draft": draft if with_draft else None, "options": {}}],
                                bias_detected=True)


@pytest.mark.full  # 12-14 s: the family's late columns at T = 1 (the draft-free tests below are the quick tier's)
def test_rows_from_the_uninitialised_temperature_mixture_are_named_with_their_shares(models):
    laws = models[2]
    mix = sum(w * laws[c] for c, w in SHARES.items())
    assert 0.5 * np.abs(mix - laws["target"]).sum() > 0.5  # far from the target: the ranking can tell
    found = _diagnose(models, _rows(mix, seed=26))
    assert found["named"] == [MIXTURE], found["sentence"]
    assert found["decision"]["margin"] >= found["decision"]["separation"]
    assert found["fit_pvalue"] is not None and found["fit_pvalue"] >= 1e-3
    fitted = found["weights"][0]
    assert all(abs(fitted[c] - w) <= SHARE_TOL for c, w in SHARES.items()), fitted
    assert "fitted shares" in found["sentence"] and "a law vllm's source predicts" in found["sentence"]


@pytest.mark.full
def test_rows_from_the_target_name_no_vllm_law(models):
    found = _diagnose(models, _rows(models[2]["target"], seed=27))
    assert found["named"] is None and found["decision"]["status"] != "consistent", found["sentence"]


@pytest.mark.full
def test_rows_from_llama_cpps_greedy_draft_law_are_not_named_as_a_vllm_law(models):
    target, draft, laws = models
    p1, support, p2, q2 = first_two_token_probs(PROMPT, SAMPLING, target, draft)
    greedy = np.zeros_like(laws["target"])
    for i, x1 in enumerate(support):
        greedy[x1] = p1[x1] * step_law_float(p2[i], q2[i], draft_token="most_probable", residual="by_id")[0]
    assert 0.5 * np.abs(greedy - laws["target"]).sum() > 0.2  # a biased law, just not vLLM's
    found = _diagnose(models, _rows(greedy, seed=28))
    assert not any(n.startswith(f"{ENGINE_LAW_MARK}vllm/") for n in (found["named"] or [])), found["sentence"]


def test_without_the_draft_the_nan_class_is_left_out_and_said_so(models):
    """A URL audit does not know the server's draft: only the classes that need none are scored, and the sentence says
    the NaN class was not tested (rows from the full mixture then fit no scored law)."""
    laws = models[2]
    no_draft = law.engine_laws(PROMPT, SAMPLING, models[0])
    assert law.NAN_DRAFT not in no_draft and set(no_draft) == set(laws) - {law.NAN_DRAFT}
    mix = sum(w * laws[c] for c, w in SHARES.items())
    found = _diagnose(models, _rows(mix, seed=29), with_draft=False)
    assert found["named"] is None, found["sentence"]
    assert "not tested" in found["sentence"] and "NaN class" in found["sentence"], found["sentence"]


def test_without_the_draft_the_finite_classes_are_named_with_their_shares_and_target_rows_name_nothing(models):
    """The quick tier's naming test (1 s: no family without the draft): rows from the finite classes in known shares
    (uniform 0.10, the target's argmax 0.30, its argmin 0.20, the target 0.40; seed 30) are named as FINITE with each
    share within SHARE_TOL; rows from the target (seed 31) name nothing."""
    laws = models[2]
    shares = {law.UNIFORM: 0.10, law.ARGMAX: 0.30, law.ARGMIN: 0.20, "target": 0.40}
    found = _diagnose(models, _rows(sum(w * laws[c] for c, w in shares.items()), seed=30), with_draft=False)
    assert found["named"] == [f"{ENGINE_LAW_MARK}vllm/{law.FINITE}"], found["sentence"]
    assert found["fit_pvalue"] is not None and found["fit_pvalue"] >= 1e-3
    assert all(abs(found["weights"][0][c] - w) <= SHARE_TOL for c, w in shares.items()), found["weights"]
    clean = _diagnose(models, _rows(laws["target"], seed=31), with_draft=False)
    assert clean["named"] is None and clean["decision"]["status"] != "consistent", clean["sentence"]


def test_law_unsupported_names_the_control_filters_and_probabilistic_drafts():
    assert law.law_unsupported(SAMPLING, 3, {}) is None and law.law_unsupported(SAMPLING, 1, None) is None
    assert "target's law" in law.law_unsupported(SAMPLING, 1, {"patch_cpu_expand": True})
    top = law.law_unsupported(SamplingConfig(temperature=0.7, top_k=50, top_p=0.9), 3, {})
    assert "crashes" in top and "random top-k" in top
    assert law.law_unsupported(SamplingConfig(temperature=1.0, presence_penalty=0.5), 3, {}) is None  # modelled
    assert "id 0" in law.law_unsupported(SAMPLING, 1, {"draft_sample_method": "probabilistic"})
    assert ranking_alpha("vllm") == ranking_alpha("vllm (URL)") == DIAGNOSIS_ALPHA / 2


def test_the_classes_are_laws_of_tokens_1_2_with_the_targets_first_token(models):
    laws = models[2]
    p1 = laws["target"].sum(1)
    for name, joint in laws.items():
        assert np.isclose(joint.sum(), 1.0) and np.allclose(joint.sum(1), p1), name
    assert law.LAW_TOKENS == 2  # token 2 is the first verified position for every k


def _assert_fitted_law_close(fitted: dict, shares: dict, laws: dict) -> None:
    """With penalties the classes tempered by a penalty's value lie between the target (T = 1) and its argmax (T -> 0),
    so at N = 1000 their shares trade against those two: the classes outside that family (uniform, argmin) keep each
    share within SHARE_TOL, and the fitted law of tokens 1-2 is within TV SHARE_TOL of the true mixture."""
    for c in (law.UNIFORM, law.ARGMIN):
        assert abs(fitted.get(c, 0.0) - shares.get(c, 0.0)) <= SHARE_TOL, fitted
    tv = 0.5 * np.abs(sum(w * laws[c] for c, w in fitted.items()) - sum(w * laws[c] for c, w in shares.items())).sum()
    assert tv <= SHARE_TOL, (tv, fitted)


PENALTIES = SamplingConfig(temperature=1.0, repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5)


def test_penalised_classes_take_the_context_and_are_named(models):
    """Penalties (vLLM applies them to the target logits before the unwritten temperature: the argmax / argmin classes
    are those of the penalised logits; the published penalties set: repetition 1.5, presence 0.5, frequency 0.5, T = 1).
    The target class equals the harness's exact penalised law of tokens 1-2 (runner.expected.position_laws, the
    reference's context codes); the penalised argmax differs from the raw one after some token 1 (so a law that
    ignored the context would differ); rows from the penalised finite classes (seed 32; shares uniform 0.10, argmax
    0.30, argmin 0.20, target 0.40) are named with each share within SHARE_TOL, and rows from the penalised target
    (seed 33) name nothing."""
    from verifier.diagnose.engine_laws import engine_law_diagnosis
    from verifier.runner.expected import position_laws

    target = models[0]
    laws = law.engine_laws(PROMPT, PENALTIES, target)
    vocab, eos = _info(target)
    exact = position_laws(ReferenceModel(target, vocab, eos), tuple(PROMPT), PENALTIES, 2, 2).joint
    V = laws["target"].shape[0]
    joint = np.asarray(exact).reshape(V + 1, V + 1)[:V, :V] if np.size(exact) == (V + 1) ** 2 else None
    going = np.arange(V) != eos  # the exact law ends a row at EOS (token 2 "ended"); the engine's row goes on
    assert joint is not None and np.allclose(laws["target"][going], joint[going], rtol=1e-5, atol=1e-12)
    plain = models[2]
    assert (laws[law.ARGMAX].argmax(1) != plain[law.ARGMAX].argmax(1))[laws["target"].sum(1) > 0].any()
    shares = {law.UNIFORM: 0.10, law.ARGMAX: 0.30, law.ARGMIN: 0.20, "target": 0.40}

    def diagnose(tokens):
        return engine_law_diagnosis("vllm", [{"seqs": None, "tokens": tokens, "prompt": PROMPT, "sampling": PENALTIES,
                                              "label": "s", "num_draft_tokens": K, "target": target, "draft": None,
                                              "options": {}}], bias_detected=True)
    found = diagnose(_rows(sum(w * laws[c] for c, w in shares.items()), seed=32))
    assert found["named"] == [f"{ENGINE_LAW_MARK}vllm/{law.FINITE}"], found["sentence"]
    _assert_fitted_law_close(found["weights"][0], shares, laws)
    clean = diagnose(_rows(laws["target"], seed=33))
    assert clean["named"] is None and clean["decision"]["status"] != "consistent", clean["sentence"]


def test_a_penalty_value_read_as_the_temperature_is_a_tempered_class_and_is_named(models):
    """With penalties, ``RejectionSampler.apply_penalties`` frees three float32 blocks of num_tokens elements just before
    ``expand_batch_to_tokens`` asks ``new_empty(num_tokens)``: the unwritten temperature can read a penalty's value.
    Each distinct value is one class (presence = frequency = 0.5: one class; repetition 1.5: another), whose token 2
    follows the penalised law at that temperature: equal to the harness's exact penalised law at T = 0.5 / 1.5
    (runner.expected.position_laws) given token 1.  Rows from uniform 0.05, argmin 0.05, presence-tempered 0.50,
    repetition-tempered 0.05 and the target 0.35 (seed 34, N = 1000) are named FINITE, each share within SHARE_TOL."""
    from verifier.diagnose.engine_laws import engine_law_diagnosis
    from verifier.runner.expected import position_laws

    target = models[0]
    laws = law.engine_laws(PROMPT, PENALTIES, target)
    presence, frequency, repetition = (law.PENALTY_AS_T[k] for k in ("presence_penalty", "frequency_penalty", "repetition_penalty"))
    assert presence in laws and repetition in laws and frequency not in laws  # 0.5 twice: one class
    vocab, eos = _info(target)
    V = laws["target"].shape[0]
    going = np.arange(V) != eos
    for name, tau in ((presence, 0.5), (repetition, 1.5)):
        sampling = SamplingConfig(temperature=tau, repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5)
        exact = np.asarray(position_laws(ReferenceModel(target, vocab, eos), tuple(PROMPT), sampling, 2, 2).joint)
        joint = exact.reshape(V + 1, V + 1)[:V, :V]
        rows = (laws["target"].sum(1) > 0) & (joint.sum(1) > 1e-300)  # token 1 at T = tau can underflow in the exact law
        cond = laws[name][rows] / laws[name][rows].sum(1, keepdims=True)
        want = joint[rows] / joint[rows].sum(1, keepdims=True)
        assert np.allclose(cond[:, going], want[:, going], rtol=1e-4, atol=1e-10), name
    shares = {law.UNIFORM: 0.05, law.ARGMIN: 0.05, presence: 0.50, repetition: 0.05, "target": 0.35}
    found = engine_law_diagnosis("vllm", [{"seqs": None, "tokens": _rows(sum(w * laws[c] for c, w in shares.items()), seed=34),
                                           "prompt": PROMPT, "sampling": PENALTIES, "label": "s", "num_draft_tokens": K,
                                           "target": target, "draft": None, "options": {}}], bias_detected=True)
    assert found["named"] == [f"{ENGINE_LAW_MARK}vllm/{law.FINITE}"], found["sentence"]
    _assert_fitted_law_close(found["weights"][0], shares, laws)
