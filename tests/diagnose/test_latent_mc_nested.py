"""The stale-KV Monte Carlo likelihood's nested contexts read from one forward pass (verifier.diagnose.latent_mc._evaluate).

Quick: two configs on 60 random contexts of the shipped target, a few seconds."""

import numpy as np
import pytest

from verifier.sampling import SamplingConfig


@pytest.mark.parametrize("cfg", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=20)],
                         ids=["t1", "t07k20"])
def test_nested_contexts_from_one_forward_pass_equal_their_own(cfg):
    """The Monte Carlo likelihood asks for nested contexts (T, T + x_t, ...): ``_evaluate`` runs only the contexts no
    other one extends (within NESTED_KEEP positions) and reads the rest from their forward passes.  On the shipped
    target (a Hugging Face LM) every requested context's probs equal those of its own forward pass to float32 rounding
    (the same kept tokens, probs within 5e-5 relative: the logits move by ~1e-7 relative between matrix shapes,
    amplified by 1 / T and the softmax), and the forward rows are the leaves plus the prefixes deeper than NESTED_KEEP."""
    from verifier.diagnose.inputs import ProbsAfter
    from verifier.diagnose.latent_mc import NESTED_KEEP, _evaluate
    from verifier.models import load_model, shipped_checkpoint
    from verifier.runner.models import ReferenceModel

    target = load_model(shipped_checkpoint("target"))
    ref = ReferenceModel(target, target.config.vocab_size, target.config.eos_token_id)
    after = ProbsAfter(ref, cfg, 3)
    rng = np.random.default_rng(5)
    leaves = [tuple(int(v) for v in rng.integers(1, 384, size=int(n))) for n in rng.integers(4, 14, size=60)]
    contexts = [c[:m] for c in leaves for m in range(3, len(c) + 1)]  # every prefix from the prompt's length on
    rows: list[int] = []

    class Counting:  # the same oracle, counting the rows of its nested forward passes
        nested = property(lambda self: lambda b, keep: rows.append(len(b)) or after.nested(b, keep))

        def __call__(self, b):
            return after(b)

    got = _evaluate(Counting(), contexts)
    plain = _evaluate(lambda b: after(b), contexts)  # no nested reader: every context its own forward pass
    assert set(got) == set(plain) == set(contexts)
    for c in contexts:
        assert np.array_equal(got[c] > 0, plain[c] > 0)
        np.testing.assert_allclose(got[c], plain[c], rtol=5e-5, atol=1e-9)
    deep = sum(max(0, len(c) - 3 + 1 - NESTED_KEEP) for c in leaves)  # prefixes out of reach of their leaf's pass
    assert len(set(leaves)) <= sum(rows) <= len(set(leaves)) + deep < len(set(contexts))


def test_next_probs_keep_is_the_plain_call_at_its_last_position_and_checks_its_range():
    """``next_probs(..., keep=1)[:, 0]`` is the plain call bit for bit; ``keep`` outside 1..prefix_len is refused, and
    with a presence penalty no kept prefix may be shorter than the prompt (its context codes start there)."""
    from verifier.errors import InvalidArgumentError
    from verifier.models import load_model, shipped_checkpoint
    from verifier.runner.models import ReferenceModel

    target = load_model(shipped_checkpoint("target"))
    ref = ReferenceModel(target, target.config.vocab_size, target.config.eos_token_id)
    ctx = np.random.default_rng(2).integers(1, 384, size=(5, 9))
    for cfg in (SamplingConfig(temperature=0.7, top_k=20), SamplingConfig(presence_penalty=0.5)):
        plain = ref.next_probs(ctx, cfg, 3)
        assert np.array_equal(ref.next_probs(ctx, cfg, 3, keep=1)[:, 0], plain)
        assert ref.next_probs(ctx, cfg, 3, keep=4).shape == (5, 4, 384)
    for keep, cfg in ((0, SamplingConfig()), (10, SamplingConfig()), (8, SamplingConfig(presence_penalty=0.5))):
        with pytest.raises(InvalidArgumentError, match="keep"):
            ref.next_probs(ctx, cfg, 3, keep=keep)
    assert ref.next_probs(ctx, SamplingConfig(presence_penalty=0.5), 3, keep=7).shape == (5, 7, 384)
