"""Finding (transformers 5.25.0 assisted generation, ``do_sample=True``): the assistant's warpers run twice.

``_assisted_decoding`` hands the candidate generator the target's prepared processor list (temperature, top-k, top-p,
... included) and ``AssistedCandidateGenerator`` passes it to ``assistant_model.generate``, whose
``_get_logits_processor`` appends the generation config's warpers after merging it: the draft is drawn at ``T**2``.
The scores handed to ``_speculative_sampling`` are those it drew from, so the output law is the target's (lossless)
and only acceptance falls (reports/audits/transformers-5.25.0/field-kinds/lossy/FINDINGS.md).

Exact, no sampling statistics: one real ``generate`` call on the shipped pair at T = 2, k = 1; the q the assistant
hands over equals softmax(draft logits / 4) as shipped (to 1e-5) and softmax(draft logits / 2) under the control
(``control_patch="draft_warpers_once"``, only that fixed).  Runs in seconds (transformers is in the main install).
"""

import pytest
import torch


def _handed_q(patched: bool, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    from transformers.generation import candidate_generator as cg

    from verifier.engines.hf_assisted import _generation_config
    from verifier.engines.hf_control_patches import patch_draft_warpers_once
    from verifier.models import load_model
    from verifier.sampling import SamplingConfig

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "__init__", cg.AssistedCandidateGenerator.__init__)
    if patched:
        patch_draft_warpers_once()  # restored by monkeypatch at teardown
    seen = []
    original = cg.AssistedCandidateGenerator.get_candidates

    def get_candidates(self, input_ids, *args, **kwargs):
        ids, logits = original(self, input_ids, *args, **kwargs)
        seen.append(logits[0, 0].detach().clone())
        return ids, logits

    monkeypatch.setattr(cg.AssistedCandidateGenerator, "get_candidates", get_candidates)
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    config = _generation_config(target, SamplingConfig(temperature=2.0), 2, None)
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = 1, "constant"
    prompt = torch.tensor([[272, 70, 221]])
    torch.manual_seed(0)
    target.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config, assistant_model=draft)
    with torch.inference_mode():
        raw = draft(prompt).logits[0, -1].double()
    return torch.softmax(seen[0].double(), -1), raw


@pytest.mark.parametrize("patched, temperature", [(False, 4.0), (True, 2.0)])
def test_the_assistant_draws_at_t_squared_and_the_control_at_t(patched, temperature, monkeypatch):
    q, raw = _handed_q(patched, monkeypatch)
    want = torch.softmax(raw / temperature, -1)
    assert float((q - want).abs().sum() / 2) < 1e-5
    other = torch.softmax(raw / (2.0 if temperature == 4.0 else 4.0), -1)
    assert float((q - other).abs().sum() / 2) > 0.05  # the two temperatures are far apart on this pair
