"""The reference decoders' row-block path (verifier/decoders/_fused.py) emits the same tokens as the
general path (whole-batch processed probs handed to verify_chain) for the same seed: bit-identity,
checked on a random-init Llama with blocks of 2-3 rows (ragged tails included) at 1 and 2 torch threads."""

import pytest
import torch

from verifier.decoders import _fused
from verifier.decoders.kernels import sample_from_probs, verify_chain
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.sampling import SamplingConfig, processed_probs

VOCAB = 500
CONFIGS = [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=40), SamplingConfig(top_p=0.8),
           SamplingConfig(temperature=1.3, top_k=100, top_p=0.9, repetition_penalty=1.3), SamplingConfig(temperature=0.0)]


@pytest.fixture(scope="module")
def pair():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                      bos_token_id=0, eos_token_id=VOCAB - 1, pad_token_id=None)
    models = []
    for noise in (0.0, 0.5):  # the draft is the target with a perturbed output layer: accepts and rejects both happen
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            w = model.lm_head.weight
            w.mul_(20.0).add_(noise * w.std() * torch.randn(w.shape, generator=torch.Generator().manual_seed(1)))
        models.append(model)
    return models


def _general_kernel(*args):  # the reference kernel, but not `verify_chain` itself: the whole-batch path
    return verify_chain(*args)


# quick tier: top-p at 2 threads and the two 1-thread cases; the other configurations at 2 threads in the full tier (5-15 s each)
@pytest.mark.parametrize("cfg,threads", [(c, 2) if c is CONFIGS[2] else pytest.param(c, 2, marks=pytest.mark.full) for c in CONFIGS]
                         + [(CONFIGS[0], 1), (CONFIGS[3], 1)],
                         ids=lambda v: v.label() if isinstance(v, SamplingConfig) else f"threads{v}")
def test_fused_round_emits_the_general_paths_tokens(pair, cfg, threads, monkeypatch):
    torch.set_num_threads(threads)
    target, draft = pair
    monkeypatch.setattr(_fused, "BLOCK_BYTES", 8 * 3 * VOCAB * 3)  # 3 rows per verify block, 9 per draft block
    seen_counts = set()
    for k, batch in ((2, 1), (2, 2), (2, 31), (3, 64)):
        fused = SpeculativeDecoder(target, draft, k)
        general = SpeculativeDecoder(target, draft, k, kernel=_general_kernel)
        assert fused._fused() and not general._fused()
        a = fused.generate([1, 2, 3], batch, 6, cfg, seed=11)
        b = general.generate([1, 2, 3], batch, 6, cfg, seed=11)
        assert (a == b).all(), (k, batch)
        assert (fused.last_stats.accepted_counts == general.last_stats.accepted_counts).all()
        seen_counts |= set(fused.last_stats.accepted_counts.tolist())
    if not cfg.greedy:  # the comparison covered rejections at every position and full acceptance
        assert set(range(4)) <= seen_counts, seen_counts


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.label())
def test_propose_equals_whole_batch_draw(cfg, monkeypatch):
    monkeypatch.setattr(_fused, "BLOCK_BYTES", 8 * VOCAB * 4)
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(23, VOCAB, generator=g) * 4
    seen = torch.rand(23, VOCAB, generator=g) < 0.05
    u = torch.rand(23, dtype=torch.float64, generator=g)
    whole = processed_probs(logits, cfg, seen)
    token, prob = _fused.propose(logits, cfg, seen, u)
    assert torch.equal(token, sample_from_probs(whole, u))
    assert torch.equal(prob, whole.gather(-1, token[:, None])[:, 0])


def test_blocks_never_leave_a_one_row_tail():
    for batch in range(1, 40):
        for rows in (2, 3, 5):
            sizes = [s.stop - s.start for s in _fused._blocks(batch, rows)]
            assert sum(sizes) == batch and (batch == 1 or min(sizes) >= 2), (batch, rows, sizes)
