"""Worker handler for ``llama-cpp-python``: runs in the engine's venv (numpy + llama_cpp only).

``Llama(model_path=TARGET, draft_model=DRAFT)`` then ``Llama.generate(prompt_ids, ...)`` -- the
library's whole speculative path: the ``LlamaDraftModel`` proposes token ids, the target evaluates
them in one batch, and ``generate`` samples the target at each position and keeps going while the
sample equals the proposal (rolling the KV cache back at the first mismatch).  Drafts:

``prompt_lookup``  the library's own ``LlamaPromptLookupDecoding(max_ngram_size, num_pred_tokens=k)``;
``model``          a ``LlamaDraftModel`` subclass defined here: k greedy tokens of the draft GGUF
                   (a second ``Llama``), the usual way to put a draft *model* behind this API.

Engine statistics are derived here (the library reports none): every draft call is a round; its
accepted count is how many proposals the emitted tokens then matched (rounds cut by
max_new_tokens are left out); per-token origins: 0 a proposal the target's sample matched, 1 the
target's sample that differed from a proposal, 2 a target sample after all proposals matched or
with none (token 1 is one: drafting starts after it).
"""
import numpy as np


class _ProposalLog:
    """Wraps a LlamaDraftModel: records (tokens emitted before the call, proposals) of every call."""

    def __init__(self, inner, prompt_len_ref):
        self.inner, self.prompt_len_ref, self.calls = inner, prompt_len_ref, []

    def __call__(self, input_ids, **kwargs):
        out = self.inner(input_ids, **kwargs)
        self.calls.append((len(input_ids) - self.prompt_len_ref[0], np.asarray(out).astype(int).tolist()))
        return out


class Handler:
    def __init__(self, target_gguf, draft, num_draft_tokens, n_ctx, eos_token_id=None, draft_gguf=None, max_ngram_size=2, threads=1):
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding

        k = int(num_draft_tokens)
        if draft == "prompt_lookup":
            inner = LlamaPromptLookupDecoding(max_ngram_size=int(max_ngram_size), num_pred_tokens=k)
        else:
            draft_llm = Llama(model_path=draft_gguf, n_ctx=int(n_ctx), n_threads=int(threads), n_threads_batch=int(threads),
                              verbose=False, seed=1)

            class GreedyModelDraft(LlamaDraftModel):
                """k greedy tokens of a draft GGUF model."""

                def __call__(self, input_ids, **kwargs):
                    out = []
                    for token in draft_llm.generate(list(int(t) for t in input_ids), top_k=0, top_p=1.0, min_p=0.0, temp=0.0,
                                                    repeat_penalty=1.0, reset=True):
                        out.append(token)
                        if len(out) >= k:
                            break
                    return np.asarray(out, dtype=np.intc)

            inner = GreedyModelDraft()
        self._prompt_len = [0]
        self.log = _ProposalLog(inner, self._prompt_len)
        self.llm = Llama(model_path=target_gguf, draft_model=self.log, n_ctx=int(n_ctx), n_threads=int(threads),
                         n_threads_batch=int(threads), verbose=False, seed=1)
        self.k = k
        self.eos_token_id = eos_token_id

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds):
        prompt = [int(t) for t in prompt_ids]
        temp = float(sampling["temperature"])
        top_k = int(sampling["top_k"] or 0)
        top_p = float(sampling["top_p"] if sampling["top_p"] is not None else 1.0)
        min_p = float(sampling.get("min_p") or 0.0)
        presence = float(sampling.get("presence_penalty") or 0.0)
        frequency = float(sampling.get("frequency_penalty") or 0.0)
        rows = np.full((len(seeds), int(max_new_tokens)), -1, dtype=np.int64)
        origins = np.full(rows.shape, -1, dtype=np.int8)  # ORIGIN_CODES: 0 accepted, 1 recovered, 2 bonus
        counts, drafted = [], 0
        for row, seed in enumerate(seeds):
            self.llm.set_seed(int(seed))
            self._prompt_len[0] = len(prompt)
            self.log.calls = []
            emitted = []
            for token in self.llm.generate(prompt, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=1.0, temp=temp,
                                           repeat_penalty=1.0, frequency_penalty=frequency, presence_penalty=presence,
                                           reset=True):
                emitted.append(int(token))
                if len(emitted) >= max_new_tokens or (self.eos_token_id is not None and token == self.eos_token_id):
                    break
            rows[row, : len(emitted)] = emitted
            origin = [2] * len(emitted)  # a target sample no proposal was verified against (token 1, or after no proposal)
            for start, proposals in self.log.calls:
                if not proposals:
                    continue
                accepted = 0
                while accepted < len(proposals) and start + accepted < len(emitted) and emitted[start + accepted] == proposals[accepted]:
                    origin[start + accepted] = 0
                    accepted += 1
                if accepted < len(proposals) and start + accepted < len(emitted):
                    origin[start + accepted] = 1  # the target's sample that differed from the proposal
                if start + accepted < len(emitted):  # the round's outcome (mismatch or bonus) was seen
                    counts.append(accepted)
                    drafted += len(proposals)
            origins[row, : len(emitted)] = origin
        return {"tokens": rows, "accepted_counts": np.asarray(counts, dtype=np.int64), "rounds": len(counts),
                "drafted": drafted, "accepted": int(sum(counts)), "origins": origins}

    def target_logits(self, prompt_ids):
        prompt = [int(t) for t in prompt_ids]
        self.llm.reset()
        self.llm.eval(prompt)
        return {"logits": np.asarray(self.llm.scores[len(prompt) - 1], dtype=np.float64)}
