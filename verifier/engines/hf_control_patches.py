"""Control patches of the transformers findings (``control_patch=NAME`` of the ``transformers`` adapter; off by default).

Each patch changes only the defect a FINDINGS.md names, inside the worker process, so that a control run can show the
verdict PASS with that defect alone fixed (reports/audits/transformers-5.24.0/FINDINGS.md):

* ``usd_logit_order``: ``AssistantToTargetTranslator.get_target_logits`` writes a pruned assistant head's columns to
  the target ids of the tokens they hold (universal speculative decoding with a different-tokenizer draft);
* ``gemma4_greedy_q``: the Gemma4 assistant hands the point mass it drafted from as q.
"""

from __future__ import annotations

import torch

__all__ = ["CONTROL_PATCHES", "patch_usd_logit_order", "patch_gemma4_greedy_q"]


def patch_usd_logit_order() -> None:
    """CONTROL ONLY (``control_patch="usd_logit_order"``, off by default): fix transformers 5.24's
    ``AssistantToTargetTranslator.get_target_logits`` with a pruned assistant LM head.

    The pruned head's column ``j`` is assistant id ``assistant_overlap_token_ids[j]`` (the order of the assistant
    tokenizer's ``get_vocab()``, a hash order), and ``get_target_ids`` maps a sampled column that way; but
    ``get_target_logits`` writes column ``j`` to the ``j``-th shared target id in *assistant id order*.  So the q
    that ``_speculative_sampling`` divides by is a permutation of the q the draft token was sampled from
    (reports/audits/transformers-5.24.0/FINDINGS.md).  The patch writes column ``j`` to the target id of
    ``assistant_overlap_token_ids[j]``; nothing else changes.
    """
    from transformers.generation import candidate_generator as cg

    original = cg.AssistantToTargetTranslator.get_target_logits
    if getattr(original, "_specverify_control", False):
        return

    def get_target_logits(self, assistant_logits):
        if not (self.assistant_prune_lm_head and len(self._suppress_input_ids) > 0):
            return original(self, assistant_logits)
        shape = (*assistant_logits.shape[:-1], self.target_vocab_size)
        target_logits = torch.full(shape, self.FILTER_VALUE, device=self._assistant_model_device)
        target_logits[..., self._assistant_to_target_input_ids[self.assistant_overlap_token_ids]] = assistant_logits
        return target_logits

    get_target_logits._specverify_control = True
    cg.AssistantToTargetTranslator.get_target_logits = get_target_logits


def patch_gemma4_greedy_q() -> None:
    """CONTROL ONLY (``control_patch="gemma4_greedy_q"``, off by default): the Gemma4 assistant drafts greedily
    (``argmax``) but hands ``softmax(raw logits)`` to ``_speculative_sampling`` as q.  The patch hands over the law the
    draft was actually drawn from -- a point mass on each drafted token -- and changes nothing else
    (reports/audits/transformers-5.24.0/FINDINGS.md)."""
    from transformers.generation import candidate_generator as cg

    cls = cg.SinglePositionMultiTokenCandidateGenerator
    original = cls.get_candidates
    if getattr(original, "_specverify_control", False):
        return

    def get_candidates(self, input_ids, *args, **kwargs):
        ids, logits = original(self, input_ids, *args, **kwargs)
        if logits is None:
            return ids, logits
        drafted = ids[:, -logits.shape[1]:]
        point = torch.full_like(logits, float("-inf"))
        point.scatter_(-1, drafted.unsqueeze(-1).to(logits.device), 0.0)
        return ids, point

    get_candidates._specverify_control = True
    cls.get_candidates = get_candidates


CONTROL_PATCHES = {"usd_logit_order": patch_usd_logit_order, "gemma4_greedy_q": patch_gemma4_greedy_q}  # name -> monkeypatch (controls of findings; off by default)
