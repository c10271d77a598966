"""Two decoders whose bias is a mechanism the zoo does not know (for "matches no known mechanism").

* ``recover_from_draft``: the recovered token is drawn from the draft probs q instead of the residual.
* ``hot_target``: plain sampling from the target at 1.6 x the requested temperature (a sampler that
  applies the temperature twice over, no speculative decoding at all).
* ``TopKIgnored``: the reference rule with the request's top-k / top-p never applied, and a draft the harness cannot
  score (``draft_known = False``), as a server that drops the filter from the request.
"""

from dataclasses import replace

from verifier.decoders import kernels as K
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder


def _recover_from_draft_kernel(target_probs, draft_probs, draft_token_ids, generator):
    args = K._verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return K._chain(*args, generator, recover_rule=lambda p, q: q)


def recover_from_draft(target, draft, num_draft_tokens, **options):
    return SpeculativeDecoder(target, draft, num_draft_tokens, kernel=_recover_from_draft_kernel, **options)


class _HotTarget(AncestralDecoder):
    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return super().generate(prompt_ids, num_samples, max_new_tokens,
                                replace(sampling, temperature=sampling.temperature * 1.6), seed)


def hot_target(target, **options):
    return _HotTarget(target, **options)


class TopKIgnored(SpeculativeDecoder):
    draft_known = False  # verifier.runner.draft: scored as a server's decoder (its draft unknown)

    def __init__(self, target, num_draft_tokens=2):
        super().__init__(target, target, num_draft_tokens, name="top-k / top-p ignored")

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return super().generate(prompt_ids, num_samples, max_new_tokens, replace(sampling, top_k=None, top_p=None), seed)
