"""Third-party-style lossless decoder plugins for the acceptance tests (loaded by ``module:factory``).

* :func:`fresh_target_match` -- the reference decoder with the fresh-target-match kernel (accept a
  draft iff it equals a fresh target sample), as a plugin author would write it.
* :func:`joint_topk_topp` -- the reference decoder whose *draft* path applies top-k and top-p
  jointly (both masks computed on the same tempered probs) while the target path applies them one
  after the other (:func:`verifier.sampling.processed_probs`).  Lossless: the draft samples the q it
  hands to the kernel, whatever q is.
* ``hide_stats=True`` on either: the same decoder without ``last_stats``.
"""

from __future__ import annotations

import torch

from verifier.decoders import SpeculativeDecoder
from verifier.decoders.kernels import sample_from_probs
from verifier.decoders.lossless import fresh_target_match_kernel


class _Hidden:
    """The decoder without ``last_stats`` (a decoder that does not report its statistics)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def generate(self, *args, **kwargs):
        return self.inner.generate(*args, **kwargs)


class JointTopKTopPDraft(SpeculativeDecoder):
    def _propose(self, logits, sampling, seen, gen):
        probs = torch.softmax(logits.to(torch.float64) / sampling.temperature, dim=-1)
        keep = torch.ones_like(probs, dtype=torch.bool)
        if sampling.top_k is not None:
            keep &= probs >= torch.topk(probs, sampling.top_k, dim=-1).values[..., -1:]
        if sampling.top_p is not None:
            sorted_p, order = probs.sort(dim=-1, descending=True)
            before = sorted_p.cumsum(dim=-1) - sorted_p
            keep &= torch.zeros_like(keep).scatter(-1, order, before < sampling.top_p)
        q = torch.where(keep, probs, 0.0)
        q = q / q.sum(dim=-1, keepdim=True)
        return sample_from_probs(q, torch.rand(q.shape[0], dtype=torch.float64, device=q.device, generator=gen)), q


def fresh_target_match(target, draft, num_draft_tokens, hide_stats: bool = False):
    dec = SpeculativeDecoder(target, draft, num_draft_tokens, kernel=fresh_target_match_kernel)
    return _Hidden(dec) if hide_stats else dec


def joint_topk_topp(target, draft, num_draft_tokens, hide_stats: bool = False):
    dec = JointTopKTopPDraft(target, draft, num_draft_tokens)
    return _Hidden(dec) if hide_stats else dec
