"""The :class:`EngineDecoder` of the ``openvino-genai`` adapter (imports numpy; see :mod:`verifier.engines.openvino_genai_engine`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.engines.decoder import EngineDecoder
from verifier.errors import refuse_sampling

__all__ = ["OpenVINODecoder", "PENALTY_REFUSAL"]

# LogitTransformers::PresencePenaltyTransform / FrequencyPenaltyTransform (openvino.genai src/cpp/src/sampling/
# logit_transformers.hpp): the penalty moves a logit toward 0, it does not lower it
PENALTY_REFUSAL = ("OpenVINO GenAI moves a generated token's logit toward 0 (subtracts the penalty from a logit >= 0, "
                   "adds it to a negative one: 'reduces absolute log prob', LogitTransformers::{name}), while the "
                   "harness's law (OpenAI / vLLM) subtracts it from every generated token's logit")


class OpenVINODecoder(EngineDecoder):
    """:class:`EngineDecoder` that also refuses min-p together with top-p: OpenVINO GenAI runs top-k, temperature,
    min-p, then top-p (``LogitProcessor``), the harness top-p then min-p, and the two orders keep different sets."""

    def check_sampling(self, sampling: Any) -> dict[str, Any]:
        fields = super().check_sampling(sampling)
        if fields.get("min_p") is not None and fields["min_p"] >= 1.0 and fields["temperature"] != 0:
            raise refuse_sampling("min-p", fields["min_p"], "in [0, 1): OpenVINO GenAI rejects min_p >= 1 when sampling "
                                  "(GenerationConfig::validate)")
        if fields.get("min_p") and fields["top_p"] is not None and fields["top_p"] < 1.0:
            raise refuse_sampling("min-p", fields["min_p"], "not set together with top-p: OpenVINO GenAI applies min-p "
                                  "before top-p (LogitProcessor: top-k, temperature, min-p, top-p), the harness top-p "
                                  "before min-p, and the kept sets differ")
        return fields

    def _stats(self, reply: dict[str, Any], tokens: np.ndarray):
        """:meth:`EngineDecoder._stats`, and the precision the pipeline sampled at recorded in :attr:`settings`
        (``inference_precision``, e.g. ``"bf16"`` on a CPU with AMX, ``"f32"`` elsewhere or with ``precision=f32``):
        every shard's meta carries it, and the diagnosis computes the engine laws at it
        (:mod:`verifier.engines.reproductions.openvino_genai`)."""
        resolved = ((reply.get("extra") or {}).get("cpu_plugin_precision") or {}).get("resolved")
        if resolved:
            self.settings["inference_precision"] = str(resolved)
        return super()._stats(reply, tokens)
