"""Decoder behaviour on the shipped models and tabular models: greedy equality, determinism, EOS
and max_new_tokens, cache rollback consistency, the registry, the scorer, input validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verifier.decoders import (DECODER_REGISTRY, AncestralDecoder, SpeculativeDecoder, TargetScorer, make_decoder,
                               mutant_names)
from verifier.decoders._runner import CacheRunner
from verifier.errors import InvalidArgumentError, ModelLoadError
from verifier.exact import TabularLM, standard_tabular_pairs
from verifier.models import TabularCausalLM, load_model, load_tokenizer
from verifier.protocols import PADDING_TOKEN_ID, Decoder
from verifier.sampling import GREEDY, SamplingConfig
from verifier.validation import check_emitted_tokens

from ._helpers import processed_tabular


@pytest.fixture(scope="module")
def shipped():
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    tok = load_tokenizer("shipped:target")
    prompts = [tok(text, add_special_tokens=False)["input_ids"]
               for text in ("def __init__(self", "import os\n", "    for i in range(", "class Foo:\n    ")]
    return target, draft, prompts


def test_greedy_speculative_equals_target_greedy(shipped):
    """T=0: speculative (k=1, 3, 5; batch of 3 identical rows) == ancestral == HF generate, token for token."""
    target, draft, prompts = shipped
    n_new = 24
    for prompt in prompts:
        hf = target.generate(torch.tensor([prompt]), max_new_tokens=n_new, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        anc = AncestralDecoder(target, eos_token_id=None).generate(prompt, 3, n_new, GREEDY, 0)
        assert (anc == np.array(hf)).all(), prompt
        for k in (1, 3, 5):
            spec = SpeculativeDecoder(target, draft, k, eos_token_id=None).generate(prompt, 3, n_new, GREEDY, 0)
            assert (spec == np.array(hf)).all(), (prompt, k)


def test_same_seed_same_array_on_shipped_models(shipped):
    target, draft, prompts = shipped
    sampling = SamplingConfig(temperature=0.8, top_k=40, top_p=0.95, repetition_penalty=1.2)
    for decoder in (SpeculativeDecoder(target, draft, 3), AncestralDecoder(target)):
        a = decoder.generate(prompts[0], 16, 20, sampling, seed=7)
        b = decoder.generate(prompts[0], 16, 20, sampling, seed=7)
        c = decoder.generate(prompts[0], 16, 20, sampling, seed=8)
        assert a.dtype == np.int64 and a.shape == (16, 20)
        assert (a == b).all() and not (a == c).all()
        check_emitted_tokens(a, num_samples=16, max_new_tokens=20, vocab_size=384, eos_token_id=0)


def test_speculative_stats(shipped):
    target, draft, prompts = shipped
    dec = SpeculativeDecoder(target, draft, 4)
    dec.generate(prompts[1], 32, 30, SamplingConfig(), seed=1)
    st = dec.last_stats
    assert st.num_draft_tokens == 4 and st.rounds == len(st.accepted_counts) > 0
    assert st.first_round_accepted.shape == (32,)
    assert ((st.accepted_counts >= 0) & (st.accepted_counts <= 4)).all()
    assert 0 < st.acceptance_rate < 1


def test_cache_rollback_matches_fresh_forward(shipped):
    """Masked holes + per-row positions + compaction give the logits of a fresh forward of each
    row's retained sequence (float32 tolerance)."""
    target, _, prompts = shipped
    g = torch.Generator().manual_seed(0)
    runner = CacheRunner(target, torch.device("cpu"))
    prompt = prompts[0]
    runner.prefill(prompt, 3)
    seqs = [list(prompt) for _ in range(3)]
    for step in range(6):
        tokens = torch.randint(1, 384, (3, 4), generator=g)
        logits = runner.append(tokens)
        keep_n = torch.tensor([step % 2, 1, (step + 1) % 3])
        keep = torch.arange(4)[None] < keep_n[:, None]
        for r in range(3):
            with torch.no_grad():
                fresh = target(input_ids=torch.tensor([seqs[r] + tokens[r].tolist()])).logits[0, -4:]
            torch.testing.assert_close(logits[r], fresh, atol=1e-4, rtol=1e-4)
            seqs[r] += tokens[r, : keep_n[r]].tolist()
        runner.rollback(keep)
    assert runner.mask.shape[1] < len(prompt) + 6 * 4  # compaction happened
    assert runner.lengths.tolist() == [len(s) for s in seqs]


def _eos_pair():
    return standard_tabular_pairs()["bigram4_eos"]


@pytest.mark.parametrize("name", ["reference", "ancestral"])
def test_eos_and_max_new_tokens(name):
    pair = _eos_pair()
    dec = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 4)
    for max_new in (1, 2, 7):
        out = dec.generate([0], 500, max_new, SamplingConfig(), seed=3)
        check_emitted_tokens(out, num_samples=500, max_new_tokens=max_new, vocab_size=4, eos_token_id=3)
        assert out.shape == (500, max_new)
    out = dec.generate([0], 2000, 7, SamplingConfig(), seed=3)
    ended = (out == 3).any(axis=1)
    assert 0.2 < ended.mean() < 1.0  # EOS (token 3) is emitted and rows stop there
    assert (out[~ended] != PADDING_TOKEN_ID).all()  # rows without EOS are full


def test_prompt_ending_in_eos_continues():
    """EOS in the prompt is context, not the end: the decoder still emits max_new_tokens."""
    pair = _eos_pair()
    out = SpeculativeDecoder(TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 2).generate([3], 50, 4, SamplingConfig(), 0)
    assert (out[:, 0] != PADDING_TOKEN_ID).all()


def test_eos_certain_gives_one_token():
    lm = TabularLM({(): [0, 0, 1]}, 3, 0, eos_token_id=2)
    out = SpeculativeDecoder(TabularCausalLM(lm), TabularCausalLM(lm), 3).generate([0], 4, 5, SamplingConfig(), 0)
    assert out.tolist() == [[2, -1, -1, -1, -1]] * 4


def test_registry_names_and_declarations():
    assert all(name == name.lower() and " " not in name for name in DECODER_REGISTRY)
    assert {"full_p_fallback", "greedy_draft_softmax_q", "draft_raw_q", "target_unprocessed", "bonus_wrong_position",
            "draft_suffix_kept", "kv_not_rolled_back", "greedy_acceptance", "batch_cross_talk", "typical_acceptance",
            "degenerate_residual_div0"} <= set(mutant_names())
    assert DECODER_REGISTRY["typical_acceptance"].declared == "lossy"
    assert all(spec.visible_when for spec in DECODER_REGISTRY.values())
    pair = _eos_pair()
    for name in DECODER_REGISTRY:
        dec = make_decoder(name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 2)
        assert isinstance(dec, Decoder) and dec.name == name
    with pytest.raises(InvalidArgumentError, match="one of"):
        make_decoder("nope", None, None)


def test_invalid_arguments():
    pair = _eos_pair()
    t, d = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    with pytest.raises(InvalidArgumentError, match="num_draft_tokens"):
        SpeculativeDecoder(t, d, 0)
    dec = SpeculativeDecoder(t, d, 2)
    with pytest.raises(InvalidArgumentError, match="prompt_ids"):
        dec.generate([], 1, 1, SamplingConfig(), 0)
    with pytest.raises(InvalidArgumentError, match="prompt_ids"):
        dec.generate([9], 1, 1, SamplingConfig(), 0)
    with pytest.raises(InvalidArgumentError, match="num_samples"):
        dec.generate([0], 0, 1, SamplingConfig(), 0)
    with pytest.raises(InvalidArgumentError, match="sampling"):
        dec.generate([0], 1, 1, {"temperature": 1}, 0)
    other = TabularCausalLM(standard_tabular_pairs()["trigram3"].target)
    with pytest.raises(ModelLoadError, match="vocab"):
        SpeculativeDecoder(t, other, 2)


def test_scorer_matches_processed_table_rows():
    """Teacher-forced probs equal the processed table row of each emitted prefix (exact tables)."""
    pair = standard_tabular_pairs()["trigram3"]
    sampling = SamplingConfig(temperature=0.7, top_p=0.8, repetition_penalty=None)
    processed = processed_tabular(pair.target, sampling)
    samples = SpeculativeDecoder(TabularCausalLM(pair.target), TabularCausalLM(pair.draft), 2).generate(
        list(pair.prefix), 300, 4, sampling, 0)
    batches = list(TargetScorer(TabularCausalLM(pair.target), batch_size=128).score(pair.prefix, samples, sampling))
    assert [b.start for b in batches] == [0, 128, 256]
    probs = np.concatenate([b.probs for b in batches])
    for i in range(0, 300, 37):
        for t in range(4):
            row = processed.probs(tuple(pair.prefix) + tuple(samples[i, :t]))
            np.testing.assert_allclose(probs[i, t], [float(f) for f in row], atol=1e-12)


def test_scorer_on_shipped_model_with_eos_padding(shipped):
    target, draft, prompts = shipped
    sampling = SamplingConfig(temperature=1.0, repetition_penalty=1.3)
    samples = SpeculativeDecoder(target, draft, 3).generate(prompts[1], 8, 12, sampling, 4)
    samples[0, 5:] = PADDING_TOKEN_ID
    samples[0, 4] = 0  # EOS at position 4
    (batch,) = list(TargetScorer(target).score(prompts[1], samples, sampling))
    assert batch.probs.shape == (8, 12, 384) and batch.probs.dtype == np.float64
    assert not batch.valid[0, 5:].any() and (batch.probs[0, 5:] == 0).all()
    np.testing.assert_allclose(batch.probs[batch.valid].sum(-1), 1.0, atol=1e-12)
    # position 3 of row 1 by a plain forward: repetition penalty over prompt + first 3 tokens
    from verifier.sampling import processed_probs

    ctx = prompts[1] + samples[1, :3].tolist()
    with torch.no_grad():
        logits = target(input_ids=torch.tensor([ctx])).logits[0, -1]
    mask = torch.zeros(384, dtype=torch.bool)
    mask[torch.tensor(ctx)] = True
    expected = processed_probs(logits, sampling, mask).numpy()
    np.testing.assert_allclose(batch.probs[1, 3], expected, atol=1e-6)


def test_tabular_cache_rollback_and_compaction_keep_the_trigram_context():
    """Same check as on the shipped model, for TabularCache (its own column gather)."""
    pair = standard_tabular_pairs()["trigram3"]
    lm = TabularCausalLM(pair.target)
    g = torch.Generator().manual_seed(1)
    runner = CacheRunner(lm, torch.device("cpu"))
    runner.prefill([0, 1], 2)
    seqs = [[0, 1], [0, 1]]
    for step in range(8):
        tokens = torch.randint(0, 3, (2, 3), generator=g)
        logits = runner.append(tokens)
        for r in range(2):
            full = seqs[r] + tokens[r].tolist()
            expected = [float(f) for f in pair.target.probs(full)]
            assert torch.softmax(logits[r, -1], -1).tolist() == pytest.approx(expected, abs=1e-12)
        keep_n = torch.tensor([step % 2, 1])
        runner.rollback(torch.arange(3)[None] < keep_n[:, None])
        for r in range(2):
            seqs[r] += tokens[r, : keep_n[r]].tolist()
    assert runner.mask.shape[1] < 2 + 8 * 3  # compaction happened
    assert runner.lengths.tolist() == [len(s) for s in seqs]
