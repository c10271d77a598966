"""Worker handler for the llama-cpp-python stop-rule test: runs in the engine's venv (numpy + llama_cpp only).

``Llama.create_completion`` on a prompt with a logits processor that forces the first tokens (each forced token's
logit 0, every other -1e9; ``generate`` samples lazily, so the token being sampled is the next one it yields), and
``generate`` tapped to record every token the library's own stop check pulled.  The rest is the library's code.
"""
import numpy as np


class Handler:
    def __init__(self, target_gguf):
        from llama_cpp import Llama

        self.llm = Llama(model_path=target_gguf, n_ctx=128, n_threads=1, n_threads_batch=1, verbose=False, seed=1)

    def byte_token(self, value):
        """The id of the token whose text is the single byte ``value``."""
        return {"id": next(t for t in range(self.llm.n_vocab()) if self.llm.detokenize([t]) == bytes([int(value)]))}

    def completion(self, prompt_ids, forced, stop, max_tokens, seed):
        from llama_cpp import LogitsProcessorList

        pulled = []
        forced = [int(t) for t in forced]

        def force(input_ids, scores):
            if len(pulled) < len(forced):
                out = np.full_like(scores, -1e9)
                out[forced[len(pulled)]] = 0.0
                return out
            return scores

        inner = type(self.llm).generate.__get__(self.llm)

        def tap(*args, **kwargs):
            gen = inner(*args, **kwargs)
            try:
                for token in gen:
                    pulled.append(int(token))
                    yield token
            finally:
                gen.close()

        self.llm.generate = tap
        try:
            out = self.llm.create_completion([int(t) for t in prompt_ids], stop=list(stop), max_tokens=int(max_tokens),
                                             logits_processor=LogitsProcessorList([force]), seed=int(seed),
                                             temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
        finally:
            del self.llm.generate
        return {"pulled": np.asarray(pulled, dtype=np.int64), "finish_reason": out["choices"][0]["finish_reason"],
                "completion_tokens": int(out["usage"]["completion_tokens"])}
