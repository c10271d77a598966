"""The float32 PIT scorer (verifier.runner.pitscore) gives the float64 path's u's (issue 17 part 1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verifier.runner import memory, pitscore
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig
from verifier.stats.pit import randomized_pit

VOCAB = 3000
TIED = (7, 8, 9, 2500)  # tokens whose output rows are equal: tied logits, ranked by id


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=32, bos_token_id=0, eos_token_id=VOCAB - 1,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)  # a peaked law (logits std ~ 1): ranks matter, masses are uneven
        for t in TIED[1:]:
            model.lm_head.weight[t] = model.lm_head.weight[TIED[0]]
    return ReferenceModel(model, VOCAB, VOCAB - 1)


def _tokens(n: int, steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, VOCAB - 1, size=(n, steps))
    tok[: n // 4, 1] = rng.choice(TIED, size=n // 4)  # emitted tied tokens: the id tie-break is exercised
    tok[n // 4: n // 2, 0] = rng.choice(TIED, size=n // 2 - n // 4)
    tok[-5:, 1:] = -1  # rows ended early (padding)
    return tok


def _float64_u(ref, prompt, tokens, sampling, seed):
    rng = np.random.default_rng(seed)
    parts, bad = [], []
    for rows, probs in ref.teacher_forced(prompt, tokens, sampling):
        tk = tokens[rows]
        live = tk != -1
        u, v = randomized_pit(tk[live], probs[live], rng)
        parts.append(u)
        bad.extend(v)
    return np.concatenate(parts), bad


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("tiles,atol", [("float64", 1e-13), ("float32", 1e-6)])
def test_logit_scorer_matches_the_float64_path(temperature, tiles, atol, monkeypatch):
    """Same u's (same V draws, same order) within the rounding of the tiles, ties included: float64 tiles
    (V <= FLOAT32_ABOVE) to 1e-13, float32 tiles (above) to 1e-6."""
    if tiles == "float32":
        monkeypatch.setattr(pitscore, "FLOAT32_ABOVE", VOCAB - 1)
    ref, sampling = _model(), SamplingConfig(temperature=temperature)
    assert pitscore.fast_pit_applies(ref, sampling)
    tokens = _tokens(300, 3, seed=1)
    want, want_bad = _float64_u(ref, (1, 2, 3), tokens, sampling, seed=5)
    parts, bad = pitscore.pit_values(ref, (1, 2, 3), tokens, sampling, np.random.default_rng(5))
    got = np.concatenate(parts)
    assert got.shape == want.shape and not bad and not want_bad
    np.testing.assert_allclose(got, want, atol=atol, rtol=0)
    # the tie-break matters: without it the tied tokens' u's would be off by a multiple of their prob
    terms = [t for t in pitscore.pit_terms(ref, (1, 2, 3), tokens[:8], sampling)]
    assert terms and all(np.all((b >= 0) & (b + p <= 1 + 1e-6)) for _, p, b in terms)


def test_batches_sized_from_a_shrunk_memory_budget_give_the_same_values(monkeypatch):
    """A budget of a few rows per forward (memory caps are bytes) changes nothing but the batching."""
    ref, sampling = _model(), SamplingConfig()
    tokens = _tokens(120, 3, seed=2)
    full = np.concatenate(pitscore.pit_values(ref, (1, 2), tokens, sampling, np.random.default_rng(9))[0])
    monkeypatch.setattr(memory, "MIN_WORK_BYTES", 1)
    monkeypatch.setattr(memory, "MAX_WORK_BYTES", 3 * VOCAB * 4 * 2 * 7)  # 7 rows per forward
    monkeypatch.setattr(pitscore, "ROW_TILE", 3)  # many row tiles
    assert pitscore.rows_per_batch(3 * VOCAB * 4 * 2) == 7
    small = np.concatenate(pitscore.pit_values(ref, (1, 2), tokens, sampling, np.random.default_rng(9))[0])
    np.testing.assert_allclose(small, full, atol=1e-9, rtol=0)


def test_a_zero_prob_token_is_a_support_violation_only_in_float64_terms():
    """A token whose float32 exp underflows (logit gap > 104 at T = 1) keeps its float64 prob > 0;
    an emitted token at -inf is a support violation."""
    logits = torch.zeros(2, 50)
    logits[:, 3] = -120.0  # exp(-120) = 0 in float32, 7.7e-53 in float64
    logits[1, 4] = -float("inf")
    px, below = pitscore._block_terms(logits, torch.tensor([3, 4]), 1.0)
    assert px[0] > 0 and px[1] == 0
    assert below[0] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("cfg", [SamplingConfig(top_k=5), SamplingConfig(top_p=0.9), SamplingConfig(temperature=0.0),
                                 SamplingConfig(repetition_penalty=1.2)])
def test_filtered_sampling_keeps_the_float64_path(cfg):
    assert not pitscore.fast_pit_applies(_model(), cfg)


def test_threads_split_rows_without_changing_any_value(monkeypatch):
    """Rows are split over threads by whole row ranges: bit-identical to one thread."""
    rng = np.random.default_rng(4)
    logits = torch.from_numpy(rng.standard_normal((200, 5000)).astype(np.float32))
    ids = torch.from_numpy(rng.integers(0, 5000, size=200))
    monkeypatch.setattr(pitscore, "PIT_THREADS", 1)
    one = pitscore._block_terms(logits, ids, 0.8)
    monkeypatch.setattr(pitscore, "PIT_THREADS", 3)
    monkeypatch.setattr(pitscore, "ROW_TILE", 16)
    three = pitscore._block_terms(logits, ids, 0.8)
    assert all(np.array_equal(a, b) for a, b in zip(one, three))


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.7, top_k=8),
                                      SamplingConfig(temperature=1.0, repetition_penalty=1.5, presence_penalty=0.5,
                                                     frequency_penalty=0.5, min_p=0.05)])
def test_teacher_forcing_each_distinct_prefix_once_changes_nothing(sampling):
    """teacher_forced runs each distinct prefix of a row batch through the model once (rows repeat a lot under top-k);
    the probs equal the float64 path over every row to 1e-12 -- penalties, whose context codes come from the prefix,
    included."""
    from verifier.runner.models import _forced_probs_of

    ref = _model()
    rng = np.random.default_rng(5)
    tokens = rng.choice([3, 11, 40, 2500], size=(120, 4))  # at most 64 distinct 3-token prefixes
    tokens[-7:, 2:] = -1
    prompt = (5, 11, 5)
    got = np.concatenate([p for _, p in ref.teacher_forced(prompt, tokens, sampling)])
    part = torch.as_tensor(np.where(tokens == -1, 0, tokens), dtype=torch.long)
    seqs = torch.cat([torch.as_tensor(prompt).expand(len(part), -1), part[:, :-1]], dim=1)
    want = _forced_probs_of(ref, seqs, prompt, 4, sampling)  # every row through the model, as before
    assert got.shape == want.shape == (120, 4, VOCAB)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_distinct_prefixes_of_the_whole_set_change_no_value(monkeypatch):
    """Above one batch (n > 256 rows), teacher forcing and the float32 PIT run each distinct prefix of the whole set
    through the model once (T = 1, k = 1 on the shipped pair: 182 prefixes for 53,474 rows); every prob and u equals
    the batch-by-batch path's (seeded draws, same order) to float rounding."""
    from verifier.runner import models, prefixes

    ref, sampling = _model(), SamplingConfig()
    rng = np.random.default_rng(6)
    tokens = rng.choice([3, 11, 40, 2500], size=(700, 3))  # at most 16 + 4 distinct 2-token prefixes (padding reads as 0)
    tokens[-9:, 1:] = -1
    assert prefixes.distinct_prefixes(torch.as_tensor((1, 2)), tokens, 10_000)[0].shape[0] <= 20
    fast = np.concatenate(pitscore.pit_values(ref, (1, 2), tokens, sampling, np.random.default_rng(9))[0])
    fast_p = np.concatenate([p for _, p in ref.teacher_forced((1, 2), tokens, SamplingConfig(top_k=8))])
    monkeypatch.setattr(pitscore, "distinct_prefixes", lambda *a: None)
    monkeypatch.setattr(models, "distinct_prefixes", lambda *a: None)
    slow = np.concatenate(pitscore.pit_values(ref, (1, 2), tokens, sampling, np.random.default_rng(9))[0])
    slow_p = np.concatenate([p for _, p in ref.teacher_forced((1, 2), tokens, SamplingConfig(top_k=8))])
    np.testing.assert_allclose(fast, slow, atol=1e-6, rtol=0)
    np.testing.assert_allclose(fast_p, slow_p, atol=1e-6, rtol=0)
