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
"""

from __future__ import annotations

import numpy as np


class Handler:
    def __init__(self, target_dir: str, draft_dir: str, num_draft_tokens: int, eos_token_id=None) -> None:
        import mlx.core as mx
        from mlx_lm import load

        mx.set_default_device(mx.cpu)
        self.mx = mx
        self.model, _ = load(target_dir)
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

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, return_logprobs=False):
        from mlx_lm.generate import speculative_generate_step

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
        for row, seed in enumerate(np.asarray(seeds).tolist()):
            mx.random.seed(int(seed))
            run = 0  # accepted drafts in the current round
            rounds_done = 0
            gen = speculative_generate_step(prompt, self.model, self.draft, num_draft_tokens=self.k,
                                            max_tokens=int(max_new_tokens), sampler=sampler)
            pos = 0
            for tok, lp, from_draft in gen:
                tokens[row, pos] = int(tok)
                if reported is not None:
                    reported[row, pos] = float(lp[int(tok)].item())
                pos += 1
                if from_draft:
                    run += 1
                else:
                    if rounds_done == 0:
                        first[row] = run
                    counts.append(run)
                    rounds_done += 1
                    run = 0
                if self.eos is not None and int(tok) == self.eos:
                    break
            gen.close()
            if run and rounds_done == 0:  # the first round ended at EOS or max_new_tokens after accepted drafts
                first[row] = run
            if run:
                counts.append(run)
            drafted_rounds += rounds_done
        reply = {"tokens": tokens, "first_round_accepted": first, "accepted_counts": np.asarray(counts, dtype=np.int64),
                 "rounds": len(counts), "accepted": int(sum(counts)),
                 "extra": {"stats_source": "from_draft flags yielded by speculative_generate_step (per round)"}}
        if reported is not None:
            reply["logprobs"] = reported
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
