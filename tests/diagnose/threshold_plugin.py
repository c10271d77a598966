"""A plugin decoder whose target sits a rounding error away from the audit's min-p threshold, with a draft the harness
cannot score (``draft_known = False``), as a served model is in a URL audit (the server drafts with its own model and
computes the target with its own numerics).

The speculative rule is the reference's (lossless); only the min-p threshold it samples at is 2% higher than the one
requested (``min_p * 1.01 ** 2``): on trigram3 after (0, 1) token 0 (p / p_max = 0.4) is kept by the requested
``min_p = 0.4 / 1.01`` and dropped at ``0.4 * 1.01`` -- the support change a rounding-level logit error (0.01 nats)
makes at a threshold.
"""

from dataclasses import replace

from verifier.decoders.speculative import SpeculativeDecoder


class ThresholdShifted(SpeculativeDecoder):
    draft_known = False  # verifier.runner.draft: the harness must not score a draft for it (as for a server)

    def __init__(self, target, num_draft_tokens=2):
        super().__init__(target, target, num_draft_tokens, name="min-p threshold 2% off")

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        shifted = replace(sampling, min_p=sampling.min_p * 1.01 ** 2) if sampling.min_p else sampling
        return super().generate(prompt_ids, num_samples, max_new_tokens, shifted, seed)
