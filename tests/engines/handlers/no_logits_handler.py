"""A real worker handler without ``target_logits`` (an engine that exposes no logits)."""
import numpy as np


class Handler:
    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds):
        rng = np.random.default_rng(int(seeds[0]))
        return {"tokens": rng.integers(0, self.vocab_size, size=(len(seeds), max_new_tokens))}
