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

Stop rule (``stop_token_ids`` / ``max_tokens`` + ``stop_strings``; issue 29 kind 5): each row is one
``Llama.create_completion(prompt_ids, max_tokens=max_tokens, stop=stop_strings, seed=seed, ...)`` -- the library's
own consumer of ``generate``, which checks every yielded token (accepted proposals one at a time): EOS
(``llama_vocab_is_eog``, not kept in its text), then the stop strings on the completion's text, then
``len(completion_tokens) >= max_tokens``.  The handler taps ``generate`` (an instance attribute wrapping the bound
method, passing every token on unchanged) and keeps every token the library pulled, uncut, so a token after a stop
or past ``max_tokens`` would show (reading ends at the row's width).  Before the first row it checks, with the
engine's own ``detokenize``, that the strings stop at exactly ``stop_token_ids`` and that the EOG set is {EOS}.
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

    def _check_stop_strings(self, stop_token_ids, stop_strings):
        """Refuse (a worker error) strings whose stop set on the engine's own token texts is not ``stop_token_ids``,
        or an end-of-generation set other than {EOS}: the rows would be read against another rule."""
        from llama_cpp import llama_cpp

        vocab = self.llm.n_vocab()
        texts = [self.llm.detokenize([t]) for t in range(vocab)]
        eos = self.eos_token_id
        engine_set = {t for t in range(vocab) if t != eos and any(s.encode() in texts[t] for s in stop_strings)}
        wanted = {int(t) for t in stop_token_ids if t != eos}
        if engine_set != wanted:
            raise ValueError(f"stop strings {stop_strings} stop this engine at ids {sorted(engine_set)}, not at "
                             f"stop_token_ids {sorted(wanted)} (the engine's token texts differ from tokenizer.json)")
        eog = [t for t in range(vocab) if llama_cpp.llama_vocab_is_eog(self.llm._model.vocab, t)]
        if eog != ([] if eos is None else [int(eos)]):
            raise ValueError(f"the engine ends generation at ids {eog} (llama_vocab_is_eog), the harness at EOS {eos}")

    def _completion_row(self, prompt, width, limit, stop_strings, seed, params):
        """One row through ``create_completion``'s stop check: every token ``generate`` yielded to it, and the
        finish reason it reported."""
        pulled = []
        inner = type(self.llm).generate.__get__(self.llm)

        def tap(*args, **kwargs):
            gen = inner(*args, **kwargs)
            try:
                for token in gen:
                    pulled.append(int(token))
                    yield token
                    if len(pulled) >= width:  # the row is full (width > max_tokens: an overshoot already shows)
                        return
            finally:
                gen.close()

        self.llm.generate = tap
        try:
            out = self.llm.create_completion(prompt, max_tokens=int(limit), stop=list(stop_strings), seed=int(seed),
                                             temperature=params["temp"], top_k=params["top_k"], top_p=params["top_p"],
                                             min_p=params["min_p"], typical_p=1.0, repeat_penalty=1.0,
                                             frequency_penalty=params["frequency_penalty"],
                                             presence_penalty=params["presence_penalty"])
        finally:
            del self.llm.generate
        return pulled, out["choices"][0]["finish_reason"]

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, stop_token_ids=None, max_tokens=None,
                 stop_strings=None):
        prompt = [int(t) for t in prompt_ids]
        stop_rule = bool(stop_token_ids) or max_tokens is not None
        if stop_rule:
            self._check_stop_strings(stop_token_ids or (), stop_strings or ())
        limit = int(max_new_tokens if max_tokens is None else max_tokens)
        finish = {}
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
            if stop_rule:
                params = {"temp": temp, "top_k": top_k, "top_p": top_p, "min_p": min_p, "frequency_penalty": frequency,
                          "presence_penalty": presence}
                emitted, reason = self._completion_row(prompt, int(max_new_tokens), limit, stop_strings or (), seed,
                                                       params)
                finish[reason] = finish.get(reason, 0) + 1
            else:
                for token in self.llm.generate(prompt, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=1.0,
                                               temp=temp, repeat_penalty=1.0, frequency_penalty=frequency,
                                               presence_penalty=presence, reset=True):
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
        reply = {"tokens": rows, "accepted_counts": np.asarray(counts, dtype=np.int64), "rounds": len(counts),
                 "drafted": drafted, "accepted": int(sum(counts)), "origins": origins}
        if stop_rule:
            reply["extra"] = {"finish_reasons": finish, "stop_strings": list(stop_strings or ())}
        return reply

    def target_logits(self, prompt_ids):
        prompt = [int(t) for t in prompt_ids]
        self.llm.reset()
        self.llm.eval(prompt)
        return {"logits": np.asarray(self.llm.scores[len(prompt) - 1], dtype=np.float64)}
