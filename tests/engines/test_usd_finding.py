"""Finding (transformers 5.24, universal assisted generation, ``do_sample=True``): q columns in the wrong order.

Exact reproduction, no sampling: with an assistant whose vocabulary has tokens the target lacks (so its LM head is
pruned), ``AssistantToTargetTranslator.get_target_ids`` maps pruned column j to ``a2t[assistant_overlap_token_ids[j]]``
but ``get_target_logits`` writes column j to ``a2t[mask][j]`` (assistant-id order).  ``_speculative_sampling`` then
divides p by a permuted q: the first-token law at the shipped prompt "def " is off by TV ~0.44 (exact, float64 from
the real models).  The control (``control_patch="usd_logit_order"``, only that mapping fixed) gives TV 0.
Needs ``bash ci/engines/transformers.sh`` (the retokenized draft); ~1 min.
"""

import numpy as np
import pytest
import torch


def _first_token_law(p, q_sampled, q_used):
    """Output law of one canonical step when the draft samples from q_sampled but the ratio/residual use q_used."""
    ratio = np.where(q_used > 0, np.minimum(1.0, p / np.where(q_used > 0, q_used, 1.0)), 1.0)
    accepted = q_sampled * ratio
    residual = np.maximum(p - q_used, 0.0)
    return accepted + (1.0 - accepted.sum()) * residual / residual.sum()


@pytest.fixture
def translator_setup(require_engine):
    eng = require_engine("transformers")
    draft = eng.install_dir() / "retokenized-draft"
    if not draft.is_dir():
        pytest.skip(f"run `{eng.install_script()}`")
    from verifier.models import load_model, load_tokenizer

    return load_tokenizer("shipped:target"), load_tokenizer(str(draft)), load_model("shipped:target"), load_model(str(draft))


def _laws(setup, patched):
    from transformers.generation.candidate_generator import AssistantToTargetTranslator

    from verifier.engines.hf_control_patches import patch_usd_logit_order

    tt, at, target, draft = setup
    original = AssistantToTargetTranslator.get_target_logits
    try:
        if patched:
            patch_usd_logit_order()
        tr = AssistantToTargetTranslator(tt, at, 384, assistant_model=None, assistant_prune_lm_head=False)
        tr.assistant_prune_lm_head = True  # the pruned-head path (what generate() builds), without touching a model
        tr.assistant_overlap_token_ids = torch.tensor(list(tr.target_to_assistant_input_ids.values()))
        overlap = tr.assistant_overlap_token_ids
        with torch.no_grad():
            p = target(torch.tensor([tt("def ", add_special_tokens=False)["input_ids"]])).logits[0, -1].double().softmax(-1).numpy()
            pruned = draft(torch.tensor([at("def ", add_special_tokens=False)["input_ids"]])).logits[0, -1, overlap].double()
        # the draft token: pruned column j ~ softmax(pruned), emitted as target id a2t[overlap[j]] (get_target_ids)
        q_sampled = np.zeros(384)
        q_sampled[tr._assistant_to_target_input_ids[overlap].numpy()] = pruned.softmax(-1).numpy()
        q_used = tr.get_target_logits(pruned.float()[None, None, :])[0, 0].double().softmax(-1).numpy()
    finally:
        AssistantToTargetTranslator.get_target_logits = original
    return p, _first_token_law(p, q_sampled, q_used)


def test_usd_q_column_order_biases_the_first_token_and_the_control_fixes_it(translator_setup):
    p, law = _laws(translator_setup, patched=False)
    assert 0.5 * np.abs(law - p).sum() > 0.3  # 0.445 measured
    p, law = _laws(translator_setup, patched=True)
    assert 0.5 * np.abs(law - p).sum() < 1e-6
