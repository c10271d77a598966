"""The :class:`EngineDecoder` of the ``llama-cpp-python`` adapter (imports numpy; see :mod:`verifier.engines.llama_cpp_python`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from verifier.engines.decoder import EngineDecoder
from verifier.errors import refuse_sampling

__all__ = ["LlamaCppPythonDecoder", "PENALTY_LAST_N"]

# Llama(last_n_tokens_size=64): the penalty sampler's window of sampled tokens (llama_sampler_init_penalties)
PENALTY_LAST_N = 64


class LlamaCppPythonDecoder(EngineDecoder):
    """:class:`EngineDecoder` that refuses what llama-cpp-python's fixed sampler chain does not express as the
    harness's law: top-p or min-p with a temperature (both run before temperature), the repetition penalty (the
    library's never reads the prompt), and presence / frequency penalties past the 64-token window."""

    def check_sampling(self, sampling: Any) -> dict[str, Any]:
        rep = getattr(sampling, "repetition_penalty", None)
        if rep is not None and rep != 1.0:
            raise refuse_sampling("repetition-penalty", rep, "not set: llama-cpp-python's repeat penalty counts only "
                                  "the tokens its sampler chain sampled (a fresh chain per generate call; the prompt "
                                  "never enters its window), while the harness's repetition penalty also reads the "
                                  "prompt; presence and frequency penalties (generated tokens only) are expressible")
        fields = super().check_sampling(sampling)
        for name in ("top_p", "min_p"):
            value = fields.get(name)
            if value is not None and (value < 1.0 if name == "top_p" else value > 0.0) and fields["temperature"] not in (0, 1.0):
                raise refuse_sampling(name.replace("_", "-"), value, f"not set, or temperature 1: llama-cpp-python "
                                      f"applies {name.replace('_', '-')} before temperature (its chain is fixed: "
                                      "penalties, top-k, typical, top-p, min-p, temperature), which is not the "
                                      f"Hugging Face law at temperature {fields['temperature']}")
        return fields

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int) -> np.ndarray:
        """As :meth:`EngineDecoder.generate`; refuses presence / frequency penalties over rows longer than the
        library's penalty window (``PENALTY_LAST_N`` sampled tokens; the harness counts every generated token)."""
        if getattr(sampling, "counts_generated", False) and max_new_tokens > PENALTY_LAST_N:
            raise refuse_sampling("max-new-tokens", max_new_tokens, f"<= {PENALTY_LAST_N} with a presence or frequency "
                                  f"penalty: llama-cpp-python counts only the last {PENALTY_LAST_N} sampled tokens "
                                  "(Llama(last_n_tokens_size=64)), the harness every generated token")
        return super().generate(prompt_ids, num_samples, max_new_tokens, sampling, seed)
