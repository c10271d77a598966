"""A decoder whose target logits are off by a rounding error at a min-p threshold: the reference decoder run with
min-p x 1.03 (token 0 of trigram3 at prompt (0, 1) dropped); without min-p it runs at 0.7 x the temperature."""
from dataclasses import replace

from verifier.decoders import make_decoder


class Flip:
    def __init__(self, target, draft, num_draft_tokens):
        self.inner = make_decoder("reference", target, draft, num_draft_tokens)
        self.name, self.last_stats = "flip", None

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        wrong = (replace(sampling, min_p=sampling.min_p * 1.03) if sampling.min_p
                 else replace(sampling, temperature=sampling.temperature * 0.7))
        return self.inner.generate(prompt_ids, num_samples, max_new_tokens, wrong, seed)


def make(target, draft, num_draft_tokens):
    return Flip(target, draft, num_draft_tokens)
