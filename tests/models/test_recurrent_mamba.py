"""A tiny random Mamba (transformers ``MambaForCausalLM``, torch reference path on CPU) as a recurrent target.

Issue 29, bug kind 8.  The target's law of 3 tokens after prompt (1, 2, 3) is computed once by full-sequence
forwards over every 2-token continuation (float64 softmax of the float32 logits, no cache: independent of the
decoders' stepping); a Mamba decoder's rows are tested against it with the joint cell at positions (0, 1, 2)
(4,913 categories, pooled), alpha = 1e-3, 2,000 rows, seed 3, k = 2, T = 1.  The reference (state rolled back)
must pass; ``state_not_rolled_back`` (conv window rolled back, SSM state not -- what ``DynamicCache.crop`` does)
must fail: measured TV 0.47 there (the cell resolves about 0.12 at this n).
"""

import itertools
from fractions import Fraction

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from verifier.decoders import make_decoder  # noqa: E402
from verifier.exact import TabularLM  # noqa: E402
from verifier.models.recurrent import HFStateSpaceLM, random_mamba  # noqa: E402
from verifier.sampling import SamplingConfig  # noqa: E402
from verifier.stats.cells import joint_test  # noqa: E402

V, PROMPT, WIDTH, K, ROWS, SEED, ALPHA = 16, [1, 2, 3], 3, 2, 2_000, 3, 1e-3


@pytest.fixture(scope="module")
def pair():
    model = random_mamba(V, seed=0)
    rng = np.random.default_rng(0)
    rows = {}
    for a in range(V):
        w = rng.integers(1, 10, size=V)
        rows[(a,)] = [Fraction(int(x), int(w.sum())) for x in w]
    return model, TabularLM(rows, vocab_size=V, context_len=1, name="bigram16")


def _target_law(model) -> np.ndarray:
    """P(t1, t2, t3) in the joint cell's encoding (index sum (t_i + 1) (V + 1)^(2 - i))."""
    conts = list(itertools.product(range(V), repeat=WIDTH - 1))
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([PROMPT + list(c) for c in conts])).logits.double(), -1).numpy()
    p = len(PROMPT)
    probs = np.zeros((V + 1) ** WIDTH)
    for i, (t1, t2) in enumerate(conts):
        base = lp[i, p - 1, t1] + lp[i, p, t2]
        for t3 in range(V):
            probs[((t1 + 1) * (V + 1) + t2 + 1) * (V + 1) + t3 + 1] = np.exp(base + lp[i, p + 1, t3])
    return probs / probs.sum()


@pytest.mark.full
def test_restore_puts_the_state_back(pair):
    model, _ = pair
    lm = HFStateSpaceLM(model)
    lm.start(PROMPT, 2)
    lm.step(torch.tensor([3, 3]))
    saved = lm.snapshot()
    lm.step(torch.tensor([5, 9]))
    lm.restore(saved, torch.tensor([True, False]))
    fresh = HFStateSpaceLM(model)
    fresh.start(PROMPT + [3], 1)
    assert torch.allclose(lm.step(torch.tensor([7, 7]))[0], fresh.step(torch.tensor([7]))[0], atol=1e-4)


@pytest.mark.full
@pytest.mark.parametrize("name", ["recurrent_reference", "state_not_rolled_back"])
def test_mamba_state_rollback(pair, name):
    model, draft = pair
    rows = make_decoder(name, model, draft, K).generate(PROMPT, ROWS, WIDTH, SamplingConfig(), seed=SEED)
    result = joint_test(rows, _target_law(model), (0, 1, 2), V, alpha=ALPHA, rng=np.random.default_rng(0))
    assert (result.pvalue <= ALPHA) == (name == "state_not_rolled_back"), result


@pytest.mark.full
def test_mamba2_steps_and_restores():
    """The same adapter drives a random ``Mamba2ForCausalLM`` (transformers' torch path on CPU): stepped logits equal
    a full forward's, and a restored row continues as if the extra token had never been fed."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(0)
    config = Mamba2Config(vocab_size=V, hidden_size=32, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2,
                          num_heads=4, head_dim=16, n_groups=1, chunk_size=8, eos_token_id=None)
    model = Mamba2ForCausalLM(config).eval()
    lm = HFStateSpaceLM(model)
    lm.start([1, 2, 3], 2)
    stepped = [lm.step(torch.tensor([t, t]))[0] for t in (3, 4, 5, 6)]
    with torch.no_grad():
        full = model(torch.tensor([[1, 2, 3, 4, 5, 6]])).logits[0, 2:].double()
    assert torch.allclose(torch.stack(stepped), full, atol=1e-4)
    saved = lm.snapshot()
    lm.step(torch.tensor([9, 9]))
    lm.restore(saved, torch.tensor([True, False]))
    fresh = HFStateSpaceLM(model)
    fresh.start([1, 2, 3, 4, 5, 6, 7], 1)
    out = lm.step(torch.tensor([7, 7]))
    assert torch.allclose(out[0], fresh.step(torch.tensor([7]))[0], atol=1e-4)
    assert not torch.allclose(out[1], out[0], atol=1e-2)  # the row not restored kept token 9 in its state
