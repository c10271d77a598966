"""transformers' Gemma4 assistant (``mode=gemma4_assistant``): the law of tokens 1-2 its source predicts.

:mod:`verifier.engines.reproductions.transformers_gemma4`: token 1 is the prompt step's target sample; token 2 is the
greedy draft verified against softmax of the assistant's raw logits.  The one-position law is checked against the exact
stage's ``greedy_draft`` rule (fractions), which is the same mechanism when q is the softmax the draft's argmax is
taken from; the pair's law (needs ``bash ci/engines/transformers.sh``, the tiny Gemma4 pair) against the engine's own
draft, and the diagnosis names it on rows drawn from it and nothing on the target's rows.
"""

from fractions import Fraction

import numpy as np
import pytest

from verifier.engines.reproductions import transformers as hf_law
from verifier.engines.reproductions import transformers_gemma4 as g4
from verifier.exact.step import step_law
from verifier.sampling import SamplingConfig

PROMPT = [2, 5, 7]  # verifier.engines.hf_local.GEMMA4_PROMPT
T1 = SamplingConfig(temperature=1.0)
GEMMA4 = {"mode": "gemma4_assistant"}


@pytest.mark.parametrize("seed", range(6))
def test_one_position_equals_the_exact_greedy_draft_rule(seed):
    """greedy_draft_step(p, q, argmax q) == the exact stage's greedy_draft output law (fractions), to float precision."""
    rng = np.random.default_rng(seed)
    V = int(rng.integers(3, 7))
    p = [Fraction(int(v), 1000) for v in rng.multinomial(1000, rng.dirichlet(np.ones(V)))]
    q_int = rng.multinomial(1000, rng.dirichlet(np.ones(V)))
    q_int[int(np.argmax(q_int))] += 1  # a unique argmax (the engine's argmax of a tie is its own choice)
    q = [Fraction(int(v), int(q_int.sum())) for v in q_int]
    exact = step_law(p, q, "greedy_draft").output_law
    mine = g4.greedy_draft_step(np.array([float(v) for v in p]), np.array([float(v) for v in q]), int(np.argmax(q_int)))
    assert np.allclose(mine, [float(v) for v in exact], atol=1e-12)
    assert exact != tuple(p) or max(q) == 1  # biased unless q is the point mass the draft is drawn from


def test_law_tokens_and_unsupported_follow_the_mode():
    assert hf_law.law_tokens(GEMMA4) == 2 and hf_law.law_tokens({"mode": "assistant_tokenizer"}) == 1
    assert hf_law.law_unsupported(T1, 3, GEMMA4) is None
    assert "q of the greedy draft" in hf_law.law_unsupported(T1, 3, {**GEMMA4, "control_patch": "gemma4_greedy_q"})
    assert "mode=prompt_lookup" in hf_law.law_unsupported(T1, 3, {"mode": "prompt_lookup"})


_PAIR: dict = {}  # the laws take ~10 s: computed once per module


@pytest.fixture
def pair(require_engine):
    eng = require_engine("transformers")
    if not (eng.install_dir() / "gemma4" / "assistant").is_dir():
        pytest.skip(f"run `{eng.install_script()}` (the tiny Gemma4 pair)")
    if not _PAIR:
        from verifier.models import load_model

        target = load_model(str(eng.install_dir() / "gemma4" / "target"))
        _PAIR["v"] = eng, target, hf_law.engine_laws(PROMPT, T1, target, None, options=GEMMA4)
    return _PAIR["v"]


def test_the_law_keeps_token_1_and_moves_token_2(pair):
    _, _, laws = pair
    p, shipped = laws["target"], laws[g4.AS_SHIPPED]
    assert p.shape == shipped.shape == (64, 64) and np.isclose(shipped.sum(), 1.0)
    assert np.allclose(shipped.sum(1), p.sum(1))  # token 1: the prompt step's plain target sample
    assert 0.5 * np.abs(shipped.sum(0) - p.sum(0)).sum() > 0.1  # token 2 departs (the audit: TV ~0.16)


def test_the_draft_is_the_engine_argmax_and_q_its_raw_softmax(pair):
    """draft_after runs transformers' own get_candidates; its q is softmax of the assistant's raw logits, x its argmax."""
    import torch

    eng, target, _ = pair
    from verifier.models import load_model

    assistant = load_model(str(eng.install_dir() / "gemma4" / "assistant"))
    with torch.no_grad():
        out = target(torch.tensor([PROMPT]), output_hidden_states=True, return_shared_kv_states=True)
        for t1 in (3, 15, 40):
            x, q = g4.draft_after(target, assistant, PROMPT, out, t1)
            assert x == int(np.argmax(q)) and np.isclose(q.sum(), 1.0) and q.min() > 0


def _rows(law, n, seed):
    rng = np.random.default_rng(seed)
    flat = rng.choice(law.size, size=n, p=law.ravel() / law.sum())
    return np.stack(np.unravel_index(flat, law.shape), axis=1).astype(np.int64)


def test_the_diagnosis_names_it_and_nothing_on_the_target(pair):
    from verifier.diagnose.engine_laws import ENGINE_LAW_MARK, engine_law_diagnosis

    _, target, laws = pair

    def diagnose(tokens):
        s = {"seqs": None, "tokens": tokens, "prompt": PROMPT, "sampling": T1, "label": "s", "num_draft_tokens": 3,
             "target": target, "draft": None, "options": GEMMA4}
        return engine_law_diagnosis("transformers", [s], bias_detected=True)

    found = diagnose(_rows(laws[g4.AS_SHIPPED], 1000, seed=1))
    assert found["named"] == [f"{ENGINE_LAW_MARK}transformers/{g4.AS_SHIPPED}"], found["sentence"]
    assert found["tokens"] == 2
    null = diagnose(_rows(laws["target"], 1000, seed=2))
    assert not null["named"], null["sentence"]
