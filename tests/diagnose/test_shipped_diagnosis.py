"""Diagnosis on the shipped tiny transformers (vocab 384): the ci suite's shipped setting (prompt "def ",
k = 2, 3 tokens, n = 3000, T = 1).  Per-sequence likelihoods are batched O(T k V) per row; the fit check
covers position 1's law and the mechanism's predictive PIT at every position.  Fixed seeds; alpha as
in test_zoo_diagnosis.
"""

import pytest

from verifier.decoders.mutants import make_decoder
from verifier.diagnose.sample_set import diagnose_sample_set
from verifier.models import load_model, load_tokenizer, shipped_checkpoint
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

pytestmark = pytest.mark.slow
N, K, TOKENS = 3000, 2, 3


@pytest.fixture(scope="module")
def shipped():
    target, draft = load_model(shipped_checkpoint("target")), load_model(shipped_checkpoint("draft"))
    prompt = tuple(load_tokenizer(shipped_checkpoint("target"))("def ", add_special_tokens=False)["input_ids"])
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    return target, draft, prompt, ReferenceModel(target, vocab, eos), ReferenceModel(draft, vocab, eos)


@pytest.mark.parametrize("name,expected", [("full_p_fallback", "full_p_fallback"), ("typical_acceptance", "typical_acceptance"),
                                           ("reference", None)])
def test_shipped_mutants_are_diagnosed_as_themselves(shipped, name, expected):
    target, draft, prompt, tr, dr = shipped
    cfg = SamplingConfig(temperature=1.0)
    rows = make_decoder(name, target, draft, K).generate(prompt, N, TOKENS, cfg, seed=1506)
    d = diagnose_sample_set(tr, dr, prompt, cfg, K, rows, bias_detected=expected is not None, with_fits=False)["decision"]
    if expected is None:
        assert d["status"] == "none preferred", d["sentence"]
    else:
        assert d["status"] == "consistent" and expected in d["best"], d["sentence"]
