"""Control patches of the transformers findings (``control_patch=NAME`` of the ``transformers`` adapter; off by default).

Each patch changes only the defect a FINDINGS.md names, inside the worker process, so that a control run can show the
verdict PASS with that defect alone fixed (reports/audits/transformers-5.24.0/FINDINGS.md):

* ``usd_logit_order``: ``AssistantToTargetTranslator.get_target_logits`` writes a pruned assistant head's columns to
  the target ids of the tokens they hold (universal speculative decoding with a different-tokenizer draft);
* ``gemma4_greedy_q``: the Gemma4 assistant hands the point mass it drafted from as q;
* ``draft_warpers_once``: the assistant of assisted generation applies the sampling warpers (temperature, top-k, top-p,
  min-p, ...) once, not twice (reports/audits/transformers-5.25.0/field-kinds/lossy/FINDINGS.md: an efficiency finding,
  not a bias).
"""

from __future__ import annotations

import torch

__all__ = ["CONTROL_PATCHES", "patch_usd_logit_order", "patch_gemma4_greedy_q", "patch_draft_warpers_once"]


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


def patch_draft_warpers_once() -> None:
    """CONTROL ONLY (``control_patch="draft_warpers_once"``, off by default): the assistant's sampling warpers once.

    ``GenerationMixin._assisted_decoding`` hands the candidate generator the target's *prepared* processor list (its
    warpers included: ``TemperatureLogitsWarper(T)``, top-k, top-p, min-p, ...), and ``AssistedCandidateGenerator``
    passes it on to ``assistant_model.generate(logits_processor=..., generation_config=<a copy with do_sample and T>)``,
    whose ``_get_logits_processor`` merges the passed list *before* it appends the warpers of the generation config:
    every warper runs twice, so the draft samples at ``T**2`` (top-p applied twice keeps fewer tokens).  The scores
    it returns are the ones it sampled from, so the rule stays lossless; acceptance falls (T = 2: 0.646 instead of
    0.724 on the shipped pair).  The patch drops the warpers from the list the assistant is handed (its generate
    re-creates each once from the config); nothing else changes.
    """
    from transformers.generation import candidate_generator as cg
    from transformers.generation import logits_process as lp

    cls = cg.AssistedCandidateGenerator
    original = cls.__init__
    if getattr(original, "_specverify_control", False):
        return
    warpers = tuple(getattr(lp, name) for name in ("TemperatureLogitsWarper", "TopHLogitsWarper", "TopKLogitsWarper",
                                                   "TopPLogitsWarper", "MinPLogitsWarper", "TypicalLogitsWarper",
                                                   "EpsilonLogitsWarper", "EtaLogitsWarper") if hasattr(lp, name))

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.logits_processor = [p for p in self.logits_processor if not isinstance(p, warpers)]

    __init__._specverify_control = True
    cls.__init__ = __init__


CONTROL_PATCHES = {"usd_logit_order": patch_usd_logit_order, "gemma4_greedy_q": patch_gemma4_greedy_q,
                   "draft_warpers_once": patch_draft_warpers_once}  # name -> monkeypatch (controls of findings; off by default)
