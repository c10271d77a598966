"""Hugging Face assisted generation audited end to end on CPU (tiny random Llama target/assistant).

The models are built in the test (seeded random init, sharpened logits) so their processed probs
are far apart; the prompt is the candidate with the largest *exact* full-p-fallback effect at the
first position (computed from the models alone with ``verifier.exact.step_law``, never from data),
and the sample size is checked against ``verifier.stats.samples_needed`` for that effect.
"""

from fractions import Fraction

import numpy as np
import pytest
import torch

from verifier.api import check_preserves_target
from verifier.engines.hf_assisted import HFAssistedDecoder
from verifier.engines.hf_kernel import ensemble_step_law
from verifier.exact import step_law
from verifier.sampling import SamplingConfig, processed_probs
from verifier.stats import samples_needed

VOCAB = 8
K = 1
MAX_NEW_TOKENS = 2  # > k, so the first round drafts k tokens
CANDIDATE_PROMPTS = ([0], [3, 4], [1, 2], [5])
ALPHA = 1e-3
NUM_CELLS = 5  # gof@1, gof@2, joint@1..2, surprisal@1..2, pit (verifier.api runs the suite runner's cells)
T1 = SamplingConfig()


def _tiny_llama(path, seed, hidden):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      bos_token_id=0, eos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)  # sharpen: random-init logits are nearly uniform
    model.save_pretrained(path)
    return model.eval()


def _fractions(probs):
    f = [Fraction(float(v)) for v in probs]
    total = sum(f)
    return [v / total for v in f]


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf_pair")
    target = _tiny_llama(root / "target", seed=0, hidden=16)
    draft = _tiny_llama(root / "draft", seed=1, hidden=8)
    best = None
    with torch.no_grad():
        for prompt in CANDIDATE_PROMPTS:
            ids = torch.tensor([prompt])
            p = _fractions(processed_probs(target(ids).logits[0, -1], T1).tolist())
            q = _fractions(processed_probs(draft(ids).logits[0, -1], T1).tolist())
            tv = sum(abs(a - b) for a, b in zip(step_law(p, q, "full_p_fallback").output_law, p)) / 2
            if best is None or tv > best[0]:
                best = (tv, prompt, p, q)
    _, prompt, p, q = best
    return {"target_path": str(root / "target"), "draft_path": str(root / "draft"), "target": target,
            "prompt": prompt, "p": p, "q": q}


def _needed(pair, law):
    p = np.array([float(v) for v in pair["p"]])
    return samples_needed(p, np.array([float(v) for v in law]), alpha=ALPHA / (2 * NUM_CELLS), power=0.99)


@pytest.mark.slow
def test_hf_assisted_generation_passes_and_records_what_it_set(tiny_pair):
    """Correct HF assisted generation: PASS at alpha 1e-3 (false-fail rate <= 1e-3, seed 5).  The
    run must really speculate: every first round drafts k tokens and some drafts are accepted."""
    import transformers

    decoder = HFAssistedDecoder(tiny_pair["target_path"], tiny_pair["draft_path"], K, num_workers=2)
    result = check_preserves_target(decoder, tiny_pair["target"], [tiny_pair["prompt"]], T1, num_samples=200,
                                    max_new_tokens=MAX_NEW_TOKENS, alpha=ALPHA, seed=5)
    assert result.verdict == "PASS", result.message()
    s = decoder.settings
    assert (s["num_assistant_tokens"], s["num_assistant_tokens_schedule"], s["assistant_confidence_threshold"]) == (K, "constant", 0.0)
    assert s["transformers_version"] == transformers.__version__ and s["num_workers"] == 2 and s["warnings"] == []
    stats = decoder.last_stats
    assert stats.extra["full_rounds"] >= 200 and stats.accepted_counts.sum() > 0
    assert stats.first_round_accepted.shape == (200,) and set(stats.first_round_accepted.tolist()) <= {0, 1}


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["injected full-p fallback kernel", "assistant_ensemble_weight=0.5"])
def test_hf_defects_are_detected_end_to_end(tiny_pair, variant):
    """The decoder engineer's full-p-fallback kernel injected into transformers' generate loop, and
    transformers' documented lossy ``assistant_ensemble_weight``, are both BIAS DETECTED.  Expected
    laws: ``step_law(p, q, "full_p_fallback")`` and :func:`ensemble_step_law` at the prompt; n = 300
    exceeds ``samples_needed`` (power .99 at the Holm level) for each, so a miss has prob < .01."""
    if variant.startswith("injected"):
        law = step_law(tiny_pair["p"], tiny_pair["q"], "full_p_fallback").output_law
        options = {"inject_kernel": "verifier.decoders.kernels:full_p_fallback_kernel"}
    else:
        law = ensemble_step_law(tiny_pair["p"], tiny_pair["q"], Fraction(1, 2))
        options = {"assistant_ensemble_weight": 0.5}
    assert 300 >= _needed(tiny_pair, law)
    decoder = HFAssistedDecoder(tiny_pair["target_path"], tiny_pair["draft_path"], K, num_workers=2, **options)
    result = check_preserves_target(decoder, tiny_pair["target"], [tiny_pair["prompt"]], T1, num_samples=300,
                                    max_new_tokens=MAX_NEW_TOKENS, alpha=ALPHA, seed=5)
    assert result.verdict == "BIAS DETECTED", result.message()


def test_same_seed_same_samples_whatever_the_worker_split(tiny_pair):
    a = HFAssistedDecoder(tiny_pair["target_path"], tiny_pair["draft_path"], K, num_workers=0)
    out = a.generate(tiny_pair["prompt"], 6, 3, T1, seed=9)
    assert out.dtype == np.int64 and out.shape == (6, 3)
    assert np.array_equal(out, a.generate(tiny_pair["prompt"], 6, 3, T1, seed=9))
    b = HFAssistedDecoder(tiny_pair["target_path"], tiny_pair["draft_path"], K, num_workers=2)
    assert np.array_equal(out, b.generate(tiny_pair["prompt"], 6, 3, T1, seed=9))
    assert b.generate(tiny_pair["prompt"], 3, 1, T1, seed=9).shape == (3, 1)
    assert "no round drafts k tokens" in b.settings["warnings"][0]
