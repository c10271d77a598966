"""The :class:`EngineDecoder` of the ``llama-cpp-python`` adapter (imports numpy; see :mod:`verifier.engines.llama_cpp_python`)."""

from __future__ import annotations

from typing import Any

from verifier.engines.decoder import EngineDecoder
from verifier.errors import refuse_sampling

__all__ = ["LlamaCppPythonDecoder"]


class LlamaCppPythonDecoder(EngineDecoder):
    """:class:`EngineDecoder` that also refuses top-p with a temperature (the library applies top-p first)."""

    def check_sampling(self, sampling: Any) -> dict[str, Any]:
        fields = super().check_sampling(sampling)
        if fields["top_p"] is not None and fields["top_p"] < 1.0 and fields["temperature"] not in (0, 1.0):
            raise refuse_sampling("top-p", fields["top_p"], f"not set, or temperature 1: llama-cpp-python applies top-p before "
                                   f"temperature (its chain is fixed), which is not the Hugging Face law at temperature "
                                   f"{fields['temperature']}")
        return fields
