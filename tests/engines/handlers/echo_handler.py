"""A real worker handler for the bridge tests: runs in a worker process, imports only numpy."""
import os

import numpy as np


class Handler:
    def __init__(self, vocab_size: int, fail_init: bool = False, startup_sleep: float = 0.0, call_sleep: float = 0.0):
        if fail_init:
            raise ValueError("model file is corrupt")
        if startup_sleep:  # an engine whose start-up takes a while (model load)
            import time

            time.sleep(startup_sleep)
        self.vocab_size = vocab_size
        self.call_sleep = call_sleep  # seconds each generate call takes (an engine whose calls are the long work)
        print("engine banner printed to stdout")  # must not corrupt the protocol

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, return_logprobs=False, row_temperatures=None,
                 row_prompts=None):
        if self.call_sleep:
            import time

            time.sleep(self.call_sleep)
        rng = np.random.default_rng(int(seeds[0]))
        tokens = rng.integers(0, self.vocab_size, size=(len(seeds), max_new_tokens))
        reply = {"tokens": tokens, "accepted_counts": np.full(len(seeds), 1), "drafted": 2 * len(seeds), "accepted": len(seeds),
                 "extra": {"temperature": sampling["temperature"], "seeds": seeds.tolist(), "row_temperatures": row_temperatures,
                           "row_prompts": row_prompts}}
        if return_logprobs:  # the uniform law's logprob of every token; one column short when asked to misbehave
            cols = max_new_tokens - 1 if sampling.get("top_k") == 1 else max_new_tokens
            reply["logprobs"] = np.full((len(seeds), cols), -np.log(self.vocab_size))
        return reply

    def target_logits(self, prompt_ids):
        return {"logits": np.log(np.full(self.vocab_size, 1.0 / self.vocab_size))}

    def crash(self):
        return {"x": 1 / 0}

    def die(self):
        os._exit(7)

    def module_origin(self, name):
        """Where `import name` would come from inside the worker (None: not importable)."""
        import importlib.util

        spec = importlib.util.find_spec(name)
        return {"origin": None if spec is None else spec.origin}
