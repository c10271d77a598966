"""The :class:`EngineDecoder` of the ``llama-cpp-python`` adapter (imports numpy; see :mod:`verifier.engines.llama_cpp_python`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from verifier.engines._stop_strings import stop_strings, token_texts
from verifier.engines.decoder import EngineDecoder
from verifier.errors import refuse_sampling

__all__ = ["LlamaCppPythonDecoder", "PENALTY_LAST_N"]

# Llama(last_n_tokens_size=64): the penalty sampler's window of sampled tokens (llama_sampler_init_penalties)
PENALTY_LAST_N = 64


class LlamaCppPythonDecoder(EngineDecoder):
    """:class:`EngineDecoder` that refuses what llama-cpp-python's fixed sampler chain does not express as the
    harness's law: top-p or min-p with a temperature (both run before temperature), the repetition penalty (the
    library's never reads the prompt), and presence / frequency penalties past the 64-token window."""

    checkpoint = None  # the target's Hugging Face folder (its tokenizer.json maps stop ids to stop strings)
    _texts: list[bytes] | None = None

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

    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int, sampling: Any, seed: int, *,
                 stop_token_ids: Sequence[int] = (), max_tokens: int | None = None) -> np.ndarray:
        """As :meth:`EngineDecoder.generate`; refuses presence / frequency penalties over rows longer than the
        library's penalty window (``PENALTY_LAST_N`` sampled tokens; the harness counts every generated token).

        A stop rule (``stop_token_ids`` / ``max_tokens``, issue 29 kind 5) runs each row through
        ``Llama.create_completion(stop=STRINGS, max_tokens=max_tokens)``, the library's own stop check; the stop
        tokens must be expressible as one-character stop strings (:func:`verifier.engines._stop_strings.stop_strings`:
        an InvalidArgumentError, exit 2, before the engine starts, otherwise)."""
        if getattr(sampling, "counts_generated", False) and max_new_tokens > PENALTY_LAST_N:
            raise refuse_sampling("max-new-tokens", max_new_tokens, f"<= {PENALTY_LAST_N} with a presence or frequency "
                                  f"penalty: llama-cpp-python counts only the last {PENALTY_LAST_N} sampled tokens "
                                  "(Llama(last_n_tokens_size=64)), the harness every generated token")
        return super().generate(prompt_ids, num_samples, max_new_tokens, sampling, seed, stop_token_ids=stop_token_ids,
                                max_tokens=max_tokens)

    def _stop_keywords(self, stop_token_ids: Sequence[int], max_tokens: int | None, max_new_tokens: int) -> dict[str, Any]:
        """:meth:`EngineDecoder._stop_keywords` plus ``stop_strings``: the one-character stop strings whose stop set
        is exactly ``stop_token_ids`` on the target's token texts (checked before the engine starts)."""
        extra = super()._stop_keywords(stop_token_ids, max_tokens, max_new_tokens)
        if extra:
            if self._texts is None:
                self._texts = token_texts(self.checkpoint)
            extra["stop_strings"] = stop_strings(extra["stop_token_ids"], self._texts, eos_token_id=self.eos_token_id)
        return extra
