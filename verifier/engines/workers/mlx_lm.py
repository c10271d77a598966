"""Worker handler for the ``mlx-lm`` adapter; runs inside the MLX-LM venv (stdlib + numpy + mlx/mlx_lm only).

Drives ``mlx_lm.generate.speculative_generate_step`` one sample at a time: ``mx.random.seed(seed)``,
then the generator with ``sampler = make_sampler(temp, top_p, top_k)`` (the same sampler for the
draft and the target -- mlx_lm uses one).  The generator yields ``(token, logprobs, from_draft)``:
``from_draft=True`` for a draft token the target accepted, ``False`` for the target's own token that
ends a round (recovered or bonus).  ``logprobs`` are the target's log-softmax of its raw logits
(before the sampler's top-k/top-p/temperature).

The generator does not stop at EOS (``stream_generate`` does): the handler stops at the first EOS
and pads with -1.  With ``return_logprobs`` the reply also has each emitted token's own entry of the
yielded ``logprobs`` row (the target's, for accepted drafts too), NaN after EOS.

With a stop rule (``stop_token_ids`` and / or ``max_tokens``; issue 29 kind 5) the row is driven through the
engine's own stop check instead: ``stream_generate(model, tokenizer, prompt, max_tokens=max_tokens,
draft_model=draft, num_draft_tokens=k, sampler=...)`` with ``tokenizer.eos_token_ids = {EOS, *stop_token_ids}``
(mlx_lm's per-request stop tokens: the set ``--extra-eos-token`` extends).  ``stream_generate`` checks each token
``speculative_generate_step`` yields -- accepted drafts one at a time -- against that set and against
``max_tokens`` and closes the generator after the first hit (the stop token is its last response).  The handler
records every response's token and cuts nothing, so a token after a stop or past ``max_tokens`` would show (rows
are ``max_new_tokens`` wide; reading ends there).
"""

from __future__ import annotations

import numpy as np


class Handler:
    def __init__(self, target_dir: str, draft_dir: str, num_draft_tokens: int, eos_token_id=None) -> None:
        import mlx.core as mx
        from mlx_lm import load

        mx.set_default_device(mx.cpu)
        self.mx = mx
        self.model, self.tokenizer = load(target_dir)
        self.draft, _ = load(draft_dir)
        self.k = int(num_draft_tokens)
        self.eos = None if eos_token_id is None else int(eos_token_id)

    def _sampler(self, sampling: dict, vocab: int):
        from mlx_lm.sample_utils import make_sampler

        temp = 1.0 if sampling.get("temperature") is None else float(sampling["temperature"])
        top_k = sampling.get("top_k")
        top_p = sampling.get("top_p")
        return make_sampler(temp=temp,
                            top_k=0 if top_k is None or int(top_k) >= vocab else int(top_k),  # mlx refuses top_k >= vocab
                            top_p=0.0 if top_p is None else float(top_p))  # mlx: 0 or 1 = off

    def _rows(self, prompt, sampler, max_new_tokens, stop_token_ids, max_tokens):
        """A factory of one row's ``(token, logprobs, from_draft)`` iterator (called after the row's seed is set), and
        whether the handler must cut at EOS itself (only on the bare ``speculative_generate_step`` path)."""
        from mlx_lm.generate import speculative_generate_step, stream_generate

        if not stop_token_ids and max_tokens is None:
            return (lambda: speculative_generate_step(prompt, self.model, self.draft, num_draft_tokens=self.k,
                                                      max_tokens=int(max_new_tokens), sampler=sampler)), True
        ends = {int(t) for t in (stop_token_ids or ())} | (set() if self.eos is None else {self.eos})
        self.tokenizer.eos_token_ids = ends  # stream_generate: `if token in tokenizer.eos_token_ids: break`
        limit = int(max_new_tokens if max_tokens is None else max_tokens)

        def stream():
            responses = stream_generate(self.model, self.tokenizer, prompt, max_tokens=limit, draft_model=self.draft,
                                        num_draft_tokens=self.k, sampler=sampler)
            try:
                for r in responses:
                    yield r.token, r.logprobs, r.from_draft
            finally:
                responses.close()
        return stream, False

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, return_logprobs=False, stop_token_ids=None,
                 max_tokens=None):
        mx = self.mx
        vocab = int(self.model.args.vocab_size)
        sampler = self._sampler(sampling, vocab)
        prompt = mx.array(np.asarray(prompt_ids, dtype=np.int64).tolist(), dtype=mx.uint32)
        n = len(seeds)
        tokens = np.full((n, int(max_new_tokens)), -1, dtype=np.int64)
        first = np.zeros(n, dtype=np.int64)
        reported = np.full((n, int(max_new_tokens)), np.nan) if return_logprobs else None
        counts: list[int] = []
        drafted_rounds = 0
        rows, cut_at_eos = self._rows(prompt, sampler, max_new_tokens, stop_token_ids, max_tokens)
        limit = int(max_new_tokens if max_tokens is None else max_tokens)
        origins = None if cut_at_eos else np.full(tokens.shape, -1, dtype=np.int8)  # 0 accepted, 1 recovered, 2 bonus
        for row, seed in enumerate(np.asarray(seeds).tolist()):
            mx.random.seed(int(seed))
            run = 0  # accepted drafts in the current round
            rounds_done = 0
            gen = rows()
            pos = 0
            for tok, lp, from_draft in gen:
                if pos == tokens.shape[1]:  # the row is full: a token past the width cannot be held (stop rule:
                    break  # the suite's max_tokens < width, so an overshoot shows before this)
                tokens[row, pos] = int(tok)
                if reported is not None:
                    reported[row, pos] = float(lp[int(tok)].item())
                pos += 1
                if origins is not None:  # a round drafts min(limit - tokens so far, k) (speculative_generate_step)
                    drafted = min(limit - (pos - 1 - run), self.k)
                    origins[row, pos - 1] = 0 if from_draft else (2 if run == drafted else 1)
                if from_draft:
                    run += 1
                else:
                    if rounds_done == 0:
                        first[row] = run
                    counts.append(run)
                    rounds_done += 1
                    run = 0
                if cut_at_eos and self.eos is not None and int(tok) == self.eos:
                    break
            gen.close()
            if run and rounds_done == 0:  # the first round ended at EOS or max_new_tokens after accepted drafts
                first[row] = run
            if run:
                counts.append(run)
            drafted_rounds += rounds_done
        reply = {"tokens": tokens, "first_round_accepted": first, "accepted_counts": np.asarray(counts, dtype=np.int64),
                 "rounds": len(counts), "accepted": int(sum(counts)),
                 "extra": {"stats_source": "from_draft flags yielded by speculative_generate_step (per round)"
                           + ("" if cut_at_eos else ", through stream_generate's responses (stop rule)")}}
        if reported is not None:
            reply["logprobs"] = reported
        if origins is not None:
            reply["origins"] = origins
        return reply

    def target_logits(self, prompt_ids):
        """The target's log-probs after ``prompt_ids`` as ``speculative_generate_step`` yields them (raw, before the sampler)."""
        from mlx_lm.generate import speculative_generate_step

        mx = self.mx
        prompt = mx.array(np.asarray(prompt_ids, dtype=np.int64).tolist(), dtype=mx.uint32)
        mx.random.seed(0)
        gen = speculative_generate_step(prompt, self.model, self.draft, num_draft_tokens=self.k, max_tokens=1,
                                        sampler=None)
        _tok, logprobs, _fd = next(gen)
        gen.close()
        return {"logits": np.asarray(logprobs.astype(mx.float32), dtype=np.float64)}
